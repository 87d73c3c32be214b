/*
 * ss_train.h — one training step of a Mamba-2 model on the CPU: f32 master
 * parameters, a forward pass that keeps its activations, the backward pass
 * through every op (ss_ops.h's *_backward_cpu) into the gradient of every
 * parameter and of the initial states, and the AdamW update (part of libss;
 * include "ss.h").
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

#ifdef __cplusplus
}
#endif
#endif /* SS_TRAIN_H */
