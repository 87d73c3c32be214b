/*
 * test_forward.c — the CPU forward pass against golden/ (llama.cpp + float64
 * numpy references), plus the properties the rest of ss relies on: batching
 * and cutting a sequence into pieces change nothing, decode equals prefill,
 * and one layer's scan obeys Prop. 1 (state(u1·u2) = exp(a(u2))·state(u1) +
 * state(u2)).
 *
 * Tolerance (tests/fixtures/golden/README.md §8): |x - gold| <= 1e-5 + 1e-5·|gold| for
 * logits, hidden, conv and ssm; relative 1e-5 for logdecay.
 * Two programs from this file: test_forward (t1-hf golden cases from
 * $SS_FIXTURES, tests/fixtures; the properties on t1 and on a generated
 * model of t2's shape: bf16, ngroups 2, untied lm_head) and
 * test_shared_forward (SS_TEST_SHARED: the golden cases of t2-hf and t1-ss,
 * which only $SS_SHARED has; exits 77 without it) and test_shared_mamba1
 * (SS_TEST_SHARED 2: the Mamba-1 golden cases of golden-mamba1's m1, HF and
 * state-spaces layouts, and the batching/pieces/decode properties on m1).
 */
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
#include "forward/ops/linear_f32.h"
#include "gen/model.h"

#ifndef SS_TEST_SHARED
#define SS_TEST_SHARED 0
#endif

#define ATOL 1e-5
#define RTOL 1e-5
#define NCOLS 256

static char golden[4096];
static int32_t *logit_cols; /* [NCOLS] */

/* ----------------------------------------------------------------- files */

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf) {
			buf[n] = 0;
			if (len)
				*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

/* Reads golden/<rel> as an array of `elem`-byte items; fails the test if absent. */
static void *gold(const char *rel, size_t elem, size_t *count)
{
	char path[8192];
	size_t len = 0;
	void *p;

	snprintf(path, sizeof(path), "%s/%s", golden, rel);
	p = slurp(path, &len);
	if (!p)
		fail_msg("cannot read %s", path);
	assert_int_equal(len % elem, 0);
	if (count)
		*count = len / elem;
	return p;
}

/* ------------------------------------------------------------ comparison */

/* Compares n values; prints the first mismatches. Returns the number of
 * values out of tolerance and sets *maxerr to the largest |x - gold|. */
static size_t compare(const char *what, const float *x, const float *g, size_t n, size_t stride_x,
		      double atol, double rtol, double *maxerr)
{
	size_t i, bad = 0;
	double mx = 0.0;

	for (i = 0; i < n; i++) {
		const double xv = x[i * stride_x], gv = g[i];
		const double e = fabs(xv - gv);
		if (!(e <= atol + rtol * fabs(gv))) {
			if (bad < 5)
				printf("    %s[%zu]: got %.9g, golden %.9g, |diff| %.3g\n", what, i, xv, gv, e);
			bad++;
		}
		if (e > mx || e != e)
			mx = e != e ? INFINITY : e;
	}
	if (bad)
		printf("    %s: %zu of %zu values out of tolerance (max |diff| %.3g)\n", what, bad, n, mx);
	if (maxerr && mx > *maxerr)
		*maxerr = mx;
	return bad;
}

/* ---------------------------------------------------------------- models */

typedef struct {
	const char *name;  /* "t1-hf": models/<name> */
	const char *key;   /* golden case folder: "t1" (tokens only, for a generated model) */
	ss_model *m;
	char dir[8192];    /* model directory; "" = not loaded (its tests skip) */
} tmodel;

static void state_new(ss_state *s, const ss_model *m)
{
	ss_state_dims d;
	ss_model_state_dims(m, &d);
	assert_int_equal(ss_state_alloc(s, &d), 0);
}

/* ----------------------------------------------------------- golden cases */

typedef struct {
	double logits, hidden, conv, ssm, logdecay_rel;
} errs;

/* Checks logits [n][V] (all positions) against logits_cols at every position
 * and logits_full at its positions. */
static size_t check_logits(const char *dir, const float *logits, size_t n, int V, errs *e)
{
	char rel[512];
	size_t npos, ncols_all, bad = 0, i, k;
	int32_t *pos;
	float *full, *cols, *mine;

	snprintf(rel, sizeof(rel), "%s/logits_cols.f32", dir);
	cols = gold(rel, 4, &ncols_all);
	assert_int_equal(ncols_all, n * NCOLS);
	mine = malloc(n * NCOLS * sizeof(float));
	for (i = 0; i < n; i++)
		for (k = 0; k < NCOLS; k++)
			mine[i * NCOLS + k] = logits[i * V + logit_cols[k]];
	bad += compare("logits_cols", mine, cols, n * NCOLS, 1, ATOL, RTOL, &e->logits);
	free(mine);
	free(cols);

	snprintf(rel, sizeof(rel), "%s/logits_full_pos.i32", dir);
	pos = gold(rel, 4, &npos);
	snprintf(rel, sizeof(rel), "%s/logits_full.f32", dir);
	full = gold(rel, 4, &ncols_all);
	assert_int_equal(ncols_all, npos * (size_t)V);
	for (i = 0; i < npos; i++) {
		char what[64];
		assert_true(pos[i] >= 0 && (size_t)pos[i] < n);
		snprintf(what, sizeof(what), "logits_full[pos %d]", pos[i]);
		bad += compare(what, logits + (size_t)pos[i] * V, full + i * V, (size_t)V, 1, ATOL, RTOL,
			       &e->logits);
	}
	free(pos);
	free(full);
	return bad;
}

static size_t check_state(const char *dir, const char *conv_name, const char *ssm_name,
			  const ss_state *st, errs *e)
{
	char rel[512];
	size_t n, bad = 0;
	float *g;

	snprintf(rel, sizeof(rel), "%s/%s", dir, conv_name);
	g = gold(rel, 4, &n);
	assert_int_equal(n, ss_state_conv_len(&st->dims));
	bad += compare("conv", st->conv, g, n, 1, ATOL, RTOL, &e->conv);
	free(g);
	snprintf(rel, sizeof(rel), "%s/%s", dir, ssm_name);
	g = gold(rel, 4, &n);
	assert_int_equal(n, ss_state_ssm_len(&st->dims));
	bad += compare("ssm", st->ssm, g, n, 1, ATOL, RTOL, &e->ssm);
	free(g);
	return bad;
}

static const char *fmt_err(char *buf, double v)
{
	if (v < 0)
		return "   -    ";
	snprintf(buf, 16, "%.2e", v);
	return buf;
}

static void report(const char *model, const char *cas, const errs *e)
{
	char b[5][16];
	printf("  %-14s %-8s max|diff| logits %s hidden %s conv %s ssm %s logdecay(rel) %s\n", model,
	       cas, fmt_err(b[0], e->logits), fmt_err(b[1], e->hidden), fmt_err(b[2], e->conv),
	       fmt_err(b[3], e->ssm), fmt_err(b[4], e->logdecay_rel));
}

/* c1..c4, docB (from zero) and compose (from S): prefill with all rows. */
static size_t run_prefill_case(const tmodel *tm, const char *label, ss_forward_ctx *ctx,
			       const char *cas)
{
	const ss_model_config *c = &tm->m->cfg;
	const int V = c->vocab_padded;
	const int compose = strcmp(cas, "compose") == 0;
	char dir[256], rel[512];
	size_t n, k, bad = 0;
	int32_t *tok;
	float *logits, *hidden, *g;
	ss_state st;
	ss_forward_seq q;
	errs e = { -1, -1, -1, -1, -1 };
	char errmsg[SS_ERRMSG_MAX] = "";

	snprintf(dir, sizeof(dir), "%s/%s", tm->key, cas);
	snprintf(rel, sizeof(rel), "%s/tokens.i32", dir);
	tok = gold(rel, 4, &n);
	state_new(&st, tm->m);
	if (compose) {
		size_t nc, ns;
		float *sc, *ss;
		snprintf(rel, sizeof(rel), "%s/S_conv.f32", dir);
		sc = gold(rel, 4, &nc);
		snprintf(rel, sizeof(rel), "%s/S_ssm.f32", dir);
		ss = gold(rel, 4, &ns);
		assert_int_equal(nc, ss_state_conv_len(&st.dims));
		assert_int_equal(ns, ss_state_ssm_len(&st.dims));
		memcpy(st.conv, sc, nc * 4);
		memcpy(st.ssm, ss, ns * 4);
		free(sc);
		free(ss);
	}
	logits = malloc(n * (size_t)V * sizeof(float));
	hidden = malloc(n * (size_t)c->d_model * sizeof(float));
	assert_non_null(logits);
	q = (ss_forward_seq){ .tokens = tok, .n_tokens = (int64_t)n, .state = &st,
			      .logits = logits, .hidden = hidden };
	if (ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, errmsg) != 0)
		fail_msg("prefill: %s", errmsg);
	assert_int_equal(st.n_tokens, (int64_t)n);

	bad += check_logits(dir, logits, n, V, &e);
	snprintf(rel, sizeof(rel), "%s/hidden.f32", dir);
	g = gold(rel, 4, &k);
	assert_int_equal(k, n * c->d_model);
	bad += compare("hidden", hidden, g, k, 1, ATOL, RTOL, &e.hidden);
	free(g);
	if (compose)
		bad += check_state(dir, "final_conv.f32", "final_ssm.f32", &st, &e);
	else {
		bad += check_state(dir, "conv.f32", "ssm.f32", &st, &e);
		snprintf(rel, sizeof(rel), "%s/logdecay.f32", dir);
		g = gold(rel, 4, &k);
		assert_int_equal(k, ss_state_logdecay_len(&st.dims));
		e.logdecay_rel = 0.0;
		for (size_t i = 0; i < k; i++) {
			double r = fabs((double)st.logdecay[i] - g[i]) / fabs((double)g[i]);
			if (r > e.logdecay_rel)
				e.logdecay_rel = r;
		}
		bad += compare("logdecay", st.logdecay, g, k, 1, 0.0, RTOL, NULL);
		free(g);
	}
	report(label, cas, &e);
	ss_state_free(&st);
	free(logits);
	free(hidden);
	free(tok);
	return bad;
}

