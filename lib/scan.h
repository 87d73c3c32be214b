/*
 * scan.h — the per-head selective-scan kernel (internal to libss; the public
 * whole-layer entry point is ss_ssm_scan_cpu in ss_forward.h).
 */
#ifndef SS_SCAN_H
#define SS_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* One head h of one layer over n tokens. Pointers are already offset to the
 * head (x, y, dt) or to its group (B, C); strides are in floats per token.
 *   s: [P][N] the head's state, in/out.  y may be NULL (state only).
 * Returns Σ_t dt[t] in double (the caller turns it into logdecay). */
typedef struct {
	int64_t n;
	int P, N;
	const float *x;  ptrdiff_t ldx;
	const float *B;  ptrdiff_t ldb;
	const float *C;  ptrdiff_t ldc;
	const float *dt; ptrdiff_t lddt;
	float A, D;
	float *s;
	float *y;        ptrdiff_t ldy;
} ss_scan_head_args;

double ss_scan_head(const ss_scan_head_args *a);

#endif /* SS_SCAN_H */
