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
#include <stdbool.h>
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

/* Whether ADDR is in executable memory of MAPS. */
static bool in_code(const struct procmaps *maps, uint64_t addr)
{
	const struct procmaps_entry *e = procmaps_find(maps, addr);

	return e && e->perms[2] == 'x';
}

/* Candidates for rbp, which the syscall file does not give: the frame
 * pointer of the innermost caller built with frame pointers (glibc's own
 * functions leave rbp alone, so it is still that caller's at the
 * syscall).  Such a frame's rbp points at its saved rbp with its return
 * address above: slots of the copy from sp up whose next word is an
 * address in executable memory.  Fills CAND (at most MAX) and returns how
 * many. */
static size_t rbp_candidates(const struct stackdump_copy *copy, const struct procmaps *maps,
                             uint64_t *cand, size_t max)
{
	size_t n = 0;
	uint64_t sp = copy->regs.rsp;

	for (uint64_t a = sp; n < max && a + 16 <= copy->stack_addr + copy->stack_len; a += 8) {
		uint64_t ret;

		if (a < copy->stack_addr)
			continue;
		memcpy(&ret, copy->stack + (a + 8 - copy->stack_addr), sizeof ret);
		if (in_code(maps, ret))
			cand[n++] = a;
	}
	return n;
}

int stackdump_thread_blocked(struct stackdump *sd, pid_t pid, pid_t tid, size_t bytes,
                             int max_frames, struct stackdump_stack *out)
{
	struct stackdump_copy copy;
	struct procmaps maps;
	uint64_t cand[8];
	size_t n = 0;
	int rc = stackdump_copy_blocked(pid, tid, bytes, &copy, out->error, sizeof out->error);

	if (rc < 0) {
		char why[sizeof out->error];

		memcpy(why, out->error, sizeof why);
		memset(out, 0, sizeof *out);
		memcpy(out->error, why, sizeof why);
		return rc;
	}
	rc = stackdump_thread_copy(sd, pid, tid, &copy, max_frames, out);
	/* Cut short: perhaps at a frame whose CFA is its rbp.  Try the slots
	 * that may be it, keep the deepest unwind (the first of equals). */
	if (rc == 0 && out->error[0] && procmaps_read(pid, &maps) == 0) {
		n = rbp_candidates(&copy, &maps, cand, sizeof cand / sizeof cand[0]);
		procmaps_free(&maps);
	}
	for (size_t i = 0; i < n && out->error[0]; i++) {
		struct stackdump_stack other;

		copy.regs.rbp = cand[i];
		if (stackdump_thread_copy(sd, pid, tid, &copy, max_frames, &other) == 0 &&
		    other.nframes > out->nframes) {
			stackdump_stack_free(out);
			*out = other;
		} else {
			stackdump_stack_free(&other);
		}
	}
	stackdump_copy_free(&copy);
	return rc;
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
