/* pyframes: CPython's frames, merged with the native ones.  See pyframes.h. */
#include "stackdump/pyframes.h"

#include "stackdump/elfinfo.h"
#include "stackdump/targetfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- layouts ----
 *
 * CPython 3.11, from its own headers (Debian 12's python3.11-dev 3.11.2,
 * /usr/include/python3.11), computed with offsetof by
 * tests/stackdump/pyoffsets.c, which test_languages.py compiles against
 * the installed headers and compares with this table:
 *   runtime_interpreters_head  internal/pycore_runtime.h  _PyRuntimeState.interpreters.head
 *   interp_next, interp_threads_head  internal/pycore_interp.h  struct _is: next, threads.head
 *   tstate_*                   cpython/pystate.h  struct _ts: next, native_thread_id,
 *                              cframe, datastack_chunk, datastack_top (tstate_size: up to
 *                              datastack_limit, the last field read)
 *   cframe_current_frame       cpython/pystate.h  _PyCFrame.current_frame
 *   frame_*                    internal/pycore_frame.h  _PyInterpreterFrame: f_code,
 *                              previous, prev_instr, is_entry, owner (frame_size: up to
 *                              localsplus)
 *   code_*                     cpython/code.h  PyCodeObject: co_firstlineno, co_filename,
 *                              co_qualname, co_linetable, co_code_adaptive
 *   str_*                      cpython/unicodeobject.h  PyASCIIObject.state, .length,
 *                              sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject)
 *   bytes_*                    object.h PyVarObject.ob_size, cpython/bytesobject.h
 *                              PyBytesObject.ob_sval
 * The layout of these structs is fixed within a minor version (CPython
 * keeps its ABI within 3.11.x).  3.12 the same way, from 3.12.1's headers
 * (pyenv's build here); its frames have no is_entry: one C call of the
 * interpreter pushes a shim frame owned by the C stack below the frames
 * it runs.  3.13 publishes its own offsets (struct debug_offsets). */
static const struct pyframes_layout layout_311 = {
	.version = 0x030b,
	.runtime_interpreters_head = 40,
	.interp_next = 0,
	.interp_threads_head = 16,
	.tstate_size = 320,
	.tstate_next = 8,
	.tstate_native_thread_id = 160,
	.tstate_cframe = 56,
	.tstate_current_frame = 0,
	.tstate_datastack_chunk = 296,
	.tstate_datastack_top = 304,
	.cframe_current_frame = 8,
	.frame_size = 72,
	.frame_code = 32,
	.frame_previous = 48,
	.frame_instr = 56,
	.frame_is_entry = 68,
	.frame_owner = 69,
	.code_size = 184,
	.code_firstlineno = 72,
	.code_filename = 112,
	.code_qualname = 128,
	.code_linetable = 136,
	.code_adaptive = 184,
	.str_state = 32,
	.str_length = 16,
	.str_ascii_size = 48,
	.str_compact_size = 72,
	.bytes_size = 16,
	.bytes_sval = 32,
	.str_ready_bit = true,
};

static const struct pyframes_layout layout_312 = {
	.version = 0x030c,
	.runtime_interpreters_head = 40,
	.interp_next = 0,
	.interp_threads_head = 72,
	.tstate_size = 256,
	.tstate_next = 8,
	.tstate_native_thread_id = 144,
	.tstate_cframe = 56,
	.tstate_current_frame = 0,
	.tstate_datastack_chunk = 232,
	.tstate_datastack_top = 240,
	.cframe_current_frame = 0,
	.frame_size = 72,
	.frame_code = 0,
	.frame_previous = 8,
	.frame_instr = 56,
	.frame_is_entry = 0,
	.frame_owner = 70,
	.code_size = 192,
	.code_firstlineno = 68,
	.code_filename = 112,
	.code_qualname = 128,
	.code_linetable = 136,
	.code_adaptive = 192,
	.str_state = 32,
	.str_length = 16,
	.str_ascii_size = 40,
	.str_compact_size = 56,
	.bytes_size = 16,
	.bytes_sval = 32,
	.str_ready_bit = false,
};

const struct pyframes_layout *pyframes_layout(unsigned version)
{
	static const struct pyframes_layout *const all[] = { &layout_311, &layout_312 };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i]->version == version)
			return all[i];
	return NULL;
}

