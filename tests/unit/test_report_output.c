/* report's output forms on the fixture and on hostile names: folded
 * stacks (report_folded.c), JSON (report_json.c), the table
 * (report_table.c), and the SVG flame graph (flamegraph.c). */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpumond/flamegraph.h"
#include "cpumond/report_internal.h"
#include "tests/unit/report_fixture.h"

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
	         "\"unit\":\"app.service\",\"cgroup\":\"/system.slice/app.service\",\"samples\":240},"
	         "{\"host\":\"h\",\"pid\":200,\"comm\":\"app\",\"unit\":\"app@2.service\","
	         "\"cgroup\":\"/system.slice/system-app.slice/app@2.service\",\"samples\":120}],"
	         "\"host_count\":1,\"hosts\":[{\"host\":\"h\",\"events\":15,\"samples\":360}],"
	         "\"threads\":3,"
	         "\"thread_names\":[\"worker-1\",\"worker-2\"],\"captures\":[\"ptrace\",\"perf\"],"
	         "\"entry\":3,\"truncated\":false,"
	         "\"frames\":["
	         "{\"name\":\"hot_a.constprop.0\",\"symbol\":\"hot_a.constprop.0\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4352,\"ignored\":false,"
	         "\"file\":null,\"line\":null,\"inlined\":false},"
	         "{\"name\":\"chain_a2\",\"symbol\":\"chain_a2\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4608,\"ignored\":false,"
	         "\"file\":null,\"line\":null,\"inlined\":false},"
	         "{\"name\":\"chain_a1\",\"symbol\":\"chain_a1\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":4864,\"ignored\":false,"
	         "\"file\":null,\"line\":null,\"inlined\":false},"
	         "{\"name\":\"worker_main\",\"symbol\":\"worker_main\",\"module\":\"" APP "\","
	         "\"build_id\":\"" APP1 "\",\"func_offset\":5120,\"ignored\":false,"
	         "\"file\":null,\"line\":null,\"inlined\":false},"
	         "{\"name\":\"start_thread\",\"symbol\":\"start_thread\",\"module\":\"" LIBC "\","
	         "\"build_id\":\"" LIBC_ID "\",\"func_offset\":565248,\"ignored\":true,"
	         "\"file\":null,\"line\":null,\"inlined\":false},"
	         "{\"name\":\"__clone3\",\"symbol\":\"__clone3\",\"module\":\"" LIBC "\","
	         "\"build_id\":\"" LIBC_ID "\",\"func_offset\":1093632,\"ignored\":true,"
	         "\"file\":null,\"line\":null,\"inlined\":false}]}",
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
	         "1 more group (--top 0 shows them all)\n", sig1, sig2);
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

/* A count of one is singular: the table's summary, its hosts line and its
 * ignored frames, the SVG's subtitle and boxes. */
static void test_plurals(void **state)
{
	static const struct fx x[] = {
		{ "leaf", "/bin/p", "", 0x10 }, { "start_thread", LIBC, LIBC_ID, 0x8a000 },
	};
	struct stackdump_stack s = MAKE(x);
	struct store_event ev = {
		.time_us = T0, .host = "a", .pid = 1, .tid = 1, .comm = "p", .thread = "t", .stack = s,
	};
	struct report_options opt = { .svg_path = "-" };
	struct report *r;
	char *text;
	size_t len;
	FILE *out;

	(void)state;
	/* One event of one sample on each of two hosts, one without a stack. */
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	assert_int_equal(report_add_stack(r, &s), 0);
	assert_int_equal(report_add_event(r, &ev), 0);
	ev.host = "b";
	ev.time_us = T0 + SEC;
	assert_int_equal(report_add_event(r, &ev), 0);
	ev.stack = (struct stackdump_stack){ 0 };
	ev.time_us = T0 + 2 * SEC;
	assert_int_equal(report_add_event(r, &ev), 0);
	assert_int_equal(report_finish(r), 0);
	text = capture(report_print_table, r, 0);
	assert_non_null(strstr(text, "3 events on 2 hosts from 2026-11-29 13:04:05 to 2026-11-29 "
	                             "13:04:07 +0000: 2 stack samples, 1 distinct stack, 1 group by "
	                             "exact\n1 event has no stack (see cpumond tail)\n"));
	assert_non_null(strstr(text, "      hosts: a (1 sample), b (1)\n"));
	assert_non_null(strstr(text, "      ...  1 ignored frame\n"));
	free(text);
	report_free(r);

	/* One event of one sample. */
	ev.stack = s;
	ev.time_us = T0;
	assert_int_equal(report_new(REPORT_BY_EXACT, NULL, &r), 0);
	assert_int_equal(report_add_stack(r, &s), 0);
	assert_int_equal(report_add_event(r, &ev), 0);
	assert_int_equal(report_finish(r), 0);
	text = capture(report_print_table, r, 0);
	assert_non_null(strstr(text, "1 event from 2026-11-29 13:04:05 to 2026-11-29 13:04:05 "
	                             "+0000: 1 stack sample, 1 distinct stack, 1 group by exact\n"));
	free(text);
	out = open_memstream(&text, &len);
	assert_non_null(out);
	assert_int_equal(report_write_svg(&opt, r, out), 0);
	assert_int_equal(fclose(out), 0);
	assert_non_null(strstr(text, ">1 sample of 1 event from 2026-11-29 13:04:05 to "));
	assert_non_null(strstr(text, "<title>all\n1 sample, 100.00%</title>"));
	free(text);
	report_free(r);
	stackdump_stack_free(&s);
}

/* ---- The flame graph ---- */

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

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_folded, setup, teardown),
		cmocka_unit_test(test_folded_merge_and_escape),
		cmocka_unit_test_setup_teardown(test_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table, setup, teardown),
		cmocka_unit_test(test_table_deep_stack),
		cmocka_unit_test(test_plurals),
		cmocka_unit_test(test_flamegraph_tree),
		cmocka_unit_test(test_flamegraph_empty),
		cmocka_unit_test(test_flamegraph_labels),
	};

	(void)argc;
	(void)argv;
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("report_output", tests, NULL, NULL);
}
