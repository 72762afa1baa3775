/* report_usage: the busiest threads of the usage history -- the
 * aggregation, the table and the JSON lines (the chart is
 * report_usage_svg.c's). */
#include "cpumond/report_usage.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/json.h"
#include "cpumond/log.h"
#include "cpumond/report_internal.h"
#include "stackdump/stackdump.h"

struct thread_rec {
	struct usage_thread t;
	char *watch, *comm, *thread;
	struct usage_point *points;
	size_t cap;
	double sum;              /* of the usages, for the mean */
};

struct event_rec {
	struct usage_event e;
	char *comm, *thread, *frame;
};

struct report_usage {
	struct thread_rec *threads;
	size_t nthreads, cap;
	size_t *slots;           /* open addressing over threads; SIZE_MAX: empty */
	size_t nslots;           /* a power of two, at least twice nthreads */
	struct event_rec *events;
	size_t nevents, events_cap;
	size_t *rank;            /* thread indexes in rank, after finish */
	struct usage_totals totals;
};

int report_usage_new(struct report_usage **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

void report_usage_free(struct report_usage *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < u->nthreads; i++) {
		free(u->threads[i].watch);
		free(u->threads[i].comm);
		free(u->threads[i].thread);
		free(u->threads[i].points);
	}
	for (size_t i = 0; i < u->nevents; i++) {
		free(u->events[i].comm);
		free(u->events[i].thread);
		free(u->events[i].frame);
	}
	free(u->threads);
	free(u->slots);
	free(u->events);
	free(u->rank);
	free(u);
}

static size_t slot_of(const struct report_usage *u, size_t source, pid_t pid, pid_t tid)
{
	uint64_t h = ((uint64_t)source * 0x9e3779b97f4a7c15ULL) ^
	             ((uint64_t)(uint32_t)pid << 32 | (uint32_t)tid);

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (size_t)h & (u->nslots - 1);
}

/* The index of thread (SOURCE, PID, TID) in U->threads, or where it goes. */
static size_t *find_slot(const struct report_usage *u, size_t source, pid_t pid, pid_t tid)
{
	size_t i = slot_of(u, source, pid, tid);

	for (;; i = (i + 1) & (u->nslots - 1)) {
		size_t k = u->slots[i];

		if (k == SIZE_MAX)
			return &u->slots[i];
		if (u->threads[k].t.source == source && u->threads[k].t.pid == pid &&
		    u->threads[k].t.tid == tid)
			return &u->slots[i];
	}
}

static int grow_slots(struct report_usage *u)
{
	size_t n = u->nslots ? 2 * u->nslots : 64, old = u->nslots;
	size_t *slots = malloc(n * sizeof *slots), *prev = u->slots;

	if (!slots)
		return -ENOMEM;
	memset(slots, 0xff, n * sizeof *slots);
	u->slots = slots;
	u->nslots = n;
	for (size_t i = 0; i < old; i++)
		if (prev[i] != SIZE_MAX) {
			const struct usage_thread *t = &u->threads[prev[i]].t;

			*find_slot(u, t->source, t->pid, t->tid) = prev[i];
		}
	free(prev);
	return 0;
}

/* The thread of (SOURCE, PID, TID), made when new; NULL when out of memory. */
static struct thread_rec *thread_of(struct report_usage *u, size_t source, pid_t pid, pid_t tid)
{
	size_t *slot;

	if (2 * (u->nthreads + 1) > u->nslots && grow_slots(u) < 0)
		return NULL;
	slot = find_slot(u, source, pid, tid);
	if (*slot != SIZE_MAX)
		return &u->threads[*slot];
	if (u->nthreads == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 16;
		struct thread_rec *t = reallocarray(u->threads, cap, sizeof *t);

		if (!t)
			return NULL;
		u->threads = t;
		u->cap = cap;
	}
	*slot = u->nthreads;
	u->threads[u->nthreads] = (struct thread_rec){
		.t = { .source = source, .pid = pid, .tid = tid, .peak = -1 },
	};
	return &u->threads[u->nthreads++];
}

/* *S holds TEXT (copied), kept when it is the same already. */
static int set_text(char **s, const char *text)
{
	char *copy;

	text = text ? text : "";
	if (*s && strcmp(*s, text) == 0)
		return 0;
	if (!(copy = strdup(text)))
		return -ENOMEM;
	free(*s);
	*s = copy;
	return 0;
}

