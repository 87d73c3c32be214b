# The CLI cases that need ../shared: the t1 weights in the state-spaces
# (pickle) layout, t1-ss, and the t2 model (bf16, ngroups 2, untied lm_head)
# against their golden states, NLLs and greedy tokens (tests/fixtures/golden/README.md).
# The core cases, on tests/fixtures, are cli/encode.sh, decode.sh, score.sh.
# Exits 77 "skipped: needs SS_SHARED" without $SS_SHARED/golden.
# Run by tests/run from the repo root.
set -eu
[ -n "${SS_SHARED:-}" ] && [ -r "$SS_SHARED/golden/manifest.json" ] || {
	echo "skipped: needs SS_SHARED (golden t1-ss and t2-hf)"
	exit 77
}
G=$SS_SHARED/golden
. "$SS_TOP/tests/util/golden.sh"
ids() { $PY ids "$G/$1/c3/tokens.i32" "$2" "$3"; }

# ss-encode: c3 from the zero state with t1-ss equals the golden state, and
# both layouts of the same weights have the same fingerprint.
ss-tokenize -q --whole "$G/t1/c3/text.txt" >"$d/c3.tok"
ss-encode --model "$T1" "$d/c3.tok" | ss-cat --full >"$d/c3.json"
SS_MODEL=$G/models/t1-ss ss-encode --threads 1 <"$d/c3.tok" | ss-cat --full >"$d/c3ss.json"
$PY state-eq "$d/c3ss.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32"
[ "$($PY json-get "$d/c3.json" fingerprint)" = "$($PY json-get "$d/c3ss.json" fingerprint)" ] ||
	fail "t1-hf and t1-ss fingerprints differ"
# t1-ss keeps the tokenizer's vocab_size (50277): id 50277 is refused.
if command -v zstd >/dev/null 2>&1; then
	$PY tokens-msgpack "$d/big.mp" big 5 50277 && zstd -q "$d/big.mp" -o "$d/big.tok"
	expect 1 'big.tok: record 0.*"big".*50277' ss-encode --model "$G/models/t1-ss" "$d/big.tok"
fi
# t2: c3's golden state.
ss-tokenize -q --whole "$G/t2/c3/text.txt" | ss-encode --model "$G/models/t2-hf" | ss-cat --full >"$d/t2.json"
$PY state-eq "$d/t2.json" 0 "$G/t2/c3/ssm.f32" "$G/t2/c3/conv.f32" "$G/t2/c3/logdecay.f32"

# ss-decode: the golden greedy decode of t2 (zero state + c3 as the prompt),
# and t1-ss from a stored t1-hf state (c3's first 7 tokens) = t1's golden.
want=$(printf '%s %s' "$($PY ids "$G/t2/decode/in_tokens.i32" | tr , ' ')" \
	"$($PY ids "$G/t2/decode/out_tokens.i32" 15)")
got=$(ss-decode --model "$G/models/t2-hf" --no-state --ids --max-tokens 17 \
	--prompt-tokens "$($PY ids "$G/t2/c3/tokens.i32")")
[ "$got" = "$want" ] || fail "t2 greedy from zero state + c3: $got, expected $want"
want=$(printf '%s %s' "$($PY ids "$G/t1/decode/in_tokens.i32" | tr , ' ')" \
	"$($PY ids "$G/t1/decode/out_tokens.i32" 15)")
head -c 29 "$G/t1/c3/text.txt" >"$d/a.txt"
ss-tokenize -q --whole "$d/a.txt" | ss-encode --model "$T1" >"$d/a.st"
got=$(ss-decode --model "$G/models/t1-ss" --ids --max-tokens 17 \
	--prompt-tokens "$($PY ids "$G/t1/c3/tokens.i32" 7 297)" <"$d/a.st")
[ "$got" = "$want" ] || fail "t1-ss greedy from a stored state: $got, expected $want"

# ss-score: the golden next-token NLLs with t1-ss and t2.
ss-score --model "$G/models/t1-ss" --no-state --query-tokens "$(ids t1 0 100)" \
	--continuation-tokens "$(ids t1 100 297)" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 99 296
ss-score --model "$G/models/t2-hf" --no-state --per-token --query-tokens "$(ids t2 0 250)" \
	--continuation-tokens "$(ids t2 250 297)" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t2/c3/nll.f32" 249 296
echo ok
