#include "cpumond/store.h"
#include "cpumond/store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events read per read transaction: the walker copies a batch, ends the read
 * and only then calls back, so a slow consumer (a paused pager) never holds
 * a read transaction open, which would keep the writer's checkpoints from
 * recycling the WAL. */
#define STORE_BATCH 64

/* One row per frame (one row with NULL frame columns for an event without
 * frames), events in id order, frames innermost first. */
enum {
	COL_ID, COL_TIME, COL_HOST, COL_WATCH, COL_PID, COL_COMM, COL_EXE, COL_TID, COL_THREAD,
	COL_USAGE, COL_THRESHOLD, COL_CONSECUTIVE, COL_RUN_DELAY, COL_STOP_US, COL_STACK_HASH,
	COL_ERROR, COL_SAMPLES, COL_STOP_MAX_US, COL_EPISODE_END, COL_NSPID, COL_CGROUP,
	COL_UNIT, COL_KIND, COL_CAPTURE, COL_DETAILS, COL_TRUNCATED, COL_DEPTH,
	COL_IP, COL_OFFSET, COL_SYMBOL_OFFSET, COL_MODULE, COL_BUILD_ID, COL_FUNC_OFFSET,
	COL_SYMBOL,
};
/* ?1 after id, ?2 batch size, ?3..?9 the store_filter (0 / NULL: any).
 * ORIGIN: the columns COL_NSPID, COL_CGROUP, COL_UNIT; KIND: the kind
 * column (or what stands for it); NEWER: the columns COL_CAPTURE and
 * COL_DETAILS (details only when it is valid JSON: readers print it as it
 * is inside their own JSON). */
#define SQL_EVENTS_AFTER(ORIGIN, KIND, NEWER) \
	"SELECT e.id, e.time, e.host, e.watch, e.pid, e.comm, e.exe, e.tid, e.thread, e.usage," \
	" e.threshold, e.consecutive, e.run_delay, e.stop_us, e.stack_hash, e.error, e.samples," \
	" e.stop_max_us, e.episode_end, " ORIGIN ", e.kind_, " NEWER ", s.truncated," \
	" f.depth, f.ip, f.offset, f.symbol_offset, sf.module, sf.build_id, sf.func_offset," \
	" sf.symbol" \
	" FROM (SELECT *, " KIND " AS kind_ FROM events WHERE id > ?1" \
	"  AND (?3 = 0 OR time >= ?3) AND (?4 = 0 OR time < ?4)" \
	"  AND (?5 IS NULL OR watch = ?5) AND (?6 IS NULL OR comm = ?6)" \
	"  AND (?7 IS NULL OR thread = ?7) AND (?8 = 0 OR pid = ?8)" \
	"  AND (?9 IS NULL OR " KIND " = ?9)" \
	"  ORDER BY id LIMIT ?2) AS e" \
	" LEFT JOIN stacks AS s ON s.hash = e.stack_hash" \
	" LEFT JOIN event_frames AS f ON f.event_id = e.id" \
	" LEFT JOIN stack_frames AS sf ON sf.hash = e.stack_hash AND sf.depth = f.depth" \
	" ORDER BY e.id, f.depth"
static const char sql_events_after[] =
	SQL_EVENTS_AFTER("e.nspid, e.cgroup, e.unit", "kind",
	                 "e.capture, CASE WHEN json_valid(e.details) AND json_type(e.details) = 'object'"
	                 " THEN e.details END");
/* An older file that a reader may not migrate (a copy from a host with an
 * older cpumond, or the file of an older daemon still running) is read as
 * it is: a version-3 file's events are all "hot" with no capture or details
 * recorded, a version-2 file's have no origin either. */
static const char sql_events_after_v3[] =
	SQL_EVENTS_AFTER("e.nspid, e.cgroup, e.unit", "'hot'", "NULL, NULL");
static const char sql_events_after_v2[] =
	SQL_EVENTS_AFTER("NULL, NULL, NULL", "'hot'", "NULL, NULL");
static const char sql_event_stacks[] =
	"SELECT event_id, stack_hash, count FROM event_stacks"
	" WHERE event_id BETWEEN ?1 AND ?2 ORDER BY event_id, count DESC, stack_hash";
static const char sql_stack_frames[] =
	"SELECT s.truncated, f.module, f.build_id, f.func_offset, f.symbol"
	" FROM stacks AS s JOIN stack_frames AS f ON f.hash = s.hash"
	" WHERE s.hash = ?1 ORDER BY f.depth";
static const char sql_id_before_last[] =
	"SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1";

