/* The fixture of the report tests (test_report.c, test_report_output.c,
 * test_report_run.c): five stacks of two builds of one program and of
 * another program, seventeen events over them, the fixture aggregated in
 * memory or written to a database, and the checks the outputs share. */
#ifndef CPUMOND_TEST_REPORT_FIXTURE_H
#define CPUMOND_TEST_REPORT_FIXTURE_H

#include <errno.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "tests/unit/tmpdir.h"

#include "cpumond/report.h"
#include "cpumond/store.h"
#include "stackdump/stackdump.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* 2026-11-29 13:04:05 UTC */
#define T0 INT64_C(1795957445000000)
#define SEC INT64_C(1000000)

#define IGNORE_RE "^(start_thread|__clone3?|clone3?|__libc_start_call_main|__libc_start_main.*|_start)$"

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"
#define LIBC_ID "5e7b3d2a9b1f4c6d8e0a1b2c3d4e5f6071829304"
#define APP "/usr/bin/app"
#define APP1 "1111111111111111111111111111111111111111"
#define APP2 "2222222222222222222222222222222222222222"

/* One frame of a fixture stack. */
struct fx {
	const char *symbol;
	const char *module;
	const char *build_id;
	uint64_t func_offset;
};

/* The fixture's stacks, innermost first.  A and B are the two chains of
 * build 1 of app; A2 and B2 the same chains in build 2, at other offsets
 * and with other compiler suffixes; D is another program. */
