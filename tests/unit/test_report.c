/* report: suffix stripping, frame names, times, grouping under every --by,
 * ranking and its ties, the table, JSON, folded stacks, the SVG flame graph,
 * report_run on a real database, and the size of a database of 60,000
 * samples.
 *
 * `test_report --write-fixture PATH` writes the fixture database and exits:
 * tests/integration/test_report.py runs the command line against it. */
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/unit/tmpdir.h"

#include "cpumond/flamegraph.h"
#include "cpumond/report.h"
#include "cpumond/store.h"
#include "stackdump/stackdump.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* 2026-11-29 13:04:05 UTC */
#define T0 INT64_C(1795957445000000)
#define SEC INT64_C(1000000)

#define IGNORE_RE "^(start_thread|__clone3?|clone3?|__libc_start_call_main|__libc_start_main.*|_start)$"

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"
#define LIBC_ID "5e7b3d2a9b1f4c6d8e0a1b2c3d4e5f6071829304"
#define APP "/usr/bin/app"
#define APP1 "1111111111111111111111111111111111111111"
#define APP2 "2222222222222222222222222222222222222222"

/* One frame of a fixture stack. */
struct fx {
	const char *symbol;
	const char *module;
	const char *build_id;
	uint64_t func_offset;
};

/* The fixture's stacks, innermost first.  A and B are the two chains of
 * build 1 of app; A2 and B2 the same chains in build 2, at other offsets
 * and with other compiler suffixes; D is another program. */
