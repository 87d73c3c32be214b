/*
 * stream/gguf.h — reader of llama.cpp's GGUF model files (internal to libss:
 * model/ reads a GGUF's hyperparameters and weights through it, tokenizer/
 * its vocabulary).
 *
 * Layout (all little-endian; versions 2 and 3):
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × { string key | u32 value type | value }
 *   n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data
 * where a string is u64 length + bytes (no NUL), an array value is u32
 * element type | u64 count | elements, ne[0] is the fastest-varying dimension
 * (a torch [rows][cols] matrix is ne = {cols, rows}) and offset counts from
 * the start of the data. Opening maps the file and checks every record
 * against its size before anything is allocated for it, so a truncated file
 * or an absurd count or size is an error naming the record and its byte
 * offset, and later reads never leave the mapping.
 * ref: ggml/include/gguf.h and ggml/src/gguf.cpp (gguf_init_from_file_impl),
 *      ggml/include/ggml.h (enum ggml_type), ggml-common.h (block_q8_0) of
 *      llama.cpp d32676d.
 */
#ifndef SS_GGUF_H
#define SS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/* ggml tensor types this reader widens to f32 (others are listed with
 * their type and refused by ss_gguf_read_f32). */
enum { SS_GGML_F32 = 0, SS_GGML_F16 = 1, SS_GGML_Q8_0 = 8, SS_GGML_BF16 = 30 };
/* GGUF metadata value types (gguf.h enum gguf_type). */
enum {
	SS_GGUF_U8, SS_GGUF_I8, SS_GGUF_U16, SS_GGUF_I16, SS_GGUF_U32, SS_GGUF_I32, SS_GGUF_F32,
	SS_GGUF_BOOL, SS_GGUF_STRING, SS_GGUF_ARRAY, SS_GGUF_U64, SS_GGUF_I64, SS_GGUF_F64,
	SS_GGUF_NTYPES
};

typedef struct {
	char *name;             /* NUL-terminated copy (at most 255 bytes, no NUL inside) */
	uint32_t type;          /* ggml type (SS_GGML_*, or another the reader only lists) */
	int n_dims;             /* 1..4 */
	int64_t ne[4];          /* ggml order: ne[0] fastest; unused dims 1 */
	uint64_t numel;
	uint64_t offset;        /* absolute file offset of the data */
	uint64_t nbytes;        /* 0 for a type the reader does not widen */
} ss_gguf_tensor;

typedef struct {
	char *key;              /* NUL-terminated copy */
	uint32_t type;          /* SS_GGUF_* */
	uint32_t elem;          /* arrays: element type */
	uint64_t n;             /* arrays: element count; strings: byte length */
	const uint8_t *val;     /* the value's bytes in the mapping (for arrays: the first element) */
} ss_gguf_kv;

typedef struct {
	char *path;
	uint8_t *map;           /* private (copy-on-write) mapping of the whole file */
	size_t size;
	uint32_t version;
	uint32_t alignment;
	uint64_t data;          /* file offset of the tensor data */
	ss_gguf_kv *kv;
	size_t n_kv;
	ss_gguf_tensor *t;
	size_t n_t;
} ss_gguf;

/* Opens path (a regular file) and validates its header, metadata and tensor
 * list. Errors, errmsg "PATH: ...": SS_ERR_IO/SS_ERR_NOTFOUND (open, mmap),
 * SS_ERR_FORMAT (not GGUF, a bad type, a metadata key or a tensor name
 * twice, an offset not aligned, data overlapping), SS_ERR_VERSION (not
 * version 2 or 3, or a big-endian file), SS_ERR_TRUNCATED (a record or a
 * tensor's data past the end: names the record and the byte offset),
 * SS_ERR_TOO_LARGE (a count, a dimension or a size no file of this size
 * can hold; every product of the file's counts is checked, ss_ckd_mul, so
 * none wraps), SS_ERR_NOMEM.
 * Memory: a few words per key and tensor, bounded by the file's size. The
 * caller closes with ss_gguf_close (also after an error). */
int ss_gguf_open(ss_gguf *g, const char *path, char *errmsg);

/* 1 when the file at path starts with the GGUF magic, else 0 (also when it
 * cannot be read). */
int ss_gguf_is(const char *path);

/* Unmaps and frees; safe on a zeroed or failed-open struct. */
void ss_gguf_close(ss_gguf *g);

/* The pair named key, or NULL. */
const ss_gguf_kv *ss_gguf_find_kv(const ss_gguf *g, const char *key);

/* key's value as an unsigned integer (any integer type, non-negative) or
 * a bool. Returns 0, SS_ERR_NOTFOUND (absent; errmsg untouched) or
 * SS_ERR_FORMAT (another type or negative; errmsg "PATH: KEY: ..."). */
int ss_gguf_get_uint(const ss_gguf *g, const char *key, uint64_t *out, char *errmsg);

/* key's value as a float (f32 or f64). Errors as ss_gguf_get_uint. */
int ss_gguf_get_float(const ss_gguf *g, const char *key, double *out, char *errmsg);

/* key's string (not NUL-terminated; borrowed from the mapping). Errors as
 * ss_gguf_get_uint. */
int ss_gguf_get_str(const ss_gguf *g, const char *key, const char **s, size_t *len,
		    char *errmsg);

/* key's array of strings: *n elements starting at *first; walk them with
 * ss_gguf_str_next. Errors as ss_gguf_get_uint (SS_ERR_FORMAT: not an
 * array of strings). */
int ss_gguf_get_strs(const ss_gguf *g, const char *key, const uint8_t **first, uint64_t *n,
		     char *errmsg);

/* The string at *p (as returned by ss_gguf_get_strs or a previous call):
 * sets *s and *len and advances *p past it. Only for arrays of a file that
 * ss_gguf_open accepted (their bounds were checked there). */
void ss_gguf_str_next(const uint8_t **p, const char **s, size_t *len);

/* The tensor named name, or NULL. */
const ss_gguf_tensor *ss_gguf_find(const ss_gguf *g, const char *name);

/* The type's name ("F32", "Q4_K", ...; "type N" for an unknown one, in a
 * static buffer). */
const char *ss_gguf_type_name(uint32_t type);

/* Elements [first, first + n) of t (F32, F16, BF16 or Q8_0: x = d · q per
 * block of 32), widened to f32 into dst[n]. Errors: SS_ERR_UNSUPPORTED
 * (another type: errmsg "PATH: NAME: type Q4_K is not supported (F32, F16,
 * BF16, Q8_0 ...)"), SS_ERR_INVALID (range out of the tensor). */
int ss_gguf_read_f32(const ss_gguf *g, const ss_gguf_tensor *t, uint64_t first, size_t n,
		     float *dst, char *errmsg);

#endif /* SS_GGUF_H */
