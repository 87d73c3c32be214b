/*
 * train_ckpt.c — safetensors writer and the model-directory checkpoint of a
 * trainer's parameters (ss_train_ckpt.h).
 * ref: huggingface/safetensors "Format" (u64 LE header length, JSON header,
 *      data; offsets relative to the data); transformers Mamba2Config.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "model/safetensors.h"

static const char *st_dtype(ss_dtype d)
{
	return d == SS_DTYPE_F32 ? "F32" : d == SS_DTYPE_F16 ? "F16" : "BF16";
}

static uint64_t numel(const ss_tensor_f32 *t)
{
	uint64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= (uint64_t)t->shape[d];
	return n;
}

char *ss_safetensors_header(const ss_tensor_f32 *t, size_t n, ss_dtype dt, size_t *len)
{
	size_t cap = 64, k = 0;
	for (size_t i = 0; i < n; i++)
		cap += strlen(t[i].name) + 160;
	char *h = malloc(cap);
	if (!h)
		return NULL;
	k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
	uint64_t off = 0, esz = ss_dtype_size(dt);
	for (size_t i = 0; i < n; i++) {
		k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				      t[i].name, st_dtype(dt));
		for (int d = 0; d < t[i].ndim; d++)
			k += (size_t)snprintf(h + k, cap - k, d ? ",%lld" : "%lld",
					      (long long)t[i].shape[d]);
		uint64_t end = off + numel(&t[i]) * esz;
		k += (size_t)snprintf(h + k, cap - k, "],\"data_offsets\":[%llu,%llu]}",
				      (unsigned long long)off, (unsigned long long)end);
		off = end;
	}
	k += (size_t)snprintf(h + k, cap - k, "}");
	while (k % 8)
		h[k++] = ' ';
	*len = k;
	return h;
}

int ss_safetensors_save(const char *path, const ss_tensor_f32 *t, size_t n, ss_dtype dtype,
			char *errmsg)
{
	const ss_dtype_info *di = ss_dtype_info_of(dtype);
	if (!di || !(di->uses & SS_DTYPE_SAFETENSORS))
		return ss_errf(errmsg, SS_ERR_INVALID, "%s: dtype %s is not a safetensors dtype (f32, f16, "
			       "bf16)", path, ss_dtype_name(dtype));
	for (size_t i = 0; i < n; i++)
		if (!t[i].name || !t[i].name[0] || strchr(t[i].name, '"') || t[i].ndim < 1 ||
		    t[i].ndim > 4)
			return ss_errf(errmsg, SS_ERR_INVALID, "%s: tensor %zu: bad name or ndim",
				       path, i);
	size_t len, esz = ss_dtype_size(dtype), chunk = 1 << 16;
	char *h = ss_safetensors_header(t, n, dtype, &len);
	void *buf = malloc(chunk * esz);
	ss_output *o = NULL;
	int rc = 0;
	if (!h || !buf) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((rc = ss_output_open(&o, path, errmsg)))
		goto out;
	FILE *f = ss_output_file(o);
	uint8_t lb[8];
	for (int i = 0; i < 8; i++)
		lb[i] = (uint8_t)((uint64_t)len >> (8 * i));
	int ok = fwrite(lb, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
	for (size_t i = 0; ok && i < n; i++) {
		uint64_t m = numel(&t[i]);
		for (uint64_t a = 0; ok && a < m; a += chunk) {
			size_t k = m - a < chunk ? (size_t)(m - a) : chunk;
			ss_from_f32(buf, dtype, t[i].data + a, k);
			ok = fwrite(buf, esz, k, f) == k;
		}
	}
	if (!ok) {
		ss_output_abort(o);
		rc = ss_errf(errmsg, SS_ERR_IO, "%s: write failed", path);
		goto out;
	}
	rc = ss_output_commit(o, errmsg);
out:
	free(h);
	free(buf);
	return rc;
}

int ss_safetensors_load_f32(const char *path, const char *name, float *dst, size_t n,
			    char *errmsg)
{
	ss_safetensors st;
	memset(&st, 0, sizeof st);
	int rc = ss_safetensors_open(&st, path, errmsg);
	if (rc)
		return rc;
	const ss_safetensors_tensor *t = ss_safetensors_find(&st, name);
	uint64_t m = 0;
	if (t && t->supported) {
		m = 1;
		for (int d = 0; d < t->ndim; d++)
			m *= (uint64_t)t->shape[d];
	}
	if (!t || !t->supported || m != n)
		rc = ss_errf(errmsg, SS_ERR_MISMATCH, "%s: %s: %s", path, name,
			     !t ? "missing" : !t->supported ? "not f32/f16/bf16"
							    : "element count differs");
	else
		rc = ss_safetensors_read_f32(&st, t, 0, n, dst, errmsg);
	ss_safetensors_close(&st);
	return rc;
}

/* pad_vocab_size_multiple that rounds vocab_size up to exactly padded rows
 * (transformers pads by it); 0 when none does. */
