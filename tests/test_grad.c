/*
 * test_grad.c — each CPU backward op of ss_ops.h (ss_*_backward_cpu)
 * against double-precision central finite differences.
 *
 * For each op: seeded random inputs (f32 values, held in double), random
 * weights g for its outputs, and the scalar L = Σ g·output (+ Σ g·final
 * state, + Σ g·logdecay for the scan). The op's f32 backward, given dL/d
 * output = g, must give every input's dL/dinput; the test evaluates L with a
 * double-precision forward written here from the op's contract and
 * differentiates it centrally, (L(v+h) − L(v−h)) / 2h, for EVERY element of
 * every input (padding columns included: their gradient must be 0 and left
 * untouched). Shapes differ in every dimension (nheads != headdim !=
 * d_state, ngroups > 1, row strides wider than rows, packed sequences that
 * are empty, shorter than the conv window and longer than a scan chunk), so
 * a transposed index fails. The gradient buffers start from random values,
 * so a backward that overwrites instead of accumulating fails too.
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
#include "util/rng.h"
#include "forward/ops/scan.h"

static uint64_t rng_state;

/* n values uniform in [lo, hi), each exactly an f32 */
static double *drnd(size_t n, double lo, double hi)
{
	float *f = test_frnd(&rng_state, n, lo, hi);
	double *p = malloc((n ? n : 1) * sizeof(double));
	assert_non_null(f);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = f[i];
	free(f);
	return p;
}

static float *f32(const double *v, size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)v[i];
	return p;
}

static double *dzero(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));
	assert_non_null(p);
	return p;
}

static double silu(double x)
{
	return x / (1.0 + exp(-x));
}

/* The op's L at the current values of its double inputs. */
typedef double (*loss_fn)(const void *op);

/* Checks grad[i] − base[i] (base NULL: 0) against the central difference of
 * L in v[i], for all n elements; prints the first mismatches. Returns the
 * number outside |diff| <= 1e-4·max|fd| + 2e-3·|fd| + 1e-7. */
static int check(const char *what, double *v, size_t n, const float *grad, const float *base,
		 loss_fn L, const void *op)
{
	double *fd = dzero(n), mx = 0.0;
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		const double v0 = v[i], h = 1e-5 * (fabs(v0) > 1.0 ? fabs(v0) : 1.0);
		double lp, lm;
		v[i] = v0 + h;
		lp = L(op);
		v[i] = v0 - h;
		lm = L(op);
		v[i] = v0;
		fd[i] = (lp - lm) / (2.0 * h);
		if (fabs(fd[i]) > mx)
			mx = fabs(fd[i]);
	}
	for (size_t i = 0; i < n; i++) {
		const double got = (double)grad[i] - (base ? base[i] : 0.0f);
		const double d = fabs(got - fd[i]);
		if (!(d <= 1e-4 * mx + 2e-3 * fabs(fd[i]) + 1e-7)) {
			if (bad < 5)
				printf("  d%s[%zu]: backward %.9g, finite difference %.9g\n", what, i, got,
				       fd[i]);
			bad++;
		}
	}
	if (bad)
		printf("  d%s: %d of %zu wrong (max |gradient| %.3g)\n", what, bad, n, mx);
	free(fd);
	return bad;
}

/* A gradient buffer of n random values, and a copy of them (its base). */
static float *gradbuf(size_t n, float **base)
{
	double *v = drnd(n, -1, 1);
	float *g = f32(v, n);
	*base = f32(v, n);
	free(v);
	return g;
}

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ------------------------------------------------------------------ embed */

typedef struct {
	const double *g;
	double *emb;
	const int32_t *tok;
	int n, d;
} embed_op;

static double embed_loss(const void *p)
{
	const embed_op *o = p;
	double L = 0.0;
	for (int r = 0; r < o->n; r++)
		for (int i = 0; i < o->d; i++)
			L += o->g[r * o->d + i] * o->emb[(size_t)o->tok[r] * o->d + i];
	return L;
}

