/* report_pprof: `cpumond report --pprof FILE`, the window's samples as a
 * gzipped pprof profile (pprof.h encodes it).
 *
 * One pprof sample per stack of each event (report_each_sample), with the
 * event's count: samples/count, and cpu/nanoseconds the count times the
 * sample interval.  Its labels say whose samples they are: thread, tid,
 * pid, process, watch, host and kind.
 *
 * Frames are functions, as everywhere in a report (report.h): a stored
 * stack keeps each frame's function start only (store_get_stack), so a
 * location's address is that start as an offset in its module
 * (func_offset), never the absolute ip: that one differs with the load
 * address of every process, so one function of one build would be as many
 * locations as processes and hosts.  Each mapping is therefore a module in
 * its own address space: memory_start and file_offset 0, memory_limit one
 * past its highest function start; cpumond keeps no load address of the
 * modules.  Frames no ELF file describes (Python, JIT) have address 0 and
 * no build-id.
 *
 * Every location has a line and a function, named as --folded names it
 * (REPORT_NAME_EXACT, the names found at read time, symbolize.h), its
 * system_name the linkage name (the same name when there is no symbol:
 * nothing for a reader to demangle), so every mapping says has_functions
 * and a reader does not look the module up again.  Strings are escaped as
 * the other outputs escape them (stackdump_put_escaped): protobuf strings
 * must be UTF-8. */
#include "cpumond/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/log.h"
#include "cpumond/pprof.h"
#include "cpumond/report_internal.h"

