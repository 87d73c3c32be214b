#!/bin/sh
# ss-eval on a tiny WikiText database (30 passages, 3 evaluated, k = 0..3)
# built by the tools, checking what must hold whatever the model's weights:
# k = 0 equals Naive for every method; at k = 1 every method gives the same
# NLL (the single state); PICASO-S = PICASO-R for k <= 2; Naive and Concat
# equal ss-score from the zero state with the documents' tokens prepended to
# the query (Concat from the first document's stored state = encoding the
# concatenation from scratch); the Fig. 3 summary against the TSV. Then
# attribution and the answer NLL (msmarco, every method and soup variant) on
# queries in the MS MARCO v1.1 format made here from the passages, timing,
# and usage errors. Run by tests/run
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

# --- Fig. 3 summary: naive improves by 0, concat reaches all of its own gain, and each
# method's figure is the mean over k >= 1 of 100 (naive_k - method_k) / naive_k of out.tsv
ss-eval wikitext -q --index halves.db --tokens halves.tok --passages 3 --kmax 3 \
	--summary sum.tsv -o out2.tsv || fail "--summary"
[ "$(cut -f1-4 out.tsv)" = "$(cut -f1-4 out2.tsv)" ] || fail "--summary changed the TSV"
[ "$(head -n 1 sum.tsv)" = "$(printf 'method\timprovement_pct\tconcat_fraction')" ] ||
	fail "summary header: $(head -n 1 sum.tsv)"
awk -F'\t' '
	function d(a, b) { return a > b ? a - b : b - a }
	FNR == 1 { next }
	FILENAME == ARGV[1] { v[$1 SUBSEP $2] = $3; if ($2 > 0) ks[$2] = 1; next }
	{ s = 0; n = 0
	  for (k in ks) { b = v["naive" SUBSEP k]; s += 100 * (b - v[$1 SUBSEP k]) / b; n++ }
	  if (d($2, s / n) > 1e-3) { print $1 ": improvement " $2 ", want " s / n; bad = 1 }
	  if ($1 == "naive" && d($2, 0) > 1e-9) { print "naive improves"; bad = 1 }
	  if ($1 == "concat" && d($3, 1) > 1e-9) { print "concat fraction " $3; bad = 1 } }
	END { exit bad }' out.tsv sum.tsv || fail "summary: $(cat sum.tsv)"
ss-eval wikitext -q --index halves.db --tokens halves.tok --methods caso --summary s.tsv \
	>/dev/null 2>err; [ $? -eq 1 ] && grep -q "needs naive" err || fail "summary without naive"

# --- msmarco (Table 1 row 1): queries of 3, 1 and 2 passages; every method and the soups
python3 - passages.txt >msm.json <<'PYEOF' || fail "msm.json"
import json, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if len(l.split()) > 12]
qa = []
for i, n in enumerate([3, 1, 2]):
    ps = lines[3 * i:3 * i + n]
    w = ps[0].split()
    qa.append({"query_id": i + 1, "query": " ".join(w[:8]), "answers": [" ".join(w[8:12])],
               "passages": {"is_selected": [1] + [0] * (n - 1), "passage_text": ps}})
json.dump(qa, sys.stdout)
PYEOF
ss-eval msmarco -q --qa msm.json --methods paper,souping --device cpu --per-query msq.tsv \
	-o msm.tsv || fail "ss-eval msmarco"
[ "$(head -n 1 msm.tsv)" = "$(printf 'method\tn\tmean_nll\tmean_time_ms\tmean_infer_ms')" ] ||
	fail "msmarco header: $(head -n 1 msm.tsv)"
[ "$(cut -f1 msm.tsv | tr '\n' ' ')" = "method naive concat soup caso picaso-s picaso-r piconcat-r \
soup:before soup:after soup:both soup-sum soup-sum:before soup-sum:after soup-sum:both soup-max \
soup-max:before soup-max:after soup-max:both " ] || fail "msmarco rows: $(cut -f1 msm.tsv | tr '\n' ' ')"
awk -F'\t' 'NR > 1 && $2 != 3 { bad = 1 } END { exit bad }' msm.tsv || fail "msmarco n"
awk -F'\t' '
	NR == 1 { next }
	{ v[$1 SUBSEP $2] = $3; np[$1] = $5 }
	function d(a, b) { return a > b ? a - b : b - a }
	END {
		split("concat soup caso picaso-s picaso-r piconcat-r soup-sum soup-max", m, " ")
		for (q in np) {
			if (np[q] == 1) for (i = 1; i <= 8; i++)
				if (d(v[q SUBSEP m[i]], v[q SUBSEP "caso"]) > 1e-6) {
					print "1 passage: " m[i] " != caso"; bad = 1 }
			if (np[q] == 1 && d(v[q SUBSEP "caso"], v[q SUBSEP "naive"]) < 1e-9) {
				print "1 passage: equals naive"; bad = 1 }
			if (np[q] <= 2 && d(v[q SUBSEP "picaso-s"], v[q SUBSEP "picaso-r"]) > 1e-6) {
				print np[q] " passages: picaso-s != picaso-r"; bad = 1 }
			# normalised after pooling, the mean and the sum are the same state
			if (d(v[q SUBSEP "soup:after"], v[q SUBSEP "soup-sum:after"]) > 1e-6) {
				print "soup:after != soup-sum:after"; bad = 1 }
			if (np[q] == 3 && d(v[q SUBSEP "soup"], v[q SUBSEP "soup-max"]) < 1e-9) {
				print "3 passages: soup = soup-max"; bad = 1 }
		}
		exit bad
	}' msq.tsv || fail "msmarco invariants"

