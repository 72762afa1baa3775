/* symbolize: names, source lines and inlined calls for stored frames, at
 * read time, through elfutils (see symbolize.h).
 *
 * Each module (build-id) gets a Dwfl session of its own with the one ELF
 * file reported at bias 0, so that an address of the module is its ELF
 * virtual address, which is what a frame's offset is.  The session's
 * find_debuginfo callback hands libdwfl the debug file found here (and a
 * dwz alternate file) instead of libdwfl's own search, which would also
 * ask debuginfod through libdwfl's client whenever DEBUGINFOD_URLS is set,
 * --offline or not, and without our timeout.
 */
#include "stackdump/symbolize.h"

#include "stackdump/elfinfo.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/debuginfod.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The functions of libdw.so.1 (libdwfl, libdw and libdwelf are all in it)
 * this module calls, through pointers dlsym fills. */
#define DW_FUNCS(X)                                                            \
	X(dwfl_begin) X(dwfl_end) X(dwfl_errmsg) X(dwfl_report_elf)            \
	X(dwfl_report_end) X(dwfl_module_info) X(dwfl_module_build_id)         \
	X(dwfl_module_getelf) X(dwfl_module_getdwarf) X(dwfl_module_addrinfo)  \
	X(dwfl_module_addrdie) X(dwfl_module_getsrc) X(dwfl_lineinfo)          \
	X(dwelf_elf_gnu_debuglink) X(dwelf_dwarf_gnu_debugaltlink)             \
	X(dwarf_getscopes) X(dwarf_getscopes_die) X(dwarf_tag) X(dwarf_attr) X(dwarf_attr_integrate)  \
	X(dwarf_formstring) X(dwarf_formudata) X(dwarf_diename)                \
	X(dwarf_getsrcfiles) X(dwarf_filesrc)

#define DEBUGINFOD_FUNCS(X)                                                    \
	X(debuginfod_begin) X(debuginfod_end) X(debuginfod_find_debuginfo)     \
	X(debuginfod_set_progressfn) X(debuginfod_set_user_data)               \
	X(debuginfod_get_user_data)

#define DECLARE(f) __typeof__(f) *f;
struct dw_api { DW_FUNCS(DECLARE) };
struct debuginfod_api { DEBUGINFOD_FUNCS(DECLARE) };
#undef DECLARE

/* A distinct (module, address) resolved: the chain symbolize_addr returns. */
struct addr_entry {
	uint32_t module;         /* index in s->modules + 1; 0: a free slot */
	uint64_t addr;
	struct symbolize_func *funcs;
	size_t n;
};

struct module {
	char *build_id;
	Dwfl *dwfl;              /* NULL: no file of this build-id */
	Dwfl_Module *mod;
	char *debuglink;         /* the main file's .gnu_debuglink name, or NULL */
	char *debug_path;        /* the debug file handed to libdwfl, or NULL */
	enum symbolize_source source;
	struct symbolize *s;     /* for the callback */
};

struct symbolize {
	struct symbolize_options opt;
	bool debuginfod;         /* may ask servers (until one fails) */
	void *dw_handle, *di_handle;
	struct dw_api dw;
	struct debuginfod_api di;
	bool dw_ok, di_tried, di_ok;
	debuginfod_client *client;
	struct module **modules;
	size_t nmodules, capmodules;
	struct addr_entry *addrs;    /* open addressing, capaddrs a power of 2 */
	size_t naddrs, capaddrs;
	char **names;                /* symbol names without their version */
	size_t nnames, capnames;
	size_t requests;
	/* The request under way, for the progress callback. */
	struct timespec last_progress;
	long last_bytes;
	bool cancelled;
};

static void note(const struct symbolize *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(const struct symbolize *s, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!s->opt.note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	s->opt.note(msg, s->opt.note_arg);
}

/* ---- pure parts ---- */

int symbolize_timeout(const char *text)
{
	char *end;
	long v;

	if (!text || *text < '0' || *text > '9')
		return SYMBOLIZE_TIMEOUT_DEFAULT;
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || *end || v < 1 || v > SYMBOLIZE_TIMEOUT_MAX)
		return SYMBOLIZE_TIMEOUT_DEFAULT;
	return (int)v;
}

bool symbolize_uses_debuginfod(const struct symbolize_options *opt)
{
	return !opt->offline && opt->urls && opt->urls[strspn(opt->urls, " \t\n")] != '\0';
}

/* Appends a malloc'd "A/B/C" (NULL parts left out) to OUT unless it is
 * there already.  Returns 0 or -ENOMEM. */
