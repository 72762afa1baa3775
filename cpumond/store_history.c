/* The usage history of the log database (schema v5, store.c): its writer,
 * store_add_cycle with the cache of label ids, and its two readers. */
#include "cpumond/store.h"
#include "cpumond/store_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows copied per read transaction by store_each_usage_in (see
 * STORE_BATCH in store_read.c for why the walkers copy). */
#define USAGE_BATCH 256

static const char sql_put_cycle[] =
	"INSERT INTO cycles (time, interval, threads) VALUES (?1, ?2, ?3)";
static const char sql_put_label[] =
	"INSERT INTO labels (watch, pid, comm, thread, threshold, last_seen)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
	" ON CONFLICT (watch, pid, comm, thread, threshold) DO UPDATE"
	" SET last_seen = max(last_seen, excluded.last_seen) RETURNING id";
static const char sql_put_usage[] =
	"INSERT INTO history (cycle, tid, label, usage, run_delay, state, episode)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/* The columns of both readers. */
enum {
	U_CYCLE, U_TIME, U_INTERVAL, U_THREADS, U_TID, U_PID, U_USAGE, U_RUN_DELAY, U_STATE,
	U_THRESHOLD, U_EPISODE, U_WATCH, U_COMM, U_THREAD, U_EVENT, U_STACK, U_SYMBOL,
};
/* The latest cycle, one row with NULL history columns when it kept none;
 * each row with its thread's last event (events_tid) and the innermost
 * frame of that event's key stack that has a symbol. */
static const char sql_latest_cycle[] =
	"SELECT c.id, c.time, c.interval, c.threads, h.tid, n.pid, h.usage, h.run_delay, h.state,"
	" n.threshold, h.episode, n.watch, n.comm, n.thread, x.id, x.stack_hash,"
	" (SELECT sf.symbol FROM stack_frames AS sf WHERE sf.hash = x.stack_hash"
	"  AND sf.symbol <> '' ORDER BY sf.depth LIMIT 1)"
	" FROM (SELECT * FROM cycles ORDER BY id DESC LIMIT 1) AS c"
	" LEFT JOIN history AS h ON h.cycle = c.id"
	" LEFT JOIN labels AS n ON n.id = h.label"
	" LEFT JOIN events AS x ON x.id ="
	"  (SELECT max(e.id) FROM events AS e WHERE e.tid = h.tid AND e.pid = n.pid)"
	" ORDER BY h.usage DESC, h.tid";
/* ?1..?2 the cycle ids to read: the window's (store_each_usage_in finds
 * them by time), from the last batch's cycle on; ?3..?4 after this (cycle,
 * tid); ?5..?6 the window's times again (cycle ids follow the clock unless
 * it stepped back), ?7..?10 the filter, ?11 the batch size.  The range on
 * the key's cycle is what SQLite seeks by (the row value it does not):
 * without the lower bound moving on, each batch scanned the window from
 * its start (a day of history took 24 s to read). */
static const char sql_usage_in[] =
	"SELECT c.id, c.time, c.interval, c.threads, h.tid, n.pid, h.usage, h.run_delay, h.state,"
	" n.threshold, h.episode, n.watch, n.comm, n.thread, 0, 0, NULL"
	" FROM history AS h JOIN cycles AS c ON c.id = h.cycle"
	" LEFT JOIN labels AS n ON n.id = h.label"
	" WHERE h.cycle BETWEEN ?1 AND ?2 AND (h.cycle > ?3 OR h.tid > ?4)"
	" AND (?5 = 0 OR c.time >= ?5) AND (?6 = 0 OR c.time < ?6)"
	" AND (?7 IS NULL OR n.watch = ?7) AND (?8 IS NULL OR n.comm = ?8)"
	" AND (?9 IS NULL OR n.thread = ?9) AND (?10 = 0 OR n.pid = ?10)"
	" ORDER BY h.cycle, h.tid LIMIT ?11";

int store_prepare_history(struct store *st, int64_t version)
{
	int e;

	if (version < 5 && !st->writable)
		return 0;        /* an older file read as it is: no history */
	if (st->writable &&
	    ((e = store_prepare(st, sql_put_cycle, &st->put_cycle)) < 0 ||
	     (e = store_prepare(st, sql_put_label, &st->put_label)) < 0 ||
	     (e = store_prepare(st, sql_put_usage, &st->put_usage)) < 0))
		return e;
	if ((e = store_prepare(st, sql_latest_cycle, &st->latest_cycle)) < 0 ||
	    (e = store_prepare(st, sql_usage_in, &st->usage_in)) < 0)
		return e;
	return 0;
}

