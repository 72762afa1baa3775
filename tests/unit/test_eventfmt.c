/* eventfmt: an event as other programs get it.  The JSON object of tail
 * --json and the event log, byte for byte (this pins the schema); valid
 * JSON whatever bytes the names hold; the journal entry's fields; the
 * summary of the key stack that the event line and the journal share. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tests/unit/event_fixture.h"

#include "cpumond/eventfmt.h"

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
	ev.nspid = 7;
	ev.cgroup = "/system.slice/nginx.service";
	ev.unit = "nginx.service";
	ev.kind = "stall";
	ev.capture = "perf";
	ev.details = "{\"syscall\":\"futex\"}";
	got = format(eventfmt_json, &ev);
	assert_string_equal(got,
		"{\"id\":7,\"time\":\"2026-11-29T13:04:05.123456+00:00\",\"kind\":\"stall\","
		"\"host\":\"h1\","
		"\"watch\":\"web\",\"pid\":4242,\"nspid\":7,\"comm\":\"nginx\","
		"\"exe\":\"/usr/sbin/nginx\",\"cgroup\":\"/system.slice/nginx.service\","
		"\"unit\":\"nginx.service\",\"tid\":4250,\"thread\":\"worker-3\",\"usage\":987,\"threshold\":800,"
		"\"consecutive\":1,\"run_delay\":0,\"freeze_us\":43,"
		"\"stack_hash\":\"00000000deadbeef\",\"truncated\":false,\"error\":null,"
		"\"samples\":20,\"capture\":\"perf\",\"freeze_max_us\":97,"
		"\"episode_end\":\"thread went idle after 20 samples\","
		"\"details\":{\"syscall\":\"futex\"},\"stacks\":["
		"{\"stack_hash\":\"00000000deadbeef\",\"count\":14,\"key\":true},"
		"{\"stack_hash\":\"0000000000001234\",\"count\":6,\"key\":false}],\"stack\":["
		"{\"ip\":\"0x5555555551a9\",\"module\":\"/usr/bin/spin\",\"build_id\":\"0123abcd\","
		"\"offset\":4521,\"func_offset\":4480,\"symbol\":\"spin_leaf\",\"name\":\"spin_leaf\","
		"\"symbol_offset\":41,\"file\":null,\"line\":null,\"inlined\":false},"
		"{\"ip\":\"0x7f0000001042\",\"module\":\"[vdso]\",\"build_id\":\"\","
		"\"offset\":4162,\"func_offset\":4096,\"symbol\":null,\"name\":null,\"symbol_offset\":null,"
		"\"file\":null,\"line\":null,\"inlined\":false}]}\n");
	free(got);

	/* No frames: no hash; an error; a zone east of UTC; where it ran not
	 * known (an event of an older cpumond), or in no unit. */
	set_tz("XST-5:30");
	ev.nspid = 0;
	ev.cgroup = NULL;
	ev.unit = "";
	ev.stack.nframes = 0;
	ev.stack.truncated = false;
	ev.error = "tid 4250 exited";
	ev.samples = 0;
	ev.nstacks = 0;
	ev.episode_end = NULL;
	ev.kind = NULL;
	ev.capture = "";
	ev.details = NULL;
	ev.time_us = T0 - 123455;
	got = format(eventfmt_json, &ev);
	set_tz("UTC");
	assert_non_null(strstr(got, "\"time\":\"2026-11-29T18:34:05.000001+05:30\""));
	assert_non_null(strstr(got, "\"kind\":\"hot\",\"host\""));
	assert_non_null(strstr(got, "\"pid\":4242,\"nspid\":null,\"comm\":\"nginx\","
	                            "\"exe\":\"/usr/sbin/nginx\",\"cgroup\":null,\"unit\":null,"
	                            "\"tid\":4250,"));
	assert_non_null(strstr(got, "\"stack_hash\":null,\"truncated\":false,"
	                            "\"error\":\"tid 4250 exited\",\"samples\":0,"
	                            "\"capture\":null,\"freeze_max_us\":97,\"episode_end\":null,"
	                            "\"details\":null,\"stacks\":[],"
	                            "\"stack\":[]}\n"));
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
	got = format(eventfmt_json, &ev);
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

