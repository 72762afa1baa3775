/* stackdump: stop one thread, copy its stack, let it go, then unwind.
 *
 * One dump, in order:
 *   1. before the stop: the thread's state from /proc (a thread in D is
 *      never interrupted, see below); the maps and ELF files of the process,
 *      when the cached ones may be stale (modules.c);
 *   2. the stop (snapshot.c): PTRACE_SEIZE, PTRACE_INTERRUPT, wait with a
 *      deadline, PTRACE_GETREGS, one process_vm_readv of the live stack,
 *      PTRACE_DETACH.  Nothing else happens while the thread is stopped;
 *   3. after the stop: the unwind of the copy with libunwind's remote API
 *      (unwind.c), with the maps read again when a frame is in none of
 *      them; modules, build-ids, offsets and symbol names (elfinfo.c).
 *
 * Measured on a 1,003-thread target as the target sees it
 * (bench/README.md §7): libunwind-ptrace unwinding while the thread is stopped
 * stops it 1.3 ms warm, 3.0 ms cold; the stop and copy alone, 55 µs.
 *
 * Threads that do not stop within the deadline stay traced with an interrupt
 * pending (the kernel offers no way to cancel it): they are kept on
 * sd->pending and detached by stackdump_poll() as soon as they stop.
 */
#include "stackdump/stackdump.h"

#include "stackdump/elfinfo.h"
#include "stackdump/modules.h"
#include "stackdump/perfmap.h"
#include "stackdump/pyframes.h"
#include "stackdump/demangle.h"
#include "stackdump/procmaps.h"
#include "stackdump/snapshot.h"
#include "stackdump/unwind.h"
#include "procfs/procfs.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct stackdump {
	struct addrspace *procs;
	size_t nprocs, capprocs;
	struct modules ms;
	struct snapshot_pending pending;
	struct snapshot_hints hints;
	struct snapshot snap;       /* the copy of the last dump */
	struct unwind_frame raw[STACKDUMP_MAX_FRAMES];
	bool languages;             /* Python and JIT frames (pyframes.h, perfmap.h) */
	struct pyframes_copy py;    /* a CPython thread's state, copied in the stop */
	void (*note)(const char *msg, void *arg);
	void *note_arg;
};

__attribute__((format(printf, 2, 3)))
static void set_error(struct stackdump_stack *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out->error, sizeof(out->error), fmt, ap);
	va_end(ap);
}


/* The start time of process PID: its leader thread's.  From the leader's
 * own stat, not /proc/PID/stat, which sums the times of every thread
 * (about 150 µs more per read at 1,000 threads). */
static int process_start(pid_t pid, unsigned long long *start)
{
	struct procfs_stat st;
	int r = procfs_read_stat(pid, pid, &st);

	*start = st.start_time;
	return r;
}

static bool stat_exiting(const struct procfs_stat *st)
{
	return st->state == 'Z' || st->state == 'X' || (st->flags & PROCFS_PF_EXITING);
}

/* Whether thread TID of PID is gone or on its way out: PTRACE_SEIZE
 * refuses a thread that has begun to exit with EPERM, the error a missing
 * privilege gives, and an exiting thread may be in D for a moment (each 1
 * dump in 1,000 of threads that come and go, tests/faults/test_stopped.py). */
static bool thread_exiting(pid_t pid, pid_t tid)
{
	struct procfs_stat st;
	int r = procfs_read_stat(pid, tid, &st);

	return r == -ESRCH || (r == 0 && stat_exiting(&st));
}

/* ---- processes ---- */

/* Drops the caches of processes that exited, so that a daemon watching a
 * host where processes come and go does not grow. */
static void forget_exited(struct stackdump *sd)
{
	for (size_t i = 0; i < sd->nprocs;) {
		if (kill(sd->procs[i].pid, 0) < 0 && errno == ESRCH) {
			addrspace_clear(&sd->procs[i]);
			sd->procs[i] = sd->procs[--sd->nprocs];
		} else {
			i++;
		}
	}
}

int stackdump_poll(struct stackdump *sd)
{
	forget_exited(sd);
	return snapshot_poll(&sd->pending);
}

/* The cached address space of process PID started at START_TIME, new or
 * reset when the pid was reused. */
static int proc_get(struct stackdump *sd, pid_t pid, unsigned long long start_time,
                    struct addrspace **out)
{
	struct addrspace *p = NULL;

