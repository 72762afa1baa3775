#include "cpumond/stall_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpumond/json.h"
#include "procfs/procfs.h"

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- what a thread waits on, by reads that never wait for the mm lock ---- */

struct waiting {
	char state;
	struct procfs_syscall sc;
	bool have_sc;
	char wchan[128];
	char fd_target[256];         /* "" when none */
};

static int read_waiting(pid_t pid, pid_t tid, struct waiting *w)
{
	struct procfs_stat st;
	int rc;

	memset(w, 0, sizeof *w);
	if ((rc = procfs_read_stat(pid, tid, &st)) < 0)
		return rc;
	w->state = st.state;
	w->have_sc = procfs_read_syscall(pid, tid, &w->sc) == 0;
	procfs_read_wchan(pid, tid, w->wchan, sizeof w->wchan);
	if (w->have_sc && stall_wants_fd(&w->sc)) {
		char name[32];

		snprintf(name, sizeof name, "fd/%llu", (unsigned long long)w->sc.args[0]);
		procfs_read_link(pid, name, w->fd_target, sizeof w->fd_target);
	}
	return 0;
}

static enum stall_verdict classify(const struct waiting *w)
{
	struct procfs_syscall none = { .nr = -1 };

	/* Without the syscall file (refused) only D says anything. */
	return stall_classify(w->state, w->have_sc ? &w->sc : &none,
	                      w->fd_target[0] ? w->fd_target : NULL);
}

enum stall_verdict stall_probe_classify(pid_t pid, pid_t tid)
{
	struct waiting w;

	if (read_waiting(pid, tid, &w) < 0)
		return STALL_IGNORE;
	if (!w.have_sc && w.state != 'D')
		return STALL_IGNORE;
	return classify(&w);
}

/* ---- the details, as JSON ---- */

static void put_syscall_name(const struct waiting *w, FILE *out)
{
	const char *name = w->have_sc && !w->sc.running ? stall_syscall_name(w->sc.nr) : NULL;

	if (!w->have_sc)
		fputs("null", out);
	else if (w->sc.running)
		fputs("\"running\"", out);
	else if (w->sc.nr < 0)
		fputs("\"none\"", out);
	else if (name)
		json_put_string(name, out);
	else
		fprintf(out, "\"syscall %ld\"", w->sc.nr);
}

static void put_syscall(const struct waiting *w, FILE *out)
{
	char op[80];

	if (!w->have_sc) {
		fputs("null", out);
		return;
	}
	fprintf(out, "{\"nr\":%ld,\"name\":", w->sc.running ? -1L : w->sc.nr);
	put_syscall_name(w, out);
	if (!w->sc.running && w->sc.nr >= 0) {
		fputs(",\"args\":[", out);
		for (int i = 0; i < 6; i++)
			fprintf(out, "%s\"0x%llx\"", i ? "," : "", (unsigned long long)w->sc.args[i]);
		fputc(']', out);
		if (w->sc.nr == SYS_futex && stall_futex_op_name(w->sc.args[1], op, sizeof op)) {
			fputs(",\"futex_op\":", out);
			json_put_string(op, out);
		}
		if (stall_wants_fd(&w->sc)) {
			fprintf(out, ",\"fd\":%llu,\"fd_target\":", (unsigned long long)w->sc.args[0]);
			json_put_string_or_null(w->fd_target, out);
		}
	}
	fprintf(out, ",\"sp\":\"0x%llx\",\"pc\":\"0x%llx\"}", (unsigned long long)w->sc.sp,
	        (unsigned long long)w->sc.pc);
}

/* ---- the lock owner, read from the target's memory ---- */

struct owner_ctx {
	pid_t pid;
};

/* The int at ADDR of PID.  Returns 0 or -errno. */
static int read_word(pid_t pid, uint64_t addr, uint32_t *word)
{
	struct iovec local = { word, sizeof *word };
	struct iovec remote = { (void *)(uintptr_t)addr, sizeof *word };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof *word ? 0 : -errno;
}

/* The thread of CTX's process holding the lock TID waits on, 0 when it
 * waits on none, or the owner is not a live thread of the process. */
static pid_t owner_of(pid_t tid, void *arg)
{
	const struct owner_ctx *ctx = arg;
	struct procfs_syscall sc;
	struct procfs_stat st;
	uint64_t addr;
	uint32_t word, lock;
	pid_t owner;
	bool pi;

	if (procfs_read_syscall(ctx->pid, tid, &sc) < 0 || !stall_lock_wait(&sc, &addr, &pi) ||
	    read_word(ctx->pid, addr, &word) < 0)
		return 0;
	/* Still taken: a word read after the lock went free would name a
	 * thread that no longer holds it. */
	if (!pi && (read_word(ctx->pid, sc.args[0], &lock) < 0 || lock == 0))
		return 0;
	owner = stall_owner_from_word(word, pi);
	if (owner <= 0 || owner == tid || procfs_read_stat(ctx->pid, owner, &st) < 0)
		return owner == tid ? tid : 0;
	return owner;
}

