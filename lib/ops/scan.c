/*
 * scan.c — the Mamba-2 selective scan on the CPU, ss_ssm_scan_cpu and
 * ss_ssm_step_cpu (ss_ops.h), one head at a time through ss_scan_head.
 * Twin: kernels/scan.cu (and kernels/ssd.cu, the chunked form; on the CPU
 * that is ops/ssd.c).
 *
 * Per token t (golden/README.md §2; mamba_ssm modules/mamba2.py step()):
 *   s = exp(dt*A) * s + dt * outer(x, B);   y = s @ C + D * x
 * The head's state ([P][N], 32 KB for mamba2-130m) stays in L1 while the
 * loop runs over the tokens, so the scan is bound by arithmetic, not memory;
 * heads run on different threads (forward.c). The update and the read-out are
 * fused into one pass over the state. An AVX2+FMA kernel is chosen at run
 * time when the CPU has it and N is a multiple of 8, an AVX-512 one when N
 * is a multiple of 16 (the build targets a baseline x86-64, so this is the
 * only path to wide vectors).
 */
#include "blas.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "ss.h"
#include "ops/scan.h"
#include "vec.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNEL 1
#endif

static double scan_head_generic(const ss_scan_head_args *a)
{
	const int P = a->P, N = a->N;
	double dtsum = 0.0;
	int64_t t;
	int p, n;

	for (t = 0; t < a->n; t++) {
		const float dt = a->dt[t * a->lddt];
		const float dA = expf(dt * a->A);
		const float *x = a->x + t * a->ldx;
		const float *B = a->B + t * a->ldb;
		dtsum += dt;
		if (a->y) {
			const float *C = a->C + t * a->ldc;
			float *y = a->y + t * a->ldy;
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const float xdt = x[p] * dt;
				float acc = 0.0f;
				for (n = 0; n < N; n++) {
					s[n] = s[n] * dA + xdt * B[n];
					acc += s[n] * C[n];
				}
				y[p] = acc + a->D * x[p];
			}
		} else {
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const float xdt = x[p] * dt;
				for (n = 0; n < N; n++)
					s[n] = s[n] * dA + xdt * B[n];
			}
		}
	}
	return dtsum;
}

#ifdef HAVE_X86_KERNEL
__attribute__((target("avx2,fma")))
static inline float hsum256(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* N % 8 == 0. Two accumulators for the read-out break the FMA dependency
 * chain when N >= 16. */
__attribute__((target("avx2,fma")))
static double scan_head_avx2(const ss_scan_head_args *a)
{
	const int P = a->P, N = a->N;
	double dtsum = 0.0;
	int64_t t;
	int p, n;

	for (t = 0; t < a->n; t++) {
		const float dt = a->dt[t * a->lddt];
		const __m256 dA = _mm256_set1_ps(expf(dt * a->A));
		const float *x = a->x + t * a->ldx;
		const float *B = a->B + t * a->ldb;
		dtsum += dt;
		if (a->y) {
			const float *C = a->C + t * a->ldc;
			float *y = a->y + t * a->ldy;
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const __m256 xdt = _mm256_set1_ps(x[p] * dt);
				__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
				for (n = 0; n + 16 <= N; n += 16) {
					__m256 s0 = _mm256_loadu_ps(s + n), s1 = _mm256_loadu_ps(s + n + 8);
					s0 = _mm256_fmadd_ps(xdt, _mm256_loadu_ps(B + n), _mm256_mul_ps(s0, dA));
					s1 = _mm256_fmadd_ps(xdt, _mm256_loadu_ps(B + n + 8), _mm256_mul_ps(s1, dA));
					_mm256_storeu_ps(s + n, s0);
					_mm256_storeu_ps(s + n + 8, s1);
					acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + n), acc0);
					acc1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(C + n + 8), acc1);
				}
				for (; n < N; n += 8) {
					__m256 s0 = _mm256_loadu_ps(s + n);
					s0 = _mm256_fmadd_ps(xdt, _mm256_loadu_ps(B + n), _mm256_mul_ps(s0, dA));
					_mm256_storeu_ps(s + n, s0);
					acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + n), acc0);
				}
				y[p] = hsum256(_mm256_add_ps(acc0, acc1)) + a->D * x[p];
			}
		} else {
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const __m256 xdt = _mm256_set1_ps(x[p] * dt);
				for (n = 0; n < N; n += 8) {
					__m256 s0 = _mm256_loadu_ps(s + n);
					s0 = _mm256_fmadd_ps(xdt, _mm256_loadu_ps(B + n), _mm256_mul_ps(s0, dA));
					_mm256_storeu_ps(s + n, s0);
				}
			}
		}
	}
	return dtsum;
}

