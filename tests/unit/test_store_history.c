/* store's usage history (store_history.c): cycles and their kept threads
 * written in the cycle's transaction, names stored once, the latest cycle
 * with each thread's last event, the window walker and its filters,
 * retention, and older files that have no history. */
#include <errno.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/unit/sql_fixture.h"
#include "tests/unit/store_fixture.h"

#include "cpumond/store.h"

static struct store_usage row(const char *watch, pid_t pid, const char *comm, pid_t tid,
                              const char *thread, int usage)
{
	return (struct store_usage){ .watch = watch, .pid = pid, .comm = comm, .tid = tid,
	                             .thread = thread, .usage = usage, .run_delay = 12,
	                             .state = 'R', .threshold = 800, .episode = usage > 800 };
}

/* One cycle in its own transaction; returns its id. */
static int64_t add_cycle(struct store *st, int64_t time_us, const struct store_usage *rows,
                         size_t n)
{
	struct store_cycle c = { .time_us = time_us, .interval_ms = 3000, .threads = 1000 };

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_cycle(st, &c, rows, n), 0);
	assert_int_equal(store_commit(st), 0);
	assert_true(c.id > 0);
	return c.id;
}

/* What the walkers saw, one line per row. */
struct seen {
	char text[4096];
	size_t len;
	int rows;
	int stop_after;
};

static int note_row(const struct store_usage *u, void *arg)
{
	struct seen *s = arg;

	assert_int_equal(u->interval_ms, 3000);      /* every cycle here */
	if (s->len < sizeof s->text - 256)       /* long walks: only counted further on */
		s->len += (size_t)snprintf(s->text + s->len, sizeof s->text - s->len,
	                           "%lld %s %d %s %d %s %d %d %c %d %d %lld %s\n",
	                           (long long)u->time_us, u->watch, (int)u->pid, u->comm,
	                           (int)u->tid, u->thread, u->usage, u->run_delay, u->state,
	                           u->threshold, u->episode, (long long)u->last_event,
	                           u->last_symbol);
	s->rows++;
	return s->stop_after && s->rows == s->stop_after ? 9 : 0;
}

/* Rows round-trip, names are stored once, and the latest cycle comes
 * busiest first with the thread's last event and its named frame. */
static void test_round_trip_and_latest(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_usage a[] = {
		row("web", 100, "nginx", 101, "worker-1", 300),
		row("web", 100, "nginx", 102, "worker-2", 950),
	};
	struct stackdump_frame frames[] = {
		{ .module = "/usr/bin/nginx", .build_id = "ab", .func_offset = 0x10 },
		{ .module = "/usr/bin/nginx", .build_id = "ab", .func_offset = 0x20,
		  .symbol = "_Z4spinv" },
	};
	struct store_event ev = { .time_us = 1500, .watch = "web", .pid = 100, .comm = "nginx",
	                          .tid = 102, .thread = "worker-2", .usage = 950,
	                          .threshold = 800, .consecutive = 1 };
	struct store_cycle c;
	struct seen s = { 0 };

	/* Before any cycle: none. */
	assert_int_equal(store_latest_cycle(st, &c, note_row, &s), 0);
	assert_int_equal(c.id, 0);
	assert_int_equal(s.rows, 0);

	add_cycle(st, 1000, a, 2);
	ev.stack = (struct stackdump_stack){ .frames = frames, .nframes = 2, .hash = 0x77 };
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	a[0].usage = 400;
	a[1].thread = "renamed";
	{
		struct store_cycle c2 = { .time_us = 2000, .interval_ms = 3000, .threads = 999 };

		assert_int_equal(store_add_cycle(st, &c2, a, 2), 0);
	}
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 3);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM history"), 4);

	assert_int_equal(store_latest_cycle(st, &c, note_row, &s), 0);
	assert_int_equal(c.time_us, 2000);
	assert_int_equal(c.interval_ms, 3000);
	assert_int_equal(c.threads, 999);
	assert_string_equal(s.text,
	                    "2000 web 100 nginx 102 renamed 950 12 R 800 1 1 _Z4spinv\n"
	                    "2000 web 100 nginx 101 worker-1 400 12 R 800 0 0 \n");
	store_close(st);

	/* A reader sees the same. */
	st = open_store(fx->path, false);
	memset(&s, 0, sizeof s);
	assert_int_equal(store_latest_cycle(st, &c, note_row, &s), 0);
	assert_int_equal(s.rows, 2);
	store_close(st);
}

