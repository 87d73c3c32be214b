/*
 * norm.cu — the twins (SS_CUDA_OPS) of ss_rmsnorm_cpu (RMSNorm with
 * residual add), ss_gated_rmsnorm_cpu (the gated grouped RMSNorm of the
 * mixer's output) and ss_gate_silu_cpu (Mamba-1's gate y = y · silu(z)).
 * One block per row (per row and group for the gated one); each thread
 * keeps to its own elements, so y may be h. The sums of squares are f32
 * tree reductions (the CPU sums in double).
 * ref: ss_rmsnorm_cpu, ss_gated_rmsnorm_cpu, ss_gate_silu_cpu
 *      (lib/forward/ops/norm.c); mamba_ssm ops/triton/layer_norm.py,
 *      layernorm_gated.py.
 */
#include "common.cuh"

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
