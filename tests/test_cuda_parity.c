/*
 * test_cuda_parity.c — every CUDA op against its CPU twin (ss_ops.h) on the
 * same seeded inputs, then the whole forward pass on the GPU against
 * golden/ and against the CPU path.
 *
 * Tolerance: |gpu - cpu| <= atol + rtol·|cpu|, per op below (f32 ops 1e-5;
 * reductions in another order 1e-4; GEMMs 1e-4 relative on operands rounded
 * alike); the first mismatches are printed. Whole model, f32 weights:
 * states and hidden rows within 1e-4 + 1e-4·|x| of golden (the CPU meets
 * 1e-5), argmax equal wherever golden's top-2 margin exceeds 1e-3; GPU vs
 * CPU on a random mamba2-130m shape within 2e-4 (f32) or a relative L2 error
 * of 2% (bf16 weights).
 *
 * Needs the CUDA plugin and a GPU: without either it prints why and exits 77
 * (skipped). $SS_SHARED (golden/) is needed for the golden case only.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ss.h"
#include "device_plugin.h"
#include "gen/model.h"

static ss_device *dev;
static const ss_cuda_api *cu;
static uint64_t rng_state;

static double urand(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(rng_state >> 11) * 0x1.0p-53;
}

static float *rnd(size_t n, double lo, double hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(lo + (hi - lo) * urand());
	return p;
}

/* device copy of n bytes at h */
static void *up(const void *h, size_t bytes)
{
	void *d = cu->dmalloc(bytes ? bytes : 1);
	assert_non_null(d);
	if (bytes)
		assert_int_equal(cu->h2d(d, h, bytes), 0);
	return d;
}

static void down(void *h, const void *d, size_t bytes)
{
	assert_int_equal(cu->sync(), 0);
	assert_int_equal(cu->d2h(h, d, bytes), 0);
}

/* Counts mismatches of got vs want (n values, strides sg/sw) and prints the
 * first 5 and the largest error. */
static int cmp(const char *what, const float *got, size_t sg, const float *want, size_t sw,
	       size_t n, size_t w, double atol, double rtol)
{
	int bad = 0;
	double worst = 0;
	for (size_t r = 0; r < n; r++)
		for (size_t i = 0; i < w; i++) {
			const double g = got[r * sg + i], x = want[r * sw + i];
			const double d = fabs(g - x);
			if (d > worst)
				worst = d;
			if (!(d <= atol + rtol * fabs(x))) {
				if (bad < 5)
					printf("  %s[%zu][%zu]: gpu %.9g cpu %.9g (diff %.3g)\n", what, r, i,
					       g, x, d);
				bad++;
			}
		}
	printf("  %-22s max|diff| %.3g%s\n", what, worst, bad ? "  MISMATCH" : "");
	return bad;
}

/* ------------------------------------------------------------------- ops */

