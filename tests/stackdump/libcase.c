/* The shared library of stackcases --case dlopen: test_compare.py loads it from
 * a temporary copy, then deletes or replaces that file, as a package
 * upgrade does under a running process. */
#include <stdint.h>

volatile uint64_t lib_sink;

__attribute__((noinline)) uint64_t lib_leaf(void (*arrived)(void))
{
	uint64_t x = 3;

	arrived();
	for (;;) {
		x = x * 6364136223846793005ull + 1;
		__asm__ volatile("" : "+r"(x));
		lib_sink = x;
	}
	return x;
}

__attribute__((noinline)) uint64_t lib_root(void (*arrived)(void))
{
	uint64_t r = lib_leaf(arrived);
	return r ^ (r >> 3);
}
