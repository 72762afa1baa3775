#include "cpumond/store.h"
#include "cpumond/store_internal.h"

#include <errno.h>
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

/* Schema v4: what an event is and how its samples were taken.  kind is
 * "hot" for every event of older versions (the only kind they had);
 * capture ("ptrace", "perf") is NULL where no sample was taken; details is
 * a JSON object of the facts only some kinds have, or NULL. */
static const char schema_v4[] =
	"ALTER TABLE events ADD COLUMN kind TEXT NOT NULL DEFAULT 'hot';\n"
	"ALTER TABLE events ADD COLUMN capture TEXT;\n"
	"ALTER TABLE events ADD COLUMN details TEXT;\n"
	"CREATE INDEX events_kind ON events(kind);\n";

/* Schema v5: the usage history, each cycle's busiest threads (store.h).
 * Made to be small, since it grows every cycle: a cycle is one row of
 * cycles; a kept thread one row of history, a WITHOUT ROWID table keyed by
 * (cycle, tid) whose other columns are small integers (SQLite stores 0
 * and 1 in no bytes, up to 127 in one, up to 32767 in two) and one id into
 * labels, which holds what stays the same from one cycle to the next (the
 * watch, pid, process and thread names, threshold), each distinct label
 * once.  Measured (bench/history_bench --size): 28,800 cycles of 10
 * rows, a day at 3 s with 10 of 1,000 threads kept, take 8,065,024 bytes
 * (28 a row, the cycles included): 8 MB a day, 113 MB over the default
 * 14 days of retention.
 * labels.last_seen is refreshed at most hourly (STORE_LABEL_REFRESH_US),
 * which is what retention of labels goes by.  history's rows go with their
 * cycle by ON DELETE CASCADE (a seek on the key's prefix each); no foreign
 * key from history to labels, since deleting a label would then scan
 * history.  events_tid finds a thread's last event for `top`. */
static const char schema_v5[] =
	"CREATE TABLE cycles (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  time INTEGER NOT NULL,\n"
	"  interval INTEGER NOT NULL,\n"
	"  threads INTEGER NOT NULL\n"
	");\n"
	"CREATE INDEX cycles_time ON cycles(time);\n"
	"CREATE TABLE labels (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  watch TEXT NOT NULL,\n"
	"  pid INTEGER NOT NULL,\n"
	"  comm TEXT NOT NULL,\n"
	"  thread TEXT NOT NULL,\n"
	"  threshold INTEGER NOT NULL,\n"
	"  last_seen INTEGER NOT NULL,\n"
	"  UNIQUE (watch, pid, comm, thread, threshold)\n"
	");\n"
	"CREATE TABLE history (\n"
	"  cycle INTEGER NOT NULL REFERENCES cycles(id) ON DELETE CASCADE,\n"
	"  tid INTEGER NOT NULL,\n"
	"  label INTEGER NOT NULL,\n"
	"  usage INTEGER NOT NULL,\n"
	"  run_delay INTEGER NOT NULL,\n"
	"  state INTEGER NOT NULL,\n"
	"  episode INTEGER NOT NULL,\n"
	"  PRIMARY KEY (cycle, tid)\n"
	") WITHOUT ROWID;\n"
	"CREATE INDEX events_tid ON events(tid);\n";

/* Each entry takes the schema from version i to i + 1. */
static const char *const migrations[STORE_SCHEMA_VERSION] = {
	schema_v1,
	schema_v2,
	schema_v3,
	schema_v4,
	schema_v5,
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

void store_set_error(struct store *st, const char *fmt, ...)
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

int store_sql_fail(struct store *st, int rc, const char *what)
{
	const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
	int sys = st->db ? sqlite3_system_errno(st->db) : 0;
	int e = store_errno(st, rc);

	st->last_rc = rc;
	if (((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_CANTOPEN) && sys > 0)
		store_set_error(st, "%s: %s (%s)", what, msg, strerror(sys));
	else
		store_set_error(st, "%s: %s", what, msg);
	return e;
}

int store_run(struct store *st, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);
	int rc2;

	if (rc != SQLITE_DONE) {
		rc = store_sql_fail(st, rc, what);
		(void)sqlite3_reset(s);      /* repeats the error just recorded */
		(void)sqlite3_clear_bindings(s);
		return rc;
	}
	rc2 = sqlite3_reset(s);
	if (rc2 != SQLITE_OK)
		return store_sql_fail(st, rc2, what);
	/* Always SQLITE_OK; drops the pointers to the caller's strings. */
	(void)sqlite3_clear_bindings(s);
	return 0;
}

int store_prepare(struct store *st, const char *sql, sqlite3_stmt **out)
{
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);

	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot prepare statement");
	return 0;
}

