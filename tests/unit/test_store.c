/* store: file modes, schema version, round trip of events and stacks,
 * refusal of foreign files, transactions that fail. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/unit/sql_fixture.h"
#include "tests/unit/store_fixture.h"

#include "cpumond/store.h"

static void q_text(const char *path, const char *sql, char *buf, size_t len)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
	assert_int_equal(sqlite3_finalize(s), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static unsigned file_mode(const char *path)
{
	struct stat sb;

	assert_int_equal(stat(path, &sb), 0);
	return sb.st_mode & 07777;
}

static bool exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

/* Whole contents of PATH (at most 64 KiB), for "left untouched" checks. */
static size_t slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, len, f);
	assert_int_equal(fclose(f), 0);
	return n;
}

/* Three frames of one code path.  Two samples of it differ in the leaf's
 * ip, offset and symbol_offset, as samples of a busy loop do. */
static struct stackdump_frame frames_a1[] = {
	{ .ip = 0x5555555551a9, .offset = 0x11a9, .func_offset = 0x1180,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = "spin_leaf",
	  .symbol_offset = 0x29 },
	{ .ip = 0x555555555230, .offset = 0x1230, .func_offset = 0x1200,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = NULL,
	  .symbol_offset = 0 },
	/* High bits set: stored as a negative int64 and cast back. */
	{ .ip = 0xffffffffff600400, .offset = 0xfedcba9876543210, .func_offset = 0x8000000000000000,
	  .module = "[vdso]", .build_id = "", .symbol = "__vdso_clock_gettime",
	  .symbol_offset = 0x10 },
};
static struct stackdump_frame frames_a2[] = {
	{ .ip = 0x5555555551c4, .offset = 0x11c4, .func_offset = 0x1180,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = "spin_leaf",
	  .symbol_offset = 0x44 },
	{ .ip = 0x555555555230, .offset = 0x1230, .func_offset = 0x1200,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = NULL,
	  .symbol_offset = 0 },
	{ .ip = 0xffffffffff600400, .offset = 0xfedcba9876543210, .func_offset = 0x8000000000000000,
	  .module = "[vdso]", .build_id = "", .symbol = "__vdso_clock_gettime",
	  .symbol_offset = 0x10 },
};
#define HASH_A 0xfeedfacecafebeefULL

static struct store_event make_event(int64_t t, struct stackdump_frame *frames, size_t n)
{
	struct store_event ev = {
		.time_us = t, .host = "host1", .watch = "web", .pid = 4242, .nspid = 7,
		.comm = "nginx", .exe = "/usr/sbin/nginx", .cgroup = "/system.slice/nginx.service",
		.unit = "nginx.service", .tid = 4250, .thread = "worker-3", .usage = 987,
		.threshold = 800, .consecutive = 2, .run_delay = 15, .kind = "stall",
		.capture = "perf", .details = "{\"syscall\":\"futex\",\"owner\":4251}",
	};

	ev.stack.frames = frames;
	ev.stack.nframes = n;
	ev.stack.hash = n ? HASH_A : 0;
	ev.stack.truncated = n > 0;
	ev.stack.stop_ns = 43000;
	return ev;
}

static const char *nz(const char *s)
{
	return s ? s : "";
}

