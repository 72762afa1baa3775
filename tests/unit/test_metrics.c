/* metrics: the exposition text of a small case to the byte, label escaping,
 * counters across metrics_reconfigure, histogram buckets, and the atomic
 * write of the file. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "config/config.h"
#include "cpumond/metrics.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A configuration with only the watches' names set: all metrics reads. */
struct cfg_fixture {
	struct watch_config w[4];
	struct config cfg;
};

static void make_config(struct cfg_fixture *f, const char *const *names, size_t n)
{
	memset(f, 0, sizeof *f);
	assert_true(n <= ARRAY_SIZE(f->w));
	for (size_t i = 0; i < n; i++)
		f->w[i].name = (char *)(uintptr_t)names[i];  /* never written through */
	f->cfg.watches = f->w;
	f->cfg.nwatches = n;
}

static char *format(const struct metrics *m)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	metrics_format(m, out);
	assert_int_equal(fclose(out), 0);
	return text;
}

/* The value of the sample line that starts with PREFIX (name and labels,
 * then a space), or -1 when there is none. */
static double value_of(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

/* The events counter's lines come first, one per kind of kind.h (hot and
 * starved counted once below, every other kind 0); then these. */
static const char expect_events_head[] =
	"# HELP cpumond_overload_events_total Events (consecutive samples over a threshold), by kind.\n"
	"# TYPE cpumond_overload_events_total counter\n";
static const char expect_small[] =
	"# HELP cpumond_dumps_total Stack samples taken, by capture: ptrace (one thread stopped "
	"each), perf (no stop).\n"
	"# TYPE cpumond_dumps_total counter\n"
	"cpumond_dumps_total{watch=\"web\",capture=\"ptrace\"} 2\n"
	"cpumond_dumps_total{watch=\"web\",capture=\"perf\"} 1\n"
	"# HELP cpumond_dump_failures_total Stack dumps that failed, by reason: exited, denied, blocked, other.\n"
	"# TYPE cpumond_dump_failures_total counter\n"
	"cpumond_dump_failures_total{watch=\"web\",reason=\"exited\"} 0\n"
	"cpumond_dump_failures_total{watch=\"web\",reason=\"denied\"} 1\n"
	"cpumond_dump_failures_total{watch=\"web\",reason=\"blocked\"} 0\n"
	"cpumond_dump_failures_total{watch=\"web\",reason=\"other\"} 0\n"
	"# HELP cpumond_dump_stop_seconds How long each thread sampled by ptrace was stopped.\n"
	"# TYPE cpumond_dump_stop_seconds histogram\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"2.5e-05\"} 0\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"5e-05\"} 1\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.0001\"} 1\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.00025\"} 1\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.0005\"} 1\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.001\"} 1\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.0025\"} 2\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.01\"} 2\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"0.1\"} 2\n"
	"cpumond_dump_stop_seconds_bucket{watch=\"web\",le=\"+Inf\"} 2\n"
	"cpumond_dump_stop_seconds_sum{watch=\"web\"} 0.002030000\n"
	"cpumond_dump_stop_seconds_count{watch=\"web\"} 2\n"
	"# HELP cpumond_processes_watched Processes watched in the last cycle.\n"
	"# TYPE cpumond_processes_watched gauge\n"
	"cpumond_processes_watched{watch=\"web\"} 1\n"
	"# HELP cpumond_threads_watched Threads watched in the last cycle.\n"
	"# TYPE cpumond_threads_watched gauge\n"
	"cpumond_threads_watched{watch=\"web\"} 3\n"
	"# HELP cpumond_thread_usage_max_permille The hottest watched thread's usage in the last cycle, permille of one core.\n"
	"# TYPE cpumond_thread_usage_max_permille gauge\n"
	"cpumond_thread_usage_max_permille{watch=\"web\"} 987\n"
	"# HELP cpumond_cycle_seconds CPU time of each sampling cycle of cpumond.\n"
	"# TYPE cpumond_cycle_seconds histogram\n"
	"cpumond_cycle_seconds_bucket{le=\"1e-05\"} 0\n"
	"cpumond_cycle_seconds_bucket{le=\"0.0001\"} 0\n"
	"cpumond_cycle_seconds_bucket{le=\"0.0005\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"0.001\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"0.005\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"0.01\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"0.05\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"0.1\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"1\"} 1\n"
	"cpumond_cycle_seconds_bucket{le=\"+Inf\"} 1\n"
	"cpumond_cycle_seconds_sum 0.000250000\n"
	"cpumond_cycle_seconds_count 1\n";

static char *expected_small(void)
{
	char *want = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&want, &len);

	assert_non_null(out);
	fputs(expect_events_head, out);
	for (int k = 0; k < KIND_COUNT; k++)
		fprintf(out, "cpumond_overload_events_total{watch=\"web\",kind=\"%s\"} %d\n",
		        kind_name((enum kind)k), k == KIND_HOT || k == KIND_STARVED);
	fputs(expect_small, out);
	assert_int_equal(fclose(out), 0);
	return want;
}

