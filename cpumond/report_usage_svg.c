/* report_usage_svg: the chart of `cpumond report --usage --svg FILE`:
 * time across, permille up, a line per thread, the thresholds, the
 * window's events as marks, a legend.  Pure text: report_usage.h. */
#include "cpumond/report_usage.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpumond/flamegraph.h"
#include "cpumond/log.h"
#include "cpumond/report_internal.h"

/* The page, in px: the plot left, the legend right. */
#define PAGE_W 1280
#define PLOT_X 60.0
#define PLOT_Y 70.0
#define PLOT_W 820.0
#define PLOT_H 380.0
#define LEGEND_X 900
#define LEGEND_LINE 18
/* Points of a line: at most one per this many px, the highest usage of
 * its span (peaks stay where they were). */
#define PX_PER_POINT 2
#define MAX_TICKS 8

/* Ten colours apart from one another (Tableau's, as matplotlib's
 * default cycle). */
static const char *const colours[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
};
#define NCOLOURS (sizeof colours / sizeof colours[0])

double report_usage_x(const struct usage_scale *s, int64_t t_us)
{
	double span = (double)(s->t1_us - s->t0_us);

	if (t_us <= s->t0_us || span <= 0)
		return s->x0;
	if (t_us >= s->t1_us)
		return s->x0 + s->w;
	return s->x0 + s->w * ((double)(t_us - s->t0_us) / span);
}

double report_usage_y(const struct usage_scale *s, int permille)
{
	if (permille < 0)
		permille = 0;
	if (permille > 1000)
		permille = 1000;
	return s->y0 + s->h - s->h * permille / 1000.0;
}

int64_t report_usage_tick_us(int64_t span_us, int max_ticks)
{
	static const int64_t steps_s[] = {
		1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
		7 * 86400,
	};
	size_t n = sizeof steps_s / sizeof steps_s[0];

	for (size_t i = 0; i < n; i++)
		if (span_us / (steps_s[i] * 1000000) <= max_ticks)
			return steps_s[i] * 1000000;
	return steps_s[n - 1] * 1000000;
}

/* "20:31", "20:31:05" or "12-01 20:31" in local time. */
static void put_tick_label(int64_t t_us, int64_t step_us, int64_t span_us, FILE *out)
{
	time_t t = (time_t)(t_us / 1000000);
	struct tm tm;

	if (!localtime_r(&t, &tm))
		fprintf(out, "@%" PRId64, t_us);
	else if (span_us > 86400LL * 1000000)
		fprintf(out, "%02d-%02d %02d:%02d", tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min);
	else if (step_us < 60LL * 1000000)
		fprintf(out, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
	else
		fprintf(out, "%02d:%02d", tm.tm_hour, tm.tm_min);
}

static void put_axes(const struct usage_scale *s, FILE *out)
{
	int64_t span = s->t1_us - s->t0_us, step = report_usage_tick_us(span, MAX_TICKS);

	fputs("<g id=\"axes\" stroke=\"#ddd\" font-size=\"11\">\n", out);
	for (int p = 0; p <= 1000; p += 200) {
		double y = report_usage_y(s, p);

		fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
		        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" stroke=\"none\">%d‰</text>\n",
		        s->x0, y, s->x0 + s->w, y, s->x0 - 6, y + 4, p);
	}
	for (int64_t t = (s->t0_us / step + 1) * step; t < s->t1_us; t += step) {
		double x = report_usage_x(s, t);

		fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
		        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" stroke=\"none\">", x, s->y0,
		        x, s->y0 + s->h, x, s->y0 + s->h + 16);
		put_tick_label(t, step, span, out);
		fputs("</text>\n", out);
	}
	fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\""
	        " stroke=\"#999\"/>\n</g>\n", s->x0, s->y0, s->w, s->h);
}

/* One line a distinct threshold of the first N threads. */
static void put_thresholds(const struct report_usage *u, size_t n, const struct usage_scale *s,
                           FILE *out)
{
	fputs("<g id=\"thresholds\" font-size=\"11\" fill=\"#c00\">\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *t = report_usage_thread(u, i);
		bool seen = false;

		for (size_t k = 0; k < i && !seen; k++)
			seen = report_usage_thread(u, k)->threshold == t->threshold;
		if (seen)
			continue;
		fprintf(out, "<line class=\"threshold\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\""
		        " stroke=\"#c00\" stroke-dasharray=\"6 4\"><title>threshold %d‰</title></line>"
		        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">threshold %d‰</text>\n",
		        s->x0, report_usage_y(s, t->threshold), s->x0 + s->w,
		        report_usage_y(s, t->threshold), t->threshold, s->x0 + s->w - 4,
		        report_usage_y(s, t->threshold) - 4, t->threshold);
	}
	fputs("</g>\n", out);
}

