/* sample.c — logits → token (repeat penalty, greedy, temperature, top-k,
 * top-p, min-p), stop strings, seeded PRNG, logsumexp/NLL. See ss_sample.h for the contracts. */
#include "ss.h"
#include "ss_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ PRNG */

uint64_t ss_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

void ss_rng_seed(ss_rng *r, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++)
		r->s[i] = ss_splitmix64(&x);
	/* splitmix64 is a bijection of a counter: four outputs are never all 0. */
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t ss_rng_next(ss_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

double ss_rng_uniform(ss_rng *r)
{
	return (double)(ss_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ------------------------------------------------------- log-likelihoods */

int32_t ss_argmax(const float *x, int64_t n)
{
	int32_t best = -1;
	for (int64_t i = 0; i < n; i++)
		if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
			best = (int32_t)i;
	return best;
}

double ss_logsumexp(const float *x, int64_t n)
{
	if (n <= 0)
		return -INFINITY;
	double m = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		if (x[i] > m)
			m = x[i];
	if (isinf(m))
		return m; /* +inf dominates; all -inf gives -inf */
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += exp((double)x[i] - m);
	return m + log(sum);
}

double ss_nll(const float *logits, int64_t n, int32_t target)
{
	if (target < 0 || target >= n)
		return NAN;
	return ss_logsumexp(logits, n) - (double)logits[target];
}

/* --------------------------------------------------------------- sampling */

struct ss_sampler {
	int32_t n;
	ss_sample_params p;
	ss_rng rng;
	int32_t *idx;   /* [n] candidate ids */
	double *w;      /* [n] unnormalised probabilities of idx[] */
	/* repeat penalty (NULL when off) */
	float *pen;     /* [n] penalised logits */
	int32_t *count; /* [n] occurrences of each id in the window */
	int32_t *ring;  /* [repeat_last_n] the window, oldest at ring_pos when full */
	int64_t ring_len, ring_pos, n_counted;
};

static int penalty_on(const ss_sample_params *p)
{
	return p->repeat_penalty != 0 && p->repeat_penalty != 1 && p->repeat_last_n != 0;
}

int ss_sampler_init(ss_sampler **out, int32_t n, const ss_sample_params *p, uint64_t seed)
{
	*out = NULL;
	if (n <= 0 || !p || isnan(p->temperature) || !(p->top_p > 0) ||
	    !(p->min_p >= 0 && p->min_p <= 1) || !(p->repeat_penalty >= 0) ||
	    p->repeat_last_n < -1)
		return SS_ERR_INVALID;
	ss_sampler *s = calloc(1, sizeof *s);
	if (!s)
		return SS_ERR_NOMEM;
	s->n = n;
	s->p = *p;
	s->idx = malloc((size_t)n * sizeof *s->idx);
	s->w = malloc((size_t)n * sizeof *s->w);
	int bad = !s->idx || !s->w;
	if (penalty_on(p)) {
		s->pen = malloc((size_t)n * sizeof *s->pen);
		s->count = calloc((size_t)n, sizeof *s->count);
		if (p->repeat_last_n > 0)
			s->ring = malloc((size_t)p->repeat_last_n * sizeof *s->ring);
		bad |= !s->pen || !s->count || (p->repeat_last_n > 0 && !s->ring);
	}
	if (bad) {
		ss_sampler_free(s);
		return SS_ERR_NOMEM;
	}
	ss_sampler_reset(s, seed);
	*out = s;
	return 0;
}

void ss_sampler_free(ss_sampler *s)
{
	if (!s)
		return;
	free(s->idx);
	free(s->w);
	free(s->pen);
	free(s->count);
	free(s->ring);
	free(s);
}

void ss_sampler_reset(ss_sampler *s, uint64_t seed)
{
	ss_rng_seed(&s->rng, seed);
	if (s->count)
		memset(s->count, 0, (size_t)s->n * sizeof *s->count);
	s->ring_len = s->ring_pos = s->n_counted = 0;
}

static void count_add(ss_sampler *s, int32_t id, int32_t d)
{
	if (id >= 0 && id < s->n) {
		s->count[id] += d;
		s->n_counted += d;
	}
}

void ss_sampler_accept(ss_sampler *s, int32_t id)
{
	if (!s->count)
		return;
	int64_t cap = s->p.repeat_last_n;
	if (cap < 0) { /* the whole sequence: counts only, nothing leaves */
		count_add(s, id, 1);
		return;
	}
	if (s->ring_len == cap) {
		count_add(s, s->ring[s->ring_pos], -1);
		s->ring[s->ring_pos] = id;
		s->ring_pos = (s->ring_pos + 1) % cap;
	} else {
		s->ring[s->ring_len++] = id;
	}
	count_add(s, id, 1);
}

const float *ss_sampler_penalize(ss_sampler *s, const float *x)
{
	if (!s->count || s->n_counted == 0)
		return x;
	const float r = s->p.repeat_penalty;
	for (int32_t i = 0; i < s->n; i++)
		s->pen[i] = !s->count[i] ? x[i] : x[i] <= 0 ? x[i] * r : x[i] / r;
	return s->pen;
}

/* Total order "a ranks before b": higher logit, then lower id. Ties broken by
 * id make every cut and every draw independent of the sort algorithm. */
static inline int ranks_before(const float *x, int32_t a, int32_t b)
{
	return x[a] > x[b] || (x[a] == x[b] && a < b);
}

/* Min-heap on rank (root = the worst kept id), for top-k selection. */
static void heap_down(const float *x, int32_t *h, int32_t k, int32_t i)
{
	for (;;) {
		int32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < k && ranks_before(x, h[m], h[l]))
			m = l;
		if (r < k && ranks_before(x, h[m], h[r]))
			m = r;
		if (m == i)
			return;
		int32_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static int cmp_rank(const void *a, const void *b, void *ctx)
{
	const float *x = ctx;
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	return ranks_before(x, i, j) ? -1 : ranks_before(x, j, i) ? 1 : 0;
}

/* How many of the best of idx[0..k) reach want, at most, given their
 * weights w[0..k) = exp((x[idx[i]] - mx) * invt): a histogram of the
 * weights by log, NUCLEUS_BINS bins of 1/16 (e^-32 and below in the last),
 * walked best first to the bin where the sum reaches want, plus
 * NUCLEUS_SLACK for the sums' rounding (the bins add in another order than
 * the sorted prefix does). At least 1. */
#define NUCLEUS_BINS 512
#define NUCLEUS_SLACK 64
static int32_t nucleus_bound(const float *x, const int32_t *idx, const double *w, int32_t k,
			     float mx, double invt, double want)
{
	int32_t count[NUCLEUS_BINS] = { 0 }, n = 0;
	double sum[NUCLEUS_BINS] = { 0 }, cum = 0;
	for (int32_t i = 0; i < k; i++) {
		const double l = ((double)mx - x[idx[i]]) * invt * (NUCLEUS_BINS / 32.0);
		const int b = l < NUCLEUS_BINS - 1 ? (int)l : NUCLEUS_BINS - 1;
		count[b]++;
		sum[b] += w[i];
	}
	for (int b = 0; b < NUCLEUS_BINS; b++) {
		n += count[b];
		cum += sum[b];
		if (cum >= want)
			break;
	}
	return n + NUCLEUS_SLACK;
}

/* Reorders h[0..n) so that h[0..j) are its j best ids (any order), 0 < j < n:
 * quickselect on the rank, a median of three as pivot; after 2·log2(n)
 * rounds it sorts what is left (bounded time on any input). */
static void select_best(const float *x, int32_t *h, int32_t n, int32_t j)
{
	int32_t lo = 0, hi = n - 1, rounds = 0;
	for (int32_t m = n; m > 1; m >>= 1)
		rounds += 2;
	while (lo < hi) {
		if (rounds-- == 0) {
			qsort_r(h + lo, (size_t)(hi - lo + 1), sizeof *h, cmp_rank, (void *)x);
			return;
		}
		/* median of h[lo], h[mid], h[hi] to h[hi], the pivot */
		const int32_t mid = lo + (hi - lo) / 2;
		int32_t t;
#define SWAP(a, b) (t = h[a], h[a] = h[b], h[b] = t)
		if (ranks_before(x, h[mid], h[lo]))
			SWAP(mid, lo);
		if (ranks_before(x, h[hi], h[lo]))
			SWAP(hi, lo);
		if (ranks_before(x, h[mid], h[hi]))
			SWAP(mid, hi);
		/* Lomuto: the ids ranking before the pivot to the front */
		int32_t st = lo;
		for (int32_t i = lo; i < hi; i++)
			if (ranks_before(x, h[i], h[hi])) {
				SWAP(i, st);
				st++;
			}
		SWAP(st, hi);
#undef SWAP
		/* h[lo..st) rank before h[st], h[st+1..hi] after it */
		if (st == j || st + 1 == j)
			return;
		if (st > j)
			hi = st - 1;
		else
			lo = st + 1;
	}
}

int32_t ss_sampler_sample(ss_sampler *s, const float *logits)
{
	const int32_t n = s->n;
	const float *x = ss_sampler_penalize(s, logits);
	if (!(s->p.temperature > 0))
		return ss_argmax(x, n);

	float mx = -INFINITY;
	int32_t m = 0;
	for (int32_t i = 0; i < n; i++) {
		if (isnan(x[i]) || x[i] == -INFINITY)
			continue;
		if (x[i] > mx)
			mx = x[i];
		s->idx[m++] = i;
	}
	if (m == 0)
		return -1;
	if (isinf(mx)) /* +inf logits: they alone have all the mass */
		return ss_argmax(x, n);

	int32_t k = m;
	if (s->p.top_k > 0 && s->p.top_k < m) {
		k = s->p.top_k;
		/* Keep the k best in a heap over idx[0..k), scan the rest. */
		for (int32_t i = k / 2 - 1; i >= 0; i--)
			heap_down(x, s->idx, k, i);
		for (int32_t i = k; i < m; i++)
			if (ranks_before(x, s->idx[i], s->idx[0])) {
				s->idx[0] = s->idx[i];
				heap_down(x, s->idx, k, 0);
			}
	}
	const double invt = 1.0 / s->p.temperature;
	double total = 0;
	for (int32_t i = 0; i < k; i++) {
		s->w[i] = exp(((double)x[s->idx[i]] - mx) * invt);
		total += s->w[i];
	}
	if (s->p.top_p < 1) {
		/* The shortest prefix of the candidates best first whose weight
		 * (summed best first) reaches top_p of the total (summed above,
		 * in idx's order). Only that prefix is sorted (a nucleus is
		 * mostly far smaller than the vocabulary, whose qsort took 7 ms
		 * a token at 50 k ids): as many of the best as nucleus_bound
		 * says, selected from the rest, then 4x as many, ..., until it
		 * is reached. With few candidates (top_k) all are sorted: the
		 * bound, at least NUCLEUS_SLACK + 1, would be half of them. */
		const double want = s->p.top_p * total;
		double cum = 0;
		int32_t keep = 0, j1;
		for (int32_t j0 = 0; j0 < k && keep == 0; j0 = j1) {
			if (j0 > 0)
				j1 = j0 > k / 4 ? k : 4 * j0;
			else
				j1 = k <= 2 * NUCLEUS_SLACK + 2 ? k
								: nucleus_bound(x, s->idx, s->w, k, mx, invt, want);
			if (j1 >= k / 2)
				j1 = k; /* selecting would cost more than it saves */
			else
				select_best(x, s->idx + j0, k - j0, j1 - j0);
			qsort_r(s->idx + j0, (size_t)(j1 - j0), sizeof *s->idx, cmp_rank, (void *)x);
			for (int32_t i = j0; i < j1; i++) {
				s->w[i] = exp(((double)x[s->idx[i]] - mx) * invt);
				cum += s->w[i];
				if (cum >= want) {
					keep = i + 1;
					break;
				}
			}
		}
		k = keep ? keep : k; /* not reached (rounding): all of them */
		total = cum;
	}
	if (s->p.min_p > 0) {
		/* The best id has x == mx, so w = 1 is p_max's weight: keep
		 * w >= min_p, in place (order kept). */
		int32_t keep = 0;
		total = 0;
		for (int32_t i = 0; i < k; i++)
			if (s->w[i] >= s->p.min_p) {
				s->idx[keep] = s->idx[i];
				s->w[keep++] = s->w[i];
				total += s->w[i];
			}
		k = keep;
	}
	double u = ss_rng_uniform(&s->rng) * total, acc = 0;
	for (int32_t i = 0; i < k; i++) {
		acc += s->w[i];
		if (u < acc)
			return s->idx[i];
	}
	return s->idx[k - 1]; /* u rounded up to total */
}

/* ----------------------------------------------------------- stop strings */

int64_t ss_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
		     size_t n_stops, size_t *safe)
{
	int64_t cut = -1;
	size_t hold = 0; /* longest tail that begins a stop string */
	for (size_t j = 0; j < n_stops; j++) {
		size_t sl = strlen(stops[j]);
		if (sl == 0)
			continue;
		/* Matches ending after `from` start at or after from + 1 - sl. */
		size_t start = from + 1 > sl ? from + 1 - sl : 0;
		for (size_t i = start; i + sl <= len; i++)
			if (!memcmp(text + i, stops[j], sl)) {
				if (cut < 0 || (int64_t)i < cut)
					cut = (int64_t)i;
				break;
			}
		for (size_t t = sl - 1 < len ? sl - 1 : len; t > hold; t--)
			if (!memcmp(text + len - t, stops[j], t)) {
				hold = t;
				break;
			}
	}
	if (safe)
		*safe = cut >= 0 ? (size_t)cut : len - hold;
	return cut;
}
