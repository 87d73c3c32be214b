# -o naming an input (the same file: same device and inode, a hard link too)
# is refused before anything is written, the input left byte-identical:
# ss-tokenize, ss-encode, ss-compose, ss-decode and ss-score (their inputs,
# --state), ss-retrieve query (the index and the state files it refers to).
# Another file as -o still works. Issue 32, item 4.
set -eu
. "$SS_TOP/tests/util/golden.sh"
cd "$d"
same='the output is the input'
# refused OUT CMD...: CMD exits 1 naming OUT as an input, OUT unchanged.
refused() {
	out=$1; shift
	cp "$out" "$d/keep"
	expect 1 "$same" "$@"
	grep -q -- "$out" "$d/err" || fail "$*: stderr does not name $out: $(cat "$d/err")"
	cmp -s "$out" "$d/keep" || fail "$*: $out changed"
}

printf 'the quick brown fox jumps over the lazy dog\n\nsailing ships cross the stormy ocean\n\nthe fox hunts at night\n' >d.txt
refused d.txt ss-tokenize -q -o d.txt d.txt
ss-tokenize -q -o a.tokens d.txt
[ -s a.tokens ] || fail "ss-tokenize -o another file"

refused a.tokens ss-encode -q --model "$T1" -o a.tokens a.tokens
ss-encode -q --model "$T1" -o a.states a.tokens
[ -s a.states ] || fail "ss-encode -o another file"

refused a.states ss-compose -o a.states a.states
ln a.states link.states
refused link.states ss-compose -o link.states a.states
ss-compose -o c.states a.states
refused a.states ss-compose --weights a.states -o w.states a.states # issue 48 item 6: --weights too
[ -s c.states ] || fail "ss-compose -o another file"

refused c.states ss-decode -q --model "$T1" --state c.states -p fox -n 2 -o c.states
refused link.states ss-decode -q --model "$T1" --state c.states -f link.states -n 2 -o link.states
ss-decode -q --model "$T1" --state c.states -p fox -n 2 -o dec.txt
[ -s dec.txt ] || fail "ss-decode -o another file"

refused c.states ss-score -q --model "$T1" --state c.states --query fox --continuation dog -o c.states
ss-score -q --model "$T1" --state c.states --query fox --continuation dog -o score.json
[ -s score.json ] || fail "ss-score -o another file"

ss-retrieve build -q --index i.db a.tokens a.states
refused a.states ss-retrieve query --index i.db --query fox -o a.states
refused link.states ss-retrieve query --index i.db --query fox -o link.states
refused a.states ss-retrieve query --index i.db --query fox --ids -o a.states
refused i.db ss-retrieve query --index i.db --query fox --ids -o i.db
ss-retrieve query --index i.db --query fox -o top.states
[ -s top.states ] || fail "ss-retrieve query -o another file"
ss-retrieve query --index i.db --query ocean -o top.states # every state still there

# ss-cat --export / --import, ss-eval, ss-train (issue 48, item 6): every -o against every input
cp c.states keep.states
refused c.states ss-cat --export llama-seq -o c.states c.states
ss-cat --export llama-seq -o c.seq c.states
refused c.seq ss-cat --import llama-seq --like c.states -o c.seq c.seq
refused c.states ss-cat --import llama-seq --like c.states -o c.states c.seq
printf '{"query": "fox", "passages": [{"is_selected": 1, "passage_text": "the fox"}], "answers": ["dog"]}\n' >qa.jsonl
refused qa.jsonl ss-eval msmarco --model "$T1" --qa qa.jsonl -o qa.jsonl
refused a.tokens ss-eval wikitext --model "$T1" --index i.db --tokens a.tokens --summary a.tokens
refused a.states ss-eval recall --model "$T1" --index i.db --qa qa.jsonl -o a.states
refused a.tokens ss-train --objective lm --model "$T1" --data a.tokens --steps 1 -o a.tokens
mkdir run && cp a.tokens run/docs.tokens
expect 1 'the output directory holds the input' ss-train --objective lm --model "$T1" --data run/docs.tokens --steps 1 -o run
cmp -s run/docs.tokens a.tokens || fail "ss-train -o run: run/docs.tokens changed"
mkdir model && cp "$T1"/config.json "$T1"/model.safetensors model/
expect 1 'the output directory is the input' ss-train --objective lm --model model --data a.tokens --steps 1 -o model
echo "output-is-input ok"
