/*
 * birdie.c — Birdie's objectives as token transforms and its reward-driven
 * scheduler (lib/train/birdie.h says what each produces).
 * ref: birdie.txt §3.2, §3.3, A.1, A.2, A.5.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/birdie.h"

const char *const bd_sentinel_names[BD_NSENT] = {
	"<|copy|>", "<|deshuffle|>", "<|infill|>", "<|autoencode|>", "<|context|>", "<|start|>",
	"<|end|>", "<|answer|>", "<|mask|>", "<|done|>"
};

const char *const bd_class_names[BD_NCLASS] = {
	"ntp", "prefix", "copy", "selcopy", "deshuffle", "infill", "autoenc"
};

/* A.2's controls, in tokens, scaled down about 8x from the paper's sequences
 * of 2048 BPE tokens to ours of a few hundred (0: as many as fit, bd_room):
 * A.2 copies 64-256 or 256-2048 tokens, deshuffles 128-256 or 512-1024, and
 * infills and autoencodes sequences of 128-2048. Short copies first are the
 * curriculum that took the recall model off its plateau. */
const bd_config bd_configs[SS_TRAIN_BIRDIE_CONFIGS] = {
	{ BD_NTP, "ntp", 0, 0, 0, 0, 0 },
	{ BD_PREFIX, "prefix", 0, 0, 0, 0, 0 },
	{ BD_COPY, "copy/short", 8, 32, 0, 0, 0 },
	{ BD_COPY, "copy/long", 32, 128, 0, 0, 0 },
	{ BD_SELCOPY, "selcopy/1/append", 64, 256, 0, 1, 1 },
	{ BD_SELCOPY, "selcopy/1/prepend", 64, 256, 0, 1, 0 },
	{ BD_SELCOPY, "selcopy/3/append", 128, 0, 0, 3, 1 },
	{ BD_SELCOPY, "selcopy/3/prepend", 128, 0, 0, 3, 0 },
	{ BD_DESHUFFLE, "deshuffle/50%", 16, 64, 0.5, 0, 0 },
	{ BD_DESHUFFLE, "deshuffle/100%", 16, 64, 1, 0, 0 },
	{ BD_INFILL, "infill/15%/3", 128, 0, 0.15, 3, 0 },
	{ BD_INFILL, "infill/15%/8", 128, 0, 0.15, 8, 0 },
	{ BD_INFILL, "infill/50%/3", 128, 0, 0.5, 3, 0 },
	{ BD_INFILL, "infill/50%/8", 128, 0, 0.5, 8, 0 },
	{ BD_AUTOENC, "autoenc/15%/3", 48, 192, 0.15, 3, 0 },
	{ BD_AUTOENC, "autoenc/15%/8/shuffled", 96, 0, 0.15, 8, 1 },
	{ BD_AUTOENC, "autoenc/50%/8", 96, 0, 0.5, 8, 0 },
};

enum { SEL_SPAN_MIN = 4, SEL_SPAN_MAX = 32, SEL_DELIM_MIN = 3, SEL_DELIM_MAX = 8 };
#define K SS_TRAIN_BIRDIE_CONFIGS

const char *ss_train_birdie_config(int i)
{
	return i >= 0 && i < K ? bd_configs[i].name : NULL;
}

int ss_train_birdie_only(const char *list, uint32_t *only)
{
	*only = 0;
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		uint32_t m = 0;
		for (int i = 0; i < K; i++) {
			const char *name = bd_configs[i].name, *cls = bd_class_names[bd_configs[i].cls];
			if ((strlen(name) == n && !strncmp(name, p, n)) ||
			    (strlen(cls) == n && !strncmp(cls, p, n)))
				m |= 1u << i;
		}
		if (!m)
			return SS_ERR_INVALID;
		*only |= m;
		p += n + (p[n] == ',');
	}
	return *only ? 0 : SS_ERR_INVALID;
}

/* Uniform in [0, n) (n >= 1), and in [0, 1). */
static uint64_t below(uint64_t *rng, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)ss_splitmix64(rng) * n) >> 64);
}

static double unit(uint64_t *rng)
{
	return (double)(ss_splitmix64(rng) >> 11) * 0x1p-53;
}

