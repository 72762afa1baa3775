/* report: groups and ranks the stacks of a window of events.  See report.h
 * for the frame name styles and the ranking. */
#include "cpumond/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/config.h"
#include "cpumond/flamegraph.h"
#include "cpumond/json.h"
#include "cpumond/log.h"
#include "stackdump/demangle.h"

#define TOP_DEFAULT 10
#define NAME_LEN 512             /* frame names are cut to NAME_LEN - 1 bytes */
#define TABLE_PROCS 3            /* processes named per group in the table */
#define TABLE_FRAMES 4           /* innermost frames shown before the entry */
#define JSON_PROCS 100           /* processes listed per group in JSON */
#define NONE UINT32_MAX

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)

static uint64_t fnv1a(const char *s, uint64_t h)
{
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= FNV_PRIME;
	}
	return h;
}

/* Makes room for one more element in *ARRAY of *CAP, holding N. */
static int grow(void *array, size_t *cap, size_t n, size_t size)
{
	void **p = array;
	size_t c;
	void *q;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : 16;
	q = reallocarray(*p, c, size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* An open-addressing table from a 64-bit key hash to an index; the caller
 * tells keys with the same hash apart (EQ). */
struct slot {
	uint64_t h;
	uint32_t idx;            /* index + 1; 0: empty */
};

struct map {
	struct slot *slots;
	size_t cap;              /* a power of two, or 0 */
	size_t n;
};

typedef bool (*map_eq_fn)(const void *ctx, uint32_t idx);

static uint32_t map_get(const struct map *m, uint64_t h, map_eq_fn eq, const void *ctx)
{
	if (!m->cap)
		return NONE;
	for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		const struct slot *s = &m->slots[i];

		if (!s->idx)
			return NONE;
		if (s->h == h && (!eq || eq(ctx, s->idx - 1)))
			return s->idx - 1;
	}
}

static void map_insert(struct slot *slots, size_t cap, uint64_t h, uint32_t idx1)
{
	size_t i = h & (cap - 1);

	while (slots[i].idx)
		i = (i + 1) & (cap - 1);
	slots[i] = (struct slot){ h, idx1 };
}

/* Adds H -> IDX; the caller has checked that the key is absent. */
static int map_put(struct map *m, uint64_t h, uint32_t idx)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		struct slot *slots = calloc(cap, sizeof *slots);

		if (!slots)
			return -ENOMEM;
		for (size_t i = 0; i < m->cap; i++)
			if (m->slots[i].idx)
				map_insert(slots, cap, m->slots[i].h, m->slots[i].idx);
		free(m->slots);
		m->slots = slots;
		m->cap = cap;
	}
	map_insert(m->slots, m->cap, h, idx + 1);
	m->n++;
	return 0;
}

/* Process and thread names, stored once each. */
struct strtab {
	char **s;
	size_t n, cap;
	struct map map;
};

struct str_key {
	const struct strtab *t;
	const char *s;
};

static bool str_eq(const void *ctx, uint32_t idx)
{
	const struct str_key *k = ctx;

	return strcmp(k->t->s[idx], k->s) == 0;
}

static int intern(struct strtab *t, const char *s, uint32_t *id)
{
	struct str_key k = { t, s ? s : "" };
	uint64_t h = fnv1a(k.s, FNV_OFFSET);
	uint32_t i = map_get(&t->map, h, str_eq, &k);
	char *copy;

	if (i != NONE) {
		*id = i;
		return 0;
	}
	if (grow(&t->s, &t->cap, t->n, sizeof *t->s) < 0 || !(copy = strdup(k.s)))
		return -ENOMEM;
	if (map_put(&t->map, h, (uint32_t)t->n) < 0) {
		free(copy);
		return -ENOMEM;
	}
	t->s[t->n] = copy;
	*id = (uint32_t)t->n++;
	return 0;
}

/* One exact stack. */
struct rstack {
	struct stackdump_stack st;   /* no frames until report_add_stack */
	bool given;
	uint64_t samples;
	uint32_t group;
	char *key;                   /* what groups it (report_finish) */
	char *signature;
	size_t entry;
};

/* One event, as far as the report needs it. */
struct revent {
	int64_t time_us;
	pid_t pid, tid;
	uint32_t comm, thread, host; /* in the string table */
	uint64_t key;                /* key stack hash, 0 for none */
	size_t first, n;             /* its counts */
};

struct rcount {
	uint32_t stack;
	unsigned count;
};

struct rgroup {
	struct report_group pub;
	char *name;
	uint32_t rep;                /* its stack with the most samples */
	size_t last_event;           /* + 1: the event counted last */
};

/* (group, process) and (group, thread) pairs, sorted and merged into the
 * groups' lists. */
struct ptuple {
	uint32_t group;
	uint32_t host;
	pid_t pid;
	uint32_t comm;
	uint64_t samples;
};

struct ttuple {
	uint32_t group;
	uint32_t host;
	pid_t pid, tid;
	uint32_t thread;
};

/* (group, host) with the samples and events it adds. */
struct htuple {
	uint32_t group;
	uint32_t host;
	uint64_t samples, events;
};

struct report {
	enum report_by by;
	const regex_t *ignore;
	struct rstack *stacks;
	size_t nstacks, capstacks;
	struct map stack_map;
	struct revent *events;
	size_t nevents, capevents;
	struct rcount *counts;
	size_t ncounts, capcounts;
	struct strtab strings;
	struct rgroup *groups;
	size_t ngroups;
	uint32_t *rank;
	uint32_t *live;              /* the stacks with samples */
	struct report_process *procs;
	struct report_host *hosts;
	const char **thread_names;
	struct report_totals totals;
};

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

/* ---- Frame names ---- */

/* Whether S, which starts with '.', is one or more compiler suffixes to its
 * end. */
