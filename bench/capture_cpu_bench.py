#!/usr/bin/env python3
"""The daemon's own CPU time per stack sample, capture = perf against
capture = ptrace (issue 17, point 2), printed as a markdown table.

For each capture, in turns (ROUNDS of each, alternating, so that the load
of the machine falls on both alike): hotchain with one hot thread, and
build/cpumond on it with episodes of EPISODE_SAMPLES samples every
SAMPLE_INTERVAL (one long episode), max_dumps_per_second 1000.  Once the
episode is under way (the metrics file counts samples), the daemon's CPU
time (the sum of its threads' /proc/PID/task/TID/schedstat run time, ns)
and its samples (cpumond_dumps_total{capture=...}) are read, and again
WINDOW seconds later: CPU per sample is the difference of the one over the
difference of the other.  The same daemon on an idle process over the same
window gives the cost of its cycles alone (the "baseline" row), which the
"over baseline" column takes off.

    python3 bench/capture_cpu_bench.py --build build [--rounds 3] [--window 4]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def samples(prom, capture):
    try:
        with open(prom) as f:
            text = f.read()
    except OSError:
        return 0
    return sum(int(v) for v in re.findall(
        r'^cpumond_dumps_total\{watch="w",capture="%s"\} (\d+)$' % capture, text, re.M))


def start_hotchain(build, hot):
    p = subprocess.Popen([os.path.join(build, "tests", "hotchain"), "--threads", "2", "--hot",
                          str(hot), "--timeout", "600"], stdout=subprocess.PIPE, text=True)
    pid = None
    for line in p.stdout:
        if line.startswith("pid "):
            pid = int(line.split()[1])
        if line.strip() == "ready":
            break
    return p, pid


def poll(fn, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


def one_run(build, tmp, capture, window, args):
    """CPU ns and samples of the daemon over WINDOW s of one episode (or,
    for capture None, of an idle target: no episode)."""
    target, pid = start_hotchain(build, 0 if capture is None else 1)
    prom, db = os.path.join(tmp, "b.prom"), os.path.join(tmp, "b.db")
    for path in (prom, db, db + "-wal", db + "-shm"):
        if os.path.exists(path):
            os.unlink(path)
    conf = os.path.join(tmp, "b.conf")
    with open(conf, "w") as f:
        f.write(f"[cpumond]\ninterval = 500ms\nthreshold = 50\ncooldown = 1h\n"
                f"sample_interval = {args.sample_interval}\nepisode_samples = 1000\n"
                f"max_dumps_per_second = 1000\ncapture = {capture or 'ptrace'}\n"
                f"database = {db}\njournal = no\nmetrics_file = {prom}\n\n[watch w]\npid = {pid}\n")
    daemon = subprocess.Popen([os.path.join(build, "cpumond"), "-c", conf],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if capture is None:
            poll(lambda: os.path.exists(prom), 10)
        elif not poll(lambda: samples(prom, capture) > 0, 30):
            return None
        c0, s0 = cpu_ns(daemon.pid), samples(prom, capture or "ptrace")
        time.sleep(window)
        c1, s1 = cpu_ns(daemon.pid), samples(prom, capture or "ptrace")
        return c1 - c0, s1 - s0
    finally:
        daemon.terminate()
        daemon.wait(10)
        target.terminate()
        target.wait(10)
        target.stdout.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("B", "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--sample-interval", default="10ms")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    runs = {None: [], "perf": [], "ptrace": []}
    with tempfile.TemporaryDirectory(prefix="cpumond-capbench-") as tmp:
        for _ in range(args.rounds):
            for capture in (None, "perf", "ptrace"):
                r = one_run(build, tmp, capture, args.window, args)
                if r:
                    runs[capture].append(r)
    base = [c / args.window for c, _ in runs[None]]   # ns of CPU per s, no episode
    base_ns_s = statistics.median(base) if base else 0.0
    print(f"Daemon CPU per stack sample, sample_interval {args.sample_interval}, "
          f"{args.rounds} rounds of {args.window:g} s each, alternating "
          f"(`python3 bench/capture_cpu_bench.py --build {args.build}`):\n")
    print("| capture | samples/s | daemon CPU per sample (median of rounds) | "
          "over baseline | rounds |")
    print("|---|---|---|---|---|")
    print(f"| baseline (no episode) | 0 | {base_ns_s / 1e3:.0f} µs of CPU per s | | {len(base)} |")
    for capture in ("perf", "ptrace"):
        rs = runs[capture]
        if not rs:
            print(f"| {capture} | - | no episode (not permitted?) | | 0 |")
            continue
        per = statistics.median(c / s for c, s in rs if s)
        over = statistics.median((c - base_ns_s * args.window) / s for c, s in rs if s)
        rate = statistics.median(s / args.window for _, s in rs)
        print(f"| {capture} | {rate:.0f} | {per / 1e3:.1f} µs | {over / 1e3:.1f} µs | {len(rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
