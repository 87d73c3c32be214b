/*
 * q8_0.c — the linear op with q8_0 weights on the CPU, ss_matvec_q8_0
 * (ops/linear.h), as ggml's ggml_vec_dot_q8_0_q8_0 does it: each row of x
 * is quantized to q8_0 too (as ss_from_f32 does), and a block of W against
 * a block of x is an exact int32 dot product (8 lanes of 4 products each)
 * scaled by d_w·d_x and added into f32.
 *
 * Every path computes the same bits: lane j of block b holds the exact
 * integer sum of products 4j..4j+3, block b goes into chain b % 4 as one
 * fused multiply-add (float(sum)·(d_w·d_x) + acc, d_w·d_x rounded to f32),
 * the four chains are added (0+1)+(2+3), then the 8 lanes j+(j+4),
 * (0+1)+(2+3); x's codes and d are ss_from_f32's. AVX-512 VNNI where the
 * CPU has it: blocks b|b+1 in one 512-bit register (chains 0|1), b+2|b+3
 * in another (chains 2|3), vpdpbusd of W's codes offset to unsigned
 * (w+128) against x's, started from -128·(x's four codes), so that the
 * lane sums stay exact; AVX2 (|w| times x·sign(w): vpmaddubsw, vpmaddwd)
 * else, portable C with fmaf() elsewhere: a result does not depend on M,
 * N, the slice of W, the thread count or the instruction set
 * (tests/test_q8_0.c compares the paths bit for bit).
 * x's rows are prepared once per call (codes contiguous, d_x in f32, the
 * offset's sums); W is read as it is stored (GGUF's blocks), each block
 * once per call whatever M.
 * Prefill's product, ss_linear_q8_0_cpu (below), sums each block whole
 * instead, so that 16 rows of x fill a vector's lanes: other bits, the same
 * products.
 * Why x is quantized rather than W widened to f32 (measured here, lm_head's
 * shape 50288 x 768, one thread, AVX-512 VNNI CPU, machine shared): with
 * one row of x both took 1.7 ms, bound by W's 41 MB (this kernel 1.1 ms,
 * about one core's read bandwidth), with four the int8 path took 5.1 ms
 * against 8.0 ms, bound by instructions (this kernel 2.2 ms), and
 * quantizing x costs K roundings per row against N·K products. The price
 * is x's rounding in the error (see ss_matvec_q8_0).
 * ref: ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_q8_0_q8_0,
 *      quantize_row_q8_0 (x's blocks; ours round as its _ref, lib/stream/dtype.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "base/internal.h" /* ss_cpu_f16c */

#include "forward/ops/linear.h"
#include "forward/ops/linear_f32.h" /* ss_gemm_choice */

enum { QB = 32, QBYTES = 34, CHAINS = 4 };

/* x's rows prepared at once, SS_Q8_0_ROW_MAX elements in all (nb blocks a
 * row): block i = m·nb + b of row m has codes q[32i..32i+31], d_x d[i] and
 * c[8i + j] = -128·(codes 4j..4j+3), VNNI's start. */
typedef struct {
	_Alignas(64) int8_t q[SS_Q8_0_ROW_MAX];
	_Alignas(64) int32_t c[SS_Q8_0_ROW_MAX / 4];
	float d[SS_Q8_0_ROW_MAX / QB];
} xrows;

/* W's f16 d of block b, as bits (zero-extended) and as f32. */
static inline uint64_t wh(const unsigned char *w, int64_t b)
{
	uint16_t h;
	memcpy(&h, w + b * QBYTES, 2);
	return h;
}

static inline float wd(const unsigned char *w, int64_t b)
{
	return ss_f16_to_f32((uint16_t)wh(w, b));
}

/* The lanes' fixed reduction (see the top). */
static inline float reduce8(const float a[8])
{
	const float q0 = a[0] + a[4], q1 = a[1] + a[5], q2 = a[2] + a[6], q3 = a[3] + a[7];
	return (q0 + q1) + (q2 + q3);
}

/* The dot of a row of W (nb blocks) with a prepared row of x (codes xq, d
 * xd), in the fixed order (see the top). */
