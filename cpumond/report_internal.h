/* report_internal: what the files of `cpumond report` share besides
 * report.h, for them only (main.c and the tests use report.h).
 *
 *   report.c            the command: --by, --since/--until, report_run
 *   report_read.c       the window's events from the databases (store.h)
 *   report_aggregate.c  frame names, ignore rules, groups, ranks (pure)
 *   report_table.c      the table          report_json.c    --json
 *   report_folded.c     --folded           report_svg.c     --svg
 *   report_pprof.c      --pprof
 *   report_usage.c      --usage (report_usage.h): its aggregation, table, JSON;
 *   report_usage_svg.c  its chart
 */
#ifndef CPUMOND_REPORT_INTERNAL_H
#define CPUMOND_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpumond/report.h"
#include "cpumond/report_usage.h"

/* The buffer of one frame name: longer names are cut to
 * REPORT_NAME_LEN - 1 bytes. */
#define REPORT_NAME_LEN 512

/* report_read.c.  Adds to R the events of OPT's window (and the frames of
 * their stacks) from every database of OPT, each opened read-only and
 * closed before it returns; one given twice is read once, with a warning.
 * Returns 0, or a negative errno after logging the reason (the path of the
 * database that failed when there are several). */
int report_read(const struct report_options *opt, struct report *r);

/* report_read.c.  Adds to U the usage history's rows of OPT's window and
 * filters (watch, comm, thread, pid) and the window's events, from every
 * database of OPT, as report_read does.  Returns 0, or a negative errno
 * after logging the reason. */
int report_read_usage(const struct report_options *opt, struct report_usage *u);

/* report_svg.c.  Writes the filters of OPT, each as ", since T",
 * ", watch NAME" and so on, names escaped for a terminal. */
void report_put_filter(const struct report_options *opt, FILE *out);

/* report.c.  The file to write an output to: PATH created (or emptied), or
 * OUT when PATH is "-".  Returns 0 and *FILE, or a negative errno after
 * logging the reason. */
int report_open_output(const char *path, FILE *out, FILE **file);

/* report.c.  Closes FILE from report_open_output (not OUT); E is what
 * writing it gave.  Returns E, or the failure of the close, either logged
 * as "cannot write PATH". */
int report_close_output(FILE *file, FILE *out, const char *path, int e);

/* report.c.  Writes T_US (µs since the epoch) as "2026-11-29 13:04:05" in
 * local time, with " +0100" when ZONE; "@T_US" when it has no local
 * time. */
void report_put_local(int64_t t_us, bool zone, FILE *out);

/* report_svg.c.  Draws R's stacks as an SVG flame graph to opt->svg_path
 * ("-": OUT), its subtitle the samples, events, window and filters of OPT.
 * Returns 0, or a negative errno after logging the reason (out of memory,
 * the file cannot be written). */
int report_write_svg(const struct report_options *opt, const struct report *r, FILE *out);

/* report_pprof.c.  Writes R's samples as a gzipped pprof profile to
 * opt->pprof_path ("-": OUT).  Returns 0, or a negative errno after logging
 * the reason (out of memory, the file cannot be written). */
int report_write_pprof(const struct report_options *opt, const struct report *r, FILE *out);

/* How many groups of totals T an output shows for TOP (0 or less: all). */
static inline size_t report_shown(const struct report_totals *t, int top)
{
	return top > 0 && (size_t)top < t->groups ? (size_t)top : t->groups;
}

/* PART of WHOLE as a fraction, 0 when WHOLE is 0. */
static inline double report_share(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0.0;
}

#endif
