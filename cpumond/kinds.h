/* kinds: the events of the kinds beyond hot, from each cycle's samples.
 *
 * starved  A thread whose demand (sampler_thread.demand: run time plus
 *          run-queue wait, or the whole interval for one runnable and
 *          never scheduled) is over its watch's threshold while its usage
 *          is not (trigger_starved_level), for `consecutive` samples.  Its
 *          details say why: usage, demand, run_delay, waited_all, the CPU
 *          it last ran on, the host's and its cgroup's CPU pressure, its
 *          cgroup's throttling since that cgroup's last reading, and the
 *          watched threads that used the most CPU in that cycle.
 * process  A process whose threads' usages add up to more than its
 *          watch's process_threshold for `consecutive` samples.  It makes
 *          one event per thread of its top three by usage (kind process
 *          each, the same details: process_usage, threads, top), each an
 *          episode of its own, so that each has its key stack and a row of
 *          the events table keeps its shape (one thread, one key stack);
 *          the cooldown is the process's.
 * Both are sampled as a hot thread is (capture_start).  The host's CPU
 * pressure is read once a cycle, before the sampler, which needs it
 * (sampler_set_cpu_wait).
 */
#ifndef CPUMOND_KINDS_H
#define CPUMOND_KINDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "config/config.h"
#include "cpumond/capture.h"
#include "cpumond/sampler.h"
#include "cpumond/watch.h"

/* Threads named in the details ("top"). */
#define KINDS_TOP 3

struct kinds;

/* Returns NULL when out of memory. */
struct kinds *kinds_new(void);
void kinds_free(struct kinds *k);

/* Before the cycle's sampler_cycle: reads /proc/pressure/cpu and tells S
 * how long tasks waited for a CPU since the last cycle (nothing when CFG
 * has starved = no).  Says once when the host has no PSI. */
void kinds_before_sample(struct kinds *k, const struct config *cfg, struct sampler *s);

/* After it: the starved and process events of the cycle's N THREADS of
 * PROCS, each started in C at NOW_MS (monotonic). */
void kinds_cycle(struct kinds *k, const struct config *cfg, const struct watch_proc *procs,
                 const struct sampler_thread *threads, size_t n, struct capture *c,
                 uint64_t now_ms);

/* ---- the pure part ---- */

/* One thread named in the details. */
struct kinds_thread {
	pid_t tid;
	char comm[16];
	int usage;               /* permille */
};

/* The indices into T (N threads) of the at most K with the most usage,
 * most first (ties: the earlier first), into TOP; those that used nothing,
 * have no usage yet (-1) or are gated (their process's bound) are left
 * out.  Returns how many. */
size_t kinds_top_threads(const struct sampler_thread *t, size_t n, size_t *top, size_t k);

/* What a starved event says; each value < 0 (pressures, cpu, throttling)
 * is unknown and written null. */
struct kinds_starved {
	int usage, demand, run_delay;   /* permille */
	bool waited_all;
	int cpu;                        /* stat field 39 */
	double host_pressure;           /* /proc/pressure/cpu some avg10, percent */
	double cgroup_pressure;         /* its cgroup's cpu.pressure some avg10 */
	long long throttled_periods;    /* its cgroup's nr_throttled since its last reading */
	long long throttled_usec;       /* and throttled_usec */
	long long throttled_over_ms;    /* the span of those deltas */
	const struct kinds_thread *top;
	size_t ntop;
};

/* Writes F as the details object of a starved event: {"usage", "demand",
 * "run_delay", "waited_all", "cpu", "host_pressure", "cgroup_pressure",
 * "throttled_periods", "throttled_usec", "throttled_over_ms", "top":
 * [{"tid", "comm", "usage"}]}. */
void kinds_starved_details(const struct kinds_starved *f, FILE *out);

/* Writes the details object of a process event: {"process_usage",
 * "threads" (how many of its threads were read this cycle), "top":
 * [{"tid", "comm", "usage"}]}. */
void kinds_process_details(int process_usage, size_t threads, const struct kinds_thread *top,
                           size_t ntop, FILE *out);

#endif