static const struct fx chain_a1[] = {
	{ "hot_a.constprop.0", APP, APP1, 0x1100 }, { "chain_a2", APP, APP1, 0x1200 },
	{ "chain_a1", APP, APP1, 0x1300 }, { "worker_main", APP, APP1, 0x1400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_b1[] = {
	{ "hot_b", APP, APP1, 0x1500 }, { "chain_b1.part.0", APP, APP1, 0x1600 },
	{ "worker_main", APP, APP1, 0x1400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_a2[] = {
	{ "hot_a", APP, APP2, 0x2100 }, { "chain_a2.isra.0", APP, APP2, 0x2200 },
	{ "chain_a1", APP, APP2, 0x2300 }, { "worker_main", APP, APP2, 0x2400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_b2[] = {
	{ "hot_b", APP, APP2, 0x2500 }, { "chain_b1", APP, APP2, 0x2600 },
	{ "worker_main", APP, APP2, 0x2400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_d[] = {
	{ NULL, "/opt/spin/bin/spin", "", 0x7a0 }, { "main", "/opt/spin/bin/spin", "", 0x640 },
	{ "__libc_start_call_main", LIBC, LIBC_ID, 0x271c0 },
	{ "__libc_start_main_impl", LIBC, LIBC_ID, 0x27280 }, { "_start", "/opt/spin/bin/spin", "", 0x500 },
};

/* A stack made of FX (N frames), with its hash. */
static struct stackdump_stack make_stack(const struct fx *fx, size_t n)
{
	struct stackdump_stack st = { 0 };

	st.frames = calloc(n, sizeof *st.frames);
	assert_non_null(st.frames);
	for (size_t i = 0; i < n; i++) {
		struct stackdump_frame *f = &st.frames[i];

		f->module = strdup(fx[i].module);
		f->build_id = strdup(fx[i].build_id);
		f->symbol = fx[i].symbol ? strdup(fx[i].symbol) : NULL;
		f->func_offset = fx[i].func_offset;
		f->offset = fx[i].func_offset + 0x10 + i;
		f->ip = 0x555500000000 + f->offset;
		f->symbol_offset = 0x10 + i;
	}
	st.nframes = n;
	st.hash = stackdump_hash(st.frames, n);
	return st;
}

#define MAKE(chain) make_stack(chain, ARRAY_SIZE(chain))

struct fixture {
	struct stackdump_stack a1, b1, a2, b2, d;
	regex_t ignore;
	char dir[64];
	char path[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	if (!f)
		return -1;
	setenv("TZ", "UTC", 1);
	tzset();
	f->a1 = MAKE(chain_a1);
	f->b1 = MAKE(chain_b1);
	f->a2 = MAKE(chain_a2);
	f->b2 = MAKE(chain_b2);
	f->d = MAKE(chain_d);
	if (regcomp(&f->ignore, IGNORE_RE, REG_EXTENDED | REG_NOSUB) != 0)
		return -1;
	if (tmpdir_make(f->dir, sizeof f->dir, "test_report") < 0)
		return -1;
	snprintf(f->path, sizeof f->path, "%s/log.db", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	stackdump_stack_free(&f->a1);
	stackdump_stack_free(&f->b1);
	stackdump_stack_free(&f->a2);
	stackdump_stack_free(&f->b2);
	stackdump_stack_free(&f->d);
	regfree(&f->ignore);
	tmpdir_remove(f->dir);
	free(f);
	return 0;
}

/* The fixture's events, in time order:
 *   i = 0..9:   app[100] (build 1), threads 101 and 102 in turn: A 24, B 6
 *   i = 10..14: app[200] (build 2), thread 201: A2 24, B2 6
 *   i = 15:     spin[300] in watch "other": D 30
 *   i = 16:     app[100] without a stack (the thread exited)
 * So A+A2 (the 80 % chain) has 360 of 480 samples, B+B2 90, D 30. */
#define NEVENTS 17

struct fixture_event {
	struct store_event ev;
	struct store_stack_count counts[2];
};

static void fixture_event(const struct fixture *f, int i, struct fixture_event *out)
{
	struct store_event *ev = &out->ev;

	memset(out, 0, sizeof *out);
	ev->time_us = T0 + i * SEC;
	ev->host = "h";
	ev->watch = "app";
	ev->comm = "app";
	ev->exe = APP;
	ev->usage = 990;
	ev->threshold = 800;
	ev->consecutive = 1;
	ev->samples = 30;
	if (i < 10) {
		ev->pid = 100;
		ev->tid = 101 + i % 2;
		ev->thread = i % 2 ? "worker-2" : "worker-1";
		out->counts[0] = (struct store_stack_count){ f->a1.hash, 24, &f->a1 };
		out->counts[1] = (struct store_stack_count){ f->b1.hash, 6, &f->b1 };
		ev->stack = f->a1;
	} else if (i < 15) {
		ev->pid = 200;
		ev->tid = 201;
		ev->thread = "worker-1";
		out->counts[0] = (struct store_stack_count){ f->a2.hash, 24, &f->a2 };
		out->counts[1] = (struct store_stack_count){ f->b2.hash, 6, &f->b2 };
		ev->stack = f->a2;
	} else if (i == 15) {
		ev->watch = "other";
		ev->comm = "spin";
		ev->exe = "/opt/spin/bin/spin";
		ev->pid = 300;
		ev->tid = 300;
		ev->thread = "spin";
		out->counts[0] = (struct store_stack_count){ f->d.hash, 30, &f->d };
		ev->stack = f->d;
		ev->stacks = out->counts;
		ev->nstacks = 1;
		return;
	} else {
		ev->pid = 100;
		ev->tid = 103;
		ev->thread = "worker-3";
		ev->samples = 0;
		ev->error = "tid 103 exited";
		return;
	}
	ev->stacks = out->counts;
	ev->nstacks = 2;
}

/* The fixture aggregated in memory, without SQLite. */
static struct report *aggregate(const struct fixture *f, enum report_by by, bool ignore)
{
	struct report *r;

	assert_int_equal(report_new(by, ignore ? &f->ignore : NULL, &r), 0);
	for (int i = 0; i < NEVENTS; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);
		for (size_t k = 0; k < fe.ev.nstacks; k++)
			if (!report_has_stack(r, fe.ev.stacks[k].hash))
				assert_int_equal(report_add_stack(r, fe.ev.stacks[k].stack), 0);
		assert_int_equal(report_add_event(r, &fe.ev), 0);
	}
	assert_int_equal(report_add_stack(r, &f->a1), -EEXIST);
	assert_int_equal(report_finish(r), 0);
	return r;
}

/* What FN writes, as a string to free. */
static char *capture(void (*fn)(const struct report *, int, FILE *), const struct report *r,
                     int top)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	assert_non_null(out);
	fn(r, top, out);
	assert_int_equal(fclose(out), 0);
	return buf;
}

static void print_folded(const struct report *r, int top, FILE *out)
{
	(void)top;
	report_print_folded(r, out);
}

static void test_signature_name(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "hot", "hot" },
		{ "hot.constprop.0", "hot" },
		{ "hot.isra.12", "hot" },
		{ "hot.part.0", "hot" },
		{ "hot.cold", "hot" },
		{ "hot.cold.3", "hot" },
		{ "hot.part.0.cold", "hot" },
		{ "hot.isra.0.constprop.1", "hot" },
		{ "hot.constprop.0.isra.0.part.1.cold", "hot" },
		{ "hot.lto_priv.0", "hot" },
		{ "hot.llvm.1234567890", "hot" },
		{ "hot.localalias", "hot" },
		{ "_ZN3foo3barEv.cold", "_ZN3foo3barEv" },
		/* Not suffixes: the name stays whole. */
		{ "hot.constprop", "hot.constprop" },
		{ "hot.constprop.x", "hot.constprop.x" },
		{ "hot.isra.0x", "hot.isra.0x" },
		{ "hot.coldness", "hot.coldness" },
		{ "hot.cold.foo", "hot.cold.foo" },
		{ "a.b.c", "a.b.c" },
		{ "hot.", "hot." },
		{ "foo.part.0.bar", "foo.part.0.bar" },
		/* A name that is only a suffix stays a name. */
		{ ".cold", ".cold" },
		{ "", "" },
		/* Only the tail is stripped: a suffix-like part inside stays. */
		{ "a.part.0.b.cold", "a.part.0.b" },
	};
	char buf[64], tiny[4];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		print_message("%s\n", cases[i].in);
		assert_int_equal(report_signature_name(cases[i].in, buf, sizeof buf),
		                 strlen(cases[i].out));
		assert_string_equal(buf, cases[i].out);
	}
	/* Cut to the buffer, the length still whole, as snprintf. */
	assert_int_equal(report_signature_name("abcdef.cold", tiny, sizeof tiny), 6);
	assert_string_equal(tiny, "abc");
	assert_int_equal(report_signature_name("abcdef.cold", NULL, 0), 6);
}

static void test_frame_name(void **state)
{
	struct stackdump_frame named = {
		.module = "/usr/lib/libx.so.1", .symbol = "work.isra.0", .func_offset = 0x1a40,
	};
	struct stackdump_frame unnamed = { .module = "/usr/lib/libx.so.1", .func_offset = 0x1a40 };
	struct stackdump_frame empty = { .module = "", .symbol = "", .func_offset = 0x10 };
	struct stackdump_frame vdso = { .module = "[vdso]", .func_offset = 0x9c0 };
	char buf[64];

	(void)state;
	report_frame_name(&named, REPORT_NAME_EXACT, buf, sizeof buf);
	assert_string_equal(buf, "work.isra.0");
	report_frame_name(&named, REPORT_NAME_FUNCTION, buf, sizeof buf);
	assert_string_equal(buf, "work");
	report_frame_name(&named, REPORT_NAME_SIGNATURE, buf, sizeof buf);
	assert_string_equal(buf, "work");
	/* A function without a symbol is its start in its module, spelled with
	 * '@': "+0x" is an instruction's offset (cpumond tail, stackdump). */
	report_frame_name(&unnamed, REPORT_NAME_EXACT, buf, sizeof buf);
	assert_string_equal(buf, "libx.so.1@0x1a40");
	report_frame_name(&unnamed, REPORT_NAME_FUNCTION, buf, sizeof buf);
	assert_string_equal(buf, "libx.so.1@0x1a40");
	report_frame_name(&unnamed, REPORT_NAME_SIGNATURE, buf, sizeof buf);
	assert_string_equal(buf, "[libx.so.1]");
	report_frame_name(&empty, REPORT_NAME_SIGNATURE, buf, sizeof buf);
	assert_string_equal(buf, "[?]");
	report_frame_name(&empty, REPORT_NAME_EXACT, buf, sizeof buf);
	assert_string_equal(buf, "?@0x10");
	report_frame_name(&vdso, REPORT_NAME_FUNCTION, buf, sizeof buf);
	assert_string_equal(buf, "[vdso]@0x9c0");
}

/* Frame F as an instruction (stackdump_put_frame), a string to free. */
static char *instruction_of(const struct stackdump_frame *f)
{
	char *text;
	size_t len;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	stackdump_put_frame(f, out);
	assert_int_equal(fclose(out), 0);
	return text;
}

/* One frame, two meanings, two spellings: the instruction caught (tail,
 * stackdump) and the function it lies in (report, folded, the SVG, the
 * journal). */
static void test_frame_spellings(void **state)
{
	struct stackdump_frame f = {
		.ip = 0x55555555953b, .offset = 0x553b, .func_offset = 0x4120,
		.module = "/usr/bin/sha256sum",
	};
	char buf[64], tiny[8], *text;

	(void)state;
	text = instruction_of(&f);
	assert_string_equal(text, "/usr/bin/sha256sum+0x553b");
	free(text);
	assert_int_equal(stackdump_function_name(&f, buf, sizeof buf), strlen("sha256sum@0x4120"));
	assert_string_equal(buf, "sha256sum@0x4120");
	report_frame_name(&f, REPORT_NAME_EXACT, buf, sizeof buf);
	assert_string_equal(buf, "sha256sum@0x4120");
	/* Cut to the buffer, the length whole, as snprintf. */
	assert_int_equal(stackdump_function_name(&f, tiny, sizeof tiny), 16);
	assert_string_equal(tiny, "sha256s");
	assert_int_equal(stackdump_function_name(&f, NULL, 0), 16);

	/* With a symbol: the instruction is symbol+offset, the function its
	 * symbol. */
	f.symbol = "sha256_process_block";
	f.symbol_offset = 0x141b;
	text = instruction_of(&f);
	assert_string_equal(text, "sha256_process_block+0x141b (/usr/bin/sha256sum)");
	free(text);
	stackdump_function_name(&f, buf, sizeof buf);
	assert_string_equal(buf, "sha256_process_block");
	/* "" is no symbol, and no module is "?". */
	f.symbol = "";
	f.module = "";
	text = instruction_of(&f);
	assert_string_equal(text, "?+0x553b");
	free(text);
	stackdump_function_name(&f, buf, sizeof buf);
	assert_string_equal(buf, "?@0x4120");

	/* C++ is read demangled in both spellings; the signature drops the
	 * clone suffix before demangling. */
	char wide[128];
	f.module = "/usr/bin/app";
	f.symbol = "_ZN4demo7SpinnerImE4burnEm.constprop.0";
	f.symbol_offset = 0x10;
	text = instruction_of(&f);
	assert_string_equal(text, "demo::Spinner<unsigned long>::burn(unsigned long) "
	                          "[clone .constprop.0]+0x10 (/usr/bin/app)");
	free(text);
	report_frame_name(&f, REPORT_NAME_EXACT, wide, sizeof wide);
	assert_string_equal(wide, "demo::Spinner<unsigned long>::burn(unsigned long) "
	                          "[clone .constprop.0]");
	report_frame_name(&f, REPORT_NAME_SIGNATURE, wide, sizeof wide);
	assert_string_equal(wide, "demo::Spinner<unsigned long>::burn(unsigned long)");
}

static void test_parse_time(void **state)
{
	/* 2026-11-29 13:04:05 UTC */
	const int64_t now = T0 + 250000;
	static const struct {
		const char *text;
		int64_t us;
	} good[] = {
		{ "now", T0 + 250000 },
		{ "0s", T0 + 250000 },
		{ "90s", T0 + 250000 - 90 * SEC },
		{ "30m", T0 + 250000 - 1800 * SEC },
		{ "30min", T0 + 250000 - 1800 * SEC },
		{ "1h", T0 + 250000 - 3600 * SEC },
		{ "2d", T0 + 250000 - 2 * 86400 * SEC },
		{ "1w", T0 + 250000 - 7 * 86400 * SEC },
		{ "2w", T0 + 250000 - 14 * 86400 * SEC },
		{ "500ms", T0 - 250000 },
		{ "2026-11-29T13:04:05Z", T0 },
		{ "2026-11-29t13:04:05z", T0 },
		{ "2026-11-29 13:04:05Z", T0 },
		{ "2026-11-29T13:04:05.5Z", T0 + 500000 },
		{ "2026-11-29T13:04:05.123456789Z", T0 + 123456 },
		{ "2026-11-29T14:04:05+01:00", T0 },
		{ "2026-11-29T08:34:05-04:30", T0 },
		{ "2026-11-29T14:04:05.25+01:00", T0 + 250000 },
		{ "1970-01-01T00:00:00Z", 0 },
		{ "2024-02-29T00:00:00Z", INT64_C(1709164800) * SEC },
		{ "2026-12-31T23:59:60Z", INT64_C(1798761600) * SEC },  /* a leap second */
		/* No zone: local time, UTC here. */
		{ "2026-11-29T13:04:05", T0 },
		{ "2026-11-29", T0 - (13 * 3600 + 4 * 60 + 5) * SEC },
	};
	static const char *const bad[] = {
		"", "1", "1x", "h", "-1h", "1 h", "1H", "1hour", "now ", "99999999999999999999s",
		"90", "1W", "1w2d", "18446744073709551615ms",
		"200000w",       /* before 1970 */
		"2026-11-29T13:04", "2026-11-29T13:04:05+0100", "2026-11-29T13:04:05+01",
		"2026-11-29T13:04:05.Z", "2026-11-29T13:04:05.1234567890Z", "2026-11-29T25:00:00Z",
		"2026-11-29T13:60:00Z", "2026-11-29T13:04:61Z", "2026-13-01", "2026-02-29",
		"2026-11-31", "2026-00-10", "2026-11-29T13:04:05Zjunk", "2026-11-29X13:04:05Z",
		"1969-12-31T23:59:59Z", "26-11-29", "2026-1-29", "2026-11-29T13:04:05+24:00",
	};

	(void)state;
	setenv("TZ", "UTC", 1);
	tzset();
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		int64_t us = -1;

		print_message("good %s\n", good[i].text);
		assert_int_equal(report_parse_time(good[i].text, now, &us), 0);
		assert_int_equal(us, good[i].us);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int64_t us = 42;

		print_message("bad \"%s\"\n", bad[i]);
		assert_int_equal(report_parse_time(bad[i], now, &us), -EINVAL);
		assert_int_equal(us, 42);
	}
}

/* A time without a zone is local time, daylight saving time included. */
static void test_parse_time_local(void **state)
{
	int64_t us;

	(void)state;
	setenv("TZ", "Europe/Berlin", 1);
	tzset();
	assert_int_equal(report_parse_time("2026-11-29T14:04:05", 0, &us), 0);
	assert_int_equal(us, T0);                         /* CET, +01:00 */
	assert_int_equal(report_parse_time("2026-07-01T02:00:00", 0, &us), 0);
	assert_int_equal(us, INT64_C(1782864000) * SEC);  /* CEST, +02:00 */
	assert_int_equal(report_parse_time("2026-11-29T14:04:05Z", 0, &us), 0);
	assert_int_equal(us, T0 + 3600 * SEC);            /* a zone wins */
	setenv("TZ", "UTC", 1);
	tzset();
}

static void test_parse_by(void **state)
{
	enum report_by by = REPORT_BY_ENTRY;

	(void)state;
	assert_int_equal(report_parse_by("exact", &by), 0);
	assert_int_equal(by, REPORT_BY_EXACT);
	assert_int_equal(report_parse_by("signature", &by), 0);
	assert_int_equal(by, REPORT_BY_SIGNATURE);
	assert_int_equal(report_parse_by("top-frame", &by), 0);
	assert_int_equal(by, REPORT_BY_TOP_FRAME);
	assert_int_equal(report_parse_by("entry", &by), 0);
	assert_int_equal(by, REPORT_BY_ENTRY);
	assert_int_equal(report_parse_by("Exact", &by), -EINVAL);
	assert_int_equal(report_parse_by("top", &by), -EINVAL);
	assert_int_equal(report_parse_by("", &by), -EINVAL);
	assert_int_equal(by, REPORT_BY_ENTRY);
	assert_string_equal(report_by_name(REPORT_BY_TOP_FRAME), "top-frame");
}

static void assert_group(const struct report_group *g, uint64_t samples, uint64_t events,
                         uint64_t key_events, size_t stacks)
{
	assert_non_null(g);
	assert_int_equal(g->samples, samples);
	assert_int_equal(g->events, events);
	assert_int_equal(g->key_events, key_events);
	assert_int_equal(g->stacks, stacks);
}

static void test_totals(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_EXACT, false);
	struct report_totals t;

	report_totals(r, &t);
	assert_int_equal(t.events, NEVENTS);
	assert_int_equal(t.events_no_stack, 1);
	assert_int_equal(t.samples, 480);
	assert_int_equal(t.stacks, 5);
	assert_int_equal(t.groups, 5);
	assert_int_equal(t.first_us, T0);
	assert_int_equal(t.last_us, T0 + 16 * SEC);
	assert_null(report_group(r, 5));
	report_free(r);
}

static void test_by_exact(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_EXACT, false);
	const struct report_group *g;
	char hex[17];

	/* A1 240, A2 120, B1 60; B2 and D have 30 each: B2 with 5 events
	 * comes before D with 1. */
	g = report_group(r, 0);
	assert_group(g, 240, 10, 10, 1);
	snprintf(hex, sizeof hex, "%016" PRIx64, f->a1.hash);
	assert_string_equal(g->name, hex);
	assert_ptr_not_equal(g->stack, NULL);
	assert_int_equal(g->stack->hash, f->a1.hash);
	assert_int_equal(g->first_us, T0);
	assert_int_equal(g->last_us, T0 + 9 * SEC);
	assert_int_equal(g->nprocs, 1);
	assert_int_equal(g->procs[0].pid, 100);
	assert_string_equal(g->procs[0].comm, "app");
	assert_int_equal(g->procs[0].samples, 240);
	assert_int_equal(g->threads, 2);
	assert_int_equal(g->nthread_names, 2);
	assert_string_equal(g->thread_names[0], "worker-1");
	assert_string_equal(g->thread_names[1], "worker-2");
	/* No ignore regex: the C runtime's start frames are ignored all the
	 * same. */
	assert_int_equal(g->entry, 3);
	assert_string_equal(g->signature, "worker_main;chain_a1;chain_a2;hot_a");

	assert_group(report_group(r, 1), 120, 5, 5, 1);
	assert_int_equal(report_group(r, 1)->stack->hash, f->a2.hash);
	g = report_group(r, 2);
	assert_group(g, 60, 10, 0, 1);
	assert_int_equal(g->stack->hash, f->b1.hash);
	assert_int_equal(g->first_us, T0);
	g = report_group(r, 3);
	assert_group(g, 30, 5, 0, 1);
	assert_int_equal(g->stack->hash, f->b2.hash);
	g = report_group(r, 4);
	assert_group(g, 30, 1, 1, 1);
	assert_int_equal(g->stack->hash, f->d.hash);
	assert_string_equal(g->procs[0].comm, "spin");
	report_free(r);
}

/* The same chain of two builds groups together once the compiler suffixes
 * and the system frames are gone. */
static void test_by_signature(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_SIGNATURE, true);
	const struct report_group *g;

	g = report_group(r, 0);
	assert_group(g, 360, 15, 15, 2);
	assert_string_equal(g->signature, "worker_main;chain_a1;chain_a2;hot_a");
	/* The representative is the stack with the most samples. */
	assert_int_equal(g->stack->hash, f->a1.hash);
	assert_int_equal(g->entry, 3);
	assert_int_equal(g->nprocs, 2);
	assert_int_equal(g->procs[0].pid, 100);     /* 240 samples */
	assert_int_equal(g->procs[0].samples, 240);
	assert_int_equal(g->procs[1].pid, 200);     /* 120 */
	assert_int_equal(g->threads, 3);            /* 100/101, 100/102, 200/201 */
	assert_int_equal(g->nthread_names, 2);
	assert_int_equal(g->first_us, T0);
	assert_int_equal(g->last_us, T0 + 14 * SEC);

	g = report_group(r, 1);
	assert_group(g, 90, 15, 0, 2);
	assert_string_equal(g->signature, "worker_main;chain_b1;hot_b");

	/* An unnamed frame is its module in a signature. */
	g = report_group(r, 2);
	assert_group(g, 30, 1, 1, 1);
	assert_string_equal(g->signature, "main;[spin]");
	assert_int_equal(g->entry, 1);
	assert_null(report_group(r, 3));
	report_free(r);

	/* Without the ignore regex the C runtime's frames are left out all the
	 * same: the groups do not change. */
	r = aggregate(f, REPORT_BY_SIGNATURE, false);
	assert_group(report_group(r, 0), 360, 15, 15, 2);
	assert_string_equal(report_group(r, 0)->signature, "worker_main;chain_a1;chain_a2;hot_a");
	assert_group(report_group(r, 1), 90, 15, 0, 2);
	assert_string_equal(report_group(r, 1)->signature, "worker_main;chain_b1;hot_b");
	assert_group(report_group(r, 2), 30, 1, 1, 1);
	assert_string_equal(report_group(r, 2)->signature, "main;[spin]");
	report_free(r);
}

static void test_by_top_frame(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_TOP_FRAME, true);

	assert_group(report_group(r, 0), 360, 15, 15, 2);
	assert_string_equal(report_group(r, 0)->name, "hot_a");
	assert_group(report_group(r, 1), 90, 15, 0, 2);
	assert_string_equal(report_group(r, 1)->name, "hot_b");
	/* An unnamed function of one build: its module and start. */
	assert_group(report_group(r, 2), 30, 1, 1, 1);
	assert_string_equal(report_group(r, 2)->name, "spin@0x7a0");
	report_free(r);
}

