#include "cpumond/doctor.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpumond/doctor_internal.h"
#include "cpumond/log.h"
#include "cpumond/watch.h"
#include "procfs/procfs.h"
#include "stackdump/stackdump.h"

/* Per-process checks print at most this many problems each; the rest are
 * counted in one line (all = yes may watch hundreds of processes). */
#define SHOW_MAX 10

/* A watch's line names this many of its processes, then counts the rest. */
#define WATCH_PROCS_SHOWN 5

/* Appends to the string in BUF (LEN bytes); what does not fit is cut. */
__attribute__((format(printf, 3, 4)))
static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	if (n + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

/* ---- the checks ---- */

static const char *const add_ptrace_cap =
	"give it CAP_SYS_PTRACE: AmbientCapabilities=CAP_SYS_PTRACE and "
	"CapabilityBoundingSet=CAP_SYS_PTRACE in the unit, or run it as root";

void doctor_check_ptrace_scope(int scope, uint64_t cap_eff, struct doctor_result *r)
{
	bool cap = has_cap(cap_eff, CAP_BIT_SYS_PTRACE);

	switch (scope) {
	case -1:
		set(r, DOCTOR_OK, "no kernel.yama.ptrace_scope (Yama absent): classic ptrace "
		    "permissions apply");
		break;
	case 0:
		set(r, DOCTOR_OK, "ptrace_scope=0: classic ptrace permissions (same user, or "
		    "CAP_SYS_PTRACE)");
		break;
	case 1:
		if (cap)
			set(r, DOCTOR_OK, "ptrace_scope=1: ptrace of processes other than its own "
			    "children needs CAP_SYS_PTRACE, which cpumond has");
		else {
			set(r, DOCTOR_FAIL, "ptrace_scope=1: without CAP_SYS_PTRACE cpumond may "
			    "ptrace only its own children, not the watched processes");
			set_fix(r, "%s (or set kernel.yama.ptrace_scope=0)", add_ptrace_cap);
		}
		break;
	case 2:
		if (cap)
			set(r, DOCTOR_OK, "ptrace_scope=2: only CAP_SYS_PTRACE may ptrace, and "
			    "cpumond has it");
		else {
			set(r, DOCTOR_FAIL, "ptrace_scope=2: only CAP_SYS_PTRACE may ptrace, and "
			    "cpumond lacks it");
			set_fix(r, "%s", add_ptrace_cap);
		}
		break;
	case 3:
		set(r, DOCTOR_FAIL, "ptrace_scope=3 forbids ptrace for everyone, root included: "
		    "usage is sampled but no stack is taken");
		set_fix(r, "set kernel.yama.ptrace_scope=2 or lower in /etc/sysctl.d/ and reboot "
		        "(3 cannot be lowered while running)");
		break;
	default:
		set(r, DOCTOR_WARN, "ptrace_scope=%d is not a value this cpumond knows", scope);
		set_fix(r, "see the kernel's Documentation/admin-guide/LSM/Yama.rst");
	}
}

void doctor_check_capability(uint64_t cap_eff, long euid, int nnp, struct doctor_result *r)
{
	if (has_cap(cap_eff, CAP_BIT_SYS_PTRACE)) {
		set(r, DOCTOR_OK, "CAP_SYS_PTRACE is effective (uid %ld, no_new_privs=%d)", euid,
		    nnp);
		return;
	}
	set(r, DOCTOR_FAIL, "cpumond lacks CAP_SYS_PTRACE (uid %ld): it can stop threads of "
	    "its own user's processes only", euid);
	if (euid == 0)
		set_fix(r, "root without it: add CAP_SYS_PTRACE to CapabilityBoundingSet= of "
		        "the unit");
	else if (nnp == 1)
		set_fix(r, "add AmbientCapabilities=CAP_SYS_PTRACE to the unit (under "
		        "no_new_privs a setcap on the binary has no effect)");
	else
		set_fix(r, "add AmbientCapabilities=CAP_SYS_PTRACE to the unit, or run it as root");
}

void doctor_check_seccomp(int seccomp, int probe, struct doctor_result *r)
{
	static const char *const fix = "allow the @debug system call set, where ptrace lives: "
	                               "SystemCallFilter=@system-service @debug";

	if (seccomp <= 0) {
		set(r, DOCTOR_OK, "no seccomp filter");
	} else if (seccomp == 1) {
		set(r, DOCTOR_FAIL, "seccomp strict mode: only read, write, exit and sigreturn");
		set_fix(r, "run cpumond without SECCOMP_MODE_STRICT");
	} else if (probe == 0) {
		set(r, DOCTOR_OK, "seccomp filter in place, and it allows ptrace(2)");
	} else if (probe > 0) {
		set(r, DOCTOR_FAIL, "the seccomp filter refuses ptrace(2): %s", strerror(probe));
		set_fix(r, "%s", fix);
	} else {
		set(r, DOCTOR_FAIL, "the seccomp filter kills a process that calls ptrace(2) "
		    "(signal %d): cpumond would die at its first stack", -probe);
		set_fix(r, "%s", fix);
	}
}

void doctor_check_realtime(uint64_t cap_eff, unsigned long long rtprio, struct doctor_result *r)
{
	if (rtprio >= 1 || has_cap(cap_eff, CAP_BIT_SYS_NICE)) {
		set(r, DOCTOR_OK, "the stop window can run at SCHED_FIFO (%s)",
		    rtprio >= 1 ? "RLIMIT_RTPRIO >= 1" : "CAP_SYS_NICE");
		return;
	}
	set(r, DOCTOR_WARN, "RLIMIT_RTPRIO is 0: without SCHED_FIFO a stop may last a "
	    "scheduler tick (milliseconds) on a busy machine instead of ~60 µs");
	set_fix(r, "LimitRTPRIO=1 in the unit (ulimit -r 1 in a shell)");
}

static bool gone(int err)
{
	return err == ENOENT || err == ESRCH;
}

void doctor_check_access(pid_t pid, const char *comm, int proc_err, int mem_err,
                         uint64_t cap_eff, struct doctor_result *r)
{
	if (gone(proc_err) || (proc_err == 0 && gone(mem_err))) {
		set(r, DOCTOR_OK, "%s[%d] exited while being checked", comm, (int)pid);
	} else if (proc_err) {
		set(r, DOCTOR_FAIL, "cannot read the threads of %s[%d] in /proc: %s", comm,
		    (int)pid, strerror(proc_err));
		set_fix(r, "cpumond must see every process in /proc: no hidepid= on /proc, "
		        "and no ProtectProc= other than default or invisible with CAP_SYS_PTRACE");
	} else if (mem_err) {
		set(r, DOCTOR_FAIL, "cannot ptrace %s[%d]: %s", comm, (int)pid, strerror(mem_err));
		if (has_cap(cap_eff, CAP_BIT_SYS_PTRACE))
			set_fix(r, "cpumond has CAP_SYS_PTRACE, so something else refuses: "
			        "kernel.yama.ptrace_scope=3, an LSM policy (AppArmor, SELinux), or "
			        "the process lives in a user namespace above cpumond's (cpumond in a "
			        "container); leave it out of the watches if it cannot be helped");
		else
			set_fix(r, "%s (kernel.yama.ptrace_scope must be 2 or lower)", add_ptrace_cap);
	} else {
		set(r, DOCTOR_OK, "can read and ptrace %s[%d]", comm, (int)pid);
	}
}

void doctor_check_tracer(pid_t pid, pid_t tid, long tracer, const char *tracer_comm,
                         pid_t self, struct doctor_result *r)
{
	const char *name = tracer_comm && tracer_comm[0] ? tracer_comm : "?";

	if (tracer <= 0) {
		set(r, DOCTOR_OK, "tid %d of pid %d is not traced", (int)tid, (int)pid);
	} else if (tracer == self || strcmp(name, "cpumond") == 0) {
		set(r, DOCTOR_WARN, "tid %d of pid %d is traced by pid %ld (%s), taking a stack",
		    (int)tid, (int)pid, tracer, name);
		set_fix(r, "none: the daemon lets go within milliseconds; run the check again");
	} else {
		set(r, DOCTOR_FAIL, "tid %d of pid %d is traced by pid %ld (%s): its stacks "
		    "cannot be taken while it is", (int)tid, (int)pid, tracer, name);
		set_fix(r, "detach %s (pid %ld) from pid %d", name, tracer, (int)pid);
	}
}

/* What SYMSRC (stackdump_sources.symbols) is called in the doctor's words. */
static const char *taken_source(const char *symsrc)
{
	if (!symsrc || !symsrc[0])
		return "none";
	if (strcmp(symsrc, ".symtab") == 0)
		return "symbols (.symtab)";
	if (strstr(symsrc, ".gnu_debugdata"))
		return "MiniDebugInfo (.gnu_debugdata)";
	if (strcmp(symsrc, ".dynsym") == 0)
		return "exported names only (.dynsym)";
	return symsrc;   /* "debug file" */
}

void doctor_check_exe(const char *exe, int err, const struct doctor_names *n,
                      struct doctor_result *r)
{
	const char *symsrc = n->symsrc, *build_id = n->build_id;
	bool names = symsrc && symsrc[0] && strcmp(symsrc, ".dynsym") != 0;
	bool lines = n->read == SYMBOLIZE_DWARF || n->read == SYMBOLIZE_DEBUG_FILE;
	char read[PATH_MAX + 64];

	if (n->read == SYMBOLIZE_DEBUG_FILE && n->debug_file)
		snprintf(read, sizeof read, "names, file:line and inlined calls from its debug file %s",
		         n->debug_file);
	else if (lines)
		snprintf(read, sizeof read, "names, file:line and inlined calls from its DWARF");
	else if (n->debuginfod)
		snprintf(read, sizeof read, "debuginfod (DEBUGINFOD_URLS; not asked here)");
	else
		snprintf(read, sizeof read, "%s", names ? "the names stored when it was taken, "
		         "no file:line" : n->read == SYMBOLIZE_SYMBOLS ? "exported names only" : "none");
	if (err) {
		set(r, DOCTOR_WARN, "cannot read the executable %s: %s (names will be missing)",
		    exe, strerror(err));
		set_fix(r, "cpumond reads /proc/PID/exe with CAP_SYS_PTRACE and the file by its "
		        "path: make it readable by user cpumond");
	} else if (!build_id || !build_id[0]) {
		set(r, DOCTOR_WARN, "%s has no build-id: its stacks are told apart by path only, "
		    "and separate debug files cannot be found", exe);
		set_fix(r, "link it with -Wl,--build-id");
	} else if (!names && !lines && !n->debuginfod) {
		set(r, DOCTOR_WARN, "%s is stripped: frames inside it will show as module+offset; "
		    "names when a stack is taken: %s, when tail and report read it: %s (no "
		    "symbols, debug file, MiniDebugInfo or debuginfod)", exe, taken_source(symsrc), read);
		if (n->package && n->package[0])
			set_fix(r, "apt install %s-dbgsym from Debian's debug archive (deb "
			        "http://deb.debian.org/debian-debug %s-debug main), or run tail and "
			        "report with DEBUGINFOD_URLS=https://debuginfod.debian.net", n->package,
			        n->codename && n->codename[0] ? n->codename : "bookworm");
		else
			set_fix(r, "install its debug file as " STACKDUMP_DEBUG_DIR "/.build-id/%.2s/%s.debug "
			        "(or give tail and report --debug-dir DIR), run them with DEBUGINFOD_URLS "
			        "naming a server that has it, or build it without stripping .symtab",
			        build_id, build_id + 2);
	} else {
		set(r, DOCTOR_OK, "%s has build-id %.12s; names when a stack is taken: %s; when "
		    "tail and report read it: %s", exe, build_id, taken_source(symsrc), read);
	}
}

bool doctor_parse_dpkg_owner(const char *out, const char *path, char *pkg, size_t len)
{
	size_t plen = strlen(path);

	if (len)
		pkg[0] = '\0';
	for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1
	                                                                     : NULL) {
		const char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);
		const char *sep = strstr(line, ": ");
		size_t n;

		if (strncmp(line, "diversion ", 10) == 0 || !sep || sep > end ||
		    (size_t)(end - sep - 2) != plen || memcmp(sep + 2, path, plen) != 0)
			continue;
		n = strcspn(line, ":, ");
		if (n == 0 || n >= len)
			return false;
		memcpy(pkg, line, n);
		pkg[n] = '\0';
		return true;
	}
	return false;
}

