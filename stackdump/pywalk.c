/* pywalk: the walk of a thread's frame chain over the target's memory,
 * and the code objects it reads.  See pyframes.h and pyframes_internal.h. */
#include "stackdump/pyframes_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* owner of 3.12's shim frames on the C stack (FRAME_OWNED_BY_CSTACK). */
#define OWNED_BY_CSTACK 3
/* Code objects cached per process, and the bytes their strings and line
 * tables may take: past either, the cache starts afresh before a walk (a
 * walk adds at most one entry per frame, STACKDUMP_MAX_FRAMES, so the
 * table never fills). */
#define CACHE_SLOTS 8192
#define CACHE_MAX_ENTRIES 4096
#define CACHE_MAX_BYTES (8u << 20)

static uint32_t u32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* ---- the line table ---- */

/* A varint of 6-bit groups, low first, bit 6 set on all but the last,
 * from TABLE[*I] on (Objects/locations.md). */
static bool varint(const unsigned char *table, size_t len, size_t *i, unsigned *v)
{
	unsigned shift = 0;

	*v = 0;
	for (;;) {
		if (*i >= len || shift > 24)
			return false;
		unsigned char b = table[(*i)++];
		*v |= (unsigned)(b & 63) << shift;
		if (!(b & 64))
			return true;
		shift += 6;
	}
}

int pyframes_line(const unsigned char *table, size_t len, int first, int addrq)
{
	long line = first;
	long start = 0;

	if (addrq < 0)
		return first;          /* a frame not started yet */
	for (size_t i = 0; i < len;) {
		unsigned char b = table[i];
		if (!(b & 128))
			return first;      /* not the start of an entry: a lie */
		int code = (b >> 3) & 15;
		long end = start + ((b & 7) + 1) * 2;
		long delta = 0;
		size_t next = i + 1;
		if (code == 13 || code == 14) {
			unsigned v;
			if (!varint(table, len, &next, &v))
				return first;
			delta = v & 1 ? -(long)(v >> 1) : (long)(v >> 1);
		} else if (code >= 10 && code <= 12) {
			delta = code - 10;
		}
		line += delta;
		if (line < -(1L << 30) || line > (1L << 30))
			return first;
		if (addrq < end)
			return code == 15 || line <= 0 ? first : (int)line;
		start = end;
		/* The entry's other bytes have bit 7 clear. */
		for (i = next; i < len && !(table[i] & 128); i++)
			;
	}
	return first;
}

/* ---- the cache of code objects ---- */

struct code_entry {
	uint64_t addr;                    /* 0: free slot */
	/* What the code object said when it was read: checked each time. */
	uint64_t filename_ptr, qualname_ptr, linetable_ptr;
	int firstlineno;
	char *qualname, *filename;
	unsigned char *linetable;
	size_t linetable_len;
};

struct pyframes_cache {
	struct code_entry slot[CACHE_SLOTS];
	size_t used, bytes;
	/* The strings of entries replaced during a walk: its frames may point
	 * to them until the next walk.  One entry per frame at most. */
	char *dead[3 * STACKDUMP_MAX_FRAMES];
	size_t ndead;
};

struct pyframes_cache *pyframes_cache_new(void)
{
	return calloc(1, sizeof(struct pyframes_cache));
}

static void bury_dead(struct pyframes_cache *cache)
{
	for (size_t i = 0; i < cache->ndead; i++)
		free(cache->dead[i]);
	cache->ndead = 0;
}

static void cache_clear(struct pyframes_cache *cache)
{
	for (size_t i = 0; i < CACHE_SLOTS; i++) {
		struct code_entry *e = &cache->slot[i];
		if (!e->addr)
			continue;
		free(e->qualname);
		free(e->filename);
		free(e->linetable);
		memset(e, 0, sizeof(*e));
	}
	cache->used = cache->bytes = 0;
}

void pyframes_cache_free(struct pyframes_cache *cache)
{
	if (!cache)
		return;
	cache_clear(cache);
	bury_dead(cache);
	free(cache);
}

/* The slot of ADDR: its entry, or the free slot it would take. */
static struct code_entry *cache_slot(struct pyframes_cache *cache, uint64_t addr)
{
	size_t i = (size_t)((addr >> 4) * 0x9e3779b97f4a7c15ull >> 51) % CACHE_SLOTS;

