/* unwind: libunwind's remote API over a snapshot, after the thread runs
 * again.  Internal to stackdump/.
 *
 * Our accessors serve the registers and the stack from the snapshot, the
 * unwind tables from the copies the module cache holds, and other memory
 * only from the process's module mappings (code does not change under us;
 * the stack and the heap do, so they are never read live).
 */
#ifndef CPUMOND_STACKDUMP_UNWIND_H
#define CPUMOND_STACKDUMP_UNWIND_H

#include <libunwind.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stackdump/modules.h"
#include "stackdump/snapshot.h"

struct unwind_frame {
	uint64_t ip;
	uint64_t start;          /* FDE initial location, when has_start */
	bool has_start;
	bool signal;             /* the signal trampoline: the next frame's ip
	                            is the interrupted instruction, not a
	                            return address */
};

struct unwind_result {
	size_t n;                /* frames in the array */
	bool truncated;          /* MAX frames reached before the outermost */
	int uerr;                /* libunwind error that ended it early, or 0 */
	bool short_stack;        /* it wanted stack beyond the copy's cap */
	size_t stack_used;       /* bytes of the stack copy from its start up to
	                            the end of the highest word it read */
	bool unknown_ip;         /* a frame's code is in no mapping of the
	                            cached maps: they are stale */
};

/* A libunwind address space using these accessors, or NULL. */
unw_addr_space_t unwind_create_space(void);

/* Unwinds SNAP of a thread of AS into at most MAX frames of OUT. */
void unwind_snapshot(const struct addrspace *as, const struct snapshot *snap,
                     size_t max, struct unwind_frame *out, struct unwind_result *res);

#endif
