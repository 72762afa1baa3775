/* report_json: `cpumond report --json`, one object per group and line. */
#include "cpumond/report.h"

#include <inttypes.h>

#include "cpumond/json.h"
#include "cpumond/report_internal.h"

#define JSON_PROCS 100           /* processes, hosts and thread names per group */

static void put_json_frame(const struct report *r, const struct stackdump_frame *f, FILE *out)
{
	char name[REPORT_NAME_LEN];

	report_frame_name(f, REPORT_NAME_EXACT, name, sizeof name);
	fputs("{\"name\":", out);
	json_put_string(name, out);
	fputs(",\"symbol\":", out);
	json_put_string_or_null(f->symbol, out);
	fputs(",\"module\":", out);
	json_put_string(f->module, out);
	fputs(",\"build_id\":", out);
	json_put_string(f->build_id, out);
	fprintf(out, ",\"func_offset\":%" PRIu64 ",\"ignored\":%s", f->func_offset,
	        report_frame_ignored(r, f) ? "true" : "false");
	json_put_frame_source(f, out);
	fputc('}', out);
}

void report_print_json(const struct report *r, int top, FILE *out)
{
	struct report_totals t;
	const char *by = report_by_name(report_grouped_by(r));
	size_t n;

	report_totals(r, &t);
	n = report_shown(&t, top < 0 ? 0 : top);
	for (size_t i = 0; i < n; i++) {
		const struct report_group *g = report_group(r, i);

		fprintf(out, "{\"rank\":%zu,\"by\":\"%s\",\"group\":", i + 1, by);
		json_put_string(g->name, out);
		fprintf(out, ",\"events\":%" PRIu64 ",\"key_events\":%" PRIu64 ",\"samples\":%" PRIu64
		        ",\"share\":%.6f,\"first_seen\":\"", g->events, g->key_events, g->samples,
		        report_share(g->samples, t.samples));
		json_put_time(g->first_us, out);
		fputs("\",\"last_seen\":\"", out);
		json_put_time(g->last_us, out);
		fprintf(out, "\",\"stacks\":%zu,\"stack\":\"%016" PRIx64 "\",\"signature\":",
		        g->stacks, g->stack->hash);
		json_put_string(g->signature, out);
		fprintf(out, ",\"process_count\":%zu,\"processes\":[", g->nprocs);
		for (size_t k = 0; k < g->nprocs && k < JSON_PROCS; k++) {
			fputs(k ? ",{\"host\":" : "{\"host\":", out);
			json_put_string(g->procs[k].host, out);
			fprintf(out, ",\"pid\":%d,\"comm\":", (int)g->procs[k].pid);
			json_put_string(g->procs[k].comm, out);
			fputs(",\"unit\":", out);
			json_put_string_or_null(g->procs[k].unit, out);
			fputs(",\"cgroup\":", out);
			json_put_string_or_null(g->procs[k].cgroup, out);
			fprintf(out, ",\"samples\":%" PRIu64 "}", g->procs[k].samples);
		}
		fprintf(out, "],\"host_count\":%zu,\"hosts\":[", g->nhosts);
		for (size_t k = 0; k < g->nhosts && k < JSON_PROCS; k++) {
			fputs(k ? ",{\"host\":" : "{\"host\":", out);
			json_put_string(g->hosts[k].host, out);
			fprintf(out, ",\"events\":%" PRIu64 ",\"samples\":%" PRIu64 "}",
			        g->hosts[k].events, g->hosts[k].samples);
		}
		fprintf(out, "],\"threads\":%zu,\"thread_names\":[", g->threads);
		for (size_t k = 0; k < g->nthread_names && k < JSON_PROCS; k++) {
			if (k)
				fputc(',', out);
			json_put_string(g->thread_names[k], out);
		}
		fprintf(out, "],\"captures\":[%s%s%s]", g->captures & REPORT_CAPTURE_PTRACE ?
		        "\"ptrace\"" : "", g->captures == (REPORT_CAPTURE_PTRACE | REPORT_CAPTURE_PERF) ?
		        "," : "", g->captures & REPORT_CAPTURE_PERF ? "\"perf\"" : "");
		fprintf(out, ",\"entry\":%zu,\"truncated\":%s,\"frames\":[", g->entry,
		        g->stack->truncated ? "true" : "false");
		for (size_t k = 0; k < g->stack->nframes; k++) {
			if (k)
				fputc(',', out);
			put_json_frame(r, &g->stack->frames[k], out);
		}
		fputs("]}\n", out);
	}
}
