/* Unit tests of stackdump's pure parts: the hash, escaping, printing, the
 * ELF and maps readers, .debug_frame and decompression.  The live dumps of
 * hotchain and stackcases are test_stackdump_live.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/debugframe.h"
#include "stackdump/elfinfo.h"
#include "stackdump/procmaps.h"
#include "stackdump/snapshot.h"
#include "stackdump/stackdump.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* ---- helpers ---- */

static struct stackdump_frame frame(const char *module, const char *build_id,
                                    uint64_t ip, uint64_t offset, uint64_t func_offset,
                                    const char *symbol, uint64_t symbol_offset)
{
	struct stackdump_frame f = {
		.ip = ip, .offset = offset, .func_offset = func_offset,
		.module = (char *)(uintptr_t)module, .build_id = (char *)(uintptr_t)build_id,
		.symbol = (char *)(uintptr_t)symbol, .symbol_offset = symbol_offset,
	};
	return f;
}

/* What put_escaped writes for S. */
static char *escape(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	stackdump_put_escaped(s, f);
	fclose(f);
	return buf;
}

/* ---- hash ---- */

static void test_hash_ignores_ip_and_instruction(void **state)
{
	(void)state;
	/* The same two functions caught at other instructions, loaded at other
	 * addresses, with other symbol details: one stack. */
	struct stackdump_frame a[] = {
		frame("/opt/a", "0123abcd", 0x55550000113a, 0x113a, 0x1130, "leaf", 0xa),
		frame("/usr/lib/libc.so.6", "feed", 0x7f00000891f5, 0x891f5, 0x891a0, NULL, 0),
	};
	struct stackdump_frame b[] = {
		frame("/opt/a", "0123abcd", 0x56660000114f, 0x114f, 0x1130, "leaf", 0x1f),
		frame("/usr/lib/libc.so.6", "feed", 0x7f11110891f5, 0x891f5, 0x891a0, "start_thread", 0x55),
	};

	assert_int_equal(stackdump_hash(a, 2), stackdump_hash(b, 2));
	/* With a build-id the path does not count either (same file elsewhere). */
	b[0].module = "/elsewhere/a";
	assert_int_equal(stackdump_hash(a, 2), stackdump_hash(b, 2));
}

static void test_hash_differs(void **state)
{
	(void)state;
	struct stackdump_frame a[] = {
		frame("/opt/a", "0123abcd", 0, 0x113a, 0x1130, NULL, 0),
		frame("/opt/b", "4567", 0, 0x2010, 0x2000, NULL, 0),
	};
	struct stackdump_frame other_func[] = {
		frame("/opt/a", "0123abcd", 0, 0x113a, 0x1138, NULL, 0),
		frame("/opt/b", "4567", 0, 0x2010, 0x2000, NULL, 0),
	};
	struct stackdump_frame swapped[] = { a[1], a[0] };
	struct stackdump_frame other_module[] = {
		frame("/opt/a", "0123abce", 0, 0x113a, 0x1130, NULL, 0),
		frame("/opt/b", "4567", 0, 0x2010, 0x2000, NULL, 0),
	};
	uint64_t h = stackdump_hash(a, 2);

	assert_int_not_equal(h, stackdump_hash(other_func, 2));
	assert_int_not_equal(h, stackdump_hash(swapped, 2));
	assert_int_not_equal(h, stackdump_hash(other_module, 2));
	assert_int_not_equal(h, stackdump_hash(a, 1));
}

static void test_hash_uses_path_without_build_id(void **state)
{
	(void)state;
	struct stackdump_frame a[] = { frame("/opt/a", "", 0x1000, 0x10, 0x0, NULL, 0) };
	struct stackdump_frame b[] = { frame("/opt/a", "", 0x2000, 0x18, 0x0, "f", 8) };
	struct stackdump_frame c[] = { frame("/opt/c", "", 0x1000, 0x10, 0x0, NULL, 0) };
	struct stackdump_frame null_id[] = { frame("/opt/a", NULL, 0x1000, 0x10, 0x0, NULL, 0) };

	assert_int_equal(stackdump_hash(a, 1), stackdump_hash(b, 1));
	assert_int_not_equal(stackdump_hash(a, 1), stackdump_hash(c, 1));
	assert_int_equal(stackdump_hash(a, 1), stackdump_hash(null_id, 1));
}