int64_t bd_room(const bd_config *c, int64_t seq_len)
{
	const int64_t L = seq_len + 1; /* tokens of S */
	int64_t n;
	switch (c->cls) {
	case BD_NTP:
	case BD_PREFIX: n = L; break;
	case BD_COPY:
	case BD_DESHUFFLE:
	case BD_AUTOENC: n = (L - 3) / 2; break;
	/* n + 3 + k: x, three sentinels and a <|mask|> per span in x'; the
	 * target k spans of masked tokens and a <|mask|> each: with k <=
	 * frac·n + 1, S <= n + 2·(frac·n + 1) + 3 */
	case BD_INFILL: n = (int64_t)floor((double)(L - 5) / (1 + 2 * c->frac)); break;
	case BD_SELCOPY:
		n = L - 3 - (int64_t)c->span * (3 + 2 * SEL_DELIM_MAX + SEL_SPAN_MAX);
		if (n < (int64_t)c->span * (SEL_SPAN_MIN + 2 * SEL_DELIM_MIN))
			n = 0;
		break;
	default: n = 0;
	}
	return n > 1 ? n : 0;
}

int64_t bd_max_len(const bd_config *c, int64_t n)
{
	switch (c->cls) {
	case BD_NTP:
	case BD_PREFIX: return n;
	case BD_INFILL: return n + 2 * (int64_t)(c->frac * (double)n + 1.5) + 3;
	case BD_SELCOPY: return n + 3 + (int64_t)c->span * (3 + 2 * SEL_DELIM_MAX + SEL_SPAN_MAX);
	default: return 2 * n + 3;
	}
}

int64_t bd_draw_len(const bd_config *c, int64_t seq_len, uint64_t *rng)
{
	int64_t room = bd_room(c, seq_len), lo = c->len_lo, hi = c->len_hi;
	if (lo < 2)
		lo = 2;
	if (!hi || hi > room)
		hi = room;
	if (hi < lo)
		return hi;
	return lo + (int64_t)below(rng, (uint64_t)(hi - lo + 1));
}

/* The sequence being built. */
typedef struct {
	int32_t *S;
	uint8_t *counted;
	int64_t m, cap;
	int over;
} seq;

static void put(seq *q, int32_t t, int counted)
{
	if (q->m >= q->cap) {
		q->over = 1;
		return;
	}
	q->S[q->m] = t;
	q->counted[q->m++] = (uint8_t)counted;
}

static void put_n(seq *q, const int32_t *x, int64_t n, int counted)
{
	for (int64_t i = 0; i < n; i++)
		put(q, x[i], counted);
}

/* Fisher-Yates over a[0..n). */
static void shuffle_i64(int64_t *a, int64_t n, uint64_t *rng)
{
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)below(rng, (uint64_t)i + 1), t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

/* a[0..m): m distinct values of 0..n-1 (m <= n), ascending: the first m of a
 * partial Fisher-Yates shuffle of 0..n-1, then sorted (m is small). a has
 * room for n. */
