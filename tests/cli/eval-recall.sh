#!/bin/sh
# ss-eval recall on a tiny key-value corpus made here (10 documents of 8 "Name Surname: NNNN"
# lines, keys unique) with the bundled t1 model, checking what must hold whatever the weights:
# at k = 1 every method without a norm gives the gold's own state, so the same em and mean_nll
# as concat; naive does not move with k; picaso-s = picaso-r for k <= 2; concat's NLL equals
# ss-score from scratch with the documents' tokens in the order the query file asks for (the
# gold at gold_pos mod k); the rows' means and counts against --per-query; the shares; bm25's
# recall; exact match against ss-decode's greedy continuation (EM 1 at k = 1 for every method
# that holds the document, 0 for a continuation whose first token differs); and the errors: a
# chunk not in the index, k above the chunks, a malformed line (exit 1 naming file and line),
# usage errors (exit 2). Run by tests/run (PATH has the build's bin/).
set -u
command -v ss-eval >/dev/null || { echo "ss-eval not built"; exit 1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SS_MODEL="$SS_TOP/data/model"
cd "$t" || exit 1

# --- the corpus, its database, and 6 queries of 8 chunks (gold first), gold_pos 0..7
python3 - <<'PYEOF' || fail "corpus"
import json, random
r = random.Random(5)
first = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Olivia Peggy Rupert".split()
last = "Smith Jones Brown Taylor Wilson Evans Thomas Roberts Walker Wright Hall Green".split()
keys = sorted({f + " " + l for f in first for l in last})
r.shuffle(keys)
docs = [[(keys[8 * d + i], "%04d" % r.randrange(10000)) for i in range(8)] for d in range(10)]
with open("corpus.jsonl", "w") as f:
    for d, kv in enumerate(docs):
        f.write(json.dumps({"id": "d%05d" % d, "text": "\n".join("%s: %s" % p for p in kv)}) + "\n")
with open("queries.jsonl", "w") as f:
    for q, pos in enumerate([5, 0, 7, 2, 3, 6]):
        g = (3 * q + 1) % 10
        key, val = docs[g][q % 8]
        rest = [d for d in range(10) if d != g]
        r.shuffle(rest)
        chunks = ["d%05d" % d for d in [g] + rest[:7]]
        f.write(json.dumps({"id": "q%05d" % q, "key": key, "query": key + ":",
                            "continuation": " " + val, "chunks": chunks, "gold": chunks[0],
                            "gold_pos": pos}) + "\n")
PYEOF
ss-tokenize -o c.tok corpus.jsonl && ss-encode -q -o c.states c.tok &&
	ss-retrieve build -q --index c.db c.tok c.states || fail "database"

ss-eval recall -q --index c.db --qa queries.jsonl --ks 1,2,4,8 --retrieve --per-query per.tsv \
	-o out.tsv >stdout 2>err || fail "ss-eval recall: $(cat err)"
[ ! -s stdout ] || fail "-o wrote to stdout"
# --- the same over two shards of the index (--index twice, and @FILE): the
# same retrievals and rows but for the times
head -n 5 corpus.jsonl >c1.jsonl; tail -n 5 corpus.jsonl >c2.jsonl
for i in 1 2; do
	ss-tokenize -o c$i.tok c$i.jsonl && ss-encode -q -o c$i.states c$i.tok &&
		ss-retrieve build -q --index c$i.db c$i.tok c$i.states || fail "shard $i"
done
printf 'c1.db\nc2.db\n' >shards.list
for ix in "--index c1.db --index c2.db" "--index @shards.list"; do
	ss-eval recall -q $ix --qa queries.jsonl --ks 1,2,4,8 --retrieve -o shards.tsv 2>err ||
		fail "ss-eval recall $ix: $(cat err)"
	cut -f 1-10 out.tsv >want.cut; cut -f 1-10 shards.tsv >got.cut
	cmp -s want.cut got.cut || { fail "ss-eval recall $ix differs from one index"; diff want.cut got.cut | head -5; }
done
cp c2.db c3.db
ss-eval recall -q --index c2.db --index c3.db --qa queries.jsonl --ks 1 -o x.tsv 2>err
[ $? -eq 1 ] && grep -q "is in c2.db and in c3.db" err && [ ! -e x.tsv ] ||
	fail "ss-eval over shards sharing documents: $(cat err)"
[ "$(head -n 1 out.tsv)" = "$(printf 'context\tmethod\tk\tpos\tn\tem\tmean_nll\tem_share\tnll_share\trecall\tmean_time_ms')" ] ||
	fail "TSV header: $(head -n 1 out.tsv)"
[ "$(head -n 1 per.tsv)" = "$(printf 'id\tcontext\tk\tgold_pos\tmethod\tem\tnll\ttime_ms')" ] ||
	fail "per-query header: $(head -n 1 per.tsv)"
[ "$(cut -f2 out.tsv | uniq | tr '\n' ' ')" = \
  "method naive concat caso picaso-s picaso-r soup piconcat-r naive concat caso picaso-s picaso-r soup piconcat-r " ] ||
	fail "methods: $(cut -f2 out.tsv | uniq | tr '\n' ' ')"
[ "$(wc -l <per.tsv)" -eq $((6 * 4 * 7 * 2 + 1)) ] || fail "per-query: want 6 x 4 k x 7 x 2 contexts + header"

# --- the rows: counts, positions, the means of --per-query, shares, recall
python3 -c '
import json
print("id\tgold_pos")
for l in open("queries.jsonl"):
    o = json.loads(l)
    print("%s\t%d" % (o["id"], o["gold_pos"]))' >gp.tsv || fail "gp.tsv"
awk -F'\t' '
	function d(a, b) { return a > b ? a - b : b - a }
	FNR == 1 { next }
	FILENAME == ARGV[1] { gp[$1] = $2; next }
	FILENAME == ARGV[2] {   # per.tsv: id context k gold_pos method em nll time_ms
		if ($2 == "oracle" && $4 != gp[$1] % $3) { print "gold_pos " $4 " for " $1 " k " $3; bad = 1 }
		if ($2 == "bm25" && ($4 < -1 || $4 >= $3)) { print "bm25 gold_pos " $4; bad = 1 }
		for (p = 0; p < 2; p++) {
			if (p && $2 == "bm25") continue
			c = $2 SUBSEP $5 SUBSEP $3 SUBSEP (p ? $4 : "all")
			n[c]++; em[c] += $6; nll[c] += $7; rec[c] += $4 >= 0
		}
		next
	}
	{   # out.tsv: context method k pos n em mean_nll em_share nll_share recall mean_time_ms
		c = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4; seen[c] = 1
		if ($5 != n[c]) { print "n " $5 " want " n[c] " at " $1, $2, $3, $4; bad = 1 }
		if (d($6, em[c] / n[c]) > 1e-6 || d($7, nll[c] / n[c]) > 1e-6) {
			print "means differ from --per-query at " $1, $2, $3, $4; bad = 1 }
		if (d($10, rec[c] / n[c]) > 1e-6) { print "recall " $10 " at " $1, $2, $3, $4; bad = 1 }
		if ($1 == "oracle" && $10 != 1) { print "oracle recall " $10; bad = 1 }
		if ($1 == "bm25" && $4 != "all") { print "bm25 row with a position"; bad = 1 }
		if ($4 == "all" && $5 != 6) { print "pos all n " $5; bad = 1 }
		if (!($11 >= 0)) { print "time " $11; bad = 1 }
		if ($2 == "concat" && $9 != "nan" && d($9, 1) > 1e-9) { print "concat nll_share " $9; bad = 1 }
		if ($2 == "naive" && $9 != "nan" && d($9, 0) > 1e-9) { print "naive nll_share " $9; bad = 1 }
		if ($2 == "concat" && $8 != "nan" && d($8, 1) > 1e-9) { print "concat em_share " $8; bad = 1 }
		if ($1 == "bm25") r[$2 SUBSEP $3] = $10
	}
	END {
		for (c in n) if (!(c in seen)) { split(c, x, SUBSEP); print "no row for " x[1], x[2], x[3], x[4]; bad = 1 }
		if (r["naive" SUBSEP 1] > r["naive" SUBSEP 2] || r["naive" SUBSEP 2] > r["naive" SUBSEP 4] ||
		    r["naive" SUBSEP 4] > r["naive" SUBSEP 8]) { print "bm25 recall falls with k"; bad = 1 }
		exit bad
	}' gp.tsv per.tsv out.tsv || fail "rows against --per-query"

# --- invariants over the rows of each context and position
awk -F'\t' '
	function d(a, b) { return a > b ? a - b : b - a }
	NR == 1 { next }
	{ em[$1 SUBSEP $2 SUBSEP $3 SUBSEP $4] = $6; nll[$1 SUBSEP $2 SUBSEP $3 SUBSEP $4] = $7
	  if ($2 == "naive" && $4 == "all") { key = $1; if (key in nem && (nem[key] != $6 || nnll[key] != $7)) {
		print key ": naive moves with k (" $3 ")"; bad = 1 } nem[key] = $6; nnll[key] = $7 } }
	END {
		split("caso picaso-s picaso-r soup piconcat-r", m, " ")
		for (c in em) {
			split(c, x, SUBSEP)
			if (x[3] == 1 && x[2] != "naive" && x[2] != "concat") {
				cc = x[1] SUBSEP "concat" SUBSEP 1 SUBSEP x[4]
				if (em[c] != em[cc] || nll[c] != nll[cc]) {
					print "k=1 " x[2] " != concat at " x[1] " pos " x[4]; bad = 1 }
			}
			if (x[2] == "picaso-s" && x[3] <= 2) {
				cr = x[1] SUBSEP "picaso-r" SUBSEP x[3] SUBSEP x[4]
				if (em[c] != em[cr] || d(nll[c], nll[cr]) > 1e-6) {
					print "k=" x[3] " picaso-s != picaso-r at " x[1] " pos " x[4]; bad = 1 }
			}
			if (x[2] == "caso" && x[3] == 1 &&
			    nll[c] == nll[x[1] SUBSEP "naive" SUBSEP 1 SUBSEP x[4]]) {
				print "k=1 caso equals naive at " x[1] ": the document had no effect"; bad = 1 }
		}
		exit bad
	}' out.tsv || fail "invariants"

# --- concat against ss-score from scratch: the documents' tokens in the oracle order, then
# the query; q00000 (gold_pos 5) at k = 4 puts the gold at 1, chunks 1, 2, 3 at 0, 2, 3
ss-tokenize --ids corpus.jsonl >doc.ids || fail "doc ids"
ids_of() { i=$(printf '%s' "${1#d}" | sed 's/^0*//'); sed -n "$((${i:-0} + 1))p" doc.ids; } # dNNNNN -> ids
text_ids() { python3 -c 'import json, sys; print(json.dumps({"id": "x", "text": sys.argv[1]}))' "$1" |
	ss-tokenize --jsonl --ids; }
q0=$(head -n 1 queries.jsonl)
field() { printf '%s' "$q0" | python3 -c 'import json, sys; v = json.load(sys.stdin)[sys.argv[1]]; print(" ".join(v) if isinstance(v, list) else v)' "$1"; }
set -- $(field chunks)
pre="$(ids_of "$2") $(ids_of "$1") $(ids_of "$3") $(ids_of "$4")"
want=$(ss-score --no-state --query-tokens "$pre $(text_ids "$(field query)")" \
	--continuation-tokens "$(text_ids "$(field continuation)")" | sed 's/.*"nll":\([^,]*\),.*/\1/')
got=$(awk -F'\t' '$1 == "q00000" && $2 == "oracle" && $3 == 4 && $5 == "concat" { print $7 }' per.tsv)
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d < 1e-5) }' ||
	fail "k=4 concat: ss-eval nll $got, ss-score from scratch $want"
