/*
 * ss.h — public interface of libss: a database of SSM (Mamba-2) states.
 *
 * Plain C11, C++-safe. The library never prints and never exits: every
 * fallible function returns 0 (or a count) on success and a negative SS_ERR_*
 * on failure; ss_strerror() names the code. Functions that can say more (which
 * record, which byte offset, which tensor) fill a caller-provided message
 * buffer of SS_ERRMSG_MAX bytes.
 *
 * Module headers, each included here:
 *   ss_stream.h    zstd+msgpack record streams, token and state records
 *   ss_tokenizer.h byte-level BPE from a HF tokenizer.json or a GGUF's metadata
 *   ss_model.h     Mamba-2 and Mamba-1 checkpoints (HF safetensors or PyTorch
 *                  pickles, GGUF)
 *   ss_ops.h       the forward pass's ops and their backwards (CPU reference; CUDA twins in kernels/)
 *   ss_forward.h   the forward pass (prefill, decode) on the CPU or a GPU
 *   ss_device.h    device selection and the CUDA plugin (libss_cuda.so)
 *   ss_sample.h    logits → tokens, NLL
 *   ss_compose.h   state composition (CASO, PICASO-S/R, soup)
 *   ss_index.h     BM25 index of documents → state offsets
 *   ss_eval.h      the PICASO paper's evaluation methods (contexts, NLL)
 *   ss_train.h     a training step: f32 parameters, forward + backward, AdamW
 *   ss_train_ckpt.h checkpoints: safetensors writer, parameters as a model directory
 *
 * Public headers: this one and the module headers above, the interface the
 * tools, bench/ and tests/ build on. They are not installed: `make install`
 * installs the tools, the CUDA plugin, the man pages and data/, but neither
 * libss.a nor headers, so the streams and the command lines are the stable
 * interface and these headers change with the tree. Every other header in
 * lib/ is internal to libss (lib/stream/internal.h: the decoded record and
 * msgpack; device_plugin.h: the CUDA plugin's table; the rest: helpers of
 * one module or two) and says so at its top.
 */
#ifndef SS_H
#define SS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SS_VERSION "0.1.0"
#define SS_ERRMSG_MAX 512

/* Error codes. Negative so that "n >= 0" means success with a count. */
enum {
	SS_OK = 0,
	SS_ERR_NOMEM = -1,     /* allocation failed */
	SS_ERR_IO = -2,        /* read/write/open failed (errno kept) */
	SS_ERR_FORMAT = -3,    /* malformed input: stream, JSON, safetensors, pickle */
	SS_ERR_TRUNCATED = -4, /* input ended inside a record or tensor */
	SS_ERR_TOO_LARGE = -5, /* a declared size exceeds the configured limit */
	SS_ERR_VERSION = -6,   /* record from an unsupported format version */
	SS_ERR_MISMATCH = -7,  /* different model fingerprint or dims */
	SS_ERR_UNSUPPORTED = -8, /* valid input we do not handle (e.g. Mamba-1) */
	SS_ERR_INVALID = -9,   /* invalid argument from the caller */
	SS_ERR_UTF8 = -10,     /* invalid UTF-8 in text input */
	SS_ERR_CHECKSUM = -11, /* zstd frame checksum failed: corrupt data */
	SS_ERR_NOTFOUND = -12, /* a named file, tensor, document or record is absent */
	SS_ERR_DEVICE = -13,   /* GPU backend unavailable or failed */
};

/* Returns a static, human-readable description of an SS_ERR_* code. */
const char *ss_strerror(int err);
/* Formats a one-line message into errmsg (SS_ERRMSG_MAX bytes; NULL is
 * allowed and ignored) and returns `code`, so that error paths read
 * `return ss_errf(errmsg, SS_ERR_FORMAT, "tensor %s: ...", name);`. */
