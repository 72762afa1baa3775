#include "cpumond/store.h"
#include "cpumond/store_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The upsert says by its RETURNING whether the stack is new (times_seen is
 * this sample count): only then are its frames written. */
static const char sql_put_stack[] =
	"INSERT INTO stacks (hash, nframes, truncated, first_seen, last_seen, times_seen)"
	" VALUES (?1, ?2, ?3, ?4, ?4, ?5)"
	" ON CONFLICT (hash) DO UPDATE SET times_seen = times_seen + excluded.times_seen,"
	" first_seen = min(first_seen, excluded.first_seen),"
	" last_seen = max(last_seen, excluded.last_seen)"
	" RETURNING times_seen";
static const char sql_put_stack_frame[] =
	"INSERT INTO stack_frames (hash, depth, module, build_id, func_offset, symbol)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
static const char sql_put_event[] =
	"INSERT INTO events (time, host, watch, pid, comm, exe, tid, thread, usage, threshold,"
	" consecutive, run_delay, stop_us, stack_hash, error, samples, stop_max_us, episode_end,"
	" nspid, cgroup, unit, kind, capture, details)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
	" ?19, ?20, ?21, ?22, ?23, ?24)";
static const char sql_put_event_stack[] =
	"INSERT INTO event_stacks (event_id, stack_hash, count) VALUES (?1, ?2, ?3)";
static const char sql_put_event_frame[] =
	"INSERT INTO event_frames (event_id, depth, ip, offset, symbol_offset)"
	" VALUES (?1, ?2, ?3, ?4, ?5)";

/* Retention: ?1 cutoff time (events older go), ?2 at most this many. */
static const char sql_prune_old[] =
	"DELETE FROM events WHERE id IN"
	" (SELECT id FROM events WHERE time < ?1 ORDER BY id LIMIT ?2)";
static const char sql_prune_oldest[] =
	"DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT ?1)";
/* The same for history cycles, whose rows go by ON DELETE CASCADE. */
static const char sql_prune_cycles_old[] =
	"DELETE FROM cycles WHERE id IN"
	" (SELECT id FROM cycles WHERE time < ?1 ORDER BY id LIMIT ?2)";
static const char sql_prune_cycles_oldest[] =
	"DELETE FROM cycles WHERE id IN (SELECT id FROM cycles ORDER BY id LIMIT ?1)";
/* ?1 the cutoff less STORE_LABEL_REFRESH_US, by which last_seen may lag. */
static const char sql_prune_labels[] = "DELETE FROM labels WHERE last_seen < ?1";
/* Whether the oldest cycle is older than the oldest event (or there is no
 * event): then the size cap takes cycles first. */
static const char sql_cycles_older[] =
	"SELECT coalesce((SELECT time FROM cycles ORDER BY id LIMIT 1) <"
	" coalesce((SELECT min(time) FROM events), (SELECT time FROM cycles ORDER BY id LIMIT 1) + 1),"
	" 0)";
/* Stacks no event refers to any more; their frames go by ON DELETE CASCADE. */
static const char sql_prune_stacks[] =
	"DELETE FROM stacks WHERE hash NOT IN (SELECT stack_hash FROM event_stacks)"
	" AND hash NOT IN (SELECT stack_hash FROM events WHERE stack_hash IS NOT NULL)";

