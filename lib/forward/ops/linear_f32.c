/*
 * linear_f32.c — ss_linear_rows_cpu (ops/linear_f32.h): the linear op with
 * one fixed f32 summation order per output whatever the batch, W in f32,
 * bf16 or f16 (widened in registers: exact, so the order and the result are
 * those of the f32 path on the widened W).
 * AVX-512: each output is one FMA chain over k = 0, 1, ... K - 1, and the
 * outputs sit in the lanes, so two kernels give the same bits:
 *   - few rows of x (< PANEL_MIN_ROWS): 16 rows of W transposed in
 *     registers (bf16 W as pairs of k, half the shuffles), 16 outputs a
 *     vector, W read once per 8 rows;
 *   - more: 32 (or 16) rows of x transposed into a panel on the stack (or
 *     packed once by the caller for several calls: ss_linear_rows_xpack),
 *     each element of W broadcast against 16 rows of x, tiles of 12 (or
 *     24) rows of W, W read once a panel.
 * AVX2: the same two kernels with 8 lanes (8 rows of W transposed in
 * registers against up to 4 rows of x; panels of 16 rows of x against
 * tiles of 6 rows of W, by groups of tiles kept in L2 while all the
 * panels pass), hence the same bits as AVX-512's: a host without
 * AVX-512 writes the states an AVX-512 host writes. (The previous AVX2
 * kernel, 8-lane chains reduced at the end, read W once per 2 rows of x:
 * 50 GFLOP/s at in_proj's prefill shape against 68 for these panels, one
 * thread; a decode row streams W at 11.6 GB/s, the AVX-512 kernel 13.0,
 * sgemv 12.6, measured here.)
 * No CUDA twin: the GPU path (kernels/linear.cu) promises no bitwise
 * batch invariance.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ops/linear_f32.h"
#include "base/internal.h" /* ss_cpu_f16c */
#include "forward/ops/transpose_simd.h"

enum { W_F32, W_BF16, W_F16 };
/* AVX2: rows of x per call of the transposing kernel (few256). */
#define FEW256 4
/* AVX-512: the transposing kernel takes up to FEW_ROWS rows of x at a
 * time (R accumulators beside the 16 registers of W's block); calls with
 * PANEL_MIN_ROWS rows or more use the panels, whose 16 lanes of rows would
 * be half empty below (the 130m shape's projections, 1 thread, f32: 8 rows
 * in 29 ms through the transposing kernel, 41 through a panel; 4 rows in
 * 27 and 33 ms). */
#define FEW_ROWS 8
#define PANEL_MIN_ROWS 9
/* AVX-512: floats of the panel of x on the stack (256 KB): 32 rows up to
 * K = 2,048, 16 rows up to 4,096, beyond that the transposing kernel. */
#define XT_FLOATS (32 * 2048)
/* AVX-512: each row of W is fetched this many bytes ahead. Measured for
 * one row of x, 1 thread, f32 W streamed from memory (in_proj, out_proj
 * and lm_head of the 130m shape, 24 layers): 128 to 320 bytes ahead took
 * 18.9-20.3 ms, 512 21.6-22.0, 1,024 25.3; without, 3x as long. */
#define W_PREFETCH 192

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
#define UNROLL _Pragma("GCC unroll 32")
/* One instance of impl per ISA (attr) and weight dtype (wt); xp, x packed
 * by ss_linear_rows_xpack or NULL, is read by the panel kernels only. */
#define ROWS_FN(name, impl, attr, wt)                                                       \
	attr static void name(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,      \
			      const float *xp, const void *W, int64_t M, int64_t N,        \
			      int64_t K, float beta)                                       \
	{                                                                                   \
		impl(y, ldy, x, ldx, xp, W, M, N, K, beta, wt);                             \
	}
/* The three instances name_f32, name_bf16, name_f16; BY_WT(name) picks
 * one by the constant wt. */
