#!/usr/bin/env python3
"""Integration test of `cpumond report --pprof FILE`, read by Debian's own
pprof (`go tool pprof`, golang-go).

The real daemon watches tests/targets/hotchain (one hot thread) until two
events have their episodes' samples; then, for the same window (every
event, up to a fixed --until), `report --folded` and `report --pprof` are
compared through `go tool pprof`:
  -raw     every sample's count adds up to the folded total, its cpu time is
           the count times the configuration's sample_interval, and it has
           the labels thread, tid, pid, process, watch, host and kind with
           the values of the events;
  -top     the same functions as the folded stacks, and the same total;
  -traces  the labels printed with each trace, the same total;
two databases (-d A -d B, B a copy labelled as another host) give twice
the samples with both hosts; and a window without events gives a profile
-raw reads, with both sample types and no sample.  The fixture database of
tests/unit/test_report.c (two builds, a frame without a symbol) gives the
folded functions too, each module and build its mapping.  All equalities
hold by construction, whatever the machine's load made the daemon take.

go writes nothing outside a temporary directory (HOME, GOCACHE, GOPATH,
XDG_CONFIG_HOME there; GOFLAGS empty) and uses no network (GOPROXY=off,
GOTOOLCHAIN=local).

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends
with "N passed, N failed, N skipped"; exit status 1 when something failed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import (HOT_THRESHOLD, Daemon, Target, check, poll, ptrace_allowed,  # noqa: E402
                     query, run, skip, summary)
from test_fleet import rewrite_host  # noqa: E402
from test_report import report  # noqa: E402

SAMPLE_INTERVAL_NS = 20 * 1000 * 1000   # the configuration's sample_interval
DEFAULT_INTERVAL_NS = 50 * 1000 * 1000  # report's without a configuration
LABELS = {"thread", "tid", "pid", "process", "watch", "host", "kind"}
UNTIL = "2100-01-01T00:00:00Z"          # the same window for every form


def go_env(tmp):
    home = os.path.join(tmp, "gohome")
    os.makedirs(home, exist_ok=True)
    return {**os.environ, "HOME": home, "GOCACHE": os.path.join(home, "cache"),
            "GOPATH": os.path.join(home, "path"), "XDG_CONFIG_HOME": os.path.join(home, "config"),
            "GOFLAGS": "", "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOTELEMETRY": "off",
            "PPROF_TMPDIR": os.path.join(home, "pprof"), "PPROF_BINARY_PATH": home}


def pprof(tmp, *args):
    """`go tool pprof ARGS`: (exit status, stdout, stderr)."""
    p = subprocess.run(["go", "tool", "pprof", *args], capture_output=True, text=True,
                       timeout=120, env=go_env(tmp))
    return p.returncode, p.stdout, p.stderr


def folded(cpumond, conf, *window):
    """The folded stacks of the window: (total samples, set of functions)."""
    rc, out, err = report(cpumond, "-c", conf, "--folded", *window)
    total, functions = 0, set()
    for line in out.splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        functions.update(stack.split(";"))
    return rc, err, total, functions


def raw_samples(out):
    """The samples of `pprof -raw` output: [(count, cpu ns, {label: value})]."""
    samples, inside = [], False
    for line in out.splitlines():
        if line.startswith("samples/count cpu/nanoseconds"):
            inside = True
            continue
        if line.startswith("Locations"):
            break
        if not inside:
            continue
        m = re.fullmatch(r"\s+(\d+)\s+(\d+): [\d ]+", line)
        if m:
            samples.append((int(m.group(1)), int(m.group(2)), {}))
        elif samples:
            for key, value in re.findall(r"(\w+):\[([^\]]*)\]", line):
                samples[-1][2][key] = value
    return samples


def top_functions(out):
    """The functions of `pprof -top` output and the total it accounts for."""
    total = re.search(r"Showing nodes accounting for (\d+), [\d.]+% of (\d+) total", out)
    names = set()
    for line in out.splitlines():
        m = re.fullmatch(r"\s*\d+\s+[\d.]+%\s+[\d.]+%\s+\d+\s+[\d.]+%\s+(.+)", line)
        if m:
            names.add(m.group(1))
    return (int(total.group(2)) if total else None), names


def test_pprof(build, tmp):
    allowed, why = ptrace_allowed()
    if not allowed:
        skip("pprof", why)
        return
    if not shutil.which("go"):
        skip("pprof", "go is not installed (golang-go, make test-deps)")
        return
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "pprof.db")
    conf = os.path.join(tmp, "pprof.conf")
    target = Target(build, threads=2, hot=1)
    daemon = None
    try:
        if not check("hotchain started", target.pid and len(target.hot) == 1,
                     f"pid {target.pid} hot {target.hot}"):
            return
        with open(conf, "w") as f:
            f.write(f"""[cpumond]
