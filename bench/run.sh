#!/bin/sh
# make bench: cpumond's own cost, measured side by side in one run and
# printed as markdown.  See bench/README.md for how to read it.
#
#  1. sampling cost per cycle at NS threads, at the daemon's cadence:
#     the sampler and the pread floor interleaved in one process
#     (sampler_bench), then pidstat -t and top -H -b on the same target
#  2. the daemon's steady state (CPU share, RSS) over DAEMON_SECONDS
#  3. gating: its saving on an idle process, its detection latency
#  4. many watched processes: 200 by pid, 200 by comm, all = yes; the
#     same processes by unit and by cgroup (moved into a cgroup of their
#     own), each before an all = yes watch, against comm before it
#  5. the stop time of a stack dump (bench/stop_bench.sh, when present)
#  6. thread churn (bench/churn.sh) for CHURN_SECONDS (0: skipped)
#  8. what reading a CPython thread's frames adds to the stop
#     (pystop_bench): dumps of tests/targets/pychain.py's hot thread with
#     native frames only and with Python frames, alternating, one dumper
#  9. what names at read time cost report and tail (bench/names_bench.py):
#     a database of NAMES_EVENTS events read with the stored names and
#     with the frames named again from split debug files, alternating
# 10. the usage history (history_bench): its bytes a day at 1,000 threads
#     with 10 kept a 3 s cycle, and what it adds to a cycle (on, off)
#     against sampling and against a cycle's transaction with one event,
#     HISTORY_ROUNDS rounds in rotating order
# 11. the cost of one stack sample to the target, perf (stackdump/
#     perfsample.c) against ptrace against eu-stack, over the no-tool
#     baseline of the same run (bench/perf_bench.py), quiet and busy
# 12. the daemon's own CPU per stack sample, capture = perf against
#     capture = ptrace, each over a daemon with no episode
#     (bench/capture_cpu_bench.py)
# 13. starved events at 1000 idle threads: the sampler gated with them off,
#     on (the host's pressure as it is), and on where any wait is possible
# 14. stall detection (bench/stall_bench): a cycle at 1,000 idle threads
#     with stall_after off and on, in the same rounds, gated and not
#
# Knobs: NS, CYCLES, INTERVAL_MS, TOOL_CYCLES, DAEMON_SECONDS, DAEMON_NS,
# MANY, MANY_SECONDS, CHURN_SECONDS, GATE_THRESHOLD, GATE_INTERVAL_MS, GATE_REPS,
# LIBPROC2=1 (adds libproc2's row), NAMES_EVENTS, NAMES_RUNS (section 9),
# PY_REPS (dumps in section 8), HISTORY_ROUNDS (section 10, 400),
# SECTIONS (default "1 2 3 4 5 6 8 9 10 11 12 13 14").
set -eu
B=${B:-build}
HERE=$(dirname "$(readlink -f "$0")")
NS=${NS:-10 100 1000 9990}
CYCLES=${CYCLES:-10}
INTERVAL_MS=${INTERVAL_MS:-3000}
TOOL_CYCLES=${TOOL_CYCLES:-3}
DAEMON_SECONDS=${DAEMON_SECONDS:-60}
DAEMON_NS=${DAEMON_NS:-1000 10000}
MANY=${MANY:-200}
MANY_SECONDS=${MANY_SECONDS:-30}
CHURN_SECONDS=${CHURN_SECONDS:-60}
SECTIONS=${SECTIONS:-1 2 3 4 5 6 8 9 10 11 12 13 14}
interval_s=$((INTERVAL_MS / 1000))
[ "$interval_s" -ge 1 ] || interval_s=1

