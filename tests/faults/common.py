"""Shared pieces of the fault suite (tests/faults/test_*.py).

The harness is tests/testlib.py, the integration tests' too (targets that
print "pid P", "hot T", "idle T" and "ready", the daemon on a temporary
configuration and database, every wait polled with a deadline); this file
adds what only the fault suite needs and re-exports the rest.  Each script prints
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
from testlib import (Daemon, all_threads_run, check, live_tids, note, poll,  # noqa: E402,F401
                     ptrace_allowed, read_available, read_lines_until, results, skip,
                     start_target, stop, stuck_threads, summary, thread_status)

LONG = os.environ.get("FAULTS_LONG", "") not in ("", "0")


def query_err(db, sql, args=()):
    """Rows and error text (or None); names from watched processes need not
    be UTF-8."""
    return testlib.query_err(db, sql, args, raw_names=True)


def query(db, sql, args=()):
    """As query_err, the rows alone: [] when the database cannot be read (yet)."""
    return query_err(db, sql, args)[0]


def write_config(path, db, watches, **opts):
    """WATCHES: list of (name, {selector: value}).  OPTS: [cpumond] keys."""
    base = {"interval": "200ms", "threshold": str(testlib.HOT_THRESHOLD), "starved": "no",
            "cooldown": "1h",
            "database": db,
            "journal": "no"}
    base.update({k: str(v) for k, v in opts.items()})
    text = "[cpumond]\n" + "".join(f"{k} = {v}\n" for k, v in base.items())
    for name, sel in watches:
        text += f"\n[watch {name}]\n" + "".join(f"{k} = {v}\n" for k, v in sel.items())
    with open(path, "w") as f:
        f.write(text)


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
    """Runs TESTS (those TEST_FILTER selects) on a snapshot of --build."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("B", "build"))
    args = ap.parse_args()
    allowed, why = ptrace_allowed()
    with tempfile.TemporaryDirectory(prefix="cpumond-faults-") as tmp:
        build = snapshot_build(args.build, tmp)
        runnable = []
        for t in tests:
            if not allowed and getattr(t, "needs_ptrace", True):
                if testlib.selected(t.__name__):
                    skip(t.__name__, why)
                continue
            runnable.append(t)
        testlib.run(runnable, build, tmp)
    return summary()
