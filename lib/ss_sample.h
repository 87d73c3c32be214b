/*
 * ss_sample.h — from logits to a token, and log-likelihoods (part of libss;
 * include "ss.h").
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Greedy (argmax), temperature, top-k and top-p (nucleus) sampling with a
 * seeded, platform-independent PRNG (xoshiro256** seeded by splitmix64, never
 * rand(): the same seed gives the same tokens everywhere), and the
 * numerically stable log-softmax pieces the NLL metric needs (logsumexp in
 * double with the maximum taken out first).
 *
 * Logits are one row of the forward pass: [n] f32, n = the number of ids
 * considered (callers pass vocab_padded to match the reference NLL, or fewer
 * to keep generation inside the tokenizer's vocabulary).
 * ref: Holtzman et al. 2019 "The Curious Case of Neural Text Degeneration"
 *      (top-p); Blackman & Vigna 2018 (xoshiro256**, splitmix64).
 */
#ifndef SS_SAMPLE_H
#define SS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ PRNG */

/* xoshiro256** state. Plain data: copy it to fork a stream. */
typedef struct {
	uint64_t s[4];
} ss_rng;

/* Seeds r from a 64-bit seed through splitmix64 (any seed, 0 included, gives
 * a valid non-zero state). */
void ss_rng_seed(ss_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t ss_rng_next(ss_rng *r);
/* Uniform double in [0, 1), 53 random bits. */
double ss_rng_uniform(ss_rng *r);

/* ------------------------------------------------------- log-likelihoods */

/* Index of the largest of x[0..n) (the first one on ties; NaN never wins).
 * Returns -1 when n <= 0 or every element is NaN. */
int32_t ss_argmax(const float *x, int64_t n);

/* log Σ_i exp(x[i]) over x[0..n), in double: max(x) + log Σ exp(x[i]-max).
 * +inf elements give +inf; n <= 0 gives -inf. */
double ss_logsumexp(const float *x, int64_t n);

/* Negative log-likelihood of `target` under softmax(logits[0..n)), in nats:
 * logsumexp(logits) - logits[target] (≥ 0). NAN when target is outside
 * [0, n). ref: golden/README.md §4 nll.f32 (the same definition). */
double ss_nll(const float *logits, int64_t n, int32_t target);

/* --------------------------------------------------------------- sampling */

/* How to pick a token. temperature <= 0 means greedy (argmax; top_k and
 * top_p are then ignored). top_k <= 0 or >= n: no top-k cut. top_p >= 1: no
 * nucleus cut; otherwise the smallest set of most probable ids whose
 * probability (after temperature and top-k) reaches top_p is kept (at least
 * one id). Filters apply in the order temperature, top-k, top-p. */
typedef struct {
	float temperature;
	int32_t top_k;
	float top_p;
} ss_sample_params;

/* Scratch for sampling over n ids: index/probability buffers of n entries,
 * allocated once (no allocation per token). */
typedef struct ss_sampler ss_sampler;

/* Creates a sampler over ids [0, n) with params p (copied) and the PRNG
 * seeded with `seed`. Returns 0 and sets *out (free with ss_sampler_free),
 * SS_ERR_INVALID (n <= 0, top_p <= 0 or NaN, temperature NaN),
 * SS_ERR_NOMEM. */
int ss_sampler_init(ss_sampler **out, int32_t n, const ss_sample_params *p, uint64_t seed);
void ss_sampler_free(ss_sampler *s);

/* Picks one id from logits [n] f32 (read only; n as given to init).
 * Greedy is deterministic and uses no randomness; otherwise exactly one
 * ss_rng_uniform() draw per call, so a seed fixes the whole sequence.
 * Returns the id in [0, n), or -1 when every logit is NaN or -inf. */
int32_t ss_sampler_sample(ss_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif /* SS_SAMPLE_H */