static void test_by_entry(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_ENTRY, true);
	regex_t re;

	/* Both chains run in worker_main: one entry point. */
	assert_group(report_group(r, 0), 450, 15, 15, 4);
	assert_string_equal(report_group(r, 0)->name, "worker_main");
	assert_group(report_group(r, 1), 30, 1, 1, 1);
	assert_string_equal(report_group(r, 1)->name, "main");
	assert_null(report_group(r, 2));
	report_free(r);

	/* Without an ignore regex the C runtime's start frames are ignored
	 * all the same: the entry is the program's own. */
	r = aggregate(f, REPORT_BY_ENTRY, false);
	assert_string_equal(report_group(r, 0)->name, "worker_main");
	assert_string_equal(report_group(r, 1)->name, "main");
	report_free(r);

	/* A regex adds to them: with worker_main ignored too, each chain's
	 * root is its entry. */
	assert_int_equal(regcomp(&re, "^worker_main$", REG_EXTENDED | REG_NOSUB), 0);
	assert_int_equal(report_new(REPORT_BY_ENTRY, &re, &r), 0);
	assert_int_equal(report_add_stack(r, &f->a1), 0);
	assert_int_equal(report_add_stack(r, &f->b1), 0);
	for (int i = 0; i < 2; i++) {
		struct store_event ev = {
			.time_us = T0 + i * SEC, .pid = 1, .tid = 1, .comm = "c", .thread = "t",
			.stack = i ? f->b1 : f->a1,
		};

		assert_int_equal(report_add_event(r, &ev), 0);
	}
	assert_int_equal(report_finish(r), 0);
	assert_string_equal(report_group(r, 0)->name, "chain_a1");
	assert_string_equal(report_group(r, 1)->name, "chain_b1");
	assert_true(report_frame_ignored(r, &f->a1.frames[3]));   /* worker_main */
	assert_true(report_frame_ignored(r, &f->a1.frames[5]));   /* __clone3 */
	assert_false(report_frame_ignored(r, &f->a1.frames[2]));  /* chain_a1 */
	report_free(r);
	regfree(&re);
}

