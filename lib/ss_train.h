/*
 * ss_train.h — one training step of a Mamba-2 model on the CPU: f32 master
 * parameters, a forward pass that keeps its activations, the backward pass
 * through every op (ss_ops.h's *_backward_cpu) into the gradient of every
 * parameter and of the initial states, and the AdamW update (part of libss;
 * include "ss.h"); and a whole run of steps over a data source
 * (ss_train_run_*, lib/train/run.c, lib/train/data.c), what ss-train drives.
 * Public: part of libss's interface (ss.h says what that means).
 *
 * The step is llm.c's (train_gpt2.c): ss_train_forward, ss_train_zero_grad,
 * ss_train_backward, then ss_adamw_update over ss_train_params /
 * ss_train_grads. Parameters, gradients and activations each live in one
 * allocation carved by shape. The ops run on the calling thread unless
 * ss_train_set_threads says otherwise, the GEMMs on as many threads as the
 * BLAS is set to (one after ss_forward_ctx_init; OpenBLAS's default
 * otherwise); no activation
 * recomputation yet: the activations of every layer are kept
 * (about (3·d_model + 2·d_in_proj + conv_dim + 2·d_inner + nheads) floats
 * per token and layer, plus 2·vocab_padded per token for the logits and
 * their gradient).
 * ref: picaso.txt §5 (BPTC needs the gradients of the initial states);
 *      llm.c train_gpt2.c; mamba_ssm modules/mamba2.py.
 */
#ifndef SS_TRAIN_H
#define SS_TRAIN_H

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's f32 parameters (or their gradients), row-major as ss_layer,
 * except conv_wt, tap-major as ss_conv1d_silu_cpu reads it:
 * conv_wt[k][c] = mixer.conv1d.weight[c][0][k]. */
typedef struct {
	float *norm;      /* [d_model] */
	float *in_proj;   /* [d_in_proj][d_model] */
	float *conv_wt;   /* [d_conv][conv_dim] */
	float *conv_b;    /* [conv_dim] */
	float *dt_bias;   /* [nheads] */
	float *A_log;     /* [nheads] */
	float *D;         /* [nheads] */
	float *gnorm;     /* [d_inner] */
	float *out_proj;  /* [d_model][d_inner] */
} ss_train_layer;

/* A model's f32 parameters (or gradients), views into one array. */
typedef struct {
	float *embedding; /* [vocab_padded][d_model] */
	float *norm_f;    /* [d_model] */
	float *lm_head;   /* [vocab_padded][d_model]; == embedding when tied */
	ss_train_layer *layers; /* [n_layer] */
	float *data;      /* all of the above, contiguous */
	size_t n;         /* floats in data */
} ss_train_params;

typedef struct ss_train ss_train;

/* Makes a trainer for m: copies m's weights into f32 master parameters
 * (widened from bf16/f16), zero gradients, and activations for batches of
 * at most max_tokens tokens in at most max_seqs sequences.
 * Returns 0, SS_ERR_NOMEM, SS_ERR_INVALID (max_tokens or max_seqs < 1, d_conv >
 * SS_CONV_BACKWARD_MAX) or SS_ERR_UNSUPPORTED (untied lm_head not loaded, or
 * a Mamba-1 model: its ops have no backward yet).
 * Caller frees with ss_train_free. The model is not referenced afterwards. */
int ss_train_init(ss_train **out, const ss_model *m, int64_t max_tokens, int max_seqs);

void ss_train_free(ss_train *t);

/* Most threads ss_train_set_threads takes. */
#define SS_TRAIN_MAX_THREADS 64

/* Runs the non-GEMM ops of the step (the scan, conv1d and cross-entropy,
 * forward and backward) on n_threads threads (1 after ss_train_init): rows,
 * channels or heads split into n_threads parts (the scan's heads in whole
 * groups when ngroups divides evenly, else, with one group, each part
 * summing its own dB, dC, added in part order). The GEMMs use the BLAS's
 * own threads. The gradients depend on n_threads only through that order.
 * Returns 0, SS_ERR_INVALID (n_threads < 1 or > SS_TRAIN_MAX_THREADS) or
 * SS_ERR_NOMEM (t unchanged). */