static void test_embed_norms_argmax(void **st)
{
	(void)st;
	const int V = 61, d = 130, n = 7, G = 2, ldz = d + 3;
	const int32_t tok[7] = { 0, 60, 3, 3, 17, 1, 59 };
	rng_state = 11;
	float *emb = rnd((size_t)V * d, -1, 1), *h = malloc((size_t)n * d * 4), *hg = malloc((size_t)n * d * 4);
	uint16_t *eb = malloc((size_t)V * d * 2);
	ss_from_f32(eb, SS_DTYPE_BF16, emb, (size_t)V * d);
	int32_t *dtok = up(tok, sizeof(tok));
	float *dh = up(NULL, (size_t)n * d * 4);
	for (int bf = 0; bf < 2; bf++) {
		void *de = bf ? up(eb, (size_t)V * d * 2) : up(emb, (size_t)V * d * 4);
		ss_embed_cpu(h, bf ? (void *)eb : (void *)emb, bf ? SS_DTYPE_BF16 : SS_DTYPE_F32, tok, n, d);
		cu->embed(dh, de, bf ? SS_DTYPE_BF16 : SS_DTYPE_F32, dtok, n, d, NULL);
		down(hg, dh, (size_t)n * d * 4);
		assert_int_equal(cmp(bf ? "embed bf16" : "embed f32", hg, d, h, d, n, d, 0, 0), 0);
		cu->dfree(de);
	}
	/* rmsnorm with and without the residual add */
	float *res = rnd((size_t)n * d, -1, 1), *w = rnd(d, 0.5, 1.5), *y = malloc((size_t)n * d * 4);
	float *yg = malloc((size_t)n * d * 4);
	float *dres = up(res, (size_t)n * d * 4), *dw = up(w, (size_t)d * 4), *dy = up(NULL, (size_t)n * d * 4);
	for (int with_res = 0; with_res < 2; with_res++) {
		float *h0 = rnd((size_t)n * d, -2, 2);
		memcpy(h, h0, (size_t)n * d * 4);
		assert_int_equal(cu->h2d(dh, h0, (size_t)n * d * 4), 0);
		ss_rmsnorm_cpu(y, h, with_res ? res : NULL, w, n, d, 1e-5f);
		cu->rmsnorm(dy, dh, with_res ? dres : NULL, dw, n, d, 1e-5f, NULL);
		down(yg, dy, (size_t)n * d * 4);
		down(hg, dh, (size_t)n * d * 4);
		assert_int_equal(cmp("rmsnorm.h", hg, d, h, d, n, d, 0, 0), 0);
		assert_int_equal(cmp("rmsnorm.y", yg, d, y, d, n, d, 1e-5, 1e-5), 0);
		free(h0);
	}
	/* gated grouped rmsnorm, strided */
	float *yy = rnd((size_t)n * ldz, -2, 2), *z = rnd((size_t)n * ldz, -3, 3), *yyg = malloc((size_t)n * ldz * 4);
	float *dyy = up(yy, (size_t)n * ldz * 4), *dz = up(z, (size_t)n * ldz * 4);
	ss_gated_rmsnorm_cpu(yy, ldz, z, ldz, w, n, d, G, 1e-5f);
	cu->gated_rmsnorm(dyy, ldz, dz, ldz, dw, n, d, G, 1e-5f, NULL);
	down(yyg, dyy, (size_t)n * ldz * 4);
	assert_int_equal(cmp("gated_rmsnorm", yyg, ldz, yy, ldz, n, d, 1e-5, 1e-5), 0);
	/* argmax over rows with ties and NaN, n off the block size */
	const int R = 5, Nv = 50288;
	float *logits = rnd((size_t)R * Nv, -5, 5);
	logits[1 * Nv + 7] = 100; logits[1 * Nv + 9] = 100;       /* tie: the first wins */
	for (int i = 0; i < Nv; i++) logits[2 * Nv + i] = NAN; /* all NaN: -1 */
	logits[3 * Nv + 0] = NAN; logits[3 * Nv + Nv - 1] = 1e30f;  /* the last column */
	int32_t ids[5], idg[5];
	float *dlogits = up(logits, (size_t)R * Nv * 4);
	int32_t *dids = up(NULL, sizeof(ids));
	for (int nn = Nv; nn >= Nv - 1; nn--) {
		ss_argmax_rows_cpu(ids, logits, Nv, R, nn);
		cu->argmax_rows(dids, dlogits, Nv, R, nn, NULL);
		down(idg, dids, sizeof(idg));
		for (int r = 0; r < R; r++) {
			if (ids[r] != idg[r])
				printf("  argmax row %d n %d: gpu %d cpu %d\n", r, nn, idg[r], ids[r]);
			assert_int_equal(ids[r], idg[r]);
		}
	}
	cu->dfree(dtok); cu->dfree(dh); cu->dfree(dres); cu->dfree(dw); cu->dfree(dy);
	cu->dfree(dyy); cu->dfree(dz); cu->dfree(dlogits); cu->dfree(dids);
	free(emb); free(h); free(hg); free(eb); free(res); free(w); free(y); free(yg);
	free(yy); free(z); free(yyg); free(logits);
}

