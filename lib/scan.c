/*
 * scan.c — the Mamba-2 selective scan on the CPU, one head at a time.
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
#include "scan.h"
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

int ss_ssm_scan_cpu(const ss_scan_dims *d, int64_t n,
		    const float *x, ptrdiff_t ldx,
		    const float *B, ptrdiff_t ldb,
		    const float *C, ptrdiff_t ldc,
		    const float *dt, ptrdiff_t lddt,
		    const float *A, const float *D,
		    float *ssm, float *y, ptrdiff_t ldy, float *logdecay)
{
	int h, hpg;

	if (!d || n < 0 || d->nheads <= 0 || d->headdim <= 0 || d->d_state <= 0 ||
	    d->ngroups <= 0 || d->nheads % d->ngroups != 0 || !ssm || !A)
		return SS_ERR_INVALID;
	if (n == 0)
		return 0;
	if (!x || !B || !dt || (y && !C) ||
	    ldx < (ptrdiff_t)d->nheads * d->headdim || ldb < (ptrdiff_t)d->ngroups * d->d_state ||
	    lddt < d->nheads || (y && ldy < (ptrdiff_t)d->nheads * d->headdim) ||
	    (y && ldc < (ptrdiff_t)d->ngroups * d->d_state))
		return SS_ERR_INVALID;
	hpg = d->nheads / d->ngroups;
	for (h = 0; h < d->nheads; h++) {
		const int g = h / hpg;
		ss_scan_head_args a = {
			.n = n, .P = d->headdim, .N = d->d_state,
			.x = x + (ptrdiff_t)h * d->headdim, .ldx = ldx,
			.B = B + (ptrdiff_t)g * d->d_state, .ldb = ldb,
			.C = y ? C + (ptrdiff_t)g * d->d_state : NULL, .ldc = ldc,
			.dt = dt + h, .lddt = lddt,
			.A = A[h], .D = D ? D[h] : 0.0f,
			.s = ssm + (size_t)h * d->headdim * d->d_state,
			.y = y ? y + (ptrdiff_t)h * d->headdim : NULL, .ldy = ldy,
		};
		double dtsum = ss_scan_head(&a);
		if (logdecay)
			logdecay[h] = (float)((double)logdecay[h] + (double)A[h] * dtsum);
	}
	return 0;
}

size_t ss_scan_chunked_work(int nh, int P)
{
	const size_t Q = SS_SCAN_CHUNK;
	return 2 * Q * Q + Q * (size_t)nh * (size_t)P + 4 * Q;
}

/* Per chunk of q rows, with dA_i = exp(dt_i·A) and L_ij = dA_{j+1}···dA_i
 * (j <= i, the decay from token j to token i; L_ii = 1), e_i = dA_0···dA_i,
 * S the states at the chunk's start:
 *   y_i = e_i·(C_i·S) + Σ_{j<=i} (C_i·B_j)·L_ij·dt_j·x_j + D·x_i
 *   S' = e_{q-1}·S + Σ_j L_{q-1,j}·dt_j·x_jᵀB_j
 * C·S for all nh heads is one product (the states are [nh·P][N]), and so
 * is the state update (the weighted x of all heads side by side). */
void ss_scan_chunked(const ss_scan_chunked_args *a)
{
	const int Q = SS_SCAN_CHUNK, P = a->P, N = a->N, nh = a->nh, HP = nh * P;
	float *G = a->work, *M = G + Q * Q, *Xw = M + Q * Q, *Ld = Xw + (size_t)Q * HP;
	float *e = Ld + Q, *dA = e + Q, *dt = dA + Q;
	int64_t t0;
	int k, i, j;

	for (k = 0; k < nh; k++)
		a->dtsum[k] = 0.0;
	for (t0 = 0; t0 < a->n; t0 += Q) {
		const int q = a->n - t0 < Q ? (int)(a->n - t0) : Q;
		const float *x = a->x + t0 * a->ldx, *B = a->B + t0 * a->ldb;
		float *y = a->y ? a->y + t0 * a->ldy : NULL;

		if (y) {
			const float *C = a->C + t0 * a->ldc;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, q, N, 1.0f, C,
				    (blasint)a->ldc, B, (blasint)a->ldb, 0.0f, G, Q);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, HP, N, 1.0f, C,
				    (blasint)a->ldc, a->s, N, 0.0f, y, (blasint)a->ldy);
		}
		for (k = 0; k < nh; k++) {
			const float *xk = x + k * P;
			float run = 1.0f;

			for (i = 0; i < q; i++) {
				dt[i] = a->dt[(t0 + i) * a->lddt + k];
				a->dtsum[k] += dt[i];
				dA[i] = expf(dt[i] * a->A[k]);
				e[i] = run *= dA[i];
			}
			/* row i of Ld: L_ij·dt_j, j <= i */
			for (i = 0; i < q; i++) {
				ss_vec_scale(Ld, Ld, dA[i], i);
				Ld[i] = dt[i];
				if (y) {
					ss_vec_scale_mul(M + i * Q, G + i * Q, 1.0f, Ld, i + 1);
					memset(M + i * Q + i + 1, 0, (size_t)(q - i - 1) * sizeof(float));
				}
			}
			if (y) {
				float *yk = y + k * P;
				for (i = 0; i < q; i++)
					ss_vec_axpby(yk + i * a->ldy, e[i], xk + i * a->ldx,
						     a->D ? a->D[k] : 0.0f, P);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q, P, q, 1.0f, M, Q, xk,
					    (blasint)a->ldx, 1.0f, yk, (blasint)a->ldy);
			}
			/* Ld is now row q-1: the weights to the chunk's end */
			for (j = 0; j < q; j++)
				ss_vec_scale(Xw + (size_t)j * HP + k * P, xk + j * a->ldx, Ld[j], P);
			ss_vec_scale(a->s + (size_t)k * P * N, a->s + (size_t)k * P * N, e[q - 1],
				     (int64_t)P * N);
		}
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, HP, N, q, 1.0f, Xw, HP, B,
			    (blasint)a->ldb, 1.0f, a->s, N);
	}
}
