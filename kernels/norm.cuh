/* norm.cuh — CUDA twins of ss_rmsnorm_cpu and ss_gated_rmsnorm_cpu
 * (ss_ops.h; same arguments, device pointers, then a stream). The sums of
 * squares are f32 tree reductions (the CPU sums in double). */
#pragma once
#include "common.cuh"

extern "C" void ss_rmsnorm_cuda(float *y, float *h, const float *res, const float *w, int64_t n,
				int d, float eps, cudaStream_t st);
extern "C" void ss_gated_rmsnorm_cuda(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				      const float *w, int64_t n, int d, int ngroups, float eps,
				      cudaStream_t st);

/* Twin of ss_gate_silu_cpu (Mamba-1's gate y = y · silu(z)). */
extern "C" void ss_gate_silu_cuda(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
				  int64_t n, int d, cudaStream_t st);

/* Twins of ss_rmsnorm_backward_cpu and ss_gated_rmsnorm_backward_cpu (same
 * arguments and accumulation; the gated one in place on dy as on the CPU):
 * one block per row (per row and group), the row sums as f32 tree
 * reductions, dw gathered over the rows by atomicAdd (no fixed order). */
extern "C" void ss_rmsnorm_backward_cuda(const float *dy, const float *h, float *dh,
					 const float *w, float *dw, int64_t n, int d, float eps,
					 cudaStream_t st);
extern "C" void ss_gated_rmsnorm_backward_cuda(const float *y, float *dy, ptrdiff_t ldy,
					       const float *z, float *dz, ptrdiff_t ldz,
					       const float *w, float *dw, int64_t n, int d,
					       int ngroups, float eps, cudaStream_t st);
