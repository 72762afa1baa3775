#include "cpumond/record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpumond/clock.h"
#include "cpumond/eventfmt.h"
#include "cpumond/history.h"
#include "cpumond/log.h"
#include "cpumond/service.h"
#include "cpumond/store.h"

/* Retention runs hourly, in batches of events small enough (a few ms) not
 * to delay a cycle, one batch per cycle until done. */
#define PRUNE_PERIOD_MS 3600000
#define PRUNE_BATCH 1000

struct record {
	const struct config *cfg;
	struct metrics *metrics;
	struct store *store;
	char host[256];
	FILE *event_log;                 /* JSON lines, or NULL */
	struct capture_event *unsaved[RECORD_UNSAVED_MAX];   /* not yet in the database */
	size_t nunsaved;
	uint64_t unsaved_dropped;        /* dropped while the database could not be written */
	uint64_t store_error_ms;         /* last time a store failure was logged */
	uint64_t events;
	bool metrics_failing;            /* the metrics file could not be written */
	uint64_t next_prune_ms;          /* when retention runs next */
	bool pruning;                    /* a retention run is under way */
	int pruned;                      /* events it deleted so far */
	struct history *history;         /* the kept threads' rows; NULL when out of memory */
	bool cycle_pending;              /* record_history gave a cycle to write */
	struct store_cycle cycle;
	const struct store_usage *cycle_rows;   /* the history's, valid until its next collect */
	size_t ncycle_rows;
};

/* event_log is opened for appending, 0640 like the database. */
void record_reopen(struct record *r)
{
	int fd;

	if (r->event_log)
		fclose(r->event_log);
	r->event_log = NULL;
	if (!r->cfg->event_log)
		return;
	fd = open(r->cfg->event_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0 || !(r->event_log = fdopen(fd, "a"))) {
		log_errno(LOG_WARNING, errno, "cannot open the event log %s", r->cfg->event_log);
		if (fd >= 0)
			close(fd);
	}
}

struct record *record_new(struct store *st, const struct config *cfg, struct metrics *metrics)
{
	struct record *r = calloc(1, sizeof *r);

	if (!r) {
		store_close(st);
		return NULL;
	}
	r->cfg = cfg;
	r->metrics = metrics;
	r->store = st;
	r->history = history_new();
	if (gethostname(r->host, sizeof r->host - 1) < 0)
		snprintf(r->host, sizeof r->host, "unknown");
	record_reopen(r);
	return r;
}

void record_free(struct record *r)
{
	if (!r)
		return;
	if (r->nunsaved || r->unsaved_dropped)
		log_msg(LOG_ERR, "%zu %s could not be written to the database and %s lost "
		        "(%" PRIu64 " more were dropped while it was failing)", r->nunsaved,
		        log_plural(r->nunsaved, "event", "events"), r->nunsaved == 1 ? "is" : "are",
		        r->unsaved_dropped);
	for (size_t i = 0; i < r->nunsaved; i++)
		capture_event_free(r->unsaved[i]);
	if (r->event_log)
		fclose(r->event_log);
	store_close(r->store);
	history_free(r->history);
	free(r);
}

void record_configure(struct record *r, const struct config *cfg)
{
	r->cfg = cfg;
}


uint64_t record_events(const struct record *r)
{
	return r->events;
}

/* Logs a failing store at most once a minute: a full disk must not flood
 * the journal while sampling goes on. */
static void store_failed(struct record *r, const char *what)
{
	uint64_t now = clock_mono_ms();

	if (r->store_error_ms && now - r->store_error_ms < 60000)
		return;
	r->store_error_ms = now;
	log_msg(LOG_ERR, "cannot %s: %s", what, store_error(r->store));
}

static int cmp_count_desc(const void *a, const void *b)
{
	const struct store_stack_count *x = a, *y = b;

	return (x->count < y->count) - (x->count > y->count);
}

/* CE as the store sees it: EV borrows CE's strings and stacks, and COUNTS,
 * which has room for every distinct stack of the episode. */
static void event_of(const struct record *r, const struct capture_event *ce,
                     struct store_event *ev, struct store_stack_count *counts)
{
	const struct episode *ep = &ce->ep;
	int key = episode_key(ep);

