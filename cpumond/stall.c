#include "cpumond/stall.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

/* ---- the syscalls named ---- */

enum wait_kind {
	WAIT_OTHER,          /* a stall when it does not run */
	WAIT_IDLE,           /* an ordinary idle wait */
	WAIT_FD,             /* idle when its descriptor is a pipe, socket, ... */
	WAIT_FUTEX,          /* idle unless a lock wait */
};

struct syscall_name {
	long nr;
	const char *name;
	enum wait_kind wait;
};

/* Only the numbers this architecture has: arm64 has no poll, select,
 * epoll_wait, pause or vfork (their p-, 2- and clone forms stand in). */
#define SC(id, wait) { SYS_##id, #id, wait },
static const struct syscall_name syscalls[] = {
	SC(read, WAIT_FD) SC(readv, WAIT_FD) SC(recvfrom, WAIT_FD) SC(recvmsg, WAIT_FD)
	SC(futex, WAIT_FUTEX)
	SC(epoll_pwait, WAIT_IDLE) SC(ppoll, WAIT_IDLE) SC(pselect6, WAIT_IDLE)
	SC(nanosleep, WAIT_IDLE) SC(clock_nanosleep, WAIT_IDLE) SC(accept, WAIT_IDLE)
	SC(accept4, WAIT_IDLE) SC(rt_sigsuspend, WAIT_IDLE) SC(rt_sigtimedwait, WAIT_IDLE)
	SC(wait4, WAIT_IDLE) SC(waitid, WAIT_IDLE) SC(io_getevents, WAIT_IDLE)
	SC(msgrcv, WAIT_IDLE) SC(semtimedop, WAIT_IDLE)
#ifdef SYS_epoll_wait
	SC(epoll_wait, WAIT_IDLE)
#endif
#ifdef SYS_epoll_pwait2
	SC(epoll_pwait2, WAIT_IDLE)
#endif
#ifdef SYS_io_uring_enter
	SC(io_uring_enter, WAIT_IDLE)
#endif
#ifdef SYS_poll
	SC(poll, WAIT_IDLE)
#endif
#ifdef SYS_select
	SC(select, WAIT_IDLE)
#endif
#ifdef SYS_pause
	SC(pause, WAIT_IDLE)
#endif
#ifdef SYS_vfork
	SC(vfork, WAIT_OTHER)
#endif
	SC(clone, WAIT_OTHER) SC(write, WAIT_OTHER) SC(writev, WAIT_OTHER)
	SC(sendto, WAIT_OTHER) SC(sendmsg, WAIT_OTHER) SC(openat, WAIT_OTHER)
	SC(flock, WAIT_OTHER) SC(fcntl, WAIT_OTHER) SC(fsync, WAIT_OTHER)
	SC(fdatasync, WAIT_OTHER) SC(pread64, WAIT_OTHER) SC(pwrite64, WAIT_OTHER)
	SC(connect, WAIT_OTHER) SC(ioctl, WAIT_OTHER) SC(mmap, WAIT_OTHER)
	SC(munmap, WAIT_OTHER) SC(exit_group, WAIT_OTHER) SC(execve, WAIT_OTHER)
#ifdef SYS_clone3
	SC(clone3, WAIT_OTHER)
#endif
};
#undef SC

static const struct syscall_name *find_syscall(long nr)
{
	for (size_t i = 0; i < sizeof syscalls / sizeof syscalls[0]; i++)
		if (syscalls[i].nr == nr)
			return &syscalls[i];
	return NULL;
}

const char *stall_syscall_name(long nr)
{
	const struct syscall_name *s = find_syscall(nr);

	return s ? s->name : NULL;
}

bool stall_wants_fd(const struct procfs_syscall *sc)
{
	const struct syscall_name *s = sc->running || sc->nr < 0 ? NULL : find_syscall(sc->nr);

	return s && s->wait == WAIT_FD;
}