int store_prepare_read(struct store *st, int64_t version)
{
	int e;

	const char *events_after = sql_events_after;

	if (!st->writable && version == 2)
		events_after = sql_events_after_v2;
	else if (!st->writable && version == 3)
		events_after = sql_events_after_v3;
	if ((e = store_prepare(st, events_after, &st->events_after)) < 0 ||
	    (e = store_prepare(st, sql_event_stacks, &st->event_stacks)) < 0 ||
	    (e = store_prepare(st, sql_stack_frames, &st->stack_frames)) < 0 ||
	    (e = store_prepare(st, "BEGIN", &st->read_begin)) < 0 ||
	    (e = store_prepare(st, "COMMIT", &st->read_end)) < 0 ||
	    (e = store_prepare(st, sql_id_before_last, &st->id_before_last)) < 0)
		return e;
	return 0;
}

/* A batch of events copied out of the database. */
struct rec {
	struct store_event ev;
	char *host, *watch, *comm, *exe, *thread, *error, *episode_end, *cgroup, *unit, *kind,
	     *capture, *details;
	size_t cap;              /* frames allocated */
	struct store_stack_count *counts;
	size_t counts_cap;
};

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < r->ev.stack.nframes; i++) {
		free(r->ev.stack.frames[i].module);
		free(r->ev.stack.frames[i].build_id);
		free(r->ev.stack.frames[i].symbol);
	}
	free(r->ev.stack.frames);
	free(r->host);
	free(r->watch);
	free(r->comm);
	free(r->exe);
	free(r->thread);
	free(r->error);
	free(r->episode_end);
	free(r->cgroup);
	free(r->unit);
	free(r->kind);
	free(r->capture);
	free(r->details);
	free(r->counts);
	memset(r, 0, sizeof *r);
}

static int rec_start(struct rec *r, sqlite3_stmt *s)
{
	struct store_event *ev = &r->ev;

	memset(r, 0, sizeof *r);
	ev->id = sqlite3_column_int64(s, COL_ID);
	ev->time_us = sqlite3_column_int64(s, COL_TIME);
	ev->pid = (pid_t)sqlite3_column_int64(s, COL_PID);
	ev->tid = (pid_t)sqlite3_column_int64(s, COL_TID);
	ev->usage = sqlite3_column_int(s, COL_USAGE);
	ev->threshold = sqlite3_column_int(s, COL_THRESHOLD);
	ev->consecutive = sqlite3_column_int(s, COL_CONSECUTIVE);
	ev->run_delay = sqlite3_column_int(s, COL_RUN_DELAY);
	ev->stack.stop_ns = (uint64_t)sqlite3_column_int64(s, COL_STOP_US) * 1000;
	ev->stack.hash = (uint64_t)sqlite3_column_int64(s, COL_STACK_HASH);
	ev->stack.truncated = sqlite3_column_int(s, COL_TRUNCATED) != 0;
	ev->samples = (unsigned)sqlite3_column_int(s, COL_SAMPLES);
	ev->stop_max_ns = (uint64_t)sqlite3_column_int64(s, COL_STOP_MAX_US) * 1000;
	ev->nspid = (pid_t)sqlite3_column_int64(s, COL_NSPID);    /* NULL: 0 */
	r->host = store_column_dup(s, COL_HOST);
	r->watch = store_column_dup(s, COL_WATCH);
	r->comm = store_column_dup(s, COL_COMM);
	r->exe = store_column_dup(s, COL_EXE);
	r->thread = store_column_dup(s, COL_THREAD);
	r->error = store_column_dup(s, COL_ERROR);
	r->episode_end = store_column_dup(s, COL_EPISODE_END);
	r->cgroup = store_column_dup(s, COL_CGROUP);
	r->unit = store_column_dup(s, COL_UNIT);
	r->kind = store_column_dup(s, COL_KIND);
	r->capture = store_column_dup(s, COL_CAPTURE);
	r->details = store_column_dup(s, COL_DETAILS);
	if (!r->host || !r->watch || !r->comm || !r->exe || !r->thread || !r->error ||
	    !r->episode_end || !r->cgroup || !r->unit || !r->kind || !r->capture ||
	    !r->details)
		return -ENOMEM;
	ev->episode_end = r->episode_end;
	ev->host = r->host;
	ev->watch = r->watch;
	ev->comm = r->comm;
	ev->exe = r->exe;
	ev->thread = r->thread;
	ev->error = r->error;
	ev->cgroup = r->cgroup;
	ev->unit = r->unit;
	ev->kind = r->kind;
	ev->capture = r->capture;
	ev->details = r->details;
	snprintf(ev->stack.error, sizeof ev->stack.error, "%s", r->error);
	return 0;
}

