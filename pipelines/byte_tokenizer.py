#!/usr/bin/env python3
"""Write the real-text model's tokenizer.json: byte-level BPE without merges (ids 0..255 are the
bytes, in GPT-2's bytes_to_unicode alphabet, as gen/mkrecall's tokenizer) and Birdie's sentinels
as added special tokens, ids 256.. (lib/train/birdie.h: ss-train --objective birdie looks them up
by their text). usage: byte_tokenizer.py OUT.json"""
import json, sys

SENTINELS = ["<|copy|>", "<|deshuffle|>", "<|infill|>", "<|autoencode|>", "<|context|>",
             "<|start|>", "<|end|>", "<|answer|>", "<|mask|>", "<|done|>"]

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

m = bytes_to_unicode()
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}
                     for i, s in enumerate(SENTINELS)],
    "normalizer": {"type": "NFC"}, "pre_tokenizer": byte_level, "post_processor": None,
    "decoder": byte_level,
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": {m[b]: b for b in range(256)}, "merges": []},
}
with open(sys.argv[1], "w") as f:
    json.dump(tok, f, ensure_ascii=False)
