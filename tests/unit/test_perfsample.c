/* Unit tests of perfsample's pure parts: the ring record parser, fed with
 * hand-made records (as the kernel writes them, and as it never should),
 * the words of a refusal, and the stack copy fitted to a stack. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <linux/perf_event.h>

#include "stackdump/perfsample.h"

#define NREGS 20

/* A record being built: little-endian words, the header's size set by
 * finish(). */
struct rec {
	unsigned char b[4096];
	size_t n;
};

static void put(struct rec *r, const void *p, size_t n)
{
	assert_true(r->n + n <= sizeof(r->b));
	memcpy(r->b + r->n, p, n);
	r->n += n;
}

static void put64(struct rec *r, uint64_t v)
{
	put(r, &v, 8);
}

static void header(struct rec *r, uint32_t type, uint16_t misc)
{
	struct perf_event_header h = { .type = type, .misc = misc };

	r->n = 0;
	put(r, &h, sizeof(h));
}

static void finish(struct rec *r)
{
	uint16_t size = (uint16_t)r->n;

	memcpy(r->b + 6, &size, 2);
}

/* A sample of pid 10 / tid 11 at time 1234, register i = 0x100 + i, with
 * a STACK_LEN byte stack of which DYN were copied. */
static void sample(struct rec *r, uint64_t abi, size_t stack_len, uint64_t dyn)
{
	uint32_t ids[2] = { 10, 11 };

	header(r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
	put(r, ids, sizeof(ids));
	put64(r, 1234);
	put64(r, abi);
	if (abi == PERF_SAMPLE_REGS_ABI_64)
		for (int i = 0; i < NREGS; i++)
			put64(r, 0x100 + (uint64_t)i);
	put64(r, stack_len);
	for (size_t i = 0; i < stack_len; i++) {
		unsigned char c = (unsigned char)i;
		put(r, &c, 1);
	}
	if (stack_len)
		put64(r, dyn);
	finish(r);
}

static void test_sample(void **state)
{
	struct rec r;
	struct perfsample_record out;

	(void)state;
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 64, 48);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_int_equal(out.type, PERF_RECORD_SAMPLE);
	assert_true(out.regs);
	const struct perfsample_sample *s = &out.sample;
	assert_int_equal(s->pid, 10);
	assert_int_equal(s->tid, 11);
	assert_int_equal(s->copy.time_ns, 1234);
	/* PERF_REG_X86_* order: AX BX CX DX SI DI BP SP IP FLAGS CS SS R8..R15 */
	assert_int_equal(s->copy.regs.rax, 0x100);
	assert_int_equal(s->copy.regs.rbx, 0x101);
	assert_int_equal(s->copy.regs.rdi, 0x105);
	assert_int_equal(s->copy.regs.rbp, 0x106);
	assert_int_equal(s->copy.regs.rsp, 0x107);
	assert_int_equal(s->copy.regs.rip, 0x108);
	assert_int_equal(s->copy.regs.eflags, 0x109);
	assert_int_equal(s->copy.regs.ss, 0x10b);
	assert_int_equal(s->copy.regs.r8, 0x10c);
	assert_int_equal(s->copy.regs.r15, 0x113);
	assert_int_equal(s->copy.regs.fs_base, 0);
	assert_int_equal(s->copy.stack_addr, 0x107);
	assert_int_equal(s->copy.stack_len, 48);
	assert_true(s->copy.stack_clipped);
	assert_ptr_equal(s->copy.stack, r.b + 8 + 8 + 8 + 8 + 8 * NREGS + 8);
	assert_int_equal(s->copy.stack[5], 5);

	/* Copied to the cap: the stack may go on. */
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 64, 64);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_false(out.sample.copy.stack_clipped);
	assert_int_equal(out.sample.copy.stack_len, 64);
}

