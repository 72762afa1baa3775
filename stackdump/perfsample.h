/* perfsample: the kernel samples one thread's registers and stack at its
 * own clock interrupts, with no ptrace stop.
 *
 * One perf event per thread (perf_event_open: PERF_TYPE_SOFTWARE /
 * PERF_COUNT_SW_TASK_CLOCK, pid = the tid, cpu = -1, user space only),
 * which every PERIOD of the thread's CPU time writes a sample into a
 * bounded ring buffer: the thread's general registers
 * (PERF_SAMPLE_REGS_USER) and a copy of its stack from the stack pointer
 * up (PERF_SAMPLE_STACK_USER) -- what stackdump_thread_copy (stackdump.h)
 * unwinds with the same frames, names and hash as a ptrace dump.  The
 * thread is never stopped, traced or signalled: the copy is made by the
 * kernel in the timer interrupt that lands while the thread runs in user
 * space (a tick that lands in a system call gives no sample, since kernel
 * sampling needs kernel.perf_event_paranoid <= 1).
 *
 * Nobody is woken per sample: the ring's wakeup is a watermark the reader
 * never waits on; the reader reads on its own timer (the daemon's loop,
 * every sample_interval), which is why the ring holds several samples
 * (PERFSAMPLE_RING_SAMPLES).  A record the kernel could not write because
 * the ring was full is counted (PERF_RECORD_LOST), never waited for.
 *
 * The first sample at once: beside the periodic event, a one-shot event
 * with the shortest period the kernel allows (10 µs of the thread's CPU
 * time), enabled for one overflow only (PERF_EVENT_IOC_REFRESH 1), writes
 * into the same ring; so a hot thread's first sample is taken within
 * about 10 µs of perfsample_open instead of one whole PERIOD later.
 *
 * The copy fitted to the stack: what a sample costs the target is mostly
 * its stack copy (below), and a hot thread's live stack is a few KiB, so
 * the periodic event starts at the cap and perfsample_adapt, given each
 * unwound sample, fits it once to what the unwind read (stack_used) plus
 * PERFSAMPLE_FIT_MARGIN, and puts it back to the cap for good when a
 * sample's unwind ran off the fitted copy (stack_short): at most two
 * refits an episode, each a new periodic event writing into the same ring
 * (the one-shot event owns it) with its period counted afresh.
 *
 * Everything an open made (two descriptors, the ring's mapping) goes with
 * perfsample_close; the kernel's side goes with the descriptors, so a
 * daemon that dies leaves nothing behind.  Not thread-safe: one struct
 * perfsample is used from one thread at a time.  x86-64 only (the
 * registers map to struct user_regs_struct).
 */
#ifndef CPUMOND_STACKDUMP_PERFSAMPLE_H
#define CPUMOND_STACKDUMP_PERFSAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stackdump/stackdump.h"

/* A sample is at most 65535 bytes (its header's size is 16 bits): with
 * the fixed part of this module's samples (header, pid/tid, time, the
 * registers' ABI and 20 registers, the stack's size and dyn_size: 208
 * bytes) the largest stack copy is 65320 bytes.  perfsample_open asks for
 * the cap it is given (or this), and steps down in 8 KiB steps while the
 * kernel says EINVAL; perfsample_info says what it got.  What the copy
 * costs the target (bench/README.md §11): the kernel copies from the
 * stack pointer up to the copy's size or to the first page it cannot
 * read, and a copy that runs to the end of the stack's mapping ends in a
 * fault taken in the interrupt.  Over a tick's median, on a shallow 64 KiB
 * thread stack: 4 or 8 KiB -2 µs, 16 KiB +5..+11 (short of the end), the
 * largest +10..+23 (it copied 20.9 KiB, to the end): hence the fit. */
#define PERFSAMPLE_STACK_MAX 65320u
#define PERFSAMPLE_STACK_MIN 4096u

/* A fitted copy holds what the unwind of the sample it was fitted on read,
 * and this much more: the frames of callees the hot code calls, which the
 * next samples land in. */
#define PERFSAMPLE_FIT_MARGIN 4096u

/* The ring holds this many samples of the largest size (rounded up to
 * 2^n pages, plus the control page): the one-shot first sample and up to
 * three periods of a thread's CPU time between two reads of a loop that
 * reads every period and runs late.  With the largest stack copy that is
 * 256 KiB + 4 KiB, locked memory the kernel charges against
 * kernel.perf_event_mlock_kb (516 KiB per user per CPU by default), then
 * RLIMIT_MEMLOCK, unless the caller has CAP_IPC_LOCK. */
#define PERFSAMPLE_RING_SAMPLES 4

