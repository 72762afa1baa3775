/* report: which code paths cost the CPU, from the log database.
 *
 * `cpumond report` reads the events of a time window, counts the samples of
 * every stack their episodes saw, groups the stacks (exact hash, symbolic
 * signature, innermost function or entry point) and ranks the groups, or
 * writes every sample as folded stacks or as an SVG flame graph.  It opens
 * the database read-only and never blocks the daemon.
 *
 * Several databases (copied from many hosts) make one window: a stack hash
 * is the same for the same build on every host (README.md, "Stack
 * identity"), so their stacks count together, and each group says on which
 * hosts (the events' host column) its samples were taken.
 *
 * The aggregation (report_new .. report_frame_ignored, report_aggregate.c)
 * is pure: it is fed plain events and stacks and never touches SQLite, so
 * it is tested on its own; report_run (report.c) reads the window through
 * store's readers (report_read.c) into it and writes one output form, each
 * in its own file: report_table.c, report_json.c, report_folded.c,
 * report_svg.c (the SVG itself is flamegraph.c's) and report_pprof.c (the
 * encoding is pprof.c's).
 *
 * A report counts functions, never instructions (the stacks it reads keep
 * each frame's function start only), so its frames are spelled as
 * functions (stackdump.h): "module@0xSTART" when unnamed.  Frame names
 * (report_frame_name) come in three styles:
 *   REPORT_NAME_EXACT      stackdump_function_name: the symbol as stored,
 *                          else "module@0xFUNC_OFFSET" (module as its file
 *                          name): folded stacks, the flame graph, the
 *                          table's frames;
 *   REPORT_NAME_FUNCTION   the symbol without compiler suffixes, else
 *                          "module@0xFUNC_OFFSET": --by top-frame and entry,
 *                          where an unnamed function of one build still
 *                          needs telling apart from its neighbours;
 *   REPORT_NAME_SIGNATURE  the symbol without compiler suffixes, else
 *                          "[module]": --by signature and the ignore regex,
 *                          because offsets change from one build to the next
 *                          and a signature must not.
 */
#ifndef CPUMOND_REPORT_H
#define CPUMOND_REPORT_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cpumond/store.h"
#include "stackdump/stackdump.h"
#include "stackdump/symbolize.h"

/* The sample interval of a profile (--pprof) when report reads no
 * configuration: the daemon's default sample_interval (cpumond.conf(5)). */
#define REPORT_SAMPLE_INTERVAL_DEFAULT_MS 50

/* How stacks are grouped. */
enum report_by {
	REPORT_BY_EXACT,         /* the stack hash: one code path of one build */
	REPORT_BY_SIGNATURE,     /* function names without suffixes or ignored frames */
	REPORT_BY_TOP_FRAME,     /* the innermost function */
	REPORT_BY_ENTRY,         /* the outermost function that is not ignored */
};

struct report_options {
	const char *database;    /* path of the log database, when ndatabases is 0 */
	const char *const *databases;  /* or several, read as one window (-d a -d b) */
	size_t ndatabases;
	int64_t since_us;        /* window [since, until), µs since the epoch; 0: open */
	int64_t until_us;
	const char *watch;       /* filters; NULL / 0: any */
	const char *comm;
	const char *thread;
	const char *host;        /* the events' host, as stored */
	const char *kind;        /* the events' kind (kind.h names); NULL: any */
	pid_t pid;
	const char *unit;        /* fnmatch(3) glob of the events' unit; NULL: any */
	const char *cgroup;      /* regex of the events' cgroup, as written; NULL: any */
	const regex_t *cgroup_re;/* it compiled (config_compile_regex); valid when cgroup */
	enum report_by by;
	bool usage;              /* the usage history's busiest threads instead of the
	                            events' stacks (report_usage.h): a table, JSON
	                            lines, or with svg_path a chart; top is the
	                            threads shown */
	bool json;               /* one JSON object per group and line */
	bool folded;             /* every sample as folded stacks */
	const char *svg_path;    /* write an SVG flame graph there ("-": OUT) */
	const char *pprof_path;  /* write a gzipped pprof profile there ("-": OUT) */
	uint64_t sample_interval_ms;  /* between two samples of an episode, for the
	                                 profile's cpu time; 0:
	                                 REPORT_SAMPLE_INTERVAL_DEFAULT_MS */
	const regex_t *ignore;   /* system frames besides the built-in ones
	                            (report_frame_ignored): [report] ignore or
	                            --ignore; NULL: the built-in ones only */
	int top;                 /* groups shown; 0: all; < 0: 10 for the table,
	                            all for JSON */
	struct symbolize *names; /* functions named at read time (their names
	                            and file:line, symbolize.h); NULL: as
	                            stored */
};

