/*
 * linear_f32.c — ss_linear_rows_cpu (ops/linear_f32.h): the linear op with
 * one fixed f32 summation order per output whatever the batch, W in f32,
 * bf16 or f16 (widened in registers: exact, so the order and the result are
 * those of the f32 path on the widened W).
 * Register tiles of R rows x C columns share their loads: per step of k, C
 * rows of W and R rows of x feed R·C independent FMA chains, one per output.
 * A tile's shape changes which outputs share loads, never an output's
 * order, so the shapes are free. Both operands are cut into cache blocks;
 * inside one, with AVX-512 and K <= TILE8_K_MAX, tiles of 8 rows of x (in
 * L1) by 3 rows of W walk the block of W (in L2), else tiles of 4 rows by 4
 * walk x's rows for each 4 rows of W.
 * No CUDA twin: the GPU path (kernels/linear.cu) promises no bitwise
 * batch invariance.
 */
#include "forward/ops/linear_f32.h"
#include "stream/internal.h" /* ss_cpu_f16c */

enum { W_F32, W_BF16, W_F16 };
/* Cache blocks of the SIMD paths: ROWS_N rows of W by ROWS_M rows of x
 * (144 + 192 KB at K = 768, in L2), so that x is not streamed from memory
 * once per tile of W when M is large (lm_head over a pass's rows: 1,280
 * rows at 107 GFLOP/s unblocked, 124 blocked; AVX-512 Zen 5, 1 thread).
 * ROWS_N is a multiple of 3 and of 4, the tiles' widths. */
#define ROWS_N 48
#define ROWS_M 64
/* Largest K for the 8 x 3 tiles: their 8 rows of x (32 KB at K = 1,024)
 * must stay in the 48 KB L1 beside W's lines. Measured on Zen 5, 1 thread,
 * 32 rows (bench/batch's B = 32), W streamed from memory, best of 5
 * interleaved runs: at in_proj's shape (N 3,352, K 768) 92 GFLOP/s with
 * 4 x 4 tiles, 108 with 8 x 3, 119 with the first pass's prefetch (pf);
 * at out_proj's (N 768, K 1,536) 8 x 3 ran at 86 against 4 x 4's 93, and
 * 4 x 4 with pf at 103. */
#define TILE8_K_MAX 1024

/* W[i] as f32 (exact). */
static inline float wval(const void *W, int64_t i, const int wt)
{
	if (wt == W_F32)
		return ((const float *)W)[i];
	const uint16_t h = ((const uint16_t *)W)[i];
	return wt == W_BF16 ? ss_bf16_to_f32(h) : ss_f16_to_f32(h);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE inline __attribute__((always_inline))
/* The tiles' loops must be unrolled for the accumulators to live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

AVX512 static INLINE __m512 load16(const void *W, int64_t i, const int wt)
{
	if (wt == W_F32)
		return _mm512_loadu_ps((const float *)W + i);
	const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i));
	if (wt == W_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	return _mm512_cvtph_ps(h);
}

/* One R x C tile (R <= 8, C <= 4, R·C <= 24, constants after inlining): y[r][c] =
 * W[c]·x[r] (+ beta·y[r][c]); W rows of stride K. 16 lanes a chain, the
 * K % 16 tail as zero-padded lanes of the same chain, then the fixed
 * reduction of _mm512_reduce_add_ps. */
AVX512 static INLINE void tile512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				  const void *W, int64_t K, float beta, const int R, const int C,
				  const int pf, const int wt)
{
	__m512 acc[8][4], w[4];
	int64_t k = 0;
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (; k + 16 <= K; k += 16) {
		UNROLL for (int c = 0; c < C; c++) {
			w[c] = load16(W, c * K + k, wt);
			/* a single row, or the first tile of x's rows over a block
			 * of W (pf), streams W from memory: fetch the next tile's
			 * rows (the hardware prefetcher alone leaves it waiting; in
			 * the other tiles W is in cache and the loads would cost) */
			if (R == 1 || pf)
				_mm_prefetch((const char *)W + (size_t)((C + c) * K + k) * (wt == W_F32 ? 4 : 2), _MM_HINT_T0);
		}
		UNROLL for (int r = 0; r < R; r++) {
			__m512 xv = _mm512_loadu_ps(x + r * ldx + k);
			/* one load of x per row and step: GCC would fold it into each
			 * of the C FMAs, C loads where one will do, and the tile is
			 * bound by loads (8 x 3: 27 loads a step for 24 FMAs) */
			__asm__("" : "+v"(xv));
			UNROLL for (int c = 0; c < C; c++)
				acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
		}
	}
	if (k < K) {
		const __mmask16 mk = (__mmask16)((1u << (K - k)) - 1u);
		UNROLL for (int c = 0; c < C; c++) {
			float t[16] = { 0 };
			for (int64_t i = k; i < K; i++)
				t[i - k] = wval(W, c * K + i, wt);
			w[c] = _mm512_loadu_ps(t);
		}
		UNROLL for (int r = 0; r < R; r++) {
			const __m512 xv = _mm512_maskz_loadu_ps(mk, x + r * ldx + k);
			UNROLL for (int c = 0; c < C; c++)
				acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
		}
	}
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++) {
			const float s = _mm512_reduce_add_ps(acc[r][c]);
			float *yr = y + r * ldy + c;
			*yr = beta != 0.0f ? s + beta * *yr : s;
		}
}

