/*
 * scan1.c — the Mamba-1 selective scan on the CPU, ss_ssm1_scan_cpu
 * (ss_ops.h): one decay per (channel, state element). Twin: kernels/scan1.cu.
 * Channels go 8 at a time through ss_vec_scan1_x8 (vec.c: the channels in
 * the AVX2 lanes, the [d_state][8] states in cache over the tokens), the
 * remainder one by one; B and C rows are shared by every channel of a token.
 * ref: mamba_ssm ops/selective_scan_interface.py selective_scan_ref;
 *      ../shared/golden-mamba1/README.md §2.
 */
#include <math.h>

#include "ss.h"
#include "forward/device_plugin.h"
#include "forward/ops/scan.h"
#include "forward/vec.h"

/* Largest d_state handled (the per-channel state is on the stack). */
#define SCAN1_MAX_STATE SS_SCAN1_MAX_STATE


int ss_ssm1_scan_cpu(int d_inner, int d_state, const int64_t *seq_start, int nseq,
		     const float *x, ptrdiff_t ldx, const float *BC, ptrdiff_t ldbc,
		     const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
		     float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
		     ptrdiff_t ld_logdecay)
{
	float A[SCAN1_MAX_STATE], s[SCAN1_MAX_STATE];
	float A8[8 * SCAN1_MAX_STATE], s8[8 * SCAN1_MAX_STATE];

	if (!ss_scan1_args_ok(d_inner, d_state, nseq, x, ldx, BC, ldbc, dt, lddt, A_log, ssm, y, ldy))
		return SS_ERR_INVALID;
	if (nseq == 0 || d_inner == 0)
		return 0;
	for (int q = 0; q < nseq; q++) {
		const int64_t r0 = seq_start ? seq_start[q] : q;
		const int64_t n = seq_start ? seq_start[q + 1] - r0 : 1;
		if (n < 0)
			return SS_ERR_INVALID;
		if (n == 0)
			continue;
		int d = 0;
		/* blocks of 8 channels in the vector lanes (vec.c), the rest one
		 * by one */
		for (; d + 8 <= d_inner; d += 8) {
			float *st = ssm + q * ld_ssm + (size_t)d * d_state;
			for (int c = 0; c < 8; c++)
				for (int k = 0; k < d_state; k++) {
					A8[8 * k + c] = -expf(A_log[(size_t)(d + c) * d_state + k]);
					s8[8 * k + c] = st[(size_t)c * d_state + k];
				}
			ss_vec_scan1_x8(s8, A8, d_state, n, x + r0 * ldx + d, ldx, dt + r0 * lddt + d, lddt,
					BC + r0 * ldbc, ldbc, D ? D + d : NULL,
					y ? y + r0 * ldy + d : NULL, ldy);
			for (int c = 0; c < 8; c++) {
				double dtsum = 0;
				for (int64_t t = r0; t < r0 + n; t++)
					dtsum += dt[t * lddt + d + c];
				for (int k = 0; k < d_state; k++)
					st[(size_t)c * d_state + k] = s8[8 * k + c];
				if (logdecay) {
					float *ld = logdecay + q * ld_logdecay + (size_t)(d + c) * d_state;
					for (int k = 0; k < d_state; k++)
						ld[k] = (float)((double)ld[k] -
								exp((double)A_log[(size_t)(d + c) * d_state + k]) *
									dtsum);
				}
			}
		}
		for (; d < d_inner; d++) {
			float *st = ssm + q * ld_ssm + (size_t)d * d_state;
			const float Dd = D ? D[d] : 0.0f;
			double dtsum = 0;
			for (int k = 0; k < d_state; k++) {
				A[k] = -expf(A_log[(size_t)d * d_state + k]);
				s[k] = st[k];
			}
			for (int64_t t = r0; t < r0 + n; t++) {
				const float dv = dt[t * lddt + d], xv = x[t * ldx + d], dx = dv * xv;
				const float *B = BC + t * ldbc, *C = B + d_state;
				float acc = 0.0f;
				dtsum += dv;
				for (int k = 0; k < d_state; k++) {
					s[k] = expf(dv * A[k]) * s[k] + B[k] * dx;
					acc += s[k] * C[k];
				}
				if (y)
					y[t * ldy + d] = acc + Dd * xv;
			}
			for (int k = 0; k < d_state; k++)
				st[k] = s[k];
			if (logdecay) {
				float *ld = logdecay + q * ld_logdecay + (size_t)d * d_state;
				for (int k = 0; k < d_state; k++)
					ld[k] = (float)((double)ld[k] -
							exp((double)A_log[(size_t)d * d_state + k]) * dtsum);
			}
		}
	}
	return 0;
}