#define ROWS_FNS(name, impl, attr)                                                          \
	ROWS_FN(name##_f32, impl, attr, W_F32)                                              \
	ROWS_FN(name##_bf16, impl, attr, W_BF16)                                            \
	ROWS_FN(name##_f16, impl, attr, W_F16)
#define BY_WT(name) (wt == W_F32 ? name##_f32 : wt == W_BF16 ? name##_bf16 : name##_f16)
#define NOINLINE __attribute__((noinline))

AVX512 static INLINE __m512 load16(const void *W, int64_t i, const int wt)
{
	if (wt == W_F32)
		return _mm512_loadu_ps((const float *)W + i);
	const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i));
	if (wt == W_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	return _mm512_cvtph_ps(h);
}

/* c[j] = elements k0 + j of 16 rows of A (row stride lda, in wt), as f32.
 * Rows from nv on repeat row nv - 1 (their lanes are never stored). */
AVX512 static INLINE void tr16(__m512 c[16], const void *A, int64_t lda, int64_t k0, int nv,
			       const int wt)
{
	__m512 r[16];
	UNROLL for (int i = 0; i < 16; i++)
		r[i] = load16(A, (i < nv ? i : nv - 1) * lda + k0, wt);
	ss_transpose16(c, r);
}

/* y[i·ld] = t[i] + beta·y[i·ld], i < nv (an accumulator's lanes). */
static inline void put_lanes(float *y, ptrdiff_t ld, const float *t, int nv, float beta)
{
	for (int i = 0; i < nv; i++)
		y[i * ld] = beta != 0.0f ? t[i] + beta * y[i * ld] : t[i];
}

/* y = the accumulator's lanes (rows or columns, nv of them, stride ld) + beta·y. */
AVX512 static INLINE void store_lanes(float *y, ptrdiff_t ld, __m512 acc, int nv, float beta)
{
	float t[16];
	_mm512_storeu_ps(t, acc);
	put_lanes(y, ld, t, nv, beta);
}

/* Few rows of x (R <= FEW_ROWS; G = 2 only while R <= 3) against G groups
 * of 16 rows of W (nv in the last): W's blocks transposed in registers,
 * the outputs in the lanes, one chain per row of x and group. The rows of
 * W stream from memory: each is fetched W_PREFETCH bytes ahead. */
AVX512 static INLINE void few512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				 const void *W, int64_t K, float beta, int nv, const int R, const int G,
				 const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	__m512 acc[2][FEW_ROWS], c[16];
	int64_t k = 0;
	UNROLL for (int g = 0; g < G; g++)
		UNROLL for (int r = 0; r < R; r++)
			acc[g][r] = _mm512_setzero_ps();
	/* bf16: 32 k at a time, transposed as 16 pairs (half the shuffles of
	 * widening first), each pair widened by a shift and a mask */
	for (; wt == W_BF16 && k + 32 <= K; k += 32)
		UNROLL for (int g = 0; g < G; g++) {
			const int gv = g == G - 1 ? nv : 16;
			const uint16_t *Wg = (const uint16_t *)W + g * 16 * K;
			__m512 r[16];
			UNROLL for (int i = 0; i < 16; i++) {
				const uint16_t *row = Wg + (i < gv ? i : gv - 1) * K + k;
				_mm_prefetch((const char *)row + W_PREFETCH, _MM_HINT_T0);
				r[i] = _mm512_loadu_ps(row);
			}
			ss_transpose16(c, r);
			UNROLL for (int j = 0; j < 16; j++) {
				const __m512i pr = _mm512_castps_si512(c[j]);
				const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(pr, 16));
				const __m512 hi = _mm512_castsi512_ps(
					_mm512_and_si512(pr, _mm512_set1_epi32((int)0xFFFF0000u)));
				UNROLL for (int r2 = 0; r2 < R; r2++)
					acc[g][r2] = _mm512_fmadd_ps(lo, _mm512_set1_ps(x[r2 * ldx + k + 2 * j]),
								     acc[g][r2]);
				UNROLL for (int r2 = 0; r2 < R; r2++)
					acc[g][r2] = _mm512_fmadd_ps(hi, _mm512_set1_ps(x[r2 * ldx + k + 2 * j + 1]),
								     acc[g][r2]);
			}
		}
	for (; k + 16 <= K; k += 16)
		UNROLL for (int g = 0; g < G; g++) {
			const int gv = g == G - 1 ? nv : 16;
			const char *Wg = (const char *)W + (size_t)(g * 16 * K) * esz;
			UNROLL for (int i = 0; i < 16; i++)
				_mm_prefetch(Wg + (size_t)((i < gv ? i : gv - 1) * K + k) * esz + W_PREFETCH,
					     _MM_HINT_T0);
			tr16(c, Wg, K, k, gv, wt);
			UNROLL for (int j = 0; j < 16; j++)
				UNROLL for (int r = 0; r < R; r++)
					acc[g][r] = _mm512_fmadd_ps(c[j], _mm512_set1_ps(x[r * ldx + k + j]),
								    acc[g][r]);
		}
	for (; k < K; k++)
		UNROLL for (int g = 0; g < G; g++) {
			const int gv = g == G - 1 ? nv : 16;
			float t[16];
			for (int i = 0; i < 16; i++)
				t[i] = wval(W, (g * 16 + (i < gv ? i : gv - 1)) * K + k, wt);
			const __m512 cv = _mm512_loadu_ps(t);
			UNROLL for (int r = 0; r < R; r++)
				acc[g][r] = _mm512_fmadd_ps(cv, _mm512_set1_ps(x[r * ldx + k]), acc[g][r]);
		}
	UNROLL for (int g = 0; g < G; g++)
		UNROLL for (int r = 0; r < R; r++)
			store_lanes(y + r * ldy + g * 16, 1, acc[g][r], g == G - 1 ? nv : 16, beta);
}

/* R rows of x against the N rows of W: groups of 32 rows of W (two
 * chains per row of x, to hide the FMA latency) while R <= 3, else 16. */
AVX512 static INLINE void few_rows512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				      const void *W, int64_t N, int64_t K, float beta, const int R,
				      const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	int64_t n = 0;
	if (R <= 3)
		for (; n + 32 <= N; n += 32)
			few512(y + n, ldy, x, ldx, (const char *)W + (size_t)(n * K) * esz, K, beta,
			       16, R, 2, wt);
	for (; n < N; n += 16)
		few512(y + n, ldy, x, ldx, (const char *)W + (size_t)(n * K) * esz, K, beta,
		       N - n < 16 ? (int)(N - n) : 16, R, 1, wt);
}

