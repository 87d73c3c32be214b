#!/bin/sh
# ss-retrieve on index files edited past anything a build writes (issue 32
# items 1 and 3): a document row id outside 1..249999999 (it indexes the
# document lengths in memory) and a document row without an id are a
# damaged index. Each command that meets one says so in one line naming
# the index file and the document, exits 1 and leaves the file as it was:
# no write out of bounds, no crash, no commit of a broken index.
# The files are edited with python3's sqlite3 module (skipped without it).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
python3 -c 'import sqlite3' 2>/dev/null || { echo "no python3 with its sqlite3 module"; exit 77; }
sql() { # DB SQL...: runs each statement in its own connection
	python3 - "$@" <<'PY' || fail "editing $1"
import sqlite3, sys
for q in sys.argv[2:]:
    c = sqlite3.connect(sys.argv[1])
    c.executescript(q)
    c.close()
PY
}
one_line() { [ "$(wc -l <err)" -eq 1 ] || { fail "$* said $(wc -l <err) lines"; sed 's/^/    /' err | head -5; }; }
unchanged() { cmp -s "$1" "$1.orig" || fail "$2 changed $1"; }

printf 'a1\tthe quick brown fox\na2\tlazy dog sleeps\na3\tocean ship tide\n' >A.txt
"$mkdb" A.tokens A.states <A.txt || exit 1
expect 0 ss-retrieve build --index ok.db A.tokens A.states

# --- 1. a row id outside 1..249999999, by delete and by add
for rid in -4294967196 -5 0 250000000; do
	cp ok.db r.db
	sql r.db "UPDATE docs SET rid = $rid WHERE id = 'a3'"
	cp r.db r.db.orig
	for cmd in "delete a1" "add A.tokens A.states"; do
		expect 1 ss-retrieve $cmd --index r.db
		has err "^ss-retrieve: r.db: damaged index: document a3 has row id $rid, outside 1\.\.249999999$"
		one_line "$cmd (rid $rid)"
		unchanged r.db "$cmd (rid $rid)"
	done
done

# --- 3. a document row without an id: the queries that meet it, the list, a commit
cp ok.db n.db
sql n.db "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = replace(sql, 'id TEXT NOT NULL UNIQUE', 'id TEXT UNIQUE') WHERE name = 'docs'" \
	"UPDATE docs SET id = NULL WHERE id = 'a1'"
cp n.db n.db.orig
for cmd in "query --ids --query fox" "list" "delete a2" "add A.tokens A.states"; do
	expect 1 ss-retrieve $cmd --index n.db
	has err "^ss-retrieve: n.db: damaged index: document row 1 has no id$"
	one_line "$cmd (no id)"
	unchanged n.db "$cmd (no id)"
done
# the other documents still answer
expect 0 ss-retrieve query --ids --query ocean --index n.db
has out "a3"
done_checks
