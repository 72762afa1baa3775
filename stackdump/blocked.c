/* The copy of a blocked thread without a stop (stackdump_copy_blocked).
 *
 * A thread in D does not stop on PTRACE_INTERRUPT, and detaching from it
 * then leaves a trap pending (measured, issue 18); a thread asleep in S
 * stops, but its syscall is interrupted and restarted.  While it sleeps
 * its user registers do not change: /proc/TID/syscall prints the stack
 * pointer and pc it entered the kernel with (fs/proc/base.c,
 * task_current_syscall: user_stack_pointer and instruction_pointer of its
 * user-mode pt_regs), equal to ptrace's rsp and rip in every thread tried,
 * and its stack above sp does not change either.  So the copy needs no
 * stop; the syscall file read again afterwards says whether it slept all
 * along. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "procfs/procfs.h"
#include "stackdump/procmaps.h"
#include "stackdump/snapshot.h"
#include "stackdump/stackdump.h"

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

static int read_blocked(pid_t pid, pid_t tid, struct procfs_syscall *sc, char *err, size_t errlen)
{
	char e[64];
	int rc = procfs_read_syscall(pid, tid, sc);

	if (rc == -ESRCH)
		return fail(err, errlen, rc, "tid %d exited", (int)tid);
	if (rc < 0)
		return fail(err, errlen, rc, "cannot read /proc/%d/task/%d/syscall: %s", (int)pid,
		            (int)tid, snapshot_strerror(-rc, e, sizeof e));
	if (sc->running)
		return fail(err, errlen, -EAGAIN, "tid %d is running: its registers need a stop",
		            (int)tid);
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int stackdump_copy_blocked(pid_t pid, pid_t tid, size_t bytes, struct stackdump_copy *out,
                           char *err, size_t errlen)
{
	struct procfs_syscall sc, again;
	const struct procmaps_entry *code, *stack;
	struct procmaps maps;
	char e[64];
	int rc;

	memset(out, 0, sizeof *out);
	err[0] = '\0';
	if (bytes < STACKDUMP_STACK_COPY_MIN || bytes > STACKDUMP_STACK_COPY_MAX)
		return fail(err, errlen, -EINVAL, "a stack copy of %zu bytes is out of range", bytes);
	if ((rc = read_blocked(pid, tid, &sc, err, errlen)) < 0)
		return rc;
	if ((rc = procmaps_read(pid, &maps)) < 0)
		return fail(err, errlen, rc, "cannot read /proc/%d/maps: %s", (int)pid,
		            snapshot_strerror(-rc, e, sizeof e));
	code = procmaps_find(&maps, sc.pc);
	stack = procmaps_find(&maps, sc.sp);
	if (!code || code->perms[2] != 'x' || !stack || stack->perms[1] != 'w') {
		procmaps_free(&maps);
		return fail(err, errlen, -EINVAL,
		            "tid %d: the syscall file's pc 0x%llx or sp 0x%llx is not in user code "
		            "and stack", (int)tid, (unsigned long long)sc.pc,
		            (unsigned long long)sc.sp);
	}
	if (!(out->stack = malloc(bytes))) {
		procmaps_free(&maps);
		return fail(err, errlen, -ENOMEM, "out of memory");
	}
	out->time_ns = mono_ns();
	out->stack_len = snapshot_copy_stack(tid, &maps, sc.sp, out->stack, bytes, &out->stack_addr);
	out->stack_clipped = out->stack_len < bytes;
	procmaps_free(&maps);
	if (out->stack_len == 0) {
		stackdump_copy_free(out);
		return fail(err, errlen, -EPERM, "cannot read the stack of tid %d", (int)tid);
	}
	if ((rc = read_blocked(pid, tid, &again, err, errlen)) < 0 || again.sp != sc.sp ||
	    again.pc != sc.pc || again.nr != sc.nr) {
		stackdump_copy_free(out);
		return rc < 0 ? rc : fail(err, errlen, -EAGAIN, "tid %d woke during the copy", (int)tid);
	}
	out->regs.rip = sc.pc;
	out->regs.rsp = sc.sp;
	/* The argument registers as the thread entered the kernel: glibc's
	 * vfork keeps its return address in rdi over the syscall (the child
	 * would overwrite it on the shared stack), and its unwind entry says
	 * so.  x86-64 passes the arguments in rdi, rsi, rdx, r10, r8, r9. */
	out->regs.rdi = sc.args[0];
	out->regs.rsi = sc.args[1];
	out->regs.rdx = sc.args[2];
	out->regs.r10 = sc.args[3];
	out->regs.r8 = sc.args[4];
	out->regs.r9 = sc.args[5];
	return 0;
}

void stackdump_copy_free(struct stackdump_copy *copy)
{
	free(copy->stack);
	copy->stack = NULL;
	copy->stack_len = 0;
}
