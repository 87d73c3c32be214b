# ss-train: lm, bp2c and bptc steps on the t1 model; checkpoints that
# ss-score loads (its NLL is the trainer's loss), bit-identical resumption,
# the composed starting state of bp2c (and bptc's loss equal to it), and bad
# input. Run by tests/run.
set -eu
. "$SS_TOP/tests/util/golden.sh"
num() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[int(sys.argv[3])-1])[sys.argv[2]])' "$@"; }
close() { # A B: relative difference below 1e-5
	python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b) > 1e-5*abs(b))' "$1" "$2" ||
		fail "$3: $1 != $2"
}

# Twelve short documents (one a line) of WikiText-2.
grep -v '^ *$' "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" | head -n 12 >"$d/docs.txt"
ss-tokenize -q "$d/docs.txt" >"$d/docs.tok"
O="--threads 1 --seq-len 32 --batch-tokens 64 --lr 1e-3 --warmup 2"

# N steps straight == N/2, then resume for N/2: the same bytes (weights and
# optimiser), whether the checkpoint is resumed into another directory or
# into itself; also with weights saved in bf16 (the f32 master goes along).
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 6 -o "$d/S" >"$d/s.log"
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 6 --until 3 -o "$d/H" >"$d/h.log"
[ "$(num "$d/h.log" step 3)" = 3 ] || fail "--until 3 ran $(wc -l <"$d/h.log") steps"
ss-train --resume "$d/H" --threads 1 -o "$d/R" >>"$d/h.log"
cmp "$d/s.log" "$d/h.log" || fail "the resumed run logged other steps"
cmp "$d/S/model.safetensors" "$d/R/model.safetensors" || fail "resumed weights differ"
cmp "$d/S/optimizer.safetensors" "$d/R/optimizer.safetensors" || fail "resumed optimiser differs"
ss-train --resume "$d/H" --threads 1 -o "$d/H" >/dev/null
cmp "$d/S/model.safetensors" "$d/H/model.safetensors" || fail "resumed in place: weights differ"
ls "$d" | grep -q 'tmp-\|old-' && fail "temporary directories left: $(ls "$d")"
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 4 --save-dtype bf16 -o "$d/S16" >/dev/null
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 4 --until 2 --save-dtype bf16 -o "$d/H16" >/dev/null
ss-train --resume "$d/H16" --threads 1 -o "$d/H16" >/dev/null
cmp "$d/S16/model.safetensors" "$d/H16/model.safetensors" || fail "bf16: resumed weights differ"
grep -q '"torch_dtype": "bfloat16"' "$d/S16/config.json" || fail "bf16 config: $(cat "$d/S16/config.json")"

# The log is written a line a step: while the run goes on, the file ends
# with a whole line (stdio's 4 KiB blocks would cut one).
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 100000 -o "$d/L" >"$d/l.log" &
pid=$!
for _ in $(seq 600); do [ -s "$d/l.log" ] && break; sleep 0.1; done
size=$(wc -c <"$d/l.log")
kill $pid; wait $pid 2>/dev/null || true
[ "$size" -gt 0 ] || fail "no step logged in 60 s"
[ "$(head -c "$size" "$d/l.log" | tail -c 1 | od -An -c | tr -d ' ')" = '\n' ] ||
	fail "the log's first $size bytes end inside a line"

# --batch-seqs bounds the sequences of a step (the docs' windows would fill 64 tokens with more).
ss-train --objective lm --model "$T1" --data "$d/docs.tok" $O --steps 3 --batch-seqs 1 -o "$d/Q" >"$d/q.log"
grep -v '"seqs":1}' "$d/q.log" && fail "--batch-seqs 1: $(cat "$d/q.log")"
grep -q '"seqs":[2-9]' "$d/s.log" || fail "no step of several sequences: $(cat "$d/s.log")"

# The checkpoint is a model every tool loads: ss-score's NLL of one document
# (its first token the query) is the trainer's loss on it at learning rate 0.
echo "Robert Boulter is an English film, television and theatre actor. He had a guest role in 2000." >"$d/one.txt"
ss-tokenize -q --whole "$d/one.txt" >"$d/one.tok"
ids=$(ss-cat --full "$d/one.tok" | python3 -c 'import json,sys; t=json.load(sys.stdin)["tokens"]; assert 2 < len(t) <= 33, len(t); print(",".join(map(str,t)))')
ss-train --objective lm --model "$d/S" --data "$d/one.tok" --threads 1 --seq-len 32 --batch-tokens 32 \
	--lr 0 --steps 1 -o "$d/Z" >"$d/z.log"
