/* stackdump: stop one thread, copy its registers and live stack, let it go,
 * then unwind the copy.
 *
 * A small library with no knowledge of the configuration or the database,
 * and the engine of the standalone `stackdump TID` command.  The thread is
 * stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (the other threads of its
 * process keep running) only for the copy, and detached before the unwind
 * and before stackdump_thread returns --
 * except a thread that does not stop within 100 ms: the kernel cannot take
 * back an interrupt, so it stays traced and is detached by a later call
 * (stackdump_poll, stackdump_thread, stackdump_forget, stackdump_free) as
 * soon as it stops.  A ptrace tracer is a thread, not a process: use one
 * struct stackdump from one thread only.  If the caller exits, the kernel
 * detaches whatever it still traces.
 */
#ifndef CPUMOND_STACKDUMP_H
#define CPUMOND_STACKDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/user.h>

#define STACKDUMP_MAX_FRAMES 1024

/* Bytes of stack copied while the thread is stopped, from 128 bytes below
 * its stack pointer up (never past the end of its stack mapping).  Hot
 * threads' live stacks measured ~5 KB; 200 frames of a small recursive
 * function ~10 KB.  The copy costs 1-5 µs for 4-64 KiB. */
#define STACKDUMP_STACK_COPY_DEFAULT (64u * 1024)
#define STACKDUMP_STACK_COPY_MIN     (4u * 1024)
#define STACKDUMP_STACK_COPY_MAX     (1024u * 1024)

/* One frame.  ip is the absolute address (changes with ASLR); the rest is
 * relative to the module, so it is the same at every load address. */
struct stackdump_frame {
	uint64_t ip;             /* absolute instruction pointer */
	uint64_t offset;         /* ip - module load bias: offset in the module */
	uint64_t func_offset;    /* start of the function (FDE initial location)
	                            as a module offset; == offset when no unwind
	                            table covers the ip */
	char *module;            /* path of the mapping ("[vdso]", "?" if none) */
	char *build_id;          /* GNU build-id as lowercase hex, "" if none */
	char *symbol;            /* function name, NULL when unknown */
	uint64_t symbol_offset;  /* ip - symbol start, valid when symbol */
	/* Set by the readers' names at read time (symbolize.h), never
	 * stored: */
	char *file;              /* source file, NULL when unknown */
	unsigned line;           /* its line, 0 when unknown */
	bool inlined;            /* a call inlined into the next frame, which
	                            has the same ip */
};

/* Frames of code no ELF file describes carry one of these as build_id (a
 * real build-id is hex):
 *   STACKDUMP_PYTHON  a Python function (pyframes.h): module and file its
 *     code's co_filename, symbol its qualified name, func_offset its first
 *     line, offset and line the line being run (file and line set when
 *     the stack is taken; the line is stored as the offset), symbol_offset
 *     the lines between them, ip the address of its bytecode instruction;
 *   STACKDUMP_JIT  code a JIT compiled, named from the process's perf map
 *     (perfmap.h): module the map ("/tmp/perf-4242.map"), symbol the map's
 *     name, func_offset 0, offset and symbol_offset the ip's from the
 *     start of the map's entry. */
#define STACKDUMP_PYTHON "python"
#define STACKDUMP_JIT    "jit"

struct stackdump_stack {
	struct stackdump_frame *frames;  /* innermost first */
	size_t nframes;
	bool truncated;          /* max_frames was reached before the outermost frame */
	bool stack_short;        /* the unwind needed stack beyond the copy (error
	                            says "the stack is deeper than ... copied") */
	size_t stack_used;       /* how much of the stack copy the unwind read:
	                            bytes from the copy's start (about the stack
	                            pointer) to the end of the highest word read,
	                            the outermost frame's return address when the
	                            unwind went all the way; what a copy of this
	                            thread at this depth needs to hold
	                            (perfsample_adapt) */
	uint64_t hash;           /* stackdump_hash() of the frames; 0 when nframes == 0 */
	uint64_t stop_ns;        /* how long the thread was stopped (interrupt..detach),
	                            also set when the dump failed after the stop */
	uint64_t stop_start_ns;  /* CLOCK_MONOTONIC at the interrupt, 0 when the
	                            thread was not stopped */
	unsigned long long process_start;  /* the process's start time (stat field
	                            22 of its leader, clock ticks since boot), the same
	                            before and after the stop; 0 when not read */
	char error[256];         /* "" on success, else why there is no (full) stack */
};

struct stackdump;            /* per-daemon state: caches per process */

