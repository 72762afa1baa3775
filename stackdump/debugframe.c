/* debugframe: .debug_frame to .eh_frame form.  See debugframe.h.
 *
 * Every read is checked against the entry it belongs to: the section comes
 * from a file of the target, which may be corrupt or hostile.  An FDE that
 * libunwind must not run (cfi.h) is left out of the image and its table. */
#include "stackdump/debugframe.h"

#include "stackdump/cfi.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DW_EH_PE_pcrel_sdata8 0x1c     /* DW_EH_PE_pcrel | DW_EH_PE_sdata8 */

/* A growing output image bounded by max. */
struct buf {
	unsigned char *p;
	size_t n, cap, max;
	int err;
};

static void put(struct buf *b, const void *data, size_t len)
{
	if (b->err)
		return;
	if (len > b->max - b->n) {
		b->err = -E2BIG;
		return;
	}
	if (b->n + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + len)
			cap *= 2;
		if (cap > b->max)
			cap = b->max;
		unsigned char *p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, len);
	b->n += len;
}

static void put_u8(struct buf *b, uint8_t v)
{
	put(b, &v, 1);
}

static void put_u32(struct buf *b, uint32_t v)
{
	put(b, &v, 4);          /* x86-64: little-endian, like the file */
}

static void put_u64(struct buf *b, uint64_t v)
{
	put(b, &v, 8);
}

static uint32_t get_u32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Length of the LEB128 number at P (before END), 0 when it runs off. */
static size_t leb_len(const unsigned char *p, const unsigned char *end)
{
	for (size_t i = 0; i < 10 && p + i < end; i++)
		if (!(p[i] & 0x80))
			return i + 1;
	return 0;
}

/* One entry of the section: [body, end) after its 4-byte length. */
struct entry {
	size_t off;                  /* of its length field */
	const unsigned char *body, *end;
};

/* The entry at *OFF; false at the end of the section or at one that does
 * not fit in it.  64-bit DWARF entries are skipped over. */
static bool next_entry(const unsigned char *sec, size_t len, size_t *off, struct entry *e)
{
	while (*off <= len && len - *off >= 4) {
		uint32_t n = get_u32(sec + *off);

		if (n == 0)
			return false;
		if (n == 0xffffffff) {
			if (len - *off < 12)
				return false;
			uint64_t n64 = get_u64(sec + *off + 4);
			if (n64 > len - *off - 12)
				return false;
			*off += 12 + n64;
			continue;
		}
		if (n > len - *off - 4 || n < 4)
			return false;
		e->off = *off;
		e->body = sec + *off + 4;
		e->end = e->body + n;
		*off += 4 + (size_t)n;
		return true;
	}
	return false;
}

struct cie_map {
	size_t src, dst;
};

/* Rewrites the CIE in E (its id already checked); false when it is not one
 * we can use: unknown version, an augmentation, 32-bit addresses. */
static bool convert_cie(const struct entry *e, struct buf *b)
{
	const unsigned char *p = e->body + 4, *end = e->end;

	if (p >= end)
		return false;
	uint8_t version = *p++;
	if (version != 1 && version != 3 && version != 4)
		return false;
	if (p >= end || *p++ != '\0')       /* augmentation "" only */
		return false;
	if (version == 4) {
		if (end - p < 2 || p[0] != 8 || p[1] != 0)
			return false;
		p += 2;
	}
	const unsigned char *fields = p;    /* code_align, data_align, ra */
	for (int i = 0; i < 2; i++) {
		size_t n = leb_len(p, end);
		if (!n)
			return false;
		p += n;
	}
	if (version == 1) {
		if (p >= end)
			return false;
		p++;
	} else {
		size_t n = leb_len(p, end);
		if (!n)
			return false;
		p += n;
	}
	size_t nfields = (size_t)(p - fields), ninstr = (size_t)(end - p);
	/* id, version, "zR\0", fields, augmentation length 1, encoding */
	uint64_t size = 4 + 1 + 3 + nfields + 2 + ninstr;
	if (size > UINT32_MAX - 8)
		return false;
	put_u32(b, (uint32_t)size);
	put_u32(b, 0);
	put_u8(b, version == 1 ? 1 : 3);    /* v4's extra fields are dropped */
	put(b, "zR", 3);
	put(b, fields, nfields);
	put_u8(b, 1);
	put_u8(b, DW_EH_PE_pcrel_sdata8);
	put(b, p, ninstr);
	return true;
}

static const struct cie_map *find_cie(const struct cie_map *v, size_t n, size_t src)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].src == src)
			return &v[mid];
		if (v[mid].src < src)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

