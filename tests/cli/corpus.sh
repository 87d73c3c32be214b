#!/bin/sh
# Corpus builds: ss-encode --shard and --ids, then pipelines/corpus.mk on a tiny mixed corpus
# (40 lines of WikiText, a JSONL file, a tar) in 3 shards with -j2 — the shards together equal
# one whole encode, the shards' indexes answer queries as one (and merged), a deleted or interrupted shard (a leftover
# temporary file) is redone alone, changing SHARDS redoes all — and the Slurm scripts run by
# hand (shard.sbatch, index.sbatch); tests/cli/slurm.sh submits them through stand-ins.
# Run by tests/run from the repo root (SS_FIXTURES, SS_TOP, PATH with build/bin).
set -eu
LC_ALL=C; export LC_ALL
T1=$SS_FIXTURES/golden/models/t1-hf
MK="make --no-print-directory -s -f $SS_TOP/pipelines/corpus.mk"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect CODE PATTERN cmd...: exit status CODE, stderr matching PATTERN.
expect() {
	code=$1 pat=$2; shift 2
	set +e; "$@" >out 2>err; rc=$?; set -e
	[ "$rc" -eq "$code" ] || { cat err >&2; fail "$*: exit $rc, expected $code"; }
	grep -q -- "$pat" err || { cat err >&2; fail "$*: stderr lacks '$pat'"; }
}
# states FILE...: the records in full (JSON lines) without their byte offsets, sorted by id.
states() { ss-cat --full "$@" | sed 's/"offset":[0-9]*,//' | sort; }
# same A.json B.json: the same records, bit for bit (ss-encode is deterministic per document
# whatever its batch neighbours, threads or shard).
same() { cmp -s "$1" "$2"; }
mtime() { stat -c %y "$1"; }

# The corpus: text (one document per line), JSONL, and a tar of two files.
head -n 40 "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" >wiki.txt
printf '%s\n' '{"id": "j1", "text": "Zanzibar spice markets sell cloves and nutmeg."}' \
	'{"id": "j2", "text": "The quokka is a small marsupial of Western Australia."}' >docs.jsonl
mkdir tree
echo "Glaciers carve fjords into the mountains of Norway." >tree/fjord.txt
echo "A sourdough starter ferments flour and water with wild yeast." >tree/bread.txt
tar cf docs.tar tree
DOCS="wiki.txt docs.jsonl docs.tar"

