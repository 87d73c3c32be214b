/*
 * norm.cu — RMSNorm with residual add, and the gated grouped RMSNorm of the
 * mixer's output. One block per row (per row and group for the gated one);
 * each thread keeps to its own elements, so y may be h.
 * ref: ss_rmsnorm_cpu, ss_gated_rmsnorm_cpu (lib/forward/ops/norm.c);
 *      mamba_ssm ops/triton/layer_norm.py, layernorm_gated.py.
 */
#include "norm.cuh"

#define NORM_THREADS 256

__global__ void rmsnorm_kernel(float *y, float *h, const float *res, const float *w, int d,
			       float eps)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	float *hr = h + r * d;
	float ss = 0.0f;

	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		float v = hr[i];
		if (res) {
			v += res[r * d + i];
			hr[i] = v;
		}
		ss += v * v;
	}
	ss = ss_block_sum(ss, sh);
	const float scale = rsqrtf(ss / (float)d + eps);
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		y[r * d + i] = hr[i] * scale * w[i];
}

extern "C" void ss_rmsnorm_cuda(float *y, float *h, const float *res, const float *w, int64_t n,
				int d, float eps, cudaStream_t st)
{
	if (n <= 0)
		return;
	rmsnorm_kernel<<<(unsigned)n, NORM_THREADS, 0, st>>>(y, h, res, w, d, eps);
	SS_CUDA_LAUNCHED("rmsnorm");
}

/* grid (rows, groups) */
__global__ void gated_rmsnorm_kernel(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				     const float *w, int gs, float eps)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const int g0 = blockIdx.y * gs;
	float *yr = y + r * ldy + g0;
	const float *zr = z + r * ldz + g0;
	float ss = 0.0f;

	for (int i = threadIdx.x; i < gs; i += blockDim.x) {
		const float v = yr[i] * ss_silu(zr[i]);
		yr[i] = v;
		ss += v * v;
	}
	ss = ss_block_sum(ss, sh);
	const float scale = rsqrtf(ss / (float)gs + eps);
	for (int i = threadIdx.x; i < gs; i += blockDim.x)
		yr[i] = yr[i] * scale * w[g0 + i];
}

extern "C" void ss_gated_rmsnorm_cuda(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				      const float *w, int64_t n, int d, int ngroups, float eps,
				      cudaStream_t st)
{
	if (n <= 0 || ngroups <= 0)
		return;
	gated_rmsnorm_kernel<<<dim3((unsigned)n, (unsigned)ngroups), NORM_THREADS, 0, st>>>(
		y, ldy, z, ldz, w, d / ngroups, eps);
	SS_CUDA_LAUNCHED("gated_rmsnorm");
}

/* Mamba-1's gate: one thread per element. */
__global__ void gate_silu_kernel(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				 int64_t n, int d)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * d)
		return;
	const int64_t r = i / d;
	const int c = (int)(i % d);
	const float zv = z[r * ldz + c];
	y[r * ldy + c] *= zv / (1.0f + expf(-zv));
}

extern "C" void ss_gate_silu_cuda(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				  int64_t n, int d, cudaStream_t st)
{
	if (n <= 0 || d <= 0)
		return;
	gate_silu_kernel<<<ss_cdiv(n * d, 256), 256, 0, st>>>(y, ldy, z, ldz, n, d);
	SS_CUDA_LAUNCHED("gate_silu");
}

/* Backward of rmsnorm_kernel: one block per row, the two row sums (Σh²,
 * Σdy·w·h) as tree reductions; dw gathers every row's dy·h·r by atomicAdd. */
__global__ void rmsnorm_backward_kernel(const float *dy, const float *h, float *dh,
					const float *w, float *dw, int d, float eps)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const float *hr = h + r * d, *dyr = dy + r * d;
	float ss = 0.0f, dot = 0.0f;

	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		ss += hr[i] * hr[i];
		dot += dyr[i] * w[i] * hr[i];
	}
	ss = ss_block_sum(ss, sh);
	dot = ss_block_sum(dot, sh);
	const float rs = rsqrtf(ss / (float)d + eps);
	const float c = dot * rs * rs * rs / (float)d;
	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		dh[r * d + i] += rs * dyr[i] * w[i] - c * hr[i];
		if (dw)
			atomicAdd(dw + i, dyr[i] * hr[i] * rs);
	}
}

extern "C" void ss_rmsnorm_backward_cuda(const float *dy, const float *h, float *dh,
					 const float *w, float *dw, int64_t n, int d, float eps,
					 cudaStream_t st)
{
	if (n <= 0 || d <= 0)
		return;
	rmsnorm_backward_kernel<<<(unsigned)n, NORM_THREADS, 0, st>>>(dy, h, dh, w, dw, d, eps);
	SS_CUDA_LAUNCHED("rmsnorm_backward");
}

/* Backward of gated_rmsnorm_kernel, grid (rows, groups): the group's sums
 * of the recomputed u = y·silu(z) first, then each thread turns its own
 * elements of dy into y's gradient (in place is then safe). */
__global__ void gated_rmsnorm_backward_kernel(const float *y, float *dy, ptrdiff_t ldy,
					      const float *z, float *dz, ptrdiff_t ldz,
					      const float *w, float *dw, int gs, float eps)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const int g0 = blockIdx.y * gs;
	const float *yr = y + r * ldy + g0, *zr = z + r * ldz + g0;
	float *dyr = dy + r * ldy + g0;
	float ss = 0.0f, dot = 0.0f;

	for (int i = threadIdx.x; i < gs; i += blockDim.x) {
		const float u = yr[i] * ss_silu(zr[i]);
		ss += u * u;
		dot += dyr[i] * w[g0 + i] * u;
	}
	ss = ss_block_sum(ss, sh);
	dot = ss_block_sum(dot, sh);
	const float rs = rsqrtf(ss / (float)gs + eps);
	const float c = dot * rs * rs * rs / (float)gs;
	for (int i = threadIdx.x; i < gs; i += blockDim.x) {
		const float zv = zr[i], s = ss_sigmoid(zv), u = yr[i] * zv * s;
		const float du = rs * dyr[i] * w[g0 + i] - c * u;
		if (dw)
			atomicAdd(dw + g0 + i, dyr[i] * u * rs);
		if (dz)
			dz[r * ldz + g0 + i] += du * yr[i] * s * (1.0f + zv * (1.0f - s));
		dyr[i] = du * zv * s;
	}
}

extern "C" void ss_gated_rmsnorm_backward_cuda(const float *y, float *dy, ptrdiff_t ldy,
					       const float *z, float *dz, ptrdiff_t ldz,
					       const float *w, float *dw, int64_t n, int d,
					       int ngroups, float eps, cudaStream_t st)
{
	if (n <= 0 || ngroups <= 0 || d <= 0)
		return;
	gated_rmsnorm_backward_kernel<<<dim3((unsigned)n, (unsigned)ngroups), NORM_THREADS, 0,
					st>>>(y, dy, ldy, z, dz, ldz, w, dw, d / ngroups, eps);
	SS_CUDA_LAUNCHED("gated_rmsnorm_backward");
}