static void test_linear(void **st)
{
	(void)st;
	const int shapes[][3] = { { 1, 1, 1 }, { 1, 3352, 768 }, { 7, 33, 65 }, { 300, 768, 1536 },
				  { 513, 1000, 129 } };
	ss_cuda_blas *b = cu->blas_create(NULL);
	assert_non_null(b);
	rng_state = 12;
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
		for (int wt = 0; wt < 3; wt++)
			for (int beta = 0; beta < 2; beta++) {
				const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
				const int ldx = K + 1, ldy = N + 3;
				const ss_dtype t = wt == 0 ? SS_DTYPE_F32 : wt == 1 ? SS_DTYPE_BF16 : SS_DTYPE_F16;
				float *x = rnd((size_t)M * ldx, -1, 1), *W = rnd((size_t)N * K, -1, 1);
				float *y = rnd((size_t)M * ldy, -1, 1), *yg = malloc((size_t)M * ldy * 4);
				float *dx = up(x, (size_t)M * ldx * 4), *dy = up(y, (size_t)M * ldy * 4);
				void *dW;
				if (t == SS_DTYPE_F32) {
					dW = up(W, (size_t)N * K * 4);
				} else {
					/* the CPU twin on the same rounded operands */
					uint16_t *h16 = malloc((size_t)N * K * 2), *x16 = malloc((size_t)ldx * 2);
					ss_from_f32(h16, t, W, (size_t)N * K);
					ss_to_f32(W, h16, t, (size_t)N * K);
					for (int r = 0; r < M; r++) {
						ss_from_f32(x16, t, x + (size_t)r * ldx, (size_t)ldx);
						ss_to_f32(x + (size_t)r * ldx, x16, t, (size_t)ldx);
					}
					dW = up(h16, (size_t)N * K * 2);
					free(h16);
					free(x16);
				}
				assert_int_equal(ss_linear_cpu(y, ldy, x, ldx, W, SS_DTYPE_F32, M, N, K, (float)beta), 0);
				assert_int_equal(cu->linear(b, dy, ldy, dx, ldx, dW, t, M, N, K, (float)beta), 0);
				down(yg, dy, (size_t)M * ldy * 4);
				char what[64];
				snprintf(what, sizeof(what), "linear %s %dx%dx%d b%d", ss_dtype_name(t), M, N, K, beta);
				/* |y| ~ sqrt(K): the tolerance scales with it */
				const double sc = sqrt((double)K);
				assert_int_equal(cmp(what, yg, ldy, y, ldy, M, N, 1e-5 * sc, 1e-4), 0);
				cu->dfree(dx); cu->dfree(dy); cu->dfree(dW);
				free(x); free(W); free(y); free(yg);
			}
	cu->blas_free(b);
}

static void test_conv_dt(void **st)
{
	(void)st;
	const int nch = 300, K = 4, K1 = 3, ldx = 311, nseq = 6;
	const int64_t ss[] = { 0, 5, 5, 6, 8, 1000, 1003 };
	const int64_t T = ss[nseq];
	rng_state = 13;
	float *x = rnd((size_t)T * ldx, -2, 2), *wt = rnd((size_t)K * nch, -0.5, 0.5), *b = rnd(nch, -0.1, 0.1);
	float *state = rnd((size_t)nseq * nch * K1, -1, 1), *stg = malloc((size_t)nseq * nch * K1 * 4);
	float *y = malloc((size_t)T * nch * 4), *yg = malloc((size_t)T * nch * 4);
	float *dx = up(x, (size_t)T * ldx * 4), *dwt = up(wt, (size_t)K * nch * 4), *db = up(b, (size_t)nch * 4);
	float *dst = up(state, (size_t)nseq * nch * K1 * 4), *dy = up(NULL, (size_t)T * nch * 4);
	int64_t *dss = up(ss, sizeof(ss));
	ss_conv1d_silu_cpu(y, nch, x, ldx, ss, nseq, state, (ptrdiff_t)nch * K1, wt, nch, b, nch, K);
	cu->conv1d_silu(dy, nch, dx, ldx, dss, nseq, dst, (ptrdiff_t)nch * K1, dwt, nch, db, nch, K, NULL);
	down(yg, dy, (size_t)T * nch * 4);
	down(stg, dst, (size_t)nseq * nch * K1 * 4);
	assert_int_equal(cmp("conv1d.y", yg, nch, y, nch, T, nch, 1e-5, 1e-5), 0);
	assert_int_equal(cmp("conv1d.state", stg, 1, state, 1, 1, (size_t)nseq * nch * K1, 0, 0), 0);
	/* the decode step */
	ss_conv1d_step_cpu(y, nch, x, ldx, nseq, state, (ptrdiff_t)nch * K1, wt, nch, b, nch, K);
	cu->conv1d_step(dy, nch, dx, ldx, nseq, dst, (ptrdiff_t)nch * K1, dwt, nch, db, nch, K, NULL);
	down(yg, dy, (size_t)nseq * nch * 4);
	down(stg, dst, (size_t)nseq * nch * K1 * 4);
	assert_int_equal(cmp("conv1d_step.y", yg, nch, y, nch, nseq, nch, 1e-5, 1e-5), 0);
	assert_int_equal(cmp("conv1d_step.state", stg, 1, state, 1, 1, (size_t)nseq * nch * K1, 0, 0), 0);
	/* dt = softplus(raw + bias), clamped */
	const int H = 24;
	float *bias = rnd(H, -3, 3), *dt = malloc((size_t)T * H * 4), *dtg = malloc((size_t)T * H * 4);
	float *dbias = up(bias, (size_t)H * 4), *ddt = up(NULL, (size_t)T * H * 4);
	ss_dt_softplus_cpu(dt, H, x, ldx, bias, T, H, 1e-3f, 0.1f);
	cu->dt_softplus(ddt, H, dx, ldx, dbias, T, H, 1e-3f, 0.1f, NULL);
	down(dtg, ddt, (size_t)T * H * 4);
	assert_int_equal(cmp("dt_softplus", dtg, H, dt, H, T, H, 1e-6, 1e-5), 0);
	cu->dfree(dx); cu->dfree(dwt); cu->dfree(db); cu->dfree(dst); cu->dfree(dy); cu->dfree(dss);
	cu->dfree(dbias); cu->dfree(ddt);
	free(x); free(wt); free(b); free(state); free(stg); free(y); free(yg); free(bias); free(dt); free(dtg);
}

