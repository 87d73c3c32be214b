/*
 * vec.h — elementwise kernels of the forward pass (internal to libss).
 * Each has a portable C body and an AVX2+FMA body chosen at run time (the
 * build targets x86-64-v2, config.mk's CFLAGS, which has no AVX2);
 * ss_vec_mul_silu and ss_vec_conv_silu also an AVX-512 one with the AVX2
 * body's bits (taken unless $SS_GEMM holds the kernels to AVX2 or C:
 * ops/linear_f32.h). Arrays are f32, any alignment; n >= 0.
 */
#ifndef SS_VEC_H
#define SS_VEC_H

#include <stddef.h>
#include <stdint.h>

/* x[i] = silu(x[i]) = x / (1 + exp(-x)) */
void ss_vec_silu(float *x, int64_t n);
/* y[i] *= silu(z[i]) */
void ss_vec_mul_silu(float *y, const float *z, int64_t n);
/* y[i] += w[i] * x[i] */
void ss_vec_fma(float *y, const float *w, const float *x, int64_t n);
/* The causal conv + silu's rows whose taps all lie in x: y[t][c] =
 * silu(b[c] + Σ_{k<K} w[k][c]·x[t+k][c]), t < n, c < nch (x at the first
 * tap of row 0; row strides ldy, ldx, ldw): the taps added in order, as
 * ss_vec_fma adds them one row at a time, then ss_vec_silu's silu (their
 * bits), row after row, the inputs prefetched a few rows ahead. */
void ss_vec_conv_silu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *w,
		      ptrdiff_t ldw, const float *b, int64_t n, int nch, int K);
/* Σ x[i]², accumulated in double (as ggml's rms_norm does) */
double ss_vec_sumsq(const float *x, int64_t n);
/* y[i] = x[i] * s * w[i]  (y may be x) */
void ss_vec_scale_mul(float *y, const float *x, float s, const float *w, int64_t n);
/* y[i] = x[i] * s  (y may be x) */
void ss_vec_scale(float *y, const float *x, float s, int64_t n);
/* y[i] = a * y[i] + b * x[i]  (one rounding for the sum: fmaf) */
void ss_vec_axpby(float *y, float a, const float *x, float b, int64_t n);
/* max x[i] (n >= 1) */
float ss_vec_max(const float *x, int64_t n);
/* Σ exp(x[i] - m) in double (a softmax's denominator, m >= every x[i]) */
double ss_vec_sumexp(const float *x, float m, int64_t n);
/* y[i] += a * exp(x[i] - m) */
void ss_vec_add_exp(float *y, const float *x, float m, float a, int64_t n);

/* y[i] = softplus(y[i] + b[i]) = log(1 + exp(y[i] + b[i])) (torch's, to
 * f32 precision: the AVX2 body as max(u,0) + log1p(exp(-|u|)) by a series,
 * the C body with torch's threshold 20). */
void ss_vec_softplus_bias(float *y, const float *b, int64_t n);
/* Mamba-1's selective scan of 8 consecutive channels over n tokens (the
 * math of ss_ssm1_scan_cpu), the channels in the vector lanes:
 *   s[k][c] = exp(dt[t][c]·A[k][c]) · s[k][c] + B[t][k] · dt[t][c] · x[t][c]
 *   y[t][c] = Σ_k s[k][c] · C[t][k] + D[c] · x[t][c]
 * s: in/out [N][8]; A: [N][8] (-exp(A_log), transposed); x, dt, y: rows at
 * strides ldx, lddt, ldy (their first 8 channels); BC: rows at stride ldbc,
 * B [N] then C [N]; D: [8] or NULL; y may be NULL. exp as vec.c's AVX2 exp
 * (inputs clamped to >= -87.3) or expf. */
void ss_vec_scan1_x8(float *s, const float *A, int N, int64_t n, const float *x, ptrdiff_t ldx,
		     const float *dt, ptrdiff_t lddt, const float *BC, ptrdiff_t ldbc, const float *D,
		     float *y, ptrdiff_t ldy);

#endif /* SS_VEC_H */