static float dot_c(const unsigned char *w, const int8_t *xq, const float *xd, int64_t nb)
{
	float acc[CHAINS][8] = { { 0 } }, a[8];
	for (int64_t b = 0; b < nb; b++) {
		int8_t q[QB];
		memcpy(q, w + b * QBYTES + 2, QB);
		const int8_t *x = xq + b * QB;
		const float s = wd(w, b) * xd[b];
		for (int j = 0; j < 8; j++) {
			const int32_t t = q[4 * j] * x[4 * j] + q[4 * j + 1] * x[4 * j + 1] +
					  q[4 * j + 2] * x[4 * j + 2] + q[4 * j + 3] * x[4 * j + 3];
			acc[b % CHAINS][j] = fmaf((float)t, s, acc[b % CHAINS][j]);
		}
	}
	for (int j = 0; j < 8; j++)
		a[j] = (acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j]);
	return reduce8(a);
}

/* Block i of the prepared rows from 32 elements of x by ss_from_f32 (the
 * reference for prep_avx2). */
static void prep_c(xrows *xr, int64_t i, const float *x)
{
	unsigned char blk[QBYTES];
	uint16_t h;
	ss_from_f32(blk, SS_DTYPE_Q8_0, x, QB);
	memcpy(&h, blk, 2);
	memcpy(xr->q + i * QB, blk + 2, QB);
	xr->d[i] = ss_f16_to_f32(h);
	for (int j = 0; j < 8; j++)
		xr->c[i * 8 + j] = -128 * (xr->q[i * QB + 4 * j] + xr->q[i * QB + 4 * j + 1] +
					   xr->q[i * QB + 4 * j + 2] + xr->q[i * QB + 4 * j + 3]);
}

enum { KERNEL_C, KERNEL_AVX2, KERNEL_VNNI };

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#define UNROLL _Pragma("GCC unroll 4")
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vnni")))
#define INLINE inline __attribute__((always_inline))
#define LD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

/* 8 lanes to one f32 in the fixed order. */
AVX2 static inline float reduce_avx2(__m256 a)
{
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	q = _mm_hadd_ps(q, q);
	return _mm_cvtss_f32(_mm_hadd_ps(q, q));
}

/* prep_c of blocks i0..i0+nb-1 from a row of x, 8 lanes at a time, the
 * same bits: amax the largest |x| (as integers: a NaN or inf sorts above
 * every finite value), d = amax/127 and 1/d in scalar f32, roundf(v) as
 * trunc(v + copysign(0.5 - 2^-25, v)) (exact for |v| < 2^23, tested
 * exhaustively). |v| < 127.5 wherever d is a normal f32; where it is not,
 * f16(d) is 0, codes may differ (saturated) and count for nothing. A
 * non-finite x gives d NaN and codes 0. */
AVX2 static void prep_avx2(xrows *xr, int64_t i0, const float *x, int64_t nb)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0x1.fffffep-2f);
	const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (int64_t i = i0; i < i0 + nb; i++, x += QB) {
		__m256 v[4];
		__m256i q[4], am = _mm256_setzero_si256();
		UNROLL for (int j = 0; j < 4; j++) {
			v[j] = _mm256_loadu_ps(x + 8 * j);
			am = _mm256_max_epi32(am, _mm256_castps_si256(_mm256_andnot_ps(sign, v[j])));
		}
		__m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(am), _mm256_extracti128_si256(am, 1));
		m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
		m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xb1));
		const int finite = _mm_cvtsi128_si32(m4) < 0x7f800000;
		const float d = _mm_cvtss_f32(_mm_castsi128_ps(m4)) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		UNROLL for (int j = 0; j < 4; j++) {
			const __m256 p = _mm256_mul_ps(v[j], _mm256_set1_ps(id));
			const __m256 h = _mm256_or_ps(half, _mm256_and_ps(p, sign));
			q[j] = _mm256_cvttps_epi32(_mm256_add_ps(p, h));
		}
		const __m256i q16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
		__m256i c = _mm256_permutevar8x32_epi32(q16, perm);
		if (!finite)
			c = _mm256_setzero_si256();
		_mm256_storeu_si256((__m256i *)(void *)(xr->q + i * QB), c);
		c = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), c), _mm256_set1_epi16(-128));
		_mm256_storeu_si256((__m256i *)(void *)(xr->c + i * 8), c);
		xr->d[i] = finite ? _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)) : NAN;
	}
}

/* dot_c with 8 lanes, block b into chain acc: |w| (unsigned) times
 * x·sign(w) (signed), pairs into int16 (at most 2·128·127: no
 * saturation), pairs of those into int32. */