const char *stall_futex_op_name(uint64_t op, char *buf, size_t len)
{
	static const char *const ops[] = {
		[FUTEX_WAIT] = "FUTEX_WAIT", [FUTEX_WAKE] = "FUTEX_WAKE",
		[FUTEX_REQUEUE] = "FUTEX_REQUEUE", [FUTEX_CMP_REQUEUE] = "FUTEX_CMP_REQUEUE",
		[FUTEX_WAKE_OP] = "FUTEX_WAKE_OP", [FUTEX_LOCK_PI] = "FUTEX_LOCK_PI",
		[FUTEX_UNLOCK_PI] = "FUTEX_UNLOCK_PI", [FUTEX_TRYLOCK_PI] = "FUTEX_TRYLOCK_PI",
		[FUTEX_WAIT_BITSET] = "FUTEX_WAIT_BITSET", [FUTEX_WAKE_BITSET] = "FUTEX_WAKE_BITSET",
		[FUTEX_WAIT_REQUEUE_PI] = "FUTEX_WAIT_REQUEUE_PI",
		[FUTEX_CMP_REQUEUE_PI] = "FUTEX_CMP_REQUEUE_PI",
		[FUTEX_LOCK_PI2] = "FUTEX_LOCK_PI2",
	};
	uint64_t cmd = op & FUTEX_CMD_MASK;

	if (cmd >= sizeof ops / sizeof ops[0] || !ops[cmd] ||
	    (op & ~(uint64_t)(FUTEX_CMD_MASK | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)))
		return NULL;
	snprintf(buf, len, "%s%s%s", ops[cmd], op & FUTEX_PRIVATE_FLAG ? "_PRIVATE" : "",
	         op & FUTEX_CLOCK_REALTIME ? "|FUTEX_CLOCK_REALTIME" : "");
	return buf;
}

/* glibc's pthread_mutex_t (nptl/pthreadP.h, struct __pthread_mutex_s):
 * int __lock at 0, unsigned __count at 4, int __owner at 8, on every
 * Linux ABI glibc has.  A contended normal mutex's waiters sleep in
 * futex(&__lock, FUTEX_WAIT_PRIVATE, 2) (lll_lock_wait); a shared one's
 * without the private flag.  A PI mutex's waiters call FUTEX_LOCK_PI on
 * __lock, which holds the owner's tid. */
#define MUTEX_OWNER_OFFSET 8

bool stall_lock_wait(const struct procfs_syscall *sc, uint64_t *owner_addr, bool *pi)
{
	uint64_t cmd;

	if (sc->running || sc->nr != SYS_futex)
		return false;
	cmd = sc->args[1] & FUTEX_CMD_MASK;
	if (cmd == FUTEX_WAIT && (uint32_t)sc->args[2] == 2) {
		*owner_addr = sc->args[0] + MUTEX_OWNER_OFFSET;
		*pi = false;
		return true;
	}
	if (cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2) {
		*owner_addr = sc->args[0];
		*pi = true;
		return true;
	}
	return false;
}

pid_t stall_owner_from_word(uint32_t word, bool pi)
{
	return (pid_t)(pi ? word & FUTEX_TID_MASK : word & 0x7fffffffu);
}

/* The kinds of file a read waits on idly, as /proc/PID/fd/N names them:
 * "pipe:[1234]", "socket:[99]", "anon_inode:[eventfd]", "/dev/pts/3". */
