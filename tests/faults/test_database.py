#!/usr/bin/env python3
"""Fault suite, 3 and 4: the database survives.

3. SIGKILL of the daemon at random moments while it writes (10 times; 100
   with FAULTS_LONG=1): PRAGMA integrity_check is ok every time, and every
   event `cpumond tail -f --json` had printed is still there.  A corrupt
   file, a foreign one, or one from a newer schema version at start: a clear
   error, exit 4, and the file untouched (same bytes, no -wal/-shm/-journal
   left beside it).
4. The database on a 2 MiB tmpfs that fills up: the daemon keeps sampling
   (its cycle count in the metrics file grows), logs the failure once (at
   most once a minute), and once the filler is removed writes again,
   including the events from the full period kept in memory.
"""
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LONG, Daemon, check, main, note, poll, query, query_err, read_available,
                    skip, start_target, stop, write_config)


def faulty(build, *args):
    return [os.path.join(build, "tests", "faulty")] + [str(a) for a in args]


def test_kill_while_writing(build, tmp):
    kills = 100 if LONG else 10
    db = os.path.join(tmp, "kill", "cpumond.db")
    conf = os.path.join(tmp, "kill.conf")
    cpumond = os.path.join(build, "cpumond")
    rng = random.Random(3)
    # Two hot threads, an event per thread every cycle: a commit every 100 ms.
    target, pid, _, _ = start_target(faulty(build, "--hot", 2, "--timeout", 3600))
    write_config(conf, db, [("faulty", {"pid": pid})], interval="100ms", cooldown="0",
                 episode_samples=3, sample_interval="10ms")
    bad_integrity, lost, printed_total, tails_empty = [], [], 0, 0
    try:
        for i in range(kills):
            daemon = Daemon(build, conf, tmp, f"kill-{i}")
            if not poll(lambda: query(db, "SELECT count(*) FROM events"), 10):
                check("kill while writing: the daemon writes events", False, daemon.log()[-500:])
                daemon.kill()
                return
            tail = subprocess.Popen([cpumond, "tail", "-f", "--json", "-n", "1000000", "-d", db],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.2, 1.5))
            daemon.kill()
            # What tail printed up to now, and a little after the kill.
            out = read_available(tail.stdout, 1.0)
            stop(tail)
            printed = []
            for line in out.decode("utf-8", "replace").splitlines():
                try:
                    o = json.loads(line)
                    printed.append((o["id"], o["tid"], o.get("stack_hash")))
                except (ValueError, KeyError):
                    pass
            if not printed:
                tails_empty += 1
            printed_total += len(printed)
            rows, err = query_err(db, "PRAGMA integrity_check")
            if rows != [("ok",)]:
                bad_integrity.append((i, rows, err))
            stored = {r[0]: (r[1], r[2]) for r in
                      query(db, "SELECT id, tid, printf('%016x', stack_hash) FROM events")}
            for eid, tid, h in printed:
                if eid not in stored or stored[eid][0] != tid or (h and stored[eid][1] != h):
                    lost.append((i, eid, tid, h, stored.get(eid)))
        n = query(db, "SELECT count(*) FROM events")
        note(f"kill while writing: {kills} SIGKILLs, {n[0][0] if n else '?'} events stored, "
             f"{printed_total} lines printed by tail in all")
        check(f"kill while writing: integrity_check ok after each of {kills} kills",
              not bad_integrity, bad_integrity[:3])
        check("kill while writing: every event tail printed is still there", not lost, lost[:5])
        check("kill while writing: tail printed events", tails_empty < kills, "tail printed nothing")
        # And the daemon starts again on what the kills left.
        p = subprocess.run([cpumond, "-c", conf, "--cycles", "2"], capture_output=True, timeout=30)
        check("kill while writing: the daemon starts again on the database", p.returncode == 0,
              p.stderr[-300:])
    finally:
        stop(target)


def snapshot(path):
    """Bytes and mtime of PATH, and which of its sidecar files exist."""
    with open(path, "rb") as f:
        data = f.read()
    side = [s for s in ("-wal", "-shm", "-journal") if os.path.exists(path + s)]
    return data, os.stat(path).st_mtime_ns, side


