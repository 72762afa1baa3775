/* cpumond: per-thread CPU usage monitor.  The command line: the daemon
 * (cpumond/daemon.c) and the commands that read the log or check the set-up
 * (tail, report, check-config, doctor). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "cpumond/daemon.h"
#include "cpumond/doctor.h"
#include "cpumond/exit_status.h"
#include "cpumond/kind.h"
#include "cpumond/log.h"
#include "cpumond/report.h"
#include "cpumond/tail.h"
#include "cpumond/top.h"
#include "stackdump/symbolize.h"

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: cpumond [-c FILE] [-d DB] [-v] [--cycles N]   run the daemon in the foreground\n"
	        "       cpumond tail [-c FILE | -d DB] [-n N] [-f] [--json] [NAMES]\n"
	        "       cpumond top [-c FILE | -d DB] [-n N] [--watch NAME] [--once]\n"
	        "       cpumond report [-c FILE] [-d DB]... [--since T] [--until T] [--watch NAME]\n"
	        "                      [--process COMM] [--pid PID] [--thread NAME] [--host HOST]\n"
	        "                      [--kind KIND] [--unit GLOB] [--cgroup REGEX] [--top N]\n"
	        "                      [--by exact|signature|top-frame|entry] [--ignore REGEX]\n"
	        "                      [--json | --folded | --svg FILE | --pprof FILE] [NAMES]\n"
	        "       cpumond report --usage [-c FILE] [-d DB]... [--since T] [--until T]\n"
	        "                      [--watch NAME] [--process COMM] [--pid PID] [--thread NAME]\n"
	        "                      [--top N] [--json | --svg FILE]\n"
	        "       cpumond check-config [-c FILE]\n"
	        "       cpumond doctor [-c FILE]       can it read and ptrace what it watches\n"
	        "       cpumond --help | --version\n"
	        "\n"
	        "  -c, --config FILE   configuration (default " CONFIG_DEFAULT_PATH ")\n"
	        "  -d, --database DB   log database (default: the configuration's; tail and report\n"
	        "                      without -c and without that file: " CONFIG_DEFAULT_DATABASE ")\n"
	        "  -v, --verbose       log debug messages too\n"
	        "      --cycles N      stop after N sampling cycles (benchmarks, tests)\n"
	        "  -n, --lines N       tail: print the last N events first (default 10)\n"
	        "  -f, --follow        tail: then print new events as they are logged\n"
	        "      --json          tail: one JSON object per line\n"
	        "  -n, --lines N       top: at most N threads (default: all, or as many as fit)\n"
	        "      --watch NAME    top: start with that watch's threads only (key w: the next)\n"
	        "      --once          top: print the latest cycle once as plain lines, as it does\n"
	        "                      when stdout is no terminal\n"
	        "                      top's keys: u by usage, d by run delay, w next watch, q quit\n"
	        "      --since T       report: from T: 30m, 1h, 2d ago or 2026-11-29T13:04:05Z\n"
	        "      --until T       report: up to T (excluded); default: now\n"
	        "      --watch NAME, --process COMM, --pid PID, --thread NAME, --host HOST\n"
	        "                      report: only these events\n"
	        "      --kind KIND     report: only events of this kind (cpumond(8), EVENT KINDS)\n"
	        "      --unit GLOB     report: only events of processes in a matching systemd unit\n"
	        "      --cgroup REGEX  report: only events of processes in a matching cgroup (v2 path)\n"
	        "  -d DB (repeated)    report: several databases (from many hosts) as one\n"
	        "      --by HOW        report: group stacks by exact hash (default), signature,\n"
	        "                      top-frame (innermost function) or entry (outermost)\n"
	        "      --top N         report: show N groups (default 10, all with --json; 0: all)\n"
	        "      --ignore REGEX  report: system frames besides the C runtime's, instead of\n"
	        "                      [report] ignore\n"
	        "      --json          report: one JSON object per group\n"
	        "      --folded        report: every sample as folded stacks for flame graphs\n"
	        "      --svg FILE      report: an interactive flame graph\n"
	        "      --pprof FILE    report: the samples as a gzipped pprof profile\n"
	        "      --usage         report: the busiest threads of the usage history instead\n"
	        "                      (--top N threads, default 10; --json; --svg FILE a chart)\n"
	        "NAMES, how tail and report name frames at read time (from the modules, their\n"
	        "debug files, and debuginfod servers when DEBUGINFOD_URLS names some):\n"
	        "      --debug-dir DIR look for debug files in DIR too (repeated), before\n"
	        "                      " SYMBOLIZE_DEBUG_DIR "\n"
	        "      --offline       ask no debuginfod server\n"
	        "      --stored-names  no lookups: the names stored when the stacks were taken\n"
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

/* The configuration of a reader (tail, report) given no -d: PATH from -c,
 * or NULL for the default file.  The readers need only the database, so
 * without -c a missing default file is no error: they read the default
 * database, which then must exist (a host where cpumond was never set up is
 * told so, not left waiting for the file).  Returns EXIT_OK with *CFG
 * loaded, or zeroed when there is no file (cfg->database NULL), or the exit
 * status to end with after saying why. */
