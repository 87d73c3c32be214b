/*
 * vec.c — elementwise kernels of the forward pass. See vec.h.
 *
 * The AVX2 exp: exp(x) = 2^k · exp(r), k = round(x·log2 e), r = x - k·ln 2
 * (Cody–Waite split of ln 2, so r is exact to a few ulp), exp(r) by its
 * degree-7 Taylor polynomial on |r| <= ln2/2 (truncation < 1e-8 relative),
 * 2^k built in the exponent bits. Inputs are clamped to [-87.3, 88.3] so k
 * stays a normal exponent; silu needs nothing beyond that range (x/(1+e^88)
 * is 0 to f32 precision).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "forward/vec.h"
#include "forward/ops/linear_f32.h" /* ss_gemm_isa */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNELS 1
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx2,fma")))
#define UNROLL _Pragma("GCC unroll 8")

static inline int use_avx2(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The AVX-512 twins (the bits of the AVX2 kernels), as $SS_GEMM allows. */
static inline int use_avx512(void)
{
	return ss_gemm_isa() == 2;
}

/* exp's constants: the clamp, log2 e, ln 2 = hi + lo, then the Taylor
 * coefficients 1/7! .. 1/0!, highest first (Horner). */
static const float exp_lo = -87.3f, exp_hi = 88.3f, exp_log2e = 1.44269504088896341f,
		   exp_ln2_hi = 0.693359375f, exp_ln2_lo = -2.12194440e-4f;
static const float exp_taylor[8] = { 1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
				     1.0f / 6.0f, 0.5f, 1.0f, 1.0f };

/* expB and siluB on B-bit vectors (256: AVX2, 512: AVX-512), one text for
 * both widths: the same operations lane by lane (IEEE, no approximate
 * instruction), so the same bits. */
#define EXP_SILU(attr, B, round)                                                                 \
	attr static inline __m##B exp##B(__m##B x)                                               \
	{                                                                                        \
		x = _mm##B##_min_ps(_mm##B##_max_ps(x, _mm##B##_set1_ps(exp_lo)),                \
				    _mm##B##_set1_ps(exp_hi));                                   \
		const __m##B k = round(_mm##B##_mul_ps(x, _mm##B##_set1_ps(exp_log2e)),          \
				       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);           \
		const __m##B r = _mm##B##_fnmadd_ps(k, _mm##B##_set1_ps(exp_ln2_lo),             \
			_mm##B##_fnmadd_ps(k, _mm##B##_set1_ps(exp_ln2_hi), x));                 \
		__m##B p = _mm##B##_set1_ps(exp_taylor[0]);                                      \
		UNROLL for (int i = 1; i < 8; i++)                                               \
			p = _mm##B##_fmadd_ps(p, r, _mm##B##_set1_ps(exp_taylor[i]));            \
		const __m##B##i e = _mm##B##_add_epi32(_mm##B##_cvtps_epi32(k),                  \
						       _mm##B##_set1_epi32(127));                \
		return _mm##B##_mul_ps(p, _mm##B##_castsi##B##_ps(_mm##B##_slli_epi32(e, 23)));  \
	}                                                                                        \
	attr static inline __m##B silu##B(__m##B x)                                              \
	{                                                                                        \
		const __m##B d = _mm##B##_add_ps(_mm##B##_set1_ps(1.0f),                         \
			exp##B(_mm##B##_sub_ps(_mm##B##_setzero_ps(), x)));                      \
		return _mm##B##_div_ps(x, d);                                                    \
	}
EXP_SILU(AVX2, 256, _mm256_round_ps)

AVX2 static void silu_avx2(float *x, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, silu256(_mm256_loadu_ps(x + i)));
	for (; i < n; i++)
		x[i] = x[i] / (1.0f + expf(-x[i]));
}

AVX2 static void mul_silu_avx2(float *y, const float *z, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), silu256(_mm256_loadu_ps(z + i))));
	for (; i < n; i++)
		y[i] *= z[i] / (1.0f + expf(-z[i]));
}

AVX2 static void fma_avx2(float *y, const float *w, const float *x, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i),
							_mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += w[i] * x[i];
}

/* Rows ahead that conv_avx2_k prefetches its last tap's inputs by. A
 * task's channel slice of a row is a few hundred bytes, the rows ldx
 * (Mamba-2: d_in_proj) floats apart, and the loads waited on memory: the
 * conv was 7.1 % of an ss-encode's samples strip by strip over the rows,
 * 5 % row by row, 2.7 % row by row with this (2, 4 and 8 rows alike). */