def refused(build, tmp, name, path, words):
    conf = os.path.join(tmp, "refuse.conf")
    write_config(conf, path, [("one", {"pid": 1})])
    before = snapshot(path)
    try:
        p = subprocess.run([os.path.join(build, "cpumond"), "-c", conf, "--cycles", "1"],
                           capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        check(f"refuse {name}: exits", False, "hung")
        return
    err = p.stderr.decode("utf-8", "replace")
    first = (err.splitlines() or [""])[0]
    note(f"refuse {name}: {first}")
    check(f"refuse {name}: exit 4", p.returncode == 4, f"exit {p.returncode}: {err[-300:]}")
    check(f"refuse {name}: the error names the file and the cause",
          path in first and any(w in first.lower() for w in words), repr(first))
    after = snapshot(path)
    check(f"refuse {name}: the file is untouched", before == after,
          f"bytes same: {before[0] == after[0]}, mtime same: {before[1] == after[1]}, "
          f"sidecars {before[2]} -> {after[2]}")


def test_refuse_at_start(build, tmp):
    d = os.path.join(tmp, "refuse")
    os.makedirs(d, mode=0o750, exist_ok=True)
    rng = random.Random(5)
    cpumond = os.path.join(build, "cpumond")

    junk = os.path.join(d, "junk.db")
    with open(junk, "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(8192)))
    refused(build, tmp, "a file that is not a database", junk, ["not a", "database", "corrupt"])

    # A real cpumond database, its schema page damaged.
    good = os.path.join(d, "good.db")
    conf = os.path.join(tmp, "good.conf")
    write_config(conf, good, [("one", {"pid": 1})])
    p = subprocess.run([cpumond, "-c", conf, "--cycles", "1"], capture_output=True, timeout=20)
    if p.returncode != 0 or not os.path.exists(good):
        check("refuse: a fresh database to damage", False, p.stderr[-300:])
        return
    con = sqlite3.connect(good)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    data = bytearray(open(good, "rb").read())
    corrupt = os.path.join(d, "corrupt.db")
    page = int.from_bytes(data[16:18], "big") or 65536
    for k in range(100, min(page, len(data))):   # page 1 after the header: the schema
        data[k] = rng.randrange(256)
    with open(corrupt, "wb") as f:
        f.write(data)
    refused(build, tmp, "a corrupt cpumond database", corrupt,
            ["corrupt", "malformed", "not a database", "cannot"])

    newer = os.path.join(d, "newer.db")
    shutil.copyfile(good, newer)
    con = sqlite3.connect(newer)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    refused(build, tmp, "a database of a newer schema version", newer, ["newer", "version"])

    foreign = os.path.join(d, "foreign.db")
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO accounts (name) VALUES ('alice')")
    con.commit()
    con.close()
    refused(build, tmp, "another program's database", foreign,
            ["not a cpumond", "foreign", "other", "unknown", "not cpumond"])


def metrics_cycles(path):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("cpumond_cycle_seconds_count"):
                    return int(float(line.split()[-1]))
    except (OSError, ValueError):
        pass
    return None


def test_full_disk(build, tmp):
    mnt = os.path.join(tmp, "full")
    os.makedirs(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "cpumond-faults", mnt],
                       capture_output=True, text=True)
    if p.returncode != 0:
        skip("full disk", f"cannot mount a tmpfs: {p.stderr.strip()}")
        return
    db = os.path.join(mnt, "cpumond.db")
    conf = os.path.join(tmp, "full.conf")
    metrics = os.path.join(tmp, "full.prom")
    filler = os.path.join(mnt, "filler")
    target, pid, _, _ = start_target(faulty(build, "--hot", 1, "--timeout", 600))
    write_config(conf, db, [("faulty", {"pid": pid})], interval="200ms", cooldown="300ms",
                 episode_samples=5, sample_interval="10ms", metrics_file=metrics)
    daemon = None
    try:
        daemon = Daemon(build, conf, tmp, "full")
        if not poll(lambda: len(query(db, "SELECT id FROM events")) >= 2, 15):
            check("full disk: events before the disk fills", False, daemon.log()[-500:])
            return
        # Fill what is left, then keep filling as SQLite frees pages.
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        for chunk in (65536, 4096, 512):
            try:
                while os.write(fd, b"\0" * chunk) == chunk:
                    pass
            except OSError:
                pass
        os.close(fd)
        t_full = time.time()
        failed = poll(lambda: "cannot" in daemon.log(), 30)
        check("full disk: the failure is logged", failed, daemon.log()[-500:])
        if not failed:
            return
        cycles0 = metrics_cycles(metrics)
        t_fail = time.time()
        time.sleep(6)   # a dozen events' worth, kept in memory
        cycles1 = metrics_cycles(metrics)
        t_free = time.time()
        log_full = [l for l in daemon.log().splitlines() if "cannot" in l]
        check("full disk: the daemon still runs", daemon.alive(), daemon.log()[-300:])
        check("full disk: it keeps sampling", cycles0 is not None and cycles1 is not None
              and cycles1 > cycles0, f"cycles {cycles0} -> {cycles1}")
        check(f"full disk: the failure logged once in {t_free - t_full:.0f} s (at most once a minute)",
              len(log_full) == 1, log_full)
        os.unlink(filler)
        again = poll(lambda: "writing to the database again" in daemon.log(), 10)
        check("full disk: logs that it writes again", again, daemon.log()[-500:])
        during = poll(lambda: query(db, "SELECT count(*) FROM events WHERE time > ? AND time < ?",
                                    (int(t_fail * 1e6), int(t_free * 1e6)))[0][0], 10)
        note(f"full disk: {during} events from the full period stored after the space came back; "
             f"cycles {cycles0} -> {cycles1} while full")
        check("full disk: the events from the full period are stored", during and during > 0,
              query(db, "SELECT id, time FROM events ORDER BY id DESC LIMIT 5"))
        t_back = int(time.time() * 1e6)
        after = poll(lambda: query(db, "SELECT count(*) FROM events WHERE time > ?",
                                   (t_back,))[0][0], 10)
        check("full disk: new events are stored after the space came back", after, "")
        rc = daemon.stop()
        check("full disk: SIGTERM exits 0", rc == 0, f"exit {rc}")
        check("full disk: database integrity", query(db, "PRAGMA integrity_check") == [("ok",)], "")
    finally:
        if daemon:
            daemon.kill()
        stop(target)
        subprocess.run(["umount", "-l", mnt], capture_output=True)


if __name__ == "__main__":
    sys.exit(main([test_kill_while_writing, test_refuse_at_start, test_full_disk]))
