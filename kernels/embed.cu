/* embed.cu — embedding gather. ref: ss_embed_cpu (lib/forward/ops/embed.c). */
#include "embed.cuh"

/* grid.x = rows (blockIdx.x, up to 2^31-1), block-stride over d_model */
__global__ void embed_kernel(float *h, const void *emb, ss_dtype et, const int32_t *tokens,
			     int d_model)
{
	const int64_t r = blockIdx.x;
	const int64_t base = (int64_t)tokens[r] * d_model;
	for (int i = threadIdx.x; i < d_model; i += blockDim.x)
		h[r * d_model + i] = ss_ld(emb, et, base + i);
}

extern "C" void ss_embed_cuda(float *h, const void *emb, ss_dtype et, const int32_t *tokens,
			      int64_t n, int d_model, cudaStream_t st)
{
	if (n <= 0)
		return;
	embed_kernel<<<(unsigned)n, 256, 0, st>>>(h, emb, et, tokens, d_model);
	SS_CUDA_LAUNCHED("embed");
}

/* grid.x = rows; a token may repeat, hence atomicAdd (the order of the adds
 * into a repeated row is not fixed) */
__global__ void embed_backward_kernel(const float *dh, float *demb, const int32_t *tokens,
				      int d_model)
{
	const int64_t r = blockIdx.x;
	float *row = demb + (int64_t)tokens[r] * d_model;
	for (int i = threadIdx.x; i < d_model; i += blockDim.x)
		atomicAdd(row + i, dh[r * d_model + i]);
}

extern "C" void ss_embed_backward_cuda(const float *dh, float *demb, const int32_t *tokens,
				       int64_t n, int d_model, cudaStream_t st)
{
	if (n <= 0 || d_model <= 0)
		return;
	embed_backward_kernel<<<(unsigned)n, 256, 0, st>>>(dh, demb, tokens, d_model);
	SS_CUDA_LAUNCHED("embed_backward");
}
