/* daemon: the sampling loop.  Each cycle follows the data one way: watch
 * (which processes) -> sampler (each thread's usage) -> trigger (which
 * threads are events) -> capture (an episode of stack samples each) ->
 * record (the log, the journal, the database, the event log, the metrics
 * file).  The loop owns the timers (the cycle, the episodes' samples, the
 * watchdog), the signals and the reload. */
#include "cpumond/daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "cpumond/capture.h"
#include "cpumond/clock.h"
#include "cpumond/doctor.h"
#include "cpumond/exit_status.h"
#include "cpumond/kinds.h"
#include "cpumond/stall_probe.h"
#include "cpumond/log.h"
#include "cpumond/metrics.h"
#include "cpumond/record.h"
#include "cpumond/sampler.h"
#include "cpumond/service.h"
#include "cpumond/store.h"
#include "cpumond/trigger.h"
#include "cpumond/watch.h"

/* What the daemon last said about a watch's processes. */
struct watch_seen {
	size_t procs;            /* its processes this cycle */
	bool said_empty;         /* warned that it has none, and none came since */
};

struct daemon {
	struct config *cfg;      /* heap: the watch resolver, capture and record point into it */
	const char *db_override; /* -d */
	char *db_path;           /* the database open, whatever the file says since */
	long max_cycles;         /* --cycles; 0: run until stopped */
	struct watch *watch;
	struct watch_seen *seen; /* per watch of cfg */
	struct sampler *sampler;
	struct trigger *trigger;
	struct capture *capture;
	struct kinds *kinds;     /* starved and process events */
	struct stall *stall;     /* stall events (stall_after) */
	struct record *record;
	struct metrics *metrics; /* counted by the loop, capture and record */
	uint64_t cycles;
	size_t nprocs, nthreads; /* watched in the last cycle */
};

/* Warns when a watch has no process: at start, after a reload, and when
 * one that had some has none left; once each time, not every cycle. */
static void say_empty_watches(struct daemon *d, const struct watch_proc *procs, size_t n)
{
	for (size_t i = 0; i < d->cfg->nwatches; i++)
		d->seen[i].procs = 0;
	for (size_t k = 0; k < n; k++)
		d->seen[procs[k].watch].procs++;
	for (size_t i = 0; i < d->cfg->nwatches; i++) {
		struct watch_seen *s = &d->seen[i];
		struct doctor_result r;
		struct watch_why why;

		if (s->procs && s->said_empty) {
			log_msg(LOG_INFO, "watch \"%s\" matches %zu %s again", d->cfg->watches[i].name,
			        s->procs, log_plural(s->procs, "process", "processes"));
			s->said_empty = false;
		} else if (!s->procs && !s->said_empty) {
			watch_why_empty(d->watch, i, &why);
			doctor_check_watch(d->cfg, i, procs, n, NULL, &why, &r);
			log_msg(LOG_WARNING, "%s%s%s", r.message, r.fix[0] ? "; " : "", r.fix);
			s->said_empty = true;
		}
	}
}

/* One cycle, in the order of the data: the processes of each watch, the
 * usage of their threads, the threads that trip, an episode each, and the
 * events that ended written out. */
