# ss-encode against the independent golden states (tests/fixtures/golden/README.md: llama.cpp
# final conv/ssm, numpy logdecay), batching, --concat, --from-state,
# --state-dtype, --text, the default model, and bad input. Run by tests/run
# from the repo root. The t1-ss and t2 cases are in cli/shared.sh.
set -eu
. "$SS_TOP/tests/util/golden.sh"

# c3 (297 tokens) from the zero state.
ss-tokenize -q --whole "$G/t1/c3/text.txt" >"$d/c3.tok"
ss-cat --full "$d/c3.tok" >"$d/c3.tok.json"
$PY tokens-eq "$d/c3.tok.json" "$G/t1/c3/tokens.i32"
ss-encode --model "$T1" --threads 2 "$d/c3.tok" >"$d/c3.st"
ss-cat --full "$d/c3.st" >"$d/c3.json"
$PY state-eq "$d/c3.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32"
[ "$($PY json-get "$d/c3.json" n_tokens)" = 297 ] || fail "n_tokens"
# $SS_MODEL, and with neither it nor --model the default model (data/model, the bundled
# byte-level model) of the source tree this program was built in, with its own tokenizer.
SS_MODEL=$T1 ss-encode --threads 1 <"$d/c3.tok" | ss-cat --full >"$d/c3env.json"
$PY state-eq "$d/c3env.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32"
env -u SS_MODEL ss-tokenize -q --whole "$G/t1/c3/text.txt" >"$d/c3b.tok"
env -u SS_MODEL ss-encode --threads 1 <"$d/c3b.tok" | ss-cat >"$d/c3def.json"
ss-encode --model "$SS_TOP/data/model" --threads 1 <"$d/c3b.tok" | ss-cat >"$d/c3dm.json"
[ "$($PY json-get "$d/c3dm.json" fingerprint)" = "$($PY json-get "$d/c3def.json" fingerprint)" ] &&
	[ "$($PY json-get "$d/c3def.json" n_tokens)" = "$(wc -c <"$G/t1/c3/text.txt")" ] ||
	fail "the default model is not data/model with its byte-level tokenizer"

# Several documents, batched or not, each equal to its own golden state;
# c4 (682 tokens) crosses a 512-token micro-batch.
for c in c1 c2 docB c4; do ss-tokenize -q --whole "$G/t1/$c/text.txt"; done >"$d/many.tok"
cat "$d/c3.tok" >>"$d/many.tok"
for b in 1 3 8; do
	ss-encode --model "$T1" --batch $b -o "$d/many.st" "$d/many.tok"
	ss-cat --full "$d/many.st" >"$d/many.json"
	[ "$(wc -l <"$d/many.json")" -eq 5 ] || fail "--batch $b: not 5 records"
	i=0
	for c in c1 c2 docB c4 c3; do
		$PY state-eq "$d/many.json" $i "$G/t1/$c/ssm.f32" "$G/t1/$c/conv.f32" "$G/t1/$c/logdecay.f32" >/dev/null ||
			fail "--batch $b: record $i ($c)"
		i=$((i + 1))
	done
done

# q8_0 matrices (ss_gemm_q8_0 in prefill): the same bytes whatever --batch,
# --threads and the kernel ($SS_GEMM=c: the portable one), record for record.
ss-encode --model "$T1" --weights-dtype q8_0 --batch 8 --threads 2 -o "$d/q8a.st" "$d/many.tok"
SS_GEMM=c ss-encode --model "$T1" --weights-dtype q8_0 --batch 1 --threads 1 -o "$d/q8b.st" "$d/many.tok"
cmp -s "$d/q8a.st" "$d/q8b.st" || fail "q8_0: --batch 8 --threads 2 differs from --batch 1 --threads 1, SS_GEMM=c"
[ "$(ss-cat "$d/q8a.st" | wc -l)" -eq 5 ] || fail "q8_0: not 5 records"

