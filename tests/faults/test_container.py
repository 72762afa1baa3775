#!/usr/bin/env python3
"""Fault suite: a target in its own mount and pid namespaces, dumped with
the unit's privileges.

hotchain runs in `unshare -fpm --mount-proc --kill-child`, from a private
tmpfs /tmp of that namespace: its executable exists only there, at a path
the host does not have.  `stackdump TID` and the daemon (`pid = HOSTPID`)
run as a uid with only CAP_SYS_PTRACE (ambient, bounding set, no_new_privs,
RLIMIT_RTPRIO 1), as systemd/cpumond.service runs them; they open the
target's files as it sees them (stackdump/targetfs.h), where
/proc/PID/map_files is closed to them.  Their frames and names must equal
root's: hot_leaf <- hot_mid <- hot_root <- hot_thread_main <- start_thread
<- clone3, also in the database; and the thread is left running, untraced.
A second case puts a different program (twochains) at the same path on the
host: its names (chain_*) must never appear.  A third turns it round, as
the unit's PrivateTmp= does: stackdump in a mount namespace with a private
/tmp, the target in the host's.
"""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The least-privilege case of the integration tests picks its uid the same way.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "integration"))
from test_service import free_id  # noqa: E402
from common import (Daemon, all_threads_run, check, main, note, poll, query, skip,
                    start_target, stop, thread_status, write_config)

CHAIN = ["hot_leaf", "hot_mid", "hot_root", "hot_thread_main", "start_thread", "clone3"]
# The same path inside the namespace and, in the second case, on the host.
PATH = f"/tmp/cpumond-ct-{os.getpid()}/hotchain"


def as_uid(uid):
    """The command prefix for the unit's privileges: only CAP_SYS_PTRACE."""
    rt = ["prlimit", "--rtprio=1"]
    if subprocess.run(rt + ["true"], capture_output=True).returncode != 0:
        rt = []
    return rt + ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all,+sys_ptrace", "--ambient-caps=-all,+sys_ptrace",
                 "--bounding-set=-all,+sys_ptrace", "--no-new-privs"]


def frames(out):
    """(symbol or None, module) of each frame line of stackdump's output."""
    got = []
    for line in out.splitlines():
        # A frame may end in " at FILE:LINE" (names and lines read again
        # from the debug files the machine has: libc6-dbg for libc).
        line = re.sub(r" at \S+:\d+$", "", line)
        m = re.match(r"\s*#\d+ (\S+)\+0x[0-9a-f]+ \((.*)\)$", line)
        if m:
            got.append((m.group(1), m.group(2)))
            continue
        m = re.match(r"\s*#\d+ (.*)\+0x[0-9a-f]+$", line)
        if m:
            got.append((None, m.group(1)))
    return got


def start_contained(hotchain):
    """hotchain in new mount and pid namespaces, copied into their private
    /tmp (the source is opened before the tmpfs hides our /tmp).  Returns
    (Popen of unshare, host pid, host tid of the hot thread) or a reason."""
    script = ('exec 3<"$0"; mount -t tmpfs tmpfs /tmp && mkdir "${1%/*}" && '
              'cat <&3 >"$1" && exec 3<&- && chmod 755 "$1" && '
              'exec "$1" --threads 3 --hot 1 --timeout 120')
    argv = ["unshare", "-fpm", "--mount-proc", "--kill-child", "sh", "-c", script,
            hotchain, PATH]
    try:
        proc, nspid, hot, _ = start_target(argv)
    except OSError as e:
        return None, None, None, f"cannot run unshare: {e}"
    if nspid is None or not hot:
        stop(proc, signal.SIGKILL)
        return None, None, None, "unshare -fpm --mount-proc did not start hotchain"
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            host = int(f.read().split()[0])
    except (OSError, IndexError, ValueError) as e:
        stop(proc, signal.SIGKILL)
        return None, None, None, f"no child of unshare: {e}"
    tid = None
    for t in os.listdir(f"/proc/{host}/task"):
        st = thread_status(host, int(t)) or {}
        if st.get("NSpid", "").split()[-1:] == [str(hot[0])]:
            tid = int(t)
    return proc, host, tid, None