static void assert_event_equal(const struct store_event *got, const struct store_event *exp)
{
	assert_int_equal(got->id, exp->id);
	assert_int_equal(got->time_us, exp->time_us);
	assert_string_equal(got->kind, exp->kind ? exp->kind : "hot");
	assert_string_equal(got->capture, nz(exp->capture));
	assert_string_equal(got->details, nz(exp->details));
	assert_string_equal(got->host, nz(exp->host));
	assert_string_equal(got->watch, nz(exp->watch));
	assert_int_equal(got->pid, exp->pid);
	assert_int_equal(got->nspid, exp->nspid);
	assert_string_equal(got->comm, nz(exp->comm));
	assert_string_equal(got->exe, nz(exp->exe));
	assert_string_equal(got->cgroup, nz(exp->cgroup));
	assert_string_equal(got->unit, nz(exp->unit));
	assert_int_equal(got->tid, exp->tid);
	assert_string_equal(got->thread, nz(exp->thread));
	assert_int_equal(got->usage, exp->usage);
	assert_int_equal(got->threshold, exp->threshold);
	assert_int_equal(got->consecutive, exp->consecutive);
	assert_int_equal(got->run_delay, exp->run_delay);
	assert_string_equal(got->error, nz(exp->error));
	assert_string_equal(got->stack.error, nz(exp->error));
	assert_int_equal(got->stack.nframes, exp->stack.nframes);
	assert_true(got->stack.hash == exp->stack.hash);
	assert_int_equal(got->stack.stop_ns, exp->stack.stop_ns);
	assert_int_equal(got->stack.truncated, exp->stack.truncated);
	for (size_t i = 0; i < exp->stack.nframes; i++) {
		const struct stackdump_frame *g = &got->stack.frames[i], *x = &exp->stack.frames[i];

		assert_true(g->ip == x->ip);
		assert_true(g->offset == x->offset);
		assert_true(g->func_offset == x->func_offset);
		assert_string_equal(g->module, x->module);
		assert_string_equal(g->build_id, x->build_id);
		if (x->symbol) {
			assert_non_null(g->symbol);
			assert_string_equal(g->symbol, x->symbol);
			assert_true(g->symbol_offset == x->symbol_offset);
		} else {
			assert_null(g->symbol);
		}
	}
}

/* Compares each event read with the next expected one. */
struct expect {
	const struct store_event *ev;
	size_t n, seen;
	int stop_after;          /* > 0: return 7 after this many */
};

static int check_event(const struct store_event *ev, void *arg)
{
	struct expect *x = arg;

	assert_true(x->seen < x->n);
	assert_event_equal(ev, &x->ev[x->seen]);
	x->seen++;
	return x->stop_after > 0 && (int)x->seen == x->stop_after ? 7 : 0;
}

static int count_event(const struct store_event *ev, void *arg)
{
	(void)ev;
	(*(int *)arg)++;
	return 0;
}

/* A second code path: another leaf function under the same caller. */
static struct stackdump_frame frames_b[] = {
	{ .ip = 0x555555555301, .offset = 0x1301, .func_offset = 0x1300,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = "spin_other",
	  .symbol_offset = 0x1 },
	{ .ip = 0x555555555230, .offset = 0x1230, .func_offset = 0x1200,
	  .module = "/usr/bin/spin", .build_id = "0123456789abcdef", .symbol = NULL,
	  .symbol_offset = 0 },
};
#define HASH_B 0x0badc0ffee0ddf00ULL

struct episode_read {
	int events;
	unsigned samples;
	uint64_t hashes[4];
	unsigned counts[4];
	size_t nstacks;
	uint64_t stop_max_ns;
	char end[64];
};

static int read_episode(const struct store_event *ev, void *arg)
{
	struct episode_read *r = arg;

	r->events++;
	r->samples = ev->samples;
	r->nstacks = ev->nstacks;
	r->stop_max_ns = ev->stop_max_ns;
	snprintf(r->end, sizeof r->end, "%s", ev->episode_end);
	for (size_t i = 0; i < ev->nstacks && i < 4; i++) {
		r->hashes[i] = ev->stacks[i].hash;
		r->counts[i] = ev->stacks[i].count;
	}
	return 0;
}

/* An episode: 20 samples over two stacks; the key stack's sample frames,
 * every stack's count, both stacks' frames once; filters. */
