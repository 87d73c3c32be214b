/*
 * scan.c — the Mamba-2 selective scan on the CPU, ss_ssm_scan_cpu and
 * ss_ssm_step_cpu (ss_ops.h), one head at a time through ss_scan_head; and
 * the backward of the scan, ss_ssm_scan_backward_cpu (a reverse recurrence
 * over states recomputed chunk by chunk from checkpoints).
 * Twin: kernels/scan.cu (and kernels/ssd.cu, the chunked form; on the CPU
 * that is ops/ssd.c); the backward has none (training is CPU only).
 *
 * Per token t (tests/fixtures/golden/README.md §2; mamba_ssm modules/mamba2.py step()):
 *   s = exp(dt*A) * s + dt * outer(x, B);   y = s @ C + D * x
 * The head's state ([P][N], 32 KB for mamba2-130m) stays in L1 while the
 * loop runs over the tokens, so a prefill's scan is bound by arithmetic; a
 * decode step's (one token) by memory, its rows fetched ahead
 * (SCAN_PREFETCH). Heads run on different threads (backend_cpu.c). The
 * update and the read-out are fused into one pass over the state. An
 * AVX2+FMA kernel is chosen at run time when the CPU has it and N is a
 * multiple of 8, an AVX-512 one when N is a multiple of 16 (the build
 * targets a baseline x86-64, so this is the only path to wide vectors).
 */
#include "forward/blas.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "ss.h"
#include "forward/ops/scan.h"
#include "forward/vec.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNEL 1
#endif

/* The state's rows are fetched this many bytes ahead of the recurrence
 * (8 rows of a head at d_state 128). A decode step touches each state once:
 * a batch's states (19 MB a sequence at mamba2-130m's shape, 604 MB at
 * B = 32) stream from memory, and the hardware prefetcher alone left the
 * kernel waiting on them: 24 layers' decode scans of 32 sequences through
 * ss_ssm_scan_cpu, 1 thread, Zen 5, went from 22 to 33 GB/s (read +
 * written) with it; 1, 2 and 4 KB ahead gave 30, 31 and 33. Prefill's
 * state stays in L1 over the tokens, where these are hits. */
#define SCAN_PREFETCH 4096

static double scan_head_generic(const ss_scan_head_args *a)
{
	const int P = a->headdim, N = a->d_state;
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
				float *s = a->ssm + (size_t)p * N;
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
				float *s = a->ssm + (size_t)p * N;
				const float xdt = x[p] * dt;
				for (n = 0; n < N; n++)
					s[n] = s[n] * dA + xdt * B[n];
			}
		}
	}
	return dtsum;
}

/* One token of the scan's backward (scan_head_backward): with ds the
 * gradient of s_t on entry, adds dy⊗C to it, accumulates dC, dx, dB, and
 * returns Σ ds⊙s_{t-1} (dda), xᵀ·ds·B (ddt) and dyᵀx (dD) of this token;
 * leaves a_t·ds (the gradient of s_{t-1}). dy, C, dC are NULL when the
 * output was not used. One pass over each row of the state. */
typedef struct {
	int P, N;
	float *ds;                     /* [P][N] in/out */
	const float *st, *sp;          /* [P][N] s_t and s_{t-1} */
	const float *x, *B, *C, *dy;   /* [P], [N], [N], [P] */
	float *dx, *dB, *dC;           /* [P], [N], [N] += */
	float D, dt, dA;
	double dda, ddt, dD;           /* out */
} scan_token_grad;

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

/* The AVX2 and AVX-512 kernels (scan_head_*, token_backward_*): one text,
 * ops/scan_simd.h, over each width's names. */
#define SIMD_NAME(f) f##_avx2
#define SIMD_TARGET __attribute__((target("avx2,fma")))
#define SIMD_W 8
#define vf __m256
#define VSET1 _mm256_set1_ps
#define VZERO _mm256_setzero_ps
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VFMA _mm256_fmadd_ps
#define VMUL _mm256_mul_ps
#define VADD _mm256_add_ps
#define VHSUM hsum256
#include "forward/ops/scan_simd.h"

#define SIMD_NAME(f) f##_avx512
#define SIMD_TARGET __attribute__((target("avx512f")))
#define SIMD_W 16
#define vf __m512
#define VSET1 _mm512_set1_ps
#define VZERO _mm512_setzero_ps
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VFMA _mm512_fmadd_ps
#define VMUL _mm512_mul_ps
#define VADD _mm512_add_ps
#define VHSUM _mm512_reduce_add_ps
#include "forward/ops/scan_simd.h"
#endif

