/* test_sample.c — lib/sample/sample.c: PRNG, argmax, logsumexp/NLL, sampling filters
 * (temperature, top-k, top-p, min-p, repeat penalty), seeds, stop strings. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	ss_sample_params g = { .temperature = 0, .top_k = 0, .top_p = 1 };
	assert_int_equal(ss_sampler_init(&s, 5, &g, 1), 0);
	assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);

	/* top-k 1 and a tiny top-p are greedy at any temperature. */
	ss_sample_params k1 = { .temperature = 5.0f, .top_k = 1, .top_p = 1 };
	ss_sample_params p0 = { .temperature = 5.0f, .top_k = 0, .top_p = 1e-9f };
	assert_int_equal(ss_sampler_init(&s, 5, &k1, 7), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);
	assert_int_equal(ss_sampler_init(&s, 5, &p0, 7), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(ss_sampler_sample(s, x), 1);
	ss_sampler_free(s);

	/* top-k 2 only ever picks ids 1 and 3, both of them. */
	ss_sample_params k2 = { .temperature = 1.0f, .top_k = 2, .top_p = 1 };
	int seen[5] = { 0 };
	assert_int_equal(ss_sampler_init(&s, 5, &k2, 3), 0);
	for (int i = 0; i < 2000; i++)
		seen[ss_sampler_sample(s, x)]++;
	ss_sampler_free(s);
	assert_int_equal(seen[0] + seen[2] + seen[4], 0);
	assert_true(seen[1] > 0 && seen[3] > 0);

	/* Invalid parameters. */
	ss_sample_params bad = { .temperature = 1.0f, .top_k = 0, .top_p = 0 };
	assert_int_equal(ss_sampler_init(&s, 5, &bad, 1), SS_ERR_INVALID);
	assert_int_equal(ss_sampler_init(&s, 0, &g, 1), SS_ERR_INVALID);
}

/* Counts into cnt[n] the ids of N draws from x[n] under p, seeded. */
static void draw(const ss_sample_params *p, const float *x, int32_t n, uint64_t seed, int N,
		 int *cnt)
{
	ss_sampler *s;
	assert_int_equal(ss_sampler_init(&s, n, p, seed), 0);
	for (int i = 0; i < n; i++)
		cnt[i] = 0;
	for (int i = 0; i < N; i++)
		cnt[ss_sampler_sample(s, x)]++;
	ss_sampler_free(s);
}

/* Temperature 1 sampling follows softmax: frequencies within 4 sigma. */
static void test_distribution(void **st)
{
	(void)st;
	float x[] = { 0.0f, 1.0f, 2.0f, -INFINITY, NAN };
	double p[3], z = 1 + exp(1.0) + exp(2.0);
	for (int i = 0; i < 3; i++)
		p[i] = exp((double)i) / z;
	ss_sample_params t1 = { .temperature = 1.0f, .top_k = 0, .top_p = 1 };
	const int N = 200000;
	int cnt[5];
	draw(&t1, x, 5, 99, N, cnt);
	assert_int_equal(cnt[3] + cnt[4], 0);
	for (int i = 0; i < 3; i++) {
		double sd = sqrt(N * p[i] * (1 - p[i]));
		assert_true(fabs(cnt[i] - N * p[i]) < 4 * sd);
	}
	/* top-p 0.7: p = {.090, .245, .665}: the nucleus is {2, 1}. */
	ss_sample_params tp = { .temperature = 1.0f, .top_k = 0, .top_p = 0.7f };
	int c2[5];
	draw(&tp, x, 5, 5, 20000, c2);
	assert_int_equal(c2[0], 0);
	assert_true(c2[1] > 0 && c2[2] > c2[1]);
}

