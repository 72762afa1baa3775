#include "cpumond/history.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpumond/log.h"
#include "procfs/procfs.h"

/* A kept thread's stat, open from one cycle to the next: the kept set
 * changes little, and a pread of a kept descriptor costs a fraction of
 * open+read+close (for schedstat 0.8 µs against 5.5, sampler.c).  Keyed
 * by the sampler's key, which a reused tid does not share. */
struct stat_fd {
	uint64_t key;
	int fd;
};

struct history {
	size_t *picked;                  /* history_select's, room for cap */
	struct store_usage *rows;
	char (*names)[PROCFS_COMM_MAX];  /* the rows' thread names */
	size_t cap;
	struct stat_fd *fds;             /* room for cap */
	size_t nfds;
	bool said_nomem;
};

/* For qsort_r: by watch, then busiest first, then tid. */
struct order {
	const struct sampler_thread *t;
	const struct watch_proc *procs;
};

static int cmp_kept(const void *a, const void *b, void *arg)
{
	const struct order *o = arg;
	const struct sampler_thread *x = &o->t[*(const size_t *)a], *y = &o->t[*(const size_t *)b];
	size_t wx = o->procs[x->proc].watch, wy = o->procs[y->proc].watch;

	if (wx != wy)
		return wx < wy ? -1 : 1;
	if (x->usage != y->usage)
		return x->usage > y->usage ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

size_t history_select(const struct sampler_thread *t, size_t n, const struct watch_proc *procs,
                      int keep, int floor, history_episode_fn episode, const void *ctx,
                      size_t *out)
{
	struct order o = { t, procs };
	size_t cand = 0, kept = 0, watch = SIZE_MAX;
	int in_watch = 0;

	if (keep <= 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		bool measured = !t[i].gated && t[i].usage >= 0;

		if ((measured && t[i].usage > floor) || (episode && episode(t[i].tid, ctx)))
			out[cand++] = i;
	}
	qsort_r(out, cand, sizeof *out, cmp_kept, &o);
	/* In place: the kept ones of each watch move to the front. */
	for (size_t i = 0; i < cand; i++) {
		const struct sampler_thread *x = &t[out[i]];
		bool measured = !x->gated && x->usage >= 0;

		if (procs[x->proc].watch != watch) {
			watch = procs[x->proc].watch;
			in_watch = 0;
		}
		if (measured && x->usage > floor && in_watch < keep) {
			in_watch++;
			out[kept++] = out[i];
		} else if (episode && episode(x->tid, ctx)) {
			out[kept++] = out[i];
		}
	}
	return kept;
}

struct history *history_new(void)
{
	return calloc(1, sizeof(struct history));
}

void history_free(struct history *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->nfds; i++)
		close(h->fds[i].fd);
	free(h->picked);
	free(h->rows);
	free(h->names);
	free(h->fds);
	free(h);
}

static bool grow(struct history *h, size_t n)
{
	size_t *picked;
	struct store_usage *rows;
	char (*names)[PROCFS_COMM_MAX];
	struct stat_fd *fds;

	if (n <= h->cap)
		return true;
	picked = reallocarray(h->picked, n, sizeof *picked);
	if (picked)
		h->picked = picked;
	rows = reallocarray(h->rows, n, sizeof *rows);
	if (rows)
		h->rows = rows;
	names = reallocarray(h->names, n, sizeof *names);
	if (names)
		h->names = names;
	fds = reallocarray(h->fds, n, sizeof *fds);
	if (fds)
		h->fds = fds;
	if (!picked || !rows || !names || !fds)
		return false;
	h->cap = n;
	return true;
}

/* Keeps the descriptors of the KEPT threads of T that history_select
 * picked, closes the others' (their threads were not kept or are gone):
 * afterwards there is room for every kept thread's. */
static void keep_fds(struct history *h, const struct sampler_thread *t, size_t kept)
{
	size_t n = 0;

	for (size_t i = 0; i < h->nfds; i++) {
		bool keep = false;

		for (size_t k = 0; k < kept && !keep; k++)
			keep = t[h->picked[k]].key == h->fds[i].key;
		if (keep)
			h->fds[n++] = h->fds[i];
		else
			close(h->fds[i].fd);
	}
	h->nfds = n;
}

/* Thread X's stat, through its kept descriptor (opened on first use; after
 * keep_fds there is room).  Returns 0 or -errno (-ESRCH: it is gone). */
static int read_stat(struct history *h, const struct sampler_thread *x, struct procfs_stat *st)
{
	struct stat_fd *f = NULL;
	char buf[1024];
	ssize_t len;

	for (size_t i = 0; i < h->nfds && !f; i++)
		if (h->fds[i].key == x->key)
			f = &h->fds[i];
	if (!f) {
		int fd = procfs_open(x->pid, x->tid, "stat", O_RDONLY);

		if (fd < 0)
			return fd;
		f = &h->fds[h->nfds++];
		*f = (struct stat_fd){ .key = x->key, .fd = fd };
	}
	len = pread(f->fd, buf, sizeof buf - 1, 0);
	if (len <= 0)
		return len < 0 ? -errno : -ESRCH;   /* an exited thread's reads fail */
	buf[len] = '\0';
	return procfs_parse_stat(buf, st);
}

size_t history_collect(struct history *h, const struct config *cfg, const struct watch_proc *procs,
                       const struct sampler_thread *t, size_t n, history_episode_fn episode,
                       const void *ctx, const struct store_usage **rows)
{
	size_t kept;

	*rows = NULL;
	if (cfg->history_threads == 0 || n == 0) {
		keep_fds(h, t, 0);
		return 0;
	}
	if (!grow(h, n)) {
		if (!h->said_nomem)
			log_msg(LOG_ERR, "out of memory: the usage history misses cycles");
		h->said_nomem = true;
		return 0;
	}
	h->said_nomem = false;
	*rows = h->rows;       /* after grow, which may move them */
	kept = history_select(t, n, procs, cfg->history_threads, cfg->history_floor, episode, ctx,
	                      h->picked);
	keep_fds(h, t, kept);
	for (size_t i = 0; i < kept; i++) {
		const struct sampler_thread *x = &t[h->picked[i]];
		const struct watch_proc *p = &procs[x->proc];
		const struct watch_config *wc = &cfg->watches[p->watch];
		struct procfs_stat st;

		/* The thread's own stat: its name and state in one read. */
		if (read_stat(h, x, &st) < 0) {
			st.comm[0] = '\0';
			st.state = '?';
		}
		memcpy(h->names[i], st.comm, sizeof h->names[i]);
		h->rows[i] = (struct store_usage){
			.watch = wc->name, .pid = x->pid, .comm = p->comm, .tid = x->tid,
			.thread = h->names[i], .usage = x->usage < 0 ? 0 : x->usage,
			.run_delay = x->run_delay, .state = st.state, .threshold = wc->threshold,
			.episode = episode && episode(x->tid, ctx),
		};
	}
	return kept;
}
