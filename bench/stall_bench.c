/* stall_bench: what stall detection adds to a cycle, on and off in the
 * same rounds of the same process.
 *
 *   stall_bench --pid P [--cycles M] [--interval-ms I] [--gate PERMILLE]
 *
 * Two samplers watch P: "off" as the daemon without stall_after, "on" as
 * with it (sampler_set_exact_still, then each thread's stillness through
 * stall_observe, the threads still for stall_after classified from their
 * stat, syscall and wchan (stall_probe_classify), stall_sweep); stall_after
 * is two intervals, as small as the configuration allows.  Per round the
 * two run in alternating order, each timed with CLOCK_PROCESS_CPUTIME_ID;
 * I ms are slept between rounds.  The round in which the threads first
 * reach stall_after (each classified once) is reported apart: that is the
 * one-time cost, not the steady one.  Prints markdown table rows: median
 * and p90 µs per cycle of each, and the first check's.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpumond/sampler.h"
#include "cpumond/stall.h"
#include "cpumond/stall_probe.h"

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One cycle with stall detection; returns how many threads were checked. */
static size_t cycle_on(struct sampler *s, struct stall *st, const struct watch_proc *p,
                       uint64_t stall_after_ms, size_t *nthreads)
{
	const struct sampler_thread *t;
	size_t n, checked = 0;
	uint64_t now = mono_ms(), since;

	sampler_cycle(s, p, 1, &t, &n);
	for (size_t i = 0; i < n; i++) {
		if (stall_observe(st, t[i].key, t[i].still, now, stall_after_ms, &since) !=
		    STALL_CHECK)
			continue;
		if (checked++ >= STALL_CHECKS_PER_CYCLE)
			continue;
		stall_checked(st, t[i].key, stall_probe_classify(t[i].pid, t[i].tid) == STALL_STUCK,
		              now, 3600000);
	}
	stall_sweep(st);
	*nthreads = n;
	return checked;
}

int main(int argc, char **argv)
{
	int cycles = 10, interval_ms = 3000, gate = 800, opt;
	pid_t pid = 0;
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' }, { "cycles", required_argument, NULL, 'c' },
		{ "interval-ms", required_argument, NULL, 'i' }, { "gate", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'p')
			pid = atoi(optarg);
		else if (opt == 'c')
			cycles = atoi(optarg);
		else if (opt == 'i')
			interval_ms = atoi(optarg);
		else if (opt == 'g')
			gate = atoi(optarg);
		else
			return 2;
	}
	if (pid <= 0 || cycles < 1) {
		fputs("usage: stall_bench --pid P [--cycles M] [--interval-ms I] [--gate PERMILLE]\n",
		      stderr);
		return 2;
	}
	struct watch_proc p = { .pid = pid, .start_ticks = 1, .gate = gate };
	struct sampler *off = sampler_new(), *on = sampler_new();
	struct stall *st = stall_new();
	uint64_t *t_off = calloc((size_t)cycles, sizeof *t_off);
	uint64_t *t_on = calloc((size_t)cycles, sizeof *t_on);
	uint64_t first = 0, stall_after = 2 * (uint64_t)interval_ms;
	size_t nthreads = 0, first_checked = 0, n;
	const struct sampler_thread *t;
	int kept = 0;

	if (!off || !on || !st || !t_off || !t_on)
		return 1;
	sampler_set_exact_still(on, true);
	sampler_cycle(off, &p, 1, &t, &n);       /* warm-up: descriptors, baselines */
	cycle_on(on, st, &p, stall_after, &nthreads);
	for (int r = 0; kept < cycles; r++) {
		struct timespec ts = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000 };
		uint64_t a, b, c, d_off, d_on;
		size_t checked;

		nanosleep(&ts, NULL);
		a = cpu_ns();
		if (r % 2) {
			sampler_cycle(off, &p, 1, &t, &n);
			b = cpu_ns();
			checked = cycle_on(on, st, &p, stall_after, &nthreads);
			c = cpu_ns();
			d_off = b - a;
			d_on = c - b;
		} else {
			checked = cycle_on(on, st, &p, stall_after, &nthreads);
			b = cpu_ns();
			sampler_cycle(off, &p, 1, &t, &n);
			c = cpu_ns();
			d_on = b - a;
			d_off = c - b;
		}
		if (checked > 0) {
			/* The threads' first checks, STALL_CHECKS_PER_CYCLE a cycle. */
			first = d_on > first ? d_on : first;
			first_checked += checked < STALL_CHECKS_PER_CYCLE ? checked :
			                 STALL_CHECKS_PER_CYCLE;
			continue;
		}
		t_off[kept] = d_off;
		t_on[kept] = d_on;
		kept++;
	}
	qsort(t_off, (size_t)cycles, sizeof *t_off, cmp_u64);
	qsort(t_on, (size_t)cycles, sizeof *t_on, cmp_u64);
	printf("| stall detection | tasks | median µs per cycle | p90 µs | µs per thread |\n");
	printf("|---|---|---|---|---|\n");
	printf("| off (gate %d) | %zu | %.0f | %.0f | %.2f |\n", gate, nthreads,
	       t_off[cycles / 2] / 1e3, t_off[cycles * 9 / 10] / 1e3,
	       t_off[cycles / 2] / 1e3 / (double)(nthreads ? nthreads : 1));
	printf("| on (gate %d), steady | %zu | %.0f | %.0f | %.2f |\n", gate, nthreads,
	       t_on[cycles / 2] / 1e3, t_on[cycles * 9 / 10] / 1e3,
	       t_on[cycles / 2] / 1e3 / (double)(nthreads ? nthreads : 1));
	printf("| on, the costliest cycle of the first checks (%zu threads classified once, at "
	       "most %d a cycle) | %zu | %.0f | | %.2f per thread checked |\n", first_checked,
	       STALL_CHECKS_PER_CYCLE, nthreads, first / 1e3,
	       first / 1e3 / STALL_CHECKS_PER_CYCLE);
	sampler_free(off);
	sampler_free(on);
	stall_free(st);
	free(t_off);
	free(t_on);
	return 0;
}
