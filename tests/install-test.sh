#!/bin/sh
# SPDX-License-Identifier: MIT
# Install into a scratch root, then build and run a small program against
# the installed tree using nothing but `pkg-config --cflags --libs aorta`.
#
# The library is built once (with the build's PREFIX) and installed under
# prefixes that differ from it: the installed aorta.pc must name the prefix
# it was installed under, not the one the build started with.
set -e
make=$1
out=$2
pass=0
fail=0
base="$(pwd)/${out}tests/install-root"
prog="${out}tests/install-smoke"

ok() { pass=$((pass + 1)); }
bad() { echo "  INSTALL-TEST FAILED: $*"; fail=$((fail + 1)); }

# One prefix: install, check aorta.pc, build and run against it.
check_prefix() {
	prefix=$1
	root="$base$(echo "$prefix" | tr / _)"
	rm -rf "$root"
	$make --no-print-directory install DESTDIR="$root" PREFIX="$prefix" \
		O="${out%/}" >/dev/null
	pc="$root$prefix/lib/pkgconfig/aorta.pc"
	if [ ! -f "$pc" ]; then
		bad "$prefix: no $pc"
		return
	fi
	export PKG_CONFIG_PATH="$root$prefix/lib/pkgconfig"
	export PKG_CONFIG_SYSROOT_DIR="$root"
	got=$(PKG_CONFIG_SYSROOT_DIR= pkg-config --variable=prefix aorta)
	if [ "$got" = "$prefix" ]; then ok; else
		bad "PREFIX=$prefix: aorta.pc says prefix=$got"
	fi
	# Every line a key, a field or empty: no lone backslashes.
	if grep -vqE '^$|^[A-Za-z_.]+[=:]' "$pc"; then
		bad "PREFIX=$prefix: aorta.pc has stray lines:"
		grep -vnE '^$|^[A-Za-z_.]+[=:]' "$pc"
	else
		ok
	fi
	flags=$(pkg-config --cflags --libs aorta)
	echo "  INSTALL-TEST PREFIX=$prefix pkg-config: $flags"
	${CC:-cc} -o "$prog" tests/install/smoke.c $flags
	if LD_LIBRARY_PATH="$root$prefix/lib" "$prog"; then ok; else
		bad "PREFIX=$prefix: the program built with pkg-config failed"
	fi
	# The static library works through pkg-config --static too.
	${CC:-cc} -o "$prog-static" tests/install/smoke.c \
		$(pkg-config --cflags aorta) "$root$prefix/lib/libaorta.a" \
		$(pkg-config --static --libs-only-l aorta | sed 's/-laorta//')
	if "$prog-static" >/dev/null; then ok; else
		bad "PREFIX=$prefix: the static program failed"
	fi
	unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
}

# The build used PREFIX=/usr/local (the default) or whatever it was given:
# at least one of these differs from it.
check_prefix /usr
check_prefix /opt/aorta
echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
