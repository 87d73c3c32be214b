/*
 * test_train.c — the training step (ss_train.h) on the t1 model
 * ($SS_FIXTURES/golden/models/t1-hf: tied lm_head, ngroups 1) and on a
 * generated one of other dims (gen/model.h: untied lm_head, ngroups 2,
 * d_state 8 != headdim 12, vocab 500 padded to 512):
 *   - its forward is the model's: loss, final states and logdecay equal
 *     ss_forward_prefill's from the same initial states;
 *   - its backward is the gradient of its forward: for every parameter
 *     tensor and both initial states, the element of largest gradient and
 *     two random ones against central finite differences of the loss (plus
 *     random weights on the final states and logdecay, so that the
 *     gradients flowing in through them are checked too), on a packed batch
 *     of two sequences from random initial states with a row without a
 *     target;
 *   - split over 2 and 3 threads (ss_train_set_threads) it is the one-thread
 *     step: the same loss and gradients to f32 rounding;
 *   - AdamW against its definition in double, its bias correction and its
 *     decoupled weight decay.
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
#include "gen/model.h"
#include "util/fdcheck.h"
#include "util/rng.h"
#include "util/tmpdir.h"

static uint64_t rng_state;

static double urand(void)
{
	return test_urand(&rng_state);
}

static float *frnd(size_t n, double lo, double hi)
{
	float *p = test_frnd(&rng_state, n, lo, hi);
	assert_non_null(p);
	return p;
}



/* The model of the test running (its prestate). */
static ss_model *model;
static ss_model *t1, *gen2;
static char tmpdir[4096];

static int setup(void **st)
{
	char dir[4200], errmsg[SS_ERRMSG_MAX];
	const char *root = getenv("SS_FIXTURES");
	ss_mkmodel_opts o;
	(void)st;
	snprintf(dir, sizeof(dir), "%s/golden/models/t1-hf", root ? root : "tests/fixtures");
	if (ss_model_load(&t1, dir, errmsg) != 0) {
		fprintf(stderr, "%s\n", errmsg);
		return -1;
	}
	ss_mkmodel_defaults(&o);
	o.d_model = 48;
	o.d_state = 8;
	o.headdim = 12;
	o.ngroups = 2;
	o.vocab_size = 500;
	o.tied = 0;
	o.seed = 5;
	if (ss_test_tmpdir_make(tmpdir, sizeof(tmpdir), "train") ||
	    snprintf(dir, sizeof(dir), "%s/gen2", tmpdir) < 0 ||
	    ss_mkmodel_write(dir, &o, errmsg) || ss_model_load(&gen2, dir, errmsg)) {
		fprintf(stderr, "%s\n", errmsg);
		return -1;
	}
	return 0;
}

static int teardown(void **st)
{
	(void)st;
	ss_model_free(t1);
	ss_model_free(gen2);
	return ss_test_tmpdir_remove(tmpdir);
}

/* Sets the model a test runs on from its prestate. */
static int use_model(void **st)
{
	model = *(ss_model **)*st;
	return 0;
}

/* The batch: two sequences of 6 and 9 tokens, next-token targets within
 * each, none for the last row of a sequence nor for row 3. */
enum { NSEQ = 2, T = 15 };
static const int64_t seq_start[NSEQ + 1] = { 0, 6, 15 };

static void make_batch(int32_t *tok, int32_t *tgt)
{
	for (int r = 0; r < T; r++)
		tok[r] = (int32_t)(urand() * model->cfg.vocab_size);
	for (int s = 0; s < NSEQ; s++)
		for (int64_t r = seq_start[s]; r < seq_start[s + 1]; r++)
			tgt[r] = r + 1 < seq_start[s + 1] ? tok[r + 1] : -1;
	tgt[3] = -1;
}

static double max_rel(const float *a, const float *b, size_t n)
{
	double m = 0.0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)a[i] - b[i]) / (1e-3 + fabs((double)b[i]));
		if (d > m)
			m = d;
	}
	return m;
}

