#!/bin/sh
# CLI regressions of the adversarial pass (issue 11): a truncated skippable
# frame, document limits, JSONL NUL / long / huge ids, file size limits and
# full disks (no partial output, the reason said), concurrent index builds,
# and empty state inputs / queries without a match. No shared data: the tiny
# tokenizer tests/fuzz/tiny-tokenizer.json, gen/mkdb and gen/mkmodel.
set -u
LC_ALL=C; export LC_ALL
B="$SS_TOP/$SS_BUILD"
for p in gen/mkdb gen/mkmodel; do [ -x "$B/$p" ] || { echo "no $B/$p (run make)"; exit 77; }; done
TOK="$SS_TOP/tests/fuzz/tiny-tokenizer.json"
# The scratch directory ($T, the current one), fail, expect CODE CMD..., has FILE REGEX.
. "$SS_TOP/tests/util/retrieve.sh"

# --- 1. a skippable frame running past the end is an error, not a clean end
printf 'a\tthe quick brown fox\nb\tlazy dog\nc\tocean\n' | "$B/gen/mkdb" d.tokens d.states
(printf '\123\052\115\030\000\000\001\000'; cat d.states) | ss-cat >out 2>err
[ $? -eq 1 ] || fail "truncated skippable frame: exit 0"
has err "record 0 (byte offset 0): skippable frame truncated"
[ -s out ] && fail "records printed past a truncated skippable frame"

# --- 3. document limits: line, --whole, archive entry, JSONL line; ss-encode --text
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "the fox "; print "" }' >long.txt
printf 'short line\n' >>long.txt
expect 1 ss-tokenize -t "$TOK" --max-doc 4k --ids long.txt; has err "long.txt: line 1: document longer than the --max-doc limit of 4096 bytes"
expect 1 ss-tokenize -t "$TOK" --max-doc 4k --whole --ids long.txt; has err "document long.txt: longer than the --max-doc limit"
expect 0 ss-tokenize -t "$TOK" --max-doc 32k --ids long.txt
mkdir ar && cp long.txt ar/big.txt && printf 'small\n' >ar/small.txt && tar czf ar.tar.gz -C ar big.txt small.txt
expect 1 ss-tokenize -t "$TOK" --max-doc 4k --ids ar.tar.gz; has err "document big.txt: 24012 bytes, over the --max-doc limit of 4096 bytes"
printf '{"id":"j","text":"%s"}\n' "$(head -c 5000 long.txt)" >long.jsonl
expect 1 ss-tokenize -t "$TOK" --max-doc 4k --ids long.jsonl; has err "long.jsonl: line 1: document longer"
expect 2 ss-tokenize -t "$TOK" --max-doc 0 long.txt; has err "max-doc"
"$B/gen/mkmodel" m --vocab 512 >/dev/null 2>&1 || fail "mkmodel"
expect 1 ss-encode --model m --text --tokenizer "$TOK" --max-doc 4k -o e.states long.txt
has err "long.txt: line 1: document longer than the --max-doc limit of 4096 bytes"
[ -e e.states ] && fail "ss-encode left an output after a refused document"

