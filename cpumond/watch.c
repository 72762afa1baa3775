#include "cpumond/watch.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <libproc2/pids.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-login.h>
#include <unistd.h>

#include "cpumond/log.h"
#include "procfs/procfs.h"

enum { ITEM_PID, ITEM_TICS_BEGAN, ITEM_CMD, ITEM_FLAGS, ITEM_FIXED };

struct watch {
	const struct config *cfg;
	struct pids_info *info;
	enum pids_item items[ITEM_FIXED + 3];
	int nitems;
	int item_ruid, item_exe, item_cmdline;   /* index in items, or -1 */
	bool scan_all;           /* some watch selects by more than pid/pidfile */
	bool direct;             /* pids only, and comm at most: /proc/PID/stat, no libproc2 */
	pid_t self;
	struct watch_proc *procs;
	size_t nprocs, cap;
	pid_t *pidfile_pids;     /* per watch: what its pidfile said this cycle */
	struct unit_of *units;   /* the unit of each cgroup path seen, by path */
	size_t nunits, units_cap;
	struct pids_fetch *fetch; /* this cycle's processes, read by watch_why_empty;
	                          * libproc2's until the next reap; NULL when direct */
};

/* A unit is named after the cgroup path alone, and libsystemd reads
 * /proc/PID/cgroup once more, a line at a time: 35 µs a process against 9
 * for procfs's one read of it (bench/README.md, section 4).  So the unit
 * selector reads the path and asks libsystemd once a path, across cycles;
 * paths come and go (sessions, containers): past UNITS_MAX the cache
 * starts again. */
#define UNITS_MAX 4096

struct unit_of {
	char *path;
	int rc;                  /* watch_read_unit's */
	char unit[WATCH_UNIT_MAX];
};

/* What the cgroup and unit selectors see of one process, read when the
 * first watch whose other selectors let it through asks, and kept for the
 * next watches that ask about the same process.  Each process comes once a
 * scan, so the pid tells a new one. */
struct origin {
	struct watch *w;         /* its unit cache */
	pid_t pid;               /* 0: none yet */
	int cgroup_rc, unit_rc;  /* 1: not read yet; 0: read; -errno: none */
	char cgroup[PATH_MAX];
	char unit[WATCH_UNIT_MAX];
};

int watch_read_unit(pid_t pid, char *buf, size_t len)
{
	char *unit = NULL;
	int rc = sd_pid_get_unit(pid, &unit);

	if (rc < 0)
		rc = sd_pid_get_user_unit(pid, &unit);
	snprintf(buf, len, "%s", rc < 0 || !unit ? "" : unit);
	free(unit);
	return rc < 0 ? rc : 0;
}

static int cmp_unit_of(const void *key, const void *elem)
{
	return strcmp(key, ((const struct unit_of *)elem)->path);
}

/* Keeps the unit RC, UNIT of cgroup PATH; out of memory, it is asked again
 * next time. */
static void remember_unit(struct watch *w, const char *path, int rc, const char *unit)
{
	struct unit_of *u;
	size_t at = 0;

	if (w->nunits == UNITS_MAX) {
		for (size_t i = 0; i < w->nunits; i++)
			free(w->units[i].path);
		w->nunits = 0;
	}
	if (w->nunits == w->units_cap) {
		size_t cap = w->units_cap ? 2 * w->units_cap : 64;

		if (!(u = reallocarray(w->units, cap, sizeof *u)))
			return;
		w->units = u;
		w->units_cap = cap;
	}
	while (at < w->nunits && strcmp(w->units[at].path, path) < 0)
		at++;
	u = &w->units[at];
	memmove(u + 1, u, (w->nunits - at) * sizeof *u);
	if (!(u->path = strdup(path))) {
		memmove(u, u + 1, (w->nunits - at) * sizeof *u);
		return;
	}
	u->rc = rc;
	snprintf(u->unit, sizeof u->unit, "%s", unit);
	w->nunits++;
}