int store_exec(struct store *st, const char *sql, const char *what)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, what);
	return 0;
}

int store_query_one(struct store *st, const char *sql, const char *what, int64_t *num,
                    char *buf, size_t buflen)
{
	sqlite3_stmt *s;
	int rc, e = 0;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, what);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		if (num)
			*num = sqlite3_column_int64(s, 0);
		if (buf) {
			const unsigned char *t = sqlite3_column_text(s, 0);

			if (!t && sqlite3_errcode(st->db) == SQLITE_NOMEM)
				e = store_sql_fail(st, SQLITE_NOMEM, what);
			else
				snprintf(buf, buflen, "%s", t ? (const char *)t : "");
		}
	} else if (rc == SQLITE_DONE) {
		store_set_error(st, "%s: no result", what);
		e = -EIO;
	} else {
		e = store_sql_fail(st, rc, what);
	}
	rc = sqlite3_finalize(s);
	if (rc != SQLITE_OK && e == 0)
		e = store_sql_fail(st, rc, what);
	return e;
}

char *store_column_dup(sqlite3_stmt *s, int col)
{
	const unsigned char *t = sqlite3_column_text(s, col);

	return strdup(t ? (const char *)t : "");
}

/* Creates the directory that holds PATH when it is missing, but not its own
 * parent: a missing grandparent means a mistyped path more often than not. */
static int make_parent(struct store *st)
{
	char *copy = strdup(st->path);
	const char *dir;
	int e = 0;

	if (!copy) {
		store_set_error(st, "out of memory");
		return -ENOMEM;
	}
	dir = dirname(copy);
	if (mkdir(dir, 0750) == 0) {
		/* mkdir applies the umask; the mode is part of the contract
		 * (group cpumond reads the log). */
		if (chmod(dir, 0750) < 0) {
			e = -errno;
			store_set_error(st, "cannot set the mode of directory %s: %s", dir, strerror(errno));
		}
	} else if (errno != EEXIST) {
		e = -errno;
		store_set_error(st, "cannot create directory %s: %s", dir, strerror(errno));
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
		store_set_error(st, "cannot create: %s", strerror(errno));
		return e;
	}
	if (fchmod(fd, 0640) < 0) {
		e = -errno;
		store_set_error(st, "cannot set the mode: %s", strerror(errno));
	}
	if (close(fd) < 0 && e == 0) {
		e = -errno;
		store_set_error(st, "cannot create: %s", strerror(errno));
	}
	return e;
}

/* Reads the schema version, refusing a file that is not a database, is from a
 * newer cpumond, or is some other program's database.  Only reads. */
