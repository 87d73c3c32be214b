# The Python reader (python/ss_states.py) on the golden streams: c3 encoded by ss-encode and read
# back equals the independent golden arrays (llama.cpp conv/ssm, numpy logdecay); f16, bf16 (byte
# shuffled), q8 and q4 records read equal, bit for bit, what libss widens them to (ss-compose to f32);
# shuffle blocks at the 130m shape; Mamba-1 records; annotation frames; the caches of
# transformers and mamba_ssm; and bad input named by file and record. Needs Debian's
# python3-zstandard, python3-msgpack and python3-numpy (make deps); skipped without them.
set -eu
. "$SS_TOP/tests/util/golden.sh"
. "$SS_TOP/tests/util/pyreader.sh"
gen=$SS_TOP/${SS_BUILD:-build}/gen

ss-tokenize -q --whole "$G/t1/c3/text.txt" "$G/t1/c1/text.txt" >"$d/c.tok"
ss-encode -q --model "$T1" "$d/c.tok" >"$d/c.st"
for t in f16 bf16 q8 q4; do ss-encode -q --model "$T1" --state-dtype $t "$d/c.tok" >"$d/c.$t"; done
"$gen/mkstates" --shape 130m --dtype f16 --min-saving 0 1 "$d/big.f16" # compressed: shuffled
ss-compose -q --mode soup --state-dtype f32 "$d/big.f16" >"$d/big.f32"
"$gen/mkstates" --shape 130m --dtype f16 --min-saving 2 1 "$d/big-raw.f16" # a raw frame
"$gen/mkmodel" "$d/m1" --preset m1 --vocab 256 --pad-multiple 8 >/dev/null
python3 "$SS_TOP/tests/util/bytetok.py" "$d/tok.json"
printf 'a document about cats\n' >"$d/a.txt"
SS_TOKENIZER=$d/tok.json ss-tokenize -q --whole "$d/a.txt" | ss-encode -q --model "$d/m1" >"$d/m1.st"
ss-cat --full "$d/m1.st" >"$d/m1.json"

"$py" - "$d" "$G/t1" <<'PY' || fail "python reader"
import json, struct, subprocess, sys
import numpy as np, zstandard, msgpack
import ss_states as s
d, G = sys.argv[1], sys.argv[2]
def check(cond, what):
    if not cond:
        print("FAIL: " + what, file=sys.stderr); sys.exit(1)
# golden: c3, then c1, against llama.cpp's conv/ssm and numpy's logdecay (README tolerances)
st = list(s.states(d + "/c.st"))
check(len(st) == 2, "two records")
for r, c in zip(st, ("c3", "c1")):
    for k in ("ssm", "conv", "logdecay"):
        g = np.fromfile("%s/%s/%s.f32" % (G, c, k), "<f4")
        a = getattr(r, k)
        check(a.dtype == np.float32 and a.size == g.size, "%s %s: shape %s" % (c, k, a.shape))
        tol = 1e-5 * (1 + np.abs(g)) if k != "logdecay" else 1e-5 * np.abs(g) + 1e-6
        check(np.all(np.abs(a.reshape(-1) - g) <= tol), "%s %s: max diff %g" % (c, k, np.abs(a.reshape(-1) - g).max()))
    check(r.ssm.shape == (2, 8, 16, 16) and r.conv.shape == (2, 160, 3) and r.logdecay.shape == (2, 8), "shapes")
check(list(s.tokens(d + "/c.tok"))[0].tokens.size == st[0].n_tokens == 297, "c3's tokens")
# each dtype as libss widens it: ss-compose of one record (soup of one input is that input)
for t in ("f16", "bf16", "q8", "q4"):
    recs = list(s.states(d + "/c." + t))
    # f16/bf16 shuffled when compressed, not in a raw frame; q8 never
    check(recs[0].dtype == t and (t[0] != "q" or recs[0].map.get("shuffle") is None), t + ": dtype, shuffle")
    one = d + "/one." + t
    for i, r in enumerate(recs):
        raw = [m for o, m in s.records(d + "/c." + t)][i]
        open(one, "wb").write(zstandard.ZstdCompressor(write_content_size=True, write_checksum=True).compress(msgpack.packb(raw)))
        f32 = subprocess.run(["ss-compose", "-q", "--mode", "soup", "--state-dtype", "f32", one], check=True, capture_output=True).stdout
        open(one + ".f32", "wb").write(f32)
        w = list(s.states(one + ".f32"))[0]
        check(np.array_equal(w.ssm, r.ssm) and np.array_equal(w.conv, r.conv), "%s record %d: not libss's widening" % (t, i))
        tol = 0.08 if t == "q4" else 0.02  # half a code: 1/14 of a row's max|x| in q4
        check(np.abs(r.ssm - st[i].ssm).max() <= tol * np.abs(st[i].ssm).max(), "%s record %d: far from f32" % (t, i))
