/* top: `cpumond top`, a live view of what the daemon measured in its latest
 * cycle.
 *
 * The daemon keeps each cycle's busiest threads in the database (the usage
 * history, store.h); top shows the latest cycle's, one row a thread: usage
 * with a bar, run delay, state, process and thread, the threshold that
 * applied, a mark when the thread is over it or in an episode, and the
 * innermost named function of the thread's last event.  It reads the
 * database only, read-only (WAL: it never blocks the daemon, and it holds
 * no read transaction between polls), and never reads /proc: a member of
 * the cpumond group can run it.
 *
 * The view (top_select .. top_format, top_view.c) is pure: rows in,
 * text out, tested on its own.  top_run (top.c) polls the database, keeps
 * the terminal (raw mode, the window's size, the keys) and draws.
 */
#ifndef CPUMOND_TOP_H
#define CPUMOND_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* One thread of a cycle.  Names are the bytes the daemon stored (hostile:
 * the view escapes them). */
struct top_thread {
	char *watch;            /* the watch it was measured for */
	char *comm;             /* process name */
	char *thread;           /* thread name */
	pid_t pid, tid;
	int usage;              /* permille of one core over the cycle's interval */
	int run_delay;          /* permille of the interval spent waiting on a run
	                           queue; -1 when unknown */
	int threshold;          /* permille that applied to it (usage > threshold
	                           is over); 0 when unknown */
	char state;             /* /proc state letter (R, S, D, t, ...); '?' unknown */
	bool episode;           /* an episode of stack samples of it was under way */
	char *frame;            /* the innermost named function of its last event
	                           (demangled); NULL when none */
};

/* The latest cycle: when it was measured and its threads, in any order. */
struct top_cycle {
	int64_t id;             /* grows with every cycle; 0: none recorded yet */
	int64_t time_us;        /* CLOCK_REALTIME, microseconds since the epoch */
	int interval_ms;        /* the daemon's interval then */
	struct top_thread *threads;
	size_t nthreads;
};

void top_cycle_free(struct top_cycle *c);

enum top_order {
	TOP_BY_USAGE,           /* busiest first (the default; key u) */
	TOP_BY_RUN_DELAY,       /* longest run queue wait first (key d) */
};

/* Fills OUT (room for N) with the threads of T[0..N) of watch WATCH (NULL:
 * all), sorted by BY, highest first; ties by the other measure, then by
 * tid.  Returns how many it put. */
size_t top_select(const struct top_thread *t, size_t n, const char *watch, enum top_order by,
                  const struct top_thread **out);

/* The watch after CURRENT among those of T[0..N), in name order, for key
 * w: the first after NULL (all watches), NULL after the last (all again).
 * A CURRENT that no thread has any more goes to the first after it. */
const char *top_next_watch(const struct top_thread *t, size_t n, const char *current);

/* Cells of the usage bar; each is 100‰, in eighths. */
#define TOP_BAR_CELLS 10

/* The bar of PERMILLE (clamped to 0..1000, rounded to an eighth of a
 * cell): full blocks and one eighth block (U+2588, U+258F..U+2589), padded
 * with spaces to TOP_BAR_CELLS columns, into BUF of LEN bytes
 * (TOP_BAR_CELLS * 3 + 1 is enough; a shorter BUF gets whole characters
 * only). */
void top_bar(int permille, char *buf, size_t len);

/* What top_format draws. */
struct top_screen {
	const struct top_cycle *cycle;
	enum top_order by;
	const char *watch;      /* only this watch's threads; NULL: all */
	int rows;               /* at most this many thread rows; 0: all */
	int width;              /* cut every line to this many columns; 0: do not */
	int64_t now_us;         /* CLOCK_REALTIME, for the cycle's age */
	bool keys;              /* say the keys in the header (the live view) */
	const char *note;       /* without a cycle, why (the database is missing,
	                           ...) instead of the default words; escaped */
	const char *eol;        /* what ends a line: "\n", or on the screen
	                           "\033[K\n" (erase the rest of the old line) */
};

/* The header (the cycle's time and age, the threads shown of how many, the
 * order, the watch), the column heads with the order's column marked, and
 * one row a thread:
 *
 *   cpumond top  13:04:05 (1 s ago, every 3 s)  2 of 2 threads  by usage  watch all
 *   !* USAGE‰▼ BAR         DELAY‰ S LIMIT PROCESS[PID]         THREAD/TID          WATCH      LAST EVENT
 *   !*     987 █████████▉      12 R   800 hotchain[4242]       hot-0/4250          hot        hot_leaf
 *            0                  3 S   800 hotchain[4242]       idle-1/4251         hot        -
 *
 * (tests/unit/test_top.c pins these bytes.)  "!" marks a thread over its
 * threshold, "*" one in an episode; "-" is an unknown run delay or
 * threshold, or no last event, "?" an unknown state.  Names are
 * escaped (stackdump_put_escaped), each cell cut to its width ("…") with
 * its pid or tid kept whole, so no byte of a name moves the cursor.
 * Without a cycle, the header says none was recorded yet. */
void top_format(const struct top_screen *s, FILE *out);

/* How `cpumond top` runs. */
struct top_options {
	const char *database;   /* path of the log database */
	int rows;               /* -n N: at most N threads (0: all, or as many as fit) */
	const char *watch;      /* --watch W: start with watch W's threads only */
	bool once;              /* --once: one table of plain lines, then return */
};

/* Runs `cpumond top`: a full-screen view redrawn at every new cycle (the
 * database polled every TOP_POLL_MS; a database that does not exist or
 * has no schema yet is waited for, saying so) until q, SIGINT, SIGTERM or
 * SIGHUP, the terminal restored on every way out; with opt->once or when
 * stdout is not a terminal, one table of plain lines.  Returns 0, or a negative
 * errno after saying why on stderr (-ENOENT, -EACCES, ...: the database
 * cannot be opened; others: it could not be read, or the terminal
 * written). */
int top_run(const struct top_options *opt);

/* Between polls of the database for a new cycle. */
#define TOP_POLL_MS 250

#endif
