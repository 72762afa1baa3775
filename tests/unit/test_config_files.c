/* config: the files on disk: the shipped example and its commented-out
 * watches, a missing file, a directory, messages with a file's path.  Run
 * from the repository root. */
#include <errno.h>
#include <fnmatch.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config/config.h"
#include "tests/unit/config_fixture.h"

static int load(const char *path, struct config *cfg, char **errs)
{
	size_t len;
	FILE *f = open_memstream(errs, &len);
	int rc;

	assert_non_null(f);
	rc = config_load(path, cfg, f);
	fclose(f);
	return rc;
}

static void test_shipped_config(void **state)
{
	struct config cfg;
	char *errs;

	(void)state;
	assert_int_equal(load("config/cpumond.conf", &cfg, &errs), 0);
	assert_string_equal(errs, "");
	assert_string_equal(cfg.path, "config/cpumond.conf");
	assert_daemon_defaults(&cfg);
	assert_null(cfg.report_ignore);
	assert_int_equal(cfg.nwatches, 1);
	assert_string_equal(cfg.watches[0].name, "all");
	assert_true(cfg.watches[0].all);
	assert_int_equal(cfg.watches[0].threshold, 800);
	free(errs);
	config_free(&cfg);
}

/* Every commented-out watch of the shipped file must be good too. */
static void test_shipped_examples(void **state)
{
	struct config cfg;
	char *text, *line;
	size_t len, web, php, containers;
	FILE *in = fopen("config/cpumond.conf", "r"), *out = open_memstream(&text, &len);
	ssize_t n;
	size_t cap = 0;

	(void)state;
	assert_non_null(in);
	assert_non_null(out);
	line = NULL;
	while ((n = getline(&line, &cap, in)) > 0)
		fputs(line[0] == ';' && (line[1] == '[' || (line[1] >= 'a' && line[1] <= 'z')) ? line + 1 : line, out);
	free(line);
	fclose(in);
	fclose(out);
	/* "builder" is a user this host may not have: root is everywhere. */
	memcpy(strstr(text, "user = builder"), "user = 0      ", 14);
	parse_good(text, &cfg);
	assert_int_equal(cfg.nwatches, 9);
	/* By name: the examples may come in any order. */
	web = php = containers = cfg.nwatches;
	for (size_t i = 0; i < cfg.nwatches; i++) {
		if (strcmp(cfg.watches[i].name, "web") == 0)
			web = i;
		else if (strcmp(cfg.watches[i].name, "php") == 0)
			php = i;
		else if (strcmp(cfg.watches[i].name, "containers") == 0)
			containers = i;
	}
	assert_true(web < cfg.nwatches && php < cfg.nwatches && containers < cfg.nwatches);
	assert_int_equal(cfg.watches[web].consecutive, 3);
	/* The unit and cgroup examples match what they say they do. */
	assert_int_equal(fnmatch(cfg.watches[php].unit, "php8.2-fpm.service", 0), 0);
	assert_int_not_equal(fnmatch(cfg.watches[php].unit, "php8.2-fpm.socket", 0), 0);
	assert_int_equal(regexec(&cfg.watches[containers].cgroup_re,
	                         "/system.slice/docker-0123abcd.scope", 0, NULL, 0), 0);
	assert_int_not_equal(regexec(&cfg.watches[containers].cgroup_re,
	                             "/system.slice/docker.service", 0, NULL, 0), 0);
	/* The suggested ignore pattern (the C runtime's frames are built in)
	 * names a thread pool's loops and nothing that merely contains their
	 * names. */
	assert_non_null(cfg.report_ignore);
	assert_int_equal(regexec(&cfg.report_ignore_re, "pool_worker_loop", 0, NULL, 0), 0);
	assert_int_equal(regexec(&cfg.report_ignore_re, "event_loop_run", 0, NULL, 0), 0);
	assert_int_not_equal(regexec(&cfg.report_ignore_re, "main", 0, NULL, 0), 0);
	assert_int_not_equal(regexec(&cfg.report_ignore_re, "pool_worker_loop_once", 0, NULL, 0),
	                     0);
	free(text);
	config_free(&cfg);
}

static void test_missing_file(void **state)
{
	struct config cfg;
	char *errs;

	(void)state;
	memset(&cfg, 0xa5, sizeof cfg);
	assert_int_equal(load("/nonexistent/cpumond.conf", &cfg, &errs), -ENOENT);
	assert_string_equal(errs, "/nonexistent/cpumond.conf:0: cannot open: no such file or directory\n");
	assert_zeroed(&cfg);
	free(errs);
}

static void test_directory(void **state)
{
	struct config cfg;
	char *errs;

	(void)state;
	memset(&cfg, 0xa5, sizeof cfg);
	assert_int_equal(load("config", &cfg, &errs), -EISDIR);
	assert_string_equal(errs, "config:0: cannot read: is a directory\n");
	assert_zeroed(&cfg);
	free(errs);
}

/* A file on disk: messages carry its path. */
static void test_load_file(void **state)
{
	char path[] = "/tmp/test_config.XXXXXX";
	static const char text[] = "[watch w]\nall = yes\nthreshold = 1001\n";
	struct config cfg;
	char *errs, expect[128];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
	close(fd);
	assert_int_equal(load(path, &cfg, &errs), -EINVAL);
	snprintf(expect, sizeof expect, "%s:3: threshold: 1001 is out of range 1..1000\n", path);
	assert_string_equal(errs, expect);
	free(errs);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shipped_config),
		cmocka_unit_test(test_shipped_examples),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_directory),
		cmocka_unit_test(test_load_file),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
