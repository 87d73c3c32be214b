/*
 * bench.h — the few helpers every benchmark here shares: a monotonic clock,
 * the min / median of a set of rounds (the machine may be shared, so
 * benchmarks report both over interleaved rounds), a whole file in memory
 * (bench_read_file) and a child process's output, time and peak RSS
 * (bench_capture).
 */
#ifndef SS_BENCH_H
#define SS_BENCH_H

#include <stdlib.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

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

/* Reads the file at path (a pipe too) whole into a malloc'ed buffer with a
 * NUL after its *len bytes: a corpus or a data set. Returns NULL when it
 * cannot be opened or read, or memory runs out. */
static inline char *bench_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 20, n = 0;
	char *b = malloc(cap);
	while (b && (n += fread(b + n, 1, cap - n - 1, f)) == cap - 1) {
		char *nb = realloc(b, cap *= 2);
		if (!nb)
			free(b);
		b = nb;
	}
	if (b && ferror(f)) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b) {
		b[n] = 0;
		*len = n;
	}
	return b;
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

/* Runs argv (argv[0] a path, or a name looked up in PATH) with its standard
 * output read into *out (malloc'ed, NUL-terminated; out NULL: discarded)
 * and its standard error sent to /dev/null unless show_err: a peer, or
 * the tools as a user runs them. Returns its exit status (-1: not run, or
 * killed by a signal), with *wall its seconds and *rss_mb its peak RSS in
 * MB, the largest of it and of the processes it waited for (wall and
 * rss_mb may be NULL). */
static inline int bench_capture(char *const argv[], char **out, int show_err, double *wall, double *rss_mb)
{
	int fd[2], status;
	struct rusage ru;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	fflush(stdout);
	if (pipe(fd))
		return -1;
	const double t0 = bench_now();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		if (!show_err && !freopen("/dev/null", "w", stderr))
			_exit(127);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fd[1]);
	for (;;) {
		if (n + 4097 > cap) {
			char *nb = realloc(buf, cap = 2 * cap + 8192);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t k = read(fd[0], buf + n, cap - n - 1);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	close(fd[0]);
	if (wait4(pid, &status, 0, &ru) != pid) {
		free(buf);
		return -1;
	}
	if (wall)
		*wall = bench_now() - t0;
	if (rss_mb)
		*rss_mb = (double)ru.ru_maxrss / 1024.0;
	if (buf)
		buf[n] = '\0';
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif /* SS_BENCH_H */