/* Sampling periods accepted (ns of the thread's CPU time). */
#define PERFSAMPLE_PERIOD_MIN_NS 100000ull           /* 100 µs */
#define PERFSAMPLE_PERIOD_MAX_NS 60000000000ull      /* 60 s */

struct perfsample;

/* Opens the sampler on thread TID (any process's, as permitted by
 * perf_event_paranoid and ptrace access): a sample every PERIOD_NS
 * (PERFSAMPLE_PERIOD_MIN_NS..PERFSAMPLE_PERIOD_MAX_NS) of its CPU time in
 * user space, the first at once (see above), each with a stack copy of at
 * most STACK_MAX bytes (PERFSAMPLE_STACK_MIN..PERFSAMPLE_STACK_MAX; 0:
 * PERFSAMPLE_STACK_MAX).  Sampling starts before it returns.  Returns 0
 * with *OUT, or a negative errno with *OUT NULL and WHY (WHYLEN bytes, may
 * be 0) saying why in words a user can act on (perfsample_refusal):
 *   -EINVAL     a period or stack cap out of range; or the kernel accepts
 *               no stack copy of PERFSAMPLE_STACK_MIN or more
 *   -ESRCH      "tid 4242 exited"
 *   -EACCES, -EPERM  refused: kernel.perf_event_paranoid, CAP_PERFMON,
 *               ptrace access to TID, a seccomp filter, locked memory for
 *               the ring
 *   -ENOENT, -EOPNOTSUPP, -ENODEV, -ENOSYS  the kernel has no such event
 *   -EMFILE, -ENFILE, -ENOMEM  out of descriptors or memory */
int perfsample_open(pid_t tid, uint64_t period_ns, size_t stack_max,
                    struct perfsample **out, char *why, size_t whylen);

/* Closes both events and unmaps the ring; samples not read are dropped.
 * PS may be NULL. */
void perfsample_close(struct perfsample *ps);

/* One sample, as the kernel took it. */
struct perfsample_sample {
	pid_t pid;               /* the thread's process */
	pid_t tid;
	/* Registers (user_regs_struct; fs_base, gs_base, ds, es, fs, gs and
	 * orig_rax are 0: perf does not sample them), the stack copy from
	 * regs.rsp up (copy.stack points into a buffer of the reader's, valid
	 * only during the callback), time_ns the sample's CLOCK_MONOTONIC
	 * time.  copy.stack_clipped: the kernel's copy stopped at memory it
	 * could not read (the end of the stack's mapping): the whole live
	 * stack is in it.  Else it stopped at the cap and the stack may be
	 * deeper: stackdump_thread_copy then says so in the stack's error
	 * ("the stack is deeper than the N bytes copied") when the unwind
	 * needed what is beyond, and sets the stack's stack_short. */
	struct stackdump_copy copy;
};

/* Reads what the kernel wrote since the last read, oldest first: each
 * sample is handed to FN with ARG; lost and throttle records are counted
 * (perfsample_info).  A thread that exec'd: the samples written before
 * the exec are dropped (the old program's, they would unwind against the
 * new one's maps) and counted as exec_dropped.  FN returns 0 to go on, or
 * a negative number that stops the read (the sample it was given is
 * consumed; the rest stay for the next read).  Never blocks.  Returns the
 * number of samples handed to FN, or
 *   -ESRCH     the thread exited (samples it left were handed first)
 *   -ENOEXEC   the thread exec'd (the new program's samples that came
 *              after the exec record were handed; it is another program:
 *              end the episode)
 *   FN's negative return.
 * After -ESRCH or -ENOEXEC, call perfsample_close. */
int perfsample_read(struct perfsample *ps,
                    int (*fn)(const struct perfsample_sample *s, void *arg), void *arg);

struct perfsample_info {
	pid_t tid;
	uint64_t period_ns;
	size_t stack_size;       /* the largest stack copy the kernel accepted
	                            (bytes): the cap, the one-shot's copy */
	size_t stack_copy;       /* the periodic event's copy now: stack_size,
	                            or what perfsample_adapt fitted */
	unsigned refits;         /* periodic events perfsample_adapt replaced */
	size_t ring_bytes;       /* the ring's data part, a power of two */
	uint64_t samples;        /* handed to a reader's FN */
	uint64_t lost;           /* samples the kernel dropped, ring full
	                            (the sum of PERF_RECORD_LOST's counts) */
	uint64_t throttled;      /* PERF_RECORD_THROTTLE: the kernel slowed the
	                            event down (kernel.perf_event_max_sample_rate) */
	uint64_t no_regs;        /* samples without user registers (ABI NONE:
	                            the thread was exiting), dropped */
	uint64_t exec_dropped;   /* samples from before an exec, dropped */
	uint64_t bad;            /* records that did not parse, skipped: a
	                            kernel bug, or a ring someone else wrote */
};

