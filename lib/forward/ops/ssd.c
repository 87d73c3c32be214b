/*
 * ssd.c — the chunked (SSD) form of the selective scan on the CPU,
 * ss_scan_chunked (ops/scan.h): the prefill path of the forward pass for
 * long sequences. Twin: kernels/ssd.cu (ss_ssd_scan_cuda).
 *
 * The chunk's products run through this file's own kernel, ssd_gemm: one
 * FMA chain per output over k in order, so AVX-512, AVX2 and C (fmaf) give
 * the same bits, whatever the heads per call; $SS_GEMM=avx2 or c holds it
 * to those paths as it does the projections (ops/linear_f32.h). They ran
 * through sgemm: with OpenBLAS's Haswell kernels, 18 % of perf's samples
 * of an ss-encode of 512-token documents at the 130m shape on an AVX-512
 * host; this kernel 8 % and the transposes it needs 2 % (issue 50).
 */
#include <math.h>
#include <string.h>

#include "ss.h"
#include "forward/ops/linear_f32.h" /* ss_gemm_isa */
#include "forward/ops/scan.h"
#include "forward/ops/transpose_simd.h"
#include "forward/vec.h"

/* Rows of y per tile of ssd_gemm (every path: a causal product's chains
 * stop at its tile's last row, so the tiles must be the same for the bits
 * to be). */
#define TILE_M 6

/* One tile of R rows (R <= TILE_M), K terms, one column at a time: the
 * portable path, and the reference of the others' order. */
static void tile_c(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm, ptrdiff_t sxk,
		   const float *Wt, ptrdiff_t ldw, int64_t N, int64_t K, int beta, int R)
{
	for (int r = 0; r < R; r++)
		for (int64_t n = 0; n < N; n++) {
			float s = beta ? y[r * ldy + n] : 0.0f;
			for (int64_t k = 0; k < K; k++)
				s = fmaf(x[r * sxm + k * sxk], Wt[k * ldw + n], s);
			y[r * ldy + n] = s;
		}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")

/* R rows x V vectors of 16 columns (the last one's lanes as mask says). */
AVX512 static INLINE void tile512(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm,
				  ptrdiff_t sxk, const float *Wt, ptrdiff_t ldw, int64_t K, int beta,
				  __mmask16 last, const int R, const int V)
{
	__m512 acc[TILE_M][4];
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int v = 0; v < V; v++)
			acc[r][v] = beta ? _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xFFFF,
								 y + r * ldy + 16 * v)
					 : _mm512_setzero_ps();
	for (int64_t k = 0; k < K; k++) {
		__m512 w[4];
		UNROLL for (int v = 0; v < V; v++)
			w[v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xFFFF, Wt + k * ldw + 16 * v);
		UNROLL for (int r = 0; r < R; r++) {
			const __m512 b = _mm512_set1_ps(x[r * sxm + k * sxk]);
			UNROLL for (int v = 0; v < V; v++)
				acc[r][v] = _mm512_fmadd_ps(b, w[v], acc[r][v]);
		}
	}
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int v = 0; v < V; v++)
			_mm512_mask_storeu_ps(y + r * ldy + 16 * v, v == V - 1 ? last : 0xFFFF, acc[r][v]);
}

/* R rows x V vectors of 8 columns (the last one's lanes as mask says). */
AVX2 static INLINE void tile256(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm,
				ptrdiff_t sxk, const float *Wt, ptrdiff_t ldw, int64_t K, int beta,
				__m256i last, const int R, const int V)
{
	const __m256i all = _mm256_set1_epi32(-1);
	__m256 acc[TILE_M][2];
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int v = 0; v < V; v++)
			acc[r][v] = beta ? _mm256_maskload_ps(y + r * ldy + 8 * v, v == V - 1 ? last : all)
					 : _mm256_setzero_ps();
	for (int64_t k = 0; k < K; k++) {
		__m256 w[2];
		UNROLL for (int v = 0; v < V; v++)
			w[v] = _mm256_maskload_ps(Wt + k * ldw + 8 * v, v == V - 1 ? last : all);
		UNROLL for (int r = 0; r < R; r++) {
			const __m256 b = _mm256_broadcast_ss(x + r * sxm + k * sxk);
			UNROLL for (int v = 0; v < V; v++)
				acc[r][v] = _mm256_fmadd_ps(b, w[v], acc[r][v]);
		}
	}
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int v = 0; v < V; v++)
			_mm256_maskstore_ps(y + r * ldy + 8 * v, v == V - 1 ? last : all, acc[r][v]);
}

/* The instances by rows (1 .. TILE_M) and vectors (1 .. 4 or 2) of a tile. */
#define CASES(call, V)                                                                   \
	case 1 * 8 + V: call(1, V); break;                                               \
	case 2 * 8 + V: call(2, V); break;                                               \
	case 3 * 8 + V: call(3, V); break;                                               \
	case 4 * 8 + V: call(4, V); break;                                               \
	case 5 * 8 + V: call(5, V); break;                                               \
	case 6 * 8 + V: call(6, V); break;

