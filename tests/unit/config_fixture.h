/* Parsing a configuration from text in a unit test, and checking what it
 * says.  Included by test_config.c, test_config_files.c and
 * test_config_history.c.  Include after <cmocka.h>. */
#ifndef CPUMOND_TEST_CONFIG_FIXTURE_H
#define CPUMOND_TEST_CONFIG_FIXTURE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Parses TEXT as "t.conf"; *ERRS gets what was written to ERRORS (free it). */
static inline int parse(const char *text, struct config *cfg, char **errs)
{
	size_t len;
	FILE *f = open_memstream(errs, &len);
	int rc;

	assert_non_null(f);
	rc = config_parse_string(text, "t.conf", cfg, f);
	fclose(f);
	return rc;
}

/* Parses TEXT, which must be good. */
static inline void parse_good(const char *text, struct config *cfg)
{
	char *errs;

	assert_int_equal(parse(text, cfg, &errs), 0);
	assert_string_equal(errs, "");
	free(errs);
}

static inline void assert_zeroed(const struct config *cfg)
{
	static const struct config zero;

	assert_memory_equal(cfg, &zero, sizeof zero);
}

/* TEXT must fail with exactly ERRORS written. */
static inline void assert_errors(const char *text, const char *errors)
{
	struct config cfg;
	char *errs;

	memset(&cfg, 0xa5, sizeof cfg);
	assert_int_equal(parse(text, &cfg, &errs), -EINVAL);
	assert_string_equal(errs, errors);
	assert_zeroed(&cfg);
	free(errs);
}

#endif