static bool only_suffixes(const char *s)
{
	/* NUMBER: the suffix needs ".N" after it; 0: it may have one. */
	static const struct {
		const char *word;
		bool number;
	} suffixes[] = {
		{ "constprop", true }, { "isra", true }, { "part", true }, { "cold", false },
		{ "lto_priv", true }, { "llvm", true }, { "localalias", false },
	};

	while (*s) {
		bool found = false;

		if (*s != '.')
			return false;
		s++;
		for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0] && !found; i++) {
			size_t len = strlen(suffixes[i].word);
			const char *p;

			if (strncmp(s, suffixes[i].word, len) != 0 || (s[len] && s[len] != '.'))
				continue;
			p = s + len;
			if (*p == '.' && p[1] >= '0' && p[1] <= '9') {
				for (p++; *p >= '0' && *p <= '9'; p++)
					;
			} else if (suffixes[i].number) {
				continue;
			}
			if (*p && *p != '.')
				continue;
			s = p;
			found = true;
		}
		if (!found)
			return false;
	}
	return true;
}

size_t report_signature_name(const char *symbol, char *buf, size_t len)
{
	size_t n = strlen(symbol);

	/* The first '.' (not the leading one: ".cold" alone stays a name)
	 * from which only suffixes follow. */
	for (const char *dot = strchr(symbol + (symbol[0] != '\0'), '.'); dot;
	     dot = strchr(dot + 1, '.')) {
		if (only_suffixes(dot)) {
			n = (size_t)(dot - symbol);
			break;
		}
	}
	if (len > 0) {
		size_t c = n < len - 1 ? n : len - 1;

		memcpy(buf, symbol, c);
		buf[c] = '\0';
	}
	return n;
}

void report_frame_name(const struct stackdump_frame *f, enum report_name style, char *buf,
                       size_t len)
{
	bool named = f->symbol && f->symbol[0];

	if (len == 0)
		return;
	if (named && style != REPORT_NAME_EXACT) {
		/* The suffixes off the linkage name, then demangled: the
		 * signature of "_Z4leafm.constprop.0" is "leaf(unsigned long)". */
		char linkage[NAME_LEN];

		report_signature_name(f->symbol, linkage, sizeof linkage);
		demangle_into(linkage, buf, len);
	} else if (!named && style == REPORT_NAME_SIGNATURE)
		snprintf(buf, len, "[%s]", stackdump_module_file(f->module));
	else
		stackdump_function_name(f, buf, len);
}

/* ---- Aggregation ---- */

int report_new(enum report_by by, const regex_t *ignore, struct report **out)
{
	struct report *r = calloc(1, sizeof *r);

	*out = r;
	if (!r)
		return -ENOMEM;
	r->by = by;
	r->ignore = ignore;
	return 0;
}

void report_free(struct report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nstacks; i++) {
		stackdump_stack_free(&r->stacks[i].st);
		free(r->stacks[i].key);
		free(r->stacks[i].signature);
	}
	free(r->stacks);
	free(r->stack_map.slots);
	free(r->events);
	free(r->counts);
	for (size_t i = 0; i < r->strings.n; i++)
		free(r->strings.s[i]);
	free(r->strings.s);
	free(r->strings.map.slots);
	for (size_t i = 0; i < r->ngroups; i++)
		free(r->groups[i].name);
	free(r->groups);
	free(r->rank);
	free(r->live);
	free(r->procs);
	free(r->hosts);
	free(r->thread_names);
	free(r);
}

static bool stack_eq(const void *ctx, uint32_t idx)
{
	(void)ctx;
	(void)idx;
	return true;  /* the key is the stack hash itself */
}

static uint32_t find_stack(const struct report *r, uint64_t hash)
{
	return map_get(&r->stack_map, hash, stack_eq, NULL);
}

/* The index of stack HASH, added without frames when new. */
static int stack_index(struct report *r, uint64_t hash, uint32_t *idx)
{
	uint32_t i = find_stack(r, hash);

	if (i == NONE) {
		if (r->nstacks >= NONE - 1 ||
		    grow(&r->stacks, &r->capstacks, r->nstacks, sizeof *r->stacks) < 0 ||
		    map_put(&r->stack_map, hash, (uint32_t)r->nstacks) < 0)
			return -ENOMEM;
		i = (uint32_t)r->nstacks++;
		memset(&r->stacks[i], 0, sizeof r->stacks[i]);
		r->stacks[i].st.hash = hash;
	}
	*idx = i;
	return 0;
}

