#!/bin/sh
# SPDX-License-Identifier: MIT
# The quick-start demo (`make demo`): ao-echo on 127.0.0.1 on a free port,
# ao-load against it for DURATION with 64 connections, both summaries,
# then the latency plot when gnuplot is there.
#
#   tools/demo.sh TOOLS_DIR [DURATION]
#
# TOOLS_DIR is the build's tools folder (with echo/ao-echo and
# load/ao-load); DURATION as ao-load takes it (default 10s).  The latency
# CSV and PNG go next to TOOLS_DIR (demo-latency.csv, demo-latency.png).
# Exit status: 0 ok; 1 if either program failed or ao-load counted an
# error or a mismatch; 2 for a bad command line.  The server never
# outlives the script.
set -u

usage() {
	echo "Usage: $0 TOOLS_DIR [DURATION]"
	echo "Run ao-echo under ao-load for DURATION (default 10s)."
}

case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
"")
	usage >&2
	exit 2
	;;
esac
[ $# -le 2 ] || { usage >&2; exit 2; }

here=$(dirname "$0")
tools=$1
duration=${2:-10s}
echo_bin=$tools/echo/ao-echo
load_bin=$tools/load/ao-load
out_dir=$(dirname "$tools")
csv=$out_dir/demo-latency.csv
png=$out_dir/demo-latency.png

for b in "$echo_bin" "$load_bin"; do
	if [ ! -x "$b" ]; then
		echo "demo: $b is missing (make tools)" >&2
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ao-demo.XXXXXX") || exit 1
srv_pid=
load_pid=

# Whatever happens (an error, ^C, a kill), stop both programs and clean up.
cleanup() {
	if [ -n "$load_pid" ] && kill -0 "$load_pid" 2>/dev/null; then
		kill -TERM "$load_pid" 2>/dev/null
		wait "$load_pid" 2>/dev/null
	fi
	load_pid=
	if [ -n "$srv_pid" ] && kill -0 "$srv_pid" 2>/dev/null; then
		kill -TERM "$srv_pid" 2>/dev/null
		# The graceful stop is bounded (--drain-timeout); then force it.
		i=0
		while kill -0 "$srv_pid" 2>/dev/null && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -KILL "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
	fi
	srv_pid=
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() {
	echo "demo: $*" >&2
	exit 1
}

echo "demo: ao-echo on 127.0.0.1 under ao-load, 64 connections, $duration"
"$echo_bin" --address=127.0.0.1 --port=0 --drain-timeout=5s \
	>"$tmp/echo.out" &
srv_pid=$!

# The first line of its stdout is port=N once it listens.
port=
i=0
while [ $i -lt 200 ]; do
	port=$(sed -n '1s/^port=\([0-9][0-9]*\)$/\1/p' "$tmp/echo.out")
	[ -n "$port" ] && break
	kill -0 "$srv_pid" 2>/dev/null || break
	sleep 0.05
	i=$((i + 1))
done
if [ -z "$port" ]; then
	if kill -0 "$srv_pid" 2>/dev/null; then
		fail "ao-echo did not report its port within 10 s"
	fi
	wait "$srv_pid"
	rc=$?
	srv_pid=
	fail "ao-echo failed to start (exit status $rc)"
fi

# In the background, so that a signal to this script acts at once (the
# shell runs traps during a wait, not during a foreground command).
"$load_bin" --addr=127.0.0.1 --port="$port" --connections=64 \
	--duration="$duration" --hist="$csv" &
load_pid=$!
wait "$load_pid"
load_rc=$?
load_pid=

# Stop the server and read its final report.
if kill -0 "$srv_pid" 2>/dev/null; then
	kill -TERM "$srv_pid"
	wait "$srv_pid"
	echo_rc=$?
else
	wait "$srv_pid"
	echo_rc=$?
	echo "demo: ao-echo ended before it was stopped" >&2
	[ "$echo_rc" -ne 0 ] || echo_rc=1
fi
srv_pid=
echo
sed '1d' "$tmp/echo.out"

rc=0
if [ "$load_rc" -ne 0 ]; then
	echo "demo: ao-load failed (exit status $load_rc: 1 errors or" \
		"mismatches, 2 usage, 3 could not connect)" >&2
	rc=1
fi
if [ "$echo_rc" -ne 0 ]; then
	echo "demo: ao-echo failed (exit status $echo_rc)" >&2
	rc=1
fi
[ "$rc" -eq 0 ] || exit "$rc"

echo
echo "demo: latency distribution in $csv"
sh "$here/plot/plot-latency.sh" "$csv" "$png" \
	"ao-echo under ao-load: 64 connections, $duration" || exit 1
exit 0
