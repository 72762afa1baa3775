/* cfi: the FDE validator, on hand-assembled CIEs and FDEs (the rules real
 * binaries use, and each way hostile CFI once crashed or hung libunwind),
 * then on every FDE of the real libc.so.6 and of this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include "stackdump/cfi.h"
#include "stackdump/debugframe.h"
#include "stackdump/elfinfo.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"

/* ---- an .eh_frame image, assembled ---- */

struct image {
	unsigned char b[512];
	size_t n;
};

static void put(struct image *m, const void *p, size_t len)
{
	assert_true(len <= sizeof(m->b) - m->n);
	memcpy(m->b + m->n, p, len);
	m->n += len;
}

static void put_u32(struct image *m, uint32_t v)
{
	put(m, &v, 4);
}

/* Rewrites the length field at OFF to cover up to the end of the image. */
static void close_entry(struct image *m, size_t off)
{
	uint32_t len = (uint32_t)(m->n - off - 4);

	memcpy(m->b + off, &len, 4);
}

/* A CIE as gcc writes it: version 1, augmentation AUG ("zR" or "zRS"),
 * code_align 1, data_align -8, return address r16, FDE pointers
 * pcrel|sdata4, then INSNS.  Returns its offset. */
static size_t put_cie(struct image *m, const char *aug, const void *insns, size_t n)
{
	static const unsigned char fields[] = { 0x01, 0x78, 0x10, 0x01, 0x1b };
	size_t off = m->n;

	put_u32(m, 0);
	put_u32(m, 0);                      /* CIE id */
	put(m, "\1", 1);
	put(m, aug, strlen(aug) + 1);
	put(m, fields, sizeof(fields));
	put(m, insns, n);
	close_entry(m, off);
	return off;
}

/* The usual one: CFA = rsp + 8, return address at CFA - 8. */
static size_t put_plain_cie(struct image *m)
{
	static const unsigned char insns[] = { 0x0c, 0x07, 0x08, 0x90, 0x01 };

	return put_cie(m, "zR", insns, sizeof(insns));
}

/* An FDE of 16 bytes of code with INSNS, pointing to the CIE at CIE. */
static size_t put_fde(struct image *m, size_t cie, const void *insns, size_t n)
{
	size_t off = m->n;

	put_u32(m, 0);
	put_u32(m, (uint32_t)(off + 4 - cie));
	put_u32(m, 0x1000);                 /* pc_begin, pc-relative */
	put_u32(m, 16);                     /* pc_range */
	put(m, "\0", 1);                    /* no augmentation data */
	put(m, insns, n);
	close_entry(m, off);
	return off;
}

/* Checks one FDE with INSNS behind the plain CIE: 0 or -EINVAL, and the
 * reason in WHY. */
static int check(const void *insns, size_t n, char why[CFI_WHY_SIZE])
{
	struct image m = { .n = 0 };
	size_t cie = put_plain_cie(&m);
	size_t fde = put_fde(&m, cie, insns, n);

	return cfi_check_fde(m.b, m.n, fde, why);
}

#define ACCEPT(insns) do { \
	char why_[CFI_WHY_SIZE]; \
	int r_ = check(insns, sizeof(insns), why_); \
	if (r_ != 0) \
		fail_msg("rejected: %s", why_); \
} while (0)

#define REJECT(insns, reason) do { \
	char why_[CFI_WHY_SIZE]; \
	assert_int_equal(check(insns, sizeof(insns), why_), -EINVAL); \
	assert_string_equal(why_, reason); \
} while (0)

/* ---- accepted ---- */

static void test_plain(void **state)
{
	(void)state;
	/* push rbp; mov rsp, rbp; ... leave: the rules of every -O0 frame. */
	static const unsigned char insns[] = {
		0x41, 0x0e, 0x10, 0x86, 0x02,       /* advance 1, cfa+16, rbp at cfa-16 */
		0x43, 0x0d, 0x06,                   /* advance 3, cfa = rbp + 16 */
		0x4b, 0x0c, 0x07, 0x08,             /* advance 11, cfa = rsp + 8 */
		0x0a, 0x0b,                         /* remember, restore */
		0x2e, 0x00, 0x00, 0x00,             /* GNU_args_size 0, nops */
	};

	ACCEPT(insns);
}