#define BLOCK_AVX2(acc, b)                                                                       \
	do {                                                                                     \
		const __m256i wv = LD256(w + (b) * QBYTES + 2), xv = LD256(xq + (b) * QB);               \
		const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)); \
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))),       \
				      _mm256_set1_ps(wd(w, b) * xd[b]), acc);                                \
	} while (0)

AVX2 static float dot_avx2(const unsigned char *w, const int8_t *xq, const float *xd, int64_t nb)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t b = 0;
	for (; b + CHAINS <= nb; b += CHAINS) {
		BLOCK_AVX2(a0, b);
		BLOCK_AVX2(a1, b + 1);
		BLOCK_AVX2(a2, b + 2);
		BLOCK_AVX2(a3, b + 3);
	}
	if (b < nb)
		BLOCK_AVX2(a0, b);
	if (b + 1 < nb)
		BLOCK_AVX2(a1, b + 1);
	if (b + 2 < nb)
		BLOCK_AVX2(a2, b + 2);
	return reduce_avx2(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

#define HI(a) _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))

/* Blocks b..b+n-1 (n <= 4) of a tile of R <= 4 rows of W (w + r·row)
 * against C <= 4 prepared rows of x (from xq, xc, xd; nb blocks a row)
 * into its chains: a[r][c][0] 0|1, a[r][c][1] 2|3. W's codes (w+128: xor
 * 0x80) of blocks b|b+1 and b+2|b+3 in two 512-bit registers, their d as
 * f32, shared by the C rows of x; then per row of x vpdpbusd from -128·Σx
 * (the exact lane sums), d_w·d_x spread over each half, one FMA per chain
 * pair. A step of n < 4: a pair, a single block in a low half (masked). */
VNNI static INLINE void step(__m512 a[4][4][2], const unsigned char *w, size_t row, const int8_t *xq,
			     const int32_t *xc, const float *xd, int64_t nb, int64_t b, int64_t n, const int R,
			     const int C)
{
	const __m512i i01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m512i i23 = _mm512_add_epi32(i01, _mm512_set1_epi32(2)), f = _mm512_set1_epi8(-128);
	UNROLL for (int r = 0; r < R; r++) {
		const unsigned char *p = w + r * row + b * QBYTES;
		__m512i wv[2];
		uint64_t h = wh(p, 0);
		UNROLL for (int i = 1; i < 4; i++)
			h |= i < n ? wh(p, i) << 16 * i : 0;
		const __m128 dw = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
		UNROLL for (int j = 0; j < 2; j++) { /* blocks b+2j and b+2j+1 (if any) */
			if (2 * j >= n)
				break;
			const unsigned char *pj = p + 2 * j * QBYTES + 2;
			const __m512i lo = _mm512_castsi256_si512(LD256(pj));
			wv[j] = _mm512_xor_si512(2 * j + 1 < n ? _mm512_inserti64x4(lo, LD256(pj + QBYTES), 1) : lo, f);
		}
		UNROLL for (int c = 0; c < C; c++) {
			const int64_t o = c * nb + b;
			float d4[4] = { 0 };
			memcpy(d4, xd + o, (size_t)n * sizeof(float));
			const __m512 s = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(d4)));
			UNROLL for (int j = 0; j < 2; j++) {
				if (2 * j >= n)
					break;
				const int64_t e = o + 2 * j;
				const __m512 t = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
					_mm512_loadu_si512(xc + e * 8), wv[j], _mm512_loadu_si512(xq + e * QB)));
				const __m512 sj = _mm512_permutexvar_ps(j ? i23 : i01, s);
				a[r][c][j] = 2 * j + 1 < n ? _mm512_fmadd_ps(t, sj, a[r][c][j])
							   : _mm512_mask3_fmadd_ps(t, sj, a[r][c][j], 0xff);
			}
		}
	}
}

/* The dots v[r·C + c] of rows w + r·row of W (r < R) with prepared rows
 * m0 + c of x (c < C), nb blocks each. */
VNNI static INLINE void tile_vnni(float *v, const unsigned char *w, size_t row, const xrows *x, int64_t m0,
				  int64_t nb, const int R, const int C)
{
	const int8_t *xq = x->q + m0 * nb * QB;
	const int32_t *xc = x->c + m0 * nb * 8;
	const float *xd = x->d + m0 * nb;
	__m512 a[4][4][2];
	int64_t b = 0;
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++)
			a[r][c][0] = a[r][c][1] = _mm512_setzero_ps();
	for (; b + 4 <= nb; b += 4)
		step(a, w, row, xq, xc, xd, nb, b, 4, R, C);
	if (b < nb)
		step(a, w, row, xq, xc, xd, nb, b, nb - b, R, C);
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++)
			v[r * C + c] = reduce_avx2(_mm256_add_ps(
				_mm256_add_ps(_mm512_castps512_ps256(a[r][c][0]), HI(a[r][c][0])),
				_mm256_add_ps(_mm512_castps512_ps256(a[r][c][1]), HI(a[r][c][1]))));
}