#define CONV_PREFETCH 4

/* Channels [c, c + B/32) of row t of ss_vec_conv_silu (the enclosing
 * kernel's names: xt, yt that row's x and y; b, w, ldw, ldx, n, K): the
 * taps' FMAs in ss_vec_fma's order, then siluB (the bits of those two
 * passes); one text for conv_avx2_k and conv_avx512_k, so that the twins
 * keep one order. */
#define CONV_VEC(B)                                                                              \
	do {                                                                                     \
		__m##B acc = _mm##B##_loadu_ps(b + c);                                           \
		if (t + CONV_PREFETCH + 1 < n)                                                   \
			_mm_prefetch((const char *)(xt + (K + CONV_PREFETCH) * ldx + c), _MM_HINT_T0); \
		for (int k = 0; k < K; k++)                                                      \
			acc = _mm##B##_fmadd_ps(_mm##B##_loadu_ps(w + k * ldw + c),              \
						_mm##B##_loadu_ps(xt + k * ldx + c), acc);       \
		_mm##B##_storeu_ps(yt + c, silu##B(acc));                                        \
	} while (0)

/* ss_vec_conv_silu's rows, one after the other, 8 channels at a time
 * (CONV_VEC); the last channels as fma_avx2's and silu_avx2's tails do
 * them. */
AVX2 static inline __attribute__((always_inline)) void conv_avx2_k(float *y, ptrdiff_t ldy,
								   const float *x, ptrdiff_t ldx,
								   const float *w, ptrdiff_t ldw,
								   const float *b, int64_t n,
								   int nch, const int K)
{
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		float *yt = y + t * ldy;
		int c = 0;
		for (; c + 8 <= nch; c += 8)
			CONV_VEC(256);
		for (; c < nch; c++) {
			float acc = b[c];
			for (int k = 0; k < K; k++)
				acc += w[k * ldw + c] * xt[k * ldx + c];
			yt[c] = acc / (1.0f + expf(-acc));
		}
	}
}

AVX2 static void conv_avx2(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *w,
			   ptrdiff_t ldw, const float *b, int64_t n, int nch, int K)
{
	if (K == 4) /* Mamba's d_conv */
		conv_avx2_k(y, ldy, x, ldx, w, ldw, b, n, nch, 4);
	else
		conv_avx2_k(y, ldy, x, ldx, w, ldw, b, n, nch, K);
}

/* AVX-512 twins of the AVX2 silu passes (EXP_SILU's exp512 and silu512:
 * their bits), 16 lanes a step, where ss_gemm_isa() allows AVX-512
 * (not under $SS_GEMM=avx2, which stands for a host without it): the
 * conv's and the gate's silu, 2.5 and 2.3 % of an ss-encode's samples
 * through the AVX2 kernels, 1.9 and 1.8 % through these (AVX-512 Zen 5,
 * 60 WikiText-2 documents of 512 tokens, 2 threads). */
EXP_SILU(AVX512, 512, _mm512_roundscale_ps)

/* mul_silu_avx2's bits: 16 lanes, then its 8 and its scalar tail. */
AVX512 static void mul_silu_avx512(float *y, const float *z, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), silu512(_mm512_loadu_ps(z + i))));
	mul_silu_avx2(y + i, z + i, n - i);
}

/* conv_avx2_k's bits (CONV_VEC at 512 bits), 16 channels at a time, the
 * last through conv_avx2_k. */
AVX512 static inline __attribute__((always_inline)) void conv_avx512_k(float *y, ptrdiff_t ldy,
								       const float *x, ptrdiff_t ldx,
								       const float *w, ptrdiff_t ldw,
								       const float *b, int64_t n,
								       int nch, const int K)
{
	const int c16 = nch / 16 * 16;
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		float *yt = y + t * ldy;
		for (int c = 0; c < c16; c += 16)
			CONV_VEC(512);
	}
	if (c16 < nch)
		conv_avx2_k(y + c16, ldy, x + c16, ldx, w + c16, ldw, b + c16, n, nch - c16, K);
}

AVX512 static void conv_avx512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *w,
			       ptrdiff_t ldw, const float *b, int64_t n, int nch, int K)
{
	if (K == 4) /* Mamba's d_conv */
		conv_avx512_k(y, ldy, x, ldx, w, ldw, b, n, nch, 4);
	else
		conv_avx512_k(y, ldy, x, ldx, w, ldw, b, n, nch, K);
}

