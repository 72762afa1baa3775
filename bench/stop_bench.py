#!/usr/bin/env python3
"""How long one stack dump stops the hot thread, as the target sees it:
cpumond's stackdump next to eu-stack, gdb and the ptrace floor, in one run.

The target is bench/kit/pausemeter.c (its hot thread spins in
clock_gettime and records every gap between two reads over 20 us, with its
CLOCK_MONOTONIC start).  Each dump has a window (CLOCK_MONOTONIC):
INTERRUPT..DETACH for cpumond (bench/stop_bench.c, one dumper dumping the
same thread with a gap, as the daemon does), for cpumond's stop with only
the registers read (stop_bench --registers-only) and for the kit's floor
(bench/kit/unwindbench.c --mode floor: interrupt, waitpid, GETREGS, detach),
exec..exit of the process for eu-stack and gdb.  Seen stop = the largest gap of the hot
thread overlapping the window (0 below 20 us); bystander = the lateness of
pausemeter's 1 ms sleeper overlapping each window, median and max over the
windows (above its baseline it means a tool stopped other threads too).

    bench/stop_bench.py [--build DIR] [--sleepers "10 1000"] [--reps N] ...

The three programs are DIR/bench/stop_bench, pausemeter and unwindbench
(bench/stop_bench.sh or make bench builds them).  Prints a Markdown table.
Needs root (or ptrace rights), gdb and eu-stack (elfutils); a tool that is
missing gets a row saying so.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else float("nan")


def max_overlap(gaps, a, b):
    return max((l for s, l in gaps if s < b and s + l > a), default=0)


class PauseMeter:
    def __init__(self, binary, sleepers, tmp, thresh_us=20):
        self.out = os.path.join(tmp, f"pm{sleepers}.out")
        ready = os.path.join(tmp, f"pm{sleepers}.ready")
        self.proc = subprocess.Popen([binary, "--out", self.out, "--sleepers", str(sleepers),
                                      "--ready", ready, "--timeout", "900",
                                      "--thresh-us", str(thresh_us)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.seq = 0
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if os.path.exists(ready):
                text = open(ready).read()
                if "hot_tid" in text and "bystander_tid" in text:
                    break
            time.sleep(0.02)
        else:
            self.stop()
            raise RuntimeError("pausemeter did not start")
        self.pid = int(re.search(r"^pid (\d+)", text, re.M).group(1))
        self.hot = int(re.search(r"^hot_tid (\d+)", text, re.M).group(1))
        with open(f"/proc/{self.pid}/status") as f:
            self.tasks = int(re.search(r"^Threads:\s+(\d+)", f.read(), re.M).group(1))

    def reset(self):
        os.kill(self.pid, signal.SIGUSR2)
        time.sleep(0.05)

    def gaps(self):
        os.kill(self.pid, signal.SIGUSR1)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                text = open(self.out).read()
                m = re.match(r"seq=(\d+)", text)
                if m and int(m.group(1)) > self.seq:
                    self.seq = int(m.group(1))
                    break
            except OSError:
                pass
            time.sleep(0.005)
        else:
            raise RuntimeError("pausemeter did not answer SIGUSR1")
        gaps = {}
        for line in text.splitlines():
            if line.startswith("gap "):
                _, name, s, l = line.split()
                gaps.setdefault(name, []).append((int(s), int(l)))
        return gaps

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def windows_from(path, tool):
    wins = []
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 4 and f[0] == "win" and f[1] == tool:
                wins.append((int(f[2]), int(f[3])))
    return wins


def own_stop(path, tool):
    """The tracer's own INTERRUPT..DETACH times of TOOL's windows, median / p99."""
    own = [(b - a) / 1e3 for a, b in windows_from(path, tool)]
    return f"{statistics.median(own):.0f} / {pct(own, 99):.0f}" if own else "—"


def external(cmd, reps, pause):
    """Runs CMD REPS times; returns the exec..exit windows and the last output."""
    wins, out = [], ""
    for _ in range(reps):
        t0 = time.monotonic_ns()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        wins.append((t0, time.monotonic_ns()))
        out = r.stdout
        time.sleep(pause)
    return wins, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sleepers", default="10 1000")
    ap.add_argument("--reps", type=int, default=200, help="cpumond and floor dumps")
    ap.add_argument("--gap-ms", type=int, default=20)
    ap.add_argument("--eu-reps", type=int, default=20)
    ap.add_argument("--gdb-reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=10,
                    help="the tools take turns this many times")
    args = ap.parse_args()

    progs = {name: os.path.join(args.build, "bench", name)
             for name in ("stop_bench", "pausemeter", "unwindbench")}
    missing = [p for p in progs.values() if not os.access(p, os.X_OK)]
    if missing:
        print(f"stop_bench.py: no {' '.join(missing)}: build them with "
              f"make B={args.build} {' '.join(missing)} (bench/stop_bench.sh does)", file=sys.stderr)
        return 1
    pausemeter, unwindbench, stop_bench = (progs["pausemeter"], progs["unwindbench"],
                                           progs["stop_bench"])
    tmp = tempfile.mkdtemp(prefix="stop_bench.")

    print("Stop of the hot thread of pausemeter, as the target saw it (µs; 0 = under "
          "pausemeter's 20 µs threshold).  Windows: cpumond, registers only and floor = "
          "INTERRUPT..DETACH; "
          "eu-stack, gdb = exec..exit.  cpumond call = the whole stackdump_thread call "
          "(stop, unwind, names).\n")
    print("| tool | tasks | dumps | seen stop median | p99 | max | over 150 µs "
          "| tracer's own stop median / p99 | bystander lateness median / max "
          "| stack names pm_hot_loop "
          "| cpumond call median / p99 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for s in args.sleepers.split():
            pm = PauseMeter(pausemeter, int(s), tmp)
            try:
                # The tools take turns in ROUNDS rounds, so that a burst of
                # load on the machine falls on all of them alike.
                wf = os.path.join(tmp, f"win{s}")
                ext = {"eu-stack -1 -p TID": (["eu-stack", "-1", "-p", str(pm.hot)], args.eu_reps),
                       "gdb -p TID -batch -ex bt": (["gdb", "-nx", "-p", str(pm.hot), "-batch",
                                                     "-ex", "bt"], args.gdb_reps)}
                ext_wins = {name: [] for name in ext}
                ext_named = {name: False for name in ext}
                errors = []
                pm.reset()
                for rnd in range(args.rounds):
                    n = args.reps // args.rounds
                    # cpumond: the daemon's case, one dumper, many dumps.
                    r = subprocess.run([stop_bench, "--pid", str(pm.pid), "--tid", str(pm.hot),
                                        "--reps", str(n), "--gap-ms", str(args.gap_ms),
                                        "--windows", wf], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, timeout=600)
                    errors += [l for l in r.stdout.splitlines() if l.startswith("stop_bench:")]
                    # cpumond's own way of stopping with nothing but the
                    # registers read: what the stack copy adds to it.
                    subprocess.run([stop_bench, "--pid", str(pm.pid), "--tid", str(pm.hot),
                                    "--reps", str(n), "--gap-ms", str(args.gap_ms),
                                    "--windows", wf, "--registers-only"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
                    # The floor: interrupt, wait, GETREGS, detach.
                    subprocess.run([unwindbench, "--tid", str(pm.hot), "--mode", "floor", "--reps",
                                    str(n), "--gap-ms", str(args.gap_ms), "--windows", wf],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
                    for name, (cmd, reps) in ext.items():
                        k = reps // args.rounds + (1 if rnd < reps % args.rounds else 0)
                        if k and shutil.which(cmd[0]):
                            wins, out = external(cmd, k, 0.05)
                            ext_wins[name] += wins
                            ext_named[name] |= "pm_hot_loop" in out
                g = pm.gaps()
                lines = [l.split() for l in open(wf) if l.startswith("win cpumond")]
                call = [int(l[7]) / 1e3 for l in lines]
                named = sum(int(l[6]) for l in lines)
                rows = [("cpumond stackdump (bench/stop_bench)", windows_from(wf, "cpumond"), g,
                         own_stop(wf, "cpumond"),
                         f"{named}/{len(lines)}",
                         f"{statistics.median(call):.0f} / {pct(call, 99):.0f}" if call else "—"),
                        ("cpumond's stop, registers only (stop_bench --registers-only)",
                         windows_from(wf, "regs"), g, own_stop(wf, "regs"), "—", "—"),
                        ("floor (interrupt, getregs, detach)", windows_from(wf, "floor"), g,
                         own_stop(wf, "floor"), "—", "—")]
                for name, (cmd, _) in ext.items():
                    if not shutil.which(cmd[0]):
                        print(f"| {name} | {pm.tasks} | — | not installed | | | | | | | |")
                        continue
                    rows.append((name, ext_wins[name], g, "—",
                                 "yes" if ext_named[name] else "no", "—"))
                for e in sorted(set(errors)):
                    print(f"<!-- {e} -->")
                for name, wins, g, own, named, call in rows:
                    seen = [max_overlap(g.get("hot-0", []), a, b) / 1e3 for a, b in wins]
                    by = [max_overlap(g.get("bystander", []), a, b) / 1e3 for a, b in wins]
                    if not seen:
                        print(f"| {name} | {pm.tasks} | 0 | — | | | | | | | |")
                        continue
                    print(f"| {name} | {pm.tasks} | {len(seen)} | {statistics.median(seen):.0f} "
                          f"| {pct(seen, 99):.0f} | {max(seen):.0f} "
                          f"| {sum(x > 150 for x in seen) / len(seen):.1%} | {own} | {statistics.median(by):.0f} / {max(by):.0f} | {named} "
                          f"| {call} |",
                          flush=True)
            finally:
                pm.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