# --- 4, 5, 6. JSONL: NUL refused naming the line; long ids whole; huge numbers
printf '{"id":"a","text":"fine"}\n{"id":"b","text":"fi\\u0000ne"}\n' >nul.jsonl
expect 1 ss-tokenize -t "$TOK" nul.jsonl -o nul.tokens; has err "nul.jsonl: line 2: a NUL character"
[ -e nul.tokens ] && fail "output written for a NUL in JSONL"
long=$(awk 'BEGIN { for (i = 0; i < 5000; i++) printf "x"; printf "\303\251" }')
printf '{"id":"%s","text":"a"}\n{"id":"%sz","text":"b"}\n' "$long" "$long" >ids.jsonl
expect 0 ss-tokenize -t "$TOK" ids.jsonl -o ids.tokens
[ "$(ss-cat --meta ids.tokens | grep -c "\"id\":\"$long\"")" -eq 1 ] || fail "a 5002-byte id was not kept whole"
[ "$(ss-cat --meta ids.tokens | grep -c "\"id\":\"${long}z\"")" -eq 1 ] || fail "ids longer than 4095 bytes collide"
printf '{"id":1e300,"text":"a"}\n{"id":-1e19,"text":"b"}\n{"id":42,"text":"c"}\n' >num.jsonl
expect 0 ss-tokenize -t "$TOK" num.jsonl -o num.tokens
[ "$(ss-cat --meta num.tokens | sed 's/.*"id":"\([^"]*\)".*/\1/' | tr '\n' ' ')" = "1.0000000000000001e+300 -1e+19 42 " ] ||
	fail "numeric ids: $(ss-cat --meta num.tokens | sed 's/.*"id":"\([^"]*\)".*/\1/' | tr '\n' ' ')"

# --- 10. a file size limit: the write error with its reason, no output, no temporary
awk 'BEGIN { for (i = 0; i < 20000; i++) print "the quick brown fox jumps over the lazy dog" }' >big.txt
(ulimit -f 100; exec ss-tokenize -t "$TOK" -o big.tokens big.txt) >out 2>err
rc=$?
[ $rc -eq 1 ] || fail "ss-tokenize past ulimit -f: exit $rc (153: killed by SIGXFSZ)"
has err "big.tokens: write error: File too large"
[ -n "$(ls | grep big.tokens)" ] && fail "left behind: $(ls | grep big.tokens)"
# an index build on a full disk: a new index leaves nothing, an old one stays as it was
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "d%d\tfox dog ocean ship %d bread moon %d\n", i, i, i * 7 }' >docs.txt
"$B/gen/mkdb" big.tokens big.states <docs.txt
(ulimit -f 200; exec ss-retrieve build --index new.db big.tokens big.states) >out 2>err
rc=$?
[ $rc -eq 1 ] || fail "index build past ulimit -f: exit $rc"
has err "new.db: .*(File too large)"
[ -n "$(ls | grep new.db)" ] && fail "a failed build of a new index left: $(ls | grep new.db)"
expect 0 ss-retrieve build --index old.db d.tokens d.states
cp old.db old.copy
(ulimit -f 200; exec ss-retrieve build --index old.db big.tokens big.states) >out 2>err
rc=$?
[ $rc -eq 1 ] || fail "index build past ulimit -f: exit $rc"
cmp -s old.db old.copy || fail "a failed build changed the old index"
[ "$(ls | grep old.db | tr '\n' ' ')" = "old.db " ] || fail "left behind: $(ls | grep old.db)"

# --- 11. concurrent builds of one index run one after the other: a build
# that waits longer than SQLite's 10 s busy timeout still commits, and the
# index holds both builds' documents.
printf 'e1\tzeppelin over the fjord\n' | "$B/gen/mkdb" e.tokens e.states
( (sleep 12; cat d.tokens) | ss-retrieve build --index c.db - d.states >a.out 2>a.err; echo $? >a.rc ) &
sleep 1
expect 0 ss-retrieve build --index c.db e.tokens e.states
wait
[ "$(cat a.rc)" = 0 ] || { fail "the first build failed"; cat a.err; }
expect 0 ss-retrieve query --index c.db --query "zeppelin fox" -k 10 --ids
[ "$(cut -f 2 out | sort | tr '\n' ' ')" = "a e1 " ] || fail "concurrent builds: $(cut -f 2 out | tr '\n' ' ')"
[ -n "$(ls | grep c.db.lock)" ] && fail "lock file left behind"

# --- 12. an empty state input is an error (not the zero state) unless --no-state;
# a query without a match exits 1 (as grep) unless --empty-ok
expect 1 ss-decode --model m --prompt-tokens 1,2 --max-tokens 2 --ids </dev/null
has err "no state records (standard input is empty; --no-state starts from the zero state)"
: | ss-decode --model m --prompt-tokens 1,2 --max-tokens 2 --ids >out 2>err
[ $? -eq 1 ] || fail "ss-decode on an empty pipe: exit 0"
expect 0 ss-decode --model m --no-state --prompt-tokens 1,2 --max-tokens 2 --ids </dev/null
expect 1 ss-score --model m --query-tokens 1,2 --continuation-tokens 3 </dev/null
has err "no state records"
expect 0 ss-score --model m --no-state --query-tokens 1,2 --continuation-tokens 3 </dev/null
expect 1 ss-retrieve query --index old.db --query "quasar" -o q.states
[ -e q.states ] && [ ! -s q.states ] || fail "no empty output for a query without match"
expect 0 ss-retrieve query --index old.db --query "quasar" --empty-ok --ids
mkdir qd
printf '{"id":"hit","query":"fox"}\n{"id":"miss","query":"quasar"}\n' >batch.jsonl
ss-retrieve query --index old.db --out-dir qd <batch.jsonl >out 2>err
[ $? -eq 1 ] || fail "batch with a query without match: exit 0"
has err "query miss: no document matched"
[ "$(ls qd | tr '\n' ' ')" = "hit.states miss.states " ] || fail "batch outputs: $(ls qd)"

# --- 13. a FIFO (or a directory) where a file is read whole or as lines is refused at once, never
# waited on for a writer (issue 48, item 7): ss-cat --import's blob, --prompts, --pairs,
# --prompt-file, ss-retrieve --hits, ss-eval --qa, a tokenizer.json
mkfifo fifo && mkdir adir
G="$SS_TOP/formats/golden/t1-c2.states"
for f in fifo adir; do
	expect 1 timeout 10 ss-cat --import llama-seq --like "$G" --at 0 -o imp.states $f; has err "$f: not a regular file"
	[ -e imp.states ] && fail "ss-cat --import $f: output written"
	expect 1 timeout 10 ss-decode --model m --no-state --prompts $f; has err "$f: not a regular file"
	expect 1 timeout 10 ss-decode --model m --no-state --prompt-file $f; has err "$f: not a regular file"
	expect 1 timeout 10 ss-score --model m --no-state --pairs $f; has err "$f: not a regular file"
	expect 1 timeout 10 ss-retrieve build --index fifo.db --state-budget 1M --hits $f; has err "$f: not a regular file"
	expect 1 timeout 10 ss-eval recall --model m --index old.db --qa $f; has err "$f: not a regular file"
	expect 1 timeout 10 ss-tokenize -t $f long.txt; has err "$f: not a regular file"
done

# --- 14. one JSON-lines rule (issue 48, items 9, 17, 19): a \u0000 in a string is refused naming
# the file and the line by every JSONL reader (it cut the text short silently), an unknown key
# (or both a text and its tokens) too, and integers are read exactly (a line's "seed" of
# 2^53 + 1 was rounded to 2^53; the line and --seed now take the same range)
X="--model m --tokenizer $TOK --no-state"
printf '{"prompt":"fox"}\n{"prompt":"fo\\u0000x"}\n' >nul1.jsonl
expect 1 ss-decode $X --prompts nul1.jsonl -n 2 --ids; has err "^ss-decode: nul1.jsonl: line 2: a NUL character"
[ -s out ] && fail "ss-decode: output before the NUL line was refused"
printf '{"prompt":"fox","stop":["a\\u0000b"]}\n' >nul2.jsonl
expect 1 ss-decode $X --prompts nul2.jsonl -n 2 --ids; has err "nul2.jsonl: line 1: a NUL character"
printf '{"id":"p\\u0000q","query":"fox","continuation":"dog"}\n' >nul3.jsonl
expect 1 ss-score $X --pairs nul3.jsonl; has err "^ss-score: nul3.jsonl: line 1: a NUL character"
printf '{"query":"fox","continuation":"d\\u0000og"}\n' >nul4.jsonl
expect 1 ss-score $X --pairs nul4.jsonl; has err "nul4.jsonl: line 1: a NUL character"
printf '{"id":"q","query":"fo\\u0000x"}\n' | ss-retrieve query --index old.db --ids >out 2>err && fail "retrieve: NUL accepted"
has err "line 1: a NUL character"
printf '{"id":"q","key":"k","query":"a\\u0000b","continuation":"c","chunks":["a"],"gold_pos":0}\n' >nul5.jsonl
expect 1 ss-eval recall --model m --tokenizer "$TOK" --index old.db --qa nul5.jsonl; has err "^ss-eval: nul5.jsonl: line 1: a NUL character"
printf '[{"query_id": 1, "query": "the fo\\u0000x", "answers": ["dog"], "passages": {"is_selected": [1], "passage_text": ["the fox"]}}]\n' >nul6.json
expect 1 ss-eval msmarco --model m --tokenizer "$TOK" --qa nul6.json; has err "^ss-eval: nul6.json: a NUL character"
printf '{"query":"fox","continuation":"dog","chunks":["a"],"x":1}\n' >unk1.jsonl
expect 1 ss-train --objective bptc --model m --tokenizer "$TOK" --data unk1.jsonl --chunk-tokens d.tokens --steps 1 -o tr
has err '^ss-train: unk1.jsonl: line 1: unknown key "x" (known: id, query, query_tokens, continuation, continuation_tokens, chunks, key, gold, gold_pos)'
printf '{"query":"fox","continuation":"dog","bogus":1}\n' >unk2.jsonl
expect 1 ss-score $X --pairs unk2.jsonl; has err '^ss-score: unk2.jsonl: line 1: unknown key "bogus" (known: id, query, query_tokens, continuation, continuation_tokens)'
printf '{"query":"fox","query_tokens":[5],"continuation":"dog"}\n' >both.jsonl
expect 1 ss-score $X --pairs both.jsonl; has err '^ss-score: both.jsonl: line 1: both "query" and "query_tokens": give one'
printf '{"id":"q","key":"k","query":"a","continuation":"c","chunks":["a"],"gold_pos":0,"extra":1}\n' >unk3.jsonl
expect 1 ss-eval recall --model m --tokenizer "$TOK" --index old.db --qa unk3.jsonl; has err 'unk3.jsonl: line 1: unknown key "extra"'
printf '{"prompt":"fox","seed":9007199254740993,"temperature":1}\n' >seed1.jsonl
expect 0 ss-decode $X --prompts seed1.jsonl -n 12 --ids; mv out line.out
expect 0 ss-decode $X --prompt fox --seed 9007199254740993 --temperature 1 -n 12 --ids
cmp -s out line.out || fail "a line's seed 2^53 + 1 draws otherwise than --seed 2^53 + 1"
printf '{"prompt":"fox","seed":9223372036854775807,"temperature":1}\n' >seed2.jsonl
expect 0 ss-decode $X --prompts seed2.jsonl -n 2 --ids
expect 0 ss-decode $X --prompt fox --seed 9223372036854775807 --temperature 1 -n 2 --ids
printf '{"prompt":"fox","seed":9223372036854775808}\n' >seed3.jsonl
expect 1 ss-decode $X --prompts seed3.jsonl -n 2 --ids; has err 'seed3.jsonl: line 1: "seed" must be an integer in \[0, 9223372036854775807\]'
expect 2 ss-decode $X --prompt fox --seed 9223372036854775808 -n 2 --ids

done_checks
