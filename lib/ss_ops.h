/*
 * ss_ops.h — the tensor ops of the Mamba-2 forward pass, one function per op
 * (part of libss; include "ss.h").
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Each op here is the CPU reference `ss_<op>_cpu`; most have a CUDA twin
 * `ss_<op>_cuda` with the same parameters (device pointers, plus a trailing
 * stream, and a cuBLAS handle for the linear). A twin is registered once, in
 * SS_CUDA_OPS (lib/forward/device_plugin.h): its signature there gives its
 * slot in the plugin's table, its layout entry, its declaration in the
 * kernels (kernels/common.cuh) and the table's fill (kernels/plugin.cu).
 * The forward pass (the driver forward.c, through backend_cpu.c or, on a
 * GPU, kernels/forward.cu: backend.h) is these ops in order;
 * tests/test_ops.c checks each CPU op against a naive reference and
 * tests/test_cuda_parity.c each CUDA twin against its CPU op (and fails
 * when a registered op has no adapter there).
 *
 * The twins, one file pair per op. A new op touches 11 files besides its
 * reference in tests/util/opref.c (fewer if the forward pass or training
 * does not use it): the whole list, in order, is the op recipe of
 * docs/DESIGN.md §9.
 *
 *   op           CPU (lib/forward/ops/<op>.c)    CUDA (kernels/<op>.cu)   file pair
 *   embed        ss_embed_cpu            ss_embed_cuda            embed.c   | embed.cu
 *   rmsnorm      ss_rmsnorm_cpu          ss_rmsnorm_cuda          norm.c    | norm.cu
 *   gated norm   ss_gated_rmsnorm_cpu    ss_gated_rmsnorm_cuda    norm.c    | norm.cu
 *   linear       ss_linear_cpu           ss_linear_cuda           linear.c  | linear.cu
 *   conv1d       ss_conv1d_silu_cpu      ss_conv1d_silu_cuda      conv.c    | conv.cu
 *   conv1d step  ss_conv1d_step_cpu      ss_conv1d_step_cuda      conv.c    | conv.cu
 *   dt           ss_dt_softplus_cpu      ss_dt_softplus_cuda      dt.c      | dt.cu
 *   scan         ss_ssm_scan_cpu         ss_ssm_scan_cuda         scan.c    | scan.cu
 *   scan (SSD)   ss_scan_chunked *       ss_ssd_scan_cuda         ssd.c     | ssd.cu
 *   scan step    ss_ssm_step_cpu         ss_ssm_step_cuda         scan.c    | scan.cu
 *   argmax       ss_argmax_rows_cpu      ss_argmax_rows_cuda      argmax.c  | argmax.cu
 *   loss         ss_cross_entropy_cpu    —                        loss.c    |
 *   Mamba-1:
 *   dt low-rank  ss_dt_proj_cpu          ss_dt_proj_cuda          dt.c      | dt.cu
 *   scan (M1)    ss_ssm1_scan_cpu        ss_ssm1_scan_cuda        scan1.c   | scan1.cu
 *   gate         ss_gate_silu_cpu        ss_gate_silu_cuda        norm.c    | norm.cu
 *   (Mamba-1's conv is conv1d above over the d_inner x columns, x_proj the
 *   linear with f32 W.)
 *
 *   * internal (lib/forward/ops/scan.h): one group's heads, called by the CPU backend
 *     (backend_cpu.c) per thread; ss_ssd_scan_cuda is checked against ss_ssm_scan_cpu.
 * Shared inner loops: lib/forward/vec.c (AVX2 elementwise) and kernels/common.cuh.
 *
 * Backward (training, on the CPU only: lib/train/): the ops that training
 * differentiates (embed, rmsnorm, gated norm, linear, conv1d, dt, scan,
 * loss) have `ss_<op>_backward_cpu` declared under their forward and
 * defined under it in the same file, with no CUDA twin, in the style of
 * llm.c's train_gpt2.c: the forward's arguments in the forward's order, each input
 * followed by its d-prefixed gradient (same shape and row stride as the
 * array it is the gradient of), the output's gradient in the output's
 * place. Gradients of inputs and parameters ACCUMULATE (+=) into buffers the
 * caller zeroes once per step; an op that works in place (the gated norm)
 * turns its output's gradient into its input's in place; the gradient of a
 * state that the forward updates in place (conv_state, ssm) is in/out: on
 * entry that of the final state (zeros if unused), on return that of the
 * initial state. Forward inputs a backward needs are the forward's inputs
 * as they were (a caller saves what the forward overwrites: the initial
 * states, the gated norm's input). tests/test_grad.c checks each against
 * double-precision central finite differences.
 *
 * Conventions, for every op:
 *   - Rows are tokens. A matrix "[n][d], row stride ld" has element (r, i) at
 *     p[r*ld + i], ld >= d, in elements (not bytes).
 *   - Activations are f32. Weights are f32 unless a dtype says otherwise.
 *   - A packed batch of variable-length sequences is described by
 *     seq_start[nseq+1]: sequence s owns rows [seq_start[s], seq_start[s+1]),
 *     seq_start[0] = 0, non-decreasing (empty sequences allowed).
 *     seq_start == NULL means one row per sequence (decode: row s is
 *     sequence s).
 *   - Per-sequence state arrays of a batch lie at a fixed stride: sequence s
 *     uses state + s*ld_state (one layer's slice of its state).
 *   - Ops never allocate, never print, never start threads; the caller cuts
 *     work into row ranges (rows are independent for the row-wise ops) or
 *     channel ranges (conv1d) and runs them on its own threads.
 *   - Arrays never alias unless an op says so (in place is stated).
 *
 * ref: docs/DESIGN.md §2; state-spaces/mamba mamba_ssm/modules/mamba2.py
 *      forward() and step(); tests/fixtures/golden/README.md §2 (the exact per-token math).
 */
