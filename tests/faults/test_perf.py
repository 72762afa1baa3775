#!/usr/bin/env python3
"""Perf episodes (capture = perf, issue 17 point 3): no perf event outlives
its episode, and the target is never stopped.

- the hot threads exit mid-episode (faulty, short lives), the process execs
  mid-episode (spinexec): each episode ends saying so, and the daemon is
  left with no perf descriptor (/proc/DAEMON/fd links
  "anon_inode:[perf_event]" counted);
- SIGHUP (a reload) during an episode: it runs on and its descriptors go
  when it ends; SIGTERM: exit 0, the episode stored as cut short by the
  stop; SIGKILL: the kernel takes the events with the descriptors, the
  target runs on;
- three hot threads at once under max_dumps_per_second = 1: one episode at
  a time, two descriptors at most, the others stored as "too many episodes
  at once".
All along, every thread of the target is polled: never in state t, never
traced.  Every wait polls with a deadline.
"""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Daemon, check, main, poll, query, skip, start_target, stop,  # noqa: E402
                    write_config)
from testlib import StateWatch, perf_allowed, perf_fds  # noqa: E402


def count(db, sql):
    """SQL's count, 0 while the database is not there yet."""
    rows = query(db, sql)
    return rows[0][0] if rows else 0


def perf_samples(prom):
    """The perf samples the metrics file PROM counts (0 before it exists)."""
    try:
        with open(prom) as f:
            m = re.search(r'^cpumond_dumps_total\{watch="target",capture="perf"\} (\d+)$',
                          f.read(), re.M)
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def config(tmp, name, pid, **opts):
    db, conf = os.path.join(tmp, f"{name}.db"), os.path.join(tmp, f"{name}.conf")
    base = dict(capture="perf", sample_interval="20ms", episode_samples=1000)
    base.update(opts)
    write_config(conf, db, [("target", {"pid": pid})], **base)
    return db, conf


def target_ok(name, watch):
    check(f"{name}: the target's threads were never stopped or traced",
          watch.reads > 0 and not watch.bad, f"{watch.reads} reads, {watch.bad[:5]}")


def no_perf_fds_left(name, daemon):
    check(f"{name}: no perf descriptor left in the daemon",
          poll(lambda: perf_fds(daemon.pid) == 0, 15), f"{perf_fds(daemon.pid)} left")


class Episodes:
    """The daemon on CONF, and every thread of PID watched (StateWatch) with
    the daemon's perf descriptors, for a with block that ends with the
    checks every scenario makes: no perf descriptor left in the daemon
    once its episodes are over, no thread of the target ever stopped."""

    def __init__(self, build, tmp, name, conf, pid):
        self.name = name
        self.daemon = Daemon(build, conf, tmp, name.replace(" ", "-"))
        self.watch = StateWatch(pid, None, fds_of=self.daemon.pid)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        try:
            if kind is None:
                no_perf_fds_left(self.name, self.daemon)
                target_ok(self.name, self.watch.stop())
        finally:
            self.watch.stop()
            self.daemon.stop()


def test_perf_exit(build, tmp):
    """Hot threads that live 600..1500 ms: episodes end at their exits."""
    proc, pid, hot, _ = start_target([os.path.join(build, "tests", "faulty"), "--hot", "1",
                                      "--life-ms", "600:1500", "--total", "8", "--timeout", "120"])
    try:
        ok, why = perf_allowed(build, hot[0]) if hot else (False, "no hot thread")
        if not ok:
            skip("perf exit", why)
            return
        db, conf = config(tmp, "exit", pid, cooldown="0")
        with Episodes(build, tmp, "perf exit", conf, pid) as e:
            # The exit is seen either by the ring (POLLHUP: "thread exited
            # after N samples") or, on a loaded machine, first by the unwind
            # of a sample taken just before it ("stopped after N samples:
            # tid T exited"): both end the episode at the exit.
            exited = poll(lambda: count(db, "SELECT count(*) FROM events WHERE capture = 'perf' "
                                            "AND (episode_end LIKE 'thread exited after%' OR "
                                            "episode_end LIKE 'stopped after % exited')") >= 2, 60)
            check("perf exit: episodes end when their thread exits", exited,
                  query(db, "SELECT tid, capture, samples, episode_end, error FROM events"))
            check("perf exit: the daemon held perf descriptors meanwhile", e.watch.max_fds > 0,
                  e.watch.max_fds)
            check("perf exit: the target finished its work", poll(lambda: proc.poll() == 0, 60),
                  proc.poll())
            check("perf exit: the daemon still runs", e.daemon.alive(), e.daemon.log()[-500:])
    finally:
        stop(proc)


