#include "cpumond/sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/log.h"
#include "procfs/procfs.h"

/* What is known of one thread. */
struct thread_rec {
	pid_t tid;
	int fd;                  /* schedstat kept open, or -1: opened for each read */
	int stat_fd;             /* stat, opened the first time its state is wanted; or -1 */
	uint64_t key;
	uint64_t runtime_ns, run_delay_ns, read_ns;
	uint64_t slices;         /* schedstat's third field: times it was scheduled */
	bool runnable;           /* state R at the last read, and not run since the one before */
};

/* One watched process and its threads, in the order /proc/PID/task lists
 * them (the kernel's thread list: creation order, new threads at the end). */
struct proc_rec {
	pid_t pid;
	unsigned long long start_ticks;
	int gate;                /* from watch_proc, permille; 0: never gated */
	uint64_t key;            /* unique for the life of the sampler */
	int task_fd;             /* /proc/PID/task, rewound for each listing */
	clockid_t clock;         /* the process's CPU clock (all its threads, ns) */
	bool clock_ok;           /* clock is valid ... */
	bool have_cpu;           /* ... and cpu_ns was read at cpu_read_ns */
	uint64_t cpu_ns, cpu_read_ns;
	bool gated;              /* this cycle */
	bool gated_still;        /* ... and it used no CPU at all: none of its threads ran */
	int gated_usage;         /* the process's usage this cycle, when gated */
	bool gated_since_read;   /* gated at least once since its threads were read */
	uint64_t gated_cpu_ns;   /* CPU the whole process used while gated since then */
	uint64_t gated_at_ns;    /* when the last gated cycle read the clock */
	size_t index;            /* into this cycle's procs */
	struct thread_rec *threads;
	size_t nthreads, cap;
};

struct sampler {
	bool exact_still;        /* sampler_set_exact_still */
	struct proc_rec *procs, *next_procs;   /* sorted by pid */
	size_t nprocs, procs_cap;
	struct thread_rec *scratch;            /* the new thread list while listing */
	size_t scratch_cap;
	struct sampler_thread *out;
	size_t nout, out_cap;
	uint64_t next_key;
	size_t nfds;             /* thread descriptors kept open */
	bool warned_fds;
	uint64_t wait_some_ns, wait_window_ns;   /* sampler_set_cpu_wait */
	int wait_ncpu;
	/* One getdents64 buffer for every process: a glibc DIR would hold 32 KiB
	 * per watched process. */
	_Alignas(uint64_t) char dents[32768];   /* read as struct linux_dirent64 */
};

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

int sampler_permille(uint64_t delta_ns, uint64_t elapsed_ns)
{
	uint64_t pm;

	if (elapsed_ns == 0)
		return 0;
	/* delta * 1000 overflows only after 584 years of CPU time. */
	pm = (delta_ns * 1000 + elapsed_ns / 2) / elapsed_ns;
	return pm > 1000 ? 1000 : (int)pm;
}

bool sampler_gated(uint64_t proc_delta_ns, uint64_t elapsed_ns, int gate)
{
	if (gate <= 0 || elapsed_ns == 0)
		return false;
	/* Exact, not rounded: a process at 800.4‰ is not under a gate of 800
	 * (one thread of it could be over 800).  Overflows after 584 years. */
	return proc_delta_ns * 1000 <= (uint64_t)gate * elapsed_ns;
}

bool sampler_wait_possible(int threshold, int usage, uint64_t some_ns, uint64_t window_ns,
                           int ncpu)
{
	double wait;

	if (window_ns == 0 || ncpu <= 0)
		return false;
	if (some_ns == UINT64_MAX || usage >= threshold)
		return true;
	wait = (double)(threshold - usage) / 1000.0 * (double)window_ns;
	return (double)some_ns * ncpu * ncpu * (double)window_ns >= wait * wait;
}

void sampler_set_cpu_wait(struct sampler *s, uint64_t some_ns, uint64_t window_ns, int ncpu)
{
	s->wait_some_ns = some_ns;
	s->wait_window_ns = window_ns;
	s->wait_ncpu = ncpu;
}

