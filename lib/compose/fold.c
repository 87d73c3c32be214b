/*
 * fold.c — the composer's accumulation kernels: each input array's
 * elements, in any stored dtype (f32 read in place; f16, bf16 and their
 * byte-shuffled planes, q8 and q4 widened a block at a time in L1), folded
 * into the f32 accumulator by one of four elementwise updates.
 * ref: docs/DESIGN.md §3 (the composer); formats/states.md ("shuffle", "q8",
 *      "q4").
 */
#include "compose/fold.h"
#include "base/internal.h" /* ss_cpu_f16c */

#include <math.h>
#include <string.h>

/* The accumulation loops: memory-bound, f32. Written as fixed 16-wide inner
 * loops, which the compiler vectorises at -O2, plus a scalar tail. ISO C
 * mode keeps a*b+c unfused, so every build rounds alike. */
#define VW 16
/* Inputs in a storage dtype (or unaligned) are converted BLK elements at a
 * time into an L1-resident buffer, so each input byte crosses memory once. */
#define BLK 256

static void k_scale(float *restrict y, float c, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			y[i + j] = c * x[i + j];
	for (; i < n; i++)
		y[i] = c * x[i];
}

static void k_axpy(float *restrict y, float c, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			y[i + j] += c * x[i + j];
	for (; i < n; i++)
		y[i] += c * x[i];
}

/* y = d·y + c·x: one Horner step of CASO. */
static void k_axpby(float *restrict y, float d, float c, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			y[i + j] = d * y[i + j] + c * x[i + j];
	for (; i < n; i++)
		y[i] = d * y[i] + c * x[i];
}

static void k_max(float *restrict y, float c, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++) {
			float v = c * x[i + j];
			y[i + j] = v > y[i + j] ? v : y[i + j];
		}
	for (; i < n; i++) {
		float v = c * x[i];
		y[i] = v > y[i] ? v : y[i];
	}
}

void k_mul(float *y, float c, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			y[i + j] *= c;
	for (; i < n; i++)
		y[i] *= c;
}

void k_div(float *y, float c, size_t n)
{
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			y[i + j] /= c;
	for (; i < n; i++)
		y[i] /= c;
}

/* Σ x² of n floats in f64 (16 partial sums: vectorises, stays accurate for
 * millions of elements). */
double k_sumsq(const float *x, size_t n)
{
	double part[VW] = {0};
	size_t i = 0;
	for (; i + VW <= n; i += VW)
		for (size_t j = 0; j < VW; j++)
			part[j] += (double)x[i + j] * x[i + j];
	double s = 0;
	for (; i < n; i++)
		s += (double)x[i] * x[i];
	for (size_t j = 0; j < VW; j++)
		s += part[j];
	return s;
}


src_arr src_of(const void *p, ss_dtype t)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	src_arr s = {p, t, d, d->size, t == SS_DTYPE_F32 && (uintptr_t)p % _Alignof(float) == 0,
		     NULL, 0, 0, 0, 0};
	return s;
}

/* dst[0..m) = x's elements [off, off+m) in f32 (m <= BLK). */
static void widen(float *dst, src_arr x, size_t off, size_t m)
{
	if (x.planes) {
		/* the two planes joined in L1 (as 16-bit words, which vectorises
		 * where byte stores to alternate addresses do not: f16 folds 2x
		 * faster; little-endian, as the stored bytes), then widened */
		uint16_t h[BLK];
		const unsigned char *lo = x.p + off, *hi = x.p + x.planes + off;
		size_t i = 0;
		for (; i + VW <= m; i += VW)
			for (size_t j = 0; j < VW; j++)
				h[i + j] = (uint16_t)(lo[i + j] | (unsigned)hi[i + j] << 8);
		for (; i < m; i++)
			h[i] = (uint16_t)(lo[i] | (unsigned)hi[i] << 8);
		x.d->to_f32(dst, h, m);
	} else if (x.d->scaled) { /* x.p holds element x.e0, even for q4: off's byte is off/2 */
		ss_quant_to_f32(x.t, dst, x.p + off / x.d->block, x.scale, x.e0 + off, m, x.row, x.block);
	} else {
		x.d->to_f32(dst, x.p + off * x.es, m);
	}
}