	*ev = (struct store_event){
		.time_us = ce->time_us, .kind = kind_name(ce->kind), .capture = ce->capture,
		.details = ce->details, .host = r->host, .watch = ce->watch, .pid = ep->pid,
		.nspid = ce->nspid, .comm = ce->comm, .exe = ce->exe, .cgroup = ce->cgroup,
		.unit = ce->unit, .tid = ep->tid, .thread = ce->thread,
		.usage = ce->usage, .threshold = ce->threshold, .consecutive = ce->consecutive,
		.run_delay = ce->run_delay, .error = ce->error, .samples = (unsigned)ep->taken,
		.stop_max_ns = episode_stop_max(ep), .episode_end = ep->end,
	};
	if (key < 0)
		return;
	ev->stack = ep->stacks[key].stack;
	ev->stack.stop_ns = episode_stop_median(ep);
	for (size_t i = 0; i < ep->nstacks; i++)
		counts[i] = (struct store_stack_count){ ep->stacks[i].stack.hash, ep->stacks[i].count,
		                                        &ep->stacks[i].stack };
	qsort(counts, ep->nstacks, sizeof *counts, cmp_count_desc);
	ev->stacks = counts;
	ev->nstacks = ep->nstacks;
}

static bool in_episode(pid_t tid, const void *ctx)
{
	return capture_in_episode(ctx, tid);
}

void record_history(struct record *r, const struct watch_proc *procs,
                    const struct sampler_thread *threads, size_t n, const struct capture *c)
{
	r->cycle_pending = false;
	if (!r->history)
		return;
	/* Also with the history off: it closes what it kept open. */
	r->ncycle_rows = history_collect(r->history, r->cfg, procs, threads, n, in_episode, c,
	                                 &r->cycle_rows);
	if (r->cfg->history_threads == 0)
		return;
	r->cycle = (struct store_cycle){ .time_us = clock_real_us(),
	                                 .interval_ms = (int)r->cfg->interval_ms,
	                                 .threads = (unsigned)n };
	r->cycle_pending = true;
}

/* The pending cycle into the open transaction.  It goes whether it was
 * written or not: the next cycle brings its own. */
static void flush_cycle(struct record *r)
{
	if (!r->cycle_pending)
		return;
	r->cycle_pending = false;
	if (store_add_cycle(r->store, &r->cycle, r->cycle_rows, r->ncycle_rows) < 0)
		store_failed(r, "store the usage history");
}

void record_flush(struct record *r)
{
	size_t added = 0, kept = 0, loglen = 0;
	char *logbuf = NULL;
	FILE *lines = NULL;
	bool failed = false, had_events = r->nunsaved > 0;

	if (r->nunsaved == 0 && !r->cycle_pending)
		return;
	if (store_begin(r->store) < 0) {
		store_failed(r, "begin a transaction");
		r->cycle_pending = false;
		return;
	}
	flush_cycle(r);
	/* The event log gets the lines once they are committed, with their ids. */
	if (r->event_log)
		lines = open_memstream(&logbuf, &loglen);
	for (size_t i = 0; i < r->nunsaved && !failed; i++) {
		struct capture_event *ce = r->unsaved[i];
		struct store_stack_count *counts = calloc(ce->ep.nstacks + 1, sizeof *counts);
		struct store_event ev;
		int rc = -ENOMEM;

		if (counts) {
			event_of(r, ce, &ev, counts);
			rc = store_add_event(r->store, &ev);
			if (rc == 0 && lines)
				eventfmt_json(&ev, lines);
			free(counts);
		}
		if (rc == 0) {
			added = i + 1;
		} else if (rc == -EINVAL) {
			log_msg(LOG_ERR, "dropping an event the database refuses: %s",
			        store_error(r->store));
			capture_event_free(ce);
			r->unsaved[i] = NULL;
			added = i + 1;
		} else {
			store_failed(r, "store an event");
			failed = true;
		}
	}
	if (store_commit(r->store) < 0) {
		store_failed(r, "commit events");
		added = 0;
	} else if (r->store_error_ms) {
		log_msg(LOG_NOTICE, "writing to the database again");
		r->store_error_ms = 0;
	}
	if (lines && fclose(lines) == 0 && added && loglen &&
	    (fwrite(logbuf, 1, loglen, r->event_log) != loglen || fflush(r->event_log) != 0))
		log_errno(LOG_WARNING, errno, "cannot append to the event log %s", r->cfg->event_log);
	free(logbuf);
	for (size_t i = 0; i < r->nunsaved; i++) {
		if (i < added) {
			if (r->unsaved[i])
				capture_event_free(r->unsaved[i]);
		} else {
			r->unsaved[kept++] = r->unsaved[i];
		}
	}
	r->nunsaved = kept;
	/* An episode's stack copies and frames are freed now, but glibc keeps
	 * the pages: give them back, since events are rare and the daemon
	 * should stay small between them (RSS 6,388 -> see bench/README.md).
	 * Not after a cycle of history alone, which freed nothing. */
	if (had_events)
		malloc_trim(0);
}

