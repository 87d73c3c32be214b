/*
 * test_birdie.c — Birdie's objectives (lib/train/birdie.h): each transform's
 * sequence and counted targets on a fixed window, rebuilt from what the
 * sequence says (the spans of infill put back give the window; selective
 * copying's answers stand between their delimiters in the context), the
 * bounds bd_room and bd_max_len promise, determinism; the reward of A.1.3
 * and the scheduler choosing the configuration whose reward its action
 * drives.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"
#include "train/birdie.h"

enum { N = 96, SEQ_LEN = 255, CAP = SEQ_LEN + 1, SENT0 = 1000 };

static int32_t sent[BD_NSENT];
static int32_t x[N];

static int setup(void **st)
{
	(void)st;
	for (int i = 0; i < BD_NSENT; i++)
		sent[i] = SENT0 + i;
	for (int i = 0; i < N; i++) /* distinct tokens: a span is found at one place */
		x[i] = 10 + i;
	return 0;
}

static int config_of(const char *name)
{
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++)
		if (!strcmp(bd_configs[i].name, name))
			return i;
	fail_msg("no configuration %s", name);
	return -1;
}

typedef struct {
	int32_t S[CAP];
	uint8_t c[CAP];
	int64_t m;
} seq;

static void make(const char *name, int64_t n, uint64_t seed, seq *q)
{
	uint64_t rng = seed;
	const bd_config *c = &bd_configs[config_of(name)];
	assert_int_equal(bd_transform(c, sent, x, n, &rng, q->S, q->c, CAP, &q->m), 0);
	assert_true(q->m <= bd_max_len(c, n));
}

/* The index of the first t in S[from..m), or -1. */
static int64_t find(const seq *q, int64_t from, int32_t t)
{
	for (int64_t i = from; i < q->m; i++)
		if (q->S[i] == t)
			return i;
	return -1;
}

static void test_ntp_prefix(void **st)
{
	(void)st;
	seq q;
	make("ntp", N, 1, &q);
	assert_int_equal(q.m, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(q.S[i], x[i]);
		assert_int_equal(q.c[i], i > 0); /* every next token but the first */
	}
	make("prefix", N, 2, &q);
	assert_int_equal(q.m, N);
	int64_t p = 0;
	while (!q.c[p])
		p++;
	assert_true(p >= N / 4 && p <= 3 * N / 4);
	for (int i = 0; i < N; i++) {
		assert_int_equal(q.S[i], x[i]);
		assert_int_equal(q.c[i], i >= p);
	}
}

static void test_copy(void **st)
{
	(void)st;
	seq q;
	make("copy/long", 20, 3, &q);
	/* <|copy|> x <|answer|> x <|done|>, the second x and <|done|> counted */
	assert_int_equal(q.m, 2 * 20 + 3);
	assert_int_equal(q.S[0], sent[BD_S_COPY]);
	assert_int_equal(q.S[21], sent[BD_S_ANSWER]);
	assert_int_equal(q.S[42], sent[BD_S_DONE]);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(q.S[1 + i], x[i]);
		assert_int_equal(q.S[22 + i], x[i]);
	}
	for (int64_t j = 0; j < q.m; j++)
		assert_int_equal(q.c[j], j >= 22);
}

static void test_deshuffle(void **st)
{
	(void)st;
	static const struct { const char *name; int64_t moved_min, moved_max; } cases[] = {
		{ "deshuffle/50%", 1, 24 },  /* at most the half drawn moves */
		{ "deshuffle/100%", 36, 48 } /* a random permutation fixes ~1 */
	};
	for (int k = 0; k < 2; k++) {
		seq q;
		make(cases[k].name, 48, 4, &q);
		assert_int_equal(q.m, 2 * 48 + 3);
		assert_int_equal(q.S[0], sent[BD_S_DESHUFFLE]);
		assert_int_equal(q.S[49], sent[BD_S_ANSWER]);
		int seen[N] = { 0 }, moved = 0;
		for (int i = 0; i < 48; i++) {
			int32_t t = q.S[1 + i];
			assert_true(t >= 10 && t < 10 + 48);
			seen[t - 10]++;
			moved += t != x[i];
			assert_int_equal(q.S[50 + i], x[i]);
		}
		for (int i = 0; i < 48; i++)
			assert_int_equal(seen[i], 1); /* a permutation of x */
		assert_true(moved >= cases[k].moved_min && moved <= cases[k].moved_max);
		for (int64_t j = 0; j < q.m; j++)
			assert_int_equal(q.c[j], j >= 50);
	}
}