static void test_episode_round_trip(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1000, frames_a1, 3);
	struct stackdump_stack b = { .frames = frames_b, .nframes = 2, .hash = HASH_B };
	const struct store_stack_count stacks[] = {
		{ HASH_A, 14, &ev.stack }, { HASH_B, 6, &b },
	};
	struct store_filter f = { 0 };
	struct stackdump_stack got;
	struct episode_read r = { 0 };

	ev.samples = 20;
	ev.stop_max_ns = 250000;
	ev.episode_end = "thread went idle after 20 samples";
	ev.stacks = stacks;
	ev.nstacks = 2;
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	ev.time_us = 5000;
	ev.pid = 7;
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);

	assert_int_equal(q_int(fx->path, "SELECT max(times_seen) FROM stacks"), 28);
	assert_int_equal(q_int(fx->path, "SELECT sum(times_seen) FROM stacks"), 40);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stack_frames"), 5);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_stacks"), 4);

	f.pid = 4242;
	assert_int_equal(store_each_event_in(st, &f, read_episode, &r), 0);
	assert_int_equal(r.events, 1);
	assert_int_equal(r.samples, 20);
	assert_int_equal(r.nstacks, 2);
	assert_true(r.hashes[0] == HASH_A && r.counts[0] == 14);
	assert_true(r.hashes[1] == HASH_B && r.counts[1] == 6);
	assert_int_equal(r.stop_max_ns, 250000);
	assert_string_equal(r.end, "thread went idle after 20 samples");

	memset(&r, 0, sizeof r);
	f = (struct store_filter){ .since_us = 2000, .comm = "nginx", .thread = "worker-3",
	                           .watch = "web" };
	assert_int_equal(store_each_event_in(st, &f, read_episode, &r), 0);
	assert_int_equal(r.events, 1);
	f.until_us = 5000;                       /* [since, until) */
	memset(&r, 0, sizeof r);
	assert_int_equal(store_each_event_in(st, &f, read_episode, &r), 0);
	assert_int_equal(r.events, 0);

	assert_int_equal(store_get_stack(st, HASH_B, &got), 0);
	assert_int_equal(got.nframes, 2);
	assert_string_equal(got.frames[0].symbol, "spin_other");
	assert_true(got.frames[0].func_offset == 0x1300);
	assert_null(got.frames[1].symbol);
	stackdump_stack_free(&got);
	assert_int_equal(store_get_stack(st, 0x42, &got), -ENOENT);

	/* The key stack must be among the stacks. */
	ev.stack.hash = 0x99;
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), -EINVAL);
	assert_int_equal(store_commit(st), 0);
	store_close(st);
}

/* What v5 added (the usage history), dropped again. */
#define DROP_V5 "DROP TABLE history; DROP TABLE labels; DROP TABLE cycles; DROP INDEX events_tid;"
/* What v4 and v5 added (v4: kind, capture, details), dropped again. */
#define DROP_V4 DROP_V5 " DROP INDEX events_kind; ALTER TABLE events DROP COLUMN kind;" \
	" ALTER TABLE events DROP COLUMN capture; ALTER TABLE events DROP COLUMN details;"

/* A v1 database (the first release) is migrated: its events keep their
 * stack with a count of one. */
