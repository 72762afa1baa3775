/* modules: per-process maps and the cache of mapped ELF files.  See
 * modules.h. */
#include "stackdump/modules.h"

#include "stackdump/stackdump.h"
#include "stackdump/perfmap.h"
#include "stackdump/pyframes.h"
#include "stackdump/targetfs.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* The module cache is emptied when it holds this many modules. */
#define MAX_MODULES 1024

bool module_bias(const struct module *mod, const struct procmaps_entry *e,
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

static void module_free(struct module *m)
{
	if (m->borrowed_syms) {
		m->elf.syms = NULL;
		m->elf.strtab = NULL;
	}
	free(m->path);
	elfinfo_free(&m->elf);
	free(m);
}

/* Reads the module mapped by E in process PID, whose memory holds build-id
 * MEM_ID ("" when unknown): from the file as PID sees it (targetfs.h),
 * refused with -ESTALE when it is not provably the mapped one. */
static int module_read(pid_t pid, const struct procmaps_entry *e, const char *mem_id,
                       struct elfinfo *elf)
{
	bool exact;
	int fd = targetfs_open_mapped(pid, e, &exact);

	memset(elf, 0, sizeof(*elf));
	if (fd < 0)
		return fd;
	int r = elfinfo_read_fd(fd, elf);
	close(fd);
	if (r == 0 && (r = targetfs_verdict(exact, elf->build_id, mem_id)) < 0)
		elfinfo_free(elf);
	return r;
}

static void modules_clear(struct modules *ms)
{
	/* Borrowers first: they point into their lenders' tables. */
	for (size_t i = 0; i < ms->n; i++) {
		if (ms->v[i]->borrowed_syms) {
			module_free(ms->v[i]);
			ms->v[i] = NULL;
		}
	}
	for (size_t i = 0; i < ms->n; i++)
		if (ms->v[i])
			module_free(ms->v[i]);
	ms->n = 0;
	ms->gen++;
}

/* Takes the symbols of the debug file FD (closed) into ELF when it has
 * ELF's build-id; true when it did. */
static bool take_debug_symbols(int fd, struct elfinfo *elf)
{
	struct elfinfo dbg;
	bool took = false;

	if (fd < 0)
		return false;
	int r = elfinfo_read_symbols_fd(fd, &dbg);
	close(fd);
	if (r == 0 && dbg.nsyms && strcmp(dbg.build_id, elf->build_id) == 0) {
		free(elf->syms);
		free(elf->strtab);
		elf->syms = dbg.syms;
		elf->nsyms = dbg.nsyms;
		elf->strtab = dbg.strtab;
		elf->strtab_size = dbg.strtab_size;
		elf->symsrc = "debug file";
		dbg.syms = NULL;
		dbg.strtab = NULL;
		took = true;
	}
	if (r == 0)
		elfinfo_free(&dbg);
	return took;
}

/* The debug file of ELF, a module of process PID without .symtab, by its
 * build-id below DEBUG_DIR (NULL: STACKDUMP_DEBUG_DIR): in PID's root first
 * (a container installs its own -dbgsym packages), then in ours.  Either
 * is taken only with the module's build-id, so the host's serves a
 * container's library only when it is the same build.  The path taken
 * goes to TAKEN (SIZE bytes; may be NULL), "" when none was, with *OURS. */
static void debug_file_symbols(pid_t pid, const char *debug_dir, struct elfinfo *elf,
                               char *taken, size_t size, bool *ours)
{
	char path[PATH_MAX];
	bool in_root;

	if (taken)
		taken[0] = '\0';
	if (strcmp(elf->symsrc ? elf->symsrc : "", ".symtab") == 0 || strlen(elf->build_id) < 4)
		return;
	if ((size_t)snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug",
	                     debug_dir ? debug_dir : STACKDUMP_DEBUG_DIR, elf->build_id,
	                     elf->build_id + 2) >= sizeof(path))
		return;
	in_root = take_debug_symbols(targetfs_open(pid, path), elf);
	if (!in_root && !take_debug_symbols(open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), elf))
		return;
	if (taken) {
		snprintf(taken, size, "%s", path);
		*ours = !in_root;
	}
}

int stackdump_module_sources(pid_t pid, const char *path, const char *debug_dir,
                             struct stackdump_sources *out)
{
	struct elfinfo elf;
	int fd = path ? targetfs_open(pid, path) : targetfs_open_exe(pid);

