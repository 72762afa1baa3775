/* perfmap: names for JIT code from a perf map.  See perfmap.h. */
#include "stackdump/perfmap.h"

#include "procfs/procfs.h"
#include "stackdump/procmaps.h"
#include "stackdump/stackdump.h"
#include "stackdump/targetfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes read from the file at a time. */
#define CHUNK (1u << 20)
/* Entries looked at before the one found, for one that covers the
 * address from further down (an overlap). */
#define LOOK_BACK 64

void perfmap_init(struct perfmap *m)
{
	memset(m, 0, sizeof(*m));
}

void perfmap_clear(struct perfmap *m)
{
	m->n = 0;
	m->names_len = 0;
	m->next_seq = 0;
	m->sorted = true;
	m->skipped = 0;
	m->overlaps = 0;
	m->have_file = false;
	m->parsed = 0;
	m->window_start = 0;
	m->tail_len = 0;
	m->why[0] = '\0';
}

void perfmap_free(struct perfmap *m)
{
	free(m->v);
	free(m->max_end);
	free(m->names);
	perfmap_init(m);
}

/* ---- the parser ---- */

/* A hex number of 1..16 digits at *P, with or without 0x, then a space. */
static bool hex_field(const char **p, const char *end, uint64_t *v)
{
	const char *s = *p;
	int digits = 0;

	if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	*v = 0;
	for (; s < end && *s != ' '; s++, digits++) {
		int d;
		if (*s >= '0' && *s <= '9')
			d = *s - '0';
		else if (*s >= 'a' && *s <= 'f')
			d = *s - 'a' + 10;
		else if (*s >= 'A' && *s <= 'F')
			d = *s - 'A' + 10;
		else
			return false;
		if (digits == 16)
			return false;
		*v = *v << 4 | (uint64_t)d;
	}
	if (digits == 0 || s == end)
		return false;
	*p = s + 1;
	return true;
}