#define TILE(R, C)                                                                                     \
	VNNI static void tile##R##C(float *v, const unsigned char *w, size_t row, const xrows *x, int64_t m0, \
				    int64_t nb)                                                        \
	{                                                                                              \
		tile_vnni(v, w, row, x, m0, nb, R, C);                                                 \
	}
TILE(4, 1)
TILE(1, 1)
TILE(1, 2)
TILE(1, 3)
TILE(1, 4)

static int cached = -1; /* threads may race to fill it: atomic, same value */

static int best(void)
{
	return !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ss_cpu_f16c()) ? KERNEL_C
	       : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni")
			 ? KERNEL_VNNI
			 : KERNEL_AVX2;
}

static int kernel(void)
{
	int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (v < 0) {
		v = best();
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}
#endif

int ss_q8_0_force_kernel(int k)
{
#ifdef HAVE_X86_KERNELS
	if (k > best())
		return -1;
	__atomic_store_n(&cached, k < 0 ? best() : k, __ATOMIC_RELAXED);
	return 0;
#else
	return k > 0 ? -1 : 0;
#endif
}

/* y = v + beta·y, y not read for beta 0. */
static inline void put(float *y, float v, float beta)
{
	*y = beta != 0.0f ? v + beta * *y : v;
}

/* y[m][n] for the mr prepared rows of x against rows [0, N) of W, row by
 * row of W, each row reused from L1 for the mr rows of x. AVX-512: one row
 * of x takes rows n, n + q, n + 2q, n + 3q (q = N/4) at once, four
 * sequential streams (measured here: rows next to each other at once, one
 * stream broken at every tile, read W at a half to a third of the speed),
 * the last N % 4 rows one by one; more rows of x take a row of W for up to
 * four of them. */
static void rows(float *y, ptrdiff_t ldy, const xrows *x, int64_t mr, const unsigned char *W, int64_t N,
		 int64_t K, float beta)
{
	const int64_t nb = K / QB;
	const size_t row = (size_t)nb * QBYTES;
#ifdef HAVE_X86_KERNELS
	const int k = kernel();
	if (k == KERNEL_VNNI) {
		static void (*const tile[])(float *, const unsigned char *, size_t, const xrows *, int64_t,
					    int64_t) = { tile11, tile12, tile13, tile14 };
		const int64_t q = mr == 1 ? N / 4 : 0;
		float v[4];
		for (int64_t n = 0; n < q; n++) {
			tile41(v, W + n * row, (size_t)q * row, x, 0, nb);
			for (int r = 0; r < 4; r++)
				put(y + n + r * q, v[r], beta);
		}
		for (int64_t n = 4 * q; n < N; n++)
			for (int64_t m = 0, c; m < mr; m += c) {
				c = mr - m < 4 ? mr - m : 4;
				tile[c - 1](v, W + n * row, row, x, m, nb);
				for (int64_t i = 0; i < c; i++)
					put(y + (m + i) * ldy + n, v[i], beta);
			}
		return;
	}
#endif
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < mr; m++) {
			const unsigned char *w = W + n * row;
#ifdef HAVE_X86_KERNELS
			if (k == KERNEL_AVX2) {
				put(y + m * ldy + n, dot_avx2(w, x->q + m * K, x->d + m * nb, nb), beta);
				continue;
			}
#endif
			put(y + m * ldy + n, dot_c(w, x->q + m * K, x->d + m * nb, nb), beta);
		}
}

void ss_matvec_q8_0(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		    int64_t M, int64_t N, int64_t K, float beta)
{
	xrows xr;
	const int64_t nb = K / QB, group = SS_Q8_0_ROW_MAX / K; /* rows of x prepared at once (>= 1) */
	for (int64_t m0 = 0; m0 < M; m0 += group) {
		const int64_t mr = M - m0 < group ? M - m0 : group;
		for (int64_t m = 0; m < mr; m++) {
			const float *xm = x + (m0 + m) * ldx;
#ifdef HAVE_X86_KERNELS
			if (kernel() != KERNEL_C) {
				prep_avx2(&xr, m * nb, xm, nb);
				continue;
			}
#endif
			for (int64_t b = 0; b < nb; b++)
				prep_c(&xr, m * nb + b, xm + b * QB);
		}
		rows(y + m0 * ldy, ldy, &xr, mr, W, N, K, beta);
	}
}

