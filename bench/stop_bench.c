/* stop_bench: cpumond's stack dump as the daemon does it -- one dumper,
 * the same thread dumped again and again with a gap -- for
 * bench/stop_bench.py, which pairs each dump's window with the stops the
 * target (bench/kit/pausemeter.c) saw.
 *
 *   stop_bench --pid P --tid T [--reps N] [--gap-ms G] [--windows FILE]
 *              [--registers-only]
 *
 * Appends to FILE one line per dump:
 *   win cpumond T_INTERRUPT_NS T_DETACH_NS STOP_NS NFRAMES NAMED CALL_NS
 * (CLOCK_MONOTONIC, the stop window as unwindbench --windows writes it;
 * CALL_NS is the whole stackdump_thread call, unwinding and naming
 * included; NAMED is 1 when the stack names pm_hot_loop), and
 * prints a summary line with the tracer's own stop times and its CPU
 * (user + system) per dump.
 *
 * --registers-only: cpumond's stop with nothing copied but the registers
 * (stackdump/snapshot.c with a zero-byte stack copy, no unwinding), the
 * floor of its way of stopping; lines say "regs" instead of "cpumond".
 */
#include "stackdump/snapshot.h"
#include "stackdump/stackdump.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* User + system CPU of RU (µs). */
static double cpu_us(const struct rusage *ru)
{
	return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e6 +
	       (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* The stop of snapshot_take alone, nothing copied but the registers. */
static int registers_only(struct snapshot_pending *pending, pid_t pid, pid_t tid,
                          struct stackdump_stack *st)
{
	struct snapshot snap = { .cap = 0 };

	memset(st, 0, sizeof(*st));
	int r = snapshot_take(pending, NULL, pid, tid, -1, NULL, &snap, st->error,
	                      sizeof(st->error));
	st->stop_ns = snap.stop_ns;
	st->stop_start_ns = snap.stop_start_ns;
	return r;
}

int main(int argc, char **argv)
{
	long pid = 0, tid = 0, reps = 200, gap_ms = 20;
	const char *windows = NULL;
	bool regs_only = false;

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(opt, "--registers-only") == 0) {
			regs_only = true;
			continue;
		}
		if (!val) {
			pid = 0;           /* an option without its value: usage */
			break;
		}
		i++;
		if (strcmp(opt, "--pid") == 0)
			pid = strtol(val, NULL, 10);
		else if (strcmp(opt, "--tid") == 0)
			tid = strtol(val, NULL, 10);
		else if (strcmp(opt, "--reps") == 0)
			reps = strtol(val, NULL, 10);
		else if (strcmp(opt, "--gap-ms") == 0)
			gap_ms = strtol(val, NULL, 10);
		else if (strcmp(opt, "--windows") == 0)
			windows = val;
	}
	if (pid <= 0 || tid <= 0 || reps < 1 || reps > 100000 || gap_ms < 0) {
		fputs("usage: stop_bench --pid P --tid T [--reps N] [--gap-ms G] [--windows FILE] "
		      "[--registers-only]\n", stderr);
		return 2;
	}
	struct snapshot_pending pending = { 0 };
	FILE *wf = windows ? fopen(windows, "a") : NULL;
	struct stackdump *sd = stackdump_new();
	uint64_t *stops = calloc((size_t)reps, sizeof(*stops));
	if (!sd || !stops || (windows && !wf)) {
		perror("stop_bench");
		return 1;
	}
	long ok = 0;
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	for (long i = 0; i < reps; i++) {
		struct stackdump_stack st;
		uint64_t t0 = now_ns();
		int r = regs_only ? registers_only(&pending, (pid_t)pid, (pid_t)tid, &st)
		                  : stackdump_thread(sd, (pid_t)pid, (pid_t)tid, 256, &st);
		uint64_t t1 = now_ns();
		int named = 0;

		for (size_t k = 0; r == 0 && k < st.nframes; k++)
			named |= st.frames[k].symbol && strcmp(st.frames[k].symbol, "pm_hot_loop") == 0;
		if (r < 0)
			fprintf(stderr, "stop_bench: %s\n", st.error);
		ok += r == 0;
		stops[i] = st.stop_ns;
		if (wf)
			fprintf(wf, "win %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %zu %d %" PRIu64 "\n",
			        regs_only ? "regs" : "cpumond", st.stop_start_ns,
			        st.stop_start_ns + st.stop_ns, st.stop_ns,
			        st.nframes, named, t1 - t0);
		stackdump_stack_free(&st);
		struct timespec gap = { gap_ms / 1000, (gap_ms % 1000) * 1000000 };
		nanosleep(&gap, NULL);
		stackdump_poll(sd);
		snapshot_poll(&pending);
	}
	getrusage(RUSAGE_SELF, &ru1);
	qsort(stops, (size_t)reps, sizeof(*stops), cmp_u64);
	printf("tool=%s reps=%ld ok=%ld stop_med_us=%.1f stop_p99_us=%.1f stop_max_us=%.1f "
	       "cpu_per_dump_us=%.1f\n",
	       regs_only ? "regs" : "cpumond", reps, ok, stops[reps / 2] / 1e3, stops[(reps * 99) / 100] / 1e3,
	       stops[reps - 1] / 1e3, (cpu_us(&ru1) - cpu_us(&ru0)) / (double)reps);
	if (wf)
		fclose(wf);
	free(stops);
	stackdump_free(sd);
	snapshot_pending_free(&pending);
	return ok == reps ? 0 : 1;
}