static void test_embed_backward(void **st)
{
	(void)st;
	const int V = 11, d = 6, n = 9;
	const int32_t tok[] = { 3, 0, 10, 3, 7, 3, 10, 1, 0 };
	rng_state = 11;
	embed_op o = { .g = drnd((size_t)n * d, -1, 1), .emb = drnd((size_t)V * d, -1, 1),
		       .tok = tok, .n = n, .d = d };
	float *gf = f32(o.g, (size_t)n * d), *base, *demb = gradbuf((size_t)V * d, &base);

	ss_embed_backward_cpu(gf, demb, tok, n, d);
	assert_int_equal(check("emb", o.emb, (size_t)V * d, demb, base, embed_loss, &o), 0);
	free((void *)o.g), free(o.emb), free(gf), free(demb), free(base);
}

/* ---------------------------------------------------------------- rmsnorm */

typedef struct {
	const double *g;
	double *h, *w;
	int n, d;
	double eps;
} rmsnorm_op;

static double rmsnorm_loss(const void *p)
{
	const rmsnorm_op *o = p;
	double L = 0.0;
	for (int r = 0; r < o->n; r++) {
		const double *h = o->h + r * o->d;
		const double rs = 1.0 / sqrt(dot(h, h, o->d) / o->d + o->eps);
		for (int i = 0; i < o->d; i++)
			L += o->g[r * o->d + i] * h[i] * rs * o->w[i];
	}
	return L;
}

static void test_rmsnorm_backward(void **st)
{
	(void)st;
	const int n = 4, d = 7;
	rng_state = 12;
	rmsnorm_op o = { .g = drnd((size_t)n * d, -1, 1), .h = drnd((size_t)n * d, -2, 2),
			 .w = drnd(d, 0.5, 1.5), .n = n, .d = d, .eps = 1e-5 };
	float *gf = f32(o.g, (size_t)n * d), *hf = f32(o.h, (size_t)n * d), *wf = f32(o.w, d);
	float *bh, *bw, *dh = gradbuf((size_t)n * d, &bh), *dw = gradbuf(d, &bw);

	ss_rmsnorm_backward_cpu(gf, hf, dh, wf, dw, n, d, (float)o.eps);
	assert_int_equal(check("h", o.h, (size_t)n * d, dh, bh, rmsnorm_loss, &o) +
				 check("w", o.w, d, dw, bw, rmsnorm_loss, &o),
			 0);
	free((void *)o.g), free(o.h), free(o.w), free(gf), free(hf), free(wf);
	free(dh), free(dw), free(bh), free(bw);
}

/* ----------------------------------------------------------------- linear */

typedef struct {
	const double *g;
	double *x, *W;
	int M, N, K, ldx, ldy;
} linear_op;

static double linear_loss(const void *p)
{
	const linear_op *o = p;
	double L = 0.0;
	for (int m = 0; m < o->M; m++)
		for (int j = 0; j < o->N; j++)
			L += o->g[m * o->ldy + j] * dot(o->x + m * o->ldx, o->W + j * o->K, o->K);
	return L;
}

static void test_linear_backward(void **st)
{
	(void)st;
	const int M = 5, N = 4, K = 3, ldx = K + 2, ldy = N + 1;
	rng_state = 13;
	linear_op o = { .g = drnd((size_t)M * ldy, -1, 1), .x = drnd((size_t)M * ldx, -1, 1),
			.W = drnd((size_t)N * K, -1, 1), .M = M, .N = N, .K = K, .ldx = ldx,
			.ldy = ldy };
	float *gf = f32(o.g, (size_t)M * ldy), *xf = f32(o.x, (size_t)M * ldx);
	float *Wf = f32(o.W, (size_t)N * K);
	float *bx, *bW, *dx = gradbuf((size_t)M * ldx, &bx), *dW = gradbuf((size_t)N * K, &bW);

	assert_int_equal(ss_linear_backward_cpu(gf, ldy, xf, dx, ldx, Wf, dW, M, N, K), 0);
	assert_int_equal(check("x", o.x, (size_t)M * ldx, dx, bx, linear_loss, &o) +
				 check("W", o.W, (size_t)N * K, dW, bW, linear_loss, &o),
			 0);
	assert_int_equal(ss_linear_backward_cpu(gf, N - 1, xf, dx, ldx, Wf, dW, M, N, K),
			 SS_ERR_INVALID);
	free((void *)o.g), free(o.x), free(o.W), free(gf), free(xf), free(Wf);
	free(dx), free(dW), free(bx), free(bW);
}

