#!/usr/bin/env python3
"""Integration tests of the usage history and `cpumond report --usage`:
the real daemon on tests/targets/hotchain (one thread burning, two idle)
with a 200 ms interval and a history floor of 20‰, then `report --usage`
on its database, over a window that ends before the report runs (--until),
so that the database answers the same questions:

- the hot thread is kept in the history, and listed first; its peak is its
  highest usage in the window, at least its event's usage;
- the idle threads, never over the floor and never in an episode, are not
  listed, by any form;
- --json gives the same threads; the filters keep only theirs;
- --svg FILE is well-formed XML (xml.etree) with one polyline per listed
  thread, a threshold line, and one mark per event in the window;
- a version-4 file (no history tables) is read as it is: no history;
- --usage with a form or filter it does not take is refused.

Where `chromium` is installed, headless Chromium draws the chart into a
PNG (a screenshot); where it is not, the test says so (skip).

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" per check and
ends with "N passed, N failed, N skipped".
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (HOT_THRESHOLD, HistoryRun, check, poll, ptrace_allowed,  # noqa: E402
                     query, run, skip)

SVG = "{http://www.w3.org/2000/svg}"
FLOOR = 20


def report(cpumond, *args):
    """`cpumond report ARGS`: (exit status, stdout, stderr)."""
    p = subprocess.run([cpumond, "report", *args], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, env={**os.environ, "TZ": "UTC"})
    return p.returncode, p.stdout, p.stderr


def table_tids(out):
    """The tids of the table's rows ("hot-0/1234" in the THREAD/TID column)."""
    tids = []
    for line in out.splitlines()[3:]:
        fields = line.split()
        if len(fields) >= 8 and fields[0].isdigit():
            tids.append(int(fields[7].rsplit("/", 1)[1]))
    return tids


class Setup(HistoryRun):
    def __init__(self, build, tmp):
        super().__init__(build, tmp, "usage", threads=3, floor=FLOOR)
        self.tmp = tmp
        self.until = None

    def window(self):
        """--until of every report: a time after the hot thread's event was
        committed, in the past by the time the reports run."""
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.until)) + "Z"

    def usage(self, *args):
        return report(self.cpumond, "--usage", "-d", self.db, "--until", self.window(), *args)


def wait_for_history(s):
    """Rows of the hot thread, and its event (cooldown 1h: its only one)."""
    rows = poll(lambda: query(s.db, "SELECT count(*) FROM history WHERE tid = ? HAVING count(*) >= 5",
                              (s.hot,)), 30, 0.2)
    ev = poll(lambda: query(s.db, "SELECT usage FROM events WHERE tid = ?", (s.hot,)), 30, 0.2)
    ok = bool(check("the daemon keeps the hot thread in the history", rows, s.daemon.log()))
    ok = bool(check("the hot thread made its event", ev, s.daemon.log())) and ok
    # Whole seconds: --until takes them; the next second is past.
    s.until = int(time.time()) + 1
    time.sleep(max(0.0, s.until - time.time()) + 0.3)
    return ok


def test_table(s):
    until_us = s.until * 1000000
    rc, out, err = s.usage()
    print("# report --usage:\n# " + out.replace("\n", "\n# "), flush=True)
    tids = table_tids(out)
    if not check("report --usage lists threads", rc == 0 and tids, (rc, out, err)):
        return
    check("report --usage: the hot thread first", tids[0] == s.hot, f"tids {tids}, hot {s.hot}")
    peak = int(out.splitlines()[3].split()[1])
    best = query(s.db, "SELECT max(h.usage) FROM history AS h JOIN cycles AS c ON c.id = h.cycle"
                       " WHERE h.tid = ? AND c.time < ?", (s.hot, until_us))[0][0]
    ev = query(s.db, "SELECT max(usage) FROM events WHERE tid = ? AND time < ?", (s.hot, until_us))
    check("report --usage: its peak is its highest usage in the window", peak == best,
          f"peak {peak}, history {best}")
    check("report --usage: its peak is at least its event's usage (over the threshold)",
          ev[0][0] is not None and peak >= ev[0][0] > HOT_THRESHOLD, f"peak {peak}, event {ev}")
    check("report --usage: hotchain's idle threads (under the floor) are not listed",
          not set(tids) & set(s.target.idle), f"tids {tids}, idle {s.target.idle}")
    kept_idle = query(s.db, "SELECT count(*) FROM history WHERE tid IN (%s)" %
                      ",".join(str(t) for t in s.target.idle))[0][0]
    check("the history holds no row of the idle threads", kept_idle == 0, kept_idle)
    check("report --usage: the row says process[pid], thread/tid and watch",
          f"hotchain[{s.target.pid}]" in out.splitlines()[3] and
          out.splitlines()[3].split()[-1] == "hot", out.splitlines()[3])


