#!/bin/sh
# ss-retrieve over several indexes (shards) and merge: the same documents
# built as one index and as 1, 2, 4 and 7 shards (consecutive slices of the
# input, so that documents of equal score fall in the same order) give the
# same ids and ranks, and scores within 1e-9 relative, for plain, phrase,
# AND, proximity and non-default k1/b queries; merge of the shards equals
# the one index; a document id in two shards, a missing shard and a shard
# that is not an index are one-line errors naming the file, exit 1, with
# nothing written. Document lengths grow along the input, so the shards'
# avgdl differ from the union's: a shard pruning by its own avgdl's
# bounds, or scoring by its own N, df or avgdl, fails the comparison.
# Fixtures: build/gen/mkdb ("ID<TAB>TEXT" lines -> token + state streams).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"

# 2800 documents: 3 to ~40 words, the last 800 of 1 to 3 (a shard of
# them has an avgdl far below the union's: its stored bounds hold only
# when widened; more documents than a search primes, so that it prunes), over 40 named words and 400 numbered ones drawn skewed
# (rare words give the scores range); an LCG in awk.
awk 'BEGIN {
	split("fox ocean ship tide moon night forest bread salt yeast quantum physics storm sail " \
	      "dog lazy quick brown river stone bridge tower king queen garden rain snow wind " \
	      "fire iron gold silver copper glass paper sand clay lamp", w, " ");
	x = 12345;
	for (i = 1; i <= 2800; i++) {
		x = (x * 16807) % 2147483647; len = i > 2000 ? 1 + x % 3 : 3 + x % (6 + int(i / 56)); t = "";
		for (j = 0; j < len; j++) {
			x = (x * 16807) % 2147483647; r = x / 2147483647;
			if (r < 0.6) word = w[1 + int(r * r / 0.36 * 40)];
			else { x = (x * 16807) % 2147483647; word = "v" int((x / 2147483647) ^ 3 * 400) }
			t = t (j ? " " : "") word;
		}
		printf "d%04d\t%s\n", i, t;
	}
}' >all.txt
"$mkdb" all.tokens all.states <all.txt || exit 1
expect 0 ss-retrieve build --index one.db all.tokens all.states

# Shards: n consecutive slices, each its own streams and index.
for n in 1 2 4 7; do
	mkdir s$n
	split -n l/$n -d -a 1 all.txt s$n/part
	list=
	for p in s$n/part?; do
		"$mkdb" $p.tokens $p.states <$p || exit 1
		expect 0 ss-retrieve build --index $p.db $p.tokens $p.states
		list="$list --index $p.db"
	done
	eval "shards$n=\"\$list\""
done
[ "$(ls s7/*.db | wc -l)" -eq 7 ] || fail "7 shards wanted, got $(ls s7/*.db | wc -l)"

cat >queries <<'EOF'
fox ocean
quantum physics storm v3 v17
king queen garden lamp
silver
rain snow wind fire v120 v255 v399
lazy dog quick brown fox jumps
"quick brown"
"lazy dog" fox
v5 v9 v11 v2 v1 v0 v7 glass paper sand clay
EOF
# Every query's top 25 as JSON lines (full-precision scores) under the options $*.
results() { # OUT INDEX-OPTIONS... -- QUERY-OPTIONS...
	out=$1; shift
	ss-retrieve query "$@" -k 25 --ids --json --empty-ok --exclude d0003 <queries >"$out" 2>err.q ||
		{ fail "query $*: exit $?"; sed 's/^/    /' err.q | head -3; }
}
# Equal ids and ranks line by line, scores within 1e-9 relative.
same_results() { # A B WHAT
	[ -s "$1" ] || { fail "$3: no results"; return; }
	jq -r '[.query, .rank, .id, .score] | @tsv' "$1" >"$1.tsv"
	jq -r '[.query, .rank, .id, .score] | @tsv' "$2" >"$2.tsv"
	paste "$1.tsv" "$2.tsv" | awk -F '\t' -v what="$3" '
		NF != 8 || $1 != $5 || $2 != $6 || $3 != $7 { print "FAIL: " what ": line " NR ": " $0; bad = 1; exit }
		{ d = $4 - $8; if (d < 0) d = -d; if (d > 1e-9 * ($4 > 0 ? $4 : -$4)) { print "FAIL: " what ": score " $4 " vs " $8 " (" $3 ")"; bad = 1; exit } }
		END { exit bad }' || fails=$((fails + 1))
	[ "$(wc -l <"$1.tsv")" -eq "$(wc -l <"$2.tsv")" ] || fail "$3: $(wc -l <"$1.tsv") vs $(wc -l <"$2.tsv") hits"
}
for opts in "" "--operator and" "--proximity on" "--k1 0.9 --b 0.4" "--literal"; do
	tag=$(echo "x$opts" | tr -c 'a-z0-9\n' _)
	results ref.$tag --index one.db $opts
	for n in 1 2 4 7; do
		eval "sh=\$shards$n"
		results got.$tag.$n $sh $opts
		same_results ref.$tag got.$tag.$n "$n shards${opts:+ ($opts)}"
	done