/* The unit of O's process into o->unit, its rc into o->unit_rc: by its
 * cgroup path when it has one (o->cgroup_rc 0), from the cache, else from
 * libsystemd, kept when the process was in the same cgroup after. */
static void read_unit(struct origin *o)
{
	struct watch *w = o->w;
	const struct unit_of *u;
	char again[PATH_MAX];

	if (o->cgroup_rc > 0)
		o->cgroup_rc = procfs_read_cgroup(o->pid, o->cgroup, sizeof o->cgroup);
	if (o->cgroup_rc == -ESRCH) {
		o->unit_rc = -ESRCH;     /* gone */
		return;
	}
	u = o->cgroup_rc == 0 && w->nunits ?
	    bsearch(o->cgroup, w->units, w->nunits, sizeof *u, cmp_unit_of) : NULL;
	if (u) {
		o->unit_rc = u->rc;
		snprintf(o->unit, sizeof o->unit, "%s", u->unit);
		return;
	}
	o->unit_rc = watch_read_unit(o->pid, o->unit, sizeof o->unit);
	/* Not of a gone process, nor of one moved meanwhile (a v1-only host
	 * has no path: each is asked). */
	if (o->cgroup_rc == 0 && o->unit_rc != -ESRCH &&
	    procfs_read_cgroup(o->pid, again, sizeof again) == 0 && strcmp(again, o->cgroup) == 0)
		remember_unit(w, o->cgroup, o->unit_rc, o->unit);
}

/* Whether PID passes WC's cgroup and unit selectors (true when it has
 * none); the others are checked first, being read already. */
static bool origin_matches(const struct watch_config *wc, pid_t pid, struct origin *o)
{
	if (!wc->cgroup && !wc->unit)
		return true;
	if (o->pid != pid) {
		o->pid = pid;
		o->cgroup_rc = o->unit_rc = 1;
	}
	if (wc->cgroup) {
		if (o->cgroup_rc > 0)
			o->cgroup_rc = procfs_read_cgroup(pid, o->cgroup, sizeof o->cgroup);
		if (o->cgroup_rc < 0 || regexec(&wc->cgroup_re, o->cgroup, 0, NULL, 0) != 0)
			return false;
	}
	if (wc->unit) {
		if (o->unit_rc > 0)
			read_unit(o);
		if (o->unit_rc < 0 || fnmatch(wc->unit, o->unit, 0) != 0)
			return false;
	}
	return true;
}

static bool watch_is_by_pid(const struct watch_config *wc)
{
	return (wc->pid || wc->pidfile) && !wc->all;
}

static int add_item(struct watch *w, enum pids_item item)
{
	w->items[w->nitems] = item;
	return w->nitems++;
}

