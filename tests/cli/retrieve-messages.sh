#!/bin/sh
# ss-retrieve's messages and refusals (issue 32 items 12 and 13): a --hits line holding a NUL
# byte, states whose dims differ from the index's (same fingerprint), a stateless document
# without tokens, a recompute that fails on one document of a batch. Each is one line naming
# the file and the record (line, document), exit 1, the index and the output as they were.
# Self-contained: a random t1 model and a byte-level tokenizer (tests/util/tiny.sh); the index
# is edited with python3's sqlite3 module (skipped without it).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
python3 -c 'import sqlite3' 2>/dev/null || { echo "no python3 with its sqlite3 module"; exit 77; }
sql() { # DB SQL: runs the statements in one connection
	python3 - "$@" <<'PY' || fail "editing $1"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript(sys.argv[2])
c.close()
PY
}
one_line() { [ "$(wc -l <err)" -eq 1 ] || { fail "$* said $(wc -l <err) lines"; sed 's/^/    /' err | head -5; }; }
unchanged() { cmp -s "$1" "$1.orig" || fail "$2 changed $1"; }

printf 'a1\tthe quick brown fox\na2\tlazy dog sleeps\na3\tocean ship tide\n' >A.txt
"$mkdb" --fingerprint fpX A.tokens A.states <A.txt || exit 1
expect 0 ss-retrieve build --index ok.db A.tokens A.states

# --- 12: a --hits line with a NUL byte: refused, naming the file and the line
cp ok.db ok.db.orig
for at in start middle; do
	if [ $at = start ]; then printf 'a1\n\000a2\n'; else printf 'a1\na\000x\n'; fi >hits.txt
	expect 1 ss-retrieve add --index ok.db --state-budget 0 --hits hits.txt
	has err "^ss-retrieve: hits.txt: line 2: a NUL byte: not a document id$"
	one_line "--hits, NUL at the $at"
	unchanged ok.db "--hits, NUL at the $at"
done

# --- 13: states of other dims under the same fingerprint: refused, naming the stream, the
# document and both dims, whether the index has them already or they come in one add
printf 'b1\tfox and hound\n' >B.txt
"$mkdb" --fingerprint fpX --dims t1 B.tokens B.states <B.txt || exit 1
small='mamba2 n_layer 2 nheads 2 headdim 2 d_state 2 conv_dim 8 d_conv 4'
t1='mamba2 n_layer 2 nheads 8 headdim 16 d_state 16 conv_dim 160 d_conv 4'
expect 1 ss-retrieve add --index ok.db B.tokens B.states
has err "^ss-retrieve: B.states: state record at byte offset 0 (document b1): state dims $t1, the index's are $small: not states of one model$"
one_line "add of other dims"
unchanged ok.db "add of other dims"
expect 1 ss-retrieve add --index new.db A.tokens A.states B.tokens B.states
has err "^ss-retrieve: B.states: state record at byte offset 0 (document b1): state dims $t1, the index's are $small"
[ -e new.db ] && fail "a refused build left new.db"
# replacing a document's state by one of the index's dims is fine
"$mkdb" --seed 7 --fingerprint fpX A2.tokens A2.states <A.txt || exit 1
expect 0 ss-retrieve add --index ok.db A2.tokens A2.states

# --- 12: recompute messages (a tiny model, every state dropped)
. "$SS_TOP/tests/util/tiny.sh"
cat >docs.jsonl <<'J'
{"id": "c1", "text": "the fox runs"}
{"id": "c2", "text": "the fox runs far and the fox runs fast"}
{"id": "c3", "text": "ocean"}
J
ss-tokenize -q -o c.tok docs.jsonl && ss-encode -q --model model -o c.states c.tok || exit 1
expect 0 ss-retrieve build --index c.db --state-budget 0 c.tok c.states
# a stateless document whose tokens are gone (an edited index): the message says so, whole
cp c.db t.db
sql t.db "DELETE FROM tokens WHERE rid = (SELECT rid FROM docs WHERE id = 'c1')"
expect 1 ss-retrieve query --index t.db --model model --query fox -o t.states
has err "^ss-retrieve: t.db: document c1 has no stored state and no tokens stored to recompute it from$"
one_line "stateless without tokens"
[ -e t.states ] && fail "output written for a stateless hit without tokens"
# a recompute that fails on one document of a batch names that document, in either order
cp c.db r.db
python3 - r.db <<'PY' || fail "editing r.db"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
(rid, t), = c.execute("SELECT rid, tokens FROM tokens WHERE rid = (SELECT rid FROM docs WHERE id = 'c1')")
c.execute("UPDATE tokens SET tokens = ? WHERE rid = ?", (b'\xff\xff\xff\x7f' + bytes(t[4:]), rid))
c.commit()
PY
for order in best-first best-last; do
	expect 1 ss-retrieve query --index r.db --model model --query fox --order $order -o r.states
	has err "^ss-retrieve: model: document c1: token 2147483647 at position 0 is outside \[0, [0-9]*)$"
	one_line "recompute failure ($order)"
	[ -e r.states ] && fail "output written for a failed recompute ($order)"
done
done_checks