bool report_has_stack(const struct report *r, uint64_t hash)
{
	uint32_t i = find_stack(r, hash);

	return i != NONE && r->stacks[i].given;
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

int report_add_stack(struct report *r, const struct stackdump_stack *st)
{
	struct stackdump_stack *copy;
	uint32_t i;

	if (report_has_stack(r, st->hash))
		return -EEXIST;
	if (stack_index(r, st->hash, &i) < 0)
		return -ENOMEM;
	copy = &r->stacks[i].st;
	copy->frames = st->nframes ? calloc(st->nframes, sizeof *copy->frames) : NULL;
	if (st->nframes && !copy->frames)
		return -ENOMEM;
	copy->truncated = st->truncated;
	for (size_t k = 0; k < st->nframes; k++) {
		const struct stackdump_frame *f = &st->frames[k];
		struct stackdump_frame *g = &copy->frames[k];

		*g = *f;
		g->module = dup_or_empty(f->module);
		g->build_id = dup_or_empty(f->build_id);
		g->symbol = f->symbol ? strdup(f->symbol) : NULL;
		copy->nframes = k + 1;  /* counted now so that report_free frees it */
		if (!g->module || !g->build_id || (f->symbol && !g->symbol))
			return -ENOMEM;
	}
	r->stacks[i].given = true;
	return 0;
}

static int add_count(struct report *r, uint64_t hash, unsigned count)
{
	uint32_t i;

	if (stack_index(r, hash, &i) < 0 ||
	    grow(&r->counts, &r->capcounts, r->ncounts, sizeof *r->counts) < 0)
		return -ENOMEM;
	r->counts[r->ncounts++] = (struct rcount){ i, count };
	r->totals.samples += count;
	return 0;
}

int report_add_event(struct report *r, const struct store_event *ev)
{
	struct revent e = {
		.time_us = ev->time_us, .pid = ev->pid, .tid = ev->tid,
		.key = ev->stack.nframes > 0 || ev->nstacks > 0 ? ev->stack.hash : 0,
		.first = r->ncounts,
	};

	if (intern(&r->strings, ev->comm, &e.comm) < 0 ||
	    intern(&r->strings, ev->thread, &e.thread) < 0 ||
	    intern(&r->strings, ev->host, &e.host) < 0 ||
	    grow(&r->events, &r->capevents, r->nevents, sizeof *r->events) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < ev->nstacks; i++) {
		if (ev->stacks[i].count == 0 || ev->stacks[i].hash == 0)
			continue;
		if (add_count(r, ev->stacks[i].hash, ev->stacks[i].count) < 0)
			return -ENOMEM;
	}
	/* An event stored without its counts (one dump) is one sample. */
	if (ev->nstacks == 0 && ev->stack.nframes > 0 && ev->stack.hash != 0 &&
	    add_count(r, ev->stack.hash, 1) < 0)
		return -ENOMEM;
	e.n = r->ncounts - e.first;
	if (e.n == 0)
		r->totals.events_no_stack++;
	if (r->totals.events == 0 || ev->time_us < r->totals.first_us)
		r->totals.first_us = ev->time_us;
	if (r->totals.events == 0 || ev->time_us > r->totals.last_us)
		r->totals.last_us = ev->time_us;
	r->totals.events++;
	r->events[r->nevents++] = e;
	return 0;
}

bool report_frame_ignored(const struct report *r, const struct stackdump_frame *f)
{
	/* The C runtime's start frames lie under every thread (glibc 2.36:
	 * start_thread <- clone3; main <- __libc_start_call_main <-
	 * __libc_start_main_impl <- _start; older ones clone and __clone), so
	 * without them --by entry names the program's own entry. */
	static const char *const runtime[] = {
		"_start", "__libc_start_main", "__libc_start_main_impl", "__libc_start_call_main",
		"start_thread", "clone", "__clone", "clone3", "__clone3",
	};
	char name[NAME_LEN];

	report_frame_name(f, REPORT_NAME_SIGNATURE, name, sizeof name);
	for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; i++)
		if (strcmp(name, runtime[i]) == 0)
			return true;
	return r->ignore && regexec(r->ignore, name, 0, NULL, 0) == 0;
}

/* Sets the stack's key, signature and entry frame. */
static int stack_key(struct report *r, struct rstack *s)
{
	const struct stackdump_stack *st = &s->st;
	char name[NAME_LEN];
	char *sig = NULL;
	size_t len = 0;
	FILE *f;
	bool any = false;

	s->entry = st->nframes ? st->nframes - 1 : 0;
	for (size_t i = st->nframes; i-- > 0;) {
		if (!report_frame_ignored(r, &st->frames[i])) {
			s->entry = i;
			any = true;
			break;
		}
	}
	/* Outermost first, like folded stacks; when every frame is ignored
	 * the signature keeps them all rather than being empty. */
	f = open_memstream(&sig, &len);
	if (!f)
		return -ENOMEM;
	for (size_t i = st->nframes; i-- > 0;) {
		if (any && report_frame_ignored(r, &st->frames[i]))
			continue;
		report_frame_name(&st->frames[i], REPORT_NAME_SIGNATURE, name, sizeof name);
		fprintf(f, "%s%s", ftell(f) > 0 ? ";" : "", name);
	}
	if (st->nframes == 0)
		fputs("[no frames]", f);
	if (fclose(f) != 0 || !sig) {
		free(sig);
		return -ENOMEM;
	}
	s->signature = sig;
	switch (r->by) {
	case REPORT_BY_EXACT:
		snprintf(name, sizeof name, "%016" PRIx64, st->hash);
		break;
	case REPORT_BY_SIGNATURE:
		snprintf(name, sizeof name, "%016" PRIx64, fnv1a(sig, FNV_OFFSET));
		break;
	case REPORT_BY_TOP_FRAME:
	case REPORT_BY_ENTRY:
		if (st->nframes == 0)
			snprintf(name, sizeof name, "[no frames]");
		else
			report_frame_name(&st->frames[r->by == REPORT_BY_ENTRY ? s->entry : 0],
			                  REPORT_NAME_FUNCTION, name, sizeof name);
		break;
	}
	/* The signature text groups, not its hash: no collision can merge two
	 * groups. */
	s->key = strdup(r->by == REPORT_BY_SIGNATURE ? sig : name);
	return s->key ? 0 : -ENOMEM;
}

static int cmp_stack_key(const void *a, const void *b, void *ctx)
{
	const struct report *r = ctx;
	const struct rstack *x = &r->stacks[*(const uint32_t *)a];
	const struct rstack *y = &r->stacks[*(const uint32_t *)b];

	return strcmp(x->key, y->key);
}

/* Gives every stack with samples a group: stacks with the same key share
 * one. */
static int make_groups(struct report *r)
{
	uint32_t *order = calloc(r->nstacks ? r->nstacks : 1, sizeof *order);
	size_t n = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < r->nstacks; i++) {
		r->stacks[i].group = NONE;
		if (r->stacks[i].samples == 0)
			continue;
		if (stack_key(r, &r->stacks[i]) < 0) {
			free(order);
			return -ENOMEM;
		}
		order[n++] = (uint32_t)i;
	}
	qsort_r(order, n, sizeof *order, cmp_stack_key, r);
	r->groups = calloc(n ? n : 1, sizeof *r->groups);
	if (!r->groups) {
		free(order);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++) {
		struct rstack *s = &r->stacks[order[k]];
		struct rgroup *g;

		if (k == 0 || strcmp(s->key, r->stacks[order[k - 1]].key) != 0) {
			g = &r->groups[r->ngroups++];
			if (r->by == REPORT_BY_SIGNATURE) {
				char hex[17];

				snprintf(hex, sizeof hex, "%016" PRIx64, fnv1a(s->key, FNV_OFFSET));
				g->name = strdup(hex);
			} else {
				g->name = strdup(s->key);
			}
			if (!g->name) {
				free(order);
				return -ENOMEM;
			}
			g->pub.name = g->name;
			g->rep = order[k];
		}
		g = &r->groups[r->ngroups - 1];
		s->group = (uint32_t)(g - r->groups);
		g->pub.stacks++;
		/* The representative: most samples, then the lowest hash. */
		if (s->samples > r->stacks[g->rep].samples ||
		    (s->samples == r->stacks[g->rep].samples && s->st.hash < r->stacks[g->rep].st.hash))
			g->rep = order[k];
	}
	free(order);
	for (size_t i = 0; i < r->ngroups; i++) {
		struct rgroup *g = &r->groups[i];
		const struct rstack *rep = &r->stacks[g->rep];

		g->pub.stack = &rep->st;
		g->pub.entry = rep->entry;
		g->pub.signature = rep->signature;
	}
	return 0;
}

