/*
 * ops/transpose_simd.h (internal to libss) — 32-bit lanes transposed in
 * registers: 16 x 16 (AVX-512) and 8 x 8 (AVX2), for the panels of
 * ops/linear_f32.c and the state transposes of ops/ssd.c. Moves only: the
 * same bits on every path. x86-64 with GCC or Clang only (the includers'
 * HAVE_X86_KERNELS); the functions carry their own target attributes.
 */
#ifndef SS_TRANSPOSE_SIMD_H
#define SS_TRANSPOSE_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define SS_TRANSPOSE_AVX512 __attribute__((target("avx512f"), always_inline))
#define SS_TRANSPOSE_AVX2 __attribute__((target("avx2"), always_inline))
#define SS_TRANSPOSE_UNROLL _Pragma("GCC unroll 16")

/* c[j] = lane j of r[0..15] (a 16 x 16 transpose of 32-bit lanes: 64
 * shuffles). */
SS_TRANSPOSE_AVX512 static inline void ss_transpose16(__m512 c[16], const __m512 r[16])
{
	__m512 t[16], u[16];
	SS_TRANSPOSE_UNROLL for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	/* u[4i + j], 128-bit lane L: lane 4L + j of rows 4i .. 4i + 3 */
	SS_TRANSPOSE_UNROLL for (int i = 0; i < 4; i++)
		SS_TRANSPOSE_UNROLL for (int h = 0; h < 2; h++) {
			const __m512d a = _mm512_castps_pd(t[4 * i + h]), b = _mm512_castps_pd(t[4 * i + h + 2]);
			u[4 * i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
			u[4 * i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
		}
	SS_TRANSPOSE_UNROLL for (int j = 0; j < 4; j++) {
		const __m512 p = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
		const __m512 q = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
		const __m512 p2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
		const __m512 q2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
		c[j] = _mm512_shuffle_f32x4(p, p2, 0x88);
		c[4 + j] = _mm512_shuffle_f32x4(p, p2, 0xDD);
		c[8 + j] = _mm512_shuffle_f32x4(q, q2, 0x88);
		c[12 + j] = _mm512_shuffle_f32x4(q, q2, 0xDD);
	}
}

/* c[j] = lane j of r[0..7] (an 8 x 8 transpose: 24 shuffles). */
SS_TRANSPOSE_AVX2 static inline void ss_transpose8(__m256 c[8], const __m256 r[8])
{
	__m256 t[8], u[8];
	SS_TRANSPOSE_UNROLL for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	/* u[4h + j], 128-bit lane L: element 4L + j of rows 4h .. 4h + 3 */
	SS_TRANSPOSE_UNROLL for (int h = 0; h < 2; h++) {
		u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
		u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
		u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
		u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
	}
	SS_TRANSPOSE_UNROLL for (int j = 0; j < 4; j++) {
		c[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
		c[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
	}
}

#undef SS_TRANSPOSE_AVX512
#undef SS_TRANSPOSE_AVX2
#undef SS_TRANSPOSE_UNROLL
#endif
#endif /* SS_TRANSPOSE_SIMD_H */
