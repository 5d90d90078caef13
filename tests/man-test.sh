#!/bin/sh
# SPDX-License-Identifier: MIT
# The manual pages in man/: every page lints clean (mandoc -Tlint at
# warning level, else groff -ww), every .so link points at a real page,
# every public function has a page of its own name (a page, or a .so link
# to the page of its family) that mentions it, and every tool has a
# section 1 page.
#
# Public functions: the ao_* symbols libaorta.so exports (not the ao__*
# halves of inline functions), and the ao_* inline functions and
# function-like macros of the installed headers.  Tools: the programs
# make builds from tools/<name>/ (ao-<name>), given by the Makefile.
#
# usage: man-test.sh OUT SRCARCH "ao-echo ao-load ..."
set -e
out=$1
srcarch=$2
tools=$3
pass=0
fail=0

bad() { echo "  MAN     FAILED: $*"; fail=$((fail + 1)); }

if command -v mandoc >/dev/null 2>&1; then
	lint() { mandoc -Tlint -Wwarning "$1" 2>&1; }
elif command -v groff >/dev/null 2>&1; then
	lint() { groff -man -ww -z "$1" 2>&1; }
else
	echo "man: neither mandoc nor groff to lint with (make deps installs" \
		"mandoc)"
	exit 1
fi

# A page's text: itself, or the page its .so line names.
target() {
	if head -n 1 "$1" | grep -q '^\.so '; then
		echo "man/$(head -n 1 "$1" | sed 's/^\.so *//')"
	else
		echo "$1"
	fi
}

# Lint every page, from man/ so that .so paths resolve as man(1) does.
for p in man/man[1-9]/*.[1-9]; do
	[ -f "$p" ] || continue
	t=$(target "$p")
	if [ "$t" != "$p" ]; then
		if [ ! -f "$t" ] || head -n 1 "$t" | grep -q '^\.so '; then
			bad "$p: .so to $t, which is not a page"
		else
			pass=$((pass + 1))
		fi
		continue
	fi
	msg=$(cd man && lint "${p#man/}") || true
	if [ -n "$msg" ]; then
		bad "$p does not lint clean:"
		echo "$msg"
	else
		pass=$((pass + 1))
	fi
done

so="${out}libaorta.so"
if [ ! -f "$so" ]; then
	echo "man: no $so (build it first)"
	exit 1
fi
hdrs=$(find arch/include "arch/$srcarch/include" sync/include core/include \
	io/include cluster/include -name '*.h' | sort)
# cluster/'s functions are in their own library, libaorta-cluster.so.
cso="${out}libaorta-cluster.so"
[ -f "$cso" ] || cso=
funcs=$( (nm -D --defined-only "$so" $cso | awk '$2 == "T" { print $3 }' |
	sed 's/@.*//'
	# shellcheck disable=SC2086
	grep -hoE '^static [^(]*[ *]ao_[a-z][a-z0-9_]*\(' $hdrs |
		grep -oE 'ao_[a-z0-9_]*\($'
	# shellcheck disable=SC2086
	grep -hoE '^#define ao_[a-z][a-z0-9_]*\(' $hdrs |
		grep -oE 'ao_[a-z0-9_]*\($') |
	sed 's/($//' | grep -E '^ao_[a-z]' | sort -u)
n=0
for f in $funcs; do
	n=$((n + 1))
	p="man/man3/$f.3"
	if [ ! -f "$p" ]; then
		bad "public function $f has no page ($p)"
		continue
	fi
	t=$(target "$p")
	if [ -f "$t" ] && grep -qw "$f" "$t"; then
		pass=$((pass + 1))
	else
		bad "$p: its page $t does not mention $f"
	fi
done
echo "  MAN     $n public functions; tools: $tools"
for t in $tools; do
	if [ -f "man/man1/$t.1" ] && [ "$(target "man/man1/$t.1")" = \
		"man/man1/$t.1" ]; then
		pass=$((pass + 1))
	else
		bad "tool $t has no page (man/man1/$t.1)"
	fi
done
echo "man: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