/* CPython 3.13's _Py_DebugOffsets (internal/pycore_runtime.h of 3.13.0),
 * which _PyRuntime starts with: the version's own offsets, for debuggers.
 * Its shape changes between minor versions (3.14 adds fields): it is read
 * for 3.13 only, with its cookie, version and build checked. */
struct debug_offsets {
	char cookie[8];                   /* "xdebugpy" */
	uint64_t version, free_threaded;
	struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
	struct {
		uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
		         ceval_gil, gil_runtime_state, gil_runtime_state_enabled,
		         gil_runtime_state_locked, gil_runtime_state_holder;
	} interpreter_state;
	struct {
		uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
		         datastack_chunk, status;
	} thread_state;
	struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } frame;
	struct {
		uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
		         localsplusnames, localspluskinds, co_code_adaptive;
	} code_object;
	struct { uint64_t size, ob_type; } pyobject;
	struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
	struct { uint64_t size, ob_item, ob_size; } tuple_object, list_object;
	struct { uint64_t size, ma_keys, ma_values; } dict_object;
	struct { uint64_t size, ob_fval; } float_object;
	struct { uint64_t size, lv_tag, ob_digit; } long_object;
	struct { uint64_t size, ob_size, ob_sval; } bytes_object;
	struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
};

/* PyObject.ob_type, the same in every version. */
#define OB_TYPE 8

size_t pyframes_debug_offsets_size(void)
{
	return sizeof(struct debug_offsets);
}

int pyframes_layout_from_debug(const void *image, size_t len, unsigned version,
                               struct pyframes_layout *L, char *why, size_t whysz)
{
	struct debug_offsets d;

