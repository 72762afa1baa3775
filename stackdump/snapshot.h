/* snapshot: stop one thread only to copy its registers and the live part of
 * its stack, then let it go.  Internal to stackdump/.
 *
 * Everything else (unwinding, modules, names) works on the copy after the
 * thread runs again, so the stop does not grow with stack depth, thread
 * count or symbol lookup.  Measured on a 1,003-thread target (see
 * bench/README.md §7): unwinding while stopped 1.3-3 ms;
 * interrupt, GETREGS, 16 KiB process_vm_readv, detach 55 µs as seen by the
 * target.
 *
 * A thread that does not stop within the deadline keeps a pending
 * interrupt the kernel cannot withdraw: it stays on a pending list until it
 * stops and snapshot_poll() detaches it.
 */
#ifndef CPUMOND_STACKDUMP_SNAPSHOT_H
#define CPUMOND_STACKDUMP_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "stackdump/procmaps.h"

/* The x86-64 ABI lets a leaf function use 128 bytes below the stack
 * pointer (the red zone): they are copied too. */
#define SNAPSHOT_RED_ZONE 128

/* How long a dump waits for the thread to stop (ns).  A running thread
 * stops within microseconds of the interrupt; one that is not scheduled for
 * 100 ms is left to snapshot_poll(). */
#define SNAPSHOT_DEADLINE_NS (100 * 1000000ull)

struct snapshot {
	struct user_regs_struct regs;
	uint64_t stack_addr;     /* target address of stack[0] */
	size_t stack_len;        /* bytes copied, from stack_addr on */
	bool stack_clipped;      /* the copy ended at the end of the stack mapping
	                            or of readable memory, not at the cap */
	unsigned char *stack;    /* a buffer of cap bytes, the caller's */
	size_t cap;              /* 0: registers only (bench/stop_bench) */
	/* A handler running on an alternate signal stack (sigaltstack): its
	 * signal frame is in the copy, but the stack it interrupted is
	 * elsewhere.  When the copy holds a return address to SIGRETURN (set
	 * by the caller: the process's signal return trampoline, 0 when
	 * unknown) whose saved stack pointer lies outside the copy, that
	 * stack is copied too, from its stack pointer - SNAPSHOT_RED_ZONE, up
	 * to cap2 bytes. */
	uint64_t sigreturn;
	unsigned char *stack2;   /* a buffer of cap2 bytes, the caller's */
	size_t cap2;
	uint64_t stack2_addr;
	size_t stack2_len;       /* 0 when there was none to copy */
	uint64_t stop_start_ns;  /* CLOCK_MONOTONIC at PTRACE_INTERRUPT */
	uint64_t stop_ns;        /* PTRACE_INTERRUPT .. PTRACE_DETACH */
	/* When not NULL, called once inside the window, after the registers
	 * and the stack were copied, before the detach, with IN_STOP_ARG, the
	 * thread's tid and this snapshot: more of the stopped thread's memory
	 * to copy (pyframes_in_stop: its Python thread state).  It must not
	 * allocate, open a file or block. */
	void (*in_stop)(void *arg, pid_t tid, const struct snapshot *snap);
	void *in_stop_arg;
};

/* Where the live stacks of recently dumped threads were.  Before the next
 * stop of such a thread, its last range is read once while it runs: the
 * copy inside the stop then finds the target's page tables and pages in
 * this CPU's caches (measured on a 1,003-thread target: the in-window copy
 * of 4.7 KiB took 15 µs median, 54 µs p99 cold, 4 and 13 µs warm).  Once
 * it has stopped, the same range is copied before PTRACE_GETREGS, which
 * first waits for the thread to leave its CPU (14 µs median): the copy
 * takes place during that wait, and is kept when the stack pointer lies
 * in it. */
#define SNAPSHOT_HINTS 16

struct snapshot_hint {
	pid_t tid;
	uint64_t addr;
	size_t len;
};

struct snapshot_hints {
	struct snapshot_hint v[SNAPSHOT_HINTS];
	unsigned next;           /* the slot a new thread takes */
};

/* Threads interrupted that have not stopped yet (not detached). */
struct snapshot_pending {
	pid_t *v;
	size_t n, cap;
};

/* Stops thread TID of process PID, copies its registers and the stack from
 * the stack pointer - SNAPSHOT_RED_ZONE up to SNAP->cap bytes (no further
 * than the end of the writable mapping of MAPS holding the stack pointer,
 * when MAPS knows it), and detaches.  CPU is the CPU the thread last ran
 * on (/proc stat field 39), or -1.  HINTS, when not NULL, warms and
 * records the stack range of TID.  Returns 0, or -errno with a message in
 * ERR: -EPERM (tracer named), -ESRCH (exited), -ETIMEDOUT (did not stop in
 * time: left on PEND), -ENOMEM, others. */
int snapshot_take(struct snapshot_pending *pend, struct snapshot_hints *hints,
                  pid_t pid, pid_t tid, int cpu, const struct procmaps *maps,
                  struct snapshot *snap, char *err, size_t errsize);

/* Detaches the pending threads that have stopped since (never blocks).
 * Returns how many are still pending. */
int snapshot_poll(struct snapshot_pending *pend);

bool snapshot_pending_has(const struct snapshot_pending *pend, pid_t tid);
void snapshot_pending_free(struct snapshot_pending *pend);

/* The words of the copied stacks, for the unwinder: true with *VAL when
 * the 8 bytes at ADDR were copied. */
bool snapshot_word(const struct snapshot *snap, uint64_t addr, uint64_t *val);

/* strerror(E) in BUF (SIZE bytes), its first letter lowercased as messages
 * are ("no such process"); returns BUF.  For stackdump's own messages. */
const char *snapshot_strerror(int e, char *buf, size_t size);

/* Copies the stack whose pointer is SP into BUF (CAP bytes): from
 * SP - SNAPSHOT_RED_ZONE up, no further than the end of the writable
 * mapping of MAPS (may be NULL) holding SP.  The stop's copy, and a
 * blocked thread's without a stop (stackdump_copy_blocked).  Returns the
 * bytes copied, their address in *FROM_OUT. */
size_t snapshot_copy_stack(pid_t tid, const struct procmaps *maps, uint64_t sp,
                           unsigned char *buf, size_t cap, uint64_t *from_out);

#endif