ss-score --model "$d/S" --no-state --query-tokens "${ids%%,*}" --continuation-tokens "${ids#*,}" >"$d/sc.json"
close "$(num "$d/z.log" loss 1)" "$(num "$d/sc.json" nll 1)" "ss-score on the checkpoint vs the trainer's loss"
ss-score --model "$T1" --no-state --query-tokens "${ids%%,*}" --continuation-tokens "${ids#*,}" >"$d/sc0.json"
[ "$(num "$d/sc.json" nll 1)" != "$(num "$d/sc0.json" nll 1)" ] || fail "training changed nothing"
cmp "$d/S/model.safetensors" "$d/Z/model.safetensors" || fail "--lr 0 changed the weights"

# --loss-after TEXT counts only the targets after TEXT's first occurrence: at learning rate 0
# the loss is ss-score's NLL of the rest given the document up to TEXT as the query. A
# document without TEXT counts no target.
sep=$(printf ' an English' | ss-tokenize -q --whole - | ss-cat --full - | python3 -c 'import json,sys; print(",".join(map(str,json.load(sys.stdin)["tokens"])))')
cut=$(python3 -c 'import sys; t=sys.argv[1].split(","); s=sys.argv[2].split(","); print(next(i+len(s) for i in range(len(t)) if t[i:i+len(s)]==s))' "$ids" "$sep")
qa=$(echo "$ids" | cut -d, -f1-"$cut"); ca=$(echo "$ids" | cut -d, -f$((cut + 1))-)
ss-train --objective lm --model "$d/S" --data "$d/one.tok" --threads 1 --seq-len 32 --batch-tokens 32 \
	--lr 0 --steps 1 --loss-after ' an English' -o "$d/LA" >"$d/la.log"
ss-score --model "$d/S" --no-state --query-tokens "$qa" --continuation-tokens "$ca" >"$d/sa.json"
close "$(num "$d/la.log" loss 1)" "$(num "$d/sa.json" nll 1)" "--loss-after: ss-score of the rest vs the trainer's loss"
[ "$(num "$d/la.log" tokens 1)" -eq $(( $(echo "$ca" | tr , '\n' | wc -l) )) ] || fail "--loss-after: $(cat "$d/la.log")"
ss-train --objective lm --model "$d/S" --data "$d/one.tok" --threads 1 --seq-len 32 --batch-tokens 32 \
	--lr 0 --steps 1 --loss-after 'not in the text' -o "$d/LB" >"$d/lb.log"
[ "$(num "$d/lb.log" tokens 1)" = 0 ] || fail "--loss-after, absent text: $(cat "$d/lb.log")"
expect 2 'belongs to lm' ss-train --objective bp2c --model "$T1" --data "$d/docs.tok" --states "$d/docs.tok" \
	--loss-after x -o "$d/X"

# bp2c: the step's loss is ss-score's from the composed state of the first
# k chunks (the most relevant last), k drawn per example and logged.
ss-encode -q --model "$T1" --threads 1 "$d/docs.tok" >"$d/docs.st"
id() { echo "$d/docs.txt:$1"; }
printf '{"query": "Robert Boulter is an English", "continuation": " film, television and theatre actor.", "chunks": ["%s", "%s", "%s"]}\n' \
	"$(id 1)" "$(id 2)" "$(id 3)" >"$d/ex.jsonl"
printf '{"query_tokens": [426, 6911, 378], "continuation_tokens": [3941, 350, 20434, 11], "chunks": ["%s"]}\n' \
	"$(id 4)" >>"$d/ex.jsonl"
B="--threads 1 --batch-tokens 16 --states $d/docs.st --data $d/ex.jsonl"
ss-train --objective bp2c --model "$T1" $B --lr 0 --steps 8 -o "$d/B0" >"$d/b0.log"
n=0
for step in 1 3 5 7; do
	k=$(num "$d/b0.log" k $step | tr -d '[] ')
	set --
	i=$k
	while [ "$i" -gt 0 ]; do echo "$(id $i)" >"$d/id"; ss-encode -q --model "$T1" --threads 1 --ids "$d/id" "$d/docs.tok" >"$d/c$i.st"; set -- "$@" "$d/c$i.st"; i=$((i - 1)); done
	if [ "$k" -eq 0 ]; then
		ss-score --model "$T1" --no-state --query "Robert Boulter is an English" \
			--continuation " film, television and theatre actor." >"$d/bs.json"
	else
		ss-compose --mode picaso-r "$@" | ss-score --model "$T1" --query "Robert Boulter is an English" \
			--continuation " film, television and theatre actor." >"$d/bs.json"
		n=$((n + 1))
	fi
	close "$(num "$d/b0.log" loss $step)" "$(num "$d/bs.json" nll 1)" "bp2c step $step (k $k)"
