/* report: the command `cpumond report` -- its arguments (--by, --since and
 * --until) and report_run, which reads the window (report_read.c), groups
 * and ranks it (report_aggregate.c) and writes one output form
 * (report_table.c, report_json.c, report_folded.c, report_svg.c,
 * report_pprof.c), or with --usage reads the usage history
 * (report_read.c) into report_usage.h's ranking and writes its table,
 * JSON or chart. */
#include "cpumond/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "cpumond/log.h"
#include "cpumond/report_internal.h"

#define TOP_DEFAULT 10

static const char *const by_names[] = {
	[REPORT_BY_EXACT] = "exact",
	[REPORT_BY_SIGNATURE] = "signature",
	[REPORT_BY_TOP_FRAME] = "top-frame",
	[REPORT_BY_ENTRY] = "entry",
};

int report_parse_by(const char *text, enum report_by *by)
{
	for (size_t i = 0; i < sizeof by_names / sizeof by_names[0]; i++) {
		if (strcmp(text, by_names[i]) == 0) {
			*by = (enum report_by)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *report_by_name(enum report_by by)
{
	return (size_t)by < sizeof by_names / sizeof by_names[0] ? by_names[by] : "?";
}

/* ---- Times ---- */

static bool digits(const char *s, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* Days from 1970-01-01 to Y-M-D of the proleptic Gregorian calendar
 * (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
	static const int dim[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : dim[m - 1];
}

/* "90s", "30m", "30min", "1h", "2d", "2w" before NOW_US: a duration as the
 * configuration reads it, with its unit -- a bare number is more likely a
 * date cut short than seconds. */
static int parse_ago(const char *text, int64_t now_us, int64_t *out_us)
{
	size_t n = strlen(text);
	uint64_t ms;

	if (n == 0 || (text[n - 1] >= '0' && text[n - 1] <= '9') ||
	    config_parse_duration(text, &ms) < 0 || now_us < 0 || ms > (uint64_t)now_us / 1000)
		return -EINVAL;  /* or before 1970 */
	*out_us = now_us - (int64_t)ms * 1000;
	return 0;
}

/* RFC 3339, or a local date and time without a zone. */
static int parse_absolute(const char *s, int64_t *out_us)
{
	int y, mo, d, h = 0, mi = 0, sec = 0, zh, zm;
	int64_t frac_us = 0, t;
	bool local = true;
	long zone_s = 0;

	if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
	    !digits(s + 8, 2, &d))
		return -EINVAL;
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
		return -EINVAL;
	s += 10;
	if (*s) {
		if (*s != 'T' && *s != 't' && *s != ' ')
			return -EINVAL;
		if (!digits(s + 1, 2, &h) || s[3] != ':' || !digits(s + 4, 2, &mi) || s[6] != ':' ||
		    !digits(s + 7, 2, &sec))
			return -EINVAL;
		if (h > 23 || mi > 59 || sec > 60)
			return -EINVAL;
		s += 9;
		if (*s == '.') {
			int64_t scale = 100000;
			int n = 0;

			for (s++; *s >= '0' && *s <= '9'; s++, n++) {
				frac_us += (*s - '0') * scale;
				scale /= 10;
			}
			if (n == 0 || n > 9)
				return -EINVAL;
		}
		if (*s == 'Z' || *s == 'z') {
			local = false;
			s++;
		} else if (*s == '+' || *s == '-') {
			if (!digits(s + 1, 2, &zh) || s[3] != ':' || !digits(s + 4, 2, &zm) ||
			    zh > 23 || zm > 59)
				return -EINVAL;
			zone_s = (*s == '-' ? -1 : 1) * (zh * 3600L + zm * 60L);
			local = false;
			s += 6;
		}
		if (*s)
			return -EINVAL;
	}
	if (local) {
		struct tm tm = {
			.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
			.tm_hour = h, .tm_min = mi, .tm_sec = sec, .tm_isdst = -1,
		};
		time_t tt;

		tzset();
		tt = mktime(&tm);
		if (tt == (time_t)-1)
			return -EINVAL;
		t = (int64_t)tt;
	} else {
		t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - zone_s;
	}
	if (t < 0)
		return -EINVAL;
	*out_us = t * 1000000 + frac_us;
	return 0;
}

int report_parse_time(const char *text, int64_t now_us, int64_t *out_us)
{
	if (!text || !*text)
		return -EINVAL;
	if (strcmp(text, "now") == 0) {
		*out_us = now_us;
		return 0;
	}
	if (parse_ago(text, now_us, out_us) == 0)
		return 0;
	return parse_absolute(text, out_us);
}

void report_put_local(int64_t t_us, bool zone, FILE *out)
{
	time_t t = (time_t)(t_us >= 0 ? t_us / 1000000 : (t_us - 999999) / 1000000);
	char buf[64];
	struct tm tm;
	size_t n = 0;

	if (localtime_r(&t, &tm))
		n = zone ? strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm)
		         : strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
	if (n == 0)
		snprintf(buf, sizeof buf, "@%" PRId64, t_us);
	fputs(buf, out);
}

int report_open_output(const char *path, FILE *out, FILE **file)
{
	*file = out;
	if (strcmp(path, "-") == 0)
		return 0;
	*file = fopen(path, "we");
	if (*file)
		return 0;
	log_errno(LOG_ERR, errno, "cannot write %s", path);
	return -errno;
}

int report_close_output(FILE *file, FILE *out, const char *path, int e)
{
	if (file != out && fclose(file) != 0 && e == 0)
		e = -errno;
	if (e < 0)
		log_errno(LOG_ERR, -e, "cannot write %s", path);
	return e;
}

/* The chart's subtitle: what it shows of the window, and the filters. */
static char *usage_subtitle(const struct report_options *opt, const struct report_usage *u,
                            size_t top)
{
	struct usage_totals t;
	char *text = NULL;
	size_t len = 0, n;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	report_usage_totals(u, &t);
	n = top && top < t.threads ? top : t.threads;
	fprintf(f, "the busiest %zu of %zu %s kept in the usage history, %zu %s", n, t.threads,
	        log_plural(t.threads, "thread", "threads"), t.events,
	        log_plural(t.events, "event", "events"));
	if (t.rows) {
		fputs(", from ", f);
		report_put_local(t.first_us, false, f);
		fputs(" to ", f);
		report_put_local(t.last_end_us, true, f);
	}
	report_put_filter(opt, f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* --usage: the window's usage history as a table, JSON or a chart. */
static int run_usage(const struct report_options *opt, FILE *out)
{
	size_t top = opt->top < 0 ? (opt->json && !opt->svg_path ? 0 : TOP_DEFAULT)
	                          : (size_t)opt->top;
	struct report_usage *u;
	char *subtitle = NULL;
	FILE *file;
	int e;

	if (report_usage_new(&u) < 0) {
		log_msg(LOG_ERR, "out of memory");
		return -ENOMEM;
	}
	if ((e = report_read_usage(opt, u)) < 0)
		goto out;
	if ((e = report_usage_finish(u)) < 0) {
		log_msg(LOG_ERR, "cannot rank the threads: out of memory");
		goto out;
	}
	if (!opt->svg_path) {
		if (opt->json)
			report_usage_print_json(u, top, out);
		else
			report_usage_print_table(u, top, out);
		goto out;
	}
	if (!(subtitle = usage_subtitle(opt, u, top))) {
		log_msg(LOG_ERR, "out of memory");
		e = -ENOMEM;
		goto out;
	}
	if ((e = report_open_output(opt->svg_path, out, &file)) < 0)
		goto out;
	e = report_usage_write_svg(u, top, opt->since_us, opt->until_us, "cpumond: thread usage",
	                           subtitle, file);
	e = report_close_output(file, out, opt->svg_path, e);
out:
	free(subtitle);
	report_usage_free(u);
	return e;
}

/* The events' stacks, grouped and ranked, in one of the output forms. */
static int run_events(const struct report_options *opt, FILE *out)
{
	struct report *r;
	int e;

	if (report_new(opt->by, opt->ignore, &r) < 0) {
		log_msg(LOG_ERR, "out of memory");
		return -ENOMEM;
	}
	/* Every database is closed before the output, which may wait on a
	 * pager. */
	if ((e = report_read(opt, r)) < 0)
		goto out;
	if ((e = report_finish(r)) < 0) {
		log_msg(LOG_ERR, "cannot group the stacks: out of memory");
		goto out;
	}
	if (opt->svg_path)
		e = report_write_svg(opt, r, out);
	else if (opt->pprof_path)
		e = report_write_pprof(opt, r, out);
	else if (opt->folded)
		e = report_print_folded(r, out);
	else if (opt->json)
		report_print_json(r, opt->top, out);
	else
		report_print_table(r, opt->top < 0 ? TOP_DEFAULT : opt->top, out);
	if (e == -ENOMEM)
		log_msg(LOG_ERR, "out of memory");
out:
	report_free(r);
	return e;
}

int report_run(const struct report_options *opt, FILE *out)
{
	int e;

	tzset();
	e = opt->usage ? run_usage(opt, out) : run_events(opt, out);
	errno = 0;
	if (e == 0 && (fflush(out) == EOF || ferror(out))) {
		e = errno ? -errno : -EIO;
		log_errno(LOG_ERR, -e, "cannot write the output");
	}
	return e;
}
