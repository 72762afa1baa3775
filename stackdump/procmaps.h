/* procmaps: /proc/PID/maps as an array, for stackdump's address-to-module
 * lookups.  Internal to stackdump/. */
#ifndef CPUMOND_STACKDUMP_PROCMAPS_H
#define CPUMOND_STACKDUMP_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct procmaps_entry {
	uint64_t start, end;      /* [start, end) */
	uint64_t pgoff;           /* file offset of start */
	uint64_t inode;
	unsigned dev_major, dev_minor;
	char perms[5];            /* "r-xp" */
	const char *path;         /* "" for anonymous memory; points into text */
};

struct procmaps {
	struct procmaps_entry *v; /* sorted by start, as the kernel prints them */
	size_t n;
	char *text;               /* the file's text, paths cut out of it */
	size_t len;
};

/* Parses TEXT (LEN bytes, a copy is kept) into *M.  Lines that do not parse
 * are skipped.  Returns 0 or -ENOMEM; *M is always initialised. */
int procmaps_parse(const char *text, size_t len, struct procmaps *m);

/* Reads and parses /proc/PID/maps.  Returns 0 or -errno (-ESRCH when the
 * process is gone). */
int procmaps_read(pid_t pid, struct procmaps *m);

/* The mapping containing ADDR, or NULL. */
const struct procmaps_entry *procmaps_find(const struct procmaps *m, uint64_t addr);

/* Whether mappings A and B map the same file: the same device, inode and
 * path. */
bool procmaps_same_file(const struct procmaps_entry *a, const struct procmaps_entry *b);

/* Whether A and B were read from the same text. */
bool procmaps_same(const struct procmaps *a, const struct procmaps *b);

void procmaps_free(struct procmaps *m);

#endif
