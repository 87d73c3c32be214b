#!/usr/bin/env python3
"""Reshapes text and tools' JSON lines for ss-train and ss-score (used by
pipelines/train.mk and pipelines/scale.mk; no other logic):

  train_examples.py queries HALVES.jsonl > queries.jsonl
      HALVES: `ss-cat --full` of a `ss-tokenize --parts 2` stream (records
      P#0, P#1). Writes ss-retrieve's batch queries: {"id": P, "query": text
      of P#0, "exclude": [P#0, P#1], "k": K} (K from $K, default 10).
  train_examples.py examples HALVES.jsonl HITS.jsonl > examples.jsonl
      HITS: `ss-retrieve query --ids --json --order best-first` of those
      queries. Writes {"id": P, "query": text of P#0, "continuation": text
      of P#1, "chunks": [hit ids, best first]} per passage with both halves.
  train_examples.py articles NAME [LAST] < text > articles.jsonl
      text: ../shared/train's format (articles separated by an empty line).
      Writes {"id": "NAME:N", "text": article N} per article (N from 0), or
      only the LAST articles when LAST is given (a held-out tail).
  train_examples.py nll-pairs TOKENS.jsonl N > pairs.jsonl
      TOKENS: `ss-cat --full` of a token stream. Writes ss-score's pairs for
      the first N records of at least 2 tokens: {"id", "query_tokens": [the
      first token], "continuation_tokens": [the others]}: each record's
      next-token loss from the zero state, as ss-train --objective lm
      counts it.
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
    if len(argv) in (3, 4) and argv[1] == "articles":
        arts = [a.strip("\n") for a in sys.stdin.read().split("\n\n")]
        arts = [(i, a) for i, a in enumerate(arts) if a.strip()]
        for i, a in arts[-int(argv[3]):] if len(argv) == 4 else arts:
            print(json.dumps({"id": "%s:%d" % (argv[2], i), "text": a}))
        return 0
    if len(argv) == 4 and argv[1] == "nll-pairs":
        n = int(argv[3])
        with open(argv[2]) as f:
            for line in f:
                if n <= 0:
                    break
                r = json.loads(line)
                t = r["tokens"]
                if len(t) >= 2:
                    print(json.dumps({"id": r["id"], "query_tokens": t[:1],
                                      "continuation_tokens": t[1:]}))
                    n -= 1
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