#ifndef SS_OPS_H
#define SS_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Embedding gather: h[r][:] = emb[tokens[r]][:], widened to f32.
 *   h: out [n][d_model] f32, contiguous.
 *   emb: [vocab][d_model] in dtype et (f32, f16 or bf16), contiguous.
 *   tokens: [n] i32; the caller has checked them against vocab.
 * ref: torch.nn.Embedding. */
void ss_embed_cpu(float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		  int d_model);

/* Backward of the embedding gather: demb[tokens[r]][:] += dh[r][:].
 *   dh: [n][d_model] f32, contiguous.  demb: [vocab][d_model] f32 (the f32
 *   master copy of the embedding; with tied weights also lm_head's dW).
 * Not thread-safe over rows (a token may repeat). ref: llm.c encoder_backward. */
void ss_embed_backward_cpu(const float *dh, float *demb, const int32_t *tokens, int64_t n,
			   int d_model);

/* RMSNorm with an optional residual add, row by row:
 *   if res: h[r] += res[r]        (h updated in place: the residual stream)
 *   y[r] = h[r] / sqrt(mean(h[r]²) + eps) * w
 *   y, h, res: [n][d] f32, contiguous; res may be NULL; y may equal h
 *   (then with res NULL). w: [d] f32.
 * The sum of squares is taken in double (as ggml's rms_norm) on the CPU, in
 * f32 with a tree reduction on the GPU.
 * ref: mamba_ssm ops/triton/layer_norm.py rms_norm_fn (residual_in_fp32). */
void ss_rmsnorm_cpu(float *y, float *h, const float *res, const float *w, int64_t n, int d,
		    float eps);

/* Backward of ss_rmsnorm_cpu, with r = 1/sqrt(mean(h²) + eps):
 *   dh[r] += r·(dy∘w) − h·r³/d·Σ(dy∘w∘h);   dw += Σ_r dy∘h·r
 *   dy: [n][d] the output's gradient.  h: [n][d] the normalised input, i.e.
 *   after the residual add (what the forward leaves in h).  dh: [n][d]
 *   (+=).  w: [d].  dw: [d] (+=) or NULL (frozen).
 * The residual add's gradient is the identity: a caller that keeps one
 * gradient of the residual stream passes it as dh, and it is then the
 * gradient of both the pre-add h and res.
 * ref: mamba_ssm ops/triton/layer_norm.py _layer_norm_bwd (is_rms_norm). */
void ss_rmsnorm_backward_cpu(const float *dy, const float *h, float *dh, const float *w,
			     float *dw, int64_t n, int d, float eps);

