#!/usr/bin/env python3
"""Integration tests: the real daemon, real targets, the real database.

Starts tests/targets/hotchain (N threads, K of them burning CPU in
hot_leaf <- hot_mid <- hot_root <- hot_thread_main) and build/cpumond on a
temporary configuration and database, then checks what lands in the database
and what `cpumond tail` prints.  Every wait polls with a deadline.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" per check and
ends with "N passed, N failed".
"""
import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import (HOT_THRESHOLD, Target, all_threads_run, check,  # noqa: E402
                     is_subsequence, poll, ptrace_allowed, query, run, skip,
                     start_target, summary, thread_status)

HOT_CHAIN = ["hot_leaf", "hot_mid", "hot_root", "hot_thread_main"]


def read_lines(pipe, n, timeout):
    """Up to N lines from PIPE, waiting at most TIMEOUT seconds in all."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(pipe, selectors.EVENT_READ)
    end, buf = time.monotonic() + timeout, b""
    fd = pipe.fileno()
    while buf.count(b"\n") < n and time.monotonic() < end:
        if sel.select(max(0.0, end - time.monotonic())):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode("utf-8", "replace").splitlines()[:n]


def event_stack(db, event_id):
    return [r[0] for r in query(db, """
        SELECT f.symbol FROM events e JOIN stack_frames f ON f.hash = e.stack_hash
        WHERE e.id = ? ORDER BY f.depth""", (event_id,))]


def write_config(path, db, pid, pid2, interval="300ms", capture="auto"):
    with open(path, "w") as f:
        # A low threshold (testlib.HOT_THRESHOLD): a spinning thread shares
        # 2 cores with another spinner, the daemon and whatever else runs.
        f.write(f"""[cpumond]
interval = {interval}
threshold = {HOT_THRESHOLD}
starved = no
cooldown = 1h
database = {db}
capture = {capture}

[watch nothing]
comm = no-such-proc-x

[watch target]
pid = {pid}

