/* report_table: the ranked table, `cpumond report`'s default output. */
#include "cpumond/report.h"

#include <inttypes.h>

#include "cpumond/log.h"
#include "cpumond/report_internal.h"

#define TABLE_PROCS 3            /* processes, hosts and thread names per group */
#define TABLE_FRAMES 4           /* innermost frames shown before the entry */

/* One frame of the table, a function: "symbol (module)" or "module@0xSTART",
 * or "symbol (file.c:LINE)" where its start's source line is known. */
static void put_table_frame(const struct report *r, const struct stackdump_frame *f,
                            size_t i, bool entry, FILE *out)
{
	char name[REPORT_NAME_LEN];

	fprintf(out, "      #%-3zu ", i);
	report_frame_name(f, REPORT_NAME_EXACT, name, sizeof name);
	stackdump_put_escaped(name, out);
	if (f->file && f->file[0] && f->line > 0) {
		fputs(" (", out);
		stackdump_put_escaped(stackdump_module_file(f->file), out);
		fprintf(out, ":%u)", f->line);
	} else if (f->symbol && f->symbol[0]) {
		fputs(" (", out);
		stackdump_put_escaped(stackdump_module_file(f->module), out);
		fputc(')', out);
	}
	if (entry)
		fputs("  <- entry", out);
	else if (report_frame_ignored(r, f))
		fputs("  (ignored)", out);
	fputc('\n', out);
}

/* The innermost frames, then the entry point. */
static void put_table_frames(const struct report *r, const struct report_group *g, FILE *out)
{
	const struct stackdump_stack *st = g->stack;
	size_t last = g->entry;

	if (st->nframes == 0) {
		fputs("      (no frames)\n", out);
		return;
	}
	/* "... 1 more" would take the line the frame takes. */
	for (size_t i = 0; i <= last && (i < TABLE_FRAMES || last <= TABLE_FRAMES + 1); i++)
		put_table_frame(r, &st->frames[i], i, i == last, out);
	if (last > TABLE_FRAMES + 1) {
		fprintf(out, "      ...  %zu more\n", last - TABLE_FRAMES);
		put_table_frame(r, &st->frames[last], last, true, out);
	}
	/* The frames outside the entry are ignored ones, by its definition. */
	if (st->nframes > last + 1)
		fprintf(out, "      ...  %zu ignored %s\n", st->nframes - last - 1,
		        log_plural(st->nframes - last - 1, "frame", "frames"));
	else if (st->truncated)
		fputs("      ...  (truncated)\n", out);
}

/* "hosts: web-1 (240 samples), web-2 (120)" */
static void put_table_hosts(const struct report_group *g, FILE *out)
{
	fputs("      hosts: ", out);
	for (size_t i = 0; i < g->nhosts && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		stackdump_put_escaped(g->hosts[i].host, out);
		fprintf(out, " (%" PRIu64 "%s)", g->hosts[i].samples,
		        i == 0 ? log_plural(g->hosts[i].samples, " sample", " samples") : "");
	}
	if (g->nhosts > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nhosts - TABLE_PROCS);
	fputc('\n', out);
}

/* Processes as comm[pid], or comm[pid]@host when there are several hosts. */
static void put_table_procs(const struct report_group *g, bool hosts, FILE *out)
{
	fputs("      processes: ", out);
	for (size_t i = 0; i < g->nprocs && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		stackdump_put_escaped(g->procs[i].comm, out);
		fprintf(out, "[%d]", (int)g->procs[i].pid);
		if (hosts) {
			fputc('@', out);
			stackdump_put_escaped(g->procs[i].host, out);
		}
	}
	if (g->nprocs > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nprocs - TABLE_PROCS);
	fputs("; threads: ", out);
	for (size_t i = 0; i < g->nthread_names && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		fputc('"', out);
		stackdump_put_escaped(g->thread_names[i], out);
		fputc('"', out);
	}
	if (g->nthread_names > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nthread_names - TABLE_PROCS);
	fputc('\n', out);
}

void report_print_table(const struct report *r, int top, FILE *out)
{
	struct report_totals t;
	enum report_by by = report_grouped_by(r);
	size_t n;
	bool hosts;

	report_totals(r, &t);
	n = report_shown(&t, top);
	hosts = t.hosts > 1;

	if (t.events == 0) {
		fputs("no events in the window\n", out);
		return;
	}
	fprintf(out, "%" PRIu64 " %s", t.events, log_plural(t.events, "event", "events"));
	if (hosts)
		fprintf(out, " on %zu hosts", t.hosts);
	fputs(" from ", out);
	report_put_local(t.first_us, false, out);
	fputs(" to ", out);
	report_put_local(t.last_us, true, out);
	fprintf(out, ": %" PRIu64 " stack %s, %zu distinct %s, %zu %s by %s\n", t.samples,
	        log_plural(t.samples, "sample", "samples"), t.stacks,
	        log_plural(t.stacks, "stack", "stacks"), t.groups,
	        log_plural(t.groups, "group", "groups"), report_by_name(by));
	if (t.events_no_stack)
		fprintf(out, "%" PRIu64 " %s no stack (see cpumond tail)\n", t.events_no_stack,
		        log_plural(t.events_no_stack, "event has", "events have"));
	if (n == 0)
		return;
	fprintf(out, "\nrank  samples   share  events  key ev  threads%s  first seen           "
	        "last seen\n", hosts ? "  hosts" : "");
	for (size_t i = 0; i < n; i++) {
		const struct report_group *g = report_group(r, i);

		fprintf(out, "%4zu %8" PRIu64 " %6.1f%% %7" PRIu64 " %7" PRIu64 " %8zu  ", i + 1,
		        g->samples, 100.0 * report_share(g->samples, t.samples), g->events, g->key_events,
		        g->threads);
		if (hosts)
			fprintf(out, "%5zu  ", g->nhosts);
		report_put_local(g->first_us, false, out);
		fputs("  ", out);
		report_put_local(g->last_us, false, out);
		fputc('\n', out);
		if (by != REPORT_BY_EXACT || g->stacks > 1) {
			fprintf(out, "      %s ", by == REPORT_BY_EXACT ? "stack" : report_by_name(by));
			stackdump_put_escaped(g->name, out);
			fprintf(out, ", %zu distinct %s; the most frequent:\n", g->stacks,
			        log_plural(g->stacks, "stack", "stacks"));
		} else {
			fprintf(out, "      stack %s\n", g->name);
		}
		if (hosts)
			put_table_hosts(g, out);
		put_table_procs(g, hosts, out);
		put_table_frames(r, g, out);
	}
	if (n < t.groups)
		fprintf(out, "\n%zu more %s (--top 0 shows them all)\n", t.groups - n,
		        log_plural(t.groups - n, "group", "groups"));
}
