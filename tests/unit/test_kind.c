/* kind: the one list of event kinds, by name both ways. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "cpumond/kind.h"

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(kind_name(KIND_HOT), "hot");
	assert_string_equal(kind_name(KIND_STARVED), "starved");
	assert_string_equal(kind_name(KIND_PROCESS), "process");
	assert_string_equal(kind_name(KIND_COUNT), "hot");
	for (int k = 0; k < KIND_COUNT; k++)
		assert_int_equal(kind_from_name(kind_name((enum kind)k)), k);
	assert_int_equal(kind_from_name("Hot"), -1);
	assert_int_equal(kind_from_name(""), -1);
	assert_int_equal(kind_from_name("hot "), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("kind", tests, NULL, NULL);
}
