# ss-decode's generation options as llama.cpp and HF generate() users know
# them: --temperature 0 is greedy (a seed is then ignored), a filter without
# --temperature implies T = 1, --min-p, --repeat-penalty/--repeat-last-n,
# --stop, -n/--n-predict, seeds fixed per output, and --prompts (a JSONL batch
# in one model load). The sampler's arithmetic is tests/test_sample.c's; this
# checks the wiring on the t1 model. Run by tests/run from the repo root.
set -eu
. "$SS_TOP/tests/util/golden.sh"
dec() { ss-decode --model "$T1" --no-state "$@" </dev/null; }
P=6911,378

# --temperature 0 is greedy, with or without a seed or filters; --greedy too.
g=$(dec --prompt-tokens $P --ids --max-tokens 12)
[ "$(dec --prompt-tokens $P --ids --max-tokens 12 --temperature 0 --seed 5)" = "$g" ] || fail "--temperature 0 --seed"
[ "$(dec --prompt-tokens $P --ids --max-tokens 12 --temperature 0 --top-k 40 --min-p 0.5)" = "$g" ] ||
	fail "--temperature 0 with filters"
[ "$(dec --prompt-tokens $P --ids --max-tokens 12 --greedy --seed 9)" = "$g" ] || fail "--greedy --seed"
[ -z "$(dec --prompt-tokens $P --max-tokens 1 --temperature 0 --seed 5 2>&1 >/dev/null)" ] ||
	fail "greedy with a seed is not quiet"
expect 2 "excludes" dec --prompt-tokens $P --greedy --temperature 0.5

# -n and --n-predict are --max-tokens.
[ "$(dec --prompt-tokens $P --ids --n-predict 7 | wc -w)" -eq 7 ] || fail "--n-predict"
[ "$(dec --prompt-tokens $P --ids -n 5 | wc -w)" -eq 5 ] || fail "-n"
# llama.cpp's short names: -p, -f, -s.
[ "$(dec -p "The cat" --ids -n 6)" = "$(dec --prompt "The cat" --ids -n 6)" ] || fail "-p"
printf 'The cat' >"$d/prompt.txt"
[ "$(dec -f "$d/prompt.txt" --ids -n 6)" = "$(dec --prompt "The cat" --ids -n 6)" ] || fail "-f"
[ "$(dec --prompt-tokens $P --ids -n 12 --top-k 50 -s 3)" = "$(dec --prompt-tokens $P --ids -n 12 --top-k 50 --seed 3)" ] ||
	fail "-s"

# A filter without --temperature samples at T = 1 (as HF generate()).
k=$(dec --prompt-tokens $P --ids -n 12 --top-k 50 --seed 3)
[ "$k" = "$(dec --prompt-tokens $P --ids -n 12 --top-k 50 --seed 3 --temperature 1)" ] ||
	fail "--top-k alone is not T = 1"
[ "$k" != "$g" ] || fail "--top-k alone is greedy"
[ "$(dec --prompt-tokens $P --ids -n 12 --temp 1 --top-k 50 --seed 3)" = "$k" ] || fail "--temp"
[ "$(dec --prompt-tokens $P --ids -n 12 --top-p 0.9 --seed 3)" = \
  "$(dec --prompt-tokens $P --ids -n 12 --top-p 0.9 --seed 3 --temperature 1)" ] ||
	fail "--top-p alone is not T = 1"

# --min-p 1 keeps only the most likely token: greedy at any temperature; a
# small min-p at T = 1 differs from it, and is fixed by its seed.
[ "$(dec --prompt-tokens $P --ids -n 12 --temperature 5 --min-p 1 --seed 4)" = "$g" ] ||
	fail "--min-p 1 is not greedy"
m1=$(dec --prompt-tokens $P --ids -n 12 --min-p 0.001 --seed 4)
[ "$m1" != "$g" ] || fail "--min-p 0.001 is greedy"
[ "$m1" = "$(dec --prompt-tokens $P --ids -n 12 --min-p 0.001 --seed 4)" ] || fail "--min-p seed"
expect 2 "min-p" dec --prompt-tokens $P --min-p 1.5

# Repeat penalty over prompt + output. A penalty below 1 makes repeated ids
# more likely: over the whole sequence (-1) every id then comes from the
# prompt or the output before it; over the last 5 the first comes from the
# prompt's last 5; window 0 or penalty 1 is greedy.
L=$(seq 100 3 250 | paste -sd, -)
gl=$(dec --prompt-tokens "$L" --ids -n 10)
r=$(dec --prompt-tokens "$L" --ids -n 10 --repeat-penalty 0.001 --repeat-last-n -1)
[ "$r" != "$gl" ] || fail "--repeat-penalty changed nothing"
seen=" $(echo "$L" | tr , ' ') "
for t in $r; do
	case $seen in *" $t "*) ;; *) fail "--repeat-last-n -1: $t is not among the earlier ids" ;; esac
	seen="$seen$t "
done
f=$(dec --prompt-tokens "$L" --ids -n 1 --repeat-penalty 0.001 --repeat-last-n 5)
case " 238 241 244 247 250 " in *" $f "*) ;; *) fail "--repeat-last-n 5: first token $f" ;; esac
[ "$(dec --prompt-tokens "$L" --ids -n 10 --repeat-penalty 0.001 --repeat-last-n 0)" = "$gl" ] ||
	fail "--repeat-last-n 0 is not off"
