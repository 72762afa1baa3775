/* gate_bench: what gating costs in detection latency.  Two samplers watch
 * the same target in the same cycles, one with the gate (T, default 800‰,
 * as cpumond sets it from the threshold) and one without; a thread is made
 * hot and each sampler's first cycle with that thread over T is counted
 * (0: not within 8 cycles; a hot thread that gets less than T of a core on
 * a busy machine is never seen by either).
 *
 *   gate_bench [--threads N] [--interval-ms I] [--reps R] [--threshold T]
 *
 * The target is a forked child with N idle threads (default 1000) that
 * takes commands on a pipe.  Scenarios, each R times (default 3):
 *   wake     an idle thread that both samplers know turns hot, in a process
 *            that was idle (gated) before
 *   born-hot a new thread is created hot
 *   born-idle-then-hot  a new thread is created idle, turns hot one cycle later
 *   wake-busy  as wake, but a background thread keeps the process at 3/4
 *            of the gate (gated, with much CPU to take off the delta)
 * Latency is in cycles after the one that followed the change (1 = the first
 * cycle that could possibly see a full interval of it).  Prints a markdown
 * table row per scenario.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/sampler.h"

/* ---- the target (child) ---- */

#define MAXT 20100
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int mode[MAXT];           /* 0 idle, 1 hot, 2 duty cycle, 3 exit */
static int duty_pm = 600;        /* the duty cycle's share of a core, permille */
static pid_t tids[MAXT];
static int nthr;
static volatile uint64_t sink;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void burn_ns(uint64_t ns)
{
	uint64_t end = mono_ns() + ns, x = 1;

	while (mono_ns() < end) {
		for (int i = 0; i < 2000; i++)
			x = x * 6364136223846793005ull + 1;
		sink = x;
	}
}

static void *worker(void *arg)
{
	int i = (int)(intptr_t)arg, m;

	pthread_mutex_lock(&lock);
	tids[i] = gettid();
	pthread_cond_broadcast(&cond);
	for (;;) {
		while ((m = mode[i]) == 0)
			pthread_cond_wait(&cond, &lock);
		pthread_mutex_unlock(&lock);
		if (m == 3)
			return NULL;
		if (m == 1) {
			burn_ns(5000000);
		} else {
			struct timespec ts = { 0, (long)(1000 - duty_pm) * 10000 };
			burn_ns((uint64_t)duty_pm * 10000);
			nanosleep(&ts, NULL);
		}
		pthread_mutex_lock(&lock);
	}
}

static int spawn(int m)
{
	pthread_attr_t attr;
	pthread_t t;
	int i;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_mutex_lock(&lock);
	i = nthr++;
	mode[i] = m;
	pthread_mutex_unlock(&lock);
	pthread_create(&t, &attr, worker, (void *)(intptr_t)i);
	pthread_mutex_lock(&lock);
	while (!tids[i])
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return i;
}

/* Commands: "i" spawn idle, "h" spawn hot, "d PM" spawn a duty cycle of PM
 * permille, "w I" wake I hot,
 * "s" set every non-idle thread idle; answers with the thread's tid. */
static void target(int in, int out, int n)
{
	FILE *f = fdopen(in, "r");
	char line[64];

	for (int i = 0; i < n; i++)
		spawn(0);
	dprintf(out, "%d %d\n", nthr, 0);
	while (fgets(line, sizeof line, f)) {
		int i = -1;
		if (line[0] == 'd' && line[1] == ' ')
			duty_pm = atoi(line + 2);
		if (line[0] == 'i' || line[0] == 'h' || line[0] == 'd') {
			i = spawn(line[0] == 'i' ? 0 : line[0] == 'h' ? 1 : 2);
		} else if (line[0] == 'w') {
			i = atoi(line + 2);
			pthread_mutex_lock(&lock);
			mode[i] = 1;
			pthread_cond_broadcast(&cond);
			pthread_mutex_unlock(&lock);
		} else if (line[0] == 's') {
			pthread_mutex_lock(&lock);
			for (int k = 0; k < nthr; k++)
				if (mode[k])
					mode[k] = 3;   /* hot and duty threads end */
			pthread_mutex_unlock(&lock);
			i = 0;
		}
		dprintf(out, "%d %d\n", i >= 0 ? (int)tids[i] : -1, i);
	}
	_exit(0);
}

/* ---- the driver ---- */

static FILE *cmd_in;
static int cmd_out;
static pid_t child;
static struct sampler *with_gate, *without_gate;
static int interval_ms = 500, threshold = 800;

static int last_index;

/* Sends C; returns the tid answered (and its index in last_index). */
static int command(const char *c)
{
	char buf[32] = "";
	int tid = -1;

	dprintf(cmd_out, "%s\n", c);
	if (!fgets(buf, sizeof buf, cmd_in) || sscanf(buf, "%d %d", &tid, &last_index) != 2)
		return -1;
	return tid;
}

