#!/usr/bin/env python3
"""Helpers of tests/cli/gguf.sh: read and damage GGUF files (layout: ggml/include/gguf.h of
llama.cpp; lib/stream/gguf.h) with the standard library only.

  gguf.py a-log GGUF IN.safetensors OUT.safetensors
        copy IN with every backbone.layers.N.mixer.A_log replaced by logf(-A) of the GGUF's
        blk.N.ssm_a (glibc's logf, as the loader computes it): the HF weights the GGUF holds
  gguf.py patch GGUF OUT WHAT      write a damaged copy: WHAT is n-tensors (2^60 tensors),
        n-kv (2^60 keys), arch (general.architecture "mambaX"), k-quant (blk.0.ssm_in.weight
        typed Q4_K), offset (blk.0.ssm_in.weight's data past the end), version (version 1),
        huge (blk.0.ssm_d an F32 of 2^62 elements: 2^64 bytes)
  gguf.py add-tensor GGUF OUT NAME FROM   write a copy with tensor NAME first in the list,
        FROM's type, shape and a copy of its data appended
  gguf.py add-key GGUF OUT KEY VALUE      write a copy with the string pair KEY = VALUE
        appended to the metadata (KEY may be there already)
"""
import ctypes
import json
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def parse(b):
    """(kv {key: (offset of the value, type)}, tensors {name: (offset of the info, ne, type,
    data offset)}, data start)"""
    p = 24
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)

    def string(p):
        (n,) = struct.unpack_from("<Q", b, p)
        return b[p + 8 : p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def skip(p, t):
        if t == 8:
            return string(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(n):
                p = skip(p, et)
            return p
        return p + SCALAR[t]

    kv, tensors = {}, {}
    for _ in range(n_kv):
        k, p = string(p)
        (t,) = struct.unpack_from("<I", b, p)
        kv[k] = (p + 4, t)
        p = skip(p + 4, t)
    for _ in range(n_t):
        at = p
        name, p = string(p)
        (nd,) = struct.unpack_from("<I", b, p)
        ne = struct.unpack_from("<%dQ" % nd, b, p + 4)
        t, off = struct.unpack_from("<IQ", b, p + 4 + 8 * nd)
        tensors[name] = (at, ne, t, off)
        p += 4 + 8 * nd + 12
    align = 32
    if "general.alignment" in kv:
        (align,) = struct.unpack_from("<I", b, kv["general.alignment"][0])
    return kv, tensors, (p + align - 1) // align * align


def a_log(gguf, src, dst):
    libm = ctypes.CDLL("libm.so.6")
    libm.logf.restype = ctypes.c_float
    libm.logf.argtypes = [ctypes.c_float]
    g = open(gguf, "rb").read()
    _, tensors, data = parse(g)
    s = bytearray(open(src, "rb").read())
    (hn,) = struct.unpack_from("<Q", s, 0)
    header = json.loads(s[8 : 8 + hn])
    for name, e in header.items():
        if not name.endswith(".mixer.A_log"):
            continue
        layer = name.split(".")[2]
        _, ne, t, off = tensors["blk.%s.ssm_a" % layer]
        assert t == 0, "ssm_a is not F32"
        n = 1
        for x in ne:
            n *= x
        a = struct.unpack_from("<%df" % n, g, data + off)
        b, _ = e["data_offsets"]
        assert e["dtype"] == "F32"
        struct.pack_into("<%df" % n, s, 8 + hn + b, *[libm.logf(-x) for x in a])
    open(dst, "wb").write(s)


def patch(gguf, out, what):
    b = bytearray(open(gguf, "rb").read())
    kv, tensors, _ = parse(b)
    at, ne, t, off = tensors["blk.0.ssm_in.weight"]
    info = at + 8 + len("blk.0.ssm_in.weight") + 4 + 8 * len(ne)  # its type, then its offset
    if what == "n-tensors":
        struct.pack_into("<Q", b, 8, 1 << 60)
    elif what == "n-kv":
        struct.pack_into("<Q", b, 16, 1 << 60)
    elif what == "arch":
        p = kv["general.architecture"][0] + 8
        b[p : p + 6] = b"mambaX"
    elif what == "k-quant":
        struct.pack_into("<I", b, info, 12)
    elif what == "offset":
        struct.pack_into("<Q", b, info + 4, (len(b) + 4096) // 32 * 32)
    elif what == "version":
        struct.pack_into("<I", b, 4, 1)
    elif what == "huge":
        at_d, ne_d, _, _ = tensors["blk.0.ssm_d"]
        assert len(ne_d) == 2
        struct.pack_into("<QQ", b, at_d + 8 + len("blk.0.ssm_d") + 4, 1 << 31, 1 << 31)
    else:
        sys.exit("unknown patch " + what)
    open(out, "wb").write(b)


def gstr(s):
    return struct.pack("<Q", len(s)) + s


def rebuild(b, kvs, infos, data):
    """A GGUF of b's version with the raw key-value records kvs, the tensor infos
    [(name, ne, type, offset)] and the data section data (offsets relative to it)."""
    kv, _, _ = parse(b)
    align = 32
    if "general.alignment" in kv:
        (align,) = struct.unpack_from("<I", b, kv["general.alignment"][0])
    h = b[:8] + struct.pack("<QQ", len(infos), len(kvs)) + b"".join(kvs)
    for name, ne, t, off in infos:
        h += gstr(name) + struct.pack("<I%dQIQ" % len(ne), len(ne), *ne, t, off)
    return h + bytes(-len(h) % align) + data


def pieces(b):
    """b's raw key-value records, tensor infos (in file order) and data section."""
    kv, tensors, data = parse(b)
    starts = sorted(at - 4 - 8 - len(k.encode()) for k, (at, _) in kv.items())
    first_t = min(at for at, _, _, _ in tensors.values())
    raw = [bytes(b[x:y]) for x, y in zip(starts, starts[1:] + [first_t])]
    infos = sorted(((at, n.encode(), ne, t, off) for n, (at, ne, t, off) in tensors.items()))
    return raw, [i[1:] for i in infos], bytes(b[data:])


def add_tensor(gguf, out, name, src):
    b = open(gguf, "rb").read()
    raw, infos, data = pieces(b)
    _, ne, t, off = next(i for i in infos if i[0] == src.encode())
    n = 1
    for x in ne:
        n *= x
    size = {0: 4, 1: 2, 30: 2}[t] * n
    data += bytes(-len(data) % 32)
    infos.insert(0, (name.encode(), ne, t, len(data)))
    open(out, "wb").write(rebuild(b, raw, infos, data + data[off : off + size]))


def add_key(gguf, out, key, value):
    b = open(gguf, "rb").read()
    raw, infos, data = pieces(b)
    raw.append(gstr(key.encode()) + struct.pack("<I", 8) + gstr(value.encode()))
    open(out, "wb").write(rebuild(b, raw, infos, data))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"a-log": a_log, "patch": patch, "add-tensor": add_tensor, "add-key": add_key}[cmd](*args)
