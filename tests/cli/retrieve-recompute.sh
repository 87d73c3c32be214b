#!/bin/sh
# ss-retrieve's recompute tier: build --state-budget keeps the states that fit (by --hits, then
# the longest documents), the others become stateless; query --model re-encodes those from
# their stored tokens, and every query's output is then the bytes of the same query on the
# index that stores every state (ss-encode --deterministic on the CPU: bit for bit, annotations
# included; f32 and f16 states). Without --model a stateless hit is a one-line error; a budget
# that cannot be met, or a state it cannot read, leaves the index as it was. add --stateless
# --model indexes token streams alone, every document stateless from the start, with the same
# answers; adding the states later stores them; another model's --stateless changes nothing.
# Self-contained: a random t1 model and a byte-level tokenizer (tests/util/tiny.sh).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
. "$SS_TOP/tests/util/tiny.sh"

cat >docs.jsonl <<'EOF'
{"id": "a1", "text": "the quick brown fox jumps over the lazy dog"}
{"id": "a2", "text": "sailing ships cross the stormy ocean at night while the crew sleeps below deck"}
{"id": "a3", "text": "quantum physics"}
{"id": "b1", "text": "the fox hunts at night in the dark forest"}
{"id": "b2", "text": "bread flour water salt and yeast make a loaf of bread in the oven"}
{"id": "b3", "text": "ocean tides follow the moon and the fox"}
EOF
grep '"a' docs.jsonl >a.jsonl
grep '"b' docs.jsonl >b.jsonl
ss-tokenize -q -o a.tok a.jsonl && ss-tokenize -q -o b.tok b.jsonl || exit 1
# two shards, two dtypes: a recomputed state keeps its dropped state's dtype
ss-encode -q --deterministic --model model -o s32.states a.tok || exit 1
ss-encode -q --deterministic --model model --state-dtype f16 -o s16.states b.tok || exit 1
expect 0 ss-retrieve build --index full.db a.tok b.tok s32.states s16.states
# the compressed length of document $2's state in index $1
len() { ss-retrieve list --index "$1" | awk -F '\t' -v id="$2" '$1 == id { print $5 }'; }
stored() { ss-retrieve list --index "$1" | awk -F '\t' '$3 != "-" { printf "%s ", $1 }'; }
stat_of() { ss-retrieve stats --index "$1" | awk -v k="$2" '$1 == k { print $2 }'; }

# --- usage
expect 2 ss-retrieve query --index full.db --query fox --state-budget 1k; has err "not valid for query"
expect 2 ss-retrieve build --index full.db --model model; has err "model goes with --stateless"
expect 2 ss-retrieve build --index full.db --state-dtype f16; has err "state-dtype goes with --stateless"
expect 2 ss-retrieve list --index full.db --model model; has err "unknown option"
expect 2 ss-retrieve build --index full.db --state-budget lots; has err "state-budget: 'lots' is not a size"
expect 2 ss-retrieve build --index full.db --hits h.txt; has err "hits goes with --state-budget"
expect 2 ss-retrieve query --index full.db --query fox --deterministic; has err "go with --model"

# --- a budget of the two longest documents' states (a2: 78 tokens, b2: 65) keeps just those
cp full.db b.db
budget=$(( $(len full.db a2) + $(len full.db b2) ))
expect 0 ss-retrieve build -v --index b.db --state-budget "$budget"
has err "$budget bytes of states stored, 4 documents stateless (4 dropped by this build)"
[ "$(stored b.db)" = "a2 b2 " ] || fail "kept $(stored b.db), wanted a2 b2"
[ "$(stat_of b.db state_bytes)" -le "$budget" ] || fail "state_bytes $(stat_of b.db state_bytes) over $budget"
[ "$(stat_of b.db stateless)" = 4 ] || fail "stateless: $(stat_of b.db stateless)"
expect 0 ss-retrieve show --index b.db --json a1; has out '"file":null,"recompute_dtype":"f32"'
expect 0 ss-retrieve show --index b.db --json b3; has out '"recompute_dtype":"f16"'

# --- a query log ranks first: a3 (2 hits), then b1 (1); nothing else fits
cp full.db h.db
printf 'a3\nb1\na3\nnosuch\n' >hits.txt
expect 0 ss-retrieve add --index h.db --state-budget $(( $(len full.db a3) + $(len full.db b1) )) --hits hits.txt
[ "$(stored h.db)" = "a3 b1 " ] || fail "with --hits kept $(stored h.db), wanted a3 b1"

