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
echo "output-is-input ok"
