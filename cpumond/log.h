/* log: one logger for the daemon and its commands.
 *
 * Messages go to stderr.  Under systemd (stderr is the stream named by
 * JOURNAL_STREAM) each line starts with "<N>", the syslog priority, which
 * journald turns into the entry's priority; elsewhere with "cpumond: ".
 */
#ifndef CPUMOND_LOG_H
#define CPUMOND_LOG_H

#include <stdbool.h>
#include <syslog.h>

/* Chooses the prefix style once, at start-up.  VERBOSE lets LOG_DEBUG through. */
void log_init(bool verbose);

/* Whether stderr is the journal (JOURNAL_STREAM names it). */
bool log_to_journal(void);

/* Logs one line at PRIO (LOG_ERR .. LOG_DEBUG). */
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same with ": strerror(ERR)" appended; ERR is a positive errno. */
void log_errno(int prio, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ONE when N is 1, else MANY: "%zu %s", n, log_plural(n, "watch", "watches").
 * For every message that counts, the daemon's and the commands'. */
const char *log_plural(unsigned long long n, const char *one, const char *many);

#endif
