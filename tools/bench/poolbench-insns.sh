#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Instructions per get/put pair on one thread, counted by callgrind: the
# default pool (16 shards, thread caches), the same without caches and
# one shard without caches, against glibc malloc+free of the same size.
# The bound checked: the default pool takes at most 2x malloc+free at
# every size (unchanged; with the caches it takes well under 1x).
#
#	sh tools/bench/poolbench-insns.sh [N] [SIZES]
#
# Builds the default configuration (build/, lock statistics on, as
# shipped), runs `poolbench --pairs=N --impl=I --size=S` under callgrind
# collecting only inside the noinline pairs_*() loop, and divides by N.
# The loop itself is included; `none` shows what it costs alone.  malloc's
# cost depends on the size (glibc's tcache serves up to 1032 bytes), so it
# is measured at each size; the pool's does not.
set -eu

n=${1:-200000}
sizes=${2:-"64 512 2048"}
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/build
bin=$out/tools/bench/poolbench

if ! command -v valgrind >/dev/null 2>&1; then
	echo "poolbench-insns: valgrind is not installed; nothing measured"
	exit 0
fi

make -C "$top" -s build/tools/bench/poolbench >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

count() { # impl fn size
	valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
		--toggle-collect="$2" "$bin" --pairs="$n" --impl="$1" \
		--size="$3" >/dev/null 2>&1
	sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/cg"
}

echo "instructions per get/put pair on one thread (callgrind, N=$n):"
none=$(count none pairs_none 64)
p16=$(count pool-16 pairs_pool 2048)
pnc=$(count pool-16-nocache pairs_pool 2048)
p1=$(count pool-1 pairs_pool 2048)
awk -v ir="$none" -v n="$n" 'BEGIN {
	printf "  %-16s %7.2f\n", "loop alone", ir / n }'
awk -v ir="$p16" -v n="$n" 'BEGIN {
	printf "  %-16s %7.2f  (%d Ir / %d pairs)\n", "pool-16 (cached)",
	ir / n, ir, n }'
awk -v ir="$pnc" -v n="$n" 'BEGIN {
	printf "  %-16s %7.2f  (%d Ir / %d pairs)\n", "pool-16-nocache",
	ir / n, ir, n }'
awk -v ir="$p1" -v n="$n" 'BEGIN {
	printf "  %-16s %7.2f  (%d Ir / %d pairs)\n", "pool-1 (nocache)",
	ir / n, ir, n }'
for s in $sizes; do
	m=$(count malloc pairs_malloc "$s")
	awk -v ir="$m" -v n="$n" -v s="$s" -v p="$p16" 'BEGIN {
		printf "  %-16s %7.2f  pool-16 / malloc = %.2f (<= 2)\n",
		"malloc+free " s, ir / n, p / ir }'
done
