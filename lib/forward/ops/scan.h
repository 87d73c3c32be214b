/*
 * ops/scan.h — the per-head selective-scan kernel (ops/scan.c) and its
 * chunked SSD form (ops/ssd.c), internal to libss; the public whole-layer
 * ops are ss_ssm_scan_cpu and ss_ssm_step_cpu in ss_ops.h.
 */
#ifndef SS_SCAN_H
#define SS_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* One head h of one layer over n tokens. Pointers are already offset to the
 * head (x, y, dt) or to its group (B, C); strides are in floats per token.
 *   x: [n][headdim], B, C: [n][d_state], dt: [n]; A = -exp(A_log[h]), D[h];
 *   ssm: [headdim][d_state] the head's state, in/out;
 *   y: [n][headdim] or NULL (state only).
 * The kernels (ops/scan.c) call headdim P and d_state N, as the formulas do.
 * Returns Σ_t dt[t] in double (the caller turns it into logdecay). */
typedef struct {
	int64_t n;
	int headdim, d_state;
	const float *x;  ptrdiff_t ldx;
	const float *B;  ptrdiff_t ldb;
	const float *C;  ptrdiff_t ldc;
	const float *dt; ptrdiff_t lddt;
	float A, D;
	float *ssm;
	float *y;        ptrdiff_t ldy;
} ss_scan_head_args;

double ss_scan_head(const ss_scan_head_args *a);

/* Tokens per chunk of the chunked scan. */
#define SS_SCAN_CHUNK 64

/* nheads consecutive heads of one group over n tokens, in the chunked (SSD)
 * form: the same recurrence as ss_scan_head, cut into chunks of
 * SS_SCAN_CHUNK tokens from the first row. Within a chunk the outputs are
 * matrix products (C·Bᵀ masked by the decays, times x; C times the
 * incoming states) and the states advance once per chunk (xᵀ·B weighted by
 * the decays to the chunk's end), all through ssd.c's own kernel (one
 * FMA chain per output: the same bits on every ISA); the decays are running
 * products of exp(dt·A), as the recurrence multiplies them.
 *   x: [n][nheads·headdim] (head h0 first), B, C: [n][d_state] the group's;
 *   dt: [n][nheads]; A, D: [nheads] (A = -exp(A_log); D may be NULL);
 *   ssm: [nheads][headdim][d_state] in/out; fresh: 1 when the states at
 *     the start are zeros (n >= 1): ssm is then only written, and the
 *     first chunk skips C·S (zero) and the decay of S (the same bits as
 *     zeros read);
 *   y: [n][nheads·headdim] or NULL (states only);
 *   dtsum: [nheads] out, Σ_t dt in double;
 *   work: ss_scan_chunked_work(nheads, headdim, d_state) floats.
 * ref: Dao & Gu 2024 (Mamba-2), §6 and Listing 1 (ssd_minimal_discrete). */
typedef struct {
	int64_t n;
	int nheads, headdim, d_state;
	const float *x;  ptrdiff_t ldx;
	const float *B;  ptrdiff_t ldb;
	const float *C;  ptrdiff_t ldc;
	const float *dt; ptrdiff_t lddt;
	const float *A, *D;
	float *ssm;
	int fresh;
	float *y;        ptrdiff_t ldy;
	double *dtsum;
	float *work;
} ss_scan_chunked_args;

size_t ss_scan_chunked_work(int nheads, int headdim, int d_state);
void ss_scan_chunked(const ss_scan_chunked_args *a);

#endif /* SS_SCAN_H */
