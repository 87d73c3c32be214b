/* argmax.cuh — CUDA twin of ss_argmax_rows_cpu (ss_ops.h): ids[r] = the
 * first index of the largest logit of row r over [0, n), NaN never wins, -1
 * for an all-NaN row. logits: [nrows][n], row stride ld; device pointers. */
#pragma once
#include "common.cuh"

extern "C" void ss_argmax_rows_cuda(int32_t *ids, const float *logits, ptrdiff_t ld,
				    int64_t nrows, int64_t n, cudaStream_t st);
