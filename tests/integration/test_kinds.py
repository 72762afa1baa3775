#!/usr/bin/env python3
"""Event kinds beyond hot: starved and process events, from the real daemon
watching tests/targets/spinners.

K spinning threads, K = twice the CPUs this test may run on (4 on a 2-core
machine): together they can have at most the CPUs, so each gets about half
a core while it wants a whole one, whatever else the machine runs (more
load only starves them more).  With threshold 800 no more than
floor(1000 * CPUs / 801) of them can be over it in one interval, so at
least the others are starved in every interval: their demand (run time plus
run-queue wait) is near 1000.  process_threshold is K * HOT_THRESHOLD, which
the spinners together pass as long as each gets more than HOT_THRESHOLD
(testlib says when that holds).  The target's waiting threads (condvar,
pipe, epoll, sigwait) must give no event of any kind.

Checks the events in the database and as `cpumond tail --json` and `cpumond
report --kind` show them; no exact usage is asserted.

Then one spinner in a cgroup of its own whose CPU quota is 1 ms a second:
it stays runnable and runs 1 ms a second, so between two of its runs lie
at least three reads 300 ms apart, and the later of two that saw it not
run finds it runnable since the one before: a starved event with
waited_all (its wait counts in the host's CPU pressure, which lets the
sampler look).  Needs root and a cgroup cpu controller (v2 cpu.max, or v1
cpu.cfs_quota_us); skipped otherwise.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (HOT_THRESHOLD, Daemon, all_threads_run, check, poll,  # noqa: E402
                     ptrace_allowed, query, run, skip, start_target, stop, summary)

THRESHOLD = 800
STARVED_KEYS = {"usage", "demand", "run_delay", "waited_all", "cpu", "host_pressure",
                "cgroup_pressure", "throttled_periods", "throttled_usec",
                "throttled_over_ms", "top"}
PROCESS_KEYS = {"process_usage", "threads", "top"}
TOP_KEYS = {"tid", "comm", "usage"}


def tail_json(build, db):
    p = subprocess.run([os.path.join(build, "cpumond"), "tail", "-d", db, "-n", "1000",
                        "--json"], capture_output=True, text=True, timeout=30)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines() if line]


def report_events(build, db, kind):
    """The events report --kind KIND --json counts, over all its groups."""
    p = subprocess.run([os.path.join(build, "cpumond"), "report", "-d", db, "--kind", kind,
                        "--json"], capture_output=True, text=True, timeout=30)
    return p.returncode, sum(json.loads(line)["events"] for line in p.stdout.splitlines() if line)


def test_starved_and_process(build, tmp):
    name = "starved and process events"
    allowed, why = ptrace_allowed()
    if not allowed:
        skip(name, f"episodes need ptrace: {why}")
        return
    ncpu = len(os.sched_getaffinity(0))
    spin = 2 * ncpu
    # Over the threshold in one interval at most this many of them.
    hot_most = 1000 * ncpu // (THRESHOLD + 1)
    need = max(1, spin - hot_most)
    process_threshold = spin * HOT_THRESHOLD
    proc, pid, hot, idle = start_target([os.path.join(build, "tests", "spinners"), "--spin",
                                         str(spin), "--timeout", "90"])
    daemon = None
    try:
        if pid is None:
            check(name, False, "spinners did not start")
            return
        db = os.path.join(tmp, "kinds.db")
        conf = os.path.join(tmp, "kinds.conf")
        with open(conf, "w") as f:
            f.write(f"""[cpumond]
interval = 300ms
threshold = {THRESHOLD}
consecutive = 1
cooldown = 1h
episode_samples = 2
sample_interval = 10ms
process_threshold = {process_threshold}
database = {db}

