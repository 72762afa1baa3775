#!/usr/bin/env python3
"""Names at read time (stackdump/symbolize.c) with the real components.

The real daemon watches three targets of the build: a stripped copy of
hotchain and one of twochains, each with its debug file split off
(objcopy --only-keep-debug, strip, --add-gnu-debuglink) and kept where no
lookup finds it, and inlinechain, whose hot loop is two always_inline calls
deep.  Then:
- the daemon stored no names for the stripped frames, and tail shows none
  without the debug file; with --debug-dir DIR, tail and report name every
  frame of both programs and give its file:line, the same as addr2line -f -i
  on the unstripped binaries; the stack hashes stay;
- inlinechain's frames show the two inlined calls as frames of their own,
  as addr2line -i and gdb's backtrace of the stopped target order them,
  in tail, stackdump and (functions) report;
- elfutils' own debuginfod server (Debian's debuginfod), started by the
  test on 127.0.0.1 inside a network namespace of its own with the readers,
  serves the debug files: names through it with DEBUGINFOD_URLS set for the
  readers only; with it unset, or with --offline, no connection at all
  (strace); a server that answers garbage names nothing; a stopped server
  costs one timeout in a run, tail exits 0 with unnamed frames, and tail -f
  goes on printing events;
- a debug file that dwz made share its DWARF with another (as Debian's
  -dbgsym packages are) names inlined calls from the shared file, found
  under --debug-dir;
- doctor says where each executable's names come from, when a stack is
  taken and when it is read, and the command that gets them;
- the daemon binary links neither libdw nor libdebuginfod, and the running
  daemon maps neither.

Needs root (ptrace, network namespaces); skips what it cannot run, saying
why.  Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and
ends with "N passed, N failed, N skipped".
"""
import argparse
import json
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
from testlib import check, note, poll, query, skip, summary  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = 8002          # debuginfod's default; the namespace has no other user
GARBAGE_PORT = 8003
TIMEOUT_S = 2        # DEBUGINFOD_TIMEOUT of the stopped-server checks


