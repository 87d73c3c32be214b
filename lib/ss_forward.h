/*
 * ss_forward.h — the Mamba-2 (and Mamba-1) forward pass, on the CPU or (through the CUDA
 * plugin, ss_forward_ctx_init_dev) on a GPU (part of libss; include
 * "ss.h", not this file: it uses ss_model from ss_model.h and ss_state from
 * ss_stream.h).
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Prefill of token sequences from any state (zero, stored, composed), single
 * token decode steps, and the layer-level selective scan. f32 throughout;
 * the projections (in_proj, out_proj, lm_head) go through the BLAS chosen
 * at build time (OpenBLAS or BLIS, config.mk; ss_blas_name) as
 * sgemm/sgemv, the rest (norms, conv, scan, gating) through the context's
 * own threads.
 *
 * Threads: a context with n_threads runs n_threads-1 worker threads plus the
 * calling thread. Every BLAS call is made from those threads on a slice of
 * the work, so ss_forward_ctx_init() sets the BLAS to one thread per call
 * (process-wide: openblas_set_num_threads(1) or
 * bli_thread_set_num_threads(1)): the BLAS's own threads would otherwise
 * spin-wait beside ours and oversubscribe the cores.
 *
 * Mamba-1 models (cfg arch "mamba1") run through the same driver and ops
 * table with their own ops (ss_ops.h: low-rank dt, per-element scan, plain
 * gate); their states have one decay per channel and state element.
 *
 * ref: docs/DESIGN.md §2; tests/fixtures/golden/README.md §2 (the exact per-token math);
 *      state-spaces/mamba mamba_ssm/modules/mamba2.py forward() and step();
 *      ../shared/golden-mamba1/README.md §2 (Mamba-1's).
 */
#ifndef SS_FORWARD_H
#define SS_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The BLAS library chosen at build time (OpenBLAS or BLIS, config.mk), as
 * tools and benchmarks see it; the library itself is internal to libss
 * (lib/forward/blas.h).
 *   ss_blas_threads: the threads the BLAS uses for the calls libss makes
 *     outside a forward context's pool (training's GEMMs); n >= 1, smaller
 *     is taken as 1. Process-wide; ss_forward_ctx_init sets 1 again.
 *   ss_blas_release: stops the BLAS's idle thread pool (OpenBLAS's pthread
 *     build starts it at load and spins it about 0.1 s), for a short process
 *     that makes no threaded BLAS call; the next threaded call starts it again.
 *   ss_blas_name: "OpenBLAS" or "BLIS"; ss_blas_kernels: the kernel family the
 *     library picked for this CPU ("SkylakeX", "haswell"...). Static strings.
 * No errors. ref: OpenBLAS's driver/others/blas_server.c; BLIS's docs/Multithreading.md. */
void ss_blas_threads(int n);
void ss_blas_release(void);
const char *ss_blas_name(void);
const char *ss_blas_kernels(void);

/* Which positions of a sequence get an output row (hidden and/or logits). */
typedef enum {
	SS_LOGITS_NONE = 0, /* no rows: state extraction; norm_f and lm_head never run */
	SS_LOGITS_LAST = 1, /* the last position of each sequence (1 row; 0 if empty) */
	SS_LOGITS_ALL = 2,  /* every position (n_tokens rows) */
} ss_logits_mode;

/* One sequence of a (batched) prefill call.
 *   tokens:   [n_tokens] i32 ids in [0, vocab_padded); borrowed.
 *   n_tokens: >= 0; 0 leaves the state untouched and produces no rows.
 *   state:    in/out, borrowed. On entry the state to start from (all zeros
 *             for a fresh document), with arrays allocated for the model's
 *             dims (ss_model_state_dims + ss_state_alloc); on return the
 *             state after the tokens: conv and ssm replaced,
 *             logdecay[l][h] += A_h * Σ_t dt[t][h] (units: log of the decay,
 *             ≤ 0; Mamba-1: logdecay[l][d][n] += A_dn * Σ_t dt[t][d]),
 *             n_tokens += n_tokens. An empty fingerprint is set to the
 *             model's; a different non-empty one is refused.
 *             Distinct sequences of one call must have distinct states.
 *   logits:   out, caller-owned, [n_rows][vocab_padded] f32 (n_rows per the
 *             mode), or NULL to skip lm_head for this sequence.
 *   hidden:   out, caller-owned, [n_rows][d_model] f32, the lm_head input
 *             (after norm_f), or NULL.
 *   fresh:    1: the sequence starts a document: the state's conv, ssm,
 *             logdecay and n_tokens are not read but taken as zeros, so a
 *             caller need not clear them (19 MB of ssm at the 130m shape),
 *             and the CPU's scan neither reads ssm nor multiplies C by it
 *             in the first chunk. The state on return has the same bytes
 *             as from zeroed arrays (test_forward's test_fresh); 0 (the
 *             zero of an initializer): start from the state as given. */
typedef struct {
	const int32_t *tokens;
	int64_t n_tokens;
	ss_state *state;
	float *logits;
	float *hidden;
	int fresh;
} ss_forward_seq;

