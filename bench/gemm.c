/*
 * bench/gemm.c — prefill's projection kernels against the core's measured
 * FMA peak (issue 50 §3), one thread, at mamba2-130m's prefill shapes:
 * in_proj (512 rows x 3352 x 768) and out_proj (512 x 768 x 1536), called
 * as the CPU backend calls them in a prefill (ROW_BLOCK x COL_BLOCK = 256 x
 * 256 blocks, lib/forward/backend_cpu.c):
 *   f32   ss_linear_rows_cpu, f32 W (prefill's default, SS_GEMM=own);
 *   bf16  ss_linear_rows_cpu, bf16 W widened in registers;
 *   bf16w bf16 W widened to f32 by panels (256 rows, ss_to_f32) then ss_linear_rows_cpu;
 *   q8_0w q8_0 W widened to f32 by panels then ss_linear_rows_cpu (what
 *         prefill ran before ss_linear_q8_0_cpu);
 *   q8_0  ss_linear_q8_0_cpu: x quantized per row, int8 products (VNNI);
 *   sgemm the BLAS on the same f32 blocks (the old floor).
 * The peak: 12 independent FMA chains on 16 (AVX-512) or 8 (AVX2, also
 * where $SS_GEMM holds our kernels to AVX2 or C) lanes.
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that a
 * machine shared with other jobs costs less precision than wall time
 * would; rounds interleave the kernels; best and median printed, with the
 * load average. Figures only, no pass/fail. GFLOP/s counts 2·M·N·K for
 * every dtype (q8_0's int8 products included).
 *
 * usage: gemm [-r ROUNDS]
 */
#ifdef SS_BLAS_BLIS
#include <blis.h>
#else
#include <cblas.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ss.h"
#include "bench.h"

#define MAX_ROUNDS 64
#define BLK 256

static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* name(n): GFLOP/s of 12 independent chains of n FMAs each on vectors of
 * L floats (V, with its set1, fmadd and storeu), this thread's CPU time. */
#define PEAK_FN(name, attr, V, L, set1, fmadd, storeu)                          \
	attr static double name(long n)                                         \
	{                                                                       \
		V a[12], b = set1(0.999999f), c = set1(1e-7f);                  \
		float s = 0, v[L];                                              \
		for (int i = 0; i < 12; i++)                                    \
			a[i] = set1((float)i);                                  \
		const double t0 = cpu_now();                                    \
		for (long k = 0; k < n; k++)                                    \
			_Pragma("GCC unroll 12") for (int i = 0; i < 12; i++)   \
				a[i] = fmadd(a[i], b, c);                       \
		const double t = cpu_now() - t0;                                \
		for (int i = 0; i < 12; i++) { /* the chains are used */        \
			storeu(v, a[i]);                                        \
			s += v[0];                                              \
		}                                                               \
		if (s == 12345.f)                                               \
			printf("%g\n", s);                                      \
		return 2.0 * L * 12 * (double)n / t * 1e-9;                     \
	}
PEAK_FN(peak512, __attribute__((target("avx512f"))), __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps,
	_mm512_storeu_ps)
PEAK_FN(peak256, __attribute__((target("avx2,fma"))), __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps,
	_mm256_storeu_ps)

static double fma_peak(const char **isa)
{
	const char *g = getenv("SS_GEMM"); /* avx2 or c: our kernels held below AVX-512 */
	if (__builtin_cpu_supports("avx512f") && !(g && (!strcmp(g, "avx2") || !strcmp(g, "c")))) {
		*isa = "AVX-512";
		return peak512(5000000);
	}
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		*isa = "AVX2";
		return peak256(5000000);
	}
	*isa = "none";
	return 0;
}
#else
static double fma_peak(const char **isa)
{
	*isa = "none";
	return 0;
}
#endif

enum { K_F32, K_BF16, K_BF16W, K_Q8W, K_Q8, K_SGEMM, NK };
static const char *const kname[NK] = { "f32", "bf16", "bf16w", "q8_0w", "q8_0", "sgemm" };

typedef struct {
	int64_t M, N, K;
	float *x, *y, *wf, *panel;
	void *wb, *wq;
} shape;

/* One product of the shape by kernel k in BLK x BLK blocks; seconds of
 * this thread's CPU. */
