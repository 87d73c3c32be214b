#!/bin/sh
# One record validator (issue 32 items 9 and 13): the same hostile or odd state records go
# through every reader — ss-cat, ss-cat --full, ss-compose -j1 and -j2 on a file, ss-compose
# on a pipe, ss-score and ss-decode --state — and all agree: a record in another msgpack key
# order is accepted with the output of the original; a record whose dims do not match its
# arrays, a q8 scale above FLT_MAX/128, a NaN in an f32 or f16 (byte-shuffled or not) array, a key
# twice are refused in one line naming the file and the record, exit 1, no output file. A
# composition that overflows f32 (q8 output too) and a score that is not finite are errors
# that say why, never "invalid argument" or "nll":-nan. The records are edited with a small
# msgpack codec below (python3, no modules) and zstd(1); inputs from gen/mkstates and the
# golden t1 state scored by the t1-hf fixture model.
set -u
. "${SS_TOP:-.}/tests/util/retrieve.sh"
command -v zstd >/dev/null || { echo "no zstd(1)"; exit 77; }
mk="$SS_TOP/$SS_BUILD/gen/mkstates"
M="$SS_TOP/tests/fixtures/golden/models/t1-hf"
one_line() { [ "$(wc -l <err)" -eq 1 ] || { fail "$* said $(wc -l <err) lines"; sed 's/^/    /' err | head -5; }; }

# edit SRC DST KIND: rewrites record 1 of SRC (record 0 of a one-record SRC) as KIND says.
cat >edit.py <<'PY'
import struct, subprocess, sys
def unpack(b, i):
    t = b[i]; i += 1
    if t <= 0x7f: return t, i
    if t >= 0xe0: return t - 256, i
    if 0x80 <= t <= 0x8f or t in (0xde, 0xdf):
        n, i = (t & 15, i) if t < 0x90 else (int.from_bytes(b[i:i + (2 if t == 0xde else 4)], 'big'), i + (2 if t == 0xde else 4))
        m = []
        for _ in range(n):
            k, i = unpack(b, i); v, i = unpack(b, i); m.append([k, v])
        return m, i
    if 0x90 <= t <= 0x9f or t in (0xdc, 0xdd):
        n, i = (t & 15, i) if t < 0xa0 else (int.from_bytes(b[i:i + (2 if t == 0xdc else 4)], 'big'), i + (2 if t == 0xdc else 4))
        a = []
        for _ in range(n):
            v, i = unpack(b, i); a.append(v)
        return tuple(a), i
    if 0xa0 <= t <= 0xbf: return b[i:i + (t & 31)].decode(), i + (t & 31)
    w = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}.get(t)
    if w:
        n = int.from_bytes(b[i:i + w], 'big'); i += w
        return (bytes(b[i:i + n]) if t < 0xd0 else b[i:i + n].decode()), i + n
    if t == 0xcb: return struct.unpack('>d', b[i:i + 8])[0], i + 8
    w = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8}.get(t)
    if w: return int.from_bytes(b[i:i + w], 'big'), i + w
    w = {0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}[t]
    return int.from_bytes(b[i:i + w], 'big', signed=True), i + w
def pack(o):
    if isinstance(o, list):
        return bytes([0xde]) + struct.pack('>H', len(o)) + b''.join(pack(k) + pack(v) for k, v in o)
    if isinstance(o, tuple): return bytes([0xdc]) + struct.pack('>H', len(o)) + b''.join(pack(v) for v in o)
    if isinstance(o, float): return b'\xcb' + struct.pack('>d', o)
    if isinstance(o, int): return b'\xd3' + struct.pack('>q', o)
    if isinstance(o, str):
        e = o.encode(); return (bytes([0xa0 | len(e)]) if len(e) < 32 else bytes([0xd9, len(e)])) + e
    return b'\xc6' + struct.pack('>I', len(o)) + o
src, dst, kind = sys.argv[1:4]
raw = subprocess.run(['zstd', '-dqc', src], check=True, capture_output=True).stdout
recs, i = [], 0
while i < len(raw):
    m, i = unpack(raw, i); recs.append(m)
m = recs[1 if len(recs) > 1 else 0]
d = dict((k, v) for k, v in m)
def put(k, v):
    for kv in m:
        if kv[0] == k: kv[1] = v
