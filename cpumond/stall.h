/* stall: threads that make no progress.
 *
 * A watched thread is stalled when it has not been scheduled at all for
 * `stall_after` (its schedstat run time and timeslice count, which the
 * sampler reads anyway, did not move: sampler_thread.still) and it is not
 * in an ordinary idle wait.  A thread that stopped running cannot change
 * what it waits on, so its wait is read once per still period, when it
 * reaches stall_after, and not again until it runs: 1,000 idle threads
 * cost nothing after their first check (make bench, "Stall detection").
 *
 * The rules, from /proc/TID/stat's state and /proc/TID/syscall (the
 * syscall number and arguments it is blocked in; x86-64 and arm64 numbers
 * through <sys/syscall.h>):
 *   - state D (uninterruptible): a stall, whatever the syscall (a vfork
 *     parent while its child runs, a page fault on a stuck file system,
 *     a FUSE request's waiters).  "Sat in D that long" is read as "in D
 *     without running": a thread that leaves D and comes back within each
 *     interval makes progress, and telling it apart would need every
 *     thread's state every cycle (a stat read each, 5 µs).
 *   - state R with "running" (runnable, never scheduled): not a stall but
 *     starvation, the `starved` kind's; T and t (stopped by a signal or a
 *     debugger, on purpose) and Z, X: nothing.
 *   - futex FUTEX_WAIT(_PRIVATE) with val 2: glibc's contended lock word
 *     (lowlevellock: 0 free, 1 taken, 2 taken with waiters).  It is a lock
 *     wait, a stall, when the word at uaddr still holds 2 and the int at
 *     uaddr + 8 (pthread_mutex_t's __owner) is a thread of the process;
 *     FUTEX_LOCK_PI(2) likewise, the owner being the word's low 30 bits.
 *     Any other futex wait (a condition variable's FUTEX_WAIT_BITSET, a
 *     semaphore, pthread_join) is idle.
 *   - idle: epoll_wait/epoll_pwait/epoll_pwait2, poll/ppoll, select/
 *     pselect6, nanosleep/clock_nanosleep, accept/accept4, pause,
 *     rt_sigsuspend, rt_sigtimedwait, wait4/waitid, io_getevents,
 *     io_uring_enter, msgrcv, semtimedop; read/readv/recvfrom/recvmsg on
 *     a pipe, socket, tty, eventfd, signalfd, timerfd, inotify or
 *     anon inode (what /proc/PID/fd/N points to).
 *   - anything else not running for stall_after is a stall: blocked
 *     outside a syscall (-1: a page fault), read of a regular file or a
 *     device, write, flock, fcntl(F_SETLKW), fsync, ...
 *
 * A stall is one event when it is found, and a second row of kind stall
 * when the thread runs again, its details {"ended":true,"duration_ms":N,
 * "started_us":T}: tail -f, the event log and the journal are append-only
 * streams, so an update of a row they already passed on would never reach
 * them.  At most one stall event per thread per cooldown.
 *
 * This module is the pure part: the rules above (stall_classify), the
 * names, the owner chain and its cycle (stall_owner_chain), and the
 * per-thread state (stall_observe, stall_checked, stall_sweep).  What
 * reads a process's memory or its maps, which can block on its memory-map
 * lock (process_vm_readv, /proc/PID/maps), runs in a child process with a
 * deadline (stall_probe.h).
 */
#ifndef CPUMOND_STALL_H
#define CPUMOND_STALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "procfs/procfs.h"

/* The deepest owner chain followed: the waiter, then up to this many
 * owners, each waiting on the next one's lock. */
#define STALL_OWNER_DEPTH 4

enum stall_verdict {
	STALL_IGNORE,        /* running, stopped, gone: not this kind's */
	STALL_IDLE,          /* an ordinary idle wait */
	STALL_LOCK,          /* a futex lock wait, when its owner is confirmed */
	STALL_STUCK,         /* a stall */
};

