/* config: good files, every error with its file:line, durations, print and
 * parse again (the files on disk: test_config_files.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config/config.h"

#include "tests/unit/config_fixture.h"

static void test_defaults(void **state)
{
	struct config cfg;

	(void)state;
	parse_good("[watch all]\nall = yes\n", &cfg);
	assert_string_equal(cfg.path, "t.conf");
	assert_daemon_defaults(&cfg);
	assert_int_equal(cfg.capture, CONFIG_CAPTURE_AUTO);
	assert_null(cfg.report_ignore);
	assert_int_equal(cfg.nwatches, 1);
	assert_string_equal(cfg.watches[0].name, "all");
	assert_int_equal(cfg.watches[0].line, 1);
	assert_true(cfg.watches[0].all);
	assert_int_equal(cfg.watches[0].pid, 0);
	assert_null(cfg.watches[0].pidfile);
	assert_null(cfg.watches[0].comm);
	assert_null(cfg.watches[0].exe);
	assert_null(cfg.watches[0].cmdline);
	assert_null(cfg.watches[0].user);
	assert_int_equal(cfg.watches[0].threshold, 800);
	assert_int_equal(cfg.watches[0].consecutive, 1);
	assert_int_equal(cfg.watches[0].cooldown_ms, 60000);
	assert_true(cfg.starved);
	assert_int_equal(cfg.process_threshold, 0);
	assert_int_equal(cfg.watches[0].process_threshold, 0);
	assert_int_equal(cfg.stall_after_ms, 0);       /* off */
	config_free(&cfg);
	assert_zeroed(&cfg);
}

/* A watch takes the [cpumond] values even when [cpumond] comes after it,
 * and its own values win. */
static void test_overrides(void **state)
{
	struct config cfg;

	(void)state;
	parse_good("[watch web]\n"
	           "comm = nginx\n"
	           "threshold = 900\n"
	           "\n"
	           "[watch db]\n"
	           "comm = postgres\n"
	           "consecutive = 5\n"
	           "cooldown = 0\n"
	           "\n"
	           "[cpumond]\n"
	           "interval = 250ms\n"
	           "threshold = 500\n"
	           "consecutive = 2\n"
	           "cooldown = 10min\n"
	           "database = cpumond.db\n"
	           "max_frames = 1024\n", &cfg);
	assert_int_equal(cfg.interval_ms, 250);
	assert_int_equal(cfg.threshold, 500);
	assert_int_equal(cfg.consecutive, 2);
	assert_int_equal(cfg.cooldown_ms, 600000);
	assert_string_equal(cfg.database, "cpumond.db");
	assert_int_equal(cfg.max_frames, 1024);
	assert_int_equal(cfg.nwatches, 2);
	assert_int_equal(cfg.watches[0].line, 1);
	assert_int_equal(cfg.watches[0].threshold, 900);
	assert_int_equal(cfg.watches[0].consecutive, 2);
	assert_int_equal(cfg.watches[0].cooldown_ms, 600000);
	assert_string_equal(cfg.watches[1].name, "db");
	assert_int_equal(cfg.watches[1].line, 5);
	assert_int_equal(cfg.watches[1].threshold, 500);
	assert_int_equal(cfg.watches[1].consecutive, 5);
	assert_int_equal(cfg.watches[1].cooldown_ms, 0);
	config_free(&cfg);

	/* process_threshold the same way; 0 (off) in a watch is its own value. */
	parse_good("[watch web]\ncomm = nginx\nprocess_threshold = 0\n"
	           "[watch db]\ncomm = postgres\n"
	           "[watch batch]\nall = yes\nprocess_threshold = 2500\n"
	           "[cpumond]\nprocess_threshold = 1500\nstarved = no\n", &cfg);
	assert_int_equal(cfg.process_threshold, 1500);
	assert_false(cfg.starved);
	assert_int_equal(cfg.watches[0].process_threshold, 0);
	assert_int_equal(cfg.watches[1].process_threshold, 1500);
	assert_int_equal(cfg.watches[2].process_threshold, 2500);
	config_free(&cfg);
}

static void test_every_selector(void **state)
{
	struct config cfg;
	const struct watch_config *w;

	(void)state;
	parse_good("[watch every one]\n"
	           "pid = 4242\n"
	           "pidfile = /run/nginx.pid\n"
	           "comm = 123456789012345\n"
	           "exe = /usr/sbin/nginx\n"
	           "cmdline = ^nginx: worker (process|thread)$\n"
	           "user = root\n"
	           "unit = nginx@*.service\n"
	           "cgroup = ^/system\\.slice/nginx@[0-9]+\\.service$\n"
	           "all = yes\n"
	           "[watch by uid]\n"
	           "user = 4294967294\n"
	           "[watch by pid]\n"
	           "pid = 4194304\n", &cfg);
	assert_int_equal(cfg.nwatches, 3);
	w = &cfg.watches[0];
	assert_string_equal(w->name, "every one");
	assert_int_equal(w->pid, 4242);
	assert_string_equal(w->pidfile, "/run/nginx.pid");
	assert_string_equal(w->comm, "123456789012345");
	assert_string_equal(w->exe, "/usr/sbin/nginx");
	assert_string_equal(w->cmdline, "^nginx: worker (process|thread)$");
	assert_int_equal(regexec(&w->cmdline_re, "nginx: worker process", 0, NULL, 0), 0);
	assert_int_equal(regexec(&w->cmdline_re, "nginx: master process", 0, NULL, 0), REG_NOMATCH);
	assert_string_equal(w->user, "root");
	assert_int_equal(w->uid, 0);
	assert_string_equal(w->unit, "nginx@*.service");
	assert_string_equal(w->cgroup, "^/system\\.slice/nginx@[0-9]+\\.service$");
	assert_int_equal(regexec(&w->cgroup_re, "/system.slice/nginx@80.service", 0, NULL, 0), 0);
	assert_int_equal(regexec(&w->cgroup_re, "/system.slice/nginx@80.service/x", 0, NULL, 0),
	                 REG_NOMATCH);
	assert_true(w->all);
	assert_null(cfg.watches[1].unit);
	assert_null(cfg.watches[1].cgroup);
	assert_string_equal(cfg.watches[1].user, "4294967294");
	assert_int_equal(cfg.watches[1].uid, 4294967294u);
	assert_false(cfg.watches[1].all);
	assert_int_equal(cfg.watches[2].pid, 4194304);
	config_free(&cfg);
}

