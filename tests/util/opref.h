/* opref.h — naive double-precision references of ops of ss_ops.h, for the
 * tests (test_ops checks each CPU op against them; test_cuda_parity's twin
 * table uses them for its CPU side when there is no GPU). Straight loops in
 * the order of the formulas in ss_ops.h, nothing fused or vectorised. */
#ifndef SS_TEST_OPREF_H
#define SS_TEST_OPREF_H

#include <stdint.h>

#include "ss.h"

/* Embedding gather (ss_embed_cpu): h: out [n][d]; emb: [vocab][d] in et
 * (f32, f16, bf16), widened exactly. */
void opref_embed(double *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		 int d);

/* RMSNorm with an optional residual add (ss_rmsnorm_cpu): hout: out [n][d],
 * h (+ res, rounded to f32 as the op stores it); y: out [n][d]. h, res: [n][d]
 * contiguous (res may be NULL); w: [d]. */
void opref_rmsnorm(double *y, double *hout, const float *h, const float *res, const float *w,
		   int64_t n, int d, double eps);

/* Linear (ss_linear_cpu) on f32 operands: y: out [M][N] contiguous,
 * = x·Wᵀ (+ y0 when y0: [M] rows at stride ldy0). x: [M] rows at stride
 * ldx; W: [N][K] (a 16-bit W widened by the caller). */
void opref_linear(double *y, const float *x, int64_t ldx, const float *W, const float *y0,
		  int64_t ldy0, int64_t M, int64_t N, int64_t K);

/* dt = softplus(raw + bias) (threshold 20), clamped to [dt_min, dt_max] when
 * dt_min > 0 / dt_max finite (ss_dt_softplus_cpu): dt: out [n][H]; raw:
 * [n] rows at stride ldr; bias: [H]. */
void opref_dt(double *dt, const float *raw, int64_t ldr, const float *bias, int64_t n, int H,
	      float dt_min, float dt_max);

/* Gated grouped RMSNorm (ss_gated_rmsnorm_cpu): out: [n][d] contiguous;
 * y, z: [n] rows at strides ldy, ldz; w: [d]; G groups of d/G columns. */
void opref_gated_rmsnorm(double *out, const float *y, int64_t ldy, const float *z, int64_t ldz,
			 const float *w, int64_t n, int d, int G, double eps);

/* Mamba-1's low-rank dt (ss_dt_proj_cpu): dt: out [n][d_inner] contiguous;
 * low: [n] rows at stride ldl (dt_low first); W: [d_inner][R]; bias:
 * [d_inner]. dt = softplus(W·low + bias), in double. */
void opref_dt_proj(double *dt, const float *low, int64_t ldl, const float *W, const float *bias,
		   int64_t n, int d_inner, int R);

/* Mamba-1's selective scan (ss_ssm1_scan_cpu), in double: ss[nseq+1] row
 * starts; x, dt: rows of d_inner at strides ldx, lddt; BC: rows at stride
 * ldbc, B then C (N each); A_log: [d_inner][N]; D: [d_inner]; ssm: in/out
 * [nseq][d_inner][N]; y: out [T][d_inner] contiguous; ld: in/out
 * [nseq][d_inner][N]. */
void opref_scan1(int d_inner, int N, const int64_t *ss, int nseq, const float *x, int64_t ldx,
		 const float *BC, int64_t ldbc, const float *dt, int64_t lddt, const float *A_log,
		 const float *D, double *ssm, double *y, double *ld);

/* Mamba-1's gate (ss_gate_silu_cpu): out [n][d] contiguous = y · silu(z). */
void opref_gate(double *out, const float *y, int64_t ldy, const float *z, int64_t ldz, int64_t n,
		int d);

/* Row argmax (ss_argmax_rows_cpu): ids: out [nrows], the first index of the
 * largest non-NaN value of row r over columns [0, n), -1 for an all-NaN
 * row; logits: [nrows] rows at stride ld. */
void opref_argmax(int32_t *ids, const float *logits, int64_t ld, int64_t nrows, int64_t n);

/* Causal depthwise conv1d + SiLU of a packed batch (ss_conv1d_silu_cpu):
 *   y: out [T][nch] (T = ss[nseq]), nst: out [nseq][nch][K-1], the new
 *   states; x: [T] rows at stride ldx; state: [nseq][nch][K-1];
 *   w: [nch][K] (conv1d.weight, not transposed); b: [nch]. */
void opref_conv(double *y, double *nst, const float *x, int ldx, const int64_t *ss, int nseq,
		const float *state, const float *w, const float *b, int nch, int K);

/* The selective scan of a packed batch (ss_ssm_scan_cpu), all in double:
 *   x: [T][H·P] at stride ldx; B, C: [T][G·N] at stride ldb; dt: [T][H];
 *   A_log, D: [H] (D may be NULL); ssm: in/out [nseq][H][P][N];
 *   y: out [T][H·P]; ld: in/out [nseq][H], += A·Σdt. */
void opref_scan(const ss_scan_dims *d, const int64_t *ss, int nseq, const float *x, int ldx,
		const float *B, const float *C, int ldb, const float *dt, const float *A_log,
		const float *D, double *ssm, double *y, double *ld);

#endif
