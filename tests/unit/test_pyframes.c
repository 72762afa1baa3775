/* Unit tests of stackdump/pyframes.h: the line table of a real CPython 3.11
 * code object against its co_lines(); the merge of Python frames into
 * native ones (runs, C extensions, calls split by their entry frames, a
 * call caught in its prologue, truncation); the walk over made-up memory
 * images (the seeds of tests/fuzz/corpus/pyframes: chains of 3.11, 3.12
 * and 3.13, a loop, a code object of the wrong type, a string that lies)
 * and over strings of each kind; 3.13's debug offsets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/pyframes.h"
#include "stackdump/pyframes_internal.h"
#include "tests/fuzz/pyimage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the line table ---- */

/* burn() of tests/targets/pychain.py as CPython 3.11.2 compiles it, its
 * first line 1: co_linetable, and co_lines() (start, end, line). */
static const char burn_table[] =
	"8000d808098041f002040512d80d0e901289569061895a9837d10c228801d808098851"
	"89068801d80b0c88778a3b883bd810118841f009040512";
static const int burn_lines[][3] = {
	{ 0, 2, 1 }, { 2, 4, 2 }, { 4, 6, 2 }, { 6, 8, 3 }, { 8, 10, 4 }, { 10, 12, 4 },
	{ 12, 16, 4 }, { 16, 18, 4 }, { 18, 22, 4 }, { 22, 24, 4 }, { 24, 28, 4 },
	{ 28, 30, 4 }, { 30, 32, 5 }, { 32, 34, 5 }, { 34, 38, 5 }, { 38, 40, 5 },
	{ 40, 42, 6 }, { 42, 44, 6 }, { 44, 50, 6 }, { 50, 52, 6 }, { 52, 54, 7 },
	{ 54, 56, 7 }, { 56, 58, 3 },
};

static size_t unhex(const char *hex, unsigned char *out)
{
	size_t n = 0;

	for (; hex[0] && hex[1]; hex += 2) {
		unsigned v;
		sscanf(hex, "%2x", &v);
		out[n++] = (unsigned char)v;
	}
	return n;
}

static void test_line_table(void **state)
{
	unsigned char table[128];
	size_t len = unhex(burn_table, table);

	(void)state;
	for (size_t i = 0; i < sizeof(burn_lines) / sizeof(burn_lines[0]); i++)
		for (int a = burn_lines[i][0]; a < burn_lines[i][1]; a++)
			assert_int_equal(pyframes_line(table, len, 1, a), burn_lines[i][2]);
	/* Before the first instruction (a frame not started), past the end,
	 * a table cut short or not starting an entry: the first line. */
	assert_int_equal(pyframes_line(table, len, 1, -2), 1);
	assert_int_equal(pyframes_line(table, len, 1, 58), 1);
	assert_int_equal(pyframes_line(table, 3, 7, 10), 7);
	assert_int_equal(pyframes_line(table + 1, len - 1, 7, 0), 7);
	assert_int_equal(pyframes_line(NULL, 0, 9, 0), 9);
	/* A long form whose varint never ends. */
	const unsigned char endless[] = { 0x80 | 14 << 3, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f };
	assert_int_equal(pyframes_line(endless, sizeof(endless), 5, 0), 5);
}

/* ---- the merge ---- */

static char interp[] = "/usr/bin/python3.11", eval[] = "_PyEval_EvalFrameDefault";
static char cold[] = "_PyEval_EvalFrameDefault.cold", helper[] = "_PyFunction_Vectorcall";
static char ext[] = "/usr/lib/python3/dist-packages/_speedups.so", extfn[] = "speedup_call";
static char libc[] = "/usr/lib/x86_64-linux-gnu/libc.so.6", start[] = "start_thread";

#define INTERP(sym) { .module = interp, .symbol = (sym) }
#define OTHER(mod, sym) { .module = (mod), .symbol = (sym) }

