/* config: cpumond.conf read with inih into one struct config.
 *
 * inih splits "key = value" lines and strips inline comments; everything
 * else is done here, because Debian's libinih (55) is built without
 * INI_HANDLER_LINENO and returns only the line of its first error.  The
 * reader callback given to ini_parse_stream counts lines, takes section
 * headers and comments itself, and finds the lines inih rejected, so every
 * error is reported with its own line.
 */
#include "config/config.h"
#include "config/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DEFAULT_INTERVAL_MS 3000
#define DEFAULT_THRESHOLD 800
#define DEFAULT_CONSECUTIVE 1
#define DEFAULT_COOLDOWN_MS 60000
#define DEFAULT_MAX_FRAMES 64
#define DEFAULT_SAMPLE_INTERVAL_MS 50
#define DEFAULT_EPISODE_SAMPLES 20
#define DEFAULT_MAX_DUMPS_PER_SECOND 100
#define DEFAULT_RETENTION_MS UINT64_C(1209600000)           /* 14d */
#define DEFAULT_MAX_DATABASE_SIZE (UINT64_C(256) << 20)      /* 256MiB */
#define DEFAULT_HISTORY_THREADS 10
#define DEFAULT_HISTORY_FLOOR 100

/* The upper bounds of the durations keep "now + interval" and "now +
 * cooldown" far from overflow in the modules that add them to a clock. */
#define INTERVAL_MIN_MS 100
#define INTERVAL_MAX_MS UINT64_C(3600000)       /* 1h */
#define COOLDOWN_MAX_MS UINT64_C(2592000000)    /* 30d */
#define THRESHOLD_MAX 1000                      /* one full core */
/* A process's threads together: a thousand cores. */
#define PROCESS_THRESHOLD_MAX 1000000
#define CONSECUTIVE_MAX 1000
#define MAX_FRAMES_MAX 1024                     /* STACKDUMP_MAX_FRAMES */
#define PID_MAX 4194304                         /* the kernel's PID_MAX_LIMIT */
#define UID_MAX_VALID 4294967294LL              /* (uid_t)-1 is "no uid" */
#define COMM_MAX 15                             /* TASK_COMM_LEN less the NUL */
/* An episode samples one thread every sample_interval: below 10 ms the
 * stops (tens of µs each, bench/README.md §5) would start to cost the thread a
 * visible share of its time; above 10 s an episode outlives any interval. */
#define SAMPLE_INTERVAL_MIN_MS 10
#define SAMPLE_INTERVAL_MAX_MS 10000
#define EPISODE_SAMPLES_MAX 1000
#define MAX_DUMPS_PER_SECOND_MAX 10000
/* A cycle of 1,000 kept threads is 28 KB of history (bench/README.md). */
#define HISTORY_THREADS_MAX 1000
#define RETENTION_MAX_MS UINT64_C(315360000000)             /* 10 years */
/* Below 1 MiB a few episodes would push every older event out. */
#define MAX_DATABASE_SIZE_MIN (UINT64_C(1) << 20)

/* A watch's threshold and consecutive are 0, and its cooldown this, until
 * the end of the file gives them the [cpumond] values, which may come after
 * the watch. */
#define COOLDOWN_UNSET UINT64_MAX
/* A watch's process_threshold until then (0 is a value: off). */
#define PROCESS_THRESHOLD_UNSET -1

enum key {
	KEY_INTERVAL, KEY_THRESHOLD, KEY_CONSECUTIVE, KEY_COOLDOWN, KEY_DATABASE,
	KEY_MAX_FRAMES, KEY_SAMPLE_INTERVAL, KEY_EPISODE_SAMPLES, KEY_MAX_DUMPS_PER_SECOND,
	KEY_CAPTURE, KEY_RETENTION, KEY_MAX_DATABASE_SIZE, KEY_JOURNAL, KEY_METRICS_FILE,
	KEY_EVENT_LOG, KEY_HISTORY_THREADS, KEY_HISTORY_FLOOR, KEY_STARVED,
	KEY_PROCESS_THRESHOLD, KEY_STALL_AFTER, KEY_IGNORE, KEY_PID, KEY_PIDFILE, KEY_COMM,
	KEY_EXE, KEY_CMDLINE,
	KEY_USER, KEY_UNIT, KEY_CGROUP, KEY_ALL, NKEYS
};
#define FIRST_SELECTOR KEY_PID

