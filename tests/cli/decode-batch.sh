# ss-decode's batched decoding (--prompts, --batch; issue 35 §1): up to B
# outputs generated together, one decode step for all, each from its own
# state (a line's "state" file, or every state of the input) with its own
# settings; an output that finishes leaves the batch and the next joins.
# The bytes equal those of one ss-decode run per output, whatever --batch
# and --threads (the deterministic decode of tests/test_forward.c), in input
# order; bad lines fail before any output. Run by tests/run from the repo root.
set -eu
. "$SS_TOP/tests/util/golden.sh"
# three stored states of different documents, and a stream of all three
for i in 1 2 3; do
	head -c $((40 * i + 20)) "$G/t1/c$i/text.txt" >"$d/doc$i.txt"
	ss-tokenize -q --whole "$d/doc$i.txt" | ss-encode --model "$T1" >"$d/s$i.st"
done
cat "$d/s1.st" "$d/s2.st" "$d/s3.st" >"$d/all.st"
# 7 questions over the 3 states: lengths that make outputs leave the batch
# at different steps (so others join), a stop string, one sampled line
cat >"$d/q.jsonl" <<JS
{"id":"q1","prompt":" He was","state":"$d/s1.st","max_tokens":9}
{"id":"q2","prompt":" The","state":"$d/s2.st","max_tokens":3}
{"id":"q3","prompt":" In 2004","state":"$d/s3.st","max_tokens":12,"stop":" the"}
{"id":"q4","prompt":" She","state":"$d/s1.st","max_tokens":1}
{"id":"q5","prompt":" It is","state":"$d/s3.st","max_tokens":7,"temperature":0.9,"top_k":30,"seed":4}
{"id":"q6","prompt":" A","state":"$d/s2.st","max_tokens":0}
{"id":"q7","prompt":" They","state":"$d/s1.st","max_tokens":10}
JS
# one run per line: text, ids and JSON lines, 1 thread
python3 - "$d/q.jsonl" >"$d/runs" <<'PY'
import json, sys, shlex
for l in open(sys.argv[1]):
    q = json.loads(l)
    a = ["--state", q["state"], "--prompt", q["prompt"], "-n", str(q["max_tokens"])]
    if "stop" in q: a += ["--stop", q["stop"]]
    if "temperature" in q: a += ["--temperature", str(q["temperature"]), "--top-k", str(q["top_k"]), "--seed", str(q["seed"])]
    print(" ".join(shlex.quote(x) for x in a))
PY
: >"$d/one.txt"
: >"$d/one.ids"
: >"$d/one.json"
while IFS= read -r args; do
	eval "set -- $args"
	ss-decode --model "$T1" --threads 1 "$@" >>"$d/one.txt"
	ss-decode --model "$T1" --threads 1 --ids "$@" >>"$d/one.ids"
	ss-decode --model "$T1" --threads 1 --jsonl "$@" >>"$d/one.json"
done <"$d/runs"
[ "$(wc -l <"$d/one.ids")" -eq 7 ] || fail "7 single runs"
for bt in "1 2" "3 1" "3 2" "100 2"; do
	set -- $bt
	ss-decode --model "$T1" --prompts "$d/q.jsonl" --batch $1 --threads $2 >"$d/b.txt"
	cmp -s "$d/b.txt" "$d/one.txt" || fail "text, --batch $1 --threads $2: differs from one run per line"
done
ss-decode --model "$T1" --prompts "$d/q.jsonl" --batch 2 --threads 2 --ids >"$d/b.ids"
cmp -s "$d/b.ids" "$d/one.ids" || fail "ids, --batch 2: differs from one run per line"
# the default batch (all 7 here) in JSON lines: the line's id, the state's id, the rest equal
ss-decode --model "$T1" --prompts "$d/q.jsonl" --jsonl -o "$d/b.json"
python3 - "$d/b.json" "$d/one.json" <<'PY' || fail "--jsonl batch vs one run per line"
import json, sys
b = [json.loads(l) for l in open(sys.argv[1])]
o = [json.loads(l) for l in open(sys.argv[2])]
assert [x["id"] for x in b] == ["q%d" % i for i in range(1, 8)], b
for x, y in zip(b, o):
    assert x["state"] == y["id"], (x, y)
    for f in ("text", "tokens", "finish_reason"):
        assert x[f] == y[f], (f, x, y)