static struct pyframes_frame pyf(const char *name, bool entry)
{
	return (struct pyframes_frame){ .qualname = name, .filename = "/srv/x.py", .entry = entry };
}

/* The slots as a string: Python frames by name, native ones as n<index>. */
static void slots_are(const struct pyframes_slot *s, size_t n, const struct pyframes_frame *py,
                      const char *want)
{
	char got[512] = "";

	for (size_t i = 0; i < n; i++) {
		char one[64];
		if (s[i].python)
			snprintf(one, sizeof(one), "%s%s", i ? " " : "", py[s[i].index].qualname);
		else
			snprintf(one, sizeof(one), "%sn%zu", i ? " " : "", s[i].index);
		strcat(got, one);
	}
	assert_string_equal(got, want);
}

static void test_merge(void **state)
{
	/* burn <- key (entry) | C built-in sorted | run <- Thread.run (entry),
	 * all in the interpreter; then libc. */
	struct stackdump_frame native[] = {
		INTERP(helper), INTERP(eval), INTERP(helper), INTERP(NULL), INTERP(eval),
		INTERP(helper), OTHER(libc, start),
	};
	struct pyframes_frame py[] = {
		pyf("burn", false), pyf("key", true), pyf("run", false), pyf("Thread.run", true),
	};
	struct pyframes_slot s[16];
	size_t n;
	bool cut;

	(void)state;
	pyframes_merge(native, 7, true, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "burn key run Thread.run n6");
	assert_false(cut);

	/* A C extension between: its frame stays between the Python frames
	 * that called it and those it calls. */
	struct stackdump_frame withext[] = {
		INTERP(eval), OTHER(ext, extfn), INTERP(helper), INTERP(eval), OTHER(libc, start),
	};
	pyframes_merge(withext, 5, true, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "burn key n1 run Thread.run n4");

	/* Cut at MAX. */
	pyframes_merge(withext, 5, true, interp, py, 4, true, 3, s, &n, &cut);
	slots_are(s, n, py, "burn key n1");
	assert_true(cut);

	/* A run without a call of the interpreter stays as it is. */
	struct stackdump_frame noeval[] = { INTERP(helper), INTERP(NULL), OTHER(libc, start) };
	pyframes_merge(noeval, 3, true, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "n0 n1 n2");

	/* A cold part of the call counts as the call. */
	struct stackdump_frame withcold[] = { INTERP(cold), INTERP(eval), OTHER(libc, start) };
	pyframes_merge(withcold, 3, true, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "burn key run Thread.run n2");

	/* Caught in the prologue of a third call: its frame is not pushed
	 * yet.  Both complete: matched from the outermost, the new call
	 * shows nothing and the others their own frames. */
	struct stackdump_frame prologue[] = {
		INTERP(eval), INTERP(helper), INTERP(eval), INTERP(eval), OTHER(libc, start),
	};
	pyframes_merge(prologue, 5, true, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "burn key run Thread.run n4");
	/* The native unwind stopped short: innermost first, and the call left
	 * without a group keeps the run native. */
	pyframes_merge(prologue, 5, false, interp, py, 4, true, 16, s, &n, &cut);
	slots_are(s, n, py, "n0 n1 n2 n3 n4");
	/* More calls of the Python walk than of the C stack (it was cut at
	 * max_frames): the innermost ones are matched. */
	struct stackdump_frame one[] = { INTERP(eval), INTERP(helper) };
	pyframes_merge(one, 2, false, interp, py, 4, false, 16, s, &n, &cut);
	slots_are(s, n, py, "burn key");
	/* Another interpreter's frames are not this one's. */
	pyframes_merge(native, 7, true, "/usr/lib/libpython3.11.so.1.0", py, 4, true, 16, s, &n,
	               &cut);
	slots_are(s, n, py, "n0 n1 n2 n3 n4 n5 n6");
}

/* ---- the walk ---- */

#define FAKE_BASE PYIMAGE_BASE

struct image {
	unsigned char *data;
	size_t size;
};