bool doctor_check_runtime(pid_t pid, const char *comm, const char *kind,
                          const struct stackdump_runtime *rt, bool preserve_fp,
                          struct doctor_result *r)
{
	bool node = strcmp(kind, "node") == 0, java = strcmp(kind, "java") == 0;
	const char *what = node ? "JavaScript" : "compiled Java";

	if (rt->python == 1) {
		set(r, DOCTOR_OK, "%s[%d] runs CPython %s: its Python frames are read", comm,
		    (int)pid, rt->python_version);
		return true;
	}
	if (rt->python == -ENOTSUP) {
		set(r, DOCTOR_WARN, "%s[%d] runs CPython %s, whose Python frames are not read: its "
		    "stacks show the interpreter's C frames", comm, (int)pid, rt->python_version);
		set_fix(r, "run it on CPython 3.11, 3.12 or 3.13");
		return true;
	}
	if (!node && !java)
		return false;
	if (java && !preserve_fp) {
		set(r, DOCTOR_WARN, "%s[%d] runs without -XX:+PreserveFramePointer: the callers of "
		    "its compiled methods are lost", comm, (int)pid);
		set_fix(r, "start it with java -XX:+PreserveFramePointer, then write its perf map "
		        "with jcmd %d Compiler.perfmap", (int)pid);
	} else if (rt->perf_map == 0) {
		set(r, DOCTOR_OK, "%s[%d]: its perf map %s names its %s frames (%zu entries)", comm,
		    (int)pid, rt->perf_map_path, what, rt->perf_map_entries);
	} else if (rt->perf_map == -ENOENT) {
		set(r, DOCTOR_WARN, "%s[%d] has no perf map %s: its %s frames have no names", comm,
		    (int)pid, rt->perf_map_path, what);
		if (node)
			set_fix(r, "start it with node --perf-basic-prof "
			        "--interpreted-frames-native-stack");
		else
			set_fix(r, "write it with jcmd %d Compiler.perfmap (again when new code is "
			        "compiled)", (int)pid);
	} else {
		set(r, DOCTOR_WARN, "%s[%d]: %s", comm, (int)pid,
		    rt->perf_map_why[0] ? rt->perf_map_why : "its perf map cannot be read");
		set_fix(r, "the perf map must be a regular file of the process's user or root");
	}
	return true;
}

