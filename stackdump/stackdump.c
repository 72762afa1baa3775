/* stackdump: stop one thread, unwind its user stack, let it go.
 *
 * One dump, in order:
 *   1. before the stop: read the thread's state (never interrupt a thread in
 *      D, see below), /proc/PID/maps and the ELF headers of every new
 *      executable module, so that nothing in the stopped window opens files;
 *   2. the stop: PTRACE_SEIZE the TID, PTRACE_INTERRUPT, wait for the stop
 *      with a deadline, unwind with libunwind-ptrace collecting only each
 *      frame's ip and FDE start, PTRACE_DETACH;
 *   3. after the stop: modules, build-ids, module offsets and symbol names.
 *
 * The unwinder is libunwind's ptrace accessors (_UPT_accessors) with three
 * of them replaced:
 *   - find_proc_info searches the module's .eh_frame_hdr table located by our
 *     own bounded ELF reader (elfinfo.c) in the maps read in step 1.
 *     libunwind's _UPT_find_proc_info rereads /proc/PID/maps inside the
 *     stopped window at every module switch, walks the mmapped ELF file
 *     without bounds checks and calls abort() on an unexpected .eh_frame_hdr
 *     encoding: one hostile binary would take the daemon down.  Ours also
 *     gives the vDSO its unwind table (libunwind finds no file for it and
 *     falls back to frame pointers, losing callers);
 *   - access_mem serves the unwind tables from copies read in step 1;
 *   - access_reg reads the registers once.
 * The stack itself is still read from the stopped thread, a word per
 * PTRACE_PEEKDATA.
 *
 * Threads that do not stop within the deadline stay traced with an interrupt
 * pending (the kernel offers no way to cancel it): they are kept on
 * sd->pending and detached by stackdump_poll() as soon as they stop.
 */
#include "stackdump/stackdump.h"

#include "stackdump/elfinfo.h"
#include "stackdump/procmaps.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <libunwind-ptrace.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exported by libunwind (the generic, remote-capable library) but declared
 * in no installed header; _UPT_find_proc_info uses it the same way. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
                                              unw_dyn_info_t *di, unw_proc_info_t *pi,
                                              int need_unwind_info, void *arg);

/* How long a dump waits for the thread to stop.  A running thread stops
 * within microseconds of the interrupt; one that is not scheduled for
 * 100 ms is left to stackdump_poll(). */
#define STOP_DEADLINE_NS (100 * 1000000ull)
/* Before that, spin on waitpid(WNOHANG) this long (see wait_stop). */
#define STOP_SPIN_NS     (30 * 1000ull)
/* The module cache is emptied when it holds this many modules. */
#define MAX_MODULES      1024

/* What we know about one ELF file, shared by every process mapping it. */
struct sd_module {
	char *path;                 /* as /proc/PID/maps prints it */
	unsigned dev_major, dev_minor;
	uint64_t inode;
	int err;                    /* 0 when elf was read */
	struct elfinfo elf;
};

/* Per watched process. */
struct sd_proc {
	pid_t pid;
	unsigned long long start_time;  /* /proc/PID/stat field 22: tells pid reuse */
	unw_addr_space_t as;            /* libunwind's caches for this process */
	struct procmaps maps;           /* as read before the last stop */
	struct sd_module **mods;        /* per maps entry: its module, or NULL */
	unsigned mods_gen;              /* sd->mods_gen when mods was built */
};

/* What is collected while the thread is stopped, per frame. */
struct sd_raw {
	uint64_t ip;
	uint64_t start;             /* FDE initial location */
	bool has_start;
	bool signal;                /* a signal trampoline: the next frame's ip is exact */
};

struct stackdump {
	unw_accessors_t acc;
	struct sd_proc *procs;
	size_t nprocs, capprocs;
	struct sd_module **mods;    /* the module cache */
	size_t nmods, capmods;
	unsigned mods_gen;          /* bumped when the cache is emptied */
	pid_t *pending;             /* interrupted, not stopped yet, not detached */
	size_t npending, cappending;
	struct sd_module vdso;      /* our own vDSO: the same image as every process's */
	uint64_t vdso_size;
	struct sd_raw raw[STACKDUMP_MAX_FRAMES];
};

/* The dump in progress, for the accessors below: libunwind hands them the
 * _UPT handle as argument, nothing of ours. */
struct unwind_ctx {
	struct sd_proc *proc;
	pid_t tid;
	/* The unwind data copy that served the last read, at its address in
	 * the target: [lo, hi) is data.  libunwind reads FDEs a byte at a
	 * time, about a thousand reads per unwind, mostly in one module. */
	uint64_t lo, hi;
	const unsigned char *data;
#if defined(__x86_64__)
	bool have_regs;
	struct user_regs_struct regs;
#endif
};
static __thread struct unwind_ctx *unwinding;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 2, 3)))
static void set_error(struct stackdump_stack *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out->error, sizeof(out->error), fmt, ap);
	va_end(ap);
}

