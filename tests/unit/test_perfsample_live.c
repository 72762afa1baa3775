/* Live tests of perfsample on threads of this test process and on a child:
 * samples of a hot thread arrive and unwind to its chain; the stack copy
 * fitted to a stack unwinds the same frames, and goes back to the cap
 * when the stack grows deeper than the fit; a blocked thread
 * gives none; close leaves no descriptor or mapping; a thread that exits
 * or execs ends the read, never a crash.  Skipped, saying why, where
 * perf_event_open is refused (kernel.perf_event_paranoid > 2 without
 * CAP_PERFMON, a seccomp filter, no such event).  Nothing here depends
 * on timing: each wait polls with a generous deadline for a property that
 * holds by construction. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "stackdump/perfsample.h"
#include "stackdump/stackdump.h"

#define DEADLINE_S 20
#define PERIOD_NS (1000 * 1000ull)

static volatile int stop_spinning;

static uint64_t now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec;
}

static void nap_ms(long ms)
{
	nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 }, NULL);
}

/* The hot chain: live_root -> live_mid -> live_leaf, spinning. */
__attribute__((noinline, noclone)) static unsigned live_leaf(unsigned x)
{
	while (!stop_spinning)
		x = x * 1103515245u + 12345u;
	__asm__ volatile("" : "+r"(x));
	return x;
}

__attribute__((noinline, noclone)) static unsigned live_mid(unsigned x)
{
	return live_leaf(x + 1) + 1;
}

__attribute__((noinline, noclone)) static unsigned live_root(unsigned x)
{
	return live_mid(x + 1) + 1;
}

struct spinner {
	pthread_t thread;
	volatile pid_t tid;
};

static void *spin_main(void *arg)
{
	struct spinner *s = arg;

	s->tid = (pid_t)syscall(SYS_gettid);
	return (void *)(uintptr_t)live_root(7);
}

static void spin_start(struct spinner *s)
{
	stop_spinning = 0;
	s->tid = 0;
	assert_int_equal(pthread_create(&s->thread, NULL, spin_main, s), 0);
	while (!s->tid)
		nap_ms(1);
}

static void spin_stop(struct spinner *s)
{
	stop_spinning = 1;
	pthread_join(s->thread, NULL);
}

/* Skips the test when perf sampling is not permitted here. */
static void require_perf(void)
{
	char why[300];
	int r = perfsample_probe(0, why, sizeof(why));

	if (r < 0) {
		print_message("skipped: %s\n", why);
		skip();
	}
}

struct collect {
	struct stackdump *sd;
	int samples, chained;
	int hot_leaf;           /* samples whose innermost frame is live_leaf */
	char first_bad[400];
};

static int frame_is(const struct stackdump_frame *f, const char *name)
{
	return f->symbol && strcmp(f->symbol, name) == 0;
}

/* live_mid, live_root in a row, from any frame: a tick may land in
 * live_mid between two calls. */
static bool in_chain(const struct stackdump_stack *st)
{
	for (size_t i = 0; i + 1 < st->nframes; i++)
		if (frame_is(&st->frames[i], "live_mid") && frame_is(&st->frames[i + 1], "live_root"))
			return true;
	return false;
}

/* Each sample unwound: live_leaf, live_mid, live_root in a row from the
 * innermost frame. */
static int unwind_one(const struct perfsample_sample *s, void *arg)
{
	struct collect *c = arg;
	struct stackdump_stack st;
	int r = stackdump_thread_copy(c->sd, s->pid, s->tid, &s->copy, 64, &st);

	c->samples++;
	if (r >= 0 && in_chain(&st))
		c->chained++;
	else if (!c->first_bad[0])
		snprintf(c->first_bad, sizeof(c->first_bad), "r %d, %zu frames, #0 %s: %s", r,
		         st.nframes, st.nframes && st.frames[0].symbol ? st.frames[0].symbol : "?",
		         st.error);
	if (st.nframes && frame_is(&st.frames[0], "live_leaf"))
		c->hot_leaf++;
	stackdump_stack_free(&st);
	return 0;
}

