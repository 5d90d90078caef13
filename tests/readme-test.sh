#!/bin/sh
# SPDX-License-Identifier: MIT
#
# README.md's C snippet is the end of examples/embed.c, verbatim: the build
# compiles that file and tests/test_examples.c runs it, so the snippet the
# README shows compiles and works.  Run from the top of the tree.
snip=$(mktemp) || exit 1
trap 'rm -f "$snip"' EXIT
awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on' README.md >"$snip"
if [ ! -s "$snip" ]; then
	echo "readme-test: README.md has no \`\`\`c snippet" >&2
	exit 1
fi
first=$(head -n 1 "$snip")
n=$(grep -n -x -F -e "$first" examples/embed.c | head -n 1 | cut -d: -f1)
if [ -z "$n" ] || ! tail -n +"$n" examples/embed.c | diff -u - "$snip" >&2
then
	echo "readme-test: README.md's snippet is not the end of" \
	     "examples/embed.c (copy it again)" >&2
	exit 1
fi
echo "  README  the snippet is examples/embed.c from line $n"
