/* dtype.c — the table of storage dtypes (ss_dtype_info in ss.h) and element
 * conversion between f32, f16, bf16, q8 and q4 (int8 or 4-bit codes with a
 * scale per block) and q8_0 (ggml's blocks of 32 codes and their f16
 * scale). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ss.h"
#include "stream/internal.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float ss_bf16_to_f32(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

uint16_t ss_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

/* IEEE binary16 via the F16C instructions when the compiler targets them,
 * else bit manipulation. Both round to nearest even. */
#if defined(__F16C__)
#include <immintrin.h>
float ss_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
uint16_t ss_f32_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
/* Exact and branch-free, so bulk loops vectorise: the 15 bits below the
 * sign, shifted into a binary32's exponent/mantissa, read as a float and
 * scaled by 2^(127-15), give every finite value (subnormals included, the
 * product being exact); the all-ones exponent becomes inf/NaN. */
float ss_f16_to_f32(uint16_t h)
{
	uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t u = f2u(u2f(em << 13) * 0x1p112f);
	uint32_t special = 0u - (uint32_t)(em >= 0x7c00u);
	u = (u & ~special) | ((0x7f800000u | (em << 13)) & special);
	return u2f(u | sign);
}

uint16_t ss_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7e00; /* NaN */
	if (a >= 0x477ff000u) /* rounds to >= 65520: overflow */
		return sign | 0x7c00;
	if (a < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
		/* a * 2^24 rounded to nearest even, done in float arithmetic (exact
		 * because the product's spacing is coarser than the rounding). */
		float v = u2f(a) * 0x1p24f;
		uint32_t m = (uint32_t)v;
		float rem = v - (float)m;
		if (rem > 0.5f || (rem == 0.5f && (m & 1)))
			m++;
		return sign | (uint16_t)m;
	}
	uint32_t r = a + 0xfffu + ((a >> 13) & 1) - (112u << 23);
	return sign | (uint16_t)(r >> 13);
}
#endif

/* Bulk f16 with the F16C instructions where the CPU has them, chosen at
 * run time (the build targets x86-64-v2, which lacks them): 8 at a time,
 * round to nearest even like the scalar code; a NaN keeps its payload's
 * top bits where the scalar code writes the canonical 0x7e00. */
#if defined(__x86_64__) && !defined(__F16C__)
#include <immintrin.h>
#define F16C_BULK 1
static int have_f16c(void)
{
	return ss_cpu_f16c();
}

__attribute__((target("avx,f16c"))) static size_t f16_to_f32_8(float *dst, const unsigned char *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i))));
	return i;
}