static int load_reader_config(const char *command, const char *path, struct config *cfg)
{
	if (path || access(CONFIG_DEFAULT_PATH, F_OK) == 0 || errno != ENOENT)
		return load_config(path ? path : CONFIG_DEFAULT_PATH, cfg);
	if (access(CONFIG_DEFAULT_DATABASE, F_OK) < 0 && errno == ENOENT) {
		fprintf(stderr, "cpumond: %s: no configuration %s and no database %s: give the "
		        "database with -d DB or the configuration with -c FILE\n", command,
		        CONFIG_DEFAULT_PATH, CONFIG_DEFAULT_DATABASE);
		return EXIT_DATABASE;
	}
	return EXIT_OK;
}

/* The options of the commands that take only -c FILE (check-config,
 * doctor), and the configuration they load into *CFG.  Returns -1 to go on,
 * or the exit status to end with. */
static int config_command(int argc, char **argv, const char *name, struct config *cfg)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = CONFIG_DEFAULT_PATH;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': path = optarg; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: %s: unexpected argument '%s'\n", name, argv[optind]);
		return EXIT_USAGE;
	}
	rc = load_config(path, cfg);
	return rc == EXIT_OK ? -1 : rc;
}

static int cmd_check_config(int argc, char **argv)
{
	struct config cfg = { 0 };
	int rc = config_command(argc, argv, "check-config", &cfg);

	if (rc >= 0)
		return rc;
	config_print(&cfg, stdout);
	config_free(&cfg);
	return EXIT_OK;
}

/* The options of tail and report that say how frames are named at read
 * time, as getopt_long returns them. */
enum { OPT_DEBUG_DIR = 1000, OPT_OFFLINE, OPT_STORED_NAMES };
#define NAMES_OPTIONS                                               \
	{ "debug-dir", required_argument, NULL, OPT_DEBUG_DIR },    \
	{ "offline", no_argument, NULL, OPT_OFFLINE },              \
	{ "stored-names", no_argument, NULL, OPT_STORED_NAMES }

struct names_args {
	const char *dirs[SYMBOLIZE_MAX_DEBUG_DIRS];
	size_t ndirs;
	bool offline, stored;
};

/* Takes option C of COMMAND when it is one of NAMES_OPTIONS.  Returns 1
 * when it was, 0 when it is another, or -1 after saying why it is wrong. */
