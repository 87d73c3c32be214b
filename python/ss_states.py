"""ss_states — read ss token and state streams from Python (formats/tokens.md, formats/states.md).

Depends on Debian's python3-zstandard, python3-msgpack and python3-numpy only. A stream is a
sequence of zstd frames, one msgpack map each; zstd skippable frames are skipped, except the
annotation frame (magic 0x184D2A53) that `ss-retrieve query` puts before a record, whose rank and
score are applied to the record that follows.

    import ss_states
    for st in ss_states.states("docs.states"):      # ss_states.State, arrays as numpy f32
        st.id, st.conv.shape, st.ssm.shape, st.logdecay.shape
    for rec in ss_states.tokens("docs.tokens"):      # ss_states.Tokens
        rec.id, rec.tokens                           # int32 [n_tokens]

The arrays are those of formats/states.md, decoded to f32 whatever the stored dtype (f16; bf16,
which numpy lacks, widened by its bits; q8 codes times their block scales, in f32 as libss does;
byte-shuffled blocks unshuffled):
    conv      [n_layer][conv_dim][d_conv-1]          the last d_conv-1 pre-conv inputs, oldest first
    ssm       [n_layer][nheads][headdim][d_state]    (Mamba-1: [n_layer][d_inner][1][d_state])
    logdecay  [n_layer][nheads]                      (Mamba-1: [n_layer][d_inner][d_state])

Caches of other libraries (numpy arrays; wrap them with torch.from_numpy):
    hf_cache_arrays(st, batch)   transformers' Mamba2Cache / MambaCache: conv_states
                                 [n_layer][batch][conv_dim][d_conv], ssm_states [n_layer][batch]
                                 [nheads][headdim][d_state] (Mamba-1: [n_layer][batch][d_inner][d_state])
    mamba_ssm_states(st, batch)  mamba_ssm's InferenceParams.key_value_memory_dict: {layer:
                                 (conv_state [batch][conv_dim][d_conv], ssm_state ...)}
Both keep d_conv columns, the oldest first, where ss keeps d_conv-1: the step rolls the window
left and writes the new input last, so column 0 is dropped unread and is zero here.

Bad input (a truncated or corrupt frame, a record whose arrays do not match its dims, a frame
larger than max_record) raises ss_states.FormatError naming the file, the record index and its
byte offset. Source: formats/tokens.md, formats/states.md; the C readers are lib/stream/stream.c
and lib/stream/record.c.
"""
import struct

import msgpack
import numpy as np
import zstandard

ZSTD_MAGIC = 0xFD2FB528
SKIP_MASK, SKIP_MAGIC = 0xFFFFFFF0, 0x184D2A50
ANNOTATION_MAGIC = 0x184D2A53
MAX_RECORD = 512 << 20  # SS_MAX_RECORD's default
MAX_SHUFFLE = 1048576


class FormatError(ValueError):
    """A stream that is not a valid ss stream; the message names file, record and offset."""


class Tokens:
    """One token record: id, tokens (int32 [n_tokens]), text (bytes or None), the raw map."""

    def __init__(self, m):
        self.map = m
        self.id = m["id"]
        n = _int(m, "n_tokens", 0, 2**31 - 1)
        self.tokens = _array(m, "tokens", "<i4", (n,))
        self.text = m.get("text")


