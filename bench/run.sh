#!/bin/sh
# make bench: sampling cost per cycle at several thread counts, cpumond's
# sampler next to the pread floor and libproc2, in one run.  See bench/README.md.
set -eu
B=${B:-build}
NS=${NS:-10 100 1000}
CYCLES=${CYCLES:-30}
INTERVALS=${INTERVALS:-0 1000}
echo "| method | threads | interval ms | cycles | CPU µs/cycle median | p90 | µs per thread | ratio to floor |"
echo "|---|---|---|---|---|---|---|---|"
for n in $NS; do
	out=$(mktemp)
	"$B/tests/hotchain" --threads "$n" --hot 1 --timeout 600 >"$out" &
	target=$!
	i=0
	until grep -q '^ready' "$out"; do
		i=$((i + 1)); [ "$i" -lt 300 ] || { echo "hotchain did not start" >&2; kill "$target"; exit 1; }
		sleep 0.1
	done
	for iv in $INTERVALS; do
		"$B/bench/sampler_bench" --pid "$target" --cycles "$CYCLES" --interval-ms "$iv"
	done
	kill "$target"; wait "$target" 2>/dev/null || true
	rm -f "$out"
done