done
# The comparison can tell: one shard alone ranks by its own statistics.
results alone --index s7/part3.db
jq -r '.id' alone | sort >alone.ids
jq -r 'select(.id >= "d1201" and .id <= "d1600") | .id' ref.x | sort >ref.ids
cmp -s alone.ids ref.ids && [ "$(jq -r .score alone | head -1)" = "$(jq -r 'select(.id >= "d1201" and .id <= "d1600") | .score' ref.x | head -1)" ] &&
	fail "a shard alone scores as the union: the test cannot tell"
# Pruning across shards of very different avgdl, built to fail when a
# shard bounds its terms by its own avgdl: shard A, 300 long documents (250
# with "alpha" twice); shard B, 600 of 1 to 3 words, the first 280 "beta
# zz zz", then 20 "beta" (the best, past what a search primes) and 300
# "zz". Searched second, B starts from A's k-th score; its stored maxima
# (for its avgdl near 2) are below the union's w of a 1-word document.
awk 'BEGIN { for (i = 1; i <= 300; i++) { t = i <= 250 ? "alpha alpha" : "yy yy";
	for (j = 0; j < 198; j++) t = t " yy"; printf "a%03d\t%s\n", i, t } }' >pa.txt
awk 'BEGIN { for (i = 1; i <= 600; i++)
	printf "b%03d\t%s\n", i, i <= 280 ? "beta zz zz" : i <= 300 ? "beta" : "zz" }' >pb.txt
cat pa.txt pb.txt >pab.txt
for p in pa pb pab; do
	"$mkdb" $p.tokens $p.states <$p.txt || exit 1
	expect 0 ss-retrieve build --index $p.db $p.tokens $p.states
done
for k in 1 5 25; do
	for q in "alpha beta" beta; do
		ss-retrieve query --index pab.db -k $k --ids --json --query "$q" >pab.$k 2>err || fail "pab: $q"
		ss-retrieve query --index pa.db --index pb.db -k $k --ids --json --query "$q" >pshard.$k 2>err ||
			fail "pa+pb: $q"
		same_results pab.$k pshard.$k "pruning across shards (k $k, $q)"
	done
done
grep -q '"id":"b28[1-9]"\|"id":"b29[0-9]"\|"id":"b300"' pab.1 || fail "the pruning case's best is not a 1-word beta: $(cat pab.1)"

# @FILE: a list of shards, relative to the list's directory.
printf '# the shards\ns7/part0.db\n\n' >list
for i in 1 2 3 4 5 6; do echo s7/part$i.db >>list; done
mkdir sub && mv list sub/ && sed 's|^s7|../s7|' sub/list >sub/shards.list
results got.list --index @sub/shards.list
same_results ref.x got.list "--index @FILE"

