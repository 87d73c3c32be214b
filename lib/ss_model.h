/*
 * ss_model.h — Mamba-2 checkpoints and the CPU forward pass (part of libss;
 * include "ss.h").
 * ref: docs/DESIGN.md §2; state-spaces/mamba mamba_ssm/modules/mamba2.py;
 *      tests/fixtures/golden/README.md §2 (the exact math the fixtures follow).
 * Public: part of libss's interface (ss.h says what that means).
 */
#ifndef SS_MODEL_H
#define SS_MODEL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Hyperparameters, from config.json (transformers or state-spaces style). */
typedef struct {
	char arch[16];          /* "mamba2" or "mamba1" (ss_model_is_mamba1) */
	int32_t d_model;        /* hidden size */
	int32_t n_layer;
	int32_t d_state;        /* N */
	int32_t headdim;        /* P; Mamba-1: 1 */
	int32_t nheads;         /* d_inner / headdim; Mamba-1: d_inner (a "head"
				   is one channel, with its own d_state decays) */
	int32_t ngroups;        /* B/C groups; head h uses group h / (nheads/ngroups) */
	int32_t d_conv;         /* conv width, 4 */
	int32_t expand;         /* 2 */
	int32_t d_inner;        /* expand * d_model */
	int32_t conv_dim;       /* d_inner + 2*ngroups*d_state; Mamba-1: d_inner (x only) */
	int32_t d_in_proj;      /* 2*d_inner + 2*ngroups*d_state + nheads;
				   Mamba-1: 2*d_inner (x | z) */
	int32_t dt_rank;        /* Mamba-1: rank of dt_proj (ceil(d_model/16)
				   for "auto"); 0 for Mamba-2 */
	int32_t vocab_size;     /* tokenizer vocabulary (50277) */
	int32_t vocab_padded;   /* embedding / lm_head rows (50288) */
	float eps;              /* RMSNorm epsilon, 1e-5 */
	float dt_min, dt_max;   /* time_step_limit clamp of dt; (0, +inf) = none */
	int tied;               /* lm_head shares the embedding */
	int32_t eos_token_id;   /* 0 for GPT-NeoX */
} ss_model_config;

/* One layer's weights, row-major (torch's [out][in] for projections): f32,
 * except in_proj and out_proj, in the model's weights_dtype. Mamba-1
 * (ref: mamba_ssm modules/mamba_simple.py; transformers modeling_mamba.py)
 * uses in_proj [2*d_inner][d_model] (x | z), conv over d_inner channels,
 * x_proj, dt_proj, dt_bias = dt_proj.bias [d_inner], A_log
 * [d_inner][d_state], D [d_inner], out_proj; gnorm is NULL. */
typedef struct {
	float *norm;      /* [d_model]            backbone.layers.N.norm.weight */
	void *in_proj;    /* [d_in_proj][d_model] mixer.in_proj.weight, weights_dtype */
	float *conv_w;    /* [conv_dim][d_conv]   mixer.conv1d.weight ([conv_dim,1,d_conv]) */
	float *conv_b;    /* [conv_dim]           mixer.conv1d.bias */
	float *dt_bias;   /* [nheads] */
	float *A_log;     /* [nheads]; A = -exp(A_log) */
	float *D;         /* [nheads] */
	float *gnorm;     /* [d_inner]            mixer.norm.weight (gated, grouped RMSNorm) */
	float *x_proj;    /* Mamba-1 [dt_rank+2*d_state][d_inner] mixer.x_proj.weight
			     (rows: dt_low | B | C) */
	float *dt_proj;   /* Mamba-1 [d_inner][dt_rank] mixer.dt_proj.weight */
	void *out_proj;   /* [d_model][d_inner], weights_dtype */
} ss_layer;

/* A loaded model. The four weight matrices the forward pass streams
 * (embedding, lm_head, in_proj, out_proj: all but a few hundredth of the
 * bytes) are held in weights_dtype; every other weight is f32 (widened). */
typedef struct ss_model {
	ss_model_config cfg;
	char fingerprint[SS_FINGERPRINT_MAX]; /* 16 hex digits: dims + the checkpoint's
						 weights widened to f32 (model.c) */
	ss_dtype ckpt_dtype;    /* dtype in the checkpoint */
	ss_dtype weights_dtype; /* of the four matrices in memory (ss_model_opts) */
	void *embedding;        /* [vocab_padded][d_model], weights_dtype */
	float *norm_f;          /* [d_model] */
	void *lm_head;          /* [vocab_padded][d_model], weights_dtype; == embedding
				   when tied */
	ss_layer *layers;       /* [n_layer] */
	void *priv;             /* loader-owned storage */
} ss_model;

