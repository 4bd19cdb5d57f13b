# Plots of folio-bench results; run through bench/plot/plot.sh, which sets
# `tmp` (flattened data and vars.gp) and `out` (where the PNGs go).
load tmp.'/vars.gp'

set terminal pngcairo size 900,560 enhanced font 'DejaVu Sans,11'
set grid lc rgb '#dddddd'
set key top left box opaque
set datafile missing 'NaN'

# Folio sizes are powers of two: a log2 axis labelled in K/M.
set logscale x 2
set xtics ('4K' 4096, '16K' 16384, '64K' 65536, '256K' 262144, \
           '1M' 1048576, '2M' 2097152)
set xrange [3000:2800000]

# (a1) write amplification
set output out.'/randwrite-wa.png'
set title "4 KiB random overwrites + sync: bytes written back per byte written"
set xlabel 'folio size (4 KiB blocks)'
set ylabel 'write amplification'
set logscale y 2
set ytics ('1' 1, '4' 4, '16' 16, '64' 64, '256' 256, '512' 512)
set yrange [0.7:800]
plot tmp.'/randwrite.dat' using 1:6 with linespoints lw 2 pt 7 lc rgb '#1f77b4' \
       title 'per-block dirty tracking', \
     '' using 1:7 with linespoints lw 2 pt 5 lc rgb '#d62728' \
       title 'whole-folio tracking', \
     '' using 1:($1/4096) with lines dt 2 lc rgb '#888888' \
       title 'folio size / block size'

# (a2) throughput
set title "4 KiB random overwrites + sync: throughput by folio size"
set ylabel 'MB/s (log scale)'
set logscale y 10
set ytics auto
set format y '%g'
set yrange [*:*]
set key at screen 0.5, screen 0.02 center bottom box
set bmargin 10
set terminal pngcairo size 900,680 enhanced font 'DejaVu Sans,11'
set output out.'/randwrite-mbs.png'
plot tmp.'/randwrite.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' \
       title 'per-block, posix engine (real disk, fdatasync)', \
     '' using 1:3 with linespoints lw 2 pt 5 lc rgb '#d62728' \
       title 'whole-folio, posix engine (real disk, fdatasync)', \
     '' using 1:4 with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4' \
       title 'per-block, modelled device ('.model_label.')', \
     '' using 1:5 with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728' \
       title 'whole-folio, modelled device ('.model_label.')', \
     kernel_mbs with lines dt 3 lw 2 lc rgb '#2ca02c' \
       title 'kernel page cache, real disk (pwrite + fdatasync)'

unset logscale
set bmargin
set terminal pngcairo size 900,560 enhanced font 'DejaVu Sans,11'
set xtics auto
set xrange [*:*]
set yrange [0:*]

# (b) 1 KiB writes: bars
set output out.'/fstime.png'
set title "Small-write throughput: ".fstime_title
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.6
set ylabel 'million writes/s'
unset xlabel
set key off
set xtics nomirror
set format y '%g'
# Headroom above the tallest bar so its label stays clear of the title.
set offsets 0, 0, graph 0.12, 0
plot tmp.'/fstime.dat' using ($2/1e6):xtic(1) lc rgb '#1f77b4', \
     '' using 0:($2/1e6):(sprintf('%.2f M/s, %.0f ns', $2/1e6, $4)) \
       with labels offset 0,1 notitle

# (c) sequential writes against max folio size
set offsets 0, 0, 0, 0
set output out.'/seqwrite.png'
set style data linespoints
set title "Sequential writes: ".seq_title
set logscale x 2
set xtics ('4K' 4096, '8K' 8192, '16K' 16384, '32K' 32768, '64K' 65536, \
           '128K' 131072, '256K' 262144, '512K' 524288, '1M' 1048576, \
           '2M' 2097152)
set xrange [3000:2800000]
set xlabel 'max folio size (new folios are sized from the 128 KiB write, up to this)'
set ylabel 'MB/s'
set key inside bottom right box opaque
plot tmp.'/seqwrite.dat' using 1:2 lw 2 pt 7 lc rgb '#1f77b4' \
       title 'write (no sync in the loop)', \
     '' using 1:3 lw 2 pt 5 lc rgb '#ff7f0e' title 'write + sync'

