/*
 * q8_0.c — the linear op with q8_0 weights on the CPU, ss_matvec_q8_0
 * (ops/linear.h), as ggml's ggml_vec_dot_q8_0_q8_0 does it: each row of x
 * is quantized to q8_0 too (ss_from_f32), and a block of W against a block
 * of x is an exact int32 dot product (8 lanes of 4 products each) scaled by
 * d_w·d_x and added into f32.
 *
 * Every path computes the same bits: lane j of block b holds the exact
 * integer sum of products 4j..4j+3, block b goes into chain b % 4 as one
 * fused multiply-add (float(sum)·(d_w·d_x) + acc), the four chains are
 * added (0+1)+(2+3), then the 8 lanes j+(j+4), (0+1)+(2+3). AVX-512 VNNI
 * (vpdpbusd on 256 bits) where the CPU has it, AVX2 (vpmaddubsw, vpmaddwd)
 * else, portable C with fmaf() elsewhere: a result does not depend on M, N,
 * the slice of W, the thread count or the instruction set.
 * Why x is quantized rather than W widened to f32 (measured here, lm_head's
 * shape 50288 x 768, one thread, AVX-512 VNNI CPU, machine shared): one row
 * of x 1.7 ms either way (bound by W's 41 MB), four rows 5.1 ms against 8.0
 * ms (bound by instructions: the int8 path is about half as many per
 * weight), and quantizing x costs K roundings per row against N·K products.
 * The price is x's rounding in the error (see ss_matvec_q8_0).
 * ref: ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_q8_0_q8_0,
 *      quantize_row_q8_0 (x's blocks; ours round as its _ref, lib/stream/dtype.c).
 */
#include <math.h>
#include <string.h>

#include "ss.h"
#include "stream/internal.h" /* ss_cpu_f16c */

#include "forward/ops/linear.h"

enum { QB = 32, QBYTES = 34, CHAINS = 4 };

/* Bytes of x's rows quantized at once: rows of K <= SS_Q8_0_ROW_MAX. */
#define XBYTES (SS_Q8_0_ROW_MAX / QB * QBYTES)

/* The lanes' fixed reduction (see the top). */
static inline float reduce8(const float a[8])
{
	const float q0 = a[0] + a[4], q1 = a[1] + a[5], q2 = a[2] + a[6], q3 = a[3] + a[7];
	return (q0 + q1) + (q2 + q3);
}

static float dot_c(const unsigned char *w, const unsigned char *xq, int64_t nb)
{
	float acc[CHAINS][8] = { { 0 } }, a[8];
	for (int64_t b = 0; b < nb; b++) {
		int8_t q[QB], x[QB];
		uint16_t h, hx;
		memcpy(&h, w + b * QBYTES, 2);
		memcpy(q, w + b * QBYTES + 2, QB);
		memcpy(&hx, xq + b * QBYTES, 2);
		memcpy(x, xq + b * QBYTES + 2, QB);
		const float s = ss_f16_to_f32(h) * ss_f16_to_f32(hx);
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1

/* The dot of one row of W with one quantized row of x; ISUM(w, x) gives the
 * 8 int32 lane sums of a block's 32 code products. Four named chains
 * (an array indexed by b % 4 would live in memory), block b into chain
 * b % 4, the last nb % 4 blocks too. */
#define DOT_BLOCK(acc, b)                                                                        \
	do {                                                                                     \
		const unsigned char *blk = w + (b) * QBYTES, *xb = xq + (b) * QBYTES;            \
		uint16_t h, hx;                                                                  \
		memcpy(&h, blk, 2);                                                              \
		memcpy(&hx, xb, 2);                                                              \
		const __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)); \
		const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 2));  \
		const __m256 s = _mm256_set1_ps(_cvtsh_ss(h) * _cvtsh_ss(hx));                   \
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(_mm256_sign_epi8(wv, wv),          \
							      _mm256_sign_epi8(xv, wv))),         \
				      s, acc);                                                   \
	} while (0)