/* The scan (sequential and SSD) and the decode step against the CPU. */
static void scan_case(int H, int P, int N, int G, const int64_t *ss, int nseq, int variant)
{
	const int64_t T = ss[nseq];
	const int HP = H * P, GN = G * N, ld = HP + 2 * GN;
	const size_t SL = (size_t)H * P * N;
	int64_t maxlen = 0;
	for (int s = 0; s < nseq; s++)
		if (ss[s + 1] - ss[s] > maxlen)
			maxlen = ss[s + 1] - ss[s];
	float *xbc = rnd((size_t)T * ld, -1, 1), *dt = rnd((size_t)T * H, 0.001, 0.2);
	float *A_log = rnd(H, 0, 2.7), *D = rnd(H, 0.5, 1.5);
	float *ssm = rnd(nseq * SL, -1, 1), *ldc = rnd((size_t)nseq * H, -30, 0);
	float *y = malloc((size_t)T * HP * 4), *yg = malloc((size_t)T * HP * 4);
	float *sg = malloc(nseq * SL * 4), *lg = malloc((size_t)nseq * H * 4);
	float *dxbc = up(xbc, (size_t)T * ld * 4), *ddt = up(dt, (size_t)T * H * 4);
	float *dA = up(A_log, (size_t)H * 4), *dD = up(D, (size_t)H * 4);
	float *dssm = up(ssm, nseq * SL * 4), *dld = up(ldc, (size_t)nseq * H * 4);
	float *dy = up(NULL, (size_t)T * HP * 4);
	int64_t *dss = up(ss, (size_t)(nseq + 1) * 8);
	const ss_scan_dims d = { H, P, N, G };
	const char *name = variant == 0 ? "ssm_scan" : variant == 1 ? "ssd_scan" : "ssm_step";

	if (variant == 2) {
		assert_int_equal(ss_ssm_step_cpu(&d, nseq, xbc, ld, xbc + HP, ld, xbc + HP + GN, ld, dt, H,
						 A_log, D, ssm, SL, y, HP, ldc, H), 0);
		assert_int_equal(cu->ssm_step(&d, nseq, dxbc, ld, dxbc + HP, ld, dxbc + HP + GN, ld, ddt, H,
					      dA, dD, dssm, SL, dy, HP, dld, H, NULL), 0);
	} else {
		assert_int_equal(ss_ssm_scan_cpu(&d, ss, nseq, xbc, ld, xbc + HP, ld, xbc + HP + GN,
							ld, dt, H, A_log, D, ssm, SL, y, HP, ldc, H), 0);
		if (variant == 0)
			assert_int_equal(cu->ssm_scan(&d, dss, nseq, dxbc, ld, dxbc + HP, ld, dxbc + HP + GN,
						      ld, ddt, H, dA, dD, dssm, SL, dy, HP, dld, H, NULL), 0);
		else
			assert_int_equal(cu->ssd_scan(&d, dss, nseq, maxlen, dxbc, ld, dxbc + HP, ld,
						      dxbc + HP + GN, ld, ddt, H, dA, dD, dssm, SL, dy, HP,
						      dld, H, NULL), 0);
	}
	const int64_t rows = variant == 2 ? nseq : T;
	down(yg, dy, (size_t)rows * HP * 4);
	down(sg, dssm, nseq * SL * 4);
	down(lg, dld, (size_t)nseq * H * 4);
	printf("  %s H %d P %d N %d G %d nseq %d rows %lld\n", name, H, P, N, G, nseq, (long long)rows);
	assert_int_equal(cmp("  y", yg, HP, y, HP, rows, HP, 1e-4, 1e-4), 0);
	assert_int_equal(cmp("  ssm", sg, 1, ssm, 1, 1, nseq * SL, 1e-4, 1e-4), 0);
	assert_int_equal(cmp("  logdecay", lg, 1, ldc, 1, 1, (size_t)nseq * H, 1e-5, 1e-6), 0);
	cu->dfree(dxbc); cu->dfree(ddt); cu->dfree(dA); cu->dfree(dD); cu->dfree(dssm); cu->dfree(dld);
	cu->dfree(dy); cu->dfree(dss);
	free(xbc); free(dt); free(A_log); free(D); free(ssm); free(ldc); free(y); free(yg); free(sg); free(lg);
}

