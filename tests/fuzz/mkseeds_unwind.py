#!/usr/bin/env python3
"""Writes the seeds of fuzz_unwind (tests/fuzz/corpus/unwind/seed-*).  The
input format is described at the top of tests/fuzz/fuzz_unwind.c; the
constants below must match it.  Run from the repository root; needs gcc.

The modules are tiny ELF executables linked like the seeds of fuzz_elf
(-nostdlib, 16-byte page alignment), whose file offsets are their
addresses minus 0x400000: at FAKE_CODE + offset they unwind with a load
bias of FAKE_CODE - 0x400000.  Two come from tests/fuzz/corpus/elf/ (mid, a
leaf, and _start, both CFA = rsp + 8), one is built here from CFI_ASM:
_start with an undefined return address (the end of the stack), caller
with an rbp frame and a saved rbx, mid, nocfi with no CFI at all, and a
signal trampoline with glibc's unwind rules (augmentation "S", CFA and
registers as DWARF expressions over the ucontext at rsp): libunwind 1.6
recognises a signal frame by that augmentation only."""

import os
import struct
import subprocess
import tempfile

FAKE_CODE = 0x200000000000
FAKE_STACK = 0x7ff000000000
RED_ZONE = 128          # a snapshot's copy starts this far below rsp
ELF_DIR = 'tests/fuzz/corpus/elf'
OUT_DIR = 'tests/fuzz/corpus/unwind'

# File offsets in the ELF seeds of fuzz_elf.
EH_MID, EH_START = 0x1c0, 0x1c7       # seed-eh-frame-hdr
DBG_MID, DBG_START = 0x150, 0x157     # seed-debug-frame

# Where glibc's __restore_rt finds each register in the ucontext at rsp
# (DWARF register number: offset of its uc_mcontext.gregs slot).
UC_GREGS = {8: 0x28, 9: 0x30, 10: 0x38, 11: 0x40, 12: 0x48, 13: 0x50, 14: 0x58,
            15: 0x60, 5: 0x68, 4: 0x70, 6: 0x78, 3: 0x80, 1: 0x88, 0: 0x90,
            2: 0x98, 7: 0xa0, 16: 0xa8}


def sleb128(v):
    out = []
    while True:
        b = v & 0x7f
        v >>= 7
        if (v == 0 and not b & 0x40) or (v == -1 and b & 0x40):
            return out + [b]
        out.append(b | 0x80)


def escape(*ops):
    return '\t.cfi_escape ' + ', '.join('%#x' % b for b in ops)


def restore_rt_cfi():
    # DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) 0xa0; DW_OP_deref
    expr = [0x77] + sleb128(0xa0) + [0x06]
    lines = [escape(0x0f, len(expr), *expr)]
    for reg, off in UC_GREGS.items():
        # DW_CFA_expression REG: DW_OP_breg7 (rsp) OFF
        expr = [0x77] + sleb128(off)
        lines.append(escape(0x10, reg, len(expr), *expr))
    return '\n'.join(lines)


CFI_ASM = """
	.text
	.globl	_start
	.type	_start, @function
_start:
	.cfi_startproc
	.cfi_undefined rip
	xor	%ebp, %ebp
	call	caller
	call	nocfi
	jmp	.
	.cfi_endproc
	.size	_start, .-_start

	.globl	caller
	.type	caller, @function
caller:
	.cfi_startproc
	push	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset rbp, -16
	mov	%rsp, %rbp
	.cfi_def_cfa_register rbp
	push	%rbx
	.cfi_offset rbx, -24
	call	mid
	pop	%rbx
	pop	%rbp
	.cfi_def_cfa rsp, 8
	ret
	.cfi_endproc
	.size	caller, .-caller

	.globl	mid
	.type	mid, @function
mid:
	.cfi_startproc
	lea	1(%rdi), %eax
	lea	(%rax,%rax,2), %eax
	ret
	.cfi_endproc
	.size	mid, .-mid

	.globl	nocfi
	.type	nocfi, @function
nocfi:
	push	%rbp
	mov	%rsp, %rbp
	call	mid
	pop	%rbp
	ret
	.size	nocfi, .-nocfi

	.cfi_startproc simple
	.cfi_signal_frame
@RESTORE_RT_CFI@
	nop
	.globl	__restore_rt
	.type	__restore_rt, @function
__restore_rt:
	mov	$15, %rax
	syscall
	.cfi_endproc
	.size	__restore_rt, .-__restore_rt
""".replace('@RESTORE_RT_CFI@', restore_rt_cfi())


