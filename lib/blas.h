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
static inline void ss_blas_serial(void) { bli_thread_set_num_threads(1); }
static inline void ss_blas_set_threads(int n) { bli_thread_set_num_threads(n); }
/* The kernel family the library picked for this CPU ("skx", "haswell"...). */
static inline const char *ss_blas_kernels(void) { return bli_arch_string(bli_arch_query_id()); }
#else
#include <cblas.h>
#define SS_BLAS_NAME "OpenBLAS"
static inline void ss_blas_serial(void) { openblas_set_num_threads(1); }
static inline void ss_blas_set_threads(int n) { openblas_set_num_threads(n); }
/* As set by $OPENBLAS_CORETYPE or detected ("Haswell", "SkylakeX"...). */
static inline const char *ss_blas_kernels(void) { return openblas_get_corename(); }
#endif

#endif /* SS_BLAS_H */