/* "nginx[42] worker/43" for XML. */
static void put_who(const char *comm, pid_t pid, const char *thread, pid_t tid, FILE *out)
{
	flamegraph_put_xml(comm, out);
	fprintf(out, "[%d] ", (int)pid);
	flamegraph_put_xml(thread, out);
	fprintf(out, "/%d", (int)tid);
}

/* The highest usage in each of NB spans of the window, and the first and
 * last time a point fell in it. */
struct bucket {
	int max;                 /* -1: no point */
	int64_t first_us, last_us;
};

static void fill_buckets(const struct usage_thread *t, const struct usage_scale *s,
                         struct bucket *b, size_t nb)
{
	double span = (double)(s->t1_us - s->t0_us);

	for (size_t i = 0; i < nb; i++)
		b[i].max = -1;
	for (size_t i = 0; i < t->npoints; i++) {
		const struct usage_point *p = &t->points[i];
		size_t k;

		if (p->time_us < s->t0_us || p->time_us >= s->t1_us)
			continue;
		k = (size_t)((double)(p->time_us - s->t0_us) / span * (double)nb);
		if (k >= nb)
			k = nb - 1;
		if (b[k].max < 0)
			b[k].first_us = p->time_us;
		if (p->usage > b[k].max)
			b[k].max = p->usage;
		b[k].last_us = p->time_us;
	}
}

/* Thread T's line: a point a span it was kept in, at 0 across a gap of
 * more than GAP_US between two kept cycles (it was under the floor, not
 * among the busiest, or nothing was recorded). */
static void put_series(const struct usage_thread *t, size_t rank, const struct usage_scale *s,
                       struct bucket *b, size_t nb, int64_t gap_us, FILE *out)
{
	double bw = s->w / (double)nb;
	int64_t prev_us = 0;
	bool any = false;

	fill_buckets(t, s, b, nb);
	fprintf(out, "<g class=\"series\" data-pid=\"%d\" data-tid=\"%d\"><title>", (int)t->pid,
	        (int)t->tid);
	put_who(t->comm, t->pid, t->thread, t->tid, out);
	fprintf(out, ": peak %d‰, mean %.0f‰ over %" PRIu64 " kept cycles</title>\n<polyline"
	        " stroke=\"%s\" points=\"", t->peak, t->mean, t->cycles, colours[rank % NCOLOURS]);
	for (size_t k = 0; k < nb; k++) {
		double x = s->x0 + bw * ((double)k + 0.5);

		if (b[k].max < 0)
			continue;
		if (any && b[k].first_us - prev_us > gap_us) {
			fprintf(out, "%.1f,%.1f %.1f,%.1f ",
			        report_usage_x(s, prev_us + gap_us / 2), report_usage_y(s, 0),
			        report_usage_x(s, b[k].first_us - gap_us / 2), report_usage_y(s, 0));
		}
		fprintf(out, "%.1f,%.1f ", x, report_usage_y(s, b[k].max));
		prev_us = b[k].last_us;
		any = true;
	}
	fputs("\"/></g>\n", out);
}

static void put_marks(const struct report_usage *u, size_t n, const struct usage_scale *s,
                      FILE *out)
{
	const struct usage_event *e;

	fputs("<g id=\"events\">\n", out);
	for (size_t i = 0; (e = report_usage_event(u, i)) != NULL; i++) {
		long rank = report_usage_rank_of(u, e, n);

		fprintf(out, "<circle class=\"mark\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\">"
		        "<title>", report_usage_x(s, e->time_us), report_usage_y(s, e->usage),
		        rank >= 0 ? colours[rank % NCOLOURS] : "#777");
		report_put_local(e->time_us, false, out);
		fputc(' ', out);
		put_who(e->comm, e->pid, e->thread, e->tid, out);
		fprintf(out, " at %d‰ over %d‰: ", e->usage, e->threshold);
		flamegraph_put_xml(e->frame[0] ? e->frame : "(no stack)", out);
		fputs("</title></circle>\n", out);
	}
	fputs("</g>\n", out);
}

