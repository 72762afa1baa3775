#include "cpumond/capture.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/clock.h"
#include "cpumond/log.h"
#include "procfs/procfs.h"
#include "stackdump/perfsample.h"
#include "stackdump/stackdump.h"

/* An episode being sampled.  A perf episode has its sampler from the trip
 * to its end, on every path (run_end, capture_finish_all, capture_free):
 * two descriptors and a ring of PERFSAMPLE_RING_SAMPLES samples of at
 * most 64 KiB (260 KiB of locked memory).  An episode uses one capture
 * from start to end: there are no mixed episodes. */
struct run {
	struct capture_event *ev;
	struct perfsample *perf;         /* NULL: ptrace stops */
	int reads;                       /* of the perf ring */
	uint64_t lost;                   /* the ring's lost samples counted so far */
};

/* Why capture = auto or perf did not use perf, said once each: errnos of
 * perfsample_open, and CPython. */
#define SAID_MAX 16

struct capture {
	const struct config *cfg;        /* the limits */
	struct metrics *metrics;
	capture_done_fn done;
	void *done_arg;
	struct stackdump *dumper;
	struct run *active;              /* episodes being sampled */
	size_t nactive, active_cap;      /* nactive <= max_dumps_per_second */
	double tokens;                   /* dump budget, see take_dump_token */
	uint64_t tokens_ms;
	int said[SAID_MAX];              /* reasons logged (positive errnos; 0 CPython) */
	size_t nsaid;
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
	for (size_t i = 0; i < c->nactive; i++) {
		perfsample_close(c->active[i].perf);
		capture_event_free(c->active[i].ev);
	}
	free(c->active);
	free(c);
}

void capture_configure(struct capture *c, const struct config *cfg)
{
	c->cfg = cfg;
}

/* Counts and keeps the result RC of one sample of EV, STACK (freed here),
 * taken by HOW: the same for both captures.  Returns false when the
 * episode must end (its end says why). */
static bool add_sample(struct capture *c, struct capture_event *ev, int rc,
                       struct stackdump_stack *stack, enum metrics_capture how)
{
	struct episode *ep = &ev->ep;
	bool go_on = true;

	if (rc == 0 && stack->process_start != ev->start_ticks) {
		/* The process exited and another took its pid (and this tid). */
		snprintf(stack->error, sizeof stack->error, "tid %d exited", (int)ep->tid);
		rc = -ESRCH;
	}

	if (rc == 0)
		metrics_dump(c->metrics, ev->watch, how, stack->stop_ns);
	else
		metrics_dump_failed(c->metrics, ev->watch, rc == -ESRCH ? METRICS_EXITED :
		                    rc == -EPERM ? METRICS_DENIED :
		                    rc == -EAGAIN || rc == -ETIMEDOUT ? METRICS_BLOCKED : METRICS_OTHER);
	switch (rc) {
	case 0:
		if (ep->taken == 0 && stack->error[0])
			snprintf(ev->error, sizeof ev->error, "%s", stack->error);
		episode_add(ep, stack);
		ev->capture = how == METRICS_PERF ? "perf" : "ptrace";
		break;
	case -EAGAIN:      /* in uninterruptible sleep: not burning CPU now */
	case -ETIMEDOUT:   /* did not stop in time; stackdump_poll detaches it */
		ep->skipped++;
		break;
	default:           /* exited, or ptrace refused (another tracer came) */
		if (ep->taken == 0)
			snprintf(ev->error, sizeof ev->error, "%s", stack->error);
		else
			snprintf(ep->end, sizeof ep->end, "stopped after %d %s: %.200s", ep->taken,
			         log_plural((unsigned)ep->taken, "sample", "samples"), stack->error);
		log_msg(rc == -ESRCH ? LOG_DEBUG : LOG_WARNING, "%s[%d] thread %d: no stack: %s",
		        ev->comm, (int)ep->pid, (int)ep->tid, stack->error);
		go_on = false;
	}
	stackdump_stack_free(stack);
	return go_on && episode_remaining(ep) > 0;
}

/* Where the idle check of the next sample starts from. */
static void mark_sampled(struct episode *ep, uint64_t now_ms)
{
	bool runnable;

	ep->last_sample_ms = now_ms;
	if (episode_thread_busy(ep->pid, ep->tid, &ep->last_busy_ns, &runnable) < 0)
		ep->last_busy_ns = 0;
}

/* Takes one stack sample of EV's thread with a ptrace stop.  Returns false
 * when the episode must end (its end says why). */