void doctor_check_db_file(const char *path, int err, unsigned mode, struct doctor_result *r)
{
	unsigned need = S_ISDIR(mode) ? 050 : 040;

	if (err == ENOENT)
		set(r, DOCTOR_OK, "%s does not exist yet", path);
	else if (err) {
		set(r, DOCTOR_WARN, "cannot stat %s: %s", path, strerror(err));
		set_fix(r, "run cpumond doctor as root, or as a member of group cpumond");
	} else if ((mode & need) != need) {
		set(r, DOCTOR_WARN, "%s has mode %04o: members of group cpumond cannot %s it", path,
		    mode & 07777, S_ISDIR(mode) ? "enter" : "read");
		set_fix(r, "chmod g+%s %s", S_ISDIR(mode) ? "rx" : "r", path);
	} else {
		set(r, DOCTOR_OK, "%s is readable by its group (mode %04o)", path, mode & 07777);
	}
}

/* WC's selectors as written: "comm = nginx, user = www". */
static void put_selectors(const struct watch_config *wc, char *buf, size_t len)
{
	static const char *const key[] = { "pid", "pidfile", "comm", "exe", "cmdline", "user",
	                                   "unit", "cgroup", "all" };
	char pid[16];
	const char *val[] = { wc->pid ? pid : NULL, wc->pidfile, wc->comm, wc->exe, wc->cmdline,
	                      wc->user, wc->unit, wc->cgroup, wc->all ? "yes" : NULL };

	snprintf(pid, sizeof pid, "%d", (int)wc->pid);
	buf[0] = '\0';
	for (size_t k = 0; k < sizeof key / sizeof *key; k++)
		if (val[k])
			append(buf, len, "%s%s = %s", buf[0] ? ", " : "", key[k], val[k]);
}