static void test_forward_is_the_model(void **st)
{
	(void)st;
	const ss_model_config *c = &model->cfg;
	const int64_t V = c->vocab_padded;
	ss_train *t;
	ss_forward_ctx *fx;
	ss_state_dims dims;
	ss_state s[NSEQ];
	ss_forward_seq q[NSEQ];
	int32_t tok[T], tgt[T];
	char errmsg[SS_ERRMSG_MAX];
	double loss, ref = 0.0;
	int nt = 0;

	rng_state = 21;
	make_batch(tok, tgt);
	assert_int_equal(ss_train_init(&t, model, T, NSEQ), 0);
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const size_t ll = (size_t)c->n_layer * c->nheads;
	float *conv = frnd(NSEQ * cl, -1, 1), *ssm = frnd(NSEQ * sl, -1, 1);
	float *ld = frnd(NSEQ * ll, -3, 0);
	float *logits = malloc((size_t)T * V * sizeof(float)), nll[T];

	ss_model_state_dims(model, &dims);
	for (int i = 0; i < NSEQ; i++) {
		memset(&s[i], 0, sizeof(s[i]));
		assert_int_equal(ss_state_alloc(&s[i], &dims), 0);
		memcpy(s[i].conv, conv + i * cl, cl * sizeof(float));
		memcpy(s[i].ssm, ssm + i * sl, sl * sizeof(float));
		memcpy(s[i].logdecay, ld + i * ll, ll * sizeof(float));
		q[i] = (ss_forward_seq){ .tokens = tok + seq_start[i],
					 .n_tokens = seq_start[i + 1] - seq_start[i], .state = &s[i],
					 .logits = logits + seq_start[i] * V };
	}
	assert_int_equal(ss_forward_ctx_init(&fx, model, 1, 0, errmsg), 0);
	assert_int_equal(ss_forward_prefill(fx, q, NSEQ, SS_LOGITS_ALL, errmsg), 0);
	assert_int_equal(ss_cross_entropy_cpu(nll, logits, V, tgt, T, V), 0);
	for (int r = 0; r < T; r++)
		if (tgt[r] >= 0)
			ref += nll[r], nt++;
	ref /= nt;

	assert_int_equal(ss_train_forward(t, tok, tgt, seq_start, NSEQ, conv, ssm, ld, &loss), 0);
	printf("  loss %.7f, ss_forward_prefill's %.7f\n", loss, ref);
	assert_true(fabs(loss - ref) <= 1e-5 * ref);
	for (int i = 0; i < NSEQ; i++) {
		/* conv holds in_proj's raw outputs, near 0 for some: prefill runs
		 * in_proj through the row-invariant kernel (ss_linear_rows_cpu),
		 * training through sgemm, two summation orders: 1.2e-4 measured
		 * (t1, 1 ulp of a value of 1 against a floor of 1e-3); the ssm
		 * 7.8e-6. Bit for bit with SS_GEMM=blas. */
		assert_true(max_rel(conv + i * cl, s[i].conv, cl) < 1e-3);
		assert_true(max_rel(ssm + i * sl, s[i].ssm, sl) < 1e-4);
		assert_true(max_rel(ld + i * ll, s[i].logdecay, ll) < 1e-4);
		ss_state_free(&s[i]);
	}
	/* a token out of range, a sequence past max_tokens */
	tok[2] = (int32_t)V;
	assert_int_equal(ss_train_forward(t, tok, tgt, seq_start, NSEQ, NULL, NULL, NULL, &loss),
			 SS_ERR_INVALID);
	tok[2] = 0;
	const int64_t long_seq[2] = { 0, T + 1 };
	assert_int_equal(ss_train_forward(t, tok, tgt, long_seq, 1, NULL, NULL, NULL, &loss),
			 SS_ERR_INVALID);
	assert_int_equal(ss_train_backward(t, NULL, NULL, NULL), SS_ERR_INVALID);
	ss_forward_ctx_free(fx);
	ss_train_free(t);
	free(conv), free(ssm), free(ld), free(logits);
}

/* ------------------------------------------------------- the model's gradient */

typedef struct {
	ss_train *t;
	const int32_t *tok, *tgt;
	const float *conv0, *ssm0;          /* initial states */
	const float *gconv, *gssm, *glog;  /* weights of the final states, logdecay */
	float *conv, *ssm, *ld;             /* scratch */
	size_t cl, sl, ll;
} problem;

