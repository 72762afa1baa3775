#!/usr/bin/env python3
"""Fault suite, 6: pid reuse and races.

PID reuse, forced: the script runs itself again inside a new pid namespace
(`unshare -fp --mount-proc`, where it is pid 1), and there writes
/proc/sys/kernel/ns_last_pid so that every target it starts gets pid 300.
The daemon watches `pid = 300`.  Targets of two different programs (faulty
and hotchain) take pid 300 in turn and are SIGKILLed at random moments,
also while an episode samples them.  Every stored event must belong to one
program throughout: its comm, exe, thread name, tid and key stack (faulty_*
or hot_* functions) all from the same process.

Pidfiles: a pidfile naming a dead pid, and one naming a live process that
is not the program the watch's comm selector names: no event, and one log
line each (with -v).  Both through the daemon's direct /proc path (pid and
pidfile watches only) and through libproc2 (a cmdline selector added).
When nothing is logged, that is reported as a gap (skip, saying where).
"""
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LONG, Daemon, check, main, note, poll, query, skip, start_target, stop,
                    write_config)

PID = 300


def start_at(argv, pid):
    """Starts ARGV so that it gets PID (we are pid 1 of a fresh namespace)."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    return start_target(argv)


def symbols(db, h):
    return {r[0] for r in query(db, "SELECT symbol FROM stack_frames WHERE hash = ?", (h,))}


def inner(build, tmp):
    """Runs as pid 1 of a new pid namespace."""
    rounds = 40 if LONG else 6
    rng = random.Random(17)
    db = os.path.join(tmp, "reuse.db")
    conf = os.path.join(tmp, "reuse.conf")
    write_config(conf, db, [("reuse", {"pid": PID})], interval="100ms", cooldown="0",
                 episode_samples=10, sample_interval="20ms")
    programs = {
        "faulty": [os.path.join(build, "tests", "faulty"), "--hot", "1", "--idle", "1",
                   "--thread-name", "fhot", "--timeout", "300"],
        "hotchain": [os.path.join(build, "tests", "hotchain"), "--threads", "2", "--hot", "1",
                     "--timeout", "300"],
    }
    lives = []      # (program, tids, start, end) of each process that had pid 300
    daemon = None
    proc = None
    try:
        for r in range(rounds):
            name = "faulty" if r % 2 == 0 else "hotchain"
            t0 = time.time()
            proc, pid, hot, idle = start_at(programs[name], PID)
            if pid != PID:
                skip("pid reuse", f"could not get pid {PID} (got {pid}): ns_last_pid not honoured")
                stop(proc)
                return
            tids = set(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            if daemon is None:
                daemon = Daemon(build, conf, tmp, "reuse")
            # The first round waits for an event; later ones kill at random,
            # often in the middle of an episode.
            if r == 0:
                poll(lambda: query(db, "SELECT 1 FROM events"), 10)
            else:
                time.sleep(rng.uniform(0.25, 1.0))
            proc.kill()
            proc.wait()
            lives.append((name, tids, t0, time.time()))
        time.sleep(0.5)
        check("pid reuse: the daemon runs", daemon.alive(), daemon.log()[-300:])
        daemon.stop()
        rows = query(db, "SELECT id, time, pid, tid, comm, exe, thread, stack_hash, error "
                         "FROM events ORDER BY id")
        wrong = []
        seen = {"faulty": 0, "hotchain": 0}
        for eid, t, pid, tid, comm, exe, thread, h, error in rows:
            life = [l for l in lives if l[2] * 1e6 <= t <= l[3] * 1e6]
            if len(life) != 1:
                wrong.append((eid, "time in no single life", t))
                continue
            name, tids, _, _ = life[0]
            seen[name] += 1
            syms = symbols(db, h) if h is not None else set()
            want_thread = "fhot" if name == "faulty" else "hot-"
            want_sym = "faulty_leaf" if name == "faulty" else "hot_leaf"
            other_sym = "hot_leaf" if name == "faulty" else "faulty_leaf"
            problems = []
            if pid != PID:
                problems.append(f"pid {pid}")
            if comm != name:
                problems.append(f"comm {comm!r}")
            if exe and not exe.endswith("/" + name):
                problems.append(f"exe {exe!r}")
            if thread and not thread.startswith(want_thread):
                problems.append(f"thread {thread!r}")
            if tid not in tids:
                problems.append(f"tid {tid} not of this process")
            if other_sym in syms or (h is not None and want_sym not in syms):
                problems.append(f"stack {sorted(syms)}")
            if problems:
                wrong.append((eid, name, problems, error))
        note(f"pid reuse: {rounds} processes took pid {PID}; {len(rows)} events "
             f"({seen['faulty']} faulty, {seen['hotchain']} hotchain)")
        check("pid reuse: events for both programs at the same pid",
              seen["faulty"] > 0 and seen["hotchain"] > 0, seen)
        check("pid reuse: every event belongs to the process that had the pid then",
              not wrong, wrong[:5])
    finally:
        if daemon:
            daemon.kill()
        stop(proc)


def test_pid_reuse(build, tmp):
    if os.environ.get("CPUMOND_FAULTS_PIDNS") == "1":
        inner(build, tmp)
        return
    env = dict(os.environ, CPUMOND_FAULTS_PIDNS="1")
    try:
        p = subprocess.run(["unshare", "-fp", "--mount-proc", sys.executable,
                            os.path.abspath(__file__), "--build", build, "--only", "pid-reuse"],
                           capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        skip("pid reuse", f"cannot run in a new pid namespace: {e}")
        return
    lines = p.stdout.splitlines()
    if not any(l.startswith(("ok -", "not ok -", "skip -")) for l in lines):
        skip("pid reuse", f"unshare -fp --mount-proc failed: {p.stderr.strip()[-300:]}")
        return
    # Relay the inner checks, counting them here.
    from common import results
    for l in lines[:-1]:
        print(l, flush=True)
        if l.startswith("ok -"):
            results["passed"] += 1
        elif l.startswith("not ok -"):
            results["failed"] += 1
        elif l.startswith("skip -"):
            results["skipped"] += 1
    if p.returncode not in (0, 1) or p.stderr.strip():
        print(p.stderr[-2000:], file=sys.stderr)


def pidfile_case(build, tmp, libproc2):
    how = "libproc2" if libproc2 else "direct"
    dead = subprocess.Popen(["true"])
    dead.wait()
    other, opid, _, _ = start_target([os.path.join(build, "tests", "hotchain"), "--threads", "1",
                                      "--hot", "1", "--timeout", "60"])
    deadfile = os.path.join(tmp, f"dead-{how}.pid")
    wrongfile = os.path.join(tmp, f"wrong-{how}.pid")
    with open(deadfile, "w") as f:
        f.write(f"{dead.pid}\n")
    with open(wrongfile, "w") as f:
        f.write(f"{opid}\n")
    db = os.path.join(tmp, f"pidfile-{how}.db")
    conf = os.path.join(tmp, f"pidfile-{how}.conf")
    extra = {"cmdline": "."} if libproc2 else {}
    write_config(conf, db, [("dead", dict(pidfile=deadfile, comm="faulty", **extra)),
                            ("wrong", dict(pidfile=wrongfile, comm="faulty", **extra))],
                 interval="100ms")
    daemon = Daemon(build, conf, tmp, f"pidfile-{how}", verbose=True)
    try:
        time.sleep(2.5)     # some 20 cycles
        check(f"pidfile ({how}): the daemon runs", daemon.alive(), daemon.log()[-300:])
        daemon.stop()
        rows = query(db, "SELECT watch, pid, comm FROM events")
        check(f"pidfile ({how}): no event for a dead pid or another program", rows == [], rows)
        log = daemon.log().splitlines()
        for name, path, pid in (("a dead pid", deadfile, dead.pid),
                                ("a process that is not the watch's comm", wrongfile, opid)):
            said = [l for l in log if path in l or f" {pid}" in l or f"[{pid}]" in l
                    or f"pid {pid}" in l]
            if len(said) == 1:
                check(f"pidfile ({how}) naming {name}: one log line", True)
            elif not said:
                check(f"pidfile ({how}) naming {name}: one log line", False,
                      "nothing is logged (cpumond/watch.c watch_why_empty(), and the daemon's "
                      "warning of a watch with no process)")
            else:
                check(f"pidfile ({how}) naming {name}: one log line, not one per cycle", False,
                      f"{len(said)} lines: {said[:3]}")
    finally:
        daemon.kill()
        stop(other)


def test_pidfiles(build, tmp):
    pidfile_case(build, tmp, libproc2=False)
    pidfile_case(build, tmp, libproc2=True)


if __name__ == "__main__":
    if "--only" in sys.argv:
        i = sys.argv.index("--only")
        del sys.argv[i:i + 2]
        sys.exit(main([test_pid_reuse]))
    sys.exit(main([test_pid_reuse, test_pidfiles]))
