/*
 * model.h — writes random (seeded) Mamba-2 (or Mamba-1) model directories in the
 * transformers safetensors layout, for tests and benchmarks at any size.
 *
 * Output: DIR/config.json (model_type "mamba2", vocab_size = padded rows,
 * like golden t1-hf) and DIR/model.safetensors, or with n_shards > 1
 * DIR/model-0000K-of-0000N.safetensors + DIR/model.safetensors.index.json.
 * Initialisation follows tests/fixtures/golden/README.md §2.4 in distribution (not bit for
 * bit: own generator): embeddings and lm_head N(0, 0.02), norms 1+0.1·N(0,1),
 * in_proj N(0, 1/sqrt(d_model)), conv1d.weight U(-0.5,0.5), conv1d.bias
 * U(-0.1,0.1), dt_bias = softplus⁻¹(exp(U(log 1e-3, log 0.1))),
 * A_log = log U(1,16), D 1+0.1·N(0,1), out_proj N(0, 1/sqrt(d_inner)).
 * Mamba-1 (mamba1 = 1; ../shared/golden-mamba1/README.md §2.4, m2's per-element
 * jitter): in_proj [2·d_inner][d_model], conv over d_inner, x_proj
 * N(0, 1/sqrt(d_inner)), dt_proj.weight U(±dt_rank^-0.5), dt_proj.bias as
 * dt_bias, A_log[d][n] = log((n+1)·exp(U(-0.2,0.2))), D 1+0.1·N(0,1).
 */
#ifndef SS_MKMODEL_H
#define SS_MKMODEL_H

#include "ss.h"

typedef struct {
	int d_model, n_layer, d_state, headdim, expand, ngroups, d_conv;
	int vocab_size;          /* tokenizer vocabulary; rows = rounded up */
	int pad_vocab_multiple;  /* 16 → 50277 gives 50288 rows */
	int tied;                /* 1: no lm_head.weight */
	ss_dtype dtype;          /* storage dtype of every tensor */
	uint64_t seed;
	int n_shards;            /* 1: model.safetensors; > 1: sharded + index */
	int mamba1;              /* 1: a Mamba-1 model (model_type "mamba"; headdim
				    and ngroups unused; config vocab_size is the
				    unpadded vocab_size, rounded up by the loader) */
	int dt_rank;             /* Mamba-1: 0 = "auto" (ceil(d_model/16)) */
} ss_mkmodel_opts;

/* Defaults: t1's shape (d_model 64, 2 layers, d_state 16, headdim 16,
 * expand 2, ngroups 1, d_conv 4, vocab 50277 padded to 50288), tied, f32,
 * seed 1, one shard. */
void ss_mkmodel_defaults(ss_mkmodel_opts *o);

/* Sets the shape of a named preset: "t1", "t2", "mamba2-130m", "mamba2-370m",
 * "mamba2-780m", "mamba2-1.3b", "mamba2-2.7b" (dims of the state-spaces
 * releases); Mamba-1: "m1" (golden-mamba1's shape), "mamba-130m",
 * "mamba-370m", "mamba-790m", "mamba-1.4b", "mamba-2.8b". Returns 0, or -1 for an unknown name (o unchanged). */
int ss_mkmodel_preset(ss_mkmodel_opts *o, const char *name);

/* Called once per tensor, in file order: name (transformers naming), shape,
 * and the values as the file stores them, widened to f32 (x[n]; borrowed for
 * the call). Return non-zero to stop. */
typedef int (*ss_mkmodel_visit)(void *ctx, const char *name, int ndim, const int64_t *shape,
                                const float *x, size_t n);

/* Generates the tensors of o without writing anything (the values
 * ss_mkmodel_write stores). Returns 0, SS_ERR_INVALID (bad opts),
 * SS_ERR_NOMEM, or the visitor's non-zero value. */
int ss_mkmodel_generate(const ss_mkmodel_opts *o, ss_mkmodel_visit visit, void *ctx);

/* Creates dir (if needed) and writes the model. Returns 0 or SS_ERR_INVALID,
 * SS_ERR_IO, SS_ERR_NOMEM with errmsg (SS_ERRMSG_MAX) naming the file. */
int ss_mkmodel_write(const char *dir, const ss_mkmodel_opts *o, char *errmsg);

/* Writes the model of o into a fresh directory $TMPDIR/ss-NAME-XXXXXX
 * ($TMPDIR unset or empty: /tmp; its path into dir) and loads it with lo
 * (NULL: defaults). The files stay until ss_mkmodel_remove(dir) (a mapping
 * outlives the names; a child process may load them again). Returns the
 * model (ss_model_free) or NULL with errmsg set. */
ss_model *ss_mkmodel_load_temp(const ss_mkmodel_opts *o, const ss_model_opts *lo,
                               const char *name, char dir[4096], char *errmsg);

/* Removes what ss_mkmodel_load_temp wrote (one shard) and its directory. */
void ss_mkmodel_remove(const char *dir);

#endif /* SS_MKMODEL_H */