void store_forget_labels(struct store *st)
{
	if (!st->labels)
		return;
	for (size_t i = 0; i < STORE_LABEL_SLOTS; i++)
		free(st->labels[i].key);
	free(st->labels);
	st->labels = NULL;
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* The label of U (watch, pid, comm, thread, threshold) as one string,
 * each name after its length, so that no bytes of a name can make two
 * labels alike. */
static char *label_key(const struct store_usage *u)
{
	const char *w = or_empty(u->watch), *c = or_empty(u->comm), *t = or_empty(u->thread);
	char *key = NULL;

	if (asprintf(&key, "%d %d %zu:%s%zu:%s%zu:%s", (int)u->pid, u->threshold, strlen(w), w,
	             strlen(c), c, strlen(t), t) < 0)
		return NULL;
	return key;
}

static size_t label_slot(const char *key)
{
	uint64_t h = 0xcbf29ce484222325ULL;      /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return (size_t)(h % STORE_LABEL_SLOTS);
}

/* The labels id of U, from the cache or from the upsert, which
 * also refreshes last_seen to TIME_US. */
static int label_id(struct store *st, const struct store_usage *u, int64_t time_us, int64_t *id)
{
	struct binder b = { .s = st->put_label };
	struct store_label_slot *slot;
	char *key = label_key(u);
	int rc, e;

	if (!key || (!st->labels && !(st->labels = calloc(STORE_LABEL_SLOTS, sizeof *st->labels)))) {
		free(key);
		store_set_error(st, "cannot add history: out of memory");
		return -ENOMEM;
	}
	slot = &st->labels[label_slot(key)];
	if (slot->key && strcmp(slot->key, key) == 0 &&
	    time_us - slot->refreshed_us < STORE_LABEL_REFRESH_US && time_us >= slot->refreshed_us) {
		free(key);
		*id = slot->id;
		return 0;
	}
	bind_text(&b, or_empty(u->watch));
	bind_i64(&b, u->pid);
	bind_text(&b, or_empty(u->comm));
	bind_text(&b, or_empty(u->thread));
	bind_i64(&b, u->threshold);
	bind_i64(&b, time_us);
	if ((e = bind_done(st, &b, "cannot add a history label")) < 0) {
		free(key);
		return e;
	}
	*id = 0;
	while ((rc = sqlite3_step(st->put_label)) == SQLITE_ROW)
		*id = sqlite3_column_int64(st->put_label, 0);
	e = rc == SQLITE_DONE ? 0 : store_sql_fail(st, rc, "cannot add a history label");
	(void)sqlite3_reset(st->put_label);       /* repeats the error just recorded */
	(void)sqlite3_clear_bindings(st->put_label);
	if (e < 0) {
		free(key);
		return e;
	}
	free(slot->key);
	*slot = (struct store_label_slot){ key, *id, time_us };
	return 0;
}

static int put_usage(struct store *st, int64_t cycle, int64_t time_us, const struct store_usage *u)
{
	struct binder b = { .s = st->put_usage };
	int64_t label;
	int e;

	if ((e = label_id(st, u, time_us, &label)) < 0)
		return e;
	bind_i64(&b, cycle);
	bind_i64(&b, u->tid);
	bind_i64(&b, label);
	bind_i64(&b, u->usage);
	bind_i64(&b, u->run_delay);
	bind_i64(&b, (unsigned char)(u->state ? u->state : '?'));
	bind_i64(&b, u->episode);
	if ((e = bind_done(st, &b, "cannot add history")) < 0)
		return e;
	return store_run(st, st->put_usage, "cannot add history");
}

static int put_cycle(struct store *st, struct store_cycle *c, const struct store_usage *rows,
                     size_t n)
{
	struct binder b = { .s = st->put_cycle };
	int e;

	bind_i64(&b, c->time_us);
	bind_i64(&b, c->interval_ms);
	bind_i64(&b, c->threads);
	if ((e = bind_done(st, &b, "cannot add a history cycle")) < 0 ||
	    (e = store_run(st, st->put_cycle, "cannot add a history cycle")) < 0)
		return e;
	c->id = sqlite3_last_insert_rowid(st->db);
	for (size_t i = 0; i < n; i++)
		if ((e = put_usage(st, c->id, c->time_us, &rows[i])) < 0)
			return e;
	return 0;
}

int store_add_cycle(struct store *st, struct store_cycle *c, const struct store_usage *rows,
                    size_t n)
{
	char saved[sizeof st->err];
	int e;

	if (!st->in_tx) {
		store_set_error(st, "cannot add history: no transaction open (call store_begin first)");
		return -EINVAL;
	}
	if (st->tx_failed < 0) {
		store_set_error(st, "cannot add history: the transaction was rolled back after an "
		                "earlier error");
		return st->tx_failed;
	}
	if ((e = store_run(st, st->savepoint, "cannot add history")) < 0) {
		store_note_tx_state(st, e);
		return e;
	}
	e = put_cycle(st, c, rows, n);
	if (e == 0 && (e = store_run(st, st->release, "cannot add history")) == 0)
		return 0;
	memcpy(saved, st->err, sizeof saved);
	if (!sqlite3_get_autocommit(st->db) && store_run(st, st->rollback_to, "rollback") == 0)
		(void)store_run(st, st->release, "release");
	memcpy(st->err, saved, sizeof saved);
	/* The ids cached meanwhile may name rows that were just undone. */
	store_forget_labels(st);
	store_note_tx_state(st, e);
	c->id = 0;
	return e;
}

/* Rows copied out of the database, with their strings. */
struct usage_rec {
	struct store_usage u;
	char *watch, *comm, *thread, *symbol;
};

static void usage_rec_free(struct usage_rec *r)
{
	free(r->watch);
	free(r->comm);
	free(r->thread);
	free(r->symbol);
	memset(r, 0, sizeof *r);
}

static void read_cycle(sqlite3_stmt *s, struct store_cycle *c)
{
	c->id = sqlite3_column_int64(s, U_CYCLE);
	c->time_us = sqlite3_column_int64(s, U_TIME);
	c->interval_ms = sqlite3_column_int(s, U_INTERVAL);
	c->threads = (unsigned)sqlite3_column_int64(s, U_THREADS);
}

static int usage_rec_read(struct usage_rec *r, sqlite3_stmt *s)
{
	struct store_usage *u = &r->u;
	int state = sqlite3_column_int(s, U_STATE);

	memset(r, 0, sizeof *r);
	u->cycle = sqlite3_column_int64(s, U_CYCLE);
	u->time_us = sqlite3_column_int64(s, U_TIME);
	u->interval_ms = sqlite3_column_int(s, U_INTERVAL);
	u->tid = (pid_t)sqlite3_column_int64(s, U_TID);
	u->pid = (pid_t)sqlite3_column_int64(s, U_PID);
	u->usage = sqlite3_column_int(s, U_USAGE);
	u->run_delay = sqlite3_column_int(s, U_RUN_DELAY);
	u->state = state > ' ' && state < 0x7f ? (char)state : '?';
	u->threshold = sqlite3_column_int(s, U_THRESHOLD);
	u->episode = sqlite3_column_int(s, U_EPISODE) != 0;
	u->last_event = sqlite3_column_int64(s, U_EVENT);
	u->last_stack = (uint64_t)sqlite3_column_int64(s, U_STACK);
	r->watch = store_column_dup(s, U_WATCH);
	r->comm = store_column_dup(s, U_COMM);
	r->thread = store_column_dup(s, U_THREAD);
	r->symbol = store_column_dup(s, U_SYMBOL);
	if (!r->watch || !r->comm || !r->thread || !r->symbol)
		return -ENOMEM;
	u->watch = r->watch;
	u->comm = r->comm;
	u->thread = r->thread;
	u->last_symbol = r->symbol;
	return 0;
}

/* Steps S, bound, in a read transaction of its own, copying its rows into
 * *RECS (grown as needed; *CAP its room); the first row's cycle into *C
 * when C is not NULL.  Returns how many rows, or a negative errno. */
static int read_rows(struct store *st, sqlite3_stmt *s, struct store_cycle *c,
                     struct usage_rec **recs, size_t *cap, const char *what)
{
	size_t n = 0;
	int rc, e;

	if ((e = store_run(st, st->read_begin, what)) < 0) {
		(void)sqlite3_clear_bindings(s);
		return e;
	}
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (c && n == 0 && c->id == 0)
			read_cycle(s, c);
		if (sqlite3_column_type(s, U_TID) == SQLITE_NULL)
			continue;        /* the latest cycle kept no thread */
		if (n == *cap) {
			size_t ncap = *cap ? 2 * *cap : 16;
			struct usage_rec *r = reallocarray(*recs, ncap, sizeof *r);

			if (!r) {
				e = -ENOMEM;
				break;
			}
			*recs = r;
			*cap = ncap;
		}
		e = usage_rec_read(&(*recs)[n++], s);
		if (e < 0)
			break;
	}
	if (e == -ENOMEM)
		store_set_error(st, "%s: out of memory", what);
	else if (rc != SQLITE_DONE)
		e = store_sql_fail(st, rc, what);
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = store_sql_fail(st, rc, what);
	(void)sqlite3_clear_bindings(s);
	rc = store_run(st, st->read_end, what);
	if (rc < 0 && e == 0)
		e = rc;
	if (e < 0) {
		for (size_t i = 0; i < n; i++)
			usage_rec_free(&(*recs)[i]);
		return e;
	}
	return (int)n;
}