/* Reads seed NAME of fuzz_pyframes into IM. */
static void load_seed(const char *name, struct image *im)
{
	char path[256];

	snprintf(path, sizeof(path), "tests/fuzz/corpus/pyframes/%s", name);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	im->data = malloc(1 << 16);
	im->size = fread(im->data, 1, 1 << 16, f);
	fclose(f);
}

/* Walks IM as fuzz_pyframes does (the same header). */
static int walk_image(const struct image *im, struct pyframes_layout *dyn,
                      struct pyframes_frame *out, size_t max, size_t *n, bool *complete,
                      char *why, size_t whysz)
{
	struct pyimage pim = { im->data, im->size };
	struct pyframes_mem mem = { pyimage_read, &pim };
	struct pyframes_types types = pyimage_types();
	struct pyframes_copy c;
	static struct pyframes_cache *cache;

	memset(&c, 0, sizeof(c));
	if (im->data[0] == 0)
		c.lay = pyframes_layout(0x030b);
	else if (im->data[0] == 1)
		c.lay = pyframes_layout(0x030c);
	else {
		assert_int_equal(pyframes_layout_from_debug(im->data + 0x800, im->size - 0x800,
		                                            0x030d, dyn, why, whysz), 0);
		c.lay = dyn;
	}
	c.ok = true;
	c.current_frame = pyimage_le64(im->data + 8);
	uint64_t d = pyimage_le64(im->data + 16), s = pyimage_le64(im->data + 24);
	c.data = im->data + d;
	c.data_addr = FAKE_BASE + d;
	c.data_len = 4096;
	c.stack = im->data + s;
	c.stack_addr = FAKE_BASE + s;
	c.stack_len = 0x200;
	if (!cache)
		cache = pyframes_cache_new();
	return pyframes_walk(&c, &types, &mem, cache, max, out, n, complete, why, whysz);
}

static void test_walk_seeds(void **state)
{
	static const char *const good[] = {
		"seed-311-chain", "seed-312-shim", "seed-313-debug-offsets",
	};
	struct pyframes_layout dyn;
	struct pyframes_frame out[16];
	char why[200];
	size_t n;
	bool complete;

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		struct image im;
		load_seed(good[i], &im);
		assert_int_equal(walk_image(&im, &dyn, out, 16, &n, &complete, why, sizeof(why)), 0);
		assert_int_equal(n, 3);
		assert_true(complete);
		assert_string_equal(out[0].qualname, "burn");
		assert_string_equal(out[1].qualname, "Worker.run.<locals>.key");
		assert_string_equal(out[2].qualname, "Worker.run");
		assert_string_equal(out[0].filename, "/srv/app/pychain.py");
		assert_int_equal(out[0].firstlineno, 30);
		assert_int_equal(out[0].line, 32);
		assert_int_equal(out[1].line, 43);
		/* Each C call's first frame: key (and, in 3.11, run). */
		assert_false(out[0].entry);
		assert_true(out[1].entry);
		assert_int_equal(out[2].entry, i == 0);
		/* Cut at MAX: not complete, no error. */
		assert_int_equal(walk_image(&im, &dyn, out, 2, &n, &complete, why, sizeof(why)), 0);
		assert_int_equal(n, 2);
		assert_false(complete);
		free(im.data);
	}

	static const char *const bad[][2] = {
		{ "seed-311-loop", "the frame chain loops at frame 3" },
		{ "seed-311-code-of-wrong-type", "frame 1: 0x100002100 is not a code object" },
	};
	for (size_t i = 0; i < 2; i++) {
		struct image im;
		load_seed(bad[i][0], &im);
		assert_int_equal(walk_image(&im, &dyn, out, 16, &n, &complete, why, sizeof(why)),
		                 -EINVAL);
		assert_string_equal(why, bad[i][1]);
		free(im.data);
	}

	/* A str that says it is 2^40 characters long: cut to what is read,
	 * PYFRAMES_STR_MAX characters, here unreadable past the image. */
	struct image im;
	load_seed("seed-311-str-lies-about-its-length", &im);
	int r = walk_image(&im, &dyn, out, 16, &n, &complete, why, sizeof(why));
	assert_true(r == 0 || r == -EINVAL);
	if (r == 0)
		assert_true(strlen(out[0].qualname) <= PYFRAMES_STR_MAX);
	free(im.data);
}