int store_prepare_write(struct store *st)
{
	int e;

	if ((e = store_prepare(st, "BEGIN IMMEDIATE", &st->begin)) < 0 ||
	    (e = store_prepare(st, "COMMIT", &st->commit)) < 0 ||
	    (e = store_prepare(st, "ROLLBACK", &st->rollback)) < 0 ||
	    (e = store_prepare(st, "SAVEPOINT event", &st->savepoint)) < 0 ||
	    (e = store_prepare(st, "RELEASE event", &st->release)) < 0 ||
	    (e = store_prepare(st, "ROLLBACK TO event", &st->rollback_to)) < 0 ||
	    (e = store_prepare(st, sql_put_stack, &st->put_stack)) < 0 ||
	    (e = store_prepare(st, sql_put_stack_frame, &st->put_stack_frame)) < 0 ||
	    (e = store_prepare(st, sql_put_event, &st->put_event)) < 0 ||
	    (e = store_prepare(st, sql_put_event_frame, &st->put_event_frame)) < 0 ||
	    (e = store_prepare(st, sql_put_event_stack, &st->put_event_stack)) < 0 ||
	    (e = store_prepare(st, sql_prune_old, &st->prune_old)) < 0 ||
	    (e = store_prepare(st, sql_prune_oldest, &st->prune_oldest)) < 0 ||
	    (e = store_prepare(st, sql_prune_stacks, &st->prune_stacks)) < 0 ||
	    (e = store_prepare(st, sql_prune_cycles_old, &st->prune_cycles_old)) < 0 ||
	    (e = store_prepare(st, sql_prune_cycles_oldest, &st->prune_cycles_oldest)) < 0 ||
	    (e = store_prepare(st, sql_prune_labels, &st->prune_labels)) < 0)
		return e;
	return 0;
}

int store_begin(struct store *st)
{
	int e;

	if (!st->writable) {
		store_set_error(st, "opened read-only");
		return -EROFS;
	}
	if (st->in_tx) {
		store_set_error(st, "a transaction is already open");
		return -EINVAL;
	}
	e = store_run(st, st->begin, "cannot begin a transaction");
	if (e < 0)
		return e;
	st->in_tx = true;
	st->tx_failed = 0;
	return 0;
}

/* The stack row with COUNT more samples, and its frames when it is new. */
static int put_stack(struct store *st, const struct stackdump_stack *sk, int64_t time_us,
                     unsigned count)
{
	struct binder b = { .s = st->put_stack };
	int64_t times_seen = 0;
	int rc, e;

	bind_u64(&b, sk->hash);
	bind_i64(&b, (int64_t)sk->nframes);
	bind_i64(&b, sk->truncated);
	bind_i64(&b, time_us);
	bind_i64(&b, count);
	if ((e = bind_done(st, &b, "cannot add stack")) < 0)
		return e;
	while ((rc = sqlite3_step(st->put_stack)) == SQLITE_ROW)
		times_seen = sqlite3_column_int64(st->put_stack, 0);
	if (rc != SQLITE_DONE) {
		e = store_sql_fail(st, rc, "cannot add stack");
		(void)sqlite3_reset(st->put_stack);
		return e;
	}
	rc = sqlite3_reset(st->put_stack);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot add stack");
	if (times_seen != count)
		return 0;
	for (size_t i = 0; i < sk->nframes; i++) {
		const struct stackdump_frame *f = &sk->frames[i];

		b = (struct binder){ .s = st->put_stack_frame };
		bind_u64(&b, sk->hash);
		bind_i64(&b, (int64_t)i);
		bind_text(&b, f->module ? f->module : "");
		bind_text(&b, f->build_id ? f->build_id : "");
		bind_u64(&b, f->func_offset);
		bind_text(&b, f->symbol);
		if ((e = bind_done(st, &b, "cannot add stack frame")) < 0 ||
		    (e = store_run(st, st->put_stack_frame, "cannot add stack frame")) < 0)
			return e;
	}
	return 0;
}

/* The distinct stacks of EV with their counts: its list, or its one stack. */
static size_t event_stacks(const struct store_event *ev, struct store_stack_count *one,
                           const struct store_stack_count **c)
{
	*one = (struct store_stack_count){ ev->stack.hash, 1, &ev->stack };
	*c = ev->nstacks ? ev->stacks : one;
	return ev->nstacks ? ev->nstacks : 1;
}

