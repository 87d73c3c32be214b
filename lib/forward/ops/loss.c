/*
 * loss.c — the next-token cross-entropy over the padded vocabulary on the
 * CPU, ss_cross_entropy_cpu (ss_ops.h), and its backward,
 * ss_cross_entropy_backward_cpu. No CUDA twin (training is CPU only).
 */
#include <math.h>

#include "ss.h"
#include "forward/vec.h"

/* max and Σ exp(l - max) of a row, the sum in double (vec.h: f32 exps
 * under AVX2) */
static void row_lse(const float *l, int64_t V, float *mx, double *sum)
{
	*mx = ss_vec_max(l, V);
	*sum = ss_vec_sumexp(l, *mx, V);
}

/* The arguments both ops check: V >= 1, ld >= V, n >= 0, targets < V. */
static int ce_args_ok(ptrdiff_t ld, const int32_t *targets, int64_t n, int64_t V)
{
	int64_t r;

	if (V < 1 || ld < V || n < 0)
		return 0;
	for (r = 0; r < n; r++)
		if (targets[r] >= V)
			return 0;
	return 1;
}

int ss_cross_entropy_cpu(float *nll, const float *logits, ptrdiff_t ld, const int32_t *targets,
			 int64_t n, int64_t V)
{
	int64_t r;

	if (!ce_args_ok(ld, targets, n, V))
		return SS_ERR_INVALID;
	for (r = 0; r < n; r++) {
		const float *l = logits + r * ld;
		float mx;
		double sum;
		if (targets[r] < 0) {
			nll[r] = 0.0f;
			continue;
		}
		row_lse(l, V, &mx, &sum);
		nll[r] = (float)((double)mx + log(sum) - l[targets[r]]);
	}
	return 0;
}

int ss_cross_entropy_backward_cpu(const float *dnll, const float *logits, float *dlogits,
				  ptrdiff_t ld, const int32_t *targets, int64_t n, int64_t V)
{
	int64_t r;

	if (!ce_args_ok(ld, targets, n, V))
		return SS_ERR_INVALID;
	for (r = 0; r < n; r++) {
		const float *l = logits + r * ld;
		float *dl = dlogits + r * ld;
		float mx;
		double sum;
		if (targets[r] < 0 || dnll[r] == 0.0f)
			continue;
		row_lse(l, V, &mx, &sum);
		ss_vec_add_exp(dl, l, mx, (float)(dnll[r] / sum), V);
		dl[targets[r]] -= dnll[r];
	}
	return 0;
}
