/* opref.c — naive double-precision references of the ops; see opref.h. */
#include <math.h>

#include "util/opref.h"

void opref_embed(double *h, const void *emb, ss_dtype et, const int32_t *tokens, int64_t n, int d)
{
	for (int64_t r = 0; r < n; r++)
		for (int i = 0; i < d; i++) {
			const size_t k = (size_t)tokens[r] * d + i;
			h[r * d + i] = et == SS_DTYPE_F32    ? ((const float *)emb)[k]
				       : et == SS_DTYPE_BF16 ? ss_bf16_to_f32(((const uint16_t *)emb)[k])
							     : ss_f16_to_f32(((const uint16_t *)emb)[k]);
		}
}

void opref_rmsnorm(double *y, double *hout, const float *h, const float *res, const float *w,
		   int64_t n, int d, double eps)
{
	for (int64_t r = 0; r < n; r++) {
		double ss = 0;
		for (int i = 0; i < d; i++) {
			double v = h[r * d + i];
			if (res)
				v = (float)(v + res[r * d + i]);
			hout[r * d + i] = v;
			ss += v * v;
		}
		for (int i = 0; i < d; i++)
			y[r * d + i] = hout[r * d + i] / sqrt(ss / d + eps) * w[i];
	}
}

void opref_linear(double *y, const float *x, int64_t ldx, const float *W, const float *y0,
		  int64_t ldy0, int64_t M, int64_t N, int64_t K)
{
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double s = y0 ? y0[i * ldy0 + j] : 0.0;
			for (int64_t t = 0; t < K; t++)
				s += (double)x[i * ldx + t] * W[j * K + t];
			y[i * N + j] = s;
		}
}

void opref_dt(double *dt, const float *raw, int64_t ldr, const float *bias, int64_t n, int H,
	      float dt_min, float dt_max)
{
	for (int64_t r = 0; r < n; r++)
		for (int h = 0; h < H; h++) {
			const double u = (double)(raw[r * ldr + h] + bias[h]);
			double v = u > 20 ? u : log1p(exp(u));
			if (isfinite(dt_max) && v > dt_max)
				v = dt_max;
			if (dt_min > 0 && v < dt_min)
				v = dt_min;
			dt[r * H + h] = v;
		}
}

void opref_gated_rmsnorm(double *out, const float *y, int64_t ldy, const float *z, int64_t ldz,
			 const float *w, int64_t n, int d, int G, double eps)
{
	const int gsz = d / G;
	for (int64_t r = 0; r < n; r++)
		for (int g = 0; g < G; g++) {
			double ss = 0;
			for (int i = g * gsz; i < (g + 1) * gsz; i++) {
				const double zz = z[r * ldz + i];
				const double v = y[r * ldy + i] * zz / (1 + exp(-zz));
				out[r * d + i] = v;
				ss += v * v;
			}
			for (int i = g * gsz; i < (g + 1) * gsz; i++)
				out[r * d + i] *= w[i] / sqrt(ss / gsz + eps);
		}
}

void opref_argmax(int32_t *ids, const float *logits, int64_t ld, int64_t nrows, int64_t n)
{
	for (int64_t r = 0; r < nrows; r++) {
		int32_t best = -1;
		for (int64_t i = 0; i < n; i++) {
			const float v = logits[r * ld + i];
			if (!isnan(v) && (best < 0 || v > logits[r * ld + best]))
				best = (int32_t)i;
		}
		ids[r] = best;
	}
}

