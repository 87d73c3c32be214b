/*
 * test_ops.c — each CPU op of ss_ops.h against a naive double-precision
 * reference written from the formula in its contract, on seeded random
 * inputs, over shapes that include 1 and sizes off every vector and chunk
 * width (8, 16, 256), with row strides larger than the rows, empty and short
 * sequences in packed batches. Mismatches print the first few indices.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"
#include "forward/ops/scan.h"
#include "util/opref.h"

static uint64_t rng_state;

static double urand(void)
{
	return (double)(ss_splitmix64(&rng_state) >> 11) * 0x1.0p-53; /* the one generator (ss_sample.h) */
}

/* n floats uniform in [lo, hi) */
static float *rnd(size_t n, double lo, double hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(lo + (hi - lo) * urand());
	return p;
}

/* Counts |got - want| > atol + rtol*|want| and prints the first 5. */
static int mismatches(const char *what, const float *got, const double *want, size_t n, double atol,
		      double rtol)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)got[i] - want[i]);
		if (!(d <= atol + rtol * fabs(want[i]))) {
			if (bad < 5)
				printf("  %s[%zu]: got %.9g want %.9g (diff %.3g)\n", what, i, got[i],
				       want[i], d);
			bad++;
		}
	}
	if (bad)
		printf("  %s: %d of %zu outside atol %g rtol %g\n", what, bad, n, atol, rtol);
	return bad;
}

static double *dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));
	assert_non_null(p);
	return p;
}

/* ------------------------------------------------------------------ embed */

static void test_embed(void **st)
{
	(void)st;
	const int V = 37, ds[] = { 1, 7, 64 };
	rng_state = 1;
	for (size_t di = 0; di < 3; di++) {
		const int d = ds[di];
		float *emb = rnd((size_t)V * d, -1, 1);
		uint16_t *eb = malloc((size_t)V * d * 2);
		const int32_t tok[] = { 0, 36, 5, 5, 17 };
		float *h = malloc(5 * (size_t)d * sizeof(float));
		ss_from_f32(eb, SS_DTYPE_BF16, emb, (size_t)V * d);
		ss_embed_cpu(h, emb, SS_DTYPE_F32, tok, 5, d);
		for (int r = 0; r < 5; r++)
			assert_memory_equal(h + r * d, emb + (size_t)tok[r] * d, (size_t)d * sizeof(float));
		ss_embed_cpu(h, eb, SS_DTYPE_BF16, tok, 5, d);
		for (int r = 0; r < 5; r++)
			for (int i = 0; i < d; i++)
				assert_true(h[r * d + i] == ss_bf16_to_f32(eb[(size_t)tok[r] * d + i]));
		free(emb);
		free(eb);
		free(h);
	}
}

/* ---------------------------------------------------------------- rmsnorm */

static void test_rmsnorm(void **st)
{
	(void)st;
	const int ns[] = { 1, 3, 17 }, ds[] = { 1, 7, 64, 129 };
	const float eps = 1e-5f;
	rng_state = 2;
	for (size_t a = 0; a < 3; a++)
		for (size_t b = 0; b < 4; b++)
			for (int with_res = 0; with_res < 2; with_res++) {
				const int n = ns[a], d = ds[b];
				float *h = rnd((size_t)n * d, -2, 2), *res = rnd((size_t)n * d, -1, 1);
				float *w = rnd((size_t)d, 0.5, 1.5), *y = rnd((size_t)n * d, 0, 1);
				double *hw = dalloc((size_t)n * d), *yw = dalloc((size_t)n * d);
				opref_rmsnorm(yw, hw, h, with_res ? res : NULL, w, n, d, eps);
				ss_rmsnorm_cpu(y, h, with_res ? res : NULL, w, n, d, eps);
				assert_int_equal(mismatches("rmsnorm.h", h, hw, (size_t)n * d, 0, 0), 0);
				assert_int_equal(mismatches("rmsnorm.y", y, yw, (size_t)n * d, 1e-6, 1e-5), 0);
				/* in place, y == h */
				if (!with_res) {
					ss_rmsnorm_cpu(h, h, NULL, w, n, d, eps);
					assert_int_equal(mismatches("rmsnorm.inplace", h, yw, (size_t)n * d, 1e-6, 1e-5), 0);
				}
				free(h); free(res); free(w); free(y); free(hw); free(yw);
			}
}

