/* store_internal: what the files of the log database share besides store.h,
 * for them only (everything else uses store.h).
 *
 *   store.c        open, schema and its migrations, pragmas, close, errors,
 *                  and the statement helpers below
 *   store_write.c  the cycle's transaction (store_begin, store_add_event,
 *                  store_commit), store_size, retention (store_prune)
 *   store_read.c   the readers (store_each_event_after/in, store_get_stack,
 *                  store_id_before_last)
 *   store_history.c  the usage history: store_add_cycle with its cache of
 *                  labels, store_latest_cycle, store_each_usage_in
 *
 * Each of store_write.c, store_read.c and store_history.c holds the SQL
 * of its statements and prepares them; store.c calls them once the schema
 * is known.
 */
#ifndef CPUMOND_STORE_INTERNAL_H
#define CPUMOND_STORE_INTERNAL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpumond/store.h"

/* Label ids cached by the writer (store_history.c), direct-mapped: a
 * steady set of kept threads finds its ids without a statement. */
#define STORE_LABEL_SLOTS 256

/* labels.last_seen is set again at most this often per label, not at
 * every use: a write per row per cycle would dirty the labels pages every
 * cycle.  Retention of labels goes by it: a label not seen since before
 * the cutoff less this is used by no row younger than the cutoff. */
#define STORE_LABEL_REFRESH_US (3600LL * 1000000)

struct store_label_slot {
	char *key;               /* the label as one string; NULL: empty */
	int64_t id;              /* labels.id */
	int64_t refreshed_us;    /* when labels.last_seen was last set to a cycle's time */
};

/* An open database.  The statements are prepared once by store_open and
 * finalized by store_close; a read-only store has only the readers'. */
struct store {
	sqlite3 *db;
	char *path;
	bool writable;
	bool in_tx;              /* between a successful store_begin and store_commit */
	int tx_failed;           /* < 0: SQLite rolled the open transaction back */
	/* store_write.c's (writable only) */
	sqlite3_stmt *begin, *commit, *rollback;
	sqlite3_stmt *savepoint, *release, *rollback_to;
	sqlite3_stmt *put_stack, *put_stack_frame, *put_event, *put_event_frame;
	sqlite3_stmt *put_event_stack;
	sqlite3_stmt *prune_old, *prune_oldest, *prune_stacks;
	sqlite3_stmt *prune_cycles_old, *prune_cycles_oldest, *prune_labels;
	/* store_history.c's: the writer's (writable only) and the readers'
	 * (NULL below schema v5: no history) */
	sqlite3_stmt *put_cycle, *put_label, *put_usage;
	sqlite3_stmt *latest_cycle, *usage_in;
	struct store_label_slot *labels;  /* STORE_LABEL_SLOTS, allocated on first use */
	/* store_read.c's */
	sqlite3_stmt *events_after, *event_stacks, *stack_frames, *id_before_last;
	sqlite3_stmt *read_begin, *read_end;
	int last_rc;             /* SQLite result of the last failure */
	char err[512];
};

/* store.c.  Sets the words of the last failure, store_error(), to
 * "database PATH: " and FMT's text. */
void store_set_error(struct store *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* store.c.  Records that WHAT failed with SQLite result RC and returns the
 * negative errno for it.  Call it right after the failing call: the message
 * is the connection's last one. */
int store_sql_fail(struct store *st, int rc, const char *what);

/* store.c.  Steps S, which returns no rows, resets it and clears its
 * bindings.  Returns 0 or a negative errno (store_sql_fail with WHAT). */
int store_run(struct store *st, sqlite3_stmt *s, const char *what);

/* store.c.  Prepares SQL as a persistent statement into *OUT.  Returns 0 or
 * a negative errno. */
int store_prepare(struct store *st, const char *sql, sqlite3_stmt **out);

/* store.c.  Runs SQL, which may hold several statements and returns no rows.
 * Returns 0 or a negative errno (store_sql_fail with WHAT). */
int store_exec(struct store *st, const char *sql, const char *what);

/* store.c.  Runs SQL, which returns one row of one column, into *NUM and/or
 * BUF (as text, cut to BUFLEN); either may be NULL.  Returns 0, -EIO when
 * there is no row, or another negative errno. */
int store_query_one(struct store *st, const char *sql, const char *what, int64_t *num,
                    char *buf, size_t buflen);

/* store.c.  A copy of text column COL of the row S is on, "" for NULL;
 * NULL only when out of memory. */
char *store_column_dup(sqlite3_stmt *s, int col);

/* store_write.c.  After a failure E inside the cycle's transaction: SQLite
 * may have rolled the whole transaction back itself (SQLITE_FULL, IOERR,
 * NOMEM can); then the rest of the cycle must not run in autocommit mode,
 * and store_commit reports the loss. */
void store_note_tx_state(struct store *st, int e);

/* store_write.c.  Prepares the writer's statements of a writable ST.
 * Returns 0 or a negative errno. */
int store_prepare_write(struct store *st);

/* store_read.c.  Prepares the readers' statements of ST, whose schema is at
 * VERSION.  Returns 0 or a negative errno. */
int store_prepare_read(struct store *st, int64_t version);

/* store_history.c.  Prepares the history's statements of ST, whose schema
 * is at VERSION: none below 5.  Returns 0 or a negative errno. */
int store_prepare_history(struct store *st, int64_t version);

/* store_history.c.  Empties the writer's cache of label ids: after a
 * rollback (the ids it holds may not exist) and after retention deleted
 * labels.  Frees it on store_close. */
void store_forget_labels(struct store *st);

/* Binds parameters 1, 2, ... in turn and keeps the first failure, so a
 * statement's binds are written as a list and checked once. */
struct binder {
	sqlite3_stmt *s;
	int i;
	int rc;
};

/* Binds V to the next parameter. */
static inline void bind_i64(struct binder *b, int64_t v)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = sqlite3_bind_int64(b->s, b->i, v);
}

/* Binds V as the int64 with the same bits (how the schema stores uint64). */
static inline void bind_u64(struct binder *b, uint64_t v)
{
	bind_i64(b, (int64_t)v);
}

/* Binds SQL NULL to the next parameter. */
static inline void bind_null(struct binder *b)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = sqlite3_bind_null(b->s, b->i);
}

/* S is NULL → SQL NULL.  The string must live until the statement is reset. */
static inline void bind_text(struct binder *b, const char *s)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = s ? sqlite3_bind_text(b->s, b->i, s, -1, SQLITE_STATIC)
			  : sqlite3_bind_null(b->s, b->i);
}

/* 0 when every bind of B succeeded, else the negative errno of the first
 * failure (store_sql_fail with WHAT). */
static inline int bind_done(struct store *st, const struct binder *b, const char *what)
{
	if (b->rc == SQLITE_OK)
		return 0;
	return store_sql_fail(st, b->rc, what);
}

#endif
