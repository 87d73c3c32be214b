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

/* Twin of ss_ssm_scan_backward_cpu (same arguments and accumulation), with
 * max_len after nseq, as ss_ssd_scan_cuda: an upper bound of the longest
 * sequence (host value; a longer sequence is skipped), and work: device
 * scratch of ss_cuda_scan_backward_work(d, nseq, max_len) floats (the
 * chunk-start checkpoints of every row of every head; device_plugin.h).
 * dB, dC, ddt, dA_log and dD are summed by atomicAdd (no fixed order).
 * d_state <= 256. Returns 0, SS_ERR_INVALID or SS_ERR_DEVICE (launch). */
extern "C" int ss_ssm_scan_backward_cuda(const ss_scan_dims *d, const int64_t *seq_start,
					 int nseq, int64_t max_len, const float *x, float *dx,
					 ptrdiff_t ldx, const float *B, float *dB, ptrdiff_t ldb,
					 const float *C, float *dC, ptrdiff_t ldc, const float *dt,
					 float *ddt, ptrdiff_t lddt, const float *A_log,
					 float *dA_log, const float *D, float *dD, const float *ssm,
					 float *dssm, ptrdiff_t ld_ssm, const float *dy,
					 ptrdiff_t ldy, const float *dlogdecay,
					 ptrdiff_t ld_logdecay, float *work, cudaStream_t st);