/* min-p keeps exactly the ids with p >= min_p * p_max (after temperature). */
static void test_min_p(void **st)
{
	(void)st;
	/* p ∝ {1, 1, e^-1, e^-2}: min_p 1 keeps the two tied maxima only (>=,
	 * not >); at T = 2 the ratios are {1, 1, .607, .368}: min_p 0.5 keeps
	 * ids 0..2, never 3. */
	float x[] = { 2.0f, 2.0f, 1.0f, 0.0f };
	ss_sample_params p1 = { .temperature = 1, .top_p = 1, .min_p = 1 };
	int c[4];
	draw(&p1, x, 4, 11, 4000, c);
	assert_int_equal(c[2] + c[3], 0);
	assert_true(c[0] > 1700 && c[1] > 1700);

	ss_sample_params p2 = { .temperature = 2, .top_p = 1, .min_p = 0.5f };
	int d[4];
	draw(&p2, x, 4, 12, 6000, d);
	assert_int_equal(d[3], 0);
	/* Kept mass renormalised: id 2 has .607 / 2.607 of it. */
	assert_true(fabs(d[2] / 6000.0 - 0.6065 / 2.6065) < 0.03);
	/* Just below the ratio of id 3 (e^-1 = .3679 at T = 2) keeps it. */
	ss_sample_params p3 = { .temperature = 2, .top_p = 1, .min_p = 0.36f };
	draw(&p3, x, 4, 13, 6000, d);
	assert_true(d[3] > 0);

	ss_sample_params bad = { .temperature = 1, .top_p = 1, .min_p = 1.5f };
	ss_sampler *s;
	assert_int_equal(ss_sampler_init(&s, 4, &bad, 1), SS_ERR_INVALID);
}

/* Repeat penalty (llama.cpp): positive logits divided, others multiplied,
 * once per id in the last repeat_last_n accepted ids. */
static void test_repeat_penalty(void **st)
{
	(void)st;
	ss_sampler *s;
	float x[] = { 3.0f, -2.0f, 0.0f, 2.5f, 1.0f };
	ss_sample_params p = { .temperature = 0, .top_p = 1, .repeat_penalty = 2,
			       .repeat_last_n = 3 };
	assert_int_equal(ss_sampler_init(&s, 5, &p, 1), 0);
	assert_true(ss_sampler_penalize(s, x) == x); /* nothing accepted yet */
	assert_int_equal(ss_sampler_sample(s, x), 0);
	/* 0 twice (penalised once), 1, and 7 outside [0, 5). */
	ss_sampler_accept(s, 0);
	ss_sampler_accept(s, 0);
	ss_sampler_accept(s, 1);
	const float *y = ss_sampler_penalize(s, x);
	const float want[] = { 1.5f, -4.0f, 0.0f, 2.5f, 1.0f };
	for (int i = 0; i < 5; i++)
		assert_true(y[i] == want[i]);
	assert_int_equal(ss_sampler_sample(s, x), 3); /* greedy sees the penalty */
	/* The window holds 3: accepting 7 and 2 pushes both 0s out. */
	ss_sampler_accept(s, 7);
	ss_sampler_accept(s, 2);
	y = ss_sampler_penalize(s, x);
	const float want2[] = { 3.0f, -4.0f, 0.0f, 2.5f, 1.0f };
	for (int i = 0; i < 5; i++)
		assert_true(y[i] == want2[i]);
	assert_int_equal(ss_sampler_sample(s, x), 0);
	/* reset forgets the history. */
	ss_sampler_accept(s, 0);
	ss_sampler_reset(s, 1);
	assert_true(ss_sampler_penalize(s, x)[0] == 3.0f);
	ss_sampler_free(s);

	/* repeat_last_n -1: the whole sequence; penalty 1 or window 0: off. */
	ss_sample_params all = { .temperature = 0, .top_p = 1, .repeat_penalty = 4,
				 .repeat_last_n = -1 };
	assert_int_equal(ss_sampler_init(&s, 5, &all, 1), 0);
	ss_sampler_accept(s, 3);
	for (int i = 0; i < 1000; i++)
		ss_sampler_accept(s, 4);
	y = ss_sampler_penalize(s, x);
	assert_true(y[3] == 2.5f / 4 && y[4] == 0.25f && y[0] == 3.0f);
	ss_sampler_free(s);
	ss_sample_params off1 = { .temperature = 0, .top_p = 1, .repeat_penalty = 1,
				  .repeat_last_n = 64 };
	ss_sample_params off0 = { .temperature = 0, .top_p = 1, .repeat_penalty = 3,
				  .repeat_last_n = 0 };
	assert_int_equal(ss_sampler_init(&s, 5, &off1, 1), 0);
	ss_sampler_accept(s, 0);
	assert_true(ss_sampler_penalize(s, x) == x);
	ss_sampler_free(s);
	assert_int_equal(ss_sampler_init(&s, 5, &off0, 1), 0);
	ss_sampler_accept(s, 0);
	assert_true(ss_sampler_penalize(s, x) == x);
	ss_sampler_free(s);
	ss_sample_params bad = { .temperature = 0, .top_p = 1, .repeat_penalty = -1 };
	assert_int_equal(ss_sampler_init(&s, 5, &bad, 1), SS_ERR_INVALID);
	bad.repeat_penalty = 1.1f;
	bad.repeat_last_n = -2;
	assert_int_equal(ss_sampler_init(&s, 5, &bad, 1), SS_ERR_INVALID);
}

