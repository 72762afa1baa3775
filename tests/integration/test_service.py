#!/usr/bin/env python3
"""The daemon as a systemd service, without systemd running.

- the sd_notify protocol against a notify socket of the test's own:
  READY=1 only once the database exists, STATUS=, WATCHDOG=1, RELOADING=1
  then READY=1 on SIGHUP, STOPPING=1 and exit 0 on SIGTERM;
- the unit: `systemd-analyze security` exposure and `verify`, the sysusers.d
  and tmpfiles.d files applied to a scratch root;
- `make install` / `make uninstall` into a DESTDIR;
- `cpumond doctor`'s exit statuses;
- least privilege, for real: the daemon as an unprivileged uid with only
  the unit's capabilities (CAP_SYS_PTRACE, CAP_PERFMON, CAP_DAC_READ_SEARCH:
  read from systemd/cpumond.service), no_new_privs and RLIMIT_RTPRIO
  1, as the unit runs it, takes a stack of a root process with perf
  (capture "perf", capture = auto), and a member of its group reads the
  log.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends with
"N passed, N failed, N skipped"; exit status 1 when a check failed.
"""
import argparse
import array
import os
import re
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import HOT_THRESHOLD, check, poll, run, skip, summary  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def unit_caps():
    """The unit's AmbientCapabilities= ("CAP_SYS_PTRACE CAP_PERFMON ..."),
    and the same as setpriv's list ("+sys_ptrace,+perfmon,...")."""
    with open(os.path.join(ROOT, "systemd", "cpumond.service")) as f:
        m = re.search(r"^AmbientCapabilities=(.*)$", f.read(), re.M)
    caps = m.group(1).split() if m else []
    return " ".join(caps), ",".join("+" + c[len("CAP_"):].lower() for c in caps)


# The least-privilege case runs the daemon with exactly these.
UNIT_CAPS, SETPRIV_CAPS = unit_caps()


def write_config(path, db, pid, interval="200ms"):
    with open(path, "w") as f:
        f.write(f"[cpumond]\ninterval = {interval}\nthreshold = {HOT_THRESHOLD}\nstarved = no\n"
                f"database = {db}\n"
                f"\n[watch self]\npid = {pid}\n")


class NotifySocket:
    """An AF_UNIX datagram socket like systemd's: records (monotonic time,
    sender pid, message, whether the database existed on arrival)."""

    def __init__(self, path, db):
        self.path, self.db = path, db
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.1)
        self.messages = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        creds_len = socket.CMSG_SPACE(struct.calcsize("3i"))
        while not self.stop:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, creds_len)
            except socket.timeout:
                continue
            except OSError:
                return
            pid = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:12])[0]
            exists = os.path.exists(self.db)
            with self.lock:
                self.messages.append((time.monotonic(), pid, data.decode(), exists))

    def snapshot(self):
        with self.lock:
            return list(self.messages)

    def wait_for(self, pred, timeout, start=0):
        """The index of the first message from START on that PRED accepts."""
        def find():
            msgs = self.snapshot()
            for i in range(start, len(msgs)):
                if pred(msgs[i][2]):
                    return i + 1
            return 0
        i = poll(find, timeout)
        return i - 1 if i else None

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def fields(msg):
    return dict(line.split("=", 1) for line in msg.splitlines() if "=" in line)


