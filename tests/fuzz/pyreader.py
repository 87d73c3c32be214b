"""Fuzz target of the Python reader (python/ss_states.py): a deterministic mutation loop over the
C fuzzers' seed corpora (seeds/stream, seeds/q8), no atheris, no hypothesis.

Each input is a seed mutated byte by byte (bits flipped, bytes set, ranges cut, repeated or
spliced from another seed) or field by field (a record's map decoded, one value replaced by one
of another type or range, a key dropped or repeated, then packed and compressed again; its
declared size changed; an annotation or plan frame put before it), read whole by the reader as
its CLI reads it (states and tokens). The reader must return records or raise FormatError:

  - any other exception is a failure (the input is written to --out, the traceback printed);
  - memory: the process runs under RLIMIT_AS (the imports' address space + --mem MiB), so a
    MemoryError is a failure; max_record is 4 MiB for one input in four;
  - time: an input that takes more than --slow seconds is a failure;
  - what is accepted is as documented: conv, ssm finite f32 of the dims' shapes, logdecay <= 0.

With --ss-cat BIN, every --diff'th input is also given to ss-cat, and the two must agree on
whether it is a valid stream (except an unknown arch, which libss reads as Mamba-2).

Usage: pyreader.py [--seconds S] [--seed N] [--mem MiB] [--slow S] [--out DIR] [--ss-cat BIN]
                   [--diff N] SEEDDIR...   (prints one summary line; exit 1 on a failure)
"""
import argparse
import io
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import msgpack
import numpy as np
import zstandard

import ss_states as ss

INTERESTING = [None, True, False, 0, 1, -1, 2, 255, 2**16, 2**24, 2**24 + 1, 2**31 - 1, 2**31, 2**32,
               2**62, 2**63 - 1, 2**64 - 1, -2**63, 0.5, -0.0, float("nan"), float("inf"), "", "mamba1",
               "mamba2", "f16", "bf16", "q8", "f32", "x" * 70, b"", b"\x00" * 4, b"\x00\x00\xc0\x7f",
               [], ["a"], {}, {"mode": "soup", "sources": ["a", "b"]}, {"rank": 1, "score": 1.0}]


def frames(data):
    """The record maps of a seed (as far as it is valid)."""
    out = []
    try:
        for off, m in ss.records(io.BytesIO(data)):
            out.append(dict(m))
    except ss.FormatError:
        pass
    return out


def pack(m, dup=None):
    pairs = list(m.items())
    if dup is not None and pairs:
        pairs.append(pairs[dup % len(pairs)])
    return msgpack.Packer(use_bin_type=True).pack_map_pairs(pairs)


