/* minidebug: xz decompression with a bound on memory.  See minidebug.h. */
#include "stackdump/minidebug.h"

#include <errno.h>
#include <lzma.h>
#include <stdint.h>
#include <stdlib.h>

/* The decoder's own memory (dictionary): xz -9 needs 65 MiB, the
 * MiniDebugInfo of Fedora's libraries is made with the default (-6, 9 MiB). */
#define MINIDEBUG_MEMLIMIT (64u << 20)

int minidebug_decompress(const void *in, size_t len, size_t max_out,
                         unsigned char **out, size_t *outlen)
{
	lzma_stream s = LZMA_STREAM_INIT;
	unsigned char *buf = NULL;
	size_t cap = 0;
	int r = -ENOEXEC;

	*out = NULL;
	*outlen = 0;
	if (lzma_stream_decoder(&s, MINIDEBUG_MEMLIMIT, 0) != LZMA_OK)
		return -ENOMEM;
	s.next_in = in;
	s.avail_in = len;
	for (;;) {
		if (s.avail_out == 0) {
			if (cap >= max_out)
				break;                     /* too large: refused */
			size_t ncap = cap ? cap * 2 : 64 * 1024;
			if (ncap > max_out)
				ncap = max_out;
			unsigned char *nbuf = realloc(buf, ncap);
			if (!nbuf) {
				r = -ENOMEM;
				break;
			}
			buf = nbuf;
			s.next_out = buf + cap;
			s.avail_out = ncap - cap;
			cap = ncap;
		}
		lzma_ret lr = lzma_code(&s, LZMA_FINISH);
		if (lr == LZMA_STREAM_END) {
			r = 0;
			break;
		}
		if (lr == LZMA_MEM_ERROR) {
			r = -ENOMEM;
			break;
		}
		if (lr != LZMA_OK)
			break;                             /* corrupt, truncated, memlimit */
	}
	if (r == 0) {
		*out = buf;
		*outlen = (size_t)s.total_out;
	} else {
		free(buf);
	}
	lzma_end(&s);
	return r;
}
