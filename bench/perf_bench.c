/* perf_bench: cpumond's perf capture as the daemon would run it -- one
 * sampler on the thread, its ring read on a timer, each sample unwound --
 * for bench/perf_bench.py, which pairs each sample's time with the gap the
 * target (bench/kit/pausemeter.c) saw around it.
 *
 *   perf_bench --pid P --tid T [--period-ms N] [--read-ms R] [--seconds S]
 *              [--stack BYTES|fit|bare] [--windows FILE]
 *
 * Samples thread T every N ms of its CPU time (default 10) for S seconds
 * (default 2), reading every R ms (default 50, the daemon's
 * sample_interval), with a stack copy of at most BYTES (default the
 * largest, PERFSAMPLE_STACK_MAX); fit: the largest, fitted to the stack
 * by perfsample_adapt after each unwind, as the daemon does; bare: no
 * perfsample, but an event of its own on the same clock that samples
 * nothing but the time (no registers, no stack): the floor of any perf
 * sample, its interrupt.  Appends to FILE one line per sample (TOOL
 * perf-BYTES, perf-fit or perf-bare):
 *   win TOOL T_NS T_NS+1 STACK_LEN NAMED UNWIND_NS
 * (T_NS the sample's CLOCK_MONOTONIC time, taken by the kernel in the
 * interrupt; NAMED 1 when the unwound stack names pm_hot_loop), and prints
 *   tool=TOOL samples=N lost=L open_us=O first_us=F second_us=S cpu_per_sample_us=C
 *   copy=BYTES refits=R
 * O how long perfsample_open took, F and S the first and second samples'
 * times after it was called (the one-shot event's and the periodic one's), C this
 * process's CPU (user + system) over the samples, BYTES the stack copy at
 * the end and R how many times perfsample_adapt changed it.
 */
#include "stackdump/perfsample.h"
#include "stackdump/stackdump.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

struct run {
	struct stackdump *sd;
	struct perfsample *ps;
	bool fit;                /* each sample handed to perfsample_adapt */
	FILE *wf;
	char tool[32];
	uint64_t open_ns, opened_ns, first_ns, second_ns;
	long n;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

static int one_sample(const struct perfsample_sample *s, void *arg)
{
	struct run *run = arg;
	struct stackdump_stack st;
	uint64_t t0 = now_ns();
	int r = stackdump_thread_copy(run->sd, s->pid, s->tid, &s->copy, 256, &st);
	if (r >= 0 && run->fit)
		perfsample_adapt(run->ps, s, &st);
	uint64_t t1 = now_ns();
	int named = 0;

	for (size_t k = 0; r >= 0 && k < st.nframes; k++)
		named |= st.frames[k].symbol && strcmp(st.frames[k].symbol, "pm_hot_loop") == 0;
	stackdump_stack_free(&st);
	if (run->n == 0)
		run->first_ns = s->copy.time_ns;
	else if (run->n == 1)
		run->second_ns = s->copy.time_ns;
	run->n++;
	if (run->wf)
		fprintf(run->wf, "win %s %" PRIu64 " %" PRIu64 " %zu %d %" PRIu64 "\n", run->tool,
		        s->copy.time_ns, s->copy.time_ns + 1, s->copy.stack_len, named, t1 - t0);
	return 0;
}

/* The bare floor: task-clock samples of TID with the time only, read
 * every READ_MS for SECONDS, each written to WF.  Returns the samples. */
static long bare_run(long tid, long period_ms, long read_ms, double seconds, FILE *wf)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE, .size = sizeof(a), .config = PERF_COUNT_SW_TASK_CLOCK,
		.sample_period = (uint64_t)period_ms * 1000000, .sample_type = PERF_SAMPLE_TIME,
		.exclude_kernel = 1, .exclude_hv = 1, .use_clockid = 1, .clockid = CLOCK_MONOTONIC,
		.watermark = 1, .wakeup_watermark = 3 * 4096,
	};
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 5 * page;
	int fd = (int)syscall(SYS_perf_event_open, &a, (pid_t)tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	long n = 0;

	if (fd < 0) {
		perror("perf_bench: perf_event_open");
		return 0;
	}
	struct perf_event_mmap_page *pg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pg == MAP_FAILED) {
		perror("perf_bench: mmap");
		close(fd);
		return 0;
	}
	const unsigned char *data = (const unsigned char *)pg + page;
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	while (now_ns() < end) {
		nanosleep(&(struct timespec){ read_ms / 1000, (read_ms % 1000) * 1000000 }, NULL);
		uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE), tail = pg->data_tail;
		/* Records are 8-byte multiples in a 4-page ring: neither a header
		 * nor the 8-byte time after it wraps the ring's end. */
		while (tail + sizeof(struct perf_event_header) <= head) {
			const struct perf_event_header *h = (const void *)(data + tail % (4 * page));
			uint64_t t;
			if (h->size < sizeof(*h))
				break;
			if (h->type == PERF_RECORD_SAMPLE && h->size >= sizeof(*h) + 8) {
				memcpy(&t, data + (tail + sizeof(*h)) % (4 * page), 8);
				if (wf)
					fprintf(wf, "win perf-bare %" PRIu64 " %" PRIu64 " 0 0 0\n", t, t + 1);
				n++;
			}
			tail += h->size;
		}
		__atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
	}
	munmap(pg, len);
	close(fd);
	printf("tool=perf-bare samples=%ld lost=0 open_us=0 first_us=-1 second_us=-1 "
	       "cpu_per_sample_us=0 copy=0 refits=0\n", n);
	return n;
}