static int add_path(char **out, size_t *n, size_t max, const char *a, const char *b,
                    const char *c)
{
	char *p;

	if (*n >= max)
		return 0;
	if (asprintf(&p, "%s%s%s%s%s", a, b ? "/" : "", b ? b : "", c ? "/" : "", c ? c : "") < 0)
		return -ENOMEM;
	for (size_t i = 0; i < *n; i++) {
		if (strcmp(out[i], p) == 0) {
			free(p);
			return 0;
		}
	}
	out[(*n)++] = p;
	return 0;
}

int symbolize_debug_paths(const char *const *dirs, size_t ndirs, const char *build_id,
                          const char *module, const char *debuglink, char **out, size_t max)
{
	size_t n = 0, len = build_id ? strlen(build_id) : 0;
	const char *slash = module ? strrchr(module, '/') : NULL;
	char *moddir = NULL, idpath[300];
	int e = 0;

	/* Each directory given, then the default one; i == ndirs is that. */
	if (len >= 2 && len < 200) {
		snprintf(idpath, sizeof idpath, ".build-id/%.2s/%s.debug", build_id, build_id + 2);
		for (size_t i = 0; i <= ndirs && e == 0; i++)
			e = add_path(out, &n, max, i < ndirs ? dirs[i] : SYMBOLIZE_DEBUG_DIR, idpath,
			             NULL);
	}
	if (e == 0 && debuglink && debuglink[0] && !strchr(debuglink, '/') && module &&
	    module[0] == '/' && slash) {
		moddir = strndup(module, (size_t)(slash - module));
		if (!moddir)
			e = -ENOMEM;
		/* "" for a module in /: its directory is the root. */
		if (e == 0)
			e = add_path(out, &n, max, moddir, debuglink, NULL);
		if (e == 0)
			e = add_path(out, &n, max, moddir, ".debug", debuglink);
		/* DIR/usr/bin/x.debug, DIR/bin/x.debug, DIR/x.debug: the
		 * module's directory, then less and less of it, as libdwfl
		 * looks, so that a debug file put straight into DIR is found. */
		for (size_t i = 0; i <= ndirs && e == 0; i++) {
			const char *sub = moddir;

			for (;;) {
				sub += strspn(sub, "/");
				e = add_path(out, &n, max, i < ndirs ? dirs[i] : SYMBOLIZE_DEBUG_DIR,
				             sub[0] ? sub : NULL, debuglink);
				if (e < 0 || !sub[0])
					break;
				sub = strchr(sub, '/') ? strchr(sub, '/') : "";
			}
		}
	}
	free(moddir);
	if (e < 0) {
		while (n > 0)
			free(out[--n]);
		return e;
	}
	return (int)n;
}

const char *symbolize_source_name(enum symbolize_source src)
{
	switch (src) {
	case SYMBOLIZE_SYMBOLS: return "symbols";
	case SYMBOLIZE_DWARF: return "DWARF";
	case SYMBOLIZE_DEBUG_FILE: return "debug file";
	case SYMBOLIZE_DEBUGINFOD: return "debuginfod";
	case SYMBOLIZE_NONE: break;
	}
	return "none";
}

/* Whether ID is a GNU build-id in lowercase hex: not "" (none), nor the
 * marks of frames no ELF file describes (STACKDUMP_PYTHON, STACKDUMP_JIT). */
static bool is_build_id(const char *id)
{
	size_t n = id ? strspn(id, "0123456789abcdef") : 0;

	return n >= 2 && n % 2 == 0 && id[n] == '\0';
}

/* FNV-1a 64 of a module index and an address. */
static uint64_t addr_hash(uint32_t module, uint64_t addr)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < 12; i++) {
		uint64_t byte = i < 4 ? (module >> (8 * i)) & 0xff : (addr >> (8 * (i - 4))) & 0xff;

		h = (h ^ byte) * 0x100000001b3ull;
	}
	return h;
}

/* ---- the libraries ---- */

/* Loads libdw.so.1's functions once; false when they are not there. */
static bool load_dw(struct symbolize *s)
{
	s->dw_handle = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!s->dw_handle) {
		note(s, "names at read time need libdw.so.1 (Debian: libdw1): %s; "
		        "showing the names found when the stacks were taken", dlerror());
		return false;
	}
#define LOAD(f) if (!(s->dw.f = dlsym(s->dw_handle, #f))) goto missing;
	DW_FUNCS(LOAD)
#undef LOAD
	return true;
missing:
	note(s, "libdw.so.1 lacks %s: showing the names found when the stacks were taken",
	     dlerror());
	return false;
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}


/* The client's user data getter, for the progress callback (one library
 * for every context). */
static __typeof__(debuginfod_get_user_data) *get_user_data;

