"""ss_states — read ss token and state streams from Python (formats/tokens.md, formats/states.md).

Depends on zstandard, msgpack and numpy only (Debian's python3-zstandard, python3-msgpack and
python3-numpy; python/pyproject.toml declares them: `pip install ./python`). A stream is a
sequence of zstd frames, one msgpack map each; zstd skippable frames are skipped, except the
annotation frame (magic 0x184D2A53) that `ss-retrieve query` puts before a record, whose rank and
score are applied to the record that follows.

    import ss_states
    for st in ss_states.states("docs.states"):      # ss_states.State, arrays as numpy f32
        st.id, st.conv.shape, st.ssm.shape, st.logdecay.shape
    for rec in ss_states.tokens("docs.tokens"):      # ss_states.Tokens
        rec.id, rec.tokens                           # int32 [n_tokens]

The arrays are those of formats/states.md, decoded to f32 whatever the stored dtype (f16; bf16,
which numpy lacks, widened by its bits; q8 and q4 codes times their block scales, in f32 as libss does;
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

The reader streams: it reads one frame at a time (from a file, a pipe or any binary file object),
so memory follows the largest record, not the stream. It checks what the C readers check
(lib/stream/stream.c, lib/stream/record.c ss_record_check): a frame declaring more than
max_record bytes is refused before it is read, a frame whose blocks make more than it declares
before it is decompressed (and the decompression never writes past the declared size); a map
with a key twice, a field missing or of another type, dims out of range or of an absurd total, an
array not exactly the bytes its dims make, a NaN or positive logdecay, a bad q8 or q4 scale, a NaN or
infinite conv/ssm element, a malformed annotation or plan frame. Every such input raises
ss_states.FormatError (a ValueError) naming the file, the record index and its byte offset, and
nothing else: tests/fuzz/pyreader.py holds it to that. Source: formats/tokens.md,
formats/states.md.
"""
__version__ = "0.1.0"  # the project's, SS_VERSION in lib/ss.h (tests/cli/python-package.sh checks)

import math
import os
import struct

import msgpack
import numpy as np
import zstandard

ZSTD_MAGIC = 0xFD2FB528
SKIP_MASK, SKIP_MAGIC = 0xFFFFFFF0, 0x184D2A50
ANNOTATION_MAGIC, ANNOTATION_MAX = 0x184D2A53, 256
PLAN_MAGIC, PLAN_MAX = 0x184D2A54, 64 << 20  # SS_PLAN_MAX
MAX_RECORD = 512 << 20  # SS_MAX_RECORD's default
MAX_SHUFFLE = 1048576  # SS_SHUFFLE_MAX
DIM_MAX = 1 << 24  # record.c: dims above are corrupt
STATE_MAX_ELEMS = 1 << 38  # record.c: all arrays' elements together
FINGERPRINT_MAX, ARCH_MAX, FORMAT_MAX = 64, 16, 32  # C buffers, the terminating NUL included
BLOCK_MAX = 128 << 10  # a zstd block's largest content (RFC 8878 3.1.1.2.4)
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "q8": 1, "q4": 0.5}  # q4: two codes a byte
DIMS = ("n_layer", "nheads", "headdim", "d_state", "conv_dim", "d_conv")


class FormatError(ValueError):
    """A stream that is not a valid ss stream; the message names file, record and offset."""


class Tokens:
    """One token record: id, tokens (int32 [n_tokens]), text and tokenizer (str or None), the raw map."""

    def __init__(self, m):
        _no_dup(m, "")
        self.map = m
        self.id = _str(m, "id")
        n = _int(m, "n_tokens", 0, INT32_MAX)
        self.text = _str(m, "text", False)
        self.tokenizer = _str(m, "tokenizer", False)
        self.tokens = _array(m, "tokens", "<i4", (n,))