assert b[5]["tokens"] == [] and b[3]["finish_reason"] == "length" and len(b[3]["tokens"]) == 1
PY
# every state of the input with every prompt (no "state" key): the same
# bytes as one state at a time, whatever --batch
grep -v '"q5"' "$d/q.jsonl" | sed 's/,"state":"[^"]*"//' >"$d/x.jsonl"
ss-decode --model "$T1" --state "$d/all.st" --prompts "$d/x.jsonl" --batch 4 --ids >"$d/x4"
: >"$d/x1"
for i in 1 2 3; do
	ss-decode --model "$T1" --state "$d/s$i.st" --prompts "$d/x.jsonl" --batch 1 --ids >>"$d/x1"
done
[ "$(wc -l <"$d/x4")" -eq 18 ] || fail "3 states x 6 prompts"
cmp -s "$d/x4" "$d/x1" || fail "states x prompts, --batch 4: differs from one state at a time"

# Bad input: one line naming the file and the line, before any output.
head -n 2 "$d/q.jsonl" >"$d/mixed.jsonl"
echo '{"prompt":" x"}' >>"$d/mixed.jsonl"
expect 1 'mixed.jsonl: line 3: "state" must be on every line or on none' \
	ss-decode --model "$T1" --prompts "$d/mixed.jsonl" -o "$d/o.txt"
[ ! -e "$d/o.txt" ] || fail "output written on a bad line"
printf '{"prompt":" x","state":"%s/none.st"}\n' "$d" >"$d/missing.jsonl"
expect 1 'missing.jsonl: line 1: "state": .*none.st: No such file' ss-decode --model "$T1" --prompts "$d/missing.jsonl"
printf '{"prompt":" x","state":"%s/all.st"}\n' "$d" >"$d/many.jsonl"
expect 1 'many.jsonl: line 1: "state": .*all.st holds more than one state record' \
	ss-decode --model "$T1" --prompts "$d/many.jsonl"
printf '{"prompt":" x","temperature":-1}\n' >"$d/temp.jsonl"
expect 1 'temp.jsonl: line 1: "temperature" must be a number' ss-decode --model "$T1" --no-state --prompts "$d/temp.jsonl"
expect 2 '"state" of --prompts lines' ss-decode --model "$T1" --state "$d/s1.st" --prompts "$d/q.jsonl"
# A bad "state" on line 3 (a FIFO, a directory, another model's states): all or nothing, the
# line named, no output at --batch 1 either, on stdout or -o (issue 48, items 3 and 8)
mkfifo "$d/fifo.st" && mkdir "$d/dir.st"
for bad in fifo.st dir.st other.st; do
	head -n 2 "$d/q.jsonl" >"$d/bad.jsonl"
	printf '{"prompt":" x","state":"%s/%s"}\n' "$d" "$bad" >>"$d/bad.jsonl"
	[ "$bad" = other.st ] && cp "$SS_TOP/formats/golden/t1-c2.states" "$d/other.st"
	why='not a regular file'; [ "$bad" = other.st ] && why='state from another model'
	expect 1 "bad.jsonl: line 3: \"state\": .*$bad: .*$why" timeout 20 ss-decode --model "$T1" --prompts "$d/bad.jsonl" --batch 1
	[ -s "$d/out" ] && fail "$bad: output written before the bad line was found"
	expect 1 "bad.jsonl: line 3: \"state\": .*$bad" timeout 20 ss-decode --model "$T1" --prompts "$d/bad.jsonl" -o "$d/o.txt"
	[ ! -e "$d/o.txt" ] || fail "$bad: -o written on a bad line"
done
expect 2 'batch' ss-decode --model "$T1" --no-state --prompt x --batch 0
