#!/bin/sh
# ss-retrieve from the command line: build, rebuild, queries (single and
# batch), ordering, exclusion, concurrent readers, and every bad input.
# Fixtures come from build/gen/mkdb ("ID<TAB>TEXT" lines → token + state
# streams with random small states).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
lines() { n=$(wc -l <"$1"); [ "$n" -eq "$2" ] || fail "$1: $n lines, wanted $2"; }
# ids of a state stream, in stream order, one line
ids() { ss-cat --meta "$1" | sed 's/.*"id":"\([^"]*\)".*/\1/' | tr '\n' ' '; }
ranks() { ss-cat --meta "$1" | sed 's/.*"rank":\([0-9]*\).*/\1/' | tr '\n' ' '; }

printf 'a1\tthe quick brown fox jumps over the lazy dog\na2\tsailing ships cross the stormy ocean\na3\tquantum physics puzzles physicists\n' >part1.txt
printf 'b1\tthe fox hunts at night in the dark forest\nb2\tbread flour water salt and yeast\nb3\tocean tides follow the moon and the fox\n' >part2.txt
mkdir -p db/shards
"$mkdb" db/part1.tokens db/shards/s1.states <part1.txt || exit 1
"$mkdb" db/part2.tokens db/shards/s2.states <part2.txt || exit 1

# --- help, version, usage errors
expect 0 ss-retrieve --help; has out "usage: ss-retrieve add|build"
expect 0 ss-retrieve -V; has out "ss-retrieve "
expect 2 ss-retrieve; has err "missing command"
expect 2 ss-retrieve frobnicate --index x.db; has err "unknown command"
expect 2 ss-retrieve query --query fox; has err "index DB is required"
expect 2 ss-retrieve query --index x.db --json --query fox; has err "json goes with --ids"
expect 2 ss-retrieve query --index x.db </dev/null; has err "need --out-dir"
expect 2 ss-retrieve query --index x.db -k 0 --query fox; has err "-k"
expect 2 ss-retrieve build --index x.db -k 3 db/part1.tokens; has err "not valid for build"
expect 2 ss-retrieve query --index x.db --bogus; has err "unknown option"

# --- build: tokens and states in any order, several shards
expect 0 ss-retrieve build -v --index db/idx.db db/shards/s2.states db/part1.tokens db/shards/s1.states db/part2.tokens
has err "6 documents (6 added, 0 replaced, 0 left out)"

# --- query --ids: most relevant last, rank column, scores > 0
expect 0 ss-retrieve query --index db/idx.db -k 3 --query "fox forest night" --ids
lines out 3
[ "$(tail -n 1 out | cut -f 1,2)" = "$(printf '1\tb1')" ] || fail "top hit not last: $(cat out)"
[ "$(cut -f 1 out | tr '\n' ' ')" = "3 2 1 " ] || fail "ranks not 3 2 1: $(cat out)"
awk -F '\t' '$3 <= 0 { exit 1 }' out || fail "non-positive score: $(cat out)"
expect 0 ss-retrieve query --index db/idx.db -k 2 --query "fox forest night" --ids --json
has out '"rank":1,"id":"b1","score":'

# --- query states: the same documents, in the same order, annotated
ss-retrieve query --index db/idx.db -k 3 --query "fox forest night" --ids | cut -f 2 | tr '\n' ' ' >want
expect 0 ss-retrieve query --index db/idx.db -k 3 --query "fox forest night" -o top.states
[ "$(ids top.states)" = "$(cat want)" ] || fail "stream order $(ids top.states) vs ids $(cat want)"
[ "$(ranks top.states)" = "3 2 1 " ] || fail "ranks in stream: $(ranks top.states)"
ss-cat --meta top.states | grep -q '"score":' || fail "no score in the stream"
ss-retrieve query --index db/idx.db -k 3 --query "fox forest night" | ss-cat --meta >piped.json || fail "query to a pipe"
lines piped.json 3
# the arrays are the indexed states, untouched
ss-cat --full db/shards/s2.states | grep '"id":"b1"' | sed 's/.*"conv"//' >orig.conv
ss-cat --full top.states | grep '"id":"b1"' | sed 's/.*"conv"//' >got.conv
cmp -s orig.conv got.conv || fail "conv/ssm of b1 changed by the annotation"

# --- exclusion
expect 0 ss-retrieve query --index db/idx.db -k 3 --query "fox forest night" --ids --exclude b1 --exclude nosuch
grep -q 'b1' out && fail "excluded b1 returned"
lines out 2

