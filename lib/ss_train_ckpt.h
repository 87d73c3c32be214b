/*
 * ss_train_ckpt.h — writing what training produces: safetensors files from
 * f32 arrays, and a trainer's parameters as an ordinary transformers Mamba-2
 * model directory (config.json + model.safetensors) that ss_model_load (and
 * every ss tool) loads; reading an f32 tensor back (optimiser state). Part
 * of libss; include "ss.h".
 * Public: part of libss's interface (ss.h says what that means).
 * ref: huggingface/safetensors "Format"; transformers
 *      models/mamba2/configuration_mamba2.py (config keys) and
 *      modeling_mamba2.py (tensor names).
 */
#ifndef SS_TRAIN_CKPT_H
#define SS_TRAIN_CKPT_H

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor to write: f32 values, row-major, numel = Π shape. */
typedef struct {
	const char *name;
	int ndim;             /* 1..4 */
	int64_t shape[4];
	const float *data;    /* [numel] f32 */
} ss_tensor_f32;

/* The JSON header of a safetensors file holding the n tensors (names,
 * shapes; data unused) back to back in this order, each in `dtype`, with
 * __metadata__ {"format": "pt"}, padded with spaces to a multiple of 8
 * bytes (the data's alignment); its length in *len. Malloc'd (caller frees),
 * not NUL-terminated; NULL when out of memory. Names must not need JSON
 * escaping. */
char *ss_safetensors_header(const ss_tensor_f32 *t, size_t n, ss_dtype dtype, size_t *len);

/* Writes the n tensors to `path` as one safetensors file, each stored in
 * `dtype` (f32 as is; f16/bf16 rounded to nearest even), in the given order,
 * with __metadata__ {"format": "pt"}. The file appears whole on success
 * (temporary file, fsync, rename: ss_output) or not at all.
 * Returns 0, SS_ERR_INVALID (ndim, empty name), SS_ERR_NOMEM or SS_ERR_IO
 * (errmsg names the path). */
int ss_safetensors_save(const char *path, const ss_tensor_f32 *t, size_t n, ss_dtype dtype,
			char *errmsg);

/* Reads tensor `name` of the safetensors file `path` into dst[n] (f32,
 * widened from f16/bf16). Returns 0, the errors of opening the file
 * (SS_ERR_NOTFOUND, SS_ERR_IO, SS_ERR_FORMAT, SS_ERR_TRUNCATED), or
 * SS_ERR_MISMATCH when the tensor is missing or has another element count. */
int ss_safetensors_load_f32(const char *path, const char *name, float *dst, size_t n,
			    char *errmsg);

/* Writes the parameters P (ss_train_params_of of a trainer of a model with
 * config c) into the existing directory dir as DIR/config.json (transformers
 * Mamba2Config: hidden_size, num_hidden_layers, state_size, head_dim,
 * n_groups, expand, conv_kernel, vocab_size + pad_vocab_size_multiple giving
 * c->vocab_padded rows, layer_norm_epsilon, time_step_limit,
 * tie_word_embeddings, eos_token_id, torch_dtype) and DIR/model.safetensors
 * (transformers names; conv1d.weight back to [conv_dim][1][d_conv]), every
 * tensor in `dtype`. Each file appears whole or not at all. Loading the
 * result gives c again, and with dtype f32 exactly P's values.
 * Returns 0, SS_ERR_NOMEM or SS_ERR_IO (errmsg names the file). */
int ss_train_save_model(const char *dir, const ss_model_config *c, const ss_train_params *P,
			ss_dtype dtype, char *errmsg);

/* Checks x[P->n], an array laid out as P->data (the parameters of a trainer
 * of a model with config c, or Adam's moments of them): every element
 * finite and, with nonneg, >= 0. Returns 0, or SS_ERR_INVALID with errmsg
 * naming the tensor of the first element that is not by the name
 * ss_train_save_model writes it under, and its value
 * ("backbone.layers.0.mixer.A_log holds nan"; "a parameter holds nan" when
 * out of memory to find the name). ss-train writes no checkpoint that fails
 * it. */
int ss_train_params_check(const ss_model_config *c, const ss_train_params *P, const float *x,
			  int nonneg, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif /* SS_TRAIN_CKPT_H */