[watch second]
pid = {pid2}
""")


def bare_host(argv, db=None):
    """ARGV run in a mount namespace of its own whose /etc and /var/lib are
    empty: no /etc/cpumond/cpumond.conf and no default database, whatever
    this machine has, unless DB is copied to /var/lib/cpumond/cpumond.db."""
    setup = "mount -t tmpfs none /etc && mount -t tmpfs none /var/lib && "
    if db:
        setup += 'mkdir /var/lib/cpumond && cp "$0" /var/lib/cpumond/cpumond.db && '
    return ["unshare", "--mount", "sh", "-c", setup + 'exec "$@"', db or "sh"] + argv


def test_cli(build, tmp):
    """Arguments -> exit status and the first line of stderr."""
    cpumond = os.path.join(build, "cpumond")
    stackdump = os.path.join(build, "stackdump")
    bad = os.path.join(tmp, "bad.conf")
    with open(bad, "w") as f:
        f.write("[cpumond]\nthreshold = 1200\n")
    good = os.path.join(tmp, "good.conf")
    write_config(good, os.path.join(tmp, "never", "x.db"), 1, 2)
    table = [
        ([cpumond, "--version"], 0, None),
        ([cpumond, "--help"], 0, None),
        ([cpumond, "--bogus"], 2, "unrecognized option"),
        ([cpumond, "extra-word"], 2, "unknown command"),
        ([cpumond, "-c", "/nonexistent/cpumond.conf"], 3, "/nonexistent/cpumond.conf"),
        ([cpumond, "check-config", "-c", "config/cpumond.conf"], 0, None),
        ([cpumond, "check-config", "-c", bad], 3, f"{bad}:2: threshold"),
        ([cpumond, "-c", good, "-d", "/proc/no/such/dir/x.db"], 4, "/proc/no/such/dir"),
        ([cpumond, "tail", "-d", "/nonexistent/x.db"], 1, "/nonexistent/x.db"),
        ([cpumond, "tail", "-n", "many"], 2, "not a count"),
        ([cpumond, "tail", "-c", good, "-d", "x.db"], 2, "not both"),
        ([cpumond, "tail", "-c", "/nonexistent/cpumond.conf"], 3, "/nonexistent/cpumond.conf"),
        ([cpumond, "report", "-c", "/nonexistent/cpumond.conf"], 3, "/nonexistent/cpumond.conf"),
        ([stackdump], 2, None),
        ([stackdump, "--version"], 0, None),
        ([stackdump, "999999999"], 1, "999999999"),
        ([stackdump, "-m", "gdb", "1"], 2, "-m wants perf or ptrace"),
        ([stackdump, "-m", "perf", "999999999"], 1, "999999999"),
    ]
    # Without -c and without /etc/cpumond/cpumond.conf the readers take the
    # default database, and say which path they tried when it is missing.
    empty = os.path.join(tmp, "empty.db")
    subprocess.run([cpumond, "-c", good, "-d", empty, "--cycles", "1"], capture_output=True,
                   timeout=30)
    probe = subprocess.run(bare_host(["test", "!", "-e", "/etc/cpumond"]), capture_output=True,
                           text=True, timeout=10)
    if probe.returncode == 0 and os.path.exists(empty):
        missing = "no configuration /etc/cpumond/cpumond.conf and no database /var/lib/cpumond/cpumond.db"
        table += [
            (bare_host([cpumond, "tail"]), 4, "cpumond: tail: " + missing),
            (bare_host([cpumond, "tail", "-f"]), 4, "cpumond: tail: " + missing),
            (bare_host([cpumond, "report"]), 4, "cpumond: report: " + missing),
            (bare_host([cpumond, "tail", "-c", "/etc/cpumond/cpumond.conf"]), 3,
             "/etc/cpumond/cpumond.conf"),
            (bare_host([cpumond, "tail"], empty), 0, None),
            (bare_host([cpumond, "report", "--json"], empty), 0, None),
        ]
    else:
        skip("cli: tail and report without /etc/cpumond", "no mount namespace of our own "
             f"(unshare: {probe.stderr.strip() or probe.returncode}), or no empty database")
    for argv, status, stderr_has in table:
        cmd = next(i for i, a in enumerate(argv) if a in (cpumond, stackdump))
        name = "cli: " + ("(bare host) " if cmd else "") + \
            " ".join([os.path.basename(argv[cmd])] + argv[cmd + 1:])
        if cmd and argv[cmd - 1] != "sh":
            name += " (default database present)"
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            check(name, False, "timed out")
            continue
        first = (p.stderr.splitlines() or [""])[0]
        ok = p.returncode == status and (stderr_has is None or stderr_has in first)
        check(name, ok, f"exit {p.returncode} (want {status}), stderr: {first!r}")
    p = subprocess.run([cpumond, "--version"], capture_output=True, text=True)
    check("cli: --version prints the version", p.stdout.startswith("cpumond "), repr(p.stdout))


def test_daemon(build, tmp):
    allowed, why = ptrace_allowed()
    if not allowed:
        skip("daemon end to end", why)
        return
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "state", "cpumond.db")   # the directory does not exist yet
    conf = os.path.join(tmp, "cpumond.conf")
    # Two processes of the same binary, one hot thread each (2 cores): the
    # same code path must hash the same at their different load addresses.
    target = Target(build, threads=4, hot=1)
    second = Target(build, threads=2, hot=1)
    hot = target.hot + second.hot
    daemon = tail = None
    try:
        check("targets started", target.pid and len(target.hot) == 1 and len(target.idle) == 3
              and second.pid and len(second.hot) == 1,
              f"pid {target.pid} hot {target.hot} idle {target.idle}; pid {second.pid}")
        write_config(conf, db, target.pid, second.pid)
        errlog = open(os.path.join(tmp, "daemon.err"), "w+")
        daemon = subprocess.Popen([cpumond, "-c", conf], stderr=errlog, stdout=errlog)
        tail = subprocess.Popen([cpumond, "tail", "-f", "--json", "-d", db],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def hot_events():
            rows = query(db, "SELECT DISTINCT tid FROM events")
            return {r[0] for r in rows} >= set(hot) and rows
        check("events for the hot threads", poll(hot_events, 30),
              f"events: {query(db, 'SELECT tid, error FROM events')}")
        # Two more cycles: the cooldown (1h) must keep it at one event per thread.
        time.sleep(0.7)
        rows = query(db, "SELECT id, tid, thread, comm, usage, threshold, consecutive, "
                         "stop_us, error, pid, capture FROM events ORDER BY id")
        tids = [r[1] for r in rows]
        check("exactly the hot tids, once each", sorted(tids) == sorted(hot),
              f"got {tids}, hot {hot}, idle {target.idle + second.idle}")
        for (eid, tid, thread, comm, usage, threshold, consecutive, stop_us, error, pid,
             capture) in rows:
            stack = event_stack(db, eid)
            check(f"event {tid}: stack holds the hot chain in order", is_subsequence(HOT_CHAIN, stack),
                  f"stack {stack}, error {error!r}")
            check(f"event {tid}: fields", comm == "hotchain" and thread.startswith("hot-")
                  and usage > HOT_THRESHOLD and threshold == HOT_THRESHOLD and consecutive == 1
                  and pid == (target.pid if tid in target.hot else second.pid),
                  f"{comm!r} {thread!r} usage {usage} threshold {threshold} pid {pid}")
            # capture = auto: perf samples stop nothing.
            check(f"event {tid}: stop time recorded (0 for perf)",
                  (capture == "ptrace" and stop_us > 0) or (capture == "perf" and stop_us == 0),
                  f"{capture} {stop_us}")
        modules = query(db, "SELECT DISTINCT module, build_id FROM stack_frames WHERE symbol = 'hot_leaf'")
        check("hot_leaf's module is the target, with a build-id",
              len(modules) == 1 and modules[0][0].endswith("/hotchain") and len(modules[0][1]) >= 16,
              modules)
        hashes = query(db, "SELECT COUNT(DISTINCT stack_hash) FROM events")
        check("both processes' hot threads share one stack hash", hashes == [(1,)], hashes)
        ips = query(db, "SELECT COUNT(DISTINCT f.ip) FROM event_frames f "
                        "JOIN events e ON e.id = f.event_id WHERE f.depth = 3")
        with open("/proc/sys/kernel/randomize_va_space") as f:
            aslr = f.read().strip() != "0"
        if aslr:
            check("... at different load addresses", ips == [(2,)], ips)
        else:
            skip("... at different load addresses", "kernel.randomize_va_space=0")
        check("database file is 0640", (os.stat(db).st_mode & 0o777) == 0o640, oct(os.stat(db).st_mode))
        check("database directory is 0750",
              (os.stat(os.path.dirname(db)).st_mode & 0o777) == 0o750, "")

        # tail -f saw both within a second of their commit.
        lines = read_lines(tail.stdout, 2, 5)
        got = len(lines) >= 2
        objs = []
        for line in lines:
            if line.strip():
                try:
                    objs.append(json.loads(line))
                except ValueError:
                    pass
        check("tail -f --json follows the new events", got and len(objs) >= 2
              and {o["tid"] for o in objs} == set(hot), lines)
        if objs:
            o = objs[0]
            keys = {"time", "watch", "pid", "tid", "comm", "thread", "usage", "threshold",
                    "consecutive", "freeze_us", "stack_hash", "stack"}
            check("tail --json has the documented keys", keys <= set(o), sorted(o))
            syms = [f.get("symbol") for f in o.get("stack", [])]
            check("tail --json stack holds the chain", is_subsequence(HOT_CHAIN, syms), syms)
            check("tail --json watch names", {x.get("watch") for x in objs} == {"target", "second"},
                  [x.get("watch") for x in objs])

        p = subprocess.run([cpumond, "tail", "-d", db, "-n", "1"], capture_output=True, text=True, timeout=10)
        check("tail -n 1 prints one event with its stack",
              p.returncode == 0 and p.stdout.count("hotchain[") == 1 and "hot_leaf" in p.stdout, p.stdout)
        p = subprocess.run([cpumond, "tail", "-c", conf, "--json"], capture_output=True, text=True, timeout=10)
        check("tail -c CONF reads the configured database",
              p.returncode == 0 and len(p.stdout.splitlines()) == 2, p.stdout + p.stderr)

        # No thread left stopped or traced.
        for t in (target, second):
            for tid in t.hot + t.idle:
                st = thread_status(t.pid, tid)
                check(f"thread {tid} runs, untraced", st["State"][0] != "t" and st["TracerPid"] == "0",
                      f"{st['State']} TracerPid {st['TracerPid']}")

        # SIGHUP with a broken file keeps the daemon on the old configuration.
        with open(conf, "w") as f:
            f.write("[cpumond]\ninterval = soon\n")
        daemon.send_signal(signal.SIGHUP)

        def logged(text):
            return lambda: text in open(errlog.name).read()
        check("SIGHUP with a broken file is refused",
              poll(logged("keeping the running configuration"), 5), open(errlog.name).read())
        check("daemon still runs after the broken reload", daemon.poll() is None, daemon.returncode)
        write_config(conf, db, target.pid, second.pid, interval="200ms")
        daemon.send_signal(signal.SIGHUP)
        check("SIGHUP with a good file reloads, saying what changed",
              poll(logged(f"reloaded {conf}: interval 300ms -> 200ms\n"), 5),
              open(errlog.name).read())

        # SIGTERM: exit 0 within a second.
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        try:
            rc = daemon.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        check("SIGTERM exits 0 within a second", rc == 0 and time.monotonic() - t0 < 1.5,
              f"exit {rc} after {time.monotonic() - t0:.2f}s")
        rows = query(db, "PRAGMA integrity_check")
        check("database integrity", rows == [("ok",)], rows)
    finally:
        for p in (daemon, tail):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        target.stop()
        second.stop()


def test_traced_thread(build, tmp):
    """A hot thread already under another tracer: the event is stored
    without a stack, naming the tracer, and the thread keeps its tracer."""
    allowed, why = ptrace_allowed()
    strace = shutil.which("strace")
    if not allowed or not strace:
        skip("traced thread", why or "strace is not installed")
        return
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "traced.db")
    conf = os.path.join(tmp, "traced.conf")
    target = Target(build, threads=1, hot=1)
    tracer = daemon = None
    try:
        tid = target.hot[0]
        tracer = subprocess.Popen([strace, "-qq", "-e", "trace=none", "-o", "/dev/null",
                                   "-p", str(tid)], stderr=subprocess.DEVNULL)
        traced = poll(lambda: thread_status(target.pid, tid)["TracerPid"] != "0", 5)
        check("strace holds the hot thread", traced, "")
        # ptrace's case: a perf sample needs no attach, so with perf a
        # traced thread's stack is taken all the same.
        write_config(conf, db, target.pid, target.pid, capture="ptrace")
        daemon = subprocess.Popen([cpumond, "-c", conf], stderr=subprocess.DEVNULL)
        rows = poll(lambda: query(db, "SELECT tid, stack_hash, error FROM events"), 15)
        check("the event is stored without a stack, naming the tracer",
              rows and rows[0][0] == tid and rows[0][1] is None and "strace" in (rows[0][2] or ""),
              rows)
        check("the thread keeps its tracer",
              thread_status(target.pid, tid)["TracerPid"] == str(tracer.pid), "")
    finally:
        for p in (daemon, tracer):
            if p and p.poll() is None:
                p.terminate()
                p.wait()
        target.stop()


def stack_symbols(db, stack_hash):
    return [r[0] for r in query(db, "SELECT symbol FROM stack_frames WHERE hash = ? ORDER BY depth",
                                (stack_hash,))]


def test_episodes(build, tmp):
    """A thread that spends 80 % of its time in chain A and 20 % in chain B:
    each event samples it 30 times, its key stack is chain A, and over all
    events the samples split about 80/20."""
    allowed, why = ptrace_allowed()
    if not allowed:
        skip("episodes", why)
        return
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, "episodes.db")
    conf = os.path.join(tmp, "episodes.conf")
    target, pid, hot, _ = start_target([os.path.join(build, "tests", "twochains"),
                                     "--percent-a", "80", "--timeout", "120"])
    daemon = None
    try:
        with open(conf, "w") as f:
            f.write(f"""[cpumond]
