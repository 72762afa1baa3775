/* report_usage: `cpumond report --usage`, the busiest threads of a window
 * from the usage history (store.h's store_each_usage_in), as a table,
 * JSON lines, or an SVG chart with the window's events on it.
 *
 * Pure: fed the history's rows and the window's events as plain data
 * (report_read.c reads them), never touching SQLite, so it is tested on its
 * own; the table and JSON are report_usage.c's, the chart
 * report_usage_svg.c's.
 *
 * A thread is one (database, pid, tid).  The history holds a thread only
 * in the cycles it was kept (each watch's busiest over history_floor, and
 * the threads in an episode), so its figures are over those cycles: its
 * mean is the mean of its kept cycles, and its CPU time and time over its
 * threshold count the intervals of those cycles only.  Threads are ranked
 * by that CPU time (usage × interval), then peak, then pid and tid.
 */
#ifndef CPUMOND_REPORT_USAGE_H
#define CPUMOND_REPORT_USAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cpumond/store.h"

/* One kept cycle of a thread. */
struct usage_point {
	int64_t time_us;
	int usage;               /* permille */
};

/* One thread of the window, valid until report_usage_free. */
struct usage_thread {
	size_t source;           /* which database (report_usage_add_row's SOURCE) */
	pid_t pid, tid;
	const char *watch, *comm, *thread;   /* as in its last row */
	int threshold;           /* as in its last row */
	int peak;                /* the highest usage, permille */
	int64_t peak_us;         /* when, the first time */
	double mean;             /* permille, over its kept cycles */
	uint64_t cycles;         /* kept cycles */
	uint64_t cpu_ms;         /* sum of usage × interval over them: CPU time */
	uint64_t over_ms;        /* sum of the intervals with usage over the threshold */
	int64_t first_us, last_us;   /* its first and last kept cycle */
	size_t events;           /* the window's events of it */
	const struct usage_point *points;    /* in time order */
	size_t npoints;
};

/* One event of the window, for the chart's marks. */
struct usage_event {
	size_t source;
	int64_t time_us;
	pid_t pid, tid;
	int usage, threshold;
	const char *comm, *thread;
	const char *frame;       /* its key stack's innermost frame as
	                            stackdump_function_name names it; "" when it
	                            has no stack */
};

struct report_usage;

/* Returns 0 and a new, empty report in *OUT, or -ENOMEM. */
int report_usage_new(struct report_usage **out);

/* Frees U and everything it holds; U may be NULL. */
void report_usage_free(struct report_usage *u);

/* Adds ROW (copied) of database SOURCE; rows of a thread must come in
 * time order (store_each_usage_in gives them so).  Returns 0 or -ENOMEM. */
int report_usage_add_row(struct report_usage *u, size_t source, const struct store_usage *row);

/* Adds event EV (copied: its time, thread, usage and key stack's
 * innermost frame) of database SOURCE.  Returns 0 or -ENOMEM. */
int report_usage_add_event(struct report_usage *u, size_t source, const struct store_event *ev);

/* Ranks the threads and counts each one's events.  Call once, after
 * every row and event.  Returns 0 or -ENOMEM. */
int report_usage_finish(struct report_usage *u);

/* Totals of the window, valid after report_usage_finish. */
struct usage_totals {
	size_t threads;
	size_t events;
	uint64_t rows;
	int64_t first_us, last_us;   /* the first and last row's cycle; 0 when none */
	int64_t last_end_us;         /* the end of the last row's cycle (its time + interval) */
};

void report_usage_totals(const struct report_usage *u, struct usage_totals *t);

/* Thread I in rank (0: the busiest), or NULL when I >= totals.threads. */
const struct usage_thread *report_usage_thread(const struct report_usage *u, size_t i);

/* Event I in time order, or NULL when I >= totals.events. */
const struct usage_event *report_usage_event(const struct report_usage *u, size_t i);

/* The rank of the thread of event EV among the first TOP (0: all) ranked
 * threads, or -1 when it is not among them. */
long report_usage_rank_of(const struct report_usage *u, const struct usage_event *ev, size_t top);

/* The table: one line per thread of the first TOP (0: all), with a head
 * that says the window.  Names escaped for a terminal. */
void report_usage_print_table(const struct report_usage *u, size_t top, FILE *out);

/* One JSON object per thread of the first TOP (0: all) and line. */
void report_usage_print_json(const struct report_usage *u, size_t top, FILE *out);

/* ---- the chart (report_usage_svg.c) ---- */

/* Where a window and the 0..1000 permille range go on the page: time
 * T0_US..T1_US across X0..X0 + W, permille 0..1000 from Y0 + H (bottom) up
 * to Y0. */
struct usage_scale {
	int64_t t0_us, t1_us;
	double x0, w, y0, h;
};

/* The x of T_US (clamped to the window) and the y of PERMILLE (clamped
 * to 0..1000). */
double report_usage_x(const struct usage_scale *s, int64_t t_us);
double report_usage_y(const struct usage_scale *s, int permille);

/* The step of the time axis for a window of SPAN_US: the smallest of 1 s,
 * 5 s, 15 s, 30 s, 1, 5, 15, 30 min, 1, 3, 6, 12 h, 1, 7 d that gives at
 * most MAX_TICKS ticks (the largest when none does). */
int64_t report_usage_tick_us(int64_t span_us, int max_ticks);

/* The chart of the first TOP (0: all) threads over [SINCE_US, UNTIL_US)
 * (0: from the first row / to the end of the last), one polyline per
 * thread (at 0 where it was not kept), a line per distinct threshold among
 * them, every event of the window as a mark, a legend; TITLE and
 * SUBTITLE (may be NULL) head it.  Self-contained (no script, no outside
 * resource): <title> elements give the hover text, names escaped for XML.
 * Returns 0, -ENOMEM, or a negative errno when OUT has a write error. */
int report_usage_write_svg(const struct report_usage *u, size_t top, int64_t since_us,
                           int64_t until_us, const char *title, const char *subtitle, FILE *out);

#endif