/* The window is [since, until), the filters are the events' (kind aside),
 * rows come in cycle order then tid, across batches, and the walk stops
 * when the callback says so. */
static void test_window_and_filters(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_usage r[3] = {
		row("web", 100, "nginx", 101, "w", 500),
		row("web", 100, "nginx", 102, "w", 600),
		row("db", 200, "postgres", 201, "pg", 700),
	};
	struct store_filter f = { 0 };
	struct seen s = { 0 };

	for (int i = 0; i < 400; i++)            /* 1,200 rows: several batches */
		add_cycle(st, 1000 * (i + 1), r, 3);
	assert_int_equal(store_each_usage_in(st, &f, note_row, &s), 0);
	assert_int_equal(s.rows, 1200);

	f = (struct store_filter){ .since_us = 2000, .until_us = 4000 };
	memset(&s, 0, sizeof s);
	assert_int_equal(store_each_usage_in(st, &f, note_row, &s), 0);
	assert_string_equal(s.text, "2000 web 100 nginx 101 w 500 12 R 800 0 0 \n"
	                            "2000 web 100 nginx 102 w 600 12 R 800 0 0 \n"
	                            "2000 db 200 postgres 201 pg 700 12 R 800 0 0 \n"
	                            "3000 web 100 nginx 101 w 500 12 R 800 0 0 \n"
	                            "3000 web 100 nginx 102 w 600 12 R 800 0 0 \n"
	                            "3000 db 200 postgres 201 pg 700 12 R 800 0 0 \n");

	const struct store_filter some[] = {
		{ .watch = "db" }, { .comm = "nginx" }, { .thread = "pg" }, { .pid = 100 },
		{ .pid = 100, .thread = "pg" }, { .since_us = 400001 }, { .until_us = 1000 },
		{ .since_us = 400000, .kind = "stall" },
	};
	const int want[] = { 400, 800, 400, 800, 0, 0, 0, 3 };

	for (size_t i = 0; i < sizeof some / sizeof some[0]; i++) {
		memset(&s, 0, sizeof s);
		assert_int_equal(store_each_usage_in(st, &some[i], note_row, &s), 0);
		if (s.rows != want[i])
			fail_msg("filter %zu: %d rows, want %d", i, s.rows, want[i]);
	}
	memset(&s, 0, sizeof s);
	s.stop_after = 300;
	f = (struct store_filter){ 0 };
	assert_int_equal(store_each_usage_in(st, &f, note_row, &s), 9);
	assert_int_equal(s.rows, 300);
	store_close(st);
}

/* A cycle is all or nothing, and does not take the cycle's events with it. */
static void test_cycle_all_or_nothing(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_usage dup[] = { row("web", 1, "a", 5, "t", 500), row("web", 1, "a", 5, "u", 600) };
	struct store_event ev = { .time_us = 1, .pid = 1, .tid = 5, .usage = 900, .threshold = 800 };
	struct store_cycle c = { .time_us = 1000, .interval_ms = 3000 };

	assert_int_equal(store_add_cycle(st, &c, dup, 1), -EINVAL);    /* no transaction */
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_add_cycle(st, &c, dup, 2), -EINVAL);
	assert_int_equal(c.id, 0);
	assert_non_null(strstr(store_error(st), "cannot add history"));
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM cycles"), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM history"), 0);
	/* The name "u" was undone with its cycle; the cache must not hand
	 * out its id again. */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 0);
	add_cycle(st, 2000, dup + 1, 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM history JOIN labels"
	                       " ON labels.id = history.label WHERE thread = 'u'"), 1);
	store_close(st);
}

