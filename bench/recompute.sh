#!/bin/sh
# bench/recompute.sh — retrieval latency of a cold document (stateless: ss-retrieve query --model
# re-encodes it from its stored tokens) against a stored one (its record copied from the state
# file), per model shape. For each PRESET (gen/mkmodel; default: t1 mamba2-130m): a random model,
# N_DOCS WikiText-2 chunks of CHUNK tokens (data/, the bundled tokenizer) encoded by ss-encode and
# indexed twice: every state stored, and --state-budget 0 (every document stateless). The same
# N_QUERIES queries (k = 1, plain lines: words of the corpus) run as one batch on each index; a
# query's latency is the batch's wall time over N_QUERIES, less (cold) the model load, which
# ss-retrieve -v reports apart (once per process). Prints figures; never fails on time.
# usage: bench/recompute.sh [PRESET...]   environment: N_DOCS (32) N_QUERIES (32) CHUNK (256)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}" "${N_DOCS:=32}" "${N_QUERIES:=32}" "${CHUNK:=256}"
PATH=$top/$SS_BUILD/bin:$PATH
mkmodel=$top/$SS_BUILD/gen/mkmodel
[ -x "$mkmodel" ] || { echo "recompute: no $mkmodel (make first)"; exit 1; }
[ $# -gt 0 ] || set -- t1 mamba2-130m
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
unset SS_MODEL
export SS_TOKENIZER="$top/data/tokenizer.json"
now() { date +%s.%N; }
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg) (figures from a loaded machine are not comparable)"
# N_DOCS chunks of the WikiText-2 test split; queries: 6 words from other lines of it
grep -v '^ *$' "$top/data/wikitext-2-raw.test.hf-crlf.raw" | tr -d '\r' | head -n 400 >corpus.txt
ss-tokenize -q --chunk "$CHUNK" -o all.tok corpus.txt
ss-cat all.tok | head -n "$N_DOCS" | sed 's/.*"id":"\([^"]*\)".*/\1/' >ids.txt
sed -n '401,$p' "$top/data/wikitext-2-raw.test.hf-crlf.raw" | tr -d '\r' | grep -v '^ *=' |
	awk 'NF >= 6 { print $1, $2, $3, $4, $5, $6 }' | head -n "$N_QUERIES" >queries.txt
printf '%-12s %8s %8s %12s %12s %12s %14s %10s\n' preset tokens/doc state_B stored_ms cold_ms \
	recompute_ms per_1k_tok_ms load_s
for p in "$@"; do
	"$mkmodel" "m-$p" --preset "$p" >/dev/null
	ss-encode -q --model "m-$p" --ids ids.txt -o docs.states all.tok
	ss-retrieve build -q --index full.db all.tok docs.states 2>/dev/null
	cp full.db cold.db
	ss-retrieve add -q --index cold.db --state-budget 0
	mkdir -p out-full out-cold
	t0=$(now)
	ss-retrieve query -q --index full.db -k 1 --literal --empty-ok --out-dir out-full <queries.txt
	t1=$(now)
	ss-retrieve query -v --index cold.db -k 1 --literal --empty-ok --out-dir out-cold --model "m-$p" \
		<queries.txt 2>cold.err
	t2=$(now)
	# "... N stateless documents recomputed (T tokens) in S s; model loaded in L s"
	line=$(grep 'recomputed' cold.err)
	n=$(echo "$line" | sed 's/.*: \([0-9]*\) stateless.*/\1/')
	tok=$(echo "$line" | sed 's/.*(\([0-9]*\) tokens).*/\1/')
	rs=$(echo "$line" | sed 's/.* in \([0-9.]*\) s;.*/\1/')
	ls=$(echo "$line" | sed 's/.*loaded in \([0-9.]*\) s.*/\1/')
	sb=$(ss-retrieve stats --index full.db | awk '$1 == "state_bytes" { print $2 }')
	nd=$(ss-retrieve stats --index full.db | awk '$1 == "documents" { print $2 }')
	awk -v p="$p" -v n="$n" -v tok="$tok" -v rs="$rs" -v ls="$ls" -v t0="$t0" -v t1="$t1" -v t2="$t2" \
		-v q="$N_QUERIES" -v sb="$sb" -v nd="$nd" 'BEGIN {
		printf "%-12s %8.0f %8.0f %12.3f %12.3f %12.3f %14.3f %10.3f\n", p, tok / (n ? n : 1), sb / nd,
			(t1 - t0) * 1e3 / q, (t2 - t1 - ls) * 1e3 / q, rs * 1e3 / (n ? n : 1),
			tok ? rs * 1e6 / tok : 0, ls }'
	rm -rf "m-$p" docs.states full.db cold.db out-full out-cold
done
echo "stored_ms, cold_ms: wall time per query (k = 1) of a batch of $N_QUERIES, process start and index"
echo "open included, the model load excluded; recompute_ms: the forward pass alone per document"
