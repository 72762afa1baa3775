/* report_run against real databases (report_read.c, report.c): every
 * --by, the filters, several databases of several hosts, folded stacks and
 * the SVG file, a missing database, and the size of a database of 60,000
 * samples. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "tests/unit/report_fixture.h"
#include "tests/unit/sql_fixture.h"

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
	regex_t re;

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

	/* By where the processes run: app[100] is in app.service, app[200] in
	 * app@2.service; spin[300] has neither (an older cpumond's event), and
	 * even "*" and "." do not take it. */
	opt.comm = opt.thread = NULL;
	opt.unit = "app.service";
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 240;hot_b 60;");
	free(text);
	opt.unit = "app*";
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 360;hot_b 90;");
	free(text);
	opt.unit = "*";
	opt.cgroup = "^/system\\.slice/system-app\\.slice/";
	opt.cgroup_re = &re;
	assert_int_equal(regcomp(&re, opt.cgroup, REG_EXTENDED | REG_NOSUB), 0);
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 120;hot_b 30;");
	free(text);
	regfree(&re);
	opt.unit = NULL;
	opt.cgroup = ".";
	assert_int_equal(regcomp(&re, opt.cgroup, REG_EXTENDED | REG_NOSUB), 0);
	text = run(&opt, 0);
	json_ranks(text, ranks, sizeof ranks);
	assert_string_equal(ranks, "hot_a 360;hot_b 90;");
	free(text);
	regfree(&re);
	opt.cgroup = NULL;
	opt.cgroup_re = NULL;

	/* [since, until): events 3..5 */
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

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_run_by_every_grouping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_filters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_folded_and_svg, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_missing_database, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_several_databases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compact_storage, setup, teardown),
	};

	(void)argc;
	(void)argv;
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("report_run", tests, NULL, NULL);
}
