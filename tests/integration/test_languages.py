#!/usr/bin/env python3
"""Language frames: a hot Python thread shows its Python functions, a hot
JIT thread (node, the JVM) its JIT functions, in the daemon's key stacks
and in `stackdump TID`.

Targets of the project's own, each burning CPU forever in a known chain:
  - tests/targets/pychain.py under Debian's /usr/bin/python3.11 (the
    interpreter in the executable): burn <- Worker.run.<locals>.key <-
    (sorted, a C built-in) <- Worker.run <- Thread.run <- ...;
  - tests/stackdump/pyembed.c, a C program embedding libpython3.11.so:
    inner <- embed_call (its own C function, between Python frames) <-
    outer <- <module> <- main;
  - tests/targets/jschain.js under node --perf-basic-prof
    --interpreted-frames-native-stack: JS leaf <- mid <- root;
  - tests/targets/JavaChain.java under java -XX:+PreserveFramePointer, its
    perf map written by `jcmd PID Compiler.perfmap`: leaf <- mid <-
    Interpreter.
Checked for each: the daemon's key stack (real daemon, real database)
names the chain in order, and `stackdump TID` prints the same chain; the
samples of the Python loop hash to one stack, also in another process;
nothing is left stopped.  Besides: pylayout.c's layout table of 3.11 (and
of 3.12 where its headers are installed) is what CPython's own headers say
(tests/stackdump/pyoffsets.c); a CPython whose frames are not read gives
native frames and one log line.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" per check and
ends with "N passed, N failed, N skipped".
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402
from testlib import (all_threads_run, check, note, poll, query, run, skip,  # noqa: E402
                     start_target, stop, summary)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY311 = "/usr/bin/python3.11"
PY311_CONFIG = "/usr/bin/python3.11-config"
PYCHAIN = os.path.join(ROOT, "tests", "targets", "pychain.py")
PY_CHAIN = ["burn", "Worker.run.<locals>.key", "Worker.run", "Thread.run",
            "Thread._bootstrap_inner", "Thread._bootstrap", "start_thread", "clone3"]
EMBED_CHAIN = ["inner", "embed_call", "outer", "<module>", "main"]
JAVA_CHAIN = ["long JavaChain.leaf(long)", "long JavaChain.mid(long)", "Interpreter"]
JAVA_FLAGS = ["-XX:+PreserveFramePointer", "-Xbatch", "-XX:CompileCommand=quiet",
              "-XX:CompileCommand=dontinline,JavaChain::*",
              "-XX:CompileCommand=exclude,JavaChain::root"]


def frame_names(text):
    """The function of each frame stackdump printed ("#N ..."): a Python
    frame's qualified name, a symbol, a perf map's name; "?" for none."""
    names = []
    for line in text.splitlines():
        m = re.match(r"\s*#\d+ (.*)$", line)
        if not m:
            continue
        body = re.sub(r" at [^ ]+:\d+$", "", m.group(1))
        if body.endswith(")") and " (" in body:
            body = body.rsplit(" (", 1)[0]
        body = re.sub(r"\+0x[0-9a-f]+$", "", body)
        names.append("?" if body.startswith("?") or body.startswith("/") else body)
    return names


def same_names(a, b):
    """Whether two spellings of a stack name the same functions: the C
    library's own names may differ where the command names frames again
    when it prints them (clone3, __clone3)."""
    return len(a) == len(b) and all(x == y or x.lstrip("_") == y.lstrip("_")
                                    for x, y in zip(a, b))


def untiered(name):
    """A V8 name without its tier mark: JS:*leaf, JS:~leaf are one function."""
    return re.sub(r"^([A-Za-z]+:)[*~^+]", r"\1", name)


def stackdump(build, tid):
    """(names, output) of `stackdump TID`."""
    r = testlib.run_stackdump([os.path.join(build, "stackdump"), str(tid)])
    return frame_names(r.stdout), r.stdout + r.stderr


def key_stack(build, tmp, name, pids, samples=20):
    """Runs the daemon on PIDS (one watch each) until each has an event;
    returns ({pid: event row dict}, daemon log).  Each event has tid, hash,
    samples, counts (event_stacks), frames (stack_frames rows)."""
    db, conf = os.path.join(tmp, f"{name}.db"), os.path.join(tmp, f"{name}.conf")
    with open(conf, "w") as f:
        f.write(f"""[cpumond]