static void test_scan(void **st)
{
	(void)st;
	/* lengths: empty, 1, one chunk minus one, several chunks plus a tail */
	const int64_t ss[] = { 0, 0, 1, 64, 64 + 63, 64 + 63 + 300 };
	const int64_t one[] = { 0, 1 };
	rng_state = 14;
	for (int v = 0; v < 3; v++) {
		scan_case(1, 1, 1, 1, one, 1, v);
		scan_case(4, 3, 5, 2, ss, 5, v);
		scan_case(24, 64, 128, 1, ss, 5, v); /* mamba2-130m head shape */
		scan_case(6, 8, 200, 3, ss, 5, v);   /* d_state off 32 */
	}
}

/* Relative L2 error ||got - want|| / ||want|| of n values, printed; 1 when
 * above tol. For bf16 runs, where elementwise bounds say little. */
static int cmp_l2(const char *what, const float *got, const float *want, size_t n, double tol)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = (double)got[i] - want[i];
		num += d * d;
		den += (double)want[i] * want[i];
	}
	const double e = den > 0 ? sqrt(num / den) : sqrt(num);
	printf("  %-22s rel L2 %.3g%s\n", what, e, e <= tol ? "" : "  MISMATCH");
	return !(e <= tol);
}

/* elementwise (f32 runs) or relative L2 (bf16 runs, l2 != 0) */
static int check(int l2, const char *what, const float *got, const float *want, size_t n, double tol)
{
	return l2 ? cmp_l2(what, got, want, n, tol) : cmp(what, got, 1, want, 1, 1, n, tol, tol);
}

/* ---------------------------------------------------------- whole model */

static char shared_dir[4096];

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void *gold(const char *rel, size_t elem, size_t *count)
{
	char path[8192];
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/golden/%s", shared_dir, rel);
	void *p = slurp(path, &len);
	if (!p)
		fail_msg("%s: cannot read", path);
	*count = len / elem;
	return p;
}

static void state_for(ss_state *s, const ss_model *m)
{
	ss_state_dims d;
	memset(s, 0, sizeof(*s));
	ss_model_state_dims(m, &d);
	assert_int_equal(ss_state_alloc(s, &d), 0);
}

