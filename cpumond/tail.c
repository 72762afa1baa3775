#include "cpumond/tail.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cpumond/eventfmt.h"
#include "cpumond/log.h"
#include "stackdump/stackdump.h"

/* Between polls for new events while following. */
#define TAIL_POLL_MS 200

/* T_US (microseconds since the epoch) as local time, and its microseconds. */
static bool local_time(int64_t t_us, struct tm *tm, long *usec)
{
	int64_t sec = t_us / 1000000, us = t_us % 1000000;
	time_t t;

	if (us < 0) {
		us += 1000000;
		sec--;
	}
	t = (time_t)sec;
	*usec = (long)us;
	return localtime_r(&t, tm) != NULL;
}

/* "2026-11-29 13:04:05 +0000" */
static void put_time_human(int64_t t_us, FILE *out)
{
	char buf[64];
	struct tm tm;
	long usec;

	if (!local_time(t_us, &tm, &usec) ||
	    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm) == 0)
		snprintf(buf, sizeof buf, "@%" PRId64 " µs", t_us);
	fputs(buf, out);
}

/* "43 µs", or "12.3 ms" from 10 ms on. */
static void put_duration(uint64_t ns, FILE *out)
{
	uint64_t us = (ns + 500) / 1000;

	if (us < 10000)
		fprintf(out, "%" PRIu64 " µs", us);
	else
		fprintf(out, "%" PRIu64 ".%" PRIu64 " ms", (us + 50) / 1000, (us + 50) % 1000 / 100);
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* How many of the episode's samples had the key stack. */
static unsigned key_count(const struct store_event *ev)
{
	for (size_t i = 0; i < ev->nstacks; i++)
		if (ev->stacks[i].hash == ev->stack.hash)
			return ev->stacks[i].count;
	return ev->stack.nframes > 0;
}

/* "  unit nginx.service  cgroup /system.slice/nginx.service": where the
 * process runs, each part when known (an older cpumond's events have
 * neither, and then no line). */
static void put_origin(const struct store_event *ev, FILE *out)
{
	const char *unit = or_empty(ev->unit), *cgroup = or_empty(ev->cgroup);

	if (!unit[0] && !cgroup[0])
		return;
	if (unit[0]) {
		fputs("  unit ", out);
		stackdump_put_escaped(unit, out);
	}
	if (cgroup[0]) {
		fputs("  cgroup ", out);
		stackdump_put_escaped(cgroup, out);
	}
	fputc('\n', out);
}

void tail_format_human(const struct store_event *ev, FILE *out)
{
	const char *error = eventfmt_error(ev);
	char what[160];

	put_time_human(ev->time_us, out);
	fputs("  ", out);
	stackdump_put_escaped(or_empty(ev->comm), out);
	/* In a container the process knows itself by another pid, which its
	 * own logs and tools show. */
	if (ev->nspid > 0 && ev->nspid != ev->pid)
		fprintf(out, "[%d (%d in its namespace)] thread \"", (int)ev->pid, (int)ev->nspid);
	else
		fprintf(out, "[%d] thread \"", (int)ev->pid);
	stackdump_put_escaped(or_empty(ev->thread), out);
	fprintf(out, "\"/%d  ", (int)ev->tid);
	if (strcmp(eventfmt_kind(ev), "hot") == 0) {
		fprintf(out, "usage %d‰ %s %d‰", ev->usage, ev->usage > ev->threshold ? ">" : "≤",
		        ev->threshold);
	} else {
		eventfmt_what(ev, what, sizeof what);
		fputs(what, out);
	}
	fprintf(out, " (%d sample%s over)", ev->consecutive, ev->consecutive == 1 ? "" : "s");
	if (ev->samples > 1 && ev->stack.nframes > 0)
		fprintf(out, "  key stack in %u of %u samples", key_count(ev), ev->samples);
	if (ev->stack.stop_ns > 0) {
		fputs(ev->samples > 1 ? "  stopped median " : "  stopped ", out);
		put_duration(ev->stack.stop_ns, out);
	}
	if (ev->run_delay > 0)
		fprintf(out, "  run delay %d‰", ev->run_delay);
	fputs("  [watch ", out);
	stackdump_put_escaped(or_empty(ev->watch), out);
	fputs("]\n", out);
	put_origin(ev, out);
	/* The facts of a kind other than hot, as stored (tail --json has them
	 * as an object). */
	if (ev->details && ev->details[0]) {
		fputs("  details ", out);
		stackdump_put_escaped(ev->details, out);
		fputc('\n', out);
	}

	if (error[0]) {
		fputs(ev->stack.nframes > 0 ? "  partial stack: " : "  no stack: ", out);
		stackdump_put_escaped(error, out);
		fputc('\n', out);
	}
	if (ev->episode_end && ev->episode_end[0]) {
		fputs("  episode ", out);
		stackdump_put_escaped(ev->episode_end, out);
		fputc('\n', out);
	}
	/* It says itself when the stack is truncated. */
	if (ev->stack.nframes > 0)
		stackdump_print(&ev->stack, "    ", out);
}

struct tail_ctx {
	bool json;
	FILE *out;
	struct symbolize *names;
};

static int print_event(const struct store_event *ev, void *arg)
{
	const struct tail_ctx *ctx = arg;
	struct store_event named;
	bool own = false;

	/* Each event is named before it is printed: a lookup costs at most
	 * the debuginfod timeout, once a run, and then --follow goes on.
	 * Out of memory, it is printed as stored. */
	if (ctx->names && ev->stack.nframes > 0) {
		named = *ev;
		own = symbolize_stack(ctx->names, &ev->stack, SYMBOLIZE_INSTRUCTIONS,
		                      &named.stack) == 0;
		if (own)
			ev = &named;
	}
	if (ctx->json)
		eventfmt_json(ev, ctx->out);
	else
		tail_format_human(ev, ctx->out);
	if (own)
		stackdump_stack_free(&named.stack);
	/* Stops the walk; tail_run reports the write error. */
	return ferror(ctx->out) ? 1 : 0;
}

/* Flushes OUT after a batch; 0 or a negative errno, reported. */
static int flush_output(FILE *out)
{
	int e = 0;

	errno = 0;
	if (fflush(out) == EOF || ferror(out))
		e = errno ? -errno : -EIO;
	if (e < 0)
		log_errno(LOG_ERR, -e, "cannot write the output");
	return e;
}

/* Sleeps one poll interval; true when *STOP is set before or after.  A signal
 * that sets *STOP also cuts the sleep short (EINTR). */
static bool poll_wait(volatile const int *stop)
{
	struct timespec ts = { 0, TAIL_POLL_MS * 1000000L };

	if (*stop)
		return true;
	nanosleep(&ts, NULL);
	return *stop != 0;
}

/* The file at PATH is no longer OPENED, the one being read (moved away and
 * created anew).  A missing file keeps the old one: it may come back. */
static bool replaced(const char *path, const struct stat *opened)
{
	struct stat sb;

	if (stat(path, &sb) < 0)
		return false;
	return sb.st_dev != opened->st_dev || sb.st_ino != opened->st_ino;
}

int tail_run(const struct tail_options *opt, volatile const int *stop)
{
	struct tail_ctx ctx = { .json = opt->json, .out = stdout, .names = opt->names };
	struct store *st = NULL;
	struct stat opened = { 0 };
	bool said_waiting = false, first = true;
	int64_t after = 0;
	char err[512];
	int e;

	tzset();
	for (;;) {
		if (!st) {
			e = store_open(opt->database, false, &st, err, sizeof err);
			if (e < 0) {
				if (!opt->follow || (e != -ENOENT && e != -EAGAIN)) {
					log_msg(LOG_ERR, "%s", err);
					return e;
				}
				if (!said_waiting)
					log_msg(LOG_NOTICE, "%s, waiting for it", err);
				said_waiting = true;
			} else {
				if (stat(opt->database, &opened) < 0)
					memset(&opened, 0, sizeof opened);
				after = 0;      /* a new file: all of it is new */
				if (first && (e = store_id_before_last(st, opt->lines, &after)) < 0) {
					log_msg(LOG_ERR, "%s", store_error(st));
					store_close(st);
					return e;
				}
				first = false;
			}
		}
		if (st) {
			/* The walk reads in short transactions of its own;
			 * none stays open between polls. */
			e = store_each_event_after(st, after, print_event, &ctx, &after);
			if ((e == 1 || e == 0) && (e = flush_output(stdout)) < 0)
				break;
			if (e < 0 && (!opt->follow || e != -EBUSY)) {
				log_msg(LOG_ERR, "%s", store_error(st));
				break;
			}
		}
		e = 0;
		if (!opt->follow || poll_wait(stop))
			break;
		if (st && replaced(opt->database, &opened)) {
			log_msg(LOG_NOTICE, "database %s was replaced, following the new file",
			        opt->database);
			store_close(st);
			st = NULL;
		}
	}
	store_close(st);
	return e;
}
