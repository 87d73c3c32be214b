/* opref.h — naive double-precision references of ops of ss_ops.h, for the
 * tests (test_ops checks each CPU op against them; test_cuda_parity's twin
 * table uses them for its CPU side when there is no GPU). Straight loops in
 * the order of the formulas in ss_ops.h, nothing fused or vectorised. */
#ifndef SS_TEST_OPREF_H
#define SS_TEST_OPREF_H

#include <stdint.h>

#include "ss.h"

/* Causal depthwise conv1d + SiLU of a packed batch (ss_conv1d_silu_cpu):
 *   y: out [T][nch] (T = ss[nseq]), nst: out [nseq][nch][K-1], the new
 *   states; x: [T] rows at stride ldx; state: [nseq][nch][K-1];
 *   w: [nch][K] (conv1d.weight, not transposed); b: [nch]. */
void opref_conv(double *y, double *nst, const float *x, int ldx, const int64_t *ss, int nseq,
		const float *state, const float *w, const float *b, int nch, int K);

/* The selective scan of a packed batch (ss_ssm_scan_cpu), all in double:
 *   x: [T][H·P] at stride ldx; B, C: [T][G·N] at stride ldb; dt: [T][H];
 *   A_log, D: [H] (D may be NULL); ssm: in/out [nseq][H][P][N];
 *   y: out [T][H·P]; ld: in/out [nseq][H], += A·Σdt. */
void opref_scan(const ss_scan_dims *d, const int64_t *ss, int nseq, const float *x, int ldx,
		const float *B, const float *C, int ldb, const float *dt, const float *A_log,
		const float *D, double *ssm, double *y, double *ld);

#endif
