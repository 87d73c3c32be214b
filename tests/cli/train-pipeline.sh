# pipelines/train.mk on a small zstd text in the layout of ../shared/train: passages split in
# halves, each example's chunks retrieved from the halves with its own passage left out, then
# two bp2c steps of ss-train on the result. Run by tests/run.
set -eu
. "$SS_TOP/tests/util/golden.sh"
mkdir "$d/train"
grep -v '^ *$' "$SS_TOP/data/wikitext-2-raw.test.hf-crlf.raw" | head -n 40 | zstd -q >"$d/train/part.txt.zst"
make --no-print-directory -s -f "$SS_TOP/pipelines/train.mk" TRAIN="$d/train" PARTS=part.txt.zst \
	OUT="$d/out" MODEL="$T1" PASSAGES=12 MIN_BYTES=100 K=4 THREADS=1 all bp2c STEPS=2 \
	TRAIN_OPTS="--batch-tokens 2048"
[ "$(wc -l <"$d/out/passages.txt")" -eq 12 ] || fail "passages: $(wc -l <"$d/out/passages.txt")"
python3 - "$d/out" <<'PY' || fail "examples.jsonl"
import json, sys
o = sys.argv[1]
halves = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(o + "/halves.jsonl")}
ex = [json.loads(l) for l in open(o + "/examples.jsonl")]
assert len(ex) == 12, len(ex)
for e in ex:
    p = e["id"]
    assert e["query"] == halves[p + "#0"] and e["continuation"] == halves[p + "#1"], p
    assert 0 < len(e["chunks"]) <= 4, e["chunks"]
    assert all(c in halves and not c.startswith(p + "#") for c in e["chunks"]), (p, e["chunks"])
PY
[ "$(wc -l <"$d/out/bp2c.log")" -eq 2 ] || fail "bp2c ran $(wc -l <"$d/out/bp2c.log") steps"
[ -s "$d/out/bp2c/model.safetensors" ] || fail "no checkpoint"
