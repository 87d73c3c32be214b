/*
 * test_q8_0.c — q8_0 weights (ss.h SS_DTYPE_Q8_0, --weights-dtype q8_0):
 * the linear op against a double-precision product with the same
 * (dequantized) weights, within the bound of x's quantization; the same
 * bits whatever M, N and the slice of W, and from every kernel (portable
 * C, AVX2, AVX-512 VNNI: those this CPU has); the embedding rows; and the
 * next-token NLL of a model loaded with q8_0 matrices against the same
 * model in f32, on the golden cases of t1 (tests/fixtures) and of t2
 * ($SS_SHARED/golden, skipped without it).
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
#include "forward/ops/linear.h"
#include "util/rng.h"

/* n f32 rows of k from W (q8_0, rows of k/32 blocks). Caller frees. */
static float *dequant(const void *W, int64_t n, int64_t k)
{
	float *w = malloc((size_t)(n * k) * sizeof(float));
	assert_non_null(w);
	ss_to_f32(w, W, SS_DTYPE_Q8_0, (size_t)(n * k));
	return w;
}

/* y = x·Wᵀ with q8_0 W against double sums of x times W dequantized. The
 * kernel quantizes x to q8_0 too: codes round(x/d) with d = max|x|/127 per
 * block, read back with d rounded to f16, so each x moves by at most d/2 +
 * 127·|d - f16(d)| and |y - ref| <= Σ_b (that) · Σ_{k in b} |w_k| (the
 * bound, checked to be reached within 10x so that it is not vacuous) plus
 * f32 rounding (1e-6 relative to Σ|w·x|). */
/* Largest |y - ref| / bound over y[M][N] = xs·Wᵀ (see above; asserts each
 * within its bound). */
static double worst_vs_bound(const float *y, const float *xs, const unsigned char *W, int M, int N, int K)
{
	float *w = dequant(W, N, K);
	double worst = 0;
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			double ref = 0, mag = 0, bound = 0;
			for (int b = 0; b < K / 32; b++) {
				double amax = 0, wsum = 0;
				for (int k = 32 * b; k < 32 * b + 32; k++) {
					amax = fmax(amax, fabs(xs[m * K + k]));
					wsum += fabs(w[n * K + k]);
					ref += (double)w[n * K + k] * xs[m * K + k];
					mag += fabs((double)w[n * K + k] * xs[m * K + k]);
				}
				const double d = amax / 127;
				bound += (d / 2 + 127 * fabs(d - ss_f16_to_f32(ss_f32_to_f16((float)d)))) * wsum;
			}
			const double e = fabs(y[m * N + n] - ref);
			assert_true(e <= bound + 1e-6 * mag);
			worst = fmax(worst, e / bound);
		}
	free(w);
	return worst;
}

/* x[M][K] and W[N][K] for the bound: one block of x with a far larger step
 * than the others. Caller frees *xs. */
static void bound_data(uint64_t *rng, float **xs, unsigned char *W, int M, int N, int K)
{
	float *ws = test_frnd(rng, (size_t)(N * K), -0.1, 0.1);
	*xs = test_frnd(rng, (size_t)(M * K), -2, 2);
	assert_non_null(*xs);
	assert_non_null(ws);
	(*xs)[3] = 40.0f;
	ss_from_f32(W, SS_DTYPE_Q8_0, ws, (size_t)(N * K));
	free(ws);
}

static void test_linear(void **st)
{
	(void)st;
	enum { M = 5, N = 37, K = 96 };
	uint64_t rng = 8;
	unsigned char W[N * K / 32 * 34];
	float y[M][N], *xs;
	bound_data(&rng, &xs, W, M, N, K);
	assert_int_equal(ss_linear_cpu(&y[0][0], N, xs, K, W, SS_DTYPE_Q8_0, M, N, K, 0.0f), 0);
	const double worst = worst_vs_bound(&y[0][0], xs, W, M, N, K);
	printf("  q8_0 linear %dx%dx%d: max |y - ref| / bound %.3f\n", M, N, K, worst);
	assert_true(worst > 0.1);
	free(xs);
}