int ss_errf(char *errmsg, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Opens path read-only without blocking on a FIFO or device (open(2) of a
 * FIFO with no writer never returns): returns a descriptor of a regular
 * file (O_CLOEXEC, blocking; the caller closes it), -1 with errno set when
 * open or fstat fails, or -2 when path is not a regular file. Nothing is
 * read. Used for every file a tool or the library opens that is not a
 * stream operand (where "-" and pipes are meant): model and index files,
 * files named in data, blobs and side files read whole. */
int ss_open_regular(const char *path);

/* Storage dtypes of tensors in files and streams. */
typedef enum {
	SS_DTYPE_F32 = 0,
	SS_DTYPE_F16 = 1,
	SS_DTYPE_BF16 = 2,
	/* int8 codes with an f32 scale per block (states only, never weights):
	 * x = q * scale; see ss_q8_* below and formats/states.md. */
	SS_DTYPE_Q8 = 3,
	/* ggml's Q8_0 (weights only, never states): blocks of 32 elements,
	 * each 34 bytes {f16 d; int8 qs[32]}, x = qs[i] * d, d = max|x|/127
	 * and qs = roundf(x / d) as ggml's quantize_row_q8_0_ref, so a GGUF
	 * Q8_0 tensor's bytes are these. ref: ggml/src/ggml-common.h
	 * (block_q8_0), ggml/src/ggml-quants.c (quantize_row_q8_0_ref). */
	SS_DTYPE_Q8_0 = 4,
	/* 4-bit codes, two to a byte, with q8's f32 scale per block (states
	 * only): x = q * scale, q in [-8, 7] (writers use [-7, 7]); see
	 * ss_quant_* below and formats/states.md "q4". */
	SS_DTYPE_Q4 = 5,
} ss_dtype;
/* The longest rows of q8_0 matrices the CPU linear op takes (its K: a
 * model's d_model and d_inner), in elements. */
#define SS_Q8_0_ROW_MAX 16384

/* What a storage dtype is and where it may be used: one row per ss_dtype
 * (lib/stream/dtype.c), the single source of its name, element size,
 * conversions, byte shuffle and scales, read by the records, composition,
 * the JSON output and the tools' option parsing. Weights are f32, f16,
 * bf16 or q8_0 (safetensors holds the first three); states f32, f16, bf16,
 * q8 or q4 (formats/states.md). */
enum {
	SS_DTYPE_STATES = 1u,      /* conv and ssm of a state record */
	SS_DTYPE_WEIGHTS = 2u,     /* a model's matrices, in a checkpoint or in memory */
	SS_DTYPE_SAFETENSORS = 4u, /* a tensor of a safetensors file we write */
};
typedef struct {
	ss_dtype dtype;
	const char *name;  /* "f32" "f16" "bf16" "q8" "q8_0" "q4" */
	const char *alias; /* "float32" "float16" "bfloat16" (HF configs' torch_dtype); NULL */
	size_t size;       /* bytes per block of `block` elements; q8, q4: codes, scales apart */
	size_t block;      /* elements per block: 1; 32 for q8_0 (its scale inside the block); 2
			      for q4 (two codes a byte) */
	unsigned uses;     /* SS_DTYPE_STATES | SS_DTYPE_WEIGHTS | SS_DTYPE_SAFETENSORS */
	int shuffled;      /* 1: a shuffling writer byte-shuffles arrays of it (ss_shuffle) */
	int scaled;        /* codes with an f32 scale per block (ss_quant_*): the largest code a
			      writer uses, 127 (q8) or 7 (q4); 0: not scaled */
	/* n elements to and from f32, no aliasing, any alignment; NULL when
	 * scaled (the conversion needs the scales: ss_quant_to_f32,
	 * ss_quant_from_f32).
	 * q8_0: n elements from the start of a block; a last block of fewer
	 * than 32 is written whole, zero-padded (ss_dtype_row_size bytes). */
	void (*to_f32)(float *dst, const void *src, size_t n);
	void (*from_f32)(void *dst, const float *src, size_t n);
} ss_dtype_info;

/* The row of t; NULL for a value that is not an ss_dtype. Static. */
const ss_dtype_info *ss_dtype_info_of(ss_dtype t);
/* "f32" | "f16" | "bf16" | "q8" | "q8_0" | "q4"; NULL for an unknown value. */
const char *ss_dtype_name(ss_dtype t);
/* Parses a row's name or alias ("f32" | "float32", "f16" | "float16",
 * "bf16" | "bfloat16", "q8", "q8_0", "q4"). Returns 0 and sets *out, or
 * SS_ERR_INVALID. */
int ss_dtype_parse(const char *s, ss_dtype *out);
/* ss_dtype_parse() limited to the rows with one of `uses` (SS_DTYPE_*).
 * Returns 0 and sets *out, or SS_ERR_INVALID with errmsg (SS_ERRMSG_MAX
 * bytes, may be NULL) "'S' is not f32, f16, bf16, q8 or q4", naming the rows
 * of that use: the one message of every dtype option. */
int ss_dtype_parse_for(const char *s, unsigned uses, ss_dtype *out, char *errmsg);
/* Bytes per block of ss_dtype_info.block elements: 4, 2, 2, 1 (q8's
 * scales not counted); for q8_0 a block of 32 (34), for q4 a byte of two
 * codes (1): use ss_dtype_row_size for a count of elements; 0 when unknown. */
size_t ss_dtype_size(ss_dtype t);
/* Bytes of n consecutive elements from the start of a block: n·size for
 * f32, f16, bf16 and q8 (codes only); ceil(n/32)·34 for q8_0 (what
 * ggml_row_size gives when n is a multiple of 32); ceil(n/2) for q4 (codes
 * only). 0 when unknown. */
size_t ss_dtype_row_size(ss_dtype t, size_t n);

/* Element conversion. f16 is IEEE binary16; bf16 is the top 16 bits of a
 * binary32. f32→f16/bf16 round to nearest even; NaN stays NaN; overflow in
 * f16 gives ±inf. All arrays are little-endian in memory (x86-64, aarch64). */
float ss_f16_to_f32(uint16_t h);
uint16_t ss_f32_to_f16(float f);
float ss_bf16_to_f32(uint16_t h);
uint16_t ss_f32_to_bf16(float f);

/* Converts n elements of dtype `src_t` at src to f32 at dst (no aliasing):
 * the row's to_f32. f32, f16, bf16 and q8_0 (src at a block's start) only:
 * q8 and q4 need their scales (ss_quant_to_f32), and nothing is written
 * for them. */
void ss_to_f32(float *dst, const void *src, ss_dtype src_t, size_t n);
/* Converts n f32 elements at src to dtype `dst_t` at dst (no aliasing):
 * the row's from_f32. f32, f16, bf16 and q8_0 (ss_dtype_row_size(dst_t,
 * n) bytes written) only: q8 and q4 need their scales (ss_quant_from_f32),
 * and nothing is written for them. A q8_0 block holding a non-finite x reads
 * back as NaN (d = NaN, codes 0). */
void ss_from_f32(void *dst, ss_dtype dst_t, const float *src, size_t n);

/* Byte shuffle (blosc's filter): n elements of es bytes, cut into blocks of
 * `block` elements (the last one shorter, m elements); within a block,
 * byte j of element i goes to j·m + i. Bytes of like significance then lie
 * together and zstd finds more to share. dst and src do not overlap. */
void ss_shuffle(void *dst, const void *src, size_t es, size_t n, size_t block);
/* The inverse of ss_shuffle() with the same es, n and block. */
void ss_unshuffle(void *dst, const void *src, size_t es, size_t n, size_t block);

/* q8 and q4 (t; Q = ss_dtype_info.scaled, 127 or 7): block quantization
 * of an array of n elements seen as n/row rows of `row` elements, each row
 * cut into ceil(row/block) blocks of `block` elements (the last one of a
 * row shorter). Block b of row r has scale index r·ceil(row/block) + b; its
 * scale is max|x|/Q over the block (0 for an all-zero block), its codes
 * q = round_to_nearest(x/scale) in [-Q, Q], and x is read back as q·scale,
 * so |x - q·scale| <= scale/2 up to f32 rounding of x/scale (a few ulp of
 * x). Non-finite x gives a non-finite scale, read back as NaN, never as a
 * plausible number. q8 stores a code a byte (int8); q4 two a byte, element
 * 2i in the low nibble and 2i+1 in the high one, 4-bit two's complement
 * (a reader takes -8 too). ref: per-row absmax int8 as in LLM.int8()
 * (Dettmers et al. 2022) and ggml's Q8_0/Q4_0 (fixed 32-element blocks). */
/* Scales of a whole array: n (a multiple of row) elements, row >= 1,
 * 1 <= block. */
size_t ss_q8_n_scales(size_t n, size_t row, size_t block);
/* scale: [ss_q8_n_scales(n,row,block)] f32 out; x: [n] f32 in. t: q8 or q4. */
void ss_quant_scales(ss_dtype t, float *scale, const float *x, size_t n, size_t row, size_t block);
/* Quantizes elements [e0, e0+n) of the array (t: q8 or q4; for q4 e0
 * must be even): x points at element e0; q at the byte that holds element
 * e0's code, and gets ss_dtype_row_size(t, n) bytes (an odd n's last high
 * nibble 0); scale is the whole array's (ss_quant_scales). */
void ss_quant_from_f32(ss_dtype t, void *q, const float *x, const float *scale, size_t e0, size_t n,
		       size_t row, size_t block);
/* Dequantizes elements [e0, e0+n) (t: q8 or q4): q points at the byte that
 * holds element e0's code (for q4 its high nibble when e0 is odd), any
 * alignment; dst gets n f32. */
void ss_quant_to_f32(ss_dtype t, float *dst, const void *q, const float *scale, size_t e0, size_t n,
		     size_t row, size_t block);

#ifdef __cplusplus
}
#endif

/* Module headers: include "ss.h", never these directly. */
#include "ss_stream.h"
#include "ss_tokenizer.h"
#include "ss_model.h"
#include "ss_ops.h"
#include "ss_forward.h"
#include "ss_device.h"
#include "ss_sample.h"
#include "ss_compose.h"
#include "ss_index.h"
#include "ss_eval.h"
#include "ss_train.h"
#include "ss_train_ckpt.h"

#endif /* SS_H */
