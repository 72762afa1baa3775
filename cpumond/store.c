#include "cpumond/store.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a statement waits for a lock held by another connection.  Only
 * the daemon writes, so the writer waits here only while a reader runs WAL
 * recovery; a reader waits only while the writer resets the WAL. */
#define STORE_BUSY_MS 2000

/* Events read per read transaction: the walker copies a batch, ends the read
 * and only then calls back, so a slow consumer (a paused pager) never holds
 * a read transaction open, which would keep the writer's checkpoints from
 * recycling the WAL. */
#define STORE_BATCH 64

/* Bytes of WAL kept between checkpoints. */
#define STORE_WAL_LIMIT "4194304"

/* Schema v1.  uint64 values (hashes, addresses, offsets) are stored as the
 * int64 with the same bits.  A stack is stored once per hash, with what is
 * the same in every sample (the functions); an event keeps its sample's exact
 * addresses in event_frames.  Ids are AUTOINCREMENT so that they are never
 * reused once retention has deleted the newest rows: `tail -f` follows
 * "id > last seen". */
static const char schema_v1[] =
	"CREATE TABLE stacks (\n"
	"  hash INTEGER PRIMARY KEY,\n"
	"  nframes INTEGER NOT NULL,\n"
	"  truncated INTEGER NOT NULL,\n"
	"  first_seen INTEGER NOT NULL,\n"
	"  last_seen INTEGER NOT NULL,\n"
	"  times_seen INTEGER NOT NULL\n"
	");\n"
	"CREATE TABLE stack_frames (\n"
	"  hash INTEGER NOT NULL REFERENCES stacks(hash) ON DELETE CASCADE,\n"
	"  depth INTEGER NOT NULL,\n"
	"  module TEXT NOT NULL,\n"
	"  build_id TEXT NOT NULL,\n"
	"  func_offset INTEGER NOT NULL,\n"
	"  symbol TEXT,\n"
	"  PRIMARY KEY (hash, depth)\n"
	") WITHOUT ROWID;\n"
	"CREATE TABLE events (\n"
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
	"  time INTEGER NOT NULL,\n"
	"  host TEXT,\n"
	"  watch TEXT,\n"
	"  pid INTEGER NOT NULL,\n"
	"  comm TEXT,\n"
	"  exe TEXT,\n"
	"  tid INTEGER NOT NULL,\n"
	"  thread TEXT,\n"
	"  usage INTEGER NOT NULL,\n"
	"  threshold INTEGER NOT NULL,\n"
	"  consecutive INTEGER NOT NULL,\n"
	"  run_delay INTEGER NOT NULL,\n"
	"  stop_us INTEGER NOT NULL,\n"
	"  stack_hash INTEGER REFERENCES stacks(hash),\n"
	"  error TEXT\n"
	");\n"
	"CREATE INDEX events_time ON events(time);\n"
	"CREATE INDEX events_stack_hash ON events(stack_hash);\n"
	"CREATE TABLE event_frames (\n"
	"  event_id INTEGER NOT NULL REFERENCES events(id) ON DELETE CASCADE,\n"
	"  depth INTEGER NOT NULL,\n"
	"  ip INTEGER NOT NULL,\n"
	"  offset INTEGER NOT NULL,\n"
	"  symbol_offset INTEGER,\n"
	"  PRIMARY KEY (event_id, depth)\n"
	") WITHOUT ROWID;\n";

/* Schema v2: episodes.  An event may stand for many stack samples of its
 * thread; event_stacks counts each distinct stack's samples, and the event's
 * stack_hash is the key stack (the most frequent).  stop_us becomes the
 * median stop of the samples and stop_max_us the longest. */
static const char schema_v2[] =
	"ALTER TABLE events ADD COLUMN samples INTEGER NOT NULL DEFAULT 1;\n"
	"ALTER TABLE events ADD COLUMN stop_max_us INTEGER NOT NULL DEFAULT 0;\n"
	"ALTER TABLE events ADD COLUMN episode_end TEXT;\n"
	"UPDATE events SET stop_max_us = stop_us;\n"
	"CREATE TABLE event_stacks (\n"
	"  event_id INTEGER NOT NULL REFERENCES events(id) ON DELETE CASCADE,\n"
	"  stack_hash INTEGER NOT NULL REFERENCES stacks(hash),\n"
	"  count INTEGER NOT NULL,\n"
	"  PRIMARY KEY (event_id, stack_hash)\n"
	") WITHOUT ROWID;\n"
	"CREATE INDEX event_stacks_hash ON event_stacks(stack_hash);\n"
	"INSERT INTO event_stacks (event_id, stack_hash, count)\n"
	"  SELECT id, stack_hash, 1 FROM events WHERE stack_hash IS NOT NULL;\n";