	for (size_t i = 0; i < sd->nprocs; i++)
		if (sd->procs[i].pid == pid)
			p = &sd->procs[i];
	if (p && p->start_time != start_time)
		addrspace_clear(p);
	if (!p) {
		if (sd->nprocs == sd->capprocs) {
			size_t cap = sd->capprocs ? sd->capprocs * 2 : 8;
			struct addrspace *v = realloc(sd->procs, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			sd->procs = v;
			sd->capprocs = cap;
		}
		p = &sd->procs[sd->nprocs++];
		memset(p, 0, sizeof(*p));
	}
	if (!p->as) {
		p->pid = pid;
		p->start_time = start_time;
		p->as = unwind_create_space();
		if (!p->as) {
			*p = sd->procs[--sd->nprocs];
			return -ENOMEM;
		}
	}
	*out = p;
	return 0;
}

/* The cached maps are trusted while the address space keeps its size
 * (vsize changes with every mmap, munmap and new thread stack) and every
 * frame's code is in them; /proc/PID/maps is 2,000 lines for a
 * 1,000-thread process. */
static bool maps_stale(const struct stackdump *sd, const struct addrspace *p, uint64_t vsize)
{
	return p->maps.n == 0 || p->vsize != vsize || p->mods_gen != sd->ms.gen;
}

static int refresh(struct stackdump *sd, struct addrspace *p, uint64_t vsize,
                   pid_t tid, struct stackdump_stack *out)
{
	char ebuf[64];
	int r = addrspace_refresh(&sd->ms, p, vsize);

	if (r == -ESRCH)
		set_error(out, "tid %d exited", (int)tid);
	else if (r < 0)
		set_error(out, "cannot read the memory map of pid %d: %s", (int)p->pid,
		          snapshot_strerror(-r, ebuf, sizeof(ebuf)));
	return r;
}

/* ---- after the stop ---- */

/* The address to look a frame up by: a caller's ip is a return address,
 * which may already be the next function (a call to a noreturn function
 * ends its caller); the instruction before it is the call. */
static uint64_t lookup_addr(const struct stackdump *sd, size_t i)
{
	uint64_t ip = sd->raw[i].ip;

	return i > 0 && !sd->raw[i - 1].signal && ip > 0 ? ip - 1 : ip;
}

static int resolve_frame(struct stackdump *sd, struct addrspace *p, size_t i,
                         uint64_t dump, struct stackdump_frame *f)
{
	const struct unwind_frame *raw = &sd->raw[i];
	uint64_t look = lookup_addr(sd, i), bias = 0;
	const char *module = "?", *build_id = "", *symbol = NULL;
	const struct procmaps_entry *e;
	const struct module *mod = addrspace_module(p, look, &e);

	/* Code a JIT compiled: named from the process's perf map. */
	if (!mod && sd->languages && perfmap_jit_mapping(e)) {
		int r = perfmap_name_frame(&p->jit, p->pid, dump, raw->ip, look, f);
		if (r != -ENOENT)
			return r;
	}

	if (e && e->path[0] != '\0') {
		module = e->path;
		if (mod) {
			module_bias(mod, e, look, &bias);
			build_id = mod == &sd->ms.vdso ? "" : mod->elf.build_id;
		} else if (e->path[0] == '/' || strcmp(e->path, "[vdso]") == 0) {
			bias = e->start - e->pgoff;
		}
	}
	f->ip = raw->ip;
	f->offset = raw->ip - bias;
	f->func_offset = raw->has_start ? raw->start - bias : f->offset;
	if (mod) {
		/* Only a symbol whose extent (st_size) holds the address: the
		 * nearest preceding one is often another function
		 * (start_thread showed as pthread_condattr_setpshared+0x515). */
		uint64_t start;
		symbol = elfinfo_symbol(&mod->elf, look - bias, &start);
		if (symbol)
			f->symbol_offset = f->offset - start;
	}
	f->module = strdup(module);
	f->build_id = strdup(build_id);
	f->symbol = symbol ? strdup(symbol) : NULL;
	if (!f->module || !f->build_id || (symbol && !f->symbol))
		return -ENOMEM;
	return 0;
}

/* Modules, offsets and names of the N frames in sd->raw. */
static int resolve(struct stackdump *sd, struct addrspace *p, size_t n,
                   struct stackdump_stack *out)
{
	out->frames = calloc(n, sizeof(*out->frames));
	if (!out->frames)
		goto nomem;
	out->nframes = n;
	for (size_t i = 0; i < n; i++)
		if (resolve_frame(sd, p, i, out->stop_start_ns, &out->frames[i]) < 0)
			goto nomem;
	out->hash = stackdump_hash(out->frames, out->nframes);
	return 0;
nomem:
	stackdump_stack_free(out);
	set_error(out, "out of memory");
	return -ENOMEM;
}

/* Unwinds the snapshot of TID into sd->raw: with the maps as they are, and
 * once more with fresh ones when they turned out stale (FRESH: they were
 * read for this dump).  Returns the number of
 * frames or -errno with OUT->error set. */
static int unwind(struct stackdump *sd, struct addrspace *p, uint64_t vsize, pid_t tid,
                  const struct snapshot *snap, size_t max, bool fresh,
                  struct stackdump_stack *out)
{
	struct unwind_result res;
	int r;

