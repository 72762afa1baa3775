#!/usr/bin/env python3
"""Integration tests of `cpumond top`: the real daemon on
tests/targets/hotchain (one thread burning in hot_leaf <- hot_mid <-
hot_root) with a short interval and a low history floor, then `top` on its
database: as plain lines (--once, and stdout a pipe), and in a real
terminal, tmux on a private socket: the hot thread on the screen, the keys
d, u and w, and the terminal given back as it was after q, Ctrl-C, SIGTERM
and SIGHUP (`stty -g` before and after, `stty -a` saying icanon and echo).

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" per check and
ends with "N passed, N failed, N skipped".
"""
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (HOT_THRESHOLD, HistoryRun, check, poll, ptrace_allowed,  # noqa: E402
                     query, run, skip)

TMUX = shutil.which("tmux")


def top(cpumond, *args, timeout=30):
    """`cpumond top ARGS` with stdout a pipe: (exit status, stdout, stderr)."""
    p = subprocess.run([cpumond, "top", *args], capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    """The thread rows of a table (after the header and the column heads)."""
    return out.splitlines()[2:]


class Setup(HistoryRun):
    """hotchain (2 threads, 1 hot) watched by the daemon at a 200 ms
    interval, every thread over 20‰ kept in the history."""

    def __init__(self, build, tmp):
        super().__init__(build, tmp, "top", threads=2, floor=20)

    def first_row_is_hot(self):
        """`top --once` once its first row is the hot thread's, else None."""
        rc, out, _ = top(self.cpumond, "-d", self.db, "--once")
        r = rows(out)
        return out if rc == 0 and r and f"/{self.hot} " in r[0] else None


def test_once(s):
    """`top --once`: the hot thread's row first, with its tid, as plain
    lines; its last event's innermost named function once it has one."""
    out = poll(s.first_row_is_hot, 30, 0.2)
    if not check("top --once: the hot thread's row comes first", out,
                 f"no row of tid {s.hot} first: {top(s.cpumond, '-d', s.db, '--once')}"
                 f"\n{s.daemon.log()}"):
        return
    print("# top --once:\n# " + out.replace("\n", "\n# "), flush=True)
    lines = out.splitlines()
    check("top --once: a header, the column heads, one line a thread",
          lines[0].startswith("cpumond top  ") and "by usage  watch all" in lines[0] and
          "USAGE‰▼" in lines[1] and "THREAD/TID" in lines[1], lines[:2])
    check("top --once: no escape code (plain lines)", "\033" not in out, repr(out))
    hot_row = rows(out)[0].split()
    check("top --once: the hot row says its process, usage over the threshold, the watch",
          hot_row[0].startswith("!") and int(hot_row[1]) > HOT_THRESHOLD and
          f"hotchain[{s.target.pid}]" in hot_row and "hot" in hot_row, hot_row)

    rc, out, err = top(s.cpumond, "-d", s.db, "-n", "1")
    check("top with stdout a pipe prints one table and ends; -n 1 one row",
          rc == 0 and len(rows(out)) == 1 and "1 of " in out.splitlines()[0], (rc, out, err))
    rc, out, err = top(s.cpumond, "-d", s.db, "--once", "--watch", "nothing")
    check("top --watch with no thread of it: the header, no row",
          rc == 0 and "0 of 0 threads" in out and "watch nothing" in out and not rows(out),
          (rc, out, err))

    allowed, why = ptrace_allowed()
    if not allowed:
        skip("top --once: the hot row names its last event's function", why)
        return

    def named():
        out = s.first_row_is_hot()
        return out if out and rows(out)[0].rstrip().endswith(" hot_leaf") else None
    poll(lambda: query(s.db, "SELECT 1 FROM events WHERE tid = ?", (s.hot,)), 30, 0.2)
    out = poll(named, 10, 0.2)
    check("top --once: the hot row names its last event's innermost function (hot_leaf)",
          out, top(s.cpumond, "-d", s.db, "--once"))


def test_command_line(s):
    """Exit statuses and messages of a wrong command line and a missing
    database."""
    cases = [
        (["-d", "/nonexistent/top.db", "--once"], 1, "does not exist"),
        (["-c", "/x", "-d", "/y"], 2, "cpumond: top: give -c or -d, not both"),
        (["-n", "x"], 2, "cpumond: top: -n: 'x' is not a count"),
        (["extra"], 2, "cpumond: top: unexpected argument 'extra'"),
    ]
    for args, status, message in cases:
        rc, _, err = top(s.cpumond, *args)
        check(f"top {' '.join(args)}: exit {status}, says why",
              rc == status and message in err, (rc, err))


class Tmux:
    """A tmux server of its own (a private socket NAME, no configuration
    file): one a test, since a server killed may still be going when the
    next test starts one.  A session of its own keeps it up between the
    test's sessions: a server whose last session ended exits, and a
    session started then fails ("server exited unexpectedly")."""

    def __init__(self, tmp, name):
        self.base = [TMUX, "-u", "-L", f"cpumond-top-{os.getpid()}-{name}", "-f", "/dev/null"]
        self.tmp = tmp
        self("new-session", "-d", "-s", "keep", "cat")

    def __call__(self, *args):
        return subprocess.run(self.base + list(args), capture_output=True, text=True, timeout=10)

    def screen(self, session):
        return self("capture-pane", "-p", "-t", session).stdout

    def kill(self):
        self("kill-server")


def child_of(pid):
    """The pid of a child process of PID (top under its sh), or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            return int(entry)
    return None


def run_in_terminal(s, tmux, name, end):
    """Runs top in tmux session NAME (120x30) under sh, which saves the
    terminal's modes before and after; END(session, top's pid) ends it.
    Returns ({before, after: stty -g; all: stty -a after; rc: top's exit
    status; screen: the pane after}, the screen top showed) or (None, why)."""
    files = {k: os.path.join(tmux.tmp, f"{name}.{k}") for k in ("before", "after", "all", "rc")}
    go, done = (os.path.join(tmux.tmp, f"{name}.{k}") for k in ("go", "done"))
    # sh ignores SIGINT so that Ctrl-C reaches top only (top takes it
    # back: a handler replaces an ignored disposition) and sh goes on.
    # top starts once the shell's line is on the screen (tmux may not
    # have drawn what came before the pane was ready): that line must be
    # there again after top, which drew on the alternate screen.  The
    # shell stays until the screen is read (tmux 3.3 blanks a dead pane).
    script = (f"trap '' INT; echo before-top; stty -g > {files['before']}; "
              f"while [ ! -e {go} ]; do sleep 0.05; done; "
              f"{shlex.quote(s.cpumond)} top -d {shlex.quote(s.db)}; echo $? > {files['rc']}; "
              f"stty -g > {files['after']}; stty -a > {files['all']}; "
              f"while [ ! -e {done} ]; do sleep 0.05; done")
    r = tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "30", "sh", "-c", script)
    if r.returncode != 0:
        return None, f"tmux new-session: {r.stderr}"
    if not poll(lambda: "before-top" in tmux.screen(name), 15, 0.05):
        return None, f"the shell's line never showed: {tmux.screen(name)!r}"
    open(go, "w").close()
    screen = poll(lambda: (lambda t: t if f"/{s.hot} " in t else None)(tmux.screen(name)), 30,
                  0.2)
    if not screen:
        return None, f"the hot tid {s.hot} never showed: {tmux.screen(name)!r}"
    pane = int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").stdout)
    end(name, child_of(pane))
    if not poll(lambda: os.path.exists(files["all"]) and os.path.getsize(files["all"]) > 0, 15,
                0.1):
        return None, f"top did not end: {tmux.screen(name)!r}"
    got = {"screen": tmux.screen(name)}
    open(done, "w").close()
    for k, path in files.items():
        with open(path) as f:
            got[k] = f.read().strip()
    return got, screen


def test_terminal(s, tmp):
    """In a real terminal: the hot thread on the screen, d sorts by run
    delay, u by usage again, w filters by watch, q quits, and the terminal
    is as it was."""
    if not TMUX:
        skip("top in a terminal", "tmux is not installed")
        return
    tmux = Tmux(tmp, "terminal")
    try:
        def keys(name, pid):
            for key, want in (("d", "by run delay"), ("u", "by usage"), ("w", "watch hot")):
                tmux("send-keys", "-t", name, key)
                screen = poll(lambda: (lambda t: t if want in t.splitlines()[0] else None)(
                    tmux.screen(name)), 10, 0.1)
                check(f"top in a terminal: key {key} shows '{want}' in the header", screen,
                      tmux.screen(name))
                if key == "d":
                    check("top in a terminal: d marks the run delay column",
                          screen and "DELAY‰▼" in screen.splitlines()[1], screen)
            tmux("send-keys", "-t", name, "q")

        got, screen = run_in_terminal(s, tmux, "keys", keys)
        if not check("top in a terminal shows the hot thread", got, screen):
            return
        first = screen.splitlines()
        check("top in a terminal: the header and the hot row first",
              first[0].startswith("cpumond top  ") and f"/{s.hot} " in first[2], screen)
        check("top in a terminal: the bar in block characters", "█" in first[2], first[2])
        check_restored("q", got)

        for how, end in (
            ("Ctrl-C", lambda name, pid: tmux("send-keys", "-t", name, "C-c")),
            ("SIGTERM", lambda name, pid: os.kill(pid, signal.SIGTERM)),
            ("SIGHUP", lambda name, pid: os.kill(pid, signal.SIGHUP)),
        ):
            got, screen = run_in_terminal(s, tmux, how.lower().replace("-", ""), end)
            if check(f"top in a terminal ends on {how}", got, screen):
                check_restored(how, got)
    finally:
        tmux.kill()


def pane_modes(tmux, name):
    """The words of `stty -a` of session NAME's terminal, read from outside."""
    tty = tmux("display-message", "-p", "-t", name, "#{pane_tty}").stdout.strip()
    p = subprocess.run(["stty", "-a", "-F", tty], capture_output=True, text=True, timeout=10)
    return p.stdout.split()