static void test_hash_fixed_and_never_zero(void **state)
{
	(void)state;
	struct stackdump_frame a[] = {
		frame("/opt/a", "0123abcd", 0, 0, 0x1130, NULL, 0),
		frame("/usr/lib/x86_64-linux-gnu/libc.so.6", "", 0, 0, 0x891a0, NULL, 0),
	};

	/* FNV-1a 64 as documented in stackdump.h, computed independently:
	 * stored hashes must stay valid across versions. */
	assert_int_equal(stackdump_hash(a, 2), 0x233f80476ccf8781ull);
	assert_int_equal(stackdump_hash(a, 0), 0);

	/* Never 0 for nframes > 0, whatever the input. */
	uint64_t x = 42;
	for (int i = 0; i < 100000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		struct stackdump_frame f = frame("", "", 0, 0, x, NULL, 0);
		assert_int_not_equal(stackdump_hash(&f, 1), 0);
	}
	struct stackdump_frame none = frame(NULL, NULL, 0, 0, 0, NULL, 0);
	assert_int_not_equal(stackdump_hash(&none, 1), 0);
}

/* ---- escaping and printing ---- */

static void test_escape_table(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", "" },
		{ "plain_name+x", "plain_name+x" },
		{ "a\\b", "a\\\\b" },
		{ "tab\there", "tab\\x09here" },
		{ "nl\n", "nl\\x0a" },
		{ "\x1b[31mred", "\\x1b[31mred" },
		{ "del\x7f", "del\\x7f" },
		{ "caf\xc3\xa9", "caf\xc3\xa9" },                 /* é */
		{ "\xe2\x82\xac", "\xe2\x82\xac" },               /* € */
		{ "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80" },       /* U+1F600 */
		{ "\xc2\xa0", "\xc2\xa0" },                       /* U+00A0, first after C1 */
		{ "\xc2\x9b", "\\xc2\\x9b" },                     /* U+009B CSI: a C1 control */
		{ "\xc2\x80", "\\xc2\\x80" },
		{ "\xff", "\\xff" },
		{ "\xfe\xfe", "\\xfe\\xfe" },
		{ "x\xc3", "x\\xc3" },                            /* truncated sequence */
		{ "\xc3(", "\\xc3(" },                            /* bad continuation */
		{ "\xc0\xaf", "\\xc0\\xaf" },                     /* overlong '/' */
		{ "\xe0\x80\xaf", "\\xe0\\x80\\xaf" },            /* overlong, 3 bytes */
		{ "\xed\xa0\x80", "\\xed\\xa0\\x80" },            /* surrogate U+D800 */
		{ "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80" },   /* above U+10FFFF */
		{ "\xf0\x9f\x98", "\\xf0\\x9f\\x98" },            /* 4-byte, cut short */
		{ "\x80", "\\x80" },                              /* lone continuation */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = escape(cases[i].in);
		if (strcmp(got, cases[i].out) != 0)
			fail_msg("case %zu: escaped \"%s\", want \"%s\"", i, got, cases[i].out);
		free(got);
	}
	char *got = escape(NULL);
	assert_string_equal(got, "");
	free(got);
}

static void test_print_format(void **state)
{
	(void)state;
	struct stackdump_frame frames[] = {
		frame("/x/hotchain", "ab", 0x5555555551a4, 0x11a4, 0x1180, "hot_leaf", 0x24),
		frame("/usr/lib/x86_64-linux-gnu/libc.so.6", "cd", 0x7ffff7e1f1f5, 0x891f5, 0x891a0, NULL, 0),
		frame("/tmp/we\\ird\x1b", "", 0x1000, 0x1000, 0x1000, "evil\x1b]0;", 0),
		frame("?", "", 0x7f0000001234, 0x7f0000001234, 0x7f0000001234, NULL, 0),
	};
	struct stackdump_stack st = { .frames = frames, .nframes = 4, .truncated = true };
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	stackdump_print(&st, "  ", f);
	st.truncated = false;
	st.nframes = 1;
	stackdump_print(&st, NULL, f);
	fclose(f);
	assert_string_equal(buf,
		"  #0 hot_leaf+0x24 (/x/hotchain)\n"
		"  #1 /usr/lib/x86_64-linux-gnu/libc.so.6+0x891f5\n"
		"  #2 evil\\x1b]0;+0x0 (/tmp/we\\\\ird\\x1b)\n"
		"  #3 ?+0x7f0000001234\n"
		"    (truncated at 4 frames)\n"
		"#0 hot_leaf+0x24 (/x/hotchain)\n");
	free(buf);
}

/* ---- the ELF reader ---- */

static int test_marker_function(int x)
{
	return x * 3 + 1;
}

/* This test program's own file: /proc/self/exe. */
static unsigned char *self_image(size_t *size)
{
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	struct stat st;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	unsigned char *buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return buf;
}

