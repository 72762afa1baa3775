/* Unit tests of stackdump on live threads: dumps of build/tests/hotchain
 * (path from $HOTCHAIN) and build/tests/stackcases ($STACKCASES), skipped
 * with a reason when they are missing or ptrace is not permitted.  The pure
 * parts are test_stackdump.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/snapshot.h"
#include "stackdump/stackdump.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- live dumps of hotchain ---- */

static struct {
	pid_t pid, hot, idle[8];
	int nidle;
	char why[512];      /* why the live tests skip, "" when they run */
} target;

static struct stackdump *sd;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void stop_target(void)
{
	int st;

	if (target.pid <= 0)
		return;
	kill(target.pid, SIGTERM);
	kill(target.pid, SIGCONT);      /* in case a test left it stopped */
	for (uint64_t end = now_ms() + 2000; now_ms() < end;) {
		if (waitpid(target.pid, &st, WNOHANG) == target.pid) {
			target.pid = 0;
			return;
		}
		usleep(10000);
	}
	kill(target.pid, SIGKILL);
	waitpid(target.pid, &st, 0);
	target.pid = 0;
}

/* Starts PATH with ARGV, its stdout on a pipe (and its stdin on one too when
 * STDIN_FD is not NULL: the write end comes back there), and reads what it
 * prints into BUF until a line "ready", with a deadline of 10 s.  Returns
 * the pid, or -1 with WHY set. */
static pid_t spawn_ready(const char *path, char *const argv[], int *stdin_fd,
                         char *buf, size_t size, char *why, size_t whysize)
{
	size_t len = 0;
	int out[2], in[2] = { -1, -1 };
	pid_t pid;

	buf[0] = '\0';
	if (access(path, X_OK) < 0) {
		snprintf(why, whysize, "%s: %s (build it, or set its variable)", path, strerror(errno));
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) < 0 || (stdin_fd && pipe2(in, O_CLOEXEC) < 0)) {
		snprintf(why, whysize, "pipe: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(why, whysize, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		if (stdin_fd)
			dup2(in[0], STDIN_FILENO);
		execv(path, argv);
		_exit(127);
	}
	close(out[1]);
	if (stdin_fd) {
		close(in[0]);
		*stdin_fd = in[1];
	}
	for (uint64_t end = now_ms() + 10000; !strstr(buf, "ready\n");) {
		struct pollfd pfd = { .fd = out[0], .events = POLLIN };
		uint64_t now = now_ms();
		ssize_t n;

		if (now >= end || poll(&pfd, 1, (int)(end - now)) <= 0 ||
		    (n = read(out[0], buf + len, size - 1 - len)) <= 0) {
			snprintf(why, whysize, "%s did not say ready", path);
			close(out[0]);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			return -1;
		}
		len += (size_t)n;
		buf[len] = '\0';
	}
	close(out[0]);
	return pid;
}

/* Starts hotchain and reads its announcement. */
static int start_target(void **state)
{
	const char *path = getenv("HOTCHAIN") ? getenv("HOTCHAIN") : "build/tests/hotchain";
	char *const argv[] = { (char *)(uintptr_t)path, "--threads", "3", "--hot", "1",
	                       "--timeout", "60", NULL };
	char buf[4096];

	(void)state;
	sd = stackdump_new();
	if (!sd)
		return -1;
	target.pid = spawn_ready(path, argv, NULL, buf, sizeof(buf), target.why,
	                         sizeof(target.why));
	if (target.pid < 0) {
		target.pid = 0;
		return 0;
	}
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		int v;
		if (sscanf(line, "hot %d", &v) == 1)
			target.hot = v;
		else if (sscanf(line, "idle %d", &v) == 1 && target.nidle < 8)
			target.idle[target.nidle++] = v;
	}
	if (target.hot <= 0 || target.nidle != 2) {
		snprintf(target.why, sizeof(target.why), "%s printed no hot/idle tids", path);
		stop_target();
	}
	return 0;
}

static int stop_target_fixture(void **state)
{
	(void)state;
	stop_target();
	stackdump_free(sd);
	return 0;
}

/* Skips the test, saying why, when there is no target. */
static void require_target(void)
{
	if (target.why[0]) {
		print_message("skipped: %s\n", target.why);
		skip();
	}
}