/* An earlier watch took the processes WC matches. */
static void set_shadowed_fix(struct doctor_result *r, const struct config *cfg,
                             const struct watch_config *wc, const struct watch_why *why)
{
	if (why->shadowed == 1)
		set_fix(r, "the process it matches is watched under \"%s\", an earlier watch",
		        cfg->watches[why->owner].name);
	else
		set_fix(r, "the %zu processes it matches are watched under earlier watches, the "
		        "first under \"%s\"", why->shadowed, cfg->watches[why->owner].name);
	/* all = yes after the others is a catch-all, as meant. */
	if (!wc->all)
		append(r->fix, sizeof r->fix, " (a process belongs to the first watch it matches): "
		       "put [watch %s] before %s", wc->name, why->shadowed == 1 ? "it" : "them");
}

/* What explains an empty watch, most specific first: an earlier watch took
 * its processes, its pid is gone, its exe names a link, the selector that
 * trips people up most (a cmdline anchored on a bare program name, while
 * argv[0] is the path a program was started by: /usr/bin/python3,
 * /root/.pyenv/versions/3.11.7/bin/python3), else where to compare. */
static void set_watch_fix(struct doctor_result *r, const struct config *cfg,
                          const struct watch_config *wc, const struct watch_why *why)
{
	const char *re = wc->cmdline;

	if (why->shadowed)
		set_shadowed_fix(r, cfg, wc, why);
	else if (wc->pidfile && why->pidfile_pid > 0)
		set_fix(r, "%s names pid %d, which is gone or is not the program the other "
		        "selectors name", wc->pidfile, (int)why->pidfile_pid);
	else if (wc->pidfile)
		set_fix(r, "%s holds no pid: is the service running, and does it write its pid "
		        "there?", wc->pidfile);
	else if (wc->pid)
		set_fix(r, "pid %d is gone or is not the program the other selectors name",
		        (int)wc->pid);
	else if (wc->exe && why->exe_err)
		set_fix(r, "%s: %s", wc->exe, strerror(why->exe_err));
	else if (wc->exe && why->exe_target[0])
		set_fix(r, "%s is a symbolic link, and exe is matched against the file itself: "
		        "try exe = %s", wc->exe, why->exe_target);
	else if (re && re[0] == '^' && (isalnum((unsigned char)re[1]) || re[1] == '_'))
		set_fix(r, "argv[0] is often a full path: try cmdline = ^([^ ]*/)?%s", re + 1);
	else if (wc->comm)
		set_fix(r, "comm is the executable's file name, or a #! script's, cut to 15 "
		        "bytes: compare with ps -eo comm");
	else if (re)
		set_fix(r, "the command line is the arguments joined by spaces, argv[0] as the "
		        "program was started: compare with ps -eo args");
	else if (wc->exe)
		set_fix(r, "no process runs %s now: compare with ls -l /proc/PID/exe", wc->exe);
	else if (wc->unit)
		set_fix(r, "a unit is named after the cgroup (/system.slice/nginx.service is "
		        "nginx.service): compare with ps -eo unit,comm");
	else if (wc->cgroup)
		set_fix(r, "the cgroup is the path of the 0:: line of /proc/PID/cgroup (cgroup v2, "
		        "or the unified hierarchy of a hybrid host): compare with it");
	else if (wc->user)
		set_fix(r, "no process of user %s runs now", wc->user);
}

