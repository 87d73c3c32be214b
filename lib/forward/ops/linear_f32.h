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
 *   - AVX2+FMA: an 8-lane chain over k, the lanes reduced in one fixed
 *     order and the K % 8 tail added last, in register tiles of up to 2 x 4
 *     outputs that read W once per 64 rows;
 *   - portable C: one chain over k, multiply then add.
 * $SS_GEMM (ss_gemm_choice below) can hold it to AVX2 or C.
 * A GEMM's weight reuse with a GEMV's per-row result.
 */
#ifndef SS_LINEAR_F32_H
#define SS_LINEAR_F32_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/*   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx.
 *   W: [N][K] row-major (the nn.Linear weight layout) in wt: SS_DTYPE_F32,
 *      SS_DTYPE_BF16 or SS_DTYPE_F16, aligned to its element size.
 * Each y[m][n] is the same bits whatever M, N, the row's place and the slice
 * of W a caller passes (the order depends on the CPU's kernel only),
 * so cutting rows or columns over threads, or batching rows, never changes
 * a result; and W in bf16 or f16 gives the bits of the f32 call on W
 * widened. Returns 0, SS_ERR_INVALID (negative sizes, ldy < N, ldx < K),
 * SS_ERR_UNSUPPORTED (another wt).
 * ref: the f32 path of ss_linear_cpu (cblas_sgemv / cblas_sgemm), which it
 *      matches to rounding; ops/linear.h ss_matvec_w16 (the same property
 *      for 16-bit weights, one row at a time). */
int ss_linear_rows_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		       ss_dtype wt, int64_t M, int64_t N, int64_t K, float beta);

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

#endif /* SS_LINEAR_F32_H */