static void test_slices(void **st)
{
	(void)st;
	enum { M = 7, N = 53, K = 160, ROW = K / 32 * 34 };
	uint64_t rng = 9;
	float *xs = test_frnd(&rng, M * K, -1, 1), *ws = test_frnd(&rng, N * K, -1, 1);
	float *y0 = test_frnd(&rng, M * N, -1, 1);
	unsigned char W[N * ROW];
	float all[M][N], part[M][N], acc[M][N];
	assert_non_null(xs);
	assert_non_null(ws);
	assert_non_null(y0);
	ss_from_f32(W, SS_DTYPE_Q8_0, ws, N * K);
	assert_int_equal(ss_linear_cpu(&all[0][0], N, xs, K, W, SS_DTYPE_Q8_0, M, N, K, 0.0f), 0);
	for (int m = 0; m < M; m++) /* one row at a time */
		assert_int_equal(ss_linear_cpu(part[m], N, xs + m * K, K, W, SS_DTYPE_Q8_0, 1, N, K, 0.0f), 0);
	assert_memory_equal(part, all, sizeof all);
	memset(part, 0, sizeof part);
	for (int n0 = 0, nb; n0 < N; n0 += nb) { /* uneven column slices */
		nb = N - n0 < 1 + n0 % 11 ? N - n0 : 1 + n0 % 11;
		assert_int_equal(ss_linear_cpu(&part[0][n0], N, xs, K, W + (size_t)n0 * ROW,
					       SS_DTYPE_Q8_0, M, nb, K, 0.0f), 0);
	}
	assert_memory_equal(part, all, sizeof all);
	/* beta: y = W·x + beta·y0, one rounding after the same dot */
	memcpy(acc, y0, sizeof acc);
	assert_int_equal(ss_linear_cpu(&acc[0][0], N, xs, K, W, SS_DTYPE_Q8_0, M, N, K, 0.5f), 0);
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++)
			assert_true(acc[m][n] == all[m][n] + 0.5f * y0[m * N + n]);
	/* K not a multiple of 32: refused */
	assert_int_equal(ss_linear_cpu(&part[0][0], N, xs, 40, W, SS_DTYPE_Q8_0, 1, 1, 40, 0.0f),
			 SS_ERR_UNSUPPORTED);
	free(xs);
	free(ws);
	free(y0);
}

static const char *const kname[3] = { "C", "AVX2", "AVX-512 VNNI" };

/* have[k]: whether this CPU and build have kernel k (ss_q8_0_force_kernel). */
static void kernels_have(int have[3])
{
	have[0] = 1;
	for (int k = 1; k < 3; k++)
		have[k] = ss_q8_0_force_kernel(k) == 0;
}

/* A case of the kernel tests: x[M][K] (from [-3, 3]) made hard on the
 * kernels (of each five blocks one all zero, two far smaller than the
 * rest: d rounding to a subnormal f16 and to 0, one far larger, one of
 * values halfway between codes), W[N][K] in q8_0 with codes -128 and 127,
 * y0[M][N]. Caller frees *x and *y0. */
static void case_data(uint64_t *rng, float **x, float **y0, unsigned char *W, int M, int N, int K)
{
	static const float scale[5] = { 0.0f, 1e-9f, 3e-6f, 1e3f, 1.0f };
	float *w = test_frnd(rng, (size_t)(N * K), -1, 1);
	*x = test_frnd(rng, (size_t)(M * K), -3, 3);
	*y0 = test_frnd(rng, (size_t)(M * N), -1, 1);
	assert_non_null(*x);
	assert_non_null(w);
	assert_non_null(*y0);
	for (int i = 0; i < M * K; i += 32)
		for (int j = 0; j < 32; j++) {
			float *v = *x + i + j;
			*v *= scale[(i / 32 + K) % 5];
			if ((i / 32 + K) % 5 == 4) /* amax 3: codes (c + 1/2)·3/127, halfway */
				*v = j ? ((float)(int)(*v * 40) + 0.5f) * (3.0f / 127) : 3.0f;
		}
	ss_from_f32(W, SS_DTYPE_Q8_0, w, (size_t)(N * K));
	W[2] = 0x80, W[3] = 0x7f;
	if (N > 1)
		W[K / 32 * 34 + 5] = 0x80;
	free(w);
}

