/* store: the SQLite log database.
 *
 * Schema versioned with PRAGMA user_version, WAL so that readers (tail,
 * report) never block the writer, one transaction per sampling cycle, stacks
 * stored once per stack hash.  The writer is the daemon; readers open the
 * file read-only.  Functions return 0 or a negative errno-style value; the
 * words of the last failure are in store_error().
 *
 * Besides the events, the usage history (schema v5): each cycle, the
 * busiest threads the daemon kept (record.h says which), written in the
 * cycle's transaction and read by `top` (store_latest_cycle) and
 * `report --usage` (store_each_usage_in).
 */
#ifndef CPUMOND_STORE_H
#define CPUMOND_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stackdump/stackdump.h"

#define STORE_SCHEMA_VERSION 5

struct store;

/* One distinct stack of an episode and how many of its samples had it. */
struct store_stack_count {
	uint64_t hash;
	unsigned count;
	const struct stackdump_stack *stack;  /* writer: its frames; readers: NULL */
};

/* One overload event.  Strings may be NULL (stored as NULL, read back as ""). */
struct store_event {
	int64_t id;              /* rowid; set by store_add_event and the readers */
	int64_t time_us;         /* CLOCK_REALTIME, microseconds since the epoch */
	const char *kind;        /* what tripped: "hot" (NULL/"" is written as "hot") */
	const char *capture;     /* how the samples were taken: "ptrace", "perf";
	                            NULL/"" when no sample was taken */
	const char *details;     /* the facts of its kind as one JSON object, or
	                            NULL/"" (readers: "" also for text that is
	                            not valid JSON) */
	const char *host;        /* gethostname() of the writer */
	const char *watch;       /* the watch's name */
	pid_t pid;
	pid_t nspid;             /* the pid in the process's own pid namespace (the
	                            last of NSpid; pid in ours); 0 when unknown */
	const char *comm;        /* process name */
	const char *exe;         /* /proc/PID/exe, "" when unknown */
	const char *cgroup;      /* its cgroup v2 path ("/system.slice/nginx.service"),
	                            "" when unknown */
	const char *unit;        /* its systemd unit (watch_read_unit), "" when none */
	pid_t tid;
	const char *thread;      /* thread name (its comm) */
	int usage;               /* permille of one core over the last interval */
	int threshold;           /* permille that applied */
	int consecutive;         /* samples over threshold when the event fired */
	int run_delay;           /* permille of the interval spent waiting on a run queue */
	const char *error;       /* why the stack is missing or partial; NULL/"" if none */
	struct stackdump_stack stack;  /* the key stack: frames of one of its samples
	                                  (may be 0), hash, truncated; stop_ns is the
	                                  median stop of the episode's samples */
	unsigned samples;        /* stack samples taken in the episode */
	uint64_t stop_max_ns;    /* the longest stop of the episode */
	const char *episode_end; /* why the episode ended early; NULL/"" when it ran to the end */
	const struct store_stack_count *stacks;  /* every distinct stack of the episode with
	                                            its count, most frequent first; the
	                                            key stack is stack.hash */
	size_t nstacks;          /* 0 with stack.nframes > 0 means one sample of stack */
};

/* Opens PATH.  WRITABLE: creates the missing parent directory (0750) and the
 * file (0640), enables WAL and creates or migrates the schema.  Read-only:
 * the file must exist.  A database whose user_version is newer than
 * STORE_SCHEMA_VERSION, or that is not a SQLite database, is refused and left
 * untouched.  Returns 0 and *OUT, or a negative errno with the reason in ERR. */
int store_open(const char *path, bool writable, struct store **out, char *err, size_t errlen);

void store_close(struct store *st);

/* The words of the last failure on ST ("" if none). */
const char *store_error(const struct store *st);

/* One transaction per cycle: store_begin, any number of store_add_event,
 * store_commit.  store_add_event inserts the event, its exact frames, and the
 * stack (or bumps its times_seen/last_seen) by ev->stack.hash; sets ev->id. */
int store_begin(struct store *st);
int store_add_event(struct store *st, struct store_event *ev);
int store_commit(struct store *st);

/* Called once per event, oldest first.  EV and everything it points to is
 * valid only during the call.  A non-zero return stops the walk and is
 * returned by the walker. */
typedef int (*store_event_fn)(const struct store_event *ev, void *ctx);

/* Calls FN for every event with id > AFTER_ID, in id order; *LAST_ID gets the
 * id of the last event passed (unchanged when none). */
int store_each_event_after(struct store *st, int64_t after_id, store_event_fn fn, void *ctx,
                           int64_t *last_id);

/* Which events store_each_event_in passes.  Zero / NULL fields do not filter. */
struct store_filter {
	int64_t since_us, until_us;   /* time window, [since, until) */
	const char *watch;
	const char *comm;
	const char *thread;
	const char *kind;
	pid_t pid;
};

/* Calls FN for every event matching F, oldest first, with ev->stacks filled
 * (hashes and counts; their frames come from store_get_stack) and ev->stack
 * holding the key stack's frames. */
