/* report_usage: the ranking of the usage history's threads, their
 * figures, the table, the JSON lines, the chart's scales, ticks and
 * elements, and hostile names in each form. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpumond/report_usage.h"

#define S 1000000LL              /* a second in µs */
#define T0 (1764547200LL * S)    /* 2025-12-01 00:00:00 UTC */

static struct store_usage row(pid_t pid, pid_t tid, const char *comm, const char *thread,
                              int64_t t, int usage)
{
	return (struct store_usage){ .time_us = t, .interval_ms = 3000, .watch = "web", .pid = pid,
	                             .comm = comm, .tid = tid, .thread = thread, .usage = usage,
	                             .threshold = 800, .state = 'R' };
}

static char *capture(void (*fn)(const struct report_usage *, size_t, FILE *),
                     const struct report_usage *u, size_t top)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	fn(u, top, f);
	assert_int_equal(fclose(f), 0);
	return text;
}

static size_t count(const char *text, const char *what)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
		n++;
	return n;
}

/* Thread 11 burns 900 then 500, 12 is kept once at 950, 21 (another
 * process) three times at 300; one event of 11, one of a thread that has
 * no row. */
static struct report_usage *fixture(void)
{
	struct report_usage *u;
	struct stackdump_frame f = { .module = "/usr/bin/app", .func_offset = 0x40,
	                             .symbol = "_Z4spinv" };
	struct store_event ev = { .time_us = T0 + 3 * S, .pid = 10, .tid = 11, .comm = "app",
	                          .thread = "w1", .usage = 900, .threshold = 800,
	                          .stack = { .frames = &f, .nframes = 1 } };
	struct store_event other = { .time_us = T0 + 1 * S, .pid = 30, .tid = 31, .comm = "x",
	                             .thread = "y", .usage = 850, .threshold = 800 };
	const struct store_usage rows[] = {
		row(10, 11, "app", "w1", T0, 900), row(10, 12, "app", "w2", T0, 950),
		row(20, 21, "db", "pg", T0, 300), row(10, 11, "app", "w1", T0 + 3 * S, 500),
		row(20, 21, "db", "pg", T0 + 3 * S, 300), row(20, 21, "db", "pg", T0 + 6 * S, 300),
	};

	assert_int_equal(report_usage_new(&u), 0);
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		assert_int_equal(report_usage_add_row(u, 0, &rows[i]), 0);
	assert_int_equal(report_usage_add_event(u, 0, &ev), 0);
	assert_int_equal(report_usage_add_event(u, 0, &other), 0);
	assert_int_equal(report_usage_finish(u), 0);
	return u;
}

static void test_ranking_and_figures(void **state)
{
	struct report_usage *u = fixture();
	const struct usage_thread *t;
	struct usage_totals tot;

	(void)state;
	report_usage_totals(u, &tot);
	assert_int_equal(tot.threads, 3);
	assert_int_equal(tot.rows, 6);
	assert_int_equal(tot.events, 2);
	assert_true(tot.first_us == T0 && tot.last_us == T0 + 6 * S && tot.last_end_us == T0 + 9 * S);
	/* By CPU time: 11 (900+500)*3 s = 4.2 s, 21 2.7 s, 12 2.85 s. */
	t = report_usage_thread(u, 0);
	assert_int_equal(t->tid, 11);
	assert_int_equal(t->peak, 900);
	assert_true(t->peak_us == T0);
	assert_true(t->mean > 699.9 && t->mean < 700.1);
	assert_int_equal(t->cpu_ms, 4200);
	assert_int_equal(t->over_ms, 3000);   /* 900 > 800 once; 500 is not */
	assert_int_equal(t->cycles, 2);
	assert_int_equal(t->events, 1);
	assert_int_equal(t->npoints, 2);
	assert_int_equal(report_usage_thread(u, 1)->tid, 12);
	assert_int_equal(report_usage_thread(u, 2)->tid, 21);
	assert_int_equal(report_usage_thread(u, 2)->events, 0);
	assert_null(report_usage_thread(u, 3));
	/* Events in time order; the one without rows is among no thread. */
	assert_int_equal(report_usage_event(u, 0)->tid, 31);
	assert_string_equal(report_usage_event(u, 0)->frame, "");
	assert_string_equal(report_usage_event(u, 1)->frame, "spin()");
	assert_int_equal(report_usage_rank_of(u, report_usage_event(u, 1), 0), 0);
	assert_int_equal(report_usage_rank_of(u, report_usage_event(u, 0), 0), -1);
	report_usage_free(u);
}

