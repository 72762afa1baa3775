#!/usr/bin/env python3
"""Integration tests of cpumond across many hosts (issue #8).

- Prometheus: the daemon writes metrics_file into a directory that Debian's
  prometheus-node-exporter exports (textfile collector only), a prometheus
  of the test's own scrapes it every second with contrib/cpumond-alerts.yml
  loaded, and its HTTP API must answer increase(cpumond_overload_events_total
  [1m]) > 0 for the watch with the hot thread, and no other; the alert
  CpumondThreadOverload must fire for it.  promtool checks the metrics file
  and the rule file, and runs contrib/cpumond-alerts.test.yml.
- The event log: JSON lines in event_log; after `mv` and SIGHUP new events go
  to a new file and none to the old one.
- Key stacks across hosts: two runs of the daemon on two hotchain processes
  (two load addresses) write two databases; their host columns are then
  rewritten with sqlite3 to stand for two hosts.  `cpumond report -d a.db -d
  b.db` must cluster the key stack of both into one group with both hosts,
  the exact hashes being equal while the instruction addresses differ.

Every process started here is killed before the end; the packaged services
are neither used nor needed.  Parts skip, saying why, when ptrace is not
permitted or the Prometheus packages are missing.

Prints "ok - NAME" / "not ok - NAME: why" / "skip - NAME: why" and ends with
"N passed, N failed, N skipped"; exit status 1 when something failed.
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402
from testlib import check, poll, ptrace_allowed, query, skip, stop, summary  # noqa: E402
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALERTS = os.path.join(REPO, "contrib", "cpumond-alerts.yml")
ALERTS_TEST = os.path.join(REPO, "contrib", "cpumond-alerts.test.yml")
LOGROTATE = os.path.join(REPO, "contrib", "logrotate.d", "cpumond")
PACKAGES = "apt-get install prometheus prometheus-node-exporter (make test-deps)"

started = []   # every Popen of this test, stopped by stop_all


def start(argv, log=None, **kw):
    out = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if log else out,
                         stdin=subprocess.DEVNULL, **kw)
    started.append(p)
    return p


def stop_all():
    for p in reversed(started):
        stop(p)


class Target(testlib.Target):
    """A hotchain that this test stops even when it fails half way."""

    def __init__(self, build, threads, hot):
        super().__init__(build, threads, hot)
        started.append(self.proc)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# No proxy from the environment for the loopback.
http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url):
    try:
        with http.open(url, timeout=5) as r:
            return r.status, r.read().decode()
    except OSError as e:
        return None, str(e)


def prom_query(port, q):
    status, body = get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    if status != 200:
        return None
    doc = json.loads(body)
    return doc["data"]["result"] if doc.get("status") == "success" else None


def write_config(path, db, pid, metrics=None, event_log=None):
    with open(path, "w") as f:
        f.write(f"""[cpumond]
interval = 300ms
threshold = {testlib.HOT_THRESHOLD}
starved = no
cooldown = 1s
database = {db}
journal = no
""")
        if metrics:
            f.write(f"metrics_file = {metrics}\n")
        if event_log:
            f.write(f"event_log = {event_log}\n")
        f.write(f"""
[watch hot]
pid = {pid}

[watch quiet]
comm = no-such-proc-x
""")


def json_lines(path):
    """The lines of PATH parsed; None for a line that is not JSON."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    return out


def have_prometheus():
    missing = [p for p in ("prometheus", "promtool", "prometheus-node-exporter") if not shutil.which(p)]
    return (not missing), f"{', '.join(missing)} not installed: {PACKAGES}"