	if (len < sizeof(d)) {
		snprintf(why, whysz, "its debug offsets are cut short");
		return -EINVAL;
	}
	memcpy(&d, image, sizeof(d));
	if (memcmp(d.cookie, "xdebugpy", 8) != 0 || (d.version >> 16) != version) {
		snprintf(why, whysz, "its _PyRuntime does not start with 3.13's debug offsets");
		return -EINVAL;
	}
	if (d.free_threaded) {
		snprintf(why, whysz, "a free-threaded build");
		return -EINVAL;
	}
	*L = (struct pyframes_layout){
		.version = version,
		.runtime_interpreters_head = (uint32_t)d.runtime_state.interpreters_head,
		.interp_next = (uint32_t)d.interpreter_state.next,
		.interp_threads_head = (uint32_t)d.interpreter_state.threads_head,
		.tstate_next = (uint32_t)d.thread_state.next,
		.tstate_native_thread_id = (uint32_t)d.thread_state.native_thread_id,
		.tstate_current_frame = (uint32_t)d.thread_state.current_frame,
		.tstate_datastack_chunk = (uint32_t)d.thread_state.datastack_chunk,
		/* Not published: datastack_top and datastack_limit follow
		 * datastack_chunk in struct _ts of 3.11 to 3.13 (pyoffsets.c
		 * checks it against the headers). */
		.tstate_datastack_top = (uint32_t)d.thread_state.datastack_chunk + 8,
		.tstate_size = (uint32_t)d.thread_state.datastack_chunk + 24,
		.frame_size = (uint32_t)d.frame.localsplus,
		.frame_code = (uint32_t)d.frame.executable,
		.frame_previous = (uint32_t)d.frame.previous,
		.frame_instr = (uint32_t)d.frame.instr_ptr,
		.frame_owner = (uint32_t)d.frame.owner,
		.code_size = (uint32_t)d.code_object.co_code_adaptive,
		.code_firstlineno = (uint32_t)d.code_object.firstlineno,
		.code_filename = (uint32_t)d.code_object.filename,
		.code_qualname = (uint32_t)d.code_object.qualname,
		.code_linetable = (uint32_t)d.code_object.linetable,
		.code_adaptive = (uint32_t)d.code_object.co_code_adaptive,
		.str_state = (uint32_t)d.unicode_object.state,
		.str_length = (uint32_t)d.unicode_object.length,
		.str_ascii_size = (uint32_t)d.unicode_object.asciiobject_size,
		/* PyCompactUnicodeObject: utf8_length and utf8 after it. */
		.str_compact_size = (uint32_t)d.unicode_object.asciiobject_size + 16,
		.bytes_size = (uint32_t)d.bytes_object.ob_size,
		.bytes_sval = (uint32_t)d.bytes_object.ob_sval,
	};
	/* Each offset must leave its field inside what the walk reads. */
	bool ok = d.pyobject.ob_type == OB_TYPE && d.runtime_state.interpreters_head < (1u << 20) &&
	          d.interpreter_state.next < (1u << 20) && d.interpreter_state.threads_head < (1u << 20) &&
	          L->tstate_size <= PYFRAMES_TSTATE_MAX && d.thread_state.datastack_chunk <= PYFRAMES_TSTATE_MAX &&
	          d.thread_state.next + 8 <= L->tstate_size &&
	          d.thread_state.native_thread_id + 8 <= L->tstate_size &&
	          d.thread_state.current_frame + 8 <= L->tstate_size && L->tstate_current_frame &&
	          L->frame_size <= 256 && d.frame.previous + 8 <= L->frame_size &&
	          d.frame.executable + 8 <= L->frame_size && d.frame.instr_ptr + 8 <= L->frame_size &&
	          d.frame.owner < L->frame_size && L->code_size <= 256 &&
	          d.code_object.filename + 8 <= L->code_size && d.code_object.qualname + 8 <= L->code_size &&
	          d.code_object.linetable + 8 <= L->code_size &&
	          d.code_object.firstlineno + 4 <= L->code_size &&
	          L->str_compact_size <= 128 && d.unicode_object.state + 4 <= L->str_ascii_size &&
	          d.unicode_object.length + 8 <= L->str_ascii_size && L->bytes_sval <= 64 &&
	          d.bytes_object.ob_size + 8 <= L->bytes_sval;
	if (!ok) {
		snprintf(why, whysz, "its debug offsets are out of range");
		return -EINVAL;
	}
	return 0;
}
/* _PyStackChunk.data: previous, size, top, then the data. */
#define CHUNK_DATA 24
/* owner of 3.12's shim frames on the C stack (FRAME_OWNED_BY_CSTACK). */
#define OWNED_BY_CSTACK 3
/* Interpreters and threads looked at when finding a thread's state. */
#define MAX_INTERPRETERS 64
#define MAX_THREADS 4096
/* Code objects cached per process, and the bytes their strings and line
 * tables may take: past either, the cache starts afresh before a walk (a
 * walk adds at most one entry per frame, STACKDUMP_MAX_FRAMES, so the
 * table never fills). */
#define CACHE_SLOTS 8192
#define CACHE_MAX_ENTRIES 4096
#define CACHE_MAX_BYTES (8u << 20)

