/* sampler_bench: CPU of one sampling cycle, cpumond's sampler against the
 * pread floor and libproc2, interleaved in one process so that each ratio
 * is taken under the same load and cadence.
 *
 *   sampler_bench --pid P [--cycles M] [--interval-ms I]
 *
 * Per round, in rotating order: one sampler_cycle() on P; one floor cycle
 * (getdents64 of a kept /proc/P/task, pread of a kept schedstat per thread,
 * parse); one libproc2 procps_pids_select(PIDS_SELECT_PID_THREADS) reading
 * the ticks.
 * Each is timed with CLOCK_PROCESS_CPUTIME_ID; I ms are slept between rounds
 * (caches go cold between cycles seconds apart: compare at the daemon's own
 * cadence).  Prints one markdown table row per method: median and p90 µs per
 * cycle, µs per thread, ratio to the floor's median.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libproc2/pids.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/sampler.h"

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static uint64_t pct(uint64_t *v, size_t n, int p)
{
	qsort(v, n, sizeof *v, cmp_u64);
	return v[(n - 1) * (size_t)p / 100];
}

/* The floor: what any reader of per-thread run time must do at least. */
struct floor_thread { int tid, fd; uint64_t run; };
static struct floor_thread *ft;
static size_t nft, ftcap, hint;

static size_t floor_cycle(DIR *tasks)
{
	struct dirent *de;
	size_t n = 0;

	rewinddir(tasks);
	while ((de = readdir(tasks))) {
		int tid = atoi(de->d_name);
		char buf[96], path[32];
		size_t i;
		ssize_t len;

		if (tid <= 0)
			continue;
		/* Threads come back in the same order every cycle, so the slot after
		 * the last one found is almost always the right one. */
		i = hint < nft && ft[hint].tid == tid ? hint : 0;
		while (i < nft && ft[i].tid != tid)
			i++;
		if (i == nft) {
			if (nft == ftcap) {
				ftcap = ftcap ? 2 * ftcap : 1024;
				ft = realloc(ft, ftcap * sizeof *ft);
			}
			snprintf(path, sizeof path, "%d/schedstat", tid);
			ft[nft++] = (struct floor_thread){ tid, openat(dirfd(tasks), path, O_RDONLY), 0 };
		}
		hint = i + 1;
		len = pread(ft[i].fd, buf, sizeof buf - 1, 0);
		if (len > 0) {
			buf[len] = '\0';
			ft[i].run = strtoull(buf, NULL, 10);
		}
		n++;
	}
	return n;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "cycles", required_argument, NULL, 'n' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ 0 },
	};
	int pid = 0, cycles = 20, interval_ms = 0, c;
	enum pids_item items[] = { PIDS_ID_PID, PIDS_TICS_ALL };
	struct pids_info *info = NULL;
	struct sampler *s = sampler_new();
	char path[64];
	DIR *tasks;
	size_t nthreads = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pid = atoi(optarg); break;
		case 'n': cycles = atoi(optarg); break;
		case 'i': interval_ms = atoi(optarg); break;
		default: return 2;
		}
	}
	if (pid <= 0 || cycles < 3) {
		fprintf(stderr, "usage: sampler_bench --pid P [--cycles M>=3] [--interval-ms I]\n");
		return 2;
	}
	snprintf(path, sizeof path, "/proc/%d/task", pid);
	tasks = opendir(path);
	if (!tasks || !s || procps_pids_new(&info, items, 2) < 0) {
		perror(path);
		return 1;
	}
	uint64_t *t_sampler = calloc((size_t)cycles, 8), *t_floor = calloc((size_t)cycles, 8),
	         *t_proc2 = calloc((size_t)cycles, 8);
	struct watch_proc proc = { .pid = pid, .start_ticks = 1 };
	unsigned self = (unsigned)pid;

	/* One warm-up round opens every descriptor: steady state is measured.
	 * The method that runs first after the sleep meets cold caches, so
	 * the order rotates every round. */
	for (int r = -1; r < cycles; r++) {
		for (int k = 0; k < 3; k++) {
			int method = (r + 3 + k) % 3;
			const struct sampler_thread *out;
			uint64_t t0 = cpu_ns(), t;

			if (method == 0)
				sampler_cycle(s, &proc, 1, &out, &nthreads);
			else if (method == 1)
				floor_cycle(tasks);
			else
				procps_pids_select(info, &self, 1, PIDS_SELECT_PID_THREADS);
			t = cpu_ns() - t0;
			if (r >= 0)
				(method == 0 ? t_sampler : method == 1 ? t_floor : t_proc2)[r] = t;
		}
		if (interval_ms)
			usleep((useconds_t)interval_ms * 1000);
	}
	double floor_med = (double)pct(t_floor, (size_t)cycles, 50);
	struct { const char *name; uint64_t *t; } m[] = {
		{ "cpumond sampler", t_sampler }, { "pread floor", t_floor },
		{ "libproc2 PIDS_SELECT_PID_THREADS", t_proc2 },
	};
	for (size_t i = 0; i < 3; i++) {
		double med = (double)pct(m[i].t, (size_t)cycles, 50);
		double p90 = (double)pct(m[i].t, (size_t)cycles, 90);
		printf("| %s | %zu | %d | %d | %.1f | %.1f | %.2f | %.2f× |\n", m[i].name, nthreads,
		       interval_ms, cycles, med / 1000, p90 / 1000, med / 1000 / (double)nthreads,
		       med / floor_med);
	}
	procps_pids_unref(&info);
	sampler_free(s);
	closedir(tasks);
	return 0;
}