__attribute__((target("avx,f16c"))) static size_t f32_to_f16_8(unsigned char *p, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(p + 2 * i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	return i;
}
#endif

/* src/dst may be unaligned (msgpack bin payloads are): access 16-bit
 * elements through memcpy, which compiles to plain loads and stores. */
static void f32_to_f32(float *dst, const void *src, size_t n) { memcpy(dst, src, n * 4); }
static void f32_from_f32(void *dst, const float *src, size_t n) { memcpy(dst, src, n * 4); }

static void f16_to_f32(float *dst, const void *src, size_t n)
{
	const unsigned char *p = src;
	uint16_t h;
	size_t i0 = 0;
#ifdef F16C_BULK
	if (have_f16c())
		i0 = f16_to_f32_8(dst, p, n);
#endif
	for (size_t i = i0; i < n; i++) {
		memcpy(&h, p + 2 * i, 2);
		dst[i] = ss_f16_to_f32(h);
	}
}

static void f16_from_f32(void *dst, const float *src, size_t n)
{
	unsigned char *p = dst;
	uint16_t h;
	size_t i0 = 0;
#ifdef F16C_BULK
	if (have_f16c())
		i0 = f32_to_f16_8(p, src, n);
#endif
	for (size_t i = i0; i < n; i++) {
		h = ss_f32_to_f16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

static void bf16_to_f32(float *dst, const void *src, size_t n)
{
	const unsigned char *p = src;
	uint16_t h;
	for (size_t i = 0; i < n; i++) {
		memcpy(&h, p + 2 * i, 2);
		dst[i] = u2f((uint32_t)h << 16);
	}
}

static void bf16_from_f32(void *dst, const float *src, size_t n)
{
	unsigned char *p = dst;
	uint16_t h;
	for (size_t i = 0; i < n; i++) {
		h = ss_f32_to_bf16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

/* q8_0: blocks of Q8_0_BLOCK elements, Q8_0_BYTES each: the f16 d, then
 * the codes. ref: ggml/src/ggml-quants.c quantize_row_q8_0_ref (d =
 * amax/127 in f32, codes roundf(x·(1/d)), d stored as f16) and
 * dequantize_row_q8_0; a block with a non-finite x gets d = NaN and codes
 * 0 (ggml's would be undefined). */
enum { Q8_0_BLOCK = 32, Q8_0_BYTES = 34 };

static void q8_0_from_f32(void *dst, const float *src, size_t n)
{
	unsigned char *p = dst;
	for (size_t i0 = 0; i0 < n; i0 += Q8_0_BLOCK, p += Q8_0_BYTES) {
		const size_t m = n - i0 < Q8_0_BLOCK ? n - i0 : Q8_0_BLOCK;
		const float *x = src + i0;
		float amax = 0.0f;
		int finite = 1;
		for (size_t j = 0; j < m; j++) {
			const float a = fabsf(x[j]);
			amax = a > amax ? a : amax;
			finite &= isfinite(x[j]) != 0;
		}
		const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		const uint16_t h = finite ? ss_f32_to_f16(d) : 0x7e00u;
		int8_t q[Q8_0_BLOCK] = { 0 };
		/* d subnormal: 1/d is inf, x·id no code (ggml's cast is undefined
		 * there); f16(d) is 0 and the block zeros whatever its codes */
		for (size_t j = 0; finite && isfinite(id) && j < m; j++)
			q[j] = (int8_t)roundf(x[j] * id);
		memcpy(p, &h, 2);
		memcpy(p + 2, q, Q8_0_BLOCK);
	}
}

static void q8_0_to_f32(float *dst, const void *src, size_t n)
{
	const unsigned char *p = src;
	for (size_t i0 = 0; i0 < n; i0 += Q8_0_BLOCK, p += Q8_0_BYTES) {
		const size_t m = n - i0 < Q8_0_BLOCK ? n - i0 : Q8_0_BLOCK;
		uint16_t h;
		int8_t q[Q8_0_BLOCK];
		memcpy(&h, p, 2);
		memcpy(q, p + 2, Q8_0_BLOCK);
		const float d = ss_f16_to_f32(h);
		if (m == Q8_0_BLOCK)
			for (size_t j = 0; j < Q8_0_BLOCK; j++) /* a fixed count: vectorised */
				dst[i0 + j] = (float)q[j] * d;
		else
			for (size_t j = 0; j < m; j++)
				dst[i0 + j] = (float)q[j] * d;
	}
}

/* The dtypes, indexed by ss_dtype (ss.h says what each field means). */
#define SS_DTYPE_ANY_WEIGHTS (SS_DTYPE_WEIGHTS | SS_DTYPE_SAFETENSORS)
static const ss_dtype_info dtypes[] = {
	[SS_DTYPE_F32] = { SS_DTYPE_F32, "f32", "float32", 4, 1, SS_DTYPE_STATES | SS_DTYPE_ANY_WEIGHTS, 0,
			   0, f32_to_f32, f32_from_f32 },
	[SS_DTYPE_F16] = { SS_DTYPE_F16, "f16", "float16", 2, 1, SS_DTYPE_STATES | SS_DTYPE_ANY_WEIGHTS, 1,
			   0, f16_to_f32, f16_from_f32 },
	[SS_DTYPE_BF16] = { SS_DTYPE_BF16, "bf16", "bfloat16", 2, 1, SS_DTYPE_STATES | SS_DTYPE_ANY_WEIGHTS,
			    1, 0, bf16_to_f32, bf16_from_f32 },
	[SS_DTYPE_Q8] = { SS_DTYPE_Q8, "q8", NULL, 1, 1, SS_DTYPE_STATES, 0, 127, NULL, NULL },
	[SS_DTYPE_Q8_0] = { SS_DTYPE_Q8_0, "q8_0", NULL, Q8_0_BYTES, Q8_0_BLOCK, SS_DTYPE_WEIGHTS, 0, 0,
			    q8_0_to_f32, q8_0_from_f32 },
	[SS_DTYPE_Q4] = { SS_DTYPE_Q4, "q4", NULL, 1, 2, SS_DTYPE_STATES, 0, 7, NULL, NULL },
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

const ss_dtype_info *ss_dtype_info_of(ss_dtype t)
{
	return (unsigned)t < N_DTYPES ? &dtypes[t] : NULL;
}

const char *ss_dtype_name(ss_dtype t)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	return d ? d->name : NULL;
}

size_t ss_dtype_size(ss_dtype t)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	return d ? d->size : 0;
}

size_t ss_dtype_row_size(ss_dtype t, size_t n)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	return d ? (n + d->block - 1) / d->block * d->size : 0;
}

int ss_dtype_parse_for(const char *s, unsigned uses, ss_dtype *out, char *errmsg)
{
	for (size_t i = 0; s && i < N_DTYPES; i++)
		if ((dtypes[i].uses & uses) &&
		    (!strcmp(s, dtypes[i].name) || (dtypes[i].alias && !strcmp(s, dtypes[i].alias)))) {
			*out = dtypes[i].dtype;
			return 0;
		}
	if (errmsg) { /* "'x' is not f32, f16, bf16, q8 or q4" */
		size_t n = 0, k = 0, left = 0;
		for (size_t i = 0; i < N_DTYPES; i++)
			left += (dtypes[i].uses & uses) != 0;
		n += (size_t)snprintf(errmsg, SS_ERRMSG_MAX, "'%.64s' is not", s ? s : "");
		for (size_t i = 0; i < N_DTYPES && n < SS_ERRMSG_MAX; i++)
			if (dtypes[i].uses & uses) {
				k++;
				n += (size_t)snprintf(errmsg + n, SS_ERRMSG_MAX - n, "%s %s",
						      k == 1 ? "" : k == left ? " or" : ",", dtypes[i].name);
			}
	}
	return SS_ERR_INVALID;
}

int ss_dtype_parse(const char *s, ss_dtype *out)
{
	return ss_dtype_parse_for(s, SS_DTYPE_STATES | SS_DTYPE_ANY_WEIGHTS, out, NULL);
}

void ss_to_f32(float *dst, const void *src, ss_dtype t, size_t n)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	if (d && d->to_f32)
		d->to_f32(dst, src, n);
}

void ss_from_f32(void *dst, ss_dtype t, const float *src, size_t n)
{
	const ss_dtype_info *d = ss_dtype_info_of(t);
	if (d && d->from_f32)
		d->from_f32(dst, src, n);
}

/* Magnitude bits at or above which an element is NaN or infinite (its
 * exponent all ones), with the sign bit cleared. */
#define NONFINITE_F32 0x7f800000u
#define NONFINITE_F16 0x7c00u
#define NONFINITE_BF16 0x7f80u

/* A run of elements is scanned as the OR of (exponent bits + the lowest
 * exponent bit): the sign bit of the sum is set exactly when the exponent
 * is all ones. Only where a run's OR has it is the run searched element by
 * element. A run of exactly SCAN_RUN elements has a fixed trip count,
 * which GCC's -O2 cost model vectorises (SSE2: ~33 GB/s in cache, against
 * ~7 GB/s for a maximum of the magnitudes, which it leaves scalar, and the
 * 1-2 GB/s zstd decompresses at). */
enum { SCAN_RUN = 1024 };

/* 1 when one of the m (<= SCAN_RUN) elements at b is not finite. */
static int run_nonfinite32(const unsigned char *b, size_t m)
{
	uint32_t acc = 0;
	if (m == SCAN_RUN) {
		for (size_t i = 0; i < SCAN_RUN; i++) {
			uint32_t x;
			memcpy(&x, b + 4 * i, 4);
			acc |= (x & NONFINITE_F32) + 0x00800000u;
		}
	} else {
		for (size_t i = 0; i < m; i++) {
			uint32_t x;
			memcpy(&x, b + 4 * i, 4);
			acc |= (x & NONFINITE_F32) + 0x00800000u;
		}
	}
	return acc >> 31;
}

/* 1 when one of the m (<= SCAN_RUN) f32 elements at b has magnitude bits
 * above 0x7fffffff - above (the same trick: the sum's sign bit). */
static int run_above32(const unsigned char *b, size_t m, uint32_t above)
{
	uint32_t acc = 0;
	if (m == SCAN_RUN) {
		for (size_t i = 0; i < SCAN_RUN; i++) {
			uint32_t x;
			memcpy(&x, b + 4 * i, 4);
			acc |= (x & 0x7fffffffu) + above;
		}
	} else {
		for (size_t i = 0; i < m; i++) {
			uint32_t x;
			memcpy(&x, b + 4 * i, 4);
			acc |= (x & 0x7fffffffu) + above;
		}
	}
	return acc >> 31;
}

/* The same for 2-byte elements whose exponent mask is `mask` (f16 0x7c00,
 * bf16 0x7f80; low: its lowest bit). */
static int run_nonfinite16(const unsigned char *b, size_t m, uint16_t mask, uint16_t low)
{
	uint16_t acc = 0;
	if (m == SCAN_RUN) {
		for (size_t i = 0; i < SCAN_RUN; i++) {
			uint16_t x;
			memcpy(&x, b + 2 * i, 2);
			acc |= (uint16_t)((x & mask) + low);
		}
	} else {
		for (size_t i = 0; i < m; i++) {
			uint16_t x;
			memcpy(&x, b + 2 * i, 2);
			acc |= (uint16_t)((x & mask) + low);
		}
	}
	return acc >> 15;
}

size_t ss_nonfinite_find(const void *p, ss_dtype t, size_t n)
{
	const unsigned char *b = p;
	if (t != SS_DTYPE_F32 && t != SS_DTYPE_F16 && t != SS_DTYPE_BF16)
		return n; /* q8, q4: codes, finite by construction */
	const uint32_t lim = t == SS_DTYPE_F32 ? NONFINITE_F32 : t == SS_DTYPE_F16 ? NONFINITE_F16 : NONFINITE_BF16;
	const size_t es = ss_dtype_size(t);
	for (size_t i0 = 0; i0 < n; i0 += SCAN_RUN) {
		size_t m = n - i0 < SCAN_RUN ? n - i0 : SCAN_RUN;
		if (!(t == SS_DTYPE_F32 ? run_nonfinite32(b + 4 * i0, m)
					: run_nonfinite16(b + 2 * i0, m, (uint16_t)lim, (uint16_t)(lim & -lim))))
			continue;
		for (size_t i = i0;; i++) {
			uint32_t x = 0;
			memcpy(&x, b + es * i, es); /* little-endian */
			if ((x & (t == SS_DTYPE_F32 ? 0x7fffffffu : 0x7fffu)) >= lim)
				return i;
		}
	}
	return n;
}

size_t ss_unstorable_find(const float *x, ss_dtype t, size_t n)
{
	if (t == SS_DTYPE_Q8 || t == SS_DTYPE_Q4) {
		/* a block's scale, max|x|/Q, must be one a reader takes: at most
		 * FLT_MAX/(Q+1) (record.c q8_scales). Division being monotone,
		 * that is |x| <= thr, the largest float whose quotient passes. */
		const float q = (float)ss_dtype_info_of(t)->scaled, lim = FLT_MAX / (q + 1);
		float thr = lim * q;
		while (thr / q > lim)
			thr = nextafterf(thr, 0);
		while (nextafterf(thr, INFINITY) / q <= lim)
			thr = nextafterf(thr, INFINITY);
		uint32_t above;
		memcpy(&above, &thr, 4);
		above = 0x7fffffffu - above; /* |x|'s bits + above has the sign bit: |x| > thr, or NaN */
		for (size_t i0 = 0; i0 < n; i0 += SCAN_RUN) {
			size_t m = n - i0 < SCAN_RUN ? n - i0 : SCAN_RUN;
			if (run_above32((const unsigned char *)(x + i0), m, above))
				for (size_t i = i0;; i++)
					if (!(fabsf(x[i]) <= thr))
						return i;
		}
		return n;
	}
	if (t != SS_DTYPE_F16 && t != SS_DTYPE_BF16)
		return ss_nonfinite_find(x, SS_DTYPE_F32, n);
	uint16_t h[SCAN_RUN];
	for (size_t i0 = 0; i0 < n; i0 += SCAN_RUN) {
		size_t m = n - i0 < SCAN_RUN ? n - i0 : SCAN_RUN;
		ss_from_f32(h, t, x + i0, m);
		size_t bad = ss_nonfinite_find(h, t, m);
		if (bad < m)
			return i0 + bad;
	}
	return n;
}

/* run_nonfinite16 of m (<= SCAN_RUN) elements split into byte planes. */
static int run_nonfinite_planes(const unsigned char *lo, const unsigned char *hi, size_t m, uint16_t mask,
				uint16_t low)
{
	uint16_t acc = 0;
	if (m == SCAN_RUN) {
		for (size_t i = 0; i < SCAN_RUN; i++)
			acc |= (uint16_t)((((uint16_t)hi[i] << 8 | lo[i]) & mask) + low);
	} else {
		for (size_t i = 0; i < m; i++)
			acc |= (uint16_t)((((uint16_t)hi[i] << 8 | lo[i]) & mask) + low);
	}
	return acc >> 15;
}

size_t ss_nonfinite_planes(const unsigned char *lo, const unsigned char *hi, ss_dtype t, size_t m)
{
	const uint16_t lim = t == SS_DTYPE_F16 ? NONFINITE_F16 : NONFINITE_BF16;
	for (size_t i0 = 0; i0 < m; i0 += SCAN_RUN) {
		size_t k = m - i0 < SCAN_RUN ? m - i0 : SCAN_RUN;
		if (!run_nonfinite_planes(lo + i0, hi + i0, k, lim, (uint16_t)(lim & -lim)))
			continue;
		for (size_t i = i0;; i++)
			if ((((unsigned)hi[i] & 0x7f) << 8 | lo[i]) >= lim)
				return i;
	}
	return m;
}

/* One block of m 2-byte elements split into its two planes, or (inverse)
 * the planes interleaved back. GCC does not vectorise the strided byte
 * loops (~1 GB/s: 8-16 ms of the ~20 it took to write a composed 130m f16
 * state), so SSE2, part of x86-64, moves 16 elements a step (2.5 ms); the
 * scalar loops finish the tail and serve other targets. ref: Intel SDM
 * (PACKUSWB, PUNPCKLBW). */
static void planes2(unsigned char *restrict y, const unsigned char *restrict x, size_t m, int inverse)
{
	size_t i = 0;
#ifdef __SSE2__
	const __m128i lo8 = _mm_set1_epi16(0xff);
	if (inverse)
		for (; i + 16 <= m; i += 16) {
			__m128i l = _mm_loadu_si128((const __m128i *)(const void *)(x + i));
			__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(x + m + i));
			_mm_storeu_si128((__m128i *)(void *)(y + 2 * i), _mm_unpacklo_epi8(l, h));
			_mm_storeu_si128((__m128i *)(void *)(y + 2 * i + 16), _mm_unpackhi_epi8(l, h));
		}
	else
		for (; i + 16 <= m; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i));
			__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i + 16));
			_mm_storeu_si128((__m128i *)(void *)(y + i),
					 _mm_packus_epi16(_mm_and_si128(a, lo8), _mm_and_si128(b, lo8)));
			_mm_storeu_si128((__m128i *)(void *)(y + m + i),
					 _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
		}
