/* cfi: checks an FDE and its CIE before libunwind runs them.  See cfi.h.
 *
 * What libunwind 1.6.2 does, and so what is checked here:
 *   - It reads every entry, instruction and operand without bounds: all
 *     must lie inside their entry (or expression block), and a LEB128 of
 *     more than 10 bytes is refused.
 *   - Its CIE parser keeps the first four letters of the augmentation,
 *     reads the data of 'L', 'R', 'P' and 'S', stops at any other letter
 *     when there is a 'z' (else fails), and starts the instructions where
 *     it stopped, not where the 'z' length says: both must agree.
 *   - It indexes its 17 register locations with the return address column
 *     and with DW_CFA_register's second register unchecked.
 *   - It treats DW_CFA_val_offset, DW_CFA_val_offset_sf and every opcode
 *     it does not know as a one-byte no-op: their operands would run as
 *     instructions.  They are refused.
 *   - Its expression interpreter has no step limit, and divides signed
 *     without the INT64_MIN / -1 check: DW_OP_div and DW_OP_mod are
 *     refused, and a DW_OP_skip or DW_OP_bra must jump forward onto the
 *     start of an operation of its block (or its end), so that every
 *     operation it can run is one decoded here and no loop is possible.
 *   - DW_CFA_remember_state allocates: the nesting is capped.
 * Operations and opcodes libunwind refuses cleanly (DW_OP_piece,
 * DW_OP_call_frame_cfa, DW_CFA_GNU_window_save...) are accepted when they
 * are well formed: refusing them would change nothing.
 */
#include "stackdump/cfi.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DW_EH_PE_omit    0xff
#define DW_EH_PE_aligned 0x50

/* Far more than compilers nest (one or two), few enough to cost nothing. */
#define MAX_REMEMBER 32
/* Pending forward branches of one expression (glibc's PLT uses none). */
#define MAX_BRANCHES 16

/* Bytes being decoded: [p, end) of an entry or an expression block. */
struct walk {
	const unsigned char *p, *end;
	char *why;
};

__attribute__((format(printf, 2, 3)))
static bool fail(struct walk *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->why, CFI_WHY_SIZE, fmt, ap);
	va_end(ap);
	return false;
}

static bool skip(struct walk *w, size_t n)
{
	if (n > (size_t)(w->end - w->p))
		return fail(w, "truncated");
	w->p += n;
	return true;
}

static bool get_u8(struct walk *w, uint8_t *v)
{
	if (w->p >= w->end)
		return fail(w, "truncated");
	*v = *w->p++;
	return true;
}

/* An unsigned LEB128; signed ones are only skipped (same length). */
static bool get_uleb(struct walk *w, uint64_t *v)
{
	uint64_t val = 0;

	for (unsigned i = 0; i < 10; i++) {
		if (w->p >= w->end)
			return fail(w, "truncated");
		uint8_t b = *w->p++;
		val |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = val;
			return true;
		}
	}
	return fail(w, "LEB128 longer than 10 bytes");
}

static bool skip_leb(struct walk *w)
{
	uint64_t v = 0;

	return get_uleb(w, &v);
}

/* An encoding dwarf_read_encoded_pointer reads (omit, aligned and
 * textrel it does not, or not the way DWARF says). */
static bool encoding_ok(uint8_t enc)
{
	uint8_t app = enc & 0x70;

	if (enc == DW_EH_PE_omit)
		return true;
	if (app != 0x00 && app != 0x10 && app != 0x30 && app != 0x40)
		return false;
	switch (enc & 0x0f) {
	case 0x00: case 0x01: case 0x02: case 0x03: case 0x04:
	case 0x09: case 0x0a: case 0x0b: case 0x0c:
		return true;
	default:
		return false;
	}
}

/* Skips a pointer in encoding ENC, already checked with encoding_ok. */
static bool skip_pointer(struct walk *w, uint8_t enc)
{
	if (enc == DW_EH_PE_omit)
		return true;
	switch (enc & 0x07) {
	case 0x01:
		return skip_leb(w);
	case 0x02:
		return skip(w, 2);
	case 0x03:
		return skip(w, 4);
	default:                            /* absptr, udata8, sdata8 */
		return skip(w, 8);
	}
}

static bool get_encoding(struct walk *w, uint8_t *enc)
{
	if (!get_u8(w, enc))
		return false;
	if (!encoding_ok(*enc))
		return fail(w, "pointer encoding 0x%02x", *enc);
	return true;
}