def start_prometheus(tmp, textdir):
    """node_exporter (textfile collector only) and prometheus scraping it
    every second.  Returns (prometheus port, why not) ."""
    node_port, prom_port = free_port(), free_port()
    start(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}",
           "--collector.disable-defaults", "--collector.textfile",
           f"--collector.textfile.directory={textdir}", "--web.disable-exporter-metrics"],
          log=os.path.join(tmp, "node_exporter.log"))
    conf = os.path.join(tmp, "prometheus.yml")
    with open(conf, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {ALERTS}
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ['127.0.0.1:{node_port}']
""")
    start(["prometheus", f"--config.file={conf}",
           f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
           f"--web.listen-address=127.0.0.1:{prom_port}"],
          log=os.path.join(tmp, "prometheus.log"))
    node_up = poll(lambda: get(f"http://127.0.0.1:{node_port}/metrics")[0] == 200, 30, 0.2)
    prom_up = poll(lambda: get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200, 60, 0.3)
    if not node_up:
        return None, "node_exporter did not answer in 30 s (see node_exporter.log)"
    if not prom_up:
        return None, "prometheus was not ready in 60 s (see prometheus.log)"
    return prom_port, ""


def test_promtool_files():
    ok, why = have_prometheus()
    if not ok:
        skip("promtool check rules contrib/cpumond-alerts.yml", why)
        skip("promtool test rules contrib/cpumond-alerts.test.yml", why)
        return
    p = subprocess.run(["promtool", "check", "rules", ALERTS], capture_output=True, text=True, timeout=60)
    check("promtool check rules contrib/cpumond-alerts.yml", p.returncode == 0, p.stdout + p.stderr)
    p = subprocess.run(["promtool", "test", "rules", os.path.basename(ALERTS_TEST)],
                       capture_output=True, text=True, timeout=60, cwd=os.path.dirname(ALERTS_TEST))
    check("promtool test rules contrib/cpumond-alerts.test.yml", p.returncode == 0, p.stdout + p.stderr)


def test_logrotate_file(tmp):
    if not shutil.which("logrotate"):
        skip("logrotate -d accepts contrib/logrotate.d/cpumond", "logrotate not installed")
        return
    conf = os.path.join(tmp, "logrotate.conf")
    log = os.path.join(tmp, "rot", "events.json")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(LOGROTATE) as f:
        text = f.read().replace("/var/log/cpumond/events.json", log)
    with open(conf, "w") as f:
        f.write(text.replace("create 0640 cpumond cpumond", "create 0640 root root"))
    with open(log, "w") as f:
        f.write("{}\n")
    # -d -f: parses and says what a rotation would do; rotates nothing and
    # runs no script (its pkill would signal every cpumond of the machine).
    p = subprocess.run(["logrotate", "-d", "-f", "-s", os.path.join(tmp, "rot", "state"), conf],
                       capture_output=True, text=True, timeout=30)
    check("logrotate -d accepts contrib/logrotate.d/cpumond",
          p.returncode == 0 and "error" not in p.stderr.lower(), p.stderr[-500:])


def run_host(build, tmp, name, prometheus=False):
    """Runs the daemon on a hotchain of its own until it has key stacks, with
    the metrics file, the event log and (first run) Prometheus.  Returns the
    database path, or None."""
    cpumond = os.path.join(build, "cpumond")
    db = os.path.join(tmp, f"{name}.db")
    conf = os.path.join(tmp, f"{name}.conf")
    textdir = os.path.join(tmp, "textfile")
    metrics = os.path.join(textdir, "cpumond.prom")
    event_log = os.path.join(tmp, "events.json")
    os.makedirs(textdir, exist_ok=True)
    prom_port, why = None, ""
    if prometheus:
        ok, why = have_prometheus()
        if ok:
            prom_port, why = start_prometheus(tmp, textdir)
    target = Target(build, threads=2, hot=1)
    daemon = None
    try:
        if not check(f"{name}: hotchain started", target.pid and len(target.hot) == 1,
                     f"pid {target.pid} hot {target.hot}"):
            return None
        write_config(conf, db, target.pid, metrics if prometheus else None,
                     event_log if prometheus else None)
        daemon = start([cpumond, "-c", conf], log=os.path.join(tmp, f"{name}.daemon.log"))
        def stacked():
            rows = query(db, "SELECT count(*) FROM events WHERE stack_hash IS NOT NULL "
                             "AND watch = 'hot'")
            return rows and rows[0][0] >= 2
        if not check(f"{name}: events with key stacks in {os.path.basename(db)}", poll(stacked, 40),
                     f"events: {query(db, 'SELECT tid, watch, error FROM events')}"):
            return None
        if prometheus:
            test_event_log(daemon, event_log)
            test_metrics_file(metrics)
            if prom_port:
                test_prometheus(prom_port)
            else:
                for n in ("prometheus: increase(cpumond_overload_events_total[1m]) > 0 for watch hot",
                          "prometheus: alert CpumondThreadOverload fires for watch hot"):
                    skip(n, why)
        return db
    finally:
        stop(daemon)
        target.stop()
        if daemon is not None:
            check(f"{name}: the daemon stopped cleanly on SIGTERM", daemon.returncode == 0,
                  f"exit {daemon.returncode}")


def test_event_log(daemon, path):
    lines = json_lines(path)
    check("event_log: one valid JSON object per line", lines and None not in lines,
          f"{len(lines)} lines, {lines.count(None)} not JSON")
    good = [e for e in lines if e]
    check("event_log: events of watch hot with their key stack",
          good and all(e.get("watch") == "hot" and len(e.get("stack_hash", "")) == 16 and e.get("host")
                       and e.get("stack") for e in good), json.dumps(good[:1])[:400])
    # logrotate: rename, then SIGHUP; the daemon opens a new file.
    rotated = path + ".1"
    os.rename(path, rotated)
    daemon.send_signal(signal.SIGHUP)
    new = poll(lambda: [e for e in json_lines(path) if e], 30)
    check("event_log: after mv and SIGHUP new events go to a new file", new,
          f"{path} {'missing' if not os.path.exists(path) else 'empty'}")
    if not new:
        return
    old = [e for e in json_lines(rotated) if e]
    check("event_log: the new file's events follow the rotated file's",
          all(isinstance(e.get("id"), int) for e in new + old)
          and min(e["id"] for e in new) > max(e["id"] for e in old),
          f"ids old {[e.get('id') for e in old]} new {[e.get('id') for e in new]}")
    # Once the new file has an event, the rotated one gets no more.
    size = os.path.getsize(rotated)
    n = len(new)
    more = poll(lambda: len(json_lines(path)) > n, 20)
    check("event_log: the rotated file gets no more events",
          more and os.path.getsize(rotated) == size,
          f"new file grew: {bool(more)}; rotated {size} -> {os.path.getsize(rotated)} bytes")


def test_metrics_file(path):
    ok = poll(lambda: os.path.exists(path), 10)
    if not check("metrics_file is written", ok, f"{path} missing"):
        return
    check("metrics_file leaves no temporary file", not os.path.exists(path + ".tmp")
          or poll(lambda: not os.path.exists(path + ".tmp"), 2), os.listdir(os.path.dirname(path)))
    with open(path) as f:
        text = f.read()
    names = ["cpumond_overload_events_total", "cpumond_dumps_total", "cpumond_dump_failures_total",
             "cpumond_dump_stop_seconds", "cpumond_threads_watched", "cpumond_processes_watched",
             "cpumond_thread_usage_max_permille", "cpumond_cycle_seconds"]
    check("metrics_file: every metric with HELP and TYPE",
          all(f"# HELP {n} " in text and f"# TYPE {n} " in text for n in names), text[:500])
    check("metrics_file: labels carry no thread id or stack hash",
          "tid=" not in text and "hash=" not in text and "pid=" not in text, text[:300])
    ok, why = have_prometheus()
    if not ok:
        skip("promtool check metrics accepts metrics_file", why)
        return
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    check("promtool check metrics accepts metrics_file", p.returncode == 0 and not p.stdout.strip()
          and not p.stderr.strip(), p.stdout + p.stderr)


def test_prometheus(port):
    q = "increase(cpumond_overload_events_total[1m]) > 0"
    result = poll(lambda: prom_query(port, q), 60, 1.0)
    watches = sorted(r["metric"].get("watch", "") for r in result or [])
    print(f"# prometheus: {q} -> " + json.dumps(
        [{"metric": r["metric"], "value": r["value"][1]} for r in result or []]), flush=True)
    check(f"prometheus: {q} for watch hot", watches == ["hot"],
          f"result {result!r}; up: {prom_query(port, 'up')}")
    alerts = poll(lambda: prom_query(port, 'ALERTS{alertname="CpumondThreadOverload",'
                                           'alertstate="firing"}'), 20, 1.0)
    check("prometheus: alert CpumondThreadOverload fires for watch hot",
          alerts and sorted(a["metric"].get("watch") for a in alerts) == ["hot"], repr(alerts))


def rewrite_host(db, host):
    """Stands for a database written on HOST: the host column is all that
    tells two hosts' events apart."""
    con = sqlite3.connect(db, timeout=10)
    try:
        con.execute("UPDATE events SET host = ?", (host,))
        con.commit()
    finally:
        con.close()


def u64(v):
    return v & 0xffffffffffffffff


def test_two_hosts(build, a, b):
    cpumond = os.path.join(build, "cpumond")
    rewrite_host(a, "host-a")
    rewrite_host(b, "host-b")
    keys_a = {u64(r[0]) for r in query(a, "SELECT stack_hash FROM events WHERE stack_hash IS NOT NULL")}
    keys_b = {u64(r[0]) for r in query(b, "SELECT stack_hash FROM events WHERE stack_hash IS NOT NULL")}
    common = keys_a & keys_b
    if not check("hosts: the key stack hash is the same on both hosts", common,
                 f"a: {sorted(map(hex, keys_a))} b: {sorted(map(hex, keys_b))}"):
        return
    # The most frequent common key stack.
    key = max(common, key=lambda h: len([1 for r in query(a, "SELECT stack_hash FROM events")
                                          if r[0] is not None and u64(r[0]) == h]))
    signed = key - (1 << 64) if key >= 1 << 63 else key

    def frames(db):
        rows = query(db, """SELECT f.depth, f.ip, f.offset FROM event_frames f
                            JOIN events e ON e.id = f.event_id
                            WHERE e.stack_hash = ? AND f.depth > 0
                            ORDER BY e.id, f.depth""", (signed,))
        return {d: (ip, off) for d, ip, off in rows}   # return addresses: one per depth
    fa, fb = frames(a), frames(b)
    with open("/proc/sys/kernel/randomize_va_space") as f:
        aslr = f.read().strip() != "0"
    depths = sorted(set(fa) & set(fb))
    if aslr:
        check("hosts: equal hashes although the return addresses differ",
              depths and all(fa[d][0] != fb[d][0] for d in depths)
              and all(fa[d][1] == fb[d][1] for d in depths),
              f"a: {[(d, hex(fa[d][0]), hex(fa[d][1])) for d in depths]} "
              f"b: {[(d, hex(fb[d][0]), hex(fb[d][1])) for d in depths]}")
    else:
        skip("hosts: equal hashes although the return addresses differ",
             "kernel.randomize_va_space=0: both runs loaded at the same address")

    p = subprocess.run([cpumond, "report", "-d", a, "-d", b, "--json", "--top", "0"],
                       capture_output=True, text=True, timeout=60)
    groups = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
    g = [x for x in groups if x["group"] == f"{key:016x}"]
    check("report -d a -d b --json: the key stack is one group with both hosts",
          len(g) == 1 and [h["host"] for h in sorted(g[0]["hosts"], key=lambda h: h["host"])]
          == ["host-a", "host-b"] and g[0]["host_count"] == 2
          and {pr["host"] for pr in g[0]["processes"]} == {"host-a", "host-b"},
          (p.stderr + p.stdout)[:600])
    p = subprocess.run([cpumond, "report", "-d", a, "-d", b, "--json", "--top", "0",
                        "--by", "signature"], capture_output=True, text=True, timeout=60)
    groups = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
    hot = [x for x in groups if "hot_leaf" in x["signature"]]
    check("report --by signature: the hot chain of both hosts is one group",
          len(hot) == 1 and hot[0]["host_count"] == 2,
          f"{len(hot)} groups: {[(x['signature'], x['hosts']) for x in hot]}")
    p = subprocess.run([cpumond, "report", "-d", a, "-d", b], capture_output=True, text=True, timeout=60)
    check("report -d a -d b: the table names both hosts",
          p.returncode == 0 and " on 2 hosts " in p.stdout and "hosts: host-" in p.stdout
          and "@host-a" in p.stdout and "@host-b" in p.stdout, (p.stdout + p.stderr)[:600])
    p = subprocess.run([cpumond, "report", "-d", a, "-d", b, "--host", "host-b", "--json"],
                       capture_output=True, text=True, timeout=60)
    check("report --host host-b: only that host",
          p.returncode == 0 and p.stdout and "host-a" not in p.stdout, (p.stdout + p.stderr)[:300])
    p = subprocess.run([cpumond, "report", "-d", a, "-d", a, "--json"],
                       capture_output=True, text=True, timeout=60)
    check("report -d a -d a: one file given twice is read once, with a warning",
          p.returncode == 0 and "same database" in p.stderr, p.stderr[:300])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    atexit.register(stop_all)
    with tempfile.TemporaryDirectory(prefix="cpumond-fleet-") as tmp:
        try:
            test_promtool_files()
            test_logrotate_file(tmp)
            allowed, why = ptrace_allowed()
            if not os.path.exists(os.path.join(args.build, "cpumond")) or \
                    not os.path.exists(os.path.join(args.build, "tests", "hotchain")):
                skip("fleet: daemon runs", f"{args.build}/cpumond or tests/hotchain not built")
            elif not allowed:
                skip("fleet: daemon runs", why)
            else:
                a = run_host(args.build, tmp, "a", prometheus=True)
                b = run_host(args.build, tmp, "b")
                if a and b:
                    test_two_hosts(args.build, a, b)
                else:
                    skip("hosts: report across two databases", "a daemon run failed")
        finally:
            stop_all()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