/* A str object of KIND (1, 2, 4) holding the code points CPS, at OFF of
 * IMAGE, laid out as 3.11 does (compact, not ASCII). */
static uint64_t put_str(unsigned char *image, size_t off, unsigned kind, const uint32_t *cps,
                        size_t n, bool ascii)
{
	const struct pyframes_layout *L = pyframes_layout(0x030b);
	uint64_t type = FAKE_BASE + 0x20;
	uint32_t st = kind << 2 | 1 << 5 | (ascii ? 1 << 6 : 0) | 1 << 7;
	uint64_t len = n;

	memcpy(image + off + 8, &type, 8);
	memcpy(image + off + L->str_length, &len, 8);
	memcpy(image + off + L->str_state, &st, 4);
	size_t data = off + (ascii ? L->str_ascii_size : L->str_compact_size);
	for (size_t i = 0; i < n; i++)
		memcpy(image + data + i * kind, &cps[i], kind);   /* little-endian */
	return FAKE_BASE + off;
}

static void test_walk_strings(void **state)
{
	const struct pyframes_layout *L = pyframes_layout(0x030b);
	struct image im = { calloc(1, 0x8000), 0x8000 };
	struct pyframes_layout dyn;
	struct pyframes_frame out[4];
	char why[200];
	size_t n;
	bool complete;

	(void)state;
	/* One frame, its code at 0x2000, its line table empty at 0x2800. */
	uint64_t hdr[4] = { 0, FAKE_BASE + 0x1000, 0x1000, 0x1800 };
	memcpy(im.data, hdr, sizeof(hdr));
	uint64_t code = FAKE_BASE + 0x2000, ctype = FAKE_BASE + 0x10, btype = FAKE_BASE + 0x30;
	memcpy(im.data + 0x1000 + L->frame_code, &code, 8);
	memcpy(im.data + 0x2000 + 8, &ctype, 8);
	uint32_t first = 12;
	memcpy(im.data + 0x2000 + L->code_firstlineno, &first, 4);
	uint64_t table = FAKE_BASE + 0x2800;
	memcpy(im.data + 0x2000 + L->code_linetable, &table, 8);
	memcpy(im.data + 0x2800 + 8, &btype, 8);

	/* Latin-1 "café", UCS-2 "Ωμέγα" with a lone surrogate, UCS-4 "𝔣": */
	const uint32_t latin[] = { 'c', 'a', 'f', 0xe9 };
	const uint32_t ucs2[] = { 0x3a9, 0x3bc, 0xdc00, 0x3b1 };
	const uint32_t ucs4[] = { 0x1d523, 0x110000 };
	uint64_t q = put_str(im.data, 0x3000, 1, latin, 4, false);
	uint64_t f = put_str(im.data, 0x3400, 2, ucs2, 4, false);
	memcpy(im.data + 0x2000 + L->code_qualname, &q, 8);
	memcpy(im.data + 0x2000 + L->code_filename, &f, 8);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].qualname, "caf\xc3\xa9");
	assert_string_equal(out[0].filename, "\xce\xa9\xce\xbc?\xce\xb1");
	assert_int_equal(out[0].line, 12);

	/* UCS-4, with a code point past U+10FFFF. */
	f = put_str(im.data, 0x3800, 4, ucs4, 2, false);
	memcpy(im.data + 0x2000 + L->code_filename, &f, 8);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), 0);
	assert_string_equal(out[0].filename, "\xf0\x9d\x94\xa3?");

	/* An "ASCII" str with a byte over 0x7f is a lie. */
	const uint32_t high[] = { 'a', 0xff };
	f = put_str(im.data, 0x3c00, 1, high, 2, true);
	memcpy(im.data + 0x2000 + L->code_filename, &f, 8);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ASCII"));

	/* Not compact (a legacy string), or of kind 3. */
	f = put_str(im.data, 0x3c00, 1, latin, 4, false);
	memcpy(im.data + 0x2000 + L->code_filename, &f, 8);
	uint32_t st = 1 << 2 | 1 << 7;
	memcpy(im.data + 0x3c00 + L->str_state, &st, 4);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "not a compact str"));
	st = 3 << 2 | 1 << 5 | 1 << 7;
	memcpy(im.data + 0x3c00 + L->str_state, &st, 4);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), -EINVAL);

	/* A line table over PYFRAMES_LINETABLE_MAX bytes. */
	f = put_str(im.data, 0x3c00, 1, latin, 4, false);
	uint64_t big = PYFRAMES_LINETABLE_MAX + 1;
	memcpy(im.data + 0x2800 + 16, &big, 8);
	assert_int_equal(walk_image(&im, &dyn, out, 4, &n, &complete, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "over 65536"));
	free(im.data);
}

