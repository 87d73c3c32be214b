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
#include "forward/device_plugin.h"
#include "gen/model.h"
#include "util/opref.h"

static ss_device *dev;
static const ss_cuda_api *cu;
static uint64_t rng_state;

static double urand(void)
{
	return (double)(ss_splitmix64(&rng_state) >> 11) * 0x1.0p-53; /* the one generator (ss_sample.h) */
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
					printf("  %s[%zu][%zu]: got %.9g want %.9g (diff %.3g)\n", what, r, i,
					       g, x, d);
				bad++;
			}
		}
	printf("  %-22s max|diff| %.3g%s\n", what, worst, bad ? "  MISMATCH" : "");
	return bad;
}

/* ------------------------------------------------------------------- ops */

/* The twin table, iterated by one loop (as llama.cpp's test-backend-ops):
 * each row of ss_ops.h's table of twins is a `twin` below, whose make()
 * builds the host buffers of one case (inputs, in/out and outputs, with the
 * tolerance of each compared buffer), cpu() runs ss_<op>_cpu on host copies
 * and cuda() ss_<op>_cuda (through the plugin's table) on device copies of
 * the same buffers; the loop compares every output buffer.
 * Without a GPU the loop still runs every case on the CPU, against ref(), a
 * naive double-precision reference (tests/util/opref.h) that every row has;
 * it also checks that the op writes only its outputs and leaves them finite.
 * The ops are those of SS_CUDA_OPS (device_plugin.h): each row names the
 * slot it checks, and test_registered fails when an op has no row. These
 * per-op checks are kept beside the whole-model ones below so that a GPU
 * run that disagrees with the CPU names the op at fault. */

enum { MAXBUF = 9 };

typedef struct {
	const char *name;
	size_t bytes;
	void *h;           /* the initial contents (inputs; outputs too: overwritten) */
	int out;           /* compared after the run */
	int i32;           /* compared as int32, exactly */
	size_t rows, w, ld; /* the compared values: rows × w floats at stride ld */
	double atol, rtol;
} tbuf;

typedef struct {
	char what[96];
	int n[8];          /* the op's sizes, as make() sets them */
	float f[2];
	ss_dtype t;
	ss_scan_dims d;
	int nb;
	tbuf b[MAXBUF];
} tcase;

typedef struct {
	const char *op; /* as in ss_ops.h's table */
	size_t slot;    /* the op's slot: OP(name of its SS_CUDA_OPS entry) */
	/* fills c for case k; 0 when k is past the last case */
	int (*make)(tcase *c, int k);
	/* p[i]: buffer i (host or device copy) */
	void (*cpu)(const tcase *c, void **p);
	void (*cuda)(const tcase *c, void **p, ss_cuda_blas *b);
	/* the reference on host buffers p (outputs written as f32) */
	void (*ref)(const tcase *c, void **p);
} twin;
#define OP(name) offsetof(ss_cuda_api, name)

/* Adds buffer i: n floats drawn from [lo, hi] (lo == hi: left to the caller
 * to fill, h zeroed), compared (out) as rows × w at stride ld when tol >= 0. */
static float *addf(tcase *c, const char *name, size_t n, double lo, double hi, int out,
		   size_t rows, size_t w, size_t ld, double atol, double rtol)
{
	assert_true(c->nb < MAXBUF);
	tbuf *b = &c->b[c->nb++];
	*b = (tbuf){ .name = name, .bytes = n * sizeof(float), .out = out, .rows = rows, .w = w,
		     .ld = ld, .atol = atol, .rtol = rtol };
	b->h = lo == hi ? calloc(n ? n : 1, sizeof(float)) : rnd(n, lo, hi);
	assert_non_null(b->h);
	return b->h;
}

static float *addin(tcase *c, const char *name, size_t n, double lo, double hi)
{
	return addf(c, name, n, lo, hi, 0, 0, 0, 0, 0, 0);
}

/* A compared output of rows × w at stride ld (rows·ld floats). */
static float *addout(tcase *c, const char *name, size_t rows, size_t w, size_t ld, double lo,
		     double hi, double atol, double rtol)
{
	return addf(c, name, rows * ld, lo, hi, 1, rows, w, ld, atol, rtol);
}

/* An input of raw bytes (tokens, seq_start, 16-bit weights), copied. */
static void addraw(tcase *c, const char *name, const void *src, size_t bytes, int out_i32)
{
	assert_true(c->nb < MAXBUF);
	tbuf *b = &c->b[c->nb++];
	*b = (tbuf){ .name = name, .bytes = bytes, .out = out_i32, .i32 = out_i32, .rows = 1,
		     .w = bytes / 4, .ld = bytes / 4 };
	b->h = malloc(bytes ? bytes : 1);
	assert_non_null(b->h);
	if (src)
		memcpy(b->h, src, bytes);
}

/* A reference's double rows [rows][w] (contiguous) into f32 rows at stride
 * ld of p; frees src. */
static void put(void *p, size_t ld, double *src, size_t rows, size_t w)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < w; i++)
			((float *)p)[r * ld + i] = (float)src[r * w + i];
	free(src);
}

/* n doubles for a reference's output. */
static double *dbuf(size_t n)
{
	double *p = malloc((n ? n : 1) * sizeof(double));
	assert_non_null(p);
	return p;
}

static const int32_t EMB_TOK[7] = { 0, 60, 3, 3, 17, 1, 59 };

/* embed: f32 and bf16 tables. n: V, d, rows. */
static int make_embed(tcase *c, int k)
{
	const int V = 61, d = 130, n = 7;
	if (k >= 2)
		return 0;
	c->t = k ? SS_DTYPE_BF16 : SS_DTYPE_F32;
	c->n[0] = n, c->n[1] = d;
	float *emb = rnd((size_t)V * d, -1, 1);
	if (k) {
		uint16_t *eb = malloc((size_t)V * d * 2);
		ss_from_f32(eb, SS_DTYPE_BF16, emb, (size_t)V * d);
		addraw(c, "emb", eb, (size_t)V * d * 2, 0);
		free(eb);
	} else {
		addraw(c, "emb", emb, (size_t)V * d * 4, 0);
	}
	free(emb);
	addraw(c, "tokens", EMB_TOK, sizeof(EMB_TOK), 0);
	addout(c, "h", n, d, d, 0, 0, 0, 0);
	snprintf(c->what, sizeof(c->what), "embed %s", ss_dtype_name(c->t));
	return 1;
}
static void cpu_embed(const tcase *c, void **p)
{
	ss_embed_cpu(p[2], p[0], c->t, p[1], c->n[0], c->n[1]);
}
static void cuda_embed(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->embed(p[2], p[0], c->t, p[1], c->n[0], c->n[1], NULL);
}
static void ref_embed(const tcase *c, void **p)
{
	double *h = dbuf((size_t)c->n[0] * c->n[1]);
	opref_embed(h, p[0], c->t, p[1], c->n[0], c->n[1]);
	put(p[2], c->n[1], h, c->n[0], c->n[1]);
}

