# Every tool on golden-mamba1's m1 (Mamba-1, ../shared only): ss-encode's c3
# and docB states (HF and state-spaces layouts) equal the golden ones, logdecay
# [L][d_inner][d_state] included; ss-compose --mode soup of the two is the
# golden composed state S; ss-decode's greedy tokens from c3's stored state
# are the golden decode; ss-score's NLLs are the golden ones, from the zero
# state and from S. Exits 77 "skipped: needs SS_SHARED" without
# $SS_SHARED/golden-mamba1.
set -eu
[ -n "${SS_SHARED:-}" ] && [ -r "$SS_SHARED/golden-mamba1/manifest.json" ] || {
	echo "skipped: needs SS_SHARED (golden-mamba1)"
	exit 77
}
G=$SS_SHARED/golden-mamba1
HF=$G/models/m1-hf
SS=$G/models/m1-ss
PY="python3 $SS_TOP/tests/cli/golden.py"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ids() { $PY ids "$G/m1/$1/tokens.i32" "$2" "$3"; }

# ss-encode: c3 and docB from the zero state, both layouts: the golden states.
ss-tokenize -q --whole "$G/m1/c3/text.txt" "$G/m1/docB/text.txt" >"$d/docs.tok"
ss-encode --model "$HF" "$d/docs.tok" >"$d/docs.st"
ss-cat --full "$d/docs.st" >"$d/docs.json"
ss-encode --model "$SS" --threads 1 "$d/docs.tok" | ss-cat --full >"$d/docs-ss.json"
for f in docs docs-ss; do
	$PY state-eq "$d/$f.json" 0 "$G/m1/c3/ssm.f32" "$G/m1/c3/conv.f32" "$G/m1/c3/logdecay.f32"
	$PY state-eq "$d/$f.json" 1 "$G/m1/docB/ssm.f32" "$G/m1/docB/conv.f32" "$G/m1/docB/logdecay.f32"
done
[ "$($PY json-get "$d/docs.json" arch)" = '"mamba1"' ] || fail "arch is not mamba1"
[ "$($PY json-get "$d/docs.json" fingerprint)" = "$($PY json-get "$d/docs-ss.json" fingerprint)" ] ||
	fail "m1-hf and m1-ss fingerprints differ"
ss-cat "$d/docs.st" | grep -q '"logdecay":{"dtype":"f32","shape":\[2,128,16\]' ||
	fail "ss-cat: logdecay shape is not [2,128,16]"

# ss-compose: the soup (mean ssm, mean conv) of c3 and docB is golden's S.
ss-compose --mode soup --weights "$d/w.json" -o "$d/S.st" "$d/docs.st"
ss-cat --full "$d/S.st" >"$d/S.json"
$PY state-eq "$d/S.json" 0 "$G/m1/compose/S_ssm.f32" "$G/m1/compose/S_conv.f32" -
grep -q '"arch":"mamba1","d_state":16' "$d/w.json" || fail "weights JSON lacks arch/d_state"
grep -q '"weights":\[\[\[\[0.5,0.5\],\[0.5,0.5\]' "$d/w.json" || fail "weights not [L][d][n][2]"

# ss-decode: greedy from c3's stored state = golden decode's 16 tokens.
want=$($PY ids "$G/m1/decode/out_tokens.i32" | tr , ' ')
first=$($PY ids "$G/m1/decode/in_tokens.i32" 0 1)
got=$(ss-tokenize -q --whole "$G/m1/c3/text.txt" | ss-encode --model "$HF" |
	ss-decode --model "$HF" --ids --max-tokens 16 --prompt-tokens "$first")
[ "$got" = "$want" ] || fail "m1 greedy from c3's state: $got, expected $want"

# ss-score: golden NLLs, from the zero state (c3) and from S (the query).
ss-score --model "$SS" --no-state --per-token --query-tokens "$(ids c3 0 100)" \
	--continuation-tokens "$(ids c3 100 297)" >"$d/s.json"
$PY nll-eq "$d/s.json" "$G/m1/c3/nll.f32" 99 296
ss-score --model "$HF" --state "$d/S.st" --per-token --query-tokens "$(ids compose 0 1)" \
	--continuation-tokens "$(ids compose 1 21)" >"$d/q.json"
$PY nll-eq "$d/q.json" "$G/m1/compose/nll.f32" 0 20