# (d) pool hit ratio against the budget: S3-FIFO vs LRU vs FIFO
set output out.'/pool-hit-ratio.png'
set title "Hit ratio against the budget: ".sweep_title
set xtics ('1M' 1048576, '2M' 2097152, '4M' 4194304, '8M' 8388608, \
           '16M' 16777216, '32M' 33554432, '64M' 67108864)
set xrange [900000:75000000]
set xlabel 'pool budget (the data is 256 MiB)'
set ylabel 'hit ratio (%)'
set yrange [0:100]
set key inside bottom right box opaque
plot tmp.'/pool-sweep.dat' using 1:($3*100) lw 2 pt 7 lc rgb '#1f77b4' \
       title 'pool (S3-FIFO)', \
     '' using 1:($4*100) lw 2 pt 5 lc rgb '#d62728' title 'LRU (simulated)', \
     '' using 1:($5*100) lw 2 pt 9 lc rgb '#2ca02c' title 'FIFO (simulated)'

# (e) cold sequential reads: MB/s per variant, clustered by read size
# (noenhanced: the labels say O_DIRECT, not O subscript DIRECT)
set termoption noenhanced
unset logscale
set xtics auto
set xrange [*:*]
set yrange [0:*]
set output out.'/seqread.png'
set title "Cold sequential reads: ".seqread_title
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel 'MB/s'
unset xlabel
set key inside top right box opaque
set offsets 0, 0, graph 0.1, 0
plot tmp.'/seqread.dat' using 2:xtic(1) lc rgb '#1f77b4' title '4 KiB reads', \
     '' using 3 lc rgb '#ff7f0e' title '128 KiB reads', \
     '' using ($0-0.15):2:(sprintf('%.0f', $2)) with labels offset 0,0.7 notitle, \
     '' using ($0+0.15):3:(sprintf('%.0f', $3)) with labels offset 0,0.7 notitle

# (f1) hot 4 KiB random reads: reads/s per variant
set output out.'/randread-hot.png'
set title "Hot ".randread_title
set style histogram clustered gap 1
set boxwidth 0.6
set ylabel 'million reads/s'
set key off
plot tmp.'/randread-hot.dat' using ($2/1e6):xtic(1) lc rgb '#1f77b4', \
     '' using 0:($2/1e6):(sprintf('%.2f M/s, %.0f ns', $2/1e6, $3)) \
       with labels offset 0,1 notitle

# (f2) cold 4 KiB random reads: reads/s per variant
set output out.'/randread-cold.png'
set title "Cold ".randread_title
set ylabel 'thousand reads/s'
plot tmp.'/randread-cold.dat' using ($2/1e3):xtic(1) lc rgb '#2ca02c', \
     '' using 0:($2/1e3):(sprintf("%.1f k/s\n%.2f B read / B asked", $2/1e3, $3)) \
       with labels offset 0,1.5 notitle

# (g) one sync of scattered blocks: ms per variant, with its ratio to the
# kernel's sync
set output out.'/sync-scatter.png'
set title "One sync of ".scatter_title
set boxwidth 0.6
set ylabel 'ms per sync (lower is faster)'
set key off
set yrange [0:*]
set xtics rotate by -15
plot tmp.'/sync-scatter.dat' using 2:xtic(1) lc rgb '#9467bd', \
     '' using 0:2:(sprintf('%.0f ms, %.2fx', $2, $3)) \
       with labels offset 0,1 notitle

# (h) syncs of one shared O_DIRECT file: library / kernel per job count
set output out.'/randwrite-shared.png'
set title "4 KiB write + sync by N threads on one O_DIRECT file (one mapping)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics norotate
set xlabel 'threads'
set ylabel 'library / kernel pwrite + fdatasync (> 1: faster)'
set yrange [0:1.6]
set key top left
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb '#555555'
plot tmp.'/randwrite-shared.dat' using 2:xtic(1) title 'posix' lc rgb '#1f77b4', \
     '' using 3 title 'io_uring' noenhanced lc rgb '#ff7f0e', \
     '' using ($0-0.15):2:(sprintf('%.2f', $2)) with labels offset 0,0.7 notitle, \
     '' using ($0+0.15):3:(sprintf('%.2f', $3)) with labels offset 0,0.7 notitle
unset arrow 1