/* Linear (no bias): y[M][N] = x[M][K] · W[N][K]ᵀ + beta · y.
 *   y: [M][N] f32, row stride ldy (in/out when beta != 0).
 *   x: [M][K] f32, row stride ldx.
 *   W: [N][K] row-major (torch's [out][in]) in dtype weights_dtype, contiguous.
 * in_proj (N = d_in_proj, K = d_model), out_proj (N = d_model, K = d_inner,
 * beta = 1: the residual add), lm_head (N = vocab_padded, K = d_model).
 * CPU: f32 W: the BLAS's sgemm (sgemv when M == 1), one BLAS thread: split
 * M or N over threads by calling it on slices. bf16/f16 W: f32 products
 * of the widened weights, f32 accumulation, W streamed once
 * (ss_matvec_w16 in lib/forward/ops/linear.c: a decode kernel, best for small M;
 * for large M the forward pass widens panels of W and calls this with
 * f32).
 * CUDA: cublasSgemm (f32) or cublasGemmEx with bf16/f16 W, x rounded to
 * W's dtype, f32 accumulation and output.
 * Returns 0; SS_ERR_UNSUPPORTED (weights_dtype not handled on this device),
 * SS_ERR_INVALID (negative sizes, ld too small); SS_ERR_DEVICE (CUDA). */
int ss_linear_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		  ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta);

/* The linear op with one fixed f32 summation order per output, whatever
 * the batch (lib/forward/ops/linear_f32.c: AVX-512 and AVX2 kernels, one
 * FMA chain per output in k order, the same bits; portable C else): what
 * the CPU forward pass runs for prefill's projections (unless
 * $SS_GEMM=blas) and for deterministic decode steps. No CUDA twin.
 *   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx.
 *   W: [N][K] row-major (the nn.Linear weight layout) in weights_dtype: SS_DTYPE_F32,
 *      SS_DTYPE_BF16 or SS_DTYPE_F16, aligned to its element size.
 * Each y[m][n] is the same bits whatever M, N, the row's place and the slice
 * of W a caller passes (the order depends on the kernel only: AVX-512 and
 * AVX2 agree), so cutting rows or columns over threads, or batching rows, never changes
 * a result; and W in bf16 or f16 gives the bits of the f32 call on W
 * widened. Returns 0, SS_ERR_INVALID (negative sizes, ldy < N, ldx < K),
 * SS_ERR_UNSUPPORTED (another weights_dtype).
 * ref: the f32 path of ss_linear_cpu (cblas_sgemv / cblas_sgemm), which it
 *      matches to rounding; ops/linear.h ss_matvec_w16 (the same property
 *      for 16-bit weights, one row at a time). */
int ss_linear_rows_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		       ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta);

/* Prefill's linear op with q8_0 W, row-invariant (the CPU forward pass's
 * prefill projections with q8_0 matrices, unless $SS_GEMM=blas; no CUDA
 * twin): y[m][n] = W[n]·x[m] + beta·y[m][n].
 *   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx; each row quantized to q8_0 (blocks of
 *      32, d = max|x|/127 rounded to f16, codes round(x/d): ss_from_f32),
 *      as ggml quantizes activations for its q8_0 dot product.
 *   W: [N][K] q8_0 (SS_DTYPE_Q8_0 rows of K/32 blocks), any alignment; K a
 *      multiple of 32 and <= SS_Q8_0_ROW_MAX.
 * Each block's 32 products are summed exactly (an integer T_b), then one
 * f32 chain per output over the blocks in order: acc = fmaf((float)T_b,
 * d_w,b·d_x,b, acc) from 0. So y[m][n] is the same bits whatever M, N, the
 * slice of W and the kernel (lib/forward/ops/q8_0.c: AVX-512 VNNI, AVX2,
 * portable C); not those of the decode kernel (ss_linear_cpu with q8_0 W:
 * another order of the same products). Error against x times W dequantized:
 * x's quantization (ss_linear_cpu's bound). Returns 0, SS_ERR_INVALID
 * (negative sizes, ldy < N, ldx < K), SS_ERR_UNSUPPORTED (K not a multiple
 * of 32 or above SS_Q8_0_ROW_MAX).
 * ref: ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_q8_0_q8_0 (one
 *      integer sum a block, scaled into f32). */
int ss_linear_q8_0_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		       int64_t M, int64_t N, int64_t K, float beta);