static const struct {
	const char *name;
	bool global;            /* allowed in [cpumond] */
	bool watch;             /* allowed in [watch NAME] */
	bool report;            /* allowed in [report] */
} keys[NKEYS] = {
	[KEY_INTERVAL] = { "interval", true, false, false },
	[KEY_THRESHOLD] = { "threshold", true, true, false },
	[KEY_CONSECUTIVE] = { "consecutive", true, true, false },
	[KEY_COOLDOWN] = { "cooldown", true, true, false },
	[KEY_DATABASE] = { "database", true, false, false },
	[KEY_MAX_FRAMES] = { "max_frames", true, false, false },
	[KEY_SAMPLE_INTERVAL] = { "sample_interval", true, false, false },
	[KEY_EPISODE_SAMPLES] = { "episode_samples", true, false, false },
	[KEY_MAX_DUMPS_PER_SECOND] = { "max_dumps_per_second", true, false, false },
	[KEY_CAPTURE] = { "capture", true, false, false },
	[KEY_RETENTION] = { "retention", true, false, false },
	[KEY_MAX_DATABASE_SIZE] = { "max_database_size", true, false, false },
	[KEY_JOURNAL] = { "journal", true, false, false },
	[KEY_METRICS_FILE] = { "metrics_file", true, false, false },
	[KEY_EVENT_LOG] = { "event_log", true, false, false },
	[KEY_HISTORY_THREADS] = { "history_threads", true, false, false },
	[KEY_HISTORY_FLOOR] = { "history_floor", true, false, false },
	[KEY_STARVED] = { "starved", true, false, false },
	[KEY_PROCESS_THRESHOLD] = { "process_threshold", true, true, false },
	[KEY_STALL_AFTER] = { "stall_after", true, false, false },
	[KEY_IGNORE] = { "ignore", false, false, true },
	[KEY_PID] = { "pid", false, true, false },
	[KEY_PIDFILE] = { "pidfile", false, true, false },
	[KEY_COMM] = { "comm", false, true, false },
	[KEY_EXE] = { "exe", false, true, false },
	[KEY_CMDLINE] = { "cmdline", false, true, false },
	[KEY_USER] = { "user", false, true, false },
	[KEY_UNIT] = { "unit", false, true, false },
	[KEY_CGROUP] = { "cgroup", false, true, false },
	[KEY_ALL] = { "all", false, true, false },
};

enum section { SECTION_NONE, SECTION_IGNORED, SECTION_GLOBAL, SECTION_REPORT, SECTION_WATCH };

struct parser {
	const char *name;       /* the file, in messages */
	FILE *in;
	FILE *errors;
	struct config *cfg;
	char *line;             /* getline's buffer */
	size_t linesize;
	const char *text;       /* the current line without indentation */
	int lineno;
	int nerrors;
	int read_errno;         /* why reading stopped early, or 0 */
	bool nomem;
	bool pair_pending;      /* inih has a key line and has not called back */
	enum section section;
	int global_line;        /* line of [cpumond], 0 before it */
	int report_line;        /* line of [report], 0 before it */
	int stall_after_line;   /* line of stall_after, 0 if absent */
	int seen[NKEYS];        /* line of each key in this section, 0 if absent */
	bool bad_selector;      /* a selector of this watch had an error */
};

__attribute__((format(printf, 3, 4)))
static void report(struct parser *p, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(p->errors, "%s:%d: ", p->name, line);
	va_start(ap, fmt);
	vfprintf(p->errors, fmt, ap);
	va_end(ap);
	fputc('\n', p->errors);
	p->nerrors++;
}

/* strerror() and regerror() start with a capital; messages here do not. */
static const char *lowercase_first(char *s)
{
	s[0] = (char)tolower((unsigned char)s[0]);
	return s;
}

static const char *errno_text(int err, char *buf, size_t size)
{
	snprintf(buf, size, "%s", strerror(err));
	return lowercase_first(buf);
}

static char *trim(char *s)
{
	size_t len;

	while (isspace((unsigned char)*s))
		s++;
	len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		s[--len] = '\0';
	return s;
}

static int get_int(struct parser *p, enum key key, const char *value,
                   long long min, long long max, long long *out)
{
	char *end;
	long long n;

	errno = 0;
	n = strtoll(value, &end, 10);
	if (end == value || *end) {
		report(p, p->lineno, "%s: \"%s\" is not a number", keys[key].name, value);
		return -EINVAL;
	}
	if (errno == ERANGE || n < min || n > max) {
		report(p, p->lineno, "%s: %s is out of range %lld..%lld", keys[key].name, value, min, max);
		return -EINVAL;
	}
	*out = n;
	return 0;
}

static int get_duration(struct parser *p, enum key key, const char *value,
                        uint64_t min, uint64_t max, uint64_t *out)
{
	char lo[32], hi[32];
	uint64_t ms;

	int e = config_parse_duration(value, &ms);

	if (e == -EINVAL) {
		report(p, p->lineno, "%s: \"%s\" is not a duration (such as 250ms, 3s, 2min, 1h, 1d, 2w)",
		       keys[key].name, value);
		return -EINVAL;
	}
	if (e < 0 || ms < min || ms > max) {
		report(p, p->lineno, "%s: %s is out of range %s..%s", keys[key].name, value,
		       config_format_duration(min, lo, sizeof lo), config_format_duration(max, hi, sizeof hi));
		return -EINVAL;
	}
	*out = ms;
	return 0;
}