class State:
    """One state record, conv/ssm/logdecay as numpy f32 arrays (shapes in the module comment)."""

    def __init__(self, m):
        self.map = m
        self.id = m["id"]
        self.fingerprint = m["fingerprint"]
        self.arch = m.get("arch", "mamba2")
        if self.arch not in ("mamba2", "mamba1"):
            raise FormatError('field "arch": "%s"' % self.arch)
        dims = [_int(m, k, 1, 2**31 - 1) for k in ("n_layer", "nheads", "headdim", "d_state", "conv_dim", "d_conv")]
        self.n_layer, self.nheads, self.headdim, self.d_state, self.conv_dim, self.d_conv = dims
        if self.d_conv < 2:
            raise FormatError('field "d_conv": %d, not >= 2' % self.d_conv)
        self.n_tokens = _int(m, "n_tokens", 0, 2**63 - 1)
        self.dtype = m["dtype"]
        self.rank, self.score = m.get("rank"), m.get("score")
        self.provenance = m.get("provenance")
        L, H, P, N, C, K = dims
        ld_shape = (L, H, N) if self.arch == "mamba1" else (L, H)
        self.logdecay = _array(m, "logdecay", "<f4", ld_shape)
        if np.any(np.isnan(self.logdecay)) or np.any(self.logdecay > 0):
            raise FormatError('field "logdecay": an element NaN or > 0')
        self.conv = self._decode("conv", (L, C, K - 1), 0)
        self.ssm = self._decode("ssm", (L, H, P, N), 1)
        for name, a in (("conv", self.conv), ("ssm", self.ssm)):
            if not np.all(np.isfinite(a)):
                raise FormatError('field "%s": an element NaN or infinite' % name)

    def _decode(self, key, shape, which):
        m, n = self.map, int(np.prod(shape))
        es = {"f32": 4, "f16": 2, "bf16": 2, "q8": 1}.get(self.dtype)
        if es is None:
            raise FormatError('unknown dtype "%s"' % self.dtype)
        b = m.get(key)
        if not isinstance(b, bytes) or len(b) != n * es:
            raise FormatError('field "%s": %s bytes, not %d' % (key, len(b) if isinstance(b, bytes) else "no", n * es))
        sh = m.get("shuffle")
        if sh is not None:
            if not isinstance(sh, int) or not 1 <= sh <= MAX_SHUFFLE:
                raise FormatError('field "shuffle": %r' % (sh,))
            b = _unshuffle(b, es, n, sh)
        if self.dtype == "f32":
            a = np.frombuffer(b, "<f4").astype(np.float32)
        elif self.dtype == "f16":
            a = np.frombuffer(b, "<f2").astype(np.float32)
        elif self.dtype == "bf16":
            a = (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = self._q8(np.frombuffer(b, np.int8), which)
        return a.reshape(shape)

    def _q8(self, q, which):
        """codes times their block's scale (formats/states.md "q8"), f32 product as in libss."""
        L, P = self.n_layer, self.headdim
        if which:  # ssm: one scale per (layer, head, headdim row) of d_state codes
            rows, row = L * self.nheads * P, self.d_state
            sc = _array(self.map, "ssm_scale", "<f4", (rows,))
            s = np.repeat(sc, row)
        else:  # conv: per layer and group of headdim channels, all d_conv-1 taps
            g = -(-self.conv_dim // P)
            sc = _array(self.map, "conv_scale", "<f4", (L, g))
            ch = np.arange(self.conv_dim) // P
            s = np.repeat(sc[:, ch].reshape(-1), self.d_conv - 1)
        if np.any(np.isnan(sc)) or np.any(sc < 0) or np.any(sc > np.float32(3.4028234663852886e38 / 127)):
            raise FormatError('a q8 scale negative, NaN or above FLT_MAX/127')
        return q.astype(np.float32) * s.astype(np.float32)


def hf_cache_arrays(st, batch=1):
    """transformers' cache arrays for a batch of `batch` copies of state st (numpy f32):
    {"conv_states": [n_layer][batch][conv_dim][d_conv], "ssm_states": [n_layer][batch][nheads]
    [headdim][d_state]} (Mamba-1: ssm_states [n_layer][batch][d_inner][d_state]). v4's
    Mamba2Cache/MambaCache hold these tensors; v5 caches take them per layer (index 0)."""
    conv = np.zeros((st.n_layer, batch, st.conv_dim, st.d_conv), np.float32)
    conv[:, :, :, 1:] = st.conv[:, None]
    ssm = st.ssm if st.arch == "mamba2" else st.ssm.reshape(st.n_layer, st.nheads, st.d_state)
    return {"conv_states": conv, "ssm_states": np.ascontiguousarray(np.broadcast_to(ssm[:, None], (st.n_layer, batch) + ssm.shape[1:]))}


def mamba_ssm_states(st, batch=1):
    """mamba_ssm's InferenceParams.key_value_memory_dict for state st: {layer_idx: (conv_state
    [batch][conv_dim][d_conv], ssm_state [batch][nheads][headdim][d_state] or, Mamba-1,
    [batch][d_inner][d_state])}, numpy f32 (the modules' _get_states_from_cache shapes)."""
    a = hf_cache_arrays(st, batch)
    return {l: (a["conv_states"][l], a["ssm_states"][l]) for l in range(st.n_layer)}


def records(src, max_record=MAX_RECORD):
    """The msgpack maps of a stream (path or binary file object), with their byte offsets:
    yields (offset, map). Annotation frames set "rank"/"score" of the next record."""
    name, data = _read(src)
    view = memoryview(data)
    off, i, note = 0, 0, None
    while off < len(data):
        where = "%s: record %d (byte %d)" % (name, i, off)
        if len(data) - off < 4:
            raise FormatError("%s: truncated frame header" % where)
        (magic,) = struct.unpack_from("<I", data, off)
        if magic & SKIP_MASK == SKIP_MAGIC:
            if len(data) - off < 8:
                raise FormatError("%s: truncated skippable frame" % where)
            (size,) = struct.unpack_from("<I", data, off + 4)
            if size > len(data) - off - 8:
                raise FormatError("%s: skippable frame of %d bytes runs past the end" % (where, size))
            if magic == ANNOTATION_MAGIC and size <= 256:
                try:
                    note = msgpack.unpackb(data[off + 8:off + 8 + size], raw=False)
                except Exception as e:
                    raise FormatError("%s: annotation frame: %s" % (where, e))
            off += 8 + size
            continue
        if magic != ZSTD_MAGIC:
            raise FormatError("%s: not a zstd frame (magic %08x)" % (where, magic))
        try:
            declared = zstandard.frame_content_size(data[off:off + 18])
        except zstandard.ZstdError as e:
            raise FormatError("%s: %s" % (where, e))
        if declared < 0:
            raise FormatError("%s: the frame does not declare its size" % where)
        if declared > max_record:
            raise FormatError("%s: declares %d bytes, over the limit of %d" % (where, declared, max_record))
        d, parts, got, pos = zstandard.ZstdDecompressor().decompressobj(), [], 0, off
        try:  # 128 KiB of input at a time: the frame's end is found without copying the rest
            while not d.eof and pos < len(data) and got <= declared:
                parts.append(d.decompress(view[pos:pos + 131072]))
                got += len(parts[-1])
                pos = min(pos + 131072, len(data))
        except zstandard.ZstdError as e:
            raise FormatError("%s: %s" % (where, e))
        if not d.eof or got != declared:
            raise FormatError("%s: truncated or corrupt (%d of %d bytes)" % (where, got, declared))
        body = b"".join(parts)
        used = pos - off - len(d.unused_data)
        try:
            m = msgpack.unpackb(body, raw=False, strict_map_key=True, unicode_errors="surrogateescape")
        except Exception as e:
            raise FormatError("%s: not one msgpack map: %s" % (where, e))
        if not isinstance(m, dict) or not isinstance(m.get("format"), str):
            raise FormatError('%s: no "format" key' % where)
        if not isinstance(m.get("version"), int) or m["version"] > 1:
            raise FormatError('%s: version %r, this reader knows 1' % (where, m.get("version")))
        if note:
            m.update({k: note[k] for k in ("rank", "score") if k in note})
        note = None
        yield off, m
        off += used
        i += 1


def states(src, max_record=MAX_RECORD):
    """The state records of a stream as State objects (token records are refused)."""
    return _typed(src, "ss-states", State, max_record)


def tokens(src, max_record=MAX_RECORD):
    """The token records of a stream as Tokens objects (state records are refused)."""
    return _typed(src, "ss-tokens", Tokens, max_record)


def _typed(src, fmt, cls, max_record):
    name = _name(src)
    for i, (off, m) in enumerate(records(src, max_record)):
        if m["format"] != fmt:
            raise FormatError('%s: record %d (byte %d): format "%s", not "%s"' % (name, i, off, m["format"], fmt))
        try:
            yield cls(m)
        except (FormatError, KeyError, TypeError) as e:
            what = 'field "%s" missing' % e.args[0] if isinstance(e, KeyError) else str(e)
            raise FormatError("%s: record %d (byte %d) id %r: %s" % (name, i, off, m.get("id"), what)) from None


def _name(src):
    return src if isinstance(src, str) else getattr(src, "name", "<stream>")


def _read(src):
    if isinstance(src, str):
        with open(src, "rb") as f:
            return src, f.read()
    return _name(src), src.read()


def _int(m, k, lo, hi):
    v = m[k]
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise FormatError('field "%s": %r, not in %d..%d' % (k, v, lo, hi))
    return v


def _array(m, k, dt, shape):
    b = m[k]
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    if not isinstance(b, bytes) or len(b) != n:
        raise FormatError('field "%s": %s bytes, not %d' % (k, len(b) if isinstance(b, bytes) else "no", n))
    return np.frombuffer(b, dt).astype(np.dtype(dt).newbyteorder("=")).reshape(shape)


def _unshuffle(b, es, n, block):
    """formats/states.md "shuffle": within each block of m elements, byte j of element i was
    stored at j*m + i."""
    out = bytearray(len(b))
    for e0 in range(0, n, block):
        m = min(block, n - e0)
        blk = np.frombuffer(b, np.uint8, m * es, e0 * es).reshape(es, m)
        out[e0 * es:(e0 + m) * es] = blk.T.tobytes()
    return bytes(out)


if __name__ == "__main__":  # python3 ss_states.py FILE...: one line per record
    import sys
    rc = 0
    for path in sys.argv[1:]:
        try:
            for off, m in records(path):
                r = State(m) if m["format"] == "ss-states" else Tokens(m)
                shape = r.ssm.shape if isinstance(r, State) else r.tokens.shape
                print("%s\t%d\t%s\t%s\t%s" % (path, off, m["format"], r.id, "x".join(map(str, shape))))
        except (FormatError, OSError, KeyError) as e:
            print("ss_states: %s" % e, file=sys.stderr)
            rc = 1
    sys.exit(rc)
