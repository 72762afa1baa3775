/* A fixed event (two frames, one unnamed; a fixed time) and the capture of
 * what a formatter writes for it.  Included by the tests of the event's
 * forms: tail's human one (test_tail.c), JSON and the journal's
 * (test_eventfmt.c).  Include after <cmocka.h>. */
#ifndef CPUMOND_TEST_EVENT_FIXTURE_H
#define CPUMOND_TEST_EVENT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpumond/store.h"

static inline void set_tz(const char *tz)
{
	assert_int_equal(setenv("TZ", tz, 1), 0);
	tzset();
}

static inline int setup_utc(void **state)
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

static inline struct store_event fixed_event(void)
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
static inline char *format(void (*fn)(const struct store_event *, FILE *),
                           const struct store_event *ev)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	fn(ev, f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

#endif
