#include "cpumond/watch.h"

#include <errno.h>
#include <fcntl.h>
#include <libproc2/pids.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpumond/log.h"

/* include/linux/sched.h: set in stat's flags for kernel threads. */
#define PF_KTHREAD 0x00200000UL

enum { ITEM_PID, ITEM_TICS_BEGAN, ITEM_CMD, ITEM_FLAGS, ITEM_FIXED };

struct watch {
	const struct config *cfg;
	struct pids_info *info;
	enum pids_item items[ITEM_FIXED + 3];
	int nitems;
	int item_ruid, item_exe, item_cmdline;   /* index in items, or -1 */
	bool scan_all;           /* some watch selects by more than pid/pidfile */
	pid_t self;
	struct watch_proc *procs;
	size_t nprocs, cap;
	pid_t *pidfile_pids;     /* per watch: what its pidfile said this cycle */
};

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
	procps_pids_unref(&w->info);
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
                          const struct pids_stack *stack, pid_t pid, pid_t pidfile_pid)
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
	return true;
}

static int push_proc(struct watch *w, const struct pids_stack *stack, pid_t pid, size_t watch)
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
	p->start_ticks = PIDS_VAL(ITEM_TICS_BEGAN, ull_int, stack, w->info);
	p->watch = watch;
	snprintf(p->comm, sizeof p->comm, "%s", PIDS_VAL(ITEM_CMD, str, stack, w->info));
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

	for (size_t i = 0; i < cfg->nwatches; i++) {
		const struct watch_config *wc = &cfg->watches[i];
		pidfile_pids[i] = wc->pidfile ? read_pidfile(wc->pidfile) : 0;
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

	w->nprocs = 0;
	for (int r = 0; r < fetch->counts->total; r++) {
		const struct pids_stack *stack = fetch->stacks[r];
		pid_t pid = PIDS_VAL(ITEM_PID, s_int, stack, w->info);

		if (pid == w->self || (PIDS_VAL(ITEM_FLAGS, ul_int, stack, w->info) & PF_KTHREAD))
			continue;
		for (size_t i = 0; i < cfg->nwatches; i++) {
			if (!watch_matches(w, &cfg->watches[i], stack, pid, pidfile_pids[i]))
				continue;
			if (push_proc(w, stack, pid, i) < 0)
				return -ENOMEM;
			break;
		}
	}
	qsort(w->procs, w->nprocs, sizeof *w->procs, cmp_proc);
	drop_duplicates(w);
	*procs = w->procs;
	*n = w->nprocs;
	return 0;
}
