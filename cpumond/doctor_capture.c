/* doctor: which capture the daemon will use (capture = auto | perf |
 * ptrace), from kernel.perf_event_paranoid, CAP_PERFMON and a trial perf
 * event.  Split from doctor.c, which would pass 1,000 lines. */
#include <limits.h>

#include "cpumond/doctor_internal.h"
#include "procfs/procfs.h"
#include "stackdump/perfsample.h"

static const char *const add_perfmon =
	"give it CAP_PERFMON: AmbientCapabilities= and CapabilityBoundingSet= in the unit "
	"name it beside CAP_SYS_PTRACE (or set kernel.perf_event_paranoid=2)";

void doctor_check_capture(enum config_capture mode, int paranoid, bool perfmon, int probe,
                          const char *probe_why, struct doctor_result *r)
{
	const char *name = config_capture_name(mode);
	char why[96];

	if (mode == CONFIG_CAPTURE_PTRACE) {
		set(r, DOCTOR_OK, "capture = ptrace: each sample stops its thread for tens of µs");
		return;
	}
	if (probe == 0) {
		if (perfmon)
			snprintf(why, sizeof why, "cpumond has CAP_PERFMON");
		else
			snprintf(why, sizeof why, "kernel.perf_event_paranoid is %d", paranoid);
		set(r, DOCTOR_OK, "capture = %s: perf, no thread is stopped (%s)%s", name, why,
		    mode == CONFIG_CAPTURE_AUTO ? "; CPython processes by ptrace, for their "
		    "Python frames" : "");
		return;
	}
	if (mode == CONFIG_CAPTURE_AUTO)
		set(r, DOCTOR_WARN, "capture = auto: ptrace, each sample a stop: %s", probe_why);
	else
		set(r, DOCTOR_FAIL, "capture = perf: no stacks: %s", probe_why);
	if (!perfmon && paranoid != INT_MIN && paranoid > 2)
		set_fix(r, "%s", add_perfmon);
	else if (mode == CONFIG_CAPTURE_PERF)
		set_fix(r, "set capture = auto or ptrace");
}

void doctor_capture_self(enum config_capture mode, uint64_t cap_eff, struct doctor_result *r)
{
	bool perfmon = has_cap(cap_eff, CAP_BIT_PERFMON) || has_cap(cap_eff, CAP_BIT_SYS_ADMIN);
	char why[256] = "";
	long paranoid;
	int probe = 0;

	if (procfs_read_sysctl("kernel/perf_event_paranoid", &paranoid) < 0)
		paranoid = INT_MIN;
	if (mode != CONFIG_CAPTURE_PTRACE)
		probe = perfsample_probe(0, why, sizeof why);
	doctor_check_capture(mode, (int)paranoid, perfmon, probe, why, r);
}
