#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang and run each
# for its share of FUZZ_TIME seconds.  Usage: run.sh OUT_DIR [FUZZ_TIME]
# (make fuzz passes the build folder and FUZZ_TIME, default 60).
#
# Everything goes under OUT_DIR/fuzz/: the library objects (compiled here,
# -fsanitize=fuzzer-no-link,address,undefined), the targets, a working
# corpus per target seeded from tests/fuzz/corpus/<target>/ (libFuzzer
# adds to it; the source tree is never written) and crash files.  Exits
# non-zero if a target crashes or fails a check, after printing the path
# of the input that did it: replay it with `OUT_DIR/fuzz/fuzz_<target>
# FILE`, and keep it as a regression in tests/test_fuzz_regress.c
# (ao-echo's command line: tests/test_fuzz_echo.c).
set -u

out=${1:?usage: run.sh OUT_DIR [FUZZ_TIME]}
time=${2:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)
fz=$out/fuzz
clang=${FUZZ_CC:-clang}
cd "$src" || exit 1

if ! command -v "$clang" >/dev/null 2>&1; then
	echo "fuzz: $clang is missing: sudo apt-get install clang" >&2
	exit 1
fi

# The configuration header of this build folder (the same the library
# and the tools are built with).
config=$out/include/generated/aorta/config.h
make -s O="$out" "$config" || exit 1

case $(uname -m) in
x86_64 | i?86) arch=x86 ;;
aarch64) arch=arm64 ;;
*) arch=generic ;;
esac
[ -d "arch/$arch" ] || arch=generic

san='-fsanitize=address,undefined -fno-sanitize-recover=undefined'
cflags="-std=gnu11 -g -O1 -pthread -D_GNU_SOURCE -Wall -Wextra -Werror
	-fno-omit-frame-pointer $san
	-I$out/include/generated -Iarch/include -Iarch/$arch/include
	-Isync/include -Icore/include -Iio/include"
libs='-pthread -lm'
uring=$(sed -n 's/^#define AO_CONFIG_URING //p' "$config")
[ "$uring" = 1 ] && libs="$libs -luring"

# The library, every layer (ao-echo's parser needs the server).
mkdir -p "$fz/obj" || exit 1
objs=
for c in arch/*.c arch/$arch/*.c sync/*.c core/*.c io/*.c; do
	[ -f "$c" ] || continue
	[ "$c" = io/uring.c ] && [ "$uring" != 1 ] && continue
	o=$fz/obj/$(echo "$c" | tr / _ | sed 's/\.c$/.o/')
	# shellcheck disable=SC2086
	$clang $cflags -fsanitize=fuzzer-no-link -c -o "$o" "$c" || exit 1
	objs="$objs $o"
done

# target: max_len
targets='framer:4096 proto:256 load:1024 echo:512 arena:4096'
[ -f tools/echo/echo.c ] || targets='framer:4096 proto:256 load:1024 arena:4096'
n=$(echo $targets | wc -w)
share=$((time / n))
[ "$share" -ge 1 ] || share=1

for t in $targets; do
	name=${t%%:*}
	bin=$fz/fuzz_$name
	echo "  CLANG   $bin"
	# shellcheck disable=SC2086
	$clang $cflags -fsanitize=fuzzer -o "$bin" "tests/fuzz/fuzz_$name.c" \
		$objs $libs || exit 1
done

fail=0
for t in $targets; do
	name=${t%%:*}
	maxlen=${t#*:}
	bin=$fz/fuzz_$name
	corpus=$fz/corpus/$name
	log=$fz/fuzz_$name.log
	mkdir -p "$corpus" "$fz/crashes" || exit 1
	[ -d "tests/fuzz/corpus/$name" ] &&
		cp tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
	echo "  FUZZ    $name: ${share}s, max_len $maxlen"
	"$bin" -max_total_time="$share" -max_len="$maxlen" -timeout=10 \
		-rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
		-artifact_prefix="$fz/crashes/$name-" "$corpus" >"$log" 2>&1
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
