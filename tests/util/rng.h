/* rng.h — the tests' seeded generator: the library's splitmix64
 * (ss_splitmix64, lib/ss_sample.h), the one small generator of the tree,
 * so the same numbers come on every machine, reseeded per test. */
#ifndef SS_TEST_RNG_H
#define SS_TEST_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Uniform in [0, 1), the top 53 bits of ss_splitmix64(state). */
double test_urand(uint64_t *state);

/* n floats uniform in [lo, hi) (malloc'ed, at least one; NULL if out of
 * memory), advancing *state. */
float *test_frnd(uint64_t *state, size_t n, double lo, double hi);

#endif
