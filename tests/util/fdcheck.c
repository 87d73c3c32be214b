/* fdcheck.c — see fdcheck.h. */
#include <math.h>
#include <stdio.h>

#include "util/fdcheck.h"
#include "util/rng.h"

int test_fd_check(const char *what, double (*loss)(void *arg), void *arg, float *v,
		  const float *grad, size_t n, float step, uint64_t *rng)
{
	size_t at[3] = { 0 }, ncand = 0, pick[2];
	float gmax;
	int bad = 0;

	for (size_t i = 1; i < n; i++)
		if (fabsf(grad[i]) > fabsf(grad[at[0]]))
			at[0] = i;
	gmax = fabsf(grad[at[0]]);
	for (size_t i = 0; i < n; i++)
		ncand += fabsf(grad[i]) >= 0.1f * gmax;
	pick[0] = (size_t)(test_urand(rng) * ncand);
	pick[1] = (size_t)(test_urand(rng) * ncand);
	for (size_t i = 0, k = 0; i < n; i++)
		if (fabsf(grad[i]) >= 0.1f * gmax) {
			if (k == pick[0])
				at[1] = i;
			if (k == pick[1])
				at[2] = i;
			k++;
		}
	for (int k = 0; k < 3; k++) {
		const size_t i = at[k];
		const float v0 = v[i], h = step * (fabsf(v0) > 1.0f ? fabsf(v0) : 1.0f);
		double lp, lm, hp, hm, fd;
		v[i] = v0 + h;
		hp = (double)v[i] - v0;
		lp = loss(arg);
		v[i] = v0 - h;
		hm = v0 - (double)v[i];
		lm = loss(arg);
		v[i] = v0;
		fd = (lp - lm) / (hp + hm);
		if (!(fabs(grad[i] - fd) <= 2e-2 * fabs(fd) + 1e-2 * gmax)) {
			printf("  d%s[%zu]: backward %.7g, finite difference %.7g (max |grad| %.3g)\n",
			       what, i, grad[i], fd, gmax);
			bad++;
		}
	}
	return bad;
}
