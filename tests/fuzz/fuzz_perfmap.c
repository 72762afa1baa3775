/* libFuzzer target: the perf map parser and lookup (stackdump/perfmap.c)
 * on hostile maps, which a watched process writes: any bytes, lines out
 * of order, overlapping, huge or without end.
 *
 * Input: byte 0 splits the rest in two parts, parsed one after the other
 * as a map that grew (the first part's last line may be cut); the next 8
 * bytes are an address to look up besides each entry's start and end.
 * Checked: what a parse consumed ends with a newline; every name is at
 * most PERFMAP_NAME_MAX bytes; a name found belongs to an entry covering
 * the address, the latest such line; the identity is no longer than the
 * name.  Seeds in tests/fuzz/corpus/perfmap/ (node's, the JVM's and
 * python's lines). */
#include "stackdump/perfmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(struct perfmap *m, uint64_t addr)
{
	uint64_t start = 0;
	const char *name = perfmap_lookup(m, addr, &start);
	const struct perfmap_entry *best = NULL;

	if (!name)
		return;
	if (strlen(name) > PERFMAP_NAME_MAX)
		abort();
	for (size_t i = 0; i < m->n; i++)
		if (m->v[i].start <= addr && addr < m->v[i].end && (!best || m->v[i].seq > best->seq))
			best = &m->v[i];
	/* The lookup looks back a bounded way: it may miss an entry far
	 * below, never name one that does not cover ADDR. */
	if (!best || start > addr)
		abort();
	char id[PERFMAP_NAME_MAX + 1];
	if (perfmap_identity(name, id, sizeof(id)) > strlen(name))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perfmap m;

	if (size < 9)
		return 0;
	uint64_t addr;
	memcpy(&addr, data + 1, 8);
	const char *text = (const char *)data + 9;
	size_t len = size - 9, split = len ? data[0] % (len + 1) : 0;

	perfmap_init(&m);
	ssize_t a = perfmap_parse(&m, text, split);
	if (a >= 0) {
		if (a > 0 && text[a - 1] != '\n')
			abort();
		ssize_t b = perfmap_parse(&m, text + a, len - (size_t)a);
		if (b > 0 && text[a + b - 1] != '\n')
			abort();
	}
	check(&m, addr);
	for (size_t i = 0; i < m.n && i < 64; i++) {
		check(&m, m.v[i].start);
		check(&m, m.v[i].end - 1);
	}
	perfmap_free(&m);
	return 0;
}