static void put_owner(pid_t pid, pid_t tid, FILE *out)
{
	struct waiting w;
	char comm[PROCFS_COMM_MAX] = "";

	procfs_read_comm(pid, tid, comm, sizeof comm);
	fprintf(out, "{\"tid\":%d,\"comm\":", (int)tid);
	json_put_string(comm, out);
	if (read_waiting(pid, tid, &w) == 0) {
		fprintf(out, ",\"state\":\"%c\",\"syscall\":", w.state);
		put_syscall_name(&w, out);
		fputs(",\"wchan\":", out);
		json_put_string_or_null(w.wchan, out);
	}
	fputc('}', out);
}

/* Writes ,"lock":{...} and ,"deadlock":[...] for TID; returns whether it
 * is a lock wait (an owner was found). */
static bool put_lock(pid_t pid, pid_t tid, const struct waiting *w, FILE *out)
{
	struct owner_ctx ctx = { pid };
	pid_t chain[STALL_OWNER_DEPTH];
	uint64_t addr;
	bool pi;
	int from;
	size_t n;

	if (!w->have_sc || !stall_lock_wait(&w->sc, &addr, &pi))
		return false;
	n = stall_owner_chain(tid, owner_of, &ctx, chain, &from);
	if (n == 0 && from != -1)
		return false;
	fprintf(out, ",\"lock\":{\"addr\":\"0x%llx\",\"pi\":%s,\"owner\":%d,\"owners\":[",
	        (unsigned long long)w->sc.args[0], pi ? "true" : "false", n ? (int)chain[0] : (int)tid);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(',', out);
		put_owner(pid, chain[i], out);
	}
	fputs("]}", out);
	if (from >= -1) {
		fputs(",\"deadlock\":[", out);
		if (from == -1)
			fprintf(out, "%d%s", (int)tid, n ? "," : "");
		for (size_t i = from < 0 ? 0 : (size_t)from; i < n; i++)
			fprintf(out, "%d%s", (int)chain[i], i + 1 < n ? "," : "");
		fputc(']', out);
	}
	return true;
}

static void put_kernel_stack(pid_t pid, pid_t tid, FILE *out)
{
	char buf[4096], e[64];
	const char *frames[32];
	int rc = procfs_read_kstack(pid, tid, buf, sizeof buf);
	size_t n;

	if (rc < 0) {
		fputs(",\"kernel_stack_error\":", out);
		snprintf(buf, sizeof buf, "/proc/%d/task/%d/stack: %s%s", (int)pid, (int)tid,
		         strerror_r(-rc, e, sizeof e),
		         rc == -EACCES || rc == -EPERM ? " (it needs CAP_SYS_ADMIN)" : "");
		json_put_string(buf, out);
		return;
	}
	n = procfs_parse_kstack(buf, frames, sizeof frames / sizeof frames[0]);
	fputs(",\"kernel_stack\":[", out);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(',', out);
		json_put_string(frames[i], out);
	}
	fputc(']', out);
}

/* The process's threads counted by (state, syscall, wchan). */
#define GROUPS_MAX 32

struct group {
	char state;
	char syscall[40];
	char wchan[128];
	unsigned count;
};

static int by_count(const void *a, const void *b)
{
	const struct group *x = a, *y = b;

	return x->count != y->count ? (x->count < y->count ? 1 : -1) : 0;
}