/* ---- DWARF expressions ---- */

/* How each DW_OP's operands are laid out; 0: unknown, refused. */
enum {
	OP_NONE = 1, OP_1, OP_2, OP_4, OP_8, OP_LEB, OP_LEB2, OP_BLOCK,
	OP_4_LEB, OP_1_LEB, OP_TYPED_BLOCK, OP_ENCODED, OP_BRANCH, OP_DIV, OP_MOD,
};

static const uint8_t op_form[256] = {
	[0x03] = OP_8,                          /* addr */
	[0x06] = OP_NONE,                       /* deref */
	[0x08 ... 0x09] = OP_1,                 /* const1u, const1s */
	[0x0a ... 0x0b] = OP_2,
	[0x0c ... 0x0d] = OP_4,
	[0x0e ... 0x0f] = OP_8,
	[0x10 ... 0x11] = OP_LEB,               /* constu, consts */
	[0x12 ... 0x14] = OP_NONE,              /* dup, drop, over */
	[0x15] = OP_1,                          /* pick */
	[0x16 ... 0x1a] = OP_NONE,              /* swap rot xderef abs and */
	[0x1b] = OP_DIV,
	[0x1c] = OP_NONE,                       /* minus */
	[0x1d] = OP_MOD,
	[0x1e ... 0x22] = OP_NONE,              /* mul neg not or plus */
	[0x23] = OP_LEB,                        /* plus_uconst */
	[0x24 ... 0x27] = OP_NONE,              /* shl shr shra xor */
	[0x28] = OP_BRANCH,                     /* bra */
	[0x29 ... 0x2e] = OP_NONE,              /* eq ge gt le lt ne */
	[0x2f] = OP_BRANCH,                     /* skip */
	[0x30 ... 0x6f] = OP_NONE,              /* lit0-31, reg0-31 */
	[0x70 ... 0x8f] = OP_LEB,               /* breg0-31 */
	[0x90 ... 0x91] = OP_LEB,               /* regx, fbreg */
	[0x92] = OP_LEB2,                       /* bregx */
	[0x93] = OP_LEB,                        /* piece */
	[0x94 ... 0x95] = OP_1,                 /* deref_size, xderef_size */
	[0x96 ... 0x97] = OP_NONE,              /* nop, push_object_address */
	[0x98] = OP_2,                          /* call2 */
	[0x99 ... 0x9a] = OP_4,                 /* call4, call_ref (32-bit) */
	[0x9b ... 0x9c] = OP_NONE,              /* form_tls_address, call_frame_cfa */
	[0x9d] = OP_LEB2,                       /* bit_piece */
	[0x9e] = OP_BLOCK,                      /* implicit_value */
	[0x9f] = OP_NONE,                       /* stack_value */
	[0xa0] = OP_4_LEB,                      /* implicit_pointer */
	[0xa1 ... 0xa2] = OP_LEB,               /* addrx, constx */
	[0xa3] = OP_BLOCK,                      /* entry_value */
	[0xa4] = OP_TYPED_BLOCK,                /* const_type */
	[0xa5] = OP_LEB2,                       /* regval_type */
	[0xa6 ... 0xa7] = OP_1_LEB,             /* deref_type, xderef_type */
	[0xa8 ... 0xa9] = OP_LEB,               /* convert, reinterpret */
	[0xe0] = OP_NONE,                       /* GNU_push_tls_address */
	[0xf0] = OP_NONE,                       /* GNU_uninit */
	[0xf1] = OP_ENCODED,                    /* GNU_encoded_addr */
	[0xf2] = OP_4_LEB,                      /* GNU_implicit_pointer */
	[0xf3] = OP_BLOCK,                      /* GNU_entry_value */
	[0xf4] = OP_TYPED_BLOCK,                /* GNU_const_type */
	[0xf5] = OP_LEB2,                       /* GNU_regval_type */
	[0xf6] = OP_1_LEB,                      /* GNU_deref_type */
	[0xf7] = OP_LEB,                        /* GNU_convert */
	[0xf9] = OP_LEB,                        /* GNU_reinterpret */
	[0xfa] = OP_4,                          /* GNU_parameter_ref */
	[0xfb ... 0xfc] = OP_LEB,               /* GNU_addr_index, GNU_const_index */
	[0xfd] = OP_4,                          /* GNU_variable_value */
};

/* Where the pending forward branches of an expression go. */
struct branches {
	const unsigned char *to[MAX_BRANCHES];
	size_t n;
};