#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* apply() of a byte-shuffled block's 2-byte elements (f16, bf16) in one
 * pass, 8 at a time: the planes joined, widened and folded in registers,
 * where widen() and the kernels above pass through an L1 buffer three
 * times (ss-compose's ten folds of 130m f16 states: 35 -> 31 ms, bound by
 * the accumulator's memory traffic; half the time where it is in cache).
 * The kernels' f32 operations in their order, unfused (mul then add; max
 * as v > y ? v : y, which is MAXPS(v, y)), so the bits are theirs
 * (test_compose: test_files_pieces_special_values). Returns the elements
 * done, a multiple of 8. ref: Intel SDM (VCVTPH2PS, MAXPS). */
__attribute__((target("avx,f16c"))) static size_t apply_planes_avx(float *y, const unsigned char *lo,
								   const unsigned char *hi, size_t n, int f16,
								   int op, float c, float d)
{
	const __m256 vc = _mm256_set1_ps(c), vd = _mm256_set1_ps(d);
	const __m128i z = _mm_setzero_si128();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(lo + i)),
					      _mm_loadl_epi64((const __m128i *)(const void *)(hi + i)));
		__m256 x = f16 ? _mm256_cvtph_ps(h)
			       : _mm256_castsi256_ps(_mm256_set_m128i(_mm_unpackhi_epi16(z, h), _mm_unpacklo_epi16(z, h)));
		__m256 v;
		switch (op) {
		case OP_COPY: v = x; break;
		case OP_SCALE: v = _mm256_mul_ps(vc, x); break;
		case OP_AXPY: v = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(vc, x)); break;
		case OP_AXPBY:
			v = _mm256_add_ps(_mm256_mul_ps(vd, _mm256_loadu_ps(y + i)), _mm256_mul_ps(vc, x));
			break;
		default: v = _mm256_max_ps(_mm256_mul_ps(vc, x), _mm256_loadu_ps(y + i)); break;
		}
		_mm256_storeu_ps(y + i, v);
	}
	return i;
}

#endif

/* y[0..n) op= c·x[off..off+n): the one loop every mode goes through. */
void apply(float *restrict y, src_arr x, size_t off, size_t n, int op, float c, float d)
{
	float tmp[BLK];
#if defined(__x86_64__) && defined(__GNUC__)
	if (x.planes && ss_cpu_f16c()) {
		size_t done = apply_planes_avx(y, x.p + off, x.p + x.planes + off, n, x.t == SS_DTYPE_F16, op, c, d);
		y += done, off += done, n -= done;
	}
#endif
	for (size_t i = 0; i < n; i += BLK) {
		size_t m = n - i < BLK ? n - i : BLK;
		const float *xs;
		if (x.direct) {
			xs = (const float *)(const void *)x.p + off + i;
		} else {
			widen(op == OP_COPY ? y + i : tmp, x, off + i, m);
			xs = tmp;
		}
		switch (op) {
		case OP_COPY:
			if (x.direct)
				memcpy(y + i, xs, m * sizeof *xs);
			break;
		case OP_SCALE: k_scale(y + i, c, xs, m); break;
		case OP_AXPY: k_axpy(y + i, c, xs, m); break;
		case OP_AXPBY: k_axpby(y + i, d, c, xs, m); break;
		default: k_max(y + i, c, xs, m); break;
		}
	}
}

/* L2 norm of x[off..off+n). */
double norm2(src_arr x, size_t off, size_t n)
{
	if (x.direct)
		return sqrt(k_sumsq((const float *)(const void *)x.p + off, n));
	float tmp[BLK];
	double s = 0;
	for (size_t i = 0; i < n; i += BLK) {
		size_t m = n - i < BLK ? n - i : BLK;
		widen(tmp, x, off + i, m);
		s += k_sumsq(tmp, m);
	}
	return sqrt(s);
}