interval = 300ms
threshold = {HOT_THRESHOLD}
cooldown = 1s
sample_interval = {SAMPLE_INTERVAL_NS // 1000000}ms
episode_samples = 10
database = {db}

[watch hot]
pid = {target.pid}
""")
        daemon = Daemon(build, conf, tmp)

        def sampled():
            rows = query(db, "SELECT count(*) FROM events WHERE samples > 0")
            return rows and rows[0][0] >= 2
        if not check("two events with samples", poll(sampled, 60),
                     f"events {query(db, 'SELECT tid, samples, error FROM events')}; "
                     f"{daemon.log()[-500:]}"):
            return
    finally:
        if daemon:
            daemon.stop()
        target.stop()

    rc, err, total, functions = folded(cpumond, conf, "--until", UNTIL)
    if not check("report --folded", rc == 0 and total > 0, f"exit {rc}, {total} samples: {err}"):
        return
    check("the folded stacks have the hot chain",
          {"hot_leaf", "hot_mid", "hot_root", "hot_thread_main"} <= functions, f"{functions}")
    prof = os.path.join(tmp, "cpu.pb.gz")
    rc, out, err = report(cpumond, "-c", conf, "--pprof", prof, "--until", UNTIL)
    if not check("report --pprof writes the file", rc == 0 and os.path.exists(prof) and not out,
                 f"exit {rc}: {err}"):
        return
    with open(prof, "rb") as f:
        check("the profile is gzipped", f.read(2) == b"\x1f\x8b")

    # -raw: counts, cpu time and labels of every sample.
    rc, out, err = pprof(tmp, "-raw", prof)
    samples = raw_samples(out)
    check("pprof -raw reads it", rc == 0 and samples, f"exit {rc}: {err[-500:]}")
    check("-raw: the samples add up to the folded total", sum(s[0] for s in samples) == total,
          f"{sum(s[0] for s in samples)} vs {total}")
    check("-raw: cpu/nanoseconds is samples x sample_interval",
          all(cpu == n * SAMPLE_INTERVAL_NS for n, cpu, _ in samples),
          f"{[(n, cpu) for n, cpu, _ in samples][:5]}")
    check("-raw: every sample has the seven labels", all(set(s[2]) == LABELS for s in samples),
          f"{[sorted(s[2]) for s in samples][:3]}")
    events = query(db, "SELECT DISTINCT pid, tid, thread, comm, watch, host, kind FROM events "
                       "WHERE samples > 0")
    want = {(str(p), str(t), th, c, w, h, k) for p, t, th, c, w, h, k in events}
    got = {tuple(s[2].get(k) for k in ("pid", "tid", "thread", "process", "watch", "host", "kind"))
           for s in samples}
    check("-raw: the labels are the events' pid, tid, thread, process, watch, host, kind",
          got == want and all(g[1] == str(target.hot[0]) and g[4] == "hot" and g[6] == "hot"
                              for g in got), f"{got} vs {want}")

    # -top: the same functions, the same total.
    rc, out, err = pprof(tmp, "-top", "-sample_index=samples", "-nodefraction=0",
                         "-nodecount=100000", prof)
    top_total, names = top_functions(out)
    print("# go tool pprof -top:\n# " + "\n# ".join(out.splitlines()), flush=True)
    check("pprof -top reads it", rc == 0, f"exit {rc}: {err[-500:]}")
    check("-top: the folded total", top_total == total, f"{top_total} vs {total}")
    check("-top: the folded stacks' functions", names == functions,
          f"only in pprof {names - functions}, only folded {functions - names}")

    # -traces: the labels with each trace, the same total.
    rc, out, err = pprof(tmp, "-traces", "-sample_index=samples", prof)
    # A header, then each trace after a "-----------+------" line: its
    # labels ("      host:  vm"), then its count and innermost function.
    blocks = [b for b in re.split(r"^-+\+-+$", out, flags=re.M)[1:] if b.strip()]
    counts = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s{3}\S", out, re.M)]
    check("pprof -traces reads it", rc == 0 and blocks, f"exit {rc}: {err[-500:]}")
    check("-traces: the folded total", sum(counts) == total, f"{sum(counts)} vs {total}")
    check("-traces: every trace has its labels",
          all(all(re.search(rf"^\s+{k}:\s+\S", b, re.M) for k in LABELS) for b in blocks),
          blocks[0] if blocks else out[-500:])

    # Two databases (a copy standing for another host) are one window:
    # twice the samples, each with its host.
    other = os.path.join(tmp, "other.db")
    shutil.copyfile(db, other)
    rewrite_host(other, "other-host")
    both = os.path.join(tmp, "both.pb.gz")
    rc, out, err = report(cpumond, "-d", db, "-d", other, "--pprof", both, "--until", UNTIL)
    samples = raw_samples(pprof(tmp, "-raw", both)[1]) if rc == 0 else []
    hosts = {s[2].get("host") for s in samples}
    check("-d A -d B: both databases' samples, each labelled with its host",
          sum(s[0] for s in samples) == 2 * total and
          hosts == {events[0][5], "other-host"} if events else False,
          f"exit {rc}: {err} {sum(s[0] for s in samples)} samples, hosts {hosts}")
    check("-d without -c: cpu/nanoseconds is samples x 50 ms, the default sample_interval",
          samples and all(cpu == n * DEFAULT_INTERVAL_NS for n, cpu, _ in samples),
          f"{[(n, cpu) for n, cpu, _ in samples][:5]}")

    # An empty window: a valid profile without samples.
    empty = os.path.join(tmp, "empty.pb.gz")
    rc, out, err = report(cpumond, "-c", conf, "--pprof", empty, "--until", "2000-01-01")
    check("report --pprof of an empty window", rc == 0 and os.path.exists(empty), err)
    rc, out, err = pprof(tmp, "-raw", empty)
    check("pprof -raw reads the empty profile: its sample types, no sample",
          rc == 0 and "samples/count cpu/nanoseconds" in out and raw_samples(out) == [],
          f"exit {rc}: {err[-300:]} {out[-300:]}")


def test_fixture(build, tmp):
    """The fixture database of tests/unit/test_report.c: two builds of app,
    libc, and a function without a symbol (spin@0x7a0), 480 samples."""
    helper = os.path.join(build, "tests", "test_report")
    if not shutil.which("go") or not os.path.exists(helper):
        skip("pprof of the fixture", f"no go, or {helper} is not built")
        return
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "fixture.db")
    p = subprocess.run([helper, "--write-fixture", db], capture_output=True, text=True)
    if not check("fixture database written", p.returncode == 0, p.stderr.strip()):
        return
    rc, out, err = report(cpumond, "-d", db, "--folded")
    functions = {f for line in out.splitlines() for f in line.rpartition(" ")[0].split(";")}
    prof = os.path.join(tmp, "fixture.pb.gz")
    rc, _, err = report(cpumond, "-d", db, "--pprof", prof)
    check("fixture: report --pprof", rc == 0, err)
    # Arguments -> exit status and the first line of stderr.
    missing = os.path.join(tmp, "no", "such", "dir.pb.gz")
    for args, want_rc, want_err in [
        (["--pprof", missing], 1, f"cpumond: cannot write {missing}: No such file or directory"),
        (["--pprof", prof, "--folded"], 2,
         "cpumond: report: give one of --json, --folded, --svg and --pprof"),
        (["--pprof", prof, "--svg", "-"], 2,
         "cpumond: report: give one of --json, --folded, --svg and --pprof"),
    ]:
        rc, _, err = report(cpumond, "-d", db, *args)
        check(f"report {' '.join(args).replace(tmp, 'TMP')} -> {want_rc}",
              rc == want_rc and err.splitlines()[:1] == [want_err], f"exit {rc}, stderr {err!r}")
    # The encoding and its gzip are deterministic: "-" writes the file's bytes.
    p = subprocess.run([cpumond, "report", "-d", db, "--pprof", "-"], capture_output=True,
                       timeout=60)
    with open(prof, "rb") as f:
        check("fixture: --pprof - writes the same bytes to stdout",
              p.returncode == 0 and p.stdout == f.read(), f"exit {p.returncode}")
    rc, out, err = pprof(tmp, "-top", "-sample_index=samples", "-nodefraction=0",
                         "-nodecount=100000", prof)
    total, names = top_functions(out)
    check("fixture: -top has the 480 samples", total == 480, f"{total}: {err[-300:]}")
    check("fixture: -top has the folded functions, the unnamed one too",
          names == functions and "spin@0x7a0" in names,
          f"only in pprof {names - functions}, only folded {functions - names}")
    rc, out, err = pprof(tmp, "-raw", prof)
    mappings = out[out.find("Mappings"):]
    check("fixture: one mapping per module and build, with its build-id, symbolized",
          all(re.search(rf"^\d+: 0x0/0x[0-9a-f]+/0x0 {re.escape(path)} {bid} \[FN\]$", mappings, re.M)
              for path, bid in (("/usr/bin/app", "1" * 40), ("/usr/bin/app", "2" * 40),
                                ("/usr/lib/x86_64-linux-gnu/libc.so.6",
                                 "5e7b3d2a9b1f4c6d8e0a1b2c3d4e5f6071829304"))),
          mappings)
    check("fixture: locations at the functions' module offsets",
          re.search(r"^\s+\d+: 0x1100 M=\d+ hot_a\.constprop\.0 ", out, re.M) is not None,
          out[out.find("Locations"):][:400])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="test_pprof.")
    try:
        run([test_fixture, test_pprof], args.build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