/* decode: c3's final state from our own prefill, then 16 single-token steps. */
static size_t run_decode_case(const tmodel *tm, const char *label, ss_forward_ctx *ctx)
{
	const ss_model_config *c = &tm->m->cfg;
	const int V = c->vocab_padded;
	char dir[256], rel[512];
	size_t n, n3, nm, k, bad = 0;
	int32_t *tok3, *in, *out;
	float *logits, *margin;
	ss_state st, *sp = &st;
	ss_forward_seq q;
	errs e = { -1, -1, -1, -1, -1 };
	char errmsg[SS_ERRMSG_MAX] = "";

	snprintf(rel, sizeof(rel), "%s/c3/tokens.i32", tm->key);
	tok3 = gold(rel, 4, &n3);
	state_new(&st, tm->m);
	q = (ss_forward_seq){ .tokens = tok3, .n_tokens = (int64_t)n3, .state = &st };
	if (ss_forward_prefill(ctx, &q, 1, SS_LOGITS_NONE, errmsg) != 0)
		fail_msg("prefill: %s", errmsg);

	snprintf(dir, sizeof(dir), "%s/decode", tm->key);
	snprintf(rel, sizeof(rel), "%s/in_tokens.i32", dir);
	in = gold(rel, 4, &n);
	snprintf(rel, sizeof(rel), "%s/out_tokens.i32", dir);
	out = gold(rel, 4, NULL);
	snprintf(rel, sizeof(rel), "%s/top2_margin.f32", dir);
	margin = gold(rel, 4, &nm);
	assert_int_equal(nm, n);
	logits = malloc(n * (size_t)V * sizeof(float));
	for (k = 0; k < n; k++) {
		float *lk = logits + k * V;
		int best = 0, v;
		if (ss_forward_decode(ctx, &sp, &in[k], 1, lk, errmsg) != 0)
			fail_msg("decode step %zu: %s", k, errmsg);
		for (v = 1; v < V; v++)
			if (lk[v] > lk[best])
				best = v;
		/* greedy tokens are comparable only where the top-2 margin is clear */
		if (margin[k] > 1e-4 && best != out[k]) {
			printf("    decode step %zu: argmax %d, golden %d\n", k, best, out[k]);
			bad++;
		}
	}
	assert_int_equal(st.n_tokens, (int64_t)(n3 + n));
	bad += check_logits(dir, logits, n, V, &e);
	bad += check_state(dir, "final_conv.f32", "final_ssm.f32", &st, &e);
	report(label, "decode", &e);
	ss_state_free(&st);
	free(logits);
	free(tok3);
	free(in);
	free(out);
	free(margin);
	return bad;
}

static void run_golden(const tmodel *tm, int n_threads, int ubatch)
{
	static const char *cases[] = { "c1", "c2", "c3", "c4", "docB", "compose" };
	ss_forward_ctx *ctx = NULL;
	char errmsg[SS_ERRMSG_MAX] = "", label[64];
	size_t bad = 0, i;

	if (!tm->m)
		skip();
	snprintf(label, sizeof(label), "%s t%d u%d", tm->name, n_threads, ubatch);
	if (ss_forward_ctx_init(&ctx, tm->m, n_threads, ubatch, errmsg) != 0)
		fail_msg("ctx: %s", errmsg);
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		bad += run_prefill_case(tm, label, ctx, cases[i]);
	bad += run_decode_case(tm, label, ctx);
	ss_forward_ctx_free(ctx);
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------ state */

/* Loaded with ss_model_load in setup(). t1-ss is the same weights in the
 * state-spaces layout (pytorch_model.bin). In test_forward, models[1] is a
 * generated model of t2's shape (its golden-case key is t1's: the texts and
 * tokens are the same), and t1-ss is not loaded; in test_shared_forward,
 * t1-hf is not loaded. */
static tmodel models[] = {
	{ "t1-hf", "t1", NULL, "" },
	{ "t2-hf", "t2", NULL, "" },
	{ "t1-ss", "t1", NULL, "" },
};

static void test_golden_t1_hf(void **unused)
{
	run_golden(&models[0], 2, 512);
}

static void test_golden_t2_hf(void **unused)
{
	run_golden(&models[1], 2, 512);
}

static void test_golden_t1_ss(void **unused)
{
	run_golden(&models[2], 2, 512);
}

/* One thread and a small ubatch (every case cut into several passes). */
static void test_golden_t2_small_ubatch(void **unused)
{
	run_golden(&models[1], 1, 100);
}

/* ------------------------------------------------------------ properties */

static int32_t *read_tokens(const char *key, const char *cas, size_t *n)
{
	char rel[512];
	snprintf(rel, sizeof(rel), "%s/%s/tokens.i32", key, cas);
	return gold(rel, 4, n);
}

static size_t cmp_states(const char *what, const ss_state *a, const ss_state *b)
{
	size_t bad = 0;
	printf("  %s\n", what);
	bad += compare("conv", a->conv, b->conv, ss_state_conv_len(&a->dims), 1, ATOL, RTOL, NULL);
	bad += compare("ssm", a->ssm, b->ssm, ss_state_ssm_len(&a->dims), 1, ATOL, RTOL, NULL);
	bad += compare("logdecay", a->logdecay, b->logdecay, ss_state_logdecay_len(&a->dims), 1,
		       0.0, RTOL, NULL);
	if (a->n_tokens != b->n_tokens) {
		printf("    n_tokens %lld vs %lld\n", (long long)a->n_tokens, (long long)b->n_tokens);
		bad++;
	}
	return bad;
}

/* Several documents in one call (with a ubatch that cuts some of them)
 * equal the same documents one call each; last-position logits too. */
static void test_batch_equals_single(void **unused)
{
	static const char *cases[] = { "c2", "c3", "c1", "docB", "c4" };
	enum { N = 5 };
	const tmodel *tm = &models[1];
	const ss_model *m = tm->m;
	const int V = m ? m->cfg.vocab_padded : 0;
	ss_forward_ctx *batch_ctx = NULL, *one_ctx = NULL;
	ss_state sb[N], so[N], empty;
	ss_forward_seq qb[N + 1], qo;
	int32_t *tok[N];
	size_t n[N], bad = 0;
	float *lb, *lo;
	int i, j;

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&batch_ctx, m, 2, 300, NULL), 0);
	assert_int_equal(ss_forward_ctx_init(&one_ctx, m, 2, 0, NULL), 0);
	lb = malloc((size_t)N * V * sizeof(float));
	lo = malloc((size_t)V * sizeof(float));
	for (i = 0; i < N; i++) {
		tok[i] = read_tokens(tm->key, cases[i], &n[i]);
		state_new(&sb[i], m);
		state_new(&so[i], m);
	}
	/* an empty sequence in the middle is allowed and produces nothing */
	state_new(&empty, m);
	for (i = 0, j = 0; i < N; i++) {
		if (i == 2)
			qb[j++] = (ss_forward_seq){ NULL, 0, &empty, lb, NULL, 0 };
		qb[j++] = (ss_forward_seq){ tok[i], (int64_t)n[i], &sb[i], lb + (size_t)i * V, NULL, 0 };
	}
	assert_int_equal(ss_forward_prefill(batch_ctx, qb, N + 1, SS_LOGITS_LAST, NULL), 0);
	assert_int_equal(empty.n_tokens, 0);
	ss_state_free(&empty);
	for (i = 0; i < N; i++) {
		char what[64];
		qo = (ss_forward_seq){ tok[i], (int64_t)n[i], &so[i], lo, NULL, 0 };
		assert_int_equal(ss_forward_prefill(one_ctx, &qo, 1, SS_LOGITS_LAST, NULL), 0);
		snprintf(what, sizeof(what), "batch vs single: %s", cases[i]);
		bad += cmp_states(what, &sb[i], &so[i]);
		bad += compare("last logits", lb + (size_t)i * V, lo, (size_t)V, 1, ATOL, RTOL, NULL);
	}
	for (i = 0; i < N; i++) {
		ss_state_free(&sb[i]);
		ss_state_free(&so[i]);
		free(tok[i]);
	}
	free(lb);
	free(lo);
	ss_forward_ctx_free(batch_ctx);
	ss_forward_ctx_free(one_ctx);
	assert_int_equal(bad, 0);
}

/* The same bits in a and b's ssm, conv and logdecay (dims of a). */
static void assert_state_arrays_equal(const ss_state *a, const ss_state *b)
{
	assert_memory_equal(a->ssm, b->ssm, ss_state_ssm_len(&a->dims) * sizeof(float));
	assert_memory_equal(a->conv, b->conv, ss_state_conv_len(&a->dims) * sizeof(float));
	assert_memory_equal(a->logdecay, b->logdecay, ss_state_logdecay_len(&a->dims) * sizeof(float));
}