static void test_migrates_v1(void **state)
{
	struct fixture *fx = *state;
	struct store *st;
	struct episode_read r = { 0 };
	struct store_filter all = { 0 };
	char sql[256];

	st = open_rw(fx->path);
	store_close(st);
	/* Back to v1 by hand: drop what v2, v3 and v4 added. */
	q_exec(fx->path, DROP_V4 " DROP TABLE event_stacks; ALTER TABLE events DROP COLUMN samples;"
	                 " ALTER TABLE events DROP COLUMN stop_max_us;"
	                 " ALTER TABLE events DROP COLUMN episode_end;"
	                 " ALTER TABLE events DROP COLUMN nspid; ALTER TABLE events DROP COLUMN cgroup;"
	                 " ALTER TABLE events DROP COLUMN unit; PRAGMA user_version = 1;");
	snprintf(sql, sizeof sql, "INSERT INTO stacks VALUES (%lld, 1, 0, 1, 1, 1);"
	         " INSERT INTO events (time, pid, tid, usage, threshold, consecutive, run_delay,"
	         " stop_us, stack_hash) VALUES (1, 1, 2, 900, 800, 1, 0, 55, %lld);",
	         (long long)HASH_A, (long long)HASH_A);
	q_exec(fx->path, sql);
	st = open_rw(fx->path);
	assert_int_equal(q_int(fx->path, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
	assert_int_equal(store_each_event_in(st, &all, read_episode, &r), 0);
	assert_int_equal(r.events, 1);
	assert_int_equal(r.samples, 1);
	assert_int_equal(r.nstacks, 1);
	assert_true(r.hashes[0] == HASH_A && r.counts[0] == 1);
	assert_int_equal(r.stop_max_ns, 55000);
	store_close(st);
}

/* An older database, made by hand from a new one by DOWNGRADE_SQL, with
 * OLD the event it then holds: a reader reads it as it is, without touching
 * it; the writer migrates it in place, the old event keeps everything it
 * had, and a new one gets every column. */
static void check_migrates(const char *path, const char *downgrade_sql, struct store_event old,
                           int64_t old_version)
{
	struct store_event ev = old, fresh;
	struct expect x = { .ev = &old, .n = 1 };
	static char before[65536], after[65536];
	size_t nbefore, nafter;
	struct store *st = open_rw(path);
	char err[512];
	int64_t last = 0;

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	store_close(st);
	q_exec(path, downgrade_sql);
	old.id = ev.id;

	nbefore = slurp(path, before, sizeof before);
	assert_int_equal(store_open(path, false, &st, err, sizeof err), 0);
	assert_int_equal(store_each_event_after(st, 0, check_event, &x, &last), 0);
	assert_int_equal(x.seen, 1);
	store_close(st);
	nafter = slurp(path, after, sizeof after);
	assert_int_equal(nafter, nbefore);
	assert_memory_equal(before, after, nbefore);
	assert_int_equal(q_int(path, "PRAGMA user_version"), old_version);

	st = open_rw(path);
	assert_int_equal(q_int(path, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
	fresh = make_event(2000, frames_a2, 3);
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &fresh), 0);
	assert_int_equal(store_commit(st), 0);
	{
		const struct store_event both[] = { old, fresh };

		x = (struct expect){ .ev = both, .n = 2 };
		assert_int_equal(store_each_event_after(st, 0, check_event, &x, &last), 0);
		assert_int_equal(x.seen, 2);
	}
	assert_int_equal(q_int(path, "SELECT count(*) FROM events WHERE kind = 'hot'"
	                       " AND capture IS NULL AND details IS NULL"), 1);
	store_close(st);
}

/* A v2 database (before events said where they come from): its events
 * have no origin, no kind but "hot", no capture, no details. */
static void test_migrates_v2(void **state)
{
	struct fixture *fx = *state;
	struct store_event old = make_event(1000, frames_a1, 3);

	old.nspid = 0;
	old.cgroup = old.unit = NULL;
	old.kind = old.capture = old.details = NULL;
	check_migrates(fx->path, DROP_V4 " ALTER TABLE events DROP COLUMN nspid;"
	               " ALTER TABLE events DROP COLUMN cgroup; ALTER TABLE events DROP COLUMN unit;"
	               " PRAGMA user_version = 2; PRAGMA wal_checkpoint(TRUNCATE);", old, 2);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events WHERE nspid IS NULL"
	                       " AND cgroup IS NULL AND unit IS NULL"), 1);
}

/* A v3 database (before kinds): its events are "hot", with no capture and
 * no details. */
static void test_migrates_v3(void **state)
{
	struct fixture *fx = *state;
	struct store_event old = make_event(1000, frames_a1, 3);

	old.kind = old.capture = old.details = NULL;
	check_migrates(fx->path, DROP_V4 " PRAGMA user_version = 3; PRAGMA wal_checkpoint(TRUNCATE);",
	               old, 3);
}

/* details that is not a JSON object (a hand-edited or damaged file) is read
 * as none: readers print it inside their own JSON. */
static void test_details_not_json(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1000, frames_a1, 3), exp = ev;
	struct expect x = { .ev = &exp, .n = 1 };
	int64_t last = 0;

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	exp.id = ev.id;
	exp.details = NULL;
	for (int i = 0; i < 2; i++) {
		q_exec(fx->path, i == 0 ? "UPDATE events SET details = '{\"a\":'"
		                        : "UPDATE events SET details = '[1,2]'");
		x.seen = 0;
		assert_int_equal(store_each_event_after(st, 0, check_event, &x, &last), 0);
		assert_int_equal(x.seen, 1);
	}
	store_close(st);
}

/* Retention: old events go, then the stacks nothing refers to, and the
 * file gives the pages back. */
