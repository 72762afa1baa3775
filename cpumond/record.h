/* record: where a finished event goes, and the daemon's files.
 *
 * An event is logged (one line), sent to the journal, counted, and queued;
 * record_flush writes the queue, and the cycle's usage history, to the
 * database in one transaction per cycle and then appends the committed
 * events to the event log.  While
 * the database cannot be written (a full disk) sampling goes on: the
 * newest RECORD_UNSAVED_MAX events wait in memory, the failure is logged at
 * most once a minute, and the next flush tries again.  Retention and the
 * metrics file are written from here too.
 */
#ifndef CPUMOND_RECORD_H
#define CPUMOND_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "cpumond/capture.h"
#include "cpumond/metrics.h"
#include "cpumond/store.h"

/* Events kept in memory while the database cannot be written: about 1 KiB
 * each with their stacks. */
#define RECORD_UNSAVED_MAX 1000

struct record;

/* Records into ST, the database opened for writing, which it takes over
 * (also when it fails), and opens CFG's event_log.  CFG gives the event
 * log, journal, retention, max_database_size and metrics_file, and must
 * stay valid until record_configure gives another, or record_free.  Events
 * are counted in METRICS, which record_write_metrics writes.  Returns NULL
 * when out of memory. */
struct record *record_new(struct store *st, const struct config *cfg, struct metrics *metrics);

/* Says how many events are lost (never written to the database), frees
 * them, closes the database and the event log. */
void record_free(struct record *r);

/* After a reload: CFG's settings apply from now on (the database stays
 * the one opened). */
void record_configure(struct record *r, const struct config *cfg);

/* On SIGHUP: opens the event log again, so that after logrotate moved it
 * away new events go to a new file. */
void record_reopen(struct record *r);

/* A finished event: logs its line, sends it to the journal (journal = yes
 * and stderr is the journal), counts it, and queues it for record_flush.
 * Takes EV over.  When the queue is full the oldest event goes. */
void record_event(struct record *r, struct capture_event *ev);

/* The cycle's usage history: the threads history.h keeps of THREADS (N,
 * of PROCS, as sampler_cycle gave them; in episode as C says), with the
 * cycle's time and interval, for the next record_flush to write in its
 * transaction.  One cycle waits at most: a cycle the database did not
 * take is dropped, not queued.  Nothing when history_threads is 0. */
void record_history(struct record *r, const struct watch_proc *procs,
                    const struct sampler_thread *threads, size_t n, const struct capture *c);

/* Writes the queued events and the cycle's history (record_history) in
 * one transaction, then appends the events to the event log; events the
 * database does not take stay queued. */
void record_flush(struct record *r);

/* One batch of retention when it is due at NOW_MS (monotonic): events past
 * `retention`, and the oldest while the database is over
 * max_database_size.  Hourly, a batch a call until done. */
void record_prune(struct record *r, uint64_t now_ms);

/* Rewrites metrics_file, if set; says once when it cannot, and when it can
 * again. */
void record_write_metrics(struct record *r);

/* Events recorded since the start. */
uint64_t record_events(const struct record *r);

#endif
