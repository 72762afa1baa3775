/* pylayout: where each CPython version keeps what pyframes reads.  See
 * pyframes.h and pyframes_internal.h. */
#include "stackdump/pyframes_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Whether a field of WIDTH bytes at offset OFF lies within SIZE bytes. */
static bool fits(uint64_t off, uint64_t width, uint64_t size)
{
	return size >= width && off <= size - width;
}

/* ---- layouts ----
 *
 * CPython 3.11, from its own headers (Debian 12's python3.11-dev 3.11.2,
 * /usr/include/python3.11), computed with offsetof by
 * tests/stackdump/pyoffsets.c, which test_languages.py compiles against
 * the installed headers and compares with this table:
 *   runtime_interpreters_head  internal/pycore_runtime.h  _PyRuntimeState.interpreters.head
 *   interp_next, interp_threads_head  internal/pycore_interp.h  struct _is: next, threads.head
 *   tstate_*                   cpython/pystate.h  struct _ts: next, native_thread_id,
 *                              cframe, datastack_chunk, datastack_top (tstate_size: up to
 *                              datastack_limit, the last field read)
 *   cframe_current_frame       cpython/pystate.h  _PyCFrame.current_frame
 *   frame_*                    internal/pycore_frame.h  _PyInterpreterFrame: f_code,
 *                              previous, prev_instr, is_entry, owner (frame_size: up to
 *                              localsplus)
 *   code_*                     cpython/code.h  PyCodeObject: co_firstlineno, co_filename,
 *                              co_qualname, co_linetable, co_code_adaptive
 *   str_*                      cpython/unicodeobject.h  PyASCIIObject.state, .length,
 *                              sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject)
 *   bytes_*                    object.h PyVarObject.ob_size, cpython/bytesobject.h
 *                              PyBytesObject.ob_sval
 * The layout of these structs is fixed within a minor version (CPython
 * keeps its ABI within 3.11.x).  3.12 the same way, from 3.12.1's headers
 * (pyenv's build here); its frames have no is_entry: one C call of the
 * interpreter pushes a shim frame owned by the C stack below the frames
 * it runs.  3.13 publishes its own offsets (struct debug_offsets). */
static const struct pyframes_layout layout_311 = {
	.version = 0x030b,
	.runtime_interpreters_head = 40,
	.interp_next = 0,
	.interp_threads_head = 16,
	.tstate_size = 320,
	.tstate_next = 8,
	.tstate_native_thread_id = 160,
	.tstate_cframe = 56,
	.tstate_current_frame = 0,
	.tstate_datastack_chunk = 296,
	.tstate_datastack_top = 304,
	.cframe_current_frame = 8,
	.frame_size = 72,
	.frame_code = 32,
	.frame_previous = 48,
	.frame_instr = 56,
	.frame_is_entry = 68,
	.frame_owner = 69,
	.code_size = 184,
	.code_firstlineno = 72,
	.code_filename = 112,
	.code_qualname = 128,
	.code_linetable = 136,
	.code_adaptive = 184,
	.str_state = 32,
	.str_length = 16,
	.str_ascii_size = 48,
	.str_compact_size = 72,
	.bytes_size = 16,
	.bytes_sval = 32,
	.str_ready_bit = true,
};

static const struct pyframes_layout layout_312 = {
	.version = 0x030c,
	.runtime_interpreters_head = 40,
	.interp_next = 0,
	.interp_threads_head = 72,
	.tstate_size = 256,
	.tstate_next = 8,
	.tstate_native_thread_id = 144,
	.tstate_cframe = 56,
	.tstate_current_frame = 0,
	.tstate_datastack_chunk = 232,
	.tstate_datastack_top = 240,
	.cframe_current_frame = 0,
	.frame_size = 72,
	.frame_code = 0,
	.frame_previous = 8,
	.frame_instr = 56,
	.frame_is_entry = 0,
	.frame_owner = 70,
	.code_size = 192,
	.code_firstlineno = 68,
	.code_filename = 112,
	.code_qualname = 128,
	.code_linetable = 136,
	.code_adaptive = 192,
	.str_state = 32,
	.str_length = 16,
	.str_ascii_size = 40,
	.str_compact_size = 56,
	.bytes_size = 16,
	.bytes_sval = 32,
	.str_ready_bit = false,
};

const struct pyframes_layout *pyframes_layout(unsigned version)
{
	static const struct pyframes_layout *const all[] = { &layout_311, &layout_312 };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i]->version == version)
			return all[i];
	return NULL;
}

size_t pyframes_debug_offsets_size(void)
{
	return sizeof(struct debug_offsets);
}

int pyframes_layout_from_debug(const void *image, size_t len, unsigned version,
                               struct pyframes_layout *L, char *why, size_t whysz)
{
	struct debug_offsets d;

