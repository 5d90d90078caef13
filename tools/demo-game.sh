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
# command line.  The server never outlives the script.  While it runs,
# the viewer (tools/arena/viewer/, served by ao-arena) shows the bots at
# the URL it prints: http://127.0.0.1:PORT/.
set -u

usage() {
	echo "Usage: $0 TOOLS_DIR [DURATION] [PLAYERS]"
	echo "Run ao-arena under ao-bots for DURATION (default 10s) with"
	echo "PLAYERS bots (default 500)."
}

here=$(dirname "$0")
# shellcheck source=tools/demo-lib.sh
. "$here/demo-lib.sh"
demo_args 3 "$@"
tools=$1
duration=${2:-10s}
players=${3:-500}
srv_bin=$tools/arena/ao-arena
cli_bin=$tools/bots/ao-bots
me=demo-game
out_dir=$(dirname "$tools")
csv=$out_dir/demo-game-latency.csv
png=$out_dir/demo-game-latency.png

demo_start "ao-arena on 127.0.0.1 under ao-bots, $players players, $duration"
echo "$me: watch the bots in a browser: http://127.0.0.1:$port/" \
	"(open it now; ?play to join them)"
demo_run --address=127.0.0.1 --port="$port" --players="$players" \
	--duration="$duration" --hist="$csv"
summary=$(demo_summary inputs latency)
demo_stop "1 verification failures or errors, 2 usage, 3 could not connect"

echo
echo "demo-game: input-to-visible latency distribution in $csv"
sh "$here/plot/plot-latency.sh" "$csv" "$png" \
	"ao-arena under ao-bots: input to visible, $players players, $duration" \
	"$summary" || exit 1
exit 0
