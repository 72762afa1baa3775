#include "cpumond/eventfmt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/json.h"
#include "stackdump/demangle.h"

/* The summary and the journal's MESSAGE name this many of the key stack's
 * innermost functions. */
#define SUMMARY_FRAMES 3

const char *eventfmt_kind(const struct store_event *ev)
{
	return ev->kind && ev->kind[0] ? ev->kind : "hot";
}

void eventfmt_what(const struct store_event *ev, char *buf, size_t len)
{
	const char *kind = eventfmt_kind(ev), *details = ev->details ? ev->details : "";
	long long demand, total, threads, ms;

	if (strcmp(kind, "hot") == 0) {
		snprintf(buf, len, "at %d‰ > %d‰", ev->usage, ev->threshold);
	} else if (strcmp(kind, "starved") == 0) {
		if (json_object_int(details, "demand", &demand) < 0)
			demand = ev->usage + (ev->run_delay > 0 ? ev->run_delay : 0);
		snprintf(buf, len, "starved: wants %lld‰, got %d‰ (threshold %d‰)", demand, ev->usage,
		         ev->threshold);
	} else if (strcmp(kind, "process") == 0 &&
	           json_object_int(details, "process_usage", &total) == 0 &&
	           json_object_int(details, "threads", &threads) == 0) {
		snprintf(buf, len, "process: %lld‰ > %d‰ in %lld %s, this one %d‰", total,
		         ev->threshold, threads, threads == 1 ? "thread" : "threads", ev->usage);
	} else if (strcmp(kind, "stall") == 0 && json_object_int(details, "duration_ms", &ms) == 0) {
		snprintf(buf, len, "stall ended: ran again after %lld ms", ms);
	} else if (strcmp(kind, "stall") == 0 && json_object_int(details, "still_ms", &ms) == 0) {
		snprintf(buf, len, "stall: not run for %lld ms", ms);
	} else {
		snprintf(buf, len, "%s: %d‰, threshold %d‰", kind, ev->usage, ev->threshold);
	}
}

const char *eventfmt_error(const struct store_event *ev)
{
	return ev->error && ev->error[0] ? ev->error : ev->stack.error;
}

static void put_json_frame(const struct stackdump_frame *f, FILE *out)
{
	fprintf(out, "{\"ip\":\"0x%" PRIx64 "\",\"module\":", f->ip);
	json_put_string(f->module, out);
	fputs(",\"build_id\":", out);
	json_put_string(f->build_id, out);
	fprintf(out, ",\"offset\":%" PRIu64 ",\"func_offset\":%" PRIu64 ",\"symbol\":", f->offset,
	        f->func_offset);
	if (f->symbol) {
		/* symbol is the linkage name, name what people read (C++ and
		 * Rust demangled). */
		char *readable = demangle_name(f->symbol);

		json_put_string(f->symbol, out);
		fputs(",\"name\":", out);
		json_put_string(readable ? readable : f->symbol, out);
		free(readable);
		/* An inlined call has no offset of its own. */
		if (f->inlined)
			fputs(",\"symbol_offset\":null", out);
		else
			fprintf(out, ",\"symbol_offset\":%" PRIu64, f->symbol_offset);
	} else {
		fputs("null,\"name\":null,\"symbol_offset\":null", out);
	}
	json_put_frame_source(f, out);
	fputc('}', out);
}

void eventfmt_json(const struct store_event *ev, FILE *out)
{
	const struct stackdump_stack *sk = &ev->stack;

	fprintf(out, "{\"id\":%" PRId64 ",\"time\":\"", ev->id);
	json_put_time(ev->time_us, out);
	fputs("\",\"kind\":", out);
	json_put_string(eventfmt_kind(ev), out);
	fputs(",\"host\":", out);
	json_put_string(ev->host, out);
	fputs(",\"watch\":", out);
	json_put_string(ev->watch, out);
	fprintf(out, ",\"pid\":%d,\"nspid\":", (int)ev->pid);
	if (ev->nspid > 0)
		fprintf(out, "%d", (int)ev->nspid);
	else
		fputs("null", out);
	fputs(",\"comm\":", out);
	json_put_string(ev->comm, out);
	fputs(",\"exe\":", out);
	json_put_string(ev->exe, out);
	fputs(",\"cgroup\":", out);
	json_put_string_or_null(ev->cgroup, out);
	fputs(",\"unit\":", out);
	json_put_string_or_null(ev->unit, out);
	fprintf(out, ",\"tid\":%d,\"thread\":", (int)ev->tid);
	json_put_string(ev->thread, out);
	fprintf(out, ",\"usage\":%d,\"threshold\":%d,\"consecutive\":%d,\"run_delay\":%d"
	        ",\"freeze_us\":%" PRIu64 ",\"stack_hash\":",
	        ev->usage, ev->threshold, ev->consecutive, ev->run_delay,
	        (sk->stop_ns + 500) / 1000);
	if (sk->nframes > 0)
		fprintf(out, "\"%016" PRIx64 "\"", sk->hash);
	else
		fputs("null", out);
	fprintf(out, ",\"truncated\":%s,\"error\":", sk->truncated ? "true" : "false");
	json_put_string_or_null(eventfmt_error(ev), out);
	fprintf(out, ",\"samples\":%u,\"capture\":", ev->samples);
	json_put_string_or_null(ev->capture, out);
	fprintf(out, ",\"freeze_max_us\":%" PRIu64 ",\"episode_end\":",
	        (ev->stop_max_ns + 500) / 1000);
	json_put_string_or_null(ev->episode_end, out);
	/* details is a JSON object the daemon wrote; readers get only valid
	 * JSON from the store (store_event). */
	fprintf(out, ",\"details\":%s", ev->details && ev->details[0] ? ev->details : "null");
	fputs(",\"stacks\":[", out);
	for (size_t i = 0; i < ev->nstacks; i++)
		fprintf(out, "%s{\"stack_hash\":\"%016" PRIx64 "\",\"count\":%u,\"key\":%s}",
		        i > 0 ? "," : "", ev->stacks[i].hash, ev->stacks[i].count,
		        ev->stacks[i].hash == sk->hash ? "true" : "false");
	fputs("],\"stack\":[", out);
	for (size_t i = 0; i < sk->nframes; i++) {
		if (i > 0)
			fputc(',', out);
		put_json_frame(&sk->frames[i], out);
	}
	fputs("]}\n", out);
}

