#!/bin/sh
# Crash consistency of ss-retrieve add: an add killed (kill -9) at any moment, before its commit,
# during it (a hot journal left behind) or after, leaves an index that passes SQLite's
# integrity_check and holds, byte for byte, either the old content or the new: its list and
# the answers of fixed queries are those before the add or those of the add uninterrupted.
# The kill moments are fractions of the uninterrupted add's time from a fixed seeded sequence
# (reproducible up to the machine's timing); the test prints how many tries ended old, new, and
# with a journal left behind, hot or not. The first read of an index with a hot journal rolls it
# back (ss_index_open).
# Needs python3's sqlite3 module (skipped without it).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
python3 -c 'import sqlite3' 2>/dev/null || { echo "no python3 with its sqlite3 module"; exit 77; }
tries=20

# 300 documents of 40 words from a vocabulary of 3000, then 300 more (ids a..., b...)
awk 'BEGIN { srand(32); for (i = 0; i < 600; i++) { printf "%s%d\t", i < 300 ? "a" : "b", i
	for (j = 0; j < 40; j++) printf "w%d ", int(rand() * 3000); print "" } }' >all.txt
head -n 300 all.txt >A.txt
tail -n 300 all.txt >B.txt
"$mkdb" A.tokens A.states <A.txt && "$mkdb" B.tokens B.states <B.txt || exit 1
expect 0 ss-retrieve add --index base.db A.tokens A.states
# an index's content: its list and three queries' ids and scores
content() {
	ss-retrieve list --index "$1" >"$2" &&
		printf 'w1 w2 w3\nw100 w2999\nw5 w6 w7 w8 w9\n' | ss-retrieve query --index "$1" -k 20 --ids --text >>"$2"
}
content base.db old.txt || fail "content of base.db"
cp base.db new.db
t0=$(date +%s%N)
expect 0 ss-retrieve add --index new.db B.tokens B.states
dur=$(( $(date +%s%N) - t0 ))
content new.db new.txt || fail "content of new.db"
cmp -s old.txt new.txt && fail "the add changed nothing"

n_old=0 n_new=0 n_hot=0 n_stale=0 x=12345
i=0
while [ $i -lt $tries ]; do
	i=$((i + 1))
	# the kill after a fraction f in [0.3, 1.1) of the add's time (LCG from a fixed seed): while
	# it reads the streams, while it commits (the postings rewritten, the file written) or after
	x=$(( (x * 1103515245 + 12345) % 2147483648 ))
	f=$(( 300 + x % 800 ))
	t=t$i.db
	cp base.db $t
	ss-retrieve add --index $t B.tokens B.states 2>/dev/null &
	pid=$!
	sleep "$(awk -v d="$dur" -v f="$f" 'BEGIN { printf "%.6f", d * f / 1000 / 1e9 }')"
	kill -9 $pid 2>/dev/null
	wait $pid 2>/dev/null
	# a journal whose header is not zeroed is hot: the kill came during the commit's writes
	if [ -s $t-journal ] && [ "$(od -An -tx1 -N1 $t-journal | tr -d ' ')" != 00 ]; then
		n_hot=$((n_hot + 1))
	elif [ -e $t-journal ]; then
		n_stale=$((n_stale + 1))
	fi
	content $t got.txt || fail "try $i (kill at $f/1000): the index does not answer"
	if cmp -s got.txt old.txt; then
		n_old=$((n_old + 1))
	elif cmp -s got.txt new.txt; then
		n_new=$((n_new + 1))
	else
		fail "try $i (kill at $f/1000): the index holds neither the old content nor the new"
		diff old.txt got.txt | head -5
	fi
	[ -s $t-journal ] && [ "$(od -An -tx1 -N1 $t-journal | tr -d ' ')" != 00 ] &&
		fail "try $i: a hot journal is left after the index was read"
done
# SQLite's own check of every file the kills left
python3 - t*.db <<'PY' || fail "integrity_check failed"
import sqlite3, sys
for db in sys.argv[1:]:
    c = sqlite3.connect(db)
    r = c.execute("PRAGMA integrity_check").fetchall()
    if r != [("ok",)]:
        print(db, r[:3])
        sys.exit(1)
PY
# a killed add leaves nothing that blocks the next one
expect 0 ss-retrieve add --index t1.db B.tokens B.states
content t1.db got.txt && cmp -s got.txt new.txt || fail "an add after the kills does not give the new content"
echo "$tries adds killed at fractions of their $((dur / 1000000)) ms: $n_old old content, $n_new new; $n_hot left a hot journal (rolled back by the next read), $n_stale a journal not (yet) hot"
done_checks