int watch_new(const struct config *cfg, struct watch **out)
{
	struct watch *w = calloc(1, sizeof *w);
	bool need_ruid = false, need_exe = false, need_cmdline = false;
	int rc;

	if (!w)
		return -ENOMEM;
	w->cfg = cfg;
	w->self = getpid();
	w->pidfile_pids = calloc(cfg->nwatches, sizeof *w->pidfile_pids);
	if (!w->pidfile_pids) {
		free(w);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cfg->nwatches; i++) {
		const struct watch_config *wc = &cfg->watches[i];
		need_ruid |= wc->user != NULL;
		need_exe |= wc->exe != NULL;
		need_cmdline |= wc->cmdline != NULL;
		w->scan_all |= !watch_is_by_pid(wc);
	}
	/* Watches by pid or pidfile that need at most the comm (and the unit
	 * and cgroup, read apart anyway) read one stat file per pid
	 * themselves: libproc2's buffers (~470 KiB of heap:
	 * two 128 KiB read buffers, its stacks and hash tables, measured with
	 * massif) would be a quarter of the daemon's anonymous memory. */
	w->direct = !w->scan_all && !need_ruid && !need_exe && !need_cmdline;
	if (w->direct) {
		*out = w;
		return 0;
	}
	add_item(w, PIDS_ID_PID);
	add_item(w, PIDS_TICS_BEGAN);
	add_item(w, PIDS_CMD);
	add_item(w, PIDS_FLAGS);
	w->item_ruid = need_ruid ? add_item(w, PIDS_ID_RUID) : -1;
	w->item_exe = need_exe ? add_item(w, PIDS_EXE) : -1;
	w->item_cmdline = need_cmdline ? add_item(w, PIDS_CMDLINE) : -1;
	rc = procps_pids_new(&w->info, w->items, w->nitems);
	if (rc < 0) {
		free(w->pidfile_pids);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

void watch_free(struct watch *w)
{
	if (!w)
		return;
	if (w->info)
		procps_pids_unref(&w->info);
	for (size_t i = 0; i < w->nunits; i++)
		free(w->units[i].path);
	free(w->units);
	free(w->procs);
	free(w->pidfile_pids);
	free(w);
}

/* A pidfile holds a decimal pid and a newline; anything else names no
 * process.  Returns the pid, or 0. */
static pid_t read_pidfile(const char *path)
{
	char buf[32];
	ssize_t n;
	char *end;
	long pid;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0) {
		log_errno(LOG_DEBUG, errno, "pidfile %s", path);
		return 0;
	}
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	errno = 0;
	pid = strtol(buf, &end, 10);
	if (errno || end == buf || pid <= 0 || pid > 0x3fffffff || (*end && *end != '\n')) {
		log_msg(LOG_DEBUG, "pidfile %s holds no pid", path);
		return 0;
	}
	return (pid_t)pid;
}

static bool watch_matches(const struct watch *w, const struct watch_config *wc,
                          const struct pids_stack *stack, pid_t pid, pid_t pidfile_pid,
                          struct origin *o)
{
	if (wc->pid && wc->pid != pid)
		return false;
	if (wc->pidfile && pidfile_pid != pid)
		return false;
	if (wc->comm && strcmp(wc->comm, PIDS_VAL(ITEM_CMD, str, stack, w->info)) != 0)
		return false;
	if (wc->user && PIDS_VAL(w->item_ruid, u_int, stack, w->info) != wc->uid)
		return false;
	if (wc->exe && strcmp(wc->exe, PIDS_VAL(w->item_exe, str, stack, w->info)) != 0)
		return false;
	if (wc->cmdline && regexec(&wc->cmdline_re, PIDS_VAL(w->item_cmdline, str, stack, w->info),
	                           0, NULL, 0) != 0)
		return false;
	return origin_matches(wc, pid, o);
}

static int add_proc(struct watch *w, pid_t pid, unsigned long long start_ticks, size_t watch,
                    const char *comm)
{
	struct watch_proc *p;

	if (w->nprocs == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		p = realloc(w->procs, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		w->procs = p;
		w->cap = cap;
	}
	p = &w->procs[w->nprocs++];
	p->pid = pid;
	p->start_ticks = start_ticks;
	p->watch = watch;
	/* A process belongs to its first matching watch only, so that watch's
	 * threshold is the only one that applies to its threads; its
	 * process_threshold, when lower, to the whole process; the usage
	 * history needs every thread over history_floor read (history.h). */
	p->gate = w->cfg->watches[watch].threshold;
	if (w->cfg->watches[watch].process_threshold > 0 &&
	    w->cfg->watches[watch].process_threshold < p->gate)
		p->gate = w->cfg->watches[watch].process_threshold;
	if (w->cfg->history_threads > 0 && w->cfg->history_floor < p->gate)
		p->gate = w->cfg->history_floor;
	snprintf(p->comm, sizeof p->comm, "%s", comm);
	return 0;
}

static int push_proc(struct watch *w, const struct pids_stack *stack, pid_t pid, size_t watch)
{
	return add_proc(w, pid, PIDS_VAL(ITEM_TICS_BEGAN, ull_int, stack, w->info), watch,
	                PIDS_VAL(ITEM_CMD, str, stack, w->info));
}

/* The direct way for pid and pidfile watches: one read of the leader's
 * stat per pid asked for. */
static int resolve_direct(struct watch *w)
{
	const struct config *cfg = w->cfg;
	struct origin o = { .w = w };

	w->nprocs = 0;
	for (size_t i = 0; i < cfg->nwatches; i++) {
		const struct watch_config *wc = &cfg->watches[i];
		pid_t pid = wc->pid ? wc->pid : w->pidfile_pids[i];
		struct procfs_stat st;

		if (pid <= 0 || pid == w->self || (wc->pidfile && w->pidfile_pids[i] != pid))
			continue;
		/* The leader thread's stat, not the process's: /proc/PID/stat sums
		 * every thread's times and faults, 200 µs at 1,000 threads (strace
		 * -T), which was most of a gated cycle; the leader's start time,
		 * comm and flags are the process's, read in constant time.  A
		 * zombie leader still has its stat. */
		if (procfs_read_stat(pid, pid, &st) < 0 || (st.flags & PROCFS_PF_KTHREAD))
			continue;        /* no such process, or not one of ours */
		st.comm[sizeof w->procs->comm - 1] = '\0';   /* cut as a watch_proc keeps it */
		if ((wc->comm && strcmp(wc->comm, st.comm) != 0) || !origin_matches(wc, pid, &o))
			continue;
		if (add_proc(w, pid, st.start_time, i, st.comm) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int cmp_proc(const void *a, const void *b)
{
	const struct watch_proc *x = a, *y = b;

	if (x->pid != y->pid)
		return (x->pid > y->pid) - (x->pid < y->pid);
	return (x->watch > y->watch) - (x->watch < y->watch);
}

/* A pid asked for twice (a pid and a pidfile naming the same process) comes
 * back twice: keep it once, under its first watch. */
static void drop_duplicates(struct watch *w)
{
	size_t kept = 0;

	for (size_t i = 0; i < w->nprocs; i++)
		if (kept == 0 || w->procs[kept - 1].pid != w->procs[i].pid)
			w->procs[kept++] = w->procs[i];
	w->nprocs = kept;
}

int watch_resolve(struct watch *w, const struct watch_proc **procs, size_t *n)
{
	const struct config *cfg = w->cfg;
	pid_t *pidfile_pids = w->pidfile_pids;
	struct pids_fetch *fetch;
	struct origin o = { .w = w };

	w->fetch = NULL;
	for (size_t i = 0; i < cfg->nwatches; i++) {
		const struct watch_config *wc = &cfg->watches[i];
		pidfile_pids[i] = wc->pidfile ? read_pidfile(wc->pidfile) : 0;
	}
	if (w->direct) {
		int rc = resolve_direct(w);
		if (rc < 0)
			return rc;
		/* Sorted by pid, then by watch: the first watch of a pid stays.
		 * (procs is NULL until a first match: qsort wants a pointer.) */
		if (w->nprocs > 1)
			qsort(w->procs, w->nprocs, sizeof *w->procs, cmp_proc);
		drop_duplicates(w);
		*procs = w->procs;
		*n = w->nprocs;
		return 0;
	}
	if (w->scan_all) {
		fetch = procps_pids_reap(w->info, PIDS_FETCH_TASKS_ONLY);
	} else {
		/* Only pid and pidfile watches: ask for those pids alone. */
		unsigned *these = calloc(cfg->nwatches, sizeof *these);
		size_t k = 0;
		if (!these)
			return -ENOMEM;
		for (size_t i = 0; i < cfg->nwatches; i++) {
			pid_t pid = cfg->watches[i].pid ? cfg->watches[i].pid : pidfile_pids[i];
			if (pid > 0)
				these[k++] = (unsigned)pid;
		}
		fetch = k ? procps_pids_select(w->info, these, (int)k, PIDS_SELECT_PID) : NULL;
		free(these);
		if (!k) {
			*procs = w->procs;
			*n = w->nprocs = 0;
			return 0;
		}
	}
	if (!fetch)
		return errno ? -errno : -EIO;
	w->fetch = fetch;

	w->nprocs = 0;
	for (int r = 0; r < fetch->counts->total; r++) {
		const struct pids_stack *stack = fetch->stacks[r];
		pid_t pid = PIDS_VAL(ITEM_PID, s_int, stack, w->info);

		if (pid == w->self || (PIDS_VAL(ITEM_FLAGS, ul_int, stack, w->info) & PROCFS_PF_KTHREAD))
			continue;
		for (size_t i = 0; i < cfg->nwatches; i++) {
			if (!watch_matches(w, &cfg->watches[i], stack, pid, pidfile_pids[i], &o))
				continue;
			if (push_proc(w, stack, pid, i) < 0)
				return -ENOMEM;
			break;
		}
	}
	if (w->nprocs > 1)
		qsort(w->procs, w->nprocs, sizeof *w->procs, cmp_proc);
	drop_duplicates(w);
	*procs = w->procs;
	*n = w->nprocs;
	return 0;
}

/* A watch by pid, pidfile, comm, unit and cgroup alone (the direct way)
 * can only lose its process to an earlier watch that asked for the same
 * pid. */
static bool direct_matches(const struct watch *w, size_t i, const struct watch_proc *p,
                           struct origin *o)
{
	const struct watch_config *wc = &w->cfg->watches[i];
	pid_t pid = wc->pid ? wc->pid : w->pidfile_pids[i];

	return p->pid == pid && (!wc->pidfile || w->pidfile_pids[i] == pid) &&
	       (!wc->comm || strcmp(wc->comm, p->comm) == 0) && origin_matches(wc, pid, o);
}

static int cmp_pid(const void *key, const void *elem)
{
	pid_t pid = *(const pid_t *)key, other = ((const struct watch_proc *)elem)->pid;

	return (pid > other) - (pid < other);
}

/* The watch PID was resolved under; NWATCHES when it is not watched. */
static size_t owner_of(const struct watch *w, pid_t pid)
{
	const struct watch_proc *p = w->nprocs ? bsearch(&pid, w->procs, w->nprocs, sizeof *p,
	                                                 cmp_pid) : NULL;

	return p ? p->watch : w->cfg->nwatches;
}

void watch_why_empty(struct watch *w, size_t i, struct watch_why *why)
{
	const struct watch_config *wc = &w->cfg->watches[i];
	char real[PATH_MAX];
	struct origin o = { .w = w };

	*why = (struct watch_why){ .pidfile_pid = wc->pidfile ? w->pidfile_pids[i] : 0 };
	if (wc->exe) {
		/* /proc/PID/exe is the file itself, every link on the way resolved. */
		if (!realpath(wc->exe, real))
			why->exe_err = errno;
		else if (strcmp(real, wc->exe) != 0)
			snprintf(why->exe_target, sizeof why->exe_target, "%s", real);
	}
	if (w->direct) {
		for (size_t k = 0; k < w->nprocs; k++)
			if (w->procs[k].watch != i && direct_matches(w, i, &w->procs[k], &o) &&
			    why->shadowed++ == 0)
				why->owner = w->procs[k].watch;
		return;
	}
	for (int r = 0; w->fetch && r < w->fetch->counts->total; r++) {
		const struct pids_stack *stack = w->fetch->stacks[r];
		pid_t pid = PIDS_VAL(ITEM_PID, s_int, stack, w->info);
		size_t owner;

		if (pid == w->self || (PIDS_VAL(ITEM_FLAGS, ul_int, stack, w->info) & PROCFS_PF_KTHREAD) ||
		    !watch_matches(w, wc, stack, pid, w->pidfile_pids[i], &o))
			continue;
		owner = owner_of(w, pid);
		if (owner != i && why->shadowed++ == 0)
			why->owner = owner;
	}
}
