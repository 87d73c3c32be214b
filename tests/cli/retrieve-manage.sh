#!/bin/sh
# ss-retrieve's index management: add (incremental, = build), delete, list,
# show, stats, and the query options --text, --order, --json and plain-line
# batches. The core check: the results after build(A) + add(B) equal those
# of build(A+B), and after build(A+B) + delete(B) those of build(A) (BM25's
# N, avgdl, df and postings all follow the documents).
# Fixtures: build/gen/mkdb ("ID<TAB>TEXT" lines -> token + state streams).
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
same() { cmp -s "$1" "$2" || { fail "$3: $1 and $2 differ"; diff "$1" "$2" | head -8 | sed 's/^/    /'; }; }

# Two corpora of pseudo-random documents over one vocabulary, so that df,
# N and avgdl all matter to the scores (deterministic: an LCG in awk).
gen() { # PREFIX N SEED
	awk -v p="$1" -v n="$2" -v seed="$3" 'BEGIN {
		split("fox ocean ship tide moon night forest bread salt yeast quantum physics storm sail " \
		      "dog lazy quick brown river stone bridge tower king queen garden rain snow wind " \
		      "fire iron gold silver", w, " ");
		x = seed;
		for (i = 1; i <= n; i++) {
			x = (x * 16807) % 2147483647; len = 3 + x % 12; t = "";
			for (j = 0; j < len; j++) {
				x = (x * 16807) % 2147483647;
				t = t (j ? " " : "") w[1 + int(x / 7) % 32];
			}
			printf "%s%d\t%s\n", p, i, t;
		}
	}'
}
gen a 80 7 >A.txt
gen b 50 11 >B.txt
"$mkdb" A.tokens A.states <A.txt || exit 1
"$mkdb" B.tokens B.states <B.txt || exit 1
printf 'fox ocean\nquantum physics storm\nking queen garden\nsilver\nrain snow wind fire\nlazy dog\n' >queries
results() { # DB -> out.DB: every query's top 20, ids and scores
	ss-retrieve query --index "$1" -k 20 --ids <queries >"res.$1" 2>/dev/null
}

# --- add after build = build of both; delete = build without
expect 0 ss-retrieve build --index ab.db A.tokens A.states B.tokens B.states
expect 0 ss-retrieve build --index a.db A.tokens A.states
expect 0 ss-retrieve build --index inc.db A.tokens A.states
expect 0 ss-retrieve add -v --index inc.db B.tokens B.states
has err "130 documents (50 added, 0 replaced"
results ab.db; results a.db; results inc.db
[ -s res.ab.db ] || fail "no results for the queries"
same res.ab.db res.inc.db "build(A)+add(B) vs build(A+B)"
cmp -s res.ab.db res.a.db && fail "A and A+B give the same results: the test cannot tell"
ss-retrieve list --index ab.db | cut -f 1 | grep '^b' >B.ids
expect 0 ss-retrieve delete -v --index inc.db $(cat B.ids)
has err "50 deleted, 80 left"
results inc.db
same res.a.db res.inc.db "build(A+B)+delete(B) vs build(A)"
# the statistics too, but for the file's size (freed pages stay in it)
ss-retrieve stats --index inc.db --json | sed 's/"index_bytes":[0-9]*,//' >stats.inc
ss-retrieve stats --index a.db --json | sed 's/"index_bytes":[0-9]*,//' >stats.a
same stats.a stats.inc "stats after delete vs build(A)"
# deleted then added again: back to build(A+B)
expect 0 ss-retrieve add --index inc.db B.tokens B.states
results inc.db
same res.ab.db res.inc.db "delete(B)+add(B) vs build(A+B)"

# --- delete is all or nothing
expect 1 ss-retrieve delete --index inc.db a1 nosuch a2
has err "ss-retrieve: inc.db: no document nosuch in the index: nothing deleted"
ss-retrieve list --index inc.db | cut -f 1 | grep -qx a1 || fail "a1 deleted although the delete failed"
expect 0 ss-retrieve delete -v --index inc.db a80 a80
has err "1 deleted, 129 left"
expect 0 ss-retrieve add --index inc.db A.tokens A.states
expect 1 ss-retrieve delete --index missing.db a1
[ -e missing.db ] && fail "delete created missing.db"
expect 2 ss-retrieve delete --index inc.db; has err "no document ID"
expect 2 ss-retrieve delete --index inc.db --json a1; has err "not valid for delete"

