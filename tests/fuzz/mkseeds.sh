#!/bin/sh
# Regenerates the seed corpora in tests/fuzz/seeds/ (checked in; run from the
# source tree after make). Small on purpose: a few KB per target.
set -eu
B=${SS_BUILD:-build}
S=tests/fuzz/seeds
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for t in stream safetensors shards pickle tokenizer tokjson config jsonl query ids index; do
	rm -rf "${S:?}/$t"
	mkdir -p "$S/$t"
done

# stream: token and state records (small dims), a retrieval output (plan and annotation frames)
printf 'a1\tthe quick brown fox\na2\tsailing ships\n' >"$T/docs.txt"
"$B/gen/mkdb" "$T/d.tokens" "$T/d.states" <"$T/docs.txt"
cp formats/golden/t1-c2.tokens "$S/stream/golden.tokens"
cp "$T/d.tokens" "$S/stream/mkdb.tokens"
cp "$T/d.states" "$S/stream/mkdb.states"
"$B/bin/ss-retrieve" build -q --index "$T/i.db" "$T/d.tokens" "$T/d.states"
"$B/bin/ss-retrieve" query --index "$T/i.db" -k 1 --query fox -o "$S/stream/annotated.states"
printf '\x50\x2a\x4d\x18\x02\x00\x00\x00hi' | cat - "$T/d.tokens" >"$S/stream/skippable.tokens"
"$B/gen/mkstates" --shape small --min-saving 2 2 "$S/stream/raw.states" # raw frames (formats/states.md)

# index: the small index built above, with 512-byte pages (7.5 KB, not 48)
cp "$T/i.db" "$S/index/small.db"
# and the same with every state dropped by a budget (schema 4: stateless documents, their tokens)
"$B/bin/ss-retrieve" build -q --index "$T/s.db" --state-budget 0 "$T/d.tokens" "$T/d.states"
cp "$T/s.db" "$S/index/stateless.db"
for db in small stateless; do
	python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA page_size=512"); c.execute("VACUUM")' \
		"$S/index/$db.db"
done

python3 - "$S" <<'PY'
import json, struct, sys, os
S = sys.argv[1]
def w(t, name, data):
    open(os.path.join(S, t, name), 'wb').write(data if isinstance(data, bytes) else data.encode())

# safetensors: header length, JSON header, data
def st(hdr, data):
    h = json.dumps(hdr, separators=(',', ':')).encode()
    return struct.pack('<Q', len(h)) + h + data
w('safetensors', 'f32.safetensors', st({'__metadata__': {'format': 'pt'},
    'a': {'dtype': 'F32', 'shape': [2, 2], 'data_offsets': [0, 16]}}, struct.pack('<4f', 1, 2, 3, 4)))
w('safetensors', 'mixed.safetensors', st({
    'h': {'dtype': 'F16', 'shape': [2], 'data_offsets': [0, 4]},
    'b': {'dtype': 'BF16', 'shape': [1, 2], 'data_offsets': [4, 8]},
    'i': {'dtype': 'I64', 'shape': [1], 'data_offsets': [8, 16]},
    'z': {'dtype': 'F32', 'shape': [0], 'data_offsets': [16, 16]}}, bytes(range(16))))

# shards: model.safetensors.index.json naming a.safetensors / b.safetensors
w('shards', 'two.json', json.dumps({'metadata': {'total_size': 16},
    'weight_map': {'x.weight': 'a.safetensors', 'y.weight': 'b.safetensors'}}))
w('shards', 'one.json', json.dumps({'weight_map': {'x.weight': 'a.safetensors'}}))
w('shards', 'missing.json', json.dumps({'weight_map': {'z.weight': 'a.safetensors'}}))

# pickle: a torch state_dict {'w': tensor (2, 3)} as torch.save writes data.pkl
def pk(numel, offset, storage=b'FloatStorage'):
    b = b'\x80\x02ccollections\nOrderedDict\nq\x00)R'
    b += b'X\x01\x00\x00\x00w'
    b += b'ctorch._utils\n_rebuild_tensor_v2\n('
    b += b'(X\x07\x00\x00\x00storagectorch\n' + storage + b'\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK' + bytes([numel])
    b += b'tQK' + bytes([offset])
    b += b'K\x02K\x03\x86K\x03K\x01\x86\x89h\x00)RtRs.'
    return b
w('pickle', 'float.pkl', pk(6, 0))
w('pickle', 'half-offset.pkl', pk(7, 1, b'HalfStorage'))
w('pickle', 'bf16.pkl', pk(6, 0, b'BFloat16Storage'))
w('pickle', 'refused.pkl', b'\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02R.')