static void put_threads(pid_t pid, FILE *out)
{
	struct group g[GROUPS_MAX + 1];
	size_t ng = 0, ntids = 0;
	pid_t *tids = NULL;

	if (procfs_read_tasks(pid, &tids, &ntids) < 0)
		return;
	for (size_t i = 0; i < ntids; i++) {
		struct waiting w;
		struct group one = { 0 };
		char *p;
		size_t len;
		FILE *f;
		size_t k;

		if (read_waiting(pid, tids[i], &w) < 0)
			continue;
		one.state = w.state;
		memcpy(one.wchan, w.wchan, sizeof one.wchan);
		if ((f = open_memstream(&p, &len))) {
			put_syscall_name(&w, f);
			fclose(f);
			snprintf(one.syscall, sizeof one.syscall, "%.39s", p);
			free(p);
		}
		for (k = 0; k < ng; k++)
			if (g[k].state == one.state && !strcmp(g[k].syscall, one.syscall) &&
			    !strcmp(g[k].wchan, one.wchan))
				break;
		if (k == ng && ng == GROUPS_MAX) {
			k = GROUPS_MAX;          /* the rest together */
			if (!g[k].count)
				g[k] = (struct group){ .state = '?', .syscall = "\"other\"" };
		} else if (k == ng) {
			g[ng++] = one;
		}
		g[k].count++;
	}
	free(tids);
	if (ng == GROUPS_MAX && g[GROUPS_MAX].count)
		ng++;
	qsort(g, ng, sizeof g[0], by_count);
	fputs(",\"threads\":[", out);
	for (size_t k = 0; k < ng; k++) {
		/* syscall is already JSON (put_syscall_name). */
		fprintf(out, "%s{\"state\":\"%c\",\"syscall\":%s,\"wchan\":", k ? "," : "", g[k].state,
		        g[k].syscall);
		json_put_string_or_null(g[k].wchan, out);
		fprintf(out, ",\"count\":%u}", g[k].count);
	}
	fputc(']', out);
}

/* ---- the child ---- */

/* The answer on the pipe: verdict, details, stack error, the frames. */
static void put_u64(FILE *f, uint64_t v)
{
	fwrite(&v, sizeof v, 1, f);
}

static void put_str(FILE *f, const char *s)
{
	uint64_t n = s ? strlen(s) : UINT64_MAX;

	put_u64(f, n);
	if (s)
		fwrite(s, 1, (size_t)n, f);
}

static void child(pid_t pid, pid_t tid, uint64_t still_ms, int max_frames, size_t bytes, int fd)
{
	FILE *out = fdopen(fd, "w"), *d;
	struct stackdump_stack stack = { 0 };
	struct stackdump *sd;
	struct waiting w;
	enum stall_verdict v;
	char *details = NULL, err[256] = "";
	size_t dlen;

	if (!out || !(d = open_memstream(&details, &dlen)))
		_exit(1);
	/* Test only: CPUMOND_TEST_PROBE_HANG makes the child hang as one
	 * blocked on a held memory-map lock would (tests/integration/
	 * test_stall.py: the deadline, the event without the probe). */
	if (getenv("CPUMOND_TEST_PROBE_HANG"))
		for (;;)
			pause();
	if (read_waiting(pid, tid, &w) < 0)
		w.state = '?';           /* gone: nothing to say */
	v = w.state == '?' ? STALL_IGNORE : classify(&w);
	fprintf(d, "{\"state\":\"%c\",\"still_ms\":%llu,\"wchan\":", w.state,
	        (unsigned long long)still_ms);
	json_put_string_or_null(w.wchan, d);
	fputs(",\"syscall\":", d);
	put_syscall(&w, d);
	if (put_lock(pid, tid, &w, d))
		v = STALL_STUCK;
	else if (v == STALL_LOCK)
		v = STALL_IDLE;          /* a futex word of 2 that is no mutex's */
	if (v == STALL_STUCK) {
		put_kernel_stack(pid, tid, d);
		if ((sd = stackdump_new())) {
			stackdump_thread_blocked(sd, pid, tid, bytes, max_frames, &stack);
			snprintf(err, sizeof err, "%s", stack.error);
		}
		if (err[0]) {
			fputs(",\"stack_error\":", d);
			json_put_string(err, d);
		}
		put_threads(pid, d);
	}
	fputc('}', d);
	fclose(d);
	put_u64(out, (uint64_t)v);
	put_str(out, details);
	put_str(out, err);
	put_u64(out, stack.hash);
	put_u64(out, stack.truncated);
	put_u64(out, stack.nframes);
	for (size_t i = 0; i < stack.nframes; i++) {
		const struct stackdump_frame *f = &stack.frames[i];

		put_u64(out, f->ip);
		put_u64(out, f->offset);
		put_u64(out, f->func_offset);
		put_u64(out, f->symbol_offset);
		put_str(out, f->module);
		put_str(out, f->build_id);
		put_str(out, f->symbol);
	}
	fflush(out);
	_exit(ferror(out) ? 1 : 0);
}

/* ---- the daemon's side ---- */

struct reader {
	const unsigned char *p, *end;
	bool bad;
};

static uint64_t get_u64(struct reader *r)
{
	uint64_t v = 0;

	if ((size_t)(r->end - r->p) < sizeof v) {
		r->bad = true;
		return 0;
	}
	memcpy(&v, r->p, sizeof v);
	r->p += sizeof v;
	return v;
}