def test_notify(build, tmp):
    db = os.path.join(tmp, "notify", "x.db")
    conf = os.path.join(tmp, "notify.conf")
    write_config(conf, db, os.getpid())
    ns = NotifySocket(os.path.join(tmp, "notify.sock"), db)
    env = dict(os.environ, NOTIFY_SOCKET=ns.path, WATCHDOG_USEC="400000")
    env.pop("JOURNAL_STREAM", None)
    # WATCHDOG_PID must be the daemon's own pid: the shell execs into it.
    proc = subprocess.Popen(["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" -c "$1"',
                             os.path.join(build, "cpumond"), conf],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        is_ready = lambda m: "READY=1" in m.splitlines()
        r = ns.wait_for(is_ready, 5)
        if not check("notify: READY=1 arrives", r is not None,
                     f"messages: {[m[2] for m in ns.snapshot()]}"):
            return
        msgs = ns.snapshot()
        t_ready, pid, msg, db_existed = msgs[r]
        check("notify: READY=1 only once the database exists", db_existed)
        check("notify: READY=1 is the first message", r == 0,
              f"before it: {[m[2] for m in msgs[:r]]}")
        check("notify: messages come from the main pid (NotifyAccess=main)",
              pid == proc.pid, f"sender {pid}, daemon {proc.pid}")
        status_re = re.compile(r"^watching \d+ process(es)?, \d+ threads?; \d+ events?$")
        st = fields(msg).get("STATUS", "")
        check("notify: READY=1 carries STATUS=", status_re.match(st), f"STATUS={st!r}")
        s = ns.wait_for(lambda m: "STATUS=" in m and "READY=1" not in m, 2, r + 1)
        check("notify: STATUS= every cycle",
              s is not None and status_re.match(fields(ns.snapshot()[s][2])["STATUS"]),
              f"messages: {[m[2] for m in ns.snapshot()]}")
        m = re.match(r"watching (\d+) process(?:es)?, (\d+) threads?", st)
        check("notify: STATUS= counts the watched process and its threads",
              m and int(m.group(1)) == 1 and int(m.group(2)) >= 2, f"STATUS={st!r}")
        check("notify: STATUS= counts one process in the singular",
              st.startswith("watching 1 process, "), f"STATUS={st!r}")

        def watchdogs():
            return [t for t, _, msg_, _ in ns.snapshot()
                    if "WATCHDOG=1" in msg_.splitlines() and t >= t_ready]
        poll(lambda: len(watchdogs()) >= 2, 2)
        w = watchdogs()
        check("notify: WATCHDOG=1 at least twice within 2 s (WATCHDOG_USEC=400000)",
              len(w) >= 2 and w[1] - t_ready <= 2.0, f"{len(w)} in 2 s")
        if len(w) >= 3:
            gaps = [b - a for a, b in zip(w, w[1:])]
            check("notify: WATCHDOG=1 at most every 0.4 s", max(gaps) < 0.4,
                  f"gaps {gaps}")

        start = len(ns.snapshot())
        proc.send_signal(signal.SIGHUP)
        rl = ns.wait_for(lambda m: "RELOADING=1" in m.splitlines(), 3, start)
        rd = ns.wait_for(is_ready, 3, rl + 1) if rl is not None else None
        check("notify: SIGHUP gives RELOADING=1 then READY=1", rl is not None and rd is not None,
              f"messages after SIGHUP: {[m[2] for m in ns.snapshot()[start:]]}")

        start = len(ns.snapshot())
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        sp = ns.wait_for(lambda m: "STOPPING=1" in m.splitlines(), 1, start)
        check("notify: SIGTERM gives STOPPING=1", sp is not None,
              f"messages after SIGTERM: {[m[2] for m in ns.snapshot()[start:]]}")
        check("notify: SIGTERM exits 0", rc == 0, f"exit status {rc}, stderr: "
              f"{proc.stderr.read() if rc is not None else ''}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        ns.close()


def test_no_notify_socket(build, tmp):
    """Without NOTIFY_SOCKET nothing changes: the daemon runs its cycles."""
    db = os.path.join(tmp, "plain", "x.db")
    conf = os.path.join(tmp, "plain.conf")
    write_config(conf, db, os.getpid(), "100ms")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    r = subprocess.run([os.path.join(build, "cpumond"), "-c", conf, "--cycles", "2"], env=env,
                       capture_output=True, text=True, timeout=10)
    check("no NOTIFY_SOCKET: runs and exits 0", r.returncode == 0, r.stderr.strip())


def make_man_tree(tmp):
    man = os.path.join(tmp, "man")
    for sec, page in (("8", "cpumond.8"), ("5", "cpumond.conf.5"), ("1", "stackdump.1")):
        os.makedirs(os.path.join(man, "man" + sec), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "man", page), os.path.join(man, "man" + sec, page))
    return man


def test_unit(build, tmp):
    unit = os.path.join(ROOT, "systemd", "cpumond.service")
    if not shutil.which("systemd-analyze"):
        skip("unit: systemd-analyze security and verify", "systemd-analyze is not installed")
        return
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", unit],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for cpumond\.service: ([\d.]+)", r.stdout)
    check("unit: systemd-analyze security exposure 1.5 or lower",
          m and float(m.group(1)) <= 1.5, m.group(0) if m else r.stderr.strip())
    # verify needs ExecStart's binary and the man pages to exist.
    d = os.path.join(tmp, "verify")
    os.makedirs(d)
    with open(unit) as f:
        text = f.read()
    with open(os.path.join(d, "cpumond.service"), "w") as f:
        f.write(text.replace("/usr/local/sbin/cpumond", os.path.abspath(os.path.join(build, "cpumond"))))
    r = subprocess.run(["systemd-analyze", "verify", os.path.join(d, "cpumond.service")],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANPATH=make_man_tree(d)))
    check("unit: systemd-analyze verify is clean", r.returncode == 0 and not r.stderr.strip()
          and not r.stdout.strip(), (r.stdout + r.stderr).strip())
    for key in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
                "User=cpumond", "StateDirectory=cpumond", "ConfigurationDirectory=cpumond",
                f"AmbientCapabilities={UNIT_CAPS}\n",
                f"CapabilityBoundingSet={UNIT_CAPS}\n",
                "WatchdogSec="):
        check(f"unit: has {key}", re.search("^" + re.escape(key), text, re.M), "missing")
    check("unit: ptrace, perf and /proc/TID/syscall's capabilities, nothing else",
          sorted(UNIT_CAPS.split()) == ["CAP_DAC_READ_SEARCH", "CAP_PERFMON", "CAP_SYS_PTRACE"],
          UNIT_CAPS)
    check("unit: no PrivateUsers= (it breaks CAP_SYS_PTRACE)",
          not re.search(r"^PrivateUsers=", text, re.M), "present")
    filters = " ".join(re.findall(r"^SystemCallFilter=([^~].*)$", text, re.M))
    check("unit: SystemCallFilter= allows @debug (ptrace)", "@debug" in filters, filters)

    sysroot = os.path.join(tmp, "sysroot")
    os.makedirs(os.path.join(sysroot, "etc"))
    if shutil.which("systemd-sysusers"):
        r = subprocess.run(["systemd-sysusers", "--root", sysroot,
                            os.path.join(ROOT, "systemd", "cpumond.sysusers")],
                           capture_output=True, text=True, timeout=30)
        with open(os.path.join(sysroot, "etc", "passwd")) as f:
            pw = [line.split(":") for line in f if line.startswith("cpumond:")]
        with open(os.path.join(sysroot, "etc", "group")) as f:
            gr = [line for line in f if line.startswith("cpumond:")]
        check("sysusers: creates system user and group cpumond",
              r.returncode == 0 and pw and gr and int(pw[0][2]) < 1000 and pw[0][2] == pw[0][3],
              (r.stdout + r.stderr).strip() or f"passwd {pw}, group {gr}")
    else:
        skip("sysusers: creates user and group cpumond", "systemd-sysusers is not installed")
    if shutil.which("systemd-tmpfiles") and shutil.which("systemd-sysusers"):
        r = subprocess.run(["systemd-tmpfiles", "--root", sysroot, "--create",
                            os.path.join(ROOT, "systemd", "cpumond.tmpfiles")],
                           capture_output=True, text=True, timeout=30)
        path = os.path.join(sysroot, "var", "lib", "cpumond")
        st = os.stat(path) if os.path.isdir(path) else None
        check("tmpfiles: /var/lib/cpumond 0750 owned by cpumond",
              r.returncode == 0 and st and (st.st_mode & 0o7777) == 0o750
              and st.st_uid == int(pw[0][2]), (r.stdout + r.stderr).strip() or
              f"stat {st}")
    else:
        skip("tmpfiles: /var/lib/cpumond", "systemd-tmpfiles is not installed")