double ss_scan_head(const ss_scan_head_args *a)
{
#ifdef HAVE_X86_KERNEL
	if (a->d_state % 16 == 0 && __builtin_cpu_supports("avx512f"))
		return scan_head_avx512(a);
	if (a->d_state % 8 == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
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
				.n = n, .headdim = d->headdim, .d_state = d->d_state,
				.x = x + r0 * ldx + (ptrdiff_t)h * d->headdim, .ldx = ldx,
				.B = B + r0 * ldb + (ptrdiff_t)g * d->d_state, .ldb = ldb,
				.C = y ? C + r0 * ldc + (ptrdiff_t)g * d->d_state : NULL, .ldc = ldc,
				.dt = dt + r0 * lddt + h, .lddt = lddt,
				.A = -expf(A_log[h]), .D = D ? D[h] : 0.0f,
				.ssm = ssm + s * ld_ssm + (size_t)h * hs,
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

size_t ss_ssm_scan_backward_work(const ss_scan_dims *d, int64_t n_max)
{
	const int64_t Q = SS_SCAN_CHUNK;
	const int64_t nck = n_max > 0 ? (n_max + Q - 1) / Q : 0;
	return (size_t)(nck + Q) * (size_t)d->headdim * (size_t)d->d_state;
}

/* Where one head's gradients go and what it reads of the output's
 * gradients; pointers offset to the head (dx, ddt, dy) or its group (dB, dC),
 * strides those of the forward arrays (ss_scan_head_args). */
typedef struct {
	float *dx, *dB, *dC, *ddt;
	const float *dy; /* NULL: the output was not used */
	float dlogdecay;
	float *ds;       /* [P][N] in: d final state; out: d initial state */
	double dA, dD;   /* out: dL/dA (A = -exp(A_log)) and dL/dD */
	float *ck;       /* [nck][P][N] checkpoints: the state at each chunk's start */
	float *buf;      /* [Q][P][N] the states after each token of one chunk */
} scan_head_grad;


static void token_backward_generic(scan_token_grad *k)
{
	const int P = k->P, N = k->N;
	double dda = 0.0, ddt = 0.0, dD = 0.0;
	int p, n;

	for (p = 0; p < P; p++) {
		float *ds = k->ds + (size_t)p * N;
		const float *sr = k->st + (size_t)p * N, *spr = k->sp + (size_t)p * N;
		double dsB = 0.0;
		if (k->dy) {
			const float dy = k->dy[p];
			dD += (double)dy * k->x[p];
			k->dx[p] += k->D * dy;
			for (n = 0; n < N; n++) {
				ds[n] += dy * k->C[n];
				k->dC[n] += dy * sr[n];
			}
		}
		for (n = 0; n < N; n++) {
			dsB += (double)ds[n] * k->B[n];
			k->dB[n] += k->dt * ds[n] * k->x[p];
			dda += (double)ds[n] * spr[n];
			ds[n] *= k->dA;
		}
		k->dx[p] += (float)(k->dt * dsB);
		ddt += dsB * k->x[p];
	}
	k->dda = dda, k->ddt = ddt, k->dD = dD;
}


/* The widest kernel the CPU and N allow, as ss_scan_head chooses. */
static void token_backward(scan_token_grad *k)
{
#ifdef HAVE_X86_KERNEL
	if (k->N % 16 == 0 && __builtin_cpu_supports("avx512f")) {
		token_backward_avx512(k);
		return;
	}
	if (k->N % 8 == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		token_backward_avx2(k);
		return;
	}
#endif
	token_backward_generic(k);
}

/* s_t = a_t·s_{t-1} + dt_t·x_t⊗B_t, a_t = exp(dt_t·A);  y_t = s_t·C_t + D·x_t.
 * Backwards from the last token, with ds the gradient of s_t:
 *   ds += dy_t⊗C_t;  dC_t += dy_tᵀ·s_t;  dx_t += D·dy_t + dt_t·ds·B_t;
 *   dB_t += dt_t·dsᵀ·x_t;  ddt_t += x_tᵀ·ds·B_t + A·a_t·⟨ds, s_{t-1}⟩;
 *   dA += dt_t·a_t·⟨ds, s_{t-1}⟩;  then ds = a_t·ds (the gradient of s_{t-1}).
 * The states come from the checkpoints, one chunk of SS_SCAN_CHUNK tokens
 * recomputed at a time (the forward's own per-token update). logdecay adds
 * A·Σdt, so each ddt_t gets dlogdecay·A and dA gets dlogdecay·Σdt. */
static void scan_head_backward(const ss_scan_head_args *a, const float *s0, scan_head_grad *g)
{
	const int P = a->headdim, N = a->d_state, Q = SS_SCAN_CHUNK;
	const size_t PN = (size_t)P * N;
	const int64_t nck = (a->n + Q - 1) / Q;
	double dtsum = 0.0;
	int64_t c, t;
	int i;

	g->dA = g->dD = 0.0;
	if (a->n == 0)
		return;
	memcpy(g->ck, s0, PN * sizeof(float));
	for (c = 1; c < nck; c++) {
		ss_scan_head_args f = *a;
		f.n = Q;
		f.x += (c - 1) * Q * a->ldx;
		f.B += (c - 1) * Q * a->ldb;
		f.dt += (c - 1) * Q * a->lddt;
		f.y = NULL;
		f.ssm = g->ck + c * PN;
		memcpy(f.ssm, g->ck + (c - 1) * PN, PN * sizeof(float));
		ss_scan_head(&f);
	}
	for (c = nck - 1; c >= 0; c--) {
		const int64_t t0 = c * Q;
		const int q = a->n - t0 < Q ? (int)(a->n - t0) : Q;
		for (i = 0; i < q; i++) {
			ss_scan_head_args f = *a;
			f.n = 1;
			f.x += (t0 + i) * a->ldx;
			f.B += (t0 + i) * a->ldb;
			f.dt += (t0 + i) * a->lddt;
			f.y = NULL;
			f.ssm = g->buf + i * PN;
			memcpy(f.ssm, i ? g->buf + (i - 1) * PN : g->ck + c * PN, PN * sizeof(float));
			ss_scan_head(&f);
		}
		for (i = q - 1; i >= 0; i--) {
			const float *st = g->buf + i * PN, *sp = i ? g->buf + (i - 1) * PN : g->ck + c * PN;
			const float dt = a->dt[(t0 + i) * a->lddt], dA = expf(dt * a->A);
			scan_token_grad k = {
				.P = P, .N = N, .ds = g->ds, .st = st, .sp = sp,
				.x = a->x + (t0 + i) * a->ldx, .B = a->B + (t0 + i) * a->ldb,
				.dx = g->dx + (t0 + i) * a->ldx, .dB = g->dB + (t0 + i) * a->ldb,
				.D = a->D, .dt = dt, .dA = dA,
			};
			t = t0 + i;
			if (g->dy) {
				k.dy = g->dy + t * a->ldy;
				k.C = a->C + t * a->ldc;
				k.dC = g->dC + t * a->ldc;
			}
			token_backward(&k);
			g->dD += k.dD;
			g->ddt[t * a->lddt] += (float)(k.ddt + k.dda * a->A * dA + (double)g->dlogdecay * a->A);
			g->dA += k.dda * dt * dA;
			dtsum += dt;
		}
	}
	g->dA += (double)g->dlogdecay * dtsum;
}

int ss_ssm_scan_backward_cpu(const ss_scan_dims *d, const int64_t *seq_start, int nseq,
			     const float *x, float *dx, ptrdiff_t ldx, const float *B, float *dB,
			     ptrdiff_t ldb, const float *C, float *dC, ptrdiff_t ldc,
			     const float *dt, float *ddt, ptrdiff_t lddt, const float *A_log,
			     float *dA_log, const float *D, float *dD, const float *ssm,
			     float *dssm, ptrdiff_t ld_ssm, const float *dy, ptrdiff_t ldy,
			     const float *dlogdecay, ptrdiff_t ld_logdecay, float *work)
{
	const size_t hs = (size_t)d->headdim * d->d_state;
	int64_t n_max = 0;
	int s, h, hpg;

	if (!seq_start || nseq < 0)
		return SS_ERR_INVALID;
	if (nseq == 0)
		return 0;
	if (!scan_args_ok(d, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, ssm, dy, ldy) || !dx ||
	    !dB || !ddt || !dA_log || !dssm || !work || (dy && !dC))
		return SS_ERR_INVALID;
	for (s = 0; s < nseq; s++) {
		if (seq_start[s + 1] < seq_start[s])
			return SS_ERR_INVALID;
		if (seq_start[s + 1] - seq_start[s] > n_max)
			n_max = seq_start[s + 1] - seq_start[s];
	}
	hpg = d->nheads / d->ngroups;
	for (s = 0; s < nseq; s++) {
		const int64_t r0 = seq_start[s], n = seq_start[s + 1] - r0;
		for (h = 0; h < d->nheads; h++) {
			const int g = h / hpg;
			const ptrdiff_t xo = r0 * ldx + (ptrdiff_t)h * d->headdim;
			const ptrdiff_t bo = r0 * ldb + (ptrdiff_t)g * d->d_state;
			const ptrdiff_t co = r0 * ldc + (ptrdiff_t)g * d->d_state;
			const ss_scan_head_args a = {
				.n = n, .headdim = d->headdim, .d_state = d->d_state,
				.x = x + xo, .ldx = ldx, .B = B + bo, .ldb = ldb,
				.C = dy ? C + co : NULL, .ldc = ldc,
				.dt = dt + r0 * lddt + h, .lddt = lddt,
				.A = -expf(A_log[h]), .D = D ? D[h] : 0.0f,
				.ldy = ldy,
			};
			scan_head_grad gr = {
				.dx = dx + xo, .dB = dB + bo, .dC = dy ? dC + co : NULL,
				.ddt = ddt + r0 * lddt + h,
				.dy = dy ? dy + r0 * ldy + (ptrdiff_t)h * d->headdim : NULL,
				.dlogdecay = dlogdecay ? dlogdecay[s * ld_logdecay + h] : 0.0f,
				.ds = dssm + s * ld_ssm + (size_t)h * hs,
				.ck = work,
				.buf = work + ss_ssm_scan_backward_work(d, n) - (size_t)SS_SCAN_CHUNK * hs,
			};
			scan_head_backward(&a, ssm + s * ld_ssm + (size_t)h * hs, &gr);
			dA_log[h] += (float)(gr.dA * a.A);
			if (dD)
				dD[h] += (float)gr.dD;
		}
	}
	return 0;
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
