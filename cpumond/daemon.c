/* daemon: the sampling loop.  Wires the modules in the one direction of the
 * data: config -> watch -> sampler -> trigger -> stackdump (episodes) ->
 * store, and tells systemd, the journal, the metrics file and the event log
 * as it goes. */
#include "cpumond/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "cpumond/doctor.h"
#include "cpumond/episode.h"
#include "cpumond/exit_status.h"
#include "cpumond/log.h"
#include "cpumond/metrics.h"
#include "cpumond/sampler.h"
#include "cpumond/service.h"
#include "cpumond/store.h"
#include "cpumond/tail.h"
#include "cpumond/trigger.h"
#include "cpumond/watch.h"
#include "stackdump/stackdump.h"

/* Retention runs hourly, in batches of events small enough (a few ms) not
 * to delay a cycle, one batch per cycle until done. */
#define PRUNE_PERIOD_MS 3600000
#define PRUNE_BATCH 1000

/* Events kept in memory while the database cannot be written (a full
 * disk): about 1 KiB each with their stacks. */
#define UNSAVED_MAX 1000

struct pending_event;

/* What the daemon last said about a watch's processes. */
struct watch_seen {
	size_t procs;            /* its processes this cycle */
	bool said_empty;         /* warned that it has none, and none came since */
};

struct daemon {
	struct config *cfg;      /* heap: the watch resolver points into it */
	const char *db_override; /* -d */
	char *db_path;           /* the database open, whatever the file says since */
	long max_cycles;         /* --cycles; 0: run until stopped */
	struct watch *watch;
	struct watch_seen *seen; /* per watch of cfg */
	struct sampler *sampler;
	struct trigger *trigger;
	struct stackdump *dumper;
	struct store *store;
	struct metrics *metrics;
	bool metrics_failing;            /* the metrics file could not be written */
	FILE *event_log;                 /* JSON lines, or NULL */
	struct pending_event *unsaved[UNSAVED_MAX];   /* events not yet in the database */
	size_t nunsaved;
	uint64_t unsaved_dropped;        /* dropped while the database could not be written */
	struct pending_event **active;   /* episodes being sampled */
	size_t nactive, active_cap;      /* nactive <= max_dumps_per_second */
	double tokens;                   /* dump budget, see take_dump_token */
	uint64_t tokens_ms;
	char host[256];
	uint64_t events, cycles;
	size_t nprocs, nthreads;         /* watched in the last cycle */
	uint64_t next_prune_ms;          /* when retention runs next */
	bool pruning;                    /* a retention run is under way */
	int pruned;                      /* events it deleted so far */
	uint64_t store_error_ms; /* last time a store failure was logged */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int64_t realtime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Reads a short /proc text file into BUF without its trailing newline;
 * BUF is "" when it cannot be read (the thread is gone). */
static void read_proc_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
}

static void read_exe(pid_t pid, char *buf, size_t len)
{
	char path[32];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, len - 1);
	buf[n < 0 ? 0 : n] = '\0';
}

/* Logs a failing store at most once a minute: a full disk must not flood
 * the journal while sampling goes on. */
static void store_failed(struct daemon *d, const char *what)
{
	uint64_t now = mono_ms();

	if (d->store_error_ms && now - d->store_error_ms < 60000)
		return;
	d->store_error_ms = now;
	log_msg(LOG_ERR, "cannot %s: %s", what, store_error(d->store));
}

/* An event whose episode is still being sampled; stored when it ends.  Its
 * strings are copies: a reload may free the configuration meanwhile. */
struct pending_event {
	struct episode ep;
	int64_t time_us;
	char *watch, *exe;
	char comm[16], thread[64];
	unsigned long long start_ticks;  /* the process's, when the trigger tripped */
	int usage, threshold, consecutive, run_delay;
	char error[256];         /* why the first sample has no stack */
};

static void pending_free(struct pending_event *pe)
{
	episode_free(&pe->ep);
	free(pe->watch);
	free(pe->exe);
	free(pe);
}

static int cmp_count_desc(const void *a, const void *b)
{
	const struct store_stack_count *x = a, *y = b;

	return (x->count < y->count) - (x->count > y->count);
}

/* PE as the store sees it: EV borrows PE's strings and stacks, and COUNTS,
 * which has room for every distinct stack of the episode. */
static void event_of(const struct daemon *d, const struct pending_event *pe,
                     struct store_event *ev, struct store_stack_count *counts)
{
	const struct episode *ep = &pe->ep;
	int key = episode_key(ep);