/* The client calls this about once a second while a request runs (it
 * waits for its transfers a second at a time); non-zero cancels it.  Until
 * a server sends the file, BYTES counts the client's loops and TOTAL is
 * 0; then they are the bytes received and the file's size.  A request
 * that got no file within timeout_s seconds, or whose download stalls that
 * long, is cancelled: a server that accepts and does not answer, or
 * stalls, costs that long.  A try the client makes again after its own
 * timeout (DEBUGINFOD_TIMEOUT, DEBUGINFOD_RETRY_LIMIT) is cancelled at its
 * first call past the deadline. */
static int progress(debuginfod_client *c, long bytes, long total)
{
	struct symbolize *s = get_user_data ? get_user_data(c) : NULL;

	if (!s || s->cancelled)
		return s != NULL;
	if (total > 0 && bytes > s->last_bytes) {
		s->last_bytes = bytes;
		clock_gettime(CLOCK_MONOTONIC, &s->last_progress);
		return 0;
	}
	if (seconds_since(&s->last_progress) < (double)s->opt.timeout_s)
		return 0;
	s->cancelled = true;
	return 1;
}

/* The debuginfod client, made on the first request; NULL when there is
 * none (no libdebuginfod.so.1, or it could not start). */
static debuginfod_client *client(struct symbolize *s)
{
	if (s->di_tried)
		return s->client;
	s->di_tried = true;
	s->di_handle = dlopen(DEBUGINFOD_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!s->di_handle) {
		note(s, "DEBUGINFOD_URLS is set but %s cannot be loaded (Debian: libdebuginfod1): %s",
		     DEBUGINFOD_SONAME, dlerror());
		return NULL;
	}
#define LOAD(f) if (!(s->di.f = dlsym(s->di_handle, #f))) goto missing;
	DEBUGINFOD_FUNCS(LOAD)
#undef LOAD
	get_user_data = s->di.debuginfod_get_user_data;
	s->client = s->di.debuginfod_begin();
	if (!s->client) {
		note(s, "cannot start the debuginfod client: %s", strerror(errno));
		return NULL;
	}
	s->di.debuginfod_set_user_data(s->client, s);
	s->di.debuginfod_set_progressfn(s->client, progress);
	return s->client;
missing:
	note(s, "%s lacks %s: asking no debuginfod server", DEBUGINFOD_SONAME, dlerror());
	return NULL;
}

/* Asks the servers for the debug file of BUILD_ID (hex).  Returns its path
 * in the client's cache (malloc'd), or NULL.  Any failure but "not found"
 * (refused, unreachable, no answer in time, a broken answer) ends asking
 * for this context, so that a server that is down costs its timeout once. */
static char *ask_debuginfod(struct symbolize *s, const char *build_id)
{
	debuginfod_client *c;
	char *path = NULL;
	int fd;

	if (!s->debuginfod || !(c = client(s)))
		return NULL;
	s->requests++;
	s->last_bytes = 0;
	s->cancelled = false;
	clock_gettime(CLOCK_MONOTONIC, &s->last_progress);
	fd = s->di.debuginfod_find_debuginfo(c, (const unsigned char *)build_id, 0, &path);
	if (fd >= 0) {
		close(fd);
		return path;
	}
	free(path);
	if (fd == -ENOENT && !s->cancelled)
		return NULL;
	s->debuginfod = false;
	if (s->cancelled)
		note(s, "debuginfod %s: no answer for build-id %s within %d s; asking no server again "
		        "in this run", s->opt.urls, build_id, s->opt.timeout_s);
	else
		note(s, "debuginfod %s: %s (build-id %s); asking no server again in this run",
		     s->opt.urls, strerror(-fd), build_id);
	return NULL;
}

/* ---- modules ---- */

static int no_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                  char **file_name, Elf **elfp)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)file_name;
	*elfp = NULL;
	return -1;
}

static int no_section(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                      const char *secname, GElf_Word shndx, const GElf_Shdr *shdr,
                      Dwarf_Addr *addr)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)secname, (void)shndx;
	(void)shdr, (void)addr;
	return -1;
}

static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          Dwarf_Addr base, const char *file_name, const char *debuglink,
                          GElf_Word crc, char **debuginfo_file_name);

static const Dwfl_Callbacks callbacks = {
	.find_elf = no_elf,
	.find_debuginfo = find_debuginfo,
	.section_address = no_section,
};

/* A session of the ELF file at PATH alone, at bias 0, its module in *MOD
 * with M as the callbacks' module (NULL: none); NULL when PATH is no
 * regular ELF file we can read.  The paths come from the watched
 * processes' maps: a FIFO or a device put there must not block or feed
 * the reader. */