static void test_golden(void **st)
{
	(void)st;
	const char *cases[] = { "c1", "c2", "c3", "c4", "docB" };
	char dir[8192], rel[256], errmsg[SS_ERRMSG_MAX] = "";
	ss_model *m;
	ss_forward_ctx *ctx;
	int bad = 0;

	if (!shared_dir[0])
		skip();
	snprintf(dir, sizeof(dir), "%s/golden/models/t1-hf", shared_dir);
	if (ss_model_load(&m, dir, errmsg))
		fail_msg("%s", errmsg);
	if (ss_forward_ctx_init_dev(&ctx, m, dev, 1, 0, errmsg))
		fail_msg("%s", errmsg);
	assert_int_equal(ss_forward_ctx_device(ctx), SS_DEVICE_CUDA);
	const int V = m->cfg.vocab_padded, dm = m->cfg.d_model;
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		size_t n, k;
		ss_state s;
		snprintf(rel, sizeof(rel), "t1/%s/tokens.i32", cases[ci]);
		int32_t *tok = gold(rel, 4, &n);
		float *logits = malloc(n * (size_t)V * 4), *hidden = malloc(n * (size_t)dm * 4);
		state_for(&s, m);
		ss_forward_seq q = { tok, (int64_t)n, &s, logits, hidden };
		if (ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, errmsg))
			fail_msg("%s: %s", cases[ci], errmsg);
		printf("  golden t1/%s (%zu tokens)\n", cases[ci], n);
		snprintf(rel, sizeof(rel), "t1/%s/hidden.f32", cases[ci]);
		float *g = gold(rel, 4, &k);
		bad += cmp("  hidden", hidden, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "t1/%s/ssm.f32", cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  ssm", s.ssm, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "t1/%s/conv.f32", cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  conv", s.conv, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "t1/%s/logdecay.f32", cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  logdecay", s.logdecay, 1, g, 1, 1, k, 0, 1e-5);
		free(g);
		snprintf(rel, sizeof(rel), "t1/%s/argmax.i32", cases[ci]);
		int32_t *am = gold(rel, 4, &k);
		snprintf(rel, sizeof(rel), "t1/%s/top2_margin.f32", cases[ci]);
		float *mg = gold(rel, 4, &k);
		for (size_t t = 0; t < n; t++)
			if (mg[t] > 1e-3f && ss_argmax(logits + t * V, V) != am[t]) {
				printf("  argmax at %zu: gpu %d golden %d\n", t, ss_argmax(logits + t * V, V), am[t]);
				bad++;
			}
		free(am); free(mg); free(tok); free(logits); free(hidden);
		ss_state_free(&s);
	}
	ss_forward_ctx_free(ctx);
	ss_model_free(m);
	assert_int_equal(bad, 0);
}

/* A random mamba2-130m-shaped model: GPU and CPU on a batch of documents of
 * varied lengths (states, last logits), then decode steps. */