/* Returns a new dumper, or NULL with errno set. */
struct stackdump *stackdump_new(void);
void stackdump_free(struct stackdump *sd);

/* Sets how many bytes of stack a dump copies (STACKDUMP_STACK_COPY_MIN..
 * STACKDUMP_STACK_COPY_MAX, default STACKDUMP_STACK_COPY_DEFAULT).  A stack
 * deeper than that is unwound as far as the copy goes, with OUT->error
 * saying so.  Returns 0, -EINVAL or -ENOMEM (the old size stays). */
int stackdump_set_stack_copy(struct stackdump *sd, size_t bytes);

/* Dumps thread TID of process PID: stops it, copies its registers and
 * stack, detaches, then unwinds at most MAX_FRAMES (1..STACKDUMP_MAX_FRAMES)
 * frames from the copy.  Returns 0 with a stack in
 * *OUT, or a negative errno with OUT->error saying why in words a user can
 * act on, for example:
 *   -EPERM   "cannot attach to tid 4242: operation not permitted (TracerPid 311: gdb)"
 *   -ESRCH   "tid 4242 exited", "tid 4242 exited during the dump"
 *   -EAGAIN  "tid 4242 is in uninterruptible sleep (D)" (not interrupted)
 *   -ETIMEDOUT  it did not stop within 100 ms (see stackdump_poll)
 * A partial unwind still returns 0, with the frames found and OUT->error
 * "unwind stopped after N frames: ..." (for example "...: the stack is
 * deeper than the 65536 bytes copied").  OUT->stop_ns and stop_start_ns are
 * set whenever the thread was stopped.  OUT is always initialised and must
 * be released with stackdump_stack_free, also on failure. */
int stackdump_thread(struct stackdump *sd, pid_t pid, pid_t tid, int max_frames,
                     struct stackdump_stack *out);

/* A thread's registers and a copy of its stack that someone else took
 * while it ran on, with no ptrace stop: the kernel at a perf sampling
 * interrupt (PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER), or the sp
 * and pc of /proc/TID/syscall with a process_vm_readv copy for a thread
 * that must not be stopped (in D).  Registers not known are 0; the
 * unwinder needs ip and sp, and bp for every frame whose unwind rule
 * starts from it (code built with frame pointers: CFA = bp + 16): without
 * bp the unwind ends at the first such frame. */
struct stackdump_copy {
	struct user_regs_struct regs;
	uint64_t stack_addr;        /* target address of stack[0] */
	unsigned char *stack;       /* the copy, stack_len bytes (only read) */
	size_t stack_len;
	bool stack_clipped;         /* the copy ends where the stack mapping does,
	                               not at a cap */
	uint64_t time_ns;           /* CLOCK_MONOTONIC when it was taken */
};

/* Unwinds COPY, a copy of thread TID of process PID taken while it ran
 * (struct stackdump_copy), as stackdump_thread unwinds its own, with the
 * same frames, names and hash for the same registers and stack; the thread
 * is not stopped (OUT->stop_ns is 0, stop_start_ns is COPY->time_ns) and a
 * thread in D is unwound too.  Python frames need their memory copied in a
 * stop, so this gives native and JIT frames only.  Returns as
 * stackdump_thread does (never -ETIMEDOUT or -EAGAIN). */
int stackdump_thread_copy(struct stackdump *sd, pid_t pid, pid_t tid,
                          const struct stackdump_copy *copy, int max_frames,
                          struct stackdump_stack *out);

/* Takes the copy of thread TID of process PID that stackdump_thread_copy
 * unwinds, without stopping it, when it is blocked (asleep in a syscall
 * or a page fault, in S or D): its user pc and stack pointer from
 * /proc/TID/syscall (the registers the thread entered the kernel with, as
 * ptrace's rip and rsp), checked to be in executable and in writable
 * memory of PID's maps, and a process_vm_readv copy of BYTES of its stack
 * (STACKDUMP_STACK_COPY_MIN..MAX) from 128 bytes below the stack pointer,
 * no further than its mapping; the syscall file read again after the copy
 * must be the same, or the thread moved.  Reads /proc/PID/maps and PID's
 * memory, which wait for PID's memory-map lock: a caller that must not
 * block runs it where it can be abandoned (cpumond's stall probe).
 * Returns 0 with *OUT (release with stackdump_copy_free), or -EAGAIN (it
 * runs: no registers without a stop), -EPERM, -ESRCH, -EINVAL (the pc or
 * sp is not where a user thread's are), -ENOMEM, with ERR saying why. */