static void test_hot_thread(void **state)
{
	struct spinner s;
	struct perfsample *ps;
	struct perfsample_info info;
	struct collect c = { .sd = stackdump_new() };
	char why[300];

	(void)state;
	require_perf();
	spin_start(&s);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &ps, why, sizeof(why)), 0);
	perfsample_info(ps, &info);
	assert_int_equal(info.tid, s.tid);
	assert_true(info.stack_size >= PERFSAMPLE_STACK_MIN && info.stack_size <= PERFSAMPLE_STACK_MAX);
	assert_true(info.ring_bytes >= PERFSAMPLE_RING_SAMPLES * info.stack_size);
	assert_int_equal(info.ring_bytes & (info.ring_bytes - 1), 0);
	/* Enough samples to wrap the ring several times. */
	for (uint64_t end = now_s() + DEADLINE_S; c.samples < 50 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(ps, unwind_one, &c) >= 0);
	perfsample_info(ps, &info);
	perfsample_close(ps);
	spin_stop(&s);
	stackdump_free(c.sd);
	print_message("%d samples, lost %llu, throttled %llu, stack %zu, ring %zu\n", c.samples,
	              (unsigned long long)info.lost, (unsigned long long)info.throttled,
	              info.stack_size, info.ring_bytes);
	assert_true(c.samples >= 50);
	if (c.chained != c.samples)
		fail_msg("%d of %d samples not in live_root -> live_mid: %s", c.samples - c.chained,
		         c.samples, c.first_bad);
	assert_true(c.hot_leaf > 0);
	assert_int_equal(info.bad, 0);
	assert_int_equal(info.samples, (uint64_t)c.samples);
}

/* 1,000 frames of 256 bytes and more: a stack deeper than any perf copy. */
static unsigned live_deep(int n, unsigned x);
/* Called through a pointer the compiler cannot see through, so that the
 * recursion stays 1,000 real frames (not a loop). */
static unsigned (*volatile deep_again)(int, unsigned) = live_deep;

__attribute__((noinline, noclone)) static unsigned live_deep(int n, unsigned x)
{
	volatile unsigned char pad[256];

	pad[0] = (unsigned char)x;
	if (n == 0)
		return live_leaf(x);
	return deep_again(n - 1, x + pad[0]) + pad[0];
}

static void *deep_main(void *arg)
{
	struct spinner *s = arg;

	s->tid = (pid_t)syscall(SYS_gettid);
	return (void *)(uintptr_t)live_deep(1000, 3);
}

/* Starts S's thread at MAIN on a stack with room for live_deep's 1,000
 * frames, and waits for its tid. */
static void deep_start(struct spinner *s, void *(*main)(void *))
{
	pthread_attr_t attr;

	stop_spinning = 0;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 4u << 20);
	assert_int_equal(pthread_create(&s->thread, &attr, main, s), 0);
	pthread_attr_destroy(&attr);
	while (!s->tid)
		nap_ms(1);
}

struct short_stack {
	struct stackdump *sd;
	int samples, marked, unmarked;
	char error[600];
};

static int check_short(const struct perfsample_sample *s, void *arg)
{
	struct short_stack *c = arg;
	struct stackdump_stack st;

	c->samples++;
	if (stackdump_thread_copy(c->sd, s->pid, s->tid, &s->copy, 1024, &st) >= 0) {
		if (st.stack_short && strstr(st.error, "deeper than"))
			c->marked++;
		else
			c->unmarked++;
		snprintf(c->error, sizeof(c->error), "%zu frames, copy %zu bytes%s: %s", st.nframes,
		         s->copy.stack_len, s->copy.stack_clipped ? " (clipped)" : "", st.error);
	}
	stackdump_stack_free(&st);
	return 0;
}

/* The kernel's copy ends at the cap, the stack goes on: the unwind says
 * so (stack_short), with the frames the copy holds. */
