/* cpumond: per-thread CPU usage monitor.  Wires the modules together:
 * config -> watch -> sampler -> trigger -> stackdump -> store, and runs the
 * reader commands (tail, check-config). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "cpumond/log.h"
#include "cpumond/sampler.h"
#include "cpumond/store.h"
#include "cpumond/tail.h"
#include "cpumond/trigger.h"
#include "cpumond/watch.h"
#include "stackdump/stackdump.h"

/* Exit statuses, documented in cpumond(8). */
enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1,        /* failed while running (tail: database unreadable) */
	EXIT_USAGE = 2,          /* bad command line */
	EXIT_CONFIG = 3,         /* configuration file missing or invalid */
	EXIT_DATABASE = 4,       /* log database cannot be opened or created */
	EXIT_PROC = 5,           /* /proc cannot be read, or out of memory at start */
};

struct daemon {
	struct config *cfg;      /* heap: the watch resolver points into it */
	const char *db_override; /* -d */
	long max_cycles;         /* --cycles; 0: run until stopped */
	struct watch *watch;
	struct sampler *sampler;
	struct trigger *trigger;
	struct stackdump *dumper;
	struct store *store;
	bool in_transaction;
	char host[256];
	uint64_t events, cycles;
	uint64_t store_error_ms; /* last time a store failure was logged */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int64_t realtime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Reads a short /proc text file into BUF without its trailing newline;
 * BUF is "" when it cannot be read (the thread is gone). */
static void read_proc_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
}

static void read_exe(pid_t pid, char *buf, size_t len)
{
	char path[32];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, len - 1);
	buf[n < 0 ? 0 : n] = '\0';
}

/* Logs a failing store at most once a minute: a full disk must not flood
 * the journal while sampling goes on. */
static void store_failed(struct daemon *d, const char *what)
{
	uint64_t now = mono_ms();

	if (d->store_error_ms && now - d->store_error_ms < 60000)
		return;
	d->store_error_ms = now;
	log_msg(LOG_ERR, "cannot %s: %s", what, store_error(d->store));
}

static void record_event(struct daemon *d, const struct watch_proc *proc,
                         const struct sampler_thread *t, const struct watch_config *wc)
{
	struct store_event ev = {
		.time_us = realtime_us(), .host = d->host, .watch = wc->name,
		.pid = t->pid, .comm = proc->comm, .tid = t->tid, .usage = t->usage,
		.threshold = wc->threshold, .consecutive = wc->consecutive,
		.run_delay = t->run_delay,
	};
	char thread[64], exe[PATH_MAX], path[64];
	int rc;

	/* Dump first: the sooner the thread is caught, the likelier it is still
	 * in the code that made it hot. */
	rc = stackdump_thread(d->dumper, t->pid, t->tid, d->cfg->max_frames, &ev.stack);
	snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)t->pid, (int)t->tid);
	read_proc_line(path, thread, sizeof thread);
	read_exe(t->pid, exe, sizeof exe);
	ev.thread = thread;
	ev.exe = exe;
	ev.error = ev.stack.error;
	d->events++;

	if (rc < 0)
		log_msg(rc == -ESRCH ? LOG_DEBUG : LOG_WARNING, "%s[%d] thread %d at %d‰: no stack: %s",
		        proc->comm, (int)t->pid, (int)t->tid, t->usage, ev.stack.error);
	log_msg(LOG_NOTICE, "[watch %s] %s[%d] thread %d at %d‰ > %d‰: %zu frames, stack %016" PRIx64
	        ", stopped %" PRIu64 " µs", wc->name, proc->comm, (int)t->pid, (int)t->tid, t->usage,
	        wc->threshold, ev.stack.nframes, ev.stack.hash, ev.stack.stop_ns / 1000);

	if (!d->in_transaction) {
		if (store_begin(d->store) < 0)
			store_failed(d, "begin a transaction");
		else
			d->in_transaction = true;
	}
	if (d->in_transaction && store_add_event(d->store, &ev) < 0)
		store_failed(d, "store an event");
	stackdump_stack_free(&ev.stack);
}

