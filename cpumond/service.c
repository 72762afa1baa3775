#include "cpumond/service.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

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

int service_journal(char *const *fields, size_t n)
{
	struct iovec iov[16];

	if (n > sizeof iov / sizeof *iov)
		return -E2BIG;
	for (size_t i = 0; i < n; i++)
		iov[i] = (struct iovec){ fields[i], strlen(fields[i]) };
	return sd_journal_sendv(iov, (int)n);
}