/* Backward of ss_linear_cpu with f32 W (training keeps f32 master weights):
 *   dx[M][K] += dy·W;   dW[N][K] += dyᵀ·x
 *   dy: [M][N], row stride ldy.  x, dx: [M][K], row stride ldx; dx may be
 *   NULL (an input without a gradient).  W, dW: [N][K] contiguous; dW may
 *   be NULL (frozen).  beta's y0 gets dy itself (the caller's residual).
 * Through the BLAS (sgemm with beta 1), one BLAS thread as the forward.
 * Returns 0 or SS_ERR_INVALID (negative sizes, ld too small).
 * ref: llm.c matmul_backward. */
int ss_linear_backward_cpu(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
			   ptrdiff_t ldx, const float *W, float *dW, int64_t M, int64_t N, int64_t K);

/* Causal depthwise conv1d (width d_conv, with bias) + SiLU over a packed
 * batch, starting each sequence from its conv state and leaving its final
 * conv state there (in place):
 *   y[t][c] = silu(b[c] + Σ_k wt[k][c] · in(t - (d_conv-1) + k, c))
 * where in(u, c) is x[u][c] for u >= the sequence's first row and
 * conv_state[c][d_conv-1 + u - first] before it (k = 0 the oldest).
 * On return conv_state holds the last d_conv-1 inputs of
 * [old state | the sequence's rows] (an empty sequence leaves it).
 *   y: out [T][nch], row stride ldy.   x: [T][nch], row stride ldx
 *      (in_proj's xBC columns: ldx = d_in_proj).
 *   seq_start: [nseq+1] or NULL (one row per sequence, see the file comment).
 *   conv_state: in/out, sequence s at conv_state + s*ld_state,
 *      [nch][d_conv-1] (channel c at c*(d_conv-1)).
 *   wt: [d_conv][ldw] the conv1d weights transposed tap-major
 *      (wt[k*ldw + c] = conv1d.weight[c][0][k]), so that a channel range
 *      [c0, c1) is the op on x+c0, y+c0, wt+c0, b+c0, conv_state+c0*(d_conv-1)
 *      with nch = c1-c0 (how the CPU forward splits it over threads).
 *   b: [nch].
 * ref: mamba_ssm modules/mamba2.py (causal_conv1d_fn with initial_states and
 *      return_final_states); causal-conv1d causal_conv1d_varlen. */
void ss_conv1d_silu_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
			const int64_t *seq_start, int nseq, float *conv_state, ptrdiff_t ld_state,
			const float *wt, ptrdiff_t ldw, const float *b, int nch, int d_conv);

/* The largest d_conv ss_conv1d_silu_backward_cpu takes (Mamba-2 uses 4). */
#define SS_CONV_BACKWARD_MAX 16

/* Backward of ss_conv1d_silu_cpu over the same packed batch:
 *   dy: [T][nch], row stride ldy.  x, dx: [T][nch], row stride ldx (+=).
 *   conv_state: the initial states (as before the forward, which overwrites
 *   them).  dconv_state: same layout, in: the gradient of the final states
 *   (zeros if unused); out: that of the initial states.
 *   wt, dwt: [d_conv][ldw] tap-major (+=).  b, db: [nch] (+=).
 * The pre-activations are recomputed from x and the states. A channel range
 * is the op on offset pointers, as for the forward.
 * Returns 0 or SS_ERR_INVALID (d_conv outside [1, SS_CONV_BACKWARD_MAX],
 * a negative count or sequence length).
 * ref: causal-conv1d causal_conv1d_bwd (with initial_states, dfinal_states). */
int ss_conv1d_silu_backward_cpu(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
				ptrdiff_t ldx, const int64_t *seq_start, int nseq,
				const float *conv_state, float *dconv_state, ptrdiff_t ld_state,
				const float *wt, float *dwt, ptrdiff_t ldw, const float *b, float *db,
				int nch, int d_conv);

/* Single-token conv step of nseq independent sequences (decode): the op above
 * with seq_start NULL. Row s of x/y is sequence s's token.
 * ref: mamba_ssm modules/mamba2.py step() (causal_conv1d_update). */
void ss_conv1d_step_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int nseq,
			float *conv_state, ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
			const float *b, int nch, int d_conv);

/* dt = softplus(raw + dt_bias), clamped to [dt_min, dt_max] when those are
 * set (dt_min > 0, dt_max finite), softplus with torch's threshold 20.
 *   dt: out [n][nheads], row stride lddt.  raw: [n][nheads], row stride ldr
 *   (in_proj's dt columns).  dt_bias: [nheads].
 * ref: mamba_ssm modules/mamba2.py (dt_softplus, dt_limit). */
