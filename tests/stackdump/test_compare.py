#!/usr/bin/env python3
"""stackdump against gdb, frame by frame, on threads caught where unwinders
go wrong.

Builds tests/targets/stackcases.c (and tests/stackdump/cxxcase.cc,
libcase.c) into BUILD/tests/stackdump/ in several variants: with and
without frame pointers, with CFI only in .debug_frame, stripped (with a
.gnu_debuglink to a full debug file, so gdb still has full debug
information), stripped with MiniDebugInfo (.gnu_debugdata), C++.  For each
case the target process is stopped (SIGSTOP, so that both tools see the
same state), `stackdump -a TID` runs, then gdb prints the pc of every
physical frame of the same thread; the lists must be equal, and every frame
stackdump names must lie inside that symbol's extent in the full symbol
table (nm -S of the unstripped file).

In perf mode (`stackdump -m perf`, the kernel's sample of a running
thread) the frames cannot be held against gdb at the same instant: for
the loop cases (a thread spinning in a known chain) every perf sample
names the chain, has the function starts and the stack hash of the ptrace
samples caught in the same innermost function, and the thread is never
seen stopped or traced while perf samples it.

Also `stackdump -p PID` of BUILD/tests/hotchain (no gdb needed): every
thread of the process is dumped, the hot one in its chain, none is left
stopped or traced, and a thread another tracer holds is passed over.

    tests/stackdump/test_compare.py [--build DIR] [-v]

Prints "ok - NAME", "not ok - NAME: why" or "skip - NAME: why" per check and
ends with "N passed, N failed, N skipped" (as every script of tests/testlib.py).
Skips, saying why, without gdb, a C/C++ compiler, or ptrace permission.
Every wait has a deadline; nothing is timed.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402
from testlib import (check, poll, ptrace_allowed, query, selected, skip,  # noqa: E402
                     start_target, summary, thread_status)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
verbose = False

# gdb: the pc and name of every physical frame.  Inlined frames share their
# caller's pc, and the frames gdb rebuilds from DWARF call-site information
# for tail calls (pthread_kill jumps to __pthread_kill_implementation; pc
# after the jmp) were never on the stack.
GDB_PY = r"""
import gdb
f = gdb.newest_frame()
while f is not None:
    if f.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
        print("GDBFRAME 0x%x %s" % (f.pc(), f.name() or "??"))
    f = f.older()