/* strerror, lowercased, as messages are. */
static const char *errstr(int e, char *buf, size_t size)
{
	snprintf(buf, size, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

/* S escaped into BUF (for names put into messages). */
static const char *escaped(const char *s, char *buf, size_t size)
{
	FILE *f = fmemopen(buf, size - 1, "w");

	buf[0] = '\0';
	if (!f)
		return buf;
	stackdump_put_escaped(s, f);
	fclose(f);
	buf[size - 1] = '\0';
	return buf;
}

/* Reads a small /proc file into BUF, NUL-terminated.  Returns its length or
 * -errno (-ESRCH when it does not exist). */
static ssize_t read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n;
	do
		n = read(fd, buf, size - 1);
	while (n < 0 && errno == EINTR);
	int e = errno;
	close(fd);
	if (n < 0)
		return e == ESRCH ? -ESRCH : -e;
	buf[n] = '\0';
	return n;
}

/* Fields of a stat line such as
 * "4242 (hot-0) R 4240 4240 1020 34816 4240 4194368 ... 20 0 11 0 73245 ..."
 * (the comm may contain spaces and parentheses: parse after the last ')'). */
struct stat_fields {
	char state;                     /* field 3 */
	unsigned long flags;            /* field 9, PF_* */
	unsigned long long start_time;  /* field 22, clock ticks after boot */
};

#define PF_KTHREAD 0x00200000       /* include/linux/sched.h */

static int parse_stat(const char *line, struct stat_fields *sf)
{
	const char *p = strrchr(line, ')');

	if (!p || p[1] != ' ' || p[2] == '\0')
		return -EINVAL;
	sf->state = p[2];
	p += 3;
	for (int field = 4; field <= 22; field++) {
		char *end;

		while (*p == ' ')
			p++;
		errno = 0;
		if (field == 9)
			sf->flags = strtoul(p, &end, 10);
		else if (field == 22)
			sf->start_time = strtoull(p, &end, 10);
		else
			end = strchr(p, ' ');
		if (!end || end == p || errno)
			return -EINVAL;
		p = end;
	}
	return 0;
}

static int read_stat(const char *path, struct stat_fields *sf)
{
	char buf[1024];
	ssize_t n = read_file(path, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	return parse_stat(buf, sf);
}

/* The value of "Field:\t..." in a /proc status file, or -1. */
static long status_field(const char *path, const char *field)
{
	char buf[4096];
	size_t flen = strlen(field);

	if (read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	for (char *line = buf; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (strncmp(line, field, flen) == 0 && line[flen] == ':')
			return strtol(line + flen + 1, NULL, 10);
	}
	return -1;
}

/* ---- pending threads ---- */

/* The signal to hand back on detach: a signal-delivery-stop's signal, none
 * for PTRACE_EVENT_STOP (the interrupt itself, or a group-stop, which the
 * kernel reinstates by itself on detach). */
static int stop_signal(int status)
{
	return ((unsigned)status >> 16) == 0 ? WSTOPSIG(status) : 0;
}

/* Makes room for one more pending thread.  Called before a thread is
 * seized, so that pending_add cannot fail once it is. */
static int pending_reserve(struct stackdump *sd)
{
	if (sd->npending == sd->cappending) {
		size_t cap = sd->cappending ? sd->cappending * 2 : 8;
		pid_t *p = realloc(sd->pending, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		sd->pending = p;
		sd->cappending = cap;
	}
	return 0;
}

static void pending_add(struct stackdump *sd, pid_t tid)
{
	sd->pending[sd->npending++] = tid;
}

static bool pending_has(const struct stackdump *sd, pid_t tid)
{
	for (size_t i = 0; i < sd->npending; i++)
		if (sd->pending[i] == tid)
			return true;
	return false;
}

static void proc_clear(struct sd_proc *p);

/* Drops the caches of processes that exited, so that a daemon watching a
 * host where processes come and go does not grow. */
static void forget_exited(struct stackdump *sd)
{
	for (size_t i = 0; i < sd->nprocs;) {
		if (kill(sd->procs[i].pid, 0) < 0 && errno == ESRCH) {
			proc_clear(&sd->procs[i]);
			sd->procs[i] = sd->procs[--sd->nprocs];
		} else {
			i++;
		}
	}
}

int stackdump_poll(struct stackdump *sd)
{
	forget_exited(sd);
	for (size_t i = 0; i < sd->npending;) {
		pid_t tid = sd->pending[i];
		int st;
		bool done = false;
		pid_t r = waitpid(tid, &st, WNOHANG | __WALL);

		if (r == tid && WIFSTOPPED(st))
			done = ptrace(PTRACE_DETACH, tid, NULL,
			              (void *)(long)stop_signal(st)) == 0;
		else if (r == tid)
			done = true;           /* it exited: reaped */
		else if (r < 0 && errno == ECHILD)
			done = true;           /* no longer ours */
		if (done)
			sd->pending[i] = sd->pending[--sd->npending];
		else
			i++;
	}
	return (int)sd->npending;
}

/* ---- modules ---- */

/* The load bias of module MOD mapped by E, from the address ADDR in E:
 * ADDR's file offset, translated to an ELF virtual address through the
 * PT_LOAD that maps it, is ADDR - bias.  ET_EXEC gets 0. */
static bool module_bias(const struct sd_module *mod, const struct procmaps_entry *e,
                        uint64_t addr, uint64_t *bias)
{
	uint64_t va;

	if (mod && mod->err == 0 && elfinfo_vaddr(&mod->elf, addr - e->start + e->pgoff, &va)) {
		*bias = addr - va;
		return true;
	}
	*bias = mod && mod->err == 0 && mod->elf.type == ET_EXEC ? 0 : e->start - e->pgoff;
	return false;
}

static void module_free(struct sd_module *m)
{
	if (!m)
		return;
	free(m->path);
	elfinfo_free(&m->elf);
	free(m);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Reads the module mapped by E.  The file is opened through
 * /proc/PID/map_files, which still reaches it after it was replaced or
 * deleted on disk (root or CAP_CHECKPOINT_RESTORE only), else by its path
 * when that still names the mapped inode. */
static int module_read(pid_t pid, const struct procmaps_entry *e, struct elfinfo *elf)
{
	char path[96];
	int fd;

	memset(elf, 0, sizeof(*elf));
	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
	         (int)pid, e->start, e->end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		struct stat st;

		if (ends_with(e->path, " (deleted)"))
			return -ENOENT;
		fd = open(e->path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		/* The path now names another file: not the one mapped.  Only the
		 * inode is compared; overlayfs reports another device in stat. */
		if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != e->inode) {
			close(fd);
			return -ESTALE;
		}
	}
	int r = elfinfo_read_fd(fd, elf);
	close(fd);
	return r;
}

static void modules_clear(struct stackdump *sd)
{
	for (size_t i = 0; i < sd->nmods; i++)
		module_free(sd->mods[i]);
	sd->nmods = 0;
	sd->mods_gen++;
}

/* The cached module for E, read on first use; NULL only without memory. */
static struct sd_module *module_get(struct stackdump *sd, pid_t pid,
                                    const struct procmaps_entry *e)
{
	for (size_t i = 0; i < sd->nmods; i++) {
		struct sd_module *m = sd->mods[i];
		if (m->inode == e->inode && m->dev_major == e->dev_major &&
		    m->dev_minor == e->dev_minor && strcmp(m->path, e->path) == 0) {
			/* Out of memory or descriptors is worth another try. */
			if (m->err == -ENOMEM || m->err == -EMFILE || m->err == -ENFILE)
				m->err = module_read(pid, e, &m->elf);
			return m;
		}
	}
	if (sd->nmods == sd->capmods) {
		size_t cap = sd->capmods ? sd->capmods * 2 : 32;
		struct sd_module **v = realloc(sd->mods, cap * sizeof(*v));
		if (!v)
			return NULL;
		sd->mods = v;
		sd->capmods = cap;
	}
	struct sd_module *m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(e->path))) {
		free(m);
		return NULL;
	}
	m->dev_major = e->dev_major;
	m->dev_minor = e->dev_minor;
	m->inode = e->inode;
	m->err = module_read(pid, e, &m->elf);
	sd->mods[sd->nmods++] = m;
	return m;
}

/* Our own vDSO image: the kernel maps the same one into every process, so
 * its unwind table and symbols serve the target's [vdso] (the sizes are
 * compared before use). */
static void vdso_init(struct stackdump *sd)
{
	struct procmaps self;
	unsigned long base = getauxval(AT_SYSINFO_EHDR);

	sd->vdso.err = -ENOENT;
	if (!base || procmaps_read(getpid(), &self) < 0)
		return;
	const struct procmaps_entry *e = procmaps_find(&self, base);
	if (e && strcmp(e->path, "[vdso]") == 0 && e->start == base) {
		sd->vdso_size = e->end - e->start;
		sd->vdso.err = elfinfo_read_mem((const void *)base, sd->vdso_size, &sd->vdso.elf);
	}
	procmaps_free(&self);
}

/* ---- processes ---- */

static void proc_clear(struct sd_proc *p)
{
	if (p->as)
		unw_destroy_addr_space(p->as);
	procmaps_free(&p->maps);
	free(p->mods);
	memset(p, 0, sizeof(*p));
}

/* The cached state of process PID, new or reset when the pid was reused. */
static int proc_get(struct stackdump *sd, pid_t pid, struct sd_proc **out)
{
	char path[64];
	struct stat_fields sf;
	struct sd_proc *p = NULL;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int r = read_stat(path, &sf);
	if (r < 0)
		return r;
	unsigned long long start_time = sf.start_time;
	for (size_t i = 0; i < sd->nprocs; i++)
		if (sd->procs[i].pid == pid)
			p = &sd->procs[i];
	if (p && p->start_time != start_time)
		proc_clear(p);
	if (!p) {
		if (sd->nprocs == sd->capprocs) {
			size_t cap = sd->capprocs ? sd->capprocs * 2 : 8;
			struct sd_proc *v = realloc(sd->procs, cap * sizeof(*v));
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
		p->as = unw_create_addr_space(&sd->acc, 0);
		if (!p->as) {
			*p = sd->procs[--sd->nprocs];
			return -ENOMEM;
		}
		unw_set_caching_policy(p->as, UNW_CACHE_GLOBAL);
	}
	*out = p;
	return 0;
}

static bool same_mapping(const struct procmaps_entry *a, const struct procmaps_entry *b)
{
	return a->start == b->start && a->end == b->end && a->pgoff == b->pgoff &&
	       a->inode == b->inode && strcmp(a->perms, b->perms) == 0 &&
	       strcmp(a->path, b->path) == 0;
}

static bool same_file(const struct procmaps_entry *a, const struct procmaps_entry *b)
{
	return a->inode == b->inode && a->dev_major == b->dev_major &&
	       a->dev_minor == b->dev_minor && strcmp(a->path, b->path) == 0;
}

static bool is_code(const struct procmaps_entry *e)
{
	return e->perms[2] == 'x' && (e->path[0] == '/' || strcmp(e->path, "[vdso]") == 0);
}

/* Rereads the maps of P and finds the module of every executable mapping,
 * reading the ELF files not seen yet.  libunwind's cached unwind rules are
 * keyed by address: they are flushed when the code mappings changed. */
static int proc_refresh(struct stackdump *sd, struct sd_proc *p)
{
	struct procmaps m;
	int r = procmaps_read(p->pid, &m);

	if (r < 0)
		return r;
	if (sd->nmods >= MAX_MODULES)
		modules_clear(sd);
	struct sd_module **mods = calloc(m.n ? m.n : 1, sizeof(*mods));
	if (!mods) {
		procmaps_free(&m);
		return -ENOMEM;
	}
	bool changed = false, reuse = p->mods && p->mods_gen == sd->mods_gen;
	size_t j = 0, ncode_old = 0, ncode_new = 0;
	for (size_t i = 0; i < p->maps.n; i++)
		ncode_old += is_code(&p->maps.v[i]);
	for (size_t i = 0; i < m.n; i++) {
		const struct procmaps_entry *e = &m.v[i];
		if (!is_code(e))
			continue;
		ncode_new++;
		/* Both lists are sorted by address: walk the old one along. */
		while (j < p->maps.n && p->maps.v[j].start < e->start)
			j++;
		bool same = j < p->maps.n && same_mapping(&p->maps.v[j], e);
		changed |= !same;
		if (same && reuse)
			mods[i] = p->mods[j];
		else if (strcmp(e->path, "[vdso]") == 0)
			mods[i] = sd->vdso.err == 0 && e->end - e->start == sd->vdso_size ? &sd->vdso : NULL;
		else
			mods[i] = module_get(sd, p->pid, e);
	}
	if (changed || ncode_old != ncode_new)
		unw_flush_cache(p->as, 0, 0);
	/* The other mappings of the same files (the read-only segment holding
	 * .eh_frame, data): same module.  A file's mappings are adjacent. */
	for (size_t i = 0; i < m.n; i++) {
		const struct procmaps_entry *e = &m.v[i];
		if (mods[i] || e->path[0] != '/')
			continue;
		for (size_t k = i; k > 0 && same_file(&m.v[k - 1], e) && !mods[i]; k--)
			mods[i] = mods[k - 1];
		for (size_t k = i + 1; k < m.n && same_file(&m.v[k], e) && !mods[i]; k++)
			mods[i] = mods[k];
	}
	procmaps_free(&p->maps);
	free(p->mods);
	p->maps = m;
	p->mods = mods;
	p->mods_gen = sd->mods_gen;
	return 0;
}

/* ---- unwinding ---- */

/* libunwind's find_proc_info: the FDE covering IP, from the binary-search
 * table of its module's .eh_frame_hdr.  No file is opened here: the module
 * was read before the thread was stopped. */
static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                          int need_unwind_info, void *arg)
{
	struct sd_proc *p = unwinding ? unwinding->proc : NULL;
	uint64_t bias;

	if (!p)
		return -UNW_ENOINFO;
	const struct procmaps_entry *e = procmaps_find(&p->maps, ip);
	if (!e)
		return -UNW_ENOINFO;
	const struct sd_module *mod = p->mods[e - p->maps.v];
	if (!mod || mod->err || !mod->elf.has_eh_table || !module_bias(mod, e, ip, &bias))
		return -UNW_ENOINFO;

	unw_dyn_info_t di;
	memset(&di, 0, sizeof(di));
	di.start_ip = bias + mod->elf.vaddr_lo;
	di.end_ip = bias + mod->elf.vaddr_hi;
	di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	/* Table entries are two 32-bit offsets relative to .eh_frame_hdr. */
	di.u.rti.segbase = bias + mod->elf.eh_hdr_vaddr;
	di.u.rti.table_data = bias + mod->elf.eh_table_vaddr;
	di.u.rti.table_len = mod->elf.eh_fde_count * 8 / sizeof(unw_word_t);
	return UNW_OBJ(dwarf_search_unwind_table)(as, ip, &di, pi, need_unwind_info, arg);
}

/* libunwind's access_mem: a word of the stopped thread's memory.  Words of a
 * module's unwind tables come from the copy read before the stop; reading
 * them with PTRACE_PEEKDATA, one syscall per word, kept a 6-frame unwind
 * stopped for 5 ms (about 1,000 calls). */
static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val,
                      int write, void *arg)
{
	struct unwind_ctx *c = unwinding;

	if (c && !write) {
		if (addr >= c->lo && c->hi - c->lo >= 8 && addr - c->lo <= c->hi - c->lo - 8) {
			memcpy(val, c->data + (addr - c->lo), sizeof(*val));
			return 0;
		}
		const struct procmaps *m = &c->proc->maps;
		const struct procmaps_entry *e = procmaps_find(m, addr);
		const struct sd_module *mod = e ? c->proc->mods[e - m->v] : NULL;
		uint64_t bias, word;

		if (mod && mod->err == 0 && mod->elf.eh_data &&
		    module_bias(mod, e, addr, &bias) &&
		    elfinfo_eh_word(&mod->elf, addr - bias, &word)) {
			c->lo = bias + mod->elf.eh_data_vaddr;
			c->hi = c->lo + mod->elf.eh_data_size;
			c->data = mod->elf.eh_data;
			*val = word;
			return 0;
		}
	}
	return _UPT_access_mem(as, addr, val, write, arg);
}

/* libunwind's access_reg: _UPT_access_reg makes one PTRACE_GETREGSET per
 * register read; one PTRACE_GETREGS per dump is enough. */
static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val,
                      int write, void *arg)
{
#if defined(__x86_64__)
	static const size_t offsets[UNW_X86_64_RIP + 1] = {
		[UNW_X86_64_RAX] = offsetof(struct user_regs_struct, rax),
		[UNW_X86_64_RDX] = offsetof(struct user_regs_struct, rdx),
		[UNW_X86_64_RCX] = offsetof(struct user_regs_struct, rcx),
		[UNW_X86_64_RBX] = offsetof(struct user_regs_struct, rbx),
		[UNW_X86_64_RSI] = offsetof(struct user_regs_struct, rsi),
		[UNW_X86_64_RDI] = offsetof(struct user_regs_struct, rdi),
		[UNW_X86_64_RBP] = offsetof(struct user_regs_struct, rbp),
		[UNW_X86_64_RSP] = offsetof(struct user_regs_struct, rsp),
		[UNW_X86_64_R8] = offsetof(struct user_regs_struct, r8),
		[UNW_X86_64_R9] = offsetof(struct user_regs_struct, r9),
		[UNW_X86_64_R10] = offsetof(struct user_regs_struct, r10),
		[UNW_X86_64_R11] = offsetof(struct user_regs_struct, r11),
		[UNW_X86_64_R12] = offsetof(struct user_regs_struct, r12),
		[UNW_X86_64_R13] = offsetof(struct user_regs_struct, r13),
		[UNW_X86_64_R14] = offsetof(struct user_regs_struct, r14),
		[UNW_X86_64_R15] = offsetof(struct user_regs_struct, r15),
		[UNW_X86_64_RIP] = offsetof(struct user_regs_struct, rip),
	};
	struct unwind_ctx *c = unwinding;

	if (c && !write && reg >= 0 && reg <= UNW_X86_64_RIP) {
		if (!c->have_regs) {
			if (ptrace(PTRACE_GETREGS, c->tid, NULL, &c->regs) < 0)
				return -UNW_EBADREG;
			c->have_regs = true;
		}
		memcpy(val, (const char *)&c->regs + offsets[reg], sizeof(*val));
		return 0;
	}
#endif
	return _UPT_access_reg(as, reg, val, write, arg);
}