# tokenizer: texts
w('tokenizer', 'english.txt', 'the quick brown fox jumps over the lazy dog\n')
w('tokenizer', 'unicode.txt', 'caf\u00e9 cafe\u0301 \u00c5ngstr\u00f6m \u4e2d\u6587 \U0001F600 \u00a0 tabs\t\tand   spaces\n')
w('tokenizer', 'special.txt', 'a<|endoftext|>b <|endoftext|> 123 4567 x!!\n')
w('tokenizer', 'invalid.bin', b'ok \xff\xfe \xc3( \xed\xa0\x80')

# tokjson: the tiny tokenizer and two variants
tok = json.load(open('tests/fuzz/tiny-tokenizer.json'))
w('tokjson', 'tiny.json', json.dumps(tok, ensure_ascii=False, separators=(',', ':')))
tok2 = dict(tok); tok2['normalizer'] = None; tok2['added_tokens'] = []
tok2['model'] = dict(tok['model']); tok2['model']['merges'] = [m.split(' ') for m in tok['model']['merges']]
w('tokjson', 'pairs.json', json.dumps(tok2, ensure_ascii=False, separators=(',', ':')))

# config: config.json styles
w('config', 'ss.json', json.dumps({'d_model': 32, 'd_intermediate': 0, 'n_layer': 2, 'vocab_size': 100,
    'ssm_cfg': {'layer': 'Mamba2', 'd_state': 8, 'headdim': 8, 'ngroups': 2},
    'pad_vocab_size_multiple': 16, 'tie_embeddings': True}))
w('config', 'hf.json', json.dumps({'model_type': 'mamba2', 'hidden_size': 64, 'num_hidden_layers': 2,
    'vocab_size': 128, 'state_size': 16, 'head_dim': 16, 'n_groups': 1, 'expand': 2, 'conv_kernel': 4,
    'num_heads': 8, 'layer_norm_epsilon': 1e-5, 'tie_word_embeddings': False}))

# jsonl: documents
w('jsonl', 'docs.jsonl', '{"id":"a","text":"the fox"}\n{"id":7,"text":"x"}\n{"text":"no id"}\n'
  '{"id":1.5,"text":"y"}\n{"id":null,"text":"caf\\u00e9 \\ud83d\\ude00"}\n\n  \n{"id":[1],"text":"bad"}\n')
w('jsonl', 'nul.jsonl', '{"id":"a","text":"fi\\u0000ne"}\n{"id":"b\\\\u0000","text":"ok"}\n')
w('jsonl', 'big-id.jsonl', '{"id":1e300,"text":"a"}\n{"id":-9223372036854775808,"text":"b"}\n')

# query: batch lines
w('query', 'batch.jsonl', '{"id":"q1","query":"the fox","k":3}\n{"query":"ocean","exclude":["a1","a2"]}\n'
  '{"id":2,"query":"x","k":1e6}\n{"query":"y","k":0}\nnot json\n{"query":1}\n')

# ids: --ids files
w('ids', 'list.txt', 'a1\na2\r\n\na1\nb7\n')
w('ids', 'one.txt', 'only')
PY
# q8: q8 streams (plain, composed with provenance), a q4 one, a byte-shuffled f16 one, one of each in a
# stream, and a q8 record in another key order (tiny dims: a few hundred bytes each)
rm -rf "${S:?}/q8"
mkdir -p "$S/q8"
"$B/gen/mkstates" --shape 2,2,2,3,4,3 --dtype q8 --seed 1 3 "$S/q8/q8.states"
"$B/gen/mkstates" --shape 2,2,2,3,4,3 --dtype f16 --seed 2 2 "$S/q8/f16-shuffled.states"
"$B/gen/mkstates" --shape 2,2,2,3,4,3 --dtype q4 --seed 3 2 "$S/q8/q4.states"
"$B/bin/ss-compose" --mode picaso-r --state-dtype q8 -o "$S/q8/composed.states" "$S/q8/q8.states"
cat "$S/q8/q8.states" "$S/q8/f16-shuffled.states" >"$S/q8/mixed.states"
python3 - "$S/q8/q8.states" "$S/q8/reversed.states" <<'PY'
import subprocess, sys
# the first record's map with its entries reversed (the writer's key and value bytes kept)
raw = subprocess.run(['zstd', '-dqc', sys.argv[1]], check=True, capture_output=True).stdout
def skip(b, i):
    t = b[i]; i += 1
    if t <= 0x7f or t >= 0xe0 or t in (0xc0, 0xc2, 0xc3): return i
    if 0x80 <= t <= 0x8f:
        for _ in range(2 * (t & 15)): i = skip(b, i)
        return i
    if 0x90 <= t <= 0x9f:
        for _ in range(t & 15): i = skip(b, i)
        return i
    if 0xa0 <= t <= 0xbf: return i + (t & 31)
    w = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}.get(t)
    if w: return i + w + int.from_bytes(b[i:i + w], 'big')
    return i + {0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}[t]
