#!/bin/sh
# The cost of one stack sample to its target: cpumond's perf sampler
# against its ptrace dump against eu-stack -1, each over the no-tool
# baseline of the same run, at 13 and 1,003 tasks, quiet and busy (about
# 3 minutes).  See bench/perf_bench.py.
#   B=build bench/perf_bench.sh [perf_bench.py options]
set -eu
B=${B:-build}
make -s B="$B" "$B/bench/perf_bench" "$B/bench/stop_bench" "$B/bench/pausemeter" "$B/tests/hotchain"
exec python3 bench/perf_bench.py --build "$B" "$@"
