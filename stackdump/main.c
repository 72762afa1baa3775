/* stackdump: print one thread's user stack (pstack for one thread).
 *
 *   stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--help] [--version] TID
 *
 * Exit status: 0 dumped, 1 the dump failed, 2 usage error.
 */
#include "stackdump/stackdump.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>

#ifndef CPUMOND_VERSION
#define CPUMOND_VERSION "unknown"
#endif

static const char usage_line[] =
	"usage: stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--help] [--version] TID\n";

static void usage(FILE *f)
{
	fprintf(f, "%s"
	           "Stops thread TID for as short a time as possible, prints its stack.\n"
	           "  -a, --addresses     print each frame's instruction pointer\n"
	           "  -n, --max-frames N  unwind at most N frames (1..%d, default 256)\n"
	           "  -s, --stack-copy N  copy N bytes of stack (%u..%u, default %u)\n"
	           "  -h, --help          print this help\n"
	           "  -V, --version       print the version\n",
	        usage_line, STACKDUMP_MAX_FRAMES, STACKDUMP_STACK_COPY_MIN,
	        STACKDUMP_STACK_COPY_MAX, STACKDUMP_STACK_COPY_DEFAULT);
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("stackdump: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_line, stderr);
	return 2;
}

/* A decimal number in LO..HI, nothing else. */
static bool parse_num(const char *s, long lo, long hi, long *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtol(s, &end, 10);
	return errno == 0 && *end == '\0' && *v >= lo && *v <= hi;
}

/* The first line of a small /proc file, without its newline; "?" when
 * unreadable. */
static void read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");

	if (!f || !fgets(buf, (int)size, f))
		snprintf(buf, size, "?");
	else
		buf[strcspn(buf, "\n")] = '\0';
	if (f)
		fclose(f);
}

/* The process of thread TID: the Tgid line of /proc/TID/status. */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[256];
	pid_t pid = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &pid) == 1)
			break;
	fclose(f);
	return pid;
}

/* As stackdump_print, with each frame's absolute ip after its number, the
 * way gdb and eu-stack print them: "  #N 0xIP symbol+0xoff (module)". */
static void print_with_addresses(const struct stackdump_stack *st)
{
	for (size_t i = 0; i < st->nframes; i++) {
		struct stackdump_stack one = { .frames = &st->frames[i], .nframes = 1 };
		char prefix[48];

		/* stackdump_print numbers from 0: print the line, then fix it. */
		char *line = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&line, &len);
		if (!f)
			return;
		stackdump_print(&one, "", f);
		fclose(f);
		snprintf(prefix, sizeof(prefix), "  #%zu 0x%" PRIx64 " ", i, st->frames[i].ip);
		fputs(prefix, stdout);
		fputs(line + 3, stdout);            /* after "#0 " */
		free(line);
	}
	if (st->truncated)
		printf("  (truncated at %zu frames)\n", st->nframes);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addresses", no_argument, NULL, 'a' },
		{ "max-frames", required_argument, NULL, 'n' },
		{ "stack-copy", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	long max_frames = 256, stack_copy = STACKDUMP_STACK_COPY_DEFAULT, tid;
	bool addresses = false;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":an:s:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_num(optarg, 1, STACKDUMP_MAX_FRAMES, &max_frames))
				return usage_error("-n wants a number of frames in 1..1024, not \"%s\"",
				                   optarg);
			break;
		case 'a':
			addresses = true;
			break;
		case 's':
			if (!parse_num(optarg, STACKDUMP_STACK_COPY_MIN, STACKDUMP_STACK_COPY_MAX,
			               &stack_copy))
				return usage_error("-s wants a number of bytes in %u..%u, not \"%s\"",
				                   STACKDUMP_STACK_COPY_MIN, STACKDUMP_STACK_COPY_MAX,
				                   optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("stackdump %s\n", CPUMOND_VERSION);
			return 0;
		case ':':
			return usage_error("-%c needs an argument", optopt);
		default:
			if (optopt)
				return usage_error("unknown option -%c", optopt);
			return usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return usage_error("%s", optind == argc ? "missing TID" : "more than one TID");
	if (!parse_num(argv[optind], 1, INT32_MAX, &tid))
		return usage_error("TID must be a thread id, not \"%s\"", argv[optind]);

	pid_t pid = tgid_of((pid_t)tid);
	if (pid <= 0) {
		fprintf(stderr, "stackdump: no thread %ld\n", tid);
		return 1;
	}

	struct stackdump *sd = stackdump_new();
	if (!sd || stackdump_set_stack_copy(sd, (size_t)stack_copy) < 0) {
		perror("stackdump");
		stackdump_free(sd);
		return 1;
	}
	struct stackdump_stack st;
	int r = stackdump_thread(sd, pid, (pid_t)tid, (int)max_frames, &st);
	if (r < 0) {
		fprintf(stderr, "stackdump: %s\n", st.error);
		stackdump_stack_free(&st);
		stackdump_free(sd);
		return 1;
	}

	char path[64], tname[64], pname[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%ld/comm", (int)pid, tid);
	read_line(path, tname, sizeof(tname));
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	read_line(path, pname, sizeof(pname));

	printf("tid %ld (", tid);
	stackdump_put_escaped(tname, stdout);
	printf(") of pid %d (", (int)pid);
	stackdump_put_escaped(pname, stdout);
	printf("), stopped %" PRIu64 " µs\n", (st.stop_ns + 500) / 1000);
	if (addresses)
		print_with_addresses(&st);
	else
		stackdump_print(&st, "  ", stdout);
	if (st.error[0])
		fprintf(stderr, "stackdump: %s\n", st.error);

	stackdump_stack_free(&st);
	stackdump_free(sd);
	return fflush(stdout) == 0 ? 0 : 1;
}