static void model_vs_cpu(ss_dtype wdtype, double tol)
{
	const int l2 = wdtype != SS_DTYPE_F32;
	char dir[] = "/tmp/ss-parity-XXXXXX", errmsg[SS_ERRMSG_MAX] = "", path[64];
	ss_mkmodel_opts o;
	ss_model *m;
	ss_forward_ctx *cc, *gc;
	enum { NS = 5 };
	const int64_t lens[NS] = { 1, 3, 200, 0, 700 };
	int32_t *tok[NS];
	ss_state sc[NS], sg[NS];
	ss_forward_seq qc[NS], qg[NS];
	int bad = 0;

	assert_non_null(mkdtemp(dir));
	ss_mkmodel_defaults(&o);
	assert_int_equal(ss_mkmodel_preset(&o, "mamba2-130m"), 0);
	o.dtype = wdtype;
	if (ss_mkmodel_write(dir, &o, errmsg) || ss_model_load(&m, dir, errmsg))
		fail_msg("%s", errmsg);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir); unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", dir); unlink(path);
	rmdir(dir);
	assert_int_equal(ss_forward_ctx_init(&cc, m, 2, 0, NULL), 0);
	/* a small ubatch: sequences cross passes on the GPU too */
	if (ss_forward_ctx_init_dev(&gc, m, dev, 1, 512, errmsg))
		fail_msg("%s", errmsg);
	const int V = m->cfg.vocab_padded;
	float *lc = malloc((size_t)NS * V * 4), *lgp = malloc((size_t)NS * V * 4);
	rng_state = 15;
	for (int i = 0; i < NS; i++) {
		tok[i] = malloc((size_t)(lens[i] + 1) * 4);
		for (int64_t t = 0; t < lens[i]; t++)
			tok[i][t] = (int32_t)(urand() * 50277);
		state_for(&sc[i], m);
		state_for(&sg[i], m);
		qc[i] = (ss_forward_seq){ tok[i], lens[i], &sc[i], lc + (size_t)i * V, NULL };
		qg[i] = (ss_forward_seq){ tok[i], lens[i], &sg[i], lgp + (size_t)i * V, NULL };
	}
	assert_int_equal(ss_forward_prefill(cc, qc, NS, SS_LOGITS_LAST, errmsg), 0);
	if (ss_forward_prefill(gc, qg, NS, SS_LOGITS_LAST, errmsg))
		fail_msg("gpu prefill: %s", errmsg);
	for (int i = 0; i < NS; i++) {
		printf("  %s doc %d (%lld tokens)\n", ss_dtype_name(wdtype), i, (long long)lens[i]);
		const size_t nssm = ss_state_ssm_len(&sc[i].dims), nconv = ss_state_conv_len(&sc[i].dims);
		bad += check(l2, "  ssm", sg[i].ssm, sc[i].ssm, nssm, tol);
		bad += check(l2, "  conv", sg[i].conv, sc[i].conv, nconv, tol);
		bad += check(l2, "  logdecay", sg[i].logdecay, sc[i].logdecay,
			     ss_state_logdecay_len(&sc[i].dims), l2 ? tol : 1e-5);
		if (lens[i] > 0)
			bad += check(l2, "  logits", lgp + (size_t)i * V, lc + (size_t)i * V, V, tol);
		assert_int_equal(sg[i].n_tokens, sc[i].n_tokens);
	}
	/* 8 decode steps of the batch from the prefilled states, greedy */
	ss_state *pc[NS], *pg[NS];
	int32_t tc[NS], tg[NS], idg[NS];
	for (int i = 0; i < NS; i++) {
		pc[i] = &sc[i];
		pg[i] = &sg[i];
		tc[i] = tg[i] = (int32_t)(i * 1000 + 7);
	}
	assert_int_equal(ss_forward_decode_begin(gc, pg, NS, errmsg), 0);
	for (int step = 0; step < 8; step++) {
		assert_int_equal(ss_forward_decode(cc, pc, tc, NS, lc, errmsg), 0);
		if (ss_forward_decode_next(gc, tg, lgp, idg, V, errmsg))
			fail_msg("gpu decode: %s", errmsg);
		bad += check(l2, "  decode logits", lgp, lc, (size_t)NS * V, tol);
		for (int i = 0; i < NS; i++) {
			tc[i] = ss_argmax(lc + (size_t)i * V, V);
			if (idg[i] != ss_argmax(lgp + (size_t)i * V, V))
				bad++, printf("  decode ids[%d] %d, argmax of its logits %d\n", i, idg[i],
					      ss_argmax(lgp + (size_t)i * V, V));
			tg[i] = tc[i]; /* follow the CPU's path: compare like with like */
		}
	}
	assert_int_equal(ss_forward_decode_end(gc, errmsg), 0);
	for (int i = 0; i < NS; i++) {
		bad += check(l2, "  decoded ssm", sg[i].ssm, sc[i].ssm, ss_state_ssm_len(&sc[i].dims), tol);
		assert_int_equal(sg[i].n_tokens, sc[i].n_tokens);
		ss_state_free(&sc[i]);
		ss_state_free(&sg[i]);
		free(tok[i]);
	}
	free(lc);
	free(lgp);
	ss_forward_ctx_free(cc);
	ss_forward_ctx_free(gc);
	ss_model_free(m);
	assert_int_equal(bad, 0);
}

static void test_model_f32(void **st)
{
	(void)st;
	model_vs_cpu(SS_DTYPE_F32, 2e-4);
}

/* bf16 weights: the CPU widens them exactly; the GPU also rounds the
 * activations to bf16 before each GEMM, hence a relative L2 bound of 2%. */
static void test_model_bf16(void **st)
{
	(void)st;
	model_vs_cpu(SS_DTYPE_BF16, 2e-2);
}

int main(void)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	const char *sh = getenv("SS_FIXTURES") ? getenv("SS_FIXTURES") : "tests/fixtures";
	int rc;

	if (ss_device_open(&dev, "cuda", errmsg)) {
		printf("test_cuda_parity: skipped, no GPU to run on: %s\n", errmsg);
		return 77;
	}
	cu = ss_device_cuda(dev);
	printf("device %s, plugin %s (%s)\n", ss_device_name(dev), ss_device_plugin_path(dev), cu->build);
	if (sh && *sh)
		snprintf(shared_dir, sizeof(shared_dir), "%s", sh);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embed_norms_argmax),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_conv_dt),
		cmocka_unit_test(test_scan),
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_model_f32),
		cmocka_unit_test(test_model_bf16),
	};
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	ss_device_close(dev);
	return rc;
}