/* L = mean nll + Σ gconv·conv_final + Σ gssm·ssm_final + Σ glog·logdecay */
static double total_loss(const problem *p)
{
	double loss, L;
	memcpy(p->conv, p->conv0, NSEQ * p->cl * sizeof(float));
	memcpy(p->ssm, p->ssm0, NSEQ * p->sl * sizeof(float));
	memset(p->ld, 0, NSEQ * p->ll * sizeof(float));
	assert_int_equal(ss_train_forward(p->t, p->tok, p->tgt, seq_start, NSEQ, p->conv, p->ssm,
					  p->ld, &loss),
			 0);
	L = loss;
	for (size_t i = 0; i < NSEQ * p->cl; i++)
		L += (double)p->gconv[i] * p->conv[i];
	for (size_t i = 0; i < NSEQ * p->sl; i++)
		L += (double)p->gssm[i] * p->ssm[i];
	for (size_t i = 0; i < NSEQ * p->ll; i++)
		L += (double)p->glog[i] * p->ld[i];
	return L;
}

/* total_loss for test_fd_check. */
static double loss_of(void *p)
{
	return total_loss(p);
}

/* Checks one tensor (util/fdcheck.h). */
static int check_tensor(const char *what, problem *p, float *v, const float *grad, size_t n)
{
	return test_fd_check(what, loss_of, p, v, grad, n, 3e-3f, &rng_state);
}

/* The gradient check of one batch; with_states: random weights on the
 * final states and logdecay (else the loss alone: the lm objective, where
 * the states' own terms would not dwarf the loss's gradient). */
static int gradient_case(int with_states)
{
	const ss_model_config *c = &model->cfg;
	const size_t d = (size_t)c->d_model;
	ss_train *t;
	int32_t tok[T], tgt[T];
	int bad = 0;
	double L;

	rng_state = 22 + (uint64_t)with_states;
	make_batch(tok, tgt);
	assert_int_equal(ss_train_init(&t, model, T, NSEQ), 0);
	problem p = { .t = t, .tok = tok, .tgt = tgt, .cl = ss_train_conv_len(t),
		      .sl = ss_train_ssm_len(t), .ll = (size_t)c->n_layer * c->nheads };
	float *conv0 = frnd(NSEQ * p.cl, -1, 1), *ssm0 = frnd(NSEQ * p.sl, -1, 1);
	p.conv0 = conv0, p.ssm0 = ssm0;
	p.gconv = frnd(NSEQ * p.cl, -0.05 * with_states, 0.05 * with_states);
	p.gssm = frnd(NSEQ * p.sl, -0.05 * with_states, 0.05 * with_states);
	p.glog = frnd(NSEQ * p.ll, -0.5 * with_states, 0.5 * with_states);
	p.conv = malloc(NSEQ * p.cl * sizeof(float));
	p.ssm = malloc(NSEQ * p.sl * sizeof(float));
	p.ld = malloc(NSEQ * p.ll * sizeof(float));
	/* in: the gradients w.r.t. the final states; out: w.r.t. the initial */
	float *dconv = malloc(NSEQ * p.cl * sizeof(float)), *dssm = malloc(NSEQ * p.sl * sizeof(float));
	memcpy(dconv, p.gconv, NSEQ * p.cl * sizeof(float));
	memcpy(dssm, p.gssm, NSEQ * p.sl * sizeof(float));

	ss_train_zero_grad(t);
	L = total_loss(&p);
	printf("  L %.6f\n", L);
	assert_int_equal(ss_train_backward(t, dconv, dssm, p.glog), 0);

	ss_train_params *P = ss_train_params_of(t), *G = ss_train_grads_of(t);
	const size_t V = (size_t)c->vocab_padded;
	bad += check_tensor("embedding", &p, P->embedding, G->embedding, V * d);
	if (!c->tied)
		bad += check_tensor("lm_head", &p, P->lm_head, G->lm_head, V * d);
	bad += check_tensor("norm_f", &p, P->norm_f, G->norm_f, d);
	for (int l = 0; l < c->n_layer; l++) {
		ss_train_layer *a = &P->layers[l], *g = &G->layers[l];
		bad += check_tensor("norm", &p, a->norm, g->norm, d);
		bad += check_tensor("in_proj", &p, a->in_proj, g->in_proj, (size_t)c->d_in_proj * d);
		bad += check_tensor("conv_wt", &p, a->conv_wt, g->conv_wt,
				    (size_t)c->d_conv * c->conv_dim);
		bad += check_tensor("conv_b", &p, a->conv_b, g->conv_b, (size_t)c->conv_dim);
		bad += check_tensor("dt_bias", &p, a->dt_bias, g->dt_bias, (size_t)c->nheads);
		bad += check_tensor("A_log", &p, a->A_log, g->A_log, (size_t)c->nheads);
		bad += check_tensor("D", &p, a->D, g->D, (size_t)c->nheads);
		bad += check_tensor("gnorm", &p, a->gnorm, g->gnorm, (size_t)c->d_inner);
		bad += check_tensor("out_proj", &p, a->out_proj, g->out_proj, d * c->d_inner);
	}
	bad += check_tensor("conv_state", &p, conv0, dconv, NSEQ * p.cl);
	bad += check_tensor("ssm_state", &p, ssm0, dssm, NSEQ * p.sl);

	/* accumulation: a second backward of the same forward doubles them */
	const float g0 = G->norm_f[0];
	total_loss(&p);
	assert_int_equal(ss_train_backward(t, NULL, NULL, p.glog), 0);
	assert_true(fabsf(G->norm_f[0] - 2 * g0) <= 1e-5f * fabsf(g0) + 1e-9f);
	ss_train_free(t);
	free(conv0), free(ssm0), free((void *)p.gconv), free((void *)p.gssm), free((void *)p.glog);
	free(p.conv), free(p.ssm), free(p.ld), free(dconv), free(dssm);
	return bad;
}

