/* stall: the rules of an idle wait, the names, the owner chain, the
 * per-thread state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "cpumond/stall.h"

static struct procfs_syscall blocked(long nr, uint64_t a0, uint64_t a1, uint64_t a2)
{
	struct procfs_syscall sc = { .nr = nr, .args = { a0, a1, a2 }, .sp = 0x7ffd0000,
	                             .pc = 0x7f0000001000 };
	return sc;
}

static void test_parsed_lines_classify(void **state)
{
	/* Lines read here from the targets (tests/targets/stallcases.c). */
	static const struct {
		const char *line;
		char state;
		const char *fd;
		enum stall_verdict want;
	} cases[] = {
		/* a mutex waiter: futex(&m, FUTEX_WAIT_PRIVATE, 2) */
		{ "202 0x55d0c4a4e040 0x80 0x2 0x0 0x0 0x0 0x7f3a4bffed08 0x7f3a4c89e8b9\n", 'S', NULL,
		  STALL_LOCK },
		/* a condvar waiter: FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME */
		{ "202 0x55d0c4a4e0a8 0x189 0x0 0x0 0x0 0xffffffff 0x7f3a4a7fbd40 0x7f3a4c89e8b9\n", 'S',
		  NULL, STALL_IDLE },
		/* epoll_wait, nanosleep (clock_nanosleep) */
		{ "232 0x3 0x7f3a49ffad80 0x8 0xffffffff 0x0 0x0 0x7f3a49ffad58 0x7f3a4c92a0e6\n", 'S', NULL,
		  STALL_IDLE },
		{ "230 0x0 0x0 0x7f3a497f9de0 0x7f3a497f9de0 0x0 0x0 0x7f3a497f9d98 0x7f3a4c8e67f8\n", 'S',
		  NULL, STALL_IDLE },
		/* read of a pipe and of a regular file */
		{ "0 0x5 0x7f3a48ff8d60 0x1 0x0 0x0 0x0 0x7f3a48ff8d38 0x7f3a4c8f97dc\n", 'S',
		  "pipe:[88231]", STALL_IDLE },
		{ "0 0x5 0x7f3a48ff8d60 0x1 0x0 0x0 0x0 0x7f3a48ff8d38 0x7f3a4c8f97dc\n", 'S',
		  "/mnt/fuse/x", STALL_STUCK },
		{ "0 0x5 0x7f3a48ff8d60 0x1 0x0 0x0 0x0 0x7f3a48ff8d38 0x7f3a4c8f97dc\n", 'S', NULL,
		  STALL_STUCK },
		/* a vfork parent, in D */
		{ "58 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc1f9b2d28 0x7f3a4c8d2b38\n", 'D', NULL, STALL_STUCK },
		/* a page fault */
		{ "-1 0x7ffc1f9b2d28 0x55d0c4a4a1b2\n", 'S', NULL, STALL_STUCK },
		/* flock */
		{ "73 0x3 0x2 0x0 0x0 0x0 0x0 0x7ffc1f9b2d28 0x7f3a4c8d2b38\n", 'S', NULL, STALL_STUCK },
		/* runnable, stopped */
		{ "running\n", 'R', NULL, STALL_IGNORE },
		{ "running\n", 'S', NULL, STALL_IGNORE },
		{ "230 0x0 0x0 0x7f3a497f9de0 0x7f3a497f9de0 0x0 0x0 0x7f3a497f9d98 0x7f3a4c8e67f8\n", 't',
		  NULL, STALL_IGNORE },
	};
	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct procfs_syscall sc;

		assert_int_equal(procfs_parse_syscall(cases[i].line, &sc), 0);
		if (stall_classify(cases[i].state, &sc, cases[i].fd) != cases[i].want)
			fail_msg("case %zu: %s", i, cases[i].line);
	}
}

static void test_lock_wait_owner_address(void **state)
{
	struct procfs_syscall sc = blocked(SYS_futex, 0x1000, FUTEX_WAIT_PRIVATE, 2);
	uint64_t addr = 0;
	bool pi = true;
	(void)state;
	assert_true(stall_lock_wait(&sc, &addr, &pi));
	assert_int_equal(addr, 0x1008);
	assert_false(pi);
	sc = blocked(SYS_futex, 0x1000, FUTEX_WAIT, 2);        /* a process-shared mutex */
	assert_true(stall_lock_wait(&sc, &addr, &pi));
	sc = blocked(SYS_futex, 0x2000, FUTEX_LOCK_PI_PRIVATE, 0);
	assert_true(stall_lock_wait(&sc, &addr, &pi));
	assert_int_equal(addr, 0x2000);
	assert_true(pi);
	sc = blocked(SYS_futex, 0x1000, FUTEX_WAIT_PRIVATE, 1);        /* not contended: not glibc's */
	assert_false(stall_lock_wait(&sc, &addr, &pi));
	sc = blocked(SYS_futex, 0x1000, FUTEX_WAIT_BITSET_PRIVATE, 2);  /* a condvar's */
	assert_false(stall_lock_wait(&sc, &addr, &pi));
	assert_int_equal(stall_owner_from_word(0x80001234u, true), 0x1234);
	assert_int_equal(stall_owner_from_word(4242, false), 4242);
}

