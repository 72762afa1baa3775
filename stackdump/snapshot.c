/* snapshot: the stop, and nothing but the copy inside it.  See snapshot.h.
 *
 * The window, from PTRACE_INTERRUPT to PTRACE_DETACH, at SCHED_FIFO: spin
 * until the thread stops, one PTRACE_GETREGS, one process_vm_readv of the
 * live stack (before the registers when a hint says where it is),
 * PTRACE_DETACH.  No file is opened and nothing is allocated in it; the
 * policy switches and a read that warms the copy come before it.
 */
#include "stackdump/snapshot.h"

#include "procfs/procfs.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <limits.h>
#include <sys/ucontext.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Before sleeping, spin on waitpid(WNOHANG) this long (see wait_stop). */
#define STOP_SPIN_NS (500 * 1000ull)
/* The longest sleep of a blocking wait for SIGCHLD (see wait_stop). */
#define BLOCK_NAP_NS 1000000
#define PAGE 4096u

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 3, 4)))
static void set_error(char *err, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, size, fmt, ap);
	va_end(ap);
}

const char *snapshot_strerror(int e, char *buf, size_t size)
{
	snprintf(buf, size, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

/* ---- pending threads ---- */

/* The signal to hand back on detach: a signal-delivery-stop's signal, none
 * for PTRACE_EVENT_STOP (the interrupt itself, or a group-stop, which the
 * kernel reinstates by itself on detach). */
static int stop_signal(int status)
{
	return ((unsigned)status >> 16) == 0 ? WSTOPSIG(status) : 0;
}

/* Makes room for one more pending thread.  Called before a thread is
 * seized, so that pending_add cannot fail once it is. */
static int pending_reserve(struct snapshot_pending *pend)
{
	if (pend->n == pend->cap) {
		size_t cap = pend->cap ? pend->cap * 2 : 8;
		pid_t *p = realloc(pend->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		pend->v = p;
		pend->cap = cap;
	}
	return 0;
}

static void pending_add(struct snapshot_pending *pend, pid_t tid)
{
	pend->v[pend->n++] = tid;
}

bool snapshot_pending_has(const struct snapshot_pending *pend, pid_t tid)
{
	for (size_t i = 0; i < pend->n; i++)
		if (pend->v[i] == tid)
			return true;
	return false;
}

int snapshot_poll(struct snapshot_pending *pend)
{
	for (size_t i = 0; i < pend->n;) {
		pid_t tid = pend->v[i];
		int st;
		bool done = false;
		pid_t r = waitpid(tid, &st, WNOHANG | __WALL);

		if (r == tid && WIFSTOPPED(st))
			done = ptrace(PTRACE_DETACH, tid, NULL,
			              (void *)(long)stop_signal(st)) == 0;
		else if (r == tid)
			done = true;           /* it exited: reaped */
		else if (r < 0 && errno == ECHILD)
			done = true;           /* no longer ours */
		if (done)
			pend->v[i] = pend->v[--pend->n];
		else
			i++;
	}
	return (int)pend->n;
}

void snapshot_pending_free(struct snapshot_pending *pend)
{
	free(pend->v);
	memset(pend, 0, sizeof(*pend));
}

/* ---- the stop ---- */

/* From the interrupt to the detach the calling thread runs at SCHED_FIFO 1
 * when it may (CAP_SYS_NICE, or RLIMIT_RTPRIO >= 1), so that nothing
 * preempts it while it waits for the stop or works inside the window.  On a
 * busy 2-core machine a thread woken there (the one PTRACE_DETACH wakes, or
 * any other) preempted the tracer: ~2 ms stops (up to a tick) instead of
 * ~60 µs.  A target queued on the tracer's own CPU cannot stop while a
 * SCHED_FIFO tracer spins there: for a target that last ran on our CPU the
 * policy is raised only once it has stopped (dumps of a thread pinned to
 * the tracer's CPU took 120-240 µs, some 4 ms, with the policy raised
 * before the interrupt; 20-70 µs without), and when no stop is seen after
 * RT_WAIT_NS (the target moved to our CPU) the old policy is back for the
 * rest of the wait.  The policy is
 * read before the window and switched back after it, so that the window
 * holds no scheduler call in the usual case. */
#define RT_WAIT_NS (100 * 1000ull)

struct rt_save {
	bool allowed;            /* the old policy is known and not real-time */
	bool raised;             /* running at SCHED_FIFO now */
	int policy;
	struct sched_param param;
};

static void rt_init(struct rt_save *s)
{
	int policy = sched_getscheduler(0);

	s->raised = false;
	s->allowed = policy >= 0 && (policy & ~SCHED_RESET_ON_FORK) != SCHED_FIFO &&
	             (policy & ~SCHED_RESET_ON_FORK) != SCHED_RR &&
	             sched_getparam(0, &s->param) == 0;
	s->policy = policy;
}

static void rt_raise(struct rt_save *s)
{
	struct sched_param fifo = { .sched_priority = 1 };

	if (s->allowed && !s->raised)
		s->raised = sched_setscheduler(0, SCHED_FIFO, &fifo) == 0;
}

static void rt_lower(struct rt_save *s)
{
	if (s->raised)
		sched_setscheduler(0, s->policy, &s->param);
	s->raised = false;
}

enum wait_result { WAIT_STOPPED, WAIT_EXITED, WAIT_TIMEOUT };

/* Waits until the interrupted TID stops, it exits or the deadline passes,
 * never blocking in waitpid (a thread in D would hold us forever).
 *
 * A target running on another CPU stops 10-30 µs after the interrupt: spin.
 * Blocking or sleeping instead lets this CPU go idle, and on a virtual
 * machine waking it again added 60-70 µs to every stop (the kit's floor
 * blocks in waitpid: 129 µs median seen by a 1,003-thread target against
 * 60 µs spinning, same run).  A target that shares our CPU only stops once
 * we leave it, and sched_yield() does not always give way to a CPU hog (it
 * may not be eligible to run yet): after STOP_SPIN_NS, sleep in short naps
 * so that its stop is seen soon.  The timer slack (50 µs by default) would
 * stretch every nap; it is lowered for the wait.  Exponential naps after
 * 2 ms bound the wake-ups.
 *
 * BLOCK, when not NULL (the target last ran on our CPU), is the set of
 * SIGCHLD alone, blocked by the caller: sleep until the SIGCHLD that a
 * tracee's stop sends its tracer, or the deadline.  The
 * kernel lets the tracer it wakes run only once the stopping thread has
 * switched out (ptrace_stop() wakes it with preemption disabled); a nap
 * that ends while the thread is half-way through its stop preempts it
 * there, and every ptrace request then waits for it in
 * wait_task_inactive(), which sleeps a whole tick when the thread is
 * queued: 4 ms stops in about 1 dump in 20 of a thread pinned to our CPU.
 * Blocking, 600 such dumps: median 28-34 µs, none over 120 µs. */
static enum wait_result wait_stop(pid_t tid, uint64_t t0, const sigset_t *block,
                                  struct rt_save *rt, int *sig)
{
	struct timespec nap = { 0, 10000 };
	int slack = -1;
	enum wait_result res;

	for (;;) {
		int st;
		pid_t r = waitpid(tid, &st, WNOHANG | __WALL);

		if (r == tid && WIFSTOPPED(st)) {
			*sig = stop_signal(st);
			res = WAIT_STOPPED;
			break;
		}
		if (r == tid || (r < 0 && errno != EINTR)) {
			res = WAIT_EXITED;     /* or ECHILD: not our tracee any more */
			break;
		}
		uint64_t waited = now_ns() - t0;
		if (waited >= SNAPSHOT_DEADLINE_NS) {
			res = WAIT_TIMEOUT;
			break;
		}
		if (waited >= RT_WAIT_NS)
			rt_lower(rt);
		if (block) {
			/* At most 1 ms: a caller that ignores SIGCHLD (SIG_IGN,
			 * SA_NOCLDSTOP) gets none for the stop. */
			struct timespec ts = { 0, BLOCK_NAP_NS };

			sigtimedwait(block, NULL, &ts);
		} else if (waited < STOP_SPIN_NS) {
			sched_yield();
		} else {
			if (slack < 0) {
				slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
				if (slack > 1000)
					prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
			}
			nanosleep(&nap, NULL);
			if (waited > 2000000 && nap.tv_nsec < 1000000)
				nap.tv_nsec *= 2;
		}
	}
	if (slack > 1000)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	return res;
}

/* COMM with anything but printable ASCII replaced by '?' (it goes into a
 * message that is printed and logged). */
static void sanitize(char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e || *s == '\\')
			*s = '?';
}

static int attach_error(pid_t pid, pid_t tid, int e, char *err, size_t errsize)
{
	struct procfs_status st;
	char ebuf[64];

	if (e == ESRCH) {
		set_error(err, errsize, "tid %d exited", (int)tid);
		return -ESRCH;
	}
	if (e != EPERM) {
		set_error(err, errsize, "cannot attach to tid %d: %s", (int)tid,
		          snapshot_strerror(e, ebuf, sizeof(ebuf)));
		return -e;
	}
	procfs_read_status(pid, tid, &st);
	if (st.tracer_pid > 0) {
		char comm[PROCFS_COMM_MAX];
		if (procfs_read_comm((pid_t)st.tracer_pid, 0, comm, sizeof(comm)) < 0)
			strcpy(comm, "?");
		sanitize(comm);
		set_error(err, errsize, "cannot attach to tid %d: operation not permitted "
		          "(TracerPid %ld: %s)", (int)tid, st.tracer_pid, comm);
	} else {
		set_error(err, errsize, "cannot attach to tid %d: operation not permitted "
		          "(kernel.yama.ptrace_scope or missing CAP_SYS_PTRACE)", (int)tid);
	}
	return -EPERM;
}

/* Copies [FROM, TO) of TID's memory into BUF, one remote iovec per page so
 * that an unmapped page ends the copy there (process_vm_readv stops at the
 * first iovec it cannot read).  Returns the bytes copied. */
static size_t copy_range(pid_t tid, uint64_t from, uint64_t to, unsigned char *buf)
{
	struct iovec local = { buf, (size_t)(to - from) };
	struct iovec remote[IOV_MAX];
	int n = 0;

	for (uint64_t a = from; a < to && n < IOV_MAX; n++) {
		uint64_t next = (a | (PAGE - 1)) + 1;
		if (next > to || next < a)
			next = to;
		remote[n].iov_base = (void *)(uintptr_t)a;
		remote[n].iov_len = (size_t)(next - a);
		a = next;
	}
	ssize_t got = process_vm_readv(tid, &local, 1, remote, (unsigned long)n, 0);
	return got > 0 ? (size_t)got : 0;
}

/* The 8 bytes at ADDR of the LEN bytes copied from START into BUF. */
static bool region_word(const unsigned char *buf, uint64_t start, size_t len, uint64_t addr,
                        uint64_t *val)
{
	if (addr < start || len < 8 || addr - start > len - 8)
		return false;
	memcpy(val, buf + (addr - start), 8);
	return true;
}

size_t snapshot_copy_stack(pid_t tid, const struct procmaps *maps, uint64_t sp,
                           unsigned char *buf, size_t cap, uint64_t *from_out)
{
	uint64_t from = sp >= SNAPSHOT_RED_ZONE ? sp - SNAPSHOT_RED_ZONE : 0;
	uint64_t to = from + cap < from ? UINT64_MAX : from + cap;
	const struct procmaps_entry *e = maps ? procmaps_find(maps, sp) : NULL;

	/* The mapping may be stale; it only lowers the end.  A thread stack's
	 * mapping does not move while the thread lives. */
	if (e && e->perms[0] == 'r' && e->perms[1] == 'w' && e->end < to && e->end > sp)
		to = e->end;
	size_t len = copy_range(tid, from, to, buf);
	if (len == 0 && from < sp) {
		/* The red zone's page is unmapped (a stack full to its end). */
		from = sp;
		len = copy_range(tid, from, to, buf);
	}
	*from_out = from;
	return len;
}

/* The copy of the stack inside the window (see struct snapshot_hints). */
static void copy_stack(pid_t tid, const struct procmaps *maps, struct snapshot *snap)
{
	snap->stack_len = snapshot_copy_stack(tid, maps, snap->regs.rsp, snap->stack, snap->cap,
	                                      &snap->stack_addr);
	snap->stack_clipped = snap->stack_len < snap->cap;
}

/* x86-64 rt_sigframe: the return address to the trampoline, then the
 * ucontext, whose mcontext holds the interrupted registers. */
#define SIGFRAME_RSP (8 + offsetof(ucontext_t, uc_mcontext) + REG_RSP * sizeof(greg_t))

/* The stack a handler on an alternate stack interrupted (struct snapshot):
 * the innermost signal frame in the copy whose saved stack pointer is
 * outside it.  A scan of the copied words: 0.3 µs for a 4.7 KiB copy. */
static void copy_interrupted_stack(pid_t tid, const struct procmaps *maps,
                                   struct snapshot *snap)
{
	uint64_t first = (snap->regs.rsp + 7) & ~7ull, end = snap->stack_addr + snap->stack_len;

	snap->stack2_len = 0;
	if (!snap->sigreturn || !snap->cap2 || first < snap->stack_addr)
		return;
	for (uint64_t a = first; a + SIGFRAME_RSP + 8 <= end; a += 8) {
		uint64_t word, sp;
		if (!region_word(snap->stack, snap->stack_addr, snap->stack_len, a, &word) ||
		    word != snap->sigreturn ||
		    !region_word(snap->stack, snap->stack_addr, snap->stack_len,
		                 a + SIGFRAME_RSP, &sp))
			continue;
		if (sp >= snap->stack_addr && sp < end)
			continue;          /* a nested frame on the same stack */
		snap->stack2_len = snapshot_copy_stack(tid, maps, sp, snap->stack2, snap->cap2,
		                                       &snap->stack2_addr);
		return;
	}
}

/* Test only: CPUMOND_TEST_HOLD_STOP_US=N keeps the thread stopped N µs
 * longer, so that the fault suite can kill cpumond inside the stop window
 * and see the kernel release the thread (tests/faults). */
static useconds_t test_hold_us(void)
{
	static long hold = -1;

	if (hold < 0) {
		const char *e = getenv("CPUMOND_TEST_HOLD_STOP_US");
		hold = e ? strtol(e, NULL, 10) : 0;
		if (hold < 0 || hold > 10000000)
			hold = 0;
	}
	return (useconds_t)hold;
}

/* Back to the policy and signal mask of before the interrupt. */
static void window_end(struct rt_save *rt, bool restore_mask, const sigset_t *old_mask)
{
	rt_lower(rt);
	if (restore_mask)
		pthread_sigmask(SIG_SETMASK, old_mask, NULL);
}

/* The hint slot of TID, or NULL. */
static struct snapshot_hint *hint_find(struct snapshot_hints *hints, pid_t tid)
{
	for (size_t i = 0; hints && i < SNAPSHOT_HINTS; i++)
		if (hints->v[i].tid == tid)
			return &hints->v[i];
	return NULL;
}

static void hint_record(struct snapshot_hints *hints, pid_t tid, const struct snapshot *snap)
{
	struct snapshot_hint *h = hint_find(hints, tid);

	if (!hints)
		return;
	if (!h) {
		h = &hints->v[hints->next];
		hints->next = (hints->next + 1) % SNAPSHOT_HINTS;
	}
	h->tid = tid;
	h->addr = snap->stack_addr;
	h->len = snap->stack_len;
}

/* Copies the range where HINT says the stack of TID was into SNAP->stack.
 * Returns the bytes copied. */
static size_t copy_hinted(pid_t tid, const struct snapshot_hint *hint, struct snapshot *snap)
{
	size_t len = hint->len < snap->cap ? hint->len : snap->cap;

	return len ? copy_range(tid, hint->addr, hint->addr + len, snap->stack) : 0;
}

/* Whether the GOT bytes copied from HINT's range, taken before the
 * registers were read, are the copy copy_stack() would make: they start at
 * or below the stack pointer's red zone and end where the stack ends (the
 * hint's copy ended there, short of the cap). */
static bool hinted_copy_holds(const struct snapshot *snap, const struct snapshot_hint *hint,
                              size_t got)
{
	uint64_t sp = snap->regs.rsp;

	return got == hint->len && got < snap->cap && sp >= hint->addr + SNAPSHOT_RED_ZONE &&
	       sp - hint->addr < got;
}

int snapshot_take(struct snapshot_pending *pend, struct snapshot_hints *hints,
                  pid_t pid, pid_t tid, int cpu, const struct procmaps *maps,
                  struct snapshot *snap, char *err, size_t errsize)
{
	const struct snapshot_hint *hint = hint_find(hints, tid);
	struct rt_save rt;
	char ebuf[64];
	int sig = 0;

	snap->stack_len = 0;
	snap->stack2_len = 0;
	snap->stop_ns = 0;
	snap->stop_start_ns = 0;
	if (pending_reserve(pend) < 0) {
		set_error(err, errsize, "out of memory");
		return -ENOMEM;
	}
	if (hint)                  /* warms the copy: see struct snapshot_hints */
		copy_hinted(tid, hint, snap);
	rt_init(&rt);
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0)
		return attach_error(pid, tid, errno, err, errsize);

	/* From here on every path detaches, or leaves TID on PEND for
	 * snapshot_poll() to detach or reap.  A target on our CPU: SIGCHLD
	 * blocked for wait_stop(), and no SCHED_FIFO until it has stopped
	 * (see rt_save). */
	bool same_cpu = cpu == sched_getcpu();
	sigset_t chld, old_mask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (same_cpu)
		same_cpu = pthread_sigmask(SIG_BLOCK, &chld, &old_mask) == 0;
	else
		rt_raise(&rt);
	uint64_t t0 = now_ns();
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0) {
		int e = errno;
		window_end(&rt, same_cpu, &old_mask);
		pending_add(pend, tid);  /* exiting: its exit is reported to us */
		if (e == ESRCH) {
			set_error(err, errsize, "tid %d exited during the dump", (int)tid);
			return -ESRCH;
		}
		set_error(err, errsize, "cannot interrupt tid %d: %s", (int)tid,
		          snapshot_strerror(e, ebuf, sizeof(ebuf)));
		return -e;
	}
	enum wait_result w = wait_stop(tid, t0, same_cpu ? &chld : NULL, &rt, &sig);
	if (w == WAIT_EXITED) {
		window_end(&rt, same_cpu, &old_mask);
		set_error(err, errsize, "tid %d exited during the dump", (int)tid);
		return -ESRCH;             /* and waitpid reaped it */
	}
	if (w == WAIT_TIMEOUT) {
		/* PTRACE_DETACH fails until the thread stops, and trying it
		 * races with a signal-delivery-stop whose signal it would drop:
		 * snapshot_poll() detaches it once waitpid reports the stop. */
		window_end(&rt, same_cpu, &old_mask);
		pending_add(pend, tid);
		set_error(err, errsize, "tid %d did not stop within %llu ms; it will be "
		          "released when it stops", (int)tid, SNAPSHOT_DEADLINE_NS / 1000000);
		return -ETIMEDOUT;
	}

	rt_raise(&rt);             /* if the target shared our CPU or the wait lowered it */
	size_t early = hint ? copy_hinted(tid, hint, snap) : 0;
	int g = ptrace(PTRACE_GETREGS, tid, NULL, &snap->regs);
	int gerr = errno;
	if (g == 0 && early && hinted_copy_holds(snap, hint, early)) {
		snap->stack_addr = hint->addr;
		snap->stack_len = early;
		snap->stack_clipped = true;
	} else if (g == 0 && snap->cap > 0) {
		copy_stack(tid, maps, snap);
	}
	if (g == 0)
		copy_interrupted_stack(tid, maps, snap);
	if (g == 0 && snap->in_stop)
		snap->in_stop(snap->in_stop_arg, tid, snap);
	if (test_hold_us())
		usleep(test_hold_us());
	int d = ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig);
	int derr = errno;
	snap->stop_ns = now_ns() - t0;
	snap->stop_start_ns = t0;
	window_end(&rt, same_cpu, &old_mask);

	if (d < 0) {
		/* Killed while stopped (SIGKILL ends a ptrace-stop): its exit is
		 * reported to us and must be reaped. */
		pending_add(pend, tid);
		if (derr == ESRCH) {
			set_error(err, errsize, "tid %d exited during the dump", (int)tid);
			return -ESRCH;
		}
		set_error(err, errsize, "cannot detach from tid %d: %s", (int)tid,
		          snapshot_strerror(derr, ebuf, sizeof(ebuf)));
		return -derr;
	}
	if (g < 0) {
		set_error(err, errsize, "cannot read the registers of tid %d: %s", (int)tid,
		          snapshot_strerror(gerr, ebuf, sizeof(ebuf)));
		return -gerr;
	}
	hint_record(hints, tid, snap);
	return 0;
}

bool snapshot_word(const struct snapshot *snap, uint64_t addr, uint64_t *val)
{
	return region_word(snap->stack, snap->stack_addr, snap->stack_len, addr, val) ||
	       region_word(snap->stack2, snap->stack2_addr, snap->stack2_len, addr, val);
}
