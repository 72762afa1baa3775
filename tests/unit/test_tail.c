/* tail: the human and JSON forms of an event (fixed events, TZ fixed), their
 * escaping of hostile names, and tail_run against a real database. */
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

#include "tests/unit/tmpdir.h"

#include "cpumond/store.h"
#include "cpumond/tail.h"

static void set_tz(const char *tz)
{
	assert_int_equal(setenv("TZ", tz, 1), 0);
	tzset();
}

static int setup_utc(void **state)
{
	(void)state;
	setenv("TZ", "UTC", 1);
	tzset();
	return 0;
}

static struct stackdump_frame two_frames[] = {
	{ .ip = 0x5555555551a9, .offset = 0x11a9, .func_offset = 0x1180,
	  .module = "/usr/bin/spin", .build_id = "0123abcd", .symbol = "spin_leaf",
	  .symbol_offset = 0x29 },
	/* Caught at 0x42 into an unnamed function that starts at 0x1000. */
	{ .ip = 0x7f0000001042, .offset = 0x1042, .func_offset = 0x1000,
	  .module = "[vdso]", .build_id = "", .symbol = NULL },
};

/* 2026-11-29 13:04:05.123456 UTC */
#define T0 1795957445123456LL

static struct store_event fixed_event(void)
{
	struct store_event ev = {
		.id = 7, .time_us = T0, .host = "h1", .watch = "web", .pid = 4242,
		.comm = "nginx", .exe = "/usr/sbin/nginx", .tid = 4250, .thread = "worker-3",
		.usage = 987, .threshold = 800, .consecutive = 1, .run_delay = 0,
		.error = "",
	};

	ev.stack.frames = two_frames;
	ev.stack.nframes = 2;
	ev.stack.hash = 0xdeadbeef;
	ev.stack.stop_ns = 43000;
	return ev;
}

/* What FN writes for EV, as a string to free. */
static char *format(void (*fn)(const struct store_event *, FILE *), const struct store_event *ev)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	fn(ev, f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

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

static void test_json_exact(void **state)
{
	struct store_event ev = fixed_event();
	const struct store_stack_count stacks[] = { { 0xdeadbeef, 14, NULL }, { 0x1234, 6, NULL } };
	char *got;
	(void)state;

	ev.samples = 20;
	ev.stop_max_ns = 97000;
	ev.stacks = stacks;
	ev.nstacks = 2;
	ev.episode_end = "thread went idle after 20 samples";
	got = format(tail_format_json, &ev);
	assert_string_equal(got,
		"{\"id\":7,\"time\":\"2026-11-29T13:04:05.123456+00:00\",\"host\":\"h1\","
		"\"watch\":\"web\",\"pid\":4242,\"comm\":\"nginx\",\"exe\":\"/usr/sbin/nginx\","
		"\"tid\":4250,\"thread\":\"worker-3\",\"usage\":987,\"threshold\":800,"
		"\"consecutive\":1,\"run_delay\":0,\"freeze_us\":43,"
		"\"stack_hash\":\"00000000deadbeef\",\"truncated\":false,\"error\":null,"
		"\"samples\":20,\"freeze_max_us\":97,"
		"\"episode_end\":\"thread went idle after 20 samples\",\"stacks\":["
		"{\"stack_hash\":\"00000000deadbeef\",\"count\":14,\"key\":true},"
		"{\"stack_hash\":\"0000000000001234\",\"count\":6,\"key\":false}],\"stack\":["
		"{\"ip\":\"0x5555555551a9\",\"module\":\"/usr/bin/spin\",\"build_id\":\"0123abcd\","
		"\"offset\":4521,\"func_offset\":4480,\"symbol\":\"spin_leaf\",\"name\":\"spin_leaf\","
		"\"symbol_offset\":41},"
		"{\"ip\":\"0x7f0000001042\",\"module\":\"[vdso]\",\"build_id\":\"\","
		"\"offset\":4162,\"func_offset\":4096,\"symbol\":null,\"name\":null,\"symbol_offset\":null}]}\n");
	free(got);

	/* No frames: no hash; an error; a zone east of UTC. */
	set_tz("XST-5:30");
	ev.stack.nframes = 0;
	ev.stack.truncated = false;
	ev.error = "tid 4250 exited";
	ev.samples = 0;
	ev.nstacks = 0;
	ev.episode_end = NULL;
	ev.time_us = T0 - 123455;
	got = format(tail_format_json, &ev);
	set_tz("UTC");
	assert_non_null(strstr(got, "\"time\":\"2026-11-29T18:34:05.000001+05:30\""));
	assert_non_null(strstr(got, "\"stack_hash\":null,\"truncated\":false,"
	                            "\"error\":\"tid 4250 exited\",\"samples\":0,"
	                            "\"freeze_max_us\":97,\"episode_end\":null,\"stacks\":[],"
	                            "\"stack\":[]}\n"));
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

static void hex(const char *s, char *out, size_t len)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p && n + 3 < len; p++)
		n += (size_t)snprintf(out + n, len - n, "%02x", *p);
	out[n] = '\0';
}