/* rmsnorm with (k = 1) and without the residual add. */
static int make_rmsnorm(tcase *c, int k)
{
	const int d = 130, n = 7;
	if (k >= 2)
		return 0;
	c->n[0] = n, c->n[1] = d, c->n[2] = k;
	addout(c, "h", n, d, d, -2, 2, 0, 0);
	addin(c, "res", (size_t)n * d, -1, 1);
	addin(c, "w", d, 0.5, 1.5);
	addout(c, "y", n, d, d, 0, 0, 1e-5, 1e-5);
	snprintf(c->what, sizeof(c->what), "rmsnorm res %d", k);
	return 1;
}
static void cpu_rmsnorm(const tcase *c, void **p)
{
	ss_rmsnorm_cpu(p[3], p[0], c->n[2] ? p[1] : NULL, p[2], c->n[0], c->n[1], 1e-5f);
}
static void cuda_rmsnorm(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->rmsnorm(p[3], p[0], c->n[2] ? p[1] : NULL, p[2], c->n[0], c->n[1], 1e-5f, NULL);
}
static void ref_rmsnorm(const tcase *c, void **p)
{
	const size_t n = (size_t)c->n[0], d = (size_t)c->n[1];
	double *y = dbuf(n * d), *h = dbuf(n * d);
	opref_rmsnorm(y, h, p[0], c->n[2] ? p[1] : NULL, p[2], c->n[0], c->n[1], 1e-5f);
	put(p[0], d, h, n, d);
	put(p[3], d, y, n, d);
}

/* gated grouped rmsnorm, strided rows. */
static int make_gated(tcase *c, int k)
{
	const int d = 130, n = 7, G = 2, ldz = d + 3;
	if (k >= 1)
		return 0;
	c->n[0] = n, c->n[1] = d, c->n[2] = G, c->n[3] = ldz;
	addout(c, "y", n, d, ldz, -2, 2, 1e-5, 1e-5);
	addin(c, "z", (size_t)n * ldz, -3, 3);
	addin(c, "w", d, 0.5, 1.5);
	snprintf(c->what, sizeof(c->what), "gated_rmsnorm G %d", G);
	return 1;
}
static void cpu_gated(const tcase *c, void **p)
{
	ss_gated_rmsnorm_cpu(p[0], c->n[3], p[1], c->n[3], p[2], c->n[0], c->n[1], c->n[2], 1e-5f);
}
static void cuda_gated(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->gated_rmsnorm(p[0], c->n[3], p[1], c->n[3], p[2], c->n[0], c->n[1], c->n[2], 1e-5f,
			  NULL);
}
static void ref_gated(const tcase *c, void **p)
{
	double *y = dbuf((size_t)c->n[0] * c->n[1]);
	opref_gated_rmsnorm(y, p[0], c->n[3], p[1], c->n[3], p[2], c->n[0], c->n[1], c->n[2], 1e-5f);
	put(p[0], c->n[3], y, c->n[0], c->n[1]);
}

/* linear: shapes × {f32, bf16, f16} × beta {0, 1}, decode steps' (M <= 8)
 * among them. The CPU twin runs in f32 on the operands rounded as the GPU's
 * (x and W to W's dtype). */
static int make_linear(tcase *c, int k)
{
	static const int shapes[][3] = {
		{ 1, 1, 1 }, { 1, 3352, 768 }, { 7, 33, 65 }, { 300, 768, 1536 },
		{ 513, 1000, 129 }, { 8, 1000, 1536 }, { 5, 777, 2560 },
	};
	if (k >= 7 * 3 * 2)
		return 0;
	const int si = k / 6, wt = k / 2 % 3, beta = k % 2;
	const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
	const int ldx = K + 1, ldy = N + 3;
	const ss_dtype t = wt == 0 ? SS_DTYPE_F32 : wt == 1 ? SS_DTYPE_BF16 : SS_DTYPE_F16;
	c->t = t;
	c->n[0] = M, c->n[1] = N, c->n[2] = K, c->n[3] = ldx, c->n[4] = ldy, c->n[5] = beta;
	float *x = addin(c, "x", (size_t)M * ldx, -1, 1);
	float *W = addin(c, "W", (size_t)N * K, -1, 1);
	/* |y| ~ sqrt(K): the tolerance scales with it */
	addout(c, "y", M, N, ldy, -1, 1, 1e-5 * sqrt((double)K), 1e-4);
	if (t == SS_DTYPE_F32) {
		addraw(c, "W (GPU)", W, (size_t)N * K * 4, 0);
	} else {
		uint16_t *h16 = malloc((size_t)N * K * 2), *x16 = malloc((size_t)ldx * 2);
		ss_from_f32(h16, t, W, (size_t)N * K);
		ss_to_f32(W, h16, t, (size_t)N * K);
		for (int r = 0; r < M; r++) {
			ss_from_f32(x16, t, x + (size_t)r * ldx, (size_t)ldx);
			ss_to_f32(x + (size_t)r * ldx, x16, t, (size_t)ldx);
		}
		addraw(c, "W (GPU)", h16, (size_t)N * K * 2, 0);
		free(h16);
		free(x16);
	}
	snprintf(c->what, sizeof(c->what), "linear %s %dx%dx%d b%d", ss_dtype_name(t), M, N, K,
		 beta);
	return 1;
}
static void cpu_linear(const tcase *c, void **p)
{
	assert_int_equal(ss_linear_cpu(p[2], c->n[4], p[0], c->n[3], p[1], SS_DTYPE_F32, c->n[0],
				       c->n[1], c->n[2], (float)c->n[5]), 0);
}
static void cuda_linear(const tcase *c, void **p, ss_cuda_blas *b)
{
	assert_int_equal(cu->linear(b, p[2], c->n[4], p[0], c->n[3], p[3], c->t, c->n[0], c->n[1],
				    c->n[2], (float)c->n[5]), 0);
}
static void ref_linear(const tcase *c, void **p)
{
	double *y = dbuf((size_t)c->n[0] * c->n[1]);
	opref_linear(y, p[0], c->n[3], p[1], c->n[5] ? p[2] : NULL, c->n[4], c->n[0], c->n[1],
		     c->n[2]);
	put(p[2], c->n[4], y, c->n[0], c->n[1]);
}