def process_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


def test_suspend(s, tmp):
    """Ctrl-Z under a shell with job control gives the terminal back while
    top is stopped; fg takes it again (raw, the view drawn) and q still
    quits."""
    bash = shutil.which("bash")
    if not TMUX or not bash:
        skip("top on Ctrl-Z", "tmux or bash is not installed")
        return
    tmux = Tmux(tmp, "suspend")
    # Job control (set -m): top runs in a process group of its own, which
    # a stop signal stops (the kernel ignores it in an orphaned group, a
    # pane's own process: there top just goes on); once it stopped, bash
    # reads a line, then continues it in the foreground.
    script = f"set -m; {shlex.quote(s.cpumond)} top -d {shlex.quote(s.db)}; read line; fg"
    try:
        tmux("new-session", "-d", "-s", "susp", "-x", "120", "-y", "30", bash, "-c", script)
        if not check("top on Ctrl-Z: the view is up",
                     poll(lambda: f"/{s.hot} " in tmux.screen("susp"), 30, 0.1),
                     tmux.screen("susp")):
            return
        pid = child_of(int(tmux("display-message", "-p", "-t", "susp", "#{pane_pid}").stdout))
        raw = pane_modes(tmux, "susp")
        check("top on Ctrl-Z: raw mode while it runs", "-icanon" in raw and "-echo" in raw, raw)
        tmux("send-keys", "-t", "susp", "C-z")
        stopped = poll(lambda: process_state(pid) == "T", 10, 0.05)
        modes = pane_modes(tmux, "susp")
        check("top on Ctrl-Z: stopped, the terminal's modes given back",
              stopped and "icanon" in modes and "echo" in modes,
              (process_state(pid), [m for m in modes if m.endswith(("icanon", "echo"))]))
        tmux("send-keys", "-t", "susp", "Enter")
        again = poll(lambda: "-icanon" in pane_modes(tmux, "susp"), 10, 0.05)
        check("top after fg: raw again, the view drawn", again and
              poll(lambda: f"/{s.hot} " in tmux.screen("susp"), 10, 0.1), tmux.screen("susp"))
        tmux("send-keys", "-t", "susp", "q")
        check("top on Ctrl-Z: q still quits",
              poll(lambda: process_state(pid) in (None, "Z"), 10, 0.05), process_state(pid))
    finally:
        tmux.kill()