/* One watch, one cycle: every line, to the byte. */
static void test_format_small(void **state)
{
	static const char *const names[] = { "web" };
	struct cfg_fixture f;
	struct metrics *m;
	char *text, *want;

	(void)state;
	make_config(&f, names, 1);
	m = metrics_new(&f.cfg);
	assert_non_null(m);
	metrics_cycle_start(m);
	metrics_process(m, 0);
	metrics_thread(m, 0, -1);   /* new: no usage yet */
	metrics_thread(m, 0, 987);
	metrics_thread(m, 0, 12);
	metrics_event(m, "web", KIND_HOT);
	metrics_event(m, "web", KIND_STARVED);
	metrics_event(m, "gone", KIND_HOT);   /* not a watch: not counted, not shown */
	metrics_dump(m, "web", METRICS_PTRACE, 30000);     /* 30 µs */
	metrics_dump(m, "web", METRICS_PTRACE, 2000000);   /* 2 ms */
	metrics_dump(m, "web", METRICS_PERF, 0);           /* no stop: not in the histogram */
	metrics_dump_failed(m, "web", METRICS_DENIED);
	metrics_cycle_cost(m, 250000);      /* 250 µs */
	text = format(m);
	want = expected_small();
	assert_string_equal(text, want);
	free(want);
	free(text);

	/* The gauges restart with each cycle; the counters do not. */
	metrics_cycle_start(m);
	text = format(m);
	assert_true(value_of(text, "cpumond_threads_watched{watch=\"web\"}") == 0);
	assert_true(value_of(text, "cpumond_processes_watched{watch=\"web\"}") == 0);
	assert_true(value_of(text, "cpumond_thread_usage_max_permille{watch=\"web\"}") == 0);
	assert_true(value_of(text, "cpumond_overload_events_total{watch=\"web\",kind=\"hot\"}") == 1);
	free(text);
	metrics_free(m);
}

/* A watch name with a quote, a backslash and a newline (an ini section
 * name cannot hold a newline, but the writer must not care), and bytes
 * that are not UTF-8, which a scraper refuses in a label value. */
static void test_label_escaping(void **state)
{
	static const char *const names[] = { "a\"b\\c\nd", "caf\xc3\xa9", "bad\xff\xfe" };
	struct cfg_fixture f;
	struct metrics *m;
	char *text;

	(void)state;
	make_config(&f, names, 3);
	m = metrics_new(&f.cfg);
	assert_non_null(m);
	metrics_event(m, "a\"b\\c\nd", KIND_HOT);
	text = format(m);
	assert_non_null(strstr(text, "cpumond_overload_events_total{watch=\"a\\\"b\\\\c\\nd\",kind=\"hot\"} 1\n"));
	assert_non_null(strstr(text, "cpumond_dump_failures_total{watch=\"a\\\"b\\\\c\\nd\","
	                             "reason=\"blocked\"} 0\n"));
	assert_non_null(strstr(text, "cpumond_dump_stop_seconds_bucket{watch=\"a\\\"b\\\\c\\nd\","
	                             "le=\"+Inf\"} 0\n"));
	/* Valid UTF-8 is kept; other bytes become U+FFFD. */
	assert_non_null(strstr(text, "cpumond_overload_events_total{watch=\"caf\xc3\xa9\",kind=\"hot\"} 0\n"));
	assert_non_null(strstr(text, "cpumond_overload_events_total{watch=\"bad\xef\xbf\xbd\xef\xbf\xbd\",kind=\"hot\"} 0\n"));
	/* Every line is a comment or ends in a value: no raw newline inside a
	 * label broke one in two. */
	for (char *line = text, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
		*nl = '\0';
		assert_true(line[0] == '#' || strstr(line, "} ") || strchr(line, ' '));
		assert_true(strncmp(line, "cpumond_", 8) == 0 || line[0] == '#');
		*nl = '\n';
	}
	free(text);
	metrics_free(m);
}

