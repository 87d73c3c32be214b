/*
 * config.c — a model's hyperparameters: config.json of an HF or mamba_ssm
 * Mamba-2 / Mamba-1 directory (transformers' Mamba2Config and MambaConfig
 * keys, mamba_ssm's MambaConfig keys, Python's Infinity/NaN literals
 * accepted), or a GGUF file's {arch}.* metadata built into the same JSON.
 * Every dimension bounded, every unsupported option refused by name.
 * ref: docs/DESIGN.md §2; transformers models/mamba2/configuration_mamba2.py,
 *      models/mamba/configuration_mamba.py; mamba_ssm models/config_mamba.py;
 *      llama.cpp convert_hf_to_gguf.py (the GGUF keys).
 */
#include "ss.h"

#include "model/checkpoint.h"
#include "stream/gguf.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONFIG_JSON (16u << 20)
#define MAX_DIM (1 << 24)

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