static Dwfl *report(struct symbolize *s, struct module *m, const char *path, Dwfl_Module **mod)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	GElf_Addr bias;
	void **ud;
	Dwfl *d;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return NULL;
	}
	d = s->dw.dwfl_begin(&callbacks);
	if (!d) {
		close(fd);
		return NULL;
	}
	/* On success the session owns FD. */
	*mod = s->dw.dwfl_report_elf(d, path, path, fd, 0, false);
	if (!*mod)
		close(fd);
	if (!*mod || s->dw.dwfl_report_end(d, NULL, NULL) != 0 ||
	    !s->dw.dwfl_module_getelf(*mod, &bias)) {
		s->dw.dwfl_end(d);
		return NULL;
	}
	s->dw.dwfl_module_info(*mod, &ud, NULL, NULL, NULL, NULL, NULL, NULL);
	*ud = m;
	return d;
}

/* Whether MOD's GNU build-id is BUILD_ID (lowercase hex). */
static bool has_build_id(const struct symbolize *s, Dwfl_Module *mod, const char *build_id)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	int len = s->dw.dwfl_module_build_id(mod, &bits, &vaddr);
	static const char hex[] = "0123456789abcdef";

	if (len <= 0 || strlen(build_id) != 2 * (size_t)len)
		return false;
	for (int i = 0; i < len; i++)
		if (build_id[2 * i] != hex[bits[i] >> 4] || build_id[2 * i + 1] != hex[bits[i] & 15])
			return false;
	return true;
}

/* Whether the file at PATH is an ELF file with build-id BUILD_ID. */
static bool file_has_build_id(struct symbolize *s, const char *path, const char *build_id)
{
	Dwfl_Module *mod;
	Dwfl *d = report(s, NULL, path, &mod);
	bool ok = d && has_build_id(s, mod, build_id);

	if (d)
		s->dw.dwfl_end(d);
	return ok;
}

/* The first local debug file of BUILD_ID among the candidates of MODULE
 * and DEBUGLINK (symbolize_debug_paths), malloc'd, or NULL. */
static char *local_debug_file(struct symbolize *s, const char *build_id, const char *module,
                              const char *debuglink)
{
	char *paths[256], *found = NULL;
	int n = symbolize_debug_paths(s->opt.debug_dirs, s->opt.ndebug_dirs, build_id, module,
	                              debuglink, paths, sizeof paths / sizeof *paths);

	for (int i = 0; i < n; i++) {
		if (!found && access(paths[i], R_OK) == 0 && file_has_build_id(s, paths[i], build_id))
			found = paths[i];
		else
			free(paths[i]);
	}
	return found;
}

/* The dwz file (.gnu_debugaltlink) that the DWARF of MOD, read from
 * FILE_NAME, shares with others: by its build-id under the debug
 * directories, at the name it gives (as it is, and under each directory
 * given when it is under SYMBOLIZE_DEBUG_DIR; a relative name from
 * FILE_NAME's directory), then from debuginfod.  Malloc'd, or NULL. */
static char *find_alt(struct symbolize *s, Dwfl_Module *mod, const char *file_name,
                      const char *altname)
{
	const size_t deflen = strlen(SYMBOLIZE_DEBUG_DIR);
	const void *bits;
	const char *name;
	char hex[129], *paths[64], *p, *found = NULL;
	Dwarf_Addr bias;
	Dwarf *dw = s->dw.dwfl_module_getdwarf(mod, &bias);
	ssize_t len = dw ? s->dw.dwelf_dwarf_gnu_debugaltlink(dw, &name, &bits) : -1;
	int n;

	if (len <= 0 || len > 64 || strcmp(name, altname) != 0)
		return NULL;
	elfinfo_hex(bits, (size_t)len, hex);
	n = symbolize_debug_paths(s->opt.debug_dirs, s->opt.ndebug_dirs, hex, NULL, NULL, paths,
	                          sizeof paths / sizeof *paths - s->opt.ndebug_dirs - 1);
	if (n < 0)
		return NULL;
	if (altname[0] == '/') {
		for (size_t i = 0; i < s->opt.ndebug_dirs; i++)
			if (strncmp(altname, SYMBOLIZE_DEBUG_DIR "/", deflen + 1) == 0 &&
			    asprintf(&p, "%s%s", s->opt.debug_dirs[i], altname + deflen) >= 0)
				paths[n++] = p;
		if ((p = strdup(altname)))
			paths[n++] = p;
	} else if (file_name && strrchr(file_name, '/') &&
	           asprintf(&p, "%.*s/%s", (int)(strrchr(file_name, '/') - file_name), file_name,
	                    altname) >= 0) {
		paths[n++] = p;
	}
	for (int i = 0; i < n; i++) {
		if (!found && access(paths[i], R_OK) == 0 && file_has_build_id(s, paths[i], hex))
			found = paths[i];
		else
			free(paths[i]);
	}
	if (!found && (found = ask_debuginfod(s, hex)) && !file_has_build_id(s, found, hex)) {
		free(found);
		found = NULL;
	}
	return found;
}