/* ------------------------------------------------------------ prefill */

/* ss_linear_q8_0_cpu (ss_ops.h): each block's dot product summed whole,
 * as an exact integer T_b, then one f32 chain per output over the blocks in order,
 * acc = fmaf((float)T_b, d_w·d_x, acc) from 0 (|T_b| <= 32·128·127 < 2^24:
 * the conversion is exact). So the outputs can sit in the lanes: 16 rows of
 * x a vector, each block's 8 groups of 4 codes transposed (xt below), each
 * group of 4 codes of W broadcast against them (AVX-512 VNNI: one vpdpbusd
 * for 16 rows' 4 products), then one conversion, one product of the scales
 * and one FMA per block for 16 outputs, against one of each per 8 products
 * in ss_matvec_q8_0's lanes (issue 50: q8_0 prefill at 0.97x f32's while
 * W was widened to f32 for it). vpdpbusd multiplies unsigned by signed
 * bytes: x's codes are stored offset to unsigned (x + 128), and each block
 * starts from -128·Σw (wc below), so T_b is exact. Every kernel gives the
 * same bits (portable C; AVX2, T_b in int32 by vpmaddwd; VNNI). */

/* Lanes (rows of x) of a panel; rows of W of a tile. */
enum { LANES = 16, NR = 8 };
/* Bytes of x's panels at once (as ss_linear_rows_cpu's, on the stack): at
 * least one panel for K <= SS_Q8_0_ROW_MAX. */
#define XT_BYTES (LANES * SS_Q8_0_ROW_MAX)

/* A tile of nr rows of W against one panel of x:
 *   xt: [nb][8][LANES] u32, x's codes + 128, 4 a lane (group g of block b);
 *   xd: [nb][LANES] x's d (0 in lanes past mv);
 *   W: nr rows of nb blocks (stored), wc, wdv: [nr][nb] -128·Σw, W's d.
 * y[l][r] (l < mv, stride ldy) = the chain + beta·y. */
static void tile_c(float *y, ptrdiff_t ldy, const uint32_t *xt, const float *xd, const unsigned char *W,
		   size_t row, const int32_t *wc, const float *wdv, int64_t nb, int nr, int mv, float beta)
{
	for (int r = 0; r < nr; r++) {
		float acc[LANES] = { 0 };
		const unsigned char *w = W + r * row;
		for (int64_t b = 0; b < nb; b++) {
			int32_t t[LANES];
			const uint32_t *xb = xt + b * 8 * LANES;
			for (int l = 0; l < LANES; l++)
				t[l] = wc[r * nb + b];
			for (int g = 0; g < 8; g++)
				for (int i = 0; i < 4; i++) {
					const int32_t wq = (int8_t)w[b * QBYTES + 2 + 4 * g + i];
					for (int l = 0; l < LANES; l++)
						t[l] += (int32_t)(xb[g * LANES + l] >> 8 * i & 0xff) * wq;
				}
			const float dw = wdv[r * nb + b];
			for (int l = 0; l < LANES; l++)
				acc[l] = fmaf((float)t[l], xd[b * LANES + l] * dw, acc[l]);
		}
		for (int l = 0; l < mv; l++)
			put(y + l * ldy + r, acc[l], beta);
	}
}

/* wc, wdv of nr rows of W (see tile_c). */
static inline __attribute__((always_inline)) void wprep(int32_t *wc, float *wdv, const unsigned char *W,
							size_t row, int64_t nb, int nr)
{
	for (int r = 0; r < nr; r++)
		for (int64_t b = 0; b < nb; b++) {
			const unsigned char *p = W + r * row + b * QBYTES;
			int32_t s = 0;
			for (int i = 0; i < QB; i++)
				s += (int8_t)p[2 + i];
			wc[r * nb + b] = -128 * s;
			wdv[r * nb + b] = wd(p, 0);
		}
}

typedef void tile_fn(float *, ptrdiff_t, const uint32_t *, const float *, const unsigned char *, size_t,
		     const int32_t *, const float *, int64_t, int, int, float);
typedef void wprep_fn(int32_t *, float *, const unsigned char *, size_t, int64_t, int);