#endif
	if (inverse)
		for (; i < m; i++) {
			y[2 * i] = x[i];
			y[2 * i + 1] = x[m + i];
		}
	else
		for (; i < m; i++) {
			y[i] = x[2 * i];
			y[m + i] = x[2 * i + 1];
		}
}

/* ss_shuffle (inverse 0) and ss_unshuffle (inverse 1). */
static void shuffle_blocks(unsigned char *y, const unsigned char *x, size_t es, size_t n, size_t block,
			   int inverse)
{
	for (size_t b0 = 0; b0 < n; b0 += block) {
		size_t m = n - b0 < block ? n - b0 : block;
		if (es == 2) {
			planes2(y + b0 * 2, x + b0 * 2, m, inverse);
			continue;
		}
		for (size_t i = 0; i < m; i++)
			for (size_t j = 0; j < es; j++) {
				size_t elem = (b0 + i) * es + j, plane = b0 * es + j * m + i;
				y[inverse ? elem : plane] = x[inverse ? plane : elem];
			}
	}
}

void ss_shuffle(void *dst, const void *src, size_t es, size_t n, size_t block)
{
	shuffle_blocks(dst, src, es, n, block, 0);
}

void ss_unshuffle(void *dst, const void *src, size_t es, size_t n, size_t block)
{
	shuffle_blocks(dst, src, es, n, block, 1);
}

