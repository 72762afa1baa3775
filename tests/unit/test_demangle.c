/* demangle: C++ and Rust linkage names as gdb prints them; plain names,
 * broken and oversized names left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/demangle.h"

#include <stdlib.h>
#include <string.h>

static void expect(const char *linkage, const char *readable)
{
	char *got = demangle_name(linkage);

	if (!readable) {
		if (got)
			fail_msg("%s demangled to %s", linkage ? linkage : "(null)", got);
		return;
	}
	if (!got)
		fail_msg("%s not demangled", linkage);
	assert_string_equal(got, readable);
	free(got);
}

static void test_cxx(void **state)
{
	(void)state;
	/* What gdb prints for the thread entry of std::thread. */
	expect("_ZNSt6thread11_State_implINS_8_InvokerISt5tupleIJPFvvEEEEEE6_M_runEv",
	       "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)()> > >::_M_run()");
	expect("_ZN4demo7SpinnerIiE4burnEi", "demo::Spinner<int>::burn(int)");
	expect("_Z1fv", "f()");
	/* Compiler clones keep their suffix, as gdb shows it. */
	expect("_Z4leafm.constprop.0", "leaf(unsigned long) [clone .constprop.0]");
}

static void test_rust(void **state)
{
	(void)state;
	/* Legacy mangling: shown without the hash, as rustc-demangle does. */
	expect("_ZN5hello4main17h1234567890abcdefE", "hello::main");
	/* v0 mangling. */
	expect("_RNvCs1234_5hello4main", "hello::main");
}

static void test_left_alone(void **state)
{
	(void)state;
	expect("main", NULL);
	expect("__clone3", NULL);
	expect("start_thread", NULL);
	expect("_Z", NULL);                /* mangled prefix, nothing after */
	expect("_ZN3foo", NULL);           /* cut short */
	expect("", NULL);
	expect(NULL, NULL);

	/* Too long to be a real name: not handed to the demangler. */
	size_t n = DEMANGLE_MAX_INPUT + 1;
	char *big = malloc(n + 1);
	assert_non_null(big);
	memcpy(big, "_Z", 2);
	memset(big + 2, 'N', n - 2);
	big[n] = '\0';
	expect(big, NULL);
	free(big);
}

static void test_into(void **state)
{
	char buf[8];
	(void)state;
	/* Readable name, cut like snprintf, full length returned. */
	assert_int_equal(demangle_into("_Z1fv", buf, sizeof buf), 3);
	assert_string_equal(buf, "f()");
	assert_int_equal(demangle_into("_ZN4demo7SpinnerIiE4burnEi", buf, sizeof buf),
	                 strlen("demo::Spinner<int>::burn(int)"));
	assert_string_equal(buf, "demo::S");
	/* A plain name is itself. */
	assert_int_equal(demangle_into("hot_leaf", buf, sizeof buf), 8);
	assert_string_equal(buf, "hot_lea");
	assert_int_equal(demangle_into("x", NULL, 0), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cxx),
		cmocka_unit_test(test_rust),
		cmocka_unit_test(test_left_alone),
		cmocka_unit_test(test_into),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("demangle", tests, NULL, NULL);
}
