/* libFuzzer target: stackdump's readers of files that belong to the target
 * process -- the ELF reader (headers, notes, build-id, .eh_frame_hdr,
 * symbols, .gnu_debugdata through xz, sections compressed with zlib or
 * zstd) and the .debug_frame converter.  A corrupt or hostile module must
 * never crash the daemon.
 *
 * Each input is read six ways:
 *   - elfinfo_read_mem, the reader of the vDSO;
 *   - elfinfo_read_fd from a memfd holding the same bytes: the reader of
 *     every mapped module, through pread.  Both must agree (return value,
 *     segments, unwind table, symbols): they share one parser, and a
 *     difference would mean the file path reads something else than the
 *     bytes given;
 *   - elfinfo_read_symbols_fd from the memfd, the reader of separate debug
 *     files (build-id and .symtab only);
 *   - debugframe_convert, the bytes taken as a .debug_frame section;
 *   - elfinfo_uncompress, the bytes taken as a compressed section, in the
 *     SHF_COMPRESSED form and in the .zdebug_ one: what comes out must be
 *     the size declared, what is refused must say why.
 * Whatever was read is then looked up around every symbol and segment.
 *
 * The seeds in tests/fuzz/corpus/elf/ are tiny real ELF files (built with
 * -nostdlib and 16-byte page alignment): one with .eh_frame_hdr, one with
 * only .debug_frame, a PIE, a stripped one with MiniDebugInfo, and an ELF
 * header alone.  Inputs that once crashed are kept there as crash-* files.
 * The seeds with compressed sections come from seed-debug-frame-plain
 * (twelve chained functions and _start, gcc -O1 -g -fomit-frame-pointer
 * -fno-asynchronous-unwind-tables, every debug section but .debug_frame
 * removed): its .debug_frame compressed by objcopy
 * --compress-debug-sections=zlib, =zstd and =zlib-gnu (.zdebug_frame),
 * the same program built with gcc -gz=zlib (all its debug sections),
 * .symtab compressed in place (zlib), and from the zlib one the hostile
 * forms: ch_size one byte long or short (seed-zlib-size-*), 1 GiB
 * (seed-zlib-bomb), ch_type 9, the section cut by 10 bytes (zlib and
 * zstd); seed-chdr-zlib-section is that compressed section alone. */
#include "stackdump/debugframe.h"
#include "stackdump/elfinfo.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Look up addresses around every symbol and segment. */
static void lookups(const struct elfinfo *ei)
{
	uint64_t start, v;

	for (size_t i = 0; i < ei->nsyms && i < 64; i++) {
		elfinfo_symbol(ei, ei->syms[i].value, &start);
		elfinfo_symbol(ei, ei->syms[i].value + ei->syms[i].size - 1, &start);
		elfinfo_symbol(ei, ei->syms[i].value + ei->syms[i].size, &start);
	}
	for (size_t i = 0; i < ei->nloads; i++) {
		elfinfo_vaddr(ei, ei->loads[i].offset, &v);
		elfinfo_vaddr(ei, ei->loads[i].offset + ei->loads[i].filesz, &v);
	}
	elfinfo_eh_word(ei, ei->eh_table_vaddr, &v);
	elfinfo_eh_word(ei, ei->eh_data_vaddr + ei->eh_data_size - 8, &v);
}

/* Whether the two readings of one image found the same things. */
static bool same_elfinfo(const struct elfinfo *a, const struct elfinfo *b)
{
	return a->type == b->type && strcmp(a->build_id, b->build_id) == 0 &&
	       a->nloads == b->nloads &&
	       (a->nloads == 0 || memcmp(a->loads, b->loads, a->nloads * sizeof(*a->loads)) == 0) &&
	       a->has_eh_table == b->has_eh_table && a->eh_fde_count == b->eh_fde_count &&
	       a->eh_data_size == b->eh_data_size &&
	       (a->eh_data_size == 0 || memcmp(a->eh_data, b->eh_data, a->eh_data_size) == 0) &&
	       a->dbg.size == b->dbg.size && a->dbg.count == b->dbg.count &&
	       a->nsyms == b->nsyms &&
	       (a->nsyms == 0 || memcmp(a->syms, b->syms, a->nsyms * sizeof(*a->syms)) == 0) &&
	       strcmp(a->symsrc ? a->symsrc : "", b->symsrc ? b->symsrc : "") == 0 &&
	       strcmp(a->refused, b->refused) == 0;
}

/* The memfd the file readers read, created once: -1 when it cannot be. */
static int image_fd(const uint8_t *data, size_t size)
{
	static int fd = -2;

	if (fd == -2) {
		fd = memfd_create("fuzz_elf", MFD_CLOEXEC);
		if (fd < 0)
			perror("fuzz_elf: memfd_create (file readers not fuzzed)");
	}
	/* ftruncate first: the previous input may have been longer, and
	 * the readers take the size from fstat. */
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
	    (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		return -1;
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elfinfo ei, fei;
	int r = elfinfo_read_mem(data, size, &ei);

	if (r == 0)
		lookups(&ei);

	int fd = image_fd(data, size);
	if (fd >= 0) {
		int fr = elfinfo_read_fd(fd, &fei);
		if (fr != r || (r == 0 && !same_elfinfo(&ei, &fei))) {
			fprintf(stderr, "elfinfo_read_fd returned %d, elfinfo_read_mem %d%s\n",
			        fr, r, fr == r ? ", and they differ" : "");
			__builtin_trap();
		}
		if (fr == 0)
			elfinfo_free(&fei);
		if (elfinfo_read_symbols_fd(fd, &fei) == 0) {
			lookups(&fei);
			elfinfo_free(&fei);
		}
	}
	if (r == 0)
		elfinfo_free(&ei);

	/* The same bytes as a .debug_frame section. */
	struct debugframe df;
	if (debugframe_convert(data, size, 0x1000, 0x100000, 1u << 20, &df) == 0)
		debugframe_free(&df);

	/* And as a compressed section, both forms: a refusal says why, and
	 * what is accepted has the NUL byte after it. */
	for (int zdebug = 0; zdebug < 2; zdebug++) {
		unsigned char *out;
		size_t n;
		char why[128] = "";
		int zr = elfinfo_uncompress(data, size, zdebug, 1u << 20, &out, &n, why, sizeof(why));
		if ((zr == -ENOEXEC && why[0] == '\0') || (zr == 0 && (n > 1u << 20 || out[n] != 0)) ||
		    (zr != 0 && zr != -ENOEXEC && zr != -ENOMEM)) {
			fprintf(stderr, "elfinfo_uncompress returned %d, %zu bytes, \"%s\"\n", zr,
			        zr == 0 ? n : 0, why);
			__builtin_trap();
		}
		if (zr == 0)
			free(out);
	}
	return 0;
}