static void run_cycle(struct daemon *d)
{
	const struct watch_proc *procs;
	const struct sampler_thread *threads;
	size_t nprocs, nthreads;
	uint64_t now;
	int rc;

	rc = watch_resolve(d->watch, &procs, &nprocs);
	if (rc < 0) {
		log_errno(LOG_ERR, -rc, "cannot list processes");
		return;
	}
	if (sampler_cycle(d->sampler, procs, nprocs, &threads, &nthreads) < 0)
		log_msg(LOG_ERR, "out of memory while sampling; this cycle is incomplete");
	now = mono_ms();
	for (size_t i = 0; i < nthreads; i++) {
		const struct sampler_thread *t = &threads[i];
		const struct watch_config *wc = &d->cfg->watches[procs[t->proc].watch];
		struct trigger_rule rule = { wc->threshold, wc->consecutive, wc->cooldown_ms };

		if (t->usage >= 0 && trigger_observe(d->trigger, t->key, t->usage, &rule, now))
			record_event(d, &procs[t->proc], t, wc);
	}
	trigger_sweep(d->trigger);
	stackdump_poll(d->dumper);   /* detach threads that stopped late */
	if (d->in_transaction) {
		if (store_commit(d->store) < 0)
			store_failed(d, "commit this cycle's events");
		d->in_transaction = false;
	}
	d->cycles++;
}

static const char *database_path(const struct daemon *d)
{
	return d->db_override ? d->db_override : d->cfg->database;
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

static void reload(struct daemon *d)
{
	struct config *cfg;
	struct watch *w;
	int rc;

	log_msg(LOG_INFO, "reloading %s", d->cfg->path);
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
	if (!d->db_override && strcmp(cfg->database, d->cfg->database) != 0)
		log_msg(LOG_WARNING, "database changed to %s: takes effect at the next start; "
		        "still writing %s", cfg->database, d->cfg->database);
	watch_free(d->watch);
	d->watch = w;
	config_delete(d->cfg);
	d->cfg = cfg;
	log_msg(LOG_INFO, "configuration reloaded: %zu watches", cfg->nwatches);
}

/* Waits until DEADLINE_MS (monotonic) or a signal.  The signals are blocked
 * and taken here synchronously, so none can slip in between a check and the
 * wait.  Returns the signal, or 0 at the deadline. */
static int wait_until(const sigset_t *set, uint64_t deadline_ms)
{
	uint64_t now = mono_ms();
	struct timespec ts;
	int sig;

	if (deadline_ms <= now)
		return 0;
	ts.tv_sec = (time_t)((deadline_ms - now) / 1000);
	ts.tv_nsec = (long)((deadline_ms - now) % 1000) * 1000000;
	sig = sigtimedwait(set, NULL, &ts);
	return sig < 0 ? 0 : sig;
}

static int daemon_run(struct daemon *d)
{
	sigset_t set;
	uint64_t next;
	char err[512];
	int rc;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (gethostname(d->host, sizeof d->host - 1) < 0)
		snprintf(d->host, sizeof d->host, "unknown");
	rc = store_open(database_path(d), true, &d->store, err, sizeof err);
	if (rc < 0) {
		log_msg(LOG_ERR, "%s", err);
		return EXIT_DATABASE;
	}
	d->sampler = sampler_new();
	d->trigger = trigger_new();
	d->dumper = stackdump_new();
	rc = watch_new(d->cfg, &d->watch);
	if (!d->sampler || !d->trigger || !d->dumper || rc < 0) {
		log_msg(LOG_ERR, "cannot start: out of memory or /proc unreadable");
		return EXIT_PROC;
	}
	log_msg(LOG_INFO, "cpumond %s started: %zu watches, interval %" PRIu64 " ms, database %s",
	        CPUMOND_VERSION, d->cfg->nwatches, d->cfg->interval_ms, database_path(d));

	next = mono_ms();
	for (;;) {
		int sig;

		run_cycle(d);
		if (d->max_cycles && d->cycles >= (uint64_t)d->max_cycles)
			break;
		/* Keep the cadence; after an overrun start again from now. */
		next += d->cfg->interval_ms;
		if (next < mono_ms())
			next = mono_ms() + d->cfg->interval_ms;
		while ((sig = wait_until(&set, next)) == SIGHUP)
			reload(d);
		if (sig == SIGTERM || sig == SIGINT) {
			log_msg(LOG_INFO, "stopping on signal %d after %" PRIu64 " events", sig, d->events);
			break;
		}
	}
	return EXIT_OK;
}

static void daemon_free(struct daemon *d)
{
	/* stackdump_free detaches any thread still pending: it comes first. */
	stackdump_free(d->dumper);
	watch_free(d->watch);
	sampler_free(d->sampler);
	trigger_free(d->trigger);
	store_close(d->store);
	config_delete(d->cfg);
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: cpumond [-c FILE] [-d DB] [-v] [--cycles N]   run the daemon in the foreground\n"
	        "       cpumond tail [-c FILE | -d DB] [-n N] [-f] [--json]\n"
	        "       cpumond check-config [-c FILE]\n"
	        "       cpumond --help | --version\n"
	        "\n"
	        "  -c, --config FILE   configuration (default " CONFIG_DEFAULT_PATH ")\n"
	        "  -d, --database DB   log database (default: the configuration's)\n"
	        "  -v, --verbose       log debug messages too\n"
	        "      --cycles N      stop after N sampling cycles (benchmarks, tests)\n"
	        "  -n, --lines N       tail: print the last N events first (default 10)\n"
	        "  -f, --follow        tail: then print new events as they are logged\n"
	        "      --json          tail: one JSON object per line\n"
	        "\nSee cpumond(8) and cpumond.conf(5).\n");
}

