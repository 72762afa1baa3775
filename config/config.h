/* config: the ini file, parsed once with inih into one immutable struct.
 *
 * Nothing here touches /proc or the database.  Every error names the file
 * and line ("cpumond.conf:12: threshold: 1200 is out of range 1..1000").
 */
#ifndef CPUMOND_CONFIG_H
#define CPUMOND_CONFIG_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define CONFIG_DEFAULT_PATH "/etc/cpumond/cpumond.conf"
#define CONFIG_DEFAULT_DATABASE "/var/lib/cpumond/cpumond.db"

/* One [watch NAME] section.  Unset selectors are 0 / NULL / false; every set
 * selector must match for a process to belong to the watch. */
struct watch_config {
	char *name;             /* the text after "watch " in the section name */
	int line;               /* line of the section header */
	pid_t pid;              /* pid = N; 0 when unset */
	char *pidfile;          /* pidfile = PATH: the pid is read each cycle */
	char *comm;             /* comm = NAME: exact match of the 15-byte comm */
	char *exe;              /* exe = PATH: exact match of /proc/PID/exe */
	char *cmdline;          /* cmdline = REGEX, as written */
	regex_t cmdline_re;     /* compiled REG_EXTENDED|REG_NOSUB; valid when cmdline */
	char *user;             /* user = NAME or UID, as written */
	uid_t uid;              /* resolved real uid; valid when user */
	char *unit;             /* unit = GLOB: fnmatch(3) of the systemd unit */
	char *cgroup;           /* cgroup = REGEX, as written: the cgroup v2 path */
	regex_t cgroup_re;      /* compiled REG_EXTENDED|REG_NOSUB; valid when cgroup */
	bool all;               /* all = yes */
	int threshold;          /* permille of one core, 1..1000 */
	int consecutive;        /* samples over threshold before an event, >= 1 */
	uint64_t cooldown_ms;   /* at most one event per thread per cooldown */
	int process_threshold;  /* permille of one core summed over a process's threads,
	                           0..1000000; 0: no process events */
};

/* How an episode's stack samples are taken (capture =). */
enum config_capture {
	CONFIG_CAPTURE_AUTO,    /* perf where the kernel permits it for the target
	                           and no Python frames are read, ptrace otherwise */
	CONFIG_CAPTURE_PERF,    /* perf only: a thread is never stopped */
	CONFIG_CAPTURE_PTRACE,  /* a ptrace stop per sample */
};

struct config {
	char *path;             /* the file it came from */
	uint64_t interval_ms;   /* >= 100; default 3000 */
	int threshold;          /* default 800 */
	int consecutive;        /* default 1 */
	uint64_t cooldown_ms;   /* default 60000 */
	char *database;         /* default CONFIG_DEFAULT_DATABASE */
	int max_frames;         /* 1..1024; default 64 */
	uint64_t sample_interval_ms; /* between two stack samples of an episode;
	                                10ms..10s, default 50ms */
	int episode_samples;    /* stack samples per episode, 0..1000, default 20;
	                           0: one dump per event */
	int max_dumps_per_second; /* over all episodes together, 1..10000, default 100 */
	enum config_capture capture; /* default CONFIG_CAPTURE_AUTO */
	uint64_t retention_ms;  /* events older than this are deleted; default 14d; 0: kept */
	uint64_t max_database_size; /* bytes; the oldest events go past it; default 256MiB;
	                               0: no cap */
	bool journal;           /* events also to the journal, when stderr is the journal;
	                           default yes */
	bool starved;           /* starved events (demand over threshold, usage not);
	                           default yes */
	int process_threshold;  /* the watches' default; default 0: off */
	uint64_t stall_after_ms; /* a watched thread that has not run for this long, not
	                            in an idle wait, makes a stall event (cpumond/stall.h);
	                            0: off (the default); else at least 2 intervals */
	char *metrics_file;     /* Prometheus text file rewritten every cycle; NULL: none */
	char *event_log;        /* JSON lines, one per event; NULL: none */
	int history_threads;    /* usage history: threads kept per watch a cycle, 0..1000,
	                           default 10; 0: no history */
	int history_floor;      /* permille a thread must be over to be kept, 0..1000,
	                           default 100; also the gate when lower than a threshold */
	char *report_ignore;    /* [report] ignore = REGEX, as written; NULL when unset */
	regex_t report_ignore_re; /* REG_EXTENDED|REG_NOSUB; valid when report_ignore */
	struct watch_config *watches;
	size_t nwatches;        /* >= 1 in a valid config */
};

/* Reads and validates PATH.  Each error is written to ERRORS as one line
 * "PATH:LINE: KEY: cause" (LINE 0 for whole-file errors); all errors are
 * reported, not only the first.  Returns 0 and fills *CFG, -EINVAL when the
 * file has errors, or -errno when it cannot be read (also written to ERRORS).
 * On failure *CFG is left zeroed. */
int config_load(const char *path, struct config *cfg, FILE *errors);

/* The same from TEXT in memory; NAME stands for the file in messages. */
int config_parse_string(const char *text, const char *name, struct config *cfg, FILE *errors);

/* Writes the effective configuration, defaults filled in, as an ini file that
 * config_load accepts. */
void config_print(const struct config *cfg, FILE *out);

/* Frees what config_load allocated and zeroes *CFG; safe on a zeroed struct. */
void config_free(struct config *cfg);

/* A whole number and a unit to bytes: none or B (bytes); KiB, MiB, GiB, TiB
 * and K, M, G, T (powers of 1024); KB or kB, MB, GB, TB (powers of 1000):
 * "4096", "512KiB", "256M", "2GiB", "1GB".  Returns 0, -ERANGE when the
 * bytes do not fit in 64 bits, or -EINVAL for anything else (empty,
 * negative, a fraction, another unit, junk). */
int config_parse_size(const char *text, uint64_t *bytes);

/* Compiles the POSIX extended regex TEXT into *RE (REG_NOSUB), held to the
 * limits every regex of cpumond's is held to, from the configuration or
 * the command line: at most CONFIG_REGEX_MAX_LEN bytes, and repetitions
 * that multiply to at most 1000 (glibc expands them into copies).  Returns
 * 0, or -EINVAL with the reason in WHY (WHYLEN bytes; "repeats too much:
 * …", "invalid regex: …"), *RE then untouched. */
#define CONFIG_REGEX_MAX_LEN 1024
int config_compile_regex(const char *text, regex_t *re, char *why, size_t whylen);

/* A whole number and a unit to milliseconds: ms, s (also none), min or m,
 * h, d, w: "250ms", "3s", "3", "2min", "30m", "1h", "14d", "2w".  Returns 0,
 * -ERANGE when the milliseconds do not fit in 64 bits, or -EINVAL for
 * anything else (empty, negative, another unit, junk).  Also reads
 * report --since and --until. */
int config_parse_duration(const char *text, uint64_t *ms);

/* "auto", "perf" or "ptrace". */
const char *config_capture_name(enum config_capture capture);

#endif