static void test_abi_none(void **state)
{
	struct rec r;
	struct perfsample_record out;

	(void)state;
	sample(&r, PERF_SAMPLE_REGS_ABI_NONE, 0, 0);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_int_equal(out.type, PERF_RECORD_SAMPLE);
	assert_false(out.regs);
	/* No registers yet a stack: not what the kernel writes. */
	sample(&r, PERF_SAMPLE_REGS_ABI_NONE, 16, 16);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	/* ABI 32 (a compat task) is not ours; nor is garbage. */
	sample(&r, PERF_SAMPLE_REGS_ABI_32, 16, 16);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	sample(&r, 77, 16, 16);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
}

/* Every prefix of a record, and every record cut short by its own
 * header's size, is refused. */
static void test_truncated(void **state)
{
	struct rec r;
	struct perfsample_record out;

	(void)state;
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, 32);
	for (size_t len = 0; len < r.n; len++)
		assert_int_equal(perfsample_parse(r.b, len, &out), -EBADMSG);
	size_t full = r.n;
	for (uint16_t size = 8; size < full; size++) {
		memcpy(r.b + 6, &size, 2);
		assert_int_equal(perfsample_parse(r.b, full, &out), -EBADMSG);
	}
}

static void test_lying_sizes(void **state)
{
	struct rec r;
	struct perfsample_record out;
	uint16_t size;

	(void)state;
	/* A header size under the header's own. */
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, 32);
	for (size = 0; size < 8; size++) {
		memcpy(r.b + 6, &size, 2);
		assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	}
	/* A header size beyond the bytes there are. */
	size = (uint16_t)(r.n + 8);
	memcpy(r.b + 6, &size, 2);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	/* A stack size beyond the record. */
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, 32);
	uint64_t big = 1ull << 40;
	memcpy(r.b + r.n - 8 - 32 - 8, &big, 8);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	/* dyn_size above the stack's size. */
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, 33);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, UINT64_MAX);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);
	/* Bytes after the last field are the kernel's padding: taken. */
	sample(&r, PERF_SAMPLE_REGS_ABI_64, 32, 32);
	put64(&r, 0);
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
}

static void test_other_records(void **state)
{
	struct rec r;
	struct perfsample_record out;

	(void)state;
	header(&r, PERF_RECORD_LOST, 0);
	put64(&r, 99);     /* id */
	put64(&r, 7);      /* lost */
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_int_equal(out.type, PERF_RECORD_LOST);
	assert_int_equal(out.lost, 7);
	assert_int_equal(perfsample_parse(r.b, r.n - 1, &out), -EBADMSG);
	r.n -= 8;
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), -EBADMSG);

	uint32_t ids[2] = { 10, 10 };
	header(&r, PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC);
	put(&r, ids, sizeof(ids));
	put(&r, "sh\0\0\0\0\0\0", 8);
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_true(out.exec);
	header(&r, PERF_RECORD_COMM, 0);
	put(&r, ids, sizeof(ids));
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_false(out.exec);

	header(&r, PERF_RECORD_THROTTLE, 0);
	put64(&r, 1);
	put64(&r, 2);
	put64(&r, 3);
	finish(&r);
	assert_int_equal(perfsample_parse(r.b, r.n, &out), 0);
	assert_int_equal(out.type, PERF_RECORD_THROTTLE);
}

