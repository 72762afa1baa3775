/* modules: what stackdump caches about the processes it dumps -- their
 * memory maps, and the ELF files mapped (build-id, load segments, unwind
 * tables, symbols).  Internal to stackdump/.
 *
 * Nothing here runs while a thread is stopped: the maps and files are read
 * after the snapshot, and only when the cached maps may be stale.
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

/* One ELF file (or the vDSO), shared by every process mapping it. */
struct module {
	char *path;                 /* as /proc/PID/maps prints it */
	unsigned dev_major, dev_minor;
	uint64_t inode;
	int err;                    /* 0 when elf was read */
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
};

void modules_init(struct modules *ms);
void modules_free(struct modules *ms);

/* Rereads /proc/PID/maps of AS and finds the module of every executable
 * mapping, reading the ELF files not seen yet (through
 * /proc/PID/map_files, which reaches a file deleted or replaced since it
 * was mapped).  libunwind's cached unwind rules are keyed by address: they
 * are flushed when the code mappings changed.  Returns 0 or -errno. */
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