static void test_elfinfo_self(void **state)
{
	(void)state;
	struct elfinfo ei;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), 0);
	close(fd);
	assert_true(strlen(ei.build_id) >= 16);   /* gcc and ld give 20 bytes: 40 digits */
	assert_true(ei.nloads >= 2);
	assert_true(ei.has_eh_table);
	assert_non_null(ei.eh_data);

	/* Find test_marker_function by name, then by address. */
	uint64_t value = 0;
	for (size_t i = 0; i < ei.nsyms; i++)
		if (strcmp(ei.strtab + ei.syms[i].name, "test_marker_function") == 0)
			value = ei.syms[i].value;
	assert_int_not_equal(value, 0);
	uint64_t start = 0;
	const char *name = elfinfo_symbol(&ei, value + 1, &start);
	assert_non_null(name);
	assert_string_equal(name, "test_marker_function");
	assert_int_equal(start, value);

	/* The symbol's address, relocated by the loader, gives the load bias
	 * back through the file offset of the mapping: the same vaddr. */
	struct procmaps m;
	assert_int_equal(procmaps_read(getpid(), &m), 0);
	uint64_t addr = (uint64_t)(uintptr_t)&test_marker_function;
	const struct procmaps_entry *e = procmaps_find(&m, addr);
	assert_non_null(e);
	uint64_t vaddr;
	assert_true(elfinfo_vaddr(&ei, addr - e->start + e->pgoff, &vaddr));
	assert_int_equal(vaddr, value);
	procmaps_free(&m);
	assert_int_equal(test_marker_function(1), 4);
	elfinfo_free(&ei);
}

static void test_elfinfo_rejects(void **state)
{
	(void)state;
	struct elfinfo ei;
	static const char text[] = "#!/bin/sh\necho not an elf\n";

	assert_int_equal(elfinfo_read_mem(text, sizeof(text), &ei), -ENOEXEC);
	assert_int_equal(elfinfo_read_mem(text, 0, &ei), -ENOEXEC);
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);   /* not a regular file */
	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), -ENOEXEC);
	close(fd);
	elfinfo_free(&ei);
}

/* Hostile images: every short prefix, and a few thousand random corruptions
 * of the headers and of the whole file.  Nothing may crash or read out of
 * bounds (run under ASan to see the latter). */
static void test_elfinfo_hostile(void **state)
{
	(void)state;
	size_t size;
	unsigned char *good = self_image(&size);
	unsigned char *bad = malloc(size);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	struct elfinfo ei;

	assert_non_null(bad);
	for (size_t len = 0; len < size && len < 16384; len += len < 4096 ? 1 : 61) {
		/* A fresh buffer of exactly LEN bytes, so ASan sees overreads. */
		unsigned char *cut = malloc(len ? len : 1);
		assert_non_null(cut);
		memcpy(cut, good, len);
		if (elfinfo_read_mem(cut, len, &ei) == 0)
			elfinfo_free(&ei);
		free(cut);
	}
	for (int round = 0; round < 3000; round++) {
		memcpy(bad, good, size);
		for (int k = 0; k < 8; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			/* Mostly the ELF, program and section headers. */
			size_t pos = (k & 1) ? (size_t)(x >> 8) % size : (size_t)(x >> 8) % 4096 % size;
			bad[pos] = (unsigned char)x;
			if (k == 7 && size > 64) {
				/* And a whole bogus offset or count in the ELF header. */
				size_t at = 0x18 + (size_t)(x >> 40) % 0x28;
				memcpy(bad + at, &x, at + 8 <= 64 ? 8 : 1);
			}
		}
		if (elfinfo_read_mem(bad, size, &ei) == 0) {
			uint64_t start, v;
			for (int q = 0; q < 16; q++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				elfinfo_symbol(&ei, x % (size * 2), &start);
				elfinfo_vaddr(&ei, x % (size * 2), &v);
				elfinfo_eh_word(&ei, x % (size * 2), &v);
			}
			elfinfo_free(&ei);
		}
	}
	free(bad);
	free(good);
}

/* ---- .debug_frame, MiniDebugInfo, seeds of the fuzz corpus ---- */

/* A file of tests/fuzz/corpus/elf/ (tests run from the top directory), or
 * NULL: the test then skips. */
static unsigned char *corpus_file(const char *name, size_t *size)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "tests/fuzz/corpus/elf/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0) {
		if (fd >= 0)
			close(fd);
		print_message("skipped: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	unsigned char *buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return buf;
}