static void test_refusal(void **state)
{
	char why[300];

	(void)state;
	perfsample_refusal(EACCES, false, 4242, 3, false, why, sizeof(why));
	assert_string_equal(why, "perf_event_open refused: kernel.perf_event_paranoid is 3 and "
	                         "the process has no CAP_PERFMON (set "
	                         "kernel.perf_event_paranoid to 2 or grant CAP_PERFMON)");
	perfsample_refusal(EACCES, false, 4242, 2, true, why, sizeof(why));
	assert_string_equal(why, "perf_event_open on tid 4242 refused: no ptrace access to it "
	                         "(needs CAP_SYS_PTRACE or the same user)");
	perfsample_refusal(EPERM, false, 0, 2, false, why, sizeof(why));
	assert_non_null(strstr(why, "seccomp filter or a security module"));
	perfsample_refusal(EPERM, false, 0, INT_MIN, false, why, sizeof(why));
	assert_non_null(strstr(why, "cannot be read"));
	perfsample_refusal(ENOENT, false, 1, 2, false, why, sizeof(why));
	assert_string_equal(why, "the kernel has no task-clock software event with user register "
	                         "and stack sampling (perf_event_open: No such file or "
	                         "directory)");
	perfsample_refusal(EOPNOTSUPP, false, 1, 2, false, why, sizeof(why));
	assert_non_null(strstr(why, "no task-clock software event"));
	perfsample_refusal(ESRCH, false, 77, 2, false, why, sizeof(why));
	assert_string_equal(why, "tid 77 exited");
	perfsample_refusal(EPERM, true, 77, 2, true, why, sizeof(why));
	assert_non_null(strstr(why, "perf_event_mlock_kb"));
	perfsample_refusal(ENOSYS, false, 77, 2, true, why, sizeof(why));
	assert_non_null(strstr(why, "CONFIG_PERF_EVENTS"));
	/* Cut to the buffer, and nothing written without one. */
	perfsample_refusal(ENOSYS, false, 77, 2, true, why, 5);
	assert_string_equal(why, "the ");
	perfsample_refusal(ENOSYS, false, 77, 2, true, NULL, 0);
}

static void test_open_arguments(void **state)
{
	struct perfsample *ps = (struct perfsample *)1;
	char why[200];

	(void)state;
	assert_int_equal(perfsample_open(0, PERFSAMPLE_PERIOD_MIN_NS - 1, 0, &ps, why, sizeof(why)),
	                 -EINVAL);
	assert_null(ps);
	assert_non_null(strstr(why, "out of range"));
	assert_int_equal(perfsample_open(0, PERFSAMPLE_PERIOD_MAX_NS + 1, 0, &ps, why, sizeof(why)),
	                 -EINVAL);
	assert_int_equal(perfsample_open(0, PERFSAMPLE_PERIOD_MIN_NS, PERFSAMPLE_STACK_MIN - 1, &ps,
	                                 why, sizeof(why)), -EINVAL);
	assert_int_equal(perfsample_open(0, PERFSAMPLE_PERIOD_MIN_NS, PERFSAMPLE_STACK_MAX + 8, &ps,
	                                 why, sizeof(why)), -EINVAL);
	perfsample_close(NULL);
}

/* What the unwind read and a margin, in 512-byte steps; never past the
 * end of a mapping the copy reached, never under the least copy or over
 * the cap. */
static void test_fit(void **state)
{
	(void)state;
	/* A shallow stack in a large mapping: 300 bytes read. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 300, PERFSAMPLE_STACK_MAX, false),
	                 4608);
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 512, PERFSAMPLE_STACK_MAX, false),
	                 4608);
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 513, PERFSAMPLE_STACK_MAX, false),
	                 5120);
	/* Nothing read from the stack: the least copy. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 0, PERFSAMPLE_STACK_MAX, false),
	                 PERFSAMPLE_STACK_MIN);
	/* The copy reached the mapping's end 9,000 bytes up: no further. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 5000, 9000, true), 9000);
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 5000, 9004, true), 9000);
	/* Further than the margin needs: the margin's size. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 300, 40000, true), 4608);
	/* An end closer than the least copy: the least copy. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 300, 2000, true),
	                 PERFSAMPLE_STACK_MIN);
	/* A deep stack: the cap. */
	assert_int_equal(perfsample_fit(PERFSAMPLE_STACK_MAX, 64000, PERFSAMPLE_STACK_MAX, false),
	                 PERFSAMPLE_STACK_MAX);
	assert_int_equal(perfsample_fit(8192, 6000, 8192, false), 8192);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample),
		cmocka_unit_test(test_abi_none),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_lying_sizes),
		cmocka_unit_test(test_other_records),
		cmocka_unit_test(test_refusal),
		cmocka_unit_test(test_open_arguments),
		cmocka_unit_test(test_fit),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