/* Ranking: samples, then events (descending), then first seen, then name. */
static void test_ranking_ties(void **state)
{
	const struct fixture *f = *state;
	const struct stackdump_stack *stacks[] = { &f->a1, &f->b1, &f->a2, &f->b2 };
	/* stack, count, time: A1 and B1 tie on samples (10), B1 has more
	 * events; A2 and B2 tie on samples and events, B2 was seen first. */
	static const struct {
		int stack;
		unsigned count;
		int t;
	} evs[] = {
		{ 0, 10, 5 }, { 1, 4, 6 }, { 1, 3, 7 }, { 1, 3, 8 },
		{ 2, 7, 4 }, { 3, 7, 3 },
	};
	struct report *r;

	(void)state;
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	for (size_t i = 0; i < ARRAY_SIZE(stacks); i++)
		assert_int_equal(report_add_stack(r, stacks[i]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(evs); i++) {
		struct store_stack_count c = { stacks[evs[i].stack]->hash, evs[i].count, NULL };
		struct store_event ev = {
			.time_us = T0 + evs[i].t * SEC, .pid = 1, .tid = 1, .comm = "c",
			.thread = "t", .stack = *stacks[evs[i].stack], .stacks = &c, .nstacks = 1,
		};

		assert_int_equal(report_add_event(r, &ev), 0);
	}
	assert_int_equal(report_finish(r), 0);
	assert_int_equal(report_group(r, 0)->stack->hash, f->b1.hash);   /* 10 in 3 */
	assert_int_equal(report_group(r, 1)->stack->hash, f->a1.hash);   /* 10 in 1 */
	assert_int_equal(report_group(r, 2)->stack->hash, f->b2.hash);   /* 7, t=3 */
	assert_int_equal(report_group(r, 3)->stack->hash, f->a2.hash);   /* 7, t=4 */
	report_free(r);
}

/* A one-dump event (no counts) is one sample of its stack; a stack the
 * events refer to but whose frames never came is a stack without frames. */
static void test_single_dumps_and_missing_stacks(void **state)
{
	const struct fixture *f = *state;
	struct store_stack_count lost = { 0x1234, 5, NULL };
	struct store_event one = {
		.time_us = T0, .pid = 1, .tid = 1, .comm = "c", .thread = "t", .stack = f->a1,
	};
	struct store_event gone = {
		.time_us = T0 + SEC, .pid = 1, .tid = 1, .comm = "c", .thread = "t",
		.stack = { .hash = 0x1234 }, .stacks = &lost, .nstacks = 1,
	};
	struct report *r;
	struct report_totals t;
	char *text;

	(void)state;
	assert_int_equal(report_new(REPORT_BY_TOP_FRAME, NULL, &r), 0);
	assert_int_equal(report_add_event(r, &one), 0);
	assert_int_equal(report_add_event(r, &gone), 0);
	assert_false(report_has_stack(r, f->a1.hash));
	assert_int_equal(report_add_stack(r, &f->a1), 0);
	assert_true(report_has_stack(r, f->a1.hash));
	assert_int_equal(report_finish(r), 0);
	report_totals(r, &t);
	assert_int_equal(t.samples, 6);
	assert_int_equal(t.events_no_stack, 0);
	assert_group(report_group(r, 0), 5, 1, 1, 1);
	assert_string_equal(report_group(r, 0)->name, "[no frames]");
	assert_group(report_group(r, 1), 1, 1, 1, 1);
	assert_string_equal(report_group(r, 1)->name, "hot_a");
	text = capture(print_folded, r, 0);
	assert_string_equal(text,
	                    "[no frames] 5\n"
	                    "__clone3;start_thread;worker_main;chain_a1;chain_a2;hot_a.constprop.0 1\n");
	free(text);
	text = capture(report_print_table, r, 0);
	assert_non_null(strstr(text, "      (no frames)\n"));
	free(text);
	report_free(r);
}

static void test_empty(void **state)
{
	struct report *r;
	struct report_totals t;
	char *text;

	(void)state;
	assert_int_equal(report_new(REPORT_BY_SIGNATURE, NULL, &r), 0);
	assert_int_equal(report_finish(r), 0);
	report_totals(r, &t);
	assert_int_equal(t.events, 0);
	assert_int_equal(t.groups, 0);
	assert_null(report_group(r, 0));
	text = capture(report_print_table, r, 10);
	assert_string_equal(text, "no events in the window\n");
	free(text);
	text = capture(report_print_json, r, 0);
	assert_string_equal(text, "");
	free(text);
	text = capture(print_folded, r, 0);
	assert_string_equal(text, "");
	free(text);
	report_free(r);
}

static void test_folded(void **state)
{
	const struct fixture *f = *state;
	/* Ignored frames stay: they are where the samples really were. */
	struct report *r = aggregate(f, REPORT_BY_SIGNATURE, true);
	char *text = capture(print_folded, r, 0);

	assert_string_equal(text,
	                    "__clone3;start_thread;worker_main;chain_a1;chain_a2.isra.0;hot_a 120\n"
	                    "__clone3;start_thread;worker_main;chain_a1;chain_a2;hot_a.constprop.0 240\n"
	                    "__clone3;start_thread;worker_main;chain_b1.part.0;hot_b 60\n"
	                    "__clone3;start_thread;worker_main;chain_b1;hot_b 30\n"
	                    "_start;__libc_start_main_impl;__libc_start_call_main;main;spin@0x7a0 30\n");
	free(text);
	report_free(r);
}

/* Two stacks with the same names (two builds, same symbols) make one line;
 * ';' inside a name and control bytes are escaped. */
static void test_folded_merge_and_escape(void **state)
{
	static const struct fx x1[] = { { "f;g", "/bin/x", "aa", 0x10 }, { "m\n", "/bin/x", "aa", 0x20 } };
	static const struct fx x2[] = { { "f;g", "/bin/x", "bb", 0x30 }, { "m\n", "/bin/x", "bb", 0x40 } };
	struct stackdump_stack s1 = MAKE(x1), s2 = MAKE(x2);
	struct store_stack_count c[2] = { { s1.hash, 2, NULL }, { s2.hash, 3, NULL } };
	struct store_event ev = {
		.time_us = T0, .pid = 1, .tid = 1, .comm = "c", .thread = "t", .stack = s1,
		.stacks = c, .nstacks = 2,
	};
	struct report *r;
	char *text;

	(void)state;
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	assert_int_equal(report_add_stack(r, &s1), 0);
	assert_int_equal(report_add_stack(r, &s2), 0);
	assert_int_equal(report_add_event(r, &ev), 0);
	assert_int_equal(report_finish(r), 0);
	text = capture(print_folded, r, 0);
	assert_string_equal(text, "m\\x0a;f\\x3bg 5\n");
	free(text);
	report_free(r);
	stackdump_stack_free(&s1);
	stackdump_stack_free(&s2);
}

static void test_json(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_TOP_FRAME, true);
	char *text = capture(report_print_json, r, 0), *line2;
	char expect[4096];

	line2 = strchr(text, '\n');
	assert_non_null(line2);
	*line2++ = '\0';
	snprintf(expect, sizeof expect,
	         "{\"rank\":1,\"by\":\"top-frame\",\"group\":\"hot_a\",\"events\":15,\"key_events\":15,"
	         "\"samples\":360,\"share\":0.750000,\"first_seen\":\"2026-11-29T13:04:05.000000+00:00\","
	         "\"last_seen\":\"2026-11-29T13:04:19.000000+00:00\",\"stacks\":2,"
	         "\"stack\":\"%016" PRIx64 "\",\"signature\":\"worker_main;chain_a1;chain_a2;hot_a\","
	         "\"process_count\":2,\"processes\":[{\"host\":\"h\",\"pid\":100,\"comm\":\"app\","
	         "\"samples\":240},{\"host\":\"h\",\"pid\":200,\"comm\":\"app\",\"samples\":120}],"
	         "\"host_count\":1,\"hosts\":[{\"host\":\"h\",\"events\":15,\"samples\":360}],"
	         "\"threads\":3,"
	         "\"thread_names\":[\"worker-1\",\"worker-2\"],\"entry\":3,\"truncated\":false,"
	         "\"frames\":["
	         "{\"name\":\"hot_a.constprop.0\",\"symbol\":\"hot_a.constprop.0\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4352,\"ignored\":false},"
	         "{\"name\":\"chain_a2\",\"symbol\":\"chain_a2\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4608,\"ignored\":false},"
	         "{\"name\":\"chain_a1\",\"symbol\":\"chain_a1\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4864,\"ignored\":false},"
	         "{\"name\":\"worker_main\",\"symbol\":\"worker_main\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":5120,\"ignored\":false},"
	         "{\"name\":\"start_thread\",\"symbol\":\"start_thread\",\"module\":\"" LIBC "\","
	         "\"build_id\":\"" LIBC_ID "\",\"func_offset\":565248,\"ignored\":true},"
	         "{\"name\":\"__clone3\",\"symbol\":\"__clone3\",\"module\":\"" LIBC "\","
	         "\"build_id\":\"" LIBC_ID "\",\"func_offset\":1093632,\"ignored\":true}]}",
	         f->a1.hash);
	assert_string_equal(text, expect);
	/* The other groups follow, one line each; the unnamed frame's symbol
	 * is null. */
	assert_non_null(strstr(line2, "\"rank\":2,\"by\":\"top-frame\",\"group\":\"hot_b\""));
	assert_non_null(strstr(line2, "\"rank\":3,\"by\":\"top-frame\",\"group\":\"spin@0x7a0\""));
	assert_non_null(strstr(line2, "{\"name\":\"spin@0x7a0\",\"symbol\":null,"));
	free(text);
	/* --top 1 */
	text = capture(report_print_json, r, 1);
	assert_int_equal(strchr(text, '\n')[1], '\0');
	free(text);
	report_free(r);
}

