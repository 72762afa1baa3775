/* demangle: the names people read for C++ and Rust linkage names.
 *
 * Frames keep the linkage name the symbol table gives (`_ZN…`, `_R…`): it
 * is what the database stores and --json prints, and what a tool can look
 * up again.  People read the demangled form, as gdb and eu-stack print it:
 * `std::thread::_State_impl<…>::_M_run()`, `hello::main`.  The demangler is
 * libiberty's (the one binutils and gdb use), for C++ (Itanium ABI) and
 * Rust (legacy `_ZN…17h<hash>E`, shown without the hash, and v0 `_R…`).
 *
 * Symbol names come from the watched binaries, which may be hostile:
 * names longer than DEMANGLE_MAX_INPUT are left as they are, and
 * libiberty's own recursion limit bounds the work on the rest.
 */
#ifndef CPUMOND_STACKDUMP_DEMANGLE_H
#define CPUMOND_STACKDUMP_DEMANGLE_H

#include <stddef.h>

/* Linkage names longer than this are not demangled.  The longest exported
 * symbol of the 1,046 shared libraries of a Debian 12 development host
 * (libLLVM-15 among them) measured 1,042 bytes. */
#define DEMANGLE_MAX_INPUT (16u * 1024)

/* The readable name of linkage name NAME, malloc'd; NULL when NAME is not
 * a mangled C++ or Rust name, cannot be demangled, is too long, or memory
 * ran out (the caller then shows NAME itself).  A compiler suffix such as
 * `.constprop.0` or `.cold` is kept the way gdb shows it:
 * `f() [clone .constprop.0]`. */
char *demangle_name(const char *name);

/* Writes the name people read for NAME into BUF (LEN bytes, cut to LEN - 1
 * and NUL-terminated when LEN > 0): its demangled form, or NAME itself.
 * Returns the length of the whole name, as snprintf. */
size_t demangle_into(const char *name, char *buf, size_t len);

#endif
