/*
 * ssd.c — the chunked (SSD) form of the selective scan on the CPU,
 * ss_scan_chunked (ops/scan.h): the prefill path of the forward pass for
 * long sequences. Twin: kernels/ssd.cu (ss_ssd_scan_cuda).
 */
#include "forward/blas.h"
#include <math.h>
#include <string.h>

#include "ss.h"
#include "forward/ops/scan.h"
#include "forward/vec.h"

size_t ss_scan_chunked_work(int nheads, int headdim)
{
	const size_t Q = SS_SCAN_CHUNK;
	return 2 * Q * Q + Q * (size_t)nheads * (size_t)headdim + 4 * Q;
}

/* Per chunk of q rows, with dA_i = exp(dt_i·A) and L_ij = dA_{j+1}···dA_i
 * (j <= i, the decay from token j to token i; L_ii = 1), e_i = dA_0···dA_i,
 * S the states at the chunk's start:
 *   y_i = e_i·(C_i·S) + Σ_{j<=i} (C_i·B_j)·L_ij·dt_j·x_j + D·x_i
 *   S' = e_{q-1}·S + Σ_j L_{q-1,j}·dt_j·x_jᵀB_j
 * C·S for all nh heads is one product (the states are [nh·P][N]), and so
 * is the state update (the weighted x of all heads side by side). */
void ss_scan_chunked(const ss_scan_chunked_args *a)
{
	const int Q = SS_SCAN_CHUNK, P = a->headdim, N = a->d_state, nh = a->nheads, HP = nh * P;
	float *G = a->work, *M = G + Q * Q, *Xw = M + Q * Q, *Ld = Xw + (size_t)Q * HP;
	float *e = Ld + Q, *dA = e + Q, *dt = dA + Q;
	int64_t t0;
	int k, i, j;

	for (k = 0; k < nh; k++)
		a->dtsum[k] = 0.0;
	for (t0 = 0; t0 < a->n; t0 += Q) {
		const int q = a->n - t0 < Q ? (int)(a->n - t0) : Q;
		const float *x = a->x + t0 * a->ldx, *B = a->B + t0 * a->ldb;
		float *y = a->y ? a->y + t0 * a->ldy : NULL;

		if (y) {
			const float *C = a->C + t0 * a->ldc;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, q, N, 1.0f, C,
				    (blasint)a->ldc, B, (blasint)a->ldb, 0.0f, G, Q);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, HP, N, 1.0f, C,
				    (blasint)a->ldc, a->ssm, N, 0.0f, y, (blasint)a->ldy);
		}
		for (k = 0; k < nh; k++) {
			const float *xk = x + k * P;
			float run = 1.0f;

			for (i = 0; i < q; i++) {
				dt[i] = a->dt[(t0 + i) * a->lddt + k];
				a->dtsum[k] += dt[i];
				dA[i] = expf(dt[i] * a->A[k]);
				e[i] = run *= dA[i];
			}
			/* row i of Ld: L_ij·dt_j, j <= i */
			for (i = 0; i < q; i++) {
				ss_vec_scale(Ld, Ld, dA[i], i);
				Ld[i] = dt[i];
				if (y) {
					ss_vec_scale_mul(M + i * Q, G + i * Q, 1.0f, Ld, i + 1);
					memset(M + i * Q + i + 1, 0, (size_t)(q - i - 1) * sizeof(float));
				}
			}
			if (y) {
				float *yk = y + k * P;
				for (i = 0; i < q; i++)
					ss_vec_axpby(yk + i * a->ldy, e[i], xk + i * a->ldx,
						     a->D ? a->D[k] : 0.0f, P);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q, P, q, 1.0f, M, Q, xk,
					    (blasint)a->ldx, 1.0f, yk, (blasint)a->ldy);
			}
			/* Ld is now row q-1: the weights to the chunk's end */
			for (j = 0; j < q; j++)
				ss_vec_scale(Xw + (size_t)j * HP + k * P, xk + j * a->ldx, Ld[j], P);
			ss_vec_scale(a->ssm + (size_t)k * P * N, a->ssm + (size_t)k * P * N, e[q - 1],
				     (int64_t)P * N);
		}
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, HP, N, q, 1.0f, Xw, HP, B,
			    (blasint)a->ldb, 1.0f, a->ssm, N);
	}
}