/* infill: x' then the spans each with a <|mask|>: putting span i in place
 * of x''s i-th <|mask|> gives x back; round(frac·n) tokens masked. */
static void check_infill(const char *name, double frac, uint64_t seed)
{
	seq q;
	make(name, N, seed, &q);
	assert_int_equal(q.S[0], sent[BD_S_INFILL]);
	int64_t ans = find(&q, 1, sent[BD_S_ANSWER]);
	assert_true(ans > 0);
	assert_int_equal(q.S[q.m - 1], sent[BD_S_DONE]);
	int32_t back[2 * N];
	int64_t nb = 0, t = ans + 1, masked = 0, spans = 0;
	for (int64_t i = 1; i < ans; i++) {
		if (q.S[i] != sent[BD_S_MASK]) {
			back[nb++] = q.S[i];
			continue;
		}
		spans++;
		int64_t e = find(&q, t, sent[BD_S_MASK]);
		assert_true(e > t); /* spans are not empty */
		for (; t < e; t++, masked++)
			back[nb++] = q.S[t];
		t = e + 1;
	}
	assert_int_equal(t, q.m - 1); /* every span used, then <|done|> */
	assert_int_equal(nb, N);
	assert_memory_equal(back, x, sizeof x);
	assert_int_equal(masked, llround(frac * N));
	assert_true(spans >= 1);
	for (int64_t j = 0; j < q.m; j++)
		assert_int_equal(q.c[j], j > ans);
}

static void test_infill(void **st)
{
	(void)st;
	for (uint64_t seed = 1; seed <= 20; seed++) {
		check_infill("infill/15%/3", 0.15, seed);
		check_infill("infill/50%/8", 0.5, seed);
	}
}

/* autoencode: x' holds x's unmasked tokens (in order unless shuffled) and
 * a <|mask|> per span; then all of x. */
static void check_autoenc(const char *name, double frac, int shuffled, uint64_t seed)
{
	seq q;
	make(name, N, seed, &q);
	assert_int_equal(q.S[0], sent[BD_S_AUTOENC]);
	int64_t ans = find(&q, 1, sent[BD_S_ANSWER]);
	assert_int_equal(q.m, ans + 1 + N + 1);
	assert_memory_equal(q.S + ans + 1, x, sizeof x);
	int seen[N] = { 0 };
	int64_t kept = 0, last = -1, in_order = 1;
	for (int64_t i = 1; i < ans; i++) {
		if (q.S[i] == sent[BD_S_MASK])
			continue;
		int64_t v = q.S[i] - 10;
		assert_true(v >= 0 && v < N && !seen[v]);
		seen[v] = 1;
		in_order &= v > last;
		last = v;
		kept++;
	}
	assert_int_equal(N - kept, llround(frac * N));
	if (!shuffled)
		assert_true(in_order);
	for (int64_t j = 0; j < q.m; j++)
		assert_int_equal(q.c[j], j > ans);
}

static void test_autoenc(void **st)
{
	(void)st;
	int orders_changed = 0;
	for (uint64_t seed = 1; seed <= 20; seed++) {
		check_autoenc("autoenc/15%/3", 0.15, 0, seed);
		check_autoenc("autoenc/50%/8", 0.5, 0, seed);
		check_autoenc("autoenc/15%/8/shuffled", 0.15, 1, seed);
		seq q;
		make("autoenc/15%/8/shuffled", N, seed, &q);
		int64_t lastv = -1, inorder = 1;
		for (int64_t i = 1; q.S[i] != sent[BD_S_ANSWER]; i++)
			if (q.S[i] != sent[BD_S_MASK]) {
				inorder &= q.S[i] > lastv;
				lastv = q.S[i];
			}
		orders_changed |= !inorder;
	}
	assert_true(orders_changed); /* the pieces were shuffled at least once in 20 */
}

/* selective copying: each answer stands in x right after its <|start|>
 * delimiter and right before its <|end|> one; instructions before or
 * after the context as configured. */