static int parse_count(const char *text, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < 0 || v > INT_MAX)
		return -EINVAL;
	*out = v;
	return 0;
}

static int load_config(const char *path, struct config *cfg)
{
	return config_load(path, cfg, stderr) < 0 ? EXIT_CONFIG : EXIT_OK;
}

static int cmd_check_config(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = CONFIG_DEFAULT_PATH;
	struct config cfg = { 0 };
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': path = optarg; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: check-config: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	rc = load_config(path, &cfg);
	if (rc == EXIT_OK)
		config_print(&cfg, stdout);
	config_free(&cfg);
	return rc;
}

static volatile sig_atomic_t tail_stop;

static void on_tail_signal(int sig)
{
	(void)sig;
	tail_stop = 1;
}

static int cmd_tail(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "database", required_argument, NULL, 'd' },
		{ "lines", required_argument, NULL, 'n' },
		{ "follow", no_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct tail_options opt = { .lines = 10 };
	const char *config_path = NULL;
	struct config cfg = { 0 };
	struct sigaction sa = { .sa_handler = on_tail_signal };
	long lines;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:d:n:fh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'd': opt.database = optarg; break;
		case 'n':
			if (parse_count(optarg, &lines) < 0) {
				fprintf(stderr, "cpumond: tail: -n: '%s' is not a count\n", optarg);
				return EXIT_USAGE;
			}
			opt.lines = (int)lines;
			break;
		case 'f': opt.follow = true; break;
		case 'j': opt.json = true; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: tail: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (config_path && opt.database) {
		fprintf(stderr, "cpumond: tail: give -c or -d, not both\n");
		return EXIT_USAGE;
	}
	if (!opt.database) {
		rc = load_config(config_path ? config_path : CONFIG_DEFAULT_PATH, &cfg);
		if (rc != EXIT_OK)
			return rc;
		opt.database = cfg.database;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = tail_run(&opt, &tail_stop);
	config_free(&cfg);
	return rc < 0 ? EXIT_RUNTIME : EXIT_OK;
}

static int cmd_daemon(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "database", required_argument, NULL, 'd' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "cycles", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct daemon d = { 0 };
	const char *path = CONFIG_DEFAULT_PATH;
	bool verbose = false;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:d:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': path = optarg; break;
		case 'd': d.db_override = optarg; break;
		case 'v': verbose = true; break;
		case 'C':
			if (parse_count(optarg, &d.max_cycles) < 0 || d.max_cycles == 0) {
				fprintf(stderr, "cpumond: --cycles: '%s' is not a positive count\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); return EXIT_OK;
		case 'V': printf("cpumond %s\n", CPUMOND_VERSION); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: unknown command '%s' (try --help)\n", argv[optind]);
		return EXIT_USAGE;
	}
	log_init(verbose);
	d.cfg = config_new(path);
	rc = d.cfg ? daemon_run(&d) : EXIT_CONFIG;
	daemon_free(&d);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "tail") == 0)
		return cmd_tail(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "check-config") == 0)
		return cmd_check_config(argc - 1, argv + 1);
	return cmd_daemon(argc, argv);
}