void doctor_check_watch(const struct config *cfg, size_t i, const struct watch_proc *procs,
                        size_t nprocs, const char *const *origins, const struct watch_why *why,
                        struct doctor_result *r)
{
	const struct watch_config *wc = &cfg->watches[i];
	char list[sizeof r->message] = "", where[PATH_MAX + 32] = "", sel[320];
	size_t n = 0;

	for (size_t k = 0; k < nprocs; k++) {
		if (procs[k].watch != i)
			continue;
		if (n++ >= WATCH_PROCS_SHOWN)
			continue;
		append(list, sizeof list, "%s%s[%d]", n > 1 ? ", " : "", procs[k].comm,
		       (int)procs[k].pid);
		if (origins && origins[k] && origins[k][0])
			append(list, sizeof list, " in %s", origins[k]);
	}
	if (n > WATCH_PROCS_SHOWN)
		append(list, sizeof list, " and %zu more", n - WATCH_PROCS_SHOWN);
	if (n) {
		set(r, DOCTOR_OK, "watch \"%s\" matches %zu %s: %s", wc->name, n,
		    log_plural(n, "process", "processes"), list);
		return;
	}
	if (cfg->path && wc->line > 0)
		snprintf(where, sizeof where, " at %s:%d", cfg->path, wc->line);
	put_selectors(wc, sel, sizeof sel);
	set(r, DOCTOR_WARN, "watch \"%s\"%s %s no process (%s)", wc->name, where,
	    why->shadowed ? "has" : "matches", sel);
	set_watch_fix(r, cfg, wc, why);
}

/* ---- the readers ---- */

static int read_ptrace_scope(void)
{
	long v;

	return procfs_read_sysctl("kernel/yama/ptrace_scope", &v) < 0 ? -1 : (int)v;
}

/* Calls ptrace(2) in a child, which inherits the seccomp filter: a filter
 * that kills must not kill cpumond.  PTRACE_PEEKDATA of oneself gives ESRCH
 * when the call is allowed.  Returns as doctor_check_seccomp's PROBE. */
static int probe_ptrace(void)
{
	int status;
	pid_t child = fork();

	if (child < 0)
		return 0;       /* cannot tell: say nothing */
	if (child == 0) {
		long rc;

		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);   /* no core file for a SIGSYS */
		rc = syscall(SYS_ptrace, PTRACE_PEEKDATA, getpid(), 0, 0);
		_exit(rc < 0 && errno != ESRCH ? (errno & 0x7f) : 0);
	}
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return 0;
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

/* Whether the kernel would let cpumond PTRACE_ATTACH to PID, without
 * stopping it: process_vm_readv asks the very same question
 * (PTRACE_MODE_ATTACH_REALCREDS, Yama included) before it reads, and a
 * byte at address 0 is never there.  (Opening /proc/PID/mem would also
 * need the file's owner, which CAP_SYS_PTRACE is not.)  It takes the
 * target's memory-map lock for the failed read, like any such read.
 * Returns 0 or the errno that refuses. */
static int probe_attach(pid_t pid)
{
	char byte;
	struct iovec local = { &byte, 1 }, remote = { NULL, 1 };

	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) < 0 && errno != EFAULT)
		return errno == EACCES ? EPERM : errno;
	return 0;
}

struct reporter {
	const struct config *cfg;
	FILE *out;          /* doctor_run; NULL: log (doctor_preflight) */
	int failures;
};

static void emit(struct reporter *rp, const struct doctor_result *r)
{
	static const char *const tag[] = { "ok  ", "warn", "FAIL" };

	if (r->level == DOCTOR_FAIL)
		rp->failures++;
	if (rp->out) {
		fprintf(rp->out, "%s %s%s%s\n", tag[r->level], r->message, r->fix[0] ? "  fix: " : "",
		        r->fix);
		return;
	}
	if (r->level == DOCTOR_OK)
		log_msg(LOG_DEBUG, "check: %s", r->message);
	else
		log_msg(r->level == DOCTOR_FAIL ? LOG_WARNING : LOG_NOTICE, "%s%s%s", r->message,
		        r->fix[0] ? "; fix: " : "", r->fix);
}

/* One kind of per-process check: problems shown up to SHOW_MAX, the rest
 * and the passes counted. */
struct tally {
	size_t ok, shown, hidden_fail, hidden_warn;
};

static void tally_emit(struct reporter *rp, struct tally *t, const struct doctor_result *r)
{
	if (r->level == DOCTOR_OK) {
		t->ok++;
	} else if (t->shown < SHOW_MAX) {
		t->shown++;
		emit(rp, r);
	} else if (r->level == DOCTOR_FAIL) {
		t->hidden_fail++;
		rp->failures++;
	} else {
		t->hidden_warn++;
	}
}