/* S escaped for the profile (malloc'd), or NULL when out of memory. */
static char *escaped(const char *s)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	stackdump_put_escaped(s ? s : "", f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* escaped(S) in *OWNED, for the caller to free, and in *KEPT. */
static int escape_into(const char *s, const char **kept, char **owned)
{
	*owned = escaped(s);
	*kept = *owned;
	return *owned ? 0 : -ENOMEM;
}

/* Whether F was read from an ELF module (its build-id is hex or none). */
static bool elf_frame(const struct stackdump_frame *f)
{
	return !f->build_id ||
	       (strcmp(f->build_id, STACKDUMP_PYTHON) != 0 && strcmp(f->build_id, STACKDUMP_JIT) != 0);
}

/* The location of frame F (NULL: a stack without frames) in P. */
static int frame_location(struct pprof *p, const struct stackdump_frame *f, uint64_t *id)
{
	char name[REPORT_NAME_LEN];
	char *module = NULL, *fname = NULL, *sys = NULL, *file = NULL;
	struct pprof_mapping m = { .has_functions = true };
	struct pprof_function fn = { 0 };
	bool elf = f && elf_frame(f);
	int64_t line = 0;
	uint64_t mid = 0, fid;
	int e;

	if (!f) {
		fn.name = "[no frames]";   /* as --folded spells it */
		e = pprof_function(p, &fn, &fid);
		return e ? e : pprof_location(p, 0, 0, fid, 0, id);
	}
	report_frame_name(f, REPORT_NAME_EXACT, name, sizeof name);
	if (elf) {
		line = f->line;
		fn.start_line = f->line;   /* the line of the function's start */
	} else if (strcmp(f->build_id, STACKDUMP_PYTHON) == 0) {
		line = fn.start_line = (int64_t)f->func_offset;   /* its first line */
	}
	if ((e = escape_into(f->module && f->module[0] ? f->module : "?", &m.filename,
	                    &module)) < 0 ||
	    (e = escape_into(name, &fn.name, &fname)) < 0 ||
	    (e = escape_into(f->symbol && f->symbol[0] ? f->symbol : name, &fn.system_name,
	                     &sys)) < 0 ||
	    (e = escape_into(f->file ? f->file : elf ? NULL : f->module, &fn.filename,
	                    &file)) < 0)
		goto out;
	m.build_id = elf ? f->build_id : NULL;
	m.has_filenames = fn.filename[0] != '\0';
	m.has_line_numbers = line != 0;
	if ((e = pprof_mapping(p, &m, &mid)) < 0 || (e = pprof_function(p, &fn, &fid)) < 0)
		goto out;
	e = pprof_location(p, mid, elf ? f->func_offset : 0, fid, line, id);
out:
	free(module);
	free(fname);
	free(sys);
	free(file);
	return e;
}

/* The locations of one stack, innermost first. */
struct stack_locs {
	const struct stackdump_stack *st;
	uint64_t *locs;
	size_t n;
};

struct writer {
	struct pprof *p;
	struct stack_locs *stacks;   /* sorted by st */
	size_t nstacks;
	int64_t interval_ns;
};

static int cmp_stack_locs(const void *a, const void *b)
{
	const struct stackdump_stack *x = ((const struct stack_locs *)a)->st;
	const struct stackdump_stack *y = ((const struct stack_locs *)b)->st;

	return x < y ? -1 : x > y;
}

/* The locations of every stack of R, each frame looked up once per stack
 * rather than once per event. */
static int stack_locations(struct writer *w, const struct report *r)
{
	struct report_totals t;
	const struct stackdump_stack *st;
	uint64_t samples;

	report_totals(r, &t);
	w->stacks = calloc(t.stacks ? t.stacks : 1, sizeof *w->stacks);
	if (!w->stacks)
		return -ENOMEM;
	for (size_t i = 0; (st = report_stack(r, i, &samples)) != NULL; i++) {
		struct stack_locs *s = &w->stacks[w->nstacks++];
		size_t n = st->nframes ? st->nframes : 1;

		s->st = st;
		s->locs = calloc(n, sizeof *s->locs);
		if (!s->locs)
			return -ENOMEM;
		for (size_t k = 0; k < n; k++) {
			int e = frame_location(w->p, st->nframes ? &st->frames[k] : NULL, &s->locs[k]);

			if (e < 0)
				return e;
		}
		s->n = n;
	}
	qsort(w->stacks, w->nstacks, sizeof *w->stacks, cmp_stack_locs);
	return 0;
}

static int add_sample(const struct report_sample *s, void *ctx)
{
	struct writer *w = ctx;
	struct stack_locs key = { .st = s->stack };
	const struct stack_locs *locs = bsearch(&key, w->stacks, w->nstacks, sizeof *w->stacks,
	                                        cmp_stack_locs);
	const int64_t values[2] = { (int64_t)s->count, (int64_t)s->count * w->interval_ns };
	char *text[5] = { NULL };
	struct pprof_label labels[7] = {
		{ .key = "thread" }, { .key = "tid", .num = s->tid }, { .key = "pid", .num = s->pid },
		{ .key = "process" }, { .key = "watch" }, { .key = "host" }, { .key = "kind" },
	};
	const char *values_of[5] = { s->thread, s->comm, s->watch, s->host, s->kind };
	struct pprof_label *string_labels[5] = {
		&labels[0], &labels[3], &labels[4], &labels[5], &labels[6],
	};
	int e = 0;

	if (!locs)
		return -ENOENT;   /* every stack with a sample has its locations */
	for (size_t i = 0; i < 5 && e == 0; i++)
		e = escape_into(values_of[i], &string_labels[i]->str, &text[i]);
	if (e == 0)
		e = pprof_sample(w->p, locs->locs, locs->n, values, labels, 7);
	for (size_t i = 0; i < 5; i++)
		free(text[i]);
	return e;
}

/* R as a profile, encoded and gzipped into *GZ. */
static int build(const struct report_options *opt, const struct report *r,
                 struct pprof_buf *gz)
{
	struct writer w = {
		.interval_ns = (int64_t)(opt->sample_interval_ms ? opt->sample_interval_ms
		                                                 : REPORT_SAMPLE_INTERVAL_DEFAULT_MS) *
		               1000000,
	};
	struct pprof_buf raw = { 0 };
	struct report_totals t;
	int e;

	report_totals(r, &t);
	if ((e = pprof_new(&w.p)) < 0 ||
	    (e = pprof_sample_type(w.p, "samples", "count")) < 0 ||
	    (e = pprof_sample_type(w.p, "cpu", "nanoseconds")) < 0 ||
	    (e = pprof_set_period(w.p, "cpu", "nanoseconds", w.interval_ns)) < 0)
		goto out;
	if (t.events)
		pprof_set_time(w.p, t.first_us * 1000, (t.last_us - t.first_us) * 1000);
	if ((e = stack_locations(&w, r)) < 0 || (e = report_each_sample(r, add_sample, &w)) < 0 ||
	    (e = pprof_encode(w.p, &raw)) < 0)
		goto out;
	e = pprof_gzip(raw.data, raw.len, gz);
out:
	for (size_t i = 0; i < w.nstacks; i++)
		free(w.stacks[i].locs);
	free(w.stacks);
	pprof_buf_free(&raw);
	pprof_free(w.p);
	return e;
}

int report_write_pprof(const struct report_options *opt, const struct report *r, FILE *out)
{
	struct pprof_buf gz = { 0 };
	FILE *file;
	int e = build(opt, r, &gz);

	if (e < 0) {
		log_errno(LOG_ERR, -e, "cannot make the profile");
		return e;
	}
	if ((e = report_open_output(opt->pprof_path, out, &file)) < 0) {
		pprof_buf_free(&gz);
		return e;
	}
	errno = 0;
	if (fwrite(gz.data, 1, gz.len, file) != gz.len || fflush(file) == EOF)
		e = errno ? -errno : -EIO;
	e = report_close_output(file, out, opt->pprof_path, e);
	pprof_buf_free(&gz);
	return e;
}
