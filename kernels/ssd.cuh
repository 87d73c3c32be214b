/* ssd.cuh — ss_ssd_scan_cuda (kernels/ssd.cu; declared from SS_CUDA_OPS in
 * common.cuh), the chunked SSD form of ss_ssm_scan_cpu (ss_ops.h; same
 * arguments, device pointers, plus max_len: a host upper bound of the
 * longest sequence, which sizes the grid, then a stream). Same results as
 * ss_ssm_scan_cuda to f32 rounding (sums in another order). Allocates its
 * scratch stream-ordered (cudaMallocAsync): about
 * nseq * ceil(max_len/64) * nheads * headdim * d_state floats.
 * Returns 0, SS_ERR_INVALID (dims), SS_ERR_DEVICE (allocation, launch). */
#pragma once
#include "common.cuh"

#define SS_SSD_CHUNK 64
