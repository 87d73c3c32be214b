/* rng.c — see rng.h. */
#include <stdlib.h>

#include "util/rng.h"

double test_urand(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(*state >> 11) * 0x1.0p-53;
}

float *test_frnd(uint64_t *state, size_t n, double lo, double hi)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	if (p)
		for (size_t i = 0; i < n; i++)
			p[i] = (float)(lo + (hi - lo) * test_urand(state));
	return p;
}