/* Schema v3: where an event comes from.  nspid is the pid in the
 * process's own pid namespace, cgroup its cgroup v2 path, unit its systemd
 * unit; NULL in the events of older versions, which did not record them. */
static const char schema_v3[] =
	"ALTER TABLE events ADD COLUMN nspid INTEGER;\n"
	"ALTER TABLE events ADD COLUMN cgroup TEXT;\n"
	"ALTER TABLE events ADD COLUMN unit TEXT;\n";

/* Each entry takes the schema from version i to i + 1. */
static const char *const migrations[STORE_SCHEMA_VERSION] = {
	schema_v1,
	schema_v2,
	schema_v3,
};

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
	" nspid, cgroup, unit)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
	" ?19, ?20, ?21)";
static const char sql_put_event_stack[] =
	"INSERT INTO event_stacks (event_id, stack_hash, count) VALUES (?1, ?2, ?3)";
static const char sql_put_event_frame[] =
	"INSERT INTO event_frames (event_id, depth, ip, offset, symbol_offset)"
	" VALUES (?1, ?2, ?3, ?4, ?5)";

/* One row per frame (one row with NULL frame columns for an event without
 * frames), events in id order, frames innermost first. */
enum {
	COL_ID, COL_TIME, COL_HOST, COL_WATCH, COL_PID, COL_COMM, COL_EXE, COL_TID, COL_THREAD,
	COL_USAGE, COL_THRESHOLD, COL_CONSECUTIVE, COL_RUN_DELAY, COL_STOP_US, COL_STACK_HASH,
	COL_ERROR, COL_SAMPLES, COL_STOP_MAX_US, COL_EPISODE_END, COL_NSPID, COL_CGROUP,
	COL_UNIT, COL_TRUNCATED, COL_DEPTH,
	COL_IP, COL_OFFSET, COL_SYMBOL_OFFSET, COL_MODULE, COL_BUILD_ID, COL_FUNC_OFFSET,
	COL_SYMBOL,
};
/* ?1 after id, ?2 batch size, ?3..?8 the store_filter (0 / NULL: any).
 * ORIGIN: the columns COL_NSPID, COL_CGROUP, COL_UNIT. */
#define SQL_EVENTS_AFTER(ORIGIN) \
	"SELECT e.id, e.time, e.host, e.watch, e.pid, e.comm, e.exe, e.tid, e.thread, e.usage," \
	" e.threshold, e.consecutive, e.run_delay, e.stop_us, e.stack_hash, e.error, e.samples," \
	" e.stop_max_us, e.episode_end, " ORIGIN ", s.truncated," \
	" f.depth, f.ip, f.offset, f.symbol_offset, sf.module, sf.build_id, sf.func_offset," \
	" sf.symbol" \
	" FROM (SELECT * FROM events WHERE id > ?1" \
	"  AND (?3 = 0 OR time >= ?3) AND (?4 = 0 OR time < ?4)" \
	"  AND (?5 IS NULL OR watch = ?5) AND (?6 IS NULL OR comm = ?6)" \
	"  AND (?7 IS NULL OR thread = ?7) AND (?8 = 0 OR pid = ?8)" \
	"  ORDER BY id LIMIT ?2) AS e" \
	" LEFT JOIN stacks AS s ON s.hash = e.stack_hash" \
	" LEFT JOIN event_frames AS f ON f.event_id = e.id" \
	" LEFT JOIN stack_frames AS sf ON sf.hash = e.stack_hash AND sf.depth = f.depth" \
	" ORDER BY e.id, f.depth"
static const char sql_events_after[] = SQL_EVENTS_AFTER("e.nspid, e.cgroup, e.unit");
/* A version-2 file that a reader may not migrate (a copy from a host with
 * an older cpumond, or the file of an older daemon still running) is read
 * as it is: its events have no origin. */
static const char sql_events_after_v2[] = SQL_EVENTS_AFTER("NULL, NULL, NULL");
static const char sql_event_stacks[] =
	"SELECT event_id, stack_hash, count FROM event_stacks"
	" WHERE event_id BETWEEN ?1 AND ?2 ORDER BY event_id, count DESC, stack_hash";
