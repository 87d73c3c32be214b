#!/bin/sh
# The main job (pipelines/demo.sh) on a small sample of WikiText with the t1 model: it builds the
# database and prints, for each query, the k = 5 retrieved ids with scores, a non-empty
# continuation from the PICASO-R state, the NLL lines, and the compose and concat times (3
# significant figures); Concat starts from the least relevant chunk's stored state (PICASO §6.2)
# and gives the state of the retrieved chunks concatenated (exactly: STATE_DTYPE=f32); MODEL, DOCS,
# QUERIES, OUT are honoured. Run by tests/run from the repo root.
set -eu
LC_ALL=C; export LC_ALL # the continuations of a random model are not always valid UTF-8
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; sed 's/^/    | /' "$d/out" >&2; exit 1; }
head -n 60 "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" >"$d/wiki.txt"
printf '%s\n' 'Robert Boulter starred in a television series' '' 'Du Fu wrote poems' >"$d/queries"
OUT=$d/out.d DOCS=$d/wiki.txt MODEL=$SS_FIXTURES/golden/models/t1-hf QUERIES=$d/queries \
	STATE_DTYPE=f32 REPEAT=1 MAX_TOKENS=8 RECALL_DOCS=60 RECALL_QUESTIONS=40 sh "$SS_TOP/pipelines/demo.sh" >"$d/out" 2>"$d/err" ||
	{ cat "$d/err" >&2; fail "demo.sh failed"; }
[ ! -s "$d/err" ] || { cat "$d/err" >&2; fail "demo.sh wrote to stderr"; }
o=$d/out
n=$(ss-cat --meta "$d/out.d/corpus.tokens" | wc -l)
grep -q "^database: $n chunks of at most 256 tokens, [0-9]* tokens, [0-9.]* MB of states$" "$o" || fail "database line"
for t in "ss-tokenize --chunk 256" "ss-encode --model t1-hf --state-dtype f32" "ss-retrieve build"; do
	grep -q "^  $t  *[0-9][0-9.e+-]* s$" "$o" || fail "no time for $t"
done
[ "$(grep -c '^query [0-9]*: ' "$o")" -eq 2 ] || fail "not 2 queries (the empty line is skipped)"
grep -q '^query 1: Robert Boulter starred in a television series$' "$o" || fail "query 1"
# k = 5 ids with scores per query, most relevant (rank 1) last, ids of the sample's chunks.
[ "$(grep -c '^    rank  [1-5]  score  *[0-9.]*  wiki.txt:[0-9]*#[0-9]*$' "$o")" -eq 10 ] || fail "retrieved ids"
[ "$(grep -A 7 '^query 1' "$o" | sed -n 8p | sed 's/^    rank  \([0-9]\).*/\1/')" = 1 ] || fail "rank 1 not last"
grep -A 7 '^query 1' "$o" | grep -q 'score.*wiki.txt:[2-9]#0$' || fail "Boulter query did not find its article"
[ "$(grep -c '^  continuation (PICASO-R): ..*' "$o")" -eq 2 ] || fail "continuation"
[ "$(grep -c '^  continuation (Concat):   ..*' "$o")" -eq 2 ] || fail "concat continuation"
# Times: 3 significant figures (%#.3g: 1.23, 0.0123, 1.23e-05).
sig3='\([1-9]\.[0-9][0-9]\|0\.0*[1-9][0-9][0-9]\|[1-9][0-9]\.[0-9]\|[1-9][0-9][0-9]\.\?\|[1-9]\.[0-9][0-9]e[-+][0-9]*\)'
[ "$(grep -c "^  time: compose $sig3 s (ss-compose --mode picaso-r, 5 states)$" "$o")" -eq 2 ] || fail "compose time"
[ "$(grep -c "^        concat  $sig3 s (ss-encode --from-state --concat: 1 state + 4 chunks, [0-9]* tokens)$" "$o")" -eq 2 ] || fail "concat time"
[ "$(grep -c "^        compose is $sig3 x faster$" "$o")" -eq 2 ] || fail "ratio"
grep -q "^mean over 2 queries (best of 1 runs each): compose $sig3 s, concat $sig3 s$" "$o" || fail "mean"
grep -q "^PICASO-R composition is $sig3 x faster than re-encoding the concatenation$" "$o" || fail "summary"
# The concat state re-encodes exactly the retrieved chunks but the first, in retrieval order,
# from the first one's stored state: it equals encoding all of them from zero.
cut -f 2 "$d/out.d/q1/retrieved.tsv" | paste -sd, >"$d/want"
ss-cat --meta "$d/out.d/q1/concat.state" | grep -qF "\"id\":\"concat($(cat "$d/want"))\"" || fail "concat state id"
[ "$(ss-cat --meta "$d/out.d/q1/rest.tokens" | wc -l)" -eq 4 ] || fail "rest.tokens: not 4 chunks"
ss-encode --model "$SS_FIXTURES/golden/models/t1-hf" --concat --ids "$d/out.d/q1/ids" "$d/out.d/corpus.tokens" |
	ss-cat --full | sed 's/"id":"[^"]*",//' >"$d/scratch.json"
ss-cat --full "$d/out.d/q1/concat.state" | sed 's/"id":"[^"]*",//' >"$d/stored.json"
python3 - "$d/scratch.json" "$d/stored.json" <<'PYEOF' || fail "Concat from the stored state differs from the concatenation encoded from zero"
import json, sys
a, b = (json.loads(open(f).readline()) for f in sys.argv[1:3])
for k in ("ssm", "conv", "logdecay"):
    x, y = a[k]["data"] if isinstance(a[k], dict) else a[k], b[k]["data"] if isinstance(b[k], dict) else b[k]
    flat = lambda v: [w for u in v for w in flat(u)] if isinstance(v, list) else [v]
    fx, fy = flat(x), flat(y)
    assert len(fx) == len(fy) and max(abs(p - q) for p, q in zip(fx, fy)) <= 1e-5 + 1e-5 * max(map(abs, fy)), k
