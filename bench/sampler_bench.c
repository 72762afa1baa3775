/* sampler_bench: CPU of one sampling cycle, cpumond's sampler against the
 * pread floor (and, on request, libproc2), interleaved in one process so
 * that each ratio is taken under the same load and cadence.
 *
 *   sampler_bench --pid P [--cycles M] [--interval-ms I] [--methods LIST]
 *                 [--gate PERMILLE] [--header]
 *
 * LIST is a comma-separated subset of (default "sampler,floor"):
 *   sampler    one sampler_cycle() on P, gating off (struct watch_proc gate 0)
 *   gated      one sampler_cycle() of a second sampler, gate = PERMILLE
 *              (default 800): skips P's threads while P as a whole used less
 *              (starved events off: the daemon with starved = no)
 *   starved    the same with starved events on, as the daemon does it: the
 *              host's /proc/pressure/cpu read, and the sampler told how long
 *              tasks waited since the last round, which may keep the gate
 *              off and read the state of each thread that did not run
 *   starved-any  the same where any wait is possible (a kernel without PSI,
 *              or pressure high enough): never gated, every thread that did
 *              not run has its /proc/TID/stat read
 *   floor      getdents64 of a kept /proc/P/task, pread of a kept schedstat
 *              per thread, parse: what any reader of per-thread run time
 *              must do at least
 *   enum       the floor's getdents64 alone (what listing the threads costs)
 *   clock      clock_gettime() of P's process CPU clock (what the gate costs)
 *   pstat      open+read+close of /proc/P/stat (the other way to the total)
 *   libproc2   procps_pids_select(PIDS_SELECT_PID_THREADS) reading the ticks
 *
 * Per round, in rotating order, one cycle of each method, each timed with
 * CLOCK_PROCESS_CPUTIME_ID; I ms are slept between rounds (caches go cold
 * between cycles seconds apart: compare at the daemon's own cadence).  The
 * method that runs first after the sleep meets the coldest caches, so the
 * order rotates every round.  One warm-up round opens every descriptor.
 *
 * Prints one markdown table row per method (--header: the header first):
 * median and p90 µs per cycle, µs per thread, the ratio of medians to the
 * floor's, and the median over rounds of the same-round ratio to the floor.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libproc2/pids.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/sampler.h"
#include "procfs/procfs.h"

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile; sorts a copy. */
static uint64_t pct(const uint64_t *v, size_t n, int p)
{
	uint64_t *c = malloc(n * sizeof *c);
	uint64_t r;

	memcpy(c, v, n * sizeof *c);
	qsort(c, n, sizeof *c, cmp_u64);
	r = c[(n - 1) * (size_t)p / 100];
	free(c);
	return r;
}

/* The floor: what any reader of per-thread run time must do at least. */
struct floor_thread { int tid, fd; uint64_t run; };
static struct floor_thread *ft;
static size_t nft, ftcap, hint;
static char dents[32768];

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static size_t floor_cycle(int tasks, bool read_them)
{
	size_t n = 0;
	long len;

	lseek(tasks, 0, SEEK_SET);
	while ((len = syscall(SYS_getdents64, tasks, dents, sizeof dents)) > 0) {
		for (long off = 0; off < len;) {
			struct linux_dirent64 *de = (struct linux_dirent64 *)(dents + off);
			int tid = atoi(de->d_name);
			char buf[96], path[32];
			size_t i;
			ssize_t got;

			off += de->d_reclen;
			if (tid <= 0)
				continue;
			n++;
			if (!read_them)
				continue;
			/* Threads come back in the same order every cycle, so the slot
			 * after the last one found is almost always the right one. */
			i = hint < nft && ft[hint].tid == tid ? hint : 0;
			while (i < nft && ft[i].tid != tid)
				i++;
			if (i == nft) {
				if (nft == ftcap) {
					ftcap = ftcap ? 2 * ftcap : 1024;
					ft = realloc(ft, ftcap * sizeof *ft);
				}
				snprintf(path, sizeof path, "%d/schedstat", tid);
				ft[nft++] = (struct floor_thread){ tid, openat(tasks, path, O_RDONLY), 0 };
			}
			hint = i + 1;
			got = pread(ft[i].fd, buf, sizeof buf - 1, 0);
			if (got > 0) {
				buf[got] = '\0';
				ft[i].run = strtoull(buf, NULL, 10);
			}
		}
	}
	return n;
}