def make(build, *args):
    cmd = ["make", "-s", "-C", ROOT, f"B={build}"]
    if os.path.basename(os.path.normpath(build)) == "build-sanitize":
        cmd.append("SANITIZE=1")
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=600)


def test_install(build, tmp):
    dest = os.path.join(tmp, "destdir")
    r = make(build, "install", f"DESTDIR={dest}", "PREFIX=/usr")
    if not check("install: make install DESTDIR=… PREFIX=/usr", r.returncode == 0,
                 (r.stdout + r.stderr).strip()[-500:]):
        return
    want = {
        "usr/sbin/cpumond": 0o755, "usr/bin/stackdump": 0o755,
        "usr/share/man/man8/cpumond.8": 0o644, "usr/share/man/man5/cpumond.conf.5": 0o644,
        "usr/share/man/man1/stackdump.1": 0o644, "etc/cpumond/cpumond.conf": 0o644,
        "usr/lib/systemd/system/cpumond.service": 0o644,
        "usr/lib/sysusers.d/cpumond.conf": 0o644, "usr/lib/tmpfiles.d/cpumond.conf": 0o644,
    }
    bad = []
    for rel, mode in want.items():
        p = os.path.join(dest, rel)
        if not os.path.isfile(p):
            bad.append(f"{rel} missing")
        elif os.stat(p).st_mode & 0o7777 != mode:
            bad.append(f"{rel} mode {oct(os.stat(p).st_mode & 0o7777)}")
    extra = sorted(os.path.relpath(os.path.join(d, f), dest)
                   for d, _, fs in os.walk(dest) for f in fs
                   if os.path.relpath(os.path.join(d, f), dest) not in want)
    check("install: the tree has every file with its mode, and nothing else",
          not bad and not extra, "; ".join(bad + [f"extra {e}" for e in extra]))
    unit = os.path.join(dest, "usr/lib/systemd/system/cpumond.service")
    with open(unit) as f:
        text = f.read()
    check("install: ExecStart= matches SBINDIR",
          re.search(r"^ExecStart=/usr/sbin/cpumond -c /etc/cpumond/cpumond.conf$", text, re.M),
          re.findall(r"^ExecStart=.*$", text, re.M))

    if shutil.which("systemd-analyze"):
        d = os.path.join(tmp, "verify-installed")
        os.makedirs(d)
        with open(os.path.join(d, "cpumond.service"), "w") as f:
            f.write(text.replace("ExecStart=/usr/sbin/", f"ExecStart={dest}/usr/sbin/"))
        r = subprocess.run(["systemd-analyze", "verify", os.path.join(d, "cpumond.service")],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, MANPATH=os.path.join(dest, "usr/share/man")))
        check("install: the installed unit verifies (binary and man pages of the DESTDIR)",
              r.returncode == 0 and not (r.stdout + r.stderr).strip(),
              (r.stdout + r.stderr).strip())

    conf = os.path.join(dest, "etc/cpumond/cpumond.conf")
    with open(conf, "a") as f:
        f.write("; changed by the admin\n")
    r = make(build, "install", f"DESTDIR={dest}", "PREFIX=/usr")
    with open(conf) as f:
        kept = f.read().endswith("; changed by the admin\n")
    check("install: an existing configuration is not overwritten", r.returncode == 0 and kept,
          (r.stdout + r.stderr).strip()[-300:])

    r = make(build, "uninstall", f"DESTDIR={dest}", "PREFIX=/usr")
    left = sorted(os.path.relpath(os.path.join(d, f), dest)
                  for d, _, fs in os.walk(dest) for f in fs)
    check("uninstall: removes everything but the changed configuration",
          r.returncode == 0 and left == ["etc/cpumond/cpumond.conf"],
          f"left {left} {(r.stdout + r.stderr).strip()[-300:]}")

    dest2 = os.path.join(tmp, "destdir-default")
    r = make(build, "install", f"DESTDIR={dest2}")
    try:
        with open(os.path.join(dest2, "usr/local/lib/systemd/system/cpumond.service")) as f, \
                open(os.path.join(ROOT, "systemd", "cpumond.service")) as g:
            same = f.read() == g.read()
    except OSError as e:
        same = False
        r.stderr += str(e)
    check("install: with PREFIX=/usr/local the installed unit is the checked-in one",
          r.returncode == 0 and same, (r.stdout + r.stderr).strip()[-300:])
    r = make(build, "uninstall", f"DESTDIR={dest2}")
    left = [f for _, _, fs in os.walk(dest2) for f in fs]
    check("uninstall: an unchanged configuration goes too", r.returncode == 0 and not left,
          f"left {left}")


