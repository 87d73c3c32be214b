/*
 * loss.cu — the backward of the next-token cross-entropy: dlogits[r] +=
 * dnll[r]·(softmax(logits[r]) − onehot(targets[r])). One block per row
 * over the (padded) vocabulary: a max, then Σ exp(l − max), then the add.
 * ref: ss_cross_entropy_backward_cpu (lib/forward/ops/loss.c); llm.c
 *      crossentropy_softmax_backward.
 */
#include "loss.cuh"

#define LOSS_THREADS 1024

__global__ void cross_entropy_backward_kernel(const float *dnll, const float *logits,
					      float *dlogits, ptrdiff_t ld,
					      const int32_t *targets, int64_t V)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const int32_t tg = targets[r];
	const float g = dnll[r];
	const float *l = logits + r * ld;
	float *dl = dlogits + r * ld;
	float mx = -INFINITY, sum = 0.0f;

	if (tg < 0 || g == 0.0f)
		return; /* block-uniform: no thread reaches the reductions */
	for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, l[i]);
	mx = ss_block_max(mx, sh);
	for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
		sum += expf(l[i] - mx);
	sum = ss_block_sum(sum, sh);
	const float scale = g / sum;
	for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
		dl[i] += scale * expf(l[i] - mx) - (i == tg ? g : 0.0f);
}

extern "C" int ss_cross_entropy_backward_cuda(const float *dnll, const float *logits,
					      float *dlogits, ptrdiff_t ld,
					      const int32_t *targets, int64_t n, int64_t V,
					      cudaStream_t st)
{
	if (V < 1 || ld < V || n < 0) {
		ss_cuda_note_msg("cross_entropy_backward", "bad arguments");
		return SS_ERR_INVALID;
	}
	if (n == 0)
		return 0;
	cross_entropy_backward_kernel<<<(unsigned)n, LOSS_THREADS, 0, st>>>(dnll, logits, dlogits,
									    ld, targets, V);
	return SS_CUDA_LAUNCHED("cross_entropy_backward");
}
