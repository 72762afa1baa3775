#include "cpumond/kinds.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpumond/clock.h"
#include "cpumond/json.h"
#include "cpumond/log.h"
#include "cpumond/trigger.h"
#include "procfs/procfs.h"

#define HOST_PRESSURE "/proc/pressure/cpu"

/* The cgroups whose cpu.stat was read, for the throttling since the last
 * reading: the cgroups of the threads starved in a cycle, few. */
#define CGROUPS_KEPT 64

struct cgroup_reading {
	char *path;
	struct procfs_cpu_stat st;
	uint64_t ms;             /* when read (monotonic); 0: free slot */
};

struct kinds {
	struct trigger *starved, *process;
	bool have_pressure;      /* the last reading of HOST_PRESSURE worked */
	bool said_no_psi;
	struct procfs_pressure pressure;
	uint64_t pressure_ns;    /* when it was read (monotonic) */
	struct cgroup_reading cgroups[CGROUPS_KEPT];
};

struct kinds *kinds_new(void)
{
	struct kinds *k = calloc(1, sizeof *k);

	if (!k)
		return NULL;
	k->starved = trigger_new();
	k->process = trigger_new();
	if (!k->starved || !k->process) {
		kinds_free(k);
		return NULL;
	}
	return k;
}

void kinds_free(struct kinds *k)
{
	if (!k)
		return;
	trigger_free(k->starved);
	trigger_free(k->process);
	for (size_t i = 0; i < CGROUPS_KEPT; i++)
		free(k->cgroups[i].path);
	free(k);
}

void kinds_before_sample(struct kinds *k, const struct config *cfg, struct sampler *s)
{
	struct procfs_pressure now;
	uint64_t now_ns = clock_mono_ms() * 1000000, some_ns = UINT64_MAX, window_ns;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int rc;

	if (!cfg->starved) {
		sampler_set_cpu_wait(s, 0, 0, 0);
		return;
	}
	rc = procfs_read_pressure(HOST_PRESSURE, &now);
	if (rc < 0 && !k->said_no_psi) {
		log_errno(LOG_NOTICE, -rc, "no CPU pressure from %s (a kernel without PSI, or booted "
		          "with psi=0): starved threads are looked for in every process each cycle, "
		          "and their pressure is null", HOST_PRESSURE);
		k->said_no_psi = true;
	}
	window_ns = k->pressure_ns ? now_ns - k->pressure_ns : 0;
	if (rc == 0 && k->have_pressure && now.some_total_us >= k->pressure.some_total_us)
		some_ns = (now.some_total_us - k->pressure.some_total_us) * 1000;
	/* The first cycle has no window: nobody has a usage yet either. */
	sampler_set_cpu_wait(s, some_ns, window_ns, ncpu > 0 ? (int)ncpu : 1);
	k->have_pressure = rc == 0;
	if (rc == 0)
		k->pressure = now;
	k->pressure_ns = now_ns;
}

/* ---- the pure part ---- */

size_t kinds_top_threads(const struct sampler_thread *t, size_t n, size_t *top, size_t k)
{
	size_t m = 0, j;

	for (size_t i = 0; i < n && k > 0; i++) {
		if (t[i].usage <= 0 || t[i].gated)
			continue;
		if (m < k)
			j = m++;
		else if (t[top[k - 1]].usage >= t[i].usage)
			continue;
		else
			j = k - 1;
		/* Past the ones it beats; an equal one seen earlier stays first. */
		for (; j > 0 && t[top[j - 1]].usage < t[i].usage; j--)
			top[j] = top[j - 1];
		top[j] = i;
	}
	return m;
}

static void put_top(const struct kinds_thread *top, size_t ntop, FILE *out)
{
	fputs("\"top\":[", out);
	for (size_t i = 0; i < ntop; i++) {
		fprintf(out, "%s{\"tid\":%d,\"comm\":", i ? "," : "", (int)top[i].tid);
		json_put_string(top[i].comm, out);
		fprintf(out, ",\"usage\":%d}", top[i].usage);
	}
	fputc(']', out);
}

/* ,"KEY":V or ,"KEY":null when V < 0. */
static void put_count(const char *key, long long v, FILE *out)
{
	if (v < 0)
		fprintf(out, ",\"%s\":null", key);
	else
		fprintf(out, ",\"%s\":%lld", key, v);
}

static void put_share(const char *key, double v, FILE *out)
{
	if (v < 0)
		fprintf(out, ",\"%s\":null", key);
	else
		fprintf(out, ",\"%s\":%.2f", key, v);
}

