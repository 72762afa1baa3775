"""What every test script of cpumond's shares (tests/integration,
tests/stackdump, tests/faults): TAP-like result lines, the closing summary
line CI reads, the selection of tests by TEST_FILTER, bounded polling,
targets and the daemon started with deadlines, and small /proc and
database readers.

A script imports it with
    sys.path.insert(0, <the tests folder>); import testlib
runs its test functions with testlib.run(tests, *args) (each one
TEST_FILTER selects; an exception in one is a failed check, not the end of
the script), calls check/skip as it goes, and ends with
`return testlib.summary()`, which prints "N passed, N failed, N skipped"
and gives the exit status.
"""
import argparse
import fnmatch
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import traceback

results = {"passed": 0, "failed": 0, "skipped": 0}

# The threshold (permille) the tests give a watch whose spinning thread must
# trip: a spinner gets more than this unless some 40 runnable threads share
# the machine's 2 cores, so a loaded machine does not keep the event from
# happening; idle threads stay at 0.  At so low a threshold a thread that
# waits for a CPU is soon starved too (cpumond(8), EVENT KINDS): the tests
# of hot events set starved = no, test_kinds.py tests the other kinds.
HOT_THRESHOLD = 50


def check(name, cond, why=""):
    """Counts and prints one check: "ok - NAME" or "not ok - NAME: WHY"."""
    results["passed" if cond else "failed"] += 1
    print(f"ok - {name}" if cond else f"not ok - {name}: {why}", flush=True)
    return cond


def skip(name, why):
    results["skipped"] += 1
    print(f"skip - {name}: {why}", flush=True)


def summary():
    """Prints the closing line and returns the exit status (1 on failure)."""
    print(f"{results['passed']} passed, {results['failed']} failed, {results['skipped']} skipped",
          flush=True)
    return 1 if results["failed"] else 0


def selected(name):
    """Whether the test NAME runs: TEST_FILTER, a shell pattern as for the
    cmocka binaries (test_live_*), matches it; unset, every test runs."""
    pattern = os.environ.get("TEST_FILTER")
    return not pattern or fnmatch.fnmatchcase(name, pattern)


def run(tests, *args):
    """Calls each function of TESTS that TEST_FILTER selects with ARGS.  An
    exception in one is counted as a failed check and the others still
    run."""
    for t in tests:
        if not selected(t.__name__):
            continue
        try:
            t(*args)
        except Exception as e:   # a broken scenario is a failure, not a crash
            traceback.print_exc()
            check(f"{t.__name__} ran to its end", False, f"{type(e).__name__}: {e}")


def run_stackdump(argv, tries=20, **kw):
    """Runs a stackdump command line ARGV (subprocess.run with
    capture_output and text, KW passed on) again while it says a thread
    "did not stop within" its deadline: a loaded machine may keep a
    running thread from its CPU for longer than the dump waits, and the
    tests are about the stack, not about the machine's load.  Returns the
    last CompletedProcess."""
    kw.setdefault("timeout", 30)
    for _ in range(tries):
        r = subprocess.run(argv, capture_output=True, text=True, **kw)
        if "did not stop within" not in r.stderr + r.stdout:
            return r
        time.sleep(0.05)
    return r


def poll(fn, timeout, step=0.1):
    """Calls fn until it returns something true or timeout seconds pass;
    returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def ptrace_allowed():
    """(allowed, why not): root may ptrace any process; others need
    kernel.yama.ptrace_scope 0."""
    if os.geteuid() == 0:
        return True, ""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except OSError:
        return True, ""
    return scope == 0, f"not root and kernel.yama.ptrace_scope={scope}"


def query_err(db, sql, args=(), raw_names=False):
    """Rows of SQL on DB, opened read-only, and the error text or None.
    RAW_NAMES: text that is not UTF-8 (names from watched processes) comes
    back with surrogate escapes instead of failing the query."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        if raw_names:
            con.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        try:
            return con.execute(sql, args).fetchall(), None
        finally:
            con.close()
    except sqlite3.Error as e:
        return [], str(e)


