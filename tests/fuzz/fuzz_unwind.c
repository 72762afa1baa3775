/* libFuzzer target: stackdump's unwinder (unwind_snapshot) on a hostile
 * module and a hostile stack.  The module's unwind tables (.eh_frame_hdr
 * and .eh_frame, or .debug_frame as debugframe.c rewrites it), its code and
 * the stack all come from the input, and go through our accessors into
 * libunwind's table search, DWARF interpreter, frame-pointer fallback and
 * signal frame handling.  A target binary or a stack that lies must never
 * crash the daemon.
 *
 * Input: a 16-byte header, the ELF image of the module, then the stack copy.
 *
 *   bytes 0-3    elf_len  bytes of ELF image after the header (little-endian)
 *   bytes 4-7    ip       rip = FAKE_CODE + ip
 *   bytes 8-9    sp       rsp = FAKE_STACK + sp
 *   bytes 10-11  bp       rbp = FAKE_STACK + bp
 *   byte 12      flags    bit 0: stack_clipped (the copy reached the end of
 *                         the stack); bit 1: the mapping is r--p, not r-xp
 *   bytes 13-15  ignored
 *   then elf_len bytes of ELF image, then the stack: the copy starts at
 *   FAKE_STACK (a snapshot's copy starts 128 bytes below rsp, so sp = 128
 *   is the usual value).  The other registers are 0.
 *
 * The process looks like one mapping, "/fuzz", file offset 0 at FAKE_CODE,
 * page-rounded; the module is read from the image with elfinfo_read_mem as
 * the daemon reads it from the file.  The image is also copied to FAKE_CODE
 * in this process: unwind.c reads code with process_vm_readv of as->pid
 * (getpid() here), and libunwind reads it to detect PLT entries and signal
 * trampolines.  Both addresses are fixed so that return addresses in the
 * stack of a saved input mean the same on every run.
 * FUZZ_UNWIND_VERBOSE=1 in the environment prints the frames found.
 *
 * Seeds in tests/fuzz/corpus/unwind/, written by tests/fuzz/mkseeds_unwind.py
 * (which says how): with the ELF seeds of tests/fuzz/corpus/elf/, an
 * .eh_frame_hdr chain, a .debug_frame chain and a chain deeper than 64
 * frames; with a module it assembles, a chain through an rbp-based frame,
 * a frame-pointer chain through code no FDE covers, and a signal
 * trampoline with glibc's CFI and its ucontext.  Inputs that once crashed
 * or hung are kept there as crash-*, and every run starts with them:
 *   crash-dw-op-skip-loop        a CFA expression whose DW_OP_skip jumps
 *                                back: libunwind 1.6's interpreter has no
 *                                step limit and looped for ever;
 *   crash-dw-cfa-register-oob    DW_CFA_register rip <- register 2^42 - 1:
 *                                the register number indexes libunwind's
 *                                locations unchecked (SIGBUS; small ones
 *                                read garbage);
 *   crash-dw-cfa-register-oob-found  the same, as this fuzzer found it;
 *   crash-dw-op-div-overflow     a CFA expression computing
 *                                INT64_MIN / -1 with DW_OP_div (SIGFPE).
 * stackdump now refuses such FDEs before libunwind sees them
 * (stackdump/cfi.c), and unwind.c caps the reads of one unwind.
 */
#include "stackdump/elfinfo.h"
#include "stackdump/modules.h"
#include "stackdump/procmaps.h"
#include "stackdump/snapshot.h"
#include "stackdump/unwind.h"

#include <libunwind.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Above ASan's shadow and below its allocator (0x600000000000) and the
 * libraries: nothing else maps memory there. */
#define FAKE_CODE   0x200000000000ull
/* Never read live: the stack is served from the copy only. */
#define FAKE_STACK  0x7ff000000000ull
#define MAP_SIZE    (1u << 20)          /* the largest module image */
#define PAGE        4096u
#define MAX_FRAMES  64
#define HDR_SIZE    16

/* libunwind is not instrumented: libFuzzer sees only our accessors and
 * tables.  What it did is fed back as coverage through these counters
 * (libFuzzer reads this section as extra edges): the number of frames, the
 * error that ended the unwind, and how it ended. */
#define FEAT_FRAMES 0                                   /* + n, 0..MAX_FRAMES */
#define FEAT_UERR   (FEAT_FRAMES + MAX_FRAMES + 1)      /* + -uerr, 0..15 */
#define FEAT_END    (FEAT_UERR + 16)                    /* + 3 flag bits */
#define FEAT_SIGNAL (FEAT_END + 8)                      /* + signal frames, 0..3 */
__attribute__((used, section("__libfuzzer_extra_counters")))
static uint8_t features[FEAT_SIGNAL + 4];