def test_doctor(build, tmp):
    cpumond = os.path.join(build, "cpumond")
    conf = os.path.join(tmp, "doctor.conf")
    write_config(conf, os.path.join(tmp, "doctor", "x.db"), os.getpid())
    r = subprocess.run([cpumond, "doctor", "-c", conf], capture_output=True, text=True,
                       timeout=30)
    lines = r.stdout.splitlines()
    check("doctor: one 'ok'/'warn'/'FAIL' line per check",
          lines and all(re.match(r"^(ok  |warn|FAIL) \S", line) for line in lines), r.stdout)
    fails = [line for line in lines if line.startswith("FAIL")]
    check("doctor: exit 1 exactly when a check failed", r.returncode == (1 if fails else 0),
          f"exit {r.returncode}, {len(fails)} FAIL lines")
    check("doctor: FAIL lines say the fix", all("  fix: " in line for line in fails), fails)
    check("doctor: checks ptrace_scope, CAP_SYS_PTRACE and seccomp",
          re.search(r"ptrace_scope", r.stdout) and "CAP_SYS_PTRACE" in r.stdout
          and "seccomp" in r.stdout, r.stdout)
    if os.geteuid() == 0:
        check("doctor: as root, a process of its own passes", r.returncode == 0, r.stdout)
    r = subprocess.run([cpumond, "doctor", "-c", os.path.join(tmp, "missing.conf")],
                       capture_output=True, text=True, timeout=30)
    check("doctor: a missing configuration exits 3", r.returncode == 3, f"exit {r.returncode}")
    r = subprocess.run([cpumond, "doctor", "extra"], capture_output=True, text=True, timeout=30)
    check("doctor: an extra argument exits 2", r.returncode == 2, f"exit {r.returncode}")


