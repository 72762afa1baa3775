/* Unit tests of stackdump/targetfs.c: the path of a mapped file in the
 * target's root, the verdict on a file reached by path, the build-id of a
 * mapping's first page; and, live, a chrooted child whose files are opened
 * as it sees them, and a deleted executable, by a process holding
 * CAP_SYS_PTRACE alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stackdump/elfinfo.h"
#include "stackdump/procmaps.h"
#include "stackdump/targetfs.h"
#include "tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- pure ---- */

static void maps_path_is(const char *root, const char *path, int want, const char *rel)
{
	char buf[64];

	assert_int_equal(targetfs_maps_path(root, path, buf, sizeof(buf)), want);
	if (want == 0)
		assert_string_equal(buf, rel);
}

static void test_maps_path(void **state)
{
	(void)state;
	maps_path_is("/", "/usr/bin/python3", 0, "usr/bin/python3");
	maps_path_is("/", "//usr/bin/python3", 0, "usr/bin/python3");
	/* A chrooted target's maps show its files by our path. */
	maps_path_is("/srv/jail", "/srv/jail/usr/bin/x", 0, "usr/bin/x");
	maps_path_is("/srv/jail/", "/srv/jail/usr/bin/x", 0, "usr/bin/x");
	maps_path_is("/srv/jail", "/srv/jailbreak/usr/bin/x", -ENOENT, NULL);
	maps_path_is("/srv/jail", "/usr/bin/x", -ENOENT, NULL);   /* mapped before the chroot */
	maps_path_is("/srv/jail", "/srv/jail", -ENOENT, NULL);
	maps_path_is("/srv/jail", "/srv/jail/", -ENOENT, NULL);
	maps_path_is("/", "[vdso]", -ENOENT, NULL);
	maps_path_is("", "/usr/bin/x", -ENOENT, NULL);
	/* maps writes a newline as \012; other bytes as they are. */
	maps_path_is("/", "/tmp/a\\012b\\01\\x", 0, "tmp/a\nb\\01\\x");
	maps_path_is("/", "/tmp/\\012", 0, "tmp/\n");
	/* 63 bytes and the NUL fit; 64 do not. */
	char path[80] = "/";
	memset(path + 1, 'a', 63);
	char buf[64];
	assert_int_equal(targetfs_maps_path("/", path, buf, sizeof(buf)), 0);
	assert_int_equal(strlen(buf), 63);
	path[64] = 'a';
	path[65] = '\0';
	assert_int_equal(targetfs_maps_path("/", path, buf, sizeof(buf)), -ENAMETOOLONG);
}

static void test_same_inode(void **state)
{
	(void)state;
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_dev = makedev(0x103, 0x12345);
	st.st_ino = 77;
	assert_true(targetfs_same_inode(&st, 0x103, 0x12345, 77));
	assert_false(targetfs_same_inode(&st, 0x103, 0x12345, 78));
	assert_false(targetfs_same_inode(&st, 0x103, 0x12346, 77));
	assert_false(targetfs_same_inode(&st, 0x104, 0x12345, 77));
	/* overlayfs before Linux 6.8: maps showed the lower layer's device. */
	assert_false(targetfs_same_inode(&st, 0xfe, 0x01, 77));
}

static void test_verdict(void **state)
{
	(void)state;
	static const struct {
		bool exact;
		const char *file, *mem;
		int want;
	} cases[] = {
		{ true, "", "", 0 },                 /* the inode itself, no build-id */
		{ true, "ab12", "", 0 },             /* no note in the first page */
		{ true, "", "ab12", 0 },
		{ true, "ab12", "ab12", 0 },
		{ true, "ab12", "cd34", -ESTALE },   /* rewritten in place since */
		{ false, "ab12", "ab12", 0 },        /* other numbers, the same build */
		{ false, "ab12", "cd34", -ESTALE },  /* another file at the path */
		{ false, "", "", -ESTALE },          /* nothing proves it */
		{ false, "ab12", "", -ESTALE },
		{ false, "", "ab12", -ESTALE },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = targetfs_verdict(cases[i].exact, cases[i].file, cases[i].mem);
		if (r != cases[i].want)
			fail_msg("case %zu: %d, want %d", i, r, cases[i].want);
	}
}

/* The build-id of our own executable, from the whole file. */
static void own_build_id(char *out, size_t size)
{
	struct elfinfo ei;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(elfinfo_read_fd(fd, &ei), 0);
	close(fd);
	assert_true(strlen(ei.build_id) >= 16);
	snprintf(out, size, "%s", ei.build_id);
	elfinfo_free(&ei);
}

