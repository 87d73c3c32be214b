/*
 * model.c — Mamba-2 model directories: config.json, weight loading with shape
 * checks, and the weight fingerprint.
 *
 * Loading plan: parse the config, list the checkpoint's tensors (headers
 * only), resolve and shape-check every tensor the model needs, then read them
 * in one batch into a single arena (or point into a file mapping for aligned
 * f32 safetensors): f32, or for the four matrices in a 16-bit or q8_0
 * weights_dtype, narrowed chunk by chunk as they stream in. Each tensor is
 * hashed as it arrives, widened to f32; the model fingerprint combines the per-tensor digests in a
 * fixed order, so it does not depend on file layout, storage dtype (after
 * widening), weights_dtype or read order.
 * ref: docs/DESIGN.md §2; transformers models/mamba2/configuration_mamba2.py;
 *      mamba_ssm models/config_mamba.py, models/mixer_seq_simple.py,
 *      modules/mamba2.py (parameter names and shapes).
 */
#include "ss.h"

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "stream/gguf.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONFIG_JSON (16u << 20)
#define MAX_DIM (1 << 24)

/* ------------------------------------------------------------ fingerprint */

/* A 64-bit hash with four independent lanes over 32-byte stripes (the round
 * and avalanche structure of xxHash64), fast enough that hashing a 500 MB
 * model costs well under a second and mixing every input bit. */
typedef struct {
	uint64_t v[4];
	uint64_t len;
	uint8_t tail[32];
	size_t ntail;
} fphash;

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t fround(uint64_t acc, uint64_t in)
{
	return rotl(acc + in * P2, 31) * P1;
}
static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void fphash_init(fphash *h, uint64_t seed)
{
	h->v[0] = seed + P1 + P2;
	h->v[1] = seed + P2;
	h->v[2] = seed;
	h->v[3] = seed - P1;
	h->len = 0;
	h->ntail = 0;
}

static void fphash_update(fphash *h, const void *data, size_t n)
{
	const uint8_t *p = data;
	h->len += n;
	if (h->ntail) {
		size_t k = 32 - h->ntail < n ? 32 - h->ntail : n;
		memcpy(h->tail + h->ntail, p, k);
		h->ntail += k;
		p += k;
		n -= k;
		if (h->ntail < 32)
			return;
		for (int i = 0; i < 4; i++)
			h->v[i] = fround(h->v[i], rd64(h->tail + 8 * i));
		h->ntail = 0;
	}
	uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];
	for (; n >= 32; p += 32, n -= 32) {
		v0 = fround(v0, rd64(p));
		v1 = fround(v1, rd64(p + 8));
		v2 = fround(v2, rd64(p + 16));
		v3 = fround(v3, rd64(p + 24));
	}
	h->v[0] = v0, h->v[1] = v1, h->v[2] = v2, h->v[3] = v3;
	memcpy(h->tail, p, n);
	h->ntail = n;
}

static uint64_t fphash_final(const fphash *h)
{
	uint64_t x = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18);
	for (int i = 0; i < 4; i++) {
		x ^= fround(0, h->v[i]);
		x = x * P1 + P4;
	}
	x += h->len;
	size_t i = 0;
	for (; i + 8 <= h->ntail; i += 8) {
		x ^= fround(0, rd64(h->tail + i));
		x = rotl(x, 27) * P1 + P4;
	}
	for (; i < h->ntail; i++) {
		x ^= h->tail[i] * P5;
		x = rotl(x, 11) * P1;
	}
	x ^= x >> 33;
	x *= P2;
	x ^= x >> 29;
	x *= P3;
	x ^= x >> 32;
	return x;
}

static void fphash_visit(void *ctx, const float *x, size_t n)
{
	fphash_update(ctx, x, n * sizeof *x);
}

/* ----------------------------------------------------------------- config */

/* Rewrites the non-JSON literals Python's json module writes (Infinity,
 * -Infinity, NaN) outside strings: ±Infinity → ±1e999 (strtod gives ±inf),
 * NaN → null. Returns a new buffer. */
static char *json_relax(const char *in, size_t len)
{
	char *out = malloc(len * 2 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	int instr = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = in[i];
		if (instr) {
			out[o++] = ch;
			if (ch == '\\' && i + 1 < len)
				out[o++] = in[++i];
			else if (ch == '"')
				instr = 0;
			continue;
		}
		if (ch == '"')
			instr = 1;
		if (len - i >= 8 && !memcmp(in + i, "Infinity", 8)) {
			memcpy(out + o, "1e999", 5);
			o += 5;
			i += 7;
		} else if (len - i >= 3 && !memcmp(in + i, "NaN", 3)) {
			memcpy(out + o, "null", 4);
			o += 4;
			i += 2;
		} else {
			out[o++] = ch;
		}
	}
	out[o] = 0;
	return out;
}

typedef struct {
	const cJSON *obj;
	const char *path;
	char *errmsg;
} cfgctx;

/* Integer field `key` of x->obj in [lo, hi]; def when absent (def < lo
 * means the field is required). */
static int cfg_int(const cfgctx *x, const cJSON *obj, const char *key, int64_t def, int64_t lo,
                   int64_t hi, int32_t *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!j || cJSON_IsNull(j)) {
		if (def < lo)
			return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: missing \"%s\"", x->path, key);
		*out = (int32_t)def;
		return 0;
	}
	double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
	if (!(v == floor(v)) || v < (double)lo)
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: \"%s\" must be an integer >= %lld", x->path,
		            key, (long long)lo);
	if (v > (double)hi)
		return ss_errf(x->errmsg, SS_ERR_TOO_LARGE, "%s: \"%s\" = %.0f exceeds %lld", x->path, key,
		            v, (long long)hi);
	*out = (int32_t)v;
	return 0;
}