/* Every kernel this CPU has (ss_q8_0_force_kernel) gives the bits of the
 * portable C one: M from 1 to 6 (tiles of one and of several rows of x),
 * N from 20 to 23 (tiles of four rows of W and the rest), K of 1 to 9
 * blocks (the kernels' steps of four and the rest), beta 0 and not; x with
 * an all-zero block, blocks far smaller (d rounding to a subnormal f16 and
 * to 0) and far larger than the rest, values halfway between codes; W with
 * codes -128 and 127. */
static void test_kernels(void **st)
{
	(void)st;
	enum { MMAX = 6, NMAX = 23, KMAX = 288 };
	uint64_t rng = 12;
	unsigned char W[NMAX * KMAX / 32 * 34];
	float ref[MMAX * NMAX], y[MMAX * NMAX], *x, *y0;
	int cases = 0, have[3];
	kernels_have(have);
	for (int K = 32; K <= KMAX; K += 32)
		for (int M = 1; M <= MMAX; M++) {
			const int N = NMAX - (K / 32 + M) % 4;
			case_data(&rng, &x, &y0, W, M, N, K);
			for (int beta = 0; beta < 2; beta++, cases++)
				for (int k = 0; k < 3; k++) {
					if (!have[k])
						continue;
					assert_int_equal(ss_q8_0_force_kernel(k), 0);
					memcpy(k ? y : ref, y0, (size_t)(M * N) * sizeof(float));
					assert_int_equal(ss_linear_cpu(k ? y : ref, N, x, K, W, SS_DTYPE_Q8_0, M, N, K,
								       0.5f * (float)beta), 0);
					if (k && memcmp(y, ref, (size_t)(M * N) * sizeof(float)))
						fail_msg("kernel %s: bits differ from C's (M %d, N %d, K %d, beta %d)",
							 kname[k], M, N, K, beta);
				}
			free(x);
			free(y0);
		}
	assert_int_equal(ss_q8_0_force_kernel(-1), 0);
	printf("  q8_0 kernels %s%s%s: the same bits on %d products\n", kname[0], have[1] ? ", AVX2" : "",
	       have[2] ? ", AVX-512 VNNI" : "", cases);
}

/* A non-finite x gives NaN outputs, not codes of an undefined conversion,
 * from every kernel. */
static void test_nonfinite(void **st)
{
	(void)st;
	enum { K = 64 };
	uint64_t rng = 10;
	float *ws = test_frnd(&rng, K, -1, 1), x[K] = { 0 }, y = 0;
	unsigned char W[K / 32 * 34];
	assert_non_null(ws);
	ss_from_f32(W, SS_DTYPE_Q8_0, ws, K);
	for (int k = 0; k < 3; k++)
		for (int v = 0; v < 2 && ss_q8_0_force_kernel(k) == 0; v++) {
			x[40] = v ? NAN : INFINITY;
			assert_int_equal(ss_linear_cpu(&y, 1, x, K, W, SS_DTYPE_Q8_0, 1, 1, K, 0.0f), 0);
			assert_true(isnan(y));
			y = 0;
			assert_int_equal(ss_linear_q8_0_cpu(&y, 1, x, K, W, 1, 1, K, 0.0f), 0);
			assert_true(isnan(y));
		}
	assert_int_equal(ss_q8_0_force_kernel(-1), 0);
	free(ws);
}

/* ss_linear_q8_0_cpu's result by its contract, written out here: x's rows to
 * q8_0 by ss_from_f32, each block's exact integer dot, one fmaf chain over
 * the blocks in order. */
static float gemm_spec(const float *x, const unsigned char *w, int64_t K)
{
	unsigned char xq[SS_Q8_0_ROW_MAX / 32 * 34];
	float acc = 0.0f;
	ss_from_f32(xq, SS_DTYPE_Q8_0, x, (size_t)K);
	for (int64_t b = 0; b < K / 32; b++) {
		const unsigned char *pw = w + b * 34, *px = xq + b * 34;
		uint16_t hw, hx;
		int32_t t = 0;
		memcpy(&hw, pw, 2);
		memcpy(&hx, px, 2);
		for (int i = 0; i < 32; i++)
			t += (int8_t)pw[2 + i] * (int8_t)px[2 + i];
		acc = fmaf((float)t, ss_f16_to_f32(hw) * ss_f16_to_f32(hx), acc);
	}
	return acc;
}

