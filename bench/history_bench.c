/* history_bench: what the usage history costs on disk.
 *
 *   history_bench --size [--cycles C] [--kept K] [--threads N] [--db PATH]
 *
 * Fills a new database with C cycles (28,800: a day at a 3 s interval) of
 * K kept threads each (10), chosen each cycle among N threads (1,000) of
 * one process, as the daemon writes them: one transaction per cycle
 * through store_add_cycle.  The kept set drifts as a busy process's does
 * (most of the 10 stay from one cycle to the next, one is replaced at
 * random), usages 100..1000, small run delays, a few thread names.  Prints
 * the file's size after a checkpoint, the bytes in use (store_size), and
 * both per day and per row.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", no_argument, NULL, 's' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "kept", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 'n' },
		{ "db", required_argument, NULL, 'd' },
		{ 0 },
	};
	const char *db = "/tmp/history_bench.db";
	long cycles = 28800;
	int kept = 10, threads = 1000, opt;
	bool size = false;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's': size = true; break;
		case 'c': cycles = atol(optarg); break;
		case 'k': kept = atoi(optarg); break;
		case 'n': threads = atoi(optarg); break;
		case 'd': db = optarg; break;
		default: return 2;
		}
	}
	if (!size || cycles <= 0 || kept <= 0 || kept > MAX_KEPT || threads < kept) {
		fprintf(stderr, "usage: history_bench --size [--cycles C] [--kept K (1..%d)]"
		        " [--threads N >= K] [--db PATH]\n", MAX_KEPT);
		return 2;
	}
	return run_size(db, cycles, kept, threads);
}