static int get_size(struct parser *p, enum key key, const char *value, uint64_t min,
                    uint64_t *out)
{
	char lo[32];
	uint64_t bytes;

	int e = config_parse_size(value, &bytes);

	if (e == -EINVAL) {
		report(p, p->lineno, "%s: \"%s\" is not a size (such as 64MiB, 1GiB, 1GB, 4096)",
		       keys[key].name, value);
		return -EINVAL;
	}
	if (e < 0) {
		report(p, p->lineno, "%s: %s is too large (at most 2^64 - 1 bytes)", keys[key].name,
		       value);
		return -EINVAL;
	}
	if (bytes && bytes < min) {
		report(p, p->lineno, "%s: %s is below %s (0: no cap)", keys[key].name, value,
		       config_format_size(min, lo, sizeof lo));
		return -EINVAL;
	}
	*out = bytes;
	return 0;
}

static int get_bool(struct parser *p, enum key key, const char *value, bool *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(value, yes[i]) == 0 || strcasecmp(value, no[i]) == 0) {
			*out = strcasecmp(value, yes[i]) == 0;
			return 0;
		}
	}
	report(p, p->lineno, "%s: \"%s\" is not a boolean (yes/no, true/false, on/off, 1/0)",
	       keys[key].name, value);
	return -EINVAL;
}

static int set_string(struct parser *p, char **dst, const char *value)
{
	*dst = strdup(value);
	if (!*dst) {
		p->nomem = true;
		return -ENOMEM;
	}
	return 0;
}

/* threshold, consecutive, cooldown and process_threshold: the defaults in
 * [cpumond], a watch's own values in [watch NAME]. */
static int set_limit(struct parser *p, enum key key, const char *value,
                     int *threshold, int *consecutive, uint64_t *cooldown_ms,
                     int *process_threshold)
{
	long long n;

	switch (key) {
	case KEY_PROCESS_THRESHOLD:
		if (get_int(p, key, value, 0, PROCESS_THRESHOLD_MAX, &n) < 0)
			return -EINVAL;
		*process_threshold = (int)n;
		return 0;
	case KEY_THRESHOLD:
		if (get_int(p, key, value, 1, THRESHOLD_MAX, &n) < 0)
			return -EINVAL;
		*threshold = (int)n;
		return 0;
	case KEY_CONSECUTIVE:
		if (get_int(p, key, value, 1, CONSECUTIVE_MAX, &n) < 0)
			return -EINVAL;
		*consecutive = (int)n;
		return 0;
	default:
		return get_duration(p, key, value, 0, COOLDOWN_MAX_MS, cooldown_ms);
	}
}

static int set_global(struct parser *p, enum key key, const char *value)
{
	struct config *c = p->cfg;
	long long n;

	switch (key) {
	case KEY_INTERVAL:
		return get_duration(p, key, value, INTERVAL_MIN_MS, INTERVAL_MAX_MS, &c->interval_ms);
	case KEY_DATABASE:
		return set_string(p, &c->database, value);
	case KEY_MAX_FRAMES:
		if (get_int(p, key, value, 1, MAX_FRAMES_MAX, &n) < 0)
			return -EINVAL;
		c->max_frames = (int)n;
		return 0;
	case KEY_SAMPLE_INTERVAL:
		return get_duration(p, key, value, SAMPLE_INTERVAL_MIN_MS, SAMPLE_INTERVAL_MAX_MS,
		                    &c->sample_interval_ms);
	case KEY_EPISODE_SAMPLES:
		if (get_int(p, key, value, 0, EPISODE_SAMPLES_MAX, &n) < 0)
			return -EINVAL;
		c->episode_samples = (int)n;
		return 0;
	case KEY_MAX_DUMPS_PER_SECOND:
		if (get_int(p, key, value, 1, MAX_DUMPS_PER_SECOND_MAX, &n) < 0)
			return -EINVAL;
		c->max_dumps_per_second = (int)n;
		return 0;
	case KEY_HISTORY_THREADS:
		if (get_int(p, key, value, 0, HISTORY_THREADS_MAX, &n) < 0)
			return -EINVAL;
		c->history_threads = (int)n;
		return 0;
	case KEY_HISTORY_FLOOR:
		if (get_int(p, key, value, 0, THRESHOLD_MAX, &n) < 0)
			return -EINVAL;
		c->history_floor = (int)n;
		return 0;
	case KEY_CAPTURE:
		for (int i = CONFIG_CAPTURE_AUTO; i <= CONFIG_CAPTURE_PTRACE; i++)
			if (strcmp(value, config_capture_name((enum config_capture)i)) == 0) {
				c->capture = (enum config_capture)i;
				return 0;
			}
		report(p, p->lineno, "capture: \"%s\" is not a capture (auto, perf or ptrace)", value);
		return -EINVAL;
	case KEY_RETENTION:
		return get_duration(p, key, value, 0, RETENTION_MAX_MS, &c->retention_ms);
	case KEY_MAX_DATABASE_SIZE:
		return get_size(p, key, value, MAX_DATABASE_SIZE_MIN, &c->max_database_size);
	case KEY_JOURNAL:
		return get_bool(p, key, value, &c->journal);
	case KEY_STARVED:
		return get_bool(p, key, value, &c->starved);
	case KEY_STALL_AFTER:
		p->stall_after_line = p->lineno;
		return get_duration(p, key, value, 0, COOLDOWN_MAX_MS, &c->stall_after_ms);
	case KEY_METRICS_FILE:
	case KEY_EVENT_LOG:
		if (value[0] != '/') {
			report(p, p->lineno, "%s: %s is not an absolute path", keys[key].name, value);
			return -EINVAL;
		}
		return set_string(p, key == KEY_EVENT_LOG ? &c->event_log : &c->metrics_file, value);
	default:
		return set_limit(p, key, value, &c->threshold, &c->consecutive, &c->cooldown_ms,
		                 &c->process_threshold);
	}
}

