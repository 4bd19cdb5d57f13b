# The NBD engine against raw libnbd and nbdkit's cache filter (ratios from
# bench/nbd-compare.sh, doc/plots/data/nbd-compare.dat):
#   gnuplot -e "dat='doc/plots/data/nbd-compare.dat'; out='doc/plots/nbd-compare.png'" bench/plot/nbd.gp
set terminal pngcairo size 1000,600 enhanced font 'DejaVu Sans,11'
set bmargin 5
set output out
set title "NBD export behind a 1 ms delay: library / other (two runs, A and B; above 1: library faster)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y 10
set yrange [0.3:10000]
set ylabel 'ratio (log scale)'
set grid ytics lc rgb '#dddddd'
set key top left box opaque
set datafile missing 'NaN'
set xtics nomirror
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb '#444444'
plot dat using 2:xtic(1) title 'vs raw libnbd, run A' lc rgb '#1f77b4', \
     '' using 3 title 'vs raw libnbd, run B' lc rgb '#6baed6', \
     '' using 4 title 'vs cache filter, run A' lc rgb '#d62728', \
     '' using 5 title 'vs cache filter, run B' lc rgb '#fc9272'
