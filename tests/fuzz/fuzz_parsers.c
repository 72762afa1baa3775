/* libFuzzer target: the small parsers of untrusted text and the escapers of
 * untrusted names.
 *
 *   - config_parse_duration, config_parse_size (configuration values);
 *   - sampler_parse_schedstat (/proc/PID/task/TID/schedstat),
 *     procmaps_parse (/proc/PID/maps), and procfs's parsers of stat,
 *     status (with its capability masks), cgroup, the exe link, cmdline,
 *     comm, syscall (and stall's rules over it), wchan, the kernel stack,
 *     pressure (PSI) and a cgroup's cpu.stat, each
 *     held to what its header promises;
 *   - report_parse_time, report_parse_by (command line),
 *     report_signature_name and demangle_name (symbol names from the
 *     watched binaries);
 *   - json_object_int (an event's details as a reader gets them);
 *   - stackdump_utf8_len, stackdump_put_escaped and json_put_string (names
 *     from the watched processes), checked against properties: the escaped
 *     text holds no control byte and is valid UTF-8; the JSON string is
 *     well formed.
 *
 * The first byte of the input chooses the parser, the rest is its text.
 * Seeds in tests/fuzz/corpus/parsers/; inputs that once crashed are kept
 * there as crash-* files. */
#include "config/config.h"
#include "cpumond/json.h"
#include "cpumond/report.h"
#include "cpumond/sampler.h"
#include "cpumond/stall.h"
#include "procfs/procfs.h"
#include "stackdump/demangle.h"
#include "stackdump/procmaps.h"
#include "stackdump/stackdump.h"

#include <errno.h>
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

/* An event's details as a reader finds them: any text, no read past it;
 * a key found inside the object S is a key that S holds, written before
 * its value ('"KEY"' then ':'). */
static void check_json_object_int(const char *s)
{
	long long v;

	if (json_object_int(s, "demand", &v) == 0 && !strstr(s, "\"demand\""))
		abort();
	json_object_int(s, "", &v);
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
	check_json_object_int(s);
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

/* A string of LEN bytes at most, NUL included, that holds no newline
 * unless ALLOW_NL: what the procfs parsers promise of what they copy out. */
static void check_out(const char *what, const char *out, size_t len, bool allow_nl)
{
	size_t n = strnlen(out, len);

	if (n == len || (!allow_nl && memchr(out, '\n', n))) {
		fprintf(stderr, "%s: %zu bytes out of %zu, or a newline\n", what, n, len);
		abort();
	}
}

static void check_procfs_stat(const char *text)
{
	struct procfs_stat st;

	if (procfs_parse_stat(text, &st) == 0)
		check_out("procfs_parse_stat comm", st.comm, sizeof st.comm, true);
}

/* A pressure file's some line: a share in 0..100; a cpu.stat's
 * throttling: counts, or -1 when absent. */
static void check_procfs_pressure(const char *text)
{
	struct procfs_pressure p;
	struct procfs_cpu_stat cs;

	if (procfs_parse_pressure(text, &p) == 0 && !(p.some_avg10 >= 0 && p.some_avg10 <= 100))
		abort();
	if (procfs_parse_cpu_stat(text, &cs) == 0 && (cs.nr_throttled < -1 || cs.throttled_usec < -1))
		abort();
}

static void check_procfs_text(const char *text)
{
	char out[16];
	bool deleted;
	size_t n;
	int r = procfs_parse_cgroup(text, out, sizeof out);

	if (r == 0)
		check_out("procfs_parse_cgroup", out, sizeof out, false);
	else if (r != -ENOENT && r != -ENAMETOOLONG)
		abort();
	procfs_parse_comm(text, out, sizeof out);
	check_out("procfs_parse_comm", out, sizeof out, true);
	procfs_parse_wchan(text, out, sizeof out);
	check_out("procfs_parse_wchan", out, sizeof out, false);
	n = procfs_parse_exe(text, &deleted);
	if (n > strlen(text) || (deleted != (n < strlen(text))))
		abort();
	check_procfs_pressure(text);
}

/* Over RAW (N bytes, NULs and all): one line of printable text, and
 * without a cut the whole of it, a byte for a byte but the escapes. */
static void check_procfs_cmdline(const char *raw, size_t n)
{
	char out[64];
	int r = procfs_parse_cmdline(raw, n, out, sizeof out);
	size_t len = strnlen(out, sizeof out);

	if ((r != 0 && r != -E2BIG) || len == sizeof out)
		abort();
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			abort();
	if (r == 0 && len < n - (n > 0 && raw[n - 1] == '\0'))
		abort();
}

/* The syscall line, and stall's rules over it (any state, any fd
 * target); the same text as a kernel stack: every frame a non-empty piece
 * of one line of it. */
static void check_procfs_syscall(const char *text)
{
	struct procfs_syscall sc;
	const char *frames[8];
	char *copy = strdup(text), buf[64];
	size_t len = strlen(text), n;

	if (procfs_parse_syscall(text, &sc) == 0) {
		if (sc.running && sc.nr != -1)
			abort();
		if (stall_classify(text[0], &sc, text) > STALL_STUCK)
			abort();
		stall_syscall_name(sc.nr);
		stall_futex_op_name(sc.args[1], buf, sizeof buf);
	}
	if (!copy)
		return;
	n = procfs_parse_kstack(copy, frames, 8);
	for (size_t i = 0; i < n; i++)
		if (frames[i] < copy || frames[i] >= copy + len || !*frames[i] ||
		    strchr(frames[i], '\n'))
			abort();
	free(copy);
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
	/* Modulo 14: the seeds of cases 0-9 keep their parser. */
	switch (data[0] % 14) {
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
		struct procfs_status st;

		if (procfs_parse_status(text, &st) == 0 && st.nnspid > PROCFS_NSPID_MAX)
			abort();
		procfs_parse_capmask(text, &a);
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
	case 10:
		check_procfs_stat(text);
		break;
	case 11:
		check_procfs_text(text);
		break;
	case 12:
		check_procfs_cmdline((const char *)data + 1, size - 1);
		break;
	case 13:
		check_procfs_syscall(text);
		break;
	}
	free(text);
	return 0;
}
