#include "cpumond/sampler.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/log.h"

/* What is known of one thread; a slot of an open-addressing table keyed by
 * tid (tid 0 marks a free slot). */
struct thread_rec {
	pid_t tid;
	pid_t pid;
	unsigned long long start_ticks;  /* of its process: a reused pid is another process */
	int fd;                  /* schedstat kept open, or -1: opened for each read */
	uint32_t seen;           /* cycle of the last successful read */
	uint64_t key;
	uint64_t runtime_ns, run_delay_ns, read_ns;
};

struct proc_rec {
	pid_t pid;
	unsigned long long start_ticks;
	DIR *tasks;              /* /proc/PID/task, rewound each cycle */
};

struct sampler {
	struct thread_rec *slots;
	size_t cap, count;       /* cap is a power of two */
	struct proc_rec *procs, *next_procs;
	size_t nprocs, procs_cap;
	struct sampler_thread *out;
	size_t nout, out_cap;
	uint64_t next_key;
	uint32_t cycle;
	size_t nfds;
	bool warned_fds;
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
	s->cap = 1024;
	s->slots = calloc(s->cap, sizeof *s->slots);
	if (!s->slots) {
		free(s);
		return NULL;
	}
	s->next_key = 1;
	raise_nofile_limit();
	return s;
}

static void close_thread(struct sampler *s, struct thread_rec *r)
{
	if (r->fd >= 0) {
		close(r->fd);
		s->nfds--;
	}
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->cap; i++)
		if (s->slots[i].tid)
			close_thread(s, &s->slots[i]);
	for (size_t i = 0; i < s->nprocs; i++)
		closedir(s->procs[i].tasks);
	free(s->slots);
	free(s->procs);
	free(s->next_procs);
	free(s->out);
	free(s);
}

size_t sampler_open_fds(const struct sampler *s)
{
	return s->nfds + s->nprocs;
}

static size_t slot_of(const struct sampler *s, pid_t tid)
{
	/* Fibonacci hashing spreads sequential tids over the table. */
	return (size_t)(((uint64_t)(uint32_t)tid * 0x9e3779b97f4a7c15ULL) >> 32) & (s->cap - 1);
}

static struct thread_rec *find_thread(struct sampler *s, pid_t tid)
{
	for (size_t i = slot_of(s, tid);; i = (i + 1) & (s->cap - 1)) {
		if (s->slots[i].tid == tid || s->slots[i].tid == 0)
			return &s->slots[i];
	}
}

/* Linear probing with backward-shift deletion: no tombstones to age. */
static void remove_thread(struct sampler *s, struct thread_rec *r)
{
	size_t hole = (size_t)(r - s->slots);

	close_thread(s, r);
	for (size_t i = (hole + 1) & (s->cap - 1); s->slots[i].tid; i = (i + 1) & (s->cap - 1)) {
		size_t home = slot_of(s, s->slots[i].tid);
		/* Move the entry into the hole unless its home lies in (hole, i]. */
		if (((i - home) & (s->cap - 1)) >= ((i - hole) & (s->cap - 1))) {
			s->slots[hole] = s->slots[i];
			hole = i;
		}
	}
	s->slots[hole].tid = 0;
	s->count--;
}

static int grow_table(struct sampler *s)
{
	struct thread_rec *old = s->slots;
	size_t old_cap = s->cap;

	s->slots = calloc(old_cap * 2, sizeof *s->slots);
	if (!s->slots) {
		s->slots = old;
		return -ENOMEM;
	}
	s->cap = old_cap * 2;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].tid)
			*find_thread(s, old[i].tid) = old[i];
	free(old);
	return 0;
}

static int open_schedstat(struct sampler *s, const struct proc_rec *p, pid_t tid)
{
	char path[32];
	int fd;

	snprintf(path, sizeof path, "%d/schedstat", (int)tid);
	fd = openat(dirfd(p->tasks), path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !s->warned_fds) {
		log_errno(LOG_WARNING, errno, "out of descriptors at %zu kept open; "
		          "new threads are read by path, which costs more", s->nfds);
		s->warned_fds = true;
	}
	return fd;
}

