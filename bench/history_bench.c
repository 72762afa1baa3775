/* history_bench: what the usage history costs, on disk and in the cycle.
 *
 *   history_bench --size [--cycles C] [--kept K] [--threads N] [--db PATH]
 *   history_bench --cost [--cycles C] [--kept K] [--threads N] [--db PATH]
 *
 * Fills a new database with C cycles (28,800: a day at a 3 s interval) of
 * K kept threads each (10), chosen each cycle among N threads (1,000) of
 * one process, as the daemon writes them: one transaction per cycle
 * through store_add_cycle.  The kept set drifts as a busy process's does
 * (most of the 10 stay from one cycle to the next, one is replaced at
 * random), usages 100..1000, small run delays, a few thread names.  Prints
 * the file's size after a checkpoint, the bytes in use (store_size), and
 * both per day and per row.
 *
 * --cost: what the history adds to a cycle, against the cycle's own
 * sampling and against the transaction a cycle with an event already
 * pays.  This process starts N threads (1,000) that block; each round (C
 * rounds, default 200) runs, in rotating order, on the same database:
 *   sample   sampler_cycle over the N threads (what every cycle pays)
 *   off      record_history + record_flush with history_threads = 0
 *   on       record_history + record_flush with history_threads = K (10):
 *            selection, K stat reads, the transaction with K rows
 *   event    the transaction of a cycle with one event (20 frames), as
 *            record_flush writes it: store_begin, store_add_event,
 *            store_commit
 * The sampler's usages are set so that K of the threads are over the
 * floor (real usages of blocked threads are 0).  Prints the median and
 * p90 of each in µs of this thread's CPU time and of wall time.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "cpumond/capture.h"
#include "cpumond/clock.h"
#include "cpumond/metrics.h"
#include "cpumond/record.h"
#include "cpumond/sampler.h"
#include "cpumond/store.h"

#define MAX_KEPT 1000

static int fill(struct store *st, long cycles, int kept, int threads)
{
	static const char *const names[] = { "worker", "io", "gc", "http-acceptor" };
	int set[MAX_KEPT];
	struct store_usage rows[MAX_KEPT];
	const int64_t t0 = 1764547200LL * 1000000;      /* 2025-12-01 00:00 UTC */
	const pid_t pid = 412345;
	int e;

	srandom(1);
	for (int i = 0; i < kept; i++)
		set[i] = i;
	for (long c = 0; c < cycles; c++) {
		struct store_cycle cy = { .time_us = t0 + c * 3000000, .interval_ms = 3000,
		                          .threads = (unsigned)threads };
		int out = (int)(random() % kept), in = (int)(random() % threads);
		bool dup = false;

		for (int i = 0; i < kept; i++)
			dup |= set[i] == in;
		if (!dup)
			set[out] = in;
		for (int i = 0; i < kept; i++) {
			int usage = 100 + (int)(random() % 901);

			rows[i] = (struct store_usage){
				.watch = "app", .pid = pid, .comm = "java", .tid = pid + 1 + set[i],
				.thread = names[set[i] % 4], .usage = usage,
				.run_delay = (int)(random() % 40), .state = usage > 500 ? 'R' : 'S',
				.threshold = 800, .episode = usage > 950,
			};
		}
		if ((e = store_begin(st)) < 0 || (e = store_add_cycle(st, &cy, rows, (size_t)kept)) < 0 ||
		    (e = store_commit(st)) < 0)
			return e;
	}
	return 0;
}