/* Rows [0, M) of x against the N rows of W, up to FEW_ROWS at a time. */
AVX512 static INLINE void rows_few512_impl(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
					   const float *xp, const void *W, int64_t M, int64_t N,
					   int64_t K, float beta, const int wt)
{
	for (int64_t m = 0; m < M; m += FEW_ROWS) {
		float *ym = y + m * ldy;
		const float *xm = x + m * ldx;
		switch (M - m < FEW_ROWS ? M - m : FEW_ROWS) {
#define FEW_CASE(r)                                                              \
	case r:                                                                  \
		few_rows512(ym, ldy, xm, ldx, W, N, K, beta, r, wt);             \
		break;
			FEW_CASE(1) FEW_CASE(2) FEW_CASE(3) FEW_CASE(4)
			FEW_CASE(5) FEW_CASE(6) FEW_CASE(7) FEW_CASE(8)
#undef FEW_CASE
		}
	}
}

/* The transposing kernel, one instance per weight dtype (called from the
 * panel path too). */
ROWS_FNS(rows_few512, rows_few512_impl, AVX512 NOINLINE)

AVX512 static INLINE void rows_few512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				      const void *W, int64_t M, int64_t N, int64_t K, float beta,
				      const int wt)
{
	BY_WT(rows_few512)(y, ldy, x, ldx, NULL, W, M, N, K, beta);
}

/* 16-float steps of k ahead that pack_xt512 prefetches each row of x by:
 * a panel's rows are 16 or 32 streams ldx apart, which the hardware's
 * prefetchers followed late (pack_xt512 5.8 -> 4.8 % of an ss-encode's
 * samples, two alternations). */
#define PACK_PREFETCH 4
/* xt[k][16·V] = x's rows [0, mv) transposed (lanes of rows >= mv repeat a
 * row of the same 16 and are never stored). */
AVX512 static void pack_xt512(float *xt, const float *x, ptrdiff_t ldx, int64_t K, int mv, int V)
{
	__m512 c[16];
	for (int v = 0; v < V; v++) {
		const int nv = mv - 16 * v < 16 ? mv - 16 * v : 16;
		const float *xv = x + 16 * v * ldx;
		int64_t k = 0;
		for (; k + 16 <= K; k += 16) {
			if (k + 16 * PACK_PREFETCH < K)
				for (int i = 0; i < nv; i++)
					_mm_prefetch((const char *)(xv + i * ldx + k + 16 * PACK_PREFETCH),
						     _MM_HINT_T0);
			tr16(c, xv, ldx, k, nv, W_F32);
			for (int j = 0; j < 16; j++)
				_mm512_storeu_ps(xt + (k + j) * 16 * V + 16 * v, c[j]);
		}
		for (; k < K; k++)
			for (int l = 0; l < 16; l++)
				xt[k * 16 * V + 16 * v + l] = xv[(l < nv ? l : nv - 1) * ldx + k];
	}
}

/* A panel's tile of outputs, acc[n][v] (n < NR, v < V: lane l of v is row
 * 16·v + l of x, mv rows in all), to y: each 16 x 16 block transposed in
 * registers and stored a row at a time, lanes past NR masked off, beta·y
 * added in the lanes as put_lanes adds it (so store_lanes's bits, without
 * its 16 scalar stores per accumulator). For f32 W only, and out of line:
 * the f32 panels' loop then keeps its accumulators and x in registers
 * (inlined, an x vector spilled: 77 -> 60 % of the FMA peak); the 16-bit
 * panels' loop, which widens W through a buffer, ran slower with it (in_proj
 * bf16 172 against 188 GFLOP/s), and keeps store_lanes. F32 at the
 * backend's 256 x 256 calls, one thread, best of 5, three rounds alternated
 * with the build before (Zen 5): in_proj 191.0-191.5 against 187.0-189.3
 * GFLOP/s, out_proj 207.0-208.7 against 200.2-201.3. */
AVX512 static NOINLINE void store_tile512(float *y, ptrdiff_t ldy, const __m512 *acc, int NR,
					  int V, int mv, float beta)
{
	for (int v = 0; v < V && 16 * v < mv; v++) {
		const int rows = mv - 16 * v < 16 ? mv - 16 * v : 16;
		for (int g = 0; g < NR; g += 16) {
			const int nc = NR - g < 16 ? NR - g : 16;
			const __mmask16 mk = (__mmask16)((1u << nc) - 1);
			__m512 r[16], c[16];
			UNROLL for (int i = 0; i < 16; i++)
				r[i] = i < nc ? acc[(g + i) * 2 + v] : _mm512_setzero_ps();
			ss_transpose16(c, r);
			for (int i = 0; i < rows; i++) {
				float *yr = y + (16 * v + i) * ldy + g;
				__m512 o = c[i];
				if (beta != 0.0f)
					o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_set1_ps(beta),
									   _mm512_maskz_loadu_ps(mk, yr)));
				_mm512_mask_storeu_ps(yr, mk, o);
			}
		}
	}
}