size_t ss_q8_n_scales(size_t n, size_t row, size_t block)
{
	return n / row * ((row + block - 1) / block);
}

/* x / s rounded to nearest, clamped to [-qmax, qmax] */
static inline int quant_code(float x, float s, float qmax)
{
	float v = nearbyintf(x / s);
	return (int)(v > qmax ? qmax : v < -qmax ? -qmax : v);
}

void ss_quant_scales(ss_dtype t, float *scale, const float *x, size_t n, size_t row, size_t block)
{
	const float qmax = (float)ss_dtype_info_of(t)->scaled;
	size_t k = 0;
	for (size_t r0 = 0; r0 < n; r0 += row)
		for (size_t b0 = 0; b0 < row; b0 += block) {
			size_t m = row - b0 < block ? row - b0 : block;
			const float *v = x + r0 + b0;
			float mx = 0;
			for (size_t i = 0; i < m; i++) {
				float a = fabsf(v[i]);
				mx = a > mx || a != a ? a : mx; /* a NaN sticks */
			}
			scale[k++] = mx / qmax;
		}
}

/* Runs of elements [e0, e0+n) that share one scale: calls body(i, m, s) for
 * each, i counted from e0. */
#define Q8_RUNS(e0, n, row, block, scale, body)                                        \
	do {                                                                           \
		size_t nb_ = ((row) + (block) - 1) / (block);                          \
		for (size_t i = 0, e = (e0); i < (n);) {                               \
			size_t w = e % (row), b = w / (block);                         \
			size_t end = (b + 1) * (block) < (row) ? (b + 1) * (block) : (row); \
			size_t m = end - w < (n) - i ? end - w : (n) - i;              \
			float s = (scale)[e / (row) * nb_ + b];                        \
			body;                                                          \
			i += m, e += m;                                                \
		}                                                                      \
	} while (0)

