/* watch: which live processes each [watch] section stands for, this cycle.
 *
 * libproc2 reads the process list and the attributes the selectors need
 * (only those: a cmdline or exe read takes the target's memory-map lock).
 * Watches that name only pids or pidfiles never scan all of /proc.  The
 * unit and cgroup selectors read /proc/PID/cgroup (through procfs and
 * libsystemd), one more file per process: only for a process that the
 * watch's other selectors let through, at most once each a cycle.
 */
#ifndef CPUMOND_WATCH_H
#define CPUMOND_WATCH_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"

struct watch_proc {
	pid_t pid;
	unsigned long long start_ticks;  /* start time since boot: tells pid reuse */
	size_t watch;                    /* index into config->watches */
	int gate;                        /* permille: the lowest threshold that applies to
	                                  * this process (its threads' or, when lower, the
	                                  * process_threshold of them all, or history_floor
	                                  * when lower and the history is on); the sampler
	                                  * skips its threads in a cycle where the whole
	                                  * process used no more.  0: never */
	char comm[16];
};

struct watch;

/* The longest systemd unit name, with its NUL (systemd's UNIT_NAME_MAX). */
#define WATCH_UNIT_MAX 256

/* The systemd unit of PID, as the unit selector sees it, into BUF (LEN
 * bytes): its system unit (sd_pid_get_unit: "nginx.service",
 * "user@1000.service", "session-2.scope"), else its user unit
 * (sd_pid_get_user_unit), both named after its cgroup v2 path, so also
 * where systemd is not PID 1.  Returns 0, or -errno with BUF "": -ENODATA
 * or -ENXIO when it is in no unit ("/"), -ESRCH when it is gone. */
int watch_read_unit(pid_t pid, char *buf, size_t len);

/* A resolver for CFG, which must outlive it.  Returns 0 or -errno. */
int watch_new(const struct config *cfg, struct watch **out);
void watch_free(struct watch *w);

/* Resolves every watch to live processes, each process once, under the
 * first watch that matches it; sorted by pid; kernel threads and the daemon
 * itself are left out.  *PROCS stays valid until the next call.
 * Returns 0 or -errno (libproc2 could not read /proc). */
int watch_resolve(struct watch *w, const struct watch_proc **procs, size_t *n);

/* What explains that a watch got no process, for its warning. */
struct watch_why {
	size_t shadowed;         /* live processes its selectors match that an earlier
	                          * watch took (a process belongs to its first watch) */
	size_t owner;            /* the watch of the first of them; valid when shadowed */
	pid_t pidfile_pid;       /* what its pidfile held; 0: no pid, or no pidfile */
	int exe_err;             /* errno of resolving its exe = PATH; 0 when it exists */
	char exe_target[PATH_MAX]; /* the file its exe = PATH names when PATH goes
	                          * through a symbolic link ("" when not): exe is
	                          * matched against that file */
};

/* Fills *WHY for watch I from the processes of the last watch_resolve.  It
 * checks every process against the watch again: call it when the watch has
 * none of its own, not every cycle. */
void watch_why_empty(struct watch *w, size_t i, struct watch_why *why);

#endif