/* conv1d over packed sequences (k = 0) and its decode step (k = 1 for the
 * step row): empty, short and long sequences, channels off the block size. */
static const int64_t CONV_SS[] = { 0, 5, 5, 6, 8, 1000, 1003 };

static int make_conv_common(tcase *c, int step)
{
	const int nch = 300, K = 4, K1 = 3, ldx = 311, nseq = 6;
	const int64_t T = CONV_SS[nseq], rows = step ? nseq : T;
	c->n[0] = nch, c->n[1] = K, c->n[2] = ldx, c->n[3] = nseq;
	addin(c, "x", (size_t)T * ldx, -2, 2);
	addin(c, "wt", (size_t)K * nch, -0.5, 0.5);
	addin(c, "b", nch, -0.1, 0.1);
	addout(c, "conv_state", 1, (size_t)nseq * nch * K1, (size_t)nseq * nch * K1, -1, 1, 0, 0);
	addout(c, "y", rows, nch, nch, 0, 0, 1e-5, 1e-5);
	addraw(c, "seq_start", CONV_SS, sizeof(CONV_SS), 0);
	snprintf(c->what, sizeof(c->what), "%s nch %d d_conv %d nseq %d",
		 step ? "conv1d_step" : "conv1d_silu", nch, K, nseq);
	return 1;
}
static int make_conv(tcase *c, int k)
{
	return k < 1 && make_conv_common(c, 0);
}
static int make_conv_step(tcase *c, int k)
{
	return k < 1 && make_conv_common(c, 1);
}
static void cpu_conv(const tcase *c, void **p)
{
	ss_conv1d_silu_cpu(p[4], c->n[0], p[0], c->n[2], p[5], c->n[3], p[3],
			   (ptrdiff_t)c->n[0] * (c->n[1] - 1), p[1], c->n[0], p[2], c->n[0], c->n[1]);
}
static void cuda_conv(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->conv1d_silu(p[4], c->n[0], p[0], c->n[2], p[5], c->n[3], p[3],
			(ptrdiff_t)c->n[0] * (c->n[1] - 1), p[1], c->n[0], p[2], c->n[0], c->n[1],
			NULL);
}
static void cpu_conv_step(const tcase *c, void **p)
{
	ss_conv1d_step_cpu(p[4], c->n[0], p[0], c->n[2], c->n[3], p[3],
			   (ptrdiff_t)c->n[0] * (c->n[1] - 1), p[1], c->n[0], p[2], c->n[0], c->n[1]);
}
static void cuda_conv_step(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->conv1d_step(p[4], c->n[0], p[0], c->n[2], c->n[3], p[3],
			(ptrdiff_t)c->n[0] * (c->n[1] - 1), p[1], c->n[0], p[2], c->n[0], c->n[1],
			NULL);
}

/* seq_start of nseq one-row sequences (decode), in one[64]. */
static const int64_t *row_starts(int64_t *one, int nseq)
{
	assert_true(nseq < 64);
	for (int s = 0; s <= nseq; s++)
		one[s] = s;
	return one;
}

/* The reference of both conv rows: the step is the batch op with one row
 * per sequence. */
static void ref_conv_common(const tcase *c, void **p, int step)
{
	const int nch = c->n[0], K = c->n[1], nseq = c->n[3];
	const int64_t *ss = p[5];
	int64_t one[64];
	if (step)
		ss = row_starts(one, nseq);
	const int64_t T = ss[nseq];
	const size_t ns = (size_t)nseq * nch * (K - 1);
	float *w = malloc((size_t)nch * K * sizeof(float));
	double *y = malloc(((size_t)T * nch + 1) * sizeof(double)), *st = malloc((ns + 1) * sizeof(double));
	assert_true(w && y && st);
	for (int k = 0; k < K; k++)
		for (int ch = 0; ch < nch; ch++)
			w[ch * K + k] = ((const float *)p[1])[k * nch + ch];
	opref_conv(y, st, p[0], c->n[2], ss, nseq, p[3], w, p[2], nch, K);
	for (size_t i = 0; i < (size_t)T * nch; i++)
		((float *)p[4])[i] = (float)y[i];
	for (size_t i = 0; i < ns; i++)
		((float *)p[3])[i] = (float)st[i];
	free(w);
	free(y);
	free(st);
}
static void ref_conv(const tcase *c, void **p)
{
	ref_conv_common(c, p, 0);
}
static void ref_conv_step(const tcase *c, void **p)
{
	ref_conv_common(c, p, 1);
}

/* dt = softplus(raw + bias), clamped to [1e-3, 0.1]. */
static int make_dt(tcase *c, int k)
{
	const int T = 1003, H = 24, ldr = 311;
	if (k >= 1)
		return 0;
	c->n[0] = T, c->n[1] = H, c->n[2] = ldr;
	addin(c, "raw", (size_t)T * ldr, -2, 2);
	addin(c, "dt_bias", H, -3, 3);
	addout(c, "dt", T, H, H, 0, 0, 1e-6, 1e-5);
	snprintf(c->what, sizeof(c->what), "dt_softplus T %d H %d", T, H);
	return 1;
}
static void cpu_dt(const tcase *c, void **p)
{
	ss_dt_softplus_cpu(p[2], c->n[1], p[0], c->n[2], p[1], c->n[0], c->n[1], 1e-3f, 0.1f);
}
static void cuda_dt(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->dt_softplus(p[2], c->n[1], p[0], c->n[2], p[1], c->n[0], c->n[1], 1e-3f, 0.1f, NULL);
}
static void ref_dt(const tcase *c, void **p)
{
	double *dt = dbuf((size_t)c->n[0] * c->n[1]);
	opref_dt(dt, p[0], c->n[2], p[1], c->n[0], c->n[1], 1e-3f, 0.1f);
	put(p[2], c->n[1], dt, c->n[0], c->n[1]);
}

