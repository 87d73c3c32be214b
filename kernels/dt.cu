/*
 * dt.cu — the twins (SS_CUDA_OPS) of ss_dt_softplus_cpu, dt =
 * softplus(raw + dt_bias) clamped, one thread per (row, head), and of
 * ss_dt_proj_cpu (Mamba-1's low-rank dt).
 * ref: ss_dt_softplus_cpu, ss_dt_proj_cpu (lib/forward/ops/dt.c).
 */
#include <math.h>

#include "common.cuh"

/* softplus with torch's threshold 20 (the identity above it) */
__device__ __forceinline__ float softplus20(float u)
{
	return u > 20.0f ? u : log1pf(expf(u));
}

__global__ void dt_kernel(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			  const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * nheads)
		return;
	const int64_t r = i / nheads;
	const int h = (int)(i % nheads);
	float v = softplus20(raw[r * ldr + h] + dt_bias[h]);
	if (isfinite(dt_max) && v > dt_max)
		v = dt_max;
	if (dt_min > 0.0f && v < dt_min)
		v = dt_min;
	dt[r * lddt + h] = v;
}

extern "C" void ss_dt_softplus_cuda(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
				    const float *dt_bias, int64_t n, int nheads, float dt_min,
				    float dt_max, cudaStream_t st)
{
	if (n <= 0 || nheads <= 0)
		return;
	dt_kernel<<<ss_cdiv(n * nheads, 256), 256, 0, st>>>(dt, lddt, raw, ldr, dt_bias, n, nheads,
							    dt_min, dt_max);
	SS_CUDA_LAUNCHED("dt_softplus");
}

/* Mamba-1's low-rank dt: one thread per (row, channel), the dt_rank sum in
 * order as on the CPU. */
__global__ void dt_proj_kernel(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl,
			       const float *W, const float *dt_bias, int64_t n, int d_inner,
			       int dt_rank)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * d_inner)
		return;
	const int64_t r = i / d_inner;
	const int d = (int)(i % d_inner);
	const float *w = W + (size_t)d * dt_rank, *l = low + r * ldl;
	float acc = 0.0f;
	for (int k = 0; k < dt_rank; k++)
		acc += w[k] * l[k];
	dt[r * lddt + d] = softplus20(acc + dt_bias[d]);
}

extern "C" void ss_dt_proj_cuda(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl,
				const float *W, const float *dt_bias, int64_t n, int d_inner,
				int dt_rank, cudaStream_t st)
{
	if (n <= 0 || d_inner <= 0)
		return;
	dt_proj_kernel<<<ss_cdiv(n * d_inner, 256), 256, 0, st>>>(dt, lddt, low, ldl, W, dt_bias, n,
								  d_inner, dt_rank);
	SS_CUDA_LAUNCHED("dt_proj");
}
