# eval-msmarco.gp — PICASO Table 1 row 1 as bars: the MS MARCO answer NLL
# per method (left) and the time to build the context (right, log) from
# ss-eval msmarco's TSV (method, n, mean_nll, mean_time_ms, mean_infer_ms).
# Called by pipelines/eval.mk:  gnuplot -e "tsv='M.tsv'; out='PREFIX'" pipelines/eval-msmarco.gp
# Writes PREFIX.png.
if (!exists("tsv")) tsv = "msmarco.tsv"
if (!exists("out")) out = "msmarco"
set datafile separator "\t"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set xtics rotate by -45 nomirror
set grid ytics
set key off
set termoption noenhanced
set terminal pngcairo size 1400,600 font ",11"
set output out.".png"
set multiplot layout 1,2
set title "MS MARCO: answer NLL per method (all passages composed)"
set ylabel "answer NLL (nats/token)"
stats tsv using 3 skip 1 nooutput
set yrange [STATS_min - 0.1 * (STATS_max - STATS_min + 1e-6) : STATS_max + 0.1 * (STATS_max - STATS_min + 1e-6)]
plot tsv using 3:xtic(1) skip 1 lc rgb "#1f77b4"
set title "time to build the context (mean per query)"
set ylabel "ms (log)"
set yrange [*:*]
set logscale y
plot tsv using 4:xtic(1) skip 1 lc rgb "#ff7f0e"
unset multiplot