/* Temperature 0 is the argmax whatever the other filters and the seed. */
static void test_temperature_zero(void **st)
{
	(void)st;
	ss_rng r;
	ss_rng_seed(&r, 5);
	float x[257];
	for (int t = 0; t < 50; t++) {
		for (int i = 0; i < 257; i++)
			x[i] = (float)(ss_rng_uniform(&r) * 20 - 10);
		ss_sample_params g = { .temperature = 0, .top_k = 3, .top_p = 0.5f, .min_p = 0.9f };
		ss_sampler *s;
		assert_int_equal(ss_sampler_init(&s, 257, &g, (uint64_t)t), 0);
		assert_int_equal(ss_sampler_sample(s, x), ss_argmax(x, 257));
		ss_sampler_free(s);
	}
}

/* A seed fixes the draws; reset(seed) replays them; another seed differs. */
static void test_seed(void **st)
{
	(void)st;
	float x[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i % 7) * 0.3f;
	ss_sample_params p = { .temperature = 1, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f };
	ss_sampler *a, *b, *c;
	assert_int_equal(ss_sampler_init(&a, 64, &p, 42), 0);
	assert_int_equal(ss_sampler_init(&b, 64, &p, 42), 0);
	assert_int_equal(ss_sampler_init(&c, 64, &p, 43), 0);
	int32_t first[100];
	int differ = 0;
	for (int i = 0; i < 100; i++) {
		first[i] = ss_sampler_sample(a, x);
		assert_int_equal(first[i], ss_sampler_sample(b, x));
		differ += first[i] != ss_sampler_sample(c, x);
	}
	assert_true(differ > 50);
	ss_sampler_reset(a, 42);
	for (int i = 0; i < 100; i++)
		assert_int_equal(ss_sampler_sample(a, x), first[i]);
	ss_sampler_free(a);
	ss_sampler_free(b);
	ss_sampler_free(c);
}

/* Reference for test_top_p_reference: ss_sampler_sample with temperature
 * T and top_p P (no penalty, top-k or min-p) on n finite logits, by a sort
 * of all of them. The total is summed in id order, the nucleus best first. */
static int cmp_desc(const void *a, const void *b, void *ctx)
{
	const float *x = ctx;
	const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	return x[i] > x[j] || (x[i] == x[j] && i < j) ? -1 : x[j] > x[i] || (x[i] == x[j] && j < i) ? 1 : 0;
}

static int32_t top_p_ref(const float *x, int32_t n, float T, float P, ss_rng *rng, int32_t *idx,
			 int32_t *keep)
{
	float mx = x[0];
	double total = 0, cum = 0;
	for (int32_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int32_t i = 0; i < n; i++) {
		total += exp(((double)x[i] - mx) * (1.0 / T));
		idx[i] = i;
	}
	qsort_r(idx, (size_t)n, sizeof *idx, cmp_desc, (void *)x);
	int32_t k = 0;
	while (k < n) {
		cum += exp(((double)x[idx[k++]] - mx) * (1.0 / T));
		if (cum >= P * total)
			break;
	}
	*keep = k;
	double u = ss_rng_uniform(rng) * cum, acc = 0;
	for (int32_t i = 0; i < k; i++) {
		acc += exp(((double)x[idx[i]] - mx) * (1.0 / T));
		if (u < acc)
			return idx[i];
	}
	return idx[k - 1];
}

/* top-p sorts only the prefix it needs (sample.c's select_best and
 * NUCLEUS_STEP): the same draws as a sort of every id, with nuclei of 1 id
 * to all 5,000 (each step of the prefix's growth), tied logits among them. */