/* One call of sequences of 0, 5, 16 (the chunked scan's least), 100 and
 * 700 tokens (cut by ubatch 300 into passes): fresh ones whose states hold
 * NaN and a stale n_tokens against the same from zeroed states, as a fresh
 * prefill promises (ss_forward_seq.fresh): the same bytes of conv, ssm,
 * logdecay and last logits, and the same n_tokens. */
static void fresh_case(const ss_model *m, const char *what)
{
	enum { N = 5 };
	static const int64_t len[N] = { 0, 5, 16, 100, 700 };
	const int V = m->cfg.vocab_padded;
	ss_forward_ctx *ctx = NULL;
	ss_state sf[N], sz[N];
	ss_forward_seq qf[N], qz[N];
	int32_t *tok = malloc(700 * sizeof *tok);
	float *lf = malloc((size_t)N * V * sizeof(float)), *lz = malloc((size_t)N * V * sizeof(float));
	uint64_t r = 7;

	assert_non_null(tok);
	for (int t = 0; t < 700; t++)
		tok[t] = (int32_t)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) %
			 m->cfg.vocab_size;
	assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, 300, NULL), 0);
	for (int i = 0; i < N; i++) {
		state_new(&sf[i], m);
		state_new(&sz[i], m);
		memset(sf[i].conv, 0xff, ss_state_conv_len(&sf[i].dims) * sizeof(float));
		memset(sf[i].ssm, 0xff, ss_state_ssm_len(&sf[i].dims) * sizeof(float));
		memset(sf[i].logdecay, 0xff, ss_state_logdecay_len(&sf[i].dims) * sizeof(float));
		sf[i].n_tokens = 12345;
		qf[i] = (ss_forward_seq){ .tokens = tok, .n_tokens = len[i], .state = &sf[i],
					  .logits = lf + (size_t)i * V, .fresh = 1 };
		qz[i] = (ss_forward_seq){ .tokens = tok, .n_tokens = len[i], .state = &sz[i],
					  .logits = lz + (size_t)i * V };
	}
	assert_int_equal(ss_forward_prefill(ctx, qf, N, SS_LOGITS_LAST, NULL), 0);
	assert_int_equal(ss_forward_prefill(ctx, qz, N, SS_LOGITS_LAST, NULL), 0);
	printf("  fresh against zeroed states: %s\n", what);
	for (int i = 0; i < N; i++) {
		assert_int_equal(sf[i].n_tokens, len[i]);
		assert_state_arrays_equal(&sf[i], &sz[i]);
		if (len[i])
			assert_memory_equal(lf + (size_t)i * V, lz + (size_t)i * V, (size_t)V * sizeof(float));
		ss_state_free(&sf[i]);
		ss_state_free(&sz[i]);
	}
	ss_forward_ctx_free(ctx);
	free(tok);
	free(lf);
	free(lz);
}

/* fresh_case on the t2-shaped model (Mamba-2) and a generated Mamba-1. */
static void test_fresh(void **unused)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], p[4096 + 32], errmsg[SS_ERRMSG_MAX] = "";
	ss_mkmodel_opts o;
	ss_model *m = NULL;
	(void)unused;
	if (!models[1].m)
		skip();
	fresh_case(models[1].m, "mamba2 (t2's shape)");
	snprintf(dir, sizeof dir, "%s/ss-test-fresh-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	ss_mkmodel_defaults(&o);
	ss_mkmodel_preset(&o, "m1");
	o.vocab_size = 300, o.pad_vocab_multiple = 8, o.seed = 5;
	assert_int_equal(ss_mkmodel_write(dir, &o, errmsg), 0);
	if (ss_model_load(&m, dir, errmsg))
		fail_msg("load: %s", errmsg);
	snprintf(p, sizeof p, "%s/config.json", dir);
	remove(p);
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	remove(p);
	remove(dir);
	fresh_case(m, "mamba1 (m1)");
	ss_model_free(m);
}

/* Prefill of u1 then u2 (from u1's state) equals prefill of u1·u2: states
 * and logits at every position; also cut inside the conv window (1 and 2
 * tokens) and token by token through decode. */
static void test_pieces_equal_whole(void **unused)
{
	const tmodel *tm = &models[0];
	const ss_model *m = tm->m;
	const int V = m ? m->cfg.vocab_padded : 0;
	size_t cuts[4] = { 1, 2, 3, 0 };
	ss_forward_ctx *ctx = NULL;
	ss_state whole, piece;
	ss_forward_seq q;
	int32_t *tok;
	size_t n, bad = 0, i, k;
	float *lw, *lp;

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, 0, NULL), 0);
	tok = read_tokens(tm->key, "docB", &n);
	cuts[3] = n / 2;
	lw = malloc(n * (size_t)V * sizeof(float));
	lp = malloc(n * (size_t)V * sizeof(float));
	state_new(&whole, m);
	q = (ss_forward_seq){ tok, (int64_t)n, &whole, lw, NULL, 0 };
	assert_int_equal(ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, NULL), 0);
	for (i = 0; i < sizeof(cuts) / sizeof(*cuts); i++) {
		char what[64];
		state_new(&piece, m);
		q = (ss_forward_seq){ tok, (int64_t)cuts[i], &piece, lp, NULL, 0 };
		assert_int_equal(ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, NULL), 0);
		q = (ss_forward_seq){ tok + cuts[i], (int64_t)(n - cuts[i]), &piece,
				      lp + cuts[i] * V, NULL, 0 };
		assert_int_equal(ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, NULL), 0);
		snprintf(what, sizeof(what), "pieces %zu + %zu vs whole", cuts[i], n - cuts[i]);
		bad += cmp_states(what, &piece, &whole);
		bad += compare("logits", lp, lw, n * (size_t)V, 1, ATOL, RTOL, NULL);
		ss_state_free(&piece);
	}
	/* token by token */
	state_new(&piece, m);
	for (k = 0; k < n; k++) {
		ss_state *sp = &piece;
		assert_int_equal(ss_forward_decode(ctx, &sp, &tok[k], 1, lp + k * V, NULL), 0);
	}
	bad += cmp_states("decode token by token vs whole", &piece, &whole);
	bad += compare("logits", lp, lw, n * (size_t)V, 1, ATOL, RTOL, NULL);
	ss_state_free(&piece);
	ss_state_free(&whole);
	free(lw);
	free(lp);
	free(tok);
	ss_forward_ctx_free(ctx);
	assert_int_equal(bad, 0);
}

/* Batched decode (several states, one token each) equals single decodes. */
static void test_decode_batch(void **unused)
{
	const tmodel *tm = &models[1];
	const ss_model *m = tm->m;
	const int V = m ? m->cfg.vocab_padded : 0;
	enum { N = 3 };
	ss_forward_ctx *ctx = NULL;
	ss_state a[N], b[N], *pa[N];
	int32_t *tok;
	size_t n, bad = 0;
	float *la, *lb;
	int i, k;

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, 0, NULL), 0);
	tok = read_tokens(tm->key, "c2", &n);
	la = malloc((size_t)N * V * sizeof(float));
	lb = malloc((size_t)V * sizeof(float));
	for (i = 0; i < N; i++) {
		state_new(&a[i], m);
		state_new(&b[i], m);
		pa[i] = &a[i];
	}
	for (k = 0; k + N <= (int)n; k++) {
		/* sequence i reads tok[k + i] at step k */
		assert_int_equal(ss_forward_decode(ctx, pa, tok + k, N, la, NULL), 0);
		for (i = 0; i < N; i++) {
			ss_state *sp = &b[i];
			assert_int_equal(ss_forward_decode(ctx, &sp, tok + k + i, 1, lb, NULL), 0);
			bad += compare("decode logits", la + (size_t)i * V, lb, (size_t)V, 1, ATOL, RTOL, NULL);
		}
	}
	for (i = 0; i < N; i++) {
		bad += cmp_states("batched decode vs single", &a[i], &b[i]);
		ss_state_free(&a[i]);
		ss_state_free(&b[i]);
	}
	free(la);
	free(lb);
	free(tok);
	ss_forward_ctx_free(ctx);
	assert_int_equal(bad, 0);
}

/* decode_begin/next/end on the CPU (the driver's decode steps) give the
 * bytes ss_forward_decode gives: logits, ids (their argmax), states. 20
 * sequences: more than one lm_head group; steps with logits and ids, ids
 * only, and neither. */