	memset(out, 0, sizeof(*out));
	out->symbols = "";
	if (fd < 0)
		return fd;
	int r = elfinfo_read_fd(fd, &elf);
	close(fd);
	if (r < 0)
		return r;
	debug_file_symbols(pid, debug_dir, &elf, out->debug_file, sizeof(out->debug_file),
	                   &out->debug_file_ours);
	snprintf(out->build_id, sizeof(out->build_id), "%s", elf.build_id);
	out->symbols = elf.symsrc ? elf.symsrc : "";
	out->eh_frame = elf.has_eh_table;
	out->debug_frame = elf.dbg.count > 0;
	out->debug_frame_compressed = elf.dbg_compressed;
	snprintf(out->refused, sizeof(out->refused), "%s", elf.refused);
	elfinfo_free(&elf);
	return 0;
}

/* Symbols are cached per build-id: the same library seen through another
 * path (a container's root, a copy) shares the first one's table. */
static void share_symbols(struct modules *ms, struct module *m)
{
	if (m->err || !m->elf.build_id[0])
		return;
	for (size_t i = 0; i < ms->n; i++) {
		struct module *o = ms->v[i];
		if (o != m && o->err == 0 && !o->borrowed_syms && o->elf.nsyms &&
		    strcmp(o->elf.build_id, m->elf.build_id) == 0) {
			free(m->elf.syms);
			free(m->elf.strtab);
			m->elf.syms = o->elf.syms;
			m->elf.nsyms = o->elf.nsyms;
			m->elf.strtab = o->elf.strtab;
			m->elf.strtab_size = o->elf.strtab_size;
			m->elf.symsrc = o->elf.symsrc;
			m->borrowed_syms = true;
			return;
		}
	}
}

/* The cached module for mapping M->v[I] of process PID, read on first
 * use; NULL only without memory.  The key is in modules.h. */
static struct module *module_get(struct modules *ms, pid_t pid, const struct procmaps *maps,
                                 size_t i)
{
	const struct procmaps_entry *e = &maps->v[i];
	char mem_id[sizeof(ms->vdso.mem_id)];

	targetfs_mapped_build_id(pid, maps, i, mem_id, sizeof(mem_id));
	for (size_t k = 0; k < ms->n; k++) {
		struct module *m = ms->v[k];
		if (m->inode == e->inode && m->dev_major == e->dev_major &&
		    m->dev_minor == e->dev_minor && strcmp(m->path, e->path) == 0 &&
		    strcmp(m->mem_id, mem_id) == 0) {
			/* Out of memory or descriptors is worth another try. */
			if (m->err == -ENOMEM || m->err == -EMFILE || m->err == -ENFILE)
				m->err = module_read(pid, e, mem_id, &m->elf);
			return m;
		}
	}
	if (ms->n == ms->cap) {
		size_t cap = ms->cap ? ms->cap * 2 : 32;
		struct module **v = realloc(ms->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		ms->v = v;
		ms->cap = cap;
	}
	struct module *m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(e->path))) {
		free(m);
		return NULL;
	}
	m->dev_major = e->dev_major;
	m->dev_minor = e->dev_minor;
	m->inode = e->inode;
	memcpy(m->mem_id, mem_id, sizeof(mem_id));
	m->err = module_read(pid, e, mem_id, &m->elf);
	share_symbols(ms, m);
	if (m->err == 0 && !m->borrowed_syms)
		debug_file_symbols(pid, NULL, &m->elf, NULL, 0, NULL);
	ms->v[ms->n++] = m;
	return m;
}

/* Our own vDSO image: the kernel maps the same one into every process, so
 * its unwind table and symbols serve the target's [vdso] (the sizes are
 * compared before use).  The vDSO has no file: libunwind alone falls back
 * to frame pointers there and loses the caller. */
void modules_init(struct modules *ms)
{
	struct procmaps self;
	unsigned long base = getauxval(AT_SYSINFO_EHDR);

	memset(ms, 0, sizeof(*ms));
	ms->vdso.err = -ENOENT;
	if (!base || procmaps_read(getpid(), &self) < 0)
		return;
	const struct procmaps_entry *e = procmaps_find(&self, base);
	if (e && strcmp(e->path, "[vdso]") == 0 && e->start == base) {
		ms->vdso_size = e->end - e->start;
		ms->vdso.err = elfinfo_read_mem((const void *)base, ms->vdso_size, &ms->vdso.elf);
	}
	procmaps_free(&self);
}