/* Counters carry over a reload by the watch's name, whatever its index;
 * a new watch starts at 0 and a removed one is gone. */
static void test_reconfigure(void **state)
{
	static const char *const before[] = { "a", "b", "c" };
	static const char *const after[] = { "new", "c", "a" };
	struct cfg_fixture f1, f2;
	struct metrics *m;
	char *text;

	(void)state;
	make_config(&f1, before, 3);
	make_config(&f2, after, 3);
	m = metrics_new(&f1.cfg);
	assert_non_null(m);
	metrics_event(m, "a", KIND_HOT);
	metrics_event(m, "c", KIND_HOT);
	metrics_event(m, "c", KIND_HOT);
	metrics_event(m, "b", KIND_HOT);
	metrics_dump(m, "a", METRICS_PTRACE, 40000);
	metrics_dump_failed(m, "c", METRICS_EXITED);
	metrics_cycle_cost(m, 1000);
	assert_int_equal(metrics_reconfigure(m, &f2.cfg), 0);
	metrics_event(m, "a", KIND_HOT);
	metrics_event(m, "b", KIND_HOT);     /* gone */
	text = format(m);
	assert_true(value_of(text, "cpumond_overload_events_total{watch=\"a\",kind=\"hot\"}") == 2);
	assert_true(value_of(text, "cpumond_overload_events_total{watch=\"c\",kind=\"hot\"}") == 2);
	assert_true(value_of(text, "cpumond_overload_events_total{watch=\"new\",kind=\"hot\"}") == 0);
	assert_true(value_of(text, "cpumond_overload_events_total{watch=\"b\",kind=\"hot\"}") == -1);
	assert_true(value_of(text, "cpumond_dumps_total{watch=\"a\",capture=\"ptrace\"}") == 1);
	assert_true(value_of(text, "cpumond_dump_stop_seconds_count{watch=\"a\"}") == 1);
	assert_true(value_of(text, "cpumond_dump_stop_seconds_bucket{watch=\"a\",le=\"5e-05\"}") == 1);
	assert_true(value_of(text, "cpumond_dump_failures_total{watch=\"c\",reason=\"exited\"}") == 1);
	assert_true(value_of(text, "cpumond_cycle_seconds_count") == 1);
	/* Indexes follow the new configuration. */
	metrics_cycle_start(m);
	metrics_thread(m, 2, 500);   /* "a" */
	metrics_process(m, 0);       /* "new" */
	free(text);
	text = format(m);
	assert_true(value_of(text, "cpumond_thread_usage_max_permille{watch=\"a\"}") == 500);
	assert_true(value_of(text, "cpumond_processes_watched{watch=\"new\"}") == 1);
	assert_true(value_of(text, "cpumond_processes_watched{watch=\"a\"}") == 0);
	free(text);
	metrics_free(m);
}

/* Buckets are cumulative (each at least the one before), +Inf is the
 * count, and the sum adds up, for observations across every bucket. */