void eventfmt_stack_summary(const struct stackdump_stack *sk, char *buf, size_t len)
{
	/* fmemopen leaves a full buffer without its NUL: the last byte keeps one. */
	FILE *out = len > 1 ? fmemopen(buf, len - 1, "w") : NULL;
	size_t named = 0, shown = sk->nframes < SUMMARY_FRAMES ? sk->nframes : SUMMARY_FRAMES;
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

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* Formats *FIELD; false when out of memory (*FIELD is then NULL). */
__attribute__((format(printf, 2, 3)))
static bool field(char **f, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(f, fmt, ap);
	va_end(ap);
	if (n < 0)
		*f = NULL;
	return n >= 0;
}

int eventfmt_journal(const struct store_event *ev, const char *summary,
                     char *fields[EVENTFMT_JOURNAL_FIELDS])
{
	const struct stackdump_stack *sk = &ev->stack;
	/* Cut as the summary cuts each function, so that MESSAGE's first
	 * function and CPUMOND_TOP_FRAME are the same text. */
	char top[256] = "", hash[20] = "", nspid[16] = "", what[160];
	bool ok;

	if (sk->nframes) {
		stackdump_function_name(&sk->frames[0], top, sizeof top);
		snprintf(hash, sizeof hash, "%016" PRIx64, sk->hash);
	}
	if (ev->nspid > 0)
		snprintf(nspid, sizeof nspid, "%d", (int)ev->nspid);
	eventfmt_what(ev, what, sizeof what);
	ok = field(&fields[0], "MESSAGE=%s[%d] thread %s/%d %s: %s", or_empty(ev->comm),
	           (int)ev->pid, or_empty(ev->thread), (int)ev->tid, what,
	           sk->nframes && summary ? summary : "no stack");
	ok &= field(&fields[1], "PRIORITY=4");
	ok &= field(&fields[2], "CPUMOND_WATCH=%s", or_empty(ev->watch));
	ok &= field(&fields[3], "CPUMOND_PID=%d", (int)ev->pid);
	ok &= field(&fields[4], "CPUMOND_TID=%d", (int)ev->tid);
	ok &= field(&fields[5], "CPUMOND_COMM=%s", or_empty(ev->comm));
	ok &= field(&fields[6], "CPUMOND_THREAD=%s", or_empty(ev->thread));
	ok &= field(&fields[7], "CPUMOND_USAGE=%d", ev->usage);
	ok &= field(&fields[8], "CPUMOND_STACK_HASH=%s", hash);
	ok &= field(&fields[9], "CPUMOND_TOP_FRAME=%s", top);
	ok &= field(&fields[10], "CPUMOND_NSPID=%s", nspid);
	ok &= field(&fields[11], "CPUMOND_CGROUP=%s", or_empty(ev->cgroup));
	ok &= field(&fields[12], "CPUMOND_UNIT=%s", or_empty(ev->unit));
	ok &= field(&fields[13], "CPUMOND_KIND=%s", eventfmt_kind(ev));
	ok &= field(&fields[14], "CPUMOND_CAPTURE=%s", or_empty(ev->capture));
	if (ok)
		return 0;
	eventfmt_journal_free(fields);
	return -ENOMEM;
}

void eventfmt_journal_free(char *fields[EVENTFMT_JOURNAL_FIELDS])
{
	for (size_t i = 0; i < EVENTFMT_JOURNAL_FIELDS; i++) {
		free(fields[i]);
		fields[i] = NULL;
	}
}
