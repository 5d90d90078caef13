#!/bin/sh
# SPDX-License-Identifier: MIT
# The game demo (`make demo-game`): ao-arena on 127.0.0.1 on a free port,
# ao-bots playing it for DURATION with PLAYERS bots, both summaries, then
# the plot of the input-to-visible latency when gnuplot is there.
#
#   tools/demo-game.sh TOOLS_DIR [DURATION] [PLAYERS]
#
# TOOLS_DIR is the build's tools folder (with arena/ao-arena and
# bots/ao-bots); DURATION as ao-bots takes it (default 10s), PLAYERS
# default 500.  The latency CSV and PNG go next to TOOLS_DIR
# (demo-game-latency.csv, demo-game-latency.png).  Exit status: 0 ok; 1
# if either program failed or a bot's verification failed; 2 for a bad
# command line.  The server never outlives the script.
set -u

usage() {
	echo "Usage: $0 TOOLS_DIR [DURATION] [PLAYERS]"
	echo "Run ao-arena under ao-bots for DURATION (default 10s) with"
	echo "PLAYERS bots (default 500)."
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
[ $# -le 3 ] || { usage >&2; exit 2; }

here=$(dirname "$0")
tools=$1
duration=${2:-10s}
players=${3:-500}
arena_bin=$tools/arena/ao-arena
bots_bin=$tools/bots/ao-bots
out_dir=$(dirname "$tools")
csv=$out_dir/demo-game-latency.csv
png=$out_dir/demo-game-latency.png

for b in "$arena_bin" "$bots_bin"; do
	if [ ! -x "$b" ]; then
		echo "demo-game: $b is missing (make tools)" >&2
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ao-demo-game.XXXXXX") || exit 1
srv_pid=
bots_pid=

# Whatever happens (an error, ^C, a kill), stop both programs and clean up.
cleanup() {
	if [ -n "$bots_pid" ] && kill -0 "$bots_pid" 2>/dev/null; then
		kill -TERM "$bots_pid" 2>/dev/null
		wait "$bots_pid" 2>/dev/null
	fi
	bots_pid=
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
	echo "demo-game: $*" >&2
	exit 1
}

echo "demo-game: ao-arena on 127.0.0.1 under ao-bots, $players players," \
	"$duration"
"$arena_bin" --address=127.0.0.1 --port=0 --drain-timeout=5s \
	>"$tmp/arena.out" &
srv_pid=$!

# The first line of its stdout is port=N once it listens.
port=
i=0
while [ $i -lt 200 ]; do
	port=$(sed -n '1s/^port=\([0-9][0-9]*\)$/\1/p' "$tmp/arena.out")
	[ -n "$port" ] && break
	kill -0 "$srv_pid" 2>/dev/null || break
	sleep 0.05
	i=$((i + 1))
done
if [ -z "$port" ]; then
	if kill -0 "$srv_pid" 2>/dev/null; then
		fail "ao-arena did not report its port within 10 s"
	fi
	wait "$srv_pid"
	rc=$?
	srv_pid=
	fail "ao-arena failed to start (exit status $rc)"
fi

# In the background, so that a signal to this script acts at once.
"$bots_bin" --addr=127.0.0.1 --port="$port" --players="$players" \
	--duration="$duration" --hist="$csv" &
bots_pid=$!
wait "$bots_pid"
bots_rc=$?
bots_pid=

# Stop the server and read its final report.
if kill -0 "$srv_pid" 2>/dev/null; then
	kill -TERM "$srv_pid"
	wait "$srv_pid"
	arena_rc=$?
else
	wait "$srv_pid"
	arena_rc=$?
	echo "demo-game: ao-arena ended before it was stopped" >&2
	[ "$arena_rc" -ne 0 ] || arena_rc=1
fi
srv_pid=
echo
sed '1d' "$tmp/arena.out"

rc=0
if [ "$bots_rc" -ne 0 ]; then
	echo "demo-game: ao-bots failed (exit status $bots_rc: 1" \
		"verification failures or errors, 2 usage, 3 could not" \
		"connect)" >&2
	rc=1
fi
if [ "$arena_rc" -ne 0 ]; then
	echo "demo-game: ao-arena failed (exit status $arena_rc)" >&2
	rc=1
fi
[ "$rc" -eq 0 ] || exit "$rc"

echo
echo "demo-game: input-to-visible latency distribution in $csv"
sh "$here/plot/plot-latency.sh" "$csv" "$png" \
	"ao-arena under ao-bots: input to visible, $players players, $duration" ||
	exit 1
exit 0
