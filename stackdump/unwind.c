/* unwind: the offline unwinder.  See unwind.h. */
#include "stackdump/unwind.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/user.h>

/* Exported by libunwind (the generic, remote-capable library) but declared
 * in no installed header; _UPT_find_proc_info uses it the same way. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
                                              unw_dyn_info_t *di, unw_proc_info_t *pi,
                                              int need_unwind_info, void *arg);

/* Where libunwind sees a module's converted .debug_frame: see
 * DEBUGFRAME_SHADOW in debugframe.h. */
#define DBG_SHADOW DEBUGFRAME_SHADOW

/* Bytes of module memory read from the process at a time (the signal
 * frame test reads the two words at an ip). */
#define CODE_CHUNK 64

/* Reads of memory allowed per unwind.  cfi.c keeps libunwind's DWARF
 * interpreter from looping on the tables we show it; this bounds what it
 * does anyway, should some other input make it loop: every step it takes
 * reads.  Real unwinds stay far below: 83,806 reads for 1,003 frames. */
#define MAX_READS (1u << 20)

/* The dump being unwound: libunwind hands it to every accessor as ARG. */
struct ctx {
	const struct addrspace *as;
	const struct snapshot *snap;
	/* The unwind data that served the last read: [lo, lo + size) is
	 * data.  libunwind reads FDEs a byte at a time, about 1,300 reads for
	 * a first unwind, mostly in one module. */
	uint64_t lo, size;
	const unsigned char *data;
	/* The last chunk of module memory read from the process. */
	uint64_t code_lo;
	size_t code_len;
	unsigned char code[CODE_CHUNK];
	bool short_stack, unknown_ip;
	/* Bytes of the stack copy, from its start, up to the end of the
	 * highest word read from it: how much of the copy the unwind used. */
	size_t stack_used;
	unsigned reads;             /* by access_mem, up to MAX_READS */
};

static bool serve(uint64_t lo, uint64_t size, const unsigned char *data,
                  uint64_t addr, unw_word_t *val)
{
	if (addr < lo || size < 8 || addr - lo > size - 8)
		return false;
	memcpy(val, data + (addr - lo), sizeof(*val));
	return true;
}

/* A word of a module's unwind data: its .eh_frame_hdr and .eh_frame copy,
 * or its converted .debug_frame in the shadow window. */
static bool table_word(struct ctx *c, uint64_t addr, unw_word_t *val)
{
	const struct procmaps_entry *e;
	bool shadow = addr >= DBG_SHADOW && addr < 2 * DBG_SHADOW;
	uint64_t real = shadow ? addr - DBG_SHADOW : addr, bias;
	const struct module *mod = addrspace_module(c->as, real, &e);

	if (!mod || !module_bias(mod, e, real, &bias))
		return false;
	if (shadow) {
		c->lo = DBG_SHADOW + bias + mod->elf.vaddr_lo;
		c->size = mod->elf.dbg.size;
		c->data = mod->elf.dbg.data;
	} else {
		c->lo = bias + mod->elf.eh_data_vaddr;
		c->size = mod->elf.eh_data_size;
		c->data = mod->elf.eh_data;
	}
	return c->data && serve(c->lo, c->size, c->data, addr, val);
}

/* A word of a module mapping of the process, read now: code, .rodata and
 * the vDSO are the same as when the thread was stopped, and so is the one
 * writable word the unwinder reads there, a CIE's personality routine
 * pointer (DW.ref.__gxx_personality_v0 in .data, filled in at load time,
 * read through DW_EH_PE_indirect: without it no C++ frame with a landing
 * pad unwinds).  Anonymous memory and stacks are never read live, except
 * executable anonymous memory: JIT code, which has no unwind tables.  For
 * a frame no table covers, libunwind's x86-64 unw_step follows the frame
 * pointer chain (V8's JIT code keeps one, HotSpot's with
 * -XX:+PreserveFramePointer), but first reads the word at the ip: one it
 * cannot read is taken for a call through a bad pointer, and the return
 * address is then taken from the stack pointer -- a wrong caller, seen on
 * HotSpot, whose code cache is writable too (rwxp).  The bytes are only
 * looked at: code changed since the stop cannot mislead the unwind. */
