/*
 * ops/linear.h — the linear op with 16-bit or q8_0 weights (internal to
 * libss; behind ss_linear_cpu): y[m][n] = W[n]·x[m] + beta·y[m][n], W in
 * bf16, f16 or q8_0, x, y and the accumulation in f32. Decode (M = 1)
 * streams W once, so its speed is the bytes of W per second: half those of
 * f32 weights in 16 bits, 34/128 of them in q8_0.
 * AVX2+FMA+F16C when the CPU has it (the build targets baseline x86-64-v2;
 * q8_0: AVX-512 VNNI before AVX2), else portable C.
 */
#ifndef SS_MATVEC_H
#define SS_MATVEC_H

#include <stddef.h>
#include <stdint.h>

#include "ss.h"

/*   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx.
 *   W: [N][K] row-major, dtype weights_dtype (SS_DTYPE_BF16 or SS_DTYPE_F16), any
 *      alignment of 2 bytes.
 * Each y[m][n] is the same sum whatever M, N and the slice of W a caller
 * passes (the order of the K products depends on K only), so that cutting
 * the rows or columns over threads never changes a result.
 * ref: the f32 path, cblas_sgemv / cblas_sgemm (ss_linear_cpu). */
void ss_matvec_w16(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		   ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta);

/*   y: [M][N] f32, row stride ldy (read only when beta != 0).
 *   x: [M][K] f32, row stride ldx; quantized inside, per row, to q8_0
 *      (ss_from_f32), as ggml quantizes activations for its q8_0 dot
 *      product.
 *   W: [N][K] q8_0 (ss.h SS_DTYPE_Q8_0): N rows of K/32 blocks of 34 bytes,
 *      any alignment; K a multiple of 32 and <= SS_Q8_0_ROW_MAX (ss.h; x's
 *      rows are quantized into a stack buffer for that many elements, 34
 *      KB; the caller's checks: ss_linear_cpu).
 * Each y[m][n] is the same bits whatever M, N, the slice of W and the CPU's
 * instruction set (ops/q8_0.c: exact int32 block sums, one fixed order of
 * the f32 sums). Error against the product of x and W dequantized: that of
 * x's quantization, at most Σ_b (d_b/2 + 127·|d_b - f16(d_b)|)·Σ_{k in b}
 * |w_k| with d_b = max_{k in b} |x_k|/127, plus f32 rounding.
 * ref: ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_q8_0_q8_0. */
void ss_matvec_q8_0(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		    int64_t M, int64_t N, int64_t K, float beta);

/* Test only (tests/test_q8_0.c): makes ss_matvec_q8_0 use kernel k from now
 * on (ss_linear_q8_0_cpu too), in every thread: 0 portable C, 1 AVX2, 2 AVX-512 VNNI, -1 the CPU's
 * best (the default). Returns 0, or -1 (nothing changed) where this CPU or
 * build lacks kernel k. Not thread-safe against running products. */
int ss_q8_0_force_kernel(int k);

/* ss_to_f32 of weights (bf16/f16: 2-byte aligned; q8_0: src at a block's
 * start, any alignment): dst[n] = src[n] widened from weights_dtype, vectorised. For
 * the forward pass's panels of W (prefill); a row of W in weights_dtype is
 * ss_dtype_row_size(weights_dtype, K) bytes. */
void ss_matvec_widen(float *dst, const void *src, ss_dtype weights_dtype, size_t n);

#endif /* SS_MATVEC_H */