/* Loads a model directory: config.json (transformers `model_type: mamba2`
 * or `mamba`, or state-spaces `ssm_cfg`: Mamba-1 when ssm_cfg names layer
 * "Mamba1" or has neither "layer" nor "headdim", as mamba_ssm's default) plus model.safetensors, sharded safetensors with
 * model.safetensors.index.json, or pytorch_model.bin (zip + restricted
 * unpickler that only rebuilds tensors). Checks every tensor's shape against
 * the config. The four matrices stay in the checkpoint's dtype
 * (m->weights_dtype = m->ckpt_dtype: bf16 and f16 are kept 2 bytes, as
 * llama.cpp keeps a GGUF's types and transformers' dtype="auto" a
 * checkpoint's), the other weights are widened to f32; ss_model_load_opts
 * can ask for another weights_dtype.
 * Aligned f32 safetensors data is mapped copy-on-write from the file
 * instead of copied (writes stay private to the process), unless
 * SS_MODEL_NO_MMAP.
 * Errors: SS_ERR_NOTFOUND (missing file/tensor), SS_ERR_FORMAT
 * (malformed JSON/safetensors/pickle), SS_ERR_TRUNCATED, SS_ERR_TOO_LARGE,
 * SS_ERR_UNSUPPORTED (FalconMamba, hybrids, biases), SS_ERR_MISMATCH (shape); errmsg
 * names the file and tensor, e.g. "DIR/model.safetensors:
 * backbone.layers.1.mixer.in_proj.weight: shape [296,64], expected [300,64]".
 * dir may instead be a GGUF file written by llama.cpp's convert_hf_to_gguf.py
 * (general.architecture mamba or mamba2; tensors F32, F16, BF16 or Q8_0,
 * others refused naming the tensor and its type): the config from its
 * {arch}.* metadata, the tensors under their HF names (model/checkpoint.h),
 * A_log = log(-A) from its ssm_a. The fingerprint is computed the same way,
 * over the values loaded: a GGUF of the same weights as an HF directory has
 * its fingerprint, but log(-A) need not give back A_log's last bit, so a
 * Mamba-2 GGUF's fingerprint usually differs from its source's.
 * Caller frees with ss_model_free().
 * ref: transformers models/mamba2/configuration_mamba2.py;
 *      mamba_ssm models/config_mamba.py (state-spaces config);
 *      llama.cpp conversion/mamba.py (the GGUF layout). */
int ss_model_load(ss_model **out, const char *dir, char *errmsg);

/* Flags for ss_model_load_opts. */
enum {
	/* Do not keep an untied lm_head (m->lm_head = NULL): state extraction
	 * never needs it. It is still read once for the fingerprint, which is
	 * therefore the same with and without this flag. No effect when tied. */
	SS_MODEL_SKIP_LM_HEAD = 1 << 0,
	/* Copy f32 safetensors data to the heap instead of mapping the file. */
	SS_MODEL_NO_MMAP = 1 << 1,
	/* Hold the four matrices in opts->weights_dtype instead of the
	 * checkpoint's dtype: f32 widens a bf16/f16 checkpoint; bf16 or f16
	 * rounds an f32 one to nearest even at load (half the bytes to stream
	 * per token). The fingerprint is the checkpoint's either way: states
	 * stay interchangeable between runs of the same weights in any
	 * weights_dtype, as between the CPU and a GPU. */
	SS_MODEL_WEIGHTS_DTYPE = 1 << 2,
};

typedef struct {
	unsigned flags;   /* SS_MODEL_* */
	ss_dtype weights_dtype; /* with SS_MODEL_WEIGHTS_DTYPE */
} ss_model_opts;

/* ss_model_load with options (opts NULL = defaults = ss_model_load). */
int ss_model_load_opts(ss_model **out, const char *dir, const ss_model_opts *opts,
                       char *errmsg);

/* Parses and validates dir/config.json only (no weights), or a GGUF file's
 * metadata: fills cfg as ss_model_load would. Errors as ss_model_load
 * (SS_ERR_NOTFOUND, SS_ERR_FORMAT, SS_ERR_UNSUPPORTED, SS_ERR_TOO_LARGE). */
int ss_model_config_load(ss_model_config *cfg, const char *dir, char *errmsg);

/* Frees the model, its weights and mappings. NULL is fine. */
void ss_model_free(ss_model *m);

/* 1 when cfg is a Mamba-1 model (arch "mamba1"), else 0. */
int ss_model_is_mamba1(const ss_model_config *cfg);

/* Dims of the states this model produces (for ss_state_alloc):
 * arch ("mamba2" or "mamba1"), n_layer, nheads, headdim, d_state,
 * conv_dim, d_conv. */
void ss_model_state_dims(const ss_model *m, ss_state_dims *d);

#ifdef __cplusplus
}
#endif
#endif /* SS_MODEL_H */
