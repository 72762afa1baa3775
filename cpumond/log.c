#include "cpumond/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool journal_prefix;
static bool log_verbose;

/* JOURNAL_STREAM is "DEV:INODE" of the stream systemd connected; it is only
 * ours when stderr is still that very stream (not redirected by a shell). */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return st.st_dev == dev && st.st_ino == ino;
}

void log_init(bool verbose)
{
	journal_prefix = stderr_is_journal();
	log_verbose = verbose;
}

bool log_to_journal(void)
{
	return journal_prefix;
}

static void log_line(int prio, int err, const char *fmt, va_list ap)
{
	char text[1024];

	if (prio == LOG_DEBUG && !log_verbose)
		return;
	vsnprintf(text, sizeof text, fmt, ap);
	if (journal_prefix)
		fprintf(stderr, "<%d>%s", prio, text);
	else
		fprintf(stderr, "cpumond: %s", text);
	if (err)
		fprintf(stderr, ": %s", strerror(err));
	fputc('\n', stderr);
}

void log_msg(int prio, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	log_line(prio, 0, fmt, ap);
	va_end(ap);
	errno = saved;
}

void log_errno(int prio, int err, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	log_line(prio, err, fmt, ap);
	va_end(ap);
	errno = saved;
}

const char *log_plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}
