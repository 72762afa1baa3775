#!/bin/sh
# The fault suite (GitHub issue #7): kills, other tracers, a broken or full
# database, hostile names, pid reuse, a soak, valgrind.  `make check-faults`
# runs it after building the programs and the test targets into $B.
#
# Each tests/faults/test_*.py prints "ok - …" / "not ok - …" / "skip - …"
# per check (and "# …" lines with figures) and ends with
# "N passed, N failed, N skipped"; this adds them up and ends with one such
# line.  Exit status 0 only when nothing failed.
#
#   B=build-sanitize  the ASan+UBSan build (make check-faults SANITIZE=1)
#   FAULTS_LONG=1     the long versions: 10,000 dumps, 100 kills, 30-min soak
#   FAULTS_ONLY=NAME  only tests/faults/test_NAME.py (e.g. FAULTS_ONLY=soak)
#   SOAK_SECONDS=N, VALGRIND_SECONDS=N  other lengths for those two
#
# Needs root for ptrace of the targets, mount (full disk) and unshare (pid
# reuse); each scenario skips, saying why, when it cannot run.
set -u
B=${B:-build}
export B
cd "$(dirname "$0")/../.." || exit 1
passed=0 failed=0 skipped=0 failed_names=
out=$(mktemp)
trap 'rm -f "$out"' EXIT
summary='^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$'
start=$(date +%s)

for script in tests/faults/test_*.py; do
	name=$(basename "$script" .py)
	name=${name#test_}
	if [ -n "${FAULTS_ONLY:-}" ] && [ "$name" != "$FAULTS_ONLY" ]; then
		continue
	fi
	t0=$(date +%s)
	echo "== $script"
	# A scenario that hangs must not hang CI: 40 min covers the long soak.
	timeout -k 10 2400 python3 "$script" --build "$B" >"$out" 2>&1
	rc=$?
	cat "$out"
	last=$(tail -n 1 "$out")
	p=$(echo "$last" | sed -n "s/$summary/\\1/p")
	f=$(echo "$last" | sed -n "s/$summary/\\2/p")
	s=$(echo "$last" | sed -n "s/$summary/\\3/p")
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	if [ "$rc" -ne 0 ]; then
		failed_names="$failed_names $name"
		# A crash or a timeout prints no summary: count it.
		[ -z "$f" ] && failed=$((failed + 1)) && echo "not ok - $script: exit $rc, no summary"
	fi
	echo "== $script: $(( $(date +%s) - t0 )) s"
done

[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "# fault suite: $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ -z "$failed_names" ]
