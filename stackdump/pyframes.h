/* pyframes: the Python functions a CPython thread runs, merged with its
 * native frames.  Internal to stackdump/.
 *
 * A CPython thread's C stack shows the interpreter (_PyEval_EvalFrameDefault
 * and its helpers), not the Python code it runs.  That lives in the
 * thread's own state: since 3.11 the interpreter frames
 * (_PyInterpreterFrame) are in the thread's data stack
 * (tstate->datastack_chunk), chained innermost first from the thread's
 * current frame, each naming its code object (co_qualname, co_filename,
 * co_firstlineno, co_linetable) and the instruction it is at.  So a dump of
 * a CPython thread:
 *   1. before the stop (pyframes_prepare): finds the interpreter (the
 *      executable or a mapped libpython3.X.so defining _PyRuntime,
 *      PyCode_Type and Py_Version in .dynsym), its version and the
 *      version's layout, and the thread's PyThreadState
 *      (_PyRuntime.interpreters.head -> threads, matched by
 *      native_thread_id; cached per thread);
 *   2. in the stop (pyframes_in_stop, called by snapshot_take): copies the
 *      thread state and the used part of its data stack, two more
 *      process_vm_readv (~7 us; the frames change with every call and
 *      return, and 1 read in 400 of a running thread's was torn here, none
 *      of 400 of a stopped one's);
 *   3. after the stop (pyframes_merge_stack): walks the frame chain in the
 *      copy (pyframes_walk; a frame outside it -- a generator's, or in an
 *      older chunk -- is read then), reads each code object (immutable:
 *      cached per process and address, checked again each sample) and
 *      replaces each run of interpreter frames of the native stack by the
 *      Python frames it was running (pyframes_merge).
 *
 * A Python frame is a struct stackdump_frame with build_id
 * STACKDUMP_PYTHON, module and file the code's co_filename, symbol its
 * co_qualname, func_offset its co_firstlineno, offset and line the line
 * being run, ip the address of the instruction; its stack hash takes
 * (file, qualified name, first line): the same in every sample, process
 * and host, on whichever line of the function the sample caught it.
 *
 * The target's memory is input from a process that may be broken or
 * hostile: every chain is bounded (frames by max_frames, strings by
 * PYFRAMES_STR_MAX, line tables by PYFRAMES_LINETABLE_MAX), every object's
 * type is checked (ob_type against the interpreter's PyCode_Type,
 * PyUnicode_Type and PyBytes_Type, a string's compact and kind bits), and
 * a loop or a lie ends the walk: the stack keeps its native frames, with
 * the reason.  tests/fuzz/fuzz_pyframes.c feeds the walker made-up memory.
 */
#ifndef CPUMOND_STACKDUMP_PYFRAMES_H
#define CPUMOND_STACKDUMP_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stackdump/modules.h"
#include "stackdump/snapshot.h"
#include "stackdump/stackdump.h"

#define PYFRAMES_STR_MAX        1024          /* bytes of a name or file */
#define PYFRAMES_LINETABLE_MAX  (64u * 1024)  /* bytes of a co_linetable */
/* Bytes of the data stack copied in the stop: its used part, up to the
 * top, at most this much (the frames nearest the top: the innermost).
 * The tests' threads used 480-700 bytes; a frame takes 80 bytes and its
 * locals and value stack. */
#define PYFRAMES_DATA_COPY      (64u * 1024)
#define PYFRAMES_TSTATE_MAX     512           /* bytes of a PyThreadState read */

/* Where a version keeps what the walk reads, in bytes from the start of
 * each struct.  Each version's values come from its own headers (see
 * pylayout.c). */
