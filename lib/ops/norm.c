/*
 * norm.c — RMSNorm (with the residual add) and the gated grouped RMSNorm on
 * the CPU, ss_rmsnorm_cpu and ss_gated_rmsnorm_cpu, and Mamba-1's plain gate
 * ss_gate_silu_cpu (ss_ops.h).
 * Twin: kernels/norm.cu. The elementwise loops go through vec.c.
 */
#include <math.h>

#include "ss.h"
#include "vec.h"

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