/* The stack rows, before the event row refers to its key stack. */
static int put_stacks(struct store *st, const struct store_event *ev)
{
	struct store_stack_count one;
	const struct store_stack_count *c;
	size_t n = event_stacks(ev, &one, &c);
	bool has_key = false;
	int e;

	for (size_t i = 0; i < n; i++) {
		if (!c[i].stack || c[i].stack->nframes == 0 || c[i].count == 0 ||
		    c[i].hash != c[i].stack->hash) {
			store_set_error(st, "cannot add event: stack %zu of %zu is empty or mislabelled",
			                i + 1, n);
			return -EINVAL;
		}
		has_key |= c[i].hash == ev->stack.hash;
	}
	if (!has_key) {
		store_set_error(st, "cannot add event: its key stack is not among its stacks");
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if ((e = put_stack(st, c[i].stack, ev->time_us, c[i].count)) < 0)
			return e;
	return 0;
}

/* How often each stack was seen in the event, after the event row exists. */
static int put_event_stacks(struct store *st, const struct store_event *ev)
{
	struct store_stack_count one;
	const struct store_stack_count *c;
	size_t n = event_stacks(ev, &one, &c);
	int e;

	for (size_t i = 0; i < n; i++) {
		struct binder b = { .s = st->put_event_stack };

		bind_i64(&b, ev->id);
		bind_u64(&b, c[i].hash);
		bind_i64(&b, c[i].count);
		if ((e = bind_done(st, &b, "cannot add event stack")) < 0 ||
		    (e = store_run(st, st->put_event_stack, "cannot add event stack")) < 0)
			return e;
	}
	return 0;
}

static int put_event(struct store *st, struct store_event *ev)
{
	const struct stackdump_stack *sk = &ev->stack;
	const char *error = ev->error && ev->error[0] ? ev->error : sk->error;
	struct binder b = { .s = st->put_event };
	int64_t id;
	int e;

	bind_i64(&b, ev->time_us);
	bind_text(&b, ev->host);
	bind_text(&b, ev->watch);
	bind_i64(&b, ev->pid);
	bind_text(&b, ev->comm);
	bind_text(&b, ev->exe);
	bind_i64(&b, ev->tid);
	bind_text(&b, ev->thread);
	bind_i64(&b, ev->usage);
	bind_i64(&b, ev->threshold);
	bind_i64(&b, ev->consecutive);
	bind_i64(&b, ev->run_delay);
	bind_i64(&b, (int64_t)((sk->stop_ns + 500) / 1000));
	if (sk->nframes > 0)
		bind_u64(&b, sk->hash);
	else
		bind_null(&b);
	bind_text(&b, error[0] ? error : NULL);
	bind_i64(&b, ev->samples ? ev->samples : (sk->nframes > 0));
	bind_i64(&b, (int64_t)((ev->stop_max_ns ? ev->stop_max_ns : sk->stop_ns) + 500) / 1000);
	bind_text(&b, ev->episode_end && ev->episode_end[0] ? ev->episode_end : NULL);
	if (ev->nspid > 0)
		bind_i64(&b, ev->nspid);
	else
		bind_null(&b);
	bind_text(&b, ev->cgroup && ev->cgroup[0] ? ev->cgroup : NULL);
	bind_text(&b, ev->unit && ev->unit[0] ? ev->unit : NULL);
	bind_text(&b, ev->kind && ev->kind[0] ? ev->kind : "hot");
	bind_text(&b, ev->capture && ev->capture[0] ? ev->capture : NULL);
	bind_text(&b, ev->details && ev->details[0] ? ev->details : NULL);
	if ((e = bind_done(st, &b, "cannot add event")) < 0 ||
	    (e = store_run(st, st->put_event, "cannot add event")) < 0)
		return e;
	id = sqlite3_last_insert_rowid(st->db);
	for (size_t i = 0; i < sk->nframes; i++) {
		const struct stackdump_frame *f = &sk->frames[i];

		b = (struct binder){ .s = st->put_event_frame };
		bind_i64(&b, id);
		bind_i64(&b, (int64_t)i);
		bind_u64(&b, f->ip);
		bind_u64(&b, f->offset);
		if (f->symbol)
			bind_u64(&b, f->symbol_offset);
		else
			bind_null(&b);
		if ((e = bind_done(st, &b, "cannot add event frame")) < 0 ||
		    (e = store_run(st, st->put_event_frame, "cannot add event frame")) < 0)
			return e;
	}
	ev->id = id;
	return 0;
}

void store_note_tx_state(struct store *st, int e)
{
	if (st->in_tx && sqlite3_get_autocommit(st->db) && st->tx_failed == 0)
		st->tx_failed = e;
}

int store_add_event(struct store *st, struct store_event *ev)
{
	const struct stackdump_stack *sk = &ev->stack;
	char saved[sizeof st->err];
	int e;

	if (!st->in_tx) {
		store_set_error(st, "cannot add event: no transaction open (call store_begin first)");
		return -EINVAL;
	}
	if (st->tx_failed < 0) {
		store_set_error(st, "cannot add event: the transaction was rolled back after an "
		                "earlier error");
		return st->tx_failed;
	}
	if (sk->nframes > 0 && (!sk->frames || sk->hash == 0)) {
		store_set_error(st, "cannot add event: %zu frames without %s", sk->nframes,
		                sk->frames ? "a stack hash" : "a frame array");
		return -EINVAL;
	}
	/* A savepoint per event: a failed event is undone alone and the
	 * cycle's other events still commit. */
	if ((e = store_run(st, st->savepoint, "cannot add event")) < 0) {
		store_note_tx_state(st, e);
		return e;
	}
	/* The stack rows must exist before the event refers to them; the
	 * event id must exist before event_stacks refers to it. */
	e = 0;
	if (sk->nframes > 0)
		e = put_stacks(st, ev);
	if (e == 0)
		e = put_event(st, ev);
	if (e == 0 && sk->nframes > 0)
		e = put_event_stacks(st, ev);
	if (e == 0)
		e = store_run(st, st->release, "cannot add event");
	if (e == 0)
		return 0;
	memcpy(saved, st->err, sizeof saved);
	if (!sqlite3_get_autocommit(st->db)) {
		/* Each fails only when the savepoint is gone; then SQLite
		 * rolled back the transaction and store_note_tx_state sees it. */
		if (store_run(st, st->rollback_to, "rollback") == 0)
			(void)store_run(st, st->release, "release");
	}
	memcpy(st->err, saved, sizeof saved);
	store_note_tx_state(st, e);
	return e;
}

int store_commit(struct store *st)
{
	int e;

	if (!st->in_tx) {
		store_set_error(st, "cannot commit: no transaction open");
		return -EINVAL;
	}
	st->in_tx = false;
	if (st->tx_failed < 0) {
		store_forget_labels(st);
		e = st->tx_failed;
		store_set_error(st, "the cycle's events are lost: the transaction was rolled back "
		                "after an earlier error");
		if (!sqlite3_get_autocommit(st->db))
			(void)store_run(st, st->rollback, "rollback");
		st->tx_failed = 0;
		return e;
	}
	e = store_run(st, st->commit, "cannot commit, the cycle's events are lost");
	if (e < 0)
		store_forget_labels(st);    /* their new rows are gone */
	if (e < 0 && !sqlite3_get_autocommit(st->db)) {
		char saved[sizeof st->err];

		/* A failed COMMIT leaves the transaction open; end it so
		 * the next cycle starts clean. */
		memcpy(saved, st->err, sizeof saved);
		(void)store_run(st, st->rollback, "rollback");
		memcpy(st->err, saved, sizeof saved);
	}
	return e;
}

int store_size(struct store *st, uint64_t *bytes)
{
	int64_t pages, page_size, free_pages;
	int e;

	if ((e = store_query_one(st, "PRAGMA page_count", "cannot read the size", &pages,
	                         NULL, 0)) < 0 ||
	    (e = store_query_one(st, "PRAGMA page_size", "cannot read the size", &page_size,
	                         NULL, 0)) < 0 ||
	    (e = store_query_one(st, "PRAGMA freelist_count", "cannot read the size", &free_pages,
	                         NULL, 0)) < 0)
		return e;
	*bytes = (uint64_t)(pages - free_pages) * (uint64_t)page_size;
	return 0;
}

/* Runs a pruning DELETE with its limits bound; adds the rows it deleted. */
static int prune_step(struct store *st, sqlite3_stmt *s, int64_t a, int64_t b, int nbind,
                      int *deleted)
{
	struct binder bd = { .s = s };
	int e;

	if (nbind > 0)
		bind_i64(&bd, a);
	if (nbind > 1)
		bind_i64(&bd, b);
	if ((e = bind_done(st, &bd, "cannot prune")) < 0 || (e = store_run(st, s, "cannot prune")) < 0)
		return e;
	*deleted += sqlite3_changes(st->db);
	return 0;
}

/* The size cap's batch: the oldest cycles when they are older than the
 * oldest event, else the oldest events; counted in *DELETED or *CYCLES. */
static int prune_oldest(struct store *st, int limit, int *deleted, int *cycles)
{
	int64_t cycles_first = 0;
	int e;

	e = store_query_one(st, sql_cycles_older, "cannot prune", &cycles_first, NULL, 0);
	if (e < 0)
		return e;
	/* An event may be large, a cycle is a few hundred bytes: a tenth
	 * of the batch of events, the whole batch of cycles. */
	if (cycles_first)
		return prune_step(st, st->prune_cycles_oldest, limit, 0, 1, cycles);
	return prune_step(st, st->prune_oldest, limit / 10 + 1, 0, 1, deleted);
}

int store_prune(struct store *st, int64_t before_us, uint64_t max_bytes, int limit,
                int *deleted, bool *more)
{
	uint64_t size = 0;
	int stacks = 0, cycles = 0, labels = 0, e;

	*deleted = 0;
	*more = false;
	if (st->in_tx) {
		store_set_error(st, "cannot prune inside the cycle's transaction");
		return -EINVAL;
	}
	if ((e = store_run(st, st->begin, "cannot prune")) < 0)
		return e;
	e = prune_step(st, st->prune_old, before_us, limit, 2, deleted);
	if (e == 0)
		e = prune_step(st, st->prune_cycles_old, before_us, limit, 2, &cycles);
	if (e == 0 && *deleted < limit && cycles < limit && max_bytes &&
	    (e = store_size(st, &size)) == 0 && size > max_bytes) {
		/* Still too big with nothing too old: the oldest go. */
		e = prune_oldest(st, limit, deleted, &cycles);
		*more = true;
	}
	if (e == 0)
		e = prune_step(st, st->prune_stacks, 0, 0, 0, &stacks);
	/* Once the old cycles are all gone: before, rows that are still to
	 * go would lose their labels. */
	if (e == 0 && before_us > 0 && cycles < limit)
		e = prune_step(st, st->prune_labels, before_us - STORE_LABEL_REFRESH_US, 0, 1,
		                &labels);
	if (e == 0)
		e = store_run(st, st->commit, "cannot prune");
	/* Whether it committed or not, the cached ids may be gone. */
	if (labels > 0 || e < 0)
		store_forget_labels(st);
	if (e < 0) {
		if (!sqlite3_get_autocommit(st->db))
			(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		return e;
	}
	*more |= *deleted >= limit || cycles >= limit;
	/* Give the freed pages back; a no-op for a database without
	 * auto_vacuum (see set_pragmas). */
	return store_exec(st, "PRAGMA incremental_vacuum", "cannot shrink the database");
}
