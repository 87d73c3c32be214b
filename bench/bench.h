/*
 * bench.h — the few helpers every benchmark here shares: a monotonic clock
 * and the min / median of a set of rounds (the machine may be shared, so
 * benchmarks report both over interleaved rounds).
 */
#ifndef SS_BENCH_H
#define SS_BENCH_H

#include <stdlib.h>
#include <time.h>
#include <stdio.h>

#include "ss.h"

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of v[n] (n ≥ 1); sorts v in place. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Smallest of v[n] (n ≥ 1). */
static inline double bench_min(const double *v, int n)
{
	double m = v[0];
	int i;
	for (i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

/* Largest of v[n] (n ≥ 1): the best round of a rate. */
static inline double bench_max(const double *v, int n)
{
	double m = v[0];
	int i;
	for (i = 1; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

/* Sets the BLAS's threads (0: its default) and prints which BLAS runs,
 * with which kernels and threads. */
static inline void bench_blas_threads(int threads)
{
	if (threads) {
		ss_blas_threads(threads);
		printf("BLAS: %s (%s), %d threads\n", ss_blas_name(), ss_blas_kernels(), threads);
	} else {
		printf("BLAS: %s (%s), its default threads\n", ss_blas_name(), ss_blas_kernels());
	}
}

#endif /* SS_BENCH_H */