/* ----------------------------------------------------------------- linear */

static void test_linear(void **st)
{
	(void)st;
	const int Ms[] = { 1, 2, 5, 70 }, Ns[] = { 1, 3, 33 }, Ks[] = { 1, 7, 65, 100 };
	const ss_dtype dts[] = { SS_DTYPE_F32, SS_DTYPE_BF16, SS_DTYPE_F16 };
	rng_state = 3;
	for (size_t d = 0; d < 3; d++)
	for (size_t a = 0; a < 4; a++)
		for (size_t b = 0; b < 3; b++)
			for (size_t k = 0; k < 4; k++)
				for (int beta = 0; beta < 2; beta++) {
					const int M = Ms[a], N = Ns[b], K = Ks[k];
					const int ldx = K + 3, ldy = N + 2;
					const size_t esz = ss_dtype_size(dts[d]);
					float *x = rnd((size_t)M * ldx, -1, 1), *W = rnd((size_t)N * K, -1, 1);
					float *y = rnd((size_t)M * ldy, -1, 1);
					double *want = dalloc((size_t)M * N);
					float *got = malloc((size_t)M * N * sizeof(float));
					float *y1 = malloc((size_t)N * sizeof(float));
					/* W in dtype (2-byte aligned only, as a slice can be);
					 * the reference uses exactly those values */
					char *Wd = malloc((size_t)N * K * esz + 2);
					ss_from_f32(Wd + (esz == 2 ? 2 : 0), dts[d], W, (size_t)N * K);
					ss_to_f32(W, Wd + (esz == 2 ? 2 : 0), dts[d], (size_t)N * K);
					opref_linear(want, x, ldx, W, beta ? y : NULL, ldy, M, N, K);
					/* the last row alone, before y changes */
					for (int j = 0; j < N; j++)
						y1[j] = y[(M - 1) * ldy + j];
					assert_int_equal(ss_linear_cpu(y, ldy, x, ldx, Wd + (esz == 2 ? 2 : 0), dts[d],
								       M, N, K, (float)beta), 0);
					for (int i = 0; i < M; i++)
						memcpy(got + i * N, y + i * ldy, (size_t)N * sizeof(float));
					assert_int_equal(mismatches("linear", got, want, (size_t)M * N, 1e-5, 1e-5), 0);
					/* 16-bit weights: a row's result does not depend on M
					 * (decode of one sequence = the same sequence in a batch) */
					if (esz == 2) {
						assert_int_equal(ss_linear_cpu(y1, N, x + (M - 1) * ldx, ldx,
									       Wd + 2, dts[d], 1, N, K,
									       (float)beta), 0);
						assert_memory_equal(y1, got + (size_t)(M - 1) * N,
								    (size_t)N * sizeof(float));
					}
					free(x); free(W); free(y); free(want); free(got); free(y1); free(Wd);
				}
	float one = 1;
	assert_int_equal(ss_linear_cpu(&one, 1, &one, 1, &one, (ss_dtype)7, 1, 1, 1, 0),
			 SS_ERR_UNSUPPORTED);
	assert_int_equal(ss_linear_cpu(&one, 0, &one, 1, &one, SS_DTYPE_F32, 1, 1, 1, 0), SS_ERR_INVALID);
	assert_int_equal(ss_linear_cpu(&one, 1, &one, 1, &one, SS_DTYPE_F32, 0, 1, 1, 0), 0);
}

/* ----------------------------------------------------------------- conv1d */