static void test_model_gradient(void **st)
{
	(void)st;
	assert_int_equal(gradient_case(0), 0);
	assert_int_equal(gradient_case(1), 0);
}

/* One forward and backward of a fixed batch on n_threads threads (with
 * states in and weights on the final states and logdecay): the loss, the
 * parameters' gradients and the initial states' gradients, into out
 * ([1 + P->n + NSEQ·(cl + sl)], malloc'd). */
static float *step_on_threads(int n_threads, size_t *n_out)
{
	const ss_model_config *c = &model->cfg;
	ss_train *t;
	int32_t tok[T], tgt[T];
	double loss;

	rng_state = 31;
	make_batch(tok, tgt);
	assert_int_equal(ss_train_init(&t, model, T, NSEQ), 0);
	assert_int_equal(ss_train_set_threads(t, n_threads), 0);
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const size_t ll = (size_t)c->n_layer * c->nheads, np = ss_train_grads_of(t)->n;
	float *conv = frnd(NSEQ * cl, -1, 1), *ssm = frnd(NSEQ * sl, -1, 1);
	float *dconv = frnd(NSEQ * cl, -0.05, 0.05), *dssm = frnd(NSEQ * sl, -0.05, 0.05);
	float *glog = frnd(NSEQ * ll, -0.5, 0.5), *ld = frnd(NSEQ * ll, -1, 0);
	float *out = malloc((1 + np + NSEQ * (cl + sl)) * sizeof(float));

	assert_non_null(out);
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_forward(t, tok, tgt, seq_start, NSEQ, conv, ssm, ld, &loss), 0);
	assert_int_equal(ss_train_backward(t, dconv, dssm, glog), 0);
	out[0] = (float)loss;
	memcpy(out + 1, ss_train_grads_of(t)->data, np * sizeof(float));
	memcpy(out + 1 + np, dconv, NSEQ * cl * sizeof(float));
	memcpy(out + 1 + np + NSEQ * cl, dssm, NSEQ * sl * sizeof(float));
	*n_out = 1 + np + NSEQ * (cl + sl);
	ss_train_free(t);
	free(conv), free(ssm), free(dconv), free(dssm), free(glog), free(ld);
	return out;
}

/* The step split over 2 and 3 threads (the scan by groups, by heads with
 * each thread's own dB, dC, or on one thread) is the one-thread step: the
 * loss and every gradient to f32 rounding (the dB, dC partial sums
 * are added in another order). */