static const char sql_stack_frames[] =
	"SELECT s.truncated, f.module, f.build_id, f.func_offset, f.symbol"
	" FROM stacks AS s JOIN stack_frames AS f ON f.hash = s.hash"
	" WHERE s.hash = ?1 ORDER BY f.depth";
/* Retention: ?1 cutoff time (events older go), ?2 at most this many. */
static const char sql_prune_old[] =
	"DELETE FROM events WHERE id IN"
	" (SELECT id FROM events WHERE time < ?1 ORDER BY id LIMIT ?2)";
static const char sql_prune_oldest[] =
	"DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT ?1)";
/* Stacks no event refers to any more; their frames go by ON DELETE CASCADE. */
static const char sql_prune_stacks[] =
	"DELETE FROM stacks WHERE hash NOT IN (SELECT stack_hash FROM event_stacks)"
	" AND hash NOT IN (SELECT stack_hash FROM events WHERE stack_hash IS NOT NULL)";
static const char sql_id_before_last[] =
	"SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1";

struct store {
	sqlite3 *db;
	char *path;
	bool writable;
	bool in_tx;              /* between a successful store_begin and store_commit */
	int tx_failed;           /* < 0: SQLite rolled the open transaction back */
	sqlite3_stmt *begin, *commit, *rollback;
	sqlite3_stmt *savepoint, *release, *rollback_to;
	sqlite3_stmt *put_stack, *put_stack_frame, *put_event, *put_event_frame;
	sqlite3_stmt *put_event_stack;
	sqlite3_stmt *events_after, *event_stacks, *stack_frames, *id_before_last;
	sqlite3_stmt *read_begin, *read_end;
	sqlite3_stmt *prune_old, *prune_oldest, *prune_stacks;
	int last_rc;             /* SQLite result of the last failure */
	char err[512];
};

/* Returns the negative errno that best names SQLite result RC. */
static int store_errno(const struct store *st, int rc)
{
	int sys = st->db ? sqlite3_system_errno(st->db) : 0;

	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_NOTADB:
	case SQLITE_MISUSE:
	case SQLITE_RANGE:
	case SQLITE_CONSTRAINT:
		return -EINVAL;
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN:
		return sys > 0 ? -sys : -EIO;
	default:
		return -EIO;
	}
}

static void set_error(struct store *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_error(struct store *st, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(st->err, sizeof st->err, "database %s: ", st->path);
	if (n < 0 || (size_t)n >= sizeof st->err)
		return;
	va_start(ap, fmt);
	vsnprintf(st->err + n, sizeof st->err - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Records that WHAT failed with SQLite result RC and returns the errno for
 * it.  Call it right after the failing call: the message is the connection's
 * last one. */
static int sql_fail(struct store *st, int rc, const char *what)
{
	const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
	int sys = st->db ? sqlite3_system_errno(st->db) : 0;
	int e = store_errno(st, rc);

	st->last_rc = rc;
	if (((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_CANTOPEN) && sys > 0)
		set_error(st, "%s: %s (%s)", what, msg, strerror(sys));
	else
		set_error(st, "%s: %s", what, msg);
	return e;
}

/* Steps S, which returns no rows, and resets it. */
static int run(struct store *st, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);
	int rc2;

	if (rc != SQLITE_DONE) {
		rc = sql_fail(st, rc, what);
		(void)sqlite3_reset(s);      /* repeats the error just recorded */
		(void)sqlite3_clear_bindings(s);
		return rc;
	}
	rc2 = sqlite3_reset(s);
	if (rc2 != SQLITE_OK)
		return sql_fail(st, rc2, what);
	/* Always SQLITE_OK; drops the pointers to the caller's strings. */
	(void)sqlite3_clear_bindings(s);
	return 0;
}

/* Binds parameters 1, 2, ... in turn and keeps the first failure, so a
 * statement's binds are written as a list and checked once. */
struct binder {
	sqlite3_stmt *s;
	int i;
	int rc;
};

static void bind_i64(struct binder *b, int64_t v)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = sqlite3_bind_int64(b->s, b->i, v);
}

static void bind_u64(struct binder *b, uint64_t v)
{
	bind_i64(b, (int64_t)v);
}

static void bind_null(struct binder *b)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = sqlite3_bind_null(b->s, b->i);
}

/* S is NULL → SQL NULL.  The string must live until the statement is reset. */
static void bind_text(struct binder *b, const char *s)
{
	b->i++;
	if (b->rc == SQLITE_OK)
		b->rc = s ? sqlite3_bind_text(b->s, b->i, s, -1, SQLITE_STATIC)
			  : sqlite3_bind_null(b->s, b->i);
}

static int bind_done(struct store *st, const struct binder *b, const char *what)
{
	if (b->rc == SQLITE_OK)
		return 0;
	return sql_fail(st, b->rc, what);
}

static int prepare(struct store *st, const char *sql, sqlite3_stmt **out)
{
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);

	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot prepare statement");
	return 0;
}

