/*
 * vec.h — elementwise kernels of the forward pass (internal to libss).
 * Each has a portable C body and an AVX2+FMA body chosen at run time (the
 * build targets baseline x86-64). Arrays are f32, any alignment; n >= 0.
 */
#ifndef SS_VEC_H
#define SS_VEC_H

#include <stdint.h>

/* x[i] = silu(x[i]) = x / (1 + exp(-x)) */
void ss_vec_silu(float *x, int64_t n);
/* y[i] *= silu(z[i]) */
void ss_vec_mul_silu(float *y, const float *z, int64_t n);
/* y[i] += w[i] * x[i] */
void ss_vec_fma(float *y, const float *w, const float *x, int64_t n);
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

#endif /* SS_VEC_H */