/* ---- The command (report.c) ---- */

/* Runs `cpumond report` and writes to OUT (the SVG to svg_path, the
 * profile to pprof_path).  Events without a host (none is stored) take the
 * path of their database as host.  A database given twice (the same file)
 * is read once, with a warning.  Returns 0, or a negative errno after
 * logging the reason: a database is missing or unreadable (the message
 * names the path), the SVG or profile file cannot be written, out of
 * memory. */
int report_run(const struct report_options *opt, FILE *out);

/* Reads a --by argument: "exact", "signature", "top-frame", "entry".
 * Returns 0 and *BY, or -EINVAL (*BY unchanged). */
int report_parse_by(const char *text, enum report_by *by);

/* The name report_parse_by reads for BY; "?" for a value outside the enum. */
const char *report_by_name(enum report_by by);

/* A --since/--until argument to microseconds since the epoch:
 *   "now"; a duration with its unit, as config_parse_duration reads it
 *   ("90s", "30m" or "30min", "1h", "2d", "2w", "500ms"): that long before
 *   NOW_US;
 *   RFC 3339: "2026-11-29T13:04:05Z", "2026-11-29T13:04:05.250+01:00"
 *   (T or a space, Z or z, up to 9 fractional digits, cut to µs);
 *   without a zone, "2026-11-29T13:04:05" and "2026-11-29" (midnight) are
 *   local time.
 * Returns 0 and *OUT_US, or -EINVAL (nothing written). */
int report_parse_time(const char *text, int64_t now_us, int64_t *out_us);

/* ---- Frame names and the aggregation (report_aggregate.c, pure) ---- */

/* The function name SYMBOL without the suffixes compilers give to clones
 * and split parts of a function, repeated ones too: .constprop.N, .isra.N,
 * .part.N, .cold, .cold.N, .lto_priv.N, .llvm.N, .localalias
 * ("hot.isra.0.cold" is "hot").  Written to BUF, cut to LEN - 1 bytes; the
 * return value is the length of the whole stripped name, as snprintf. */
size_t report_signature_name(const char *symbol, char *buf, size_t len);

enum report_name { REPORT_NAME_EXACT, REPORT_NAME_FUNCTION, REPORT_NAME_SIGNATURE };

/* The name of frame F in STYLE (see the top of this file), cut to LEN - 1
 * bytes.  Bytes are copied as they are: escape them for the output. */
void report_frame_name(const struct stackdump_frame *f, enum report_name style, char *buf,
                       size_t len);

/* The aggregation of one window. */
struct report;

/* Returns 0 and a new aggregation in *OUT, or -ENOMEM.  IGNORE (may be
 * NULL), the system frames besides the built-in ones, must outlive it. */
int report_new(enum report_by by, const regex_t *ignore, struct report **out);

/* Frees R and everything it holds; R may be NULL. */
void report_free(struct report *r);

/* Whether the frames of stack HASH were given (report_add_stack). */
bool report_has_stack(const struct report *r, uint64_t hash);

/* Gives the frames of stack ST->hash (copied).  A stack that events refer
 * to but that is never given counts as a stack without frames.  Returns 0,
 * -EEXIST when it was given already, or -ENOMEM. */
int report_add_stack(struct report *r, const struct stackdump_stack *st);

/* Counts event EV (copied): ev->stacks with their counts, or, when
 * ev->nstacks is 0, one sample of its key stack; an event without a stack
 * only counts as an event.  Returns 0 or -ENOMEM.  Add every event before
 * report_finish. */
int report_add_event(struct report *r, const struct store_event *ev);

/* Groups and ranks.  Groups are ranked by samples, then events, both
 * descending, then first seen and group name ascending.  Returns 0 or
 * -ENOMEM. */
int report_finish(struct report *r);

/* Totals of the window, valid after report_finish. */
struct report_totals {
	uint64_t events;         /* all events, with a stack or not */
	uint64_t events_no_stack;/* events that have no stack */
	uint64_t samples;        /* stack samples of all events */
	size_t stacks;           /* distinct exact stacks */
	size_t groups;
	int64_t first_us;        /* time of the first and last event; 0 when none */
	int64_t last_us;
	size_t hosts;            /* distinct hosts of all events */
};

/* Copies R's totals to *T. */
void report_totals(const struct report *r, struct report_totals *t);

/* How R groups its stacks (report_new's BY). */
enum report_by report_grouped_by(const struct report *r);