__attribute__((format(printf, 3, 4)))
static void say(char *why, size_t whysz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whysz, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t word(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

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

/* ---- the merge ---- */

static bool is_interp(const struct stackdump_frame *f, const char *interp)
{
	return f->module && strcmp(f->module, interp) == 0;
}

/* _PyEval_EvalFrameDefault, or a part the compiler split off
 * (_PyEval_EvalFrameDefault.cold, when a .symtab names it). */
static bool is_eval(const struct stackdump_frame *f, const char *interp)
{
	static const char name[] = "_PyEval_EvalFrameDefault";
	size_t len = sizeof(name) - 1;

	return is_interp(f, interp) && f->symbol && strncmp(f->symbol, name, len) == 0 &&
	       (f->symbol[len] == '\0' || f->symbol[len] == '.');
}

void pyframes_merge(const struct stackdump_frame *native, size_t n, bool native_complete,
                    const char *interp, const struct pyframes_frame *py, size_t npy,
                    bool complete, size_t max, struct pyframes_slot *out, size_t *nout,
                    bool *truncated)
{
	size_t ngroups = 0, nevals = 0, no = 0;

	for (size_t i = 0; i < npy; i++)
		if (py[i].entry || i + 1 == npy)
			ngroups++;
	for (size_t i = 0; i < n; i++)
		if (is_eval(&native[i], interp))
			nevals++;
	/* The group of the innermost call: 0, or less when the outer calls
	 * are to be matched first. */
	long group = 0;
	if (native_complete && complete && ngroups < nevals)
		group = (long)ngroups - (long)nevals;
	size_t pi = 0;                 /* the first Python frame of GROUP */
	*truncated = false;

#define EMIT(isp, idx) do { \
		if (no == max) { *truncated = true; goto done; } \
		out[no++] = (struct pyframes_slot){ .python = (isp), .index = (idx) }; \
	} while (0)

	for (size_t i = 0; i < n;) {
		if (!is_interp(&native[i], interp)) {
			EMIT(false, i);
			i++;
			continue;
		}
		size_t j = i, calls = 0;
		while (j < n && is_interp(&native[j], interp))
			calls += is_eval(&native[j++], interp);
		/* Whether every call of the run has a group. */
		long last = group + (long)calls - 1;
		if (calls == 0 || last >= (long)ngroups) {
			for (; i < j; i++)
				EMIT(false, i);
			group += (long)calls;
			continue;
		}
		for (; i < j; i++) {
			if (!is_eval(&native[i], interp))
				continue;
			if (group++ < 0)
				continue;      /* a call whose frame is not pushed yet */
			for (; pi < npy; pi++) {
				EMIT(true, pi);
				if (py[pi].entry) {
					pi++;
					break;
				}
			}
		}
	}
done:
#undef EMIT
	*nout = no;
}

/* ---- the process ---- */

/* The symbols that make a module CPython's interpreter. */
enum { SYM_RUNTIME, SYM_CODE, SYM_VERSION, SYM_UNICODE, SYM_BYTES, NSYMS };
static const char *const sym_names[NSYMS] = {
	"_PyRuntime", "PyCode_Type", "Py_Version", "PyUnicode_Type", "PyBytes_Type",
};

#define MAX_SEEN 8
#define NEG_SLOTS 64
#define NEG_TTL_NS (10 * 1000000000ull)

struct pyframes_proc {
	pid_t pid;
	/* The maps the verdict was made for. */
	const char *maps_text;
	size_t maps_len;
	unsigned mods_gen;
	/* Modules looked at, and what they were. */
	struct { const struct module *mod; uint64_t start; int verdict; } seen[MAX_SEEN];
	size_t nseen;
	size_t found;                 /* the one of SEEN PP's interpreter fields
	                                 describe; MAX_SEEN: none */
	/* The interpreter. */
	int verdict;                  /* 0 found; -ENOENT none; -ENOTSUP */
	char interp[4096];            /* its path as the maps print it */
	char version[24];             /* "3.11.2" */
	char why[200];                /* why an interpreter found is not read */
	bool told;                    /* WHY was given to the caller */
	const struct pyframes_layout *lay;
	struct pyframes_layout dyn;   /* 3.13's, from its debug offsets */
	uint64_t runtime;
	struct pyframes_types types;
	/* Thread states by tid, from the last walk of the list. */
	struct { pid_t tid; uint64_t tstate; } *threads;
	size_t nthreads;
	struct { pid_t tid; uint64_t until; } neg[NEG_SLOTS];  /* not found lately */
	unsigned nextneg;
	struct pyframes_cache *cache;
};

static int live_read(void *arg, uint64_t addr, void *buf, size_t len)
{
	pid_t pid = *(const pid_t *)arg;
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}

static bool read_word(pid_t pid, uint64_t addr, uint64_t *v)
{
	return addr && live_read(&pid, addr, v, sizeof(*v)) == 0;
}

void pyframes_proc_free(struct pyframes_proc *pp)
{
	if (!pp)
		return;
	free(pp->threads);
	pyframes_cache_free(pp->cache);
	free(pp);
}

/* Whether module MOD, mapped by E, is a CPython interpreter: fills PP's
 * interpreter fields.  Returns 0, -ENOENT or -ENOTSUP. */
static int examine(struct pyframes_proc *pp, const struct module *mod,
                   const struct procmaps_entry *e)
{
	uint64_t v[NSYMS], bias;
	bool exact;

	if (mod->err != 0)
		return -ENOENT;            /* its file is not provably the mapped one */
	int fd = targetfs_open_mapped(pp->pid, e, &exact);
	if (fd < 0)
		return -ENOENT;
	int r = elfinfo_dynsym_values(fd, sym_names, NSYMS, v);
	close(fd);
	if (r < 0 || !v[SYM_RUNTIME] || !v[SYM_CODE])
		return -ENOENT;
	module_bias(mod, e, e->start, &bias);
	snprintf(pp->interp, sizeof(pp->interp), "%s", e->path);
	const char *file = stackdump_module_file(e->path);
	uint64_t hex = 0;
	if (!v[SYM_VERSION] || !read_word(pp->pid, bias + v[SYM_VERSION], &hex)) {
		snprintf(pp->version, sizeof(pp->version), "before 3.11");
		say(pp->why, sizeof(pp->why), "python frames of %s are not read: CPython before "
		    "3.11 (no Py_Version), only 3.11, 3.12 and 3.13 are known", file);
		return -ENOTSUP;
	}
	snprintf(pp->version, sizeof(pp->version), "%u.%u.%u", (unsigned)(hex >> 24 & 0xff),
	         (unsigned)(hex >> 16 & 0xff), (unsigned)(hex >> 8 & 0xff));
	unsigned minor = (unsigned)(hex >> 16 & 0xffff);
	pp->lay = pyframes_layout(minor);
	if (!pp->lay && minor == 0x030d) {
		unsigned char image[sizeof(struct debug_offsets)];
		char why[120];
		if (live_read(&pp->pid, bias + v[SYM_RUNTIME], image, sizeof(image)) < 0) {
			say(pp->why, sizeof(pp->why), "python frames of %s are not read: its "
			    "_PyRuntime is unreadable", file);
			return -ENOTSUP;
		}
		if (pyframes_layout_from_debug(image, sizeof(image), minor, &pp->dyn, why,
		                               sizeof(why)) < 0) {
			say(pp->why, sizeof(pp->why), "python frames of %s are not read: CPython %s, "
			    "%s", file, pp->version, why);
			return -ENOTSUP;
		}
		pp->lay = &pp->dyn;
	}
	if (!pp->lay || !v[SYM_UNICODE] || !v[SYM_BYTES]) {
		say(pp->why, sizeof(pp->why), "python frames of %s are not read: CPython %s, only "
		    "3.11, 3.12 and 3.13 are known", file, pp->version);
		return -ENOTSUP;
	}
	pp->runtime = bias + v[SYM_RUNTIME];
	pp->types = (struct pyframes_types){
		.code = bias + v[SYM_CODE], .unicode = bias + v[SYM_UNICODE],
		.bytes = bias + v[SYM_BYTES],
	};
	return 0;
}

/* Finds the interpreter among AS's modules when they changed: the
 * executable (the first file mapping) and any file named python* or
 * libpython*. */
static void detect(struct pyframes_proc *pp, const struct addrspace *as)
{
	if (pp->maps_text == as->maps.text && pp->maps_len == as->maps.len &&
	    pp->mods_gen == as->mods_gen)
		return;
	pp->maps_text = as->maps.text;
	pp->maps_len = as->maps.len;
	pp->mods_gen = as->mods_gen;
	pp->verdict = -ENOENT;
	bool first = true;
	for (size_t i = 0; i < as->maps.n && as->mods; i++) {
		const struct procmaps_entry *e = &as->maps.v[i];
		const struct module *mod = as->mods[i];
		if (!mod || e->path[0] != '/')
			continue;
		const char *file = stackdump_module_file(e->path);
		bool cand = first || strncmp(file, "python", 6) == 0 ||
		            strncmp(file, "libpython", 9) == 0;
		first = false;
		if (!cand)
			continue;
		size_t k = 0;
		while (k < pp->nseen && (pp->seen[k].mod != mod || pp->seen[k].start != e->start))
			k++;
		int verdict;
		if (k < pp->nseen && pp->seen[k].verdict == -ENOENT) {
			continue;
		} else if (k < pp->nseen && k == pp->found) {
			/* The interpreter examined last, where it was: its
			 * addresses in PP still hold (the maps change with
			 * every new thread stack). */
			verdict = pp->seen[k].verdict;
		} else {
			verdict = examine(pp, mod, e);
			if (k == pp->nseen && k < MAX_SEEN)
				pp->nseen++;
			if (k < MAX_SEEN)
				pp->seen[k] = (typeof(pp->seen[0])){ mod, e->start, verdict };
			if (verdict != -ENOENT)
				pp->found = k;
		}
		if (verdict != -ENOENT) {
			pp->verdict = verdict;
			if (verdict == 0)
				pp->why[0] = '\0';
			return;
		}
	}
}

/* Walks _PyRuntime.interpreters.head -> threads into PP->threads. */
static int walk_threads(struct pyframes_proc *pp)
{
	const struct pyframes_layout *L = pp->lay;
	uint64_t interp = 0;
	size_t n = 0, cap = 0;

	pp->nthreads = 0;
	if (!read_word(pp->pid, pp->runtime + L->runtime_interpreters_head, &interp))
		return 0;
	for (int ni = 0; interp && ni < MAX_INTERPRETERS; ni++) {
		uint64_t ts = 0, next = 0;
		read_word(pp->pid, interp + L->interp_threads_head, &ts);
		for (; ts && n < MAX_THREADS; n++) {
			uint64_t tid = 0;
			if (!read_word(pp->pid, ts + L->tstate_native_thread_id, &tid))
				break;
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				void *v = realloc(pp->threads, cap * sizeof(*pp->threads));
				if (!v)
					return -ENOMEM;
				pp->threads = v;
			}
			pp->threads[n].tid = (pid_t)tid;
			pp->threads[n].tstate = ts;
			pp->nthreads = n + 1;
			if (!read_word(pp->pid, ts + L->tstate_next, &ts))
				break;
		}
		if (!read_word(pp->pid, interp + L->interp_next, &next))
			break;
		interp = next;
	}
	return 0;
}