static void test_prune_by_age(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event a = make_event(1000, frames_a1, 3);
	struct stackdump_stack b = { .frames = frames_b, .nframes = 2, .hash = HASH_B };
	struct store_event eb = make_event(2000, frames_b, 2);
	int deleted = -1;
	bool more = true;

	eb.stack = b;
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &a), 0);     /* t=1000, stack A */
	assert_int_equal(store_add_event(st, &eb), 0);    /* t=2000, stack B */
	a.time_us = 3000;
	assert_int_equal(store_add_event(st, &a), 0);     /* t=3000, stack A */
	assert_int_equal(store_commit(st), 0);

	assert_int_equal(store_prune(st, 2500, 0, 100, &deleted, &more), 0);
	assert_int_equal(deleted, 2);
	assert_false(more);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events"), 1);
	/* B is referenced by nothing now; A still is. */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stacks"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stack_frames"), 3);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_stacks"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_frames"), 3);
	assert_int_equal(q_int(fx->path, "PRAGMA auto_vacuum"), 2);   /* incremental */

	/* A batch limit leaves work for the next call. */
	assert_int_equal(store_prune(st, 4000, 0, 1, &deleted, &more), 0);
	assert_int_equal(deleted, 1);
	assert_true(more);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stacks"), 0);
	store_close(st);
}

static void test_prune_by_size(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1000, frames_a1, 3);
	char exe[2048];
	uint64_t size = 0, before;
	int deleted, rounds = 0;
	bool more = true;

	memset(exe, 'x', sizeof exe - 1);
	exe[sizeof exe - 1] = '\0';
	ev.exe = exe;                             /* 2 KiB an event */
	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < 500; i++) {
		ev.time_us = 1000 + i;
		assert_int_equal(store_add_event(st, &ev), 0);
	}
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(store_size(st, &before), 0);
	assert_true(before > 1000 * 1000);
	while (more && rounds++ < 100)
		assert_int_equal(store_prune(st, 0, 256 * 1024, 100, &deleted, &more), 0);
	assert_false(more);
	assert_int_equal(store_size(st, &size), 0);
	assert_true(size <= 256 * 1024);
	/* The newest stay. */
	assert_int_equal(q_int(fx->path, "SELECT max(time) FROM events"), 1499);
	/* Some 50 of the 2 KiB events fit beside the tables' other pages. */
	assert_true(q_int(fx->path, "SELECT count(*) FROM events") > 20);
	store_close(st);
}