interval = 300ms
threshold = {HOT_THRESHOLD}
starved = no
cooldown = 1s
sample_interval = 20ms
episode_samples = 30
database = {db}

[watch two]
pid = {pid}
""")
        daemon = subprocess.Popen([cpumond, "-c", conf], stderr=subprocess.DEVNULL)
        # Four events and 100 samples at least, however many a loaded
        # machine made the daemon skip.  Each sample is in chain A with
        # probability 0.8, independently (twochains draws each part's
        # chain): with 100, B is missed with probability 0.8^100 (2e-10),
        # and A has at most half of them with a probability under 1e-9.
        def enough():
            rows = query(db, "SELECT id, samples, stack_hash, episode_end FROM events ORDER BY id")
            return len(rows) >= 4 and sum(r[1] or 0 for r in rows) >= 100 and rows
        rows = poll(enough, 60)
        check("episodes: four events and 100 samples", rows,
              query(db, "SELECT id, samples, episode_end FROM events"))
        rows = rows or []
        a = b = 0
        for eid, samples, key, end in rows:
            key_syms = stack_symbols(db, key) if key is not None else []
            # On a loaded machine a thread may not stop within the dump's
            # deadline: such a sample is skipped and the episode says how
            # many, which with the ones taken make the 30 planned.
            skipped = re.match(r"cut short: (\d+) of 30 samples skipped", end or "")
            check(f"episode {eid}: 30 samples, or the skipped ones said",
                  (samples == 30 and end is None) or
                  (skipped is not None and samples + int(skipped.group(1)) == 30),
                  f"samples {samples}, end {end!r}")
            check(f"episode {eid}: key stack is a chain's",
                  is_subsequence(["chain_a_leaf", "chain_a_mid", "chain_a_root", "hot_main"], key_syms)
                  or is_subsequence(["chain_b_leaf", "chain_b_root", "hot_main"], key_syms),
                  key_syms)
            counts = query(db, "SELECT stack_hash, count FROM event_stacks WHERE event_id = ?", (eid,))
            check(f"episode {eid}: counts add up to its samples", sum(c for _, c in counts) == samples,
                  counts)
            most = max((c for _, c in counts), default=0)
            check(f"episode {eid}: the key stack is one of the most frequent",
                  any(h == key and c == most for h, c in counts), f"key {key}, counts {counts}")
            for h, c in counts:
                syms = stack_symbols(db, h)
                a += c if "chain_a_leaf" in syms else 0
                b += c if "chain_b_leaf" in syms else 0
        check("episodes: chain A has most of the samples, and B some",
              a > b > 0, f"A {a}, B {b}")
        distinct = query(db, "SELECT count(*) FROM stacks")
        check("episodes: each stack's frames stored once",
              query(db, "SELECT count(*) FROM (SELECT hash, depth FROM stack_frames GROUP BY 1, 2"
                        " HAVING count(*) > 1)") == [(0,)], distinct)
        p = subprocess.run([cpumond, "tail", "-d", db, "-n", "1", "--json"], capture_output=True,
                           text=True, timeout=10)
        try:
            o = json.loads(p.stdout)
        except ValueError:
            o = {}
        keys = [x for x in o.get("stacks", []) if x.get("key")]
        check("episodes: tail --json has samples and one key stack",
              o.get("samples", 0) >= 10 and len(keys) == 1 and keys[0]["stack_hash"] == o.get("stack_hash")
              and sum(x["count"] for x in o["stacks"]) == o["samples"], p.stdout[:500])
        # report ranks chain A before chain B under every grouping.  Both
        # chains run under hot_main in the one thread: for --by entry the
        # ignore list names hot_main too, so each chain's root is its entry.
        ignore = r"^(start_thread|__clone3?|clone3?)$"
        for by in ("exact", "signature", "top-frame", "entry"):
            regex = ignore if by != "entry" else r"^(start_thread|__clone3?|clone3?|hot_main)$"
            p = subprocess.run([cpumond, "report", "-d", db, "--by", by, "--json", "--top", "0",
                                "--ignore", regex], capture_output=True, text=True, timeout=30)
            groups = []
            for line in p.stdout.splitlines():
                try:
                    groups.append(json.loads(line))
                except ValueError:
                    pass
            names = [[f.get("symbol") for f in g.get("frames", [])] for g in groups]
            first_a = next((i for i, n in enumerate(names) if "chain_a_leaf" in n), None)
            first_b = next((i for i, n in enumerate(names) if "chain_b_leaf" in n), None)
            check(f"report --by {by} ranks chain A, then chain B",
                  p.returncode == 0 and first_a == 0 and first_b is not None and first_b > 0,
                  f"exit {p.returncode} {p.stderr[:200]} {names[:3]}")
        # Once the daemon has stopped: while it runs, an episode may hold
        # the thread in one of its stops at any moment.
        daemon.terminate()
        daemon.wait(10)
        good, bad = all_threads_run(pid, 3)
        check("episode: thread runs, untraced, once the daemon stopped", good, bad)
    finally:
        if daemon and daemon.poll() is None:
            daemon.terminate()
            daemon.wait()
        target.terminate()
        target.wait()


def test_episode_ends_when_idle(build, tmp):
    """A thread that stops burning in the middle of its episode: the episode
    ends early and the event says why."""
    allowed, why = ptrace_allowed()
    if not allowed:
        skip("episode ends when idle", why)
        return
    db = os.path.join(tmp, "idle.db")
    conf = os.path.join(tmp, "idle.conf")
    target, pid, hot, _ = start_target([os.path.join(build, "tests", "twochains"), "--burn-ms", "2000",
                                     "--timeout", "60"])
    daemon = None
    try:
        with open(conf, "w") as f:
            f.write(f"[cpumond]\ninterval = 300ms\nthreshold = {HOT_THRESHOLD}\nstarved = no\n"
                    f"sample_interval = 50ms\n"
                    f"episode_samples = 100\ndatabase = {db}\n[watch two]\npid = {pid}\n")
        daemon = subprocess.Popen([os.path.join(build, "cpumond"), "-c", conf],
                                  stderr=subprocess.DEVNULL)
        rows = poll(lambda: query(db, "SELECT samples, episode_end FROM events"), 15)
        check("episode of a thread that goes idle ends early, saying so",
              rows and rows[0][0] < 100 and "went idle" in (rows[0][1] or ""), rows)
    finally:
        if daemon and daemon.poll() is None:
            daemon.terminate()
            daemon.wait()
        target.terminate()
        target.wait()


def cycles_done(prom):
    """How many cycles the daemon has written to its metrics file PROM."""
    try:
        with open(prom) as f:
            m = re.search(r"^cpumond_cycle_seconds_count (\d+)$", f.read(), re.M)
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def test_messages(build, tmp):
    """What the daemon says: a watch that matches nothing (once, again after a
    reload), the start line's counts, what a reload changed, a changed
    database, the event line's frames, and the final count at SIGINT with
    the episode the stop cut short."""
    allowed, why = ptrace_allowed()
    if not allowed:
        skip("messages", why)
        return
    cpumond = os.path.join(build, "cpumond")
    db, other = os.path.join(tmp, "msg.db"), os.path.join(tmp, "msg-other.db")
    conf, prom = os.path.join(tmp, "msg.conf"), os.path.join(tmp, "msg.prom")
    errlog = os.path.join(tmp, "msg.err")
    target = Target(build, threads=2, hot=1)
    # A program started by its full path, as units, #! lines and pyenv
    # start python: argv[0] is not the bare name.
    marker = f"cpumond-it-{os.getpid()}"
    py = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker])
    bare = re.escape(os.path.basename(sys.executable))
    wrong = f"[watch py]\ncmdline = ^{bare} -c .* {marker}$\n"
    fixed = f"[watch fixed]\ncmdline = ^([^ ]*/)?{bare} -c .* {marker}$\n"
    daemon = None

    def write(db_path, watches):
        # An episode of 1000 samples 100 ms apart outlasts the test: the
        # SIGINT at its end cuts it short.
        with open(conf, "w") as f:
            f.write(f"[cpumond]\ninterval = 200ms\nthreshold = {HOT_THRESHOLD}\nstarved = no\ncooldown = 1h\n"
                    f"episode_samples = 1000\nsample_interval = 100ms\ndatabase = {db_path}\n"
                    f"metrics_file = {prom}\n\n[watch target]\npid = {target.pid}\n\n{watches}")

    def text():
        with open(errlog) as f:
            return f.read()

    def lines(pattern):
        return [line for line in text().splitlines() if re.search(pattern, line)]

    def reload_line(n):
        """SIGHUP, and the Nth reload's line once it is there."""
        daemon.send_signal(signal.SIGHUP)
        got = poll(lambda: len(lines(r"^cpumond: reloaded ")) >= n, 10)
        return lines(r"^cpumond: reloaded ")[n - 1] if got else None

    def said_empty(watch):
        return lines(rf'^cpumond: watch "{watch}" .*matches no process')

    try:
        nthreads = len(os.listdir(f"/proc/{target.pid}/task"))
        write(db, wrong)
        with open(conf) as f:
            line_no = f.read().splitlines().index("[watch py]") + 1
        with open(errlog, "w") as err:
            daemon = subprocess.Popen([cpumond, "-c", conf], stderr=err, stdout=err)
        check("messages: five cycles", poll(lambda: cycles_done(prom) >= 5, 20), cycles_done(prom))
        empty = said_empty("py")
        check("messages: a cmdline watch that matches nothing is said once in five cycles",
              len(empty) == 1, text())
        check("messages: ... naming its selector and line, and the regex to try",
              empty and empty[0] == f'cpumond: watch "py" at {conf}:{line_no} matches no '
              f"process (cmdline = ^{bare} -c .* {marker}$); argv[0] is often a full path: "
              f"try cmdline = ^([^ ]*/)?{bare} -c .* {marker}$", empty)
        start = lines(r"started: ")
        check("messages: the start line counts the processes and threads watched",
              start and re.search(rf"started: 2 watches, 1 process, {nthreads} threads, "
                                  rf"interval 200 ms, database {re.escape(db)}$", start[0]), start)

        line = reload_line(1)
        check("messages: a reload of the same file says no change",
              line == f"cpumond: reloaded {conf}: no change", line)
        check("messages: an empty watch is said again after a reload",
              poll(lambda: len(said_empty("py")) == 2, 10), text())

        # The regex the warning suggests matches the real process.
        write(db, fixed)
        line = reload_line(2)
        check("messages: a reload names the watches added and removed",
              line == f'cpumond: reloaded {conf}: watch "fixed" added, watch "py" removed', line)
        after = cycles_done(prom)
        check("messages: the suggested regex matches the process",
              poll(lambda: cycles_done(prom) >= after + 3, 20) and not said_empty("fixed"),
              text())

        write(other, fixed)
        line = reload_line(3)
        check("messages: a changed database is a change",
              line == f"cpumond: reloaded {conf}: database {db} -> {other}", line)
        check("messages: ... that needs a restart, and the log says which file is written",
              poll(lambda: lines(rf"^cpumond: database changed from {re.escape(db)} to "
                                 rf"{re.escape(other)}: a restart is needed; still writing "
                                 rf"{re.escape(db)}$"), 5), text())
        write(db, fixed)
        line = reload_line(4)
        check("messages: back to the database being written: no restart to ask for",
              line == f"cpumond: reloaded {conf}: database {other} -> {db}"
              and len(lines("a restart is needed")) == 1 and not os.path.exists(other), text())

        # SIGINT while the hot thread's episode is being sampled.
        def sampling():
            with open(prom) as f:
                return re.search(r'^cpumond_dumps_total\{watch="target",capture="\w+"\} [1-9]', f.read(), re.M)
        check("messages: an episode under way", poll(sampling, 20), "no dump")
        daemon.send_signal(signal.SIGINT)
        try:
            rc = daemon.wait(10)
        except subprocess.TimeoutExpired:
            rc = None
        rows = query(db, "SELECT count(*), count(CASE WHEN episode_end LIKE 'cpumond stopped%' "
                         "THEN 1 END) FROM events")
        n, cut = rows[0] if rows else (-1, -1)
        stop = lines(r"^cpumond: stopping ")
        check("messages: SIGINT exits 0", rc == 0, rc)
        check("messages: the stop cut the episode short", n >= 1 and cut >= 1, rows)
        check("messages: the final count is the events in the database, the cut one too",
              stop == [f"cpumond: stopping on SIGINT after {n} {'event' if n == 1 else 'events'}"
                       f" ({cut} {'episode' if cut == 1 else 'episodes'} cut short by the stop)"],
              f"{rows} {stop}")
        ev = lines(r"^cpumond: \[watch target\] hotchain\[")
        check("messages: the event line names the key stack's innermost functions",
              ev and all(re.search(r": hot_leaf <- hot_mid <- hot_root <- \.\.\. \(key stack "
                                   r"[0-9a-f]{16} in \d+ of \d+ samples, \d+ distinct stacks?\)",
                                   e) for e in ev), ev)
    finally:
        if daemon and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        py.kill()
        py.wait()
        target.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpumond-it-") as tmp:
        run([test_cli, test_daemon, test_traced_thread, test_episodes,
             test_episode_ends_when_idle, test_messages], args.build, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