void ss_dt_softplus_cpu(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max);

/* Backward of ss_dt_softplus_cpu: g = ddt·σ(raw + dt_bias) (1 above the
 * threshold 20; 0 where the clamp held the value); draw += g;
 * ddt_bias[h] += Σ_r g.
 *   ddt: [n][nheads], row stride lddt.  raw, draw: [n][nheads], row stride
 *   ldr (+=; draw may be NULL).  dt_bias, ddt_bias: [nheads] (+=; ddt_bias
 *   may be NULL). */
void ss_dt_softplus_backward_cpu(const float *ddt, ptrdiff_t lddt, const float *raw,
				 float *draw, ptrdiff_t ldr, const float *dt_bias, float *ddt_bias,
				 int64_t n, int nheads, float dt_min, float dt_max);

/* Dims of one layer's scan. */
typedef struct {
	int32_t nheads, headdim, d_state, ngroups;
} ss_scan_dims;

/* The selective scan (SSM recurrence) of one layer over a packed batch of
 * variable-length sequences, each from its own initial state, leaving its
 * final state (prefill). Per sequence, per token t, per head h
 * (group g = h / (nheads/ngroups), A_h = -exp(A_log[h])):
 *   ssm[h] = exp(dt[t][h]*A_h) * ssm[h] + dt[t][h] * outer(x[t][h], B[t][g])
 *   y[t][h] = ssm[h] @ C[t][g] + D[h] * x[t][h]
 *   logdecay[h] += A_h * Σ_t dt[t][h]   (A_h and the sum in double)
 *   x: [T][nheads*headdim], row stride ldx.   B, C: [T][ngroups*d_state],
 *   row strides ldb, ldc.   dt: [T][nheads] (after ss_dt_softplus), lddt.
 *   A_log, D: [nheads] (D may be NULL = 0).
 *   ssm: in/out, sequence s at ssm + s*ld_ssm, [nheads][headdim][d_state].
 *   y: out [T][nheads*headdim], row stride ldy, or NULL (state only; C is
 *      then unused and may be NULL).
 *   logdecay: in/out, sequence s at logdecay + s*ld_logdecay, [nheads], or
 *      NULL.
 * CPU: sequential in t, heads one after another (callers split heads over
 * threads by offsetting x, B, C, dt, A_log, D, ssm, y, logdecay and passing
 * nheads = ngroups = 1). CUDA: ss_ssm_scan_cuda is the same recurrence,
 * sequential in t, parallel over (sequence, head, headdim, d_state);
 * ss_ssd_scan_cuda (kernels/ssd.cuh) is the chunked SSD form of the same op.
 * Returns 0 or SS_ERR_INVALID (bad dims or strides).
 * ref: mamba_ssm modules/mamba2.py step(); picaso.txt Prop. 1. */
int ss_ssm_scan_cpu(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
		    const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
		    const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		    const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
		    float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay);

/* Backward of ss_ssm_scan_cpu: the reverse recurrence. Per head, from the
 * last token, with ds the gradient of the state after token t:
 *   ds += dy_t⊗C_t;  dC_t += dy_tᵀ·s_t;  dD += ⟨dy_t, x_t⟩;
 *   dx_t += D·dy_t + dt_t·ds·B_t;  dB_t += dt_t·dsᵀ·x_t;
 *   ddt_t += x_tᵀ·ds·B_t + A·a_t·⟨ds, s_{t-1}⟩ + A·dlogdecay;
 *   dA += dt_t·a_t·⟨ds, s_{t-1}⟩ (+ Σdt·dlogdecay);  ds = a_t·ds
 * with a_t = exp(dt_t·A), and dA_log += dA·A (A = -exp(A_log)).
 *   Every forward input is followed by its gradient (+=, same layout and
 *   stride): x/dx, B/dB, C/dC (C, dC unused when dy is NULL), dt/ddt,
 *   A_log/dA_log, D/dD (dD may be NULL; D NULL = 0).
 *   ssm: the initial states (as before the forward).  dssm: same layout,
 *   in: the gradient of the final states (zeros if unused); out: that of the
 *   initial states.
 *   dy: [T][nheads*headdim] at ldy, or NULL (only the final state was
 *   used).  dlogdecay: [nseq] rows of [nheads] at ld_logdecay, or NULL.
 *   work: ss_ssm_scan_backward_work(d, longest sequence) floats: the
 *   states are recomputed one chunk of SS_SCAN_CHUNK tokens at a time from
 *   checkpoints at the chunks' starts.
 * Heads one after another; the group's dB, dC gather all its heads.
 * Returns 0 or SS_ERR_INVALID (bad dims or strides, a NULL gradient array
 * other than dD and dlogdecay).
 * ref: Dao & Gu 2024 (Mamba-2) §6 (the SSD backward); mamba_ssm
 *      ops/triton/ssd_combined.py (dinitial_states, dfinal_states). */
