#!/usr/bin/env python3
"""Integration tests of `cpumond report`: the command line against a real
database.

Without --database: writes the fixture database of tests/unit/report_fixture.h
(`build/tests/test_report --write-fixture DB`: two chains of app in two
builds, 80 % / 20 % of the samples, and one other program), then checks exit
statuses and messages, the ranking under every --by, the JSON lines, the
folded stacks and the SVG flame graph (well-formed XML; every box as wide as
its own samples plus its children's).

With --database DB --chains LEAF_A,LEAF_B (a database written by the daemon
watching tests/targets/twochains): checks that LEAF_A's chain is the key
stack, holds RATIO of the samples within TOLERANCE, and ranks before LEAF_B's
under every --by.  check_chains() does the same for a caller that imports
this file.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends
with "N passed, N failed, N skipped"; exit status 0 only when nothing failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import check, skip, summary  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
JSON_KEYS = {"rank", "by", "group", "events", "key_events", "samples", "share", "first_seen",
             "last_seen", "stacks", "stack", "signature", "process_count", "processes",
             "threads", "thread_names", "entry", "truncated", "frames"}
IGNORE = r"^(start_thread|__clone3?|clone3?|__libc_start_call_main|__libc_start_main.*|_start)$"


def report(cpumond, *args):
    """Runs `cpumond report ARGS`: (exit status, stdout, stderr)."""
    p = subprocess.run([cpumond, "report", *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TZ": "UTC"})
    return p.returncode, p.stdout, p.stderr


def json_groups(cpumond, db, by, *extra):
    rc, out, err = report(cpumond, "-d", db, "--by", by, "--json", *extra)
    if rc != 0:
        return None, f"exit {rc}: {err.strip()}"
    try:
        return [json.loads(line) for line in out.splitlines()], ""
    except ValueError as e:
        return None, f"not JSON lines: {e}"


def group_of(groups, leaf):
    """Rank (0-based) of the first group whose innermost frame is LEAF."""
    for i, g in enumerate(groups):
        frames = g["frames"]
        if frames and re.sub(r"(\.(constprop|isra|part|lto_priv|llvm)\.\d+|\.cold(\.\d+)?)+$", "",
                             frames[0]["name"]) == leaf:
            return i
    return None


def check_chains(cpumond, db, leaf_a, leaf_b, ratio=0.8, tolerance=0.15, prefix="chains"):
    """LEAF_A's chain holds RATIO (± TOLERANCE, relative) of the two chains'
    samples, is the key stack of the events, and ranks before LEAF_B's under
    every --by.  Under --by entry both chains of one thread share their entry
    point: there the group must hold both leaves' samples."""
    for by in ("exact", "signature", "top-frame", "entry"):
        groups, why = json_groups(cpumond, db, by, "--ignore", IGNORE)
        if not check(f"{prefix}: report --by {by} runs", groups is not None, why):
            continue
        a, b = group_of(groups, leaf_a), group_of(groups, leaf_b)
        if by == "entry":
            check(f"{prefix}: --by entry puts {leaf_a} first", a == 0,
                  f"{leaf_a} in group {a}: {[g['group'] for g in groups]}")
            continue
        if not check(f"{prefix}: --by {by} has both chains", a is not None and b is not None,
                     f"groups {[g['group'] for g in groups]}"):
            continue
        check(f"{prefix}: --by {by} ranks {leaf_a} before {leaf_b}", a < b, f"ranks {a}, {b}")
        sa, sb = groups[a]["samples"], groups[b]["samples"]
        share = sa / (sa + sb) if sa + sb else 0
        check(f"{prefix}: --by {by} {leaf_a} share {share:.3f} within {tolerance:.0%} of {ratio}",
              abs(share - ratio) <= ratio * tolerance, f"{sa} vs {sb} samples")
        # An episode cut short (the daemon stopping, the thread exiting)
        # may have one sample, in either chain: 90 %, not all.
        check(f"{prefix}: --by {by} {leaf_a} is the key stack of its events",
              groups[a]["key_events"] >= 0.9 * groups[a]["events"] and
              groups[a]["key_events"] > groups[b]["key_events"],
              f"key events {groups[a]['key_events']} of {groups[a]['events']}, "
              f"{leaf_b} {groups[b]['key_events']}")


def svg_boxes(path):
    """Parses PATH (raises on malformed XML); returns (boxes, problems)."""
    root = ET.parse(path).getroot()
    frames = root.find(f".//{SVG}g[@id='frames']")
    problems, boxes = [], 0
    top = frames.find(f"{SVG}g")
    n0 = int(top.get("data-n"))
    scale = float(top.find(f"{SVG}rect").get("width")) / n0 if n0 else 0

    def walk(g):
        nonlocal boxes
        boxes += 1
        n, s = int(g.get("data-n")), int(g.get("data-s"))
        kids = g.findall(f"{SVG}g")
        w = float(g.find(f"{SVG}rect").get("width"))
        title = g.find(f"{SVG}title").text or ""
        if n != s + sum(int(k.get("data-n")) for k in kids):
            problems.append(f"{title.splitlines()[0]}: n {n} != self {s} + children")
        kids_w = sum(float(k.find(f"{SVG}rect").get("width")) for k in kids)
        if abs(w - (kids_w + s * scale)) > 0.01 * (len(kids) + 1):
            problems.append(f"{title.splitlines()[0]}: width {w} != {kids_w} + {s * scale}")
        if abs(w - n * scale) > 0.002:
            problems.append(f"{title.splitlines()[0]}: width {w} != {n} samples")
        for k in kids:
            walk(k)

    walk(top)
    return boxes, problems