static void test_names(void **state)
{
	char buf[64];
	(void)state;
	assert_string_equal(stall_syscall_name(SYS_futex), "futex");
	assert_string_equal(stall_syscall_name(SYS_clock_nanosleep), "clock_nanosleep");
	assert_null(stall_syscall_name(100000));
	assert_string_equal(stall_futex_op_name(FUTEX_WAIT_PRIVATE, buf, sizeof buf),
	                    "FUTEX_WAIT_PRIVATE");
	assert_string_equal(stall_futex_op_name(0x189, buf, sizeof buf),
	                    "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME");
	assert_null(stall_futex_op_name(99, buf, sizeof buf));
	assert_null(stall_futex_op_name(0x10000, buf, sizeof buf));
	{
		struct procfs_syscall sc = blocked(SYS_read, 5, 0, 0);
		assert_true(stall_wants_fd(&sc));
		sc = blocked(SYS_futex, 5, 0, 0);
		assert_false(stall_wants_fd(&sc));
	}
}

/* Owners as a table: owners[tid] waits on the lock of that thread. */
static pid_t table_owner(pid_t tid, void *arg)
{
	const pid_t *owners = arg;

	return tid > 0 && tid < 16 ? owners[tid] : 0;
}

static void test_owner_chain(void **state)
{
	pid_t chain[STALL_OWNER_DEPTH];
	int from;
	(void)state;
	{
		pid_t owners[16] = { [1] = 2 };     /* 1 waits on 2, which sleeps */
		assert_int_equal(stall_owner_chain(1, table_owner, owners, chain, &from), 1);
		assert_int_equal(chain[0], 2);
		assert_int_equal(from, -2);
	}
	{
		pid_t owners[16] = { [1] = 2, [2] = 1 };   /* a lock cycle */
		assert_int_equal(stall_owner_chain(1, table_owner, owners, chain, &from), 1);
		assert_int_equal(chain[0], 2);
		assert_int_equal(from, -1);
	}
	{
		pid_t owners[16] = { [1] = 2, [2] = 3, [3] = 2 };   /* waits into a cycle */
		assert_int_equal(stall_owner_chain(1, table_owner, owners, chain, &from), 2);
		assert_int_equal(from, 0);
	}
	{
		pid_t owners[16] = { [1] = 2, [2] = 3, [3] = 4, [4] = 5, [5] = 6, [6] = 7 };
		assert_int_equal(stall_owner_chain(1, table_owner, owners, chain, &from),
		                 STALL_OWNER_DEPTH);
		assert_int_equal(from, -2);
	}
}

static void test_state_check_once_per_still_period(void **state)
{
	struct stall *st = stall_new();
	uint64_t since;
	(void)state;
	assert_non_null(st);
	assert_int_equal(stall_observe(st, 7, false, 0, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, true, 200, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, true, 400, 400, &since), STALL_CHECK);
	assert_int_equal(since, 0);
	assert_false(stall_checked(st, 7, false, 400, 60000));        /* idle */
	assert_int_equal(stall_observe(st, 7, true, 600, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, false, 800, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, true, 1000, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, true, 1200, 400, &since), STALL_CHECK);
	assert_int_equal(since, 800);
	assert_true(stall_checked(st, 7, true, 1200, 60000));          /* an event */
	assert_int_equal(stall_observe(st, 7, true, 1400, 400, &since), STALL_NOTHING);
	assert_int_equal(stall_observe(st, 7, false, 5000, 400, &since), STALL_ENDED);
	assert_int_equal(since, 800);
	/* Stalled again within the cooldown: checked, no event, no end. */
	assert_int_equal(stall_observe(st, 7, true, 5400, 400, &since), STALL_CHECK);
	assert_false(stall_checked(st, 7, true, 5400, 60000));
	assert_int_equal(stall_observe(st, 7, false, 6000, 400, &since), STALL_NOTHING);
	stall_free(st);
}

/* consecutive = N: still for stall_after at N cycles in a row. */
static void test_due_after_consecutive(void **state)
{
	(void)state;
	assert_int_equal(stall_due_ms(600, 1, 300), 600);
	assert_int_equal(stall_due_ms(600, 0, 300), 600);
	assert_int_equal(stall_due_ms(600, 3, 300), 1200);
	assert_int_equal(stall_due_ms(10000, 2, 3000), 13000);
}

static void test_sweep_forgets_exited(void **state)
{
	struct stall *st = stall_new();
	uint64_t since;
	(void)state;
	for (uint64_t k = 1; k <= 1000; k++)
		stall_observe(st, k, true, 0, 400, &since);
	assert_int_equal(stall_sweep(st), 1000);
	for (uint64_t k = 1; k <= 10; k++)
		stall_observe(st, k, true, 100, 400, &since);
	assert_int_equal(stall_sweep(st), 10);
	/* Kept threads keep their state: still since 0. */
	assert_int_equal(stall_observe(st, 3, true, 400, 400, &since), STALL_CHECK);
	assert_int_equal(since, 0);
	/* A thread forgotten starts again. */
	assert_int_equal(stall_observe(st, 500, true, 400, 400, &since), STALL_NOTHING);
	assert_int_equal(since, 400);
	stall_free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parsed_lines_classify),
		cmocka_unit_test(test_lock_wait_owner_address),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_owner_chain),
		cmocka_unit_test(test_due_after_consecutive),
		cmocka_unit_test(test_state_check_once_per_still_period),
		cmocka_unit_test(test_sweep_forgets_exited),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
