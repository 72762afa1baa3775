/* symbolize: the pure parts (the timeout, when servers are asked, where
 * debug files are looked for), and the real thing on this test binary:
 * its own DWARF names a function, its line and a call inlined into it;
 * each (build-id, address) is resolved once; a file whose build-id is not
 * the frame's is not used; a server that refuses is asked once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/elfinfo.h"
#include "stackdump/symbolize.h"
#include "tmpdir.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_timeout(void **state)
{
	(void)state;
	assert_int_equal(symbolize_timeout(NULL), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout(""), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout("10"), 10);
	assert_int_equal(symbolize_timeout("1"), 1);
	assert_int_equal(symbolize_timeout("3600"), 3600);
	assert_int_equal(symbolize_timeout("3601"), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout("0"), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout("-1"), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout("5s"), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout(" 5"), SYMBOLIZE_TIMEOUT_DEFAULT);
	assert_int_equal(symbolize_timeout("99999999999999999999"), SYMBOLIZE_TIMEOUT_DEFAULT);
}

static void test_uses_debuginfod(void **state)
{
	struct symbolize_options o = { 0 };

	(void)state;
	assert_false(symbolize_uses_debuginfod(&o));
	o.urls = "";
	assert_false(symbolize_uses_debuginfod(&o));
	o.urls = "  ";
	assert_false(symbolize_uses_debuginfod(&o));
	o.urls = "https://debuginfod.debian.net";
	assert_true(symbolize_uses_debuginfod(&o));
	o.offline = true;
	assert_false(symbolize_uses_debuginfod(&o));
}

/* symbolize_debug_paths' paths joined by spaces. */
static char *paths(const char *const *dirs, size_t ndirs, const char *build_id,
                   const char *module, const char *debuglink, size_t max)
{
	static char joined[4096];
	char *out[64];
	int n = symbolize_debug_paths(dirs, ndirs, build_id, module, debuglink, out, max);

	assert_true(n >= 0);
	joined[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (i)
			strcat(joined, " ");
		strcat(joined, out[i]);
		free(out[i]);
	}
	return joined;
}

static void test_debug_paths(void **state)
{
	const char *dirs[] = { "/d1", "/d2" };
	const char *dflt[] = { "/usr/lib/debug" };

	(void)state;
	/* By build-id in each directory, then by debuglink as gdb looks. */
	assert_string_equal(paths(dirs, 2, "abcdef01", "/usr/bin/x", "x.debug", 64),
	                    "/d1/.build-id/ab/cdef01.debug /d2/.build-id/ab/cdef01.debug "
	                    "/usr/lib/debug/.build-id/ab/cdef01.debug "
	                    "/usr/bin/x.debug /usr/bin/.debug/x.debug "
	                    "/d1/usr/bin/x.debug /d1/bin/x.debug /d1/x.debug "
	                    "/d2/usr/bin/x.debug /d2/bin/x.debug /d2/x.debug "
	                    "/usr/lib/debug/usr/bin/x.debug /usr/lib/debug/bin/x.debug "
	                    "/usr/lib/debug/x.debug");
	/* The default directory given again is searched once. */
	assert_string_equal(paths(dflt, 1, "abcd", NULL, NULL, 64),
	                    "/usr/lib/debug/.build-id/ab/cd.debug");
	/* A module in the root directory. */
	assert_string_equal(paths(NULL, 0, NULL, "/x", "x.dbg", 64),
	                    "/x.dbg /.debug/x.dbg /usr/lib/debug/x.dbg");
	assert_string_equal(paths(NULL, 0, NULL, "/opt//x", "x.dbg", 64),
	                    "/opt//x.dbg /opt//.debug/x.dbg /usr/lib/debug/opt//x.dbg "
	                    "/usr/lib/debug/x.dbg");
	/* No debuglink without an absolute module path, none with a '/'. */
	assert_string_equal(paths(NULL, 0, "abcd", "x", "x.debug", 64),
	                    "/usr/lib/debug/.build-id/ab/cd.debug");
	assert_string_equal(paths(NULL, 0, "abcd", "/bin/x", "../x.debug", 64),
	                    "/usr/lib/debug/.build-id/ab/cd.debug");
	/* A build-id too short to split gives no path; MAX cuts. */
	assert_string_equal(paths(NULL, 0, "a", NULL, NULL, 64), "");
	assert_string_equal(paths(dirs, 2, "abcd", "/bin/x", "x.debug", 2),
	                    "/d1/.build-id/ab/cd.debug /d2/.build-id/ab/cd.debug");
}

/* ---- on this binary ---- */

static unsigned where_line, inline_line, wrap_line, outer_line;

static __attribute__((noinline)) uintptr_t where(void)
{
	uintptr_t ra = (uintptr_t)__builtin_return_address(0);

	__asm__ volatile("" : "+r"(ra));
	return ra;
}