/* Boolean field, def when absent. */
static int cfg_bool(const cfgctx *x, const cJSON *obj, const char *key, int def, int *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!j || cJSON_IsNull(j)) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(j))
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: \"%s\" must be true or false", x->path, key);
	*out = cJSON_IsTrue(j);
	return 0;
}

/* Optional [lo, hi] dt clamp (time_step_limit / dt_limit). */
static int cfg_limit(const cfgctx *x, const cJSON *obj, const char *key, ss_model_config *c)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	c->dt_min = 0.0f;
	c->dt_max = INFINITY;
	if (!j || cJSON_IsNull(j))
		return 0;
	const cJSON *a = cJSON_GetArrayItem(j, 0), *b = cJSON_GetArrayItem(j, 1);
	if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || !cJSON_IsNumber(a) ||
	    !cJSON_IsNumber(b) || !(a->valuedouble >= 0) || !(b->valuedouble >= a->valuedouble))
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: \"%s\" must be [min, max] with 0 <= min <= max",
		            x->path, key);
	c->dt_min = (float)a->valuedouble;
	c->dt_max = (float)b->valuedouble;
	return 0;
}

static int unsupported(const cfgctx *x, const char *what)
{
	return ss_errf(x->errmsg, SS_ERR_UNSUPPORTED, "%s: %s is not supported (only Mamba-2)", x->path,
	            what);
}

/* Fails with SS_ERR_UNSUPPORTED when boolean `key` is present and != want. */
static int cfg_require(const cfgctx *x, const cJSON *obj, const char *key, int def, int want,
                       const char *what)
{
	int v, rc = cfg_bool(x, obj, key, def, &v);
	if (rc)
		return rc;
	return v == want ? 0 : unsupported(x, what);
}

/* eos_token_id: an integer, or a list whose first entry is used. */
static int cfg_eos(const cfgctx *x, const cJSON *obj, int32_t *out)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, "eos_token_id");
	if (cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0) {
		cJSON *wrap = cJSON_CreateObject();
		if (!wrap)
			return ss_errf(x->errmsg, SS_ERR_NOMEM, "out of memory");
		cJSON_AddItemReferenceToObject(wrap, "eos_token_id", cJSON_GetArrayItem(j, 0));
		int rc = cfg_int(x, wrap, "eos_token_id", 0, 0, MAX_DIM, out);
		cJSON_Delete(wrap);
		return rc;
	}
	return cfg_int(x, obj, "eos_token_id", 0, 0, MAX_DIM, out);
}

/* The fields transformers' Mamba2Config and MambaConfig share: hidden_act
 * (silu), layer_norm_epsilon, hidden_size, num_hidden_layers, expand,
 * conv_kernel, vocab_size padded by pad_vocab_size_multiple (default 1),
 * eos, tie_word_embeddings (default `tied`), no in/out_proj bias, a conv
 * bias; sets d_inner. */
static int config_hf_top(ss_model_config *c, const cfgctx *x, int tied_default)
{
	const cJSON *o = x->obj;
	int rc, tied;
	int32_t mult;
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "hidden_act");
	if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
		return unsupported(x, "hidden_act other than silu");
	double eps = 1e-5;
	const cJSON *je = cJSON_GetObjectItemCaseSensitive(o, "layer_norm_epsilon");
	if (cJSON_IsNumber(je))
		eps = je->valuedouble;
	if ((rc = cfg_int(x, o, "hidden_size", -1, 1, MAX_DIM, &c->d_model)) ||
	    (rc = cfg_int(x, o, "num_hidden_layers", -1, 1, 65536, &c->n_layer)) ||
	    (rc = cfg_int(x, o, "expand", 2, 1, 64, &c->expand)) ||
	    (rc = cfg_int(x, o, "conv_kernel", 4, 2, 64, &c->d_conv)) ||
	    (rc = cfg_int(x, o, "vocab_size", -1, 1, MAX_DIM, &c->vocab_size)) ||
	    (rc = cfg_int(x, o, "pad_vocab_size_multiple", 1, 1, 1 << 16, &mult)) ||
	    (rc = cfg_eos(x, o, &c->eos_token_id)) ||
	    (rc = cfg_bool(x, o, "tie_word_embeddings", tied_default, &tied)) ||
	    (rc = cfg_require(x, o, "use_bias", 0, 0, "use_bias=true (in/out_proj bias)")) ||
	    (rc = cfg_require(x, o, "use_conv_bias", 1, 1, "use_conv_bias=false")))
		return rc;
	c->tied = tied;
	c->eps = (float)eps;
	c->d_inner = c->expand * c->d_model;
	c->vocab_padded = (int32_t)(((int64_t)c->vocab_size + mult - 1) / mult * mult);
	return 0;
}

/* transformers Mamba2Config (defaults as in configuration_mamba2.py). */
static int config_hf(ss_model_config *c, const cfgctx *x)
{
	const cJSON *o = x->obj;
	int rc;
	int32_t nh = 0;
	if ((rc = config_hf_top(c, x, 0)) ||
	    (rc = cfg_int(x, o, "state_size", 128, 1, MAX_DIM, &c->d_state)) ||
	    (rc = cfg_int(x, o, "head_dim", 64, 1, MAX_DIM, &c->headdim)) ||
	    (rc = cfg_int(x, o, "num_heads", 0, 0, MAX_DIM, &nh)) ||
	    (rc = cfg_int(x, o, "n_groups", 8, 1, MAX_DIM, &c->ngroups)) ||
	    (rc = cfg_require(x, o, "rms_norm", 1, 1, "LayerNorm (rms_norm=false)")) ||
	    (rc = cfg_require(x, o, "norm_before_gate", 0, 0, "norm_before_gate=true")) ||
	    (rc = cfg_limit(x, o, "time_step_limit", c)))
		return rc;
	if (nh && (int64_t)nh * c->headdim != c->d_inner)
		return ss_errf(x->errmsg, SS_ERR_FORMAT,
		            "%s: num_heads %d x head_dim %d != expand x hidden_size %d", x->path, nh,
		            c->headdim, c->d_inner);
	return 0;
}

