/* capture: episodes of stack samples of the threads that tripped the
 * trigger.
 *
 * A thread that trips gets its first sample at once, then one every
 * sample_interval on a timer of its own, so that the cycle keeps its
 * cadence for every other thread, until episode_samples are taken, it exits
 * or goes idle, or it cannot be stopped.  All episodes share one budget of
 * max_dumps_per_second.  A finished episode leaves as a capture_event
 * through the function given to capture_new.  The stacks come from
 * stackdump: a ptrace stop per sample, or (capture = perf, or auto where
 * the kernel permits it and the process runs no CPython) one perf event
 * per episode (perfsample.h) whose samples the kernel takes at the
 * thread's own clock interrupts, read from its ring on the episode's timer
 * (never woken per sample) and unwound as ptrace copies are; the event is
 * closed when the episode ends, on every path.  The pure part of an
 * episode (counts, key stack, when a thread went idle) is episode.h.
 */
#ifndef CPUMOND_CAPTURE_H
#define CPUMOND_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "cpumond/episode.h"
#include "cpumond/kind.h"
#include "cpumond/metrics.h"
#include "cpumond/sampler.h"
#include "cpumond/watch.h"

/* One event: the episode of a thread and what was known of it when it
 * tripped, and where its process runs (read after the first
 * sample, which comes first).  The strings are copies: a reload may free
 * the configuration while the episode runs or the event waits to be
 * stored. */
struct capture_event {
	struct episode ep;
	int64_t time_us;         /* CLOCK_REALTIME when it tripped */
	enum kind kind;          /* what tripped */
	char *details;           /* its kind's facts as a JSON object text; NULL: none */
	const char *capture;     /* how its samples were taken (store_event's
	                            capture): "ptrace" or "perf", one per episode;
	                            NULL before the first */
	char *watch;             /* the watch's name */
	char *exe;               /* /proc/PID/exe, "" when unknown; NULL when out of memory */
	char *cgroup;            /* its cgroup v2 path, "" when unknown; NULL when out of memory */
	char unit[WATCH_UNIT_MAX];   /* its systemd unit (watch_read_unit), "" when none */
	pid_t nspid;             /* its pid in its own pid namespace (NSpid); 0 when unknown */
	char comm[16], thread[64];
	unsigned long long start_ticks;  /* the process's, when it tripped */
	int usage, threshold, consecutive, run_delay;   /* permille, samples */
	char error[256];         /* why the first sample has no stack, "" otherwise */
};

void capture_event_free(struct capture_event *ev);

/* Receives each finished event, and owns it from then on. */
typedef void (*capture_done_fn)(struct capture_event *ev, void *arg);

struct capture;

/* Episodes under CFG's limits (max_frames, episode_samples,
 * sample_interval, max_dumps_per_second, capture).  CFG must stay valid until
 * capture_configure gives another, or capture_free.  Dumps are counted in
 * METRICS; every finished event goes to DONE(event, ARG).  Returns NULL
 * when out of memory. */
struct capture *capture_new(const struct config *cfg, struct metrics *metrics,
                            capture_done_fn done, void *arg);

/* Detaches any thread still stopped, closes the perf events, and frees the
 * episodes under way without handing them over (capture_finish_all first
 * keeps them). */
void capture_free(struct capture *c);

/* After a reload: the limits of CFG apply to the next samples (capture =
 * to the next episodes). */
void capture_configure(struct capture *c, const struct config *cfg);

/* What tripped, as the event records it.  Every kind's thread is sampled
 * as a hot thread is: a starved thread does run, only less, and a process
 * event samples each of its top threads. */
struct capture_trip {
	enum kind kind;
	int usage;               /* the thread's, permille of one core */
	int threshold;           /* permille: the one its kind compared with */
	int run_delay;           /* permille of the interval waiting for a CPU */
	const char *details;     /* the kind's facts, a JSON object text (json.h
	                            builds it); copied; NULL: none */
};

/* Thread T of PROC, in watch WC, tripped the trigger at NOW_MS
 * (monotonic) as TRIP says: takes its first sample now and, unless that
 * ends the episode, samples it on its timer.  A thread that has an episode
 * of the same kind under way is left to it; one of another kind (a starved
 * thread that is one of its process's top three) is an episode of its
 * own, on the same dump budget. */
void capture_start(struct capture *c, const struct watch_proc *proc,
                   const struct sampler_thread *t, const struct watch_config *wc,
                   const struct capture_trip *trip, uint64_t now_ms);

/* An event of one sample that was taken without a stop (a stalled
 * thread's, stall_probe.h): STACK (taken over; without frames ERROR says
 * why), capture "copy".  Handed over at once. */
void capture_copied(struct capture *c, const struct watch_proc *proc,
                    const struct sampler_thread *t, const struct watch_config *wc,
                    const struct capture_trip *trip, struct stackdump_stack *stack,
                    const char *error);

/* Takes the samples due at NOW_MS; hands over the episodes that end. */
void capture_sample(struct capture *c, uint64_t now_ms);

/* When the next sample is due (monotonic ms), or UINT64_MAX when no
 * episode runs. */
uint64_t capture_next_ms(const struct capture *c);

/* Whether thread TID has an episode under way (at most
 * max_dumps_per_second are: a linear search). */
bool capture_in_episode(const struct capture *c, pid_t tid);

/* Detaches the threads that stopped after their dump gave up on them;
 * never blocks.  Once a cycle. */
void capture_poll(struct capture *c);

/* At exit: hands over every episode under way with the samples it has.
 * Returns how many there were. */
size_t capture_finish_all(struct capture *c);

#endif
