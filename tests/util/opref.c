/* opref.c — naive double-precision references of the ops; see opref.h. */
#include <math.h>

#include "util/opref.h"

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