/* Runs LINE through Python's json module and returns its exit status: 0 when
 * the line is one valid UTF-8, valid JSON object whose thread, comm and exe
 * decode to the raw bytes given (a byte that is not valid UTF-8 standing for
 * the code point of its value). */
static int python_check(const char *line, const char *thread, const char *comm, const char *exe,
                        bool quiet)
{
	static const char script[] =
		"import codecs, json, sys\n"
		"codecs.register_error(\"byte\", lambda e: (chr(e.object[e.start]), e.start + 1))\n"
		"raw = sys.stdin.buffer.read()\n"
		"text = raw.decode(\"utf-8\")\n"
		"assert text.endswith(\"\\n\") and text.count(\"\\n\") == 1, \"not one line\"\n"
		"o = json.loads(text)\n"
		"for key, h in zip((\"thread\", \"comm\", \"exe\"), sys.argv[1:]):\n"
		"    want = bytes.fromhex(h).decode(\"utf-8\", \"byte\")\n"
		"    assert o[key] == want, (key, o[key], want)\n";
	char cmd[4096], ht[512], hc[512], he[512];
	FILE *p;
	int status;

	hex(thread, ht, sizeof ht);
	hex(comm, hc, sizeof hc);
	hex(exe, he, sizeof he);
	snprintf(cmd, sizeof cmd, "python3 -c '%s' '%s' '%s' '%s'%s", script, ht, hc, he,
	         quiet ? " 2>/dev/null" : "");
	p = popen(cmd, "w");
	assert_non_null(p);
	fputs(line, p);
	status = pclose(p);
	assert_true(status != -1);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_json_valid_whatever_the_bytes(void **state)
{
	struct store_event ev = fixed_event();
	char *got;
	(void)state;

	ev.thread = "q\"uote\\back\x01\x1b[31m\n\t\x7f\xff\xfe end";
	/* Overlong, surrogate, cut sequence, over U+10FFFF; then valid é € 😀. */
	ev.comm = "\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xf4\x90\x80\x80|\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
	ev.exe = "/tmp/\x80\xbf\\\"";
	ev.watch = "\"";
	ev.error = "\x1b\xff";
	two_frames[1].module = "/lib/\xff\"\\.so";
	got = format(tail_format_json, &ev);
	two_frames[1].module = "[vdso]";
	for (const unsigned char *p = (const unsigned char *)got; *p; p++)
		assert_true(*p >= 0x20 || p[1] == '\0');
	assert_non_null(strstr(got, "\"thread\":\"q\\\"uote\\\\back\\u0001\\u001b[31m\\u000a"
	                            "\\u0009\\u007f\\u00ff\\u00fe end\""));
	assert_int_equal(python_check(got, ev.thread, ev.comm, ev.exe, false), 0);
	/* The check can fail: a raw control byte is not valid JSON. */
	assert_int_not_equal(python_check("{\"thread\":\"a\x01\"}\n", "a", "", "", true), 0);
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
		cmocka_unit_test_setup(test_human_with_stack, setup_utc),
		cmocka_unit_test_setup(test_human_local_offset, setup_utc),
		cmocka_unit_test_setup(test_human_escapes_names, setup_utc),
		cmocka_unit_test_setup(test_json_exact, setup_utc),
		cmocka_unit_test_setup(test_human_episode, setup_utc),
		cmocka_unit_test_setup(test_json_valid_whatever_the_bytes, setup_utc),
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
	return cmocka_run_group_tests_name("tail", tests, NULL, NULL);
}
