#!/usr/bin/env python3
"""Integration tests: where an event comes from, and watches by unit and
cgroup.  The real daemon, real targets, real pid namespaces and cgroups.

- hotchain in a pid namespace of its own (`unshare -fp --mount-proc`),
  moved into a cgroup of its own, /cpumond-origin-PID.service of the cgroup
  v2 hierarchy (on a hybrid host the unified one): that path makes it unit
  cpumond-origin-PID.service for sd_pid_get_unit, also where systemd is not
  PID 1 (as /system.slice/x.service does; a cgroup below the root, not in a
  slice, so that runs of this test at the same time share no parent to
  make and remove).  A second hotchain, hot too, stays where it is.
- `cpumond doctor` shows which processes the unit and cgroup selectors
  select, alone and with comm; the daemon, on a watch by comm and unit,
  gives the moved target's event (and none of the other one): its nspid is
  the last NSpid of /proc/PID/status and differs from its pid, its cgroup
  and unit are the ones made, in the database, in `tail` (human and
  --json) and in `report --json`, which --unit and --cgroup select.

The cgroups made are removed at the end, the target moved back first.
Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" per check
and ends with "N passed, N failed, N skipped".
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (Daemon, Target, check, poll, ptrace_allowed, query, run, skip,  # noqa: E402
                     start_target, stop, summary)


def unified_root():
    """The mount point of the cgroup v2 hierarchy whose paths /proc/PID/cgroup
    shows (its root is ours), or None with why."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError as e:
        return None, f"cannot read mountinfo: {e}"
    for m in mounts:
        sep = m.index("-")
        if m[sep + 1] == "cgroup2" and m[3] == "/":
            return m[4], None
    return None, "no cgroup v2 hierarchy mounted at its root (a v1-only host)"