# --concat: c3 cut into 100-token chunks, concatenated again, is c3.
ss-tokenize -q --whole --chunk 100 "$G/t1/c3/text.txt" >"$d/chunks.tok"
ss-encode --model "$T1" --concat "$d/chunks.tok" | ss-cat --full >"$d/cat.json"
$PY state-eq "$d/cat.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32"
case $($PY json-get "$d/cat.json" id) in '"concat('*'#0,'*'#1,'*'#2)"') ;; *) fail "--concat id" ;; esac
ss-encode --model "$T1" --concat --id joined "$d/chunks.tok" | ss-cat >"$d/cat2.json"
[ "$($PY json-get "$d/cat2.json" id)" = '"joined"' ] || fail "--id"

# --from-state: c2's text (c3's first 29 bytes) stored, then the rest of c3 from it.
head -c 29 "$G/t1/c3/text.txt" >"$d/a.txt"
tail -c +30 "$G/t1/c3/text.txt" >"$d/b.txt"
ss-tokenize -q --whole "$d/a.txt" >"$d/a.tok"
ss-tokenize -q --whole "$d/b.txt" >"$d/b.tok"
ss-encode --model "$T1" "$d/a.tok" >"$d/a.st"
ss-cat --full "$d/a.st" >"$d/a.json"
$PY state-eq "$d/a.json" 0 "$G/t1/c2/ssm.f32" "$G/t1/c2/conv.f32" "$G/t1/c2/logdecay.f32" >/dev/null
ss-encode --model "$T1" --from-state "$d/a.st" "$d/b.tok" | ss-cat --full >"$d/ab.json"
$PY state-eq "$d/ab.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" "$G/t1/c3/logdecay.f32"
[ "$($PY json-get "$d/ab.json" n_tokens)" = 297 ] || fail "--from-state n_tokens"

# --state-dtype: bf16 storage keeps 8 bits of mantissa.
ss-encode --model "$T1" --state-dtype bf16 "$d/c3.tok" | ss-cat --full >"$d/bf.json"
[ "$($PY json-get "$d/bf.json" dtype)" = '"bf16"' ] || fail "dtype bf16"
$PY state-eq "$d/bf.json" 0 "$G/t1/c3/ssm.f32" "$G/t1/c3/conv.f32" - 8e-3 >/dev/null

# --text: one document per line.
printf '%s\n\n' "$(cat "$d/a.txt")" >"$d/lines.txt"
ss-encode --model "$T1" --text "$d/lines.txt" | ss-cat --full >"$d/text.json"
[ "$(wc -l <"$d/text.json")" -eq 1 ] || fail "--text: empty line not skipped"
$PY state-eq "$d/text.json" 0 "$G/t1/c2/ssm.f32" "$G/t1/c2/conv.f32" >/dev/null

# An empty document: the zero state with n_tokens 0; an id outside the
# vocabulary is refused. Records written by hand (needs the zstd program).
if command -v zstd >/dev/null 2>&1; then
	$PY tokens-msgpack "$d/e.mp" empty && zstd -q "$d/e.mp" -o "$d/empty.tok"
	ss-encode --model "$T1" "$d/empty.tok" | ss-cat >"$d/empty.json"
	[ "$($PY json-get "$d/empty.json" n_tokens)" = 0 ] || fail "empty n_tokens"
	$PY json-get "$d/empty.json" ssm | grep -q '"min": 0, "max": 0,' || fail "empty document: ssm not zero"
	$PY tokens-msgpack "$d/big.mp" big 5 50288 && zstd -q "$d/big.mp" -o "$d/big.tok"
	expect 1 'big.tok: record 0.*"big".*50288' ss-encode --model "$T1" "$d/big.tok"
	rm -f "$d/e.mp" "$d/big.mp"
fi