/* libdwfl asks for MOD's separate debug file (DEBUGLINK is the main file's
 * .gnu_debuglink name, or NULL), and once its DWARF is read, for the dwz
 * file that DWARF names (DEBUGLINK is then that name): the files found
 * here, or none. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          Dwarf_Addr base, const char *file_name, const char *debuglink,
                          GElf_Word crc, char **debuginfo_file_name)
{
	struct module *m = *userdata;
	char *alt = NULL;
	const char *path;
	int fd;

	(void)modname, (void)base, (void)crc;
	if (!m)
		return -1;
	if (!debuglink || (m->debuglink && strcmp(debuglink, m->debuglink) == 0))
		path = m->debug_path;
	else
		path = alt = find_alt(m->s, mod, file_name, debuglink);
	/* Checked to be a regular ELF file of the right build-id when found. */
	fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
	if (fd >= 0)
		*debuginfo_file_name = strdup(path);
	free(alt);
	errno = 0;
	return fd;
}

/* Finds the files of module BUILD_ID at PATH into M (see symbolize.h for
 * the order).  Returns 0 or -ENOMEM; a module without files is no error. */
static int load_module(struct symbolize *s, struct module *m, const char *path)
{
	Dwfl_Module *mod = NULL;
	Dwarf_Addr bias;
	GElf_Word crc;
	const char *link;
	Dwfl *d = NULL;

	if (path && path[0] == '/') {
		d = report(s, m, path, &mod);
		if (d && !has_build_id(s, mod, m->build_id)) {
			s->dw.dwfl_end(d);
			d = NULL;
		}
	}
	if (d && (link = s->dw.dwelf_elf_gnu_debuglink(s->dw.dwfl_module_getelf(mod, &bias), &crc)) &&
	    !(m->debuglink = strdup(link))) {
		s->dw.dwfl_end(d);
		return -ENOMEM;
	}
	m->debug_path = local_debug_file(s, m->build_id, path, m->debuglink);
	if (m->debug_path) {
		m->source = SYMBOLIZE_DEBUG_FILE;
	} else if (d) {
		/* Asking for the DWARF now makes libdwfl ask for the debug
		 * file, which is none: a session that keeps the main file
		 * only, its own DWARF or else its symbols.  One that then
		 * gets a file from a server starts afresh below. */
		if (s->dw.dwfl_module_getdwarf(mod, &bias)) {
			m->source = SYMBOLIZE_DWARF;
		} else if ((m->debug_path = ask_debuginfod(s, m->build_id)) &&
		           !file_has_build_id(s, m->debug_path, m->build_id)) {
			note(s, "debuginfod %s sent a file that is not the debug file of build-id %s",
			     s->opt.urls, m->build_id);
			free(m->debug_path);
			m->debug_path = NULL;
		}
		if (m->debug_path) {
			m->source = SYMBOLIZE_DEBUGINFOD;
			s->dw.dwfl_end(d);
			d = report(s, m, path, &mod);
		}
	} else if ((m->debug_path = ask_debuginfod(s, m->build_id))) {
		m->source = SYMBOLIZE_DEBUGINFOD;
	}
	/* Without the module's own file, the debug file stands for it: it
	 * has the symbols, the DWARF and the same addresses. */
	if (!d && m->debug_path && !(d = report(s, m, m->debug_path, &mod))) {
		m->source = SYMBOLIZE_NONE;
	} else if (d && m->source == SYMBOLIZE_NONE) {
		m->source = SYMBOLIZE_SYMBOLS;
	}
	m->dwfl = d;
	m->mod = d ? mod : NULL;
	return 0;
}

/* The module of BUILD_ID, looked up the first time; its index in
 * s->modules in *IDX.  Returns 0 or -ENOMEM. */
