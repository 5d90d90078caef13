#!/bin/sh
# SPDX-License-Identifier: MIT
# The Debian packages make deb built, used as a user would: each package
# holds what it should; installed, a program builds against them with
# nothing but pkg-config and runs on the packaged shared library; the
# packaged ao-echo serves the packaged ao-load; man finds the pages.
#
# usage: deb-test.sh DEB_DIR [root|system]
#   root    extract the packages into a scratch root (dpkg-deb -x; no
#           maintainer scripts, nothing outside DEB_DIR is touched);
#   system  apt-get install them (with their dependencies), use them,
#           then purge them and check nothing of theirs is left: for CI on
#           a fresh machine.
set -e
dir=${1%/}
mode=${2:-root}
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { echo "  DEB-TEST FAILED: $*"; fail=$((fail + 1)); }

arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ver=$(dpkg-parsechangelog -l debian/changelog -S Version)
lib="$dir/libaorta0_${ver}_$arch.deb"
dev="$dir/libaorta-dev_${ver}_$arch.deb"
tools="$dir/aorta-tools_${ver}_$arch.deb"
clib="$dir/libaorta-cluster0_${ver}_$arch.deb"
cdev="$dir/libaorta-cluster-dev_${ver}_$arch.deb"
for d in "$lib" "$dev" "$tools" "$clib" "$cdev"; do
	[ -f "$d" ] || { echo "deb-test: no $d (make deb first)"; exit 1; }
done

# What goes where: the shared library alone in libaorta0; headers, static
# library, aorta.pc and section 3 and 7 pages in -dev; programs and
# section 1 pages in -tools.
has() {
	if dpkg-deb -c "$1" | awk '{ print $6 }' | grep -qE "$2"; then ok; else
		bad "$(basename "$1") lacks $2"
	fi
}
hasnt() {
	if dpkg-deb -c "$1" | awk '{ print $6 }' | grep -qE "$2"; then
		bad "$(basename "$1") holds $2"
	else
		ok
	fi
}
has "$lib" "^\./usr/lib/$ma/libaorta\.so\.0$"
hasnt "$lib" '\.a$|\.h$|\.pc$|/bin/|/man/'
has "$dev" '^\./usr/include/aorta/io/server\.h$'
has "$dev" "^\./usr/lib/$ma/libaorta\.a$"
has "$dev" "^\./usr/lib/$ma/libaorta\.so$"
has "$dev" "^\./usr/lib/$ma/pkgconfig/aorta\.pc$"
has "$dev" '^\./usr/share/man/man3/ao_server\.3\.gz$'
has "$dev" '^\./usr/share/man/man7/aorta\.7\.gz$'
hasnt "$dev" '/bin/|/man1/|\.so\.0'
has "$tools" '^\./usr/bin/ao-echo$'
has "$tools" '^\./usr/bin/ao-load$'
has "$tools" '^\./usr/share/man/man1/ao-echo\.1\.gz$'
hasnt "$tools" '/include/|/lib/|/man3/'
# The bus layer in packages of its own: libaorta does not need libnats.
has "$clib" "^\./usr/lib/$ma/libaorta-cluster\.so\.0$"
hasnt "$clib" '\.a$|\.h$|\.pc$|/bin/|/man/'
has "$cdev" '^\./usr/include/aorta/cluster/node\.h$'
has "$cdev" "^\./usr/lib/$ma/libaorta-cluster\.a$"
has "$cdev" "^\./usr/lib/$ma/pkgconfig/aorta-cluster\.pc$"
has "$cdev" '^\./usr/share/man/man3/ao_node\.3\.gz$'
has "$cdev" '^\./usr/share/man/man3/ao_kv_create\.3\.gz$'
hasnt "$dev" '/cluster/|/ao_node|/ao_kv'
if dpkg-deb -f "$lib" Depends | grep -q nats; then
	bad "libaorta0 depends on libnats"
else
	ok
fi

