/* pystop_bench: what reading a CPython thread's frames adds to the stop.
 *
 *   pystop_bench --pid P --tid T [--reps N] [--gap-ms G]
 *
 * One dumper, as the daemon keeps one, dumps thread T of a CPython process
 * (tests/targets/pychain.py) N times (default 400), G ms apart (default
 * 20), alternating dump by dump between native frames only and Python
 * frames (stackdump_set_language_frames), so that both see the same
 * machine at the same time.  Prints markdown rows: the stop time
 * (interrupt to detach) of each kind, median and p99, the part the Python
 * reads took inside the stop (stackdump_language_stop_ns), and how many
 * dumps named the Python function burn.
 */
#include "stackdump/stackdump.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* The Q-quantile (0..1) of the N values V, sorted in place, in µs. */
static double quantile_us(uint64_t *v, size_t n, double q)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i] / 1000.0;
}

static bool names_burn(const struct stackdump_stack *st)
{
	return st->nframes > 0 && st->frames[0].symbol &&
	       strcmp(st->frames[0].symbol, "burn") == 0;
}

int main(int argc, char **argv)
{
	long pid = 0, tid = 0, reps = 400, gap_ms = 20;

	for (int i = 1; i + 1 < argc; i += 2) {
		long *v = strcmp(argv[i], "--pid") == 0 ? &pid : strcmp(argv[i], "--tid") == 0 ? &tid
		        : strcmp(argv[i], "--reps") == 0 ? &reps
		        : strcmp(argv[i], "--gap-ms") == 0 ? &gap_ms : NULL;
		if (!v) {
			fprintf(stderr, "pystop_bench: unknown option %s\n", argv[i]);
			return 2;
		}
		*v = strtol(argv[i + 1], NULL, 10);
	}
	if (pid <= 0 || tid <= 0 || reps < 2 || gap_ms < 0) {
		fprintf(stderr, "usage: pystop_bench --pid P --tid T [--reps N] [--gap-ms G]\n");
		return 2;
	}
	struct stackdump *sd = stackdump_new();
	uint64_t *stop[2], *reads = calloc((size_t)reps, sizeof(uint64_t));
	size_t n[2] = { 0, 0 }, nreads = 0, named[2] = { 0, 0 };
	stop[0] = calloc((size_t)reps, sizeof(uint64_t));
	stop[1] = calloc((size_t)reps, sizeof(uint64_t));
	if (!sd || !stop[0] || !stop[1] || !reads) {
		perror("pystop_bench");
		return 1;
	}
	/* One dump of each kind first: the caches (modules, the thread
	 * state's address, the code objects) as the daemon has them. */
	for (long i = -2; i < reps; i++) {
		int py = (int)(i & 1);
		struct stackdump_stack st;
		struct timespec gap = { gap_ms / 1000, (gap_ms % 1000) * 1000000 };

		stackdump_set_language_frames(sd, py);
		int r = stackdump_thread(sd, (pid_t)pid, (pid_t)tid, 64, &st);
		if (r < 0) {
			fprintf(stderr, "pystop_bench: %s\n", st.error);
			stackdump_stack_free(&st);
			return 1;
		}
		if (i >= 0) {
			stop[py][n[py]++] = st.stop_ns;
			named[py] += names_burn(&st);
			if (py)
				reads[nreads++] = stackdump_language_stop_ns(sd);
		}
		stackdump_stack_free(&st);
		nanosleep(&gap, NULL);
	}
	static const char *const kind[2] = { "native frames only", "with Python frames" };
	for (int py = 0; py < 2; py++) {
		double med = quantile_us(stop[py], n[py], 0.5), p99 = quantile_us(stop[py], n[py], 0.99);
		printf("| %s | %zu | %.1f | %.1f | ", kind[py], n[py], med, p99);
		if (py)
			printf("%.1f | %.1f | %zu of %zu |\n", quantile_us(reads, nreads, 0.5),
			       quantile_us(reads, nreads, 0.99), named[py], n[py]);
		else
			printf("- | - | %zu of %zu |\n", named[py], n[py]);
	}
	stackdump_free(sd);
	free(stop[0]);
	free(stop[1]);
	free(reads);
	return 0;
}
