/* perfsample: a thread's registers and stack sampled by the kernel at its
 * task-clock interrupts (see perfsample.h). */
#include "stackdump/perfsample.h"

#include <asm/perf_regs.h>
#include <errno.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The registers sampled, in the order the kernel writes them (ascending
 * PERF_REG_X86_*), and where each goes in struct user_regs_struct.  DS, ES,
 * FS and GS are refused on x86-64 (perf_reg_validate). */
#define REG(perf, field) { PERF_REG_X86_##perf, offsetof(struct user_regs_struct, field) }
static const struct { int perf; size_t off; } regmap[] = {
	REG(AX, rax), REG(BX, rbx), REG(CX, rcx), REG(DX, rdx), REG(SI, rsi),
	REG(DI, rdi), REG(BP, rbp), REG(SP, rsp), REG(IP, rip), REG(FLAGS, eflags),
	REG(CS, cs), REG(SS, ss), REG(R8, r8), REG(R9, r9), REG(R10, r10),
	REG(R11, r11), REG(R12, r12), REG(R13, r13), REG(R14, r14), REG(R15, r15),
};
#undef REG
#define NREGS (sizeof(regmap) / sizeof(regmap[0]))

#define SAMPLE_TYPE (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_REGS_USER | \
                     PERF_SAMPLE_STACK_USER)
/* header, pid/tid, time, abi, registers, stack size, dyn_size */
#define SAMPLE_FIXED (8 + 8 + 8 + 8 + 8 * NREGS + 8 + 8)
_Static_assert(SAMPLE_FIXED + PERFSAMPLE_STACK_MAX <= 65535, "a sample fits its 16-bit size");
_Static_assert(PERFSAMPLE_STACK_MAX % 8 == 0, "the kernel wants the stack size aligned");

/* The kernel's shortest period for its hrtimer-driven software clocks
 * (perf_swevent_init_hrtimer): the one-shot first sample. */
#define FIRST_PERIOD_NS 10000
#define STACK_STEP (8u * 1024)
/* A fitted copy is a multiple of this. */
#define FIT_ROUND 512u

struct perfsample {
	int ring_fd;             /* the one-shot event; owns the ring */
	int fd;                  /* the periodic event, writing into that ring;
	                            perfsample_adapt replaces it */
	struct perf_event_mmap_page *page;
	size_t map_len;
	unsigned char *data;     /* the ring's data part, ring_bytes long */
	unsigned char *rec;      /* a record that wraps the ring's end, copied */
	bool execd;              /* the thread exec'd: the event is gone */
	struct perfsample_info info;
};

/* ---- words for a refusal ---- */

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

void perfsample_refusal(int err, bool mmap, pid_t tid, int paranoid, bool perfmon,
                        char *why, size_t whylen)
{
	char target[32] = "";

	if (tid > 0)
		snprintf(target, sizeof(target), " on tid %d", (int)tid);
	if (mmap && (err == EPERM || err == EACCES || err == ENOMEM)) {
		say(why, whylen, "cannot map the perf ring buffer%s: locked memory beyond "
		    "kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK (raise LimitMEMLOCK= or "
		    "grant CAP_IPC_LOCK)", target);
		return;
	}
	switch (err) {
	case EACCES:
	case EPERM:
		if (!perfmon && paranoid > 2) {
			say(why, whylen, "perf_event_open refused: kernel.perf_event_paranoid is %d "
			    "and the process has no CAP_PERFMON (set kernel.perf_event_paranoid "
			    "to 2 or grant CAP_PERFMON)", paranoid);
		} else if (err == EACCES && tid > 0) {
			say(why, whylen, "perf_event_open%s refused: no ptrace access to it (needs "
			    "CAP_SYS_PTRACE or the same user)", target);
		} else if (paranoid == INT_MIN) {
			say(why, whylen, "perf_event_open%s refused (%s) and "
			    "kernel.perf_event_paranoid cannot be read", target, strerror(err));
		} else {
			say(why, whylen, "perf_event_open%s refused (%s) with "
			    "kernel.perf_event_paranoid %d%s: a seccomp filter or a security "
			    "module (SELinux, AppArmor, lockdown)", target, strerror(err), paranoid,
			    perfmon ? " and CAP_PERFMON" : "");
		}
		return;
	case ESRCH:
		say(why, whylen, "tid %d exited", (int)tid);
		return;
	case ENOENT:
	case EOPNOTSUPP:
	case ENODEV:
		say(why, whylen, "the kernel has no task-clock software event with user register "
		    "and stack sampling (perf_event_open: %s)", strerror(err));
		return;
	case ENOSYS:
		say(why, whylen, "the kernel has no perf events (CONFIG_PERF_EVENTS), or a "
		    "seccomp filter hides perf_event_open");
		return;
	case EINVAL:
		say(why, whylen, "perf_event_open%s: the kernel accepts no user stack copy of "
		    "%u bytes or more", target,
		    PERFSAMPLE_STACK_MIN);
		return;
	default:
		say(why, whylen, "perf_event_open%s: %s", target, strerror(err));
	}
}