def test_fixture(build, cpumond, tmp):
    db = os.path.join(tmp, "fixture.db")
    helper = os.path.join(build, "tests", "test_report")
    if not os.path.exists(helper):
        skip("fixture", f"{helper} is not built (make {helper})")
        return
    p = subprocess.run([helper, "--write-fixture", db], capture_output=True, text=True)
    if not check("fixture database written", p.returncode == 0, p.stderr.strip()):
        return

    # Arguments -> exit status and the first line of stderr.
    conf = os.path.join(tmp, "c.conf")
    with open(conf, "w") as f:
        f.write(f"[cpumond]\ndatabase = {db}\n\n[report]\nignore = ^worker_main$\n\n"
                "[watch all]\nall = yes\n")
    bad_conf = os.path.join(tmp, "bad.conf")
    with open(bad_conf, "w") as f:
        f.write("[report]\nignore = (\n[watch all]\nall = yes\n")
    table = [
        (["-d", db], 0, ""),
        (["-c", conf, "--by", "signature"], 0, ""),
        (["-d", db, "--since", "2026-11-29T13:04:05Z", "--until", "2026-11-29T13:04:10Z"], 0, ""),
        (["-d", db, "--since", "1h"], 0, ""),
        (["-d", os.path.join(tmp, "missing.db")], 1,
         f"cpumond: database {os.path.join(tmp, 'missing.db')} does not exist"),
        (["-d", db, "--svg", os.path.join(tmp, "no", "such", "dir.svg")], 1,
         f"cpumond: cannot write {os.path.join(tmp, 'no', 'such', 'dir.svg')}: "
         "No such file or directory"),
        (["-d", db, "--since", "yesterday"], 2,
         "cpumond: report: --since: 'yesterday' is not a time (such as 30m, 1h, 2d or "
         "2026-11-29T13:04:05Z)"),
        (["-d", db, "--until", "2026-13-01"], 2, "cpumond: report: --until: '2026-13-01' is not a time"),
        (["-d", db, "--since", "1h", "--until", "2h"], 2,
         "cpumond: report: --since is not before --until"),
        (["-d", db, "--by", "function"], 2,
         "cpumond: report: --by: 'function' is not exact, signature, top-frame or entry"),
        (["-d", db, "--top", "-1"], 2, "cpumond: report: --top: '-1' is not a count"),
        (["-d", db, "--pid", "0"], 2, "cpumond: report: --pid: '0' is not a pid"),
        (["-d", db, "--json", "--folded"], 2,
         "cpumond: report: give one of --json, --folded, --svg and --pprof"),
        (["-d", db, "--ignore", "("], 2, "cpumond: report: --ignore: invalid regex \"(\""),
        # The configuration's limits, on the command line too.
        (["-d", db, "--ignore", "((a{99}){99}){99}"], 2,
         "cpumond: report: --ignore: regex \"((a{99}){99}){99}\" repeats too much"),
        (["-d", db, "--ignore", "a" * 1025], 2, "cpumond: report: --ignore: regex \"aaaa"),
        (["-d", db, "extra"], 2, "cpumond: report: unexpected argument 'extra'"),
        (["-d", db, "--bogus"], 2, ""),
        (["-c", os.path.join(tmp, "missing.conf")], 3,
         f"{os.path.join(tmp, 'missing.conf')}:0: cannot open: no such file or directory"),
        (["-c", bad_conf], 3, f"{bad_conf}:2: ignore: invalid regex \"(\""),
    ]
    for args, want_rc, want_err in table:
        rc, out, err = report(cpumond, *args)
        first = err.splitlines()[0] if err else ""
        check(f"report {' '.join(args)} -> {want_rc}",
              rc == want_rc and first.startswith(want_err) and (want_err or want_rc == 2 or not err),
              f"exit {rc}, stderr {first!r}")

    # The ranking under every --by, through the JSON.
    want = {
        "exact": [240, 120, 60, 30, 30],
        "signature": [360, 90, 30],
        "top-frame": [360, 90, 30],
        "entry": [450, 30],
    }
    for by, samples in want.items():
        groups, why = json_groups(cpumond, db, by, "--ignore", IGNORE)
        if not check(f"--by {by} --json is JSON lines", groups is not None, why):
            continue
        check(f"--by {by} ranks by samples", [g["samples"] for g in groups] == samples,
              f"{[g['samples'] for g in groups]}")
        missing = [JSON_KEYS - set(g) for g in groups if JSON_KEYS - set(g)]
        check(f"--by {by} JSON has every key", not missing, f"missing {missing}")
        check(f"--by {by} shares sum to 1", abs(sum(g["share"] for g in groups) - 1) < 1e-4,
              f"{[g['share'] for g in groups]}")
    groups, _ = json_groups(cpumond, db, "top-frame", "--ignore", IGNORE)
    if groups:
        check("--by top-frame names the functions",
              [g["group"] for g in groups] == ["hot_a", "hot_b", "spin@0x7a0"],
              f"{[g['group'] for g in groups]}")
        check("frames are innermost first",
              [f["name"] for f in groups[0]["frames"]][:2] == ["hot_a.constprop.0", "chain_a2"],
              f"{[f['name'] for f in groups[0]['frames']]}")
    check_chains(cpumond, db, "hot_a", "hot_b", 0.8, 0.15, prefix="fixture chains")

    # The C runtime's start frames are always ignored; [report] ignore adds
    # to them, and --ignore replaces [report] ignore.
    entries = lambda out: [json.loads(line)["group"] for line in out.splitlines()]  # noqa: E731
    rc, out, _ = report(cpumond, "-d", db, "--by", "entry", "--json")
    check("--by entry without a regex names the program's entries",
          rc == 0 and entries(out) == ["worker_main", "main"], out[:200] or "no output")
    rc, out, _ = report(cpumond, "-c", conf, "--by", "entry", "--json")
    check("-c takes [report] ignore, added to the C runtime's frames",
          rc == 0 and entries(out) == ["chain_a1", "chain_b1", "main"], out[:200] or "no output")
    rc, out, _ = report(cpumond, "-c", conf, "--by", "entry", "--json", "--ignore", "^$")
    check("--ignore replaces [report] ignore",
          rc == 0 and entries(out) == ["worker_main", "main"], out[:200] or "no output")

    # Filters.
    groups, why = json_groups(cpumond, db, "top-frame", "--pid", "200")
    check("--pid filters", groups is not None and [g["samples"] for g in groups] == [120, 30],
          why or f"{groups and [g['samples'] for g in groups]}")
    groups, why = json_groups(cpumond, db, "top-frame", "--watch", "other")
    check("--watch filters", groups is not None and [g["group"] for g in groups] == ["spin@0x7a0"],
          why)
    groups, why = json_groups(cpumond, db, "top-frame", "--process", "app", "--thread", "worker-2")
    check("--process and --thread filter",
          groups is not None and [g["samples"] for g in groups] == [120, 30], why)

    # The table.
    rc, out, _ = report(cpumond, "-d", db, "--top", "1")
    check("table: summary line",
          out.startswith("17 events from 2026-11-29 13:04:05 to 2026-11-29 13:04:21 +0000: "
                         "480 stack samples, 5 distinct stacks, 5 groups by exact\n"), out[:200])
    check("table: --top 1", "4 more groups (--top 0 shows them all)" in out, out[-200:])

    # Folded stacks.
    rc, out, _ = report(cpumond, "-d", db, "--folded")
    lines = out.splitlines()
    good = all(re.fullmatch(r"[^ ;]+(;[^ ;]+)* \d+", line) for line in lines)
    check("--folded: frame;frame count lines", rc == 0 and good and len(lines) == 5, out)
    check("--folded: every sample", sum(int(line.rsplit(" ", 1)[1]) for line in lines) == 480, out)
    check("--folded: outermost frame first",
          "__clone3;start_thread;worker_main;chain_a1;chain_a2;hot_a.constprop.0 240" in lines, out)

    # The flame graph.
    svg = os.path.join(tmp, "fg.svg")
    rc, out, err = report(cpumond, "-d", db, "--svg", svg)
    if check("--svg writes the file", rc == 0 and os.path.exists(svg), err):
        try:
            boxes, problems = svg_boxes(svg)
            check("--svg: well-formed XML", True)
            check("--svg: 18 boxes", boxes == 18, f"{boxes}")
            check("--svg: each box's width is its children's plus its own samples",
                  not problems, "; ".join(problems[:5]))
        except ET.ParseError as e:
            check("--svg: well-formed XML", False, str(e))
    rc, out, _ = report(cpumond, "-d", db, "--svg", "-", "--since", "2030-01-01")
    try:
        ET.fromstring(out)
        check("--svg - with no samples: well-formed XML on stdout",
              rc == 0 and "no samples in the window" in out)
    except ET.ParseError as e:
        check("--svg - with no samples: well-formed XML on stdout", False, str(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--database", help="a database of a twochains run")
    ap.add_argument("--chains", default="chain_a_leaf,chain_b_leaf",
                    help="the leaf functions of the 80 %% and the 20 %% chain")
    ap.add_argument("--ratio", type=float, default=0.8)
    ap.add_argument("--tolerance", type=float, default=0.15)
    args = ap.parse_args()
    cpumond = os.path.join(args.build, "cpumond")
    if not os.path.exists(cpumond):
        skip("report", f"{cpumond} is not built")
    elif args.database:
        a, b = args.chains.split(",")
        check_chains(cpumond, args.database, a, b, args.ratio, args.tolerance)
    else:
        tmp = tempfile.mkdtemp(prefix="test_report.")
        try:
            test_fixture(args.build, cpumond, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