/* glibc's regcomp expands repetitions into copies of the repeated part:
 * "((a{99}){99}){99}" and a run of forty '+' both took more than 2 GiB
 * (found by fuzz_config).  Each {n,m} copies its operand m times and each
 * '+' twice, so the product of those factors bounds the expansion however
 * they nest; with the length capped (CONFIG_REGEX_MAX_LEN), the product
 * bounds the memory too.  Real selectors stay far below the limit. */
#define REGEX_REPEAT_MAX 1000

static uint64_t regex_repeat_product(const char *re)
{
	uint64_t product = 1;

	for (const char *c = re; *c && product <= REGEX_REPEAT_MAX; c++) {
		if (*c == '\\' && c[1]) {
			c++;                    /* an escaped character is literal */
		} else if (*c == '[') {
			/* A bracket expression: "]" first in it is literal. */
			c += c[1] == '^' ? 2 : 1;
			if (*c == ']')
				c++;
			while (*c && *c != ']')
				c++;
			if (!*c)
				break;
		} else if (*c == '+') {
			product *= 2;
		} else if (*c == '{') {
			char *end;
			unsigned long lo = strtoul(c + 1, &end, 10), hi = lo;

			if (*end == ',')
				hi = end[1] == '}' ? lo + 1 : strtoul(end + 1, &end, 10);
			if (hi < lo)
				hi = lo;
			product *= hi > 1 ? hi : 1;
		}
	}
	return product;
}

int config_compile_regex(const char *text, regex_t *re, char *why, size_t whylen)
{
	int rc;

	if (strlen(text) > CONFIG_REGEX_MAX_LEN) {
		snprintf(why, whylen, "regex \"%.40s…\" is longer than %d bytes", text,
		         CONFIG_REGEX_MAX_LEN);
		return -EINVAL;
	}
	if (regex_repeat_product(text) > REGEX_REPEAT_MAX) {
		snprintf(why, whylen, "regex \"%s\" repeats too much: its repetitions "
		         "({n,m} m times, + twice) multiply to more than %d", text, REGEX_REPEAT_MAX);
		return -EINVAL;
	}
	rc = regcomp(re, text, REG_EXTENDED | REG_NOSUB);
	if (rc) {
		char msg[128];

		regerror(rc, re, msg, sizeof msg);
		snprintf(why, whylen, "invalid regex \"%s\": %s", text, lowercase_first(msg));
		return -EINVAL;
	}
	return 0;
}

/* Compiles VALUE into *RE and keeps its text in *TEXT. */
static int set_regex(struct parser *p, enum key key, const char *value, regex_t *re,
                     char **text)
{
	char why[512];

	if (config_compile_regex(value, re, why, sizeof why) < 0) {
		report(p, p->lineno, "%s: %s", keys[key].name, why);
		return -EINVAL;
	}
	if (set_string(p, text, value) < 0) {
		regfree(re);
		return -ENOMEM;
	}
	return 0;
}

/* A number is a uid, as for chown(1), even when a user has that name. */
static int set_user(struct parser *p, struct watch_config *w, const char *value)
{
	long long n;

	if (strspn(value, "0123456789") == strlen(value)) {
		if (get_int(p, KEY_USER, value, 0, UID_MAX_VALID, &n) < 0)
			return -EINVAL;
		w->uid = (uid_t)n;
	} else {
		struct passwd *pw = getpwnam(value);

		if (!pw) {
			report(p, p->lineno, "user: no user named \"%s\"", value);
			return -EINVAL;
		}
		w->uid = pw->pw_uid;
	}
	return set_string(p, &w->user, value);
}

