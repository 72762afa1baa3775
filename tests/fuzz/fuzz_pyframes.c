/* libFuzzer target: pyframes' walk of a CPython thread's frames
 * (pyframes_walk), its line tables (pyframes_line), 3.13's debug offsets
 * (pyframes_layout_from_debug) and the merge with native frames
 * (pyframes_merge), on made-up memory.  The target's memory is input from
 * a process that may be broken or hostile: no chain of pointers, string
 * length, type or line table in it may crash the daemon, loop or make it
 * allocate without bound.
 *
 * Input: an address space, served from the input itself.
 *
 *   byte 0       the layout: 0 CPython 3.11's, 1 3.12's, 2 3.13's from
 *                debug offsets at FAKE_BASE + 0x800 (the bytes there)
 *   bytes 8-15   the current frame's address (little-endian), as the stop
 *                read it from the thread state
 *   bytes 16-23  the data stack copy's start, an offset into the input: the
 *                copy is input[start, start + 4096), at FAKE_BASE + start
 *   bytes 24-31  the C stack copy's start, likewise (3.12's shim frames)
 *   the whole input is memory at FAKE_BASE: code objects, strings, bytes.
 *
 * The type objects the walk checks ob_type against are at FAKE_BASE +
 * 0x10 (code), + 0x20 (str), + 0x30 (bytes).  Frames the walk finds are
 * merged into a native stack of three frames, two of them the
 * interpreter's _PyEval_EvalFrameDefault.  Seeds (tests/fuzz/corpus/
 * pyframes/) are written by tests/fuzz/mkseeds_pyframes.py: a chain of
 * three frames of 3.11 and of 3.12 (with a shim), a loop, a code object
 * of the wrong type, a string that lies about its length.
 * FUZZ_PYFRAMES_VERBOSE=1 in the environment prints the frames found. */
#include "stackdump/pyframes.h"
#include "tests/fuzz/pyimage.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_BASE PYIMAGE_BASE
#define COPY_LEN 4096
#define MAX_FRAMES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A copy of input[OFF, OFF + COPY_LEN), as much of it as there is. */
static void region(const struct pyimage *im, uint64_t off, const unsigned char **p,
                   uint64_t *addr, size_t *len)
{
	*p = NULL;
	*addr = 0;
	*len = 0;
	if (off >= im->size)
		return;
	*p = im->data + off;
	*addr = FAKE_BASE + off;
	*len = im->size - off < COPY_LEN ? (size_t)(im->size - off) : COPY_LEN;
}

static struct pyframes_cache *cache;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pyimage im = { data, size };
	struct pyframes_mem mem = { pyimage_read, &im };
	struct pyframes_types types = pyimage_types();
	struct pyframes_layout dyn;
	struct pyframes_copy c;
	struct pyframes_frame out[MAX_FRAMES];
	char why[200];
	size_t n = 0;
	bool complete = false;

	if (size < 32)
		return 0;
	/* The line tables of whatever the input is. */
	pyframes_line(data, size, (int)(int8_t)data[1], (int)(pyimage_le64(data + 8) & 0xffff) - 2);

	memset(&c, 0, sizeof(c));
	if (data[0] == 0) {
		c.lay = pyframes_layout(0x030b);
	} else if (data[0] == 1) {
		c.lay = pyframes_layout(0x030c);
	} else {
		if (size < 0x800 || pyframes_layout_from_debug(data + 0x800, size - 0x800, 0x030d,
		                                               &dyn, why, sizeof(why)) < 0)
			return 0;
		c.lay = &dyn;
	}
	c.ok = true;
	c.current_frame = pyimage_le64(data + 8);
	const unsigned char *p;
	region(&im, pyimage_le64(data + 16), &p, &c.data_addr, &c.data_len);
	c.data = (unsigned char *)(uintptr_t)p;  /* the walk only reads it */
	region(&im, pyimage_le64(data + 24), &c.stack, &c.stack_addr, &c.stack_len);

	/* One cache for the whole run, as the daemon keeps one per process:
	 * entries of earlier inputs meet addresses of later ones. */
	if (!cache && !(cache = pyframes_cache_new()))
		abort();
	int r = pyframes_walk(&c, &types, &mem, cache, MAX_FRAMES, out, &n, &complete, why,
	                      sizeof(why));
	if (r == -ENOMEM)
		abort();
	if (r < 0) {
		if (!why[0])
			abort();           /* a failed walk always says why */
		return 0;
	}
	if (n > MAX_FRAMES)
		abort();
	for (size_t i = 0; i < n; i++) {
		if (strlen(out[i].qualname) > PYFRAMES_STR_MAX || strlen(out[i].filename) > PYFRAMES_STR_MAX)
			abort();
		if (getenv("FUZZ_PYFRAMES_VERBOSE"))
			fprintf(stderr, "#%zu %s (%s:%d) first %d%s\n", i, out[i].qualname,
			        out[i].filename, out[i].line, out[i].firstlineno,
			        out[i].entry ? " entry" : "");
	}

	static char interp[] = "/usr/bin/python3.11", eval[] = "_PyEval_EvalFrameDefault";
	static char libc[] = "/usr/lib/libc.so.6", start[] = "start_thread";
	struct stackdump_frame native[3] = {
		{ .module = interp, .symbol = eval },
		{ .module = interp, .symbol = eval },
		{ .module = libc, .symbol = start },
	};
	struct pyframes_slot slots[MAX_FRAMES];
	size_t ns = 0;
	bool cut = false;
	pyframes_merge(native, 3, data[1] & 1, interp, out, n, complete, MAX_FRAMES, slots, &ns,
	               &cut);
	if (ns > MAX_FRAMES)
		abort();
	for (size_t i = 0; i < ns; i++)
		if (slots[i].index >= (slots[i].python ? n : 3))
			abort();
	return 0;
}