/* Unwinds the stopped thread: only ips and FDE starts, nothing resolved.
 * Returns the number of frames; *UERR is the libunwind error that ended the
 * unwind early, 0 when it reached the outermost frame or MAX frames. */
static size_t unwind(struct stackdump *sd, struct sd_proc *p, pid_t tid, void *upt,
                     size_t max, bool *truncated, int *uerr)
{
	struct unwind_ctx ctx = { .proc = p, .tid = tid };
	unw_cursor_t c;
	size_t n = 0;

	*truncated = false;
	*uerr = 0;
	unwinding = &ctx;
	int r = unw_init_remote(&c, p->as, upt);
	if (r < 0) {
		*uerr = r;
		unwinding = NULL;
		return 0;
	}
	for (;;) {
		unw_word_t ip;
		unw_proc_info_t pi;
		struct sd_raw *f = &sd->raw[n];

		r = unw_get_reg(&c, UNW_REG_IP, &ip);
		if (r < 0) {
			*uerr = r;
			break;
		}
		f->ip = ip;
		f->has_start = unw_get_proc_info(&c, &pi) == 0 && pi.start_ip != 0 &&
		               pi.start_ip <= ip;
		f->start = f->has_start ? pi.start_ip : ip;
		f->signal = false;
		n++;
		r = unw_step(&c);
		if (r <= 0) {
			*uerr = r;
			break;
		}
		if (n == max) {
			*truncated = true;
			break;
		}
	}
	unwinding = NULL;
	return n;
}