/* Dumps TID of process PID.  A thread that a loaded machine keeps from its
 * CPU past the dump's deadline (-ETIMEDOUT) is let go and dumped again, 20
 * times at most: these tests are about the stack, not about how busy the
 * machine is. */
static int dump_retrying(pid_t pid, pid_t tid, struct stackdump_stack *st)
{
	int r = stackdump_thread(sd, pid, tid, 64, st);

	for (int tries = 1; r == -ETIMEDOUT && tries < 20; tries++) {
		stackdump_stack_free(st);
		for (uint64_t end = now_ms() + 3000; stackdump_poll(sd) > 0 && now_ms() < end;)
			usleep(5000);
		r = stackdump_thread(sd, pid, tid, 64, st);
	}
	return r;
}

/* Dumps TID of the target; skips the test when ptrace is not permitted. */
static int dump(pid_t tid, struct stackdump_stack *st)
{
	require_target();
	int r = dump_retrying(target.pid, tid, st);
	if (r == -EPERM) {
		print_message("skipped: ptrace not permitted: %s\n", st->error);
		stackdump_stack_free(st);
		skip();
	}
	return r;
}

/* Index of frame NAME in ST, or -1. */
static int find_symbol(const struct stackdump_stack *st, const char *name)
{
	for (size_t i = 0; i < st->nframes; i++)
		if (st->frames[i].symbol && strcmp(st->frames[i].symbol, name) == 0)
			return (int)i;
	return -1;
}

/* The state letter and TracerPid of thread TID of process PID. */
static void thread_status(pid_t pid, pid_t tid, char *state, long *tracer)
{
	char path[64], buf[4096];

	*state = '?';
	*tracer = -1;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	FILE *f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(buf, sizeof(buf), f)) {
		sscanf(buf, "State: %c", state);
		sscanf(buf, "TracerPid: %ld", tracer);
	}
	fclose(f);
}

/* Waits (1 s at most) until TID runs again: not in a ptrace stop ('t'), and
 * without tracer -- and in state WANT unless it is 0.  Returns the state. */
static char running_again_in(pid_t pid, pid_t tid, char want)
{
	char state;
	long tracer;

	for (uint64_t end = now_ms() + 1000;; usleep(1000)) {
		thread_status(pid, tid, &state, &tracer);
		if ((state != 't' && tracer == 0 && (!want || state == want)) || now_ms() >= end)
			break;
	}
	assert_int_not_equal(state, 't');
	assert_int_equal(tracer, 0);
	return state;
}

static char running_again(pid_t tid, char want)
{
	return running_again_in(target.pid, tid, want);
}

static void test_live_hot_chain(void **state)
{
	(void)state;
	struct stackdump_stack st;
	static const char *chain[] = { "hot_leaf", "hot_mid", "hot_root", "hot_thread_main" };

	assert_int_equal(dump(target.hot, &st), 0);
	assert_string_equal(st.error, "");
	assert_true(st.stop_ns > 0);
	assert_true(st.nframes >= 4);
	assert_int_not_equal(st.hash, 0);
	assert_int_equal(st.hash, stackdump_hash(st.frames, st.nframes));

	int at = find_symbol(&st, "hot_leaf");
	if (at < 0) {
		stackdump_print(&st, "  ", stderr);
		fail_msg("hot_leaf not in the stack");
	}
	assert_true((size_t)at + 4 <= st.nframes);
	for (int i = 0; i < 4; i++) {
		const struct stackdump_frame *f = &st.frames[at + i];
		assert_non_null(f->symbol);
		assert_string_equal(f->symbol, chain[i]);
		size_t n = strlen(f->module);
		assert_true(n >= 8 && strcmp(f->module + n - 8, "hotchain") == 0);
		assert_true(strlen(f->build_id) > 0);
		/* Module offsets, not addresses: the symbol's start is the FDE's. */
		assert_true(f->offset <= f->ip);
		assert_int_equal(f->offset - f->symbol_offset, f->func_offset);
	}
	running_again(target.hot, 0);
	stackdump_stack_free(&st);
}

