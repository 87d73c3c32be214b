/*
 * norm.c — RMSNorm (with the residual add) and the gated grouped RMSNorm on
 * the CPU, ss_rmsnorm_cpu and ss_gated_rmsnorm_cpu (ss_ops.h), each with its
 * backward below it, and Mamba-1's plain gate ss_gate_silu_cpu.
 * The forwards' twins: kernels/norm.cu (the backwards have none: training
 * is CPU only). The forwards' elementwise loops go through vec.c; the
 * backwards are plain loops with the row sums in double.
 */
#include <math.h>

#include "ss.h"
#include "forward/vec.h"

/* y = x / sqrt(mean(x²) + eps) · w, the sum of squares in double as ggml does. */
static void rmsnorm_row(float *y, const float *x, const float *w, int n, float eps)
{
	const float scale = 1.0f / sqrtf((float)(ss_vec_sumsq(x, n) / n) + eps);
	ss_vec_scale_mul(y, x, scale, w, n);
}

void ss_rmsnorm_cpu(float *y, float *h, const float *res, const float *w, int64_t n, int d,
		    float eps)
{
	int64_t r;
	int i;

	for (r = 0; r < n; r++) {
		float *hr = h + r * d;
		if (res) {
			const float *rr = res + r * d;
			for (i = 0; i < d; i++)
				hr[i] += rr[i];
		}
		rmsnorm_row(y + r * d, hr, w, d, eps);
	}
}

/* The backward of y = x·r·w, r = 1/sqrt(mean(x²) + eps), over one row of
 * n: dx += r·(dy∘w) − x·r³/n·Σ(dy∘w∘x); dw += dy∘x·r (dw may be NULL).
 * r is computed as the forward computes it (the sum of squares in double). */
static void rmsnorm_row_backward(float *dx, float *dw, const float *dy, const float *x,
				 const float *w, int n, float eps)
{
	const float r = 1.0f / sqrtf((float)(ss_vec_sumsq(x, n) / n) + eps);
	double dot = 0.0;
	float c;
	int i;

	for (i = 0; i < n; i++)
		dot += (double)dy[i] * w[i] * x[i];
	c = (float)(dot * r * r * r / n);
	for (i = 0; i < n; i++) {
		dx[i] += r * dy[i] * w[i] - c * x[i];
		if (dw)
			dw[i] += dy[i] * x[i] * r;
	}
}

void ss_rmsnorm_backward_cpu(const float *dy, const float *h, float *dh, const float *w,
			     float *dw, int64_t n, int d, float eps)
{
	int64_t r;

	for (r = 0; r < n; r++)
		rmsnorm_row_backward(dh + r * d, dw, dy + r * d, h + r * d, w, d, eps);
}

void ss_gated_rmsnorm_cpu(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
			  const float *w, int64_t n, int d, int ngroups, float eps)
{
	const int gs = d / ngroups;
	int64_t r;
	int g;

	for (r = 0; r < n; r++) {
		float *yr = y + r * ldy;
		ss_vec_mul_silu(yr, z + r * ldz, d);
		for (g = 0; g < ngroups; g++)
			rmsnorm_row(yr + g * gs, yr + g * gs, w + g * gs, gs, eps);
	}
}

void ss_gate_silu_cpu(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz, int64_t n, int d)
{
	for (int64_t r = 0; r < n; r++)
		ss_vec_mul_silu(y + r * ldy, z + r * ldz, d);
}

/* silu(z) = z·σ(z);  silu'(z) = σ(z)·(1 + z·(1 − σ(z))). */
static inline float sigmoid(float z)
{
	return 1.0f / (1.0f + expf(-z));
}

void ss_gated_rmsnorm_backward_cpu(const float *y, float *dy, ptrdiff_t ldy, const float *z,
				   float *dz, ptrdiff_t ldz, const float *w, float *dw, int64_t n,
				   int d, int ngroups, float eps)
{
	const int gs = d / ngroups;
	int64_t r;
	int g, i;

	for (r = 0; r < n; r++) {
		const float *yr = y + r * ldy, *zr = z + r * ldz;
		float *dyr = dy + r * ldy, *dzr = dz ? dz + r * ldz : NULL;
		for (g = 0; g < ngroups; g++) {
			const int c0 = g * gs;
			double ss = 0.0, dot = 0.0;
			float rs, c;
			/* u = y·silu(z), recomputed; the group's sums first, since
			 * the gradient of the output is overwritten in place */
			for (i = c0; i < c0 + gs; i++) {
				const float u = yr[i] * zr[i] * sigmoid(zr[i]);
				ss += (double)u * u;
				dot += (double)dyr[i] * w[i] * u;
			}
			rs = 1.0f / sqrtf((float)(ss / gs) + eps);
			c = (float)(dot * rs * rs * rs / gs);
			for (i = c0; i < c0 + gs; i++) {
				const float s = sigmoid(zr[i]), u = yr[i] * zr[i] * s;
				const float du = rs * dyr[i] * w[i] - c * u;
				if (dw)
					dw[i] += dyr[i] * u * rs;
				if (dzr)
					dzr[i] += du * yr[i] * s * (1.0f + zr[i] * (1.0f - s));
				dyr[i] = du * zr[i] * s;
			}
		}
	}
}