int report_usage_add_row(struct report_usage *u, size_t source, const struct store_usage *row)
{
	struct thread_rec *r = thread_of(u, source, row->pid, row->tid);
	struct usage_thread *t;
	int64_t interval = row->interval_ms > 0 ? row->interval_ms : 0;

	if (!r)
		return -ENOMEM;
	t = &r->t;
	if (r->t.npoints == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		struct usage_point *p = reallocarray(r->points, cap, sizeof *p);

		if (!p)
			return -ENOMEM;
		r->points = p;
		r->cap = cap;
	}
	if (set_text(&r->watch, row->watch) < 0 || set_text(&r->comm, row->comm) < 0 ||
	    set_text(&r->thread, row->thread) < 0)
		return -ENOMEM;
	r->points[t->npoints++] = (struct usage_point){ row->time_us, row->usage };
	t->points = r->points;
	t->watch = r->watch;
	t->comm = r->comm;
	t->thread = r->thread;
	t->threshold = row->threshold;
	if (row->usage > t->peak) {
		t->peak = row->usage;
		t->peak_us = row->time_us;
	}
	if (t->cycles == 0)
		t->first_us = row->time_us;
	t->last_us = row->time_us;
	t->cycles++;
	r->sum += row->usage;
	t->mean = r->sum / (double)t->cycles;
	t->cpu_ms += (uint64_t)((int64_t)row->usage * interval / 1000);
	if (row->usage > row->threshold)
		t->over_ms += (uint64_t)interval;
	if (u->totals.rows == 0 || row->time_us < u->totals.first_us)
		u->totals.first_us = row->time_us;
	if (u->totals.rows == 0 || row->time_us >= u->totals.last_us) {
		u->totals.last_us = row->time_us;
		u->totals.last_end_us = row->time_us + interval * 1000;
	}
	u->totals.rows++;
	return 0;
}

int report_usage_add_event(struct report_usage *u, size_t source, const struct store_event *ev)
{
	struct event_rec *r;
	char frame[REPORT_NAME_LEN] = "";

	if (u->nevents == u->events_cap) {
		size_t cap = u->events_cap ? 2 * u->events_cap : 16;
		struct event_rec *e = reallocarray(u->events, cap, sizeof *e);

		if (!e)
			return -ENOMEM;
		u->events = e;
		u->events_cap = cap;
	}
	if (ev->stack.nframes > 0)
		stackdump_function_name(&ev->stack.frames[0], frame, sizeof frame);
	r = &u->events[u->nevents];
	*r = (struct event_rec){ .comm = strdup(ev->comm ? ev->comm : ""),
	                         .thread = strdup(ev->thread ? ev->thread : ""),
	                         .frame = strdup(frame) };
	u->nevents++;      /* counted now so that report_usage_free frees it */
	if (!r->comm || !r->thread || !r->frame)
		return -ENOMEM;
	r->e = (struct usage_event){
		.source = source, .time_us = ev->time_us, .pid = ev->pid, .tid = ev->tid,
		.usage = ev->usage, .threshold = ev->threshold, .comm = r->comm,
		.thread = r->thread, .frame = r->frame,
	};
	return 0;
}

