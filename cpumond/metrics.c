#include "cpumond/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stackdump/stackdump.h"

/* Stops seen on this kind of machine are 20 µs to a few ms (tail: 1-8 ms
 * under load); the buckets bracket that. */
static const double stop_buckets[] = { 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 10e-3,
                                       100e-3 };
/* A cycle costs ~1 µs per thread: 10 µs for a few threads, 10 ms for 10,000. */
static const double cycle_buckets[] = { 1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1, 1.0 };
#define NSTOP (sizeof stop_buckets / sizeof stop_buckets[0])
#define NCYCLE (sizeof cycle_buckets / sizeof cycle_buckets[0])

static const char *const failure_names[METRICS_NFAILURES] = {
	[METRICS_EXITED] = "exited", [METRICS_DENIED] = "denied",
	[METRICS_BLOCKED] = "blocked", [METRICS_OTHER] = "other",
};

static const char *const capture_names[METRICS_NCAPTURES] = {
	[METRICS_PTRACE] = "ptrace", [METRICS_PERF] = "perf",
};

struct histogram {
	uint64_t buckets[NSTOP > NCYCLE ? NSTOP : NCYCLE];   /* cumulative at output */
	uint64_t count;
	double sum;
};

struct watch_metrics {
	char *name;
	uint64_t events[KIND_COUNT], dumps[METRICS_NCAPTURES], failures[METRICS_NFAILURES];
	struct histogram stop;
	size_t processes, threads;   /* this cycle */
	int usage_max;
};

struct metrics {
	struct watch_metrics *w;
	size_t n;
	struct histogram cycle;
};

static int fill_watches(struct watch_metrics **out, const struct config *cfg)
{
	struct watch_metrics *w = calloc(cfg->nwatches ? cfg->nwatches : 1, sizeof *w);

	if (!w)
		return -ENOMEM;
	for (size_t i = 0; i < cfg->nwatches; i++) {
		if (!(w[i].name = strdup(cfg->watches[i].name))) {
			while (i--)
				free(w[i].name);
			free(w);
			return -ENOMEM;
		}
	}
	*out = w;
	return 0;
}

static void free_watches(struct watch_metrics *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(w[i].name);
	free(w);
}

struct metrics *metrics_new(const struct config *cfg)
{
	struct metrics *m = calloc(1, sizeof *m);

	if (!m || fill_watches(&m->w, cfg) < 0) {
		free(m);
		return NULL;
	}
	m->n = cfg->nwatches;
	return m;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	free_watches(m->w, m->n);
	free(m);
}

int metrics_reconfigure(struct metrics *m, const struct config *cfg)
{
	struct watch_metrics *w;

	if (fill_watches(&w, cfg) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < cfg->nwatches; i++) {
		for (size_t j = 0; j < m->n; j++) {
			if (strcmp(m->w[j].name, w[i].name) == 0) {
				char *name = w[i].name;
				w[i] = m->w[j];
				w[i].name = name;
				break;
			}
		}
	}
	free_watches(m->w, m->n);
	m->w = w;
	m->n = cfg->nwatches;
	return 0;
}

void metrics_cycle_start(struct metrics *m)
{
	for (size_t i = 0; i < m->n; i++) {
		m->w[i].processes = m->w[i].threads = 0;
		m->w[i].usage_max = 0;
	}
}

void metrics_thread(struct metrics *m, size_t w, int usage)
{
	m->w[w].threads++;
	if (usage > m->w[w].usage_max)
		m->w[w].usage_max = usage;
}

void metrics_process(struct metrics *m, size_t w)
{
	m->w[w].processes++;
}

static void observe(struct histogram *h, const double *bounds, size_t n, double v)
{
	for (size_t i = 0; i < n; i++)
		if (v <= bounds[i])
			h->buckets[i]++;
	h->count++;
	h->sum += v;
}

void metrics_cycle_cost(struct metrics *m, uint64_t cpu_ns)
{
	observe(&m->cycle, cycle_buckets, NCYCLE, (double)cpu_ns / 1e9);
}

static struct watch_metrics *by_name(struct metrics *m, const char *watch)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->w[i].name, watch) == 0)
			return &m->w[i];
	return NULL;
}

void metrics_event(struct metrics *m, const char *watch, enum kind kind)
{
	struct watch_metrics *w = by_name(m, watch);

	if (w && (unsigned)kind < KIND_COUNT)
		w->events[kind]++;
}

void metrics_dump(struct metrics *m, const char *watch, enum metrics_capture capture,
                  uint64_t stop_ns)
{
	struct watch_metrics *w = by_name(m, watch);

	if (!w)
		return;
	w->dumps[capture]++;
	if (capture == METRICS_PTRACE)
		observe(&w->stop, stop_buckets, NSTOP, (double)stop_ns / 1e9);
}

void metrics_dump_failed(struct metrics *m, const char *watch, enum metrics_failure why)
{
	struct watch_metrics *w = by_name(m, watch);

	if (w)
		w->failures[why]++;
}

/* A label value: backslash, double quote and newline escaped, as the text
 * format requires.  The scraper also refuses a file with a label value
 * that is not UTF-8 (node_exporter then drops every metric of the file), so
 * such bytes become U+FFFD. */
static void put_label(const char *s, FILE *out)
{
	while (*s) {
		int n = stackdump_utf8_len(s);

		if (*s == '\\' || *s == '"') {
			fprintf(out, "\\%c", *s);
		} else if (*s == '\n') {
			fputs("\\n", out);
		} else if (n == 0) {
			fputs("\xef\xbf\xbd", out);
			n = 1;
		} else {
			fwrite(s, 1, (size_t)n, out);
		}
		s += n;
	}
}