static void test_booleans(void **state)
{
	static const struct {
		const char *text;
		bool all;
	} cases[] = {
		{ "yes", true }, { "true", true }, { "on", true }, { "1", true }, { "YES", true },
		{ "no", false }, { "false", false }, { "off", false }, { "0", false }, { "Off", false },
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char text[128];
		struct config cfg;

		/* comm keeps a watch whose all is false valid. */
		snprintf(text, sizeof text, "[watch w]\ncomm = x\nall = %s\n", cases[i].text);
		parse_good(text, &cfg);
		assert_int_equal(cfg.watches[0].all, cases[i].all);
		config_free(&cfg);
	}
}

/* What inih and the line reader make of comments, indentation, CRLF, a
 * byte order mark, ':' and a comment line longer than inih's buffer. */
static void test_layout(void **state)
{
	char text[1024];
	struct config cfg;

	(void)state;
	snprintf(text, sizeof text,
	         "\xef\xbb\xbf; comment\r\n"
	         "# comment\n"
	         ";%0300d\n"
	         "  [ watch   spaced name ]   ; a comment after the header\n"
	         "\tcomm = nginx    ; inline comment\n"
	         "    threshold = 900\n"
	         "cmdline = a;b\n"
	         "exe: /usr/sbin/nginx\r\n"
	         "[cpumond]\r\n"
	         "interval=5s;not a comment without a space before\n"
	         "interval_is_next_line = no\n", 0);
	/* The last two lines make one error: the ';' needs a space before it. */
	{
		char *errs;

		assert_int_equal(parse(text, &cfg, &errs), -EINVAL);
		assert_string_equal(errs,
		        "t.conf:10: interval: \"5s;not a comment without a space before\" is not a duration "
		        "(such as 250ms, 3s, 2min, 1h, 1d, 2w)\n"
		        "t.conf:11: interval_is_next_line: unknown key (expected interval, threshold, "
		        "consecutive, cooldown, database, max_frames, sample_interval, "
		        "episode_samples, max_dumps_per_second, capture, retention, "
		        "max_database_size, journal, metrics_file, event_log, history_threads, "
		        "history_floor, starved, process_threshold or stall_after)\n");
		free(errs);
	}
	*strstr(text, "interval=5s") = '\0';
	parse_good(text, &cfg);
	assert_int_equal(cfg.nwatches, 1);
	assert_string_equal(cfg.watches[0].name, "spaced name");
	assert_int_equal(cfg.watches[0].line, 4);
	assert_string_equal(cfg.watches[0].comm, "nginx");
	/* Indented, yet its own key and not a continuation of comm. */
	assert_int_equal(cfg.watches[0].threshold, 900);
	assert_string_equal(cfg.watches[0].cmdline, "a;b");
	assert_string_equal(cfg.watches[0].exe, "/usr/sbin/nginx");
	config_free(&cfg);
}

