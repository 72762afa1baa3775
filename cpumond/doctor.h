/* doctor: can this cpumond read and stop the threads it watches, and if not,
 * what exactly is missing.
 *
 * The checks are pure functions over plain facts (a ptrace_scope value, a
 * CapEff mask, a TracerPid, an errno) that fill one doctor_result each; the
 * facts come from /proc through procfs/procfs.h.  `cpumond doctor`
 * prints every check (doctor_run); the daemon runs the access checks before
 * it reports READY and logs what fails (doctor_preflight): it keeps running
 * either way, since sampling usage needs no privilege.
 */
#ifndef CPUMOND_DOCTOR_H
#define CPUMOND_DOCTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "config/config.h"
#include "cpumond/watch.h"
#include "stackdump/stackdump.h"
#include "stackdump/symbolize.h"

enum doctor_level { DOCTOR_OK, DOCTOR_WARN, DOCTOR_FAIL };

struct doctor_result {
	enum doctor_level level;
	char message[320];      /* what was found, lowercase, no final period */
	char fix[320];          /* what to change; "" when nothing */
};

/* kernel.yama.ptrace_scope SCOPE (0..3, -1 when Yama is absent or the file
 * unreadable) for a process with effective capabilities CAP_EFF. */
void doctor_check_ptrace_scope(int scope, uint64_t cap_eff, struct doctor_result *r);

/* CAP_SYS_PTRACE in CAP_EFF, for a process running as EUID with
 * NoNewPrivs NNP (file capabilities do not apply under it). */
void doctor_check_capability(uint64_t cap_eff, long euid, int nnp, struct doctor_result *r);

/* Seccomp mode SECCOMP (0..2) and how a trial ptrace(2) call in a child
 * fared: PROBE 0 allowed, > 0 the errno the filter returned, < 0 minus the
 * signal that killed the child (SIGSYS). */
void doctor_check_seccomp(int seccomp, int probe, struct doctor_result *r);

/* Whether the stop window can run at SCHED_FIFO (CAP_SYS_NICE, or an
 * RLIMIT_RTPRIO soft limit RTPRIO of 1 or more); a warning otherwise. */
void doctor_check_realtime(uint64_t cap_eff, unsigned long long rtprio, struct doctor_result *r);

/* Which capture the daemon will use for capture = MODE (config.h), and
 * why: PARANOID is kernel.perf_event_paranoid (INT_MIN when unknown: no
 * perf events in this kernel), PERFMON whether cpumond has CAP_PERFMON
 * (or CAP_SYS_ADMIN), PROBE 0 when a trial perf event on its own thread
 * worked, else the negative errno, with PROBE_WHY its refusal in words
 * (perfsample_refusal).  Ok for perf, and for ptrace when asked for; a
 * warning when auto falls back to ptrace, a failure when capture = perf
 * gets no stacks, each with the fix. */
void doctor_check_capture(enum config_capture mode, int paranoid, bool perfmon, int probe,
                          const char *probe_why, struct doctor_result *r);

/* Access to watched process PID (COMM): PROC_ERR is the errno of reading its
 * threads' schedstat (0: readable), MEM_ERR that of a trial read of its
 * memory, which the kernel allows exactly when it would allow
 * PTRACE_ATTACH (Yama included), without stopping anything.  CAP_EFF is cpumond's: the fix
 * differs when it already has CAP_SYS_PTRACE. */
void doctor_check_access(pid_t pid, const char *comm, int proc_err, int mem_err,
                         uint64_t cap_eff, struct doctor_result *r);

/* Thread TID of PID is traced by TRACER (0: not traced), whose comm is
 * TRACER_COMM ("" when unknown).  SELF is cpumond's own pid. */
void doctor_check_tracer(pid_t pid, pid_t tid, long tracer, const char *tracer_comm,
                         pid_t self, struct doctor_result *r);

/* Where a watched executable's function names come from. */
struct doctor_names {
	const char *build_id;    /* its GNU build-id in hex, "" when none */
	const char *symsrc;      /* when a stack is taken, as stackdump_module_sources
	                            says: ".symtab", ".dynsym" (exported names only),
	                            ".gnu_debugdata" or ".dynsym+.gnu_debugdata"
	                            (MiniDebugInfo), "debug file", "" (none) */
	enum symbolize_source read;  /* when tail and report read a stack
	                            (symbolize_module_source, offline) */
	const char *debug_file;  /* the debug file they read, NULL when none */
	bool debuginfod;         /* DEBUGINFOD_URLS names servers they would ask */
	const char *package;     /* its Debian package (dpkg -S), "" when none */
	const char *codename;    /* the Debian release (VERSION_CODENAME), "" unknown */
};