[ "$(dec --prompt-tokens "$L" --ids -n 10 --repeat-penalty 1)" = "$gl" ] || fail "--repeat-penalty 1"
expect 2 "repeat-penalty" dec --prompt-tokens $P --repeat-penalty 0
expect 2 "repeat-last-n" dec --prompt-tokens $P --repeat-last-n -2

# --stop: the text up to the stop string, which may span tokens (greedy from
# " Robert Boulter is" on t1: " Rescue" "as" "ider" "koti" " believes" ...);
# JSONL says why it stopped and keeps every generated token.
R=' Robert Boulter is'
full=$(dec --prompt "$R" -n 30)
[ "$(dec --prompt "$R" -n 30 --stop 'koti bel')" = ' Rescueasider' ] || fail "--stop across tokens"
[ "$(dec --prompt "$R" -n 30 --stop nomatch --stop 'ider')" = ' Rescueas' ] || fail "--stop twice"
[ "$(dec --prompt "$R" -n 30 --stop 'zz')" = "$full" ] || fail "--stop that never occurs"
dec --prompt "$R" -n 30 --stop 'koti bel' --jsonl >"$d/s.json"
python3 - "$d/s.json" <<'PY' || fail "--stop --jsonl"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["text"] == " Rescueasider" and o["finish_reason"] == "stop", o
assert len(o["tokens"]) == 5, o  # the 5th, " believes", completed the stop string
PY
dec --prompt "$R" -n 3 --jsonl | grep -q '"finish_reason":"length"' || fail "finish_reason length"
expect 2 "empty" dec --prompt "$R" --stop ''

# A seed fixes each output: two copies of a state give the same sample.
printf ' Robert Boulter is an English actor .' >"$d/doc.txt"
ss-tokenize -q --whole "$d/doc.txt" | ss-encode --model "$T1" >"$d/a.st"
cat "$d/a.st" "$d/a.st" >"$d/aa.st"
ss-decode --model "$T1" --state "$d/aa.st" --prompt ' He' --ids -n 10 --temperature 1 --seed 11 >"$d/two"
[ "$(wc -l <"$d/two")" -eq 2 ] && [ "$(sed -n 1p "$d/two")" = "$(sed -n 2p "$d/two")" ] ||
	fail "the same seed gave two states' copies different samples"

# --prompts: every state continues every prompt, each as its own run would
# (same seed, same state); per-line max_tokens, seed and stop.
cat >"$d/p.jsonl" <<'JS'
{"id": "a", "prompt": " He"}

{"prompt": " Robert Boulter is", "max_tokens": 3}
{"id": 7, "prompt": " He", "seed": 99, "stop": ["zz", "q"]}
JS
ss-decode --model "$T1" --state "$d/aa.st" --prompts "$d/p.jsonl" --jsonl -n 8 --top-k 20 --seed 5 \
	-o "$d/b.json"
[ "$(wc -l <"$d/b.json")" -eq 6 ] || fail "--prompts: 2 states x 3 prompts"
for spec in "1 a --seed 5" "2 $d/p.jsonl:3 -n 3 --seed 5" "3 7 --seed 99 --stop zz --stop q"; do
	set -- $spec
	line=$1 id=$2; shift 2
	pr=' He'; [ "$line" -ne 2 ] || pr="$R"
	ss-decode --model "$T1" --state "$d/a.st" --prompt "$pr" --jsonl -n 8 --top-k 20 "$@" >"$d/one.json"
	python3 - "$d/b.json" "$d/one.json" "$line" "$id" <<'PY' || fail "--prompts line $line"
import json, sys
batch = [json.loads(l) for l in open(sys.argv[1])]
one = json.load(open(sys.argv[2]))
k, want_id = int(sys.argv[3]) - 1, sys.argv[4]
for b in (batch[k], batch[k + 3]):  # the same prompt from both states
    assert b["id"] == want_id and b["state"] == one["id"], (b, one)
    for f in ("text", "tokens", "finish_reason"):
        assert b[f] == one[f], (f, b, one)
PY
done
# Text output: one block (text and a newline) per prompt; prompts on stdin.
ss-decode --model "$T1" --no-state --prompts - -n 4 <"$d/p.jsonl" >"$d/b.txt"
[ "$(wc -l <"$d/b.txt")" -eq 3 ] || fail "--prompts text output"
expect 2 "one prompt" dec --prompts "$d/p.jsonl" --prompt x
printf '{"id":"x","prompt":" a"}\nnot json\n' >"$d/bad1.jsonl"
expect 1 "bad1.jsonl: line 2: not a JSON object" dec --prompts "$d/bad1.jsonl"
printf '{"prompt":" a","temprature":0.5}\n' >"$d/bad2.jsonl"
expect 1 'bad2.jsonl: line 1: unknown key "temprature"' dec --prompts "$d/bad2.jsonl"
printf '{"id":"x"}\n' >"$d/bad3.jsonl"
expect 1 'bad3.jsonl: line 1: missing "prompt"' dec --prompts "$d/bad3.jsonl"
printf '{"prompt":""}\n' >"$d/bad4.jsonl"
expect 1 'bad4.jsonl: line 1: empty prompt' dec --prompts "$d/bad4.jsonl"
printf '{"prompt":" a","max_tokens":-1}\n' >"$d/bad5.jsonl"
expect 1 'bad5.jsonl: line 1: "max_tokens" must be an integer' dec --prompts "$d/bad5.jsonl" -o "$d/o5"
[ ! -e "$d/o5" ] || fail "output left behind"
: >"$d/empty.jsonl"
expect 1 "empty.jsonl: no prompt" dec --prompts "$d/empty.jsonl"
echo ok