static void test_decode_bound_equals_decode(void **unused)
{
	const tmodel *tm = &models[1];
	const ss_model *m = tm->m;
	const int V = m ? m->cfg.vocab_padded : 0;
	enum { N = 20, STEPS = 6 };
	ss_forward_ctx *ctx = NULL;
	ss_state a[N], b[N], *pa[N], *pb[N];
	int32_t *tok, t[N], ids[N];
	size_t n;
	float *la, *lb;
	int i, k;

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, 0, NULL), 0);
	tok = read_tokens(tm->key, "c2", &n);
	la = malloc((size_t)N * V * sizeof(float));
	lb = malloc((size_t)N * V * sizeof(float));
	assert_true(la && lb && n > 0);
	for (i = 0; i < N; i++) {
		state_new(&a[i], m);
		state_new(&b[i], m);
		pa[i] = &a[i];
		pb[i] = &b[i];
	}
	assert_int_equal(ss_forward_decode_begin(ctx, pb, N, NULL), 0);
	for (k = 0; k < STEPS; k++) {
		const int mode = k % 3; /* 0: logits and ids, 1: ids, 2: neither */
		for (i = 0; i < N; i++)
			t[i] = tok[(size_t)(k + i) % n];
		assert_int_equal(ss_forward_decode(ctx, pa, t, N, mode < 2 ? la : NULL, NULL), 0);
		assert_int_equal(ss_forward_decode_next(ctx, t, mode == 0 ? lb : NULL,
							mode < 2 ? ids : NULL, V, NULL), 0);
		if (mode == 0)
			assert_memory_equal(la, lb, (size_t)N * V * sizeof(float));
		for (i = 0; mode < 2 && i < N; i++)
			assert_int_equal(ids[i], ss_argmax(la + (size_t)i * V, V));
	}
	assert_int_equal(ss_forward_decode_end(ctx, NULL), 0);
	for (i = 0; i < N; i++) {
		assert_int_equal(a[i].n_tokens, b[i].n_tokens);
		assert_state_arrays_equal(&a[i], &b[i]);
		ss_state_free(&a[i]);
		ss_state_free(&b[i]);
	}
	free(la);
	free(lb);
	free(tok);
	ss_forward_ctx_free(ctx);
}

/* ss_linear_rows_cpu (the deterministic decode's kernel): every output
 * equals a float64 dot product to rounding, and is the same bits whatever
 * the rows and columns a call covers (rows alone, all at once, a column
 * slice, an odd offset, runs of 8, 13, 2 and 14 rows), with a K that leaves
 * a tail of every length mod 16 and 8 and beta 0 or 1; W in bf16 and f16
 * gives the bits of W widened. With AVX-512 (linear_f32.c) the rows take
 * both kernels: up to 8 at a time the transposing one (groups of 32 and 16
 * rows of W), more in panels of 32 (37 rows: 32 and 5 left), of 16 (13 and
 * 14 rows, and K 2,100), none beyond K 4,096; 45 rows of W leave tails of
 * every tile. With AVX2, panels of 16 rows (the last of 5 here) against
 * groups of W's rows in tiles of 6 and, last, of 1 to 5 (the column slices
 * of 7 to 11); K 33,000 takes more scratch than a thread keeps. x packed
 * once by ss_linear_rows_xpack (the backend's prefill blocks) gives the
 * same bits through ss_linear_rows_cpu_xp, and is what it reads. */
static void test_linear_rows_invariant(void **unused)
{
	enum { M = 37, N = 45 };
	static const int64_t Ks[] = { 1, 13, 16, 37, 64, 100, 1030, 2100, 4200, 33000 };
	static const int runs[] = { 8, 13, 2, 14 }; /* sums to M */
	static const int cols[] = { 7, 8, 10, 11, 9 }; /* sums to N; 1, 2, 4, 5, 3 mod 6 */
	static const ss_dtype wts[3] = { SS_DTYPE_F32, SS_DTYPE_BF16, SS_DTYPE_F16 };
	static float all[M][N], one[M][N], init[M][N], wide[M][N], mid[M][N], run[M][N], sl[M][N],
		pk[M][N];
	uint64_t seed = 99;
	for (size_t ki = 0; ki < sizeof(Ks) / sizeof(*Ks); ki++)
		for (int wi = 0; wi < 3; wi++) {
			const int64_t K = Ks[ki];
			const ss_dtype weights_dtype = wts[wi];
			const size_t esz = ss_dtype_size(weights_dtype);
			float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
			char *Wt = malloc(esz * N * K);
			assert_true(x && W && Wt);
			for (int64_t i = 0; i < M * K; i++)
				x[i] = (float)((ss_splitmix64(&seed) >> 40) * (2.0 / 16777216.0) - 1.0);
			for (int64_t i = 0; i < N * K; i++)
				W[i] = (float)((ss_splitmix64(&seed) >> 40) * (2.0 / 16777216.0) - 1.0);
			/* W in weights_dtype, and W set to its widened values */
			ss_from_f32(Wt, weights_dtype, W, (size_t)(N * K));
			ss_to_f32(W, Wt, weights_dtype, (size_t)(N * K));
			for (int beta = 0; beta < 2; beta++) {
				for (int m = 0; m < M; m++)
					for (int n = 0; n < N; n++)
						init[m][n] = 0.25f * (float)(m - n);
				memcpy(all, init, sizeof(all));
				memcpy(one, init, sizeof(one));
				memcpy(wide, init, sizeof(wide));
				memcpy(mid, init, sizeof(mid));
				memcpy(run, init, sizeof(run));
				memcpy(sl, init, sizeof(sl));
				assert_int_equal(ss_linear_rows_cpu(&all[0][0], N, x, K, Wt,
								    weights_dtype, M, N, K,
								    (float)beta), 0);
				assert_int_equal(ss_linear_rows_cpu(&wide[0][0], N, x, K, W, SS_DTYPE_F32, M,
								    N, K, (float)beta), 0);
				assert_memory_equal(all, wide, sizeof(all));
				/* row by row, each in column slices of 3 (odd offsets in W) */
				for (int m = 0; m < M; m++)
					for (int n0 = 0; n0 < N; n0 += 3)
						assert_int_equal(ss_linear_rows_cpu(&one[m][n0], N, x + m * K, K,
										    Wt + (size_t)n0 * K * esz, weights_dtype,
										    1, N - n0 < 3 ? N - n0 : 3, K,
										    (float)beta), 0);
				assert_memory_equal(all, one, sizeof(all));
				/* rows 1 .. M - 2 in one call: rows in other places of their tiles */
				assert_int_equal(ss_linear_rows_cpu(&mid[1][0], N, x + K, K, Wt,
								    weights_dtype, M - 2, N,
								    K, (float)beta), 0);
				assert_memory_equal(mid[1], all[1], sizeof(float) * (M - 2) * N);
				/* runs of rows, each through another kernel or panel width */
				for (int r = 0, m0 = 0; r < 4; m0 += runs[r++])
					assert_int_equal(ss_linear_rows_cpu(&run[m0][0], N,
									    x + m0 * K, K, Wt, weights_dtype,
									    runs[r], N, K, (float)beta), 0);
				assert_memory_equal(all, run, sizeof(all));
				/* all rows, in column slices of every width mod 6 */
				for (int c = 0, n0 = 0; c < 5; n0 += cols[c++])
					assert_int_equal(ss_linear_rows_cpu(&sl[0][n0], N, x, K,
									    Wt + (size_t)n0 * K * esz, weights_dtype,
									    M, cols[c], K, (float)beta), 0);
				assert_memory_equal(all, sl, sizeof(all));
				/* x packed once (ss_linear_rows_xpack, malloc's alignment),
				 * then the same column slices from it: the same bits; and
				 * the packed rows do come from xp (zeroed: y = beta·y) */
				const int64_t nxp = ss_linear_rows_xpack_floats(M, K);
				float *xp = nxp ? malloc(sizeof(float) * (size_t)nxp) : NULL;
				assert_true(!nxp || xp);
				ss_linear_rows_xpack(xp, x, K, M, K);
				memcpy(pk, init, sizeof(pk));
				for (int c = 0, n0 = 0; c < 5; n0 += cols[c++])
					assert_int_equal(ss_linear_rows_cpu_xp(&pk[0][n0], N, x, K, xp,
									       Wt + (size_t)n0 * K * esz,
									       weights_dtype, M, cols[c], K,
									       (float)beta), 0);
				assert_memory_equal(all, pk, sizeof(all));
				if (nxp) {
					memset(xp, 0, sizeof(float) * (size_t)nxp);
					memcpy(pk, init, sizeof(pk));
					assert_int_equal(ss_linear_rows_cpu_xp(&pk[0][0], N, x, K, xp, Wt,
									       weights_dtype, M, N, K,
									       (float)beta), 0);
					assert_true(pk[0][0] == (beta ? init[0][0] : 0.0f));
					assert_true(all[0][0] != pk[0][0]);
				}
				free(xp);
				for (int m = 0; m < M; m++)
					for (int n = 0; n < N; n++) {
						double d = beta ? init[m][n] : 0.0;
						for (int64_t k = 0; k < K; k++)
							d += (double)W[n * K + k] * x[m * K + k];
						assert_true(fabs(all[m][n] - d) <= 1e-5 * (1.0 + (double)K));
					}
			}
			free(x);
			free(W);
			free(Wt);
		}
}

/* Deterministic decode (ss_forward_ctx_set_deterministic): a sequence's
 * logits and state after each step are the same bytes whether it is decoded
 * alone on one thread, in a batch of 5 on two threads, or in a batch of 3
 * in another order (other places in the GEMM tiles) on two threads: what
 * batched ss-decode relies on for its bytes to equal one sequence at a
 * time. On t1 (f32 weights), t1 held in bf16, and the generated t2-shaped
 * model (bf16, untied lm_head). Each sequence starts from the state of its
 * own prompt (a deterministic prefill) and reads its own tokens. */
