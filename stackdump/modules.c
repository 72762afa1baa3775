/* modules: per-process maps and the cache of mapped ELF files.  See
 * modules.h. */
#include "stackdump/modules.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
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

/* Where distributions install the separate debug files of their packages
 * (libc6-dbg, *-dbgsym), by build-id: the full .symtab of a stripped file.
 * Read from the daemon's own file system; the build-id match makes it the
 * same file's symbols whatever the target's mount namespace. */
#define DEBUG_DIR "/usr/lib/debug/.build-id"

static void debug_file_symbols(struct elfinfo *elf)
{
	char path[sizeof(DEBUG_DIR) + sizeof(elf->build_id) + 16];
	struct elfinfo dbg;

	if (strcmp(elf->symsrc ? elf->symsrc : "", ".symtab") == 0 || strlen(elf->build_id) < 4)
		return;
	snprintf(path, sizeof(path), DEBUG_DIR "/%.2s/%s.debug", elf->build_id, elf->build_id + 2);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
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
	}
	if (r == 0)
		elfinfo_free(&dbg);
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

/* The cached module for E, read on first use; NULL only without memory. */
static struct module *module_get(struct modules *ms, pid_t pid, const struct procmaps_entry *e)
{
	for (size_t i = 0; i < ms->n; i++) {
		struct module *m = ms->v[i];
		if (m->inode == e->inode && m->dev_major == e->dev_major &&
		    m->dev_minor == e->dev_minor && strcmp(m->path, e->path) == 0) {
			/* Out of memory or descriptors is worth another try. */
			if (m->err == -ENOMEM || m->err == -EMFILE || m->err == -ENFILE)
				m->err = module_read(pid, e, &m->elf);
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
	m->err = module_read(pid, e, &m->elf);
	share_symbols(ms, m);
	if (m->err == 0 && !m->borrowed_syms)
		debug_file_symbols(&m->elf);
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
	memset(as, 0, sizeof(*as));
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
			mods[i] = module_get(ms, as->pid, e);
	}
	if (changed || ncode_old != ncode_new)
		unw_flush_cache(as->as, 0, 0);
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