static void test_errors(void **state)
{
#define WATCH "[watch w]\nall = yes\n"
	static const struct {
		const char *text;
		const char *errors;
	} cases[] = {
		{ "[cpumon]\ninterval = 3s\n" WATCH,
		  "t.conf:1: [cpumon]: unknown section (expected [cpumond], [report] or [watch NAME])\n" },
		{ "[watchweb]\ncomm = x\n" WATCH,
		  "t.conf:1: [watchweb]: unknown section (expected [cpumond], [report] or [watch NAME])\n" },
		{ "[cpumond]\nintervall = 3s\n" WATCH,
		  "t.conf:2: intervall: unknown key (expected interval, threshold, consecutive, "
		  "cooldown, database, max_frames, sample_interval, episode_samples, "
		  "max_dumps_per_second, capture, retention, max_database_size, journal, "
		  "metrics_file, event_log, history_threads, history_floor, starved, "
		  "process_threshold or stall_after)\n" },
		{ "[cpumond]\ninterval = 300ms\nstall_after = 500ms\n" WATCH,
		  "t.conf:3: stall_after: 500ms is less than two intervals (2 x 300ms)\n" },
		{ "[cpumond]\n[watch w]\nall = yes\nstall_after = 10s\n",
		  "t.conf:4: stall_after: not a watch key (set it in [cpumond])\n" },
		{ "[cpumond]\nprocess_threshold = 1000001\n" WATCH,
		  "t.conf:2: process_threshold: 1000001 is out of range 0..1000000\n" },
		{ "[cpumond]\n[watch w]\nall = yes\nprocess_threshold = -1\n",
		  "t.conf:4: process_threshold: -1 is out of range 0..1000000\n" },
		{ "[cpumond]\nprocess_threshold = 30%\n" WATCH,
		  "t.conf:2: process_threshold: \"30%\" is not a number\n" },
		{ "[cpumond]\nstarved = sometimes\n" WATCH,
		  "t.conf:2: starved: \"sometimes\" is not a boolean (yes/no, true/false, on/off, "
		  "1/0)\n" },
		{ "[cpumond]\n[watch w]\nall = yes\nstarved = no\n",
		  "t.conf:4: starved: not a watch key (set it in [cpumond])\n" },
		{ "[cpumond]\n[watch x]\ncmdline = ((a{99}){99}){99}\n",
		  "t.conf:3: cmdline: regex \"((a{99}){99}){99}\" repeats too much: its "
		  "repetitions ({n,m} m times, + twice) multiply to more than 1000\n" },
		{ "[cpumond]\n[report]\nignore = x{1001}\n" WATCH,
		  "t.conf:3: ignore: regex \"x{1001}\" repeats too much: its "
		  "repetitions ({n,m} m times, + twice) multiply to more than 1000\n" },
		{ "[cpumond]\n[watch x]\ncmdline = a++++++++++\n",
		  "t.conf:3: cmdline: regex \"a++++++++++\" repeats too much: its "
		  "repetitions ({n,m} m times, + twice) multiply to more than 1000\n" },
		{ "[cpumond]\nretention = forever\n" WATCH,
		  "t.conf:2: retention: \"forever\" is not a duration (such as 250ms, 3s, 2min, 1h, "
		  "1d, 2w)\n" },
		{ "[cpumond]\nretention = 30500000000w\n" WATCH,
		  "t.conf:2: retention: 30500000000w is out of range 0ms..3650d\n" },
		{ "[cpumond]\nmax_database_size = 256mb\n" WATCH,
		  "t.conf:2: max_database_size: \"256mb\" is not a size (such as 64MiB, 1GiB, 1GB, "
		  "4096)\n" },
		{ "[cpumond]\nmax_database_size = 16777216T\n" WATCH,
		  "t.conf:2: max_database_size: 16777216T is too large (at most 2^64 - 1 bytes)\n" },
		{ "[cpumond]\nmax_database_size = 99999999999999999999\n" WATCH,
		  "t.conf:2: max_database_size: 99999999999999999999 is too large (at most 2^64 - 1 "
		  "bytes)\n" },
		{ "[cpumond]\nmax_database_size = 1000KiB\n" WATCH,
		  "t.conf:2: max_database_size: 1000KiB is below 1MiB (0: no cap)\n" },
		{ "[cpumond]\ncapture = PERF\n" WATCH,
		  "t.conf:2: capture: \"PERF\" is not a capture (auto, perf or ptrace)\n" },
		{ "[cpumond]\ncapture = yes\n" WATCH,
		  "t.conf:2: capture: \"yes\" is not a capture (auto, perf or ptrace)\n" },
		{ "[watch w]\ncapture = perf\nall = yes\n",
		  "t.conf:2: capture: not a watch key (set it in [cpumond])\n" },
		{ "[cpumond]\njournal = maybe\n" WATCH,
		  "t.conf:2: journal: \"maybe\" is not a boolean (yes/no, true/false, on/off, 1/0)\n" },
		{ "[cpumond]\nmetrics_file = cpumond.prom\n" WATCH,
		  "t.conf:2: metrics_file: cpumond.prom is not an absolute path\n" },
		{ "[cpumond]\nevent_log = events.json\n" WATCH,
		  "t.conf:2: event_log: events.json is not an absolute path\n" },
		{ "[cpumond]\nsample_interval = 9ms\n" WATCH,
		  "t.conf:2: sample_interval: 9ms is out of range 10ms..10s\n" },
		{ "[cpumond]\nsample_interval = 11s\n" WATCH,
		  "t.conf:2: sample_interval: 11s is out of range 10ms..10s\n" },
		{ "[cpumond]\nsample_interval = fast\n" WATCH,
		  "t.conf:2: sample_interval: \"fast\" is not a duration (such as 250ms, 3s, 2min, "
		  "1h, 1d, 2w)\n" },
		{ "[cpumond]\nepisode_samples = -1\n" WATCH,
		  "t.conf:2: episode_samples: -1 is out of range 0..1000\n" },
		{ "[cpumond]\nepisode_samples = 1001\n" WATCH,
		  "t.conf:2: episode_samples: 1001 is out of range 0..1000\n" },
		{ "[cpumond]\nepisode_samples = 20x\n" WATCH,
		  "t.conf:2: episode_samples: \"20x\" is not a number\n" },
		{ "[cpumond]\nmax_dumps_per_second = 0\n" WATCH,
		  "t.conf:2: max_dumps_per_second: 0 is out of range 1..10000\n" },
		{ "[cpumond]\nmax_dumps_per_second = 10001\n" WATCH,
		  "t.conf:2: max_dumps_per_second: 10001 is out of range 1..10000\n" },
		{ WATCH "episode_samples = 5\n",
		  "t.conf:3: episode_samples: not a watch key (set it in [cpumond])\n" },
		{ "[report]\nignore = (\n" WATCH,
		  "t.conf:2: ignore: invalid regex \"(\": unmatched ( or \\(\n" },
		{ "[report]\nignore =\n" WATCH,
		  "t.conf:2: ignore: no value\n" },
		{ "[report]\nignored = ^x$\n" WATCH,
		  "t.conf:2: ignored: unknown key (expected ignore)\n" },
		{ "[report]\nignore = a\nignore = b\n" WATCH,
		  "t.conf:3: ignore: duplicate key (first at line 2)\n" },
		{ "[report]\n[report]\nignore = a\n" WATCH,
		  "t.conf:2: [report]: duplicate section (first at line 1)\n" },
		{ "[report]\ninterval = 3s\n" WATCH,
		  "t.conf:2: interval: not a [report] key (set it in [cpumond])\n" },
		{ "[report]\ncomm = nginx\n" WATCH,
		  "t.conf:2: comm: not a [report] key (selectors go in [watch NAME])\n" },
		{ "[cpumond]\nignore = ^x$\n" WATCH,
		  "t.conf:2: ignore: not a [cpumond] key (set it in [report])\n" },
		{ WATCH "ignore = ^x$\n",
		  "t.conf:3: ignore: not a watch key (set it in [report])\n" },
		{ "ignore = ^x$\n[report]\n" WATCH,
		  "t.conf:1: ignore: outside any section (put it under [cpumond] or [watch NAME])\n" },
		{ WATCH "com = nginx\n",
		  "t.conf:3: com: unknown key (expected pid, pidfile, comm, exe, cmdline, user, unit, "
		  "cgroup, all, threshold, consecutive, cooldown or process_threshold)\n" },
		{ "[cpumond]\ncomm = nginx\n" WATCH,
		  "t.conf:2: comm: not a [cpumond] key (selectors go in [watch NAME])\n" },
		{ WATCH "interval = 1s\n",
		  "t.conf:3: interval: not a watch key (set it in [cpumond])\n" },
		{ "[cpumond]\nthreshold = 700\nthreshold = 900\n" WATCH,
		  "t.conf:3: threshold: duplicate key (first at line 2)\n" },
		{ WATCH "all = no\n",
		  "t.conf:3: all: duplicate key (first at line 2)\n" },
		{ "[cpumond]\n[cpumond]\nthreshold = 5000\n" WATCH,
		  "t.conf:2: [cpumond]: duplicate section (first at line 1)\n" },
		{ WATCH "[watch w]\ncomm = x\n",
		  "t.conf:3: [watch w]: duplicate watch (first at line 1)\n" },
		{ "[watch]\nall = yes\n" WATCH,
		  "t.conf:1: [watch]: no name (write [watch NAME])\n" },
		{ "[watch   ]\n" WATCH,
		  "t.conf:1: [watch]: no name (write [watch NAME])\n" },
		{ "threshold = 900\n" WATCH,
		  "t.conf:1: threshold: outside any section (put it under [cpumond] or [watch NAME])\n" },
		{ "[cpumond]\nthreshold = 1200\n" WATCH,
		  "t.conf:2: threshold: 1200 is out of range 1..1000\n" },
		{ "[cpumond]\nthreshold = 0\n" WATCH,
		  "t.conf:2: threshold: 0 is out of range 1..1000\n" },
		{ "[cpumond]\nthreshold = 80%\n" WATCH,
		  "t.conf:2: threshold: \"80%\" is not a number\n" },
		{ "[cpumond]\nthreshold = 0x100\n" WATCH,
		  "t.conf:2: threshold: \"0x100\" is not a number\n" },
		{ WATCH "consecutive = 0\n",
		  "t.conf:3: consecutive: 0 is out of range 1..1000\n" },
		{ "[cpumond]\nmax_frames = 99999999999999999999\n" WATCH,
		  "t.conf:2: max_frames: 99999999999999999999 is out of range 1..1024\n" },
		{ "[cpumond]\ninterval = 3 s\n" WATCH,
		  "t.conf:2: interval: \"3 s\" is not a duration (such as 250ms, 3s, 2min, 1h, 1d, "
		  "2w)\n" },
		{ "[cpumond]\ninterval = 50ms\n" WATCH,
		  "t.conf:2: interval: 50ms is out of range 100ms..1h\n" },
		{ "[cpumond]\ninterval = 2h\n" WATCH,
		  "t.conf:2: interval: 2h is out of range 100ms..1h\n" },
		{ WATCH "cooldown = 31d\n",
		  "t.conf:3: cooldown: 31d is out of range 0ms..30d\n" },
		{ "[watch w]\ncomm = 1234567890123456\n",
		  "t.conf:2: comm: \"1234567890123456\" is longer than the kernel's 15 bytes "
		  "(match the full name with cmdline)\n" },
		{ "[watch w]\npid = 0\n",
		  "t.conf:2: pid: 0 is out of range 1..4194304\n" },
		{ "[watch w]\npid = -1\n",
		  "t.conf:2: pid: -1 is out of range 1..4194304\n" },
		{ "[watch w]\nexe = sbin/nginx\n",
		  "t.conf:2: exe: sbin/nginx is not an absolute path\n" },
		{ "[watch w]\npidfile = nginx.pid\n",
		  "t.conf:2: pidfile: nginx.pid is not an absolute path\n" },
		{ "[watch w]\ncmdline = (\n",
		  "t.conf:2: cmdline: invalid regex \"(\": unmatched ( or \\(\n" },
		{ "[watch w]\nunit = system.slice/nginx.service\n",
		  "t.conf:2: unit: \"system.slice/nginx.service\" holds a '/', which no unit name "
		  "does (match the cgroup path with cgroup)\n" },
		{ "[watch w]\ncgroup = (\n",
		  "t.conf:2: cgroup: invalid regex \"(\": unmatched ( or \\(\n" },
		{ "[watch w]\ncgroup = ((a{99}){99}){99}\n",
		  "t.conf:2: cgroup: regex \"((a{99}){99}){99}\" repeats too much: its repetitions "
		  "({n,m} m times, + twice) multiply to more than 1000\n" },
		{ "[watch w]\nunit = x.service\nunit = y.service\n",
		  "t.conf:3: unit: duplicate key (first at line 2)\n" },
		{ "[cpumond]\nunit = x.service\n" WATCH,
		  "t.conf:2: unit: not a [cpumond] key (selectors go in [watch NAME])\n" },
		{ "[watch w]\nuser = nosuchuser-cpumond\n",
		  "t.conf:2: user: no user named \"nosuchuser-cpumond\"\n" },
		{ "[watch w]\nuser = 4294967295\n",
		  "t.conf:2: user: 4294967295 is out of range 0..4294967294\n" },
		{ "[watch w]\nall = maybe\n",
		  "t.conf:2: all: \"maybe\" is not a boolean (yes/no, true/false, on/off, 1/0)\n" },
		{ "[watch w]\ncomm =\n",
		  "t.conf:2: comm: no value\n" },
		{ "[watch w]\ncomm = ; nginx\n",
		  "t.conf:2: comm: no value\n" },
		{ "[cpumond]\n\n[watch web]\nthreshold = 900\n",
		  "t.conf:3: [watch web]: no selector (pid, pidfile, comm, exe, cmdline, user, unit, cgroup or all = yes)\n" },
		{ "[watch web]\nall = no\n",
		  "t.conf:1: [watch web]: no selector (pid, pidfile, comm, exe, cmdline, user, unit, cgroup or all = yes)\n" },
		{ "[watch web]\n" WATCH,
		  "t.conf:1: [watch web]: no selector (pid, pidfile, comm, exe, cmdline, user, unit, cgroup or all = yes)\n" },
		{ "[watch web]\ncom = nginx\n",
		  "t.conf:2: com: unknown key (expected pid, pidfile, comm, exe, cmdline, user, unit, "
		  "cgroup, all, threshold, consecutive, cooldown or process_threshold)\n"
		  "t.conf:1: [watch web]: no selector (pid, pidfile, comm, exe, cmdline, user, unit, cgroup or all = yes)\n" },
		{ "[cpumond]\ninterval = 1s\n",
		  "t.conf:0: no [watch NAME] section: nothing to watch\n" },
		{ "",
		  "t.conf:0: no [watch NAME] section: nothing to watch\n" },
		{ WATCH "comm nginx\n",
		  "t.conf:3: \"comm nginx\": not a [section], key = value or ; comment\n" },
		{ WATCH "= nginx\n",
		  "t.conf:3: \"= nginx\": not a [section], key = value or ; comment\n" },
		{ WATCH "comm ; = nginx\n",
		  "t.conf:3: \"comm ; = nginx\": not a [section], key = value or ; comment\n" },
		{ "[watch w\ncomm = x\n" WATCH,
		  "t.conf:1: [watch w: no closing ']'\n" },
		{ "[watch w] all = yes\ncomm = x\n",
		  "t.conf:1: [watch w]: text after ']' (start a comment with ';')\n" },
	};
#undef WATCH

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		assert_errors(cases[i].text, cases[i].errors);
	}
}