static void choose_sorted(int64_t *a, int64_t n, int64_t m, uint64_t *rng)
{
	for (int64_t i = 0; i < n; i++)
		a[i] = i;
	for (int64_t i = 0; i < m; i++) {
		int64_t j = i + (int64_t)below(rng, (uint64_t)(n - i)), t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
	for (int64_t i = 1; i < m; i++)
		for (int64_t j = i; j > 0 && a[j - 1] > a[j]; j--) {
			int64_t t = a[j];
			a[j] = a[j - 1];
			a[j - 1] = t;
		}
}

/* len[0..k): total split into k parts of at least lo each (total >= k·lo),
 * every such split equally likely (stars and bars). tmp has room for
 * total + k. */
static void split_parts(int64_t total, int64_t k, int64_t lo, int64_t *len, int64_t *tmp,
			uint64_t *rng)
{
	int64_t slots = total - k * lo + k - 1, prev = -1;
	choose_sorted(tmp, slots, k - 1, rng); /* the bars */
	for (int64_t i = 0; i < k - 1; i++) {
		len[i] = tmp[i] - prev - 1 + lo;
		prev = tmp[i];
	}
	len[k - 1] = slots - prev - 1 + lo;
}

/* Masked spans of x[0..n) (UL2/T5 span corruption): round(frac·n) tokens
 * (at least 1, at most n-1) in k = max(1, round(masked / span)) spans of at
 * least one token, apart by at least one unmasked token, both splits drawn
 * uniformly. Out: start[k], len[k], in order (room for n each). Returns k,
 * or -1 out of memory. */
static int64_t mask_spans(int64_t n, double frac, int span, uint64_t *rng, int64_t *start,
			  int64_t *len)
{
	int64_t masked = (int64_t)llround(frac * (double)n);
	if (masked < 1)
		masked = 1;
	if (masked > n - 1)
		masked = n - 1;
	int64_t k = (int64_t)llround((double)masked / span);
	if (k < 1)
		k = 1;
	if (k > masked)
		k = masked;
	if (k > n - masked + 1)
		k = n - masked + 1;
	int64_t *tmp = malloc((size_t)(2 * n + 2) * sizeof *tmp), *gap = tmp + n + 1;
	if (!tmp)
		return -1;
	split_parts(masked, k, 1, len, tmp, rng);
	/* the unmasked tokens before each span and after the last: the k-1
	 * between two spans at least one */
	split_parts(n - masked - (k - 1), k + 1, 0, gap, tmp, rng);
	for (int64_t i = 0, pos = 0; i < k; i++) {
		pos += gap[i] + (i > 0);
		start[i] = pos;
		pos += len[i];
	}
	free(tmp);
	return k;
}

/* x' of infill and autoenc: x with each span replaced by one <|mask|>; the
 * unmasked pieces in a shuffled order when shuf. */
static int put_masked(seq *q, const int32_t *x, int64_t n, const int64_t *start, const int64_t *len,
		      int64_t k, int32_t mask, int shuf, uint64_t *rng)
{
	/* pieces: unmasked piece i is [end of span i-1, start of span i) */
	int64_t *order = malloc((size_t)(k + 1) * sizeof *order);
	if (!order)
		return SS_ERR_NOMEM;
	for (int64_t i = 0; i <= k; i++)
		order[i] = i;
	if (shuf)
		shuffle_i64(order, k + 1, rng);
	for (int64_t p = 0; p <= k; p++) {
		int64_t i = order[p];
		int64_t a = i ? start[i - 1] + len[i - 1] : 0, b = i < k ? start[i] : n;
		put_n(q, x + a, b - a, 0);
		if (p < k)
			put(q, mask, 0);
	}
	free(order);
	return 0;
}

/* Selective copying's k spans (A.5): x split in k equal parts, in each a
 * span of SEL_SPAN_MIN..SEL_SPAN_MAX tokens with SEL_DELIM_MIN..MAX tokens
 * of its part before and after it. Returns 0, or -1 when a part is too
 * short. Out: per span its start, length, delimiters' lengths. */
static int sel_spans(int64_t n, int k, uint64_t *rng, int64_t *s, int64_t *l, int64_t *a,
		     int64_t *b)
{
	int64_t part = n / k;
	if (part < SEL_SPAN_MIN + 2 * SEL_DELIM_MIN)
		return -1;
	for (int i = 0; i < k; i++) {
		int64_t lo = (int64_t)i * part, room = part;
		int64_t maxl = room - 2 * SEL_DELIM_MIN;
		if (maxl > SEL_SPAN_MAX)
			maxl = SEL_SPAN_MAX;
		l[i] = SEL_SPAN_MIN + (int64_t)below(rng, (uint64_t)(maxl - SEL_SPAN_MIN + 1));
		int64_t free_ = room - l[i] - 2 * SEL_DELIM_MIN;
		s[i] = lo + SEL_DELIM_MIN + (int64_t)below(rng, (uint64_t)free_ + 1);
		int64_t before = s[i] - lo, after = lo + room - (s[i] + l[i]);
		int64_t amax = before < SEL_DELIM_MAX ? before : SEL_DELIM_MAX;
		int64_t bmax = after < SEL_DELIM_MAX ? after : SEL_DELIM_MAX;
		a[i] = SEL_DELIM_MIN + (int64_t)below(rng, (uint64_t)(amax - SEL_DELIM_MIN + 1));
		b[i] = SEL_DELIM_MIN + (int64_t)below(rng, (uint64_t)(bmax - SEL_DELIM_MIN + 1));
	}
	return 0;
}

static void put_selcopy_instr(seq *q, const int32_t *sent, const int32_t *x, int k,
			      const int64_t *s, const int64_t *l, const int64_t *a, const int64_t *b)
{
	put(q, sent[BD_S_COPY], 0);
	for (int i = 0; i < k; i++) {
		put(q, sent[BD_S_START], 0);
		put_n(q, x + s[i] - a[i], a[i], 0);
		put(q, sent[BD_S_END], 0);
		put_n(q, x + s[i] + l[i], b[i], 0);
	}
}

/* Deshuffling: a fraction c->frac of the positions permuted among
 * themselves, then the original after the answer sentinel. */
static int tr_deshuffle(seq *q, const bd_config *c, const int32_t sent[BD_NSENT], const int32_t *x,
			int64_t n, uint64_t *rng)
{
	int64_t np = (int64_t)llround(c->frac * (double)n);
	int64_t *tmp = malloc((size_t)(2 * n + (np ? np : 1)) * sizeof *tmp);
	if (!tmp)
		return SS_ERR_NOMEM;
	int64_t *pos = tmp, *perm = tmp + n, *vals = tmp + 2 * n;
	for (int64_t i = 0; i < n; i++)
		pos[i] = i;
	shuffle_i64(pos, n, rng); /* the first np are the positions permuted */
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	memcpy(vals, pos, (size_t)np * sizeof *vals);
	shuffle_i64(vals, np, rng);
	for (int64_t i = 0; i < np; i++)
		perm[pos[i]] = vals[i];
	put(q, sent[BD_S_DESHUFFLE], 0);
	for (int64_t i = 0; i < n; i++)
		put(q, x[perm[i]], 0);
	put(q, sent[BD_S_ANSWER], 0);
	put_n(q, x, n, 1);
	put(q, sent[BD_S_DONE], 1);
	free(tmp);
	return 0;
}

/* Infilling (the masked spans after the answer sentinel) and autoencoding
 * (the whole original after it). */
static int tr_masked(seq *q, const bd_config *c, const int32_t sent[BD_NSENT], const int32_t *x,
		     int64_t n, uint64_t *rng)
{
	int64_t *tmp = malloc((size_t)n * 2 * sizeof *tmp);
	if (!tmp)
		return SS_ERR_NOMEM;
	int64_t *st = tmp, *ln = tmp + n;
	int64_t k = mask_spans(n, c->frac, c->span, rng, st, ln);
	int infill = c->cls == BD_INFILL, rc = k < 0 ? SS_ERR_NOMEM : 0;
	if (!rc) {
		put(q, sent[infill ? BD_S_INFILL : BD_S_AUTOENC], 0);
		rc = put_masked(q, x, n, st, ln, k, sent[BD_S_MASK], !infill && c->flag, rng);
	}
	if (!rc) {
		put(q, sent[BD_S_ANSWER], 0);
		if (infill)
			for (int64_t i = 0; i < k; i++) {
				put_n(q, x + st[i], ln[i], 1);
				put(q, sent[BD_S_MASK], 1);
			}
		else
			put_n(q, x, n, 1);
		put(q, sent[BD_S_DONE], 1);
	}
	free(tmp);
	return rc;
}

/* Selective copying: c->span spans named by their neighbours, the context
 * before the instructions (c->flag) or after, the spans as the answer. */
static int tr_selcopy(seq *q, const bd_config *c, const int32_t sent[BD_NSENT], const int32_t *x,
		      int64_t n, uint64_t *rng)
{
	int k = c->span;
	int64_t *tmp = malloc((size_t)k * 4 * sizeof *tmp);
	if (!tmp)
		return SS_ERR_NOMEM;
	int64_t *s = tmp, *l = tmp + k, *a = tmp + 2 * k, *b = tmp + 3 * k;
	if (sel_spans(n, k, rng, s, l, a, b)) {
		free(tmp);
		return SS_ERR_INVALID;
	}
	if (c->flag) {
		put(q, sent[BD_S_CONTEXT], 0);
		put_n(q, x, n, 0);
		put_selcopy_instr(q, sent, x, k, s, l, a, b);
	} else {
		put_selcopy_instr(q, sent, x, k, s, l, a, b);
		put(q, sent[BD_S_CONTEXT], 0);
		put_n(q, x, n, 0);
	}
	for (int i = 0; i < k; i++) {
		put(q, sent[BD_S_ANSWER], i > 0);
		put_n(q, x + s[i], l[i], 1);
	}
	put(q, sent[BD_S_DONE], 1);
	free(tmp);
	return 0;
}

int bd_transform(const bd_config *c, const int32_t sent[BD_NSENT], const int32_t *x, int64_t n,
		 uint64_t *rng, int32_t *S, uint8_t *counted, int64_t cap, int64_t *m)
{
	seq q = { .S = S, .counted = counted, .cap = cap };
	int rc = 0;
	*m = 0;
	if (n < 2)
		return SS_ERR_INVALID;
	switch (c->cls) {
	case BD_NTP:
		put(&q, x[0], 0);
		put_n(&q, x + 1, n - 1, 1);
		break;
	case BD_PREFIX: {
		int64_t p = n / 4 + (int64_t)below(rng, (uint64_t)(n / 2) + 1);
		if (p < 1)
			p = 1;
		put_n(&q, x, p, 0);
		put_n(&q, x + p, n - p, 1);
		break;
	}
	case BD_COPY:
		put(&q, sent[BD_S_COPY], 0);
		put_n(&q, x, n, 0);
		put(&q, sent[BD_S_ANSWER], 0);
		put_n(&q, x, n, 1);
		put(&q, sent[BD_S_DONE], 1);
		break;
	case BD_DESHUFFLE: rc = tr_deshuffle(&q, c, sent, x, n, rng); break;
	case BD_INFILL:
	case BD_AUTOENC: rc = tr_masked(&q, c, sent, x, n, rng); break;
	case BD_SELCOPY: rc = tr_selcopy(&q, c, sent, x, n, rng); break;
	default: rc = SS_ERR_INVALID;
	}
	if (!rc && q.over)
		rc = SS_ERR_INVALID;
	if (!rc)
		*m = q.m;
	return rc;
}

/* ------------------------------------------------------------ scheduler */

double bd_reward(double old, double new_)
{
	const double r = M_E;
	if (!(old > 0) || !(new_ > 0))
		return 0;
	double dl = (old - new_) / old, s = sqrt(old * new_);
	double v = r * 100 * tanh(r * s * dl * dl * dl);
	return v > 1 ? 1 : v < -1 ? -1 : v;
}

/* Configurations of configuration i's class that `only` allows. */
static int class_size(int i, uint32_t only)
{
	int n = 0;
	for (int j = 0; j < K; j++)
		n += bd_configs[j].cls == bd_configs[i].cls && (only >> j & 1);
	return n;
}

/* Classes with a configuration `only` allows. */
static int classes(uint32_t only)
{
	int n = 0;
	for (int c = 0; c < BD_NCLASS; c++)
		for (int j = 0; j < K; j++)
			if (bd_configs[j].cls == (bd_class)c && (only >> j & 1)) {
				n++;
				break;
			}
	return n;
}

void bd_fixed_action(uint32_t only, double *action)
{
	if (!(only & BD_ALL))
		only = BD_ALL;
	int nc = classes(only);
	for (int i = 0; i < K; i++)
		action[i] = only >> i & 1 ? 1.0 / (nc * class_size(i, only)) : 0;
}

int bd_pick(const double *action, uint64_t *rng)
{
	double u = unit(rng), acc = 0;
	for (int i = 0; i < K; i++) {
		acc += action[i];
		if (u < acc)
			return i;
	}
	for (int i = K - 1; i >= 0; i--) /* rounding: the last with weight */
		if (action[i] > 0)
			return i;
	return 0;
}

/* Solves A·x = b for the symmetric positive definite A [n][n] (Cholesky, in
 * place: A is overwritten). */
static void chol_solve(double *A, double *b, int n)
{
	for (int j = 0; j < n; j++) {
		double d = A[j * n + j];
		for (int k = 0; k < j; k++)
			d -= A[j * n + k] * A[j * n + k];
		d = sqrt(d > 1e-12 ? d : 1e-12);
		A[j * n + j] = d;
		for (int i = j + 1; i < n; i++) {
			double v = A[i * n + j];
			for (int k = 0; k < j; k++)
				v -= A[i * n + k] * A[j * n + k];
			A[i * n + j] = v / d;
		}
	}
	for (int i = 0; i < n; i++) {
		double v = b[i];
		for (int k = 0; k < i; k++)
			v -= A[i * n + k] * b[k];
		b[i] = v / A[i * n + i];
	}
	for (int i = n - 1; i >= 0; i--) {
		double v = b[i];
		for (int k = i + 1; k < n; k++)
			v -= A[k * n + i] * b[k];
		b[i] = v / A[i * n + i];
	}
}

enum { NF = 2 * K + 1, CANDIDATES = 2048, TOP = 8 };

void bd_schedule(const double *hist, int64_t nhist, const double *loss, uint32_t only,
		 double floor_, uint64_t *rng, double *action)
{
	if (!(only & BD_ALL))
		only = BD_ALL;
	if (nhist < 2) {
		bd_fixed_action(only, action);
		return;
	}
	/* ridge: W[i] = argmin Σ_t (W[i]·f_t − reward_t[i])² + λ|W[i]|², the
	 * same F^T F + λI for every output i */
	static const double lambda = 1e-2;
	double G[NF * NF], w[K][NF], f[NF];
	memset(G, 0, sizeof G);
	memset(w, 0, sizeof w);
	for (int64_t t = 0; t < nhist; t++) {
		const double *row = hist + t * 3 * K;
		memcpy(f, row, 2 * K * sizeof *f);
		f[2 * K] = 1;
		for (int a = 0; a < NF; a++) {
			for (int b = 0; b < NF; b++)
				G[a * NF + b] += f[a] * f[b];
			for (int i = 0; i < K; i++)
				w[i][a] += f[a] * row[2 * K + i];
		}
	}
	for (int a = 0; a < NF; a++)
		G[a * NF + a] += lambda;
	for (int i = 0; i < K; i++) {
		double A[NF * NF];
		memcpy(A, G, sizeof A);
		chol_solve(A, w[i], NF);
	}
	/* the total reward is linear in the action: Σ_i s_i·(W[i]·[loss, a, 1]) */
	double base = 0, slope[K] = { 0 };
	for (int i = 0; i < K; i++) {
		if (!(only >> i & 1))
			continue;
		double si = 1.0 / class_size(i, only), b = w[i][2 * K];
		for (int a = 0; a < K; a++)
			b += w[i][a] * loss[a];
		base += si * b;
		for (int a = 0; a < K; a++)
			slope[a] += si * w[i][K + a];
	}
	double top[TOP][K], topv[TOP];
	int ntop = 0;
	for (int c = 0; c < CANDIDATES; c++) {
		double cand[K], sum = 0, v = base;
		for (int i = 0; i < K; i++) { /* Dirichlet(1): uniform on the (allowed) simplex */
			cand[i] = only >> i & 1 ? -log(1 - unit(rng)) : 0;
			sum += cand[i];
		}
		for (int i = 0; i < K; i++) {
			cand[i] /= sum;
			v += slope[i] * cand[i];
		}
		int at = ntop < TOP ? ntop++ : -1;
		if (at < 0) {
			int worst = 0;
			for (int j = 1; j < TOP; j++)
				if (topv[j] < topv[worst])
					worst = j;
			if (v <= topv[worst])
				continue;
			at = worst;
		}
		topv[at] = v;
		memcpy(top[at], cand, sizeof cand);
	}
	double u[K];
	bd_fixed_action(only, u);
	for (int i = 0; i < K; i++) {
		double mean = 0;
		for (int j = 0; j < ntop; j++)
			mean += top[j][i];
		action[i] = (1 - floor_) * mean / ntop + floor_ * u[i];
	}
}
