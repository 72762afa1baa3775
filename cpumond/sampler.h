/* sampler: each watched thread's CPU usage over the last interval.
 *
 * Usage is on a 0..1000 scale: 1000 is one full core for the whole elapsed
 * time, measured with CLOCK_MONOTONIC between two reads of the same thread,
 * not the nominal interval.  A thread that ran more than the elapsed time
 * (the clock read and the schedstat read are not atomic) is clamped at 1000.
 *
 * The hot path keeps /proc/PID/task/TID/schedstat open and preads it: about
 * 1-2.5 µs per thread against 15 µs for libproc2's PIDS_SELECT_PID_THREADS,
 * which opens and parses stat and status for every thread every time
 * (bench/README.md §1 and §7).  Nothing is allocated per thread per
 * cycle once a thread is known.
 *
 * Two shortcuts below the per-thread floor (bench/README.md has the numbers):
 *  - The task directory is listed only when the thread count (the nlink of
 *    /proc/PID/task, one fstat) differs from the threads known, or a known
 *    thread could not be read: otherwise the live threads are exactly the
 *    known ones.
 *  - Gating: a process whose whole CPU time over the interval (its process
 *    CPU clock, one clock_gettime) was no more than its watch_proc gate
 *    cannot have a thread above it, so its threads are not read at all that
 *    cycle; they come out with `gated` set and the process's usage as an
 *    upper bound.  When the process is read again, each known thread's usage
 *    is a lower bound: the CPU the whole process used during the gated
 *    cycles is taken off the thread's delta (exact when the process idled).
 *    Threads born while their process was gated are found when it is read
 *    again and, like every new thread, have no usage in that first cycle.
 *    Measured at a 3 s cadence on 1,000 idle threads: 31 µs a gated cycle
 *    against 2,006 µs read; listing them anyway would cost 800 µs, so it is
 *    not done, and such a newborn turning hot is seen one cycle later than
 *    without the gate (bench/README.md, "Gating: the decision").
 *
 * Demand, for starved events: the kernel adds a thread's run-queue wait to
 * its schedstat only when the thread gets a CPU, so a thread runnable but
 * never scheduled shows run time, wait and slices all frozen.  A thread
 * whose run time did not move has its state read (/proc/TID/stat, by
 * path) and, when it was R and still has not run a cycle later, it waited
 * that whole interval.  That read, and skipping a gated process, hold only
 * where a wait long enough to matter was possible given the host's CPU
 * pressure over the interval (sampler_set_cpu_wait, sampler_wait_possible):
 * on a host without CPU contention neither costs anything.  PSI counts a
 * wait behind a cgroup's CPU quota too: a cgroup holding one spinner held
 * to 1 ms a second had its cpu.pressure some total grow 5.995 s in 6 s
 * (kernel 6.18, here).
 */
#ifndef CPUMOND_SAMPLER_H
#define CPUMOND_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cpumond/watch.h"

struct sampler_thread {
	pid_t pid;
	pid_t tid;
	size_t proc;             /* index into the procs given to sampler_cycle */
	uint64_t key;            /* unique for the life of the sampler, even when a tid is reused */
	int usage;               /* permille of one core over the interval; -1 on the first sample */
	int run_delay;           /* permille of the interval spent runnable, waiting for a CPU;
	                          * -1 when gated */
	bool gated;              /* not read: usage is its whole process's, an upper bound
	                          * no more than the process's gate */
	int demand;              /* permille of one core it wanted: usage + run_delay, or
	                          * 1000 when waited_all; clamped at 1000; -1 when usage is,
	                          * or when gated */
	bool waited_all;         /* runnable (state R) at the last read and not run since:
	                          * it waited for a CPU the whole interval */
	uint64_t proc_key;       /* its process's, unique as key is */
	bool still;              /* not scheduled since the last cycle: schedstat's run
	                          * time and timeslices did not move (stall.h); a gated
	                          * thread: its whole process used no CPU.  False on
	                          * the first sample, and when gated otherwise */
};

struct sampler;

/* Returns a new sampler, or NULL with errno set. */
struct sampler *sampler_new(void);
void sampler_free(struct sampler *s);

