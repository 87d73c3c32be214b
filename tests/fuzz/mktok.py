# Writes tests/fuzz/tiny-tokenizer.json: GPT-2's byte-level map, 256 byte tokens,
# a few merges and one special token. Run from tests/fuzz/.
import json
def b2u():
    bs = list(range(ord('!'), ord('~')+1)) + list(range(ord('¡'), ord('¬')+1)) + list(range(ord('®'), ord('ÿ')+1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
m = b2u()
vocab = {}
for b in range(256):
    vocab[m[b]] = len(vocab)
pairs = [('t','h'),('th','e'),('h','e'),('Ġ','t'),('Ġt','he'),('i','n'),('Ġ','a'),('e','r'),('o','n'),('Ġ','s'),('r','e'),
         ('a','n'),('Ġ','o'),('e','n'),('Ġ','w'),('o','r'),('Ġ','f'),('Ġf','o'),('Ġfo','x'),('Ġ','d'),('Ġd','o'),('Ġdo','g'),
         ('ĠĠ','ĠĠ'),('Ġ','Ġ'),('in','g'),('Ã','©')]
merges = []
for a, b in pairs:
    if a+b not in vocab: vocab[a+b] = len(vocab)
    merges.append(a + ' ' + b)
tok = {
  "version": "1.0", "truncation": None, "padding": None,
  "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": False, "special": True}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
  "post_processor": None,
  "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
  "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "vocab": vocab, "merges": merges},
}
open('tiny-tokenizer.json', 'w').write(json.dumps(tok, ensure_ascii=False, separators=(',', ':')) + '\n')
