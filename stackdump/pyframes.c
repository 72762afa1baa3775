/* pyframes: CPython's frames, merged with the native ones: the merge, the
 * interpreter and the thread's state found before the stop, the copy in
 * it.  See pyframes.h; the layouts are in pylayout.c, the walk of the
 * frames in pywalk.c. */
#include "stackdump/pyframes_internal.h"

#include "stackdump/elfinfo.h"
#include "stackdump/targetfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* _PyStackChunk.data: previous, size, top, then the data. */
#define CHUNK_DATA 24
/* Interpreters and threads looked at when finding a thread's state. */
#define MAX_INTERPRETERS 64
#define MAX_THREADS 4096

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
