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
 * (../shared/bench/results-anchors.md).  Nothing is allocated per thread per
 * cycle once a thread is known.
 */
#ifndef CPUMOND_SAMPLER_H
#define CPUMOND_SAMPLER_H

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
	int run_delay;           /* permille of the interval spent runnable, waiting for a CPU */
};

struct sampler;

/* Returns a new sampler, or NULL with errno set. */
struct sampler *sampler_new(void);
void sampler_free(struct sampler *s);

/* Reads every live thread of PROCS (from watch_resolve).  *OUT is valid until
 * the next call.  Threads and processes that vanished are forgotten; a pid
 * whose start time changed is a new process.  Returns 0 or -ENOMEM. */
int sampler_cycle(struct sampler *s, const struct watch_proc *procs, size_t nprocs,
                  const struct sampler_thread **out, size_t *nout);

/* How many descriptors the sampler keeps open (one per thread and process,
 * fewer when RLIMIT_NOFILE ran short). */
size_t sampler_open_fds(const struct sampler *s);

/* DELTA_NS of CPU (or wait) over ELAPSED_NS of wall time, in permille of one
 * core, rounded to nearest, clamped to 0..1000.  0 when ELAPSED_NS is 0. */
int sampler_permille(uint64_t delta_ns, uint64_t elapsed_ns);

/* Parses /proc/.../schedstat: "RUNTIME_NS RUN_DELAY_NS TIMESLICES\n".
 * Returns 0, or -EINVAL. */
int sampler_parse_schedstat(const char *buf, uint64_t *runtime_ns, uint64_t *run_delay_ns);

#endif