__attribute__((always_inline)) static inline uintptr_t inlined_step(void)
{
	uintptr_t ra = where(); inline_line = __LINE__;

	return ra ^ 1;
}

/* Two inlined calls deep: their callers are the DIEs that hold them,
 * not the abstract definitions dwarf_getscopes lists after each. */
__attribute__((always_inline)) static inline uintptr_t inlined_wrap(void)
{
	uintptr_t ra = inlined_step(); wrap_line = __LINE__;

	return ra ^ 2;
}

static __attribute__((noinline)) uintptr_t outer_call(void)
{
	uintptr_t ra = inlined_wrap(); outer_line = __LINE__;

	return ra ^ 1;
}

static __attribute__((noinline)) uintptr_t direct_call(void)
{
	uintptr_t ra = where(); where_line = __LINE__;

	return ra + 0;
}

static char self_path[4096], self_build_id[129];
static uintptr_t self_bias;

static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(uintptr_t *)arg = info->dlpi_addr;
	return 1;   /* the executable comes first */
}

/* This binary's path, build-id and load bias. */
static void self(void)
{
	struct elfinfo ei;
	ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
	int fd;

	assert_true(n > 0);
	self_path[n] = '\0';
	fd = open(self_path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), 0);
	close(fd);
	assert_true(strlen(ei.build_id) > 8);
	strcpy(self_build_id, ei.build_id);
	elfinfo_free(&ei);
	dl_iterate_phdr(first_object, &self_bias);
}

static char notes[2048];

static void take_note(const char *msg, void *arg)
{
	(void)arg;
	strncat(notes, msg, sizeof notes - strlen(notes) - 2);
	strcat(notes, "\n");
}

static int count_lines(const char *text)
{
	int n = 0;

	for (; *text; text++)
		n += *text == '\n';
	return n;
}

static struct symbolize *open_ctx(const char *urls, bool offline)
{
	struct symbolize_options o = { .urls = urls, .offline = offline, .note = take_note };
	struct symbolize *s;

	assert_int_equal(symbolize_open(&o, &s), 0);
	return s;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t a = s ? strlen(s) : 0, b = strlen(tail);

	return a >= b && strcmp(s + a - b, tail) == 0;
}

static void test_own_dwarf(void **state)
{
	struct symbolize *s = open_ctx(NULL, false);
	const struct symbolize_func *fn;
	const char *debug_file;
	uint64_t ra = direct_call() - self_bias;
	size_t n;

	(void)state;
	/* The call's line: a return address less one is in the call. */
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 1, &fn, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(fn[0].name, "direct_call");
	assert_true(ends_with(fn[0].file, "/test_symbolize.c"));
	assert_int_equal(fn[0].line, where_line);
	assert_false(fn[0].inlined);
	assert_true(fn[0].has_offset);
	assert_true(fn[0].offset > 0);
	assert_int_equal(symbolize_module_source(s, self_build_id, self_path, &debug_file),
	                 SYMBOLIZE_DWARF);
	assert_null(debug_file);
	symbolize_close(s);
}

static void test_inlined_chain(void **state)
{
	struct symbolize *s = open_ctx(NULL, false);
	const struct symbolize_func *fn;
	uint64_t ra = outer_call() - self_bias;
	size_t n;

	(void)state;
	/* gdb's order: the inlined call, then the function it is in, at the
	 * line that calls it. */
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 1, &fn, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(fn[0].name, "inlined_step");
	assert_true(fn[0].inlined);
	assert_int_equal(fn[0].line, inline_line);
	assert_false(fn[0].has_offset);
	assert_string_equal(fn[1].name, "inlined_wrap");
	assert_true(fn[1].inlined);
	assert_int_equal(fn[1].line, wrap_line);
	assert_string_equal(fn[2].name, "outer_call");
	assert_false(fn[2].inlined);
	assert_int_equal(fn[2].line, outer_line);
	assert_true(fn[2].has_offset);
	assert_true(ends_with(fn[2].file, "/test_symbolize.c"));
	symbolize_close(s);
}