int ss_ssm_scan_backward_cpu(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
			     const float *x, float *dx, ptrdiff_t ldx, const float *B, float *dB,
			     ptrdiff_t ldb, const float *C, float *dC, ptrdiff_t ldc,
			     const float *dt, float *ddt, ptrdiff_t lddt, const float *A_log,
			     float *dA_log, const float *D, float *dD, const float *ssm,
			     float *dssm, ptrdiff_t ld_ssm, const float *dy, ptrdiff_t ldy,
			     const float *dlogdecay, ptrdiff_t ld_logdecay, float *work);

/* Floats of work ss_ssm_scan_backward_cpu needs for sequences of at most
 * n_max tokens: (ceil(n_max/SS_SCAN_CHUNK) + SS_SCAN_CHUNK)·headdim·d_state. */
size_t ss_ssm_scan_backward_work(const ss_scan_dims *d, int64_t n_max);

/* Single-token state update of nseq independent sequences (decode): the scan
 * above with one row per sequence (row s is sequence s). Same arguments.
 * ref: mamba_ssm modules/mamba2.py step() (selective_state_update). */
int ss_ssm_step_cpu(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
		    const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
		    const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
		    float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
		    ptrdiff_t ld_logdecay);

/* Gated grouped RMSNorm, in place on y, row by row:
 *   y = y * silu(z);  each group of d/ngroups columns: y_g = y_g /
 *   sqrt(mean(y_g²) + eps) * w_g   (norm_before_gate = False)
 *   y: in/out [n][d], row stride ldy.  z: [n][d], row stride ldz
 *   (in_proj's z columns).  w: [d] (mixer.norm.weight).
 * ref: mamba_ssm ops/triton/layernorm_gated.py rmsnorm_fn(group_size). */
void ss_gated_rmsnorm_cpu(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
			  const float *w, int64_t n, int d, int ngroups, float eps);

/* Mamba-1's dt, low rank: per row r and channel d
 *   dt[r][d] = softplus(Σ_k W[d][k] · low[r][k] + dt_bias[d])
 * (softplus to f32 precision as ss_dt_softplus_cpu's, no clamp; the sum in
 * f32: on the CPU the linear op's sgemm, on the GPU k in order).
 *   dt: out [n][d_inner], row stride lddt.
 *   low: [n][dt_rank], row stride ldl (x_proj's dt_low columns).
 *   W: [d_inner][dt_rank] (mixer.dt_proj.weight).  dt_bias: [d_inner]
 *   (mixer.dt_proj.bias). Channel ranges: offset dt, W, dt_bias.
 * ref: mamba_ssm modules/mamba_simple.py (dt_proj, delta_softplus). */
void ss_dt_proj_cpu(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl, const float *W,
		    const float *dt_bias, int64_t n, int d_inner, int dt_rank);

/* The Mamba-1 selective scan of one layer over a packed batch (seq_start
 * [nseq+1]) or one row per sequence (seq_start NULL: decode), each from its
 * own state, leaving its final state. Per token t, channel d, state n
 * (A_dn = -exp(A_log[d][n]), computed in f32 once per call):
 *   ssm[d][n] = exp(dt[t][d]·A_dn) · ssm[d][n] + dt[t][d] · x[t][d] · B[t][n]
 *   y[t][d] = Σ_n ssm[d][n] · C[t][n] + D[d] · x[t][d]
 *   logdecay[d][n] += A_dn · Σ_t dt[t][d]   (A_dn and the sum in double)
 *   x: [T][d_inner], row stride ldx (conv output).
 *   BC: [T][2*d_state] B | C, row stride ldbc (x_proj's columns after
 *       dt_low).  dt: [T][d_inner], lddt.
 *   A_log: [d_inner][d_state].  D: [d_inner] or NULL (= 0).
 *   ssm: in/out, sequence s at ssm + s*ld_ssm, [d_inner][d_state].
 *   y: out [T][d_inner], ldy, or NULL (state only).
 *   logdecay: in/out, sequence s at logdecay + s*ld_logdecay,
 *       [d_inner][d_state], or NULL.
 * Channel ranges [d0, d1): offset x, dt, y, D by d0 and A_log, ssm,
 * logdecay by d0·d_state, with d_inner = d1-d0 (how the CPU forward splits
 * it over threads). d_state <= 256.
 * Returns 0 or SS_ERR_INVALID (bad dims or strides).
 * ref: mamba_ssm ops/selective_scan_interface.py selective_scan_ref;
 *      modules/mamba_simple.py step(); ../shared/golden-mamba1/README.md §2. */
