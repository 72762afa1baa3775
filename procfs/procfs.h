/* procfs: the facts /proc gives about a process or thread.
 *
 * Pure parsers (procfs_parse_*) over the text the kernel writes, each with
 * a real line above it in procfs.c, and thin readers (procfs_read_*) with
 * one policy for every file: the path is /proc/PID/NAME, or
 * /proc/PID/task/TID/NAME for a thread (TID 0: the process's own file;
 * PID 0: /proc/self); open and read are retried on EINTR; a file that does
 * not exist is -ESRCH (the process or thread is gone: its directory went
 * with it); the text is taken in one read(2) of a bounded size, which for
 * these files is the whole text (the kernel writes it into a buffer of its
 * own and hands out as much as asked); a longer text is cut there.  They
 * return 0 (procfs_read_file: the length) or -errno, and leave a string
 * "" when they fail.
 *
 * Its own folder, below both cpumond/ and stackdump/: the daemon (watch,
 * episodes, doctor) and the unwinder (the state of a thread before its
 * stop, the tracer that holds it, the files of a target) read the same
 * files, and stackdump is a library of its own that must not depend on
 * cpumond.  It depends on nothing but libc.
 *
 * Not here: /proc/PID/maps (stackdump/procmaps.c, a parser of its own with
 * a reader that grows its buffer), and the sampler's schedstat descriptors
 * kept open and read with pread (cpumond/sampler.c says why).
 */
#ifndef CPUMOND_PROCFS_H
#define CPUMOND_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Task flags of stat field 9 (include/linux/sched.h). */
#define PROCFS_PF_EXITING 0x00000004UL    /* the thread has begun to exit */
#define PROCFS_PF_KTHREAD 0x00200000UL    /* a kernel thread */

/* The longest comm /proc prints: 15 bytes for a user thread, up to 63 for
 * a kernel one ("kworker/u8:3-events_unbound"), and its NUL. */
#define PROCFS_COMM_MAX 64

/* The deepest pid namespace nesting (MAX_PID_NS_LEVEL). */
#define PROCFS_NSPID_MAX 32

/* ---- stat ---- */

struct procfs_stat {
	char comm[PROCFS_COMM_MAX];    /* field 2, between its parentheses */
	char state;                    /* field 3: R, S, D, T, t, Z, X, I, ... */
	int ppid;                      /* field 4 */
	unsigned long flags;           /* field 9: PROCFS_PF_* */
	unsigned long long start_time; /* field 22: clock ticks after boot */
	unsigned long long vsize;      /* field 23: bytes of address space */
	int processor;                 /* field 39: the CPU it last ran on */
};

/* Parses TEXT, a stat line.  The comm may hold spaces and parentheses: it
 * ends at the last ')'.  Returns 0, or -EINVAL when a field up to 39 is
 * missing or out of its type's range (a cut line). */
int procfs_parse_stat(const char *text, struct procfs_stat *st);

/* Reads and parses the stat file of PID (TID 0) or of its thread TID.
 * The leader's own (TID == PID) is cheaper than the process's (TID 0),
 * which sums every thread's times.  Returns 0 or -errno. */
int procfs_read_stat(pid_t pid, pid_t tid, struct procfs_stat *st);

/* ---- status ---- */

/* The fields of a status file the callers use.  Fields the text lacks
 * keep the values procfs_parse_status sets: -1 for numbers, 0 for state
 * and the masks, nnspid 0. */
struct procfs_status {
	char state;                     /* "State:" its letter */
	pid_t tgid;                     /* "Tgid:" the process of the thread */
	pid_t ppid;                     /* "PPid:" */
	long tracer_pid;                /* "TracerPid:" 0 when not traced */
	long euid;                      /* "Uid:" the second (effective) field */
	pid_t nspid[PROCFS_NSPID_MAX];  /* "NSpid:" the pid in each pid namespace,
	                                   outermost (ours) first */
	size_t nnspid;
	uint64_t cap_inh, cap_prm, cap_eff, cap_bnd, cap_amb;  /* "CapInh:" .. "CapAmb:" */
	int no_new_privs;               /* "NoNewPrivs:" 0 or 1 */
	int seccomp;                    /* "Seccomp:" 0 none, 1 strict, 2 filter */
	long long voluntary_ctxt_switches;     /* "voluntary_ctxt_switches:" */
	long long nonvoluntary_ctxt_switches;  /* "nonvoluntary_ctxt_switches:" */
};

