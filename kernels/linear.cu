/*
 * linear.cu — the projections (in_proj, out_proj, lm_head) through cuBLAS.
 *
 * Row-major y[M][N] = x[M][K]·W[N][K]ᵀ is, in cuBLAS's column-major terms,
 * yᵀ (N×M, ld ldy) = Wᵀ-as-stored (op T on the K×N matrix W, ld K) · xᵀ
 * (K×M, ld ldx): one GEMM with no copies.
 * ref: ss_linear_cpu (lib/forward/ops/linear.c); cuBLAS cublasGemmEx (CUDA_R_16BF inputs,
 *      CUBLAS_COMPUTE_32F).
 */
#include <stdio.h>

#include "linear.cuh"

static int blas_note(cublasStatus_t s, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	ss_cuda_note_msg(what, cublasGetStatusString(s));
	return SS_ERR_DEVICE;
}

__global__ void convert_kernel(void *dst, ss_dtype t, const float *src, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	if (t == SS_DTYPE_BF16)
		((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
	else
		((__half *)dst)[i] = __float2half_rn(src[i]);
}

/* rows of x (stride ldx) → contiguous [M][K] in dtype t */
__global__ void convert_rows_kernel(void *dst, ss_dtype t, const float *x, ptrdiff_t ldx,
				    int64_t M, int64_t K)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= M * K)
		return;
	const float v = x[(i / K) * ldx + i % K];
	if (t == SS_DTYPE_BF16)
		((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
	else
		((__half *)dst)[i] = __float2half_rn(v);
}

extern "C" void ss_cuda_convert(void *dst, ss_dtype t, const float *src, int64_t n,
				cudaStream_t st)
{
	if (n <= 0)
		return;
	convert_kernel<<<ss_cdiv(n, 256), 256, 0, st>>>(dst, t, src, n);
	SS_CUDA_LAUNCHED("convert");
}

extern "C" ss_cuda_blas *ss_cuda_blas_create(cudaStream_t st, size_t scratch_bytes)
{
	ss_cuda_blas *b = (ss_cuda_blas *)calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	if (blas_note(cublasCreate(&b->h), "cublasCreate")) {
		free(b);
		return NULL;
	}
	b->st = st;
	if (blas_note(cublasSetStream(b->h, st), "cublasSetStream") ||
	    (scratch_bytes &&
	     ss_cuda_note(cudaMalloc(&b->scratch, scratch_bytes), "linear scratch"))) {
		ss_cuda_blas_free(b);
		return NULL;
	}
	b->cap = scratch_bytes;
	return b;
}

extern "C" void ss_cuda_blas_free(ss_cuda_blas *b)
{
	if (!b)
		return;
	if (b->h)
		cublasDestroy(b->h);
	cudaFree(b->scratch);
	free(b);
}

extern "C" int ss_linear_cuda(ss_cuda_blas *b, float *y, ptrdiff_t ldy, const float *x,
			      ptrdiff_t ldx, const void *W, ss_dtype weights_dtype, int64_t M,
			      int64_t N, int64_t K, float beta)
{
	const float alpha = 1.0f;
	cudaDataType_t ht;

	if (!b || M < 0 || N < 0 || K < 0 || ldy < N || ldx < K || M > INT32_MAX ||
	    N > INT32_MAX || K > INT32_MAX) {
		ss_cuda_note_msg("linear", "bad arguments");
		return SS_ERR_INVALID;
	}
	if (M == 0 || N == 0)
		return 0;
	if (weights_dtype == SS_DTYPE_F32)
		return blas_note(cublasSgemm(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K,
					     &alpha, (const float *)W, (int)K, x, (int)ldx, &beta, y,
					     (int)ldy),
				 "cublasSgemm");
	if (weights_dtype != SS_DTYPE_BF16 && weights_dtype != SS_DTYPE_F16) {
		ss_cuda_note_msg("linear", "unsupported weight dtype");
		return SS_ERR_UNSUPPORTED;
	}
	ht = weights_dtype == SS_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
	const size_t need = (size_t)M * (size_t)K * 2;
	if (need > b->cap) {
		void *p;
		cudaStreamSynchronize(b->st);
		if (ss_cuda_note(cudaMalloc(&p, need), "linear scratch"))
			return SS_ERR_DEVICE;
		cudaFree(b->scratch);
		b->scratch = p;
		b->cap = need;
	}
	convert_rows_kernel<<<ss_cdiv(M * K, 256), 256, 0, b->st>>>(b->scratch, weights_dtype, x,
								    ldx, M, K);
	if (SS_CUDA_LAUNCHED("linear convert"))
		return SS_ERR_DEVICE;
	return blas_note(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
				      W, ht, (int)K, b->scratch, ht, (int)K, &beta, y, CUDA_R_32F,
				      (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			 "cublasGemmEx");
}

/* deterministic pseudo-random fill in [-1, 1) */
__global__ void fill_kernel(float *p, int64_t n, uint32_t seed)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	uint32_t z = (uint32_t)i * 2654435761u ^ seed;
	z ^= z >> 16;
	z *= 0x7feb352du;
	z ^= z >> 15;
	p[i] = (float)(z >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

extern "C" double ss_cuda_bench_linear(int64_t M, int64_t N, int64_t K, ss_dtype weights_dtype,
				       int reps)
{
	float *x = NULL, *y = NULL, *w32 = NULL;
	void *W = NULL;
	ss_cuda_blas *b = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	double best = -1.0;
	const size_t esz = weights_dtype == SS_DTYPE_F32 ? 4 : 2;

	if (M <= 0 || N <= 0 || K <= 0 || reps <= 0)
		return -1.0;
	if (ss_cuda_note(cudaMalloc((void **)&x, (size_t)(M * K) * 4), "bench") ||
	    ss_cuda_note(cudaMalloc((void **)&y, (size_t)(M * N) * 4), "bench") ||
	    ss_cuda_note(cudaMalloc((void **)&w32, (size_t)(N * K) * 4), "bench") ||
	    ss_cuda_note(cudaMalloc(&W, (size_t)(N * K) * esz), "bench"))
		goto out;
	fill_kernel<<<ss_cdiv(M * K, 256), 256>>>(x, M * K, 1u);
	fill_kernel<<<ss_cdiv(N * K, 256), 256>>>(w32, N * K, 2u);
	if (weights_dtype == SS_DTYPE_F32)
		cudaMemcpy(W, w32, (size_t)(N * K) * 4, cudaMemcpyDeviceToDevice);
	else
		ss_cuda_convert(W, weights_dtype, w32, N * K, 0);
	b = ss_cuda_blas_create(0, (size_t)(M * K) * 2);
	if (!b || ss_cuda_note(cudaEventCreate(&e0), "bench") ||
	    ss_cuda_note(cudaEventCreate(&e1), "bench"))
		goto out;
	for (int i = 0; i < 3; i++)
		if (ss_linear_cuda(b, y, N, x, K, W, weights_dtype, M, N, K, 0.0f))
			goto out;
	for (int i = 0; i < reps; i++) {
		float ms = 0.0f;
		cudaEventRecord(e0, 0);
		if (ss_linear_cuda(b, y, N, x, K, W, weights_dtype, M, N, K, 0.0f))
			goto out;
		cudaEventRecord(e1, 0);
		if (ss_cuda_note(cudaEventSynchronize(e1), "bench"))
			goto out;
		cudaEventElapsedTime(&ms, e0, e1);
		if (best < 0 || ms * 1e-3 < best)
			best = ms * 1e-3;
	}
out:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	ss_cuda_blas_free(b);
	cudaFree(x);
	cudaFree(y);
	cudaFree(w32);
	cudaFree(W);
	return best;
}