static int get_module(struct symbolize *s, const char *build_id, const char *path, size_t *idx)
{
	struct module *m;

	for (size_t i = s->nmodules; i-- > 0;) {
		if (strcmp(s->modules[i]->build_id, build_id) == 0) {
			*idx = i;
			return 0;
		}
	}
	if (s->nmodules == s->capmodules) {
		size_t cap = s->capmodules ? 2 * s->capmodules : 16;
		struct module **p = realloc(s->modules, cap * sizeof *p);

		if (!p)
			return -ENOMEM;
		s->modules = p;
		s->capmodules = cap;
	}
	/* Each apart: libdwfl's sessions keep its address. */
	m = calloc(1, sizeof *m);
	if (!m || !(m->build_id = strdup(build_id))) {
		free(m);
		return -ENOMEM;
	}
	m->s = s;
	s->modules[s->nmodules] = m;
	*idx = s->nmodules++;
	return s->dw_ok ? load_module(s, m, path) : 0;
}

/* ---- addresses ---- */

/* Inlined calls deeper than this are cut (the outermost kept). */
#define MAX_CHAIN 64

/* The name of function DIE: its linkage name, else its name, as the DIE or
 * its abstract origin (an inlined or out-of-line instance) has them. */
static const char *die_name(const struct symbolize *s, Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name = NULL;

	if (s->dw.dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
	    s->dw.dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr))
		name = s->dw.dwarf_formstring(&attr);
	return name ? name : s->dw.dwarf_diename(die);
}

/* Where inlined subroutine DIE of compilation unit CU was called from. */
static void call_site(const struct symbolize *s, Dwarf_Die *cu, Dwarf_Die *die,
                      const char **file, unsigned *line)
{
	Dwarf_Attribute attr;
	Dwarf_Word idx, l;
	Dwarf_Files *files;
	size_t nfiles;

	*file = NULL;
	*line = 0;
	if (s->dw.dwarf_formudata(s->dw.dwarf_attr(die, DW_AT_call_file, &attr), &idx) == 0 &&
	    s->dw.dwarf_getsrcfiles(cu, &files, &nfiles) == 0 && idx < nfiles)
		*file = s->dw.dwarf_filesrc(files, idx, NULL, NULL);
	if (s->dw.dwarf_formudata(s->dw.dwarf_attr(die, DW_AT_call_line, &attr), &l) == 0 &&
	    l <= UINT_MAX)
		*line = (unsigned)l;
}

/* NAME without its symbol version ("__libc_start_main@@GLIBC_2.34": the
 * .symtab of a debug file has them), as the daemon names it; NAME itself
 * when it has none, NULL when out of memory.  Kept until symbolize_close. */
static const char *unversioned(struct symbolize *s, const char *name)
{
	const char *at = strchr(name, '@');
	char *copy;

	if (!at || at == name)
		return name;
	if (s->nnames == s->capnames) {
		size_t cap = s->capnames ? 2 * s->capnames : 16;
		char **p = realloc(s->names, cap * sizeof *p);

		if (!p)
			return NULL;
		s->names = p;
		s->capnames = cap;
	}
	if (!(copy = strndup(name, (size_t)(at - name))))
		return NULL;
	s->names[s->nnames++] = copy;
	return copy;
}

/* The chain of functions at ADDR of M, as eu-addr2line -i and gdb walk it:
 * the line table gives the instruction's file:line; the DIEs that hold the
 * innermost scope at ADDR, inside out, give each inlined call (whose
 * caller's line is its DW_AT_call_line) up to the function that holds the
 * code.  (Not the scopes dwarf_getscopes lists after an inlined instance:
 * those are its abstract definition's, for variables, not its callers.)
 * That one is named by its ELF symbol when one covers ADDR, as the daemon
 * names it, without its version.  Sets *OUT (malloc'd; the strings are
 * libdw's or S's, kept until the session ends) and *N.  Returns 0 or
 * -ENOMEM. */
static int resolve(struct symbolize *s, const struct module *m, uint64_t addr,
                   struct symbolize_func **out, size_t *n)
{
	struct symbolize_func chain[MAX_CHAIN];
	const char *symname = NULL, *file = NULL;
	Dwarf_Die *cu, *scopes = NULL, *chain_dies = NULL;
	Dwarf_Addr bias = 0;
	unsigned line = 0;
	int nscopes = 0, l = 0;
	size_t k = 0;
	GElf_Off off = 0;
	Dwfl_Line *dl;
	GElf_Sym sym;