int main(int argc, char **argv)
{
	long pid = 0, tid = 0, period_ms = 10, read_ms = 50, stack = 0;
	bool fit = false, bare = false;
	double seconds = 2;
	const char *windows = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *opt = argv[i], *val = argv[i + 1];

		if (strcmp(opt, "--pid") == 0)
			pid = strtol(val, NULL, 10);
		else if (strcmp(opt, "--tid") == 0)
			tid = strtol(val, NULL, 10);
		else if (strcmp(opt, "--period-ms") == 0)
			period_ms = strtol(val, NULL, 10);
		else if (strcmp(opt, "--read-ms") == 0)
			read_ms = strtol(val, NULL, 10);
		else if (strcmp(opt, "--seconds") == 0)
			seconds = strtod(val, NULL);
		else if (strcmp(opt, "--stack") == 0 && strcmp(val, "fit") == 0)
			fit = true;
		else if (strcmp(opt, "--stack") == 0 && strcmp(val, "bare") == 0)
			bare = true;
		else if (strcmp(opt, "--stack") == 0)
			stack = strtol(val, NULL, 10);
		else if (strcmp(opt, "--windows") == 0)
			windows = val;
		else
			pid = 0;
	}
	if (pid <= 0 || tid <= 0 || period_ms < 1 || read_ms < 1 || seconds <= 0 || stack < 0 ||
	    argc % 2 == 0) {
		fputs("usage: perf_bench --pid P --tid T [--period-ms N] [--read-ms R] [--seconds S] "
		      "[--stack BYTES|fit|bare] [--windows FILE]\n", stderr);
		return 2;
	}
	if (bare) {
		FILE *wf = windows ? fopen(windows, "a") : NULL;
		long n = bare_run(tid, period_ms, read_ms, seconds, wf);
		if (wf)
			fclose(wf);
		return n > 0 ? 0 : 1;
	}
	struct run run = { .sd = stackdump_new(), .fit = fit,
	                   .wf = windows ? fopen(windows, "a") : NULL };
	struct perfsample *ps;
	struct perfsample_info info;
	char why[300];

	if (!run.sd || (windows && !run.wf)) {
		perror("perf_bench");
		return 1;
	}
	uint64_t cpu0 = cpu_ns();
	run.open_ns = now_ns();
	int r = perfsample_open((pid_t)tid, (uint64_t)period_ms * 1000000, (size_t)stack, &ps, why,
	                        sizeof(why));
	run.opened_ns = now_ns();
	if (r < 0) {
		fprintf(stderr, "perf_bench: %s\n", why);
		return 1;
	}
	run.ps = ps;
	perfsample_info(ps, &info);
	if (fit)
		snprintf(run.tool, sizeof(run.tool), "perf-fit");
	else
		snprintf(run.tool, sizeof(run.tool), "perf-%zu", info.stack_size);
	uint64_t end = run.open_ns + (uint64_t)(seconds * 1e9);
	while (r >= 0 && now_ns() < end) {
		struct timespec gap = { read_ms / 1000, (read_ms % 1000) * 1000000 };
		nanosleep(&gap, NULL);
		r = perfsample_read(ps, one_sample, &run);
	}
	uint64_t cpu = cpu_ns() - cpu0;
	perfsample_info(ps, &info);
	perfsample_close(ps);
	if (r < 0)
		fprintf(stderr, "perf_bench: tid %ld: %s\n", tid, strerror(-r));
	printf("tool=%s samples=%ld lost=%" PRIu64 " open_us=%.1f first_us=%.1f second_us=%.1f "
	       "cpu_per_sample_us=%.1f copy=%zu refits=%u\n", run.tool, run.n, info.lost,
	       ((double)run.opened_ns - (double)run.open_ns) / 1e3,
	       run.n > 0 ? ((double)run.first_ns - (double)run.open_ns) / 1e3 : -1.0,
	       run.n > 1 ? ((double)run.second_ns - (double)run.open_ns) / 1e3 : -1.0,
	       run.n ? (double)cpu / 1e3 / (double)run.n : 0.0, info.stack_copy, info.refits);
	if (run.wf)
		fclose(run.wf);
	stackdump_free(run.sd);
	return run.n > 0 ? 0 : 1;
}
