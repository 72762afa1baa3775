/* elfinfo: a small ELF64 reader with a bounds check on every offset.
 * See elfinfo.h. */
#include "stackdump/elfinfo.h"

#include "stackdump/cfi.h"
#include "stackdump/minidebug.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZLIB_CONST
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* Where the image comes from: a file read with pread, or memory. */
struct src {
	int fd;
	const unsigned char *mem;
	uint64_t size;
};

/* Copies LEN bytes at OFF into BUF; -ENOEXEC when [OFF, OFF+LEN) is not
 * inside the image (the ELF file lied about an offset or a size). */
static int src_read(const struct src *s, uint64_t off, void *buf, uint64_t len)
{
	if (off > s->size || len > s->size - off)
		return -ENOEXEC;
	if (s->mem) {
		memcpy(buf, s->mem + off, len);
		return 0;
	}
	unsigned char *p = buf;
	while (len > 0) {
		ssize_t n = pread(s->fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENOEXEC;   /* the file shrank under us */
		p += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/* Reads LEN bytes at OFF into a new buffer with one extra NUL byte after them,
 * so that strings inside can never run off its end. */
static int src_read_alloc(const struct src *s, uint64_t off, uint64_t len, char **out)
{
	*out = NULL;
	if (off > s->size || len > s->size - off)
		return -ENOEXEC;
	char *buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	int r = src_read(s, off, buf, len);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
}

/* Writes the reason into WHY and returns -ENOEXEC. */
__attribute__((format(printf, 3, 4)))
static int refuse(char *why, size_t whysz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whysz, fmt, ap);
	va_end(ap);
	return -ENOEXEC;
}

/* Inflates the zlib stream IN into OUT, of CAP bytes; *N is what it gave,
 * CAP when the stream goes on past it. */
static int inflate_zlib(const unsigned char *in, size_t len, unsigned char *out, size_t cap,
                        size_t *n, char *why, size_t whysz)
{
	z_stream z = { .next_in = in, .avail_in = (uInt)len, .next_out = out, .avail_out = (uInt)cap };
	int zr;

	if (len > UINT_MAX || cap > UINT_MAX)
		return refuse(why, whysz, "zlib data of %zu bytes is too large", len);
	if (inflateInit(&z) != Z_OK)
		return -ENOMEM;
	do
		zr = inflate(&z, Z_FINISH);
	while (zr == Z_OK);
	*n = z.total_out;
	int r = 0;
	if (zr == Z_MEM_ERROR)
		r = -ENOMEM;
	else if (zr == Z_BUF_ERROR && z.avail_out > 0)
		r = refuse(why, whysz, "zlib data cut off after %zu bytes of output", *n);
	else if (zr != Z_STREAM_END && zr != Z_BUF_ERROR)
		r = refuse(why, whysz, "corrupt zlib data: %s", z.msg ? z.msg : "unknown error");
	inflateEnd(&z);
	return r;
}

/* The same for zstd frames.  One call into a buffer we sized: libzstd
 * allocates no window of the size a frame asks for. */
static int inflate_zstd(const unsigned char *in, size_t len, unsigned char *out, size_t cap,
                        size_t *n, char *why, size_t whysz)
{
	size_t zr = ZSTD_decompress(out, cap, in, len);

	*n = ZSTD_isError(zr) ? 0 : zr;
	if (!ZSTD_isError(zr))
		return 0;
	switch (ZSTD_getErrorCode(zr)) {
	case ZSTD_error_dstSize_tooSmall:
		*n = cap;
		return 0;
	case ZSTD_error_memory_allocation:
		return -ENOMEM;
	case ZSTD_error_srcSize_wrong:
		return refuse(why, whysz, "zstd data cut off");
	default:
		return refuse(why, whysz, "corrupt zstd data: %s", ZSTD_getErrorName(zr));
	}
}

int elfinfo_uncompress(const void *sec, size_t len, bool zdebug, size_t max_out,
                       unsigned char **out, size_t *outlen, char *why, size_t whysz)
{
	const unsigned char *p = sec;
	uint64_t size = 0;
	uint32_t type = ELFCOMPRESS_ZLIB;
	size_t hdr;

	*out = NULL;
	*outlen = 0;
	if (zdebug) {
		/* binutils' old form: "ZLIB", the size big-endian, zlib data. */
		hdr = 12;
		if (len < hdr || memcmp(p, "ZLIB", 4) != 0)
			return refuse(why, whysz, "no ZLIB header");
		for (int i = 0; i < 8; i++)
			size = size << 8 | p[4 + i];
	} else {
		/* Go writes its compressed sections at any offset (sh_addralign
		 * 1): the header is copied out, never read in place. */
		Elf64_Chdr ch;
		hdr = sizeof(ch);
		if (len < hdr)
			return refuse(why, whysz, "compression header cut off at %zu bytes", len);
		memcpy(&ch, p, sizeof(ch));
		if (ch.ch_type != ELFCOMPRESS_ZLIB && ch.ch_type != ELFCOMPRESS_ZSTD)
			return refuse(why, whysz, "unknown compression type %" PRIu32, ch.ch_type);
		if (ch.ch_addralign & (ch.ch_addralign - 1))
			return refuse(why, whysz, "alignment %" PRIu64 " is not a power of two",
			              (uint64_t)ch.ch_addralign);
		type = ch.ch_type;
		size = ch.ch_size;
	}
	size_t in = len - hdr;
	if (size > max_out || size >= SIZE_MAX)
		return refuse(why, whysz, "declares %" PRIu64 " bytes, over the cap of %zu",
		              size, max_out);
	/* size > ELFINFO_MAX_ZRATIO * in, without the product. */
	if (size > 0 && (size - 1) / ELFINFO_MAX_ZRATIO >= in)
		return refuse(why, whysz, "declares %" PRIu64 " bytes from %zu: more than %d times as many",
		              size, in, ELFINFO_MAX_ZRATIO);

	unsigned char *buf = malloc(size + 1);
	size_t n;
	if (!buf)
		return -ENOMEM;
	int r = (type == ELFCOMPRESS_ZLIB ? inflate_zlib : inflate_zstd)(p + hdr, in, buf, size + 1,
	                                                                &n, why, whysz);
	if (r == 0 && n > size)
		r = refuse(why, whysz, "decompresses to more than the %" PRIu64 " bytes declared", size);
	else if (r == 0 && n < size)
		r = refuse(why, whysz, "decompresses to %zu bytes, not the %" PRIu64 " declared", n, size);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[size] = '\0';
	*out = buf;
	*outlen = size;
	return 0;
}

/* Reads section SH, named NAME, into a new buffer with a NUL byte after its
 * *LEN bytes: as stored, or decompressed when it is SHF_COMPRESSED or a
 * .zdebug_ section.  MAX caps its size either way.  Returns 0, -ENOMEM, or
 * -ENOEXEC when it is not inside the image, is larger than MAX or its
 * compressed data is refused: then the first such reason of the module
 * goes to EI->refused. */
static int read_section(const struct src *s, const Elf64_Shdr *sh, const char *name,
                        uint64_t max, struct elfinfo *ei, char **out, uint64_t *len)
{
	bool chdr = sh->sh_flags & SHF_COMPRESSED;
	bool zdebug = !chdr && strncmp(name, ".zdebug_", 8) == 0;
	char *raw, why[128];

	*out = NULL;
	*len = 0;
	if (sh->sh_size > max)
		return -ENOEXEC;
	int r = src_read_alloc(s, sh->sh_offset, sh->sh_size, &raw);
	if (r < 0)
		return r;
	if (!chdr && !zdebug) {
		*out = raw;
		*len = sh->sh_size;
		return 0;
	}
	unsigned char *data;
	size_t n;
	r = elfinfo_uncompress(raw, sh->sh_size, zdebug, max < ELFINFO_MAX_ZOUT ? max : ELFINFO_MAX_ZOUT,
	                       &data, &n, why, sizeof(why));
	free(raw);
	if (r == -ENOEXEC && ei->refused[0] == '\0')
		snprintf(ei->refused, sizeof(ei->refused), "%s: %s", name, why);
	if (r < 0)
		return r;
	*out = (char *)data;
	*len = n;
	return 0;
}

void elfinfo_hex(const unsigned char *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* Looks for the NT_GNU_BUILD_ID note in LEN bytes of notes; ALIGN is 4 or
 * 8 (the note segment's p_align).  Returns true when found. */
static bool find_build_id(const unsigned char *p, uint64_t len, uint64_t align,
                          char *out, size_t outsz)
{
	uint64_t off = 0;

	while (len - off >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;

		memcpy(&nh, p + off, sizeof(nh));
		off += sizeof(nh);
		uint64_t name_len = align_up(nh.n_namesz, align);
		if (name_len > len - off)
			return false;
		const unsigned char *name = p + off;
		off += name_len;
		uint64_t desc_len = align_up(nh.n_descsz, align);
		if (desc_len > len - off)
			return false;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
		    memcmp(name, "GNU", 4) == 0 && nh.n_descsz > 0 &&
		    2 * (size_t)nh.n_descsz < outsz) {
			elfinfo_hex(p + off, nh.n_descsz, out);
			return true;
		}
		off += desc_len;
	}
	return false;
}

static bool notes_build_id(const struct src *s, uint64_t off, uint64_t size,
                           uint64_t align, char *out, size_t outsz)
{
	char *buf;

	if (size == 0 || size > ELFINFO_MAX_NOTES)
		return false;
	if (src_read_alloc(s, off, size, &buf) < 0)
		return false;
	bool found = find_build_id((unsigned char *)buf, size, align == 8 ? 8 : 4,
	                           out, outsz);
	free(buf);
	return found;
}

/* .eh_frame_hdr starts with version, eh_frame_ptr_enc, fde_count_enc and
 * table_enc, then eh_frame_ptr, fde_count and the table.  Only the layout
 * every x86-64 linker writes is accepted (see elfinfo.h). */
static void read_eh_hdr(const struct src *s, const Elf64_Phdr *ph, struct elfinfo *ei)
{
	unsigned char h[12];
	uint32_t count;

	if (ph->p_filesz < sizeof(h) || src_read(s, ph->p_offset, h, sizeof(h)) < 0)
		return;
	if (h[0] != 1 || ((h[1] & 0x0f) != 0x03 /* DW_EH_PE_udata4 */ &&
	                  (h[1] & 0x0f) != 0x0b /* DW_EH_PE_sdata4 */))
		return;
	if (h[2] != 0x03 /* DW_EH_PE_udata4 */ || h[3] != 0x3b /* datarel|sdata4 */)
		return;
	memcpy(&count, h + 8, sizeof(count));
	if (count == 0 || (uint64_t)count * 8 > ph->p_filesz - sizeof(h))
		return;
	ei->has_eh_table = true;
	ei->eh_hdr_vaddr = ph->p_vaddr;
	ei->eh_table_vaddr = ph->p_vaddr + sizeof(h);
	ei->eh_fde_count = count;

	/* Where .eh_frame starts: eh_frame_ptr, pc-relative or absolute. */
	int32_t rel;
	memcpy(&rel, h + 4, sizeof(rel));
	uint64_t v = (h[1] & 0x0f) == 0x03 ? (uint32_t)rel : (uint64_t)(int64_t)rel;
	if ((h[1] & 0x70) == 0x10)          /* DW_EH_PE_pcrel */
		ei->eh_data_vaddr = ph->p_vaddr + 4 + v;
	else if ((h[1] & 0x70) == 0x00)     /* DW_EH_PE_absptr */
		ei->eh_data_vaddr = v;
	else
		ei->eh_data_vaddr = ph->p_vaddr;
	if (ei->eh_data_vaddr > ph->p_vaddr)
		ei->eh_data_vaddr = ph->p_vaddr;
}

/* Copies the unwind data (see elfinfo.h) once the PT_LOADs are known. */
static int read_eh_data(const struct src *s, struct elfinfo *ei)
{
	uint64_t lo = ei->eh_data_vaddr;

	for (size_t i = 0; i < ei->nloads; i++) {
		const struct elfinfo_load *l = &ei->loads[i];
		if (ei->eh_hdr_vaddr < l->vaddr || ei->eh_hdr_vaddr - l->vaddr >= l->filesz)
			continue;
		if (l->flags & PF_W)
			return 0;
		if (lo < l->vaddr)
			lo = l->vaddr;     /* .eh_frame in another segment: not copied */
		uint64_t size = l->vaddr + l->filesz - lo;
		if (size > ELFINFO_MAX_EH_DATA)
			return 0;
		char *buf;
		int r = src_read_alloc(s, l->offset + (lo - l->vaddr), size, &buf);
		if (r < 0)
			return r == -ENOMEM ? r : 0;
		ei->eh_data = (unsigned char *)buf;
		ei->eh_data_vaddr = lo;
		ei->eh_data_size = size;
		return 0;
	}
	return 0;
}

/* Drops from the binary-search table, in our copy, the entries whose FDE
 * libunwind must not run (see cfi.h), and those whose FDE is not in the
 * copy: libunwind reads table and FDEs from eh_data (unwind.c), and an FDE
 * read from anywhere else would go unchecked.  Without a copy the table
 * is not used at all.  The kept entries stay in order, so the table stays
 * sorted.  Once per module: 0.4-0.7 ms for the 3,713 FDEs of libc.so.6. */
static void check_eh_table(struct elfinfo *ei)
{
	uint64_t size = ei->eh_data_size, toff = ei->eh_table_vaddr - ei->eh_data_vaddr;
	uint64_t keep = 0;

	if (!ei->eh_data || ei->eh_table_vaddr < ei->eh_data_vaddr || toff > size ||
	    ei->eh_fde_count > (size - toff) / 8) {
		ei->has_eh_table = false;
		ei->eh_fde_count = 0;
		return;
	}
	unsigned char *table = ei->eh_data + toff;
	for (uint64_t i = 0; i < ei->eh_fde_count; i++) {
		int32_t fde;
		memcpy(&fde, table + 8 * i + 4, sizeof(fde));
		/* Relative to .eh_frame_hdr, modulo 2^64 as libunwind adds. */
		uint64_t off = ei->eh_hdr_vaddr + (uint64_t)(int64_t)fde - ei->eh_data_vaddr;
		if (off >= size || cfi_check_fde(ei->eh_data, size, off, NULL) < 0)
			continue;
		if (keep != i)
			memmove(table + 8 * keep, table + 8 * i, 8);
		keep++;
	}
	ei->eh_fde_count = keep;
	ei->has_eh_table = keep > 0;
}

static int read_phdrs(const struct src *s, const Elf64_Ehdr *eh, struct elfinfo *ei)
{
	if (eh->e_phnum == 0)
		return 0;
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum > ELFINFO_MAX_PHDRS)
		return -ENOEXEC;

	uint64_t tabsz = (uint64_t)eh->e_phnum * eh->e_phentsize;
	char *tab;
	int r = src_read_alloc(s, eh->e_phoff, tabsz, &tab);
	if (r < 0)
		return r;
	ei->loads = calloc(eh->e_phnum, sizeof(*ei->loads));
	if (!ei->loads) {
		free(tab);
		return -ENOMEM;
	}
	for (size_t i = 0; i < eh->e_phnum; i++) {
		Elf64_Phdr ph;

		memcpy(&ph, tab + i * eh->e_phentsize, sizeof(ph));
		if (ph.p_type == PT_LOAD) {
			struct elfinfo_load *l = &ei->loads[ei->nloads++];
			l->offset = ph.p_offset;
			l->vaddr = ph.p_vaddr;
			l->filesz = ph.p_filesz;
			l->memsz = ph.p_memsz;
			l->align = ph.p_align ? ph.p_align : 1;
			l->flags = ph.p_flags;
			if (ei->nloads == 1 || ph.p_vaddr < ei->vaddr_lo)
				ei->vaddr_lo = ph.p_vaddr;
			if (ph.p_vaddr + ph.p_memsz > ei->vaddr_hi)
				ei->vaddr_hi = ph.p_vaddr + ph.p_memsz;
		} else if (ph.p_type == PT_GNU_EH_FRAME) {
			read_eh_hdr(s, &ph, ei);
		} else if (ph.p_type == PT_NOTE && ei->build_id[0] == '\0') {
			notes_build_id(s, ph.p_offset, ph.p_filesz, ph.p_align,
			               ei->build_id, sizeof(ei->build_id));
		}
	}
	free(tab);
	if (!ei->has_eh_table)
		return 0;
	r = read_eh_data(s, ei);
	if (r == 0)
		check_eh_table(ei);
	return r;
}

static int cmp_sym(const void *a, const void *b)
{
	const struct elfinfo_sym *x = a, *y = b;

	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;   /* the widest first */
	return x->name < y->name ? -1 : x->name > y->name;
}

/* The name of section SH, or "" (names come from section e_shstrndx). */
static const char *section_name(const char *names, uint64_t names_size, const Elf64_Shdr *sh)
{
	return names && sh->sh_name < names_size ? names + sh->sh_name : "";
}

/* Loads the sized function symbols of symbol table section SYMSEC, whose
 * strings are in section sh_link (section names in NAMES).  Returns 0
 * (possibly with no symbols). */
static int load_symbols(const struct src *s, const char *shtab, size_t shentsize,
                        size_t nsec, size_t symsec, const char *names, uint64_t names_size,
                        struct elfinfo *ei)
{
	Elf64_Shdr sh, strsh;

	memcpy(&sh, shtab + symsec * shentsize, sizeof(sh));
	if (sh.sh_link == 0 || sh.sh_link >= nsec)
		return 0;
	memcpy(&strsh, shtab + (size_t)sh.sh_link * shentsize, sizeof(strsh));
	if (strsh.sh_type != SHT_STRTAB || sh.sh_entsize != sizeof(Elf64_Sym))
		return 0;

	char *symtab, *strtab;
	uint64_t symtab_size, strtab_size;
	int r = read_section(s, &sh, section_name(names, names_size, &sh), ELFINFO_MAX_SYMTAB, ei,
	                     &symtab, &symtab_size);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	r = read_section(s, &strsh, section_name(names, names_size, &strsh), ELFINFO_MAX_SYMTAB, ei,
	                 &strtab, &strtab_size);
	if (r < 0 || strtab_size == 0) {
		free(symtab);
		free(strtab);
		return r == -ENOMEM ? r : 0;
	}

	size_t n = symtab_size / sizeof(Elf64_Sym), nsyms = 0;
	struct elfinfo_sym *syms = malloc((n ? n : 1) * sizeof(*syms));
	if (!syms) {
		free(symtab);
		free(strtab);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		Elf64_Sym sym;

		memcpy(&sym, symtab + i * sizeof(sym), sizeof(sym));
		int type = ELF64_ST_TYPE(sym.st_info), bind = ELF64_ST_BIND(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
		    sym.st_size == 0 || sym.st_name == 0 || sym.st_name >= strtab_size ||
		    sym.st_value + sym.st_size < sym.st_value)
			continue;
		syms[nsyms].value = sym.st_value;
		syms[nsyms].size = sym.st_size;
		syms[nsyms].name = sym.st_name;
		/* Aliases share an address: prefer the global binding, then a
		 * name that is not an old version (memcpy@GLIBC_2.2.5; the
		 * default one, clock_gettime@@GLIBC_2.17 in .symtab, is shown
		 * as clock_gettime), then the fewest leading underscores
		 * (clone3, not __GI___clone3 or __clone3), as gdb names them.
		 * STRTAB is our own copy: cutting a name there is safe. */
		char *name = strtab + sym.st_name;
		char *at = strchr(name, '@');
		if (at && at[1] == '@')
			*at = '\0';     /* the default version: its plain name */
		unsigned under = (unsigned)strspn(name, "_");
		under = (under < 127 ? under : 127) + (at && *at ? 128 : 0);
		syms[nsyms].rank = (uint32_t)(bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2) << 8 |
		                   under;
		nsyms++;
	}
	free(symtab);
	if (nsyms == 0) {
		free(syms);
		free(strtab);
		return 0;
	}
	qsort(syms, nsyms, sizeof(*syms), cmp_sym);
	ei->syms = syms;
	ei->nsyms = nsyms;
	ei->strtab = strtab;
	ei->strtab_size = strtab_size;
	return 0;
}

/* Copies into *OUT the first symbols of ADD, appending its strings to ours:
 * the .dynsym symbols and those of MiniDebugInfo make one table. */
static int merge_symbols(struct elfinfo *ei, struct elfinfo *add)
{
	if (add->nsyms == 0)
		return 0;
	if (ei->nsyms == 0) {
		ei->syms = add->syms;
		ei->nsyms = add->nsyms;
		ei->strtab = add->strtab;
		ei->strtab_size = add->strtab_size;
		add->syms = NULL;
		add->strtab = NULL;
		add->nsyms = 0;
		return 0;
	}
	if (add->strtab_size > UINT32_MAX - ei->strtab_size - 1)
		return 0;
	size_t n = ei->nsyms + add->nsyms;
	struct elfinfo_sym *syms = malloc(n * sizeof(*syms));
	char *strtab = malloc(ei->strtab_size + add->strtab_size + 1);
	if (!syms || !strtab) {
		free(syms);
		free(strtab);
		return -ENOMEM;
	}
	memcpy(strtab, ei->strtab, ei->strtab_size);
	memcpy(strtab + ei->strtab_size, add->strtab, add->strtab_size);
	strtab[ei->strtab_size + add->strtab_size] = '\0';
	memcpy(syms, ei->syms, ei->nsyms * sizeof(*syms));
	for (size_t i = 0; i < add->nsyms; i++) {
		syms[ei->nsyms + i] = add->syms[i];
		syms[ei->nsyms + i].name += (uint32_t)ei->strtab_size;
	}
	qsort(syms, n, sizeof(*syms), cmp_sym);
	free(ei->syms);
	free(ei->strtab);
	ei->syms = syms;
	ei->nsyms = n;
	ei->strtab = strtab;
	ei->strtab_size += add->strtab_size;
	return 0;
}

static int read_image(const struct src *s, struct elfinfo *ei, bool inner);

/* MiniDebugInfo: an xz-compressed ELF whose .symtab holds the function
 * symbols the stripped file dropped. */
static int read_debugdata(const struct src *s, const Elf64_Shdr *sh, struct elfinfo *ei)
{
	char *xz;
	uint64_t xz_size;
	unsigned char *image;
	size_t size;
	struct elfinfo inner;

	if (sh->sh_type != SHT_PROGBITS)
		return 0;
	int r = read_section(s, sh, ".gnu_debugdata", ELFINFO_MAX_XZ_IN, ei, &xz, &xz_size);
	if (r < 0 || xz_size == 0) {
		free(xz);
		return r == -ENOMEM ? r : 0;
	}
	r = minidebug_decompress(xz, xz_size, ELFINFO_MAX_XZ_OUT, &image, &size);
	free(xz);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	struct src in = { .fd = -1, .mem = image, .size = size };
	r = read_image(&in, &inner, true);
	free(image);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	if (ei->refused[0] == '\0' && inner.refused[0] != '\0')
		snprintf(ei->refused, sizeof(ei->refused), ".gnu_debugdata %.144s", inner.refused);
	r = merge_symbols(ei, &inner);
	elfinfo_free(&inner);
	return r;
}

/* .debug_frame (or .zdebug_frame, NAME), rewritten for libunwind (see
 * debugframe.h). */
static int read_debug_frame(const struct src *s, const Elf64_Shdr *sh, const char *name,
                            struct elfinfo *ei)
{
	char *sec;
	uint64_t size;

	if (sh->sh_type != SHT_PROGBITS || ei->nloads == 0)
		return 0;
	int r = read_section(s, sh, name, ELFINFO_MAX_EH_DATA, ei, &sec, &size);
	if (r < 0 || size == 0) {
		free(sec);
		return r == -ENOMEM ? r : 0;
	}
	/* The image is shown to libunwind in a window as large as the module
	 * (unwind.c), so it may not be larger. */
	uint64_t span = ei->vaddr_hi - ei->vaddr_lo;
	r = debugframe_convert((const unsigned char *)sec, size, ei->vaddr_lo, ei->vaddr_hi,
	                       span < ELFINFO_MAX_EH_DATA ? span : ELFINFO_MAX_EH_DATA, &ei->dbg);
	free(sec);
	ei->dbg_compressed = ei->dbg.count && ((sh->sh_flags & SHF_COMPRESSED) || name[1] == 'z');
	return r == -ENOMEM ? r : 0;
}

/* Section headers: the build-id from SHT_NOTE sections when no PT_NOTE had
 * it, .debug_frame, and the symbols from .symtab, else .dynsym and
 * .gnu_debugdata (stripped binaries), each decompressed when it is stored
 * compressed.  INNER: the image is MiniDebugInfo or a separate debug file;
 * only its .symtab (and build-id) is wanted. */
static int read_shdrs(const struct src *s, const Elf64_Ehdr *eh, struct elfinfo *ei, bool inner)
{
	size_t nsec = eh->e_shnum, shstrndx = eh->e_shstrndx;

	if (eh->e_shoff == 0)
		return 0;
	if (eh->e_shentsize != sizeof(Elf64_Shdr))
		return -ENOEXEC;
	if (nsec == 0 || shstrndx == SHN_XINDEX) {
		/* More than SHN_LORESERVE sections: the count is in the first
		 * header's sh_size, the names' index in its sh_link. */
		Elf64_Shdr first;
		int r = src_read(s, eh->e_shoff, &first, sizeof(first));
		if (r < 0)
			return r;
		if (first.sh_size > ELFINFO_MAX_SHDRS)
			return 0;
		if (nsec == 0)
			nsec = first.sh_size;
		if (shstrndx == SHN_XINDEX)
			shstrndx = first.sh_link;
	}
	if (nsec == 0)
		return 0;

	char *shtab, *names = NULL;
	uint64_t names_size = 0;
	int r = src_read_alloc(s, eh->e_shoff, (uint64_t)nsec * eh->e_shentsize, &shtab);
	if (r < 0)
		return r;
	if (shstrndx > 0 && shstrndx < nsec) {
		Elf64_Shdr sh;
		memcpy(&sh, shtab + shstrndx * eh->e_shentsize, sizeof(sh));
		if (sh.sh_type == SHT_STRTAB &&
		    read_section(s, &sh, ".shstrtab", ELFINFO_MAX_SYMTAB, ei, &names, &names_size) == -ENOMEM) {
			free(shtab);
			return -ENOMEM;
		}
	}

	size_t symtab = 0, dynsym = 0, debug_frame = 0, debugdata = 0;
	for (size_t i = 1; i < nsec; i++) {
		Elf64_Shdr sh;

		memcpy(&sh, shtab + i * eh->e_shentsize, sizeof(sh));
		const char *name = section_name(names, names_size, &sh);
		if (sh.sh_type == SHT_SYMTAB && !symtab)
			symtab = i;
		else if (sh.sh_type == SHT_DYNSYM && !dynsym)
			dynsym = i;
		else if (sh.sh_type == SHT_NOTE && !(sh.sh_flags & SHF_COMPRESSED) &&
		         ei->build_id[0] == '\0')
			notes_build_id(s, sh.sh_offset, sh.sh_size, sh.sh_addralign,
			               ei->build_id, sizeof(ei->build_id));
		else if ((strcmp(name, ".debug_frame") == 0 || strcmp(name, ".zdebug_frame") == 0) &&
		         !debug_frame)
			debug_frame = i;
		else if (strcmp(name, ".gnu_debugdata") == 0 && !debugdata)
			debugdata = i;
	}
	r = 0;
	ei->symsrc = "";
	if (symtab) {
		r = load_symbols(s, shtab, eh->e_shentsize, nsec, symtab, names, names_size, ei);
		if (ei->nsyms)
			ei->symsrc = ".symtab";
	}
	if (!inner && r == 0 && ei->nsyms == 0) {
		if (dynsym) {
			r = load_symbols(s, shtab, eh->e_shentsize, nsec, dynsym, names, names_size, ei);
			if (ei->nsyms)
				ei->symsrc = ".dynsym";
		}
		if (r == 0 && debugdata) {
			Elf64_Shdr sh;
			size_t before = ei->nsyms;
			memcpy(&sh, shtab + debugdata * eh->e_shentsize, sizeof(sh));
			r = read_debugdata(s, &sh, ei);
			if (ei->nsyms > before)
				ei->symsrc = before ? ".dynsym+.gnu_debugdata" : ".gnu_debugdata";
		}
	}
	if (!inner && r == 0 && debug_frame) {
		Elf64_Shdr sh;
		memcpy(&sh, shtab + debug_frame * eh->e_shentsize, sizeof(sh));
		r = read_debug_frame(s, &sh, section_name(names, names_size, &sh), ei);
	}
	free(names);
	free(shtab);
	return r;
}

/* Whether EI defines one of the C library's sigaction entry points. */
static bool defines_sigaction(const struct elfinfo *ei)
{
	static const char *const names[] = { "sigaction", "__sigaction", "__libc_sigaction" };

	for (size_t i = 0; i < ei->nsyms; i++)
		for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
			if (ei->syms[i].name < ei->strtab_size &&
			    strcmp(ei->strtab + ei->syms[i].name, names[k]) == 0)
				return true;
	return false;
}

/* The signal return trampoline of a C library (glibc's and musl's
 * __restore_rt, a local symbol that stripped libraries lack): the
 * instructions libunwind also tells a signal frame by, looked for in the
 * executable segments of the module that defines sigaction.  Its address
 * is the return address of every handler's frame (snapshot.h).  Once per
 * module: all of libc.so.6 is read in 1.35 ms with the search (best of 8
 * on a busy machine), its 1.6 MiB of code searched only because it
 * defines sigaction. */
static int find_sigreturn(const struct src *s, struct elfinfo *ei)
{
	static const unsigned char code[] = { 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05 };

	if (!defines_sigaction(ei))
		return 0;
	for (size_t i = 0; i < ei->nloads && !ei->sigreturn_vaddr; i++) {
		const struct elfinfo_load *l = &ei->loads[i];
		char *text;

		if (!(l->flags & PF_X) || l->filesz < sizeof(code) ||
		    l->filesz > ELFINFO_MAX_TEXT)
			continue;
		int r = src_read_alloc(s, l->offset, l->filesz, &text);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			continue;
		const char *hit = memmem(text, l->filesz, code, sizeof(code));
		if (hit)
			ei->sigreturn_vaddr = l->vaddr + (uint64_t)(hit - text);
		free(text);
	}
	return 0;
}

static int read_image(const struct src *s, struct elfinfo *ei, bool inner)
{
	Elf64_Ehdr eh;

	memset(ei, 0, sizeof(*ei));
	int r = src_read(s, 0, &eh, sizeof(eh));
	if (r < 0)
		return r;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN))
		return -ENOEXEC;
	ei->type = eh.e_type;
	r = inner ? 0 : read_phdrs(s, &eh, ei);
	if (r == 0)
		r = read_shdrs(s, &eh, ei, inner);
	if (r == 0 && !inner)
		r = find_sigreturn(s, ei);
	if (r < 0)
		elfinfo_free(ei);
	return r;
}

