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

here=$(dirname "$0")
# shellcheck source=tools/demo-lib.sh
. "$here/demo-lib.sh"
demo_args 2 "$@"
tools=$1
duration=${2:-10s}
srv_bin=$tools/echo/ao-echo
cli_bin=$tools/load/ao-load
me=demo
out_dir=$(dirname "$tools")
csv=$out_dir/demo-latency.csv
png=$out_dir/demo-latency.png

demo_start "ao-echo on 127.0.0.1 under ao-load, 64 connections, $duration"
demo_run --address=127.0.0.1 --port="$port" --connections=64 \
	--duration="$duration" --hist="$csv"
summary=$(demo_summary requests latency)
demo_stop "1 errors or mismatches, 2 usage, 3 could not connect"

echo
echo "demo: latency distribution in $csv"
sh "$here/plot/plot-latency.sh" "$csv" "$png" \
	"ao-echo under ao-load: 64 connections, $duration" "$summary" || exit 1
exit 0
