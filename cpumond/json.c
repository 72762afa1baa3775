#include "cpumond/json.h"

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