static char *get_str(struct reader *r)
{
	uint64_t n = get_u64(r);
	char *s;

	if (r->bad || n == UINT64_MAX)
		return NULL;
	if (n > (uint64_t)(r->end - r->p) || !(s = malloc((size_t)n + 1))) {
		r->bad = true;
		return NULL;
	}
	memcpy(s, r->p, (size_t)n);
	s[n] = '\0';
	r->p += n;
	return s;
}

static int parse_answer(const unsigned char *buf, size_t len, struct stall_probe_result *out)
{
	struct reader r = { buf, buf + len, false };
	char *err;
	uint64_t n;

	out->verdict = (enum stall_verdict)get_u64(&r);
	out->details = get_str(&r);
	err = get_str(&r);
	snprintf(out->error, sizeof out->error, "%s", err ? err : "");
	free(err);
	out->stack.hash = get_u64(&r);
	out->stack.truncated = get_u64(&r) != 0;
	n = get_u64(&r);
	if (r.bad || !out->details || n > STACKDUMP_MAX_FRAMES ||
	    !(out->stack.frames = calloc(n ? n : 1, sizeof *out->stack.frames)))
		return -EPROTO;
	for (; out->stack.nframes < n && !r.bad; out->stack.nframes++) {
		struct stackdump_frame *f = &out->stack.frames[out->stack.nframes];

		f->ip = get_u64(&r);
		f->offset = get_u64(&r);
		f->func_offset = get_u64(&r);
		f->symbol_offset = get_u64(&r);
		f->module = get_str(&r);
		f->build_id = get_str(&r);
		f->symbol = get_str(&r);
	}
	return r.bad || out->verdict > STALL_STUCK ? -EPROTO : 0;
}

/* Children killed at their deadline, reaped when they exit. */
#define KILLED_MAX 64
static pid_t killed[KILLED_MAX];

void stall_probe_reap(void)
{
	for (size_t i = 0; i < KILLED_MAX; i++)
		if (killed[i] > 0 && waitpid(killed[i], NULL, WNOHANG) != 0)
			killed[i] = 0;
}

static void forget_child(pid_t c)
{
	kill(c, SIGKILL);
	for (size_t i = 0; i < KILLED_MAX; i++)
		if (killed[i] <= 0) {
			killed[i] = c;
			return;
		}
	/* More than KILLED_MAX stuck at once: one zombie more until exit. */
}

/* The details from the daemon's own reads, for a probe that gave none. */
static void own_details(pid_t pid, pid_t tid, uint64_t still_ms, const char *why,
                        struct stall_probe_result *out)
{
	struct waiting w;
	size_t len;
	FILE *d = open_memstream(&out->details, &len);

	out->verdict = STALL_STUCK;
	if (!d)
		return;
	if (read_waiting(pid, tid, &w) < 0)
		memset(&w, 0, sizeof w);
	fprintf(d, "{\"state\":\"%c\",\"still_ms\":%llu,\"wchan\":", w.state ? w.state : '?',
	        (unsigned long long)still_ms);
	json_put_string_or_null(w.wchan, d);
	fputs(",\"syscall\":", d);
	put_syscall(&w, d);
	fputs(",\"probe_error\":", d);
	json_put_string(why, d);
	fputc('}', d);
	fclose(d);
	snprintf(out->error, sizeof out->error, "%s", why);
}

/* Ends the details with ,"probe_ms":N: what the child cost the loop. */
static void add_probe_ms(struct stall_probe_result *out)
{
	size_t len = out->details ? strlen(out->details) : 0;
	char *d;

	if (len < 2 || out->details[len - 1] != '}' || !(d = malloc(len + 32)))
		return;
	memcpy(d, out->details, len - 1);
	snprintf(d + len - 1, 33, ",\"probe_ms\":%llu}", (unsigned long long)out->probe_ms);
	free(out->details);
	out->details = d;
}

int stall_probe(pid_t pid, pid_t tid, uint64_t still_ms, int max_frames, size_t stack_bytes,
                struct stall_probe_result *out)
{
	uint64_t start = mono_ms(), now;
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0;
	int fds[2], status = 0, rc = 0;
	char why[160];
	pid_t c;

