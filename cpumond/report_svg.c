/* report_svg: `cpumond report --svg FILE`, the window's stacks drawn by
 * flamegraph.c with a subtitle that says which events they are. */
#include "cpumond/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/flamegraph.h"
#include "cpumond/log.h"
#include "cpumond/report_internal.h"

void report_put_filter(const struct report_options *opt, FILE *out)
{
	if (opt->since_us) {
		fputs(", since ", out);
		report_put_local(opt->since_us, true, out);
	}
	if (opt->until_us) {
		fputs(", until ", out);
		report_put_local(opt->until_us, true, out);
	}
	if (opt->watch) {
		fputs(", watch ", out);
		stackdump_put_escaped(opt->watch, out);
	}
	if (opt->comm) {
		fputs(", process ", out);
		stackdump_put_escaped(opt->comm, out);
	}
	if (opt->host) {
		fputs(", host ", out);
		stackdump_put_escaped(opt->host, out);
	}
	if (opt->pid)
		fprintf(out, ", pid %d", (int)opt->pid);
	if (opt->thread) {
		fputs(", thread ", out);
		stackdump_put_escaped(opt->thread, out);
	}
	if (opt->unit) {
		fputs(", unit ", out);
		stackdump_put_escaped(opt->unit, out);
	}
	if (opt->cgroup) {
		fputs(", cgroup ~ ", out);
		stackdump_put_escaped(opt->cgroup, out);
	}
}

int report_write_svg(const struct report_options *opt, const struct report *r, FILE *out)
{
	struct report_totals t;
	struct flamegraph *fg = flamegraph_new();
	struct flamegraph_frame *frames = NULL;
	char (*names)[REPORT_NAME_LEN] = NULL;
	size_t cap = 0;
	char *subtitle = NULL;
	size_t len = 0;
	const struct stackdump_stack *st;
	uint64_t samples;
	FILE *f, *file = out;
	int e = 0;

	report_totals(r, &t);
	if (!fg)
		goto nomem;
	for (size_t i = 0; (st = report_stack(r, i, &samples)) != NULL; i++) {
		if (st->nframes > cap) {
			free(frames);
			free(names);
			cap = st->nframes;
			frames = calloc(cap, sizeof *frames);
			names = calloc(cap, sizeof *names);
			if (!frames || !names)
				goto nomem;
		}
		for (size_t k = 0; k < st->nframes; k++) {
			const struct stackdump_frame *fr = &st->frames[st->nframes - 1 - k];

			report_frame_name(fr, REPORT_NAME_EXACT, names[k], sizeof names[k]);
			frames[k] = (struct flamegraph_frame){ names[k], fr->module };
		}
		if (flamegraph_add(fg, frames, st->nframes, samples) < 0)
			goto nomem;
	}
	f = open_memstream(&subtitle, &len);
	if (!f)
		goto nomem;
	fprintf(f, "%" PRIu64 " %s of %" PRIu64 " %s", t.samples,
	        log_plural(t.samples, "sample", "samples"), t.events,
	        log_plural(t.events, "event", "events"));
	if (t.events) {
		fputs(" from ", f);
		report_put_local(t.first_us, false, f);
		fputs(" to ", f);
		report_put_local(t.last_us, true, f);
	}
	report_put_filter(opt, f);
	if (fclose(f) != 0)
		goto nomem;
	if ((e = report_open_output(opt->svg_path, out, &file)) < 0)
		goto out;
	e = flamegraph_write(fg, "cpumond: CPU flame graph", subtitle, file);
	e = report_close_output(file, out, opt->svg_path, e);
	goto out;
nomem:
	e = -ENOMEM;
	log_msg(LOG_ERR, "cannot draw the flame graph: out of memory");
out:
	free(subtitle);
	free(frames);
	free(names);
	flamegraph_free(fg);
	return e;
}
