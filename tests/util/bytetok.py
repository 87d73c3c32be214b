#!/usr/bin/env python3
"""bytetok.py OUT.json — a byte-level BPE tokenizer.json with no merges: each byte of
the text is one token (ids 0-255 as GPT-2's byte-to-unicode table spells them). For
tests that tokenize text without the GPT-NeoX-20B tokenizer of ../shared.
ref: GPT-2 encoder.py bytes_to_unicode; HF tokenizers tokenizer.json."""
import json
import sys

bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
with open(sys.argv[1], "w") as f:
    json.dump({"normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
               "decoder": {"type": "ByteLevel"}, "added_tokens": [],
               "model": {"type": "BPE", "vocab": vocab, "merges": []}}, f)
