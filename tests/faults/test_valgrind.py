#!/usr/bin/env python3
"""Fault suite, 8: clean under valgrind.

The daemon runs 30 seconds under `valgrind --leak-check=full
--track-fds=yes` (VALGRIND_SECONDS=N for another length) with a hot target
it dumps in episodes, a second target SIGKILLed in the middle, and a
SIGTERM at the end; then `cpumond tail` and `cpumond report` run under it
on the database.  No valgrind error, nothing definitely lost, and no
descriptor open at exit besides stdin, stdout and stderr.  Blocks still
reachable at exit (libproc2, SQLite) are not errors.

(ASan+UBSan is the other half of section 8: `make check-faults SANITIZE=1`
runs this whole suite on build-sanitize/; this script skips itself there,
valgrind cannot run ASan binaries.)
"""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Daemon, check, main, note, poll, query, sanitized, skip, start_target, stop,
                    write_config)


def valgrind_argv(log):
    return ["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--track-fds=yes",
            "--error-exitcode=99", f"--log-file={log}"]


def verdict(name, log):
    with open(log, errors="replace") as f:
        text = f.read()
    errors = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    lost = re.search(r"definitely lost: ([\d,]+) bytes", text)
    fds = re.search(r"FILE DESCRIPTORS: (\d+) open \((\d+) std\) at exit", text)
    check(f"{name}: no valgrind error", errors and errors.group(1) == "0",
          errors.group(0) if errors else text[-800:])
    check(f"{name}: nothing definitely lost", not lost or lost.group(1) == "0",
          lost.group(0) if lost else "")
    # Each open descriptor: "Open file descriptor N: PATH" (or "Open AF_UNIX
    # socket N: ..."), then where it was opened, or "<inherited from parent>".
    lines = [l.split("== ", 1)[-1].strip() for l in text.splitlines()]
    leaked = []
    for i, l in enumerate(lines):
        if l.startswith("Open ") and not (i + 1 < len(lines) and "inherited" in lines[i + 1]):
            where = " ".join(lines[i:i + 3])
            # libunwind opens one pipe per process, once, to validate
            # addresses (its mem_validate): not per dump, not ours.
            if "pipe" in where and "libunwind" in where:
                continue
            leaked.append(where)
    check(f"{name}: no descriptor of its own open at exit besides stdin, stdout, stderr",
          fds and not leaked, leaked[:3] if fds else "no FILE DESCRIPTORS line")
    summary = [l.split("== ", 1)[-1] for l in text.splitlines()
               if any(k in l for k in ("ERROR SUMMARY", "definitely lost", "still reachable",
                                       "FILE DESCRIPTORS"))]
    note(f"{name}: " + "; ".join(summary))
    if errors and errors.group(1) != "0":
        print(text[-6000:], file=sys.stderr)


def test_valgrind(build, tmp):
    if not shutil.which("valgrind"):
        skip("valgrind", "valgrind is not installed (apt-get install valgrind)")
        return
    if sanitized(build):
        skip("valgrind", f"{build} is an ASan build: valgrind runs on the plain build")
        return
    seconds = int(os.environ.get("VALGRIND_SECONDS", 30))
    faulty = os.path.join(build, "tests", "faulty")
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "vg.db")
    conf = os.path.join(tmp, "vg.conf")
    log = os.path.join(tmp, "vg-daemon.log")
    hot, hpid, _, _ = start_target([faulty, "--hot", "1", "--idle", "2", "--life-ms", "300:900",
                                    "--timeout", str(seconds + 120)])
    victim, vpid, _, _ = start_target([faulty, "--hot", "1", "--timeout", str(seconds + 120)])
    write_config(conf, db, [("faulty", {"comm": "faulty"})], interval="200ms", cooldown="1s",
                 episode_samples=5, sample_interval="20ms")
    daemon = Daemon(build, conf, tmp, "vg", wrap=valgrind_argv(log))
    try:
        got = poll(lambda: query(db, "SELECT 1 FROM events"), 60)
        check("valgrind daemon: events under valgrind", got, daemon.log()[-500:])
        time.sleep(seconds / 2)
        victim.kill()
        victim.wait()
        time.sleep(seconds / 2)
        rows = query(db, "SELECT count(*), coalesce(sum(samples), 0) FROM events")
        note(f"valgrind daemon: {seconds} s, {rows[0][0]} events, {rows[0][1]} dumps")
        rc = daemon.stop(timeout=60)
        check("valgrind daemon: SIGTERM exits 0", rc == 0, f"exit {rc}: {daemon.log()[-500:]}")
        verdict("valgrind daemon", log)
        for name, args in (("tail", ["tail", "-n", "20", "--json"]),
                           ("report", ["report", "--since", "1h"])):
            vlog = os.path.join(tmp, f"vg-{name}.log")
            p = subprocess.run(valgrind_argv(vlog) + [cpumond] + args + ["-d", db],
                               capture_output=True, timeout=120)
            check(f"valgrind {name}: exit 0", p.returncode == 0, p.stderr[-300:])
            verdict(f"valgrind {name}", vlog)
    finally:
        daemon.kill()
        stop(hot)
        stop(victim)


if __name__ == "__main__":
    sys.exit(main([test_valgrind]))