/* Runs SQL, which may hold several statements and returns no rows. */
static int exec(struct store *st, const char *sql, const char *what)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return sql_fail(st, rc, what);
	return 0;
}

/* Runs SQL, which returns one row of one column, into *NUM and/or BUF (as
 * text). */
static int query_one(struct store *st, const char *sql, const char *what, int64_t *num,
                     char *buf, size_t buflen)
{
	sqlite3_stmt *s;
	int rc, e = 0;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, what);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		if (num)
			*num = sqlite3_column_int64(s, 0);
		if (buf) {
			const unsigned char *t = sqlite3_column_text(s, 0);

			if (!t && sqlite3_errcode(st->db) == SQLITE_NOMEM)
				e = sql_fail(st, SQLITE_NOMEM, what);
			else
				snprintf(buf, buflen, "%s", t ? (const char *)t : "");
		}
	} else if (rc == SQLITE_DONE) {
		set_error(st, "%s: no result", what);
		e = -EIO;
	} else {
		e = sql_fail(st, rc, what);
	}
	rc = sqlite3_finalize(s);
	if (rc != SQLITE_OK && e == 0)
		e = sql_fail(st, rc, what);
	return e;
}

/* Creates the directory that holds PATH when it is missing, but not its own
 * parent: a missing grandparent means a mistyped path more often than not. */
static int make_parent(struct store *st)
{
	char *copy = strdup(st->path);
	const char *dir;
	int e = 0;

	if (!copy) {
		set_error(st, "out of memory");
		return -ENOMEM;
	}
	dir = dirname(copy);
	if (mkdir(dir, 0750) == 0) {
		/* mkdir applies the umask; the mode is part of the contract
		 * (group cpumond reads the log). */
		if (chmod(dir, 0750) < 0) {
			e = -errno;
			set_error(st, "cannot set the mode of directory %s: %s", dir, strerror(errno));
		}
	} else if (errno != EEXIST) {
		e = -errno;
		set_error(st, "cannot create directory %s: %s", dir, strerror(errno));
	}
	free(copy);
	return e;
}

/* Creates PATH with mode 0640 unless it exists: SQLite would create it with
 * its own default (0644 less the umask), and it creates the -wal and -shm
 * files with the mode of the main file. */