	*ev = (struct store_event){
		.time_us = pe->time_us, .host = d->host, .watch = pe->watch, .pid = ep->pid,
		.comm = pe->comm, .exe = pe->exe, .tid = ep->tid, .thread = pe->thread,
		.usage = pe->usage, .threshold = pe->threshold, .consecutive = pe->consecutive,
		.run_delay = pe->run_delay, .error = pe->error, .samples = (unsigned)ep->taken,
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

/* Writes the events not yet in the database in one transaction.  When that
 * fails (a full disk) they stay in memory, the newest UNSAVED_MAX of them,
 * and the next call tries again: sampling never waits for the disk. */
static void store_flush(struct daemon *d)
{
	size_t added = 0, kept = 0, loglen = 0;
	char *logbuf = NULL;
	FILE *lines = NULL;
	bool failed = false;

	if (d->nunsaved == 0)
		return;
	if (store_begin(d->store) < 0) {
		store_failed(d, "begin a transaction");
		return;
	}
	/* The event log gets the lines once they are committed, with their ids. */
	if (d->event_log)
		lines = open_memstream(&logbuf, &loglen);
	for (size_t i = 0; i < d->nunsaved && !failed; i++) {
		struct pending_event *pe = d->unsaved[i];
		struct store_stack_count *counts = calloc(pe->ep.nstacks + 1, sizeof *counts);
		struct store_event ev;
		int rc = -ENOMEM;

		if (counts) {
			event_of(d, pe, &ev, counts);
			rc = store_add_event(d->store, &ev);
			if (rc == 0 && lines)
				tail_format_json(&ev, lines);
			free(counts);
		}
		if (rc == 0) {
			added = i + 1;
		} else if (rc == -EINVAL) {
			log_msg(LOG_ERR, "dropping an event the database refuses: %s",
			        store_error(d->store));
			pending_free(pe);
			d->unsaved[i] = NULL;
			added = i + 1;
		} else {
			store_failed(d, "store an event");
			failed = true;
		}
	}
	if (store_commit(d->store) < 0) {
		store_failed(d, "commit events");
		added = 0;
	} else if (d->store_error_ms) {
		log_msg(LOG_NOTICE, "writing to the database again");
		d->store_error_ms = 0;
	}
	if (lines && fclose(lines) == 0 && added && loglen &&
	    (fwrite(logbuf, 1, loglen, d->event_log) != loglen || fflush(d->event_log) != 0))
		log_errno(LOG_WARNING, errno, "cannot append to the event log %s", d->cfg->event_log);
	free(logbuf);
	for (size_t i = 0; i < d->nunsaved; i++) {
		if (i < added) {
			if (d->unsaved[i])
				pending_free(d->unsaved[i]);
		} else {
			d->unsaved[kept++] = d->unsaved[i];
		}
	}
	d->nunsaved = kept;
	/* An episode's stack copies and frames are freed now, but glibc keeps
	 * the pages: give them back, since events are rare and the daemon
	 * should stay small between them (RSS 6,388 -> see bench/README.md). */
	malloc_trim(0);
}

/* The event line names this many of the key stack's innermost functions,
 * as many as the journal entry's MESSAGE. */
#define LINE_FRAMES 3

/* "hot_leaf <- hot_mid <- hot_root <- ...": the first functions of SK, and
 * the innermost one that has a name when none of those has one (a stripped
 * library on top): "libx.so@0x1200 <- libx.so@0x1400 <- libx.so@0x1900 <-
 * ... <- main (#5)".  Cut to LEN - 1 bytes. */
static void stack_summary(const struct stackdump_stack *sk, char *buf, size_t len)
{
	/* fmemopen leaves a full buffer without its NUL: the last byte keeps one. */
	FILE *out = fmemopen(buf, len - 1, "w");
	size_t named = 0, shown = sk->nframes < LINE_FRAMES ? sk->nframes : LINE_FRAMES;
	char name[256];

	buf[0] = buf[len - 1] = '\0';
	if (!out)
		return;
	while (named < sk->nframes && !(sk->frames[named].symbol && sk->frames[named].symbol[0]))
		named++;
	for (size_t i = 0; i < shown; i++) {
		stackdump_function_name(&sk->frames[i], name, sizeof name);
		fprintf(out, "%s%s", i ? " <- " : "", name);
	}
	if (named >= shown && named < sk->nframes) {
		stackdump_function_name(&sk->frames[named], name, sizeof name);
		fprintf(out, "%s <- %s (#%zu)", named > shown ? " <- ..." : "", name, named);
		shown = named + 1;
	}
	if (shown < sk->nframes)
		fputs(" <- ...", out);
	fclose(out);
}

/* Logs PE's event, sends it to the journal, and queues it for the next
 * store_flush. */
static void finish_event(struct daemon *d, struct pending_event *pe)
{
	struct episode *ep = &pe->ep;
	int key = episode_key(ep);
	struct store_stack_count *counts = calloc(ep->nstacks + 1, sizeof *counts);
	struct store_event ev;
	char frames[512], samples[64];

	d->events++;
	metrics_event(d->metrics, pe->watch);
	if (counts) {
		event_of(d, pe, &ev, counts);
		if (key >= 0) {
			stack_summary(&ev.stack, frames, sizeof frames);
			if (ep->taken == 1)
				snprintf(samples, sizeof samples, ", one sample");
			else
				snprintf(samples, sizeof samples, " in %u of %d samples, %zu distinct %s",
				         ep->stacks[key].count, ep->taken, ep->nstacks,
				         log_plural(ep->nstacks, "stack", "stacks"));
			log_msg(LOG_NOTICE, "[watch %s] %s[%d] thread %d at %d‰ > %d‰: %s (key stack %016"
			        PRIx64 "%s), stopped %" PRIu64 " µs median, %" PRIu64 " µs max%s%s",
			        pe->watch, pe->comm, (int)ep->pid, (int)ep->tid, pe->usage,
			        pe->threshold, frames, ev.stack.hash, samples, ev.stack.stop_ns / 1000,
			        ev.stop_max_ns / 1000, ep->end[0] ? "; " : "", ep->end);
		} else
			log_msg(LOG_NOTICE, "[watch %s] %s[%d] thread %d at %d‰ > %d‰: no stack: %s",
			        pe->watch, pe->comm, (int)ep->pid, (int)ep->tid, pe->usage,
			        pe->threshold, pe->error[0] ? pe->error : ep->end);
		if (d->cfg->journal && log_to_journal())
			service_journal_event(&ev);
		free(counts);
	}
	if (d->nunsaved == UNSAVED_MAX) {
		/* The disk has been full for a while: the oldest goes. */
		pending_free(d->unsaved[0]);
		memmove(d->unsaved, d->unsaved + 1, (UNSAVED_MAX - 1) * sizeof *d->unsaved);
		d->nunsaved--;
		d->unsaved_dropped++;
	}
	d->unsaved[d->nunsaved++] = pe;
}

/* Takes one stack sample of PE's thread.  Returns false when the episode
 * must end (its end says why). */
static bool take_sample(struct daemon *d, struct pending_event *pe, uint64_t now_ms)
{
	struct episode *ep = &pe->ep;
	struct stackdump_stack stack;
	int rc = stackdump_thread(d->dumper, ep->pid, ep->tid, d->cfg->max_frames, &stack);
	bool go_on = true, runnable;

	if (rc == 0 && stack.process_start != pe->start_ticks) {
		/* The process exited and another took its pid (and this tid). */
		snprintf(stack.error, sizeof stack.error, "tid %d exited", (int)ep->tid);
		rc = -ESRCH;
	}

	if (rc == 0)
		metrics_dump(d->metrics, pe->watch, stack.stop_ns);
	else
		metrics_dump_failed(d->metrics, pe->watch, rc == -ESRCH ? METRICS_EXITED :
		                    rc == -EPERM ? METRICS_DENIED :
		                    rc == -EAGAIN || rc == -ETIMEDOUT ? METRICS_BLOCKED : METRICS_OTHER);
	switch (rc) {
	case 0:
		if (ep->taken == 0 && stack.error[0])
			snprintf(pe->error, sizeof pe->error, "%s", stack.error);
		episode_add(ep, &stack);
		break;
	case -EAGAIN:      /* in uninterruptible sleep: not burning CPU now */
	case -ETIMEDOUT:   /* did not stop in time; stackdump_poll detaches it */
		ep->skipped++;
		break;
	default:           /* exited, or ptrace refused (another tracer came) */
		if (ep->taken == 0)
			snprintf(pe->error, sizeof pe->error, "%s", stack.error);
		else
			snprintf(ep->end, sizeof ep->end, "stopped after %d %s: %.200s", ep->taken,
			         log_plural((unsigned)ep->taken, "sample", "samples"), stack.error);
		log_msg(rc == -ESRCH ? LOG_DEBUG : LOG_WARNING, "%s[%d] thread %d: no stack: %s",
		        pe->comm, (int)ep->pid, (int)ep->tid, stack.error);
		go_on = false;
	}
	stackdump_stack_free(&stack);
	ep->last_sample_ms = now_ms;
	if (episode_thread_busy(ep->pid, ep->tid, &ep->last_busy_ns, &runnable) < 0)
		ep->last_busy_ns = 0;
	return go_on && episode_remaining(ep) > 0;
}

/* The dump budget over all episodes: a token bucket refilled at
 * max_dumps_per_second, holding at most one second's worth. */
static bool take_dump_token(struct daemon *d, uint64_t now_ms)
{
	double rate = d->cfg->max_dumps_per_second;

	d->tokens += (double)(now_ms - d->tokens_ms) * rate / 1000.0;
	if (d->tokens > rate)
		d->tokens = rate;
	d->tokens_ms = now_ms;
	if (d->tokens < 1.0)
		return false;
	d->tokens -= 1.0;
	return true;
}

static bool episode_running(const struct daemon *d, pid_t tid)
{
	for (size_t i = 0; i < d->nactive; i++)
		if (d->active[i]->ep.tid == tid)
			return true;
	return false;
}

/* A thread tripped the trigger: take its first sample now, then sample it
 * on the timer until the episode ends. */
static void start_event(struct daemon *d, const struct watch_proc *proc,
                        const struct sampler_thread *t, const struct watch_config *wc,
                        uint64_t now_ms)
{
	struct pending_event *pe = calloc(1, sizeof *pe);
	char exe[PATH_MAX], path[64];
	int planned = d->cfg->episode_samples ? d->cfg->episode_samples : 1;

	if (!pe || episode_init(&pe->ep, t->pid, t->tid, planned) < 0) {
		free(pe);
		log_msg(LOG_ERR, "out of memory: no event for thread %d", (int)t->tid);
		return;
	}
	pe->watch = strdup(wc->name);
	if (!pe->watch) {
		pending_free(pe);
		log_msg(LOG_ERR, "out of memory: no event for thread %d", (int)t->tid);
		return;
	}
	pe->time_us = realtime_us();
	pe->usage = t->usage;
	pe->threshold = wc->threshold;
	pe->consecutive = wc->consecutive;
	pe->run_delay = t->run_delay;
	snprintf(pe->comm, sizeof pe->comm, "%s", proc->comm);
	pe->start_ticks = proc->start_ticks;
	/* Dump first: the sooner the thread is caught, the likelier it is still
	 * in the code that made it hot. */
	bool go_on = take_sample(d, pe, now_ms);
	snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)t->pid, (int)t->tid);
	read_proc_line(path, pe->thread, sizeof pe->thread);
	read_exe(t->pid, exe, sizeof exe);
	pe->exe = strdup(exe);
	/* More episodes than dumps per second could not get one sample each. */
	if (go_on && d->nactive < (size_t)d->cfg->max_dumps_per_second) {
		if (d->nactive == d->active_cap) {
			size_t cap = d->active_cap ? 2 * d->active_cap : 8;
			struct pending_event **a = reallocarray(d->active, cap, sizeof *a);

			if (!a) {
				snprintf(pe->ep.end, sizeof pe->ep.end, "out of memory: one sample");
				finish_event(d, pe);
				return;
			}
			d->active = a;
			d->active_cap = cap;
		}
		pe->ep.next_ms = now_ms + d->cfg->sample_interval_ms;
		d->active[d->nactive++] = pe;
		return;
	}
	if (go_on)
		snprintf(pe->ep.end, sizeof pe->ep.end, "too many episodes at once (%zu): one sample",
		         d->nactive);
	finish_event(d, pe);
}