static void sleep_interval(void)
{
	struct timespec ts = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* One cycle of both samplers; returns for each whether TID was over the
 * threshold, and whether the gated sampler skipped the process. */
static void cycle(pid_t tid, bool over[2], bool *gated)
{
	struct watch_proc on = { .pid = child, .start_ticks = 1, .gate = threshold };
	struct watch_proc off = { .pid = child, .start_ticks = 1, .gate = 0 };
	struct sampler *s[2] = { with_gate, without_gate };
	const struct watch_proc *p[2] = { &on, &off };

	*gated = false;
	for (int k = 0; k < 2; k++) {
		const struct sampler_thread *t;
		size_t n;

		over[k] = false;
		sampler_cycle(s[k], p[k], 1, &t, &n);
		for (size_t i = 0; i < n; i++) {
			if (k == 0 && t[i].gated)
				*gated = true;
			if (t[i].tid == tid && t[i].usage > threshold)
				over[k] = true;
		}
	}
}

/* Cycles until both samplers saw TID over the threshold (at most 8); LAT
 * gets each one's count of cycles. */
static void measure(pid_t tid, int lat[2])
{
	bool over[2], gated;

	lat[0] = lat[1] = 0;
	for (int c = 1; c <= 8 && (!lat[0] || !lat[1]); c++) {
		sleep_interval();
		cycle(tid, over, &gated);
		for (int k = 0; k < 2; k++)
			if (!lat[k] && over[k])
				lat[k] = c;
	}
}

/* Two quiet cycles: both samplers up to date, the gated one gated. */
static bool settle(void)
{
	bool over[2], gated = false;

	for (int i = 0; i < 3; i++) {
		sleep_interval();
		cycle(0, over, &gated);
	}
	return gated;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "reps", required_argument, NULL, 'r' },
		{ "threshold", required_argument, NULL, 'T' },
		{ 0 },
	};
	int threads = 1000, reps = 3, c, to_child[2], from_child[2];

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': threads = atoi(optarg); break;
		case 'i': interval_ms = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'T': threshold = atoi(optarg); break;
		default: return 2;
		}
	}
	if (threads < 1 || threads > 20000 || reps < 1 || interval_ms < 50 ||
	    pipe(to_child) < 0 || pipe(from_child) < 0)
		return 2;
	child = fork();
	if (child == 0) {
		close(to_child[1]);
		close(from_child[0]);
		target(to_child[0], from_child[1], threads);
	}
	close(to_child[0]);
	close(from_child[1]);
	cmd_out = to_child[1];
	cmd_in = fdopen(from_child[0], "r");
	char buf[32];
	if (!fgets(buf, sizeof buf, cmd_in))
		return 1;
	with_gate = sampler_new();
	without_gate = sampler_new();

	static const char *const names[] = { "wake", "born-hot", "born-idle-then-hot", "wake-busy" };
	printf("| scenario (%d idle threads, %d ms cycles) | reps | gated before the change | "
	       "cycles to detect, gate %d‰ | cycles to detect, no gate |\n", threads, interval_ms,
	       threshold);
	printf("|---|---|---|---|---|\n");
	int next_idle = 1;     /* idle worker index to wake next (0 is the first) */
	for (int sc = 0; sc < 4; sc++) {
		char lat_on[64] = "", lat_off[64] = "";
		int gated_before = 0;
		for (int r = 0; r < reps; r++) {
			int lat[2];
			char cmd[32];
			pid_t tid;
			bool over[2], gated;

			if (sc == 3) {
				/* In the background, 3/4 of the gate: gated, with much
				 * CPU to take off the woken thread's delta. */
				snprintf(cmd, sizeof cmd, "d %d", threshold * 3 / 4);
				command(cmd);
			}
			gated_before += settle();
			if (sc == 0 || sc == 3) {
				snprintf(cmd, sizeof cmd, "w %d", next_idle++);
				tid = command(cmd);
			} else if (sc == 1) {
				tid = command("h");
			} else {
				int idx;
				tid = command("i");
				idx = last_index;
				sleep_interval();
				cycle(tid, over, &gated);   /* the idle newborn's cycle */
				snprintf(cmd, sizeof cmd, "w %d", idx);
				command(cmd);
			}
			measure(tid, lat);
			snprintf(lat_on + strlen(lat_on), sizeof lat_on - strlen(lat_on), "%s%d",
			         r ? ", " : "", lat[0]);
			snprintf(lat_off + strlen(lat_off), sizeof lat_off - strlen(lat_off), "%s%d",
			         r ? ", " : "", lat[1]);
			command("s");
		}
		printf("| %s | %d | %d of %d | %s | %s |\n", names[sc], reps, gated_before, reps,
		       lat_on, lat_off);
		fflush(stdout);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	sampler_free(with_gate);
	sampler_free(without_gate);
	return 0;
}
