#!/bin/sh
# The stop a stack dump imposes on its target, as the target sees it:
# cpumond's stackdump next to eu-stack -1, gdb -p TID and the ptrace floor,
# on 10- and 1,000-thread pausemeter targets.  See bench/stop_bench.py.
#   B=build bench/stop_bench.sh [stop_bench.py options]
set -eu
B=${B:-build}
make -s B="$B" "$B/bench/stop_bench" "$B/bench/pausemeter" "$B/bench/unwindbench"
exec python3 bench/stop_bench.py --build "$B" "$@"