/* Hostile names: control bytes, quotes, invalid UTF-8 in the JSON, the
 * table and the flame graph. */
static void test_hostile_names(void **state)
{
	static const struct fx x[] = {
		{ "evil\"\\\x1b[2J\xff<&>'", "/tmp/\x1b]0;pwn\x07/x", "", 0x10 },
	};
	struct stackdump_stack s = MAKE(x);
	struct store_stack_count c = { s.hash, 3, NULL };
	struct store_event ev = {
		.time_us = T0, .pid = 1, .tid = 2, .comm = "c\x1b[31m", .thread = "t\"\n",
		.stack = s, .stacks = &c, .nstacks = 1,
	};
	struct report *r;
	struct flamegraph *fg;
	struct flamegraph_frame fr = { x[0].symbol, x[0].module };
	char *text;
	size_t len;
	FILE *out;

	(void)state;
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	assert_int_equal(report_add_stack(r, &s), 0);
	assert_int_equal(report_add_event(r, &ev), 0);
	assert_int_equal(report_finish(r), 0);
	text = capture(report_print_json, r, 0);
	assert_non_null(strstr(text, "\"symbol\":\"evil\\\"\\\\\\u001b[2J\\u00ff<&>'\""));
	assert_non_null(strstr(text, "\"comm\":\"c\\u001b[31m\""));
	assert_non_null(strstr(text, "\"thread_names\":[\"t\\\"\\u000a\"]"));
	assert_null(strchr(text, '\x1b'));
	free(text);
	text = capture(report_print_table, r, 0);
	assert_null(strchr(text, '\x1b'));
	assert_null(strchr(text, '\x07'));
	assert_null(strchr(text, '\xff'));
	assert_non_null(strstr(text, "evil\"\\\\\\x1b[2J\\xff<&>' (x)"));
	assert_non_null(strstr(text, "processes: c\\x1b[31m[1]; threads: \"t\"\\x0a\""));
	free(text);
	report_free(r);

	fg = flamegraph_new();
	assert_non_null(fg);
	assert_int_equal(flamegraph_add(fg, &fr, 1, 3), 0);
	out = open_memstream(&text, &len);
	assert_non_null(out);
	assert_int_equal(flamegraph_write(fg, "t<", "s&", out), 0);
	assert_int_equal(fclose(out), 0);
	assert_non_null(strstr(text, "<title>evil&quot;\\\\x1b[2J\\xff&lt;&amp;&gt;&apos;\nmodule: "
	                             "/tmp/\\x1b]0;pwn\\x07/x\n3 samples, 100.00%</title>"));
	assert_non_null(strstr(text, ">t&lt;</text>"));
	assert_non_null(strstr(text, ">s&amp;</text>"));
	assert_null(strchr(text, '\x1b'));
	assert_null(strchr(text, '\xff'));
	free(text);
	flamegraph_free(fg);
	stackdump_stack_free(&s);
}

static void test_table(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_SIGNATURE, true);
	char *text = capture(report_print_table, r, 2);
	char expect[4096];
	char sig1[17], sig2[17];
	const struct report_group *g1 = report_group(r, 0), *g2 = report_group(r, 1);

	snprintf(sig1, sizeof sig1, "%s", g1->name);
	snprintf(sig2, sizeof sig2, "%s", g2->name);
	snprintf(expect, sizeof expect,
	         "17 events from 2026-11-29 13:04:05 to 2026-11-29 13:04:21 +0000: 480 stack samples, "
	         "5 distinct stacks, 3 groups by signature\n"
	         "1 event has no stack (see cpumond tail)\n"
	         "\n"
	         "rank  samples   share  events  key ev  threads  first seen           last seen\n"
	         "   1      360   75.0%%      15      15        3  2026-11-29 13:04:05  2026-11-29 13:04:19\n"
	         "      signature %s, 2 distinct stacks; the most frequent:\n"
	         "      processes: app[100], app[200]; threads: \"worker-1\", \"worker-2\"\n"
	         "      #0   hot_a.constprop.0 (app)\n"
	         "      #1   chain_a2 (app)\n"
	         "      #2   chain_a1 (app)\n"
	         "      #3   worker_main (app)  <- entry\n"
	         "      ...  2 ignored frames\n"
	         "   2       90   18.8%%      15       0        3  2026-11-29 13:04:05  2026-11-29 13:04:19\n"
	         "      signature %s, 2 distinct stacks; the most frequent:\n"
	         "      processes: app[100], app[200]; threads: \"worker-1\", \"worker-2\"\n"
	         "      #0   hot_b (app)\n"
	         "      #1   chain_b1.part.0 (app)\n"
	         "      #2   worker_main (app)  <- entry\n"
	         "      ...  2 ignored frames\n"
	         "\n"
	         "1 more groups (--top 0 shows them all)\n", sig1, sig2);
	assert_string_equal(text, expect);
	free(text);
	report_free(r);
}

/* Deep stacks show their innermost frames, then the entry point. */
static void test_table_deep_stack(void **state)
{
	struct fx deep[12];
	char names[12][16];
	struct stackdump_stack s;
	struct store_event ev = { .time_us = T0, .pid = 7, .tid = 7, .comm = "d", .thread = "d" };
	struct report *r;
	char *text;

	(void)state;
	for (int i = 0; i < 12; i++) {
		snprintf(names[i], sizeof names[i], "f%d", i);
		deep[i] = (struct fx){ names[i], "/bin/d", "", (uint64_t)(0x100 * (i + 1)) };
	}
	s = make_stack(deep, 12);
	ev.stack = s;
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	assert_int_equal(report_add_stack(r, &s), 0);
	assert_int_equal(report_add_event(r, &ev), 0);
	assert_int_equal(report_finish(r), 0);
	text = capture(report_print_table, r, 0);
	assert_non_null(strstr(text,
	                       "      #0   f0 (d)\n"
	                       "      #1   f1 (d)\n"
	                       "      #2   f2 (d)\n"
	                       "      #3   f3 (d)\n"
	                       "      ...  7 more\n"
	                       "      #11  f11 (d)  <- entry\n"));
	free(text);
	report_free(r);
	stackdump_stack_free(&s);
}