/* Passes the N rows of RECS to FN until it returns non-zero, and frees
 * them all. */
static int pass_rows(struct usage_rec *recs, int n, store_usage_fn fn, void *ctx)
{
	int ret = 0;

	for (int i = 0; i < n; i++) {
		if (ret == 0)
			ret = fn(&recs[i].u, ctx);
		usage_rec_free(&recs[i]);
	}
	return ret;
}

int store_latest_cycle(struct store *st, struct store_cycle *c, store_usage_fn fn, void *ctx)
{
	struct usage_rec *recs = NULL;
	size_t cap = 0;
	int n, ret;

	memset(c, 0, sizeof *c);
	if (!st->latest_cycle)
		return 0;
	n = read_rows(st, st->latest_cycle, c, &recs, &cap, "cannot read the latest cycle");
	ret = n < 0 ? n : pass_rows(recs, n, fn, ctx);
	free(recs);
	return ret;
}

/* The cycle id of the first cycle at or after SINCE_US (MIN: 0), or of the
 * last before UNTIL_US (!MIN: INT64_MAX when open).  *ID gets 0 or -1
 * when there is none. */
static int window_end(struct store *st, int64_t t_us, bool min, int64_t *id)
{
	char sql[256];

	if (t_us == 0) {
		*id = min ? 0 : INT64_MAX;
		return 0;
	}
	snprintf(sql, sizeof sql, min ?
	         "SELECT coalesce((SELECT id FROM cycles WHERE time >= %lld"
	         " ORDER BY time, id LIMIT 1), 0)" :
	         "SELECT coalesce((SELECT id FROM cycles WHERE time < %lld"
	         " ORDER BY time DESC, id DESC LIMIT 1), -1)", (long long)t_us);
	return store_query_one(st, sql, "cannot read the history", id, NULL, 0);
}

