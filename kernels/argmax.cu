/* argmax.cu — the twin (SS_CUDA_OPS) of ss_argmax_rows_cpu, greedy
 * sampling as a block reduction per row: ids[r] = the first index of the
 * largest logit of row r over [0, n), NaN never wins, -1 for an all-NaN
 * row. logits: [nrows][n], row stride ld; device pointers.
 * ref: ss_argmax (lib/sample/sample.c). */
#include <math.h>

#include "common.cuh"

#define ARGMAX_THREADS 512

/* (v, i) beats (bv, bi): a valid index, a larger value, or the same value
 * at a smaller index. i < 0 means none. */
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi)
{
	if (i < 0)
		return false;
	if (bi < 0)
		return true;
	return v > bv || (v == bv && i < bi);
}

__global__ void argmax_kernel(int32_t *ids, const float *logits, ptrdiff_t ld, int64_t n)
{
	__shared__ float sv[ARGMAX_THREADS];
	__shared__ int64_t si[ARGMAX_THREADS];
	const float *x = logits + (int64_t)blockIdx.x * ld;
	float bv = 0.0f;
	int64_t bi = -1;

	for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
		const float v = x[i];
		if (!isnan(v) && better(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	sv[threadIdx.x] = bv;
	si[threadIdx.x] = bi;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s &&
		    better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
			sv[threadIdx.x] = sv[threadIdx.x + s];
			si[threadIdx.x] = si[threadIdx.x + s];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		ids[blockIdx.x] = (int32_t)si[0];
}

extern "C" void ss_argmax_rows_cuda(int32_t *ids, const float *logits, ptrdiff_t ld,
				    int64_t nrows, int64_t n, cudaStream_t st)
{
	if (nrows <= 0)
		return;
	argmax_kernel<<<(unsigned)nrows, ARGMAX_THREADS, 0, st>>>(ids, logits, ld, n);
	SS_CUDA_LAUNCHED("argmax_rows");
}