# ss-encode --shard: three shards hold every document once; --ids picks and orders.
ss-tokenize -q --chunk 64 -o all.tok $DOCS
n=$(ss-cat all.tok | wc -l)
[ "$n" -gt 40 ] || fail "only $n chunks"
ss-encode -q --deterministic --model "$T1" --threads 1 -o all.st all.tok
for i in 0 1 2; do ss-encode -q --deterministic --model "$T1" --threads 1 --shard $i/3 -o s$i.st all.tok; done
[ "$(ss-cat s1.st | wc -l)" -eq $(((n + 1) / 3)) ] || fail "--shard 1/3: not every third document"
ss-cat --meta s1.st | head -n 1 | grep -q "\"id\":\"$(ss-cat all.tok | sed -n 2p | sed 's/.*"id":"\([^"]*\)".*/\1/')\"" ||
	fail "--shard 1/3 does not start at document 1"
states s0.st s1.st s2.st >shards.json
states all.st >all.json
same shards.json all.json || fail "the shards differ from one whole encode"
ss-cat --meta all.st | sed 's/.*"id":"\([^"]*\)".*/\1/' >all.ids
sed -n '5p;2p' all.ids >two.ids # ids of documents 1 and 4, listed 4 first
ss-encode -q --deterministic --model "$T1" --ids two.ids all.tok | ss-cat --meta | sed 's/.*"id":"\([^"]*\)".*/\1/' >got.ids
cmp -s got.ids two.ids || fail "--ids: not the listed documents in the listed order"
sed -n 5p all.ids >one.id
ss-encode -q --deterministic --model "$T1" --ids one.id all.tok | states - >one.json
grep -F "\"id\":\"$(cat one.id)\"" all.json >want.json
same one.json want.json || fail "--ids: the state differs from the whole encode's"
# --concat --ids equals --concat over a stream holding just those documents in that order.
sed -n 1p all.ids >first.id
ss-encode -q --deterministic --model "$T1" --concat --id c --ids first.id all.tok | states - >c1.json
ss-tokenize -q --chunk 64 wiki.txt | ss-encode -q --deterministic --model "$T1" --concat --id c --batch 1 --ids first.id | states - >c2.json
same c1.json c2.json || fail "--concat --ids"
expect 1 "nope.ids: line 2: id \"nope\" is not in the inputs" \
	sh -c "{ sed -n 1p all.ids; echo nope; } >nope.ids && ss-encode --model $T1 --ids nope.ids all.tok"
expect 1 "of this shard" sh -c "sed -n 2p all.ids >s.ids && ss-encode --model $T1 --shard 0/3 --ids s.ids all.tok"
expect 2 "--shard" ss-encode --model "$T1" --shard 3/3 all.tok
expect 2 "--shard" ss-encode --model "$T1" --shard 1 all.tok
expect 2 "--shard" ss-encode --model "$T1" --shard -1/2 all.tok

# corpus.mk: 3 shards, 2 jobs; the index finds a document of each input kind.
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 -j2
for f in build.conf corpus.tokens shard-0.states shard-1.states shard-2.states shard-0.db shard-1.db \
	shard-2.db index.list; do
	[ -s "db/$f" ] || fail "corpus.mk made no db/$f"
done
states db/shard-0.states db/shard-1.states db/shard-2.states >db.json
same db.json all.json || fail "corpus.mk shards differ from one whole encode"
[ "$(cat db/index.list)" = "$(printf 'shard-0.db\nshard-1.db\nshard-2.db')" ] || fail "index.list: $(cat db/index.list)"
[ ! -e db/index.db ] || fail "an index of the whole corpus was built (only the shards' are)"
ss-retrieve query -q --index @db/index.list -k 2 --query "quokka marsupial" --ids >q1
tail -n 1 q1 | grep -q "	j2#0	" || fail "index: quokka query: $(cat q1)"
ss-retrieve query -q --index @db/index.list -k 2 --query "fjords Norway glaciers" --ids >q2
tail -n 1 q2 | grep -q "	tree/fjord.txt#0	" || fail "index: fjord query: $(cat q2)"
ss-retrieve query -q --index @db/index.list -k 3 --query "Robert Boulter television actor" --ids >q3
tail -n 1 q3 | grep -q "	wiki.txt:[0-9]*#[0-9]*	" || fail "index: wiki query: $(cat q3)"
ss-retrieve query -q --index @db/index.list -k 1 --query "quokka" | ss-cat --meta | grep -q '"id":"j2#0"' ||
	fail "index: no state for j2"
# merge: one file that answers as the shards do.
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 merge
ss-retrieve query -q --index db/index.db -k 3 --query "Robert Boulter television actor" --ids >q3m
cmp -s q3 q3m || fail "the merged index answers otherwise than its shards"
rm db/index.db

# STATE_DTYPE=q8: the shards hold q8 states, which the index serves and ss-compose reads.
$MK DB=db8 DOCS="$DOCS" MODEL="$T1" SHARDS=1 CHUNK=64 THREADS=1 STATE_DTYPE=q8
ss-cat --stats db8/shard-0.states | grep -q '"dtype":"q8"' || fail "STATE_DTYPE=q8: shard not q8"
grep -q 'state_dtype=q8' db8/build.conf || fail "STATE_DTYPE not in build.conf"
ss-retrieve query -q --index @db8/index.list -k 3 --query "quokka marsupial" | ss-compose --mode picaso-r |
	ss-cat --meta | grep -q '"dtype":"q8"' || fail "q8 index: query | compose"

# Up to date: nothing is redone.
m0=$(mtime db/shard-0.states) m1=$(mtime db/shard-1.states) m2=$(mtime db/shard-2.states)
mi=$(mtime db/index.list) mt=$(mtime db/corpus.tokens) x1=$(mtime db/shard-1.db)
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 -j2
[ "$(mtime db/index.list)$(mtime db/shard-1.states)$(mtime db/shard-1.db)" = "$mi$m1$x1" ] ||
	fail "an up-to-date build redid work"

# A deleted shard is redone alone (its states and index), then the list.
rm db/shard-1.states
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 -j2
[ -s db/shard-1.states ] || fail "shard-1 not rebuilt"
[ "$(mtime db/shard-0.states)" = "$m0" ] && [ "$(mtime db/shard-2.states)" = "$m2" ] ||
	fail "other shards were rebuilt"
[ "$(mtime db/corpus.tokens)" = "$mt" ] || fail "the tokens were rebuilt"
[ "$(mtime db/shard-1.db)" != "$x1" ] || fail "shard-1's index was not rebuilt"
[ "$(mtime db/index.list)" != "$mi" ] || fail "the list was not rewritten"
states db/shard-0.states db/shard-1.states db/shard-2.states >db.json
same db.json all.json || fail "rebuilt shard differs"

# An interrupted shard: only its temporary file is there; it is not taken as done.
rm db/shard-1.states
head -c 1000 db/shard-0.states >db/shard-1.states.tmp.Ab12Cd
m1=$(mtime db/shard-2.states)
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 -j2
[ -s db/shard-1.states ] || fail "interrupted shard-1 taken as done"
[ "$(mtime db/shard-2.states)" = "$m1" ] || fail "shard-2 rebuilt after an interrupted shard-1"
ss-retrieve query -q --index @db/index.list -k 1 --query "quokka" | ss-cat --meta | grep -q '"id":"j2#0"' ||
	fail "index after the interrupted shard"
# An interrupted shard index build (the temporary index a killed run left) is not taken as done:
# the rebuild writes under a name of its own (a concurrent run may own the leftover).
rm db/shard-2.db
echo junk >db/shard-2.db.tmp.12345
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=3 CHUNK=64 THREADS=1 index
[ -s db/shard-2.db ] && [ "$(ls db | grep -c '^shard-2\.db\.tmp')" -eq 1 ] || fail "interrupted index: $(ls db)"
ss-retrieve query -q --index @db/index.list -k 1 --query "quokka" --ids | grep -q "j2#0" ||
	fail "index after an interrupted one"

# Other settings rebuild everything: 2 shards, the same documents.
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=2 CHUNK=64 THREADS=1 -j2
grep -q "shards=2" db/build.conf || fail "build.conf: $(cat db/build.conf)"
states db/shard-0.states db/shard-1.states >db.json
same db.json all.json || fail "SHARDS=2 differs from the whole"
ss-retrieve query -q --index @db/index.list -k 1 --query "sourdough yeast" --ids | grep -q "tree/bread.txt#0" ||
	fail "index after SHARDS=2"
expect 2 "DOCS is empty" $MK DB=db MODEL="$T1"

# Slurm: the per-task commands by hand, without Slurm.
export DB=sl DOCS MODEL="$T1" SHARDS=2 CHUNK=64
sh "$SS_TOP/pipelines/slurm/index.sbatch" tokens >/dev/null
[ -s sl/corpus.tokens ] && [ ! -e sl/shard-0.states ] || fail "index.sbatch tokens"
SLURM_ARRAY_TASK_ID=0 sh "$SS_TOP/pipelines/slurm/shard.sbatch" >/dev/null
[ -s sl/shard-0.states ] && [ ! -e sl/shard-1.states ] || fail "shard.sbatch 0 made other than shard 0"
SLURM_ARRAY_TASK_ID=1 SLURM_CPUS_PER_TASK=1 sh "$SS_TOP/pipelines/slurm/shard.sbatch" >/dev/null
sh "$SS_TOP/pipelines/slurm/index.sbatch" >/dev/null
states sl/shard-0.states sl/shard-1.states >db.json
same db.json all.json || fail "slurm shards differ from the whole"
ss-retrieve query -q --index @sl/index.list -k 1 --query "quokka" --ids | grep -q "j2#0" || fail "slurm index"
expect 2 "SLURM_ARRAY_TASK_ID is not set" sh "$SS_TOP/pipelines/slurm/shard.sbatch"
# clean removes the outputs and the leftover temporary files.
$MK DB=db DOCS="$DOCS" MODEL="$T1" SHARDS=2 CHUNK=64 clean
[ -z "$(ls db)" ] || fail "clean left: $(ls db)"
echo ok
