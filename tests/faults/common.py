"""Shared pieces of the fault suite (tests/faults/test_*.py).

The same patterns as tests/integration/run.py: targets print "pid P",
"hot T", "idle T" and "ready"; the daemon runs on a temporary configuration
and database; every wait polls with a deadline.  Each script prints
"ok - …" / "not ok - …" / "skip - …" per check and ends with
"N passed, N failed, N skipped".

FAULTS_LONG=1 turns on the long versions (thousands of dumps, 100 kills,
a 30-minute soak).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402
from testlib import check, poll, ptrace_allowed, results, skip, summary  # noqa: E402,F401

LONG = os.environ.get("FAULTS_LONG", "") not in ("", "0")


def note(text):
    """A figure for the report: "# text" lines are not checks."""
    print(f"# {text}", flush=True)


def start_target(argv, env=None, timeout=20):
    """Starts a target that prints "pid P", "hot T", "idle T" lines and
    "ready".  Returns (Popen, pid, hot tids, idle tids); pid is None when
    it did not get ready within TIMEOUT seconds."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    pid, hot, idle = None, [], []
    for line in read_lines_until(proc.stdout, b"ready", timeout):
        word, _, value = line.strip().partition(b" ")
        if word == b"pid":
            pid = int(value)
        elif word == b"hot":
            hot.append(int(value))
        elif word == b"idle":
            idle.append(int(value))
    return proc, pid, hot, idle


def read_lines_until(pipe, last, timeout):
    """Lines (bytes) from PIPE up to and including one equal to LAST, or
    whatever came within TIMEOUT seconds."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(pipe, selectors.EVENT_READ)
    end, buf, lines = time.monotonic() + timeout, b"", []
    fd = pipe.fileno()
    while time.monotonic() < end:
        if not sel.select(max(0.0, end - time.monotonic())):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            lines.append(line)
            if line.strip() == last:
                return lines
    return lines


def read_available(pipe, timeout):
    """Whatever PIPE gives within TIMEOUT seconds (bytes), up to EOF."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(pipe, selectors.EVENT_READ)
    end, buf = time.monotonic() + timeout, b""
    fd = pipe.fileno()
    while time.monotonic() < end:
        if not sel.select(max(0.0, min(0.2, end - time.monotonic()))):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    return buf


def stop(proc, sig=signal.SIGTERM, timeout=5):
    """Ends PROC (one we started), by its pid only; returns its status."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def thread_status(pid, tid):
    fields = {}
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                fields[k] = v.strip()
    except OSError:
        return None
    return fields


def live_tids(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def stuck_threads(pid):
    """Threads of PID stopped (state t) or still traced; [] when none."""
    bad = []
    for tid in live_tids(pid):
        st = thread_status(pid, tid)
        if st and (st.get("State", " ")[0] in "tT" or st.get("TracerPid", "0") != "0"):
            bad.append((tid, st.get("State"), st.get("TracerPid")))
    return bad


def all_threads_run(pid, timeout=3):
    """Polls until no thread of PID is stopped or traced.  The kernel
    detaches a dead tracer's tracees in its exit path: give it a moment."""
    bad = []

    def ok():
        nonlocal bad
        bad = stuck_threads(pid)
        return not bad
    poll(ok, timeout, 0.05)
    return not bad, bad


def query_err(db, sql, args=()):
    """Rows and error text (or None); names from watched processes need not
    be UTF-8."""
    return testlib.query_err(db, sql, args, raw_names=True)


def query(db, sql, args=()):
    """As query_err, the rows alone: [] when the database cannot be read (yet)."""
    return query_err(db, sql, args)[0]


def write_config(path, db, watches, **opts):
    """WATCHES: list of (name, {selector: value}).  OPTS: [cpumond] keys."""
    base = {"interval": "200ms", "threshold": "250", "cooldown": "1h", "database": db,
            "journal": "no"}
    base.update({k: str(v) for k, v in opts.items()})
    text = "[cpumond]\n" + "".join(f"{k} = {v}\n" for k, v in base.items())
    for name, sel in watches:
        text += f"\n[watch {name}]\n" + "".join(f"{k} = {v}\n" for k, v in sel.items())
    with open(path, "w") as f:
        f.write(text)


class Daemon:
    """build/cpumond on a configuration, stderr to a file."""

    def __init__(self, build, conf, tmp, name="daemon", verbose=False, env=None, wrap=None):
        self.errpath = os.path.join(tmp, f"{name}.err")
        self.err = open(self.errpath, "wb")
        argv = [os.path.join(build, "cpumond"), "-c", conf] + (["-v"] if verbose else [])
        self.proc = subprocess.Popen((wrap or []) + argv, stdout=self.err, stderr=self.err,
                                     stdin=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid

    def log(self):
        with open(self.errpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout=10):
        return stop(self.proc, signal.SIGTERM, timeout)


def proc_rss_kib(pid):
    st = thread_status(pid, pid)
    if not st or "VmRSS" not in st:
        return None
    return int(st["VmRSS"].split()[0])


def proc_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def sanitized(build):
    """True when BUILD's cpumond is an ASan build."""
    try:
        with open(os.path.join(build, "cpumond"), "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def snapshot_build(build, tmp):
    """A copy of BUILD's programs and targets under TMP: the binaries under
    test cannot change in the middle of a run (a rebuild in the same tree)."""
    import shutil
    dst = os.path.join(tmp, "build")
    os.makedirs(os.path.join(dst, "tests"))
    for name in ("cpumond", "stackdump"):
        shutil.copy2(os.path.join(build, name), dst)
    src = os.path.join(build, "tests")
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            shutil.copy2(path, os.path.join(dst, "tests"))
    return dst


def main(tests):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("B", "build"))
    args = ap.parse_args()
    allowed, why = ptrace_allowed()
    with tempfile.TemporaryDirectory(prefix="cpumond-faults-") as tmp:
        build = snapshot_build(args.build, tmp)
        for t in tests:
            if not allowed and getattr(t, "needs_ptrace", True):
                skip(t.__name__, why)
                continue
            try:
                t(build, tmp)
            except Exception as e:   # a broken scenario is a failure, not a crash
                import traceback
                traceback.print_exc()
                check(f"{t.__name__} ran to its end", False, repr(e))
    return summary()