void ss_quant_from_f32(ss_dtype t, void *q, const float *x, const float *scale, size_t e0, size_t n,
		       size_t row, size_t block)
{
	if (t == SS_DTYPE_Q4) {
		uint8_t *nib = q;
		memset(nib, 0, (n + 1) / 2);
		Q8_RUNS(e0, n, row, block, scale, {
			if (s > 0 && isfinite(s))
				for (size_t j = i; j < i + m; j++)
					nib[j / 2] |= (uint8_t)((quant_code(x[j], s, 7) & 15) << 4 * (j & 1));
		});
		return;
	}
	int8_t *c = q;
	Q8_RUNS(e0, n, row, block, scale, {
		if (s > 0 && isfinite(s)) {
			for (size_t j = i; j < i + m; j++)
				c[j] = (int8_t)quant_code(x[j], s, 127);
		} else {
			memset(c + i, 0, m);
		}
	});
}

/* codes times one scale: 16 at a time, which vectorises (restrict: no
 * aliasing check in the loop). */
static void q8_run(float *restrict dst, const int8_t *restrict q, float s, size_t m)
{
	size_t j = 0;
	for (; j + 16 <= m; j += 16)
		for (size_t k = 0; k < 16; k++)
			dst[j + k] = (float)q[j + k] * s;
	for (; j < m; j++)
		dst[j] = (float)q[j] * s;
}