static int pad_multiple(int32_t vocab, int32_t padded)
{
	for (int32_t m = 1; m <= 1 << 16; m *= 2)
		if ((vocab + m - 1) / m * m == padded)
			return m;
	return 0;
}

/* dir/config.json for c, torch_dtype the dtype table's alias of dtype (f32,
 * f16 or bf16: ss_safetensors_save has refused any other before). */
static int write_config(const char *dir, const ss_model_config *c, ss_dtype dtype, char *errmsg)
{
	char path[4096], lo[32], hi[32];
	int32_t vocab = c->vocab_size;
	int mult = pad_multiple(vocab, c->vocab_padded);
	if (!mult) /* keep every row: the vocabulary becomes the padded size */
		vocab = c->vocab_padded, mult = 1;
	snprintf(path, sizeof path, "%s/config.json", dir);
	snprintf(lo, sizeof lo, "%.9g", (double)c->dt_min);
	snprintf(hi, sizeof hi, isinf(c->dt_max) ? "Infinity" : "%.9g", (double)c->dt_max);
	ss_output *o;
	int rc = ss_output_open(&o, path, errmsg);
	if (rc)
		return rc;
	FILE *f = ss_output_file(o);
	fprintf(f,
		"{\n  \"architectures\": [\"Mamba2ForCausalLM\"],\n  \"model_type\": \"mamba2\",\n"
		"  \"vocab_size\": %d,\n  \"pad_vocab_size_multiple\": %d,\n  \"hidden_size\": %d,\n"
		"  \"num_hidden_layers\": %d,\n  \"state_size\": %d,\n  \"expand\": %d,\n"
		"  \"head_dim\": %d,\n  \"num_heads\": %d,\n  \"n_groups\": %d,\n"
		"  \"conv_kernel\": %d,\n  \"layer_norm_epsilon\": %.9g,\n  \"rms_norm\": true,\n"
		"  \"residual_in_fp32\": true,\n  \"use_bias\": false,\n  \"use_conv_bias\": true,\n"
		"  \"norm_before_gate\": false,\n  \"hidden_act\": \"silu\",\n"
		"  \"time_step_limit\": [%s, %s],\n  \"tie_word_embeddings\": %s,\n"
		"  \"bos_token_id\": 0,\n  \"eos_token_id\": %d,\n  \"pad_token_id\": 0,\n"
		"  \"torch_dtype\": \"%s\"\n}\n",
		(int)vocab, mult, (int)c->d_model, (int)c->n_layer, (int)c->d_state, (int)c->expand,
		(int)c->headdim, (int)c->nheads, (int)c->ngroups, (int)c->d_conv, (double)c->eps, lo,
		hi, c->tied ? "true" : "false", (int)c->eos_token_id,
		ss_dtype_info_of(dtype)->alias);
	if (ferror(f)) {
		ss_output_abort(o);
		return ss_errf(errmsg, SS_ERR_IO, "%s: write failed", path);
	}
	return ss_output_commit(o, errmsg);
}

/* The tensors ss_train_save_model writes, in its order, as views of P: names
 * (transformers', into names[k]), shapes and data; conv1d.weight from convw
 * ([n_layer][conv_dim][d_conv], P's conv_wt transposed) or, with convw
 * NULL, from P's conv_wt itself (same numel, tap-major). t and names hold
 * 3 + 9·n_layer entries. Returns the number of tensors. */
