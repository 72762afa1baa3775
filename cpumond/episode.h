/* episode: the stack samples of one hot thread, and its key stack.
 *
 * One stack taken when a thread trips the trigger is any instant of a long
 * burn.  So the thread is sampled every sample_interval for a number of
 * samples; samples are identified by their stack hash (the same code path
 * hashes the same whatever instruction was caught), counted, and the most
 * frequent stack is the episode's key stack.  Ties go to the stack seen
 * first in the episode: it was already burning when the trigger fired.
 *
 * The episode holds one copy of each distinct stack (the first sample that
 * had it) and the stop time of every sample.  Nothing here does I/O except
 * episode_thread_busy.
 */
#ifndef CPUMOND_EPISODE_H
#define CPUMOND_EPISODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stackdump/stackdump.h"

struct episode_stack {
	struct stackdump_stack stack;   /* its first sample */
	unsigned count;
};

struct episode {
	pid_t pid, tid;
	int planned;             /* samples to take in all */
	int taken;               /* samples with a stack */
	int skipped;             /* samples not taken: rate limit, thread in D, no stop */
	uint64_t next_ms;        /* when the next sample is due (monotonic) */
	uint64_t last_busy_ns;   /* the thread's CPU time + run-queue wait at the last sample */
	uint64_t last_sample_ms;
	struct episode_stack *stacks;   /* distinct stacks, in order of first sight */
	size_t nstacks;
	uint64_t *stop_ns;       /* each taken sample's stop time */
	char end[256];           /* why it ended before `planned` samples, "" otherwise */
};

/* Starts an episode of PLANNED (>= 1) samples.  Returns 0 or -ENOMEM. */
int episode_init(struct episode *ep, pid_t pid, pid_t tid, int planned);
void episode_free(struct episode *ep);

/* Adds one sample.  Takes STACK over (its frames are kept or freed; STACK
 * is zeroed).  A stack without frames is not a sample: it is freed and not
 * counted.  Returns 0 or -ENOMEM. */
int episode_add(struct episode *ep, struct stackdump_stack *stack);

/* Samples still to take or skip. */
int episode_remaining(const struct episode *ep);

/* Index into ep->stacks of the key stack: the most frequent, ties to the
 * first seen; -1 when no sample had a stack. */
int episode_key(const struct episode *ep);

/* Median and longest stop of the taken samples, 0 when none. */
uint64_t episode_stop_median(const struct episode *ep);
uint64_t episode_stop_max(const struct episode *ep);

/* Whether a thread that was busy BUSY_NS in ELAPSED_NS since the last
 * sample, and is RUNNABLE or not now, has gone idle: not runnable, and busy
 * under half its threshold (permille).  Busy is CPU time plus run-queue
 * wait, but the kernel adds the wait only when the thread gets the CPU
 * back: a thread starved on a loaded machine shows neither growing, only
 * its state R (seen: a spinning thread at 480 permille "idle" for 50 ms).
 * Half, so that a hot thread's short pauses do not end the episode. */
bool episode_went_idle(uint64_t busy_ns, uint64_t elapsed_ns, bool runnable, int threshold);

/* Reads thread TID's CPU time plus run-queue wait, in ns, from
 * /proc/PID/task/TID/schedstat, and whether it is runnable (state R in
 * its stat).  Returns 0, or -ESRCH when it exited, or another negative
 * errno. */
int episode_thread_busy(pid_t pid, pid_t tid, uint64_t *busy_ns, bool *runnable);

#endif
