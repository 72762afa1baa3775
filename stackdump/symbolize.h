/* symbolize: names for frames at read time, from the best source the
 * machine has when the stack is read, not only what the daemon found when
 * it caught it.
 *
 * A stored frame keeps its module's path, GNU build-id and offset, which
 * is all a name needs.  Given those, the ELF file is found by build-id:
 * the module file itself when its build-id still matches, a separate debug
 * file under the debug directories (DIR/.build-id/NN/REST.debug, then the
 * module's .gnu_debuglink name next to it, in its .debug/, under
 * DIR/<module's directory>/ as gdb looks, and in DIR itself), and, when
 * DEBUGINFOD_URLS names
 * servers and the context is not offline, a debuginfod server.  elfutils
 * reads them (libdwfl, libdw: .symtab, .dynsym, MiniDebugInfo, DWARF line
 * tables and inlined subroutines); its debuginfod client (libdebuginfod)
 * asks the servers and keeps their files in its cache
 * (DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else
 * ~/.cache/debuginfod_client).
 *
 * Both libraries are opened with dlopen(3) when a context is opened, never
 * linked: the daemon, the same binary as the readers, never maps them
 * (linking libdw measured +330 KiB RSS on the daemon) and never makes a
 * network request.  Without libdw.so.1 a context resolves nothing and says
 * so once; without libdebuginfod.so.1 it asks no server.
 *
 * Costs are bounded per run: each module (build-id) is looked up once and
 * each distinct (build-id, address) resolved once; a server that does not
 * answer within the timeout, refuses the connection or fails otherwise is
 * not asked again by this context, and a build-id it had no valid file for
 * is not asked for again.  A file a server sends is used only when its
 * build-id is the one asked for.
 *
 * Names of functions are linkage names (demangle.h makes them readable),
 * file names as the DWARF line table has them (absolute when the compiler
 * recorded a directory).  A context is used from one thread.
 */
#ifndef CPUMOND_STACKDUMP_SYMBOLIZE_H
#define CPUMOND_STACKDUMP_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stackdump/stackdump.h"

/* Searched for debug files after the directories given, always. */
#define SYMBOLIZE_DEBUG_DIR "/usr/lib/debug"

/* Seconds a debuginfod request may go without receiving anything (the
 * connection, the answer, each part of the file) before it is given up,
 * when DEBUGINFOD_TIMEOUT does not say (its client's own default is 90). */
#define SYMBOLIZE_TIMEOUT_DEFAULT 5
#define SYMBOLIZE_TIMEOUT_MAX 3600

/* At most this many debug directories besides SYMBOLIZE_DEBUG_DIR. */
#define SYMBOLIZE_MAX_DEBUG_DIRS 16

struct symbolize_options {
	const char *const *debug_dirs;  /* searched in this order, before
	                                   SYMBOLIZE_DEBUG_DIR */
	size_t ndebug_dirs;
	bool offline;            /* never ask a debuginfod server */
	const char *urls;        /* DEBUGINFOD_URLS as the environment has it;
	                            NULL or "": ask no server */
	int timeout_s;           /* 1..SYMBOLIZE_TIMEOUT_MAX; 0:
	                            SYMBOLIZE_TIMEOUT_DEFAULT */
	/* Called with what the user should know, once each: libdw missing, a
	 * server given up.  A line without newline, lowercase; NULL: silent. */
	void (*note)(const char *msg, void *arg);
	void *note_arg;
};

/* The timeout DEBUGINFOD_TIMEOUT's value TEXT sets: a whole number of
 * seconds in 1..SYMBOLIZE_TIMEOUT_MAX; SYMBOLIZE_TIMEOUT_DEFAULT when TEXT
 * is NULL, empty or anything else. */
int symbolize_timeout(const char *text);

/* Whether a context with OPT asks debuginfod servers: URLS names some
 * (not only spaces) and it is not offline. */
bool symbolize_uses_debuginfod(const struct symbolize_options *opt);

/* The paths where a debug file of the module at MODULE with build-id
 * BUILD_ID (lowercase hex, at least 2 digits; NULL or "": none) and
 * .gnu_debuglink name DEBUGLINK (NULL: none) is looked for, in order:
 * for each directory of DIRS, then SYMBOLIZE_DEBUG_DIR,
 * DIR/.build-id/NN/REST.debug; then, when DEBUGLINK and MODULE is an
 * absolute path, MODDIR/DEBUGLINK, MODDIR/.debug/DEBUGLINK and, for each
 * directory, DIR/MODDIR/DEBUGLINK and DIR with less and less of MODDIR
 * ("/d/usr/bin/x.debug", "/d/bin/x.debug", "/d/x.debug", as libdwfl
 * looks).  A path found twice is given once.  Returns how many paths were written to OUT (each malloc'd), at
 * most MAX, or -ENOMEM with none left allocated. */