static void test_image_build_id(void **state)
{
	(void)state;
	unsigned char head[4096];
	char want[129], got[129];
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
	close(fd);
	own_build_id(want, sizeof(want));
	assert_int_equal(targetfs_image_build_id(head, sizeof(head), got, sizeof(got)), 0);
	assert_string_equal(got, want);
	/* Too short for the program headers, or too small a buffer. */
	assert_int_equal(targetfs_image_build_id(head, 64, got, sizeof(got)), -ENOENT);
	assert_string_equal(got, "");
	assert_int_equal(targetfs_image_build_id(head, sizeof(head), got, 8), -ENOENT);
	/* Not an ELF image. */
	memset(head, 0x41, sizeof(head));
	assert_int_equal(targetfs_image_build_id(head, sizeof(head), got, sizeof(got)), -ENOENT);
}

/* ---- live ---- */

/* Our own executable's mapping at offset 0, and its code mapping. */
static void own_mappings(struct procmaps *m, size_t *code)
{
	char exe[512];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	assert_true(n > 0);
	exe[n] = '\0';
	assert_int_equal(procmaps_read(getpid(), m), 0);
	for (size_t i = 0; i < m->n; i++) {
		if (strcmp(m->v[i].path, exe) == 0 && m->v[i].perms[2] == 'x') {
			*code = i;
			return;
		}
	}
	fail_msg("no code mapping of %s", exe);
}

static void test_live_self(void **state)
{
	(void)state;
	struct procmaps m;
	size_t i = 0;
	char want[129], got[129];
	bool exact = false;

	own_build_id(want, sizeof(want));
	own_mappings(&m, &i);
	/* From the code mapping back to the file's first page. */
	assert_int_equal(targetfs_mapped_build_id(getpid(), &m, i, got, sizeof(got)), 0);
	assert_string_equal(got, want);
	int fd = targetfs_open_mapped(getpid(), &m.v[i], &exact);
	assert_true(fd >= 0);
	assert_true(exact);
	close(fd);
	/* Not absolute; not there. */
	assert_int_equal(targetfs_open(getpid(), "etc/passwd"), -EINVAL);
	assert_int_equal(targetfs_open(getpid(), "/nonexistent/x"), -ENOENT);
	assert_int_equal(targetfs_open(getpid(), "/proc/self"), -ENOEXEC);
	procmaps_free(&m);
}

/* Leaves only CAP_SYS_PTRACE in our sets, as the unit gives cpumond: no
 * CAP_SYS_ADMIN, so /proc/PID/map_files is closed to us. */
static int ptrace_cap_only(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	d[0].effective = d[0].permitted = 1u << CAP_SYS_PTRACE;
	return (int)syscall(SYS_capset, &h, d);
}

struct jail {
	char dir[64];
	pid_t pid;
};

/* A child chrooted to a scratch directory holding etc/passwd ("inside"),
 * a link /link to /etc/passwd, a FIFO /fifo and lib.bin, which it maps
 * (read-only, as code is) and then waits to be killed. */
