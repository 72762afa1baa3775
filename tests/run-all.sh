#!/bin/sh
# Runs cpumond's test suites and ends with the one summary line CI reads:
# "N passed, N failed, N skipped".  Exit status 0 only when nothing failed.
#
#   tests/run-all.sh [UNIT_BINARY...]  the cmocka binaries given, then every
#                        tests/integration/test_*.py and tests/stackdump/test_*.py
#                        (make check)
#   SUITE=faults tests/run-all.sh      every tests/faults/test_*.py (make
#                        check-faults): kills, other tracers, a broken or full
#                        database, hostile names, pid reuse, a soak, valgrind
#
#   TEST=NAME        only the suite NAME: a unit binary (test_config), an
#                    integration or stackdump script (test_daemon,
#                    test_compare), or a fault script (test_stopped), from
#                    either command
#   TEST_FILTER=PAT  inside each suite, only the tests whose names match the
#                    shell pattern PAT (cmocka's filter; tests/testlib.py's)
#   B=DIR            the build directory (build-sanitize: ASan+UBSan)
#   FAULTS_LONG=1    the fault suite's long versions (10,000 dumps, 100
#                    kills, a 30-minute soak); SOAK_SECONDS=N and
#                    VALGRIND_SECONDS=N set those two lengths
#
# A cmocka binary prints "[  PASSED  ] N test(s)." (and FAILED, SKIPPED) per
# group; a script prints "ok - …" / "not ok - …" / "skip - …" per check and
# ends with "N passed, N failed, N skipped".  A suite that crashes or times
# out prints no count of its failures: it counts as one.
set -u
B=${B:-build}
export B
cd "$(dirname "$0")/.." || exit 1
# The live unit tests start these targets; the build directory's own.
export HOTCHAIN="$B/tests/hotchain" STACKCASES="$B/tests/stackcases"
passed=0 failed=0 skipped=0 failed_names=
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)

# wanted PATH: whether TEST (unset: every suite) names the suite at PATH.
wanted() {
	[ -z "${TEST:-}" ] || [ "$(basename "$1" .py)" = "$TEST" ]
}

# add_cmocka: adds every group's "[  PASSED  ] N", "[  FAILED  ] N" and
# "[  SKIPPED ] N" in $out.
add_cmocka() {
	for what in PASSED FAILED SKIPPED; do
		n=$(sed -n "s/^\[  $what *\] \([0-9]*\) test.*/\1/p" "$out" |
			awk '{ s += $1 } END { print s + 0 }')
		case $what in
		PASSED) passed=$((passed + n)) ;;
		FAILED) failed=$((failed + n)) ;;
		SKIPPED) skipped=$((skipped + n)) ;;
		esac
	done
	grep -q '^\[  FAILED  \]' "$out"
}

# add_script: adds the closing "N passed, N failed, N skipped" of $out.
add_script() {
	summary='^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$'
	last=$(tail -n 1 "$out")
	p=$(echo "$last" | sed -n "s/$summary/\\1/p")
	f=$(echo "$last" | sed -n "s/$summary/\\2/p")
	s=$(echo "$last" | sed -n "s/$summary/\\3/p")
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	[ -n "$f" ]
}

# run_suite KIND PATH: runs one suite, a cmocka binary or a python script.
run_suite() {
	t0=$(date +%s)
	echo "== $2"
	if [ "$1" = unit ]; then
		"$2" >"$out" 2>&1
	else
		# A scenario that hangs must not hang CI: 40 min covers the
		# fault suite's long soak.
		timeout -k 10 2400 python3 "$2" --build "$B" >"$out" 2>&1
	fi
	rc=$?
	cat "$out"
	if [ "$1" = unit ]; then add_cmocka; else add_script; fi
	counted=$?
	if [ "$rc" -ne 0 ]; then
		failed_names="$failed_names $(basename "$2")"
		if [ "$counted" -ne 0 ]; then
			failed=$((failed + 1))
			echo "not ok - $2: exit $rc, no count of its failures"
		fi
	fi
	echo "== $2: $(( $(date +%s) - t0 )) s"
}

if [ "${SUITE:-}" = faults ]; then
	scripts="tests/faults/test_*.py"
else
	for t in "$@"; do
		wanted "$t" && run_suite unit "$t"
	done
	scripts="tests/integration/test_*.py tests/stackdump/test_*.py"
	# TEST may name a fault script from make check too.
	[ -n "${TEST:-}" ] && scripts="$scripts tests/faults/test_*.py"
fi
for script in $scripts; do
	[ -f "$script" ] && wanted "$script" && run_suite script "$script"
done

[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "# $(( $(date +%s) - start )) s"
if [ -n "${TEST:-}" ] && [ $((passed + failed + skipped)) -eq 0 ]; then
	echo "not ok - TEST=$TEST names no suite"
	failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ -z "$failed_names" ]
