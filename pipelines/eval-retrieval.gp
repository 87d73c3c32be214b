# eval-retrieval.gp — the BM25 sweep of bench/retrieve --qa --k1 L --b L
# (dataset, k1, b, docs, queries, recall@1, recall@5, recall@10, mrr@10,
# ndcg@10): nDCG@10 and recall@10 vs b, one line per k1, per dataset.
# Called by pipelines/eval.mk:  gnuplot -e "tsv='R.tsv'; out='PREFIX'" pipelines/eval-retrieval.gp
# Writes PREFIX.png.
if (!exists("tsv")) tsv = "retrieval.tsv"
if (!exists("out")) out = "retrieval"
set datafile separator "\t"
set datafile missing NaN
set termoption noenhanced
stats tsv using 2 skip 1 nooutput
sel(d, k, c) = (strcol(1) eq d && abs(column(2) - k) < 1e-9) ? column(c) : NaN
# the k1 values, in file order (distinct)
k1s = system("awk -F'\t' 'NR > 1 && !s[$2]++ { printf \"%s \", $2 }' " . tsv)
set xlabel "b"
set grid
set key outside right title "k1"
set terminal pngcairo size 1400,900 font ",11"
set output out.".png"
set multiplot layout 2,2
do for [d in "msmarco hotpotqa"] {
	do for [c in "10 8"] {
		set title d . ": " . (c eq "10" ? "nDCG@10" : "recall@10")
		plot for [k in k1s] tsv using 3:(sel(d, real(k), int(c))) skip 1 with linespoints lw 2 title k
	}
}
unset multiplot