/* ---- The flame graph ---- */

/* Checks the nesting of the boxes of SVG: every <g class="f"> has
 * data-n = data-s + the data-n of its children, and its rect's width is
 * data-n times the root's pixels per sample.  Returns how many boxes. */
static size_t check_boxes(const char *svg)
{
	struct box {
		uint64_t n, self, kids;
	} stack[64];
	size_t depth = 0, boxes = 0;
	double scale = 0;
	const char *p = strstr(svg, "<g id=\"frames\">");

	assert_non_null(p);
	p += strlen("<g id=\"frames\">");
	for (;;) {
		const char *open = strstr(p, "<g class=\"f\""), *close = strstr(p, "</g>");

		assert_non_null(close);
		if (open && open < close) {
			unsigned long long x, n, s;
			double w;
			const char *rect;

			assert_int_equal(sscanf(open, "<g class=\"f\" data-x=\"%llu\" data-n=\"%llu\" "
			                        "data-s=\"%llu\">", &x, &n, &s), 3);
			rect = strstr(open, "<rect ");
			assert_non_null(rect);
			rect = strstr(rect, "width=\"");
			assert_non_null(rect);
			assert_int_equal(sscanf(rect, "width=\"%lf\"", &w), 1);
			if (depth == 0)
				scale = n ? w / (double)n : 0;
			else
				stack[depth - 1].kids += n;
			assert_true(w >= (double)n * scale - 0.002 && w <= (double)n * scale + 0.002);
			assert_true(depth < ARRAY_SIZE(stack));
			stack[depth++] = (struct box){ n, s, 0 };
			boxes++;
			p = open + 1;
		} else {
			if (depth == 0)
				break;  /* the </g> of "frames" */
			depth--;
			assert_int_equal(stack[depth].n, stack[depth].self + stack[depth].kids);
			p = close + 1;
		}
	}
	return boxes;
}

static char *svg_of(const struct flamegraph *fg)
{
	char *text;
	size_t len;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	assert_int_equal(flamegraph_write(fg, "title", NULL, out), 0);
	assert_int_equal(fclose(out), 0);
	return text;
}

static void test_flamegraph_tree(void **state)
{
	/* Outermost first. */
	static const struct flamegraph_frame ab[] = { { "main", "/bin/p" }, { "b", "/bin/p" } };
	static const struct flamegraph_frame aa[] = { { "main", "/bin/p" }, { "a", "/bin/p" } };
	static const struct flamegraph_frame aax[] = {
		{ "main", "/bin/p" }, { "a", "/bin/p" }, { "x", "/lib/l.so" },
	};
	static const struct flamegraph_frame m[] = { { "main", "/bin/p" } };
	struct flamegraph *fg = flamegraph_new();
	char *svg;
	const char *pa, *pb, *px;

	(void)state;
	assert_non_null(fg);
	assert_int_equal(flamegraph_add(fg, ab, 2, 5), 0);
	assert_int_equal(flamegraph_add(fg, aax, 3, 7), 0);
	assert_int_equal(flamegraph_add(fg, aa, 2, 3), 0);
	assert_int_equal(flamegraph_add(fg, m, 1, 2), 0);
	assert_int_equal(flamegraph_add(fg, m, 0, 1), 0);   /* the root's own */
	assert_int_equal(flamegraph_add(fg, ab, 2, 0), 0);  /* nothing */
	svg = svg_of(fg);
	assert_int_equal(check_boxes(svg), 5);   /* all, main, a, x, b */
	assert_non_null(strstr(svg, "<g class=\"f\" data-x=\"0\" data-n=\"18\" data-s=\"1\"><title>all\n18 samples, 100.00%</title>"));
	assert_non_null(strstr(svg, "<g class=\"f\" data-x=\"0\" data-n=\"17\" data-s=\"2\"><title>main\nmodule: /bin/p\n17 samples, 94.44%</title>"));
	/* Children sorted by name: a (at 0) before b (at 10). */
	pa = strstr(svg, "data-x=\"0\" data-n=\"10\" data-s=\"3\"><title>a\n");
	px = strstr(svg, "data-x=\"0\" data-n=\"7\" data-s=\"7\"><title>x\nmodule: /lib/l.so\n");
	pb = strstr(svg, "data-x=\"10\" data-n=\"5\" data-s=\"5\"><title>b\n");
	assert_non_null(pa);
	assert_non_null(px);
	assert_non_null(pb);
	assert_true(pa < px && px < pb);
	/* The same samples in another order give the same file. */
	{
		struct flamegraph *fg2 = flamegraph_new();
		char *svg2;

		assert_int_equal(flamegraph_add(fg2, m, 0, 1), 0);
		assert_int_equal(flamegraph_add(fg2, aa, 2, 3), 0);
		assert_int_equal(flamegraph_add(fg2, m, 1, 2), 0);
		assert_int_equal(flamegraph_add(fg2, aax, 3, 7), 0);
		assert_int_equal(flamegraph_add(fg2, ab, 2, 5), 0);
		svg2 = svg_of(fg2);
		assert_string_equal(svg, svg2);
		free(svg2);
		flamegraph_free(fg2);
	}
	free(svg);
	flamegraph_free(fg);
}

static void test_flamegraph_empty(void **state)
{
	struct flamegraph *fg = flamegraph_new();
	char *svg;

	(void)state;
	assert_non_null(fg);
	svg = svg_of(fg);
	assert_int_equal(check_boxes(svg), 1);
	assert_non_null(strstr(svg, "no samples in the window"));
	free(svg);
	flamegraph_free(fg);
}

/* Labels fit their box: a long name is cut with "..", a narrow box has
 * none; the colour is the same for the same name. */
static void test_flamegraph_labels(void **state)
{
	char longname[300];
	struct flamegraph_frame big[] = { { longname, NULL } };
	struct flamegraph_frame small[] = { { "tiny_function_name", NULL } };
	struct flamegraph *fg = flamegraph_new();
	char *svg, *p, *q;

	(void)state;
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	assert_int_equal(flamegraph_add(fg, big, 1, 1000), 0);
	assert_int_equal(flamegraph_add(fg, small, 1, 1), 0);
	svg = svg_of(fg);
	p = strstr(svg, "<title>xxx");
	assert_non_null(p);
	p = strstr(p, "<text ");
	p = strchr(p, '>') + 1;
	q = strstr(p, "</text>");
	/* 1178.8 px of 1180 at 7.08 px per character: 165 characters. */
	assert_int_equal(q - p, 165);
	assert_memory_equal(q - 2, "..", 2);
	p = strstr(svg, "<title>tiny_function_name");
	p = strstr(p, "<text ");
	p = strchr(p, '>') + 1;
	assert_memory_equal(p, "</text>", 7);
	free(svg);
	flamegraph_free(fg);
}

/* ---- Against a database ---- */

static void write_fixture(const struct fixture *f, const char *path)
{
	struct store *st;
	char err[512];

	assert_int_equal(store_open(path, true, &st, err, sizeof err), 0);
	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < NEVENTS; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);
		assert_int_equal(store_add_event(st, &fe.ev), 0);
	}
	assert_int_equal(store_commit(st), 0);
	store_close(st);
}

/* report_run's output for OPT. */
static char *run(const struct report_options *opt, int expect_rc)
{
	char *text;
	size_t len;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	assert_int_equal(report_run(opt, out), expect_rc);
	assert_int_equal(fclose(out), 0);
	return text;
}

/* The first group of each JSON line, in order, as "group samples;". */
static void json_ranks(const char *text, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (const char *p = text; (p = strstr(p, "\"group\":\"")) != NULL;) {
		const char *end, *s;

		p += strlen("\"group\":\"");
		end = strchr(p, '"');
		s = strstr(end, "\"samples\":");
		n += (size_t)snprintf(buf + n, len - n, "%.*s %ld;", (int)(end - p), p,
		                      strtol(s + 10, NULL, 10));
		p = end;
	}
}

static void test_run_by_every_grouping(void **state)
{
	const struct fixture *f = *state;
	struct report_options opt = { .database = f->path, .ignore = &f->ignore, .json = true };
	char ranks[512], expect[512];
	char *text;

	write_fixture(f, f->path);

	opt.by = REPORT_BY_EXACT;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	snprintf(expect, sizeof expect,
	         "%016" PRIx64 " 240;%016" PRIx64 " 120;%016" PRIx64 " 60;%016" PRIx64 " 30;%016" PRIx64 " 30;",
	         f->a1.hash, f->a2.hash, f->b1.hash, f->b2.hash, f->d.hash);
	assert_string_equal(ranks, expect);
	free(text);

	opt.by = REPORT_BY_SIGNATURE;
	text = run(&opt, 0);
	assert_non_null(strstr(text, "\"rank\":1,\"by\":\"signature\""));
	assert_non_null(strstr(text, "\"signature\":\"worker_main;chain_a1;chain_a2;hot_a\""));
	assert_true(strstr(text, "worker_main;chain_a1;chain_a2;hot_a") <
	            strstr(text, "worker_main;chain_b1;hot_b"));
	free(text);

	opt.by = REPORT_BY_TOP_FRAME;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 360;hot_b 90;spin@0x7a0 30;");
	free(text);

	opt.by = REPORT_BY_ENTRY;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "worker_main 450;main 30;");
	free(text);
}