/* Scratch buffers, transposed conv weights and the thread pool for one model.
 * Not thread-safe: one call at a time per context. */
typedef struct ss_forward_ctx ss_forward_ctx;

/* Creates a context for model m (borrowed: it must outlive the context).
 * m->lm_head may be NULL (SS_MODEL_SKIP_LM_HEAD): state extraction and
 * hidden rows still work, logits are refused.
 *   n_threads: threads used by every call (>= 1; 0 = 1).
 *   ubatch:    the most tokens (over all sequences) computed in one pass;
 *              longer inputs are cut into passes with the state carried
 *              across (same result up to rounding; a prefill's results
 *              depend on ubatch, see ss_forward_prefill). 0 = 512. Scratch memory is about
 *              ubatch * (2*d_model + d_in_proj + conv_dim + d_inner + nheads)
 *              floats (33 KB per token for mamba2-130m) plus 16 rows of
 *              vocab_padded logits, all allocated here, none per call.
 * Side effect: openblas_set_num_threads(1) (see the file comment).
 * Returns 0 and sets *out (free with ss_forward_ctx_free), SS_ERR_INVALID
 * (bad dims or arguments, errmsg says which), SS_ERR_NOMEM. */
int ss_forward_ctx_init(ss_forward_ctx **out, const ss_model *m, int n_threads,
			int ubatch, char *errmsg);
/* Deterministic mode, on a CPU context:
 *   prefill: ss_forward_prefill gives each sequence's state and hidden rows
 *     the same bits whatever the other sequences of the call and the
 *     context's thread count (for one model, ubatch, kernel family of
 *     the projections and of the BLAS). This is the CPU's default unless
 *     $SS_GEMM is "blas" (lib/forward/ops/linear_f32.h ss_gemm_choice):
 *     the projections run through the row-invariant kernel below, in
 *     (256-row, 256-output) blocks cut from the pass's first row across
 *     sequences (Mamba-1's: from each sequence's first row), and
 *     a sequence that does not fit in the rest of a pass starts the next
 *     one (it is cut only at multiples of ubatch: the scan's log-decay is
 *     rounded per pass). With SS_GEMM=blas, only in a deterministic
 *     context, and the blocks go through sgemm (OpenBLAS rounds a row by
 *     the shape of the call and the row's place in it): that costs the
 *     GEMMs' efficiency on short sequences (ss-encode(1) gives the figures).
 *   logits and decode: lm_head (prefill's logits rows, decode steps) and
 *     every projection of a decode step (ss_forward_decode,
 *     ss_forward_decode_next) run through a row-invariant kernel
 *     (lib/forward/ops/linear_f32.h: one fixed summation order per output,
 *     kernels that read W once for up to 32 rows), so a sequence's
 *     logits and state after a step are the same bits whatever the other
 *     sequences of the step, its place among them and the thread count:
 *     batched decoding gives what one sequence at a time gives. Against
 *     the BLAS (sgemv for one row, sgemm for several) it is about as fast
 *     for one row and faster for a batch (bench/batch gives the figures,
 *     deterministic vs BLAS). (lm_head of a prefill runs through it too
 *     where the prefill is blocked, above.)
 *   on: 1, or 0 (the default: decode steps through the BLAS).
 * Returns 0; SS_ERR_INVALID (ctx NULL), SS_ERR_UNSUPPORTED (a CUDA
 * context). */
int ss_forward_ctx_set_deterministic(ss_forward_ctx *ctx, int on);
/* Stops the threads and frees everything the context owns. NULL is a no-op. */
void ss_forward_ctx_free(ss_forward_ctx *ctx);
/* Bytes of scratch and weights copies the context holds (not the model). */
size_t ss_forward_ctx_bytes(const ss_forward_ctx *ctx);

/* Batch sizing: the most sequences run together within budget_bytes when
 * each holds its running state (ssm, conv and logdecay of m's dims, f32)
 * plus extra_bytes of its own (its logits rows, its sampler ...):
 * floor(budget_bytes / per sequence), clamped to [1, max]. For the tools'
 * default --batch (ss-decode, ss-score). Never fails. */
int ss_forward_batch_size(const ss_model *m, double extra_bytes, double budget_bytes, int max);

/* Prefill: runs n_seqs sequences, each from its own state, through the model
 * in one call. The tokens of all sequences are packed into [T][d_model]
 * matrices of up to ubatch rows (passes); in_proj/out_proj run over them in
 * blocks across threads, the conv and the scan per sequence (heads across
 * threads).
 *   seqs: [n_seqs], see ss_forward_seq (states updated in place).
 *   mode: which rows get hidden/logits; SS_LOGITS_NONE never touches norm_f
 *         or lm_head (state extraction).
 * On the CPU a sequence's results are the same bits whatever the other
 * sequences of the call and the thread count; with $SS_GEMM=blas they
 * depend on them in their last bits, unless the context is deterministic
 * (ss_forward_ctx_set_deterministic).
 * Returns 0; SS_ERR_INVALID (token out of range, NULL state, negative
 * n_tokens, the same state twice, logits asked of a model loaded with
 * SS_MODEL_SKIP_LM_HEAD), SS_ERR_MISMATCH (state dims or
 * fingerprint differ from the model's), with errmsg naming the sequence.
 * On error no state has been modified.
 * ref: tests/fixtures/golden/README.md §2; mamba_ssm modules/mamba2.py forward(). */