if [ "$mode" = system ]; then
	sudo=
	[ "$(id -u)" = 0 ] || sudo=sudo
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
		"$(realpath "$lib")" "$(realpath "$dev")" \
		"$(realpath "$tools")" "$(realpath "$clib")" \
		"$(realpath "$cdev")" >/dev/null
	root=
	unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
	libpath=
	bin=
else
	root="$(realpath "$dir")/root"
	rm -rf "$root"
	for d in "$lib" "$dev" "$tools" "$clib" "$cdev"; do
		dpkg-deb -x "$d" "$root"
	done
	export PKG_CONFIG_PATH="$root/usr/lib/$ma/pkgconfig"
	export PKG_CONFIG_SYSROOT_DIR="$root"
	libpath="$root/usr/lib/$ma"
	bin="$root/usr/bin/"
fi

# A program built with pkg-config alone, on the packaged library.
prog="$dir/fork_join"
flags=$(pkg-config --cflags --libs aorta)
echo "  DEB-TEST pkg-config: $flags"
pfx=$(PKG_CONFIG_SYSROOT_DIR='' pkg-config --variable=prefix aorta)
if [ "$pfx" = /usr ]; then ok; else bad "aorta.pc: prefix=$pfx, not /usr"; fi
${CC:-cc} -o "$prog" examples/fork_join.c $flags
so=$(LD_LIBRARY_PATH="$libpath" ldd "$prog" |
	sed -n 's/^.*libaorta\.so\.0 => \([^ ]*\) .*$/\1/p')
if [ -n "$so" ] && [ "$(realpath "$so")" = \
	"$(realpath "$root/usr/lib/$ma/libaorta.so.0")" ]; then
	ok
else
	bad "the program loads '$so', not the packaged libaorta.so.0"
fi
if LD_LIBRARY_PATH="$libpath" "$prog" 100000 2; then ok; else
	bad "the program built against the packages failed"
fi

# A program of the bus layer, with pkg-config aorta-cluster alone.
printf '%s\n' '#include <errno.h>' '#include <aorta/cluster/node.h>' \
	'int main(void) { struct ao_node *n; int e =' \
	'ao_node_create(0, &n); return e != -EINVAL && e != -ENOSYS; }' \
	>"$dir/cluster.c"
if ${CC:-cc} -o "$dir/cluster" "$dir/cluster.c" \
	$(pkg-config --cflags --libs aorta-cluster) &&
	LD_LIBRARY_PATH="$libpath" "$dir/cluster"; then
	ok
else
	bad "a program built with pkg-config aorta-cluster failed"
fi

# The packaged tools: ao-echo serves ao-load.
out="$dir/ao-echo.out"
rm -f "$out"
"${bin}ao-echo" -q >"$out" &
pid=$!
port=
for i in 1 2 3 4 5 6 7 8 9 10; do
	port=$(sed -n 's/^port=//p' "$out" 2>/dev/null)
	[ -n "$port" ] && break
	sleep 0.5
done
if [ -n "$port" ] && "${bin}ao-load" -p "$port" -c 4 -n 2000 -q \
	>/dev/null; then
	ok
else
	bad "the packaged ao-load against the packaged ao-echo failed"
fi
kill "$pid" 2>/dev/null || true
if wait "$pid"; then ok; else bad "ao-echo did not stop cleanly"; fi

# The pages, by name and through a function's link.
if command -v man >/dev/null 2>&1; then
	for page in ao_server ao_exec_submit ao-echo aorta; do
		if MANPATH="$root/usr/share/man" MANWIDTH=80 man "$page" \
			2>/dev/null | grep -q "$page"; then
			ok
		else
			bad "man $page shows nothing"
		fi
	done
fi

if [ "$mode" = system ]; then
	DEBIAN_FRONTEND=noninteractive $sudo apt-get purge -y -qq \
		libaorta-cluster-dev libaorta-cluster0 aorta-tools \
		libaorta-dev libaorta0 >/dev/null
	if [ -e /usr/include/aorta ] || [ -e /usr/bin/ao-echo ] ||
		[ -e "/usr/lib/$ma/libaorta.so.0" ]; then
		bad "files left after purge"
	else
		ok
	fi
fi
echo "deb: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