struct report_process {
	const char *host;
	pid_t pid;
	const char *comm;
	const char *unit;        /* its systemd unit, "" when none or unknown */
	const char *cgroup;      /* its cgroup v2 path, "" when unknown */
	uint64_t samples;        /* of the group, in this process */
};

struct report_host {
	const char *host;
	uint64_t samples;        /* of the group, on this host */
	uint64_t events;         /* events of the group on this host */
};

/* One group, valid until report_free. */
struct report_group {
	const char *name;        /* exact: the hash as 16 hex digits; signature:
	                            FNV-1a 64 of the signature text as 16 hex
	                            digits; top-frame, entry: the function */
	const char *signature;   /* the signature: names, outermost first, joined
	                            by ';' (every --by) */
	uint64_t samples;
	uint64_t events;         /* events with at least one sample in the group */
	uint64_t key_events;     /* events whose key stack is in the group */
	int64_t first_us;        /* time of the first and last of those events */
	int64_t last_us;
	size_t stacks;           /* distinct exact stacks in the group */
	const struct stackdump_stack *stack;  /* its stack with the most samples */
	size_t entry;            /* index in stack of the outermost frame that is
	                            not ignored (the last frame when all are) */
	const struct report_process *procs;   /* most samples first; a pid of
	                                         another host is another process,
	                                         and one in another comm, unit or
	                                         cgroup (moved) another entry */
	size_t nprocs;
	const struct report_host *hosts;      /* most samples first, then by name */
	size_t nhosts;
	size_t threads;          /* distinct (host, pid, tid) */
	const char *const *thread_names;      /* distinct, sorted */
	size_t nthread_names;
	unsigned captures;       /* REPORT_CAPTURE_* of its events' samples */
};

/* How the samples of a group's events were taken (store_event's capture). */
#define REPORT_CAPTURE_PTRACE 1u
#define REPORT_CAPTURE_PERF   2u

/* Group I (0: the first in rank), or NULL when I >= totals.groups. */
const struct report_group *report_group(const struct report *r, size_t i);

/* Exact stack I (0 ..totals.stacks - 1, in no particular order) and its
 * samples in the window, for the folded stacks and the flame graph. */
const struct stackdump_stack *report_stack(const struct report *r, size_t i,
                                           uint64_t *samples);

/* COUNT samples of STACK that one event took of its thread. */
struct report_sample {
	const struct stackdump_stack *stack;
	uint64_t count;
	int64_t time_us;         /* the event's */
	const char *host, *watch, *kind, *comm, *thread;   /* "" when not stored */
	pid_t pid, tid;
};

/* Called for each sample of report_each_sample; valid during the call.  A
 * non-zero return stops the walk. */
typedef int (*report_sample_fn)(const struct report_sample *s, void *ctx);

/* Calls FN for every stack of every event with its count, events in the
 * order they were added, each event's stacks as it gave them: the window's
 * samples with the event they belong to (the folded stacks sum the same
 * counts by stack).  Returns 0 or what FN returned to stop. */
int report_each_sample(const struct report *r, report_sample_fn fn, void *ctx);

/* Whether frame F is a system frame: its REPORT_NAME_SIGNATURE name is one
 * of the C runtime's start frames, which are always ignored (_start,
 * __libc_start_main, __libc_start_main_impl, __libc_start_call_main,
 * start_thread, clone, __clone, clone3, __clone3), or matches the ignore
 * regex, which adds to them. */
bool report_frame_ignored(const struct report *r, const struct stackdump_frame *f);

/* ---- The output forms, each in its file (report_table.c, report_json.c,
 * report_folded.c) ---- */

/* The ranked table: a summary, then per group its rank, samples, share of
 * all samples, events, key events, threads, first and last seen (local
 * time), processes, and the representative stack's innermost frames and
 * entry point.  When the events come from more than one host, a hosts
 * column, a line naming each group's hosts, and processes as comm[pid]@host.
 * TOP groups (0: all).  Names are escaped. */
void report_print_table(const struct report *r, int top, FILE *out);

/* One JSON object per group and line, in rank order; TOP as above.  Each
 * process carries its host, and "hosts" lists the group's hosts with their
 * events and samples. */
void report_print_json(const struct report *r, int top, FILE *out);

/* Every stack of the window with its samples, one line each:
 * "outer;...;inner COUNT", REPORT_NAME_EXACT names with ';' and control
 * bytes escaped, lines sorted, identical lines merged.  Returns 0, or
 * -ENOMEM with nothing written. */
int report_print_folded(const struct report *r, FILE *out);

#endif
