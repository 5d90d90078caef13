#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Instructions per arm+cancel pair of one hot timer (and per move of a
# random pending timer), counted by callgrind: aorta's timers against the
# binary heap and the red-black tree of tools/bench/baseline.
#
#	sh tools/bench/timerbench-insns.sh [N] [PENDING]
#
# Builds the default configuration (build/, as shipped), runs
# `timerbench --pairs=N --impl=I --pending=P [--op=rearm]` under callgrind
# collecting only inside the noinline loop (hot_I or rearm_I), and divides
# by N.  The loop itself (the deadline from a table, the counter, the
# error check) is included; `none` shows what it costs alone.  PENDING is
# a list of how many other timers are pending (default "0 10000"); the
# moves (rearm) are counted where it is not 0.  The clock is read outside
# the loop, once per 1024 pairs, except by aorta-delay (ao_timer_arm with
# a delay, which reads it at every arm).
set -eu

n=${1:-200000}
pending=${2:-"0 10000"}
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$top/build/tools/bench/timerbench

if ! command -v valgrind >/dev/null 2>&1; then
	echo "timerbench-insns: valgrind is not installed; nothing measured"
	exit 0
fi

make -C "$top" -s build/tools/bench/timerbench >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

count() { # impl op pending fn
	valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
		--toggle-collect="$4" "$bin" --pairs="$n" --impl="$1" \
		--op="$2" --pending="$3" >/dev/null 2>&1
	sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/cg"
}

echo "instructions per arm+cancel pair, or per move (callgrind, N=$n):"
for p in $pending; do
	for op in hot rearm; do
		[ "$op" = rearm ] && [ "$p" = 0 ] && continue
		for impl in aorta aorta-delay heap rbtree none; do
			[ "$op" = rearm ] && [ "$impl" = aorta-delay ] &&
				continue
			fn=${op}_$impl
			[ "$impl" = aorta-delay ] && fn=hot_aorta_delay
			ir=$(count "$impl" "$op" "$p" "$fn")
			awk -v o="$op" -v i="$impl" -v p="$p" -v ir="$ir" \
				-v n="$n" 'BEGIN {
				printf "  %-5s %-11s %8d pending %8.2f" \
				       "  (%d Ir / %d)\n", o, i, p, ir / n,
				       ir, n }'
		done
	done
done