/* Retention: cycles older than the cutoff go with their rows, names no
 * longer used go an hour later, and the size cap takes the oldest cycles
 * when they are older than the oldest event. */
static void test_prune(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	const int64_t hour = 3600LL * 1000000;
	struct store_usage old = row("web", 1, "a", 5, "old", 500);
	struct store_usage young = row("web", 1, "a", 5, "young", 500);
	struct store_event ev = { .time_us = 100 * hour, .pid = 1, .tid = 5, .usage = 900 };
	int deleted;
	bool more;

	add_cycle(st, 1 * hour, &old, 1);
	add_cycle(st, 2 * hour, &old, 1);
	add_cycle(st, 5 * hour, &young, 1);
	assert_int_equal(store_prune(st, 3 * hour, 0, 100, &deleted, &more), 0);
	assert_false(more);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM cycles"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM history"), 1);
	/* "old" was last seen at 2 h, within the hour before 3 h: kept. */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 2);
	assert_int_equal(store_prune(st, 4 * hour, 0, 100, &deleted, &more), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 1);
	add_cycle(st, 6 * hour, &old, 1);        /* its id was forgotten with it */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 2);

	/* Size cap: cycles are older than the event, so they go first. */
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(store_prune(st, 0, 1, 1, &deleted, &more), 0);
	assert_true(more);
	assert_int_equal(deleted, 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM cycles"), 1);
	assert_int_equal(store_prune(st, 0, 1, 1, &deleted, &more), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM cycles"), 0);
	assert_int_equal(store_prune(st, 0, 1, 1, &deleted, &more), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events"), 0);
	store_close(st);
}

/* What v5 added, dropped again: a v4 file. */
#define TO_V4 "DROP TABLE history; DROP TABLE labels; DROP TABLE cycles;" \
	" DROP INDEX events_tid; PRAGMA user_version = 4; PRAGMA wal_checkpoint(TRUNCATE);"

/* A v4 file read as it is has no history; the writer migrates it. */
static void test_v4_file(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_usage r = row("web", 1, "a", 5, "t", 500);
	struct store_filter all = { 0 };
	struct store_cycle c;
	struct seen s = { 0 };

	store_close(st);
	q_exec(fx->path, TO_V4);
	st = open_store(fx->path, false);
	assert_int_equal(store_latest_cycle(st, &c, note_row, &s), 0);
	assert_int_equal(c.id, 0);
	assert_int_equal(store_each_usage_in(st, &all, note_row, &s), 0);
	assert_int_equal(s.rows, 0);
	store_close(st);
	assert_int_equal(q_int(fx->path, "PRAGMA user_version"), 4);

	st = open_rw(fx->path);
	assert_int_equal(q_int(fx->path, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
	add_cycle(st, 1000, &r, 1);
	assert_int_equal(store_each_usage_in(st, &all, note_row, &s), 0);
	assert_int_equal(s.rows, 1);
	store_close(st);
}

/* Hostile names (any bytes, parts that would run together) stay apart. */
static void test_names_kept_apart(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_usage r[] = {
		row("w", 1, "ab", 5, "c", 500), row("w", 1, "a", 6, "bc", 500),
		row("w", 1, "1:a", 7, "", 500), row("w", 1, "\n<&>\"", 8, "\x7f\x01", 500),
	};
	struct store_filter f = { .comm = "\n<&>\"" };
	struct seen s = { 0 };

	add_cycle(st, 1000, r, 4);
	add_cycle(st, 2000, r, 4);               /* from the cache */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM labels"), 4);
	assert_int_equal(store_each_usage_in(st, &f, note_row, &s), 0);
	assert_int_equal(s.rows, 2);
	assert_non_null(strstr(s.text, " 8 \x7f\x01 "));
	store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip_and_latest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window_and_filters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cycle_all_or_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v4_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_kept_apart, setup, teardown),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
