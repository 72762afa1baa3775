/* stackdump: print one thread's user stack (pstack for one thread), or
 * every thread of a process, one after the other.
 *
 *   stackdump [-a] [-m perf|ptrace] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]...
 *             [--offline] [--help] [--version] TID
 *   stackdump [-a] [-m perf|ptrace] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]...
 *             [--offline] -p PID
 *
 * Exit status: 0 dumped (with -p: at least one thread), 1 the dump failed
 * (with -p: no thread could be dumped), 2 usage error.
 */
#include "stackdump/perfsample.h"
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
#include <time.h>

#ifndef CPUMOND_VERSION
#define CPUMOND_VERSION "unknown"
#endif

static const char usage_line[] =
	"usage: stackdump [-a] [-m perf|ptrace] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]...\n"
	"                 [--offline] [--help] [--version] TID\n"
	"       stackdump [-a] [-m perf|ptrace] [-n MAX_FRAMES] [-s BYTES] [--debug-dir DIR]...\n"
	"                 [--offline] -p PID\n";

/* How long perf mode waits for a thread's first sample: a hot thread
 * gives it within about 10 µs of its CPU time (perfsample.h); one that does
 * not run in user space gives none. */
#define PERF_WAIT_MS 2000
/* Its periodic samples, of which only the first is printed. */
#define PERF_PERIOD_NS (10 * 1000000ull)