static bool idle_fd(const char *target)
{
	static const char *const prefixes[] = { "pipe:", "socket:", "anon_inode:", "/dev/pts/",
	                                        "/dev/tty", "/dev/console", "/dev/ptmx" };

	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (strncmp(target, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

enum stall_verdict stall_classify(char state, const struct procfs_syscall *sc,
                                  const char *fd_target)
{
	const struct syscall_name *s;
	uint64_t addr;
	bool pi;

	if (state == 'D')
		return STALL_STUCK;
	if (state != 'S' && state != 'I')
		return STALL_IGNORE;     /* R, T, t, Z, X, and anything new */
	if (sc->running)
		return STALL_IGNORE;     /* woken, not yet on a CPU */
	if (sc->nr < 0)
		return STALL_STUCK;      /* asleep outside a syscall: a page fault */
	s = find_syscall(sc->nr);
	switch (s ? s->wait : WAIT_OTHER) {
	case WAIT_IDLE:
		return STALL_IDLE;
	case WAIT_FD:
		return fd_target && idle_fd(fd_target) ? STALL_IDLE : STALL_STUCK;
	case WAIT_FUTEX:
		return stall_lock_wait(sc, &addr, &pi) ? STALL_LOCK : STALL_IDLE;
	case WAIT_OTHER:
		break;
	}
	return STALL_STUCK;
}

size_t stall_owner_chain(pid_t tid, pid_t (*owner_of)(pid_t tid, void *arg), void *arg,
                         pid_t chain[STALL_OWNER_DEPTH], int *cycle_from)
{
	pid_t cur = tid;
	size_t n = 0;

	*cycle_from = -2;
	while (n < STALL_OWNER_DEPTH) {
		pid_t o = owner_of(cur, arg);

		if (o <= 0)
			break;
		if (o == tid) {
			*cycle_from = -1;
			break;
		}
		for (size_t i = 0; i < n; i++)
			if (chain[i] == o) {
				*cycle_from = (int)i;
				return n;
			}
		chain[n++] = o;
		cur = o;
	}
	return n;
}

/* ---- the per-thread state ---- */

struct thread_state {
	uint64_t key;            /* 0: a free slot (the sampler's keys start at 1) */
	uint64_t since_ms;       /* last seen running */
	uint64_t event_ms;       /* the last stall event, when fired */
	bool fired;              /* a stall event was made ... */
	bool open;               /* ... and the thread has not run since */
	bool checked;            /* classified since it last ran */
	bool seen;               /* observed since the last sweep */
};

struct stall {
	struct thread_state *v;  /* open addressing, linear probing */
	size_t cap, n;           /* cap a power of two, n < cap / 2 */
	size_t nseen;            /* observed since the last sweep */
};

struct stall *stall_new(void)
{
	return calloc(1, sizeof(struct stall));
}

void stall_free(struct stall *st)
{
	if (st)
		free(st->v);
	free(st);
}

static size_t slot_of(const struct thread_state *v, size_t cap, uint64_t key)
{
	size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull) & (cap - 1);

	while (v[i].key && v[i].key != key)
		i = (i + 1) & (cap - 1);
	return i;
}

/* Moves the states kept (all, or only those seen when SWEEP) into a table
 * of CAP slots.  Returns 0 or -ENOMEM (nothing changed). */
static int rebuild(struct stall *st, size_t cap, bool sweep)
{
	struct thread_state *v = calloc(cap, sizeof *v);
	size_t n = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < st->cap; i++) {
		struct thread_state *s = &st->v[i];

		if (!s->key || (sweep && !s->seen))
			continue;
		s->seen = false;
		v[slot_of(v, cap, s->key)] = *s;
		n++;
	}
	free(st->v);
	st->v = v;
	st->cap = cap;
	st->n = n;
	return 0;
}

static struct thread_state *find_or_add(struct stall *st, uint64_t key, uint64_t now_ms)
{
	size_t i;

	if ((st->n + 1) * 2 > st->cap && rebuild(st, st->cap ? st->cap * 2 : 64, false) < 0)
		return NULL;
	i = slot_of(st->v, st->cap, key);
	if (!st->v[i].key) {
		st->v[i] = (struct thread_state){ .key = key, .since_ms = now_ms };
		st->n++;
	}
	return &st->v[i];
}

uint64_t stall_due_ms(uint64_t stall_after_ms, int consecutive, uint64_t interval_ms)
{
	return stall_after_ms + (consecutive > 1 ? (uint64_t)(consecutive - 1) * interval_ms : 0);
}

enum stall_step stall_observe(struct stall *st, uint64_t key, bool still, uint64_t now_ms,
                              uint64_t stall_after_ms, uint64_t *since_ms)
{
	struct thread_state *s = find_or_add(st, key, now_ms);
	enum stall_step step = STALL_NOTHING;

	if (!s)
		return STALL_NOTHING;    /* out of memory: this thread is not watched for stalls */
	st->nseen += !s->seen;
	s->seen = true;
	*since_ms = s->since_ms;
	if (!still) {
		if (s->open)
			step = STALL_ENDED;
		s->open = s->checked = false;
		s->since_ms = now_ms;
		return step;
	}
	if (!s->checked && now_ms - s->since_ms >= stall_after_ms)
		step = STALL_CHECK;
	return step;
}

bool stall_checked(struct stall *st, uint64_t key, bool stalled, uint64_t now_ms,
                   uint64_t cooldown_ms)
{
	struct thread_state *s = find_or_add(st, key, now_ms);

	if (!s)
		return false;
	s->checked = true;
	if (!stalled || (s->fired && now_ms - s->event_ms < cooldown_ms))
		return false;
	s->fired = s->open = true;
	s->event_ms = now_ms;
	return true;
}

size_t stall_sweep(struct stall *st)
{
	size_t cap = st->cap;

	/* Shrink when most slots went with exited threads. */
	while (cap > 64 && (st->nseen + 1) * 8 < cap)
		cap /= 2;
	/* A cycle in which no thread went costs a pass over the flags only. */
	if (st->nseen == st->n || rebuild(st, cap, true) < 0) {
		for (size_t i = 0; i < st->cap; i++)
			st->v[i].seen = false;   /* out of memory: all kept one more cycle */
	}
	st->nseen = 0;
	return st->n;
}
