# ss-score against the golden next-token NLL (golden/t*/c3/nll.f32:
# nll[t] = NLL of tokens[t+1] given tokens[0..t], from llama.cpp's logits),
# from the zero state and from a stored state, text and token pairs, JSONL
# pairs, and bad input. Run by tests/run from the repo root. The t1-ss and t2
# cases are in cli/shared.sh.
set -eu
. "$SS_TOP/tests/util/golden.sh"
ids() { $PY ids "$G/$1/c3/tokens.i32" "$2" "$3"; }

# Zero state, token ids: c3[0:100] as the query, c3[100:297] as the
# continuation. Token 100 is predicted at position 99: nll[99:296].
ss-score --model "$T1" --no-state --per-token --query-tokens "$(ids t1 0 100)" \
	--continuation-tokens "$(ids t1 100 297)" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 99 296

# Text: c3 cut after c2's 29 bytes, tokenized separately (7 + 290 tokens, the
# same ids as c3 whole). From the zero state (--no-state: an empty stdin is
# an error, see tests/cli/hardening.sh).
head -c 29 "$G/t1/c3/text.txt" >"$d/a.txt"
tail -c +30 "$G/t1/c3/text.txt" >"$d/b.txt"
ss-score --model "$T1" --no-state --query "$(cat "$d/a.txt")" --continuation "$(cat "$d/b.txt")" \
	</dev/null >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 6 296
# A pair from the command line has no id: the state's id is printed once, as "state".
[ "$($PY json-get "$d/s.json" state)" = '"zero"' ] || fail "state id of a single pair"
grep -q '"id"' "$d/s.json" && fail "a single pair printed an id (the state's, twice): $(cat "$d/s.json")"

# From a stored state (c3's first 7 tokens, on stdin), query c3[7:50].
ss-tokenize -q --whole "$d/a.txt" >"$d/a.tok"
ss-encode --model "$T1" "$d/a.tok" >"$d/a.st"
ss-score --model "$T1" --query-tokens "$(ids t1 7 50)" --continuation-tokens "$(ids t1 50 297)" \
	<"$d/a.st" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 49 296
# The zero state scores worse here than the true prefix.
ss-score --model "$T1" --no-state --query-tokens "$(ids t1 7 50)" \
	--continuation-tokens "$(ids t1 50 297)" >"$d/z.json"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a["nll"] == b["nll"])' \
	"$d/s.json" "$d/z.json" || fail "the state made no difference"
# The same state stored as q8: read (dequantized) by ss-score, the mean NLL
# within 0.5% of the f32 state's (issue 16's goal for q8).
ss-encode --model "$T1" --state-dtype q8 "$d/a.tok" >"$d/a8.st"
ss-cat --meta "$d/a8.st" | grep -q '"dtype":"q8"' || fail "q8 state not q8"
ss-score --model "$T1" --state "$d/a8.st" --query-tokens "$(ids t1 7 50)" \
	--continuation-tokens "$(ids t1 50 297)" >"$d/s8.json"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(abs(a["nll"] / b["nll"] - 1) > 0.005)' \
	"$d/s8.json" "$d/s.json" || fail "q8 state: NLL off by more than 0.5%"

# JSONL pairs, every state × every pair, -o.
printf '%s\n' "{\"id\":\"p1\",\"query_tokens\":[$(ids t1 7 50)],\"continuation_tokens\":[$(ids t1 50 297)]}" \
	"{\"id\":\"p2\",\"query\":\" is\",\"continuation\":\" an English\"}" >"$d/pairs.jsonl"
cat "$d/a.st" "$d/a.st" >"$d/aa.st"
ss-score --model "$T1" --state "$d/aa.st" --pairs "$d/pairs.jsonl" -o "$d/p.json"
[ "$(wc -l <"$d/p.json")" -eq 4 ] || fail "--pairs: 2 states x 2 pairs"
$PY nll-eq "$d/p.json" "$G/t1/c3/nll.f32" 49 296
[ "$($PY json-get "$d/p.json" id 3)" = '"p2"' ] || fail "--pairs ids"
[ "$($PY json-get "$d/p.json" n_tokens 3)" = 2 ] || fail "--pairs text tokens"
ss-score --model "$T1" --no-state <"$d/pairs.jsonl" >"$d/p0.json"
[ "$(wc -l <"$d/p0.json")" -eq 2 ] || fail "pairs on stdin"