/* sampler_wait_possible this cycle for a thread of P that used at most
 * USAGE. */
static bool wait_possible(const struct sampler *s, const struct proc_rec *p, int usage)
{
	return sampler_wait_possible(p->gate, usage, s->wait_some_ns, s->wait_window_ns,
	                             s->wait_ncpu);
}

int sampler_usage_after_gate(uint64_t delta_ns, uint64_t gated_cpu_ns, uint64_t elapsed_ns)
{
	return sampler_permille(delta_ns > gated_cpu_ns ? delta_ns - gated_cpu_ns : 0, elapsed_ns);
}

/* /proc/PID/task/TID/schedstat, from kernel/sched/stats.c:
 *   "151038713 2317455 187\n"  (ns on CPU, ns waiting on a run queue, slices) */
int sampler_parse_schedstat(const char *buf, uint64_t *runtime_ns, uint64_t *run_delay_ns)
{
	char *end;
	unsigned long long run, delay;

	errno = 0;
	run = strtoull(buf, &end, 10);
	if (end == buf || *end != ' ' || errno)
		return -EINVAL;
	buf = end + 1;
	delay = strtoull(buf, &end, 10);
	if (end == buf || *end != ' ' || errno)
		return -EINVAL;
	*runtime_ns = run;
	*run_delay_ns = delay;
	return 0;
}

int sampler_parse_schedstat_slices(const char *buf, uint64_t *runtime_ns, uint64_t *run_delay_ns,
                                   uint64_t *slices)
{
	const char *p = buf;
	char *end;
	unsigned long long n;
	int rc = sampler_parse_schedstat(buf, runtime_ns, run_delay_ns);

	if (rc < 0)
		return rc;
	for (int spaces = 0; spaces < 2; p++)
		spaces += *p == ' ';
	errno = 0;
	n = strtoull(p, &end, 10);
	if (end == p || (*end != '\n' && *end != '\0') || errno)
		return -EINVAL;
	*slices = n;
	return 0;
}

void sampler_set_exact_still(struct sampler *s, bool on)
{
	s->exact_still = on;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Every kept schedstat costs a descriptor: take all the soft limit may grow to. */
static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

struct sampler *sampler_new(void)
{
	struct sampler *s = calloc(1, sizeof *s);

	if (!s)
		return NULL;
	s->next_key = 1;
	raise_nofile_limit();
	return s;
}

static void close_thread(struct sampler *s, struct thread_rec *r)
{
	if (r->fd >= 0) {
		close(r->fd);
		s->nfds--;
		r->fd = -1;
	}
	if (r->stat_fd >= 0) {
		close(r->stat_fd);
		s->nfds--;
		r->stat_fd = -1;
	}
}

static void close_proc(struct sampler *s, struct proc_rec *p)
{
	for (size_t i = 0; i < p->nthreads; i++)
		close_thread(s, &p->threads[i]);
	free(p->threads);
	p->threads = NULL;
	p->nthreads = p->cap = 0;
	if (p->task_fd >= 0)
		close(p->task_fd);
	p->task_fd = -1;
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nprocs; i++)
		close_proc(s, &s->procs[i]);
	free(s->procs);
	free(s->next_procs);
	free(s->scratch);
	free(s->out);
	free(s);
}

size_t sampler_open_fds(const struct sampler *s)
{
	return s->nfds + s->nprocs;
}

static int open_schedstat(struct sampler *s, const struct proc_rec *p, pid_t tid)
{
	char path[32];
	int fd;

	snprintf(path, sizeof path, "%d/schedstat", (int)tid);
	fd = openat(p->task_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !s->warned_fds) {
		log_errno(LOG_WARNING, errno, "out of descriptors at %zu kept open; "
		          "new threads are read by path, which costs more", s->nfds);
		s->warned_fds = true;
	}
	return fd;
}

