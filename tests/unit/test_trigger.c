/* trigger: N over T, cooldown, and the table that keeps only live states. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include "cpumond/trigger.h"

static const struct trigger_rule one = { .threshold = 800, .consecutive = 1, .cooldown_ms = 60000 };
static const struct trigger_rule three = { .threshold = 800, .consecutive = 3, .cooldown_ms = 10000 };

static void test_threshold_is_exclusive(void **state)
{
	struct trigger_state s = { 0 };
	(void)state;
	assert_false(trigger_step(&s, 800, &one, 0));
	assert_true(trigger_step(&s, 801, &one, 3000));
}

static void test_n_over_t_needs_consecutive_samples(void **state)
{
	struct trigger_state s = { 0 };
	(void)state;
	assert_false(trigger_step(&s, 900, &three, 0));
	assert_false(trigger_step(&s, 900, &three, 3000));
	assert_false(trigger_step(&s, 100, &three, 6000));   /* breaks the run */
	assert_false(trigger_step(&s, 900, &three, 9000));
	assert_false(trigger_step(&s, 900, &three, 12000));
	assert_true(trigger_step(&s, 900, &three, 15000));
}

static void test_cooldown_while_hot(void **state)
{
	struct trigger_state s = { 0 };
	int events = 0;
	(void)state;
	/* 3 s samples for 3 minutes of a thread that stays hot: one event per
	 * started minute. */
	for (uint64_t t = 0; t < 180000; t += 3000)
		events += trigger_step(&s, 1000, &one, t);
	assert_int_equal(events, 3);
}

static void test_cooldown_survives_cooling(void **state)
{
	struct trigger_state s = { 0 };
	(void)state;
	assert_true(trigger_step(&s, 950, &one, 0));
	assert_false(trigger_step(&s, 10, &one, 3000));
	assert_false(trigger_step(&s, 950, &one, 6000));     /* flapping: still cooling down */
	assert_true(trigger_step(&s, 950, &one, 60000));
}

static void test_zero_cooldown_fires_every_sample(void **state)
{
	const struct trigger_rule r = { .threshold = 500, .consecutive = 2, .cooldown_ms = 0 };
	struct trigger_state s = { 0 };
	(void)state;
	assert_false(trigger_step(&s, 600, &r, 0));
	assert_true(trigger_step(&s, 600, &r, 1));
	assert_true(trigger_step(&s, 600, &r, 2));
}

static void test_table_keeps_threads_apart(void **state)
{
	struct trigger *t = trigger_new();
	(void)state;
	assert_non_null(t);
	assert_false(trigger_observe(t, 7, 900, &three, 0));
	assert_false(trigger_observe(t, 3, 900, &three, 0));
	assert_false(trigger_observe(t, 5, 100, &three, 0));
	assert_int_equal(trigger_sweep(t), 2);   /* the cool thread leaves no state */
	assert_false(trigger_observe(t, 7, 900, &three, 1));
	assert_false(trigger_observe(t, 3, 900, &three, 1));
	trigger_sweep(t);
	assert_true(trigger_observe(t, 7, 900, &three, 2));
	assert_false(trigger_observe(t, 3, 100, &three, 2));  /* 3 cools before its third */
	assert_int_equal(trigger_sweep(t), 1);
	trigger_free(t);
}

static void test_sweep_forgets_exited_threads(void **state)
{
	struct trigger *t = trigger_new();
	(void)state;
	assert_false(trigger_observe(t, 1, 900, &three, 0));
	assert_false(trigger_observe(t, 1, 900, &three, 1));
	assert_int_equal(trigger_sweep(t), 1);
	assert_int_equal(trigger_sweep(t), 0);   /* not observed: exited */
	/* A new thread with that key would start from nothing. */
	assert_false(trigger_observe(t, 1, 900, &three, 2));
	trigger_free(t);
}

static void test_cooldown_state_expires(void **state)
{
	struct trigger *t = trigger_new();
	(void)state;
	assert_true(trigger_observe(t, 9, 900, &one, 0));
	assert_false(trigger_observe(t, 9, 100, &one, 1000));
	assert_int_equal(trigger_sweep(t), 1);   /* cooldown still runs */
	assert_false(trigger_observe(t, 9, 100, &one, 61000));
	assert_int_equal(trigger_sweep(t), 0);
	trigger_free(t);
}

/* Demand counts only while usage is not over the threshold. */
static void test_starved_level(void **state)
{
	const struct trigger_rule rule = { 800, 2, 60000 };
	struct trigger_state st = { 0 };
	(void)state;

	assert_int_equal(trigger_starved_level(480, 1000, 800), 1000);
	assert_int_equal(trigger_starved_level(800, 1000, 800), 1000);
	assert_int_equal(trigger_starved_level(801, 1000, 800), 0);     /* hot */
	assert_int_equal(trigger_starved_level(-1, -1, 800), 0);        /* first sample */
	assert_int_equal(trigger_starved_level(100, -1, 800), 0);       /* gated */
	assert_int_equal(trigger_starved_level(100, 300, 800), 300);
	/* The same N over T: two starved samples, the second fires; a hot
	 * sample in between starts over. */
	assert_false(trigger_step(&st, trigger_starved_level(480, 1000, 800), &rule, 0));
	assert_false(trigger_step(&st, trigger_starved_level(900, 1000, 800), &rule, 3000));
	assert_false(trigger_step(&st, trigger_starved_level(480, 1000, 800), &rule, 6000));
	assert_true(trigger_step(&st, trigger_starved_level(480, 990, 800), &rule, 9000));
	assert_false(trigger_step(&st, trigger_starved_level(480, 990, 800), &rule, 12000));
}

static void test_many_threads(void **state)
{
	struct trigger *t = trigger_new();
	int events = 0;
	(void)state;
	for (uint64_t k = 1000; k > 0; k--)
		events += trigger_observe(t, k * 7919 % 1000 + 1, 900, &one, 0);
	assert_int_equal(events, 1000);
	assert_int_equal(trigger_sweep(t), 1000);
	for (uint64_t k = 1; k <= 1000; k++)
		events += trigger_observe(t, k, 900, &one, 1);
	assert_int_equal(events, 1000);          /* all cooling down */
	trigger_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threshold_is_exclusive),
		cmocka_unit_test(test_starved_level),
		cmocka_unit_test(test_n_over_t_needs_consecutive_samples),
		cmocka_unit_test(test_cooldown_while_hot),
		cmocka_unit_test(test_cooldown_survives_cooling),
		cmocka_unit_test(test_zero_cooldown_fires_every_sample),
		cmocka_unit_test(test_table_keeps_threads_apart),
		cmocka_unit_test(test_sweep_forgets_exited_threads),
		cmocka_unit_test(test_cooldown_state_expires),
		cmocka_unit_test(test_many_threads),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("trigger", tests, NULL, NULL);
}