# --- list
expect 0 ss-retrieve list --index a.db
[ "$(wc -l <out)" -eq 80 ] || fail "list: $(wc -l <out) lines, wanted 80"
head -n 1 out | awk -F '\t' -v d="$T" '$1 != "a1" || $2 !~ /^[0-9]+$/ || $3 != d "/A.states" || $4 != 0 || $5 <= 0 { exit 1 }' ||
	fail "list line: $(head -n 1 out)"
expect 0 ss-retrieve list --index a.db --json
has out '^{"id":"a1","n_tokens":[0-9]*,"file":".*/A.states","offset":0,"length":[0-9]*,'
expect 2 ss-retrieve list --index a.db a1; has err "unexpected argument"

# --- show: metadata and the text as indexed
a7=$(grep '^a7	' A.txt | cut -f 2)
expect 0 ss-retrieve show --index a.db a7
has out "^id: a7$"
has out "^file: .*/A.states$"
[ "$(tail -n 1 out)" = "$a7" ] || fail "show a7: text '$(tail -n 1 out)', wanted '$a7'"
expect 0 ss-retrieve show --index a.db --json a7 a3
[ "$(wc -l <out)" -eq 2 ] || fail "show --json: $(wc -l <out) lines"
has out "\"id\":\"a7\".*\"text\":\"$a7\"}"
expect 1 ss-retrieve show --index a.db a7 nosuch
has err "no document nosuch"
[ -s out ] && fail "show with an unknown id printed something"

# --- stats
expect 0 ss-retrieve stats --index ab.db
has out "^documents  *130$"
has out "^state_files  *2$"
has out "^texts_stored  *130$"
has out "^state_dtype  *f32$"
expect 0 ss-retrieve stats --index ab.db --json
has out '"documents":130,"terms":[1-9]'

# --- query --text, --order
expect 0 ss-retrieve query --index a.db -k 3 --query "fox ocean" --ids --text
last=$(tail -n 1 out)
id=$(printf '%s\n' "$last" | cut -f 2)
[ "$(printf '%s\n' "$last" | cut -f 1)" = 1 ] || fail "best not last: $last"
[ "$(printf '%s\n' "$last" | cut -f 4)" = "$(grep "^$id	" A.txt | cut -f 2)" ] || fail "--text: $last"
cp out last.tsv
expect 0 ss-retrieve query --index a.db -k 3 --query "fox ocean" --ids --text --order best-first
[ "$(head -n 1 out)" = "$last" ] || fail "--order best-first: head is $(head -n 1 out)"
tac last.tsv >first.tsv; same first.tsv out "best-first is best-last reversed"
expect 0 ss-retrieve query --index a.db -k 2 --query "fox ocean" --ids --json --text --order best-first
head -n 1 out | grep -q "^{\"rank\":1,\"id\":\"$id\",\"score\":[0-9.e-]*,\"text\":\"" || fail "--json --text: $(head -n 1 out)"
# the state stream follows --order too
ss-retrieve query --index a.db -k 3 --query "fox ocean" --order best-first -o first.states &&
	ss-cat --meta first.states | head -n 1 | grep -q "\"id\":\"$id\"" || fail "states --order best-first"
expect 2 ss-retrieve query --index a.db --query fox --text; has err "text goes with --ids"
expect 2 ss-retrieve query --index a.db --query fox --ids --order best; has err "order"

# --- batch: plain lines are queries (id = line number), JSON lines as before
printf 'fox ocean\n\n  {"id":"j","query":"silver"}\nlazy dog\r\n' | ss-retrieve query --index a.db -k 1 --ids >out 2>err ||
	fail "plain-line batch: $(cat err)"
[ "$(cut -f 1 out | tr '\n' ' ')" = "1 j 4 " ] || fail "plain-line batch ids: $(cat out)"
ss-retrieve query --index a.db -k 1 --query "lazy dog" --ids | cut -f 2- >one
grep '^4	' out | cut -f 3- >four
same one four "plain line 4 vs --query"
printf '{"id":"x"}\n' | ss-retrieve query --index a.db --ids >out 2>err && fail "bad JSON line accepted"
has err 'line 1: no "query" string (a query line is plain text, or a JSON object such as {"id": "q1", "query": "text to search"'
printf '{"q":"fox"}\n' | ss-retrieve query --index a.db --ids >out 2>err && fail "unknown key accepted"
has err 'line 1: unknown key "q" (known: id, query, exclude, k)'

done_checks
