/* trigger: decides when a hot thread makes an overload event (and, with
 * the same rule over another level, a starved thread or a busy process:
 * one struct trigger per kind, keyed by thread or process).
 *
 * N over T: a thread whose usage is over its threshold for `consecutive`
 * samples in a row makes an event; afterwards the same thread makes no other
 * event until `cooldown` has passed, whether it cooled down in between or
 * not, so a thread flapping around the threshold cannot flood the log.
 * Pure logic: time comes in as an argument, nothing here reads the system.
 */
#ifndef CPUMOND_TRIGGER_H
#define CPUMOND_TRIGGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct trigger_rule {
	int threshold;          /* permille; over means usage > threshold */
	int consecutive;        /* >= 1 */
	uint64_t cooldown_ms;
};

/* What a starved rule compares with the threshold: DEMAND (permille, usage
 * plus run-queue wait) of a thread whose USAGE is not over THRESHOLD, and
 * 0 for one whose usage is (it is hot, not starved) or that has no usage
 * or demand yet (-1).  Fed to trigger_step as its usage, it gives starved
 * events the same N-over-T rule and cooldown as hot ones. */
int trigger_starved_level(int usage, int demand, int threshold);

/* What is remembered of one thread between samples. */
struct trigger_state {
	int over;               /* samples over threshold in a row */
	bool fired;             /* an event was made ... */
	uint64_t fired_ms;      /* ... at this time */
};

/* One sample of one thread: updates *S and returns true when it makes an
 * event.  USAGE in permille, NOW_MS from a monotonic clock. */
bool trigger_step(struct trigger_state *s, int usage, const struct trigger_rule *rule,
                  uint64_t now_ms);

/* True while *S still matters: the thread is over threshold, or its cooldown
 * runs.  A state for which this is false equals a fresh, zeroed one. */
bool trigger_state_live(const struct trigger_state *s, const struct trigger_rule *rule,
                        uint64_t now_ms);

/* The states of all threads, kept only while live, keyed by the sampler's
 * thread key.  Hot threads are few, so this stays small. */
struct trigger;

struct trigger *trigger_new(void);
void trigger_free(struct trigger *t);

/* trigger_step for the thread KEY.  Threads not observed between two calls
 * of trigger_sweep are forgotten by it (they exited). */
bool trigger_observe(struct trigger *t, uint64_t key, int usage, const struct trigger_rule *rule,
                     uint64_t now_ms);

/* Ends a cycle: forgets the threads not observed since the last sweep.
 * Returns how many states are kept. */
size_t trigger_sweep(struct trigger *t);

#endif