/* Many rows: 16·V rows of x (mv of them, transposed in xt) against NR rows
 * of W, one W element broadcast to 16 rows per FMA; bf16 W two k per
 * 32-bit broadcast (k + 1 its high half masked, k its low half shifted
 * up: half the broadcasts, no buffer; bench/gemm's bf16 in_proj 214.0 and
 * 216.9 -> 221.0 and 217.2 GFLOP/s, out_proj 224.2 and 228.0 -> 228.3 and
 * 231.7, alternated with widening through wb); f16 W, and bf16's last k
 * (K mod 16), widened 16 k at a time into wb. */
AVX512 static INLINE void panel512(float *y, ptrdiff_t ldy, const float *xt, const void *W,
				   int64_t K, float beta, int mv, const int V, const int NR,
				   const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	__m512 acc[24][2];
	float wb[24][16];
	UNROLL for (int n = 0; n < NR; n++)
		UNROLL for (int v = 0; v < V; v++)
			acc[n][v] = _mm512_setzero_ps();
	for (int64_t k0 = 0; k0 < K; k0 += 16) {
		const int kn = K - k0 < 16 ? (int)(K - k0) : 16;
		const float *src = wb[0];
		int64_t ld = 16;
		UNROLL for (int n = 0; n < NR; n++)
			_mm_prefetch((const char *)W + (size_t)(n * K + k0) * esz + W_PREFETCH, _MM_HINT_T0);
		if (wt == W_F32) {
			src = (const float *)W + k0;
			ld = K;
		} else if (kn == 16 && wt == W_BF16) {
			/* bf16 pairs: one 32-bit broadcast gives k (<< 16) and k + 1 (& high) */
			const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
			for (int j = 0; j < 16; j += 2) {
				__m512 x0[2], x1[2];
				UNROLL for (int v = 0; v < V; v++) {
					x0[v] = _mm512_loadu_ps(xt + (k0 + j) * 16 * V + 16 * v);
					x1[v] = _mm512_loadu_ps(xt + (k0 + j + 1) * 16 * V + 16 * v);
				}
				UNROLL for (int n = 0; n < NR; n++) {
					int32_t d;
					memcpy(&d, (const uint16_t *)W + n * K + k0 + j, sizeof(d));
					const __m512i dv = _mm512_set1_epi32(d);
					const __m512 b0 = _mm512_castsi512_ps(_mm512_slli_epi32(dv, 16));
					const __m512 b1 = _mm512_castsi512_ps(_mm512_and_si512(dv, hi));
					UNROLL for (int v = 0; v < V; v++)
						acc[n][v] = _mm512_fmadd_ps(b0, x0[v], acc[n][v]);
					UNROLL for (int v = 0; v < V; v++)
						acc[n][v] = _mm512_fmadd_ps(b1, x1[v], acc[n][v]);
				}
			}
			continue;
		} else if (kn == 16) {
			UNROLL for (int n = 0; n < NR; n++)
				_mm512_storeu_ps(wb[n], load16(W, n * K + k0, wt));
		} else {
			for (int n = 0; n < NR; n++)
				for (int j = 0; j < kn; j++)
					wb[n][j] = wval(W, n * K + k0 + j, wt);
		}
#define PANEL_STEP(j)                                                                             \
	do {                                                                                      \
		__m512 xv[2];                                                                     \
		UNROLL for (int v = 0; v < V; v++)                                                \
			xv[v] = _mm512_loadu_ps(xt + (k0 + (j)) * 16 * V + 16 * v);               \
		UNROLL for (int n = 0; n < NR; n++) {                                             \
			const __m512 b = _mm512_set1_ps(src[n * ld + (j)]);                       \
			UNROLL for (int v = 0; v < V; v++)                                        \
				acc[n][v] = _mm512_fmadd_ps(b, xv[v], acc[n][v]);                 \
		}                                                                                 \
	} while (0)
		if (kn == 16) {
			for (int j = 0; j < 16; j++)
				PANEL_STEP(j);
		} else
			for (int j = 0; j < kn; j++)
				PANEL_STEP(j);
#undef PANEL_STEP
	}
	if (wt == W_F32) {
		store_tile512(y, ldy, &acc[0][0], NR, V, mv, beta);
		return;
	}
	UNROLL for (int n = 0; n < NR; n++)
		UNROLL for (int v = 0; v < V; v++)
			if (16 * v < mv)
				store_lanes(y + 16 * v * ldy + n, ldy, acc[n][v],
					    mv - 16 * v < 16 ? mv - 16 * v : 16, beta);
}

/* The panel of 16·V rows of x against W's rows in tiles of NR, then NR2;
 * returns the first row of W left. */
AVX512 static INLINE int64_t panel_tiles512(float *y, ptrdiff_t ldy, const float *xt,
					    const void *W, int64_t N, int64_t K, float beta, int mv,
					    const int V, const int NR, const int NR2, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	int64_t n = 0;
	for (; n + NR <= N; n += NR)
		panel512(y + n, ldy, xt, (const char *)W + (size_t)(n * K) * esz, K, beta, mv, V, NR, wt);
	for (; n + NR2 <= N; n += NR2)
		panel512(y + n, ldy, xt, (const char *)W + (size_t)(n * K) * esz, K, beta, mv, V, NR2, wt);
	return n;
}