int store_each_event_in(struct store *st, const struct store_filter *f, store_event_fn fn,
                        void *ctx);

/* The frames of stack HASH as stored once for every sample: module, build_id,
 * func_offset, symbol; ip and offset are the function start (func_offset).
 * Returns 0, -ENOENT when there is no such stack, or another negative errno.
 * Release with stackdump_stack_free. */
int store_get_stack(struct store *st, uint64_t hash, struct stackdump_stack *out);

/* Bytes of the database in use (its pages less the free ones). */
int store_size(struct store *st, uint64_t *bytes);

/* Retention, in one short transaction outside the cycle's: deletes up to
 * LIMIT events and up to LIMIT history cycles (with their rows) older than
 * BEFORE_US and, while the database is larger than MAX_BYTES (0: no cap),
 * some of the oldest events or cycles whatever their age (whichever is
 * older goes first); then the stacks no event refers to any more and the
 * history names not used since before BEFORE_US; then gives the freed
 * pages back to the file system.  *DELETED gets how many events went,
 * *MORE whether another call has more to do.  Returns 0 or a negative
 * errno. */
int store_prune(struct store *st, int64_t before_us, uint64_t max_bytes, int limit,
                int *deleted, bool *more);

/* ---- usage history ---- */

/* A sampling cycle of the history. */
struct store_cycle {
	int64_t id;              /* ascending with time; set by store_add_cycle and the readers */
	int64_t time_us;         /* CLOCK_REALTIME of the cycle, microseconds since the epoch */
	int interval_ms;         /* the configured interval then */
	unsigned threads;        /* threads the cycle sampled, kept or not */
};

/* One kept thread of a cycle.  Strings: writer, any bytes, NULL as "";
 * readers, never NULL. */
struct store_usage {
	int64_t cycle;           /* readers: the cycle's id (writer: ignored) */
	int64_t time_us;         /* readers: the cycle's time (writer: ignored) */
	int interval_ms;         /* readers: the cycle's interval (writer: ignored) */
	const char *watch;       /* the watch's name */
	pid_t pid;
	const char *comm;        /* process name */
	pid_t tid;
	const char *thread;      /* thread name */
	int usage;               /* permille of one core over the interval, 0..1000 */
	int run_delay;           /* permille of the interval waiting on a run queue; -1 unknown */
	char state;              /* its /proc stat state letter (R, S, D, ...); '?' unknown */
	int threshold;           /* permille that applied (usage > threshold is over) */
	bool episode;            /* an episode of stack samples of it was under way */
	/* store_latest_cycle only (others: 0 and ""): the thread's last event
	 * (same pid and tid) in the database, its key stack's hash, and the
	 * symbol of that stack's innermost frame that has one, as stored
	 * (mangled: stackdump_function_name demangles) */
	int64_t last_event;      /* its id, 0 when it has none */
	uint64_t last_stack;     /* 0 when it has none or no stack */
	const char *last_symbol; /* "" when none */
};

/* Inside the cycle's transaction (store_begin .. store_commit): cycle C
 * (its time, interval and thread count; C->id is set) and its N kept
 * threads ROWS, each tid at most once.  What stays the same of a thread
 * from cycle to cycle (watch, pid, comm, thread, threshold) is stored once
 * as a label and cached, so that a steady cycle writes only its cycle row
 * and N rows of small integers.  All
 * or nothing: on failure nothing of the cycle stays, the cycle's events are
 * not affected, and the return is a negative errno (-EINVAL for a
 * duplicate tid or no open transaction). */
int store_add_cycle(struct store *st, struct store_cycle *c, const struct store_usage *rows,
                    size_t n);

/* Called once per row.  U and its strings are valid only during the call;
 * a non-zero return stops the walk and is returned by the walker. */
typedef int (*store_usage_fn)(const struct store_usage *u, void *ctx);

/* The latest cycle into *C and FN for each of its rows, busiest first
 * (usage, then tid), with last_event, last_stack and last_symbol filled.
 * One read transaction, at most a few ms: the rows are few.  A database
 * without a cycle, or older than v5 (opened read-only, not migrated),
 * gives C->id 0 and no call.  Returns 0, FN's non-zero, or a negative
 * errno. */
int store_latest_cycle(struct store *st, struct store_cycle *c, store_usage_fn fn, void *ctx);

/* FN for every row of the cycles in F's [since, until) (0: open) that
 * matches F's watch, comm, thread and pid (F's kind is ignored), in cycle
 * order, within a cycle by tid.  Read in batches, each its own read
 * transaction, as store_each_event_in does.  An older database (v2..v4)
 * has no history: no call, 0.  Returns 0, FN's non-zero, or a negative
 * errno. */
int store_each_usage_in(struct store *st, const struct store_filter *f, store_usage_fn fn,
                        void *ctx);

/* The id after which exactly the last N events follow (0 when there are
 * fewer), for `tail -n N`. */
int store_id_before_last(struct store *st, int n, int64_t *after_id);

#endif
