#!/usr/bin/env python3
"""Fault suite, 1: no thread left stopped.

- thousands of standalone `stackdump TID` runs against faulty targets whose
  hot threads live 1-30 ms and exit at random moments;
- the daemon's episodes against hot threads that exit in mid-episode;
- targets SIGKILLed while the daemon dumps them;
- the daemon SIGKILLed while it dumps (CPUMOND_TEST_HOLD_STOP_US holds it
  inside the stop window; skipped with the reason when the stop times in
  the database do not show the hold).
Afterwards every surviving thread runs (not in state t, TracerPid 0) and
the targets finish their work ("done N", exit 0).
"""
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LONG, Daemon, all_threads_run, check, live_tids, main, note, poll,
                    query, skip, start_target, stop, stuck_threads,
                    write_config)

HOLD_US = 20000


def faulty(build, *args):
    return [os.path.join(build, "tests", "faulty")] + [str(a) for a in args]


def wait_done(proc, timeout):
    """True when the target printed "done" and exited 0 within TIMEOUT."""
    end = time.monotonic() + timeout
    try:
        rc = proc.wait(max(0.1, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False, "did not finish in time"
    out = proc.stdout.read() or b""
    return rc == 0 and b"done" in out, f"exit {rc}, output {out[-200:]!r}"


def test_cli_dumps(build, tmp):
    """A tight loop of `stackdump TID` against short-lived hot threads."""
    want = 10000 if LONG else 1000
    stackdump = os.path.join(build, "stackdump")
    rng = random.Random(7)
    dumps = ok = exited = late = other = hung = crashed = targets = 0
    finished = stuck = 0
    stuck_seen = []
    other_errors = set()
    while dumps < want:
        proc, pid, _, _ = start_target(faulty(build, "--hot", 2, "--life-ms", "1:30",
                                              "--total", 600, "--timeout", 120))
        targets += 1
        if not pid:
            check("stackdump loop: target started", False, "no ready line")
            stop(proc)
            return
        while dumps < want and proc.poll() is None:
            tids = [t for t in live_tids(pid) if t != pid]
            if not tids:
                continue
            tid = rng.choice(tids)
            try:
                p = subprocess.run([stackdump, "-n", "32", str(tid)], capture_output=True,
                                   timeout=10, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                hung += 1
                continue
            dumps += 1
            if p.returncode == 0:
                ok += 1
            elif p.returncode == 1:
                err = p.stderr.decode("utf-8", "replace")
                if "exited" in err or "no thread" in err:
                    exited += 1
                elif "did not stop within" in err or "uninterruptible sleep (D)" in err:
                    # Documented (-ETIMEDOUT): on a loaded machine the thread
                    # may not get a CPU within the deadline.  The command then
                    # exits, and the kernel detaches the thread.  Or the
                    # thread was in D (a page fault waiting for the disk on
                    # a busy machine): it is not interrupted at all.
                    late += 1
                    good, bad = all_threads_run(pid, 2)
                    if not good:
                        stuck += 1
                        stuck_seen.append(bad)
                else:
                    other += 1
                    other_errors.add(err.strip()[:120])
            else:
                crashed += 1
                other_errors.add(f"exit {p.returncode}: {p.stderr[-200:]!r}")
            if dumps % 50 == 0:
                bad = stuck_threads(pid)
                if bad:
                    ok_now, bad = all_threads_run(pid, 2)
                    if not ok_now:
                        stuck += 1
                        stuck_seen.append(bad)
        good, why = wait_done(proc, 60)
        finished += good
        if not good:
            check(f"stackdump loop: target {targets} finishes its work", False, why)
            stop(proc)
    note(f"stackdump loop: {dumps} dumps over {targets} targets: {ok} stacks, "
         f"{exited} thread gone, {late} did not stop within 100 ms, {other} other failures, "
         f"{crashed} crashes, {hung} hung")
    check(f"stackdump loop: {dumps} dumps, none hung", hung == 0, f"{hung} hung")
    check("stackdump loop: no crash", crashed == 0, sorted(other_errors)[:5])
    check("stackdump loop: failures are only 'thread exited', 'did not stop in time' or 'in D'",
          other == 0,
          sorted(other_errors)[:5])
    # How many dumps raced a thread's exit depends on the machine's timing:
    # counted in the note above, not asserted.  That a thread gone says so
    # holds by construction: the last target's threads have all been reaped.
    check("stackdump loop: some dumps gave stacks", ok > 0, f"{ok} stacks, {exited} exited")
    p = subprocess.run([stackdump, str(pid)], capture_output=True, timeout=10,
                       stdin=subprocess.DEVNULL)
    check("stackdump loop: a thread that exited is said to have exited",
          p.returncode == 1 and (b"exited" in p.stderr or b"no thread" in p.stderr),
          f"exit {p.returncode}: {p.stderr[-200:]!r}")
    check("stackdump loop: no thread left stopped", stuck == 0, stuck_seen[:3])
    check(f"stackdump loop: all {targets} targets finished their work", finished == targets,
          f"{finished} of {targets}")


def daemon_config(tmp, name, **opts):
    db = os.path.join(tmp, f"{name}.db")
    conf = os.path.join(tmp, f"{name}.conf")
    # The stops are what this suite is about (perf episodes: test_perf.py).
    base = dict(interval="100ms", cooldown="0", episode_samples=20, sample_interval="10ms",
                max_dumps_per_second=1000, capture="ptrace")
    base.update(opts)
    write_config(conf, db, [("faulty", {"comm": "faulty"})], **base)
    return db, conf


def test_daemon_exiting_threads(build, tmp):
    """Episodes whose hot threads exit at random moments."""
    total = 400 if LONG else 40
    db, conf = daemon_config(tmp, "exiting")
    proc, pid, _, _ = start_target(faulty(build, "--hot", 2, "--life-ms", "150:700",
                                          "--total", total, "--timeout", 600))
    daemon = Daemon(build, conf, tmp, "exiting")
    try:
        stuck = []
        end = time.monotonic() + (600 if LONG else 60)
        while proc.poll() is None and time.monotonic() < end:
            bad = stuck_threads(pid)
            if bad:
                good, bad = all_threads_run(pid, 2)
                if not good:
                    stuck.append(bad)
            time.sleep(0.05)
        good, why = wait_done(proc, 5)
        check("daemon episodes: the target finished its work", good, why)
        check("daemon episodes: no thread seen stopped for long", not stuck, stuck[:3])
        check("daemon episodes: the daemon still runs", daemon.alive(), daemon.log()[-500:])
        rc = daemon.stop()
        check("daemon episodes: SIGTERM exits 0", rc == 0, f"exit {rc}")
        rows = query(db, "SELECT count(*), coalesce(sum(samples), 0), "
                         "sum(episode_end LIKE '%exited%') FROM events")
        events, samples, ended = rows[0] if rows else (0, 0, 0)
        note(f"daemon episodes: {events} events, {samples} stack samples, "
             f"{ended} episodes ended by the thread exiting")
        check("daemon episodes: events with samples", events > 0 and samples > 0, rows)
        if ended:
            check("daemon episodes: some episodes saw their thread exit", True)
        else:
            skip("daemon episodes: some episodes saw their thread exit",
                 "no thread exited in mid-episode this run")
        check("daemon episodes: database integrity",
              query(db, "PRAGMA integrity_check") == [("ok",)], "")
    finally:
        daemon.kill()
        stop(proc)


def hold_env():
    env = dict(os.environ)
    env["CPUMOND_TEST_HOLD_STOP_US"] = str(HOLD_US)
    return env


def test_targets_killed(build, tmp):
    """Targets SIGKILLed while the daemon dumps them; a survivor watched at
    the same time keeps running, and the daemon goes on."""
    kills = 100 if LONG else 10
    db, conf = daemon_config(tmp, "victims")
    rng = random.Random(11)
    survivor, spid, shot, _ = start_target(faulty(build, "--hot", 1, "--timeout", 3600))
    daemon = Daemon(build, conf, tmp, "victims", env=hold_env())
    victims_stuck = []
    try:
        for i in range(kills):
            victim, vpid, _, _ = start_target(faulty(build, "--hot", 1, "--idle", 2,
                                                     "--timeout", 600))
            # The first event needs one interval to get a usage, then the
            # episode runs 20 samples 10 ms apart: land anywhere in there.
            time.sleep(rng.uniform(0.15, 0.6))
            victim.kill()
            victim.wait()
            good, bad = all_threads_run(spid, 2)
            if not good:
                victims_stuck.append(bad)
            if not daemon.alive():
                break
        events = query(db, "SELECT count(*) FROM events WHERE pid != ?", (spid,))
        note(f"targets killed: {kills} victims, {events[0][0] if events else 0} of their "
             "events stored")
        check(f"targets killed: the daemon survives {kills} kills of its targets",
              daemon.alive(), daemon.log()[-500:])
        check("targets killed: the survivor's threads all run, untraced", not victims_stuck,
              victims_stuck[:3])
        # The survivor's hot thread still gets CPU.
        def runtime():
            try:
                with open(f"/proc/{spid}/task/{shot[0]}/schedstat") as f:
                    return int(f.read().split()[0])
            except OSError:
                return 0
        r0 = runtime()
        check("targets killed: the survivor's hot thread still runs",
              poll(lambda: runtime() > r0, 3), "no run time growth")
        rc = daemon.stop()
        check("targets killed: SIGTERM exits 0", rc == 0, f"exit {rc}: {daemon.log()[-300:]}")
        check("targets killed: database integrity",
              query(db, "PRAGMA integrity_check") == [("ok",)], "")
        log = daemon.log()
        check("targets killed: no warning loop in the log", len(log.splitlines()) < 50 * kills,
              f"{len(log.splitlines())} lines")
    finally:
        daemon.kill()
        stop(survivor)


def test_daemon_killed(build, tmp):
    """cpumond SIGKILLed in the middle of dumps: the kernel detaches every
    thread it had seized, and the target finishes its work."""
    kills = 100 if LONG else 8
    db, conf = daemon_config(tmp, "killed")
    rng = random.Random(13)
    # Enough work to outlast the kills (about 1 s each): two threads end
    # some 8 burns of 100-400 ms a second between them.
    total = kills * 8 + 10
    proc, pid, _, _ = start_target(faulty(build, "--hot", 2, "--life-ms", "100:400",
                                          "--total", total, "--timeout", 900))
    stuck = []
    hold_checked = None
    try:
        for i in range(kills):
            daemon = Daemon(build, conf, tmp, f"killed-{i}", env=hold_env())
            if i == 0:
                # Wait for the first stored event: the dumps are running.
                poll(lambda: query(db, "SELECT 1 FROM events LIMIT 1"), 15)
            time.sleep(rng.uniform(0.3, 1.2))
            daemon.kill()
            good, bad = all_threads_run(pid, 3)
            if not good:
                stuck.append((i, bad))
            if proc.poll() is not None:
                break
            if hold_checked is None:
                # With the hold every stop lasts HOLD_US: so does each
                # event's median stop.
                rows = query(db, "SELECT min(stop_us) FROM events WHERE samples > 0")
                hold_checked = rows[0][0] if rows and rows[0][0] is not None else 0
        check(f"daemon killed: after {kills} SIGKILLs no thread is stopped or traced",
              not stuck, stuck[:3])
        good, why = wait_done(proc, 120)
        check("daemon killed: the target finished its work", good, why)
        rows = query(db, "PRAGMA integrity_check")
        check("daemon killed: database integrity", rows == [("ok",)], rows)
        # The hold is this build's, not the machine's: a build that ignores
        # it would make every kill land outside the stop, and this test
        # pass without testing what it is for.
        check("daemon killed: kills landed while the hold kept threads stopped",
              hold_checked is not None and hold_checked >= HOLD_US,
              f"CPUMOND_TEST_HOLD_STOP_US={HOLD_US} is not honoured by this build "
              f"(shortest median stop in the database: {hold_checked} µs)")
    finally:
        stop(proc)


def test_sigterm_when_late(build, tmp):
    """Dumps slower than sample_interval (the hold makes each 20 ms, the
    interval is 10 ms) keep an episode always due: SIGTERM must still stop
    the daemon (it used to wait forever: wait_until returned at once when
    late, without taking the pending signal)."""
    db, conf = daemon_config(tmp, "late", episode_samples=1000)
    proc, pid, _, _ = start_target(faulty(build, "--hot", 2, "--timeout", 120))
    daemon = Daemon(build, conf, tmp, "late", env=hold_env())
    try:
        poll(lambda: query(db, "SELECT 1 FROM events LIMIT 1") or
             "key stack" in daemon.log() or "thread" in daemon.log(), 5)
        time.sleep(1)
        rc = daemon.stop(timeout=15)
        check("SIGTERM stops a daemon whose episodes are always due", rc == 0,
              f"exit {rc} (-9: it did not stop within 15 s)")
        good, bad = all_threads_run(pid, 3)
        check("... and leaves no thread stopped", good, bad)
    finally:
        daemon.kill()
        stop(proc)


if __name__ == "__main__":
    sys.exit(main([test_cli_dumps, test_daemon_exiting_threads, test_targets_killed,
                   test_daemon_killed, test_sigterm_when_late]))
