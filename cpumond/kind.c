#include "cpumond/kind.h"

#include <stdio.h>
#include <string.h>

#define KIND_NAME_ENTRY(id, name) [id] = name,
static const char *const names[KIND_COUNT] = { KIND_LIST(KIND_NAME_ENTRY) };
#undef KIND_NAME_ENTRY

const char *kind_name(enum kind k)
{
	return (unsigned)k < KIND_COUNT ? names[k] : names[KIND_HOT];
}

int kind_from_name(const char *name)
{
	for (int k = 0; k < KIND_COUNT; k++)
		if (strcmp(names[k], name) == 0)
			return k;
	return -1;
}

const char *kind_names_text(void)
{
	static char text[256];
	size_t len = 0;

	if (text[0])
		return text;
	for (int k = 0; k < KIND_COUNT; k++)
		len += (size_t)snprintf(text + len, sizeof text - len, "%s%s",
		                        k == 0 ? "" : k == KIND_COUNT - 1 ? " or " : ", ", names[k]);
	return text;
}