static void wprep_port(int32_t *wc, float *wdv, const unsigned char *W, size_t row, int64_t nb, int nr)
{
	wprep(wc, wdv, W, row, nb, nr);
}

#ifdef HAVE_X86_KERNELS
AVX2 static void wprep_avx2(int32_t *wc, float *wdv, const unsigned char *W, size_t row, int64_t nb, int nr)
{
	wprep(wc, wdv, W, row, nb, nr);
}

/* AVX2 (no VNNI): T_b summed exactly in int32 by vpmaddwd, x's and W's
 * codes widened to int16 pairs once (a chunk of x's rows, a tile of W's
 * rows): a pair of W's codes broadcast against 8 lanes' pairs of x's gives
 * 16 products summed into 8 int32 lanes, then one vpaddd; tiles of R <= NR2
 * rows of W against panels of 16 rows of x (two vectors of 8 lanes), as
 * linear_f32.c's panel256; the chains acc in memory, one FMA a block. The
 * same bits as tile_c. Two instructions per 16 products, as f32's two
 * FMAs, so at best f32's speed: measured on an AMD EPYC Zen 3 (issue 50,
 * build/bench/gemm, one thread, in_proj and out_proj), 79-84 GFLOP/s
 * against f32's 79-84 and 54-59 before (T_b in f32 FMAs on codes widened
 * to f32: a broadcast of W per 16 products, not 32, and x's codes twice
 * the bytes). Tried, before W's codes were widened 16 at a time: R = 5
 * with pairs unrolled (spills, 50-57), R = 3 and 2 against two panels at
 * once (62; 74-77), R = 4 against one (76-80).
 * Returns -1 (nothing written) without memory for the widened codes.
 * ref: Intel SDM (PMADDWD). */
enum { NR2 = 4, CH2 = 128, PAIRS = QB / 2 }; /* rows of W a tile; rows of x a chunk */

/* Two int8 codes as an int16 pair in a 32-bit word, the first low. */
static inline uint32_t pair16(int8_t a, int8_t b)
{
	return (uint32_t)(uint16_t)(int16_t)a | (uint32_t)(uint16_t)(int16_t)b << 16;
}

/* A panel against R rows of W:
 *   xp: [nb][PAIRS][LANES] x's code pairs, xd: [nb][LANES] x's d (0 in lanes past mv);
 *   wp: [R][nb][PAIRS] W's code pairs, wdv: [R][nb] W's d. */
AVX2 static INLINE void tile_i16(float *y, ptrdiff_t ldy, const uint32_t *xp, const float *xd, const uint32_t *wp,
				 const float *wdv, int64_t nb, int mv, float beta, const int R)
{
	float acc[NR2][LANES] __attribute__((aligned(32))) = { { 0 } };
	for (int64_t b = 0; b < nb; b++) {
		__m256i t[NR2][2];
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
			t[r][0] = t[r][1] = _mm256_setzero_si256();
		const uint32_t *xb = xp + b * PAIRS * LANES;
		for (int q = 0; q < PAIRS; q++) {
			const __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)(xb + q * LANES));
			const __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)(xb + q * LANES + 8));
			_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
				const __m256i w = _mm256_set1_epi32((int)wp[(r * nb + b) * PAIRS + q]);
				t[r][0] = _mm256_add_epi32(t[r][0], _mm256_madd_epi16(w, x0));
				t[r][1] = _mm256_add_epi32(t[r][1], _mm256_madd_epi16(w, x1));
			}
		}
		const __m256 d0 = _mm256_load_ps(xd + b * LANES), d1 = _mm256_load_ps(xd + b * LANES + 8);
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
			const __m256 dw = _mm256_broadcast_ss(wdv + r * nb + b);
			_mm256_store_ps(acc[r], _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[r][0]), _mm256_mul_ps(d0, dw),
								_mm256_load_ps(acc[r])));
			_mm256_store_ps(acc[r] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[r][1]), _mm256_mul_ps(d1, dw),
								    _mm256_load_ps(acc[r] + 8)));
		}
	}
	for (int r = 0; r < R; r++)
		for (int l = 0; l < mv; l++)
			put(y + l * ldy + r, acc[r][l], beta);
}