static void test_open_creates_dir_and_file(void **state)
{
	struct fixture *fx = *state;
	char wal[256], mode[16];
	struct store *st;
	mode_t old = umask(077);     /* the modes must not depend on it */

	st = open_rw(fx->path);
	umask(old);
	assert_int_equal(file_mode(fx->sub), 0750);
	assert_int_equal(file_mode(fx->path), 0640);
	snprintf(wal, sizeof wal, "%s-wal", fx->path);
	assert_int_equal(file_mode(wal), 0640);
	assert_int_equal(q_int(fx->path, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
	q_text(fx->path, "PRAGMA journal_mode", mode, sizeof mode);
	assert_string_equal(mode, "wal");
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"
	                       " AND name IN ('stacks', 'stack_frames', 'events', 'event_frames')"), 4);
	assert_string_equal(store_error(st), "");
	store_close(st);

	/* Reopening an existing database keeps it. */
	st = open_rw(fx->path);
	assert_int_equal(q_int(fx->path, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
	store_close(st);
}

static void test_missing_grandparent_is_an_error(void **state)
{
	struct fixture *fx = *state;
	struct store *st = (struct store *)&st;
	char path[256], err[512];

	snprintf(path, sizeof path, "%s/no/such/log.db", fx->dir);
	assert_int_equal(store_open(path, true, &st, err, sizeof err), -ENOENT);
	assert_null(st);
	assert_non_null(strstr(err, "cannot create directory"));
	assert_non_null(strstr(err, path));
	snprintf(path, sizeof path, "%s/no", fx->dir);
	assert_false(exists(path));
}

static void test_round_trip(void **state)
{
	struct fixture *fx = *state;
	struct store_event ev[3];
	struct expect x = { .ev = ev, .n = 3 };
	struct store *st = open_rw(fx->path);
	int64_t last = -1;

	ev[0] = make_event(1795957445000001, frames_a1, 3);
	ev[1] = make_event(1795957448000002, frames_a2, 3);
	ev[1].tid = 4251;
	ev[1].thread = "worker-4";
	ev[1].exe = NULL;                        /* read back as "" */
	ev[2] = make_event(1795957449000003, NULL, 0);
	ev[2].error = "tid 4252 exited";
	ev[2].tid = 4252;
	ev[2].stack.stop_ns = 0;

	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(store_add_event(st, &ev[i]), 0);
	assert_int_equal(store_commit(st), 0);
	assert_true(ev[0].id > 0 && ev[1].id > ev[0].id && ev[2].id > ev[1].id);

	assert_int_equal(store_each_event_after(st, 0, check_event, &x, &last), 0);
	assert_int_equal(x.seen, 3);
	assert_int_equal(last, ev[2].id);

	/* One stack for both samples; the frameless event stores none. */
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stacks"), 1);
	assert_int_equal(q_int(fx->path, "SELECT times_seen FROM stacks"), 2);
	assert_true((uint64_t)q_int(fx->path, "SELECT hash FROM stacks") == HASH_A);
	assert_int_equal(q_int(fx->path, "SELECT first_seen FROM stacks"), ev[0].time_us);
	assert_int_equal(q_int(fx->path, "SELECT last_seen FROM stacks"), ev[1].time_us);
	assert_int_equal(q_int(fx->path, "SELECT nframes FROM stacks"), 3);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stack_frames"), 3);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_frames"), 6);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events WHERE stack_hash IS NULL"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events WHERE exe IS NULL"), 1);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_frames"
	                       " WHERE symbol_offset IS NULL"), 2);
	assert_int_equal(q_int(fx->path, "SELECT stop_us FROM events WHERE stack_hash IS NOT NULL"
	                       " LIMIT 1"), 43);

	/* Only events after an id. */
	x = (struct expect){ .ev = ev + 2, .n = 1 };
	assert_int_equal(store_each_event_after(st, ev[1].id, check_event, &x, &last), 0);
	assert_int_equal(x.seen, 1);
	/* None after the last: *last_id unchanged. */
	last = 12345;
	x = (struct expect){ .ev = ev, .n = 0 };
	assert_int_equal(store_each_event_after(st, ev[2].id, check_event, &x, &last), 0);
	assert_int_equal(last, 12345);
	/* The callback's non-zero return stops the walk. */
	x = (struct expect){ .ev = ev, .n = 3, .stop_after = 1 };
	assert_int_equal(store_each_event_after(st, 0, check_event, &x, &last), 7);
	assert_int_equal(x.seen, 1);
	assert_int_equal(last, ev[0].id);
	store_close(st);
}

static void test_many_events_in_batches(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	int64_t last = 0, after = -1;
	int n = 0;

	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < 300; i++) {
		struct store_event ev = make_event(1795957445000000 + i, frames_a1, 3);

		assert_int_equal(store_add_event(st, &ev), 0);
	}
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(store_each_event_after(st, 0, count_event, &n, &last), 0);
	assert_int_equal(n, 300);
	assert_int_equal(last, 300);
	assert_int_equal(q_int(fx->path, "SELECT times_seen FROM stacks"), 300);
	assert_int_equal(store_id_before_last(st, 10, &after), 0);
	n = 0;
	assert_int_equal(store_each_event_after(st, after, count_event, &n, &last), 0);
	assert_int_equal(n, 10);
	store_close(st);
}

static void test_id_before_last(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	int64_t ids[5], after = -1;

	assert_int_equal(store_id_before_last(st, 3, &after), 0);
	assert_int_equal(after, 0);
	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < 5; i++) {
		struct store_event ev = make_event(1795957445000000 + i, NULL, 0);

		assert_int_equal(store_add_event(st, &ev), 0);
		ids[i] = ev.id;
	}
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(store_id_before_last(st, 2, &after), 0);
	assert_int_equal(after, ids[2]);
	assert_int_equal(store_id_before_last(st, 4, &after), 0);
	assert_int_equal(after, ids[0]);
	assert_int_equal(store_id_before_last(st, 5, &after), 0);
	assert_int_equal(after, 0);
	assert_int_equal(store_id_before_last(st, 100, &after), 0);
	assert_int_equal(after, 0);
	assert_int_equal(store_id_before_last(st, 0, &after), 0);
	assert_int_equal(after, ids[4]);
	assert_true(store_id_before_last(st, -1, &after) < 0);
	store_close(st);
}