static size_t param_views(const ss_model_config *c, const ss_train_params *P, const float *convw,
			  ss_tensor_f32 *t, char (*names)[96])
{
	const int64_t dm = c->d_model, K = c->d_conv, cd = c->conv_dim;
	size_t k = 0;
#define ADD(nm, d, nd, s0, s1, s2) do { \
		snprintf(names[k], sizeof names[k], "%s", nm); \
		t[k] = (ss_tensor_f32){ names[k], nd, { s0, s1, s2, 0 }, d }; k++; } while (0)
	ADD("backbone.embeddings.weight", P->embedding, 2, c->vocab_padded, dm, 0);
	for (int l = 0; l < c->n_layer; l++) {
		const ss_train_layer *L = &P->layers[l];
		const float *cw = convw ? convw + (size_t)l * (size_t)(cd * K) : L->conv_wt;
		char nm[96];
#define N(suffix) (snprintf(nm, sizeof nm, "backbone.layers.%d.%s", l, suffix), nm)
		ADD(N("norm.weight"), L->norm, 1, dm, 0, 0);
		ADD(N("mixer.in_proj.weight"), L->in_proj, 2, c->d_in_proj, dm, 0);
		ADD(N("mixer.conv1d.weight"), cw, 3, cd, 1, K);
		ADD(N("mixer.conv1d.bias"), L->conv_b, 1, cd, 0, 0);
		ADD(N("mixer.dt_bias"), L->dt_bias, 1, c->nheads, 0, 0);
		ADD(N("mixer.A_log"), L->A_log, 1, c->nheads, 0, 0);
		ADD(N("mixer.D"), L->D, 1, c->nheads, 0, 0);
		ADD(N("mixer.norm.weight"), L->gnorm, 1, c->d_inner, 0, 0);
		ADD(N("mixer.out_proj.weight"), L->out_proj, 2, dm, c->d_inner, 0);
#undef N
	}
	ADD("backbone.norm_f.weight", P->norm_f, 1, dm, 0, 0);
	if (!c->tied)
		ADD("lm_head.weight", P->lm_head, 2, c->vocab_padded, dm, 0);
#undef ADD
	return k;
}

int ss_train_save_model(const char *dir, const ss_model_config *c, const ss_train_params *P,
			ss_dtype dtype, char *errmsg)
{
	const int64_t K = c->d_conv, cd = c->conv_dim;
	size_t nt = 3 + 9 * (size_t)c->n_layer, k;
	ss_tensor_f32 *t = calloc(nt, sizeof *t);
	char (*names)[96] = calloc(nt, sizeof *names);
	float *convw = malloc((size_t)c->n_layer * (size_t)(cd * K) * sizeof(float));
	char path[4096];
	int rc;
	if (!t || !names || !convw) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "%s: out of memory", dir);
		goto out;
	}
	for (int l = 0; l < c->n_layer; l++) {
		const float *wt = P->layers[l].conv_wt;
		float *cw = convw + (size_t)l * (size_t)(cd * K);
		/* conv_wt[k][c] = conv1d.weight[c][0][k] */
		for (int64_t ch = 0; ch < cd; ch++)
			for (int64_t j = 0; j < K; j++)
				cw[ch * K + j] = wt[j * cd + ch];
	}
	k = param_views(c, P, convw, t, names);
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	if ((rc = ss_safetensors_save(path, t, k, dtype, errmsg)) == 0)
		rc = write_config(dir, c, dtype, errmsg);
out:
	free(t);
	free(names);
	free(convw);
	return rc;
}

int ss_train_params_check(const ss_model_config *c, const ss_train_params *P, const float *x,
			  int nonneg, char *errmsg)
{
	size_t i = 0;
	while (i < P->n && isfinite(x[i]) && (!nonneg || x[i] >= 0))
		i++;
	if (i == P->n)
		return 0;
	size_t nt = 3 + 9 * (size_t)c->n_layer, k;
	ss_tensor_f32 *t = calloc(nt, sizeof *t);
	char (*names)[96] = calloc(nt, sizeof *names);
	const char *name = "a parameter";
	if (t && names) {
		k = param_views(c, P, NULL, t, names);
		for (size_t j = 0; j < k; j++)
			if ((size_t)(t[j].data - P->data) <= i &&
			    i - (size_t)(t[j].data - P->data) < numel(&t[j]))
				name = t[j].name;
	}
	int rc = ss_errf(errmsg, SS_ERR_INVALID, "%s holds %g", name, (double)x[i]);
	free(t);
	free(names);
	return rc;
}