static int set_watch(struct parser *p, struct watch_config *w, enum key key, const char *value)
{
	long long n;

	switch (key) {
	case KEY_PID:
		if (get_int(p, key, value, 1, PID_MAX, &n) < 0)
			return -EINVAL;
		w->pid = (pid_t)n;
		return 0;
	case KEY_PIDFILE:
	case KEY_EXE:
		if (value[0] != '/') {
			report(p, p->lineno, "%s: %s is not an absolute path", keys[key].name, value);
			return -EINVAL;
		}
		return set_string(p, key == KEY_EXE ? &w->exe : &w->pidfile, value);
	case KEY_COMM:
		if (strlen(value) > COMM_MAX) {
			report(p, p->lineno, "comm: \"%s\" is longer than the kernel's 15 bytes "
			       "(match the full name with cmdline)", value);
			return -EINVAL;
		}
		return set_string(p, &w->comm, value);
	case KEY_CMDLINE:
		return set_regex(p, key, value, &w->cmdline_re, &w->cmdline);
	case KEY_USER:
		return set_user(p, w, value);
	case KEY_UNIT:
		/* A unit name never holds one; a cgroup path does. */
		if (strchr(value, '/')) {
			report(p, p->lineno, "unit: \"%s\" holds a '/', which no unit name does "
			       "(match the cgroup path with cgroup)", value);
			return -EINVAL;
		}
		return set_string(p, &w->unit, value);
	case KEY_CGROUP:
		return set_regex(p, key, value, &w->cgroup_re, &w->cgroup);
	case KEY_ALL:
		return get_bool(p, key, value, &w->all);
	default:
		return set_limit(p, key, value, &w->threshold, &w->consecutive, &w->cooldown_ms,
		                 &w->process_threshold);
	}
}

/* Where KEY belongs, for "not a ... key" errors. */
static const char *key_home(enum key key)
{
	if (key >= FIRST_SELECTOR)
		return "selectors go in [watch NAME]";
	if (keys[key].report)
		return "set it in [report]";
	return "set it in [cpumond]";
}

static enum key find_key(const char *name)
{
	enum key k;

	for (k = 0; k < NKEYS; k++)
		if (strcmp(keys[k].name, name) == 0)
			break;
	return k;
}

/* Errors are reported here rather than returned to inih, which would keep
 * only the first. */
static int handle_pair(void *user, const char *section, const char *name, const char *value)
{
	struct parser *p = user;
	bool global = p->section == SECTION_GLOBAL;
	bool in_report = p->section == SECTION_REPORT;
	enum key key = find_key(name);
	int rc;

	(void)section;  /* read_line keeps the section: see there */
	if (!*name)
		return 1;  /* "= value": read_line reports the line */
	p->pair_pending = false;
	if (p->section == SECTION_IGNORED)
		return 1;  /* its header was reported */
	if (p->section == SECTION_NONE)
		report(p, p->lineno, "%s: outside any section (put it under [cpumond] or [watch NAME])", name);
	else if (key == NKEYS && global)
		report(p, p->lineno, "%s: unknown key (expected interval, threshold, consecutive, "
		       "cooldown, database, max_frames, sample_interval, episode_samples, "
		       "max_dumps_per_second, capture, retention, max_database_size, journal, "
		       "metrics_file, event_log, history_threads, history_floor, starved, "
		       "process_threshold or stall_after)", name);
	else if (key == NKEYS && in_report)
		report(p, p->lineno, "%s: unknown key (expected ignore)", name);
	else if (key == NKEYS)
		report(p, p->lineno, "%s: unknown key (expected pid, pidfile, comm, exe, cmdline, user, "
		       "unit, cgroup, all, threshold, consecutive, cooldown or process_threshold)", name);
	else if (global && !keys[key].global)
		report(p, p->lineno, "%s: not a [cpumond] key (%s)", name, key_home(key));
	else if (in_report && !keys[key].report)
		report(p, p->lineno, "%s: not a [report] key (%s)", name, key_home(key));
	else if (!global && !in_report && !keys[key].watch)
		report(p, p->lineno, "%s: not a watch key (%s)", name, key_home(key));
	else if (p->seen[key])
		report(p, p->lineno, "%s: duplicate key (first at line %d)", name, p->seen[key]);
	else {
		p->seen[key] = p->lineno;
		if (!*value) {
			report(p, p->lineno, "%s: no value", name);
			rc = -EINVAL;
		} else if (global) {
			rc = set_global(p, key, value);
		} else if (in_report) {
			rc = set_regex(p, key, value, &p->cfg->report_ignore_re,
			               &p->cfg->report_ignore);
		} else {
			rc = set_watch(p, &p->cfg->watches[p->cfg->nwatches - 1], key, value);
		}
		if (rc < 0 && key >= FIRST_SELECTOR)
			p->bad_selector = true;
	}
	return 1;
}