	*out = NULL;
	*n = 0;
	if (!m->mod)
		return 0;
	symname = s->dw.dwfl_module_addrinfo(m->mod, addr, &off, &sym, NULL, NULL, NULL);
	if (symname && off >= sym.st_size)
		symname = NULL;   /* the nearest symbol before, not one that holds ADDR */
	if (symname && !(symname = unversioned(s, symname)))
		return -ENOMEM;
	if ((dl = s->dw.dwfl_module_getsrc(m->mod, addr)) &&
	    (file = s->dw.dwfl_lineinfo(dl, NULL, &l, NULL, NULL, NULL)))
		line = l > 0 ? (unsigned)l : 0;
	if ((cu = s->dw.dwfl_module_addrdie(m->mod, addr, &bias)) &&
	    s->dw.dwarf_getscopes(cu, addr - bias, &scopes) > 0)
		nscopes = s->dw.dwarf_getscopes_die(&scopes[0], &chain_dies);
	for (int i = 0; i < nscopes && k < MAX_CHAIN; i++) {
		int tag = s->dw.dwarf_tag(&chain_dies[i]);

		if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine &&
		    tag != DW_TAG_entry_point)
			continue;
		chain[k++] = (struct symbolize_func){
			.name = die_name(s, &chain_dies[i]), .file = file, .line = line,
			.inlined = tag == DW_TAG_inlined_subroutine,
		};
		if (tag != DW_TAG_inlined_subroutine)
			break;
		call_site(s, cu, &chain_dies[i], &file, &line);
	}
	free(scopes);
	free(chain_dies);
	/* A chain without the function that holds the code (no DWARF, or
	 * cut): that function ends it, at the last call site. */
	if (k == 0 || chain[k - 1].inlined) {
		if (k == MAX_CHAIN)
			k--;
		chain[k++] = (struct symbolize_func){ .file = file, .line = line };
	}
	if (symname) {
		chain[k - 1].name = symname;
		chain[k - 1].has_offset = true;
		chain[k - 1].offset = off;
	}
	if (k == 1 && !chain[0].name && !chain[0].file)
		return 0;
	*out = malloc(k * sizeof **out);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, chain, k * sizeof **out);
	*n = k;
	return 0;
}

/* Doubles the address table; 0 or -ENOMEM. */
static int grow_addrs(struct symbolize *s)
{
	size_t cap = s->capaddrs ? 2 * s->capaddrs : 1024;
	struct addr_entry *t = calloc(cap, sizeof *t);

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < s->capaddrs; i++) {
		const struct addr_entry *e = &s->addrs[i];
		size_t k;

		if (!e->module)
			continue;
		for (k = addr_hash(e->module, e->addr) & (cap - 1); t[k].module; k = (k + 1) & (cap - 1))
			;
		t[k] = *e;
	}
	free(s->addrs);
	s->addrs = t;
	s->capaddrs = cap;
	return 0;
}

int symbolize_addr(struct symbolize *s, const char *build_id, const char *module, uint64_t addr,
                   const struct symbolize_func **funcs, size_t *n)
{
	struct addr_entry *e;
	uint32_t key;
	size_t idx, k;
	int r;

	*funcs = NULL;
	*n = 0;
	if (!is_build_id(build_id))
		return 0;
	if ((r = get_module(s, build_id, module, &idx)) < 0)
		return r;
	if (2 * (s->naddrs + 1) > s->capaddrs && (r = grow_addrs(s)) < 0)
		return r;
	key = (uint32_t)idx + 1;
	for (k = addr_hash(key, addr) & (s->capaddrs - 1); s->addrs[k].module;
	     k = (k + 1) & (s->capaddrs - 1)) {
		e = &s->addrs[k];
		if (e->module == key && e->addr == addr) {
			*funcs = e->funcs;
			*n = e->n;
			return 0;
		}
	}
	e = &s->addrs[k];
	if ((r = resolve(s, s->modules[idx], addr, &e->funcs, &e->n)) < 0)
		return r;
	e->module = key;
	e->addr = addr;
	s->naddrs++;
	*funcs = e->funcs;
	*n = e->n;
	return 0;
}

/* ---- stacks ---- */

/* The address frame F is looked up by: a caller's return address is the
 * instruction after its call, which may be the next function's first (a
 * call to a function that does not return ends its caller); the one
 * before it is in the call.  Not below the function's start: a frame
 * interrupted by a signal is at the instruction itself. */
static uint64_t lookup_offset(const struct stackdump_frame *f, bool caller)
{
	return caller && f->offset > f->func_offset ? f->offset - 1 : f->offset;
}

/* Gives frame G (a copy of F, looked up at LOOK) what FN says.  A name F
 * has is kept for the function with the code: the daemon chose it among
 * the aliases of its address (clone3, not __clone3 or __GI___clone3). */
