# ss-train --objective birdie: Birdie's objectives and scheduler on a small
# byte-level model (pipelines/byte_tokenizer.py's tokenizer, its sentinels as
# added tokens): every step logs its sequences' configurations, every
# --birdie-every steps the evaluation and the mixture (probabilities summing
# to 1, moving under the reward scheduler, fixed under --birdie-mix fixed,
# only the configurations --birdie-only names),
# a resumed run is bit-identical (weights, optimiser, scheduler state), and
# bad use is refused. Run by tests/run.
set -eu
. "$SS_TOP/tests/util/golden.sh"
MKMODEL=$SS_TOP/$SS_BUILD/gen/mkmodel

python3 "$SS_TOP/pipelines/byte_tokenizer.py" "$d/tok.json"
"$MKMODEL" "$d/m0" --d-model 32 --n-layer 2 --d-state 16 --headdim 16 --expand 2 --ngroups 1 \
	--vocab 266 --pad-multiple 8 --seed 3 >/dev/null
cp "$d/tok.json" "$d/m0/tokenizer.json"
grep -v '^ *$' "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" | head -n 40 >"$d/docs.txt"
ss-tokenize -q -t "$d/tok.json" "$d/docs.txt" >"$d/docs.tok"
O="--threads 1 --seq-len 256 --batch-tokens 512 --lr 3e-3 --warmup 2 --birdie-every 2"

# 8 steps straight == 4, then resume for 4: the same log, bytes and state.
ss-train --objective birdie --model "$d/m0" --data "$d/docs.tok" $O --steps 8 -o "$d/S" >"$d/s.log"
ss-train --objective birdie --model "$d/m0" --data "$d/docs.tok" $O --steps 8 --until 3 -o "$d/H" >"$d/h.log"
ss-train --resume "$d/H" --threads 1 -o "$d/H" >>"$d/h.log"
cmp "$d/s.log" "$d/h.log" || fail "the resumed run logged other steps"
cmp "$d/S/model.safetensors" "$d/H/model.safetensors" || fail "resumed weights differ"
cmp "$d/S/optimizer.safetensors" "$d/H/optimizer.safetensors" || fail "resumed optimiser differs"
cmp "$d/S/trainer_state.json" "$d/H/trainer_state.json" || fail "resumed scheduler state differs"

python3 - "$d/s.log" reward <<'PY' || fail "the reward scheduler's log: $(cat "$d/s.log")"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
assert [s["step"] for s in steps] == list(range(1, 9))
for s in steps:
    assert len(s["objectives"]) == s["seqs"] > 0, s
    assert all(0 <= c < 17 for c in s["objectives"]), s
evals = [s for s in steps if "birdie" in s]
assert [s["step"] for s in evals] == [2, 4, 6, 8], [s["step"] for s in evals]
for s in evals:
    b = s["birdie"]
    assert len(b) == 17 and abs(sum(v["p"] for v in b.values()) - 1) < 1e-6, b
    assert all(v["loss"] > 0 for v in b.values()), b
first, last = evals[0]["birdie"], evals[-1]["birdie"]
# the reward scheduler moves the mixture away from the uniform one of the start
assert any(abs(first[k]["p"] - last[k]["p"]) > 1e-3 for k in first), (first, last)
assert abs(first["ntp"]["p"] - 1 / 7) > 1e-3 or abs(last["ntp"]["p"] - 1 / 7) > 1e-3
PY
grep -q '"birdie"' "$d/S/trainer_state.json" || fail "no scheduler state saved"

# The fixed-ratio mixture: every class 1/7 throughout.
ss-train --objective birdie --birdie-mix fixed --model "$d/m0" --data "$d/docs.tok" $O --steps 4 \
	-o "$d/F" >"$d/f.log"
python3 - "$d/f.log" <<'PY' || fail "--birdie-mix fixed: $(cat "$d/f.log")"
import json, sys
for s in map(json.loads, open(sys.argv[1])):
    if "birdie" in s:
        assert abs(s["birdie"]["ntp"]["p"] - 1 / 7) < 1e-9 and abs(s["birdie"]["copy/short"]["p"] - 1 / 14) < 1e-9, s
PY

# --birdie-only: the configurations named (a class: all of its), nothing else
# drawn, under the scheduler too; kept in the state across a resume.
ss-train --objective birdie --birdie-only copy,deshuffle/50% --model "$d/m0" --data "$d/docs.tok" $O \
	--steps 6 --until 3 -o "$d/C" >"$d/c.log"
ss-train --resume "$d/C" --threads 1 -o "$d/C" >>"$d/c.log"
python3 - "$d/c.log" <<'PY' || fail "--birdie-only: $(cat "$d/c.log")"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
assert len(steps) == 6
names = list(next(s for s in steps if "birdie" in s)["birdie"])
allowed = {names.index(n) for n in ("copy/short", "copy/long", "deshuffle/50%")}
for s in steps:
    assert set(s["objectives"]) <= allowed, s
    for n, v in s.get("birdie", {}).items():
        assert (v["p"] > 0) == (names.index(n) in allowed), (n, v)
PY

# Bad use: a tokenizer without the sentinels (GPT-NeoX's, with t1), options
# of another objective, a damaged scheduler state.
ss-tokenize -q "$d/docs.txt" >"$d/neox.tok"
expect 1 'no token <|copy|>' ss-train --objective birdie --model "$T1" --data "$d/neox.tok" $O \
	--steps 2 -o "$d/X"
[ ! -e "$d/X" ] || fail "a refused run left $d/X"
expect 2 'belong to --objective birdie' ss-train --objective lm --model "$d/m0" --data "$d/docs.tok" \
	--birdie-every 3 --steps 2 -o "$d/X"
expect 2 "birdie-only: 'copy,paste'" ss-train --objective birdie --birdie-only copy,paste \
	--model "$d/m0" --data "$d/docs.tok" --steps 2 -o "$d/X"
expect 2 'birdie-mix' ss-train --objective birdie --birdie-mix best --model "$d/m0" \
	--data "$d/docs.tok" --steps 2 -o "$d/X"
expect 2 'loss-after belongs to lm' ss-train --objective birdie --loss-after x --model "$d/m0" \
	--data "$d/docs.tok" --steps 2 -o "$d/X"
edit() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(s,open(sys.argv[1],"w"))' "$d/H/trainer_state.json" "$1"; }
edit 's["birdie"]["every"]=0'
expect 1 '"every" is 0' ss-train --resume "$d/H" --threads 1 -o "$d/X"
edit 's["birdie"]["every"]=2; s["birdie"]["action"]=s["birdie"]["action"][:3]'
expect 1 '"action" is not an array of 17' ss-train --resume "$d/H" --threads 1 -o "$d/X"
edit 's["birdie"]["action"]=[0]*17; s["birdie"]["only"]=["copy"]'
expect 1 '"only" holds something not a configuration' ss-train --resume "$d/H" --threads 1 -o "$d/X"
expect 1 'seq-len 64 is too short for birdie' ss-train --objective birdie --model "$d/m0" \
	--data "$d/docs.tok" --seq-len 64 --batch-tokens 512 --steps 2 -o "$d/X"
echo "train-birdie: ok"