/* One tile of R rows by nv <= 64 columns. */
AVX512 static void tile512_any(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm,
			       ptrdiff_t sxk, const float *Wt, ptrdiff_t ldw, int64_t K, int beta,
			       int R, int nv)
{
	const int V = (nv + 15) / 16;
	const __mmask16 last = (__mmask16)(0xFFFFu >> (16 * V - nv));
#define T512(r, v) tile512(y, ldy, x, sxm, sxk, Wt, ldw, K, beta, last, r, v)
	switch (R * 8 + V) {
		CASES(T512, 1) CASES(T512, 2) CASES(T512, 3) CASES(T512, 4)
	}
#undef T512
}

/* One tile of R rows by nv <= 16 columns. */
AVX2 static void tile256_any(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm,
			     ptrdiff_t sxk, const float *Wt, ptrdiff_t ldw, int64_t K, int beta,
			     int R, int nv)
{
	const int V = (nv + 7) / 8;
	const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - 8 * (V - 1)),
						_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#define T256(r, v) tile256(y, ldy, x, sxm, sxk, Wt, ldw, K, beta, last, r, v)
	switch (R * 8 + V) {
		CASES(T256, 1) CASES(T256, 2)
	}
#undef T256
}
#undef CASES
#endif

/* y[m][n] = (beta ? y[m][n] : 0) + Σ_k x[m·sxm + k·sxk]·Wt[k·ldw + n],
 * m < M, n < N, k < K: x's elements broadcast (any strides: a row, a
 * column), Wt's rows loaded in vectors, rows of y in tiles of TILE_M.
 * causal: x[m][k] = 0 for k > m, and a tile's chains stop after its last
 * row's k. Each output is one FMA chain over k ascending from y or 0, on
 * every path: the same bits from AVX-512, AVX2 and C. */
static void ssd_gemm(float *y, ptrdiff_t ldy, const float *x, ptrdiff_t sxm, ptrdiff_t sxk,
		     const float *Wt, ptrdiff_t ldw, int64_t M, int64_t N, int64_t K, int beta,
		     int causal)
{
	void (*tile)(float *, ptrdiff_t, const float *, ptrdiff_t, ptrdiff_t, const float *,
		     ptrdiff_t, int64_t, int, int, int) = NULL;
	int64_t nb = N; /* columns per tile */
#ifdef HAVE_X86_KERNELS
	const int isa = ss_gemm_isa();
	if (isa == 2)
		tile = tile512_any, nb = 64;
	else if (isa == 1)
		tile = tile256_any, nb = 16;
#endif
	for (int64_t n0 = 0; n0 < N; n0 += nb) {
		const int64_t nv = N - n0 < nb ? N - n0 : nb;
		for (int64_t m0 = 0; m0 < M; m0 += TILE_M) {
			const int R = M - m0 < TILE_M ? (int)(M - m0) : TILE_M;
			const int64_t Kt = causal && m0 + R < K ? m0 + R : K;
			float *yt = y + m0 * ldy + n0;
			const float *xt = x + m0 * sxm;
			if (tile)
				tile(yt, ldy, xt, sxm, sxk, Wt + n0, ldw, Kt, beta, R, (int)nv);
			else
				tile_c(yt, ldy, xt, sxm, sxk, Wt + n0, ldw, nv, Kt, beta, R);
		}
	}
}

/* dst[c][r] = src[r][c] for r in [r0, r1), c in [c0, c1) (row strides
 * ldd, lds), by tiles of 16 x 16 so that both sides go a cache line at a
 * time. */
static void transpose_c(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int64_t r0,
			int64_t r1, int64_t c0, int64_t c1)
{
	for (int64_t rt = r0; rt < r1; rt += 16)
		for (int64_t ct = c0; ct < c1; ct += 16) {
			const int64_t re = rt + 16 < r1 ? rt + 16 : r1, ce = ct + 16 < c1 ? ct + 16 : c1;
			for (int64_t c = ct; c < ce; c++)
				for (int64_t r = rt; r < re; r++)
					dst[c * ldd + r] = src[r * lds + c];
		}
}

#ifdef HAVE_X86_KERNELS
/* The 16 x 16 blocks of r < R, c < C (multiples of 16) transposed in registers. */
AVX512 static void transpose_tiles512(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds,
				      int64_t R, int64_t C)
{
	__m512 r[16], c[16];
	for (int64_t r0 = 0; r0 < R; r0 += 16)
		for (int64_t c0 = 0; c0 < C; c0 += 16) {
			UNROLL for (int i = 0; i < 16; i++)
				r[i] = _mm512_loadu_ps(src + (r0 + i) * lds + c0);
			ss_transpose16(c, r);
			UNROLL for (int j = 0; j < 16; j++)
				_mm512_storeu_ps(dst + (c0 + j) * ldd + r0, c[j]);
		}
}
#endif