static int create_file(struct store *st)
{
	int fd = open(st->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	int e = 0;

	if (fd < 0) {
		if (errno == EEXIST)
			return 0;
		e = -errno;
		set_error(st, "cannot create: %s", strerror(errno));
		return e;
	}
	if (fchmod(fd, 0640) < 0) {
		e = -errno;
		set_error(st, "cannot set the mode: %s", strerror(errno));
	}
	if (close(fd) < 0 && e == 0) {
		e = -errno;
		set_error(st, "cannot create: %s", strerror(errno));
	}
	return e;
}

/* Reads the schema version, refusing a file that is not a database, is from a
 * newer cpumond, or is some other program's database.  Only reads. */
static int check_version_read(struct store *st, int64_t *version)
{
	int64_t tables;
	int e;

	e = query_one(st, "PRAGMA user_version", "cannot read the schema version", version,
	              NULL, 0);
	if (e < 0 && (st->last_rc & 0xff) == SQLITE_NOTADB) {
		set_error(st, "not a SQLite database, refusing to touch it");
		return e;
	}
	if (e < 0)
		return e;
	if (*version > STORE_SCHEMA_VERSION) {
		set_error(st, "schema version %lld is newer than this cpumond's (%d), "
		          "refusing to touch it", (long long)*version, STORE_SCHEMA_VERSION);
		return -ENOTSUP;
	}
	if (*version < 0) {
		set_error(st, "schema version %lld is not cpumond's, refusing to touch it",
		          (long long)*version);
		return -EINVAL;
	}
	if (*version == 0) {
		e = query_one(st, "SELECT count(*) FROM sqlite_schema", "cannot read the schema",
		              &tables, NULL, 0);
		if (e < 0)
			return e;
		if (tables > 0) {
			set_error(st, "has tables but no cpumond schema version, "
			          "refusing to touch it");
			return -EINVAL;
		}
	}
	return 0;
}

/* Both reads in one read transaction: the daemon creates the tables and sets
 * user_version in one transaction, and a reader between two separate reads
 * would see the tables without the version and refuse a good database. */
static int check_version(struct store *st, int64_t *version)
{
	int e = exec(st, "BEGIN", "cannot read the schema version");
	int rc;

	if (e < 0)
		return e;
	e = check_version_read(st, version);
	rc = sqlite3_exec(st->db, e < 0 ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK && e == 0)
		return sql_fail(st, rc, "cannot end the schema read");
	return e;
}

static int set_pragmas(struct store *st)
{
	char mode[32];
	int persist, rc, e;

	/* Lets store_prune give freed pages back to the file system.  It takes
	 * effect only while the file has no table yet (a new database); an
	 * older one reuses its free pages instead of shrinking. */
	e = exec(st, "PRAGMA auto_vacuum = INCREMENTAL", "cannot set auto_vacuum");
	if (e < 0)
		return e;
	e = query_one(st, "PRAGMA journal_mode = WAL", "cannot enable WAL", NULL, mode,
	              sizeof mode);
	if (e < 0)
		return e;
	if (strcasecmp(mode, "wal") != 0) {
		set_error(st, "cannot enable WAL: journal mode stays \"%s\"", mode);
		return -EIO;
	}
	/* Keep -wal and -shm when the daemon closes the database: a reader
	 * in group cpumond cannot create them in the 0750 directory, and
	 * without them SQLite cannot read a WAL database ("attempt to write
	 * a readonly database", measured with 3.40).  journal_size_limit
	 * truncates the kept WAL (to 0 on close, to this after a checkpoint
	 * that let it grow). */
	persist = 1;
	rc = sqlite3_file_control(st->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot keep the WAL");
	e = exec(st, "PRAGMA journal_size_limit = " STORE_WAL_LIMIT, "cannot limit the WAL");
	if (e < 0)
		return e;
	/* In WAL mode NORMAL loses at most the last transactions on power
	 * loss, never consistency, and saves an fsync per cycle. */
	e = exec(st, "PRAGMA synchronous = NORMAL", "cannot set synchronous");
	if (e < 0)
		return e;
	return exec(st, "PRAGMA foreign_keys = ON", "cannot enable foreign keys");
}

/* Brings the schema from user_version to STORE_SCHEMA_VERSION in one
 * transaction, rereading the version under the write lock in case another
 * writer migrated meanwhile. */
static int migrate(struct store *st)
{
	int64_t version;
	char sql[64];
	int e;

	e = exec(st, "BEGIN IMMEDIATE", "cannot begin the schema update");
	if (e < 0)
		return e;
	e = check_version_read(st, &version);
	for (; e == 0 && version < STORE_SCHEMA_VERSION; version++) {
		e = exec(st, migrations[version], "cannot update the schema");
		if (e < 0)
			break;
		snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)version + 1);
		e = exec(st, sql, "cannot update the schema version");
	}
	if (e == 0)
		return exec(st, "COMMIT", "cannot commit the schema update");
	if (!sqlite3_get_autocommit(st->db))
		(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL); /* error already recorded */
	return e;
}

/* The statements of ST, whose schema is at VERSION. */
static int prepare_all(struct store *st, int64_t version)
{
	int e = 0;

	if (st->writable) {
		if ((e = prepare(st, "BEGIN IMMEDIATE", &st->begin)) < 0 ||
		    (e = prepare(st, "COMMIT", &st->commit)) < 0 ||
		    (e = prepare(st, "ROLLBACK", &st->rollback)) < 0 ||
		    (e = prepare(st, "SAVEPOINT event", &st->savepoint)) < 0 ||
		    (e = prepare(st, "RELEASE event", &st->release)) < 0 ||
		    (e = prepare(st, "ROLLBACK TO event", &st->rollback_to)) < 0 ||
		    (e = prepare(st, sql_put_stack, &st->put_stack)) < 0 ||
		    (e = prepare(st, sql_put_stack_frame, &st->put_stack_frame)) < 0 ||
		    (e = prepare(st, sql_put_event, &st->put_event)) < 0 ||
		    (e = prepare(st, sql_put_event_frame, &st->put_event_frame)) < 0 ||
		    (e = prepare(st, sql_put_event_stack, &st->put_event_stack)) < 0 ||
		    (e = prepare(st, sql_prune_old, &st->prune_old)) < 0 ||
		    (e = prepare(st, sql_prune_oldest, &st->prune_oldest)) < 0 ||
		    (e = prepare(st, sql_prune_stacks, &st->prune_stacks)) < 0)
			return e;
	}
	if ((e = prepare(st, version == 2 && !st->writable ? sql_events_after_v2 : sql_events_after,
	                 &st->events_after)) < 0 ||
	    (e = prepare(st, sql_event_stacks, &st->event_stacks)) < 0 ||
	    (e = prepare(st, sql_stack_frames, &st->stack_frames)) < 0 ||
	    (e = prepare(st, "BEGIN", &st->read_begin)) < 0 ||
	    (e = prepare(st, "COMMIT", &st->read_end)) < 0 ||
	    (e = prepare(st, sql_id_before_last, &st->id_before_last)) < 0)
		return e;
	return 0;
}