/* Parses TEXT, the contents of a status file, one "Name:\tvalue" a line.
 * Returns 0, or -EINVAL when a field it reads is malformed. */
int procfs_parse_status(const char *text, struct procfs_status *st);

/* Parses a capability mask as status prints it ("000001ffffffffff", at
 * most 16 hex digits, a newline may follow).  Returns 0 or -EINVAL. */
int procfs_parse_capmask(const char *hex, uint64_t *mask);

/* Reads and parses the status file of PID (TID 0) or of its thread TID, up
 * to 8 KiB (1.4 KiB here); a line cut at that bound is left out.  Returns
 * 0 or -errno. */
int procfs_read_status(pid_t pid, pid_t tid, struct procfs_status *st);

/* ---- cgroup ---- */

/* The cgroup v2 path in TEXT, the contents of a cgroup file: its "0::"
 * line, the only line on a v2 host and the unified hierarchy's on a
 * hybrid one ("0::/system.slice/nginx.service"), into OUT (LEN bytes).
 * Returns 0, -ENOENT when there is none (a v1-only host), or
 * -ENAMETOOLONG (OUT "") when it does not fit. */
int procfs_parse_cgroup(const char *text, char *out, size_t len);

/* Reads PID's cgroup file (4 KiB at most) and parses it.  Returns 0 or
 * -errno. */
int procfs_read_cgroup(pid_t pid, char *out, size_t len);

/* ---- exe and other links ---- */

/* The length of TEXT, a path the kernel printed for a file (the exe
 * link, a maps line's path), without the " (deleted)" it appends when the
 * file was unlinked since; *DELETED tells whether it did. */
size_t procfs_parse_exe(const char *text, bool *deleted);

/* Reads the link NAME of PID ("exe": the executable, every link on the
 * way resolved; "root": its root directory) into BUF (LEN bytes),
 * NUL-terminated, cut to fit.  Returns 0 or -errno (-ESRCH also for a
 * process without an executable: a kernel thread, a zombie). */
int procfs_read_link(pid_t pid, const char *name, char *buf, size_t len);

/* ---- cmdline ---- */

/* The command line in RAW, N bytes of a cmdline file (the arguments, each
 * ending with a NUL), joined by spaces into OUT (LEN bytes), as ps -o args
 * shows it: control bytes (below 0x20, 0x7f) as \xNN and the backslash as
 * \\, so that it is one line; other bytes as they are.  An empty RAW (a
 * kernel thread, a zombie) gives "".  Returns 0, or -E2BIG when it was cut
 * to fit (never inside an escape). */
int procfs_parse_cmdline(const char *raw, size_t n, char *out, size_t len);

/* Reads PID's command line (its first 4 KiB) and parses it.  The kernel
 * reads it from the process's memory, under its memory-map lock.  Returns
 * 0, -E2BIG as procfs_parse_cmdline, or -errno. */
int procfs_read_cmdline(pid_t pid, char *out, size_t len);

/* ---- comm ---- */

/* The name in TEXT, a comm file, into OUT (LEN bytes) without the newline
 * the kernel ends it with; every other byte as it is (a name may hold
 * anything, a newline too: escape it to print it). */
void procfs_parse_comm(const char *text, char *out, size_t len);

/* Reads the comm of PID (TID 0) or of its thread TID (the name
 * pthread_setname_np gave) into OUT (LEN bytes, PROCFS_COMM_MAX hold any).
 * Returns 0 or -errno. */
int procfs_read_comm(pid_t pid, pid_t tid, char *out, size_t len);

/* ---- syscall ---- */

struct procfs_syscall {
	bool running;            /* on a CPU or runnable: nothing else is known */
	long nr;                 /* the system call it is blocked in, -1 when
	                            blocked outside one (a page fault) */
	uint64_t args[6];        /* its arguments, when nr >= 0 */
	uint64_t sp, pc;         /* user stack pointer and instruction pointer */
};

/* Parses TEXT, a syscall file.  Returns 0 or -EINVAL. */
int procfs_parse_syscall(const char *text, struct procfs_syscall *sc);

/* Reads and parses the syscall file of thread TID of PID (TID 0: the
 * process's leader).  Reading it needs ptrace access to PID (-EACCES
 * without).  Returns 0 or -errno. */
int procfs_read_syscall(pid_t pid, pid_t tid, struct procfs_syscall *sc);

/* ---- wchan ---- */

/* The kernel function in TEXT, a wchan file, where a sleeping thread
 * waits ("poll_schedule_timeout.constprop.0"), into OUT (LEN bytes): ""
 * for "0" (running, or the kernel hides it).  Cut to fit. */
