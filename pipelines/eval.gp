# eval.gp — the plots of the paper's WikiText evaluation (PICASO Fig. 3) from
# ss-eval's TSV (method, k, mean_nll, n, mean_time_ms). Called by
# pipelines/eval.mk:  gnuplot -e "tsv='W.tsv'; out='PREFIX'" pipelines/eval.gp
# Writes PREFIX-fig3.png (left: NLL vs k per method; right: time to build
# the context vs k, composition vs concatenation, PIConcat-R left out as in
# the paper), PREFIX-nll.png and PREFIX-time.png (every method, log scale).
if (!exists("tsv")) tsv = "wikitext.tsv"
if (!exists("out")) out = "wikitext"

set datafile separator "\t"
set datafile missing NaN
methods = "naive concat soup caso picaso-s picaso-r piconcat-r"
titles  = "Naive Concat Soup CASO PICASO-S PICASO-R PIConcat-R"
# Column 1 filtered per method; the header row has no numbers and is skipped.
sel(m, c) = (strcol(1) eq m) ? column(c) : NaN
set style line 1 lc rgb "#7f7f7f" dt 2 lw 2 pt 0
set style line 2 lc rgb "#d62728" lw 2 pt 7
set style line 3 lc rgb "#2ca02c" lw 2 pt 5
set style line 4 lc rgb "#ff7f0e" lw 2 pt 9
set style line 5 lc rgb "#1f77b4" lw 2 pt 11
set style line 6 lc rgb "#9467bd" lw 2 pt 13 dt 3
set style line 7 lc rgb "#8c564b" lw 2 pt 3
set xlabel "k (retrieved chunks)"
if (!exists("xstep")) xstep = 1
set xtics xstep
set grid
set format y "%.7f"
set key outside bottom center horizontal samplen 2

nll_plot = "plot for [i=1:7] tsv using 2:(sel(word(methods,i),3)) with linespoints ls i title word(titles,i)"
set ylabel "continuation NLL (nats/token)"
set title "WikiText-2: log-perplexity vs k"

set terminal pngcairo size 1400,560 font ",11"
set output out."-fig3.png"
set multiplot layout 1,2
eval nll_plot
set title "time to build the context"
set ylabel "ms per query (log)"
set format y "%g"
set logscale y
plot for [i=2:6] tsv using 2:(column(2) > 0 ? sel(word(methods,i),5) : NaN) with linespoints ls i title word(titles,i)
unset multiplot
unset logscale y

set terminal pngcairo size 800,560 font ",11"
set output out."-nll.png"
set format y "%.7f"
set title "WikiText-2: log-perplexity vs k"
set ylabel "continuation NLL (nats/token)"
eval nll_plot

set output out."-time.png"
set title "time to build the context: composition vs concatenation"
set ylabel "ms per query (log)"
set format y "%g"
set logscale y
plot for [i=2:7] tsv using 2:(column(2) > 0 ? sel(word(methods,i),5) : NaN) with linespoints ls i title word(titles,i)
unset output