static void test_long_line(void **state)
{
	char text[512], expect[128];

	(void)state;
	snprintf(text, sizeof text, "[watch w]\nall = yes\ncmdline = %0250d\n", 0);
	snprintf(expect, sizeof expect, "t.conf:3: line too long (260 bytes, at most 199)\n");
	assert_errors(text, expect);
}

static void test_all_errors_reported(void **state)
{
	(void)state;
	assert_errors("[cpumond]\n"
	              "interval = 10\n"
	              "threshold = 2000\n"
	              "oops\n"
	              "cooldown = soon\n"
	              "\n"
	              "[watch web]\n"
	              "comm = nginx\n"
	              "pid = 0\n"
	              "also oops\n"
	              "\n"
	              "[watch idle]\n"
	              "threshold = 100\n"
	              "\n"
	              "[watch web]\n"
	              "[bogus]\n"
	              "x = 1\n",
	              "t.conf:3: threshold: 2000 is out of range 1..1000\n"
	              "t.conf:4: \"oops\": not a [section], key = value or ; comment\n"
	              "t.conf:5: cooldown: \"soon\" is not a duration (such as 250ms, 3s, 2min, 1h, 1d, 2w)\n"
	              "t.conf:9: pid: 0 is out of range 1..4194304\n"
	              "t.conf:10: \"also oops\": not a [section], key = value or ; comment\n"
	              "t.conf:12: [watch idle]: no selector (pid, pidfile, comm, exe, cmdline, user, unit, cgroup or all = yes)\n"
	              "t.conf:15: [watch web]: duplicate watch (first at line 7)\n"
	              "t.conf:16: [bogus]: unknown section (expected [cpumond], [report] or [watch NAME])\n");
}

