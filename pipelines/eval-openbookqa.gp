# eval-openbookqa.gp — PICASO Table 3 (App. B.6) from ss-eval openbookqa's
# TSV (method, k, n, accuracy, accuracy_norm, mean_time_ms): normalised
# accuracy vs k per method (left), the time to build the context (right).
# Called by pipelines/eval.mk:  gnuplot -e "tsv='O.tsv'; out='PREFIX'" pipelines/eval-openbookqa.gp
# Writes PREFIX.png.
if (!exists("tsv")) tsv = "openbookqa.tsv"
if (!exists("out")) out = "openbookqa"
set datafile separator "\t"
set datafile missing NaN
set termoption noenhanced
methods = system("awk -F'\t' 'NR > 1 && !s[$1]++ { printf \"%s \", $1 }' " . tsv)
sel(m, c) = (strcol(1) eq m) ? column(c) : NaN
set xlabel "k (retrieved passages)"
set grid
set key outside bottom center horizontal samplen 2
set terminal pngcairo size 1400,560 font ",11"
set output out.".png"
set multiplot layout 1,2
set title "OpenBookQA: normalised accuracy vs k"
set ylabel "accuracy_norm"
plot for [m in methods] tsv using 2:(sel(m, 5)) skip 1 with linespoints lw 2 title m
set title "time to build the context"
set ylabel "ms per question (log)"
set logscale y
plot for [m in methods] tsv using 2:(column(2) > 0 ? sel(m, 6) : NaN) skip 1 with linespoints lw 2 title m
unset multiplot
