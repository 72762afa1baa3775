/* libFuzzer target: the small parsers of untrusted text and the escapers of
 * untrusted names.
 *
 *   - config_parse_duration, config_parse_size (configuration values);
 *   - sampler_parse_schedstat (/proc/PID/task/TID/schedstat),
 *     doctor_parse_status and doctor_parse_capmask (/proc/PID/status),
 *     procmaps_parse (/proc/PID/maps);
 *   - report_parse_time, report_parse_by (command line),
 *     report_signature_name and demangle_name (symbol names from the
 *     watched binaries);
 *   - stackdump_utf8_len, stackdump_put_escaped and json_put_string (names
 *     from the watched processes), checked against properties: the escaped
 *     text holds no control byte and is valid UTF-8; the JSON string is
 *     well formed.
 *
 * The first byte of the input chooses the parser, the rest is its text.
 * Seeds in tests/fuzz/corpus/parsers/; inputs that once crashed are kept
 * there as crash-* files. */
#include "config/config.h"
#include "cpumond/doctor.h"
#include "cpumond/json.h"
#include "cpumond/report.h"
#include "cpumond/sampler.h"
#include "stackdump/demangle.h"
#include "stackdump/procmaps.h"
#include "stackdump/stackdump.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An independent RFC 3629 check: the length of the UTF-8 sequence at P
 * (at most N bytes), 0 when invalid. */
static size_t utf8_len_ref(const unsigned char *p, size_t n)
{
	uint32_t cp;
	size_t len;

	if (n == 0)
		return 0;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static char *capture(void (*fn)(const char *, FILE *), const char *s, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		abort();
	fn(s, f);
	fclose(f);
	return buf;
}

static void put_escaped(const char *s, FILE *out)
{
	stackdump_put_escaped(s, out);
}

static void check_escaped(const char *s)
{
	size_t len;
	unsigned char *out = (unsigned char *)capture(put_escaped, s, &len);

	for (size_t i = 0; i < len;) {
		size_t n = utf8_len_ref(out + i, len - i);

		if (n == 0 || out[i] < 0x20 || out[i] == 0x7f ||
		    (n == 2 && out[i] == 0xc2 && out[i + 1] < 0xa0)) {
			fprintf(stderr, "stackdump_put_escaped wrote byte 0x%02x at %zu\n", out[i], i);
			abort();
		}
		i += n;
	}
	free(out);
}

static void check_json(const char *s)
{
	size_t len, i = 1;
	unsigned char *out = (unsigned char *)capture(json_put_string, s, &len);

	if (len < 2 || out[0] != '"' || out[len - 1] != '"')
		abort();
	while (i < len - 1) {
		size_t n = utf8_len_ref(out + i, len - 1 - i);

		if (n == 0 || out[i] < 0x20 || out[i] == '"') {
			fprintf(stderr, "json_put_string wrote byte 0x%02x at %zu\n", out[i], i);
			abort();
		}
		if (out[i] == '\\') {
			if (i + 1 >= len - 1)
				abort();
			if (strchr("\"\\/bfnrt", out[i + 1]) && out[i + 1]) {
				i += 2;
				continue;
			}
			if (out[i + 1] != 'u' || i + 6 > len - 1)
				abort();
			for (size_t k = 2; k < 6; k++)
				if (!strchr("0123456789abcdefABCDEF", out[i + k]) || !out[i + k])
					abort();
			i += 6;
			continue;
		}
		i += n;
	}
	free(out);
}

static void check_utf8_len(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);

	for (size_t i = 0; i < n; i++) {
		size_t want = utf8_len_ref(p + i, n - i);
		int got = stackdump_utf8_len(s + i);

		if ((size_t)got != want) {
			fprintf(stderr, "stackdump_utf8_len at %zu: %d, want %zu\n", i, got, want);
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t a, b;
	int64_t t;
	char *text, buf[64];

	if (size < 1 || size > 16 * 1024)
		return 0;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (data[0] % 10) {
	case 0:
		if (config_parse_duration(text, &a) == 0) {
			/* The value in plain milliseconds means the same. */
			snprintf(buf, sizeof buf, "%llums", (unsigned long long)a);
			if (config_parse_duration(buf, &b) != 0 || a != b)
				abort();
		}
		break;
	case 1:
		if (config_parse_size(text, &a) == 0) {
			snprintf(buf, sizeof buf, "%llu", (unsigned long long)a);
			if (config_parse_size(buf, &b) != 0 || a != b)
				abort();
		}
		break;
	case 2:
		sampler_parse_schedstat(text, &a, &b);
		break;
	case 3: {
		struct doctor_status st;

		doctor_parse_status(text, &st);
		doctor_parse_capmask(text, &a);
		break;
	}
	case 4: {
		struct procmaps m;

		/* The whole input, NULs and all: the reader passes a length. */
		if (procmaps_parse((const char *)data + 1, size - 1, &m) == 0) {
			for (size_t i = 0; i < m.n; i++) {
				procmaps_find(&m, m.v[i].start);
				procmaps_find(&m, m.v[i].end);
			}
		}
		procmaps_free(&m);
		break;
	}
	case 5: {
		enum report_by by;

		report_parse_time(text, 1764421445000000, &t);
		report_parse_by(text, &by);
		break;
	}
	case 6: {
		char name[32], readable[32];
		size_t n = report_signature_name(text, name, sizeof name);

		if (strlen(name) > sizeof name - 1 || (n < sizeof name && strlen(name) != n))
			abort();
		/* The demangler on hostile names: a string or nothing, and
		 * demangle_into cut as snprintf. */
		char *d = demangle_name(text);
		n = demangle_into(text, readable, sizeof readable);
		if (strlen(readable) > sizeof readable - 1 ||
		    n != strlen(d ? d : text) || (n < sizeof readable && strlen(readable) != n))
			abort();
		free(d);
		break;
	}
	case 7:
		check_escaped(text);
		break;
	case 8:
		check_json(text);
		break;
	case 9:
		check_utf8_len(text);
		break;
	}
	free(text);
	return 0;
}