/* The top-level fields of a state-spaces config (mamba_ssm MambaConfig),
 * shared by Mamba-1 and Mamba-2: d_model, n_layer, vocab_size (padded by
 * pad_vocab_size_multiple, default 8), eos, tie_embeddings, norm_epsilon. */
static int config_ss_top(ss_model_config *c, const cfgctx *x)
{
	const cJSON *o = x->obj;
	int rc, tied;
	int32_t mult;
	double eps = 1e-5;
	const cJSON *je = cJSON_GetObjectItemCaseSensitive(o, "norm_epsilon");
	if (cJSON_IsNumber(je))
		eps = je->valuedouble;
	if ((rc = cfg_int(x, o, "d_model", -1, 1, MAX_DIM, &c->d_model)) ||
	    (rc = cfg_int(x, o, "n_layer", -1, 1, 65536, &c->n_layer)) ||
	    (rc = cfg_int(x, o, "vocab_size", -1, 1, MAX_DIM, &c->vocab_size)) ||
	    (rc = cfg_int(x, o, "pad_vocab_size_multiple", 8, 1, 1 << 16, &mult)) ||
	    (rc = cfg_eos(x, o, &c->eos_token_id)) ||
	    (rc = cfg_bool(x, o, "tie_embeddings", 1, &tied)) ||
	    (rc = cfg_require(x, o, "rms_norm", 1, 1, "LayerNorm (rms_norm=false)")))
		return rc;
	c->tied = tied;
	c->eps = (float)eps;
	c->vocab_padded = (int32_t)(((int64_t)c->vocab_size + mult - 1) / mult * mult);
	return 0;
}

static int config_ss1(ss_model_config *c, const cfgctx *x, const cJSON *s);

/* mamba_ssm MambaConfig with ssm_cfg (defaults from config_mamba.py and
 * modules/mamba2.py). */
static int config_ss(ss_model_config *c, const cfgctx *x)
{
	const cJSON *o = x->obj;
	int rc;
	int32_t dint, dssm;
	const cJSON *attn = cJSON_GetObjectItemCaseSensitive(o, "attn_layer_idx");
	if (attn && cJSON_GetArraySize(attn) > 0)
		return unsupported(x, "a hybrid with attention layers (attn_layer_idx)");
	if ((rc = cfg_int(x, o, "d_intermediate", 0, 0, MAX_DIM, &dint)))
		return rc;
	if (dint > 0)
		return unsupported(x, "an MLP block (d_intermediate > 0)");
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "ssm_cfg");
	if (s && !cJSON_IsObject(s))
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: \"ssm_cfg\" must be an object", x->path);
	const cJSON *layer = cJSON_GetObjectItemCaseSensitive(s, "layer");
	if (layer && !cJSON_IsString(layer))
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: \"ssm_cfg.layer\" must be a string", x->path);
	if (layer ? !strcmp(layer->valuestring, "Mamba1")
	          : !cJSON_GetObjectItemCaseSensitive(s, "headdim"))
		return config_ss1(c, x, s);
	if (layer && strcmp(layer->valuestring, "Mamba2")) /* no layer, a headdim: Mamba-2 */
		return unsupported(x, "this ssm_cfg.layer");
	if ((rc = config_ss_top(c, x)) ||
	    (rc = cfg_int(x, s, "d_state", 128, 1, MAX_DIM, &c->d_state)) ||
	    (rc = cfg_int(x, s, "headdim", 64, 1, MAX_DIM, &c->headdim)) ||
	    (rc = cfg_int(x, s, "ngroups", 1, 1, MAX_DIM, &c->ngroups)) ||
	    (rc = cfg_int(x, s, "d_conv", 4, 2, 64, &c->d_conv)) ||
	    (rc = cfg_int(x, s, "expand", 2, 1, 64, &c->expand)) ||
	    (rc = cfg_int(x, s, "d_ssm", 0, 0, MAX_DIM, &dssm)) ||
	    (rc = cfg_require(x, s, "rmsnorm", 1, 1, "Mamba2 without the gated RMSNorm")) ||
	    (rc = cfg_require(x, s, "norm_before_gate", 0, 0, "norm_before_gate=true")) ||
	    (rc = cfg_require(x, s, "D_has_hdim", 0, 0, "D_has_hdim=true")) ||
	    (rc = cfg_require(x, s, "bias", 0, 0, "in/out_proj bias")) ||
	    (rc = cfg_require(x, s, "conv_bias", 1, 1, "conv_bias=false")) ||
	    (rc = cfg_limit(x, s, "dt_limit", c)))
		return rc;
	c->d_inner = c->expand * c->d_model;
	if (dssm && dssm != c->d_inner)
		return unsupported(x, "d_ssm != expand x d_model");
	return 0;
}

/* dt_rank: an integer, or "auto" (absent too) = ceil(d_model / 16). */
static int cfg_dt_rank(const cfgctx *x, const cJSON *obj, const char *key, ss_model_config *c)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!j || cJSON_IsNull(j) || (cJSON_IsString(j) && !strcmp(j->valuestring, "auto"))) {
		c->dt_rank = (c->d_model + 15) / 16;
		return 0;
	}
	return cfg_int(x, obj, key, -1, 1, MAX_DIM, &c->dt_rank);
}

/* transformers MambaConfig (configuration_mamba.py: vocab_size is the
 * embedding rows, tie_word_embeddings defaults to true). */
