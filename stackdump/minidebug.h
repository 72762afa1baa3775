/* minidebug: the xz decoder for MiniDebugInfo (.gnu_debugdata).
 *
 * Internal to stackdump/.  Fedora, CentOS and others strip .symtab from
 * their binaries but keep an xz-compressed ELF in .gnu_debugdata holding the
 * function symbols that .dynsym lacks (gdb and elfutils read it too).
 */
#ifndef CPUMOND_STACKDUMP_MINIDEBUG_H
#define CPUMOND_STACKDUMP_MINIDEBUG_H

#include <stddef.h>

/* Decompresses the xz stream IN (LEN bytes) into a new buffer of at most
 * MAX_OUT bytes.  Returns 0 with *OUT (free it) and *OUTLEN, -ENOMEM, or
 * -ENOEXEC when the stream is corrupt, truncated or larger than MAX_OUT. */
int minidebug_decompress(const void *in, size_t len, size_t max_out,
                         unsigned char **out, size_t *outlen);

#endif