static void decode_det_case(const ss_model *m, const char *what)
{
	const int V = m->cfg.vocab_padded;
	enum { N = 5, STEPS = 4, PLEN = 6 };
	static const int sub[3] = { 4, 1, 2 }; /* the batch of 3, reversed-ish */
	ss_forward_ctx *c1 = NULL, *c2 = NULL;
	ss_state a[N], b[N], c[N], *pb[N], *pc[3];
	int32_t prompt[N][PLEN], tb[N], tc[3];
	float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)N * V * sizeof(float)),
	      *lc = malloc((size_t)3 * V * sizeof(float));
	uint64_t seed = 7;

	assert_true(la && lb && lc);
	assert_int_equal(ss_forward_ctx_init(&c1, m, 1, 0, NULL), 0);
	assert_int_equal(ss_forward_ctx_init(&c2, m, 2, 0, NULL), 0);
	assert_int_equal(ss_forward_ctx_set_deterministic(c1, 1), 0);
	assert_int_equal(ss_forward_ctx_set_deterministic(c2, 1), 0);
	for (int i = 0; i < N; i++) {
		state_new(&a[i], m);
		for (int k = 0; k < PLEN; k++)
			prompt[i][k] = (int32_t)(ss_splitmix64(&seed) % 1000);
		ss_forward_seq q = { prompt[i], PLEN - i % 3, &a[i], NULL, NULL, 0 };
		assert_int_equal(ss_forward_prefill(c1, &q, 1, SS_LOGITS_NONE, NULL), 0);
		assert_int_equal(ss_state_copy(&b[i], &a[i]), 0);
		assert_int_equal(ss_state_copy(&c[i], &a[i]), 0);
		pb[i] = &b[i];
	}
	for (int j = 0; j < 3; j++)
		pc[j] = &c[sub[j]];
	for (int k = 0; k < STEPS; k++) {
		for (int i = 0; i < N; i++)
			tb[i] = prompt[i][k];
		for (int j = 0; j < 3; j++)
			tc[j] = tb[sub[j]];
		assert_int_equal(ss_forward_decode(c2, pb, tb, N, lb, NULL), 0);
		assert_int_equal(ss_forward_decode(c2, pc, tc, 3, lc, NULL), 0);
		for (int i = 0; i < N; i++) {
			ss_state *sa = &a[i];
			assert_int_equal(ss_forward_decode(c1, &sa, &tb[i], 1, la, NULL), 0);
			if (memcmp(la, lb + (size_t)i * V, (size_t)V * sizeof(float)))
				fail_msg("%s: step %d sequence %d: batch of %d, 2 threads, differs from alone",
					 what, k, i, N);
			for (int j = 0; j < 3; j++)
				if (sub[j] == i && memcmp(la, lc + (size_t)j * V, (size_t)V * sizeof(float)))
					fail_msg("%s: step %d sequence %d: place %d of a batch of 3 differs from alone",
						 what, k, i, j);
		}
	}
	for (int i = 0; i < N; i++) {
		assert_state_arrays_equal(&a[i], &b[i]);
		ss_state_free(&a[i]);
		ss_state_free(&b[i]);
		ss_state_free(&c[i]);
	}
	free(la);
	free(lb);
	free(lc);
	ss_forward_ctx_free(c1);
	ss_forward_ctx_free(c2);
}

static void test_decode_deterministic_batch(void **unused)
{
	ss_model *m16 = NULL;
	const ss_model_opts o = { .flags = SS_MODEL_WEIGHTS_DTYPE, .weights_dtype = SS_DTYPE_BF16 };
	char errmsg[SS_ERRMSG_MAX] = "";

	if (!models[0].m)
		skip();
	decode_det_case(models[0].m, "t1 f32");
	if (ss_model_load_opts(&m16, models[0].dir, &o, errmsg))
		fail_msg("%s", errmsg);
	decode_det_case(m16, "t1 bf16");
	ss_model_free(m16);
	if (models[1].m)
		decode_det_case(models[1].m, models[1].name);
}

/* Deterministic uniform floats in [lo, hi). */
static float urand(uint64_t *s, float lo, float hi)
{
	return lo + (hi - lo) * (float)((ss_splitmix64(s) >> 40) * (1.0 / 16777216.0));
}

/* One sequence of n tokens through ss_ssm_scan_cpu (ss_ops.h). */
static int scan1(const ss_scan_dims *d, int64_t n, const float *x, ptrdiff_t ldx, const float *B,
		 ptrdiff_t ldb, const float *C, ptrdiff_t ldc, const float *dt, ptrdiff_t lddt,
		 const float *A_log, const float *D, float *ssm, float *y, ptrdiff_t ldy,
		 float *logdecay)
{
	const int64_t seq_start[2] = { 0, n };
	return ss_ssm_scan_cpu(d, seq_start, 1, x, ldx, B, ldb, C, ldc, dt, lddt, A_log, D, ssm, 0,
			       y, ldy, logdecay, 0);
}

/* Prop. 1 for one layer's scan: with x(u) the state reached from zero and
 * a(u) = A·Σdt its log-decay, x(u1·u2) = exp(a(u2))·x(u1) + x(u2).
 * Also: the whole-layer entry point equals itself cut at any token, y and all. */
static void test_scan_prop1(void **unused)
{
	const ss_scan_dims d = { .nheads = 6, .headdim = 8, .d_state = 24, .ngroups = 3 };
	enum { N1 = 37, N2 = 53, NT = N1 + N2 };
	const int H = 6, P = 8, S = 24, G = 3, XW = H * P, BW = G * S;
	const size_t SL = (size_t)H * P * S;
	float *x = malloc(sizeof(float) * NT * XW), *B = malloc(sizeof(float) * NT * BW);
	float *C = malloc(sizeof(float) * NT * BW), *dt = malloc(sizeof(float) * NT * H);
	float *y = malloc(sizeof(float) * NT * XW), *y2 = malloc(sizeof(float) * NT * XW);
	float *s12 = calloc(SL, 4), *s1 = calloc(SL, 4), *s2 = calloc(SL, 4), *comp = malloc(SL * 4);
	float A_log[6], D[6], ld12[6] = { 0 }, ld1[6] = { 0 }, ld2[6] = { 0 };
	uint64_t seed = 42;
	size_t i, bad = 0;
	int h;

	for (i = 0; i < (size_t)NT * XW; i++)
		x[i] = urand(&seed, -2, 2);
	for (i = 0; i < (size_t)NT * BW; i++) {
		B[i] = urand(&seed, -1, 1);
		C[i] = urand(&seed, -1, 1);
	}
	for (i = 0; i < (size_t)NT * H; i++)
		dt[i] = urand(&seed, 0.001f, 0.2f);
	for (h = 0; h < H; h++) {
		A_log[h] = logf(urand(&seed, 1, 16));
		D[h] = urand(&seed, 0.5f, 1.5f);
	}
	assert_int_equal(scan1(&d, NT, x, XW, B, BW, C, BW, dt, H, A_log, D, s12, y, XW, ld12), 0);
	assert_int_equal(scan1(&d, N1, x, XW, B, BW, NULL, 0, dt, H, A_log, NULL, s1, NULL, 0, ld1), 0);
	assert_int_equal(scan1(&d, N2, x + N1 * XW, XW, B + N1 * BW, BW, NULL, 0, dt + N1 * H,
					 H, A_log, NULL, s2, NULL, 0, ld2), 0);
	for (h = 0; h < H; h++) {
		const float decay = expf(ld2[h]);
		for (i = 0; i < (size_t)P * S; i++) {
			const size_t o = (size_t)h * P * S + i;
			comp[o] = decay * s1[o] + s2[o];
		}
	}
	printf("  Prop. 1: state(u1.u2) vs exp(a(u2))*state(u1) + state(u2)\n");
	bad += compare("ssm", comp, s12, SL, 1, 1e-6, 1e-5, NULL);
	for (h = 0; h < H; h++)
		ld1[h] += ld2[h];
	bad += compare("logdecay", ld1, ld12, (size_t)H, 1, 0.0, 1e-6, NULL);

	/* continuing from u1's state reproduces the whole run, y included */
	memset(s1, 0, SL * 4);
	assert_int_equal(scan1(&d, N1, x, XW, B, BW, C, BW, dt, H, A_log, D, s1, y2, XW, NULL), 0);
	assert_int_equal(scan1(&d, N2, x + N1 * XW, XW, B + N1 * BW, BW, C + N1 * BW, BW,
					 dt + N1 * H, H, A_log, D, s1, y2 + N1 * XW, XW, NULL), 0);
	bad += compare("ssm (continued)", s1, s12, SL, 1, 0.0, 0.0, NULL);
	bad += compare("y (continued)", y2, y, (size_t)NT * XW, 1, 0.0, 0.0, NULL);

	/* contract: bad dims are refused */
	{
		ss_scan_dims bd = d;
		bd.ngroups = 4; /* 6 heads do not split into 4 groups */
		assert_int_equal(scan1(&bd, NT, x, XW, B, BW, C, BW, dt, H, A_log, D, s12, y, XW, NULL),
				 SS_ERR_INVALID);
		assert_int_equal(scan1(&d, NT, x, XW - 1, B, BW, C, BW, dt, H, A_log, D, s12, y, XW, NULL),
				 SS_ERR_INVALID);
	}
	free(x); free(B); free(C); free(dt); free(y); free(y2);
	free(s12); free(s1); free(s2); free(comp);
	assert_int_equal(bad, 0);
}