	while (cache->slot[i].addr && cache->slot[i].addr != addr)
		i = (i + 1) % CACHE_SLOTS;
	return &cache->slot[i];
}

/* ---- reading objects ---- */

struct walk {
	const struct pyframes_copy *c;
	const struct pyframes_layout *lay;
	const struct pyframes_types *types;
	const struct pyframes_mem *mem;
	char *why;
	size_t whysz;
};

static bool mem_read(const struct walk *w, uint64_t addr, void *buf, size_t len)
{
	if (addr == 0 || addr + len < addr)
		return false;
	return w->mem->read(w->mem->arg, addr, buf, len) == 0;
}

/* Appends code point CP to OUT as UTF-8 ('?' for what is not a
 * character); false when it does not fit in SIZE - 1 bytes. */
static bool put_utf8(char *out, size_t *n, size_t size, uint32_t cp)
{
	char b[4];
	size_t len;

	if (cp >= 0xd800 && cp <= 0xdfff)
		cp = '?';              /* a lone surrogate */
	if (cp == 0)
		cp = '?';
	if (cp < 0x80) {
		b[0] = (char)cp;
		len = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 63));
		len = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | cp >> 12);
		b[1] = (char)(0x80 | (cp >> 6 & 63));
		b[2] = (char)(0x80 | (cp & 63));
		len = 3;
	} else if (cp <= 0x10ffff) {
		b[0] = (char)(0xf0 | cp >> 18);
		b[1] = (char)(0x80 | (cp >> 12 & 63));
		b[2] = (char)(0x80 | (cp >> 6 & 63));
		b[3] = (char)(0x80 | (cp & 63));
		len = 4;
	} else {
		b[0] = '?';
		len = 1;
	}
	if (*n + len >= size)
		return false;
	memcpy(out + *n, b, len);
	*n += len;
	return true;
}

/* The str object at ADDR as UTF-8, cut to PYFRAMES_STR_MAX bytes: a new
 * string, or NULL with w->why set (or -ENOMEM in *ERR). */
static char *read_str(const struct walk *w, uint64_t addr, const char *what, int *err)
{
	const struct pyframes_layout *L = w->lay;
	unsigned char head[128];
	unsigned char data[4 * PYFRAMES_STR_MAX];

	if (L->str_compact_size > sizeof(head) || !mem_read(w, addr, head, L->str_compact_size)) {
		say(w->why, w->whysz, "%s at 0x%llx is unreadable", what, (unsigned long long)addr);
		return NULL;
	}
	uint32_t state = u32(head + L->str_state);
	unsigned kind = state >> 2 & 7;
	bool compact = state >> 5 & 1, ascii = state >> 6 & 1;
	bool ready = !L->str_ready_bit || (state >> 7 & 1);
	uint64_t length = word(head + L->str_length);
	if (word(head + OB_TYPE) != w->types->unicode || !compact || !ready ||
	    (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1)) {
		say(w->why, w->whysz, "%s at 0x%llx is not a compact str", what,
		    (unsigned long long)addr);
		return NULL;
	}
	/* The characters past PYFRAMES_STR_MAX are not read: the name is cut
	 * to that many bytes anyway. */
	size_t chars = length > PYFRAMES_STR_MAX ? PYFRAMES_STR_MAX : (size_t)length;
	uint64_t at = addr + (ascii ? L->str_ascii_size : L->str_compact_size);
	if (chars && !mem_read(w, at, data, chars * kind)) {
		say(w->why, w->whysz, "%s at 0x%llx: its characters are unreadable", what,
		    (unsigned long long)addr);
		return NULL;
	}
	char *out = malloc(PYFRAMES_STR_MAX + 1);
	size_t n = 0;
	if (!out) {
		*err = -ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < chars; i++) {
		uint32_t cp = kind == 1 ? data[i] : kind == 2 ? (uint32_t)data[2 * i] |
		              (uint32_t)data[2 * i + 1] << 8 : u32(data + 4 * i);
		if (ascii && cp >= 0x80) {
			free(out);
			say(w->why, w->whysz, "%s at 0x%llx: an ASCII str holds a byte over 0x7f",
			    what, (unsigned long long)addr);
			return NULL;
		}
		if (!put_utf8(out, &n, PYFRAMES_STR_MAX + 1, cp))
			break;
	}
	out[n] = '\0';
	return out;
}