done
[ "$n" -gt 0 ] || fail "k was 0 in every step: $(cat "$d/b0.log")"
# k is uniform over 0..min(--max-k, chunks): --max-k 0 is the zero state always.
ss-train --objective bp2c --model "$T1" $B --lr 0 --steps 4 --max-k 0 -o "$d/B1" >"$d/b1.log"
grep -v '"k":\[0\]' "$d/b1.log" && fail "--max-k 0 composed chunks"
# bp2c resumes bit for bit too (data position and the RNG of k).
ss-train --objective bp2c --model "$T1" $B --steps 5 -o "$d/BS" >"$d/bs.log"
ss-train --objective bp2c --model "$T1" $B --steps 5 --until 2 -o "$d/BH" >"$d/bh.log"
ss-train --resume "$d/BH" --threads 1 -o "$d/BH" >>"$d/bh.log"
cmp "$d/bs.log" "$d/bh.log" || fail "bp2c: the resumed run logged other steps"
cmp "$d/BS/model.safetensors" "$d/BH/model.safetensors" || fail "bp2c: resumed weights differ"

# bptc: the same examples, each chunk's tokens re-encoded in the step. At --lr 0 its loss is
# bp2c's step for step (the same seed draws the same k); its gradient is not (it also flows
# through the composition into the chunks' encodings) unless no chunk is composed (--max-k 0).
T="--threads 1 --batch-tokens 16 --chunk-tokens $d/docs.tok --data $d/ex.jsonl"
ss-train --objective bptc --model "$T1" $T --lr 0 --steps 8 -o "$d/T0" >"$d/t0.log"
differ=0
for step in 1 2 3 4 5 6 7 8; do
	[ "$(num "$d/t0.log" k $step)" = "$(num "$d/b0.log" k $step)" ] || fail "bptc step $step: another k"
	close "$(num "$d/t0.log" loss $step)" "$(num "$d/b0.log" loss $step)" "bptc vs bp2c loss, step $step"
	[ "$(num "$d/t0.log" k $step)" = "[0]" ] ||
		python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-4 * float(sys.argv[2]))' \
			"$(num "$d/t0.log" grad_norm $step)" "$(num "$d/b0.log" grad_norm $step)" && differ=$((differ + 1))
done
[ "$differ" -gt 0 ] || fail "bptc's gradient is bp2c's in every step with chunks"
ss-train --objective bptc --model "$T1" $T --lr 0 --steps 4 --max-k 0 -o "$d/T1" >"$d/t1.log"
for step in 1 2 3 4; do
	close "$(num "$d/t1.log" grad_norm $step)" "$(num "$d/b1.log" grad_norm $step)" "bptc --max-k 0 gradient, step $step"
done
# bptc resumes bit for bit.
ss-train --objective bptc --model "$T1" $T --steps 5 -o "$d/TS" >"$d/ts.log"
ss-train --objective bptc --model "$T1" $T --steps 5 --until 2 -o "$d/TH" >"$d/th.log"
ss-train --resume "$d/TH" --threads 1 -o "$d/TH" >>"$d/th.log"
cmp "$d/ts.log" "$d/th.log" || fail "bptc: the resumed run logged other steps"
cmp "$d/TS/model.safetensors" "$d/TH/model.safetensors" || fail "bptc: resumed weights differ"
cmp -s "$d/TS/model.safetensors" "$d/BS/model.safetensors" && fail "bptc trained as bp2c"
expect 2 'needs --chunk-tokens' ss-train --objective bptc --model "$T1" --data "$d/ex.jsonl" -o "$d/X"
expect 2 'belongs to bp2c' ss-train --objective bptc --model "$T1" $T --states "$d/docs.st" -o "$d/X"
printf '{"query": "a b", "continuation": "c d", "chunks": ["nope"]}\n' >"$d/bad.jsonl"
expect 1 'bad.jsonl: line 1: chunk "nope" is not in' ss-train --objective bptc --model "$T1" \
	--threads 1 --max-k 1 --seed 3 --chunk-tokens "$d/docs.tok" --data "$d/bad.jsonl" --steps 9 -o "$d/X"