AVX2 static double sumsq_avx2(const float *x, int64_t n)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
	__m128d h;
	double s;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
		__m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
		a0 = _mm256_fmadd_pd(lo, lo, a0);
		a1 = _mm256_fmadd_pd(hi, hi, a1);
	}
	a0 = _mm256_add_pd(a0, a1);
	h = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
	s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
	for (; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

AVX2 static void scale_mul_avx2(float *y, const float *x, float s, const float *w, int64_t n)
{
	const __m256 sv = _mm256_set1_ps(s);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
						      _mm256_loadu_ps(w + i)));
	for (; i < n; i++)
		y[i] = x[i] * s * w[i];
}

AVX2 static void scale_avx2(float *y, const float *x, float s, int64_t n)
{
	const __m256 sv = _mm256_set1_ps(s);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
	for (; i < n; i++)
		y[i] = x[i] * s;
}

/* softplus(u) = max(u, 0) + log1p(e), e = exp(-|u|) <= 1, with
 * log1p(e) = 2·atanh(t) = 2t·(1 + t²/3 + t⁴/5 + ...), t = e/(2+e) <= 1/3:
 * eight terms leave < 2e-9 relative. */
AVX2 static void softplus_bias_avx2(float *y, const float *b, int64_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), two = _mm256_set1_ps(2.0f);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 u = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(b + i));
		const __m256 e = exp256(_mm256_or_ps(u, sign)); /* exp(-|u|) */
		const __m256 t = _mm256_div_ps(e, _mm256_add_ps(two, e)), t2 = _mm256_mul_ps(t, t);
		__m256 p = _mm256_set1_ps(1.0f / 15);
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 13));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 11));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 9));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 7));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 5));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f / 3));
		p = _mm256_fmadd_ps(p, t2, _mm256_set1_ps(1.0f));
		const __m256 l = _mm256_mul_ps(_mm256_add_ps(t, t), p);
		_mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_max_ps(u, _mm256_setzero_ps()), l));
	}
	for (; i < n; i++) {
		const float u = y[i] + b[i];
		y[i] = u > 20.0f ? u : log1pf(expf(u));
	}
}

/* ss_vec_scan1_x8 with the 8 channels in one vector. */
AVX2 static void scan1_x8_avx2(float *s, const float *A, int N, int64_t n, const float *x,
			       ptrdiff_t ldx, const float *dt, ptrdiff_t lddt, const float *BC,
			       ptrdiff_t ldbc, const float *D, float *y, ptrdiff_t ldy)
{
	const __m256 Dv = D ? _mm256_loadu_ps(D) : _mm256_setzero_ps();
	for (int64_t t = 0; t < n; t++) {
		const __m256 dv = _mm256_loadu_ps(dt + t * lddt), xv = _mm256_loadu_ps(x + t * ldx);
		const __m256 dx = _mm256_mul_ps(dv, xv);
		const float *B = BC + t * ldbc, *C = B + N;
		__m256 acc = _mm256_setzero_ps();
		for (int k = 0; k < N; k++) {
			const __m256 dA = exp256(_mm256_mul_ps(dv, _mm256_loadu_ps(A + 8 * k)));
			__m256 sk = _mm256_mul_ps(dA, _mm256_loadu_ps(s + 8 * k));
			sk = _mm256_fmadd_ps(_mm256_set1_ps(B[k]), dx, sk);
			_mm256_storeu_ps(s + 8 * k, sk);
			acc = _mm256_fmadd_ps(sk, _mm256_set1_ps(C[k]), acc);
		}
		if (y)
			_mm256_storeu_ps(y + t * ldy, _mm256_fmadd_ps(Dv, xv, acc));
	}
}

AVX2 static void axpby_avx2(float *y, float a, const float *x, float b, int64_t n)
{
	const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), bv,
							_mm256_mul_ps(_mm256_loadu_ps(y + i), av)));
	for (; i < n; i++)
		y[i] = fmaf(x[i], b, y[i] * a);
}
AVX2 static float max_avx2(const float *x, int64_t n)
{
	__m256 m = _mm256_set1_ps(-INFINITY);
	float r;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	r = _mm_cvtss_f32(h);
	for (; i < n; i++)
		if (x[i] > r)
			r = x[i];
	return r;
}

/* The f32 exps summed in double, four lanes at a time. */
AVX2 static double sumexp_avx2(const float *x, float m, int64_t n)
{
	const __m256 mv = _mm256_set1_ps(m);
	__m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
	__m128d h;
	double s;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
		a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
		a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
	}
	a0 = _mm256_add_pd(a0, a1);
	h = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
	s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
	for (; i < n; i++)
		s += exp((double)x[i] - m);
	return s;
}