static void test_top_p_reference(void **st)
{
	(void)st;
	enum { N = 5000 };
	static float x[N];
	static int32_t idx[N];
	static const float Ts[] = { 0.02f, 0.3f, 1.0f, 8.0f }, Ps[] = { 0.1f, 0.9f, 0.999f };
	ss_rng r, ref;
	int sizes[5] = { 0 }; /* nuclei of <= 64, 256, 1024, 4096, more ids */
	ss_rng_seed(&r, 11);
	for (int t = 0; t < 40; t++) {
		for (int32_t i = 0; i < N; i++) /* quantised: ties */
			x[i] = (float)floor(ss_rng_uniform(&r) * 400) * 0.05f - 10.0f;
		for (size_t a = 0; a < sizeof Ts / sizeof *Ts; a++)
			for (size_t b = 0; b < sizeof Ps / sizeof *Ps; b++) {
				ss_sample_params p = { .temperature = Ts[a], .top_p = Ps[b] };
				ss_sampler *s;
				int32_t keep = 0;
				assert_int_equal(ss_sampler_init(&s, N, &p, (uint64_t)t), 0);
				ss_rng_seed(&ref, (uint64_t)t);
				for (int d = 0; d < 3; d++)
					assert_int_equal(ss_sampler_sample(s, x),
							 top_p_ref(x, N, Ts[a], Ps[b], &ref, idx, &keep));
				sizes[keep <= 64 ? 0 : keep <= 256 ? 1 : keep <= 1024 ? 2 : keep <= 4096 ? 3 : 4]++;
				ss_sampler_free(s);
			}
	}
	for (int i = 0; i < 5; i++)
		assert_true(sizes[i] > 0);
}

/* Feeds text in pieces as tokens would come, returns what would be output
 * and whether a stop string ended it. */
static int feed(const char *const *pieces, const char *const *stops, size_t n_stops, char *out)
{
	char text[256] = "";
	size_t len = 0, emitted = 0;
	int stopped = 0;
	out[0] = 0;
	for (size_t i = 0; pieces[i] && !stopped; i++) {
		size_t from = len, safe;
		len += (size_t)snprintf(text + len, sizeof text - len, "%s", pieces[i]);
		int64_t cut = ss_stop_find(text, len, from, stops, n_stops, &safe);
		stopped = cut >= 0;
		assert_true(safe >= emitted); /* never takes back what was output */
		strncat(out, text + emitted, safe - emitted);
		emitted = safe;
	}
	if (!stopped)
		strcat(out, text + emitted);
	return stopped;
}

static void test_stop_strings(void **st)
{
	(void)st;
	char out[256];
	const char *stops[] = { "\n\n", "END" };
	/* Across token boundaries: "E" "N" "D", "\n" "\n". */
	const char *p1[] = { "a b", " E", "N", "D", "zzz", NULL };
	assert_true(feed(p1, stops, 2, out));
	assert_string_equal(out, "a b ");
	const char *p2[] = { "x\n", "\ny", NULL };
	assert_true(feed(p2, stops, 2, out));
	assert_string_equal(out, "x");
	/* Inside one token, with bytes after it: cut at the stop string. */
	const char *p3[] = { "ab", "cENDde", NULL };
	assert_true(feed(p3, stops, 2, out));
	assert_string_equal(out, "abc");
	/* A prefix that does not complete is output whole in the end. */
	const char *p4[] = { "E", "N", "d", "\n", NULL };
	assert_false(feed(p4, stops, 2, out));
	assert_string_equal(out, "ENd\n");
	/* Held back while it may still become a stop string. */
	size_t safe;
	assert_int_equal(ss_stop_find("abEN", 4, 2, stops, 2, &safe), -1);
	assert_int_equal(safe, 2);
	/* The earliest of several stop strings wins. */
	const char *p5[] = { "1END\n\n", NULL };
	assert_true(feed(p5, stops, 2, out));
	assert_string_equal(out, "1");
	/* Occurrences ending at or before `from` were seen before. */
	assert_int_equal(ss_stop_find("ENDxx", 5, 3, stops, 2, NULL), -1);
	assert_int_equal(ss_stop_find("xENDx", 5, 3, stops, 2, NULL), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rng_deterministic),
		cmocka_unit_test(test_argmax),
		cmocka_unit_test(test_logsumexp_nll),
		cmocka_unit_test(test_greedy_and_filters),
		cmocka_unit_test(test_distribution),
		cmocka_unit_test(test_min_p),
		cmocka_unit_test(test_repeat_penalty),
		cmocka_unit_test(test_temperature_zero),
		cmocka_unit_test(test_seed),
		cmocka_unit_test(test_top_p_reference),
		cmocka_unit_test(test_stop_strings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