struct pyframes_layout {
	unsigned version;                 /* 0x030b: 3.11 */
	uint32_t runtime_interpreters_head; /* _PyRuntimeState.interpreters.head */
	uint32_t interp_next;             /* PyInterpreterState.next */
	uint32_t interp_threads_head;     /* PyInterpreterState.threads.head */
	uint32_t tstate_size;             /* bytes read of a PyThreadState */
	uint32_t tstate_next;             /* PyThreadState.next */
	uint32_t tstate_native_thread_id;
	uint32_t tstate_cframe;           /* PyThreadState.cframe (3.11, 3.12) */
	uint32_t tstate_current_frame;    /* PyThreadState.current_frame (3.13+),
	                                     0 when it goes through cframe */
	uint32_t tstate_datastack_chunk;
	uint32_t tstate_datastack_top;
	uint32_t cframe_current_frame;    /* _PyCFrame.current_frame */
	uint32_t frame_size;              /* bytes read of a _PyInterpreterFrame */
	uint32_t frame_code;              /* f_code, f_executable (3.13) */
	uint32_t frame_previous;
	uint32_t frame_instr;             /* prev_instr, instr_ptr (3.13) */
	uint32_t frame_is_entry;          /* is_entry (3.11), 0: none */
	uint32_t frame_owner;
	uint32_t code_size;               /* bytes read of a PyCodeObject: up to
	                                     co_code_adaptive */
	uint32_t code_firstlineno;
	uint32_t code_filename;
	uint32_t code_qualname;
	uint32_t code_linetable;
	uint32_t code_adaptive;           /* co_code_adaptive: the instructions */
	uint32_t str_state;               /* PyASCIIObject.state */
	uint32_t str_length;              /* PyASCIIObject.length */
	uint32_t str_ascii_size;          /* sizeof(PyASCIIObject): ASCII data */
	uint32_t str_compact_size;        /* sizeof(PyCompactUnicodeObject) */
	uint32_t bytes_size;              /* PyVarObject.ob_size of a bytes */
	uint32_t bytes_sval;              /* PyBytesObject.ob_sval */
	bool str_ready_bit;               /* state has the 3.11 "ready" bit */
};

/* The layout of CPython VERSION (PY_VERSION_HEX >> 16: 0x030b, 0x030c), or
 * NULL when pyframes has no table for it (3.13 publishes its own:
 * pyframes_layout_from_debug). */
const struct pyframes_layout *pyframes_layout(unsigned version);

/* The layout of CPython 3.13 (VERSION 0x030d) from IMAGE, the first LEN
 * bytes of its _PyRuntime: the _Py_DebugOffsets it starts with (cookie
 * "xdebugpy", the version, not free-threaded), each offset checked to
 * leave its field inside what the walk reads.  Returns 0, or -EINVAL with
 * WHY (WHYSZ bytes) saying what did not hold. */
int pyframes_layout_from_debug(const void *image, size_t len, unsigned version,
                               struct pyframes_layout *out, char *why, size_t whysz);

/* The bytes of _PyRuntime pyframes_layout_from_debug reads. */
size_t pyframes_debug_offsets_size(void);

/* What is known about one process's interpreter (opaque). */
struct pyframes_proc;

/* What the stop copies: filled by pyframes_in_stop. */
struct pyframes_copy {
	/* Set by pyframes_prepare for the dump. */
	const struct pyframes_layout *lay;
	uint64_t tstate;                  /* the thread's PyThreadState */
	pid_t tid;
	/* Set in the stop. */
	bool ok;                          /* the thread state was read */
	unsigned char ts[PYFRAMES_TSTATE_MAX];
	uint64_t current_frame;           /* the innermost _PyInterpreterFrame */
	uint64_t data_addr;               /* target address of data[0] */
	size_t data_len;
	unsigned char *data;              /* PYFRAMES_DATA_COPY bytes */
	/* The C stack copied in the stop, where 3.12's and 3.13's shim frames
	 * are (the snapshot's buffer). */
	const unsigned char *stack;
	uint64_t stack_addr;
	size_t stack_len;
	uint64_t ns;                      /* how long the reads took */
	char why[160];                    /* why nothing was read, "" */
};

/* Allocates C's buffer (so that the stop allocates nothing).  Returns 0 or
 * -ENOMEM. */
int pyframes_copy_init(struct pyframes_copy *c);
void pyframes_copy_free(struct pyframes_copy *c);

/* Before the stop of thread TID of the process of AS: whether it is a
 * CPython thread whose frames this version lets us read.  Finds (once per
 * change of its mapped modules) the interpreter, and (once per thread)
 * the thread's state; sets C up for pyframes_in_stop.  *PP is created on
 * first use (free it with pyframes_proc_free).  Returns 0 when the stop
 * should copy, -ENOENT when the process or thread is not CPython's (or not
 * yet: no thread state), -ENOTSUP for a version whose layout is unknown
 * (*WHY says so, once per process: the caller logs it), -ENOMEM. */
int pyframes_prepare(struct pyframes_proc **pp, const struct addrspace *as, pid_t tid,
                     struct pyframes_copy *c, char *why, size_t whysz);

/* Inside the stop (struct snapshot's in_stop): copies the thread state and
 * the used part of the data stack of the stopped thread TID into ARG, a
 * struct pyframes_copy; the current frame from SNAP's copy of the C stack
 * when the _PyCFrame is there.  No allocation, no file. */
void pyframes_in_stop(void *arg, pid_t tid, const struct snapshot *snap);

