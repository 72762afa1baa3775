/* procmaps: /proc/PID/maps parser.  See procmaps.h. */
#include "stackdump/procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses a hexadecimal number at *P and moves *P past it; false when there
 * is none or it overflows. */
static bool hexnum(char **p, uint64_t *v)
{
	char *s = *p;
	uint64_t x = 0;
	int digits = 0;

	for (;; s++, digits++) {
		unsigned d;
		if (*s >= '0' && *s <= '9')
			d = (unsigned)(*s - '0');
		else if (*s >= 'a' && *s <= 'f')
			d = (unsigned)(*s - 'a' + 10);
		else if (*s >= 'A' && *s <= 'F')
			d = (unsigned)(*s - 'A' + 10);
		else
			break;
		if (x >> 60)
			return false;
		x = x << 4 | d;
	}
	*p = s;
	*v = x;
	return digits > 0;
}

static bool decnum(char **p, uint64_t *v)
{
	char *s = *p;
	uint64_t x = 0;
	int digits = 0;

	for (; *s >= '0' && *s <= '9'; s++, digits++) {
		if (x > (UINT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*v = x;
	return digits > 0;
}

static bool expect(char **p, char c)
{
	if (**p != c)
		return false;
	(*p)++;
	return true;
}

/* One line, NUL-terminated, for example:
 * 7f1c2b628000-7f1c2b7bd000 r-xp 00028000 fe:01 1311037     /usr/lib/x86_64-linux-gnu/libc.so.6
 * The path is everything after the inode and its padding, spaces included. */
static bool parse_line(char *s, struct procmaps_entry *e)
{
	uint64_t major, minor;

	if (!hexnum(&s, &e->start) || !expect(&s, '-') || !hexnum(&s, &e->end) ||
	    !expect(&s, ' ') || e->end <= e->start)
		return false;
	for (int i = 0; i < 4; i++, s++) {
		if (*s == '\0' || *s == ' ')
			return false;
		e->perms[i] = *s;
	}
	e->perms[4] = '\0';
	if (!expect(&s, ' ') || !hexnum(&s, &e->pgoff) || !expect(&s, ' ') ||
	    !hexnum(&s, &major) || !expect(&s, ':') || !hexnum(&s, &minor) ||
	    !expect(&s, ' ') || !decnum(&s, &e->inode) || major > 0xfff || minor > 0xfffff)
		return false;
	e->dev_major = (unsigned)major;
	e->dev_minor = (unsigned)minor;
	while (*s == ' ')
		s++;
	e->path = s;
	return true;
}

int procmaps_parse(const char *text, size_t len, struct procmaps *m)
{
	size_t lines = 0, cap;

	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	cap = lines + 1;
	m->text = malloc(len + 1);
	m->v = calloc(cap, sizeof(*m->v));
	if (!m->text || !m->v) {
		procmaps_free(m);
		return -ENOMEM;
	}
	memcpy(m->text, text, len);
	m->text[len] = '\0';
	m->len = len;

	char *line = m->text, *end = m->text + len;
	while (line < end && m->n < cap) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		if (nl)
			*nl = '\0';
		if (parse_line(line, &m->v[m->n]))
			m->n++;
		line = nl ? nl + 1 : end;
	}
	return 0;
}

int procmaps_read(pid_t pid, struct procmaps *m)
{
	char path[64], *buf = NULL;
	size_t len = 0, cap = 0;
	int r = 0;

	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	for (;;) {
		if (cap - len < 4096) {
			size_t ncap = cap ? cap * 2 : 16384;
			char *nbuf = realloc(buf, ncap);
			if (!nbuf) {
				r = -ENOMEM;
				break;
			}
			buf = nbuf;
			cap = ncap;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = errno == ENOENT ? -ESRCH : -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (r == 0)
		r = procmaps_parse(buf ? buf : "", len, m);
	free(buf);
	return r;
}

const struct procmaps_entry *procmaps_find(const struct procmaps *m, uint64_t addr)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (addr < m->v[mid].start)
			hi = mid;
		else if (addr >= m->v[mid].end)
			lo = mid + 1;
		else
			return &m->v[mid];
	}
	return NULL;
}

bool procmaps_same_file(const struct procmaps_entry *a, const struct procmaps_entry *b)
{
	return a->inode == b->inode && a->dev_major == b->dev_major &&
	       a->dev_minor == b->dev_minor && strcmp(a->path, b->path) == 0;
}

bool procmaps_same(const struct procmaps *a, const struct procmaps *b)
{
	return a->text && b->text && a->len == b->len && memcmp(a->text, b->text, a->len) == 0;
}

void procmaps_free(struct procmaps *m)
{
	free(m->v);
	free(m->text);
	memset(m, 0, sizeof(*m));
}
