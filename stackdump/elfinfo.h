/* elfinfo: what stackdump needs from a module's ELF image -- its GNU
 * build-id, its PT_LOAD segments (to turn a file offset into an ELF virtual
 * address), its unwind tables (.eh_frame_hdr, else .debug_frame) and its
 * function symbols (.symtab, else .dynsym with the MiniDebugInfo symbols of
 * .gnu_debugdata).  A section stored compressed is read through zlib or
 * libzstd: SHF_COMPRESSED (an Elf64_Chdr, then ELFCOMPRESS_ZLIB or
 * ELFCOMPRESS_ZSTD data; a default `go build` keeps Go's only unwind
 * tables so, in a compressed .debug_frame) or the older .zdebug_ form of
 * GNU tools.
 *
 * Internal to stackdump/.  The image is read with pread(2) or from memory,
 * never mmapped (a file truncated under an mmap raises SIGBUS), and every
 * offset, size and count taken from the file is checked against the image
 * size before use: a hostile or corrupt binary yields -ENOEXEC, never a
 * crash.
 */
#ifndef CPUMOND_STACKDUMP_ELFINFO_H
#define CPUMOND_STACKDUMP_ELFINFO_H

#include <elf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stackdump/debugframe.h"

#ifndef ELFCOMPRESS_ZSTD
#define ELFCOMPRESS_ZSTD 2      /* gABI since 2022; glibc 2.36's elf.h lacks it */
#endif

/* Caps on what one module may make us allocate. */
#define ELFINFO_MAX_PHDRS   4096
#define ELFINFO_MAX_SHDRS   65536
#define ELFINFO_MAX_NOTES   (1u << 20)      /* bytes of notes read per segment */
#define ELFINFO_MAX_SYMTAB  (256u << 20)    /* bytes of .symtab or of its strings */
#define ELFINFO_MAX_EH_DATA (32u << 20)     /* bytes of unwind data copied */
#define ELFINFO_MAX_XZ_IN   (16u << 20)     /* bytes of .gnu_debugdata */
#define ELFINFO_MAX_XZ_OUT  (64u << 20)     /* bytes it may decompress to */
#define ELFINFO_MAX_TEXT    (64u << 20)     /* bytes of code searched for the
                                               signal return trampoline */
/* A compressed section may declare at most ELFINFO_MAX_ZOUT bytes (or the
 * cap of its kind when lower) and at most ELFINFO_MAX_ZRATIO times its
 * compressed bytes.  deflate cannot do better than 1032:1, and real
 * sections come nowhere near: the 2,160 compressed sections of this
 * machine's Debian debug files (/usr/lib/debug) compress at most 84:1 (a
 * .debug_abbrev) and declare at most 5.5 MiB; Go's .debug_frame is 2.8:1.
 * So a hostile module makes us inflate at most 64 MiB, and a small one
 * about a thousand times its size. */
#define ELFINFO_MAX_ZOUT    (64u << 20)
#define ELFINFO_MAX_ZRATIO  1032

struct elfinfo_load {
	uint64_t offset;   /* p_offset */
	uint64_t vaddr;    /* p_vaddr */
	uint64_t filesz;   /* p_filesz */
	uint64_t memsz;    /* p_memsz */
	uint64_t align;    /* p_align, 1 when 0 */
	uint32_t flags;    /* p_flags: PF_R, PF_W, PF_X */
};

struct elfinfo_sym {
	uint64_t value;    /* st_value: ELF virtual address */
	uint64_t size;     /* st_size, > 0 */
	uint32_t name;     /* offset in strtab */
	uint32_t rank;     /* binding (0 global, 1 weak, 2 local) << 8 | 128 when
	                      the name has a version (@) | its leading
	                      underscores: lower is preferred */
};

