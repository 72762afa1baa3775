/* tail: the human form of an event (fixed events, TZ fixed), its escaping
 * of hostile names, and tail_run against a real database (--json lines are
 * eventfmt's, tested in test_eventfmt.c). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/unit/event_fixture.h"
#include "tests/unit/tmpdir.h"

#include "cpumond/store.h"
#include "cpumond/tail.h"

static char *print_stack(const struct stackdump_stack *sk, const char *indent)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	stackdump_print(sk, indent, f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void test_human_no_stack(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	(void)state;

	ev.stack.nframes = 0;
	ev.stack.hash = 0;
	ev.error = "tid 4250 exited";
	got = format(tail_format_human, &ev);
	assert_string_equal(got,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (1 sample over)  stopped 43 µs  [watch web]\n"
		"  no stack: tid 4250 exited\n");
	free(got);

	/* Never stopped, several samples, run queue delay, error only in the
	 * stack (an event straight from stackdump). */
	ev.error = NULL;
	snprintf(ev.stack.error, sizeof ev.stack.error, "tid 4250 is in state D");
	ev.stack.stop_ns = 0;
	ev.consecutive = 3;
	ev.run_delay = 120;
	got = format(tail_format_human, &ev);
	assert_string_equal(got,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (3 samples over)  run delay 120‰  [watch web]\n"
		"  no stack: tid 4250 is in state D\n");
	free(got);
}

/* Another kind names itself, and its details follow, escaped. */
static void test_human_kinds(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	(void)state;

	ev.stack.nframes = 0;
	ev.stack.hash = 0;
	ev.stack.stop_ns = 0;
	ev.kind = "starved";
	ev.usage = 480;
	ev.run_delay = 520;
	ev.details = "{\"demand\":1000,\"comm\":\"a\nb\"}";
	got = format(tail_format_human, &ev);
	assert_string_equal(got,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"starved: wants 1000‰, got 480‰ (threshold 800‰) (1 sample over)  run delay 520‰  "
		"[watch web]\n"
		"  details {\"demand\":1000,\"comm\":\"a\\x0ab\"}\n");
	free(got);
}

