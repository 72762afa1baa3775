/* sampler: permille arithmetic, the schedstat parser, and cycles over this
 * test's own threads as they appear, burn, and vanish. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <stdlib.h>
#include "cpumond/sampler.h"

static void test_permille(void **state)
{
	(void)state;
	assert_int_equal(sampler_permille(0, 3000000000u), 0);
	assert_int_equal(sampler_permille(3000000000u, 3000000000u), 1000);
	assert_int_equal(sampler_permille(1500000000u, 3000000000u), 500);
	/* Divided by the elapsed time measured, not the nominal interval. */
	assert_int_equal(sampler_permille(2400000000u, 3200000000u), 750);
	assert_int_equal(sampler_permille(1, 3), 333);
	assert_int_equal(sampler_permille(2, 3), 667);             /* rounded */
	assert_int_equal(sampler_permille(3100000000u, 3000000000u), 1000);   /* clamped */
	assert_int_equal(sampler_permille(5, 0), 0);
	assert_int_equal(sampler_permille(UINT64_MAX / 2000, UINT64_MAX / 2000), 1000);
}

static void test_parse_schedstat(void **state)
{
	uint64_t run = 0, delay = 0;
	(void)state;
	assert_int_equal(sampler_parse_schedstat("151038713 2317455 187\n", &run, &delay), 0);
	assert_int_equal(run, 151038713);
	assert_int_equal(delay, 2317455);
	assert_int_equal(sampler_parse_schedstat("18446744073709551615 0 1\n", &run, &delay), 0);
	assert_true(run == UINT64_MAX);
	assert_int_equal(sampler_parse_schedstat("", &run, &delay), -EINVAL);
	assert_int_equal(sampler_parse_schedstat("12", &run, &delay), -EINVAL);
	assert_int_equal(sampler_parse_schedstat("12 x 3\n", &run, &delay), -EINVAL);
	assert_int_equal(sampler_parse_schedstat("a 1 2\n", &run, &delay), -EINVAL);
	assert_int_equal(sampler_parse_schedstat("99999999999999999999999 1 2\n", &run, &delay), -EINVAL);
}

static void test_gate_arithmetic(void **state)
{
	(void)state;
	/* Gated when the whole process used no more than the gate, exactly. */
	assert_true(sampler_gated(0, 3000000000u, 800));
	assert_true(sampler_gated(2400000000u, 3000000000u, 800));        /* 800.0‰ */
	assert_false(sampler_gated(2400000001u, 3000000000u, 800));       /* 800.0000003‰ */
	assert_false(sampler_gated(2401000000u, 3000000000u, 800));       /* rounds to 800 */
	assert_true(sampler_gated(2999999999u, 3000000000u, 1000));
	/* No gate, or no time elapsed: never gated. */
	assert_false(sampler_gated(0, 3000000000u, 0));
	assert_false(sampler_gated(0, 3000000000u, -5));
	assert_false(sampler_gated(0, 0, 800));
	/* Several hot threads: the process may use more than one core. */
	assert_false(sampler_gated(6000000000u, 3000000000u, 1000));
}

static void test_usage_after_gate(void **state)
{
	(void)state;
	/* The process idled while gated: the usage is exact. */
	assert_int_equal(sampler_usage_after_gate(2700000000u, 0, 3000000000u), 900);
	/* It used 30 ms while gated: taken off, as the thread may have used it. */
	assert_int_equal(sampler_usage_after_gate(2700000000u, 30000000u, 3000000000u), 890);
	/* More used while gated than the thread's delta: 0, not a wrap. */
	assert_int_equal(sampler_usage_after_gate(1000, 2000, 3000000000u), 0);
	/* The delta spans gated cycles too: still clamped to one core. */
	assert_int_equal(sampler_usage_after_gate(9000000000u, 0, 3000000000u), 1000);
	assert_int_equal(sampler_usage_after_gate(5, 0, 0), 0);
}

static atomic_int burner_stop;
static atomic_int burner_tid;

static void *burner(void *arg)
{
	volatile unsigned long x = 0;
	(void)arg;
	atomic_store(&burner_tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&burner_stop))
		x++;
	return NULL;
}

