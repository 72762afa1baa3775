#!/bin/sh
# Runs the cmocka unit tests given as arguments, then the integration tests,
# and ends with the one summary line CI reads: "N passed, N failed".
# Exit status 0 only when nothing failed.
set -u
B=${B:-build}
# The live unit tests start these targets; the build directory's own.
export HOTCHAIN="$B/tests/hotchain" STACKCASES="$B/tests/stackcases"
passed=0 failed=0 skipped=0 failed_names=
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# count: adds the "[  PASSED  ] N", "[  FAILED  ] N" and "[  SKIPPED ] N"
# counts of every group in $out.
count() {
	for what in PASSED FAILED SKIPPED; do
		n=$(sed -n "s/^\[  $what *\] \([0-9]*\) test.*/\1/p" "$out" |
			awk '{ s += $1 } END { print s + 0 }')
		case $what in
		PASSED) passed=$((passed + n)) ;;
		FAILED) failed=$((failed + n)) ;;
		SKIPPED) skipped=$((skipped + n)) ;;
		esac
	done
}

for t in "$@"; do
	echo "== $t"
	"$t" >"$out" 2>&1
	rc=$?
	cat "$out"
	count
	if [ "$rc" -ne 0 ]; then
		failed_names="$failed_names $(basename "$t")"
		# A crash prints no FAILED line: count it.
		grep -q '^\[  FAILED  \]' "$out" || failed=$((failed + 1))
	fi
done

# Each integration script ends with "N passed, N failed, N skipped".
for script in tests/integration/run.py tests/integration/test_report.py \
	tests/integration/test_service.py tests/integration/test_fleet.py \
	tests/integration/test_docs.py tests/stackdump/compare.py; do
	echo "== $script"
	python3 "$script" --build "$B" >"$out" 2>&1
	rc=$?
	cat "$out"
	last=$(tail -n 1 "$out")
	summary='^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$'
	p=$(echo "$last" | sed -n "s/$summary/\\1/p")
	f=$(echo "$last" | sed -n "s/$summary/\\2/p")
	s=$(echo "$last" | sed -n "s/$summary/\\3/p")
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	if [ "$rc" -ne 0 ]; then
		failed_names="$failed_names $(basename "$script")"
		[ -z "$f" ] && failed=$((failed + 1))
	fi
done

[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ -z "$failed_names" ]