def free_id(start):
    """A uid/gid that names no user and no group."""
    import grp
    import pwd
    for i in range(start, start + 1000):
        try:
            pwd.getpwuid(i)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(i)
            continue
        except KeyError:
            return i
    return None


def test_least_privilege(build, tmp):
    name = f"least privilege: uid without root, only {UNIT_CAPS}"
    hotchain = os.path.join(build, "tests", "hotchain")
    if os.geteuid() != 0:
        skip(name, "needs root to drop to another uid")
        return
    if not shutil.which("setpriv"):
        skip(name, "setpriv (util-linux) is not installed")
        return
    if not os.path.exists(hotchain):
        skip(name, f"{hotchain} is not built (make check builds it)")
        return
    uid = free_id(64000)
    reader = free_id(uid + 1)
    # A copy in a directory every uid may enter: the build may sit under a
    # 0700 home.
    d = os.path.join(tmp, "lp")
    os.makedirs(d)
    os.chmod(tmp, 0o755)
    os.chmod(d, 0o755)
    binary = os.path.join(d, "cpumond")
    shutil.copy(os.path.join(build, "cpumond"), binary)
    # The target too: the daemon opens its executable for names and unwind
    # tables, and a build under a 0700 home is out of its uid's reach.
    shutil.copy(hotchain, os.path.join(d, "hotchain"))
    hotchain = os.path.join(d, "hotchain")
    state = os.path.join(d, "state")
    os.mkdir(state, 0o750)
    os.chown(state, uid, uid)
    os.chmod(state, 0o750)
    target = subprocess.Popen([hotchain, "--threads", "3", "--hot", "1", "--timeout", "60"],
                              stdout=subprocess.PIPE, text=True)
    proc = None
    try:
        pid = None
        for line in target.stdout:
            word, _, value = line.strip().partition(" ")
            if word == "pid":
                pid = int(value)
            elif word == "ready":
                break
        db = os.path.join(state, "cpumond.db")
        conf = os.path.join(d, "lp.conf")
        write_config(conf, db, pid)
        os.chmod(conf, 0o644)
        # What the unit gives: User=, AmbientCapabilities= and
        # CapabilityBoundingSet= (UNIT_CAPS), NoNewPrivileges=, and
        # LimitRTPRIO=1 where this machine lets root raise it.
        rt = ["prlimit", "--rtprio=1"]
        if subprocess.run(rt + ["true"], capture_output=True).returncode != 0:
            rt = []
        asuser = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                  f"--inh-caps=-all,{SETPRIV_CAPS}", f"--ambient-caps=-all,{SETPRIV_CAPS}",
                  f"--bounding-set=-all,{SETPRIV_CAPS}", "--no-new-privs"]
        r = subprocess.run(rt + asuser + [binary, "doctor", "-c", conf],
                           capture_output=True, text=True, timeout=30)
        check(f"least privilege: doctor passes with only {UNIT_CAPS}",
              r.returncode == 0, r.stdout + r.stderr)
        check("least privilege: doctor says the daemon samples with perf",
              re.search(r"^ok +capture = auto: perf", r.stdout, re.M), r.stdout)
        nocap = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        r = subprocess.run(nocap + [binary, "doctor", "-c", conf], capture_output=True,
                           text=True, timeout=30)
        check("least privilege: without CAP_SYS_PTRACE doctor fails and names the fix",
              r.returncode == 1 and "AmbientCapabilities=CAP_SYS_PTRACE" in r.stdout, r.stdout)
        proc = subprocess.Popen(rt + asuser + [binary, "-c", conf],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def stacked():
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
                try:
                    return con.execute("SELECT group_concat(capture) FROM events WHERE "
                                       "stack_hash IS NOT NULL AND stack_hash != 0").fetchone()[0]
                finally:
                    con.close()
            except sqlite3.Error:
                return 0
        got = poll(stacked, 15, 0.1)
        check("least privilege: the daemon stacks a root process's hot thread", got,
              "no event with a stack in 15 s")
        # Perf where the kernel permits it: CAP_PERFMON whatever
        # kernel.perf_event_paranoid says, CAP_SYS_PTRACE for another
        # user's thread.
        check("least privilege: with perf (events' capture \"perf\")",
              got and set(got.split(",")) == {"perf"}, got)
        modes = {}
        for suffix in ("", "-wal", "-shm"):
            p = db + suffix
            if os.path.exists(p):
                st = os.stat(p)
                modes[suffix or "db"] = (oct(st.st_mode & 0o777), st.st_uid, st.st_gid)
        check("least privilege: the database, -wal and -shm are 0640 of the daemon's user",
              len(modes) == 3 and all(m == ("0o640", uid, uid) for m in modes.values()),
              str(modes))
        r = subprocess.run(["setpriv", f"--reuid={reader}", f"--regid={reader}",
                            f"--groups={uid}", binary, "tail", "-n", "1", "-d", db],
                           capture_output=True, text=True, timeout=30)
        check("least privilege: a member of the daemon's group runs cpumond tail",
              r.returncode == 0 and "hot_leaf" in r.stdout, r.stdout + r.stderr)
        r = subprocess.run(["setpriv", f"--reuid={reader}", f"--regid={reader}",
                            "--clear-groups", binary, "tail", "-n", "1", "-d", db],
                           capture_output=True, text=True, timeout=30)
        check("least privilege: a user outside the group cannot", r.returncode != 0,
              r.stdout + r.stderr)
    finally:
        if proc:
            proc.terminate()
            try:
                rc = proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            check("least privilege: SIGTERM exits 0", rc == 0, proc.stderr.read())
            proc.stderr.close()
        target.kill()
        target.wait()
        target.stdout.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if not os.path.exists(os.path.join(build, "cpumond")):
        print(f"not ok - {build}/cpumond exists: run make first")
        print("0 passed, 1 failed, 0 skipped")
        return 1
    tmp = tempfile.mkdtemp(prefix="cpumond-service-")
    try:
        run([test_notify, test_no_notify_socket, test_unit, test_install, test_doctor,
             test_least_privilege], build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