/* At an operation boundary (or the end): the branches that land here are
 * done; one that should have landed before jumped into an operand. */
static bool land(struct walk *w, struct branches *b)
{
	size_t k = 0;

	for (size_t i = 0; i < b->n; i++) {
		if (b->to[i] < w->p)
			return fail(w, "DW_OP branch into an operand");
		if (b->to[i] != w->p)
			b->to[k++] = b->to[i];
	}
	b->n = k;
	return true;
}

static bool branch(struct walk *w, uint8_t op, struct branches *b)
{
	const char *name = op == 0x2f ? "DW_OP_skip" : "DW_OP_bra";
	int16_t off;

	if (!skip(w, 2))
		return false;
	memcpy(&off, w->p - 2, 2);          /* x86-64: little-endian */
	if (off < 0)
		return fail(w, "backward %s", name);
	if (off > w->end - w->p)
		return fail(w, "%s past the expression", name);
	if (b->n == MAX_BRANCHES)
		return fail(w, "too many DW_OP branches");
	b->to[b->n++] = w->p + off;
	return true;
}

static bool skip_block(struct walk *w)
{
	uint64_t len = 0;

	return get_uleb(w, &len) && skip(w, len > SIZE_MAX ? SIZE_MAX : (size_t)len);
}

/* The operands of OP, whose form is FORM. */
static bool check_operands(struct walk *w, uint8_t op, uint8_t form, struct branches *b)
{
	uint8_t n = 0;

	switch (form) {
	case OP_NONE:           return true;
	case OP_1:              return skip(w, 1);
	case OP_2:              return skip(w, 2);
	case OP_4:              return skip(w, 4);
	case OP_8:              return skip(w, 8);
	case OP_LEB:            return skip_leb(w);
	case OP_LEB2:           return skip_leb(w) && skip_leb(w);
	case OP_BLOCK:          return skip_block(w);
	case OP_4_LEB:          return skip(w, 4) && skip_leb(w);
	case OP_1_LEB:          return skip(w, 1) && skip_leb(w);
	case OP_TYPED_BLOCK:    return skip_leb(w) && get_u8(w, &n) && skip(w, n);
	case OP_ENCODED:        return get_encoding(w, &n) && skip_pointer(w, n);
	case OP_BRANCH:         return branch(w, op, b);
	case OP_DIV:            return fail(w, "DW_OP_div");
	case OP_MOD:            return fail(w, "DW_OP_mod");
	default:                return fail(w, "unknown DW_OP 0x%02x", op);
	}
}

/* The LEN-byte expression block at W's position, which it skips. */
static bool check_expr(struct walk *w, uint64_t len)
{
	struct walk e = { .p = w->p, .why = w->why };
	struct branches b = { .n = 0 };

	if (len > (uint64_t)(w->end - w->p))
		return fail(w, "truncated");
	e.end = w->p + len;
	while (e.p < e.end) {
		if (!land(&e, &b))
			return false;
		uint8_t op = *e.p++;
		if (!check_operands(&e, op, op_form[op], &b))
			return false;
	}
	w->p = e.end;
	return land(&e, &b);
}

static bool skip_expr(struct walk *w)
{
	uint64_t len = 0;

	return get_uleb(w, &len) && check_expr(w, len);
}

/* ---- CFA instructions ---- */

/* How each DW_CFA opcode's operands are laid out; 0: unknown, refused. */
enum {
	CFA_NONE = 1, CFA_1, CFA_2, CFA_4, CFA_LEB, CFA_LEB2, CFA_SET_LOC,
	CFA_REGISTER, CFA_EXPR, CFA_REG_EXPR, CFA_REMEMBER, CFA_RESTORE,
	CFA_VAL_OFFSET,
};

static const uint8_t cfa_form[64] = {
	[0x00] = CFA_NONE,                      /* nop */
	[0x01] = CFA_SET_LOC,
	[0x02] = CFA_1,                         /* advance_loc1 */
	[0x03] = CFA_2,
	[0x04] = CFA_4,
	[0x05] = CFA_LEB2,                      /* offset_extended */
	[0x06 ... 0x08] = CFA_LEB,              /* restore_extended undefined same_value */
	[0x09] = CFA_REGISTER,
	[0x0a] = CFA_REMEMBER,
	[0x0b] = CFA_RESTORE,
	[0x0c] = CFA_LEB2,                      /* def_cfa */
	[0x0d ... 0x0e] = CFA_LEB,              /* def_cfa_register, def_cfa_offset */
	[0x0f] = CFA_EXPR,                      /* def_cfa_expression */
	[0x10] = CFA_REG_EXPR,                  /* expression */
	[0x11 ... 0x12] = CFA_LEB2,             /* offset_extended_sf, def_cfa_sf */
	[0x13] = CFA_LEB,                       /* def_cfa_offset_sf */
	[0x14 ... 0x15] = CFA_VAL_OFFSET,
	[0x16] = CFA_REG_EXPR,                  /* val_expression */
	[0x2d] = CFA_NONE,                      /* GNU_window_save */
	[0x2e] = CFA_LEB,                       /* GNU_args_size */
	[0x2f] = CFA_LEB2,                      /* GNU_negative_offset_extended */
};

