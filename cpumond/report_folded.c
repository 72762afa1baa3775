/* report_folded: `cpumond report --folded`, every sample as folded stacks
 * ("outer;...;inner COUNT", the input of flamegraph.pl and its kin). */
#include "cpumond/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpumond/report_internal.h"

/* A frame name for the folded format: escaped as stackdump_put_escaped
 * does, and ';', which separates frames there, as \x3b. */
static void put_folded_name(char *name, FILE *out)
{
	for (;;) {
		char *semi = strchr(name, ';');

		if (semi)
			*semi = '\0';
		stackdump_put_escaped(name, out);
		if (!semi)
			break;
		fputs("\\x3b", out);
		name = semi + 1;
	}
}

struct folded_line {
	char *text;
	uint64_t samples;
};

static int cmp_folded(const void *a, const void *b)
{
	return strcmp(((const struct folded_line *)a)->text, ((const struct folded_line *)b)->text);
}

/* Stack ST outermost first, as one folded line without its count. */
static char *folded_text(const struct stackdump_stack *st)
{
	char name[REPORT_NAME_LEN];
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	for (size_t i = st->nframes; i-- > 0;) {
		report_frame_name(&st->frames[i], REPORT_NAME_EXACT, name, sizeof name);
		put_folded_name(name, f);
		if (i > 0)
			fputc(';', f);
	}
	if (st->nframes == 0)
		fputs("[no frames]", f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* Identical lines (two builds with the same symbols) are merged, as
 * flamegraph.pl would. */
int report_print_folded(const struct report *r, FILE *out)
{
	struct report_totals t;
	struct folded_line *lines;
	const struct stackdump_stack *st;
	uint64_t samples;
	size_t n = 0;
	int e = 0;

	report_totals(r, &t);
	lines = calloc(t.stacks ? t.stacks : 1, sizeof *lines);
	if (!lines)
		return -ENOMEM;
	for (size_t i = 0; (st = report_stack(r, i, &samples)) != NULL; i++) {
		lines[n].samples = samples;
		if (!(lines[n++].text = folded_text(st))) {
			e = -ENOMEM;
			break;
		}
	}
	if (e == 0) {
		qsort(lines, n, sizeof *lines, cmp_folded);
		for (size_t i = 0; i < n;) {
			uint64_t sum = 0;
			size_t j = i;

			while (j < n && strcmp(lines[j].text, lines[i].text) == 0)
				sum += lines[j++].samples;
			fprintf(out, "%s %" PRIu64 "\n", lines[i].text, sum);
			i = j;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(lines[i].text);
	free(lines);
	return e;
}