# stats, list, show over shards: the union's
ss-retrieve stats --index one.db --json | jq -c 'del(.index_bytes, .state_files)' >stats.one
eval "ss-retrieve stats $shards4 --json" | jq -c 'del(.index_bytes, .state_files)' >stats.4
cmp -s stats.one stats.4 || fail "stats of 4 shards differ from one index's: $(cat stats.4)"
eval "ss-retrieve list $shards7" | cut -f 1 | sort >list.7
ss-retrieve list --index one.db | cut -f 1 | sort >list.one
cmp -s list.one list.7 || fail "list over 7 shards differs from one index's"
ss-retrieve show --index one.db d2650 d0002 | grep -v '^file: \|^offset: ' >show.one
eval "ss-retrieve show $shards7 d2650 d0002" | grep -v '^file: \|^offset: ' >show.7
cmp -s show.one show.7 || fail "show over 7 shards differs from one index's"

# merge: the 7 shards into one file, equal to one build
printf '../s7/part4.db\n../s7/part5.db\n../s7/part6.db\n' >sub/shards.list2
expect 0 ss-retrieve merge -v -o merged.db s7/part0.db s7/part1.db s7/part2.db s7/part3.db @sub/shards.list2
has err "merged.db: 2800 documents from 7 indexes"
for opts in "" "--operator and" "--proximity on"; do
	tag=$(echo "x$opts" | tr -c 'a-z0-9\n' _)
	results got.merged.$tag --index merged.db $opts
	same_results ref.$tag got.merged.$tag "merge${opts:+ ($opts)}"
done
ss-retrieve stats --index merged.db --json | jq -c 'del(.index_bytes, .state_files)' >stats.merged
cmp -s stats.one stats.merged || fail "stats of the merge differ from one index's: $(cat stats.merged)"
ls merged.db.* 2>/dev/null && fail "merge left files beside its output"

# --- bad shards: one line naming the file, exit 1, nothing written
cp s2/part0.db dup.db
expect 1 ss-retrieve query --index s2/part0.db --index s2/part1.db --index dup.db --query fox -o x.states
has err "document d0001 is in s2/part0.db and in dup.db"
[ "$(wc -l <err)" -eq 1 ] || fail "duplicate id: $(wc -l <err) lines of error"
[ -e x.states ] && fail "a failed query wrote its output"
expect 1 ss-retrieve merge -o m2.db s2/part0.db dup.db
has err "document d0001 is in s2/part0.db and in dup.db"
[ -e m2.db ] && fail "a failed merge wrote its output"
expect 1 ss-retrieve query --index s2/part0.db --index nosuch.db --query fox --ids
has err "^ss-retrieve: nosuch.db: "
[ -s out ] && fail "a missing shard: output written"
echo "not an index" >junk.db
expect 1 ss-retrieve stats --index s2/part0.db --index junk.db
has err "^ss-retrieve: junk.db: not an ss index"
cp s2/part1.db old.db
sqlite3 old.db "UPDATE meta SET value = '2' WHERE key = 'schema_version'" 2>/dev/null ||
	python3 -c "import sqlite3; c = sqlite3.connect('old.db'); c.execute(\"UPDATE meta SET value = '2' WHERE key = 'schema_version'\"); c.commit()"
expect 1 ss-retrieve query --index s2/part0.db --index old.db --query fox --ids
has err "^ss-retrieve: old.db: index schema version 2"
[ "$(wc -l <err)" -eq 1 ] || fail "old shard: $(wc -l <err) lines of error"
expect 1 ss-retrieve merge -o m3.db s2/part0.db old.db
[ -e m3.db ] && fail "a failed merge wrote its output"
expect 1 ss-retrieve query --index @nosuch.list --query fox --ids
has err "nosuch.list: No such file"
: >empty.list
expect 1 ss-retrieve list --index @empty.list
has err "empty.list: lists no index"
expect 2 ss-retrieve add --index a.db --index b.db all.tokens
has err "add takes one --index, not 2"
expect 2 ss-retrieve merge s2/part0.db
has err "merge needs -o OUT.db"
expect 2 ss-retrieve merge -o m4.db --index s2/part0.db
has err "option not valid for merge"
expect 1 ss-retrieve merge -o s2/part0.db s2/part0.db s2/part1.db
done_checks
