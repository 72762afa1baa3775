#!/bin/sh
# bench/churn.sh: thread churn.  A target starts and ends CHURN_RATE threads a
# second (tests/targets/churn.c, 1 of them hot) for CHURN_SECONDS; the real
# daemon watches it (memory and descriptors every CHURN_EVERY s) and
# churn_bench runs the sampler on it, logging every sample, which
# churn_check.py then holds against the target's own log of which thread
# lived under which tid when.
#
# Runs in a new PID namespace whose pid_max is CHURN_PID_MAX (Linux >= 6.14
# has one per namespace), so that tids are reused within seconds instead of
# once per pid_max of the whole host.  Needs root (unshare).
#
#   B=build CHURN_SECONDS=600 bench/churn.sh
set -eu
B=$(readlink -f "${B:-build}")
RATE=${CHURN_RATE:-1000}
DURATION=${CHURN_SECONDS:-600}
EVERY=${CHURN_EVERY:-60}
PID_MAX=${CHURN_PID_MAX:-8192}
HERE=$(dirname "$(readlink -f "$0")")

if [ -z "${CHURN_INSIDE:-}" ]; then
	exec unshare --pid --fork --mount-proc env CHURN_INSIDE=1 "$0" "$@"
fi

dir=$(mktemp -d /tmp/cpumond-churn.XXXXXX)
if echo "$PID_MAX" >/proc/sys/kernel/pid_max 2>/dev/null; then
	reuse="pid_max $PID_MAX in this PID namespace"
else
	reuse="pid_max $(cat /proc/sys/kernel/pid_max) (could not lower it: few tids will be reused)"
fi
"$B/tests/churn" --rate "$RATE" --hot 1 --log "$dir/truth" --timeout $((DURATION + 60)) >"$dir/out" &
target=$!
until grep -q '^ready' "$dir/out" 2>/dev/null; do sleep 0.1; done
sleep 3   # let the population grow to its steady size
printf '[cpumond]\ninterval = 3s\nthreshold = 800\ndatabase = %s/db\n[watch churn]\npid = %s\n' \
	"$dir" "$target" >"$dir/conf"
"$B/cpumond" -c "$dir/conf" 2>"$dir/daemon.err" &
daemon=$!
"$B/bench/churn_bench" --pid "$target" --seconds "$DURATION" --every-s "$EVERY" \
	--log "$dir/samples" >"$dir/bench.out" &
bench=$!

mem() { # pid -> "rss anon fds"
	awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} END {printf "%s %s ", r, a}' "/proc/$1/status"
	ls "/proc/$1/fd" | wc -l
}
echo "Thread churn: ${RATE} threads started and ended per second, $reuse, ${DURATION} s."
echo
echo "| t (s) | target threads | daemon RSS KiB | daemon RssAnon KiB | daemon fds |"
echo "|---|---|---|---|---|"
t=0
while [ "$t" -le "$DURATION" ]; do
	set -- $(mem "$daemon")
	echo "| $t | $(awk '/^Threads/ {print $2}' /proc/$target/status) | $1 | $2 | $3 |"
	[ "$t" -ge "$DURATION" ] && break
	step=$EVERY; [ $((t + step)) -gt "$DURATION" ] && step=$((DURATION - t))
	sleep "$step"; t=$((t + step))
done
wait "$bench" || true
kill "$daemon" "$target" 2>/dev/null || true
wait "$daemon" 2>/dev/null || true
echo
echo "churn_bench (the sampler in-process, gate 800‰), first and last report:"
echo
echo '```'
head -n 1 "$dir/bench.out"; tail -n 1 "$dir/bench.out"
echo '```'
echo
echo "Attribution check (bench/churn_check.py):"
echo
echo '```'
python3 "$HERE/churn_check.py" "$dir/truth" "$dir/samples" && ok=0 || ok=1
echo '```'
echo "daemon events: $(grep -c 'thread .* at .*‰' "$dir/daemon.err" || true); logs in $dir"
[ -n "${CHURN_KEEP:-}" ] || rm -f "$dir/truth" "$dir/samples" "$dir/db"*
exit $ok