	if (len < sizeof(d)) {
		snprintf(why, whysz, "its debug offsets are cut short");
		return -EINVAL;
	}
	memcpy(&d, image, sizeof(d));
	if (memcmp(d.cookie, "xdebugpy", 8) != 0 || (d.version >> 16) != version) {
		snprintf(why, whysz, "its _PyRuntime does not start with 3.13's debug offsets");
		return -EINVAL;
	}
	if (d.free_threaded) {
		snprintf(why, whysz, "a free-threaded build");
		return -EINVAL;
	}
	*L = (struct pyframes_layout){
		.version = version,
		.runtime_interpreters_head = (uint32_t)d.runtime_state.interpreters_head,
		.interp_next = (uint32_t)d.interpreter_state.next,
		.interp_threads_head = (uint32_t)d.interpreter_state.threads_head,
		.tstate_next = (uint32_t)d.thread_state.next,
		.tstate_native_thread_id = (uint32_t)d.thread_state.native_thread_id,
		.tstate_current_frame = (uint32_t)d.thread_state.current_frame,
		.tstate_datastack_chunk = (uint32_t)d.thread_state.datastack_chunk,
		/* Not published: datastack_top and datastack_limit follow
		 * datastack_chunk in struct _ts of 3.11 to 3.13 (pyoffsets.c
		 * checks it against the headers). */
		.tstate_datastack_top = (uint32_t)d.thread_state.datastack_chunk + 8,
		.tstate_size = (uint32_t)d.thread_state.datastack_chunk + 24,
		.frame_size = (uint32_t)d.frame.localsplus,
		.frame_code = (uint32_t)d.frame.executable,
		.frame_previous = (uint32_t)d.frame.previous,
		.frame_instr = (uint32_t)d.frame.instr_ptr,
		.frame_owner = (uint32_t)d.frame.owner,
		.code_size = (uint32_t)d.code_object.co_code_adaptive,
		.code_firstlineno = (uint32_t)d.code_object.firstlineno,
		.code_filename = (uint32_t)d.code_object.filename,
		.code_qualname = (uint32_t)d.code_object.qualname,
		.code_linetable = (uint32_t)d.code_object.linetable,
		.code_adaptive = (uint32_t)d.code_object.co_code_adaptive,
		.str_state = (uint32_t)d.unicode_object.state,
		.str_length = (uint32_t)d.unicode_object.length,
		.str_ascii_size = (uint32_t)d.unicode_object.asciiobject_size,
		/* PyCompactUnicodeObject: utf8_length and utf8 after it. */
		.str_compact_size = (uint32_t)d.unicode_object.asciiobject_size + 16,
		.bytes_size = (uint32_t)d.bytes_object.ob_size,
		.bytes_sval = (uint32_t)d.bytes_object.ob_sval,
	};
	/* Each offset must leave its field inside what the walk reads: checked
	 * on the 64-bit values as published (an offset near 2^64 must not wrap
	 * round to a small one, nor a size be cut to 32 bits). */
	bool ok = d.pyobject.ob_type == OB_TYPE && d.runtime_state.interpreters_head < (1u << 20) &&
	          d.interpreter_state.next < (1u << 20) && d.interpreter_state.threads_head < (1u << 20) &&
	          d.thread_state.datastack_chunk <= PYFRAMES_TSTATE_MAX - 24 &&
	          fits(d.thread_state.next, 8, L->tstate_size) &&
	          fits(d.thread_state.native_thread_id, 8, L->tstate_size) &&
	          fits(d.thread_state.current_frame, 8, L->tstate_size) && L->tstate_current_frame &&
	          d.frame.localsplus <= 256 && fits(d.frame.previous, 8, d.frame.localsplus) &&
	          fits(d.frame.executable, 8, d.frame.localsplus) &&
	          fits(d.frame.instr_ptr, 8, d.frame.localsplus) &&
	          fits(d.frame.owner, 1, d.frame.localsplus) &&
	          d.code_object.co_code_adaptive <= 256 &&
	          fits(d.code_object.filename, 8, d.code_object.co_code_adaptive) &&
	          fits(d.code_object.qualname, 8, d.code_object.co_code_adaptive) &&
	          fits(d.code_object.linetable, 8, d.code_object.co_code_adaptive) &&
	          fits(d.code_object.firstlineno, 4, d.code_object.co_code_adaptive) &&
	          d.unicode_object.asciiobject_size <= 128 - 16 &&
	          fits(d.unicode_object.state, 4, d.unicode_object.asciiobject_size) &&
	          fits(d.unicode_object.length, 8, d.unicode_object.asciiobject_size) &&
	          d.bytes_object.ob_sval <= 64 && fits(d.bytes_object.ob_size, 8, d.bytes_object.ob_sval);
	if (!ok) {
		snprintf(why, whysz, "its debug offsets are out of range");
		return -EINVAL;
	}
	return 0;
}
