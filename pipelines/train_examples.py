#!/usr/bin/env python3
"""Joins two tools' JSON lines into ss-train's bp2c/bptc examples (used by
pipelines/train.mk; no other logic):

  train_examples.py queries HALVES.jsonl > queries.jsonl
      HALVES: `ss-cat --full` of a `ss-tokenize --parts 2` stream (records
      P#0, P#1). Writes ss-retrieve's batch queries: {"id": P, "query": text
      of P#0, "exclude": [P#0, P#1], "k": K} (K from $K, default 10).
  train_examples.py examples HALVES.jsonl HITS.jsonl > examples.jsonl
      HITS: `ss-retrieve query --ids --json --order best-first` of those
      queries. Writes {"id": P, "query": text of P#0, "continuation": text
      of P#1, "chunks": [hit ids, best first]} per passage with both halves.
"""
import json
import os
import sys


def halves(path):
    """{passage: {"0": text, "1": text}} in stream order."""
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            pid, sep, h = r["id"].rpartition("#")
            if sep and h in ("0", "1"):
                out.setdefault(pid, {})[h] = r.get("text") or ""
    return out


def main(argv):
    if len(argv) >= 3 and argv[1] == "queries":
        k = int(os.environ.get("K", "10"))
        for pid, hv in halves(argv[2]).items():
            if "0" in hv and "1" in hv:
                print(json.dumps({"id": pid, "query": hv["0"], "exclude": [pid + "#0", pid + "#1"],
                                  "k": k}))
        return 0
    if len(argv) >= 4 and argv[1] == "examples":
        hits = {}
        with open(argv[3]) as f:
            for line in f:
                r = json.loads(line)
                hits.setdefault(r["query"], []).append((r["rank"], r["id"]))
        for pid, hv in halves(argv[2]).items():
            if "0" in hv and "1" in hv:
                chunks = [i for _, i in sorted(hits.get(pid, []))]
                print(json.dumps({"id": pid, "query": hv["0"], "continuation": hv["1"],
                                  "chunks": chunks}))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
