#!/bin/sh
# ss-eval on a tiny WikiText database (30 passages, 3 evaluated, k = 0..3)
# built by the tools, checking what must hold whatever the model's weights:
# k = 0 equals Naive for every method; at k = 1 every method gives the same
# NLL (the single state); PICASO-S = PICASO-R for k <= 2; Naive and Concat
# equal ss-score from the zero state with the documents' tokens prepended to
# the query (Concat from the first document's stored state = encoding the
# concatenation from scratch). Then attribution on 3 queries in the MS MARCO
# v1.1 format made here from the passages, and usage errors. Run by tests/run
# (PATH has the build's bin/; the model and the corpus from data/).
set -u
model=$SS_TOP/data/model
raw=$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw
qa=qa.json
command -v ss-eval >/dev/null || { echo "ss-eval not built"; exit 1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SS_MODEL="$model"
cd "$t" || exit 1

# --- the database: passages → halves → states → index
tr -d '\r' <"$raw" | grep -v '^ *$' | grep -v '^ *=.*= *$' | head -n 30 >passages.txt
ss-tokenize --parts 2 -o halves.tok passages.txt || fail "ss-tokenize"
ss-encode -q -o halves.states halves.tok || fail "ss-encode"
ss-retrieve build -q --index halves.db halves.tok halves.states || fail "ss-retrieve build"

ss-eval wikitext -q --index halves.db --tokens halves.tok --passages 3 --kmax 3 \
	--per-passage per.tsv -o out.tsv >stdout 2>err || fail "ss-eval wikitext: $(cat err)"
[ ! -s stdout ] || fail "ss-eval -o wrote to stdout"
[ "$(head -n 1 out.tsv)" = "$(printf 'method\tk\tmean_nll\tn\tmean_time_ms')" ] ||
	fail "TSV header: $(head -n 1 out.tsv)"
[ "$(wc -l <out.tsv)" -eq 29 ] || fail "want 7 methods x 4 k + header, got $(wc -l <out.tsv) lines"
awk -F'\t' 'NR > 1 && $4 != 3 { bad = 1 } END { exit bad }' out.tsv || fail "n is not 3 everywhere"
[ "$(wc -l <per.tsv)" -eq 85 ] || fail "per-passage: want 3 x 4 x 7 + header rows"

# --- invariants over the per-passage rows (passage k method nll time_ms docs)
awk -F'\t' '
	NR == 1 { next }
	{ v[$1 SUBSEP $2 SUBSEP $3] = $4; p[$1] = 1 }
	function d(a, b) { return a > b ? a - b : b - a }
	END {
		split("concat soup caso picaso-s picaso-r piconcat-r", m, " ")
		for (x in p) {
			n0 = v[x SUBSEP 0 SUBSEP "naive"]
			for (i = 1; i <= 6; i++) {
				if (d(v[x SUBSEP 0 SUBSEP m[i]], n0) > 1e-6) {
					print "k=0 " m[i] " != naive for " x; bad = 1 }
				if (d(v[x SUBSEP 1 SUBSEP m[i]], v[x SUBSEP 1 SUBSEP "caso"]) > 1e-6) {
					print "k=1 " m[i] " != caso for " x; bad = 1 }
			}
			for (k = 1; k <= 2; k++)
				if (d(v[x SUBSEP k SUBSEP "picaso-s"], v[x SUBSEP k SUBSEP "picaso-r"]) > 1e-6) {
					print "k=" k " picaso-s != picaso-r for " x; bad = 1 }
			if (d(v[x SUBSEP 1 SUBSEP "caso"], n0) < 1e-9) {
				print "k=1 equals naive for " x ": the document had no effect"; bad = 1 }
		}
		exit bad
	}' per.tsv || fail "invariants"

# --- Naive and Concat against ss-score from scratch (documents prepended to the query)
ids() { # ID ("passages.txt:LINE#PART") → its token ids, space-separated
	line=${1#passages.txt:}; part=${line#*#}; line=${line%#*}
	sed -n "${line}p" passages.txt | ss-tokenize --parts 2 --ids | sed -n "$((part + 1))p"
}
first=$(awk -F'\t' 'NR == 2 { print $1 }' per.tsv)
base=${first%#0}
q=$(ids "$base#0"); c=$(ids "$base#1")
for k in 0 2 3; do
	method=concat; [ "$k" -eq 0 ] && method=naive
	row=$(awk -F'\t' -v p="$first" -v k="$k" -v m="$method" '$1 == p && $2 == k && $3 == m' per.tsv)
	docs=$(printf '%s' "$row" | cut -f6)
	pre=
	for id in $(printf '%s' "$docs" | tr ',' ' '); do pre="$pre $(ids "$id")"; done
	want=$(ss-score --no-state --query-tokens "$pre $q" --continuation-tokens "$c" |
		sed 's/.*"nll":\([^,]*\),.*/\1/')
	got=$(printf '%s' "$row" | cut -f4)
	awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d < 1e-5) }' ||
		fail "k=$k $method: ss-eval nll $got, ss-score from scratch $want (docs $docs)"
done

# --- method subset, order kept; more passages than exist is all of them
ss-eval wikitext -q --index halves.db --tokens halves.tok --passages 1000 --kmax 1 \
	--methods picaso-r,naive -o sub.tsv || fail "--methods"
[ "$(cut -f1 sub.tsv | uniq | tr '\n' ' ')" = "method picaso-r naive " ] ||
	fail "--methods order: $(cut -f1 sub.tsv | uniq | tr '\n' ' ')"

# --- attribution: 3 queries of 4 passages (lines of passages.txt), the second one selected;
# the query is the selected passage's first 8 words, the answer its next 4.
python3 - passages.txt >"$qa" <<'PYEOF' || fail "qa.json"
import json, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if len(l.split()) > 12]
qa = []
for i in range(3):
    ps = lines[4 * i:4 * i + 4]
    w = ps[1].split()
    qa.append({"query_id": i + 1, "query": " ".join(w[:8]), "answers": [" ".join(w[8:12])],
               "passages": {"is_selected": [0, 1, 0, 0], "passage_text": ps}})
