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

/* CFG's [cpumond] section is the defaults, as the shipped file and an
 * empty section give them. */
static inline void assert_daemon_defaults(const struct config *cfg)
{
	assert_int_equal(cfg->interval_ms, 3000);
	assert_int_equal(cfg->threshold, 800);
	assert_int_equal(cfg->consecutive, 1);
	assert_int_equal(cfg->cooldown_ms, 60000);
	assert_string_equal(cfg->database, CONFIG_DEFAULT_DATABASE);
	assert_int_equal(cfg->max_frames, 64);
	assert_int_equal(cfg->sample_interval_ms, 50);
	assert_int_equal(cfg->episode_samples, 20);
	assert_int_equal(cfg->max_dumps_per_second, 100);
	assert_true(cfg->history_threads == 10 && cfg->history_floor == 100);
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