static int names_option(struct names_args *a, const char *command, int c, const char *arg)
{
	switch (c) {
	case OPT_DEBUG_DIR:
		if (a->ndirs == SYMBOLIZE_MAX_DEBUG_DIRS) {
			fprintf(stderr, "cpumond: %s: more than %d --debug-dir\n", command,
			        SYMBOLIZE_MAX_DEBUG_DIRS);
			return -1;
		}
		a->dirs[a->ndirs++] = arg;
		return 1;
	case OPT_OFFLINE: a->offline = true; return 1;
	case OPT_STORED_NAMES: a->stored = true; return 1;
	}
	return 0;
}

static void names_note(const char *msg, void *arg)
{
	(void)arg;
	log_msg(LOG_WARNING, "%s", msg);
}

/* The read-time names of A, or NULL with --stored-names (or out of
 * memory: the names as stored).  Servers come from DEBUGINFOD_URLS, their
 * timeout from DEBUGINFOD_TIMEOUT, as for gdb and eu-stack. */
static struct symbolize *open_names(const struct names_args *a)
{
	struct symbolize_options o = {
		.debug_dirs = a->dirs, .ndebug_dirs = a->ndirs, .offline = a->offline,
		.urls = getenv("DEBUGINFOD_URLS"),
		.timeout_s = symbolize_timeout(getenv("DEBUGINFOD_TIMEOUT")),
		.note = names_note,
	};
	struct symbolize *s = NULL;

	if (a->stored || symbolize_open(&o, &s) < 0)
		return NULL;
	return s;
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
		NAMES_OPTIONS,
		{ 0 },
	};
	struct tail_options opt = { .lines = 10 };
	struct names_args names = { 0 };
	const char *config_path = NULL;
	struct config cfg = { 0 };
	struct sigaction sa = { .sa_handler = on_tail_signal };
	long lines;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:d:n:fh", opts, NULL)) != -1) {
		if ((rc = names_option(&names, "tail", c, optarg)) != 0) {
			if (rc < 0)
				return EXIT_USAGE;
			continue;
		}
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
		rc = load_reader_config("tail", config_path, &cfg);
		if (rc != EXIT_OK)
			return rc;
		opt.database = cfg.database ? cfg.database : CONFIG_DEFAULT_DATABASE;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	opt.names = open_names(&names);
	rc = tail_run(&opt, &tail_stop);
	symbolize_close(opt.names);
	config_free(&cfg);
	return rc < 0 ? EXIT_RUNTIME : EXIT_OK;
}

/* `cpumond top`: the latest cycle's threads, live. */
static int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "database", required_argument, NULL, 'd' },
		{ "lines", required_argument, NULL, 'n' },
		{ "watch", required_argument, NULL, 'w' },
		{ "once", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct top_options opt = { 0 };
	const char *config_path = NULL;
	struct config cfg = { 0 };
	long rows;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:d:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'd': opt.database = optarg; break;
		case 'n':
			if (parse_count(optarg, &rows) < 0) {
				fprintf(stderr, "cpumond: top: -n: '%s' is not a count\n", optarg);
				return EXIT_USAGE;
			}
			opt.rows = (int)rows;
			break;
		case 'w': opt.watch = optarg; break;
		case 'o': opt.once = true; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: top: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (config_path && opt.database) {
		fprintf(stderr, "cpumond: top: give -c or -d, not both\n");
		return EXIT_USAGE;
	}
	if (!opt.database) {
		rc = load_reader_config("top", config_path, &cfg);
		if (rc != EXIT_OK)
			return rc;
		opt.database = cfg.database ? cfg.database : CONFIG_DEFAULT_DATABASE;
	}
	rc = top_run(&opt) < 0 ? EXIT_RUNTIME : EXIT_OK;
	config_free(&cfg);
	return rc;
}

/* `cpumond report`.  Every time is read against one clock reading, so that
 * --since 2h --until 1h is exactly one hour. */