def run(argv, env=None, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def clean_env(**extra):
    """This environment without any DEBUGINFOD_ variable, plus EXTRA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}
    env["TZ"] = "UTC"
    env.update(extra)
    return env


def traced_env(**extra):
    """clean_env for a reader run under strace: LeakSanitizer (make check
    SANITIZE=1) cannot run under ptrace and would fail the program."""
    env = clean_env(**extra)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    return env


def build_id(path):
    m = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", path]).stdout)
    return m.group(1) if m else None


def split_debug(src, tmp, name):
    """Copies SRC to full/NAME (kept for addr2line), its debug file to
    dbg/NAME.debug and a stripped copy with a .gnu_debuglink to bin/NAME.
    Returns the three paths."""
    paths = {d: os.path.join(tmp, d) for d in ("full", "dbg", "bin")}
    for d in paths.values():
        os.makedirs(d, exist_ok=True)
    full, dbg, stripped = (os.path.join(paths["full"], name), os.path.join(paths["dbg"], name + ".debug"),
                           os.path.join(paths["bin"], name))
    shutil.copy2(src, full)
    for argv, cwd in ((["objcopy", "--only-keep-debug", full, dbg], None),
                      (["objcopy", "--strip-all", full, stripped], None),
                      (["objcopy", "--add-gnu-debuglink=" + name + ".debug", stripped], paths["dbg"])):
        p = run(argv, cwd=cwd)
        if p.returncode != 0:
            raise RuntimeError(f"{argv}: {p.stderr}")
    return full, dbg, stripped


def addr2line(binary, addr):
    """[(function, file name, line)] at ADDR of BINARY, innermost first, as
    addr2line -f -i gives them."""
    out = run(["addr2line", "-f", "-i", "-e", binary, hex(addr)]).stdout.splitlines()
    chain = []
    for func, where in zip(out[0::2], out[1::2]):
        path, _, line = where.split(" ")[0].rpartition(":")
        chain.append((func, os.path.basename(path), int(line) if line.isdigit() else 0))
    return chain


def chains(frames):
    """A JSON stack's frames grouped as [(unwound frame index, [frame, ...])],
    each group its inlined calls and then the frame they are inlined in."""
    out, cur = [], []
    for f in frames:
        cur.append(f)
        if not f.get("inlined"):
            out.append((len(out), cur))
            cur = []
    return out


def lookup_addr(frame, index):
    """The address the readers look frame INDEX up by: a caller's return
    address less one, unless that leaves its function."""
    off, start = frame["offset"], frame["func_offset"]
    return off - 1 if index > 0 and off > start else off


def names_of(chain):
    return [(f["symbol"], os.path.basename(f["file"] or ""), f["line"] or 0) for f in chain]


def tail_events(cpumond, db, *args, env=None, ns=None):
    """`cpumond tail -d DB -n 1000 --json ARGS` (in network namespace NS):
    (events, stderr, exit status)."""
    argv = ([("ip"), "netns", "exec", ns] if ns else []) + [cpumond, "tail", "-d", db, "-n", "1000",
                                                           "--json", *args]
    p = run(argv, env=env or clean_env())
    events = []
    for line in p.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return events, p.stderr, p.returncode


def compare_events(events, modules, what):
    """Every frame of MODULES ({stripped path: unstripped path}) in EVENTS
    named as addr2line names its address in the unstripped binary.
    Returns (frames compared, first mismatch or "")."""
    compared = 0
    for ev in events:
        for index, chain in chains(ev["stack"]):
            phys = chain[-1]
            if phys["module"] not in modules:
                continue
            want = addr2line(modules[phys["module"]], lookup_addr(phys, index))
            got = names_of(chain)
            compared += 1
            if got != want:
                return compared, f"{what}: event {ev['id']} frame {index}: {got} != addr2line {want}"
    return compared, ""


class Setup:
    """The targets, their split debug files and the daemon's database."""

    def __init__(self, build, tmp):
        self.build, self.tmp = build, tmp
        self.cpumond = os.path.join(build, "cpumond")
        self.db = os.path.join(tmp, "names.db")
        self.hot_full, self.hot_dbg, self.hot = split_debug(
            os.path.join(build, "tests", "hotchain"), tmp, "hotchain")
        self.two_full, self.two_dbg, self.two = split_debug(
            os.path.join(build, "tests", "twochains"), tmp, "twochains")
        self.inl = os.path.join(build, "tests", "inlinechain")
        self.dbgdir = os.path.dirname(self.hot_dbg)
        self.procs, self.daemon = [], None

    def start(self):
        hot, hot_pid, self.hot_tids, _ = testlib.start_target([self.hot, "--threads", "2", "--hot", "1",
                                                               "--timeout", "600"])
        two, two_pid, _, _ = testlib.start_target([self.two, "--timeout", "600"])
        inl, inl_pid, self.inl_tids, _ = testlib.start_target([self.inl, "--timeout", "600"])
        self.procs = [hot, two, inl]
        self.pids = {"hot": hot_pid, "two": two_pid, "inl": inl_pid}
        if None in self.pids.values():
            return f"a target did not start: {self.pids}"
        conf = os.path.join(self.tmp, "names.conf")
        with open(conf, "w") as f:
            # A low threshold and a short cooldown: each hot thread gives
            # an event about every second on a machine shared with others.
            f.write(f"[cpumond]\ninterval = 300ms\nthreshold = 100\nstarved = no\ncooldown = 1s\n"
                    f"episode_samples = 5\nsample_interval = 20ms\ndatabase = {self.db}\n"
                    f"[watch hot]\npid = {hot_pid}\n[watch two]\npid = {two_pid}\n"
                    f"[watch inl]\npid = {inl_pid}\n")
        self.daemon = testlib.Daemon(self.build, conf, self.tmp, name="names")

        def have_all():
            rows = query(self.db, "SELECT pid, count(*) FROM events WHERE stack_hash IS NOT NULL "
                                  "GROUP BY pid")
            return {pid for pid, n in rows if n >= 2} >= set(self.pids.values())
        if not poll(have_all, 90, 0.3):
            return f"no events of every target within 90 s: {self.daemon.log()[-500:]}"
        return ""

    def stop(self):
        if self.daemon:
            self.daemon.stop()
        for p in self.procs:
            testlib.stop(p)


def test_daemon_maps_no_elfutils(s):
    libs = run(["ldd", s.cpumond]).stdout
    check("the cpumond binary links neither libdw nor libdebuginfod",
          "libdw" not in libs and "libdebuginfod" not in libs, libs)
    try:
        with open(f"/proc/{s.daemon.pid}/maps") as f:
            maps = f.read()
    except OSError as e:
        maps = str(e)
    check("the running daemon maps neither", "libdw" not in maps and "libdebuginfod" not in maps,
          [l for l in maps.splitlines() if "libdw" in l or "libdebuginfod" in l][:3])


def test_no_debug_file(s):
    rows = query(s.db, "SELECT count(*), count(symbol) FROM stack_frames WHERE module = ?", (s.hot,))
    check("the daemon stored frames of the stripped hotchain without names",
          rows and rows[0][0] > 0 and rows[0][1] == 0, f"{rows}")
    events, err, rc = tail_events(s.cpumond, s.db, "--offline")
    frames = [f for ev in events for f in ev["stack"] if f["module"] in (s.hot, s.two)]
    check("without its debug file tail names no frame of the stripped programs",
          rc == 0 and frames and all(f["symbol"] is None and f["file"] is None for f in frames),
          err or [f for f in frames if f["symbol"]][:2])


def test_debug_dir(s):
    modules = {s.hot: s.hot_full, s.two: s.two_full}
    plain, _, _ = tail_events(s.cpumond, s.db, "--offline")
    events, err, rc = tail_events(s.cpumond, s.db, "--offline", "--debug-dir", s.dbgdir)
    n, why = compare_events(events, modules, "tail --debug-dir")
    check("tail --debug-dir names every frame of both programs with addr2line's name and "
          "file:line", rc == 0 and n >= 8 and not why, why or f"{n} frames, exit {rc}: {err}")
    # The daemon goes on recording between the two reads: compare the
    # events both saw.
    last = min(max((e["id"] for e in plain), default=0), max((e["id"] for e in events), default=0))
    check("names leave the stack hashes as they were",
          [e["stack_hash"] for e in events if e["id"] <= last] ==
          [e["stack_hash"] for e in plain if e["id"] <= last] and events, "")
    human = run([s.cpumond, "tail", "-d", s.db, "-n", "1000", "--offline", "--debug-dir", s.dbgdir],
                env=clean_env()).stdout
    check("tail shows 'hot_leaf+0xOFF (module) at hotchain.c:LINE'",
          re.search(r"#0 hot_leaf\+0x[0-9a-f]+ \(" + re.escape(s.hot) + r"\) at hotchain\.c:\d+\n",
                    human), human[:600])
    stored = run([s.cpumond, "tail", "-d", s.db, "-n", "1000", "--stored-names", "--debug-dir",
                  s.dbgdir], env=clean_env()).stdout
    check("--stored-names looks nothing up", "hot_leaf" not in stored and s.hot + "+0x" in stored,
          stored[:300])
    # report: functions, named at their first instruction.
    p = run([s.cpumond, "report", "-d", s.db, "--json", "--top", "0", "--offline", "--debug-dir",
             s.dbgdir], env=clean_env())
    groups = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    bad, compared = [], 0
    for g in groups:
        for f in g["frames"]:
            if f["module"] in modules:
                want = addr2line(modules[f["module"]], f["func_offset"])[-1]
                got = (f["symbol"], os.path.basename(f["file"] or ""), f["line"] or 0)
                compared += 1
                if got != want or f["inlined"]:
                    bad.append((got, want))
    check("report --json --debug-dir names each function as addr2line names its first "
          "instruction", p.returncode == 0 and compared >= 4 and not bad, bad[:3] or p.stderr)
    table = run([s.cpumond, "report", "-d", s.db, "--top", "0", "--offline", "--debug-dir",
                 s.dbgdir], env=clean_env()).stdout
    check("report's table shows 'hot_leaf (hotchain.c:LINE)'",
          re.search(r"#0 +hot_leaf \(hotchain\.c:\d+\)", table), table[:800])


def test_inlined(s):
    events, err, rc = tail_events(s.cpumond, s.db, "--offline")
    inl = [e for e in events if e["pid"] == s.pids["inl"] and e["stack"]]
    n, why = compare_events(inl, {s.inl: s.inl}, "inlinechain")
    check("inlinechain: every frame's chain is addr2line -i's", rc == 0 and n > 0 and not why,
          why or err)
    deep = [e for e in inl if [f["symbol"] for f in e["stack"][:3]] ==
            ["inline_leaf", "inline_mid", "inline_outer"]]
    check("inlinechain: the two inlined calls are frames of their own, innermost first",
          deep and all(f["inlined"] for f in deep[0]["stack"][:2]) and
          not deep[0]["stack"][2]["inlined"] and deep[0]["stack"][0]["symbol_offset"] is None,
          [[f["symbol"] for f in e["stack"][:4]] for e in inl[:3]])
    if deep:
        ip = {f["ip"] for f in deep[0]["stack"][:3]}
        check("inlinechain: an inlined call has the ip of the frame it is in", len(ip) == 1, ip)
    human = run([s.cpumond, "tail", "-d", s.db, "-n", "1000", "--offline"], env=clean_env()).stdout
    check("tail shows 'inline_leaf [inlined] (module) at inlinechain.c:LINE'",
          re.search(r"#0 inline_leaf \[inlined\] \(" + re.escape(s.inl) + r"\) at inlinechain\.c:\d+\n"
                    r" +#1 inline_mid \[inlined\] .*\n +#2 inline_outer\+0x", human), human[-800:])
    test_gdb_order(s)


def gdb_frames(pid, tid):
    """[(function, line)] of thread TID in gdb's backtrace (the process is
    stopped while gdb holds it)."""
    p = run(["gdb", "-batch", "-nx", "-p", str(pid), "-ex", f"thread find {tid}", "-ex",
             "info threads", "-ex", "thread apply all bt"], timeout=60)
    out, frames, inside = p.stdout, [], False
    for line in out.splitlines():
        if line.startswith("Thread "):
            inside = f"LWP {tid})" in line
        m = re.match(r"#\d+ +(?:0x[0-9a-f]+ in )?(\S+) \(.*\) at (\S+):(\d+)", line)
        if inside and m:
            frames.append((m.group(1), int(m.group(3))))
    return frames


def test_gdb_order(s):
    """stackdump on the live inlinechain against gdb's backtrace of the
    stopped target: the same functions in the same order, the callers at
    the same lines (the leaf's line depends on the instruction caught)."""
    tid, pid = s.inl_tids[0], s.pids["inl"]
    want = ["inline_leaf", "inline_mid", "inline_outer", "inline_thread_main"]
    last = None
    for _ in range(10):
        out = run([os.path.join(s.build, "stackdump"), "--offline", str(tid)], env=clean_env()).stdout
        ours = re.findall(r"#\d+ (\S+?)(?:\+0x[0-9a-f]+| \[inlined\]) \(.*\) at \S+:(\d+)", out)
        theirs = gdb_frames(pid, tid)
        last = (ours[:4], theirs[:4])
        if [n for n, _ in ours[:4]] == want and [n for n, _ in theirs[:4]] == want:
            check("stackdump: the inlined calls in gdb's backtrace order, the callers at gdb's lines",
                  [int(l) for _, l in ours[1:4]] == [l for _, l in theirs[1:4]], last)
            return
    check("stackdump: the inlined calls in gdb's backtrace order", False,
          f"no dump and backtrace both in the loop in 10 tries: {last}")


def test_dwz(s):
    """A debug file whose DWARF dwz moved in part to a file it shares with
    others (.gnu_debugaltlink), as Debian's -dbgsym packages ship them
    (/usr/lib/debug/.dwz/ARCH/PACKAGE.debug): found under --debug-dir by
    that name, it names the inlined calls, which without it are lost."""
    if not shutil.which("dwz"):
        skip("dwz", "no dwz (make test-deps installs it)")
        return
    src = os.path.join(ROOT, "tests", "targets", "inlinechain.c")
    d = os.path.join(s.tmp, "dwz")
    dbg = os.path.join(d, "debug")
    common = os.path.join(dbg, ".dwz", "cpumond-test", "common.debug")
    os.makedirs(os.path.dirname(common))
    bins = []
    for n in ("a", "b"):   # two builds of one program share all their DWARF
        full = os.path.join(d, f"ic_{n}.full")
        p = run(["cc", "-std=gnu11", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread",
                 f"-Wl,--build-id=0x{ord(n):02x}" + "11" * 19, "-o", full, src])
        if not check(f"dwz: build {n}", p.returncode == 0, p.stderr):
            return
        bins.append(split_debug(full, d, f"ic_{n}")[2])
    dbgs = [os.path.join(d, "dbg", f"ic_{n}.debug") for n in ("a", "b")]
    p = run(["dwz", "-m", common, "-M", "/usr/lib/debug/.dwz/cpumond-test/common.debug", *dbgs])
    for f in dbgs:
        shutil.copy2(f, dbg)
    if not check("dwz: the two debug files share a file", p.returncode == 0 and
                 os.path.exists(common), p.stderr):
        return
    proc, _, tids, _ = testlib.start_target([bins[0], "--timeout", "120"])
    try:
        want = ["inline_leaf", "inline_mid", "inline_outer"]

        def dump():
            out = run([os.path.join(s.build, "stackdump"), "--offline", "--debug-dir", dbg,
                       str(tids[0])], env=clean_env()).stdout
            return re.findall(r"#\d+ (\S+?)(?:\+0x[0-9a-f]+| \[inlined\]) ", out), out

        def in_the_loop():    # the thread is in the loop nearly always
            names, out = dump()
            return (names, out) if names[:3] == want else None
        names, out = poll(in_the_loop, 30, 0.2) or dump()
        check("dwz: found by its name under --debug-dir, the shared file names the inlined calls",
              names[:3] == want, out)
        os.rename(common, common + ".away")
        names, out = dump()
        check("dwz: without it, they are not named", "inline_leaf" not in names, out)
    finally:
        testlib.stop(proc)


def test_doctor(s):
    """doctor says where each executable's names come from, and the
    command that gets them."""
    sleeper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    conf = os.path.join(s.tmp, "doctor.conf")
    with open(conf, "w") as f:
        f.write(f"[cpumond]\ndatabase = {s.tmp}/doctor.db\n[watch hot]\npid = {s.pids['hot']}\n"
                f"[watch inl]\npid = {s.pids['inl']}\n[watch sleep]\npid = {sleeper.pid}\n")
    try:
        out = run([s.cpumond, "doctor", "-c", conf], env=clean_env()).stdout
        hot = build_id(s.hot)
        check("doctor: the stripped hotchain has no names, and the fix is its debug file by build-id",
              re.search(r"^warn " + re.escape(s.hot) + r" is stripped: .*names when a stack is taken: "
                        r"none, when tail and report read it: \S.*fix: install its debug file as "
                        r"/usr/lib/debug/\.build-id/" + hot[:2] + "/" + hot[2:] + r"\.debug", out, re.M),
              out)
        check("doctor: inlinechain's names are its symbols when taken and its DWARF when read",
              re.search(r"^ok +" + re.escape(s.inl) + r" has build-id \w+; names when a stack is taken: "
                        r"symbols \(\.symtab\); when tail and report read it: names, file:line and "
                        r"inlined calls from its DWARF$", out, re.M), out)
        exe = os.path.realpath(shutil.which("sleep"))
        pkg = run(["dpkg-query", "-S", exe]).stdout.split(":")[0] or \
            run(["dpkg-query", "-S", exe.replace("/usr/", "/", 1)]).stdout.split(":")[0]
        if pkg and "symbols (.symtab)" not in out.split(exe)[-1].split("\n")[0]:
            check("doctor: a Debian executable without names: apt install its -dbgsym package, or "
                  "DEBUGINFOD_URLS", f"fix: apt install {pkg}-dbgsym from Debian's debug archive" in out
                  and "DEBUGINFOD_URLS=https://debuginfod.debian.net" in out, out)
        else:
            skip("doctor: a Debian executable without names", f"{exe} is from no package or has names")
        # The debug file beside the program: the readers find it by its
        # .gnu_debuglink, the daemon does not.
        beside = os.path.join(os.path.dirname(s.hot), os.path.basename(s.hot_dbg))
        shutil.copy2(s.hot_dbg, beside)
        try:
            out = run([s.cpumond, "doctor", "-c", conf], env=clean_env()).stdout
        finally:
            os.unlink(beside)
        check("doctor: with its debug file beside it, the readers' names come from that file",
              re.search(r"^ok +" + re.escape(s.hot) + r" has build-id \w+; names when a stack is taken: "
                        r"none; when tail and report read it: names, file:line and inlined calls from "
                        r"its debug file " + re.escape(beside) + "$", out, re.M), out)
    finally:
        testlib.stop(sleeper)


# ---- debuginfod ----

def netns(ns, *argv):
    return ["ip", "netns", "exec", ns, *argv]


def start_server(ns, tmp, files):
    """Debian's debuginfod on 127.0.0.1:PORT in NS, serving FILES: its
    Popen and log path."""
    srv = os.path.join(tmp, "srv")
    os.makedirs(os.path.join(srv, "files"), exist_ok=True)
    for f in files:
        shutil.copy2(f, os.path.join(srv, "files"))
    log = os.path.join(srv, "debuginfod.log")
    proc = subprocess.Popen(netns(ns, "debuginfod", "-F", "-p", str(PORT), "-d",
                                  os.path.join(srv, "index.sqlite"), "-t", "0", "-g", "0", "-v",
                                  os.path.join(srv, "files")),
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def fetch(ns, url):
    """HTTP status of URL fetched inside NS (0 when nothing answers)."""
    code = ("import sys, urllib.request\ntry:\n urllib.request.urlopen(sys.argv[1], timeout=5).read()"
            "\n print(200)\nexcept urllib.error.HTTPError as e:\n print(e.code)\nexcept Exception:\n"
            " print(0)\n")
    p = run(netns(ns, "python3", "-c", code, url), timeout=30)
    return int(p.stdout.strip() or 0)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def connects(trace, port=None):
    """The AF_INET/AF_INET6 connect(2) lines of an strace -e trace=connect
    output file (to PORT when given)."""
    lines = [l for l in read(trace).splitlines() if "connect(" in l and "AF_INET" in l]
    return [l for l in lines if port is None or f"htons({port})" in l]


def test_debuginfod(s):
    if os.geteuid() != 0:
        skip("debuginfod", "network namespaces need root")
        return
    if not shutil.which("debuginfod"):
        skip("debuginfod", "no debuginfod (apt-get install debuginfod: make test-deps)")
        return
    ns = f"cpumond-names-{os.getpid()}"
    p = run(["ip", "netns", "add", ns])
    if p.returncode != 0:
        skip("debuginfod", f"ip netns add: {p.stderr.strip()}")
        return
    server = garbage = None
    try:
        run(netns(ns, "ip", "link", "set", "lo", "up"))
        server, log = start_server(ns, s.tmp, [s.hot_dbg, s.two_dbg])
        ids = [build_id(s.hot), build_id(s.two)]
        ready = poll(lambda: all(fetch(ns, f"http://127.0.0.1:{PORT}/buildid/{i}/debuginfo") == 200
                                 for i in ids), 60, 0.5)
        if not check("debuginfod serves both debug files on 127.0.0.1 in its namespace", ready,
                     read(log)[-500:]):
            return
        inside = run(netns(ns, "ss", "-ltnpH")).stdout
        outside = run(["ss", "-ltnpH"]).stdout
        check("its port is open in its namespace only",
              f"pid={server.pid}," in inside and f"pid={server.pid}," not in outside,
              f"inside: {inside.strip()} outside: {outside.strip()}")
        served_before = read(log).count("/debuginfo 200")
        url = f"http://127.0.0.1:{PORT}"
        cache = lambda name: os.path.join(s.tmp, "cache-" + name)  # noqa: E731
        modules = {s.hot: s.hot_full, s.two: s.two_full}

        events, err, rc = tail_events(s.cpumond, s.db, ns=ns,
                                      env=clean_env(DEBUGINFOD_URLS=url, DEBUGINFOD_CACHE_PATH=cache("a")))
        n, why = compare_events(events, modules, "tail via debuginfod")
        check("tail names both programs through the server as addr2line does",
              rc == 0 and n >= 8 and not why, why or f"{n} frames, exit {rc}: {err}")
        served = read(log)
        check("the server was asked for both build-ids",
              all(f"GET /buildid/{i}/debuginfo 200" in served for i in ids), served[-600:])
        p = run(netns(ns, s.cpumond, "report", "-d", s.db, "--top", "0"),
                env=clean_env(DEBUGINFOD_URLS=url, DEBUGINFOD_CACHE_PATH=cache("b")))
        check("report names them through the server",
              p.returncode == 0 and re.search(r"#0 +hot_leaf \(hotchain\.c:\d+\)", p.stdout),
              p.stdout[:600] + p.stderr)

        count = read(log).count("/debuginfo")
        for what, extra, args in (("DEBUGINFOD_URLS unset", {}, []),
                                  ("--offline", {"DEBUGINFOD_URLS": url}, ["--offline"])):
            trace = os.path.join(s.tmp, f"connect-{len(extra)}.txt")
            env = traced_env(DEBUGINFOD_CACHE_PATH=cache("c" + str(len(args))), **extra)
            p = run(netns(ns, "strace", "-f", "-e", "trace=connect", "-o", trace, s.cpumond, "tail",
                          "-d", s.db, "-n", "1000", "--json", *args), env=env)
            frames = [f for line in p.stdout.splitlines() for f in json.loads(line)["stack"]
                      if f["module"] == s.hot]
            check(f"{what}: tail makes no network connection and names nothing of hotchain",
                  p.returncode == 0 and not connects(trace) and frames and
                  all(f["symbol"] is None for f in frames), connects(trace)[:2] or p.stderr[-300:])
        check("nor does the server see a request", read(log).count("/debuginfo") == count,
              read(log)[-400:])
        note(f"debuginfod served {read(log).count('/debuginfo 200') - served_before} files")

        # A server that answers anything with garbage: the file is not used.
        garbage = subprocess.Popen(netns(ns, "python3", "-c", GARBAGE_SERVER, str(GARBAGE_PORT)),
                                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        testlib.read_lines_until(garbage.stdout, b"listening", 20)
        events, err, rc = tail_events(
            s.cpumond, s.db, ns=ns,
            # A long timeout: on a loaded machine the garbage must arrive,
            # not be taken for a server that does not answer.
            env=clean_env(DEBUGINFOD_URLS=f"http://127.0.0.1:{GARBAGE_PORT}",
                          DEBUGINFOD_CACHE_PATH=cache("g"), DEBUGINFOD_TIMEOUT="60"))
        frames = [f for e in events for f in e["stack"] if f["module"] in modules]
        check("a server that answers garbage: its file is not used, and that is said",
              rc == 0 and frames and all(f["symbol"] is None for f in frames) and
              "sent a file that is not the debug file of build-id" in err, err[-400:])

        # A server that accepts and never answers (stopped): one timeout.
        os.kill(server.pid, signal.SIGSTOP)
        trace = os.path.join(s.tmp, "connect-stopped.txt")
        t0 = time.monotonic()
        p = run(netns(ns, "strace", "-f", "-e", "trace=connect", "-o", trace, s.cpumond, "tail", "-d",
                      s.db, "-n", "1000", "--json"),
                env=traced_env(DEBUGINFOD_URLS=url, DEBUGINFOD_CACHE_PATH=cache("s"),
                               DEBUGINFOD_TIMEOUT=str(TIMEOUT_S)))
        took = time.monotonic() - t0
        frames = [f for line in p.stdout.splitlines() for f in json.loads(line)["stack"]
                  if f["module"] in modules]
        given_up = p.stderr.count("asking no server again in this run")
        check("a stopped server: tail exits 0 with the frames unnamed, after its timeout",
              p.returncode == 0 and frames and all(f["symbol"] is None for f in frames) and
              took >= TIMEOUT_S, f"exit {p.returncode} after {took:.1f} s: {p.stderr[-300:]}")
        # Two build-ids wanted a file: one request (and the client's own
        # retry of it), then no other.
        check("it is given up once in the run, not once per build-id",
              given_up == 1 and 1 <= len(connects(trace, PORT)) <= 2,
              f"{given_up} give-ups, {len(connects(trace, PORT))} connects: {p.stderr[-300:]}")
        note(f"tail with a stopped server took {took:.1f} s (DEBUGINFOD_TIMEOUT={TIMEOUT_S})")
        test_follow_stopped(s, ns, url, cache("f"))
    finally:
        if garbage:
            testlib.stop(garbage)
        if server:
            try:
                os.kill(server.pid, signal.SIGCONT)
            except OSError:
                pass
            testlib.stop(server)
        run(["ip", "netns", "del", ns])


def test_follow_stopped(s, ns, url, cache):
    """tail -f with the server stopped: it says once that it gave up, and
    the events the daemon goes on logging keep coming."""
    since = query(s.db, "SELECT max(id) FROM events")[0][0] or 0
    # ip netns exec execs tail: the signal below reaches tail itself.
    tail = subprocess.Popen(netns(ns, s.cpumond, "tail", "-d", s.db, "-f", "-n", "1", "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=clean_env(DEBUGINFOD_URLS=url, DEBUGINFOD_CACHE_PATH=cache,
                                          DEBUGINFOD_TIMEOUT=str(TIMEOUT_S)))
    got, buf, end = [], b"", time.monotonic() + 60
    while time.monotonic() < end and len([e for e in got if e["id"] > since]) < 3:
        buf += testlib.read_available(tail.stdout, 1)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            got.append(json.loads(line))
    tail.send_signal(signal.SIGINT)
    try:
        out, err = tail.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        tail.kill()
        out, err = tail.communicate()
    err = err.decode("utf-8", "replace")
    new = [e for e in got if e["id"] > since]
    check("tail -f with a stopped server goes on printing new events, and exits 0 on SIGINT",
          len(new) >= 3 and tail.returncode == 0, f"{len(new)} new events, exit {tail.returncode}: "
          f"{err[-300:]}")
    check("tail -f gave the server up once", err.count("asking no server again in this run") == 1,
          err[-300:])


GARBAGE_SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"this is no ELF file " * 100
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("listening", flush=True)
s.serve_forever()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    ok, why = testlib.ptrace_allowed()
    need = [os.path.join(build, p) for p in ("cpumond", "stackdump", "tests/hotchain",
                                             "tests/twochains", "tests/inlinechain")]
    missing = [p for p in need if not os.path.exists(p)]
    tools = [t for t in ("objcopy", "addr2line", "readelf", "gdb", "strace") if not shutil.which(t)]
    if not ok:
        skip("names", why)
    elif missing or tools:
        skip("names", f"missing {missing + tools} (make B={args.build} check)")
    else:
        tmp = tempfile.mkdtemp(prefix="test_names.")
        s = Setup(build, tmp)
        try:
            why = s.start()
            if check("the daemon logged events of the three targets", not why, why):
                testlib.run([test_daemon_maps_no_elfutils, test_no_debug_file, test_debug_dir,
                             test_inlined, test_dwz, test_doctor, test_debuginfod], s)
        finally:
            s.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