	unwind_snapshot(p, snap, max, sd->raw, &res);
	if (res.unknown_ip && !fresh) {
		if ((r = refresh(sd, p, vsize, tid, out)) < 0)
			return r;
		unwind_snapshot(p, snap, max, sd->raw, &res);
	}
	if (res.n == 0) {
		set_error(out, "cannot unwind tid %d: %s", (int)tid, unw_strerror(res.uerr));
		return -EIO;
	}
	out->truncated = res.truncated;
	out->stack_short = res.short_stack;
	out->stack_used = res.stack_used;
	if (res.short_stack)
		set_error(out, "unwind stopped after %zu frames: the stack is deeper than "
		          "the %zu bytes copied", res.n, snap->cap);
	else if (res.uerr < 0)
		set_error(out, "unwind stopped after %zu frames: %s", res.n,
		          unw_strerror(res.uerr));
	return (int)res.n;
}

/* ---- the API ---- */

struct stackdump *stackdump_new(void)
{
	struct stackdump *sd = calloc(1, sizeof(*sd));

	if (!sd)
		return NULL;
	modules_init(&sd->ms);
	sd->languages = true;
	if (pyframes_copy_init(&sd->py) < 0 ||
	    stackdump_set_stack_copy(sd, STACKDUMP_STACK_COPY_DEFAULT) < 0) {
		stackdump_free(sd);
		return NULL;
	}
	return sd;
}

int stackdump_set_stack_copy(struct stackdump *sd, size_t bytes)
{
	if (bytes < STACKDUMP_STACK_COPY_MIN || bytes > STACKDUMP_STACK_COPY_MAX)
		return -EINVAL;
	unsigned char *buf = malloc(bytes), *buf2 = malloc(bytes);
	if (!buf || !buf2) {
		free(buf);
		free(buf2);
		return -ENOMEM;
	}
	/* Touched now, so that the copy takes no page fault in the window.
	 * The second one is for handlers on an alternate signal stack only:
	 * left untouched, it costs no memory until one is dumped. */
	memset(buf, 0, bytes);
	free(sd->snap.stack);
	free(sd->snap.stack2);
	sd->snap.stack = buf;
	sd->snap.cap = bytes;
	sd->snap.stack2 = buf2;
	sd->snap.cap2 = bytes;
	return 0;
}

void stackdump_free(struct stackdump *sd)
{
	if (!sd)
		return;
	stackdump_poll(sd);
	for (size_t i = 0; i < sd->nprocs; i++)
		addrspace_clear(&sd->procs[i]);
	free(sd->procs);
	modules_free(&sd->ms);
	snapshot_pending_free(&sd->pending);
	free(sd->snap.stack);
	free(sd->snap.stack2);
	pyframes_copy_free(&sd->py);
	free(sd);
}

void stackdump_forget(struct stackdump *sd, pid_t pid)
{
	stackdump_poll(sd);
	for (size_t i = 0; i < sd->nprocs; i++) {
		if (sd->procs[i].pid == pid) {
			addrspace_clear(&sd->procs[i]);
			sd->procs[i] = sd->procs[--sd->nprocs];
			return;
		}
	}
}

/* What a dump knows about its thread before the copy. */
struct dump {
	pid_t pid, tid;
	struct procfs_stat sf;
	unsigned long long pstart;   /* the process's start time */
	struct addrspace *p;
	bool fresh;                  /* the maps were read for this dump */
};

/* Checks the arguments and the thread, and gets its process's cache and
 * maps ready, all while it runs.  STOPPING: the dump will stop the thread,
 * which a thread in D would not do. */
static int dump_begin(struct stackdump *sd, pid_t pid, pid_t tid, int max_frames, bool stopping,
                      struct dump *d, struct stackdump_stack *out)
{
	char ebuf[64];
	int r;

