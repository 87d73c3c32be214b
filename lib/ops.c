/*
 * ops.c — the CPU reference of each op of the forward pass. See ss_ops.h for
 * the contracts; kernels/<op>.cu holds each CUDA twin.
 *
 * These are single-threaded bodies: forward.c cuts the work into row or
 * channel ranges and calls them from its pool's threads. The elementwise
 * inner loops go through vec.c (AVX2 when the CPU has it) and the scan
 * through scan.c, so the results are bit for bit those of the fused loops
 * forward.c ran before the ops were factored out.
 */
#include "blas.h"
#include <math.h>
#include <string.h>

#include "ss.h"
#include "matvec.h"
#include "scan.h"
#include "vec.h"

/* Channels gathered from a conv state per step (stack buffer). */
#define CONV_CHUNK 256

void ss_embed_cpu(float *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n,
		  int d_model)
{
	const size_t row = (size_t)d_model * ss_dtype_size(et);
	int64_t r;

	for (r = 0; r < n; r++) {
		const char *src = (const char *)emb + (size_t)tokens[r] * row;
		if (et == SS_DTYPE_F32)
			memcpy(h + r * d_model, src, row);
		else
			ss_to_f32(h + r * d_model, src, et, (size_t)d_model);
	}
}

/* y = x / sqrt(mean(x²) + eps) · w, the sum of squares in double as ggml does. */
static void rmsnorm_row(float *y, const float *x, const float *w, int n, float eps)
{
	const float scale = 1.0f / sqrtf((float)(ss_vec_sumsq(x, n) / n) + eps);
	ss_vec_scale_mul(y, x, scale, w, n);
}

void ss_rmsnorm_cpu(float *y, float *h, const float *res, const float *w, int64_t n, int d,
		    float eps)
{
	int64_t r;
	int i;

	for (r = 0; r < n; r++) {
		float *hr = h + r * d;
		if (res) {
			const float *rr = res + r * d;
			for (i = 0; i < d; i++)
				hr[i] += rr[i];
		}
		rmsnorm_row(y + r * d, hr, w, d, eps);
	}
}

int ss_linear_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		  ss_dtype wt, int64_t M, int64_t N, int64_t K, float beta)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	if (wt != SS_DTYPE_F32 && wt != SS_DTYPE_BF16 && wt != SS_DTYPE_F16)
		return SS_ERR_UNSUPPORTED;
	if (M == 0 || N == 0)
		return 0;
	if (wt != SS_DTYPE_F32) {
		ss_matvec_w16(y, ldy, x, ldx, W, wt, M, N, K, beta);
		return 0;
	}
	if (M == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)N, (blasint)K, 1.0f, W, (blasint)K,
			    x, 1, beta, y, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)M, (blasint)N,
			    (blasint)K, 1.0f, x, (blasint)ldx, W, (blasint)K, beta, y, (blasint)ldy);
	return 0;
}