static void read_pstat(int pid)
{
	char path[32], buf[1024];
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, buf, sizeof buf) < 0)
			perror(path);
		close(fd);
	}
}

enum { M_SAMPLER, M_GATED, M_STARVED, M_STARVED_ANY, M_FLOOR, M_ENUM, M_CLOCK, M_PSTAT,
       M_LIBPROC2, M_COUNT };
static const char *const names[M_COUNT] = {
	"sampler", "gated", "starved", "starved-any", "floor", "enum", "clock", "pstat", "libproc2",
};
static const char *const labels[M_COUNT] = {
	"cpumond sampler", "cpumond sampler, gated", "cpumond sampler, gated, starved on",
	"cpumond sampler, gated, starved on, any wait possible", "pread floor",
	"getdents64 of task/ alone",
	"process CPU clock (the gate)", "/proc/PID/stat (open+read+close)",
	"libproc2 PIDS_SELECT_PID_THREADS",
};

static int parse_methods(const char *list, int *methods)
{
	char *copy = strdup(list), *save = NULL;
	int n = 0;

	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int m = 0;
		while (m < M_COUNT && strcmp(names[m], tok) != 0)
			m++;
		if (m == M_COUNT || n == M_COUNT) {
			fprintf(stderr, "sampler_bench: unknown method '%s'\n", tok);
			free(copy);
			return -1;
		}
		methods[n++] = m;
	}
	free(copy);
	return n;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "cycles", required_argument, NULL, 'n' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "methods", required_argument, NULL, 'm' },
		{ "gate", required_argument, NULL, 'g' },
		{ "header", no_argument, NULL, 'H' },
		{ 0 },
	};
	int pid = 0, cycles = 20, interval_ms = 0, gate = 800, c, nm;
	int methods[M_COUNT];
	bool header = false;
	enum pids_item items[] = { PIDS_ID_PID, PIDS_TICS_ALL };
	struct pids_info *info = NULL;
	struct sampler *s = sampler_new(), *sg = sampler_new(), *ss = sampler_new(),
	               *sa = sampler_new();
	struct procfs_pressure psi, last_psi = { 0 };
	uint64_t psi_ns = 0;
	bool have_psi = false;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char path[64];
	size_t nthreads = 0;
	clockid_t clk;

	nm = parse_methods("sampler,floor", methods);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pid = atoi(optarg); break;
		case 'n': cycles = atoi(optarg); break;
		case 'i': interval_ms = atoi(optarg); break;
		case 'm': nm = parse_methods(optarg, methods); break;
		case 'g': gate = atoi(optarg); break;
		case 'H': header = true; break;
		default: return 2;
		}
	}
	if (pid <= 0 || cycles < 3 || nm <= 0) {
		fprintf(stderr, "usage: sampler_bench --pid P [--cycles M>=3] [--interval-ms I] "
		        "[--methods sampler,gated,starved,starved-any,floor,enum,clock,pstat,libproc2] "
		        "[--gate PERMILLE]\n");
		return 2;
	}
	/* The floor and the sampler each keep a descriptor per thread: 20,000
	 * at 10,000 threads, which is a common hard limit.  Root may raise it;
	 * a sampler short of descriptors reads by path and looks slower. */
	struct rlimit rl = { 1 << 16, 1 << 16 };
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	snprintf(path, sizeof path, "/proc/%d/task", pid);
	int tasks = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tasks < 0 || !s || !sg || !ss || !sa || procps_pids_new(&info, items, 2) < 0 ||
	    clock_getcpuclockid(pid, &clk) != 0) {
		perror(path);
		return 1;
	}
	uint64_t *t[M_COUNT];
	for (int m = 0; m < M_COUNT; m++)
		t[m] = calloc((size_t)cycles, sizeof *t[m]);
	struct watch_proc proc = { .pid = pid, .start_ticks = 1, .gate = 0 };
	struct watch_proc gproc = { .pid = pid, .start_ticks = 1, .gate = gate };
	unsigned self = (unsigned)pid;
	size_t gated_rounds = 0, starved_gated = 0, starved_any_gated = 0;

	for (int r = -1; r < cycles; r++) {
		for (int k = 0; k < nm; k++) {
			int method = methods[(r + nm + k) % nm];
			const struct sampler_thread *out;
			size_t nout = 0;
			struct timespec ts;
			uint64_t t0 = cpu_ns(), dt;

			switch (method) {
			case M_SAMPLER: sampler_cycle(s, &proc, 1, &out, &nthreads); break;
			case M_GATED:
				sampler_cycle(sg, &gproc, 1, &out, &nout);
				break;
			case M_STARVED: {
				/* What kinds_before_sample does before each cycle. */
				uint64_t now = mono_ns(), some = UINT64_MAX;
				bool ok = procfs_read_pressure("/proc/pressure/cpu", &psi) == 0;

				if (ok && have_psi && psi.some_total_us >= last_psi.some_total_us)
					some = (psi.some_total_us - last_psi.some_total_us) * 1000;
				sampler_set_cpu_wait(ss, some, psi_ns ? now - psi_ns : 0, (int)ncpu);
				have_psi = ok;
				last_psi = psi;
				psi_ns = now;
				sampler_cycle(ss, &gproc, 1, &out, &nout);
				break;
			}
			case M_STARVED_ANY:
				sampler_set_cpu_wait(sa, UINT64_MAX, (uint64_t)interval_ms * 1000000 + 1,
				                     (int)ncpu);
				sampler_cycle(sa, &gproc, 1, &out, &nout);
				break;
			case M_FLOOR: nthreads = floor_cycle(tasks, true); break;
			case M_ENUM: floor_cycle(tasks, false); break;
			case M_CLOCK: clock_gettime(clk, &ts); break;
			case M_PSTAT: read_pstat(pid); break;
			case M_LIBPROC2:
				procps_pids_select(info, &self, 1, PIDS_SELECT_PID_THREADS);
				break;
			}
			dt = cpu_ns() - t0;
			if (r >= 0 && nout && out[0].gated) {
				gated_rounds += method == M_GATED;
				starved_gated += method == M_STARVED;
				starved_any_gated += method == M_STARVED_ANY;
			}
			if (r >= 0)
				t[method][r] = dt;
		}
		if (interval_ms)
			usleep((useconds_t)interval_ms * 1000);
	}
	if (header) {
		printf("| method | threads | interval ms | cycles | CPU µs/cycle median | p90 | "
		       "µs per thread | ratio of medians to floor | same-round ratio to floor, median |\n");
		printf("|---|---|---|---|---|---|---|---|---|\n");
	}
	bool have_floor = false;
	for (int k = 0; k < nm; k++)
		have_floor |= methods[k] == M_FLOOR;
	double floor_med = have_floor ? (double)pct(t[M_FLOOR], (size_t)cycles, 50) : 0;
	double *ratio = calloc((size_t)cycles, sizeof *ratio);
	for (int k = 0; k < nm; k++) {
		int m = methods[k];
		double med = (double)pct(t[m], (size_t)cycles, 50);
		double p90 = (double)pct(t[m], (size_t)cycles, 90);
		char label[128], r1[32] = "—", r2[32] = "—";

		if (have_floor) {
			for (int r = 0; r < cycles; r++)
				ratio[r] = t[M_FLOOR][r] ? (double)t[m][r] / (double)t[M_FLOOR][r] : 0;
			qsort(ratio, (size_t)cycles, sizeof *ratio, cmp_dbl);
			snprintf(r1, sizeof r1, "%.2f×", med / floor_med);
			snprintf(r2, sizeof r2, "%.2f×", ratio[(cycles - 1) / 2]);
		}
		if (m == M_GATED || m == M_STARVED || m == M_STARVED_ANY)
			snprintf(label, sizeof label, "%s (gate %d‰; gated in %zu of %d rounds)",
			         labels[m], gate, m == M_GATED ? gated_rounds : m == M_STARVED ?
			         starved_gated : starved_any_gated, cycles);
		else
			snprintf(label, sizeof label, "%s", labels[m]);
		printf("| %s | %zu | %d | %d | %.1f | %.1f | %.3f | %s | %s |\n", label, nthreads,
		       interval_ms, cycles, med / 1000, p90 / 1000,
		       nthreads ? med / 1000 / (double)nthreads : 0, r1, r2);
	}
	fflush(stdout);
	free(ratio);
	procps_pids_unref(&info);
	sampler_free(s);
	sampler_free(sg);
	close(tasks);
	return 0;
}