/* A watch that names no process is an error, unless one of its selectors
 * was, which says it better. */
static void end_section(struct parser *p)
{
	const struct watch_config *w;

	if (p->section != SECTION_WATCH)
		return;
	w = &p->cfg->watches[p->cfg->nwatches - 1];
	if (!p->bad_selector && !w->pid && !w->pidfile && !w->comm && !w->exe &&
	    !w->cmdline && !w->user && !w->unit && !w->cgroup && !w->all)
		report(p, w->line, "[watch %s]: no selector (pid, pidfile, comm, exe, cmdline, "
		       "user, unit, cgroup or all = yes)", w->name);
}

static int add_watch(struct parser *p, const char *name)
{
	struct config *c = p->cfg;
	struct watch_config *watches;
	char *copy = strdup(name);

	watches = copy ? reallocarray(c->watches, c->nwatches + 1, sizeof *watches) : NULL;
	if (!watches) {
		free(copy);
		p->nomem = true;
		return -ENOMEM;
	}
	c->watches = watches;
	c->watches[c->nwatches++] = (struct watch_config){
		.name = copy,
		.line = p->lineno,
		.cooldown_ms = COOLDOWN_UNSET,
		.process_threshold = PROCESS_THRESHOLD_UNSET,
	};
	return 0;
}

static void open_watch(struct parser *p, const char *name)
{
	const struct config *c = p->cfg;

	if (!*name) {
		report(p, p->lineno, "[watch]: no name (write [watch NAME])");
		return;
	}
	for (size_t i = 0; i < c->nwatches; i++) {
		if (strcmp(c->watches[i].name, name) == 0) {
			report(p, p->lineno, "[watch %s]: duplicate watch (first at line %d)",
			       name, c->watches[i].line);
			return;
		}
	}
	if (add_watch(p, name) == 0)
		p->section = SECTION_WATCH;
}

/* TEXT starts with '['.  The keys of a section whose header is wrong are
 * ignored: the header error says it all. */
static void read_section(struct parser *p, char *text)
{
	char *close = strchr(text, ']');
	char *name, *rest;

	end_section(p);
	p->section = SECTION_IGNORED;
	memset(p->seen, 0, sizeof p->seen);
	p->bad_selector = false;
	if (!close) {
		report(p, p->lineno, "%s: no closing ']'", text);
		return;
	}
	*close = '\0';
	name = trim(text + 1);
	rest = close + 1;
	rest += strspn(rest, " \t");
	if (*rest && *rest != ';')
		report(p, p->lineno, "[%s]: text after ']' (start a comment with ';')", name);

	if (strcmp(name, "cpumond") == 0) {
		if (p->global_line) {
			report(p, p->lineno, "[cpumond]: duplicate section (first at line %d)", p->global_line);
			return;
		}
		p->global_line = p->lineno;
		p->section = SECTION_GLOBAL;
	} else if (strcmp(name, "report") == 0) {
		if (p->report_line) {
			report(p, p->lineno, "[report]: duplicate section (first at line %d)", p->report_line);
			return;
		}
		p->report_line = p->lineno;
		p->section = SECTION_REPORT;
	} else if (strncmp(name, "watch", 5) == 0 && (!name[5] || isspace((unsigned char)name[5]))) {
		open_watch(p, trim(name + 5));
	} else {
		report(p, p->lineno, "[%s]: unknown section (expected [cpumond], [report] or [watch NAME])",
		       name);
	}
}

/* The ini_reader given to inih.  inih asks for one line per call and is done
 * with it before the next call, so counting calls gives exact line numbers.
 * Comments and section headers stop here and inih gets an empty line: inih
 * calls no handler for a section without keys, and cuts section names to 49
 * bytes.  Indentation is removed, so inih's multi-line values (an indented
 * line continues the value above) never apply.  inih's buffer is NUM bytes
 * (200 in Debian's build); a longer key line is an error here, where inih
 * would silently read its tail as the next line. */
static char *read_line(char *str, int num, void *stream)
{
	struct parser *p = stream;
	char *text;
	size_t len;

	if (p->pair_pending)
		report(p, p->lineno, "\"%s\": not a [section], key = value or ; comment", p->text);
	p->pair_pending = false;
	if (getline(&p->line, &p->linesize, p->in) < 0) {
		if (ferror(p->in))
			p->read_errno = errno;
		return NULL;
	}
	p->lineno++;
	text = p->line;
	if (p->lineno == 1 && strncmp(text, "\xef\xbb\xbf", 3) == 0)
		text += 3;  /* a UTF-8 byte order mark */
	text = trim(text);
	len = strlen(text);
	p->text = text;
	str[0] = '\0';
	if (*text == '[') {
		read_section(p, text);
	} else if (*text && *text != ';' && *text != '#') {
		if (len >= (size_t)num) {
			report(p, p->lineno, "line too long (%zu bytes, at most %d)", len, num - 1);
		} else {
			memcpy(str, text, len + 1);
			p->pair_pending = true;
		}
	}
	return str;
}