static uint64_t find_tstate(const struct pyframes_proc *pp, pid_t tid)
{
	for (size_t i = 0; i < pp->nthreads; i++)
		if (pp->threads[i].tid == tid)
			return pp->threads[i].tstate;
	return 0;
}

static struct pyframes_proc *proc_get(struct pyframes_proc **pp, pid_t pid)
{
	if (*pp && (*pp)->pid != pid) {
		pyframes_proc_free(*pp);
		*pp = NULL;
	}
	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return NULL;
		(*pp)->pid = pid;
		(*pp)->verdict = -ENOENT;
		(*pp)->found = MAX_SEEN;
	}
	return *pp;
}

int pyframes_prepare(struct pyframes_proc **ppp, const struct addrspace *as, pid_t tid,
                     struct pyframes_copy *c, char *why, size_t whysz)
{
	struct pyframes_proc *pp = proc_get(ppp, as->pid);

	c->lay = NULL;
	c->ok = false;
	c->why[0] = '\0';
	if (!pp)
		return -ENOMEM;
	detect(pp, as);
	if (pp->verdict == -ENOTSUP && !pp->told) {
		pp->told = true;
		snprintf(why, whysz, "%s", pp->why);
	}
	if (pp->verdict != 0)
		return pp->verdict;
	uint64_t ts = find_tstate(pp, tid);
	if (!ts) {
		uint64_t now = now_ns();
		for (unsigned i = 0; i < NEG_SLOTS; i++)
			if (pp->neg[i].tid == tid && pp->neg[i].until > now)
				return -ENOENT;
		if (walk_threads(pp) < 0)
			return -ENOMEM;
		ts = find_tstate(pp, tid);
		if (!ts) {
			pp->neg[pp->nextneg].tid = tid;
			pp->neg[pp->nextneg].until = now + NEG_TTL_NS;
			pp->nextneg = (pp->nextneg + 1) % NEG_SLOTS;
			return -ENOENT;
		}
	}
	c->lay = pp->lay;
	c->tstate = ts;
	c->tid = tid;
	return 0;
}