interval = 300ms
threshold = 250
starved = no
cooldown = 1h
episode_samples = {samples}
sample_interval = 20ms
database = {db}
""")
        for i, pid in enumerate(pids):
            f.write(f"\n[watch {name}{i}]\npid = {pid}\n")
    daemon = testlib.Daemon(build, conf, tmp, name=name)
    events = {}
    try:
        def done():
            rows = query(db, "SELECT id, pid, tid, stack_hash, samples, error FROM events")
            for r in rows:
                events[r[1]] = dict(id=r[0], tid=r[2], hash=r[3], samples=r[4], error=r[5])
            return all(p in events for p in pids)
        poll(done, 60)
        for ev in events.values():
            ev["counts"] = query(db, "SELECT stack_hash, count FROM event_stacks "
                                     "WHERE event_id = ?", (ev["id"],))
            ev["frames"] = query(db, "SELECT module, build_id, func_offset, symbol "
                                     "FROM stack_frames WHERE hash = ? ORDER BY depth",
                                 (ev["hash"],))
            ev["names"] = [f[3] or "?" for f in ev["frames"]]
        tail = subprocess.run([os.path.join(build, "cpumond"), "tail", "-d", db],
                              capture_output=True, text=True, timeout=30).stdout
    finally:
        daemon.stop()
    return events, daemon.log(), tail


def no_thread_stopped(name, pid):
    ok, bad = all_threads_run(pid)
    check(f"{name}: no thread left stopped or traced", ok, str(bad))


def test_layouts(build, tmp):
    """pylayout.c's tables against CPython's own headers."""
    with open(os.path.join(ROOT, "stackdump", "pylayout.c")) as f:
        src = f.read()
    gen = os.path.join(ROOT, "tests", "stackdump", "pyoffsets.c")
    includes = []
    if os.access(PY311_CONFIG, os.X_OK):
        inc = subprocess.run([PY311_CONFIG, "--includes"], capture_output=True,
                             text=True).stdout.split()
        includes.append(("3.11", "layout_311", inc))
    else:
        skip("layout of 3.11", f"{PY311_CONFIG} is missing (apt-get install python3.11-dev)")
    for d in sorted(glob_pyenv("3.12")):
        includes.append(("3.12", "layout_312", [f"-I{d}"]))
        break
    for version, table, inc in includes:
        exe = os.path.join(tmp, f"pyoffsets-{version}")
        r = subprocess.run(["cc"] + inc + ["-o", exe, gen], capture_output=True, text=True)
        if not check(f"layout of {version}: pyoffsets.c builds", r.returncode == 0, r.stderr):
            continue
        want = dict(line.split() for line in subprocess.run([exe], capture_output=True,
                                                            text=True).stdout.splitlines())
        m = re.search(r"static const struct pyframes_layout %s = \{(.*?)\};" % table, src, re.S)
        got = dict(re.findall(r"\.(\w+) = (0x[0-9a-f]+|\d+),", m.group(1))) if m else {}
        got = {k: str(int(v, 0)) for k, v in got.items()}
        want["version"] = str(int(want["version"], 16))
        diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        check(f"layout of {version}: pylayout.c's {table} is what the headers say "
              f"({' '.join(inc)})", m and not diff, f"(table, headers): {diff}")


def glob_pyenv(version):
    """Include directories of pyenv's CPython VERSION ("3.12"), if any."""
    base = os.path.expanduser("~/.pyenv/versions")
    out = []
    if os.path.isdir(base):
        for v in os.listdir(base):
            d = os.path.join(base, v, "include", f"python{version}")
            if v.startswith(version + ".") and os.path.isdir(os.path.join(d, "internal")):
                out.append(d)
    return out


