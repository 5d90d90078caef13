#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Instructions per uncontended lock+unlock pair, counted by callgrind, with
# the lock statistics compiled out (aorta must take at most 12).
#
#	sh tools/bench/lockbench-insns.sh [N]
#
# Builds build-nostats/ (make LOCK_STATS=0 O=build-nostats bench), runs
# `lockbench --pairs=N --lock=L` under callgrind collecting only inside the
# noinline pairs_L() loop, and divides by N.  The loop itself (counter,
# compare, branch) is included; `none` shows what it costs alone.
set -eu

n=${1:-1000000}
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/build-nostats
bin=$out/tools/bench/lockbench

if ! command -v valgrind >/dev/null 2>&1; then
	echo "lockbench-insns: valgrind is not installed; nothing measured"
	exit 0
fi

make -C "$top" -s LOCK_STATS=0 O=build-nostats \
	build-nostats/tools/bench/lockbench >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "instructions per uncontended lock+unlock pair (callgrind, N=$n," \
     "LOCK_STATS=0):"
for lock in aorta mutex seed none; do
	fn=pairs_$lock
	valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$lock" \
		--toggle-collect="$fn" "$bin" --pairs="$n" --lock="$lock" \
		>/dev/null 2>&1
	ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/cg.$lock")
	awk -v l="$lock" -v ir="$ir" -v n="$n" 'BEGIN {
		printf "  %-6s %6.2f  (%d Ir / %d pairs)\n", l, ir / n, ir, n
	}'
done