/* ----------------------------------------------------------------- conv1d */

typedef struct {
	const double *gy, *gs; /* weights of the outputs and of the final states */
	double *x, *state, *wt, *b;
	const int64_t *ss;
	int nseq, nch, K, ldx, ldy, ldw;
} conv_op;

static double conv_loss(const void *p)
{
	const conv_op *o = p;
	const int K1 = o->K - 1;
	double L = 0.0;
	for (int s = 0; s < o->nseq; s++) {
		const int64_t r0 = o->ss[s], n = o->ss[s + 1] - r0;
		for (int c = 0; c < o->nch; c++) {
			const double *st = o->state + ((size_t)s * o->nch + c) * K1;
#define IN(j) ((j) < K1 ? st[j] : o->x[(r0 + (j) - K1) * o->ldx + c])
			for (int64_t t = 0; t < n; t++) {
				double acc = o->b[c];
				for (int k = 0; k < o->K; k++)
					acc += o->wt[k * o->ldw + c] * IN(t + k);
				L += o->gy[(r0 + t) * o->ldy + c] * silu(acc);
			}
			for (int k = 0; k < K1; k++)
				L += o->gs[((size_t)s * o->nch + c) * K1 + k] * IN(n + k);
#undef IN
		}
	}
	return L;
}

static void test_conv1d_backward(void **st)
{
	(void)st;
	/* sequences of 2 (shorter than the window), 0, 7 and 3 (= K1) rows */
	const int64_t ss[] = { 0, 2, 2, 9, 12 };
	/* nch: more than one block of channels (ops/conv.c) */
	const int nseq = 4, nch = 67, K = 4, K1 = K - 1, ldx = nch + 3, ldy = nch + 1, ldw = nch + 2;
	const int64_t T = ss[nseq];
	const size_t nst = (size_t)nseq * nch * K1;
	rng_state = 14;
	conv_op o = { .gy = drnd((size_t)T * ldy, -1, 1), .gs = drnd(nst, -1, 1),
		      .x = drnd((size_t)T * ldx, -2, 2), .state = drnd(nst, -2, 2),
		      .wt = drnd((size_t)K * ldw, -1, 1), .b = drnd(nch, -0.5, 0.5),
		      .ss = ss, .nseq = nseq, .nch = nch, .K = K, .ldx = ldx, .ldy = ldy, .ldw = ldw };
	float *gy = f32(o.gy, (size_t)T * ldy), *xf = f32(o.x, (size_t)T * ldx);
	float *stf = f32(o.state, nst), *wtf = f32(o.wt, (size_t)K * ldw), *bf = f32(o.b, nch);
	float *dstate = f32(o.gs, nst); /* in: d final state; out: d initial state */
	float *bx, *bwt, *bb, *dx = gradbuf((size_t)T * ldx, &bx);
	float *dwt = gradbuf((size_t)K * ldw, &bwt), *db = gradbuf(nch, &bb);

	assert_int_equal(ss_conv1d_silu_backward_cpu(gy, ldy, xf, dx, ldx, ss, nseq, stf, dstate,
						     (ptrdiff_t)nch * K1, wtf, dwt, ldw, bf, db, nch,
						     K),
			 0);
	assert_int_equal(check("x", o.x, (size_t)T * ldx, dx, bx, conv_loss, &o) +
				 check("conv_state", o.state, nst, dstate, NULL, conv_loss, &o) +
				 check("wt", o.wt, (size_t)K * ldw, dwt, bwt, conv_loss, &o) +
				 check("b", o.b, nch, db, bb, conv_loss, &o),
			 0);
	assert_int_equal(ss_conv1d_silu_backward_cpu(gy, ldy, xf, dx, ldx, ss, nseq, stf, dstate,
						     (ptrdiff_t)nch * K1, wtf, dwt, ldw, bf, db, nch,
						     SS_CONV_BACKWARD_MAX + 1),
			 SS_ERR_INVALID);
	free((void *)o.gy), free((void *)o.gs), free(o.x), free(o.state), free(o.wt), free(o.b);
	free(gy), free(xf), free(stf), free(wtf), free(bf), free(dstate);
	free(dx), free(dwt), free(db), free(bx), free(bwt), free(bb);
}