/* [report] ignore is compiled as an extended regex, matched anywhere unless
 * anchored. */
static void test_report_section(void **state)
{
	struct config cfg;

	(void)state;
	parse_good("[report]\n"
	           "ignore = ^(start_thread|__clone3?|_start)$   ; system frames\n"
	           "[watch w]\nall = yes\n", &cfg);
	assert_string_equal(cfg.report_ignore, "^(start_thread|__clone3?|_start)$");
	assert_int_equal(regexec(&cfg.report_ignore_re, "start_thread", 0, NULL, 0), 0);
	assert_int_equal(regexec(&cfg.report_ignore_re, "__clone3", 0, NULL, 0), 0);
	assert_int_equal(regexec(&cfg.report_ignore_re, "__clone", 0, NULL, 0), 0);
	assert_int_not_equal(regexec(&cfg.report_ignore_re, "start_thread2", 0, NULL, 0), 0);
	assert_int_not_equal(regexec(&cfg.report_ignore_re, "main", 0, NULL, 0), 0);
	config_free(&cfg);
	assert_zeroed(&cfg);

	/* An empty [report] section sets nothing. */
	parse_good("[report]\n; nothing\n[watch w]\nall = yes\n", &cfg);
	assert_null(cfg.report_ignore);
	config_free(&cfg);
}