/* Prefill's product (ss_linear_q8_0_cpu): every kernel this CPU has gives the
 * bits of its contract (gemm_spec) for M from 1 to 37 (panels of 16 rows,
 * full and not) and 131 (past a chunk of 128), N of 1 to 19 (tiles of 8 rows of W and the rest), K of 1
 * to 9 blocks, beta 0 and not, the same x as test_kernels (zero, tiny,
 * huge and halfway blocks; W codes -128 and 127); the same bits for the
 * rows one at a time, in uneven groups and for slices of W's columns; and
 * within the bound of x's quantization against double sums (test_linear's
 * bound). */
static void test_gemm(void **st)
{
	(void)st;
	enum { MMAX = 37, NMAX = 19, KMAX = 288 };
	uint64_t rng = 13;
	unsigned char W[NMAX * KMAX / 32 * 34];
	float ref[MMAX * NMAX], y[MMAX * NMAX], part[MMAX * NMAX], *x, *y0;
	int cases = 0, have[3];
	double worst = 0;
	kernels_have(have);
	for (int K = 32; K <= KMAX; K += 32)
		for (int M = 1 + K / 32 % 3; M <= MMAX; M += 4 + K / 32 % 5) {
			const int N = 1 + (M * 7 + K / 32) % NMAX, row = K / 32 * 34;
			case_data(&rng, &x, &y0, W, M, N, K);
			for (int beta = 0; beta < 2; beta++, cases++) {
				const float bf = 0.5f * (float)beta;
				for (int m = 0; m < M; m++)
					for (int n = 0; n < N; n++) {
						const float v = gemm_spec(x + m * K, W + n * row, K);
						ref[m * N + n] = beta ? v + bf * y0[m * N + n] : v;
					}
				for (int k = 0; k < 3; k++) {
					if (!have[k])
						continue;
					assert_int_equal(ss_q8_0_force_kernel(k), 0);
					memcpy(y, y0, (size_t)(M * N) * sizeof(float));
					assert_int_equal(ss_linear_q8_0_cpu(y, N, x, K, W, M, N, K, bf), 0);
					if (memcmp(y, ref, (size_t)(M * N) * sizeof(float)))
						fail_msg("kernel %s: bits differ from the contract's (M %d, N %d, K %d, beta %d)",
							 kname[k], M, N, K, beta);
					/* uneven row groups, then uneven column slices */
					memcpy(part, y0, (size_t)(M * N) * sizeof(float));
					for (int m0 = 0, mr; m0 < M; m0 += mr) {
						mr = M - m0 < 1 + m0 % 19 ? M - m0 : 1 + m0 % 19;
						assert_int_equal(ss_linear_q8_0_cpu(part + m0 * N, N, x + m0 * K, K, W, mr, N, K, bf), 0);
					}
					assert_memory_equal(part, ref, (size_t)(M * N) * sizeof(float));
					memcpy(part, y0, (size_t)(M * N) * sizeof(float));
					for (int n0 = 0, nn; n0 < N; n0 += nn) {
						nn = N - n0 < 1 + n0 % 9 ? N - n0 : 1 + n0 % 9;
						assert_int_equal(ss_linear_q8_0_cpu(part + n0, N, x, K, W + (size_t)n0 * row,
										    M, nn, K, bf), 0);
					}
					assert_memory_equal(part, ref, (size_t)(M * N) * sizeof(float));
				}
			}
			free(x);
			free(y0);
		}
	/* rows past a chunk of x (the AVX2 kernel widens 128 rows at a time) */
	for (int k = 0; k < 3; k++) {
		enum { M = 131, N = 7, K = 96 };
		unsigned char Wc[N * K / 32 * 34];
		float yc[M * N], *x, *y0;
		if (!have[k])
			continue;
		case_data(&rng, &x, &y0, Wc, M, N, K);
		assert_int_equal(ss_q8_0_force_kernel(k), 0);
		assert_int_equal(ss_linear_q8_0_cpu(yc, N, x, K, Wc, M, N, K, 0.0f), 0);
		for (int m = 0; m < M; m++)
			for (int n = 0; n < N; n++)
				if (memcmp(&yc[m * N + n], &(float){ gemm_spec(x + m * K, Wc + n * (K / 32 * 34), K) },
					   sizeof(float)))
					fail_msg("kernel %s: bits differ from the contract's (M %d: row %d, n %d)", kname[k],
						 M, m, n);
		cases++;
		free(x);
		free(y0);
	}
	/* the error bound (test_linear's) */
	{
		enum { M = 21, N = 11, K = 128 };
		unsigned char Wb[N * K / 32 * 34];
		float yy[M * N], *xs;
		bound_data(&rng, &xs, Wb, M, N, K);
		assert_int_equal(ss_linear_q8_0_cpu(yy, N, xs, K, Wb, M, N, K, 0.0f), 0);
		worst = worst_vs_bound(yy, xs, Wb, M, N, K);
		assert_true(worst > 0.1);
		/* refused: K not a multiple of 32, K too large, ld too small */
		assert_int_equal(ss_linear_q8_0_cpu(yy, N, xs, K, Wb, 1, 1, 40, 0.0f), SS_ERR_UNSUPPORTED);
		assert_int_equal(ss_linear_q8_0_cpu(yy, N, xs, SS_Q8_0_ROW_MAX + 32, Wb, 1, 1,
						    SS_Q8_0_ROW_MAX + 32, 0.0f), SS_ERR_UNSUPPORTED);
		assert_int_equal(ss_linear_q8_0_cpu(yy, N, xs, K - 1, Wb, M, N, K, 0.0f), SS_ERR_INVALID);
		free(xs);
	}
	assert_int_equal(ss_q8_0_force_kernel(-1), 0);
	printf("  q8_0 prefill kernels %s%s%s: the contract's bits on %d products, by rows and by "
	       "slices; max |y - ref| / bound %.3f\n",
	       kname[0], have[1] ? ", AVX2" : "", have[2] ? ", AVX-512 VNNI" : "", cases, worst);
}

