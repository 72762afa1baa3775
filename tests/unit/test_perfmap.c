/* Unit tests of stackdump/perfmap.c: the parser (node's, the JVM's and
 * python's lines, lines that do not parse, a name cut, a partial last
 * line), the lookup (unsorted and overlapping maps: the latest line wins),
 * the identity of V8's tiers, the caps; and, live, a map that grows, one
 * written anew, one cut to its last PERFMAP_MAX_BYTES and one owned by
 * another user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/perfmap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t parse(struct perfmap *m, const char *text)
{
	return perfmap_parse(m, text, strlen(text));
}

static void name_at(struct perfmap *m, uint64_t addr, const char *want, uint64_t want_start)
{
	uint64_t start = 0;
	const char *name = perfmap_lookup(m, addr, &start);

	if (!want) {
		assert_null(name);
		return;
	}
	assert_non_null(name);
	assert_string_equal(name, want);
	assert_int_equal(start, want_start);
}

static void test_parse(void **state)
{
	struct perfmap m;
	const char *text =
		"12385e80 1e0 JS:*leaf /srv/hot.js:1:14\n"
		"0x00007f906ceccb80 0x0000000000000158 long Burn.leaf(long)\n"
		"7f3a2c001000 b py::burn:/srv/app.py\r\n"
		"nothex 10 x\n"                      /* skipped: */
		"1000 0 empty\n"
		"1000 10\n"
		"ffffffffffffffff 10 wraps\n"
		"11223344556677889 10 seventeen digits\n"
		"2000 10 \n"
		"\n"
		"3000 10 last, no newline";

	(void)state;
	perfmap_init(&m);
	ssize_t used = parse(&m, text);
	assert_int_equal(used, (ssize_t)(strrchr(text, '\n') - text + 1));
	assert_int_equal(m.n, 3);
	assert_int_equal(m.skipped, 7);
	name_at(&m, 0x12385e80, "JS:*leaf /srv/hot.js:1:14", 0x12385e80);
	name_at(&m, 0x1238605f, "JS:*leaf /srv/hot.js:1:14", 0x12385e80);
	name_at(&m, 0x12386060, NULL, 0);
	name_at(&m, 0x7f906ceccc0a, "long Burn.leaf(long)", 0x7f906ceccb80);
	name_at(&m, 0x7f3a2c00100a, "py::burn:/srv/app.py", 0x7f3a2c001000);
	name_at(&m, 0x3005, NULL, 0);
	/* The last line, once its newline came. */
	assert_int_equal(parse(&m, "3000 10 last, no newline\n"), 25);
	name_at(&m, 0x3005, "last, no newline", 0x3000);
	perfmap_free(&m);
}

static void test_lookup_overlaps(void **state)
{
	struct perfmap m;

	(void)state;
	perfmap_init(&m);
	/* A huge entry, then others inside it, out of order; code at 0x1000
	 * freed and new code there, whose line comes later: each address is
	 * named by the latest line that covers it. */
	parse(&m, "100 10000 huge\n5000 100 e\n1000 100 old\n1080 20 inside\n"
	          "1000 100 new\n");
	name_at(&m, 0x1010, "new", 0x1000);
	name_at(&m, 0x1085, "new", 0x1000);
	name_at(&m, 0x5010, "e", 0x5000);
	name_at(&m, 0x3000, "huge", 0x100);
	name_at(&m, 0x50, NULL, 0);
	name_at(&m, 0x10100, NULL, 0);
	assert_true(m.overlaps >= 3);
	perfmap_free(&m);
}

static void test_identity(void **state)
{
	static const char *const same[][2] = {
		{ "JS:*leaf /srv/hot.js:1:14", "JS:leaf /srv/hot.js:1:14" },
		{ "JS:~leaf /srv/hot.js:1:14", "JS:leaf /srv/hot.js:1:14" },
		{ "JS:^leaf /srv/hot.js:1:14", "JS:leaf /srv/hot.js:1:14" },
		{ "JS:+leaf /srv/hot.js:1:14", "JS:leaf /srv/hot.js:1:14" },
		{ "LazyCompile:*leaf /srv/hot.js:1", "LazyCompile:leaf /srv/hot.js:1" },
		{ "long Burn.leaf(long)", "long Burn.leaf(long)" },
		{ "py::burn:/srv/app.py", "py::burn:/srv/app.py" },
		{ "Builtin:ArgumentsAdaptorTrampoline", "Builtin:ArgumentsAdaptorTrampoline" },
		{ "a b:*c", "a b:*c" },
		{ ":*x", ":*x" },
		{ "", "" },
	};
	char buf[64];

	(void)state;
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		assert_int_equal(perfmap_identity(same[i][0], buf, sizeof(buf)), strlen(same[i][1]));
		assert_string_equal(buf, same[i][1]);
	}
	assert_int_equal(perfmap_identity("JS:*leaf", buf, 4), 7);
	assert_string_equal(buf, "JS:");
}