	memset(out, 0, sizeof(*out));
	*d = (struct dump){ .pid = pid, .tid = tid };
	if (pid <= 0 || tid <= 0) {
		set_error(out, "invalid pid %d or tid %d", (int)pid, (int)tid);
		return -EINVAL;
	}
	if (max_frames < 1 || max_frames > STACKDUMP_MAX_FRAMES) {
		set_error(out, "max_frames %d is out of range 1..%d", max_frames,
		          STACKDUMP_MAX_FRAMES);
		return -EINVAL;
	}
	stackdump_poll(sd);
	if (stopping && snapshot_pending_has(&sd->pending, tid)) {
		set_error(out, "tid %d has not stopped yet for an earlier dump", (int)tid);
		return -EAGAIN;
	}
	if (stopping && pid == getpid()) {
		set_error(out, "cannot attach to tid %d: it is a thread of this process", (int)tid);
		return -EPERM;
	}

	/* Step 1. */
	r = procfs_read_stat(pid, tid, &d->sf);
	if (r == -ESRCH || (r == 0 && stat_exiting(&d->sf))) {
		set_error(out, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	if (r < 0) {
		set_error(out, "cannot read /proc/%d/task/%d/stat: %s", (int)pid, (int)tid,
		          snapshot_strerror(-r, ebuf, sizeof(ebuf)));
		return r;
	}
	/* PTRACE_INTERRUPT does not stop a thread in D until it leaves D
	 * (seconds with a stuck FUSE server). */
	if (stopping && d->sf.state == 'D') {
		set_error(out, "tid %d is in uninterruptible sleep (D)", (int)tid);
		return -EAGAIN;
	}
	if (d->sf.flags & PROCFS_PF_KTHREAD) {
		set_error(out, "tid %d is a kernel thread: it has no user stack", (int)tid);
		return -EPERM;
	}
	/* The process's start time keys its caches (a thread's own start time,
	 * read above, differs from thread to thread), and tells whether the
	 * pid was taken by another process before the dump was over. */
	if (process_start(pid, &d->pstart) < 0) {
		set_error(out, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	r = proc_get(sd, pid, d->pstart, &d->p);
	if (r < 0) {
		set_error(out, "out of memory");
		return r;
	}

	/* Step 2.  The maps bound the copy to the stack's mapping (64 KiB of
	 * copy took 35 µs inside the stop, the 4.7 KiB of a thread stack 5 µs):
	 * when stale they are read now, while the thread runs. */
	d->fresh = maps_stale(sd, d->p, d->sf.vsize);
	if (d->fresh && (r = refresh(sd, d->p, d->sf.vsize, tid, out)) < 0)
		return r;
	return 0;
}

/* Step 3, once the copy SNAP is taken: unwinds, names the frames, and
 * merges the Python frames when PY. */
static int dump_finish(struct stackdump *sd, const struct dump *d, const struct snapshot *snap,
                       int max_frames, bool py, struct stackdump_stack *out)
{
	unsigned long long pstart_after;
	int r;

	if (process_start(d->pid, &pstart_after) < 0 || pstart_after != d->pstart) {
		/* The copy may have been another process's. */
		set_error(out, "tid %d exited", (int)d->tid);
		return -ESRCH;
	}
	out->process_start = d->pstart;
	r = unwind(sd, d->p, d->sf.vsize, d->tid, snap, (size_t)max_frames, d->fresh, out);
	if (r < 0)
		return r;
	r = resolve(sd, d->p, (size_t)r, out);
	if (r == 0 && py && (r = pyframes_merge_stack(d->p->py, d->p, &sd->py, (size_t)max_frames,
	                                              out)) < 0) {
		stackdump_stack_free(out);
		set_error(out, "out of memory");
	}
	return r;
}

int stackdump_thread(struct stackdump *sd, pid_t pid, pid_t tid, int max_frames,
                     struct stackdump_stack *out)
{
	struct dump d;
	int r = dump_begin(sd, pid, tid, max_frames, true, &d, out);

	if (r < 0)
		return r;
	sd->snap.sigreturn = d.p->sigreturn;
	/* A CPython thread: its thread state and data stack are copied in the
	 * stop too (pyframes.h). */
	char pywhy[200] = "";
	bool py = sd->languages &&
	          pyframes_prepare(&d.p->py, d.p, tid, &sd->py, pywhy, sizeof(pywhy)) == 0;
	if (pywhy[0] && sd->note)
		sd->note(pywhy, sd->note_arg);
	sd->snap.in_stop = py ? pyframes_in_stop : NULL;
	sd->snap.in_stop_arg = &sd->py;
	r = snapshot_take(&sd->pending, &sd->hints, pid, tid, d.sf.processor,
	                  d.p->maps.n ? &d.p->maps : NULL,
	                  &sd->snap, out->error, sizeof(out->error));
	out->stop_ns = sd->snap.stop_ns;
	out->stop_start_ns = sd->snap.stop_start_ns;
	if (r == -EPERM && thread_exiting(pid, tid)) {
		set_error(out, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	if (r < 0)
		return r;
	return dump_finish(sd, &d, &sd->snap, max_frames, py, out);
}

int stackdump_thread_copy(struct stackdump *sd, pid_t pid, pid_t tid,
                          const struct stackdump_copy *copy, int max_frames,
                          struct stackdump_stack *out)
{
	struct dump d;
	struct snapshot snap = {
		.regs = copy->regs, .stack_addr = copy->stack_addr, .stack_len = copy->stack_len,
		.stack_clipped = copy->stack_clipped,
		.stack = copy->stack, .cap = copy->stack_len,
		.stop_start_ns = copy->time_ns,
	};
	int r = dump_begin(sd, pid, tid, max_frames, false, &d, out);

	if (r < 0)
		return r;
	snap.sigreturn = d.p->sigreturn;
	/* The time names the perf map entries that were live (perfmap.h). */
	out->stop_start_ns = copy->time_ns;
	return dump_finish(sd, &d, &snap, max_frames, false, out);
}

void stackdump_set_language_frames(struct stackdump *sd, bool on)
{
	sd->languages = on;
}

void stackdump_set_note(struct stackdump *sd, void (*note)(const char *msg, void *arg),
                        void *arg)
{
	sd->note = note;
	sd->note_arg = arg;
}

uint64_t stackdump_language_stop_ns(const struct stackdump *sd)
{
	return sd->snap.in_stop ? sd->py.ns : 0;
}

void stackdump_stack_free(struct stackdump_stack *st)
{
	for (size_t i = 0; i < st->nframes; i++) {
		free(st->frames[i].module);
		free(st->frames[i].build_id);
		free(st->frames[i].symbol);
		free(st->frames[i].file);
	}
	free(st->frames);
	st->frames = NULL;
	st->nframes = 0;
	st->hash = 0;
}

int stackdump_frame_copy(struct stackdump_frame *dst, const struct stackdump_frame *src)
{
	*dst = *src;
	dst->module = src->module ? strdup(src->module) : NULL;
	dst->build_id = src->build_id ? strdup(src->build_id) : NULL;
	dst->symbol = src->symbol ? strdup(src->symbol) : NULL;
	dst->file = src->file ? strdup(src->file) : NULL;
	if ((src->module && !dst->module) || (src->build_id && !dst->build_id) ||
	    (src->symbol && !dst->symbol) || (src->file && !dst->file))
		return -ENOMEM;
	return 0;
}

/* ---- pure functions ---- */

/* FNV-1a, 64 bits. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t stackdump_hash(const struct stackdump_frame *frames, size_t nframes)
{
	uint64_t h = 0xcbf29ce484222325ull;

	if (nframes == 0)
		return 0;
	for (size_t i = 0; i < nframes; i++) {
		const struct stackdump_frame *f = &frames[i];
		const char *key = f->build_id && f->build_id[0] ? f->build_id
		                : f->module ? f->module : "";
		unsigned char le[8];

		h = fnv1a(h, key, strlen(key) + 1);   /* with its NUL as separator */
		if (strcmp(key, STACKDUMP_PYTHON) == 0) {
			const char *file = f->module ? f->module : "";
			const char *name = f->symbol ? f->symbol : "";
			h = fnv1a(h, file, strlen(file) + 1);
			h = fnv1a(h, name, strlen(name) + 1);
		} else if (strcmp(key, STACKDUMP_JIT) == 0) {
			char name[PERFMAP_NAME_MAX + 1];
			perfmap_identity(f->symbol ? f->symbol : "", name, sizeof(name));
			h = fnv1a(h, name, strlen(name) + 1);
		}
		for (int b = 0; b < 8; b++)
			le[b] = (unsigned char)(f->func_offset >> (8 * b));
		h = fnv1a(h, le, sizeof(le));
	}
	return h ? h : 1;
}

int stackdump_utf8_len(const char *text)
{
	const unsigned char *s = (const unsigned char *)text;
	unsigned char c = s[0];
	int n;
	unsigned char lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

void stackdump_put_escaped(const char *s, FILE *out)
{
	const unsigned char *p = (const unsigned char *)s;

	if (!s)
		return;
	while (*p) {
		int n = stackdump_utf8_len((const char *)p);

		/* C1 controls (U+0080..U+009F, "\xc2\x80".."\xc2\x9f") are valid
		 * UTF-8 but some terminals act on them (U+009B is CSI). */
		if (n == 1 && *p == '\\') {
			fputs("\\\\", out);
		} else if (n == 1 && (*p < 0x20 || *p == 0x7f)) {
			fprintf(out, "\\x%02x", *p);
		} else if (n == 0 || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
			fprintf(out, "\\x%02x", *p);
			n = 1;
		} else {
			fwrite(p, 1, (size_t)n, out);
		}
		p += n;
	}
}

const char *stackdump_module_file(const char *module)
{
	const char *slash;

	if (!module || !*module)
		return "?";
	slash = strrchr(module, '/');
	return slash && slash[1] ? slash + 1 : module;
}

void stackdump_put_frame(const struct stackdump_frame *f, FILE *out)
{
	const char *module = f->module && f->module[0] ? f->module : "?";

	if (f->build_id && strcmp(f->build_id, STACKDUMP_PYTHON) == 0) {
		/* A line, not an offset: the offset is the line. */
		stackdump_put_escaped(f->symbol ? f->symbol : "?", out);
		fputs(" (", out);
		stackdump_put_escaped(module, out);
		fprintf(out, ":%" PRIu64 ")", f->offset);
		return;
	}
	if (f->symbol && f->symbol[0]) {
		char *readable = demangle_name(f->symbol);

		stackdump_put_escaped(readable ? readable : f->symbol, out);
		free(readable);
		if (f->inlined)
			fputs(" [inlined] (", out);
		else
			fprintf(out, "+0x%" PRIx64 " (", f->symbol_offset);
		stackdump_put_escaped(module, out);
		fputc(')', out);
	} else {
		stackdump_put_escaped(module, out);
		fprintf(out, "+0x%" PRIx64, f->offset);
	}
	if (f->file && f->file[0] && f->line > 0) {
		fputs(" at ", out);
		stackdump_put_escaped(stackdump_module_file(f->file), out);
		fprintf(out, ":%u", f->line);
	}
}

size_t stackdump_function_name(const struct stackdump_frame *f, char *buf, size_t len)
{
	int n;

	if (f->symbol && f->symbol[0])
		return demangle_into(f->symbol, buf, len);
	else
		n = snprintf(buf, len, "%s@0x%" PRIx64, stackdump_module_file(f->module),
		             f->func_offset);
	return n > 0 ? (size_t)n : 0;
}

void stackdump_print(const struct stackdump_stack *st, const char *indent, FILE *out)
{
	size_t unwound = 0;   /* inlined calls are no frames of the unwind */

	if (!indent)
		indent = "";
	for (size_t i = 0; i < st->nframes; i++) {
		fprintf(out, "%s#%zu ", indent, i);
		stackdump_put_frame(&st->frames[i], out);
		fputc('\n', out);
		unwound += !st->frames[i].inlined;
	}
	if (st->truncated)
		fprintf(out, "%s  (truncated at %zu frames)\n", indent, unwound);
}

int stackdump_runtime(pid_t pid, struct stackdump_runtime *out)
{
	struct modules ms;
	struct addrspace as = { .pid = pid };
	struct procfs_stat st;
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = procfs_read_stat(pid, pid, &st)) < 0)
		return r;
	modules_init(&ms);
	as.as = unwind_create_space();
	r = as.as ? addrspace_refresh(&ms, &as, st.vsize) : -ENOMEM;
	if (r == 0)
		out->python = pyframes_describe(&as.py, &as, out->python_version,
		                                sizeof(out->python_version));
	addrspace_clear(&as);
	modules_free(&ms);
	if (r < 0)
		return r;
	if (out->python < 0 && out->python != -ENOTSUP)
		return out->python;
	out->perf_map = perfmap_probe(pid, out->perf_map_path, sizeof(out->perf_map_path),
	                              &out->perf_map_entries, out->perf_map_why,
	                              sizeof(out->perf_map_why));
	return 0;
}