/* Fills in what the file left out.  Returns nothing: failures are counted
 * in P. */
static void finish(struct parser *p)
{
	struct config *c = p->cfg;

	for (size_t i = 0; i < c->nwatches; i++) {
		struct watch_config *w = &c->watches[i];

		if (!w->threshold)
			w->threshold = c->threshold;
		if (!w->consecutive)
			w->consecutive = c->consecutive;
		if (w->cooldown_ms == COOLDOWN_UNSET)
			w->cooldown_ms = c->cooldown_ms;
		if (w->process_threshold == PROCESS_THRESHOLD_UNSET)
			w->process_threshold = c->process_threshold;
	}
	/* A thread is seen not to run only between two samples: one interval
	 * would call every thread between two wake-ups stalled. */
	if (c->stall_after_ms && c->stall_after_ms < 2 * c->interval_ms) {
		char a[32], b[32];

		report(p, p->stall_after_line, "stall_after: %s is less than two intervals (2 x %s)",
		       config_format_duration(c->stall_after_ms, a, sizeof a),
		       config_format_duration(c->interval_ms, b, sizeof b));
	}
	if (!c->database)
		set_string(p, &c->database, CONFIG_DEFAULT_DATABASE);
	set_string(p, &c->path, p->name);
}

static int parse_stream(FILE *in, const char *name, struct config *cfg, FILE *errors)
{
	struct config c = {
		.interval_ms = DEFAULT_INTERVAL_MS,
		.threshold = DEFAULT_THRESHOLD,
		.consecutive = DEFAULT_CONSECUTIVE,
		.cooldown_ms = DEFAULT_COOLDOWN_MS,
		.max_frames = DEFAULT_MAX_FRAMES,
		.sample_interval_ms = DEFAULT_SAMPLE_INTERVAL_MS,
		.episode_samples = DEFAULT_EPISODE_SAMPLES,
		.max_dumps_per_second = DEFAULT_MAX_DUMPS_PER_SECOND,
		.retention_ms = DEFAULT_RETENTION_MS,
		.max_database_size = DEFAULT_MAX_DATABASE_SIZE,
		.journal = true,
		.history_threads = DEFAULT_HISTORY_THREADS,
		.history_floor = DEFAULT_HISTORY_FLOOR,
		.starved = true,
	};
	struct parser p = { .name = name, .in = in, .errors = errors, .cfg = &c };
	char buf[128];
	int rc;

	/* A positive return is the first line inih rejected, already reported
	 * by read_line; -2 is inih failing to allocate its line buffer. */
	if (ini_parse_stream(read_line, &p, handle_pair, &p) < 0)
		p.nomem = true;
	end_section(&p);
	free(p.line);
	finish(&p);
	if (p.read_errno) {
		rc = -p.read_errno;
		report(&p, 0, "cannot read: %s", errno_text(p.read_errno, buf, sizeof buf));
	} else if (p.nomem) {
		rc = -ENOMEM;
		report(&p, 0, "out of memory");
	} else {
		if (!c.nwatches)
			report(&p, 0, "no [watch NAME] section: nothing to watch");
		rc = p.nerrors ? -EINVAL : 0;
	}
	if (rc < 0)
		config_free(&c);
	*cfg = c;
	return rc;
}

int config_load(const char *path, struct config *cfg, FILE *errors)
{
	FILE *in = fopen(path, "re");
	char buf[128];
	int rc;

	if (!in) {
		rc = -errno;
		memset(cfg, 0, sizeof *cfg);
		fprintf(errors, "%s:0: cannot open: %s\n", path, errno_text(-rc, buf, sizeof buf));
		return rc;
	}
	rc = parse_stream(in, path, cfg, errors);
	fclose(in);
	return rc;
}

int config_parse_string(const char *text, const char *name, struct config *cfg, FILE *errors)
{
	/* fmemopen wants a writable buffer, even to read. */
	char *copy = strdup(text);
	FILE *in = copy ? fmemopen(copy, strlen(copy), "r") : NULL;
	int rc;

	if (!in) {
		free(copy);
		memset(cfg, 0, sizeof *cfg);
		fprintf(errors, "%s:0: out of memory\n", name);
		return -ENOMEM;
	}
	rc = parse_stream(in, name, cfg, errors);
	fclose(in);
	free(copy);
	return rc;
}