json.dump(qa, sys.stdout)
PYEOF
ss-eval attribution -q --qa "$qa" --queries 3 --per-query perq.tsv -o attr.tsv ||
	fail "ss-eval attribution"
[ "$(cut -f1 attr.tsv | tr '\n' ' ')" = \
  "method chance loi loo-concat loo-soup loo-caso loo-picaso-r loo-picaso-s " ] ||
	fail "attribution rows: $(cut -f1 attr.tsv | tr '\n' ' ')"
awk -F'\t' 'NR > 1 && ($2 != 3 || $4 < 0 || $4 > 1) { bad = 1 } END { exit bad }' attr.tsv ||
	fail "attribution counts: $(cat attr.tsv)"
[ "$(wc -l <perq.tsv)" -eq 19 ] || fail "per-query: want 3 x 6 + header rows"

# --- errors
ss-eval >/dev/null 2>err; [ $? -eq 2 ] || fail "no command: want exit 2"
ss-eval wikitext --index halves.db >/dev/null 2>err; [ $? -eq 2 ] || fail "no --tokens: want exit 2"
ss-eval wikitext --index halves.db --tokens halves.tok --methods soup,bogus >/dev/null 2>err
[ $? -eq 2 ] && grep -q "unknown method 'bogus'" err || fail "bad method: $(cat err)"
ss-eval attribution --qa "$qa" --methods naive >/dev/null 2>err; [ $? -eq 2 ] || fail "naive LOO"
ss-eval --help | grep -q '^usage: ss-eval' || fail "--help"
# a token stream that does not hold the index's documents
tail -n 5 passages.txt >other.txt
ss-tokenize --parts 2 -o few.tok other.txt
ss-eval wikitext --index halves.db --tokens few.tok --passages 1 --kmax 3 -o x.tsv >/dev/null 2>err
[ $? -eq 1 ] && grep -q "not in the token stream" err || fail "foreign index: $(cat err)"
[ ! -e x.tsv ] || fail "output left behind after an error"

[ "$fails" -eq 0 ] || { echo "$fails failures"; exit 1; }