/* Reads the regular file FD, whole or (SYMBOLS_ONLY) its symbols. */
static int read_fd(int fd, struct elfinfo *ei, bool symbols_only)
{
	struct stat st;

	memset(ei, 0, sizeof(*ei));
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	struct src s = { .fd = fd, .size = (uint64_t)st.st_size };
	return read_image(&s, ei, symbols_only);
}

int elfinfo_read_fd(int fd, struct elfinfo *ei)
{
	return read_fd(fd, ei, false);
}

int elfinfo_read_symbols_fd(int fd, struct elfinfo *ei)
{
	return read_fd(fd, ei, true);
}

int elfinfo_read_mem(const void *image, size_t size, struct elfinfo *ei)
{
	struct src s = { .fd = -1, .mem = image, .size = size };

	return read_image(&s, ei, false);
}

void elfinfo_free(struct elfinfo *ei)
{
	free(ei->eh_data);
	free(ei->loads);
	free(ei->syms);
	free(ei->strtab);
	debugframe_free(&ei->dbg);
	memset(ei, 0, sizeof(*ei));
}

bool elfinfo_vaddr(const struct elfinfo *ei, uint64_t file_offset, uint64_t *vaddr)
{
	/* The usual case: the offset is inside a segment's file image. */
	for (size_t i = 0; i < ei->nloads; i++) {
		const struct elfinfo_load *l = &ei->loads[i];
		if (file_offset >= l->offset && file_offset - l->offset < l->filesz) {
			*vaddr = l->vaddr + (file_offset - l->offset);
			return true;
		}
	}
	/* The mapping starts at the page below p_offset: take the segment
	 * whose page-aligned file range covers the offset. */
	for (size_t i = 0; i < ei->nloads; i++) {
		const struct elfinfo_load *l = &ei->loads[i];
		uint64_t a = l->align & (l->align - 1) ? 1 : l->align;
		uint64_t lo = l->offset & ~(a - 1);
		if (file_offset >= lo && file_offset - lo < (l->offset - lo) + l->memsz) {
			*vaddr = l->vaddr + (file_offset - l->offset);  /* modulo 2^64 */
			return true;
		}
	}
	return false;
}