# several shuffle blocks (4.7 M elements in blocks of 262144)
a, b = list(s.states(d + "/big.f16"))[0], list(s.states(d + "/big.f32"))[0]
check(a.map["shuffle"] == 262144 and a.ssm.size > 262144 and np.array_equal(a.ssm, b.ssm) and np.array_equal(a.conv, b.conv), "130m f16")
# the same record as a raw frame (formats/states.md "raw frames"): unshuffled, equal
c = list(s.states(d + "/big-raw.f16"))[0]
check(c.map.get("shuffle") is None and np.array_equal(c.ssm, b.ssm) and np.array_equal(c.conv, b.conv), "130m f16 raw")
# Mamba-1: arrays equal ss-cat's rendering
m1 = list(s.states(d + "/m1.st"))[0]
j = json.loads(open(d + "/m1.json").readline())
check(m1.arch == "mamba1" and m1.headdim == 1 and m1.logdecay.shape == (m1.n_layer, m1.nheads, m1.d_state), "mamba1 shapes")
for k in ("ssm", "conv", "logdecay"):
    check(np.array_equal(getattr(m1, k).reshape(-1), np.array(j[k]["data"] if isinstance(j[k], dict) else j[k], np.float32).reshape(-1)), "mamba1 " + k)
# caches: d_conv columns, column 0 zero, the rest ours; ssm broadcast over the batch
c = s.hf_cache_arrays(st[0], 3)
check(c["conv_states"].shape == (2, 3, 160, 4) and c["ssm_states"].shape == (2, 3, 8, 16, 16), "hf cache shapes")
check(np.all(c["conv_states"][..., 0] == 0) and np.array_equal(c["conv_states"][:, 2, :, 1:], st[0].conv), "hf conv layout")
check(np.array_equal(c["ssm_states"][:, 1], st[0].ssm), "hf ssm")
k = s.mamba_ssm_states(m1)
check(sorted(k) == list(range(m1.n_layer)) and k[0][0].shape == (1, m1.conv_dim, m1.d_conv) and k[0][1].shape == (1, m1.nheads, m1.d_state), "mamba_ssm dict")
# annotation frame before a record: rank and score apply to it alone
blob = open(d + "/c.st", "rb").read()
note = msgpack.packb({"rank": 1, "score": 2.5})
open(d + "/ann.st", "wb").write(struct.pack("<II", 0x184D2A53, len(note)) + note + blob)
r = list(s.states(d + "/ann.st"))
check((r[0].rank, r[0].score, r[1].rank) == (1, 2.5, None), "annotation")
# bad input: named by file and record, nothing half-read
def refused(data, what, **kw):
    open(d + "/bad", "wb").write(data)
    try:
        list(s.states(d + "/bad", **kw))
    except s.FormatError as e:
        check(str(e).startswith(d + "/bad: record ") and what in str(e), "message: " + str(e))
        return
    check(False, "accepted: " + what)
first = [o for o, m in s.records(d + "/c.st")][1]
refused(blob[:-7], "record 1 (byte %d)" % first)
refused(blob[:first + 3], "truncated frame header")
refused(blob[:first] + b"x" * 40, "not a zstd frame")
refused(blob, "over the limit", max_record=1000)
bad = dict([m for o, m in s.records(d + "/c.st")][0]); bad["ssm"] = bad["ssm"][:-4]
refused(zstandard.ZstdCompressor(write_content_size=True).compress(msgpack.packb(bad)), 'field "ssm"')
try:
    list(s.states(d + "/c.tok"))
    check(False, "a token stream read as states")
except s.FormatError as e:
    check('format "ss-tokens"' in str(e), str(e))
PY