/* Reads every live thread of PROCS (from watch_resolve; sorted by pid), or
 * only checks the process's total when it is gated.  *OUT is valid until
 * the next call.  Threads and processes that vanished are forgotten; a pid
 * whose start time changed is a new process.  Returns 0 or -ENOMEM. */
int sampler_cycle(struct sampler *s, const struct watch_proc *procs, size_t nprocs,
                  const struct sampler_thread **out, size_t *nout);

/* The host's CPU pressure before the next cycle: over the last WINDOW_NS
 * (monotonic), at least one task waited for a CPU for SOME_NS (the growth
 * of /proc/pressure/cpu's some total), on NCPU online CPUs.  SOME_NS
 * UINT64_MAX: unknown (no PSI), any wait possible.  WINDOW_NS 0: demand is
 * not wanted (starved events off): no state is read and gates hold as they
 * did before demand.  Until called: off. */
void sampler_set_cpu_wait(struct sampler *s, uint64_t some_ns, uint64_t window_ns, int ncpu);

/* Whether, with SOME_NS of host CPU pressure over WINDOW_NS on NCPU CPUs,
 * a thread that used at most USAGE permille may have waited for a CPU
 * longer than THRESHOLD - USAGE permille of the window (so that its demand
 * could be over THRESHOLD).  PSI's host some time is the mean over CPUs of
 * each CPU's some time weighted by its busy time; a thread that waited W
 * in all makes the CPUs' some and busy times each at least its wait there,
 * so some >= W^2 / (NCPU^2 * WINDOW) (Cauchy-Schwarz over the CPUs): false
 * when some is below that.  True when SOME_NS is UINT64_MAX; false when
 * WINDOW_NS or NCPU is 0. */
bool sampler_wait_possible(int threshold, int usage, uint64_t some_ns, uint64_t window_ns,
                           int ncpu);

/* How many descriptors the sampler keeps open (one per thread and process,
 * and one more per thread whose state was read for its demand; fewer when
 * RLIMIT_NOFILE ran short). */
size_t sampler_open_fds(const struct sampler *s);

/* DELTA_NS of CPU (or wait) over ELAPSED_NS of wall time, in permille of one
 * core, rounded to nearest, clamped to 0..1000.  0 when ELAPSED_NS is 0. */
int sampler_permille(uint64_t delta_ns, uint64_t elapsed_ns);

/* The gate: true when a process that used PROC_DELTA_NS of CPU over
 * ELAPSED_NS used no more than GATE permille of one core, so that none of
 * its threads can be over a threshold of GATE.  Exact, no rounding.  False
 * when GATE <= 0 or ELAPSED_NS is 0. */
bool sampler_gated(uint64_t proc_delta_ns, uint64_t elapsed_ns, int gate);

/* The usage of a thread read again after gated cycles: its CPU DELTA_NS
 * since its last read, less GATED_CPU_NS that its process used while gated
 * (the most the thread can have used then), over ELAPSED_NS since the last
 * gated cycle.  A lower bound in permille, clamped to 0..1000. */
int sampler_usage_after_gate(uint64_t delta_ns, uint64_t gated_cpu_ns, uint64_t elapsed_ns);

/* For stall detection (stall.h): ON makes a process that is under its
 * gate but used some CPU be read all the same, so that each thread's
 * `still` is exact; one that used no CPU at all stays gated (none of its
 * threads ran).  Default off. */
void sampler_set_exact_still(struct sampler *s, bool on);

/* Parses /proc/.../schedstat: "RUNTIME_NS RUN_DELAY_NS TIMESLICES\n".
 * Returns 0, or -EINVAL. */
int sampler_parse_schedstat(const char *buf, uint64_t *runtime_ns, uint64_t *run_delay_ns);

/* The same with the third field, how many times it was scheduled, in
 * *SLICES.  Returns 0, or -EINVAL. */
int sampler_parse_schedstat_slices(const char *buf, uint64_t *runtime_ns, uint64_t *run_delay_ns,
                                   uint64_t *slices);

#endif