struct cie {
	const unsigned char *instr, *end;   /* its initial instructions */
	uint8_t fde_enc, lsda_enc;
	bool sized;                         /* augmentation "z..." */
	bool abi_marker;                    /* augmentation 'S' */
};

static bool check_register(struct walk *w)
{
	uint64_t reg = 0;

	if (!skip_leb(w) || !get_uleb(w, &reg))
		return false;
	if (reg >= CFI_NUM_REGS)
		return fail(w, "DW_CFA_register to register %llu", (unsigned long long)reg);
	return true;
}

static bool check_insn(struct walk *w, uint8_t op, const struct cie *c, int *depth)
{
	switch (op < 64 ? cfa_form[op] : 0) {
	case CFA_NONE:          return true;
	case CFA_1:             return skip(w, 1);
	case CFA_2:             return skip(w, 2);
	case CFA_4:             return skip(w, 4);
	case CFA_LEB:           return skip_leb(w);
	case CFA_LEB2:          return skip_leb(w) && skip_leb(w);
	case CFA_SET_LOC:       return skip_pointer(w, c->fde_enc);
	case CFA_REGISTER:      return check_register(w);
	case CFA_EXPR:          return skip_expr(w);
	case CFA_REG_EXPR:      return skip_leb(w) && skip_expr(w);
	case CFA_REMEMBER:
		if (++*depth > MAX_REMEMBER)
			return fail(w, "DW_CFA_remember_state nested too deep");
		return true;
	case CFA_RESTORE:
		*depth -= *depth > 0;
		return true;
	case CFA_VAL_OFFSET:
		return fail(w, "DW_CFA_val_offset%s", op == 0x15 ? "_sf" : "");
	default:
		return fail(w, "unknown DW_CFA 0x%02x", op);
	}
}

/* The instructions in [P, END): a CIE's initial ones or an FDE's. */
static bool check_insns(const unsigned char *p, const unsigned char *end,
                        const struct cie *c, char *why)
{
	struct walk w = { .p = p, .end = end, .why = why };
	int depth = 0;

	while (w.p < w.end) {
		uint8_t op = *w.p++;

		if ((op & 0xc0) == 0x80) {          /* DW_CFA_offset: reg in op */
			if (!skip_leb(&w))
				return false;
		} else if (!(op & 0xc0) && !check_insn(&w, op, c, &depth)) {
			return false;
		}                                   /* advance_loc, restore: none */
	}
	return true;
}

/* ---- entries ---- */

/* The entry at OFF: its body [*BODY, *END), after the 4-byte length. */
static bool get_entry(const unsigned char *buf, size_t size, size_t off,
                      struct walk *w)
{
	uint32_t len;

	if (off > size || size - off < 4)
		return fail(w, "entry out of range");
	memcpy(&len, buf + off, 4);
	if (len == 0xffffffff)
		return fail(w, "64-bit DWARF entry");
	if (len < 4 || len > size - off - 4)
		return fail(w, "truncated");
	w->p = buf + off + 4;
	w->end = w->p + len;
	return true;
}

/* The augmentation string: libunwind keeps its first four letters. */
static bool get_augmentation(struct walk *w, char aug[5])
{
	size_t n = 0;

	memset(aug, 0, 5);
	for (;;) {
		uint8_t ch = 0;
		if (!get_u8(w, &ch))
			return false;
		if (!ch)
			return true;
		if (n < 4)
			aug[n++] = (char)ch;
	}
}

