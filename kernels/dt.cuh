/* dt.cuh — CUDA twin of ss_dt_softplus_cpu (ss_ops.h; same arguments,
 * device pointers, then a stream). */
#pragma once
#include "common.cuh"

extern "C" void ss_dt_softplus_cuda(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
				    const float *dt_bias, int64_t n, int nheads, float dt_min,
				    float dt_max, cudaStream_t st);