def query(db, sql, args=()):
    """Rows of SQL on DB, opened read-only; [] when it cannot be read (yet)."""
    return query_err(db, sql, args)[0]


def is_subsequence(needle, hay):
    """Whether NEEDLE's items appear in HAY in the same order."""
    it = iter(hay)
    return all(any(x == y for y in it) for x in needle)


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


class Target:
    """BUILD/tests/hotchain with THREADS threads of which HOT burn: its
    Popen (proc), pid, hot tids and idle tids; pid is None when it did not
    say ready within TIMEOUT seconds."""

    def __init__(self, build, threads, hot, timeout=20):
        self.proc, self.pid, self.hot, self.idle = start_target(
            [os.path.join(build, "tests", "hotchain"), "--threads", str(threads),
             "--hot", str(hot), "--timeout", "120"], timeout=timeout)

    def stop(self):
        stop(self.proc)


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



def perf_allowed(build, tid):
    """Whether this process may perf-sample thread TID (stackdump -m perf
    on it), and what stackdump said."""
    r = subprocess.run([os.path.join(build, "stackdump"), "-m", "perf", str(tid)],
                       capture_output=True, text=True, timeout=30)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def perf_fds(pid):
    """How many perf event descriptors process PID holds (None: gone)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    n = 0
    for name in names:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:[perf_event]"
        except OSError:
            pass
    return n


class StateWatch:
    """Polls /proc/PID/task/TID/status of TIDS (None: every thread of PID
    as they come and go) in a thread of its own until stop(): every State
    and TracerPid seen, so that a test can tell a thread was never stopped
    or traced.  FDS_OF, a pid: also the most perf descriptors it held at
    once (perf_fds)."""

    def __init__(self, pid, tids=None, fds_of=None):
        import threading
        self.pid, self.tids, self.fds_of = pid, tids, fds_of
        self.reads, self.bad, self.max_fds = 0, [], 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            for tid in self.tids if self.tids is not None else live_tids(self.pid):
                st = thread_status(self.pid, tid)
                if st is None:
                    continue
                self.reads += 1
                if st.get("State", " ")[0] in "tT" or st.get("TracerPid", "0") != "0":
                    self.bad.append((tid, st.get("State"), st.get("TracerPid")))
            if self.fds_of:
                self.max_fds = max(self.max_fds, perf_fds(self.fds_of) or 0)
            time.sleep(0.002)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self


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


class HistoryRun:
    """hotchain (THREADS threads, one hot) and the daemon watching it at a
    200 ms interval with every thread over FLOOR permille kept in the usage
    history (test_top, test_usage): cpumond, db, target, hot (its hot tid),
    daemon."""

    def __init__(self, build, tmp, name, threads, floor):
        self.cpumond = os.path.join(build, "cpumond")
        self.db = os.path.join(tmp, f"{name}.db")
        self.target = Target(build, threads=threads, hot=1)
        self.hot = self.target.hot[0] if self.target.hot else None
        conf = os.path.join(tmp, f"{name}.conf")
        with open(conf, "w") as f:
            f.write(f"[cpumond]\ninterval = 200ms\nthreshold = {HOT_THRESHOLD}\nstarved = no\n"
                    f"history_floor = {floor}\ncooldown = 1h\ndatabase = {self.db}\n"
                    f"[watch hot]\npid = {self.target.pid}\n")
        self.daemon = Daemon(build, conf, tmp, name=f"{name}-daemon")

    def stop(self):
        self.daemon.stop()
        self.target.stop()

    @classmethod
    def main(cls, name, body):
        """A suite's main: --build, a scratch directory, the run (CLS, a
        subclass taking (build, tmp)), BODY(run, tmp) once hotchain is
        ready; everything stopped and removed after.  Returns summary()."""
        ap = argparse.ArgumentParser()
        ap.add_argument("--build", default="build")
        args = ap.parse_args()
        tmp = tempfile.mkdtemp(prefix=f"cpumond-{name}-")
        s = cls(args.build, tmp)
        try:
            if check("hotchain started", s.target.pid and s.hot, "no ready line"):
                body(s, tmp)
        finally:
            s.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        return summary()