static void test_glibc_plt(void **state)
{
	(void)state;
	/* glibc's .plt FDE: the CFA of a lazy binding stub depends on where
	 * in its 16-byte slot rip is. */
	static const unsigned char insns[] = {
		0x0e, 0x10, 0x46, 0x0e, 0x18, 0x4a,
		0x0f, 0x0b,                         /* def_cfa_expression, 11 bytes */
		0x77, 0x08,                         /* breg7 (rsp) 8 */
		0x80, 0x00,                         /* breg16 (rip) 0 */
		0x3f, 0x1a,                         /* lit15, and */
		0x3b, 0x2a,                         /* lit11, ge */
		0x33, 0x24,                         /* lit3, shl */
		0x22,                               /* plus */
	};

	ACCEPT(insns);
}

static void test_glibc_restore_rt(void **state)
{
	(void)state;
	/* __restore_rt, the signal trampoline: CFA and registers are read
	 * from the ucontext at rsp; its CIE says "zRS". */
	static const unsigned char insns[] = {
		0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06, /* cfa = *(rsp + 160) */
		0x10, 0x08, 0x02, 0x77, 0x28,       /* r8 at rsp + 40 */
		0x10, 0x06, 0x03, 0x77, 0xf8, 0x00, /* rbp at rsp + 120 */
		0x10, 0x10, 0x03, 0x77, 0xa8, 0x01, /* rip at rsp + 168 */
	};
	struct image m = { .n = 0 };
	size_t cie = put_cie(&m, "zRS", "", 0);
	size_t fde = put_fde(&m, cie, insns, sizeof(insns));
	char why[CFI_WHY_SIZE];

	if (cfi_check_fde(m.b, m.n, fde, why) != 0)
		fail_msg("rejected: %s", why);
}

static void test_forward_branch(void **state)
{
	(void)state;
	static const unsigned char insns[] = {
		0x0f, 0x0b,
		0x77, 0x00,                         /* breg7 0 */
		0x31, 0x28, 0x01, 0x00,             /* lit1, bra +1 */
		0x96, 0x96,                         /* nop (jumped over), nop */
		0x2f, 0x00, 0x00,                   /* skip +0 */
	};
	static const unsigned char to_end[] = {
		0x0f, 0x05, 0x77, 0x00, 0x2f, 0x00, 0x00, /* skip to the end */
	};

	ACCEPT(insns);
	ACCEPT(to_end);
}

/* ---- the fuzzer's findings ---- */

static void test_register_out_of_range(void **state)
{
	(void)state;
	static const unsigned char insns[] = { 0x09, 0x10, 0x28 };
	static const unsigned char huge[] = {
		0x09, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, /* 2^42 - 1 */
	};
	static const unsigned char ok[] = { 0x09, 0x10, 0x10, 0x09, 0x03, 0x00 };

	REJECT(insns, "DW_CFA_register to register 40");
	REJECT(huge, "DW_CFA_register to register 4398046511103");
	ACCEPT(ok);
}

static void test_backward_skip(void **state)
{
	(void)state;
	static const unsigned char skip[] = {
		0x0f, 0x05, 0x77, 0x00, 0x2f, 0xfd, 0xff,
	};
	static const unsigned char bra[] = {
		0x10, 0x06, 0x06, 0x77, 0x00, 0x31, 0x28, 0xfc, 0xff,
	};
	static const unsigned char val_bra[] = {
		0x16, 0x06, 0x06, 0x77, 0x00, 0x31, 0x28, 0xfc, 0xff,
	};

	REJECT(skip, "backward DW_OP_skip");
	REJECT(bra, "backward DW_OP_bra");
	REJECT(val_bra, "backward DW_OP_bra");
}