/* N % 16 == 0. Same as the AVX2 kernel, one 512-bit vector per step. */
__attribute__((target("avx512f")))
static double scan_head_avx512(const ss_scan_head_args *a)
{
	const int P = a->P, N = a->N;
	double dtsum = 0.0;
	int64_t t;
	int p, n;

	for (t = 0; t < a->n; t++) {
		const float dt = a->dt[t * a->lddt];
		const __m512 dA = _mm512_set1_ps(expf(dt * a->A));
		const float *x = a->x + t * a->ldx;
		const float *B = a->B + t * a->ldb;
		dtsum += dt;
		if (a->y) {
			const float *C = a->C + t * a->ldc;
			float *y = a->y + t * a->ldy;
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const __m512 xdt = _mm512_set1_ps(x[p] * dt);
				__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
				for (n = 0; n + 32 <= N; n += 32) {
					__m512 s0 = _mm512_loadu_ps(s + n), s1 = _mm512_loadu_ps(s + n + 16);
					s0 = _mm512_fmadd_ps(xdt, _mm512_loadu_ps(B + n), _mm512_mul_ps(s0, dA));
					s1 = _mm512_fmadd_ps(xdt, _mm512_loadu_ps(B + n + 16), _mm512_mul_ps(s1, dA));
					_mm512_storeu_ps(s + n, s0);
					_mm512_storeu_ps(s + n + 16, s1);
					acc0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + n), acc0);
					acc1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(C + n + 16), acc1);
				}
				for (; n < N; n += 16) {
					__m512 s0 = _mm512_loadu_ps(s + n);
					s0 = _mm512_fmadd_ps(xdt, _mm512_loadu_ps(B + n), _mm512_mul_ps(s0, dA));
					_mm512_storeu_ps(s + n, s0);
					acc0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + n), acc0);
				}
				y[p] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + a->D * x[p];
			}
		} else {
			for (p = 0; p < P; p++) {
				float *s = a->s + (size_t)p * N;
				const __m512 xdt = _mm512_set1_ps(x[p] * dt);
				for (n = 0; n < N; n += 16) {
					__m512 s0 = _mm512_loadu_ps(s + n);
					s0 = _mm512_fmadd_ps(xdt, _mm512_loadu_ps(B + n), _mm512_mul_ps(s0, dA));
					_mm512_storeu_ps(s + n, s0);
				}
			}
		}
	}
	return dtsum;
}
#endif

double ss_scan_head(const ss_scan_head_args *a)
{
#ifdef HAVE_X86_KERNEL
	if (a->N % 16 == 0 && __builtin_cpu_supports("avx512f"))
		return scan_head_avx512(a);
	if (a->N % 8 == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return scan_head_avx2(a);
#endif
	return scan_head_generic(a);
}

static int scan_args_ok(const ss_scan_dims *d, const float *x, ptrdiff_t ldx, const float *B,
			ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt,
			ptrdiff_t lddt, const float *A_log, const float *ssm, const float *y,
			ptrdiff_t ldy)
{
	return d && d->nheads > 0 && d->headdim > 0 && d->d_state > 0 && d->ngroups > 0 &&
	       d->nheads % d->ngroups == 0 && x && B && dt && A_log && ssm && (!y || C) &&
	       ldx >= (ptrdiff_t)d->nheads * d->headdim && ldb >= (ptrdiff_t)d->ngroups * d->d_state &&
	       lddt >= d->nheads && (!y || ldy >= (ptrdiff_t)d->nheads * d->headdim) &&
	       (!y || ldc >= (ptrdiff_t)d->ngroups * d->d_state);
}

/* The scan of nseq sequences; seq_start NULL = one row each. */
static int scan_batch(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
		      const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
		      const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		      const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
		      float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay)
{
	const size_t hs = (size_t)d->headdim * d->d_state;
	int s, h, hpg;

	if (nseq < 0)
		return SS_ERR_INVALID;
	if (nseq == 0)
		return 0;
	if (!scan_args_ok(d, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, ssm, y, ldy))
		return SS_ERR_INVALID;
	hpg = d->nheads / d->ngroups;
	for (s = 0; s < nseq; s++) {
		const int64_t r0 = seq_start ? seq_start[s] : s;
		const int64_t n = seq_start ? seq_start[s + 1] - r0 : 1;
		if (n < 0)
			return SS_ERR_INVALID;
		if (n == 0)
			continue;
		for (h = 0; h < d->nheads; h++) {
			const int g = h / hpg;
			ss_scan_head_args a = {
				.n = n, .P = d->headdim, .N = d->d_state,
				.x = x + r0 * ldx + (ptrdiff_t)h * d->headdim, .ldx = ldx,
				.B = B + r0 * ldb + (ptrdiff_t)g * d->d_state, .ldb = ldb,
				.C = y ? C + r0 * ldc + (ptrdiff_t)g * d->d_state : NULL, .ldc = ldc,
				.dt = dt + r0 * lddt + h, .lddt = lddt,
				.A = -expf(A_log[h]), .D = D ? D[h] : 0.0f,
				.s = ssm + s * ld_ssm + (size_t)h * hs,
				.y = y ? y + r0 * ldy + (ptrdiff_t)h * d->headdim : NULL, .ldy = ldy,
			};
			const double dtsum = ss_scan_head(&a);
			if (logdecay) {
				float *ld = logdecay + s * ld_logdecay + h;
				*ld = (float)((double)*ld - exp((double)A_log[h]) * dtsum);
			}
		}
	}
	return 0;
}

int ss_ssm_scan_cpu(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
		    const float *x, ptrdiff_t ldx, const float *B, ptrdiff_t ldb,
		    const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		    const float *A_log, const float *D, float *ssm, ptrdiff_t ld_ssm,
		    float *y, ptrdiff_t ldy, float *logdecay, ptrdiff_t ld_logdecay)
{
	if (!seq_start)
		return SS_ERR_INVALID;
	return scan_batch(d, seq_start, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm,
			  ld_ssm, y, ldy, logdecay, ld_logdecay);
}

int ss_ssm_step_cpu(const ss_scan_dims *d, int nseq, const float *x, ptrdiff_t ldx,
		    const float *B, ptrdiff_t ldb, const float *C, ptrdiff_t ldc,
		    const float *dt, ptrdiff_t lddt, const float *A_log, const float *D,
		    float *ssm, ptrdiff_t ld_ssm, float *y, ptrdiff_t ldy, float *logdecay,
		    ptrdiff_t ld_logdecay)
{
	return scan_batch(d, NULL, nseq, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm, ld_ssm,
			  y, ldy, logdecay, ld_logdecay);
}