int ss_train_set_threads(ss_train *t, int n_threads);

/* The parameters and their gradients (owned by t; edit params in place). */
ss_train_params *ss_train_params_of(ss_train *t);
ss_train_params *ss_train_grads_of(ss_train *t);

/* Floats of one sequence's conv state and ssm state over all layers
 * (ss_state's conv and ssm: [n_layer][conv_dim][d_conv-1] and
 * [n_layer][nheads][headdim][d_state]). */
size_t ss_train_conv_len(const ss_train *t);
size_t ss_train_ssm_len(const ss_train *t);

/* Forward pass over a packed batch, keeping the activations for
 * ss_train_backward, and the mean next-token loss:
 *   tokens: [T] (T = seq_start[nseq] <= max_tokens), each < vocab_padded.
 *   targets: [T], the token each row should predict, or < 0 for none
 *     (the row's loss is not counted).
 *   seq_start: [nseq+1] (ss_ops.h); nseq <= max_seqs.
 *   conv, ssm: in/out, sequence s at s·ss_train_conv_len / s·ss_train_ssm_len:
 *     in the initial states, out the final ones; NULL = zero initial states
 *     (the final ones are then not returned).
 *   logdecay: [nseq][n_layer][nheads] (+=), or NULL.
 *   loss: out, Σ nll / (number of targets) in nats (0 without targets:
 *     then the head, norm_f·lm_head·cross-entropy, is not run, nor its
 *     backward: encoding a chunk for its state costs no logits).
 * Returns 0 or SS_ERR_INVALID (sizes, a token or target out of range). */
int ss_train_forward(ss_train *t, const int32_t *tokens, const int32_t *targets,
		     const int64_t *seq_start, int nseq, float *conv, float *ssm, float *logdecay,
		     double *loss);

/* Zeroes the gradients of the parameters. */
void ss_train_zero_grad(ss_train *t);

/* Backward pass of the last ss_train_forward: adds the gradient of its
 * loss to every parameter's gradient (+=; tied: embedding gets both
 * uses).
 *   dconv, dssm: in/out, laid out as the forward's conv, ssm: in the
 *     gradient of the loss's consumers w.r.t. the final states (zeros if
 *     the final states are unused), out the gradient w.r.t. the initial
 *     states; NULL = zeros in, nothing out.
 *   dlogdecay: [nseq][n_layer][nheads], the gradient w.r.t. logdecay, or NULL.
 * Returns 0 or SS_ERR_INVALID (no forward before). */
int ss_train_backward(ss_train *t, float *dconv, float *dssm, const float *dlogdecay);

/* AdamW hyperparameters. */
typedef struct {
	float lr;           /* learning rate of this step (the schedule's) */
	float beta1, beta2; /* 0.9, 0.95 */
	float eps;          /* 1e-8 */
	float weight_decay; /* decoupled: p -= lr·weight_decay·p */
} ss_adamw;

/* One AdamW step over n parameters, step = 1, 2, ... (the bias corrections):
 *   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
 *   p = p·(1 − lr·wd) − lr·(m/(1−β1^step)) / (sqrt(v/(1−β2^step)) + eps)
 * p, g, m, v: [n] f32 (m, v zeroed before step 1). Returns 0 or
 * SS_ERR_INVALID (step < 1).
 * ref: Loshchilov & Hutter 2019 (decoupled weight decay); torch.optim.AdamW. */
int ss_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const ss_adamw *h,
		    int64_t step);

/* ------------------------------------------------- composition objectives */

/* One BPTC example (picaso.txt §5): the k retrieved chunks are encoded from
 * the zero state with gradients, their final states composed by `mode`
 * (ss_compose_mode; k = 0: the zero state), then query·continuation is run
 * from the composed state; the loss is the mean NLL of the continuation
 * tokens (each predicted from the tokens before it; the first from the
 * query's last token). */