/* The augmentation data, letter by letter as libunwind reads it. */
static bool parse_aug_data(struct walk *w, const char *aug, struct cie *c)
{
	for (size_t i = c->sized; i < 4 && aug[i]; i++) {
		uint8_t enc = 0;

		switch (aug[i]) {
		case 'L':
			if (!get_encoding(w, &c->lsda_enc))
				return false;
			break;
		case 'R':
			if (!get_encoding(w, &c->fde_enc))
				return false;
			if (c->fde_enc == DW_EH_PE_omit)
				return fail(w, "FDE encoding omit");
			break;
		case 'P':
			if (!get_encoding(w, &enc) || !skip_pointer(w, enc))
				return false;
			break;
		case 'S':
			c->abi_marker = true;
			break;
		default:                            /* 'B' and the unknown */
			if (!c->sized)
				return fail(w, "augmentation \"%.4s\"", aug);
			return true;                /* libunwind stops here */
		}
	}
	return true;
}

/* The fields of the CIE in W after its id, up to its instructions. */
static bool parse_cie(struct walk *w, struct cie *c)
{
	uint8_t version = 0, ra8 = 0;
	uint64_t ra = 0, aug_len = 0;
	char aug[5];

	memset(c, 0, sizeof(*c));
	c->fde_enc = 0x04;                  /* udata8, libunwind's default */
	c->lsda_enc = DW_EH_PE_omit;
	c->end = w->end;
	if (!get_u8(w, &version))
		return false;
	if (version != 1 && version != 3)   /* libunwind 1.6 reads no other */
		return fail(w, "CIE version %u", version);
	if (!get_augmentation(w, aug) || !skip_leb(w) || !skip_leb(w))
		return false;
	if (version == 1) {
		if (!get_u8(w, &ra8))
			return false;
		ra = ra8;
	} else if (!get_uleb(w, &ra)) {
		return false;
	}
	if (ra >= CFI_NUM_REGS)
		return fail(w, "return address register %llu", (unsigned long long)ra);
	c->sized = aug[0] == 'z';
	if (c->sized && !get_uleb(w, &aug_len))
		return false;
	const unsigned char *data = w->p;
	if (!parse_aug_data(w, aug, c))
		return false;
	if (c->sized && (uint64_t)(w->p - data) != aug_len)
		return fail(w, "augmentation data size");
	c->instr = w->p;
	return true;
}

/* The CIE the FDE body in W points to. */
static bool find_cie(const unsigned char *buf, size_t size, struct walk *w, struct cie *c)
{
	uint32_t ptr;
	struct walk cw = { .why = w->why };

	memcpy(&ptr, w->p, 4);
	if (ptr == 0)
		return fail(w, "a CIE, not an FDE");
	int64_t cie = (int64_t)(w->p - buf) - (int32_t)ptr;
	w->p += 4;
	if (cie < 0 || (uint64_t)cie >= size)
		return fail(w, "CIE pointer out of range");
	if (!get_entry(buf, size, (size_t)cie, &cw))
		return false;
	uint32_t id;
	memcpy(&id, cw.p, 4);
	cw.p += 4;
	if (id != 0)
		return fail(w, "CIE pointer to an FDE");
	return parse_cie(&cw, c);
}

/* The FDE's fields after its CIE pointer; *INSTR: where its instructions
 * start (libunwind skips to the end of the augmentation data). */
static bool parse_fde(struct walk *w, const struct cie *c, const unsigned char **instr)
{
	const unsigned char *aug_end = NULL;
	uint64_t aug_len = 0;

	if (!skip_pointer(w, c->fde_enc) || !skip_pointer(w, c->fde_enc & 0x0f))
		return false;
	if (c->sized) {
		if (!get_uleb(w, &aug_len))
			return false;
		if (aug_len > (uint64_t)(w->end - w->p))
			return fail(w, "truncated");
		aug_end = w->p + aug_len;
	}
	if (!skip_pointer(w, c->lsda_enc) || (c->abi_marker && !skip(w, 4)))
		return false;
	*instr = aug_end ? aug_end : w->p;
	return true;
}

int cfi_check_fde(const unsigned char *buf, size_t size, size_t off,
                  char why[CFI_WHY_SIZE])
{
	char scratch[CFI_WHY_SIZE];
	struct walk w = { .why = why ? why : scratch };
	struct cie c;
	const unsigned char *instr = NULL;

	w.why[0] = '\0';
	if (!get_entry(buf, size, off, &w) || !find_cie(buf, size, &w, &c) ||
	    !parse_fde(&w, &c, &instr) ||
	    !check_insns(c.instr, c.end, &c, w.why) ||
	    !check_insns(instr, w.end, &c, w.why))
		return -EINVAL;
	return 0;
}
