#include "cpumond/service.h"

#include <inttypes.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#include "stackdump/stackdump.h"

void service_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void service_status(const char *status)
{
	sd_notifyf(0, "STATUS=%s", status);
}

void service_reloading(void)
{
	sd_notify(0, "RELOADING=1");
}

void service_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

uint64_t service_watchdog_period_ms(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return usec / 2000 ? usec / 2000 : 1;
}

void service_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}

int service_journal_event(const struct store_event *ev)
{
	const struct stackdump_stack *sk = &ev->stack;
	char top[3][160] = { "", "", "" };
	char frames[512], hash[20];

	for (size_t i = 0; i < 3 && i < sk->nframes; i++)
		stackdump_function_name(&sk->frames[i], top[i], sizeof top[i]);
	if (sk->nframes)
		snprintf(frames, sizeof frames, ": %s%s%s%s%s%s", top[0], top[1][0] ? " <- " : "",
		         top[1], top[2][0] ? " <- " : "", top[2], sk->nframes > 3 ? " <- ..." : "");
	else
		snprintf(frames, sizeof frames, ": no stack");
	snprintf(hash, sizeof hash, "%016" PRIx64, sk->hash);
	/* The journal stores fields as bytes: names from the watched process
	 * need no escaping here, unlike on a terminal. */
	return sd_journal_send("MESSAGE=%s[%d] thread %s/%d at %d‰ > %d‰%s", ev->comm, (int)ev->pid,
	                       ev->thread, (int)ev->tid, ev->usage, ev->threshold, frames,
	                       "PRIORITY=4",
	                       "CPUMOND_WATCH=%s", ev->watch,
	                       "CPUMOND_PID=%d", (int)ev->pid,
	                       "CPUMOND_TID=%d", (int)ev->tid,
	                       "CPUMOND_COMM=%s", ev->comm,
	                       "CPUMOND_THREAD=%s", ev->thread,
	                       "CPUMOND_USAGE=%d", ev->usage,
	                       "CPUMOND_STACK_HASH=%s", sk->nframes ? hash : "",
	                       "CPUMOND_TOP_FRAME=%s", top[0],
	                       NULL);
}