static void test_threads(void **st)
{
	(void)st;
	size_t n1, n;
	float *one = step_on_threads(1, &n1);
	ss_train *t;

	for (int k = 2; k <= 3; k++) {
		float *got = step_on_threads(k, &n);
		double mx = 0.0, err = 0.0;
		assert_int_equal(n, n1);
		assert_true(fabs(got[0] - one[0]) <= 1e-6 * fabs(one[0]));
		for (size_t i = 1; i < n; i++) {
			mx = fmax(mx, fabs(one[i]));
			err = fmax(err, fabs((double)got[i] - one[i]));
		}
		printf("  %d threads: largest difference %.3g (largest gradient %.3g)\n", k, err, mx);
		assert_true(err <= 1e-5 * mx);
		free(got);
	}
	free(one);
	assert_int_equal(ss_train_init(&t, model, T, NSEQ), 0);
	assert_int_equal(ss_train_set_threads(t, 0), SS_ERR_INVALID);
	assert_int_equal(ss_train_set_threads(t, SS_TRAIN_MAX_THREADS + 1), SS_ERR_INVALID);
	ss_train_free(t);
}

/* ---------------------------------------------------------------- AdamW */

static void test_adamw(void **st)
{
	(void)st;
	enum { N = 19, STEPS = 4 }; /* N: vectors of 8 and a tail */
	const ss_adamw h = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
			     .weight_decay = 0.1f };
	float p[N], m[N] = { 0 }, v[N] = { 0 }, g[N];
	double rp[N], rm[N] = { 0 }, rv[N] = { 0 };

	rng_state = 23;
	for (int i = 0; i < N; i++)
		rp[i] = p[i] = (float)(urand() * 2 - 1);
	/* against the definition in double, over a few steps */
	for (int k = 1; k <= STEPS; k++) {
		for (int i = 0; i < N; i++)
			g[i] = (float)(urand() * 2 - 1) * (i == 0 ? 1e-3f : 1.0f);
		assert_int_equal(ss_adamw_update(p, g, m, v, N, &h, k), 0);
		for (int i = 0; i < N; i++) {
			rm[i] = 0.9 * rm[i] + 0.1 * g[i];
			rv[i] = 0.95 * rv[i] + 0.05 * (double)g[i] * g[i];
			const double mh = rm[i] / (1 - pow(0.9, k)), vh = rv[i] / (1 - pow(0.95, k));
			rp[i] = rp[i] * (1 - 1e-2 * 0.1) - 1e-2 * mh / (sqrt(vh) + 1e-8);
		}
		for (int i = 0; i < N; i++)
			assert_true(fabs(p[i] - rp[i]) <= 1e-6 * (1 + fabs(rp[i])));
	}
	/* bias correction: the first step moves each weight by lr·sign(g)
	 * (weight decay off), however small g */
	{
		const ss_adamw h0 = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
		float q[2] = { 0.5f, 0.5f }, qm[2] = { 0 }, qv[2] = { 0 };
		const float qg[2] = { 1e-4f, -3.0f };
		assert_int_equal(ss_adamw_update(q, qg, qm, qv, 2, &h0, 1), 0);
		assert_true(fabsf(q[0] - (0.5f - 1e-2f)) < 1e-6f);
		assert_true(fabsf(q[1] - (0.5f + 1e-2f)) < 1e-6f);
	}
	/* decoupled weight decay: a zero gradient still shrinks the weight by
	 * lr·wd (an L2 term added to g would instead move it by lr·sign) */
	{
		float q = 2.0f, qm = 0, qv = 0;
		const float qg = 0.0f;
		assert_int_equal(ss_adamw_update(&q, &qg, &qm, &qv, 1, &h, 1), 0);
		assert_true(fabsf(q - 2.0f * (1.0f - 1e-2f * 0.1f)) < 1e-7f);
	}
	assert_int_equal(ss_adamw_update(p, g, m, v, N, &h, 0), SS_ERR_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate_setup_teardown(test_forward_is_the_model, use_model, NULL,
							 &t1),
		cmocka_unit_test_prestate_setup_teardown(test_model_gradient, use_model, NULL, &t1),
		cmocka_unit_test_prestate_setup_teardown(test_forward_is_the_model, use_model, NULL,
							 &gen2),
		cmocka_unit_test_prestate_setup_teardown(test_model_gradient, use_model, NULL, &gen2),
		cmocka_unit_test_prestate_setup_teardown(test_threads, use_model, NULL, &t1),
		cmocka_unit_test_prestate_setup_teardown(test_threads, use_model, NULL, &gen2),
		cmocka_unit_test(test_adamw),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