/* --------------------------------------------------------------------- dt */

typedef struct {
	const double *g;
	double *raw, *bias;
	int n, H, ldr, lddt;
	double dt_min, dt_max;
} dt_op;

static double dt_loss(const void *p)
{
	const dt_op *o = p;
	double L = 0.0;
	for (int r = 0; r < o->n; r++)
		for (int h = 0; h < o->H; h++) {
			const double u = o->raw[r * o->ldr + h] + o->bias[h];
			double v = u > 20 ? u : log1p(exp(u));
			if (isfinite(o->dt_max) && v > o->dt_max)
				v = o->dt_max;
			if (o->dt_min > 0 && v < o->dt_min)
				v = o->dt_min;
			L += o->g[r * o->lddt + h] * v;
		}
	return L;
}

static void test_dt_backward(void **st)
{
	(void)st;
	const int n = 6, H = 3, ldr = H + 4, lddt = H + 1;
	/* unclamped, raw spanning the softplus threshold 20; then clamped to
	 * [0.5, 1.5] with softplus values over [0.08, 3] */
	const double lim[2][2] = { { 0.0, INFINITY }, { 0.5, 1.5 } };
	for (int c = 0; c < 2; c++) {
		rng_state = 15 + c;
		dt_op o = { .g = drnd((size_t)n * lddt, -1, 1), .raw = drnd((size_t)n * ldr, -4, 24),
			    .bias = drnd(H, -1, 1), .n = n, .H = H, .ldr = ldr, .lddt = lddt,
			    .dt_min = lim[c][0], .dt_max = lim[c][1] };
		if (c == 1)
			for (int i = 0; i < n * ldr; i++)
				o.raw[i] = (float)(o.raw[i] / 8.0 - 1.0);
		float *gf = f32(o.g, (size_t)n * lddt), *rf = f32(o.raw, (size_t)n * ldr);
		float *bf = f32(o.bias, H);
		float *braw, *bbias, *draw = gradbuf((size_t)n * ldr, &braw), *dbias = gradbuf(H, &bbias);

		ss_dt_softplus_backward_cpu(gf, lddt, rf, draw, ldr, bf, dbias, n, H,
					    (float)o.dt_min, (float)o.dt_max);
		assert_int_equal(check("raw", o.raw, (size_t)n * ldr, draw, braw, dt_loss, &o) +
					 check("dt_bias", o.bias, H, dbias, bbias, dt_loss, &o),
				 0);
		free((void *)o.g), free(o.raw), free(o.bias), free(gf), free(rf), free(bf);
		free(draw), free(dbias), free(braw), free(bbias);
	}
}

/* ------------------------------------------------------------------- scan */

typedef struct {
	const double *gy, *gs, *gl; /* weights of y, the final states, logdecay */
	double *x, *B, *C, *dt, *A_log, *D, *ssm;
	const int64_t *ss;
	int nseq, H, P, N, G, ldx, ldb, ldc, lddt, ldy;
	double *S; /* [H·P·N] scratch: one sequence's states */
} scan_op;

