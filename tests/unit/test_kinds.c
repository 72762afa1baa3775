/* kinds: the busiest threads of a cycle, and the details objects of starved
 * and process events, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpumond/kinds.h"

static void test_top_threads(void **state)
{
	struct sampler_thread t[] = {
		{ .tid = 1, .usage = 10 }, { .tid = 2, .usage = -1 }, { .tid = 3, .usage = 500 },
		{ .tid = 4, .usage = 10 }, { .tid = 5, .usage = 900, .gated = true },
		{ .tid = 6, .usage = 700 }, { .tid = 7, .usage = 0 },
	};
	size_t top[3];
	(void)state;

	/* Most first; no usage yet, none, and gated (the process's bound) left
	 * out;
	 * of equals the earlier. */
	assert_int_equal(kinds_top_threads(t, 7, top, 3), 3);
	assert_int_equal(top[0], 5);
	assert_int_equal(top[1], 2);
	assert_int_equal(top[2], 0);
	assert_int_equal(kinds_top_threads(t, 7, top, 1), 1);
	assert_int_equal(top[0], 5);
	assert_int_equal(kinds_top_threads(t, 2, top, 3), 1);
	assert_int_equal(top[0], 0);
	assert_int_equal(kinds_top_threads(t, 7, top, 0), 0);
	assert_int_equal(kinds_top_threads(t, 0, top, 3), 0);
	/* Nothing used: nobody is the busiest. */
	assert_int_equal(kinds_top_threads(&t[6], 1, top, 3), 0);
}

static void test_starved_details(void **state)
{
	const struct kinds_thread top[] = { { 4250, "spin-\"0\"", 480 }, { 4251, "spin-1", 470 } };
	struct kinds_starved f = {
		.usage = 480, .demand = 1000, .run_delay = 520, .cpu = 1, .host_pressure = 55.5,
		.cgroup_pressure = -1, .throttled_periods = 3, .throttled_usec = 120000,
		.throttled_over_ms = 3001, .top = top, .ntop = 2,
	};
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	(void)state;

	kinds_starved_details(&f, out);
	fputc('\n', out);
	f.waited_all = true;
	f.cpu = -1;
	f.host_pressure = -1;
	f.throttled_periods = f.throttled_usec = f.throttled_over_ms = -1;
	f.ntop = 0;
	kinds_starved_details(&f, out);
	fclose(out);
	assert_string_equal(buf,
		"{\"usage\":480,\"demand\":1000,\"run_delay\":520,\"waited_all\":false,\"cpu\":1,"
		"\"host_pressure\":55.50,\"cgroup_pressure\":null,\"throttled_periods\":3,"
		"\"throttled_usec\":120000,\"throttled_over_ms\":3001,\"top\":["
		"{\"tid\":4250,\"comm\":\"spin-\\\"0\\\"\",\"usage\":480},"
		"{\"tid\":4251,\"comm\":\"spin-1\",\"usage\":470}]}\n"
		"{\"usage\":480,\"demand\":1000,\"run_delay\":520,\"waited_all\":true,\"cpu\":null,"
		"\"host_pressure\":null,\"cgroup_pressure\":null,\"throttled_periods\":null,"
		"\"throttled_usec\":null,\"throttled_over_ms\":null,\"top\":[]}");
	free(buf);
}

static void test_process_details(void **state)
{
	const struct kinds_thread top[] = { { 7, "a\nb", 900 } };
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	(void)state;

	kinds_process_details(1870, 12, top, 1, out);
	fclose(out);
	assert_string_equal(buf, "{\"process_usage\":1870,\"threads\":12,\"top\":["
	                         "{\"tid\":7,\"comm\":\"a\\u000ab\",\"usage\":900}]}");
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_top_threads),
		cmocka_unit_test(test_starved_details),
		cmocka_unit_test(test_process_details),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("kinds", tests, NULL, NULL);
}
