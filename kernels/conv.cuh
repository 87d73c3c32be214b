/* conv.cuh — CUDA twins of ss_conv1d_silu_cpu and ss_conv1d_step_cpu
 * (ss_ops.h; same arguments, device pointers — seq_start too — then a
 * stream). d_conv <= SS_CONV_MAX. */
#pragma once
#include "common.cuh"

#define SS_CONV_MAX 8

extern "C" void ss_conv1d_silu_cuda(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    const int64_t *seq_start, int nseq, float *conv_state,
				    ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
				    const float *b, int nch, int d_conv, cudaStream_t st);
extern "C" void ss_conv1d_step_cuda(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    int nseq, float *conv_state, ptrdiff_t ld_state,
				    const float *wt, ptrdiff_t ldw, const float *b, int nch,
				    int d_conv, cudaStream_t st);

/* Twin of ss_conv1d_silu_backward_cpu (same arguments and accumulation;
 * seq_start a device pointer): one thread per (sequence, channel), the
 * pre-activations recomputed from x and the initial states; dwt and db
 * summed over the sequences by atomicAdd (no fixed order). d_conv <=
 * SS_CONV_BACKWARD_MAX. A negative sequence length, which the CPU refuses,
 * is skipped here (seq_start is on the device). Returns 0, SS_ERR_INVALID
 * or SS_ERR_DEVICE (launch). */
extern "C" int ss_conv1d_silu_backward_cuda(const float *dy, ptrdiff_t ldy, const float *x,
					    float *dx, ptrdiff_t ldx, const int64_t *seq_start,
					    int nseq, const float *conv_state, float *dconv_state,
					    ptrdiff_t ld_state, const float *wt, float *dwt,
					    ptrdiff_t ldw, const float *b, float *db, int nch,
					    int d_conv, cudaStream_t st);
