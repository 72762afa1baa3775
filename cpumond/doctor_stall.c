/* doctor: what stall detection (stall_after) can read with the
 * capabilities cpumond has.  A file of its own: doctor.c holds the rest.
 *
 * Measured here with setpriv on a target of another user (uid 65534):
 * /proc/TID/syscall and /proc/TID/stack are 0400 and the process's fd
 * directory 0500, all owned by the target's user, so with CAP_SYS_PTRACE
 * alone each open fails EACCES before the ptrace check is made;
 * CAP_DAC_READ_SEARCH opens syscall and fd, and the stack file still
 * needs CAP_SYS_ADMIN, which the unit does not give. */
#include <stdarg.h>
#include <stdio.h>

#include "cpumond/doctor.h"

#define CAP_BIT_DAC_READ_SEARCH 2
#define CAP_BIT_SYS_ADMIN       21

static void say(struct doctor_result *r, enum doctor_level level, const char *msg,
                const char *fix)
{
	r->level = level;
	snprintf(r->message, sizeof r->message, "%s", msg);
	snprintf(r->fix, sizeof r->fix, "%s", fix);
}

void doctor_check_stall_read(uint64_t cap_eff, long euid, uint64_t stall_after_ms,
                             struct doctor_result *r)
{
	bool dac = (cap_eff >> CAP_BIT_DAC_READ_SEARCH) & 1;

	if (!stall_after_ms)
		say(r, DOCTOR_OK, "stall detection is off (stall_after = 0)", "");
	else if (dac || euid == 0)
		say(r, DOCTOR_OK, "stall detection can read other users' threads' syscall files "
		    "and descriptors (CAP_DAC_READ_SEARCH)", "");
	else
		say(r, DOCTOR_WARN, "without CAP_DAC_READ_SEARCH stall detection cannot read "
		    "/proc/TID/syscall or /proc/PID/fd of other users' threads: their stalls are "
		    "found only in state D, with no syscall, lock owner or user stack",
		    "add CAP_DAC_READ_SEARCH to AmbientCapabilities= and CapabilityBoundingSet= of "
		    "the unit");
}

void doctor_check_stall_kernel_stack(uint64_t cap_eff, uint64_t stall_after_ms,
                                     struct doctor_result *r)
{
	if (!stall_after_ms || ((cap_eff >> CAP_BIT_SYS_ADMIN) & 1))
		say(r, DOCTOR_OK, stall_after_ms ? "stall events have the kernel stack "
		    "(CAP_SYS_ADMIN)" : "stall detection is off: no kernel stacks wanted", "");
	else
		say(r, DOCTOR_OK, "stall events have no kernel stack: /proc/TID/stack needs "
		    "CAP_SYS_ADMIN, which the unit does not give on purpose (the details say "
		    "kernel_stack_error)", "");
}