static double scan_loss(const void *arg)
{
	const scan_op *o = arg;
	const int H = o->H, P = o->P, N = o->N, hpg = H / o->G;
	const size_t HPN = (size_t)H * P * N;
	double L = 0.0;
	for (int s = 0; s < o->nseq; s++) {
		memcpy(o->S, o->ssm + s * HPN, HPN * sizeof(double));
		for (int h = 0; h < H; h++) {
			const int g = h / hpg;
			const double A = -exp(o->A_log[h]);
			double *S = o->S + (size_t)h * P * N, sum = 0.0;
			for (int64_t r = o->ss[s]; r < o->ss[s + 1]; r++) {
				const double dtv = o->dt[r * o->lddt + h], dA = exp(dtv * A);
				sum += dtv;
				for (int p = 0; p < P; p++) {
					const double xv = o->x[r * o->ldx + h * P + p];
					double acc = 0.0;
					for (int n = 0; n < N; n++) {
						double *e = &S[p * N + n];
						*e = dA * *e + dtv * xv * o->B[r * o->ldb + g * N + n];
						acc += *e * o->C[r * o->ldc + g * N + n];
					}
					L += o->gy[r * o->ldy + h * P + p] * (acc + o->D[h] * xv);
				}
			}
			L += o->gl[s * H + h] * A * sum;
		}
		L += dot(o->gs + s * HPN, o->S, HPN);
	}
	return L;
}

/* nseq sequences of the given lengths; dy NULL when with_y is 0 (only the
 * final states and logdecay are used). */
static int scan_case(int H, int P, int N, int G, const int64_t *ss, int nseq, int with_y)
{
	const int64_t T = ss[nseq];
	const int ldx = H * P + 3, ldb = G * N + 2, ldc = G * N + 1, lddt = H + 2, ldy = H * P + 1;
	const size_t HPN = (size_t)H * P * N, nst = (size_t)nseq * HPN;
	const ss_scan_dims d = { H, P, N, G };
	int64_t n_max = 0;
	scan_op o = { .gy = with_y ? drnd((size_t)T * ldy, -1, 1) : dzero((size_t)T * ldy),
		      .gs = drnd(nst, -1, 1), .gl = drnd((size_t)nseq * H, -1, 1),
		      .x = drnd((size_t)T * ldx, -1, 1), .B = drnd((size_t)T * ldb, -1, 1),
		      .C = drnd((size_t)T * ldc, -1, 1), .dt = drnd((size_t)T * lddt, 0.01, 0.3),
		      .A_log = drnd(H, -1, 1), .D = drnd(H, -1, 1), .ssm = drnd(nst, -1, 1),
		      .ss = ss, .nseq = nseq, .H = H, .P = P, .N = N, .G = G, .ldx = ldx,
		      .ldb = ldb, .ldc = ldc, .lddt = lddt, .ldy = ldy, .S = dzero(HPN) };
	for (int s = 0; s < nseq; s++)
		if (ss[s + 1] - ss[s] > n_max)
			n_max = ss[s + 1] - ss[s];
	float *gy = f32(o.gy, (size_t)T * ldy), *gl = f32(o.gl, (size_t)nseq * H);
	float *xf = f32(o.x, (size_t)T * ldx), *Bf = f32(o.B, (size_t)T * ldb);
	float *Cf = f32(o.C, (size_t)T * ldc), *dtf = f32(o.dt, (size_t)T * lddt);
	float *Af = f32(o.A_log, H), *Df = f32(o.D, H), *sf = f32(o.ssm, nst);
	float *dssm = f32(o.gs, nst); /* in: d final states; out: d initial states */
	float *bx, *bB, *bC, *bdt, *bA, *bD;
	float *dx = gradbuf((size_t)T * ldx, &bx), *dB = gradbuf((size_t)T * ldb, &bB);
	float *dC = gradbuf((size_t)T * ldc, &bC), *ddt = gradbuf((size_t)T * lddt, &bdt);
	float *dA = gradbuf(H, &bA), *dD = gradbuf(H, &bD);
	float *work = malloc(ss_ssm_scan_backward_work(&d, n_max) * sizeof(float) + 1);
	int bad;

	assert_non_null(work);
	assert_int_equal(ss_ssm_scan_backward_cpu(&d, ss, nseq, xf, dx, ldx, Bf, dB, ldb, Cf, dC,
						  ldc, dtf, ddt, lddt, Af, dA, Df, dD, sf, dssm,
						  (ptrdiff_t)HPN, with_y ? gy : NULL, ldy, gl, H,
						  work),
			 0);
	bad = check("x", o.x, (size_t)T * ldx, dx, bx, scan_loss, &o) +
	      check("B", o.B, (size_t)T * ldb, dB, bB, scan_loss, &o) +
	      check("dt", o.dt, (size_t)T * lddt, ddt, bdt, scan_loss, &o) +
	      check("A_log", o.A_log, H, dA, bA, scan_loss, &o) +
	      check("ssm", o.ssm, nst, dssm, NULL, scan_loss, &o);
	if (with_y)
		bad += check("C", o.C, (size_t)T * ldc, dC, bC, scan_loss, &o) +
		       check("D", o.D, H, dD, bD, scan_loss, &o);
	free((void *)o.gy), free((void *)o.gs), free((void *)o.gl), free(o.x), free(o.B);
	free(o.C), free(o.dt), free(o.A_log), free(o.D), free(o.ssm), free(o.S);
	free(gy), free(gl), free(xf), free(Bf), free(Cf), free(dtf), free(Af), free(Df), free(sf);
	free(dssm), free(dx), free(dB), free(dC), free(ddt), free(dA), free(dD);
	free(bx), free(bB), free(bC), free(bdt), free(bA), free(bD), free(work);
	return bad;
}

