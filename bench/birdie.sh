#!/bin/sh
# bench/birdie.sh — training throughput of ss-train --objective birdie (Birdie's transforms and
# its scheduler's evaluations) beside --objective lm, its peer, on the same random byte-level
# model (the real-text model's shape, pipelines/realtext.mk) and the same documents (WikiText-2
# test, data/), 1 thread each: ROUNDS interleaved rounds (lm, birdie, lm, birdie, ...) of STEPS
# steps each, every round a fresh run from the same model. Prints input tokens/s of each per round
# (from each step's "inputs", lm's from its windows), min and median, and birdie/lm (median of the
# per-round ratios). The wall time includes the model load (the same for both) and, for birdie,
# its evaluations every --birdie-every steps (EVERY, 25). Figures only, never fails on time.
# usage: bench/birdie.sh   environment: ROUNDS (3) STEPS (40) EVERY (25)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SS_BUILD:=build}" "${ROUNDS:=3}" "${STEPS:=40}" "${EVERY:=25}"
PATH=$top/$SS_BUILD/bin:$PATH
mkmodel=$top/$SS_BUILD/gen/mkmodel
[ -x "$mkmodel" ] || { echo "birdie: no $mkmodel (make first)"; exit 1; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
unset SS_MODEL SS_TOKENIZER
echo "machine: $(nproc) cores, load average $(cut -d ' ' -f 1-3 /proc/loadavg) (figures from a loaded machine are not comparable)"
python3 "$top/pipelines/byte_tokenizer.py" "$d/tok.json"
"$mkmodel" "$d/m0" --d-model 128 --n-layer 4 --d-state 64 --headdim 32 --expand 2 --ngroups 1 \
	--vocab 266 --pad-multiple 8 --seed 1 >/dev/null
cp "$d/tok.json" "$d/m0/tokenizer.json"
tr -d '\r' <"$top/data/wikitext-2-raw.test.hf-crlf.raw" | grep -v '^ *$' >"$d/docs.txt"
ss-tokenize -q -t "$d/tok.json" "$d/docs.txt" >"$d/docs.tok"
O="--threads 1 --seq-len 512 --batch-tokens 4096 --batch-seqs 16 --lr 3e-3 --steps $STEPS"
now() { date +%s.%N; }
r=0
while [ $r -lt "$ROUNDS" ]; do
	for obj in lm birdie; do
		t0=$(now)
		ss-train -q --objective $obj --model "$d/m0" --data "$d/docs.tok" $O \
			$([ $obj = birdie ] && echo --birdie-every "$EVERY") -o "$d/out" >"$d/$obj.log"
		t1=$(now)
		python3 - "$d/$obj.log" "$t0" "$t1" "$obj" >>"$d/rates" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
# lm without --loss-after: every input is a counted target ("tokens")
inputs = sum(s["inputs"] if sys.argv[4] == "birdie" else s["tokens"] for s in steps)
print(sys.argv[4], inputs / (float(sys.argv[3]) - float(sys.argv[2])))
PY
	done
	r=$((r + 1))
done
python3 - "$d/rates" <<'PY'
import statistics, sys
rates = {"lm": [], "birdie": []}
for line in open(sys.argv[1]):
    k, v = line.split()
    rates[k].append(float(v))
for k in ("lm", "birdie"):
    print("%-7s input tokens/s: %s  min %.0f  median %.0f" % (k, " ".join("%.0f" % v for v in rates[k]),
          min(rates[k]), statistics.median(rates[k])))
print("birdie / lm: %.3f (median of the rounds' ratios)" %
      statistics.median(b / l for b, l in zip(rates["birdie"], rates["lm"])))
PY