bool elfinfo_eh_word(const struct elfinfo *ei, uint64_t vaddr, uint64_t *word)
{
	if (!ei->eh_data || vaddr < ei->eh_data_vaddr || ei->eh_data_size < 8 ||
	    vaddr - ei->eh_data_vaddr > ei->eh_data_size - 8)
		return false;
	memcpy(word, ei->eh_data + (vaddr - ei->eh_data_vaddr), 8);
	return true;
}

const char *elfinfo_symbol(const struct elfinfo *ei, uint64_t vaddr, uint64_t *start)
{
	size_t lo = 0, hi = ei->nsyms;

	/* hi = number of symbols with value <= vaddr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ei->syms[mid].value <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Walk back from the nearest start: a wider symbol farther back may
	 * contain VADDR when the nearest does not (nested functions).  Among
	 * containing symbols the nearest start wins, and at equal starts the
	 * sort put the preferred binding at the lowest index. */
	const struct elfinfo_sym *best = NULL;
	for (size_t k = hi; k > 0 && hi - k < 64; k--) {
		const struct elfinfo_sym *s = &ei->syms[k - 1];
		if (best && s->value < best->value)
			break;
		if (vaddr - s->value < s->size)
			best = s;
	}
	if (!best)
		return NULL;
	*start = best->value;
	return ei->strtab + best->name;
}