static int read_paranoid(void)
{
	FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
	int v = INT_MIN;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = INT_MIN;
		fclose(f);
	}
	return v;
}

/* CAP_PERFMON (or CAP_SYS_ADMIN, which the kernel takes for it) effective. */
static bool have_perfmon(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d) != 0)
		return false;
	return (d[CAP_PERFMON / 32].effective & (1u << (CAP_PERFMON % 32))) ||
	       (d[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32)));
}

static int refuse(int err, bool mmap, pid_t tid, char *why, size_t whylen)
{
	perfsample_refusal(err, mmap, tid, read_paranoid(), have_perfmon(), why, whylen);
	return -err;
}

/* ---- opening ---- */

static size_t ring_pages(size_t stack, long page)
{
	size_t need = PERFSAMPLE_RING_SAMPLES * (SAMPLE_FIXED + stack);
	size_t pages = 1;

	while (pages * (size_t)page < need)
		pages *= 2;
	return pages;
}

static void attr_fill(struct perf_event_attr *a, uint64_t period, size_t stack, size_t ring)
{
	memset(a, 0, sizeof(*a));
	a->type = PERF_TYPE_SOFTWARE;
	a->size = sizeof(*a);
	a->config = PERF_COUNT_SW_TASK_CLOCK;
	a->sample_period = period;
	a->sample_type = SAMPLE_TYPE;
	for (size_t i = 0; i < NREGS; i++)
		a->sample_regs_user |= 1ull << regmap[i].perf;
	a->sample_stack_user = (uint32_t)stack;
	/* Kernel sampling needs perf_event_paranoid <= 1; the stacks are user
	 * space's. */
	a->exclude_kernel = 1;
	a->exclude_hv = 1;
	a->use_clockid = 1;
	a->clockid = CLOCK_MONOTONIC;
	/* Woken only when 3/4 of the ring is full, which a reader on time
	 * never lets happen: a wakeup per sample cost the target 25-35 µs more
	 * per sample (issue 17). */
	a->watermark = 1;
	a->wakeup_watermark = (uint32_t)(ring / 4 * 3);
}