def stackdump(cmd, tid):
    r = subprocess.run(cmd + [str(tid)], capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


def event_stack(db, pid):
    """Symbols and modules of the key stack of the first event of PID with
    a stack, innermost first; None while there is none."""
    rows = query(db, "SELECT stack_hash FROM events WHERE pid = ? AND stack_hash IS NOT NULL "
                     "AND stack_hash != 0 ORDER BY id LIMIT 1", (pid,))
    if not rows:
        return None
    return query(db, "SELECT symbol, module FROM stack_frames WHERE hash = ? ORDER BY depth",
                 (rows[0][0],))


def one_case(name, d, uid, host_file):
    """One contained target, dumped by root and by UID; HOST_FILE: put
    twochains at PATH on the host meanwhile."""
    hostdir = os.path.dirname(PATH)
    if host_file:
        os.makedirs(hostdir)
        shutil.copy(os.path.join(d, "twochains"), PATH)
        os.chmod(hostdir, 0o755)
        os.chmod(PATH, 0o755)
    proc, pid, tid, why = start_contained(os.path.join(d, "hotchain"))
    daemon = None
    try:
        if why:
            skip(name, why)
            return
        if not host_file:
            check(f"{name}: the target's executable is not on the host", not os.path.exists(PATH))
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
        check(f"{name}: the target maps {PATH}", PATH in maps, maps[:300])
        user = as_uid(uid)
        rc, out, err = stackdump([os.path.join(d, "stackdump")], tid)
        root = frames(out)
        note(f"{name}, root: " + " <- ".join(s or m for s, m in root))
        check(f"{name}: root's stackdump gives the chain", rc == 0 and
              [s for s, _ in root] == CHAIN and all(m == PATH for _, m in root[:4]),
              out + err)
        rc, out, err = stackdump(user + [os.path.join(d, "stackdump")], tid)
        got = frames(out)
        note(f"{name}, CAP_SYS_PTRACE only: " + " <- ".join(s or m for s, m in got))
        check(f"{name}: with only CAP_SYS_PTRACE, stackdump gives root's frames and names",
              rc == 0 and got == root, f"exit {rc}: {out}{err}")
        check(f"{name}: no frame named from the host's file", not any(
            s and s.startswith("chain_") for s, _ in got), out)

        db = os.path.join(d, "state", f"{'host' if host_file else 'alone'}.db")
        conf = os.path.join(d, f"{'host' if host_file else 'alone'}.conf")
        # A low threshold: the hot thread gets less than a core on a busy
        # machine, and any event will do.
        write_config(conf, db, [("ct", {"pid": pid})], threshold=100)
        os.chmod(conf, 0o644)
        daemon = Daemon(d, conf, os.path.join(d, "state"), name=f"daemon-{uid}",
                        wrap=user)
        stack = poll(lambda: event_stack(db, pid), 30, 0.2)
        check(f"{name}: with only CAP_SYS_PTRACE, the daemon stores the chain",
              stack is not None and [s for s, _ in stack] == CHAIN and
              all(m == PATH for _, m in stack[:4]), f"{stack}; log: {daemon.log()[-500:]}")
        rc = daemon.stop()
        check(f"{name}: the daemon exits 0 on SIGTERM", rc == 0, daemon.log()[-500:])
        ok, bad = all_threads_run(pid)
        st = thread_status(pid, tid) or {}
        check(f"{name}: the target's threads are left running, untraced",
              ok and st.get("State", "?")[0] == "R", f"{bad}; hot thread {st.get('State')}")
    finally:
        if daemon:
            daemon.kill()
        if proc:
            stop(proc, signal.SIGKILL)
        if host_file:
            shutil.rmtree(hostdir, ignore_errors=True)


def private_tmp_case(d, uid):
    """The other way round, as the unit's PrivateTmp= has it: stackdump in
    a mount namespace of its own with a private /tmp, the target in the
    host's /tmp.  stackdump is run through a descriptor opened before the
    tmpfs hides it."""
    name = "tracer with a private /tmp, target in the host's /tmp"
    proc, pid, hot, _ = start_target([os.path.join(d, "hotchain"), "--threads", "2", "--hot", "1",
                                      "--timeout", "120"])
    try:
        if pid is None or not hot:
            check(f"{name}: hotchain starts", False, "no ready line")
            return
        script = 'exec 3<"$0"; mount -t tmpfs tmpfs /tmp && exec "$@" /proc/self/fd/3 "$TID"'
        cmd = ["unshare", "-m", "sh", "-c", script, os.path.join(d, "stackdump")] + as_uid(uid)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, TID=str(hot[0])))
        got = frames(r.stdout)
        note(f"{name}: " + " <- ".join(s or m for s, m in got))
        check(f"{name}: with only CAP_SYS_PTRACE, stackdump gives the chain",
              r.returncode == 0 and [s for s, _ in got] == CHAIN, r.stdout + r.stderr)
        ok, bad = all_threads_run(pid)
        check(f"{name}: the target's threads are left running, untraced", ok, bad)
    finally:
        stop(proc, signal.SIGKILL)


def test_container(build, tmp):
    name = "container"
    if os.geteuid() != 0:
        skip(name, "needs root for unshare and to drop to another uid")
        return
    for tool in ("unshare", "setpriv"):
        if not shutil.which(tool):
            skip(name, f"{tool} (util-linux) is not installed")
            return
    if os.path.exists(os.path.dirname(PATH)):
        skip(name, f"{os.path.dirname(PATH)} exists on the host already")
        return
    uid = free_id(64100)
    # The programs where the uid may read them: the build may sit under a
    # 0700 home, and the fault suite's scratch directory is 0700.
    d = os.path.join(tmp, "ct")
    os.makedirs(os.path.join(d, "state"))
    for p in (tmp, d):
        os.chmod(p, 0o755)
    os.chown(os.path.join(d, "state"), uid, uid)
    for prog in ("cpumond", "stackdump", "tests/hotchain", "tests/twochains"):
        shutil.copy(os.path.join(build, prog), d)
    one_case("container, its binary only in its own /tmp", d, uid, host_file=False)
    one_case("container, another program at the same path on the host", d, uid,
             host_file=True)
    private_tmp_case(d, uid)


if __name__ == "__main__":
    sys.exit(main([test_container]))
