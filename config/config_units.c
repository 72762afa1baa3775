/* config: the units of durations and sizes, both ways (config.h,
 * config_internal.h). */
#include "config/config.h"
#include "config/config_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Largest first: config_print writes the first unit that is exact.  A
 * unit that reads the same as one before it is read, never written. */
struct unit {
	const char *suffix;
	uint64_t size;
};
/* Weeks come after days: "14d" is what the documentation shows, not "2w".
 * "m" is minutes, as systemd and report --since read it. */
static const struct unit units[] = {
	{ "d", 86400000 }, { "w", 604800000 }, { "h", 3600000 }, { "min", 60000 },
	{ "m", 60000 }, { "s", 1000 }, { "ms", 1 },
};
/* Powers of 1024: KiB, MiB, GiB, TiB and their short forms K, M, G, T (as
 * systemd and GNU coreutils read them); powers of 1000: KB (and kB), MB,
 * GB, TB (as coreutils reads them).  Each IEC name comes before its short
 * form, so that 256 MiB is written "256MiB". */
static const struct unit size_units[] = {
	{ "TiB", UINT64_C(1) << 40 }, { "T", UINT64_C(1) << 40 }, { "TB", UINT64_C(1000000000000) },
	{ "GiB", UINT64_C(1) << 30 }, { "G", UINT64_C(1) << 30 }, { "GB", UINT64_C(1000000000) },
	{ "MiB", UINT64_C(1) << 20 }, { "M", UINT64_C(1) << 20 }, { "MB", UINT64_C(1000000) },
	{ "KiB", UINT64_C(1) << 10 }, { "K", UINT64_C(1) << 10 }, { "KB", 1000 }, { "kB", 1000 },
	{ "B", 1 },
};

/* Digits and a suffix from UNITS (none: DEFAULT_UNIT) to a count of the
 * smallest unit: 0, -EINVAL (not such a number), or -ERANGE (it is, but
 * past UINT64_MAX). */
static int parse_with_unit(const char *text, const struct unit *u, size_t nunits,
                           uint64_t default_unit, uint64_t *out)
{
	const char *end;
	uint64_t n = 0, unit = 0;
	bool overflow = false;

	for (end = text; *end >= '0' && *end <= '9'; end++) {
		unsigned digit = (unsigned)(*end - '0');

		if (n > (UINT64_MAX - digit) / 10)
			overflow = true;
		else
			n = n * 10 + digit;
	}
	if (end == text)
		return -EINVAL;
	if (!*end)
		unit = default_unit;
	for (size_t i = 0; i < nunits && !unit; i++)
		if (strcmp(end, u[i].suffix) == 0)
			unit = u[i].size;
	if (!unit)
		return -EINVAL;
	if (overflow || n > UINT64_MAX / unit)
		return -ERANGE;
	*out = n * unit;
	return 0;
}

/* N in the largest unit of U that is exact: 60000 ms is "1min", 1500 is
 * "1500ms", 0 is "0ms". */
static const char *format_with_unit(uint64_t n, const struct unit *u, size_t nunits,
                                    char *buf, size_t size)
{
	const struct unit *best = &u[nunits - 1];

	for (size_t i = 0; n && i < nunits; i++) {
		if (n % u[i].size == 0) {
			best = &u[i];
			break;
		}
	}
	snprintf(buf, size, "%" PRIu64 "%s", n / best->size, best->suffix);
	return buf;
}

int config_parse_duration(const char *text, uint64_t *ms)
{
	return parse_with_unit(text, units, ARRAY_SIZE(units), 1000, ms);
}

int config_parse_size(const char *text, uint64_t *bytes)
{
	return parse_with_unit(text, size_units, ARRAY_SIZE(size_units), 1, bytes);
}

const char *config_format_duration(uint64_t ms, char *buf, size_t size)
{
	return format_with_unit(ms, units, ARRAY_SIZE(units), buf, size);
}

const char *config_format_size(uint64_t bytes, char *buf, size_t size)
{
	return format_with_unit(bytes, size_units, ARRAY_SIZE(size_units), buf, size);
}
