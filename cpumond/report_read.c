/* report_read: the events of `cpumond report`'s window, read through
 * store's readers (store_each_event_in, store_get_stack) from one database
 * or several, into the aggregation; for --usage, the usage history
 * (store_each_usage_in) and the events into report_usage.h's. */
#include "cpumond/report.h"

#include <errno.h>
#include <fnmatch.h>
#include <string.h>
#include <sys/stat.h>

#include "cpumond/log.h"
#include "cpumond/report_internal.h"

struct collect {
	struct store *st;
	struct report *r;
	const char *path;        /* of st: the host of events stored without one */
	const char *host;        /* --host, or NULL */
	const char *unit;        /* --unit, or NULL */
	const regex_t *cgroup;   /* --cgroup, or NULL */
	struct symbolize *names; /* or NULL */
	int error;               /* negative errno of a failure inside the walk */
};

/* Gives the report stack ST, its functions named at read time first when
 * there are names to look up (as stored, out of memory). */
static int add_stack(struct collect *c, const struct stackdump_stack *st)
{
	struct stackdump_stack named;
	int e;

	if (!c->names || st->nframes == 0 ||
	    symbolize_stack(c->names, st, SYMBOLIZE_FUNCTIONS, &named) < 0)
		return report_add_stack(c->r, st);
	e = report_add_stack(c->r, &named);
	stackdump_stack_free(&named);
	return e;
}

/* Gives the report the frames of every stack of EV it has not seen yet.
 * The key stack's frames come with the event (its own sample's, with the
 * same modules, functions and symbols as the stored stack's); the others
 * are read from the stacks table.  A stack deleted since the event was read
 * counts as one without frames. */
static int fetch_stacks(struct collect *c, const struct store_event *ev)
{
	for (size_t i = 0; i < ev->nstacks; i++) {
		struct stackdump_stack st;
		int e;

		if (report_has_stack(c->r, ev->stacks[i].hash))
			continue;
		if (ev->stacks[i].hash == ev->stack.hash && ev->stack.nframes > 0) {
			e = add_stack(c, &ev->stack);
			if (e < 0)
				return e;
			continue;
		}
		e = store_get_stack(c->st, ev->stacks[i].hash, &st);
		if (e == -ENOENT) {
			st = (struct stackdump_stack){ .hash = ev->stacks[i].hash };
		} else if (e < 0) {
			log_msg(LOG_ERR, "%s", store_error(c->st));
			return e;
		}
		e = add_stack(c, &st);
		stackdump_stack_free(&st);
		if (e < 0)
			return e;
	}
	if (ev->nstacks == 0 && ev->stack.nframes > 0 && !report_has_stack(c->r, ev->stack.hash))
		return add_stack(c, &ev->stack);
	return 0;
}

static int collect_event(const struct store_event *ev, void *ctx)
{
	struct collect *c = ctx;
	struct store_event named;
	int e;

	if (!ev->host || !ev->host[0]) {
		named = *ev;
		named.host = c->path;
		ev = &named;
	}
	/* An event without a unit or cgroup (none, or an older cpumond's)
	 * matches no --unit or --cgroup. */
	if ((c->host && strcmp(ev->host, c->host) != 0) ||
	    (c->unit && (!ev->unit[0] || fnmatch(c->unit, ev->unit, 0) != 0)) ||
	    (c->cgroup && (!ev->cgroup[0] || regexec(c->cgroup, ev->cgroup, 0, NULL, 0) != 0)))
		return 0;
	e = fetch_stacks(c, ev);

	if (e == 0)
		e = report_add_event(c->r, ev);
	if (e < 0) {
		c->error = e;
		return 1;   /* stops the walk */
	}
	return 0;
}

/* Adds the events of database PATH to C->r.  NAME: say which database
 * failed (there are several). */
static int read_database(const char *path, const struct store_filter *filter, bool name,
                         struct collect *c)
{
	char err[512];
	int e = store_open(path, false, &c->st, err, sizeof err);