void kinds_starved_details(const struct kinds_starved *f, FILE *out)
{
	fprintf(out, "{\"usage\":%d,\"demand\":%d,\"run_delay\":%d,\"waited_all\":%s", f->usage,
	        f->demand, f->run_delay, f->waited_all ? "true" : "false");
	put_count("cpu", f->cpu, out);
	put_share("host_pressure", f->host_pressure, out);
	put_share("cgroup_pressure", f->cgroup_pressure, out);
	put_count("throttled_periods", f->throttled_periods, out);
	put_count("throttled_usec", f->throttled_usec, out);
	put_count("throttled_over_ms", f->throttled_over_ms, out);
	fputc(',', out);
	put_top(f->top, f->ntop, out);
	fputc('}', out);
}

void kinds_process_details(int process_usage, size_t threads, const struct kinds_thread *top,
                           size_t ntop, FILE *out)
{
	fprintf(out, "{\"process_usage\":%d,\"threads\":%zu,", process_usage, threads);
	put_top(top, ntop, out);
	fputc('}', out);
}

/* ---- the readers ---- */

/* TOP's entries for the threads TOPI (indices into T) of this cycle, their
 * names read now ("" when gone). */
static void name_threads(const struct sampler_thread *t, const size_t *topi, size_t n,
                         struct kinds_thread *top)
{
	for (size_t i = 0; i < n; i++) {
		const struct sampler_thread *x = &t[topi[i]];

		top[i] = (struct kinds_thread){ .tid = x->tid, .usage = x->usage };
		procfs_read_comm(x->pid, x->tid, top[i].comm, sizeof top[i].comm);
	}
}

/* The throttling of CGROUP since its last reading here, into F (unknown
 * at its first); keeps this reading for the next. */
static void throttling(struct kinds *k, const char *cgroup, uint64_t now_ms,
                       struct kinds_starved *f)
{
	struct cgroup_reading *r = NULL, *oldest = &k->cgroups[0];
	struct procfs_cpu_stat st;

	if (procfs_read_cpu_stat(cgroup, &st) < 0)
		return;
	for (size_t i = 0; i < CGROUPS_KEPT && !r; i++) {
		if (k->cgroups[i].path && strcmp(k->cgroups[i].path, cgroup) == 0)
			r = &k->cgroups[i];
		else if (k->cgroups[i].ms < oldest->ms)
			oldest = &k->cgroups[i];
	}
	if (r && r->st.nr_throttled >= 0 && st.nr_throttled >= r->st.nr_throttled &&
	    st.throttled_usec >= r->st.throttled_usec) {
		f->throttled_periods = st.nr_throttled - r->st.nr_throttled;
		f->throttled_usec = st.throttled_usec - r->st.throttled_usec;
		f->throttled_over_ms = (long long)(now_ms - r->ms);
	}
	if (!r) {
		char *path = strdup(cgroup);

		if (!path)
			return;
		r = oldest;
		free(r->path);
		r->path = path;
	}
	r->st = st;
	r->ms = now_ms;
}

/* The facts of starved thread T that are read now, into F. */
static void read_starved(struct kinds *k, const struct sampler_thread *t, uint64_t now_ms,
                         struct kinds_starved *f)
{
	char cgroup[PATH_MAX], path[PATH_MAX];
	struct procfs_stat st;
	struct procfs_pressure p;

	f->cpu = procfs_read_stat(t->pid, t->tid, &st) == 0 ? st.processor : -1;
	f->host_pressure = k->have_pressure ? k->pressure.some_avg10 : -1;
	f->cgroup_pressure = f->throttled_periods = f->throttled_usec = f->throttled_over_ms = -1;
	if (procfs_read_cgroup(t->pid, cgroup, sizeof cgroup) < 0)
		return;
	if (procfs_cgroup_file(cgroup, "cpu.pressure", path, sizeof path) == 0 &&
	    procfs_read_pressure(path, &p) == 0)
		f->cgroup_pressure = p.some_avg10;
	throttling(k, cgroup, now_ms, f);
}