"""


def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, **kw)


def build(out):
    """Compiles every variant; returns {name: (binary, full-symbols file)}."""
    os.makedirs(out, exist_ok=True)
    src = os.path.join(ROOT, "tests/targets/stackcases.c")
    base = ["gcc", "-std=gnu11", "-O2", "-g", "-pthread", "-Wall"]
    v = {}

    def cc(name, flags, source=src, compiler=None):
        path = os.path.join(out, name)
        r = run((compiler or base) + flags + ["-o", path, source])
        if r.returncode != 0:
            raise RuntimeError(f"building {name}: {r.stderr.strip()}")
        return path

    v["fp"] = (cc("cases-fp", ["-fno-omit-frame-pointer"]),) * 2
    v["nofp"] = (cc("cases-nofp", ["-fomit-frame-pointer"]),) * 2
    # CFI only in .debug_frame: .eh_frame then covers only the crt files.
    v["debugframe"] = (cc("cases-debugframe", ["-fomit-frame-pointer",
                                               "-fno-asynchronous-unwind-tables"]),) * 2
    # Stripped, with a .gnu_debuglink to a debug file so gdb has full
    # debug information; stackdump sees no .symtab.
    full = v["nofp"][0]
    stripped = os.path.join(out, "cases-stripped")
    debug = stripped + ".debug"
    for cmd in (["objcopy", "--only-keep-debug", full, debug],
                ["objcopy", "--strip-all", "--add-gnu-debuglink=" + debug, full, stripped]):
        r = run(cmd)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    v["stripped"] = (stripped, full)
    # MiniDebugInfo as Fedora makes it: the function symbols, xz-compressed,
    # in .gnu_debugdata of the stripped file.
    mini = os.path.join(out, "cases-minidebug")
    tmp = tempfile.mkdtemp(dir=out)
    try:
        syms = run(["nm", "--format=posix", "--defined-only", full]).stdout
        funcs = sorted({l.split()[0] for l in syms.splitlines()
                        if len(l.split()) > 1 and l.split()[1] in "Tt"})
        with open(os.path.join(tmp, "funcs"), "w") as f:
            f.write("\n".join(funcs) + "\n")
        md = os.path.join(tmp, "mini")
        for cmd in (["objcopy", "--only-keep-debug", full, md + ".dbg"],
                    ["objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section",
                     ".comment", "--keep-symbols=" + os.path.join(tmp, "funcs"), md + ".dbg", md],
                    ["xz", "-f", md],
                    ["objcopy", "--strip-all", "--add-section", ".gnu_debugdata=" + md + ".xz",
                     "--add-gnu-debuglink=" + debug, full, mini]):
            r = run(cmd)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    v["minidebug"] = (mini, full)
    v["lib"] = (cc("libcase.so", ["-shared", "-fPIC"], os.path.join(HERE, "libcase.c")),) * 2
    if shutil.which("g++"):
        v["cxx"] = (cc("cases-cxx", [], os.path.join(HERE, "cxxcase.cc"),
                       ["g++", "-O2", "-g", "-pthread", "-Wall"]),) * 2
    # Rust's two manglings: legacy (the default) and v0.
    if shutil.which("rustc"):
        rs = os.path.join(HERE, "rustcase.rs")
        for key, flags in (("rust", []), ("rust-v0", ["-C", "symbol-mangling-version=v0"])):
            v[key] = (cc(f"cases-{key}", flags, rs, ["rustc", "-O", "-g"]),) * 2
    return v


class Target:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.pid = self.tid = None
        end = time.monotonic() + 10
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("tid "):
                self.tid = int(line.split()[1])
            if line.startswith("pid "):
                self.pid = int(line.split()[1])
            if line.strip() == "ready":
                return
        self.stop()
        raise RuntimeError(f"{argv[0]} did not say ready: {self.proc.stderr.read()}")

    def state(self):
        try:
            with open(f"/proc/{self.pid}/task/{self.tid}/status") as f:
                text = f.read()
        except OSError:
            return "?", -1
        st = re.search(r"^State:\s+(\S)", text, re.M)
        tr = re.search(r"^TracerPid:\s+(\d+)", text, re.M)
        return (st.group(1) if st else "?"), (int(tr.group(1)) if tr else -1)

    def freeze(self):
        os.kill(self.pid, signal.SIGSTOP)
        end = time.monotonic() + 5
        while self.state()[0] != "T" and time.monotonic() < end:
            time.sleep(0.005)
        return self.state()[0] == "T"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def start_case(name, argv):
    """The target of case NAME, or None (a failure of NAME, said)."""
    try:
        return Target(argv)
    except (RuntimeError, OSError) as e:
        check(name, False, str(e))
        return None


def unwound(rest):
    """A frame line's text without the source line names at read time add
    (" at file.c:LINE"); None for a call inlined into the next frame, which
    is no frame of the unwind (its ip is the next one's)."""
    return None if " [inlined] (" in rest else re.sub(r" at \S+:\d+$", "", rest)


def parsed_frames(text):
    """[(ip, symbol or None, symbol offset, module)] of the frames of
    stackdump -a's output TEXT."""
    frames = []
    for line in text.splitlines():
        m = re.match(r"\s+#\d+ 0x([0-9a-f]+) (.*)$", line)
        if not m or unwound(m.group(2)) is None:
            continue
        ip, rest = int(m.group(1), 16), unwound(m.group(2))
        named = re.match(r"(.*)\+0x([0-9a-f]+) \((.*)\)$", rest)
        if named:
            frames.append((ip, named.group(1), int(named.group(2), 16), named.group(3)))
        else:
            frames.append((ip, None, 0, rest.rsplit("+0x", 1)[0]))
    return frames


def stackdump_frames(stackdump, tid, extra=()):
    """[(ip, symbol or None, symbol offset, module)] of the unwind, error text."""
    r = run([stackdump, "-a", *extra, str(tid)])
    return parsed_frames(r.stdout), r.stdout + r.stderr, r.returncode


def gdb_frames(tid, symbols=None):
    cmd = ["gdb", "-nx", "-batch", "-p", str(tid)]
    if symbols:
        cmd[4:4] = ["-ex", f"set debug-file-directory {os.path.dirname(symbols)}"]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(GDB_PY)
    try:
        r = run(cmd + ["-ex", f"source {f.name}"], timeout=120)
    finally:
        os.unlink(f.name)
    frames = []
    for line in r.stdout.splitlines():
        m = re.match(r"GDBFRAME 0x([0-9a-f]+) (.*)$", line)
        if m:
            frames.append((int(m.group(1), 16), m.group(2)))
    return frames, r.stdout + r.stderr


_nm_cache = {}


def symbol_extents(path):
    """{name: [(start, size)]} of the full symbol table of PATH (its debug
    file by build-id for system libraries)."""
    if path in _nm_cache:
        return _nm_cache[path]
    target = path
    bid = run(["readelf", "-n", path]).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", bid)
    if m:
        dbg = f"/usr/lib/debug/.build-id/{m.group(1)[:2]}/{m.group(1)[2:]}.debug"
        if os.path.exists(dbg):
            target = dbg
    out = run(["nm", "-S", "--defined-only", target]).stdout
    if not out.strip():
        out = run(["nm", "-S", "-D", "--defined-only", target]).stdout
    ext = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4:
            # stackdump shows the default version's plain name.
            name = f[3].split("@@")[0]
            ext.setdefault(name, []).append((int(f[0], 16), int(f[1], 16)))
    # stackdump shows C++ and Rust names demangled: c++filt (binutils' own
    # libiberty) gives the same text for the same linkage name, but for the
    # hash of a legacy Rust name and the crate disambiguator of a v0 one,
    # which stackdump (like gdb) leaves out.
    mangled = [n for n in ext if n.startswith(("_Z", "_R"))]
    if mangled and shutil.which("c++filt"):
        readable = run(["c++filt"], input="\n".join(mangled) + "\n").stdout.splitlines()
        if len(readable) == len(mangled):
            for m, r in zip(mangled, readable):
                if m.startswith("_R"):
                    r = re.sub(r"\[[0-9a-f]+\]", "", r)
                elif re.search(r"17h[0-9a-f]{16}E", m):
                    r = re.sub(r"::h[0-9a-f]{16}$", "", r)
                ext.setdefault(r, []).extend(ext[m])
    _nm_cache[path] = ext
    return ext


def module_bias(pid, module, ip):
    """Load bias of MODULE in PID from its mapping holding IP."""
    try:
        with open(module, "rb") as f:
            if f.read(18)[16:18] == b"\x02\x00":
                return 0        # ET_EXEC (Go): loaded where it was linked
    except OSError:
        pass
    # A segment's file offset and address may differ (rustc's link puts
    # .text at 0x16300 from offset 0x15300): the PT_LOAD holding the file
    # offset gives the address it was linked at.
    loads = []
    r = run(["readelf", "-lW", module])
    for m in re.finditer(r"^\s+LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+\S+\s+0x([0-9a-f]+)",
                         r.stdout, re.M):
        loads.append(tuple(int(x, 16) for x in m.groups()))
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            p = line.split(None, 5)
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            if lo <= ip < hi:
                off = int(p[2], 16) + ip - lo
                for fo, va, size in loads:
                    if fo <= off < fo + size:
                        return ip - (va + off - fo)
                return lo - int(p[2], 16)
    return None


def eu_stack_frames(tid):
    """[pc] of eu-stack's frames of thread TID, and its output."""
    r = run(["eu-stack", "-1", "-p", str(tid)])
    return [int(m.group(1), 16) for m in re.finditer(r"^#\d+\s+0x([0-9a-f]+)", r.stdout, re.M)], \
        r.stdout + r.stderr


def same_ips(name, a, b, tool, text, ttext):
    """Checks that the ip lists A (stackdump's) and B (TOOL's) are equal."""
    diff = next((i for i in range(max(len(a), len(b)))
                 if i >= len(a) or i >= len(b) or a[i] != b[i]), None)
    check(f"{name}: {len(a)} frames equal {tool}'s, ip for ip", diff is None,
          f"first difference at #{diff}: stackdump "
          f"{[hex(x) for x in a[diff:diff + 3]] if diff is not None else ''} {tool} "
          f"{[hex(x) for x in b[diff:diff + 3]] if diff is not None else ''}\n{text}\n{ttext[-2000:]}")


def compare(name, argv, stackdump, full_symbols=None, expect=(), dump_args=(),
            must_truncate=False, mutate=None, restore=None, lib_symbols=None, eu_stack=False):
    """One case: stackdump's frames == gdb's physical frames (and eu-stack's,
    with EU_STACK), names inside their symbols, EXPECT names present in
    order, no caller at ip 0.  TEST_FILTER selects cases by NAME."""
    if not selected(name) or not (t := start_case(name, argv)):
        return
    try:
        if mutate:
            mutate()
        if not t.freeze():
            check(name, False, "target did not stop on SIGSTOP")
            return
        ours, text, rc = stackdump_frames(stackdump, t.tid, dump_args)
        if rc != 0 and "operation not permitted" in text:
            skip(name, "ptrace not permitted: " + text.strip())
            return
        if not check(f"{name}: stackdump dumped", rc == 0 and ours, text.strip()):
            return
        if verbose:
            print(text)
        if must_truncate:
            check(f"{name}: truncation marked", "truncated at" in text, text)
        else:
            if restore:
                restore()      # gdb reads modules by path only
            theirs, gtext = gdb_frames(t.tid)
            if verbose:
                print("\n".join(f"gdb 0x{pc:x} {fn}" for pc, fn in theirs))
            a = [f[0] for f in ours]
            b = [f[0] for f in theirs]
            # gdb prints the return address 0 above Go's runtime.goexit as
            # one more frame; the stack ends there (eu-stack stops too).
            if len(b) > 1 and b[-1] == 0:
                b.pop()
            same_ips(name, a, b, "gdb", text, gtext)
            if eu_stack:
                c, etext = eu_stack_frames(t.tid)
                same_ips(name, a, c, "eu-stack", text, etext)
            check(f"{name}: no caller at ip 0", 0 not in a[1:], text)
        # Every named frame lies inside its symbol's extent.
        bad = []
        for i, (ip, sym, off, module) in enumerate(ours):
            if sym is None or not module.startswith("/"):
                continue
            path = module
            if full_symbols and module == argv[0]:
                path = full_symbols
            elif module.endswith(" (deleted)") and lib_symbols:
                path = lib_symbols
            ext = symbol_extents(path).get(sym, [])
            bias = module_bias(t.pid, module, ip)
            look = ip - (1 if i > 0 else 0)
            if bias is None or not any(s <= look - bias < s + max(sz, 1) for s, sz in ext):
                bad.append(f"#{i} {sym}+0x{off:x} ({module})")
        check(f"{name}: every named frame lies inside its symbol", not bad, ", ".join(bad))
        names = [f[1] for f in ours]
        at = 0
        for want in expect:
            while at < len(names) and names[at] != want:
                at += 1
            if at == len(names):
                break
        check(f"{name}: names {' <- '.join(expect)}", at < len(names) or not expect,
              f"got {names}")
    finally:
        os.kill(t.pid, signal.SIGCONT)
        state, tracer = t.state()
        t.stop()
        check(f"{name}: left untraced", tracer in (0, -1), f"TracerPid {tracer}")


def sample_chain(stackdump, tid, mode):
    """One sample of TID by stackdump -m MODE -a: (the function start of
    each frame, innermost first -- ip less its symbol offset, a frame
    without a name by its ip --, [names], stack hash, output) or None."""
    r = testlib.run_stackdump([stackdump, "-m", mode, "-a", str(tid)])
    m = re.search(r", stack hash ([0-9a-f]{16})$", r.stdout, re.M)
    frames = [(ip - off, sym) for ip, sym, off, _ in parsed_frames(r.stdout)]
    if r.returncode != 0 or not m or not frames:
        return None, r.stdout + r.stderr
    return ([f[0] for f in frames], [f[1] for f in frames], m.group(1)), r.stdout + r.stderr


def perf_loop(name, argv, stackdump, expect, samples=8):
    """stackdump -m perf on a thread spinning in a known chain.  Frames
    cannot be held against gdb at the same instant, so what holds by
    construction: every perf sample names EXPECT in order and has the
    function starts and the stack hash of the ptrace samples caught in the
    same innermost function (the hash is each frame's build-id and
    function start), and the thread is never stopped or traced while perf
    samples it."""
    name = f"perf: {name}"
    if not selected(name) or not (t := start_case(name, argv)):
        return
    try:
        perf, texts = [], []
        watch = testlib.StateWatch(t.pid, [t.tid])
        for _ in range(samples):
            got, text = sample_chain(stackdump, t.tid, "perf")
            texts.append(text)
            if got:
                perf.append(got)
        watch.stop()
        if not perf and "perf_event_open" in texts[-1] and "refused" in texts[-1]:
            skip(name, texts[-1].strip())
            return
        if not check(f"{name}: {samples} perf samples", len(perf) == samples, "\n".join(texts)):
            return
        check(f"{name}: never stopped or traced while perf sampled it",
              watch.reads > 0 and not watch.bad, f"{watch.reads} reads, seen {watch.bad}")
        missing = [n for n in expect if not all(n in names for _, names, _ in perf)]
        check(f"{name}: every perf sample names {' <- '.join(expect)}", not missing,
              f"{missing} missing\n" + "\n".join(texts))
        # ptrace samples until each innermost function perf caught is seen
        # (a rare one, libc's clock_gettime entry under the vDSO's, may
        # never be).
        ptrace = {}
        for _ in range(30):
            if all(p[0][0] in ptrace for p in perf):
                break
            got, text = sample_chain(stackdump, t.tid, "ptrace")
            if got:
                ptrace.setdefault(got[0][0], got)
        same = [p for p in perf if p[0][0] in ptrace]
        bad = [f"perf {names} {h} vs ptrace {ptrace[starts[0]][1:]}"
               for starts, names, h in same
               if ptrace[starts[0]][0] != starts or ptrace[starts[0]][2] != h]
        check(f"{name}: the function starts and stack hash of the ptrace samples in the "
              f"same function", same and not bad, "\n".join(bad) or "no innermost function "
              f"in common: perf {[p[1][0] for p in perf]}, ptrace {[p[1][0] for p in ptrace.values()]}")
        # Caught elsewhere: its callers are those of a ptrace sample.
        chains = [q[0] for q in ptrace.values()]
        odd = [names for starts, names, _ in perf if starts[0] not in ptrace
               and not any(c[len(c) - len(starts) + 1:] == starts[1:] for c in chains
                           if len(c) >= len(starts) - 1)]
        check(f"{name}: the callers of a sample caught elsewhere are a ptrace sample's",
              not odd, f"{odd} vs ptrace {[q[1] for q in ptrace.values()]}")
    finally:
        state, tracer = t.state()
        t.stop()
        check(f"{name}: left untraced", tracer in (0, -1), f"TracerPid {tracer}")


def tasks(pid):
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def dumped_threads(text):
    """{tid: [symbol or module+offset, ...]} of the output of stackdump -p."""
    threads, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"tid (\d+) \(.*\) of pid \d+ \(.*\), stopped \d+ ", line)
        if m:
            cur = threads.setdefault(int(m.group(1)), [])
        elif cur is not None and re.match(r"\s+#\d+ ", line) and unwound(line.split(None, 1)[1]):
            cur.append(re.sub(r"\+0x[0-9a-f]+ \(.*\)$", "", unwound(line.split(None, 1)[1])))
    return threads


