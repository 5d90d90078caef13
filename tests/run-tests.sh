#!/bin/sh
# SPDX-License-Identifier: MIT
# Run every CMocka runner given, each under a time limit; print each
# runner's output as it goes, then each runner's CMocka summary again at the
# end, then what went wrong in each runner that failed (its failed tests and
# the last lines of its output, so that a CI log's tail names the culprit),
# and a last "N passed, N failed" line.  Exit non-zero if any failed.
limit=${AO_TEST_TIMEOUT:-600}
pass=0
fail=0
summary=""
failures=""
for t in "$@"; do
	log="$t.log"
	echo "  TEST    $t"
	t0=$(date +%s)
	if timeout -k 10 "$limit" "$t" >"$log" 2>&1; then
		rc=0
	else
		rc=$?
	fi
	secs=$(($(date +%s) - t0))
	cat "$log"
	n_ok=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
	n_bad=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
	pass=$((pass + ${n_ok:-0}))
	fail=$((fail + ${n_bad:-0}))
	if [ "$rc" -ne 0 ] && [ -z "$n_bad" ]; then
		# Crashed or timed out before CMocka could count.
		fail=$((fail + 1))
		summary="$summary
$t: exit status $rc (crash or timeout)"
	fi
	summary="$summary
$t: ${secs}s
$(grep -E '^\[ *(=+|PASSED|FAILED|SKIPPED) *\]' "$log" | tail -n 4)"
	if [ "$rc" -ne 0 ]; then
		failures="$failures
FAILED: $t (exit status $rc), failed tests and last lines:
$(grep -E '^\[  (ERROR|FAILED) +\]' "$log" | head -n 6)
$(tail -n 8 "$log")"
	fi
done
echo
echo "Summary of the CMocka runners:$summary"
echo
[ -z "$failures" ] || printf '%s\n\n' "$failures"
echo "check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