/* Rows of x per panel for M rows and K: 32 while the panel holds them,
 * else 16, else 0 (the transposing kernel). */
static inline int panel_rows(int64_t M, int64_t K)
{
	return M < PANEL_MIN_ROWS ? 0 : 32 * K <= XT_FLOATS ? 32 : 16 * K <= XT_FLOATS ? 16 : 0;
}

/* xp = the panels of P rows of x that panels512 packs (panel_rows(M, K)
 * = P != 0): the one at row m0 at xp + m0·K; the last rows, fewer than
 * PANEL_MIN_ROWS, not (the transposing kernel reads them from x). */
AVX512 static void pack_panels512(float *xp, const float *x, ptrdiff_t ldx, int64_t M, int64_t K)
{
	const int P = panel_rows(M, K);
	for (int64_t m0 = 0; m0 < M && M - m0 >= PANEL_MIN_ROWS; m0 += P) {
		const int mv = M - m0 < P ? (int)(M - m0) : P;
		pack_xt512(xp + m0 * K, x + m0 * ldx, ldx, K, mv, mv > 16 ? 2 : 1);
	}
}

/* M rows of x (panel_rows(M, K) != 0) through panels of P rows: from xp
 * (pack_panels512's) when given, else each packed in turn into xt on this
 * frame (256 KB: in the instances below, so that a call with few rows does
 * not touch that much stack). */
AVX512 static INLINE void panels512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    const float *xp, const void *W, int64_t M, int64_t N, int64_t K,
				    float beta, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	const int P = panel_rows(M, K);
	float xbuf[XT_FLOATS] __attribute__((aligned(64)));
	for (int64_t m0 = 0; m0 < M; m0 += P) {
		const int mv = M - m0 < P ? (int)(M - m0) : P;
		float *ym = y + m0 * ldy;
		if (mv < PANEL_MIN_ROWS) { /* the last few rows */
			rows_few512(ym, ldy, x + m0 * ldx, ldx, W, mv, N, K, beta, wt);
			break;
		}
		/* 32 rows: tiles of 12 rows of W (24 accumulators), then 4; 16: 24, then 8 */
		const float *xt = xp ? xp + m0 * K : xbuf;
		if (!xp)
			pack_xt512(xbuf, x + m0 * ldx, ldx, K, mv, mv > 16 ? 2 : 1);
		const int64_t n = mv > 16 ? panel_tiles512(ym, ldy, xt, W, N, K, beta, mv, 2, 12, 4, wt)
					  : panel_tiles512(ym, ldy, xt, W, N, K, beta, mv, 1, 24, 8, wt);
		if (n < N) /* the last rows of W */
			rows_few512(ym + n, ldy, x + m0 * ldx, ldx,
				    (const char *)W + (size_t)(n * K) * esz, mv, N - n, K, beta, wt);
	}
}

ROWS_FNS(panels512, panels512, AVX512 NOINLINE)

AVX2 static INLINE __m256 load8(const void *W, int64_t i, const int wt)
{
	if (wt == W_F32)
		return _mm256_loadu_ps((const float *)W + i);
	const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)W + i));
	if (wt == W_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	return _mm256_cvtph_ps(h);
}

/* y = the accumulator's lanes (nv of them, stride ld) + beta·y. */
AVX2 static INLINE void store_lanes8(float *y, ptrdiff_t ld, __m256 acc, int nv, float beta)
{
	float t[8];
	_mm256_storeu_ps(t, acc);
	put_lanes(y, ld, t, nv, beta);
}

/* AVX2, few rows of x (R <= FEW256) against 8 rows of W (nv of them): W's
 * block transposed in registers, the outputs in the lanes, one FMA chain
 * per output over k in order, as the AVX-512 kernels (the same bits). */
AVX2 static INLINE void few256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
			       const void *W, int64_t K, float beta, int nv, const int R, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	__m256 acc[FEW256], r[8], c[8];
	int64_t k = 0;
	UNROLL for (int i = 0; i < R; i++)
		acc[i] = _mm256_setzero_ps();
	for (; k + 8 <= K; k += 8) {
		UNROLL for (int i = 0; i < 8; i++) {
			const int64_t o = (i < nv ? i : nv - 1) * K + k;
			_mm_prefetch((const char *)W + (size_t)o * esz + W_PREFETCH, _MM_HINT_T0);
			r[i] = load8(W, o, wt);
		}
		ss_transpose8(c, r);
		UNROLL for (int j = 0; j < 8; j++)
			UNROLL for (int i = 0; i < R; i++)
				acc[i] = _mm256_fmadd_ps(c[j], _mm256_set1_ps(x[i * ldx + k + j]), acc[i]);
	}
	for (; k < K; k++) {
		float t[8];
		for (int i = 0; i < 8; i++)
			t[i] = wval(W, (i < nv ? i : nv - 1) * K + k, wt);
		const __m256 cv = _mm256_loadu_ps(t);
		UNROLL for (int i = 0; i < R; i++)
			acc[i] = _mm256_fmadd_ps(cv, _mm256_set1_ps(x[i * ldx + k]), acc[i]);
	}
	UNROLL for (int i = 0; i < R; i++)
		store_lanes8(y + i * ldy, 1, acc[i], nv, beta);
}

