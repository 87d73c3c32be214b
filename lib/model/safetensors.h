/*
 * safetensors.h — reader for one .safetensors file (internal to libss).
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data; offsets are relative to byte 8+N.
 * Opening validates the whole header against the file size, so later reads
 * never leave the file.
 * ref: huggingface/safetensors docs "Format" (the format spec).
 */
#ifndef SS_SAFETENSORS_H
#define SS_SAFETENSORS_H

#include "ss.h"

#define SS_SAFETENSORS_MAXDIM 8
#define SS_SAFETENSORS_MAX_HEADER (100u << 20) /* larger headers are refused */

typedef struct {
	char *name;
	char dtype_name[12];   /* as written: "F32", "BF16", "I64", ... */
	int supported;         /* dtype is F32, F16 or BF16 (then `dtype` is valid) */
	ss_dtype dtype;
	int ndim;
	int64_t shape[SS_SAFETENSORS_MAXDIM];
	uint64_t begin, end;   /* absolute file offsets of the data */
} ss_safetensors_tensor;

typedef struct {
	char *path;
	int fd;
	uint64_t file_size;
	ss_safetensors_tensor *t;
	size_t n;
	void *map;             /* whole-file mapping, made on demand; NULL if none */
	size_t map_len;
} ss_safetensors;

/* Opens and validates path. Errors (errmsg "<path>: ..."):
 * SS_ERR_IO/SS_ERR_NOTFOUND (open), SS_ERR_TRUNCATED (file shorter than
 * its header or a tensor's data), SS_ERR_TOO_LARGE (header length over
 * 100 MB), SS_ERR_FORMAT (bad JSON, bad entry, unknown dtype, size not
 * matching shape x dtype). On success the caller closes with
 * ss_safetensors_close(). */
int ss_safetensors_open(ss_safetensors *st, const char *path, char *errmsg);

/* Entry named `name`, or NULL. */
const ss_safetensors_tensor *ss_safetensors_find(const ss_safetensors *st, const char *name);

/* Reads elements [first, first+n) of tensor t (supported dtype), widened to
 * f32, into dst[n]. Errors: SS_ERR_IO, SS_ERR_TRUNCATED (file shrank). */
int ss_safetensors_read_f32(ss_safetensors *st, const ss_safetensors_tensor *t,
                            size_t first, size_t n, float *dst, char *errmsg);

/* Pointer to tensor t's data inside a private (copy-on-write) mapping of the
 * whole file, or NULL when t is not F32, not 4-byte aligned, or mmap fails.
 * Valid until ss_safetensors_close(). */
const float *ss_safetensors_map_f32(ss_safetensors *st, const ss_safetensors_tensor *t);

/* Closes the file, unmaps, frees entries. Safe on a zeroed struct. */
void ss_safetensors_close(ss_safetensors *st);

#endif /* SS_SAFETENSORS_H */