# --- every query, stored or recomputed, gives the bytes of the full index's answer,
# but for the plan frame ahead of the records, written when every hit is stored
# (formats/states.md): records FILE prints FILE without it, after checking that
# a stored index's answer has one.
records() {
	if [ "$(od -An -tx4 -N4 "$1" | tr -d ' ')" = 184d2a54 ]; then
		tail -c +$(($(od -An -tu4 -j4 -N4 "$1" | tr -d ' ') + 9)) "$1"
	else
		case $1 in want*) echo "$1: no plan frame" ;; esac
		cat "$1"
	fi
}
same() { records "$1" >"$1.r" && records "$2" >"$2.r" && cmp -s "$1.r" "$2.r"; }
printf 'fox ocean bread night\nquantum\nthe\nsailing ships\nloaf of bread\n' >queries.txt
mkdir want got got-h got-bf want-bf
expect 0 ss-retrieve query --index full.db -k 6 --out-dir want <queries.txt
expect 0 ss-retrieve query --index b.db -k 6 --out-dir got --model model --deterministic -v <queries.txt
has err "stateless documents recomputed"
expect 0 ss-retrieve query --index h.db -k 6 --out-dir got-h --model model --deterministic <queries.txt
expect 0 ss-retrieve query --index full.db -k 4 --order best-first --out-dir want-bf <queries.txt
expect 0 ss-retrieve query --index b.db -k 4 --order best-first --out-dir got-bf --model model --deterministic <queries.txt
# the plan frame lets ss-compose take a query's pipe in one pass: no spool file
ss-retrieve query --index full.db -k 6 --query 'fox ocean bread night' |
	TMPDIR="$PWD/none" ss-compose --mode picaso-r -o piped.state || fail "query | compose without a spool file"
ss-compose --mode picaso-r -o filed.state want/1.states || fail "compose want/1.states"
cmp -s piped.state filed.state || fail "query | compose differs from composing the query's file"
# records go out by sendfile(2), and through a buffer where it refuses (O_APPEND)
: >appended.states
ss-retrieve query --index full.db -k 6 --query 'fox ocean bread night' >>appended.states || fail "query >> file"
cmp -s appended.states want/1.states || fail "query >> file differs from query --out-dir"
for q in 1 2 3 4 5; do
	for d in got got-h; do
		same want/$q.states $d/$q.states || fail "query $q: $d/$q.states differs from the full index's"
	done
	same want-bf/$q.states got-bf/$q.states || fail "query $q, best-first: differs from the full index's"
done
# query 1 matches every document but a3: stored and recomputed states interleave
[ "$(ss-cat --meta want/1.states | wc -l)" -eq 5 ] || fail "query 1 matched $(ss-cat --meta want/1.states | wc -l)"

# --- a stateless hit without --model: one line naming the document and the fix, nothing written
expect 1 ss-retrieve query --index b.db --query quantum -o none.states
has err "^ss-retrieve: b.db: document a3 has no stored state .*--model DIR"
[ "$(wc -l <err)" -eq 1 ] || fail "$(wc -l <err) lines of error"
[ -e none.states ] && fail "output written for a stateless hit without --model"
# --ids needs no state
expect 0 ss-retrieve query --index b.db --query quantum --ids; has out "a3"
# another model's fingerprint
"$mkmodel" other --preset t1 --seed 99 >/dev/null 2>&1 || "$mkmodel" other --preset t1 --n-layer 3 >/dev/null
expect 1 ss-retrieve query --index b.db --query quantum -o none.states --model other
has err "document a3: its state was of model"

# --- transactional: a state the budget cannot read, or a budget that cannot be met, changes nothing
cp b.db before.db
cp full.db gone.db
mv s16.states s16.away
expect 1 ss-retrieve add --index gone.db --state-budget 0; has err "s16.states"
mv s16.away s16.states
[ "$(stored gone.db)" = "a1 a2 a3 b1 b2 b3 " ] || fail "a failed budget changed the index: $(stored gone.db)"
cp full.db old.db
sqlite3 old.db "DELETE FROM tokens WHERE rowid IN (SELECT rid FROM docs WHERE id IN ('a1', 'a2'))" 2>/dev/null ||
	fail "sqlite3 is needed to make an index without tokens"
expect 1 ss-retrieve add --index old.db --state-budget $(( $(len full.db a1) + $(len full.db a2) - 1 ))
has err "2 documents that cannot be recomputed keep their states"
[ "$(stat_of old.db stateless)" = 0 ] || fail "a budget that cannot be met changed the index"
expect 0 ss-retrieve add --index old.db --state-budget $(( $(len full.db a1) + $(len full.db a2) ))
[ "$(stored old.db)" = "a1 a2 " ] || fail "documents without tokens dropped their states: $(stored old.db)"

# --- adding a state again stores it; deleting a stateless document forgets it
expect 0 ss-retrieve add --index b.db s32.states
[ "$(stored b.db)" = "a1 a2 a3 b2 " ] || fail "after adding s32.states again: $(stored b.db)"
expect 0 ss-retrieve delete --index b.db b3
[ "$(stat_of b.db stateless)" = 1 ] || fail "after deleting b3: $(stat_of b.db stateless) stateless"
# once no document is stateless, the index is schema 3 again (older readers read it)
expect 0 ss-retrieve add --index b.db s16.states
[ "$(sqlite3 b.db "SELECT value FROM meta WHERE key = 'schema_version'")" = 3 ] || fail "schema not back to 3"
[ "$(sqlite3 before.db "SELECT value FROM meta WHERE key = 'schema_version'")" = 4 ] || fail "stateless but not schema 4"