/* Reads one thread's schedstat; a thread without a kept descriptor is
 * opened, read and closed by path.  Returns 0, or -errno (-ESRCH: exited).
 *
 * The descriptors are kept, and this read is not procfs_read_file's (which
 * opens by path), because a read by path costs seven times as much: of
 * this thread's own schedstat, open+read+close took 5.0-6.0 µs median and
 * pread at 0 of a kept descriptor 0.70-0.89 µs (bench/schedstat_bench.c,
 * 10,000 reads each way, back to back, four runs on this 2-core VM at load
 * 3); at the daemon's 3 s cadence, 7.0-7.5 against 1.7-2.6 µs per thread
 * (bench/README.md, section 2, which also counts the kernel memory each
 * kept descriptor costs). */
static int read_schedstat(struct sampler *s, const struct proc_rec *p, const struct thread_rec *r,
                          uint64_t *runtime_ns, uint64_t *run_delay_ns, uint64_t *slices)
{
	char buf[96];
	ssize_t n;
	int fd = r->fd;

	if (fd < 0 && (fd = open_schedstat(s, p, r->tid)) < 0)
		return -errno;
	/* pread at 0 on a kept descriptor regenerates the file each time; after
	 * the thread exited it fails with ESRCH, so a reused tid is never read
	 * through the old thread's descriptor. */
	n = pread(fd, buf, sizeof buf - 1, 0);
	if (n < 0)
		n = -errno;
	if (fd != r->fd)
		close(fd);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	return sampler_parse_schedstat_slices(buf, runtime_ns, run_delay_ns, slices);
}

/* Whether thread R of P is runnable now (state R in its stat).  The stat
 * is kept open once read, as schedstat is: of 1,000 idle threads on this
 * 2-core VM under load, open+read+close of stat took 10.8-11.1 µs a
 * thread and pread of a kept one 4.1-5.6 µs (a loop over the threads of
 * hotchain --threads 1000, five rounds).  Out of descriptors, it is read
 * by path. */
