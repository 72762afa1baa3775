/* top's view (top_view.c): the order of the rows, the watch filter and its
 * cycling, the bar, and the table's lines (fixed rows, TZ fixed), with
 * hostile names escaped and every line cut to the screen's width; and
 * top_run --once on a real database (top.c's reading of the latest cycle). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/unit/tmpdir.h"

#include "cpumond/store.h"
#include "cpumond/top.h"
#include "stackdump/stackdump.h"

/* 2026-11-29 13:04:05 UTC */
#define CYCLE_US 1795957445000000LL

static struct top_thread row(char *watch, char *comm, char *thread, pid_t pid,
                             pid_t tid, int usage, int run_delay)
{
	return (struct top_thread){
		.watch = watch, .comm = comm, .thread = thread,
		.pid = pid, .tid = tid, .usage = usage, .run_delay = run_delay,
		.threshold = 800, .state = 'R',
	};
}

static char *draw(const struct top_screen *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	top_format(s, f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

/* Line I (0-based) of TEXT, without its end, or NULL. */
static char *line_of(const char *text, int i)
{
	const char *end;

	while (i-- > 0 && text) {
		text = strchr(text, '\n');
		text = text ? text + 1 : NULL;
	}
	if (!text || !*text)
		return NULL;
	end = strchrnul(text, '\n');
	return strndup(text, (size_t)(end - text));
}

static size_t code_points(const char *s)
{
	size_t n = 0;
	int l;

	for (; *s; s += l, n++) {
		l = stackdump_utf8_len(s);
		assert_true(l > 0);
	}
	return n;
}

static void test_order(void **state)
{
	struct top_thread t[] = {
		row("a", "p", "x", 1, 30, 500, 10),
		row("a", "p", "y", 1, 20, 900, 0),
		row("b", "q", "z", 2, 40, 500, 700),
		row("b", "q", "w", 2, 10, 500, 10),
	};
	const struct top_thread *out[4];
	(void)state;

	assert_int_equal(top_select(t, 4, NULL, TOP_BY_USAGE, out), 4);
	/* Usage, then run delay, then tid. */
	assert_int_equal(out[0]->tid, 20);
	assert_int_equal(out[1]->tid, 40);
	assert_int_equal(out[2]->tid, 10);
	assert_int_equal(out[3]->tid, 30);

	assert_int_equal(top_select(t, 4, NULL, TOP_BY_RUN_DELAY, out), 4);
	/* Run delay, then usage, then tid. */
	assert_int_equal(out[0]->tid, 40);
	assert_int_equal(out[1]->tid, 10);
	assert_int_equal(out[2]->tid, 30);
	assert_int_equal(out[3]->tid, 20);

	assert_int_equal(top_select(t, 4, "b", TOP_BY_USAGE, out), 2);
	assert_int_equal(out[0]->tid, 40);
	assert_int_equal(out[1]->tid, 10);
	assert_int_equal(top_select(t, 4, "none", TOP_BY_USAGE, out), 0);
	assert_int_equal(top_select(t, 0, NULL, TOP_BY_USAGE, out), 0);
}

static void test_next_watch(void **state)
{
	struct top_thread t[] = {
		row("web", "p", "x", 1, 1, 0, 0),
		row("db", "p", "x", 1, 2, 0, 0),
		row("web", "p", "x", 1, 3, 0, 0),
		row(NULL, "p", "x", 1, 4, 0, 0),   /* no name: "" */
	};
	const char *w;
	(void)state;

	/* all -> "" -> db -> web -> all */
	w = top_next_watch(t, 4, NULL);
	assert_string_equal(w, "");
	w = top_next_watch(t, 4, w);
	assert_string_equal(w, "db");
	w = top_next_watch(t, 4, w);
	assert_string_equal(w, "web");
	assert_null(top_next_watch(t, 4, w));
	/* A watch gone from the cycle: the next after it. */
	assert_string_equal(top_next_watch(t, 4, "cache"), "db");
	assert_null(top_next_watch(t, 4, "zzz"));
	assert_null(top_next_watch(t, 0, NULL));
}

static void test_bar(void **state)
{
	/* 12.5‰ an eighth, rounded to the nearest; clamped to 0..1000. */
	static const struct { int permille; const char *bar; } cases[] = {
		{ 0, "          " },
		{ -5, "          " },
		{ 6, "          " },
		{ 7, "\u258f         " },
		{ 100, "\u2588         " },
		{ 550, "\u2588\u2588\u2588\u2588\u2588\u258c    " },
		{ 987, "\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2589" },
		{ 1000, "\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588" },
		{ 1500, "\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588" },
	};
	char buf[TOP_BAR_CELLS * 3 + 1];
	(void)state;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		top_bar(cases[i].permille, buf, sizeof buf);
		assert_string_equal(buf, cases[i].bar);
		assert_int_equal(code_points(buf), TOP_BAR_CELLS);
	}
	/* A short buffer keeps whole characters only. */
	top_bar(1000, buf, 8);
	assert_string_equal(buf, "\u2588\u2588");
}

static void test_table(void **state)
{
	struct top_thread t[] = {
		row("hot", "hotchain", "idle-1", 4242, 4251, 0, 3),
		row("hot", "hotchain", "hot-0", 4242, 4250, 987, 12),
	};
	struct top_cycle c = { .id = 7, .time_us = CYCLE_US, .interval_ms = 3000,
	                       .threads = t, .nthreads = 2 };
	struct top_screen s = { .cycle = &c, .now_us = CYCLE_US + 1400000, .eol = "\n" };
	char *got;
	(void)state;

	t[1].episode = true;
	t[1].frame = "hot_leaf";
	t[0].state = 'S';
	got = draw(&s);
	assert_string_equal(got,
		"cpumond top  13:04:05 (1 s ago, every 3 s)  2 of 2 threads  by usage  watch all\n"
		"!* USAGE‰▼ BAR         DELAY‰ S LIMIT PROCESS[PID]         THREAD/TID          "
		"WATCH      LAST EVENT\n"
		"!*     987 █████████▉      12 R   800 hotchain[4242]       hot-0/4250          "
		"hot        hot_leaf\n"
		"         0                  3 S   800 hotchain[4242]       idle-1/4251         "
		"hot        -\n");
	free(got);

	/* By run delay, one row, the keys said, another end of line. */
	s.by = TOP_BY_RUN_DELAY;
	s.rows = 1;
	s.keys = true;
	s.eol = "\033[K\n";
	s.watch = "hot";
	c.interval_ms = 300;
	got = draw(&s);
	assert_string_equal(got,
		"cpumond top  13:04:05 (1 s ago, every 300 ms)  1 of 2 threads  by run delay  "
		"watch hot  [u]sage [d]elay [w]atch [q]uit\033[K\n"
		"!*  USAGE‰ BAR        DELAY‰▼ S LIMIT PROCESS[PID]         THREAD/TID          "
		"WATCH      LAST EVENT\033[K\n"
		"!*     987 █████████▉      12 R   800 hotchain[4242]       hot-0/4250          "
		"hot        hot_leaf\033[K\n");
	free(got);
}

static void test_unknowns(void **state)
{
	struct top_thread t[] = { row("w", "p", "x", 5, 6, 900, -1) };
	struct top_cycle c = { .id = 1, .time_us = CYCLE_US, .threads = t, .nthreads = 1 };
	struct top_screen s = { .cycle = &c, .now_us = CYCLE_US - 5000000 };
	char *got, *line;
	(void)state;

	/* No threshold: never over; no run delay, no state; a clock behind. */
	t[0].threshold = 0;
	t[0].state = '\x1b';
	got = draw(&s);
	line = line_of(got, 2);
	assert_non_null(line);
	assert_string_equal(line,
		"       900 █████████        - ?     - p[5]                 x/6                 "
		"w          -");
	assert_non_null(strstr(got, "(0 s ago)"));
	free(line);
	free(got);

	/* No cycle yet: the header says so, and nothing else. */
	c.id = 0;
	got = draw(&s);
	assert_string_equal(got, "cpumond top  no cycle recorded yet: is the daemon running and "
	                    "keeping the usage history?\n");
	free(got);
	got = draw(&(struct top_screen){ .cycle = NULL });
	assert_non_null(strstr(got, "no cycle recorded yet"));
	free(got);
	/* Why there is none, when top knows: escaped, a path is the user's. */
	s.note = "database /tmp/\033[2Jx.db does not exist";
	got = draw(&s);
	assert_string_equal(got, "cpumond top  database /tmp/\\x1b[2Jx.db does not exist\n");
	free(got);
}

static void test_hostile_names(void **state)
{
	/* A name that would clear the screen, move the cursor, set the
	 * window title, a C1 CSI and a byte that is no UTF-8. */
	struct top_thread t[] = {
		row("w\a", "\033[2J\033[H", "t\x9b\xff", 7, 8, 950, 0),
	};
	struct top_cycle c = { .id = 1, .time_us = CYCLE_US, .threads = t, .nthreads = 1 };
	struct top_screen s = { .cycle = &c, .now_us = CYCLE_US, .eol = "\n" };
	char *got;
	(void)state;

	t[0].frame = "evil\033[31m\xc2\x9b";
	got = draw(&s);
	for (const char *p = got; *p; p++)
		assert_false((unsigned char)*p < 0x20 && *p != '\n');
	assert_non_null(strstr(got, "\\x1b[2J\\x1b[H[7]"));
	assert_non_null(strstr(got, " t\\x9b\\xff/8 "));
	assert_non_null(strstr(got, " w\\x07 "));
	assert_non_null(strstr(got, " evil\\x1b[31m\\xc2\\x9b\n"));
	free(got);
}

static void test_cut_to_width(void **state)
{
	struct top_thread t[] = {
		row("a-watch-with-a-long-name", "c\xc3\xa9sar-the-process", "a-thread-named-too-long",
		    123456, 1234567, 1000, 1000),
	};
	struct top_cycle c = { .id = 1, .time_us = CYCLE_US, .threads = t, .nthreads = 1 };
	struct top_screen s = { .cycle = &c, .now_us = CYCLE_US, .eol = "\n" };
	char *got, *line, frame[600];
	(void)state;

	memset(frame, 'f', sizeof frame - 1);
	frame[sizeof frame - 1] = '\0';
	t[0].frame = frame;
	got = draw(&s);
	line = line_of(got, 2);
	/* Cells cut with an ellipsis, the pid and tid kept whole; the last
	 * column is not cut without a width. */
	assert_non_null(strstr(line, " césar-the-p…[123456] a-thread-n…/1234567 a-watch-w… ffff"));
	assert_true(strlen(line) > strlen(frame));
	assert_string_equal(line + strlen(line) - strlen(frame), frame);
	free(line);
	free(got);

	for (int w = 1; w <= 130; w += 7) {
		s.width = w;
		got = draw(&s);
		for (int i = 0; i < 3; i++) {
			line = line_of(got, i);
			assert_non_null(line);
			assert_true(code_points(line) <= (size_t)w);
			free(line);
		}
		free(got);
	}
}

/* What top_run writes to stdout with OPT, into a string to free; *RC gets
 * its return. */
static char *run_top(const struct top_options *opt, const char *dir, int *rc)
{
	char path[128], *buf;
	int fd, saved;
	FILE *f;
	long len;

	snprintf(path, sizeof path, "%s/top.out", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fd, STDOUT_FILENO) >= 0);
	close(fd);
	*rc = top_run(opt);
	fflush(stdout);
	assert_true(dup2(saved, STDOUT_FILENO) >= 0);
	close(saved);
	f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	return buf;
}