static void run_cycle(struct daemon *d)
{
	const struct watch_proc *procs;
	const struct sampler_thread *threads;
	size_t nprocs, nthreads;
	uint64_t now, cpu0 = clock_thread_cpu_ns();
	int rc;

	rc = watch_resolve(d->watch, &procs, &nprocs);
	if (rc < 0) {
		log_errno(LOG_ERR, -rc, "cannot list processes");
		return;
	}
	say_empty_watches(d, procs, nprocs);
	kinds_before_sample(d->kinds, d->cfg, d->sampler);
	sampler_set_exact_still(d->sampler, d->cfg->stall_after_ms > 0);
	if (sampler_cycle(d->sampler, procs, nprocs, &threads, &nthreads) < 0)
		log_msg(LOG_ERR, "out of memory while sampling; this cycle is incomplete");
	now = clock_mono_ms();
	metrics_cycle_start(d->metrics);
	for (size_t i = 0; i < nprocs; i++)
		metrics_process(d->metrics, procs[i].watch);
	for (size_t i = 0; i < nthreads; i++) {
		const struct sampler_thread *t = &threads[i];
		const struct watch_config *wc = &d->cfg->watches[procs[t->proc].watch];
		struct trigger_rule rule = { wc->threshold, wc->consecutive, wc->cooldown_ms };

		metrics_thread(d->metrics, procs[t->proc].watch, t->usage);
		if (t->usage >= 0 && trigger_observe(d->trigger, t->key, t->usage, &rule, now)) {
			struct capture_trip trip = { KIND_HOT, t->usage, wc->threshold, t->run_delay,
			                             NULL };

			capture_start(d->capture, &procs[t->proc], t, wc, &trip, now);
		}
	}
	trigger_sweep(d->trigger);
	kinds_cycle(d->kinds, d->cfg, procs, threads, nthreads, d->capture, now);
	stall_cycle(d->stall, d->cfg, procs, threads, nthreads, d->capture, now);
	capture_poll(d->capture);    /* detach threads that stopped late */
	record_history(d->record, procs, threads, nthreads, d->capture);
	record_flush(d->record);
	record_prune(d->record, now);
	d->cycles++;
	d->nprocs = nprocs;
	d->nthreads = nthreads;
	metrics_cycle_cost(d->metrics, clock_thread_cpu_ns() - cpu0);
	record_write_metrics(d->record);
}

/* "watching 3 processes, 120 threads; 2 events" ("1 process" ...) for
 * STATUS=. */
static const char *status_text(const struct daemon *d, char *buf, size_t len)
{
	uint64_t events = record_events(d->record);

	snprintf(buf, len, "watching %zu %s, %zu %s; %" PRIu64 " %s", d->nprocs,
	         log_plural(d->nprocs, "process", "processes"), d->nthreads,
	         log_plural(d->nthreads, "thread", "threads"), events,
	         log_plural(events, "event", "events"));
	return buf;
}

static struct config *config_new(const char *path)
{
	struct config *cfg = calloc(1, sizeof *cfg);

	if (cfg && config_load(path, cfg, stderr) < 0) {
		free(cfg);
		return NULL;
	}
	return cfg;
}

static void config_delete(struct config *cfg)
{
	if (cfg)
		config_free(cfg);
	free(cfg);
}

/* A configuration as config_print writes it, one setting per line: the
 * reload compares two of them, so it reports every key config_print knows,
 * each in its effective value, in the file's own notation. */
struct setting {
	const char *section;     /* "cpumond", "report", "watch NAME" */
	const char *key, *value;
};

struct settings {
	char *text;              /* config_print's, cut into the strings below */
	struct setting *v;
	size_t n;
};

static void settings_free(struct settings *s)
{
	free(s->text);
	free(s->v);
}

static int settings_read(const struct config *cfg, struct settings *s)
{
	const char *section = "";
	size_t len = 0, cap = 0;
	char *line, *save;
	FILE *out;

	*s = (struct settings){ 0 };
	out = open_memstream(&s->text, &len);
	if (!out)
		return -ENOMEM;
	config_print(cfg, out);
	if (fclose(out) != 0)
		return -ENOMEM;
	for (line = strtok_r(s->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *end;

		if (line[0] == '[') {
			line[strlen(line) - 1] = '\0';   /* "[watch web]" */
			section = line + 1;
			continue;
		}
		if (!eq)
			continue;
		if (s->n == cap) {
			struct setting *v = reallocarray(s->v, cap ? 2 * cap : 32, sizeof *v);

			if (!v)
				return -ENOMEM;
			s->v = v;
			cap = cap ? 2 * cap : 32;
		}
		/* "key = value", or "key=value" when the value needs it. */
		for (end = eq; end > line && end[-1] == ' '; end--)
			;
		*end = '\0';
		for (eq++; *eq == ' '; eq++)
			;
		s->v[s->n++] = (struct setting){ section, line, eq };
	}
	return 0;
}

static bool has_section(const struct settings *s, const char *section)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].section, section) == 0)
			return true;
	return false;
}

static const char *setting(const struct settings *s, const char *section, const char *key)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].section, section) == 0 && strcmp(s->v[i].key, key) == 0)
			return s->v[i].value;
	return NULL;
}