static void conv_case(int nch, int K, const int64_t *lens, int nseq, int slices)
{
	const int K1 = K - 1, ldx = nch + 5, ldy = nch + 1;
	int64_t *ss = malloc((size_t)(nseq + 1) * sizeof(int64_t));
	ss[0] = 0;
	for (int s = 0; s < nseq; s++)
		ss[s + 1] = ss[s] + lens[s];
	const int64_t T = ss[nseq];
	float *x = rnd((size_t)(T ? T : 1) * ldx, -2, 2), *w = rnd((size_t)nch * K, -0.5, 0.5);
	float *b = rnd((size_t)nch, -0.1, 0.1);
	float *state = rnd((size_t)nseq * nch * (K1 ? K1 : 1), -1, 1);
	float *st2 = malloc((size_t)nseq * nch * (K1 ? K1 : 1) * sizeof(float));
	float *wt = malloc((size_t)K * nch * sizeof(float));
	float *y = calloc((size_t)(T ? T : 1) * ldy, sizeof(float));
	float *yc = malloc((size_t)(T ? T : 1) * nch * sizeof(float));
	double *yw = dalloc((size_t)T * nch), *nw = dalloc((size_t)nseq * nch * (K1 ? K1 : 1));

	memcpy(st2, state, (size_t)nseq * nch * (K1 ? K1 : 1) * sizeof(float));
	for (int k = 0; k < K; k++)
		for (int c = 0; c < nch; c++)
			wt[k * nch + c] = w[c * K + k];
	opref_conv(yw, nw, x, ldx, ss, nseq, state, w, b, nch, K);
	/* the op over channel slices, as forward.c calls it */
	for (int i = 0; i < slices; i++) {
		const int c0 = nch * i / slices, c1 = nch * (i + 1) / slices;
		if (c1 > c0)
			ss_conv1d_silu_cpu(y + c0, ldy, x + c0, ldx, ss, nseq, st2 + (size_t)c0 * K1,
					   (ptrdiff_t)nch * K1, wt + c0, nch, b + c0, c1 - c0, K);
	}
	for (int64_t r = 0; r < T; r++)
		memcpy(yc + r * nch, y + r * ldy, (size_t)nch * sizeof(float));
	printf("  conv nch %d K %d nseq %d slices %d\n", nch, K, nseq, slices);
	assert_int_equal(mismatches("conv.y", yc, yw, (size_t)T * nch, 1e-5, 1e-5), 0);
	assert_int_equal(mismatches("conv.state", st2, nw, (size_t)nseq * nch * K1, 0, 0), 0);
	free(ss); free(x); free(w); free(b); free(state); free(st2); free(wt); free(y); free(yc);
	free(yw); free(nw);
}

static void test_conv1d(void **st)
{
	(void)st;
	const int64_t lens[] = { 5, 0, 1, 2, 9, 3 };
	const int64_t ones[] = { 1, 1, 1, 1 };
	rng_state = 4;
	conv_case(1, 4, lens, 6, 1);
	conv_case(9, 4, lens, 6, 1);
	conv_case(9, 4, lens, 6, 3);
	conv_case(300, 4, lens, 6, 1); /* > one 256-channel gather chunk */
	conv_case(300, 4, lens, 6, 7);
	conv_case(17, 2, lens, 6, 2);
	conv_case(17, 1, lens, 6, 1); /* no state at all */
	conv_case(33, 4, ones, 4, 2);
}

