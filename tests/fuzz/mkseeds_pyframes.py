#!/usr/bin/env python3
"""Writes the seeds of fuzz_pyframes (tests/fuzz/corpus/pyframes/seed-*).
The input format is described at the top of tests/fuzz/fuzz_pyframes.c;
the constants below must match it and stackdump/pylayout.c's layouts.  Run
from the repository root.

Each seed is a small address space at FAKE_BASE: three type objects (only
their addresses count), interpreter frames, code objects with their names,
file names and line tables, built as CPython 3.11, 3.12 and 3.13 lay them
out, chained innermost first as a thread's data stack holds them."""

import os
import struct

FAKE_BASE = 0x100000000
CODE_T, STR_T, BYTES_T = FAKE_BASE + 0x10, FAKE_BASE + 0x20, FAKE_BASE + 0x30
OUT_DIR = 'tests/fuzz/corpus/pyframes'
FRAMES, STACK, CODES, STRS, DEBUG = 0x1000, 0x1800, 0x2000, 0x3000, 0x800

# Where each version keeps what the walk reads (pylayout.c's layouts).
LAYOUTS = {
    0x030b: dict(frame_code=32, frame_previous=48, frame_instr=56, frame_is_entry=68,
                 frame_owner=69, frame_size=72, code_firstlineno=72, code_filename=112,
                 code_qualname=128, code_linetable=136, code_adaptive=184,
                 str_state=32, str_length=16, str_ascii_size=48, ready=True),
    0x030c: dict(frame_code=0, frame_previous=8, frame_instr=56, frame_is_entry=None,
                 frame_owner=70, frame_size=72, code_firstlineno=68, code_filename=112,
                 code_qualname=128, code_linetable=136, code_adaptive=192,
                 str_state=32, str_length=16, str_ascii_size=40, ready=False),
    # 3.13.0's, as its _Py_DebugOffsets give them.
    0x030d: dict(frame_code=0, frame_previous=8, frame_instr=56, frame_is_entry=None,
                 frame_owner=70, frame_size=72, code_firstlineno=68, code_filename=112,
                 code_qualname=128, code_linetable=136, code_adaptive=200,
                 str_state=32, str_length=16, str_ascii_size=40, ready=False),
}


class Space:
    def __init__(self, size=0x5000):
        self.b = bytearray(size)
        self.strs = STRS

    def put(self, off, data):
        self.b[off:off + len(data)] = data

    def u64(self, off, v):
        self.put(off, struct.pack('<Q', v))

    def u32(self, off, v):
        self.put(off, struct.pack('<I', v))

    def string(self, L, text, length=None):
        """A compact ASCII str; LENGTH overrides the length it says."""
        off = self.strs
        data = text.encode()
        self.u64(off + 8, STR_T)
        self.u64(off + L['str_length'], len(data) if length is None else length)
        state = 1 << 2 | 1 << 5 | 1 << 6 | (1 << 7 if L['ready'] else 0)
        self.u32(off + L['str_state'], state)
        self.put(off + L['str_ascii_size'], data + b'\0')
        self.strs = (off + L['str_ascii_size'] + len(data) + 16) & ~7
        return FAKE_BASE + off

    def bytes_obj(self, data):
        off = self.strs
        self.u64(off + 8, BYTES_T)
        self.u64(off + 16, len(data))
        self.put(off + 32, data)
        self.strs = (off + 32 + len(data) + 16) & ~7
        return FAKE_BASE + off

    def code(self, L, off, qualname, filename, first, table, units=8, type_=CODE_T,
             qlen=None):
        self.u64(off + 8, type_)
        self.u64(off + 16, units)
        self.u32(off + L['code_firstlineno'], first)
        self.u64(off + L['code_filename'], self.string(L, filename))
        self.u64(off + L['code_qualname'], self.string(L, qualname, qlen))
        self.u64(off + L['code_linetable'], self.bytes_obj(table))
        return FAKE_BASE + off

    def frame(self, L, off, code, instr, previous, entry=False, owner=0):
        self.u64(off + L['frame_code'], code)
        self.u64(off + L['frame_previous'], previous)
        self.u64(off + L['frame_instr'], instr)
        if L['frame_is_entry'] is not None:
            self.b[off + L['frame_is_entry']] = 1 if entry else 0
        self.b[off + L['frame_owner']] = owner
        return FAKE_BASE + off