# --- timing (Fig. 7): one row per length, times measured
ss-eval timing --lengths 8,32 --gen 4 --repeat 1 -o tim.tsv || fail "ss-eval timing"
[ "$(cut -f1 tim.tsv | tr '\n' ' ')" = "tokens 8 32 " ] || fail "timing rows: $(cat tim.tsv)"
awk -F'\t' 'NR > 1 && !($2 > 0 && $3 > 0) { bad = 1 } END { exit bad }' tim.tsv ||
	fail "timing: $(cat tim.tsv)"
awk -F'\t' '$1 == "loi" && !($5 > 0) { bad = 1 } END { exit bad }' attr.tsv ||
	fail "loi time not measured: $(grep loi attr.tsv)"

# --- openbookqa (App. B.6): 3 questions made here, whole passages as the documents
tr -d '\r' <"$raw" | grep -v '^ *$' | grep -v '^ *=.*= *$' | head -n 20 >whole.txt
ss-tokenize -o whole.tok whole.txt && ss-encode -q -o whole.states whole.tok &&
	ss-retrieve build -q --index whole.db whole.tok whole.states || fail "whole-passage index"
{
	printf 'ID\tQuestion Stem\tChoices\tComplete Question\tAnswer Key\n'
	printf '1-1\tThe river flows past the town of\t(A) Paris (B) the old mill (C) Rome (D) a market\tx\tB\n'
	printf '1-2\tWhat was the album called\t(A) Seven (B) the band (C) a song (D) none\tx\tA\n'
	printf '1-3\tWho wrote the play\t(A) he (B) she (C) they (D) the actor of the play\tx\tD\n'
} >ob.tsv
ss-eval openbookqa -q --qa ob.tsv --index whole.db --tokens whole.tok --kmax 2 -o ob.out ||
	fail "ss-eval openbookqa"
[ "$(head -n 1 ob.out)" = "$(printf 'method\tk\tn\taccuracy\taccuracy_norm\tmean_time_ms')" ] ||
	fail "openbookqa header: $(head -n 1 ob.out)"
[ "$(wc -l <ob.out)" -eq 22 ] || fail "openbookqa: want 7 methods x 3 k + header"
# n = 3 everywhere, accuracies are thirds, k = 0 is naive for every method, naive does not move with k
awk -F'\t' 'NR == 1 { next }
	$3 != 3 || ($4 * 3) % 1 > 1e-3 && ($4 * 3) % 1 < 0.999 { print "bad row " $0; bad = 1 }
	$2 == 0 { a[$1] = $4 SUBSEP $5 } $1 == "naive" { nv[$2] = $4 SUBSEP $5 }
	END { for (m in a) if (a[m] != nv[0]) { print m " k=0 != naive"; bad = 1 }
	      for (k in nv) if (nv[k] != nv[0]) { print "naive moves with k"; bad = 1 }
	      exit bad }' ob.out || fail "openbookqa invariants: $(cat ob.out)"
printf 'ID\tStem\n1\tx\n' >bad.tsv
ss-eval openbookqa -q --qa bad.tsv --index whole.db --tokens whole.tok >/dev/null 2>err
[ $? -eq 1 ] && grep -q "bad.tsv: line 1: not an OpenBookQA TSV" err || fail "bad obqa: $(cat err)"

# --- BM25 parameters: the defaults spelled out change nothing, other values change the scores
qt=$(sed -n 3p passages.txt | cut -d' ' -f1-12)
ss-retrieve query --index halves.db --query "$qt" --ids >r0.tsv || fail "ss-retrieve query"
ss-retrieve query --index halves.db --query "$qt" --ids --k1 1.2 --b 0.75 >r1.tsv || fail "--k1 --b"
cmp -s r0.tsv r1.tsv || fail "--k1 1.2 --b 0.75 differs from the defaults"
ss-retrieve query --index halves.db --query "$qt" --ids --k1 3 --b 0 >r2.tsv || fail "--k1 3 --b 0"
[ "$(wc -l <r2.tsv)" -eq "$(wc -l <r0.tsv)" ] && ! cmp -s r0.tsv r2.tsv ||
	fail "--k1 3 --b 0: same scores as the defaults"
ss-retrieve query --index halves.db --query "$qt" --b 1.5 >/dev/null 2>err; [ $? -eq 2 ] ||
	fail "--b 1.5: want exit 2"

# --- errors
ss-eval timing --device bogus >/dev/null 2>err; [ $? -eq 2 ] || fail "--device bogus: want exit 2"
ss-eval timing --qa "$qa" >/dev/null 2>err; [ $? -eq 2 ] || fail "timing --qa: want exit 2"
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