hdr = 3 if raw[0] == 0xde else 1
n = int.from_bytes(raw[1:3], 'big') if hdr == 3 else raw[0] & 15
i, entries = hdr, []
for _ in range(n):
    j = skip(raw, skip(raw, i)); entries.append(raw[i:j]); i = j
body = raw[:hdr] + b''.join(reversed(entries))
open(sys.argv[2], 'wb').write(subprocess.run(['zstd', '-qc', '--stream-size=%d' % len(body)], input=body,
                                              check=True, capture_output=True).stdout)
PY


# trainstate: trainer_state.json of a two-step lm run (with --loss-after), a bp2c run (soup) and a
# bptc run (bf16 saves), on the t1 model and one document
rm -rf "${S:?}/trainstate"
mkdir -p "$S/trainstate"
(
	top=$(pwd)
	cd "$T"
	printf 'the quick brown fox\n' >t.txt
	printf '{"chunks": ["t.txt:1"], "query": "the", "continuation": " fox"}\n' >t.jsonl
	"$top/$B/bin/ss-tokenize" -q t.txt >t.tok
	T1=$top/tests/fixtures/golden/models/t1-hf
	"$top/$B/bin/ss-encode" -q --model "$T1" -o t.states t.tok
	TR="$top/$B/bin/ss-train --model $T1 --threads 1 --seq-len 8 --batch-tokens 16 --steps 2"
	$TR --objective lm --data t.tok --loss-after fox -o lm >/dev/null
	$TR --objective bp2c --data t.jsonl --states t.states --mode soup -o bp2c >/dev/null
	$TR --objective bptc --data t.jsonl --chunk-tokens t.tok --save-dtype bf16 -o bptc >/dev/null
	for o in lm bp2c bptc; do cp "$o/trainer_state.json" "$top/$S/trainstate/$o.json"; done
)
# llamaseq: llama.cpp sequence states of the harness's small dims (first byte: which dims), a
# blob and a 'ggsq' file with 4 prompt tokens for the small Mamba-2, a blob for the small Mamba-1
rm -rf "${S:?}/llamaseq"
mkdir -p "$S/llamaseq"
python3 - "$S/llamaseq" <<'PY'
import struct, sys
def blob(n_layer, conv_row, ssm_row, pos, file=False, ntok=0):
    out = struct.pack("<III", 0x67677371, 2, ntok) + struct.pack("<%di" % ntok, *range(ntok)) if file \
        else struct.pack("<Ii", 0xaf143cd8, 0)
    out += struct.pack("<IiIII", 1, pos, 0, 0, n_layer)
    for row in (conv_row, ssm_row):
        for l in range(n_layer):
            out += struct.pack("<iQ", 0, 4 * row) + struct.pack("<%df" % row, *[(i % 7 - 3) * 0.25 for i in range(row)])
    return out
S = sys.argv[1] + "/"
open(S + "small.seq", "wb").write(b"\x01" + blob(1, 24, 8, 9))
open(S + "small.ggsq", "wb").write(b"\x01" + blob(1, 24, 8, 9, True, 4))
open(S + "mamba1.seq", "wb").write(b"\x02" + blob(2, 6, 6, 0))
PY

# gguf: small GGUF models as llama.cpp's converter lays them out (tensor names, ssm_a = -exp(A_log),
# ggml dims), with the tiny tokenizer's vocabulary as tokenizer.ggml.*: a Mamba-2 with f16 and
# bf16 matrices, one with q8_0 ones (d_model 32: whole blocks), a Mamba-1 in f32
rm -rf "${S:?}/gguf"
mkdir -p "$S/gguf"
python3 - "$S/gguf" tests/fuzz/tiny-tokenizer.json <<'PY'
import json, struct, sys
S, tok = sys.argv[1] + "/", json.load(open(sys.argv[2]))
def s(x):
    x = x.encode()
    return struct.pack("<Q", len(x)) + x
def kv(k, t, v):
    out = s(k) + struct.pack("<I", t)
    if t == 4: return out + struct.pack("<I", v)
    if t == 6: return out + struct.pack("<f", v)
    if t == 8: return out + s(v)
    et, items = v  # array
    out += struct.pack("<IQ", et, len(items))
    return out + b"".join(s(i) if et == 8 else struct.pack("<i", i) for i in items)
def q8(vals):  # block_q8_0: f16 d, 32 int8
    out = b""
    for b in range(0, len(vals), 32):
        blk = vals[b:b + 32]
        d = max(abs(v) for v in blk) / 127 or 1.0
        out += struct.pack("<e", d) + struct.pack("<32b", *[round(v / d) for v in blk])
    return out
