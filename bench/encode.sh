#!/bin/sh
# bench/encode.sh — encoding a corpus end to end (issue 50 §3): WikiText-2's test split
# (data/wikitext-2-raw.test.hf-crlf.raw) cut by ss-tokenize --chunk CHUNK into documents of at
# most CHUNK tokens (3,086 of them at 256, 92.6 tokens on average: its lines are its
# paragraphs), encoded by `ss-encode --threads THREADS` with the model's matrices in each of
# DTYPES, states to /dev/null, process start and model load included; tokens/s beside the
# same text as documents of 512 tokens (its lines joined, cut by --chunk 512, as many tokens,
# encoded right after by the same command: the sustained one-document rate), the one-document
# prefill rate of the same build and weights (build/bench/forward's table by weights dtype: a
# 512-token document, state only, the best of 6 prefills in 3 processes) and llama.cpp's pp at
# the mean chunk length (llama-bench -p MEAN on LLAMA_GGUF; LLAMA_GGUF_Q8_0 for q8_0, when set)
# in the same run. The weights: MODEL (an HF directory; default a random mamba2-130m from
# gen/mkmodel, f32). Prints figures; never fails on time.
# usage: bench/encode.sh   environment: CHUNK (256) THREADS (2) DTYPES (f32 bf16 q8_0)
#        N_CHUNKS (all) MODEL (random mamba2-130m) LLAMA_BENCH LLAMA_GGUF LLAMA_GGUF_Q8_0
#        SS_BUILD (build)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}" "${CHUNK:=256}" "${THREADS:=2}" "${DTYPES:=f32 bf16 q8_0}" "${N_CHUNKS:=}"
case $SS_BUILD in /*) ;; *) SS_BUILD=$top/$SS_BUILD ;; esac
PATH=$SS_BUILD/bin:$PATH
for p in gen/mkmodel bench/forward bin/ss-encode bin/ss-tokenize; do
	[ -x "$SS_BUILD/$p" ] || { echo "encode: no $SS_BUILD/$p (make first)"; exit 1; }
done
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
unset SS_MODEL SS_TOKENIZER SS_MODEL_WEIGHTS_DTYPE
if [ -z "${MODEL:-}" ]; then
	MODEL=$d/m130
	"$SS_BUILD/gen/mkmodel" "$MODEL" --preset mamba2-130m >/dev/null
fi
now() { date +%s.%N; }

ss-tokenize -q -t "$top/data/tokenizer.json" --chunk "$CHUNK" -o "$d/all.tok" "$top/data/wikitext-2-raw.test.hf-crlf.raw"
if [ -n "$N_CHUNKS" ]; then
	ss-cat "$d/all.tok" | head -n "$N_CHUNKS" | sed 's/.*"id":"\([^"]*\)".*/\1/' >"$d/ids.txt"
	ids="--ids $d/ids.txt"
else
	ids=
fi
ss-cat "$d/all.tok" | head -n "${N_CHUNKS:-999999999}" | sed 's/.*"n_tokens":\([0-9]*\).*/\1/' >"$d/lens.txt"
# shellcheck disable=SC2046 # four numbers
set -- $(awk '{ s += $1; n++ } END { printf "%d %d %.1f %d", n, s, s / n, s / n + 0.5 }' "$d/lens.txt")
docs=$1 tokens=$2 mean=$3 pp=$4
# the same text as 512-token documents, as many of them as make the corpus's tokens
tr '\r\n' '  ' <"$top/data/wikitext-2-raw.test.hf-crlf.raw" >"$d/joined.txt"
ss-tokenize -q -t "$top/data/tokenizer.json" --chunk 512 -o "$d/long.tok" "$d/joined.txt"
ss-cat "$d/long.tok" | head -n $(((tokens + 511) / 512)) >"$d/long.head"
sed 's/.*"id":"\([^"]*\)".*/\1/' "$d/long.head" >"$d/long.ids"
ltokens=$(sed 's/.*"n_tokens":\([0-9]*\).*/\1/' "$d/long.head" | awk '{ s += $1 } END { print s }')

echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg) (figures from a loaded machine are not comparable)"
echo "corpus: $docs documents of at most $CHUNK tokens, $tokens tokens, $mean a document; $THREADS threads; weights $MODEL"
echo "as_512: the same text as $(wc -l <"$d/long.ids") documents of 512 tokens, $ltokens tokens, encoded right after"
printf '%-6s %9s %9s %9s %14s %12s %14s %10s %9s\n' dtype encode_s tokens/s as_512 encode/as_512 \
	one_doc_best encode/one_doc "llama_pp$pp" ours/peer

# the one-document rates: build/bench/forward's table by weights dtype (a fresh process each,
# rounds interleaved), "prefill of 512 tokens R tokens/s best"
"$SS_BUILD/bench/forward" -m "$MODEL" -t "$THREADS" -r 3 -g 1 -d 1 2>/dev/null |
	sed -n 's/^ *\([a-z0-9_]*\) *weights:.*prefill of 512 tokens \([0-9.]*\) tokens\/s best.*/\1 \2/p' >"$d/one.txt"

for dt in $DTYPES; do
	t0=$(now)
	# shellcheck disable=SC2086 # $ids is empty or two words
	ss-encode -q --model "$MODEL" --threads "$THREADS" --weights-dtype "$dt" $ids -o /dev/null "$d/all.tok"
	t1=$(now)
	ss-encode -q --model "$MODEL" --threads "$THREADS" --weights-dtype "$dt" --ids "$d/long.ids" -o /dev/null "$d/long.tok"
	t2=$(now)
	rate=$(echo "$tokens $t0 $t1" | awk '{ printf "%.1f", $1 / ($3 - $2) }')
	long=$(echo "$ltokens $t1 $t2" | awk '{ printf "%.1f", $1 / ($3 - $2) }')
	one=$(awk -v dt="$dt" '$1 == dt { print $2 }' "$d/one.txt")
	gguf=${LLAMA_GGUF:-}
	[ "$dt" = q8_0 ] && gguf=${LLAMA_GGUF_Q8_0:-}
	[ "$dt" = bf16 ] && gguf=
	peer="-"
	if [ -n "${LLAMA_BENCH:-}" ] && [ -n "$gguf" ]; then
		peer=$("$LLAMA_BENCH" -m "$gguf" -p "$pp" -n 0 -t "$THREADS" -ngl 0 -r 3 -o json 2>/dev/null |
			sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | head -n 1 | awk '{ printf "%.1f", $1 }')
		[ -n "$peer" ] || peer="-"
	fi
	printf '%-6s %9.1f %9s %9s %14s %12s %14s %10s %9s\n' "$dt" "$(echo "$t0 $t1" | awk '{ print $2 - $1 }')" \
		"$rate" "$long" "$(echo "$rate $long" | awk '{ printf "%.2f", $1 / $2 }')" \
		"${one:--}" "$(echo "$rate ${one:-0}" | awk '{ print ($2 > 0 ? sprintf("%.2f", $1 / $2) : "-") }')" \
		"$peer" "$(echo "$rate $peer" | awk '{ print ($2 + 0 > 0 ? sprintf("%.2f", $1 / $2) : "-") }')"
done
[ -n "${LLAMA_BENCH:-}" ] || echo "llama.cpp: not measured (set LLAMA_BENCH, LLAMA_GGUF, LLAMA_GGUF_Q8_0; bench/README.md)"
echo "bf16: no llama.cpp row (LLAMA_GGUF is the f32 peer, LLAMA_GGUF_Q8_0 the q8_0 one)"
echo "goal (issue 50): a corpus of short documents within 10 % of one document's prefill rate (encode/as_512,"
echo "  sustained through the same tool, and encode/one_doc, the best of short bursts, >= 0.9)"