/* 1 thread and 2 threads give the same results (splits change no sums). */
static void test_threads_agree(void **unused)
{
	const tmodel *tm = &models[1];
	const ss_model *m = tm->m;
	const int V = m ? m->cfg.vocab_padded : 0;
	ss_forward_ctx *c1 = NULL, *c2 = NULL;
	ss_state s1, s2;
	ss_forward_seq q;
	int32_t *tok;
	size_t n, bad = 0;
	float *l1, *l2;

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&c1, m, 1, 0, NULL), 0);
	assert_int_equal(ss_forward_ctx_init(&c2, m, 2, 0, NULL), 0);
	tok = read_tokens(tm->key, "c3", &n);
	l1 = malloc(n * (size_t)V * sizeof(float));
	l2 = malloc(n * (size_t)V * sizeof(float));
	state_new(&s1, m);
	state_new(&s2, m);
	q = (ss_forward_seq){ tok, (int64_t)n, &s1, l1, NULL, 0 };
	assert_int_equal(ss_forward_prefill(c1, &q, 1, SS_LOGITS_ALL, NULL), 0);
	q = (ss_forward_seq){ tok, (int64_t)n, &s2, l2, NULL, 0 };
	assert_int_equal(ss_forward_prefill(c2, &q, 1, SS_LOGITS_ALL, NULL), 0);
	bad += cmp_states("1 thread vs 2 threads", &s1, &s2);
	bad += compare("logits", l1, l2, n * (size_t)V, 1, ATOL, RTOL, NULL);
	ss_state_free(&s1);
	ss_state_free(&s2);
	free(l1);
	free(l2);
	free(tok);
	ss_forward_ctx_free(c1);
	ss_forward_ctx_free(c2);
	assert_int_equal(bad, 0);
}

/* Bad input is refused before any state changes. */
static void test_errors(void **unused)
{
	const ss_model *m = models[0].m;
	ss_forward_ctx *ctx = NULL;
	ss_state st, other;
	ss_state_dims d;
	ss_forward_seq q[2];
	int32_t tok[3] = { 1, 2, 3 };
	char errmsg[SS_ERRMSG_MAX] = "";

	if (!m)
		skip();
	assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, 0, errmsg), 0);
	state_new(&st, m);

	tok[1] = m->cfg.vocab_padded;
	q[0] = (ss_forward_seq){ tok, 3, &st, NULL, NULL, 0 };
	assert_int_equal(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), SS_ERR_INVALID);
	assert_non_null(strstr(errmsg, "position 1"));
	tok[1] = -1;
	assert_int_equal(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), SS_ERR_INVALID);
	tok[1] = 2;

	q[1] = q[0]; /* the same state twice */
	assert_int_equal(ss_forward_prefill(ctx, q, 2, SS_LOGITS_NONE, errmsg), SS_ERR_INVALID);

	snprintf(st.fingerprint, sizeof(st.fingerprint), "another-model");
	assert_int_equal(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), SS_ERR_MISMATCH);
	st.fingerprint[0] = 0;

	d = st.dims;
	d.d_state *= 2;
	assert_int_equal(ss_state_alloc(&other, &d), 0);
	q[0].state = &other;
	assert_int_equal(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), SS_ERR_MISMATCH);
	assert_non_null(strstr(errmsg, "dims"));
	ss_state_free(&other);

	/* nothing was touched */
	assert_int_equal(st.n_tokens, 0);
	for (size_t i = 0; i < ss_state_ssm_len(&st.dims); i++)
		assert_true(st.ssm[i] == 0.0f);

	/* a good call sets the fingerprint; empty input is fine */
	q[0] = (ss_forward_seq){ tok, 3, &st, NULL, NULL, 0 };
	assert_int_equal(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), 0);
	assert_string_equal(st.fingerprint, m->fingerprint);
	assert_int_equal(st.n_tokens, 3);
	assert_int_equal(ss_forward_prefill(ctx, q, 0, SS_LOGITS_ALL, errmsg), 0);
	assert_int_equal(ss_forward_decode(ctx, NULL, NULL, 0, NULL, errmsg), 0);
	ss_state_free(&st);
	ss_forward_ctx_free(ctx);

	/* a model whose matrices claim an unknown dtype is refused */
	ss_model bad = *m;
	bad.weights_dtype = (ss_dtype)9;
	assert_int_equal(ss_forward_ctx_init(&ctx, &bad, 1, 0, errmsg), SS_ERR_INVALID);
	assert_non_null(strstr(errmsg, "dtype"));
}

/* ss_forward_batch_size: a sequence costs its state's f32 bytes plus extra;
 * the count is floored and clamped to [1, max]. */
static void test_batch_size(void **unused)
{
	const ss_model *m = models[0].m;
	if (!m)
		skip();
	ss_state st;
	state_new(&st, m);
	const double state = (double)(ss_state_ssm_len(&st.dims) + ss_state_conv_len(&st.dims) +
				      ss_state_logdecay_len(&st.dims)) * sizeof(float);
	ss_state_free(&st);
	const double per = state + 1000;
	assert_int_equal(ss_forward_batch_size(m, 1000, 7 * per, 100), 7);
	assert_int_equal(ss_forward_batch_size(m, 1000, 8 * per - 1, 100), 7);
	assert_int_equal(ss_forward_batch_size(m, 1000, 8 * per, 100), 8);
	assert_int_equal(ss_forward_batch_size(m, 1000, per / 2, 100), 1);
	assert_int_equal(ss_forward_batch_size(m, 1000, 1e15, 100), 100);
	assert_int_equal(ss_forward_batch_size(m, 0, 3 * state, 100), 3);
}

/* State extraction never touches lm_head: a model loaded without it gives
 * the same states and hidden rows, and refuses logits. */
static void test_no_lm_head(void **unused)
{
	const ss_model *full = models[1].m;
	ss_model *m = NULL;
	ss_model_opts o = { .flags = SS_MODEL_SKIP_LM_HEAD };
	ss_forward_ctx *cf = NULL, *cn = NULL;
	ss_state a, b;
	ss_forward_seq q;
	char dir[8192], errmsg[SS_ERRMSG_MAX] = "";
	int32_t *tok;
	size_t n, bad = 0;
	float ha[96], hb[96], lg[1];

	if (!full)
		skip();
	snprintf(dir, sizeof(dir), "%s", models[1].dir);
	if (ss_model_load_opts(&m, dir, &o, errmsg) != 0)
		fail_msg("%s", errmsg);
	assert_null(m->lm_head); /* t2 is untied */
	assert_int_equal(m->cfg.d_model, 96);
	assert_int_equal(ss_forward_ctx_init(&cf, full, 2, 0, NULL), 0);
	assert_int_equal(ss_forward_ctx_init(&cn, m, 2, 0, errmsg), 0);
	tok = read_tokens(models[1].key, "c3", &n);
	state_new(&a, full);
	state_new(&b, m);
	q = (ss_forward_seq){ tok, (int64_t)n, &a, NULL, ha, 0 };
	assert_int_equal(ss_forward_prefill(cf, &q, 1, SS_LOGITS_LAST, NULL), 0);
	q = (ss_forward_seq){ tok, (int64_t)n, &b, NULL, hb, 0 };
	assert_int_equal(ss_forward_prefill(cn, &q, 1, SS_LOGITS_LAST, NULL), 0);
	bad += cmp_states("no lm_head vs full model", &b, &a);
	bad += compare("hidden", hb, ha, 96, 1, 0.0, 0.0, NULL);
	q.logits = lg;
	assert_int_equal(ss_forward_prefill(cn, &q, 1, SS_LOGITS_LAST, errmsg), SS_ERR_INVALID);
	assert_non_null(strstr(errmsg, "lm_head"));
	ss_state_free(&a);
	ss_state_free(&b);
	free(tok);
	ss_forward_ctx_free(cf);
	ss_forward_ctx_free(cn);
	ss_model_free(m);
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------ main */

/* --------------------------------------------------- weights in 16 bits */

/* Next-token NLL (nats) over the golden cases c2, c3, c4, docB of tm's key,
 * from the model at tm->dir loaded with its matrices in weights_dtype (-1: the
 * checkpoint's), by prefill or by decode steps: mean |ours - golden
 * nll.f32| and max, over all positions. */
static void nll_vs_golden(const tmodel *tm, int weights_dtype, int decode, double *mean,
			  double *max)
{
	static const char *cases[] = { "c2", "c3", "c4", "docB" };
	ss_model_opts o = { .flags = weights_dtype >= 0 ? SS_MODEL_WEIGHTS_DTYPE : 0,
			    .weights_dtype = weights_dtype >= 0 ? (ss_dtype)weights_dtype
							       : SS_DTYPE_F32 };
	char errmsg[SS_ERRMSG_MAX] = "", rel[512];
	ss_forward_ctx *ctx;
	ss_model *m;
	size_t i, n, ng, t, count = 0;
	double sum = 0;

	if (!tm->dir[0])
		skip();
	if (ss_model_load_opts(&m, tm->dir, &o, errmsg) || ss_forward_ctx_init(&ctx, m, 2, 0, errmsg))
		fail_msg("%s: %s", tm->dir, errmsg);
	if (weights_dtype >= 0)
		assert_int_equal(m->weights_dtype, weights_dtype);
	*max = 0;
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		const int V = m->cfg.vocab_padded;
		int32_t *tok = read_tokens(tm->key, cases[i], &n);
		float *logits = malloc(n * (size_t)V * sizeof(float)), *g;
		ss_state st, *sp = &st;
		ss_forward_seq q;
		state_new(&st, m);
		q = (ss_forward_seq){ .tokens = tok, .n_tokens = (int64_t)n, .state = &st,
				      .logits = logits };
		/* prefill (the GEMM path) or token by token (the decode matvec) */
		if (decode) {
			for (t = 0; t < n; t++)
				if (ss_forward_decode(ctx, &sp, &tok[t], 1, logits + t * (size_t)V,
						      errmsg) != 0)
					fail_msg("decode: %s", errmsg);
		} else if (ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, errmsg) != 0)
			fail_msg("prefill: %s", errmsg);
		snprintf(rel, sizeof(rel), "%s/%s/nll.f32", tm->key, cases[i]);
		g = gold(rel, 4, &ng);
		assert_int_equal(ng, n - 1);
		for (t = 0; t + 1 < n; t++) {
			const float *l = logits + t * (size_t)V;
			double mx = l[0], se = 0, d;
			for (int v = 1; v < V; v++)
				mx = l[v] > mx ? l[v] : mx;
			for (int v = 0; v < V; v++)
				se += exp((double)l[v] - mx);
			d = fabs(mx + log(se) - l[tok[t + 1]] - g[t]);
			sum += d;
			*max = d > *max ? d : *max;
			count++;
		}
		ss_state_free(&st);
		free(logits);
		free(tok);
		free(g);
	}
	*mean = sum / (double)count;
	ss_forward_ctx_free(ctx);
	ss_model_free(m);
}