static void test_conv1d_step(void **st)
{
	(void)st;
	const int nch = 19, K = 4, K1 = 3, nseq = 3, ldx = 23;
	const int64_t ss[] = { 0, 1, 2, 3 };
	rng_state = 5;
	float *x = rnd((size_t)nseq * ldx, -2, 2), *w = rnd((size_t)nch * K, -0.5, 0.5);
	float *b = rnd(nch, -0.1, 0.1), *state = rnd((size_t)nseq * nch * K1, -1, 1);
	float *wt = malloc((size_t)K * nch * sizeof(float)), *y = malloc((size_t)nseq * nch * sizeof(float));
	double *yw = dalloc((size_t)nseq * nch), *nw = dalloc((size_t)nseq * nch * K1);
	for (int k = 0; k < K; k++)
		for (int c = 0; c < nch; c++)
			wt[k * nch + c] = w[c * K + k];
	opref_conv(yw, nw, x, ldx, ss, nseq, state, w, b, nch, K);
	ss_conv1d_step_cpu(y, nch, x, ldx, nseq, state, (ptrdiff_t)nch * K1, wt, nch, b, nch, K);
	assert_int_equal(mismatches("conv_step.y", y, yw, (size_t)nseq * nch, 1e-5, 1e-5), 0);
	assert_int_equal(mismatches("conv_step.state", state, nw, (size_t)nseq * nch * K1, 0, 0), 0);
	free(x); free(w); free(b); free(state); free(wt); free(y); free(yw); free(nw);
}

/* ------------------------------------------------------------- dt softplus */

static void test_dt_softplus(void **st)
{
	(void)st;
	const int n = 13, H = 5, ldr = 9, lddt = 7;
	rng_state = 6;
	float *raw = rnd((size_t)n * ldr, -30, 30), *bias = rnd(H, -3, 3);
	float *dt = malloc((size_t)n * lddt * sizeof(float)), *got = malloc((size_t)n * H * sizeof(float));
	double *want = dalloc((size_t)n * H);
	const float lims[][2] = { { 0.0f, INFINITY }, { 1e-3f, 0.1f } };
	for (int li = 0; li < 2; li++) {
		opref_dt(want, raw, ldr, bias, n, H, lims[li][0], lims[li][1]);
		ss_dt_softplus_cpu(dt, lddt, raw, ldr, bias, n, H, lims[li][0], lims[li][1]);
		for (int r = 0; r < n; r++)
			memcpy(got + r * H, dt + r * lddt, H * sizeof(float));
		assert_int_equal(mismatches("dt", got, want, (size_t)n * H, 1e-6, 1e-5), 0);
	}
	free(raw); free(bias); free(dt); free(got); free(want);
}

/* ------------------------------------------------------------------- scan */

typedef struct {
	int H, P, N, G;
} sdims;

static void scan_case(const sdims *d, const int64_t *lens, int nseq, int step)
{
	const int HP = d->H * d->P, GN = d->G * d->N;
	const int ldx = HP + 3, ldb = GN, ldy = HP + 1;
	const size_t SL = (size_t)d->H * d->P * d->N;
	int64_t *ss = malloc((size_t)(nseq + 1) * sizeof(int64_t));
	ss[0] = 0;
	for (int s = 0; s < nseq; s++)
		ss[s + 1] = ss[s] + (step ? 1 : lens[s]);
	const int64_t T = ss[nseq];
	float *x = rnd((size_t)T * ldx + 1, -1, 1), *B = rnd((size_t)T * ldb + 1, -1, 1);
	float *C = rnd((size_t)T * ldb + 1, -1, 1), *dt = rnd((size_t)T * d->H + 1, 0.001, 0.5);
	float *A_log = rnd(d->H, 0, 2.5), *D = rnd(d->H, 0.5, 1.5);
	float *ssm = rnd(nseq * SL, -1, 1), *ld = rnd((size_t)nseq * d->H, -50, 0);
	float *y = calloc((size_t)T * ldy + 1, sizeof(float)), *yc = malloc(((size_t)T * HP + 1) * sizeof(float));
	double *sw = dalloc(nseq * SL), *yw = dalloc((size_t)T * HP), *lw = dalloc((size_t)nseq * d->H);
	for (size_t i = 0; i < nseq * SL; i++)
		sw[i] = ssm[i];
	for (int i = 0; i < nseq * d->H; i++)
		lw[i] = ld[i];
	const ss_scan_dims sd = { d->H, d->P, d->N, d->G };
	opref_scan(&sd, ss, nseq, x, ldx, B, C, ldb, dt, A_log, D, sw, yw, lw);
	if (step)
		assert_int_equal(ss_ssm_step_cpu(&sd, nseq, x, ldx, B, ldb, C, ldb, dt, d->H, A_log, D,
						 ssm, (ptrdiff_t)SL, y, ldy, ld, d->H), 0);
	else
		assert_int_equal(ss_ssm_scan_cpu(&sd, ss, nseq, x, ldx, B, ldb, C, ldb, dt, d->H,
							A_log, D, ssm, (ptrdiff_t)SL, y, ldy, ld, d->H), 0);
	for (int64_t r = 0; r < T; r++)
		memcpy(yc + r * HP, y + r * ldy, (size_t)HP * sizeof(float));
	printf("  scan H %d P %d N %d G %d nseq %d%s\n", d->H, d->P, d->N, d->G, nseq, step ? " step" : "");
	assert_int_equal(mismatches("scan.y", yc, yw, (size_t)T * HP, 1e-4, 1e-4), 0);
	assert_int_equal(mismatches("scan.ssm", ssm, sw, nseq * SL, 1e-4, 1e-4), 0);
	assert_int_equal(mismatches("scan.logdecay", ld, lw, (size_t)nseq * d->H, 1e-5, 1e-6), 0);
	free(ss); free(x); free(B); free(C); free(dt); free(A_log); free(D); free(ssm); free(ld);
	free(y); free(yc); free(sw); free(yw); free(lw);
}