# Two instructions on the first line, then two on the next, then four on
# the one after: (code 13, no columns, line delta as a signed varint) and
# a short form (code 0: same line, one byte of columns).
TABLE = bytes([0x80 | 13 << 3 | 1, 0x00, 0x80 | 13 << 3 | 1, 0x02, 0x80 | 13 << 3 | 3, 0x02,
               0x80 | 0 << 3 | 0, 0x05])


def header(layout_byte, current, data=FRAMES, stack=STACK, flags=0):
    return bytes([layout_byte, flags]) + bytes(6) + struct.pack('<QQQ', current, data, stack)


def chain(version, loop=False, badtype=False, strlie=False):
    L = LAYOUTS[version]
    s = Space()
    names = [('burn', 30), ('Worker.run.<locals>.key', 42), ('Worker.run', 41)]
    codes = []
    for i, (q, first) in enumerate(names):
        codes.append(s.code(L, CODES + i * 0x100, q, '/srv/app/pychain.py', first, TABLE,
                            type_=STR_T if badtype and i == 1 else CODE_T,
                            qlen=1 << 40 if strlie and i == 0 else None))
    # Innermost first; 3.11 marks the first frame of each C call, 3.12 and
    # 3.13 push a shim frame (owned by the C stack) below them instead.
    f = [FRAMES + i * 0x80 for i in range(3)]
    shim = STACK + 0x40
    prev2 = FAKE_BASE + f[0] if loop else 0
    if version == 0x030b:
        s.frame(L, f[2], codes[2], codes[2] + L['code_adaptive'] + 10, prev2, entry=True)
        s.frame(L, f[1], codes[1], codes[1] + L['code_adaptive'] + 4, FAKE_BASE + f[2], entry=True)
    else:
        s.frame(L, f[2], codes[2], codes[2] + L['code_adaptive'] + 10, prev2)
        s.frame(L, shim, 0, 0, FAKE_BASE + f[2], owner=3)
        s.frame(L, f[1], codes[1], codes[1] + L['code_adaptive'] + 4, FAKE_BASE + shim)
    s.frame(L, f[0], codes[0], codes[0] + L['code_adaptive'] + 12, FAKE_BASE + f[1])
    layout_byte = {0x030b: 0, 0x030c: 1, 0x030d: 2}[version]
    if version == 0x030d:
        s.put(DEBUG, debug_offsets_313())
    s.put(0, header(layout_byte, FAKE_BASE + f[0]))
    return bytes(s.b)


def debug_offsets_313():
    """3.13.0's _Py_DebugOffsets, as its _PyRuntime starts."""
    fields = [
        0x030d00f0, 0,                                  # version, free_threaded
        0, 0, 632,                                      # runtime_state
        0, 0, 7264, 7344, 0, 0, 0, 0, 0, 0, 0, 0, 0,    # interpreter_state
        0, 0, 8, 16, 72, 152, 160, 232, 0,              # thread_state
        72, 8, 0, 56, 72, 70,                           # interpreter_frame
        200, 112, 120, 128, 136, 68, 0, 0, 0, 200,      # code_object
        16, 8,                                          # pyobject
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    # type, tuple, list, dict, float
        0, 0, 0,                                        # long
        32, 16, 32,                                     # bytes_object
        40, 32, 16, 40,                                 # unicode_object
    ]
    return b'xdebugpy' + struct.pack(f'<{len(fields)}Q', *fields)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    seeds = {
        'seed-311-chain': chain(0x030b),
        'seed-312-shim': chain(0x030c),
        'seed-313-debug-offsets': chain(0x030d),
        'seed-311-loop': chain(0x030b, loop=True),
        'seed-311-code-of-wrong-type': chain(0x030b, badtype=True),
        'seed-311-str-lies-about-its-length': chain(0x030b, strlie=True),
        'seed-linetable': bytes([0, 0]) + bytes(6) + struct.pack('<QQQ', 6, 0, 0) + TABLE,
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT_DIR, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