int elfinfo_dynsym_values(int fd, const char *const *names, size_t n, uint64_t *values)
{
	struct stat st;
	Elf64_Ehdr eh;

	for (size_t k = 0; k < n; k++)
		values[k] = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	struct src s = { .fd = fd, .size = (uint64_t)st.st_size };
	int r = src_read(&s, 0, &eh, sizeof(eh));
	if (r < 0)
		return r;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    eh.e_shnum == 0 || eh.e_shoff == 0)
		return -ENOEXEC;

	char *shtab, *symtab = NULL, *strtab = NULL;
	uint64_t symtab_size = 0, strtab_size = 0;
	struct elfinfo scratch;    /* read_section's note of a refused section */
	size_t nsec = eh.e_shnum;
	r = src_read_alloc(&s, eh.e_shoff, (uint64_t)nsec * sizeof(Elf64_Shdr), &shtab);
	if (r < 0)
		return r;
	memset(&scratch, 0, sizeof(scratch));
	for (size_t i = 1; i < nsec && !symtab; i++) {
		Elf64_Shdr sh, strsh;

		memcpy(&sh, shtab + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type != SHT_DYNSYM || sh.sh_entsize != sizeof(Elf64_Sym) ||
		    sh.sh_link == 0 || sh.sh_link >= nsec)
			continue;
		memcpy(&strsh, shtab + (size_t)sh.sh_link * sizeof(strsh), sizeof(strsh));
		if (strsh.sh_type != SHT_STRTAB)
			break;
		r = read_section(&s, &sh, ".dynsym", ELFINFO_MAX_SYMTAB, &scratch, &symtab,
		                 &symtab_size);
		if (r == 0)
			r = read_section(&s, &strsh, ".dynstr", ELFINFO_MAX_SYMTAB, &scratch,
			                 &strtab, &strtab_size);
		break;
	}
	free(shtab);
	if (r == 0 && symtab && strtab) {
		for (size_t i = 0; i < symtab_size / sizeof(Elf64_Sym); i++) {
			Elf64_Sym sym;

			memcpy(&sym, symtab + i * sizeof(sym), sizeof(sym));
			if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0 ||
			    sym.st_name >= strtab_size)
				continue;
			for (size_t k = 0; k < n; k++)
				if (!values[k] && strcmp(strtab + sym.st_name, names[k]) == 0)
					values[k] = sym.st_value;
		}
	}
	free(symtab);
	free(strtab);
	return r == -ENOMEM ? r : 0;
}
