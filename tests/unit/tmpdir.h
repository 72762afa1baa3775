/* A scratch directory for a unit test, and its removal with all it holds.
 * Included by the tests that write files (store, tail, report). */
#ifndef CPUMOND_TEST_TMPDIR_H
#define CPUMOND_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

/* Makes /tmp/NAME.XXXXXX into DIR (at least 64 bytes).  Returns 0 or -1. */
static inline int tmpdir_make(char *dir, size_t size, const char *name)
{
	snprintf(dir, size, "/tmp/%s.XXXXXX", name);
	return mkdtemp(dir) ? 0 : -1;
}

static inline int tmpdir_remove_entry(const char *path, const struct stat *sb, int type,
                                      struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path);
}

/* Removes DIR and everything below it. */
static inline void tmpdir_remove(const char *dir)
{
	nftw(dir, tmpdir_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