static int open_db(struct store *st)
{
	int flags = st->writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
	int64_t version;
	struct stat sb;
	int rc, e;

	if (st->writable) {
		if ((e = make_parent(st)) < 0 || (e = create_file(st)) < 0)
			return e;
	} else if (stat(st->path, &sb) < 0) {
		e = -errno;
		if (errno == ENOENT)
			snprintf(st->err, sizeof st->err, "database %s does not exist", st->path);
		else
			set_error(st, "%s", strerror(errno));
		return e;
	}
	rc = sqlite3_open_v2(st->path, &st->db, flags, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot open");
	rc = sqlite3_extended_result_codes(st->db, 1);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot open");
	rc = sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot set the busy timeout");
	/* Nothing is written before this check. */
	if ((e = check_version(st, &version)) < 0)
		return e;
	if (st->writable) {
		if ((e = set_pragmas(st)) < 0 || (e = migrate(st)) < 0)
			return e;
	} else if (version == 0) {
		/* The daemon creates the file, then the schema: a reader can
		 * come in between. */
		snprintf(st->err, sizeof st->err, "database %s has no cpumond schema yet",
		         st->path);
		return -EAGAIN;
	}
	return prepare_all(st, version);
}

int store_open(const char *path, bool writable, struct store **out, char *err, size_t errlen)
{
	struct store *st = calloc(1, sizeof *st);
	int e;

	*out = NULL;
	if (!st || !(st->path = strdup(path))) {
		free(st);
		snprintf(err, errlen, "database %s: out of memory", path);
		return -ENOMEM;
	}
	st->writable = writable;
	e = open_db(st);
	if (e < 0) {
		snprintf(err, errlen, "%s", st->err);
		store_close(st);
		return e;
	}
	if (errlen > 0)
		err[0] = '\0';
	*out = st;
	return 0;
}

void store_close(struct store *st)
{
	if (!st)
		return;

	sqlite3_stmt *stmts[] = {
		st->begin, st->commit, st->rollback, st->savepoint, st->release,
		st->rollback_to, st->put_stack, st->put_stack_frame, st->put_event,
		st->put_event_frame, st->put_event_stack, st->events_after, st->event_stacks,
		st->stack_frames, st->read_begin, st->read_end, st->id_before_last,
		st->prune_old, st->prune_oldest, st->prune_stacks,
	};

	if (st->db && !sqlite3_get_autocommit(st->db))
		(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	/* sqlite3_finalize repeats the statement's last error, already reported. */
	for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++)
		(void)sqlite3_finalize(stmts[i]);
	/* With every statement finalized sqlite3_close cannot return BUSY, and
	 * a failed checkpoint on close leaves a valid WAL behind. */
	(void)sqlite3_close(st->db);
	free(st->path);
	free(st);
}

const char *store_error(const struct store *st)
{
	return st ? st->err : "";
}

int store_begin(struct store *st)
{
	int e;

	if (!st->writable) {
		set_error(st, "opened read-only");
		return -EROFS;
	}
	if (st->in_tx) {
		set_error(st, "a transaction is already open");
		return -EINVAL;
	}
	e = run(st, st->begin, "cannot begin a transaction");
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
		e = sql_fail(st, rc, "cannot add stack");
		(void)sqlite3_reset(st->put_stack);
		return e;
	}
	rc = sqlite3_reset(st->put_stack);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot add stack");
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
		    (e = run(st, st->put_stack_frame, "cannot add stack frame")) < 0)
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
			set_error(st, "cannot add event: stack %zu of %zu is empty or mislabelled",
			          i + 1, n);
			return -EINVAL;
		}
		has_key |= c[i].hash == ev->stack.hash;
	}
	if (!has_key) {
		set_error(st, "cannot add event: its key stack is not among its stacks");
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
		    (e = run(st, st->put_event_stack, "cannot add event stack")) < 0)
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
	if ((e = bind_done(st, &b, "cannot add event")) < 0 ||
	    (e = run(st, st->put_event, "cannot add event")) < 0)
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
		    (e = run(st, st->put_event_frame, "cannot add event frame")) < 0)
			return e;
	}
	ev->id = id;
	return 0;
}