/* dst[0..m) = the q4 codes of nibbles [k, k+m) of the bytes at b (nibble
 * 2j the low one of b[j]) times s: sign-extended, a byte's two at a time. */
static void q4_run(float *restrict dst, const uint8_t *restrict b, size_t k, size_t m, float s)
{
	size_t j = k;
	if (j & 1 && j < k + m) {
		dst[0] = (float)((int8_t)(b[j / 2] & 0xf0) >> 4) * s;
		j++;
	}
	for (; j + 2 <= k + m; j += 2) {
		const uint8_t v = b[j / 2];
		dst[j - k] = (float)((int8_t)(v << 4) >> 4) * s;
		dst[j - k + 1] = (float)((int8_t)(v & 0xf0) >> 4) * s;
	}
	if (j < k + m)
		dst[j - k] = (float)((int8_t)(b[j / 2] << 4) >> 4) * s;
}

void ss_quant_to_f32(ss_dtype t, float *dst, const void *q, const float *scale, size_t e0, size_t n,
		     size_t row, size_t block)
{
	const int q4 = t == SS_DTYPE_Q4;
	Q8_RUNS(e0, n, row, block, scale, {
		if (!isfinite(s))
			for (size_t j = i; j < i + m; j++)
				dst[j] = NAN;
		else if (q4) /* q holds element e0: its high nibble when e0 is odd */
			q4_run(dst + i, q, (e0 & 1) + i, m, s);
		else
			q8_run(dst + i, (const int8_t *)q + i, s, m);
	});
}