static uint32_t u32_at(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t u64_at(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* A hand-made .debug_frame: a CIE, an FDE for [0x1100, 0x1140), an FDE
 * outside the module, one in 64-bit DWARF (dropped), and an FDE for
 * [0x1000, 0x1010) pointing back to the CIE. */
static void test_debugframe_convert(void **state)
{
	(void)state;
	unsigned char sec[256];
	size_t n = 0;
#define PUT(v, k) (memcpy(sec + n, &(v), k), n += k)
	uint32_t len = 16, id = 0xffffffff;
	PUT(len, 4);
	PUT(id, 4);
	static const unsigned char cie[] = { 1, 0, 1, 0x78, 16, 0x0c, 7, 8, 0x90, 1, 0, 0 };
	memcpy(sec + n, cie, sizeof(cie));
	n += sizeof(cie);
	struct { uint64_t start, range; } fdes[] = { { 0x1100, 0x40 }, { 0x900000, 0x10 } };
	for (int i = 0; i < 2; i++) {
		uint32_t flen = 4 + 16 + 4, cieptr = 0;
		static const unsigned char instr[] = { 0x44, 0x0e, 0x10, 0 };
		PUT(flen, 4);
		PUT(cieptr, 4);
		PUT(fdes[i].start, 8);
		PUT(fdes[i].range, 8);
		memcpy(sec + n, instr, 4);
		n += 4;
	}
	uint32_t dw64 = 0xffffffff;
	uint64_t len64 = 4;
	PUT(dw64, 4);
	PUT(len64, 8);
	n += 4;
	uint32_t flen = 4 + 16, cieptr = 0;
	uint64_t start = 0x1000, range = 0x10;
	PUT(flen, 4);
	PUT(cieptr, 4);
	PUT(start, 8);
	PUT(range, 8);
#undef PUT

	struct debugframe df;
	assert_int_equal(debugframe_convert(sec, n, 0x0, 0x2000, 1 << 20, &df), 0);
	assert_int_equal(df.count, 2);
	/* The CIE, rewritten as .eh_frame has it: id 0, "zR", pcrel|sdata8. */
	assert_int_equal(u32_at(df.data + 4), 0);
	assert_memory_equal(df.data + 9, "zR", 3);
	/* The table: sorted by start; each FDE's pc-relative start decodes to
	 * its ELF address as libunwind computes it (the field's shadow
	 * address plus the value, modulo 2^64). */
	const unsigned char *tab = df.data + df.table_off;
	int32_t s0, f0, s1, f1;
	memcpy(&s0, tab, 4);
	memcpy(&f0, tab + 4, 4);
	memcpy(&s1, tab + 8, 4);
	memcpy(&f1, tab + 12, 4);
	assert_int_equal(s0, 0x1000);
	assert_int_equal(s1, 0x1100);
	uint64_t field = DEBUGFRAME_SHADOW + (uint64_t)f1 + 8;
	assert_int_equal(field + u64_at(df.data + f1 + 8), 0x1100);
	assert_int_equal(u64_at(df.data + f1 + 16), 0x40);
	/* The CIE pointer leads back to offset 0. */
	assert_int_equal((uint64_t)f0 + 4 - u32_at(df.data + f0 + 4), 0);
	assert_int_equal(df.size % 8, 0);
	debugframe_free(&df);

	/* Too large for the window: refused, nothing kept. */
	assert_int_equal(debugframe_convert(sec, n, 0x0, 0x2000, 16, &df), -E2BIG);
	assert_null(df.data);
	/* Every prefix and some corruption: no crash, no overread (ASan). */
	for (size_t cut = 0; cut <= n; cut++) {
		unsigned char *p = malloc(cut ? cut : 1);
		assert_non_null(p);
		memcpy(p, sec, cut);
		if (debugframe_convert(p, cut, 0, 0x2000, 1 << 20, &df) == 0)
			debugframe_free(&df);
		for (size_t k = 0; k < cut; k += 3) {
			p[k] ^= 0xa5;
			if (debugframe_convert(p, cut, 0, 0x2000, 1 << 20, &df) == 0)
				debugframe_free(&df);
			p[k] ^= 0xa5;
		}
		free(p);
	}
}

/* The seeds are real (tiny) ELF files: their unwind data and symbols are
 * found the way a module's are. */
static void test_elfinfo_seeds(void **state)
{
	(void)state;
	struct elfinfo ei;
	size_t size;
	uint64_t start;
	unsigned char *img = corpus_file("seed-debug-frame", &size);

	if (!img)
		skip();
	assert_int_equal(elfinfo_read_mem(img, size, &ei), 0);
	assert_false(ei.has_eh_table);         /* -fno-asynchronous-unwind-tables */
	assert_true(ei.dbg.count >= 2);
	assert_string_equal(ei.symsrc, ".symtab");
	elfinfo_free(&ei);
	free(img);

	/* Stripped, with its function symbols in xz-compressed .gnu_debugdata. */
	img = corpus_file("seed-minidebuginfo", &size);
	assert_non_null(img);
	assert_int_equal(elfinfo_read_mem(img, size, &ei), 0);
	assert_string_equal(ei.symsrc, ".gnu_debugdata");
	uint64_t mid = 0;
	for (size_t i = 0; i < ei.nsyms; i++)
		if (strcmp(ei.strtab + ei.syms[i].name, "mid") == 0)
			mid = ei.syms[i].value;
	assert_int_not_equal(mid, 0);
	const char *name = elfinfo_symbol(&ei, mid + 1, &start);
	assert_non_null(name);
	assert_string_equal(name, "mid");
	elfinfo_free(&ei);

	/* A corrupt xz stream: no symbols, no failure. */
	unsigned char *xz = memmem(img, size, "\xfd" "7zXZ", 5);
	assert_non_null(xz);
	xz[40] ^= 0xff;
	assert_int_equal(elfinfo_read_mem(img, size, &ei), 0);
	assert_int_equal(ei.nsyms, 0);
	elfinfo_free(&ei);
	free(img);
}

/* ---- compressed sections ---- */

/* An SHF_COMPRESSED section's bytes, at offset 1 of the buffer *BASE (free
 * that) as Go writes them, at any alignment: an Elf64_Chdr of TYPE and
 * ALIGN declaring SIZE bytes, then the LEN bytes of DATA. */
static unsigned char *chdr_section(uint32_t type, uint64_t size, uint64_t align,
                                   const void *data, size_t len, unsigned char **base)
{
	Elf64_Chdr ch = { .ch_type = type, .ch_size = size, .ch_addralign = align };

	*base = malloc(1 + sizeof(ch) + len);
	assert_non_null(*base);
	memcpy(*base + 1, &ch, sizeof(ch));
	memcpy(*base + 1 + sizeof(ch), data, len);
	return *base + 1;
}

/* Text that compresses about as well as debug sections do. */
static unsigned char *sample_text(size_t n)
{
	unsigned char *p = malloc(n);
	uint64_t x = 88172645463325252ull;

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = "main.burn\0main.spin\0runtime.goexit\0"[x % 35] ^ (x % 7 == 0 ? (x >> 40) & 15 : 0);
	}
	return p;
}

static size_t zlib_of(const unsigned char *in, size_t n, unsigned char **out)
{
	uLongf len = compressBound(n);

	*out = malloc(len);
	assert_non_null(*out);
	assert_int_equal(compress2(*out, &len, in, n, 9), Z_OK);
	return len;
}

static size_t zstd_of(const unsigned char *in, size_t n, unsigned char **out)
{
	size_t len = ZSTD_compressBound(n);

	*out = malloc(len);
	assert_non_null(*out);
	len = ZSTD_compress(*out, len, in, n, 3);
	assert_false(ZSTD_isError(len));
	return len;
}

/* Decompresses SEC (LEN bytes; ZDEBUG: the .zdebug_ form) with a cap of 1
 * MiB; returns the function's value, the reason in WHY. */
static int unpack(const unsigned char *sec, size_t len, bool zdebug, unsigned char **out,
                      size_t *n, char *why)
{
	strcpy(why, "(not set)");
	return elfinfo_uncompress(sec, len, zdebug, 1u << 20, out, n, why, 128);
}

/* zlib and zstd, in both forms, decompress to the bytes compressed, with a
 * NUL byte after them. */
static void test_uncompress_good(void **state)
{
	(void)state;
	size_t n = 100000, zn, got;
	unsigned char *text = sample_text(n), *z, *base, *out;
	char why[128];

	for (int type = ELFCOMPRESS_ZLIB; type <= ELFCOMPRESS_ZSTD; type++) {
		zn = type == ELFCOMPRESS_ZLIB ? zlib_of(text, n, &z) : zstd_of(text, n, &z);
		const unsigned char *sec = chdr_section(type, n, 8, z, zn, &base);
		assert_int_equal(unpack(sec, sizeof(Elf64_Chdr) + zn, false, &out, &got, why), 0);
		assert_int_equal(got, n);
		assert_memory_equal(out, text, n);
		assert_int_equal(out[n], 0);
		free(out);
		free(base);
		free(z);
	}

	/* .zdebug_: "ZLIB", then the size in 8 big-endian bytes. */
	zn = zlib_of(text, n, &z);
	unsigned char *zd = malloc(12 + zn);
	assert_non_null(zd);
	memcpy(zd, "ZLIB\0\0\0\0\0\x01\x86\xa0", 12);      /* 100000 */
	memcpy(zd + 12, z, zn);
	assert_int_equal(unpack(zd, 12 + zn, true, &out, &got, why), 0);
	assert_int_equal(got, n);
	assert_memory_equal(out, text, n);
	free(out);

	/* An empty section. */
	unsigned char *e;
	size_t en = zlib_of(text, 0, &e);
	const unsigned char *sec = chdr_section(ELFCOMPRESS_ZLIB, 0, 1, e, en, &base);
	assert_int_equal(unpack(sec, sizeof(Elf64_Chdr) + en, false, &out, &got, why), 0);
	assert_int_equal(got, 0);
	free(out);
	free(base);
	free(e);
	free(zd);
	free(z);
	free(text);
}

/* Every refusal, with its reason; nothing is returned then. */
static void test_uncompress_refused(void **state)
{
	(void)state;
	size_t n = 100000, got;
	unsigned char *text = sample_text(n), *zl, *zs, *base, *out;
	size_t zln = zlib_of(text, n, &zl), zsn = zstd_of(text, n, &zs);
	size_t hdr = sizeof(Elf64_Chdr);
	char why[128], want[128];
	const unsigned char *sec;

#define REFUSED(sec, len, zdebug, reason) do { \
		out = (unsigned char *)1; \
		assert_int_equal(unpack(sec, len, zdebug, &out, &got, why), -ENOEXEC); \
		assert_null(out); \
		assert_string_equal(why, reason); \
	} while (0)

	sec = chdr_section(ELFCOMPRESS_ZLIB, n, 8, zl, zln, &base);
	REFUSED(sec, 10, false, "compression header cut off at 10 bytes");
	free(base);
	sec = chdr_section(3, n, 8, zl, zln, &base);
	REFUSED(sec, hdr + zln, false, "unknown compression type 3");
	free(base);
	sec = chdr_section(ELFCOMPRESS_ZLIB, n, 24, zl, zln, &base);
	REFUSED(sec, hdr + zln, false, "alignment 24 is not a power of two");
	free(base);

	/* Sizes that cannot be true, refused before anything is allocated. */
	sec = chdr_section(ELFCOMPRESS_ZLIB, (1u << 20) + 1, 8, zl, zln, &base);
	REFUSED(sec, hdr + zln, false, "declares 1048577 bytes, over the cap of 1048576");
	free(base);
	sec = chdr_section(ELFCOMPRESS_ZSTD, UINT64_MAX, 8, zs, zsn, &base);
	REFUSED(sec, hdr + zsn, false,
	        "declares 18446744073709551615 bytes, over the cap of 1048576");
	free(base);
	sec = chdr_section(ELFCOMPRESS_ZLIB, 1032 * 100 + 1, 8, zl, 100, &base);
	REFUSED(sec, hdr + 100, false, "declares 103201 bytes from 100: more than 1032 times as many");
	free(base);

	/* Sizes that lie, both ways and both algorithms. */
	for (int type = ELFCOMPRESS_ZLIB; type <= ELFCOMPRESS_ZSTD; type++) {
		const unsigned char *z = type == ELFCOMPRESS_ZLIB ? zl : zs;
		size_t zn = type == ELFCOMPRESS_ZLIB ? zln : zsn;
		sec = chdr_section(type, n + 1, 8, z, zn, &base);
		REFUSED(sec, hdr + zn, false, "decompresses to 100000 bytes, not the 100001 declared");
		free(base);
		sec = chdr_section(type, n - 1, 8, z, zn, &base);
		REFUSED(sec, hdr + zn, false, "decompresses to more than the 99999 bytes declared");
		free(base);
	}

	/* Cut off, and corrupt. */
	sec = chdr_section(ELFCOMPRESS_ZLIB, n, 8, zl, zln, &base);
	out = NULL;
	assert_int_equal(unpack(sec, hdr + zln / 2, false, &out, &got, why), -ENOEXEC);
	assert_null(out);
	assert_true(strncmp(why, "zlib data cut off after ", 24) == 0);
	free(base);
	sec = chdr_section(ELFCOMPRESS_ZSTD, n, 8, zs, zsn, &base);
	REFUSED(sec, hdr + zsn / 2, false, "zstd data cut off");
	free(base);
	zl[0] ^= 0xff;
	sec = chdr_section(ELFCOMPRESS_ZLIB, n, 8, zl, zln, &base);
	REFUSED(sec, hdr + zln, false, "corrupt zlib data: incorrect header check");
	free(base);
	zl[0] ^= 0xff;
	zs[0] ^= 0xff;
	sec = chdr_section(ELFCOMPRESS_ZSTD, n, 8, zs, zsn, &base);
	snprintf(want, sizeof(want), "corrupt zstd data: %s", ZSTD_getErrorName((size_t)-ZSTD_error_prefix_unknown));
	REFUSED(sec, hdr + zsn, false, want);
	free(base);
	zs[0] ^= 0xff;

	/* A bomb: 64 MiB of zeros in 64 KiB, declared as 512 KiB, is inflated
	 * into 512 KiB and a byte, and refused there. */
	size_t big = 64u << 20;
	unsigned char *zeros = calloc(big, 1), *bomb;
	assert_non_null(zeros);
	size_t bn = zlib_of(zeros, big, &bomb);
	free(zeros);
	assert_true(bn < 128 * 1024);
	sec = chdr_section(ELFCOMPRESS_ZLIB, 512 * 1024, 8, bomb, bn, &base);
	REFUSED(sec, hdr + bn, false, "decompresses to more than the 524288 bytes declared");
	free(base);
	free(bomb);

	/* .zdebug_ without its header. */
	REFUSED(zl, zln, true, "no ZLIB header");
	REFUSED((const unsigned char *)"ZLIB", 4, true, "no ZLIB header");
#undef REFUSED
	free(zl);
	free(zs);
	free(text);
}