static void test_scan(void **st)
{
	(void)st;
	const int64_t lens[] = { 7, 0, 1, 12 };
	/* N 128: the AVX-512 kernel's d_state 128 path (ops/scan_simd.h) */
	const sdims ds[] = { { 1, 1, 1, 1 }, { 4, 3, 5, 2 }, { 4, 2, 16, 1 }, { 2, 3, 32, 2 },
			     { 3, 4, 24, 3 }, { 2, 3, 128, 1 } };
	rng_state = 7;
	for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++) {
		scan_case(&ds[i], lens, 4, 0);
		scan_case(&ds[i], lens, 3, 1);
	}
}

/* The chunked (SSD) form of prefill (ops/scan.h): one sequence of n
 * tokens, chunks of SS_SCAN_CHUNK with a short last one, against the
 * float64 recurrence; and the same bits whether a call takes all the
 * group's heads or one (each output of its products is one chain). */
static void chunked_case(int H, int P, int N, int64_t n)
{
	const int HP = H * P, ldx = HP + 5, ldb = N + 3, ldy = HP + 1;
	const size_t SL = (size_t)HP * N;
	const int64_t ss[2] = { 0, n };
	float *x = rnd((size_t)n * ldx, -1, 1), *B = rnd((size_t)n * ldb, -1, 1);
	float *C = rnd((size_t)n * ldb, -1, 1), *dt = rnd((size_t)n * H, 0.001, 0.5);
	float *A_log = rnd(H, -1, 1), *D = rnd(H, 0.5, 1.5), *s0 = rnd(SL, -1, 1);
	float *A = malloc(H * sizeof(float)), *ssm = malloc(SL * sizeof(float));
	float *ssm1 = malloc(SL * sizeof(float)), *y = calloc((size_t)n * ldy, sizeof(float));
	float *y1 = calloc((size_t)n * ldy, sizeof(float)), *yc = malloc((size_t)n * HP * sizeof(float));
	float *work = malloc(ss_scan_chunked_work(H, P, N) * sizeof(float));
	double *sw = dalloc(SL), *yw = dalloc((size_t)n * HP), lw[8] = { 0 }, dts[8], dts1[8];
	assert_true(H <= 8);
	for (int h = 0; h < H; h++)
		A[h] = -expf(A_log[h]);
	for (size_t i = 0; i < SL; i++)
		sw[i] = s0[i];
	const ss_scan_dims sd = { H, P, N, 1 };
	opref_scan(&sd, ss, 1, x, ldx, B, C, ldb, dt, A_log, D, sw, yw, lw);
	memcpy(ssm, s0, SL * sizeof(float));
	memcpy(ssm1, s0, SL * sizeof(float));
	ss_scan_chunked(&(ss_scan_chunked_args){ .n = n, .nheads = H, .headdim = P, .d_state = N,
						 .x = x, .ldx = ldx, .B = B, .ldb = ldb, .C = C,
						 .ldc = ldb, .dt = dt, .lddt = H, .A = A, .D = D,
						 .ssm = ssm, .y = y, .ldy = ldy, .dtsum = dts,
						 .work = work });
	for (int h = 0; h < H; h++) /* head by head */
		ss_scan_chunked(&(ss_scan_chunked_args){
			.n = n, .nheads = 1, .headdim = P, .d_state = N, .x = x + h * P, .ldx = ldx,
			.B = B, .ldb = ldb, .C = C, .ldc = ldb, .dt = dt + h, .lddt = H, .A = A + h,
			.D = D + h, .ssm = ssm1 + (size_t)h * P * N, .y = y1 + h * P, .ldy = ldy,
			.dtsum = dts1 + h, .work = work });
	for (int64_t r = 0; r < n; r++)
		memcpy(yc + r * HP, y + r * ldy, (size_t)HP * sizeof(float));
	printf("  chunked H %d P %d N %d n %lld\n", H, P, N, (long long)n);
	assert_int_equal(mismatches("chunked.y", yc, yw, (size_t)n * HP, 1e-4, 1e-4), 0);
	assert_int_equal(mismatches("chunked.ssm", ssm, sw, SL, 1e-4, 1e-4), 0);
	for (int h = 0; h < H; h++) {
		double want = 0;
		for (int64_t t = 0; t < n; t++)
			want += dt[t * H + h];
		assert_true(fabs(dts[h] - want) <= 1e-9 * n);
	}
	assert_memory_equal(y, y1, (size_t)n * ldy * sizeof(float));
	assert_memory_equal(ssm, ssm1, SL * sizeof(float));
	assert_memory_equal(dts, dts1, H * sizeof(double));
	free(x); free(B); free(C); free(dt); free(A_log); free(D); free(s0); free(A); free(ssm);
	free(ssm1); free(y); free(y1); free(yc); free(work); free(sw); free(yw);
}