/* TEXT of a details object that WRITE makes, or NULL when out of memory. */
static char *details_text(void (*write)(const void *arg, FILE *out), const void *arg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	if (!out)
		return NULL;
	write(arg, out);
	if (fclose(out) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

static void write_starved(const void *arg, FILE *out)
{
	kinds_starved_details(arg, out);
}

struct process_facts {
	int usage;
	size_t threads;
	const struct kinds_thread *top;
	size_t ntop;
};

static void write_process(const void *arg, FILE *out)
{
	const struct process_facts *f = arg;

	kinds_process_details(f->usage, f->threads, f->top, f->ntop, out);
}

static void start_starved(struct kinds *k, const struct watch_proc *proc,
                          const struct sampler_thread *t, const struct watch_config *wc,
                          const struct kinds_thread *top, size_t ntop, struct capture *c,
                          uint64_t now_ms)
{
	struct kinds_starved f = { .usage = t->usage, .demand = t->demand,
	                           .run_delay = t->demand - t->usage, .waited_all = t->waited_all,
	                           .top = top, .ntop = ntop };
	struct capture_trip trip = { KIND_STARVED, t->usage, wc->threshold, f.run_delay, NULL };
	char *details;

	read_starved(k, t, now_ms, &f);
	details = details_text(write_starved, &f);
	trip.details = details;
	capture_start(c, proc, t, wc, &trip, now_ms);
	free(details);
}

/* The process of threads T[0..N) (one process, read this cycle), over
 * its process_threshold: an event for each of its top threads. */
static void start_process(const struct watch_proc *proc, const struct sampler_thread *t,
                          size_t n, int usage, const struct watch_config *wc,
                          struct capture *c, uint64_t now_ms)
{
	size_t topi[KINDS_TOP], ntop = kinds_top_threads(t, n, topi, KINDS_TOP), read = 0;
	struct kinds_thread top[KINDS_TOP];
	struct process_facts f = { usage, 0, top, ntop };
	char *details;

	for (size_t i = 0; i < n; i++)
		read += t[i].usage >= 0;
	f.threads = read;
	name_threads(t, topi, ntop, top);
	details = details_text(write_process, &f);
	for (size_t i = 0; i < ntop; i++) {
		const struct sampler_thread *x = &t[topi[i]];
		struct capture_trip trip = { KIND_PROCESS, x->usage, wc->process_threshold,
		                             x->run_delay, details };

		capture_start(c, proc, x, wc, &trip, now_ms);
	}
	free(details);
}

/* The process event rule over the threads of one process, T[0..N). */
static void observe_process(struct kinds *k, const struct watch_proc *proc,
                            const struct sampler_thread *t, size_t n,
                            const struct watch_config *wc, struct capture *c, uint64_t now_ms)
{
	struct trigger_rule rule = { wc->process_threshold, wc->consecutive, wc->cooldown_ms };
	int usage = 0;

	if (wc->process_threshold <= 0)
		return;
	/* A gated process's threads each carry the process's usage. */
	if (t[0].gated)
		usage = t[0].usage;
	else
		for (size_t i = 0; i < n; i++)
			usage += t[i].usage > 0 ? t[i].usage : 0;
	if (trigger_observe(k->process, t[0].proc_key, usage, &rule, now_ms) && !t[0].gated)
		start_process(proc, t, n, usage, wc, c, now_ms);
}

void kinds_cycle(struct kinds *k, const struct config *cfg, const struct watch_proc *procs,
                 const struct sampler_thread *threads, size_t n, struct capture *c,
                 uint64_t now_ms)
{
	size_t topi[KINDS_TOP], ntop = 0;
	struct kinds_thread top[KINDS_TOP];
	bool named = false;

	for (size_t i = 0; i < n && cfg->starved; i++) {
		const struct sampler_thread *t = &threads[i];
		const struct watch_config *wc = &cfg->watches[procs[t->proc].watch];
		struct trigger_rule rule = { wc->threshold, wc->consecutive, wc->cooldown_ms };
		int level = trigger_starved_level(t->usage, t->demand, wc->threshold);

		if (!trigger_observe(k->starved, t->key, level, &rule, now_ms))
			continue;
		/* The cycle's busiest watched threads, once a cycle at most. */
		if (!named) {
			ntop = kinds_top_threads(threads, n, topi, KINDS_TOP);
			name_threads(threads, topi, ntop, top);
			named = true;
		}
		start_starved(k, &procs[t->proc], t, wc, top, ntop, c, now_ms);
	}
	/* The sampler gives each process's threads one after another. */
	for (size_t i = 0, end; i < n; i = end) {
		for (end = i + 1; end < n && threads[end].proc == threads[i].proc; end++)
			;
		observe_process(k, &procs[threads[i].proc], &threads[i], end - i,
		                &cfg->watches[procs[threads[i].proc].watch], c, now_ms);
	}
	trigger_sweep(k->starved);
	trigger_sweep(k->process);
}
