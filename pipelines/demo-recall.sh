#!/bin/sh
# pipelines/demo-recall.sh — the recall part of the main job (run by pipelines/demo.sh, so by
# `make demo`): composition that answers. A phonebook corpus (gen/mkrecall: documents of 8
# "Name Surname: 0142" lines, every name in one document only) is encoded one state per
# document with the bundled recall model (data/recall-model, trained by pipelines/recall.mk;
# its model card is data/recall-model/README.md) and indexed; for a few questions "whose number
# is Name Surname's?" it retrieves the documents that hold the name as a phrase (its two words
# adjacent and in order; at most K, best first by BM25), composes their states with PICASO-R and
# decodes the number:
#   ss-retrieve query --query '"Name Surname"' -k K | ss-compose --mode picaso-r |
#       ss-decode --prompt $'\nName Surname:' -n 2
# The phrase is the best retrieval measured (bench/recall-retrieval.sh: the gold in the top 4
# 100 % of the time against 68-72 % for the name's words OR-ed, where every "Vera ..." and
# "... Rossi" line scores alike; proximity also finds the gold but keeps 3 distractors).
# and, beside it, the number decoded after Concat (the K documents re-encoded as one text, most
# relevant last) and after Naive (no documents), each marked right or wrong. Then ss-eval recall
# over QUESTIONS questions: exact match, answer NLL and the time to build the context for each
# method, on the phrase's documents and on BM25's top K of the name's words (each with the
# retriever's recall@K), and on the oracle documents (the gold document and K-1 others).
# Environment: RECALL_MODEL (data/recall-model), RECALL_K (4), RECALL_DOCS (200),
# RECALL_QUESTIONS (100), RECALL_SHOW (3), OUT (default $SS_BUILD/demo; outputs in OUT/recall).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}"
case $SS_BUILD in /*) ;; *) SS_BUILD=$top/$SS_BUILD ;; esac
: "${RECALL_MODEL:=$top/data/recall-model}"
: "${RECALL_K:=4}" "${RECALL_DOCS:=200}" "${RECALL_QUESTIONS:=100}" "${RECALL_SHOW:=3}"
out=${OUT:-$SS_BUILD/demo}/recall
PATH=$SS_BUILD/bin:$PATH
G=$SS_BUILD/gen/mkrecall
M=$RECALL_MODEL
mkdir -p "$out"

. "$top/pipelines/records.sh"
# field NAME: the string field NAME of the JSON line on stdin (mkrecall writes plain strings).
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
mark() { if [ "$1" = "$2" ]; then echo right; else echo wrong; fi; }

echo
echo "recall: model $M ($(sed -n 's/.*"num_hidden_layers": *\([0-9]*\).*/\1/p' "$M/config.json") layers," \
	"d_model $(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$M/config.json"))"
"$G" corpus --seed 42 --docs "$RECALL_DOCS" --pairs 8 -o "$out/corpus.jsonl"
"$G" queries --seed 42 --docs "$RECALL_DOCS" --pairs 8 --k "$RECALL_K" --queries "$RECALL_QUESTIONS" \
	-o "$out/questions.jsonl"
ss-tokenize -q -t "$M/tokenizer.json" --jsonl -o "$out/corpus.tokens" "$out/corpus.jsonl"
ss-encode -q --model "$M" -o "$out/corpus.states" "$out/corpus.tokens"
rm -f "$out/index.db"
ss-retrieve build -q --index "$out/index.db" "$out/corpus.tokens" "$out/corpus.states"
offsets "$out/corpus.tokens" >"$out/corpus.offsets"
echo "recall: a phonebook of $RECALL_DOCS documents of 8 lines (gen/mkrecall corpus --seed 42), e.g.:"
sed -n 1p "$out/corpus.jsonl" | field text | sed 's/\\n/\n/g' | head -n 3 | sed 's/^/    /'
echo "    ..."

n=0
while [ "$n" -lt "$RECALL_SHOW" ] && IFS= read -r line <&3; do
	n=$((n + 1))
	d=$out/q$n
	mkdir -p "$d"
	key=$(echo "$line" | field key)
	want=$(echo "$line" | field continuation)
	gold=$(echo "$line" | field gold)
	prompt=$(printf '\n%s:' "$key")
	echo
	echo "question $n: whose number is $key's?  (the phonebook says:$want, in $gold)"
	echo "  \$ ss-retrieve query --query '\"$key\"' -k $RECALL_K | ss-compose --mode picaso-r | ss-decode --prompt \$'\\\\n$key:' -n 2"
	ss-retrieve query -q --index "$out/index.db" -k "$RECALL_K" --query "\"$key\"" --ids >"$d/retrieved.tsv"
	echo "  retrieved, the name as a phrase (most relevant last):"
	awk -F '\t' -v g="$gold" '{ printf "    rank %2d  score %6.2f  %s%s\n", $1, $3, $2, $2 == g ? "  (holds the answer)" : "" }' \
		"$d/retrieved.tsv"
	ss-retrieve query -q --index "$out/index.db" -k "$RECALL_K" --query "\"$key\"" |
		ss-compose --mode picaso-r >"$d/picaso-r.state"
	ss-decode -q --model "$M" --state "$d/picaso-r.state" --prompt "$prompt" -n 2 --ignore-eos >"$d/picaso-r.txt"
	# Concat: the retrieved documents' tokens in the same order, encoded as one text.
	cut -f 2 "$d/retrieved.tsv" | copy_ids "$out/corpus.tokens" "$out/corpus.offsets" >"$d/retrieved.tokens"
	ss-encode -q --model "$M" --concat -o "$d/concat.state" "$d/retrieved.tokens"
	ss-decode -q --model "$M" --state "$d/concat.state" --prompt "$prompt" -n 2 --ignore-eos >"$d/concat.txt"
	ss-decode -q --model "$M" --no-state --prompt "$prompt" -n 2 --ignore-eos >"$d/naive.txt"
	for m in picaso-r concat naive; do
		got=$(head -n 1 "$d/$m.txt")
		printf '  %-9s%-7s %s\n' "$m:" "$got" "$(mark "$got" "$want")"
	done
done 3<"$out/questions.jsonl"

echo
echo "recall: $RECALL_QUESTIONS questions, k = $RECALL_K documents, exact match of the greedy answer (ss-eval recall --retrievers bm25,phrase):"
ss-eval recall -q --model "$M" --index "$out/index.db" --qa "$out/questions.jsonl" --ks "$RECALL_K" \
	--methods naive,concat,picaso-r,picaso-s,soup --retrievers bm25,phrase -o "$out/eval.tsv"
awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	$c["pos"] == "all" { printf "  %-7s %-9s EM %5.2f   answer NLL %6.3f   context %8.3f ms   retrieved gold %4.2f\n",
		$c["context"], $c["method"], $c["em"], $c["mean_nll"], $c["mean_time_ms"], $c["recall"] }' "$out/eval.tsv"
echo "  (phrase: the documents holding the name as a phrase, at most K, the retrieval the questions above use;"
echo "   bm25: the K documents BM25 ranks highest for the name's words; oracle: the one that holds it and K-1 others;"
echo "   context: the time to build the state the answer is decoded from: compose the K stored states,"
echo "   or re-encode the K documents for Concat)"