class Cgroup:
    """ROOT/NAME, made and removed again."""

    def __init__(self, root, name):
        self.root = root
        self.path = os.path.join(root, name)
        os.mkdir(self.path)

    def move(self, pid, into=None):
        with open(os.path.join(into or self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self):
        # Empty once its process moved back or exited; rmdir says so.
        poll(lambda: not try_rmdir(self.path), 5)


def try_rmdir(path):
    """Removes PATH; True while it is still there."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


def start_namespaced(build):
    """hotchain in a pid namespace of its own: (Popen of unshare, host pid)
    or (Popen or None, None)."""
    argv = ["unshare", "-fp", "--mount-proc", "--kill-child",
            os.path.join(build, "tests", "hotchain"), "--threads", "2", "--hot", "1",
            "--timeout", "120"]
    try:
        proc, nspid, hot, _ = start_target(argv)
    except OSError:
        return None, None
    if nspid is None or not hot:
        return proc, None
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            return proc, int(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return proc, None


def nspid_of(pid):
    """The last number of the NSpid line of /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    return None


def cpumond(build, *args):
    return subprocess.run([os.path.join(build, "cpumond")] + list(args), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def write_config(path, db, body):
    with open(path, "w") as f:
        f.write(f"[cpumond]\ninterval = 300ms\nthreshold = 250\nstarved = no\ncooldown = 1h\n"
                f"database = {db}\n\n{body}")


def test_origin(build, tmp):
    allowed, why = ptrace_allowed()
    if os.geteuid() != 0 or not allowed:
        skip("origin", why or "needs root to make cgroups and pid namespaces")
        return
    root, why = unified_root()
    if not root:
        skip("origin", why)
        return
    proc, host_pid = start_namespaced(build)
    if host_pid is None:
        stop(proc, signal.SIGKILL)
        skip("origin", "unshare -fp --mount-proc did not start hotchain")
        return
    other = Target(build, threads=2, hot=1)
    unit = f"cpumond-origin-{os.getpid()}.service"
    cgroup = f"/{unit}"
    cg = daemon = None
    try:
        cg = Cgroup(root, unit)
        cg.move(host_pid)
        check("target: in its own pid namespace", nspid_of(host_pid) not in (None, host_pid),
              nspid_of(host_pid))
        with open(f"/proc/{host_pid}/cgroup") as f:
            line = [x for x in f.read().splitlines() if x.startswith("0::")]
        check("target: moved into its cgroup", line == [f"0::{cgroup}"], line)
        check("second target started", other.pid and other.hot, other.pid)

        # Which processes the selectors take, by themselves and with comm.
        conf = os.path.join(tmp, "select.conf")
        db = os.path.join(tmp, "origin.db")
        esc = cgroup.replace(".", "\\.")
        cases = [
            (f"unit = {unit}", [host_pid]),
            (f"unit = cpumond-origin-{os.getpid()}.s*[a-z]ice", [host_pid]),
            (f"cgroup = ^{esc}$", [host_pid]),
            (f"comm = hotchain\nunit = {unit}", [host_pid]),
            (f"comm = hotchain\ncgroup = ^{esc}$", [host_pid]),
            (f"pid = {other.pid}\nunit = {unit}", []),
            (f"pid = {host_pid}\ncgroup = ^{esc}$", [host_pid]),
            (f"pid = {other.pid}\ncomm = hotchain", [other.pid]),
            ("unit = cpumond-origin-nomatch-*.service", []),
            ("cgroup = ^/cpumond-origin-nomatch/", []),
        ]
        for sel, want in cases:
            write_config(conf, db, f"[watch w]\n{sel}\n")
            r = cpumond(build, "doctor", "-c", conf)
            m = re.search(r'watch "w" matches \d+ process(?:es)?: (.*)', r.stdout)
            got = sorted(int(p) for p in re.findall(r"hotchain\[(\d+)\]", m.group(1))) if m else []
            if not want:
                ok = re.search(r'watch "w" at \S+ matches no process', r.stdout) is not None
            else:
                ok = got == want
            check(f"doctor: {sel.replace(chr(10), ', ')} selects {want or 'nothing'}", ok,
                  f"got {got}: {r.stdout}{r.stderr}")
        write_config(conf, db, f"[watch w]\nunit = {unit}\n")
        r = cpumond(build, "doctor", "-c", conf)
        check("doctor: a matched process is shown with its unit",
              f"hotchain[{host_pid}] in {unit}" in r.stdout, r.stdout)

        # The daemon on a watch by comm and unit, started while the target
        # is outside the unit: it follows the target when it moves in.
        cg.move(host_pid, into=root)
        write_config(conf, db, f"[watch svc]\ncomm = hotchain\nunit = {unit}\n")
        daemon = Daemon(build, conf, tmp)
        check("daemon: the watch matches no process while the target is outside the unit",
              poll(lambda: 'watch "svc" at' in daemon.log() and "matches no process" in
                   daemon.log(), 20), daemon.log())
        cg.move(host_pid)
        check("daemon: the watch takes the target once it is moved in",
              poll(lambda: 'watch "svc" matches 1 process again' in daemon.log(), 20),
              daemon.log())
        rows = poll(lambda: query(db, "SELECT pid, nspid, cgroup, unit, id FROM events"
                                      " WHERE pid = ?", (host_pid,)), 30)
        check("daemon: an event of the target", rows, daemon.log())
        if not rows:
            return
        pid, nspid, got_cgroup, got_unit, eid = rows[0]
        want_nspid = nspid_of(host_pid)
        check("event: nspid is the NSpid of /proc/PID/status and not the pid",
              nspid == want_nspid and nspid != pid, f"nspid {nspid}, status {want_nspid}, pid {pid}")
        check("event: cgroup and unit", (got_cgroup, got_unit) == (cgroup, unit),
              (got_cgroup, got_unit))
        # A few more cycles (300 ms) in which the other one, as hot, would
        # trip were it selected.
        time.sleep(1.0)
        others = query(db, "SELECT count(*) FROM events WHERE pid = ?", (other.pid,))
        check("daemon: no event of the process outside the unit", others == [(0,)], others)
        daemon.stop()

        r = cpumond(build, "tail", "-d", db, "--json")
        evs = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        mine = [e for e in evs if e["pid"] == host_pid]
        check("tail --json: nspid, cgroup and unit",
              mine and (mine[0]["nspid"], mine[0]["cgroup"], mine[0]["unit"]) ==
              (want_nspid, cgroup, unit), r.stdout + r.stderr)
        r = cpumond(build, "tail", "-d", db, "-n", "1")
        print("# " + "\n# ".join(r.stdout.splitlines()[:4]), flush=True)
        check("tail: the pid in its namespace beside ours, the unit and cgroup",
              f"hotchain[{host_pid} ({want_nspid} in its namespace)] thread" in r.stdout and
              f"\n  unit {unit}  cgroup {cgroup}\n" in r.stdout, r.stdout + r.stderr)

        def report(*args):
            r = cpumond(build, "report", "-d", db, "--json", *args)
            return r, [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        r, groups = report()
        procs = [p for g in groups for p in g["processes"] if p["pid"] == host_pid]
        check("report --json: processes carry unit and cgroup",
              procs and all((p["unit"], p["cgroup"]) == (unit, cgroup) for p in procs),
              r.stdout + r.stderr)
        for args, selected in [
            (["--unit", unit], True),
            (["--unit", f"cpumond-origin-{os.getpid()}.*"], True),
            (["--unit", "cpumond-origin-nomatch-*"], False),
            (["--cgroup", f"^{esc}$"], True),
            (["--cgroup", "^/cpumond-origin-nomatch/"], False),
            (["--unit", unit, "--cgroup", "^/cpumond-origin-nomatch/"], False),
        ]:
            r, groups = report(*args)
            pids = {p["pid"] for g in groups for p in g["processes"]}
            check(f"report {' '.join(args)}: {'the target' if selected else 'nothing'}",
                  r.returncode == 0 and pids == ({host_pid} if selected else set()),
                  f"exit {r.returncode}, pids {pids}: {r.stderr}")
        r = cpumond(build, "report", "-d", db, "--cgroup", "(")
        check("report --cgroup with a bad regex: exit 2 and why",
              r.returncode == 2 and "--cgroup: invalid regex" in r.stderr,
              f"exit {r.returncode}: {r.stderr}")
    finally:
        if daemon and daemon.alive():
            daemon.kill()
        if cg:
            try:
                cg.move(host_pid, into=root)
            except OSError:
                pass          # gone already
        stop(proc, signal.SIGKILL)
        other.stop()
        if cg:
            cg.remove()
            check("the cgroup made is removed", not os.path.exists(cg.path), cg.path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpumond-it-") as tmp:
        run([test_origin], args.build, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