/* Tolerance of the NLL with the weight matrices rounded to 16 bits, against
 * golden (f32 weights), per position in nats: the mean over c2, c3, c4 and
 * docB of t1 within NLL16_MEAN, every position within NLL16_MAX, about 3x
 * what was measured: t1 with bf16 matrices mean 7.1e-4, max 3.6e-3; f16
 * mean 9.0e-5, max 5.4e-4 (t1's NLL is about 10.8 nats). The f32 path, and
 * t2 (a bf16 checkpoint) as stored or widened, stay within 1e-5 (measured
 * mean 2.4e-7, max 1.0e-6). */
#define NLL16_MEAN 2e-3
#define NLL16_MAX 1e-2
#define NLL32_TOL 1e-5

static void check_nll16(const tmodel *tm, int weights_dtype, double mean_tol, double max_tol)
{
	for (int decode = 0; decode < 2; decode++) {
		double mean, max;
		nll_vs_golden(tm, weights_dtype, decode, &mean, &max);
		printf("  %s weights %s, %s: NLL vs golden: mean |diff| %.2e, max %.2e nats\n",
		       tm->name, weights_dtype < 0 ? "as stored" : ss_dtype_name((ss_dtype)weights_dtype),
		       decode ? "decode" : "prefill", mean, max);
		assert_true(mean <= mean_tol);
		assert_true(max <= max_tol);
	}
}

/* t1 (f32) with its matrices held in f32, bf16 and f16 (--weights-dtype). */
static void test_nll_weights_dtype(void **unused)
{
	check_nll16(&models[0], SS_DTYPE_F32, NLL32_TOL, NLL32_TOL);
	check_nll16(&models[0], SS_DTYPE_BF16, NLL16_MEAN, NLL16_MAX);
	check_nll16(&models[0], SS_DTYPE_F16, NLL16_MEAN, NLL16_MAX);
}

/* t2 (a bf16 checkpoint): kept bf16 (the default) or widened to f32 at load,
 * both the golden computation's weights exactly: the golden tolerance. */
static void test_nll_t2_weights_dtype(void **unused)
{
	check_nll16(&models[1], -1, NLL32_TOL, NLL32_TOL);
	check_nll16(&models[1], SS_DTYPE_F32, NLL32_TOL, NLL32_TOL);
}

/* ------------------------------------------------- Mamba-1, self-contained */

/* A whole Mamba-1 model in double (../shared/golden-mamba1/README.md §2, written from
 * the equations, not from the ops): tokens [n] from the zero state; fills
 * logits [n][V], hidden [n][d_model], and the final state (conv, ssm,
 * logdecay as ss_state lays them out). Weights widened from m. */
static void m1_reference(const ss_model *m, const int32_t *tok, int n, double *logits,
			 double *hidden, double *conv, double *ssm, double *logdecay)
{
	const ss_model_config *c = &m->cfg;
	const int dm = c->d_model, di = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
	const int V = c->vocab_padded, xo = R + 2 * N;
	float *emb = malloc((size_t)V * dm * sizeof(float)), *head = malloc((size_t)V * dm * sizeof(float));
	float *inp = malloc((size_t)2 * di * dm * sizeof(float)), *outp = malloc((size_t)dm * di * sizeof(float));
	double *h = calloc((size_t)n * dm, sizeof(double)), *u = malloc((size_t)dm * sizeof(double));
	double *xz = malloc((size_t)2 * di * sizeof(double)), *xc = malloc((size_t)di * sizeof(double));
	double *xd = malloc((size_t)xo * sizeof(double)), *y = malloc((size_t)di * sizeof(double));
	assert_true(emb && head && inp && outp && h && u && xz && xc && xd && y);
	ss_to_f32(emb, m->embedding, m->weights_dtype, (size_t)V * dm);
	ss_to_f32(head, m->lm_head, m->weights_dtype, (size_t)V * dm);
	for (int t = 0; t < n; t++)
		for (int i = 0; i < dm; i++)
			h[(size_t)t * dm + i] = emb[(size_t)tok[t] * dm + i];
	memset(conv, 0, (size_t)c->n_layer * di * (K - 1) * sizeof(double));
	memset(ssm, 0, (size_t)c->n_layer * di * N * sizeof(double));
	memset(logdecay, 0, (size_t)c->n_layer * di * N * sizeof(double));
	for (int l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &m->layers[l];
		double *cs = conv + (size_t)l * di * (K - 1), *S = ssm + (size_t)l * di * N;
		double *ld = logdecay + (size_t)l * di * N;
		ss_to_f32(inp, L->in_proj, m->weights_dtype, (size_t)2 * di * dm);
		ss_to_f32(outp, L->out_proj, m->weights_dtype, (size_t)dm * di);
		for (int t = 0; t < n; t++) {
			double *ht = h + (size_t)t * dm, ss2 = 0;
			for (int i = 0; i < dm; i++)
				ss2 += ht[i] * ht[i];
			for (int i = 0; i < dm; i++)
				u[i] = ht[i] / sqrt(ss2 / dm + c->eps) * L->norm[i];
			for (int o = 0; o < 2 * di; o++) {
				double a = 0;
				for (int i = 0; i < dm; i++)
					a += (double)inp[(size_t)o * dm + i] * u[i];
				xz[o] = a; /* x | z */
			}
			for (int d = 0; d < di; d++) {
				double a = L->conv_b[d];
				for (int k = 0; k < K - 1; k++)
					a += L->conv_w[(size_t)d * K + k] * cs[(size_t)d * (K - 1) + k];
				a += L->conv_w[(size_t)d * K + K - 1] * xz[d];
				for (int k = 0; k < K - 2; k++)
					cs[(size_t)d * (K - 1) + k] = cs[(size_t)d * (K - 1) + k + 1];
				cs[(size_t)d * (K - 1) + K - 2] = xz[d];
				xc[d] = a / (1 + exp(-a));
			}
			for (int o = 0; o < xo; o++) {
				double a = 0;
				for (int d = 0; d < di; d++)
					a += (double)L->x_proj[(size_t)o * di + d] * xc[d];
				xd[o] = a; /* dt_low | B | C */
			}
			for (int d = 0; d < di; d++) {
				double a = L->dt_bias[d];
				for (int r = 0; r < R; r++)
					a += (double)L->dt_proj[(size_t)d * R + r] * xd[r];
				const double dt = log1p(exp(a));
				double acc = 0;
				for (int k = 0; k < N; k++) {
					const double A = -exp((double)L->A_log[(size_t)d * N + k]);
					double *e = &S[(size_t)d * N + k];
					*e = exp(dt * A) * *e + dt * xd[R + k] * xc[d];
					acc += *e * xd[R + N + k];
					ld[(size_t)d * N + k] += A * dt;
				}
				const double z = xz[di + d];
				y[d] = (acc + L->D[d] * xc[d]) * (z / (1 + exp(-z)));
			}
			for (int i = 0; i < dm; i++) {
				double a = 0;
				for (int d = 0; d < di; d++)
					a += (double)outp[(size_t)i * di + d] * y[d];
				ht[i] += a;
			}
		}
	}
	for (int t = 0; t < n; t++) {
		const double *ht = h + (size_t)t * dm;
		double ss2 = 0;
		for (int i = 0; i < dm; i++)
			ss2 += ht[i] * ht[i];
		for (int i = 0; i < dm; i++)
			hidden[(size_t)t * dm + i] = ht[i] / sqrt(ss2 / dm + c->eps) * m->norm_f[i];
		for (int v = 0; v < V; v++) {
			double a = 0;
			for (int i = 0; i < dm; i++)
				a += (double)head[(size_t)v * dm + i] * hidden[(size_t)t * dm + i];
			logits[(size_t)t * V + v] = a;
		}
	}
	free(emb), free(head), free(inp), free(outp), free(h), free(u), free(xz), free(xc), free(xd),
		free(y);
}

/* |got - ref| <= tol·(1 + |ref|) over n values; returns the misses. */
static size_t near_ref(const char *what, const float *got, const double *ref, size_t n, double tol)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - ref[i]) <= tol * (1 + fabs(ref[i])))) {
			if (bad < 5)
				printf("    %s[%zu]: got %.9g, reference %.9g\n", what, i, got[i], ref[i]);
			bad++;
		}
	return bad;
}

/* A generated Mamba-1 model (random A_log and D per channel and state
 * element, bf16 untied and f32 tied, vocab 300 padded to 304) against
 * m1_reference: prefill in one pass and in passes of 7 tokens, then the
 * same tokens one decode step at a time. Needs nothing of ../shared. */