static void test_scan_chunked(void **st)
{
	(void)st;
	rng_state = 9;
	/* partial vectors and tiles everywhere (N 16, P 8, a last chunk of 22) */
	chunked_case(3, 8, 16, 2 * SS_SCAN_CHUNK + 22);
	/* the 130m shape's head and state, one chunk and a row */
	chunked_case(2, 64, 128, SS_SCAN_CHUNK + 1);
	chunked_case(1, 24, 40, 17);
}

/* y NULL: the state and logdecay equal those of the full scan. */
static void test_scan_state_only(void **st)
{
	(void)st;
	const ss_scan_dims sd = { 2, 3, 16, 1 };
	const int64_t ss[] = { 0, 9, 9, 14 };
	const int T = 14, HP = 6, N = 16, SL = 2 * 3 * 16;
	rng_state = 8;
	float *x = rnd((size_t)T * HP, -1, 1), *B = rnd((size_t)T * N, -1, 1), *C = rnd((size_t)T * N, -1, 1);
	float *dt = rnd((size_t)T * 2, 0.01, 0.3), *A_log = rnd(2, 0, 2), *D = rnd(2, 0, 1);
	float *s1 = rnd(3 * SL, -1, 1), *s2 = malloc(3 * SL * sizeof(float)), *y = malloc((size_t)T * HP * sizeof(float));
	float l1[6] = { 0 }, l2[6] = { 0 };
	memcpy(s2, s1, 3 * SL * sizeof(float));
	assert_int_equal(ss_ssm_scan_cpu(&sd, ss, 3, x, HP, B, N, C, N, dt, 2, A_log, D, s1, SL,
						y, HP, l1, 2), 0);
	assert_int_equal(ss_ssm_scan_cpu(&sd, ss, 3, x, HP, B, N, NULL, 0, dt, 2, A_log, D, s2,
						SL, NULL, 0, l2, 2), 0);
	assert_memory_equal(s1, s2, 3 * SL * sizeof(float));
	assert_memory_equal(l1, l2, sizeof(l1));
	/* bad dims and strides */
	const ss_scan_dims bad = { 3, 3, 16, 2 };
	assert_int_equal(ss_ssm_scan_cpu(&bad, ss, 3, x, HP, B, N, C, N, dt, 2, A_log, D, s1, SL,
						y, HP, l1, 2), SS_ERR_INVALID);
	assert_int_equal(ss_ssm_scan_cpu(&sd, ss, 3, x, HP - 1, B, N, C, N, dt, 2, A_log, D, s1,
						SL, y, HP, l1, 2), SS_ERR_INVALID);
	assert_int_equal(ss_ssm_scan_cpu(&sd, NULL, 3, x, HP, B, N, C, N, dt, 2, A_log, D, s1,
						SL, y, HP, l1, 2), SS_ERR_INVALID);
	free(x); free(B); free(C); free(dt); free(A_log); free(D); free(s1); free(s2); free(y);
}

