/*
 * ops/linear.h — the linear op with 16-bit weights (internal to libss; behind
 * ss_linear_cpu): y[m][n] = W[n]·x[m] + beta·y[m][n], W in bf16 or f16,
 * x, y and the accumulation in f32. Decode (M = 1) streams W once, so its
 * speed is the bytes of W per second: half those of f32 weights.
 * AVX2+FMA+F16C when the CPU has it (the build targets baseline x86-64-v2),
 * else portable C.
 */
#ifndef SS_MATVEC_H
#define SS_MATVEC_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/*   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx.
 *   W: [N][K] row-major, dtype wt (SS_DTYPE_BF16 or SS_DTYPE_F16), any
 *      alignment of 2 bytes.
 * Each y[m][n] is the same sum whatever M, N and the slice of W a caller
 * passes (the order of the K products depends on K only), so that cutting
 * the rows or columns over threads never changes a result.
 * ref: the f32 path, cblas_sgemv / cblas_sgemm (ss_linear_cpu). */
void ss_matvec_w16(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		   ss_dtype wt, int64_t M, int64_t N, int64_t K, float beta);

/* ss_to_f32 of weights (2-byte aligned): dst[n] = src[n] widened from wt,
 * vectorised. For the forward pass's panels of W (prefill). */
void ss_matvec_widen(float *dst, const void *src, ss_dtype wt, size_t n);

#endif /* SS_MATVEC_H */