static void test_run_once(void **state)
{
	/* Unnamed on top: the innermost frame with a name, demangled. */
	struct stackdump_frame frames[] = {
		{ .ip = 0x1010, .offset = 0x10, .func_offset = 0x10, .module = "/usr/lib/libx.so",
		  .build_id = "ab" },
		{ .ip = 0x2020, .offset = 0x20, .func_offset = 0x20, .module = "/usr/bin/demo",
		  .build_id = "cd", .symbol = "_ZN4demo4spinEv" },
	};
	struct store_event ev = {
		.time_us = CYCLE_US - 1000000, .watch = "web", .pid = 4242, .comm = "demo",
		.tid = 4250, .thread = "burner", .usage = 990, .threshold = 800, .consecutive = 1,
		.stack = { .frames = frames, .nframes = 2, .hash = 0x77 },
	};
	struct store_usage rows[] = {
		{ .watch = "web", .pid = 4242, .comm = "demo", .tid = 4251, .thread = "idle",
		  .usage = 120, .run_delay = 3, .state = 'S', .threshold = 800 },
		{ .watch = "web", .pid = 4242, .comm = "demo", .tid = 4250, .thread = "burner",
		  .usage = 990, .run_delay = 40, .state = 'R', .threshold = 800, .episode = true },
	};
	struct store_cycle c = { .time_us = CYCLE_US, .interval_ms = 3000, .threads = 2 };
	struct top_options opt = { .once = true };
	char dir[64], db[128], *got, *line;
	struct store *st = NULL;
	int rc;
	(void)state;

	assert_int_equal(tmpdir_make(dir, sizeof dir, "test_top"), 0);
	snprintf(db, sizeof db, "%s/log.db", dir);
	opt.database = db;

	/* No database: said, and an error. */
	got = run_top(&opt, dir, &rc);
	assert_int_equal(rc, -ENOENT);
	assert_string_equal(got, "");
	free(got);

	assert_int_equal(store_open(db, true, &st, (char[256]){ 0 }, 256), 0);
	got = run_top(&opt, dir, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(got, "no cycle recorded yet"));
	free(got);

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_add_cycle(st, &c, rows, 2), 0);
	assert_int_equal(store_commit(st), 0);
	got = run_top(&opt, dir, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(got, "cpumond top  13:04:05 ("));
	assert_non_null(strstr(got, ", every 3 s)  2 of 2 threads  by usage  watch all\n"));
	line = line_of(got, 2);
	assert_string_equal(line, "!*     990 █████████▉      40 R   800 demo[4242]           "
	                    "burner/4250         web        demo::spin()");
	free(line);
	line = line_of(got, 3);
	assert_string_equal(line, "       120 █▎               3 S   800 demo[4242]           "
	                    "idle/4251           web        -");
	free(line);
	assert_null(line_of(got, 4));
	free(got);

	/* -n 1 and another watch. */
	opt.rows = 1;
	got = run_top(&opt, dir, &rc);
	assert_non_null(strstr(got, "1 of 2 threads"));
	assert_null(line_of(got, 3));
	free(got);
	opt.watch = "db";
	got = run_top(&opt, dir, &rc);
	assert_non_null(strstr(got, "0 of 0 threads  by usage  watch db\n"));
	assert_null(line_of(got, 2));
	free(got);

	store_close(st);
	tmpdir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_next_watch),
		cmocka_unit_test(test_bar),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_unknowns),
		cmocka_unit_test(test_hostile_names),
		cmocka_unit_test(test_cut_to_width),
		cmocka_unit_test(test_run_once),
	};

	setenv("TZ", "UTC", 1);
	tzset();
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("top", tests, NULL, NULL);
}