static void tally_end(struct reporter *rp, const struct tally *t, const char *ok_what)
{
	struct doctor_result r;

	if (t->hidden_fail || t->hidden_warn) {
		set(&r, t->hidden_fail ? DOCTOR_FAIL : DOCTOR_WARN, "and %zu more like these "
		    "(%zu failed, %zu %s)", t->hidden_fail + t->hidden_warn, t->hidden_fail,
		    t->hidden_warn, log_plural(t->hidden_warn, "warning", "warnings"));
		rp->failures -= r.level == DOCTOR_FAIL;    /* counted one by one already */
		emit(rp, &r);
	}
	if (t->ok) {
		set(&r, DOCTOR_OK, "%s: %zu", ok_what, t->ok);
		emit(rp, &r);
	}
}

static void check_self(struct reporter *rp, struct procfs_status *self)
{
	struct doctor_result r;
	struct rlimit rl = { 0, 0 };
	int scope = read_ptrace_scope();

	if (procfs_read_status(0, 0, self) < 0) {
		set(&r, DOCTOR_FAIL, "cannot read /proc/self/status");
		set_fix(&r, "mount /proc");
		emit(rp, &r);
		return;
	}
	doctor_check_ptrace_scope(scope, self->cap_eff, &r);
	emit(rp, &r);
	doctor_check_capability(self->cap_eff, self->euid, self->no_new_privs, &r);
	emit(rp, &r);
	doctor_check_seccomp(self->seccomp, self->seccomp == 2 ? probe_ptrace() : 0, &r);
	emit(rp, &r);
	getrlimit(RLIMIT_RTPRIO, &rl);
	doctor_check_realtime(self->cap_eff, (unsigned long long)rl.rlim_cur, &r);
	emit(rp, &r);
	doctor_capture_self(rp->cfg->capture, self->cap_eff, &r);
	emit(rp, &r);
}

/* Access and tracers of one watched process. */
static void check_process(struct reporter *rp, const struct watch_proc *p, uint64_t cap_eff,
                          struct tally *access, struct tally *traced)
{
	struct doctor_result r;
	struct procfs_status st;
	char buf[256], comm[PROCFS_COMM_MAX];
	int proc_err, mem_err;
	pid_t *tids;
	size_t n;

	proc_err = -procfs_read_tasks(p->pid, &tids, &n);
	for (size_t i = 0; i < n; i++) {
		if (i == 0) {
			ssize_t got = procfs_read_file(p->pid, tids[i], "schedstat", buf, sizeof buf);

			proc_err = got < 0 ? (int)-got : 0;
		}
		if (procfs_read_status(p->pid, tids[i], &st) < 0)
			continue;
		comm[0] = '\0';
		if (st.tracer_pid > 0)
			procfs_read_comm((pid_t)st.tracer_pid, 0, comm, sizeof comm);
		doctor_check_tracer(p->pid, tids[i], st.tracer_pid, comm, getpid(), &r);
		tally_emit(rp, traced, &r);
	}
	free(tids);
	mem_err = probe_attach(p->pid);
	doctor_check_access(p->pid, p->comm, proc_err, mem_err, cap_eff, &r);
	tally_emit(rp, access, &r);
}

/* What the names checks of the executables share: the readers' lookup
 * (offline: the doctor asks no server), whether they would ask servers,
 * and the Debian release. */
struct names_check {
	struct symbolize *s;     /* NULL: out of memory */
	bool debuginfod;
	char codename[32];
};

static void names_check_open(struct names_check *nc)
{
	struct symbolize_options o = { .offline = true };
	char line[256];
	FILE *f = fopen("/etc/os-release", "re");

	memset(nc, 0, sizeof *nc);
	if (symbolize_open(&o, &nc->s) < 0)
		nc->s = NULL;
	o.urls = getenv("DEBUGINFOD_URLS");
	o.offline = false;
	nc->debuginfod = symbolize_uses_debuginfod(&o);
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VERSION_CODENAME=%31[a-z]", nc->codename) == 1)
			break;
	if (f)
		fclose(f);
}

/* The Debian package that owns EXE, by dpkg-query -S, also under its
 * name without /usr (Debian 12's /bin, /sbin and /lib are links into
 * /usr, and dpkg knows some files by the old name).  "" when none. */
static void owner_package(const char *exe, char *pkg, size_t len)
{
	const char *names[2] = { exe, strncmp(exe, "/usr/", 5) == 0 ? exe + 4 : NULL };

	pkg[0] = '\0';
	for (size_t i = 0; i < 2 && names[i] && !pkg[0]; i++) {
		char out[4096];
		size_t got = 0;
		int fd[2], status;
		pid_t child;

		if (pipe2(fd, O_CLOEXEC) < 0)
			return;
		child = fork();
		if (child == 0) {
			int null = open("/dev/null", O_WRONLY);

			dup2(fd[1], 1);
			if (null >= 0)
				dup2(null, 2);
			execlp("dpkg-query", "dpkg-query", "-S", "--", names[i], (char *)NULL);
			_exit(127);
		}
		close(fd[1]);
		while (child > 0 && got < sizeof out - 1) {
			ssize_t n = read(fd[0], out + got, sizeof out - 1 - got);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		out[got] = '\0';
		close(fd[0]);
		if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 0)
			doctor_parse_dpkg_owner(out, names[i], pkg, len);
	}
}