/* After a failure inside the cycle's transaction: SQLite may have rolled the
 * whole transaction back itself (SQLITE_FULL, IOERR, NOMEM can); then the
 * rest of the cycle must not run in autocommit mode, and store_commit
 * reports the loss. */
static void note_tx_state(struct store *st, int e)
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
		set_error(st, "cannot add event: no transaction open (call store_begin first)");
		return -EINVAL;
	}
	if (st->tx_failed < 0) {
		set_error(st, "cannot add event: the transaction was rolled back after an "
		          "earlier error");
		return st->tx_failed;
	}
	if (sk->nframes > 0 && (!sk->frames || sk->hash == 0)) {
		set_error(st, "cannot add event: %zu frames without %s", sk->nframes,
		          sk->frames ? "a stack hash" : "a frame array");
		return -EINVAL;
	}
	/* A savepoint per event: a failed event is undone alone and the
	 * cycle's other events still commit. */
	if ((e = run(st, st->savepoint, "cannot add event")) < 0) {
		note_tx_state(st, e);
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
		e = run(st, st->release, "cannot add event");
	if (e == 0)
		return 0;
	memcpy(saved, st->err, sizeof saved);
	if (!sqlite3_get_autocommit(st->db)) {
		/* Each fails only when the savepoint is gone; then SQLite
		 * rolled back the transaction and note_tx_state sees it. */
		if (run(st, st->rollback_to, "rollback") == 0)
			(void)run(st, st->release, "release");
	}
	memcpy(st->err, saved, sizeof saved);
	note_tx_state(st, e);
	return e;
}

int store_commit(struct store *st)
{
	int e;

	if (!st->in_tx) {
		set_error(st, "cannot commit: no transaction open");
		return -EINVAL;
	}
	st->in_tx = false;
	if (st->tx_failed < 0) {
		e = st->tx_failed;
		set_error(st, "the cycle's events are lost: the transaction was rolled back "
		          "after an earlier error");
		if (!sqlite3_get_autocommit(st->db))
			(void)run(st, st->rollback, "rollback");
		st->tx_failed = 0;
		return e;
	}
	e = run(st, st->commit, "cannot commit, the cycle's events are lost");
	if (e < 0 && !sqlite3_get_autocommit(st->db)) {
		char saved[sizeof st->err];

		/* A failed COMMIT leaves the transaction open; end it so
		 * the next cycle starts clean. */
		memcpy(saved, st->err, sizeof saved);
		(void)run(st, st->rollback, "rollback");
		memcpy(st->err, saved, sizeof saved);
	}
	return e;
}

/* A batch of events copied out of the database. */
struct rec {
	struct store_event ev;
	char *host, *watch, *comm, *exe, *thread, *error, *episode_end, *cgroup, *unit;
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
	free(r->counts);
	memset(r, 0, sizeof *r);
}