/* The pc of thread TID of PID when it is blocked in read(2), from
 * /proc/TID/syscall ("0 fd buf count ... sp pc"); 0 while it is anywhere else. */
static uint64_t pc_in_read(pid_t pid, pid_t tid)
{
	char path[64], line[512];
	unsigned long long pc = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f) || strncmp(line, "0 ", 2) != 0)
		line[0] = '\0';
	fclose(f);
	char *last = strrchr(line, ' ');
	if (last)
		sscanf(last, " 0x%llx", &pc);
	return pc;
}

/* Waits (5 s at most) until TID of PID blocks in read(2) at a pc other than
 * NOT_PC, and returns that pc (0 on timeout). */
static uint64_t wait_read_site(pid_t pid, pid_t tid, uint64_t not_pc)
{
	for (uint64_t end = now_ms() + 5000; now_ms() < end; usleep(1000)) {
		uint64_t pc = pc_in_read(pid, tid);
		if (pc && pc != not_pc)
			return pc;
	}
	return 0;
}

/* Starts stackcases --case sites: its pid, *IN its stdin (each byte moves
 * its thread to the other read site) and *TID that thread; skips the test
 * when it cannot. */
static pid_t start_sites(int *in, int *tid)
{
	const char *path = getenv("STACKCASES") ? getenv("STACKCASES") : "build/tests/stackcases";
	char *const argv[] = { (char *)(uintptr_t)path, "--case", "sites", "--timeout", "60", NULL };
	char buf[256], why[512];

	require_target();
	pid_t pid = spawn_ready(path, argv, in, buf, sizeof(buf), why, sizeof(why));
	if (pid < 0) {
		print_message("skipped: %s\n", why);
		skip();
	}
	char *t = strstr(buf, "tid ");
	*tid = t ? atoi(t + 4) : 0;
	return pid;
}

/* The same functions caught at two different instructions hash the same.
 * The thread of stackcases --case sites sits in read(2) at one of two
 * syscall instructions of sites_leaf, and moves to the other with each byte
 * written to its stdin: the test catches it at both by construction, not
 * by the luck of where interrupts land. */
static void test_live_hash_ignores_leaf_instruction(void **state)
{
	struct stackdump_stack st[2];
	uint64_t pc[2] = { 0, 0 };
	int in, tid;

	(void)state;
	pid_t pid = start_sites(&in, &tid);
	for (int i = 0; i < 2; i++) {
		pc[i] = wait_read_site(pid, tid, i ? pc[0] : 0);
		if (!pc[i])
			break;
		int r = dump_retrying(pid, tid, &st[i]);
		running_again_in(pid, tid, 0);
		assert_int_equal(r, 0);
		if (i == 0 && write(in, "x", 1) != 1)
			fail_msg("write to the target: %s", strerror(errno));
	}
	close(in);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_true(pc[0] && pc[1]);
	for (int i = 0; i < 2; i++) {
		if (st[i].nframes < 2 || !st[i].frames[0].symbol ||
		    strcmp(st[i].frames[0].symbol, "sites_leaf") != 0) {
			stackdump_print(&st[i], "  ", stderr);
			fail_msg("dump %d is not in sites_leaf", i);
		}
		/* The innermost frame is exactly where /proc said the thread was. */
		assert_int_equal(st[i].frames[0].ip, pc[i]);
	}
	assert_int_not_equal(st[0].frames[0].ip, st[1].frames[0].ip);
	assert_int_equal(st[0].frames[0].func_offset, st[1].frames[0].func_offset);
	assert_int_equal(st[0].hash, st[1].hash);
	stackdump_stack_free(&st[0]);
	stackdump_stack_free(&st[1]);
}

/* Copies the registers and stack of thread TID, blocked in a syscall, as
 * a perf sample would hold them: with a ptrace stop of the test's own
 * (PTRACE_GETREGS), so that stackdump_thread_copy gets every register. */