def test_python(build, tmp):
    """A Python thread under Debian's python3.11: its Python functions."""
    name = "python3.11"
    if not os.access(PY311, os.X_OK):
        skip(name, f"{PY311} is missing (apt-get install python3.11)")
        return
    p1, pid1, hot1, _ = start_target([PY311, PYCHAIN, "--timeout", "120"])
    p2, pid2, hot2, _ = start_target([PY311, PYCHAIN, "--timeout", "120"])
    try:
        if not check(f"{name}: targets ready", pid1 and pid2 and hot1 and hot2, "no ready"):
            return
        names, out = stackdump(build, hot1[0])
        check(f"{name}: stackdump prints {' <- '.join(PY_CHAIN)}", same_names(names, PY_CHAIN),
              out)
        m = re.search(r"#0 burn \((.*):(\d+)\)", out)
        check(f"{name}: stackdump prints burn's file and a line of its loop",
              m and m.group(1) == PYCHAIN and 33 <= int(m.group(2)) <= 37, out)
        note("python3.11 stackdump:\n" + out.rstrip())

        events, log, tail = key_stack(build, tmp, "py", [pid1, pid2])
        e1, e2 = events.get(pid1), events.get(pid2)
        if not check(f"{name}: an event for each process", e1 and e2, log):
            return
        check(f"{name}: the key stack is {' <- '.join(PY_CHAIN)}", e1["names"] == PY_CHAIN,
              str(e1["names"]))
        check(f"{name}: names as stackdump prints them", same_names(e1["names"], names),
              f"{e1['names']} against {names}")
        check(f"{name}: all {e1['samples']} samples of the loop in one stack",
              e1["samples"] >= 2 and len(e1["counts"]) == 1 and
              e1["counts"][0] == (e1["hash"], e1["samples"]), str(e1["counts"]))
        check(f"{name}: the same hash in another process", e1["hash"] == e2["hash"],
              f"{e1['hash']:x} against {e2['hash']:x}")
        burn = e1["frames"][0]
        check(f"{name}: a Python frame is stored as (file, 'python', first line, qualname)",
              burn == (PYCHAIN, "python", 31, "burn"), str(burn))
        check(f"{name}: no error with the event", not e1["error"], str(e1["error"]))
        check(f"{name}: tail prints the Python frames with their lines",
              re.search(r"#0 burn \(%s:3[3-7]\)" % re.escape(PYCHAIN), tail) is not None, tail)
        note("python3.11 key stack: " + " <- ".join(e1["names"]))
        no_thread_stopped(name, pid1)
        no_thread_stopped(name, pid2)
    finally:
        stop(p1)
        stop(p2)


def test_embedded(build, tmp):
    """A C program embedding libpython3.11: a native frame between Python
    frames."""
    name = "embedded libpython3.11"
    if not os.access(PY311_CONFIG, os.X_OK):
        skip(name, f"{PY311_CONFIG} is missing (apt-get install python3.11-dev)")
        return
    exe = os.path.join(tmp, "pyembed")
    cfg = lambda what: subprocess.run([PY311_CONFIG, "--embed", what], capture_output=True,  # noqa: E731
                                      text=True).stdout.split()
    r = subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer"] + cfg("--cflags") +
                       ["-o", exe, os.path.join(ROOT, "tests", "stackdump", "pyembed.c")] +
                       cfg("--ldflags"), capture_output=True, text=True)
    if not check(f"{name}: pyembed.c builds", r.returncode == 0, r.stderr):
        return
    p, pid, hot, _ = start_target([exe])
    try:
        if not check(f"{name}: target ready", pid and hot, "no ready"):
            return
        names, out = stackdump(build, hot[0])
        check(f"{name}: stackdump prints {' <- '.join(EMBED_CHAIN)}",
              names[:len(EMBED_CHAIN)] == EMBED_CHAIN, out)
        check(f"{name}: the interpreter is libpython3.11.so",
              "libpython3.11.so" in open(f"/proc/{pid}/maps").read(), "not mapped")
        events, log, _ = key_stack(build, tmp, "embed", [pid])
        ev = events.get(pid)
        if check(f"{name}: an event", ev, log):
            check(f"{name}: the key stack is {' <- '.join(EMBED_CHAIN)} <- ...",
                  ev["names"][:len(EMBED_CHAIN)] == EMBED_CHAIN, str(ev["names"]))
            check(f"{name}: all samples in one stack", len(ev["counts"]) == 1, str(ev["counts"]))
        no_thread_stopped(name, pid)
    finally:
        stop(p)


def jit_target_checks(name, build, tmp, pid, tid, want):
    """stackdump and the daemon on a JIT target: WANT, a list of regexes,
    matches the innermost frames of the key stack (in more than half its
    samples) and of a stackdump."""
    def matches(names):
        return len(names) >= len(want) and all(re.fullmatch(w, untiered(n))
                                               for w, n in zip(want, names))
    # The first dumps of a JIT thread may come before its code is in the
    # map (node writes it as it compiles); the map is read again when it
    # changes.
    last = []

    def dumped():
        last[:] = stackdump(build, tid)
        return matches(last[0])
    poll(dumped, 20, 0.5)
    names, out = last
    check(f"{name}: stackdump prints {' <- '.join(want)}", matches(names), out)
    note(f"{name} stackdump:\n" + out.rstrip())
    events, log, tail = key_stack(build, tmp, name.split()[0], [pid])
    ev = events.get(pid)
    if not check(f"{name}: an event", ev, log):
        return
    top = max((c for h, c in ev["counts"] if h == ev["hash"]), default=0)
    check(f"{name}: the key stack is {' <- '.join(want)} <- ...", matches(ev["names"]),
          str(ev["names"]))
    check(f"{name}: the key stack in more than half the samples", top * 2 > ev["samples"],
          str(ev["counts"]))
    check(f"{name}: its JIT frames are stored by name", ev["frames"][0][1] == "jit" and
          ev["frames"][0][2] == 0, str(ev["frames"][:2]))
    note(f"{name} key stack: " + " <- ".join(ev["names"]))
    no_thread_stopped(name, pid)