/* What is known of a blocked thread: its state letter (stat field 3),
 * its syscall file, and FD_TARGET, what /proc/PID/fd/N points to for the
 * syscall's first argument ("pipe:[1234]", "socket:[99]", "/var/x"), or
 * NULL when the syscall takes no descriptor or the link was not read. */
enum stall_verdict stall_classify(char state, const struct procfs_syscall *sc,
                                  const char *fd_target);

/* Whether the syscall SC is blocked in takes a descriptor as its first
 * argument that stall_classify looks at (read, readv, recvfrom, recvmsg). */
bool stall_wants_fd(const struct procfs_syscall *sc);

/* The name of syscall NR ("futex", "vfork"), or NULL when it is not one
 * this module names (the caller prints the number). */
const char *stall_syscall_name(long nr);

/* The name of futex operation OP (its second argument) with its flags:
 * "FUTEX_WAIT_PRIVATE", "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME";
 * NULL for an operation not named. */
const char *stall_futex_op_name(uint64_t op, char *buf, size_t len);

/* For a futex wait SC: true when it is a lock wait to confirm, with the
 * address of the int naming the owner in *OWNER_ADDR and whether that
 * int is a PI futex word (the owner in its low 30 bits) in *PI. */
bool stall_lock_wait(const struct procfs_syscall *sc, uint64_t *owner_addr, bool *pi);

/* The owner tid from WORD, the int at the owner address (a PI futex
 * word: its FUTEX_TID_MASK bits). */
pid_t stall_owner_from_word(uint32_t word, bool pi);

/* The lock owner chain from TID: OWNER_OF(tid, ARG) gives the thread
 * holding the lock TID waits on, 0 when it waits on none (or that is not
 * known).  Fills CHAIN with the owners in order (CHAIN[0] TID's owner),
 * at most STALL_OWNER_DEPTH, and returns how many.  When an owner is
 * met again the chain is a cycle, a deadlock: *CYCLE_FROM gets -1 when
 * the cycle is TID and all of CHAIN, else the index in CHAIN where it
 * starts (TID waits into a deadlock of others); no cycle: -2. */
size_t stall_owner_chain(pid_t tid, pid_t (*owner_of)(pid_t tid, void *arg), void *arg,
                         pid_t chain[STALL_OWNER_DEPTH], int *cycle_from);

/* The per-thread state, by the sampler's thread key. */
struct stall;

struct stall *stall_new(void);
void stall_free(struct stall *st);

enum stall_step {
	STALL_NOTHING,       /* nothing to do */
	STALL_CHECK,         /* still for stall_after and not checked since it
	                        last ran: classify it, then stall_checked */
	STALL_ENDED,         /* it ran again after a stall event: *SINCE_MS is
	                        when the stall began (the last cycle it ran) */
};

/* The N-over-T rule of stall events: a thread is checked once it has been
 * still for STALL_AFTER_MS at CONSECUTIVE cycles in a row, that is still
 * for STALL_AFTER_MS plus CONSECUTIVE - 1 intervals of INTERVAL_MS (a
 * CONSECUTIVE below 1 counts as 1). */
uint64_t stall_due_ms(uint64_t stall_after_ms, int consecutive, uint64_t interval_ms);

/* One cycle's fact of thread KEY: STILL (not scheduled since the last
 * cycle; sampler_thread.still), at NOW_MS (monotonic).  *SINCE_MS gets
 * the last time it was seen running (or first seen). */
enum stall_step stall_observe(struct stall *st, uint64_t key, bool still, uint64_t now_ms,
                              uint64_t stall_after_ms, uint64_t *since_ms);

/* After STALL_CHECK: STALLED says what was found.  Returns true when an
 * event is to be made: stalled, and no stall event of KEY within
 * COOLDOWN_MS before NOW_MS.  Either way KEY is not checked again until
 * it runs. */
bool stall_checked(struct stall *st, uint64_t key, bool stalled, uint64_t now_ms,
                   uint64_t cooldown_ms);

/* Ends a cycle: forgets the threads not observed since the last sweep.
 * Returns how many are kept. */
size_t stall_sweep(struct stall *st);

#endif