static void test_mamba1_reference(void **unused)
{
	const char *tmp = getenv("TMPDIR");
	static const int32_t tok[] = { 5, 299, 0, 17, 17, 250, 3, 88, 303, 42, 1, 7, 160, 9, 64,
				       120, 33, 2, 2, 201, 77, 11, 45, 290 };
	const int n = (int)(sizeof tok / sizeof *tok);
	(void)unused;
	for (int variant = 0; variant < 2; variant++) {
		char dir[4096], errmsg[SS_ERRMSG_MAX] = "";
		ss_mkmodel_opts o;
		ss_model *m = NULL;
		snprintf(dir, sizeof dir, "%s/ss-test-m1-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		assert_non_null(mkdtemp(dir));
		ss_mkmodel_defaults(&o);
		ss_mkmodel_preset(&o, "m1");
		o.vocab_size = 300, o.pad_vocab_multiple = 8, o.seed = 99 + variant;
		o.dtype = variant ? SS_DTYPE_BF16 : SS_DTYPE_F32;
		o.tied = !variant;
		assert_int_equal(ss_mkmodel_write(dir, &o, errmsg), 0);
		if (ss_model_load(&m, dir, errmsg))
			fail_msg("load: %s", errmsg);
		const ss_model_config *c = &m->cfg;
		const int V = c->vocab_padded, dm = c->d_model;
		const size_t LS = (size_t)c->n_layer * c->d_inner * c->d_state;
		const size_t LC = (size_t)c->n_layer * c->d_inner * (c->d_conv - 1);
		double *rl = malloc((size_t)n * V * sizeof(double)), *rh = malloc((size_t)n * dm * sizeof(double));
		double *rc = malloc(LC * sizeof(double)), *rs = malloc(LS * sizeof(double));
		double *rd = malloc(LS * sizeof(double));
		float *lg = malloc((size_t)n * V * sizeof(float)), *hd = malloc((size_t)n * dm * sizeof(float));
		assert_int_equal(V, 304);
		m1_reference(m, tok, n, rl, rh, rc, rs, rd);
		size_t bad = 0;
		for (int way = 0; way < 3; way++) {
			ss_forward_ctx *ctx = NULL;
			ss_state st, *sp = &st;
			assert_int_equal(ss_forward_ctx_init(&ctx, m, 2, way == 1 ? 7 : 0, NULL), 0);
			state_new(&st, m);
			if (way < 2) {
				ss_forward_seq q = { tok, n, &st, lg, hd, 0 };
				assert_int_equal(ss_forward_prefill(ctx, &q, 1, SS_LOGITS_ALL, NULL), 0);
				bad += near_ref("hidden", hd, rh, (size_t)n * dm, 1e-4);
			} else {
				for (int t = 0; t < n; t++)
					assert_int_equal(ss_forward_decode(ctx, &sp, &tok[t], 1,
									   lg + (size_t)t * V, NULL), 0);
			}
			printf("  mamba1 %s %s\n", variant ? "bf16 untied" : "f32 tied",
			       way == 0 ? "prefill" : way == 1 ? "prefill, passes of 7" : "decode steps");
			bad += near_ref("logits", lg, rl, (size_t)n * V, 1e-4);
			bad += near_ref("conv", st.conv, rc, LC, 1e-4);
			bad += near_ref("ssm", st.ssm, rs, LS, 1e-4);
			bad += near_ref("logdecay", st.logdecay, rd, LS, 1e-5);
			ss_state_free(&st);
			ss_forward_ctx_free(ctx);
		}
		free(rl), free(rh), free(rc), free(rs), free(rd), free(lg), free(hd);
		ss_model_free(m);
		char p[4096 + 32];
		snprintf(p, sizeof p, "%s/config.json", dir);
		remove(p);
		snprintf(p, sizeof p, "%s/model.safetensors", dir);
		remove(p);
		remove(dir);
		assert_int_equal(bad, 0);
	}
}

static int setup(void **unused)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	size_t n, i;
	for (i = 0; i < sizeof(models) / sizeof(*models); i++) {
		if (!models[i].dir[0])
			continue;
		if (ss_model_load(&models[i].m, models[i].dir, errmsg) != 0) {
			printf("cannot load %s: %s\n", models[i].dir, errmsg);
			return -1;
		}
	}
	logit_cols = gold("logit_columns.i32", 4, &n);
	return n == NCOLS ? 0 : -1;
}

static int teardown(void **unused)
{
	size_t i;
	for (i = 0; i < sizeof(models) / sizeof(*models); i++) {
		ss_model_free(models[i].m);
		models[i].m = NULL;
	}
	free(logit_cols);
	return 0;
}

/* Writes a random model of t2's shape (bf16, ngroups 2, untied lm_head) to
 * a new directory under $TMPDIR: models[1] of test_forward. */
static int make_t2_shaped(void)
{
	const char *tmp = getenv("TMPDIR");
	ss_mkmodel_opts o;
	char errmsg[SS_ERRMSG_MAX] = "";

	snprintf(models[1].dir, sizeof(models[1].dir), "%s/ss-test-forward-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(models[1].dir)) {
		perror(models[1].dir);
		return -1;
	}
	ss_mkmodel_defaults(&o);
	ss_mkmodel_preset(&o, "t2");
	o.dtype = SS_DTYPE_BF16;
	o.seed = 4321;
	models[1].name = "t2-shaped (generated)";
	models[1].key = "t1";
	if (ss_mkmodel_write(models[1].dir, &o, errmsg) != 0) {
		printf("mkmodel: %s\n", errmsg);
		return -1;
	}
	return 0;
}

static void remove_t2_shaped(void)
{
	char p[8192 + 32];
	snprintf(p, sizeof(p), "%s/config.json", models[1].dir);
	remove(p);
	snprintf(p, sizeof(p), "%s/model.safetensors", models[1].dir);
	remove(p);
	remove(models[1].dir);
}

int main(void)
{
	const char *root = SS_TEST_SHARED ? getenv("SS_SHARED") : getenv("SS_FIXTURES");
	char probe[8192];
	FILE *f;
	int rc;
	const struct CMUnitTest core[] = {
		cmocka_unit_test(test_scan_prop1),
		cmocka_unit_test(test_golden_t1_hf),
		cmocka_unit_test(test_batch_equals_single),
		cmocka_unit_test(test_pieces_equal_whole),
		cmocka_unit_test(test_fresh),
		cmocka_unit_test(test_decode_batch),
		cmocka_unit_test(test_decode_bound_equals_decode),
		cmocka_unit_test(test_linear_rows_invariant),
		cmocka_unit_test(test_decode_deterministic_batch),
		cmocka_unit_test(test_threads_agree),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_batch_size),
		cmocka_unit_test(test_no_lm_head),
		cmocka_unit_test(test_nll_weights_dtype),
		cmocka_unit_test(test_mamba1_reference),
	};
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(test_golden_t2_hf),
		cmocka_unit_test(test_golden_t1_ss),
		cmocka_unit_test(test_golden_t2_small_ubatch),
		cmocka_unit_test(test_nll_t2_weights_dtype),
	};

	const struct CMUnitTest mamba1[] = {
		cmocka_unit_test(test_golden_t1_hf),
		cmocka_unit_test(test_golden_t1_ss),
		cmocka_unit_test(test_golden_t2_small_ubatch),
		cmocka_unit_test(test_batch_equals_single),
		cmocka_unit_test(test_pieces_equal_whole),
		cmocka_unit_test(test_decode_batch),
		cmocka_unit_test(test_decode_bound_equals_decode),
		cmocka_unit_test(test_threads_agree),
	};

	if (!SS_TEST_SHARED && (!root || !*root))
		root = "tests/fixtures";
	snprintf(golden, sizeof(golden), "%s/golden%s", root ? root : "",
		 SS_TEST_SHARED == 2 ? "-mamba1" : "");
	snprintf(probe, sizeof(probe), "%s/manifest.json", golden);
	f = root && *root ? fopen(probe, "rb") : NULL;
	if (!f) {
		if (SS_TEST_SHARED) {
			printf("skipped: needs SS_SHARED (golden %s)\n",
			       SS_TEST_SHARED == 2 ? "golden-mamba1" : "t2-hf and t1-ss");
			return 77;
		}
		printf("no golden fixtures at %s\n", golden);
		return 1;
	}
	fclose(f);
	if (SS_TEST_SHARED == 2) {
		/* m1 twice (HF): [0] and [1] are the cases' two roles above */
		static const char *const dirs[3] = { "m1-hf", "m1-hf", "m1-ss" };
		static const char *const names[3] = { "m1-hf", "m1-hf", "m1-ss" };
		for (int i = 0; i < 3; i++) {
			snprintf(models[i].dir, sizeof(models[i].dir), "%s/models/%s", golden, dirs[i]);
			models[i].name = names[i];
			models[i].key = "m1";
		}
		return cmocka_run_group_tests(mamba1, setup, teardown);
	}
	if (SS_TEST_SHARED) {
		snprintf(models[1].dir, sizeof(models[1].dir), "%s/models/t2-hf", golden);
		snprintf(models[2].dir, sizeof(models[2].dir), "%s/models/t1-ss", golden);
		return cmocka_run_group_tests(shared, setup, teardown);
	}
	snprintf(models[0].dir, sizeof(models[0].dir), "%s/models/t1-hf", golden);
	if (make_t2_shaped() != 0)
		return 1;
	rc = cmocka_run_group_tests(core, setup, teardown);
	remove_t2_shaped();
	return rc;
}