static int add_entry(struct perfmap *m, uint64_t start, uint64_t size, const char *name,
                     size_t len)
{
	if (m->n == PERFMAP_MAX_ENTRIES)
		return -E2BIG;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 256;
		struct perfmap_entry *v = realloc(m->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	if (len > PERFMAP_NAME_MAX)
		len = PERFMAP_NAME_MAX;
	if (m->names_len + len + 1 > PERFMAP_MAX_BYTES)
		return -E2BIG;
	if (m->names_len + len + 1 > m->names_cap) {
		size_t cap = m->names_cap ? m->names_cap : 4096;
		while (cap < m->names_len + len + 1)
			cap *= 2;
		char *names = realloc(m->names, cap);
		if (!names)
			return -ENOMEM;
		m->names = names;
		m->names_cap = cap;
	}
	memcpy(m->names + m->names_len, name, len);
	m->names[m->names_len + len] = '\0';
	m->v[m->n++] = (struct perfmap_entry){
		.start = start, .end = start + size,
		.name = (uint32_t)m->names_len, .seq = m->next_seq++,
	};
	m->names_len += len + 1;
	m->sorted = false;
	return 0;
}

ssize_t perfmap_parse(struct perfmap *m, const char *text, size_t len)
{
	const char *p = text, *end = text + len;

	for (;;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break;
		const char *q = p, *le = nl;
		uint64_t start, size;
		if (le > q && le[-1] == '\r')
			le--;
		if (hex_field(&q, le, &start) && hex_field(&q, le, &size) && size > 0 &&
		    start + size > start && q < le) {
			int r = add_entry(m, start, size, q, (size_t)(le - q));
			if (r < 0)
				return r;
		} else {
			m->skipped++;
		}
		p = nl + 1;
	}
	return p - text;
}

/* ---- the lookup ---- */

static int cmp_entry(const void *a, const void *b)
{
	const struct perfmap_entry *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int sort(struct perfmap *m)
{
	if (m->sorted)
		return 0;
	uint64_t *max_end = realloc(m->max_end, (m->n ? m->n : 1) * sizeof(*max_end));
	if (!max_end)
		return -ENOMEM;
	m->max_end = max_end;
	qsort(m->v, m->n, sizeof(*m->v), cmp_entry);
	m->overlaps = 0;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t prev = i ? max_end[i - 1] : 0;
		if (i && m->v[i].start < prev)
			m->overlaps++;
		max_end[i] = m->v[i].end > prev ? m->v[i].end : prev;
	}
	m->sorted = true;
	return 0;
}

const char *perfmap_lookup(struct perfmap *m, uint64_t addr, uint64_t *start)
{
	if (m->n == 0 || sort(m) < 0)
		return NULL;
	/* The last entry starting at or below ADDR. */
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->v[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	const struct perfmap_entry *best = NULL;
	for (size_t i = lo, looked = 0; i > 0 && looked < LOOK_BACK; looked++) {
		const struct perfmap_entry *e = &m->v[--i];
		if (m->max_end[i] <= addr)
			break;             /* nothing from here down reaches ADDR */
		if (addr < e->end && (!best || e->seq > best->seq))
			best = e;
	}
	if (!best)
		return NULL;
	*start = best->start;
	return m->names + best->name;
}

size_t perfmap_identity(const char *name, char *buf, size_t len)
{
	const char *colon = strchr(name, ':');
	size_t prefix = colon ? (size_t)(colon - name) + 1 : 0;
	bool mark = prefix > 1 && strchr("*~^+", colon[1]) && colon[1] != '\0';

	for (size_t i = 0; mark && i + 1 < prefix; i++)
		if (!((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z')))
			mark = false;
	if (!mark)
		return (size_t)snprintf(buf, len, "%s", name);
	return (size_t)snprintf(buf, len, "%.*s%s", (int)prefix, name, colon + 2);
}

/* ---- the reader ---- */

__attribute__((format(printf, 2, 3)))
static void say(struct perfmap *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->why, sizeof(m->why), fmt, ap);
	va_end(ap);
}

/* Whether the bytes of FD before M->parsed are still those parsed: the
 * file grew, rather than being written anew. */
static bool grew(const struct perfmap *m, int fd, const struct stat *st)
{
	char now[PERFMAP_TAIL];
	size_t n = m->tail_len;

	if (!m->have_file || m->dev != (uint64_t)st->st_dev || m->ino != (uint64_t)st->st_ino ||
	    st->st_size < m->size || n == 0)
		return false;
	return pread(fd, now, n, m->parsed - (int64_t)n) == (ssize_t)n &&
	       memcmp(m->tail, now, n) == 0;
}

/* Keeps the last PERFMAP_TAIL bytes of those parsed, the N at P last. */
static void keep_tail(struct perfmap *m, const char *p, size_t n)
{
	if (n >= PERFMAP_TAIL) {
		memcpy(m->tail, p + n - PERFMAP_TAIL, PERFMAP_TAIL);
		m->tail_len = PERFMAP_TAIL;
		return;
	}
	size_t keep = m->tail_len + n > PERFMAP_TAIL ? PERFMAP_TAIL - n : m->tail_len;
	memmove(m->tail, m->tail + m->tail_len - keep, keep);
	memcpy(m->tail + keep, p, n);
	m->tail_len = keep + n;
}

/* Parses FD from offset FROM to END. */
static int read_from(struct perfmap *m, int fd, int64_t from, int64_t end)
{
	char *buf = malloc(CHUNK);
	size_t have = 0;
	int64_t off = from;
	bool skipping = false;        /* inside a line longer than CHUNK */
	int r = 0;

	if (!buf)
		return -ENOMEM;
	while (off < end) {
		size_t want = CHUNK - have;
		if ((int64_t)want > end - off)
			want = (size_t)(end - off);
		ssize_t got = pread(fd, buf + have, want, off);
		if (got < 0) {
			r = -errno;
			break;
		}
		if (got == 0)
			break;                 /* cut since the fstat */
		off += got;
		have += (size_t)got;
		size_t start = 0;
		if (skipping) {
			char *nl = memchr(buf, '\n', have);
			if (!nl) {
				have = 0;
				continue;
			}
			start = (size_t)(nl - buf) + 1;
			skipping = false;
			m->skipped++;
		}
		ssize_t used = perfmap_parse(m, buf + start, have - start);
		if (used < 0) {
			r = (int)used;
			break;
		}
		keep_tail(m, buf + start, (size_t)used);
		size_t rest = have - start - (size_t)used;
		if (rest == CHUNK) {
			skipping = true;       /* a line longer than the buffer */
			rest = 0;
		}
		memmove(buf, buf + have - rest, rest);
		have = rest;
	}
	free(buf);
	m->parsed = off - (int64_t)have;
	return r;
}

int perfmap_refresh(struct perfmap *m, pid_t pid, pid_t nspid, long euid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)nspid);
	int fd = targetfs_open(pid, path);
	if (fd < 0) {
		perfmap_clear(m);
		m->err = fd;
		say(m, "no perf map %s%s", path, fd == -ENOENT ? "" : ": cannot open it");
		return fd;
	}
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		perfmap_clear(m);
		m->err = -e;
		return -e;
	}
	if (st.st_uid != 0 && (euid < 0 || st.st_uid != (uid_t)euid)) {
		close(fd);
		perfmap_clear(m);
		m->err = -EPERM;
		say(m, "perf map %s refused: owned by uid %u, not by the process's uid %ld or root",
		    path, (unsigned)st.st_uid, euid);
		return -EPERM;
	}
	int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (m->have_file && m->dev == (uint64_t)st.st_dev && m->ino == (uint64_t)st.st_ino &&
	    m->size == st.st_size && m->mtime_ns == mtime) {
		close(fd);
		return m->err;
	}
	int64_t from = m->parsed;
	if (!grew(m, fd, &st) || st.st_size - m->window_start > (int64_t)PERFMAP_MAX_BYTES) {
		perfmap_clear(m);
		from = st.st_size > (int64_t)PERFMAP_MAX_BYTES ? st.st_size - PERFMAP_MAX_BYTES : 0;
		m->window_start = from;
	}
	bool partial = from > 0 && m->n == 0;
	int r = read_from(m, fd, from, st.st_size);
	close(fd);
	if (partial && m->n > 0 && m->skipped > 0)
		m->skipped--;              /* the line cut by the window's start */
	m->have_file = true;
	m->dev = (uint64_t)st.st_dev;
	m->ino = (uint64_t)st.st_ino;
	m->size = st.st_size;
	m->mtime_ns = mtime;
	m->err = r == -E2BIG ? 0 : r;
	if (r == -E2BIG)
		say(m, "perf map %s has more than %u entries: the rest are not read", path,
		    PERFMAP_MAX_ENTRIES);
	else if (m->window_start > 0)
		say(m, "perf map %s is %lld MiB: only its last %u MiB are read", path,
		    (long long)(st.st_size >> 20), PERFMAP_MAX_BYTES >> 20);
	else if (m->skipped)
		say(m, "perf map %s: %zu lines that are not \"START SIZE name\" skipped", path,
		    m->skipped);
	else
		m->why[0] = '\0';
	return m->err;
}

/* ---- for stackdump.c ---- */

struct perfmap_proc {
	struct perfmap map;
	pid_t pid, nspid;
	long euid;
	uint64_t dump;               /* the dump that last refreshed the map */
	char path[64];               /* the map's path as the process names it */
};

bool perfmap_jit_mapping(const struct procmaps_entry *e)
{
	return e && e->perms[2] == 'x' &&
	       (e->path[0] == '\0' || strncmp(e->path, "[anon:", 6) == 0 ||
	        strncmp(e->path, "/memfd:", 7) == 0);
}

void perfmap_proc_free(struct perfmap_proc *pp)
{
	if (!pp)
		return;
	perfmap_free(&pp->map);
	free(pp);
}

/* The process's pid in its own namespace (the last NSpid) and its uid. */
static int ids(pid_t pid, pid_t *nspid, long *euid)
{
	struct procfs_status st;
	int r = procfs_read_status(pid, 0, &st);

	if (r < 0)
		return r;
	*nspid = st.nnspid ? st.nspid[st.nnspid - 1] : pid;
	*euid = st.euid;
	return 0;
}

int perfmap_name_frame(struct perfmap_proc **ppp, pid_t pid, uint64_t dump, uint64_t ip,
                       uint64_t look, struct stackdump_frame *f)
{
	struct perfmap_proc *pp = *ppp;
	uint64_t start;

	if (!pp) {
		pp = calloc(1, sizeof(*pp));
		if (!pp)
			return -ENOMEM;
		perfmap_init(&pp->map);
		pp->pid = pid;
		if (ids(pid, &pp->nspid, &pp->euid) < 0) {
			free(pp);
			return -ENOENT;
		}
		snprintf(pp->path, sizeof(pp->path), "/tmp/perf-%d.map", (int)pp->nspid);
		*ppp = pp;
	}
	if (pp->dump != dump) {
		pp->dump = dump;
		perfmap_refresh(&pp->map, pid, pp->nspid, pp->euid);
	}
	const char *name = perfmap_lookup(&pp->map, look, &start);
	if (!name)
		return -ENOENT;
	memset(f, 0, sizeof(*f));
	f->ip = ip;
	f->offset = f->symbol_offset = ip - start;
	f->module = strdup(pp->path);
	f->build_id = strdup(STACKDUMP_JIT);
	f->symbol = strdup(name);
	return f->module && f->build_id && f->symbol ? 0 : -ENOMEM;
}

int perfmap_probe(pid_t pid, char *path, size_t len, size_t *entries, char *why, size_t whysz)
{
	struct perfmap m;
	pid_t nspid = pid;
	long euid = -1;
	int r = ids(pid, &nspid, &euid);

	*entries = 0;
	snprintf(path, len, "/tmp/perf-%d.map", (int)nspid);
	snprintf(why, whysz, "%s", "");
	if (r < 0)
		return r;
	perfmap_init(&m);
	r = perfmap_refresh(&m, pid, nspid, euid);
	*entries = m.n;
	snprintf(why, whysz, "%s", m.why);
	perfmap_free(&m);
	return r;
}
