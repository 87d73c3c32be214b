#!/usr/bin/env python3
"""The MS MARCO sample as ss-eval recall's data (formats/recall.md), for passage retrieval with and
without reranking by the states (issue 47): every passage of every query one document of a pooled
corpus (id qNNNpMM), and one query line per query with exactly one selected passage and at least
MIN passages: "key" the query's text (what ss-eval recall --retrieve searches for), "gold" the
selected passage, "chunks" the query's passages (gold first), "continuation" its first answer.
usage: msmarco_recall.py SAMPLE.json OUT_DIR [MIN=5]  (writes OUT_DIR/corpus.jsonl, queries.jsonl)"""
import json, os, sys

src, out = sys.argv[1], sys.argv[2]
least = int(sys.argv[3]) if len(sys.argv) > 3 else 5
with open(os.path.join(out, "corpus.jsonl"), "w") as c, open(os.path.join(out, "queries.jsonl"), "w") as q:
    for i, x in enumerate(json.load(open(src))):
        sel, txt = x["passages"]["is_selected"], x["passages"]["passage_text"]
        ids = ["q%03dp%02d" % (i, j) for j in range(len(txt))]
        for pid, t in zip(ids, txt):
            c.write(json.dumps({"id": pid, "text": t}) + "\n")
        if sum(sel) != 1 or len(txt) < least:
            continue
        gold = ids[sel.index(1)]
        q.write(json.dumps({"id": "q%03d" % i, "key": x["query"], "query": "\n" + x["query"] + "\n",
                            "continuation": " " + (x.get("answers") or [""])[0],
                            "chunks": [gold] + [d for d in ids if d != gold], "gold": gold,
                            "gold_pos": 0}) + "\n")