static const struct sampler_thread *find(const struct sampler_thread *t, size_t n, pid_t tid)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].tid == tid)
			return &t[i];
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One sampler cycle, bracketed by the wall clock and the CPU clocks of
 * NCLOCKS threads: the cycle read each thread at some moment within
 * [wall[0], wall[1]], when its run time lay within [cpu[i][0] - lag,
 * cpu[i][1]] (schedstat lags the thread's CPU clock by the time since the
 * scheduler last accounted it, at most a tick). */
struct bracket {
	uint64_t wall[2], cpu[2][2];
};

static void bracketed_cycle(struct sampler *s, const struct watch_proc *self,
                            const clockid_t *clocks, int nclocks, struct bracket *b,
                            const struct sampler_thread **t, size_t *n)
{
	b->wall[0] = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < nclocks; i++)
		b->cpu[i][0] = clock_ns(clocks[i]);
	assert_int_equal(sampler_cycle(s, self, 1, t, n), 0);
	for (int i = 0; i < nclocks; i++)
		b->cpu[i][1] = clock_ns(clocks[i]);
	b->wall[1] = clock_ns(CLOCK_MONOTONIC);
}

/* Checks that USAGE (permille) is what thread I's clocks allow between the
 * bracketed cycles A and B, whatever share of a CPU the machine gave it. */
static void assert_usage_bracketed(int usage, const struct bracket *a, const struct bracket *b,
                                   int i)
{
	const uint64_t lag = 10000000;   /* one tick at HZ=100, the longest */
	uint64_t least_cpu = b->cpu[i][0] > a->cpu[i][1] + lag ? b->cpu[i][0] - lag - a->cpu[i][1] : 0;
	uint64_t most_cpu = b->cpu[i][1] - a->cpu[i][0] + lag;
	int least = sampler_permille(least_cpu, b->wall[1] - a->wall[0]);
	int most = sampler_permille(most_cpu, b->wall[0] - a->wall[1]);

	if (usage < least - 1 || usage > most + 1)
		fail_msg("usage %d‰ outside [%d, %d] from the thread's CPU clock", usage, least, most);
}

static void test_threads_appear_burn_and_vanish(void **state)
{
	struct sampler *s = sampler_new();
	struct watch_proc self = { .pid = getpid(), .start_ticks = 1, .watch = 0 };
	const struct sampler_thread *t, *hot, *main_thread;
	size_t n;
	pthread_t th;
	uint64_t hot_key;
	(void)state;

	assert_non_null(s);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(t[0].usage, -1);        /* first sample: no usage yet */
	assert_int_equal(t[0].tid, getpid());

	atomic_store(&burner_stop, 0);
	assert_int_equal(pthread_create(&th, NULL, burner, NULL), 0);
	while (!atomic_load(&burner_tid))
		sleep_ms(1);
	clockid_t clocks[2];
	struct bracket first, second;
	assert_int_equal(pthread_getcpuclockid(th, &clocks[0]), 0);
	assert_int_equal(pthread_getcpuclockid(pthread_self(), &clocks[1]), 0);
	bracketed_cycle(s, &self, clocks, 2, &first, &t, &n);
	assert_int_equal(n, 2);
	hot = find(t, n, atomic_load(&burner_tid));
	assert_non_null(hot);
	assert_int_equal(hot->usage, -1);        /* new thread: usage after one interval */
	hot_key = hot->key;

	sleep_ms(500);
	bracketed_cycle(s, &self, clocks, 2, &second, &t, &n);
	hot = find(t, n, atomic_load(&burner_tid));
	main_thread = find(t, n, getpid());
	assert_non_null(hot);
	assert_non_null(main_thread);
	assert_int_equal(hot->key, hot_key);
	/* The burner's and the sleeping main thread's usage, each against its
	 * own CPU clock: right whatever share of a core the machine gave. */
	assert_usage_bracketed(hot->usage, &first, &second, 0);
	assert_usage_bracketed(main_thread->usage, &first, &second, 1);
	assert_in_range(hot->run_delay, 0, 1000);

	atomic_store(&burner_stop, 1);
	pthread_join(th, NULL);
	/* pthread_join returns when the kernel clears the thread's tid, a
	 * moment before it removes /proc/PID/task/TID: allow it 1 s. */
	for (int i = 0; i < 100; i++) {
		assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
		if (n == 1)
			break;
		sleep_ms(10);
	}
	assert_int_equal(n, 1);                  /* the exited thread is gone */
	assert_null(find(t, n, atomic_load(&burner_tid)));
	assert_int_equal(sampler_open_fds(s), 2); /* the task dir and one schedstat */

	/* The same pid with another start time is another process: its threads
	 * start over with new keys and no usage. */
	uint64_t old_key = t[0].key;
	self.start_ticks = 2;
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(t[0].usage, -1);
	assert_true(t[0].key != old_key);

	/* A process no longer watched is dropped with its descriptors. */
	assert_int_equal(sampler_cycle(s, NULL, 0, &t, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(sampler_open_fds(s), 0);
	sampler_free(s);
}

/* A thread that waits for its cue, then burns until told to stop. */
struct cued { atomic_int go, stop, tid; pthread_t th; };

static void *cued_main(void *arg)
{
	struct cued *c = arg;
	volatile unsigned long x = 0;

	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&c->go) && !atomic_load(&c->stop))
		sleep_ms(1);
	while (!atomic_load(&c->stop))
		x++;
	return NULL;
}

