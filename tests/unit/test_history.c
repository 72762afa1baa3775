/* history: which threads of a cycle the usage history keeps
 * (history_select), per watch, over the floor, with episodes beyond; the
 * rows history_collect makes of this test's own thread, and the stat
 * descriptors it keeps only while their threads are kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <cmocka.h>

#include "config/config.h"
#include "cpumond/history.h"

/* Two processes of watch 0 and one of watch 1. */
static const struct watch_proc procs[] = {
	{ .pid = 10, .watch = 0, .comm = "a" },
	{ .pid = 20, .watch = 1, .comm = "b" },
	{ .pid = 30, .watch = 0, .comm = "c" },
};

static bool episode_of(pid_t tid, const void *ctx)
{
	const pid_t *tids = ctx;

	for (; *tids; tids++)
		if (*tids == tid)
			return true;
	return false;
}

/* The tids kept, in order, as "11 12 ...". */
static void kept(const struct sampler_thread *t, size_t n, int keep, int floor,
                 const pid_t *episodes, const char *want)
{
	size_t out[32], k;
	char got[256] = "";
	size_t len = 0;

	assert_true(n <= 32);
	k = history_select(t, n, procs, keep, floor, episodes ? episode_of : NULL, episodes, out);
	for (size_t i = 0; i < k; i++)
		len += (size_t)snprintf(got + len, sizeof got - len, "%s%d", i ? " " : "",
		                        (int)t[out[i]].tid);
	assert_string_equal(got, want);
}

#define T(PROC, TID, USAGE) { .pid = procs[PROC].pid, .tid = TID, .proc = PROC, .usage = USAGE }

static void test_busiest_per_watch(void **state)
{
	const struct sampler_thread t[] = {
		T(0, 11, 150), T(0, 12, 900), T(0, 13, 101), T(0, 14, 100),
		T(1, 21, 500), T(1, 22, 0),
		T(2, 31, 900), T(2, 32, 300),
	};

	(void)state;
	/* Busiest first, ties by tid; 100 is not over a floor of 100. */
	kept(t, 8, 10, 100, NULL, "12 31 32 11 13 21");
	/* Two a watch. */
	kept(t, 8, 2, 100, NULL, "12 31 21");
	/* A floor of 0 keeps the idle ones over 0 only. */
	kept(t, 8, 10, 0, NULL, "12 31 32 11 13 14 21");
	kept(t, 8, 0, 0, NULL, "");
	kept(t, 0, 10, 0, NULL, "");
}

/* Gated threads and threads without a usage yet are no measurement. */
static void test_unmeasured_left_out(void **state)
{
	struct sampler_thread t[] = { T(0, 11, 700), T(0, 12, -1), T(0, 13, 400) };

	(void)state;
	t[0].gated = true;
	kept(t, 3, 10, 100, NULL, "13");
}

/* A thread in an episode is kept beyond the count and under the floor,
 * also when it is not measured this cycle. */
static void test_episodes_kept(void **state)
{
	struct sampler_thread t[] = {
		T(0, 11, 900), T(0, 12, 800), T(0, 13, 20), T(1, 21, -1), T(1, 22, 300),
	};
	const pid_t episodes[] = { 12, 13, 21, 0 };

	(void)state;
	kept(t, 5, 1, 100, episodes, "11 12 13 22 21");
	/* No history, no episodes either. */
	kept(t, 5, 0, 100, episodes, "");
}

static size_t open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* This thread, as the sampler would give it under KEY. */
static struct sampler_thread self(uint64_t key, int usage)
{
	return (struct sampler_thread){ .pid = getpid(), .tid = gettid(), .proc = 0, .key = key,
	                                .usage = usage, .run_delay = 3 };
}

/* Rows of a real thread: its name and state from /proc; a kept set that
 * changes whole from one cycle to the next (new keys: other threads) keeps
 * no more descriptors than threads kept, and none with the history off. */
static void test_collect(void **state)
{
	struct config cfg;
	struct history *h = history_new();
	const struct store_usage *rows;
	struct sampler_thread t[2] = { self(1, 500), self(2, 400) };
	char name[64] = "";
	size_t fds0 = open_fds();
	FILE *f;

	(void)state;
	assert_non_null(h);
	assert_int_equal(config_parse_string("[cpumond]\n[watch w]\nall = yes\n", "t.conf", &cfg,
	                                     stderr), 0);
	f = fopen("/proc/thread-self/comm", "r");
	assert_non_null(f);
	assert_non_null(fgets(name, sizeof name, f));
	fclose(f);
	name[strcspn(name, "\n")] = '\0';
	assert_int_equal(history_collect(h, &cfg, procs, t, 2, NULL, NULL, &rows), 2);
	assert_string_equal(rows[0].thread, name);
	assert_string_equal(rows[0].comm, "a");
	assert_string_equal(rows[0].watch, "w");
	assert_int_equal(rows[0].state, 'R');       /* it is running: it reads its stat */
	assert_int_equal(rows[0].usage, 500);
	assert_int_equal(rows[0].run_delay, 3);
	assert_int_equal(rows[0].threshold, 800);
	assert_false(rows[0].episode);
	assert_int_equal(open_fds(), fds0 + 2);
	for (uint64_t k = 3; k < 40; k += 2) {      /* new keys each cycle */
		t[0] = self(k, 500);
		t[1] = self(k + 1, 400);
		assert_int_equal(history_collect(h, &cfg, procs, t, 2, NULL, NULL, &rows), 2);
		assert_int_equal(open_fds(), fds0 + 2);
	}
	cfg.history_threads = 0;
	assert_int_equal(history_collect(h, &cfg, procs, t, 2, NULL, NULL, &rows), 0);
	assert_int_equal(open_fds(), fds0);
	history_free(h);
	config_free(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busiest_per_watch),
		cmocka_unit_test(test_unmeasured_left_out),
		cmocka_unit_test(test_episodes_kept),
		cmocka_unit_test(test_collect),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
