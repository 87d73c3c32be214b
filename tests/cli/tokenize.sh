#!/bin/sh
# ss-tokenize as a command: options, input formats, ids, chunks, decoding,
# errors, the tokenizer lookup. Run by tests/run (PATH has the build's bin/).
set -u
tok=$SS_TOP/data/tokenizer.json
command -v ss-tokenize >/dev/null || { echo "ss-tokenize not built"; exit 1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect_exit CODE CMD...: runs CMD (stdout to $t/out, stderr to $t/err).
expect_exit() {
	want=$1; shift
	"$@" >"$t/out" 2>"$t/err"
	rc=$?
	[ "$rc" -eq "$want" ] || fail "$* exited $rc, want $want; stderr: $(head -c 300 "$t/err")"
}
# expect_text FILE TEXT: FILE holds exactly TEXT (printf format).
expect_text() {
	printf "$2" >"$t/want"
	cmp -s "$1" "$t/want" || fail "$1: got '$(od -c "$1" | head -n 3)', want '$2'"
}
expect_grep() { # PATTERN FILE
	grep -q -- "$1" "$2" || fail "$2 lacks '$1': $(head -c 300 "$2")"
}

# --- help, version, usage errors
expect_exit 0 ss-tokenize --help
expect_grep '^usage: ss-tokenize' "$t/out"
expect_exit 0 ss-tokenize -V
expect_grep '^ss-tokenize ' "$t/out"
expect_exit 2 ss-tokenize --no-such-option
expect_grep "unknown option '--no-such-option'" "$t/err"
expect_exit 2 ss-tokenize --chunk 0
expect_exit 2 ss-tokenize --chunk
expect_exit 2 ss-tokenize --decode --ids
expect_exit 2 ss-tokenize --jsonl --archive
expect_exit 1 ss-tokenize -t "$t/missing.json" --ids /dev/null
expect_grep "missing.json" "$t/err"

# --- text, one document per line: \r kept, empty lines skipped, ids FILE:LINE
printf 'Hello world\n\nSecond line\r\nthird' >"$t/a.txt"
expect_exit 0 ss-tokenize --ids "$t/a.txt"
expect_text "$t/out" '12092 1533\n10951 1386 190\n19016\n'
expect_exit 0 ss-tokenize -o "$t/a.tok" "$t/a.txt"
expect_exit 0 ss-cat "$t/a.tok"
expect_grep "\"id\":\"$t/a.txt:3\"" "$t/out"
expect_grep '"text":"Second line\\r"' "$t/out"
# stdin: ids stdin:LINE
printf 'Hello world\n' | ss-tokenize | ss-cat >"$t/out"
expect_grep '"id":"stdin:1"' "$t/out"
# --whole: one document, id = FILE
expect_exit 0 ss-tokenize --whole --ids "$t/a.txt"
expect_text "$t/out" '12092 1533 187 187 10951 1386 190 187 19016\n'
# the golden case text gives the golden tokens
expect_exit 0 ss-tokenize --whole --ids "$SS_FIXTURES/golden/t1/c2/text.txt"
od -An -v -t d4 "$SS_FIXTURES/golden/t1/c2/tokens.i32" | tr -s ' \n' '  ' | sed 's/^ //; s/ $//' >"$t/want"
echo >>"$t/want"
cmp -s "$t/out" "$t/want" || fail "golden c2: got $(cat "$t/out"), want $(cat "$t/want")"

# --- empty input: zero records, exit 0
expect_exit 0 ss-tokenize -o "$t/empty.tok" /dev/null
[ -f "$t/empty.tok" ] && [ ! -s "$t/empty.tok" ] || fail "empty input did not give an empty stream"
: | ss-tokenize --whole --ids >"$t/out" || fail "empty stdin --whole failed"
[ ! -s "$t/out" ] || fail "empty stdin gave output"

# --- decode round trip (input without empty lines, ending in a newline)
printf 'The cat sat.\r\n  Two  spaces\nCafe\314\201 \360\237\246\231\n' >"$t/r.txt"
ss-tokenize "$t/r.txt" | ss-tokenize --decode >"$t/out" || fail "decode pipe failed"
expect_text "$t/out" 'The cat sat.\r\n  Two  spaces\nCaf\303\251 \360\237\246\231\n'
# chunks of a document are joined again; --whole decodes to the bytes
ss-tokenize --chunk 2 "$t/r.txt" | ss-tokenize --decode -o "$t/dec.txt" || fail "chunk decode failed"
expect_text "$t/dec.txt" 'The cat sat.\r\n  Two  spaces\nCaf\303\251 \360\237\246\231\n'
cp "$SS_FIXTURES/golden/t1/c3/text.txt" "$t/c3.txt"
ss-tokenize --whole --chunk 50 "$t/c3.txt" | ss-tokenize --decode --whole >"$t/out"
cmp -s "$t/out" "$t/c3.txt" || fail "--whole --chunk 50 round trip differs"

# --- --chunk ids and sizes
ss-tokenize --whole --chunk 4 "$t/a.txt" | ss-cat >"$t/out"
[ "$(wc -l <"$t/out")" -eq 3 ] || fail "--chunk 4 of 9 tokens: want 3 records"
expect_grep "\"id\":\"$t/a.txt#0\",\"n_tokens\":4" "$t/out"
expect_grep "\"id\":\"$t/a.txt#2\",\"n_tokens\":1" "$t/out"
ss-tokenize --chunk 2 --ids "$t/a.txt" >"$t/out"
expect_text "$t/out" '12092 1533\n10951 1386\n190\n19016\n'

# --- --parts: N chunks of nearly equal size (longer ones first), fewer for short documents
ss-tokenize --whole --parts 2 "$t/a.txt" | ss-cat >"$t/out"
[ "$(wc -l <"$t/out")" -eq 2 ] || fail "--parts 2 of 9 tokens: want 2 records"
expect_grep "\"id\":\"$t/a.txt#0\",\"n_tokens\":5" "$t/out"
expect_grep "\"id\":\"$t/a.txt#1\",\"n_tokens\":4" "$t/out"
ss-tokenize --parts 2 --ids "$t/a.txt" >"$t/out"
expect_text "$t/out" '12092\n1533\n10951 1386\n190\n19016\n'
ss-tokenize --whole --parts 4 --ids "$t/a.txt" >"$t/out"
expect_text "$t/out" '12092 1533 187\n187 10951\n1386 190\n187 19016\n'
ss-tokenize --whole --parts 2 "$t/c3.txt" | ss-tokenize --decode --whole >"$t/out"
cmp -s "$t/out" "$t/c3.txt" || fail "--whole --parts 2 round trip differs"
expect_exit 2 ss-tokenize --parts 2 --chunk 3 /dev/null
expect_exit 2 ss-tokenize --parts 0 /dev/null

# --- JSONL: by extension or --jsonl; id string, number, or FILE:LINE
printf '{"id":"x1","text":"Hello world"}\n{"text":"no id"}\n\n{"id":7,"text":"num id","extra":[1]}\n' >"$t/b.jsonl"
ss-tokenize "$t/b.jsonl" | ss-cat >"$t/out"
expect_grep '"id":"x1"' "$t/out"
expect_grep "\"id\":\"$t/b.jsonl:2\"" "$t/out"
expect_grep '"id":"7"' "$t/out"
ss-tokenize --jsonl --ids <"$t/b.jsonl" >"$t/out"
expect_text "$t/out" '12092 1533\n2369 2654\n6370 2654\n'
printf '{"id":"ok","text":"fine"}\n{"id":"bad",' >"$t/bad.jsonl"
expect_exit 1 ss-tokenize -o "$t/bad.tok" "$t/bad.jsonl"
expect_grep 'bad.jsonl: line 2: invalid JSON' "$t/err"
[ ! -e "$t/bad.tok" ] || fail "output left behind after a JSON error"

gzip -c "$t/b.jsonl" >"$t/b.jsonl.gz"
ss-tokenize --ids "$t/b.jsonl.gz" >"$t/out" || fail "b.jsonl.gz failed"
expect_text "$t/out" '12092 1533\n2369 2654\n6370 2654\n'

# --- archives: one document per regular entry, id = entry path
mkdir -p "$t/arc/d"
printf 'Doc one text.' >"$t/arc/d/one.txt"
printf 'Doc two,\nwith two lines.\n' >"$t/arc/two.txt"
(cd "$t/arc" && tar cf ../a.tar d two.txt && tar czf ../a.tgz d two.txt) || fail "tar failed"
for a in a.tar a.tgz; do
	ss-tokenize "$t/$a" | ss-cat >"$t/out" || fail "$a: failed"
	[ "$(wc -l <"$t/out")" -eq 2 ] || fail "$a: want 2 records"
	expect_grep '"id":"d/one.txt"' "$t/out"
	expect_grep '"id":"two.txt","n_tokens":9' "$t/out"
done
ss-tokenize --ids <"$t/a.tgz" >"$t/out" || fail "archive on stdin failed"
expect_text "$t/out" '15032 581 2505 15\n15032 767 13 187 3113 767 3104 15 187\n'
# a compressed text file: lines as usual
gzip -c "$t/a.txt" >"$t/a.txt.gz"
expect_exit 0 ss-tokenize --ids "$t/a.txt.gz"
expect_text "$t/out" '12092 1533\n10951 1386 190\n19016\n'

# --- invalid UTF-8: exit 1, the document and byte offset named, no output
printf 'good line\nbad \377 line\n' >"$t/bad.txt"
expect_exit 1 ss-tokenize -o "$t/bad.tok" "$t/bad.txt"
expect_grep "^ss-tokenize: $t/bad.txt: document $t/bad.txt:2: invalid UTF-8 at byte offset 4\$" "$t/err"
[ ! -e "$t/bad.tok" ] || fail "output left behind after invalid UTF-8"
ls "$t" | grep -q 'tmp' && fail "temporary file left behind"
printf '{"id":"j","text":"ok \\u00e9 \303("}\n' >"$t/bad2.jsonl"
expect_exit 1 ss-tokenize --ids -o "$t/bad2.ids" "$t/bad2.jsonl"
expect_grep 'document j: invalid UTF-8 at byte offset 6$' "$t/err"
[ ! -e "$t/bad2.ids" ] || fail "--ids output left behind after invalid UTF-8"

# --- binary never goes to a terminal: not testable without a tty; a
# token stream from another tokenizer is refused by --decode
ss-tokenize "$t/a.txt" >"$t/a.tok"
other=$t/other
sed 's/"normalizer"/"normalizer" /' "$tok" >"$other.json"
expect_exit 1 ss-tokenize --decode -t "$other.json" "$t/a.tok"
expect_grep 'made by tokenizer' "$t/err"
# SS_TOKENIZER is used when no -t is given
SS_TOKENIZER=$t/missing.json ss-tokenize --ids "$t/a.txt" >/dev/null 2>"$t/err" && fail "SS_TOKENIZER ignored"
expect_grep 'missing.json' "$t/err"

# --- the lookup order (tools/defaults.h): -t > $SS_TOKENIZER > the model's tokenizer.json >
# DATADIR > the source tree's data/tokenizer.json. A model directory whose tokenizer.json is
# not a tokenizer shows where each step looks.
mkdir "$t/m"
echo '{}' >"$t/m/tokenizer.json"
SS_MODEL=$t/m expect_exit 1 ss-tokenize --ids "$t/a.txt"
expect_grep "$t/m/tokenizer.json" "$t/err"
SS_MODEL=$t/m SS_TOKENIZER=$tok expect_exit 0 ss-tokenize --ids "$t/a.txt"
expect_text "$t/out" '12092 1533\n10951 1386 190\n19016\n'
SS_TOKENIZER=$t/m/tokenizer.json expect_exit 0 ss-tokenize -t "$tok" --ids "$t/a.txt"
# nothing given: the default model's tokenizer, the source tree's data/model/tokenizer.json
# (this program runs from its build tree): byte level, a token per byte
env -u SS_MODEL -u SS_TOKENIZER ss-tokenize --ids "$t/a.txt" >"$t/out" 2>"$t/err" || fail "no default tokenizer: $(cat "$t/err")"
expect_text "$t/out" '72 101 108 108 111 32 119 111 114 108 100\n83 101 99 111 110 100 32 108 105 110 101 13\n116 104 105 114 100\n'
# out of its tree, with no DATADIR copy: an error naming what to give
cp "$(command -v ss-tokenize)" "$t/ss-tokenize"
datadir=$(ss-tokenize --help | sed -n 's|^             \(.*\)/tokenizer.json, data/tokenizer.json of the source tree$|\1|p')
[ -n "$datadir" ] || fail "--help does not state the tokenizer lookup"
if [ ! -e "$datadir/tokenizer.json" ]; then
	env -u SS_MODEL -u SS_TOKENIZER "$t/ss-tokenize" --ids "$t/a.txt" >"$t/out" 2>"$t/err"
	[ $? -eq 1 ] || fail "no tokenizer anywhere: exit $?"
	expect_grep 'no tokenizer.json found: use --tokenizer FILE or set SS_TOKENIZER' "$t/err"
fi

[ "$fails" -eq 0 ] || { echo "$fails failures"; exit 1; }
echo "ok"