def compress(body, rng):
    f = bytearray(zstandard.ZstdCompressor(level=rng.choice((1, 3)), write_content_size=True,
                                           write_checksum=rng.random() < 0.5).compress(body))
    if rng.random() < 0.1:  # declare another size
        fhd = f[4]
        single, flag = fhd >> 5 & 1, fhd >> 6
        n = (single, 2, 4, 8)[flag]
        at = 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3]
        if n:
            v = int.from_bytes(f[at:at + n], "little") + rng.choice((-1, 1, 1000, -len(body) // 2))
            v = max(0, min(v, 2 ** (8 * n) - 1))
            f[at:at + n] = v.to_bytes(n, "little")
    return bytes(f)


def skippable(magic, payload):
    return struct.pack("<II", magic, len(payload)) + payload


def mutate_fields(maps, rng):
    m = dict(rng.choice(maps))
    keys = list(m)
    k = rng.choice(keys + ["shuffle", "rank", "provenance", "conv_scale", "text"])
    r = rng.random()
    if r < 0.15 and k in m:
        del m[k]
    elif r < 0.3 and isinstance(m.get(k), bytes):
        b = m[k]
        cut = rng.randrange(len(b) + 1)
        m[k] = b[:cut] if rng.random() < 0.5 else b + bytes(rng.randrange(1, 9))
    elif r < 0.45 and isinstance(m.get(k), bytes) and m[k]:
        b = bytearray(m[k])
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        m[k] = bytes(b)
    elif r < 0.55 and isinstance(m.get(k), int) and not isinstance(m[k], bool):
        m[k] = m[k] * rng.choice((2, 3, 1 << 20)) + rng.choice((0, 1, -1))
    else:
        m[k] = rng.choice(INTERESTING)
    out = compress(pack(m, rng.randrange(100) if rng.random() < 0.1 else None), rng)
    r = rng.random()
    if r < 0.1:
        note = {"rank": rng.choice(INTERESTING), "score": rng.choice(INTERESTING)}
        out = skippable(0x184D2A53, msgpack.packb(note)) + out
    elif r < 0.2:
        plan = {"n": rng.choice((1, 2, 5, 0, -1, True)), "logdecay": rng.choice(INTERESTING + [bytes(8), bytes(12)])}
        out = skippable(0x184D2A54, msgpack.packb(plan)) + out
    return out


def mutate_bytes(seeds, rng):
    b = bytearray(rng.choice(seeds))
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        r = rng.random()
        if not b:
            break
        i = rng.randrange(len(b))
        if r < 0.3:
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.5:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif r < 0.6:
            del b[i:i + rng.randrange(1, 64)]
        elif r < 0.7:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randrange(1, 64)]
        elif r < 0.8:
            b = b[:i]
        elif r < 0.9:
            other = rng.choice(seeds)
            b = b[:i] + other[rng.randrange(len(other)):]
        else:
            b[i:i + 4] = struct.pack("<I", rng.choice((0xFD2FB528, 0x184D2A50, 0x184D2A53, 0x184D2A54, 0xFFFFFFFF)))
    return bytes(b)


def check_accepted(r):
    if isinstance(r, ss.State):
        for k, a in (("conv", r.conv), ("ssm", r.ssm)):
            assert a.dtype == np.float32 and np.all(np.isfinite(a)), k
        assert np.all(r.logdecay <= 0)
        assert r.ssm.shape == (r.n_layer, r.nheads, r.headdim, r.d_state)
        assert r.conv.shape == (r.n_layer, r.conv_dim, r.d_conv - 1)
    else:
        assert r.tokens.dtype == np.int32 and r.tokens.size == r.map["n_tokens"]


def read_all(data, max_record):
    """('ok', None) or ('refused', message); anything but FormatError propagates."""
    try:
        for off, r in ss._typed(io.BytesIO(data), None, max_record):
            check_accepted(r)
    except ss.FormatError as e:
        return "refused", str(e)
    return "ok", None


def _own_address_space():
    """The child's RLIMIT_AS back to the hard limit: the margin is this process's, and an ASan
    build of ss-cat cannot even start under it (its shadow memory is terabytes of address space)."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def ss_cat_says(bin_, data, tmp):
    """ "ok" (exit 0) or "refused" (exit 1, ss-cat's one-line error); anything else (a crash, a
    sanitizer's report) raises."""
    path = os.path.join(tmp, "in")
    with open(path, "wb") as f:
        f.write(data)
    r = subprocess.run([bin_, path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
                       preexec_fn=_own_address_space)
    if r.returncode not in (0, 1):
        raise RuntimeError("ss-cat exit %d on %s: %s" % (r.returncode, path, r.stderr.decode(errors="replace")[-2000:]))
    return "ok" if r.returncode == 0 else "refused"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--mem", type=int, default=1024)
    ap.add_argument("--slow", type=float, default=5)
    ap.add_argument("--out", default=".")
    ap.add_argument("--ss-cat")
    ap.add_argument("--diff", type=int, default=20)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    seeds = []
    for d in a.dirs:
        for n in sorted(os.listdir(d)):
            seeds.append(open(os.path.join(d, n), "rb").read())
    maps = [m for s in seeds for m in frames(s)]
    vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + (a.mem << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
    rng = random.Random(a.seed)
    counts = {"ok": 0, "refused": 0}
    n = diffs = 0
    slowest = 0.0
    t0 = time.time()
    tmp = tempfile.mkdtemp()
    while time.time() - t0 < a.seconds:
        data = mutate_fields(maps, rng) if rng.random() < 0.5 else mutate_bytes(seeds, rng)
        if rng.random() < 0.1:
            data += rng.choice(seeds)
        max_record = 4 << 20 if rng.random() < 0.25 else ss.MAX_RECORD
        t = time.time()
        try:
            got, why = read_all(data, max_record)
        except BaseException as e:
            path = os.path.join(a.out, "pyreader-crash-%d" % n)
            with open(path, "wb") as f:
                f.write(data)
            traceback.print_exc()
            print("FAIL: input %d (%s): %s escaped, not FormatError" % (n, path, type(e).__name__))
            return 1
        took = time.time() - t
        slowest = max(slowest, took)
        if took > a.slow:
            path = os.path.join(a.out, "pyreader-slow-%d" % n)
            with open(path, "wb") as f:
                f.write(data)
            print("FAIL: input %d (%s) took %.1f s" % (n, path, took))
            return 1
        counts[got] += 1
        if a.ss_cat and n % a.diff == 0 and max_record == ss.MAX_RECORD:
            c = ss_cat_says(a.ss_cat, data, tmp)
            diffs += 1
            if c != got and not (why and 'field "arch"' in why):
                path = os.path.join(a.out, "pyreader-diff-%d" % n)
                with open(path, "wb") as f:
                    f.write(data)
                print("FAIL: input %d (%s): ss-cat says %s, the Python reader %s" % (n, path, c, got))
                return 1
        n += 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print("pyreader: %d inputs in %.1f s (%d read, %d refused; %d also given to ss-cat, agreed), slowest %.2f s, "
          "peak RSS %d MB under a %d MiB address-space margin" % (n, time.time() - t0, counts["ok"], counts["refused"],
                                                                  diffs, slowest, peak, a.mem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
