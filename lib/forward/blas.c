/* blas.c — the BLAS as the public interface shows it (ss_forward.h): the
 * internal helpers of blas.h, made callable from tools and benchmarks. */
#include "ss.h"
#include "forward/blas.h"

void ss_blas_threads(int n) { blas_set_threads(n < 1 ? 1 : n); }
void ss_blas_release(void) { blas_idle(); }
const char *ss_blas_name(void) { return SS_BLAS_NAME; }
const char *ss_blas_kernels(void) { return blas_kernels(); }
