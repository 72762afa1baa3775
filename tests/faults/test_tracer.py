#!/usr/bin/env python3
"""Fault suite, 2: another tracer.

A hot thread already traced by strace (the thread) or gdb (the whole
process, left running with `continue`): the event is stored with the reason
(the tracer named), nothing loops or hangs (the daemon stays responsive and
its log does not grow per cycle), the tracer keeps its tracee, and the
daemon tries again only after the cooldown.
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Daemon, check, main, note, poll, query, skip, start_target, stop,
                    thread_status, write_config)

COOLDOWN_S = 2


def one_tracer(build, tmp, name, tracer_argv_fn, tracer_word):
    tool = shutil.which(name)
    if not tool:
        skip(f"{name}: traced target", f"{name} is not installed")
        return
    db = os.path.join(tmp, f"{name}.db")
    conf = os.path.join(tmp, f"{name}.conf")
    target, pid, hot, _ = start_target([os.path.join(build, "tests", "faulty"), "--hot", "1",
                                        "--idle", "1", "--timeout", "120"])
    tracer = daemon = None
    try:
        tid = hot[0]
        tracer = subprocess.Popen(tracer_argv_fn(tool, pid, tid), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        traced = poll(lambda: (thread_status(pid, tid) or {}).get("TracerPid", "0") != "0", 20)
        if not traced:
            skip(f"{name}: traced target", f"{name} did not attach within 20 s")
            return
        # gdb stops the process to attach, then continues it: wait until the
        # hot thread runs again.
        poll(lambda: (thread_status(pid, tid) or {}).get("State", "t")[0] in "RS", 20)
        # ptrace's case: a perf sample needs no attach, so under capture =
        # auto or perf a traced thread gets its stack all the same.
        write_config(conf, db, [("traced", {"pid": pid})], interval="200ms",
                     cooldown=f"{COOLDOWN_S}s", episode_samples=5, sample_interval="20ms",
                     capture="ptrace")
        daemon = Daemon(build, conf, tmp, name)
        # Only the hot thread's events are judged: the threshold is low
        # (HOT_THRESHOLD), so on a loaded or sanitized run the target's main
        # thread, which wakes every 20 ms, may trip now and then too.
        sql = f"SELECT tid, stack_hash, error, time FROM events WHERE tid = {tid} ORDER BY id"
        rows = poll(lambda: len(query(db, sql)) >= 3 and query(db, sql), COOLDOWN_S * 3 + 15)
        rows = rows or query(db, sql)
        others = query(db, f"SELECT tid FROM events WHERE tid != {tid}")
        check(f"{name}: events stored for the traced thread", len(rows) >= 3,
              f"{len(rows)} events of tid {tid}, {len(others)} of other threads")
        if not rows:
            return
        check(f"{name}: stored without a stack, the reason naming the tracer",
              all(r[1] is None and tracer_word in (r[2] or "") for r in rows),
              [r[2] for r in rows])
        times = [r[3] for r in rows]
        gaps = [(b - a) / 1e6 for a, b in zip(times, times[1:])]
        note(f"{name}: {len(rows)} events, gaps {['%.2f' % g for g in gaps]} s, "
             f"reason {rows[0][2]!r}")
        # The event time is taken when the trigger fires, each cycle on the
        # cycle's cadence: a retry inside the cooldown would be a gap of
        # about one interval.
        check(f"{name}: tried again only after the cooldown ({COOLDOWN_S} s)",
              len(gaps) >= 1 and all(g >= COOLDOWN_S - 0.05 for g in gaps), gaps)
        check(f"{name}: the tracer keeps its tracee",
              (thread_status(pid, tid) or {}).get("TracerPid") == str(tracer.pid),
              thread_status(pid, tid))
        check(f"{name}: the daemon still runs", daemon.alive(), daemon.log()[-300:])
        lines = daemon.log().splitlines()
        nevents = len(query(db, "SELECT id FROM events"))
        check(f"{name}: no log loop ({len(lines)} lines for {nevents} events)",
              len(lines) <= 4 * nevents + 5, lines[-10:])
        t0 = time.monotonic()
        rc = daemon.stop()
        check(f"{name}: SIGTERM exits 0 promptly", rc == 0 and time.monotonic() - t0 < 5,
              f"exit {rc}")
        p = subprocess.run([os.path.join(build, "cpumond"), "tail", "-d", db, "-n", "1000"],
                           capture_output=True, timeout=10)
        check(f"{name}: tail prints the reason", p.returncode == 0 and b"no stack" in p.stdout,
              p.stdout[-300:])
    finally:
        if daemon:
            daemon.kill()
        stop(tracer, timeout=10)
        stop(target)


def test_strace(build, tmp):
    one_tracer(build, tmp, "strace",
               lambda tool, pid, tid: [tool, "-qq", "-e", "trace=none", "-o", "/dev/null",
                                       "-p", str(tid)], "strace")


def test_gdb(build, tmp):
    one_tracer(build, tmp, "gdb",
               lambda tool, pid, tid: [tool, "-q", "-nx", "-batch", "-ex", "set pagination off",
                                       "-ex", "continue", "-p", str(pid)], "gdb")


if __name__ == "__main__":
    sys.exit(main([test_strace, test_gdb]))
