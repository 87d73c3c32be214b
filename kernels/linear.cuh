/* linear.cuh — the cuBLAS handle of ss_linear_cuda (kernels/linear.cu;
 * declared from SS_CUDA_OPS in common.cuh), the twin of ss_linear_cpu
 * (ss_ops.h): y[M][N] = x[M][K]·W[N][K]ᵀ + beta·y through cuBLAS, with a
 * handle and scratch first.
 * f32 W: cublasSgemm (no TF32). bf16/f16 W: x is rounded to W's dtype into
 * the handle's scratch, then cublasGemmEx with f32 accumulation and f32 y.
 * Returns 0, SS_ERR_INVALID, SS_ERR_DEVICE (cuBLAS status in last_error). */
#pragma once
#include <cublas_v2.h>

#include "common.cuh"

struct ss_cuda_blas {
	cublasHandle_t h;
	cudaStream_t st;
	void *scratch;  /* x in W's dtype */
	size_t cap;     /* bytes */
};

/* A handle on stream st. scratch_bytes pre-sizes the scratch (a growth is a
 * cudaMalloc, which a CUDA graph capture cannot contain). NULL on error. */
extern "C" ss_cuda_blas *ss_cuda_blas_create(cudaStream_t st, size_t scratch_bytes);
extern "C" void ss_cuda_blas_free(ss_cuda_blas *b);
/* Rounds n f32 values to dtype t (bf16/f16) on stream st: dst[i] = src[i]. */
extern "C" void ss_cuda_convert(void *dst, ss_dtype t, const float *src, int64_t n,
				cudaStream_t st);
/* Best seconds of `reps` linears of shape (M, N, K) with W in weights_dtype (random
 * data), after warm-up; < 0 on error. */
extern "C" double ss_cuda_bench_linear(int64_t M, int64_t N, int64_t K, ss_dtype weights_dtype,
				       int reps);
