/* watch: which live processes each [watch] section stands for, this cycle.
 *
 * libproc2 reads the process list and the attributes the selectors need
 * (only those: a cmdline or exe read takes the target's memory-map lock).
 * Watches that name only pids or pidfiles never scan all of /proc.
 */
#ifndef CPUMOND_WATCH_H
#define CPUMOND_WATCH_H

#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"

struct watch_proc {
	pid_t pid;
	unsigned long long start_ticks;  /* start time since boot: tells pid reuse */
	size_t watch;                    /* index into config->watches */
	int gate;                        /* permille: the lowest threshold that applies to
	                                  * this process; the sampler skips its threads in a
	                                  * cycle where the whole process used no more.  0: never */
	char comm[16];
};

struct watch;

/* A resolver for CFG, which must outlive it.  Returns 0 or -errno. */
int watch_new(const struct config *cfg, struct watch **out);
void watch_free(struct watch *w);

/* Resolves every watch to live processes, each process once, under the
 * first watch that matches it; sorted by pid; kernel threads and the daemon
 * itself are left out.  *PROCS stays valid until the next call.
 * Returns 0 or -errno (libproc2 could not read /proc). */
int watch_resolve(struct watch *w, const struct watch_proc **procs, size_t *n);

#endif