/* ---- the stop ---- */

int pyframes_copy_init(struct pyframes_copy *c)
{
	memset(c, 0, sizeof(*c));
	c->data = malloc(PYFRAMES_DATA_COPY);
	if (!c->data)
		return -ENOMEM;
	memset(c->data, 0, PYFRAMES_DATA_COPY);   /* no page fault in the stop */
	return 0;
}

void pyframes_copy_free(struct pyframes_copy *c)
{
	free(c->data);
	memset(c, 0, sizeof(*c));
}

void pyframes_in_stop(void *arg, pid_t tid, const struct snapshot *snap)
{
	struct pyframes_copy *c = arg;
	const struct pyframes_layout *L = c->lay;
	uint64_t t0 = now_ns();

	c->ok = false;
	c->data_len = 0;
	c->current_frame = 0;
	c->stack = snap->stack;
	c->stack_addr = snap->stack_addr;
	c->stack_len = snap->stack_len;
	if (!L || c->tid != tid || L->tstate_size > sizeof(c->ts))
		return;
	struct iovec local = { c->ts, L->tstate_size };
	struct iovec remote = { (void *)(uintptr_t)c->tstate, L->tstate_size };
	if (process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)L->tstate_size) {
		snprintf(c->why, sizeof(c->why), "its thread state at 0x%llx is unreadable",
		         (unsigned long long)c->tstate);
		goto out;
	}
	if (word(c->ts + L->tstate_native_thread_id) != (uint64_t)tid) {
		snprintf(c->why, sizeof(c->why), "its thread state at 0x%llx is another thread's",
		         (unsigned long long)c->tstate);
		goto out;
	}
	/* The current frame: in 3.11 and 3.12 through the _PyCFrame of the
	 * innermost C call of the interpreter, a variable on the C stack
	 * (copied already) or the thread state's root_cframe. */
	uint64_t at = 0, val;
	if (L->tstate_current_frame) {
		c->current_frame = word(c->ts + L->tstate_current_frame);
	} else {
		at = word(c->ts + L->tstate_cframe) + L->cframe_current_frame;
		if (snapshot_word(snap, at, &val)) {
			c->current_frame = val;
			at = 0;
		} else if (at >= c->tstate && at - c->tstate + 8 <= L->tstate_size) {
			c->current_frame = word(c->ts + (at - c->tstate));
			at = 0;
		}
	}
	/* The used part of the data stack: its current chunk, from the top
	 * down, at most PYFRAMES_DATA_COPY bytes. */
	uint64_t chunk = word(c->ts + L->tstate_datastack_chunk);
	uint64_t top = word(c->ts + L->tstate_datastack_top);
	uint64_t from = chunk + CHUNK_DATA;
	if (top >= from && top - from > PYFRAMES_DATA_COPY)
		from = top - PYFRAMES_DATA_COPY;
	size_t len = top >= from && chunk ? (size_t)(top - from) : 0;
	struct iovec l2[2], r2[2];
	int n = 0;
	if (at) {
		l2[n] = (struct iovec){ &c->current_frame, 8 };
		r2[n++] = (struct iovec){ (void *)(uintptr_t)at, 8 };
	}
	if (len) {
		l2[n] = (struct iovec){ c->data, len };
		r2[n++] = (struct iovec){ (void *)(uintptr_t)from, len };
	}
	ssize_t got = n ? process_vm_readv(tid, l2, (unsigned long)n, r2, (unsigned long)n, 0) : 0;
	if (at && got < 8) {
		snprintf(c->why, sizeof(c->why), "its current frame at 0x%llx is unreadable",
		         (unsigned long long)at);
		goto out;
	}
	if (got > 0 && len) {
		c->data_addr = from;
		c->data_len = (size_t)got - (at ? 8 : 0);
	}
	c->ok = true;