	memset(out, 0, sizeof *out);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		rc = -errno;
		own_details(pid, tid, still_ms, "no probe: cannot make a pipe", out);
		return rc;
	}
	if ((c = fork()) < 0) {
		rc = -errno;
		close(fds[0]);
		close(fds[1]);
		own_details(pid, tid, still_ms, "no probe: cannot fork", out);
		return rc;
	}
	if (c == 0) {
		close(fds[0]);
		child(pid, tid, still_ms, max_frames, stack_bytes, fds[1]);
	}
	close(fds[1]);
	for (;;) {
		struct pollfd p = { fds[0], POLLIN, 0 };
		ssize_t n;

		now = mono_ms();
		if (now - start >= STALL_PROBE_DEADLINE_MS) {
			out->timed_out = true;
			break;
		}
		if (poll(&p, 1, (int)(STALL_PROBE_DEADLINE_MS - (now - start))) < 0 && errno != EINTR)
			break;
		if (!p.revents)
			continue;
		if (len == cap) {
			unsigned char *b = realloc(buf, cap = cap ? 2 * cap : 65536);
			if (!b)
				break;
			buf = b;
		}
		n = read(fds[0], buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fds[0]);
	out->probe_ms = mono_ms() - start;
	if (out->timed_out) {
		forget_child(c);
		snprintf(why, sizeof why, "the probe of tid %d did not finish within %d ms (is the "
		         "memory-map lock of process %d held?)", (int)tid, STALL_PROBE_DEADLINE_MS,
		         (int)pid);
		own_details(pid, tid, still_ms, why, out);
	} else {
		while (waitpid(c, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
		    parse_answer(buf, len, out) < 0) {
			stall_probe_result_free(out);
			snprintf(why, sizeof why, "the probe of tid %d failed", (int)tid);
			own_details(pid, tid, still_ms, why, out);
		}
	}
	free(buf);
	add_probe_ms(out);
	return 0;
}

void stall_probe_result_free(struct stall_probe_result *r)
{
	free(r->details);
	r->details = NULL;
	stackdump_stack_free(&r->stack);
}

/* ---- each cycle ---- */

/* The row that says a stall ended: the thread ran again DURATION_MS after
 * it was last seen running before the stall. */
static void stall_ended(struct capture *c, const struct watch_proc *proc,
                        const struct sampler_thread *t, const struct watch_config *wc,
                        uint64_t duration_ms)
{
	struct stackdump_stack none = { 0 };
	char details[96];
	struct capture_trip trip = { .kind = KIND_STALL, .usage = t->usage < 0 ? 0 : t->usage,
	                             .run_delay = t->run_delay < 0 ? 0 : t->run_delay,
	                             .details = details };

	snprintf(details, sizeof details, "{\"ended\":true,\"duration_ms\":%llu}",
	         (unsigned long long)duration_ms);
	capture_copied(c, proc, t, wc, &trip, &none, "");
}

void stall_cycle(struct stall *st, const struct config *cfg, const struct watch_proc *procs,
                 const struct sampler_thread *threads, size_t n, struct capture *c,
                 uint64_t now_ms)
{
	uint64_t start = mono_ms();
	int probes = 0, checks = 0;

	if (!cfg->stall_after_ms)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct sampler_thread *t = &threads[i];
		const struct watch_proc *proc = &procs[t->proc];
		const struct watch_config *wc = &cfg->watches[proc->watch];
		struct stall_probe_result r;
		enum stall_verdict v;
		uint64_t since;

		switch (stall_observe(st, t->key, t->still, now_ms,
		                      stall_due_ms(cfg->stall_after_ms, wc->consecutive,
		                                   cfg->interval_ms), &since)) {
		case STALL_NOTHING:
			continue;
		case STALL_ENDED:
			stall_ended(c, proc, t, wc, now_ms - since);
			continue;
		case STALL_CHECK:
			break;
		}
		if (checks++ >= STALL_CHECKS_PER_CYCLE)
			continue;            /* checked in a later cycle */
		v = stall_probe_classify(t->pid, t->tid);
		if (v == STALL_IDLE || v == STALL_IGNORE) {
			stall_checked(st, t->key, false, now_ms, wc->cooldown_ms);
			continue;
		}
		/* Two probes a cycle, and none after one deadline's worth: the
		 * others are checked again next cycle. */
		if (probes >= 2 || mono_ms() - start >= STALL_PROBE_DEADLINE_MS)
			continue;
		probes++;
		stall_probe(t->pid, t->tid, now_ms - since, cfg->max_frames,
		            STACKDUMP_STACK_COPY_DEFAULT, &r);
		if (stall_checked(st, t->key, r.verdict == STALL_STUCK, now_ms, wc->cooldown_ms)) {
			struct capture_trip trip = { .kind = KIND_STALL, .usage = 0,
			                             .run_delay = t->run_delay < 0 ? 0 : t->run_delay,
			                             .details = r.details };
			capture_copied(c, proc, t, wc, &trip, &r.stack, r.error);
		}
		stall_probe_result_free(&r);
	}
	stall_sweep(st);
	stall_probe_reap();
}