static int apply(struct stackdump_frame *g, const struct stackdump_frame *f, uint64_t look,
                 const struct symbolize_func *fn)
{
	const char *name = fn->name ? fn->name : fn->inlined ? "??" : NULL;

	if (!fn->inlined && f->symbol && f->symbol[0])
		name = NULL;
	if (name) {
		free(g->symbol);
		if (!(g->symbol = strdup(name)))
			return -ENOMEM;
		g->symbol_offset = fn->inlined ? 0 : fn->has_offset ? fn->offset + (f->offset - look)
		                                                    : f->offset - f->func_offset;
	}
	free(g->file);
	g->file = NULL;
	if (fn->file && !(g->file = strdup(fn->file)))
		return -ENOMEM;
	g->line = fn->line;
	g->inlined = fn->inlined;
	return 0;
}

int symbolize_stack(struct symbolize *s, const struct stackdump_stack *in,
                    enum symbolize_mode mode, struct stackdump_stack *out)
{
	size_t cap = in->nframes;
	int e = 0;

	*out = *in;
	out->frames = NULL;
	out->nframes = 0;
	if (cap == 0)
		return 0;
	if (!(out->frames = calloc(cap, sizeof *out->frames)))
		goto nomem;
	for (size_t i = 0; i < in->nframes; i++) {
		const struct stackdump_frame *f = &in->frames[i];
		uint64_t look = mode == SYMBOLIZE_FUNCTIONS ? f->func_offset : lookup_offset(f, i > 0);
		const struct symbolize_func *fn;
		size_t nf, first, count;

		if ((e = symbolize_addr(s, f->build_id, f->module, look, &fn, &nf)) < 0)
			goto nomem;
		/* A function is the one with the code: the chain's last. */
		first = mode == SYMBOLIZE_FUNCTIONS && nf > 0 ? nf - 1 : 0;
		count = nf > 0 ? nf - first : 1;
		if (out->nframes + count + (in->nframes - i - 1) > cap) {
			size_t want = out->nframes + count + (in->nframes - i - 1) + 16;
			struct stackdump_frame *p = realloc(out->frames, want * sizeof *p);

			if (!p)
				goto nomem;
			memset(p + cap, 0, (want - cap) * sizeof *p);
			out->frames = p;
			cap = want;
		}
		for (size_t k = 0; k < count; k++) {
			struct stackdump_frame *g = &out->frames[out->nframes++];

			if (stackdump_frame_copy(g, f) < 0 || (nf > 0 && apply(g, f, look, &fn[first + k]) < 0))
				goto nomem;
		}
	}
	return 0;
nomem:
	stackdump_stack_free(out);
	return -ENOMEM;
}

/* ---- the context ---- */

int symbolize_open(const struct symbolize_options *opt, struct symbolize **out)
{
	struct symbolize *s;

	*out = NULL;
	if (opt->ndebug_dirs > SYMBOLIZE_MAX_DEBUG_DIRS)
		return -EINVAL;
	if (!(s = calloc(1, sizeof *s)))
		return -ENOMEM;
	s->opt = *opt;
	if (s->opt.timeout_s < 1 || s->opt.timeout_s > SYMBOLIZE_TIMEOUT_MAX)
		s->opt.timeout_s = SYMBOLIZE_TIMEOUT_DEFAULT;
	s->debuginfod = symbolize_uses_debuginfod(opt);
	s->dw_ok = load_dw(s);
	*out = s;
	return 0;
}

void symbolize_close(struct symbolize *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->capaddrs; i++)
		free(s->addrs[i].funcs);
	free(s->addrs);
	for (size_t i = 0; i < s->nmodules; i++) {
		struct module *m = s->modules[i];

		if (m->dwfl)
			s->dw.dwfl_end(m->dwfl);
		free(m->build_id);
		free(m->debuglink);
		free(m->debug_path);
		free(m);
	}
	free(s->modules);
	for (size_t i = 0; i < s->nnames; i++)
		free(s->names[i]);
	free(s->names);
	if (s->client)
		s->di.debuginfod_end(s->client);
	/* The libraries stay loaded: libdebuginfod's constructor sets up
	 * libcurl's global state, which nothing takes down (its destructor
	 * may not: other threads may be in libcurl), and unmapped it would be
	 * memory nothing points to.  dlopen of one loaded already is cheap. */
	free(s);
}

enum symbolize_source symbolize_module_source(struct symbolize *s, const char *build_id,
                                              const char *module, const char **debug_file)
{
	size_t idx;

	*debug_file = NULL;
	if (!is_build_id(build_id) || get_module(s, build_id, module, &idx) < 0)
		return SYMBOLIZE_NONE;
	*debug_file = s->modules[idx]->debug_path;
	return s->modules[idx]->source;
}

void symbolize_stats(const struct symbolize *s, struct symbolize_stats *out)
{
	out->modules = s->nmodules;
	out->addrs = s->naddrs;
	out->requests = s->requests;
}