static int cmp_ptuple(const void *a, const void *b)
{
	const struct ptuple *x = a, *y = b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->host != y->host)
		return x->host < y->host ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->comm < y->comm ? -1 : x->comm > y->comm;
}

static int cmp_proc_samples(const void *a, const void *b)
{
	const struct report_process *x = a, *y = b;
	int c;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	if ((c = strcmp(x->host, y->host)) != 0)
		return c;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->comm, y->comm);
}

static int cmp_ttuple(const void *a, const void *b)
{
	const struct ttuple *x = a, *y = b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->host != y->host)
		return x->host < y->host ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int cmp_ttuple_name(const void *a, const void *b, void *ctx)
{
	const struct report *r = ctx;
	const struct ttuple *x = a, *y = b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return strcmp(r->strings.s[x->thread], r->strings.s[y->thread]);
}

/* The processes of each group, most samples first. */
static int group_procs(struct report *r, struct ptuple *p, size_t n)
{
	size_t m = 0;

	qsort(p, n, sizeof *p, cmp_ptuple);
	r->procs = calloc(n ? n : 1, sizeof *r->procs);
	if (!r->procs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (m > 0 && cmp_ptuple(&p[i], &p[i - 1]) == 0) {
			r->procs[m - 1].samples += p[i].samples;
			continue;
		}
		r->procs[m++] = (struct report_process){ r->strings.s[p[i].host], p[i].pid,
		                                         r->strings.s[p[i].comm], p[i].samples };
		p[m - 1].group = p[i].group;   /* p[0..m) now parallels procs */
	}
	for (size_t i = 0; i < m;) {
		size_t j = i;
		struct report_group *g = &r->groups[p[i].group].pub;

		while (j < m && p[j].group == p[i].group)
			j++;
		qsort(&r->procs[i], j - i, sizeof *r->procs, cmp_proc_samples);
		g->procs = &r->procs[i];
		g->nprocs = j - i;
		i = j;
	}
	return 0;
}

/* The distinct threads of each group and their distinct names. */
static int group_threads(struct report *r, struct ttuple *t, size_t n)
{
	size_t m = 0;

	qsort(t, n, sizeof *t, cmp_ttuple);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || cmp_ttuple(&t[i], &t[i - 1]) != 0)
			r->groups[t[i].group].pub.threads++;
	qsort_r(t, n, sizeof *t, cmp_ttuple_name, r);
	r->thread_names = calloc(n ? n : 1, sizeof *r->thread_names);
	if (!r->thread_names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct report_group *g = &r->groups[t[i].group].pub;

		if (i > 0 && cmp_ttuple_name(&t[i], &t[i - 1], r) == 0)
			continue;
		if (!g->thread_names)
			g->thread_names = &r->thread_names[m];
		r->thread_names[m++] = r->strings.s[t[i].thread];
		g->nthread_names++;
	}
	return 0;
}

static int cmp_htuple(const void *a, const void *b)
{
	const struct htuple *x = a, *y = b;

	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return x->host < y->host ? -1 : x->host > y->host;
}

static int cmp_host_samples(const void *a, const void *b)
{
	const struct report_host *x = a, *y = b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return strcmp(x->host, y->host);
}

/* The hosts of each group, most samples first. */
static int group_hosts(struct report *r, struct htuple *h, size_t n)
{
	size_t m = 0;

	qsort(h, n, sizeof *h, cmp_htuple);
	r->hosts = calloc(n ? n : 1, sizeof *r->hosts);
	if (!r->hosts)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (m > 0 && cmp_htuple(&h[i], &h[m - 1]) == 0) {
			r->hosts[m - 1].samples += h[i].samples;
			r->hosts[m - 1].events += h[i].events;
			continue;
		}
		r->hosts[m] = (struct report_host){ r->strings.s[h[i].host], h[i].samples,
		                                    h[i].events };
		h[m++] = h[i];   /* h[0..m) now parallels hosts */
	}
	for (size_t i = 0; i < m;) {
		size_t j = i;
		struct report_group *g = &r->groups[h[i].group].pub;

		while (j < m && h[j].group == h[i].group)
			j++;
		qsort(&r->hosts[i], j - i, sizeof *r->hosts, cmp_host_samples);
		g->hosts = &r->hosts[i];
		g->nhosts = j - i;
		i = j;
	}
	return 0;
}

/* Events, key events, first and last seen, processes, hosts and threads. */
static int count_groups(struct report *r)
{
	struct ptuple *p = calloc(r->ncounts ? r->ncounts : 1, sizeof *p);
	struct ttuple *t = calloc(r->ncounts ? r->ncounts : 1, sizeof *t);
	struct htuple *h = calloc(r->ncounts ? r->ncounts : 1, sizeof *h);
	size_t np = 0, nt = 0, nh = 0;
	int e;

	if (!p || !t || !h) {
		free(p);
		free(t);
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->nevents; i++) {
		const struct revent *ev = &r->events[i];

		for (size_t k = ev->first; k < ev->first + ev->n; k++) {
			const struct rstack *s = &r->stacks[r->counts[k].stack];
			struct rgroup *g = &r->groups[s->group];

			bool first = g->last_event != i + 1;

			g->pub.samples += r->counts[k].count;
			p[np++] = (struct ptuple){ s->group, ev->host, ev->pid, ev->comm,
			                           r->counts[k].count };
			h[nh++] = (struct htuple){ s->group, ev->host, r->counts[k].count, first };
			if (s->st.hash == ev->key)
				g->pub.key_events++;
			if (!first)
				continue;
			g->last_event = i + 1;
			g->pub.events++;
			if (g->pub.events == 1 || ev->time_us < g->pub.first_us)
				g->pub.first_us = ev->time_us;
			if (g->pub.events == 1 || ev->time_us > g->pub.last_us)
				g->pub.last_us = ev->time_us;
			t[nt++] = (struct ttuple){ s->group, ev->host, ev->pid, ev->tid, ev->thread };
		}
	}
	e = group_procs(r, p, np);
	if (e == 0)
		e = group_hosts(r, h, nh);
	if (e == 0)
		e = group_threads(r, t, nt);
	free(p);
	free(t);
	free(h);
	return e;
}