/* Embedding rows and the prefill panels: W's rows widened exactly as
 * ss_to_f32 gives them. */
static void test_embed_widen(void **st)
{
	(void)st;
	enum { V = 9, D = 64, ROW = D / 32 * 34 };
	uint64_t rng = 11;
	float *e = test_frnd(&rng, V * D, -1, 1), h[3][D], p[V * D];
	unsigned char E[V * ROW];
	const int32_t tok[3] = { 8, 0, 5 };
	assert_non_null(e);
	ss_from_f32(E, SS_DTYPE_Q8_0, e, V * D);
	float *w = dequant(E, V, D);
	ss_embed_cpu(&h[0][0], E, SS_DTYPE_Q8_0, tok, 3, D);
	for (int r = 0; r < 3; r++)
		assert_memory_equal(h[r], w + tok[r] * D, sizeof h[r]);
	ss_matvec_widen(p, E + 2 * ROW, SS_DTYPE_Q8_0, (V - 2) * D);
	assert_memory_equal(p, w + 2 * D, (V - 2) * D * sizeof(float));
	free(w);
	free(e);
}

/* A q8_0 model's prefill (ss_linear_q8_0_cpu in every projection) gives each
 * document the same bytes (states and last logits) whatever its batch, the
 * thread count and the kernel: t1's five golden documents in one call of 2
 * threads with the CPU's best kernel against each alone on 1 thread with
 * the portable C one. (A micro-batch that cuts a document changes its
 * scan's bits, with f32 weights too: not tested here.) */