out:
	c->ns = now_ns() - t0;
}

/* ---- after the stop ---- */

static int make_frame(struct stackdump_frame *f, const struct pyframes_frame *p)
{
	memset(f, 0, sizeof(*f));
	f->ip = p->instr;
	f->offset = (uint64_t)p->line;
	f->func_offset = (uint64_t)(p->firstlineno > 0 ? p->firstlineno : 0);
	f->symbol_offset = p->line > p->firstlineno ? (uint64_t)(p->line - p->firstlineno) : 0;
	f->line = p->line > 0 ? (unsigned)p->line : 0;
	f->module = strdup(p->filename);
	f->file = strdup(p->filename);
	f->build_id = strdup(STACKDUMP_PYTHON);
	f->symbol = strdup(p->qualname);
	return f->module && f->file && f->build_id && f->symbol ? 0 : -ENOMEM;
}

static void free_frame(struct stackdump_frame *f)
{
	free(f->module);
	free(f->build_id);
	free(f->symbol);
	free(f->file);
	memset(f, 0, sizeof(*f));
}

/* Replaces OUT's frames by the merge's SLOTS. */
static int apply(struct stackdump_stack *out, const struct pyframes_slot *slots, size_t ns,
                 const struct pyframes_frame *py)
{
	struct stackdump_frame *v = calloc(ns ? ns : 1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < ns; i++) {
		if (!slots[i].python) {
			v[i] = out->frames[slots[i].index];
			memset(&out->frames[slots[i].index], 0, sizeof(*v));
		} else if (make_frame(&v[i], &py[slots[i].index]) < 0) {
			for (size_t k = 0; k <= i; k++)
				free_frame(&v[k]);
			free(v);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < out->nframes; i++)
		free_frame(&out->frames[i]);
	free(out->frames);
	out->frames = v;
	out->nframes = ns;
	out->hash = stackdump_hash(v, ns);
	return 0;
}

int pyframes_merge_stack(struct pyframes_proc *pp, const struct addrspace *as,
                         const struct pyframes_copy *c, size_t max_frames,
                         struct stackdump_stack *out)
{
	char why[200];

	if (!pp || pp->verdict != 0 || !c->lay)
		return 0;
	if (!c->ok) {
		if (c->why[0] && !out->error[0])
			snprintf(out->error, sizeof(out->error), "python frames: %s", c->why);
		return 0;
	}
	if (!pp->cache && !(pp->cache = pyframes_cache_new()))
		return -ENOMEM;
	struct pyframes_frame *py = malloc(max_frames * sizeof(*py));
	struct pyframes_slot *slots = malloc(max_frames * sizeof(*slots));
	pid_t pid = as->pid;
	struct pyframes_mem mem = { live_read, &pid };
	size_t npy = 0, ns = 0;
	bool complete = false, cut = false;
	int r = -ENOMEM;
	if (!py || !slots)
		goto done;
	r = pyframes_walk(c, &pp->types, &mem, pp->cache, max_frames, py, &npy, &complete, why,
	                  sizeof(why));
	if (r == -EINVAL) {
		if (!out->error[0])
			snprintf(out->error, sizeof(out->error), "python frames: %s", why);
		r = 0;
		goto done;
	}
	if (r < 0 || npy == 0)
		goto done;
	bool native_complete = !out->truncated && !out->error[0];
	pyframes_merge(out->frames, out->nframes, native_complete, pp->interp, py, npy, complete,
	               max_frames, slots, &ns, &cut);
	r = apply(out, slots, ns, py);
	if (r == 0 && cut)
		out->truncated = true;
done:
	free(py);
	free(slots);
	return r;
}

int pyframes_describe(struct pyframes_proc **ppp, const struct addrspace *as, char *version,
                      size_t len)
{
	struct pyframes_proc *pp = proc_get(ppp, as->pid);

	snprintf(version, len, "%s", "");
	if (!pp)
		return -ENOMEM;
	detect(pp, as);
	if (pp->verdict != -ENOENT)
		snprintf(version, len, "%s", pp->version);
	return pp->verdict == 0 ? 1 : pp->verdict == -ENOENT ? 0 : pp->verdict;
}