def gguf(arch, hp, tensors):
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda e: e[1])
    names = [v for v, _ in vocab] + ["<|endoftext|>", "[PAD283]"]
    meta = [kv("general.architecture", 8, arch), kv("general.alignment", 4, 32)]
    meta += [kv("%s.%s" % (arch, k), 4 if isinstance(v, int) else 6, v) for k, v in hp]
    meta += [kv("tokenizer.ggml.model", 8, "gpt2"), kv("tokenizer.ggml.pre", 8, "mpt"),
             kv("tokenizer.ggml.tokens", 9, (8, names)),
             kv("tokenizer.ggml.token_type", 9, (5, [1] * len(vocab) + [3, 4])),
             kv("tokenizer.ggml.merges", 9, (8, tok["model"]["merges"]))]
    info, data = b"", b""
    for name, ne, t, vals in tensors:
        raw = {0: lambda v: struct.pack("<%df" % len(v), *v), 1: lambda v: struct.pack("<%de" % len(v), *v),
               30: lambda v: b"".join(struct.pack("<f", x)[2:] for x in v), 8: q8}[t](vals)
        info += s(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", t, len(data))
        data += raw + b"\0" * (-len(raw) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + info
    return head + b"\0" * (-len(head) % 32) + data
def vals(n, k=0): return [((i * 7 + k) % 11 - 5) * 0.1 for i in range(n)]
def mamba2(D, dt, name):
    H, P, N, V = 2, D, 2, 284  # nheads, headdim, d_state, vocab (the tokenizer's ids)
    I = H * P; C = I + 2 * N; Z = 2 * I + 2 * N + H
    t = [("token_embd.weight", [D, V], dt, vals(D * V)), ("output_norm.weight", [D], 0, [1.0] * D),
         ("blk.0.attn_norm.weight", [D], 0, [1.0] * D), ("blk.0.ssm_in.weight", [D, Z], dt, vals(D * Z, 1)),
         ("blk.0.ssm_conv1d.weight", [4, C], 0, vals(4 * C, 2)), ("blk.0.ssm_conv1d.bias", [C], 0, vals(C, 3)),
         ("blk.0.ssm_dt.bias", [H], 0, [0.5] * H), ("blk.0.ssm_a", [1, H], 0, [-1.0, -2.0]),
         ("blk.0.ssm_d", [1, H], 0, [1.0] * H), ("blk.0.ssm_norm.weight", [I, 1], 0, [1.0] * I),
         ("blk.0.ssm_out.weight", [I, D], dt, vals(I * D, 4))]
    hp = [("embedding_length", D), ("block_count", 1), ("ssm.conv_kernel", 4), ("ssm.inner_size", I),
          ("ssm.state_size", N), ("ssm.time_step_rank", H), ("ssm.group_count", 1),
          ("attention.layer_norm_rms_epsilon", 1e-5)]
    open(S + name, "wb").write(gguf("mamba2", hp, t))
mamba2(4, 1, "mamba2-f16.gguf")
mamba2(4, 30, "mamba2-bf16.gguf")
mamba2(32, 8, "mamba2-q8_0.gguf")
D, I, N, R, V = 4, 8, 2, 1, 284
t = [("token_embd.weight", [D, V], 0, vals(D * V)), ("output_norm.weight", [D], 0, [1.0] * D),
     ("output.weight", [D, V], 0, vals(D * V, 5)),
     ("blk.0.attn_norm.weight", [D], 0, [1.0] * D), ("blk.0.ssm_in.weight", [D, 2 * I], 0, vals(2 * D * I)),
     ("blk.0.ssm_conv1d.weight", [4, I], 0, vals(4 * I, 2)), ("blk.0.ssm_conv1d.bias", [I], 0, vals(I, 3)),
     ("blk.0.ssm_x.weight", [I, R + 2 * N], 0, vals(I * (R + 2 * N), 6)),
     ("blk.0.ssm_dt.weight", [R, I], 0, vals(I * R, 7)), ("blk.0.ssm_dt.bias", [I], 0, [0.1] * I),
     ("blk.0.ssm_a", [N, I], 0, [-1.0 - (i % N) for i in range(N * I)]), ("blk.0.ssm_d", [I], 0, [1.0] * I),
     ("blk.0.ssm_out.weight", [I, D], 0, vals(I * D, 4))]
hp = [("embedding_length", D), ("block_count", 1), ("ssm.conv_kernel", 4), ("ssm.inner_size", I),
      ("ssm.state_size", N), ("ssm.time_step_rank", R), ("attention.layer_norm_rms_epsilon", 1e-5)]
open(S + "mamba1.gguf", "wb").write(gguf("mamba", hp, t))
PY

du -sh "$S"; du -s "$S"/* | sort -n | tail -3
