/*
 * embed.c — the embedding gather on the CPU, ss_embed_cpu (ss_ops.h).
 * Twin: kernels/embed.cu.
 */
#include <string.h>

#include "ss.h"

void ss_embed_cpu(float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		  int d_model)
{
	const size_t row = (size_t)d_model * ss_dtype_size(et);
	int64_t r;

	for (r = 0; r < n; r++) {
		const char *src = (const char *)emb + (size_t)tokens[r] * row;
		if (et == SS_DTYPE_F32)
			memcpy(h + r * d_model, src, row);
		else
			ss_to_f32(h + r * d_model, src, et, (size_t)d_model);
	}
}
