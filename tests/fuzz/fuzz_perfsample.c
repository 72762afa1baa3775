/* libFuzzer target: the perf ring record parser (perfsample_parse,
 * stackdump/perfsample.c) on hostile bytes: sizes that lie, a register
 * ABI that is not one, a stack dyn_size above its size, records cut short.
 *
 * Input: a run of records, walked as perfsample_read walks the ring (by
 * each header's size; a size under 8 or past the end stops the walk).
 * Each record is parsed from a buffer of exactly the bytes left, so that
 * ASan sees any read past them.  Checked: a parsed sample's stack lies
 * inside the record, at most its bytes, at the sampled stack pointer; a
 * sample without registers has no stack.  Seeds in
 * tests/fuzz/corpus/perfsample/ (a sample as this kernel wrote it, one of
 * a thread without registers, lost and exec records). */
#include "stackdump/perfsample.h"

#include <linux/perf_event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const unsigned char *rec, size_t len)
{
	struct perfsample_record out;

	if (perfsample_parse(rec, len, &out) < 0 || out.type != PERF_RECORD_SAMPLE)
		return;
	const struct stackdump_copy *c = &out.sample.copy;
	if (!out.regs) {
		if (c->stack_len || c->stack)
			abort();
		return;
	}
	if (c->stack < rec || c->stack > rec + len || c->stack_len > (size_t)(rec + len - c->stack))
		abort();
	if (c->stack_addr != c->regs.rsp)
		abort();
	/* Every byte of the stack is readable. */
	unsigned sum = 0;
	for (size_t i = 0; i < c->stack_len; i++)
		sum += c->stack[i];
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0;

	while (pos < size) {
		size_t left = size - pos;
		unsigned char *rec = malloc(left);
		if (!rec)
			return 0;
		memcpy(rec, data + pos, left);
		check(rec, left);
		free(rec);
		struct perf_event_header h;
		if (left < sizeof(h))
			break;
		memcpy(&h, data + pos, sizeof(h));
		if (h.size < sizeof(h) || h.size > left)
			break;
		pos += h.size;
	}
	return 0;
}