/* Rows [0, M) of x against the N rows of W, FEW256 rows at a time. */
AVX2 static INLINE void rows_few256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				    const float *xp, const void *W, int64_t M, int64_t N, int64_t K,
				    float beta, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	for (int64_t m = 0; m < M; m += FEW256) {
		const int R = M - m < FEW256 ? (int)(M - m) : FEW256;
		for (int64_t n = 0; n < N; n += 8) {
			float *yo = y + m * ldy + n;
			const float *xm = x + m * ldx;
			const void *Wn = (const char *)W + (size_t)(n * K) * esz;
			const int nv = N - n < 8 ? (int)(N - n) : 8;
			switch (R) {
			case 1: few256(yo, ldy, xm, ldx, Wn, K, beta, nv, 1, wt); break;
			case 2: few256(yo, ldy, xm, ldx, Wn, K, beta, nv, 2, wt); break;
			case 3: few256(yo, ldy, xm, ldx, Wn, K, beta, nv, 3, wt); break;
			default: few256(yo, ldy, xm, ldx, Wn, K, beta, nv, 4, wt); break;
			}
		}
	}
}

ROWS_FNS(rows_few256, rows_few256, AVX2 NOINLINE)

/* AVX2, many rows: 8·V rows of x (mv of them, transposed in xt: xt[k][16],
 * V = 2, or its first 8 lanes, V = 1) against NR rows of f32 W (row stride
 * K), one W element broadcast to 8 rows per FMA; the last k (K mod 8)
 * through wb. (16-bit W is widened a group at a time by panels256.) A
 * lane's chain is the same whatever V. */
AVX2 static INLINE void panel256(float *y, ptrdiff_t ldy, const float *xt, const float *W,
				 int64_t K, float beta, int mv, const int V, const int NR)
{
	__m256 acc[12][2];
	float wb[12][8];
	UNROLL for (int n = 0; n < NR; n++)
		UNROLL for (int v = 0; v < V; v++)
			acc[n][v] = _mm256_setzero_ps();
	for (int64_t k0 = 0; k0 < K; k0 += 8) {
		const int kn = K - k0 < 8 ? (int)(K - k0) : 8;
		const float *src = W + k0;
		int64_t ld = K;
		UNROLL for (int n = 0; n < NR; n++)
			_mm_prefetch((const char *)(W + n * K + k0) + W_PREFETCH, _MM_HINT_T0);
		if (kn < 8) {
			for (int n = 0; n < NR; n++)
				for (int j = 0; j < kn; j++)
					wb[n][j] = W[n * K + k0 + j];
			src = wb[0];
			ld = 8;
		}
		for (int j = 0; j < kn; j++) {
			__m256 xv[2];
			UNROLL for (int v = 0; v < V; v++)
				xv[v] = _mm256_loadu_ps(xt + (k0 + j) * 16 + 8 * v);
			UNROLL for (int n = 0; n < NR; n++) {
				const __m256 b = _mm256_set1_ps(src[n * ld + j]);
				UNROLL for (int v = 0; v < V; v++)
					acc[n][v] = _mm256_fmadd_ps(b, xv[v], acc[n][v]);
			}
		}
	}
	UNROLL for (int n = 0; n < NR; n++)
		UNROLL for (int v = 0; v < V; v++)
			if (8 * v < mv)
				store_lanes8(y + 8 * v * ldy + n, ldy, acc[n][v], mv - 8 * v < 8 ? mv - 8 * v : 8,
					     beta);
}

/* A thread's scratch for the panels, kept from call to call: a prefill
 * makes thousands of calls, and a fresh megabyte each time cost its page
 * faults, which the threads take under the process's one memory map lock
 * (2 threads: 122 against 139 GFLOP/s for the old kernel, which needs
 * none). Freed when the thread exits; more than SCRATCH_KEEP floats are
 * allocated for the call alone. */
#define SCRATCH_KEEP ((size_t)1 << 20)
struct scratch {
	size_t cap;
	float *p;
};
static pthread_key_t scratch_key;
static int scratch_ok;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v)
{
	struct scratch *s = v;
	free(s->p);
	free(s);
}