static bool same(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* A change is told once it fits in a log line; the rest are counted. */
#define CHANGES_TEXT_MAX 640

struct changes {
	FILE *out;
	size_t len, told, untold;
};

__attribute__((format(printf, 2, 3)))
static void change(struct changes *c, const char *fmt, ...)
{
	va_list ap;

	fflush(c->out);
	if (c->len > CHANGES_TEXT_MAX) {
		c->untold++;
		return;
	}
	fputs(c->told++ ? ", " : "", c->out);
	va_start(ap, fmt);
	vfprintf(c->out, fmt, ap);
	va_end(ap);
}

/* Watch "NAME" of section "watch NAME", for the message. */
static const char *watch_of(const char *section)
{
	return strncmp(section, "watch ", 6) == 0 ? section + 6 : NULL;
}

/* The settings of watches both files have, and of [cpumond] and [report]
 * (absent: every key unset).  A watch's threshold, consecutive or cooldown
 * that only followed the same key of [cpumond] is not told twice. */
static void changed_keys(struct changes *c, const struct settings *from,
                         const struct settings *to, const struct setting *st, bool in_to)
{
	const struct settings *other = in_to ? from : to;
	const char *name = watch_of(st->section);
	const char *was = in_to ? setting(from, st->section, st->key) : st->value;
	const char *now = in_to ? st->value : NULL;

	if (!in_to && setting(to, st->section, st->key))
		return;                  /* told from TO's side */
	if (name && !has_section(other, st->section))
		return;                  /* an added or removed watch */
	if (same(was, now))
		return;
	if (name && same(was, setting(from, "cpumond", st->key)) &&
	    same(now, setting(to, "cpumond", st->key)))
		return;
	if (name)
		change(c, "watch \"%s\" %s %s -> %s", name, st->key, was ? was : "unset",
		       now ? now : "unset");
	else
		change(c, "%s%s %s -> %s", strcmp(st->section, "cpumond") ? "[report] " : "", st->key,
		       was ? was : "unset", now ? now : "unset");
}

/* The index of watch NAME in CFG, or nwatches. */
static size_t find_watch(const struct config *cfg, const char *name)
{
	size_t i = 0;

	while (i < cfg->nwatches && strcmp(cfg->watches[i].name, name) != 0)
		i++;
	return i;
}

/* Whether the watches both files have come in another order (the first
 * watch that matches a process takes it). */
static bool reordered(const struct config *from, const struct config *to)
{
	size_t prev = 0;

	for (size_t i = 0; i < to->nwatches; i++) {
		size_t k = find_watch(from, to->watches[i].name);

		if (k == from->nwatches)
			continue;
		if (k < prev)
			return true;
		prev = k;
	}
	return false;
}

/* "watch "web" added, watch "db" removed, threshold 800 -> 900", "no
 * change", or NULL when out of memory.  Freed by the caller. */
static char *describe_changes(const struct config *from, const struct config *to)
{
	struct settings a = { 0 }, b = { 0 };
	struct changes c = { 0 };
	char *text = NULL;

	if (settings_read(from, &a) < 0 || settings_read(to, &b) < 0 ||
	    !(c.out = open_memstream(&text, &c.len))) {
		settings_free(&a);
		settings_free(&b);
		return NULL;
	}
	for (size_t i = 0; i < to->nwatches; i++)
		if (find_watch(from, to->watches[i].name) == from->nwatches)
			change(&c, "watch \"%s\" added", to->watches[i].name);
	for (size_t i = 0; i < from->nwatches; i++)
		if (find_watch(to, from->watches[i].name) == to->nwatches)
			change(&c, "watch \"%s\" removed", from->watches[i].name);
	for (size_t i = 0; i < b.n; i++)
		changed_keys(&c, &a, &b, &b.v[i], true);
	for (size_t i = 0; i < a.n; i++)
		changed_keys(&c, &a, &b, &a.v[i], false);
	if (reordered(from, to))
		change(&c, "watches in another order");
	if (c.untold)
		fprintf(c.out, " and %zu more", c.untold);
	else if (!c.told)
		fputs("no change", c.out);
	if (fclose(c.out) != 0) {
		free(text);
		text = NULL;
	}
	settings_free(&a);
	settings_free(&b);
	return text;
}


static void reload(struct daemon *d)
{
	struct watch_seen *seen;
	struct config *cfg;
	struct watch *w;
	char *changes;
	int rc;

	cfg = config_new(d->cfg->path);
	if (!cfg) {
		log_msg(LOG_ERR, "%s has errors; keeping the running configuration", d->cfg->path);
		return;
	}
	rc = watch_new(cfg, &w);
	if (rc < 0) {
		log_errno(LOG_ERR, -rc, "cannot use the new configuration; keeping the running one");
		config_delete(cfg);
		return;
	}
	seen = calloc(cfg->nwatches, sizeof *seen);
	changes = describe_changes(d->cfg, cfg);
	if (!seen || !changes || metrics_reconfigure(d->metrics, cfg) < 0) {
		log_msg(LOG_ERR, "out of memory; keeping the running configuration");
		free(seen);
		free(changes);
		watch_free(w);
		config_delete(cfg);
		return;
	}
	log_msg(LOG_INFO, "reloaded %s: %s", cfg->path, changes);
	/* The store stays open on the file it was opened on. */
	if (!d->db_override && strcmp(cfg->database, d->cfg->database) != 0 &&
	    strcmp(cfg->database, d->db_path) != 0)
		log_msg(LOG_WARNING, "database changed from %s to %s: a restart is needed; still "
		        "writing %s", d->cfg->database, cfg->database, d->db_path);
	free(changes);
	watch_free(d->watch);
	d->watch = w;
	free(d->seen);
	d->seen = seen;          /* empty watches are said again */
	capture_configure(d->capture, cfg);
	record_configure(d->record, cfg);
	config_delete(d->cfg);
	d->cfg = cfg;
}

/* Waits until DEADLINE_MS (monotonic) or a signal.  The signals are blocked
 * and taken here synchronously, so none can slip in between a check and the
 * wait.  Returns the signal, or 0 at the deadline. */
static int wait_until(const sigset_t *set, uint64_t deadline_ms)
{
	uint64_t now = clock_mono_ms();
	struct timespec ts;
	int sig;

	/* Already late (dumps slower than sample_interval keep an episode always
	 * due): still take a pending signal, with a zero timeout, or SIGTERM
	 * would wait for a loop that never idles. */
	if (deadline_ms < now)
		deadline_ms = now;
	ts.tv_sec = (time_t)((deadline_ms - now) / 1000);
	ts.tv_nsec = (long)((deadline_ms - now) % 1000) * 1000000;
	sig = sigtimedwait(set, NULL, &ts);
	return sig < 0 ? 0 : sig;
}


/* Hands a finished episode from capture to record. */
static void on_captured(struct capture_event *ev, void *arg)
{
	struct daemon *d = arg;

	record_event(d->record, ev);
}

/* Opens the database and starts every module.  Returns 0 or the exit
 * status, said. */
static int daemon_start(struct daemon *d)
{
	struct store *st;
	char err[512];
	int rc;

	d->db_path = strdup(d->db_override ? d->db_override : d->cfg->database);
	if (!d->db_path) {
		log_msg(LOG_ERR, "cannot start: out of memory");
		return EXIT_PROC;
	}
	rc = store_open(d->db_path, true, &st, err, sizeof err);
	if (rc < 0) {
		log_msg(LOG_ERR, "%s", err);
		return EXIT_DATABASE;
	}
	d->metrics = metrics_new(d->cfg);
	d->record = record_new(st, d->cfg, d->metrics);
	d->sampler = sampler_new();
	d->trigger = trigger_new();
	d->kinds = kinds_new();
	d->stall = stall_new();
	d->capture = capture_new(d->cfg, d->metrics, on_captured, d);
	d->seen = calloc(d->cfg->nwatches, sizeof *d->seen);
	rc = watch_new(d->cfg, &d->watch);
	if (!d->sampler || !d->trigger || !d->kinds || !d->stall || !d->capture || !d->metrics || !d->record ||
	    !d->seen || rc < 0) {
		log_msg(LOG_ERR, "cannot start: out of memory or /proc unreadable");
		return EXIT_PROC;
	}
	doctor_preflight(d->cfg, d->watch);   /* logs what stops ptrace; never fatal */
	return 0;
}

/* The line at the end, once the episodes the stop cut short (CUT of them)
 * are events too.  STOP_SIG is the signal that stopped it, or 0. */
static void say_stopping(const struct daemon *d, int stop_sig, size_t cut)
{
	char why[64], cutmsg[64] = "";
	uint64_t events = record_events(d->record);

	if (stop_sig)
		snprintf(why, sizeof why, "on SIG%s", sigabbrev_np(stop_sig));
	else
		snprintf(why, sizeof why, "after %" PRIu64 " %s and", d->cycles,
		         log_plural(d->cycles, "cycle", "cycles"));
	if (cut)
		snprintf(cutmsg, sizeof cutmsg, " (%zu %s cut short by the stop)", cut,
		         log_plural(cut, "episode", "episodes"));
	log_msg(LOG_INFO, "stopping %s%s %" PRIu64 " %s%s", why, stop_sig ? " after" : "",
	        events, log_plural(events, "event", "events"), cutmsg);
}

static int daemon_run(struct daemon *d)
{
	uint64_t watchdog_ms = service_watchdog_period_ms(), next_watchdog;
	char status[128];
	int rc, stop_sig = 0;
	sigset_t set;
	uint64_t next;
	size_t cut;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = daemon_start(d);
	if (rc)
		return rc;

	/* One timer for the cycle, one per running episode: whichever is due
	 * first wakes the loop, so episodes never delay the cycle's cadence
	 * by more than one dump. */
	next = next_watchdog = clock_mono_ms();
	for (;;) {
		uint64_t wake;
		int sig;

		if (clock_mono_ms() >= next) {
			run_cycle(d);
			if (d->cycles == 1) {
				log_msg(LOG_INFO, "cpumond %s started: %zu %s, %zu %s, %zu %s, interval %"
				        PRIu64 " ms, database %s", CPUMOND_VERSION, d->cfg->nwatches,
				        log_plural(d->cfg->nwatches, "watch", "watches"), d->nprocs,
				        log_plural(d->nprocs, "process", "processes"), d->nthreads,
				        log_plural(d->nthreads, "thread", "threads"), d->cfg->interval_ms,
				        d->db_path);
				service_ready(status_text(d, status, sizeof status));
			} else
				service_status(status_text(d, status, sizeof status));
			if (d->max_cycles && d->cycles >= (uint64_t)d->max_cycles)
				break;
			/* Keep the cadence; after an overrun start again from now. */
			next += d->cfg->interval_ms;
			if (next <= clock_mono_ms())
				next = clock_mono_ms() + d->cfg->interval_ms;
		}
		capture_sample(d->capture, clock_mono_ms());
		record_flush(d->record);
		if (watchdog_ms && clock_mono_ms() >= next_watchdog) {
			service_watchdog();
			next_watchdog = clock_mono_ms() + watchdog_ms;
		}
		wake = capture_next_ms(d->capture);
		if (next < wake)
			wake = next;
		if (watchdog_ms && next_watchdog < wake)
			wake = next_watchdog;
		sig = wait_until(&set, wake);
		if (sig == SIGHUP) {
			service_reloading();
			reload(d);
			record_reopen(d->record);
			service_ready(status_text(d, status, sizeof status));
		}
		if (sig == SIGTERM || sig == SIGINT) {
			stop_sig = sig;
			service_stopping();
			break;
		}
	}
	cut = capture_finish_all(d->capture);
	record_flush(d->record);
	record_write_metrics(d->record);   /* with the events of the last episodes */
	say_stopping(d, stop_sig, cut);
	return EXIT_OK;
}

static void daemon_free(struct daemon *d)
{
	/* capture_free detaches any thread still pending: it comes first. */
	capture_free(d->capture);
	record_free(d->record);
	watch_free(d->watch);
	sampler_free(d->sampler);
	trigger_free(d->trigger);
	kinds_free(d->kinds);
	stall_free(d->stall);
	metrics_free(d->metrics);
	free(d->db_path);
	free(d->seen);
	config_delete(d->cfg);
}

int daemon_main(const char *config_path, const char *database, long max_cycles)
{
	struct daemon d = { .db_override = database, .max_cycles = max_cycles };
	int rc;

	d.cfg = config_new(config_path);
	rc = d.cfg ? daemon_run(&d) : EXIT_CONFIG;
	daemon_free(&d);
	return rc;
}
