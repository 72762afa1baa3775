/* pyframes_internal: what the files of pyframes share besides pyframes.h,
 * for them only (everything else uses pyframes.h).
 *
 *   pyframes.c  finding the interpreter and the thread's state before the
 *               stop (pyframes_prepare, pyframes_describe), the copy in the
 *               stop (pyframes_in_stop), the merge with the native frames
 *               (pyframes_merge, pyframes_merge_stack)
 *   pylayout.c  each version's layout: the tables of 3.11 and 3.12
 *               (pyframes_layout) and 3.13's from its _Py_DebugOffsets
 *               (pyframes_layout_from_debug)
 *   pywalk.c    the walk of the frame chain over the target's memory
 *               (pyframes_walk): code objects, their strings and line tables
 *               (pyframes_line), the cache of them
 */
#ifndef CPUMOND_STACKDUMP_PYFRAMES_INTERNAL_H
#define CPUMOND_STACKDUMP_PYFRAMES_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stackdump/pyframes.h"

/* CPython 3.13's _Py_DebugOffsets (internal/pycore_runtime.h of 3.13.0),
 * which _PyRuntime starts with: the version's own offsets, for debuggers.
 * Its shape changes between minor versions (3.14 adds fields): it is read
 * for 3.13 only, with its cookie, version and build checked.
 * pylayout.c turns it into a layout; pyframes.c reads its size of the
 * target's _PyRuntime. */
struct debug_offsets {
	char cookie[8];                   /* "xdebugpy" */
	uint64_t version, free_threaded;
	struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
	struct {
		uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
		         ceval_gil, gil_runtime_state, gil_runtime_state_enabled,
		         gil_runtime_state_locked, gil_runtime_state_holder;
	} interpreter_state;
	struct {
		uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
		         datastack_chunk, status;
	} thread_state;
	struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } frame;
	struct {
		uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
		         localsplusnames, localspluskinds, co_code_adaptive;
	} code_object;
	struct { uint64_t size, ob_type; } pyobject;
	struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
	struct { uint64_t size, ob_item, ob_size; } tuple_object, list_object;
	struct { uint64_t size, ma_keys, ma_values; } dict_object;
	struct { uint64_t size, ob_fval; } float_object;
	struct { uint64_t size, lv_tag, ob_digit; } long_object;
	struct { uint64_t size, ob_size, ob_sval; } bytes_object;
	struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
};

/* PyObject.ob_type, the same in every version: 3.13's debug offsets must
 * say so (pylayout.c), and the walk checks each object's type there
 * (pywalk.c). */
#define OB_TYPE 8

/* Writes FMT's text into WHY (WHYSZ bytes): what did not hold (the walk's
 * reasons, pywalk.c; an interpreter's that is not read, pyframes.c). */
__attribute__((format(printf, 3, 4)))
static inline void say(char *why, size_t whysz, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whysz, fmt, ap);
	va_end(ap);
}

/* The 8 bytes at P, a word of a copied object (the target's byte order is
 * ours): the walk's frames and objects, the stop's thread state. */
static inline uint64_t word(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

#endif