# Batched (issue 35 §1): up to --batch (state, pair) lines share each forward
# pass. The bytes equal those of one line at a time (--batch 1, 1 thread)
# whatever --batch and --threads: queries of 1 to 100 tokens (segments short
# and long: backend_cpu.c ROWINV_MAX), continuations of 2 to 247 tokens (one
# to four 64-token rounds), 3 states (one q8); lines in state-major order.
printf '%s\n' "{\"id\":\"b1\",\"query_tokens\":[$(ids t1 0 1)],\"continuation_tokens\":[$(ids t1 1 101)]}" \
	"{\"id\":\"b2\",\"query_tokens\":[$(ids t1 0 100)],\"continuation_tokens\":[$(ids t1 100 165)]}" \
	"{\"id\":\"b3\",\"query_tokens\":[$(ids t1 3 6)],\"continuation_tokens\":[$(ids t1 6 70)]}" \
	>>"$d/pairs.jsonl"
cat "$d/a.st" "$d/a8.st" "$d/a.st" >"$d/b.st"
ss-score --model "$T1" --state "$d/b.st" --pairs "$d/pairs.jsonl" --per-token --batch 1 --threads 1 \
	>"$d/b1.json"
[ "$(wc -l <"$d/b1.json")" -eq 15 ] || fail "--batch 1: 3 states x 5 pairs"
for bt in "2 2" "4 1" "7 2" "100 2"; do
	set -- $bt
	ss-score --model "$T1" --state "$d/b.st" --pairs "$d/pairs.jsonl" --per-token --batch $1 \
		--threads $2 >"$d/bn.json"
	cmp -s "$d/b1.json" "$d/bn.json" || fail "--batch $1 --threads $2: differs from --batch 1"
done
$PY nll-eq "$d/bn.json" "$G/t1/c3/nll.f32" 49 296
expect 2 "--batch" ss-score --model "$T1" --no-state --pairs "$d/pairs.jsonl" --batch 0

# Bad input. A state of another model: a generated one of t2's shape.
"$SS_TOP/$SS_BUILD/gen/mkmodel" "$d/t2" --preset t2 --dtype bf16 >/dev/null
ss-tokenize -q --whole "$G/t1/c2/text.txt" | ss-encode --model "$d/t2" >"$d/t2.st"
expect 1 "t2.st: record 0: .*another model" ss-score --model "$T1" --state "$d/t2.st" --query x --continuation y
head -c 3000 "$d/aa.st" >"$d/trunc.st"
expect 1 "trunc.st: record 0 (byte offset 0)" ss-score --model "$T1" --state "$d/trunc.st" --query x --continuation y -o "$d/o.json"
cat "$d/a.st" "$d/trunc.st" >"$d/trunc2.st"
expect 1 "trunc2.st: record 1 (byte offset [1-9]" ss-score --model "$T1" --state "$d/trunc2.st" --query x --continuation y -o "$d/o.json"
[ ! -e "$d/o.json" ] || fail "output left behind"
[ -z "$(ls "$d" | grep tmp || true)" ] || fail "temporary file left behind"
expect 1 "empty query" ss-score --model "$T1" --no-state --query "" --continuation y
expect 1 "line 1: not a JSON object" sh -c 'echo "{bad" | ss-score --model "$1" --no-state' sh "$T1"
expect 1 "nonexistent" ss-score --model "$d/nonexistent" --no-state --query x --continuation y
expect 2 "usage:" ss-score --model "$T1" --bogus
expect 2 "both a query and a continuation" ss-score --model "$T1" --query x
expect 2 "query-tokens" ss-score --model "$T1" --query-tokens 1,x --continuation-tokens 2
ss-score --help | grep -q "^usage: ss-score" || fail "--help"
echo ok
