/*
 * embed.c — the embedding gather on the CPU, ss_embed_cpu (ss_ops.h), and
 * its backward, ss_embed_backward_cpu. The forward's twin: kernels/embed.cu
 * (the backward has none: training is CPU only).
 */
#include <string.h>

#include "ss.h"

void ss_embed_cpu(float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		  int d_model)
{
	const size_t row = ss_dtype_row_size(et, (size_t)d_model); /* q8_0: d_model / 32 blocks */
	int64_t r;

	for (r = 0; r < n; r++) {
		const char *src = (const char *)emb + (size_t)tokens[r] * row;
		if (et == SS_DTYPE_F32)
			memcpy(h + r * d_model, src, row);
		else
			ss_to_f32(h + r * d_model, src, et, (size_t)d_model);
	}
}

void ss_embed_backward_cpu(const float *dh, float *demb, const int32_t *tokens, int64_t n,
			   int d_model)
{
	int64_t r;
	int i;

	for (r = 0; r < n; r++) {
		const float *g = dh + r * d_model;
		float *row = demb + (size_t)tokens[r] * d_model;
		for (i = 0; i < d_model; i++)
			row[i] += g[i];
	}
}