# Bad input. A state of another model: a generated one of t2's shape.
"$SS_TOP/$SS_BUILD/gen/mkmodel" "$d/t2" --preset t2 --dtype bf16 >/dev/null
ss-tokenize -q --whole "$G/t1/c2/text.txt" | ss-encode --model "$d/t2" >"$d/t2.st"
fp=$($PY json-get "$d/c3.json" fingerprint | tr -d '"')
expect 1 "t2.st: .*another model.*$fp" ss-encode --model "$T1" --from-state "$d/t2.st" "$d/b.tok"
head -c 3000 "$d/c3.st" >"$d/trunc.st"
expect 1 "trunc.st: record 0.*offset" ss-encode --model "$T1" --from-state "$d/trunc.st" -o "$d/o.st" "$d/b.tok"
head -c 100 "$d/many.tok" >"$d/trunc.tok"
cat "$d/c3.tok" "$d/trunc.tok" >"$d/trunc2.tok"
expect 1 "trunc2.tok: record 1.*offset" ss-encode --model "$T1" -o "$d/o.st" "$d/trunc2.tok"
[ ! -e "$d/o.st" ] || fail "output left behind after a failed run"
# The same on a pipe, a document a batch: record 0 goes to the writer thread while record
# 1 is read; the run that dies then still writes record 0, whole (the thread finishes it).
set +e; ss-encode --model "$T1" --batch 1 "$d/trunc2.tok" >"$d/pipe.st" 2>"$d/err"; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "trunc2.tok: record 1" "$d/err" || fail "pipe: exit $rc: $(cat "$d/err")"
ss-cat "$d/pipe.st" >"$d/pipe.json" || fail "pipe: record 0 not whole"
[ "$(wc -l <"$d/pipe.json")" -eq 1 ] || fail "pipe: $(wc -l <"$d/pipe.json") records, not 1"
# A state the records cannot hold, found by the writer thread (a starting state of 1e30 in
# its last ssm element, beyond f16 after any decay), stops the run in one line naming the
# document, with no output file, whichever batch it is in.
ss-cat --export llama-seq --at 0 -o "$d/a.blob" "$d/a.st"
python3 -c 'import struct, sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-4:] = struct.pack("<f", 1e30); open(sys.argv[1], "wb").write(b)' "$d/a.blob"
ss-cat --import llama-seq --like "$d/a.st" -o "$d/huge.st" "$d/a.blob"
rm "$d/a.blob"
cat "$d/c3.tok" "$d/b.tok" "$d/c3.tok" >"$d/three.tok"
for b in 1 3; do
	expect 1 "o.st: document .*beyond f16's range: not written" \
		ss-encode --model "$T1" --from-state "$d/huge.st" --state-dtype f16 --batch $b -o "$d/o.st" "$d/three.tok"
	[ ! -e "$d/o.st" ] || fail "output left behind after a state the records cannot hold"
done
[ -z "$(ls "$d" | grep -v '\.\(tok\|st\|json\|txt\)$' | grep -v '^out$\|^err$\|^t2$' || true)" ] || fail "temporary file left behind: $(ls "$d")"
expect 1 "nonexistent" ss-encode --model "$d/nonexistent" "$d/c3.tok"
expect 1 "not a token record" ss-encode --model "$T1" "$d/c3.st"
expect 2 "usage:" ss-encode --model "$T1" --bogus
expect 2 "state-dtype" ss-encode --model "$T1" --state-dtype f64
# No model anywhere: the program copied out of its build tree (unless a default model is
# installed in the DATADIR its --help names).
cp "$(command -v ss-encode)" "$d/ss-encode"
datadir=$(ss-encode --help | sed -n 's|^  model      --model DIR, \$SS_MODEL, \(.*\)/model,$|\1|p')
[ -n "$datadir" ] || fail "--help does not state the model lookup"
if [ ! -e "$datadir/model/config.json" ]; then
	expect 2 "no model: use --model DIR or set SS_MODEL" env -u SS_MODEL "$d/ss-encode" "$d/c3.tok"
fi
rm -f "$d/ss-encode"
ss-encode --help | grep -q "^usage: ss-encode" || fail "--help"
echo ok
