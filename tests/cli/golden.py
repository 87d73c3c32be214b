#!/usr/bin/env python3
"""Helpers of the model tools' CLI tests (encode.sh, decode.sh, score.sh):
read golden raw arrays (tests/fixtures/golden/README.md §1: little-endian, C order) and
compare them with what the tools print. Exit 0 when a check holds, 1 with the
first mismatches on stderr otherwise.

  golden.py ids FILE.i32 [START [END]]        print ids[START:END] comma-separated
  golden.py tokens-eq STREAM.jsonl FILE.i32   record 0's tokens (ss-cat --full) == FILE
  golden.py state-eq STREAM.jsonl REC SSM.f32 CONV.f32 [LOGDECAY.f32] [TOL]
        record REC's ssm, conv within TOL + TOL*|gold| (default 1e-5),
        logdecay (if given) within relative TOL
  golden.py nll-eq SCORE.json NLL.f32 START END [TOL]
        score JSON's "nll" == mean(NLL[START:END]) within TOL (default 1e-5),
        "n_tokens" == END-START, and per_token (when present) elementwise
  golden.py json-get FILE KEY [LINE]          print a key of a JSON line
  golden.py tokens-msgpack OUT ID [ID...]     write one token record's msgpack
        map (uncompressed; `zstd` makes it a stream) with the given ids
"""
import json
import struct
import sys


def read(path, code):
    with open(path, "rb") as f:
        b = f.read()
    n = len(b) // 4
    return list(struct.unpack("<%d%s" % (n, code), b[: 4 * n]))


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def close(name, got, want, atol, rtol):
    if len(got) != len(want):
        sys.exit("%s: %d elements, golden has %d" % (name, len(got), len(want)))
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want))
           if not abs(g - w) <= atol + rtol * abs(w)]
    if bad:
        for i, g, w in bad[:5]:
            print("%s[%d]: %r, golden %r" % (name, i, g, w), file=sys.stderr)
        sys.exit("%s: %d of %d elements differ" % (name, len(bad), len(want)))
    return max((abs(g - w) for g, w in zip(got, want)), default=0.0)


def main(a):
    cmd = a[0]
    if cmd == "ids":
        ids = read(a[1], "i")
        s = int(a[2]) if len(a) > 2 else 0
        e = int(a[3]) if len(a) > 3 else len(ids)
        print(",".join(str(x) for x in ids[s:e]))
    elif cmd == "tokens-eq":
        got = lines(a[1])[0]["tokens"]
        want = read(a[2], "i")
        if got != want:
            sys.exit("tokens differ from %s" % a[2])
    elif cmd == "state-eq":
        rec = lines(a[1])[int(a[2])]
        tol = float(a[6]) if len(a) > 6 else 1e-5
        d1 = close("ssm", rec["ssm"], read(a[3], "f"), tol, tol)
        d2 = close("conv", rec["conv"], read(a[4], "f"), tol, tol)
        if len(a) > 5 and a[5] != "-":
            close("logdecay", rec["logdecay"], read(a[5], "f"), 0.0, tol)
        print("max |diff|: ssm %.3g, conv %.3g" % (d1, d2))
    elif cmd == "nll-eq":
        out = lines(a[1])[0]
        nll = read(a[2], "f")
        s, e = int(a[3]), int(a[4])
        tol = float(a[5]) if len(a) > 5 else 1e-5
        want = nll[s:e]
        if out["n_tokens"] != e - s:
            sys.exit("n_tokens %d, expected %d" % (out["n_tokens"], e - s))
        close("nll", [out["nll"]], [sum(want) / len(want)], tol, 0.0)
        close("sum_nll", [out["sum_nll"]], [sum(want)], tol * len(want), 0.0)
        if "per_token" in out:
            close("per_token", out["per_token"], want, tol, 0.0)
    elif cmd == "json-get":
        ln = int(a[3]) if len(a) > 3 else 0
        print(json.dumps(lines(a[1])[ln][a[2]]))
    elif cmd == "tokens-msgpack":
        def mstr(x):
            b = x.encode()
            return (bytes([0xa0 | len(b)]) if len(b) < 32 else bytes([0xd9, len(b)])) + b
        ids = [int(x) for x in a[3:]]
        raw = struct.pack("<%di" % len(ids), *ids)
        m = bytes([0x85]) + mstr("format") + mstr("ss-tokens") + mstr("version") + bytes([1])
        m += mstr("id") + mstr(a[2]) + mstr("n_tokens") + bytes([0xce]) + struct.pack(">I", len(ids))
        m += mstr("tokens") + bytes([0xc6]) + struct.pack(">I", len(raw)) + raw
        with open(a[1], "wb") as f:
            f.write(m)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
