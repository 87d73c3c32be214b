/*
 * linear.c — the linear op on the CPU, ss_linear_cpu (ss_ops.h): f32
 * weights through the BLAS, bf16/f16 weights through ss_matvec_w16 below
 * (ops/linear.h), q8_0 through ss_matvec_q8_0 (ops/q8_0.c), and its backward ss_linear_backward_cpu (f32 weights, the
 * BLAS). The forward's twin: kernels/linear.cu (the backward has none:
 * training is CPU only).
 *
 * ss_matvec_w16: one row of W against one row of x at a time: 8 f32 lanes (widened from 8
 * weights: bf16 by a 16-bit shift, f16 by F16C), four independent FMA
 * chains, one fixed horizontal sum and the K % 8 tail in order, so every
 * y[m][n] has one summation order for a given K and CPU. bf16 on an AVX-512
 * CPU: the same with 16 lanes (half the instructions per weight; decode with
 * bf16 weights was held below f32's bandwidth by the widening, bench/forward).
 */
#include "forward/blas.h"
#include "base/internal.h" /* ss_cpu_f16c */

#include "forward/ops/linear.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNELS 1
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static int use_avx2(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ss_cpu_f16c();
}

AVX2 static inline __m256 load8(const uint16_t *p, int bf16)
{
	const __m128i h = _mm_loadu_si128((const __m128i *)p);
	if (bf16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	return _mm256_cvtph_ps(h);
}

static inline float widen(uint16_t h, int bf16)
{
	return bf16 ? ss_bf16_to_f32(h) : ss_f16_to_f32(h);
}

/* w · x: four FMA chains over blocks of 32, the blocks of 8 left into the
 * first, one fixed horizontal sum, then the tail in order. */
AVX2 static inline float dot1(const uint16_t *w, const float *x, int64_t K, int bf16)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t k = 0;
	for (; k + 32 <= K; k += 32) {
		a0 = _mm256_fmadd_ps(load8(w + k, bf16), _mm256_loadu_ps(x + k), a0);
		a1 = _mm256_fmadd_ps(load8(w + k + 8, bf16), _mm256_loadu_ps(x + k + 8), a1);
		a2 = _mm256_fmadd_ps(load8(w + k + 16, bf16), _mm256_loadu_ps(x + k + 16), a2);
		a3 = _mm256_fmadd_ps(load8(w + k + 24, bf16), _mm256_loadu_ps(x + k + 24), a3);
	}
	for (; k + 8 <= K; k += 8)
		a0 = _mm256_fmadd_ps(load8(w + k, bf16), _mm256_loadu_ps(x + k), a0);
	a0 = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
	q = _mm_hadd_ps(q, q);
	float s = _mm_cvtss_f32(_mm_hadd_ps(q, q));
	for (; k < K; k++)
		s += widen(w[k], bf16) * x[k];
	return s;
}

/* Row by row, so that W is one sequential stream (the hardware prefetcher
 * follows it; interleaving four rows' streams measured at half the rate);
 * with M > 1 the row is reused from L1. */
AVX2 static inline void matvec_avx2(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    const uint16_t *W, int64_t M, int64_t N, int64_t K, float beta,
				    int bf16)
{
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < M; m++) {
			const float d = dot1(W + n * K, x + m * ldx, K, bf16);
			float *ym = y + m * ldy + n;
			*ym = beta != 0.0f ? d + beta * *ym : d;
		}
}

AVX2 static void widen_avx2(float *dst, const uint16_t *src, size_t n, int bf16)
{
	size_t i = 0;
	if (bf16)
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(dst + i, load8(src + i, 1));
	else
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(dst + i, load8(src + i, 0));
	for (; i < n; i++)
		dst[i] = widen(src[i], bf16);
}

AVX2 static void matvec_bf16_avx2(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				  const uint16_t *W, int64_t M, int64_t N, int64_t K, float beta)
{
	matvec_avx2(y, ldy, x, ldx, W, M, N, K, beta, 1);
}

/* bf16 with AVX-512: dot1's order with 16 lanes (four chains over blocks of
 * 64, blocks of 16 into the first, one fixed horizontal sum, the tail in
 * order). */