def stop_jit_target(p, pid):
    """Ends target P and removes the perf map it leaves behind."""
    stop(p)
    if pid:
        try:
            os.unlink(f"/tmp/perf-{pid}.map")
        except OSError:
            pass


def test_node(build, tmp):
    name = "node --perf-basic-prof"
    node = shutil.which("node")
    if not node:
        skip(name, "node is missing (apt-get install nodejs)")
        return
    script = os.path.join(ROOT, "tests", "targets", "jschain.js")
    # --perf-basic-prof makes node write a V8 log too, by default
    # isolate-*-v8.log in its working directory: into TMP instead.
    p, pid, hot, _ = start_target([node, "--perf-basic-prof", "--interpreted-frames-native-stack",
                                   f"--logfile={tmp}/node-v8.log", "--no-logfile-per-isolate",
                                   script])
    try:
        if not check(f"{name}: target ready", pid and hot, "no ready"):
            return
        loc = re.escape(script)
        jit_target_checks(name, build, tmp, pid, hot[0],
                          [rf"JS:leaf {loc}:\d+:\d+", rf"JS:mid {loc}:\d+:\d+",
                           rf"JS:root {loc}:\d+:\d+"])
    finally:
        stop_jit_target(p, pid)


def test_java(build, tmp):
    name = "java -XX:+PreserveFramePointer"
    javac, java, jcmd = shutil.which("javac"), shutil.which("java"), shutil.which("jcmd")
    if not (javac and java and jcmd):
        skip(name, "javac, java or jcmd is missing (apt-get install openjdk-17-jdk-headless)")
        return
    classes = os.path.join(tmp, "java")
    r = subprocess.run([javac, "-d", classes, os.path.join(ROOT, "tests", "targets",
                                                           "JavaChain.java")],
                       capture_output=True, text=True, timeout=120)
    if not check(f"{name}: JavaChain.java builds", r.returncode == 0, r.stderr):
        return
    p, pid, hot, _ = start_target([java] + JAVA_FLAGS + ["-cp", classes, "JavaChain"], timeout=60)
    try:
        if not check(f"{name}: target ready", pid and hot and hot[0] != "?", "no ready"):
            return
        r = subprocess.run([jcmd, str(pid), "Compiler.perfmap"], capture_output=True,
                           text=True, timeout=60)
        check(f"{name}: jcmd Compiler.perfmap writes /tmp/perf-{pid}.map",
              r.returncode == 0 and os.path.exists(f"/tmp/perf-{pid}.map"), r.stdout + r.stderr)
        jit_target_checks(name, build, tmp, pid, hot[0], [re.escape(n) for n in JAVA_CHAIN])
    finally:
        stop_jit_target(p, pid)


def test_unknown_version(build, tmp):
    """A CPython whose layout is not known: native frames, one log line."""
    name = "an unknown CPython version"
    exes = [os.path.join(d, "bin", "python3.10") for d in
            [os.path.expanduser(f"~/.pyenv/versions/{v}") for v in
             (os.listdir(os.path.expanduser("~/.pyenv/versions"))
              if os.path.isdir(os.path.expanduser("~/.pyenv/versions")) else [])]
            if os.path.basename(d).startswith("3.10.")]
    exe = next((e for e in exes if os.access(e, os.X_OK)), None)
    if not exe:
        skip(name, "no CPython 3.10 here (pyenv's) to be the unknown one")
        return
    p, pid, hot, _ = start_target([exe, PYCHAIN, "--timeout", "120"])
    try:
        if not check(f"{name}: target ready", pid and hot, "no ready"):
            return
        names, out = stackdump(build, hot[0])
        check(f"{name}: stackdump prints native frames and says why",
              "_PyEval_EvalFrameDefault" in names and "burn" not in names and
              "python frames of libpython3.10" in out and "are not read" in out, out)
        events, log, _ = key_stack(build, tmp, "old", [pid], samples=5)
        lines = [ln for ln in log.splitlines() if "are not read" in ln]
        check(f"{name}: the daemon says so once", len(lines) == 1, log)
        no_thread_stopped(name, pid)
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    allowed, why = testlib.ptrace_allowed()
    for exe in ("stackdump", "cpumond"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            why = why or f"{build}/{exe} is not built"
    with tempfile.TemporaryDirectory(prefix="cpumond-lang-") as tmp:
        run([test_layouts], build, tmp)
        if why or not allowed:
            skip("language frames", why)
        else:
            run([test_python, test_embedded, test_node, test_java, test_unknown_version],
                build, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