static int rec_add_frame(struct rec *r, sqlite3_stmt *s)
{
	struct stackdump_stack *sk = &r->ev.stack;
	struct stackdump_frame *f;

	if (sk->nframes == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct stackdump_frame *fr = reallocarray(sk->frames, cap, sizeof *fr);

		if (!fr)
			return -ENOMEM;
		sk->frames = fr;
		r->cap = cap;
	}
	f = &sk->frames[sk->nframes];
	memset(f, 0, sizeof *f);
	f->ip = (uint64_t)sqlite3_column_int64(s, COL_IP);
	f->offset = (uint64_t)sqlite3_column_int64(s, COL_OFFSET);
	f->symbol_offset = (uint64_t)sqlite3_column_int64(s, COL_SYMBOL_OFFSET);
	f->func_offset = (uint64_t)sqlite3_column_int64(s, COL_FUNC_OFFSET);
	f->module = store_column_dup(s, COL_MODULE);
	f->build_id = store_column_dup(s, COL_BUILD_ID);
	if (sqlite3_column_type(s, COL_SYMBOL) != SQLITE_NULL)
		f->symbol = store_column_dup(s, COL_SYMBOL);
	sk->nframes++;      /* counted now so that rec_free frees it */
	if (!f->module || !f->build_id ||
	    (!f->symbol && sqlite3_column_type(s, COL_SYMBOL) != SQLITE_NULL))
		return -ENOMEM;
	return 0;
}

static int rec_add_count(struct rec *r, uint64_t hash, unsigned count)
{
	if (r->ev.nstacks == r->counts_cap) {
		size_t cap = r->counts_cap ? 2 * r->counts_cap : 4;
		struct store_stack_count *c = reallocarray(r->counts, cap, sizeof *c);

		if (!c)
			return -ENOMEM;
		r->counts = c;
		r->counts_cap = cap;
	}
	r->counts[r->ev.nstacks++] = (struct store_stack_count){ hash, count, NULL };
	r->ev.stacks = r->counts;
	return 0;
}

/* Fills the stack counts of the N events in RECS (ids ascending). */
static int read_counts(struct store *st, struct rec *recs, int n)
{
	sqlite3_stmt *s = st->event_stacks;
	struct binder b = { .s = s };
	int i = 0, rc, e = 0;

	bind_i64(&b, recs[0].ev.id);
	bind_i64(&b, recs[n - 1].ev.id);
	if ((e = bind_done(st, &b, "cannot read event stacks")) < 0)
		return e;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(s, 0);

		/* Filtered batches skip ids: rows of other events pass by. */
		while (i < n && recs[i].ev.id < id)
			i++;
		if (i == n)
			break;
		if (recs[i].ev.id == id &&
		    (e = rec_add_count(&recs[i], (uint64_t)sqlite3_column_int64(s, 1),
		                       (unsigned)sqlite3_column_int(s, 2))) < 0)
			break;
	}
	if (e == -ENOMEM)
		store_set_error(st, "cannot read event stacks: out of memory");
	else if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		e = store_sql_fail(st, rc, "cannot read event stacks");
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = store_sql_fail(st, rc, "cannot read event stacks");
	return e;
}

static void bind_filter(struct binder *b, const struct store_filter *f)
{
	bind_i64(b, f->since_us);
	bind_i64(b, f->until_us);
	bind_text(b, f->watch);
	bind_text(b, f->comm);
	bind_text(b, f->thread);
	bind_i64(b, f->pid);
	bind_text(b, f->kind);
}

/* Reads up to STORE_BATCH events with id > AFTER that match F into RECS,
 * with their stack counts, in one read transaction (one consistent
 * snapshot), and ends it.  Returns how many, or a negative errno. */
static int read_batch(struct store *st, int64_t after, const struct store_filter *f,
                      struct rec *recs)
{
	struct binder b = { .s = st->events_after };
	sqlite3_stmt *s = st->events_after;
	int n = 0, rc, e = 0;

	bind_i64(&b, after);
	bind_i64(&b, STORE_BATCH);
	bind_filter(&b, f);
	if ((e = bind_done(st, &b, "cannot read events")) < 0 ||
	    (e = store_run(st, st->read_begin, "cannot read events")) < 0)
		return e;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(s, COL_ID);

