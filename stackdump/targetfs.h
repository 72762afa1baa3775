/* targetfs: a traced process's files, opened as that process sees them.
 *
 * A path a process names, or one its /proc/PID/maps shows, is a file of
 * its own mount namespace under its own root.  Here, in a container or a
 * service with PrivateTmp=, the same path is missing or, worse, another
 * file: a container's /usr/bin/python3 is not the host's, and its names on
 * the container's addresses are wrong names.  So every file a stack needs
 * (the mapped modules, their separate debug files, perf maps) is opened
 * through the target, never by its path here:
 *   - /proc/PID/map_files/START-END, the mapped file itself, also when it
 *     was deleted or replaced since; opening it needs CAP_SYS_ADMIN or
 *     CAP_CHECKPOINT_RESTORE, which the unit does not give;
 *   - /proc/PID/exe for the executable, the same file, which needs only
 *     the ptrace access check;
 *   - else the path under /proc/PID/root, the target's root directory,
 *     which needs only the ptrace access check that CAP_SYS_PTRACE passes,
 *     walked with openat2(RESOLVE_IN_ROOT) so that symbolic links resolve
 *     in the target's root as well: a container's absolute link never
 *     reaches the host's file of that name.  Magic links (/proc/N/fd/M)
 *     are not followed.
 * A file reached by path may not be the one mapped (replaced since, or a
 * file system whose maps lines show other numbers): targetfs_open_mapped
 * says whether it is beyond doubt, and targetfs_verdict decides with the
 * build-id the mapping's memory holds (targetfs_mapped_build_id).
 *
 * Measured here (Linux 6.18) with a uid holding only CAP_SYS_PTRACE:
 * /proc/PID/map_files/START-END gives EPERM; /proc/PID/root/PATH opens the
 * target's own file, also its private /tmp from inside another PrivateTmp=
 * namespace.
 *
 * Internal to stackdump/.  Nothing here stops a thread; the reads of
 * another process's memory take its memory-map lock, as /proc/PID/maps does.
 */
#ifndef CPUMOND_STACKDUMP_TARGETFS_H
#define CPUMOND_STACKDUMP_TARGETFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "stackdump/procmaps.h"

/* Opens PATH, an absolute path as process PID names it (a debug file under
 * its /usr/lib/debug, its /tmp/perf-N.map), for reading: resolved in PID's
 * mount namespace and root, symbolic links included.  Only a regular file
 * is kept (a FIFO is opened without blocking and refused).  Returns a
 * close-on-exec descriptor or -errno: -ENOENT, -EACCES (our user may not
 * read it or walk to it), -ESRCH (PID is gone), -ELOOP (a magic link on
 * the way), -EINVAL (PATH is not absolute), -ENOEXEC (not a regular file),
 * -ENOSYS (no openat2: Linux before 5.6). */
int targetfs_open(pid_t pid, const char *path);

/* Opens the executable of process PID through /proc/PID/exe: the file
 * that runs, also when it was deleted or replaced since, or lies under a
 * directory our user may not walk (the ptrace access check is enough).
 * Returns a close-on-exec descriptor or -errno as targetfs_open. */
int targetfs_open_exe(pid_t pid);

/* Opens the file that mapping E of process PID maps: through
 * /proc/PID/map_files when we may, else through /proc/PID/exe when E maps
 * the executable (the same inode), else E->path in PID's root
 * (targetfs_maps_path).  *EXACT tells whether the descriptor is the
 * mapped file beyond doubt: it came from map_files, or its device and
 * inode are those of the maps line (targetfs_same_inode).  Otherwise it is
 * the file now at the mapping's path, which is either the mapped one shown
 * under other numbers (overlayfs before Linux 6.8 showed the lower layer's
 * device in maps, btrfs the file system's instead of the subvolume's) or
 * another file: the caller decides with targetfs_verdict.  Returns the
 * descriptor or -errno as targetfs_open; -ENOENT also for a library
 * deleted since it was mapped (" (deleted)") when map_files is closed to
 * us, and for a file outside the target's root. */
int targetfs_open_mapped(pid_t pid, const struct procmaps_entry *e, bool *exact);

/* The GNU build-id, as lowercase hex in OUT (SIZE bytes, 129 hold any),
 * that process PID's memory holds for the file of mapping M->v[I]: read
 * from the first page of the file's mapping at offset 0 (its ELF header,
 * program headers and, as linkers place them, its notes) with
 * process_vm_readv, 3 µs of the 7.5 µs a call took here.  Returns 0, or
 * -ENOENT (OUT "") when that page holds no build-id or the file has no
 * mapping at offset 0, or the read's -errno. */
int targetfs_mapped_build_id(pid_t pid, const struct procmaps *m, size_t i,
                             char *out, size_t size);

/* The pure parts, for the tests. */

/* Into BUF (SIZE bytes), the path in the target's root of the file that
 * /proc/PID/maps prints to us as PATH, where ROOT is what
 * readlink(/proc/PID/root) gives.  ROOT is "/" for most targets (the paths
 * of a process in another mount namespace are already relative to its
 * root); a target chrooted to /srv/jail maps its usr/bin/x as
 * /srv/jail/usr/bin/x, which becomes "usr/bin/x".  The newline maps
 * escapes as \012 is put back.  Returns 0, -ENOENT when PATH is not below
 * ROOT (a file mapped before a chroot, out of the root's reach) or either
 * is not absolute, or -ENAMETOOLONG. */
int targetfs_maps_path(const char *root, const char *path, char *buf, size_t size);

/* Whether ST, the fstat of an opened file, is the inode a maps line shows
 * as MAJOR:MINOR INODE. */
bool targetfs_same_inode(const struct stat *st, unsigned major, unsigned minor,
                         uint64_t inode);

/* Whether an opened mapped file is the one mapped: EXACT as
 * targetfs_open_mapped said, FILE_ID the build-id of the file, MEM_ID the
 * one in the mapping's memory ("" for none or unknown).  An exact file is
 * refused only when both build-ids are known and differ (the file was
 * rewritten in place since); any other only when they are known and
 * equal.  Returns 0, or -ESTALE: not the mapped file. */
int targetfs_verdict(bool exact, const char *file_id, const char *mem_id);

/* The GNU build-id in IMAGE, the first LEN bytes of an ELF file as mapped
 * (its section headers, further on, are not needed), as lowercase hex in
 * OUT (SIZE bytes).  Returns 0, -ENOENT (OUT "") when those bytes hold
 * none, or -ENOMEM. */
int targetfs_image_build_id(const void *image, size_t len, char *out, size_t size);

#endif
