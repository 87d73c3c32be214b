#!/usr/bin/env python3
"""Wikipedia text (../shared/train parts: articles separated by an empty line, the first line the
title) as JSON lines {"id", "text"}, one article each, until MAX_BYTES bytes of articles; with
EXTRA.jsonl and PER, PER of EXTRA's lines (in order, from the start again at its end) after each
article, so that a run reading the stream from its start sees both mixed throughout.
usage: wiki_docs.py SRC.txt.zst MAX_BYTES OUT.jsonl [EXTRA.jsonl PER]"""
import itertools, json, subprocess, sys

src, max_bytes, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
extra = itertools.cycle(open(sys.argv[4]).read().splitlines()) if len(sys.argv) > 4 else None
per = int(sys.argv[5]) if extra else 0
txt = subprocess.run(["zstdcat", src], check=True, capture_output=True).stdout.decode("utf-8", "replace")
n = 0
with open(out, "w") as f:
    for i, a in enumerate(txt.split("\n\n")):
        a = a.strip("\n")
        if len(a) < 512:
            continue
        f.write(json.dumps({"id": "%s:%d" % (src.rsplit("/", 1)[-1], i), "text": a}) + "\n")
        for _ in range(per):
            f.write(next(extra) + "\n")
        n += len(a.encode())
        if n >= max_bytes:
            break