void procfs_parse_wchan(const char *text, char *out, size_t len);

/* Reads and parses the wchan file of PID (TID 0) or its thread TID.
 * Returns 0 or -errno. */
int procfs_read_wchan(pid_t pid, pid_t tid, char *out, size_t len);

/* ---- pressure (PSI) and a cgroup's cpu.stat ---- */

/* The "some" line of a pressure file: the share of time at least one task
 * waited for the resource. */
struct procfs_pressure {
	double some_avg10;       /* percent of the last 10 s */
	uint64_t some_total_us;  /* since boot (or the cgroup's creation) */
};

/* Parses TEXT, a pressure file (/proc/pressure/cpu, a cgroup's
 * cpu.pressure): its "some" line.  Returns 0, or -EINVAL when there is
 * none or it is malformed. */
int procfs_parse_pressure(const char *text, struct procfs_pressure *p);

/* Reads and parses the pressure file at PATH.  Returns 0, -ENOENT (a
 * kernel without PSI, or booted with psi=0: the file is missing or
 * refuses to be read with EOPNOTSUPP), or another -errno. */
int procfs_read_pressure(const char *path, struct procfs_pressure *p);

/* The throttling of a cgroup v2's cpu.stat: -1 when the text lacks it (no
 * cpu controller enabled there, the root cgroup). */
struct procfs_cpu_stat {
	long long nr_throttled;  /* periods in which its quota ran out */
	long long throttled_usec;  /* time its tasks were kept off the CPU */
};

/* Parses TEXT, a cgroup's cpu.stat ("key value" lines).  Returns 0, or
 * -EINVAL when a key it reads has no number. */
int procfs_parse_cpu_stat(const char *text, struct procfs_cpu_stat *st);

/* The path of the file NAME ("cpu.stat") of cgroup v2 CGROUP (as
 * procfs_read_cgroup gives it) into PATH (LEN bytes), under
 * /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host where that
 * is where the v2 hierarchy is mounted.  Returns 0, -ENOENT when neither
 * has it, or -ENAMETOOLONG. */
int procfs_cgroup_file(const char *cgroup, const char *name, char *path, size_t len);

/* Reads and parses CGROUP's cpu.stat.  Returns 0 or -errno. */
int procfs_read_cpu_stat(const char *cgroup, struct procfs_cpu_stat *st);

/* ---- the kernel stack ---- */

/* Splits TEXT, a stack file, in place into its frames' names
 * ("futex_wait_queue+0x60/0x90"), innermost first, at most MAX into
 * FRAMES (pointers into TEXT); lines not of that form are left out.
 * Returns how many. */
size_t procfs_parse_kstack(char *text, const char **frames, size_t max);

/* Reads the stack file of thread TID of PID into BUF (LEN bytes).  The
 * kernel lets only CAP_SYS_ADMIN read it: -EACCES or -EPERM without.
 * Returns 0 or -errno. */
int procfs_read_kstack(pid_t pid, pid_t tid, char *buf, size_t len);

/* ---- the rest ---- */

/* Reads the file NAME of PID (TID 0) or of its thread TID ("schedstat")
 * into BUF (LEN bytes, at least 1), NUL-terminated, with the policy above.
 * Returns the bytes read (>= 0) or -errno. */
ssize_t procfs_read_file(pid_t pid, pid_t tid, const char *name, char *buf, size_t len);

/* Opens the file NAME of PID (TID 0) or of its thread TID with open(2)'s
 * FLAGS (O_CLOEXEC is added).  Returns the descriptor or -errno, -ESRCH
 * when it does not exist. */
int procfs_open(pid_t pid, pid_t tid, const char *name, int flags);

/* The threads of PID, from /proc/PID/task, in ascending order: *TIDS (to
 * free), *N of them.  Returns 0 or -errno. */
int procfs_read_tasks(pid_t pid, pid_t **tids, size_t *n);

/* Reads the sysctl NAME ("kernel/yama/ptrace_scope"), a decimal number,
 * from /proc/sys.  Returns 0, -ENOENT (no such setting), -EINVAL (not a
 * number) or -errno. */
int procfs_read_sysctl(const char *name, long *value);

/* Whether /proc/PID/maps has a line holding NEEDLE (a mapped file's path,
 * "/libpython3"); false when it cannot be read. */
bool procfs_maps_path_has(pid_t pid, const char *needle);

#endif
