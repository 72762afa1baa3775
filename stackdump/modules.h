/* modules: what stackdump caches about the processes it dumps -- their
 * memory maps, and the ELF files mapped (build-id, load segments, unwind
 * tables, symbols).  Internal to stackdump/.
 *
 * Nothing here runs while a thread is stopped: the maps and files are read
 * before the stop or after it, and only when the cached maps may be stale.
 */
#ifndef CPUMOND_STACKDUMP_MODULES_H
#define CPUMOND_STACKDUMP_MODULES_H

#include <libunwind.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stackdump/elfinfo.h"
#include "stackdump/procmaps.h"

/* One ELF file (or the vDSO), shared by every process mapping it.
 *
 * The cache's key is what the maps line and the mapping's memory say about
 * the mapped file, read before any file is opened: device, inode and path
 * as /proc/PID/maps shows them, and the build-id in the mapping's first
 * page (targetfs_mapped_build_id, "" when it has none).  Device and inode
 * alone are not enough: btrfs shows one device for all its subvolumes, so
 * a container's /usr/bin/python3 in one and the host's in another can
 * show the same numbers and path, and an inode number freed by a package
 * upgrade comes back for the new file at the same path; the build-id in
 * memory tells those apart, so they never share an entry (two files with
 * one build-id are one build, and may).  The file itself is read once, as
 * the first process to map it sees it (targetfs.h), and kept only when it
 * is provably the mapped one (targetfs_verdict); otherwise err is set and
 * the module's frames have no names, never another file's. */
struct module {
	char *path;                 /* as /proc/PID/maps prints it */
	unsigned dev_major, dev_minor;
	uint64_t inode;
	char mem_id[129];           /* the build-id in memory, "" when none */
	int err;                    /* 0 when elf was read; -ESTALE: the file
	                               at the path is not the one mapped; else
	                               why it could not be opened or read */
	bool borrowed_syms;         /* elf.syms/strtab belong to another module
	                               with the same build-id */
	struct elfinfo elf;
};

struct modules {
	struct module **v;
	size_t n, cap;
	unsigned gen;               /* bumped when the cache is emptied */
	struct module vdso;         /* our own vDSO: the same image as every process's */
	uint64_t vdso_size;
};

struct pyframes_proc;
struct perfmap_proc;

/* One process's address space. */
struct addrspace {
	pid_t pid;
	unsigned long long start_time;  /* /proc/PID/stat field 22: tells pid reuse */
	uint64_t vsize;                 /* field 23 when the maps were read */
	unw_addr_space_t as;            /* libunwind's caches for this process */
	struct procmaps maps;
	struct module **mods;           /* per maps entry: its module, or NULL */
	unsigned mods_gen;              /* modules.gen when mods was built */
	uint64_t sigreturn;             /* the C library's signal return
	                                   trampoline here, 0 when unknown */
	struct pyframes_proc *py;       /* its CPython (pyframes.h), NULL until
	                                   a dump looked */
	struct perfmap_proc *jit;       /* its perf map (perfmap.h), NULL until
	                                   a frame was in JIT code */
};

void modules_init(struct modules *ms);
void modules_free(struct modules *ms);

/* Rereads /proc/PID/maps of AS and finds the module of every executable
 * mapping, reading the ELF files not seen yet as the process sees them
 * (targetfs.h: /proc/PID/map_files, which reaches a file deleted or
 * replaced since it was mapped, else the path in the process's own root)
 * with their separate debug files (in its root, then in ours).
 * libunwind's cached unwind rules are keyed by address: they are flushed
 * when the code mappings changed.  Returns 0 or -errno. */
int addrspace_refresh(struct modules *ms, struct addrspace *as, uint64_t vsize);

void addrspace_clear(struct addrspace *as);

/* The module mapped at ADDR in AS with its mapping in *E; NULL when ADDR
 * is in no file mapping we could read. */
const struct module *addrspace_module(const struct addrspace *as, uint64_t addr,
                                      const struct procmaps_entry **e);

/* The load bias of MOD mapped by E, from the address ADDR in E: ADDR's
 * file offset, translated to an ELF virtual address through the PT_LOAD
 * that maps it, is ADDR - bias.  False (and a best guess in *BIAS) when no
 * PT_LOAD maps it. */
bool module_bias(const struct module *mod, const struct procmaps_entry *e,
                 uint64_t addr, uint64_t *bias);

#endif