static int config_hf1(ss_model_config *c, const cfgctx *x)
{
	const cJSON *o = x->obj;
	int rc;
	int32_t inter;
	if ((rc = config_hf_top(c, x, 1)) ||
	    (rc = cfg_int(x, o, "state_size", 16, 1, MAX_DIM, &c->d_state)) ||
	    (rc = cfg_int(x, o, "intermediate_size", 0, 0, MAX_DIM, &inter)) ||
	    (rc = cfg_dt_rank(x, o, "time_step_rank", c)))
		return rc;
	if (inter && inter != c->d_inner)
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "%s: intermediate_size %d != expand x hidden_size %d",
		            x->path, inter, c->d_inner);
	return 0;
}

/* mamba_ssm MambaConfig whose ssm_cfg is Mamba-1's (modules/mamba_simple.py
 * defaults: d_state 16, d_conv 4, expand 2, dt_rank "auto"). */
static int config_ss1(ss_model_config *c, const cfgctx *x, const cJSON *s)
{
	int rc;
	if ((rc = config_ss_top(c, x)) ||
	    (rc = cfg_int(x, s, "d_state", 16, 1, MAX_DIM, &c->d_state)) ||
	    (rc = cfg_int(x, s, "d_conv", 4, 2, 64, &c->d_conv)) ||
	    (rc = cfg_int(x, s, "expand", 2, 1, 64, &c->expand)) ||
	    (rc = cfg_dt_rank(x, s, "dt_rank", c)) ||
	    (rc = cfg_require(x, s, "bias", 0, 0, "in/out_proj bias")) ||
	    (rc = cfg_require(x, s, "conv_bias", 1, 1, "conv_bias=false")))
		return rc;
	c->d_inner = c->expand * c->d_model;
	return 0;
}

/* Mamba-1 as the shared dims see it: one channel per head (headdim 1), the
 * conv over x alone, in_proj x | z. */
static int config_mamba1_dims(ss_model_config *c, const char *path, char *errmsg)
{
	snprintf(c->arch, sizeof c->arch, "mamba1");
	c->headdim = 1;
	c->nheads = c->d_inner;
	c->ngroups = 1;
	c->dt_min = 0.0f;
	c->dt_max = INFINITY;
	if ((int64_t)c->d_inner * 2 > MAX_DIM)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: d_inner %d is too large", path, c->d_inner);
	if (c->dt_rank + 2LL * c->d_state > MAX_DIM) /* x_proj's width: dt_rank + 2 d_state */
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: x_proj width %lld (dt_rank %d + 2 x d_state %d) "
			       "is too large", path, c->dt_rank + 2LL * c->d_state, c->dt_rank, c->d_state);
	c->conv_dim = c->d_inner;
	c->d_in_proj = 2 * c->d_inner;
	if (!(c->eps > 0 && c->eps < 1))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: epsilon must be in (0, 1)", path);
	return 0;
}

int ss_model_is_mamba1(const ss_model_config *cfg)
{
	return cfg && !strcmp(cfg->arch, "mamba1");
}

static int config_parse(ss_model_config *c, const cJSON *root, const char *path, char *errmsg)
{
	cfgctx x = {root, path, errmsg};
	memset(c, 0, sizeof *c);
	snprintf(c->arch, sizeof c->arch, "mamba2");
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
	int rc;
	if (mt) {
		if (!cJSON_IsString(mt))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"model_type\" must be a string", path);
		if (!strcmp(mt->valuestring, "falcon_mamba"))
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
			            "%s: model_type \"%s\" (B/C/dt RMSNorms) is not supported (only mamba, mamba2)",
			            path, mt->valuestring);
		if (!strcmp(mt->valuestring, "mamba")) {
			if ((rc = config_hf1(c, &x)))
				return rc;
			return config_mamba1_dims(c, path, errmsg);
		}
		if (strcmp(mt->valuestring, "mamba2"))
			return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
			            "%s: model_type \"%.64s\" is not supported (only mamba, mamba2)", path,
			            mt->valuestring);
		rc = config_hf(c, &x);
	} else if (cJSON_GetObjectItemCaseSensitive(root, "d_model")) {
		rc = config_ss(c, &x);
	} else {
		return ss_errf(errmsg, SS_ERR_FORMAT,
		            "%s: neither transformers (model_type) nor state-spaces (d_model, ssm_cfg) style",
		            path);
	}
	if (rc)
		return rc;
	if (c->dt_rank)
		return config_mamba1_dims(c, path, errmsg);
	if (c->d_inner % c->headdim)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: d_inner %d is not a multiple of headdim %d", path,
		            c->d_inner, c->headdim);
	c->nheads = c->d_inner / c->headdim;
	if (c->nheads % c->ngroups || c->d_inner % c->ngroups)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: nheads %d is not a multiple of ngroups %d", path,
		            c->nheads, c->ngroups);
	int64_t conv_dim = (int64_t)c->d_inner + 2LL * c->ngroups * c->d_state;
	int64_t d_in_proj = conv_dim + c->d_inner + c->nheads;
	if (d_in_proj > MAX_DIM || (int64_t)c->d_inner > MAX_DIM)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: in_proj width %lld is too large", path,
		            (long long)d_in_proj);
	c->conv_dim = (int32_t)conv_dim;
	c->d_in_proj = (int32_t)d_in_proj;
	if (!(c->eps > 0 && c->eps < 1))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: epsilon must be in (0, 1)", path);
	return 0;
}