/* Rows [m, M) of x, R at a time (while R fit), each against all N rows of W
 * in tiles of C (the N % C rest one by one); returns the first row left. */
AVX512 static INLINE int64_t rows512_by_x(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
					  const void *W, int64_t m, int64_t M, int64_t N, int64_t K,
					  float beta, const int R, const int C, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	for (; m + R <= M; m += R) {
		int64_t n = 0;
		for (; n + C <= N; n += C)
			if (m == 0)
				tile512(y + m * ldy + n, ldy, x + m * ldx, ldx,
					(const char *)W + (size_t)(n * K) * esz, K, beta, R, C, 1, wt);
			else
				tile512(y + m * ldy + n, ldy, x + m * ldx, ldx,
					(const char *)W + (size_t)(n * K) * esz, K, beta, R, C, 0, wt);
		for (; n < N; n++)
			tile512(y + m * ldy + n, ldy, x + m * ldx, ldx,
				(const char *)W + (size_t)(n * K) * esz, K, beta, R, 1, 0, wt);
	}
	return m;
}

AVX512 static INLINE void rows512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				  const void *W, int64_t M, int64_t N, int64_t K, float beta,
				  const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	int64_t n, m = 0;
	if (K <= TILE8_K_MAX) {
		m = rows512_by_x(y, ldy, x, ldx, W, m, M, N, K, beta, 8, 3, wt);
		m = rows512_by_x(y, ldy, x, ldx, W, m, M, N, K, beta, 4, 3, wt);
		rows512_by_x(y, ldy, x, ldx, W, m, M, N, K, beta, 1, 4, wt);
		return;
	}
	for (n = 0; n + 4 <= N; n += 4) {
		const void *w = (const char *)W + (size_t)(n * K) * esz;
		if (M >= 4)
			tile512(y + n, ldy, x, ldx, w, K, beta, 4, 4, 1, wt);
		for (m = 4; m + 4 <= M; m += 4)
			tile512(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 4, 4, 0, wt);
		for (m = M / 4 * 4; m < M; m++)
			tile512(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 1, 4, 0, wt);
	}
	for (; n < N; n++) {
		const void *w = (const char *)W + (size_t)(n * K) * esz;
		for (m = 0; m + 4 <= M; m += 4)
			tile512(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 4, 1, 0, wt);
		for (; m < M; m++)
			tile512(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 1, 1, 0, wt);
	}
}

AVX2 static INLINE __m256 load8(const void *W, int64_t i, const int wt)
{
	if (wt == W_F32)
		return _mm256_loadu_ps((const float *)W + i);
	const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)W + i));
	if (wt == W_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	return _mm256_cvtph_ps(h);
}

/* AVX2 tile (R <= 2, C <= 4: 16 ymm registers): 8 lanes a chain, the
 * reduction of ops/linear.c's dot1, then the K % 8 tail in order. */