static int event_open(struct perf_event_attr *a, pid_t tid)
{
	return (int)syscall(SYS_perf_event_open, a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Opens the ring's event, the one-shot first sample, disabled, at the
 * largest stack copy the kernel takes (from STACK down in STACK_STEP
 * steps).  Returns the fd or -errno. */
static int open_first(pid_t tid, size_t stack, long page, size_t *stack_out)
{
	struct perf_event_attr a;

	for (;;) {
		attr_fill(&a, FIRST_PERIOD_NS, stack, ring_pages(stack, page) * (size_t)page);
		a.disabled = 1;
		int fd = event_open(&a, tid);
		if (fd >= 0) {
			*stack_out = stack;
			return fd;
		}
		if (errno != EINVAL || stack <= PERFSAMPLE_STACK_MIN)
			return -errno;
		size_t next = (stack - 1) / STACK_STEP * STACK_STEP;
		stack = next < PERFSAMPLE_STACK_MIN ? PERFSAMPLE_STACK_MIN : next;
	}
}

/* Opens the periodic event with a stack copy of STACK bytes, writing into
 * PS's ring, enabled.  Returns the fd or -errno. */
static int open_periodic(struct perfsample *ps, size_t stack)
{
	struct perf_event_attr a;

	attr_fill(&a, ps->info.period_ns, stack, ps->info.ring_bytes);
	/* A COMM record marks an exec in the ring, between the old
	 * program's samples and the new one's (perfsample_read drops the old
	 * ones).  Not remove_on_exec: the event would go without that mark,
	 * and the samples in the ring could not be told from an exit's. */
	a.comm = a.comm_exec = 1;
	a.disabled = 1;
	int fd = event_open(&a, ps->info.tid);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ps->ring_fd) != 0 ||
	    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
		int err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

int perfsample_open(pid_t tid, uint64_t period_ns, size_t stack_max,
                    struct perfsample **out, char *why, size_t whylen)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t stack = stack_max ? stack_max : PERFSAMPLE_STACK_MAX;
	int r;

	*out = NULL;
	say(why, whylen, "%s", "");
	if (period_ns < PERFSAMPLE_PERIOD_MIN_NS || period_ns > PERFSAMPLE_PERIOD_MAX_NS ||
	    stack < PERFSAMPLE_STACK_MIN || stack > PERFSAMPLE_STACK_MAX || tid < 0) {
		say(why, whylen, "perf sampling: period %llu ns or stack cap %zu bytes out of range",
		    (unsigned long long)period_ns, stack);
		return -EINVAL;
	}
	stack &= ~(size_t)7;
	struct perfsample *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return refuse(ENOMEM, false, tid, why, whylen);
	ps->fd = ps->ring_fd = -1;
	ps->page = MAP_FAILED;
	ps->info.tid = tid;
	ps->info.period_ns = period_ns;
	r = open_first(tid, stack, page, &ps->info.stack_size);
	if (r < 0) {
		perfsample_close(ps);
		return refuse(-r, false, tid, why, whylen);
	}
	ps->ring_fd = r;
	ps->info.stack_copy = ps->info.stack_size;
	ps->info.ring_bytes = ring_pages(ps->info.stack_size, page) * (size_t)page;
	ps->map_len = ps->info.ring_bytes + (size_t)page;
	ps->rec = malloc(SAMPLE_FIXED + ps->info.stack_size);
	ps->page = mmap(NULL, ps->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, ps->ring_fd, 0);
	if (ps->page == MAP_FAILED || !ps->rec) {
		int err = ps->rec ? errno : ENOMEM;
		perfsample_close(ps);
		return refuse(err, true, tid, why, whylen);
	}
	ps->data = (unsigned char *)ps->page + (ps->page->data_offset ? ps->page->data_offset
	                                                             : (uint64_t)page);
	/* The periodic samples, then the first at once: the shortest period,
	 * one overflow only. */
	ps->fd = open_periodic(ps, ps->info.stack_size);
	if (ps->fd < 0 || ioctl(ps->ring_fd, PERF_EVENT_IOC_REFRESH, 1) != 0) {
		int err = ps->fd < 0 ? -ps->fd : errno;
		perfsample_close(ps);
		return refuse(err, false, tid, why, whylen);
	}
	*out = ps;
	return 0;
}

void perfsample_close(struct perfsample *ps)
{
	if (!ps)
		return;
	if (ps->fd >= 0)
		close(ps->fd);
	if (ps->page != MAP_FAILED)
		munmap(ps->page, ps->map_len);
	if (ps->ring_fd >= 0)
		close(ps->ring_fd);
	free(ps->rec);
	free(ps);
}

/* ---- fitting the copy to the stack ---- */

size_t perfsample_fit(size_t cap, size_t used, size_t copied, bool clipped)
{
	size_t want = (used + PERFSAMPLE_FIT_MARGIN + FIT_ROUND - 1) / FIT_ROUND * FIT_ROUND;

	/* A copy that ran to the end of the stack's mapping: no more than it
	 * got, so that a sample at that depth ends short of the page beyond
	 * and takes no fault. */
	if (clipped && want > copied)
		want = copied & ~(size_t)7;
	if (want < PERFSAMPLE_STACK_MIN)
		want = PERFSAMPLE_STACK_MIN;
	return want < cap ? want : cap;
}

int perfsample_adapt(struct perfsample *ps, const struct perfsample_sample *s,
                     const struct stackdump_stack *st)
{
	size_t want;

	if (ps->execd)
		return 0;
	if (st->stack_short && !s->copy.stack_clipped) {
		if (ps->info.stack_copy >= ps->info.stack_size)
			return 0;
		want = ps->info.stack_size;
	} else {
		/* Once refitted (smaller, or back to the cap) it stays. */
		if (ps->info.refits > 0 || st->nframes == 0 || st->stack_used == 0)
			return 0;
		want = perfsample_fit(ps->info.stack_size, st->stack_used, s->copy.stack_len,
		                      s->copy.stack_clipped);
		if (want >= ps->info.stack_copy)
			return 0;
	}
	/* The new event first, then the old one closed: the ring never goes
	 * without a writer. */
	int fd = open_periodic(ps, want);
	if (fd < 0)
		return fd;
	close(ps->fd);
	ps->fd = fd;
	ps->info.stack_copy = want;
	ps->info.refits++;
	return 1;
}

int perfsample_probe(pid_t tid, char *why, size_t whylen)
{
	struct perfsample *ps;
	int r = perfsample_open(tid, PERFSAMPLE_PERIOD_MAX_NS, 0, &ps, why, whylen);

	perfsample_close(ps);
	return r;
}

void perfsample_info(const struct perfsample *ps, struct perfsample_info *out)
{
	*out = ps->info;
}

/* ---- parsing ---- */

struct cursor {
	const unsigned char *p, *end;
};

static bool take(struct cursor *c, void *dst, size_t n)
{
	if ((size_t)(c->end - c->p) < n)
		return false;
	memcpy(dst, c->p, n);
	c->p += n;
	return true;
}

static int parse_sample(struct cursor *c, struct perfsample_record *out)
{
	struct perfsample_sample *s = &out->sample;
	uint32_t ids[2];
	uint64_t abi, size, dyn;

	if (!take(c, ids, sizeof(ids)) || !take(c, &s->copy.time_ns, 8) || !take(c, &abi, 8))
		return -EBADMSG;
	s->pid = (pid_t)ids[0];
	s->tid = (pid_t)ids[1];
	if (abi == PERF_SAMPLE_REGS_ABI_NONE) {
		/* No registers, and then no stack: the kernel writes a size of 0. */
		if (!take(c, &size, 8) || size != 0)
			return -EBADMSG;
		return 0;
	}
	if (abi != PERF_SAMPLE_REGS_ABI_64)
		return -EBADMSG;
	for (size_t i = 0; i < NREGS; i++) {
		uint64_t v;
		if (!take(c, &v, 8))
			return -EBADMSG;
		memcpy((unsigned char *)&s->copy.regs + regmap[i].off, &v, 8);
	}
	out->regs = true;
	if (!take(c, &size, 8) || size > (size_t)(c->end - c->p))
		return -EBADMSG;
	s->copy.stack = (unsigned char *)(uintptr_t)c->p;
	c->p += size;
	if (size == 0)
		dyn = 0;
	else if (!take(c, &dyn, 8) || dyn > size)
		return -EBADMSG;
	s->copy.stack_addr = s->copy.regs.rsp;
	s->copy.stack_len = (size_t)dyn;
	/* The kernel's copy stops early only at memory it cannot read: the
	 * stack's end (perf_output_sample_ustack). */
	s->copy.stack_clipped = dyn < size;
	return 0;
}

int perfsample_parse(const unsigned char *rec, size_t len, struct perfsample_record *out)
{
	struct perf_event_header h;
	struct cursor c = { rec, rec + len };

	memset(out, 0, sizeof(*out));
	if (!take(&c, &h, sizeof(h)) || h.size < sizeof(h) || h.size > len)
		return -EBADMSG;
	c.end = rec + h.size;
	out->type = h.type;
	out->misc = h.misc;
	switch (h.type) {
	case PERF_RECORD_SAMPLE:
		return parse_sample(&c, out);
	case PERF_RECORD_LOST: {
		uint64_t id;
		return take(&c, &id, 8) && take(&c, &out->lost, 8) ? 0 : -EBADMSG;
	}
	case PERF_RECORD_COMM:
		out->exec = (h.misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
		return 0;
	default:
		return 0;
	}
}

/* ---- reading ---- */

/* The record at ring offset POS (any value; taken modulo the ring), LEN
 * bytes: in place, or copied out when it wraps the ring's end. */
static const unsigned char *ring_at(struct perfsample *ps, uint64_t pos, size_t len)
{
	size_t mask = ps->info.ring_bytes - 1;
	size_t at = (size_t)pos & mask;

	if (at + len <= ps->info.ring_bytes)
		return ps->data + at;
	size_t first = ps->info.ring_bytes - at;
	memcpy(ps->rec, ps->data + at, first);
	memcpy(ps->rec + first, ps->data, len - first);
	return ps->rec;
}

/* The size of the record at POS, 0 when it cannot be one (a header under
 * 8 bytes, past HEAD, or larger than a sample of ours can be). */
static size_t record_size(struct perfsample *ps, uint64_t pos, uint64_t head)
{
	struct perf_event_header h;

	if (head - pos < sizeof(h))
		return 0;
	memcpy(&h, ring_at(ps, pos, sizeof(h)), sizeof(h));
	if (h.size < sizeof(h) || h.size > head - pos || h.size > SAMPLE_FIXED + ps->info.stack_size)
		return 0;
	return h.size;
}

/* Whether an exec's COMM record is between TAIL and HEAD; *END where the
 * last one ends. */
static bool last_exec(struct perfsample *ps, uint64_t tail, uint64_t head, uint64_t *end)
{
	bool found = false;
	size_t n;

	*end = tail;
	for (uint64_t pos = tail; (n = record_size(ps, pos, head)) != 0; pos += n) {
		struct perf_event_header h;
		memcpy(&h, ring_at(ps, pos, sizeof(h)), sizeof(h));
		if (h.type == PERF_RECORD_COMM && (h.misc & PERF_RECORD_MISC_COMM_EXEC)) {
			*end = pos + n;
			found = true;
		}
	}
	return found;
}

static bool thread_gone(const struct perfsample *ps)
{
	struct pollfd p = { .fd = ps->ring_fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
}

int perfsample_read(struct perfsample *ps,
                    int (*fn)(const struct perfsample_sample *s, void *arg), void *arg)
{
	/* Gone before HEAD is read: what it wrote is all in the ring. */
	bool gone = thread_gone(ps);
	uint64_t head = __atomic_load_n(&ps->page->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = ps->page->data_tail;
	uint64_t exec_end;
	int handed = 0, r = 0;
	size_t n;

	if (last_exec(ps, tail, head, &exec_end))
		ps->execd = true;
	for (; r == 0 && (n = record_size(ps, tail, head)) != 0; tail += n) {
		struct perfsample_record rec;
		if (perfsample_parse(ring_at(ps, tail, n), n, &rec) < 0) {
			ps->info.bad++;
			continue;
		}
		if (rec.type == PERF_RECORD_LOST)
			ps->info.lost += rec.lost;
		else if (rec.type == PERF_RECORD_THROTTLE)
			ps->info.throttled++;
		if (rec.type != PERF_RECORD_SAMPLE)
			continue;
		if (!rec.regs) {
			ps->info.no_regs++;
		} else if (tail < exec_end) {
			ps->info.exec_dropped++;
		} else {
			ps->info.samples++;
			handed++;
			r = fn(&rec.sample, arg);
		}
	}
	if (r == 0 && tail != head) {
		/* A record that cannot be one: the stream is lost from here. */
		ps->info.bad++;
		tail = head;
	}
	__atomic_store_n(&ps->page->data_tail, tail, __ATOMIC_RELEASE);
	if (r < 0)
		return r;
	if (ps->execd)
		return -ENOEXEC;
	return gone ? -ESRCH : handed;
}
