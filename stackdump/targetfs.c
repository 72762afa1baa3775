/* targetfs: a traced process's files as it sees them.  See targetfs.h. */
#include "stackdump/targetfs.h"

#include "procfs/procfs.h"
#include "stackdump/elfinfo.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bytes of a mapping's first page read for its build-id: the ELF header,
 * the program headers and the notes that linkers put right after them
 * (.note.gnu.build-id at 0x2c4-0x380 in Debian 12's binaries). */
#define HEAD_BYTES 4096

/* Nonblocking: a FIFO planted at a module's path must not hang us; a
 * regular file ignores the flag. */
#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

/* Keeps FD when it is a regular file; with ST its fstat when ST is given. */
static int regular(int fd, struct stat *st)
{
	struct stat tmp;

	if (!st)
		st = &tmp;
	if (fstat(fd, st) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -ENOEXEC;
	}
	return fd;
}

/* PATH resolved in the root of PID, with fstat in ST (may be NULL). */
static int open_in_root(pid_t pid, const char *path, struct stat *st)
{
	struct open_how how = {
		.flags = OPEN_FLAGS,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int dir = procfs_open(pid, 0, "root", O_PATH | O_DIRECTORY);

	if (dir < 0)
		return dir;
	int fd = (int)syscall(SYS_openat2, dir, path, &how, sizeof(how));
	int e = errno;
	close(dir);
	if (fd < 0)
		return -e;
	return regular(fd, st);
}

int targetfs_open(pid_t pid, const char *path)
{
	if (path[0] != '/')
		return -EINVAL;
	return open_in_root(pid, path, NULL);
}

/* /proc/PID/exe, with fstat in ST (may be NULL). */
static int open_exe(pid_t pid, struct stat *st)
{
	int fd = procfs_open(pid, 0, "exe", OPEN_FLAGS);

	return fd < 0 ? fd : regular(fd, st);
}

int targetfs_open_exe(pid_t pid)
{
	return open_exe(pid, NULL);
}

int targetfs_maps_path(const char *root, const char *path, char *buf, size_t size)
{
	size_t n;

	if (root[0] != '/' || path[0] != '/')
		return -ENOENT;
	n = strlen(root);
	while (n > 0 && root[n - 1] == '/')
		n--;
	/* "/srv/jail" holds "/srv/jail/x", not "/srv/jailbreak/x". */
	if (strncmp(path, root, n) != 0 || path[n] != '/')
		return -ENOENT;
	path += n;
	path += strspn(path, "/");
	if (!*path)
		return -ENOENT;
	/* seq_file_path(..., "\n") writes a newline as \012 and leaves the
	 * rest, backslashes too, as it is. */
	for (n = 0; *path; n++) {
		bool nl = strncmp(path, "\\012", 4) == 0;
		if (n + 1 >= size)
			return -ENAMETOOLONG;
		buf[n] = nl ? '\n' : *path;
		path += nl ? 4 : 1;
	}
	buf[n] = '\0';
	return 0;
}

bool targetfs_same_inode(const struct stat *st, unsigned major, unsigned minor,
                         uint64_t inode)
{
	return major(st->st_dev) == major && minor(st->st_dev) == minor &&
	       (uint64_t)st->st_ino == inode;
}

int targetfs_verdict(bool exact, const char *file_id, const char *mem_id)
{
	bool known = file_id[0] && mem_id[0];
	bool same = known && strcmp(file_id, mem_id) == 0;

	if (exact)
		return known && !same ? -ESTALE : 0;
	return same ? 0 : -ESTALE;
}

int targetfs_open_mapped(pid_t pid, const struct procmaps_entry *e, bool *exact)
{
	char path[PATH_MAX];
	struct stat st;
	bool deleted;

	*exact = false;
	snprintf(path, sizeof(path), "map_files/%" PRIx64 "-%" PRIx64, e->start, e->end);
	int fd = procfs_open(pid, 0, path, OPEN_FLAGS);
	if (fd >= 0) {
		/* The kernel's own link to the mapped file: exact, whatever
		 * numbers fstat gives (Linux 6.8+ shows overlayfs's in maps and
		 * opens the lower file here). */
		fd = regular(fd, NULL);
		*exact = fd >= 0;
		return fd;
	}
	/* The executable, also deleted since or under a directory our user
	 * may not walk: /proc/PID/exe needs only the ptrace access check. */
	if ((fd = open_exe(pid, &st)) >= 0) {
		if (targetfs_same_inode(&st, e->dev_major, e->dev_minor, e->inode)) {
			*exact = true;
			return fd;
		}
		close(fd);
	}
	procfs_parse_exe(e->path, &deleted);
	if (e->path[0] != '/' || deleted)
		return -ENOENT;
	char root[PATH_MAX];
	int r = procfs_read_link(pid, "root", root, sizeof(root));
	if (r < 0)
		return r;
	r = targetfs_maps_path(root, e->path, path, sizeof(path));
	if (r < 0)
		return r;
	fd = open_in_root(pid, path, &st);
	if (fd >= 0)
		*exact = targetfs_same_inode(&st, e->dev_major, e->dev_minor, e->inode);
	return fd;
}

int targetfs_image_build_id(const void *image, size_t len, char *out, size_t size)
{
	unsigned char head[HEAD_BYTES];
	struct elfinfo ei;
	Elf64_Ehdr eh;

	out[0] = '\0';
	if (len > sizeof(head))
		len = sizeof(head);
	if (len < sizeof(eh))
		return -ENOENT;
	/* Without its section headers, which lie beyond these bytes, the
	 * image is whole for the reader: program headers and notes. */
	memcpy(head, image, len);
	memcpy(&eh, head, sizeof(eh));
	eh.e_shoff = 0;
	eh.e_shnum = 0;
	eh.e_shstrndx = SHN_UNDEF;
	memcpy(head, &eh, sizeof(eh));
	int r = elfinfo_read_mem(head, len, &ei);
	if (r == -ENOMEM)
		return r;
	if (r == 0 && ei.build_id[0] && strlen(ei.build_id) < size)
		snprintf(out, size, "%s", ei.build_id);
	if (r == 0)
		elfinfo_free(&ei);
	return out[0] ? 0 : -ENOENT;
}

int targetfs_mapped_build_id(pid_t pid, const struct procmaps *m, size_t i,
                             char *out, size_t size)
{
	unsigned char head[HEAD_BYTES];
	size_t k = i;

	out[0] = '\0';
	/* A file's mappings are adjacent, in file order. */
	while (k > 0 && m->v[k].pgoff != 0 && procmaps_same_file(&m->v[k - 1], &m->v[i]))
		k--;
	const struct procmaps_entry *e = &m->v[k];
	if (e->pgoff != 0)
		return -ENOENT;
	uint64_t len = e->end - e->start < sizeof(head) ? e->end - e->start : sizeof(head);
	struct iovec local = { .iov_base = head, .iov_len = (size_t)len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)e->start, .iov_len = (size_t)len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (n < 0)
		return -errno;
	return targetfs_image_build_id(head, (size_t)n, out, size);
}