struct table_entry {
	int32_t start, fde;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct table_entry *x = a, *y = b;

	return (x->start > y->start) - (x->start < y->start);
}

/* Whether libunwind may run the FDE just written at offset FDE (cfi.h);
 * if not, it is taken back out of the image.  The check is made on the
 * rewritten form, CIE included, because that is what libunwind reads. */
static bool fde_runnable(struct buf *b, size_t fde)
{
	if (cfi_check_fde(b->p, b->n, fde, NULL) == 0)
		return true;
	b->n = fde;
	return false;
}

int debugframe_convert(const unsigned char *sec, size_t len, uint64_t vaddr_lo,
                       uint64_t vaddr_hi, size_t max_size, struct debugframe *out)
{
	struct buf b = { .max = max_size > INT32_MAX ? INT32_MAX : max_size };
	struct cie_map *cies = NULL;
	struct table_entry *tab = NULL;
	size_t ncies = 0, capcies = 0, ntab = 0, captab = 0, off = 0;
	struct entry e;
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (vaddr_hi <= vaddr_lo || vaddr_hi - vaddr_lo > INT32_MAX)
		return 0;

	/* Pass 1: the CIEs, in section order (so the map is sorted). */
	while (next_entry(sec, len, &off, &e)) {
		if (get_u32(e.body) != 0xffffffff)
			continue;
		if (ncies == capcies) {
			size_t cap = capcies ? capcies * 2 : 16;
			struct cie_map *v = realloc(cies, cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				goto out;
			}
			cies = v;
			capcies = cap;
		}
		size_t dst = b.n;
		if (convert_cie(&e, &b))
			cies[ncies++] = (struct cie_map){ e.off, dst };
		if (b.err) {
			r = b.err;
			goto out;
		}
	}

	/* Pass 2: the FDEs, each pointing back to its CIE's copy. */
	off = 0;
	while (next_entry(sec, len, &off, &e)) {
		uint32_t cie = get_u32(e.body);
		if (cie == 0xffffffff || e.end - e.body < 4 + 16)
			continue;
		const struct cie_map *c = find_cie(cies, ncies, cie);
		uint64_t start = get_u64(e.body + 4), range = get_u64(e.body + 12);
		if (!c || start < vaddr_lo || start >= vaddr_hi || range == 0 ||
		    range > vaddr_hi - start)
			continue;
		const unsigned char *instr = e.body + 20;
		size_t ninstr = (size_t)(e.end - instr);
		if (ninstr > UINT32_MAX - 64) {
			continue;
		}
		if (ntab == captab) {
			size_t cap = captab ? captab * 2 : 64;
			struct table_entry *v = realloc(tab, cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				goto out;
			}
			tab = v;
			captab = cap;
		}
		size_t fde = b.n;
		put_u32(&b, (uint32_t)(4 + 8 + 8 + 1 + ninstr));
		put_u32(&b, (uint32_t)(fde + 4 - c->dst));   /* back to the CIE */
		/* pc-relative: the field is at image offset fde + 8, seen at
		 * bias + vaddr_lo + fde + 8 + DEBUGFRAME_SHADOW; the code at
		 * bias + start. */
		put_u64(&b, start - (vaddr_lo + fde + 8) - DEBUGFRAME_SHADOW);
		put_u64(&b, range);
		put_u8(&b, 0);                                /* no augmentation data */
		put(&b, instr, ninstr);
		if (b.err) {
			r = b.err;
			goto out;
		}
		if (!fde_runnable(&b, fde))
			continue;
		tab[ntab++] = (struct table_entry){ (int32_t)(start - vaddr_lo), (int32_t)fde };
	}
	if (ntab == 0)
		goto out;

	qsort(tab, ntab, sizeof(*tab), cmp_entry);
	static const unsigned char zero[4];
	put(&b, zero, (4 - b.n % 4) % 4);   /* the table's int32s, aligned */
	size_t table_off = b.n;
	put(&b, tab, ntab * sizeof(*tab));
	/* libunwind reads whole aligned words: the last may reach past. */
	static const unsigned char pad[16];
	put(&b, pad, 8 + (8 - b.n % 8) % 8);
	if (b.err) {
		r = b.err;
		goto out;
	}
	out->data = b.p;
	out->size = b.n;
	out->table_off = table_off;
	out->count = ntab;
	b.p = NULL;
out:
	free(b.p);
	free(cies);
	free(tab);
	return r;
}

void debugframe_free(struct debugframe *df)
{
	free(df->data);
	memset(df, 0, sizeof(*df));
}
