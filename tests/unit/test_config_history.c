/* config: the usage history's keys in [cpumond] (history_threads,
 * history_floor): their defaults, bounds, bad values, where they may be
 * set, and how check-config prints them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config/config.h"

#include "tests/unit/config_fixture.h"

#define WATCH "[watch w]\nall = yes\n"

static void test_bounds(void **state)
{
	static const struct { const char *text; int threads, floor; } good[] = {
		{ WATCH, 10, 100 },
		{ "[cpumond]\nhistory_threads = 0\nhistory_floor = 0\n" WATCH, 0, 0 },
		{ "[cpumond]\nhistory_threads = 1000\nhistory_floor = 1000\n" WATCH, 1000, 1000 },
		{ WATCH "[cpumond]\nhistory_threads = 3\n", 3, 100 },
	};
	struct config cfg;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		parse_good(good[i].text, &cfg);
		assert_int_equal(cfg.history_threads, good[i].threads);
		assert_int_equal(cfg.history_floor, good[i].floor);
		config_free(&cfg);
	}
}

static void test_bad_values(void **state)
{
	(void)state;
	assert_errors("[cpumond]\nhistory_threads = -1\n" WATCH,
	              "t.conf:2: history_threads: -1 is out of range 0..1000\n");
	assert_errors("[cpumond]\nhistory_threads = 1001\n" WATCH,
	              "t.conf:2: history_threads: 1001 is out of range 0..1000\n");
	assert_errors("[cpumond]\nhistory_threads = ten\n" WATCH,
	              "t.conf:2: history_threads: \"ten\" is not a number\n");
	assert_errors("[cpumond]\nhistory_floor = 1001\n" WATCH,
	              "t.conf:2: history_floor: 1001 is out of range 0..1000\n");
	assert_errors("[cpumond]\nhistory_floor = 50%\n" WATCH,
	              "t.conf:2: history_floor: \"50%\" is not a number\n");
	assert_errors(WATCH "history_floor = 5\n",
	              "t.conf:3: history_floor: not a watch key (set it in [cpumond])\n");
	assert_errors("[report]\nhistory_threads = 5\n" WATCH,
	              "t.conf:2: history_threads: not a [report] key (set it in [cpumond])\n");
}

/* check-config prints both, after the other [cpumond] keys. */
static void test_printed(void **state)
{
	struct config cfg;
	char *text;
	size_t len;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	parse_good("[cpumond]\nhistory_threads = 0\nhistory_floor = 250\n" WATCH, &cfg);
	config_print(&cfg, f);
	fclose(f);
	assert_non_null(strstr(text, "stall_after = 0ms\nhistory_threads = 0\nhistory_floor = 250\n\n"));
	free(text);
	config_free(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_printed),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