static void test_read_only(void **state)
{
	struct fixture *fx = *state;
	struct store *w = open_rw(fx->path), *r = NULL;
	struct store_event ev = make_event(1795957445000000, frames_a1, 3);
	struct expect x = { .ev = &ev, .n = 1 };
	int64_t last = 0;
	char err[512];

	assert_int_equal(store_begin(w), 0);
	assert_int_equal(store_add_event(w, &ev), 0);
	assert_int_equal(store_commit(w), 0);

	/* While the writer is open ... */
	assert_int_equal(store_open(fx->path, false, &r, err, sizeof err), 0);
	assert_int_equal(store_each_event_after(r, 0, check_event, &x, &last), 0);
	assert_int_equal(x.seen, 1);
	assert_int_equal(store_begin(r), -EROFS);
	assert_non_null(strstr(store_error(r), "read-only"));
	store_close(r);
	store_close(w);

	/* ... and after it closed. */
	x.seen = 0;
	assert_int_equal(store_open(fx->path, false, &r, err, sizeof err), 0);
	assert_int_equal(store_each_event_after(r, 0, check_event, &x, &last), 0);
	assert_int_equal(x.seen, 1);
	store_close(r);
}

static void test_read_only_missing(void **state)
{
	struct fixture *fx = *state;
	struct store *st = NULL;
	char err[512], want[300];

	assert_int_equal(store_open(fx->path, false, &st, err, sizeof err), -ENOENT);
	assert_null(st);
	snprintf(want, sizeof want, "database %s does not exist", fx->path);
	assert_string_equal(err, want);
	assert_false(exists(fx->path));
	assert_false(exists(fx->sub));
}

/* PATH must be refused both ways, its bytes unchanged and no side files. */
static void assert_refused(const char *path, const char *words)
{
	static char before[65536], after[65536];
	struct store *st = NULL;
	char err[512], side[300];
	size_t n = slurp(path, before, sizeof before);

	for (int writable = 1; writable >= 0; writable--) {
		assert_true(store_open(path, writable, &st, err, sizeof err) < 0);
		assert_null(st);
		if (!strstr(err, words))
			fail_msg("\"%s\" does not say \"%s\"", err, words);
		assert_non_null(strstr(err, path));
		assert_int_equal(slurp(path, after, sizeof after), n);
		assert_memory_equal(before, after, n);
		snprintf(side, sizeof side, "%s-wal", path);
		assert_false(exists(side));
		snprintf(side, sizeof side, "%s-journal", path);
		assert_false(exists(side));
	}
	assert_int_equal(file_mode(path) & 0777, 0600);
}

static void test_garbage_refused(void **state)
{
	struct fixture *fx = *state;
	char buf[8192];
	int fd;

	assert_int_equal(mkdir(fx->sub, 0700), 0);
	fd = open(fx->path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (char)(i * 7 + 3);
	assert_int_equal(write(fd, buf, sizeof buf), sizeof buf);
	assert_int_equal(close(fd), 0);
	assert_refused(fx->path, "not a SQLite database");
}

static void test_newer_schema_refused(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(mkdir(fx->sub, 0700), 0);
	close(open(fx->path, O_WRONLY | O_CREAT | O_EXCL, 0600));
	q_exec(fx->path, "CREATE TABLE future (x); INSERT INTO future VALUES (1);"
	                 " PRAGMA user_version = 99;");
	assert_refused(fx->path, "schema version 99 is newer");
}

static void test_foreign_database_refused(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(mkdir(fx->sub, 0700), 0);
	close(open(fx->path, O_WRONLY | O_CREAT | O_EXCL, 0600));
	q_exec(fx->path, "CREATE TABLE events (x); INSERT INTO events VALUES (1);");
	assert_refused(fx->path, "no cpumond schema version");
}

static void test_add_outside_transaction(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1795957445000000, frames_a1, 3);

	assert_int_equal(store_add_event(st, &ev), -EINVAL);
	assert_non_null(strstr(store_error(st), "no transaction"));
	assert_int_equal(store_commit(st), -EINVAL);
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_begin(st), -EINVAL);
	/* Frames without a hash are refused before anything is written. */
	ev.stack.hash = 0;
	assert_int_equal(store_add_event(st, &ev), -EINVAL);
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM events"), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stacks"), 0);
	store_close(st);
}

