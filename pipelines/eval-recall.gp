# eval-recall.gp — key-value recall through composition (issue 30) from
# ss-eval recall's TSV (context, method, k, pos, n, em, mean_nll, em_share,
# nll_share, recall, mean_time_ms): exact match vs k per method with the
# query file's chunks (context oracle, every gold position: pos all; left),
# and with the BM25 top k of the key (context bm25, right, when the run had
# --retrieve; its recall@k dashed).
# Called as:  gnuplot -e "tsv='R.tsv'; out='PREFIX'" pipelines/eval-recall.gp
# Writes PREFIX.png.
if (!exists("tsv")) tsv = "recall.tsv"
if (!exists("out")) out = "recall"
set datafile separator "\t"
set datafile missing NaN
# The methods in the TSV's order, and whether it has bm25 rows.
methods = system("awk -F'\t' 'NR > 1 && !s[$2]++ { printf \"%s \", $2 }' " . tsv)
bm25 = int(system("awk -F'\t' '$1 == \"bm25\" { n++ } END { print n + 0 }' " . tsv)) > 0
sel(c, m, col) = (strcol(1) eq c && strcol(2) eq m && strcol(4) eq "all") ? column(col) : NaN
set xlabel "k (documents composed)"
set logscale x 2
set xtics 2
set yrange [0:1.05]
set grid
set key outside bottom center horizontal samplen 2
set terminal pngcairo size (bm25 ? 1400 : 800),560 font ",11"
set termoption noenhanced
set output out.".png"
set multiplot layout 1,(bm25 ? 2 : 1)
set title "key-value recall, gold among the query's chunks (oracle)"
set ylabel "exact match (greedy)"
plot for [m in methods] tsv using 3:(sel("oracle", m, 6)) skip 1 with linespoints lw 2 title m
if (bm25) {
	set title "key-value recall, BM25 top k of the key"
	plot for [m in methods] tsv using 3:(sel("bm25", m, 6)) skip 1 with linespoints lw 2 title m, \
	     tsv using 3:(sel("bm25", word(methods, 1), 10)) skip 1 with lines lw 2 dt 2 lc rgb "#7f7f7f" \
	     title "recall@k"
}
unset multiplot
