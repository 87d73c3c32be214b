/*
 * conv.cu — causal depthwise conv1d + SiLU over packed variable-length
 * sequences with initial and final conv states, and its decode step.
 *
 * One thread per (sequence, channel) runs along the sequence with the
 * d_conv-1 previous inputs in registers: it reads its channel's state once,
 * writes the final state once (in place is then safe), and a warp's loads of
 * x rows are coalesced (channels are contiguous). The row count is not
 * needed on the host: each thread reads its sequence's bounds.
 * ref: ss_conv1d_silu_cpu (lib/forward/ops/conv.c); causal-conv1d causal_conv1d_fwd
 *      (varlen, initial_states) and causal_conv1d_update.
 */
#include <math.h>

#include "conv.cuh"

#define CONV_THREADS 128

/* KC: d_conv known at compile time (the window stays in registers), or 0
 * for any d_conv <= SS_CONV_MAX (K_rt). */
template <int KC>
__global__ void conv_kernel(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
			    const int64_t *seq_start, float *conv_state, ptrdiff_t ld_state,
			    const float *wt, ptrdiff_t ldw, const float *b, int nch, int K_rt)
{
	const int K = KC ? KC : K_rt;
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	const int s = blockIdx.y;
	const int K1 = K - 1;
	float win[SS_CONV_MAX], w[SS_CONV_MAX];
	int64_t r0, n;

	if (c >= nch)
		return;
	r0 = seq_start ? seq_start[s] : s;
	n = seq_start ? seq_start[s + 1] - r0 : 1;
	if (n <= 0)
		return;
	float *stc = conv_state + s * ld_state + (int64_t)c * K1;
#pragma unroll
	for (int k = 0; k < K1; k++)
		win[k] = stc[k];
#pragma unroll
	for (int k = 0; k < K; k++)
		w[k] = wt[(int64_t)k * ldw + c];
	const float bias = b[c];
	for (int64_t t = 0; t < n; t++) {
		const float in = x[(r0 + t) * ldx + c];
		float acc = bias;
#pragma unroll
		for (int k = 0; k < K1; k++)
			acc = fmaf(w[k], win[k], acc);
		acc = fmaf(w[K1], in, acc);
		y[(r0 + t) * ldy + c] = ss_silu(acc);
#pragma unroll
		for (int k = 0; k + 1 < K1; k++)
			win[k] = win[k + 1];
		if (K1 > 0)
			win[K1 - 1] = in;
	}
#pragma unroll
	for (int k = 0; k < K1; k++)
		stc[k] = win[k];
}

extern "C" void ss_conv1d_silu_cuda(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    const int64_t *seq_start, int nseq, float *conv_state,
				    ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
				    const float *b, int nch, int d_conv, cudaStream_t st)
{
	if (nseq <= 0 || nch <= 0)
		return;
	if (d_conv < 1 || d_conv > SS_CONV_MAX) {
		ss_cuda_note_msg("conv1d", "d_conv outside [1, 8]");
		return;
	}
	const dim3 grid(ss_cdiv(nch, CONV_THREADS), (unsigned)nseq);
	if (d_conv == 4)
		conv_kernel<4><<<grid, CONV_THREADS, 0, st>>>(y, ldy, x, ldx, seq_start, conv_state,
							      ld_state, wt, ldw, b, nch, d_conv);
	else
		conv_kernel<0><<<grid, CONV_THREADS, 0, st>>>(y, ldy, x, ldx, seq_start, conv_state,
							      ld_state, wt, ldw, b, nch, d_conv);
	SS_CUDA_LAUNCHED("conv1d_silu");
}

extern "C" void ss_conv1d_step_cuda(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    int nseq, float *conv_state, ptrdiff_t ld_state,
				    const float *wt, ptrdiff_t ldw, const float *b, int nch,
				    int d_conv, cudaStream_t st)
{
	ss_conv1d_silu_cuda(y, ldy, x, ldx, NULL, nseq, conv_state, ld_state, wt, ldw, b, nch,
			    d_conv, st);
}