class State:
    """One state record, conv/ssm/logdecay as numpy f32 arrays (shapes in the module comment);
    map is the record's map less its "conv" and "ssm" bins (records() yields them). Checked as
    ss_record_check checks it (lib/stream/record.c state_meta, ss_record_state)."""

    def __init__(self, m):
        _no_dup(m, "")
        self.map = m
        self.id = _str(m, "id")
        self.fingerprint = _str(m, "fingerprint")
        self.arch = _str(m, "arch")
        self.dtype = _str(m, "dtype")
        self.n_tokens = _int(m, "n_tokens", 0, INT64_MAX)
        dims = [_int(m, k, 2 if k == "d_conv" else 1, DIM_MAX) for k in DIMS]
        self.n_layer, self.nheads, self.headdim, self.d_state, self.conv_dim, self.d_conv = dims
        L, H, P, N, C, K = dims
        if len(_utf8(self.fingerprint)) >= FINGERPRINT_MAX:
            raise FormatError('field "fingerprint" is too long')
        if self.arch not in ("mamba2", "mamba1"):
            raise FormatError('field "arch": "%s", not "mamba2" or "mamba1"' % self.arch[:32])
        m1 = self.arch == "mamba1"
        if m1 and (P != 1 or C != H):
            raise FormatError("a mamba1 state has headdim 1 and conv_dim = nheads (d_inner), not headdim %d, "
                              "conv_dim %d, nheads %d" % (P, C, H))
        if L * H * P * N + L * C * (K - 1) + L * H * (N if m1 else 1) > STATE_MAX_ELEMS:
            raise FormatError("dims declare an absurd state size (%s)" % ", ".join("%s %d" % kv for kv in zip(DIMS, dims)))
        if self.dtype not in DTYPE_SIZE:
            raise FormatError('unknown dtype "%s"' % self.dtype[:16])
        self.rank = self.score = None
        if getattr(m, "annotated", False):  # checked with its frame
            self.rank, self.score = m["rank"], m["score"]
        elif "rank" in m and "score" in m:
            self.rank = _int(m, "rank", 0, INT32_MAX)
            self.score = m["score"]
            if not isinstance(self.score, float):
                raise FormatError('field "score" is not a float')
        self.logdecay = _array(m, "logdecay", "<f4", (L, H, N) if m1 else (L, H))
        bad = np.flatnonzero(~(self.logdecay <= 0))  # -inf is a decay to 0: a long document
        if bad.size:
            raise FormatError('field "logdecay": element %d is %g, not <= 0' % (bad[0], self.logdecay.flat[bad[0]]))
        if self.dtype in ("q8", "q4"):
            g = -(-C // P)
            c = 128 if self.dtype == "q8" else 8  # a byte reads as -128 .. 127, a q4 nibble as -8 .. 7
            self.conv_scale = _array(m, "conv_scale", "<f4", (L, g))
            self.ssm_scale = _array(m, "ssm_scale", "<f4", (L * H * P,))
            for k, sc in (("conv_scale", self.conv_scale), ("ssm_scale", self.ssm_scale)):
                bad = np.flatnonzero(~((sc >= 0) & (sc <= np.float32(3.4028234663852886e38 / c))))
                if bad.size:
                    raise FormatError('field "%s": scale %d is %g, not in [0, FLT_MAX/%d] (code x scale must '
                                      'be finite)' % (k, bad[0], sc.flat[bad[0]], c))
        for k, n in (("conv", L * C * (K - 1)), ("ssm", L * H * P * N)):
            _bin(m, k, (n + 1) // 2 if self.dtype == "q4" else n * DTYPE_SIZE[self.dtype])
        self.shuffle = _int(m, "shuffle", 1, MAX_SHUFFLE) if "shuffle" in m else None
        self.provenance = m.get("provenance")
        if "provenance" in m:  # present and nil is not absent
            self._check_provenance(self.logdecay.size)
        self.conv = self._decode("conv", (L, C, K - 1), 0)
        self.ssm = self._decode("ssm", (L, H, P, N), 1)
        del m["conv"], m["ssm"]  # decoded above: a state is held once, not twice

    def _check_provenance(self, n_decays):
        p = self.provenance
        if not isinstance(p, _Map):
            raise FormatError('field "provenance" is not a map')
        _no_dup(p, "provenance.")
        _str(p, "mode")
        src = p.get("sources")
        if not isinstance(src, list):
            raise FormatError('field "provenance.sources" is not an array')
        for i, x in enumerate(src):
            if not isinstance(x, str):
                raise FormatError("provenance source %d is not a string" % i)
        if "weights" in p:
            w = np.frombuffer(_bin(p, "weights", 4 * n_decays * len(src)), "<f4")
            _finite(w, "provenance.weights")

    def _decode(self, key, shape, which):
        b, n = self.map[key], math.prod(shape)
        if self.dtype == "q8":  # finite: codes times the scales checked above; a shuffle of bytes is none
            return self._q8(np.frombuffer(b, np.int8), which).reshape(shape)
        if self.dtype == "q4":  # element 2i in byte i's low nibble, 4-bit two's complement
            u = np.frombuffer(b, np.uint8)
            q = np.empty(2 * u.size, np.int8)
            q[0::2] = (u << 4).view(np.int8) >> 4
            q[1::2] = u.view(np.int8) >> 4
            return self._q8(q[:n], which).reshape(shape)
        es = DTYPE_SIZE[self.dtype]
        a = np.empty(n, np.float32)
        # about 1 M elements at a time (whole shuffle blocks): the unshuffled copy stays small
        step = n if self.shuffle is None else max(1, (1 << 20) // self.shuffle) * self.shuffle
        for e0 in range(0, n, step):
            m = min(step, n - e0)
            part = memoryview(b)[e0 * es:(e0 + m) * es] if step < n else b
            if self.shuffle is not None:
                part = _unshuffle(part, es, m, self.shuffle)
            if self.dtype == "bf16":
                a[e0:e0 + m].view(np.uint32)[...] = np.frombuffer(part, "<u2")
                a[e0:e0 + m].view(np.uint32)[...] <<= 16
            else:
                a[e0:e0 + m] = np.frombuffer(part, "<f4" if es == 4 else "<f2")
        for e0 in range(0, n, 1 << 20):  # in pieces: no bool array the size of the state
            _finite(a[e0:e0 + (1 << 20)], key, e0)
        return a.reshape(shape)

    def _q8(self, q, which):
        """q8 or q4 codes times their block's scale (formats/states.md "q8"), f32 product as in libss."""
        if which:  # ssm: one scale per (layer, head, headdim row) of d_state codes
            s = np.repeat(self.ssm_scale, self.d_state)
        else:  # conv: per layer and group of headdim channels, all d_conv-1 taps
            ch = np.arange(self.conv_dim) // self.headdim
            s = np.repeat(self.conv_scale[:, ch].reshape(-1), self.d_conv - 1)
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
    """The msgpack maps of a stream (path or binary file object, read forward one frame at a
    time), with their byte offsets from where reading began: yields (offset, map). Each map has
    a known "format" and a "version" this reader reads; its fields are checked by State and
    Tokens. Annotation frames set "rank"/"score" of the next record."""
    for i, off, m in _frames(src, max_record):
        yield off, m


def states(src, max_record=MAX_RECORD):
    """The state records of a stream as State objects (token records are refused)."""
    return (r for off, r in _typed(src, "ss-states", max_record))


def tokens(src, max_record=MAX_RECORD):
    """The token records of a stream as Tokens objects (state records are refused)."""
    return (r for off, r in _typed(src, "ss-tokens", max_record))


def _typed(src, fmt, max_record):
    """Yields (offset, State or Tokens) for each record of src; fmt, when given, the one format allowed."""
    name = _name(src)
    for i, off, m in _frames(src, max_record):
        if fmt and m["format"] != fmt:
            raise FormatError('%s: record %d (byte %d): format "%s", not "%s"' % (name, i, off, m["format"], fmt))
        try:
            r = (State if m["format"] == "ss-states" else Tokens)(m)
        except FormatError as e:
            ident = m.get("id")
            ident = " id %r" % ident[:64] if isinstance(ident, str) else ""
            raise FormatError("%s: record %d (byte %d)%s: %s" % (name, i, off, ident, e)) from None
        yield off, r


class _Map(dict):
    """A msgpack map as the C readers see it: its str keys, each with its first value (ss_map_get);
    dup is the first key that appears again (a record holding one is refused), annotated whether
    rank and score came from an annotation frame."""
    __slots__ = ("dup", "annotated")


def _pairs(pairs):
    m = _Map()
    m.dup, m.annotated = None, False
    for k, v in pairs:
        if not isinstance(k, str):
            continue
        if k in m:
            m.dup = m.dup or k
        else:
            m[k] = v
    return m


def _unpack(data, what):
    """data as one msgpack object (no trailing bytes), maps as _Map; FormatError(what) otherwise."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, object_pairs_hook=_pairs,
                               unicode_errors="surrogateescape")
    except Exception as e:  # ExtraData, FormatError, StackError, ValueError of an ext type...
        raise FormatError("%s: %s" % (what, e)) from None


class _Input:
    """A binary file read forward: buf[:n] holds its bytes [base, base + n), i is the next; it
    grows to hold a whole frame, and is given back once the frame is decompressed."""
    CHUNK = 1 << 20

    def __init__(self, f):
        self.f, self.buf, self.n, self.base, self.i, self.eof = f, np.empty(self.CHUNK, np.uint8), 0, 0, 0, False

    def pos(self):
        return self.base + self.i

    def fill(self, end):
        """Reads until buf holds end bytes or the input ends; whether it holds them."""
        while self.n < end and not self.eof:
            want = max(end - self.n, self.CHUNK)
            if self.n + want > self.buf.size:
                grown = np.empty(max(2 * self.buf.size, self.n + want), np.uint8)
                grown[:self.n] = self.buf[:self.n]
                self.buf = grown
            chunk = self.f.read(want)
            if not chunk:
                self.eof = True
            else:
                self.buf[self.n:self.n + len(chunk)] = np.frombuffer(chunk, np.uint8)
                self.n += len(chunk)
        return self.n >= end

    def bytes(self, a, b):
        return self.buf[a:min(b, self.n)].tobytes()

    def take(self, n):
        """The next n bytes (fewer at the end of input)."""
        self.fill(self.i + n)
        b = self.bytes(self.i, self.i + n)
        self.i += len(b)
        return b

    def drop(self):
        """Forgets the bytes before i; a buffer a large frame grew is given back."""
        if self.buf.size > 2 * self.CHUNK and self.n - self.i <= self.CHUNK:
            self.buf = np.concatenate((self.buf[self.i:self.n], np.empty(self.CHUNK, np.uint8)))
        else:
            self.buf[:self.n - self.i] = self.buf[self.i:self.n].copy()
        self.base, self.n, self.i = self.base + self.i, self.n - self.i, 0

    def skip(self, n):
        """Skips n bytes; whether the input holds them all (a seek where the file allows)."""
        if n <= self.n - self.i:
            self.i += n
            return True
        n -= self.n - self.i
        self.i = self.n
        self.drop()
        if self.eof:
            return False
        try:
            seekable = self.f.seekable()
        except (AttributeError, OSError, ValueError):
            seekable = False
        if seekable:
            here = self.f.tell()
            end = self.f.seek(0, os.SEEK_END)
            self.f.seek(min(here + n, end))
            self.base += min(n, end - here)
            return here + n <= end
        while n > 0:
            chunk = self.f.read(min(n, self.CHUNK))
            if not chunk:
                self.eof = True
                return False
            n -= len(chunk)
            self.base += len(chunk)
        return True


def _frame_bound(content):
    """No valid frame of `content` bytes is longer (stream.c frame_bound: ZSTD_compressBound,
    the largest header, 3 bytes a block of at least 1 KiB, a checksum)."""
    cb = content + (content >> 8) + ((BLOCK_MAX - content) >> 11 if content < BLOCK_MAX else 0)
    return cb + 18 + 3 * (content // 1024 + 2) + 4


def _zstd_frame(inp, where, max_record):
    """Reads the zstd frame at inp.i (its magic checked) into inp.buf; returns (content size, end).
    Its blocks are walked first: a frame that declares more than max_record, or whose raw and RLE
    blocks alone make more than it declares (a few KB can make GBs), or whose compressed blocks
    could not make it, is refused before a byte is decompressed. ref: RFC 8878 3.1.1."""
    start = inp.i
    if not inp.fill(start + 5):
        raise FormatError("%s: zstd frame header truncated" % where)
    fhd = int(inp.buf[start + 4])
    single, fcs_flag, did = fhd >> 5 & 1, fhd >> 6, fhd & 3
    fcs_len = (single, 2, 4, 8)[fcs_flag]
    hsz = 5 + (1 - single) + (0, 1, 2, 4)[did] + fcs_len
    if not inp.fill(start + hsz):
        raise FormatError("%s: zstd frame header truncated" % where)
    if fhd & 8:
        raise FormatError("%s: corrupt zstd frame header (reserved bit set)" % where)
    if not fcs_len:
        raise FormatError("%s: zstd frame without a declared content size (not written by an ss tool)" % where)
    declared = int.from_bytes(inp.bytes(start + hsz - fcs_len, start + hsz), "little") + (256 if fcs_flag == 1 else 0)
    if declared > max_record:
        raise FormatError("%s: declared record size %d bytes is over the limit of %d (max_record)" % (where, declared, max_record))
    if declared == 0:
        raise FormatError("%s: empty record" % where)
    bound, lo, hi, p = _frame_bound(declared), 0, 0, start + hsz
    while True:
        if not inp.fill(p + 3):
            raise FormatError("%s: zstd frame truncated (input ends %d bytes into it)" % (where, inp.n - start))
        v = int.from_bytes(inp.bytes(p, p + 3), "little")
        kind, size = v >> 1 & 3, v >> 3
        if kind == 3 or size > BLOCK_MAX:
            raise FormatError("%s: corrupt zstd frame (%s)" % (where, "reserved block type" if kind == 3 else
                                                             "a block of %d bytes" % size))
        if kind == 2:
            hi += BLOCK_MAX
        else:
            lo, hi = lo + size, hi + size
        p += 3 + (1 if kind == 1 else size)
        if lo > declared:
            raise FormatError("%s: zstd frame holds more than its declared %d bytes" % (where, declared))
        if p - start > bound:
            raise FormatError("%s: corrupt zstd frame (blocks exceed the declared size)" % where)
        if v & 1:
            break
    p += 4 * (fhd >> 2 & 1)
    if not inp.fill(p):
        raise FormatError("%s: zstd frame truncated (input ends %d bytes into it)" % (where, inp.n - start))
    if hi < declared:
        raise FormatError("%s: zstd frame content is at most %d bytes, header says %d" % (where, hi, declared))
    return declared, p


def _annotation(payload, where):
    """An annotation frame's payload: {"rank": uint <= INT32_MAX, "score": float} (stream.c read_annotation)."""
    a = _unpack(payload, "%s: malformed annotation frame" % where)
    if not (isinstance(a, _Map) and type(a.get("rank")) is int and 0 <= a["rank"] <= INT32_MAX and
            isinstance(a.get("score"), float)):
        raise FormatError("%s: malformed annotation frame" % where)
    return a["rank"], a["score"]


def _plan(payload, where):
    """A plan frame's payload: {"n": uint >= 1, "logdecay": bin of n x len f32, finite, <= 0}
    (stream.c read_plan). Checked only: the Python reader has no use for it."""
    p = _unpack(payload, "%s: malformed plan frame" % where)
    n, ld = (p.get("n"), p.get("logdecay")) if isinstance(p, _Map) else (None, None)
    ok = type(n) is int and 1 <= n <= len(payload) and isinstance(ld, bytes) and ld and len(ld) % (4 * n) == 0
    if not ok or not np.all(np.frombuffer(ld, "<f4") <= 0) or not np.all(np.isfinite(np.frombuffer(ld, "<f4"))):
        raise FormatError("%s: malformed plan frame" % where)


def _frames(src, max_record):
    """Yields (index, offset, map) for each record of src, checked as stream.c's reader checks it
    (format and version; the frame and its skippable frames)."""
    name = _name(src)
    f = open(src, "rb") if isinstance(src, str) else src
    try:
        inp, dctx, i, note, first = _Input(f), zstandard.ZstdDecompressor(), 0, None, True
        while True:
            off = inp.pos()
            where = "%s: record %d (byte %d)" % (name, i, off)
            head = inp.take(8)
            inp.i -= len(head)
            if not head:
                return
            if len(head) < 4:
                raise FormatError("%s: truncated frame header (%d stray bytes)" % (where, len(head)))
            (magic,) = struct.unpack_from("<I", head)
            if magic & SKIP_MASK == SKIP_MAGIC:
                if len(head) < 8:
                    raise FormatError("%s: truncated skippable frame" % where)
                (size,) = struct.unpack_from("<I", head, 4)
                inp.i += 8
                if magic == PLAN_MAGIC and first and size > PLAN_MAX:
                    raise FormatError("%s: plan frame of %d bytes (at most %d)" % (where, size, PLAN_MAX))
                if (magic == ANNOTATION_MAGIC and size <= ANNOTATION_MAX) or (magic == PLAN_MAGIC and first):
                    payload = inp.take(size)
                    if len(payload) < size:
                        raise FormatError("%s: skippable frame truncated (declares %d bytes)" % (where, size))
                    if magic == ANNOTATION_MAGIC:
                        note = _annotation(payload, where)
                    else:
                        _plan(payload, where)
                        first = False
                elif not inp.skip(size):
                    raise FormatError("%s: skippable frame truncated (declares %d bytes)" % (where, size))
                inp.drop()
                continue
            first = False
            if magic != ZSTD_MAGIC:
                raise FormatError("%s: not a zstd frame (magic %08x)" % (where, magic))
            declared, end = _zstd_frame(inp, where, max_record)
            with memoryview(inp.buf[inp.i:end]) as frame:
                try:  # one shot into a buffer of the declared size: zstd never writes past it
                    body = dctx.decompress(frame)
                except zstandard.ZstdError as e:
                    if "too small" in str(e):
                        raise FormatError("%s: zstd frame holds more than its declared %d bytes" % (where, declared)) from None
                    raise FormatError("%s: corrupt zstd frame: %s" % (where, e)) from None
            inp.i = end
            inp.drop()
            if len(body) != declared:
                raise FormatError("%s: zstd frame content is %d bytes, header says %d" % (where, len(body), declared))
            m = _unpack(body, "%s: malformed msgpack record" % where)
            del body
            if not isinstance(m, _Map):
                raise FormatError("%s: record is not a msgpack map" % where)
            fmt, ver = m.get("format"), m.get("version")
            if not isinstance(fmt, str) or len(_utf8(fmt)) >= FORMAT_MAX:
                raise FormatError('%s: record has no "format" string' % where)
            if type(ver) is not int or ver < 0:
                raise FormatError('%s: record has no "version" integer' % where)
            if fmt not in ("ss-tokens", "ss-states"):
                raise FormatError('%s: unknown record format "%s"' % (where, fmt))
            if ver > 1:
                raise FormatError("%s: %s version %d is newer than this reader reads (1)" % (where, fmt, ver))
            if note:
                m["rank"], m["score"] = note
                m.annotated = True
            note = None
            yield i, off, m
            i += 1
    finally:
        if f is not src:
            f.close()


def _name(src):
    return src if isinstance(src, str) else getattr(src, "name", "<stream>")


def _utf8(s):
    return s.encode("utf-8", "surrogateescape")


def _no_dup(m, prefix):
    if m.dup is not None:
        raise FormatError('key "%s%s" appears twice' % (prefix, m.dup[:64]))


def _str(m, k, required=True):
    v = m.get(k)
    if v is None and k not in m and not required:
        return None
    if k not in m:
        raise FormatError('missing field "%s"' % k)
    if not isinstance(v, str):
        raise FormatError('field "%s" is not a string' % k)
    return v


def _int(m, k, lo, hi):
    if k not in m:
        raise FormatError('missing field "%s"' % k)
    v = m[k]
    if type(v) is not int:
        raise FormatError('field "%s" is not an integer' % k)
    if not lo <= v <= hi:
        raise FormatError('field "%s" = %d is out of range [%d, %d]' % (k, v, lo, hi))
    return v


def _bin(m, k, n):
    if k not in m:
        raise FormatError('missing field "%s"' % k)
    b = m[k]
    if not isinstance(b, bytes):
        raise FormatError('field "%s" is not a bin' % k)
    if len(b) != n:
        raise FormatError('field "%s" has %d bytes, expected %d' % (k, len(b), n))
    return b


def _array(m, k, dt, shape):
    b = _bin(m, k, math.prod(shape) * np.dtype(dt).itemsize)
    return np.frombuffer(b, dt).astype(np.dtype(dt).newbyteorder("=")).reshape(shape)


def _finite(a, key, first=0):
    """FormatError naming the first element of a (the first'th of key) that is not finite."""
    ok = np.isfinite(a)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise FormatError('field "%s": element %d is %g, not finite' % (key, first + i, a.flat[i]))


def _unshuffle(b, es, n, block):
    """formats/states.md "shuffle": within each block of m elements (the last one shorter), byte j
    of element i was stored at j*m + i. Returns the n*es bytes in element order (uint8 array)."""
    a = np.frombuffer(b, np.uint8, n * es)
    out = np.empty(n * es, np.uint8)
    full = n // block * block
    if full:
        out[:full * es].reshape(-1, block, es)[...] = a[:full * es].reshape(-1, es, block).transpose(0, 2, 1)
    if n > full:
        out[full * es:].reshape(n - full, es)[...] = a[full * es:].reshape(es, n - full).T
    return out


def _heap_returns_large_blocks():
    """glibc keeps a freed block under its mmap threshold in the heap, and raises the threshold
    (up to 32 MiB) each time a larger mmapped block is freed: a stream of records of a few MiB
    then holds the last records' buffers as well as the current one. Fixing the threshold at
    1 MiB returns them at once (the command line's peak on f16 states: 98 -> 83 MB, against
    46 MB for ss-cat). Process-wide, so only the command line sets it, never the import."""
    import ctypes
    try:
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (malloc.h)
    except (OSError, AttributeError):  # not glibc
        pass


if __name__ == "__main__":  # python3 ss_states.py FILE...: one line per record
    import sys
    _heap_returns_large_blocks()
    rc = 0
    for path in sys.argv[1:]:
        try:
            for off, r in _typed(path, None, MAX_RECORD):
                shape = r.ssm.shape if isinstance(r, State) else r.tokens.shape
                print("%s\t%d\t%s\t%s\t%s" % (path, off, r.map["format"], r.id, "x".join(map(str, shape))))
        except (FormatError, OSError) as e:
            print("ss_states: %s" % e, file=sys.stderr)
            rc = 1
    sys.exit(rc)
