#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Run the libFuzzer targets (tests/fuzz/fuzz_*.c), each for its share of
# FUZZ_TIME seconds.  Usage: run.sh FUZZ_OUT [FUZZ_TIME]: make fuzz builds
# the targets with clang into FUZZ_OUT/tests/fuzz/ (the Makefile's fuzz
# rules link each with the objects it tests), then runs this.
#
# A working corpus per target is seeded from tests/fuzz/corpus/<target>/
# into FUZZ_OUT/corpus/ (libFuzzer adds to it; the source tree is never
# written), crash files go to FUZZ_OUT/crashes/.  Exits non-zero if a
# target crashes or fails a check, after printing the path of the input
# that did it: replay it with `FUZZ_OUT/tests/fuzz/fuzz_<target> FILE`,
# and keep it as a regression in tests/test_fuzz_regress.c (ao-echo's
# command line: tests/test_fuzz_echo.c; the arena: test_fuzz_arena.c).
set -u

out=${1:?usage: run.sh FUZZ_OUT [FUZZ_TIME]}
time=${2:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src" || exit 1

# target: max_len
targets='framer:4096 proto:256 load:1024 echo:512 arena:4096
	ws_frame:4096 ws_upgrade:2048 ws_client:2048'
n=$(echo $targets | wc -w)
share=$((time / n))
[ "$share" -ge 1 ] || share=1

fail=0
for t in $targets; do
	name=${t%%:*}
	maxlen=${t#*:}
	bin=$out/tests/fuzz/fuzz_$name
	corpus=$out/corpus/$name
	log=$out/fuzz_$name.log
	mkdir -p "$corpus" "$out/crashes" || exit 1
	[ -d "tests/fuzz/corpus/$name" ] &&
		cp tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
	echo "  FUZZ    $name: ${share}s, max_len $maxlen"
	"$bin" -max_total_time="$share" -max_len="$maxlen" -timeout=10 \
		-rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
		-artifact_prefix="$out/crashes/$name-" "$corpus" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 |
		sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	units=$(ls "$corpus" | wc -l)
	if [ "$rc" -ne 0 ]; then
		fail=1
		echo "  FUZZ    FAIL $name (exit $rc): log $log"
		grep -E 'check failed|ERROR: |SUMMARY: ' "$log" | head -n 5
		grep 'Test unit written to' "$log" |
			sed 's/.*Test unit written to /  FUZZ    crash input: /'
	else
		echo "  FUZZ    ok   $name: ${runs:-?} runs, cov ${cov:-?}," \
			"corpus $units"
	fi
done
if [ "$fail" -ne 0 ]; then
	echo 'fuzz: FAILED'
	exit 1
fi
echo 'fuzz: no crash'
