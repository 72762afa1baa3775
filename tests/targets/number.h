/* The option parser the target programs share: a whole number in a range,
 * or exit status 2 with a message naming the program and the option. */
#ifndef CPUMOND_TARGET_NUMBER_H
#define CPUMOND_TARGET_NUMBER_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static inline int target_number(const char *prog, const char *s, int lo, int hi,
                                const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "%s: %s must be a number in %d..%d, not \"%s\"\n", prog, what, lo, hi,
		        s);
		exit(2);
	}
	return (int)v;
}

#endif
