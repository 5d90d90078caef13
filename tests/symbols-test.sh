#!/bin/sh
# SPDX-License-Identifier: MIT
# The library's ABI: libaorta.so exports only ao_* symbols, and nothing in
# the library uses pthread_mutex_* or pthread_cond_* (it synchronises with
# its own sync/ primitives).
set -e
out=$1
so="${out}libaorta.so"
a="${out}libaorta.a"
pass=0
fail=0
bad=$(nm -D --defined-only "$so" | awk '$3 != "" && $2 != "A" { print $3 }' |
	sed 's/@.*//' | grep -v '^ao_' || true)
if [ -n "$bad" ]; then
	echo "symbols: exported without the ao_ prefix:"; echo "$bad"
	fail=$((fail + 1))
else
	pass=$((pass + 1))
fi
bad=$(nm -u "$a" | grep -E 'pthread_(mutex|cond)_' || true)
if [ -n "$bad" ]; then
	echo "symbols: the library uses pthread mutexes or condvars:"
	echo "$bad"
	fail=$((fail + 1))
else
	pass=$((pass + 1))
fi
# libaorta-cluster (cluster/): the same two rules for its own code (cnats
# uses mutexes inside libnats, which is not in the archive).
cso="${out}libaorta-cluster.so"
ca="${out}libaorta-cluster.a"
if [ -f "$cso" ]; then
	bad=$(nm -D --defined-only "$cso" |
		awk '$3 != "" && $2 != "A" { print $3 }' | sed 's/@.*//' |
		grep -v '^ao_' || true)
	if [ -n "$bad" ]; then
		echo "symbols: libaorta-cluster exports without the ao_ prefix:"
		echo "$bad"
		fail=$((fail + 1))
	else
		pass=$((pass + 1))
	fi
	bad=$(nm -u "$ca" | grep -E 'pthread_(mutex|cond)_' || true)
	if [ -n "$bad" ]; then
		echo "symbols: libaorta-cluster uses pthread mutexes or condvars:"
		echo "$bad"
		fail=$((fail + 1))
	else
		pass=$((pass + 1))
	fi
fi
echo "symbols: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