def test_perf_exec(build, tmp):
    """The hot thread execs its program again, with its pid and tid, three
    times, each after 3 s of burn: an episode of 1,000 samples (20 s) is
    always under way at the exec, and ends there."""
    proc, pid, hot, _ = start_target([os.path.join(build, "tests", "spinexec"), "--spin-ms",
                                      "3000", "--execs", "3"])
    try:
        ok, why = perf_allowed(build, pid) if pid else (False, "spinexec not ready")
        if not ok:
            skip("perf exec", why)
            return
        db, conf = config(tmp, "exec", pid, cooldown="0")
        with Episodes(build, tmp, "perf exec", conf, pid):
            rows = poll(lambda: query(db, "SELECT id, samples, episode_end FROM events WHERE "
                                          "capture = 'perf' AND episode_end LIKE "
                                          "'the process exec''d after%'"), 60)
            check("perf exec: an episode ends at the exec", rows,
                  query(db, "SELECT tid, capture, samples, episode_end, error FROM events"))
            exe = query(db, "SELECT exe FROM events")
            check("perf exec: the events are the target's", exe and all(
                  e[0].endswith("spinexec") for e in exe), exe)
    finally:
        stop(proc)


def hot_target(build, hot=1):
    return start_target([os.path.join(build, "tests", "hotchain"), "--threads", str(hot + 1),
                         "--hot", str(hot), "--timeout", "120"])


def test_perf_signals(build, tmp):
    """SIGHUP, SIGTERM, SIGKILL while an episode's perf event is open."""
    proc, pid, hot, _ = hot_target(build)
    watch = None
    try:
        ok, why = perf_allowed(build, hot[0]) if hot else (False, "no hot thread")
        if not ok:
            skip("perf signals", why)
            return
        watch = StateWatch(pid, None)
        # SIGHUP: the episode (50 samples, about a second) runs on after
        # the reload, and its descriptors go when it ends.
        db, conf = config(tmp, "hup", pid, cooldown="1h", episode_samples=50)
        daemon = Daemon(build, conf, tmp, "hup")
        opened = poll(lambda: perf_fds(daemon.pid), 30)
        check("perf SIGHUP: the episode opened its perf event", opened, daemon.log()[-500:])
        daemon.proc.send_signal(signal.SIGHUP)
        check("perf SIGHUP: reloaded", poll(lambda: "reloaded" in daemon.log(), 10),
              daemon.log()[-500:])
        check("perf SIGHUP: the episode ended and was stored",
              poll(lambda: count(db, "SELECT count(*) FROM events"), 30), query(db, "SELECT capture, samples, episode_end FROM events"))
        no_perf_fds_left("perf SIGHUP", daemon)
        check("perf SIGHUP: SIGTERM exits 0", daemon.stop() == 0, daemon.log()[-500:])

        # SIGTERM mid-episode (1,000 samples: 20 s at least), once it has
        # samples (the metrics file, rewritten every cycle, counts them).
        prom = os.path.join(tmp, "term.prom")
        db, conf = config(tmp, "term", pid, cooldown="1h", metrics_file=prom)
        daemon = Daemon(build, conf, tmp, "term")
        opened = poll(lambda: perf_fds(daemon.pid) and perf_samples(prom), 30)
        check("perf SIGTERM: the episode has perf samples", opened, daemon.log()[-500:])
        check("perf SIGTERM: exits 0", daemon.stop() == 0, daemon.log()[-500:])
        rows = query(db, "SELECT capture, episode_end FROM events")
        check("perf SIGTERM: the episode is stored, cut short by the stop",
              rows and rows[0][0] == "perf" and rows[0][1].startswith("cpumond stopped after"),
              rows)

        # SIGKILL mid-episode: the descriptors die with the process.
        db, conf = config(tmp, "kill", pid, cooldown="1h")
        daemon = Daemon(build, conf, tmp, "kill")
        opened = poll(lambda: perf_fds(daemon.pid), 30)
        check("perf SIGKILL: the episode opened its perf event", opened, daemon.log()[-500:])
        daemon.kill()
        check("perf SIGKILL: the daemon is gone, and its descriptors with it",
              not os.path.exists(f"/proc/{daemon.pid}/fd"), daemon.pid)
        check("perf SIGKILL: the target runs on", proc.poll() is None, proc.poll())
        watch.stop()
        target_ok("perf signals", watch)
    finally:
        if watch:
            watch.stop()
        stop(proc)


def test_perf_bounded(build, tmp):
    """Three hot threads trip at once under max_dumps_per_second = 1: one
    perf episode at a time (its two descriptors), the others none."""
    proc, pid, hot, _ = hot_target(build, 3)
    try:
        ok, why = perf_allowed(build, hot[0]) if hot else (False, "no hot thread")
        if not ok:
            skip("perf bounded", why)
            return
        db, conf = config(tmp, "bounded", pid, cooldown="1h", max_dumps_per_second=1,
                          episode_samples=100)
        with Episodes(build, tmp, "perf bounded", conf, pid) as e:
            # cooldown 1h: one event per hot thread.
            rows = poll(lambda: len(query(db, "SELECT tid FROM events WHERE tid IN (?, ?, ?)",
                                          tuple(hot))) >= 3, 60)
            events = query(db, "SELECT tid, capture, samples, episode_end, error FROM events")
            check("perf bounded: an event for each hot thread", rows, events)
            check("perf bounded: two perf descriptors at most (one episode)",
                  0 < e.watch.max_fds <= 2, e.watch.max_fds)
            check("perf bounded: the episodes over the limit are said",
                  any((ev[4] or "").startswith("too many episodes at once") for ev in events),
                  events)
    finally:
        stop(proc)


if __name__ == "__main__":
    sys.exit(main([test_perf_exit, test_perf_exec, test_perf_signals, test_perf_bounded]))