/* One sequence of rows [0, n) (pointers at its first row). */
static void conv_seq(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int64_t n,
		     float *st, const float *wt, ptrdiff_t ldw, const float *b, int nch, int K)
{
	const int K1 = K - 1;
	float tmp[CONV_CHUNK];
	int64_t t;
	int k, c, c0;

	for (t = 0; t < n; t++) {
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

void ss_conv1d_step_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, int nseq,
			float *conv_state, ptrdiff_t ld_state, const float *wt, ptrdiff_t ldw,
			const float *b, int nch, int d_conv)
{
	ss_conv1d_silu_cpu(y, ldy, x, ldx, NULL, nseq, conv_state, ld_state, wt, ldw, b, nch,
			   d_conv);
}

/* torch.nn.functional.softplus with its default threshold 20. */
static inline float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

void ss_dt_softplus_cpu(float *dt, ptrdiff_t lddt, const float *raw, ptrdiff_t ldr,
			const float *dt_bias, int64_t n, int nheads, float dt_min, float dt_max)
{
	const int clamp_hi = isfinite(dt_max), clamp_lo = dt_min > 0.0f;
	int64_t r;
	int h;

	for (r = 0; r < n; r++)
		for (h = 0; h < nheads; h++) {
			float v = softplus(raw[r * ldr + h] + dt_bias[h]);
			if (clamp_hi && v > dt_max)
				v = dt_max;
			if (clamp_lo && v < dt_min)
				v = dt_min;
			dt[r * lddt + h] = v;
		}
}

static int scan_args_ok(const ss_scan_dims *d, const float *x, ptrdiff_t ldx, const float *B,
			ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt,
			ptrdiff_t lddt, const float *A_log, const float *ssm, const float *y,
			ptrdiff_t ldy)
{
	return d && d->nheads > 0 && d->headdim > 0 && d->d_state > 0 && d->ngroups > 0 &&
	       d->nheads % d->ngroups == 0 && x && B && dt && A_log && ssm && (!y || C) &&
	       ldx >= (ptrdiff_t)d->nheads * d->headdim && ldb >= (ptrdiff_t)d->ngroups * d->d_state &&
	       lddt >= d->nheads && (!y || ldy >= (ptrdiff_t)d->nheads * d->headdim) &&
	       (!y || ldc >= (ptrdiff_t)d->ngroups * d->d_state);
}

/* The scan of nseq sequences; seq_start NULL = one row each. */
static int scan_batch(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
		      const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
		      const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		      const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
		      float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay)
{
	const size_t hs = (size_t)d->headdim * d->d_state;
	int s, h, hpg;

	if (nseq < 0)
		return SS_ERR_INVALID;
	if (nseq == 0)
		return 0;
	if (!scan_args_ok(d, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, ssm, y, ldy))
		return SS_ERR_INVALID;
	hpg = d->nheads / d->ngroups;
	for (s = 0; s < nseq; s++) {
		const int64_t r0 = seq_start ? seq_start[s] : s;
		const int64_t n = seq_start ? seq_start[s + 1] - r0 : 1;
		if (n < 0)
			return SS_ERR_INVALID;
		if (n == 0)
			continue;
		for (h = 0; h < d->nheads; h++) {
			const int g = h / hpg;
			ss_scan_head_args a = {
				.n = n, .P = d->headdim, .N = d->d_state,
				.x = x + r0 * ldx + (ptrdiff_t)h * d->headdim, .ldx = ldx,
				.B = B + r0 * ldb + (ptrdiff_t)g * d->d_state, .ldb = ldb,
				.C = y ? C + r0 * ldc + (ptrdiff_t)g * d->d_state : NULL, .ldc = ldc,
				.dt = dt + r0 * lddt + h, .lddt = lddt,
				.A = -expf(A_log[h]), .D = D ? D[h] : 0.0f,
				.s = ssm + s * ld_ssm + (size_t)h * hs,
				.y = y ? y + r0 * ldy + (ptrdiff_t)h * d->headdim : NULL, .ldy = ldy,
			};
			const double dtsum = ss_scan_head(&a);
			if (logdecay) {
				float *ld = logdecay + s * ld_logdecay + h;
				*ld = (float)((double)*ld - exp((double)A_log[h]) * dtsum);
			}
		}
	}
	return 0;
}

int ss_ssm_scan_varlen_cpu(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
			   const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
			   const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
			   const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
			   float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay)
{
	if (!seq_start)
		return SS_ERR_INVALID;
	return scan_batch(d, seq_start, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm,
			  ld_ssm, y, ldy, logdecay, ld_logdecay);
}

int ss_ssm_step_cpu(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
		    const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
		    const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
		    float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
		    ptrdiff_t ld_logdecay)
{
	return scan_batch(d, NULL, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm, ld_ssm,
			  y, ldy, logdecay, ld_logdecay);
}

void ss_gated_rmsnorm_cpu(float *y, ptrdiff_t ldy, const float *z, ptrdiff_t ldz,
			  const float *w, int64_t n, int d, int ngroups, float eps)
{
	const int gs = d / ngroups;
	int64_t r;
	int g;

	for (r = 0; r < n; r++) {
		float *yr = y + r * ldy;
		ss_vec_mul_silu(yr, z + r * ldz, d);
		for (g = 0; g < ngroups; g++)
			rmsnorm_row(yr + g * gs, yr + g * gs, w + g * gs, gs, eps);
	}
}

void ss_argmax_rows_cpu(int32_t *ids, const float *logits, ptrdiff_t ld, int64_t nrows,
			int64_t n)
{
	int64_t r;
	for (r = 0; r < nrows; r++)
		ids[r] = ss_argmax(logits + r * ld, n);
}
