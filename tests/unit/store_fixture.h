/* A fresh directory for each test of the log database, and opening it.
 * Included by test_store.c and test_store_history.c.  Include after
 * <cmocka.h>. */
#ifndef CPUMOND_TEST_STORE_FIXTURE_H
#define CPUMOND_TEST_STORE_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpumond/store.h"
#include "tests/unit/tmpdir.h"

/* Each test gets a fresh directory; the database goes one level below it,
 * in a directory store_open has to create. */
struct fixture {
	char dir[64];
	char sub[128];
	char path[192];
};

static inline int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	if (!fx)
		return -1;
	if (tmpdir_make(fx->dir, sizeof fx->dir, "test_store") < 0) {
		free(fx);
		return -1;
	}
	snprintf(fx->sub, sizeof fx->sub, "%s/cpumond", fx->dir);
	snprintf(fx->path, sizeof fx->path, "%s/log.db", fx->sub);
	*state = fx;
	return 0;
}

static inline int teardown(void **state)
{
	struct fixture *fx = *state;

	tmpdir_remove(fx->dir);
	free(fx);
	return 0;
}

/* PATH opened, WRITABLE or read-only; the test fails when it cannot be. */
static inline struct store *open_store(const char *path, bool writable)
{
	struct store *st = NULL;
	char err[512];
	int e = store_open(path, writable, &st, err, sizeof err);

	if (e < 0)
		fail_msg("store_open(%s): %d %s", path, e, err);
	return st;
}

static inline struct store *open_rw(const char *path)
{
	return open_store(path, true);
}

#endif