/* The bytes object at ADDR: a copy of its data, at most
 * PYFRAMES_LINETABLE_MAX bytes. */
static unsigned char *read_bytes(const struct walk *w, uint64_t addr, size_t *len, int *err)
{
	const struct pyframes_layout *L = w->lay;
	unsigned char head[64];

	if (L->bytes_sval > sizeof(head) || !mem_read(w, addr, head, L->bytes_sval) ||
	    word(head + OB_TYPE) != w->types->bytes) {
		say(w->why, w->whysz, "co_linetable at 0x%llx is not a bytes object",
		    (unsigned long long)addr);
		return NULL;
	}
	uint64_t size = word(head + L->bytes_size);
	if (size > PYFRAMES_LINETABLE_MAX) {
		say(w->why, w->whysz, "co_linetable at 0x%llx is %llu bytes, over %u",
		    (unsigned long long)addr, (unsigned long long)size, PYFRAMES_LINETABLE_MAX);
		return NULL;
	}
	unsigned char *data = malloc(size ? (size_t)size : 1);
	if (!data) {
		*err = -ENOMEM;
		return NULL;
	}
	if (size && !mem_read(w, addr + L->bytes_sval, data, (size_t)size)) {
		free(data);
		say(w->why, w->whysz, "co_linetable at 0x%llx is unreadable",
		    (unsigned long long)addr);
		return NULL;
	}
	*len = (size_t)size;
	return data;
}

/* The code object at ADDR, from the cache when it says what the cached
 * one said.  NULL with w->why set, or *ERR -ENOMEM. */
static const struct code_entry *read_code(const struct walk *w, struct pyframes_cache *cache,
                                          uint64_t addr, uint64_t *nunits, int *err)
{
	const struct pyframes_layout *L = w->lay;
	unsigned char head[256];

	if (L->code_size > sizeof(head) || !mem_read(w, addr, head, L->code_size)) {
		say(w->why, w->whysz, "code object at 0x%llx is unreadable",
		    (unsigned long long)addr);
		return NULL;
	}
	if (word(head + OB_TYPE) != w->types->code) {
		say(w->why, w->whysz, "0x%llx is not a code object", (unsigned long long)addr);
		return NULL;
	}
	*nunits = word(head + 16);     /* PyVarObject.ob_size: code units */
	uint64_t filename = word(head + L->code_filename), qualname = word(head + L->code_qualname);
	uint64_t linetable = word(head + L->code_linetable);
	int first = (int)u32(head + L->code_firstlineno);
	struct code_entry *e = cache_slot(cache, addr);
	if (e->addr && e->filename_ptr == filename && e->qualname_ptr == qualname &&
	    e->linetable_ptr == linetable && e->firstlineno == first)
		return e;
	if (e->addr && cache->ndead + 3 <= sizeof(cache->dead) / sizeof(cache->dead[0])) {
		/* Changed: the code object was freed and its address reused.
		 * An earlier frame of this walk may name the old one. */
		cache->dead[cache->ndead++] = e->qualname;
		cache->dead[cache->ndead++] = e->filename;
		cache->dead[cache->ndead++] = (char *)e->linetable;
		cache->used--;
		cache->bytes -= strlen(e->qualname) + strlen(e->filename) + e->linetable_len + 2;
		memset(e, 0, sizeof(*e));
	} else if (e->addr) {
		say(w->why, w->whysz, "code objects change under the walk");
		return NULL;
	}
	char *q = read_str(w, qualname, "co_qualname", err);
	char *f = q ? read_str(w, filename, "co_filename", err) : NULL;
	size_t tlen = 0;
	unsigned char *t = f ? read_bytes(w, linetable, &tlen, err) : NULL;
	if (!t) {
		free(q);
		free(f);
		return NULL;
	}
	*e = (struct code_entry){
		.addr = addr, .filename_ptr = filename, .qualname_ptr = qualname,
		.linetable_ptr = linetable, .firstlineno = first,
		.qualname = q, .filename = f, .linetable = t, .linetable_len = tlen,
	};
	cache->used++;
	cache->bytes += strlen(q) + strlen(f) + tlen + 2;
	return e;
}

/* ---- the walk ---- */

