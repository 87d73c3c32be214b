/*
 * argmax.c — greedy sampling row by row on the CPU, ss_argmax_rows_cpu
 * (ss_ops.h). Twin: kernels/argmax.cu.
 */
#include "ss.h"

void ss_argmax_rows_cpu(int32_t *ids, const float *logits, ptrdiff_t ld, int64_t nrows,
			int64_t n)
{
	int64_t r;
	for (r = 0; r < nrows; r++)
		ids[r] = ss_argmax(logits + r * ld, n);
}