int stackdump_copy_blocked(pid_t pid, pid_t tid, size_t bytes, struct stackdump_copy *out,
                           char *err, size_t errlen);
void stackdump_copy_free(struct stackdump_copy *copy);

/* stackdump_copy_blocked, then stackdump_thread_copy of it, into *OUT.
 * rbp is not in the syscall file: when the unwind stops short, it is
 * tried again with each of the first 8 stack slots above sp that look
 * like a frame pointer (the next word an address in executable memory),
 * and the deepest unwind is kept (code built with frame pointers finds
 * its frames by rbp).  Returns as stackdump_thread_copy, or the error of
 * stackdump_copy_blocked with OUT->error saying why (OUT initialised). */
int stackdump_thread_blocked(struct stackdump *sd, pid_t pid, pid_t tid, size_t bytes,
                             int max_frames, struct stackdump_stack *out);

/* Forgets what is cached for process PID (call when it exits). */
void stackdump_forget(struct stackdump *sd, pid_t pid);

/* Detaches the threads that did not stop in time for an earlier dump and
 * have stopped since (waitpid WNOHANG, never blocks), and drops the caches
 * of processes that exited.  Call once per cycle of the main loop.  Returns
 * how many threads are still waiting to stop. */
int stackdump_poll(struct stackdump *sd);

void stackdump_stack_free(struct stackdump_stack *st);

/* Python and JIT frames (pyframes.h, perfmap.h) in the stacks, or native
 * frames only (ON false; the default is true): make bench compares the
 * stop times. */
void stackdump_set_language_frames(struct stackdump *sd, bool on);

/* NOTE is called with what the user should know about a process, once:
 * a CPython whose frames cannot be read ("python frames of python3.9 are
 * not read: CPython before 3.11 ...").  A line without newline; NULL: not
 * said. */
void stackdump_set_note(struct stackdump *sd, void (*note)(const char *msg, void *arg),
                        void *arg);

/* How long the last dump's Python reads took inside its stop (ns), 0 when
 * it made none: the part of stop_ns they add. */
uint64_t stackdump_language_stop_ns(const struct stackdump *sd);

/* Copies frame SRC to *DST with copies of its strings.  Returns 0, or
 * -ENOMEM with *DST owning what was copied (free it as a frame of a
 * stack). */
int stackdump_frame_copy(struct stackdump_frame *dst, const struct stackdump_frame *src);

/* 64-bit hash of the frames' (build-id, or module path when there is no
 * build-id; func_offset) pairs, so the same code path hashes the same at any
 * load address and whichever instruction of the function was caught.
 * Never returns 0 for nframes > 0.  The hashes are stored: the algorithm is
 * fixed, FNV-1a 64 over, per frame, the key's bytes, a NUL byte and
 * func_offset as 8 little-endian bytes; a result of 0 becomes 1.  The key
 * of a STACKDUMP_PYTHON frame is "python", NUL, its file, NUL, its
 * qualified name (and func_offset its first line): a Python function is
 * the same everywhere, whichever line was caught.  The key of a
 * STACKDUMP_JIT frame is "jit", NUL, its name without V8's tier mark
 * (perfmap_identity; func_offset 0): JIT code is at other addresses in
 * every run and compiled again as it warms up, its name stays. */
uint64_t stackdump_hash(const struct stackdump_frame *frames, size_t nframes);

/* A frame is spelled one of two ways, by what it stands for:
 *   an instruction: "symbol+0xOFF (module)", OFF from the symbol's start,
 *     or "module+0xOFF", OFF from the module's start, when there is no
 *     symbol (the module as stored, a path) -- as pstack and eu-stack print
 *     the exact pc: stackdump, cpumond tail; a call inlined there is
 *     "symbol [inlined] (module)", and " at FILE:LINE" (the source file's
 *     name) follows when the line is known; a Python function's
 *     (STACKDUMP_PYTHON) is "qualname (file:LINE)", at the line it runs;
 *   a function: "symbol", or "module@0xSTART", START the function's start
 *     (func_offset) in the module, when there is no symbol (the module's
 *     file name) -- a place many samples share: cpumond report, folded
 *     stacks, the flame graph, the journal.
 * So "+0x" always means one instruction and "@0x" one function.  C++ and
 * Rust symbols are shown demangled (demangle.h), as gdb prints them; the
 * frame keeps the linkage name. */

/* Writes frame F as an instruction, without a newline; names escaped as by
 * stackdump_put_escaped.  A NULL or "" module is "?", a "" symbol none. */
void stackdump_put_frame(const struct stackdump_frame *f, FILE *out);