/* The scan, its SSD form and the decode step: shapes (H, P, N, G) over
 * lengths empty, 1, one chunk minus one, several chunks plus a tail. */
static const int64_t SCAN_SS[] = { 0, 0, 1, 64, 64 + 63, 64 + 63 + 300 };
static const int64_t SCAN_ONE[] = { 0, 1 };

static int make_scan_common(tcase *c, int k, int step)
{
	static const int shapes[][4] = { { 1, 1, 1, 1 }, { 4, 3, 5, 2 },
					 { 24, 64, 128, 1 } /* mamba2-130m heads */,
					 { 6, 8, 200, 3 } /* d_state off 32 */ };
	if (k >= 4)
		return 0;
	const int H = shapes[k][0], P = shapes[k][1], N = shapes[k][2], G = shapes[k][3];
	const int64_t *ss = k ? SCAN_SS : SCAN_ONE;
	const int nseq = k ? 5 : 1;
	const int64_t T = ss[nseq], rows = step ? nseq : T;
	const int HP = H * P, ld = HP + 2 * G * N;
	const size_t SL = (size_t)H * P * N;
	int64_t maxlen = 0;
	for (int s = 0; s < nseq; s++)
		if (ss[s + 1] - ss[s] > maxlen)
			maxlen = ss[s + 1] - ss[s];
	c->d = (ss_scan_dims){ H, P, N, G };
	c->n[0] = nseq, c->n[1] = ld, c->n[2] = (int)maxlen;
	addin(c, "xBC", (size_t)T * ld, -1, 1);
	addin(c, "dt", (size_t)T * H, 0.001, 0.2);
	addin(c, "A_log", H, 0, 2.7);
	addin(c, "D", H, 0.5, 1.5);
	addout(c, "ssm", 1, nseq * SL, nseq * SL, -1, 1, 1e-4, 1e-4);
	addout(c, "logdecay", 1, (size_t)nseq * H, (size_t)nseq * H, -30, 0, 1e-5, 1e-6);
	addout(c, "y", rows, HP, HP, 0, 0, 1e-4, 1e-4);
	addraw(c, "seq_start", ss, (size_t)(nseq + 1) * sizeof(int64_t), 0);
	snprintf(c->what, sizeof(c->what), "H %d P %d N %d G %d nseq %d rows %lld", H, P, N, G, nseq,
		 (long long)rows);
	return 1;
}
static int make_scan(tcase *c, int k)
{
	return make_scan_common(c, k, 0);
}
static int make_step(tcase *c, int k)
{
	return make_scan_common(c, k, 1);
}

/* The scan's arguments from buffer p: x, B, C at offsets 0, HP, HP + GN of
 * the xBC rows. */
#define SCAN_ARGS(p)                                                                           \
	(float *)p[0], c->n[1], (float *)p[0] + HP, c->n[1], (float *)p[0] + HP + GN, c->n[1],   \
		p[1], c->d.nheads, p[2], p[3], p[4], (ptrdiff_t)SL, p[6], HP, p[5], c->d.nheads
#define SCAN_DIMS                                                                              \
	const int HP = c->d.nheads * c->d.headdim, GN = c->d.ngroups * c->d.d_state;             \
	const size_t SL = (size_t)HP * c->d.d_state

static void cpu_scan(const tcase *c, void **p)
{
	SCAN_DIMS;
	assert_int_equal(ss_ssm_scan_cpu(&c->d, p[7], c->n[0], SCAN_ARGS(p)), 0);
}
static void cuda_scan(const tcase *c, void **p, ss_cuda_blas *b)
{
	SCAN_DIMS;
	(void)b;
	assert_int_equal(cu->ssm_scan(&c->d, p[7], c->n[0], SCAN_ARGS(p), NULL), 0);
}
static void cuda_ssd(const tcase *c, void **p, ss_cuda_blas *b)
{
	SCAN_DIMS;
	(void)b;
	assert_int_equal(cu->ssd_scan(&c->d, p[7], c->n[0], c->n[2], SCAN_ARGS(p), NULL), 0);
}
static void cpu_step(const tcase *c, void **p)
{
	SCAN_DIMS;
	assert_int_equal(ss_ssm_step_cpu(&c->d, c->n[0], SCAN_ARGS(p)), 0);
}
static void cuda_step(const tcase *c, void **p, ss_cuda_blas *b)
{
	SCAN_DIMS;
	(void)b;
	assert_int_equal(cu->ssm_step(&c->d, c->n[0], SCAN_ARGS(p), NULL), 0);
}

/* The reference of the scan rows (the step: one row per sequence). */
static void ref_scan_common(const tcase *c, void **p, int step)
{
	SCAN_DIMS;
	const int nseq = c->n[0], ld = c->n[1], H = c->d.nheads;
	const int64_t *ss = p[7];
	int64_t one[64];
	if (step)
		ss = row_starts(one, nseq);
	const int64_t T = ss[nseq];
	const float *xbc = p[0];
	double *S = malloc((nseq * SL + 1) * sizeof(double)), *y = calloc((size_t)T * HP + 1, sizeof(double));
	double *lg = malloc(((size_t)nseq * H + 1) * sizeof(double));
	assert_true(S && y && lg);
	for (size_t i = 0; i < nseq * SL; i++)
		S[i] = ((const float *)p[4])[i];
	for (int i = 0; i < nseq * H; i++)
		lg[i] = ((const float *)p[5])[i];
	opref_scan(&c->d, ss, nseq, xbc, ld, xbc + HP, xbc + HP + GN, ld, p[1], p[2], p[3], S, y, lg);
	for (size_t i = 0; i < nseq * SL; i++)
		((float *)p[4])[i] = (float)S[i];
	for (int i = 0; i < nseq * H; i++)
		((float *)p[5])[i] = (float)lg[i];
	for (size_t i = 0; i < (size_t)T * HP; i++)
		((float *)p[6])[i] = (float)y[i];
	free(S);
	free(y);
	free(lg);
}
static void ref_scan(const tcase *c, void **p)
{
	ref_scan_common(c, p, 0);
}
static void ref_step(const tcase *c, void **p)
{
	ref_scan_common(c, p, 1);
}