static void test_prefill_invariant(void **st)
{
	(void)st;
	static const char *cases[] = { "c2", "c3", "c1", "docB", "c4" };
	enum { N = 5 };
	const char *fx = getenv("SS_FIXTURES");
	char dir[4096], path[8192], errmsg[SS_ERRMSG_MAX] = "";
	const char *root = fx && *fx ? fx : "tests/fixtures";
	ss_model *m;
	ss_forward_ctx *cb, *c1;
	ss_model_opts o = { .flags = SS_MODEL_WEIGHTS_DTYPE, .weights_dtype = SS_DTYPE_Q8_0 };
	snprintf(dir, sizeof dir, "%s/golden/models/t1-hf", root);
	if (ss_model_load_opts(&m, dir, &o, errmsg) || ss_forward_ctx_init(&cb, m, 2, 0, errmsg) ||
	    ss_forward_ctx_init(&c1, m, 1, 0, errmsg))
		fail_msg("%s: %s", dir, errmsg);
	const int V = m->cfg.vocab_padded;
	ss_state_dims d;
	ss_state sb[N], so;
	ss_forward_seq qb[N];
	int32_t tok[N][4096];
	float *lb = malloc((size_t)N * V * sizeof(float)), *lo = malloc((size_t)V * sizeof(float));
	assert_non_null(lb);
	assert_non_null(lo);
	ss_model_state_dims(m, &d);
	for (int i = 0; i < N; i++) {
		snprintf(path, sizeof path, "%s/golden/t1/%s/tokens.i32", root, cases[i]);
		FILE *f = fopen(path, "rb");
		if (!f)
			fail_msg("cannot read %s", path);
		const size_t n = fread(tok[i], sizeof(int32_t), 4096, f);
		fclose(f);
		assert_int_equal(ss_state_alloc(&sb[i], &d), 0);
		qb[i] = (ss_forward_seq){ .tokens = tok[i], .n_tokens = (int64_t)n, .state = &sb[i],
					  .logits = lb + (size_t)i * V };
	}
	if (ss_forward_prefill(cb, qb, N, SS_LOGITS_LAST, errmsg))
		fail_msg("prefill: %s", errmsg);
	assert_int_equal(ss_q8_0_force_kernel(0), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ss_state_alloc(&so, &d), 0);
		ss_forward_seq q = { .tokens = tok[i], .n_tokens = qb[i].n_tokens, .state = &so, .logits = lo };
		if (ss_forward_prefill(c1, &q, 1, SS_LOGITS_LAST, errmsg))
			fail_msg("prefill: %s", errmsg);
		if (memcmp(so.conv, sb[i].conv, ss_state_conv_len(&d) * sizeof(float)) ||
		    memcmp(so.ssm, sb[i].ssm, ss_state_ssm_len(&d) * sizeof(float)) ||
		    memcmp(so.logdecay, sb[i].logdecay, ss_state_logdecay_len(&d) * sizeof(float)) ||
		    memcmp(lo, lb + (size_t)i * V, (size_t)V * sizeof(float)))
			fail_msg("%s: batched on 2 threads differs from alone on 1", cases[i]);
		ss_state_free(&so);
		ss_state_free(&sb[i]);
	}
	assert_int_equal(ss_q8_0_force_kernel(-1), 0);
	printf("  q8_0 prefill: %d documents batched (2 threads, best kernel) = each alone (1 thread, "
	       "C kernel), bit for bit\n", N);
	free(lb);
	free(lo);
	ss_forward_ctx_free(cb);
	ss_forward_ctx_free(c1);
	ss_model_free(m);
}

/* ------------------------------------------------------------------ NLL */

/* The golden cases' next-token NLL of the model at dir: mean and max |NLL
 * with q8_0 matrices - NLL with f32 ones| over all positions of c2, c3, c4
 * and docB, by prefill (decode 0) or token by token (decode 1). */
