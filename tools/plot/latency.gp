# SPDX-License-Identifier: MIT
# Render ao-load's --hist CSV (low_ns,high_ns,count,cumulative,percentile)
# as a percentile spectrum, HdrHistogram style: latency against
# 1 / (1 - percentile), both on log scales, so the tail gets the room.
#
#   gnuplot -e "infile='lat.csv'; outfile='lat.png'" tools/plot/latency.gp
# (tools/plot/plot-latency.sh does this and checks for gnuplot first.)
#
# The title's figures are the program's own: summary, when given, is the
# summary it printed (the demos pass its count and latency lines), so the
# plot and the terminal never disagree.  Without it, the title gives only
# the number of samples in the CSV: the CSV's values are bucket bounds
# (within 0.2%), not the exact max the program printed.

if (!exists("infile")) infile = "latency.csv"
if (!exists("outfile")) outfile = "latency.png"
if (!exists("plottitle")) plottitle = "ao-load latency distribution"
if (!exists("summary")) summary = ""

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
	set terminal pngcairo size 1000,600 enhanced font ",10"
} else {
	set terminal png size 1000,600
}
set output outfile
set datafile separator ","
set key autotitle columnhead

stats infile using 4 nooutput name "CUM"

if (strlen(summary) > 0) {
	set title sprintf("%s\n%s", plottitle, summary) noenhanced
} else {
	set title sprintf("%s (%.0f samples)", plottitle, CUM_max) noenhanced
}
# Room on the right for the last percentile label, centred on the edge.
set rmargin 8
set logscale x 10
set logscale y 10
set grid xtics ytics mytics
set xlabel "percentile"
set ylabel "latency (us)"
set xtics ("0%%" 1, "90%%" 10, "99%%" 100, "99.9%%" 1000, \
	   "99.99%%" 10000, "99.999%%" 100000, "99.9999%%" 1000000)
set xrange [1:*]
set format y "%g"
unset key

# The 100th percentile is the max: at 1/(1-p) it is at infinity, so it is
# left out here and given in the title.
plot infile using ($5 < 100 ? 1.0 / (1.0 - $5 / 100.0) : 1/0):($2 / 1000.0) \
	with steps lw 2 lc rgb "#1f77b4"
