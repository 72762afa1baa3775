#!/usr/bin/env python3
"""Fault suite, 5: hostile names in the output.

A watched process whose comm holds spaces, parentheses, a newline and an
escape sequence (prctl PR_SET_NAME), whose threads are named with terminal
escape sequences (pthread_setname_np), whose cmdline is not UTF-8 (the
watch selects it by a cmdline regex), and whose executable lives under a
path with a newline, an ESC and a byte that is not UTF-8.  `cpumond tail`,
`tail --json`, `report`, `report --json`, `report --folded` and
`report --usage` (the usage history's table) must print no ESC byte and no
raw newline inside a record, their JSON must parse and give the names
back, and the SVG of `report --svg` and `report --usage --svg` must be
well-formed XML.

(The libFuzzer targets of section 5 are tests/fuzz/fuzz_config.c and
tests/fuzz/fuzz_parsers.c, run by `make fuzz`.)
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Daemon, check, main, note, poll, query, start_target, stop, write_config

COMM = b"x (y) \nQZ\x1b[2J"          # 13 bytes: the kernel keeps 15
THREAD = b"\x1b]0;pwn\x07\x1b[31mT"   # 14 bytes
ARGS = [b"marker-hostile", b"\xff\xfe\x80", b"caf\xe9"]
DIRNAME = b"odd\nQZ \x1b[1m(dir) \xff"


def records_ok(name, out, header_re):
    """Every line of a human-readable output: no ESC, no line that starts
    with what follows the newline in the comm."""
    check(f"{name}: no ESC byte", b"\x1b" not in out, out[:300])
    lines = out.split(b"\n")
    stray = [l for l in lines if l.startswith(b"QZ") or l.startswith(b"[2J")]
    check(f"{name}: no raw newline inside a record", not stray, stray[:3])
    if header_re is not None:
        bad = [l for l in lines if l and not l.startswith(b" ") and not re.match(header_re, l)]
        check(f"{name}: every line is a header or an indented line", not bad, bad[:3])


def json_lines(name, out):
    objs, bad = [], []
    check(f"{name}: no ESC byte", b"\x1b" not in out, out[:300])
    for line in out.split(b"\n"):
        if not line:
            continue
        try:
            objs.append(json.loads(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as e:
            bad.append((str(e), line[:200]))
    check(f"{name}: every line parses as JSON (UTF-8)", objs and not bad, bad[:3] or "no lines")
    return objs


def svg_ok(name, data):
    """An SVG file's bytes: no ESC, well-formed XML."""
    check(f"{name}: no ESC byte", b"\x1b" not in data, "")
    try:
        import xml.dom.minidom
        xml.dom.minidom.parseString(data)
        check(f"{name}: well-formed XML", True)
    except Exception as e:
        check(f"{name}: well-formed XML", False, str(e))


def test_hostile_names(build, tmp):
    cpumond = os.path.join(build, "cpumond")
    odd = os.path.join(tmp.encode(), DIRNAME)
    os.makedirs(odd)
    exe = os.path.join(odd, b"faulty")
    shutil.copy(os.path.join(build, "tests", "faulty").encode(), exe)
    target, pid, hot, _ = start_target([exe, b"--hot", b"1", b"--comm", COMM, b"--thread-name",
                                        THREAD, b"--timeout", b"120"] + ARGS)
    db = os.path.join(tmp, "hostile.db")
    conf = os.path.join(tmp, "hostile.conf")
    daemon = None
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            comm = f.read().rstrip(b"\n")
        check("the target renamed itself", comm == COMM, comm)
        write_config(conf, db, [("hostile", {"cmdline": "marker-hostile"})],
                     episode_samples=3, sample_interval="10ms", history_floor=0)
        daemon = Daemon(build, conf, tmp, "hostile")
        rows = poll(lambda: query(db, "SELECT comm, thread, exe, stack_hash FROM events"), 15)
        check("an event for the hostile target (selected by a non-UTF-8 cmdline)", rows,
              daemon.log()[-500:])
        if not rows:
            return
        check("the daemon's own log has no ESC byte", "\x1b" not in daemon.log(), "")
        daemon.stop()

        def run(*args):
            p = subprocess.run([cpumond] + list(args) + ["-d", db], capture_output=True,
                               timeout=30)
            check(f"{' '.join(args)}: exit 0", p.returncode == 0, p.stderr[-300:])
            return p.stdout

        out = run("tail", "-n", "100")
        records_ok("tail", out, rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")
        check("tail shows the comm escaped (or as libproc2's '.')",
              b"x (y) \\x0aQZ\\x1b[2J" in out or b"x (y) .QZ.[2J" in out, out[:300])
        check("tail shows the thread name escaped", b'"\\x1b]0;pwn\\x07\\x1b[31mT"' in out,
              out[:300])
        objs = json_lines("tail --json", run("tail", "-n", "100", "--json"))
        if objs:
            o = objs[0]
            # The comm comes from libproc2 for a cmdline watch, which shows
            # control bytes as '.'; a pid watch reads /proc/PID/stat itself.
            sanitized = re.sub(rb"[\x00-\x1f\x7f]", b".", COMM).decode()
            check("tail --json gives the comm back (raw, or with libproc2's '.' for controls)",
                  o.get("comm") in (COMM.decode(), sanitized), repr(o.get("comm")))
            if o.get("comm") == sanitized:
                note(f"comm stored as libproc2 shows it: {sanitized!r}")
            check("tail --json gives the thread name back", o.get("thread") == THREAD.decode(),
                  repr(o.get("thread")))
            want_exe = exe.decode("latin-1")   # ASCII, and 0xff as U+00FF
            check("tail --json gives the exe path back, bytes as code points",
                  o.get("exe") == want_exe, f"{o.get('exe')!r} want {want_exe!r}")
        out = run("report")
        records_ok("report", out, None)
        json_lines("report --json", run("report", "--json"))
        out = run("report", "--folded")
        records_ok("report --folded", out, None)
        bad = [l for l in out.split(b"\n") if l and not re.match(rb"^.* \d+$", l)]
        check("report --folded: one 'stack count' per line", not bad, bad[:3])
        svg = os.path.join(tmp, "hostile.svg")
        run("report", "--svg", svg)
        with open(svg, "rb") as f:
            data = f.read()
        svg_ok("report --svg", data)
        out = run("report", "--usage")
        records_ok("report --usage", out, None)
        objs = json_lines("report --usage --json", run("report", "--usage", "--json"))
        check("report --usage --json gives the thread name back",
              any(o.get("thread") == THREAD.decode() for o in objs or []),
              [o.get("thread") for o in objs or []])
        run("report", "--usage", "--svg", svg)
        with open(svg, "rb") as f:
            svg_ok("report --usage --svg", f.read())
    finally:
        if daemon:
            daemon.kill()
        stop(target)


if __name__ == "__main__":
    sys.exit(main([test_hostile_names]))