static int copy_blocked(pid_t tid, struct stackdump_copy *copy, unsigned char *stack, size_t cap)
{
	int status, r = -1;

	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0)
		return -1;
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0 &&
	    waitpid(tid, &status, __WALL) == tid &&
	    ptrace(PTRACE_GETREGS, tid, NULL, &copy->regs) == 0) {
		/* From the red zone up, as a stop copies it; a partial read ends
		 * at the end of the stack's mapping. */
		struct iovec local = { stack, cap };
		struct iovec remote = { (void *)(uintptr_t)(copy->regs.rsp - SNAPSHOT_RED_ZONE), cap };
		ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);

		copy->stack_addr = copy->regs.rsp - SNAPSHOT_RED_ZONE;
		copy->stack = stack;
		copy->stack_len = n > 0 ? (size_t)n : 0;
		copy->stack_clipped = n > 0 && (size_t)n < cap;
		copy->time_ns = now_ms() * 1000000;
		r = n > 0 ? 0 : -1;
	}
	ptrace(PTRACE_DETACH, tid, NULL, NULL);
	return r;
}

/* A copy someone else took (stackdump_thread_copy: a perf sample's
 * registers and stack) unwinds to the very frames and hash that a dump of
 * the same state gives: the thread of stackcases --case sites stays
 * blocked in read(2) at one instruction until it is written to, so both
 * look at the same state by construction. */
static void test_live_copy_matches_stop(void **state)
{
	static unsigned char stack[64 * 1024];
	struct stackdump_stack stopped, copied = { 0 };
	struct stackdump_copy copy = { 0 };
	int in, tid, r, rc = -1;
	uint64_t pc;

	(void)state;
	pid_t pid = start_sites(&in, &tid);
	pc = wait_read_site(pid, tid, 0);
	r = dump_retrying(pid, tid, &stopped);
	running_again_in(pid, tid, 0);
	/* Back in the same read once the detach restarted it. */
	bool blocked = wait_read_site(pid, tid, 0) == pc && pc != 0;
	if (blocked && copy_blocked(tid, &copy, stack, sizeof(stack)) == 0)
		rc = stackdump_thread_copy(sd, pid, tid, &copy, 64, &copied);
	close(in);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	stackdump_forget(sd, pid);

	assert_int_equal(r, 0);
	assert_true(blocked);
	assert_int_equal(rc, 0);
	assert_int_equal(copied.stop_ns, 0);
	assert_int_equal(copied.stop_start_ns, copy.time_ns);
	if (copied.nframes != stopped.nframes || copied.hash != stopped.hash) {
		stackdump_print(&stopped, "  stopped ", stderr);
		stackdump_print(&copied, "  copied  ", stderr);
		fail_msg("the copy unwound to other frames");
	}
	for (size_t i = 0; i < copied.nframes; i++)
		assert_int_equal(copied.frames[i].ip, stopped.frames[i].ip);
	assert_true(copied.nframes >= 2 && copied.frames[0].symbol &&
	            strcmp(copied.frames[0].symbol, "sites_leaf") == 0);
	stackdump_stack_free(&stopped);
	stackdump_stack_free(&copied);
}

static void test_live_idle(void **state)
{
	(void)state;
	struct stackdump_stack st;

	require_target();
	for (int i = 0; i < target.nidle; i++) {
		assert_int_equal(dump(target.idle[i], &st), 0);
		assert_true(st.nframes >= 2);
		if (find_symbol(&st, "idle_thread_main") < 0) {
			stackdump_print(&st, "  ", stderr);
			fail_msg("idle_thread_main not in the stack of tid %d", (int)target.idle[i]);
		}
		assert_true(find_symbol(&st, "pthread_cond_wait") >= 0);
		/* It was blocked in futex(); interrupted and restarted, it blocks again. */
		char s = running_again(target.idle[i], 0);
		assert_true(s == 'S' || s == 'R');
		stackdump_stack_free(&st);
	}
	assert_int_equal(stackdump_poll(sd), 0);
}

static void test_live_group_stopped(void **state)
{
	(void)state;
	struct stackdump_stack st;

	require_target();
	/* A process stopped by SIGSTOP stays stopped after the dump. */
	assert_int_equal(kill(target.pid, SIGSTOP), 0);
	for (uint64_t end = now_ms() + 1000; now_ms() < end; usleep(1000)) {
		char path[64], buf[256];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)target.pid, (int)target.hot);
		FILE *f = fopen(path, "re");
		assert_non_null(f);
		char *ok = fgets(buf, sizeof(buf), f);
		fclose(f);
		if (ok && strstr(buf, ") T "))
			break;
	}
	int r = dump(target.hot, &st);
	/* Detached, it passes through R on its way back into the group-stop. */
	char s = running_again(target.hot, 'T');
	kill(target.pid, SIGCONT);
	assert_int_equal(r, 0);
	assert_true(find_symbol(&st, "hot_leaf") >= 0);
	assert_int_equal(s, 'T');
	stackdump_stack_free(&st);
}