static void nll_q8_0_vs_f32(const char *golden, const char *dir, int decode, double *mean, double *max)
{
	static const char *cases[] = { "c2", "c3", "c4", "docB" };
	ss_model *m[2];
	ss_forward_ctx *ctx[2];
	char errmsg[SS_ERRMSG_MAX] = "", path[8192];
	double sum = 0;
	size_t count = 0;
	for (int q = 0; q < 2; q++) {
		ss_model_opts o = { .flags = SS_MODEL_WEIGHTS_DTYPE,
				    .weights_dtype = q ? SS_DTYPE_Q8_0 : SS_DTYPE_F32 };
		if (ss_model_load_opts(&m[q], dir, &o, errmsg) || ss_forward_ctx_init(&ctx[q], m[q], 2, 0, errmsg))
			fail_msg("%s: %s", dir, errmsg);
	}
	*max = 0;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		snprintf(path, sizeof path, "%s/%s/tokens.i32", golden, cases[c]);
		FILE *f = fopen(path, "rb");
		int32_t tok[4096];
		if (!f)
			fail_msg("cannot read %s", path);
		const size_t n = fread(tok, sizeof *tok, 4096, f);
		fclose(f);
		const int V = m[0]->cfg.vocab_padded;
		double *nll[2];
		for (int q = 0; q < 2; q++) {
			float *logits = malloc(n * (size_t)V * sizeof(float));
			ss_state s, *sp = &s;
			ss_state_dims d;
			nll[q] = malloc(n * sizeof(double));
			assert_non_null(logits);
			assert_non_null(nll[q]);
			ss_model_state_dims(m[q], &d);
			assert_int_equal(ss_state_alloc(&s, &d), 0);
			ss_forward_seq seq = { .tokens = tok, .n_tokens = (int64_t)n, .state = &s, .logits = logits };
			for (size_t t = 0; decode && t < n; t++)
				if (ss_forward_decode(ctx[q], &sp, &tok[t], 1, logits + t * V, errmsg))
					fail_msg("decode: %s", errmsg);
			if (!decode && ss_forward_prefill(ctx[q], &seq, 1, SS_LOGITS_ALL, errmsg))
				fail_msg("prefill: %s", errmsg);
			for (size_t t = 0; t + 1 < n; t++) {
				const float *l = logits + t * V;
				double mx = l[0], se = 0;
				for (int v = 1; v < V; v++)
					mx = fmax(mx, l[v]);
				for (int v = 0; v < V; v++)
					se += exp(l[v] - mx);
				nll[q][t] = mx + log(se) - l[tok[t + 1]];
			}
			ss_state_free(&s);
			free(logits);
		}
		for (size_t t = 0; t + 1 < n; t++, count++) {
			const double e = fabs(nll[1][t] - nll[0][t]);
			sum += e;
			*max = fmax(*max, e);
		}
		free(nll[0]);
		free(nll[1]);
	}
	*mean = sum / (double)count;
	for (int q = 0; q < 2; q++) {
		ss_forward_ctx_free(ctx[q]);
		ss_model_free(m[q]);
	}
}

/* Tolerance of the NLL with q8_0 matrices against f32 ones, per position in
 * nats, about 3x what was measured here (t1's and t2's NLL are about 10.8
 * nats): t1 prefill mean 2.3e-3, max 1.3e-2, decode mean 3.3e-3, max
 * 1.7e-2; t2 prefill mean 3.5e-3, max 2.1e-2, decode mean 5.0e-3, max
 * 2.5e-2, when prefill widened W and multiplied f32 x; both quantize x
 * now (decode ss_matvec_q8_0, prefill ss_linear_q8_0_cpu): t1 prefill mean
 * 3.3e-3, max 1.7e-2, as decode.
 * bf16 matrices give t1 mean 7.1e-4, max 3.6e-3 (tests/test_forward.c). */
#define NLLQ8_MEAN 1.5e-2
#define NLLQ8_MAX 7.5e-2

static void check_nll(const char *root, const char *key, const char *model)
{
	char golden[4096], dir[8192];
	snprintf(golden, sizeof golden, "%s/golden/%s", root, key);
	snprintf(dir, sizeof dir, "%s/golden/models/%s", root, model);
	for (int decode = 0; decode < 2; decode++) {
		double mean, max;
		nll_q8_0_vs_f32(golden, dir, decode, &mean, &max);
		printf("  %s q8_0 vs f32 weights, %s: NLL mean |diff| %.2e, max %.2e nats\n", model,
		       decode ? "decode" : "prefill", mean, max);
		assert_true(mean <= NLLQ8_MEAN);
		assert_true(max <= NLLQ8_MAX);
	}
}

static void test_nll_t1(void **st)
{
	(void)st;
	const char *fx = getenv("SS_FIXTURES");
	check_nll(fx && *fx ? fx : "tests/fixtures", "t1", "t1-hf");
}

static void test_nll_t2(void **st)
{
	(void)st;
	const char *sh = getenv("SS_SHARED");
	char probe[8192];
	snprintf(probe, sizeof probe, "%s/golden/models/t2-hf/config.json", sh ? sh : "");
	FILE *f = sh && *sh ? fopen(probe, "rb") : NULL;
	if (!f) {
		printf("  t2: skipped (needs SS_SHARED with golden/models/t2-hf)\n");
		skip();
	}
	fclose(f);
	check_nll(sh, "t2", "t2-hf");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_slices),
		cmocka_unit_test(test_kernels),
		cmocka_unit_test(test_nonfinite),
		cmocka_unit_test(test_gemm),
		cmocka_unit_test(test_embed_widen),
		cmocka_unit_test(test_prefill_invariant),
		cmocka_unit_test(test_nll_t1),
		cmocka_unit_test(test_nll_t2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