int ss_ssm1_scan_cpu(int d_inner, int d_state, const int64_t *seq_start, int nseq,
		     const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
		     const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
		     float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
		     ptrdiff_t ld_logdecay);

/* Mamba-1's gate, in place, row by row: y = y · silu(z).
 *   y: in/out [n][d], row stride ldy.  z: [n][d], ldz (in_proj's z columns).
 * ref: mamba_ssm modules/mamba_simple.py (y * act(z)). */
void ss_gate_silu_cpu(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz, int64_t n, int d);

/* Backward of ss_gated_rmsnorm_cpu, in place as the forward: with
 * u = y∘silu(z) and the group's r = 1/sqrt(mean(u_g²) + eps),
 *   du_g = r·(dy_g∘w_g) − u_g·r³/gs·Σ(dy_g∘w_g∘u_g);  dw += dy∘u·r;
 *   dz += du∘y∘silu'(z);  dy ← du∘silu(z)
 *   y: [n][d] the forward's input (the scan's output, saved before the
 *   forward overwrote it), row stride ldy.  dy: same layout, in: the
 *   output's gradient; out: y's gradient.  z, dz: [n][d] at ldz (+=; dz
 *   may be NULL).  w, dw: [d] (+=; dw may be NULL).
 * ref: mamba_ssm ops/triton/layernorm_gated.py _layer_norm_bwd (z, norm_before_gate False). */
void ss_gated_rmsnorm_backward_cpu(const float *y, float *dy, ptrdiff_t ldy, const float *z,
				   float *dz, ptrdiff_t ldz, const float *w, float *dw, int64_t n,
				   int d, int ngroups, float eps);

/* Greedy sampling: ids[r] = argmax of logits row r over columns [0, n)
 * (the first index on ties; NaN never wins; -1 if the row is all NaN).
 *   logits: [nrows][n] f32, row stride ld.  ids: out [nrows] i32.
 * ref: ss_argmax (ss_sample.h), which this is row by row. */
void ss_argmax_rows_cpu(int32_t *ids, const float *logits, ptrdiff_t ld, int64_t nrows,
			int64_t n);

/* Next-token cross-entropy row by row, over all V columns (the padded
 * vocabulary, as ss-score's softmax):
 *   nll[r] = log Σ_i exp(logits[r][i]) − logits[r][targets[r]]
 * (max-shifted, the sum in double); a row with targets[r] < 0 has no
 * target (a prompt token, a document boundary) and nll[r] = 0.
 *   nll: out [n] f32.  logits: [n][V] f32, row stride ld.  targets: [n].
 * Returns 0 or SS_ERR_INVALID (V < 1, ld < V, a target >= V).
 * ref: torch.nn.functional.cross_entropy (ignore_index < 0). */
int ss_cross_entropy_cpu(float *nll, const float *logits, ptrdiff_t ld, const int32_t *targets,
			 int64_t n, int64_t V);

/* Backward of ss_cross_entropy_cpu: dlogits[r][i] += dnll[r]·(softmax(
 * logits[r])[i] − [i == targets[r]]); rows without a target get nothing.
 *   dnll: [n] (1/n_targets for a mean loss).  dlogits: [n][V] at ld (+=).
 * Returns 0 or SS_ERR_INVALID as the forward.
 * ref: llm.c crossentropy_softmax_backward. */
int ss_cross_entropy_backward_cpu(const float *dnll, const float *logits, float *dlogits,
				  ptrdiff_t ld, const int32_t *targets, int64_t n, int64_t V);

#ifdef __cplusplus
}
#endif
#endif /* SS_OPS_H */
