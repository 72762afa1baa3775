/* A made-up address space for pyframes' walk, served from a buffer mapped
 * at PYIMAGE_BASE: the memory images of tests/fuzz/fuzz_pyframes.c, its
 * seeds (tests/fuzz/mkseeds_pyframes.py) and tests/unit/test_pyframes.c.
 * The type objects the walk checks ob_type against are at PYIMAGE_BASE +
 * 0x10 (code), + 0x20 (str), + 0x30 (bytes). */
#ifndef CPUMOND_TESTS_PYIMAGE_H
#define CPUMOND_TESTS_PYIMAGE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stackdump/pyframes.h"

#define PYIMAGE_BASE 0x100000000ull

struct pyimage {
	const unsigned char *data;
	size_t size;
};

/* struct pyframes_mem's read over a struct pyimage ARG. */
static inline int pyimage_read(void *arg, uint64_t addr, void *buf, size_t len)
{
	const struct pyimage *im = arg;

	if (addr < PYIMAGE_BASE || addr - PYIMAGE_BASE > im->size ||
	    im->size - (addr - PYIMAGE_BASE) < len)
		return -EFAULT;
	memcpy(buf, im->data + (addr - PYIMAGE_BASE), len);
	return 0;
}

static inline uint64_t pyimage_le64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline struct pyframes_types pyimage_types(void)
{
	return (struct pyframes_types){
		PYIMAGE_BASE + 0x10, PYIMAGE_BASE + 0x20, PYIMAGE_BASE + 0x30,
	};
}

#endif