/* The distinct hosts of all events, those without a stack too. */
static int count_hosts(struct report *r)
{
	bool *seen = calloc(r->strings.n ? r->strings.n : 1, sizeof *seen);

	if (!seen)
		return -ENOMEM;
	r->totals.hosts = 0;
	for (size_t i = 0; i < r->nevents; i++) {
		if (!seen[r->events[i].host]) {
			seen[r->events[i].host] = true;
			r->totals.hosts++;
		}
	}
	free(seen);
	return 0;
}

static int cmp_rank(const void *a, const void *b, void *ctx)
{
	const struct report *r = ctx;
	const struct report_group *x = &r->groups[*(const uint32_t *)a].pub;
	const struct report_group *y = &r->groups[*(const uint32_t *)b].pub;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	if (x->events != y->events)
		return x->events > y->events ? -1 : 1;
	if (x->first_us != y->first_us)
		return x->first_us < y->first_us ? -1 : 1;
	return strcmp(x->name, y->name);
}

int report_finish(struct report *r)
{
	int e;

	for (size_t i = 0; i < r->ncounts; i++)
		r->stacks[r->counts[i].stack].samples += r->counts[i].count;
	if ((e = make_groups(r)) < 0 || (e = count_groups(r)) < 0 || (e = count_hosts(r)) < 0)
		return e;
	r->rank = calloc(r->ngroups ? r->ngroups : 1, sizeof *r->rank);
	if (!r->rank)
		return -ENOMEM;
	for (size_t i = 0; i < r->ngroups; i++)
		r->rank[i] = (uint32_t)i;
	qsort_r(r->rank, r->ngroups, sizeof *r->rank, cmp_rank, r);
	r->totals.groups = r->ngroups;
	r->live = calloc(r->nstacks ? r->nstacks : 1, sizeof *r->live);
	if (!r->live)
		return -ENOMEM;
	r->totals.stacks = 0;
	for (size_t i = 0; i < r->nstacks; i++)
		if (r->stacks[i].samples > 0)
			r->live[r->totals.stacks++] = (uint32_t)i;
	return 0;
}

void report_totals(const struct report *r, struct report_totals *t)
{
	*t = r->totals;
}

const struct report_group *report_group(const struct report *r, size_t i)
{
	return i < r->ngroups && r->rank ? &r->groups[r->rank[i]].pub : NULL;
}

const struct stackdump_stack *report_stack(const struct report *r, size_t i, uint64_t *samples)
{
	if (!r->live || i >= r->totals.stacks) {
		*samples = 0;
		return NULL;
	}
	*samples = r->stacks[r->live[i]].samples;
	return &r->stacks[r->live[i]].st;
}

/* ---- Output ---- */

static size_t shown(const struct report *r, int top)
{
	return top > 0 && (size_t)top < r->ngroups ? (size_t)top : r->ngroups;
}

static double share(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0.0;
}

/* "2026-11-29 13:04:05" in local time, with " +0100" when ZONE. */
static void put_local(int64_t t_us, bool zone, FILE *out)
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

/* One frame of the table, a function: "symbol (module)" or "module@0xSTART". */
static void put_table_frame(const struct report *r, const struct stackdump_frame *f,
                            size_t i, bool entry, FILE *out)
{
	char name[NAME_LEN];

	fprintf(out, "      #%-3zu ", i);
	report_frame_name(f, REPORT_NAME_EXACT, name, sizeof name);
	stackdump_put_escaped(name, out);
	if (f->symbol && f->symbol[0]) {
		fputs(" (", out);
		stackdump_put_escaped(stackdump_module_file(f->module), out);
		fputc(')', out);
	}
	if (entry)
		fputs("  <- entry", out);
	else if (report_frame_ignored(r, f))
		fputs("  (ignored)", out);
	fputc('\n', out);
}

/* The innermost frames, then the entry point. */
static void put_table_frames(const struct report *r, const struct report_group *g, FILE *out)
{
	const struct stackdump_stack *st = g->stack;
	size_t last = g->entry;

	if (st->nframes == 0) {
		fputs("      (no frames)\n", out);
		return;
	}
	/* "... 1 more" would take the line the frame takes. */
	for (size_t i = 0; i <= last && (i < TABLE_FRAMES || last <= TABLE_FRAMES + 1); i++)
		put_table_frame(r, &st->frames[i], i, i == last, out);
	if (last > TABLE_FRAMES + 1) {
		fprintf(out, "      ...  %zu more\n", last - TABLE_FRAMES);
		put_table_frame(r, &st->frames[last], last, true, out);
	}
	/* The frames outside the entry are ignored ones, by its definition. */
	if (st->nframes > last + 1)
		fprintf(out, "      ...  %zu ignored frame%s\n", st->nframes - last - 1,
		        st->nframes - last - 1 == 1 ? "" : "s");
	else if (st->truncated)
		fputs("      ...  (truncated)\n", out);
}

/* "hosts: web-1 (240 samples), web-2 (120)" */
static void put_table_hosts(const struct report_group *g, FILE *out)
{
	fputs("      hosts: ", out);
	for (size_t i = 0; i < g->nhosts && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		stackdump_put_escaped(g->hosts[i].host, out);
		fprintf(out, " (%" PRIu64 "%s)", g->hosts[i].samples, i == 0 ? " samples" : "");
	}
	if (g->nhosts > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nhosts - TABLE_PROCS);
	fputc('\n', out);
}