void opref_conv(double *y, double *nst, const float *x, int ldx, const int64_t *ss, int nseq,
		const float *state, const float *w, const float *b, int nch, int K)
{
	const int K1 = K - 1;
	for (int s = 0; s < nseq; s++) {
		const int64_t r0 = ss[s], n = ss[s + 1] - r0;
		for (int c = 0; c < nch; c++) {
			/* the input stream: K1 state values, then the rows */
			const float *st = state + ((size_t)s * nch + c) * K1;
#define IN(j) ((j) < K1 ? (double)st[j] : (double)x[(r0 + (j) - K1) * ldx + c])
			for (int64_t t = 0; t < n; t++) {
				double acc = b[c];
				for (int k = 0; k < K; k++)
					acc += (double)w[c * K + k] * IN(t + k);
				y[(r0 + t) * nch + c] = acc / (1.0 + exp(-acc));
			}
			for (int k = 0; k < K1; k++)
				nst[((size_t)s * nch + c) * K1 + k] = IN(n + k);
#undef IN
		}
	}
}

void opref_scan(const ss_scan_dims *d, const int64_t *ss, int nseq, const float *x, int ldx,
		const float *B, const float *C, int ldb, const float *dt, const float *A_log,
		const float *D, double *ssm, double *y, double *ld)
{
	const int H = d->nheads, P = d->headdim, N = d->d_state, hpg = H / d->ngroups;
	for (int s = 0; s < nseq; s++)
		for (int h = 0; h < H; h++) {
			const int g = h / hpg;
			const double A = -exp((double)A_log[h]);
			double *S = ssm + ((size_t)s * H + h) * P * N;
			double sum = 0;
			for (int64_t r = ss[s]; r < ss[s + 1]; r++) {
				const double dtv = dt[r * H + h], dA = exp(dtv * A);
				sum += dtv;
				for (int p = 0; p < P; p++) {
					const double xv = x[r * ldx + h * P + p];
					double acc = 0;
					for (int n = 0; n < N; n++) {
						double *e = &S[p * N + n];
						*e = dA * *e + dtv * xv * B[r * ldb + g * N + n];
						acc += *e * C[r * ldb + g * N + n];
					}
					y[r * H * P + h * P + p] = acc + (D ? D[h] : 0) * xv;
				}
			}
			ld[s * H + h] += A * sum;
		}
}

void opref_dt_proj(double *dt, const float *low, int64_t ldl, const float *W, const float *bias,
		   int64_t n, int d_inner, int R)
{
	for (int64_t r = 0; r < n; r++)
		for (int d = 0; d < d_inner; d++) {
			double u = bias[d];
			for (int k = 0; k < R; k++)
				u += (double)W[(size_t)d * R + k] * low[r * ldl + k];
			dt[r * d_inner + d] = u > 20 ? u : log1p(exp(u));
		}
}

void opref_scan1(int d_inner, int N, const int64_t *ss, int nseq, const float *x, int64_t ldx,
		 const float *BC, int64_t ldbc, const float *dt, int64_t lddt, const float *A_log,
		 const float *D, double *ssm, double *y, double *ld)
{
	for (int s = 0; s < nseq; s++)
		for (int64_t r = ss[s]; r < ss[s + 1]; r++)
			for (int d = 0; d < d_inner; d++) {
				const double dtv = dt[r * lddt + d], xv = x[r * ldx + d];
				double acc = 0;
				for (int n = 0; n < N; n++) {
					const double A = -exp((double)A_log[(size_t)d * N + n]);
					double *e = &ssm[((size_t)s * d_inner + d) * N + n];
					*e = exp(dtv * A) * *e + dtv * xv * BC[r * ldbc + n];
					acc += *e * BC[r * ldbc + N + n];
					ld[((size_t)s * d_inner + d) * N + n] += A * dtv;
				}
				y[r * d_inner + d] = acc + (D ? D[d] : 0) * xv;
			}
}

void opref_gate(double *out, const float *y, int64_t ldy, const float *z, int64_t ldz, int64_t n,
		int d)
{
	for (int64_t r = 0; r < n; r++)
		for (int i = 0; i < d; i++) {
			const double zv = z[r * ldz + i];
			out[r * d + i] = y[r * ldy + i] * (zv / (1 + exp(-zv)));
		}
}
