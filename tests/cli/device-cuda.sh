# The model tools on the GPU (--device cuda) against the golden fixtures at the
# GPU's tolerances (tests/test_cuda_parity.c: states within 1e-4 + 1e-4·|x|,
# NLL within 1e-4), as cli/encode.sh, score.sh and decode.sh check the CPU at
# 1e-5: encode of c1, c2, docB, c4 and c3 in batches of 1 and 8 (c4 crosses a
# 512-token micro-batch), with --weights-dtype bf16 near the f32 states; score
# of c3 from the zero state and from a stored state; greedy decode of the
# golden 17 tokens; with $SS_SHARED, the same for Mamba-1 (golden-mamba1's
# m1). Skipped (77) where there is no CUDA GPU or no plugin.
# Run by tests/run from the repo root.
set -eu
. "$SS_TOP/tests/util/golden.sh"
ids() { $PY ids "$G/t1/c3/tokens.i32" "$1" "$2"; }

ss-tokenize -q --whole "$G/t1/c3/text.txt" >"$d/c3.tok"
if ! ss-encode -v --model "$T1" --device cuda "$d/c3.tok" >"$d/c3.st" 2>"$d/err"; then
	if grep -q -E 'no CUDA GPU|CUDA plugin' "$d/err"; then
		echo "skipped: $(tail -n 1 "$d/err")"
		exit 77
	fi
	cat "$d/err" >&2
	fail "ss-encode --device cuda failed"
fi
grep -q 'device cpu' "$d/err" && fail "--device cuda ran on the CPU: $(cat "$d/err")"
ss-cat --full "$d/c3.st" >"$d/c3.json"
$PY state-eq "$d/c3.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32" 1e-4

for c in c1 c2 docB c4; do ss-tokenize -q --whole "$G/t1/$c/text.txt"; done >"$d/many.tok"
cat "$d/c3.tok" >>"$d/many.tok"
for b in 1 8; do
	ss-encode --model "$T1" --device cuda --batch $b -o "$d/many.st" "$d/many.tok"
	ss-cat --full "$d/many.st" >"$d/many.json"
	i=0
	for c in c1 c2 docB c4 c3; do
		$PY state-eq "$d/many.json" $i "$G/t1/$c/ssm.f32" "$G/t1/$c/conv.f32" "$G/t1/$c/logdecay.f32" 1e-4 ||
			fail "--device cuda --batch $b: record $i ($c)"
		i=$((i + 1))
	done
done
# bf16 weights on the device: the states near f32's (8e-3, as encode.sh's bf16 states).
ss-encode --model "$T1" --device cuda --weights-dtype bf16 "$d/c3.tok" | ss-cat --full >"$d/bf.json"
$PY state-eq "$d/bf.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" - 8e-2 ||
	fail "--device cuda --weights-dtype bf16: states far from f32"
# ... and not f32's: the device ran the weights in bf16, as asked
[ "$($PY json-get "$d/bf.json" ssm)" != "$($PY json-get "$d/c3.json" ssm)" ] ||
	fail "--device cuda --weights-dtype bf16: the same states as f32 weights"

# Score: zero state (c3[0:100] → c3[100:297]), then from c3's first 7 tokens' state.
ss-score --model "$T1" --device cuda --no-state --per-token --query-tokens "$(ids 0 100)" \
	--continuation-tokens "$(ids 100 297)" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 99 296 1e-4
head -c 29 "$G/t1/c3/text.txt" >"$d/a.txt"
ss-tokenize -q --whole "$d/a.txt" | ss-encode --model "$T1" --device cuda >"$d/a.st"
ss-score --model "$T1" --device cuda --query-tokens "$(ids 7 50)" --continuation-tokens "$(ids 50 297)" \
	<"$d/a.st" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/t1/c3/nll.f32" 49 296 1e-4

# Greedy decode from the zero state with all of c3 as the prompt.
want=$(printf '%s %s' "$($PY ids "$G/t1/decode/in_tokens.i32" | tr , ' ')" \
	"$($PY ids "$G/t1/decode/out_tokens.i32" 15)")
got=$(ss-decode --model "$T1" --device cuda --no-state --ids --max-tokens 17 --prompt-tokens "$(ids 0 297)")
[ "$got" = "$want" ] || fail "greedy on the GPU: $got, expected $want"

# Mamba-1 (golden-mamba1's m1, $SS_SHARED only): c3 and docB encoded on the
# GPU equal the golden states, logdecay [L][d_inner][d_state] included; greedy
# decode from c3's state and the zero-state NLL of c3 are golden's.
M1=${SS_SHARED:-}/golden-mamba1
if [ -n "${SS_SHARED:-}" ] && [ -r "$M1/manifest.json" ]; then
	HF1=$M1/models/m1-hf
	ss-tokenize -q --whole "$M1/m1/c3/text.txt" "$M1/m1/docB/text.txt" >"$d/m1.tok"
	ss-encode --model "$HF1" --device cuda -o "$d/m1.st" "$d/m1.tok"
	ss-cat --full "$d/m1.st" >"$d/m1.json"
	$PY state-eq "$d/m1.json" 0 "$M1/m1/c3/ssm.f32" "$M1/m1/c3/conv.f32" "$M1/m1/c3/logdecay.f32" 1e-4
	$PY state-eq "$d/m1.json" 1 "$M1/m1/docB/ssm.f32" "$M1/m1/docB/conv.f32" "$M1/m1/docB/logdecay.f32" 1e-4
	want=$($PY ids "$M1/m1/decode/out_tokens.i32" | tr , ' ')
	got=$(ss-tokenize -q --whole "$M1/m1/c3/text.txt" | ss-encode --model "$HF1" --device cuda |
		ss-decode --model "$HF1" --device cuda --ids --max-tokens 16 \
			--prompt-tokens "$($PY ids "$M1/m1/decode/in_tokens.i32" 0 1)")
	[ "$got" = "$want" ] || fail "m1 greedy on the GPU: $got, expected $want"
	ss-score --model "$HF1" --device cuda --no-state --per-token \
		--query-tokens "$($PY ids "$M1/m1/c3/tokens.i32" 0 100)" \
		--continuation-tokens "$($PY ids "$M1/m1/c3/tokens.i32" 100 297)" >"$d/m1s.json"
	$PY nll-eq "$d/m1s.json" "$M1/m1/c3/nll.f32" 99 296 1e-4
	echo "device-cuda: mamba1 ok"
fi
echo "device-cuda: ok"
