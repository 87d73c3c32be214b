#!/usr/bin/env python3
"""Context use on held-out real text: for N chunks B (CHUNK bytes, drawn from articles of SRC),
the NLL of B after a blank line given an earlier chunk A of its own article ("own"), a chunk of
another article ("other") and nothing ("none"), scored by ss-score --pairs from the zero state
with the query A + "\\n\\n" (the recurrence makes that A's stored state continued by "\\n\\n").
SRC: a ../shared/train part (.zst: articles separated by an empty line) or WikiText raw
(articles start at " = Title = " lines).
Prints one TSV line per model: model, nats per token of none / other / own, and the gain of own
over none in percent. usage: context_use.py SRC.txt.zst SEED N CHUNK SS_BIN MODEL_DIR..."""
import json, os, random, re, statistics, subprocess, sys, tempfile

src, seed, n, chunk, bindir, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5], sys.argv[6:]
r = random.Random(seed)
if src.endswith(".zst"):  # ../shared/train: articles separated by an empty line
    txt = subprocess.run(["zstdcat", src], check=True, capture_output=True).stdout.decode("utf-8", "replace")
    arts = [a.strip("\n") for a in txt.split("\n\n")]
else:  # WikiText raw: an article starts at a " = Title = " line
    arts = re.split(r"\n(?= = [^=].* = \r?\n)", open(src, encoding="utf-8", newline="").read())
arts = [a.encode() for a in arts]
arts = [a for a in arts if len(a) > 6 * chunk]

def cut(a, i):
    return a[i * chunk:(i + 1) * chunk].decode("utf-8", "ignore")

pairs = []
for q in range(n):
    ai = r.randrange(len(arts))
    a, k = arts[ai], len(arts[ai]) // chunk
    j = r.randrange(1, k)
    i = r.randrange(0, j)
    o = arts[(ai + 1 + r.randrange(len(arts) - 1)) % len(arts)]
    b = cut(a, j)
    pairs += [{"id": "own:%d" % q, "query": cut(a, i) + "\n\n", "continuation": b},
              {"id": "none:%d" % q, "query": "\n\n", "continuation": b},
              {"id": "other:%d" % q, "query": cut(o, r.randrange(len(o) // chunk)) + "\n\n",
               "continuation": b}]
with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    f.write("".join(json.dumps(p) + "\n" for p in pairs))
print("model\tnone\tother\town\tgain_own_%")
for m in models:
    out = subprocess.run([os.path.join(bindir, "ss-score"), "-q", "--model", m, "--no-state",
                          "--pairs", f.name], check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        res.setdefault(d["id"].split(":")[0], []).append(d["sum_nll"] / max(1, d["n_tokens"]))
    mean = {k: statistics.mean(v) for k, v in res.items()}
    print("%s\t%.4f\t%.4f\t%.4f\t%.2f" % (m, mean["none"], mean["other"], mean["own"],
                                        100 * (1 - mean["own"] / mean["none"])))
os.unlink(f.name)