/* Fits PS's stack copy to the stack of its thread, given one of its
 * samples S and its unwind ST (stackdump_thread_copy's, of S's copy):
 * when ST ran off a copy the kernel cut (stack_short, not clipped) the
 * copy goes back to the cap for the rest of PS's life; else, the first
 * time only, it shrinks to perfsample_fit's size when that is smaller.
 * The next samples are then taken with the new size, by a new periodic
 * event whose period starts at the refit (its first sample a whole PERIOD
 * of the thread's CPU later); for a moment the sampler holds three
 * descriptors (the new event is open before the old one is closed).
 * Call it after unwinding each sample, from the read's FN or later.
 * Returns 1 when the copy changed, 0 when it stays, or a negative errno
 * (perf_event_open's: the thread exited, descriptors) with the old event
 * and its copy kept. */
int perfsample_adapt(struct perfsample *ps, const struct perfsample_sample *s,
                     const struct stackdump_stack *st);

/* The stack copy (bytes, a multiple of 512 unless cut to COPIED) for a
 * thread whose sample's unwind read USED bytes of a COPIED-byte copy that
 * ended at the end of the stack's mapping when CLIPPED: USED plus
 * PERFSAMPLE_FIT_MARGIN, no more than COPIED when CLIPPED (a copy to the
 * mapping's end ends in a fault), within PERFSAMPLE_STACK_MIN..CAP.
 * Pure. */
size_t perfsample_fit(size_t cap, size_t used, size_t copied, bool clipped);

/* Fills *OUT with PS's sizes and counters so far. */
void perfsample_info(const struct perfsample *ps, struct perfsample_info *out);

/* Whether perf sampling can be used on thread TID (0: on the caller's own
 * thread, i.e. by this process on any thread it may ptrace): opens both
 * events as perfsample_open does, maps the ring, closes them.  Returns 0,
 * or perfsample_open's negative errno with WHY saying why, for doctor and
 * the log (capture = auto falls back to ptrace). */
int perfsample_probe(pid_t tid, char *why, size_t whylen);

/* Why perf_event_open (or the ring's mmap, when MMAP) failed with ERR (a
 * positive errno) on thread TID, in words, written to WHY (WHYLEN bytes,
 * cut): PARANOID is kernel.perf_event_paranoid (INT_MIN when unknown),
 * PERFMON whether the caller has CAP_PERFMON or CAP_SYS_ADMIN.  Pure: the
 * probe and perfsample_open read those and call it.  Examples:
 *   EACCES, paranoid 3, no CAP_PERFMON:
 *     "perf_event_open refused: kernel.perf_event_paranoid is 3 and the
 *      process has no CAP_PERFMON (set kernel.perf_event_paranoid to 2 or
 *      grant CAP_PERFMON)"
 *   EACCES, paranoid 2, CAP_PERFMON:
 *     "perf_event_open on tid 4242 refused: no ptrace access to it (needs
 *      CAP_SYS_PTRACE or the same user)"
 *   ENOENT: "the kernel has no task-clock software event with user
 *     register and stack sampling (perf_event_open: no such file or
 *     directory)" */
void perfsample_refusal(int err, bool mmap, pid_t tid, int paranoid, bool perfmon,
                        char *why, size_t whylen);

/* One record of the ring, parsed (perfsample_parse). */
struct perfsample_record {
	uint32_t type;           /* PERF_RECORD_SAMPLE, _LOST, _THROTTLE,
	                            _UNTHROTTLE, _COMM, ... as in the header */
	uint16_t misc;
	uint64_t lost;           /* PERF_RECORD_LOST: how many */
	bool exec;               /* PERF_RECORD_COMM of an exec (MISC_COMM_EXEC) */
	bool regs;               /* PERF_RECORD_SAMPLE with user registers
	                            (ABI 64); false: ABI NONE, no stack either */
	struct perfsample_sample sample;  /* PERF_RECORD_SAMPLE; copy.stack
	                            points into REC */
};

/* Parses the record at REC, of which LEN bytes are readable, as this
 * module's events write them (sample_type TID | TIME | REGS_USER |
 * STACK_USER, the 20 general registers).  Hostile input: any bytes give 0
 * or -EBADMSG, never a read outside REC..REC+LEN.  Returns 0 with *OUT,
 * or -EBADMSG: shorter than its header's size or than its fields, a
 * header size under 8, a register ABI other than NONE or 64, a stack
 * dyn_size above its size. */
int perfsample_parse(const unsigned char *rec, size_t len, struct perfsample_record *out);

#endif
