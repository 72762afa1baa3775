/* episode: key stack selection and ties, dedupe by hash, stop statistics,
 * the idle rule. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpumond/episode.h"

/* A one-frame stack with HASH, as stackdump_thread would return it. */
static struct stackdump_stack stack_of(uint64_t hash, uint64_t stop_ns)
{
	struct stackdump_stack s = { .nframes = 1, .hash = hash, .stop_ns = stop_ns };

	s.frames = calloc(1, sizeof *s.frames);
	s.frames[0].module = strdup("/bin/x");
	s.frames[0].build_id = strdup("");
	s.frames[0].ip = hash * 16 + stop_ns % 7;   /* another instruction every time */
	return s;
}

static void add(struct episode *ep, uint64_t hash, uint64_t stop_ns)
{
	struct stackdump_stack s = stack_of(hash, stop_ns);

	assert_int_equal(episode_add(ep, &s), 0);
	assert_null(s.frames);                   /* taken over */
}

static void test_key_is_most_frequent(void **state)
{
	struct episode ep;
	(void)state;
	assert_int_equal(episode_init(&ep, 1, 2, 10), 0);
	assert_int_equal(episode_key(&ep), -1);
	add(&ep, 0xa, 10);
	add(&ep, 0xb, 20);
	add(&ep, 0xb, 30);
	add(&ep, 0xc, 40);
	add(&ep, 0xb, 50);
	assert_int_equal(ep.nstacks, 3);
	assert_int_equal(ep.taken, 5);
	assert_int_equal(episode_key(&ep), 1);
	assert_true(ep.stacks[1].stack.hash == 0xb);
	assert_int_equal(ep.stacks[1].count, 3);
	/* The kept copy is the first sample that had the stack. */
	assert_true(ep.stacks[1].stack.stop_ns == 20);
	assert_int_equal(episode_remaining(&ep), 5);
	episode_free(&ep);
}

static void test_tie_goes_to_first_seen(void **state)
{
	struct episode ep;
	(void)state;
	assert_int_equal(episode_init(&ep, 1, 2, 4), 0);
	add(&ep, 0x2, 1);
	add(&ep, 0x1, 1);
	add(&ep, 0x1, 1);
	add(&ep, 0x2, 1);
	assert_int_equal(episode_key(&ep), 0);
	assert_true(ep.stacks[0].stack.hash == 0x2);
	episode_free(&ep);
}

static void test_empty_stack_is_no_sample(void **state)
{
	struct episode ep;
	struct stackdump_stack none = { 0 };
	(void)state;
	assert_int_equal(episode_init(&ep, 1, 2, 3), 0);
	assert_int_equal(episode_add(&ep, &none), 0);
	assert_int_equal(ep.taken, 0);
	assert_int_equal(episode_key(&ep), -1);
	assert_int_equal(episode_stop_median(&ep), 0);
	episode_free(&ep);
}

static void test_never_more_than_planned(void **state)
{
	struct episode ep;
	(void)state;
	assert_int_equal(episode_init(&ep, 1, 2, 2), 0);
	ep.skipped = 1;
	add(&ep, 0x1, 5);
	assert_int_equal(episode_remaining(&ep), 0);
	add(&ep, 0x2, 5);                        /* past the plan: dropped */
	assert_int_equal(ep.taken, 1);
	assert_int_equal(ep.nstacks, 1);
	episode_free(&ep);
}

static void test_stop_median_and_max(void **state)
{
	struct episode ep;
	const uint64_t stops[] = { 90, 30, 1000, 50, 70 };
	(void)state;
	assert_int_equal(episode_init(&ep, 1, 2, 5), 0);
	for (size_t i = 0; i < 5; i++)
		add(&ep, 0x1, stops[i]);
	assert_int_equal(episode_stop_median(&ep), 70);
	assert_int_equal(episode_stop_max(&ep), 1000);
	/* An even count takes the lower middle: never a stop that did not happen. */
	episode_free(&ep);
	assert_int_equal(episode_init(&ep, 1, 2, 4), 0);
	for (size_t i = 0; i < 4; i++)
		add(&ep, 0x1, stops[i]);
	assert_int_equal(episode_stop_median(&ep), 50);
	episode_free(&ep);
}

static void test_went_idle(void **state)
{
	(void)state;
	/* 50 ms between samples, threshold 800 permille: idle below 400. */
	assert_false(episode_went_idle(50000000, 50000000, false, 800));
	assert_false(episode_went_idle(20000000, 50000000, false, 800));   /* 400 */
	assert_true(episode_went_idle(19000000, 50000000, false, 800));    /* 380 */
	assert_true(episode_went_idle(0, 50000000, false, 800));
	/* Runnable but starved: it still wants the CPU. */
	assert_false(episode_went_idle(0, 50000000, true, 800));
}

static void test_thread_busy(void **state)
{
	uint64_t a = 0, b = 0;
	volatile unsigned long x = 0;
	bool runnable = false;
	(void)state;
	assert_int_equal(episode_thread_busy(getpid(), getpid(), &a, &runnable), 0);
	assert_true(runnable);                   /* it is reading its own stat */
	for (unsigned long i = 0; i < 20000000; i++)
		x += i;
	assert_int_equal(episode_thread_busy(getpid(), getpid(), &b, &runnable), 0);
	assert_true(b > a);
	assert_int_equal(episode_thread_busy(getpid(), 4194305, &a, &runnable), -ESRCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_is_most_frequent),
		cmocka_unit_test(test_tie_goes_to_first_seen),
		cmocka_unit_test(test_empty_stack_is_no_sample),
		cmocka_unit_test(test_never_more_than_planned),
		cmocka_unit_test(test_stop_median_and_max),
		cmocka_unit_test(test_went_idle),
		cmocka_unit_test(test_thread_busy),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("episode", tests, NULL, NULL);
}