/* A GGUF's hyperparameter `{arch}.suffix`, required, in [1, MAX_DIM]. */
static int gguf_dim(const ss_gguf *g, const char *arch, const char *suffix, int32_t *out,
                    char *errmsg)
{
	char key[96];
	uint64_t v;
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	int rc = ss_gguf_get_uint(g, key, &v, errmsg);
	if (rc == SS_ERR_NOTFOUND)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: missing %s", g->path, key);
	if (rc)
		return rc;
	if (v < 1 || v > MAX_DIM)
		return ss_errf(errmsg, v ? SS_ERR_TOO_LARGE : SS_ERR_FORMAT, "%s: %s = %llu is not in "
		            "[1, %d]", g->path, key, (unsigned long long)v, MAX_DIM);
	*out = (int32_t)v;
	return 0;
}

static void json_num(cJSON *o, const char *k, double v)
{
	cJSON_AddNumberToObject(o, k, v);
}

/* The transformers config.json a GGUF written by llama.cpp's converter
 * stands for (conversion/mamba.py, the reverse direction): {arch}.
 * embedding_length, block_count, ssm.{conv_kernel, inner_size,
 * state_size, time_step_rank (Mamba-2: nheads; Mamba-1: dt_rank),
 * group_count}, attention.layer_norm_rms_epsilon; the vocabulary is
 * token_embd's rows, tied when there is no output.weight, a bias when
 * blk.0.ssm_in.bias exists, ssm.dt_b_c_rms (FalconMamba) refused. The
 * checks that follow are config_parse's, on the file's own values. */
static int gguf_config_json(const ss_gguf *g, cJSON **out, char *errmsg)
{
	int m1, rc = ss_gguf_mamba_arch(g, &m1, errmsg);
	if (rc)
		return rc;
	const char *a = m1 ? "mamba" : "mamba2";
	int32_t d_model, n_layer, d_conv, d_inner, d_state, rank, ngroups = 1;
	if ((rc = gguf_dim(g, a, "embedding_length", &d_model, errmsg)) ||
	    (rc = gguf_dim(g, a, "block_count", &n_layer, errmsg)) ||
	    (rc = gguf_dim(g, a, "ssm.conv_kernel", &d_conv, errmsg)) ||
	    (rc = gguf_dim(g, a, "ssm.inner_size", &d_inner, errmsg)) ||
	    (rc = gguf_dim(g, a, "ssm.state_size", &d_state, errmsg)) ||
	    (rc = gguf_dim(g, a, "ssm.time_step_rank", &rank, errmsg)) ||
	    (!m1 && (rc = gguf_dim(g, a, "ssm.group_count", &ngroups, errmsg))))
		return rc;
	char key[96];
	uint64_t flag = 0;
	snprintf(key, sizeof key, "%s.ssm.dt_b_c_rms", a);
	if ((rc = ss_gguf_get_uint(g, key, &flag, errmsg)) && rc != SS_ERR_NOTFOUND)
		return rc;
	if (flag)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: %s (FalconMamba's B/C/dt RMSNorms) is "
		            "not supported", g->path, key);
	double eps = 1e-5;
	snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
	if ((rc = ss_gguf_get_float(g, key, &eps, errmsg)) && rc != SS_ERR_NOTFOUND)
		return rc;
	uint64_t eos = 0;
	if ((rc = ss_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", &eos, errmsg)) &&
	    rc != SS_ERR_NOTFOUND)
		return rc;
	const ss_gguf_tensor *emb = ss_gguf_find(g, "token_embd.weight");
	if (!emb || emb->n_dims != 2)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s", g->path,
		            emb ? "token_embd.weight is not 2-D" : "missing tensor token_embd.weight");
	if (d_inner % d_model || (!m1 && d_inner % rank))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: ssm.inner_size %d is not a multiple of "
		            "%s %d", g->path, d_inner, d_inner % d_model ? "embedding_length" :
		            "time_step_rank (nheads)", d_inner % d_model ? d_model : rank);
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	cJSON_AddStringToObject(o, "model_type", m1 ? "mamba" : "mamba2");
	json_num(o, "hidden_size", d_model);
	json_num(o, "num_hidden_layers", n_layer);
	json_num(o, "expand", d_inner / d_model);
	json_num(o, "conv_kernel", d_conv);
	json_num(o, "state_size", d_state);
	json_num(o, "vocab_size", (double)emb->ne[1]);
	json_num(o, "eos_token_id", (double)eos);
	json_num(o, "layer_norm_epsilon", eps);
	cJSON_AddBoolToObject(o, "tie_word_embeddings", !ss_gguf_find(g, "output.weight"));
	cJSON_AddBoolToObject(o, "use_bias", ss_gguf_find(g, "blk.0.ssm_in.bias") != NULL);
	cJSON_AddBoolToObject(o, "use_conv_bias", ss_gguf_find(g, "blk.0.ssm_conv1d.bias") != NULL);
	if (m1) {
		json_num(o, "intermediate_size", d_inner);
		json_num(o, "time_step_rank", rank);
	} else {
		json_num(o, "num_heads", rank);
		json_num(o, "head_dim", d_inner / rank);
		json_num(o, "n_groups", ngroups);
	}
	*out = o;
	return 0;
}

/* ss_model_config_load of a GGUF file. */
static int gguf_config(ss_model_config *cfg, const char *path, char *errmsg)
{
	ss_gguf g;
	cJSON *root = NULL;
	int rc = ss_gguf_open(&g, path, errmsg);
	if (!rc && !(rc = gguf_config_json(&g, &root, errmsg)))
		rc = config_parse(cfg, root, path, errmsg);
	cJSON_Delete(root);
	ss_gguf_close(&g);
	return rc;
}