void modules_free(struct modules *ms)
{
	modules_clear(ms);
	free(ms->v);
	elfinfo_free(&ms->vdso.elf);
	memset(ms, 0, sizeof(*ms));
}

void addrspace_clear(struct addrspace *as)
{
	if (as->as)
		unw_destroy_addr_space(as->as);
	procmaps_free(&as->maps);
	free(as->mods);
	pyframes_proc_free(as->py);
	perfmap_proc_free(as->jit);
	memset(as, 0, sizeof(*as));
}

static bool same_mapping(const struct procmaps_entry *a, const struct procmaps_entry *b)
{
	return a->start == b->start && a->end == b->end && a->pgoff == b->pgoff &&
	       a->inode == b->inode && strcmp(a->perms, b->perms) == 0 &&
	       strcmp(a->path, b->path) == 0;
}

static bool is_code(const struct procmaps_entry *e)
{
	return e->perms[2] == 'x' && (e->path[0] == '/' || strcmp(e->path, "[vdso]") == 0);
}

/* Where the C library's signal return trampoline is mapped in AS, or 0. */
static uint64_t find_sigreturn(const struct addrspace *as)
{
	for (size_t i = 0; i < as->maps.n; i++) {
		const struct procmaps_entry *e = &as->maps.v[i];
		const struct module *mod = as->mods[i];
		uint64_t bias;

		if (!mod || !mod->elf.sigreturn_vaddr || !is_code(e) ||
		    !module_bias(mod, e, e->start, &bias))
			continue;
		uint64_t addr = bias + mod->elf.sigreturn_vaddr;
		if (addr >= e->start && addr < e->end)
			return addr;
	}
	return 0;
}

int addrspace_refresh(struct modules *ms, struct addrspace *as, uint64_t vsize)
{
	struct procmaps m;
	int r = procmaps_read(as->pid, &m);

	if (r < 0)
		return r;
	if (ms->n >= MAX_MODULES)
		modules_clear(ms);
	struct module **mods = calloc(m.n ? m.n : 1, sizeof(*mods));
	if (!mods) {
		procmaps_free(&m);
		return -ENOMEM;
	}
	bool changed = false, reuse = as->mods && as->mods_gen == ms->gen;
	size_t j = 0, ncode_old = 0, ncode_new = 0;
	for (size_t i = 0; i < as->maps.n; i++)
		ncode_old += is_code(&as->maps.v[i]);
	for (size_t i = 0; i < m.n; i++) {
		const struct procmaps_entry *e = &m.v[i];
		if (!is_code(e))
			continue;
		ncode_new++;
		/* Both lists are sorted by address: walk the old one along. */
		while (j < as->maps.n && as->maps.v[j].start < e->start)
			j++;
		bool same = j < as->maps.n && same_mapping(&as->maps.v[j], e);
		changed |= !same;
		if (same && reuse)
			mods[i] = as->mods[j];
		else if (strcmp(e->path, "[vdso]") == 0)
			mods[i] = ms->vdso.err == 0 && e->end - e->start == ms->vdso_size ? &ms->vdso : NULL;
		else
			mods[i] = module_get(ms, as->pid, &m, i);
	}
	if (changed || ncode_old != ncode_new)
		unw_flush_cache(as->as, 0, 0);
	/* The other mappings of the same files (the read-only segment holding
	 * .eh_frame, data): same module.  A file's mappings are adjacent. */
	for (size_t i = 0; i < m.n; i++) {
		const struct procmaps_entry *e = &m.v[i];
		if (mods[i] || e->path[0] != '/')
			continue;
		for (size_t k = i; k > 0 && procmaps_same_file(&m.v[k - 1], e) && !mods[i]; k--)
			mods[i] = mods[k - 1];
		for (size_t k = i + 1; k < m.n && procmaps_same_file(&m.v[k], e) && !mods[i]; k++)
			mods[i] = mods[k];
	}
	procmaps_free(&as->maps);
	free(as->mods);
	as->maps = m;
	as->mods = mods;
	as->mods_gen = ms->gen;
	as->vsize = vsize;
	as->sigreturn = find_sigreturn(as);
	return 0;
}

const struct module *addrspace_module(const struct addrspace *as, uint64_t addr,
                                      const struct procmaps_entry **e)
{
	const struct procmaps_entry *f = procmaps_find(&as->maps, addr);
	const struct module *mod = f ? as->mods[f - as->maps.v] : NULL;

	*e = f;
	return mod && mod->err == 0 ? mod : NULL;
}