static void test_div_mod(void **state)
{
	(void)state;
	/* INT64_MIN / -1: const8s 2^63, const1s -1, div. */
	static const unsigned char div[] = {
		0x0f, 0x0d, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x09, 0xff, 0x1b, 0x22,
	};
	static const unsigned char mod[] = { 0x0f, 0x04, 0x77, 0x00, 0x39, 0x1d };

	REJECT(div, "DW_OP_div");
	REJECT(mod, "DW_OP_mod");
}

/* ---- malformed ---- */

static void test_truncated(void **state)
{
	(void)state;
	static const unsigned char operand[] = { 0x0e };                /* no ULEB */
	static const unsigned char leb[] = { 0x0e, 0x80 };
	static const unsigned char block[] = { 0x0f, 0x05, 0x77, 0x00 };
	static const unsigned char expr_operand[] = { 0x0f, 0x02, 0x0c, 0x00 };
	static const unsigned char long_leb[] = {
		0x0e, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
	};

	REJECT(operand, "truncated");
	REJECT(leb, "truncated");
	REJECT(block, "truncated");
	REJECT(expr_operand, "truncated");
	REJECT(long_leb, "LEB128 longer than 10 bytes");

	/* The FDE's length runs past the buffer. */
	struct image m = { .n = 0 };
	size_t cie = put_plain_cie(&m);
	size_t fde = put_fde(&m, cie, "\0", 1);
	char why[CFI_WHY_SIZE];
	assert_int_equal(cfi_check_fde(m.b, m.n - 1, fde, why), -EINVAL);
	assert_string_equal(why, "truncated");
	assert_int_equal(cfi_check_fde(m.b, m.n, m.n - 2, why), -EINVAL);
	assert_string_equal(why, "entry out of range");
	assert_int_equal(cfi_check_fde(m.b, m.n, fde, NULL), 0);
}

static void test_unknown_opcodes(void **state)
{
	(void)state;
	static const unsigned char cfa[] = { 0x3e };
	static const unsigned char val_offset[] = { 0x14, 0x06, 0x02 };
	static const unsigned char op[] = { 0x0f, 0x02, 0x77, 0x00, 0x0f, 0x01, 0xff };
	static const unsigned char into_operand[] = {
		0x0f, 0x06, 0x31, 0x28, 0x01, 0x00, 0x08, 0x05,   /* bra +1 into const1u's */
	};

	REJECT(cfa, "unknown DW_CFA 0x3e");
	REJECT(val_offset, "DW_CFA_val_offset");
	REJECT(op, "unknown DW_OP 0xff");
	REJECT(into_operand, "DW_OP branch into an operand");
}

static void test_bad_cie(void **state)
{
	(void)state;
	struct image m = { .n = 0 };
	char why[CFI_WHY_SIZE];

	/* The CIE pointer leads out of the buffer, then to an FDE. */
	size_t cie = put_plain_cie(&m);
	size_t fde = put_fde(&m, cie, "", 0);
	uint32_t ptr = 0x10000;
	memcpy(m.b + fde + 4, &ptr, 4);
	assert_int_equal(cfi_check_fde(m.b, m.n, fde, why), -EINVAL);
	assert_string_equal(why, "CIE pointer out of range");
	size_t fde2 = put_fde(&m, fde, "", 0);
	assert_int_equal(cfi_check_fde(m.b, m.n, fde2, why), -EINVAL);
	assert_string_equal(why, "CIE pointer to an FDE");
	assert_int_equal(cfi_check_fde(m.b, m.n, cie, why), -EINVAL);
	assert_string_equal(why, "a CIE, not an FDE");

	/* GCC's old "eh" augmentation, and a CIE with a bad initial rule. */
	m.n = 0;
	cie = put_cie(&m, "eh", "", 0);
	fde = put_fde(&m, cie, "", 0);
	assert_int_equal(cfi_check_fde(m.b, m.n, fde, why), -EINVAL);
	assert_string_equal(why, "augmentation \"eh\"");
	m.n = 0;
	cie = put_cie(&m, "zR", "\x09\x10\x11", 3);
	fde = put_fde(&m, cie, "", 0);
	assert_int_equal(cfi_check_fde(m.b, m.n, fde, why), -EINVAL);
	assert_string_equal(why, "DW_CFA_register to register 17");
	/* The return address column indexes libunwind's registers too. */
	m.n = 0;
	cie = put_cie(&m, "zR", "", 0);
	m.b[cie + 8 + 1 + 3 + 2] = 0x40;     /* after "zR", code and data align */
	fde = put_fde(&m, cie, "", 0);
	assert_int_equal(cfi_check_fde(m.b, m.n, fde, why), -EINVAL);
	assert_string_equal(why, "return address register 64");
}