AVX2 static void add_exp_avx2(float *y, const float *x, float m, float a, int64_t n)
{
	const __m256 mv = _mm256_set1_ps(m), av = _mm256_set1_ps(a);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)),
							_mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += (float)(a * exp((double)x[i] - m));
}
#endif

void ss_vec_silu(float *x, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		silu_avx2(x, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		x[i] = x[i] / (1.0f + expf(-x[i]));
}

void ss_vec_mul_silu(float *y, const float *z, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx512()) {
		mul_silu_avx512(y, z, n);
		return;
	}
	if (use_avx2()) {
		mul_silu_avx2(y, z, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] *= z[i] / (1.0f + expf(-z[i]));
}

void ss_vec_fma(float *y, const float *w, const float *x, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		fma_avx2(y, w, x, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] += w[i] * x[i];
}

void ss_vec_conv_silu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *w,
		      ptrdiff_t ldw, const float *b, int64_t n, int nch, int K)
{
#ifdef HAVE_AVX2_KERNELS
	if (use_avx512()) {
		conv_avx512(y, ldy, x, ldx, w, ldw, b, n, nch, K);
		return;
	}
	if (use_avx2()) {
		conv_avx2(y, ldy, x, ldx, w, ldw, b, n, nch, K);
		return;
	}
#endif
	for (int64_t t = 0; t < n; t++) {
		memcpy(y + t * ldy, b, (size_t)nch * sizeof(float));
		for (int k = 0; k < K; k++)
			ss_vec_fma(y + t * ldy, w + k * ldw, x + (t + k) * ldx, nch);
		ss_vec_silu(y + t * ldy, nch);
	}
}

double ss_vec_sumsq(const float *x, int64_t n)
{
	double s = 0.0;
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2())
		return sumsq_avx2(x, n);
#endif
	for (i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

void ss_vec_scale_mul(float *y, const float *x, float s, const float *w, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		scale_mul_avx2(y, x, s, w, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] = x[i] * s * w[i];
}

void ss_vec_scale(float *y, const float *x, float s, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		scale_avx2(y, x, s, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] = x[i] * s;
}

void ss_vec_axpby(float *y, float a, const float *x, float b, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		axpby_avx2(y, a, x, b, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] = fmaf(x[i], b, y[i] * a);
}

void ss_vec_scan1_x8(float *s, const float *A, int N, int64_t n, const float *x, ptrdiff_t ldx,
		     const float *dt, ptrdiff_t lddt, const float *BC, ptrdiff_t ldbc, const float *D,
		     float *y, ptrdiff_t ldy)
{
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		scan1_x8_avx2(s, A, N, n, x, ldx, dt, lddt, BC, ldbc, D, y, ldy);
		return;
	}
#endif
	for (int64_t t = 0; t < n; t++) {
		const float *B = BC + t * ldbc, *C = B + N;
		for (int c = 0; c < 8; c++) {
			const float dv = dt[t * lddt + c], xv = x[t * ldx + c], dx = dv * xv;
			float acc = 0.0f;
			for (int k = 0; k < N; k++) {
				float *e = &s[8 * k + c];
				*e = expf(dv * A[8 * k + c]) * *e + B[k] * dx;
				acc += *e * C[k];
			}
			if (y)
				y[t * ldy + c] = acc + (D ? D[c] : 0.0f) * xv;
		}
	}
}

void ss_vec_softplus_bias(float *y, const float *b, int64_t n)
{
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		softplus_bias_avx2(y, b, n);
		return;
	}
#endif
	for (int64_t i = 0; i < n; i++) {
		const float u = y[i] + b[i];
		y[i] = u > 20.0f ? u : log1pf(expf(u));
	}
}

float ss_vec_max(const float *x, int64_t n)
{
	float m = x[0];
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2())
		return max_avx2(x, n);
#endif
	for (i = 1; i < n; i++)
		if (x[i] > m)
			m = x[i];
	return m;
}

double ss_vec_sumexp(const float *x, float m, int64_t n)
{
	double s = 0.0;
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2())
		return sumexp_avx2(x, m, n);
#endif
	for (i = 0; i < n; i++)
		s += exp((double)x[i] - m);
	return s;
}

void ss_vec_add_exp(float *y, const float *x, float m, float a, int64_t n)
{
	int64_t i;
#ifdef HAVE_AVX2_KERNELS
	if (use_avx2()) {
		add_exp_avx2(y, x, m, a, n);
		return;
	}
#endif
	for (i = 0; i < n; i++)
		y[i] += (float)(a * exp((double)x[i] - m));
}