static double run(const shape *s, int k)
{
	const size_t qrow = ss_dtype_row_size(SS_DTYPE_Q8_0, (size_t)s->K);
	const double t0 = cpu_now();
	for (int64_t m0 = 0; m0 < s->M; m0 += BLK)
		for (int64_t n0 = 0; n0 < s->N; n0 += BLK) {
			const int64_t mr = s->M - m0 < BLK ? s->M - m0 : BLK, nr = s->N - n0 < BLK ? s->N - n0 : BLK;
			float *y = s->y + m0 * s->N + n0;
			const float *x = s->x + m0 * s->K;
			switch (k) {
			case K_F32:
				ss_linear_rows_cpu(y, s->N, x, s->K, s->wf + n0 * s->K, SS_DTYPE_F32, mr, nr, s->K, 0.0f);
				break;
			case K_BF16:
				ss_linear_rows_cpu(y, s->N, x, s->K, (const uint16_t *)s->wb + n0 * s->K, SS_DTYPE_BF16,
						   mr, nr, s->K, 0.0f);
				break;
			case K_BF16W:
				ss_to_f32(s->panel, (const uint16_t *)s->wb + n0 * s->K, SS_DTYPE_BF16,
						(size_t)(nr * s->K));
				ss_linear_rows_cpu(y, s->N, x, s->K, s->panel, SS_DTYPE_F32, mr, nr, s->K, 0.0f);
				break;
			case K_Q8W:
				ss_to_f32(s->panel, (const char *)s->wq + n0 * qrow, SS_DTYPE_Q8_0,
						(size_t)(nr * s->K));
				ss_linear_rows_cpu(y, s->N, x, s->K, s->panel, SS_DTYPE_F32, mr, nr, s->K, 0.0f);
				break;
			case K_Q8:
				ss_linear_q8_0_cpu(y, s->N, x, s->K, (const char *)s->wq + n0 * qrow, mr, nr, s->K, 0.0f);
				break;
			default:
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mr, (int)nr, (int)s->K, 1.0f, x,
					    (int)s->K, s->wf + n0 * s->K, (int)s->K, 0.0f, y, (int)s->N);
			}
		}
	return cpu_now() - t0;
}

static int shape_init(shape *s, int64_t M, int64_t N, int64_t K)
{
	uint64_t r = 0x9e3779b97f4a7c15ull;
	s->M = M, s->N = N, s->K = K;
	s->x = malloc((size_t)(M * K) * sizeof(float));
	s->y = malloc((size_t)(M * N) * sizeof(float));
	s->wf = malloc((size_t)(N * K) * sizeof(float));
	s->panel = malloc((size_t)(BLK * K) * sizeof(float));
	s->wb = malloc((size_t)(N * K) * 2);
	s->wq = malloc(ss_dtype_row_size(SS_DTYPE_Q8_0, (size_t)K) * (size_t)N);
	if (!s->x || !s->y || !s->wf || !s->panel || !s->wb || !s->wq)
		return -1;
	for (int64_t i = 0; i < M * K; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		s->x[i] = (float)((double)(r >> 40) / (1 << 24) - 0.5);
	}
	for (int64_t i = 0; i < N * K; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		s->wf[i] = (float)(((double)(r >> 40) / (1 << 24) - 0.5) * 0.1);
	}
	ss_from_f32(s->wb, SS_DTYPE_BF16, s->wf, (size_t)(N * K));
	ss_from_f32(s->wq, SS_DTYPE_Q8_0, s->wf, (size_t)(N * K));
	return 0;
}

static void shape_free(shape *s)
{
	free(s->x), free(s->y), free(s->wf), free(s->panel), free(s->wb), free(s->wq);
}

int main(int argc, char **argv)
{
	int rounds = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-r") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gemm [-r ROUNDS]\n");
			return 0;
		} else {
			fprintf(stderr, "gemm: unknown argument %s\nusage: gemm [-r ROUNDS]\n", argv[i]);
			return 2;
		}
	}
	if (rounds < 1 || rounds > MAX_ROUNDS)
		rounds = 5;
#ifndef SS_BLAS_BLIS
	openblas_set_num_threads(1);
#endif
	double la[3] = { 0 };
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	const char *isa = "none";
	double peak[MAX_ROUNDS];
	static const struct {
		const char *name;
		int64_t M, N, K;
	} shapes[] = { { "in_proj", 512, 3352, 768 }, { "out_proj", 512, 768, 1536 } };
	printf("gemm: 1 thread, thread CPU time, %d rounds interleaved, load average %.2f at start\n", rounds,
	       la[0]);
	for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
		shape s;
		double g[NK][MAX_ROUNDS];
		if (shape_init(&s, shapes[si].M, shapes[si].N, shapes[si].K)) {
			fprintf(stderr, "gemm: out of memory\n");
			return 1;
		}
		const double flop = 2.0 * (double)(s.M * s.N * s.K);
		for (int k = 0; k < NK; k++) /* warm-up */
			run(&s, k);
		for (int r = 0; r < rounds; r++) {
			if (si == 0)
				peak[r] = fma_peak(&isa);
			for (int k = 0; k < NK; k++)
				g[k][r] = flop / run(&s, k) * 1e-9;
		}
		if (si == 0) {
			double pk[MAX_ROUNDS];
			memcpy(pk, peak, sizeof pk);
			printf("FMA peak (%s, 12 chains): %.1f GFLOP/s best (median %.1f)\n", isa,
			       bench_max(peak, rounds), bench_median(pk, rounds));
		}
		const double pbest = bench_max(peak, rounds);
		printf("%s %lldx%lldx%lld, %dx%d calls:\n", shapes[si].name, (long long)s.M, (long long)s.N,
		       (long long)s.K, BLK, BLK);
		for (int k = 0; k < NK; k++) {
			const double best = bench_max(g[k], rounds), med = bench_median(g[k], rounds);
			printf("  %-6s %7.1f GFLOP/s best (median %7.1f) = %3.0f%% of the FMA peak\n", kname[k], best,
			       med, pbest > 0 ? 100 * best / pbest : 0);
		}
		shape_free(&s);
	}
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	printf("load average %.2f at end\n", la[0]);
	return 0;
}