int ss_model_config_load(ss_model_config *cfg, const char *dir, char *errmsg)
{
	struct stat dsb;
	if (stat(dir, &dsb) == 0 && !S_ISDIR(dsb.st_mode))
		return gguf_config(cfg, dir, errmsg);
	size_t ld = strlen(dir);
	char *path = malloc(ld + sizeof "/config.json");
	if (!path)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	memcpy(path, dir, ld);
	memcpy(path + ld, "/config.json", sizeof "/config.json");
	int fd = ss_open_regular(path); /* a FIFO would block forever */
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f) {
		int code = fd != -2 && errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO;
		ss_errf(errmsg, code, "%s: %s", path, fd == -2 ? "not a regular file" : strerror(errno));
		if (fd >= 0)
			close(fd);
		free(path);
		return code;
	}
	struct stat sb;
	size_t want = fstat(fileno(f), &sb) == 0 && sb.st_size >= 0 &&
	              (uint64_t)sb.st_size <= MAX_CONFIG_JSON ? (size_t)sb.st_size : MAX_CONFIG_JSON;
	char *text = malloc(want + 2);
	size_t len = text ? fread(text, 1, want + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	int rc = 0;
	if (!text)
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	else if (bad)
		rc = ss_errf(errmsg, SS_ERR_IO, "%s: read failed", path);
	else if (len > MAX_CONFIG_JSON)
		rc = ss_errf(errmsg, SS_ERR_TOO_LARGE, "%s: larger than 16 MB", path);
	if (rc) {
		free(text);
		free(path);
		return rc;
	}
	char *relaxed = json_relax(text, len);
	free(text);
	if (!relaxed) {
		free(path);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(relaxed, &end, 1);
	if (!cJSON_IsObject(root)) {
		size_t at = end && end >= relaxed ? (size_t)(end - relaxed) : 0;
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: malformed JSON%s near byte %zu", path,
		          root ? " (not an object)" : "", at);
	} else {
		rc = config_parse(cfg, root, path, errmsg);
	}
	cJSON_Delete(root);
	free(relaxed);
	free(path);
	return rc;
}

/* ---------------------------------------------------------------- loading */

struct model_priv {
	void *arena;
	ss_checkpoint *ckpt;   /* kept open while tensors point into its mappings */
};

/* One tensor the model needs, in fingerprint order. */
typedef struct {
	char name[96];            /* canonical name (for messages when missing) */
	const ss_checkpoint_tensor *t;
	float **dst;              /* where the model keeps it (f32); NULL = hash only */
	void **mat;               /* or: one of the four matrices, in weights_dtype */
	int ndim;
	int64_t shape[3];
	fphash h;
	int mapped;
	ss_dtype dtype;           /* kept in memory: f32, or weights_dtype for mat */
	char *out;                /* narrowing: next element's address */
} slot;

/* Hashes a chunk of a tensor held in a 16-bit or q8_0 weights_dtype and narrows
 * it into the slot's next elements (chunks arrive in order; for q8_0 every
 * chunk but a tensor's last is a multiple of 32 elements: the checkpoint
 * reader's chunks are 2^16). */
static void narrow_visit(void *ctx, const float *x, size_t n)
{
	slot *s = ctx;
	fphash_update(&s->h, x, n * sizeof *x);
	ss_from_f32(s->out, s->dtype, x, n);
	s->out += ss_dtype_row_size(s->dtype, n);
}