# and a gold placed elsewhere does give another NLL: the check above can fail
pre="$(ids_of "$1") $(ids_of "$2") $(ids_of "$3") $(ids_of "$4")"
other=$(ss-score --no-state --query-tokens "$pre $(text_ids "$(field query)")" \
	--continuation-tokens "$(text_ids "$(field continuation)")" | sed 's/.*"nll":\([^,]*\),.*/\1/')
awk -v a="$got" -v b="$other" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d > 1e-5) }' ||
	fail "k=4 concat: the gold's position makes no difference ($got, $other)"

# --- exact match: the greedy continuation ss-decode gives from d00003's stored state after a
# key of d00003 (one whose text tokenizes back to the same ids) is matched at k = 1 by every
# method that holds d00003; a continuation with another first token is not
found=
for key in $(sed -n 4p corpus.jsonl | python3 -c 'import json, sys
for l in json.load(sys.stdin)["text"].split("\n"): print(l.split(":")[0].replace(" ", "_"))'); do
	key=$(printf '%s' "$key" | tr _ ' ')
	for n in 3 2 1; do
		ss-decode --state c.states --prompt "$key:" --greedy --ignore-eos -n "$n" --jsonl |
			grep '"id":"d00003"' >dec.json || { fail "ss-decode"; break 2; }
		cont=$(python3 -c 'import json; print(json.load(open("dec.json"))["text"], end="")')
		toks=$(python3 -c 'import json; print(" ".join(map(str, json.load(open("dec.json"))["tokens"])))')
		if [ -n "$cont" ] && [ "$(text_ids "$cont")" = "$toks" ]; then found=$n; break 2; fi
	done
done
[ -n "$found" ] || fail "no greedy continuation of d00003 tokenizes back to its ids"
bad=" 0000"
[ "$(text_ids "$bad" | cut -d' ' -f1)" != "$(printf '%s' "$toks" | cut -d' ' -f1)" ] || bad=" zzzz"
python3 - "$key" "$cont" "$bad" <<'PYEOF' >em.jsonl || fail "em.jsonl"
import json, sys
key, good, bad = sys.argv[1:]
chunks = ["d00003", "d00000", "d00007"]
for i, c in (("good", good), ("bad", bad)):
    print(json.dumps({"id": i, "key": key, "query": key + ":", "continuation": c, "chunks": chunks,
                      "gold": "d00003", "gold_pos": 1}))
PYEOF
ss-eval recall -q --index c.db --qa em.jsonl --ks 1,2 --per-query em.per -o em.tsv ||
	fail "ss-eval recall (EM)"
awk -F'\t' '
	NR == 1 || $3 != 1 || $5 == "naive" { next }
	$1 == "good" && $6 != 1 { print "EM " $6 " for the greedy continuation, " $5; bad = 1 }
	$1 == "bad" && $6 != 0 { print "EM " $6 " for another continuation, " $5; bad = 1 }
	{ n++ }
	END { if (n != 12) { print n " rows"; bad = 1 } exit bad }' em.per ||
	fail "exact match (continuation '$cont' of '$key', $found tokens)"

# --- --queries, --methods, no --retrieve
ss-eval recall -q --index c.db --qa queries.jsonl --ks 2 --queries 2 --methods caso,concat \
	-o sub.tsv || fail "--queries --methods"
[ "$(cut -f1-5 sub.tsv | grep -c all)" -eq 2 ] && ! grep -q bm25 sub.tsv &&
	[ "$(awk -F'\t' '$4 == "all" { print $5 }' sub.tsv | sort -u)" = 2 ] ||
	fail "--queries 2 --methods caso,concat: $(cat sub.tsv)"
awk -F'\t' 'NR > 1 && ($8 != "nan" || $9 != "nan") { bad = 1 } END { exit bad }' sub.tsv ||
	fail "shares without naive should be nan"

# --- errors: exit 1 naming the file and line; no output left behind
sed '2s/"d0000[0-9]"\]/"nope"]/' queries.jsonl >bad1.jsonl
ss-eval recall --index c.db --qa bad1.jsonl --ks 1,8 -o x.tsv >/dev/null 2>err
[ $? -eq 1 ] && grep -q 'bad1.jsonl: line 2: chunk nope is not in index' err ||
	fail "unknown chunk: $(cat err)"
ss-eval recall --index c.db --qa queries.jsonl --ks 1,16 -o x.tsv >/dev/null 2>err
[ $? -eq 1 ] && grep -q 'queries.jsonl: line 1: 8 chunks, fewer than k = 16' err ||
	fail "k above the chunks: $(cat err)"
{ head -n 1 queries.jsonl; echo '{"id": "q1", "query": '; } >bad2.jsonl
ss-eval recall --index c.db --qa bad2.jsonl --ks 1 -o x.tsv >/dev/null 2>err
[ $? -eq 1 ] && grep -q 'bad2.jsonl: line 2: not a JSON object' err || fail "bad JSON: $(cat err)"
sed '1s/"gold_pos": [0-9]*/"gold_pos": 8/' queries.jsonl >bad3.jsonl
ss-eval recall --index c.db --qa bad3.jsonl --ks 1 -o x.tsv >/dev/null 2>err
[ $? -eq 1 ] && grep -q 'bad3.jsonl: line 1: "gold_pos"' err || fail "gold_pos 8: $(cat err)"
[ ! -e x.tsv ] || fail "output left behind after an error"
# usage errors
ss-eval recall --qa queries.jsonl >/dev/null 2>err; [ $? -eq 2 ] || fail "no --index: want exit 2"
ss-eval recall --index c.db >/dev/null 2>err; [ $? -eq 2 ] || fail "no --qa: want exit 2"
ss-eval recall --index c.db --qa queries.jsonl --ks 0 >/dev/null 2>err; [ $? -eq 2 ] || fail "--ks 0"
ss-eval recall --index c.db --qa queries.jsonl --ks 2,2 >/dev/null 2>err; [ $? -eq 2 ] || fail "--ks 2,2"
ss-eval recall --index c.db --qa queries.jsonl --tokens c.tok >/dev/null 2>err; [ $? -eq 2 ] ||
	fail "recall --tokens: want exit 2"
ss-eval timing --retrieve >/dev/null 2>err; [ $? -eq 2 ] || fail "timing --retrieve: want exit 2"
ss-eval timing --retrievers phrase >/dev/null 2>err; [ $? -eq 2 ] || fail "timing --retrievers: want exit 2"
ss-eval recall --index c.db --qa queries.jsonl --retrievers bm25,nope >/dev/null 2>err
[ $? -eq 2 ] && grep -q "unknown retriever 'nope'" err || fail "--retrievers nope: $(cat err)"

# --- --retrievers (issue 47): each a context of its own in one run; bm25's rows are --retrieve's;
# the key as a phrase finds the gold alone (keys are unique), so its recall is 1 at every k
ss-eval recall -q --index c.db --qa queries.jsonl --ks 1,2 --methods concat --retrievers phrase,bm25 \
	-o r.tsv 2>err || fail "--retrievers: $(cat err)"
[ "$(cut -f 1 r.tsv | uniq | tr '\n' ' ')" = "context oracle bm25 phrase " ] ||
	fail "--retrievers contexts: $(cut -f 1 r.tsv | uniq | tr '\n' ' ')"
[ "$(awk -F'\t' '$1 == "bm25" && $2 == "concat" && $3 <= 2 { print $3, $6, $10 }' r.tsv)" = \
  "$(awk -F'\t' '$1 == "bm25" && $2 == "concat" && $3 <= 2 { print $3, $6, $10 }' out.tsv)" ] ||
	fail "--retrievers bm25 differs from --retrieve"
[ "$(awk -F'\t' '$1 == "phrase" { print $10 }' r.tsv | sort -u)" = "1.000000" ] ||
	fail "phrase recall: $(awk -F'\t' '$1 == "phrase"' r.tsv)"

[ "$fails" -eq 0 ] || { echo "$fails failures"; exit 1; }
