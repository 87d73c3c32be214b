/*
 * dt.cu — dt = softplus(raw + dt_bias), clamped: one thread per (row, head).
 * ref: ss_dt_softplus_cpu (lib/ops/dt.c).
 */
#include <math.h>

#include "dt.cuh"

__global__ void dt_kernel(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			  const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * nheads)
		return;
	const int64_t r = i / nheads;
	const int h = (int)(i % nheads);
	const float u = raw[r * ldr + h] + dt_bias[h];
	float v = u > 20.0f ? u : log1pf(expf(u));
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