static int check_version_read(struct store *st, int64_t *version)
{
	int64_t tables;
	int e;

	e = store_query_one(st, "PRAGMA user_version", "cannot read the schema version", version,
	                    NULL, 0);
	if (e < 0 && (st->last_rc & 0xff) == SQLITE_NOTADB) {
		store_set_error(st, "not a SQLite database, refusing to touch it");
		return e;
	}
	if (e < 0)
		return e;
	if (*version > STORE_SCHEMA_VERSION) {
		store_set_error(st, "schema version %lld is newer than this cpumond's (%d), "
		                "refusing to touch it", (long long)*version, STORE_SCHEMA_VERSION);
		return -ENOTSUP;
	}
	if (*version < 0) {
		store_set_error(st, "schema version %lld is not cpumond's, refusing to touch it",
		                (long long)*version);
		return -EINVAL;
	}
	if (*version == 0) {
		e = store_query_one(st, "SELECT count(*) FROM sqlite_schema", "cannot read the schema",
		                    &tables, NULL, 0);
		if (e < 0)
			return e;
		if (tables > 0) {
			store_set_error(st, "has tables but no cpumond schema version, "
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
	int e = store_exec(st, "BEGIN", "cannot read the schema version");
	int rc;

	if (e < 0)
		return e;
	e = check_version_read(st, version);
	rc = sqlite3_exec(st->db, e < 0 ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK && e == 0)
		return store_sql_fail(st, rc, "cannot end the schema read");
	return e;
}

static int set_pragmas(struct store *st)
{
	char mode[32];
	int persist, rc, e;

	/* Lets store_prune give freed pages back to the file system.  It takes
	 * effect only while the file has no table yet (a new database); an
	 * older one reuses its free pages instead of shrinking. */
	e = store_exec(st, "PRAGMA auto_vacuum = INCREMENTAL", "cannot set auto_vacuum");
	if (e < 0)
		return e;
	e = store_query_one(st, "PRAGMA journal_mode = WAL", "cannot enable WAL", NULL, mode,
	                    sizeof mode);
	if (e < 0)
		return e;
	if (strcasecmp(mode, "wal") != 0) {
		store_set_error(st, "cannot enable WAL: journal mode stays \"%s\"", mode);
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
		return store_sql_fail(st, rc, "cannot keep the WAL");
	e = store_exec(st, "PRAGMA journal_size_limit = " STORE_WAL_LIMIT, "cannot limit the WAL");
	if (e < 0)
		return e;
	/* In WAL mode NORMAL loses at most the last transactions on power
	 * loss, never consistency, and saves an fsync per cycle. */
	e = store_exec(st, "PRAGMA synchronous = NORMAL", "cannot set synchronous");
	if (e < 0)
		return e;
	return store_exec(st, "PRAGMA foreign_keys = ON", "cannot enable foreign keys");
}

/* Brings the schema from user_version to STORE_SCHEMA_VERSION in one
 * transaction, rereading the version under the write lock in case another
 * writer migrated meanwhile. */
static int migrate(struct store *st)
{
	int64_t version;
	char sql[64];
	int e;

	e = store_exec(st, "BEGIN IMMEDIATE", "cannot begin the schema update");
	if (e < 0)
		return e;
	e = check_version_read(st, &version);
	for (; e == 0 && version < STORE_SCHEMA_VERSION; version++) {
		e = store_exec(st, migrations[version], "cannot update the schema");
		if (e < 0)
			break;
		snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)version + 1);
		e = store_exec(st, sql, "cannot update the schema version");
	}
	if (e == 0)
		return store_exec(st, "COMMIT", "cannot commit the schema update");
	if (!sqlite3_get_autocommit(st->db))
		(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL); /* error already recorded */
	return e;
}

/* The statements of ST, whose schema is at VERSION. */
static int prepare_all(struct store *st, int64_t version)
{
	int e;

	if (st->writable && (e = store_prepare_write(st)) < 0)
		return e;
	if ((e = store_prepare_history(st, version)) < 0)
		return e;
	return store_prepare_read(st, version);
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
			store_set_error(st, "%s", strerror(errno));
		return e;
	}
	rc = sqlite3_open_v2(st->path, &st->db, flags, NULL);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot open");
	rc = sqlite3_extended_result_codes(st->db, 1);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot open");
	rc = sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
	if (rc != SQLITE_OK)
		return store_sql_fail(st, rc, "cannot set the busy timeout");
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
		st->prune_old, st->prune_oldest, st->prune_stacks, st->put_cycle, st->put_label,
		st->put_usage, st->prune_cycles_old, st->prune_cycles_oldest, st->prune_labels,
		st->latest_cycle, st->usage_in,
	};

	if (st->db && !sqlite3_get_autocommit(st->db))
		(void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	/* sqlite3_finalize repeats the statement's last error, already reported. */
	for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++)
		(void)sqlite3_finalize(stmts[i]);
	/* With every statement finalized sqlite3_close cannot return BUSY, and
	 * a failed checkpoint on close leaves a valid WAL behind. */
	(void)sqlite3_close(st->db);
	store_forget_labels(st);
	free(st->path);
	free(st);
}

const char *store_error(const struct store *st)
{
	return st ? st->err : "";
}