/* The event's line in the daemon's log; FRAMES is its key stack's summary. */
static void log_event(const struct capture_event *ce, const struct store_event *ev,
                      const char *frames)
{
	const struct episode *ep = &ce->ep;
	int key = episode_key(ep);
	char samples[64], what[160];

	eventfmt_what(ev, what, sizeof what);
	if (key < 0) {
		log_msg(LOG_NOTICE, "[watch %s] %s[%d] thread %d %s: no stack: %s",
		        ce->watch, ce->comm, (int)ep->pid, (int)ep->tid, what,
		        ce->error[0] ? ce->error : ep->end);
		return;
	}
	if (ep->taken == 1)
		snprintf(samples, sizeof samples, ", one sample");
	else
		snprintf(samples, sizeof samples, " in %u of %d samples, %zu distinct %s",
		         ep->stacks[key].count, ep->taken, ep->nstacks,
		         log_plural(ep->nstacks, "stack", "stacks"));
	log_msg(LOG_NOTICE, "[watch %s] %s[%d] thread %d %s: %s (key stack %016"
	        PRIx64 "%s), stopped %" PRIu64 " µs median, %" PRIu64 " µs max%s%s",
	        ce->watch, ce->comm, (int)ep->pid, (int)ep->tid, what, frames, ev->stack.hash, samples, ev->stack.stop_ns / 1000,
	        ev->stop_max_ns / 1000, ep->end[0] ? "; " : "", ep->end);
}

void record_event(struct record *r, struct capture_event *ce)
{
	struct store_stack_count *counts = calloc(ce->ep.nstacks + 1, sizeof *counts);
	char *fields[EVENTFMT_JOURNAL_FIELDS];
	struct store_event ev;
	char frames[512];

	r->events++;
	metrics_event(r->metrics, ce->watch, ce->kind);
	if (counts) {
		event_of(r, ce, &ev, counts);
		eventfmt_stack_summary(&ev.stack, frames, sizeof frames);
		log_event(ce, &ev, frames);
		if (r->cfg->journal && log_to_journal() && eventfmt_journal(&ev, frames, fields) == 0) {
			service_journal(fields, EVENTFMT_JOURNAL_FIELDS);
			eventfmt_journal_free(fields);
		}
		free(counts);
	}
	if (r->nunsaved == RECORD_UNSAVED_MAX) {
		/* The disk has been full for a while: the oldest goes. */
		capture_event_free(r->unsaved[0]);
		memmove(r->unsaved, r->unsaved + 1, (RECORD_UNSAVED_MAX - 1) * sizeof *r->unsaved);
		r->nunsaved--;
		r->unsaved_dropped++;
	}
	r->unsaved[r->nunsaved++] = ce;
}

void record_prune(struct record *r, uint64_t now_ms)
{
	int64_t before = r->cfg->retention_ms ?
	                 clock_real_us() - (int64_t)r->cfg->retention_ms * 1000 : 0;
	int deleted = 0;
	bool more = false;

	if (!r->pruning && now_ms < r->next_prune_ms)
		return;
	if (store_prune(r->store, before, r->cfg->max_database_size, PRUNE_BATCH, &deleted,
	                &more) < 0) {
		store_failed(r, "apply retention");
		more = false;
	}
	r->pruned += deleted;
	r->pruning = more;
	if (more)
		return;
	if (r->pruned)
		log_msg(LOG_INFO, "retention deleted %d %s", r->pruned,
		        log_plural((unsigned)r->pruned, "event", "events"));
	r->pruned = 0;
	r->next_prune_ms = now_ms + PRUNE_PERIOD_MS;
}

void record_write_metrics(struct record *r)
{
	int rc;

	if (!r->cfg->metrics_file)
		return;
	rc = metrics_write(r->metrics, r->cfg->metrics_file);
	if (rc < 0 && !r->metrics_failing)
		log_errno(LOG_WARNING, -rc, "cannot write the metrics file %s", r->cfg->metrics_file);
	else if (rc == 0 && r->metrics_failing)
		log_msg(LOG_INFO, "writing the metrics file %s again", r->cfg->metrics_file);
	r->metrics_failing = rc < 0;
}