static void cued_start(struct cued *c, bool go)
{
	atomic_store(&c->go, go);
	atomic_store(&c->stop, 0);
	atomic_store(&c->tid, 0);
	assert_int_equal(pthread_create(&c->th, NULL, cued_main, c), 0);
	while (!atomic_load(&c->tid))
		sleep_ms(1);
}

static void cued_end(struct cued *c)
{
	atomic_store(&c->stop, 1);
	pthread_join(c->th, NULL);
}

static void test_gated_process(void **state)
{
	struct sampler *s = sampler_new();
	/* This test process, under a gate of 50‰: it idles between cycles (its
	 * waiting thread polls every ms), and two burners get more than 5 % of
	 * a core even on a loaded machine. */
	struct watch_proc self = { .pid = getpid(), .start_ticks = 1, .gate = 50 };
	const struct sampler_thread *t, *w;
	struct cued waker, newborn;
	size_t n;
	uint64_t waker_key;
	(void)state;

	cued_start(&waker, false);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 2);                  /* the first cycle always reads */
	waker_key = find(t, n, atomic_load(&waker.tid))->key;
	assert_false(t[0].gated);

	/* Idle: gated.  The threads come out unread, with the same keys and
	 * the process's usage as their bound. */
	sleep_ms(200);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 2);
	w = find(t, n, atomic_load(&waker.tid));
	assert_non_null(w);
	assert_true(w->gated);
	assert_int_equal(w->key, waker_key);
	assert_in_range(w->usage, 0, 50);
	assert_int_equal(w->run_delay, -1);

	/* A known thread turns hot and a new one is born hot, both while the
	 * process is gated: the next cycle reads again; the known thread's usage
	 * is already there (a lower bound), the newborn's comes one cycle later,
	 * as for any new thread. */
	atomic_store(&waker.go, 1);
	cued_start(&newborn, true);
	sleep_ms(300);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 3);
	w = find(t, n, atomic_load(&waker.tid));
	assert_false(w->gated);
	assert_int_equal(w->key, waker_key);
	/* Any CPU the waker got shows: the process used next to nothing while
	 * gated, so little is taken off (the amount depends on the machine's
	 * load, so only "some" is checked). */
	assert_in_range(w->usage, 1, 1000);
	w = find(t, n, atomic_load(&newborn.tid));
	assert_non_null(w);
	assert_false(w->gated);
	assert_int_equal(w->usage, -1);

	sleep_ms(200);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_in_range(find(t, n, atomic_load(&newborn.tid))->usage, 0, 1000);
	cued_end(&waker);
	cued_end(&newborn);
	sampler_free(s);
}