/* Processes as comm[pid], or comm[pid]@host when there are several hosts. */
static void put_table_procs(const struct report_group *g, bool hosts, FILE *out)
{
	fputs("      processes: ", out);
	for (size_t i = 0; i < g->nprocs && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		stackdump_put_escaped(g->procs[i].comm, out);
		fprintf(out, "[%d]", (int)g->procs[i].pid);
		if (hosts) {
			fputc('@', out);
			stackdump_put_escaped(g->procs[i].host, out);
		}
	}
	if (g->nprocs > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nprocs - TABLE_PROCS);
	fputs("; threads: ", out);
	for (size_t i = 0; i < g->nthread_names && i < TABLE_PROCS; i++) {
		if (i > 0)
			fputs(", ", out);
		fputc('"', out);
		stackdump_put_escaped(g->thread_names[i], out);
		fputc('"', out);
	}
	if (g->nthread_names > TABLE_PROCS)
		fprintf(out, " and %zu more", g->nthread_names - TABLE_PROCS);
	fputc('\n', out);
}

void report_print_table(const struct report *r, int top, FILE *out)
{
	const struct report_totals *t = &r->totals;
	size_t n = shown(r, top);
	bool hosts = t->hosts > 1;

	if (t->events == 0) {
		fputs("no events in the window\n", out);
		return;
	}
	fprintf(out, "%" PRIu64 " events", t->events);
	if (hosts)
		fprintf(out, " on %zu hosts", t->hosts);
	fputs(" from ", out);
	put_local(t->first_us, false, out);
	fputs(" to ", out);
	put_local(t->last_us, true, out);
	fprintf(out, ": %" PRIu64 " stack samples, %zu distinct stacks, %zu groups by %s\n",
	        t->samples, t->stacks, t->groups, report_by_name(r->by));
	if (t->events_no_stack)
		fprintf(out, "%" PRIu64 " event%s no stack (see cpumond tail)\n",
		        t->events_no_stack, t->events_no_stack == 1 ? " has" : "s have");
	if (n == 0)
		return;
	fprintf(out, "\nrank  samples   share  events  key ev  threads%s  first seen           "
	        "last seen\n", hosts ? "  hosts" : "");
	for (size_t i = 0; i < n; i++) {
		const struct report_group *g = report_group(r, i);

		fprintf(out, "%4zu %8" PRIu64 " %6.1f%% %7" PRIu64 " %7" PRIu64 " %8zu  ", i + 1,
		        g->samples, 100.0 * share(g->samples, t->samples), g->events, g->key_events,
		        g->threads);
		if (hosts)
			fprintf(out, "%5zu  ", g->nhosts);
		put_local(g->first_us, false, out);
		fputs("  ", out);
		put_local(g->last_us, false, out);
		fputc('\n', out);
		if (r->by != REPORT_BY_EXACT || g->stacks > 1) {
			fprintf(out, "      %s ", r->by == REPORT_BY_EXACT ? "stack" : report_by_name(r->by));
			stackdump_put_escaped(g->name, out);
			fprintf(out, ", %zu distinct stack%s; the most frequent:\n", g->stacks,
			        g->stacks == 1 ? "" : "s");
		} else {
			fprintf(out, "      stack %s\n", g->name);
		}
		if (hosts)
			put_table_hosts(g, out);
		put_table_procs(g, hosts, out);
		put_table_frames(r, g, out);
	}
	if (n < r->ngroups)
		fprintf(out, "\n%zu more groups (--top 0 shows them all)\n", r->ngroups - n);
}

static void put_json_frame(const struct report *r, const struct stackdump_frame *f, FILE *out)
{
	char name[NAME_LEN];

	report_frame_name(f, REPORT_NAME_EXACT, name, sizeof name);
	fputs("{\"name\":", out);
	json_put_string(name, out);
	fputs(",\"symbol\":", out);
	if (f->symbol && f->symbol[0])
		json_put_string(f->symbol, out);
	else
		fputs("null", out);
	fputs(",\"module\":", out);
	json_put_string(f->module, out);
	fputs(",\"build_id\":", out);
	json_put_string(f->build_id, out);
	fprintf(out, ",\"func_offset\":%" PRIu64 ",\"ignored\":%s}", f->func_offset,
	        report_frame_ignored(r, f) ? "true" : "false");
}

void report_print_json(const struct report *r, int top, FILE *out)
{
	size_t n = shown(r, top < 0 ? 0 : top);

	for (size_t i = 0; i < n; i++) {
		const struct report_group *g = report_group(r, i);

		fprintf(out, "{\"rank\":%zu,\"by\":\"%s\",\"group\":", i + 1, report_by_name(r->by));
		json_put_string(g->name, out);
		fprintf(out, ",\"events\":%" PRIu64 ",\"key_events\":%" PRIu64 ",\"samples\":%" PRIu64
		        ",\"share\":%.6f,\"first_seen\":\"", g->events, g->key_events, g->samples,
		        share(g->samples, r->totals.samples));
		json_put_time(g->first_us, out);
		fputs("\",\"last_seen\":\"", out);
		json_put_time(g->last_us, out);
		fprintf(out, "\",\"stacks\":%zu,\"stack\":\"%016" PRIx64 "\",\"signature\":",
		        g->stacks, g->stack->hash);
		json_put_string(g->signature, out);
		fprintf(out, ",\"process_count\":%zu,\"processes\":[", g->nprocs);
		for (size_t k = 0; k < g->nprocs && k < JSON_PROCS; k++) {
			fputs(k ? ",{\"host\":" : "{\"host\":", out);
			json_put_string(g->procs[k].host, out);
			fprintf(out, ",\"pid\":%d,\"comm\":", (int)g->procs[k].pid);
			json_put_string(g->procs[k].comm, out);
			fprintf(out, ",\"samples\":%" PRIu64 "}", g->procs[k].samples);
		}
		fprintf(out, "],\"host_count\":%zu,\"hosts\":[", g->nhosts);
		for (size_t k = 0; k < g->nhosts && k < JSON_PROCS; k++) {
			fputs(k ? ",{\"host\":" : "{\"host\":", out);
			json_put_string(g->hosts[k].host, out);
			fprintf(out, ",\"events\":%" PRIu64 ",\"samples\":%" PRIu64 "}",
			        g->hosts[k].events, g->hosts[k].samples);
		}
		fprintf(out, "],\"threads\":%zu,\"thread_names\":[", g->threads);
		for (size_t k = 0; k < g->nthread_names && k < JSON_PROCS; k++) {
			if (k)
				fputc(',', out);
			json_put_string(g->thread_names[k], out);
		}
		fprintf(out, "],\"entry\":%zu,\"truncated\":%s,\"frames\":[", g->entry,
		        g->stack->truncated ? "true" : "false");
		for (size_t k = 0; k < g->stack->nframes; k++) {
			if (k)
				fputc(',', out);
			put_json_frame(r, &g->stack->frames[k], out);
		}
		fputs("]}\n", out);
	}
}

