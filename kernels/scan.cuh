/* scan.cuh — CUDA twins of ss_ssm_scan_cpu and ss_ssm_step_cpu
 * (ss_ops.h; same arguments, device pointers — seq_start too — then a
 * stream): the recurrence sequential in t, parallel over (sequence, head,
 * headdim, d_state). d_state <= 256. Returns 0, SS_ERR_INVALID (dims), or
 * SS_ERR_DEVICE (launch). */
#pragma once
#include "common.cuh"

extern "C" int ss_ssm_scan_cuda(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
				const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
				const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
				const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
				float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay,
				cudaStream_t st);
extern "C" int ss_ssm_step_cuda(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
				const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
				const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
				float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy,
				float *logdecay, ptrdiff_t ld_logdecay, cudaStream_t st);