static void test_table_and_json(void **state)
{
	struct report_usage *u = fixture(), *empty;
	char *text;

	(void)state;
	text = capture(report_usage_print_table, u, 2);
	assert_non_null(strstr(text, "2 threads of 3 kept in the usage history from "));
	assert_non_null(strstr(text, "   1   900   700      0.1     4.2      1 app[10]"));
	assert_non_null(strstr(text, "   2   950   950      0.1     2.9      0 app[10]"));
	assert_null(strstr(text, "db[20]"));
	free(text);
	text = capture(report_usage_print_json, u, 0);
	assert_int_equal(count(text, "\n"), 3);
	assert_non_null(strstr(text, "{\"rank\":1,\"pid\":10,\"tid\":11,\"process\":\"app\","
	                             "\"thread\":\"w1\",\"watch\":\"web\",\"threshold\":800,"
	                             "\"peak\":900,"));
	assert_non_null(strstr(text, "\"mean\":700.0,\"over_threshold_s\":3.0,\"cpu_s\":4.2,"
	                             "\"cycles\":2,\"events\":1,"));
	free(text);
	report_usage_free(u);

	assert_int_equal(report_usage_new(&empty), 0);
	assert_int_equal(report_usage_finish(empty), 0);
	text = capture(report_usage_print_table, empty, 10);
	assert_non_null(strstr(text, "no usage history in the window"));
	free(text);
	text = capture(report_usage_print_json, empty, 10);
	assert_string_equal(text, "");
	free(text);
	report_usage_free(empty);
}

static void test_scale_and_ticks(void **state)
{
	struct usage_scale s = { .t0_us = 0, .t1_us = 100 * S, .x0 = 10, .w = 200, .y0 = 20,
	                         .h = 100 };

	(void)state;
	assert_true(report_usage_x(&s, 0) == 10.0);
	assert_true(report_usage_x(&s, 50 * S) == 110.0);
	assert_true(report_usage_x(&s, -5) == 10.0 && report_usage_x(&s, 200 * S) == 210.0);
	assert_true(report_usage_y(&s, 0) == 120.0);
	assert_true(report_usage_y(&s, 1000) == 20.0 && report_usage_y(&s, 5000) == 20.0);
	assert_true(report_usage_y(&s, 250) == 95.0 && report_usage_y(&s, -1) == 120.0);
	assert_true(report_usage_tick_us(6 * S, 8) == 1 * S);
	assert_true(report_usage_tick_us(60 * S, 8) == 15 * S);
	assert_true(report_usage_tick_us(3600 * S, 8) == 900 * S);
	assert_true(report_usage_tick_us(86400 * S, 8) == 3 * 3600 * S);
	assert_true(report_usage_tick_us(365 * 86400 * S, 8) == 7 * 86400 * S);
}

static char *svg(const struct report_usage *u, size_t top, int64_t since, int64_t until)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	assert_int_equal(report_usage_write_svg(u, top, since, until, "t<i>tle", "sub&title", f), 0);
	assert_int_equal(fclose(f), 0);
	return text;
}

/* A polyline a thread shown, a line a distinct threshold, a mark an
 * event, the legend; a gap in a thread's cycles draws it at 0. */