static void test_live_errors(void **state)
{
	(void)state;
	struct stackdump_stack st;

	require_target();
	/* No such thread in that process. */
	assert_int_equal(stackdump_thread(sd, target.pid, 0x7ffffff0, 64, &st), -ESRCH);
	assert_string_equal(st.error, "tid 2147483632 exited");
	assert_int_equal(st.nframes, 0);
	stackdump_stack_free(&st);

	assert_int_equal(stackdump_thread(sd, target.pid, target.hot, 0, &st), -EINVAL);
	assert_true(strlen(st.error) > 0);
	stackdump_stack_free(&st);
	assert_int_equal(stackdump_thread(sd, target.pid, target.hot, STACKDUMP_MAX_FRAMES + 1, &st),
	                 -EINVAL);
	stackdump_stack_free(&st);

	/* One frame asked: the rest is cut off, and said so. */
	assert_int_equal(dump(target.hot, &st), 0);
	stackdump_stack_free(&st);
	assert_int_equal(stackdump_thread(sd, target.pid, target.hot, 1, &st), 0);
	assert_int_equal(st.nframes, 1);
	assert_true(st.truncated);
	stackdump_stack_free(&st);

	/* Our own threads cannot be traced. */
	assert_int_equal(stackdump_thread(sd, getpid(), getpid(), 64, &st), -EPERM);
	assert_true(strlen(st.error) > 0);
	stackdump_stack_free(&st);

	stackdump_forget(sd, target.pid);
	stackdump_forget(sd, target.pid);
	running_again(target.hot, 0);
}

/* The stack copy size: checked, and a small copy still unwinds the short
 * hot chain; the stop time is recorded. */
static void test_live_stack_copy(void **state)
{
	(void)state;
	struct stackdump_stack st;

	require_target();
	assert_int_equal(stackdump_set_stack_copy(sd, 1), -EINVAL);
	assert_int_equal(stackdump_set_stack_copy(sd, STACKDUMP_STACK_COPY_MAX + 1), -EINVAL);
	assert_int_equal(stackdump_set_stack_copy(sd, STACKDUMP_STACK_COPY_MIN), 0);
	int r = dump(target.hot, &st);
	assert_int_equal(stackdump_set_stack_copy(sd, STACKDUMP_STACK_COPY_DEFAULT), 0);
	assert_int_equal(r, 0);
	assert_true(find_symbol(&st, "hot_thread_main") >= 0);
	assert_true(st.stop_ns > 0);
	stackdump_stack_free(&st);
	running_again(target.hot, 0);
}

/* A thread that cannot get a CPU for 400 ms (a SCHED_FIFO hog holds the
 * only CPU it may use) does not stop within the 100 ms deadline: the dump
 * gives up, the thread stays pending, and stackdump_poll() releases it once
 * it has stopped.  Kernels with a fair deadline server (6.12+) may still
 * give it a slice within the 100 ms: then the hog is tried again, and the
 * test skips when the thread never missed the deadline. */
static pid_t spawn_pinned(int cpu, int fifo_prio, int ready_fd, unsigned ms)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		cpu_set_t one;
		struct sched_param p = { .sched_priority = fifo_prio };

		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		sched_setaffinity(0, sizeof(one), &one);
		if (fifo_prio && sched_setscheduler(0, SCHED_FIFO, &p) < 0)
			_exit(1);
		alarm(10);
		(void)!write(ready_fd, "x", 1);
		for (uint64_t end = now_ms() + ms; now_ms() < end;)
			;
		_exit(0);
	}
	return pid;
}

