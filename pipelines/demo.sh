#!/bin/sh
# pipelines/demo.sh — the main job (README quick start; run by `make demo`). Tokenizes a corpus
# into 256-token chunks, encodes one state per chunk, indexes the chunks (BM25), then for a few
# queries retrieves k = 5 chunks, composes their states with PICASO-R and decodes a continuation
# of the query from the composed state:
#   ss-retrieve query --query Q | ss-compose --mode picaso-r | ss-decode --prompt Q
# It prints the retrieved ids and scores, the continuation, how well the context predicts real
# text (the NLL of the corpus chunk that follows the best hit, left out of the context, with no
# context, with PICASO-R and with Concat), and the time to compose the K states
# against the time of the paper's Concat (PICASO §6.2): from the least relevant chunk's stored
# state, re-encode the other K-1 chunks (ss-encode --from-state --concat), as ss-eval does. Both
# are timed alike, as the tools measure them (-v: reading their own inputs from files, computing,
# writing; no process start, no model load), best of REPEAT runs: ss-compose reads the K states,
# ss-encode the one state and the K-1 chunks' token records (copied out of the corpus stream
# beforehand, as ss-retrieve copied the states).
# Environment: MODEL (default the bundled data/model), DOCS (corpus files, space-separated;
# default the bundled WikiText-2 raw test split, data/), QUERIES (a file, one query per line;
# default three about the WikiText articles), K (5), MAX_TOKENS (32), REPEAT (3), STATE_DTYPE (the
# stored states' dtype, f16: 0.96 GB for the bundled corpus and model, 1.9 GB in f32), OUT (default
# $SS_BUILD/demo), RECALL (1: then run the recall part, demo-recall.sh, with its own variables;
# 0: not).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}"
case $SS_BUILD in /*) ;; *) SS_BUILD=$top/$SS_BUILD ;; esac
: "${MODEL:=$top/data/model}"
# Every tool reads the model's tokenizer (its directory's tokenizer.json, when it has one).
SS_MODEL=$MODEL
export SS_MODEL
: "${DOCS:=$top/data/wikitext-2-raw.test.hf-crlf.raw}"
: "${K:=5}" "${MAX_TOKENS:=32}" "${REPEAT:=3}" "${STATE_DTYPE:=f16}"
out=${OUT:-$SS_BUILD/demo}
PATH=$SS_BUILD/bin:$PATH
mkdir -p "$out"
out=$(cd "$out" && pwd)

now() { date +%s.%N; }
. "$top/pipelines/records.sh"
# secs START END: the difference, 3 significant figures.
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%#.3g", b - a }'; }
# took LOG: the seconds of a tool's -v summary line "... in X s ...".
took() { sed -n 's/^ss-[a-z]*: .* in \([0-9.e+-]*\) s\( .*\)*$/\1/p' "$1" | tail -n 1; }
oneline() { tr '\r\n' '  '; }

echo "ss demo: model $MODEL"
echo "ss demo: corpus $DOCS"
echo "ss demo: outputs in $out"
echo

# 1. The state database: tokens, one state per chunk, the index. A single corpus file is
# tokenized from its own directory so that the chunk ids read "NAME:LINE#CHUNK".
t0=$(now)
set -f
# shellcheck disable=SC2086 # DOCS is a list of files
set -- $DOCS
set +f
if [ $# -eq 1 ] && [ -f "$1" ]; then
	(cd "$(dirname "$1")" && ss-tokenize -q --chunk 256 -o "$out/corpus.tokens" "$(basename "$1")")
else
	ss-tokenize -q --chunk 256 -o "$out/corpus.tokens" "$@"
fi
t1=$(now)
ss-encode -v --model "$MODEL" --state-dtype "$STATE_DTYPE" -o "$out/corpus.states" "$out/corpus.tokens" 2>"$out/encode.log"
t2=$(now)
rm -f "$out/index.db"
ss-retrieve build -q --index "$out/index.db" "$out/corpus.tokens" "$out/corpus.states"
t3=$(now)
offsets "$out/corpus.tokens" >"$out/corpus.offsets"
n_chunks=$(wc -l <"$out/corpus.offsets")
n_tok=$(sed -n 's/^ss-encode: [0-9]* documents*, \([0-9]*\) tokens in .*/\1/p' "$out/encode.log")
mb=$(awk -v b="$(wc -c <"$out/corpus.states")" 'BEGIN { s = sprintf("%#.3g", b / 1e6); sub(/\.$/, "", s); print s }')
echo "database: $n_chunks chunks of at most 256 tokens, $n_tok tokens, $mb MB of states"
printf '  %-36s %s s\n' "ss-tokenize --chunk 256" "$(secs "$t0" "$t1")" \
	"ss-encode --model $(basename "$MODEL") --state-dtype $STATE_DTYPE" "$(secs "$t1" "$t2")" \
	"ss-retrieve build" "$(secs "$t2" "$t3")"

