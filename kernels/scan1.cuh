/* scan1.cuh — CUDA twin of ss_ssm1_scan_cpu (ss_ops.h; same arguments,
 * device pointers, then a stream): Mamba-1's selective scan. */
#pragma once
#include "common.cuh"

extern "C" int ss_ssm1_scan_cuda(int d_inner, int d_state, const int64_t *seq_start, int nseq,
				 const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
				 const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
				 float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy,
				 float *logdecay, ptrdiff_t ld_logdecay, cudaStream_t st);