int ss_forward_prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs,
		       ss_logits_mode mode, char *errmsg);

/* Decode step: feeds one token to each of n states (a batch of independent
 * sequences) and returns the logits of that position. A step reads the
 * weight matrices once for all n (GEMM, not n GEMVs), the scan per
 * sequence; in a deterministic context each row is what it would be alone
 * (ss_forward_ctx_set_deterministic).
 *   states: [n] in/out (as in ss_forward_seq.state);
 *   tokens: [n] ids; logits: out [n][vocab_padded] f32, or NULL (state only).
 * Equivalent to ss_forward_prefill with one token per sequence and
 * SS_LOGITS_LAST. Errors as ss_forward_prefill.
 * ref: mamba_ssm modules/mamba2.py step(). */
int ss_forward_decode(ss_forward_ctx *ctx, ss_state **states, const int32_t *tokens,
		      int n, float *logits, char *errmsg);

/* ------------------------------------------------------------ the scan */

/* -------------------------------------------------------- devices */

typedef struct ss_device ss_device; /* ss_device.h */

/* ss_forward_ctx_init on a device (ss_device_open). dev NULL or a CPU device
 * is ss_forward_ctx_init. On a CUDA device the context holds the model on
 * the GPU: every weight uploaded once at init (the projections, embedding
 * and lm_head in m->weights_dtype, f32, bf16 or f16 — the checkpoint's own
 * unless --weights-dtype asked for another; with 16-bit matrices the
 * activations are rounded to 16 bits for the GEMM and it accumulates in
 * f32; norms, conv, dt_bias, A_log, D in f32),
 * activations and scratch on the GPU (ubatch tokens per pass as on the CPU;
 * 0 = SS_FORWARD_UBATCH_GPU: a GPU needs many tokens in flight), and
 * n_threads unused. m and dev are borrowed and must outlive
 * the context. Every ss_forward_* call keeps its contract and results (to
 * the GPU's rounding; tests/test_cuda_parity.c gives the tolerances):
 * prefill uploads the states, runs, and copies states and outputs back
 * before returning. A model held in q8_0 (SS_DTYPE_Q8_0) gets a CPU context
 * on any device: the GPU has no q8_0 kernels. Mamba-2 and Mamba-1 both run
 * on the GPU; tests/test_cuda_parity.c and tests/cli/device-cuda.sh check
 * them against the CPU and the golden fixtures where a GPU exists.
 * Errors: as ss_forward_ctx_init, and SS_ERR_DEVICE (out
 * of GPU memory, a CUDA failure; errmsg names it).
 * ref: lib/forward/forward.c (the one driver of both devices), kernels/forward.cu
 *      (the GPU backend it runs). */
#define SS_FORWARD_UBATCH_GPU 8192
int ss_forward_ctx_init_dev(ss_forward_ctx **out, const ss_model *m, ss_device *dev,
			    int n_threads, int ubatch, char *errmsg);

/* The device a context runs on: SS_DEVICE_CPU or SS_DEVICE_CUDA (as an int
 * so that this header needs not ss_device.h). */
int ss_forward_ctx_device(const ss_forward_ctx *ctx);

/* Decode with the states kept on the device between steps (on a GPU a step
 * then moves only tokens and logits, not the states; on the CPU these are
 * ss_forward_decode and nothing is kept).
 *   ss_forward_decode_begin binds n states (checked as in ss_forward_decode;
 *     on a GPU uploaded). While bound their host arrays may be stale and
 *     must not be read or written; at most one bound set per context.
 *   ss_forward_decode_next feeds tokens[n] (one per bound state, in order)
 *     and writes logits [n][vocab_padded] (NULL: none) and/or ids [n], the
 *     argmax of each row over [0, n_ids) (NULL: none; n_ids in
 *     [1, vocab_padded]; computed on the device, so greedy decoding never
 *     copies logits).
 *   ss_forward_decode_end writes the states back (n_tokens, logdecay, conv,
 *     ssm as ss_forward_decode would have left them) and unbinds.
 * Returns 0 or errors as ss_forward_decode; SS_ERR_INVALID for a call out of
 * order. After an error in _next the bound states are still written back
 * by _end, as of the last successful step.
 * ref: mamba_ssm utils/generation.py (the decode loop with an inference
 *      cache on the device). */
int ss_forward_decode_begin(ss_forward_ctx *ctx, ss_state **states, int n, char *errmsg);
int ss_forward_decode_next(ss_forward_ctx *ctx, const int32_t *tokens, float *logits,
			   int32_t *ids, int32_t n_ids, char *errmsg);
int ss_forward_decode_end(ss_forward_ctx *ctx, char *errmsg);


#ifdef __cplusplus
}
#endif
#endif /* SS_FORWARD_H */