# 2. The queries.
if [ -n "${QUERIES:-}" ]; then
	cp "$QUERIES" "$out/queries.txt"
else
	cat >"$out/queries.txt" <<-'EOF'
	Du Fu was a Chinese poet of the Tang dynasty
	The Ise-class battleships of the Imperial Japanese Navy
	The Olmec colossal heads are carved from basalt
	EOF
fi
n=0 m=0 sum_c=0 sum_e=0 ns=0 s0=0 s1=0 s2=0
while IFS= read -r q <&3; do
	[ -n "$q" ] || continue
	n=$((n + 1))
	d=$out/q$n
	mkdir -p "$d"
	echo
	echo "query $n: $q"
	echo "  \$ ss-retrieve query --index index.db -k $K --literal --query \"...\" | ss-compose --mode picaso-r | ss-decode --prompt \"...\""
	# The chunk the query is scored on: the one after the best hit in the corpus, left out of
	# the context (a context holding it would hand the model its answer).
	best=$(ss-retrieve query -q --index "$out/index.db" -k 1 --literal --query "$q" --ids --empty-ok | cut -f 2)
	next=$(awk -F '\t' -v id="$best" 'hit { print $1; exit } $1 == id { hit = 1 }' "$out/corpus.offsets")
	set -- ${next:+--exclude "$next"}
	ss-retrieve query -q --index "$out/index.db" -k "$K" --literal --query "$q" "$@" --ids --empty-ok >"$d/retrieved.tsv"
	echo "  retrieved (most relevant last):"
	awk -F '\t' '{ printf "    rank %2d  score %6.2f  %s\n", $1, $3, $2 }' "$d/retrieved.tsv"
	if [ ! -s "$d/retrieved.tsv" ]; then
		echo "  (nothing matches: skipped)"
		continue
	fi
	ss-retrieve query -q --index "$out/index.db" -k "$K" --literal --query "$q" "$@" |
		ss-compose --mode picaso-r |
		ss-decode --model "$MODEL" --prompt "$q" --max-tokens "$MAX_TOKENS" >"$d/picaso-r.txt"
	printf '  continuation (PICASO-R): %s\n' "$(oneline <"$d/picaso-r.txt")"

	# Timing: the retrieved states composed from a file, against Concat in the same order
	# (most relevant last): the least relevant chunk's stored state (the first record of
	# retrieved.states), then the other chunks' tokens re-encoded from it.
	ss-retrieve query -q --index "$out/index.db" -k "$K" --literal --query "$q" "$@" -o "$d/retrieved.states"
	cut -f 2 "$d/retrieved.tsv" >"$d/ids"
	offsets "$d/retrieved.states" | head -n 1 | { IFS=$(printf '\t') read -r _ a b &&
		copy "$d/retrieved.states" "$a" "$b"; } >"$d/first.state"
	tail -n +2 "$d/ids" | copy_ids "$out/corpus.tokens" "$out/corpus.offsets" >"$d/rest.tokens"
	all="concat($(paste -sd, "$d/ids"))"
	best_c= best_e=
	i=0
	while [ $i -lt "$REPEAT" ]; do
		ss-compose -v --mode picaso-r -o "$d/picaso-r.state" "$d/retrieved.states" 2>"$d/compose.log"
		ss-encode -v --model "$MODEL" --from-state "$d/first.state" --concat --id "$all" \
			-o "$d/concat.state" "$d/rest.tokens" 2>"$d/concat.log"
		c=$(took "$d/compose.log") e=$(took "$d/concat.log")
		best_c=$(awk -v a="$c" -v b="${best_c:-$c}" 'BEGIN { print (a < b ? a : b) }')
		best_e=$(awk -v a="$e" -v b="${best_e:-$e}" 'BEGIN { print (a < b ? a : b) }')
		i=$((i + 1))
	done
	ss-decode --model "$MODEL" --state "$d/concat.state" --prompt "$q" --max-tokens "$MAX_TOKENS" >"$d/concat.txt"
	printf '  continuation (Concat):   %s\n' "$(oneline <"$d/concat.txt")"
	# Context use: the mean NLL of the next chunk's tokens after a blank line (as
	# pipelines/context_use.py scores a chunk), from no state, from the PICASO-R composition and
	# from the Concat state of the retrieved chunks.
	if [ -n "$next" ]; then
		qt=$(printf '\n\n' | ss-tokenize --whole --ids | tr ' ' ',')
		ct=$(echo "$next" | copy_ids "$out/corpus.tokens" "$out/corpus.offsets" | ss-cat --full |
			sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p')
		for s in none picaso-r concat; do
			case $s in none) st=--no-state ;; *) st="--state $d/$s.state" ;; esac
			# shellcheck disable=SC2086 # st is an option and its argument
			ss-score -q --model "$MODEL" $st --query-tokens "$qt" --continuation-tokens "$ct" |
				sed -n 's/.*"nll":\([0-9.e+-]*\),"n_tokens":\([0-9]*\).*/\1 \2/p' >"$d/nll-$s"
		done
		read -r n0 nt <"$d/nll-none"; read -r n1 _ <"$d/nll-picaso-r"; read -r n2 _ <"$d/nll-concat"
		awk -v id="$next" -v nt="$nt" -v a="$n0" -v b="$n1" -v c="$n2" 'BEGIN {
			printf "  NLL of the chunk after the best hit (%s, %d tokens), nats/token:\n", id, nt
			printf "        no context %.4f   PICASO-R %.4f (%+.2f%%)   Concat %.4f (%+.2f%%)\n",
				a, b, 100 * (b - a) / a, c, 100 * (c - a) / a }'
		ns=$((ns + 1))
		s0=$(awk -v s="$s0" -v a="$n0" 'BEGIN { print s + a }')
		s1=$(awk -v s="$s1" -v a="$n1" 'BEGIN { print s + a }')
		s2=$(awk -v s="$s2" -v a="$n2" 'BEGIN { print s + a }')
	fi
	k=$(wc -l <"$d/ids")
	ctok=$(sed -n 's/^ss-encode: [0-9]* documents*, \([0-9]*\) tokens in .*/\1/p' "$d/concat.log")
	awk -v c="$best_c" -v e="$best_e" -v k="$k" -v t="$ctok" 'BEGIN {
		printf "  time: compose %#.3g s (ss-compose --mode picaso-r, %d states)\n", c, k
		printf "        concat  %#.3g s (ss-encode --from-state --concat: 1 state + %d chunks, %d tokens)\n", e, k - 1, t
		printf "        compose is %#.3g x faster\n", e / c }'
	m=$((m + 1))
	sum_c=$(awk -v s="$sum_c" -v a="$best_c" 'BEGIN { print s + a }')
	sum_e=$(awk -v s="$sum_e" -v a="$best_e" 'BEGIN { print s + a }')
done 3<"$out/queries.txt"

echo
if [ "$m" -gt 0 ]; then
	awk -v c="$sum_c" -v e="$sum_e" -v n="$m" -v r="$REPEAT" 'BEGIN {
		printf "mean over %d queries (best of %d runs each): compose %#.3g s, concat %#.3g s\n", n, r, c / n, e / n
		printf "PICASO-R composition is %#.3g x faster than re-encoding the concatenation\n", e / c }'
fi
if [ "$ns" -gt 0 ]; then
	awk -v n="$ns" -v a="$s0" -v b="$s1" -v c="$s2" 'BEGIN {
		printf "mean NLL of the chunks after the best hits (%d queries), nats/token: no context %.4f, PICASO-R %.4f (%+.2f%%), Concat %.4f (%+.2f%%)\n",
			n, a / n, b / n, 100 * (b - a) / a, c / n, 100 * (c - a) / a }'
fi

# 3. Composition that answers: the recall model on a generated phonebook (demo-recall.sh).
if [ "${RECALL:-1}" != 0 ]; then
	OUT=$out "$top/pipelines/demo-recall.sh"
fi
