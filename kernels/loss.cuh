/* loss.cuh — CUDA twin of ss_cross_entropy_backward_cpu (ss_ops.h; same
 * arguments, device pointers, then a stream): one block per row, the max
 * and Σexp as f32 tree reductions (the CPU sums in double). The targets
 * are the caller's, checked against V on the host (a device-side check
 * would need a sync); a target < 0 marks a row without one. Returns 0,
 * SS_ERR_INVALID (V < 1, ld < V, n < 0) or SS_ERR_DEVICE (launch). */
#pragma once
#include "common.cuh"

extern "C" int ss_cross_entropy_backward_cuda(const float *dnll, const float *logits,
					      float *dlogits, ptrdiff_t ld,
					      const int32_t *targets, int64_t n, int64_t V,
					      cudaStream_t st);
