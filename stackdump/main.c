/* stackdump: print one thread's user stack (pstack for one thread), or
 * every thread of a process, one after the other.
 *
 *   stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]... [--offline]
 *             [--help] [--version] TID
 *   stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]... [--offline] -p PID
 *
 * Exit status: 0 dumped (with -p: at least one thread), 1 the dump failed
 * (with -p: no thread could be dumped), 2 usage error.
 */
#include "stackdump/stackdump.h"
#include "stackdump/symbolize.h"

#include "procfs/procfs.h"

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
	"usage: stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]... [--offline]\n"
	"                 [--help] [--version] TID\n"
	"       stackdump [-a] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]... [--offline] -p PID\n";

static void usage(FILE *f)
{
	fprintf(f, "%s"
	           "Stops thread TID for as short a time as possible, prints its stack.\n"
	           "  -p, --pid PID       every thread of process PID, each stopped alone\n"
	           "  -a, --addresses     print each frame's instruction pointer\n"
	           "  -n, --max-frames N  unwind at most N frames (1..%d, default 256)\n"
	           "  -s, --stack-copy N  copy N bytes of stack (%u..%u, default %u)\n"
	           "      --debug-dir DIR look for debug files in DIR too (repeated), before\n"
	           "                      " SYMBOLIZE_DEBUG_DIR "\n"
	           "      --offline       ask no debuginfod server (DEBUGINFOD_URLS)\n"
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

/* The process of thread TID: the Tgid line of /proc/TID/status; -1 when
 * it cannot be read. */
static pid_t tgid_of(pid_t tid)
{
	struct procfs_status st;

	procfs_read_status(tid, 0, &st);
	return st.tgid;
}

/* As stackdump_print, with each frame's absolute ip after its number, the
 * way gdb and eu-stack print them: "  #N 0xIP symbol+0xoff (module)". */
static void print_with_addresses(const struct stackdump_stack *st)
{
	size_t unwound = 0;   /* inlined calls are no frames of the unwind */

	for (size_t i = 0; i < st->nframes; i++) {
		printf("  #%zu 0x%" PRIx64 " ", i, st->frames[i].ip);
		stackdump_put_frame(&st->frames[i], stdout);
		putchar('\n');
		unwound += !st->frames[i].inlined;
	}
	if (st->truncated)
		printf("  (truncated at %zu frames)\n", unwound);
}

/* What the library says once per process (a CPython whose frames are not
 * read), on stderr. */
static void note(const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "stackdump: %s\n", msg);
}

/* Dumps thread TID of process PID and prints it: a header line naming the
 * thread, its process and the stop, then the frames.  Returns 0, or the
 * negative errno of stackdump_thread after the reason went to stderr. */
static int dump_one(struct stackdump *sd, struct symbolize *names, pid_t pid, pid_t tid,
                    int max_frames, bool addresses)
{
	struct stackdump_stack st, named;
	int r = stackdump_thread(sd, pid, tid, max_frames, &st);

	if (r < 0) {
		fprintf(stderr, "stackdump: %s\n", st.error);
		stackdump_stack_free(&st);
		return r;
	}
	/* Names, source lines and inlined calls, after the thread runs again
	 * (as stored when out of memory). */
	if (names && symbolize_stack(names, &st, SYMBOLIZE_INSTRUCTIONS, &named) == 0) {
		stackdump_stack_free(&st);
		st = named;
	}

	char tname[PROCFS_COMM_MAX], pname[PROCFS_COMM_MAX];
	if (procfs_read_comm(pid, tid, tname, sizeof(tname)) < 0)
		strcpy(tname, "?");
	if (procfs_read_comm(pid, 0, pname, sizeof(pname)) < 0)
		strcpy(pname, "?");

	printf("tid %d (", (int)tid);
	stackdump_put_escaped(tname, stdout);
	printf(") of pid %d (", (int)pid);
	stackdump_put_escaped(pname, stdout);
	printf("), stopped %" PRIu64 " µs\n", (st.stop_ns + 500) / 1000);
	if (addresses)
		print_with_addresses(&st);
	else
		stackdump_print(&st, "  ", stdout);
	/* The frames on stdout first, so that the reason follows them on a
	 * terminal. */
	fflush(stdout);
	if (st.error[0])
		fprintf(stderr, "stackdump: %s\n", st.error);
	stackdump_stack_free(&st);
	return 0;
}

/* Dumps every thread that process PID has when it starts, one after the
 * other, each stopped alone; a thread that exits or cannot be dumped is
 * said on stderr and the next one follows.  Threads created meanwhile are
 * not dumped.  Returns how many threads were dumped, or -errno when the
 * threads cannot be listed. */
static long dump_process(struct stackdump *sd, struct symbolize *names, pid_t pid,
                         int max_frames, bool addresses)
{
	pid_t *tids;
	size_t n;
	long dumped = 0;
	int e = procfs_read_tasks(pid, &tids, &n);

	if (e < 0)
		return e;
	for (size_t i = 0; i < n; i++) {
		if (dumped > 0)
			putchar('\n');
		if (dump_one(sd, names, pid, tids[i], max_frames, addresses) == 0)
			dumped++;
	}
	free(tids);
	return dumped;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addresses", no_argument, NULL, 'a' },
		{ "max-frames", required_argument, NULL, 'n' },
		{ "pid", required_argument, NULL, 'p' },
		{ "stack-copy", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "debug-dir", required_argument, NULL, 'D' },
		{ "offline", no_argument, NULL, 'O' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dirs[SYMBOLIZE_MAX_DEBUG_DIRS];
	struct symbolize_options names_opt = {
		.debug_dirs = dirs, .urls = getenv("DEBUGINFOD_URLS"),
		.timeout_s = symbolize_timeout(getenv("DEBUGINFOD_TIMEOUT")), .note = note,
	};
	struct symbolize *names = NULL;
	long max_frames = 256, stack_copy = STACKDUMP_STACK_COPY_DEFAULT, tid = 0, ppid = 0;
	bool addresses = false;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":an:p:s:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_num(optarg, 1, STACKDUMP_MAX_FRAMES, &max_frames))
				return usage_error("-n wants a number of frames in 1..1024, not \"%s\"",
				                   optarg);
			break;
		case 'a':
			addresses = true;
			break;
		case 'D':
			if (names_opt.ndebug_dirs == SYMBOLIZE_MAX_DEBUG_DIRS)
				return usage_error("more than %d --debug-dir", SYMBOLIZE_MAX_DEBUG_DIRS);
			dirs[names_opt.ndebug_dirs++] = optarg;
			break;
		case 'O':
			names_opt.offline = true;
			break;
		case 'p':
			if (!parse_num(optarg, 1, INT32_MAX, &ppid))
				return usage_error("-p wants a process id, not \"%s\"", optarg);
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
	if (ppid) {
		if (optind != argc)
			return usage_error("-p PID takes no TID");
	} else {
		if (optind != argc - 1)
			return usage_error("%s", optind == argc ? "missing TID" : "more than one TID");
		if (!parse_num(argv[optind], 1, INT32_MAX, &tid))
			return usage_error("TID must be a thread id, not \"%s\"", argv[optind]);
	}

	/* -p of a thread that is not its process's main one dumps its process. */
	pid_t pid = tgid_of((pid_t)(ppid ? ppid : tid));
	if (pid <= 0) {
		fprintf(stderr, "stackdump: no %s %ld\n", ppid ? "process" : "thread",
		        ppid ? ppid : tid);
		return 1;
	}

	struct stackdump *sd = stackdump_new();
	if (!sd || stackdump_set_stack_copy(sd, (size_t)stack_copy) < 0) {
		perror("stackdump");
		stackdump_free(sd);
		return 1;
	}
	stackdump_set_note(sd, note, NULL);
	if (symbolize_open(&names_opt, &names) < 0)
		names = NULL;   /* out of memory: the names found in the dump */
	int rc = 0;
	if (ppid) {
		long dumped = dump_process(sd, names, pid, (int)max_frames, addresses);

		if (dumped < 0)
			fprintf(stderr, "stackdump: cannot list the threads of pid %d: %s\n", (int)pid,
			        strerror((int)-dumped));
		else if (dumped == 0)
			fprintf(stderr, "stackdump: no thread of pid %d could be dumped\n", (int)pid);
		rc = dumped > 0 ? 0 : 1;
	} else {
		rc = dump_one(sd, names, pid, (pid_t)tid, (int)max_frames, addresses) < 0;
	}
	symbolize_close(names);
	stackdump_free(sd);
	return fflush(stdout) == 0 ? rc : 1;
}
