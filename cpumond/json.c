#include "cpumond/json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void json_put_string(const char *s, FILE *out)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', out);
	while (*p) {
		size_t n = (size_t)stackdump_utf8_len((const char *)p);

		if (n == 0 || *p < 0x20 || *p == 0x7f) {
			fprintf(out, "\\u%04x", *p);
			n = 1;
		} else if (*p == '"' || *p == '\\') {
			fputc('\\', out);
			fputc(*p, out);
		} else {
			fwrite(p, 1, n, out);
		}
		p += n;
	}
	fputc('"', out);
}

void json_put_string_or_null(const char *s, FILE *out)
{
	if (s && s[0])
		json_put_string(s, out);
	else
		fputs("null", out);
}

void json_put_time(int64_t t_us, FILE *out)
{
	int64_t sec = t_us / 1000000, us = t_us % 1000000;
	char date[48], zone[16];
	struct tm tm;
	time_t t;

	if (us < 0) {
		us += 1000000;
		sec--;
	}
	t = (time_t)sec;
	if (!localtime_r(&t, &tm) ||
	    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0 ||
	    strftime(zone, sizeof zone, "%z", &tm) != 5) {
		fprintf(out, "@%lld", (long long)t_us);
		return;
	}
	/* %z is "+hhmm"; RFC 3339 wants "+hh:mm". */
	fprintf(out, "%s.%06lld%.3s:%s", date, (long long)us, zone, zone + 3);
}

void json_put_frame_source(const struct stackdump_frame *f, FILE *out)
{
	fputs(",\"file\":", out);
	json_put_string_or_null(f->file, out);
	if (f->line > 0)
		fprintf(out, ",\"line\":%u", f->line);
	else
		fputs(",\"line\":null", out);
	fprintf(out, ",\"inlined\":%s", f->inlined ? "true" : "false");
}

/* Past the JSON string that starts at P (its opening quote), or NULL when
 * it does not end. */
static const char *skip_string(const char *p)
{
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && !*++p)
			return NULL;
	return *p ? p + 1 : NULL;
}

int json_object_int(const char *obj, const char *key, long long *value)
{
	size_t keylen = strlen(key);
	const char *p = obj;
	int depth = 0;
	bool want_key = false;

	while (*p) {
		if (*p == '"') {
			const char *end = skip_string(p);

			if (!end)
				return -ENOENT;
			if (depth == 1 && want_key) {
				const char *q = end;

				want_key = false;
				while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
					q++;
				if (*q == ':' && (size_t)(end - p) == keylen + 2 &&
				    memcmp(p + 1, key, keylen) == 0) {
					char *num_end;

					errno = 0;
					*value = strtoll(q + 1, &num_end, 10);
					if (num_end == q + 1 || errno ||
					    (*num_end != ',' && *num_end != '}' && *num_end != ' ' &&
					     *num_end != '\n'))
						return -ENOENT;
					return 0;
				}
			}
			p = end;
			continue;
		}
		switch (*p++) {
		case '{': want_key = ++depth == 1; break;
		case '[': depth++; break;
		case '}': case ']': depth--; break;
		case ',': want_key = depth == 1; break;
		}
	}
	return -ENOENT;
}
