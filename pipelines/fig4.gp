# fig4.gp — PICASO Fig. 4 at small scale from train.mk's fig4-k.tsv (model, method, k,
# mean_nll, improvement_pct): the improvement over Naive vs k of Concat (dashed) and PICASO-R
# (solid), one colour per model (base, and after lm, bp2c, bptc fine-tuning).
# Called by pipelines/train.mk:  gnuplot -e "tsv='fig4-k.tsv'; out='fig4.png'" pipelines/fig4.gp
if (!exists("tsv")) tsv = "fig4-k.tsv"
if (!exists("out")) out = "fig4.png"
set datafile separator "\t"
set datafile missing NaN
models = "base lm-ft bp2c bptc"
colors = "#7f7f7f #1f77b4 #ff7f0e #d62728"
sel(m, me, c) = (strcol(1) eq m && strcol(2) eq me) ? column(c) : NaN
set terminal pngcairo size 1400,560 font ",11"
set output out
set multiplot layout 1,2
set grid
set xtics 1
set key top left
set xlabel "k (retrieved chunks)"
set ylabel "improvement over Naive (% of NLL)"
set title "Concat (dashed) and PICASO-R (solid), WikiText-2 test"
plot for [i=1:4] tsv using 3:(sel(word(models,i), "picaso-r", 5)) with linespoints lw 2 pt 7 \
	lc rgb word(colors,i) title word(models,i)." PICASO-R", \
     for [i=1:4] tsv using 3:(sel(word(models,i), "concat", 5)) with lines dt 2 lw 2 \
	lc rgb word(colors,i) title word(models,i)." Concat"
set key center right
set title "continuation NLL (nats/token)"
set ylabel "NLL"
plot for [i=1:4] tsv using 3:(sel(word(models,i), "picaso-r", 4)) with linespoints lw 2 pt 7 \
	lc rgb word(colors,i) title word(models,i)." PICASO-R", \
     for [i=1:4] tsv using 3:(sel(word(models,i), "concat", 4)) with lines dt 2 lw 2 \
	lc rgb word(colors,i) title word(models,i)." Concat"
unset multiplot