# --- add --stateless: the token streams alone, each document stateless in the dtype asked for
expect 2 ss-retrieve add --index t.db --stateless a.tok; has err "stateless needs --model DIR"
[ -e t.db ] && fail "a usage error created t.db"
expect 2 ss-retrieve add --index t.db --stateless --model model --state-dtype q8_0 a.tok; has err "q8_0"
expect 0 ss-retrieve add -v --index t.db --stateless --model model a.tok
has err "3 documents made stateless (model $(stat_of full.db fingerprint), recomputed in f32)"
expect 0 ss-retrieve add -v --index t.db --stateless --model model --state-dtype f16 b.tok
has err "3 documents made stateless"
[ "$(stat_of t.db documents)" = 6 ] || fail "--stateless indexed $(stat_of t.db documents) documents of 6"
[ "$(stat_of t.db stateless)" = 6 ] || fail "--stateless: $(stat_of t.db stateless) stateless of 6"
[ "$(stat_of t.db fingerprint)" = "$(stat_of full.db fingerprint)" ] || fail "--stateless: fingerprint $(stat_of t.db fingerprint)"
[ -z "$(stored t.db)" ] || fail "--stateless stored states: $(stored t.db)"
expect 0 ss-retrieve show --index t.db --json b2; has out '"file":null,"recompute_dtype":"f16"'
# a hit is the very record ss-encode --deterministic writes for its document
echo a3 >a3.ids
ss-encode -q --deterministic --model model --ids a3.ids -o a3.states a.tok || exit 1
expect 0 ss-retrieve query --index t.db -k 1 --query quantum -o t-a3.states --model model --deterministic
tail -c "$(wc -c <a3.states)" t-a3.states | cmp -s - a3.states ||
	fail "--stateless: the recomputed a3 is not the bytes of ss-encode --deterministic"
# ... and every query gives the bytes of the index that stores every state
mkdir got-t got-t2
expect 0 ss-retrieve query --index t.db -k 6 --out-dir got-t --model model --deterministic <queries.txt
for q in 1 2 3 4 5; do
	same want/$q.states got-t/$q.states || fail "query $q: --stateless index's $q.states differs from the full index's"
done
# another model's --stateless: one line, the index unchanged (new documents or none)
echo '{"id": "c1", "text": "a fox of another model"}' >c.jsonl
ss-tokenize -q -o c.tok c.jsonl || exit 1
other_fails() { # what: another model's --stateless add of c.tok, then of nothing
	cp t.db t-before.db
	expect 1 ss-retrieve add --index t.db --stateless --model other c.tok
	has err "^ss-retrieve: t.db: states of two models: .*fingerprint $(stat_of t.db fingerprint)"
	[ "$(wc -l <err)" -eq 1 ] || fail "$1: $(wc -l <err) lines of error"
	expect 1 ss-retrieve add --index t.db --stateless --model other
	has err "^ss-retrieve: t.db: states of two models: .* the stateless documents' model has"
	cmp -s t.db t-before.db || fail "$1: a --stateless add of another model changed the index"
}
other_fails "stateless index"
# the states added later are stored: nothing stateless, the same answers without --model
expect 0 ss-retrieve add --index t.db s32.states s16.states
[ "$(stat_of t.db stateless)" = 0 ] || fail "after adding the states: $(stat_of t.db stateless) stateless"
[ "$(stored t.db)" = "a1 a2 a3 b1 b2 b3 " ] || fail "after adding the states: stored $(stored t.db)"
other_fails "stored states"
expect 0 ss-retrieve query --index t.db -k 6 --out-dir got-t2 <queries.txt
for q in 1 2 3 4 5; do
	cmp -s want/$q.states got-t2/$q.states || fail "query $q: after adding the states, $q.states differs"
done
expect 0 ss-retrieve query --index t.db -k 1 --query quantum -o t-a3s.states
same t-a3.states t-a3s.states || fail "the stored a3 is not the bytes of the recomputed one"
# --- a token id outside the model's vocabulary is refused where it enters the index, naming the
# file and the record (issue 48 item 16: it was stored, exit 0, and every later query --model
# hitting the document failed as a whole); the index stays as it was
python3 - <<'PY'
import struct
def s(x):
    b = x.encode(); return bytes([0xa0 | len(b)]) + b
for name, bad in (("big", 60000), ("neg", -1)):
    t = struct.pack('<4i', 783, 3158, bad, 30013)
    m = (b'\x86' + s("format") + s("ss-tokens") + s("version") + b'\x01' + s("id") + s(name) + s("n_tokens") + b'\x04'
         + s("text") + s("the quick brown fox") + s("tokens") + b'\xc4' + bytes([16]) + t)
    open(name + ".raw", "wb").write(m)
PY
for name in big neg; do
	zstd -q -f $name.raw -o $name.tok || fail "zstd"
	cp full.db keep.db
	expect 1 ss-retrieve add --index full.db --stateless --model model a.tok $name.tok
	has err "^ss-retrieve: $name.tok: token record at byte offset 0: document $name: token 2 is -*[0-9]*, outside the model's vocabulary \[0, [0-9]*)"
	[ "$(wc -l <err)" -eq 1 ] || fail "$name: $(wc -l <err) lines"
	cmp -s full.db keep.db || fail "$name: the index changed"
done
done_checks