static void usage(FILE *f)
{
	fprintf(f, "%s"
	           "Stops thread TID for as short a time as possible, prints its stack.\n"
	           "  -p, --pid PID       every thread of process PID, each stopped alone\n"
	           "  -a, --addresses     print each frame's instruction pointer\n"
	           "  -m, --mode MODE     ptrace: stop the thread for the copy (default);\n"
	           "                      perf: let the kernel sample it while it runs (never\n"
	           "                      stopped; only a thread that runs, within %d s)\n"
	           "  -n, --max-frames N  unwind at most N frames (1..%d, default 256)\n"
	           "  -s, --stack-copy N  copy N bytes of stack (%u..%u, default %u)\n"
	           "      --debug-dir DIR look for debug files in DIR too (repeated), before\n"
	           "                      " SYMBOLIZE_DEBUG_DIR "\n"
	           "      --offline       ask no debuginfod server (DEBUGINFOD_URLS)\n"
	           "  -h, --help          print this help\n"
	           "  -V, --version       print the version\n",
	        usage_line, PERF_WAIT_MS / 1000, STACKDUMP_MAX_FRAMES, STACKDUMP_STACK_COPY_MIN,
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

/* Prints thread TID's stack ST, taken by ptrace or by perf (PERF), whose
 * taking returned R: a header line naming the thread, its process and the
 * stop, then the frames; or, when R < 0, ST's error on stderr.  Frees ST.
 * Returns R. */
static int print_one(struct symbolize *names, pid_t pid, pid_t tid, struct stackdump_stack *st,
                     int r, bool addresses, bool perf)
{
	struct stackdump_stack named;
	uint64_t hash = st->hash;   /* of the unwind, as the daemon stores it */

	if (r < 0) {
		fprintf(stderr, "stackdump: %s\n", st->error);
		stackdump_stack_free(st);
		return r;
	}
	/* Names, source lines and inlined calls, after the thread runs again
	 * (as stored when out of memory). */
	if (names && symbolize_stack(names, st, SYMBOLIZE_INSTRUCTIONS, &named) == 0) {
		stackdump_stack_free(st);
		*st = named;
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
	if (perf)
		printf("), sampled by perf, not stopped");
	else
		printf("), stopped %" PRIu64 " µs", (st->stop_ns + 500) / 1000);
	printf(", stack hash %016" PRIx64 "\n", hash);
	if (addresses)
		print_with_addresses(st);
	else
		stackdump_print(st, "  ", stdout);
	/* The frames on stdout first, so that the reason follows them on a
	 * terminal. */
	fflush(stdout);
	if (st->error[0])
		fprintf(stderr, "stackdump: %s\n", st->error);
	stackdump_stack_free(st);
	return 0;
}

struct dump_options {
	int max_frames;
	bool addresses;
	bool perf;
	size_t stack_copy;
};

/* One thread of a perf dump: its sampler until its first sample came. */
struct perf_thread {
	struct stackdump *sd;
	pid_t pid, tid;
	int max_frames;
	struct perfsample *ps;
	struct stackdump_stack st;
	int r;                   /* 1 while waiting; then as stackdump_thread */
};

static int first_sample(const struct perfsample_sample *s, void *arg)
{
	struct perf_thread *t = arg;

	t->r = stackdump_thread_copy(t->sd, t->pid, t->tid, &s->copy, t->max_frames, &t->st);
	return -ECANCELED;   /* one is enough */
}

static void set_error(struct stackdump_stack *st, const char *msg)
{
	snprintf(st->error, sizeof(st->error), "%s", msg);
}

/* Samples threads TIDS[0..N) of process PID with perf at once and waits
 * (PERF_WAIT_MS at most) for each one's first sample, unwound into T[i].st
 * with T[i].r as stackdump_thread returns; a thread with no sample by then
 * gets -ETIMEDOUT and a reason. */
static void perf_take(struct stackdump *sd, pid_t pid, const pid_t *tids, size_t n,
                      const struct dump_options *o, struct perf_thread *t)
{
	size_t waiting = 0;

	for (size_t i = 0; i < n; i++) {
		char why[sizeof(t[i].st.error)];
		t[i] = (struct perf_thread){ .sd = sd, .pid = pid, .tid = tids[i],
		                             .max_frames = o->max_frames, .r = 1 };
		size_t cap = o->stack_copy < PERFSAMPLE_STACK_MAX ? o->stack_copy : 0;
		t[i].r = perfsample_open(tids[i], PERF_PERIOD_NS, cap, &t[i].ps, why, sizeof(why));
		if (t[i].r < 0)
			set_error(&t[i].st, why);
		else
			t[i].r = 1, waiting++;
	}
	struct timespec now, end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += PERF_WAIT_MS / 1000;
	for (;;) {
		for (size_t i = 0; i < n; i++) {
			if (t[i].r != 1)
				continue;
			int r = perfsample_read(t[i].ps, first_sample, &t[i]);
			if (t[i].r != 1 || r == -ESRCH || r == -ENOEXEC) {
				if (t[i].r == 1) {
					t[i].r = -ESRCH;
					snprintf(t[i].st.error, sizeof(t[i].st.error), "tid %d %s",
					         (int)t[i].tid, r == -ESRCH ? "exited" : "exec'd");
				}
				waiting--;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (waiting == 0 || now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		perfsample_close(t[i].ps);
		t[i].ps = NULL;
		if (t[i].r == 1) {
			t[i].r = -ETIMEDOUT;
			snprintf(t[i].st.error, sizeof(t[i].st.error),
			         "tid %d did not run in user space within %d ms: no perf sample "
			         "(perf samples only a running thread; -m ptrace stops it)",
			         (int)t[i].tid, PERF_WAIT_MS);
		}
	}
}

/* Dumps threads TIDS[0..N) of process PID and prints them, one after the
 * other (ptrace: each stopped alone; perf: all sampled at once), a blank
 * line between two.  Returns how many were dumped. */
static long dump_threads(struct stackdump *sd, struct symbolize *names, pid_t pid,
                         const pid_t *tids, size_t n, const struct dump_options *o)
{
	struct perf_thread *t = NULL;
	long dumped = 0;

	if (o->perf) {
		if (!(t = calloc(n, sizeof(*t)))) {
			perror("stackdump");
			return 0;
		}
		perf_take(sd, pid, tids, n, o, t);
	}
	for (size_t i = 0; i < n; i++) {
		struct stackdump_stack st;
		int r;
		if (o->perf) {
			st = t[i].st;
			r = t[i].r;
		} else {
			r = stackdump_thread(sd, pid, tids[i], o->max_frames, &st);
		}
		if (dumped > 0 && r >= 0)
			putchar('\n');
		if (print_one(names, pid, tids[i], &st, r, o->addresses, o->perf) >= 0)
			dumped++;
	}
	free(t);
	return dumped;
}

/* Dumps every thread that process PID has when it starts; a thread that
 * exits or cannot be dumped is said on stderr and the next one follows.
 * Threads created meanwhile are not dumped.  Returns how many threads
 * were dumped, or -errno when the threads cannot be listed. */
static long dump_process(struct stackdump *sd, struct symbolize *names, pid_t pid,
                         const struct dump_options *o)
{
	pid_t *tids;
	size_t n;
	int e = procfs_read_tasks(pid, &tids, &n);

	if (e < 0)
		return e;
	long dumped = dump_threads(sd, names, pid, tids, n, o);
	free(tids);
	return dumped;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addresses", no_argument, NULL, 'a' },
		{ "mode", required_argument, NULL, 'm' },
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
	struct dump_options o = { .max_frames = 256 };
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":am:n:p:s:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_num(optarg, 1, STACKDUMP_MAX_FRAMES, &max_frames))
				return usage_error("-n wants a number of frames in 1..1024, not \"%s\"",
				                   optarg);
			break;
		case 'a':
			o.addresses = true;
			break;
		case 'm':
			if (strcmp(optarg, "perf") != 0 && strcmp(optarg, "ptrace") != 0)
				return usage_error("-m wants perf or ptrace, not \"%s\"", optarg);
			o.perf = strcmp(optarg, "perf") == 0;
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
	o.max_frames = (int)max_frames;
	o.stack_copy = (size_t)stack_copy;
	if (ppid) {
		long dumped = dump_process(sd, names, pid, &o);

		if (dumped < 0)
			fprintf(stderr, "stackdump: cannot list the threads of pid %d: %s\n", (int)pid,
			        strerror((int)-dumped));
		else if (dumped == 0)
			fprintf(stderr, "stackdump: no thread of pid %d could be dumped\n", (int)pid);
		rc = dumped > 0 ? 0 : 1;
	} else {
		pid_t one = (pid_t)tid;
		rc = dump_threads(sd, names, pid, &one, 1, &o) == 1 ? 0 : 1;
	}
	symbolize_close(names);
	stackdump_free(sd);
	return fflush(stdout) == 0 ? rc : 1;
}