def test_json_and_filters(s):
    rc, out, err = s.usage("--json")
    try:
        objs = [json.loads(line) for line in out.splitlines()]
    except ValueError as e:
        objs = None
        err += f" not JSON: {e}"
    if not check("report --usage --json: one object a line", rc == 0 and objs, (rc, out, err)):
        return
    _, table, _ = s.usage("--top", "0")
    check("report --usage --json: the table's threads, in its order",
          [o["tid"] for o in objs] == table_tids(table), (objs, table))
    hot = objs[0]
    check("report --usage --json: the hot thread's keys",
          hot["tid"] == s.hot and hot["pid"] == s.target.pid and hot["process"] == "hotchain" and
          hot["watch"] == "hot" and hot["threshold"] == HOT_THRESHOLD and
          hot["peak"] >= hot["mean"] > 0 and hot["cycles"] >= 5 and hot["events"] == 1,
          hot)
    name = hot["thread"]
    for args, want in ((["--thread", name], [s.hot]), (["--pid", str(s.target.pid)], [s.hot]),
                       (["--process", "hotchain"], [s.hot]), (["--watch", "hot"], [s.hot]),
                       (["--watch", "nothing"], []), (["--pid", "1"], [])):
        rc, out, err = s.usage(*args)
        got = table_tids(out)
        check(f"report --usage {' '.join(args)}: threads {want}",
              rc == 0 and got[:1] == want[:1] and (want or "no usage history" in out),
              (rc, out, err))


def test_svg(s):
    path = os.path.join(s.tmp, "usage.svg")
    rc, out, err = s.usage("--svg", path)
    if not check("report --usage --svg writes the chart", rc == 0 and os.path.exists(path),
                 (rc, out, err)):
        return
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        check("report --usage --svg: well-formed XML", False, e)
        return
    check("report --usage --svg: well-formed XML, an svg element", root.tag == f"{SVG}svg",
          root.tag)
    _, table, _ = s.usage()
    series = root.findall(f".//{SVG}polyline")
    check("report --usage --svg: one polyline per listed thread",
          len(series) == len(table_tids(table)) >= 1, (len(series), table))
    lines = [e for e in root.iter(f"{SVG}line") if e.get("class") == "threshold"]
    check("report --usage --svg: a threshold line at the threshold's height",
          len(lines) == 1 and lines[0].get("y1") == lines[0].get("y2"), lines)
    marks = [e for e in root.iter(f"{SVG}circle") if e.get("class") == "mark"]
    events = query(s.db, "SELECT count(*) FROM events WHERE time < ?", (s.until * 1000000,))[0][0]
    check("report --usage --svg: one mark per event in the window", len(marks) == events >= 1,
          (len(marks), events))
    titles = [m.find(f"{SVG}title").text for m in marks]
    check("report --usage --svg: a mark's title names its thread",
          any(f"hotchain[{s.target.pid}]" in t and f"/{s.hot} at " in t for t in titles),
          titles)
    allowed, why = ptrace_allowed()
    if allowed:
        check("report --usage --svg: ... and its key stack's innermost frame (hot_leaf)",
              any(t.endswith(": hot_leaf") for t in titles), titles)
    else:
        skip("report --usage --svg: a mark names its key stack's innermost frame", why)
    check("report --usage --svg: self-contained (no script, no outside reference)",
          not list(root.iter(f"{SVG}script")) and "href" not in open(path).read(), path)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        skip("report --usage --svg: a screenshot in headless Chromium", "chromium is not installed")
        return
    png = os.path.join(s.tmp, "usage.png")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={png}", "--window-size=1280,520", path],
                   capture_output=True, timeout=60)
    check("report --usage --svg: headless Chromium draws it", os.path.exists(png), png)


def test_older_file(s):
    """A copy made version 4 (no history tables) has no history to show."""
    old = os.path.join(s.tmp, "v4.db")
    src = sqlite3.connect(f"file:{s.db}?mode=ro", uri=True)
    dst = sqlite3.connect(old)
    src.backup(dst)
    src.close()
    dst.executescript("DROP TABLE history; DROP TABLE labels; DROP TABLE cycles;"
                      " DROP INDEX events_tid; PRAGMA user_version = 4;")
    dst.close()
    rc, out, err = report(s.cpumond, "--usage", "-d", old)
    check("report --usage on a version-4 file: no usage history, exit 0",
          rc == 0 and "no usage history" in out, (rc, out, err))
    rc, out, err = report(s.cpumond, "-d", old)
    check("report on a version-4 file still reads its events", rc == 0 and "rank" in out,
          (rc, out, err))


def test_command_line(s):
    for args in (["--folded"], ["--pprof", "-"], ["--host", "h"], ["--unit", "x"],
                 ["--cgroup", "x"]):
        rc, _, err = report(s.cpumond, "--usage", "-d", s.db, *args)
        check(f"report --usage {' '.join(args)}: exit 2, says why",
              rc == 2 and "--usage takes no --folded, --pprof, --host, --unit or --cgroup" in err,
              (rc, err))


def main():
    def body(s, tmp):
        if wait_for_history(s):
            run([test_table, test_json_and_filters, test_svg, test_older_file,
                 test_command_line], s)
    return Setup.main("usage", body)


if __name__ == "__main__":
    sys.exit(main())
