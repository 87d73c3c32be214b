#!/bin/sh
# bench/rerank.sh — the cost of ss-retrieve query --rerank N (issue 47): BM25's top N scored by
# the model from each candidate's stored state, one batch. Two shapes:
#   recall       the bundled recall model (data/recall-model) on a phonebook of 300 documents
#                (gen/mkrecall, seed 1001 as pipelines/recall.mk), the queries its names
#   mamba2-130m  a random model of that shape (gen/mkmodel) on N_DOCS WikiText-2 chunks of
#                CHUNK tokens, the queries WORDS words of other lines
# For each: the rerank's own time a query (tokenizing and scoring, ss-retrieve -v), and the
# wall time a query of the whole batch with and without --rerank (the difference adds reading
# the N states). Prints figures; never fails on time.
# usage: bench/rerank.sh   environment: N (16) THREADS (2) SCORE (ll; or entropy) N_QUERIES (8)
# N_DOCS (64) CHUNK (256) WORDS (30) SS_BUILD (build)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}" "${SCORE:=ll}" "${N:=16}" "${THREADS:=2}" "${N_QUERIES:=8}" "${N_DOCS:=64}" "${CHUNK:=256}" "${WORDS:=30}"
case $SS_BUILD in /*) ;; *) SS_BUILD=$top/$SS_BUILD ;; esac
PATH=$SS_BUILD/bin:$PATH
for g in mkmodel mkrecall; do
	[ -x "$SS_BUILD/gen/$g" ] || { echo "rerank: no $SS_BUILD/gen/$g (make first)"; exit 1; }
done
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
unset SS_MODEL SS_TOKENIZER
now() { date +%s.%N; }
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg) (figures from a loaded machine are not comparable)"
echo "score: $SCORE"
printf '%-12s %4s %7s %8s %14s %12s %12s\n' shape N threads q_tokens rerank_ms/q plain_ms/q total_ms/q

# run SHAPE MODEL INDEX QUERIES: one batch plain, one with --rerank; prints the row
run() {
	nq=$(wc -l <"$4")
	t0=$(now)
	ss-retrieve query --index "$3" --ids -k 4 <"$4" >plain.tsv
	t1=$(now)
	ss-retrieve query -v --index "$3" --ids -k 4 --rerank "$N" --rerank-score "$SCORE" --model "$2" --threads "$THREADS" <"$4" \
		>rr.tsv 2>rr.err
	t2=$(now)
	ms=$(sed -n 's/.* queries reranked .*: \([0-9.]*\) ms a query$/\1/p' rr.err)
	load=$(sed -n 's/.*model loaded in \([0-9.]*\) s$/\1/p' rr.err)
	qt=$(awk '{ n += NF } END { printf "%.0f", n / NR }' "$4")
	awk -v s="$1" -v n="$N" -v th="$THREADS" -v qt="$qt" -v ms="$ms" -v nq="$nq" -v a="$t0" -v b="$t1" \
		-v c="$t2" -v load="${load:-0}" 'BEGIN { printf "%-12s %4d %7d %8s %14.2f %12.2f %12.2f\n", s, n, th,
		qt " w", ms, (b - a) / nq * 1e3, (c - b - load) / nq * 1e3 }'
}

# the recall model's shape: names as queries
M=$top/data/recall-model
"$SS_BUILD/gen/mkrecall" corpus --seed 1001 --docs 300 --pairs 8 -o book.jsonl
"$SS_BUILD/gen/mkrecall" queries --seed 1001 --docs 300 --pairs 8 --k 16 --queries 200 -o q.jsonl
ss-tokenize -q -t "$M/tokenizer.json" --jsonl -o book.tok book.jsonl
ss-encode -q --model "$M" --threads "$THREADS" -o book.states book.tok
ss-retrieve build -q --index book.db book.tok book.states
sed 's/.*"key":"\([^"]*\)".*/\1/' q.jsonl >names.txt
run recall "$M" book.db names.txt

# mamba2-130m's shape, random weights: WikiText chunks, WORDS-word queries
"$SS_BUILD/gen/mkmodel" m130 --preset mamba2-130m >/dev/null
cp "$top/data/tokenizer.json" m130/
grep -v '^ *$' "$top/data/wikitext-2-raw.test.hf-crlf.raw" | tr -d '\r' | head -n 400 >corpus.txt
ss-tokenize -q -t m130/tokenizer.json --chunk "$CHUNK" -o all.tok corpus.txt
ss-cat all.tok | head -n "$N_DOCS" | sed 's/.*"id":"\([^"]*\)".*/\1/' >ids.txt
ss-encode -q --model m130 --threads "$THREADS" --ids ids.txt -o docs.states all.tok
ss-retrieve build -q --index w.db all.tok docs.states 2>/dev/null
sed -n '401,$p' "$top/data/wikitext-2-raw.test.hf-crlf.raw" | tr -d '\r' | grep -v '^ *=' |
	awk -v w="$WORDS" 'NF >= w { s = $1; for (i = 2; i <= w; i++) s = s " " $i; print s }' |
	head -n "$N_QUERIES" >wq.txt
run mamba2-130m m130 w.db wq.txt
