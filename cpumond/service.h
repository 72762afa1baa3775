/* service: what the daemon tells systemd, through libsystemd.
 *
 * sd_notify messages (READY, STATUS, WATCHDOG, RELOADING, STOPPING) go to
 * $NOTIFY_SOCKET and do nothing without it.  Events go to the journal as
 * structured entries when stderr is the journal (see log.h), so that
 * `journalctl -o json` and log shippers can route them by field.
 */
#ifndef CPUMOND_SERVICE_H
#define CPUMOND_SERVICE_H

#include <stddef.h>
#include <stdint.h>

/* READY=1 with STATUS: the database is open and the first cycle ran. */
void service_ready(const char *status);

/* STATUS=... only. */
void service_status(const char *status);

/* RELOADING=1 before a reload; service_ready after it. */
void service_reloading(void);

/* STOPPING=1. */
void service_stopping(void);

/* How often to send WATCHDOG=1, in ms: half of WatchdogSec, or 0 when the
 * service manager expects none. */
uint64_t service_watchdog_period_ms(void);

void service_watchdog(void);

/* One structured journal entry of the N fields FIELDS, each "KEY=value"
 * (eventfmt_journal makes an event's).  Returns 0 or a negative errno. */
int service_journal(char *const *fields, size_t n);

#endif
