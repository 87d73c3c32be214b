/*
 * conv.c — the causal depthwise conv1d + SiLU on the CPU, ss_conv1d_silu_cpu
 * and its decode step ss_conv1d_step_cpu (ss_ops.h), and the backward of the
 * first, ss_conv1d_silu_backward_cpu. The forwards' twins:
 * kernels/conv.cu (the backward has none: training is CPU only).
 */
#include <math.h>
#include <string.h>

#include "ss.h"
#include "forward/vec.h"

/* Channels gathered from a conv state per step (stack buffer). */
#define CONV_CHUNK 256

/* One sequence of rows [0, n) (pointers at its first row). */
static void conv_seq(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int64_t n,
		     float *st, const float *wt, ptrdiff_t ldw, const float *b, int nch, int K)
{
	const int K1 = K - 1;
	float tmp[CONV_CHUNK];
	int64_t t;
	int k, c, c0;

	/* the rows whose taps all lie in x, all at once */
	if (n > K1)
		ss_vec_conv_silu(y + K1 * ldy, ldy, x, ldx, wt, ldw, b, n - K1, nch, K);
	for (t = 0; t < n && t < K1; t++) {
		float *out = y + t * ldy;
		memcpy(out, b, (size_t)nch * sizeof(float));
		for (k = 0; k < K; k++) {
			const int64_t u = t - K1 + k; /* input row within the sequence */
			if (u >= 0) {
				ss_vec_fma(out, wt + k * ldw, x + u * ldx, nch);
				continue;
			}
			/* the tap falls before the sequence: its conv state column */
			for (c0 = 0; c0 < nch; c0 += CONV_CHUNK) {
				const int m = nch - c0 < CONV_CHUNK ? nch - c0 : CONV_CHUNK;
				for (c = 0; c < m; c++)
					tmp[c] = st[(size_t)(c0 + c) * K1 + (K1 + u)];
				ss_vec_fma(out + c0, wt + k * ldw + c0, tmp, m);
			}
		}
		ss_vec_silu(out, nch);
	}
	if (K1 <= 0 || n == 0)
		return;
	/* the new state: the last K1 inputs of [old state | rows] */
	if (n >= K1) {
		for (k = 0; k < K1; k++) {
			const float *in = x + (n - K1 + k) * ldx;
			for (c = 0; c < nch; c++)
				st[(size_t)c * K1 + k] = in[c];
		}
		return;
	}
	for (c = 0; c < nch; c++) {
		float *w = st + (size_t)c * K1;
		for (k = 0; k < K1 - n; k++)
			w[k] = w[k + n];
		for (k = 0; k < n; k++)
			w[K1 - n + k] = x[k * ldx + c];
	}
}

void ss_conv1d_silu_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
			const int64_t *seq_start, int nseq, float *conv_state, ptrdiff_t ld_state,
			const float *wt, ptrdiff_t ldw, const float *b, int nch, int d_conv)
{
	int s;

	for (s = 0; s < nseq; s++) {
		const int64_t r0 = seq_start ? seq_start[s] : s;
		const int64_t n = seq_start ? seq_start[s + 1] - r0 : 1;
		conv_seq(y + r0 * ldy, ldy, x + r0 * ldx, ldx, n, conv_state + s * ld_state, wt, ldw,
			 b, nch, d_conv);
	}
}

/* Channels per block of conv_seq_backward: a block's slice of a row is
 * contiguous, so the rows stream through the cache once per block. */
#define CONV_BWD_BLOCK 64

/* One sequence of rows [0, n) backwards. Its inputs, old state then rows,
 * are ext[j] (j < K1: st column j; else row j - K1); output t reads
 * ext[t .. t+K1] and the new state is ext[n .. n+K1). g0 collects the
 * gradient of the old state's columns, dst holds that of the new state on
 * entry and that of the old on return. Rows outer and channels inner, in
 * blocks of channels; each sum sees its terms in the order of a
 * channel-by-channel loop (t ascending). */
static void conv_seq_backward(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
			      ptrdiff_t ldx, int64_t n, const float *st, float *dst,
			      const float *wt, float *dwt, ptrdiff_t ldw, const float *b, float *db,
			      int nch, int K)
{
	const int K1 = K - 1;
	float g0[CONV_BWD_BLOCK][SS_CONV_BACKWARD_MAX];
	int64_t t, j;
	int k, c, c0, nb;

	for (c0 = 0; c0 < nch; c0 += CONV_BWD_BLOCK) {
		nb = nch - c0 < CONV_BWD_BLOCK ? nch - c0 : CONV_BWD_BLOCK;
		for (c = 0; c < nb; c++) {
			const float *dsc = dst + (size_t)(c0 + c) * K1;
			for (k = 0; k < K1; k++)
				g0[c][k] = 0.0f;
			for (k = 0; k < K1; k++) {
				j = n + k;
				if (j >= K1)
					dx[(j - K1) * ldx + c0 + c] += dsc[k];
				else
					g0[c][j] += dsc[k];
			}
		}
		for (t = 0; t < n; t++) {
			const float *dyt = dy + t * ldy + c0;
			for (c = 0; c < nb; c++) {
				const int ch = c0 + c;
				const float *sc = st + (size_t)ch * K1;
				float pre = b[ch], sg, g;
				for (k = 0; k < K; k++) {
					j = t + k;
					pre += wt[k * ldw + ch] * (j < K1 ? sc[j] : x[(j - K1) * ldx + ch]);
				}
				sg = 1.0f / (1.0f + expf(-pre));
				g = dyt[c] * sg * (1.0f + pre * (1.0f - sg));
				db[ch] += g;
				for (k = 0; k < K; k++) {
					j = t + k;
					dwt[k * ldw + ch] += g * (j < K1 ? sc[j] : x[(j - K1) * ldx + ch]);
					if (j < K1)
						g0[c][j] += g * wt[k * ldw + ch];
					else
						dx[(j - K1) * ldx + ch] += g * wt[k * ldw + ch];
				}
			}
		}
		for (c = 0; c < nb; c++)
			for (k = 0; k < K1; k++)
				dst[(size_t)(c0 + c) * K1 + k] = g0[c][k];
	}
}

int ss_conv1d_silu_backward_cpu(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
				ptrdiff_t ldx, const int64_t *seq_start, int nseq,
				const float *conv_state, float *dconv_state, ptrdiff_t ld_state,
				const float *wt, float *dwt, ptrdiff_t ldw, const float *b, float *db,
				int nch, int d_conv)
{
	int s;

	if (d_conv < 1 || d_conv > SS_CONV_BACKWARD_MAX || nch < 0 || nseq < 0)
		return SS_ERR_INVALID;
	for (s = 0; s < nseq; s++) {
		const int64_t r0 = seq_start ? seq_start[s] : s;
		const int64_t n = seq_start ? seq_start[s + 1] - r0 : 1;
		if (n < 0)
			return SS_ERR_INVALID;
		conv_seq_backward(dy + r0 * ldy, ldy, x + r0 * ldx, dx + r0 * ldx, ldx, n,
				  conv_state + s * ld_state, dconv_state + s * ld_state, wt, dwt, ldw,
				  b, db, nch, d_conv);
	}
	return 0;
}

void ss_conv1d_step_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int nseq,
			float *conv_state, ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
			const float *b, int nch, int d_conv)
{
	ss_conv1d_silu_cpu(y, ldy, x, ldx, NULL, nseq, conv_state, ld_state, wt, ldw, b, nch,
			   d_conv);
}