#define DOT_ROW(NAME, TARGET)                                                                    \
	TARGET static inline float NAME(const unsigned char *w, const unsigned char *xq, int64_t nb) \
	{                                                                                         \
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                       \
		int64_t b = 0;                                                                    \
		for (; b + CHAINS <= nb; b += CHAINS) {                                           \
			DOT_BLOCK(a0, b);                                                         \
			DOT_BLOCK(a1, b + 1);                                                     \
			DOT_BLOCK(a2, b + 2);                                                     \
			DOT_BLOCK(a3, b + 3);                                                     \
		}                                                                                 \
		if (b < nb)                                                                       \
			DOT_BLOCK(a0, b);                                                         \
		if (b + 1 < nb)                                                                   \
			DOT_BLOCK(a1, b + 1);                                                     \
		if (b + 2 < nb)                                                                   \
			DOT_BLOCK(a2, b + 2);                                                     \
		const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));    \
		__m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));    \
		q = _mm_hadd_ps(q, q);                                                            \
		return _mm_cvtss_f32(_mm_hadd_ps(q, q));                                          \
	}

/* |w| (unsigned) times x·sign(w) (signed), pairs into int16 (at most
 * 2·128·127: no saturation), then pairs of those into int32. */
#define ISUM_AVX2(ax, sx) _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sx), _mm256_set1_epi16(1))
#define ISUM_VNNI(ax, sx) _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sx)

#define ISUM ISUM_AVX2
DOT_ROW(dot_avx2, __attribute__((target("avx2,fma,f16c"))))
#undef ISUM
#define ISUM ISUM_VNNI
DOT_ROW(dot_vnni, __attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))))
#undef ISUM

enum { KERNEL_C, KERNEL_AVX2, KERNEL_VNNI };

static int kernel(void)
{
	static int cached = -1; /* threads may race to fill it: atomic, same value */
	int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (v < 0) {
		v = !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ss_cpu_f16c())
			    ? KERNEL_C
		    : __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")
			    ? KERNEL_VNNI
			    : KERNEL_AVX2;
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}
#endif

/* y[m][n] for the mr quantized rows of x (q8_0) against rows [0, N) of W:
 * row by row of W, so that W is one sequential stream read once, each row
 * reused from L1 for the mr rows of x. */
static void rows(float *y, ptrdiff_t ldy, const unsigned char *xq, int64_t mr, const unsigned char *W,
		 int64_t N, int64_t K, float beta)
{
	const int64_t nb = K / QB;
	const size_t row = (size_t)nb * QBYTES;
	float (*dot)(const unsigned char *, const unsigned char *, int64_t) = dot_c;
#ifdef HAVE_X86_KERNELS
	const int k = kernel();
	dot = k == KERNEL_VNNI ? dot_vnni : k == KERNEL_AVX2 ? dot_avx2 : dot_c;
#endif
	for (int64_t n = 0; n < N; n++)
		for (int64_t m = 0; m < mr; m++) {
			const float v = dot(W + n * row, xq + m * row, nb);
			float *ym = y + m * ldy + n;
			*ym = beta != 0.0f ? v + beta * *ym : v;
		}
}

void ss_matvec_q8_0(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t ldx, const void *W,
		    int64_t M, int64_t N, int64_t K, float beta)
{
	unsigned char xq[XBYTES];
	const size_t row = ss_dtype_row_size(SS_DTYPE_Q8_0, (size_t)K);
	const int64_t group = (int64_t)(XBYTES / row); /* rows of x quantized at once (>= 1) */
	for (int64_t m0 = 0; m0 < M; m0 += group) {
		const int64_t mr = M - m0 < group ? M - m0 : group;
		for (int64_t m = 0; m < mr; m++)
			ss_from_f32(xq + m * row, SS_DTYPE_Q8_0, x + (m0 + m) * ldx, (size_t)K);
		rows(y + m0 * ldy, ldy, xq, mr, W, N, K, beta);
	}
}
