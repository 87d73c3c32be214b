/*
 * lib/train/birdie.h — INTERNAL to libss (lib/train/birdie.c, lib/train/run.c,
 * tests/test_train.c): Birdie's pre-training objectives as transforms of a
 * window of document tokens, and its reward-driven scheduler over their
 * configurations ("Birdie – Causal": every objective is a left-to-right
 * sequence, so the model and its states stay those of plain Mamba-2 and
 * compose by PICASO).
 *
 * A transform turns n document tokens x into one training sequence S and a
 * mask of the tokens of S whose prediction is counted in the loss; the
 * batch then holds S[0..m-1) as inputs and S[i+1] as the target of row i
 * when counted[i+1]. Sentinels are token ids of the model's vocabulary,
 * looked up by their text in the tokenizer (bd_sentinel_names):
 *   ntp        x                                       all counted
 *   prefix     x, split at p (1/4..3/4 of n)           x[p..] counted
 *   copy       <|copy|> x <|answer|> x <|done|>        the second x, <|done|>
 *   selcopy    <|context|> x <|copy|> Σ(<|start|> a_i <|end|> b_i)     (append)
 *              or <|copy|> Σ(<|start|> a_i <|end|> b_i) <|context|> x  (prepend)
 *              then Σ(<|answer|> span_i) <|done|>      the spans, the <|answer|>s
 *                                                      after the first, <|done|>
 *              (span_i: 4..32 tokens of x, a_i/b_i the 3..8 tokens just before/
 *              after it; spans disjoint, one per equal part of x)
 *   deshuffle  <|deshuffle|> x' <|answer|> x <|done|>  x, <|done|>; x' is x with a
 *                                                      fraction of its positions permuted
 *   infill     <|infill|> x' <|answer|> Σ(span_i <|mask|>) <|done|>
 *                                                      the spans, <|mask|>s, <|done|>;
 *              x' is x with each masked span replaced by one <|mask|>
 *   autoenc    <|autoencode|> x' <|answer|> x <|done|> x, <|done|>; x' as infill's,
 *                                                      its unmasked pieces shuffled when
 *                                                      the configuration says so
 * ref: birdie.txt §3.2 (the objectives, Table 1, Fig. 2), A.2 (their
 *      controls), A.5 (selective copying); UL2 (Tay et al. 2023) for the
 *      span corruption's mean span length and masked fraction.
 */
#ifndef SS_TRAIN_BIRDIE_H
#define SS_TRAIN_BIRDIE_H

#include "ss.h"

typedef enum {
	BD_NTP, BD_PREFIX, BD_COPY, BD_SELCOPY, BD_DESHUFFLE, BD_INFILL, BD_AUTOENC, BD_NCLASS
} bd_class;

enum {
	BD_S_COPY, BD_S_DESHUFFLE, BD_S_INFILL, BD_S_AUTOENC, BD_S_CONTEXT, BD_S_START, BD_S_END,
	BD_S_ANSWER, BD_S_MASK, BD_S_DONE, BD_NSENT
};

/* "<|copy|>", "<|deshuffle|>", ..., by BD_S_*. */
extern const char *const bd_sentinel_names[BD_NSENT];
/* "ntp", "prefix", "copy", "selcopy", "deshuffle", "infill", "autoenc". */
extern const char *const bd_class_names[BD_NCLASS];

/* One configuration of an objective (birdie.txt A.2). The window length is
 * drawn uniformly in [len_lo, len_hi] tokens, len_hi 0 or past the most its
 * class fits in one sequence of seq_len inputs (bd_room) meaning that most. */
typedef struct {
	bd_class cls;
	const char *name; /* "infill/15%/8", as logged */
	int64_t len_lo, len_hi;
	double frac;      /* deshuffle: positions permuted; infill, autoenc: tokens masked */
	int span;         /* infill, autoenc: mean masked span (tokens); selcopy: spans */
	int flag;         /* selcopy: 1 = instructions after the context; autoenc: shuffle */
} bd_config;

/* The configurations (SS_TRAIN_BIRDIE_CONFIGS of them), by index. */
extern const bd_config bd_configs[SS_TRAIN_BIRDIE_CONFIGS];

/* The most document tokens config c can take so that its sequence has at
 * most seq_len + 1 tokens (0: none fits). */
int64_t bd_room(const bd_config *c, int64_t seq_len);

/* An upper bound of the length of the sequence c makes of n tokens. */
int64_t bd_max_len(const bd_config *c, int64_t n);

/* The window length to draw for c (>= 2 unless bd_room is less, <= bd_room),
 * from *rng. */
int64_t bd_draw_len(const bd_config *c, int64_t seq_len, uint64_t *rng);

/* Transforms x[0..n) (document tokens, n <= bd_room(c, ...)) into S, the
 * training sequence, and counted[j] (1: S[j] is a target): S and counted
 * have room for cap entries (cap >= n·2 + 3 + 51·(selcopy spans) is enough:
 * bd_room's bound); *m gets their length. Random choices come from *rng
 * (splitmix64). sent: the sentinel ids, by BD_S_*.
 * Returns 0; SS_ERR_INVALID (n < 2, a window too short for selcopy's spans,
 * or the sequence would pass cap: the caller may fall back on ntp); SS_ERR_NOMEM. */
int bd_transform(const bd_config *c, const int32_t sent[BD_NSENT], const int32_t *x, int64_t n,
		 uint64_t *rng, int32_t *S, uint8_t *counted, int64_t cap, int64_t *m);

/* ------------------------------------------------------------ scheduler */

/* Every configuration: the mask of ss_train_state's birdie_only. */
#define BD_ALL ((1u << SS_TRAIN_BIRDIE_CONFIGS) - 1)

/* Reward of one configuration whose evaluation loss went from old to new
 * (birdie.txt A.1.3, r = e): clip(−r·100·tanh(r·S·ΔL³), −1, 1) with
 * ΔL = (old − new)/old and S = sqrt(old·new). NOTE the sign: the formula
 * as printed gives a loss that fell (ΔL > 0) a negative reward; we follow
 * the text around it ("rewards ... the change in loss achieved";
 * "negative rewards ... discouraging") and reward a fall. */
double bd_reward(double old, double new_);

/* The next action (sampling probabilities over the configurations that
 * `only` allows, bit i for configuration i; 0 = all) from the history of
 * evaluations (birdie.txt A.1.4, Fig. 4), with a linear
 * reward model in place of the paper's 4-layer gated SSM: a ridge
 * regression of each configuration's reward on [losses before, action, 1]
 * fitted to the history; 2048 candidate actions drawn uniformly on the
 * simplex, their predicted rewards scaled by 1/(configurations of their
 * class) and summed, the mean of the 8 best taken, then mixed with the
 * uniform action (weight `floor`) so that no configuration is starved.
 *   hist: [nhist][3·K] rows of (losses before, action, rewards after);
 *   loss: [K] the latest losses; action: [K] out; K = SS_TRAIN_BIRDIE_CONFIGS.
 * With fewer than 2 rows the action is uniform over classes. */
void bd_schedule(const double *hist, int64_t nhist, const double *loss, uint32_t only,
		 double floor_, uint64_t *rng, double *action);

/* The fixed-ratio mixture (the ablation): every class with a configuration
 * that `only` allows (0: all) equally likely, its allowed configurations
 * equally within it, the others 0. action: [K] out. */
void bd_fixed_action(uint32_t only, double *action);

/* A configuration index drawn from action ([K], summing to 1). */
int bd_pick(const double *action, uint64_t *rng);

#endif /* SS_TRAIN_BIRDIE_H */
