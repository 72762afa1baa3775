#!/bin/sh
# Runs every test binary given as an argument (the cmocka unit tests), then
# the integration tests, and ends with one summary line that CI reads:
# "N passed, N failed".  Exit status 0 only when nothing failed.
set -u
B=${B:-build}
passed=0 failed=0 failed_names=
for t in "$@"; do
	echo "== $t"
	if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $t"; fi
done
echo "== tests/integration/run.py"
if python3 tests/integration/run.py --build "$B"; then
	passed=$((passed + 1))
else
	failed=$((failed + 1)); failed_names="$failed_names integration"
fi
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