static int run_size(const char *path, long cycles, int kept, int threads)
{
	struct store *st;
	char err[512];
	uint64_t used = 0;
	struct stat sb;
	double rows = (double)cycles * kept, days = (double)cycles * 3 / 86400;
	int e;

	unlink(path);
	if ((e = store_open(path, true, &st, err, sizeof err)) < 0) {
		fprintf(stderr, "history_bench: %s\n", err);
		return 1;
	}
	if ((e = fill(st, cycles, kept, threads)) < 0 || (e = store_size(st, &used)) < 0) {
		fprintf(stderr, "history_bench: %s\n", store_error(st));
		store_close(st);
		return 1;
	}
	store_close(st);      /* checkpoints: the file holds everything */
	if (stat(path, &sb) < 0) {
		perror(path);
		return 1;
	}
	printf("| cycles | kept | file bytes | in use | file bytes/day | bytes/row |\n"
	       "|---:|---:|---:|---:|---:|---:|\n"
	       "| %ld | %d | %lld | %" PRIu64 " | %.0f | %.1f |\n",
	       cycles, kept, (long long)sb.st_size, used, (double)sb.st_size / days,
	       (double)sb.st_size / rows);
	return 0;
}

/* ---- --cost ---- */

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;

static void *idle_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&idle_lock);
	for (;;)
		pthread_cond_wait(&idle_cond, &idle_lock);
	return NULL;
}

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum { M_SAMPLE, M_OFF, M_ON, M_EVENT, NMODES };
static const char *const mode_names[NMODES] = { "sample", "off", "on", "event" };

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static double pct_us(uint64_t *v, long n, double p)
{
	qsort(v, (size_t)n, sizeof *v, cmp_u64);
	return (double)v[(long)(p * (double)(n - 1) + 0.5)] / 1000.0;
}

static struct config *config_of(const char *db, int kept)
{
	struct config *cfg = calloc(1, sizeof *cfg);
	char text[512];

	snprintf(text, sizeof text, "[cpumond]\ndatabase = %s\nhistory_threads = %d\n"
	         "[watch bench]\npid = %d\n", db, kept, (int)getpid());
	if (!cfg || config_parse_string(text, "history_bench", cfg, stderr) < 0) {
		free(cfg);
		return NULL;
	}
	return cfg;
}

/* One event as a cycle with an event writes it: 20 frames of one stack. */
static int event_tx(struct store *st, int64_t t)
{
	static struct stackdump_frame frames[20];
	struct store_event ev = {
		.time_us = t, .host = "bench", .watch = "bench", .pid = getpid(), .comm = "bench",
		.exe = "/usr/bin/bench", .tid = getpid(), .thread = "bench", .usage = 990,
		.threshold = 800, .consecutive = 1, .kind = "hot", .capture = "ptrace",
	};
	int e;

	for (int i = 0; i < 20; i++)
		frames[i] = (struct stackdump_frame){ .ip = 0x401000 + 16 * (uint64_t)i,
		                                      .offset = 0x1000 + 16 * (uint64_t)i,
		                                      .func_offset = 0x1000 + 16 * (uint64_t)i,
		                                      .module = "/usr/bin/bench", .build_id = "abcd",
		                                      .symbol = "frame" };
	ev.stack = (struct stackdump_stack){ .frames = frames, .nframes = 20,
	                                     .hash = 0x1234 + (uint64_t)(t % 7) };
	if ((e = store_begin(st)) < 0 || (e = store_add_event(st, &ev)) < 0)
		return e;
	return store_commit(st);
}