static void test_scan_backward(void **st)
{
	(void)st;
	/* 0, 1, 70 (past one chunk of 64) and 5 tokens */
	const int64_t ss[] = { 0, 0, 1, 71, 76 };
	rng_state = 17;
	assert_int_equal(scan_case(4, 3, 5, 2, ss, 4, 1), 0);
	/* nheads = ngroups, N a multiple of 8 (not of 16) */
	assert_int_equal(scan_case(3, 2, 8, 3, ss, 4, 1), 0);
	/* N a multiple of 16 (the widest kernel), one group for all heads */
	assert_int_equal(scan_case(2, 3, 16, 1, ss, 4, 1), 0);
	/* the final states only (the last layer of an encoding) */
	assert_int_equal(scan_case(4, 3, 5, 2, ss, 4, 0), 0);
}

static void test_scan_backward_invalid(void **st)
{
	(void)st;
	const ss_scan_dims bad = { 3, 2, 4, 2 }; /* nheads not a multiple of ngroups */
	const int64_t ss[] = { 0, 1 };
	float v[64] = { 0 }, g[64] = { 0 };
	assert_int_equal(ss_ssm_scan_backward_cpu(&bad, ss, 1, v, g, 6, v, g, 8, v, g, 8, v, g, 3,
						  v, g, v, g, v, g, 48, v, 6, NULL, 0, g),
			 SS_ERR_INVALID);
}

/* -------------------------------------------------------------- gated norm */

typedef struct {
	const double *g;
	double *y, *z, *w;
	int n, d, G, ldy, ldz;
	double eps;
} gated_op;

static double gated_loss(const void *p)
{
	const gated_op *o = p;
	const int gs = o->d / o->G;
	double L = 0.0, u[64];
	for (int r = 0; r < o->n; r++)
		for (int g = 0; g < o->G; g++) {
			double ssq = 0.0;
			for (int i = 0; i < gs; i++) {
				const int c = g * gs + i;
				u[i] = o->y[r * o->ldy + c] * silu(o->z[r * o->ldz + c]);
				ssq += u[i] * u[i];
			}
			for (int i = 0; i < gs; i++)
				L += o->g[r * o->ldy + g * gs + i] * u[i] / sqrt(ssq / gs + o->eps) *
				     o->w[g * gs + i];
		}
	return L;
}