static bool module_word(struct ctx *c, uint64_t addr, unw_word_t *val)
{
	if (serve(c->code_lo, c->code_len, c->code, addr, val))
		return true;
	const struct procmaps_entry *e = procmaps_find(&c->as->maps, addr);
	if (!e || e->perms[0] != 'r' || e->end - addr < 8 ||
	    (e->perms[1] == 'w' && e->path[0] != '/' && e->perms[2] != 'x'))
		return false;
	/* An aligned chunk, unless the word crosses its end (an ip in the
	 * last 7 bytes of one was never readable, and the frame-pointer
	 * fallback then took a wrong caller). */
	uint64_t lo = addr & ~(uint64_t)(CODE_CHUNK - 1);
	if (addr - lo > CODE_CHUNK - 8)
		lo = addr;
	if (lo < e->start)
		lo = e->start;
	size_t len = e->end - lo < CODE_CHUNK ? (size_t)(e->end - lo) : CODE_CHUNK;
	struct iovec local = { c->code, len }, remote = { (void *)(uintptr_t)lo, len };
	if (process_vm_readv(c->as->pid, &local, 1, &remote, 1, 0) != (ssize_t)len) {
		c->code_len = 0;
		return false;
	}
	c->code_lo = lo;
	c->code_len = len;
	return serve(c->code_lo, c->code_len, c->code, addr, val);
}

static int access_mem(unw_addr_space_t uas, unw_word_t addr, unw_word_t *val,
                      int write, void *arg)
{
	struct ctx *c = arg;
	uint64_t word;

	(void)uas;
	if (write)
		return -UNW_EREADONLYREG;
	if (c->reads >= MAX_READS)
		return -UNW_EINVAL;
	c->reads++;
	if (snapshot_word(c->snap, addr, &word)) {
		const struct snapshot *s = c->snap;
		if (addr >= s->stack_addr && addr - s->stack_addr < s->stack_len &&
		    addr - s->stack_addr + 8 > c->stack_used)
			c->stack_used = (size_t)(addr - s->stack_addr) + 8;
		*val = word;
		return 0;
	}
	if (serve(c->lo, c->size, c->data, addr, val) || table_word(c, addr, val) ||
	    module_word(c, addr, val))
		return 0;
	/* Just above the copy: the stack was deeper than the cap. */
	const struct snapshot *s = c->snap;
	uint64_t end = s->stack_addr + s->stack_len;
	if (!s->stack_clipped && addr >= end && addr - end < (1u << 20))
		c->short_stack = true;
	return -UNW_EINVAL;
}

static int access_reg(unw_addr_space_t uas, unw_regnum_t reg, unw_word_t *val,
                      int write, void *arg)
{
	static const size_t offsets[UNW_X86_64_RIP + 1] = {
		[UNW_X86_64_RAX] = offsetof(struct user_regs_struct, rax),
		[UNW_X86_64_RDX] = offsetof(struct user_regs_struct, rdx),
		[UNW_X86_64_RCX] = offsetof(struct user_regs_struct, rcx),
		[UNW_X86_64_RBX] = offsetof(struct user_regs_struct, rbx),
		[UNW_X86_64_RSI] = offsetof(struct user_regs_struct, rsi),
		[UNW_X86_64_RDI] = offsetof(struct user_regs_struct, rdi),
		[UNW_X86_64_RBP] = offsetof(struct user_regs_struct, rbp),
		[UNW_X86_64_RSP] = offsetof(struct user_regs_struct, rsp),
		[UNW_X86_64_R8] = offsetof(struct user_regs_struct, r8),
		[UNW_X86_64_R9] = offsetof(struct user_regs_struct, r9),
		[UNW_X86_64_R10] = offsetof(struct user_regs_struct, r10),
		[UNW_X86_64_R11] = offsetof(struct user_regs_struct, r11),
		[UNW_X86_64_R12] = offsetof(struct user_regs_struct, r12),
		[UNW_X86_64_R13] = offsetof(struct user_regs_struct, r13),
		[UNW_X86_64_R14] = offsetof(struct user_regs_struct, r14),
		[UNW_X86_64_R15] = offsetof(struct user_regs_struct, r15),
		[UNW_X86_64_RIP] = offsetof(struct user_regs_struct, rip),
	};
	const struct ctx *c = arg;

	(void)uas;
	if (write)
		return -UNW_EREADONLYREG;
	if (reg < 0 || reg > UNW_X86_64_RIP)
		return -UNW_EBADREG;
	memcpy(val, (const char *)&c->snap->regs + offsets[reg], sizeof(*val));
	return 0;
}

static int access_fpreg(unw_addr_space_t uas, unw_regnum_t reg, unw_fpreg_t *val,
                        int write, void *arg)
{
	(void)uas, (void)reg, (void)val, (void)write, (void)arg;
	return -UNW_EBADREG;
}

/* The FDE covering IP: from the binary-search table of its module's
 * .eh_frame_hdr, else from its converted .debug_frame.  libunwind's own
 * _UPT_find_proc_info rereads /proc/PID/maps at every module switch, walks
 * the mmapped file without bounds checks and calls abort() on an
 * unexpected .eh_frame_hdr encoding: one hostile binary would take the
 * daemon down. */