AVX2 static int gemm_avx2(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const unsigned char *W,
			  int64_t M, int64_t N, int64_t K, float beta)
{
	const int64_t nb = K / QB, ch = M < CH2 ? (M + LANES - 1) / LANES * LANES : CH2;
	const size_t row = (size_t)nb * QBYTES;
	uint32_t *xp = aligned_alloc(32, ((size_t)(ch * K / 2 + NR2 * K / 2) * sizeof(uint32_t) + 31) / 32 * 32);
	float *xd = aligned_alloc(32, ((size_t)(ch * nb) * sizeof(float) + 31) / 32 * 32);
	float wdv[NR2 * SS_Q8_0_ROW_MAX / QB];
	xrows xr;
	if (!xp || !xd) {
		free(xp);
		free(xd);
		return -1;
	}
	uint32_t *wp = xp + ch * K / 2;
	for (int64_t m0 = 0; m0 < M; m0 += ch) {
		const int64_t mc = M - m0 < ch ? M - m0 : ch, np = (mc + LANES - 1) / LANES;
		for (int64_t m = 0; m < np * LANES; m++) {
			uint32_t *xm = xp + m / LANES * (K / 2) * LANES + m % LANES;
			float *dp = xd + m / LANES * nb * LANES + m % LANES;
			if (m < mc)
				prep_avx2(&xr, 0, x + (m0 + m) * ldx, nb);
			for (int64_t k = 0; k < K / 2; k++)
				xm[k * LANES] = m < mc ? pair16(xr.q[2 * k], xr.q[2 * k + 1]) : 0;
			for (int64_t b = 0; b < nb; b++)
				dp[b * LANES] = m < mc ? xr.d[b] : 0.0f;
		}
		for (int64_t n0 = 0; n0 < N; n0 += NR2) {
			const int nr = N - n0 < NR2 ? (int)(N - n0) : NR2;
			for (int r = 0; r < nr; r++)
				for (int64_t b = 0; b < nb; b++) {
					const unsigned char *p = W + (n0 + r) * row + b * QBYTES;
					wdv[r * nb + b] = wd(p, 0);
					/* the 32 codes as int16, little-endian: pairs as pair16 makes them */
					__m256i *o = (__m256i *)(void *)(wp + (r * nb + b) * PAIRS);
					_mm256_store_si256(o, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 2))));
					_mm256_store_si256(o + 1, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 18))));
				}
			for (int64_t p = 0; p < np; p++) {
				const int mv = mc - p * LANES < LANES ? (int)(mc - p * LANES) : LANES;
				float *yp = y + (m0 + p * LANES) * ldy + n0;
				const uint32_t *xq = xp + p * (K / 2) * LANES;
				const float *dq = xd + p * nb * LANES;
				switch (nr) {
#define TI(R) case R: tile_i16(yp, ldy, xq, dq, wp, wdv, nb, mv, beta, R); break;
				TI(1) TI(2) TI(3) TI(4)
#undef TI
				}
			}
		}
	}
	free(xp);
	free(xd);
	return 0;
}

/* tile_c with AVX-512 VNNI, R rows of W (R <= NR): per block, x's 8
 * vectors of groups loaded once, for each row of W 8 vpdpbusd against its
 * groups broadcast from W as stored, from -128·Σw; then T_b converted, d_x
 * times d_w, one FMA into the row's chain. */
VNNI static INLINE void qtile_vnni_rows(float *y, ptrdiff_t ldy, const uint32_t *xt, const float *xd,
				       const unsigned char *W, size_t row, const int32_t *wc,
				       const float *wdv, int64_t nb, int mv, float beta, const int R)
{
	__m512 acc[NR];
	_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
		acc[r] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		__m512i xv[8];
		_Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)
			xv[g] = _mm512_load_si512(xt + (b * 8 + g) * LANES);
		const __m512 dx = _mm512_load_ps(xd + b * LANES);
		/* the rows' chains interleaved, group by group (vpdpbusd's latency) */
		__m512i t[NR];
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
			t[r] = _mm512_set1_epi32(wc[r * nb + b]);
		_Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)
			_Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
				int32_t q;
				memcpy(&q, W + r * row + b * QBYTES + 2 + 4 * g, 4);
				t[r] = _mm512_dpbusd_epi32(t[r], xv[g], _mm512_set1_epi32(q));
			}
		_Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r]),
						 _mm512_mul_ps(dx, _mm512_set1_ps(wdv[r * nb + b])), acc[r]);
	}
	_Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
		float v[LANES];
		_mm512_storeu_ps(v, acc[r]);
		for (int l = 0; l < mv; l++)
			put(y + l * ldy + r, v[l], beta);
	}
}