AVX2 static INLINE void tile256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				const void *W, int64_t K, float beta, const int R, const int C,
				const int wt)
{
	__m256 acc[2][4], w[4];
	int64_t k = 0;
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	for (; k + 8 <= K; k += 8) {
		UNROLL for (int c = 0; c < C; c++)
			w[c] = load8(W, c * K + k, wt);
		UNROLL for (int r = 0; r < R; r++) {
			const __m256 xv = _mm256_loadu_ps(x + r * ldx + k);
			UNROLL for (int c = 0; c < C; c++)
				acc[r][c] = _mm256_fmadd_ps(w[c], xv, acc[r][c]);
		}
	}
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++) {
			__m128 q = _mm_add_ps(_mm256_castps256_ps128(acc[r][c]),
					      _mm256_extractf128_ps(acc[r][c], 1));
			q = _mm_hadd_ps(q, q);
			float s = _mm_cvtss_f32(_mm_hadd_ps(q, q));
			for (int64_t t = k; t < K; t++)
				s += wval(W, c * K + t, wt) * x[r * ldx + t];
			float *yr = y + r * ldy + c;
			*yr = beta != 0.0f ? s + beta * *yr : s;
		}
}

AVX2 static INLINE void rows256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				const void *W, int64_t M, int64_t N, int64_t K, float beta,
				const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	int64_t n = 0, m;
	for (; n + 4 <= N; n += 4) {
		const void *w = (const char *)W + (size_t)(n * K) * esz;
		for (m = 0; m + 2 <= M; m += 2)
			tile256(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 2, 4, wt);
		for (; m < M; m++)
			tile256(y + m * ldy + n, ldy, x + m * ldx, ldx, w, K, beta, 1, 4, wt);
	}
	for (; n < N; n++)
		for (m = 0; m < M; m++)
			tile256(y + m * ldy + n, ldy, x + m * ldx, ldx,
				(const char *)W + (size_t)(n * K) * esz, K, beta, 1, 1, wt);
}

/* One instance per ISA and weight dtype. */
#define ROWS_FN(name, impl, attr, wt)                                                       \
	attr static void name(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,      \
			      const void *W, int64_t M, int64_t N, int64_t K, float beta)  \
	{                                                                                   \
		impl(y, ldy, x, ldx, W, M, N, K, beta, wt);                                 \
	}
ROWS_FN(rows512_f32, rows512, AVX512, W_F32)
ROWS_FN(rows512_bf16, rows512, AVX512, W_BF16)
ROWS_FN(rows512_f16, rows512, AVX512, W_F16)
ROWS_FN(rows256_f32, rows256, AVX2, W_F32)
ROWS_FN(rows256_bf16, rows256, AVX2, W_BF16)
ROWS_FN(rows256_f16, rows256, AVX2, W_F16)
#endif

int ss_linear_rows_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		       ss_dtype wt, int64_t M, int64_t N, int64_t K, float beta)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	if (wt != SS_DTYPE_F32 && wt != SS_DTYPE_BF16 && wt != SS_DTYPE_F16)
		return SS_ERR_UNSUPPORTED;
	const int w = wt == SS_DTYPE_F32 ? W_F32 : wt == SS_DTYPE_BF16 ? W_BF16 : W_F16;
#ifdef HAVE_X86_KERNELS
	void (*f)(float *, ptrdiff_t, const float *, ptrdiff_t, const void *, int64_t, int64_t,
		  int64_t, float) = NULL;
	static void (*const f512[3])(float *, ptrdiff_t, const float *, ptrdiff_t, const void *,
				     int64_t, int64_t, int64_t, float) = { rows512_f32, rows512_bf16,
									   rows512_f16 };
	static void (*const f256[3])(float *, ptrdiff_t, const float *, ptrdiff_t, const void *,
				     int64_t, int64_t, int64_t, float) = { rows256_f32, rows256_bf16,
									   rows256_f16 };
	if (__builtin_cpu_supports("avx512f"))
		f = f512[w];
	else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ss_cpu_f16c())
		f = f256[w];
	if (f) {
		const size_t wrow = (size_t)K * (wt == SS_DTYPE_F32 ? 4 : 2);
		for (int64_t n0 = 0; n0 < N; n0 += ROWS_N)
			for (int64_t m0 = 0; m0 < M; m0 += ROWS_M)
				f(y + m0 * ldy + n0, ldy, x + m0 * ldx, ldx,
				  (const char *)W + (size_t)n0 * wrow, M - m0 < ROWS_M ? M - m0 : ROWS_M,
				  N - n0 < ROWS_N ? N - n0 : ROWS_N, K, beta);
		return 0;
	}
#endif
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < M; m++) {
			const float *xm = x + m * ldx;
			float s = 0.0f;
			for (int64_t k = 0; k < K; k++)
				s += wval(W, n * K + k, w) * xm[k];
			y[m * ldy + n] = beta != 0.0f ? s + beta * y[m * ldy + n] : s;
		}
	return 0;
}