static int cmp_rank(const void *a, const void *b, void *arg)
{
	const struct thread_rec *th = arg;
	const struct usage_thread *x = &th[*(const size_t *)a].t, *y = &th[*(const size_t *)b].t;

	if (x->cpu_ms != y->cpu_ms)
		return x->cpu_ms > y->cpu_ms ? -1 : 1;
	if (x->peak != y->peak)
		return x->peak > y->peak ? -1 : 1;
	if (x->source != y->source)
		return x->source < y->source ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

static int cmp_event(const void *a, const void *b)
{
	const struct usage_event *x = &((const struct event_rec *)a)->e;
	const struct usage_event *y = &((const struct event_rec *)b)->e;

	if (x->time_us != y->time_us)
		return x->time_us < y->time_us ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

int report_usage_finish(struct report_usage *u)
{
	u->rank = malloc((u->nthreads + 1) * sizeof *u->rank);
	if (!u->rank)
		return -ENOMEM;
	for (size_t i = 0; i < u->nthreads; i++)
		u->rank[i] = i;
	qsort_r(u->rank, u->nthreads, sizeof *u->rank, cmp_rank, u->threads);
	if (u->nevents)          /* qsort's array must not be NULL, even empty */
		qsort(u->events, u->nevents, sizeof *u->events, cmp_event);
	for (size_t i = 0; i < u->nevents; i++) {
		const struct usage_event *e = &u->events[i].e;
		size_t *slot = u->nslots ? find_slot(u, e->source, e->pid, e->tid) : NULL;

		if (slot && *slot != SIZE_MAX)
			u->threads[*slot].t.events++;
	}
	u->totals.threads = u->nthreads;
	u->totals.events = u->nevents;
	return 0;
}

void report_usage_totals(const struct report_usage *u, struct usage_totals *t)
{
	*t = u->totals;
}

const struct usage_thread *report_usage_thread(const struct report_usage *u, size_t i)
{
	return u->rank && i < u->nthreads ? &u->threads[u->rank[i]].t : NULL;
}

const struct usage_event *report_usage_event(const struct report_usage *u, size_t i)
{
	return i < u->nevents ? &u->events[i].e : NULL;
}

long report_usage_rank_of(const struct report_usage *u, const struct usage_event *ev, size_t top)
{
	size_t n = top && top < u->nthreads ? top : u->nthreads;

	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *t = report_usage_thread(u, i);

		if (t->source == ev->source && t->pid == ev->pid && t->tid == ev->tid)
			return (long)i;
	}
	return -1;
}

static size_t shown(const struct report_usage *u, size_t top)
{
	return top && top < u->nthreads ? top : u->nthreads;
}

/* NAME, SEP, ID and END ("nginx[42]"), NAME escaped for a terminal,
 * padded with spaces to WIDTH columns (bytes: a name's escapes are ASCII,
 * its UTF-8 is counted as bytes). */
static void put_padded(const char *name, char sep, long id, const char *end, int width, FILE *out)
{
	char buf[256];
	FILE *f = fmemopen(buf, sizeof buf - 1, "w");
	long n = 0;

	buf[0] = buf[sizeof buf - 1] = '\0';
	if (f) {
		stackdump_put_escaped(name, f);
		fprintf(f, "%c%ld%s", sep, id, end);
		n = ftell(f);
		fclose(f);
		buf[n < (long)sizeof buf - 1 ? n : (long)sizeof buf - 1] = '\0';
	}
	fprintf(out, "%-*s", width, buf);
}

void report_usage_print_table(const struct report_usage *u, size_t top, FILE *out)
{
	const struct usage_totals *t = &u->totals;
	size_t n = shown(u, top);

	if (t->rows == 0) {
		fputs("no usage history in the window (the daemon keeps it while history_threads "
		      "is above 0; a database older than schema version 5 has none)\n", out);
		return;
	}
	fprintf(out, "%zu %s of %zu kept in the usage history from ", n,
	        log_plural(n, "thread", "threads"), t->threads);
	report_put_local(t->first_us, false, out);
	fputs(" to ", out);
	report_put_local(t->last_end_us, true, out);
	fprintf(out, ", %zu %s\n\n", t->events, log_plural(t->events, "event", "events"));
	fputs("RANK PEAK‰ MEAN‰ OVER min   CPU s EVENTS PROCESS[PID]          THREAD/TID"
	      "            WATCH\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *th = report_usage_thread(u, i);

		fprintf(out, "%4zu %5d %5.0f %8.1f %7.1f %6zu ", i + 1, th->peak, th->mean,
		        (double)th->over_ms / 60000.0, (double)th->cpu_ms / 1000.0, th->events);
		put_padded(th->comm, '[', th->pid, "]", 21, out);
		fputc(' ', out);
		put_padded(th->thread, '/', th->tid, "", 21, out);
		fputc(' ', out);
		stackdump_put_escaped(th->watch, out);
		fputc('\n', out);
	}
}

void report_usage_print_json(const struct report_usage *u, size_t top, FILE *out)
{
	size_t n = shown(u, top);

	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *t = report_usage_thread(u, i);

		fprintf(out, "{\"rank\":%zu,\"pid\":%d,\"tid\":%d,\"process\":", i + 1, (int)t->pid,
		        (int)t->tid);
		json_put_string(t->comm, out);
		fputs(",\"thread\":", out);
		json_put_string(t->thread, out);
		fputs(",\"watch\":", out);
		json_put_string(t->watch, out);
		fprintf(out, ",\"threshold\":%d,\"peak\":%d,\"peak_time\":\"", t->threshold, t->peak);
		json_put_time(t->peak_us, out);
		fprintf(out, "\",\"mean\":%.1f,\"over_threshold_s\":%.1f,\"cpu_s\":%.1f,"
		        "\"cycles\":%" PRIu64 ",\"events\":%zu,\"first_seen\":\"", t->mean,
		        (double)t->over_ms / 1000.0, (double)t->cpu_ms / 1000.0, t->cycles, t->events);
		json_put_time(t->first_us, out);
		fputs("\",\"last_seen\":\"", out);
		json_put_time(t->last_us, out);
		fputs("\"}\n", out);
	}
}