static void test_deep_stack_marked(void **state)
{
	struct spinner s = { 0 };
	struct perfsample *ps;
	struct short_stack c = { .sd = stackdump_new() };
	char why[300];

	(void)state;
	require_perf();
	deep_start(&s, deep_main);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &ps, why, sizeof(why)), 0);
	for (uint64_t end = now_s() + DEADLINE_S; c.samples < 5 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(ps, check_short, &c) >= 0);
	perfsample_close(ps);
	spin_stop(&s);
	stackdump_free(c.sd);
	assert_true(c.samples >= 5);
	if (c.unmarked)
		fail_msg("%d of %d samples not marked short: %s", c.unmarked, c.samples, c.error);
	assert_int_equal(c.marked, c.samples);
}

/* Each sample unwound and handed to perfsample_adapt, as the daemon does. */
struct fitting {
	struct perfsample *ps;
	struct stackdump *sd;
	size_t fitted;           /* the copy perfsample_adapt fitted, 0 before */
	uint64_t fit_ns, grow_ns;  /* when it was fitted, and grown (0: not) */
	uint64_t leaf_hash;      /* a live_leaf sample's hash before the fit */
	/* Samples taken after the fit (by the new event: the old one was
	 * closed before fit_ns): all, short, out of the chain, of live_leaf
	 * with another hash, with more stack than the fitted copy. */
	int after, after_short, after_unchained, after_other_hash, over_copy;
	int grown;               /* refits after the fit */
	int after_grow, after_grow_short;  /* samples taken after the grow */
	char error[300];
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int fit_one(const struct perfsample_sample *s, void *arg)
{
	struct fitting *f = arg;
	struct perfsample_info info;
	struct stackdump_stack st;
	int r = stackdump_thread_copy(f->sd, s->pid, s->tid, &s->copy, 1024, &st);
	bool leaf = r >= 0 && st.nframes && frame_is(&st.frames[0], "live_leaf");

	if (f->grow_ns && s->copy.time_ns > f->grow_ns) {
		f->after_grow++;
		f->after_grow_short += st.stack_short;
	} else if (f->fit_ns && s->copy.time_ns > f->fit_ns) {
		f->after++;
		f->after_short += st.stack_short;
		f->after_unchained += r < 0 || !in_chain(&st);
		f->over_copy += s->copy.stack_len > f->fitted;
		f->after_other_hash += leaf && f->leaf_hash && st.hash != f->leaf_hash;
		if (st.stack_short && !f->error[0])
			snprintf(f->error, sizeof(f->error), "%s", st.error);
	} else if (leaf) {
		f->leaf_hash = st.hash;
	}
	if (r >= 0 && perfsample_adapt(f->ps, s, &st) == 1) {
		perfsample_info(f->ps, &info);
		if (f->fitted) {
			f->grown++;
			f->grow_ns = now_ns();
		} else {
			f->fitted = info.stack_copy;
			f->fit_ns = now_ns();
		}
	}
	stackdump_stack_free(&st);
	return 0;
}

/* The counters of F's sampler in *INFO, then the sampler, the thread S
 * and the dumper gone. */
static void fitting_end(struct fitting *f, struct spinner *s, struct perfsample_info *info)
{
	perfsample_info(f->ps, info);
	perfsample_close(f->ps);
	spin_stop(s);
	stackdump_free(f->sd);
}

/* A hot thread's shallow stack: the copy fitted once, below the cap, and
 * every later sample within it, in the chain, not short, with the hash
 * the full copy gave. */
static void test_copy_fitted(void **state)
{
	struct spinner s;
	struct perfsample_info info;
	struct fitting f = { .sd = stackdump_new() };
	char why[300];

	(void)state;
	require_perf();
	spin_start(&s);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &f.ps, why, sizeof(why)), 0);
	for (uint64_t end = now_s() + DEADLINE_S; f.after < 30 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(f.ps, fit_one, &f) >= 0);
	fitting_end(&f, &s, &info);
	print_message("fitted %zu of %zu bytes; %d samples after, %d short\n", f.fitted,
	              info.stack_size, f.after, f.after_short);
	assert_true(f.fitted >= PERFSAMPLE_STACK_MIN && f.fitted < info.stack_size);
	assert_int_equal(info.refits, 1);
	assert_int_equal(info.stack_copy, f.fitted);
	assert_true(f.after >= 30);
	assert_int_equal(f.over_copy, 0);
	assert_int_equal(f.after_unchained, 0);
	assert_int_equal(f.grown, 0);
	if (f.after_short)
		fail_msg("%d of %d samples after the fit short: %s", f.after_short, f.after, f.error);
	assert_true(f.leaf_hash != 0);
	assert_int_equal(f.after_other_hash, 0);
}