typedef struct {
	const int32_t *const *chunks; const int64_t *chunk_len; int k; /* composition order */
	const int32_t *query; int64_t n_query;   /* n_query >= 1 */
	const int32_t *cont; int64_t n_cont;     /* n_cont >= 1 */
	int mode;                                /* ss_compose_mode */
} ss_train_bptc_example;

/* Adds (+=) the gradient of the example's loss w.r.t. every parameter of t
 * to t's gradients (through the composition into the chunks' encodings;
 * the composition weights' dependence on logdecay included), and sets *loss
 * (nats/token). The chunks are re-encoded for the backward (recomputation:
 * t keeps one forward's activations).
 * Composition: ss_compose() with {mode, norm none, conv mean} (what
 * ss-compose does by default), differentiated by ss_compose_backward();
 * modes caso, picaso-s, picaso-r, soup, sum (max has no gradient).
 * Batches: the chunks are encoded in packed batches of consecutive chunks
 * (each within max_tokens tokens and max_seqs sequences), the example as
 * one sequence of n_query + n_cont - 1 tokens. Every chunk_len[i] ≥ 1.
 * Memory: 2·k·(conv_len + ssm_len + n_layer·nheads) floats besides t.
 * Leaves t's activations those of the last chunk batch.
 * Returns 0, SS_ERR_INVALID (sizes, tokens out of range, a chunk or
 * query·continuation over t's max_tokens, mode max or unknown: checked
 * before anything runs, t's gradients untouched), SS_ERR_NOMEM (t's
 * gradients may then hold part of the example's).
 * ref: picaso.txt §5 eq. L_BPTC. */
int ss_train_bptc(ss_train *t, const ss_train_bptc_example *ex, double *loss);

/* As ss_train_bptc with the composed state given (conv, ssm as
 * ss_train_forward's initial states, one sequence: [conv_len], [ssm_len];
 * read only; both NULL = the zero state), no gradient into it.
 * ref: picaso.txt §5 eq. L_BP2C (sg[x^PICASO]). */
int ss_train_bp2c(ss_train *t, const float *conv, const float *ssm, const int32_t *query,
		  int64_t n_query, const int32_t *cont, int64_t n_cont, double *loss);

/* ------------------------------------------------------ the training run */

/* A whole fine-tuning run (what ss-train drives): a data source, batches,
 * the learning-rate schedule, the objective's forward and backward, the
 * global gradient-norm clip and AdamW, step after step.
 * Objectives (picaso.txt §5, §6):
 *   SS_TRAIN_LM    next-token loss on the documents of a token stream
 *                  (ss-tokens(5)), windows of seq_len tokens, each from the
 *                  zero state;
 *   SS_TRAIN_BP2C  loss on an example's continuation given its query, from
 *                  the composition of its chunks' stored states (a
 *                  constant: sg[x^PICASO], picaso.txt §5 eq. L_BP2C);
 *   SS_TRAIN_BPTC  the same loss, the chunks re-encoded in the step and the
 *                  gradient taken through the composition into their
 *                  encodings (ss_train_bptc; picaso.txt §5 eq. L_BPTC).
 * bp2c and bptc read JSON lines {"query", "continuation", "chunks": [ids]}
 * (or "query_tokens"/"continuation_tokens" arrays of token ids), chunks most
 * relevant first, and draw each example's k uniformly from
 * 0..min(max_k, chunks) (picaso.txt §6.2) with ss_splitmix64; the first k
 * chunks are composed, the most relevant last (nearest the query).
 * The data are read again from the start at their end (the epoch counts).
 * Schedule: linear warmup to lr over `warmup` steps, then a cosine to min_lr
 * at `steps`; AdamW with beta1 0.9, beta2 0.95, eps 1e-8.
 * ref: llm.c train_gpt2.c (the loop: forward, zero_grad, backward, clip,
 *      update); nanoGPT train.py get_lr (warmup + cosine).
 * Everything the run needs to continue bit for bit (same threads) is in
 * ss_train_state and Adam's moments (ss_train_run_moments). */
