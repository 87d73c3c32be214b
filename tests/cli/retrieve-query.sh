#!/bin/sh
# ss-retrieve query's syntax (issue 47): "quoted phrases" (tokens adjacent and in order),
# --operator or|and, --proximity on|off; a bad query (unbalanced quote, empty phrase, phrase
# of more than 64 tokens) is one line naming it, exit 2, nothing written; an index without
# positions refuses phrases naming the rebuild, and gets them from its texts at the next build.
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
python3 -c 'import sqlite3' 2>/dev/null || { echo "no python3 with its sqlite3 module"; exit 77; }
one_line() { [ "$(wc -l <err)" -eq 1 ] || { fail "$* said $(wc -l <err) lines"; sed 's/^/    /' err | head -5; }; }
ids() { cut -f 2 out | tr '\n' ' '; }

printf 'p1\tVera Rossi: 7297\np2\tVera Ito: 1111\np3\tAna Rossi: 2222\np4\tRossi Vera: 3333\n' >A.txt
"$mkdb" --fingerprint fpX A.tokens A.states <A.txt || exit 1
expect 0 ss-retrieve build --index ok.db A.tokens A.states

# plain words: any of them (or), p1 and p4 tie on both
expect 0 ss-retrieve query --index ok.db --ids --order best-first --query 'Vera Rossi'
[ "$(ids)" = "p1 p4 p2 p3 " ] || fail "or: $(ids)"
# the phrase: p1 alone; "rossi vera" is p4's
expect 0 ss-retrieve query --index ok.db --ids --query '"Vera Rossi"'
[ "$(ids)" = "p1 " ] || fail "phrase: $(ids)"
expect 0 ss-retrieve query --index ok.db --ids --query '"rossi, vera"'
[ "$(ids)" = "p4 " ] || fail "phrase, other order: $(ids)"
# and: both words, in any order
expect 0 ss-retrieve query --index ok.db --ids --order best-first --operator and --query 'vera rossi'
[ "$(ids)" = "p1 p4 " ] || fail "and: $(ids)"
expect 1 ss-retrieve query --index ok.db --ids --operator AND --query '"vera rossi" ito'
[ -s out ] && fail "and without a match wrote $(cat out)"
# proximity: the same documents, p1 and p4 (adjacent) above p2, p3 and scored higher than plain
expect 0 ss-retrieve query --index ok.db --ids --order best-first --proximity on --query 'Vera Rossi'
[ "$(ids)" = "p1 p4 p2 p3 " ] || fail "proximity: $(ids)"
plain=$(ss-retrieve query --index ok.db --ids --order best-first --query 'Vera Rossi' | head -1 | cut -f 3)
near=$(cut -f 3 out | head -1)
awk -v a="$plain" -v b="$near" 'BEGIN { exit !(b > a) }' || fail "proximity score $near, plain $plain"

# bad queries: one line, exit 2, no output file
long='"'; i=0; while [ $i -lt 65 ]; do long="$long w$i"; i=$((i + 1)); done; long="$long\""
for q in 'vera "rossi' '"" vera' '" ,; "' "$long"; do
	rm -f res.states
	expect 2 ss-retrieve query --index ok.db -o res.states --query "$q"
	one_line "query '$q'"
	[ -e res.states ] && fail "query '$q' wrote res.states"
done
expect 2 ss-retrieve query --index ok.db --query 'vera "rossi'
has err "^ss-retrieve: --query: unbalanced quote: the phrase opened at byte 6 is not closed$"
expect 2 ss-retrieve query --index ok.db --query '"" vera'
has err "empty phrase at byte 1"
expect 2 ss-retrieve query --index ok.db --query "$long"
has err "has 65 words, at most 64$"
# --literal: a quote is a separator (queries cut from text)
expect 0 ss-retrieve query --index ok.db --ids --order best-first --literal --query 'Vera "Rossi'
[ "$(ids)" = "p1 p4 p2 p3 " ] || fail "--literal: $(ids)"
expect 2 ss-retrieve query --index ok.db --operator xor --query vera
expect 2 ss-retrieve query --index ok.db --proximity yes --query vera

# an index from before positions: plain queries work, phrases are refused naming the rebuild
cp ok.db old.db
python3 - old.db <<'PY' || fail "editing old.db"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript("DROP TABLE positions; DELETE FROM meta WHERE key = 'positions'")
c.close()
PY
expect 0 ss-retrieve query --index old.db --ids --query 'vera rossi'
expect 1 ss-retrieve query --index old.db --ids --query '"vera rossi"'
one_line "phrase on an old index"
has err "ss-retrieve build --index"
expect 0 ss-retrieve build --index old.db
expect 0 ss-retrieve query --index old.db --ids --query '"vera rossi"'
[ "$(ids)" = "p1 " ] || fail "phrase after the migration: $(ids)"
done_checks
