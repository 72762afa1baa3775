#!/usr/bin/env python3
"""What names at read time cost `cpumond report`: the same database of
EVENTS events read with the names stored (--stored-names) and with the
frames named again from the debug files (--offline --debug-dir DIR), the
two alternating, RUNS times each; the medians and their ratio.  The same
for `cpumond tail -n EVENTS --json`, which names every event's frames
(report names each distinct stack once).

The database is real: the daemon watches stripped copies of
tests/targets/hotchain and twochains (their debug files split off into a
directory of their own, as a Debian package and its -dbgsym would be) for a
few seconds, then its events are copied, each with its stacks and its key
sample's frames, until there are EVENTS.  The readers name the programs'
frames from the split debug files and the C library's from
/usr/lib/debug (libc6-dbg) when it is there.

    bench/names_bench.py [--build DIR] [--events N] [--runs N]

Prints a Markdown table.  Needs root (or ptrace rights) and objcopy.
"""
import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402


def split_debug(src, tmp, name):
    """A stripped copy of SRC in tmp/bin with its debug file in tmp/dbg."""
    for d in ("bin", "dbg"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    dbg, out = os.path.join(tmp, "dbg", name + ".debug"), os.path.join(tmp, "bin", name)
    subprocess.run(["objcopy", "--only-keep-debug", src, dbg], check=True)
    subprocess.run(["objcopy", "--strip-all", src, out], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={name}.debug", out], check=True,
                   cwd=os.path.dirname(dbg))
    return out


def seed(build, tmp, db):
    """Events of the daemon watching the two stripped programs."""
    hot = split_debug(os.path.join(build, "tests", "hotchain"), tmp, "hotchain")
    two = split_debug(os.path.join(build, "tests", "twochains"), tmp, "twochains")
    procs = [testlib.start_target([hot, "--threads", "2", "--hot", "1", "--timeout", "300"]),
             testlib.start_target([two, "--timeout", "300"])]
    conf = os.path.join(tmp, "seed.conf")
    with open(conf, "w") as f:
        f.write(f"[cpumond]\ninterval = 300ms\nthreshold = 100\ncooldown = 1s\n"
                f"episode_samples = 10\nsample_interval = 20ms\ndatabase = {db}\n"
                f"[watch hot]\npid = {procs[0][1]}\n[watch two]\npid = {procs[1][1]}\n")
    daemon = testlib.Daemon(build, conf, tmp, name="seed")
    try:
        testlib.poll(lambda: (testlib.query(db, "SELECT count(*) FROM events WHERE stack_hash "
                                                "IS NOT NULL") or [[0]])[0][0] >= 20, 120, 0.5)
    finally:
        daemon.stop()
        for p in procs:
            testlib.stop(p[0])


def grow(db, events):
    """Copies the events of DB, with their stacks and frames, up to EVENTS."""
    con = sqlite3.connect(db)
    cols = [r[1] for r in con.execute("PRAGMA table_info(events)") if r[1] != "id"]
    base = [r[0] for r in con.execute("SELECT id FROM events ORDER BY id")]
    n, step = len(base), 0
    with con:
        while n < events:
            step += 1
            for eid in base:
                if n >= events:
                    break
                cur = con.execute(f"INSERT INTO events ({','.join(cols)}) SELECT "
                                  f"{','.join(c if c != 'time' else 'time + ?' for c in cols)} "
                                  "FROM events WHERE id = ?", (step * 1000, eid))
                new = cur.lastrowid
                con.execute("INSERT INTO event_stacks SELECT ?, stack_hash, count FROM event_stacks "
                            "WHERE event_id = ?", (new, eid))
                con.execute("INSERT INTO event_frames SELECT ?, depth, ip, offset, symbol_offset "
                            "FROM event_frames WHERE event_id = ?", (new, eid))
                n += 1
    con.close()
    return n


def timed(argv):
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{argv}: exit {p.returncode}: {p.stderr}")
    return took, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    cpumond = os.path.join(build, "cpumond")
    tmp = tempfile.mkdtemp(prefix="names-bench.")
    try:
        db = os.path.join(tmp, "names.db")
        seed(build, tmp, db)
        n = grow(db, args.events)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}
        os.environ.clear()
        os.environ.update(env)
        dbg = ["--offline", "--debug-dir", os.path.join(tmp, "dbg")]
        report = [cpumond, "report", "-d", db, "--top", "0"]
        tail = [cpumond, "tail", "-d", db, "-n", str(n), "--json"]
        kinds = {
            "report, names as stored (`--stored-names`)": report + ["--stored-names"],
            "report, names read again (`--offline --debug-dir DIR`)": report + dbg,
            "tail --json, names as stored": tail + ["--stored-names"],
            "tail --json, names read again": tail + dbg,
        }
        times = {k: [] for k in kinds}
        outs = {}
        timed(kinds[next(iter(kinds))])        # a warm page cache for both
        for _ in range(args.runs):
            for k, argv in kinds.items():
                took, outs[k] = timed(argv)
                times[k].append(took)
        stacks = testlib.query(db, "SELECT count(*) FROM stacks")[0][0]
        frames = testlib.query(db, "SELECT count(*) FROM event_frames")[0][0]
        print(f"`cpumond report -d DB --top 0` and `cpumond tail -d DB -n {n} --json` over {n:,} "
              f"events ({stacks} distinct stacks, {frames:,} key-sample frames), {args.runs} runs "
              "of each, alternating (wall ms):")
        print()
        print("| command | median | min | max | × stored |")
        print("|---|---|---|---|---|")
        names = list(kinds)
        for i, k in enumerate(names):
            ts, base = times[k], statistics.median(times[names[i - i % 2]])
            med = statistics.median(ts)
            print(f"| {k} | {med * 1000:.1f} | {min(ts) * 1000:.1f} | {max(ts) * 1000:.1f} | "
                  f"{med / base:.2f}× |")
        named = outs[list(kinds)[1]]
        print()
        print("The first frames of the top group, named again: " +
              "; ".join(l.strip() for l in named.splitlines() if l.strip().startswith("#"))[:400])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
