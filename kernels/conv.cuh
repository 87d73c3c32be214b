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
