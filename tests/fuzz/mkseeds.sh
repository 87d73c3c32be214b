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

# stream: token and state records (small dims), an annotated retrieval output
printf 'a1\tthe quick brown fox\na2\tsailing ships\n' >"$T/docs.txt"
"$B/gen/mkdb" "$T/d.tokens" "$T/d.states" <"$T/docs.txt"
cp formats/golden/t1-c2.tokens "$S/stream/golden.tokens"
cp "$T/d.tokens" "$S/stream/mkdb.tokens"
cp "$T/d.states" "$S/stream/mkdb.states"
"$B/bin/ss-retrieve" build -q --index "$T/i.db" "$T/d.tokens" "$T/d.states"
"$B/bin/ss-retrieve" query --index "$T/i.db" -k 1 --query fox -o "$S/stream/annotated.states"
printf '\x50\x2a\x4d\x18\x02\x00\x00\x00hi' | cat - "$T/d.tokens" >"$S/stream/skippable.tokens"

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
du -sh "$S"; du -s "$S"/* | sort -n | tail -3