# --- empty query, no match
expect 1 ss-retrieve query --index db/idx.db --query "  @-@ , " --ids; has err "empty query"
expect 1 ss-retrieve query --index db/idx.db --query "" -o empty.states; has err "empty query"
[ -e empty.states ] && fail "output written for an empty query"
# nothing matched: exit 1 as grep, the (empty) output written; --empty-ok: 0
expect 1 ss-retrieve query --index db/idx.db --query "zeppelin" --ids; lines out 0
[ -s err ] && fail "a message for a query without match: $(cat err)"
expect 1 ss-retrieve query --index db/idx.db --query "zeppelin" -o none.states
[ -e none.states ] && [ ! -s none.states ] || fail "no empty output for a query without match"
expect 0 ss-retrieve query --index db/idx.db --query "zeppelin" --ids --empty-ok; lines out 0
# FTS5's operators are words or separators; a double quote opens a phrase (issue 47)
expect 0 ss-retrieve query --index db/idx.db --query '"fox" OR NEAR(a b) *' --ids

# --- batch: JSON lines on stdin, one file per query; a bad line does not stop the rest
mkdir qout
cat >queries.jsonl <<'EOF'
{"id": "q1", "query": "fox forest night", "exclude": ["b1"]}
{"id": "q2", "query": "ocean", "k": 1}

