/* rng.h — the tests' seeded generator (a 64-bit LCG, high bits): the
 * same numbers on every machine, reseeded per test. */
#ifndef SS_TEST_RNG_H
#define SS_TEST_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Uniform in [0, 1), 53 bits, advancing *state. */
double test_urand(uint64_t *state);

/* n floats uniform in [lo, hi) (malloc'ed, at least one; NULL if out of
 * memory), advancing *state. */
float *test_frnd(uint64_t *state, size_t n, double lo, double hi);

#endif
