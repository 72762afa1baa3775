#include "cpumond/capture.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/clock.h"
#include "cpumond/log.h"
#include "procfs/procfs.h"
#include "stackdump/stackdump.h"

struct capture {
	const struct config *cfg;        /* the limits */
	struct metrics *metrics;
	capture_done_fn done;
	void *done_arg;
	struct stackdump *dumper;
	struct capture_event **active;   /* episodes being sampled */
	size_t nactive, active_cap;      /* nactive <= max_dumps_per_second */
	double tokens;                   /* dump budget, see take_dump_token */
	uint64_t tokens_ms;
};

void capture_event_free(struct capture_event *ev)
{
	episode_free(&ev->ep);
	free(ev->watch);
	free(ev->exe);
	free(ev->cgroup);
	free(ev->details);
	free(ev);
}

/* What stackdump says once per process (a CPython whose frames it cannot
 * read): one log line. */
static void stackdump_note(const char *msg, void *arg)
{
	(void)arg;
	log_msg(LOG_WARNING, "%s", msg);
}

struct capture *capture_new(const struct config *cfg, struct metrics *metrics,
                            capture_done_fn done, void *arg)
{
	struct capture *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	*c = (struct capture){ .cfg = cfg, .metrics = metrics, .done = done, .done_arg = arg };
	c->dumper = stackdump_new();
	if (!c->dumper) {
		free(c);
		return NULL;
	}
	stackdump_set_note(c->dumper, stackdump_note, NULL);
	return c;
}

void capture_free(struct capture *c)
{
	if (!c)
		return;
	/* stackdump_free detaches any thread still pending: it comes first. */
	stackdump_free(c->dumper);
	for (size_t i = 0; i < c->nactive; i++)
		capture_event_free(c->active[i]);
	free(c->active);
	free(c);
}

void capture_configure(struct capture *c, const struct config *cfg)
{
	c->cfg = cfg;
}

/* Takes one stack sample of EV's thread.  Returns false when the episode
 * must end (its end says why). */