static void test_episode_keys(void **state)
{
	struct config cfg;

	(void)state;
	parse_good("[cpumond]\n"
	           "sample_interval = 10ms\n"
	           "episode_samples = 0\n"
	           "max_dumps_per_second = 1\n"
	           "[watch w]\nall = yes\n", &cfg);
	assert_int_equal(cfg.sample_interval_ms, 10);
	assert_int_equal(cfg.episode_samples, 0);
	assert_int_equal(cfg.max_dumps_per_second, 1);
	config_free(&cfg);
	parse_good("[cpumond]\n"
	           "sample_interval = 10s\n"
	           "episode_samples = 1000\n"
	           "max_dumps_per_second = 10000\n"
	           "[watch w]\nall = yes\n", &cfg);
	assert_int_equal(cfg.sample_interval_ms, 10000);
	assert_int_equal(cfg.episode_samples, 1000);
	assert_int_equal(cfg.max_dumps_per_second, 10000);
	config_free(&cfg);
}

static void test_capture(void **state)
{
	static const struct {
		const char *value;
		enum config_capture capture;
	} cases[] = {
		{ "auto", CONFIG_CAPTURE_AUTO },
		{ "perf", CONFIG_CAPTURE_PERF },
		{ "ptrace", CONFIG_CAPTURE_PTRACE },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct config cfg;
		char text[128];

		snprintf(text, sizeof text, "[cpumond]\ncapture = %s\n[watch w]\nall = yes\n",
		         cases[i].value);
		parse_good(text, &cfg);
		assert_int_equal(cfg.capture, cases[i].capture);
		assert_string_equal(config_capture_name(cfg.capture), cases[i].value);
		config_free(&cfg);
	}
}

static void test_sizes(void **state)
{
	/* K, M, G, T and KiB.. TiB are powers of 1024; KB (kB), MB, GB, TB
	 * powers of 1000. */
	static const struct { const char *text; uint64_t bytes; } good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "7B", 7 },
		{ "512KiB", 512 * 1024 }, { "512K", 512 * 1024 }, { "512KB", 512000 },
		{ "512kB", 512000 },
		{ "256MiB", 256ull << 20 }, { "256M", 256ull << 20 }, { "256MB", 256000000 },
		{ "2GiB", 2ull << 30 }, { "2G", 2ull << 30 }, { "2GB", 2000000000 },
		{ "1TiB", 1ull << 40 }, { "1T", 1ull << 40 }, { "1TB", 1000000000000 },
		{ "16777215TiB", 16777215ull << 40 },
		{ "18446744073709551615", UINT64_MAX }, { "18446744073709551615B", UINT64_MAX },
	};
	static const char *const bad[] = {
		"", "MiB", "-1", "+1", "1.5GiB", "1 MiB", "1mib", "1mb", "1k", "1Kib", "1KIB",
		"1Gb", "1g", "1P", "1PiB", "1iB", "0x10", "1GiB ", " 1GiB",
	};
	/* Numbers, but past 2^64 - 1 bytes. */
	static const char *const too_large[] = {
		"16777216TiB", "16777216T", "18446745TB", "18446744073709551616",
		"99999999999999999999", "99999999999999999999GiB", "18014398509481984K",
	};
	uint64_t v;
	(void)state;

	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		print_message("good %s\n", good[i].text);
		assert_int_equal(config_parse_size(good[i].text, &v), 0);
		assert_true(v == good[i].bytes);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		v = 42;
		print_message("bad \"%s\"\n", bad[i]);
		assert_int_equal(config_parse_size(bad[i], &v), -EINVAL);
		assert_true(v == 42);
	}
	for (size_t i = 0; i < sizeof too_large / sizeof too_large[0]; i++) {
		v = 42;
		print_message("too large %s\n", too_large[i]);
		assert_int_equal(config_parse_size(too_large[i], &v), -ERANGE);
		assert_true(v == 42);
	}
}

