/* stackdump: stop one thread, unwind its user stack, let it go.
 *
 * A small library with no knowledge of the configuration or the database,
 * and the engine of the standalone `stackdump TID` command.  The thread is
 * stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (the other threads of its
 * process keep running) and always detached before stackdump_thread returns.
 */
#ifndef CPUMOND_STACKDUMP_H
#define CPUMOND_STACKDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define STACKDUMP_MAX_FRAMES 1024

/* One frame.  ip is the absolute address (changes with ASLR); the rest is
 * relative to the module, so it is the same at every load address. */
struct stackdump_frame {
	uint64_t ip;             /* absolute instruction pointer */
	uint64_t offset;         /* ip - module load bias: offset in the module */
	uint64_t func_offset;    /* start of the function (FDE initial location)
	                            as a module offset; == offset when no unwind
	                            table covers the ip */
	char *module;            /* path of the mapping ("[vdso]", "?" if none) */
	char *build_id;          /* GNU build-id as lowercase hex, "" if none */
	char *symbol;            /* function name, NULL when unknown */
	uint64_t symbol_offset;  /* ip - symbol start, valid when symbol */
};

struct stackdump_stack {
	struct stackdump_frame *frames;  /* innermost first */
	size_t nframes;
	bool truncated;          /* max_frames was reached before the outermost frame */
	uint64_t hash;           /* stackdump_hash() of the frames; 0 when nframes == 0 */
	uint64_t stop_ns;        /* how long the thread was stopped (interrupt..detach) */
	char error[256];         /* "" on success, else why there is no (full) stack */
};

struct stackdump;            /* per-daemon state: caches per process */

/* Returns a new dumper, or NULL with errno set. */
struct stackdump *stackdump_new(void);
void stackdump_free(struct stackdump *sd);

/* Dumps thread TID of process PID: stops it, unwinds at most MAX_FRAMES
 * frames, detaches.  Returns 0 with a stack in *OUT, or a negative errno with
 * OUT->error saying why in words a user can act on (for example
 * "tid 4242 is already traced by pid 311 (gdb)" for -EPERM, "tid 4242 exited"
 * for -ESRCH).  OUT is always initialised and must be released with
 * stackdump_stack_free, also on failure. */
int stackdump_thread(struct stackdump *sd, pid_t pid, pid_t tid, int max_frames,
                     struct stackdump_stack *out);

/* Forgets what is cached for process PID (call when it exits). */
void stackdump_forget(struct stackdump *sd, pid_t pid);

void stackdump_stack_free(struct stackdump_stack *st);

/* 64-bit hash of the frames' (build-id, or module path when there is no
 * build-id; func_offset) pairs, so the same code path hashes the same at any
 * load address and whichever instruction of the function was caught.
 * Never returns 0 for nframes > 0. */
uint64_t stackdump_hash(const struct stackdump_frame *frames, size_t nframes);

/* Prints "#N symbol+0xoff (module)" or "#N module+0xoffset" lines, each
 * prefixed by INDENT; names are escaped (no control bytes reach OUT). */
void stackdump_print(const struct stackdump_stack *st, const char *indent, FILE *out);

/* Writes S to OUT with control bytes (< 0x20, 0x7f), bytes that are not
 * valid UTF-8 and the backslash written as \xNN (a backslash as \\), so a hostile name
 * cannot drive the terminal.  Used by every human-readable printer. */
void stackdump_put_escaped(const char *s, FILE *out);

#endif
