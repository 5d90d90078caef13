#!/bin/sh
# SPDX-License-Identifier: MIT
# Install into a scratch root, then build and run a small program against
# the installed tree using nothing but `pkg-config --cflags --libs aorta`;
# run the installed tools, read the installed manual pages; uninstall, and
# check that exactly what install put there is gone.
#
# The library is built once (with the build's PREFIX) and installed under
# prefixes that differ from it: the installed aorta.pc must name the prefix
# it was installed under, not the one the build started with.
#
# usage: AO_TOOLS="ao-echo ..." AO_MAN="man1/ao-echo.1 ..." \
#	install-test.sh MAKE OUT
set -e
make=$1
out=$2
pass=0
fail=0
# OUT is relative to the source tree, or absolute (make O=/some/dir).
case $out in
/*) base="${out}tests/install-root" ;;
*) base="$(pwd)/${out}tests/install-root" ;;
esac
prog="${out}tests/install-smoke"

ok() { pass=$((pass + 1)); }
bad() { echo "  INSTALL-TEST FAILED: $*"; fail=$((fail + 1)); }

# One prefix: install, check aorta.pc, build and run against it.
check_prefix() {
	prefix=$1
	root="$base$(echo "$prefix" | tr / _)"
	rm -rf "$root"
	# Files of others in the same folders: uninstall must leave them.
	for f in bin/not-aorta include/not-aorta.h lib/libnotaorta.so \
		lib/pkgconfig/not-aorta.pc share/man/man3/not_aorta.3; do
		mkdir -p "$(dirname "$root$prefix/$f")"
		echo theirs >"$root$prefix/$f"
	done
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
	# libaorta-cluster through its own name (on aorta): -EINVAL for no
	# configuration, or -ENOSYS when built without cnats.
	printf '%s\n' '#include <errno.h>' '#include <aorta/cluster/node.h>' \
		'int main(void) { struct ao_node *n; int e =' \
		'ao_node_create(0, &n); return e != -EINVAL && e != -ENOSYS; }' \
		>"$prog-cluster.c"
	if ${CC:-cc} -o "$prog-cluster" "$prog-cluster.c" \
		$(pkg-config --cflags --libs aorta-cluster) &&
		LD_LIBRARY_PATH="$root$prefix/lib" "$prog-cluster"; then
		ok
	else
		bad "PREFIX=$prefix: a program built with pkg-config" \
			"aorta-cluster failed"
	fi
	rm -f "$prog-cluster.c"
	unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
	check_tools_man
	check_uninstall
}

# Every tool in bin/ (ao-echo runs from there), every page in share/man/
# (and man(1) finds ao_server and, through its .so link, ao_exec_submit).
check_tools_man() {
	missing=
	for t in $AO_TOOLS; do
		[ -x "$root$prefix/bin/$t" ] || missing="$missing $t"
	done
	for m in $AO_MAN; do
		[ -f "$root$prefix/share/man/$m" ] || missing="$missing $m"
	done
	if [ -z "$AO_TOOLS" ] || [ -z "$AO_MAN" ] || [ -n "$missing" ]; then
		bad "PREFIX=$prefix: not installed:$missing"
	else
		ok
	fi
	if "$root$prefix/bin/ao-echo" --version | grep -q '^ao-echo '; then
		ok
	else
		bad "PREFIX=$prefix: the installed ao-echo does not run"
	fi
	command -v man >/dev/null 2>&1 || return 0
	for page in ao_server ao_exec_submit ao-echo; do
		if MANPATH="$root$prefix/share/man" MANWIDTH=80 man "$page" \
			2>/dev/null | grep -q "$page"; then
			ok
		else
			bad "PREFIX=$prefix: man $page shows nothing"
		fi
	done
}

# Uninstall leaves the others' files and nothing of ours.
check_uninstall() {
	$make --no-print-directory uninstall DESTDIR="$root" \
		PREFIX="$prefix" O="${out%/}" >/dev/null
	left=$(cd "$root" && find . ! -type d | sort | tr '\n' ' ')
	want=$(cd "$root" && find . -name '*not*aorta*' ! -type d | sort |
		tr '\n' ' ')
	if [ "$left" = "$want" ] && [ "$(echo "$want" | wc -w)" -eq 5 ]; then
		ok
	else
		bad "PREFIX=$prefix: after uninstall: $left (want $want)"
	fi
	if [ -d "$root$prefix/include/aorta" ]; then
		bad "PREFIX=$prefix: include/aorta/ is left"
	else
		ok
	fi
}

# The build used PREFIX=/usr/local (the default) or whatever it was given:
# at least one of these differs from it.
check_prefix /usr
check_prefix /opt/aorta
echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