static void test_stack(void **state)
{
	struct symbolize *s = open_ctx(NULL, false);
	uint64_t ra = outer_call() - self_bias;
	const struct symbolize_func *fn;
	struct stackdump_frame in[2] = {
		{ .module = (char *)"[vdso]", .build_id = (char *)"", .symbol = (char *)"stored",
		  .offset = 0x990, .func_offset = 0x980, .symbol_offset = 0x10 },
		{ .module = self_path, .build_id = self_build_id, .offset = ra, .symbol = NULL },
	};
	struct stackdump_stack st = { .frames = in, .nframes = 2, .hash = 0x1234, .truncated = true };
	struct stackdump_stack out;
	size_t n;

	(void)state;
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 1, &fn, &n), 0);
	in[1].func_offset = ra - fn[2].offset - 1;
	/* As instructions: frame 0, without a build-id, stays as it was;
	 * frame 1 is a caller, looked up in its call, and grows its inlined
	 * call.  The hash and the rest stay. */
	assert_int_equal(symbolize_stack(s, &st, SYMBOLIZE_INSTRUCTIONS, &out), 0);
	assert_int_equal(out.nframes, 2 + 2);
	assert_int_equal(out.hash, 0x1234);
	assert_true(out.truncated);
	assert_string_equal(out.frames[0].symbol, "stored");
	assert_int_equal(out.frames[0].symbol_offset, 0x10);
	assert_null(out.frames[0].file);
	assert_false(out.frames[0].inlined);
	assert_string_equal(out.frames[1].symbol, "inlined_step");
	assert_true(out.frames[1].inlined);
	assert_int_equal(out.frames[1].line, inline_line);
	assert_int_equal(out.frames[1].offset, ra);
	assert_string_equal(out.frames[2].symbol, "inlined_wrap");
	assert_true(out.frames[2].inlined);
	assert_string_equal(out.frames[3].symbol, "outer_call");
	assert_false(out.frames[3].inlined);
	assert_int_equal(out.frames[3].line, outer_line);
	assert_int_equal(out.frames[3].symbol_offset, fn[2].offset + 1);
	stackdump_stack_free(&out);
	/* As functions: one frame each, the function holding the code. */
	assert_int_equal(symbolize_stack(s, &st, SYMBOLIZE_FUNCTIONS, &out), 0);
	assert_int_equal(out.nframes, 2);
	assert_string_equal(out.frames[1].symbol, "outer_call");
	assert_false(out.frames[1].inlined);
	stackdump_stack_free(&out);
	/* A name stored with the frame is kept (the daemon's choice among
	 * aliases); its inlined calls are added all the same. */
	in[1].symbol = (char *)"outer_alias";
	in[1].symbol_offset = 7;
	assert_int_equal(symbolize_stack(s, &st, SYMBOLIZE_INSTRUCTIONS, &out), 0);
	assert_int_equal(out.nframes, 4);
	assert_string_equal(out.frames[1].symbol, "inlined_step");
	assert_string_equal(out.frames[3].symbol, "outer_alias");
	assert_int_equal(out.frames[3].symbol_offset, 7);
	assert_int_equal(out.frames[3].line, outer_line);
	stackdump_stack_free(&out);
	symbolize_close(s);
}

