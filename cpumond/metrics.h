/* metrics: the daemon's counters as a Prometheus text file.
 *
 * node_exporter's textfile collector reads *.prom files from a directory;
 * cpumond rewrites its file every cycle (a temporary file renamed over the
 * old one, so a scrape never reads half of it).  Labels carry only the
 * watch's name and a few fixed words: thread ids and stack hashes stay in
 * the database and the journal, where their cardinality does no harm.
 */
#ifndef CPUMOND_METRICS_H
#define CPUMOND_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "cpumond/kind.h"

/* Why a stack dump failed, as the reason label says it. */
enum metrics_failure {
	METRICS_EXITED,          /* the thread exited */
	METRICS_DENIED,          /* ptrace refused: another tracer, privileges */
	METRICS_BLOCKED,         /* uninterruptible sleep, or did not stop in time */
	METRICS_OTHER,
	METRICS_NFAILURES
};

/* How a sample was taken, as the capture label says it. */
enum metrics_capture {
	METRICS_PTRACE,          /* a ptrace stop */
	METRICS_PERF,            /* the kernel's perf sample: no stop */
	METRICS_NCAPTURES
};

struct metrics;

/* Counters for CFG's watches.  Returns NULL when out of memory. */
struct metrics *metrics_new(const struct config *cfg);
void metrics_free(struct metrics *m);

/* After a reload: counters of watches that kept their name carry over
 * (counters never go back), the others start at 0.  Returns 0 or -ENOMEM
 * (then M is unchanged). */
int metrics_reconfigure(struct metrics *m, const struct config *cfg);

/* A cycle starts: the gauges (processes, threads, hottest thread) restart. */
void metrics_cycle_start(struct metrics *m);
/* One watched thread of watch W this cycle, with its usage (-1: none yet). */
void metrics_thread(struct metrics *m, size_t w, int usage);
void metrics_process(struct metrics *m, size_t w);
/* The cycle's own CPU time. */
void metrics_cycle_cost(struct metrics *m, uint64_t cpu_ns);

/* Events and dumps are counted by watch name: an episode may end after a
 * reload has renumbered the watches.  An unknown name is not counted.
 * Events also by KIND (the `kind` label). */
void metrics_event(struct metrics *m, const char *watch, enum kind kind);
/* A sample taken by CAPTURE; STOP_NS, how long the thread was stopped, is
 * observed for ptrace samples only. */
void metrics_dump(struct metrics *m, const char *watch, enum metrics_capture capture,
                  uint64_t stop_ns);
void metrics_dump_failed(struct metrics *m, const char *watch, enum metrics_failure why);

/* Writes the exposition text (HELP, TYPE, samples) to OUT. */
void metrics_format(const struct metrics *m, FILE *out);

/* Writes PATH atomically (PATH.tmp, then rename).  Returns 0 or -errno. */
int metrics_write(const struct metrics *m, const char *path);

#endif