typedef enum {
	SS_TRAIN_LM, SS_TRAIN_BP2C, SS_TRAIN_BPTC, SS_TRAIN_BIRDIE, SS_TRAIN_OBJECTIVES
} ss_train_objective;

/* Birdie's objective configurations (lib/train/birdie.h: ntp, prefix, copy,
 * selective copy, deshuffle, infill, autoencode and their controls). */
#define SS_TRAIN_BIRDIE_CONFIGS 17

/* The name of Birdie configuration i ("copy/short", "infill/15%/8", ...), or
 * NULL outside [0, SS_TRAIN_BIRDIE_CONFIGS). */
const char *ss_train_birdie_config(int i);

/* The mask of the configurations a comma-separated list names (each a
 * configuration's name or a class's: "copy" is copy/short and copy/long),
 * bit i for configuration i, into *only. Returns 0, or SS_ERR_INVALID (an
 * unknown or empty name). */
int ss_train_birdie_only(const char *list, uint32_t *only);

/* The run's state: hyperparameters, step, data position and RNG (what
 * ss-train writes to trainer_state.json). The strings are the caller's. */
typedef struct {
	int objective;  /* ss_train_objective */
	int64_t step;   /* steps done (0 at the start) */
	int64_t steps;  /* length of the schedule */
	double lr, min_lr, weight_decay;
	double clip;    /* bound of the gradient's global L2 norm; 0 = none */
	int64_t warmup; /* steps */
	int64_t seq_len;      /* lm: tokens per window */
	int64_t batch_tokens; /* tokens per step at most (lm: >= seq_len) */
	int64_t batch_seqs;   /* sequences per step at most */
	int64_t max_k;        /* bp2c, bptc */
	uint64_t seed, rng;   /* rng: ss_splitmix64's state (seed at the start) */
	ss_compose_mode mode; /* bp2c, bptc: caso, picaso-s, picaso-r or soup */
	ss_dtype save_dtype;  /* not used by the run: what the caller saves */
	char *data;           /* lm: token stream; bp2c, bptc: JSON lines */
	char *states;         /* bp2c: state stream holding every chunk id */
	char *chunk_tokens;   /* bptc: token stream holding every chunk id */
	char *loss_after;     /* lm: count the loss only after this text's tokens, or NULL */
	/* birdie (birdie.txt §3.3, A.1): the scheduler's state, saved with the run */
	int birdie_fixed;     /* 1: the fixed-ratio mixture (every class alike), no scheduler */
	uint32_t birdie_only; /* the configurations drawn (bit i: configuration i; 0: all),
			       * e.g. a curriculum's first part on short copies alone */
	int64_t birdie_every; /* steps between evaluations (and scheduler updates) */
	double birdie_action[SS_TRAIN_BIRDIE_CONFIGS]; /* sampling probabilities now (all 0 in a
							 * new run: uniform over classes) */
	double birdie_loss[SS_TRAIN_BIRDIE_CONFIGS];   /* losses at the last evaluation (0: none yet) */
	double *birdie_hist;  /* [birdie_nhist][3·SS_TRAIN_BIRDIE_CONFIGS] rows of (losses
			       * before, action, rewards after), malloc'd: the run appends
			       * with realloc, the state's owner frees */
	int64_t birdie_nhist;
	char base_fingerprint[SS_FINGERPRINT_MAX]; /* the model bp2c's states were made by */
	/* data position: the next item to read (ss_train_run_tell) */
	int64_t epoch;
	int64_t offset; /* byte offset of the record (lm) or line (bp2c, bptc); -1: the start */
	int64_t pos;    /* lm: token position in that record */
} ss_train_state;

/* What a run needs besides its state. */
typedef struct {
	const char *model_dir;  /* the model's directory: names it in messages */
	const char *resume_dir; /* NULL, or the checkpoint resumed: Adam's m, v (and the f32
				 * "master" when save_dtype is not f32) are read from its
				 * optimizer.safetensors */
	uint64_t max_record;    /* bound of one record (ss_reader_open) */
	int threads;            /* ss_train_set_threads (clamped to SS_TRAIN_MAX_THREADS) */
	/* The tokenizer, asked for only when text must be encoded (loss_after,
	 * an example's "query"/"continuation" strings), at most once: owned by
	 * the caller, alive until ss_train_run_free; NULL fails the run with
	 * SS_ERR_NOTFOUND. */
	ss_tokenizer *(*tokenizer)(void *ctx);
	void *ctx;
} ss_train_env;