/* "KEY = VALUE", read back as it is (both found by tests/fuzz/fuzz_config.c):
 * inih reads ';' after a blank as the start of a comment, so a value that
 * begins with ';' goes right after the '='; and a line fits inih's buffer
 * (200 bytes with its NUL in Debian's build), so a value that fitted as
 * "KEY=VALUE" is not printed with blanks that would make it too long. */
static void put_string(FILE *out, const char *key, const char *value)
{
	bool tight = value[0] == ';' || strlen(key) + strlen(value) + 3 > 199;

	fprintf(out, "%s%s%s\n", key, tight ? "=" : " = ", value);
}

void config_print(const struct config *cfg, FILE *out)
{
	char d[32];

	fprintf(out, "[cpumond]\n");
	fprintf(out, "interval = %s\n", config_format_duration(cfg->interval_ms, d, sizeof d));
	fprintf(out, "threshold = %d\n", cfg->threshold);
	fprintf(out, "consecutive = %d\n", cfg->consecutive);
	fprintf(out, "cooldown = %s\n", config_format_duration(cfg->cooldown_ms, d, sizeof d));
	put_string(out, "database", cfg->database);
	fprintf(out, "max_frames = %d\n", cfg->max_frames);
	fprintf(out, "sample_interval = %s\n", config_format_duration(cfg->sample_interval_ms, d, sizeof d));
	fprintf(out, "episode_samples = %d\n", cfg->episode_samples);
	fprintf(out, "max_dumps_per_second = %d\n", cfg->max_dumps_per_second);
	fprintf(out, "capture = %s\n", config_capture_name(cfg->capture));
	fprintf(out, "retention = %s\n", config_format_duration(cfg->retention_ms, d, sizeof d));
	fprintf(out, "max_database_size = %s\n", config_format_size(cfg->max_database_size, d, sizeof d));
	fprintf(out, "journal = %s\n", cfg->journal ? "yes" : "no");
	fprintf(out, "starved = %s\n", cfg->starved ? "yes" : "no");
	fprintf(out, "process_threshold = %d\n", cfg->process_threshold);
	fprintf(out, "stall_after = %s\n", config_format_duration(cfg->stall_after_ms, d, sizeof d));
	if (cfg->metrics_file)
		put_string(out, "metrics_file", cfg->metrics_file);
	if (cfg->event_log)
		put_string(out, "event_log", cfg->event_log);
	fprintf(out, "history_threads = %d\n", cfg->history_threads);
	fprintf(out, "history_floor = %d\n", cfg->history_floor);
	if (cfg->report_ignore) {
		fprintf(out, "\n[report]\n");
		put_string(out, "ignore", cfg->report_ignore);
	}
	for (size_t i = 0; i < cfg->nwatches; i++) {
		const struct watch_config *w = &cfg->watches[i];

		fprintf(out, "\n[watch %s]\n", w->name);
		if (w->pid)
			fprintf(out, "pid = %d\n", (int)w->pid);
		if (w->pidfile)
			put_string(out, "pidfile", w->pidfile);
		if (w->comm)
			put_string(out, "comm", w->comm);
		if (w->exe)
			put_string(out, "exe", w->exe);
		if (w->cmdline)
			put_string(out, "cmdline", w->cmdline);
		if (w->user)
			put_string(out, "user", w->user);
		if (w->unit)
			put_string(out, "unit", w->unit);
		if (w->cgroup)
			put_string(out, "cgroup", w->cgroup);
		if (w->all)
			fprintf(out, "all = yes\n");
		fprintf(out, "threshold = %d\n", w->threshold);
		fprintf(out, "consecutive = %d\n", w->consecutive);
		fprintf(out, "cooldown = %s\n", config_format_duration(w->cooldown_ms, d, sizeof d));
		fprintf(out, "process_threshold = %d\n", w->process_threshold);
	}
}

const char *config_capture_name(enum config_capture capture)
{
	static const char *const names[] = { "auto", "perf", "ptrace" };

	return names[capture];
}

void config_free(struct config *cfg)
{
	for (size_t i = 0; i < cfg->nwatches; i++) {
		struct watch_config *w = &cfg->watches[i];

		free(w->name);
		free(w->pidfile);
		free(w->comm);
		free(w->exe);
		if (w->cmdline)
			regfree(&w->cmdline_re);
		free(w->cmdline);
		free(w->user);
		free(w->unit);
		if (w->cgroup)
			regfree(&w->cgroup_re);
		free(w->cgroup);
	}
	free(cfg->watches);
	if (cfg->report_ignore)
		regfree(&cfg->report_ignore_re);
	free(cfg->report_ignore);
	free(cfg->path);
	free(cfg->database);
	free(cfg->metrics_file);
	free(cfg->event_log);
	memset(cfg, 0, sizeof *cfg);
}