static void put_legend(const struct report_usage *u, size_t n, FILE *out)
{
	fputs("<g id=\"legend\" font-size=\"12\">\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *t = report_usage_thread(u, i);
		int y = (int)PLOT_Y + 10 + (int)i * LEGEND_LINE;

		fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\""
		        " stroke-width=\"3\"/><text x=\"%d\" y=\"%d\">", LEGEND_X, y - 4,
		        LEGEND_X + 18, y - 4, colours[i % NCOLOURS], LEGEND_X + 24, y);
		put_who(t->comm, t->pid, t->thread, t->tid, out);
		fprintf(out, " %d‰ peak (", t->peak);
		flamegraph_put_xml(t->watch, out);
		fputs(")</text>\n", out);
	}
	fputs("</g>\n", out);
}

/* The window: the one asked for, else the rows' and events' own. */
static void window(const struct report_usage *u, int64_t since_us, int64_t until_us,
                   struct usage_scale *s)
{
	struct usage_totals t;
	const struct usage_event *first = report_usage_event(u, 0), *last;

	report_usage_totals(u, &t);
	last = t.events ? report_usage_event(u, t.events - 1) : NULL;
	s->t0_us = since_us ? since_us : t.rows ? t.first_us : first ? first->time_us : 0;
	s->t1_us = until_us ? until_us : t.rows ? t.last_end_us : 0;
	if (!until_us && last && last->time_us + 1000000 > s->t1_us)
		s->t1_us = last->time_us + 1000000;
	if (!since_us && first && first->time_us < s->t0_us)
		s->t0_us = first->time_us;
	if (s->t1_us <= s->t0_us)
		s->t1_us = s->t0_us + 1000000;
	s->x0 = PLOT_X;
	s->w = PLOT_W;
	s->y0 = PLOT_Y;
	s->h = PLOT_H;
}

/* The longest gap between two kept cycles of a thread that is still no
 * gap: a little over two of the shortest interval seen. */
static int64_t gap_of(const struct report_usage *u, size_t n)
{
	int64_t shortest = INT64_MAX;

	for (size_t i = 0; i < n; i++) {
		const struct usage_thread *t = report_usage_thread(u, i);

		for (size_t k = 1; k < t->npoints; k++)
			if (t->points[k].time_us - t->points[k - 1].time_us < shortest)
				shortest = t->points[k].time_us - t->points[k - 1].time_us;
	}
	return shortest == INT64_MAX ? INT64_MAX : shortest * 5 / 2;
}

int report_usage_write_svg(const struct report_usage *u, size_t top, int64_t since_us,
                           int64_t until_us, const char *title, const char *subtitle, FILE *out)
{
	struct usage_totals t;
	struct usage_scale s;
	size_t n, nb = (size_t)(PLOT_W / PX_PER_POINT);
	int64_t gap;
	int height;
	struct bucket *b = malloc(nb * sizeof *b);

	if (!b)
		return -ENOMEM;
	report_usage_totals(u, &t);
	n = top && top < t.threads ? top : t.threads;
	height = (int)(PLOT_Y + PLOT_H) + 40;
	if ((int)PLOT_Y + 10 + (int)n * LEGEND_LINE + 20 > height)
		height = (int)PLOT_Y + 10 + (int)n * LEGEND_LINE + 20;
	window(u, since_us, until_us, &s);
	fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\""
	        " viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
	        "<style>.series polyline{fill:none;stroke-width:1.5}"
	        ".series:hover polyline{stroke-width:3.5}"
	        ".mark{stroke:#000;stroke-width:0.7}.mark:hover{stroke-width:2}</style>\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n<title>", PAGE_W, height,
	        PAGE_W, height);
	flamegraph_put_xml(title, out);
	fputs("</title>\n<text x=\"60\" y=\"26\" font-size=\"17\">", out);
	flamegraph_put_xml(title, out);
	fputs("</text>\n", out);
	if (subtitle) {
		fputs("<text x=\"60\" y=\"48\" fill=\"#555\">", out);
		flamegraph_put_xml(subtitle, out);
		fputs("</text>\n", out);
	}
	put_axes(&s, out);
	if (t.rows == 0)
		fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">no usage"
		        " history in the window</text>\n", s.x0 + s.w / 2, s.y0 + s.h / 2);
	put_thresholds(u, n, &s, out);
	gap = gap_of(u, n);
	fputs("<g id=\"series\">\n", out);
	for (size_t i = 0; i < n; i++)
		put_series(report_usage_thread(u, i), i, &s, b, nb, gap, out);
	fputs("</g>\n", out);
	put_marks(u, n, &s, out);
	put_legend(u, n, out);
	fputs("</svg>\n", out);
	free(b);
	return ferror(out) ? -EIO : 0;
}