static int find_proc_info(unw_addr_space_t uas, unw_word_t ip, unw_proc_info_t *pi,
                          int need_unwind_info, void *arg)
{
	struct ctx *c = arg;
	const struct procmaps_entry *e;
	const struct module *mod = addrspace_module(c->as, ip, &e);
	uint64_t bias;
	unw_dyn_info_t di;
	int r = -UNW_ENOINFO;

	if (!e || e->perms[2] != 'x')
		c->unknown_ip = true;
	if (!mod || !module_bias(mod, e, ip, &bias))
		return -UNW_ENOINFO;
	const struct elfinfo *elf = &mod->elf;
	memset(&di, 0, sizeof(di));
	di.start_ip = bias + elf->vaddr_lo;
	di.end_ip = bias + elf->vaddr_hi;
	di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	/* libunwind asserts this. */
	if (ip < di.start_ip || ip >= di.end_ip)
		return -UNW_ENOINFO;
	if (elf->has_eh_table) {
		/* Table entries are two 32-bit offsets relative to .eh_frame_hdr. */
		di.u.rti.segbase = bias + elf->eh_hdr_vaddr;
		di.u.rti.table_data = bias + elf->eh_table_vaddr;
		di.u.rti.table_len = elf->eh_fde_count * 8 / sizeof(unw_word_t);
		r = UNW_OBJ(dwarf_search_unwind_table)(uas, ip, &di, pi, need_unwind_info, arg);
	}
	if (r == -UNW_ENOINFO && elf->dbg.count) {
		di.u.rti.segbase = DBG_SHADOW + bias + elf->vaddr_lo;
		di.u.rti.table_data = di.u.rti.segbase + elf->dbg.table_off;
		di.u.rti.table_len = elf->dbg.count * 8 / sizeof(unw_word_t);
		r = UNW_OBJ(dwarf_search_unwind_table)(uas, ip, &di, pi, need_unwind_info, arg);
	}
	return r;
}

/* Only called for dynamic (JIT-registered) unwind info, which we never
 * give: the table format's info is freed by libunwind itself. */
static void put_unwind_info(unw_addr_space_t uas, unw_proc_info_t *pi, void *arg)
{
	(void)uas, (void)pi, (void)arg;
}

static int get_dyn_info_list_addr(unw_addr_space_t uas, unw_word_t *addr, void *arg)
{
	(void)uas, (void)addr, (void)arg;
	return -UNW_ENOINFO;
}

static int resume(unw_addr_space_t uas, unw_cursor_t *cur, void *arg)
{
	(void)uas, (void)cur, (void)arg;
	return -UNW_EINVAL;
}

/* Names come from our own symbol tables (stackdump.c), after the unwind. */
static int get_proc_name(unw_addr_space_t uas, unw_word_t addr, char *buf, size_t len,
                         unw_word_t *off, void *arg)
{
	(void)uas, (void)addr, (void)buf, (void)len, (void)off, (void)arg;
	return -UNW_ENOINFO;
}

unw_addr_space_t unwind_create_space(void)
{
	static unw_accessors_t acc = {
		.find_proc_info = find_proc_info,
		.put_unwind_info = put_unwind_info,
		.get_dyn_info_list_addr = get_dyn_info_list_addr,
		.access_mem = access_mem,
		.access_reg = access_reg,
		.access_fpreg = access_fpreg,
		.resume = resume,
		.get_proc_name = get_proc_name,
	};
	unw_addr_space_t as = unw_create_addr_space(&acc, 0);

	if (as)
		unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
	return as;
}

void unwind_snapshot(const struct addrspace *as, const struct snapshot *snap,
                     size_t max, struct unwind_frame *out, struct unwind_result *res)
{
	struct ctx c = { .as = as, .snap = snap };
	unw_cursor_t cur;

	memset(res, 0, sizeof(*res));
	int r = unw_init_remote(&cur, as->as, &c);
	if (r < 0) {
		res->uerr = r;
		return;
	}
	for (;;) {
		unw_word_t ip;
		unw_proc_info_t pi;
		struct unwind_frame *f = &out[res->n];

		r = unw_get_reg(&cur, UNW_REG_IP, &ip);
		if (r < 0) {
			res->uerr = r;
			break;
		}
		f->ip = ip;
		f->has_start = unw_get_proc_info(&cur, &pi) == 0 && pi.start_ip != 0 &&
		               pi.start_ip <= ip;
		f->start = f->has_start ? pi.start_ip : ip;
		f->signal = unw_is_signal_frame(&cur) > 0;
		res->n++;
		r = unw_step(&cur);
		if (r <= 0) {
			res->uerr = r;
			break;
		}
		/* A return address of 0 ends the stack (Go's runtime.goexit
		 * has one above it): libunwind steps to it, then would guess
		 * on from the frame pointer.  eu-stack stops there too. */
		if (unw_get_reg(&cur, UNW_REG_IP, &ip) == 0 && ip == 0)
			break;
		if (res->n == max) {
			res->truncated = true;
			break;
		}
	}
	res->short_stack = c.short_stack;
	res->stack_used = c.stack_used;
	res->unknown_ip = c.unknown_ip;
}
