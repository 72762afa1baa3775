/* procfs: the facts /proc gives about a process or thread.  See procfs.h. */
#include "procfs/procfs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bounded reads, each above the longest text seen by far: a stat line
 * is about 300 bytes (52 numbers, the longest of them 20 digits), a status
 * file 1.4 KiB here, a cgroup file 0.2 KiB (one line on a v2 host), a
 * syscall line at most 180 bytes, a kernel symbol at most 511 bytes
 * (KSYM_NAME_LEN). */
#define STAT_MAX    2048
#define STATUS_MAX  8192
#define CGROUP_MAX  4096
#define CMDLINE_MAX 4096
#define SYSCALL_MAX 256
#define WCHAN_MAX   512

/* ---- the readers' policy ---- */

/* /proc/PID/NAME, /proc/PID/task/TID/NAME, PID 0 as "self". */
static int make_path(char *path, size_t size, pid_t pid, pid_t tid, const char *name)
{
	char who[16];
	int n;

	if (pid == 0)
		snprintf(who, sizeof who, "self");
	else
		snprintf(who, sizeof who, "%d", (int)pid);
	if (tid)
		n = snprintf(path, size, "/proc/%s/task/%d/%s", who, (int)tid, name);
	else
		n = snprintf(path, size, "/proc/%s/%s", who, name);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* open(2) retried on EINTR.  Returns the descriptor or -errno. */
static int open_retry(const char *path, int flags)
{
	int fd;

	do
		fd = open(path, flags | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	return fd < 0 ? -errno : fd;
}

/* One read(2) of at most LEN - 1 bytes into BUF, NUL-terminated, retried
 * on EINTR; closes FD.  Returns the bytes read or -errno. */
static ssize_t read_close(int fd, char *buf, size_t len)
{
	ssize_t n;
	int e;

	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	e = errno;
	close(fd);
	if (n < 0) {
		buf[0] = '\0';
		return -e;
	}
	buf[n] = '\0';
	return n;
}

int procfs_open(pid_t pid, pid_t tid, const char *name, int flags)
{
	char path[128];
	int fd = make_path(path, sizeof path, pid, tid, name);

	if (fd < 0)
		return fd;
	fd = open_retry(path, flags);
	return fd == -ENOENT ? -ESRCH : fd;
}

ssize_t procfs_read_file(pid_t pid, pid_t tid, const char *name, char *buf, size_t len)
{
	int fd = procfs_open(pid, tid, name, O_RDONLY);

	buf[0] = '\0';
	if (fd < 0)
		return fd;
	return read_close(fd, buf, len);
}

/* Reads NAME as procfs_read_file into BUF (LEN bytes); when the read
 * filled BUF the text was cut, and its last line, cut too, is left out. */
static ssize_t read_lines(pid_t pid, pid_t tid, const char *name, char *buf, size_t len)
{
	ssize_t n = procfs_read_file(pid, tid, name, buf, len);

	if (n == (ssize_t)len - 1) {
		char *nl = memrchr(buf, '\n', (size_t)n);

		n = nl ? nl + 1 - buf : 0;
		buf[n] = '\0';
	}
	return n;
}

int procfs_read_link(pid_t pid, const char *name, char *buf, size_t len)
{
	char path[128];
	int r = make_path(path, sizeof path, pid, 0, name);
	ssize_t n;

	buf[0] = '\0';
	if (r < 0)
		return r;
	n = readlink(path, buf, len - 1);
	if (n < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	buf[n] = '\0';
	return 0;
}

/* A decimal number in LO..HI at TEXT after blanks, ending at a blank, a
 * newline or the end; *END (may be NULL) after it.  Returns 0 or -EINVAL. */
static int parse_num(const char *text, long long lo, long long hi, const char **end,
                     long long *out)
{
	char *e;
	long long v;

	text += strspn(text, " \t");
	if (!isdigit((unsigned char)text[0]) && !(text[0] == '-' && isdigit((unsigned char)text[1])))
		return -EINVAL;
	errno = 0;
	v = strtoll(text, &e, 10);
	if (errno || v < lo || v > hi || (*e && *e != ' ' && *e != '\t' && *e != '\n'))
		return -EINVAL;
	if (end)
		*end = e;
	*out = v;
	return 0;
}

/* ---- stat ---- */

/* /proc/PID/stat, from fs/proc/array.c (do_task_stat), here:
 *   13528 (bash) S 13514 13528 13528 0 -1 4194560 10519 262500 0 20 3 8 648 102 20 0 1 0
 *   166661 5124096 995 18446744073709551615 93935573286912 93935574076317 140725103257136
 *   0 0 0 65536 4 1132560123 1 0 0 17 1 0 0 0 0 0 93935574309616 ... 0
 * (one line, 52 fields).  Fields 4 on are numbers, some of them -1. */
int procfs_parse_stat(const char *text, struct procfs_stat *st)
{
	const char *open = strchr(text, '('), *close = strrchr(text, ')'), *p;
	size_t len;

	memset(st, 0, sizeof *st);
	if (!open || !close || close < open || close[1] != ' ' || !isgraph((unsigned char)close[2]))
		return -EINVAL;
	len = (size_t)(close - open - 1);
	if (len >= sizeof st->comm)
		len = sizeof st->comm - 1;
	memcpy(st->comm, open + 1, len);
	st->comm[len] = '\0';
	st->state = close[2];
	p = close + 3;
	for (int field = 4; field <= 39; field++) {
		unsigned long long u;
		long long v;
		char *end;

		if (*p != ' ')
			return -EINVAL;
		p++;
		if (field == 4 || field == 39) {
			if (parse_num(p, INT_MIN, INT_MAX, &p, &v) < 0)
				return -EINVAL;
			*(field == 4 ? &st->ppid : &st->processor) = (int)v;
			continue;
		}
		if (field != 9 && field != 22 && field != 23) {
			size_t n = strcspn(p, " \n");

			if (n == 0)
				return -EINVAL;
			p += n;
			continue;
		}
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		errno = 0;
		u = strtoull(p, &end, 10);
		if (errno || (*end && *end != ' ' && *end != '\n'))
			return -EINVAL;
		if (field == 9)
			st->flags = (unsigned long)u;
		else if (field == 22)
			st->start_time = u;
		else
			st->vsize = u;
		p = end;
	}
	return 0;
}

int procfs_read_stat(pid_t pid, pid_t tid, struct procfs_stat *st)
{
	char buf[STAT_MAX];
	ssize_t n = procfs_read_file(pid, tid, "stat", buf, sizeof buf);

	if (n < 0) {
		memset(st, 0, sizeof *st);
		return (int)n;
	}
	return procfs_parse_stat(buf, st);
}

/* ---- status ---- */

/* The hex digits at S, at most 16 of them, into *V.  Returns how many
 * (0: none), or -1 when there are more. */
static int hex_digits(const char *s, uint64_t *v)
{
	int n = 0;

	*v = 0;
	for (; isxdigit((unsigned char)s[n]); n++) {
		if (n == 16)
			return -1;
		*v = *v << 4 | (uint64_t)(isdigit((unsigned char)s[n]) ? s[n] - '0'
		                                  : tolower((unsigned char)s[n]) - 'a' + 10);
	}
	return n;
}

int procfs_parse_capmask(const char *hex, uint64_t *mask)
{
	uint64_t v;
	int n;

	hex += strspn(hex, " \t");
	n = hex_digits(hex, &v);
	if (n <= 0 || (hex[n] && hex[n] != '\n'))
		return -EINVAL;
	*mask = v;
	return 0;
}

/* "NSpid:\t4242\t7\t1": outermost first, at least one. */
static int parse_nspid(const char *val, struct procfs_status *st)
{
	long long v;

	st->nnspid = 0;
	while (*(val += strspn(val, " \t")) && *val != '\n') {
		if (st->nnspid == PROCFS_NSPID_MAX || parse_num(val, 1, INT_MAX, &val, &v) < 0)
			return -EINVAL;
		st->nspid[st->nnspid++] = (pid_t)v;
	}
	return st->nnspid ? 0 : -EINVAL;
}

/* One "NAME:\tVAL" line, NAME LEN bytes long.  Returns 0 or -EINVAL. */
static int status_field(const char *name, size_t len, const char *val, struct procfs_status *st)
{
	static const char *const cap_name[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" };
	uint64_t *const cap[] = { &st->cap_inh, &st->cap_prm, &st->cap_eff, &st->cap_bnd,
	                          &st->cap_amb };
	long long v;

	for (size_t i = 0; i < sizeof cap / sizeof *cap; i++)
		if (len == strlen(cap_name[i]) && memcmp(name, cap_name[i], len) == 0)
			return procfs_parse_capmask(val, cap[i]);
#define IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
	if (IS("State")) {
		if (!isalpha((unsigned char)val[0]))
			return -EINVAL;
		st->state = val[0];
	} else if (IS("Uid")) {
		/* real, effective, saved, fs */
		if (parse_num(val, 0, LONG_MAX, &val, &v) < 0 || parse_num(val, 0, LONG_MAX, NULL, &v) < 0)
			return -EINVAL;
		st->euid = (long)v;
	} else if (IS("NSpid")) {
		return parse_nspid(val, st);
	} else if (IS("voluntary_ctxt_switches") || IS("nonvoluntary_ctxt_switches")) {
		if (parse_num(val, 0, LLONG_MAX, NULL, &v) < 0)
			return -EINVAL;
		*(name[0] == 'v' ? &st->voluntary_ctxt_switches : &st->nonvoluntary_ctxt_switches) = v;
	} else if (IS("Tgid") || IS("PPid") || IS("TracerPid") || IS("NoNewPrivs") || IS("Seccomp")) {
		if (parse_num(val, 0, INT_MAX, NULL, &v) < 0)
			return -EINVAL;
		if (IS("Tgid"))
			st->tgid = (pid_t)v;
		else if (IS("PPid"))
			st->ppid = (pid_t)v;
		else if (IS("TracerPid"))
			st->tracer_pid = (long)v;
		else if (IS("NoNewPrivs"))
			st->no_new_privs = (int)v;
		else
			st->seccomp = (int)v;
	}
#undef IS
	return 0;
}

/* /proc/PID/status, from fs/proc/array.c (proc_pid_status), here (cut):
 *   Name:	cat
 *   State:	R (running)
 *   Tgid:	20494
 *   PPid:	20491
 *   TracerPid:	0
 *   Uid:	0	0	0	0
 *   NSpid:	20494
 *   CapEff:	000001fffeffffff
 *   NoNewPrivs:	0
 *   Seccomp:	0
 *   voluntary_ctxt_switches:	0
 *   nonvoluntary_ctxt_switches:	1
 */
int procfs_parse_status(const char *text, struct procfs_status *st)
{
	*st = (struct procfs_status){ .tgid = -1, .ppid = -1, .tracer_pid = -1, .euid = -1,
	                              .no_new_privs = -1, .seccomp = -1,
	                              .voluntary_ctxt_switches = -1,
	                              .nonvoluntary_ctxt_switches = -1 };
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		const char *colon = strchr(line, ':');

		if (colon && (!nl || colon < nl) &&
		    status_field(line, (size_t)(colon - line), colon + 1 + strspn(colon + 1, " \t"),
		                 st) < 0)
			return -EINVAL;
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

int procfs_read_status(pid_t pid, pid_t tid, struct procfs_status *st)
{
	char buf[STATUS_MAX];
	ssize_t n = read_lines(pid, tid, "status", buf, sizeof buf);

	if (n < 0) {
		procfs_parse_status("", st);
		return (int)n;
	}
	return procfs_parse_status(buf, st);
}

/* ---- cgroup ---- */

/* /proc/PID/cgroup, one "hierarchy-ID:controllers:path" a line, here (a
 * hybrid host, v1 controllers beside the unified hierarchy):
 *   9:name=systemd:/
 *   4:memory:/process_api/96aee254c7534f677f69e4edeb4f4658
 *   1:cpu:/
 *   0::/
 * and on a v2 host the one line "0::/system.slice/cpumond.service". */
int procfs_parse_cgroup(const char *text, char *out, size_t len)
{
	if (len)
		out[0] = '\0';
	for (const char *line = text; *line;) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		if (n >= 3 && memcmp(line, "0::", 3) == 0) {
			if (n - 3 >= len)
				return -ENAMETOOLONG;
			memcpy(out, line + 3, n - 3);
			out[n - 3] = '\0';
			return 0;
		}
		if (!nl)
			break;
		line = nl + 1;
	}
	return -ENOENT;
}

int procfs_read_cgroup(pid_t pid, char *out, size_t len)
{
	char buf[CGROUP_MAX];
	ssize_t n = read_lines(pid, 0, "cgroup", buf, sizeof buf);

	if (n < 0) {
		if (len)
			out[0] = '\0';
		return (int)n;
	}
	return procfs_parse_cgroup(buf, out, len);
}

/* ---- exe ---- */

size_t procfs_parse_exe(const char *text, bool *deleted)
{
	static const char mark[] = " (deleted)";
	size_t n = strlen(text), k = sizeof mark - 1;

	*deleted = n >= k && memcmp(text + n - k, mark, k) == 0;
	return *deleted ? n - k : n;
}

/* ---- cmdline ---- */

/* /proc/PID/cmdline, the arguments as the process holds them, each with
 * its NUL; here "bash\0/dev/fd/3\0". */
int procfs_parse_cmdline(const char *raw, size_t n, char *out, size_t len)
{
	size_t o = 0;

	if (len == 0)
		return n ? -E2BIG : 0;
	/* The last argument's NUL ends the text; it separates nothing. */
	if (n > 0 && raw[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)raw[i];
		char esc[5];
		size_t k = 1;

		if (c == '\0')
			esc[0] = ' ';
		else if (c == '\\')
			k = (size_t)snprintf(esc, sizeof esc, "\\\\");
		else if (c < 0x20 || c == 0x7f)
			k = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
		else
			esc[0] = (char)c;
		if (o + k >= len) {
			out[o] = '\0';
			return -E2BIG;
		}
		memcpy(out + o, esc, k);
		o += k;
	}
	out[o] = '\0';
	return 0;
}

int procfs_read_cmdline(pid_t pid, char *out, size_t len)
{
	char raw[CMDLINE_MAX + 1];
	ssize_t n = procfs_read_file(pid, 0, "cmdline", raw, sizeof raw);
	int r;

	if (n < 0) {
		if (len)
			out[0] = '\0';
		return (int)n;
	}
	r = procfs_parse_cmdline(raw, (size_t)n, out, len);
	return r == 0 && n == CMDLINE_MAX ? -E2BIG : r;
}

/* ---- comm ---- */

/* /proc/PID/comm: the name and a newline, "bash\n". */
void procfs_parse_comm(const char *text, char *out, size_t len)
{
	size_t n = strlen(text);

	if (len == 0)
		return;
	if (n > 0 && text[n - 1] == '\n')
		n--;
	if (n >= len)
		n = len - 1;
	memcpy(out, text, n);
	out[n] = '\0';
}

int procfs_read_comm(pid_t pid, pid_t tid, char *out, size_t len)
{
	char buf[PROCFS_COMM_MAX + 2];
	ssize_t n = procfs_read_file(pid, tid, "comm", buf, sizeof buf);

	procfs_parse_comm(buf, out, len);
	return n < 0 ? (int)n : 0;
}

/* ---- syscall ---- */

/* A " 0x..." hex number of at most 16 digits at *P (moved past it).
 * Returns 0 or -EINVAL. */
static int parse_hex(const char **p, uint64_t *out)
{
	const char *s = *p;
	int n;

	if (s[0] != ' ' || s[1] != '0' || s[2] != 'x' || (n = hex_digits(s + 3, out)) <= 0)
		return -EINVAL;
	*p = s + 3 + n;
	return 0;
}

/* /proc/PID/task/TID/syscall, from fs/proc/base.c (proc_pid_syscall), here
 * (bash in pselect6: the number, six arguments, sp, pc):
 *   270 0xfb 0x7ffd1dca46a0 0x0 0x0 0x7ffd1dca45b0 0x7ffd1dca45c0 0x7ffd1dca4580 0x7fb84e253aec
 * "-1 SP PC" when blocked outside a system call, "running" on a CPU. */
int procfs_parse_syscall(const char *text, struct procfs_syscall *sc)
{
	long long nr;
	const char *p;

	memset(sc, 0, sizeof *sc);
	sc->nr = -1;
	if (strcmp(text, "running\n") == 0 || strcmp(text, "running") == 0) {
		sc->running = true;
		return 0;
	}
	if (parse_num(text, -1, INT_MAX, &p, &nr) < 0 || text[0] == ' ' || text[0] == '\t')
		return -EINVAL;
	sc->nr = (long)nr;
	for (int i = 0; nr >= 0 && i < 6; i++)
		if (parse_hex(&p, &sc->args[i]) < 0)
			return -EINVAL;
	if (parse_hex(&p, &sc->sp) < 0 || parse_hex(&p, &sc->pc) < 0)
		return -EINVAL;
	return *p == '\0' || strcmp(p, "\n") == 0 ? 0 : -EINVAL;
}

int procfs_read_syscall(pid_t pid, pid_t tid, struct procfs_syscall *sc)
{
	char buf[SYSCALL_MAX];
	ssize_t n = procfs_read_file(pid, tid, "syscall", buf, sizeof buf);

	if (n < 0) {
		memset(sc, 0, sizeof *sc);
		sc->nr = -1;
		return (int)n;
	}
	return procfs_parse_syscall(buf, sc);
}

/* ---- wchan ---- */

/* /proc/PID/wchan, a symbol without a newline ("do_epoll_wait"), or "0". */
void procfs_parse_wchan(const char *text, char *out, size_t len)
{
	size_t n = strcspn(text, "\n");

	if (len == 0)
		return;
	if (n == 1 && text[0] == '0')
		n = 0;
	if (n >= len)
		n = len - 1;
	memcpy(out, text, n);
	out[n] = '\0';
}

int procfs_read_wchan(pid_t pid, pid_t tid, char *out, size_t len)
{
	char buf[WCHAN_MAX];
	ssize_t n = procfs_read_file(pid, tid, "wchan", buf, sizeof buf);

	procfs_parse_wchan(buf, out, len);
	return n < 0 ? (int)n : 0;
}

/* ---- the kernel stack ---- */

/* /proc/PID/task/TID/stack, one frame a line, innermost first
 * (fs/proc/base.c, proc_pid_stack; the address hidden as <0>):
 *   [<0>] futex_wait_queue+0x60/0x90
 *   [<0>] __futex_wait+0x148/0x1b0 */
size_t procfs_parse_kstack(char *text, const char **frames, size_t max)
{
	size_t n = 0;

	for (char *line = text, *next; *line && n < max; line = next) {
		char *end = strchr(line, '\n'), *name;

		next = end ? end + 1 : line + strlen(line);
		if (end)
			*end = '\0';
		if (line[0] != '[' || !(name = strstr(line, "] ")))
			continue;
		name += 2;
		if (*name)
			frames[n++] = name;
	}
	return n;
}

int procfs_read_kstack(pid_t pid, pid_t tid, char *buf, size_t len)
{
	ssize_t n = procfs_read_file(pid, tid, "stack", buf, len);

	return n < 0 ? (int)n : 0;
}

/* ---- tasks, sysctl ---- */

/* ---- pressure (PSI) and a cgroup's cpu.stat ---- */

/* /proc/pressure/cpu, from kernel/sched/psi.c (psi_show), here:
 *   some avg10=17.67 avg60=16.22 avg300=23.32 total=274467529
 *   full avg10=0.00 avg60=0.00 avg300=0.00 total=0
 * A cgroup's cpu.pressure is the same text. */
int procfs_parse_pressure(const char *text, struct procfs_pressure *p)
{
	const char *line = text, *t;
	char *end;
	double avg;
	unsigned long long total;

	while (line && strncmp(line, "some ", 5) != 0)
		line = (line = strchr(line, '\n')) ? line + 1 : NULL;
	if (!line || strncmp(line + 5, "avg10=", 6) != 0)
		return -EINVAL;
	errno = 0;
	avg = strtod(line + 11, &end);
	if (end == line + 11 || errno || *end != ' ' || !(avg >= 0 && avg <= 100))
		return -EINVAL;
	/* total= is the last field of the line. */
	for (t = end; *t && *t != '\n' && strncmp(t, " total=", 7) != 0; t++)
		;
	if (strncmp(t, " total=", 7) != 0 || !isdigit((unsigned char)t[7]))
		return -EINVAL;
	errno = 0;
	total = strtoull(t + 7, &end, 10);
	if (errno || (*end && *end != '\n'))
		return -EINVAL;
	p->some_avg10 = avg;
	p->some_total_us = total;
	return 0;
}

int procfs_read_pressure(const char *path, struct procfs_pressure *p)
{
	char buf[256];
	int fd = open_retry(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return fd;
	n = read_close(fd, buf, sizeof buf);
	/* With psi=0 the files exist and every read fails so. */
	if (n == -EOPNOTSUPP)
		return -ENOENT;
	if (n < 0)
		return (int)n;
	return procfs_parse_pressure(buf, p);
}

/* A cgroup v2 cpu.stat, from kernel/sched/core.c (cpu_extra_stat_show):
 *   usage_usec 9160324
 *   user_usec 6203112
 *   system_usec 2957212
 *   nr_periods 1204
 *   nr_throttled 311
 *   throttled_usec 15327090
 * (and more lines); the root cgroup and one without the cpu controller
 * have only the usage lines. */
int procfs_parse_cpu_stat(const char *text, struct procfs_cpu_stat *st)
{
	static const char *const keys[] = { "nr_throttled ", "throttled_usec " };
	long long *vals[] = { &st->nr_throttled, &st->throttled_usec };

	st->nr_throttled = st->throttled_usec = -1;
	for (const char *line = text; line && *line;
	     line = (line = strchr(line, '\n')) ? line + 1 : NULL) {
		for (size_t i = 0; i < 2; i++) {
			size_t klen = strlen(keys[i]);

			if (strncmp(line, keys[i], klen) == 0 &&
			    parse_num(line + klen, 0, LLONG_MAX, NULL, vals[i]) < 0)
				return -EINVAL;
		}
	}
	return 0;
}

int procfs_cgroup_file(const char *cgroup, const char *name, char *path, size_t len)
{
	static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };

	for (size_t i = 0; i < 2; i++) {
		if ((size_t)snprintf(path, len, "%s%s%s/%s", roots[i], cgroup[0] == '/' ? "" : "/",
		                     strcmp(cgroup, "/") == 0 ? "" : cgroup, name) >= len)
			return -ENAMETOOLONG;
		if (access(path, F_OK) == 0)
			return 0;
	}
	path[0] = '\0';
	return -ENOENT;
}

int procfs_read_cpu_stat(const char *cgroup, struct procfs_cpu_stat *st)
{
	char path[PATH_MAX], buf[1024];
	int rc = procfs_cgroup_file(cgroup, "cpu.stat", path, sizeof path);
	int fd;
	ssize_t n;

	if (rc < 0)
		return rc;
	if ((fd = open_retry(path, O_RDONLY)) < 0)
		return fd;
	n = read_close(fd, buf, sizeof buf);
	if (n < 0)
		return (int)n;
	return procfs_parse_cpu_stat(buf, st);
}

static int cmp_tid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

int procfs_read_tasks(pid_t pid, pid_t **tids, size_t *n)
{
	int fd = procfs_open(pid, 0, "task", O_RDONLY | O_DIRECTORY);
	size_t cap = 0;
	struct dirent *de;
	DIR *d;

	*tids = NULL;
	*n = 0;
	if (fd < 0)
		return fd;
	if (!(d = fdopendir(fd))) {
		int e = errno;

		close(fd);
		return -e;
	}
	while ((de = readdir(d))) {
		long long tid;

		if (parse_num(de->d_name, 1, INT_MAX, NULL, &tid) < 0)
			continue;    /* "." and ".." */
		if (*n == cap) {
			pid_t *p = reallocarray(*tids, cap ? 2 * cap : 64, sizeof **tids);

			if (!p) {
				closedir(d);
				free(*tids);
				*tids = NULL;
				*n = 0;
				return -ENOMEM;
			}
			*tids = p;
			cap = cap ? 2 * cap : 64;
		}
		(*tids)[(*n)++] = (pid_t)tid;
	}
	closedir(d);
	if (*n > 1)
		qsort(*tids, *n, sizeof **tids, cmp_tid);
	return 0;
}

int procfs_read_sysctl(const char *name, long *value)
{
	char path[128], buf[32];
	long long v;
	int fd;

	if ((size_t)snprintf(path, sizeof path, "/proc/sys/%s", name) >= sizeof path)
		return -ENAMETOOLONG;
	fd = open_retry(path, O_RDONLY);
	if (fd < 0)
		return fd;
	ssize_t n = read_close(fd, buf, sizeof buf);
	if (n < 0)
		return (int)n;
	if (parse_num(buf, LONG_MIN, LONG_MAX, NULL, &v) < 0)
		return -EINVAL;
	*value = (long)v;
	return 0;
}

bool procfs_maps_path_has(pid_t pid, const char *needle)
{
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	int fd = procfs_open(pid, 0, "maps", O_RDONLY);
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;

	if (!f) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	while (!found && getline(&line, &cap, f) > 0)
		found = strstr(line, needle) != NULL;
	free(line);
	fclose(f);
	return found;
}