static void scratch_init(void)
{
	scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* n floats, 64-byte aligned, for this call: the thread's kept buffer, or a
 * new one that *own is set to (the caller frees it); NULL if out of memory. */
static float *scratch(size_t n, float **own)
{
	const size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
	struct scratch *s = NULL;
	(void)pthread_once(&scratch_once, scratch_init);
	if (scratch_ok && n <= SCRATCH_KEEP) {
		s = pthread_getspecific(scratch_key);
		if (!s && (s = calloc(1, sizeof(*s))) && pthread_setspecific(scratch_key, s) != 0) {
			free(s);
			s = NULL;
		}
	}
	if (!s)
		return *own = aligned_alloc(64, bytes);
	if (s->cap < n) {
		free(s->p);
		s->p = aligned_alloc(64, bytes);
		s->cap = s->p ? n : 0;
	}
	return s->p;
}

/* AVX2: the W rows a group of tiles holds (GROUP256_BYTES of them, in L2
 * while every panel of x runs against them). */
#define GROUP256_BYTES (144 * 1024)

/* xt[k][16] = rows [0, mv) of x (row stride ldx), k < K, transposed 8 k
 * at a time (rows >= mv repeat row mv - 1; their lanes are never stored). */
AVX2 static void pack_xt256(float *xt, const float *x, ptrdiff_t ldx, int64_t K, int mv)
{
	__m256 r[8], c[8];
	int64_t k = 0;
	for (; k + 8 <= K; k += 8)
		UNROLL for (int h = 0; h < 2; h++) {
			UNROLL for (int i = 0; i < 8; i++) {
				const int l = 8 * h + i;
				r[i] = _mm256_loadu_ps(x + (l < mv ? l : mv - 1) * ldx + k);
			}
			ss_transpose8(c, r);
			UNROLL for (int j = 0; j < 8; j++)
				_mm256_storeu_ps(xt + (k + j) * 16 + 8 * h, c[j]);
		}
	for (; k < K; k++)
		for (int l = 0; l < 16; l++)
			xt[k * 16 + l] = x[(l < mv ? l : mv - 1) * ldx + k];
}

/* xp[p·16·K ...] = panel p of x (pack_xt256's, rows [16·p, 16·p + 16)), p < ceil(M / 16). */
AVX2 static void pack_panels256(float *xp, const float *x, ptrdiff_t ldx, int64_t M, int64_t K)
{
	for (int64_t p = 0; p < (M + 15) / 16; p++)
		pack_xt256(xp + p * 16 * K, x + p * 16 * ldx, ldx, K, M - 16 * p < 16 ? (int)(M - 16 * p) : 16);
}

/* One panel of x (mv rows in xp, through V = 1 or 2 vectors) against the
 * tiles of W's rows [n0, n1) (at Wg: 6 rows a tile, the last 1-5 rows a
 * narrower one). */
AVX2 static INLINE void tiles256(float *yp, ptrdiff_t ldy, const float *xp, const float *Wg, int64_t n0,
				 int64_t n1, int64_t K, float beta, int mv, const int V)
{
	const float *Wt = Wg;
	int64_t n = n0;
	for (; n + 6 <= n1; n += 6, Wt += 6 * K)
		panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 6);
	switch (n1 - n) {
	case 1: panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 1); break;
	case 2: panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 2); break;
	case 3: panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 3); break;
	case 4: panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 4); break;
	case 5: panel256(yp + n, ldy, xp, Wt, K, beta, mv, V, 5); break;
	}
}

/* M rows of x (M >= PANEL_MIN_ROWS) through panels of 16 rows against
 * tiles of 6 rows of W. The panels are transposed once, into xt (heap:
 * 64 B per row and k); W goes by groups of tiles (GROUP256_BYTES as f32;
 * 16-bit W widened into wg once a group), each group against every
 * panel, so that a group is read from memory once a call and each tile,
 * as the panels pass, from L2 (rather than all of W read once per panel).
 * The order of the tiles changes no output's chain. The last rows of W go
 * in a narrower tile, and the last rows of x in a panel of their own,
 * however few (W not streamed again for them, as rows_few256 would: a
 * question's 38 rows are 3 panels), through one vector of 8 lanes when
 * they are 8 or fewer (half the FMAs of a panel of 16, the rest of whose
 * lanes would be wasted); everything through rows_few256 when xt cannot be
 * had (the same bits, slower).
 * Measured (in_proj's 512 x 3352 x 768 in the backend's 256 x 256 calls,
 * Zen 3, FMA peak about 96 GFLOP/s a core): 75 -> 83 GFLOP/s on 1 thread,
 * 150 -> 165 on 2; bf16 W 70 -> 82 (level with f32). */
AVX2 static INLINE void panels256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx,
				  const float *xp, const void *W, int64_t M, int64_t N, int64_t K,
				  float beta, const int wt)
{
	const size_t esz = wt == W_F32 ? 4 : 2;
	const int64_t np = (M + 15) / 16; /* panels, the last one of M % 16 rows or 16 */
	int64_t group = GROUP256_BYTES / (6 * (int64_t)sizeof(float) * (K > 0 ? K : 1)) * 6;
	group = group < 6 ? 6 : group;
	const size_t nxt = xp ? 0 : (size_t)np * K * 16, nwg = wt != W_F32 ? (size_t)group * K : 0;
	float *own = NULL, *buf = K > 0 && nxt + nwg ? scratch(nxt + nwg, &own) : NULL;
	if (K == 0 || (nxt + nwg && !buf)) {
		BY_WT(rows_few256)(y, ldy, x, ldx, NULL, W, M, N, K, beta);
		return;
	}
	float *wg = nwg ? buf + nxt : NULL;
	const float *xt = xp ? xp : buf;
	if (!xp)
		pack_panels256(buf, x, ldx, M, K);
	for (int64_t n0 = 0; n0 < N; n0 += group) {
		const int64_t n1 = n0 + group < N ? n0 + group : N;
		const void *Wg = (const char *)W + (size_t)(n0 * K) * esz;
		if (wg) { /* 16-bit W widened (exactly) once a group, not once a panel */
			const int64_t nw = (n1 - n0) * K;
			int64_t i = 0;
			for (; i + 8 <= nw; i += 8)
				_mm256_store_ps(wg + i, load8(Wg, i, wt));
			for (; i < nw; i++)
				wg[i] = wval(Wg, i, wt);
			Wg = wg;
		}
		for (int64_t p = 0; p < np; p++) {
			const int mv = M - 16 * p < 16 ? (int)(M - 16 * p) : 16;
			float *yp = y + 16 * p * ldy;
			const float *xpan = xt + p * 16 * K;
			if (mv > 8)
				tiles256(yp, ldy, xpan, (const float *)Wg, n0, n1, K, beta, mv, 2);
			else /* a last panel of 8 rows or fewer: half the FMAs */
				tiles256(yp, ldy, xpan, (const float *)Wg, n0, n1, K, beta, mv, 1);
		}
	}
	free(own);
}

