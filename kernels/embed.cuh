/* embed.cuh — CUDA twin of ss_embed_cpu (ss_ops.h): h[r] = emb[tokens[r]]
 * widened to f32. h: [n][d_model] f32; emb: [vocab][d_model] in et;
 * tokens: [n] i32, device pointers, already checked against vocab. */
#pragma once
#include "common.cuh"

extern "C" void ss_embed_cuda(float *h, const void *emb, ss_dtype et, const int32_t *tokens,
			      int64_t n, int d_model, cudaStream_t st);

/* Twin of ss_embed_backward_cpu: demb[tokens[r]][:] += dh[r][:] with
 * atomicAdd (repeated tokens sum in no fixed order). dh: [n][d_model];
 * demb: [vocab][d_model] f32. */
extern "C" void ss_embed_backward_cuda(const float *dh, float *demb, const int32_t *tokens,
				       int64_t n, int d_model, cudaStream_t st);