static void test_cache(void **state)
{
	struct symbolize *s = open_ctx(NULL, false);
	const struct symbolize_func *a, *b;
	struct symbolize_stats st;
	uint64_t ra = direct_call() - self_bias;
	size_t n;

	(void)state;
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 1, &a, &n), 0);
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 1, &b, &n), 0);
	assert_ptr_equal(a, b);
	symbolize_stats(s, &st);
	assert_int_equal(st.modules, 1);
	assert_int_equal(st.addrs, 1);
	/* Another address, and the same address of another build-id. */
	assert_int_equal(symbolize_addr(s, self_build_id, self_path, ra - 2, &b, &n), 0);
	assert_int_equal(symbolize_addr(s, "00ff00ff", "/nonexistent/x", ra - 1, &b, &n), 0);
	assert_int_equal(n, 0);
	symbolize_stats(s, &st);
	assert_int_equal(st.modules, 2);
	assert_int_equal(st.addrs, 3);
	assert_int_equal(st.requests, 0);
	/* Enough addresses to grow the table several times, each once. */
	for (uint64_t i = 0; i < 5000; i++)
		assert_int_equal(symbolize_addr(s, "00ff00ff", NULL, i, &b, &n), 0);
	for (uint64_t i = 0; i < 5000; i++)
		assert_int_equal(symbolize_addr(s, "00ff00ff", NULL, i, &b, &n), 0);
	symbolize_stats(s, &st);
	assert_int_equal(st.addrs, 5000 + 2 + (ra - 1 >= 5000));
	/* No build-id, or the mark of a frame no ELF file describes (a
	 * Python function, JIT code), or upper case: not looked up at all. */
	assert_int_equal(symbolize_addr(s, "", self_path, ra - 1, &b, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(symbolize_addr(s, "python", "/usr/lib/python3.11/json/decoder.py", 12,
	                                &b, &n), 0);
	assert_int_equal(symbolize_addr(s, "jit", "/tmp/perf-1.map", 12, &b, &n), 0);
	assert_int_equal(symbolize_addr(s, "00FF", NULL, 12, &b, &n), 0);
	assert_int_equal(symbolize_addr(s, "00f", NULL, 12, &b, &n), 0);
	symbolize_stats(s, &st);
	assert_int_equal(st.modules, 2);
	symbolize_close(s);
}

static int find_libc(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (!strstr(info->dlpi_name, "/libc.so."))
		return 0;
	snprintf(arg, 4096, "%s", info->dlpi_name);
	return 1;
}

/* The C library's own symbol of an exported function: without the
 * version a debug file's .symtab spells it with (libc6-dbg:
 * "__libc_start_main@@GLIBC_2.34"). */
static void test_unversioned(void **state)
{
	char path[4096] = "", *bias_name = path;
	struct symbolize *s = open_ctx(NULL, true);
	const struct symbolize_func *fn;
	struct link_map *lm = NULL;
	struct elfinfo ei;
	void *h, *sym;
	size_t n;
	int fd;

	(void)state;
	dl_iterate_phdr(find_libc, path);
	assert_true(path[0]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), 0);
	close(fd);
	h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(h);
	sym = dlsym(h, "__libc_start_main");
	assert_int_equal(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
	assert_int_equal(symbolize_addr(s, ei.build_id, bias_name,
	                                (uint64_t)(uintptr_t)sym - lm->l_addr, &fn, &n), 0);
	assert_true(n >= 1);
	assert_string_equal(fn[n - 1].name, "__libc_start_main");
	dlclose(h);
	elfinfo_free(&ei);
	symbolize_close(s);
}

static void test_wrong_build_id(void **state)
{
	struct symbolize *s = open_ctx(NULL, false);
	const struct symbolize_func *fn;
	const char *debug_file;
	uint64_t ra = direct_call() - self_bias;
	size_t n;

	(void)state;
	/* The file at the path is another build: not used. */
	assert_int_equal(symbolize_addr(s, "0123456789abcdef0123456789abcdef01234567", self_path,
	                                ra - 1, &fn, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(symbolize_module_source(s, "0123456789abcdef0123456789abcdef01234567",
	                                         self_path, &debug_file), SYMBOLIZE_NONE);
	symbolize_close(s);
}

/* A module path that is now a FIFO (a watched process may put one there):
 * not opened for reading, so the reader does not wait for a writer. */
static void test_fifo_module(void **state)
{
	char dir[64], fifo[96];
	struct symbolize *s = open_ctx(NULL, true);
	const struct symbolize_func *fn;
	size_t n;

	(void)state;
	assert_int_equal(tmpdir_make(dir, sizeof dir, "test_symbolize"), 0);
	snprintf(fifo, sizeof fifo, "%s/lib.so", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	alarm(20);   /* a blocking open fails the test instead of hanging it */
	assert_int_equal(symbolize_addr(s, "00ff00ff00ff", fifo, 0x1000, &fn, &n), 0);
	alarm(0);
	assert_int_equal(n, 0);
	symbolize_close(s);
	tmpdir_remove(dir);
}

static void test_refusing_server(void **state)
{
	char dir[64];
	struct symbolize *s;
	struct symbolize_stats st;
	const struct symbolize_func *fn;
	size_t n;

	(void)state;
	assert_int_equal(tmpdir_make(dir, sizeof dir, "test_symbolize"), 0);
	setenv("DEBUGINFOD_CACHE_PATH", dir, 1);
	/* Offline: no request whatever the environment says. */
	s = open_ctx("http://127.0.0.1:1", true);
	assert_int_equal(symbolize_addr(s, "00ff00ff00ff", NULL, 0x1000, &fn, &n), 0);
	symbolize_stats(s, &st);
	assert_int_equal(st.requests, 0);
	symbolize_close(s);
	/* Nothing listens on port 1: refused at once, said once, and no
	 * other build-id is asked for. */
	notes[0] = '\0';
	s = open_ctx("http://127.0.0.1:1", false);
	assert_int_equal(symbolize_addr(s, "00ff00ff00ff", NULL, 0x1000, &fn, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(symbolize_addr(s, "11ff00ff00ff", NULL, 0x1000, &fn, &n), 0);
	symbolize_stats(s, &st);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.modules, 2);
	assert_non_null(strstr(notes, "debuginfod http://127.0.0.1:1: "));
	assert_non_null(strstr(notes, "asking no server again in this run"));
	assert_int_equal(count_lines(notes), 1);
	symbolize_close(s);
	unsetenv("DEBUGINFOD_CACHE_PATH");
	tmpdir_remove(dir);
}

static int setup(void **state)
{
	(void)state;
	self();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_uses_debuginfod),
		cmocka_unit_test(test_debug_paths),
		cmocka_unit_test(test_own_dwarf),
		cmocka_unit_test(test_inlined_chain),
		cmocka_unit_test(test_stack),
		cmocka_unit_test(test_cache),
		cmocka_unit_test(test_unversioned),
		cmocka_unit_test(test_wrong_build_id),
		cmocka_unit_test(test_fifo_module),
		cmocka_unit_test(test_refusing_server),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("symbolize", tests, setup, NULL);
}