static void test_chart(void **state)
{
	struct report_usage *u = fixture();
	char *text;

	(void)state;
	text = svg(u, 0, 0, 0);
	assert_non_null(strstr(text, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
	assert_int_equal(count(text, "<polyline"), 3);
	assert_int_equal(count(text, "class=\"threshold\""), 1);
	assert_int_equal(count(text, "<circle class=\"mark\""), 2);
	assert_int_equal(count(text, "<g class=\"series\""), 3);
	assert_non_null(strstr(text, "<title>t&lt;i&gt;tle</title>"));
	assert_non_null(strstr(text, ">sub&amp;title</text>"));
	assert_non_null(strstr(text, "app[10] w1/11 at 900‰ over 800‰: spin()</title>"));
	assert_non_null(strstr(text, "x[30] y/31 at 850‰ over 800‰: (no stack)</title>"));
	assert_null(strstr(text, "<script"));
	free(text);
	/* --top 1: one line, still every event. */
	text = svg(u, 1, 0, 0);
	assert_int_equal(count(text, "<polyline"), 1);
	assert_int_equal(count(text, "<circle class=\"mark\""), 2);
	free(text);
	report_usage_free(u);
}

static void test_gap_drops_to_zero(void **state)
{
	struct report_usage *u;
	char *text, *line;
	const struct store_usage rows[] = {
		row(1, 2, "a", "b", T0, 500), row(1, 2, "a", "b", T0 + 3 * S, 500),
		row(1, 2, "a", "b", T0 + 60 * S, 500), row(1, 2, "a", "b", T0 + 63 * S, 500),
	};

	(void)state;
	assert_int_equal(report_usage_new(&u), 0);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(report_usage_add_row(u, 0, &rows[i]), 0);
	assert_int_equal(report_usage_finish(u), 0);
	text = svg(u, 0, 0, 0);
	line = strstr(text, "points=\"");
	assert_non_null(line);
	/* 4 points and 2 at the bottom (y 450) for the gap. */
	assert_int_equal(count(line, ",450.0 "), 2);
	assert_int_equal(count(line, ","), 6);
	free(text);
	report_usage_free(u);
}

/* Names are bytes: markup, quotes, control bytes and bytes that are not
 * UTF-8 are escaped in the chart, the table and the JSON. */
static void test_hostile_names(void **state)
{
	struct report_usage *u;
	const char *comm = "<svg onload=\"x\">", *thread = "a&b\x01\xff'";
	struct store_usage r = row(5, 6, comm, thread, T0, 900);
	struct store_event ev = { .time_us = T0, .pid = 5, .tid = 6, .comm = comm, .thread = thread,
	                          .usage = 900, .threshold = 800 };
	char *text;

	(void)state;
	r.watch = "]]>";
	assert_int_equal(report_usage_new(&u), 0);
	assert_int_equal(report_usage_add_row(u, 0, &r), 0);
	assert_int_equal(report_usage_add_event(u, 0, &ev), 0);
	assert_int_equal(report_usage_finish(u), 0);
	text = svg(u, 0, 0, 0);
	assert_null(strstr(text, comm));
	assert_null(strstr(text, "]]>"));
	assert_null(strstr(text, "\x01"));
	assert_null(strstr(text, "\xff"));
	assert_non_null(strstr(text, "&lt;svg onload=&quot;x&quot;&gt;[5] a&amp;b\\x01\\xff&apos;/6"));
	free(text);
	text = capture(report_usage_print_table, u, 0);
	assert_null(strstr(text, "\x01"));
	free(text);
	text = capture(report_usage_print_json, u, 0);
	assert_non_null(strstr(text, "\"process\":\"<svg onload=\\\"x\\\">\""));
	assert_null(strstr(text, "\x01"));
	free(text);
	report_usage_free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ranking_and_figures),
		cmocka_unit_test(test_table_and_json),
		cmocka_unit_test(test_scale_and_ticks),
		cmocka_unit_test(test_chart),
		cmocka_unit_test(test_gap_drops_to_zero),
		cmocka_unit_test(test_hostile_names),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	setenv("TZ", "UTC", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