static unw_addr_space_t uas;
static size_t code_dirty;               /* bytes of FAKE_CODE written */
static bool verbose;                    /* FUZZ_UNWIND_VERBOSE set: print frames */

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* Once per process: libunwind's address space and the code mapping. */
static void setup(void)
{
	verbose = getenv("FUZZ_UNWIND_VERBOSE") != NULL;
	uas = unwind_create_space();
	void *p = mmap((void *)(uintptr_t)FAKE_CODE, MAP_SIZE, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	/* Without them every input would test less than it says. */
	if (!uas || p != (void *)(uintptr_t)FAKE_CODE) {
		fprintf(stderr, "fuzz_unwind: cannot set up (%s)\n",
		        uas ? "mmap at FAKE_CODE" : "unwind_create_space");
		abort();
	}
}

/* What stackdump.c does with each frame after the unwind: module, bias
 * and symbol of the address it is looked up by. */
static void resolve(const struct addrspace *as, const struct unwind_frame *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t look = i > 0 && !f[i - 1].signal && f[i].ip > 0 ? f[i].ip - 1 : f[i].ip;
		uint64_t bias, start;
		const struct procmaps_entry *e;
		const struct module *mod = addrspace_module(as, look, &e);

		if (mod) {
			module_bias(mod, e, look, &bias);
			elfinfo_symbol(&mod->elf, look - bias, &start);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!uas)
		setup();
	if (size < HDR_SIZE)
		return 0;
	uint32_t elf_len = get32(data);
	if (elf_len > size - HDR_SIZE || elf_len > MAP_SIZE)
		return 0;
	const uint8_t *elf = data + HDR_SIZE;
	const uint8_t *stk = elf + elf_len;
	size_t stack_len = size - HDR_SIZE - elf_len;
	uint8_t flags = data[12];

	/* The module, as addrspace_refresh would have found it. */
	static char path[] = "/fuzz";
	struct module mod = { .path = path, .inode = 1 };
	mod.err = elfinfo_read_mem(elf, elf_len, &mod.elf);

	/* Its code, where the process would have it. */
	unsigned char *code = (unsigned char *)(uintptr_t)FAKE_CODE;
	memcpy(code, elf, elf_len);
	if (code_dirty > elf_len)
		memset(code + elf_len, 0, code_dirty - elf_len);
	code_dirty = elf_len;

	struct procmaps_entry e = {
		.start = FAKE_CODE,
		.end = FAKE_CODE + ((elf_len + PAGE - 1) / PAGE + (elf_len == 0)) * PAGE,
		.pgoff = 0,
		.inode = 1,
		.path = path,
	};
	strcpy(e.perms, flags & 2 ? "r--p" : "r-xp");
	struct module *mods[1] = { &mod };
	/* mods_gen is what addrspace_refresh compares with modules.gen, 0 in
	 * a fresh cache; addrspace_module does not look at it. */
	struct addrspace as = {
		.pid = getpid(),
		.as = uas,
		.maps = { .v = &e, .n = 1 },
		.mods = mods,
		.mods_gen = 0,
	};

	/* The stack in a buffer of its own size: ASan sees a read past it. */
	struct snapshot snap;
	memset(&snap, 0, sizeof(snap));
	snap.regs.rip = FAKE_CODE + get32(data + 4);
	snap.regs.rsp = FAKE_STACK + get16(data + 8);
	snap.regs.rbp = FAKE_STACK + get16(data + 10);
	snap.stack_addr = FAKE_STACK;
	snap.stack_len = stack_len;
	snap.cap = stack_len;
	snap.stack_clipped = flags & 1;
	snap.stack = stack_len ? malloc(stack_len) : NULL;
	if (stack_len && !snap.stack)
		abort();
	if (stack_len)
		memcpy(snap.stack, stk, stack_len);

	/* libunwind caches unwind rules by ip across unwinds: the previous
	 * input had other tables at the same addresses. */
	unw_flush_cache(uas, 0, 0);

	struct unwind_frame frames[MAX_FRAMES];
	struct unwind_result res;
	unwind_snapshot(&as, &snap, MAX_FRAMES, frames, &res);
	if (res.n > MAX_FRAMES || (res.n > 0 && frames[0].ip != snap.regs.rip) ||
	    (res.n == 0 && res.uerr >= 0)) {
		fprintf(stderr, "unwind_snapshot: %zu frames, uerr %d, frame 0 at %#llx\n",
		        res.n, res.uerr, res.n ? (unsigned long long)frames[0].ip : 0ull);
		__builtin_trap();
	}
	resolve(&as, frames, res.n);
	size_t nsig = 0;
	for (size_t i = 0; i < res.n; i++)
		nsig += frames[i].signal;
	features[FEAT_FRAMES + res.n]++;
	features[FEAT_UERR + (res.uerr < 0 && res.uerr > -16 ? -res.uerr : 0)]++;
	features[FEAT_END + (res.truncated | res.short_stack << 1 | res.unknown_ip << 2)]++;
	features[FEAT_SIGNAL + (nsig < 3 ? nsig : 3)]++;
	if (verbose) {
		fprintf(stderr, "module %d, %zu frames%s, uerr %d%s%s\n", mod.err,
		        res.n, res.truncated ? " (truncated)" : "", res.uerr,
		        res.short_stack ? ", short stack" : "", res.unknown_ip ? ", unknown ip" : "");
		for (size_t i = 0; i < res.n; i++)
			fprintf(stderr, "  #%zu %#llx%s%s\n", i, (unsigned long long)frames[i].ip,
			        frames[i].has_start ? " (fde)" : "", frames[i].signal ? " (signal)" : "");
	}

	free(snap.stack);
	if (mod.err == 0)
		elfinfo_free(&mod.elf);
	return 0;
}
