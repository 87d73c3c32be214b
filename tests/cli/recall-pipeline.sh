# pipelines/recall.mk at toy size, so that the recall recipe's commands keep working: the
# tokenizer and initial model, pretraining sequences, a few ss-train --loss-after steps, the
# evaluation corpus, its database and ss-eval recall (oracle and BM25), every fine-tuning
# objective for a few steps, each evaluated, and the before/after table. Run by tests/run.
set -eu
. "$SS_TOP/tests/util/golden.sh"
R=$d/r
make --no-print-directory -s -f "$SS_TOP/pipelines/recall.mk" R="$R" THREADS=1 \
	PRE_SEQS=300 PRE_STEPS=3 EVAL_DOCS=24 EVAL_QUERIES=6 KS=1,2,16 FT_DOCS=24 FT_QUERIES=8 \
	FT_STEPS=2 FT_K=4 SOUP_KS=2 METHODS=naive,concat,picaso-r,soup finetune >"$d/out" 2>&1 ||
	{ cat "$d/out"; fail "make -f pipelines/recall.mk finetune"; }
[ "$(wc -l <"$R/pretrain.log")" -eq 3 ] || fail "pretraining ran $(wc -l <"$R/pretrain.log") steps"
# The loss counts only the questions: each step's targets are fewer than its tokens, and the
# tokenizer is the model's.
python3 - "$R/pretrain.log" <<'PY' || fail "pretrain.log"
import json, sys
for l in open(sys.argv[1]):
    s = json.loads(l)
    assert 0 < s["tokens"] and s["loss"] > 0, s
PY
cmp "$R/tokenizer.json" "$R/model/tokenizer.json" || fail "the model's tokenizer is not mkrecall's"
for m in base bptc bp2c soup-k2 lm-ft; do
	t=$R/eval-$m.tsv
	[ -s "$t" ] || fail "no $t"
	# 2 contexts x 4 methods x 3 k, plus the per-position rows of the oracle context.
	[ "$(awk -F '\t' '$4 == "all"' "$t" | wc -l)" -eq 24 ] || fail "$m: $(cat "$t")"
	[ -s "$R/recall-$m.png" ] || fail "no figure for $m"
done
for m in bptc bp2c soup-k2 lm-ft; do
	[ "$(wc -l <"$R/ft-$m.log")" -eq 2 ] || fail "ft-$m ran $(wc -l <"$R/ft-$m.log") steps"
	cmp -s "$R/model/model.safetensors" "$R/ft-$m/model.safetensors" && fail "ft-$m changed nothing"
done
grep -q '"k":\[[0-9, ]*\]' "$R/ft-soup-k2.log" || fail "soup: no k logged"
# The table: a header, then 5 models x 4 methods x 3 k.
[ "$(sed 1d "$R/finetune.tsv" | wc -l)" -eq 60 ] || fail "finetune.tsv: $(cat "$R/finetune.tsv")"
head -n 1 "$R/finetune.tsv" | grep -q '^model	context	method	k	pos' || fail "finetune.tsv header"
echo ok
