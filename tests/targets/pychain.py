"""pychain: a CPython target with a known chain of Python functions, for
tests/integration/test_languages.py.

    python3.11 pychain.py [--timeout S]

One thread, "hot-0", burns CPU forever in

    Thread._bootstrap -> Thread._bootstrap_inner -> Thread.run -> Worker.run
      -> sorted() (a C built-in) -> Worker.run.<locals>.key -> burn

and never returns from burn, so that every sample of it is the same chain
of Python functions, caught on one of the lines of burn's loop.  Thread.run
calls Worker.run and sorted calls key through C, so the chain spans three
runs of the interpreter's C frames.  Once the thread runs it prints,
flushing stdout:
    pid P
    hot T
    ready
and exits on SIGTERM or SIGINT, or after S seconds (default 120).
"""
import os
import signal
import sys
import threading
import time

started = threading.Event()
hot_tid = []


def burn(n):
    x = 0
    while True:
        x = (x * 31 + n) % 1000003
        n += 1
        if n > 1 << 30:
            n = 0


class Worker:
    def run(self):
        def key(v):
            hot_tid.append(threading.get_native_id())
            started.set()
            return burn(v)
        return sorted([3, 1, 2], key=key)


def main():
    timeout = 120
    if "--timeout" in sys.argv:
        timeout = float(sys.argv[sys.argv.index("--timeout") + 1])
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    t = threading.Thread(target=Worker().run, name="hot-0", daemon=True)
    t.start()
    started.wait(10)
    print(f"pid {os.getpid()}\nhot {hot_tid[0]}\nready", flush=True)
    time.sleep(timeout)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
