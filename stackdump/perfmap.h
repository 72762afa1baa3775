/* perfmap: names for JIT code, from the perf map a runtime writes.
 *
 * A JIT compiles functions into anonymous executable memory that no ELF
 * file describes.  The runtimes perf users run say what is where in
 * /tmp/perf-PID.map, one "START SIZE name" line per piece of code, START
 * and SIZE in hex with or without 0x:
 *   node --perf-basic-prof (also --interpreted-frames-native-stack for the
 *     frames the interpreter runs):  "12385e80 1e0 JS:*leaf /srv/hot.js:1:14"
 *   jcmd PID Compiler.perfmap (HotSpot, JDK 17):
 *     "0x00007f906ceccb80 0x0000000000000158 long Burn.leaf(long)"
 *   python3.12 -X perf:  "7f3a2c001000 b py::burn:/srv/app.py"
 * PID is the process's pid in its own pid namespace, and /tmp its own
 * /tmp: the file is opened through the target (targetfs.h).
 *
 * The file is the target's: it may be huge (node appends a line for every
 * function it ever compiled, for the life of the process), out of order,
 * overlapping (V8 reuses the addresses of code it freed, and appends the
 * new code's line), or a lie.  So:
 *   - a map is parsed once per change of its size, modification time or
 *     inode; a map that only grew (node, python) is parsed from where the
 *     last parse ended;
 *   - at most PERFMAP_MAX_BYTES of it are read, the newest (the end of the
 *     file), and at most PERFMAP_MAX_ENTRIES entries kept (the rest of
 *     the file is then not read); why says what was left out;
 *   - lines that do not parse are skipped and counted; a name is cut to
 *     PERFMAP_NAME_MAX bytes;
 *   - where entries overlap, the one written last (the latest line) names
 *     the address, as the code there now is the newest.
 *
 * The parser and the lookup are pure (perfmap_parse, perfmap_lookup);
 * perfmap_refresh is the thin reader.  Internal to stackdump/.
 */
#ifndef CPUMOND_STACKDUMP_PERFMAP_H
#define CPUMOND_STACKDUMP_PERFMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Bytes of a map kept parsed: its last 16 MiB.  node --perf-basic-prof
 * wrote 116 KiB (2,430 lines) in its first two seconds here, a JDK 17
 * Compiler.perfmap 33 KiB (473 lines). */
#define PERFMAP_MAX_BYTES   (16u << 20)
#define PERFMAP_MAX_ENTRIES (512u * 1024)
#define PERFMAP_NAME_MAX    1024
#define PERFMAP_TAIL        64

struct perfmap_entry {
	uint64_t start, end;     /* [start, end) */
	uint32_t name;           /* offset in names */
	uint32_t seq;            /* line number among those kept: later wins */
};

struct perfmap {
	struct perfmap_entry *v; /* sorted by start when sorted */
	size_t n, cap;
	uint64_t *max_end;       /* max_end[i]: the highest end of v[0..i] */
	bool sorted;
	char *names;             /* NUL-terminated names, back to back */
	size_t names_len, names_cap;
	uint32_t next_seq;
	size_t skipped;          /* lines that did not parse */
	size_t overlaps;         /* entries overlapping an earlier one */
	/* The file as last read (perfmap_refresh). */
	bool have_file;
	uint64_t dev, ino;
	int64_t size, mtime_ns;
	int64_t parsed;          /* file bytes parsed: up to the last newline */
	char tail[PERFMAP_TAIL]; /* the last bytes parsed, to tell a map that
	                            grew (node, python) from one written anew
	                            (jcmd) */
	size_t tail_len;
	int64_t window_start;    /* file offset of the first byte kept */
	int err;                 /* the last refresh's error, 0 when read */
	char why[200];           /* what was clipped, refused or skipped, "" */
};

void perfmap_init(struct perfmap *m);
void perfmap_free(struct perfmap *m);

/* Forgets every entry (the file is read again from its start next time). */
void perfmap_clear(struct perfmap *m);

/* Parses the complete lines of TEXT (LEN bytes; a last line without its
 * newline is left for the next call) and adds their entries to M.  Returns
 * the bytes consumed (up to and including the last newline), or -ENOMEM
 * (M keeps the entries added before), or -E2BIG when M reached
 * PERFMAP_MAX_ENTRIES (the rest not added). */
ssize_t perfmap_parse(struct perfmap *m, const char *text, size_t len);

/* The name of the code at ADDR, with the start of its entry in *START;
 * NULL when no entry covers it.  Sorts M when entries were added since
 * the last lookup. */
const char *perfmap_lookup(struct perfmap *m, uint64_t addr, uint64_t *start);

/* The part of NAME that identifies the function across runs, for the
 * stack hash: NAME without V8's tier mark ("JS:*leaf", "JS:~leaf",
 * "JS:^leaf" and "JS:+leaf" are one function, optimized, interpreted,
 * baseline or maglev code, and a function is tiered up while it runs;
 * "LazyCompile:*leaf" of older V8 too).  Writes the first LEN - 1 bytes
 * to BUF with a NUL; returns the whole length. */
size_t perfmap_identity(const char *name, char *buf, size_t len);

/* Reads process PID's perf map /tmp/perf-NSPID.map (NSPID: its pid in its
 * own namespace), as it sees it (targetfs_open), when it changed since the
 * last call: a file that only grew from where the last parse ended, else
 * the whole file (its last PERFMAP_MAX_BYTES).  A map whose owner is
 * neither EUID (the process's effective uid) nor root is refused, as perf
 * refuses it: another user may have planted it in a shared /tmp.  Returns
 * 0, or -errno (-ENOENT: no map; -EPERM: refused) with M->why saying so
 * and M emptied. */
int perfmap_refresh(struct perfmap *m, pid_t pid, pid_t nspid, long euid);

/* ---- for stackdump.c ---- */

struct stackdump_frame;
struct procmaps_entry;

/* What a process's JIT frames are named from (opaque). */
struct perfmap_proc;

/* Whether mapping E may hold JIT code: anonymous (or an anonymous
 * mapping's name, or a memfd) and executable. */
bool perfmap_jit_mapping(const struct procmaps_entry *e);

/* Names frame F, whose code at LOOK (its ip, or the call before a return
 * address) is in a JIT mapping of process PID, from the process's perf
 * map, read again when it changed, at most once per dump (DUMP: an id of
 * the dump, its stop's start time).  Fills F as a STACKDUMP_JIT frame
 * (stackdump.h) with IP; *PP is created on first use.  Returns 0, -ENOENT
 * when no entry names LOOK (F untouched), -ENOMEM. */
int perfmap_name_frame(struct perfmap_proc **pp, pid_t pid, uint64_t dump, uint64_t ip,
                       uint64_t look, struct stackdump_frame *f);

/* Whether process PID has a perf map, for the doctor: 0 (its path in
 * PATH, LEN bytes, and its entries in *ENTRIES), or -errno as
 * perfmap_refresh with the reason in WHY (WHYSZ bytes). */
int perfmap_probe(pid_t pid, char *path, size_t len, size_t *entries, char *why, size_t whysz);

void perfmap_proc_free(struct perfmap_proc *pp);

#endif