/* dst[c][r] = src[r][c], r < R, c < C (row strides ldd, lds): the whole
 * blocks of 16 in registers where ssd_gemm takes AVX-512, the rest element
 * by element (the final state, 128 x 1,536 a layer at the 130m shape: 1.5
 * -> 0.8 % of perf's samples of an ss-encode of 300 short documents). */
static void transpose(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int64_t R,
		      int64_t C)
{
	int64_t R0 = 0, C0 = 0; /* the part done in registers */
#ifdef HAVE_X86_KERNELS
	if (ss_gemm_isa() == 2) {
		R0 = R / 16 * 16, C0 = C / 16 * 16;
		transpose_tiles512(dst, ldd, src, lds, R0, C0);
	}
#endif
	transpose_c(dst, ldd, src, lds, 0, R0, C0, C);
	transpose_c(dst, ldd, src, lds, R0, R, 0, C);
}

size_t ss_scan_chunked_work(int nheads, int headdim, int d_state)
{
	const size_t Q = SS_SCAN_CHUNK, HP = (size_t)nheads * (size_t)headdim, N = (size_t)d_state;
	return 2 * Q * Q + Q * HP + N * HP + N * Q + 4 * Q;
}

/* Per chunk of q rows, with dA_i = exp(dt_i·A) and L_ij = dA_{j+1}···dA_i
 * (j <= i, the decay from token j to token i; L_ii = 1), e_i = dA_0···dA_i,
 * S the states at the chunk's start:
 *   y_i = e_i·(C_i·S) + Σ_{j<=i} (C_i·B_j)·L_ij·dt_j·x_j + D·x_i
 *   S' = e_{q-1}·S + Σ_j L_{q-1,j}·dt_j·x_jᵀB_j
 * The states are held transposed, St [N][nh·P], through the call, so that
 * C·S for all nh heads is one product (St's rows loaded in vectors), and
 * so is the state update (B's columns broadcast against the weighted x of
 * all heads side by side). */
void ss_scan_chunked(const ss_scan_chunked_args *a)
{
	const int Q = SS_SCAN_CHUNK, P = a->headdim, N = a->d_state, nh = a->nheads, HP = nh * P;
	float *G = a->work, *M = G + Q * Q, *Xw = M + Q * Q, *St = Xw + (size_t)Q * HP;
	float *Bt = St + (size_t)N * HP, *Ld = Bt + (size_t)N * Q;
	float *e = Ld + Q, *dA = e + Q, *dt = dA + Q;
	int64_t t0;
	int k, i, j, n;

	for (k = 0; k < nh; k++)
		a->dtsum[k] = 0.0;
	if (!a->fresh) /* fresh: the first chunk's update writes St whole */
		transpose(St, HP, a->ssm, N, HP, N);
	for (t0 = 0; t0 < a->n; t0 += Q) {
		const int q = a->n - t0 < Q ? (int)(a->n - t0) : Q;
		/* S = 0: C·S is +0 (each chain's fmaf(c, 0, +0) is +0 for finite
		 * c), as the memset of y gives; e·S is not needed, and the update's
		 * chains start from +0 (beta 0), as from S's zeros */
		const int zero = a->fresh && t0 == 0;
		const float *x = a->x + t0 * a->ldx, *B = a->B + t0 * a->ldb;
		float *y = a->y ? a->y + t0 * a->ldy : NULL;

		if (y) {
			const float *C = a->C + t0 * a->ldc;
			transpose(Bt, Q, B, a->ldb, q, N);
			ssd_gemm(G, Q, C, a->ldc, 1, Bt, Q, q, q, N, 0, 0);
			if (zero)
				for (i = 0; i < q; i++)
					memset(y + (size_t)i * a->ldy, 0, (size_t)HP * sizeof(float));
			else
				ssd_gemm(y, a->ldy, C, a->ldc, 1, St, HP, q, HP, N, 0, 0);
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
				ssd_gemm(yk, a->ldy, M, Q, 1, xk, a->ldx, q, P, q, 1, 1);
			}
			/* Ld is now row q-1: the weights to the chunk's end */
			for (j = 0; j < q; j++)
				ss_vec_scale(Xw + (size_t)j * HP + k * P, xk + j * a->ldx, Ld[j], P);
			for (n = 0; !zero && n < N; n++)
				ss_vec_scale(St + (size_t)n * HP + k * P, St + (size_t)n * HP + k * P,
					     e[q - 1], P);
		}
		ssd_gemm(St, HP, B, 1, a->ldb, Xw, HP, N, HP, q, !zero, 0);
	}
	transpose(a->ssm, N, St, HP, N, HP);
}