__attribute__((target("avx512f"))) static inline float dot1_bf16_512(const uint16_t *w,
								     const float *x, int64_t K)
{
#define LOAD16(p) _mm512_castsi512_ps(_mm512_slli_epi32( \
		_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t k = 0;
	for (; k + 64 <= K; k += 64) {
		a0 = _mm512_fmadd_ps(LOAD16(w + k), _mm512_loadu_ps(x + k), a0);
		a1 = _mm512_fmadd_ps(LOAD16(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
		a2 = _mm512_fmadd_ps(LOAD16(w + k + 32), _mm512_loadu_ps(x + k + 32), a2);
		a3 = _mm512_fmadd_ps(LOAD16(w + k + 48), _mm512_loadu_ps(x + k + 48), a3);
	}
	for (; k + 16 <= K; k += 16)
		a0 = _mm512_fmadd_ps(LOAD16(w + k), _mm512_loadu_ps(x + k), a0);
#undef LOAD16
	float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
	for (; k < K; k++)
		s += ss_bf16_to_f32(w[k]) * x[k];
	return s;
}

__attribute__((target("avx512f"))) static void matvec_bf16_avx512(float *y, ptrdiff_t ldy,
								  const float *x, ptrdiff_t ldx,
								  const uint16_t *W, int64_t M,
								  int64_t N, int64_t K, float beta)
{
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < M; m++) {
			const float d = dot1_bf16_512(W + n * K, x + m * ldx, K);
			float *ym = y + m * ldy + n;
			*ym = beta != 0.0f ? d + beta * *ym : d;
		}
}

AVX2 static void matvec_f16_avx2(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				 const uint16_t *W, int64_t M, int64_t N, int64_t K, float beta)
{
	matvec_avx2(y, ldy, x, ldx, W, M, N, K, beta, 0);
}
#endif

void ss_matvec_w16(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		   ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta)
{
	const uint16_t *w = W;
	const int bf16 = weights_dtype == SS_DTYPE_BF16;
#ifdef HAVE_AVX2_KERNELS
	if (bf16 && __builtin_cpu_supports("avx512f")) {
		matvec_bf16_avx512(y, ldy, x, ldx, w, M, N, K, beta);
		return;
	}
	if (use_avx2()) {
		(bf16 ? matvec_bf16_avx2 : matvec_f16_avx2)(y, ldy, x, ldx, w, M, N, K, beta);
		return;
	}
#endif
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < M; m++) {
			const float *xm = x + m * ldx;
			const uint16_t *wn = w + n * K;
			float s = 0.0f;
			for (int64_t k = 0; k < K; k++)
				s += (bf16 ? ss_bf16_to_f32(wn[k]) : ss_f16_to_f32(wn[k])) * xm[k];
			y[m * ldy + n] = beta != 0.0f ? s + beta * y[m * ldy + n] : s;
		}
}

void ss_matvec_widen(float *dst, const void *src, ss_dtype weights_dtype, size_t n)
{
#ifdef HAVE_AVX2_KERNELS
	if ((weights_dtype == SS_DTYPE_BF16 || weights_dtype == SS_DTYPE_F16) && use_avx2()) {
		widen_avx2(dst, src, n, weights_dtype == SS_DTYPE_BF16);
		return;
	}
#endif
	ss_to_f32(dst, src, weights_dtype, n);
}

int ss_linear_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		  ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	const ss_dtype_info *wi = ss_dtype_info_of(weights_dtype);
	if (!wi || !(wi->uses & SS_DTYPE_WEIGHTS))
		return SS_ERR_UNSUPPORTED;
	if (weights_dtype == SS_DTYPE_Q8_0 && (K % 32 || K > SS_Q8_0_ROW_MAX))
		return SS_ERR_UNSUPPORTED;
	if (M == 0 || N == 0)
		return 0;
	if (weights_dtype == SS_DTYPE_Q8_0) {
		ss_matvec_q8_0(y, ldy, x, ldx, W, M, N, K, beta);
		return 0;
	}
	if (weights_dtype != SS_DTYPE_F32) {
		ss_matvec_w16(y, ldy, x, ldx, W, weights_dtype, M, N, K, beta);
		return 0;
	}
	if (M == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)N, (blasint)K, 1.0f, W, (blasint)K,
			    x, 1, beta, y, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)M, (blasint)N,
			    (blasint)K, 1.0f, x, (blasint)ldx, W, (blasint)K, beta, y, (blasint)ldy);
	return 0;
}

int ss_linear_backward_cpu(const float *dy, ptrdiff_t ldy, const float *x, float *dx,
			   ptrdiff_t ldx, const float *W, float *dW, int64_t M, int64_t N, int64_t K)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	if (M == 0 || N == 0 || K == 0)
		return 0;
	/* dx[M][K] += dy[M][N] · W[N][K] */
	if (dx)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)K,
			    (blasint)N, 1.0f, dy, (blasint)ldy, W, (blasint)K, 1.0f, dx, (blasint)ldx);
	/* dW[N][K] += dy[M][N]ᵀ · x[M][K] */
	if (dW)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)N, (blasint)K,
			    (blasint)M, 1.0f, dy, (blasint)ldy, x, (blasint)ldx, 1.0f, dW, (blasint)K);
	return 0;
}