static void jail_start(struct jail *j)
{
	char path[128];
	int ready[2];

	assert_int_equal(tmpdir_make(j->dir, sizeof(j->dir), "test_targetfs"), 0);
	snprintf(path, sizeof(path), "%s/etc", j->dir);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/etc/passwd", j->dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("inside\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/link", j->dir);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	snprintf(path, sizeof(path), "%s/fifo", j->dir);
	assert_int_equal(mkfifo(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/lib.bin", j->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("some bytes to map\n", f);
	fclose(f);
	assert_int_equal(pipe(ready), 0);
	j->pid = fork();
	assert_true(j->pid >= 0);
	if (j->pid == 0) {
		close(ready[0]);
		if (chroot(j->dir) < 0 || chdir("/") < 0)
			_exit(1);
		int fd = open("/lib.bin", O_RDONLY);
		if (fd < 0 || mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED)
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
}

static void jail_stop(struct jail *j)
{
	kill(j->pid, SIGKILL);
	waitpid(j->pid, NULL, 0);
	tmpdir_remove(j->dir);
}

/* What the checker found, for the parent's asserts. */
struct jail_seen {
	int link;          /* bytes read through /link, or -errno */
	char text[16];
	int fifo;          /* targetfs_open of /fifo */
	int mapped;        /* targetfs_open_mapped of lib.bin: 0 or -errno */
	bool exact;
	int map_files;     /* our open of its map_files link: 0 or -errno */
};

/* Runs in a child with CAP_SYS_PTRACE alone. */
static void jail_check(const struct jail *j, struct jail_seen *s)
{
	struct procmaps m;
	char want[128];

	memset(s, 0, sizeof(*s));
	int fd = targetfs_open(j->pid, "/link");
	s->link = fd < 0 ? fd : (int)read(fd, s->text, sizeof(s->text) - 1);
	if (fd >= 0)
		close(fd);
	fd = targetfs_open(j->pid, "/fifo");
	s->fifo = fd < 0 ? fd : 0;
	if (fd >= 0)
		close(fd);
	s->mapped = -ENOENT;
	snprintf(want, sizeof(want), "%s/lib.bin", j->dir);
	if (procmaps_read(j->pid, &m) < 0)
		return;
	for (size_t i = 0; i < m.n; i++) {
		const struct procmaps_entry *e = &m.v[i];
		if (strcmp(e->path, want) != 0)
			continue;
		char link[96];
		snprintf(link, sizeof(link), "/proc/%d/map_files/%lx-%lx", (int)j->pid,
		         (unsigned long)e->start, (unsigned long)e->end);
		fd = open(link, O_RDONLY);
		s->map_files = fd < 0 ? -errno : 0;
		if (fd >= 0)
			close(fd);
		fd = targetfs_open_mapped(j->pid, e, &s->exact);
		s->mapped = fd < 0 ? fd : 0;
		if (fd >= 0)
			close(fd);
	}
	procmaps_free(&m);
}

static void test_live_jail(void **state)
{
	(void)state;
	struct jail j;
	struct jail_seen *s;

	if (geteuid() != 0)
		skip();    /* chroot needs root */
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(s != MAP_FAILED);
	jail_start(&j);
	pid_t checker = fork();
	assert_true(checker >= 0);
	if (checker == 0) {
		if (ptrace_cap_only() < 0)
			_exit(2);
		jail_check(&j, s);
		_exit(0);
	}
	int status = -1;
	waitpid(checker, &status, 0);
	jail_stop(&j);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The link to /etc/passwd is the jail's file, not ours. */
	assert_int_equal(s->link, 7);
	assert_string_equal(s->text, "inside\n");
	assert_int_equal(s->fifo, -ENOEXEC);
	/* map_files is closed to CAP_SYS_PTRACE; the path in the jail's root,
	 * with the jail's directory taken off the maps path, is the inode. */
	assert_int_equal(s->map_files, -EPERM);
	assert_int_equal(s->mapped, 0);
	assert_true(s->exact);
	munmap(s, sizeof(*s));
}

/* A copy of sleep(1) run from a scratch directory, then deleted: with
 * CAP_SYS_PTRACE alone its executable is still read, through
 * /proc/PID/exe, and is the mapped inode. */
static void test_live_deleted_exe(void **state)
{
	(void)state;
	char dir[64], exe[128], want[160];
	struct procmaps m;
	int *seen;

	if (geteuid() != 0)
		skip();    /* the checker drops capabilities root has */
	seen = mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
	            -1, 0);
	assert_true(seen != MAP_FAILED);
	assert_int_equal(tmpdir_make(dir, sizeof(dir), "test_targetfs"), 0);
	snprintf(exe, sizeof(exe), "%s/sl", dir);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "cp /bin/sleep %s", exe);
	assert_int_equal(system(cmd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(exe, "sl", "30", (char *)NULL);
		_exit(127);
	}
	/* Until the exec has mapped it (/proc/PID/exe changes before). */
	bool mapped = false;
	for (int i = 0; i < 2000 && !mapped; i++) {
		if (procmaps_read(pid, &m) == 0) {
			for (size_t k = 0; k < m.n; k++)
				mapped |= strcmp(m.v[k].path, exe) == 0 && m.v[k].perms[2] == 'x';
			procmaps_free(&m);
		}
		if (!mapped)
			usleep(1000);
	}
	assert_true(mapped);
	assert_int_equal(unlink(exe), 0);
	snprintf(want, sizeof(want), "%s (deleted)", exe);
	pid_t checker = fork();
	assert_true(checker >= 0);
	if (checker == 0) {
		seen[0] = seen[1] = -ENOENT;
		if (ptrace_cap_only() < 0 || procmaps_read(pid, &m) < 0)
			_exit(2);
		for (size_t i = 0; i < m.n; i++) {
			if (strcmp(m.v[i].path, want) != 0 || m.v[i].perms[2] != 'x')
				continue;
			bool exact = false;
			int fd = targetfs_open_mapped(pid, &m.v[i], &exact);
			seen[0] = fd < 0 ? fd : 0;
			seen[1] = exact;
			if (fd >= 0)
				close(fd);
		}
		_exit(0);
	}
	int status = -1;
	waitpid(checker, &status, 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	tmpdir_remove(dir);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(seen[0], 0);
	assert_int_equal(seen[1], 1);
	munmap(seen, 2 * sizeof(int));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_maps_path),
		cmocka_unit_test(test_same_inode),
		cmocka_unit_test(test_verdict),
		cmocka_unit_test(test_image_build_id),
		cmocka_unit_test(test_live_self),
		cmocka_unit_test(test_live_jail),
		cmocka_unit_test(test_live_deleted_exe),
	};
	/* TEST_FILTER=PATTERN runs the tests whose names match (make check). */
	cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests_name("targetfs", tests, NULL, NULL);
}
