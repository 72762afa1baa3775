/* pyoffsets: prints the layout stackdump/pylayout.c keeps for the CPython
 * whose headers it is compiled against, from those headers, one
 * "field value" line per field of struct pyframes_layout:
 *
 *   cc $(python3.11-config --includes) -o pyoffsets tests/stackdump/pyoffsets.c
 *
 * tests/integration/test_languages.py compiles it against each CPython
 * installed and compares its lines with pylayout.c's table of that
 * version, so that a number copied wrong is a failed test. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>

#include <stddef.h>
#include <stdio.h>

#define P(name, value) printf("%s %zu\n", name, (size_t)(value))
#define END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

int main(void)
{
	printf("version 0x%04x\n", PY_VERSION_HEX >> 16);
	P("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
	P("interp_next", offsetof(PyInterpreterState, next));
	P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
	P("tstate_size", END(PyThreadState, datastack_limit));
	P("tstate_next", offsetof(PyThreadState, next));
	P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#if PY_VERSION_HEX < 0x030d0000
	P("tstate_cframe", offsetof(PyThreadState, cframe));
	P("tstate_current_frame", 0);
	P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
#else
	P("tstate_cframe", 0);
	P("tstate_current_frame", offsetof(PyThreadState, current_frame));
	P("cframe_current_frame", 0);
#endif
	P("tstate_datastack_chunk", offsetof(PyThreadState, datastack_chunk));
	P("tstate_datastack_top", offsetof(PyThreadState, datastack_top));
	P("frame_size", offsetof(_PyInterpreterFrame, localsplus));
#if PY_VERSION_HEX < 0x030d0000
	P("frame_code", offsetof(_PyInterpreterFrame, f_code));
	P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
	P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
	P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
	P("frame_previous", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX < 0x030c0000
	P("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#else
	P("frame_is_entry", 0);
#endif
	P("frame_owner", offsetof(_PyInterpreterFrame, owner));
	P("code_size", offsetof(PyCodeObject, co_code_adaptive));
	P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
	P("code_filename", offsetof(PyCodeObject, co_filename));
	P("code_qualname", offsetof(PyCodeObject, co_qualname));
	P("code_linetable", offsetof(PyCodeObject, co_linetable));
	P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
	P("str_state", offsetof(PyASCIIObject, state));
	P("str_length", offsetof(PyASCIIObject, length));
	P("str_ascii_size", sizeof(PyASCIIObject));
	P("str_compact_size", sizeof(PyCompactUnicodeObject));
	P("bytes_size", offsetof(PyVarObject, ob_size));
	P("bytes_sval", offsetof(PyBytesObject, ob_sval));
	return 0;
}