/* After the stop: walks the frames copied in C, reads their code objects
 * and merges them into the native frames of OUT (at most MAX_FRAMES),
 * rehashing it.  When the walk fails, OUT keeps its native frames and, if
 * it had none, OUT->error says why ("python frames: ...").  Returns 0 or
 * -ENOMEM. */
int pyframes_merge_stack(struct pyframes_proc *pp, const struct addrspace *as,
                         const struct pyframes_copy *c, size_t max_frames,
                         struct stackdump_stack *out);

/* Whether AS's process runs a CPython this version supports, for the
 * doctor: 1 yes, 0 no CPython, -ENOTSUP an unknown version; VERSION gets
 * "3.11.2" or "" (LEN bytes). */
int pyframes_describe(struct pyframes_proc **pp, const struct addrspace *as, char *version,
                      size_t len);

void pyframes_proc_free(struct pyframes_proc *pp);

/* ---- the pure parts, for the tests and the fuzzer ---- */

/* The target's memory: LEN bytes at ADDR into BUF; 0 or -EFAULT. */
struct pyframes_mem {
	int (*read)(void *arg, uint64_t addr, void *buf, size_t len);
	void *arg;
};

/* The type objects the walk checks ob_type against (their addresses in
 * the target). */
struct pyframes_types {
	uint64_t code, unicode, bytes;
};

/* One Python frame, innermost first. */
struct pyframes_frame {
	uint64_t frame;                   /* the _PyInterpreterFrame's address */
	uint64_t code;                    /* the code object's address */
	uint64_t instr;                   /* the instruction's address */
	const char *qualname, *filename;  /* in the cache: valid until the next walk */
	int firstlineno, line;
	bool entry;                       /* the first frame one C call of the
	                                     interpreter ran: the run of Python
	                                     frames of one _PyEval_EvalFrameDefault
	                                     ends here */
};

/* Code objects already read: names and line tables, per address. */
struct pyframes_cache;
struct pyframes_cache *pyframes_cache_new(void);
void pyframes_cache_free(struct pyframes_cache *cache);

/* Walks the frame chain of C (a thread state and data stack copied by
 * pyframes_in_stop, or made up) under layout C->lay: frames in C's data
 * copy from it, others, the code objects and their strings through MEM.
 * At most MAX frames into OUT, *N of them; *COMPLETE when it reached the
 * chain's end.  Returns 0, or -EINVAL with WHY saying what did not hold
 * (the frames are then not to be used), -ENOMEM. */
int pyframes_walk(const struct pyframes_copy *c, const struct pyframes_types *types,
                  const struct pyframes_mem *mem, struct pyframes_cache *cache, size_t max,
                  struct pyframes_frame *out, size_t *n, bool *complete, char *why,
                  size_t whysz);

/* The line of the instruction at byte offset ADDRQ of the code, from
 * co_linetable TABLE (LEN bytes, 3.11's location table: see
 * Objects/locations.md) and co_firstlineno FIRST; FIRST when the table
 * says nothing of it. */
int pyframes_line(const unsigned char *table, size_t len, int first, int addrq);

/* One frame of a merged stack: native frame INDEX, or Python frame INDEX. */
struct pyframes_slot {
	bool python;
	size_t index;
};

/* Merges the Python frames PY (NPY, innermost first, grouped by their
 * entry flags; COMPLETE: the whole chain) into the native frames NATIVE
 * (N, innermost first; NATIVE_COMPLETE: the unwind reached the outermost
 * frame) of an interpreter whose frames have module INTERP: each run of
 * consecutive INTERP frames that holds _PyEval_EvalFrameDefault frames is
 * replaced by the groups of Python frames those ran, one group per
 * _PyEval_EvalFrameDefault, in order; the interpreter's other frames of the
 * run (calls, argument passing, the object protocol, the arithmetic of the
 * innermost line) go, so that the samples of one Python loop are one
 * stack.  Frames of other modules (C extensions, libc) stay where they
 * are, between the Python frames that called them and those they call.
 * The groups are taken innermost first; when both NATIVE and PY are
 * complete and PY has fewer groups than NATIVE calls, outermost first,
 * so that a thread caught inside a call's prologue (its frame not pushed
 * yet) keeps its callers right.  A run with a call left without a group
 * stays native.  At most MAX slots into OUT, *NOUT of them; *TRUNCATED
 * when some were cut. */
void pyframes_merge(const struct stackdump_frame *native, size_t n, bool native_complete,
                    const char *interp, const struct pyframes_frame *py, size_t npy,
                    bool complete, size_t max, struct pyframes_slot *out, size_t *nout,
                    bool *truncated);

#endif