static void test_durations(void **state)
{
	static const struct {
		const char *text;
		uint64_t ms;
	} good[] = {
		{ "250ms", 250 }, { "3s", 3000 }, { "3", 3000 }, { "2min", 120000 },
		{ "3m", 180000 }, { "1h", 3600000 }, { "14d", 1209600000 }, { "2w", 1209600000 },
		{ "0", 0 }, { "0ms", 0 }, { "0w", 0 },
		{ "007s", 7000 }, { "18446744073709551615ms", UINT64_MAX },
		{ "213503982334d", UINT64_C(213503982334) * 86400000 },
		{ "30500568904w", UINT64_C(30500568904) * 604800000 },
	};
	static const char *const bad[] = {
		"", "-1s", "+1s", " 3s", "3s ", "3 s", "1.5s", "s", "ms", "w", "3sec", "3M",
		"3S", "3W", "3wk", "3s3", "0x10", "3ms5", "1w2d",
	};
	/* Numbers of a unit, but past 2^64 - 1 ms. */
	static const char *const too_large[] = {
		"18446744073709551616ms", "18446744073709552s", "213503982335d", "30500568905w",
		"99999999999999999999999w",
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		uint64_t ms = 1;

		print_message("good %s\n", good[i].text);
		assert_int_equal(config_parse_duration(good[i].text, &ms), 0);
		assert_int_equal(ms, good[i].ms);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		uint64_t ms = 42;

		print_message("bad \"%s\"\n", bad[i]);
		assert_int_equal(config_parse_duration(bad[i], &ms), -EINVAL);
		assert_int_equal(ms, 42);
	}
	for (size_t i = 0; i < ARRAY_SIZE(too_large); i++) {
		uint64_t ms = 42;

		print_message("too large %s\n", too_large[i]);
		assert_int_equal(config_parse_duration(too_large[i], &ms), -ERANGE);
		assert_int_equal(ms, 42);
	}
}

static char *print_to_string(const struct config *cfg)
{
	char *text;
	size_t len;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	config_print(cfg, f);
	fclose(f);
	return text;
}

static void test_print(void **state)
{
	struct config cfg;
	char *text;

	(void)state;
	parse_good("[watch web]\ncomm = nginx\ncooldown = 90s\n"
	           "[watch batch]\nuser = root\nall = yes\nthreshold = 1000\ncooldown = 0\n"
	           "[cpumond]\ninterval = 1500ms\ncooldown = 120\n", &cfg);
	text = print_to_string(&cfg);
	assert_string_equal(text,
	                    "[cpumond]\n"
	                    "interval = 1500ms\n"
	                    "threshold = 800\n"
	                    "consecutive = 1\n"
	                    "cooldown = 2min\n"
	                    "database = /var/lib/cpumond/cpumond.db\n"
	                    "max_frames = 64\n"
	                    "sample_interval = 50ms\n"
	                    "episode_samples = 20\n"
	                    "max_dumps_per_second = 100\n"
	                    "capture = auto\n"
	                    "retention = 14d\n"
	                    "max_database_size = 256MiB\n"
	                    "journal = yes\n"
	                    "starved = yes\n"
	                    "process_threshold = 0\n"
	                    "stall_after = 0ms\n"
	                    "history_threads = 10\n"
	                    "history_floor = 100\n"
	                    "\n"
	                    "[watch web]\n"
	                    "comm = nginx\n"
	                    "threshold = 800\n"
	                    "consecutive = 1\n"
	                    "cooldown = 90s\n"
	                    "process_threshold = 0\n"
	                    "\n"
	                    "[watch batch]\n"
	                    "user = root\n"
	                    "all = yes\n"
	                    "threshold = 1000\n"
	                    "consecutive = 1\n"
	                    "cooldown = 0ms\n"
	                    "process_threshold = 0\n");
	free(text);
	config_free(&cfg);
}

/* What the new units read as, and how config_print writes them back: the
 * documented spelling (days, minutes as "min", IEC sizes), 1000-based sizes
 * that are no whole number of MiB as such. */
static void test_print_units(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "retention = 2w\n", "retention = 14d\n" },
		{ "retention = 3w\n", "retention = 21d\n" },
		{ "cooldown = 90m\n", "cooldown = 90min\n" },
		{ "max_database_size = 1G\n", "max_database_size = 1GiB\n" },
		{ "max_database_size = 100MB\n", "max_database_size = 100MB\n" },
		{ "max_database_size = 2000000KB\n", "max_database_size = 2GB\n" },
		{ "max_database_size = 4096K\n", "max_database_size = 4MiB\n" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct config cfg;
		char text[256], *printed;

		snprintf(text, sizeof text, "[cpumond]\n%s[watch w]\nall = yes\n", cases[i].in);
		print_message("%s", cases[i].in);
		parse_good(text, &cfg);
		printed = print_to_string(&cfg);
		assert_non_null(strstr(printed, cases[i].out));
		free(printed);
		config_free(&cfg);
	}
}

