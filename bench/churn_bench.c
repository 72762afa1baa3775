/* churn_bench: cpumond's sampler on a process whose threads come and go,
 * logging every sample so that bench/churn_check.py can hold each usage
 * against what really ran under that tid (the target's --log).
 *
 *   churn_bench --pid P [--interval-ms I] [--seconds S] [--gate PERMILLE]
 *               [--log FILE] [--every-s E]
 *
 * Every I ms (default 3000) one sampler_cycle() on P, with P's gate set to
 * PERMILLE (default 800, as cpumond would).  FILE gets, per cycle,
 *   c CYCLE START_NS END_NS          (CLOCK_MONOTONIC around sampler_cycle)
 *   s CYCLE TID KEY USAGE GATED      (one line per thread reported)
 * Every E s (default 60) and at the end a line on stdout:
 *   t=SECONDS cycles=N threads=N fds=N (the sampler's) rss_kb=N anon_kb=N cpu_us_per_cycle=N
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/sampler.h"

static uint64_t ns_of(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void self_mem(long *rss, long *anon)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		sscanf(line, "VmRSS: %ld", rss);
		sscanf(line, "RssAnon: %ld", anon);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "seconds", required_argument, NULL, 's' },
		{ "gate", required_argument, NULL, 'g' },
		{ "log", required_argument, NULL, 'l' },
		{ "every-s", required_argument, NULL, 'e' },
		{ 0 },
	};
	int pid = 0, interval_ms = 3000, seconds = 600, gate = 800, every = 60, c;
	const char *log_path = NULL;
	FILE *log = NULL;
	struct sampler *s = sampler_new();

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pid = atoi(optarg); break;
		case 'i': interval_ms = atoi(optarg); break;
		case 's': seconds = atoi(optarg); break;
		case 'g': gate = atoi(optarg); break;
		case 'l': log_path = optarg; break;
		case 'e': every = atoi(optarg); break;
		default: return 2;
		}
	}
	if (pid <= 0 || interval_ms <= 0 || !s || every <= 0) {
		fprintf(stderr, "usage: churn_bench --pid P [--interval-ms I] [--seconds S] [--gate G] "
		        "[--log FILE] [--every-s E]\n");
		return 2;
	}
	if (log_path && !(log = fopen(log_path, "we"))) {
		perror(log_path);
		return 1;
	}
	struct watch_proc proc = { .pid = pid, .start_ticks = 1, .gate = gate };
	uint64_t t0 = ns_of(CLOCK_MONOTONIC), next = t0, cpu_total = 0, last_report = t0;
	unsigned long cycles = 0;
	size_t n = 0;

	for (;;) {
		const struct sampler_thread *t;
		uint64_t start = ns_of(CLOCK_MONOTONIC), cpu0 = ns_of(CLOCK_PROCESS_CPUTIME_ID), end;

		sampler_cycle(s, &proc, 1, &t, &n);
		end = ns_of(CLOCK_MONOTONIC);
		cpu_total += ns_of(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
		cycles++;
		if (log) {
			fprintf(log, "c %lu %llu %llu\n", cycles, (unsigned long long)start,
			        (unsigned long long)end);
			for (size_t i = 0; i < n; i++)
				fprintf(log, "s %lu %d %llu %d %d\n", cycles, (int)t[i].tid,
				        (unsigned long long)t[i].key, t[i].usage, (int)t[i].gated);
		}
		bool done = end - t0 >= (uint64_t)seconds * 1000000000u;
		if (cycles == 1 || done || end - last_report >= (uint64_t)every * 1000000000u) {
			long rss = 0, anon = 0;
			self_mem(&rss, &anon);
			printf("t=%.0f cycles=%lu threads=%zu fds=%zu rss_kb=%ld anon_kb=%ld "
			       "cpu_us_per_cycle=%.0f\n", (double)(end - t0) / 1e9, cycles, n,
			       sampler_open_fds(s), rss, anon, (double)cpu_total / 1e3 / (double)cycles);
			fflush(stdout);
			last_report = end;
		}
		if (done)
			break;
		next += (uint64_t)interval_ms * 1000000u;
		uint64_t now = ns_of(CLOCK_MONOTONIC);
		if (next > now) {
			struct timespec ts = { (time_t)((next - now) / 1000000000u),
			                       (long)((next - now) % 1000000000u) };
			nanosleep(&ts, NULL);
		}
	}
	if (log)
		fclose(log);
	sampler_free(s);
	return 0;
}