/* The executable of P, once per path. */
static void check_exe(struct reporter *rp, const struct watch_proc *p, char ***seen,
                      size_t *nseen, struct tally *exes, struct names_check *nc)
{
	struct stackdump_sources src;
	struct doctor_result r;
	struct doctor_names names = { .build_id = "", .symsrc = "" };
	char exe[PATH_MAX], pkg[128];
	char **grown;
	int e = procfs_read_link(p->pid, "exe", exe, sizeof exe);

	if (e < 0) {
		if (!gone(-e)) {
			snprintf(exe, sizeof exe, "of %s[%d]", p->comm, (int)p->pid);
			doctor_check_exe(exe, -e, &names, &r);
			tally_emit(rp, exes, &r);
		}
		return;
	}
	for (size_t i = 0; i < *nseen; i++)
		if (strcmp((*seen)[i], exe) == 0)
			return;
	grown = reallocarray(*seen, *nseen + 1, sizeof **seen);
	if (!grown || !(grown[*nseen] = strdup(exe))) {
		*seen = grown ? grown : *seen;
		return;
	}
	*seen = grown;
	++*nseen;
	/* Through /proc/PID/exe: the very file that runs, even when the path
	 * now names another or lies in another mount namespace; its names as
	 * the unwinder would find them, debug files included. */
	e = stackdump_module_sources(p->pid, NULL, NULL, &src);
	names.build_id = src.build_id;
	names.symsrc = src.symbols;
	/* Where tail and report would find them: by the build-id, the file at
	 * its path as the stored frames name it. */
	if (e == 0 && src.build_id[0] && nc->s)
		names.read = symbolize_module_source(nc->s, src.build_id, exe, &names.debug_file);
	names.debuginfod = nc->debuginfod;
	/* The package only for the fix of an executable without names. */
	pkg[0] = '\0';
	if (e == 0 && src.build_id[0] && (!src.symbols[0] || strcmp(src.symbols, ".dynsym") == 0) &&
	    names.read != SYMBOLIZE_DWARF && names.read != SYMBOLIZE_DEBUG_FILE && !nc->debuginfod)
		owner_package(exe, pkg, sizeof pkg);
	names.package = pkg;
	names.codename = nc->codename;
	doctor_check_exe(exe, -e, &names, &r);
	/* Where each one's names come from is said, the first SHOW_MAX. */
	if (r.level == DOCTOR_OK && exes->ok < SHOW_MAX)
		emit(rp, &r);
	tally_emit(rp, exes, &r);
}

/* Whether java process PID runs with -XX:+PreserveFramePointer: on its
 * command line, or in JAVA_TOOL_OPTIONS or JDK_JAVA_OPTIONS, which the JVM
 * reads too (its environ). */
static bool preserves_frame_pointer(pid_t pid)
{
	static const char flag[] = "-XX:+PreserveFramePointer";
	char buf[8192];
	ssize_t n;

	procfs_read_cmdline(pid, buf, sizeof buf);
	if (strstr(buf, flag))
		return true;
	n = procfs_read_file(pid, 0, "environ", buf, sizeof buf);
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		if ((strncmp(buf + i, "JAVA_TOOL_OPTIONS=", 18) == 0 ||
		     strncmp(buf + i, "JDK_JAVA_OPTIONS=", 17) == 0) && strstr(buf + i, flag))
			return true;
	return false;
}

/* Whether process PID maps a libpython (an embedded interpreter). */
/* What the language runtime of P lets the dumps name: its Python frames,
 * its JIT frames (node, java).  Only for an executable named python*,
 * node or java, or one that maps a libpython: stackdump_runtime reads the
 * process's modules as a dump does, too slow for every process of a host
 * (all = yes). */
static void check_runtime(struct reporter *rp, const struct watch_proc *p)
{
	struct stackdump_runtime rt;
	struct doctor_result r;
	char exe[PATH_MAX];
	const char *kind = "", *file;

	if (procfs_read_link(p->pid, "exe", exe, sizeof exe) < 0)
		return;
	file = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	if (strcmp(file, "node") == 0 || strcmp(file, "nodejs") == 0)
		kind = "node";
	else if (strcmp(file, "java") == 0)
		kind = "java";
	if ((!*kind && strncmp(file, "python", 6) != 0 && !procfs_maps_path_has(p->pid, "/libpython3")) ||
	    stackdump_runtime(p->pid, &rt) < 0)
		return;
	if (doctor_check_runtime(p->pid, p->comm, kind, &rt,
	                         *kind == 'j' && preserves_frame_pointer(p->pid), &r))
		emit(rp, &r);
}

/* The database, its -wal and -shm (kept by the daemon: readers cannot
 * create them) and its directory must be readable by group cpumond. */
