#!/usr/bin/env python3
"""SQuAD v2's "answer contains label" (birdie.txt A.15, Table 10): for the answerable questions
of a SQuAD v2 JSON file, greedy-decode up to MAX_TOKENS tokens after "CONTEXT\\n\\nQuestion: Q\\n
Answer:" with ss-decode --prompts (zero state, the model's tokenizer), and count a question right
when any of its gold answers appears in the output (case kept, spaces trimmed). Prints one TSV line
per model: model, questions, right, share. usage: squad_contains.py SQUAD.json N MAX_TOKENS SS_BIN
MODEL_DIR..."""
import json, os, subprocess, sys, tempfile

path, n, max_tokens, bindir, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
qs = []
for art in json.load(open(path))["data"]:
    for p in art["paragraphs"]:
        for qa in p["qas"]:
            if not qa["is_impossible"] and qa["answers"]:
                qs.append((p["context"], qa["question"], [a["text"].strip() for a in qa["answers"]]))
qs = qs[:n] if n > 0 else qs
with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    for i, (c, q, _) in enumerate(qs):
        f.write(json.dumps({"id": "q%d" % i, "prompt": "%s\n\nQuestion: %s\nAnswer:" % (c, q)}) + "\n")
print("model\tquestions\tright\tshare")
for m in models:
    out = subprocess.run([os.path.join(bindir, "ss-decode"), "-q", "--model", m, "--prompts", f.name,
                          "--no-state", "--jsonl", "--greedy", "-n", max_tokens, "--stop", "\n"],
                         check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    text = {}
    for line in out.splitlines():
        d = json.loads(line)
        text[d["id"]] = d.get("text", "")
    right = sum(any(a in text.get("q%d" % i, "") for a in golds) for i, (_, _, golds) in enumerate(qs))
    print("%s\t%d\t%d\t%.4f" % (m, len(qs), right, right / max(1, len(qs))))
os.unlink(f.name)