static void test_run_filters(void **state)
{
	const struct fixture *f = *state;
	struct report_options opt = {
		.database = f->path, .ignore = &f->ignore, .json = true, .by = REPORT_BY_TOP_FRAME,
	};
	char ranks[512];
	char *text;

	write_fixture(f, f->path);
	opt.pid = 200;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 120;hot_b 30;");
	free(text);

	opt.pid = 0;
	opt.watch = "other";
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "spin@0x7a0 30;");
	free(text);

	opt.watch = NULL;
	opt.comm = "app";
	opt.thread = "worker-2";
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 120;hot_b 30;");
	free(text);

	/* [since, until): events 3..5 */
	opt.comm = opt.thread = NULL;
	opt.since_us = T0 + 3 * SEC;
	opt.until_us = T0 + 6 * SEC;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 72;hot_b 18;");
	free(text);

	/* Nothing in the window: no output, success. */
	opt.since_us = T0 + 100 * SEC;
	opt.until_us = 0;
	text = run(&opt, 0);
	assert_string_equal(text, "");
	free(text);
	opt.json = false;
	text = run(&opt, 0);
	assert_string_equal(text, "no events in the window\n");
	free(text);
}

/* ---- Many hosts ---- */

/* The same build on two hosts: events of host "h1" and "h2" with the same
 * pids and stacks.  The groups count both, processes and threads of one pid
 * on two hosts are two, the table gets its hosts column and JSON its
 * hosts. */
static void test_hosts(void **state)
{
	const struct fixture *f = *state;
	struct report *r;
	struct report_totals t;
	const struct report_group *g;
	char *text;

	assert_int_equal(report_new(REPORT_BY_EXACT, &f->ignore, &r), 0);
	for (int i = 0; i < 4; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);      /* app[100], A1 24 + B1 6 */
		fe.ev.host = i < 3 ? "h1" : "h2";
		for (size_t k = 0; k < fe.ev.nstacks; k++)
			if (!report_has_stack(r, fe.ev.stacks[k].hash))
				assert_int_equal(report_add_stack(r, fe.ev.stacks[k].stack), 0);
		assert_int_equal(report_add_event(r, &fe.ev), 0);
	}
	assert_int_equal(report_finish(r), 0);
	report_totals(r, &t);
	assert_int_equal(t.hosts, 2);
	assert_int_equal(t.groups, 2);
	g = report_group(r, 0);
	assert_int_equal(g->stack->hash, f->a1.hash);
	assert_int_equal(g->samples, 96);
	assert_int_equal(g->nhosts, 2);
	assert_string_equal(g->hosts[0].host, "h1");
	assert_int_equal(g->hosts[0].samples, 72);
	assert_int_equal(g->hosts[0].events, 3);
	assert_string_equal(g->hosts[1].host, "h2");
	assert_int_equal(g->hosts[1].samples, 24);
	assert_int_equal(g->hosts[1].events, 1);
	/* pid 100 of h1 and pid 100 of h2 are two processes; tid 101 on both
	 * hosts two threads (h1: 101, 102; h2: 102). */
	assert_int_equal(g->nprocs, 2);
	assert_string_equal(g->procs[0].host, "h1");
	assert_int_equal(g->procs[0].samples, 72);
	assert_string_equal(g->procs[1].host, "h2");
	assert_int_equal(g->procs[1].pid, 100);
	assert_int_equal(g->threads, 3);

	text = capture(report_print_table, r, 1);
	assert_non_null(strstr(text, "4 events on 2 hosts from 2026-11-29 13:04:05 to "));
	assert_non_null(strstr(text, "rank  samples   share  events  key ev  threads  hosts  first seen"));
	assert_non_null(strstr(text, "   1       96   80.0%       4       4        3      2  2026-11-29 13:04:05"));
	assert_non_null(strstr(text, "      hosts: h1 (72 samples), h2 (24)\n"));
	assert_non_null(strstr(text, "      processes: app[100]@h1, app[100]@h2; threads: "));
	free(text);
	text = capture(report_print_json, r, 1);
	assert_non_null(strstr(text, "\"processes\":[{\"host\":\"h1\",\"pid\":100,\"comm\":\"app\","
	                             "\"samples\":72},{\"host\":\"h2\",\"pid\":100,\"comm\":\"app\","
	                             "\"samples\":24}],\"host_count\":2,\"hosts\":[{\"host\":\"h1\","
	                             "\"events\":3,\"samples\":72},{\"host\":\"h2\",\"events\":1,"
	                             "\"samples\":24}],\"threads\":3,"));
	free(text);
	report_free(r);
}

/* Sets the host of every event of the database at PATH (NULL: none). */
static void set_host(const char *path, const char *host)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "UPDATE events SET host = ?", -1, &s, NULL),
	                 SQLITE_OK);
	if (host)
		sqlite3_bind_text(s, 1, host, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_DONE);
	sqlite3_finalize(s);
	sqlite3_close(db);
}

/* report_run over two databases of two hosts: one window, the same groups
 * with twice the samples, each with both hosts; the same file twice is read
 * once; --host narrows; a missing database fails the whole report. */
static void test_run_several_databases(void **state)
{
	const struct fixture *f = *state;
	char path2[160], missing[160], ranks[512], expect[512];
	const char *dbs[3];
	struct report_options opt = {
		.databases = dbs, .ndatabases = 2, .ignore = &f->ignore, .json = true,
		.by = REPORT_BY_EXACT,
	};
	char *text;

	snprintf(path2, sizeof path2, "%s/b.db", f->dir);
	snprintf(missing, sizeof missing, "%s/none.db", f->dir);
	write_fixture(f, f->path);
	write_fixture(f, path2);
	set_host(f->path, "web-1");
	set_host(path2, "web-2");
	dbs[0] = f->path;
	dbs[1] = path2;

	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	snprintf(expect, sizeof expect,
	         "%016" PRIx64 " 480;%016" PRIx64 " 240;%016" PRIx64 " 120;%016" PRIx64 " 60;%016" PRIx64 " 60;",
	         f->a1.hash, f->a2.hash, f->b1.hash, f->b2.hash, f->d.hash);
	assert_string_equal(ranks, expect);
	assert_non_null(strstr(text, "\"host_count\":2,\"hosts\":[{\"host\":\"web-1\",\"events\":10,"
	                             "\"samples\":240},{\"host\":\"web-2\",\"events\":10,\"samples\":240}]"));
	free(text);

	/* By signature, both builds on both hosts are one group. */
	opt.by = REPORT_BY_SIGNATURE;
	text = run(&opt, 0);
	assert_non_null(strstr(text, "\"rank\":1,\"by\":\"signature\""));
	assert_non_null(strstr(text, "\"samples\":720,"));
	assert_non_null(strstr(text, "\"hosts\":[{\"host\":\"web-1\",\"events\":15,\"samples\":360},"
	                             "{\"host\":\"web-2\",\"events\":15,\"samples\":360}]"));
	free(text);

	/* --host */
	opt.host = "web-2";
	text = run(&opt, 0);
	assert_non_null(strstr(text, "\"samples\":360,"));
	assert_null(strstr(text, "web-1"));
	free(text);
	opt.host = NULL;

	/* The same file twice counts once. */
	opt.by = REPORT_BY_EXACT;
	dbs[1] = f->path;
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_true(strncmp(ranks, expect, 17) == 0);
	assert_non_null(strstr(ranks, " 240;"));
	assert_null(strstr(ranks, " 480;"));
	free(text);

	/* Events without a host are named by their database. */
	set_host(path2, NULL);
	dbs[1] = path2;
	opt.json = false;
	text = run(&opt, 0);
	assert_non_null(strstr(text, "34 events on 2 hosts from "));
	snprintf(expect, sizeof expect, "app[100]@%s", path2);
	assert_non_null(strstr(text, expect));
	free(text);

	/* One database missing: nothing printed, the error. */
	dbs[2] = missing;
	opt.ndatabases = 3;
	text = run(&opt, -ENOENT);
	assert_string_equal(text, "");
	free(text);
}