struct elfinfo {
	int type;                   /* ET_EXEC or ET_DYN */
	char build_id[129];         /* lowercase hex, "" when there is none */
	struct elfinfo_load *loads; /* PT_LOAD segments, file order */
	size_t nloads;
	uint64_t vaddr_lo, vaddr_hi;/* [lowest p_vaddr, highest p_vaddr + p_memsz) */
	/* The binary-search table of .eh_frame_hdr (PT_GNU_EH_FRAME), present
	 * only in the one layout libunwind's table search handles: version 1,
	 * 4-byte eh_frame_ptr, udata4 fde_count, datarel|sdata4 entries. */
	bool has_eh_table;
	uint64_t eh_hdr_vaddr;      /* where .eh_frame_hdr is; entries are relative to it */
	uint64_t eh_table_vaddr;    /* where the table's first entry is */
	uint64_t eh_fde_count;      /* entries of 8 bytes each */
	/* A copy of the unwind data as loaded: from the lower of .eh_frame_hdr
	 * and .eh_frame to the end of the file part of their PT_LOAD, so that
	 * the unwinder reads it here instead of from the stopped thread.  Only
	 * when that PT_LOAD is not writable: then memory equals the file. */
	unsigned char *eh_data;     /* NULL when not copied */
	uint64_t eh_data_vaddr;
	uint64_t eh_data_size;
	/* .debug_frame in .eh_frame form, for code its .eh_frame does not
	 * cover; at most vaddr_hi - vaddr_lo bytes (see unwind.c). */
	struct debugframe dbg;
	bool dbg_compressed;        /* that .debug_frame was stored compressed
	                               (SHF_COMPRESSED, or .zdebug_frame) */
	struct elfinfo_sym *syms;   /* sized FUNC/IFUNC symbols by value */
	size_t nsyms;
	char *strtab;               /* NUL-terminated copy of their string table */
	size_t strtab_size;
	const char *symsrc;         /* ".symtab", ".dynsym", ".dynsym+.gnu_debugdata",
	                               ".gnu_debugdata", "debug file" or "" */
	uint64_t sigreturn_vaddr;   /* the signal return trampoline of a C
	                               library (see elfinfo.c), 0 when none */
	char refused[160];          /* why the first compressed section that was
	                               refused was not read, naming it ("" when
	                               none was): ".debug_frame: zlib data ends
	                               after 812 of the 4096 bytes declared".
	                               The module is read as if it lacked it. */
};

/* Reads the ELF image in file FD (read with pread, offsets from 0).
 * Returns 0, -ENOEXEC when it is not a well-formed 64-bit little-endian
 * ET_EXEC/ET_DYN image, -ENOMEM, or the read error.  A module without
 * symbols or build-id is still a success.  *EI is always initialised. */
int elfinfo_read_fd(int fd, struct elfinfo *ei);

/* Reads only the build-id and the .symtab of the ELF file FD: a separate
 * debug file (/usr/lib/debug/.build-id/NN/NNNN.debug).  Returns as
 * elfinfo_read_fd. */
int elfinfo_read_symbols_fd(int fd, struct elfinfo *ei);

/* The same from an image of SIZE bytes in memory (the vDSO, tests). */
int elfinfo_read_mem(const void *image, size_t size, struct elfinfo *ei);

void elfinfo_free(struct elfinfo *ei);

/* Decompresses the LEN bytes SEC of a section stored compressed: with
 * ZDEBUG false an SHF_COMPRESSED one (an Elf64_Chdr, at any alignment, then
 * ELFCOMPRESS_ZLIB or ELFCOMPRESS_ZSTD data), with ZDEBUG true a .zdebug_
 * one ("ZLIB", the size as 8 big-endian bytes, zlib data).  The size
 * declared may be at most MAX_OUT bytes and ELFINFO_MAX_ZRATIO times the
 * compressed ones, and the data must decompress to exactly that size: it
 * is inflated into a buffer of that size plus one byte, which catches a
 * stream that goes on.  Returns 0 with *OUT (free it) holding *OUTLEN
 * bytes and a NUL byte after them; -ENOMEM; or -ENOEXEC with the reason in
 * WHY (WHYSZ bytes; lowercase, such as "declares 1073741824 bytes, over
 * the cap of 33554432"). */
int elfinfo_uncompress(const void *sec, size_t len, bool zdebug, size_t max_out,
                       unsigned char **out, size_t *outlen, char *why, size_t whysz);

/* Translates FILE_OFFSET, an offset in the file, into the ELF virtual address
 * (st_value and FDE compatible) of the PT_LOAD segment that maps it.  Returns
 * false when no segment does. */
bool elfinfo_vaddr(const struct elfinfo *ei, uint64_t file_offset, uint64_t *vaddr);

/* Copies the 8 bytes at ELF virtual address VADDR from eh_data into *WORD;
 * false when they are not all there. */
bool elfinfo_eh_word(const struct elfinfo *ei, uint64_t vaddr, uint64_t *word);

/* The function symbol containing ELF virtual address VADDR, with its start
 * in *START; NULL when none does.  The name lives as long as EI. */
const char *elfinfo_symbol(const struct elfinfo *ei, uint64_t vaddr, uint64_t *start);

/* The values (st_value: ELF virtual addresses) of the symbols NAMES[0..N)
 * that the .dynsym of the ELF file FD defines, any type (data too:
 * elfinfo_read_fd keeps functions only), 0 for those it does not.  The
 * interpreter's exported variables (pyframes.c: _PyRuntime, PyCode_Type).
 * Returns 0 (also for a file without .dynsym), -ENOEXEC when FD is not a
 * well-formed 64-bit little-endian ELF file, -ENOMEM or the read error. */
int elfinfo_dynsym_values(int fd, const char *const *names, size_t n, uint64_t *values);

/* The N bytes at B as lowercase hex in OUT (2 * N + 1 bytes): how a
 * build-id is written everywhere. */
void elfinfo_hex(const unsigned char *b, size_t n, char *out);

#endif
