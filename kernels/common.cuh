/*
 * common.cuh — what every kernel file of the CUDA plugin shares: the
 * declarations of the op twins, the error record behind
 * ss_cuda_api.last_error, launch checks, dtype loads, warp and block
 * reductions. Internal to the plugin (kernels/), never installed.
 */
#ifndef SS_KERNELS_COMMON_CUH
#define SS_KERNELS_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "forward/device_plugin.h"

/* The op twins ss_<op>_cuda, one declaration per entry of SS_CUDA_OPS
 * (device_plugin.h gives the arguments; ss_ops.h the contract of each CPU
 * twin, kernels/<file>.cu what differs on the GPU). ss_cuda_stream is
 * cudaStream_t. */
#define SS_CUDA_DECLARE_(op, ret, params) extern "C" ret ss_##op##_cuda params;
SS_CUDA_OPS(SS_CUDA_DECLARE_)
#undef SS_CUDA_DECLARE_

/* Records a CUDA error for last_error() (plugin.cu); returns SS_ERR_DEVICE,
 * or 0 for cudaSuccess. `what` names the call. */
int ss_cuda_note(cudaError_t e, const char *what);
/* Records a message (cuBLAS status, a refused argument). */
void ss_cuda_note_msg(const char *what, const char *detail);
const char *ss_cuda_last_error(void);

/* Checks the launch just made (configuration errors show here; faults show
 * at the next sync). */
#define SS_CUDA_LAUNCHED(what) ss_cuda_note(cudaGetLastError(), what)

static inline unsigned ss_cdiv(int64_t a, int64_t b)
{
	return (unsigned)((a + b - 1) / b);
}

/* Element i of a weight array in dtype t, widened to f32. */
__device__ __forceinline__ float ss_ld(const void *p, ss_dtype t, int64_t i)
{
	if (t == SS_DTYPE_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	if (t == SS_DTYPE_F16)
		return __half2float(((const __half *)p)[i]);
	return ((const float *)p)[i];
}

__device__ __forceinline__ float ss_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. `sh` is 32 floats of shared memory. */
__device__ __forceinline__ float ss_block_sum(float v, float *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	v = ss_warp_sum(v);
	__syncthreads(); /* sh may still be read from a previous call */
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0f;
	return ss_warp_sum(v);
}

__device__ __forceinline__ float ss_silu(float x)
{
	return x / (1.0f + expf(-x));
}

#endif /* SS_KERNELS_COMMON_CUH */