		if (n == 0 || recs[n - 1].ev.id != id) {
			if ((e = rec_start(&recs[n++], s)) < 0)
				break;
		}
		if (sqlite3_column_type(s, COL_DEPTH) != SQLITE_NULL &&
		    (e = rec_add_frame(&recs[n - 1], s)) < 0)
			break;
	}
	if (e == -ENOMEM) {
		store_set_error(st, "cannot read events: out of memory");
	} else if (rc != SQLITE_DONE) {
		e = store_sql_fail(st, rc, "cannot read events");
	}
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = store_sql_fail(st, rc, "cannot read events");
	if (e == 0 && n > 0)
		e = read_counts(st, recs, n);
	/* Ends the read transaction, whatever happened above. */
	rc = store_run(st, st->read_end, "cannot read events");
	if (rc < 0 && e == 0)
		e = rc;
	if (e < 0) {
		for (int i = 0; i < n; i++)
			rec_free(&recs[i]);
		return e;
	}
	return n;
}

static int each_event(struct store *st, int64_t after_id, const struct store_filter *f,
                      store_event_fn fn, void *ctx, int64_t *last_id)
{
	struct rec *recs = calloc(STORE_BATCH, sizeof *recs);
	int n, ret = 0;

	if (!recs) {
		store_set_error(st, "cannot read events: out of memory");
		return -ENOMEM;
	}
	do {
		n = read_batch(st, after_id, f, recs);
		if (n < 0) {
			ret = n;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (ret == 0) {
				ret = fn(&recs[i].ev, ctx);
				after_id = recs[i].ev.id;
				*last_id = after_id;
			}
			rec_free(&recs[i]);
		}
	} while (ret == 0 && n == STORE_BATCH);
	free(recs);
	return ret;
}

int store_each_event_after(struct store *st, int64_t after_id, store_event_fn fn, void *ctx,
                           int64_t *last_id)
{
	const struct store_filter all = { 0 };

	return each_event(st, after_id, &all, fn, ctx, last_id);
}

int store_each_event_in(struct store *st, const struct store_filter *f, store_event_fn fn,
                        void *ctx)
{
	int64_t last = 0;

	return each_event(st, 0, f, fn, ctx, &last);
}

int store_get_stack(struct store *st, uint64_t hash, struct stackdump_stack *out)
{
	sqlite3_stmt *s = st->stack_frames;
	struct binder b = { .s = s };
	struct rec r;
	int rc, e;

	memset(out, 0, sizeof *out);
	memset(&r, 0, sizeof r);
	bind_u64(&b, hash);
	if ((e = bind_done(st, &b, "cannot read a stack")) < 0)
		return e;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct stackdump_frame *f;

		if (r.ev.stack.nframes == r.cap) {
			size_t cap = r.cap ? 2 * r.cap : 16;
			f = reallocarray(r.ev.stack.frames, cap, sizeof *f);
			if (!f) {
				e = -ENOMEM;
				break;
			}
			r.ev.stack.frames = f;
			r.cap = cap;
		}
		f = &r.ev.stack.frames[r.ev.stack.nframes++];
		memset(f, 0, sizeof *f);
		r.ev.stack.truncated = sqlite3_column_int(s, 0) != 0;
		f->module = store_column_dup(s, 1);
		f->build_id = store_column_dup(s, 2);
		f->func_offset = f->offset = f->ip = (uint64_t)sqlite3_column_int64(s, 3);
		if (sqlite3_column_type(s, 4) != SQLITE_NULL && !(f->symbol = store_column_dup(s, 4)))
			e = -ENOMEM;
		if (!f->module || !f->build_id || e < 0) {
			e = -ENOMEM;
			break;
		}
	}
	if (e == -ENOMEM)
		store_set_error(st, "cannot read a stack: out of memory");
	else if (rc != SQLITE_DONE)
		e = store_sql_fail(st, rc, "cannot read a stack");
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = store_sql_fail(st, rc, "cannot read a stack");
	if (e == 0 && r.ev.stack.nframes == 0) {
		store_set_error(st, "no stack %016" PRIx64, hash);
		e = -ENOENT;
	}
	if (e < 0) {
		stackdump_stack_free(&r.ev.stack);
		return e;
	}
	*out = r.ev.stack;
	out->hash = hash;
	return 0;
}

int store_id_before_last(struct store *st, int n, int64_t *after_id)
{
	sqlite3_stmt *s = st->id_before_last;
	struct binder b = { .s = s };
	int64_t id = 0;
	int rc, e;

	if (n < 0) {
		store_set_error(st, "cannot count back a negative number of events (%d)", n);
		return -EINVAL;
	}
	bind_i64(&b, n);
	if ((e = bind_done(st, &b, "cannot read events")) < 0)
		return e;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		id = sqlite3_column_int64(s, 0);
		rc = SQLITE_DONE;
	}
	if (rc != SQLITE_DONE) {
		e = store_sql_fail(st, rc, "cannot read events");
		(void)sqlite3_reset(s);
		return e;
	}
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot read events");
	*after_id = id;
	return 0;
}