{"id": "q3", "query": "   "}
{not json
{"id": 70, "query": "bread yeast"}
{"query": "quantum"}
{"id": "../evil", "query": "fox"}
EOF
expect 1 ss-retrieve query --index db/idx.db -k 2 --out-dir qout <queries.jsonl
has err "query q3: empty query"
has err "line 5: not a JSON object"
has err "evil: query id is not usable as a file name"
[ "$(ls qout | tr '\n' ' ')" = "7.states 70.states q1.states q2.states " ] || fail "batch outputs: $(ls qout)"
[ "$(ids qout/q1.states)" = "a1 b3 " ] || fail "q1: $(ids qout/q1.states)"
[ "$(ids qout/q2.states)" = "b3 " ] || [ "$(ids qout/q2.states)" = "a2 " ] || fail "q2: $(ids qout/q2.states)"
[ "$(ids qout/70.states)" = "b2 " ] || fail "70: $(ids qout/70.states)"
[ "$(ids qout/7.states)" = "a3 " ] || fail "7 (line number as id): $(ids qout/7.states)"
# Ids that repeat (issue 32 item 10): a plain line's id is its line number, which a JSON
# line's "id" may be too. Each would write the same DIR/ID.states, so --out-dir refuses the
# batch before any query runs (naming the first repeat in input order); --ids, which
# streams, prints them as they come.
printf 'fox\n{"id": 1, "query": "ocean"}\n{"id": "q", "query": "bread"}\n{"id": "q", "query": "fox"}\n' >dup.txt
rm -rf dupout; mkdir dupout
expect 1 ss-retrieve query --index db/idx.db -k 1 --out-dir dupout <dup.txt
has err '^ss-retrieve: -: line 2: query id "1" is line 1.s too: .*no query was run$'
lines err 1
[ -z "$(ls dupout)" ] || fail "a batch with repeated ids wrote: $(ls dupout | tr '\n' ' ')"
sed 1d dup.txt >dup2.txt
expect 1 ss-retrieve query --index db/idx.db -k 1 --out-dir dupout <dup2.txt
has err '^ss-retrieve: -: line 3: query id "q" is line 2.s too'
[ -z "$(ls dupout)" ] || fail "a batch with repeated ids wrote: $(ls dupout | tr '\n' ' ')"
expect 0 ss-retrieve query --index db/idx.db -k 1 --ids <dup.txt
lines out 4
expect 1 ss-retrieve query --index db/idx.db -k 2 --ids <queries.jsonl
has out "$(printf 'q1\t1\tb3\t')"
has out "$(printf '70\t1\tb2\t')"
expect 0 ss-retrieve query --index db/idx.db -k 2 --ids --json <<'EOF'
{"id": "q1", "query": "fox"}
EOF
has out '"query":"q1","rank":1'

# --- concurrent readers
i=0
while [ $i -lt 8 ]; do
	ss-retrieve query --index db/idx.db -k 3 --query "fox ocean" -o conc$i.states 2>conc$i.err &
	i=$((i + 1))
done
wait
i=0
while [ $i -lt 8 ]; do
	[ "$(ids conc$i.states)" = "$(ids conc0.states)" ] || fail "concurrent reader $i: $(ids conc$i.states)"
	[ -s conc$i.err ] && fail "concurrent reader $i: $(cat conc$i.err)"
	i=$((i + 1))
done

# --- the index moves with its shards (paths under its directory are relative)
cp -r db moved
mv db db.away
expect 0 ss-retrieve query --index moved/idx.db -k 1 --query "quantum" -o m.states
[ "$(ids m.states)" = "a3 " ] || fail "moved index: $(ids m.states)"
mv db.away db
rm -rf moved

# --- rebuild: replaced ids and new ones; a document with only one half is left out
printf 'a1\tvolcanic eruptions reshape islands\nc1\tglaciers carve valleys\n' >part3.txt
"$mkdb" db/part3.tokens db/shards/s3.states <part3.txt
printf 'lonely\tonly text here about comets\n' | "$mkdb" db/lonely.tokens ""
expect 0 ss-retrieve build -v --index db/idx.db db/part3.tokens db/shards/s3.states db/lonely.tokens
has err "document lonely has text but no state record"
has err "7 documents (1 added, 1 replaced, 1 left out)"
expect 0 ss-retrieve query --index db/idx.db -k 1 --query "volcanic" -o v.states
[ "$(ids v.states)" = "a1 " ] || fail "replaced a1: $(ids v.states)"
expect 1 ss-retrieve query --index db/idx.db --query "lazy dog" --ids
grep -q 'a1' out && fail "a1's old text still indexed"

# --- a failed build leaves the index as it was
printf 'x1\tmartian dust\n' | "$mkdb" --fingerprint other-model db/x.tokens db/shards/x.states
cp db/idx.db before.db
expect 1 ss-retrieve build --index db/idx.db db/x.tokens db/shards/x.states; has err "two models"
cmp -s db/idx.db before.db || fail "index changed by a failed build"
head -c 100 db/shards/s1.states >db/broken.states
expect 1 ss-retrieve build --index db/idx.db db/x.tokens db/broken.states; has err "db/broken.states: "
cmp -s db/idx.db before.db || fail "index changed by a failed build"
expect 1 ss-retrieve build --index db/idx.db - <db/shards/s1.states; has err "regular file"
expect 1 ss-retrieve build --index db/idx.db no/such.states; has err "no/such.states"

# --- bad state files at query time: one-line error naming document and file; batch goes on
printf '{"id":"g","query":"quantum"}\n{"id":"h","query":"bread"}\n' >two.jsonl
mv db/shards/s1.states s1.saved
expect 1 ss-retrieve query --index db/idx.db -k 1 --query quantum -o miss.states
has err "s1.states: document a3"
lines err 1
[ -e miss.states ] && fail "output written despite a missing state file"
rm -rf out2; mkdir out2
expect 1 ss-retrieve query --index db/idx.db -k 1 --out-dir out2 <two.jsonl
has err "query g: .*s1.states: document a3"
[ "$(ls out2 | tr '\n' ' ')" = "h.states " ] || fail "batch after a missing file: $(ls out2)"
# truncated
head -c 200 s1.saved >db/shards/s1.states
expect 1 ss-retrieve query --index db/idx.db -k 1 --query quantum -o t.states
has err "document a3 at byte offset [0-9]*: the file has 200 bytes"
# replaced: other records at the offsets (id mismatch), and another model (fingerprint mismatch)
"$mkdb" xx.tokens db/shards/s1.states <part2.txt
expect 1 ss-retrieve query --index db/idx.db -k 1 --query quantum -o t.states
has err "document a3 at byte offset"
# (a fingerprint of the same length keeps the records' offsets)
"$mkdb" --fingerprint othermodel xx.tokens db/shards/s1.states <part1.txt
expect 1 ss-retrieve query --index db/idx.db -k 1 --query sailing -o t.states
has err "fingerprint"
lines err 1
# a FIFO in its place (issue 32 item 8): refused at once, not waited on for a writer
# forever (timeout: a hang fails the check instead of the whole run)
rm db/shards/s1.states
mkfifo db/shards/s1.states || fail "mkfifo"
expect 1 timeout 10 ss-retrieve query --index db/idx.db -k 1 --query quantum -o fifo.states
has err "^ss-retrieve: db/idx\.db: .*/db/shards/s1\.states: document a3: state file is not a regular file"
lines err 1
[ -e fifo.states ] && fail "output written despite a FIFO state file"
rm -f db/shards/s1.states
mv s1.saved db/shards/s1.states
expect 0 ss-retrieve query --index db/idx.db -k 1 --query quantum -o t.states

# --- an index from another schema version, and things that are not indexes
if command -v sqlite3 >/dev/null; then
	cp db/idx.db v1.db
	sqlite3 v1.db "UPDATE meta SET value = '1' WHERE key = 'schema_version'"
	expect 1 ss-retrieve query --index v1.db --query fox --ids; has err "v1.db: index schema version 1"
	lines err 1
	expect 1 ss-retrieve build --index v1.db db/part1.tokens; has err "schema version 1"
	# Schema 2 had no compound terms: its queries would rank differently.
	sqlite3 v1.db "UPDATE meta SET value = '2' WHERE key = 'schema_version'"
	expect 1 ss-retrieve query --index v1.db --query fox --ids; has err "schema version 2, this build of ss reads versions 3 and 4: rebuild"
	lines err 1
fi
echo "not a database at all, just some text......................................" >text.db
expect 1 ss-retrieve query --index text.db --query fox --ids; has err "text.db: not an ss index"
expect 1 ss-retrieve query --index nosuch.db --query fox --ids; has err "nosuch.db: no such index"
[ -e nosuch.db ] && fail "query created an index"

done_checks