static void check_selcopy(const char *name, int spans, int append, uint64_t seed)
{
	seq q;
	make(name, N, seed, &q);
	int64_t ctx = find(&q, 0, sent[BD_S_CONTEXT]), cp = find(&q, 0, sent[BD_S_COPY]);
	assert_true(ctx >= 0 && cp >= 0);
	assert_true(append ? ctx == 0 && cp == 1 + N : cp == 0);
	assert_memory_equal(q.S + ctx + 1, x, sizeof x);
	int64_t i = cp + 1, ans = find(&q, append ? cp : ctx + 1 + N, sent[BD_S_ANSWER]);
	for (int s = 0; s < spans; s++) {
		assert_int_equal(q.S[i], sent[BD_S_START]);
		int64_t e = find(&q, i, sent[BD_S_END]);
		int64_t a0 = i + 1, na = e - a0;
		int64_t b0 = e + 1, nb = 0;
		while (q.S[b0 + nb] < SENT0)
			nb++;
		assert_true(na >= 3 && na <= 8 && nb >= 3 && nb <= 8);
		/* the answer of span s */
		assert_int_equal(q.S[ans], sent[BD_S_ANSWER]);
		assert_int_equal(q.c[ans], s > 0);
		int64_t a1 = ans + 1, nl = 0;
		while (q.S[a1 + nl] < SENT0)
			nl++;
		assert_true(nl >= 4 && nl <= 32);
		int64_t at = q.S[a1] - 10; /* x[v] = 10 + v */
		for (int64_t k = 0; k < na; k++)
			assert_int_equal(q.S[a0 + k], x[at - na + k]);
		for (int64_t k = 0; k < nb; k++)
			assert_int_equal(q.S[b0 + k], x[at + nl + k]);
		for (int64_t k = 0; k < nl; k++) {
			assert_int_equal(q.S[a1 + k], x[at + k]);
			assert_int_equal(q.c[a1 + k], 1);
		}
		i = b0 + nb;
		ans = a1 + nl;
	}
	assert_int_equal(q.S[ans], sent[BD_S_DONE]);
	assert_int_equal(ans, q.m - 1);
	assert_int_equal(q.c[ans], 1);
	for (int64_t j = 0; j < (append ? cp : ctx + 1 + N); j++)
		assert_int_equal(q.c[j], 0); /* nothing before the answers counts */
}

static void test_selcopy(void **st)
{
	(void)st;
	for (uint64_t seed = 1; seed <= 20; seed++) {
		check_selcopy("selcopy/1/append", 1, 1, seed);
		check_selcopy("selcopy/1/prepend", 1, 0, seed);
		check_selcopy("selcopy/3/append", 3, 1, seed);
		check_selcopy("selcopy/3/prepend", 3, 0, seed);
	}
	/* too short a window for three spans: refused, for the caller to fall back on */
	int32_t S[CAP];
	uint8_t c[CAP];
	int64_t m;
	uint64_t rng = 1;
	assert_int_equal(bd_transform(&bd_configs[config_of("selcopy/3/append")], sent, x, 20, &rng,
				      S, c, CAP, &m),
			 SS_ERR_INVALID);
}

/* Every configuration: the longest window bd_room allows fits in seq_len + 1
 * for many draws, within bd_max_len; the same seed gives the same sequence. */
static void test_bounds_and_determinism(void **st)
{
	(void)st;
	int32_t big[CAP];
	for (int i = 0; i < CAP; i++)
		big[i] = i % 200;
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++) {
		const bd_config *c = &bd_configs[i];
		int64_t room = bd_room(c, SEQ_LEN);
		assert_true(room >= 2 && room <= CAP);
		for (uint64_t seed = 1; seed <= 50; seed++) {
			int32_t S[CAP], S2[CAP];
			uint8_t cn[CAP], cn2[CAP];
			int64_t m, m2;
			uint64_t r1 = seed, r2 = seed, rl = seed;
			int64_t n = bd_draw_len(c, SEQ_LEN, &rl);
			assert_true(n >= 2 && n <= room);
			assert_int_equal(bd_transform(c, sent, big, room, &r1, S, cn, CAP, &m), 0);
			assert_true(m <= CAP && m <= bd_max_len(c, room));
			assert_int_equal(bd_transform(c, sent, big, room, &r2, S2, cn2, CAP, &m2), 0);
			assert_int_equal(m, m2);
			assert_memory_equal(S, S2, (size_t)m * sizeof *S);
			assert_memory_equal(cn, cn2, (size_t)m);
			int any = 0;
			for (int64_t j = 0; j < m; j++)
				any |= cn[j];
			assert_true(any);
		}
	}
}

