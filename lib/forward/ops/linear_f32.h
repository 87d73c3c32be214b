/*
 * ops/linear_f32.h — a row-invariant linear op (internal to libss; behind
 * the CPU backend's deterministic decode, backend_cpu.c): y[m][n] =
 * W[n]·x[m] + beta·y[m][n], W in f32, bf16 or f16 (widened exactly in
 * registers), x, y and the accumulation in f32.
 *
 * Why: a batched decode step must give each sequence the logits it would
 * get alone (ss-decode(1) --prompts: the bytes of a batch equal those of one
 * sequence at a time). OpenBLAS does not: sgemv (one row) and sgemm (several)
 * sum in different orders, and sgemm's tail kernels round a row by its place
 * in the call. Here every y[m][n] is one fixed sum, whatever the rows and
 * columns beside it:
 *   - AVX-512: one FMA chain over k = 0 .. K - 1 in order, from 0. Up to 8
 *     rows of x run against 16 rows of W transposed in registers; more, 32
 *     (or 16) rows of x are transposed into a panel (256 KB of stack) and
 *     each element of W is broadcast against them, so W is read once per
 *     call, or per 32 rows;
 *   - AVX2+FMA: the same chain, so the same bits as AVX-512: up to 4 rows
 *     of x against 8 rows of W transposed in registers; more, 16 rows of x
 *     transposed into a panel, each element of W broadcast against them
 *     in tiles of 6 rows of W;
 *   - portable C: one chain over k, multiply then add (other bits).
 * $SS_GEMM (ss_gemm_choice below) can hold it to AVX2 or C.
 * A GEMM's weight reuse with a GEMV's per-row result.
 */
#ifndef SS_LINEAR_F32_H
#define SS_LINEAR_F32_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/* ss_linear_rows_cpu(y, ldy, x, ldx, W, weights_dtype, M, N, K, beta): declared, with
 * its contract, in ss_ops.h (public: bench/forward times it beside sgemm). */

/* x packed once for several calls on the same rows. The panel kernels
 * transpose x's rows into panels before they run W against them; a
 * prefill's row block meets W's column blocks one call each (the CPU
 * backend's 256 x 256 calls: 14 for in_proj at the 130m shape), and packed
 * x again each time (pack_xt512, 5 % of an ss-encode's samples).
 *   ss_linear_rows_xpack_floats(M, K): floats of f32 that x's M rows of K
 *     take packed for the kernel ss_linear_rows_cpu chooses for M and K; 0
 *     where it packs nothing (few rows, the portable C kernel, M or K <= 0).
 *   ss_linear_rows_xpack(xp, x, ldx, M, K): writes them (xp: that many
 *     floats, any alignment; x: [M][K], row stride ldx).
 *   ss_linear_rows_cpu_xp(y, ldy, x, ldx, xp, ...): ss_linear_rows_cpu
 *     with xp, NULL or what ss_linear_rows_xpack wrote for these x, M and
 *     K (unchanged since, and $SS_GEMM read before the pack); the bits of
 *     ss_linear_rows_cpu (the same panels, packed elsewhere). x is still
 *     read: the last rows that fill no panel go through the transposing
 *     kernel. Errors as ss_linear_rows_cpu's.
 * ref: issue 50. */
int64_t ss_linear_rows_xpack_floats(int64_t M, int64_t K);
void ss_linear_rows_xpack(float *xp, const float *x, ptrdiff_t ldx, int64_t M, int64_t K);
int ss_linear_rows_cpu_xp(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *xp,
			  const void *W, ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K,
			  float beta);

/* The projections' kernels, as $SS_GEMM chooses them (read once, at the
 * first call; any other value, or none, is SS_GEMM_OWN):
 *   SS_GEMM_OWN  "own": ss_linear_rows_cpu with the CPU's best kernel
 *                (AVX-512, else AVX2+FMA, else C), prefill included, so a
 *                prefill is batch- and thread-invariant by default;
 *   SS_GEMM_AVX2 "avx2": the same without the AVX-512 kernels (what a host
 *                without AVX-512 runs; other bits than AVX-512's);
 *   SS_GEMM_C    "c": the portable C kernel only;
 *   SS_GEMM_BLAS "blas": prefill's projections through the BLAS (sgemm) as
 *                before it had its own: fewest and tallest calls, a
 *                sequence's bits depending on its batch and the threads
 *                unless the context is deterministic (256 x 256 calls).
 * ref: issue 50 (ours against sgemm: bench/forward). */
enum { SS_GEMM_OWN, SS_GEMM_AVX2, SS_GEMM_C, SS_GEMM_BLAS };
int ss_gemm_choice(void);

/* The vector width the forward pass's own CPU kernels may take, as the CPU
 * and $SS_GEMM allow: 2 AVX-512 (AVX2 and FMA with it), 1 AVX2+FMA (a host
 * without AVX-512, or SS_GEMM=avx2), 0 portable C (SS_GEMM=c, or neither).
 * One answer for the projections (linear_f32.c, which also needs F16C for
 * AVX2), the chunked scan's products (ssd.c) and vec.c's AVX-512 twins. */
int ss_gemm_isa(void);

#endif /* SS_LINEAR_F32_H */
