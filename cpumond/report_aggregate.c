/* report_aggregate: the pure part of `cpumond report` -- frame names in
 * their three styles, the ignore rules, each stack's group key, the groups
 * with their processes, hosts and threads, and the ranking.  It is fed
 * plain events and stacks (report_read.c reads them from the database)
 * and never touches SQLite or the file system.  See report.h for the name
 * styles and the ranking. */
#include "cpumond/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/report_internal.h"
#include "stackdump/demangle.h"

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
	uint32_t comm, thread, host, unit, cgroup, watch, kind;   /* in the string table */
	uint64_t key;                /* key stack hash, 0 for none */
	size_t first, n;             /* its counts */
	unsigned captures;           /* REPORT_CAPTURE_* */
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
 * groups' lists: a process's samples and events add to its host's too. */
struct where {
	uint32_t group;
	uint32_t host;
	pid_t pid;
};

struct ptuple {
	struct where w;
	uint32_t comm, unit, cgroup;
	uint64_t samples;
	uint64_t events;             /* 1 when the event first counts in the group */
};

struct ttuple {
	struct where w;
	pid_t tid;
	uint32_t thread;
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
		char linkage[REPORT_NAME_LEN];

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

		int e = stackdump_frame_copy(g, f);

		copy->nframes = k + 1;  /* counted now so that report_free frees it */
		/* The groups read module and build-id as strings: "" for none. */
		if (e == 0 && ((!g->module && !(g->module = dup_or_empty(NULL))) ||
		               (!g->build_id && !(g->build_id = dup_or_empty(NULL)))))
			e = -ENOMEM;
		if (e < 0)
			return e;
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
		.captures = !ev->capture ? 0 : strcmp(ev->capture, "perf") == 0 ? REPORT_CAPTURE_PERF :
		            strcmp(ev->capture, "ptrace") == 0 ? REPORT_CAPTURE_PTRACE : 0,
	};

	if (intern(&r->strings, ev->comm, &e.comm) < 0 ||
	    intern(&r->strings, ev->thread, &e.thread) < 0 ||
	    intern(&r->strings, ev->host, &e.host) < 0 ||
	    intern(&r->strings, ev->unit, &e.unit) < 0 ||
	    intern(&r->strings, ev->cgroup, &e.cgroup) < 0 ||
	    intern(&r->strings, ev->watch, &e.watch) < 0 ||
	    intern(&r->strings, ev->kind, &e.kind) < 0 ||
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
	char name[REPORT_NAME_LEN];

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
	char name[REPORT_NAME_LEN];
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

/* By group, host and pid. */
static int cmp_where(const struct where *x, const struct where *y)
{
	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->host != y->host)
		return x->host < y->host ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static int cmp_ptuple(const void *a, const void *b)
{
	const struct ptuple *x = a, *y = b;
	int c = cmp_where(&x->w, &y->w);

	if (c != 0)
		return c;
	if (x->comm != y->comm)
		return x->comm < y->comm ? -1 : 1;
	if (x->unit != y->unit)
		return x->unit < y->unit ? -1 : 1;
	return x->cgroup < y->cgroup ? -1 : x->cgroup > y->cgroup;
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
	if ((c = strcmp(x->comm, y->comm)) != 0)
		return c;
	if ((c = strcmp(x->unit, y->unit)) != 0)
		return c;
	return strcmp(x->cgroup, y->cgroup);
}

static int cmp_host_samples(const void *a, const void *b)
{
	const struct report_host *x = a, *y = b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return strcmp(x->host, y->host);
}

static int cmp_ttuple(const void *a, const void *b)
{
	const struct ttuple *x = a, *y = b;
	int c = cmp_where(&x->w, &y->w);

	if (c != 0)
		return c;
	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int cmp_ttuple_name(const void *a, const void *b, void *ctx)
{
	const struct report *r = ctx;
	const struct ttuple *x = a, *y = b;

	if (x->w.group != y->w.group)
		return x->w.group < y->w.group ? -1 : 1;
	return strcmp(r->strings.s[x->thread], r->strings.s[y->thread]);
}

/* The processes and the hosts of each group, most samples first.  P is
 * sorted by group, host and process, so each group's processes, and the
 * processes of each of its hosts, come one after another. */
static int group_procs_hosts(struct report *r, struct ptuple *p, size_t n)
{
	size_t np = 0, nh = 0;

	qsort(p, n, sizeof *p, cmp_ptuple);
	r->procs = calloc(n ? n : 1, sizeof *r->procs);
	r->hosts = calloc(n ? n : 1, sizeof *r->hosts);
	if (!r->procs || !r->hosts)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct report_group *g = &r->groups[p[i].w.group].pub;
		bool same_host = i > 0 && p[i].w.group == p[i - 1].w.group &&
		                 p[i].w.host == p[i - 1].w.host;

		if (!same_host) {
			if (g->nhosts++ == 0)
				g->hosts = &r->hosts[nh];
			r->hosts[nh++] = (struct report_host){ .host = r->strings.s[p[i].w.host] };
		}
		r->hosts[nh - 1].samples += p[i].samples;
		r->hosts[nh - 1].events += p[i].events;
		if (!same_host || cmp_ptuple(&p[i], &p[i - 1]) != 0) {
			if (g->nprocs++ == 0)
				g->procs = &r->procs[np];
			r->procs[np++] = (struct report_process){
				.host = r->strings.s[p[i].w.host], .pid = p[i].w.pid,
				.comm = r->strings.s[p[i].comm], .unit = r->strings.s[p[i].unit],
				.cgroup = r->strings.s[p[i].cgroup],
			};
		}
		r->procs[np - 1].samples += p[i].samples;
	}
	/* Every group has a sample, so a process and a host. */
	for (size_t i = 0; i < r->ngroups; i++) {
		const struct report_group *g = &r->groups[i].pub;

		qsort(r->procs + (g->procs - r->procs), g->nprocs, sizeof *r->procs,
		      cmp_proc_samples);
		qsort(r->hosts + (g->hosts - r->hosts), g->nhosts, sizeof *r->hosts,
		      cmp_host_samples);
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
			r->groups[t[i].w.group].pub.threads++;
	qsort_r(t, n, sizeof *t, cmp_ttuple_name, r);
	r->thread_names = calloc(n ? n : 1, sizeof *r->thread_names);
	if (!r->thread_names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct report_group *g = &r->groups[t[i].w.group].pub;

		if (i > 0 && cmp_ttuple_name(&t[i], &t[i - 1], r) == 0)
			continue;
		if (!g->thread_names)
			g->thread_names = &r->thread_names[m];
		r->thread_names[m++] = r->strings.s[t[i].thread];
		g->nthread_names++;
	}
	return 0;
}

/* Events, key events, first and last seen, processes, hosts and threads. */
static int count_groups(struct report *r)
{
	struct ptuple *p = calloc(r->ncounts ? r->ncounts : 1, sizeof *p);
	struct ttuple *t = calloc(r->ncounts ? r->ncounts : 1, sizeof *t);
	size_t np = 0, nt = 0;
	int e;

	if (!p || !t) {
		free(p);
		free(t);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->nevents; i++) {
		const struct revent *ev = &r->events[i];

		for (size_t k = ev->first; k < ev->first + ev->n; k++) {
			const struct rstack *s = &r->stacks[r->counts[k].stack];
			struct rgroup *g = &r->groups[s->group];

			bool first = g->last_event != i + 1;

			g->pub.samples += r->counts[k].count;
			g->pub.captures |= ev->captures;
			p[np++] = (struct ptuple){ { s->group, ev->host, ev->pid }, ev->comm, ev->unit,
			                           ev->cgroup, r->counts[k].count, first };
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
			t[nt++] = (struct ttuple){ { s->group, ev->host, ev->pid }, ev->tid, ev->thread };
		}
	}
	e = group_procs_hosts(r, p, np);
	if (e == 0)
		e = group_threads(r, t, nt);
	free(p);
	free(t);
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

enum report_by report_grouped_by(const struct report *r)
{
	return r->by;
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


int report_each_sample(const struct report *r, report_sample_fn fn, void *ctx)
{
	for (size_t i = 0; i < r->nevents; i++) {
		const struct revent *ev = &r->events[i];
		struct report_sample s = {
			.time_us = ev->time_us, .pid = ev->pid, .tid = ev->tid,
			.host = r->strings.s[ev->host], .watch = r->strings.s[ev->watch],
			.kind = r->strings.s[ev->kind], .comm = r->strings.s[ev->comm],
			.thread = r->strings.s[ev->thread],
		};

		for (size_t k = ev->first; k < ev->first + ev->n; k++) {
			int rc;

			s.stack = &r->stacks[r->counts[k].stack].st;
			s.count = r->counts[k].count;
			if ((rc = fn(&s, ctx)) != 0)
				return rc;
		}
	}
	return 0;
}
