/* test_sample.c — lib/sample.c: PRNG, argmax, logsumexp/NLL, sampling filters. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ss.h"
#include "ss_sample.h"

static void test_rng_deterministic(void **st)
{
	(void)st;
	ss_rng a, b, c;
	ss_rng_seed(&a, 42);
	ss_rng_seed(&b, 42);
	ss_rng_seed(&c, 43);
	int differ = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t x = ss_rng_next(&a), y = ss_rng_next(&b), z = ss_rng_next(&c);
		assert_true(x == y);
		differ += x != z;
	}
	assert_true(differ > 90);
	/* Seed 0 is valid and uniform draws stay in [0, 1) with mean ~1/2. */
	ss_rng_seed(&a, 0);
	double sum = 0;
	for (int i = 0; i < 100000; i++) {
		double u = ss_rng_uniform(&a);
		assert_true(u >= 0 && u < 1);
		sum += u;
	}
	assert_true(fabs(sum / 100000 - 0.5) < 0.01);
}

static void test_argmax(void **st)
{
	(void)st;
	float x[] = { 1, 3, NAN, 3, -INFINITY };
	assert_int_equal(ss_argmax(x, 5), 1); /* first of ties, NaN skipped */
	float n[] = { NAN, NAN };
	assert_int_equal(ss_argmax(n, 2), -1);
	assert_int_equal(ss_argmax(x, 0), -1);
}

static void test_logsumexp_nll(void **st)
{
	(void)st;
	/* Large logits: naive exp overflows in f32 and f64. */
	float x[] = { 1000, 1000 };
	assert_true(fabs(ss_logsumexp(x, 2) - (1000 + log(2.0))) < 1e-9);
	float y[] = { -1000, -1000, -1000, -1000 };
	assert_true(fabs(ss_logsumexp(y, 4) - (-1000 + log(4.0))) < 1e-9);
	float u[1000];
	for (int i = 0; i < 1000; i++)
		u[i] = 0.25f;
	/* Uniform logits: NLL = log n whatever the target. */
	assert_true(fabs(ss_nll(u, 1000, 17) - log(1000.0)) < 1e-9);
	float z[] = { 0, -INFINITY };
	assert_true(ss_nll(z, 2, 0) == 0);
	assert_true(isinf(ss_nll(z, 2, 1)));
	assert_true(isnan(ss_nll(z, 2, 2)));
	assert_true(isnan(ss_nll(z, 2, -1)));
	assert_true(ss_logsumexp(z, 0) == -INFINITY);
}

static void test_greedy_and_filters(void **st)
{
	(void)st;
	float x[] = { 0.5f, 2.0f, 1.0f, 1.9f, -1.0f };
	ss_sampler *s;
	ss_sample_params g = { 0, 0, 1 };
	assert_int_equal(ss_sampler_init(&s, 5, &g, 1), 0);
	assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);

	/* top-k 1 and a tiny top-p are greedy at any temperature. */
	ss_sample_params k1 = { 5.0f, 1, 1 }, p0 = { 5.0f, 0, 1e-9f };
	assert_int_equal(ss_sampler_init(&s, 5, &k1, 7), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);
	assert_int_equal(ss_sampler_init(&s, 5, &p0, 7), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);

	/* top-k 2 only ever picks ids 1 and 3, both of them. */
	ss_sample_params k2 = { 1.0f, 2, 1 };
	int seen[5] = { 0 };
	assert_int_equal(ss_sampler_init(&s, 5, &k2, 3), 0);
	for (int i = 0; i < 2000; i++)
		seen[ss_sampler_sample(s, x)]++;
	ss_sampler_free(s);
	assert_int_equal(seen[0] + seen[2] + seen[4], 0);
	assert_true(seen[1] > 0 && seen[3] > 0);

	/* Invalid parameters. */
	ss_sample_params bad = { 1.0f, 0, 0 };
	assert_int_equal(ss_sampler_init(&s, 5, &bad, 1), SS_ERR_INVALID);
	assert_int_equal(ss_sampler_init(&s, 0, &g, 1), SS_ERR_INVALID);
}

/* Temperature 1 sampling follows softmax: frequencies within 4 sigma. */
static void test_distribution(void **st)
{
	(void)st;
	float x[] = { 0.0f, 1.0f, 2.0f, -INFINITY, NAN };
	double p[3], z = 1 + exp(1.0) + exp(2.0);
	for (int i = 0; i < 3; i++)
		p[i] = exp((double)i) / z;
	ss_sample_params t1 = { 1.0f, 0, 1 };
	ss_sampler *s;
	assert_int_equal(ss_sampler_init(&s, 5, &t1, 99), 0);
	const int N = 200000;
	int cnt[5] = { 0 };
	for (int i = 0; i < N; i++)
		cnt[ss_sampler_sample(s, x)]++;
	ss_sampler_free(s);
	assert_int_equal(cnt[3] + cnt[4], 0);
	for (int i = 0; i < 3; i++) {
		double sd = sqrt(N * p[i] * (1 - p[i]));
		assert_true(fabs(cnt[i] - N * p[i]) < 4 * sd);
	}
	/* top-p 0.7: p = {.090, .245, .665}: the nucleus is {2, 1}. */
	ss_sample_params tp = { 1.0f, 0, 0.7f };
	assert_int_equal(ss_sampler_init(&s, 5, &tp, 5), 0);
	int c2[5] = { 0 };
	for (int i = 0; i < 20000; i++)
		c2[ss_sampler_sample(s, x)]++;
	ss_sampler_free(s);
	assert_int_equal(c2[0], 0);
	assert_true(c2[1] > 0 && c2[2] > c2[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rng_deterministic),
		cmocka_unit_test(test_argmax),
		cmocka_unit_test(test_logsumexp_nll),
		cmocka_unit_test(test_greedy_and_filters),
		cmocka_unit_test(test_distribution),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