if kind == 'reversed': m.reverse()
elif kind == 'logdecay-last': m.sort(key=lambda kv: kv[0] == 'logdecay')
elif kind == 'conv-empty': put('conv', b'')
elif kind == 'conv-2^62':  # 2^24 layers x 2^24 channels x 2^14 taps, conv empty
    put('n_layer', 1 << 24); put('conv_dim', 1 << 24); put('d_conv', (1 << 14) + 1); put('conv', b'')
elif kind == 'big-scale':
    put('ssm_scale', struct.pack('<f', 3e38) + d['ssm_scale'][4:])
elif kind == 'nan-f32':
    put('ssm', d['ssm'][:4] + struct.pack('<f', float('nan')) + d['ssm'][8:])
elif kind == 'nan-f16':  # element 1: of one shuffle block, low byte at 1, high byte at n + 1;
    s = bytearray(d['ssm']); n = len(s) // 2  # unshuffled (a raw frame's), bytes 2 and 3
    lo, hi = (1, n + 1) if 'shuffle' in d else (2, 3)
    s[lo] = 0; s[hi] = 0x7e; put('ssm', bytes(s))
elif kind == 'dup-key': m.insert(3, ['n_layer', d['n_layer']])
elif kind == 'huge':  # finite, but the model overflows on it
    put('ssm', struct.pack('<f', 3e38) * (len(d['ssm']) // 4))
elif kind.startswith('first,fingerprint='):  # record 0 alone, as another model's
    recs = recs[:1]; recs[0] = [[k, kind.split('=')[1] if k == 'fingerprint' else v] for k, v in recs[0]]
out = b''
for r in recs:
    b = pack(r)
    out += subprocess.run(['zstd', '-qc', '--stream-size=%d' % len(b)], input=b, check=True,
                          capture_output=True).stdout
open(dst, 'wb').write(out)
PY
edit() { python3 edit.py "$@" || fail "edit $*"; }

"$mk" --shape small --seed 3 3 f32.ss && "$mk" --shape small --dtype f16 --seed 3 3 f16.ss &&
	"$mk" --shape small --dtype q8 --seed 3 3 q8.ss || { fail "mkstates"; done_checks; }

# --- accepted, as the original: another key order (logdecay after the arrays; all reversed)
expect 0 ss-compose -j1 -o ref.ss f32.ss
fields() { sed 's/^{"offset":[0-9]*,//' | tr -d '{}[]' | tr , '\n' | sort; } # a record's fields, in any order
ss-cat f32.ss | fields >ref.keys
for kind in reversed logdecay-last; do
	edit f32.ss $kind.ss $kind
	for how in "-j1" "-j2" "--mode soup -j1" "--mode soup -j2"; do
		expect 0 ss-compose $how -o out.ss $kind.ss
		ss-compose $how -o want.ss f32.ss
		cmp -s out.ss want.ss || fail "$kind: ss-compose $how differs from the original's"
	done
	cat $kind.ss | ss-compose -o pipe.ss; cmp -s pipe.ss ref.ss || fail "$kind: ss-compose from a pipe differs"
	expect 0 ss-cat --full $kind.ss
	ss-cat <$kind.ss >stdin.json; ss-cat $kind.ss >file.json
	cmp -s stdin.json file.json || fail "$kind: ss-cat of stdin and of the file differ"
	fields <file.json | cmp -s - ref.keys ||
		fail "$kind: ss-cat shows other fields or values than the original's"
	expect 0 ss-cat --meta $kind.ss
done

# --- refused by every reader, one line naming the file and record 1, no output
rm -f out.ss
check_refused() { # FILE WHAT
	one_line "$1"
	has err "^[a-z-]*: $1: record 1 "
	has err "$2"
}
for case in "f32.ss conv-empty field \"conv\" has 0 bytes" \
	    "f32.ss conv-2^62 dims declare an absurd state size" \
	    "q8.ss big-scale field \"ssm_scale\": scale 0 is 3e+38" \
	    "f32.ss nan-f32 field \"ssm\": element 1 is nan, not finite" \
	    "f16.ss nan-f16 field \"ssm\": element 1 is nan, not finite" \
	    "f32.ss dup-key key \"n_layer\" appears twice"; do
	set -- $case
	src=$1 kind=$2; shift 2; what="$*"
	edit $src bad.ss $kind
	for cmd in "ss-cat bad.ss" "ss-cat --full bad.ss" "ss-compose -j1 -o out.ss bad.ss" \
		   "ss-compose -j2 -o out.ss bad.ss" "ss-compose -j2 --mode soup -o out.ss bad.ss" \
		   "ss-compose --norm before -o out.ss bad.ss" "ss-compose --state-dtype q8 -o out.ss bad.ss"; do
		expect 1 $cmd
		check_refused bad.ss "$what"
		[ -e out.ss ] && { fail "$kind: $cmd left out.ss"; rm -f out.ss; }
	done
	cat bad.ss | ss-compose -o out.ss >out 2>err
	[ $? -eq 1 ] || fail "$kind: ss-compose from a pipe: exit 0"
	has err "^ss-compose: -: record 1 "; has err "$what"
	[ -e out.ss ] && { fail "$kind: ss-compose from a pipe left out.ss"; rm -f out.ss; }
done

# --- ss-score and ss-decode: the golden t1 state (f32), as the t1-hf model's (its fingerprint)
G="$SS_TOP/formats/golden/t1-c2.states"
fp=$(ss-score --model "$M" --state "$G" --query-tokens 1,2 --continuation-tokens 3 2>&1 |
	sed -n 's/.* has \([0-9a-f]*\))$/\1/p')
[ -n "$fp" ] || fail "no fingerprint of t1-hf"
edit "$G" t1.ss first,fingerprint=$fp
edit t1.ss t1rev.ss reversed
ss-compose --mode soup --state-dtype q8 -o t1q8.ss t1.ss && edit t1q8.ss t1big.ss big-scale
edit t1.ss t1nan.ss nan-f32
edit t1.ss t1huge.ss huge # finite values the model overflows on
for cmd in "ss-score --query-tokens 1,2,3 --continuation-tokens 4,5" "ss-decode --prompt-tokens 1,2,3 -n 3 --ids"; do
	expect 0 $cmd --model "$M" --state t1.ss; mv out want
	expect 0 $cmd --model "$M" --state t1rev.ss; cmp -s out want || fail "$cmd: the reordered record scores otherwise"
	expect 1 $cmd --model "$M" --state t1nan.ss -o out.txt
	one_line "$cmd t1nan.ss"; has err ": t1nan.ss: record 0 .*field \"ssm\": element 1 is nan, not finite"
	expect 1 $cmd --model "$M" --state t1big.ss -o out.txt
	one_line "$cmd t1big.ss"; has err ": t1big.ss: record 0 .*\"ssm_scale\": scale 0 is 3e+38"
	expect 1 $cmd --model "$M" --state t1huge.ss -o out.txt
	one_line "$cmd t1huge.ss"; has err ": t1huge.ss: record 0 (id \".*\"): .* not finite"
	[ -e out.txt ] && { fail "$cmd left out.txt"; rm -f out.txt; }
done

# --- a composition that overflows f32: refused naming the inputs and the element, no output
edit f32.ss h1.ss huge && "$mk" --shape small --seed 4 1 one.ss && edit one.ss h2.ss huge
for how in "-j1" "-j2" "-j2 --state-dtype q8" "-j1 --state-dtype f16"; do
	expect 1 ss-compose --mode sum $how -o out.ss h1.ss h2.ss
	one_line "sum $how"; has err "^ss-compose: h1.ss, h2.ss: their sum composition's ssm element 0 is inf: it overflows f32"
	[ -e out.ss ] && { fail "sum $how left out.ss"; rm -f out.ss; }
done
# --- a 4 KB frame declaring 128 MiB whose map never reaches "conv"/"ssm" (issue 48 item 1): the
# metadata readers (ss-cat --meta/--stats, compose's first pass, retrieve add) decode it in time
# linear in its size, as a whole read does (38 s before, the buffer grown 64 KiB a step)
python3 -c 'import sys, struct; n = 128 << 20; sys.stdout.buffer.write(b"\x81\xa1x\xc6" + struct.pack(">I", n)); [sys.stdout.buffer.write(bytes(1 << 20)) for _ in range(128)]' >late.raw
zstd -q -f late.raw -o late.ss && rm -f late.raw
for how in --meta --stats; do
	expect 1 timeout 10 ss-cat $how late.ss
	one_line "ss-cat $how late.ss"; has err "^ss-cat: late.ss: record 0 (byte offset 0): record has no \"format\" string"
done
expect 1 timeout 10 ss-compose -o late.out late.ss late.ss
one_line "ss-compose late.ss"; has err "late.ss"
done_checks