static const struct fx chain_a1[] = {
	{ "hot_a.constprop.0", APP, APP1, 0x1100 }, { "chain_a2", APP, APP1, 0x1200 },
	{ "chain_a1", APP, APP1, 0x1300 }, { "worker_main", APP, APP1, 0x1400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_b1[] = {
	{ "hot_b", APP, APP1, 0x1500 }, { "chain_b1.part.0", APP, APP1, 0x1600 },
	{ "worker_main", APP, APP1, 0x1400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_a2[] = {
	{ "hot_a", APP, APP2, 0x2100 }, { "chain_a2.isra.0", APP, APP2, 0x2200 },
	{ "chain_a1", APP, APP2, 0x2300 }, { "worker_main", APP, APP2, 0x2400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_b2[] = {
	{ "hot_b", APP, APP2, 0x2500 }, { "chain_b1", APP, APP2, 0x2600 },
	{ "worker_main", APP, APP2, 0x2400 },
	{ "start_thread", LIBC, LIBC_ID, 0x8a000 }, { "__clone3", LIBC, LIBC_ID, 0x10b000 },
};
static const struct fx chain_d[] = {
	{ NULL, "/opt/spin/bin/spin", "", 0x7a0 }, { "main", "/opt/spin/bin/spin", "", 0x640 },
	{ "__libc_start_call_main", LIBC, LIBC_ID, 0x271c0 },
	{ "__libc_start_main_impl", LIBC, LIBC_ID, 0x27280 }, { "_start", "/opt/spin/bin/spin", "", 0x500 },
};

/* A stack made of FX (N frames), with its hash. */
static inline struct stackdump_stack make_stack(const struct fx *fx, size_t n)
{
	struct stackdump_stack st = { 0 };

	st.frames = calloc(n, sizeof *st.frames);
	assert_non_null(st.frames);
	for (size_t i = 0; i < n; i++) {
		struct stackdump_frame *f = &st.frames[i];

		f->module = strdup(fx[i].module);
		f->build_id = strdup(fx[i].build_id);
		f->symbol = fx[i].symbol ? strdup(fx[i].symbol) : NULL;
		f->func_offset = fx[i].func_offset;
		f->offset = fx[i].func_offset + 0x10 + i;
		f->ip = 0x555500000000 + f->offset;
		f->symbol_offset = 0x10 + i;
	}
	st.nframes = n;
	st.hash = stackdump_hash(st.frames, n);
	return st;
}

#define MAKE(chain) make_stack(chain, ARRAY_SIZE(chain))

struct fixture {
	struct stackdump_stack a1, b1, a2, b2, d;
	regex_t ignore;
	char dir[64];
	char path[128];
};

static inline int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	if (!f)
		return -1;
	setenv("TZ", "UTC", 1);
	tzset();
	f->a1 = MAKE(chain_a1);
	f->b1 = MAKE(chain_b1);
	f->a2 = MAKE(chain_a2);
	f->b2 = MAKE(chain_b2);
	f->d = MAKE(chain_d);
	if (regcomp(&f->ignore, IGNORE_RE, REG_EXTENDED | REG_NOSUB) != 0)
		return -1;
	if (tmpdir_make(f->dir, sizeof f->dir, "test_report") < 0)
		return -1;
	snprintf(f->path, sizeof f->path, "%s/log.db", f->dir);
	*state = f;
	return 0;
}

static inline int teardown(void **state)
{
	struct fixture *f = *state;

	stackdump_stack_free(&f->a1);
	stackdump_stack_free(&f->b1);
	stackdump_stack_free(&f->a2);
	stackdump_stack_free(&f->b2);
	stackdump_stack_free(&f->d);
	regfree(&f->ignore);
	tmpdir_remove(f->dir);
	free(f);
	return 0;
}

/* The fixture's events, in time order:
 *   i = 0..9:   app[100] (build 1) in unit app.service, threads 101 and 102
 *               in turn: A 24, B 6
 *   i = 10..14: app[200] (build 2) in unit app@2.service, thread 201: A2 24,
 *               B2 6
 *   i = 15:     spin[300] in watch "other", in no unit or cgroup known (an
 *               older cpumond's event): D 30
 *   i = 16:     app[100] without a stack (the thread exited)
 * So A+A2 (the 80 % chain) has 360 of 480 samples, B+B2 90, D 30. */
#define NEVENTS 17

struct fixture_event {
	struct store_event ev;
	struct store_stack_count counts[2];
};

static inline void fixture_event(const struct fixture *f, int i, struct fixture_event *out)
{
	struct store_event *ev = &out->ev;

	memset(out, 0, sizeof *out);
	ev->time_us = T0 + i * SEC;
	ev->host = "h";
	ev->watch = "app";
	ev->comm = "app";
	ev->exe = APP;
	ev->usage = 990;
	ev->threshold = 800;
	ev->consecutive = 1;
	ev->samples = 30;
	if (i < 10 || i == 16) {
		ev->unit = "app.service";
		ev->cgroup = "/system.slice/app.service";
	} else if (i < 15) {
		ev->unit = "app@2.service";
		ev->cgroup = "/system.slice/system-app.slice/app@2.service";
	}
	/* app[100]'s samples by ptrace, app[200]'s by perf: chain A has both. */
	if (i < 15)
		ev->capture = i < 10 ? "ptrace" : "perf";
	if (i < 10) {
		ev->pid = 100;
		ev->tid = 101 + i % 2;
		ev->thread = i % 2 ? "worker-2" : "worker-1";
		out->counts[0] = (struct store_stack_count){ f->a1.hash, 24, &f->a1 };
		out->counts[1] = (struct store_stack_count){ f->b1.hash, 6, &f->b1 };
		ev->stack = f->a1;
	} else if (i < 15) {
		ev->pid = 200;
		ev->tid = 201;
		ev->thread = "worker-1";
		out->counts[0] = (struct store_stack_count){ f->a2.hash, 24, &f->a2 };
		out->counts[1] = (struct store_stack_count){ f->b2.hash, 6, &f->b2 };
		ev->stack = f->a2;
	} else if (i == 15) {
		ev->watch = "other";
		ev->comm = "spin";
		ev->exe = "/opt/spin/bin/spin";
		ev->pid = 300;
		ev->tid = 300;
		ev->thread = "spin";
		out->counts[0] = (struct store_stack_count){ f->d.hash, 30, &f->d };
		ev->stack = f->d;
		ev->stacks = out->counts;
		ev->nstacks = 1;
		return;
	} else {
		ev->pid = 100;
		ev->tid = 103;
		ev->thread = "worker-3";
		ev->samples = 0;
		ev->error = "tid 103 exited";
		return;
	}
	ev->stacks = out->counts;
	ev->nstacks = 2;
}

/* The fixture aggregated in memory, without SQLite. */
static inline struct report *aggregate(const struct fixture *f, enum report_by by, bool ignore)
{
	struct report *r;

	assert_int_equal(report_new(by, ignore ? &f->ignore : NULL, &r), 0);
	for (int i = 0; i < NEVENTS; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);
		for (size_t k = 0; k < fe.ev.nstacks; k++)
			if (!report_has_stack(r, fe.ev.stacks[k].hash))
				assert_int_equal(report_add_stack(r, fe.ev.stacks[k].stack), 0);
		assert_int_equal(report_add_event(r, &fe.ev), 0);
	}
	assert_int_equal(report_add_stack(r, &f->a1), -EEXIST);
	assert_int_equal(report_finish(r), 0);
	return r;
}

/* An output form: report_print_table, report_print_json, print_folded. */
typedef void (*printer_fn)(const struct report *r, int top, FILE *out);

/* What FN writes, as a string to free.  Not inline (test_report_run.c does
 * not use it, hence unused): GCC 12, once it inlines it, takes the text
 * open_memstream gives back for a pointer to the local BUF
 * (-Wdangling-pointer). */
__attribute__((unused, noinline)) static char *capture(printer_fn fn, const struct report *r,
                                                       int top)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	assert_non_null(out);
	fn(r, top, out);
	assert_int_equal(fclose(out), 0);
	return buf;
}

/* report_print_folded in capture's shape. */
static inline void print_folded(const struct report *r, int top, FILE *out)
{
	(void)top;
	assert_int_equal(report_print_folded(r, out), 0);
}

/* Writes the fixture's events to a new database at PATH. */
static inline void write_fixture(const struct fixture *f, const char *path)
{
	struct store *st;
	char err[512];

	assert_int_equal(store_open(path, true, &st, err, sizeof err), 0);
	assert_int_equal(store_begin(st), 0);
	for (int i = 0; i < NEVENTS; i++) {
		struct fixture_event fe;

		fixture_event(f, i, &fe);
		assert_int_equal(store_add_event(st, &fe.ev), 0);
	}
	assert_int_equal(store_commit(st), 0);
	store_close(st);
}

/* Checks the nesting of the boxes of SVG: every <g class="f"> has
 * data-n = data-s + the data-n of its children, and its rect's width is
 * data-n times the root's pixels per sample.  Returns how many boxes. */
static inline size_t check_boxes(const char *svg)
{
	struct box {
		uint64_t n, self, kids;
	} stack[64];
	size_t depth = 0, boxes = 0;
	double scale = 0;
	const char *p = strstr(svg, "<g id=\"frames\">");

	assert_non_null(p);
	p += strlen("<g id=\"frames\">");
	for (;;) {
		const char *open = strstr(p, "<g class=\"f\""), *close = strstr(p, "</g>");

		assert_non_null(close);
		if (open && open < close) {
			unsigned long long x, n, s;
			double w;
			const char *rect;

			assert_int_equal(sscanf(open, "<g class=\"f\" data-x=\"%llu\" data-n=\"%llu\" "
			                        "data-s=\"%llu\">", &x, &n, &s), 3);
			rect = strstr(open, "<rect ");
			assert_non_null(rect);
			rect = strstr(rect, "width=\"");
			assert_non_null(rect);
			assert_int_equal(sscanf(rect, "width=\"%lf\"", &w), 1);
			if (depth == 0)
				scale = n ? w / (double)n : 0;
			else
				stack[depth - 1].kids += n;
			assert_true(w >= (double)n * scale - 0.002 && w <= (double)n * scale + 0.002);
			assert_true(depth < ARRAY_SIZE(stack));
			stack[depth++] = (struct box){ n, s, 0 };
			boxes++;
			p = open + 1;
		} else {
			if (depth == 0)
				break;  /* the </g> of "frames" */
			depth--;
			assert_int_equal(stack[depth].n, stack[depth].self + stack[depth].kids);
			p = close + 1;
		}
	}
	return boxes;
}

#endif