/* Takes the samples that are due.  An episode ends when its samples are
 * taken, its thread exits or goes idle, or it cannot be stopped. */
static void sample_episodes(struct daemon *d, uint64_t now_ms)
{
	for (size_t i = 0; i < d->nactive;) {
		struct pending_event *pe = d->active[i];
		struct episode *ep = &pe->ep;
		uint64_t busy;
		bool go_on = true, runnable;
		int rc;

		if (ep->next_ms > now_ms) {
			i++;
			continue;
		}
		rc = episode_thread_busy(ep->pid, ep->tid, &busy, &runnable);
		if (rc < 0) {
			snprintf(ep->end, sizeof ep->end, "thread exited after %d %s", ep->taken,
			         log_plural((unsigned)ep->taken, "sample", "samples"));
			go_on = false;
		} else if (ep->last_busy_ns &&
		           episode_went_idle(busy - ep->last_busy_ns,
		                             (now_ms - ep->last_sample_ms) * 1000000, runnable,
		                             pe->threshold)) {
			snprintf(ep->end, sizeof ep->end, "thread went idle after %d %s", ep->taken,
			         log_plural((unsigned)ep->taken, "sample", "samples"));
			go_on = false;
		} else if (!take_dump_token(d, now_ms)) {
			ep->skipped++;
			go_on = episode_remaining(ep) > 0;
		} else {
			go_on = take_sample(d, pe, now_ms);
		}
		if (go_on) {
			ep->next_ms += d->cfg->sample_interval_ms;
			if (ep->next_ms <= now_ms)
				ep->next_ms = now_ms + d->cfg->sample_interval_ms;
			i++;
			continue;
		}
		if (!ep->end[0] && ep->skipped)
			snprintf(ep->end, sizeof ep->end, "cut short: %d of %d samples skipped "
			         "(max_dumps_per_second, or the thread did not stop)", ep->skipped,
			         ep->planned);
		if (ep->end[0])
			log_msg(LOG_INFO, "episode of %s[%d] thread %d: %s", pe->comm, (int)ep->pid,
			        (int)ep->tid, ep->end);
		d->active[i] = d->active[--d->nactive];
		finish_event(d, pe);
	}
	store_flush(d);
}

