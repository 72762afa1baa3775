"""What every test script of cpumond's shares: TAP-like result lines, the
closing summary line CI reads, bounded polling, and small /proc and database
readers.

A script imports it with
    sys.path.insert(0, <the tests folder>); import testlib
calls check/skip as it goes, and ends with `return testlib.summary()`, which
prints "N passed, N failed, N skipped" and gives the exit status.
"""
import os
import sqlite3
import time

results = {"passed": 0, "failed": 0, "skipped": 0}


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


def thread_status(pid, tid):
    """/proc/PID/task/TID/status as a dict of its fields."""
    fields = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return fields


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
