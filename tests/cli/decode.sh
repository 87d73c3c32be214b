# ss-decode against the golden greedy decode (golden/t*/decode: llama.cpp from
# c3's state; the 17 generated tokens are in_tokens[0..15], out_tokens[15]),
# from the zero state and from a stored state, text/ids/JSONL output, seeded
# sampling, and bad input. Run by tests/run from the repo root. The t1-ss and
# t2 cases are in cli/shared.sh.
set -eu
. "$SS_TOP/tests/util/golden.sh"
want=$(printf '%s %s' "$($PY ids "$G/t1/decode/in_tokens.i32" | tr , ' ')" \
	"$($PY ids "$G/t1/decode/out_tokens.i32" 15)")
# A state holds no logits: start from the zero state with all of c3 as the
# prompt, so the first token comes from c3's last position.
got=$(ss-decode --model "$T1" --no-state --ids --max-tokens 17 \
	--prompt-tokens "$($PY ids "$G/t1/c3/tokens.i32")")
[ "$got" = "$want" ] || fail "t1 greedy from zero state + c3: $got, expected $want"

# From a stored state: c3's first 29 bytes (7 tokens) encoded, c3[7:] as the
# prompt, the state on stdin; no --model: the model of $SS_MODEL (t1, set by tests/run).
head -c 29 "$G/t1/c3/text.txt" >"$d/a.txt"
ss-tokenize -q --whole "$d/a.txt" | ss-encode --model "$T1" >"$d/a.st"
got=$(ss-decode --ids --max-tokens 17 \
	--prompt-tokens "$($PY ids "$G/t1/c3/tokens.i32" 7 297)" <"$d/a.st")
[ "$got" = "$want" ] || fail "greedy from a stored state: $got, expected $want"

# Text: the prompt tokenized from c3's text; JSONL carries text and tokens,
# and the streamed text equals the JSONL text.
tail -c +30 "$G/t1/c3/text.txt" >"$d/b.txt"
ss-decode --model "$T1" --state "$d/a.st" --prompt-file "$d/b.txt" --max-tokens 17 --jsonl >"$d/j.json"
[ "$($PY json-get "$d/j.json" tokens | tr -d '[] ' | tr , ' ')" = "$want" ] || fail "--jsonl tokens"
ss-decode --model "$T1" --state "$d/a.st" --prompt-file "$d/b.txt" --max-tokens 17 >"$d/t.txt"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["text"]; s=open(sys.argv[2], encoding="utf-8", newline="").read(); sys.exit(s != t + "\n")' \
	"$d/j.json" "$d/t.txt" || fail "streamed text differs from the JSONL text"
# --prompt is the same prompt as --prompt-file.
ss-decode --model "$T1" --state "$d/a.st" --prompt "$(cat "$d/b.txt")" --max-tokens 17 --ids >"$d/i.txt"
[ "$(cat "$d/i.txt")" = "$want" ] || fail "--prompt"
# One output per input state.
cat "$d/a.st" "$d/a.st" | ss-decode --model "$T1" --prompt-file "$d/b.txt" --max-tokens 3 --jsonl -o "$d/two.json"
[ "$(wc -l <"$d/two.json")" -eq 2 ] || fail "--jsonl: one line per state"
case $($PY json-get "$d/two.json" id 1) in *'/a.txt"') ;; *) fail "--jsonl id" ;; esac

# Sampling: a seed fixes the output; top-k 1 and a tiny top-p are greedy.
s1=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 12 --temperature 1 --seed 7)
s2=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 12 --temperature 1 --seed 7)
s3=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 12 --temperature 1 --seed 8)
[ "$s1" = "$s2" ] || fail "same seed, different tokens"
[ "$s1" != "$s3" ] || fail "different seeds, same tokens"
[ "$(echo "$s1" | wc -w)" -eq 12 ] || fail "--max-tokens"
g=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 8)
k1=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 8 --temperature 2 --top-k 1 --seed 1)
p0=$(ss-decode --model "$T1" --no-state --prompt-tokens 6911,378 --ids --max-tokens 8 --temperature 2 --top-p 1e-9 --seed 1)
[ "$g" = "$k1" ] || fail "--top-k 1 is not greedy"
[ "$g" = "$p0" ] || fail "--top-p 1e-9 is not greedy"
# --max-tokens 0 generates nothing.
[ -z "$(ss-decode --model "$T1" --no-state --prompt-tokens 1 --ids --max-tokens 0)" ] || fail "--max-tokens 0"

# Bad input. A state of another model: a generated one of t2's shape.
"$SS_TOP/$SS_BUILD/gen/mkmodel" "$d/t2" --preset t2 --dtype bf16 >/dev/null
ss-tokenize -q --whole "$G/t1/c2/text.txt" | ss-encode --model "$d/t2" >"$d/t2.st"
expect 1 "t2.st: record 0: .*another model" ss-decode --model "$T1" --state "$d/t2.st" --prompt-tokens 1
head -c 3000 "$d/a.st" >"$d/trunc.st"
expect 1 "trunc.st: record 0 (byte offset 0)" ss-decode --model "$T1" --state "$d/trunc.st" --prompt-tokens 1 -o "$d/o.txt"
[ ! -e "$d/o.txt" ] || fail "output left behind"
[ -z "$(ls "$d" | grep tmp || true)" ] || fail "temporary file left behind"
expect 1 "empty prompt" ss-decode --model "$T1" --no-state --prompt ""
expect 1 "outside the model's vocabulary" ss-decode --model "$T1" --no-state --prompt-tokens 99999999
expect 1 "nonexistent" ss-decode --model "$d/nonexistent" --no-state --prompt-tokens 1
expect 2 "usage:" ss-decode --model "$T1" --bogus
expect 2 "one prompt" ss-decode --model "$T1" --no-state
expect 2 "top-p" ss-decode --model "$T1" --prompt-tokens 1 --temperature 1 --top-p 0
ss-decode --help | grep -q "^usage: ss-decode" || fail "--help"

# --weights-dtype: a bad dtype is a usage error; states made with bf16
# matrices carry the checkpoint's fingerprint, so an f32 run takes them.
expect 2 "weights-dtype" ss-decode --model "$T1" --no-state --prompt-tokens 1 --weights-dtype f8
expect 2 "weights-dtype" ss-decode --model "$T1" --no-state --prompt-tokens 1 --weights-dtype q8 # a state dtype
head -c 29 "$G/t1/c3/text.txt" | ss-tokenize -q --whole - |
	ss-encode --model "$T1" --weights-dtype bf16 >"$d/a16.st"
ss-decode --model "$T1" --state "$d/a16.st" --weights-dtype f32 --ids --max-tokens 2 \
	--prompt-tokens 5 >/dev/null || fail "a bf16-made state refused by an f32 run"
# A state stored as q8 decodes (dequantized on read): on t1 the same greedy tokens as from f32.
head -c 29 "$G/t1/c3/text.txt" | ss-tokenize -q --whole - >"$d/a.tok"
ss-encode --model "$T1" "$d/a.tok" >"$d/a32.st"
ss-encode --model "$T1" --state-dtype q8 "$d/a.tok" >"$d/a8.st"
ss-decode --model "$T1" --state "$d/a32.st" --ids --max-tokens 8 --prompt-tokens 5 >"$d/g32" &&
ss-decode --model "$T1" --state "$d/a8.st" --ids --max-tokens 8 --prompt-tokens 5 >"$d/g8" ||
	fail "a q8 state refused by ss-decode"
cmp -s "$d/g32" "$d/g8" || fail "q8 state: greedy tokens differ from f32's"
echo ok