/* ---- 3.13's debug offsets ---- */

static void test_debug_offsets(void **state)
{
	struct image im;
	struct pyframes_layout L;
	char why[120];
	size_t size = pyframes_debug_offsets_size();

	(void)state;
	load_seed("seed-313-debug-offsets", &im);
	unsigned char *d = im.data + 0x800;
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030d, &L, why, sizeof(why)), 0);
	/* What 3.13.0's headers say (tests/stackdump/pyoffsets.c). */
	assert_int_equal(L.runtime_interpreters_head, 632);
	assert_int_equal(L.interp_threads_head, 7344);
	assert_int_equal(L.tstate_current_frame, 72);
	assert_int_equal(L.tstate_datastack_chunk, 232);
	assert_int_equal(L.tstate_datastack_top, 240);
	assert_int_equal(L.tstate_size, 256);
	assert_int_equal(L.frame_owner, 70);
	assert_int_equal(L.code_adaptive, 200);
	assert_int_equal(L.str_compact_size, 56);
	/* Cut short, another version, free-threaded, a bad cookie, an
	 * offset out of range. */
	assert_int_equal(pyframes_layout_from_debug(d, size - 1, 0x030d, &L, why, sizeof(why)),
	                 -EINVAL);
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030e, &L, why, sizeof(why)),
	                 -EINVAL);
	d[16] = 1;
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030d, &L, why, sizeof(why)),
	                 -EINVAL);
	assert_string_equal(why, "a free-threaded build");
	d[16] = 0;
	d[0] = 'X';
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030d, &L, why, sizeof(why)),
	                 -EINVAL);
	d[0] = 'x';
	uint64_t huge = 1ull << 40;
	memcpy(d + 8 + 16 + 24 + 13 * 8 + 4 * 8, &huge, 8);   /* thread_state.current_frame */
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030d, &L, why, sizeof(why)),
	                 -EINVAL);
	assert_string_equal(why, "its debug offsets are out of range");
	free(im.data);
	/* An offset near 2^64 must not wrap round to a small one (fuzz_pyframes
	 * found frame.executable = -5 passing "+ 8 <= size"). */
	load_seed("seed-313-debug-offsets", &im);
	d = im.data + 0x800;
	uint64_t minus5 = (uint64_t)-5;
	memcpy(d + offsetof(struct debug_offsets, frame.executable), &minus5, 8);
	assert_int_equal(pyframes_layout_from_debug(d, size, 0x030d, &L, why, sizeof(why)),
	                 -EINVAL);
	assert_string_equal(why, "its debug offsets are out of range");
	free(im.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_line_table),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_walk_seeds),
		cmocka_unit_test(test_walk_strings),
		cmocka_unit_test(test_debug_offsets),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
