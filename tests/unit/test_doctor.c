/* doctor: the pure checks, fed with plain values (the /proc parsers they
 * read through are procfs's, in test_procfs.c). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include <stdlib.h>
#include "cpumond/doctor.h"

#define CAP_ALL     0x000001ffffffffffull   /* root on a 6.x kernel */
#define CAP_PTRACE  (1ull << 19)
#define CAP_NICE    (1ull << 23)

static void test_ptrace_scope(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_ptrace_scope(-1, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_ptrace_scope(0, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);

	doctor_check_ptrace_scope(1, CAP_PTRACE, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "ptrace_scope=1: ptrace of processes other than its own "
	                    "children needs CAP_SYS_PTRACE, which cpumond has");
	doctor_check_ptrace_scope(1, CAP_NICE, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.fix, "AmbientCapabilities=CAP_SYS_PTRACE"));

	doctor_check_ptrace_scope(2, CAP_ALL, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_ptrace_scope(2, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);

	/* 3 beats every capability. */
	doctor_check_ptrace_scope(3, CAP_ALL, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.message, "ptrace_scope=3 forbids ptrace for everyone"));
	assert_non_null(strstr(r.fix, "reboot"));

	doctor_check_ptrace_scope(7, CAP_ALL, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
}

static void test_stall_capabilities(void **state)
{
	struct doctor_result r;
	const uint64_t ptrace = 1ull << 19, dac = 1ull << 2, admin = 1ull << 21;
	(void)state;
	doctor_check_stall_read(ptrace, 998, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_stall_read(ptrace, 998, 6000, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.message, "without CAP_DAC_READ_SEARCH"));
	assert_non_null(strstr(r.fix, "AmbientCapabilities="));
	doctor_check_stall_read(ptrace | dac, 998, 6000, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_stall_kernel_stack(ptrace | dac, 6000, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_non_null(strstr(r.message, "no kernel stack"));
	doctor_check_stall_kernel_stack(admin, 6000, &r);
	assert_non_null(strstr(r.message, "have the kernel stack"));
}

static void test_capability(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_capability(CAP_PTRACE, 998, 1, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.fix, "");

	doctor_check_capability(0, 998, 1, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.fix, "AmbientCapabilities=CAP_SYS_PTRACE"));
	assert_non_null(strstr(r.fix, "setcap"));     /* no_new_privs: file caps are void */

	doctor_check_capability(0, 998, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_null(strstr(r.fix, "setcap"));

	/* Root with a bounding set that dropped it. */
	doctor_check_capability(CAP_ALL & ~CAP_PTRACE, 0, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.fix, "CapabilityBoundingSet="));
}

static void test_seccomp(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_seccomp(0, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_seccomp(2, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_seccomp(2, EPERM, &r);                 /* SystemCallErrorNumber=EPERM */
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.fix, "@debug"));
	doctor_check_seccomp(2, -SIGSYS, &r);               /* the default: kill */
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.message, "kills"));
	doctor_check_seccomp(1, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
}

static void test_realtime(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_realtime(0, 1, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_realtime(CAP_NICE, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_realtime(CAP_PTRACE, 0, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.fix, "LimitRTPRIO=1"));
}

/* Which capture the daemon uses, and why, word for word. */
static void test_capture(void **state)
{
	static const char refused[] = "perf_event_open refused: kernel.perf_event_paranoid is 3 "
		"and the process has no CAP_PERFMON (set kernel.perf_event_paranoid to 2 or grant "
		"CAP_PERFMON)";
	struct doctor_result r;
	(void)state;
	doctor_check_capture(CONFIG_CAPTURE_PTRACE, 3, false, 0, "", &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "capture = ptrace: each sample stops its thread for tens of µs");
	doctor_check_capture(CONFIG_CAPTURE_AUTO, 3, true, 0, "", &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "capture = auto: perf, no thread is stopped (cpumond has "
	                    "CAP_PERFMON); CPython processes by ptrace, for their Python frames");
	doctor_check_capture(CONFIG_CAPTURE_PERF, 2, false, 0, "", &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "capture = perf: perf, no thread is stopped "
	                    "(kernel.perf_event_paranoid is 2)");
	doctor_check_capture(CONFIG_CAPTURE_AUTO, 3, false, -EACCES, refused, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.message, "capture = auto: ptrace, each sample a stop: "
	                    "perf_event_open refused: kernel.perf_event_paranoid is 3 and the "
	                    "process has no CAP_PERFMON (set kernel.perf_event_paranoid to 2 or "
	                    "grant CAP_PERFMON)");
	assert_string_equal(r.fix, "give it CAP_PERFMON: AmbientCapabilities= and "
	                    "CapabilityBoundingSet= in the unit name it beside CAP_SYS_PTRACE (or "
	                    "set kernel.perf_event_paranoid=2)");
	doctor_check_capture(CONFIG_CAPTURE_PERF, 3, false, -EACCES, refused, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.message, "capture = perf: no stacks: perf_event_open refused"));
	assert_non_null(strstr(r.fix, "CAP_PERFMON"));
	/* No perf events in this kernel: nothing to grant. */
	doctor_check_capture(CONFIG_CAPTURE_PERF, INT_MIN, false, -ENOENT, "no such event", &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_string_equal(r.fix, "set capture = auto or ptrace");
	doctor_check_capture(CONFIG_CAPTURE_AUTO, INT_MIN, false, -ENOENT, "no such event", &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.fix, "");
}

static void test_access(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_access(4242, "nginx", 0, 0, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_access(4242, "nginx", 0, EPERM, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_string_equal(r.message, "cannot ptrace nginx[4242]: Operation not permitted");
	assert_non_null(strstr(r.fix, "CAP_SYS_PTRACE"));
	/* Refused although it has the capability: something else is in the way. */
	doctor_check_access(4242, "nginx", 0, EPERM, CAP_PTRACE, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.fix, "LSM"));
	doctor_check_access(4242, "nginx", EACCES, 0, 0, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_non_null(strstr(r.message, "/proc"));
	/* Exited between the listing and the check: nothing wrong. */
	doctor_check_access(4242, "nginx", ENOENT, 0, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_access(4242, "nginx", 0, ESRCH, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
}

static void test_tracer(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_tracer(4200, 4242, 0, "", 100, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_tracer(4200, 4242, 311, "gdb", 100, &r);
	assert_int_equal(r.level, DOCTOR_FAIL);
	assert_string_equal(r.message, "tid 4242 of pid 4200 is traced by pid 311 (gdb): its "
	                    "stacks cannot be taken while it is");
	assert_string_equal(r.fix, "detach gdb (pid 311) from pid 4200");
	/* The daemon itself, caught in the middle of a dump. */
	doctor_check_tracer(4200, 4242, 312, "cpumond", 100, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	doctor_check_tracer(4200, 4242, 100, "", 100, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	doctor_check_tracer(4200, 4242, 311, "", 100, &r);
	assert_non_null(strstr(r.message, "(?)"));
}

/* doctor_check_exe with the names found when a stack is taken (SYMSRC) and
 * when it is read (READ, DEBUG_FILE), PACKAGE and DEBUGINFOD. */
static void check_exe(const char *exe, int err, const char *build_id, const char *symsrc,
                      enum symbolize_source read, const char *debug_file, const char *package,
                      bool debuginfod, struct doctor_result *r)
{
	struct doctor_names n = {
		.build_id = build_id, .symsrc = symsrc, .read = read, .debug_file = debug_file,
		.debuginfod = debuginfod, .package = package, .codename = "bookworm",
	};

	doctor_check_exe(exe, err, &n, r);
}

static void test_exe(void **state)
{
	struct doctor_result r;
	(void)state;
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", ".symtab", SYMBOLIZE_DWARF, NULL, "", false, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "/usr/sbin/nginx has build-id 4f1e2a9b0c7d; names when a stack "
	                    "is taken: symbols (.symtab); when tail and report read it: names, "
	                    "file:line and inlined calls from its DWARF");
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", "debug file", SYMBOLIZE_DEBUG_FILE,
	          "/usr/lib/debug/.build-id/4f/1e2a9b0c7d.debug", "", false, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_non_null(strstr(r.message, "taken: debug file; when tail and report read it: names, "
	                       "file:line and inlined calls from its debug file "
	                       "/usr/lib/debug/.build-id/4f/1e2a9b0c7d.debug"));
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", ".dynsym+.gnu_debugdata", SYMBOLIZE_SYMBOLS,
	          NULL, "nginx", false, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_non_null(strstr(r.message, "MiniDebugInfo (.gnu_debugdata); when tail and report read "
	                       "it: the names stored when it was taken, no file:line"));
	/* Stripped, from a package: its -dbgsym package, or debuginfod. */
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", ".dynsym", SYMBOLIZE_SYMBOLS, NULL,
	          "nginx-core", false, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.message, "stripped"));
	assert_non_null(strstr(r.message, "taken: exported names only (.dynsym), when tail and "
	                       "report read it: exported names only"));
	assert_string_equal(r.fix, "apt install nginx-core-dbgsym from Debian's debug archive (deb "
	                    "http://deb.debian.org/debian-debug bookworm-debug main), or run tail and "
	                    "report with DEBUGINFOD_URLS=https://debuginfod.debian.net");
	/* Not from a package: a debug file by build-id. */
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", "", SYMBOLIZE_NONE, NULL, "", false, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.fix, "/usr/lib/debug/.build-id/4f/1e2a9b0c7d.debug"));
	assert_non_null(strstr(r.fix, "--debug-dir"));
	assert_non_null(strstr(r.fix, "DEBUGINFOD_URLS"));
	/* A debug file installed since: the readers name it, the daemon not. */
	check_exe("/opt/x", 0, "4f1e2a9b0c7d", "", SYMBOLIZE_DEBUG_FILE, "/opt/.debug/x.debug", "",
	          false, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_non_null(strstr(r.message, "taken: none; when tail and report read it: names, "
	                       "file:line and inlined calls from its debug file /opt/.debug/x.debug"));
	/* Servers to ask: not asked here. */
	check_exe("/usr/sbin/nginx", 0, "4f1e2a9b0c7d", ".dynsym", SYMBOLIZE_SYMBOLS, NULL, "", true,
	          &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_non_null(strstr(r.message, "read it: debuginfod (DEBUGINFOD_URLS; not asked here)"));
	check_exe("/opt/x", 0, "", ".symtab", SYMBOLIZE_NONE, NULL, "", false, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.message, "no build-id"));
	assert_non_null(strstr(r.fix, "--build-id"));
	check_exe("/opt/x", EACCES, "", "", SYMBOLIZE_NONE, NULL, "", false, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
}

static void test_dpkg_owner(void **state)
{
	char pkg[32];
	(void)state;
	assert_true(doctor_parse_dpkg_owner("coreutils: /usr/bin/sha256sum\n", "/usr/bin/sha256sum",
	                                    pkg, sizeof pkg));
	assert_string_equal(pkg, "coreutils");
	/* Several packages, an architecture: the first package. */
	assert_true(doctor_parse_dpkg_owner("libc6:amd64, libc6-dev:amd64: /usr/lib/x\n",
	                                    "/usr/lib/x", pkg, sizeof pkg));
	assert_string_equal(pkg, "libc6");
	/* A diversion, then the owner. */
	assert_true(doctor_parse_dpkg_owner("diversion by dash from: /bin/sh\n"
	                                    "diversion by dash to: /bin/sh.distrib\n"
	                                    "dash: /bin/sh\n", "/bin/sh", pkg, sizeof pkg));
	assert_string_equal(pkg, "dash");
	/* A line of another path (dpkg -S matches substrings), none, a name
	 * too long. */
	assert_false(doctor_parse_dpkg_owner("gzip: /bin/gzip-extra\n", "/bin/gzip", pkg, sizeof pkg));
	assert_string_equal(pkg, "");
	assert_false(doctor_parse_dpkg_owner("", "/bin/gzip", pkg, sizeof pkg));
	assert_false(doctor_parse_dpkg_owner("a-very-long-package-name-indeed-yes: /x", "/x", pkg, 8));
}

static void test_db_file(void **state)
{
	struct doctor_result r;
	(void)state;
	doctor_check_db_file("/var/lib/cpumond/cpumond.db", 0, S_IFREG | 0640, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_db_file("/var/lib/cpumond/cpumond.db-wal", 0, S_IFREG | 0600, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.fix, "chmod g+r /var/lib/cpumond/cpumond.db-wal");
	doctor_check_db_file("/var/lib/cpumond", 0, S_IFDIR | 0750, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_db_file("/var/lib/cpumond", 0, S_IFDIR | 0740, &r);   /* no x: no entry */
	assert_int_equal(r.level, DOCTOR_WARN);
	doctor_check_db_file("/var/lib/cpumond/cpumond.db", ENOENT, 0, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	doctor_check_db_file("/var/lib/cpumond/cpumond.db", EACCES, 0, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
}

static const char watches_conf[] =
	"[watch web]\n"                  /* line 1 */
	"comm = nginx\n"
	"[watch py]\n"                   /* 3 */
	"cmdline = ^python3 -c\n"
	"[watch java]\n"                 /* 5 */
	"exe = /usr/bin/java\n"
	"[watch late]\n"                 /* 7 */
	"comm = nginx\n"
	"[watch db]\n"                   /* 9 */
	"pidfile = /run/db.pid\n"
	"[watch one]\n"                  /* 11 */
	"pid = 4242\n"
	"[watch workers]\n"              /* 13 */
	"cmdline = worker$\n"
	"user = 0\n"
	"[watch svc]\n"                  /* 16 */
	"unit = nginx*.service\n"
	"[watch slice]\n"                /* 18 */
	"cgroup = ^/system\\.slice/\n";

enum { W_WEB, W_PY, W_JAVA, W_LATE, W_DB, W_ONE, W_WORKERS, W_SVC, W_SLICE };

static void test_watch_matches(void **state)
{
	struct watch_proc procs[8];
	struct doctor_result r;
	struct config cfg;
	(void)state;
	assert_int_equal(config_parse_string(watches_conf, "t.conf", &cfg, stderr), 0);
	for (int i = 0; i < 7; i++)
		procs[i] = (struct watch_proc){ .pid = 100 + i, .watch = W_WEB, .comm = "nginx" };
	procs[7] = (struct watch_proc){ .pid = 4242, .watch = W_ONE, .comm = "a.out" };
	doctor_check_watch(&cfg, W_WEB, procs, 8, NULL, NULL, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "watch \"web\" matches 7 processes: nginx[100], nginx[101], "
	                    "nginx[102], nginx[103], nginx[104] and 2 more");
	doctor_check_watch(&cfg, W_ONE, procs, 8, NULL, NULL, &r);
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "watch \"one\" matches 1 process: a.out[4242]");
	doctor_check_watch(&cfg, W_WEB, procs + 5, 3, NULL, NULL, &r);
	assert_string_equal(r.message, "watch \"web\" matches 2 processes: nginx[105], nginx[106]");
	/* Where each runs, when known. */
	{
		const char *origins[] = { "nginx.service", "", "/system.slice/a b", NULL };

		doctor_check_watch(&cfg, W_WEB, procs + 4, 4, origins, NULL, &r);
		assert_string_equal(r.message, "watch \"web\" matches 3 processes: nginx[104] in "
		                    "nginx.service, nginx[105], nginx[106] in /system.slice/a b");
	}
	config_free(&cfg);
}

static void test_watch_empty(void **state)
{
	struct watch_proc web = { .pid = 100, .watch = W_WEB, .comm = "nginx" };
	struct watch_why why = { 0 };
	struct doctor_result r;
	struct config cfg;
	(void)state;
	assert_int_equal(config_parse_string(watches_conf, "t.conf", &cfg, stderr), 0);

	/* The newcomer's case: argv[0] was /usr/bin/python3 or a pyenv path. */
	doctor_check_watch(&cfg, W_PY, &web, 1, NULL, &why, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.message, "watch \"py\" at t.conf:3 matches no process "
	                    "(cmdline = ^python3 -c)");
	assert_string_equal(r.fix, "argv[0] is often a full path: try cmdline = ^([^ ]*/)?python3 -c");

	strcpy(why.exe_target, "/usr/lib/jvm/java-17-openjdk-amd64/bin/java");
	doctor_check_watch(&cfg, W_JAVA, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"java\" at t.conf:5 matches no process "
	                    "(exe = /usr/bin/java)");
	assert_string_equal(r.fix, "/usr/bin/java is a symbolic link, and exe is matched against "
	                    "the file itself: try exe = /usr/lib/jvm/java-17-openjdk-amd64/bin/java");
	why = (struct watch_why){ .exe_err = ENOENT };
	doctor_check_watch(&cfg, W_JAVA, &web, 1, NULL, &why, &r);
	assert_string_equal(r.fix, "/usr/bin/java: No such file or directory");
	why = (struct watch_why){ 0 };
	doctor_check_watch(&cfg, W_JAVA, &web, 1, NULL, &why, &r);
	assert_string_equal(r.fix, "no process runs /usr/bin/java now: compare with "
	                    "ls -l /proc/PID/exe");

	/* Its processes went to an earlier watch. */
	why = (struct watch_why){ .shadowed = 1, .owner = W_WEB };
	doctor_check_watch(&cfg, W_LATE, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"late\" at t.conf:7 has no process (comm = nginx)");
	assert_string_equal(r.fix, "the process it matches is watched under \"web\", an earlier "
	                    "watch (a process belongs to the first watch it matches): put "
	                    "[watch late] before it");
	why.shadowed = 3;
	doctor_check_watch(&cfg, W_LATE, &web, 1, NULL, &why, &r);
	assert_non_null(strstr(r.fix, "the 3 processes it matches are watched under earlier "
	                       "watches, the first under \"web\""));
	why = (struct watch_why){ 0 };
	doctor_check_watch(&cfg, W_WEB, NULL, 0, NULL, &why, &r);
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.fix, "ps -eo comm"));

	doctor_check_watch(&cfg, W_DB, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"db\" at t.conf:9 matches no process "
	                    "(pidfile = /run/db.pid)");
	assert_non_null(strstr(r.fix, "/run/db.pid holds no pid"));
	why.pidfile_pid = 555;
	doctor_check_watch(&cfg, W_DB, &web, 1, NULL, &why, &r);
	assert_string_equal(r.fix, "/run/db.pid names pid 555, which is gone or is not the "
	                    "program the other selectors name");
	why = (struct watch_why){ 0 };
	doctor_check_watch(&cfg, W_ONE, &web, 1, NULL, &why, &r);
	assert_string_equal(r.fix, "pid 4242 is gone or is not the program the other selectors "
	                    "name");
	/* Every selector is named; an unanchored regex gets the general hint. */
	doctor_check_watch(&cfg, W_WORKERS, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"workers\" at t.conf:13 matches no process "
	                    "(cmdline = worker$, user = 0)");
	assert_non_null(strstr(r.fix, "ps -eo args"));
	doctor_check_watch(&cfg, W_SVC, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"svc\" at t.conf:16 matches no process "
	                    "(unit = nginx*.service)");
	assert_non_null(strstr(r.fix, "ps -eo unit,comm"));
	doctor_check_watch(&cfg, W_SLICE, &web, 1, NULL, &why, &r);
	assert_string_equal(r.message, "watch \"slice\" at t.conf:18 matches no process "
	                    "(cgroup = ^/system\\.slice/)");
	assert_non_null(strstr(r.fix, "the 0:: line of /proc/PID/cgroup"));
	config_free(&cfg);
}

/* Python, node and java processes: what their frames are named from. */
static void test_runtime(void **state)
{
	struct stackdump_runtime rt = { .python = 1, .python_version = "3.11.2",
	                                .perf_map = -ENOENT,
	                                .perf_map_path = "/tmp/perf-7.map" };
	struct doctor_result r;

	(void)state;
	assert_true(doctor_check_runtime(42, "python3.11", "", &rt, false, &r));
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "python3.11[42] runs CPython 3.11.2: its Python frames are read");
	rt.python = -ENOTSUP;
	snprintf(rt.python_version, sizeof rt.python_version, "3.10.13");
	assert_true(doctor_check_runtime(42, "python3.10", "", &rt, false, &r));
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.message, "CPython 3.10.13, whose Python frames are not read"));
	assert_string_equal(r.fix, "run it on CPython 3.11, 3.12 or 3.13");
	rt.python = 0;
	assert_false(doctor_check_runtime(42, "nginx", "", &rt, false, &r));

	assert_true(doctor_check_runtime(7, "node", "node", &rt, false, &r));
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.message, "node[7] has no perf map /tmp/perf-7.map: its JavaScript "
	                    "frames have no names");
	assert_string_equal(r.fix, "start it with node --perf-basic-prof "
	                    "--interpreted-frames-native-stack");
	rt.perf_map = 0;
	rt.perf_map_entries = 2430;
	assert_true(doctor_check_runtime(7, "node", "node", &rt, false, &r));
	assert_int_equal(r.level, DOCTOR_OK);
	assert_string_equal(r.message, "node[7]: its perf map /tmp/perf-7.map names its "
	                    "JavaScript frames (2430 entries)");

	/* java: without -XX:+PreserveFramePointer, then without a map. */
	assert_true(doctor_check_runtime(7, "java", "java", &rt, false, &r));
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_non_null(strstr(r.message, "without -XX:+PreserveFramePointer"));
	assert_non_null(strstr(r.fix, "jcmd 7 Compiler.perfmap"));
	assert_true(doctor_check_runtime(7, "java", "java", &rt, true, &r));
	assert_int_equal(r.level, DOCTOR_OK);
	rt.perf_map = -ENOENT;
	assert_true(doctor_check_runtime(7, "java", "java", &rt, true, &r));
	assert_int_equal(r.level, DOCTOR_WARN);
	assert_string_equal(r.fix, "write it with jcmd 7 Compiler.perfmap (again when new code "
	                    "is compiled)");
	rt.perf_map = -EPERM;
	snprintf(rt.perf_map_why, sizeof rt.perf_map_why, "perf map /tmp/perf-7.map refused: "
	         "owned by uid 4242, not by the process's uid 0 or root");
	assert_true(doctor_check_runtime(7, "java", "java", &rt, true, &r));
	assert_string_equal(r.message, "java[7]: perf map /tmp/perf-7.map refused: owned by uid "
	                    "4242, not by the process's uid 0 or root");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ptrace_scope),
		cmocka_unit_test(test_capability),
		cmocka_unit_test(test_stall_capabilities),
		cmocka_unit_test(test_seccomp),
		cmocka_unit_test(test_realtime),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_access),
		cmocka_unit_test(test_tracer),
		cmocka_unit_test(test_exe),
		cmocka_unit_test(test_dpkg_owner),
		cmocka_unit_test(test_db_file),
		cmocka_unit_test(test_watch_matches),
		cmocka_unit_test(test_watch_empty),
		cmocka_unit_test(test_runtime),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
