/* libFuzzer target: top's table (cpumond/top_view.c) of hostile rows: the
 * names come from the watched processes (comm, thread names the process
 * sets itself) and the database, any bytes.
 *
 * Input: byte 0 the screen's width (0: not cut), byte 1 the order (bit 0),
 * the rows shown (bits 1..4), a watch filter (bit 5: the first thread's);
 * then records of 8 bytes of numbers (usage, run delay, threshold, state,
 * episode, pid, tid) and four NUL-ended names (watch, comm, thread,
 * frame), up to 16 threads.  Checked: the text is valid UTF-8 with no
 * control byte but the newline, each line is at most the width in code
 * points, and there are at most 2 lines besides the threads shown.  Seeds in
 * tests/fuzz/corpus/top/. */
#include "cpumond/top.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stackdump/stackdump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_THREADS 16

/* The next NUL-ended name of the input at *AT, or "" past its end (copied:
 * the last one may have no NUL). */
static char *take_name(const uint8_t *data, size_t size, size_t *at)
{
	size_t start = *at, end = start;

	while (end < size && data[end])
		end++;
	*at = end < size ? end + 1 : size;
	return strndup((const char *)data + start, end - start);
}

/* TEXT has at most MAX_LINES lines of at most WIDTH code points (0: any). */
static void check_text(const char *text, int width, size_t max_lines)
{
	size_t lines = 0;
	long cols = 0;

	for (const char *p = text; *p;) {
		int l = stackdump_utf8_len(p);

		if (l == 0)
			abort();        /* not UTF-8 */
		if (*p == '\n') {
			lines++;
			cols = 0;
		} else if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			abort();        /* a control byte reached the terminal */
		} else if (width > 0 && ++cols > width) {
			abort();
		}
		p += l;
	}
	if (lines > max_lines)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct top_thread t[MAX_THREADS];
	struct top_cycle c = { .id = 1, .time_us = 1795957445000000LL, .interval_ms = 3000,
	                       .threads = t };
	struct top_screen s = { .cycle = &c, .now_us = c.time_us, .eol = "\n" };
	size_t at = 2;
	char *text = NULL;
	size_t len = 0;
	FILE *out;

	if (size < 2)
		return 0;
	s.width = data[0];
	s.by = data[1] & 1 ? TOP_BY_RUN_DELAY : TOP_BY_USAGE;
	s.rows = (data[1] >> 1) & 0xf;
	while (c.nthreads < MAX_THREADS && at + 8 <= size) {
		const uint8_t *n = data + at;
		struct top_thread *r = &t[c.nthreads++];

		at += 8;
		*r = (struct top_thread){
			.usage = (n[0] | n[1] << 8) - 100, .run_delay = (n[2] | n[3] << 8) - 100,
			.threshold = n[4] * 8, .state = (char)n[5], .episode = n[6] & 1,
			.pid = n[6] >> 1, .tid = n[7],
		};
		r->watch = take_name(data, size, &at);
		r->comm = take_name(data, size, &at);
		r->thread = take_name(data, size, &at);
		r->frame = take_name(data, size, &at);
	}
	if (data[1] & 0x20 && c.nthreads > 0)
		s.watch = t[0].watch;
	out = open_memstream(&text, &len);
	if (!out)
		abort();
	top_format(&s, out);
	fclose(out);
	/* The header, the column heads, one line a thread shown. */
	check_text(text, s.width, 2 + (s.rows > 0 && (size_t)s.rows < c.nthreads ?
	                               (size_t)s.rows : c.nthreads));
	free(text);
	for (size_t i = 0; i < c.nthreads; i++) {
		free(t[i].watch);
		free(t[i].comm);
		free(t[i].thread);
		free(t[i].frame);
	}
	return 0;
}