/* argmax over rows with a tie, an all-NaN row and a winner in the last
 * column, over n = all columns and all but the last. */
static int make_argmax(tcase *c, int k)
{
	const int R = 5, Nv = 50288;
	if (k >= 2)
		return 0;
	c->n[0] = R, c->n[1] = Nv, c->n[2] = Nv - k;
	float *lg = addin(c, "logits", (size_t)R * Nv, -5, 5);
	lg[1 * Nv + 7] = 100;
	lg[1 * Nv + 9] = 100; /* tie: the first wins */
	for (int i = 0; i < Nv; i++)
		lg[2 * Nv + i] = NAN; /* all NaN: -1 */
	lg[3 * Nv + 0] = NAN;
	lg[3 * Nv + Nv - 1] = 1e30f; /* the last column */
	addraw(c, "ids", NULL, (size_t)R * sizeof(int32_t), 1);
	memset(c->b[1].h, 0, (size_t)R * sizeof(int32_t));
	snprintf(c->what, sizeof(c->what), "argmax_rows R %d n %d", R, Nv - k);
	return 1;
}
static void cpu_argmax(const tcase *c, void **p)
{
	ss_argmax_rows_cpu(p[1], p[0], c->n[1], c->n[0], c->n[2]);
}
static void cuda_argmax(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->argmax_rows(p[1], p[0], c->n[1], c->n[0], c->n[2], NULL);
}
static void ref_argmax(const tcase *c, void **p)
{
	opref_argmax(p[1], p[0], c->n[1], c->n[0], c->n[2]);
}

/* Mamba-1's low-rank dt: random per-channel W and bias, dt_low inside
 * wider x_proj rows. n: T, d_inner, R, ldl. */
static int make_dt_proj(tcase *c, int k)
{
	/* T, d_inner, R; the last case's biases cross 0 and softplus's 20 */
	static const int shapes[][3] = { { 1, 1, 1 }, { 37, 130, 5 }, { 300, 1536, 48 }, { 9, 1000, 3 } };
	if (k >= 4)
		return 0;
	const int T = shapes[k][0], DI = shapes[k][1], R = shapes[k][2], ldl = R + 2 * 16;
	c->n[0] = T, c->n[1] = DI, c->n[2] = R, c->n[3] = ldl;
	addin(c, "low", (size_t)T * ldl, -2, 2);
	addin(c, "W", (size_t)DI * R, -1 / sqrt(R), 1 / sqrt(R));
	addin(c, "dt_bias", DI, -7, k == 3 ? 25 : -2);
	addout(c, "dt", T, DI, DI, 0, 0, 1e-6, 1e-5);
	snprintf(c->what, sizeof(c->what), "dt_proj T %d d_inner %d R %d", T, DI, R);
	return 1;
}
static void cpu_dt_proj(const tcase *c, void **p)
{
	ss_dt_proj_cpu(p[3], c->n[1], p[0], c->n[3], p[1], p[2], c->n[0], c->n[1], c->n[2]);
}
static void cuda_dt_proj(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->dt_proj(p[3], c->n[1], p[0], c->n[3], p[1], p[2], c->n[0], c->n[1], c->n[2], NULL);
}
static void ref_dt_proj(const tcase *c, void **p)
{
	double *dt = dbuf((size_t)c->n[0] * c->n[1]);
	opref_dt_proj(dt, p[0], c->n[3], p[1], p[2], c->n[0], c->n[1], c->n[2]);
	put(p[3], c->n[1], dt, c->n[0], c->n[1]);
}

/* Mamba-1's scan (and its decode form, seq_start NULL): A_log and D random
 * per channel AND per state element (m1's are the same for every channel,
 * which would hide an indexing bug), x and dt at a row stride wider than
 * d_inner, B | C inside wider x_proj rows. n: nseq, d_inner, N, ldx, ldbc. */
static int make_scan1_common(tcase *c, int k, int step)
{
	static const int shapes[][2] = { { 1, 1 }, { 5, 3 }, { 70, 16 }, { 33, 40 } };
	if (k >= 4)
		return 0;
	const int DI = shapes[k][0], N = shapes[k][1];
	const int64_t *ss = k ? SCAN_SS : SCAN_ONE;
	const int nseq = k ? 5 : 1;
	const int64_t T = ss[nseq], rows = step ? nseq : T;
	const int ldx = DI + 3, ldbc = 7 + 2 * N;
	const size_t SL = (size_t)DI * N;
	c->n[0] = nseq, c->n[1] = DI, c->n[2] = N, c->n[3] = ldx, c->n[4] = ldbc;
	addin(c, "x", (size_t)rows * ldx, -1, 1);
	addin(c, "BC", (size_t)rows * ldbc, -1, 1);
	addin(c, "dt", (size_t)rows * ldx, 0.0005, 0.2);
	addin(c, "A_log", SL, -1, 3);
	addin(c, "D", DI, 0.5, 1.5);
	addout(c, "ssm", 1, nseq * SL, nseq * SL, -1, 1, 1e-4, 1e-4);
	addout(c, "logdecay", 1, nseq * SL, nseq * SL, -30, 0, 1e-5, 1e-6);
	addout(c, "y", rows, DI, DI, 0, 0, 1e-4, 1e-4);
	addraw(c, "seq_start", ss, (size_t)(nseq + 1) * sizeof(int64_t), 0);
	snprintf(c->what, sizeof(c->what), "d_inner %d N %d nseq %d rows %lld", DI, N, nseq,
		 (long long)rows);
	return 1;
}
static int make_scan1(tcase *c, int k)
{
	return make_scan1_common(c, k, 0);
}
static int make_scan1_step(tcase *c, int k)
{
	return make_scan1_common(c, k, 1);
}
#define SCAN1_ARGS(p)                                                                          \
	p[0], c->n[3], (float *)p[1] + 7, c->n[4], p[2], c->n[3], p[3], p[4], p[5],             \
		(ptrdiff_t)c->n[1] * c->n[2], p[7], c->n[1], p[6], (ptrdiff_t)c->n[1] * c->n[2]