static int cmd_report(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "database", required_argument, NULL, 'd' },
		{ "since", required_argument, NULL, 'S' },
		{ "until", required_argument, NULL, 'U' },
		{ "watch", required_argument, NULL, 'w' },
		{ "process", required_argument, NULL, 'p' },
		{ "pid", required_argument, NULL, 'P' },
		{ "thread", required_argument, NULL, 't' },
		{ "host", required_argument, NULL, 'H' },
		{ "kind", required_argument, NULL, 'k' },
		{ "unit", required_argument, NULL, 'u' },
		{ "cgroup", required_argument, NULL, 'C' },
		{ "by", required_argument, NULL, 'b' },
		{ "top", required_argument, NULL, 'n' },
		{ "ignore", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "folded", no_argument, NULL, 'F' },
		{ "svg", required_argument, NULL, 'g' },
		{ "pprof", required_argument, NULL, 'G' },
		{ "usage", no_argument, NULL, 'Y' },
		{ "help", no_argument, NULL, 'h' },
		NAMES_OPTIONS,
		{ 0 },
	};
	/* -d again and again: databases copied from many hosts, one window. */
	enum { MAX_DATABASES = 1024 };
	const char *dbs[MAX_DATABASES];
	struct report_options opt = { .top = -1, .databases = dbs };
	const char *config_path = NULL, *ignore = NULL;
	struct names_args names = { 0 };
	struct config cfg = { 0 };
	regex_t ignore_re, cgroup_re;
	struct timespec now;
	int64_t now_us;
	long n;
	int c, rc;

	clock_gettime(CLOCK_REALTIME, &now);
	now_us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
	while ((c = getopt_long(argc, argv, "c:d:h", opts, NULL)) != -1) {
		if ((rc = names_option(&names, "report", c, optarg)) != 0) {
			if (rc < 0)
				return EXIT_USAGE;
			continue;
		}
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'd':
			if (opt.ndatabases == MAX_DATABASES) {
				fprintf(stderr, "cpumond: report: more than %d databases\n", MAX_DATABASES);
				return EXIT_USAGE;
			}
			opt.database = dbs[opt.ndatabases++] = optarg;
			break;
		case 'S':
		case 'U':
			if (report_parse_time(optarg, now_us, c == 'S' ? &opt.since_us : &opt.until_us) < 0) {
				fprintf(stderr, "cpumond: report: --%s: '%s' is not a time (such as 30m, 1h, "
				        "2d or 2026-11-29T13:04:05Z)\n", c == 'S' ? "since" : "until", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'w': opt.watch = optarg; break;
		case 'p': opt.comm = optarg; break;
		case 't': opt.thread = optarg; break;
		case 'H': opt.host = optarg; break;
		case 'k':
			if (kind_from_name(optarg) < 0) {
				fprintf(stderr, "cpumond: report: --kind: '%s' is not %s\n", optarg,
				        kind_names_text());
				return EXIT_USAGE;
			}
			opt.kind = optarg;
			break;
		case 'u': opt.unit = optarg; break;
		case 'C': opt.cgroup = optarg; break;
		case 'P':
			if (parse_count(optarg, &n) < 0 || n == 0) {
				fprintf(stderr, "cpumond: report: --pid: '%s' is not a pid\n", optarg);
				return EXIT_USAGE;
			}
			opt.pid = (pid_t)n;
			break;
		case 'b':
			if (report_parse_by(optarg, &opt.by) < 0) {
				fprintf(stderr, "cpumond: report: --by: '%s' is not exact, signature, "
				        "top-frame or entry\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'n':
			if (parse_count(optarg, &n) < 0) {
				fprintf(stderr, "cpumond: report: --top: '%s' is not a count\n", optarg);
				return EXIT_USAGE;
			}
			opt.top = (int)n;
			break;
		case 'i': ignore = optarg; break;
		case 'j': opt.json = true; break;
		case 'F': opt.folded = true; break;
		case 'g': opt.svg_path = optarg; break;
		case 'G': opt.pprof_path = optarg; break;
		case 'Y': opt.usage = true; break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpumond: report: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (opt.json + opt.folded + (opt.svg_path != NULL) + (opt.pprof_path != NULL) > 1) {
		fprintf(stderr, "cpumond: report: give one of --json, --folded, --svg and --pprof\n");
		return EXIT_USAGE;
	}
	if (opt.usage && (opt.folded || opt.pprof_path || opt.host || opt.unit || opt.cgroup)) {
		fprintf(stderr, "cpumond: report: --usage takes no --folded, --pprof, --host, --unit"
		        " or --cgroup (the usage history has no stacks and no origin)\n");
		return EXIT_USAGE;
	}
	if (opt.since_us && opt.until_us && opt.since_us >= opt.until_us) {
		fprintf(stderr, "cpumond: report: --since is not before --until\n");
		return EXIT_USAGE;
	}
	if (ignore) {
		char why[512];

		if (config_compile_regex(ignore, &ignore_re, why, sizeof why) < 0) {
			fprintf(stderr, "cpumond: report: --ignore: %s\n", why);
			return EXIT_USAGE;
		}
		opt.ignore = &ignore_re;
	}
	if (opt.cgroup) {
		char why[512];

		if (config_compile_regex(opt.cgroup, &cgroup_re, why, sizeof why) < 0) {
			fprintf(stderr, "cpumond: report: --cgroup: %s\n", why);
			if (ignore)
				regfree(&ignore_re);
			return EXIT_USAGE;
		}
		opt.cgroup_re = &cgroup_re;
	}
	/* -d alone reads no configuration; -c (or neither) gives the database
	 * and [report] ignore, each overridden by -d and --ignore. */
	if (config_path || !opt.database) {
		rc = load_reader_config("report", config_path, &cfg);
		if (rc != EXIT_OK) {
			if (ignore)
				regfree(&ignore_re);
			if (opt.cgroup)
				regfree(&cgroup_re);
			return rc;
		}
		if (!opt.database)    /* ndatabases is 0 */
			opt.database = cfg.database ? cfg.database : CONFIG_DEFAULT_DATABASE;
		if (!ignore && cfg.report_ignore)
			opt.ignore = &cfg.report_ignore_re;
	}
	opt.sample_interval_ms = cfg.sample_interval_ms;   /* 0 without a configuration */
	opt.names = open_names(&names);
	rc = report_run(&opt, stdout) < 0 ? EXIT_RUNTIME : EXIT_OK;
	symbolize_close(opt.names);
	if (ignore)
		regfree(&ignore_re);
	if (opt.cgroup)
		regfree(&cgroup_re);
	config_free(&cfg);
	return rc;
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
	const char *path = CONFIG_DEFAULT_PATH, *database = NULL;
	bool verbose = false;
	long max_cycles = 0;
	int c;

	while ((c = getopt_long(argc, argv, "c:d:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': path = optarg; break;
		case 'd': database = optarg; break;
		case 'v': verbose = true; break;
		case 'C':
			if (parse_count(optarg, &max_cycles) < 0 || max_cycles == 0) {
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
	return daemon_main(path, database, max_cycles);
}

/* Exit status: 0 every check passed (warnings allowed), 1 one failed,
 * 3 the configuration is missing or invalid. */
static int cmd_doctor(int argc, char **argv)
{
	struct config cfg = { 0 };
	int rc = config_command(argc, argv, "doctor", &cfg);

	if (rc >= 0)
		return rc;
	rc = doctor_run(&cfg, stdout);
	if (rc < 0)
		fprintf(stderr, "cpumond: doctor: cannot list processes: %s\n", strerror(-rc));
	config_free(&cfg);
	return rc == 0 ? EXIT_OK : EXIT_RUNTIME;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "tail") == 0)
		return cmd_tail(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "top") == 0)
		return cmd_top(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "check-config") == 0)
		return cmd_check_config(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "doctor") == 0)
		return cmd_doctor(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "report") == 0)
		return cmd_report(argc - 1, argv + 1);
	return cmd_daemon(argc, argv);
}