def elf(name):
    with open(os.path.join(ELF_DIR, name), 'rb') as f:
        return f.read()


def build_cfi():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, 'cfi.s'), 'w') as f:
            f.write(CFI_ASM)
        subprocess.run(['gcc', '-nostdlib', '-no-pie', '-Wl,-z,max-page-size=16',
                        '-Wl,--build-id', '-o', os.path.join(d, 'cfi'),
                        os.path.join(d, 'cfi.s')], check=True)
        nm = subprocess.run(['nm', os.path.join(d, 'cfi')], check=True,
                            capture_output=True, text=True).stdout
        with open(os.path.join(d, 'cfi'), 'rb') as f:
            image = f.read()
    syms = {}
    for line in nm.splitlines():
        value, _, name = line.split()
        syms[name] = int(value, 16) - 0x400000
    return image, syms


def code(off):
    return FAKE_CODE + off


def words(*ws):
    return b''.join(struct.pack('<Q', w) for w in ws)


def seed(name, image, ip, stack, bp=0):
    """STACK starts at rsp (FAKE_STACK + RED_ZONE); BP is rbp relative to
    rsp.  The copy ends with the stack: stack_clipped."""
    hdr = struct.pack('<IIHHB3x', len(image), ip, RED_ZONE, RED_ZONE + bp, 1)
    data = hdr + image + bytes(RED_ZONE) + stack
    assert len(data) < 8192
    with open(os.path.join(OUT_DIR, 'seed-' + name), 'wb') as f:
        f.write(data)


class Stack:
    """Words at offsets from rsp."""

    def __init__(self, size):
        self.b = bytearray(size)

    def put(self, off, *ws):
        self.b[off:off + 8 * len(ws)] = words(*ws)

    def bytes(self):
        return bytes(self.b)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    sp = FAKE_STACK + RED_ZONE

    # .eh_frame_hdr and .debug_frame: mid <- _start <- mid <- _start <- 0.
    seed('eh-frame-chain', elf('seed-eh-frame-hdr'), EH_MID + 3,
         words(code(EH_START + 0xc), code(EH_MID + 6), code(EH_START + 0xc), 0))
    seed('debug-frame-chain', elf('seed-debug-frame'), DBG_MID + 3,
         words(code(DBG_START + 0xc), code(DBG_MID + 6), code(DBG_START + 0xc), 0))
    # Deeper than the 64 frames unwind_snapshot is asked for.
    seed('deep-chain', elf('seed-eh-frame-hdr'), EH_MID + 3,
         words(*[code(EH_START + 0xc if i % 2 else EH_MID + 6) for i in range(70)], 0))

    image, sym = build_cfi()
    after_caller = sym['_start'] + 7         # return address of call caller
    after_nocfi = sym['_start'] + 12         # of call nocfi
    after_mid = sym['caller'] + 10           # of call mid in caller
    nocfi_after_mid = sym['nocfi'] + 9       # of call mid in nocfi

    # mid <- caller (CFA = rbp + 16, rbx saved) <- _start (end).
    s = Stack(40)
    s.put(0, code(after_mid), 0x1111)        # return address, saved rbx
    s.put(16, 0, code(after_caller))         # saved rbp, return address
    seed('cfi-chain', image, sym['mid'] + 3, s.bytes(), bp=16)

    # mid <- nocfi: no FDE there, libunwind follows rbp to _start.
    s = Stack(32)
    s.put(0, code(nocfi_after_mid))
    s.put(8, 0, code(after_nocfi))
    seed('frame-pointer-chain', image, sym['mid'] + 3, s.bytes(), bp=8)

    # A signal handler (mid) returns to __restore_rt; the ucontext above
    # holds the interrupted caller (at its call of mid, rbp frame set up),
    # which returns to _start.
    s = Stack(0x140)
    uc = 8
    r = 0x120                                # caller's rbp
    s.put(0, code(sym['__restore_rt']))
    s.put(uc + UC_GREGS[6], sp + r)
    s.put(uc + UC_GREGS[7], sp + r - 8)
    s.put(uc + UC_GREGS[16], code(sym['caller'] + 5))
    s.put(r - 8, 0x2222, 0, code(after_caller))
    seed('signal-frame', image, sym['mid'] + 3, s.bytes())


if __name__ == '__main__':
    main()