static void test_histogram(void **state)
{
	static const char *const names[] = { "w" };
	static const uint64_t stops_ns[] = { 1000, 25000, 26000, 99000, 100000, 700000,
	                                     3000000, 50000000, 2000000000, 7000 };
	struct cfg_fixture f;
	struct metrics *m;
	char *text;
	double prev = 0, sum = 0;
	int nbuckets = 0;

	(void)state;
	make_config(&f, names, 1);
	m = metrics_new(&f.cfg);
	assert_non_null(m);
	for (size_t i = 0; i < ARRAY_SIZE(stops_ns); i++) {
		metrics_dump(m, "w", METRICS_PTRACE, stops_ns[i]);
		sum += (double)stops_ns[i] / 1e9;
	}
	for (int i = 0; i < 5; i++)
		metrics_cycle_cost(m, (uint64_t)i * 3000000);
	text = format(m);
	for (const char *p = text; (p = strstr(p, "cpumond_dump_stop_seconds_bucket{")) != NULL;) {
		const char *v = strstr(p, "} ") + 2;
		double x = strtod(v, NULL);

		assert_true(x >= prev);
		prev = x;
		nbuckets++;
		p = v;
	}
	assert_int_equal(nbuckets, 10);
	assert_true(prev == ARRAY_SIZE(stops_ns));
	assert_true(value_of(text, "cpumond_dump_stop_seconds_bucket{watch=\"w\",le=\"+Inf\"}") ==
	            value_of(text, "cpumond_dump_stop_seconds_count{watch=\"w\"}"));
	/* 1 µs, 7 µs and 25 µs (the bound is inclusive) */
	assert_true(value_of(text, "cpumond_dump_stop_seconds_bucket{watch=\"w\",le=\"2.5e-05\"}") == 3);
	assert_true(value_of(text, "cpumond_dump_stop_seconds_bucket{watch=\"w\",le=\"0.1\"}") == 9);
	assert_true(value_of(text, "cpumond_dump_stop_seconds_sum{watch=\"w\"}") > sum - 1e-6);
	assert_true(value_of(text, "cpumond_dump_stop_seconds_sum{watch=\"w\"}") < sum + 1e-6);
	assert_true(value_of(text, "cpumond_cycle_seconds_bucket{le=\"+Inf\"}") == 5);
	assert_true(value_of(text, "cpumond_cycle_seconds_count") == 5);
	assert_true(value_of(text, "cpumond_cycle_seconds_bucket{le=\"1e-05\"}") == 1);  /* the 0 */
	assert_true(value_of(text, "cpumond_cycle_seconds_bucket{le=\"0.005\"}") == 2);
	assert_true(value_of(text, "cpumond_cycle_seconds_bucket{le=\"0.01\"}") == 4);
	assert_true(value_of(text, "cpumond_cycle_seconds_bucket{le=\"0.05\"}") == 5);
	free(text);
	metrics_free(m);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* The file appears whole under its name, replaces the last one, and no
 * PATH.tmp stays behind; a directory that cannot be written is -errno. */
static void test_write_atomic(void **state)
{
	static const char *const names[] = { "web" };
	struct cfg_fixture f;
	struct metrics *m;
	char dir[] = "/tmp/test_metrics.XXXXXX", path[128], tmp[160];
	char *text, *file;
	struct stat sb;
	mode_t old_mask;
	FILE *in;
	long len;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/cpumond.prom", dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	make_config(&f, names, 1);
	m = metrics_new(&f.cfg);
	assert_non_null(m);
	old_mask = umask(027);   /* the unit's */
	for (int round = 0; round < 2; round++) {
		metrics_event(m, "web", KIND_HOT);
		assert_int_equal(metrics_write(m, path), 0);
		assert_int_equal(stat(tmp, &sb), -1);
		assert_int_equal(errno, ENOENT);
		assert_int_equal(count_entries(dir), 1);
		in = fopen(path, "r");
		assert_non_null(in);
		assert_int_equal(fseek(in, 0, SEEK_END), 0);
		len = ftell(in);
		rewind(in);
		file = calloc(1, (size_t)len + 1);
		assert_non_null(file);
		assert_int_equal(fread(file, 1, (size_t)len, in), (size_t)len);
		fclose(in);
		text = format(m);
		assert_string_equal(file, text);
		assert_true(value_of(file, "cpumond_overload_events_total{watch=\"web\",kind=\"hot\"}") == round + 1);
		free(text);
		free(file);
	}
	/* The textfile collector runs as another user: the file is readable
	 * whatever the umask. */
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0644);
	umask(old_mask);
	/* No such directory: an error, and nothing left. */
	snprintf(tmp, sizeof tmp, "%s/no/such/dir/x.prom", dir);
	assert_int_equal(metrics_write(m, tmp), -ENOENT);
	/* The target is a directory: rename fails and the .tmp goes. */
	snprintf(tmp, sizeof tmp, "%s/sub", dir);
	assert_int_equal(mkdir(tmp, 0700), 0);
	assert_true(metrics_write(m, tmp) < 0);
	assert_int_equal(count_entries(dir), 2);
	rmdir(tmp);
	unlink(path);
	rmdir(dir);
	metrics_free(m);
}

/* No watches (a reload to a file whose watches were all renamed away is
 * refused, but metrics must not care): only the daemon's own metrics have
 * samples. */
static void test_no_watches(void **state)
{
	struct cfg_fixture f;
	struct metrics *m;
	char *text;

	(void)state;
	make_config(&f, NULL, 0);
	m = metrics_new(&f.cfg);
	assert_non_null(m);
	metrics_event(m, "x", KIND_HOT);
	text = format(m);
	assert_null(strstr(text, "watch="));
	assert_non_null(strstr(text, "cpumond_cycle_seconds_count 0\n"));
	free(text);
	metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_small),
		cmocka_unit_test(test_label_escaping),
		cmocka_unit_test(test_reconfigure),
		cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_write_atomic),
		cmocka_unit_test(test_no_watches),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