/* An event that fails half-way is undone alone; the cycle's others commit. */
static void test_failed_event_undone_alone(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event good = make_event(1795957445000000, NULL, 0);
	struct store_event bad = make_event(1795957446000000, frames_a1, 3);
	int64_t last = 0;
	int n = 0;

	/* An orphan frame row makes the new stack's frame 0 collide. */
	q_exec(fx->path, "INSERT INTO stack_frames VALUES (-81985529216486896, 0, 'x', '', 0, NULL)");
	bad.stack.hash = 0xfedcba9876543210ULL;
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &good), 0);
	assert_true(store_add_event(st, &bad) < 0);
	assert_non_null(strstr(store_error(st), "cannot add stack frame"));
	assert_int_equal(store_add_event(st, &good), 0);
	assert_int_equal(store_commit(st), 0);
	assert_int_equal(store_each_event_after(st, 0, count_event, &n, &last), 0);
	assert_int_equal(n, 2);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM stacks"), 0);
	assert_int_equal(q_int(fx->path, "SELECT count(*) FROM event_frames"), 0);
	store_close(st);
}

/* A commit that cannot be written (here: RLIMIT_FSIZE makes the WAL write
 * short, which SQLite reports as SQLITE_FULL) loses the cycle and nothing
 * else: the database stays consistent and usable. */
static void test_commit_failure_rolls_back(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1795957445000000, frames_a1, 3);
	struct rlimit old, small;
	char wal[256], check[32];
	static char big[256 * 1024];
	int64_t last = 0;
	struct stat sb;
	int n = 0, e;

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);

	memset(big, 'x', sizeof big - 1);
	ev.exe = big;
	snprintf(wal, sizeof wal, "%s-wal", fx->path);
	assert_int_equal(stat(wal, &sb), 0);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = (rlim_t)sb.st_size + 16384;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);    /* still in the page cache */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	e = store_commit(st);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_true(e < 0);
	if (!strstr(store_error(st), "cannot commit"))
		fail_msg("unexpected error %d: %s", e, store_error(st));

	/* The failed cycle left nothing; the next one works. */
	assert_int_equal(store_each_event_after(st, 0, count_event, &n, &last), 0);
	assert_int_equal(n, 1);
	ev.exe = "/usr/sbin/nginx";
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	n = 0;
	assert_int_equal(store_each_event_after(st, 0, count_event, &n, &last), 0);
	assert_int_equal(n, 2);
	store_close(st);
	q_text(fx->path, "PRAGMA integrity_check", check, sizeof check);
	assert_string_equal(check, "ok");
	assert_int_equal(q_int(fx->path, "SELECT times_seen FROM stacks"), 2);
}

/* Ids are never reused, even when retention deleted every event: a reader
 * that follows "id > last" must see new events. */
static void test_ids_not_reused(void **state)
{
	struct fixture *fx = *state;
	struct store *st = open_rw(fx->path);
	struct store_event ev = make_event(1795957445000000, NULL, 0);
	int64_t first;

	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	first = ev.id;
	q_exec(fx->path, "DELETE FROM events");
	assert_int_equal(store_begin(st), 0);
	assert_int_equal(store_add_event(st, &ev), 0);
	assert_int_equal(store_commit(st), 0);
	assert_true(ev.id > first);
	store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_open_creates_dir_and_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_grandparent_is_an_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_events_in_batches, setup, teardown),
		cmocka_unit_test_setup_teardown(test_id_before_last, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_only_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_database_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_outside_transaction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_event_undone_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_failure_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ids_not_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_episode_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrates_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrates_v2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migrates_v3, setup, teardown),
		cmocka_unit_test_setup_teardown(test_details_not_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_by_age, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_by_size, setup, teardown),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