static void cpu_scan1(const tcase *c, void **p)
{
	assert_int_equal(ss_ssm1_scan_cpu(c->n[1], c->n[2], p[8], c->n[0], SCAN1_ARGS(p)), 0);
}
static void cuda_scan1(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	assert_int_equal(cu->ssm1_scan(c->n[1], c->n[2], p[8], c->n[0], SCAN1_ARGS(p), NULL), 0);
}
static void cpu_scan1_step(const tcase *c, void **p)
{
	assert_int_equal(ss_ssm1_scan_cpu(c->n[1], c->n[2], NULL, c->n[0], SCAN1_ARGS(p)), 0);
}
static void cuda_scan1_step(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	assert_int_equal(cu->ssm1_scan(c->n[1], c->n[2], NULL, c->n[0], SCAN1_ARGS(p), NULL), 0);
}
static void ref_scan1_common(const tcase *c, void **p, int step)
{
	const int nseq = c->n[0], DI = c->n[1], N = c->n[2];
	const int64_t *ss = p[8];
	int64_t one[64];
	if (step)
		ss = row_starts(one, nseq);
	const int64_t T = ss[nseq];
	const size_t SL = (size_t)nseq * DI * N;
	double *S = dbuf(SL), *lg = dbuf(SL), *y = dbuf((size_t)T * DI);
	for (size_t i = 0; i < SL; i++) {
		S[i] = ((const float *)p[5])[i];
		lg[i] = ((const float *)p[6])[i];
	}
	opref_scan1(DI, N, ss, nseq, p[0], c->n[3], (const float *)p[1] + 7, c->n[4], p[2], c->n[3],
		    p[3], p[4], S, y, lg);
	for (size_t i = 0; i < SL; i++) {
		((float *)p[5])[i] = (float)S[i];
		((float *)p[6])[i] = (float)lg[i];
	}
	free(S);
	free(lg);
	put(p[7], DI, y, (size_t)T, DI);
}
static void ref_scan1(const tcase *c, void **p)
{
	ref_scan1_common(c, p, 0);
}
static void ref_scan1_step(const tcase *c, void **p)
{
	ref_scan1_common(c, p, 1);
}

/* Mamba-1's gate y · silu(z), y and z inside wider rows. n: T, d, ld. */
static int make_gate(tcase *c, int k)
{
	const int T = 29, d = 1536 + 3 * k, ld = 2 * d + 1;
	if (k >= 2)
		return 0;
	c->n[0] = T, c->n[1] = d, c->n[2] = ld;
	addin(c, "z", (size_t)T * ld, -6, 6);
	addout(c, "y", T, d, ld, -2, 2, 1e-6, 1e-5);
	snprintf(c->what, sizeof(c->what), "gate_silu T %d d %d", T, d);
	return 1;
}
static void cpu_gate(const tcase *c, void **p)
{
	ss_gate_silu_cpu(p[1], c->n[2], (float *)p[0] + c->n[1], c->n[2], c->n[0], c->n[1]);
}
static void cuda_gate(const tcase *c, void **p, ss_cuda_blas *b)
{
	(void)b;
	cu->gate_silu(p[1], c->n[2], (float *)p[0] + c->n[1], c->n[2], c->n[0], c->n[1], NULL);
}
static void ref_gate(const tcase *c, void **p)
{
	double *y = dbuf((size_t)c->n[0] * c->n[1]);
	opref_gate(y, p[1], c->n[2], (float *)p[0] + c->n[1], c->n[2], c->n[0], c->n[1]);
	put(p[1], c->n[2], y, c->n[0], c->n[1]);
}

/* The rows: one or more per op of SS_CUDA_OPS (test_registered checks),
 * in the order of ss_ops.h's table of twins. */
static const twin twins[] = {
	{ "embed", OP(embed), make_embed, cpu_embed, cuda_embed, ref_embed },
	{ "rmsnorm", OP(rmsnorm), make_rmsnorm, cpu_rmsnorm, cuda_rmsnorm, ref_rmsnorm },
	{ "gated norm", OP(gated_rmsnorm), make_gated, cpu_gated, cuda_gated, ref_gated },
	{ "linear", OP(linear), make_linear, cpu_linear, cuda_linear, ref_linear },
	{ "conv1d", OP(conv1d_silu), make_conv, cpu_conv, cuda_conv, ref_conv },
	{ "conv1d step", OP(conv1d_step), make_conv_step, cpu_conv_step, cuda_conv_step,
	  ref_conv_step },
	{ "dt", OP(dt_softplus), make_dt, cpu_dt, cuda_dt, ref_dt },
	{ "scan", OP(ssm_scan), make_scan, cpu_scan, cuda_scan, ref_scan },
	{ "scan (SSD)", OP(ssd_scan), make_scan, cpu_scan, cuda_ssd, ref_scan },
	{ "scan step", OP(ssm_step), make_step, cpu_step, cuda_step, ref_step },
	{ "argmax", OP(argmax_rows), make_argmax, cpu_argmax, cuda_argmax, ref_argmax },
	{ "dt low-rank", OP(dt_proj), make_dt_proj, cpu_dt_proj, cuda_dt_proj, ref_dt_proj },
	{ "scan (M1)", OP(ssm1_scan), make_scan1, cpu_scan1, cuda_scan1, ref_scan1 },
	{ "scan (M1) step", OP(ssm1_scan), make_scan1_step, cpu_scan1_step, cuda_scan1_step,
	  ref_scan1_step },
	{ "gate", OP(gate_silu), make_gate, cpu_gate, cuda_gate, ref_gate },
};
#define NTWINS (sizeof(twins) / sizeof(twins[0]))

/* Every op of SS_CUDA_OPS has a row above, and every row checks one of
 * them: an op registered in device_plugin.h without a parity adapter here
 * fails this, with or without a GPU. */
