/* sampler: permille arithmetic, the schedstat parser, and cycles over this
 * test's own threads as they appear, burn, and vanish. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

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
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	assert_int_equal(n, 2);
	hot = find(t, n, atomic_load(&burner_tid));
	assert_non_null(hot);
	assert_int_equal(hot->usage, -1);        /* new thread: usage after one interval */
	hot_key = hot->key;

	sleep_ms(200);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
	hot = find(t, n, atomic_load(&burner_tid));
	main_thread = find(t, n, getpid());
	assert_non_null(hot);
	assert_non_null(main_thread);
	assert_int_equal(hot->key, hot_key);
	/* The burner ran most of 200 ms (2 cores, noisy neighbours: a loose
	 * bound); the main thread slept. */
	assert_in_range(hot->usage, 300, 1000);
	assert_in_range(main_thread->usage, 0, 100);
	assert_in_range(hot->run_delay, 0, 1000);

	atomic_store(&burner_stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(sampler_cycle(s, &self, 1, &t, &n), 0);
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
		cmocka_unit_test(test_threads_appear_burn_and_vanish),
		cmocka_unit_test(test_vanished_process_is_skipped),
	};
	return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
