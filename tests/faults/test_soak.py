#!/usr/bin/env python3
"""Fault suite, 7: soak.

60 seconds (30 minutes with FAULTS_LONG=1; SOAK_SECONDS=N for any other
length) of churn: ten tests/targets/churn processes at a time, each living
3-10 s before it is stopped and replaced (some 90 in a minute), each
starting 100 threads a second that live 50-500 ms (1,000 threads a second
in all), plus one faulty target with one hot thread that the daemon dumps
every second.  Checks: no crash, RSS flat (the last sample within 25 % or
4 MiB of the first, taken after a 10 s warm-up), descriptors back to their
count from before the churn once it stops, no warning loop in the log.
"""
import os
import random
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LONG, Daemon, check, main, note, poll, proc_fds, proc_rss_kib, query,
                    sanitized, skip, start_target, stop, write_config)

POOL = 10


def test_soak(build, tmp):
    seconds = int(os.environ.get("SOAK_SECONDS", 1800 if LONG else 60))
    rng = random.Random(23)
    # A name of its own (the comm the watch selects): churn targets of
    # anything else running on the machine stay out of the counts.
    churn = os.path.join(tmp, f"churn{os.getpid()}"[:15])
    shutil.copy(os.path.join(build, "tests", "churn"), churn)
    db = os.path.join(tmp, "soak.db")
    conf = os.path.join(tmp, "soak.conf")
    hot, hpid, _, _ = start_target([os.path.join(build, "tests", "faulty"), "--hot", "1",
                                    "--idle", "3", "--timeout", str(seconds + 120)])
    write_config(conf, db, [("churn", {"comm": os.path.basename(churn)}),
                            ("hot", {"pid": hpid})],
                 interval="200ms", cooldown="1s", episode_samples=5, sample_interval="20ms")
    daemon = Daemon(build, conf, tmp, "soak")
    pool, started, deaths = [], 0, 0
    samples = []
    try:
        poll(lambda: query(db, "SELECT 1 FROM events"), 10)
        fds_before = proc_fds(daemon.pid)
        rss_before = proc_rss_kib(daemon.pid)
        t0 = time.monotonic()
        next_sample = t0 + 10
        while time.monotonic() - t0 < seconds and daemon.alive():
            now = time.monotonic()
            for entry in pool[:]:
                proc, end = entry
                if now >= end or proc.poll() is not None:
                    stop(proc)
                    pool.remove(entry)
                    deaths += 1
            while len(pool) < POOL:
                proc, pid, _, _ = start_target([churn, "--rate", "100", "--life-ms", "50:500",
                                                "--hot", "0", "--timeout", "600"])
                started += 1
                pool.append((proc, now + rng.uniform(3, 10)))
            if now >= next_sample:
                samples.append((round(now - t0), proc_rss_kib(daemon.pid), proc_fds(daemon.pid)))
                next_sample += 10 if seconds <= 300 else 60
            time.sleep(0.2)
        alive = daemon.alive()
        check(f"soak: the daemon ran {seconds} s of churn without dying", alive,
              f"exit {daemon.proc.returncode}: {daemon.log()[-500:]}")
        if not alive:
            return
        samples.append((round(time.monotonic() - t0), proc_rss_kib(daemon.pid),
                        proc_fds(daemon.pid)))
        for proc, _ in pool:
            stop(proc)
        pool = []
        # Let a few cycles forget the dead targets' threads.
        poll(lambda: proc_fds(daemon.pid) <= fds_before, 5)
        fds_after = proc_fds(daemon.pid)
        first, last = samples[0], samples[-1]
        events = query(db, "SELECT count(*), coalesce(sum(samples), 0) FROM events")
        note(f"soak: {seconds} s, {started} churn targets started, {deaths} stopped; "
             f"{events[0][0]} events, {events[0][1]} dumps")
        note(f"soak: RSS KiB before churn {rss_before}, first {first[1]} (t={first[0]} s), "
             f"last {last[1]} (t={last[0]} s); fds before churn {fds_before}, first {first[2]}, "
             f"last {last[2]}, after the churn stopped {fds_after}")
        note("soak: samples (t, RSS KiB, fds): " + " ".join(f"{t}:{r}:{f}" for t, r, f in samples))
        check("soak: at least 50 targets started and stopped", started >= 50 and deaths >= 40,
              f"{started} started, {deaths} stopped")
        if sanitized(build):
            skip("soak: RSS flat", "an ASan build: its quarantine keeps freed memory (up to "
                 "256 MiB), so RSS grows without a leak; LeakSanitizer checks at exit instead")
        else:
            check("soak: RSS flat (last within 25 % or 4 MiB of the first)",
                  last[1] <= max(first[1] * 1.25, first[1] + 4096), f"{first[1]} -> {last[1]} KiB")
        check("soak: descriptors back to their count from before the churn",
              fds_after is not None and fds_after <= fds_before, f"{fds_before} -> {fds_after}")
        check("soak: the hot target was dumped throughout", events and events[0][0] >= seconds // 4,
              events)
        log = daemon.log().splitlines()
        shapes = {}
        for line in log:
            key = re.sub(r"\d+", "N", line)
            shapes[key] = shapes.get(key, 0) + 1
        worst = max(shapes.items(), key=lambda kv: kv[1]) if shapes else ("", 0)
        not_events = [k for k in shapes if "key stack" not in k and "no stack" not in k]
        repeated = {k: n for k, n in shapes.items() if k in not_events and n > 10 + seconds // 30}
        note(f"soak: {len(log)} log lines; most frequent ({worst[1]}x): {worst[0][:160]}")
        check("soak: no warning loop in the log (a non-event line at most once per 30 s)",
              not repeated, list(repeated.items())[:3])
        rc = daemon.stop()
        check("soak: SIGTERM exits 0", rc == 0, f"exit {rc}")
        check("soak: database integrity", query(db, "PRAGMA integrity_check") == [("ok",)], "")
    finally:
        for proc, _ in pool:
            stop(proc)
        daemon.kill()
        stop(hot)


if __name__ == "__main__":
    sys.exit(main([test_soak]))