/* One finished step, as ss_train_run_steps reports it. */
typedef struct {
	int64_t step;     /* 1-based, the step just done */
	double loss;      /* mean loss over the targets before the update, nats/token */
	double lr;        /* the schedule's learning rate of the step */
	double grad_norm; /* global L2 norm of the gradient before clipping */
	int64_t tokens;   /* targets counted */
	int64_t inputs;   /* input tokens of the step (lm, bp2c: the packed batch; bptc: its
			   * queries and continuations) */
	int nseq;         /* sequences (windows, examples) */
	const int *k;     /* bp2c, bptc: [nseq] chunks composed per example; lm: NULL */
	const int *config; /* birdie: [nseq] each sequence's configuration; else NULL */
	/* birdie, at a step that evaluated (the first, and every birdie_every):
	 * [SS_TRAIN_BIRDIE_CONFIGS] each configuration's loss on its fixed
	 * evaluation sequence, and the sampling probabilities from the next
	 * step on; NULL at other steps */
	const double *birdie_loss, *birdie_action;
} ss_train_step_info;

/* Called after every step; a nonzero return stops the run (returned by
 * ss_train_run_steps). It may call ss_train_run_tell and save. */
typedef int (*ss_train_step_fn)(void *ctx, const ss_train_step_info *s);

typedef struct ss_train_run ss_train_run;

/* Opens a run of model m (a Mamba-2 model, loaded with f32 weights) from
 * state st (read and written by the run; the caller keeps it alive and
 * frees its strings): the trainer (ss_train_init for batch_tokens tokens —
 * bptc: or its longest chunk — and min(batch_seqs, batch_tokens)
 * sequences), Adam's moments (zero, or env->resume_dir's), the data source
 * positioned at st's epoch, offset and pos. m is not referenced afterwards.
 * Returns 0, or SS_ERR_* with errmsg naming the file, the record or line
 * and the field (SS_ERR_NOMEM "out of memory"; st's data unreadable, a
 * record not tokens or a token outside the vocabulary, the resume position
 * not in the data, a chunk stream of another model or dims, a non-finite
 * or negative moment). Caller frees *out with ss_train_run_free, also
 * after an error (*out is then NULL or a partly opened run). */
int ss_train_run_open(ss_train_run **out, ss_train_state *st, const ss_model *m,
		      const ss_train_env *env, char *errmsg);

/* Runs steps until st->step reaches `until` (st->step < until <= st->steps),
 * calling step(ctx, info) after each (st->step and st->rng advanced, the
 * weights updated). Returns 0, step's nonzero return, or SS_ERR_* with
 * errmsg (a malformed example or record, naming the file and line or
 * record; an example over batch_tokens; a chunk id not in the chunk
 * stream; "step N: the gradient is not finite"): the run is then only
 * freeable, its weights those of the last whole step. */
int ss_train_run_steps(ss_train_run *r, int64_t until, ss_train_step_fn step, void *ctx,
		       char *errmsg);

/* Sets st's epoch, offset and pos to the next item the run reads (for a
 * checkpoint). Returns 0, or SS_ERR_* with errmsg (lm reads ahead to the
 * next document). */
int ss_train_run_tell(ss_train_run *r, char *errmsg);

/* The run's trainer (its parameters: ss_train_params_of) and Adam's first
 * and second moments, m and v: [params->n] f32 each. Owned by r. */
ss_train *ss_train_run_trainer(ss_train_run *r);
void ss_train_run_moments(ss_train_run *r, const float **m, const float **v);

void ss_train_run_free(ss_train_run *r);

#ifdef __cplusplus
}
#endif
#endif /* SS_TRAIN_H */
