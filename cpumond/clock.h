/* clock: the daemon's clocks, in the units its timers and records use.
 * The loop (daemon.c), capture and record read the same clocks. */
#ifndef CPUMOND_CLOCK_H
#define CPUMOND_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds: every timer of the loop, cooldowns,
 * episode samples, rate limits of messages. */
uint64_t clock_mono_ms(void);

/* CLOCK_REALTIME in microseconds since the epoch: an event's time, the
 * retention cut-off. */
int64_t clock_real_us(void);

/* The calling thread's CPU time in nanoseconds: a cycle's own cost. */
uint64_t clock_thread_cpu_ns(void);

#endif