/* Every field, in order, with the summary the event line uses. */
static void test_journal_fields(void **state)
{
	struct store_event ev = fixed_event();
	char *fields[EVENTFMT_JOURNAL_FIELDS];
	char summary[512];
	(void)state;

	eventfmt_stack_summary(&ev.stack, summary, sizeof summary);
	assert_string_equal(summary, "spin_leaf <- [vdso]@0x1000");
	assert_int_equal(eventfmt_journal(&ev, summary, fields), 0);
	assert_string_equal(fields[0], "MESSAGE=nginx[4242] thread worker-3/4250 at 987‰ > 800‰: "
	                               "spin_leaf <- [vdso]@0x1000");
	assert_string_equal(fields[1], "PRIORITY=4");
	assert_string_equal(fields[2], "CPUMOND_WATCH=web");
	assert_string_equal(fields[3], "CPUMOND_PID=4242");
	assert_string_equal(fields[4], "CPUMOND_TID=4250");
	assert_string_equal(fields[5], "CPUMOND_COMM=nginx");
	assert_string_equal(fields[6], "CPUMOND_THREAD=worker-3");
	assert_string_equal(fields[7], "CPUMOND_USAGE=987");
	assert_string_equal(fields[8], "CPUMOND_STACK_HASH=00000000deadbeef");
	assert_string_equal(fields[9], "CPUMOND_TOP_FRAME=spin_leaf");
	assert_string_equal(fields[10], "CPUMOND_NSPID=");
	assert_string_equal(fields[11], "CPUMOND_CGROUP=");
	assert_string_equal(fields[12], "CPUMOND_UNIT=");
	assert_string_equal(fields[13], "CPUMOND_KIND=hot");
	assert_string_equal(fields[14], "CPUMOND_CAPTURE=");
	eventfmt_journal_free(fields);
	for (size_t i = 0; i < EVENTFMT_JOURNAL_FIELDS; i++)
		assert_null(fields[i]);

	/* Where it runs, when known. */
	ev.nspid = 7;
	ev.cgroup = "/system.slice/nginx.service";
	ev.unit = "nginx.service";
	ev.kind = "starved";
	ev.capture = "ptrace";
	assert_int_equal(eventfmt_journal(&ev, summary, fields), 0);
	assert_string_equal(fields[13], "CPUMOND_KIND=starved");
	assert_string_equal(fields[14], "CPUMOND_CAPTURE=ptrace");
	assert_string_equal(fields[10], "CPUMOND_NSPID=7");
	assert_string_equal(fields[11], "CPUMOND_CGROUP=/system.slice/nginx.service");
	assert_string_equal(fields[12], "CPUMOND_UNIT=nginx.service");
	eventfmt_journal_free(fields);
	ev.nspid = 0;
	ev.cgroup = ev.unit = NULL;
	ev.kind = ev.capture = NULL;

	/* The top frame unnamed: the function as report spells it.  Names
	 * go as bytes (the journal keeps them), NULL as "". */
	ev.stack.frames = &two_frames[1];
	ev.stack.nframes = 1;
	ev.thread = "a\nb";
	ev.watch = NULL;
	assert_int_equal(eventfmt_journal(&ev, "[vdso]@0x1000", fields), 0);
	assert_string_equal(fields[0], "MESSAGE=nginx[4242] thread a\nb/4250 at 987‰ > 800‰: "
	                               "[vdso]@0x1000");
	assert_string_equal(fields[2], "CPUMOND_WATCH=");
	assert_string_equal(fields[6], "CPUMOND_THREAD=a\nb");
	assert_string_equal(fields[9], "CPUMOND_TOP_FRAME=[vdso]@0x1000");
	eventfmt_journal_free(fields);

	/* No stack: no hash, no top frame, whatever summary is given. */
	ev.stack.nframes = 0;
	assert_int_equal(eventfmt_journal(&ev, "stale", fields), 0);
	assert_string_equal(fields[0], "MESSAGE=nginx[4242] thread a\nb/4250 at 987‰ > 800‰: "
	                               "no stack");
	assert_string_equal(fields[8], "CPUMOND_STACK_HASH=");
	assert_string_equal(fields[9], "CPUMOND_TOP_FRAME=");
	eventfmt_journal_free(fields);
}

/* The summary, in LEN bytes, of a stack of N frames, of which those from
 * NAMED_FROM on have a symbol ("f3" for frame 3) and the ones before are
 * unnamed functions of /usr/lib/libx.so.  To free. */