static void test_live_timeout_pending(void **state)
{
	(void)state;
	struct sched_param fifo = { .sched_priority = 1 }, other = { 0 };
	struct stackdump_stack st;
	cpu_set_t mine, one;
	int cpus[2], ncpus = 0, ready[2], r1 = 0, pending = -1, r2 = 0;
	char c;

	sched_getaffinity(0, sizeof(mine), &mine);
	for (int k = 0; k < CPU_SETSIZE && ncpus < 2; k++)
		if (CPU_ISSET(k, &mine))
			cpus[ncpus++] = k;
	if (ncpus < 2) {
		print_message("skipped: needs two CPUs\n");
		skip();
	}
	if (sched_setscheduler(0, SCHED_FIFO, &fifo) < 0) {
		print_message("skipped: SCHED_FIFO not permitted: %s\n", strerror(errno));
		skip();
	}
	sched_setscheduler(0, SCHED_OTHER, &other);
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	CPU_ZERO(&one);
	CPU_SET(cpus[0], &one);
	sched_setaffinity(0, sizeof(one), &one);

	pid_t spinner = spawn_pinned(cpus[1], 0, ready[1], 10000);
	bool ok = read(ready[0], &c, 1) == 1;
	for (int attempt = 0; ok && attempt < 5 && r1 != -ETIMEDOUT; attempt++) {
		pid_t hog = spawn_pinned(cpus[1], 50, ready[1], 400);
		/* The hog runs: from now the spinner gets no CPU (or little). */
		ok = read(ready[0], &c, 1) == 1;
		r1 = stackdump_thread(sd, spinner, spinner, 64, &st);
		stackdump_stack_free(&st);
		pending = stackdump_poll(sd);
		if (r1 == -ETIMEDOUT) {
			r2 = stackdump_thread(sd, spinner, spinner, 64, &st);
			stackdump_stack_free(&st);
		}
		waitpid(hog, NULL, 0);
	}
	close(ready[0]);
	close(ready[1]);
	uint64_t t0 = now_ms();
	while (stackdump_poll(sd) > 0 && now_ms() < t0 + 3000)
		usleep(5000);
	int left = stackdump_poll(sd);
	char s = left == 0 ? running_again_in(spinner, spinner, 0) : '?';
	/* Once let go, it can be dumped again -- within the deadline when the
	 * machine lets it run (a loaded one may not, the first times). */
	int r3 = -ETIMEDOUT;
	size_t n3 = 0;
	for (int tries = 0; r3 == -ETIMEDOUT && tries < 20; tries++) {
		for (uint64_t end = now_ms() + 3000; stackdump_poll(sd) > 0 && now_ms() < end;)
			usleep(5000);
		r3 = stackdump_thread(sd, spinner, spinner, 64, &st);
		n3 = st.nframes;
		stackdump_stack_free(&st);
	}

	sched_setaffinity(0, sizeof(mine), &mine);
	kill(spinner, SIGKILL);
	waitpid(spinner, NULL, 0);
	stackdump_forget(sd, spinner);

	assert_true(ok);
	assert_int_equal(left, 0);
	assert_int_equal(s, 'R');
	assert_int_equal(r3, 0);
	assert_true(n3 >= 1);
	if (r1 != -ETIMEDOUT) {
		print_message("skipped: the spinner always got a CPU within 100 ms\n");
		skip();
	}
	assert_int_equal(pending, 1);
	assert_int_equal(r2, -EAGAIN);
}

/* A target that runs on the dumper's own CPU stops only once the dumper
 * leaves that CPU: the dumper sleeps until the SIGCHLD of the stop, at its
 * normal policy.  Every dump succeeds, also when SIGCHLD is ignored (no
 * SIGCHLD comes: the sleeps are short), and the dumper runs at its normal
 * policy afterwards. */