static bool take_sample(struct capture *c, struct capture_event *ev, uint64_t now_ms)
{
	struct episode *ep = &ev->ep;
	struct stackdump_stack stack;
	int rc = stackdump_thread(c->dumper, ep->pid, ep->tid, c->cfg->max_frames, &stack);
	bool go_on = add_sample(c, ev, rc, &stack, METRICS_PTRACE);

	mark_sampled(ep, now_ms);
	return go_on;
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

bool capture_in_episode(const struct capture *c, pid_t tid)
{
	for (size_t i = 0; i < c->nactive; i++)
		if (c->active[i].ev->ep.tid == tid)
			return true;
	return false;
}

/* Whether TID has an episode of KIND under way. */
static bool episode_running(const struct capture *c, pid_t tid, enum kind kind)
{
	for (size_t i = 0; i < c->nactive; i++)
		if (c->active[i].ev->ep.tid == tid && c->active[i].ev->kind == kind)
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

/* Logs LEVEL MSG once for REASON (an errno; 0: CPython). */
static void say_once(struct capture *c, int reason, int level, const char *msg)
{
	for (size_t i = 0; i < c->nsaid; i++)
		if (c->said[i] == reason)
			return;
	if (c->nsaid < SAID_MAX)
		c->said[c->nsaid++] = reason;
	log_msg(level, "%s", msg);
}

/* Whether PID runs CPython: an executable named python*, or a libpython
 * mapped.  Its Python frames are read from the interpreter's memory,
 * which must not change under the reader: in a ptrace stop only
 * (pyframes.h); the kernel's perf copy has the native stack alone. */
static bool runs_cpython(pid_t pid)
{
	char exe[PATH_MAX];
	const char *file;

	if (procfs_read_link(pid, "exe", exe, sizeof exe) < 0)
		return false;
	file = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	return strncmp(file, "python", 6) == 0 || procfs_maps_path_has(pid, "/libpython3");
}

/* How EV's episode takes its samples, by capture =: 1 with *PERF open
 * (the kernel takes the first sample at once), 0 for ptrace, or -1 for no
 * sample at all (capture = perf refused, or the thread exited; EV->error
 * says why).  ROOM: the episode can stay under way after its first
 * sample. */
static int choose_capture(struct capture *c, struct capture_event *ev, bool room,
                          struct perfsample **perf)
{
	struct episode *ep = &ev->ep;
	bool strict = c->cfg->capture == CONFIG_CAPTURE_PERF;
	char why[256], msg[400];
	int rc;

	*perf = NULL;
	if (c->cfg->capture == CONFIG_CAPTURE_PTRACE)
		return 0;
	if (!room) {
		/* A perf episode that cannot stay under way gets no sample; ptrace
		 * still takes one now. */
		if (!strict)
			return 0;
		snprintf(ev->error, sizeof ev->error, "too many episodes at once (%zu): no sample",
		         c->nactive);
		return -1;
	}
	if (!strict && runs_cpython(ep->pid)) {
		snprintf(msg, sizeof msg, "capture = auto: ptrace for the threads of CPython "
		         "(%s[%d] first): their Python frames are read in a stop", ev->comm,
		         (int)ep->pid);
		say_once(c, 0, LOG_INFO, msg);
		return 0;
	}
	rc = perfsample_open(ep->tid, c->cfg->sample_interval_ms * 1000000, 0, perf, why,
	                     sizeof why);
	if (rc == 0)
		return 1;
	if (rc == -ESRCH) {
		snprintf(ev->error, sizeof ev->error, "tid %d exited", (int)ep->tid);
		metrics_dump_failed(c->metrics, ev->watch, METRICS_EXITED);
		return -1;
	}
	if (!strict) {
		snprintf(msg, sizeof msg, "capture = auto: ptrace instead of perf: %s", why);
		say_once(c, -rc, LOG_INFO, msg);
		return 0;
	}
	snprintf(ev->error, sizeof ev->error, "%s", why);
	snprintf(msg, sizeof msg, "capture = perf: no stacks: %s", why);
	say_once(c, -rc, LOG_WARNING, msg);
	metrics_dump_failed(c->metrics, ev->watch, rc == -EACCES || rc == -EPERM ? METRICS_DENIED :
	                    METRICS_OTHER);
	return -1;
}

/* Adds RUN to the episodes under way.  Returns false when out of memory. */
static bool run_add(struct capture *c, const struct run *run)
{
	if (c->nactive == c->active_cap) {
		size_t cap = c->active_cap ? 2 * c->active_cap : 8;
		struct run *a = reallocarray(c->active, cap, sizeof *a);

		if (!a)
			return false;
		c->active = a;
		c->active_cap = cap;
	}
	c->active[c->nactive++] = *run;
	return true;
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
	struct run run = { 0 };
	bool go_on, room;
	int how;

	if (episode_running(c, t->tid, trip->kind) || !(ev = event_new(c, proc, t, wc, trip)))
		return;
	/* More episodes than dumps per second could not get one sample each. */
	room = c->nactive < (size_t)c->cfg->max_dumps_per_second;
	/* Dump first: the sooner the thread is caught, the likelier it is still
	 * in the code that made it hot. */
	how = choose_capture(c, ev, room, &run.perf);
	if (how == 0)
		go_on = take_sample(c, ev, now_ms);
	else
		go_on = how > 0;
	if (how > 0)
		mark_sampled(&ev->ep, now_ms);
	read_where(ev, t);
	if (go_on && room) {
		ev->ep.next_ms = now_ms + c->cfg->sample_interval_ms;
		run.ev = ev;
		if (run_add(c, &run))
			return;
		perfsample_close(run.perf);
		snprintf(ev->ep.end, sizeof ev->ep.end, "out of memory: %s",
		         how > 0 ? "no sample" : "one sample");
		c->done(ev, c->done_arg);
		return;
	}
	if (go_on)
		snprintf(ev->ep.end, sizeof ev->ep.end, "too many episodes at once (%zu): one sample",
		         c->nactive);
	c->done(ev, c->done_arg);
}

/* EP's end: "WHAT after N samples". */
static void say_end(struct episode *ep, const char *what)
{
	snprintf(ep->end, sizeof ep->end, "%s after %d %s", what, ep->taken,
	         log_plural((unsigned)ep->taken, "sample", "samples"));
}

/* Whether EV's thread, BUSY (ns) and RUNNABLE now, went idle since its
 * last sample; its end then says so. */
static bool went_idle(struct capture_event *ev, uint64_t busy, bool runnable, uint64_t now_ms)
{
	struct episode *ep = &ev->ep;

	if (!ep->last_busy_ns ||
	    !episode_went_idle(busy - ep->last_busy_ns, (now_ms - ep->last_sample_ms) * 1000000,
	                       runnable, ev->threshold))
		return false;
	say_end(ep, "thread went idle");
	return true;
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
		say_end(ep, "thread exited");
		return false;
	}
	if (went_idle(ev, busy, runnable, now_ms))
		return false;
	if (!take_dump_token(c, now_ms)) {
		ep->skipped++;
		return episode_remaining(ep) > 0;
	}
	return take_sample(c, ev, now_ms);
}

/* What a read of a perf ring hands each sample: the episode, and when. */
struct perf_read {
	struct capture *c;
	struct capture_event *ev;
	struct perfsample *perf;
	uint64_t now_ms;
	bool end;                /* add_sample ended the episode */
};

/* Unwinds one perf sample as stackdump_thread_copy does, and adds it as a
 * ptrace sample is added.  The first is the trip's sample, as ptrace's
 * first: the others draw on max_dumps_per_second (the unwinds are the
 * daemon's cost), or are skipped. */
static int perf_sample(const struct perfsample_sample *s, void *arg)
{
	struct perf_read *r = arg;
	struct episode *ep = &r->ev->ep;
	struct stackdump_stack stack;
	int rc;

	if (episode_remaining(ep) <= 0)
		return -ECANCELED;
	if ((ep->taken || ep->skipped) && !take_dump_token(r->c, r->now_ms)) {
		ep->skipped++;
		return 0;
	}
	rc = stackdump_thread_copy(r->c->dumper, ep->pid, ep->tid, &s->copy, r->c->cfg->max_frames,
	                           &stack);
	/* The next samples' stack copy fitted to this thread's stack: the
	 * copy is most of what a sample costs the thread.  A refit that fails
	 * keeps the copy as it was. */
	if (rc >= 0)
		(void)perfsample_adapt(r->perf, s, &stack);
	if (!add_sample(r->c, r->ev, rc, &stack, METRICS_PERF)) {
		r->end = true;
		return -ECANCELED;
	}
	return 0;
}

/* The kernel samples every sample_interval of the thread's CPU time in
 * user space: a thread at its THRESHOLD (permille) gives EP's samples in
 * planned * 1000 / threshold sample intervals.  A perf episode lasts at
 * most twice that, and at least twice its samples' intervals: a thread
 * busy in system calls, which the idle check does not end, gives few. */
static int max_reads(const struct episode *ep, int threshold)
{
	int per = threshold > 0 ? (2000 + threshold - 1) / threshold : 2;

	return ep->planned * (per > 2 ? per : 2);
}

/* Reads RUN's ring at NOW_MS: the samples the kernel took since the last
 * read.  Returns false when the episode ends: its samples are taken, its
 * thread exited, exec'd or went idle, or it gave too few samples in
 * max_reads. */
static bool perf_step(struct capture *c, struct run *run, uint64_t now_ms)
{
	struct capture_event *ev = run->ev;
	struct episode *ep = &ev->ep;
	struct perf_read r = { c, ev, run->perf, now_ms, false };
	struct perfsample_info info;
	uint64_t busy;
	bool runnable;
	int rc = perfsample_read(run->perf, perf_sample, &r);

	/* Samples the kernel dropped (the ring full: the loop ran late) are
	 * skipped ones. */
	perfsample_info(run->perf, &info);
	while (run->lost < info.lost && episode_remaining(ep) > 0) {
		ep->skipped++;
		run->lost++;
	}
	if (r.end || episode_remaining(ep) <= 0)
		return false;
	if (rc == -ENOEXEC || rc == -ESRCH ||
	    episode_thread_busy(ep->pid, ep->tid, &busy, &runnable) < 0) {
		say_end(ep, rc == -ENOEXEC ? "the process exec'd" : "thread exited");
		return false;
	}
	if (went_idle(ev, busy, runnable, now_ms))
		return false;
	ep->last_busy_ns = busy;
	ep->last_sample_ms = now_ms;
	if (++run->reads >= max_reads(ep, ev->threshold)) {
		snprintf(ep->end, sizeof ep->end, "%d of %d samples in %d sample intervals: the "
		         "thread ran under half its threshold in user space", ep->taken, ep->planned,
		         run->reads);
		return false;
	}
	return true;
}

/* Closes RUN's sampler; an episode that got no perf sample says why it
 * has no stack.  The debug log says what the sampler did: its samples and
 * the stack copy it ended with (perfsample_adapt's fit). */
static void run_close(struct run *run)
{
	struct capture_event *ev = run->ev;
	struct perfsample_info info;

	if (!run->perf)
		return;
	if (ev->ep.taken == 0 && !ev->error[0])
		snprintf(ev->error, sizeof ev->error, "no perf sample came: the thread did not run "
		         "in user space (%.180s)", ev->ep.end[0] ? ev->ep.end : "episode ended");
	perfsample_info(run->perf, &info);
	log_msg(LOG_DEBUG, "perf sampler of %s[%d] thread %d: %llu %s, stack copy %zu of %zu "
	        "bytes (%u %s), %llu lost", ev->comm, (int)ev->ep.pid, (int)ev->ep.tid,
	        (unsigned long long)info.samples, log_plural((unsigned)info.samples, "sample",
	        "samples"), info.stack_copy, info.stack_size, info.refits,
	        log_plural(info.refits, "refit", "refits"), (unsigned long long)info.lost);
	perfsample_close(run->perf);
	run->perf = NULL;
}

/* Hands over episode I, which ended, and closes its sampler. */
static void run_end(struct capture *c, size_t i)
{
	struct run run = c->active[i];
	struct episode *ep = &run.ev->ep;

	if (!ep->end[0] && ep->skipped)
		snprintf(ep->end, sizeof ep->end, "cut short: %d of %d samples skipped "
		         "(max_dumps_per_second, or the thread did not stop)", ep->skipped,
		         ep->planned);
	run_close(&run);
	if (ep->end[0])
		log_msg(LOG_INFO, "episode of %s[%d] thread %d: %s", run.ev->comm, (int)ep->pid,
		        (int)ep->tid, ep->end);
	c->active[i] = c->active[--c->nactive];
	c->done(run.ev, c->done_arg);
}

void capture_sample(struct capture *c, uint64_t now_ms)
{
	for (size_t i = 0; i < c->nactive;) {
		struct run *run = &c->active[i];
		struct episode *ep = &run->ev->ep;
		bool go_on;

		if (ep->next_ms > now_ms) {
			i++;
			continue;
		}
		go_on = run->perf ? perf_step(c, run, now_ms) : sample_one(c, run->ev, now_ms);
		if (go_on) {
			ep->next_ms += c->cfg->sample_interval_ms;
			if (ep->next_ms <= now_ms)
				ep->next_ms = now_ms + c->cfg->sample_interval_ms;
			i++;
			continue;
		}
		run_end(c, i);
	}
}

uint64_t capture_next_ms(const struct capture *c)
{
	uint64_t next = UINT64_MAX;

	for (size_t i = 0; i < c->nactive; i++)
		if (c->active[i].ev->ep.next_ms < next)
			next = c->active[i].ev->ep.next_ms;
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
		struct run run = c->active[--c->nactive];
		struct capture_event *ev = run.ev;

		snprintf(ev->ep.end, sizeof ev->ep.end, "cpumond stopped after %d %s", ev->ep.taken,
		         log_plural((unsigned)ev->ep.taken, "sample", "samples"));
		run_close(&run);
		c->done(ev, c->done_arg);
	}
	return n;
}