int symbolize_debug_paths(const char *const *dirs, size_t ndirs, const char *build_id,
                          const char *module, const char *debuglink, char **out, size_t max);

struct symbolize;

/* Opens a context with OPT (copied; the strings must outlive it).
 * Returns 0 and *OUT, -EINVAL (more than SYMBOLIZE_MAX_DEBUG_DIRS
 * directories) or -ENOMEM.  A context opens even when libdw
 * cannot be loaded: it then resolves nothing. */
int symbolize_open(const struct symbolize_options *opt, struct symbolize **out);

/* Closes S and frees all it returned; S may be NULL. */
void symbolize_close(struct symbolize *s);

/* One function of the chain at an address. */
struct symbolize_func {
	const char *name;        /* linkage name; NULL when unknown */
	const char *file;        /* source file; NULL when unknown */
	unsigned line;           /* 0 when unknown */
	bool inlined;            /* inlined into the next function of the chain */
	bool has_offset;         /* the last of a chain, named by a symbol:
	                            offset is the address less its start */
	uint64_t offset;
};

/* The functions at ADDR, an address of the module with build-id BUILD_ID
 * at MODULE (as a frame has them: an ELF virtual address, the module's
 * offset), innermost first, as gdb shows them: the inlined calls the
 * instruction is in, each inlined into the next, then the function the
 * module has code of, which is last.  Each inlined function's file:line
 * is the instruction's, each caller's that of its call.  Sets *FUNCS
 * (valid until symbolize_close) and *N (0: nothing known).  A module
 * without a build-id is not looked up (*N = 0): nothing proves that its
 * file at MODULE is the one that ran; nor is a frame no ELF file
 * describes (build-id STACKDUMP_PYTHON or STACKDUMP_JIT).  Returns 0 or
 * -ENOMEM. */
int symbolize_addr(struct symbolize *s, const char *build_id, const char *module, uint64_t addr,
                   const struct symbolize_func **funcs, size_t *n);

/* How symbolize_stack spells the frames. */
enum symbolize_mode {
	SYMBOLIZE_INSTRUCTIONS,  /* each frame at its instruction (offset; a
	                            caller's return address less one), its
	                            inlined calls as frames of their own before
	                            it: tail, stackdump */
	SYMBOLIZE_FUNCTIONS,     /* each frame as its function (func_offset),
	                            no inlined frames: report */
};

/* Writes IN's frames to OUT with the names, files and lines found at read
 * time.  A name stored in IN is kept: the daemon chose it among the
 * aliases of the address; a frame without one gets the name found (its
 * ELF symbol, without a version, else its DWARF name).  OUT keeps IN's
 * hash, truncation, stop times and error; in SYMBOLIZE_INSTRUCTIONS mode
 * it may have more frames than IN (inlined ones, marked inlined, with the
 * ip, module, build-id and offsets of the frame they are inlined into).
 * Returns 0, or -ENOMEM with OUT empty; free OUT with
 * stackdump_stack_free. */
int symbolize_stack(struct symbolize *s, const struct stackdump_stack *in,
                    enum symbolize_mode mode, struct stackdump_stack *out);

/* Where a module's names come from at read time. */
enum symbolize_source {
	SYMBOLIZE_NONE,          /* nothing: no file with that build-id */
	SYMBOLIZE_SYMBOLS,       /* the module's own symbols, no line table */
	SYMBOLIZE_DWARF,         /* the module's own DWARF: names, file:line */
	SYMBOLIZE_DEBUG_FILE,    /* a local debug file */
	SYMBOLIZE_DEBUGINFOD,    /* a debug file a debuginfod server sent */
};

/* Looks module BUILD_ID at MODULE up as symbolize_addr does and says where
 * its names come from, with the debug file's path in *DEBUG_FILE (NULL
 * when none; valid until symbolize_close). */
enum symbolize_source symbolize_module_source(struct symbolize *s, const char *build_id,
                                              const char *module, const char **debug_file);

/* "none", "symbols", "DWARF", "debug file", "debuginfod". */
const char *symbolize_source_name(enum symbolize_source src);

struct symbolize_stats {
	size_t modules;          /* distinct build-ids looked up */
	size_t addrs;            /* distinct (build-id, address) resolved */
	size_t requests;         /* debuginfod requests made */
};

void symbolize_stats(const struct symbolize *s, struct symbolize_stats *out);

#endif
