/* rng.c — see rng.h. */
#include <stdlib.h>

#include "ss.h"
#include "util/rng.h"

double test_urand(uint64_t *state)
{
	return (double)(ss_splitmix64(state) >> 11) * 0x1.0p-53;
}

float *test_frnd(uint64_t *state, size_t n, double lo, double hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	if (p)
		for (size_t i = 0; i < n; i++)
			p[i] = (float)(lo + (hi - lo) * test_urand(state));
	return p;
}
