/* dt.cuh — CUDA twins of ss_dt_softplus_cpu and ss_dt_proj_cpu (ss_ops.h; same arguments,
 * device pointers, then a stream). */
#pragma once
#include "common.cuh"

extern "C" void ss_dt_softplus_cuda(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
				    const float *dt_bias, int64_t n, int nheads, float dt_min,
				    float dt_max, cudaStream_t st);

/* Twin of ss_dt_proj_cpu (Mamba-1's low-rank dt). */
extern "C" void ss_dt_proj_cuda(float *dt, ptrdiff_t lddt, const float *low, ptrdiff_t ldl,
				const float *W, const float *dt_bias, int64_t n, int d_inner,
				int dt_rank, cudaStream_t st);

/* Twin of ss_dt_softplus_backward_cpu: one thread per (row, head), ddt_bias
 * summed over the rows by atomicAdd (no fixed order). */
extern "C" void ss_dt_softplus_backward_cuda(const float *ddt, ptrdiff_t lddt, const float *raw,
					     float *draw, ptrdiff_t ldr, const float *dt_bias,
					     float *ddt_bias, int64_t n, int nheads, float dt_min,
					     float dt_max, cudaStream_t st);
