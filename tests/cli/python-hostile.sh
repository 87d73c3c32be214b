# The Python reader (python/ss_states.py) on hostile and large input, as the C reader holds it
# (issue 48 #2-#5): a frame producing more than it declares stops with FormatError under a
# memory limit; records are read one at a time (the first before the rest of the input is
# read, memory in proportion to the largest record); a shuffle of 1 is unshuffled in bounded
# time and equals the element-by-element definition; every malformed record or skippable frame
# that ss-cat refuses is a FormatError naming file and record, from the API and the CLI (one
# line, exit 1), never a raw ValueError or an accepted record. Skipped without python3-zstandard,
# python3-msgpack and python3-numpy (make deps).
set -eu
. "$SS_TOP/tests/util/golden.sh"
. "$SS_TOP/tests/util/pyreader.sh"
gen=$SS_TOP/${SS_BUILD:-build}/gen
"$gen/mkstates" --shape 130m --dtype f16 8 "$d/eight.f16"

# The hostile files: each ss-cat refuses; the Python reader must refuse them alike.
"$py" - "$d" <<'PY' || fail "making the hostile files"
import struct, sys, msgpack, zstandard
d = sys.argv[1]
def frame(m):
    return zstandard.ZstdCompressor(write_content_size=True, write_checksum=True).compress(msgpack.packb(m))
def skippable(magic, payload):
    return struct.pack("<II", magic, len(payload)) + payload
# a 131 KB frame declaring 500 MiB whose 32768 RLE blocks of 128 KiB make 4 GiB
blocks = bytearray()
for i in range(32768):
    blocks += struct.pack("<I", 131072 << 3 | 1 << 1 | (i == 32767))[:3] + b"\x80"
open(d + "/bomb", "wb").write(struct.pack("<IBBI", 0xFD2FB528, 0x80, 0x68, 500 << 20) + blocks)
ok = {"format": "ss-states", "version": 1, "id": "s", "fingerprint": "ab", "arch": "mamba2", "n_layer": 1,
      "nheads": 1, "headdim": 1, "d_state": 1, "conv_dim": 1, "d_conv": 2, "n_tokens": 1, "dtype": "f32",
      "logdecay": bytes(4), "conv": bytes(4), "ssm": bytes(4)}
open(d + "/ok", "wb").write(frame(ok))
bad = {
    "wrap": dict(n_layer=4, nheads=4, headdim=2**30, d_state=2**30, logdecay=bytes(64), conv=bytes(16), ssm=b""),
    "wrap31": dict(n_layer=2**31 - 1, nheads=2**31 - 1, headdim=2**31 - 1, d_state=2**31 - 1),
    "id5": dict(id=5), "idnull": dict(id=None), "fpbin": dict(fingerprint=b"ab"), "versiontrue": dict(version=True),
    "version2": dict(version=2), "nanlogdecay": dict(logdecay=b"\x00\x00\xc0\x7f"), "archmissing": dict(arch=None),
    "dimfloat": dict(nheads=1.0), "dimbool": dict(d_state=True), "dconv1": dict(d_conv=1, conv=b""),
    "ntokneg": dict(n_tokens=-1), "shuffle0": dict(shuffle=0), "dtype": dict(dtype="f64"),
    "provlist": dict(provenance=[1]), "provnull": dict(provenance=None), "provsrc": dict(provenance={"mode": "soup", "sources": [1]}),
    "provweights": dict(provenance={"mode": "soup", "sources": ["a"], "weights": b"\x00\x00\x80\x7f"}),
    "rankonly": dict(rank=True, score=1.0), "inf": dict(ssm=b"\x00\x00\x80\x7f"),
    "mamba1": dict(arch="mamba1", headdim=2, ssm=bytes(8)), "format": dict(format="ss-other"),
}
for name, change in bad.items():
    m = dict(ok)
    m.update(change)
    if m.get("arch", 0) is None:
        del m["arch"]
    open(d + "/" + name, "wb").write(frame(m))
# a key twice (msgpack allows it; C refuses the record)
pk = msgpack.Packer()
body = pk.pack_map_pairs(list(ok.items()) + [("id", "t")])
open(d + "/dupkey", "wb").write(zstandard.ZstdCompressor(write_content_size=True).compress(body))
tok = {"format": "ss-tokens", "version": 1, "id": "t", "n_tokens": 1, "tokens": bytes(4)}
for name, change in {"tokid": dict(id=b"t"), "toktext": dict(text=5), "tokn": dict(n_tokens=2**31)}.items():
    m = dict(tok); m.update(change)
    open(d + "/" + name, "wb").write(frame(m))
okf = open(d + "/ok", "rb").read()
open(d + "/annbool", "wb").write(skippable(0x184D2A53, msgpack.packb({"rank": True, "score": 1.0})) + okf)
open(d + "/annint", "wb").write(skippable(0x184D2A53, msgpack.packb({"rank": 1, "score": 1})) + okf)
open(d + "/anntrunc", "wb").write(skippable(0x184D2A53, b"\x92\x01") + okf)
open(d + "/plannan", "wb").write(skippable(0x184D2A54, msgpack.packb({"n": 1, "logdecay": b"\x00\x00\xc0\x7f"})) + okf)
open(d + "/plann", "wb").write(skippable(0x184D2A54, msgpack.packb({"n": 5, "logdecay": bytes(12)})) + okf)
open(d + "/planlist", "wb").write(skippable(0x184D2A54, msgpack.packb([1])) + okf)
open(d + "/skiptrunc", "wb").write(okf + struct.pack("<II", 0x184D2A5E, 100) + b"x" * 99)
open(d + "/skiphuge", "wb").write(okf + struct.pack("<II", 0x184D2A5E, 0xFFFFFFF0) + b"x" * 99)
open(d + "/empty", "wb").write(zstandard.ZstdCompressor(write_content_size=True).compress(b""))
open(d + "/trailing", "wb").write(zstandard.ZstdCompressor(write_content_size=True).compress(msgpack.packb(ok) + b"\xc0"))
PY
cd "$d"
hostile="bomb wrap wrap31 id5 idnull fpbin versiontrue version2 nanlogdecay archmissing dimfloat dimbool dconv1
ntokneg shuffle0 dtype provlist provnull provsrc provweights rankonly inf mamba1 format dupkey tokid toktext tokn
annbool annint anntrunc plannan plann planlist skiptrunc skiphuge empty trailing"
for f in ok $hostile; do
	set +e; ss-cat "$f" >/dev/null 2>&1; rc=$?; set -e
	if [ "$f" = ok ]; then [ "$rc" -eq 0 ] || fail "ss-cat refuses the valid record"
	else [ "$rc" -eq 1 ] || fail "ss-cat accepts $f (exit $rc): not a case for this test"; fi