/* When the next episode sample is due, or UINT64_MAX. */
static uint64_t next_sample_ms(const struct daemon *d)
{
	uint64_t next = UINT64_MAX;

	for (size_t i = 0; i < d->nactive; i++)
		if (d->active[i]->ep.next_ms < next)
			next = d->active[i]->ep.next_ms;
	return next;
}

/* At exit: every episode is stored with what it has.  Returns how many
 * there were. */
static size_t finish_all_episodes(struct daemon *d)
{
	size_t n = d->nactive;

	while (d->nactive) {
		struct pending_event *pe = d->active[--d->nactive];

		snprintf(pe->ep.end, sizeof pe->ep.end, "cpumond stopped after %d %s", pe->ep.taken,
		         log_plural((unsigned)pe->ep.taken, "sample", "samples"));
		finish_event(d, pe);
	}
	store_flush(d);
	return n;
}

/* One batch of retention when it is due: events past `retention`, and the
 * oldest while the database is over max_database_size. */
static void prune(struct daemon *d, uint64_t now_ms)
{
	int64_t before = d->cfg->retention_ms ? realtime_us() - (int64_t)d->cfg->retention_ms * 1000 : 0;
	int deleted = 0;
	bool more = false;

	if (!d->pruning && now_ms < d->next_prune_ms)
		return;
	if (store_prune(d->store, before, d->cfg->max_database_size, PRUNE_BATCH, &deleted,
	                &more) < 0) {
		store_failed(d, "apply retention");
		more = false;
	}
	d->pruned += deleted;
	d->pruning = more;
	if (more)
		return;
	if (d->pruned)
		log_msg(LOG_INFO, "retention deleted %d %s", d->pruned,
		        log_plural((unsigned)d->pruned, "event", "events"));
	d->pruned = 0;
	d->next_prune_ms = now_ms + PRUNE_PERIOD_MS;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

/* Rewrites metrics_file, if set; says once when it cannot, and when it can
 * again. */
static void write_metrics(struct daemon *d)
{
	int rc;

	if (!d->cfg->metrics_file)
		return;
	rc = metrics_write(d->metrics, d->cfg->metrics_file);
	if (rc < 0 && !d->metrics_failing)
		log_errno(LOG_WARNING, -rc, "cannot write the metrics file %s", d->cfg->metrics_file);
	else if (rc == 0 && d->metrics_failing)
		log_msg(LOG_INFO, "writing the metrics file %s again", d->cfg->metrics_file);
	d->metrics_failing = rc < 0;
}

/* Warns when a watch has no process: at start, after a reload, and when
 * one that had some has none left; once each time, not every cycle. */
static void say_empty_watches(struct daemon *d, const struct watch_proc *procs, size_t n)
{
	for (size_t i = 0; i < d->cfg->nwatches; i++)
		d->seen[i].procs = 0;
	for (size_t k = 0; k < n; k++)
		d->seen[procs[k].watch].procs++;
	for (size_t i = 0; i < d->cfg->nwatches; i++) {
		struct watch_seen *s = &d->seen[i];
		struct doctor_result r;
		struct watch_why why;

		if (s->procs && s->said_empty) {
			log_msg(LOG_INFO, "watch \"%s\" matches %zu %s again", d->cfg->watches[i].name,
			        s->procs, log_plural(s->procs, "process", "processes"));
			s->said_empty = false;
		} else if (!s->procs && !s->said_empty) {
			watch_why_empty(d->watch, i, &why);
			doctor_check_watch(d->cfg, i, procs, n, &why, &r);
			log_msg(LOG_WARNING, "%s%s%s", r.message, r.fix[0] ? "; " : "", r.fix);
			s->said_empty = true;
		}
	}
}

static void run_cycle(struct daemon *d)
{
	const struct watch_proc *procs;
	const struct sampler_thread *threads;
	size_t nprocs, nthreads;
	uint64_t now, cpu0 = thread_cpu_ns();
	int rc;

	rc = watch_resolve(d->watch, &procs, &nprocs);
	if (rc < 0) {
		log_errno(LOG_ERR, -rc, "cannot list processes");
		return;
	}
	say_empty_watches(d, procs, nprocs);
	if (sampler_cycle(d->sampler, procs, nprocs, &threads, &nthreads) < 0)
		log_msg(LOG_ERR, "out of memory while sampling; this cycle is incomplete");
	now = mono_ms();
	metrics_cycle_start(d->metrics);
	for (size_t i = 0; i < nprocs; i++)
		metrics_process(d->metrics, procs[i].watch);
	for (size_t i = 0; i < nthreads; i++) {
		const struct sampler_thread *t = &threads[i];
		const struct watch_config *wc = &d->cfg->watches[procs[t->proc].watch];
		struct trigger_rule rule = { wc->threshold, wc->consecutive, wc->cooldown_ms };

		metrics_thread(d->metrics, procs[t->proc].watch, t->usage);
		if (t->usage >= 0 && trigger_observe(d->trigger, t->key, t->usage, &rule, now) &&
		    !episode_running(d, t->tid))
			start_event(d, &procs[t->proc], t, wc, now);
	}
	trigger_sweep(d->trigger);
	stackdump_poll(d->dumper);   /* detach threads that stopped late */
	store_flush(d);
	prune(d, now);
	d->cycles++;
	d->nprocs = nprocs;
	d->nthreads = nthreads;
	metrics_cycle_cost(d->metrics, thread_cpu_ns() - cpu0);
	write_metrics(d);
}

/* "watching 3 processes, 120 threads; 2 events" for STATUS=. */
static const char *status_text(const struct daemon *d, char *buf, size_t len)
{
	snprintf(buf, len, "watching %zu processes, %zu threads; %" PRIu64 " events", d->nprocs,
	         d->nthreads, d->events);
	return buf;
}

static struct config *config_new(const char *path)
{
	struct config *cfg = calloc(1, sizeof *cfg);

	if (cfg && config_load(path, cfg, stderr) < 0) {
		free(cfg);
		return NULL;
	}
	return cfg;
}

static void config_delete(struct config *cfg)
{
	if (cfg)
		config_free(cfg);
	free(cfg);
}

/* Opens event_log for appending (0640, like the database), closing the
 * previous one: SIGHUP after logrotate moved it starts a new file. */
static void open_event_log(struct daemon *d)
{
	int fd;

	if (d->event_log)
		fclose(d->event_log);
	d->event_log = NULL;
	if (!d->cfg->event_log)
		return;
	fd = open(d->cfg->event_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0 || !(d->event_log = fdopen(fd, "a"))) {
		log_errno(LOG_WARNING, errno, "cannot open the event log %s", d->cfg->event_log);
		if (fd >= 0)
			close(fd);
	}
}

/* A configuration as config_print writes it, one setting per line: the
 * reload compares two of them, so it reports every key config_print knows,
 * each in its effective value, in the file's own notation. */
struct setting {
	const char *section;     /* "cpumond", "report", "watch NAME" */
	const char *key, *value;
};

struct settings {
	char *text;              /* config_print's, cut into the strings below */
	struct setting *v;
	size_t n;
};

static void settings_free(struct settings *s)
{
	free(s->text);
	free(s->v);
}

static int settings_read(const struct config *cfg, struct settings *s)
{
	const char *section = "";
	size_t len = 0, cap = 0;
	char *line, *save;
	FILE *out;

	*s = (struct settings){ 0 };
	out = open_memstream(&s->text, &len);
	if (!out)
		return -ENOMEM;
	config_print(cfg, out);
	if (fclose(out) != 0)
		return -ENOMEM;
	for (line = strtok_r(s->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *end;

		if (line[0] == '[') {
			line[strlen(line) - 1] = '\0';   /* "[watch web]" */
			section = line + 1;
			continue;
		}
		if (!eq)
			continue;
		if (s->n == cap) {
			struct setting *v = reallocarray(s->v, cap ? 2 * cap : 32, sizeof *v);

			if (!v)
				return -ENOMEM;
			s->v = v;
			cap = cap ? 2 * cap : 32;
		}
		/* "key = value", or "key=value" when the value needs it. */
		for (end = eq; end > line && end[-1] == ' '; end--)
			;
		*end = '\0';
		for (eq++; *eq == ' '; eq++)
			;
		s->v[s->n++] = (struct setting){ section, line, eq };
	}
	return 0;
}

static bool has_section(const struct settings *s, const char *section)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].section, section) == 0)
			return true;
	return false;
}