static volatile int go_deep;

/* Shallow until go_deep, then 1,000 frames deep (live_deep), spinning. */
static void *shallow_then_deep_main(void *arg)
{
	struct spinner *s = arg;
	unsigned x = 3;

	s->tid = (pid_t)syscall(SYS_gettid);
	while (!go_deep)
		x = x * 1103515245u + 12345u;
	return (void *)(uintptr_t)live_deep(1000, x);
}

/* The copy fitted to a shallow stack, then the stack deeper than the fit:
 * the first sample that ran off the fitted copy puts it back to the cap,
 * once, for good. */
static void test_copy_grows(void **state)
{
	struct spinner s = { 0 };
	struct perfsample_info info;
	struct fitting f = { .sd = stackdump_new() };
	char why[300];

	(void)state;
	require_perf();
	go_deep = 0;
	deep_start(&s, shallow_then_deep_main);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &f.ps, why, sizeof(why)), 0);
	for (uint64_t end = now_s() + DEADLINE_S; !f.fitted && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(f.ps, fit_one, &f) >= 0);
	go_deep = 1;
	/* Until a few samples after the grow: they are short too (the stack
	 * is deeper than any copy), and change nothing more. */
	for (uint64_t end = now_s() + DEADLINE_S; f.after_grow < 10 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(f.ps, fit_one, &f) >= 0);
	fitting_end(&f, &s, &info);
	print_message("fitted %zu bytes, then %zu; %d samples between, %d short; %d after, "
	              "%d short\n", f.fitted, info.stack_copy, f.after, f.after_short,
	              f.after_grow, f.after_grow_short);
	assert_true(f.fitted > 0 && f.fitted < info.stack_size);
	/* What made it grow: a sample of the fitted copy, short. */
	assert_true(f.after_short >= 1);
	assert_int_equal(f.grown, 1);
	assert_true(f.after_grow >= 10);
	assert_int_equal(f.after_grow_short, f.after_grow);
	assert_int_equal(info.refits, 2);
	assert_int_equal(info.stack_copy, info.stack_size);
}

/* A thread reading an empty pipe runs no user code, however long. */
struct blocked {
	pthread_t thread;
	int fds[2];
	volatile pid_t tid;
};

static void *block_main(void *arg)
{
	struct blocked *b = arg;
	char ch;

	b->tid = (pid_t)syscall(SYS_gettid);
	return (void *)(intptr_t)read(b->fds[0], &ch, 1);
}

static int count(const struct perfsample_sample *s, void *arg)
{
	(void)s;
	(*(int *)arg)++;
	return 0;
}

static void test_blocked_thread(void **state)
{
	struct blocked b = { 0 };
	struct perfsample *ps;
	char why[300];
	int n = 0;

	(void)state;
	require_perf();
	assert_int_equal(pipe(b.fds), 0);
	assert_int_equal(pthread_create(&b.thread, NULL, block_main, &b), 0);
	while (!b.tid)
		nap_ms(1);
	assert_int_equal(perfsample_open(b.tid, PERFSAMPLE_PERIOD_MIN_NS, 0, &ps, why, sizeof(why)),
	                 0);
	for (int i = 0; i < 20; i++, nap_ms(10))
		assert_int_equal(perfsample_read(ps, count, &n), 0);
	perfsample_close(ps);
	assert_int_equal(write(b.fds[1], "x", 1), 1);
	pthread_join(b.thread, NULL);
	close(b.fds[0]);
	close(b.fds[1]);
	assert_int_equal(n, 0);
}

/* Open descriptors and perf mappings of this process. */
static void resources(int *fds, int *maps)
{
	char line[512];
	DIR *d = opendir("/proc/self/fd");
	FILE *f;

	assert_non_null(d);
	*fds = 0;
	while (readdir(d))
		++*fds;
	closedir(d);
	*maps = 0;
	f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		*maps += strstr(line, "perf_event") != NULL;
	fclose(f);
}