work=$(mktemp -d /tmp/cpumond-bench.XXXXXX)
targets=
bench_cgroup=      # made by section 4, removed at the end
cleanup() {
	for p in $targets; do kill "$p" 2>/dev/null || true; done
	if [ -n "$bench_cgroup" ]; then
		i=0
		while ! rmdir "$bench_cgroup" 2>/dev/null && [ "$i" -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
		[ -z "$bench_slice" ] || rmdir "$bench_slice" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# start_target THREADS HOT: starts hotchain and sets $target to its pid.
start_target() {
	out="$work/target.$$.$1.$2"
	"$B/tests/hotchain" --threads "$1" --hot "$2" --timeout 3600 >"$out" &
	target=$!
	targets="$targets $target"
	i=0
	until grep -q '^ready' "$out" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -lt 600 ] || { echo "hotchain --threads $1 did not start" >&2; exit 1; }
		sleep 0.1
	done
}
stop_target() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
# tool_cycle COMMAND...: µs of CPU per cycle of COMMAND, whose @ stands for
# its cycle count: the whole CPU of a run of 1 + TOOL_CYCLES cycles less that
# of a run of 1 cycle, over TOOL_CYCLES.  Both runs go to their end, so a
# tool starved of CPU on a busy machine still counts all its cycles, and
# start-up cancels out.
tool_cycle() {
	short=$(echo "$*" | sed 's/@/1/'); long=$(echo "$*" | sed "s/@/$((TOOL_CYCLES + 1))/")
	a=$("$B/bench/cpuwatch" -- $short); b=$("$B/bench/cpuwatch" -- $long)
	awk -v a="$(kv whole_cpu_ms "$a")" -v b="$(kv whole_cpu_ms "$b")" -v k="$TOOL_CYCLES" \
		'BEGIN { printf "%.0f", (b - a) * 1000 / k }'
}
# kv KEY LINE: the value of KEY=VALUE in LINE.
kv() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
# col N ROW: the Nth cell of a markdown table row.
col() { echo "$2" | awk -F'|' -v n="$1" '{ gsub(/^ +| +$/, "", $(n + 1)); print $(n + 1) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f×", a / b; else print "—" }'; }
has() { case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

echo "# cpumond bench"
echo
echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'), kernel $(uname -r), $(nproc) CPUs" \
	"($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
echo

if has 1; then
	echo "## 1. Sampling cost per cycle, at ${INTERVAL_MS} ms cadence"
	echo
	echo "Target: \`hotchain --threads N --hot 1\` (N + 1 tasks).  sampler_bench runs the sampler and"
	echo "the pread floor (getdents64 + pread of a kept schedstat per thread) in rotating order"
	echo "in one process, ${CYCLES} rounds ${INTERVAL_MS} ms apart; CPU per cycle is the median of"
	echo "CLOCK_PROCESS_CPUTIME_ID per cycle.  pidstat/top: the same target right after, at"
	echo "${interval_s} s: the CPU (wait4) of a run of $((TOOL_CYCLES + 1)) cycles less that of a run of 1, over"
	echo "${TOOL_CYCLES} (start-up cancels out).  (9,990 rather than 10,000 threads: the"
	echo "sampler and the floor keep a descriptor per thread each, and 2 × 10,001 does not fit"
	echo "a 20,000 hard RLIMIT_NOFILE.)"
	echo
	methods=sampler,floor
	[ "${LIBPROC2:-0}" = 1 ] && methods=$methods,libproc2
	summary="$work/summary"
	: >"$summary"
	header=--header
	for n in $NS; do
		start_target "$n" 1
		rows=$("$B/bench/sampler_bench" --pid "$target" --cycles "$CYCLES" \
			--interval-ms "$INTERVAL_MS" --methods "$methods" $header)
		header=
		echo "$rows"
		srow=$(echo "$rows" | grep '^| cpumond sampler |')
		frow=$(echo "$rows" | grep '^| pread floor |')
		tasks=$(col 2 "$srow")
		pid_us=$(tool_cycle pidstat -t -p "$target" "$interval_s" @)
		top_us=$(tool_cycle top -H -b -d "$interval_s" -p "$target" -n @)
		echo "$tasks $(col 5 "$srow") $(col 5 "$frow") $(col 9 "$srow") $pid_us $top_us" >>"$summary"
		stop_target "$target"
	done
	echo
	echo "Summary (µs of CPU per cycle; ratios within this run):"
	echo
	echo "| tasks | sampler | pread floor | sampler / floor (same round) | pidstat -t | top -H -b | µs per thread: sampler / pidstat / top | pidstat / sampler | top / sampler |"
	echo "|---|---|---|---|---|---|---|---|---|"
	while read -r tasks s f r p t; do
		per=$(awk -v s="$s" -v p="$p" -v t="$t" -v n="$tasks" 'BEGIN { printf "%.2f / %.1f / %.1f", s / n, p / n, t / n }')
		echo "| $tasks | $s | $f | $r | $p | $t | $per | $(ratio "$p" "$s") | $(ratio "$t" "$s") |"
	done <"$summary"
	lin=$(awk '$1 > 900 && $1 < 1100 { a = $2 / $1 } $1 > 9000 && $1 < 11000 { b = $2 / $1 }
		END { if (a > 0 && b > 0) printf "%.2f× per thread, %.1f× for 10,000 threads (goal ≤ 11×)", b / a, 10 * b / a; else print "n/a" }' "$summary")
	echo
	echo "Linearity, sampler cost per thread at ~10,000 / at 1,000 threads: $lin"
	echo
fi

# daemon_row TASKS HOT THRESHOLD LABEL: the daemon on a fresh target.
daemon_row() {
	start_target "$1" "$2"
	conf="$work/daemon.conf"
	printf '[cpumond]\ninterval = %s\nthreshold = %s\ncooldown = 1h\ndatabase = %s/d.db\n[watch t]\npid = %s\n' \
		"${interval_s}s" "$3" "$work" "$target" >"$conf"
	rm -f "$work"/d.db*
	"$B/cpumond" -c "$conf" 2>"$work/daemon.err" &
	d=$!
	line=$("$B/bench/cpuwatch" --pid "$d" --skip-s $((2 * interval_s + 1)) --seconds "$DAEMON_SECONDS")
	kill "$d"; wait "$d" 2>/dev/null || true
	stop_target "$target"
	cycles=$((DAEMON_SECONDS / interval_s))
	echo "| $1 + 1 | $4 | $3 | $(kv cpu_ms "$line") | $(kv share_pct "$line") % |" \
		"$(awk -v c="$(kv cpu_ms "$line")" -v k="$cycles" 'BEGIN { printf "%.0f", c * 1000 / k }') |" \
		"$(kv rss_kb "$line") | $(kv anon_kb "$line") | $(kv hwm_kb "$line") | $(kv fds "$line") |"
}

if has 2; then
	echo "## 2. The daemon's steady state, interval ${interval_s} s, ${DAEMON_SECONDS} s"
	echo
	echo "\`cpumond -c CONF\` watching one \`hotchain\` by pid, cooldown 1 h (the hot thread's one"
	echo "dump falls in the first cycles, left out).  CPU: the daemon's process CPU clock read at"
	echo "$((2 * interval_s + 1)) s and ${DAEMON_SECONDS} s later (no polling in between); share of one core."
	echo "Threshold 1‰ keeps the gate shut (every thread read every cycle, the worst case);"
	echo "at 800‰ the process is gated whenever its total stays under 80 % of a core (the hot"
	echo "thread's core is shared with this noisy machine's other work)."
	echo
	echo "| tasks | target | threshold ‰ | CPU ms | share of one core | µs per cycle | RSS KiB | RssAnon KiB | VmHWM KiB | fds |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for n in $DAEMON_NS; do
		daemon_row "$n" 1 1 "1 hot (gate shut)"
		daemon_row "$n" 1 800 "1 hot"
		daemon_row "$n" 0 800 "all idle (gated)"
	done
	echo
fi

if has 3; then
	echo "## 3. Gating"
	echo
	echo "Saving, on \`hotchain --threads 1000 --hot 0\` (mostly idle), ${CYCLES} rounds ${INTERVAL_MS} ms apart:"
	echo "the sampler with the gate at 800‰, without it, the floor, and the two costs the gate"
	echo "weighs (the listing alone; the process CPU clock it reads instead)."
	echo
	start_target 1000 0
	"$B/bench/sampler_bench" --pid "$target" --cycles "$CYCLES" --interval-ms "$INTERVAL_MS" \
		--methods gated,sampler,floor,enum,clock --header
	stop_target "$target"
	echo
	echo "Detection latency (bench/gate_bench: two samplers, with and without the gate, in the"
	echo "same cycles; cycles after the change until the thread is seen over the threshold,"
	echo "0 = not within 8 cycles).  Threshold and gate ${GATE_THRESHOLD:-300}‰: a hot thread on a busy"
	echo "2-core machine often gets less than 80 % of a core, and then neither sampler sees it."
	echo
	"$B/bench/gate_bench" --threads 1000 --interval-ms "${GATE_INTERVAL_MS:-500}" --reps "${GATE_REPS:-3}" \
		--threshold "${GATE_THRESHOLD:-300}"
	echo
fi

# many_row LABEL CONF_BODY: the daemon's cost per cycle with CONF_BODY's watches.
many_row() {
	conf="$work/many.conf"
	printf '[cpumond]\ninterval = %s\nthreshold = 800\ncooldown = 1h\ndatabase = %s/m.db\n%b' \
		"${interval_s}s" "$work" "$2" >"$conf"
	rm -f "$work"/m.db*
	"$B/cpumond" -c "$conf" 2>"$work/many.err" &
	d=$!
	sleep $((2 * interval_s + 1))
	# Does a cycle scan /proc?  Count the opens of /proc itself over 3 cycles.
	scans=$(timeout $((3 * interval_s)) strace -e trace=openat -p "$d" 2>&1 | grep -c '"/proc", O_RDONLY.*O_DIRECTORY' || true)
	line=$("$B/bench/cpuwatch" --pid "$d" --skip-s 1 --seconds "$MANY_SECONDS")
	kill "$d"; wait "$d" 2>/dev/null || true
	cycles=$((MANY_SECONDS / interval_s))
	echo "| $1 | $(awk -v c="$(kv cpu_ms "$line")" -v k="$cycles" 'BEGIN { printf "%.0f", c * 1000 / k }') |" \
		"$(kv share_pct "$line") % | $(kv rss_kb "$line") | $(kv anon_kb "$line") | $(kv fds "$line") | $scans |"
}

if has 4; then
	echo "## 4. Many watched processes"
	echo
	echo "${MANY} \`hotchain --threads 4 --hot 0\` (5 tasks each) and one \`hotchain --threads 3000 --hot 0\`;"
	echo "host: $(ls /proc | grep -c '^[0-9]') processes before they start.  The daemon at ${interval_s} s for ${MANY_SECONDS} s,"
	echo "threshold 800; \"/proc scans\": opens of /proc itself (one per scan) during 3 cycles, by strace."
	echo
	many_pids=
	for i in $(seq "$MANY"); do
		"$B/tests/hotchain" --threads 4 --hot 0 --timeout 3600 >/dev/null &
		many_pids="$many_pids $!"
		targets="$targets $!"
	done
	start_target 3000 0
	big=$target
	sleep 2
	host_threads=$(cat /proc/[0-9]*/status 2>/dev/null | awk '/^Threads/ { s += $2 } END { print s }')
	echo "Host now: $(ls /proc | grep -c '^[0-9]') processes, $host_threads threads."
	echo
	echo "| watches | µs per cycle | share of one core | RSS KiB | RssAnon KiB | fds | /proc scans in 3 cycles |"
	echo "|---|---|---|---|---|---|---|"
	body=
	k=0
	for p in $many_pids; do
		k=$((k + 1))
		body="$body[watch p$k]\npid = $p\n"
	done
	many_row "${MANY} × [watch] pid = P" "$body"
	many_row "1 × [watch] comm = hotchain (${MANY} + 1 processes)" "[watch h]\ncomm = hotchain\n"
	many_row "1 × [watch] all = yes" "[watch all]\nall = yes\n"
	# The same processes by unit and by cgroup: moved into
	# system.slice/cpumond-bench.service of the cgroup v2 hierarchy (the
	# unified one on a hybrid host), which makes that their unit.  Each
	# watch comes before all = yes, so that every process of the host is
	# checked against it and sampled: the rows differ by the selector only.
	unified=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/") { print $5; exit } break } }' /proc/self/mountinfo)
	if [ -n "$unified" ]; then
		bench_slice=
		[ -d "$unified/system.slice" ] || { mkdir "$unified/system.slice" && bench_slice=$unified/system.slice; }
		bench_cgroup=$unified/system.slice/cpumond-bench.service
		mkdir -p "$bench_cgroup"
		for p in $many_pids $big; do echo "$p" >"$bench_cgroup/cgroup.procs"; done
		many_row "1 × comm = hotchain, then 1 × all = yes" \
			"[watch h]\ncomm = hotchain\n[watch all]\nall = yes\n"
		many_row "1 × unit = cpumond-bench.service, then 1 × all = yes" \
			"[watch u]\nunit = cpumond-bench.service\n[watch all]\nall = yes\n"
		many_row "1 × cgroup = ^/system\.slice/cpumond-bench\.service\$, then 1 × all = yes" \
			"[watch c]\ncgroup = ^/system\\\\.slice/cpumond-bench\\\\.service\$\n[watch all]\nall = yes\n"
		for p in $many_pids $big; do echo "$p" >"$unified/cgroup.procs" 2>/dev/null || true; done
	else
		echo "| unit, cgroup | not measured: no cgroup v2 hierarchy mounted at its root | | | | | |"
	fi
	for p in $many_pids; do stop_target "$p"; done
	stop_target "$big"
	echo
fi

if has 5; then
	echo "## 5. Stop time of a stack dump"
	echo
	if [ -x "$HERE/stop_bench.sh" ]; then
		B="$B" "$HERE/stop_bench.sh" || echo "**bench/stop_bench.sh failed (exit status $?)**"
	else
		echo "bench/stop_bench.sh is not there yet: skipped."
	fi
	echo
fi

if has 6 && [ "$CHURN_SECONDS" -gt 0 ]; then
	echo "## 6. Thread churn"
	echo
	B="$B" CHURN_SECONDS="$CHURN_SECONDS" CHURN_EVERY=$((CHURN_SECONDS < 60 ? CHURN_SECONDS / 2 : 60)) \
		"$HERE/churn.sh" || echo "**churn check failed**"
	echo
fi

if has 8; then
	echo "## 8. Python frames in the stop"
	echo
	if [ ! -x /usr/bin/python3.11 ]; then
		echo "not measured: /usr/bin/python3.11 is missing (apt-get install python3.11)"
	else
		out="$work/pychain.out"
		/usr/bin/python3.11 "$HERE/../tests/targets/pychain.py" --timeout 3600 >"$out" &
		py=$!
		targets="$targets $py"
		i=0
		until grep -q '^ready' "$out" 2>/dev/null; do
			i=$((i + 1))
			[ "$i" -lt 100 ] || { echo "pychain.py did not start" >&2; exit 1; }
			sleep 0.1
		done
		echo "Thread hot-0 of tests/targets/pychain.py under /usr/bin/python3.11, ${PY_REPS:-400} dumps 20 ms apart by one dumper, the two kinds alternating (µs; the stop is interrupt to detach as cpumond times it):"
		echo
		echo "| dumps | n | stop median | stop p99 | Python reads in it, median | p99 | top frame burn |"
		echo "|---|---|---|---|---|---|---|"
		"$B/bench/pystop_bench" --pid "$py" --tid "$(sed -n 's/^hot //p' "$out")" \
			--reps "${PY_REPS:-400}" || echo "**pystop_bench failed**"
		kill "$py" 2>/dev/null || true
	fi
	echo
fi

if has 9; then
	echo "## 9. Names at read time"
	echo
	python3 "$HERE/names_bench.py" --build "$B" --events "${NAMES_EVENTS:-10000}" \
		--runs "${NAMES_RUNS:-7}" || echo "**names_bench failed**"
	echo
fi

if has 10; then
	echo "## 10. Usage history"
	echo
	echo "A day of history (28,800 cycles of 10 of 1,000 threads), one transaction a cycle:"
	echo
	"$B/bench/history_bench" --size --db "$work/history.db" || echo "**history_bench --size failed**"
	echo
	echo "What it adds to a cycle at 1,000 threads, 10 kept, ${HISTORY_ROUNDS:-400} rounds in rotating order (sample: sampler_cycle; off/on: record_history + record_flush with history_threads 0 / 10; event: a cycle's transaction with one 20-frame event):"
	echo
	"$B/bench/history_bench" --cost --cycles "${HISTORY_ROUNDS:-400}" --db "$work/cost.db" ||
		echo "**history_bench --cost failed**"
	echo
fi

if has 11; then
	echo "## 11. A stack sample by perf, by ptrace, by eu-stack"
	echo
	python3 "$HERE/perf_bench.py" --build "$B" || echo "**perf_bench failed**"
	echo
fi

if has 12; then
	echo "## 12. The daemon's CPU per stack sample, perf against ptrace"
	echo
	python3 "$HERE/capture_cpu_bench.py" --build "$B" || echo "**capture_cpu_bench failed**"
	echo
fi

if has 13; then
	echo "## 13. Starved events"
	echo
	echo "On \`hotchain --threads 1000 --hot 0\` (idle), ${CYCLES} rounds ${INTERVAL_MS} ms apart, the"
	echo "sampler with the gate at 800‰: starved events off (starved = no), on with this host's"
	echo "CPU pressure as it is during the run, and on where any wait is possible (no PSI, or"
	echo "pressure that allows one): then no gate, and every thread that did not run has its state"
	echo "read.  The ungated sampler and the floor for scale.  The host's some avg10 before: $(sed -n 's/^some avg10=\([0-9.]*\).*/\1/p' /proc/pressure/cpu 2>/dev/null || echo none)."
	echo
	start_target 1000 0
	"$B/bench/sampler_bench" --pid "$target" --cycles "$CYCLES" --interval-ms "$INTERVAL_MS" \
		--methods gated,starved,starved-any,sampler,floor --header
	stop_target "$target"
	echo
fi

if has 14; then
	echo "## 14. Stall detection"
	echo
	echo "\`hotchain --threads 1000 --hot 0\` (idle in pthread_cond_wait); bench/stall_bench: two samplers,"
	echo "stall_after off and on (two intervals), alternating in the same ${CYCLES} rounds ${INTERVAL_MS} ms"
	echo "apart, CPU per cycle (CLOCK_PROCESS_CPUTIME_ID).  Gate 800: the process used no CPU, so both"
	echo "skip its threads; gate 0: every thread read.  The first checks (each thread classified"
	echo "once, from its stat, syscall and wchan, when it reaches stall_after) are the one-time cost."
	echo
	start_target 1000 0
	"$B/bench/stall_bench" --pid "$target" --cycles "$CYCLES" --interval-ms "$INTERVAL_MS"
	echo
	"$B/bench/stall_bench" --pid "$target" --cycles "$CYCLES" --interval-ms "$INTERVAL_MS" --gate 0
	stop_target "$target"
	echo
fi