VNNI static void qtile_vnni(float *y, ptrdiff_t ldy, const uint32_t *xt, const float *xd,
			   const unsigned char *W, size_t row, const int32_t *wc, const float *wdv,
			   int64_t nb, int nr, int mv, float beta)
{
	if (nr == NR)
		qtile_vnni_rows(y, ldy, xt, xd, W, row, wc, wdv, nb, mv, beta, NR);
	else
		for (int r = 0; r < nr; r++)
			qtile_vnni_rows(y + r, ldy, xt, xd, W + r * row, row, wc + r * nb, wdv + r * nb, nb, mv,
				       beta, 1);
}
#endif

int ss_linear_q8_0_cpu(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W, int64_t M,
		       int64_t N, int64_t K, float beta)
{
	if (M < 0 || N < 0 || K < 0 || ldy < N || ldx < K)
		return SS_ERR_INVALID;
	if (K % QB || K > SS_Q8_0_ROW_MAX)
		return SS_ERR_UNSUPPORTED;
	if (M == 0 || N == 0 || K == 0)
		return 0;
	_Alignas(64) uint32_t xt[XT_BYTES / 4];
	_Alignas(64) float xd[XT_BYTES / QB];
	int32_t wc[NR * SS_Q8_0_ROW_MAX / QB];
	float wdv[NR * SS_Q8_0_ROW_MAX / QB];
	xrows xr;
	const int64_t nb = K / QB, chunk = XT_BYTES / K / LANES * LANES; /* rows of x at once */
	const size_t row = (size_t)nb * QBYTES;
	const unsigned char *w = W;
	tile_fn *tile = tile_c;
	wprep_fn *prep = wprep_port;
	int k = KERNEL_C;
#ifdef HAVE_X86_KERNELS
	k = kernel();
	if (ss_gemm_choice() == SS_GEMM_C) /* $SS_GEMM holds it as the f32 kernels */
		k = KERNEL_C;
	else if (ss_gemm_choice() == SS_GEMM_AVX2 && k == KERNEL_VNNI)
		k = KERNEL_AVX2;
	if (k == KERNEL_VNNI)
		tile = qtile_vnni, prep = wprep_avx2;
	else if (k == KERNEL_AVX2 && gemm_avx2(y, ldy, x, ldx, w, M, N, K, beta) == 0)
		return 0;
	else
		k = KERNEL_C; /* the same bits */
#endif
	for (int64_t m0 = 0; m0 < M; m0 += chunk) {
		const int64_t mc = M - m0 < chunk ? M - m0 : chunk, np = (mc + LANES - 1) / LANES;
		/* x's rows quantized (as ss_matvec_q8_0's), into panels of LANES */
		for (int64_t m = 0; m < np * LANES; m++) {
			uint32_t *xp = xt + m / LANES * nb * 8 * LANES + m % LANES;
			float *dp = xd + m / LANES * nb * LANES + m % LANES;
			if (m >= mc) { /* lanes past the last row: code 0, d 0, never stored */
				for (int64_t i = 0; i < nb * 8; i++)
					xp[i * LANES] = 0x80808080u;
				for (int64_t b = 0; b < nb; b++)
					dp[b * LANES] = 0.0f;
				continue;
			}
			const float *xm = x + (m0 + m) * ldx;
#ifdef HAVE_X86_KERNELS
			if (k != KERNEL_C)
				prep_avx2(&xr, 0, xm, nb);
			else
#endif
				for (int64_t b = 0; b < nb; b++)
					prep_c(&xr, b, xm + b * QB);
			for (int64_t i = 0; i < nb * 8; i++) {
				uint32_t q;
				memcpy(&q, xr.q + 4 * i, 4);
				xp[i * LANES] = q ^ 0x80808080u;
			}
			for (int64_t b = 0; b < nb; b++)
				dp[b * LANES] = xr.d[b];
		}
		for (int64_t n0 = 0; n0 < N; n0 += NR) {
			const int nr = N - n0 < NR ? (int)(N - n0) : NR;
			prep(wc, wdv, w + n0 * row, row, nb, nr);
			for (int64_t p = 0; p < np; p++) {
				const int mv = mc - p * LANES < LANES ? (int)(mc - p * LANES) : LANES;
				tile(y + (m0 + p * LANES) * ldy + n0, ldy, xt + p * nb * 8 * LANES,
				     xd + p * nb * LANES, w + n0 * row, row, wc, wdv, nb, nr, mv, beta);
			}
		}
	}
	return 0;
}
