/* debugframe: a module's .debug_frame rewritten in .eh_frame form, so that
 * libunwind's remote table search can use it.
 *
 * Internal to stackdump/.  Code built with -fno-asynchronous-unwind-tables
 * -g has its CFI only in .debug_frame (its .eh_frame_hdr covers the crt
 * files' few functions).  libunwind reads .debug_frame only through
 * _UPT_find_proc_info, which opens the file by path and parses it without
 * bounds checks, and exports no .debug_frame entry point of its own: but it
 * does export the search of an .eh_frame_hdr-style table.  So every CIE and
 * FDE is rewritten as .eh_frame would have it (CIE id 0, augmentation "zR",
 * FDE addresses pc-relative sdata8, CIE pointers relative), followed by the
 * sorted binary-search table of int32 pairs libunwind expects.
 *
 * libunwind is shown the image at the module's own addresses plus
 * DEBUGFRAME_SHADOW: image offset k at load bias + VADDR_LO + k +
 * DEBUGFRAME_SHADOW.  No x86-64 process can map memory there (user
 * addresses end below 2^57), so the reads of the image never collide with
 * the snapshot or the process's memory, and the table search, which needs
 * code, table and FDEs within 2 GiB of each other modulo 2^32, works: the
 * shadow is a multiple of 2^32.  FDE addresses are pc-relative, so one image
 * serves every load address.
 */
#ifndef CPUMOND_STACKDUMP_DEBUGFRAME_H
#define CPUMOND_STACKDUMP_DEBUGFRAME_H

#include <stddef.h>
#include <stdint.h>

#define DEBUGFRAME_SHADOW (1ull << 62)

struct debugframe {
	unsigned char *data;   /* rewritten entries, then the table */
	size_t size;
	size_t table_off;      /* the table: count pairs of int32 */
	size_t count;          /* (start - vaddr_lo, FDE offset in data) */
};

/* Converts the LEN bytes of a .debug_frame section SEC of a module whose
 * code lies in [VADDR_LO, VADDR_HI) (at most 2 GiB).  FDEs outside that
 * range, with a CIE that has an augmentation, or in 64-bit DWARF are
 * dropped; malformed entries end the walk.  The image is at most MAX_SIZE
 * bytes.  Returns 0 with *OUT filled (count may be 0: then data is NULL),
 * -ENOMEM, or -E2BIG when it would be larger than MAX_SIZE. */
int debugframe_convert(const unsigned char *sec, size_t len, uint64_t vaddr_lo,
                       uint64_t vaddr_hi, size_t max_size, struct debugframe *out);

void debugframe_free(struct debugframe *df);

#endif