/* Once the thread is stopped, the calling thread runs at SCHED_FIFO 1 until
 * it is detached, when it may (CAP_SYS_NICE, or RLIMIT_RTPRIO >= 1).  On a
 * busy 2-core machine the thread woken by PTRACE_DETACH, or any other,
 * preempted the tracer inside the window: ~2 ms stops (up to a tick)
 * instead of ~60 µs.  Not while waiting for the stop: a SCHED_FIFO waiter
 * starves a target that shares its CPU (140-330 µs waits measured). */
struct rt_save {
	bool changed;
	int policy;
	struct sched_param param;
};

static void rt_enter(struct rt_save *s)
{
	struct sched_param fifo = { .sched_priority = 1 };
	int policy = sched_getscheduler(0);

	s->changed = false;
	if (policy < 0 || (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO ||
	    (policy & ~SCHED_RESET_ON_FORK) == SCHED_RR || sched_getparam(0, &s->param) < 0)
		return;
	if (sched_setscheduler(0, SCHED_FIFO, &fifo) == 0) {
		s->changed = true;
		s->policy = policy;
	}
}

static void rt_leave(const struct rt_save *s)
{
	if (s->changed)
		sched_setscheduler(0, s->policy, &s->param);
}

enum wait_result { WAIT_STOPPED, WAIT_EXITED, WAIT_TIMEOUT };

/* Waits until the interrupted TID stops, it exits or the deadline passes,
 * never blocking in waitpid (a thread in D would hold us forever).
 *
 * A target running on another CPU stops 10-25 µs after the interrupt: spin
 * that long.  A target that shares our CPU only stops once we leave it, and
 * sched_yield() does not always give way to a CPU hog (it may not be
 * eligible to run yet): then sleep, in short naps so that its stop is seen
 * soon.  The timer slack (50 µs by default) would stretch every nap; it is
 * lowered for the wait.  Exponential naps after 2 ms bound the wake-ups. */
static enum wait_result wait_stop(pid_t tid, uint64_t t0, int *sig)
{
	struct timespec nap = { 0, 10000 };
	int slack = -1;
	enum wait_result res;

	for (;;) {
		int st;
		pid_t r = waitpid(tid, &st, WNOHANG | __WALL);

		if (r == tid && WIFSTOPPED(st)) {
			*sig = stop_signal(st);
			res = WAIT_STOPPED;
			break;
		}
		if (r == tid || (r < 0 && errno != EINTR)) {
			res = WAIT_EXITED;     /* or ECHILD: not our tracee any more */
			break;
		}
		uint64_t waited = now_ns() - t0;
		if (waited >= STOP_DEADLINE_NS) {
			res = WAIT_TIMEOUT;
			break;
		}
		if (waited < STOP_SPIN_NS) {
			sched_yield();
		} else {
			if (slack < 0) {
				slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
				if (slack > 1000)
					prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
			}
			nanosleep(&nap, NULL);
			if (waited > 2000000 && nap.tv_nsec < 1000000)
				nap.tv_nsec *= 2;
		}
	}
	if (slack > 1000)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	return res;
}

static int attach_error(struct stackdump_stack *out, pid_t pid, pid_t tid, int e)
{
	char path[64], comm[64], name[80], ebuf[64];

	if (e == ESRCH) {
		set_error(out, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	if (e != EPERM) {
		set_error(out, "cannot attach to tid %d: %s", (int)tid, errstr(e, ebuf, sizeof(ebuf)));
		return -e;
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	long tracer = status_field(path, "TracerPid");
	if (tracer > 0) {
		snprintf(path, sizeof(path), "/proc/%ld/comm", tracer);
		if (read_file(path, comm, sizeof(comm)) < 0)
			strcpy(comm, "?");
		comm[strcspn(comm, "\n")] = '\0';
		set_error(out, "cannot attach to tid %d: operation not permitted (TracerPid %ld: %s)",
		          (int)tid, tracer, escaped(comm, name, sizeof(name)));
	} else {
		set_error(out, "cannot attach to tid %d: operation not permitted "
		          "(kernel.yama.ptrace_scope or missing CAP_SYS_PTRACE)", (int)tid);
	}
	return -EPERM;
}

/* Step 2: seize, interrupt, wait, unwind into sd->raw, detach.  Returns the
 * number of frames or -errno with OUT->error set. */
static int stop_and_unwind(struct stackdump *sd, struct sd_proc *p, pid_t tid,
                           size_t max, struct stackdump_stack *out)
{
	char ebuf[64];
	int sig = 0, uerr;
	bool truncated;

	void *upt = _UPT_create(tid);
	if (!upt || pending_reserve(sd) < 0) {
		if (upt)
			_UPT_destroy(upt);
		set_error(out, "out of memory");
		return -ENOMEM;
	}
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
		int e = errno;
		_UPT_destroy(upt);
		return attach_error(out, p->pid, tid, e);
	}

	/* From here on every path detaches, or leaves TID on sd->pending for
	 * stackdump_poll() to detach or reap. */
	struct rt_save rt;
	uint64_t t0 = now_ns();
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0) {
		int e = errno;
		_UPT_destroy(upt);
		pending_add(sd, tid);  /* exiting: its exit is reported to us */
		if (e == ESRCH) {
			set_error(out, "tid %d exited during the dump", (int)tid);
			return -ESRCH;
		}
		set_error(out, "cannot interrupt tid %d: %s", (int)tid, errstr(e, ebuf, sizeof(ebuf)));
		return -e;
	}
	enum wait_result w = wait_stop(tid, t0, &sig);
	if (w == WAIT_EXITED) {
		_UPT_destroy(upt);     /* and waitpid reaped it */
		set_error(out, "tid %d exited during the dump", (int)tid);
		return -ESRCH;
	}
	if (w == WAIT_TIMEOUT) {
		/* PTRACE_DETACH fails until the thread stops, and trying it
		 * races with a signal-delivery-stop whose signal it would drop:
		 * stackdump_poll() detaches it once waitpid reports the stop. */
		_UPT_destroy(upt);
		pending_add(sd, tid);
		set_error(out, "tid %d did not stop within %llu ms; it will be released "
		          "when it stops", (int)tid, STOP_DEADLINE_NS / 1000000);
		return -ETIMEDOUT;
	}

	rt_enter(&rt);
	size_t n = unwind(sd, p, tid, upt, max, &truncated, &uerr);

	int d = ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig);
	int derr = errno;
	out->stop_ns = now_ns() - t0;
	rt_leave(&rt);
	_UPT_destroy(upt);

	if (d < 0) {
		/* Killed while stopped (SIGKILL ends a ptrace-stop): its exit is
		 * reported to us and must be reaped. */
		pending_add(sd, tid);
		if (derr == ESRCH) {
			set_error(out, "tid %d exited during the dump", (int)tid);
			return -ESRCH;
		}
		set_error(out, "cannot detach from tid %d: %s", (int)tid, errstr(derr, ebuf, sizeof(ebuf)));
		return -derr;
	}
	if (n == 0) {
		set_error(out, "cannot unwind tid %d: %s", (int)tid, unw_strerror(uerr));
		return -EIO;
	}
	out->truncated = truncated;
	if (uerr < 0)
		set_error(out, "unwind stopped after %zu frames: %s", n, unw_strerror(uerr));
	return (int)n;
}

/* ---- after the stop ---- */

/* Marks the frames that are the kernel's signal return trampoline
 * (x86-64: "mov $0xf,%rax; syscall", glibc's __restore_rt), whose next
 * frame's ip is the interrupted instruction, not a return address.  One
 * process_vm_readv after the thread runs again; unreadable code counts as
 * no trampoline. */
static void mark_signal_frames(struct stackdump *sd, pid_t pid, size_t n)
{
#if defined(__x86_64__)
	static const unsigned char sigreturn[9] = { 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05 };
	unsigned char (*code)[sizeof(sigreturn)];
	struct iovec *local, *remote;

	if (n < 2)
		return;
	n--;   /* the outermost frame's answer is never used */
	if (n > 1024)
		n = 1024;   /* IOV_MAX */
	code = calloc(n, sizeof(*code));
	local = calloc(n, sizeof(*local));
	remote = calloc(n, sizeof(*remote));
	if (code && local && remote) {
		for (size_t i = 0; i < n; i++) {
			local[i].iov_base = code[i];
			local[i].iov_len = sizeof(sigreturn);
			remote[i].iov_base = (void *)(uintptr_t)sd->raw[i].ip;
			remote[i].iov_len = sizeof(sigreturn);
		}
		ssize_t got = process_vm_readv(pid, local, n, remote, n, 0);
		for (size_t i = 0; got > 0 && i < n && (size_t)got >= (i + 1) * sizeof(sigreturn); i++)
			sd->raw[i].signal = memcmp(code[i], sigreturn, sizeof(sigreturn)) == 0;
	}
	free(code);
	free(local);
	free(remote);
#else
	(void)sd;
	(void)pid;
	(void)n;
#endif
}

/* The address to look a frame up by: a caller's ip is a return address,
 * which may already be the next function (a call to a noreturn function
 * ends its caller); the instruction before it is the call. */
static uint64_t lookup_addr(const struct stackdump *sd, size_t i)
{
	uint64_t ip = sd->raw[i].ip;

	return i > 0 && !sd->raw[i - 1].signal && ip > 0 ? ip - 1 : ip;
}

static int resolve_frame(struct stackdump *sd, struct sd_proc *p, size_t i,
                         struct stackdump_frame *f)
{
	const struct sd_raw *raw = &sd->raw[i];
	uint64_t look = lookup_addr(sd, i), bias = 0;
	const char *module = "?", *build_id = "", *symbol = NULL;
	const struct procmaps_entry *e = procmaps_find(&p->maps, look);
	const struct sd_module *mod = NULL;

	if (e && e->path[0] != '\0') {
		module = e->path;
		mod = p->mods[e - p->maps.v];
		if (mod && mod->err == 0) {
			module_bias(mod, e, look, &bias);
			build_id = mod == &sd->vdso ? "" : mod->elf.build_id;
		} else if (e->path[0] == '/' || strcmp(e->path, "[vdso]") == 0) {
			bias = e->start - e->pgoff;
		}
	}
	f->ip = raw->ip;
	f->offset = raw->ip - bias;
	f->func_offset = raw->has_start ? raw->start - bias : f->offset;
	if (mod && mod->err == 0) {
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

/* Step 3: modules, offsets and names of the N frames in sd->raw. */
static int resolve(struct stackdump *sd, struct sd_proc *p, size_t n,
                   struct stackdump_stack *out)
{
	mark_signal_frames(sd, p->pid, n);

	/* A library mapped after the maps were read: read them again once. */
	for (size_t i = 0; i < n; i++) {
		if (!procmaps_find(&p->maps, lookup_addr(sd, i))) {
			proc_refresh(sd, p);
			break;
		}
	}
	out->frames = calloc(n, sizeof(*out->frames));
	if (!out->frames)
		goto nomem;
	out->nframes = n;
	for (size_t i = 0; i < n; i++)
		if (resolve_frame(sd, p, i, &out->frames[i]) < 0)
			goto nomem;
	out->hash = stackdump_hash(out->frames, out->nframes);
	return 0;
nomem:
	stackdump_stack_free(out);
	set_error(out, "out of memory");
	return -ENOMEM;
}

/* ---- the API ---- */

struct stackdump *stackdump_new(void)
{
	struct stackdump *sd = calloc(1, sizeof(*sd));

	if (!sd)
		return NULL;
	sd->acc = _UPT_accessors;
	sd->acc.find_proc_info = find_proc_info;
	sd->acc.access_mem = access_mem;
	sd->acc.access_reg = access_reg;
	vdso_init(sd);
	return sd;
}

void stackdump_free(struct stackdump *sd)
{
	if (!sd)
		return;
	stackdump_poll(sd);
	for (size_t i = 0; i < sd->nprocs; i++)
		proc_clear(&sd->procs[i]);
	free(sd->procs);
	modules_clear(sd);
	free(sd->mods);
	free(sd->pending);
	elfinfo_free(&sd->vdso.elf);
	free(sd);
}

void stackdump_forget(struct stackdump *sd, pid_t pid)
{
	stackdump_poll(sd);
	for (size_t i = 0; i < sd->nprocs; i++) {
		if (sd->procs[i].pid == pid) {
			proc_clear(&sd->procs[i]);
			sd->procs[i] = sd->procs[--sd->nprocs];
			return;
		}
	}
}

int stackdump_thread(struct stackdump *sd, pid_t pid, pid_t tid, int max_frames,
                     struct stackdump_stack *out)
{
	char path[64], ebuf[64];
	struct stat_fields sf;
	struct sd_proc *p;

	memset(out, 0, sizeof(*out));
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
	if (pending_has(sd, tid)) {
		set_error(out, "tid %d has not stopped yet for an earlier dump", (int)tid);
		return -EAGAIN;
	}
	if (pid == getpid()) {
		set_error(out, "cannot attach to tid %d: it is a thread of this process", (int)tid);
		return -EPERM;
	}

	/* Step 1. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	int r = read_stat(path, &sf);
	if (r == -ESRCH || (r == 0 && (sf.state == 'Z' || sf.state == 'X'))) {
		set_error(out, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	if (r < 0) {
		set_error(out, "cannot read %s: %s", path, errstr(-r, ebuf, sizeof(ebuf)));
		return r;
	}
	/* PTRACE_INTERRUPT does not stop a thread in D until it leaves D
	 * (seconds with a stuck FUSE server). */
	if (sf.state == 'D') {
		set_error(out, "tid %d is in uninterruptible sleep (D)", (int)tid);
		return -EAGAIN;
	}
	if (sf.flags & PF_KTHREAD) {
		set_error(out, "tid %d is a kernel thread: it has no user stack", (int)tid);
		return -EPERM;
	}
	r = proc_get(sd, pid, &p);
	if (r == 0)
		r = proc_refresh(sd, p);
	if (r == -ESRCH) {
		set_error(out, "tid %d exited", (int)tid);
		return r;
	}
	/* The maps are readable by whoever may attach: explain as for attach. */
	if (r == -EACCES || r == -EPERM)
		return attach_error(out, pid, tid, EPERM);
	if (r < 0) {
		set_error(out, "cannot read the memory map of pid %d: %s", (int)pid,
		          errstr(-r, ebuf, sizeof(ebuf)));
		return r;
	}

	/* Step 2. */
	r = stop_and_unwind(sd, p, tid, (size_t)max_frames, out);
	if (r < 0)
		return r;

	/* Step 3. */
	return resolve(sd, p, (size_t)r, out);
}

void stackdump_stack_free(struct stackdump_stack *st)
{
	for (size_t i = 0; i < st->nframes; i++) {
		free(st->frames[i].module);
		free(st->frames[i].build_id);
		free(st->frames[i].symbol);
	}
	free(st->frames);
	st->frames = NULL;
	st->nframes = 0;
	st->hash = 0;
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

void stackdump_print(const struct stackdump_stack *st, const char *indent, FILE *out)
{
	if (!indent)
		indent = "";
	for (size_t i = 0; i < st->nframes; i++) {
		const struct stackdump_frame *f = &st->frames[i];

		fprintf(out, "%s#%zu ", indent, i);
		if (f->symbol) {
			stackdump_put_escaped(f->symbol, out);
			fprintf(out, "+0x%" PRIx64 " (", f->symbol_offset);
			stackdump_put_escaped(f->module ? f->module : "?", out);
			fputs(")\n", out);
		} else {
			stackdump_put_escaped(f->module ? f->module : "?", out);
			fprintf(out, "+0x%" PRIx64 "\n", f->offset);
		}
	}
	if (st->truncated)
		fprintf(out, "%s  (truncated at %zu frames)\n", indent, st->nframes);
}
