/* demangle: C++ and Rust names for people.  See demangle.h. */
#include "stackdump/demangle.h"

#include <libiberty/demangle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *demangle_name(const char *name)
{
	if (!name || strlen(name) > DEMANGLE_MAX_INPUT)
		return NULL;
	/* Only names that say they are mangled: libiberty's AUTO style would
	 * also try other schemes on plain C names. */
	if (strncmp(name, "_Z", 2) != 0 && strncmp(name, "_R", 2) != 0)
		return NULL;
	return cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
}

size_t demangle_into(const char *name, char *buf, size_t len)
{
	char *readable = demangle_name(name);
	int n = snprintf(buf, len, "%s", readable ? readable : name ? name : "");

	free(readable);
	return n < 0 ? 0 : (size_t)n;
}