static bool take_sample(struct capture *c, struct capture_event *ev, uint64_t now_ms)
{
	struct episode *ep = &ev->ep;
	struct stackdump_stack stack;
	int rc = stackdump_thread(c->dumper, ep->pid, ep->tid, c->cfg->max_frames, &stack);
	bool go_on = true, runnable;

	if (rc == 0 && stack.process_start != ev->start_ticks) {
		/* The process exited and another took its pid (and this tid). */
		snprintf(stack.error, sizeof stack.error, "tid %d exited", (int)ep->tid);
		rc = -ESRCH;
	}

	if (rc == 0)
		metrics_dump(c->metrics, ev->watch, stack.stop_ns);
	else
		metrics_dump_failed(c->metrics, ev->watch, rc == -ESRCH ? METRICS_EXITED :
		                    rc == -EPERM ? METRICS_DENIED :
		                    rc == -EAGAIN || rc == -ETIMEDOUT ? METRICS_BLOCKED : METRICS_OTHER);
	switch (rc) {
	case 0:
		if (ep->taken == 0 && stack.error[0])
			snprintf(ev->error, sizeof ev->error, "%s", stack.error);
		episode_add(ep, &stack);
		ev->capture = "ptrace";
		break;
	case -EAGAIN:      /* in uninterruptible sleep: not burning CPU now */
	case -ETIMEDOUT:   /* did not stop in time; stackdump_poll detaches it */
		ep->skipped++;
		break;
	default:           /* exited, or ptrace refused (another tracer came) */
		if (ep->taken == 0)
			snprintf(ev->error, sizeof ev->error, "%s", stack.error);
		else
			snprintf(ep->end, sizeof ep->end, "stopped after %d %s: %.200s", ep->taken,
			         log_plural((unsigned)ep->taken, "sample", "samples"), stack.error);
		log_msg(rc == -ESRCH ? LOG_DEBUG : LOG_WARNING, "%s[%d] thread %d: no stack: %s",
		        ev->comm, (int)ep->pid, (int)ep->tid, stack.error);
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
static bool take_dump_token(struct capture *c, uint64_t now_ms)
{
	double rate = c->cfg->max_dumps_per_second;

	c->tokens += (double)(now_ms - c->tokens_ms) * rate / 1000.0;
	if (c->tokens > rate)
		c->tokens = rate;
	c->tokens_ms = now_ms;
	if (c->tokens < 1.0)
		return false;
	c->tokens -= 1.0;
	return true;
}

static bool episode_running(const struct capture *c, pid_t tid, enum kind kind)
{
	for (size_t i = 0; i < c->nactive; i++)
		if (c->active[i]->ep.tid == tid && c->active[i]->kind == kind)
			return true;
	return false;
}

/* The event of a thread that tripped, with its first fields filled; NULL
 * when out of memory (said). */
static struct capture_event *event_new(const struct capture *c, const struct watch_proc *proc,
                                       const struct sampler_thread *t,
                                       const struct watch_config *wc,
                                       const struct capture_trip *trip)
{
	struct capture_event *ev = calloc(1, sizeof *ev);
	int planned = c->cfg->episode_samples ? c->cfg->episode_samples : 1;

	if (!ev || episode_init(&ev->ep, t->pid, t->tid, planned) < 0) {
		free(ev);
		log_msg(LOG_ERR, "out of memory: no event for thread %d", (int)t->tid);
		return NULL;
	}
	ev->watch = strdup(wc->name);
	ev->details = trip->details ? strdup(trip->details) : NULL;
	if (!ev->watch || (trip->details && !ev->details)) {
		capture_event_free(ev);
		log_msg(LOG_ERR, "out of memory: no event for thread %d", (int)t->tid);
		return NULL;
	}
	ev->time_us = clock_real_us();
	ev->kind = trip->kind;
	ev->usage = trip->usage;
	ev->threshold = trip->threshold;
	ev->consecutive = wc->consecutive;
	ev->run_delay = trip->run_delay;
	snprintf(ev->comm, sizeof ev->comm, "%s", proc->comm);
	ev->start_ticks = proc->start_ticks;
	return ev;
}

/* The thread's name and where its process runs, after its sample. */
static void read_where(struct capture_event *ev, const struct sampler_thread *t)
{
	char exe[PATH_MAX], cgroup[PATH_MAX];
	struct procfs_status status;

	/* Each is "" (0) when the thread or its process is gone by now. */
	procfs_read_comm(t->pid, t->tid, ev->thread, sizeof ev->thread);
	procfs_read_link(t->pid, "exe", exe, sizeof exe);
	ev->exe = strdup(exe);
	procfs_read_cgroup(t->pid, cgroup, sizeof cgroup);
	ev->cgroup = strdup(cgroup);
	watch_read_unit(t->pid, ev->unit, sizeof ev->unit);
	/* The innermost namespace's pid is the one the process knows itself
	 * by (and its logs say). */
	if (procfs_read_status(t->pid, 0, &status) == 0 && status.nnspid > 0)
		ev->nspid = status.nspid[status.nnspid - 1];
}

void capture_copied(struct capture *c, const struct watch_proc *proc,
                    const struct sampler_thread *t, const struct watch_config *wc,
                    const struct capture_trip *trip, struct stackdump_stack *stack,
                    const char *error)
{
	struct capture_event *ev = event_new(c, proc, t, wc, trip);

	if (!ev) {
		stackdump_stack_free(stack);
		return;
	}
	ev->ep.planned = 1;
	if (stack->nframes)
		ev->capture = "copy";
	snprintf(ev->error, sizeof ev->error, "%s", error ? error : "");
	if (episode_add(&ev->ep, stack) < 0)
		stackdump_stack_free(stack);
	read_where(ev, t);
	c->done(ev, c->done_arg);
}

void capture_start(struct capture *c, const struct watch_proc *proc,
                   const struct sampler_thread *t, const struct watch_config *wc,
                   const struct capture_trip *trip, uint64_t now_ms)
{
	struct capture_event *ev;
	bool go_on;

	if (episode_running(c, t->tid, trip->kind) || !(ev = event_new(c, proc, t, wc, trip)))
		return;
	/* Dump first: the sooner the thread is caught, the likelier it is still
	 * in the code that made it hot. */
	go_on = take_sample(c, ev, now_ms);
	read_where(ev, t);
	/* More episodes than dumps per second could not get one sample each. */
	if (go_on && c->nactive < (size_t)c->cfg->max_dumps_per_second) {
		if (c->nactive == c->active_cap) {
			size_t cap = c->active_cap ? 2 * c->active_cap : 8;
			struct capture_event **a = reallocarray(c->active, cap, sizeof *a);

			if (!a) {
				snprintf(ev->ep.end, sizeof ev->ep.end, "out of memory: one sample");
				c->done(ev, c->done_arg);
				return;
			}
			c->active = a;
			c->active_cap = cap;
		}
		ev->ep.next_ms = now_ms + c->cfg->sample_interval_ms;
		c->active[c->nactive++] = ev;
		return;
	}
	if (go_on)
		snprintf(ev->ep.end, sizeof ev->ep.end, "too many episodes at once (%zu): one sample",
		         c->nactive);
	c->done(ev, c->done_arg);
}

/* Takes EV's sample due at NOW_MS, or skips it.  Returns false when the
 * episode ends: its thread exited or went idle, it cannot be stopped, or
 * its samples are taken. */
static bool sample_one(struct capture *c, struct capture_event *ev, uint64_t now_ms)
{
	struct episode *ep = &ev->ep;
	uint64_t busy;
	bool runnable;

	if (episode_thread_busy(ep->pid, ep->tid, &busy, &runnable) < 0) {
		snprintf(ep->end, sizeof ep->end, "thread exited after %d %s", ep->taken,
		         log_plural((unsigned)ep->taken, "sample", "samples"));
		return false;
	}
	if (ep->last_busy_ns &&
	    episode_went_idle(busy - ep->last_busy_ns, (now_ms - ep->last_sample_ms) * 1000000,
	                      runnable, ev->threshold)) {
		snprintf(ep->end, sizeof ep->end, "thread went idle after %d %s", ep->taken,
		         log_plural((unsigned)ep->taken, "sample", "samples"));
		return false;
	}
	if (!take_dump_token(c, now_ms)) {
		ep->skipped++;
		return episode_remaining(ep) > 0;
	}
	return take_sample(c, ev, now_ms);
}

void capture_sample(struct capture *c, uint64_t now_ms)
{
	for (size_t i = 0; i < c->nactive;) {
		struct capture_event *ev = c->active[i];
		struct episode *ep = &ev->ep;

		if (ep->next_ms > now_ms) {
			i++;
			continue;
		}
		if (sample_one(c, ev, now_ms)) {
			ep->next_ms += c->cfg->sample_interval_ms;
			if (ep->next_ms <= now_ms)
				ep->next_ms = now_ms + c->cfg->sample_interval_ms;
			i++;
			continue;
		}
		if (!ep->end[0] && ep->skipped)
			snprintf(ep->end, sizeof ep->end, "cut short: %d of %d samples skipped "
			         "(max_dumps_per_second, or the thread did not stop)", ep->skipped,
			         ep->planned);
		if (ep->end[0])
			log_msg(LOG_INFO, "episode of %s[%d] thread %d: %s", ev->comm, (int)ep->pid,
			        (int)ep->tid, ep->end);
		c->active[i] = c->active[--c->nactive];
		c->done(ev, c->done_arg);
	}
}

uint64_t capture_next_ms(const struct capture *c)
{
	uint64_t next = UINT64_MAX;

	for (size_t i = 0; i < c->nactive; i++)
		if (c->active[i]->ep.next_ms < next)
			next = c->active[i]->ep.next_ms;
	return next;
}

void capture_poll(struct capture *c)
{
	stackdump_poll(c->dumper);
}

size_t capture_finish_all(struct capture *c)
{
	size_t n = c->nactive;

	while (c->nactive) {
		struct capture_event *ev = c->active[--c->nactive];

		snprintf(ev->ep.end, sizeof ev->ep.end, "cpumond stopped after %d %s", ev->ep.taken,
		         log_plural((unsigned)ev->ep.taken, "sample", "samples"));
		c->done(ev, c->done_arg);
	}
	return n;
}
