#!/bin/sh
# bench/recall-retrieval.sh — end-to-end recall by retriever (issue 47): for each phonebook seed,
# a corpus of DOCS documents of 8 "Name Surname: 0142" lines (gen/mkrecall, as pipelines/recall.mk
# and the demo make it) encoded with the recall model and indexed, then one ss-eval recall run
# giving, beside the oracle documents, the contexts of each retriever (bm25: the key's words
# OR-ed; phrase: the key as one quoted phrase; and; proximity: BM25TP): recall@k of the gold and
# EM of Concat and PICASO-R at each k. Prints one table per seed (TSVs kept in OUT).
# Environment: SEEDS ("1001 2024": the recall corpus's seed, then a held-out one), DOCS (300),
# QUERIES (200), KS (4,8,16), RETRIEVERS (bm25,phrase,and,proximity; add rerank with RERANK=N,
# BM25's top N reranked by the model), RECALL_MODEL (data/recall-model), OUT (build/bench-recall),
# SS_BUILD (build).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}"
case $SS_BUILD in /*) ;; *) SS_BUILD=$top/$SS_BUILD ;; esac
: "${SEEDS:=1001 2024}" "${DOCS:=300}" "${QUERIES:=200}" "${KS:=4,8,16}"
: "${RETRIEVERS:=bm25,phrase,and,proximity}" "${RECALL_MODEL:=$top/data/recall-model}"
out=${OUT:-$SS_BUILD/bench-recall}
PATH=$SS_BUILD/bin:$PATH
G=$SS_BUILD/gen/mkrecall
M=$RECALL_MODEL
kmax=${KS##*,}
mkdir -p "$out"
for seed in $SEEDS; do
	d=$out/seed$seed
	mkdir -p "$d"
	"$G" corpus --seed "$seed" --docs "$DOCS" --pairs 8 -o "$d/corpus.jsonl"
	"$G" queries --seed "$seed" --docs "$DOCS" --pairs 8 --k "$kmax" --queries "$QUERIES" -o "$d/queries.jsonl"
	ss-tokenize -q -t "$M/tokenizer.json" --jsonl -o "$d/corpus.tokens" "$d/corpus.jsonl"
	ss-encode -q --model "$M" -o "$d/corpus.states" "$d/corpus.tokens"
	rm -f "$d/index.db"
	ss-retrieve build -q --index "$d/index.db" "$d/corpus.tokens" "$d/corpus.states"
	ss-eval recall -q --model "$M" --index "$d/index.db" --qa "$d/queries.jsonl" --ks "$KS" \
		--methods concat,picaso-r --retrievers "$RETRIEVERS" ${RERANK:+--rerank "$RERANK"} -o "$d/eval.tsv"
	echo "phonebook seed $seed: $DOCS documents, $QUERIES queries (gen/mkrecall), model $M"
	awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
		$c["pos"] == "all" { key = $c["context"] SUBSEP $c["k"]
			if (!(key in seen)) { seen[key] = 1; order[n++] = key }
			em[key, $c["method"]] = $c["em"]; rec[key] = $c["recall"] }
		END { printf "  %-10s %3s  %8s  %8s  %8s\n", "context", "k", "recall", "concat", "picaso-r"
			for (i = 0; i < n; i++) { split(order[i], p, SUBSEP)
				printf "  %-10s %3s  %8.3f  %8.3f  %8.3f\n", p[1], p[2], rec[order[i]],
					em[order[i], "concat"], em[order[i], "picaso-r"] } }' "$d/eval.tsv"
done