[ ! -e "$d/X" ] || fail "a failed bptc run wrote a checkpoint"

# --save-every: a run that fails at step 4 (its 5th example is bad; examples are read one
# ahead) leaves the checkpoint of step 3, whole, and resuming from it (with the data fixed)
# ends where a run that never failed does.
for i in 1 2 3 4 5 6; do sed -n 1p "$d/ex.jsonl"; done >"$d/six.jsonl"
{ head -n 4 "$d/six.jsonl"; echo '{"query": "x"}'; sed -n 1p "$d/ex.jsonl"; } >"$d/five.jsonl"
E="--threads 1 --batch-tokens 16 --states $d/docs.st --steps 6"
set +e
ss-train --objective bp2c --model "$T1" $E --data "$d/five.jsonl" --save-every 3 -o "$d/F" >/dev/null 2>"$d/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "the bad example: exit $rc"
grep -q 'five.jsonl: line 5: missing "continuation"' "$d/err" || fail "$(cat "$d/err")"
grep -q '"step":	3,' "$d/F/trainer_state.json" || fail "no step-3 checkpoint: $(cat "$d/F/trainer_state.json")"
ls "$d" | grep -q 'tmp-\|old-' && fail "temporary directories left: $(ls "$d")"
ss-train --objective bp2c --model "$T1" $E --data "$d/six.jsonl" -o "$d/G" >"$d/g.log"
ss-train --resume "$d/F" --data "$d/six.jsonl" --threads 1 -o "$d/F" >"$d/f.log"
[ "$(wc -l <"$d/f.log")" -eq 3 ] || fail "resumed from step 3: $(cat "$d/f.log")"
cmp "$d/G/model.safetensors" "$d/F/model.safetensors" || fail "--save-every: resumed weights differ"

# Bad input: one line naming the file and what, exit 1, no checkpoint.
printf '{"query": "a b", "continuation": "c d", "chunks": ["nope"]}\n' >"$d/bad.jsonl"
expect 1 'bad.jsonl: line 1: chunk "nope" is not in' ss-train --objective bp2c --model "$T1" \
	--threads 1 --max-k 1 --seed 3 --states "$d/docs.st" --data "$d/bad.jsonl" --steps 9 -o "$d/X"
[ ! -e "$d/X" ] || fail "a failed run wrote a checkpoint"
printf '{"query": "a b", "chunks": []}\n' >"$d/bad.jsonl"
expect 1 'bad.jsonl: line 1: missing "continuation"' ss-train --objective bp2c --model "$T1" \
	--threads 1 --states "$d/docs.st" --data "$d/bad.jsonl" -o "$d/X"
expect 1 'docs.st: record 0: a ss-states record, expected tokens' ss-train --objective lm \
	--model "$T1" --data "$d/docs.st" -o "$d/X"
ss-encode -q --model "$d/S" --threads 1 "$d/docs.tok" >"$d/other.st"
expect 1 'other.st: record 0: made by model' ss-train --objective bp2c --model "$T1" \
	--threads 1 --states "$d/other.st" --data "$d/ex.jsonl" -o "$d/X"
expect 1 'ex.jsonl: line 1: 13 tokens, more than --batch-tokens 8' ss-train --objective bp2c \
	--model "$T1" --threads 1 --states "$d/docs.st" --data "$d/ex.jsonl" --batch-tokens 8 -o "$d/X"
$PY tokens-msgpack "$d/big.msgpack" big 1 2 60000
zstd -q "$d/big.msgpack" -o "$d/big.tok"
expect 1 'big.tok: record 0: token 2 is 60000, outside the model.s vocabulary' ss-train \
	--objective lm --model "$T1" --threads 1 --data "$d/big.tok" -o "$d/X"
expect 2 'ss-train runs on the CPU' ss-train --objective lm --model "$T1" --data "$d/docs.tok" \
	--device cuda -o "$d/X"
expect 2 'objective' ss-train --objective nope --model "$T1" --data "$d/docs.tok" -o "$d/X"
expect 2 'needs --states' ss-train --objective bp2c --model "$T1" --data "$d/ex.jsonl" -o "$d/X"
expect 2 'trainer_state.json' ss-train --resume "$d/H" --lr 1 -o "$d/X"
expect 2 'less than --seq-len' ss-train --objective lm --model "$T1" --data "$d/docs.tok" \
	--seq-len 64 --batch-tokens 32 -o "$d/X"
[ ! -e "$d/X" ] || fail "a failed run wrote a checkpoint"
