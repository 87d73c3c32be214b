/*
 * ss_sample.h — from logits to a token, and log-likelihoods (part of libss;
 * include "ss.h").
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Greedy (argmax), repeat penalty, temperature, top-k, top-p (nucleus) and
 * min-p sampling and stop strings, with a seeded, platform-independent PRNG
 * (xoshiro256** seeded by splitmix64, never rand(): the same seed gives the
 * same tokens everywhere), and the
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

/* splitmix64: the next 64 bits of the generator whose whole state is *x,
 * advancing it (a counter stepped by the golden ratio, then a mixer). The
 * one small generator of the tree: ss_rng_seed, ss-train's data order and
 * k, gen/ (random models, states), bench/ and the compose tests.
 * ref: Steele, Lea, Flood 2014; Vigna's splitmix64.c. */
uint64_t ss_splitmix64(uint64_t *x);

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
 * [0, n). ref: tests/fixtures/golden/README.md §4 nll.f32 (the same definition). */
double ss_nll(const float *logits, int64_t n, int32_t target);

/* --------------------------------------------------------------- sampling */

/* How to pick a token. The stages, in this order (HF generate()'s order;
 * llama.cpp applies its temperature last, after the cuts):
 *   1. repeat penalty: for every id among the last repeat_last_n ids given
 *      to ss_sampler_accept() (prompt and generated), a positive logit is
 *      divided by repeat_penalty and a non-positive one multiplied by it,
 *      once however often the id occurs (llama.cpp penalty_repeat, HF
 *      repetition_penalty; ref: Keskar et al. 2019 "CTRL" §4.1).
 *      repeat_penalty 0 or 1: off. repeat_last_n: the window, -1 = every id
 *      accepted since the last ss_sampler_reset(), 0 = off.
 *   2. temperature <= 0: greedy, the argmax of the penalised logits (top_k,
 *      top_p and min_p are then ignored, and no randomness is used).
 *      Otherwise softmax(logits / temperature).
 *   3. top_k > 0 and < n: keep the top_k most probable ids.
 *   4. top_p < 1: keep the smallest set of most probable ids whose
 *      probability (after 2 and 3) reaches top_p (at least one id); the
 *      weights summed in double, the total in id order (top_k's heap order
 *      after 3), the set's best first. Only the set is sorted.
 *   5. min_p > 0: keep the ids with p >= min_p * p_max, p_max the probability
 *      of the most probable id (after 2; ratios do not change with 3 and 4).
 *      ref: Nguyen et al. 2024 "Min P Sampling"; llama.cpp min_p, HF min_p.
 * Ties rank by id (lower first), so every cut is independent of the sort.
 * A zero-initialised tail (min_p, repeat_penalty, repeat_last_n all 0) is
 * "off", so { T, k, p } initialisers keep their meaning. */
typedef struct {
	float temperature;
	int32_t top_k;
	float top_p;
	float min_p;
	float repeat_penalty;
	int32_t repeat_last_n;
} ss_sample_params;

/* Scratch for sampling over n ids: index/probability buffers of n entries,
 * the penalty's id counts and window, allocated once (no allocation per
 * token). */
typedef struct ss_sampler ss_sampler;

/* Creates a sampler over ids [0, n) with params p (copied) and the PRNG
 * seeded with `seed` (as ss_sampler_reset). Returns 0 and sets *out (free
 * with ss_sampler_free), SS_ERR_INVALID (n <= 0, top_p <= 0 or NaN,
 * temperature NaN, min_p outside [0, 1], repeat_penalty < 0 or NaN,
 * repeat_last_n < -1), SS_ERR_NOMEM. */
int ss_sampler_init(ss_sampler **out, int32_t n, const ss_sample_params *p, uint64_t seed);
void ss_sampler_free(ss_sampler *s);

/* Starts a new sequence: the PRNG is seeded again with `seed` and the
 * penalty window emptied, so a sequence's tokens depend only on the seed,
 * its logits and its own accepted ids, not on the sequences before it. */
void ss_sampler_reset(ss_sampler *s, uint64_t seed);

/* Appends id to the sequence the repeat penalty looks back on: every
 * prompt id, then every generated id (llama.cpp accepts both). Ids outside
 * [0, n) take a place in the window but penalise nothing. A no-op when the
 * penalty is off. */
void ss_sampler_accept(ss_sampler *s, int32_t id);

/* The logits stage 1 gives: logits [n] f32 with the repeat penalty applied,
 * in a buffer of s valid until the next call; `logits` itself when the
 * penalty is off or nothing is penalised yet. */
const float *ss_sampler_penalize(ss_sampler *s, const float *logits);

/* Picks one id from logits [n] f32 (read only; n as given to init) through
 * the stages above. Greedy is deterministic and uses no randomness;
 * otherwise exactly one ss_rng_uniform() draw per call, so a seed fixes the
 * whole sequence. The pick is not accepted: call ss_sampler_accept().
 * Returns the id in [0, n), or -1 when every logit is NaN or -inf. */
int32_t ss_sampler_sample(ss_sampler *s, const float *logits);

/* ----------------------------------------------------------- stop strings */

/* Looks for stop strings in generated text [len] bytes, of which the first
 * `from` were already looked at (an earlier call with len = from found
 * none): finds the first occurrence of any of stops[n_stops]
 * (NUL-terminated, non-empty) that ends after byte `from`, so a stop string
 * split across tokens is found once its last byte arrives. Returns its
 * offset (where the text is to be cut: the stop string and whatever follows
 * it are not output, as llama.cpp's server does), or -1 when there is none.
 * *safe (NULL: not set) receives how many leading bytes can be output now:
 * the offset found, else len less the longest tail of the text that begins
 * one of the stop strings (it may yet complete one). */
int64_t ss_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
		     size_t n_stops, size_t *safe);

#ifdef __cplusplus
}
#endif
#endif /* SS_SAMPLE_H */