/* The seeds with compressed sections: a .debug_frame compressed with zlib,
 * with zstd, in the .zdebug_ form, by gcc -gz=zlib, and a compressed
 * .symtab give what the plain file gives; the hostile ones (made from the
 * zlib one) are refused with their reason, and the module is still read. */
static void test_elfinfo_compressed_seeds(void **state)
{
	(void)state;
	struct elfinfo plain, ei;
	size_t size;
	unsigned char *img = corpus_file("seed-debug-frame-plain", &size);

	if (!img)
		skip();
	assert_int_equal(elfinfo_read_mem(img, size, &plain), 0);
	free(img);
	assert_int_equal(plain.dbg.count, 13);    /* f0..f11 and _start */
	assert_int_equal(plain.nsyms, 13);

	static const char *const same[] = {
		"seed-debug-frame-zlib", "seed-debug-frame-zstd", "seed-zdebug-frame",
		"seed-gcc-gz-zlib", "seed-symtab-zlib",
	};
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		img = corpus_file(same[i], &size);
		assert_non_null(img);
		assert_int_equal(elfinfo_read_mem(img, size, &ei), 0);
		print_message("%s: %zu FDEs, %zu symbols, refused \"%s\"\n", same[i], ei.dbg.count,
		              ei.nsyms, ei.refused);
		assert_string_equal(ei.refused, "");
		assert_int_equal(ei.dbg.count, plain.dbg.count);
		assert_int_equal(ei.dbg.size, plain.dbg.size);
		assert_memory_equal(ei.dbg.data, plain.dbg.data, plain.dbg.size);
		assert_int_equal(ei.nsyms, plain.nsyms);
		for (size_t k = 0; k < ei.nsyms; k++)
			assert_string_equal(ei.strtab + ei.syms[k].name, plain.strtab + plain.syms[k].name);
		assert_string_equal(ei.symsrc, ".symtab");
		elfinfo_free(&ei);
		free(img);
	}

	static const struct { const char *seed, *reason; } hostile[] = {
		{ "seed-zlib-size-long", ".debug_frame: decompresses to 336 bytes, not the 337 declared" },
		{ "seed-zlib-size-short", ".debug_frame: decompresses to more than the 335 bytes declared" },
		{ "seed-zlib-bomb", ".debug_frame: declares 1073741824 bytes, over the cap of 33554432" },
		{ "seed-zlib-type", ".debug_frame: unknown compression type 9" },
		{ "seed-zlib-truncated", ".debug_frame: zlib data cut off after " },
		{ "seed-zstd-truncated", ".debug_frame: zstd data cut off" },
	};
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		img = corpus_file(hostile[i].seed, &size);
		assert_non_null(img);
		assert_int_equal(elfinfo_read_mem(img, size, &ei), 0);
		print_message("%s: refused \"%s\"\n", hostile[i].seed, ei.refused);
		assert_true(strncmp(ei.refused, hostile[i].reason, strlen(hostile[i].reason)) == 0);
		assert_int_equal(ei.dbg.count, 0);
		assert_int_equal(ei.nsyms, plain.nsyms);    /* the rest is read */
		elfinfo_free(&ei);
		free(img);
	}
	elfinfo_free(&plain);
}

