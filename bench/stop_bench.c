/* stop_bench: cpumond's stack dump as the daemon does it -- one dumper,
 * the same thread dumped again and again with a gap -- for
 * bench/stop_bench.py, which pairs each dump's window with the stops the
 * target (../shared/bench/pausemeter) saw.
 *
 *   stop_bench --pid P --tid T [--reps N] [--gap-ms G] [--windows FILE]
 *
 * Appends to FILE one line per dump:
 *   win cpumond T_INTERRUPT_NS T_DETACH_NS STOP_NS NFRAMES NAMED CALL_NS
 * (CLOCK_MONOTONIC, the stop window as unwindbench --windows writes it;
 * CALL_NS is the whole stackdump_thread call, unwinding and naming
 * included; NAMED is 1 when the stack names pm_hot_loop), and
 * prints a summary line with the tracer's own stop times.
 */
#include "stackdump/stackdump.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	long pid = 0, tid = 0, reps = 200, gap_ms = 20;
	const char *windows = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--pid") == 0)
			pid = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--tid") == 0)
			tid = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--reps") == 0)
			reps = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--gap-ms") == 0)
			gap_ms = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--windows") == 0)
			windows = argv[i + 1];
	}
	if (pid <= 0 || tid <= 0 || reps < 1 || reps > 100000 || gap_ms < 0) {
		fputs("usage: stop_bench --pid P --tid T [--reps N] [--gap-ms G] [--windows FILE]\n",
		      stderr);
		return 2;
	}
	FILE *wf = windows ? fopen(windows, "a") : NULL;
	struct stackdump *sd = stackdump_new();
	uint64_t *stops = calloc((size_t)reps, sizeof(*stops));
	if (!sd || !stops || (windows && !wf)) {
		perror("stop_bench");
		return 1;
	}
	long ok = 0;
	for (long i = 0; i < reps; i++) {
		struct stackdump_stack st;
		uint64_t t0 = now_ns();
		int r = stackdump_thread(sd, (pid_t)pid, (pid_t)tid, 256, &st);
		uint64_t t1 = now_ns();
		int named = 0;

		for (size_t k = 0; r == 0 && k < st.nframes; k++)
			named |= st.frames[k].symbol && strcmp(st.frames[k].symbol, "pm_hot_loop") == 0;
		if (r < 0)
			fprintf(stderr, "stop_bench: %s\n", st.error);
		ok += r == 0;
		stops[i] = st.stop_ns;
		if (wf)
			fprintf(wf, "win cpumond %" PRIu64 " %" PRIu64 " %" PRIu64 " %zu %d %" PRIu64 "\n",
			        st.stop_start_ns, st.stop_start_ns + st.stop_ns, st.stop_ns,
			        st.nframes, named, t1 - t0);
		stackdump_stack_free(&st);
		struct timespec gap = { gap_ms / 1000, (gap_ms % 1000) * 1000000 };
		nanosleep(&gap, NULL);
		stackdump_poll(sd);
	}
	qsort(stops, (size_t)reps, sizeof(*stops), cmp_u64);
	printf("tool=cpumond reps=%ld ok=%ld stop_med_us=%.1f stop_p99_us=%.1f stop_max_us=%.1f\n",
	       reps, ok, stops[reps / 2] / 1e3, stops[(reps * 99) / 100] / 1e3,
	       stops[reps - 1] / 1e3);
	if (wf)
		fclose(wf);
	free(stops);
	stackdump_free(sd);
	return ok == reps ? 0 : 1;
}