done

# The CLI: one line naming file and record, exit 1, within a 2 GiB address space and 20 s.
for f in $hostile; do
	set +e
	(ulimit -v 2097152; timeout 20 "$py" "$SS_TOP/python/ss_states.py" "$f") >out 2>err
	rc=$?
	set -e
	[ "$rc" -eq 1 ] || { cat err >&2; fail "$f: exit $rc, expected 1"; }
	[ "$(wc -l <err)" -eq 1 ] && grep -q "^ss_states: $f: record [0-9]" err || { cat err >&2; fail "$f: message"; }
done
(ulimit -v 2097152; "$py" "$SS_TOP/python/ss_states.py" bomb 2>&1 | grep -q "more than its declared 524288000") ||
	fail "bomb: not refused as a frame holding more than it declares"

# The API: FormatError (a ValueError) for each, never another exception, never a record.
"$py" - $hostile <<'PY' || fail "python API on hostile input"
import sys, ss_states as s
for f in sys.argv[1:]:
    kind = s.tokens if f.startswith("tok") else s.states
    try:
        list(kind(f))
    except s.FormatError as e:
        assert str(e).startswith(f + ": record "), (f, str(e))
        continue
    except BaseException as e:
        sys.exit("FAIL: %s: %s %s" % (f, type(e).__name__, e))
    sys.exit("FAIL: %s accepted" % f)
PY

# Streaming: the first record comes before more than its frame and 1 MiB of input is read, from
# a file object that is not seekable (a pipe); the peak memory of reading eight 9.7 MB records
# (f32 19.4 MB) stays within four records decoded over what the imports take (not the file).
"$py" - eight.f16 <<'PY' || fail "streaming: the first record"
import io, sys, ss_states as s
class Pipe(io.RawIOBase):
    def __init__(self, data): self.data, self.pos = data, 0
    def readable(self): return True
    def readinto(self, b):
        n = min(len(b), len(self.data) - self.pos, 65536)
        b[:n] = self.data[self.pos:self.pos + n]; self.pos += n
        return n
data = open(sys.argv[1], "rb").read()
p = Pipe(data)
first = next(s.states(p))
offs = [o for o, m in s.records(io.BytesIO(data))]
assert len(offs) == 8 and p.pos <= offs[1] + (1 << 20), "read %d bytes for the first record (it ends at %d)" % (p.pos, offs[1])
assert first.ssm.shape == (24, 24, 64, 128)
PY
"$py" - eight.f16 <<'PY' || fail "streaming: memory"
import resource, sys, ss_states as s
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(1 for st in s.states(sys.argv[1]))
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
assert n == 8, n
print("peak grew by %.0f MB reading 8 records of 9.7 MB (f32 19.4 MB)" % grew)
assert grew <= 4 * 19.4, "peak memory grew by %.0f MB" % grew
PY

# shuffle: a record with shuffle = 1 (9.7 MB of f16 zeros, 500 bytes stored) reads in bounded
# time; the vectorised unshuffle equals the definition (byte j of element i at j*m + i) on odd
# block sizes, the last block shorter.
"$py" - <<'PY' || fail "shuffle"
import time, msgpack, numpy as np, zstandard, ss_states as s
L, H, P, N, C, K = 24, 24, 64, 128, 1792, 4
m = {"format": "ss-states", "version": 1, "id": "z", "fingerprint": "ab", "arch": "mamba2", "n_layer": L,
     "nheads": H, "headdim": P, "d_state": N, "conv_dim": C, "d_conv": K, "n_tokens": 1, "dtype": "f16",
     "shuffle": 1, "logdecay": bytes(4 * L * H), "conv": bytes(2 * L * C * (K - 1)), "ssm": bytes(2 * L * H * P * N)}
open("shuf1", "wb").write(zstandard.ZstdCompressor(write_content_size=True).compress(msgpack.packb(m)))
t = time.time()
st = next(s.states("shuf1"))
took = time.time() - t
assert st.ssm.shape == (L, H, P, N) and not st.ssm.any(), "shuffle 1"
assert took < 3, "shuffle 1 took %.1f s" % took
rng = np.random.default_rng(48)
for es, n, block in ((2, 1000, 1), (2, 1000, 7), (4, 1000, 333), (2, 5, 1048576), (1, 9, 4)):
    x = rng.integers(0, 256, n * es, dtype=np.uint8).tobytes()
    want = bytearray(len(x))
    for e0 in range(0, n, block):
        mm = min(block, n - e0)
        for i in range(mm):
            for j in range(es):
                want[(e0 + i) * es + j] = x[e0 * es + j * mm + i]
    assert bytes(s._unshuffle(x, es, n, block)) == bytes(want), (es, n, block)
PY
