# Mamba-1 through every tool, self-contained: a random m1-shaped model
# (build/gen/mkmodel --preset m1, bf16, untied, vocab 256 padded to 8) with a
# byte tokenizer; ss-encode writes arch "mamba1" records with per-element
# logdecay [L][d_inner][d_state]; ss-cat shows their shapes; ss-compose
# composes them (--weights [L][d_inner][d_state][n]); ss-decode and ss-score
# start from them; a Mamba-2 state and a Mamba-1 state never mix; ss-train
# refuses a Mamba-1 model (no backward ops for it yet).
set -eu
mkmodel=$SS_TOP/${SS_BUILD:-build}/gen/mkmodel
[ -x "$mkmodel" ] || { echo "skipped: no $mkmodel (run make)"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$mkmodel" m1 --preset m1 --vocab 256 --pad-multiple 8 --dtype bf16 --untied >/dev/null
"$mkmodel" m2 --preset t1 --vocab 256 --pad-multiple 8 >/dev/null
python3 "$SS_TOP/tests/util/bytetok.py" tok.json
export SS_TOKENIZER=$d/tok.json
printf 'the first document, about cats\n' >a.txt
printf 'a second one, about the sea and boats\n' >b.txt
ss-tokenize -q --whole a.txt b.txt >docs.tok

ss-encode --model m1 -o s1.st docs.tok
ss-cat s1.st >s1.json
[ "$(wc -l <s1.json)" -eq 2 ] || fail "not two records"
grep -q '"arch":"mamba1","n_layer":2,"nheads":128,"headdim":1,"d_state":16,"conv_dim":128,"d_conv":4' s1.json ||
	fail "mamba1 dims"
grep -q '"logdecay":{"dtype":"f32","shape":\[2,128,16\]' s1.json || fail "logdecay shape"
grep -q '"conv":{"dtype":"f32","shape":\[2,128,3\]' s1.json || fail "conv shape"
# stored in bf16; with --deterministic the threads do not change the state
ss-encode --model m1 --state-dtype bf16 docs.tok | ss-cat | grep -q '"dtype":"bf16"' || fail "bf16 storage"
# (a 700-byte document: 700 rows, more than one row block)
python3 -c 'import sys; sys.stdout.write("".join(chr(97 + (i * 7) % 26) for i in range(700)))' >long.txt
ss-tokenize -q --whole long.txt a.txt >long.tok
ss-encode --model m1 --deterministic --threads 2 long.tok >det2.st
ss-encode --model m1 --deterministic --threads 1 long.tok | cmp -s - det2.st ||
	fail "--deterministic: 1 thread differs from 2"
ss-encode --model m1 --deterministic --threads 3 --batch 1 long.tok | cmp -s - det2.st ||
	fail "--deterministic: 3 threads, batch 1 differ from 2 threads"

# every composition mode; picaso-r's weights per state element
for m in caso picaso-s picaso-r soup sum max; do
	ss-compose --mode "$m" --weights "w-$m.json" -o "c-$m.st" s1.st
	ss-cat "c-$m.st" | grep -q "\"id\":\"$m(a.txt,b.txt)\"" || fail "$m: id"
done
grep -q '"arch":"mamba1","d_state":16' w-picaso-r.json || fail "weights JSON arch"
ss-cat c-picaso-r.st | grep -q '"weights":{"dtype":"f32","shape":\[2,128,16,2\]' || fail "weights shape"
grep -q '"weights":\[\[\[\[0.5,0.5\]' w-soup.json || fail "soup weights"
cat s1.st s1.st | ss-compose --mode picaso-r -o pipe.st
ss-cat pipe.st | grep -q '"n_tokens":138' || fail "composition of a pipe"

# decode and score from a composed state
out=$(ss-decode --model m1 --state c-picaso-r.st --prompt "ab" --max-tokens 4 --ids)
[ "$(echo "$out" | wc -w)" -eq 4 ] || fail "decode: '$out'"
ss-score --model m1 --state c-caso.st --query "ab" --continuation "cd" | grep -q '"n_tokens":2' ||
	fail "score"

# Mamba-2 and Mamba-1 never mix: states of the other architecture are refused
ss-encode --model m2 -o s2.st docs.tok
set +e
ss-decode --model m1 --state s2.st --prompt "ab" --max-tokens 2 >out 2>err
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a Mamba-2 state decoded with a Mamba-1 model"
grep -q "s2.st" err || { cat err; fail "decode refusal does not name the file"; }
set +e
cat s1.st s2.st | ss-compose -o mix.st 2>err
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "Mamba-1 and Mamba-2 states composed"
grep -q "arch mamba1 vs mamba2\|arch mamba2 vs mamba1\|fingerprint" err || { cat err; fail "compose refusal"; }
[ ! -e mix.st ] || fail "output written on refusal"

set +e
ss-train --objective lm -o trained --model m1 --data docs.tok --steps 1 >out 2>err
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat err; fail "ss-train on a Mamba-1 model exited $rc"; }
grep -q "m1: a Mamba-1 model" err || { cat err; fail "ss-train refusal"; }
[ "$(wc -l <err)" -eq 1 ] || { cat err; fail "ss-train refusal is not one line"; }
[ ! -e trained ] || fail "ss-train wrote an output"