static void assert_same_string(const char *a, const char *b)
{
	if (!a || !b)
		assert_ptr_equal(a, b);
	else
		assert_string_equal(a, b);
}

static void assert_same_config(const struct config *a, const struct config *b)
{
	assert_int_equal(a->interval_ms, b->interval_ms);
	assert_int_equal(a->threshold, b->threshold);
	assert_int_equal(a->consecutive, b->consecutive);
	assert_int_equal(a->cooldown_ms, b->cooldown_ms);
	assert_string_equal(a->database, b->database);
	assert_int_equal(a->history_threads, b->history_threads);
	assert_int_equal(a->history_floor, b->history_floor);
	assert_int_equal(a->max_frames, b->max_frames);
	assert_int_equal(a->sample_interval_ms, b->sample_interval_ms);
	assert_int_equal(a->episode_samples, b->episode_samples);
	assert_int_equal(a->max_dumps_per_second, b->max_dumps_per_second);
	assert_int_equal(a->capture, b->capture);
	assert_int_equal(a->retention_ms, b->retention_ms);
	assert_int_equal(a->max_database_size, b->max_database_size);
	assert_int_equal(a->journal, b->journal);
	assert_int_equal(a->starved, b->starved);
	assert_int_equal(a->process_threshold, b->process_threshold);
	assert_same_string(a->metrics_file, b->metrics_file);
	assert_same_string(a->event_log, b->event_log);
	assert_same_string(a->report_ignore, b->report_ignore);
	assert_int_equal(a->nwatches, b->nwatches);
	for (size_t i = 0; i < a->nwatches; i++) {
		const struct watch_config *x = &a->watches[i], *y = &b->watches[i];

		assert_string_equal(x->name, y->name);
		assert_int_equal(x->pid, y->pid);
		assert_same_string(x->pidfile, y->pidfile);
		assert_same_string(x->comm, y->comm);
		assert_same_string(x->exe, y->exe);
		assert_same_string(x->cmdline, y->cmdline);
		assert_same_string(x->user, y->user);
		assert_int_equal(x->uid, y->uid);
		assert_same_string(x->unit, y->unit);
		assert_same_string(x->cgroup, y->cgroup);
		assert_int_equal(x->all, y->all);
		assert_int_equal(x->threshold, y->threshold);
		assert_int_equal(x->consecutive, y->consecutive);
		assert_int_equal(x->cooldown_ms, y->cooldown_ms);
		assert_int_equal(x->process_threshold, y->process_threshold);
	}
}

static void test_round_trip(void **state)
{
	struct config first, second;
	char *text, *again;

	(void)state;
	parse_good("[watch every one]\n"
	           "pid = 4242\n"
	           "pidfile = /run/nginx.pid ; comment\n"
	           "comm = nginx\n"
	           "exe = /usr/sbin/nginx\n"
	           "cmdline = ^nginx: (worker|cache) [a-z]+;x$\n"
	           "user = 0\n"
	           "unit = user@[0-9]*.service\n"
	           "cgroup = ^/user\\.slice/.*;x$\n"
	           "all = on\n"
	           "cooldown = 0\n"
	           "[watch b]\n"
	           "user = root\n"
	           "threshold = 1\n"
	           "consecutive = 1000\n"
	           "cooldown = 30d\n"
	           "process_threshold = 1000000\n"
	           "[cpumond]\n"
	           "interval = 100ms\n"
	           "threshold = 999\n"
	           "consecutive = 7\n"
	           "cooldown = 86399999ms\n"
	           "database = relative/cpumond.db\n"
	           "max_frames = 1\n"
	           "sample_interval = 1500ms\n"
	           "episode_samples = 0\n"
	           "max_dumps_per_second = 10000\n"
	           "capture = ptrace\n"
	           "retention = 0\n"
	           "max_database_size = 1536KiB\n"
	           "journal = off\n"
	           "starved = no\n"
	           "process_threshold = 1\n"
	           "metrics_file = /var/lib/prometheus/node-exporter/cpumond.prom\n"
	           "event_log = /var/log/cpumond/events.json\n"
	           "[report]\n"
	           "ignore = ^(start_thread|__clone3?|__libc_start_main.*)$\n", &first);
	text = print_to_string(&first);
	parse_good(text, &second);
	assert_same_config(&first, &second);
	/* And printing is a fixed point. */
	again = print_to_string(&second);
	assert_string_equal(text, again);
	free(text);
	free(again);
	config_free(&first);
	config_free(&second);
}

static void test_free_zeroed(void **state)
{
	struct config cfg = { 0 };

	(void)state;
	config_free(&cfg);
	config_free(&cfg);
	assert_zeroed(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_overrides),
		cmocka_unit_test(test_every_selector),
		cmocka_unit_test(test_booleans),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_all_errors_reported),
		cmocka_unit_test(test_report_section),
		cmocka_unit_test(test_episode_keys),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_print),
		cmocka_unit_test(test_print_units),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_free_zeroed),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