	if (e < 0) {
		log_msg(LOG_ERR, "%s", err);
		return e;
	}
	c->path = path;
	c->error = 0;
	e = store_each_event_in(c->st, filter, collect_event, c);
	if (e == 1)
		e = c->error;
	if (e == -ENOMEM)
		log_msg(LOG_ERR, "cannot read the events of %s: out of memory", path);
	else if (e < 0 && c->error == 0)
		log_msg(LOG_ERR, "%s%s%s", name ? path : "", name ? ": " : "", store_error(c->st));
	store_close(c->st);
	c->st = NULL;
	return e;
}

/* Whether database I of DBS is the same file as one before it (two copies
 * of one file are two hosts' worth of events, but one file given twice
 * would count each event twice). */
static bool read_before(const char *const *dbs, size_t i)
{
	struct stat a, b;

	if (stat(dbs[i], &a) < 0)
		return false;   /* store_open says why */
	for (size_t k = 0; k < i; k++) {
		if (stat(dbs[k], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			log_msg(LOG_WARNING, "%s is the same database as %s: reading it once",
			        dbs[i], dbs[k]);
			return true;
		}
	}
	return false;
}

/* Calls READ(path, filter, name, i, CTX) for database I of OPT's, each
 * file once, until one fails: NAME when there are several (the message
 * says which failed).  Returns 0 or the failure. */
static int each_database(const struct report_options *opt,
                         int (*read)(const char *path, const struct store_filter *f, bool name,
                                     size_t i, void *ctx),
                         void *ctx)
{
	const struct store_filter filter = {
		.since_us = opt->since_us, .until_us = opt->until_us, .watch = opt->watch,
		.comm = opt->comm, .thread = opt->thread, .kind = opt->kind, .pid = opt->pid,
	};
	const char *const *dbs = opt->ndatabases ? opt->databases : &opt->database;
	size_t ndbs = opt->ndatabases ? opt->ndatabases : 1;
	int e = 0;

	for (size_t i = 0; i < ndbs && e == 0; i++)
		if (!read_before(dbs, i))
			e = read(dbs[i], &filter, ndbs > 1, i, ctx);
	return e;
}

static int read_events(const char *path, const struct store_filter *f, bool name, size_t i,
                       void *ctx)
{
	(void)i;
	return read_database(path, f, name, ctx);
}

int report_read(const struct report_options *opt, struct report *r)
{
	struct collect c = {
		.r = r, .host = opt->host, .unit = opt->unit,
		.cgroup = opt->cgroup ? opt->cgroup_re : NULL, .names = opt->names,
	};

	return each_database(opt, read_events, &c);
}

/* ---- --usage ---- */

struct usage_collect {
	struct report_usage *u;
	size_t source;
	int error;
};

static int collect_row(const struct store_usage *row, void *ctx)
{
	struct usage_collect *c = ctx;

	c->error = report_usage_add_row(c->u, c->source, row);
	return c->error < 0;
}

static int collect_usage_event(const struct store_event *ev, void *ctx)
{
	struct usage_collect *c = ctx;

	c->error = report_usage_add_event(c->u, c->source, ev);
	return c->error < 0;
}

/* Adds the history and the events of database I, PATH, to the report. */
static int read_usage(const char *path, const struct store_filter *filter, bool name, size_t i,
                      void *ctx)
{
	struct usage_collect *c = ctx;
	struct store *st;
	char err[512];
	int e = store_open(path, false, &st, err, sizeof err);

	if (e < 0) {
		log_msg(LOG_ERR, "%s", err);
		return e;
	}
	c->source = i;
	c->error = 0;
	e = store_each_usage_in(st, filter, collect_row, c);
	if (e == 0)
		e = store_each_event_in(st, filter, collect_usage_event, c);
	if (e == 1)
		e = c->error;
	if (e == -ENOMEM)
		log_msg(LOG_ERR, "cannot read the usage history of %s: out of memory", path);
	else if (e < 0)
		log_msg(LOG_ERR, "%s%s%s", name ? path : "", name ? ": " : "", store_error(st));
	store_close(st);
	return e;
}

int report_read_usage(const struct report_options *opt, struct report_usage *u)
{
	struct usage_collect c = { .u = u };

	return each_database(opt, read_usage, &c);
}