/* The bound on a thread's wait from the host's CPU pressure. */
static void test_wait_possible(void **state)
{
	const uint64_t s3 = 3000000000u;
	(void)state;
	/* Off, or nothing known of the CPUs: never. */
	assert_false(sampler_wait_possible(800, 0, s3, 0, 2));
	assert_false(sampler_wait_possible(800, 0, s3, s3, 0));
	/* No PSI: always. */
	assert_true(sampler_wait_possible(800, 0, UINT64_MAX, s3, 2));
	/* Used the threshold already: its demand is over it without waiting. */
	assert_true(sampler_wait_possible(800, 800, 0, s3, 2));
	/* No pressure at all: no wait. */
	assert_false(sampler_wait_possible(800, 0, 0, s3, 2));
	/* A wait of 800‰ of 3 s on 2 CPUs needs some >= 2.4^2 / (4 * 3) s =
	 * 0.48 s. */
	assert_false(sampler_wait_possible(800, 0, 479000000, s3, 2));
	assert_true(sampler_wait_possible(800, 0, 480000000, s3, 2));
	/* A thread at 700‰ needs only 100‰ more: 0.3^2 / 12 s = 7.5 ms. */
	assert_false(sampler_wait_possible(800, 700, 7000000, s3, 2));
	assert_true(sampler_wait_possible(800, 700, 7500000, s3, 2));
	/* More CPUs spread the same some time over more: easier. */
	assert_true(sampler_wait_possible(800, 0, 479000000, s3, 4));
}

/* Where a wait could have starved a thread, a process under its gate is
 * read all the same: its threads' demand is wanted. */
static void test_gate_yields_to_pressure(void **state)
{
	struct sampler *s = sampler_new();
	struct watch_proc self = { .pid = getpid(), .start_ticks = 1, .gate = 50 };
	const struct sampler_thread *t;
	size_t n;
	(void)state;

	sampler_set_cpu_wait(s, UINT64_MAX, 200000000, 2);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	sleep_ms(200);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 1);
	assert_false(t[0].gated);
	assert_in_range(t[0].demand, t[0].usage, 1000);
	assert_true(t[0].proc_key != 0 && t[0].proc_key != t[0].key);
	/* No pressure: gated as before. */
	sampler_set_cpu_wait(s, 0, 200000000, 2);
	sleep_ms(200);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_true(t[0].gated);
	assert_int_equal(t[0].demand, -1);
	sampler_free(s);
}

static void test_thread_replaced_same_count(void **state)
{
	struct sampler *s = sampler_new();
	struct watch_proc self = { .pid = getpid(), .start_ticks = 1 };
	const struct sampler_thread *t;
	struct cued a, b;
	size_t n;
	pid_t a_tid;
	(void)state;

	cued_start(&a, false);
	a_tid = atomic_load(&a.tid);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(sampler_open_fds(s), 3);

	/* One thread ends and another starts: the count is the same, but the
	 * ended one cannot be read, so the task directory is listed again. */
	cued_end(&a);
	cued_start(&b, false);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 2);
	assert_non_null(find(t, n, getpid()));
	assert_int_not_equal(find(t, n, getpid())->usage, -1);
	assert_non_null(find(t, n, atomic_load(&b.tid)));
	assert_int_equal(find(t, n, atomic_load(&b.tid))->usage, -1);
	if (atomic_load(&b.tid) != a_tid)
		assert_null(find(t, n, a_tid));
	assert_int_equal(sampler_open_fds(s), 3);
	cued_end(&b);
	sampler_free(s);
}

static void test_vanished_process_is_skipped(void **state)
{
	struct sampler *s = sampler_new();
	/* pid_max is at most 4194304: this pid cannot exist. */
	struct watch_proc ghost = { .pid = 4194305, .start_ticks = 1 };
	const struct sampler_thread *t;
	size_t n = 99;
	(void)state;
	assert_int_equal(sampler_cycle(s, &ghost, 1, &t, &n), 0);
	assert_int_equal(n, 0);
	sampler_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_permille),
		cmocka_unit_test(test_parse_schedstat),
		cmocka_unit_test(test_gate_arithmetic),
		cmocka_unit_test(test_usage_after_gate),
		cmocka_unit_test(test_threads_appear_burn_and_vanish),
		cmocka_unit_test(test_gated_process),
		cmocka_unit_test(test_wait_possible),
		cmocka_unit_test(test_gate_yields_to_pressure),
		cmocka_unit_test(test_thread_replaced_same_count),
		cmocka_unit_test(test_vanished_process_is_skipped),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