/* Finds the first present name among `alts` (NULL-terminated list). */
static const ss_checkpoint_tensor *find_any(const ss_checkpoint *ck, const char *const *alts)
{
	for (; *alts; alts++) {
		const ss_checkpoint_tensor *t = ss_checkpoint_find(ck, *alts);
		if (t)
			return t;
	}
	return NULL;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)shape[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

static int check_shape(const slot *s, char *errmsg)
{
	int ok = s->t->ndim == s->ndim;
	for (int d = 0; ok && d < s->ndim; d++)
		ok = s->t->shape[d] == s->shape[d];
	if (ok)
		return 0;
	char got[128], want[128];
	fmt_shape(got, sizeof got, s->t->ndim, s->t->shape);
	fmt_shape(want, sizeof want, s->ndim, s->shape);
	return ss_errf(errmsg, SS_ERR_MISMATCH, "%s: %s: shape %s, expected %s", s->t->file, s->t->name,
	            got, want);
}

static void slot_set(slot *s, const char *name, float **dst, int ndim, int64_t a, int64_t b,
                     int64_t c)
{
	if (name != s->name)
		snprintf(s->name, sizeof s->name, "%s", name);
	s->dst = dst;
	s->mat = NULL;
	s->ndim = ndim;
	s->shape[0] = a;
	s->shape[1] = b;
	s->shape[2] = c;
}

/* Resolves a layer tensor: "backbone.layers.N.<suffix>" or "layers.N.<suffix>". */
static const ss_checkpoint_tensor *find_layer(const ss_checkpoint *ck, int l, const char *suffix,
                                              char *canon, size_t ncanon)
{
	char alt[96];
	snprintf(canon, ncanon, "backbone.layers.%d.%s", l, suffix);
	snprintf(alt, sizeof alt, "layers.%d.%s", l, suffix);
	const char *alts[] = {canon, alt, NULL};
	return find_any(ck, alts);
}

static int build_slots(ss_model *m, const ss_checkpoint *ck, unsigned flags, slot **out,
                       size_t *nout, char *errmsg)
{
	ss_model_config *c = &m->cfg;
	int untied = !c->tied;
	const int m1 = ss_model_is_mamba1(c), per = m1 ? 10 : 9;
	size_t n = 2 + (size_t)per * (size_t)c->n_layer + (size_t)untied;
	slot *s = calloc(n, sizeof *s);
	if (!s)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	*out = s;
	*nout = n;
	const char *emb[] = {"backbone.embeddings.weight", "backbone.embedding.weight",
	                     "embeddings.weight", "embedding.weight", NULL};
	const char *normf[] = {"backbone.norm_f.weight", "norm_f.weight", NULL};
	const char *head[] = {"lm_head.weight", NULL};
	size_t k = 0;
	s[k].t = find_any(ck, emb);
	/* transformers' Mamba2 embeds vocab_size rows, unpadded: accept that. */
	if (s[k].t && s[k].t->ndim == 2 && s[k].t->shape[0] == c->vocab_size)
		c->vocab_padded = c->vocab_size;
	slot_set(&s[k], "backbone.embeddings.weight", NULL, 2, c->vocab_padded, c->d_model, 0);
	s[k++].mat = &m->embedding;
	for (int l = 0; l < c->n_layer; l++) {
		ss_layer *lw = &m->layers[l];
		static const char *const suffix[9] = {
			"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
			"mixer.dt_bias", "mixer.A_log", "mixer.D", "mixer.norm.weight",
			"mixer.out_proj.weight",
		};
		float **dst[9] = {&lw->norm, NULL, &lw->conv_w, &lw->conv_b, &lw->dt_bias,
		                  &lw->A_log, &lw->D, &lw->gnorm, NULL};
		void **mat[9] = {[1] = &lw->in_proj, [8] = &lw->out_proj};
		int64_t sh[9][3] = {
			{c->d_model}, {c->d_in_proj, c->d_model}, {c->conv_dim, 1, c->d_conv},
			{c->conv_dim}, {c->nheads}, {c->nheads}, {c->nheads}, {c->d_inner},
			{c->d_model, c->d_inner},
		};
		static const int nd[9] = {1, 2, 3, 1, 1, 1, 1, 1, 2};
		/* Mamba-1 (mamba_simple.py / modeling_mamba.py MambaMixer) */
		static const char *const suffix1[10] = {
			"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
			"mixer.x_proj.weight", "mixer.dt_proj.weight", "mixer.dt_proj.bias", "mixer.A_log",
			"mixer.D", "mixer.out_proj.weight",
		};
		float **dst1[10] = {&lw->norm, NULL, &lw->conv_w, &lw->conv_b, &lw->x_proj,
		                    &lw->dt_proj, &lw->dt_bias, &lw->A_log, &lw->D, NULL};
		void **mat1[10] = {[1] = &lw->in_proj, [9] = &lw->out_proj};
		int64_t sh1[10][3] = {
			{c->d_model}, {c->d_in_proj, c->d_model}, {c->d_inner, 1, c->d_conv},
			{c->d_inner}, {c->dt_rank + 2 * c->d_state, c->d_inner}, {c->d_inner, c->dt_rank},
			{c->d_inner}, {c->d_inner, c->d_state}, {c->d_inner}, {c->d_model, c->d_inner},
		};
		static const int nd1[10] = {1, 2, 3, 1, 2, 2, 1, 2, 1, 2};
		for (int i = 0; i < per; i++, k++) {
			const char *suf = m1 ? suffix1[i] : suffix[i];
			const int64_t *shp = m1 ? sh1[i] : sh[i];
			s[k].t = find_layer(ck, l, suf, s[k].name, sizeof s[k].name);
			slot_set(&s[k], s[k].name, m1 ? dst1[i] : dst[i], m1 ? nd1[i] : nd[i], shp[0],
			         shp[1], shp[2]);
			s[k].mat = m1 ? mat1[i] : mat[i];
		}
	}
	s[k].t = find_any(ck, normf);
	slot_set(&s[k++], "backbone.norm_f.weight", &m->norm_f, 1, c->d_model, 0, 0);
	if (untied) {
		s[k].t = find_any(ck, head);
		slot_set(&s[k], "lm_head.weight", NULL, 2, c->vocab_padded, c->d_model, 0);
		s[k++].mat = (flags & SS_MODEL_SKIP_LM_HEAD) ? NULL : &m->lm_head;
	}
	for (size_t i = 0; i < n; i++) {
		if (!s[i].t)
			return ss_errf(errmsg, SS_ERR_NOTFOUND, "%s: missing tensor %s%s",
			            ss_checkpoint_path(ck), s[i].name,
			            !strcmp(s[i].name, "lm_head.weight")
			                ? " (config says the embeddings are not tied)" : "");
		int rc = check_shape(&s[i], errmsg);
		if (rc)
			return rc;
	}
	return 0;
}

int ss_model_load_opts(ss_model **out, const char *dir, const ss_model_opts *opts, char *errmsg)
{
	unsigned flags = opts ? opts->flags : 0;
	*out = NULL;
	ss_model *m = calloc(1, sizeof *m);
	struct model_priv *priv = calloc(1, sizeof *priv);
	if (!m || !priv) {
		free(m);
		free(priv);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	m->priv = priv;
	slot *s = NULL;
	size_t ns = 0;
	ss_checkpoint_req *req = NULL;
	int rc = ss_model_config_load(&m->cfg, dir, errmsg);
	if (rc)
		goto fail;
	if (!(m->layers = calloc((size_t)m->cfg.n_layer, sizeof *m->layers))) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = ss_checkpoint_open(&priv->ckpt, dir, errmsg)) ||
	    (rc = build_slots(m, priv->ckpt, flags, &s, &ns, errmsg)))
		goto fail;
	m->ckpt_dtype = s[0].t->dtype;
	m->weights_dtype = m->ckpt_dtype;
	if (flags & SS_MODEL_WEIGHTS_DTYPE) {
		const ss_dtype_info *d = ss_dtype_info_of(opts->weights_dtype);
		if (!d || !(d->uses & SS_DTYPE_WEIGHTS)) {
			rc = ss_errf(errmsg, SS_ERR_INVALID, "unknown weights dtype %d",
				     (int)opts->weights_dtype);
			goto fail;
		}
		m->weights_dtype = opts->weights_dtype;
	}
	/* q8_0 rows are whole blocks of 32 (ss_linear_cpu's limits) */
	if (m->weights_dtype == SS_DTYPE_Q8_0 &&
	    (m->cfg.d_model % 32 || m->cfg.d_inner % 32 || m->cfg.d_inner > SS_Q8_0_ROW_MAX)) {
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: q8_0 weights need d_model and d_inner "
			     "multiples of 32, at most %d (d_model %d, d_inner %d)", dir, SS_Q8_0_ROW_MAX,
			     m->cfg.d_model, m->cfg.d_inner);
		goto fail;
	}

	/* Map what can be mapped; everything else kept goes in one arena
	 * (bytes, each tensor 64-byte aligned). */
	size_t arena = 0, nreq = 0, nmapped = 0;
	for (size_t i = 0; i < ns; i++) {
		fphash_init(&s[i].h, 0);
		s[i].dtype = s[i].mat ? m->weights_dtype : SS_DTYPE_F32;
		void **keep = s[i].mat;
		const float *p = NULL;
		if ((s[i].dst || keep) && s[i].dtype == SS_DTYPE_F32 && !(flags & SS_MODEL_NO_MMAP))
			p = ss_checkpoint_map_f32(priv->ckpt, s[i].t);
		if (p) {
			if (keep)
				*keep = (void *)p;
			else
				*s[i].dst = (float *)p;
			s[i].mapped = 1;
			nmapped++;
		} else {
			nreq++;
			if (s[i].dst || keep)
				arena += (ss_dtype_row_size(s[i].dtype, (size_t)s[i].t->numel) + 63) &
					 ~(size_t)63;
		}
	}
	if (arena && !(priv->arena = aligned_alloc(64, arena))) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory for %zu MB of weights", arena >> 20);
		goto fail;
	}
	if (!(req = calloc(nreq + 1, sizeof *req))) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		goto fail;
	}
	size_t at = 0, r = 0;
	for (size_t i = 0; i < ns; i++) {
		if (s[i].mapped)
			continue;
		req[r].t = s[i].t;
		req[r].visit = fphash_visit;
		req[r].ctx = &s[i].h;
		if (s[i].dst || s[i].mat) {
			float *p = (float *)((char *)priv->arena + at);
			at += (ss_dtype_row_size(s[i].dtype, (size_t)s[i].t->numel) + 63) &
			      ~(size_t)63;
			if (s[i].mat)
				*s[i].mat = p;
			else
				*s[i].dst = p;
			if (s[i].dtype == SS_DTYPE_F32) {
				req[r].dst = p;
			} else { /* streamed in chunks, narrowed by the visit */
				s[i].out = (char *)p;
				req[r].visit = narrow_visit;
				req[r].ctx = &s[i];
			}
		}
		r++;
	}
	if ((rc = ss_checkpoint_read(priv->ckpt, req, nreq, errmsg)))
		goto fail;
	for (size_t i = 0; i < ns; i++)
		if (s[i].mapped)
			fphash_update(&s[i].h, s[i].mat ? *s[i].mat : (void *)*s[i].dst,
			              (size_t)s[i].t->numel * sizeof(float));
	if (m->cfg.tied)
		m->lm_head = m->embedding;

	/* Fingerprint: dims, then (numel, digest) per tensor in slot order. */
	const ss_model_config *c = &m->cfg;
	fphash fp;
	fphash_init(&fp, 0x5353u);
	/* the architecture is in the tag: a Mamba-1 and a Mamba-2 model never
	 * share a fingerprint, and Mamba-2 fingerprints stay as they were */
	static const char tag2[16] = "ss-mamba2-fp-v1", tag1[16] = "ss-mamba1-fp-v1";
	fphash_update(&fp, ss_model_is_mamba1(c) ? tag1 : tag2, sizeof tag2);
	if (ss_model_is_mamba1(c)) {
		int64_t rank = c->dt_rank;
		fphash_update(&fp, &rank, sizeof rank);
	}
	int64_t dims[] = {c->d_model, c->n_layer, c->d_state, c->headdim, c->nheads, c->ngroups,
	                  c->d_conv, c->d_inner, c->vocab_padded, c->tied};
	fphash_update(&fp, dims, sizeof dims);
	float fl[3] = {c->eps, c->dt_min, c->dt_max};
	fphash_update(&fp, fl, sizeof fl);
	for (size_t i = 0; i < ns; i++) {
		uint64_t d[2] = {s[i].t->numel, fphash_final(&s[i].h)};
		fphash_update(&fp, d, sizeof d);
	}
	snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx",
	         (unsigned long long)fphash_final(&fp));
	/* Nothing points into the files any more unless tensors are mapped. */
	if (!nmapped) {
		ss_checkpoint_close(priv->ckpt);
		priv->ckpt = NULL;
	}
	free(req);
	free(s);
	*out = m;
	return 0;
fail:
	free(req);
	free(s);
	ss_model_free(m);
	return rc;
}

int ss_model_load(ss_model **out, const char *dir, char *errmsg)
{
	return ss_model_load_opts(out, dir, NULL, errmsg);
}

void ss_model_free(ss_model *m)
{
	if (!m)
		return;
	struct model_priv *priv = m->priv;
	if (priv) {
		free(priv->arena);
		ss_checkpoint_close(priv->ckpt);
		free(priv);
	}
	free(m->layers);
	free(m);
}

void ss_model_state_dims(const ss_model *m, ss_state_dims *d)
{
	memset(d, 0, sizeof *d);
	snprintf(d->arch, sizeof d->arch, "%s", m->cfg.arch);
	d->n_layer = m->cfg.n_layer;
	d->nheads = m->cfg.nheads;
	d->headdim = m->cfg.headdim;
	d->d_state = m->cfg.d_state;
	d->conv_dim = m->cfg.conv_dim;
	d->d_conv = m->cfg.d_conv;
}