/* Reads one thread's schedstat; FD < 0 means open, read, close by path. */
static int read_schedstat(struct sampler *s, const struct proc_rec *p, pid_t tid, int fd,
                          uint64_t *runtime_ns, uint64_t *run_delay_ns)
{
	char buf[96];
	ssize_t n;
	int own = fd < 0;

	if (own && (fd = open_schedstat(s, p, tid)) < 0)
		return -errno;
	/* pread at 0 on a kept descriptor regenerates the file each time; after
	 * the thread exited it fails with ESRCH, so a reused tid is never read
	 * through the old thread's descriptor. */
	n = pread(fd, buf, sizeof buf - 1, 0);
	if (n < 0)
		n = -errno;
	if (own)
		close(fd);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	return sampler_parse_schedstat(buf, runtime_ns, run_delay_ns);
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

static int sample_thread(struct sampler *s, const struct proc_rec *p, size_t proc, pid_t tid)
{
	struct thread_rec *r = find_thread(s, tid);
	struct sampler_thread t = { .pid = p->pid, .tid = tid, .proc = proc, .usage = -1 };
	uint64_t runtime, delay, now;

	if (r->tid && (r->pid != p->pid || r->start_ticks != p->start_ticks)) {
		remove_thread(s, r);     /* the tid now names a thread of another process */
		r = find_thread(s, tid);
	}
	if (!r->tid) {
		if (4 * (s->count + 1) > 3 * s->cap) {
			if (grow_table(s) < 0)
				return -ENOMEM;
			r = find_thread(s, tid);
		}
		*r = (struct thread_rec){ .tid = tid, .pid = p->pid, .start_ticks = p->start_ticks,
		                          .key = s->next_key++ };
		r->fd = open_schedstat(s, p, tid);
		if (r->fd >= 0)
			s->nfds++;
		s->count++;
	}
	if (read_schedstat(s, p, tid, r->fd, &runtime, &delay) < 0) {
		remove_thread(s, r);     /* exited between the listing and the read */
		return 0;
	}
	now = mono_ns();
	if (r->seen) {
		t.usage = sampler_permille(runtime - r->runtime_ns, now - r->read_ns);
		t.run_delay = sampler_permille(delay - r->run_delay_ns, now - r->read_ns);
	}
	t.key = r->key;
	r->runtime_ns = runtime;
	r->run_delay_ns = delay;
	r->read_ns = now;
	r->seen = s->cycle;
	return push_out(s, &t);
}

static int sample_proc(struct sampler *s, const struct proc_rec *p, size_t proc)
{
	struct dirent *de;

	rewinddir(p->tasks);
	while ((de = readdir(p->tasks))) {
		pid_t tid = (pid_t)atoi(de->d_name);
		if (tid > 0 && sample_thread(s, p, proc, tid) < 0)
			return -ENOMEM;
	}
	return 0;
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

/* Carries the task directories of processes that are still the same over
 * to this cycle's list and closes the others. */
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

		if (old && old->start_ticks == procs[i].start_ticks) {
			*p = *old;
			old->tasks = NULL;
		} else {
			char path[32];
			snprintf(path, sizeof path, "/proc/%d/task", (int)procs[i].pid);
			*p = (struct proc_rec){ .pid = procs[i].pid, .start_ticks = procs[i].start_ticks,
			                        .tasks = opendir(path) };
			if (!p->tasks)
				continue;        /* gone since watch_resolve */
		}
		n++;
	}
	for (size_t i = 0; i < s->nprocs; i++)
		if (s->procs[i].tasks)
			closedir(s->procs[i].tasks);
	struct proc_rec *t = s->procs;
	s->procs = s->next_procs;
	s->next_procs = t;
	s->nprocs = n;
	return 0;
}

/* Forgets the threads not read this cycle: exited, or of a process no
 * longer watched. */
static void sweep_threads(struct sampler *s)
{
	for (size_t i = 0; i < s->cap;) {
		if (s->slots[i].tid && s->slots[i].seen != s->cycle)
			remove_thread(s, &s->slots[i]);   /* may shift another entry into i */
		else
			i++;
	}
}

int sampler_cycle(struct sampler *s, const struct watch_proc *procs, size_t nprocs,
                  const struct sampler_thread **out, size_t *nout)
{
	int rc = 0;

	s->cycle++;
	if (s->cycle == 0)
		s->cycle = 1;            /* 0 means "never read" */
	s->nout = 0;
	if (update_procs(s, procs, nprocs) < 0)
		return -ENOMEM;
	for (size_t i = 0, j = 0; i < s->nprocs && rc == 0; i++) {
		while (procs[j].pid != s->procs[i].pid)
			j++;             /* both sorted; s->procs is a subset */
		rc = sample_proc(s, &s->procs[i], j);
	}
	sweep_threads(s);
	*out = s->out;
	*nout = s->nout;
	return rc;
}