static void test_registered(void **st)
{
	(void)st;
#define SS_OP_ENTRY_(op, ret, params) { #op, offsetof(ss_cuda_api, op) },
	static const struct {
		const char *name;
		size_t slot;
	} ops[] = { SS_CUDA_OPS(SS_OP_ENTRY_) };
#undef SS_OP_ENTRY_
	const size_t nops = sizeof(ops) / sizeof(ops[0]);
	int bad = 0;

	for (size_t i = 0; i < nops; i++) {
		size_t rows = 0;
		for (size_t t = 0; t < NTWINS; t++)
			rows += twins[t].slot == ops[i].slot;
		if (!rows) {
			printf("  op %s (SS_CUDA_OPS) has no row in twins[]\n", ops[i].name);
			bad++;
		}
	}
	for (size_t t = 0; t < NTWINS; t++) {
		size_t i = 0;
		while (i < nops && ops[i].slot != twins[t].slot)
			i++;
		if (i == nops) {
			printf("  row %s checks no op of SS_CUDA_OPS\n", twins[t].op);
			bad++;
		}
	}
	printf("  %zu ops registered, %zu rows\n", nops, NTWINS);
	assert_int_equal(bad, 0);
}

/* Mismatches of buffer b, got vs want ("gpu"/"cpu" in the printout). */
static int cmp_buf(const tbuf *b, const void *got, const void *want, double atol, double rtol)
{
	if (b->i32) {
		int bad = 0;
		for (size_t i = 0; i < b->bytes / 4; i++)
			if (((const int32_t *)got)[i] != ((const int32_t *)want)[i]) {
				printf("  %s[%zu]: got %d want %d\n", b->name, i, ((const int32_t *)got)[i],
				       ((const int32_t *)want)[i]);
				bad++;
			}
		return bad;
	}
	return cmp(b->name, got, b->ld, want, b->ld, b->rows, b->w, atol, rtol);
}

/* One case of one twin: the CPU op, then the CUDA op when there is a GPU
 * (else the reference), and every output compared. Returns mismatches. */
static int run_case(const twin *tw, tcase *c, ss_cuda_blas *blas)
{
	void *hp[MAXBUF], *gp[MAXBUF], *back[MAXBUF];
	int bad = 0;

	for (int i = 0; i < c->nb; i++) {
		hp[i] = malloc(c->b[i].bytes ? c->b[i].bytes : 1);
		back[i] = malloc(c->b[i].bytes ? c->b[i].bytes : 1);
		assert_true(hp[i] && back[i]);
		memcpy(hp[i], c->b[i].h, c->b[i].bytes);
		if (cu) {
			gp[i] = up(c->b[i].h, c->b[i].bytes);
		} else {
			gp[i] = malloc(c->b[i].bytes ? c->b[i].bytes : 1);
			assert_non_null(gp[i]);
			memcpy(gp[i], c->b[i].h, c->b[i].bytes);
		}
	}
	tw->cpu(c, hp);
	if (cu)
		tw->cuda(c, gp, blas);
	else
		tw->ref(c, gp);
	printf("  %-12s %s%s\n", tw->op, c->what, cu ? "" : " (CPU vs reference)");
	for (int i = 0; i < c->nb; i++) {
		const tbuf *b = &c->b[i];
		if (cu)
			down(back[i], gp[i], b->bytes);
		else
			memcpy(back[i], gp[i], b->bytes);
		if (b->out) {
			bad += cmp_buf(b, back[i], hp[i], b->atol, b->rtol);
			if (!b->i32)
				for (size_t j = 0; j < b->bytes / 4; j++)
					if (!isfinite(((const float *)hp[i])[j])) {
						printf("  %s[%zu] not finite\n", b->name, j);
						bad++;
						break;
					}
		} else if (memcmp(back[i], b->h, b->bytes) || memcmp(hp[i], b->h, b->bytes)) {
			printf("  %s: an input was written\n", b->name);
			bad++;
		}
		free(hp[i]);
		free(back[i]);
		if (cu)
			cu->dfree(gp[i]);
		else
			free(gp[i]);
	}
	return bad;
}