static void test_human_with_stack(void **state)
{
	struct store_event ev = fixed_event();
	char *got, *frames, *want;
	(void)state;

	/* Each frame is the instruction caught: symbol+offset (module), or
	 * module+offset in the module; never the function's start
	 * (module@0xSTART, which report prints). */
	frames = print_stack(&ev.stack, "    ");
	assert_string_equal(frames,
		"    #0 spin_leaf+0x29 (/usr/bin/spin)\n"
		"    #1 [vdso]+0x1042\n");
	got = format(tail_format_human, &ev);
	assert_true(asprintf(&want,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (1 sample over)  stopped 43 µs  [watch web]\n%s", frames) > 0);
	assert_string_equal(got, want);
	free(got);
	free(want);

	ev.error = "stack copy ran short";
	ev.stack.stop_ns = 12345678;
	got = format(tail_format_human, &ev);
	assert_true(asprintf(&want,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (1 sample over)  stopped 12.3 ms  [watch web]\n"
		"  partial stack: stack copy ran short\n%s", frames) > 0);
	assert_string_equal(got, want);
	free(got);
	free(want);
	free(frames);
}

static void test_human_local_offset(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	(void)state;

	set_tz("XST-5:30");
	ev.stack.nframes = 0;
	got = format(tail_format_human, &ev);
	assert_true(strncmp(got, "2026-11-29 18:34:05 +0530  ", 27) == 0);
	free(got);
	set_tz("UTC");
}

/* Hostile names must not drive the terminal: no ESC, no extra line. */
static void test_human_escapes_names(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	int newlines = 0;
	(void)state;

	ev.comm = "evil\r\x7f";
	ev.thread = "\x1b[31mred\nline\x9b" "2J";
	ev.watch = "w\x1b]0;title\x07";
	ev.error = "bad\n\x1b[2Jnews";
	ev.stack.nframes = 0;
	got = format(tail_format_human, &ev);
	for (const unsigned char *p = (const unsigned char *)got; *p; p++) {
		if (*p == '\n')
			newlines++;
		else if (*p < 0x20 || *p == 0x7f)
			fail_msg("control byte 0x%02x at %td in \"%s\"", *p,
			         (const char *)p - got, got);
	}
	assert_int_equal(newlines, 2);
	assert_null(strstr(got, "\x9b"));
	assert_non_null(strstr(got, "red"));
	assert_non_null(strstr(got, "line"));
	free(got);
}

/* Where the process runs: its pid in its own namespace beside ours when
 * they differ, its unit and cgroup on a line of their own, escaped (a
 * cgroup is a directory anyone with write access names). */
static void test_human_origin(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	(void)state;

	ev.stack.nframes = 0;
	ev.nspid = 7;
	ev.cgroup = "/system.slice/nginx.service";
	ev.unit = "nginx.service";
	got = format(tail_format_human, &ev);
	assert_string_equal(got,
		"2026-11-29 13:04:05 +0000  nginx[4242 (7 in its namespace)] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (1 sample over)  stopped 43 µs  [watch web]\n"
		"  unit nginx.service  cgroup /system.slice/nginx.service\n");
	free(got);

	/* In our namespace; in no unit; a hostile cgroup name. */
	ev.nspid = 4242;
	ev.unit = "";
	ev.cgroup = "/evil\n\x1b[2J";
	got = format(tail_format_human, &ev);
	assert_string_equal(got,
		"2026-11-29 13:04:05 +0000  nginx[4242] thread \"worker-3\"/4250  "
		"usage 987‰ > 800‰ (1 sample over)  stopped 43 µs  [watch web]\n"
		"  cgroup /evil\\x0a\\x1b[2J\n");
	free(got);
}

static void test_human_episode(void **state)
{
	struct store_event ev = fixed_event();
	const struct store_stack_count stacks[] = { { 0xdeadbeef, 14, NULL }, { 0x1234, 6, NULL } };
	char *got;
	(void)state;

	ev.samples = 20;
	ev.stacks = stacks;
	ev.nstacks = 2;
	ev.episode_end = "thread went idle after 20 samples";
	got = format(tail_format_human, &ev);
	assert_non_null(strstr(got, "  key stack in 14 of 20 samples  stopped median 43 µs"));
	assert_non_null(strstr(got, "\n  episode thread went idle after 20 samples\n"));
	free(got);
}

/* tail_run against a real database, stdout captured in a file. */
struct fixture {
	char dir[64];
	char path[128];
	char out[128];
	int saved_stdout;
};

static int setup_db(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	if (!fx)
		return -1;
	setup_utc(NULL);
	if (tmpdir_make(fx->dir, sizeof fx->dir, "test_tail") < 0) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof fx->path, "%s/db/log.db", fx->dir);
	snprintf(fx->out, sizeof fx->out, "%s/stdout", fx->dir);
	*state = fx;
	return 0;
}

static int teardown_db(void **state)
{
	struct fixture *fx = *state;

	tmpdir_remove(fx->dir);
	free(fx);
	return 0;
}

static void capture_begin(struct fixture *fx)
{
	FILE *f = fopen(fx->out, "w");

	assert_non_null(f);
	fflush(stdout);
	fx->saved_stdout = dup(STDOUT_FILENO);
	assert_true(fx->saved_stdout >= 0);
	assert_true(dup2(fileno(f), STDOUT_FILENO) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* Ends the capture; returns what was written, to free. */
static char *capture_end(struct fixture *fx)
{
	char *buf = calloc(1, 1 << 20);
	size_t n;
	FILE *f;

	assert_non_null(buf);
	fflush(stdout);
	assert_true(dup2(fx->saved_stdout, STDOUT_FILENO) >= 0);
	close(fx->saved_stdout);
	f = fopen(fx->out, "r");
	assert_non_null(f);
	n = fread(buf, 1, (1 << 20) - 1, f);
	assert_false(ferror(f));
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Adds events with tids FIRST..FIRST+N-1 in one transaction.  Returns 0 or
 * a negative errno (usable in a child process: no cmocka there). */
static int add_events(const char *path, int first, int n)
{
	struct store *st;
	char err[512];
	int e = store_open(path, true, &st, err, sizeof err);

	if (e < 0)
		return e;
	e = store_begin(st);
	for (int i = 0; e == 0 && i < n; i++) {
		struct store_event ev = fixed_event();

		ev.tid = first + i;
		ev.time_us = T0 + i;
		e = store_add_event(st, &ev);
	}
	if (e == 0)
		e = store_commit(st);
	store_close(st);
	return e;
}

static int count_lines(const char *s, const char *needle)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_run_missing_database(void **state)
{
	struct fixture *fx = *state;
	struct tail_options opt = { .database = fx->path, .lines = 10 };
	int stop = 0;

	assert_int_equal(tail_run(&opt, &stop), -ENOENT);
}

static void test_run_last_lines(void **state)
{
	struct fixture *fx = *state;
	struct tail_options opt = { .database = fx->path, .lines = 2, .json = true };
	int stop = 0, e;
	char *out;

	assert_int_equal(add_events(fx->path, 100, 3), 0);
	capture_begin(fx);
	e = tail_run(&opt, &stop);
	out = capture_end(fx);
	assert_int_equal(e, 0);
	assert_int_equal(count_lines(out, "\n"), 2);
	assert_null(strstr(out, "\"tid\":100,"));
	assert_non_null(strstr(out, "\"tid\":101,"));
	assert_non_null(strstr(out, "\"tid\":102,"));
	free(out);

	opt.lines = 0;
	opt.json = false;
	capture_begin(fx);
	e = tail_run(&opt, &stop);
	out = capture_end(fx);
	assert_int_equal(e, 0);
	assert_string_equal(out, "");
	free(out);
}

static volatile int stop_flag;

static void on_alarm(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* Follows a database that does not exist yet while another process creates
 * it and commits two cycles; stops on a signal. */
static void test_run_follow(void **state)
{
	struct fixture *fx = *state;
	struct tail_options opt = { .database = fx->path, .lines = 10, .follow = true,
	                            .json = true };
	struct itimerval it = { .it_value = { 1, 500000 } };
	struct sigaction sa = { .sa_handler = on_alarm };
	struct timespec t0, t1;
	int status, e;
	pid_t child;
	char *out;

	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		struct timespec d = { 0, 300000000 };

		nanosleep(&d, NULL);
		if (add_events(fx->path, 200, 1) < 0)
			_exit(1);
		nanosleep(&d, NULL);
		_exit(add_events(fx->path, 300, 2) < 0 ? 2 : 0);
	}
	stop_flag = 0;
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	capture_begin(fx);
	e = tail_run(&opt, &stop_flag);
	out = capture_end(fx);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(e, 0);
	assert_int_equal(count_lines(out, "\n"), 3);
	assert_non_null(strstr(out, "\"tid\":200,"));
	assert_non_null(strstr(out, "\"tid\":300,"));
	assert_non_null(strstr(out, "\"tid\":301,"));
	/* Stopped within a poll of the signal. */
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1500 + 250);
	free(out);
}

/* A database moved away and created anew is followed from its first event. */
static void test_run_follow_replaced(void **state)
{
	struct fixture *fx = *state;
	struct tail_options opt = { .database = fx->path, .lines = 1, .follow = true,
	                            .json = true };
	struct itimerval it = { .it_value = { 1, 200000 } };
	struct sigaction sa = { .sa_handler = on_alarm };
	int status, e;
	pid_t child;
	char *out;

	assert_int_equal(add_events(fx->path, 100, 2), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		static const char *const side[] = { "", "-wal", "-shm" };
		struct timespec d = { 0, 400000000 };
		char from[256], to[256];

		nanosleep(&d, NULL);
		for (int i = 0; i < 3; i++) {
			snprintf(from, sizeof from, "%s%s", fx->path, side[i]);
			snprintf(to, sizeof to, "%s.old%s", fx->path, side[i]);
			if (rename(from, to) < 0)
				_exit(1);
		}
		_exit(add_events(fx->path, 500, 1) < 0 ? 2 : 0);
	}
	stop_flag = 0;
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
	capture_begin(fx);
	e = tail_run(&opt, &stop_flag);
	out = capture_end(fx);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(e, 0);
	assert_int_equal(count_lines(out, "\n"), 2);
	assert_non_null(strstr(out, "\"tid\":101,"));
	assert_non_null(strstr(out, "\"id\":1,\"time\""));
	assert_non_null(strstr(out, "\"tid\":500,"));
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_human_no_stack, setup_utc),
		cmocka_unit_test_setup(test_human_kinds, setup_utc),
		cmocka_unit_test_setup(test_human_with_stack, setup_utc),
		cmocka_unit_test_setup(test_human_local_offset, setup_utc),
		cmocka_unit_test_setup(test_human_escapes_names, setup_utc),
		cmocka_unit_test_setup(test_human_episode, setup_utc),
		cmocka_unit_test_setup(test_human_origin, setup_utc),
		cmocka_unit_test_setup_teardown(test_run_missing_database, setup_db, teardown_db),
		cmocka_unit_test_setup_teardown(test_run_last_lines, setup_db, teardown_db),
		cmocka_unit_test_setup_teardown(test_run_follow, setup_db, teardown_db),
		cmocka_unit_test_setup_teardown(test_run_follow_replaced, setup_db, teardown_db),
	};
	/* A tail_run that never stops must not hang the test run: SIGUSR1's
	 * default action ends the program after a minute. */
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1 };
	struct itimerspec limit = { .it_value = { 60, 0 } };
	timer_t watchdog;

	if (timer_create(CLOCK_MONOTONIC, &sev, &watchdog) < 0 ||
	    timer_settime(watchdog, 0, &limit, NULL) < 0) {
		perror("timer_create");
		return 1;
	}
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("tail", tests, NULL, NULL);
}
