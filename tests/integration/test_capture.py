#!/usr/bin/env python3
"""capture = perf | ptrace | auto (issue 17), the daemon's side.

- capture = perf: hotchain's hot thread gives events with capture "perf",
  the hot chain in order, and the thread is never stopped or traced while
  its episodes run (its State and TracerPid polled all along); the daemon's
  perf descriptors go with the episode;
- capture = ptrace on the same thread: capture "ptrace" and the same key
  stack hash (the hot loop is hot_leaf's: the hash is build-id + function
  start per frame, whichever instruction a sample caught);
- capture = auto: perf where the kernel permits it (root here);
- tail --json and report --json say the capture; the metrics count the
  samples by capture.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends with
"N passed, N failed, N skipped".
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (HOT_THRESHOLD, Daemon, StateWatch, Target, check,  # noqa: E402
                     is_subsequence, perf_allowed, perf_fds, poll, query, run, skip,
                     summary)

HOT_CHAIN = ["hot_leaf", "hot_mid", "hot_root", "hot_thread_main"]


def write_config(path, db, pid, capture, prom, episode_samples=10):
    with open(path, "w") as f:
        f.write(f"""[cpumond]
interval = 200ms
threshold = {HOT_THRESHOLD}
cooldown = 1h
sample_interval = 20ms
episode_samples = {episode_samples}
capture = {capture}
database = {db}
journal = no
metrics_file = {prom}

[watch hot]
pid = {pid}
""")


def key_events(db, tid):
    return query(db, "SELECT id, capture, stack_hash, samples, episode_end FROM events "
                     "WHERE tid = ? AND stack_hash IS NOT NULL ORDER BY id", (tid,))


def event_symbols(db, event_id):
    return [r[0] for r in query(db, "SELECT f.symbol FROM events e JOIN stack_frames f ON "
                                    "f.hash = e.stack_hash WHERE e.id = ? ORDER BY f.depth",
                                (event_id,))]


def episode(build, tmp, target, capture):
    """One daemon with CAPTURE on TARGET's hot thread until its first
    event with a stack is stored.  Returns (event row, StateWatch, daemon
    log, prom text, db)."""
    tid = target.hot[0]
    db, conf = os.path.join(tmp, f"{capture}.db"), os.path.join(tmp, f"{capture}.conf")
    prom = os.path.join(tmp, f"{capture}.prom")
    write_config(conf, db, target.pid, capture, prom)
    daemon = Daemon(build, conf, tmp, name=capture, verbose=True)
    watch = StateWatch(target.pid, [tid], fds_of=daemon.pid)
    try:
        rows = poll(lambda: key_events(db, tid), 30)
        # The metrics file is rewritten every cycle: the next one has it.
        poll(lambda: os.path.exists(prom) and re.search(r'capture="\w+"\} [1-9]',
                                                        open(prom).read()), 5)
        prom_text = open(prom).read() if os.path.exists(prom) else ""
        fds_after = poll(lambda: perf_fds(daemon.pid) == 0, 10)
    finally:
        watch.stop()
        daemon.stop()
    return (rows[0] if rows else None), watch, daemon.log(), prom_text, db, fds_after


def test_perf_and_ptrace(build, tmp):
    target = Target(build, 2, 1)
    try:
        if not target.pid:
            check("capture: hotchain ready", False, "no ready line")
            return
        ok, why = perf_allowed(build, target.hot[0])
        if not ok:
            skip("capture = perf", f"perf sampling is not permitted here: {why}")
            return
        ev, watch, log, prom, db, fds_after = episode(build, tmp, target, "perf")
        check("perf: an event with a stack", ev, log[-2000:])
        if not ev:
            return
        eid, capture, perf_hash, samples, end = ev
        check("perf: its capture is \"perf\"", capture == "perf", capture)
        syms = event_symbols(db, eid)
        check("perf: the key stack holds the hot chain in order",
              is_subsequence(HOT_CHAIN, syms), syms)
        check("perf: the thread was never stopped or traced during the episode",
              watch.reads > 0 and not watch.bad, f"{watch.reads} reads, {watch.bad[:5]}")
        check("perf: the daemon held perf descriptors during the episode, none after",
              watch.max_fds > 0 and fds_after, f"max {watch.max_fds}, after {fds_after}")
        # hotchain's hot thread is a few frames deep: the copy fitted to
        # it is far below the cap.
        m = re.search(r"perf sampler of \S+ thread %d: \d+ samples?, stack copy (\d+) of "
                      r"(\d+) bytes \((\d+) refits?\)" % target.hot[0], log)
        check("perf: the stack copy fitted to the thread's stack, once",
              m and int(m.group(1)) < int(m.group(2)) // 4 and m.group(3) == "1",
              m.group(0) if m else log[-1500:])
        check("perf: metrics count the samples as perf",
              re.search(r'^cpumond_dumps_total\{watch="hot",capture="perf"\} [1-9]', prom, re.M)
              and re.search(r'^cpumond_dumps_total\{watch="hot",capture="ptrace"\} 0$', prom,
                            re.M), prom[:600])
        p = subprocess.run([os.path.join(build, "cpumond"), "tail", "-d", db, "--json", "-n", "1"],
                           capture_output=True, text=True, timeout=30)
        try:
            o = json.loads(p.stdout.splitlines()[-1])
        except (ValueError, IndexError):
            o = {}
        check("perf: tail --json says capture perf", o.get("capture") == "perf", p.stdout[:300])
        p = subprocess.run([os.path.join(build, "cpumond"), "report", "-d", db, "--json"],
                           capture_output=True, text=True, timeout=30)
        groups = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        check("perf: report --json names the captures of each group",
              groups and all(g.get("captures") == ["perf"] for g in groups), p.stdout[:300])

        ev2, watch2, log2, _, db2, _ = episode(build, tmp, target, "ptrace")
        check("ptrace: an event with a stack", ev2, log2[-2000:])
        if ev2:
            check("ptrace: its capture is \"ptrace\"", ev2[1] == "ptrace", ev2[1])
            # hot_leaf's loop: every sample of either capture is in it, and
            # the hash is of the functions' starts, not of the instruction.
            check("ptrace: the same key stack hash as perf's", ev2[2] == perf_hash,
                  f"ptrace {ev2[2]} {event_symbols(db2, ev2[0])}, perf {perf_hash} {syms}")

        ev3, watch3, log3, _, _, _ = episode(build, tmp, target, "auto")
        check("auto: perf where the kernel permits it", ev3 and ev3[1] == "perf",
              f"{ev3} {log3[-1000:]}")
        check("auto: the thread was never stopped", watch3.reads > 0 and not watch3.bad,
              watch3.bad[:5])
    finally:
        target.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory(prefix="cpumond-capture-") as tmp:
        run([test_perf_and_ptrace], build, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
