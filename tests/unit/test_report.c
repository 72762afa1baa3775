/* report: suffix stripping, frame names, times, --by, grouping under
 * every --by, the ignore rules, ranking and its ties, key events, many
 * hosts: the aggregation (report_aggregate.c) and the command's arguments
 * (report.c).  The output forms are tested in test_report_output.c,
 * report_run against databases in test_report_run.c.
 *
 * `test_report --write-fixture PATH` writes the fixture database and exits:
 * tests/integration/test_report.py runs the command line against it. */
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/unit/report_fixture.h"

#include "config/config.h"
#include <unistd.h>

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
	assert_string_equal(g->procs[0].unit, "app.service");
	assert_string_equal(g->procs[0].cgroup, "/system.slice/app.service");
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
	assert_string_equal(g->procs[0].unit, "");
	assert_string_equal(g->procs[0].cgroup, "");
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

struct walk {
	size_t n;
	uint64_t samples;
	uint64_t other;          /* samples of watch "other" */
	size_t stop_at;          /* stop after this many; 0: never */
};

static int walk_sample(const struct report_sample *s, void *ctx)
{
	struct walk *w = ctx;

	if (w->n == 0) {
		/* The first event's first stack: app[100], thread 101, A of build 1. */
		assert_int_equal(s->count, 24);
		assert_int_equal(s->pid, 100);
		assert_int_equal(s->tid, 101);
		assert_int_equal(s->time_us, T0);
		assert_string_equal(s->thread, "worker-1");
		assert_string_equal(s->comm, "app");
		assert_string_equal(s->watch, "app");
		assert_string_equal(s->host, "h");
		assert_string_equal(s->kind, "");   /* not given */
		assert_string_equal(s->stack->frames[0].symbol, "hot_a.constprop.0");
	}
	w->n++;
	w->samples += s->count;
	if (strcmp(s->watch, "other") == 0)
		w->other += s->count;
	return w->stop_at && w->n == w->stop_at ? 7 : 0;
}

/* Every (event, stack) count with its event, adding up to the totals. */
static void test_each_sample(void **state)
{
	const struct fixture *f = *state;
	struct report *r = aggregate(f, REPORT_BY_SIGNATURE, false);
	struct walk w = { 0 };

	assert_int_equal(report_each_sample(r, walk_sample, &w), 0);
	/* 15 events with two stacks, D's with one, the last none. */
	assert_int_equal(w.n, 31);
	assert_int_equal(w.samples, 480);
	assert_int_equal(w.other, 30);
	w = (struct walk){ .stop_at = 3 };
	assert_int_equal(report_each_sample(r, walk_sample, &w), 7);
	assert_int_equal(w.n, 3);
	report_free(r);
}

/* A profile's cpu time without a configuration is the daemon's default
 * sample_interval. */
static void test_default_sample_interval(void **state)
{
	struct config cfg;
	(void)state;

	assert_int_equal(config_parse_string("[watch all]\nall = yes\n", "t.conf", &cfg, stderr), 0);
	assert_int_equal(cfg.sample_interval_ms, REPORT_SAMPLE_INTERVAL_DEFAULT_MS);
	config_free(&cfg);
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
	                             "\"unit\":\"app.service\",\"cgroup\":\"/system.slice/app.service\","
	                             "\"samples\":72},{\"host\":\"h2\",\"pid\":100,\"comm\":\"app\","
	                             "\"unit\":\"app.service\",\"cgroup\":\"/system.slice/app.service\","
	                             "\"samples\":24}],\"host_count\":2,\"hosts\":[{\"host\":\"h1\","
	                             "\"events\":3,\"samples\":72},{\"host\":\"h2\",\"events\":1,"
	                             "\"samples\":24}],\"threads\":3,"));
	free(text);
	report_free(r);
}

/* A process moved to another cgroup (and unit) between two events is
 * listed once in each, the one with more samples first. */
static void test_moved_process(void **state)
{
	const struct fixture *f = *state;
	struct report *r;
	const struct report_group *g;

	assert_int_equal(report_new(REPORT_BY_EXACT, &f->ignore, &r), 0);
	for (int i = 0; i < 3; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);      /* app[100], A1 24 + B1 6 */
		if (i > 0) {
			fe.ev.unit = "batch.service";
			fe.ev.cgroup = "/system.slice/batch.service";
		}
		for (size_t k = 0; k < fe.ev.nstacks; k++)
			if (!report_has_stack(r, fe.ev.stacks[k].hash))
				assert_int_equal(report_add_stack(r, fe.ev.stacks[k].stack), 0);
		assert_int_equal(report_add_event(r, &fe.ev), 0);
	}
	assert_int_equal(report_finish(r), 0);
	g = report_group(r, 0);
	assert_int_equal(g->stack->hash, f->a1.hash);
	assert_int_equal(g->nprocs, 2);
	assert_int_equal(g->procs[0].pid, 100);
	assert_string_equal(g->procs[0].unit, "batch.service");
	assert_string_equal(g->procs[0].cgroup, "/system.slice/batch.service");
	assert_int_equal(g->procs[0].samples, 48);
	assert_int_equal(g->procs[1].pid, 100);
	assert_string_equal(g->procs[1].unit, "app.service");
	assert_int_equal(g->procs[1].samples, 24);
	report_free(r);
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
		cmocka_unit_test_setup_teardown(test_each_sample, setup, teardown),
		cmocka_unit_test(test_default_sample_interval),
		cmocka_unit_test(test_empty),
		cmocka_unit_test_setup_teardown(test_hosts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_moved_process, setup, teardown),
	};

	if (argc == 3 && strcmp(argv[1], "--write-fixture") == 0)
		return write_fixture_and_exit(argv[2]);
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("report", tests, NULL, NULL);
}