/* ----------------------------------------------------------- gated norm */

static void test_gated_rmsnorm(void **st)
{
	(void)st;
	const int ns[] = { 1, 4 }, ds[] = { 6, 24, 130 }, gs[] = { 1, 2, 3 };
	const float eps = 1e-5f;
	rng_state = 9;
	for (size_t a = 0; a < 2; a++)
		for (size_t b = 0; b < 3; b++)
			for (size_t c = 0; c < 3; c++) {
				const int n = ns[a], d = ds[b], G = gs[c];
				if (d % G)
					continue;
				const int ldy = d + 2, ldz = d + 7;
				float *y = rnd((size_t)n * ldy, -2, 2), *z = rnd((size_t)n * ldz, -3, 3);
				float *w = rnd(d, 0.5, 1.5), *got = malloc((size_t)n * d * sizeof(float));
				double *want = dalloc((size_t)n * d);
				opref_gated_rmsnorm(want, y, ldy, z, ldz, w, n, d, G, eps);
				ss_gated_rmsnorm_cpu(y, ldy, z, ldz, w, n, d, G, eps);
				for (int r = 0; r < n; r++)
					memcpy(got + r * d, y + r * ldy, (size_t)d * sizeof(float));
				assert_int_equal(mismatches("gated_rmsnorm", got, want, (size_t)n * d, 1e-5, 1e-5), 0);
				free(y); free(z); free(w); free(got); free(want);
			}
}

/* ---------------------------------------------------------------- argmax */

static void test_argmax_rows(void **st)
{
	(void)st;
	float L[4][6] = {
		{ 1, 3, NAN, 3, -INFINITY, 0 },
		{ NAN, NAN, NAN, NAN, NAN, NAN },
		{ -1, -2, -3, -4, -5, 9 },
		{ 5, 5, 5, 5, 5, 5 },
	};
	int32_t ids[4];
	ss_argmax_rows_cpu(ids, &L[0][0], 6, 4, 6);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], -1);
	assert_int_equal(ids[2], 5);
	assert_int_equal(ids[3], 0);
	/* n smaller than the row: column 5 is out of reach */
	ss_argmax_rows_cpu(ids, &L[0][0], 6, 4, 5);
	assert_int_equal(ids[2], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embed),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_conv1d),
		cmocka_unit_test(test_conv1d_step),
		cmocka_unit_test(test_dt_softplus),
		cmocka_unit_test(test_scan),
		cmocka_unit_test(test_scan_chunked),
		cmocka_unit_test(test_scan_state_only),
		cmocka_unit_test(test_gated_rmsnorm),
		cmocka_unit_test(test_argmax_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
