/* json: reading an integer out of an event's details object (the writers
 * are pinned byte for byte in test_eventfmt.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "cpumond/json.h"

static long long get(const char *obj, const char *key, int want_rc)
{
	long long v = -12345;

	assert_int_equal(json_object_int(obj, key, &v), want_rc);
	return v;
}

static void test_object_int(void **state)
{
	(void)state;
	assert_true(get("{\"a\":1,\"b\":-22}", "b", 0) == -22);
	assert_true(get("{ \"a\" : 7 , \"b\" : 2 }", "a", 0) == 7);
	/* Only top-level keys: the same key inside a nested value is not it. */
	assert_true(get("{\"top\":[{\"demand\":5}],\"x\":{\"demand\":6},\"demand\":7}", "demand",
	                0) == 7);
	get("{\"top\":[{\"demand\":5}]}", "demand", -ENOENT);
	/* A string value holding the key, quotes and braces in strings. */
	get("{\"s\":\"\\\"demand\\\":1,}{\",\"t\":2}", "demand", -ENOENT);
	assert_true(get("{\"s\":\"}{\\\\\",\"demand\":3}", "demand", 0) == 3);
	/* Not an integer, a prefix of a key, a value that is a string. */
	get("{\"demand\":1.5}", "demand", -ENOENT);
	get("{\"demand\":null}", "demand", -ENOENT);
	get("{\"demand\":\"1\"}", "demand", -ENOENT);
	get("{\"demands\":1}", "demand", -ENOENT);
	/* Not an object, cut text: nothing, and no read past the end. */
	get("", "a", -ENOENT);
	get("[\"a\",1]", "a", -ENOENT);
	get("{\"a", "a", -ENOENT);
	get("{\"a\":", "a", -ENOENT);
	get("{\"x\":\"\\", "a", -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_object_int),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