static void head(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Writes NAME{watch="W",EXTRA} (or NAME{EXTRA}, or NAME) and a space. */
static void sample(FILE *out, const char *name, const char *watch, const char *extra)
{
	fputs(name, out);
	if (!watch && !extra) {
		fputc(' ', out);
		return;
	}
	fputc('{', out);
	if (watch) {
		fputs("watch=\"", out);
		put_label(watch, out);
		fputc('"', out);
	}
	if (extra)
		fprintf(out, "%s%s", watch ? "," : "", extra);
	fputs("} ", out);
}

static void put_histogram(FILE *out, const char *name, const char *watch,
                          const struct histogram *h, const double *bounds, size_t n)
{
	char metric[64], le[32];

	snprintf(metric, sizeof metric, "%s_bucket", name);
	for (size_t i = 0; i < n; i++) {
		snprintf(le, sizeof le, "le=\"%g\"", bounds[i]);
		sample(out, metric, watch, le);
		fprintf(out, "%llu\n", (unsigned long long)h->buckets[i]);
	}
	sample(out, metric, watch, "le=\"+Inf\"");
	fprintf(out, "%llu\n", (unsigned long long)h->count);
	snprintf(metric, sizeof metric, "%s_sum", name);
	sample(out, metric, watch, NULL);
	fprintf(out, "%.9f\n", h->sum);
	snprintf(metric, sizeof metric, "%s_count", name);
	sample(out, metric, watch, NULL);
	fprintf(out, "%llu\n", (unsigned long long)h->count);
}

void metrics_format(const struct metrics *m, FILE *out)
{
	static const char *const events = "cpumond_overload_events_total",
	                        *const dumps = "cpumond_dumps_total",
	                        *const failures = "cpumond_dump_failures_total",
	                        *const stop = "cpumond_dump_stop_seconds",
	                        *const procs = "cpumond_processes_watched",
	                        *const threads = "cpumond_threads_watched",
	                        *const usage = "cpumond_thread_usage_max_permille";
	char label[32];

	head(out, events, "counter",
	     "Events (consecutive samples over a threshold), by kind.");
	for (size_t i = 0; i < m->n; i++) {
		for (int k = 0; k < KIND_COUNT; k++) {
			snprintf(label, sizeof label, "kind=\"%s\"", kind_name((enum kind)k));
			sample(out, events, m->w[i].name, label);
			fprintf(out, "%llu\n", (unsigned long long)m->w[i].events[k]);
		}
	}
	head(out, dumps, "counter",
	     "Stack samples taken, by capture: ptrace (one thread stopped each), perf (no stop).");
	for (size_t i = 0; i < m->n; i++) {
		for (int k = 0; k < METRICS_NCAPTURES; k++) {
			snprintf(label, sizeof label, "capture=\"%s\"", capture_names[k]);
			sample(out, dumps, m->w[i].name, label);
			fprintf(out, "%llu\n", (unsigned long long)m->w[i].dumps[k]);
		}
	}
	head(out, failures, "counter",
	     "Stack dumps that failed, by reason: exited, denied, blocked, other.");
	for (size_t i = 0; i < m->n; i++) {
		for (int r = 0; r < METRICS_NFAILURES; r++) {
			snprintf(label, sizeof label, "reason=\"%s\"", failure_names[r]);
			sample(out, failures, m->w[i].name, label);
			fprintf(out, "%llu\n", (unsigned long long)m->w[i].failures[r]);
		}
	}
	head(out, stop, "histogram", "How long each thread sampled by ptrace was stopped.");
	for (size_t i = 0; i < m->n; i++)
		put_histogram(out, stop, m->w[i].name, &m->w[i].stop, stop_buckets, NSTOP);
	head(out, procs, "gauge", "Processes watched in the last cycle.");
	for (size_t i = 0; i < m->n; i++) {
		sample(out, procs, m->w[i].name, NULL);
		fprintf(out, "%zu\n", m->w[i].processes);
	}
	head(out, threads, "gauge", "Threads watched in the last cycle.");
	for (size_t i = 0; i < m->n; i++) {
		sample(out, threads, m->w[i].name, NULL);
		fprintf(out, "%zu\n", m->w[i].threads);
	}
	head(out, usage, "gauge",
	     "The hottest watched thread's usage in the last cycle, permille of one core.");
	for (size_t i = 0; i < m->n; i++) {
		sample(out, usage, m->w[i].name, NULL);
		fprintf(out, "%d\n", m->w[i].usage_max);
	}
	head(out, "cpumond_cycle_seconds", "histogram", "CPU time of each sampling cycle of cpumond.");
	put_histogram(out, "cpumond_cycle_seconds", NULL, &m->cycle, cycle_buckets, NCYCLE);
}

/* The file is 0644 whatever the umask (the unit's is 0027): node_exporter
 * runs as another user, and the counts are no secret. */
int metrics_write(const struct metrics *m, const char *path)
{
	char tmp[4096];
	FILE *f;
	int fd, e = 0;

	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0644) < 0 || !(f = fdopen(fd, "w"))) {
		e = -errno;
		close(fd);
		unlink(tmp);
		return e;
	}
	metrics_format(m, f);
	if (ferror(f))
		e = -EIO;
	if (fclose(f) != 0 && e == 0)
		e = -errno;
	if (e == 0 && rename(tmp, path) < 0)
		e = -errno;
	if (e < 0)
		unlink(tmp);
	return e;
}