/* Copies LEN bytes at ADDR from the LEN bytes at BASE copied from START. */
static bool from_copy(const unsigned char *base, uint64_t start, size_t n, uint64_t addr,
                      unsigned char *buf, size_t len)
{
	if (!base || addr < start || addr - start > n || n - (addr - start) < len)
		return false;
	memcpy(buf, base + (addr - start), len);
	return true;
}

/* The frame at ADDR: from the data stack or the C stack copied in the
 * stop, else read now. */
static bool read_frame(const struct walk *w, uint64_t addr, unsigned char *buf)
{
	const struct pyframes_copy *c = w->c;
	size_t len = w->lay->frame_size;

	return from_copy(c->data, c->data_addr, c->data_len, addr, buf, len) ||
	       from_copy(c->stack, c->stack_addr, c->stack_len, addr, buf, len) ||
	       mem_read(w, addr, buf, len);
}

int pyframes_walk(const struct pyframes_copy *c, const struct pyframes_types *types,
                  const struct pyframes_mem *mem, struct pyframes_cache *cache, size_t max,
                  struct pyframes_frame *out, size_t *n, bool *complete, char *why,
                  size_t whysz)
{
	struct walk w = { .c = c, .lay = c->lay, .types = types, .mem = mem,
	                  .why = why, .whysz = whysz };
	const struct pyframes_layout *L = c->lay;
	uint64_t cur = c->current_frame;
	unsigned char fr[256];
	int err = 0;

	*n = 0;
	*complete = false;
	why[0] = '\0';
	bury_dead(cache);
	if (cache->used + max > CACHE_MAX_ENTRIES || cache->bytes >= CACHE_MAX_BYTES)
		cache_clear(cache);
	if (max > STACKDUMP_MAX_FRAMES)
		max = STACKDUMP_MAX_FRAMES;
	if (!c->ok || L->frame_size > sizeof(fr)) {
		say(why, whysz, "the thread state was not read");
		return -EINVAL;
	}
	for (size_t depth = 0;; depth++) {
		if (cur == 0) {
			*complete = true;
			return 0;
		}
		if (*n == max)
			return 0;
		/* Frames are aligned, and a chain that comes back to a frame
		 * loops: a real chain never does. */
		if (cur & 7) {
			say(why, whysz, "frame %zu at 0x%llx is misaligned", depth,
			    (unsigned long long)cur);
			return -EINVAL;
		}
		for (size_t k = 0; k < *n; k++)
			if (out[k].frame == cur) {
				say(why, whysz, "the frame chain loops at frame %zu", depth);
				return -EINVAL;
			}
		if (depth >= 2 * max + 2) {
			say(why, whysz, "more than %zu frames without code", depth);
			return -EINVAL;
		}
		if (!read_frame(&w, cur, fr)) {
			say(why, whysz, "frame %zu at 0x%llx is unreadable", depth,
			    (unsigned long long)cur);
			return -EINVAL;
		}
		uint64_t prev = word(fr + L->frame_previous);
		if (L->frame_owner && fr[L->frame_owner] == OWNED_BY_CSTACK && !L->frame_is_entry) {
			/* 3.12+: the shim one C call of the interpreter
			 * pushes below the frames it runs. */
			if (*n)
				out[*n - 1].entry = true;
			cur = prev;
			continue;
		}
		uint64_t code = word(fr + L->frame_code), instr = word(fr + L->frame_instr), units;
		const struct code_entry *e = read_code(&w, cache, code, &units, &err);
		if (!e) {
			if (err)
				return err;
			char inner[160];
			snprintf(inner, sizeof(inner), "%s", why);
			say(why, whysz, "frame %zu: %s", depth, inner);
			return -EINVAL;
		}
		uint64_t start = code + L->code_adaptive;
		int addrq = -1;
		if (instr >= start && instr - start < units * 2 && units < (1u << 28))
			addrq = (int)(instr - start);
		out[(*n)++] = (struct pyframes_frame){
			.frame = cur, .code = code, .instr = instr,
			.qualname = e->qualname, .filename = e->filename,
			.firstlineno = e->firstlineno,
			.line = pyframes_line(e->linetable, e->linetable_len, e->firstlineno, addrq),
			.entry = L->frame_is_entry && fr[L->frame_is_entry] != 0,
		};
		cur = prev;
	}
}
