#!/usr/bin/env python3
"""Stall events, from the real daemon watching tests/targets/stallcases.

stallcases has a thread blocked on a mutex whose owner sleeps, two threads
in a lock cycle, a thread in D (a vfork parent while its child sleeps 4 s)
and idle threads (condvar, epoll_wait, pipe read, nanosleep; the owner
sleeps too).  None of its threads runs after it is ready but the vforker,
once every 4 s, so every event is decided by construction, not by timing:
the daemon at 200 ms with stall_after 400 ms must make a stall event for
each stuck thread, naming the owner (waiter), the cycle (dl-a, dl-b), the
vfork syscall in D and a user stack vfork_inner <- vfork_middle <- vfork_outer (vforker), and the
end of the vforker's stall when its child exits; and none for the idle
threads.  The vforker goes on afterwards (it prints "vforked N") and no
thread is left stopped or traced: the stall's stack is a copy, no ptrace
stop.
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (Daemon, all_threads_run, check, poll, ptrace_allowed, query,  # noqa: E402
                     read_lines_until, run, run_stackdump, skip, stop, summary)


def start_stallcases(build):
    """Its Popen and {"pid": P, "owner": T, "stuck": {name: tid}, "idle": {name: tid}}."""
    proc = subprocess.Popen([os.path.join(build, "tests", "stallcases"), "--vfork-seconds", "4",
                             "--timeout", "120"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    got = {"pid": None, "owner": None, "stuck": {}, "idle": {}}
    for line in read_lines_until(proc.stdout, b"ready", 20):
        words = line.decode().split()
        if words[:1] == ["pid"]:
            got["pid"] = int(words[1])
        elif words[:1] == ["owner"]:
            got["owner"] = int(words[1])
        elif words[:1] in (["stuck"], ["idle"]):
            got[words[0]][words[2]] = int(words[1])
    return proc, got


def start_daemon(build, tmp, name, pid, env=None):
    """The daemon watching PID at 200 ms with stall_after 400 ms: (its
    database, the Daemon)."""
    db = os.path.join(tmp, f"{name}.db")
    conf = os.path.join(tmp, f"{name}.conf")
    with open(conf, "w") as f:
        f.write(f"[cpumond]\ninterval = 200ms\nstall_after = 400ms\ncooldown = 1h\n"
                f"database = {db}\n[watch s]\npid = {pid}\n")
    return db, Daemon(build, conf, tmp, name=name, env=env)


@contextlib.contextmanager
def stall_run(build, tmp, name, db_name, env=None):
    """stallcases and a daemon watching it (start_daemon, DB_NAME, ENV):
    yields (stallcases' Popen, its facts, the database, the Daemon), or
    None with a failed check "NAME: stallcases ready"; both are stopped
    after."""
    proc, t = start_stallcases(build)
    daemon = None
    try:
        if t["pid"] is None or len(t["stuck"]) != 4:
            check(f"{name}: stallcases ready", False, str(t))
            yield None
            return
        db, daemon = start_daemon(build, tmp, db_name, t["pid"], env=env)
        yield proc, t, db, daemon
    finally:
        if daemon:
            daemon.stop()
        stop(proc)


def stall_rows(db):
    """The stall events in DB: (tid, details) pairs."""
    return [(tid, json.loads(d) if d else {}) for tid, d in
            query(db, "SELECT tid, details FROM events WHERE kind = 'stall'")]


def wait_stalls(db, stuck, deadline_s):
    """The stall events in DB once each of STUCK's threads has its start
    and the vforker its end too, or whatever is there at DEADLINE_S."""
    def done():
        r = stall_rows(db)
        starts = {tid for tid, d in r if not d.get("ended")}
        ended = {tid for tid, d in r if d.get("ended")}
        return r if set(stuck.values()) <= starts and stuck["vforker"] in ended else None
    return poll(done, deadline_s, 0.2) or stall_rows(db)


def test_stalls(build, tmp):
    name = "stall"
    if not ptrace_allowed():
        skip(name, "ptrace is not permitted here (/proc/TID/syscall needs ptrace access)")
        return
    with stall_run(build, tmp, name, "stall") as ready:
        if not ready:
            return
        proc, t, db, daemon = ready
        stuck = t["stuck"]
        got = wait_stalls(db, stuck, 40)
        starts = {tid: d for tid, d in got if not d.get("ended")}
        check(f"{name}: a stall event for each stuck thread",
              set(stuck.values()) <= set(starts), f"{stuck}; events {got}; {daemon.log()}")
        w = starts.get(stuck["waiter"], {})
        check(f"{name}: the mutex waiter names the owner",
              w.get("lock", {}).get("owner") == t["owner"] and "deadlock" not in w, str(w))
        for a, b in (("dl-a", "dl-b"), ("dl-b", "dl-a")):
            d = starts.get(stuck[a], {})
            check(f"{name}: {a} is in a deadlock with {b}",
                  sorted(d.get("deadlock", [])) == sorted([stuck[a], stuck[b]]), str(d))
        v = starts.get(stuck["vforker"], {})
        check(f"{name}: the vforker stalled in D in vfork",
              v.get("state") == "D" and v.get("syscall", {}).get("name") in ("vfork", "clone",
                                                                              "clone3"), str(v))
        ended = [d for tid, d in got if tid == stuck["vforker"] and d.get("ended")]
        check(f"{name}: the vforker's stall ended with a duration",
              ended and ended[0].get("duration_ms", 0) > 0, str(got))
        idle = set(t["idle"].values()) | {t["owner"]}
        check(f"{name}: no event for the idle threads",
              not [tid for tid, _ in got if tid in idle], f"idle {t['idle']}, events {got}")
        check(f"{name}: no stall event was sampled with ptrace",
              not query(db, "SELECT id FROM events WHERE kind = 'stall' AND capture = 'ptrace'"),
              str(query(db, "SELECT id, capture FROM events")))
        text = subprocess.run([os.path.join(build, "cpumond"), "tail", "-d", db, "-n", "100"],
                              capture_output=True, text=True, timeout=30).stdout
        def event_text(thread):
            return text[text.find(f'"{thread}"/{stuck[thread]}'):].split("\n2")[0]
        chain = ["vfork_inner+", "vfork_middle+", "vfork_outer+", "vforker+", "start_thread+"]
        frames = event_text("vforker")
        check(f"{name}: the vforker's user stack names its caller chain",
              all(f in frames for f in chain) and
              sorted(chain, key=frames.find) == chain, frames)
        frames = event_text("waiter")
        check(f"{name}: the waiter's user stack goes through waiter to start_thread",
              "pthread_mutex_lock+" in frames and "waiter+" in frames and
              "start_thread+" in frames, frames)
        # The copy's registers are the thread's own: a ptrace dump of the
        # same blocked waiter (an S thread may be stopped) has the same
        # frames, instruction for instruction.
        def frame_lines(t):
            return [re.sub(r" at \S+:\d+$", "", line.strip()) for line in t.splitlines()
                    if re.match(r"\s*#\d+ ", line) and "[inlined]" not in line]
        r = run_stackdump([os.path.join(build, "stackdump"), str(stuck["waiter"])])
        copied = [re.sub(r"^#\d+ ", "", f) for f in frame_lines(frames)]
        dumped = [re.sub(r"^#\d+ ", "", f) for f in frame_lines(r.stdout)]
        check(f"{name}: the waiter's copied stack is its ptrace dump's",
              r.returncode == 0 and copied and copied == dumped,
              f"copied {copied}; dumped {dumped}; {r.stderr}")
        # The vforker goes on: its next vfork returns within the child's 4 s.
        more = read_lines_until(proc.stdout, b"vforked 2", 15)
        check(f"{name}: the vforker went on after its stall",
              any(line.startswith(b"vforked") for line in more), str(more))
        ok, bad = all_threads_run(t["pid"], timeout=5)
        check(f"{name}: no thread left stopped or traced", ok, str(bad))


def test_probe_deadline(build, tmp):
    """A probe that hangs (CPUMOND_TEST_PROBE_HANG: the child blocks as on a
    held memory-map lock) is killed at its deadline: the stall is recorded
    with the daemon's own reads and probe_error, the cycles go on (the
    vforker's end is seen), and the killed children are reaped."""
    name = "probe deadline"
    if not ptrace_allowed():
        skip(name, "ptrace is not permitted here")
        return
    with stall_run(build, tmp, name, "hang",
                   env=dict(os.environ, CPUMOND_TEST_PROBE_HANG="1")) as ready:
        if not ready:
            return
        proc, t, db, daemon = ready
        stuck = t["stuck"]
        got = wait_stalls(db, stuck, 60)
        starts = {tid: d for tid, d in got if not d.get("ended")}
        check(f"{name}: each stuck thread's stall recorded without the probe",
              set(stuck.values()) <= set(starts) and
              all("did not finish within" in d.get("probe_error", "") for d in starts.values()),
              f"{got}; {daemon.log()[-2000:]}")
        v = starts.get(stuck["vforker"], {})
        check(f"{name}: the daemon's own reads say D and vfork",
              v.get("state") == "D" and v.get("syscall", {}).get("name") == "vfork", str(v))
        check(f"{name}: the cycles went on (the vforker's end recorded)",
              any(d.get("ended") for tid, d in got if tid == stuck["vforker"]), str(got))

        def zombies():
            z = []
            for p in os.listdir("/proc"):
                try:
                    with open(f"/proc/{p}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == daemon.pid and fields[0] == "Z":
                    z.append(int(p))
            return z
        left = poll(lambda: len(zombies()) <= 1 or None, 5, 0.2)
        check(f"{name}: the killed probes are reaped", left, str(zombies()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cpumond-stall-")
    try:
        run([test_stalls, test_probe_deadline], args.build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