def test_waits(s, tmp):
    """In a terminal, a database that is not there yet is waited for: the
    screen says so, and the cycles show once it comes."""
    if not TMUX:
        skip("top waits for its database", "tmux is not installed")
        return
    tmux, later = Tmux(tmp, "waits"), os.path.join(tmp, "later.db")
    try:
        tmux("new-session", "-d", "-s", "waits", "-x", "120", "-y", "30",
             f"{shlex.quote(s.cpumond)} top -d {shlex.quote(later)}")
        screen = poll(lambda: (lambda t: t if "does not exist" in t else None)(
            tmux.screen("waits")), 15, 0.1)
        check("top waits for a database that does not exist, saying so",
              screen and screen.startswith(f"cpumond top  database {later} does not exist"),
              tmux.screen("waits"))
        # A copy of the daemon's, consistent (SQLite's backup), as a file
        # that appears.
        src, dst = sqlite3.connect(f"file:{s.db}?mode=ro", uri=True), sqlite3.connect(later)
        src.backup(dst)
        src.close()
        dst.close()
        screen = poll(lambda: (lambda t: t if f"/{s.hot} " in t else None)(
            tmux.screen("waits")), 15, 0.1)
        check("top shows the database's cycle once it is there", screen, tmux.screen("waits"))
    finally:
        tmux.kill()


def check_restored(how, got):
    """After HOW, top ended with 0 and the terminal's modes are back."""
    modes = got["all"].split()
    check(f"after {how}: top ended with 0, the terminal's modes as they were before",
          got["rc"] == "0" and got["before"] == got["after"],
          f"exit {got['rc']}, stty -g before {got['before']}, after {got['after']}")
    check(f"after {how}: icanon and echo are back", "icanon" in modes and "echo" in modes,
          [m for m in modes if m.endswith(("icanon", "echo"))])
    check(f"after {how}: the shell's screen is back (top's was the alternate screen)",
          "before-top" in got["screen"] and "THREAD/TID" not in got["screen"], got["screen"])


def main():
    def body(s, tmp):
        run([test_once, test_command_line], s)
        # The terminal's tests start once the daemon has written a cycle.
        poll(s.first_row_is_hot, 30, 0.2)
        run([test_terminal, test_suspend, test_waits], s, tmp)
    return Setup.main("top", body)


if __name__ == "__main__":
    sys.exit(main())
