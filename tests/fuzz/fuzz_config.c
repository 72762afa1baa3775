/* libFuzzer target: the configuration parser, config_parse_string (inih's
 * ini_parse_stream underneath, then validation).  Any text must give either
 * a configuration or errors, never a crash, a leak or undefined behaviour.
 *
 * One property on top: a configuration that parses prints (config_print)
 * as a file that parses again, to the same printout.
 *
 * The seeds in tests/fuzz/corpus/config/ are the example configuration and
 * small files for every key, selector and error; inputs that once crashed
 * are kept there as crash-* files. */
#include "config/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The printout of CFG, malloc'ed. */
static char *printed(const struct config *cfg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		abort();
	config_print(cfg, f);
	fclose(f);
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	struct config cfg = { 0 }, again = { 0 };
	char *text;

	if (size > 64 * 1024)
		return 0;
	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';      /* an embedded NUL ends the text, as in a file read by inih */
	if (config_parse_string(text, "fuzz.conf", &cfg, devnull) == 0) {
		char *one = printed(&cfg), *two;

		if (config_parse_string(one, "printed.conf", &again, stderr) != 0) {
			fprintf(stderr, "the printout of a valid configuration does not parse:\n%s", one);
			abort();
		}
		two = printed(&again);
		if (strcmp(one, two) != 0) {
			fprintf(stderr, "printout changed on a second round:\n%s---\n%s", one, two);
			abort();
		}
		free(one);
		free(two);
		config_free(&again);
	}
	config_free(&cfg);
	free(text);
	return 0;
}