/* The executable EXE of a watched process: ERR the errno of reading it
 * (0: read), N where its names come from (N->build_id "" when ERR).  Ok
 * when the stacks of it get function names, saying from where (symbols,
 * MiniDebugInfo, a debug file, its DWARF, debuginfod) when taken and when
 * read; a warning when they get none, with the command that gets them:
 * the -dbgsym package of its Debian package from Debian's debug archive,
 * DEBUGINFOD_URLS, or a debug file by build-id. */
void doctor_check_exe(const char *exe, int err, const struct doctor_names *n,
                      struct doctor_result *r);

/* The package that owns PATH in OUT, the output of `dpkg-query -S PATH`
 * ("coreutils: /usr/bin/sha256sum"; "libc6:amd64, libc6-dev: /x" gives
 * libc6; diversion lines are passed over): the package name without its
 * architecture into PKG (LEN bytes).  Returns false (PKG "") when no line
 * names PATH itself. */
bool doctor_parse_dpkg_owner(const char *out, const char *path, char *pkg, size_t len);

/* The language runtime of watched process PID (COMM), as
 * stackdump_runtime says in RT: a CPython whose Python frames are read or
 * not; for KIND "node" or "java" (its executable's name), whether its perf
 * map names its JIT frames and how to turn it on, and for java whether
 * PRESERVE_FP (-XX:+PreserveFramePointer on its command line or in
 * JAVA_TOOL_OPTIONS) keeps the callers of compiled methods.  Returns false
 * when there is nothing to say (R untouched). */
bool doctor_check_runtime(pid_t pid, const char *comm, const char *kind,
                          const struct stackdump_runtime *rt, bool preserve_fp,
                          struct doctor_result *r);

/* A file of the log database, PATH with MODE: readers in group cpumond
 * need it group-readable.  ERR is the errno of stat (ENOENT: not created
 * yet, which is fine). */
void doctor_check_db_file(const char *path, int err, unsigned mode, struct doctor_result *r);

/* Watch I of CFG, given the processes PROCS (NPROCS, all watches') that
 * watch_resolve found: ok with the first of its own as "comm[pid]" and how
 * many more, or a warning that it matches no process, naming its selectors
 * and its line, with what explains it and what to try as the fix.
 * ORIGINS (NULL: none), one for each of PROCS, say where each runs, its
 * unit or cgroup ("comm[pid] in nginx.service"; NULL or "": not said).
 * WHY, from watch_why_empty, is read only when it has no process. */
void doctor_check_watch(const struct config *cfg, size_t i, const struct watch_proc *procs,
                        size_t nprocs, const char *const *origins, const struct watch_why *why,
                        struct doctor_result *r);

/* Runs every check for CFG and prints one line per check to OUT:
 * "ok   MESSAGE", "warn MESSAGE  fix: FIX" or "FAIL MESSAGE  fix: FIX".
 * Returns the number of failed checks (warnings do not count), or -errno
 * when the processes cannot be listed. */
int doctor_run(const struct config *cfg, FILE *out);

/* The checks the daemon runs before READY (not the executables' ELF), on
 * the processes its own resolver W finds for CFG: logs one warning per
 * failed check through log_msg and returns how many failed.  Never fatal. */
int doctor_preflight(const struct config *cfg, struct watch *w);

/* What stall detection (STALL_AFTER_MS, 0: off) can read with the
 * capabilities CAP_EFF of a process running as EUID: other users'
 * /proc/TID/syscall and /proc/PID/fd need CAP_DAC_READ_SEARCH (a
 * warning without it, saying what stalls lose); their kernel stacks need
 * CAP_SYS_ADMIN (said, never asked for).  doctor_stall.c. */
void doctor_check_stall_read(uint64_t cap_eff, long euid, uint64_t stall_after_ms,
                             struct doctor_result *r);
void doctor_check_stall_kernel_stack(uint64_t cap_eff, uint64_t stall_after_ms,
                                     struct doctor_result *r);

#endif