static const char *setting(const struct settings *s, const char *section, const char *key)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].section, section) == 0 && strcmp(s->v[i].key, key) == 0)
			return s->v[i].value;
	return NULL;
}

static bool same(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* A change is told once it fits in a log line; the rest are counted. */
#define CHANGES_TEXT_MAX 640

struct changes {
	FILE *out;
	size_t len, told, untold;
};

__attribute__((format(printf, 2, 3)))
static void change(struct changes *c, const char *fmt, ...)
{
	va_list ap;

	fflush(c->out);
	if (c->len > CHANGES_TEXT_MAX) {
		c->untold++;
		return;
	}
	fputs(c->told++ ? ", " : "", c->out);
	va_start(ap, fmt);
	vfprintf(c->out, fmt, ap);
	va_end(ap);
}

/* Watch "NAME" of section "watch NAME", for the message. */
static const char *watch_of(const char *section)
{
	return strncmp(section, "watch ", 6) == 0 ? section + 6 : NULL;
}

/* The settings of watches both files have, and of [cpumond] and [report]
 * (absent: every key unset).  A watch's threshold, consecutive or cooldown
 * that only followed the same key of [cpumond] is not told twice. */
static void changed_keys(struct changes *c, const struct settings *from,
                         const struct settings *to, const struct setting *st, bool in_to)
{
	const struct settings *other = in_to ? from : to;
	const char *name = watch_of(st->section);
	const char *was = in_to ? setting(from, st->section, st->key) : st->value;
	const char *now = in_to ? st->value : NULL;

	if (!in_to && setting(to, st->section, st->key))
		return;                  /* told from TO's side */
	if (name && !has_section(other, st->section))
		return;                  /* an added or removed watch */
	if (same(was, now))
		return;
	if (name && same(was, setting(from, "cpumond", st->key)) &&
	    same(now, setting(to, "cpumond", st->key)))
		return;
	if (name)
		change(c, "watch \"%s\" %s %s -> %s", name, st->key, was ? was : "unset",
		       now ? now : "unset");
	else
		change(c, "%s%s %s -> %s", strcmp(st->section, "cpumond") ? "[report] " : "", st->key,
		       was ? was : "unset", now ? now : "unset");
}

/* The index of watch NAME in CFG, or nwatches. */
static size_t find_watch(const struct config *cfg, const char *name)
{
	size_t i = 0;

	while (i < cfg->nwatches && strcmp(cfg->watches[i].name, name) != 0)
		i++;
	return i;
}

/* Whether the watches both files have come in another order (the first
 * watch that matches a process takes it). */
static bool reordered(const struct config *from, const struct config *to)
{
	size_t prev = 0;

	for (size_t i = 0; i < to->nwatches; i++) {
		size_t k = find_watch(from, to->watches[i].name);

		if (k == from->nwatches)
			continue;
		if (k < prev)
			return true;
		prev = k;
	}
	return false;
}

/* "watch "web" added, watch "db" removed, threshold 800 -> 900", "no
 * change", or NULL when out of memory.  Freed by the caller. */
static char *describe_changes(const struct config *from, const struct config *to)
{
	struct settings a = { 0 }, b = { 0 };
	struct changes c = { 0 };
	char *text = NULL;

	if (settings_read(from, &a) < 0 || settings_read(to, &b) < 0 ||
	    !(c.out = open_memstream(&text, &c.len))) {
		settings_free(&a);
		settings_free(&b);
		return NULL;
	}
	for (size_t i = 0; i < to->nwatches; i++)
		if (find_watch(from, to->watches[i].name) == from->nwatches)
			change(&c, "watch \"%s\" added", to->watches[i].name);
	for (size_t i = 0; i < from->nwatches; i++)
		if (find_watch(to, from->watches[i].name) == to->nwatches)
			change(&c, "watch \"%s\" removed", from->watches[i].name);
	for (size_t i = 0; i < b.n; i++)
		changed_keys(&c, &a, &b, &b.v[i], true);
	for (size_t i = 0; i < a.n; i++)
		changed_keys(&c, &a, &b, &a.v[i], false);
	if (reordered(from, to))
		change(&c, "watches in another order");
	if (c.untold)
		fprintf(c.out, " and %zu more", c.untold);
	else if (!c.told)
		fputs("no change", c.out);
	if (fclose(c.out) != 0) {
		free(text);
		text = NULL;
	}
	settings_free(&a);
	settings_free(&b);
	return text;
}

static void reload(struct daemon *d)
{
	struct watch_seen *seen;
	struct config *cfg;
	struct watch *w;
	char *changes;
	int rc;

	cfg = config_new(d->cfg->path);
	if (!cfg) {
		log_msg(LOG_ERR, "%s has errors; keeping the running configuration", d->cfg->path);
		return;
	}
	rc = watch_new(cfg, &w);
	if (rc < 0) {
		log_errno(LOG_ERR, -rc, "cannot use the new configuration; keeping the running one");
		config_delete(cfg);
		return;
	}
	seen = calloc(cfg->nwatches, sizeof *seen);
	changes = describe_changes(d->cfg, cfg);
	if (!seen || !changes || metrics_reconfigure(d->metrics, cfg) < 0) {
		log_msg(LOG_ERR, "out of memory; keeping the running configuration");
		free(seen);
		free(changes);
		watch_free(w);
		config_delete(cfg);
		return;
	}
	log_msg(LOG_INFO, "reloaded %s: %s", cfg->path, changes);
	/* The store stays open on the file it was opened on. */
	if (!d->db_override && strcmp(cfg->database, d->cfg->database) != 0 &&
	    strcmp(cfg->database, d->db_path) != 0)
		log_msg(LOG_WARNING, "database changed from %s to %s: a restart is needed; still "
		        "writing %s", d->cfg->database, cfg->database, d->db_path);
	free(changes);
	watch_free(d->watch);
	d->watch = w;
	free(d->seen);
	d->seen = seen;          /* empty watches are said again */
	config_delete(d->cfg);
	d->cfg = cfg;
}

/* Waits until DEADLINE_MS (monotonic) or a signal.  The signals are blocked
 * and taken here synchronously, so none can slip in between a check and the
 * wait.  Returns the signal, or 0 at the deadline. */
static int wait_until(const sigset_t *set, uint64_t deadline_ms)
{
	uint64_t now = mono_ms();
	struct timespec ts;
	int sig;

	/* Already late (dumps slower than sample_interval keep an episode always
	 * due): still take a pending signal, with a zero timeout, or SIGTERM
	 * would wait for a loop that never idles. */
	if (deadline_ms < now)
		deadline_ms = now;
	ts.tv_sec = (time_t)((deadline_ms - now) / 1000);
	ts.tv_nsec = (long)((deadline_ms - now) % 1000) * 1000000;
	sig = sigtimedwait(set, NULL, &ts);
	return sig < 0 ? 0 : sig;
}

static int daemon_run(struct daemon *d)
{
	uint64_t watchdog_ms = service_watchdog_period_ms(), next_watchdog;
	char status[128], why[64], cutmsg[64] = "";
	int rc, stop_sig = 0;
	sigset_t set;
	uint64_t next;
	char err[512];
	size_t cut;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (gethostname(d->host, sizeof d->host - 1) < 0)
		snprintf(d->host, sizeof d->host, "unknown");
	d->db_path = strdup(d->db_override ? d->db_override : d->cfg->database);
	if (!d->db_path) {
		log_msg(LOG_ERR, "cannot start: out of memory");
		return EXIT_PROC;
	}
	rc = store_open(d->db_path, true, &d->store, err, sizeof err);
	if (rc < 0) {
		log_msg(LOG_ERR, "%s", err);
		return EXIT_DATABASE;
	}
	d->sampler = sampler_new();
	d->trigger = trigger_new();
	d->dumper = stackdump_new();
	d->metrics = metrics_new(d->cfg);
	d->seen = calloc(d->cfg->nwatches, sizeof *d->seen);
	open_event_log(d);
	rc = watch_new(d->cfg, &d->watch);
	if (!d->sampler || !d->trigger || !d->dumper || !d->metrics || !d->seen || rc < 0) {
		log_msg(LOG_ERR, "cannot start: out of memory or /proc unreadable");
		return EXIT_PROC;
	}
	doctor_preflight(d->cfg, d->watch);   /* logs what stops ptrace; never fatal */

	/* One timer for the cycle, one per running episode: whichever is due
	 * first wakes the loop, so episodes never delay the cycle's cadence
	 * by more than one dump. */
	next = next_watchdog = mono_ms();
	for (;;) {
		uint64_t wake;
		int sig;

		if (mono_ms() >= next) {
			run_cycle(d);
			if (d->cycles == 1) {
				log_msg(LOG_INFO, "cpumond %s started: %zu %s, %zu %s, %zu %s, interval %"
				        PRIu64 " ms, database %s", CPUMOND_VERSION, d->cfg->nwatches,
				        log_plural(d->cfg->nwatches, "watch", "watches"), d->nprocs,
				        log_plural(d->nprocs, "process", "processes"), d->nthreads,
				        log_plural(d->nthreads, "thread", "threads"), d->cfg->interval_ms,
				        d->db_path);
				service_ready(status_text(d, status, sizeof status));
			} else
				service_status(status_text(d, status, sizeof status));
			if (d->max_cycles && d->cycles >= (uint64_t)d->max_cycles)
				break;
			/* Keep the cadence; after an overrun start again from now. */
			next += d->cfg->interval_ms;
			if (next <= mono_ms())
				next = mono_ms() + d->cfg->interval_ms;
		}
		sample_episodes(d, mono_ms());
		if (watchdog_ms && mono_ms() >= next_watchdog) {
			service_watchdog();
			next_watchdog = mono_ms() + watchdog_ms;
		}
		wake = next_sample_ms(d);
		if (next < wake)
			wake = next;
		if (watchdog_ms && next_watchdog < wake)
			wake = next_watchdog;
		sig = wait_until(&set, wake);
		if (sig == SIGHUP) {
			service_reloading();
			reload(d);
			open_event_log(d);
			service_ready(status_text(d, status, sizeof status));
		}
		if (sig == SIGTERM || sig == SIGINT) {
			stop_sig = sig;
			service_stopping();
			break;
		}
	}
	cut = finish_all_episodes(d);
	write_metrics(d);            /* with the events of the last episodes */
	/* Said once the episodes the stop cut short are events too. */
	if (stop_sig)
		snprintf(why, sizeof why, "on SIG%s", sigabbrev_np(stop_sig));
	else
		snprintf(why, sizeof why, "after %" PRIu64 " %s and", d->cycles,
		         log_plural(d->cycles, "cycle", "cycles"));
	if (cut)
		snprintf(cutmsg, sizeof cutmsg, " (%zu %s cut short by the stop)", cut,
		         log_plural(cut, "episode", "episodes"));
	log_msg(LOG_INFO, "stopping %s%s %" PRIu64 " %s%s", why, stop_sig ? " after" : "",
	        d->events, log_plural(d->events, "event", "events"), cutmsg);
	return EXIT_OK;
}

static void daemon_free(struct daemon *d)
{
	/* stackdump_free detaches any thread still pending: it comes first. */
	stackdump_free(d->dumper);
	free(d->active);
	if (d->nunsaved || d->unsaved_dropped)
		log_msg(LOG_ERR, "%zu %s could not be written to the database and %s lost "
		        "(%" PRIu64 " more were dropped while it was failing)", d->nunsaved,
		        log_plural(d->nunsaved, "event", "events"), d->nunsaved == 1 ? "is" : "are",
		        d->unsaved_dropped);
	for (size_t i = 0; i < d->nunsaved; i++)
		pending_free(d->unsaved[i]);
	watch_free(d->watch);
	sampler_free(d->sampler);
	trigger_free(d->trigger);
	metrics_free(d->metrics);
	if (d->event_log)
		fclose(d->event_log);
	store_close(d->store);
	free(d->db_path);
	free(d->seen);
	config_delete(d->cfg);
}

int daemon_main(const char *config_path, const char *database, long max_cycles)
{
	struct daemon d = { .db_override = database, .max_cycles = max_cycles };
	int rc;

	d.cfg = config_new(config_path);
	rc = d.cfg ? daemon_run(&d) : EXIT_CONFIG;
	daemon_free(&d);
	return rc;
}
