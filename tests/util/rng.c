/* rng.c — see rng.h. */
#include "util/rng.h"

double test_urand(uint64_t *state)
{
	*state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(*state >> 11) * 0x1.0p-53;
}
