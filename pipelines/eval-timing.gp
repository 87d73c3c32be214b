# eval-timing.gp — PICASO Fig. 7 from ss-eval timing's TSV (tokens,
# processing_ms, inference_ms): the time to process the input against the
# time to generate from the processed state, stacked per input length.
# Called by pipelines/eval.mk:  gnuplot -e "tsv='T.tsv'; out='PREFIX'" pipelines/eval-timing.gp
# Writes PREFIX.png.
if (!exists("tsv")) tsv = "timing.tsv"
if (!exists("out")) out = "timing"
set datafile separator "\t"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set grid ytics
set key top left
set xlabel "input tokens"
set ylabel "ms"
set title "processing vs inference time (generating from the processed state)"
set terminal pngcairo size 900,560 font ",11"
set output out.".png"
plot tsv using 3:xtic(1) skip 1 lc rgb "#1f77b4" title "inference", \
     '' using 2 skip 1 lc rgb "#ff7f0e" title "processing"