static bool read_runnable(struct sampler *s, const struct proc_rec *p, struct thread_rec *r)
{
	struct procfs_stat st;
	char buf[1024], path[32];
	ssize_t n;

	if (r->stat_fd < 0) {
		snprintf(path, sizeof path, "%d/stat", (int)r->tid);
		r->stat_fd = openat(p->task_fd, path, O_RDONLY | O_CLOEXEC);
		if (r->stat_fd < 0)
			return procfs_read_stat(p->pid, r->tid, &st) == 0 && st.state == 'R';
		s->nfds++;
	}
	n = pread(r->stat_fd, buf, sizeof buf - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return procfs_parse_stat(buf, &st) == 0 && st.state == 'R';
}

static int push_out(struct sampler *s, const struct sampler_thread *t)
{
	if (s->nout == s->out_cap) {
		size_t cap = s->out_cap ? 2 * s->out_cap : 256;
		struct sampler_thread *o = realloc(s->out, cap * sizeof *o);
		if (!o)
			return -ENOMEM;
		s->out = o;
		s->out_cap = cap;
	}
	s->out[s->nout++] = *t;
	return 0;
}

/* Reads thread R of P and reports it; FIRST: R was just found.  Returns 0
 * (also when R cannot be opened for want of descriptors: it is kept and
 * reported when it can be), 1 when the thread is gone (R is then to be
 * dropped), or -ENOMEM. */
static int sample_thread(struct sampler *s, struct proc_rec *p, struct thread_rec *r, bool first)
{
	struct sampler_thread t = { .pid = p->pid, .tid = r->tid, .proc = p->index, .usage = -1,
	                            .demand = -1, .proc_key = p->key };
	uint64_t runtime, delay, now, slices;
	int rc = read_schedstat(s, p, r, &runtime, &delay, &slices);
	bool unmoved;

	if (rc == -EMFILE || rc == -ENFILE)
		return 0;        /* alive but unreadable now: kept, so that the count matches */
	if (rc < 0)
		return 1;        /* exited since the listing, or since the last cycle */
	first |= r->read_ns == 0;   /* found while out of descriptors: no baseline yet */
	now = mono_ns();
	if (!first && runtime < r->runtime_ns) {
		/* Run time never goes back for one thread: this is another one under
		 * the same tid (read by path after the descriptors ran out, or the
		 * leader's tid handed to the thread that called exec).  Start over. */
		r->key = s->next_key++;
	} else if (!first) {
		if (p->gated_since_read)
			t.usage = sampler_usage_after_gate(runtime - r->runtime_ns, p->gated_cpu_ns,
			                                   now - p->gated_at_ns);
		else
			t.usage = sampler_permille(runtime - r->runtime_ns, now - r->read_ns);
		t.run_delay = sampler_permille(delay - r->run_delay_ns, now - r->read_ns);
		t.demand = t.usage + t.run_delay > 1000 ? 1000 : t.usage + t.run_delay;
	}
	/* Not run since the last read: runnable then and still not run means
	 * it waited all along (it cannot leave R without running); otherwise
	 * its state tells whether it waits now. */
	unmoved = !first && runtime == r->runtime_ns && t.usage >= 0;
	if (unmoved && r->runnable) {
		t.waited_all = true;
		t.demand = 1000;
	} else {
		r->runnable = unmoved && wait_possible(s, p, 0) && read_runnable(s, p, r);
	}
	t.still = !first && runtime == r->runtime_ns && slices == r->slices;
	t.key = r->key;
	r->slices = slices;
	r->runtime_ns = runtime;
	r->run_delay_ns = delay;
	r->read_ns = now;
	return push_out(s, &t) < 0 ? -ENOMEM : 0;
}

/* "4242" to 4242; anything else (".", "..") to 0. */
static pid_t parse_tid(const char *name)
{
	unsigned long v = 0;

	if (!*name)
		return 0;
	for (; *name; name++) {
		if (*name < '0' || *name > '9' || v > 0x3fffffff)
			return 0;
		v = v * 10 + (unsigned long)(*name - '0');
	}
	return (pid_t)v;
}

static int reserve_scratch(struct sampler *s, size_t n)
{
	struct thread_rec *a;
	size_t cap;

	if (n <= s->scratch_cap)
		return 0;
	cap = s->scratch_cap ? 2 * s->scratch_cap : 64;
	while (cap < n)
		cap *= 2;
	a = realloc(s->scratch, cap * sizeof *a);
	if (!a)
		return -ENOMEM;
	s->scratch = a;
	s->scratch_cap = cap;
	return 0;
}

/* Handles one listed tid while merging the listing into P's known threads
 * (OLD, of which the first *CUR are settled).  READ_KNOWN: known threads are
 * read too (else they were read already this cycle).  Appends to
 * s->scratch[*N].  Returns 0 or -ENOMEM. */
static int merge_tid(struct sampler *s, struct proc_rec *p, struct thread_rec *old, size_t nold,
                     size_t *cur, size_t *n, pid_t tid, bool read_known)
{
	struct thread_rec *r;
	size_t k;
	int rc;

	if (reserve_scratch(s, *n + 1) < 0)
		return -ENOMEM;
	r = &s->scratch[*n];
	for (k = *cur; k < nold && old[k].tid != tid; k++)
		;
	if (k < nold) {
		for (; *cur < k; (*cur)++)
			close_thread(s, &old[*cur]);          /* listed no more: exited */
		*r = old[k];
		*cur = k + 1;
		rc = read_known ? sample_thread(s, p, r, false) : 0;
	} else {
		/* New threads join the end of the thread list, after every known
		 * thread still alive: the known ones not met by now have exited.
		 * (Were the order ever different, a known thread would only be
		 * taken for a new one and lose one sample.) */
		for (; *cur < nold; (*cur)++)
			close_thread(s, &old[*cur]);
		*r = (struct thread_rec){ .tid = tid, .key = s->next_key++, .stat_fd = -1 };
		r->fd = open_schedstat(s, p, tid);
		if (r->fd >= 0)
			s->nfds++;
		rc = sample_thread(s, p, r, true);
	}
	if (rc > 0)
		close_thread(s, r);                       /* gone already */
	else
		(*n)++;      /* kept even when out of memory: its descriptor stays owned */
	return rc < 0 ? rc : 0;
}

/* Lists /proc/PID/task and merges it into P's known threads.  Returns 0 or
 * -ENOMEM. */
static int list_proc(struct sampler *s, struct proc_rec *p, bool read_known)
{
	struct thread_rec *old = p->threads, *t;
	size_t nold = p->nthreads, cur = 0, n = 0, cap;
	long len;
	int rc = 0;

	if (lseek(p->task_fd, 0, SEEK_SET) == 0)
		while (rc == 0 && (len = syscall(SYS_getdents64, p->task_fd, s->dents,
		                                 sizeof s->dents)) > 0) {
			for (long off = 0; off < len && rc == 0;) {
				const struct linux_dirent64 *de = (const void *)(s->dents + off);
				pid_t tid = parse_tid(de->d_name);

				off += de->d_reclen;
				if (tid > 0)
					rc = merge_tid(s, p, old, nold, &cur, &n, tid, read_known);
			}
		}
	/* Whatever was not listed is gone (or, on an error, is found again at
	 * the next listing as a new thread). */
	for (; cur < nold; cur++)
		close_thread(s, &old[cur]);
	t = p->threads;
	cap = p->cap;
	p->threads = s->scratch;
	p->cap = s->scratch_cap;
	p->nthreads = n;
	s->scratch = t;
	s->scratch_cap = cap;
	return rc;
}

/* How many threads P has now: /proc/PID/task's link count is 2 + the
 * thread count (proc_task_getattr), one fstat that walks no list.  Returns
 * the count, or -1. */
static long count_threads(const struct proc_rec *p)
{
	struct stat st;

	if (fstat(p->task_fd, &st) < 0 || st.st_nlink < 2)
		return -1;
	return (long)st.st_nlink - 2;
}

/* The gated cycle of P: its threads come out unread, with the process's
 * usage as their upper bound. */
static int report_gated(struct sampler *s, const struct proc_rec *p)
{
	for (size_t i = 0; i < p->nthreads; i++) {
		const struct thread_rec *r = &p->threads[i];
		struct sampler_thread t = { .pid = p->pid, .tid = r->tid, .proc = p->index,
		                            .key = r->key, .usage = p->gated_usage,
		                            .run_delay = -1, .gated = true, .demand = -1,
		                            .proc_key = p->key, .still = p->gated_still };
		if (push_out(s, &t) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Reads P's process CPU clock; true when the process as a whole stayed
 * under its gate since the last reading, and none of its threads can have
 * waited for a CPU long enough to be starved. */
static bool check_gate(const struct sampler *s, struct proc_rec *p)
{
	struct timespec ts;
	uint64_t now = mono_ns(), cpu;
	bool gated = false;

	if (!p->clock_ok || clock_gettime(p->clock, &ts) < 0) {
		p->have_cpu = false;
		return false;
	}
	cpu = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (p->have_cpu && p->nthreads > 0 && cpu >= p->cpu_ns &&
	    sampler_gated(cpu - p->cpu_ns, now - p->cpu_read_ns, p->gate) &&
	    !wait_possible(s, p, sampler_permille(cpu - p->cpu_ns, now - p->cpu_read_ns)) &&
	    (!s->exact_still || cpu == p->cpu_ns)) {
		gated = true;
		p->gated_still = cpu == p->cpu_ns;
		p->gated_usage = sampler_permille(cpu - p->cpu_ns, now - p->cpu_read_ns);
		p->gated_cpu_ns += cpu - p->cpu_ns;
		p->gated_since_read = true;
		p->gated_at_ns = now;
	}
	p->have_cpu = true;
	p->cpu_ns = cpu;
	p->cpu_read_ns = now;
	return gated;
}

static int sample_proc(struct sampler *s, struct proc_rec *p)
{
	bool lost = false;
	size_t kept = 0;
	int rc = 0;

	/* The gate costs one clock_gettime: only for a process that has one. */
	p->gated = p->gate > 0 && check_gate(s, p);
	if (p->gated)
		return report_gated(s, p);
	if (p->nthreads == 0 || count_threads(p) != (long)p->nthreads) {
		rc = list_proc(s, p, true);
	} else {
		/* Same count, so the same threads unless one was replaced: a known
		 * thread alive now was alive when counted, so if all are, the
		 * count leaves no room for a new one. */
		for (size_t i = 0; i < p->nthreads; i++) {
			struct thread_rec *r = &p->threads[i];
			int got = rc < 0 ? 0 : sample_thread(s, p, r, false);

			if (got > 0) {
				close_thread(s, r);
				lost = true;
			} else {
				rc = got < 0 ? got : rc;       /* out of memory: keep the rest unread */
				p->threads[kept++] = *r;
			}
		}
		p->nthreads = kept;
		if (rc == 0 && lost)
			rc = list_proc(s, p, false);   /* find who replaced them */
	}
	p->gated_since_read = false;
	p->gated_cpu_ns = 0;
	return rc;
}

/* Finds PID among the previous cycle's processes (sorted by pid). */
static struct proc_rec *find_proc(struct sampler *s, pid_t pid)
{
	size_t lo = 0, hi = s->nprocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->procs[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nprocs && s->procs[lo].pid == pid ? &s->procs[lo] : NULL;
}

/* Carries the processes that are still the same over to this cycle's list
 * and closes the others. */
static int update_procs(struct sampler *s, const struct watch_proc *procs, size_t nprocs)
{
	size_t n = 0;

	if (nprocs > s->procs_cap) {
		struct proc_rec *a = realloc(s->procs, nprocs * sizeof *a);
		struct proc_rec *b;
		if (!a)
			return -ENOMEM;
		s->procs = a;
		b = realloc(s->next_procs, nprocs * sizeof *b);
		if (!b)
			return -ENOMEM;
		s->next_procs = b;
		s->procs_cap = nprocs;
	}
	for (size_t i = 0; i < nprocs; i++) {
		struct proc_rec *old = find_proc(s, procs[i].pid);
		struct proc_rec *p = &s->next_procs[n];

		if (old && old->task_fd >= 0 && old->start_ticks == procs[i].start_ticks) {
			*p = *old;
			old->task_fd = -1;       /* moved */
			old->threads = NULL;
			old->nthreads = old->cap = 0;
		} else {
			char path[32];
			snprintf(path, sizeof path, "/proc/%d/task", (int)procs[i].pid);
			*p = (struct proc_rec){ .pid = procs[i].pid, .start_ticks = procs[i].start_ticks,
			                        .key = s->next_key++,
			                        .task_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) };
			if (p->task_fd < 0)
				continue;        /* gone since watch_resolve */
			/* Reading another process's CPU clock needs no privilege. */
			p->clock_ok = clock_getcpuclockid(p->pid, &p->clock) == 0;
		}
		p->gate = procs[i].gate;
		p->index = i;
		n++;
	}
	for (size_t i = 0; i < s->nprocs; i++)
		close_proc(s, &s->procs[i]);
	struct proc_rec *t = s->procs;
	s->procs = s->next_procs;
	s->next_procs = t;
	s->nprocs = n;
	return 0;
}

int sampler_cycle(struct sampler *s, const struct watch_proc *procs, size_t nprocs,
                  const struct sampler_thread **out, size_t *nout)
{
	int rc = 0;

	s->nout = 0;
	if (update_procs(s, procs, nprocs) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < s->nprocs && rc == 0; i++)
		rc = sample_proc(s, &s->procs[i]);
	*out = s->out;
	*nout = s->nout;
	return rc;
}