/* Writes frame F's function to BUF, cut to LEN - 1 bytes (nothing when LEN
 * is 0), bytes as they are (escape them for a terminal).  Returns the
 * length of the whole name, as snprintf. */
size_t stackdump_function_name(const struct stackdump_frame *f, char *buf, size_t len);

/* The file name of path MODULE, a module's or a source file's ("/usr/lib/libc.so.6": "libc.so.6"),
 * MODULE itself when it has no '/' ("[vdso]"), "?" when NULL or "". */
const char *stackdump_module_file(const char *module);

/* Prints "#N " and each frame as an instruction (stackdump_put_frame), one
 * line each, prefixed by INDENT. */
void stackdump_print(const struct stackdump_stack *st, const char *indent, FILE *out);

/* Writes S to OUT with control bytes (< 0x20, 0x7f, and the C1 controls
 * U+0080..U+009F), bytes that are not valid UTF-8 and the backslash written
 * as \xNN (a backslash as \\), so a hostile name cannot drive the terminal.
 * Used by every human-readable printer. */
void stackdump_put_escaped(const char *s, FILE *out);

/* Length of the valid UTF-8 sequence at S (1..4), 0 when S does not start
 * one (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
 * Reads no further than the terminating NUL. */
int stackdump_utf8_len(const char *s);

/* Where distributions install separate debug files (libc6-dbg, -dbgsym
 * packages), found by build-id below it: .build-id/NN/REST.debug. */
#define STACKDUMP_DEBUG_DIR "/usr/lib/debug"

/* Where a module's function names and unwind tables come from. */
struct stackdump_sources {
	char build_id[129];         /* GNU build-id, lowercase hex; "" when none */
	const char *symbols;        /* the names: ".symtab"; ".dynsym" (exported names
	                               only); ".gnu_debugdata" or ".dynsym+.gnu_debugdata"
	                               (MiniDebugInfo); "debug file" (debug_file's
	                               .symtab); "" (none).  A static string */
	char debug_file[4096];      /* the separate debug file the names come from,
	                               found by build-id ("" when none): a path in the
	                               process's root, or in ours when debug_file_ours */
	bool debug_file_ours;
	bool eh_frame;              /* unwind tables in .eh_frame, through its
	                               .eh_frame_hdr search table */
	bool debug_frame;           /* in .debug_frame, for the code .eh_frame does
	                               not cover (Go's only tables) */
	bool debug_frame_compressed;   /* that .debug_frame stored compressed */
	char refused[160];          /* a compressed section not read, and why ("" none) */
};

/* Says where the names and unwind tables of a module of process PID come
 * from, by the unwinder's own lookup (stackdump/modules.c), so that what
 * this says is what a dump does: the file PATH as PID sees it (its mount
 * namespace and root), or with PATH NULL its executable (/proc/PID/exe);
 * then, for a file without .symtab, the debug file with its build-id
 * below DEBUG_DIR/.build-id/ (NULL: STACKDUMP_DEBUG_DIR) in PID's root,
 * else in ours, taken only when its build-id is the module's.  No
 * .gnu_debuglink is followed, here or by the unwinder.  Returns 0, or the
 * -errno of opening PATH (as targetfs_open: -ENOENT, -EACCES, -ESRCH, ...)
 * or of reading it (-ENOEXEC: not an ELF file stackdump reads); *OUT is
 * always set. */
int stackdump_module_sources(pid_t pid, const char *path, const char *debug_dir,
                             struct stackdump_sources *out);

/* What the language runtime of a process lets a dump name. */
struct stackdump_runtime {
	int python;                 /* 1: a CPython whose Python frames are read
	                               (pyframes.h); 0: no CPython; -ENOTSUP: one
	                               whose frames are not read (its version) */
	char python_version[24];    /* "3.11.2", "before 3.11"; "" without CPython */
	int perf_map;               /* 0: its perf map was read; else -errno:
	                               -ENOENT none, -EPERM refused (perfmap.h) */
	char perf_map_path[64];     /* "/tmp/perf-4242.map", as the process names it */
	size_t perf_map_entries;
	char perf_map_why[200];     /* what was refused or clipped, "" */
};

/* Says, for the doctor, whether process PID runs a CPython whose frames
 * dumps read, and whether its perf map (JIT code's names) exists, by the
 * dumps' own code: its memory map and modules, read as a dump reads them,
 * nothing stopped.  Returns 0 with *OUT, or -errno when PID's memory map
 * cannot be read (-ESRCH: gone). */
int stackdump_runtime(pid_t pid, struct stackdump_runtime *out);

#endif