static void check_database(struct reporter *rp, const char *db)
{
	static const char *const suffix[] = { "", "-wal", "-shm" };
	struct doctor_result r;
	char path[PATH_MAX + 8], *copy = strdup(db), *slash;

	if (copy && (slash = strrchr(copy, '/')) && slash != copy) {
		struct stat st = { 0 };
		int err;

		*slash = '\0';
		err = stat(copy, &st) < 0 ? errno : 0;
		doctor_check_db_file(copy, err, st.st_mode, &r);
		emit(rp, &r);
	}
	free(copy);
	for (size_t i = 0; i < 3; i++) {
		struct stat st = { 0 };
		int err;

		snprintf(path, sizeof path, "%s%s", db, suffix[i]);
		err = stat(path, &st) < 0 ? errno : 0;
		if (i > 0 && err == ENOENT)
			continue;
		doctor_check_db_file(path, err, st.st_mode, &r);
		emit(rp, &r);
	}
}

/* Where the processes a watch line shows run, their unit or else their
 * cgroup path ("" when neither is known), read for those shown only (the
 * first WATCH_PROCS_SHOWN of each watch): an array of N (to free with
 * free_origins), or NULL when out of memory (then not shown). */
static char **read_origins(const struct config *cfg, const struct watch_proc *procs, size_t n)
{
	size_t *shown = calloc(cfg->nwatches, sizeof *shown);
	char **origins = calloc(n ? n : 1, sizeof *origins);
	char buf[PATH_MAX];

	for (size_t k = 0; shown && origins && k < n; k++) {
		if (shown[procs[k].watch]++ >= WATCH_PROCS_SHOWN)
			continue;
		if (watch_read_unit(procs[k].pid, buf, sizeof buf) < 0)
			procfs_read_cgroup(procs[k].pid, buf, sizeof buf);
		origins[k] = strdup(buf);
	}
	free(shown);
	return origins;
}

static void free_origins(char **origins, size_t n)
{
	for (size_t k = 0; origins && k < n; k++)
		free(origins[k]);
	free(origins);
}

static int run_checks(const struct config *cfg, struct watch *w, struct reporter *rp, bool full)
{
	struct tally access = { 0 }, traced = { 0 }, exes = { 0 };
	struct names_check nc = { 0 };
	const struct watch_proc *procs;
	struct procfs_status self = { 0 };
	struct doctor_result r;
	char **seen = NULL, **origins;
	size_t n = 0, nseen = 0;
	int e;

	check_self(rp, &self);
	doctor_check_stall_read(self.cap_eff, self.euid, cfg->stall_after_ms, &r);
	emit(rp, &r);
	doctor_check_stall_kernel_stack(self.cap_eff, cfg->stall_after_ms, &r);
	emit(rp, &r);
	e = watch_resolve(w, &procs, &n);
	if (e < 0)
		return e;
	origins = full ? read_origins(cfg, procs, n) : NULL;
	/* The daemon says which watches are empty itself, when they go empty. */
	for (size_t i = 0; full && i < cfg->nwatches; i++) {
		struct watch_why why;

		watch_why_empty(w, i, &why);
		doctor_check_watch(cfg, i, procs, n, (const char *const *)origins, &why, &r);
		emit(rp, &r);
	}
	free_origins(origins, n);
	/* Only doctor_run reads executables; the daemon never loads libdw. */
	if (full)
		names_check_open(&nc);
	for (size_t i = 0; i < n; i++) {
		check_process(rp, &procs[i], self.cap_eff, &access, &traced);
		if (full)
			check_exe(rp, &procs[i], &seen, &nseen, &exes, &nc);
		if (full)
			check_runtime(rp, &procs[i]);
	}
	tally_end(rp, &access, "watched processes whose threads cpumond can read and ptrace");
	tally_end(rp, &traced, "watched threads traced by no other program");
	if (full) {
		tally_end(rp, &exes, "watched executables with a build-id and function names");
		check_database(rp, cfg->database);
	}
	for (size_t i = 0; i < nseen; i++)
		free(seen[i]);
	free(seen);
	symbolize_close(nc.s);
	return rp->failures;
}

int doctor_run(const struct config *cfg, FILE *out)
{
	struct reporter rp = { .cfg = cfg, .out = out };
	struct watch *w;
	int e = watch_new(cfg, &w);

	if (e < 0)
		return e;
	e = run_checks(cfg, w, &rp, true);
	watch_free(w);
	return e;
}

int doctor_preflight(const struct config *cfg, struct watch *w)
{
	struct reporter rp = { .cfg = cfg, .out = NULL };
	int e = run_checks(cfg, w, &rp, false);

	if (e < 0) {
		log_errno(LOG_WARNING, -e, "cannot check access to the watched processes");
		return 1;
	}
	if (e > 0)
		log_msg(LOG_WARNING, "%d %s failed: events may come without stacks "
		        "(cpumond doctor explains)", e, log_plural((unsigned)e, "check", "checks"));
	return e;
}
