# ss-train --resume of a damaged or hand-edited checkpoint: every field of trainer_state.json out
# of its option's range, and Adam's moments not finite (or v < 0), is one line naming the file and
# the field or tensor, exit 1, nothing written; a step whose weights are not finite writes no
# checkpoint (the last one stays as it was). Run by tests/run.
set -eu
. "$SS_TOP/tests/util/golden.sh"

grep -v '^ *$' "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" | head -n 12 >"$d/docs.txt"
ss-tokenize -q "$d/docs.txt" >"$d/docs.tok"
O="--threads 1 --seq-len 32 --batch-tokens 64"
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 4 --until 2 -o "$d/H" >/dev/null

# edit KEY JSON: $d/X is $d/H with trainer_state.json's KEY set to the JSON value.
edit() {
	rm -rf "$d/X"
	cp -r "$d/H" "$d/X"
	python3 -c 'import json,sys; p=sys.argv[1]; o=json.load(open(p)); o[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(o, open(p, "w"))' \
		"$d/X/trainer_state.json" "$1" "$2"
}
# tensor NAME INDEX VALUE: sets element INDEX (from the end when < 0; "all": every one) of the
# f32 tensor NAME of $d/X/optimizer.safetensors.
tensor() {
	python3 - "$d/X/optimizer.safetensors" "$@" <<'EOF'
import json, struct, sys
path, name, i, val = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
with open(path, 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    t = json.loads(f.read(n))[name]
    assert t['dtype'] == 'F32', t
    a, b = t['data_offsets']
    if i == 'all':
        f.seek(8 + n + a)
        f.write(struct.pack('<f', val) * ((b - a) // 4))
    else:
        i = int(i)
        f.seek(8 + n + (a + 4 * i if i >= 0 else b + 4 * i))
        f.write(struct.pack('<f', val))
EOF
}
resume_fails() { # PATTERN [OPTIONS]: resuming $d/X into $d/Y fails with PATTERN and writes nothing
	pat=$1; shift
	expect 1 "$pat" ss-train --resume "$d/X" --threads 1 "$@" -o "$d/Y"
	[ ! -e "$d/Y" ] || fail "resume $*: wrote $d/Y ($pat)"
}

# Each field out of range: the bounds of its option (step: 0..steps; integers whole).
S='X/trainer_state.json: "'
while read -r key val; do
	edit "$key" "$val"
	resume_fails "$S$key\" is" # "pos" is -100, not an integer in [0, ...]
done <<'EOF'
pos -100
pos -1e8
pos 1.5
step 1e300
step 5
step -1
steps 0
lr -1
lr 1e30
min_lr 11
weight_decay -0.5
clip -1
warmup 0.5
seq_len 0
batch_tokens 1e9
batch_seqs 70000
max_k -1
epoch -1
offset -2
offset 1e300
seed "-1"
rng "12x"
rng 5
mode "sum"
save_dtype "q8"
loss_after 3
EOF
edit batch_tokens 16
resume_fails "$S"'batch_tokens" 16 is less than "seq_len" 32'
edit lr '"1"'
resume_fails "$S"'lr" is not a number'
edit data '""'
resume_fails "$S"'data" is empty'
edit base_fingerprint '""'
resume_fails "$S"'base_fingerprint" is not'
edit states '"x.st"'
resume_fails "$S"'states" belongs to objective bp2c'
edit objective '"bp2c"' # a bp2c checkpoint without its states file
resume_fails 'X/trainer_state.json: objective bp2c without "states"'
edit objective '"bptc"'
resume_fails 'X/trainer_state.json: objective bptc without "chunk_tokens"'
edit step 2
expect 2 'the run in .* is at step 2' ss-train --resume "$d/X" --threads 1 --until 1 -o "$d/Y"
expect 2 'the run in .* is at step 2' ss-train --resume "$d/X" --threads 1 --steps 1 -o "$d/Y"
[ ! -e "$d/Y" ] || fail "a refused resume wrote $d/Y"
# weights are never q8 (a state dtype): --save-dtype q8 is a usage error, as the resumed field is
expect 2 "--save-dtype: 'q8' is not f32, f16 or bf16" ss-train --objective lm --model "$T1" \
	--data "$d/docs.tok" $O --steps 1 --save-dtype q8 -o "$d/Y"
[ ! -e "$d/Y" ] || fail "--save-dtype q8 wrote $d/Y"

# "loss_after" goes along: 4 steps straight == 2, then resumed for 2.
L="--objective lm --model $T1 --data $d/docs.tok $O --steps 4 --loss-after the"
ss-train $L -o "$d/LS" >"$d/ls.log"
ss-train $L --until 2 -o "$d/LH" >"$d/lh.log"
grep -q '"loss_after":	"the"' "$d/LH/trainer_state.json" || fail "$(cat "$d/LH/trainer_state.json")"
ss-train --resume "$d/LH" --threads 1 -o "$d/LH" >>"$d/lh.log"
cmp "$d/ls.log" "$d/lh.log" || fail "--loss-after: the resumed run logged other steps"
cmp "$d/LS/model.safetensors" "$d/LH/model.safetensors" || fail "--loss-after: resumed weights differ"

# trainer_state.json keeps every bit of the lr (cJSON's printing alone stops at 15 digits when
# they read back within a relative epsilon; found by tests/fuzz/trainstate.c), and the run resumes
# bit for bit.
L="--objective lm --model $T1 --data $d/docs.tok $O --steps 4 --lr 0.00088888888888888888"
ss-train $L -o "$d/RS" >"$d/rs.log"
ss-train $L --until 2 -o "$d/RH" >"$d/rh.log"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["lr"]; sys.exit(v != 0.00088888888888888888)' \
	"$d/RH/trainer_state.json" || fail "lr saved as $(grep '"lr"' "$d/RH/trainer_state.json")"
ss-train --resume "$d/RH" --threads 1 -o "$d/RH" >>"$d/rh.log"
cmp "$d/RS/model.safetensors" "$d/RH/model.safetensors" || fail "lr of 17 digits: resumed weights differ"

# Adam's moments: m finite, v finite and >= 0, named by the tensor they belong to.
edit step 2
tensor v all -1 # the one step's update made every weight NaN, and they were saved
resume_fails 'X/optimizer.safetensors: "v": backbone.embeddings.weight holds -1' --until 3
edit step 2
tensor m -1 nan
n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"] - 1)' "$d/H/config.json")
resume_fails "X/optimizer.safetensors: \"m\": backbone.layers.$n.mixer.out_proj.weight holds nan"
edit step 2
tensor v 0 inf
resume_fails 'X/optimizer.safetensors: "v": backbone.embeddings.weight holds inf'

# A finite m of 3e38 over v = 0 makes an update past FLT_MAX: the step's weights are not finite,
# and neither the final checkpoint nor a --save-every one is written over the last good one.
edit step 2
tensor m 0 3e38
tensor v 0 0
cp -r "$d/X" "$d/X0"
expect 1 'X: step 3: backbone.embeddings.weight holds -*inf; the checkpoint is not written' \
	ss-train --resume "$d/X" --threads 1 --until 3 -o "$d/X"
for f in model.safetensors optimizer.safetensors trainer_state.json config.json; do
	cmp "$d/X0/$f" "$d/X/$f" || fail "final save: $f changed"
done
expect 1 'X: step 3: backbone.embeddings.weight holds -*inf; the checkpoint is not written' \
	ss-train --resume "$d/X" --threads 1 --save-every 1 -o "$d/X"
for f in model.safetensors optimizer.safetensors trainer_state.json config.json; do
	cmp "$d/X0/$f" "$d/X/$f" || fail "--save-every: $f changed"
done
ls "$d" | grep -q 'tmp-\|old-' && fail "temporary directories left: $(ls "$d")"

# Messages name what is wrong (issue 32 item 12): a missing --data or --states by its path, and
# states whose dims differ from the model's under the model's own fingerprint by the dims (here
# headdim 16 -> 8 and d_state 16 -> 32, the arrays' sizes unchanged), not by the fingerprint.
printf '{"chunks": ["a.txt:1"], "query": "the", "continuation": " fox"}\n' >"$d/ex.jsonl"
expect 1 "^ss-train: $d/nope.tok: No such file" \
	ss-train --objective lm --model "$T1" --data "$d/nope.tok" $O --steps 1 -o "$d/M1"
expect 1 "^ss-train: $d/nope.states: No such file" \
	ss-train --objective bp2c --model "$T1" --data "$d/ex.jsonl" --states "$d/nope.states" $O --steps 1 -o "$d/M2"
printf 'the fox\n' >"$d/a.txt"
ss-tokenize -q "$d/a.txt" | ss-encode -q --model "$T1" -o "$d/a.states"
zstd -qdc "$d/a.states" | python3 -c '
import sys
b = sys.stdin.buffer.read()
for k, v in ((b"headdim", 8), (b"d_state", 32)):
    old = bytes([0xa0 | len(k)]) + k + bytes([16])
    assert b.count(old) == 1, k
    b = b.replace(old, old[:-1] + bytes([v]))
sys.stdout.buffer.write(b)' >"$d/dims.mp"
zstd -q "$d/dims.mp" -o "$d/dims.states" # from a file: the frame declares its size
expect 1 "dims.states: record 0: not the dims of the model trained (headdim 8 vs 16)" \
	ss-train --objective bp2c --model "$T1" --data "$d/ex.jsonl" --states "$d/dims.states" $O --steps 1 -o "$d/M3"
for x in M1 M2 M3; do [ ! -e "$d/$x" ] || fail "a refused run wrote $x"; done
exit 0