/* A frame name for the folded format: escaped as stackdump_put_escaped
 * does, and ';', which separates frames there, as \x3b. */
static void put_folded_name(char *name, FILE *out)
{
	for (;;) {
		char *semi = strchr(name, ';');

		if (semi)
			*semi = '\0';
		stackdump_put_escaped(name, out);
		if (!semi)
			break;
		fputs("\\x3b", out);
		name = semi + 1;
	}
}

struct folded_line {
	char *text;
	uint64_t samples;
};

static int cmp_folded(const void *a, const void *b)
{
	return strcmp(((const struct folded_line *)a)->text, ((const struct folded_line *)b)->text);
}

/* Stack ST outermost first, as one folded line without its count. */
static char *folded_text(const struct stackdump_stack *st)
{
	char name[NAME_LEN];
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	for (size_t i = st->nframes; i-- > 0;) {
		report_frame_name(&st->frames[i], REPORT_NAME_EXACT, name, sizeof name);
		put_folded_name(name, f);
		if (i > 0)
			fputc(';', f);
	}
	if (st->nframes == 0)
		fputs("[no frames]", f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* Identical lines (two builds with the same symbols) are merged, as
 * flamegraph.pl would. */
static int print_folded(const struct report *r, FILE *out)
{
	struct folded_line *lines = calloc(r->nstacks ? r->nstacks : 1, sizeof *lines);
	size_t n = 0;
	int e = 0;

	if (!lines)
		return -ENOMEM;
	for (size_t i = 0; i < r->nstacks; i++) {
		if (r->stacks[i].samples == 0)
			continue;
		lines[n].samples = r->stacks[i].samples;
		if (!(lines[n++].text = folded_text(&r->stacks[i].st))) {
			e = -ENOMEM;
			break;
		}
	}
	if (e == 0) {
		qsort(lines, n, sizeof *lines, cmp_folded);
		for (size_t i = 0; i < n;) {
			uint64_t sum = 0;
			size_t j = i;

			while (j < n && strcmp(lines[j].text, lines[i].text) == 0)
				sum += lines[j++].samples;
			fprintf(out, "%s %" PRIu64 "\n", lines[i].text, sum);
			i = j;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(lines[i].text);
	free(lines);
	return e;
}

void report_print_folded(const struct report *r, FILE *out)
{
	if (print_folded(r, out) < 0)
		log_msg(LOG_ERR, "cannot print the folded stacks: out of memory");
}

/* ---- The command ---- */

struct collect {
	struct store *st;
	struct report *r;
	const char *path;        /* of st: the host of events stored without one */
	const char *host;        /* --host, or NULL */
	int error;               /* negative errno of a failure inside the walk */
};

/* Gives the report the frames of every stack of EV it has not seen yet.
 * The key stack's frames come with the event (its own sample's, with the
 * same modules, functions and symbols as the stored stack's); the others
 * are read from the stacks table.  A stack deleted since the event was read
 * counts as one without frames. */
static int fetch_stacks(struct collect *c, const struct store_event *ev)
{
	for (size_t i = 0; i < ev->nstacks; i++) {
		struct stackdump_stack st;
		int e;

		if (report_has_stack(c->r, ev->stacks[i].hash))
			continue;
		if (ev->stacks[i].hash == ev->stack.hash && ev->stack.nframes > 0) {
			e = report_add_stack(c->r, &ev->stack);
			if (e < 0)
				return e;
			continue;
		}
		e = store_get_stack(c->st, ev->stacks[i].hash, &st);
		if (e == -ENOENT) {
			st = (struct stackdump_stack){ .hash = ev->stacks[i].hash };
		} else if (e < 0) {
			log_msg(LOG_ERR, "%s", store_error(c->st));
			return e;
		}
		e = report_add_stack(c->r, &st);
		stackdump_stack_free(&st);
		if (e < 0)
			return e;
	}
	if (ev->nstacks == 0 && ev->stack.nframes > 0 && !report_has_stack(c->r, ev->stack.hash))
		return report_add_stack(c->r, &ev->stack);
	return 0;
}

static int collect_event(const struct store_event *ev, void *ctx)
{
	struct collect *c = ctx;
	struct store_event named;
	int e;

	if (!ev->host || !ev->host[0]) {
		named = *ev;
		named.host = c->path;
		ev = &named;
	}
	if (c->host && strcmp(ev->host, c->host) != 0)
		return 0;
	e = fetch_stacks(c, ev);

	if (e == 0)
		e = report_add_event(c->r, ev);
	if (e < 0) {
		c->error = e;
		return 1;   /* stops the walk */
	}
	return 0;
}

static void put_filter(const struct report_options *opt, FILE *out)
{
	if (opt->since_us) {
		fputs(", since ", out);
		put_local(opt->since_us, true, out);
	}
	if (opt->until_us) {
		fputs(", until ", out);
		put_local(opt->until_us, true, out);
	}
	if (opt->watch) {
		fputs(", watch ", out);
		stackdump_put_escaped(opt->watch, out);
	}
	if (opt->comm) {
		fputs(", process ", out);
		stackdump_put_escaped(opt->comm, out);
	}
	if (opt->host) {
		fputs(", host ", out);
		stackdump_put_escaped(opt->host, out);
	}
	if (opt->pid)
		fprintf(out, ", pid %d", (int)opt->pid);
	if (opt->thread) {
		fputs(", thread ", out);
		stackdump_put_escaped(opt->thread, out);
	}
}

static int write_svg(const struct report_options *opt, const struct report *r, FILE *out)
{
	struct flamegraph *fg = flamegraph_new();
	struct flamegraph_frame *frames = NULL;
	char (*names)[NAME_LEN] = NULL;
	size_t cap = 0;
	char *subtitle = NULL;
	size_t len = 0;
	const struct stackdump_stack *st;
	uint64_t samples;
	FILE *f, *file = out;
	int e = 0;

	if (!fg)
		goto nomem;
	for (size_t i = 0; (st = report_stack(r, i, &samples)) != NULL; i++) {
		if (st->nframes > cap) {
			free(frames);
			free(names);
			cap = st->nframes;
			frames = calloc(cap, sizeof *frames);
			names = calloc(cap, sizeof *names);
			if (!frames || !names)
				goto nomem;
		}
		for (size_t k = 0; k < st->nframes; k++) {
			const struct stackdump_frame *fr = &st->frames[st->nframes - 1 - k];

			report_frame_name(fr, REPORT_NAME_EXACT, names[k], sizeof names[k]);
			frames[k] = (struct flamegraph_frame){ names[k], fr->module };
		}
		if (flamegraph_add(fg, frames, st->nframes, samples) < 0)
			goto nomem;
	}
	f = open_memstream(&subtitle, &len);
	if (!f)
		goto nomem;
	fprintf(f, "%" PRIu64 " samples of %" PRIu64 " events", r->totals.samples, r->totals.events);
	if (r->totals.events) {
		fputs(" from ", f);
		put_local(r->totals.first_us, false, f);
		fputs(" to ", f);
		put_local(r->totals.last_us, true, f);
	}
	put_filter(opt, f);
	if (fclose(f) != 0)
		goto nomem;
	if (strcmp(opt->svg_path, "-") != 0) {
		file = fopen(opt->svg_path, "we");
		if (!file) {
			e = -errno;
			log_errno(LOG_ERR, errno, "cannot write %s", opt->svg_path);
			goto out;
		}
	}
	e = flamegraph_write(fg, "cpumond: CPU flame graph", subtitle, file);
	if (file != out && fclose(file) != 0 && e == 0)
		e = -errno;
	if (e < 0)
		log_errno(LOG_ERR, -e, "cannot write %s", opt->svg_path);
	goto out;
nomem:
	e = -ENOMEM;
	log_msg(LOG_ERR, "cannot draw the flame graph: out of memory");
out:
	free(subtitle);
	free(frames);
	free(names);
	flamegraph_free(fg);
	return e;
}

/* Adds the events of database PATH to C->r.  NAME: say which database
 * failed (there are several). */
static int read_database(const char *path, const struct store_filter *filter, bool name,
                         struct collect *c)
{
	char err[512];
	int e = store_open(path, false, &c->st, err, sizeof err);

	if (e < 0) {
		log_msg(LOG_ERR, "%s", err);
		return e;
	}
	c->path = path;
	c->error = 0;
	e = store_each_event_in(c->st, filter, collect_event, c);
	if (e == 1)
		e = c->error;
	if (e == -ENOMEM)
		log_msg(LOG_ERR, "cannot read the events of %s: out of memory", path);
	else if (e < 0 && c->error == 0)
		log_msg(LOG_ERR, "%s%s%s", name ? path : "", name ? ": " : "", store_error(c->st));
	store_close(c->st);
	c->st = NULL;
	return e;
}

/* Whether database I of DBS is the same file as one before it (two copies
 * of one file are two hosts' worth of events, but one file given twice
 * would count each event twice). */
static bool read_before(const char *const *dbs, size_t i)
{
	struct stat a, b;

	if (stat(dbs[i], &a) < 0)
		return false;   /* store_open says why */
	for (size_t k = 0; k < i; k++) {
		if (stat(dbs[k], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			log_msg(LOG_WARNING, "%s is the same database as %s: reading it once",
			        dbs[i], dbs[k]);
			return true;
		}
	}
	return false;
}

int report_run(const struct report_options *opt, FILE *out)
{
	struct store_filter filter = {
		.since_us = opt->since_us, .until_us = opt->until_us, .watch = opt->watch,
		.comm = opt->comm, .thread = opt->thread, .pid = opt->pid,
	};
	const char *const *dbs = opt->ndatabases ? opt->databases : &opt->database;
	size_t ndbs = opt->ndatabases ? opt->ndatabases : 1;
	struct collect c = { .host = opt->host };
	int e = 0;

	tzset();
	if (report_new(opt->by, opt->ignore, &c.r) < 0) {
		log_msg(LOG_ERR, "out of memory");
		return -ENOMEM;
	}
	/* Each database is closed before the output, which may wait on a
	 * pager. */
	for (size_t i = 0; i < ndbs && e == 0; i++)
		if (!read_before(dbs, i))
			e = read_database(dbs[i], &filter, ndbs > 1, &c);
	if (e < 0)
		goto out;
	if ((e = report_finish(c.r)) < 0) {
		log_msg(LOG_ERR, "cannot group the stacks: out of memory");
		goto out;
	}
	if (opt->svg_path)
		e = write_svg(opt, c.r, out);
	else if (opt->folded)
		e = print_folded(c.r, out);
	else if (opt->json)
		report_print_json(c.r, opt->top, out);
	else
		report_print_table(c.r, opt->top < 0 ? TOP_DEFAULT : opt->top, out);
	if (e == -ENOMEM)
		log_msg(LOG_ERR, "out of memory");
	errno = 0;
	if (e == 0 && (fflush(out) == EOF || ferror(out))) {
		e = errno ? -errno : -EIO;
		log_errno(LOG_ERR, -e, "cannot write the output");
	}
out:
	report_free(c.r);
	return e;
}