ROWS_FNS(panels256, panels256, AVX2 NOINLINE)
#endif

int ss_gemm_choice(void)
{
	/* every thread computes the same value: the race is benign */
	static int choice = -1;
	int c = __atomic_load_n(&choice, __ATOMIC_RELAXED);
	if (c < 0) {
		const char *s = getenv("SS_GEMM");
		c = !s ? SS_GEMM_OWN : !strcmp(s, "avx2") ? SS_GEMM_AVX2 : !strcmp(s, "c") ? SS_GEMM_C
			: !strcmp(s, "blas") ? SS_GEMM_BLAS : SS_GEMM_OWN;
		__atomic_store_n(&choice, c, __ATOMIC_RELAXED);
	}
	return c;
}

int ss_gemm_isa(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const int choice = ss_gemm_choice();
	if (choice == SS_GEMM_C || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0;
	return choice != SS_GEMM_AVX2 && __builtin_cpu_supports("avx512f") ? 2 : 1;
#else
	return 0;
#endif
}

/* The kernel ss_linear_rows_cpu runs for M rows of K, as ss_gemm_isa
 * allows (the same for every call with these M and K). */
#ifdef HAVE_X86_KERNELS
enum { PATH_C, PATH_FEW512, PATH_PANELS512, PATH_FEW256, PATH_PANELS256 };
static int rows_path(int64_t M, int64_t K)
{
	const int isa = ss_gemm_isa();
	if (isa == 2)
		return panel_rows(M, K) ? PATH_PANELS512 : PATH_FEW512;
	if (isa == 1 && ss_cpu_f16c())
		return M >= PANEL_MIN_ROWS ? PATH_PANELS256 : PATH_FEW256;
	return PATH_C;
}
#endif

int64_t ss_linear_rows_xpack_floats(int64_t M, int64_t K)
{
	if (M <= 0 || K <= 0)
		return 0;
#ifdef HAVE_X86_KERNELS
	switch (rows_path(M, K)) {
	case PATH_PANELS512: {
		const int64_t P = panel_rows(M, K);
		return (M + P - 1) / P * P * K;
	}
	case PATH_PANELS256: return (M + 15) / 16 * 16 * K;
	}
#endif
	return 0;
}

void ss_linear_rows_xpack(float *xp, const float *x, ptrdiff_t ldx, int64_t M, int64_t K)
{
	if (M <= 0 || K <= 0)
		return;
#ifdef HAVE_X86_KERNELS
	switch (rows_path(M, K)) {
	case PATH_PANELS512: pack_panels512(xp, x, ldx, M, K); break;
	case PATH_PANELS256: pack_panels256(xp, x, ldx, M, K); break;
	}
#endif
}

int ss_linear_rows_cpu_xp(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const float *xp,
			  const void *W, ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K,
			  float beta)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	if (weights_dtype != SS_DTYPE_F32 && weights_dtype != SS_DTYPE_BF16 &&
	    weights_dtype != SS_DTYPE_F16)
		return SS_ERR_UNSUPPORTED;
	const int w = weights_dtype == SS_DTYPE_F32 ? W_F32
		      : weights_dtype == SS_DTYPE_BF16 ? W_BF16 : W_F16;
#ifdef HAVE_X86_KERNELS
	typedef void rows_fn(float *, ptrdiff_t, const float *, ptrdiff_t, const float *,
			     const void *, int64_t, int64_t, int64_t, float);
	static rows_fn *const kernels[5][3] = {
		[PATH_FEW512] = { rows_few512_f32, rows_few512_bf16, rows_few512_f16 },
		[PATH_PANELS512] = { panels512_f32, panels512_bf16, panels512_f16 },
		[PATH_FEW256] = { rows_few256_f32, rows_few256_bf16, rows_few256_f16 },
		[PATH_PANELS256] = { panels256_f32, panels256_bf16, panels256_f16 },
	};
	const int path = rows_path(M, K);
	if (path != PATH_C) {
		kernels[path][w](y, ldy, x, ldx, xp, W, M, N, K, beta);
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

int ss_linear_rows_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		       ss_dtype weights_dtype, int64_t M, int64_t N, int64_t K, float beta)
{
	return ss_linear_rows_cpu_xp(y, ldy, x, ldx, NULL, W, weights_dtype, M, N, K, beta);
}
