#!/bin/sh
# SPDX-License-Identifier: MIT
# Install into a scratch root, then build and run a small program against
# the installed tree using nothing but `pkg-config --cflags --libs aorta`.
set -e
make=$1
out=$2
root="$(pwd)/${out}tests/install-root"
rm -rf "$root"
$make --no-print-directory install DESTDIR="$root" PREFIX=/usr/local O="${out%/}" >/dev/null
export PKG_CONFIG_PATH="$root/usr/local/lib/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$root"
flags=$(pkg-config --cflags --libs aorta)
echo "  INSTALL-TEST pkg-config: $flags"
prog="${out}tests/install-smoke"
${CC:-cc} -o "$prog" tests/install/smoke.c $flags
LD_LIBRARY_PATH="$root/usr/local/lib" "$prog"
# The static library works through pkg-config --static too.
${CC:-cc} -o "$prog-static" tests/install/smoke.c \
	$(pkg-config --cflags aorta) "$root/usr/local/lib/libaorta.a" \
	$(pkg-config --static --libs-only-l aorta | sed 's/-laorta//')
"$prog-static"
echo "install: 2 passed, 0 failed"