assert a["n_tokens"] == b["n_tokens"]
PYEOF

# Context use: the chunk after the best hit in the corpus, left out of the context, scored after
# a blank line (GPT-NeoX token 535) with no state, the PICASO-R state and the Concat state (each
# figure as ss-score gives it).
. "$SS_TOP/pipelines/records.sh"
best=$(sed -n '$p' "$d/out.d/q1/retrieved.tsv" | cut -f 2)
next=$(awk -F '\t' -v id="$best" 'hit { print $1; exit } $1 == id { hit = 1 }' "$d/out.d/corpus.offsets")
[ -n "$next" ] && ! cut -f 2 "$d/out.d/q1/retrieved.tsv" | grep -qxF "$next" || fail "the scored chunk $next is in the context"
line=$(grep -A 1 "^  NLL of the chunk after the best hit ($next, [0-9]* tokens), nats/token:$" "$o" | sed -n 2p)
[ -n "$line" ] || fail "no NLL line for $next"
ct=$(echo "$next" | copy_ids "$d/out.d/corpus.tokens" "$d/out.d/corpus.offsets" | ss-cat --full |
	sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p')
for s in none picaso-r concat; do
	case $s in none) st=--no-state ;; *) st="--state $d/out.d/q1/$s.state" ;; esac
	# shellcheck disable=SC2086
	x=$(ss-score -q --model "$SS_FIXTURES/golden/models/t1-hf" $st --query-tokens 535 --continuation-tokens "$ct" |
		sed -n 's/.*"nll":\([0-9.e+-]*\),.*/\1/p')
	x=$(awk -v x="$x" 'BEGIN { printf "%.4f", x }')
	case $s in
	none) echo "$line" | grep -q "^        no context $x   PICASO-R " || fail "no-context NLL is not $x: $line" ;;
	picaso-r) echo "$line" | grep -q "   PICASO-R $x (" || fail "PICASO-R NLL is not $x: $line" ;;
	concat) echo "$line" | grep -q "   Concat $x (" || fail "Concat NLL is not $x: $line" ;;
	esac
done
grep -q '^mean NLL of the chunks after the best hits (2 queries), nats/token: no context [0-9.]*, PICASO-R [0-9.]* ([-+][0-9.]*%), Concat [0-9.]* ([-+][0-9.]*%)$' "$o" ||
	fail "mean NLL line"

# The recall part, with the bundled recall model: 3 questions, each with the documents holding
# the name as a phrase (at most 4: names are unique, so the gold alone, marked) and 3 answers
# marked right or wrong as they are: the mark is checked against the phonebook itself.
r=$d/out.d/recall
grep -q '^recall: a phonebook of 60 documents of 8 lines' "$o" || fail "recall: corpus line"
[ "$(grep -c "^question [1-3]: whose number is [A-Z][a-z]* [A-Z][a-z]*'s?  (the phonebook says: [0-9]\{4\}, in d000[0-9][0-9])$" "$o")" -eq 3 ] ||
	fail "recall: 3 questions"
for n in 1 2 3; do
	gold=$(sed -n "s/^question $n: .*, in \(d[0-9]*\))$/\1/p" "$o")
	[ "$(cut -f 2 "$r/q$n/retrieved.tsv")" = "$gold" ] ||
		fail "recall: question $n retrieved $(cut -f 2 "$r/q$n/retrieved.tsv" | tr '\n' ' '), not the gold $gold alone"
	key=$(grep "^question $n: " "$o" | sed "s/^question $n: whose number is \(.*\)'s?  .*/\1/")
	for m in picaso-r concat naive; do
		got=$(head -n 1 "$r/q$n/$m.txt")
		line=$(grep -A 12 "^question $n: " "$o" | grep "^  $m: ")
		if python3 -c 'import json, sys; sys.exit(not any(("\n" + json.loads(l)["text"]).count(
			"\n%s:%s\n" % (sys.argv[2], sys.argv[3])) for l in open(sys.argv[1])))' "$r/corpus.jsonl" "$key" "$got"; then
			echo "$line" | grep -q ' right$' || fail "recall: $m's answer to question $n is the phonebook's but marked: $line"
		else
			echo "$line" | grep -q ' wrong$' || fail "recall: $m's answer to question $n is not the phonebook's but marked: $line"
		fi
	done
done
[ "$(grep -c '^  \(oracle\|bm25\|phrase\)  *\(naive\|concat\|picaso-r\|picaso-s\|soup\) *EM  *[01]\.[0-9][0-9]   answer NLL ' "$o")" -eq 15 ] ||
	fail "recall: the table"
# The bundled model recalls: from the oracle documents (the one holding the name and 3 others),
# Concat's and PICASO-R's answers are right at least 9 times in 10; without documents never.
em() { sed -n "s/^  oracle  $1 *EM  *\([0-9.]*\) .*/\1/p" "$o"; }
awk -v c="$(em concat)" -v p="$(em picaso-r)" -v n="$(em naive)" 'BEGIN { exit !(c >= 0.9 && p >= 0.9 && n == 0) }' ||
	fail "recall: oracle EM concat $(em concat), picaso-r $(em picaso-r), naive $(em naive)"
echo ok
