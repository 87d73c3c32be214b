/*
 * dt.c — dt = softplus(raw + dt_bias), clamped, on the CPU,
 * ss_dt_softplus_cpu (ss_ops.h), and its backward ss_dt_softplus_backward_cpu;
 * Mamba-1's low-rank dt = softplus(dt_proj(dt_low) + dt_bias),
 * ss_dt_proj_cpu. The forwards' twins: kernels/dt.cu (the backward has
 * none: training is CPU only).
 */
#include <math.h>

#include "ss.h"
#include "forward/vec.h"

/* torch.nn.functional.softplus with its default threshold 20. */
static inline float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

void ss_dt_softplus_cpu(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max)
{
	const int clamp_hi = isfinite(dt_max), clamp_lo = dt_min > 0.0f;
	int64_t r;
	int h;

	for (r = 0; r < n; r++)
		for (h = 0; h < nheads; h++) {
			float v = softplus(raw[r * ldr + h] + dt_bias[h]);
			if (clamp_hi && v > dt_max)
				v = dt_max;
			if (clamp_lo && v < dt_min)
				v = dt_min;
			dt[r * lddt + h] = v;
		}
}

/* The low-rank product through the linear op (sgemm), then softplus(. +
 * bias) row by row (vec.c). */
void ss_dt_proj_cpu(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl, const float *W,
		    const float *dt_bias, int64_t n, int d_inner, int dt_rank)
{
	if (n <= 0 || d_inner <= 0)
		return;
	/* sizes are the caller's: cannot fail */
	(void)ss_linear_cpu(dt, lddt, low, ldl, W, SS_DTYPE_F32, n, d_inner, dt_rank, 0.0f);
	for (int64_t r = 0; r < n; r++)
		ss_vec_softplus_bias(dt + r * lddt, dt_bias, d_inner);
}

/* softplus'(x) = σ(x), 1 above the threshold where softplus is the identity;
 * 0 where the clamp held the value. */
void ss_dt_softplus_backward_cpu(const float *ddt, ptrdiff_t lddt, const float *raw,
				 float *draw, ptrdiff_t ldr, const float *dt_bias, float *ddt_bias,
				 int64_t n, int nheads, float dt_min, float dt_max)
{
	const int clamp_hi = isfinite(dt_max), clamp_lo = dt_min > 0.0f;
	int64_t r;
	int h;

	for (r = 0; r < n; r++)
		for (h = 0; h < nheads; h++) {
			const float u = raw[r * ldr + h] + dt_bias[h], v = softplus(u);
			float g;
			if ((clamp_hi && v > dt_max) || (clamp_lo && v < dt_min))
				continue;
			g = ddt[r * lddt + h] * (u > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-u)));
			if (draw)
				draw[r * ldr + h] += g;
			if (ddt_bias)
				ddt_bias[h] += g;
		}
}
