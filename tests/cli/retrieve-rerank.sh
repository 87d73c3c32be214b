#!/bin/sh
# ss-retrieve query --rerank N and ss-eval recall --rerank N on a small phonebook (gen/mkrecall,
# 40 documents of 8 "Name Surname: 0142" lines) encoded with the bundled recall model
# (data/recall-model, named explicitly, with its tokenizer): the reranked top k is BM25's top N
# ordered by the log-likelihood ss-score gives the query after "\n" from each document's stored
# state (computed here per document, independently), and its rerank_score is that
# log-likelihood; scores are the same bits at any N (batch size) and thread count; the output
# stream holds the states in that order with both scores annotated; stateless documents
# (recomputed) rank as stored ones; ss-eval's rerank context finds the gold where ss-retrieve
# does; and the errors: --rerank below k, without --model, a model of another fingerprint, a
# bad --rerank-score or template (one line, nothing written).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
M=$SS_TOP/data/recall-model
T1=$SS_TOP/tests/fixtures/golden/models/t1-hf
G=$SS_BUILD/gen/mkrecall
case $G in /*) ;; *) G=$SS_TOP/$G ;; esac
[ -x "$G" ] || { echo "no $G (make first)"; exit 77; }

"$G" corpus --seed 77 --docs 40 --pairs 8 -o corpus.jsonl &&
	"$G" queries --seed 77 --docs 40 --pairs 8 --k 8 --queries 12 -o queries.jsonl &&
	ss-tokenize -q -t "$M/tokenizer.json" --jsonl -o c.tok corpus.jsonl &&
	ss-encode -q --deterministic --model "$M" -o c.states c.tok &&
	ss-retrieve build -q --index c.db c.tok c.states || { fail "corpus"; done_checks; }
python3 -c '
import json
for l in open("queries.jsonl"): print(json.loads(l)["key"])' >keys.txt || fail "keys"
nl='
'

# --- the reranked order is ss-score's: for each key, BM25's top 8, each document's
# log-likelihood of the key after "\n" (ss-score's sum_nll, negated) from its stored state,
# sorted (ties: BM25's order), top 4; rerank_score equal to that log-likelihood
# (rerank_order DB STATES: for every key; n_moved counts the keys whose top hit moved)
ss-score -q --model "$M" --state c.states --query "$nl" --continuation "$(head -n 1 keys.txt)" >/dev/null ||
	fail "ss-score"
rerank_order() {
	n_moved=0
	while read -r key; do
		ss-retrieve query --index "$1" -k 8 --query "$key" --ids --order best-first >bm25.tsv ||
			fail "$1: bm25 $key"
		ss-retrieve query --index "$1" -k 4 --rerank 8 --model "$M" --query "$key" --ids --order best-first \
			>rr.tsv 2>err || { fail "$1: rerank $key: $(cat err)"; continue; }
		ss-score -q --model "$M" --state "$2" --query "$nl" --continuation "$key" >score.jsonl ||
			fail "$2: ss-score $key"
		python3 - "$key" <<'PYEOF' || fail "$1: rerank of '$key' is not ss-score's order"
import json, sys
ll = {}
for l in open("score.jsonl"):
    o = json.loads(l)
    ll[o["state"]] = -o["sum_nll"]
bm = [l.split("\t") for l in open("bm25.tsv").read().splitlines()]
cand = [r[1] for r in bm]
want = sorted(cand, key=lambda d: (-ll[d], cand.index(d)))[:4]
got = [l.split("\t") for l in open("rr.tsv").read().splitlines()]
bad = [g[1] for g in got] != want
for i, g in enumerate(got):
    bmscore = dict((r[1], r[2]) for r in bm)[g[1]]
    if int(g[0]) != i + 1 or g[2] != bmscore:
        bad = True
    if abs(float(g[3]) - ll[g[1]]) > 1e-6 * max(1, abs(ll[g[1]])):
        print("rerank_score %s of %s, ss-score %r" % (g[3], g[1], ll[g[1]])); bad = True
if bad:
    print("got", got, "want", want)
sys.exit(1 if bad else 0)
PYEOF
		[ "$(cut -f 2 rr.tsv | head -n 1)" = "$(cut -f 2 bm25.tsv | head -n 1)" ] || n_moved=$((n_moved + 1))
	done <keys.txt
}
rerank_order c.db c.states
# BM25 ties a key's document with those holding its first or last name: the model must
# have moved some top hit, or the comparison above proved nothing
[ "$n_moved" -gt 0 ] || fail "rerank never changed BM25's top hit"
# states stored as f16 (read by pieces, widened in place) and q8 (read whole): ranked by
# what ss-score gives from those same stored states
for t in f16 q8; do
	ss-encode -q --deterministic --model "$M" --state-dtype $t -o c.$t.states c.tok &&
		ss-retrieve build -q --index c.$t.db c.tok c.$t.states || fail "$t corpus"
	rerank_order c.$t.db c.$t.states
done

# --- a candidate's record changed on disk after the index was built (a byte of its ssm):
# refused, naming the document and its byte offset, nothing written
cp c.states bad.states
ss-retrieve build -q --index bad.db c.tok bad.states || fail "bad.db"
key=$(head -n 1 keys.txt)
doc=$(ss-retrieve query --index bad.db -k 1 --query "$key" --ids | cut -f 2)
ss-retrieve show --index bad.db "$doc" >show.txt || fail "show $doc"
off=$(sed -n 's/^offset: //p' show.txt)
len=$(sed -n 's/^length: //p' show.txt)
python3 - bad.states "$off" "$len" <<'PYEOF' || fail "changing $doc"
import sys
f, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(f, "r+b") as h:
    h.seek(off + n - 64)
    b = h.read(1)
    h.seek(off + n - 64)
    h.write(bytes([b[0] ^ 0x40]))
PYEOF
expect 1 ss-retrieve query --index bad.db -k 4 --rerank 8 --model "$M" --query "$key" -o e.states
has err "document $doc at byte offset $off"
[ "$(wc -l <err)" -eq 1 ] || fail "a changed record: $(wc -l <err) lines"
[ ! -e e.states ] || fail "a changed record: an output was written"

# --- a record whose conv holds 4 bytes fewer than its dims make (recompressed, its checksum
# right): refused as ss_record_state refuses it, not read with stale elements
len0=$(ss-retrieve show --index c.db d00000 | sed -n 's/^length: //p')
head -c "$len0" c.states | zstd -q -d -c >r0.raw && python3 - <<'PYEOF' || fail "a short conv"
d = bytearray(open("r0.raw", "rb").read())
j = d.find(b"\xa4conv") + 5
w = {0xc4: 1, 0xc5: 2, 0xc6: 4}[d[j]]
n = int.from_bytes(d[j + 1:j + 1 + w], "big")
d[j + 1:j + 1 + w] = (n - 4).to_bytes(w, "big")
del d[j + 1 + w:j + 5 + w]
open("r0.short", "wb").write(d)
PYEOF
{ zstd -q --check -c r0.short && tail -c +"$((len0 + 1))" c.states; } >short.states &&
	ss-retrieve build -q --index short.db c.tok short.states || fail "short.db"
q0=$(python3 -c 'import json; print(json.loads(open("corpus.jsonl").readline())["text"].split(":")[0])')
expect 1 ss-retrieve query --index short.db -k 4 --rerank 40 --model "$M" --query "$q0" -o e.states
has err "document d00000 at byte offset 0: field \"conv\" is not"
[ ! -e e.states ] || fail "a short conv: an output was written"

# --- the same bits at any batch size (N) and thread count: each candidate's score alone
# depends on its state
ss-retrieve query --index c.db --ids -k 4 --rerank 4 --model "$M" --threads 1 <keys.txt >n4.tsv &&
	ss-retrieve query --index c.db --ids -k 4 --rerank 16 --model "$M" --threads 2 <keys.txt >n16.tsv &&
	ss-retrieve query --index c.db --ids -k 4 --rerank 16 --model "$M" --threads 1 <keys.txt >n16t1.tsv ||
	fail "batch queries"
cmp -s n16.tsv n16t1.tsv || fail "--threads 2 and 1 differ"
python3 - <<'PYEOF' || fail "a document's rerank_score differs between --rerank 4 and 16"
s = {}
bad = 0
for f in ("n4.tsv", "n16.tsv"):
    for l in open(f):
        q, r, d, b, x = l.rstrip("\n").split("\t")
        if (q, d) in s and s[q, d] != x:
            print(q, d, s[q, d], x); bad = 1
        s[q, d] = x
raise SystemExit(bad)
PYEOF
[ "$(wc -l <n16.tsv)" -eq 48 ] || fail "batch: $(wc -l <n16.tsv) lines, want 12 x 4"

# --- the state stream: the reranked order, most relevant last, rank, BM25 score and
# rerank_score annotated
key=$(head -n 1 keys.txt)
expect 0 ss-retrieve query --index c.db -k 4 --rerank 8 --model "$M" --query "$key" -o rr.states
expect 0 ss-retrieve query --index c.db -k 4 --rerank 8 --model "$M" --query "$key" --ids --json
cp out rr.json
ss-cat --meta rr.states >cat.jsonl || fail "ss-cat"
python3 - <<'PYEOF' || fail "stream annotation against --ids --json"
import json
ids = [json.loads(l) for l in open("rr.json")]
cat = [json.loads(l) for l in open("cat.jsonl")]
near = lambda a, b: abs(a - b) <= 1e-8 * max(1, abs(b))  # ss-cat prints 9 digits
ok = len(ids) == len(cat) == 4 and all(a["id"] == b["id"] and a["rank"] == b["rank"] and
	near(a["score"], b["score"]) and near(a["rerank_score"], b["rerank_score"]) for a, b in zip(cat, ids))
ranks = [o["rank"] for o in cat]
ok = ok and ranks == sorted(ranks, reverse=True)
ok = ok and all(a["rerank_score"] <= b["rerank_score"] for a, b in zip(cat, cat[1:]))
if not ok: print(cat, ids)
raise SystemExit(0 if ok else 1)
PYEOF

# --- stateless documents (every state dropped) are recomputed and rank as the stored
cp c.db sl.db
expect 0 ss-retrieve build --index sl.db --state-budget 0
ss-retrieve query --index sl.db --ids -k 4 --rerank 16 --model "$M" --deterministic <keys.txt >sl.tsv ||
	fail "stateless rerank"
ss-retrieve query --index c.db --ids -k 4 --rerank 16 --model "$M" --deterministic <keys.txt >st.tsv ||
	fail "stored rerank"
cmp -s sl.tsv st.tsv || fail "stateless documents rerank otherwise than stored ones"

# --- ss-eval recall --rerank: the rerank context's gold position is ss-retrieve's
ss-eval recall -q --model "$M" --index c.db --qa queries.jsonl --ks 1,4 --methods picaso-r --rerank 8 \
	--per-query per.tsv -o ev.tsv 2>err || fail "ss-eval recall --rerank: $(cat err)"
grep -q "^rerank	picaso-r	4	all	12	" ev.tsv || fail "no rerank row: $(cut -f 1-5 ev.tsv | tr '\n' ' ')"
ss-retrieve query --index c.db --ids -k 4 --rerank 8 --model "$M" <keys.txt >rr4.tsv || fail "rr4"
python3 - <<'PYEOF' || fail "ss-eval's rerank context against ss-retrieve --rerank"
import json
qs = [json.loads(l) for l in open("queries.jsonl")]
hits = {}
for l in open("rr4.tsv"):
    q, r, d = l.split("\t")[:3]
    hits.setdefault(int(q), {})[d] = int(r)
bad = 0
for l in list(open("per.tsv"))[1:]:
    qid, ctx, k, gp = l.split("\t")[:4]
    if ctx != "rerank":
        continue
    i = [q["id"] for q in qs].index(qid)
    r = hits[i + 1].get(qs[i]["gold"])
    want = -1 if r is None or r > int(k) else min(int(k), len(hits[i + 1])) - r
    if int(gp) != want:
        print(qid, k, "gold_pos", gp, "want", want); bad = 1
raise SystemExit(bad)
PYEOF

# --- errors: one line, exit 2 (usage) or 1 (another model's states), nothing written
expect 2 ss-retrieve query --index c.db -k 4 --rerank 2 --model "$M" --query x -o e.states
has err "rerank 2 is below -k 4"
expect 2 ss-retrieve query --index c.db -k 4 --rerank 8 --query x -o e.states
has err "rerank needs --model"
expect 2 ss-retrieve query --index c.db --rerank 8 --model "$M" --rerank-score best --query x
has err "neither ll nor entropy"
expect 2 ss-retrieve query --index c.db --rerank 8 --model "$M" --rerank-template 'no query' --query x
has err "must appear exactly once"
expect 2 ss-retrieve query --index c.db --rerank-score entropy --query x
has err "go with --rerank"
expect 2 ss-eval recall --model "$M" --index c.db --qa queries.jsonl --ks 1,4 --rerank 2
has err "rerank 2 is below the largest k"
expect 2 ss-eval recall --model "$M" --index c.db --qa queries.jsonl --retrievers rerank
has err "needs --rerank N"
expect 1 ss-retrieve query --index c.db -k 4 --rerank 8 --model "$T1" --tokenizer "$M/tokenizer.json" \
	--query "$key" -o e.states
has err "c.db: document d000.*: its state is of model"
[ "$(wc -l <err)" -eq 1 ] || fail "another model: $(wc -l <err) lines"
[ ! -e e.states ] || fail "an output was written"
printf '{"id": "q", "query": "%s", "k": 9}\n' "$key" >k9.jsonl
expect 1 ss-retrieve query --index c.db --ids -k 4 --rerank 8 --model "$M" <k9.jsonl
has err "query q: k 9 is above --rerank 8"
done_checks
