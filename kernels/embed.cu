/* embed.cu — the twin (SS_CUDA_OPS) of ss_embed_cpu: h[r] = emb[tokens[r]]
 * widened to f32. h: [n][d_model] f32; emb: [vocab][d_model] in et;
 * tokens: [n] i32, device pointers, already checked against vocab.
 * ref: ss_embed_cpu (lib/forward/ops/embed.c). */
#include "common.cuh"

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