static int run_cost(const char *path, long rounds, int kept, int threads)
{
	struct config *on = config_of(path, kept), *off = config_of(path, 0);
	uint64_t *cpu[NMODES], *wall[NMODES];
	struct sampler *sm = sampler_new();
	struct metrics *mx = on ? metrics_new(on) : NULL;
	struct capture *cap = on && mx ? capture_new(on, mx, NULL, NULL) : NULL;
	struct watch_proc proc = { .pid = getpid(), .watch = 0, .comm = "history_bench" };
	const struct sampler_thread *got;
	struct sampler_thread *fake = NULL;
	struct record *rec = NULL, *rec_off = NULL;
	struct store *st = NULL, *st_off = NULL;
	char off_path[4096];
	char err[512];
	size_t n = 0;
	pthread_t tid;

	if (!on || !off || !sm || !mx || !cap)
		return 1;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid, NULL, idle_thread, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	/* Each its own record and database: one record switched between the
	 * two would close the kept descriptors at every round. */
	snprintf(off_path, sizeof off_path, "%s.off", path);
	unlink(path);
	unlink(off_path);
	if (store_open(path, true, &st, err, sizeof err) < 0 ||
	    store_open(off_path, true, &st_off, err, sizeof err) < 0) {
		fprintf(stderr, "history_bench: %s\n", err);
		return 1;
	}
	rec = record_new(st, on, mx);
	rec_off = record_new(st_off, off, mx);
	for (int m = 0; m < NMODES; m++) {
		cpu[m] = calloc((size_t)rounds, sizeof **cpu);
		wall[m] = calloc((size_t)rounds, sizeof **wall);
		if (!cpu[m] || !wall[m])
			return 1;
	}
	/* Two cycles first: the second has usages. */
	if (!rec || !rec_off || sampler_cycle(sm, &proc, 1, &got, &n) < 0 || sampler_cycle(sm, &proc, 1, &got, &n) < 0)
		return 1;
	for (long r = 0; r < rounds; r++) {
		for (int k = 0; k < NMODES; k++) {
			int m = (int)((r + k) % NMODES);
			uint64_t c0 = clock_thread_cpu_ns(), w0 = wall_ns();

			switch (m) {
			case M_SAMPLE:
				if (sampler_cycle(sm, &proc, 1, &got, &n) < 0)
					return 1;
				free(fake);
				fake = malloc(n * sizeof *fake);
				if (!fake)
					return 1;
				memcpy(fake, got, n * sizeof *fake);
				for (size_t i = 0; i < n; i++)
					fake[i].usage = i % (n / (size_t)kept + 1) == 1 ? 500 : 0;
				break;
			case M_OFF:
			case M_ON:
				record_history(m == M_ON ? rec : rec_off, &proc, fake, n, cap);
				record_flush(m == M_ON ? rec : rec_off);
				break;
			case M_EVENT:
				if (event_tx(st, clock_real_us()) < 0) {
					fprintf(stderr, "history_bench: %s\n", store_error(st));
					return 1;
				}
				break;
			}
			cpu[m][r] = clock_thread_cpu_ns() - c0;
			wall[m][r] = wall_ns() - w0;
		}
	}
	printf("| %d threads, %d kept, %ld rounds | CPU median µs | CPU p90 µs | wall median µs |"
	       " wall p90 µs |\n|---|---:|---:|---:|---:|\n", threads, kept, rounds);
	for (int m = 0; m < NMODES; m++)
		printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", mode_names[m],
		       pct_us(cpu[m], rounds, 0.5), pct_us(cpu[m], rounds, 0.9),
		       pct_us(wall[m], rounds, 0.5), pct_us(wall[m], rounds, 0.9));
	record_free(rec);           /* closes the store */
	record_free(rec_off);
	unlink(off_path);
	capture_free(cap);
	metrics_free(mx);
	sampler_free(sm);
	config_free(on);
	config_free(off);
	free(on);
	free(off);
	free(fake);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", no_argument, NULL, 's' },
		{ "cost", no_argument, NULL, 'o' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "kept", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 'n' },
		{ "db", required_argument, NULL, 'd' },
		{ 0 },
	};
	const char *db = "/tmp/history_bench.db";
	long cycles = 28800;
	int kept = 10, threads = 1000, opt;
	bool size = false, cost = false;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's': size = true; break;
		case 'o': cost = true; break;
		case 'c': cycles = atol(optarg); break;
		case 'k': kept = atoi(optarg); break;
		case 'n': threads = atoi(optarg); break;
		case 'd': db = optarg; break;
		default: return 2;
		}
	}
	if (size == cost || cycles <= 0 || kept <= 0 || kept > MAX_KEPT || threads < kept) {
		fprintf(stderr, "usage: history_bench --size|--cost [--cycles C] [--kept K (1..%d)]"
		        " [--threads N >= K] [--db PATH]\n", MAX_KEPT);
		return 2;
	}
	if (cost)
		return run_cost(db, cycles == 28800 ? 200 : cycles, kept, threads);
	return run_size(db, cycles, kept, threads);
}