static char *summary_of(size_t n, size_t named_from, size_t len)
{
	struct stackdump_frame frames[16];
	struct stackdump_stack sk = { .frames = frames, .nframes = n };
	char names[16][8], *buf = malloc(len);

	assert_non_null(buf);
	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof names[i], "f%zu", i);
		frames[i] = (struct stackdump_frame){ .module = "/usr/lib/libx.so",
		                                      .func_offset = 0x1000 + 0x100 * i,
		                                      .symbol = i >= named_from ? names[i] : NULL };
	}
	eventfmt_stack_summary(&sk, buf, len);
	return buf;
}

static void expect_summary(size_t n, size_t named_from, const char *want)
{
	char *got = summary_of(n, named_from, 512);

	assert_string_equal(got, want);
	free(got);
}

static void test_stack_summary(void **state)
{
	char *got;
	(void)state;

	expect_summary(2, 0, "f0 <- f1");
	expect_summary(3, 0, "f0 <- f1 <- f2");
	expect_summary(6, 0, "f0 <- f1 <- f2 <- ...");
	/* A stripped library on top: the innermost named function too. */
	expect_summary(8, 5, "libx.so@0x1000 <- libx.so@0x1100 <- libx.so@0x1200 <- ... <- "
	                     "f5 (#5) <- ...");
	expect_summary(4, 3, "libx.so@0x1000 <- libx.so@0x1100 <- libx.so@0x1200 <- f3 (#3)");
	expect_summary(3, 3, "libx.so@0x1000 <- libx.so@0x1100 <- libx.so@0x1200");
	/* Nothing to say without frames. */
	expect_summary(0, 0, "");

	/* Cut to fit in LEN bytes with its NUL. */
	got = summary_of(6, 0, 8);
	assert_true(strlen(got) >= 5 && strlen(got) < 8);
	assert_memory_equal(got, "f0 <- f1", strlen(got));
	free(got);
	got = summary_of(6, 0, 1);
	assert_string_equal(got, "");
	free(got);
}

static char *what_of(const struct store_event *ev)
{
	static char buf[160];

	eventfmt_what(ev, buf, sizeof buf);
	return buf;
}

/* Each kind's phrase in the event line, the journal's MESSAGE and tail. */
static void test_what(void **state)
{
	struct store_event ev = fixed_event();
	char *fields[EVENTFMT_JOURNAL_FIELDS];
	(void)state;

	assert_string_equal(what_of(&ev), "at 987‰ > 800‰");
	ev.kind = "starved";
	ev.usage = 480;
	ev.run_delay = 500;
	/* Without details: usage + run delay. */
	assert_string_equal(what_of(&ev), "starved: wants 980‰, got 480‰ (threshold 800‰)");
	ev.details = "{\"usage\":480,\"demand\":1000,\"run_delay\":520}";
	assert_string_equal(what_of(&ev), "starved: wants 1000‰, got 480‰ (threshold 800‰)");
	assert_int_equal(eventfmt_journal(&ev, "spin <- main", fields), 0);
	assert_string_equal(fields[0], "MESSAGE=nginx[4242] thread worker-3/4250 starved: wants "
	                    "1000‰, got 480‰ (threshold 800‰): spin <- main");
	eventfmt_journal_free(fields);

	ev.kind = "process";
	ev.threshold = 300;
	ev.details = "{\"process_usage\":1870,\"threads\":4,\"top\":[{\"tid\":1,\"usage\":9}]}";
	assert_string_equal(what_of(&ev), "process: 1870‰ > 300‰ in 4 threads, this one 480‰");
	ev.details = "{\"process_usage\":1870}";   /* no thread count: not made up */
	assert_string_equal(what_of(&ev), "process: 480‰, threshold 300‰");

	/* A kind of a later cpumond. */
	ev.kind = "stall";
	ev.details = NULL;
	assert_string_equal(what_of(&ev), "stall: 480‰, threshold 300‰");
	ev.details = "{\"state\":\"D\",\"still_ms\":601,\"wchan\":\"kernel_clone\"}";
	assert_string_equal(what_of(&ev), "stall: not run for 601 ms");
	ev.details = "{\"ended\":true,\"duration_ms\":3201}";
	assert_string_equal(what_of(&ev), "stall ended: ran again after 3201 ms");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_json_exact, setup_utc),
		cmocka_unit_test_setup(test_json_valid_whatever_the_bytes, setup_utc),
		cmocka_unit_test_setup(test_journal_fields, setup_utc),
		cmocka_unit_test_setup(test_stack_summary, setup_utc),
		cmocka_unit_test_setup(test_what, setup_utc),
	};

	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("eventfmt", tests, NULL, NULL);
}