static void test_close_frees(void **state)
{
	struct spinner s;
	struct perfsample *ps;
	char why[300];
	int fds0, maps0, fds1, maps1, fds2, maps2;

	(void)state;
	require_perf();
	spin_start(&s);
	resources(&fds0, &maps0);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &ps, why, sizeof(why)), 0);
	resources(&fds1, &maps1);
	perfsample_close(ps);
	resources(&fds2, &maps2);
	spin_stop(&s);
	assert_int_equal(fds1, fds0 + 2);
	assert_int_equal(maps1, maps0 + 1);
	assert_int_equal(fds2, fds0);
	assert_int_equal(maps2, maps0);
}

/* A thread that exits while sampled: its last samples, then -ESRCH. */
static void test_thread_exits(void **state)
{
	struct spinner s;
	struct perfsample *ps;
	char why[300];
	int n = 0, r = 0;

	(void)state;
	require_perf();
	spin_start(&s);
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &ps, why, sizeof(why)), 0);
	for (uint64_t end = now_s() + DEADLINE_S; n == 0 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(ps, count, &n) >= 0);
	assert_true(n > 0);
	spin_stop(&s);
	for (uint64_t end = now_s() + DEADLINE_S; r >= 0 && now_s() < end; nap_ms(3))
		r = perfsample_read(ps, count, &n);
	assert_int_equal(r, -ESRCH);
	assert_int_equal(perfsample_read(ps, count, &n), -ESRCH);
	perfsample_close(ps);
	/* Gone before the open. */
	assert_int_equal(perfsample_open(s.tid, PERIOD_NS, 0, &ps, why, sizeof(why)), -ESRCH);
	assert_null(ps);
	assert_non_null(strstr(why, "exited"));
}

/* A child that spins, then execs a shell that spins: samples, then
 * -ENOEXEC, and none of the shell's. */
static void test_thread_execs(void **state)
{
	struct perfsample *ps;
	char why[300];
	int go[2], n = 0, r = 0;

	(void)state;
	require_perf();
	assert_int_equal(pipe(go), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(go[1]);
		char ch;
		/* Spins in user space until told to exec (the pipe read blocks
		 * only once the parent has written). */
		for (unsigned x = 1, i = 0;; i++) {
			x = x * 1103515245u + 12345u;
			if (i % (1u << 20) == 0) {
				fd_set set;
				FD_ZERO(&set);
				FD_SET(go[0], &set);
				struct timeval tv = { 0 };
				if (select(go[0] + 1, &set, NULL, NULL, &tv) == 1 && read(go[0], &ch, 1) == 1)
					break;
			}
		}
		execl("/bin/sh", "sh", "-c", "while :; do :; done", (char *)NULL);
		_exit(127);
	}
	close(go[0]);
	assert_int_equal(perfsample_open(child, PERIOD_NS, 0, &ps, why, sizeof(why)), 0);
	for (uint64_t end = now_s() + DEADLINE_S; n == 0 && now_s() < end; nap_ms(3))
		assert_true(perfsample_read(ps, count, &n) >= 0);
	assert_true(n > 0);
	assert_int_equal(write(go[1], "x", 1), 1);
	for (uint64_t end = now_s() + DEADLINE_S; r >= 0 && now_s() < end; nap_ms(3))
		r = perfsample_read(ps, count, &n);
	struct perfsample_info info;
	perfsample_info(ps, &info);
	perfsample_close(ps);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(go[1]);
	print_message("%d samples, %llu from before the exec dropped\n", n,
	              (unsigned long long)info.exec_dropped);
	assert_int_equal(r, -ENOEXEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hot_thread),
		cmocka_unit_test(test_deep_stack_marked),
		cmocka_unit_test(test_copy_fitted),
		cmocka_unit_test(test_copy_grows),
		cmocka_unit_test(test_blocked_thread),
		cmocka_unit_test(test_close_frees),
		cmocka_unit_test(test_thread_exits),
		cmocka_unit_test(test_thread_execs),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
