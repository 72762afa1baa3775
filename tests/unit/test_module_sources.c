/* stackdump_module_sources: where a module's names and unwind tables come
 * from, on the test targets: hotchain as built (.symtab, .eh_frame), a
 * stripped copy with and without its debug file under a debug directory
 * of the test's own, a debug file of another build at its build-id's path,
 * the executable of a running process, and the fuzz corpus's images with
 * a .debug_frame stored plain and compressed.  Needs objcopy (binutils). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "stackdump/stackdump.h"
#include "tmpdir.h"

/* No pid is ever this large: pid_max is at most 2^22. */
#define NO_PID 0x7ffffff0

static struct {
	char dir[64];
	char hotchain[PATH_MAX];    /* as built */
	char build_id[129];
	/* Below dir, which mkdtemp makes 30 bytes long: */
	char stripped[128];         /* objcopy --strip-all of hotchain */
	char debug_dir[128];        /* .build-id/NN/REST.debug of hotchain */
	char other_dir[128];        /* the same path holding stackcases' debug file */
	char empty_dir[128];
	char debug_file[512];
} t;

__attribute__((format(printf, 1, 2)))
static int run(const char *fmt, ...)
{
	char cmd[4 * PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	return system(cmd);
}

static int setup(void **state)
{
	const char *hot = getenv("HOTCHAIN") ? getenv("HOTCHAIN") : "build/tests/hotchain";
	const char *cases = getenv("STACKCASES") ? getenv("STACKCASES") : "build/tests/stackcases";
	char other[PATH_MAX];
	struct stackdump_sources src;

	(void)state;
	if (!realpath(hot, t.hotchain) || !realpath(cases, other) ||
	    tmpdir_make(t.dir, sizeof t.dir, "test_module_sources") < 0)
		return -1;
	if (stackdump_module_sources(getpid(), t.hotchain, NULL, &src) < 0 ||
	    strlen(src.build_id) < 4)
		return -1;
	snprintf(t.build_id, sizeof t.build_id, "%s", src.build_id);
	snprintf(t.stripped, sizeof t.stripped, "%s/hotchain-stripped", t.dir);
	snprintf(t.debug_dir, sizeof t.debug_dir, "%s/debug", t.dir);
	snprintf(t.other_dir, sizeof t.other_dir, "%s/other", t.dir);
	snprintf(t.empty_dir, sizeof t.empty_dir, "%s/empty", t.dir);
	snprintf(t.debug_file, sizeof t.debug_file, "%s/.build-id/%.2s/%.126s.debug", t.debug_dir,
	         t.build_id, t.build_id + 2);
	if (run("objcopy --strip-all '%s' '%s'", t.hotchain, t.stripped) != 0 ||
	    run("mkdir -p '%s/.build-id/%.2s' '%s/.build-id/%.2s' '%s'", t.debug_dir, t.build_id,
	        t.other_dir, t.build_id, t.empty_dir) != 0 ||
	    run("objcopy --only-keep-debug '%s' '%s'", t.hotchain, t.debug_file) != 0 ||
	    run("objcopy --only-keep-debug '%s' '%s/.build-id/%.2s/%s.debug'", other, t.other_dir,
	        t.build_id, t.build_id + 2) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (t.dir[0])
		tmpdir_remove(t.dir);
	return 0;
}

static void test_as_built(void **state)
{
	struct stackdump_sources src;
	(void)state;
	assert_int_equal(stackdump_module_sources(getpid(), t.hotchain, t.debug_dir, &src), 0);
	assert_string_equal(src.build_id, t.build_id);
	assert_string_equal(src.symbols, ".symtab");
	assert_string_equal(src.debug_file, "");   /* not looked for: it has .symtab */
	assert_true(src.eh_frame);
	assert_false(src.debug_frame);
	assert_string_equal(src.refused, "");
}

static void test_stripped(void **state)
{
	struct stackdump_sources src;
	(void)state;
	/* No debug file where it is looked for: no names of its own. */
	assert_int_equal(stackdump_module_sources(getpid(), t.stripped, t.empty_dir, &src), 0);
	assert_string_equal(src.build_id, t.build_id);
	assert_string_not_equal(src.symbols, ".symtab");
	assert_string_not_equal(src.symbols, "debug file");
	assert_string_equal(src.debug_file, "");
	assert_true(src.eh_frame);                  /* strip keeps what unwinding needs */

	assert_int_equal(stackdump_module_sources(getpid(), t.stripped, t.debug_dir, &src), 0);
	assert_string_equal(src.symbols, "debug file");
	assert_string_equal(src.debug_file, t.debug_file);
	assert_false(src.debug_file_ours);          /* found in the process's own root */
	assert_true(src.eh_frame);
}

/* A debug file at the build-id's path is taken only when its build-id is
 * the module's: the check doctor used to lack. */
static void test_other_build(void **state)
{
	struct stackdump_sources src;
	(void)state;
	assert_int_equal(stackdump_module_sources(getpid(), t.stripped, t.other_dir, &src), 0);
	assert_string_not_equal(src.symbols, "debug file");
	assert_string_equal(src.debug_file, "");
}

/* As doctor asks: the executable of a running process, through its exe. */
static void test_process_executable(void **state)
{
	struct stackdump_sources src;
	char exe[PATH_MAX], link[64];
	pid_t child;
	int spins = 0;
	(void)state;
	assert_int_equal(stackdump_module_sources(getpid(), NULL, t.empty_dir, &src), 0);
	assert_string_equal(src.symbols, ".symtab");   /* this test, built with -g */
	assert_true(src.eh_frame);

	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execl(t.stripped, t.stripped, "--threads", "1", "--hot", "0", "--timeout", "30",
		      (char *)NULL);
		_exit(127);
	}
	/* The exec is done once its exe is the copy (5 s at most). */
	snprintf(link, sizeof link, "/proc/%d/exe", (int)child);
	for (;;) {
		ssize_t n = readlink(link, exe, sizeof exe - 1);

		if (n > 0 && (exe[n] = '\0', strcmp(exe, t.stripped) == 0))
			break;
		assert_true(++spins < 5000);
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	assert_int_equal(stackdump_module_sources(child, NULL, t.debug_dir, &src), 0);
	assert_string_equal(src.symbols, "debug file");
	assert_string_equal(src.debug_file, t.debug_file);
	assert_int_equal(stackdump_module_sources(child, NULL, t.other_dir, &src), 0);
	assert_string_not_equal(src.symbols, "debug file");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* The corpus's small images: a .debug_frame as it is, compressed with
 * zlib, in the .zdebug_ form; MiniDebugInfo names. */
static void test_debug_frame(void **state)
{
	static const struct { const char *name; bool compressed; } seeds[] = {
		{ "seed-debug-frame-plain", false },
		{ "seed-debug-frame-zlib", true },
		{ "seed-debug-frame-zstd", true },
		{ "seed-zdebug-frame", true },
	};
	struct stackdump_sources src;
	char rel[128], path[PATH_MAX];
	(void)state;
	for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
		snprintf(rel, sizeof rel, "tests/fuzz/corpus/elf/%s", seeds[i].name);
		assert_non_null(realpath(rel, path));
		assert_int_equal(stackdump_module_sources(getpid(), path, t.empty_dir, &src), 0);
		assert_true(src.debug_frame);
		assert_int_equal(src.debug_frame_compressed, seeds[i].compressed);
		assert_false(src.eh_frame);
		assert_string_equal(src.refused, "");
	}
	assert_non_null(realpath("tests/fuzz/corpus/elf/seed-zlib-bomb", path));
	assert_int_equal(stackdump_module_sources(getpid(), path, t.empty_dir, &src), 0);
	assert_false(src.debug_frame);
	assert_non_null(strstr(src.refused, ".debug_frame: declares 1073741824 bytes"));
	assert_non_null(realpath("tests/fuzz/corpus/elf/seed-minidebuginfo", path));
	assert_int_equal(stackdump_module_sources(getpid(), path, t.empty_dir, &src), 0);
	assert_string_equal(src.symbols, ".gnu_debugdata");
}

static void test_errors(void **state)
{
	struct stackdump_sources src;
	char path[PATH_MAX];
	(void)state;
	snprintf(path, sizeof path, "%s/no-such-file", t.dir);
	assert_int_equal(stackdump_module_sources(getpid(), path, NULL, &src), -ENOENT);
	assert_string_equal(src.symbols, "");
	assert_string_equal(src.build_id, "");
	assert_int_equal(stackdump_module_sources(getpid(), t.empty_dir, NULL, &src), -ENOEXEC);
	assert_int_equal(stackdump_module_sources(getpid(), "relative/path", NULL, &src), -EINVAL);
	assert_int_equal(stackdump_module_sources(NO_PID, NULL, NULL, &src), -ESRCH);
	snprintf(path, sizeof path, "%s/text", t.dir);
	assert_int_equal(run("echo not an ELF file >'%s'", path), 0);
	assert_int_equal(stackdump_module_sources(getpid(), path, NULL, &src), -ENOEXEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_as_built),
		cmocka_unit_test(test_stripped),
		cmocka_unit_test(test_other_build),
		cmocka_unit_test(test_process_executable),
		cmocka_unit_test(test_debug_frame),
		cmocka_unit_test(test_errors),
	};
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("module_sources", tests, setup, teardown);
}
