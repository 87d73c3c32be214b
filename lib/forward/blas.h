/*
 * blas.h — the BLAS chosen at build time (config.mk BLAS=openblas|blis):
 * the CBLAS declarations, and the two calls in which the libraries differ.
 * OpenBLAS comes through pkg-config; BLIS is Debian's libblis-dev (blis.h
 * declares its CBLAS layer), built with -DSS_BLAS_BLIS.
 * Internal to libss: not part of its interface (ss.h), never installed.
 */
#ifndef SS_BLAS_H
#define SS_BLAS_H

#ifdef SS_BLAS_BLIS
#include <blis.h>
typedef f77_int blasint;
#define SS_BLAS_NAME "BLIS"
/* The forward pass splits work over its own pool: one BLAS thread each. */
static inline void blas_serial(void) { bli_thread_set_num_threads(1); }
static inline void blas_set_threads(int n) { bli_thread_set_num_threads(n); }
/* The kernel family the library picked for this CPU ("skx", "haswell"...). */
static inline const char *blas_kernels(void) { return bli_arch_string(bli_arch_query_id()); }
/* BLIS starts no thread before a call: nothing to stop. */
static inline void blas_idle(void) {}
#else
#include <cblas.h>
#define SS_BLAS_NAME "OpenBLAS"
static inline void blas_serial(void) { openblas_set_num_threads(1); }
static inline void blas_set_threads(int n) { openblas_set_num_threads(n); }
/* As set by $OPENBLAS_CORETYPE or detected ("Haswell", "SkylakeX"...). */
static inline const char *blas_kernels(void) { return openblas_get_corename(); }
/* OpenBLAS (its pthread build) starts its thread pool when it is loaded,
 * and each thread spins on sched_yield for about 2^28 cycles (0.1 s)
 * waiting for work: a short process that makes no threaded BLAS call
 * gives them a core for nothing. This stops them (OpenBLAS starts them
 * again at its next threaded call; blas_serial's forward makes none).
 * Weak: the serial build of OpenBLAS has no pool and no such function.
 * ref: OpenBLAS driver/others/blas_server.c blas_thread_shutdown_. */
int blas_thread_shutdown_(void) __attribute__((weak));
static inline void blas_idle(void)
{
	if (blas_thread_shutdown_)
		blas_thread_shutdown_();
}
#endif

#endif /* SS_BLAS_H */
