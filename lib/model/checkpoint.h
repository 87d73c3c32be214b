/*
 * checkpoint.h — the weight files of a model directory, behind one interface
 * (internal to libss; used by model.c).
 *
 * Formats, tried in this order:
 *   model.safetensors                        one safetensors file
 *   model.safetensors.index.json             sharded safetensors ("weight_map")
 *   pytorch_model.bin                        torch.save zip, restricted unpickler
 * or, when the path is a file rather than a directory, a GGUF (llama.cpp's
 * convert_hf_to_gguf.py layout of arch mamba or mamba2), whose tensors are
 * listed under their HF names (canon) with HF shapes: blk.N.ssm_in.weight
 * {d_model, d_in_proj} is backbone.layers.N.mixer.in_proj.weight
 * [d_in_proj][d_model], ssm_conv1d.weight {d_conv, conv_dim} is
 * [conv_dim][1][d_conv], and ssm_a, which holds A = -exp(A_log), is read
 * as mixer.A_log = log(-A).
 * ref: huggingface/safetensors "Format"; transformers modeling_utils.py
 *      (index file: {"metadata": ..., "weight_map": {name: shard}});
 *      torch/serialization.py (zip layout <prefix>/data.pkl, <prefix>/data/<key>).
 */
#ifndef SS_CHECKPOINT_H
#define SS_CHECKPOINT_H

#include "ss.h"
#include "stream/gguf.h"

typedef struct ss_checkpoint ss_checkpoint;

/* One tensor as the checkpoint stores it (before widening). */
typedef struct {
	const char *name;
	const char *file;      /* path of the file holding it (for messages) */
	ss_dtype dtype;
	int ndim;
	int64_t shape[8];
	uint64_t numel;
	const char *canon;     /* GGUF: the HF name it stands for (ss_checkpoint_find
				  matches it); NULL for other formats */
	int src;               /* private: shard index, -1 for a torch zip, -2 for a GGUF */
	size_t idx;            /* private: entry index within the source */
	int neglog;            /* private: GGUF ssm_a, delivered as log(-A) */
} ss_checkpoint_tensor;

/* A read request. With dst non-NULL the tensor is widened into dst[numel]
 * and then visit(ctx, dst, numel) is called once; with dst NULL it is
 * streamed in chunks to visit and not kept. visit may be NULL. */
typedef struct {
	const ss_checkpoint_tensor *t;
	float *dst;
	void (*visit)(void *ctx, const float *x, size_t n);
	void *ctx;
} ss_checkpoint_req;

/* Opens the weights of model directory dir (or GGUF file dir) and lists
 * their tensors (headers or the pickle only; no tensor data is read).
 * Errors: SS_ERR_NOTFOUND (no weight file, missing shard),
 * SS_ERR_FORMAT/TRUNCATED/TOO_LARGE/VERSION (bad safetensors, index,
 * pickle or GGUF, as from ss_safetensors_open, ss_pickle_load_state_dict
 * and ss_gguf_open), SS_ERR_UNSUPPORTED (sharded .bin, big-endian or legacy
 * non-zip torch files, a GGUF of another architecture). errmsg names the
 * file. Caller closes. */
int ss_checkpoint_open(ss_checkpoint **out, const char *dir, char *errmsg);

/* A GGUF's general.architecture: *mamba1 = 1 for "mamba", 0 for "mamba2".
 * Errors: SS_ERR_FORMAT (absent or not a string), SS_ERR_UNSUPPORTED
 * (another architecture); errmsg names the file. */
int ss_gguf_mamba_arch(const ss_gguf *g, int *mamba1, char *errmsg);

/* The tensor named `name`, or NULL. */
const ss_checkpoint_tensor *ss_checkpoint_find(const ss_checkpoint *c, const char *name);

/* Path of the file that names the weights (DIR/model.safetensors,
 * DIR/model.safetensors.index.json or DIR/pytorch_model.bin), for messages. */
const char *ss_checkpoint_path(const ss_checkpoint *c);

/* F32 data of t straight from a file mapping (no copy), or NULL when that is
 * not possible (other dtype, unaligned, torch zip, mmap failure). Valid until
 * ss_checkpoint_close(). */
const float *ss_checkpoint_map_f32(ss_checkpoint *c, const ss_checkpoint_tensor *t);

/* Serves n requests (any order; a torch zip is read in one sequential pass).
 * Errors: SS_ERR_IO, SS_ERR_TRUNCATED, SS_ERR_FORMAT (archive), SS_ERR_NOTFOUND
 * (storage entry missing from the zip), SS_ERR_NOMEM. */
int ss_checkpoint_read(ss_checkpoint *c, const ss_checkpoint_req *req, size_t n, char *errmsg);

/* Releases files, mappings and lists. NULL is fine. */
void ss_checkpoint_close(ss_checkpoint *c);

#endif /* SS_CHECKPOINT_H */