[watch spin]
pid = {pid}
""")
        daemon = Daemon(build, conf, tmp, name="kinds")

        def rows():
            if not os.path.exists(db):
                return []
            return query(db, "SELECT kind, tid, usage, threshold, run_delay, details FROM events")

        def enough():
            r = rows()
            starved = {t for k, t, *_ in r if k == "starved" and t in hot}
            return len(starved) >= need and any(k == "process" for k, *_ in r)
        got = poll(enough, 40)
        r = rows()
        check(f"{name}: at least {need} of {spin} spinners starved and a process event",
              got, f"events: {[(k, t) for k, t, *_ in r]}; daemon log: {daemon.log()[-2000:]}")
        daemon.stop()
        daemon = None
        ok, bad = all_threads_run(pid)
        check("no spinner left stopped or traced", ok, str(bad))

        starved = [x for x in r if x[0] == "starved"]
        process = [x for x in r if x[0] == "process"]
        check("every event is a spinner's: the waiting threads give none",
              all(t in hot for _, t, *_ in r) and not any(t in idle for _, t, *_ in r),
              f"idle {idle}, events {[(k, t) for k, t, *_ in r]}")
        for kind, tid, usage, threshold, run_delay, details in starved:
            d = json.loads(details)
            check(f"starved {tid}: demand over the threshold, usage not",
                  d["usage"] == usage and usage <= threshold == THRESHOLD < d["demand"] <= 1000
                  and run_delay == d["run_delay"] == d["demand"] - usage,
                  f"usage {usage} threshold {threshold} run_delay {run_delay} details {d}")
        for kind, tid, usage, threshold, run_delay, details in process:
            d = json.loads(details)
            check(f"process {tid}: over process_threshold, one of its top threads",
                  threshold == process_threshold < d["process_usage"]
                  and tid in [t["tid"] for t in d["top"]]
                  and all(t["tid"] in hot for t in d["top"]) and 1 <= len(d["top"]) <= 3,
                  f"threshold {threshold} details {d}")

        rc, events = tail_json(build, db)
        kinds = {e["kind"] for e in events}
        check("tail --json: the kinds", rc == 0 and {"starved", "process"} <= kinds,
              f"rc {rc}, kinds {kinds}")
        for kind, keys in (("starved", STARVED_KEYS), ("process", PROCESS_KEYS)):
            d = next((e["details"] for e in events if e["kind"] == kind), {})
            check(f"tail --json: {kind} details have the documented keys",
                  set(d) == keys and all(set(t) == TOP_KEYS for t in d["top"]), str(d))

        # report counts the events with a key stack.
        for kind in ("starved", "process"):
            want = query(db, "SELECT count(*) FROM events WHERE kind = ? AND stack_hash IS NOT "
                         "NULL", (kind,))[0][0]
            rc, n = report_events(build, db, kind)
            check(f"report --kind {kind}: only its events", rc == 0 and n == want,
                  f"rc {rc}, {n} events reported, {want} in the database")
    finally:
        if daemon:
            daemon.stop()
        stop(proc)


class QuotaCgroup:
    """A cgroup of its own with a CPU quota of QUOTA_US per PERIOD_US, v2
    where the root delegates cpu, else v1's cpu hierarchy; why when neither
    can be made."""

    def __init__(self, name, quota_us, period_us):
        self.path, self.why = None, ""
        v2 = "/sys/fs/cgroup"
        try:
            with open(os.path.join(v2, "cgroup.subtree_control")) as f:
                delegated = "cpu" in f.read().split()
        except OSError:
            delegated = False
        try:
            if delegated:
                self.path, self.v2 = os.path.join(v2, name), True
                os.mkdir(self.path)
                with open(os.path.join(self.path, "cpu.max"), "w") as f:
                    f.write(f"{quota_us} {period_us}\n")
            elif os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
                self.path, self.v2 = os.path.join("/sys/fs/cgroup/cpu", name), False
                os.mkdir(self.path)
                for key, v in (("cpu.cfs_period_us", period_us), ("cpu.cfs_quota_us", quota_us)):
                    with open(os.path.join(self.path, key), "w") as f:
                        f.write(f"{v}\n")
            else:
                self.why = "no cgroup cpu controller to set a quota with"
        except OSError as e:
            self.why = f"cannot make a cgroup with a CPU quota: {e}"
            self.remove()

    def add(self, pid):
        """Moves every thread of PID in (v1 moves threads one by one)."""
        if self.v2:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write(f"{pid}\n")
            return
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(os.path.join(self.path, "tasks"), "w") as f:
                f.write(f"{tid}\n")

    def remove(self):
        """Removes it once its processes left it (a moment after they exit)."""
        def gone():
            try:
                os.rmdir(self.path)
            except FileNotFoundError:
                pass
            except OSError:
                return False
            return True
        if self.path:
            poll(gone, 5)
            self.path = None


def test_waited_all(build, tmp):
    name = "a thread runnable and never scheduled"
    allowed, why = ptrace_allowed()
    if os.geteuid() != 0 or not allowed:
        skip(name, "needs root (a cgroup of its own)")
        return
    cg = QuotaCgroup(f"cpumond-test-{os.getpid()}", 1000, 1000000)
    if cg.why:
        skip(name, cg.why)
        return
    proc, pid, hot, idle = start_target([os.path.join(build, "tests", "spinners"), "--spin", "1",
                                         "--timeout", "60"])
    daemon = None
    try:
        if pid is None:
            check(name, False, "spinners did not start")
            return
        cg.add(pid)
        db = os.path.join(tmp, "waited.db")
        conf = os.path.join(tmp, "waited.conf")
        with open(conf, "w") as f:
            f.write(f"[cpumond]\ninterval = 300ms\nthreshold = {THRESHOLD}\ncooldown = 0\n"
                    f"episode_samples = 0\ndatabase = {db}\n[watch spin]\npid = {pid}\n")
        daemon = Daemon(build, conf, tmp, name="waited")

        def waited():
            for tid, details in query(db, "SELECT tid, details FROM events WHERE kind = "
                                      "'starved'"):
                d = json.loads(details)
                if d["waited_all"]:
                    return tid, d
            return None
        got = poll(waited, 30, 0.3)
        check(f"{name}: a starved event with waited_all, demand 1000",
              got and got[0] in hot and got[1]["demand"] == 1000 and got[1]["usage"] == 0,
              f"{got}; events: {query(db, 'SELECT kind, tid, usage FROM events')}")
        daemon.stop()
        daemon = None
        # It runs 1 ms a second: give it a few of them to leave any stop.
        ok, bad = all_threads_run(pid, timeout=5)
        check(f"{name}: left neither stopped nor traced", ok, str(bad))
    finally:
        if daemon:
            daemon.stop()
        stop(proc)
        cg.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cpumond-kinds-")
    try:
        run([test_starved_and_process, test_waited_all], args.build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
