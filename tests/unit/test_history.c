/* history: which threads of a cycle the usage history keeps
 * (history_select), per watch, over the floor, with episodes beyond. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busiest_per_watch),
		cmocka_unit_test(test_unmeasured_left_out),
		cmocka_unit_test(test_episodes_kept),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