/* A.1.3: a fall in loss is rewarded, a rise penalised, within [-1, 1];
 * the paper's example: 4.5 -> 4.2 and 0.6 -> 0.5207 get about the same. */
static void test_reward(void **st)
{
	(void)st;
	assert_true(bd_reward(4.5, 4.2) > 0);
	assert_true(bd_reward(4.2, 4.5) < 0);
	assert_true(fabs(bd_reward(3, 3)) < 1e-12);
	assert_true(fabs(bd_reward(4.5, 4.2) - bd_reward(0.6, 0.5207)) < 0.01);
	assert_true(bd_reward(5, 1) <= 1 && bd_reward(1, 5) >= -1);
	assert_true(bd_reward(5, 1) > 0.99);
}

/* The scheduler: with rewards that grow with configuration 3's share and
 * nothing else, it gives 3 the largest share; the floor keeps every other
 * one above floor/(7·its class size). */
static void test_schedule(void **st)
{
	(void)st;
	enum { K = SS_TRAIN_BIRDIE_CONFIGS, T = 30 };
	double hist[T * 3 * K], loss[K], action[K], fixed[K];
	uint64_t rng = 7;
	bd_fixed_action(0, fixed);
	double sum = 0;
	for (int i = 0; i < K; i++)
		sum += fixed[i];
	assert_true(fabs(sum - 1) < 1e-12);
	for (int t = 0; t < T; t++) {
		double *h = hist + t * 3 * K, s = 0;
		for (int i = 0; i < K; i++) {
			h[i] = 2.0;
			h[K + i] = -log(1 - (double)(ss_splitmix64(&rng) >> 11) * 0x1p-53);
			s += h[K + i];
		}
		for (int i = 0; i < K; i++) {
			h[K + i] /= s;
			h[2 * K + i] = i == 3 ? 4 * h[K + 3] : 0;
		}
	}
	for (int i = 0; i < K; i++)
		loss[i] = 2.0;
	bd_schedule(hist, T, loss, 0, 0.2, &rng, action);
	sum = 0;
	for (int i = 0; i < K; i++) {
		sum += action[i];
		assert_true(action[i] >= 0.2 * fixed[i] - 1e-12);
		if (i != 3)
			assert_true(action[i] < action[3]);
	}
	assert_true(fabs(sum - 1) < 1e-9);
	assert_true(action[3] > 0.25);
	/* too little history: the fixed mixture */
	bd_schedule(hist, 1, loss, 0, 0.2, &rng, action);
	assert_memory_equal(action, fixed, sizeof fixed);
	/* restricted to copy and ntp: nothing else drawn, each class half */
	uint32_t only;
	assert_int_equal(ss_train_birdie_only("copy,ntp", &only), 0);
	assert_int_equal(only, 1u << 0 | 1u << 2 | 1u << 3);
	bd_schedule(hist, T, loss, only, 0.2, &rng, action);
	sum = 0;
	for (int i = 0; i < K; i++) {
		sum += action[i];
		if (!(only >> i & 1))
			assert_true(action[i] == 0);
	}
	assert_true(fabs(sum - 1) < 1e-9);
	bd_fixed_action(only, action);
	assert_true(fabs(action[0] - 0.5) < 1e-12 && fabs(action[2] - 0.25) < 1e-12);
	assert_int_equal(ss_train_birdie_only("copy/short", &only), 0);
	assert_int_equal(only, 1u << 2);
	assert_int_equal(ss_train_birdie_only("copy,nope", &only), SS_ERR_INVALID);
	assert_int_equal(ss_train_birdie_only("", &only), SS_ERR_INVALID);
	/* picks follow the action */
	int hits = 0;
	for (int i = 0; i < 4000; i++)
		hits += bd_pick(fixed, &rng) == 0;
	assert_true(hits > 4000 / 7 * 0.8 && hits < 4000 / 7 * 1.2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ntp_prefix),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_deshuffle),
		cmocka_unit_test(test_infill),
		cmocka_unit_test(test_autoenc),
		cmocka_unit_test(test_selcopy),
		cmocka_unit_test(test_bounds_and_determinism),
		cmocka_unit_test(test_reward),
		cmocka_unit_test(test_schedule),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