def whole_process(build, stackdump):
    """stackdump -p PID: every thread, one after the other, each released."""
    name = "stackdump -p PID"
    hotchain = os.path.join(build, "tests", "hotchain")
    allowed, why = ptrace_allowed()
    if not allowed:
        skip(name, why)
        return
    if not os.access(hotchain, os.X_OK) or not os.access(stackdump, os.X_OK):
        skip(name, f"{hotchain} or {stackdump} is not built")
        return
    p, pid, hots, idle = start_target([hotchain, "--threads", "3", "--hot", "1", "--timeout", "60"])
    tracer = None
    try:
        if not check(f"{name}: hotchain ready", pid and len(hots) == 1 and len(idle) == 2):
            return
        hot = hots[0]
        before = tasks(pid)
        chain = ["hot_leaf", "hot_mid", "hot_root", "hot_thread_main"]
        # The hot thread spends all but a few instructions of every 20 ms in
        # hot_leaf; between two calls it is caught higher up the chain, so
        # a dump that misses hot_leaf is taken again, up to 5 times.
        for _ in range(5):
            r = testlib.run_stackdump([stackdump, "-p", str(pid)])
            got = dumped_threads(r.stdout)
            if got.get(hot, [])[:1] == ["hot_leaf"] or r.returncode != 0:
                break
        check(f"{name}: exit status 0", r.returncode == 0, r.stderr)
        check(f"{name}: every thread of /proc/PID/task dumped once, in tid order",
              before == sorted([pid, hot] + idle) and r.stdout.count("tid ") == len(before)
              and list(got) == before, f"tasks {before}, dumped {list(got)}\n{r.stdout}")
        check(f"{name}: the hot thread is in hot_leaf <- hot_mid <- hot_root <- hot_thread_main",
              got.get(hot, [])[:4] == chain, r.stdout)
        check(f"{name}: the idle threads are in idle_thread_main",
              all("idle_thread_main" in got.get(t, []) for t in idle), r.stdout)
        # By construction: each thread is detached before its dump returns.
        states = {t: thread_status(pid, t) for t in tasks(pid)}
        left = {t: (s["State"], s["TracerPid"]) for t, s in states.items()
                if s["State"].startswith(("t", "T")) or s["TracerPid"] != "0"}
        check(f"{name}: no thread left stopped or traced", not left, str(left))

        # A thread that cannot be dumped (strace holds it) is said on
        # stderr; the others are dumped all the same.
        if not shutil.which("strace"):
            skip(f"{name}: past a thread another tracer holds", "strace is not installed")
            return
        tracer = subprocess.Popen(["strace", "-qq", "-o", os.devnull, "-p", str(idle[0])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not poll(lambda: thread_status(pid, idle[0])["TracerPid"] != "0", 10):
            check(f"{name}: past a thread another tracer holds", False, "strace did not attach")
            return
        r = testlib.run_stackdump([stackdump, "-p", str(pid)])
        got = dumped_threads(r.stdout)
        check(f"{name}: past a thread another tracer holds",
              r.returncode == 0 and list(got) == [t for t in before if t != idle[0]]
              and f"tid {idle[0]}" in r.stderr and "strace" in r.stderr,
              f"rc {r.returncode}, dumped {list(got)}, stderr {r.stderr}")
    finally:
        if tracer:
            tracer.terminate()
            tracer.wait(timeout=10)
        p.kill()
        p.wait(timeout=10)


GO_CHAIN = ["main.burn", "main.spin", "main.worker"]


def go_samples(build, gospin):
    """The daemon samples the Go thread 20 times while it spins in its
    frameless leaf: one distinct stack, by construction (the thread never
    leaves main.burn, and the hash takes each function's start from the
    unwind tables, not the instruction caught), the whole chain, each
    function's start its symbol's, no frame at ip 0."""
    name = "go: 20 samples of the loop by the daemon"
    cpumond = os.path.join(build, "cpumond")
    if not os.access(cpumond, os.X_OK):
        skip(name, f"{cpumond} is not built")
        return
    tmp = tempfile.mkdtemp(dir=os.path.join(build, "tests"))
    db, conf = os.path.join(tmp, "go.db"), os.path.join(tmp, "go.conf")
    try:
        t = Target([gospin, "--timeout", "120"])
    except (RuntimeError, OSError) as e:
        check(name, False, str(e))
        shutil.rmtree(tmp, ignore_errors=True)
        return
    daemon = None
    try:
        with open(conf, "w") as f:
            f.write(f"""[cpumond]
interval = 300ms
threshold = {testlib.HOT_THRESHOLD}
starved = no
cooldown = 1h
episode_samples = 20
sample_interval = 20ms
database = {db}

[watch go]
pid = {t.pid}
""")
        daemon = subprocess.Popen([cpumond, "-c", conf], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        # An event is stored once its episode has ended.
        rows = poll(lambda: query(db, "SELECT id, samples, stack_hash, episode_end FROM events"
                                      " WHERE tid = ?", (t.tid,)), 60)
        if not check(f"{name}: an event", rows, f"none in {db}"):
            return
        eid, samples, key, end = rows[0]
        # ptrace says the samples it skipped; perf, which samples the
        # thread's CPU time, how many came in the intervals it waited.
        skipped = re.match(r"cut short: (\d+) of 20 samples skipped", end or "")
        came = re.match(r"(\d+) of 20 samples in \d+ sample intervals", end or "")
        check(f"{name}: 20 samples, or the skipped ones said",
              samples >= 2 and (samples == 20 or (skipped and samples + int(skipped.group(1)) == 20)
                                or (came and int(came.group(1)) == samples)),
              f"samples {samples}, end {end!r}")
        counts = query(db, "SELECT stack_hash, count FROM event_stacks WHERE event_id = ?", (eid,))
        check(f"{name}: one stack hash for all {samples} samples",
              len(counts) == 1 and counts[0] == (key, samples), str(counts))
        frames = query(db, "SELECT symbol, func_offset FROM stack_frames WHERE hash = ?"
                           " ORDER BY depth", (key,))
        syms = [f[0] for f in frames]
        check(f"{name}: key stack {' <- '.join(GO_CHAIN)} <- ... <- runtime.goexit",
              syms[:3] == GO_CHAIN and syms[-1:] == ["runtime.goexit.abi0"], str(syms))
        # A static executable, loaded where it was linked: func_offset is
        # the function's ELF address, and nm's.
        ext = symbol_extents(gospin)
        starts = [ext.get(sym, [(None, 0)])[0][0] for sym in GO_CHAIN]
        check(f"{name}: each function's start from the unwind tables is its symbol's",
              [f[1] for f in frames[:3]] == starts,
              f"{[f[1] for f in frames[:3]]} against {starts}")
        ips = [r[0] for r in query(db, "SELECT ip FROM event_frames WHERE event_id = ? ORDER BY depth",
                                   (eid,))]
        check(f"{name}: no caller at ip 0", ips and 0 not in ips[1:], str(ips))
    finally:
        if daemon and daemon.poll() is None:
            daemon.terminate()
            daemon.wait(timeout=10)
        t.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def go_cases(build, stackdump):
    """A Go program of a default go build (tests/targets/gospin.go): its only
    unwind tables are in a compressed .debug_frame."""
    gospin = os.path.join(build, "tests", "gospin")
    if not os.access(gospin, os.X_OK):
        skip("go", f"{gospin} is not built (make builds it when go is installed: "
                   "apt-get install golang-go)")
        return
    if not shutil.which("eu-stack"):
        skip("go: against eu-stack", "eu-stack is not installed (apt-get install elfutils)")
    compare("go: frameless leaf, compressed .debug_frame", [gospin], stackdump,
            expect=GO_CHAIN + ["runtime.goexit.abi0"], eu_stack=bool(shutil.which("eu-stack")))
    go_samples(build, gospin)


def main():
    global verbose
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    verbose = args.v
    args.build = os.path.abspath(args.build)
    stackdump = os.path.join(args.build, "stackdump")
    testlib.run([whole_process], args.build, stackdump)

    why = None
    if not shutil.which("gdb"):
        why = "gdb is not installed (apt-get install gdb)"
    elif not shutil.which("gcc") or not shutil.which("objcopy") or not shutil.which("xz"):
        why = "gcc, objcopy or xz missing"
    elif not os.access(stackdump, os.X_OK):
        why = f"{stackdump} is not built"
    elif os.geteuid() != 0:
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                if int(f.read()) != 0:
                    why = "not root and kernel.yama.ptrace_scope is not 0"
        except OSError:
            pass
    if why:
        skip("stackdump against gdb", why)
    else:
        out = os.path.join(args.build, "tests", "stackdump")
        try:
            v = build(out)
        except (RuntimeError, OSError) as e:
            check("build the stack cases", False, str(e))
            v = None
        if v:
            chain = ["case_leaf", "case_mid", "case_root", "case_thread", "start_thread", "clone3"]
            for var in ("fp", "nofp", "debugframe"):
                compare(f"{var} spin", [v[var][0], "--case", "spin"], stackdump, expect=chain)
            compare("stripped spin", [v["stripped"][0], "--case", "spin"], stackdump,
                    full_symbols=v["stripped"][1], expect=["start_thread", "clone3"])
            compare("minidebuginfo spin", [v["minidebug"][0], "--case", "spin"], stackdump,
                    full_symbols=v["minidebug"][1], expect=chain)
            compare("vdso", [v["nofp"][0], "--case", "vdso"], stackdump,
                    expect=["vdso_loop", "vdso_root", "case_thread", "start_thread", "clone3"])
            compare("signal handler", [v["nofp"][0], "--case", "signal"], stackdump,
                    expect=["sig_spin", "on_signal", "sig_interrupted", "case_thread"])
            compare("signal handler on an alternate stack", [v["nofp"][0], "--case", "altstack"],
                    stackdump, expect=["sig_spin", "on_signal", "alt_interrupted", "case_thread",
                                       "start_thread", "clone3"])
            compare("recursion 200 deep", [v["nofp"][0], "--case", "recurse", "--depth", "200"],
                    stackdump, expect=["case_leaf", "recurse", "case_thread", "clone3"],
                    dump_args=("-n", "1024"))
            for var in ("fp", "nofp", "debugframe"):
                perf_loop(f"{var} spin", [v[var][0], "--case", "spin"], stackdump, chain)
            perf_loop("vdso", [v["nofp"][0], "--case", "vdso"], stackdump,
                      ["vdso_loop", "vdso_root", "case_thread", "start_thread", "clone3"])
            perf_loop("recursion 200 deep", [v["nofp"][0], "--case", "recurse", "--depth", "200"],
                      stackdump, ["case_leaf", "recurse", "case_thread", "clone3"])
            compare("recursion 200 deep, -n 50", [v["nofp"][0], "--case", "recurse"],
                    stackdump, dump_args=("-n", "50"), must_truncate=True)
            if "cxx" in v:
                compare("c++ catch block, inlined code, a template member in a namespace",
                        [v["cxx"][0]], stackdump,
                        expect=["demo::Spinner<unsigned long>::burn(unsigned long)",
                                "start_thread", "clone3"])
            else:
                skip("c++ catch block, inlined code", "g++ is not installed")
            for key in ("rust", "rust-v0"):
                if key in v:
                    compare(f"{key} mangled names", [v[key][0]], stackdump,
                            expect=["rustcase::burner::leaf", "rustcase::burner::mid",
                                    "start_thread", "clone3"])
                else:
                    skip(f"{key} mangled names", "rustc is not installed")
            # A library deleted, and one replaced, after it was loaded (an
            # upgrade): still unwound and named through /proc/PID/map_files.
            for how in ("deleted", "replaced"):
                tmpdir = tempfile.mkdtemp(dir=out)
                lib = os.path.join(tmpdir, "libcase.so")
                shutil.copy(v["lib"][0], lib)

                def upgrade(lib=lib, how=how):
                    os.unlink(lib)
                    if how == "replaced":
                        with open(lib, "wb") as f:
                            f.write(b"\x7fELF not the library any more\n" * 64)
                def put_back(lib=lib):
                    shutil.copy(v["lib"][0], lib + ".tmp")
                    os.rename(lib + ".tmp", lib)

                try:
                    compare(f"dlopen library {how} on disk",
                            [v["nofp"][0], "--case", "dlopen", "--lib", lib], stackdump,
                            lib_symbols=v["lib"][0], restore=put_back,
                            expect=["lib_leaf", "lib_root", "lib_call", "case_thread"],
                            mutate=upgrade)
                finally:
                    shutil.rmtree(tmpdir, ignore_errors=True)
        testlib.run([go_cases], args.build, stackdump)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
