#!/bin/sh
# SPDX-License-Identifier: MIT
# Render the latency CSV of `ao-load --hist FILE` (or ao-bots') to a PNG.
#
#   tools/plot/plot-latency.sh LATENCY.csv [OUT.png] [TITLE] [SUMMARY]
#
# OUT.png defaults to the CSV's name with .png.  SUMMARY, the figures the
# program printed (its count and latency lines, one per line), goes under
# the title as given; without it the title says how many samples the CSV
# holds.  Without gnuplot, says how
# to get it and exits 0 (the CSV is still there), so `make demo` succeeds
# on a machine without it.  Exit 2 for a bad command line, 1 if gnuplot
# fails.
set -u
here=$(dirname "$0")

usage() {
	echo "Usage: $0 LATENCY.csv [OUT.png] [TITLE] [SUMMARY]"
	echo "Render ao-load's --hist CSV to a PNG (needs gnuplot)."
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
[ $# -le 4 ] || { usage >&2; exit 2; }

csv=$1
png=${2:-${csv%.csv}.png}
title=${3:-ao-load latency distribution}
summary=${4:-}

if [ ! -r "$csv" ]; then
	echo "plot: cannot read $csv" >&2
	exit 1
fi
if ! command -v gnuplot >/dev/null 2>&1; then
	echo "plot: gnuplot is not installed, so no PNG; the latency CSV is"
	echo "      $csv.  To get plots: apt-get install gnuplot-nox"
	exit 0
fi
if [ "$(wc -l <"$csv")" -lt 2 ]; then
	echo "plot: $csv holds no samples; nothing to plot" >&2
	exit 1
fi

# Quote for a gnuplot string: double the single quotes.
q() {
	printf "%s" "$1" | sed "s/'/''/g"
}

# The same for a double-quoted one, its newlines as \n.
qq() {
	printf "%s\n" "$1" | sed 's/[\\"]/\\&/g' |
		awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }'
}

if gnuplot -e "infile='$(q "$csv")'; outfile='$(q "$png")'; \
plottitle='$(q "$title")'; summary=\"$(qq "$summary")\"" "$here/latency.gp"; then
	echo "plot: wrote $png"
else
	echo "plot: gnuplot failed on $csv" >&2
	exit 1
fi