static void test_caps(void **state)
{
	struct perfmap m;
	char line[PERFMAP_NAME_MAX + 64];

	(void)state;
	perfmap_init(&m);
	/* A name longer than PERFMAP_NAME_MAX is cut. */
	int n = snprintf(line, sizeof(line), "1000 10 ");
	memset(line + n, 'x', PERFMAP_NAME_MAX + 20);
	strcpy(line + n + PERFMAP_NAME_MAX + 20, "\n");
	parse(&m, line);
	uint64_t start;
	assert_int_equal(strlen(perfmap_lookup(&m, 0x1000, &start)), PERFMAP_NAME_MAX);
	perfmap_clear(&m);
	/* No more than PERFMAP_MAX_ENTRIES entries. */
	size_t len = (size_t)PERFMAP_MAX_ENTRIES * 12 + 64, at = 0;
	char *text = malloc(len);
	for (unsigned i = 0; i <= PERFMAP_MAX_ENTRIES; i++)
		at += (size_t)sprintf(text + at, "%x 1 f\n", i + 1);
	assert_int_equal(perfmap_parse(&m, text, at), -E2BIG);
	assert_int_equal(m.n, PERFMAP_MAX_ENTRIES);
	free(text);
	perfmap_free(&m);
}

/* ---- live: a map file of our own ---- */

/* A pid for the map's name that is nobody's: the file is ours. */
#define FAKE_NSPID 1999999999

static const char *map_path(void)
{
	static char path[64];

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", FAKE_NSPID);
	return path;
}

static void write_map(const char *mode, const char *text)
{
	FILE *f = fopen(map_path(), mode);

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_live_refresh(void **state)
{
	struct perfmap m;
	uint64_t start;

	(void)state;
	perfmap_init(&m);
	unlink(map_path());
	assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, (long)geteuid()), -ENOENT);
	assert_non_null(strstr(m.why, "no perf map"));

	write_map("w", "1000 10 a\n2000 10 b\n3000 10 par");
	assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, (long)geteuid()), 0);
	assert_int_equal(m.n, 2);
	assert_null(perfmap_lookup(&m, 0x3000, &start));
	/* It grows (node appends): only the new bytes are parsed, from the
	 * start of the line cut last time. */
	int64_t parsed = m.parsed;
	write_map("a", "tial\n4000 10 d\n");
	assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, (long)geteuid()), 0);
	assert_int_equal(m.n, 4);
	assert_true(m.parsed > parsed);
	assert_string_equal(perfmap_lookup(&m, 0x3001, &start), "partial");
	assert_string_equal(perfmap_lookup(&m, 0x1001, &start), "a");
	/* Written anew (jcmd): read again from its start. */
	write_map("w", "1000 10 z\n5000 10 e\n6000 10 f\n7000 10 g\n");
	assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, (long)geteuid()), 0);
	assert_int_equal(m.n, 4);
	assert_string_equal(perfmap_lookup(&m, 0x1001, &start), "z");
	assert_null(perfmap_lookup(&m, 0x2001, &start));

	/* Owned by another user: refused, as perf refuses it. */
	assert_int_equal(chown(map_path(), 4242, 4242) == 0 || geteuid() != 0, true);
	if (geteuid() == 0) {
		assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, 0x7fffffff), -EPERM);
		assert_non_null(strstr(m.why, "owned by uid 4242"));
		assert_int_equal(m.n, 0);
	}
	unlink(map_path());
	perfmap_free(&m);
}

static void test_live_huge(void **state)
{
	struct perfmap m;
	uint64_t start;

	(void)state;
	perfmap_init(&m);
	/* 20 MiB of lines: only the last PERFMAP_MAX_BYTES are read. */
	FILE *f = fopen(map_path(), "w");
	assert_non_null(f);
	unsigned lines = 0;
	for (long written = 0; written < 20l << 20; lines++)
		written += fprintf(f, "%x 10 function-%u-with-a-long-enough-name-for-the-cap\n",
		                   0x100000 + lines * 0x10, lines);
	fclose(f);
	assert_int_equal(perfmap_refresh(&m, getpid(), FAKE_NSPID, (long)geteuid()), 0);
	assert_non_null(strstr(m.why, "only its last 16 MiB"));
	assert_true(m.n < lines && m.n > lines / 2);
	assert_int_equal(m.skipped, 0);    /* the line cut by the window is not counted */
	assert_null(perfmap_lookup(&m, 0x100000, &start));
	char want[96];
	snprintf(want, sizeof(want), "function-%u-with-a-long-enough-name-for-the-cap", lines - 1);
	assert_string_equal(perfmap_lookup(&m, 0x100000 + (lines - 1) * 0x10 + 3, &start), want);
	unlink(map_path());
	perfmap_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_lookup_overlaps),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_live_refresh),
		cmocka_unit_test(test_live_huge),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