static void test_gated_rmsnorm_backward(void **st)
{
	(void)st;
	const int n = 3, d = 12, G = 3, ldy = d + 2, ldz = d + 5;
	rng_state = 18;
	gated_op o = { .g = drnd((size_t)n * ldy, -1, 1), .y = drnd((size_t)n * ldy, -2, 2),
		       .z = drnd((size_t)n * ldz, -3, 3), .w = drnd(d, 0.5, 1.5), .n = n, .d = d,
		       .G = G, .ldy = ldy, .ldz = ldz, .eps = 1e-5 };
	/* the gradient of y replaces the output's in place: padding kept */
	float *dy = f32(o.g, (size_t)n * ldy), *pad = f32(o.g, (size_t)n * ldy);
	float *yf = f32(o.y, (size_t)n * ldy), *zf = f32(o.z, (size_t)n * ldz), *wf = f32(o.w, d);
	float *bz, *bw, *dz = gradbuf((size_t)n * ldz, &bz), *dw = gradbuf(d, &bw);

	for (int r = 0; r < n; r++)
		for (int i = 0; i < d; i++)
			pad[r * ldy + i] = 0.0f;
	ss_gated_rmsnorm_backward_cpu(yf, dy, ldy, zf, dz, ldz, wf, dw, n, d, G, (float)o.eps);
	for (int r = 0; r < n; r++)
		for (int i = d; i < ldy; i++) /* padding: not part of the op */
			dy[r * ldy + i] -= pad[r * ldy + i];
	assert_int_equal(check("y", o.y, (size_t)n * ldy, dy, NULL, gated_loss, &o) +
				 check("z", o.z, (size_t)n * ldz, dz, bz, gated_loss, &o) +
				 check("w", o.w, d, dw, bw, gated_loss, &o),
			 0);
	free((void *)o.g), free(o.y), free(o.z), free(o.w), free(dy), free(pad), free(yf);
	free(zf), free(wf), free(dz), free(dw), free(bz), free(bw);
}

/* ---------------------------------------------------------- cross-entropy */

typedef struct {
	const double *g;
	double *logits;
	const int32_t *tgt;
	int n, V, ld;
} ce_op;

static double ce_loss(const void *p)
{
	const ce_op *o = p;
	double L = 0.0;
	for (int r = 0; r < o->n; r++) {
		const double *l = o->logits + r * o->ld;
		double s = 0.0;
		if (o->tgt[r] < 0)
			continue;
		for (int i = 0; i < o->V; i++)
			s += exp(l[i]);
		L += o->g[r] * (log(s) - l[o->tgt[r]]);
	}
	return L;
}

static void test_cross_entropy(void **st)
{
	(void)st;
	const int n = 5, V = 37, ld = V + 3; /* V: vectors of 8 and a tail */
	const int32_t tgt[] = { 36, -1, 0, 4, 4 };
	rng_state = 19;
	ce_op o = { .g = drnd(n, 0.2, 1), .logits = drnd((size_t)n * ld, -4, 4), .tgt = tgt,
		    .n = n, .V = V, .ld = ld };
	float *gf = f32(o.g, n), *lf = f32(o.logits, (size_t)n * ld), nll[5];
	float *bl, *dl = gradbuf((size_t)n * ld, &bl);
	const int32_t bad_tgt[] = { 0, V, 0, 0, 0 };

	/* the forward against its formula (nats, max-shifted) */
	assert_int_equal(ss_cross_entropy_cpu(nll, lf, ld, tgt, n, V), 0);
	for (int r = 0; r < n; r++) {
		ce_op one = o;
		double g1[5] = { 0 };
		g1[r] = 1.0;
		one.g = g1;
		assert_true(fabs(nll[r] - ce_loss(&one)) <= 1e-6 * (1 + fabs(ce_loss(&one))));
	}
	assert_int_equal(ss_cross_entropy_backward_cpu(gf, lf, dl, ld, tgt, n, V), 0);
	assert_int_equal(check("logits", o.logits, (size_t)n * ld, dl, bl, ce_loss, &o), 0);
	assert_int_equal(ss_cross_entropy_cpu(nll, lf, ld, bad_tgt, n, V), SS_ERR_INVALID);
	assert_int_equal(ss_cross_entropy_backward_cpu(gf, lf, dl, ld, bad_tgt, n, V),
			 SS_ERR_INVALID);
	free((void *)o.g), free(o.logits), free(gf), free(lf), free(dl), free(bl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embed_backward),
		cmocka_unit_test(test_rmsnorm_backward),
		cmocka_unit_test(test_linear_backward),
		cmocka_unit_test(test_conv1d_backward),
		cmocka_unit_test(test_dt_backward),
		cmocka_unit_test(test_scan_backward),
		cmocka_unit_test(test_scan_backward_invalid),
		cmocka_unit_test(test_gated_rmsnorm_backward),
		cmocka_unit_test(test_cross_entropy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
