/* top's view: the rows of a cycle, sorted, filtered and drawn as text.
 * Pure: it formats what it is given (top.h). */
#include "cpumond/top.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stackdump/stackdump.h"

/* Column widths, in columns (a code point each: names are escaped to valid
 * UTF-8, and the bar's blocks are one column wide). */
/* "USAGE‰▼", "DELAY‰▼" */
#define W_USAGE   7
#define W_DELAY   7
#define W_LIMIT   5
#define W_PROCESS 20
#define W_THREAD  19
#define W_WATCH   10
/* A header or row line before it is cut to the screen's width: the frame
 * column is the only one without a width, and a name longer than this is
 * of no use on a screen. */
#define LINE_MAX_BYTES 2048

void top_cycle_free(struct top_cycle *c)
{
	for (size_t i = 0; i < c->nthreads; i++) {
		free(c->threads[i].watch);
		free(c->threads[i].comm);
		free(c->threads[i].thread);
		free(c->threads[i].frame);
	}
	free(c->threads);
	c->threads = NULL;
	c->nthreads = 0;
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

static int by_usage(const void *a, const void *b)
{
	const struct top_thread *x = *(const struct top_thread *const *)a;
	const struct top_thread *y = *(const struct top_thread *const *)b;

	if (x->usage != y->usage)
		return x->usage > y->usage ? -1 : 1;
	if (x->run_delay != y->run_delay)
		return x->run_delay > y->run_delay ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

static int by_run_delay(const void *a, const void *b)
{
	const struct top_thread *x = *(const struct top_thread *const *)a;
	const struct top_thread *y = *(const struct top_thread *const *)b;

	if (x->run_delay != y->run_delay)
		return x->run_delay > y->run_delay ? -1 : 1;
	return by_usage(a, b);
}

size_t top_select(const struct top_thread *t, size_t n, const char *watch, enum top_order by,
                  const struct top_thread **out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!watch || strcmp(or_empty(t[i].watch), watch) == 0)
			out[k++] = &t[i];
	qsort(out, k, sizeof *out, by == TOP_BY_RUN_DELAY ? by_run_delay : by_usage);
	return k;
}

const char *top_next_watch(const struct top_thread *t, size_t n, const char *current)
{
	const char *next = NULL;

	/* The least name greater than CURRENT ("" counts as a name: an
	 * event of an older cpumond without one). */
	for (size_t i = 0; i < n; i++) {
		const char *w = or_empty(t[i].watch);

		if (current && strcmp(w, current) <= 0)
			continue;
		if (!next || strcmp(w, next) < 0)
			next = w;
	}
	return next;
}

void top_bar(int permille, char *buf, size_t len)
{
	/* U+258F (one eighth) .. U+2589 (seven eighths); U+2588 is full. */
	static const char *const eighths[8] = {
		" ", "\u258f", "\u258e", "\u258d", "\u258c", "\u258b", "\u258a", "\u2589",
	};
	int e = permille < 0 ? 0 : permille > 1000 ? 1000 : permille;
	size_t at = 0;

	/* Rounded to the nearest eighth of a cell: 12.5‰ each. */
	e = (e * TOP_BAR_CELLS * 8 + 500) / 1000;
	if (len > 0)
		buf[0] = '\0';
	for (int cell = 0; cell < TOP_BAR_CELLS; cell++, e = e > 8 ? e - 8 : 0) {
		const char *c = e >= 8 ? "\u2588" : eighths[e];
		size_t l = strlen(c);

		if (at + l >= len)
			return;         /* whole characters only */
		memcpy(buf + at, c, l + 1);
		at += l;
	}
}

/* S escaped (stackdump_put_escaped) into BUF of LEN bytes; a name too long
 * for BUF is cut at a code point, never inside one. */
static void escape_into(const char *s, char *buf, size_t len)
{
	FILE *out = fmemopen(buf, len, "w");
	size_t at = 0;

	buf[0] = '\0';
	if (!out)
		return;
	stackdump_put_escaped(s, out);
	fputc('\0', out);
	fclose(out);
	buf[len - 1] = '\0';
	while (buf[at]) {
		int l = stackdump_utf8_len(buf + at);

		if (l == 0) {           /* a code point cut by the buffer's end */
			buf[at] = '\0';
			break;
		}
		at += (size_t)l;
	}
}

/* Columns of valid UTF-8 text S (one a code point). */
static size_t columns(const char *s)
{
	size_t n = 0;

	for (int l; *s && (l = stackdump_utf8_len(s)) > 0; s += l)
		n++;
	return n;
}

/* How many bytes the first COLS columns of valid UTF-8 text S take (all of
 * S when it is shorter). */
static size_t prefix_bytes(const char *s, size_t cols)
{
	size_t at = 0;

	for (int l; cols > 0 && s[at] && (l = stackdump_utf8_len(s + at)) > 0; cols--)
		at += (size_t)l;
	return at;
}

/* A cell of WIDTH columns: NAME escaped, then SUFFIX (a "[pid]" or "/tid",
 * kept whole), NAME cut with "…" when both do not fit, padded with spaces
 * when PAD (the last column is not). */
static void put_cell(FILE *out, const char *name, const char *suffix, size_t width, bool pad)
{
	char esc[LINE_MAX_BYTES / 2];
	size_t name_cols, suffix_cols = columns(suffix), room;

	escape_into(or_empty(name), esc, sizeof esc);
	name_cols = columns(esc);
	room = width > suffix_cols ? width - suffix_cols : 0;
	if (width == 0) {             /* no limit */
		room = name_cols;
		width = name_cols + suffix_cols;
	}
	if (name_cols > room) {
		if (room > 0) {
			fwrite(esc, 1, prefix_bytes(esc, room - 1), out);
			fputs("\u2026", out);
		}
		name_cols = room;
	} else {
		fputs(esc, out);
	}
	fputs(suffix, out);
	for (size_t c = name_cols + suffix_cols; pad && c < width; c++)
		fputc(' ', out);
}

/* "20:11:03" in local time; "?" when the time cannot be shown. */
static void put_clock(int64_t t_us, FILE *out)
{
	time_t t = (time_t)(t_us / 1000000);
	char buf[32];
	struct tm tm;

	if (!localtime_r(&t, &tm) || strftime(buf, sizeof buf, "%H:%M:%S", &tm) == 0)
		snprintf(buf, sizeof buf, "?");
	fputs(buf, out);
}

static void put_header(const struct top_screen *s, size_t shown, size_t of, FILE *out)
{
	const struct top_cycle *c = s->cycle;

	fputs("cpumond top  ", out);
	if (!c || c->id == 0) {
		if (s->note)
			put_cell(out, s->note, "", 0, false);
		else
			fputs("no cycle recorded yet: is the daemon running and keeping the usage "
			      "history?", out);
		return;
	}
	put_clock(c->time_us, out);
	/* Its age says when the daemon stopped writing. */
	fprintf(out, " (%" PRId64 " s ago", s->now_us > c->time_us ?
	        (s->now_us - c->time_us + 500000) / 1000000 : 0);
	if (c->interval_ms > 0 && c->interval_ms % 1000 == 0)
		fprintf(out, ", every %d s", c->interval_ms / 1000);
	else if (c->interval_ms > 0)
		fprintf(out, ", every %d ms", c->interval_ms);
	fputc(')', out);
	fprintf(out, "  %zu of %zu threads  by %s  watch ", shown, of,
	        s->by == TOP_BY_RUN_DELAY ? "run delay" : "usage");
	if (s->watch)
		put_cell(out, s->watch, "", W_WATCH * 2, false);
	else
		fputs("all", out);
	if (s->keys)
		fputs("  [u]sage [d]elay [w]atch [q]uit", out);
}

static void put_heads(enum top_order by, FILE *out)
{
	const char *u = by == TOP_BY_USAGE ? "USAGE‰▼" : "USAGE‰";
	const char *d = by == TOP_BY_RUN_DELAY ? "DELAY‰▼" : "DELAY‰";

	/* Right-aligned over numbers; ‰ and ▼ are one column each. */
	fprintf(out, "!* %*s%s %-*s %*s%s S %*s ", W_USAGE - (int)columns(u), "", u,
	        TOP_BAR_CELLS, "BAR", W_DELAY - (int)columns(d), "", d, W_LIMIT, "LIMIT");
	put_cell(out, "PROCESS[PID]", "", W_PROCESS, true);
	fputc(' ', out);
	put_cell(out, "THREAD/TID", "", W_THREAD, true);
	fputc(' ', out);
	put_cell(out, "WATCH", "", W_WATCH, true);
	fputs(" LAST EVENT", out);
}

static void put_row(const struct top_thread *t, FILE *out)
{
	char bar[TOP_BAR_CELLS * 3 + 1], id[32];
	/* Linux's letters: R S D T t X Z P I. */
	char state = (t->state >= 'A' && t->state <= 'Z') || (t->state >= 'a' && t->state <= 'z') ?
	             t->state : '?';

	top_bar(t->usage, bar, sizeof bar);
	fprintf(out, "%c%c %*d %s ", t->threshold > 0 && t->usage > t->threshold ? '!' : ' ',
	        t->episode ? '*' : ' ', W_USAGE, t->usage, bar);
	if (t->run_delay >= 0)
		fprintf(out, "%*d %c ", W_DELAY, t->run_delay, state);
	else
		fprintf(out, "%*s %c ", W_DELAY, "-", state);
	if (t->threshold > 0)
		fprintf(out, "%*d ", W_LIMIT, t->threshold);
	else
		fprintf(out, "%*s ", W_LIMIT, "-");
	snprintf(id, sizeof id, "[%d]", (int)t->pid);
	put_cell(out, t->comm, id, W_PROCESS, true);
	fputc(' ', out);
	snprintf(id, sizeof id, "/%d", (int)t->tid);
	put_cell(out, t->thread, id, W_THREAD, true);
	fputc(' ', out);
	put_cell(out, t->watch, "", W_WATCH, true);
	fputc(' ', out);
	put_cell(out, t->frame && t->frame[0] ? t->frame : "-", "", 0, false);
}

/* A line is drawn into a buffer first, so that it can be cut to the
 * screen's width as a whole. */
struct line {
	char buf[LINE_MAX_BYTES];
	FILE *f;
};

static FILE *line_open(struct line *l)
{
	l->buf[0] = '\0';
	l->f = fmemopen(l->buf, sizeof l->buf, "w");
	return l->f;
}

/* Writes line L to OUT, cut to the screen's width (and to the buffer's
 * end, at a code point), and the screen's end of line. */
static void line_close(const struct top_screen *s, struct line *l, FILE *out)
{
	size_t len;

	fputc('\0', l->f);
	fclose(l->f);
	l->buf[sizeof l->buf - 1] = '\0';
	len = prefix_bytes(l->buf, s->width > 0 ? (size_t)s->width : sizeof l->buf);
	fwrite(l->buf, 1, len, out);
	fputs(s->eol ? s->eol : "\n", out);
}

void top_format(const struct top_screen *s, FILE *out)
{
	const struct top_cycle *c = s->cycle;
	size_t n = c ? c->nthreads : 0, matched = 0, shown;
	const struct top_thread **sel = n ? calloc(n, sizeof *sel) : NULL;
	struct line l;

	if (sel && c->id != 0)
		matched = top_select(c->threads, n, s->watch, s->by, sel);
	shown = s->rows > 0 && matched > (size_t)s->rows ? (size_t)s->rows : matched;
	if (line_open(&l)) {
		put_header(s, shown, matched, l.f);
		line_close(s, &l, out);
	}
	if (c && c->id != 0 && line_open(&l)) {
		put_heads(s->by, l.f);
		line_close(s, &l, out);
	}
	for (size_t i = 0; i < shown; i++) {
		if (line_open(&l)) {
			put_row(sel[i], l.f);
			line_close(s, &l, out);
		}
	}
	free(sel);
}
