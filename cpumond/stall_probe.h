/* stall_probe: what a stalled thread waits on and its user stack, read in
 * a child process with a deadline.
 *
 * The reads a stall needs beyond its syscall file wait for the target's
 * memory-map lock: process_vm_readv (the lock owner at uaddr + 8, the
 * stack copy) and /proc/PID/maps (the stack's mapping, the unwinder's
 * modules).  A process whose lock is held by a thread stuck in a page
 * fault would hold them, and the daemon's one loop with them, for as long
 * as it stays stuck.  So they run in a child of the daemon (fork, which
 * copies nothing but page tables: the probe reads its answer on a pipe)
 * that is killed at the deadline; the daemon then records the stall with
 * what its own safe reads gave (state, syscall, wchan) and says the probe
 * timed out.  Only threads already found not to have run for stall_after
 * are probed, one child at a time.
 *
 * What the child reads, into the event's details (one JSON object):
 *   "state", "wchan", "syscall" {"nr","name","args","futex_op","fd",
 *   "fd_target"}, "lock" {"addr","owner","owners": [{"tid","comm",
 *   "state","syscall","wchan"}...]} for a lock wait, "deadlock": [tids]
 *   when the owners come round to a thread met before, "kernel_stack":
 *   [frames] or "kernel_stack_error" (it needs CAP_SYS_ADMIN),
 *   "threads": [{"state","syscall","wchan","count"}...] (the process's
 *   threads by the three, most first), "stack_error" when there is no
 *   stack, "probe_ms" (the child's time, as the daemon waited for it:
 *   6-10 ms each on stallcases here, fork, reads and unwind); and the
 *   stack (stackdump_thread_blocked: the thread is never stopped).
 */
#ifndef CPUMOND_STALL_PROBE_H
#define CPUMOND_STALL_PROBE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "cpumond/capture.h"
#include "cpumond/sampler.h"
#include "cpumond/stall.h"
#include "cpumond/watch.h"
#include "stackdump/stackdump.h"

/* Threads classified a cycle at most (stall_probe_classify): its three
 * reads cost 33-43 µs a thread here (make bench, "Stall detection"), so
 * 1,000 threads going still at once would add 40 ms to one cycle; the
 * rest wait for the next cycles. */
#define STALL_CHECKS_PER_CYCLE 256

/* How long the child may take (ms).  The unwind of a cold process (its
 * modules' unwind tables and names) took 8-40 ms here. */
#define STALL_PROBE_DEADLINE_MS 500

struct stall_probe_result {
	enum stall_verdict verdict;  /* STALL_STUCK, STALL_IDLE (a futex wait that is
	                                no lock wait), STALL_IGNORE (it ran) */
	char *details;               /* a JSON object text, never NULL on success */
	struct stackdump_stack stack;   /* may have no frames: error says why */
	char error[256];             /* why there is no stack, "" otherwise */
	bool timed_out;              /* the child was killed at the deadline */
	uint64_t probe_ms;           /* how long it took */
};

/* Probes thread TID of PID, found still since SINCE_MS (monotonic) at
 * NOW_MS, in a child, waiting at most STALL_PROBE_DEADLINE_MS.  MAX_FRAMES
 * and STACK_BYTES as stackdump's.  Returns 0 with *OUT (release with
 * stall_probe_result_free), or -errno when no child could be made (OUT
 * then holds the daemon's own reads, verdict STALL_STUCK). */
int stall_probe(pid_t pid, pid_t tid, uint64_t still_ms, int max_frames, size_t stack_bytes,
                struct stall_probe_result *out);

void stall_probe_result_free(struct stall_probe_result *r);

/* Reaps the children killed at their deadline that have exited since
 * (waitpid WNOHANG).  Once a cycle. */
void stall_probe_reap(void);

/* Whether thread TID of PID is to be probed: reads its state, its syscall
 * file and, for a read, what its descriptor points to (none of which
 * waits for the memory-map lock) and classifies them (stall_classify).
 * Returns the verdict; STALL_IGNORE when it is gone or cannot be read. */
enum stall_verdict stall_probe_classify(pid_t pid, pid_t tid);

/* One cycle of stall detection over the sampler's THREADS of PROCS
 * (nothing when stall_after is off): each thread's stillness to ST, the
 * threads still for stall_after classified, the ones that may be stalled
 * probed (at most STALL_CHECKS_PER_CYCLE classified and two probed a
 * cycle, the others in the next ones), and each stall, and
 * each end of one, handed to capture as a kind stall event of one copied
 * sample (capture_copied). */
void stall_cycle(struct stall *st, const struct config *cfg, const struct watch_proc *procs,
                 const struct sampler_thread *threads, size_t n, struct capture *c,
                 uint64_t now_ms);

#endif