static void test_ops(void **st)
{
	(void)st;
	ss_cuda_blas *blas = cu ? cu->blas_create(NULL) : NULL;
	int bad = 0, ncase = 0;

	assert_true(!cu || blas);
	for (size_t t = 0; t < NTWINS; t++) {
		rng_state = 11 + t;
		for (int k = 0;; k++) {
			tcase c = { .nb = 0 };
			if (!twins[t].make(&c, k))
				break;
			bad += run_case(&twins[t], &c, blas);
			ncase++;
			for (int i = 0; i < c.nb; i++)
				free(c.b[i].h);
		}
	}
	printf("  %d cases of %zu twins\n", ncase, NTWINS);
	if (blas)
		cu->blas_free(blas);
	assert_int_equal(bad, 0);
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

/* golden/ (Mamba-2, under shared_dir) or golden-mamba1/ (under
 * $SS_SHARED) */
static const char *golden_set = "golden", *golden_root = shared_dir;

static void *gold(const char *rel, size_t elem, size_t *count)
{
	char path[8192];
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/%s/%s", golden_root, golden_set, rel);
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

/* key: the case folder (t1, m1) of golden_set, model: its model folder. */
static void golden_cases(const char *key, const char *model)
{
	const char *cases[] = { "c1", "c2", "c3", "c4", "docB" };
	char dir[8192], rel[256], errmsg[SS_ERRMSG_MAX] = "";
	ss_model *m;
	ss_forward_ctx *ctx;
	int bad = 0;

	if (!golden_root[0])
		skip();
	snprintf(dir, sizeof(dir), "%s/%s/models/%s", golden_root, golden_set, model);
	if (ss_model_load(&m, dir, errmsg))
		fail_msg("%s", errmsg);
	if (ss_forward_ctx_init_dev(&ctx, m, dev, 1, 0, errmsg))
		fail_msg("%s", errmsg);
	assert_int_equal(ss_forward_ctx_device(ctx), SS_DEVICE_CUDA);
	const int V = m->cfg.vocab_padded, dm = m->cfg.d_model;
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		size_t n, k;
		ss_state s;
		snprintf(rel, sizeof(rel), "%s/%s/tokens.i32", key, cases[ci]);
		int32_t *tok = gold(rel, 4, &n);
		float *logits = malloc(n * (size_t)V * 4), *hidden = malloc(n * (size_t)dm * 4);
		state_for(&s, m);
		ss_forward_seq q = { tok, (int64_t)n, &s, logits, hidden, 0 };
		if (ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, errmsg))
			fail_msg("%s: %s", cases[ci], errmsg);
		printf("  %s %s/%s (%zu tokens)\n", golden_set, key, cases[ci], n);
		snprintf(rel, sizeof(rel), "%s/%s/hidden.f32", key, cases[ci]);
		float *g = gold(rel, 4, &k);
		bad += cmp("  hidden", hidden, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "%s/%s/ssm.f32", key, cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  ssm", s.ssm, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "%s/%s/conv.f32", key, cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  conv", s.conv, 1, g, 1, 1, k, 1e-4, 1e-4);
		free(g);
		snprintf(rel, sizeof(rel), "%s/%s/logdecay.f32", key, cases[ci]);
		g = gold(rel, 4, &k);
		bad += cmp("  logdecay", s.logdecay, 1, g, 1, 1, k, 0, 1e-5);
		free(g);
		snprintf(rel, sizeof(rel), "%s/%s/argmax.i32", key, cases[ci]);
		int32_t *am = gold(rel, 4, &k);
		snprintf(rel, sizeof(rel), "%s/%s/top2_margin.f32", key, cases[ci]);
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

static void test_golden(void **st)
{
	(void)st;
	golden_set = "golden";
	golden_cases("t1", "t1-hf");
}

/* Mamba-1 (golden-mamba1's m1) on the GPU backend. */
static void test_golden_mamba1(void **st)
{
	(void)st;
	char probe[8192];
	const char *sh = getenv("SS_SHARED");
	snprintf(probe, sizeof(probe), "%s/golden-mamba1/manifest.json", sh ? sh : "");
	if (!sh || !*sh || access(probe, R_OK) != 0)
		skip();
	golden_set = "golden-mamba1";
	golden_root = sh;
	golden_cases("m1", "m1-hf");
	golden_set = "golden";
	golden_root = shared_dir;
}

/* A random mamba2-130m-shaped model: GPU and CPU on a batch of documents of
 * varied lengths (states, last logits), then decode steps. */
static void model_vs_cpu(const char *preset, ss_dtype weights_dtype, double tol)
{
	const int l2 = weights_dtype != SS_DTYPE_F32;
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
	assert_int_equal(ss_mkmodel_preset(&o, preset), 0);
	o.dtype = weights_dtype;
	if (ss_mkmodel_write(dir, &o, errmsg) || ss_model_load(&m, dir, errmsg))
		fail_msg("%s", errmsg);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir); unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", dir); unlink(path);
	rmdir(dir);
	assert_int_equal(ss_forward_ctx_init(&cc, m, 2, 0, NULL), 0);
	/* a small ubatch: sequences cross passes on the GPU too */
	if (ss_forward_ctx_init_dev(&gc, m, dev, 1, 512, errmsg))
		fail_msg("%s", errmsg);
	assert_int_equal(ss_forward_ctx_device(gc), SS_DEVICE_CUDA);
	const int V = m->cfg.vocab_padded;
	float *lc = malloc((size_t)NS * V * 4), *lgp = malloc((size_t)NS * V * 4);
	rng_state = 15;
	for (int i = 0; i < NS; i++) {
		tok[i] = malloc((size_t)(lens[i] + 1) * 4);
		for (int64_t t = 0; t < lens[i]; t++)
			tok[i][t] = (int32_t)(urand() * 50277);
		state_for(&sc[i], m);
		state_for(&sg[i], m);
		qc[i] = (ss_forward_seq){ tok[i], lens[i], &sc[i], lc + (size_t)i * V, NULL, 0 };
		qg[i] = (ss_forward_seq){ tok[i], lens[i], &sg[i], lgp + (size_t)i * V, NULL, 0 };
	}
	assert_int_equal(ss_forward_prefill(cc, qc, NS, SS_LOGITS_LAST, errmsg), 0);
	if (ss_forward_prefill(gc, qg, NS, SS_LOGITS_LAST, errmsg))
		fail_msg("gpu prefill: %s", errmsg);
	for (int i = 0; i < NS; i++) {
		printf("  %s doc %d (%lld tokens)\n", ss_dtype_name(weights_dtype), i,
		       (long long)lens[i]);
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
	model_vs_cpu("mamba2-130m", SS_DTYPE_F32, 2e-4);
}

/* bf16 weights: the CPU widens them exactly; the GPU also rounds the
 * activations to bf16 before each GEMM, hence a relative L2 bound of 2%. */
static void test_model_bf16(void **st)
{
	(void)st;
	model_vs_cpu("mamba2-130m", SS_DTYPE_BF16, 2e-2);
}

/* Mamba-1 (the mamba-130m shape) on the GPU backend vs the CPU. */
static void test_model_mamba1_f32(void **st)
{
	(void)st;
	model_vs_cpu("mamba-130m", SS_DTYPE_F32, 2e-4);
}

static void test_model_mamba1_bf16(void **st)
{
	(void)st;
	model_vs_cpu("mamba-130m", SS_DTYPE_BF16, 2e-2);
}

int main(void)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	const char *sh = getenv("SS_FIXTURES") ? getenv("SS_FIXTURES") : "tests/fixtures";
	int rc;

	if (ss_device_open(&dev, "cuda", errmsg)) {
		/* the table's CPU side still runs: each op on its own */
		const struct CMUnitTest cpu_only[] = { cmocka_unit_test(test_registered),
							cmocka_unit_test(test_ops) };
		if (cmocka_run_group_tests(cpu_only, NULL, NULL))
			return 1;
		printf("test_cuda_parity: skipped, no GPU to run on: %s\n", errmsg);
		return 77;
	}
	cu = ss_device_cuda(dev);
	printf("device %s, plugin %s (%s)\n", ss_device_name(dev), ss_device_plugin_path(dev), cu->build);
	if (sh && *sh)
		snprintf(shared_dir, sizeof(shared_dir), "%s", sh);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registered),
		cmocka_unit_test(test_ops),
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_model_f32),
		cmocka_unit_test(test_model_bf16),
		cmocka_unit_test(test_golden_mamba1),
		cmocka_unit_test(test_model_mamba1_f32),
		cmocka_unit_test(test_model_mamba1_bf16),
	};
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	ss_device_close(dev);
	return rc;
}