static void test_live_shared_cpu(void **state)
{
	(void)state;
	struct stackdump_stack st;
	cpu_set_t mine, one;
	int ready[2], fails = 0, policy_after;
	char c;

	sched_getaffinity(0, sizeof(mine), &mine);
	int cpu = 0;
	while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine))
		cpu++;
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	sched_setaffinity(0, sizeof(one), &one);
	pid_t spinner = spawn_pinned(cpu, 0, ready[1], 10000);
	bool ok = read(ready[0], &c, 1) == 1;
	/* Ten dumps, the second five with SIGCHLD ignored.  On a loaded
	 * machine other work on this CPU may keep the spinner from stopping
	 * within the deadline: such a dump is -ETIMEDOUT, is let go by
	 * stackdump_poll, and is tried again (40 tries in all). */
	int done = 0;
	for (int tries = 0; ok && done < 10 && tries < 40; tries++) {
		struct sigaction ign = { .sa_handler = done < 5 ? SIG_DFL : SIG_IGN };
		sigaction(SIGCHLD, &ign, NULL);
		int r = stackdump_thread(sd, spinner, spinner, 64, &st);
		if (r == -ETIMEDOUT) {
			stackdump_stack_free(&st);
			for (uint64_t end = now_ms() + 3000; stackdump_poll(sd) > 0 && now_ms() < end;)
				usleep(5000);
			continue;
		}
		if (r != 0)
			print_message("dump %d: %s\n", done, st.error);
		fails += r != 0 || st.nframes < 1;
		/* Not a timing: a stop past the dump's own deadline is a
		 * wait that missed the stop (1 s sleeps without SIGCHLD). */
		fails += st.stop_ns >= SNAPSHOT_DEADLINE_NS;
		stackdump_stack_free(&st);
		done++;
	}
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigaction(SIGCHLD, &dfl, NULL);
	policy_after = sched_getscheduler(0);
	char s = running_again_in(spinner, spinner, 0);
	sched_setaffinity(0, sizeof(mine), &mine);
	close(ready[0]);
	close(ready[1]);
	kill(spinner, SIGKILL);
	waitpid(spinner, NULL, 0);
	stackdump_forget(sd, spinner);

	assert_true(ok);
	assert_int_equal(done, 10);
	assert_int_equal(fails, 0);
	assert_int_equal(policy_after, SCHED_OTHER);
	assert_int_equal(s, 'R');
}

/* A vfork() parent waits in uninterruptible sleep (D) until its child
 * execs or exits: it is not interrupted, and said so. */
static void test_live_uninterruptible(void **state)
{
	(void)state;
	struct stackdump_stack st;
	int fds[2];
	pid_t child = -1;

	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	pid_t helper = fork();
	assert_true(helper >= 0);
	if (helper == 0) {
		if (vfork() == 0) {
			pid_t me = getpid();
			(void)!write(fds[1], &me, sizeof(me));
			usleep(1500 * 1000);
			_exit(0);
		}
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &child, sizeof(child)), sizeof(child));
	close(fds[0]);
	char s = '?';
	long tracer;
	for (uint64_t end = now_ms() + 1000; s != 'D' && now_ms() < end; usleep(1000))
		thread_status(helper, helper, &s, &tracer);
	int r = s == 'D' ? stackdump_thread(sd, helper, helper, 64, &st) : 0;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", s == 'D' ? st.error : "");
	if (s == 'D')
		stackdump_stack_free(&st);
	thread_status(helper, helper, &s, &tracer);
	kill(child, SIGKILL);
	kill(helper, SIGKILL);
	waitpid(helper, NULL, 0);
	stackdump_forget(sd, helper);

	assert_int_equal(r, -EAGAIN);
	char want[128];
	snprintf(want, sizeof(want), "tid %d is in uninterruptible sleep (D)", (int)helper);
	assert_string_equal(msg, want);
	assert_int_equal(tracer, 0);     /* not even seized */
}

int main(void)
{
	const struct CMUnitTest live[] = {
		cmocka_unit_test(test_live_hot_chain),
		cmocka_unit_test(test_live_hash_ignores_leaf_instruction),
		cmocka_unit_test(test_live_copy_matches_stop),
		cmocka_unit_test(test_live_idle),
		cmocka_unit_test(test_live_group_stopped),
		cmocka_unit_test(test_live_errors),
		cmocka_unit_test(test_live_stack_copy),
		cmocka_unit_test(test_live_timeout_pending),
		cmocka_unit_test(test_live_shared_cpu),
		cmocka_unit_test(test_live_uninterruptible),
	};
	/* TEST_FILTER=test_live_idle runs the matching tests only. */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	int failed = cmocka_run_group_tests_name("stackdump live", live, start_target,
	                                         stop_target_fixture);

	return failed ? 1 : 0;
}