/* Names are given only inside a symbol's extent. */
static void test_elfinfo_symbol_extent(void **state)
{
	(void)state;
	struct elfinfo_sym syms[] = {
		{ .value = 0x1000, .size = 0x20, .name = 1, .rank = 0 },
		{ .value = 0x1040, .size = 0x10, .name = 3, .rank = 0 },
	};
	char strtab[] = "\0a\0b";
	struct elfinfo ei = { .syms = syms, .nsyms = 2, .strtab = strtab, .strtab_size = 5 };
	uint64_t start = 0;

	assert_string_equal(elfinfo_symbol(&ei, 0x1000, &start), "a");
	assert_string_equal(elfinfo_symbol(&ei, 0x101f, &start), "a");
	assert_null(elfinfo_symbol(&ei, 0x1020, &start));   /* after a's end: no name */
	assert_null(elfinfo_symbol(&ei, 0x103f, &start));
	assert_string_equal(elfinfo_symbol(&ei, 0x1045, &start), "b");
	assert_int_equal(start, 0x1040);
	assert_null(elfinfo_symbol(&ei, 0xfff, &start));
	assert_null(elfinfo_symbol(&ei, 0x1050, &start));
}

static void test_snapshot_word(void **state)
{
	(void)state;
	unsigned char stack[32];
	struct snapshot snap = { .stack = stack, .cap = sizeof(stack), .stack_addr = 0x7000,
	                         .stack_len = 24 };
	uint64_t v;

	for (size_t i = 0; i < sizeof(stack); i++)
		stack[i] = (unsigned char)i;
	assert_true(snapshot_word(&snap, 0x7000, &v));
	assert_int_equal(v, 0x0706050403020100ull);
	assert_true(snapshot_word(&snap, 0x7010, &v));
	assert_false(snapshot_word(&snap, 0x7011, &v));   /* runs past the copy */
	assert_false(snapshot_word(&snap, 0x6fff, &v));
	assert_false(snapshot_word(&snap, UINT64_MAX - 3, &v));
	snap.stack_len = 0;
	assert_false(snapshot_word(&snap, 0x7000, &v));
}