/* The sum of the counts of folded TEXT; *LINES gets how many lines. */
static unsigned long folded_sum(const char *text, size_t *lines)
{
	unsigned long sum = 0;
	size_t n = 0;

	for (const char *line = text; *line; n++) {
		const char *nl = strchr(line, '\n');
		const char *sp;

		assert_non_null(nl);
		sp = memrchr(line, ' ', (size_t)(nl - line));
		assert_non_null(sp);
		sum += strtoul(sp + 1, NULL, 10);
		line = nl + 1;
	}
	if (lines)
		*lines = n;
	return sum;
}

/* The folded output sums to every sample of the window; the SVG file holds
 * them all too. */
static void test_run_folded_and_svg(void **state)
{
	const struct fixture *f = *state;
	struct report_options opt = { .database = f->path, .folded = true };
	char svgpath[192];
	char *text, *svg;
	FILE *in;
	long size;

	write_fixture(f, f->path);
	text = run(&opt, 0);
	assert_int_equal(folded_sum(text, NULL), 480);
	free(text);

	snprintf(svgpath, sizeof svgpath, "%s/fg.svg", f->dir);
	opt.folded = false;
	opt.svg_path = svgpath;
	text = run(&opt, 0);
	assert_string_equal(text, "");
	free(text);
	in = fopen(svgpath, "r");
	assert_non_null(in);
	fseek(in, 0, SEEK_END);
	size = ftell(in);
	rewind(in);
	svg = calloc(1, (size_t)size + 1);
	assert_int_equal(fread(svg, 1, (size_t)size, in), (size_t)size);
	fclose(in);
	/* all; __clone3, start_thread, worker_main, chain_a1, chain_a2,
	 * hot_a.constprop.0, chain_a2.isra.0, hot_a, chain_b1, hot_b,
	 * chain_b1.part.0, hot_b; _start and four more of spin. */
	assert_int_equal(check_boxes(svg), 18);
	assert_non_null(strstr(svg, "<title>all\n480 samples, 100.00%</title>"));
	assert_non_null(strstr(svg, "480 samples of 17 events from 2026-11-29 13:04:05 to "
	                            "2026-11-29 13:04:21 +0000"));
	free(svg);

	/* An SVG that cannot be written is a runtime failure. */
	opt.svg_path = "/nonexistent/dir/fg.svg";
	text = run(&opt, -ENOENT);
	free(text);
}

static void test_run_missing_database(void **state)
{
	const struct fixture *f = *state;
	struct report_options opt = { .database = f->path };
	char *text;

	(void)f;
	text = run(&opt, -ENOENT);
	assert_string_equal(text, "");
	free(text);
}

/* ---- Compact storage ---- */

/* One integer from SQL on PATH, through a connection of the test's own. */
static int64_t q_int(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int64_t v;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return v;
}

/* The bytes of each table and index, when SQLite has the dbstat table. */
static void print_tables(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	if (sqlite3_prepare_v2(db, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name"
	                       " ORDER BY 2 DESC", -1, &s, NULL) == SQLITE_OK) {
		while (sqlite3_step(s) == SQLITE_ROW)
			print_message("  %-24s %8lld bytes\n", (const char *)sqlite3_column_text(s, 0),
			              (long long)sqlite3_column_int64(s, 1));
	}
	sqlite3_finalize(s);
	sqlite3_close(db);
}

static long file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (long)sb.st_size : 0;
}

/* Issue #4, part 6: 60,000 samples in 2,000 events over 10 distinct code
 * paths of 20 frames.  Each event's 30 samples fall on 4 of the 10 stacks
 * (21 + 3 + 3 + 3), its key stack's sample keeps its exact addresses, and
 * the daemon commits 10 events per cycle.  Stacks are stored once each;
 * the size is printed for the record. */
static void test_compact_storage(void **state)
{
	const struct fixture *f = *state;
	struct stackdump_stack stacks[10];
	struct store *st;
	char err[512];
	struct fx fr[20];
	char names[10][20][32];
	struct report_options opt = { .database = f->path, .folded = true };
	char *text;
	size_t lines;
	long size;

	for (int s = 0; s < 10; s++) {
		for (int i = 0; i < 20; i++) {
			snprintf(names[s][i], sizeof names[s][i], "path%d_function_%d", i < 15 ? s : 0, i);
			fr[i] = (struct fx){ names[s][i], i < 18 ? "/usr/lib/x86_64-linux-gnu/libserver.so.3" : LIBC,
			                     i < 18 ? APP1 : LIBC_ID, (uint64_t)(0x10000 * (s + 1) + 0x100 * i) };
		}
		stacks[s] = make_stack(fr, 20);
	}
	assert_int_equal(store_open(f->path, true, &st, err, sizeof err), 0);
	for (int i = 0; i < 2000; i++) {
		struct store_stack_count c[4];
		struct store_event ev = {
			.time_us = T0 + i * 50000, .host = "host", .watch = "server", .pid = 4242,
			.comm = "server", .exe = "/usr/sbin/server", .tid = 4243 + i % 8,
			.thread = "worker", .usage = 1000, .threshold = 800, .consecutive = 1,
			.samples = 30, .stacks = c, .nstacks = 4,
		};

		for (int k = 0; k < 4; k++) {
			const struct stackdump_stack *s = &stacks[(i + 3 * k) % 10];

			c[k] = (struct store_stack_count){ s->hash, k ? 3 : 21, s };
		}
		ev.stack = stacks[i % 10];
		ev.stack.stop_ns = 30000;
		if (i % 10 == 0)
			assert_int_equal(store_begin(st), 0);
		assert_int_equal(store_add_event(st, &ev), 0);
		if (i % 10 == 9)
			assert_int_equal(store_commit(st), 0);
	}
	store_close(st);
	size = file_size(f->path);
	print_message("compact storage: 2000 events, 60000 samples, 10 stacks of 20 frames: "
	              "%ld bytes (%.1f KiB, %.1f bytes per sample), WAL %ld bytes\n",
	              size, size / 1024.0, size / 60000.0, file_size(strcat(strcpy(err, f->path), "-wal")));
	/* Each stack's frames once. */
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM stacks"), 10);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM stack_frames"), 200);
	assert_int_equal(q_int(f->path, "SELECT sum(times_seen) FROM stacks"), 60000);
	assert_int_equal(q_int(f->path, "SELECT count(*) FROM event_stacks"), 8000);
	print_tables(f->path);
	/* And the report reads every sample back. */
	text = run(&opt, 0);
	assert_int_equal(folded_sum(text, &lines), 60000);
	assert_int_equal(lines, 10);
	free(text);
	/* Measured 1,646,592 bytes (SQLite 3.40): the 200 stack frames take
	 * 36 KiB once; what grows per event is its row (~94 B), its 4 counts
	 * with their index (~160 B) and its key sample's 20 exact addresses in
	 * event_frames (~500 B, 61 % of the file).  A guard against
	 * regressions, not a target. */
	assert_true(size < 2 * 1024 * 1024);
	for (int s = 0; s < 10; s++)
		stackdump_stack_free(&stacks[s]);
}

static int write_fixture_and_exit(const char *path)
{
	void *state = NULL;
	struct fixture *f;

	if (setup(&state) < 0)
		return 1;
	f = state;
	write_fixture(f, path);
	regfree(&f->ignore);
	rmdir(f->dir);
	stackdump_stack_free(&f->a1);
	stackdump_stack_free(&f->b1);
	stackdump_stack_free(&f->a2);
	stackdump_stack_free(&f->b2);
	stackdump_stack_free(&f->d);
	free(f);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_signature_name),
		cmocka_unit_test(test_frame_name),
		cmocka_unit_test(test_frame_spellings),
		cmocka_unit_test(test_parse_time),
		cmocka_unit_test(test_parse_time_local),
		cmocka_unit_test(test_parse_by),
		cmocka_unit_test_setup_teardown(test_totals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_by_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_by_signature, setup, teardown),
		cmocka_unit_test_setup_teardown(test_by_top_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_by_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ranking_ties, setup, teardown),
		cmocka_unit_test_setup_teardown(test_single_dumps_and_missing_stacks, setup, teardown),
		cmocka_unit_test(test_empty),
		cmocka_unit_test_setup_teardown(test_folded, setup, teardown),
		cmocka_unit_test(test_folded_merge_and_escape),
		cmocka_unit_test_setup_teardown(test_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table, setup, teardown),
		cmocka_unit_test(test_table_deep_stack),
		cmocka_unit_test(test_flamegraph_tree),
		cmocka_unit_test(test_flamegraph_empty),
		cmocka_unit_test(test_flamegraph_labels),
		cmocka_unit_test_setup_teardown(test_run_by_every_grouping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_filters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_folded_and_svg, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_missing_database, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hosts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_several_databases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compact_storage, setup, teardown),
	};

	if (argc == 3 && strcmp(argv[1], "--write-fixture") == 0)
		return write_fixture_and_exit(argv[2]);
	return cmocka_run_group_tests_name("report", tests, NULL, NULL);
}