int store_each_usage_in(struct store *st, const struct store_filter *f, store_usage_fn fn,
                        void *ctx)
{
	struct usage_rec *recs = NULL;
	int64_t lo, hi, after_cycle = 0, after_tid = 0;
	size_t cap = 0;
	int n, ret = 0;

	if (!st->usage_in)
		return 0;
	if ((ret = window_end(st, f->since_us, true, &lo)) < 0 ||
	    (ret = window_end(st, f->until_us, false, &hi)) < 0)
		return ret;
	if (lo == 0 && f->since_us)
		return 0;        /* no cycle since then */
	do {
		struct binder b = { .s = st->usage_in };

		bind_i64(&b, after_cycle > lo ? after_cycle : lo);
		bind_i64(&b, hi);
		bind_i64(&b, after_cycle);
		bind_i64(&b, after_tid);
		bind_i64(&b, f->since_us);
		bind_i64(&b, f->until_us);
		bind_text(&b, f->watch);
		bind_text(&b, f->comm);
		bind_text(&b, f->thread);
		bind_i64(&b, f->pid);
		bind_i64(&b, USAGE_BATCH);
		if ((ret = bind_done(st, &b, "cannot read the history")) < 0)
			break;
		n = read_rows(st, st->usage_in, NULL, &recs, &cap, "cannot read the history");
		if (n < 0) {
			ret = n;
			break;
		}
		if (n > 0) {
			after_cycle = recs[n - 1].u.cycle;
			after_tid = recs[n - 1].u.tid;
		}
		ret = pass_rows(recs, n, fn, ctx);
	} while (ret == 0 && n == USAGE_BATCH);
	free(recs);
	return ret;
}
