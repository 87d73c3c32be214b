/* ssd.cuh — the chunked SSD form of ss_ssm_scan_cpu (ss_ops.h; same
 * arguments, device pointers, plus max_len: a host upper bound of the longest
 * sequence, which sizes the grid, then a stream). Same results as
 * ss_ssm_scan_cuda to f32 rounding (sums in another order). Allocates its
 * scratch stream-ordered (cudaMallocAsync): about
 * nseq * ceil(max_len/64) * nheads * headdim * d_state floats.
 * Returns 0, SS_ERR_INVALID (dims), SS_ERR_DEVICE (allocation, launch). */
#pragma once
#include "common.cuh"

#define SS_SSD_CHUNK 64

extern "C" int ss_ssd_scan_cuda(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
				int64_t max_len, const float *x, ptrdiff_t ldx, const float *B,
				ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt,
				ptrdiff_t lddt, const float *A_log, const float *D, float *ssm,
				ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
				ptrdiff_t ld_logdecay, cudaStream_t st);
