/* What the files of doctor share: how a check fills its result, and the
 * checks of doctor_capture.c that doctor.c runs. */
#ifndef CPUMOND_DOCTOR_INTERNAL_H
#define CPUMOND_DOCTOR_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "cpumond/doctor.h"

/* Capability bits (linux/capability.h). */
#define CAP_BIT_SYS_ADMIN  21
#define CAP_BIT_SYS_PTRACE 19
#define CAP_BIT_SYS_NICE   23
#define CAP_BIT_PERFMON    38

static inline bool has_cap(uint64_t mask, int bit)
{
	return (mask >> bit) & 1;
}

__attribute__((format(printf, 3, 4)))
static inline void set(struct doctor_result *r, enum doctor_level level, const char *fmt, ...)
{
	va_list ap;

	r->level = level;
	r->fix[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof r->message, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3)))
static inline void set_fix(struct doctor_result *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->fix, sizeof r->fix, fmt, ap);
	va_end(ap);
}

/* The capture check as the daemon would meet it: kernel.perf_event_paranoid,
 * CAP_PERFMON in CAP_EFF, and a trial perf event on this thread
 * (perfsample_probe), for capture = MODE. */
void doctor_capture_self(enum config_capture mode, uint64_t cap_eff, struct doctor_result *r);

#endif
