/* history: which threads of a cycle the usage history keeps, and their
 * rows.
 *
 * Per watch, its `history_threads` busiest threads whose usage is over
 * `history_floor` (over as for a threshold: usage > floor), and besides
 * those every thread with an episode of stack samples under way, whatever
 * its usage, so that an event's thread has its line in the chart and its
 * row in `top` for the whole episode.  Those are few: capture runs at most
 * max_dumps_per_second episodes.  A thread over its threshold gets no
 * other favour: it is among the busiest unless more than history_threads
 * of its watch are over, and then the busiest of them are kept.  Not
 * kept: a gated thread (not read this cycle, its usage only a bound; the
 * daemon lowers the gate to history_floor so that no thread over the
 * floor is gated, see watch.c) and a thread seen for the first time (no
 * usage yet).
 *
 * history_select is pure; history_collect reads /proc/PID/task/TID/stat of
 * the kept threads only (their name and state: one read each).
 */
#ifndef CPUMOND_HISTORY_H
#define CPUMOND_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"
#include "cpumond/sampler.h"
#include "cpumond/store.h"
#include "cpumond/watch.h"

/* Whether thread TID has an episode under way (capture's answer). */
typedef bool (*history_episode_fn)(pid_t tid, const void *ctx);

/* The kept threads of T (N threads of PROCS, as sampler_cycle gives them):
 * per watch (procs[t->proc].watch), the KEEP busiest with usage > FLOOR,
 * and every thread for which EPISODE(tid, CTX) is true (EPISODE may be
 * NULL).  Their indexes into T go to OUT (room for N), by watch, then
 * busiest first (usage, then tid ascending).  KEEP 0 keeps nothing.
 * Returns how many. */
size_t history_select(const struct sampler_thread *t, size_t n, const struct watch_proc *procs,
                      int keep, int floor, history_episode_fn episode, const void *ctx,
                      size_t *out);

struct history;

/* Returns NULL when out of memory. */
struct history *history_new(void);
void history_free(struct history *h);

/* The cycle's rows under CFG (history_threads, history_floor, each
 * watch's name and threshold): history_select, then each kept thread's
 * name and state from /proc (a thread gone meanwhile: its row has state
 * '?' and no name).  *ROWS is valid until the next call.  Returns how
 * many rows (0 also when out of memory, which is logged). */
size_t history_collect(struct history *h, const struct config *cfg, const struct watch_proc *procs,
                       const struct sampler_thread *t, size_t n, history_episode_fn episode,
                       const void *ctx, const struct store_usage **rows);

#endif