/* ---- the maps parser ---- */

static void test_procmaps_parse(void **state)
{
	(void)state;
	static const char text[] =
		"55d4c0a00000-55d4c0a01000 r--p 00000000 fe:01 1234567                    /usr/bin/my prog\n"
		"55d4c0a01000-55d4c0a02000 r-xp 00001000 fe:01 1234567                    /usr/bin/my prog\n"
		"55d4c1000000-55d4c1021000 rw-p 00000000 00:00 0                          [heap]\n"
		"7f1c2b600000-7f1c2b628000 r-xp 00000000 103:02 42                        /lib/gone.so (deleted)\n"
		"7f1c2b700000-7f1c2b701000 rw-p 00000000 00:00 0 \n"
		"this line is garbage\n"
		"7ffd3a1fe000-7ffd3a200000 r-xp 00000000 00:00 0                          [vdso]\n"
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]";
	struct procmaps m;

	assert_int_equal(procmaps_parse(text, strlen(text), &m), 0);
	assert_int_equal(m.n, 7);
	assert_string_equal(m.v[0].path, "/usr/bin/my prog");
	assert_string_equal(m.v[1].perms, "r-xp");
	assert_int_equal(m.v[1].pgoff, 0x1000);
	assert_int_equal(m.v[1].inode, 1234567);
	assert_int_equal(m.v[3].dev_major, 0x103);
	assert_int_equal(m.v[3].dev_minor, 2);
	assert_string_equal(m.v[3].path, "/lib/gone.so (deleted)");
	assert_string_equal(m.v[4].path, "");
	assert_string_equal(m.v[5].path, "[vdso]");

	const struct procmaps_entry *e = procmaps_find(&m, 0x55d4c0a01abc);
	assert_non_null(e);
	assert_int_equal(e->start, 0x55d4c0a01000);
	assert_null(procmaps_find(&m, 0x55d4c0a02000));
	assert_null(procmaps_find(&m, 0));
	assert_non_null(procmaps_find(&m, 0xffffffffff600fff));
	procmaps_free(&m);
}

int main(void)
{
	const struct CMUnitTest pure[] = {
		cmocka_unit_test(test_hash_ignores_ip_and_instruction),
		cmocka_unit_test(test_hash_differs),
		cmocka_unit_test(test_hash_uses_path_without_build_id),
		cmocka_unit_test(test_hash_fixed_and_never_zero),
		cmocka_unit_test(test_escape_table),
		cmocka_unit_test(test_print_format),
		cmocka_unit_test(test_elfinfo_self),
		cmocka_unit_test(test_elfinfo_rejects),
		cmocka_unit_test(test_elfinfo_hostile),
		cmocka_unit_test(test_procmaps_parse),
		cmocka_unit_test(test_debugframe_convert),
		cmocka_unit_test(test_elfinfo_seeds),
		cmocka_unit_test(test_uncompress_good),
		cmocka_unit_test(test_uncompress_refused),
		cmocka_unit_test(test_elfinfo_compressed_seeds),
		cmocka_unit_test(test_elfinfo_symbol_extent),
		cmocka_unit_test(test_snapshot_word),
	};
	/* TEST_FILTER=test_hash_differs runs the matching tests only. */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	int failed = cmocka_run_group_tests_name("stackdump", pure, NULL, NULL);

	return failed ? 1 : 0;
}