/* debugframe.c leaves out, on its rewritten form, the FDEs cfi rejects. */
static size_t convert_debug_frame(const void *insns, size_t n)
{
	static const unsigned char cie_body[] = {
		0xff, 0xff, 0xff, 0xff, 0x01, 0x00, /* id, version 1, "" */
		0x01, 0x78, 0x10,                   /* code 1, data -8, ra 16 */
		0x0c, 0x07, 0x08, 0x90, 0x01,
	};
	struct image m = { .n = 0 };
	struct debugframe df;

	put_u32(&m, sizeof(cie_body));
	put(&m, cie_body, sizeof(cie_body));
	size_t fde = m.n;
	uint64_t start = 0x401000, range = 0x20;
	put_u32(&m, 0);
	put_u32(&m, 0);                     /* the CIE at section offset 0 */
	put(&m, &start, 8);
	put(&m, &range, 8);
	put(&m, insns, n);
	close_entry(&m, fde);
	assert_int_equal(debugframe_convert(m.b, m.n, 0x400000, 0x402000, 1u << 20, &df), 0);
	size_t count = df.count;
	debugframe_free(&df);
	return count;
}

static void test_debugframe_drops(void **state)
{
	(void)state;
	static const unsigned char good[] = { 0x41, 0x0e, 0x10, 0x86, 0x02 };
	static const unsigned char bad[] = { 0x41, 0x09, 0x10, 0x28 };

	assert_int_equal(convert_debug_frame(good, sizeof(good)), 1);
	assert_int_equal(convert_debug_frame(bad, sizeof(bad)), 0);
}

/* ---- real binaries ---- */

/* The fde_count of PATH's .eh_frame_hdr, read from the file itself. */
static uint64_t file_fde_count(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf64_Ehdr eh;
	uint32_t count = 0;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &eh, sizeof(eh), 0), sizeof(eh));
	for (size_t i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		off_t at = (off_t)(eh.e_phoff + i * sizeof(ph));
		assert_int_equal(pread(fd, &ph, sizeof(ph), at), sizeof(ph));
		if (ph.p_type == PT_GNU_EH_FRAME)
			assert_int_equal(pread(fd, &count, 4, (off_t)ph.p_offset + 8), 4);
	}
	close(fd);
	return count;
}

/* elfinfo checks every FDE of the table and drops the rejected ones: none
 * may be, in binaries the compiler and glibc made. */
static void check_real(const char *path)
{
	struct elfinfo ei;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), 0);
	close(fd);
	assert_true(ei.has_eh_table);
	assert_true(ei.eh_fde_count > 0);
	assert_int_equal(ei.eh_fde_count, file_fde_count(path));
	elfinfo_free(&ei);
}

static void test_real_libc(void **state)
{
	(void)state;
	if (access(LIBC, R_OK) != 0)
		skip();
	check_real(LIBC);
}

static void test_real_self(void **state)
{
	(void)state;
	check_real("/proc/self/exe");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain),
		cmocka_unit_test(test_glibc_plt),
		cmocka_unit_test(test_glibc_restore_rt),
		cmocka_unit_test(test_forward_branch),
		cmocka_unit_test(test_register_out_of_range),
		cmocka_unit_test(test_backward_skip),
		cmocka_unit_test(test_div_mod),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_unknown_opcodes),
		cmocka_unit_test(test_bad_cie),
		cmocka_unit_test(test_debugframe_drops),
		cmocka_unit_test(test_real_libc),
		cmocka_unit_test(test_real_self),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("cfi", tests, NULL, NULL);
}