/* A copy of text column COL, "" for NULL; NULL only when out of memory. */
static char *col_dup(sqlite3_stmt *s, int col)
{
	const unsigned char *t = sqlite3_column_text(s, col);

	return strdup(t ? (const char *)t : "");
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
	r->host = col_dup(s, COL_HOST);
	r->watch = col_dup(s, COL_WATCH);
	r->comm = col_dup(s, COL_COMM);
	r->exe = col_dup(s, COL_EXE);
	r->thread = col_dup(s, COL_THREAD);
	r->error = col_dup(s, COL_ERROR);
	r->episode_end = col_dup(s, COL_EPISODE_END);
	r->cgroup = col_dup(s, COL_CGROUP);
	r->unit = col_dup(s, COL_UNIT);
	if (!r->host || !r->watch || !r->comm || !r->exe || !r->thread || !r->error ||
	    !r->episode_end || !r->cgroup || !r->unit)
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
	f->module = col_dup(s, COL_MODULE);
	f->build_id = col_dup(s, COL_BUILD_ID);
	if (sqlite3_column_type(s, COL_SYMBOL) != SQLITE_NULL)
		f->symbol = col_dup(s, COL_SYMBOL);
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
		set_error(st, "cannot read event stacks: out of memory");
	else if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		e = sql_fail(st, rc, "cannot read event stacks");
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = sql_fail(st, rc, "cannot read event stacks");
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
	    (e = run(st, st->read_begin, "cannot read events")) < 0)
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
		set_error(st, "cannot read events: out of memory");
	} else if (rc != SQLITE_DONE) {
		e = sql_fail(st, rc, "cannot read events");
	}
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = sql_fail(st, rc, "cannot read events");
	if (e == 0 && n > 0)
		e = read_counts(st, recs, n);
	/* Ends the read transaction, whatever happened above. */
	rc = run(st, st->read_end, "cannot read events");
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
		set_error(st, "cannot read events: out of memory");
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
		f->module = col_dup(s, 1);
		f->build_id = col_dup(s, 2);
		f->func_offset = f->offset = f->ip = (uint64_t)sqlite3_column_int64(s, 3);
		if (sqlite3_column_type(s, 4) != SQLITE_NULL && !(f->symbol = col_dup(s, 4)))
			e = -ENOMEM;
		if (!f->module || !f->build_id || e < 0) {
			e = -ENOMEM;
			break;
		}
	}
	if (e == -ENOMEM)
		set_error(st, "cannot read a stack: out of memory");
	else if (rc != SQLITE_DONE)
		e = sql_fail(st, rc, "cannot read a stack");
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK && e == 0)
		e = sql_fail(st, rc, "cannot read a stack");
	if (e == 0 && r.ev.stack.nframes == 0) {
		set_error(st, "no stack %016" PRIx64, hash);
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

int store_size(struct store *st, uint64_t *bytes)
{
	int64_t pages, page_size, free_pages;
	int e;

	if ((e = query_one(st, "PRAGMA page_count", "cannot read the size", &pages, NULL, 0)) < 0 ||
	    (e = query_one(st, "PRAGMA page_size", "cannot read the size", &page_size, NULL, 0)) < 0 ||
	    (e = query_one(st, "PRAGMA freelist_count", "cannot read the size", &free_pages,
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
	if ((e = bind_done(st, &bd, "cannot prune")) < 0 || (e = run(st, s, "cannot prune")) < 0)
		return e;
	*deleted += sqlite3_changes(st->db);
	return 0;
}

int store_prune(struct store *st, int64_t before_us, uint64_t max_bytes, int limit,
                int *deleted, bool *more)
{
	uint64_t size = 0;
	int stacks = 0, e;

	*deleted = 0;
	*more = false;
	if (st->in_tx) {
		set_error(st, "cannot prune inside the cycle's transaction");
		return -EINVAL;
	}
	if ((e = run(st, st->begin, "cannot prune")) < 0)
		return e;
	e = prune_step(st, st->prune_old, before_us, limit, 2, deleted);
	if (e == 0 && *deleted < limit && max_bytes && (e = store_size(st, &size)) == 0 &&
	    size > max_bytes) {
		/* Still too big with nothing too old: the oldest go, a tenth of
		 * the batch at a time, since each may be large. */
		e = prune_step(st, st->prune_oldest, limit / 10 + 1, 0, 1, deleted);
		*more = true;
	}
	if (e == 0)
		e = prune_step(st, st->prune_stacks, 0, 0, 0, &stacks);
	if (e == 0)
		e = run(st, st->commit, "cannot prune");
	if (e < 0) {
		if (!sqlite3_get_autocommit(st->db))
			(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		return e;
	}
	*more |= *deleted >= limit;
	/* Give the freed pages back; a no-op for a database without
	 * auto_vacuum (see set_pragmas). */
	return exec(st, "PRAGMA incremental_vacuum", "cannot shrink the database");
}

int store_id_before_last(struct store *st, int n, int64_t *after_id)
{
	sqlite3_stmt *s = st->id_before_last;
	struct binder b = { .s = s };
	int64_t id = 0;
	int rc, e;

	if (n < 0) {
		set_error(st, "cannot count back a negative number of events (%d)", n);
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
		e = sql_fail(st, rc, "cannot read events");
		(void)sqlite3_reset(s);
		return e;
	}
	rc = sqlite3_reset(s);
	if (rc != SQLITE_OK)
		return sql_fail(st, rc, "cannot read events");
	*after_id = id;
	return 0;
}
