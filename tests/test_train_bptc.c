/*
 * test_train_bptc.c — the composition objectives (ss_train.h:
 * ss_train_bptc, ss_train_bp2c) on a small generated model (gen/model.h:
 * tied, 2 layers, d_model 32, d_state 8, headdim 8, vocab 300):
 *   - oracle: ss_train_bptc's loss is that of an explicit "encode each
 *     chunk, ss_compose, score" graph built here from ss_train_forward
 *     and ss_compose, and its gradient equals central finite differences
 *     of that graph's loss for every parameter tensor (the element of
 *     largest gradient and two random ones), each mode, k = 3 and 5 chunks
 *     packed into batches of at most 12 tokens and 2 sequences;
 *   - k = 1 with soup (and every other mode: one input's weight is the
 *     constant 1) equals "state then score" by hand: ss_train_forward of
 *     the chunk, forward/backward of query·continuation from its final
 *     state, then the chunk's backward with that state gradient;
 *   - BP2C equals the same forward/backward from a given state, leaves the
 *     state unchanged, and k = 0 equals BP2C from the zero state;
 *   - invalid examples are refused before any gradient is touched.
 * ref: picaso.txt §5.
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

static uint64_t rng_state;
static ss_model *model;
static char model_dir[4096];

enum { MAX_T = 12, MAX_SEQS = 2, KMAX = 5, NQ = 4, NC = 5 };
static const int64_t chunk_len[KMAX] = { 5, 7, 4, 6, 3 };
static int32_t chunk_tok[KMAX][8], query[NQ], cont[NC];
static const int32_t *chunks[KMAX];

static int setup(void **st)
{
	char errmsg[SS_ERRMSG_MAX];
	ss_mkmodel_opts o;
	(void)st;
	ss_mkmodel_defaults(&o);
	o.d_model = 32;
	o.d_state = 8;
	o.headdim = 8;
	o.vocab_size = 300;
	o.seed = 7;
	if (!(model = ss_mkmodel_load_temp(&o, NULL, "bptc", model_dir, errmsg))) {
		fprintf(stderr, "%s\n", errmsg);
		return -1;
	}
	rng_state = 41;
	for (int i = 0; i < KMAX; i++) {
		for (int j = 0; j < chunk_len[i]; j++)
			chunk_tok[i][j] = (int32_t)(test_urand(&rng_state) * 300);
		chunks[i] = chunk_tok[i];
	}
	for (int j = 0; j < NQ; j++)
		query[j] = (int32_t)(test_urand(&rng_state) * 300);
	for (int j = 0; j < NC; j++)
		cont[j] = (int32_t)(test_urand(&rng_state) * 300);
	return 0;
}

static int teardown(void **st)
{
	(void)st;
	ss_model_free(model);
	ss_mkmodel_remove(model_dir);
	return 0;
}

static ss_train_bptc_example example(int k, int mode)
{
	ss_train_bptc_example ex = { chunks, chunk_len, k, query, NQ, cont, NC, mode };
	return ex;
}

/* query·cont[..NC-1] and its targets (the continuation's tokens). */
enum { TQ = NQ + NC - 1 };
static void score_batch(int32_t *tok, int32_t *tgt)
{
	for (int r = 0; r < TQ; r++) {
		tok[r] = r < NQ ? query[r] : cont[r - NQ];
		tgt[r] = r < NQ - 1 ? -1 : cont[r - NQ + 1];
	}
}

/* ------------------------------------------------ the explicit graph */

typedef struct {
	ss_train *t;
	int k, mode;
} graph;

/* Each chunk alone from the zero state, ss_compose of their final states
 * (conv mean, no normalisation), then the continuation's mean NLL. */
static double graph_loss(void *arg)
{
	const graph *g = arg;
	ss_state st[KMAX], out = { 0 };
	const ss_state *in[KMAX];
	ss_state_dims dims;
	int32_t tok[TQ], tgt[TQ], none[8];
	double loss, l;

	ss_model_state_dims(model, &dims);
	for (int j = 0; j < 8; j++)
		none[j] = -1;
	for (int i = 0; i < g->k; i++) {
		const int64_t ss[2] = { 0, chunk_len[i] };
		assert_int_equal(ss_state_alloc(&st[i], &dims), 0);
		assert_int_equal(ss_train_forward(g->t, chunks[i], none, ss, 1, st[i].conv, st[i].ssm,
						  st[i].logdecay, &l),
				 0);
		in[i] = &st[i];
	}
	if (g->k) {
		const ss_compose_opts o = { (ss_compose_mode)g->mode, 0, SS_COMPOSE_CONV_MEAN };
		assert_int_equal(ss_compose(&o, in, (size_t)g->k, &out, NULL), 0);
	}
	score_batch(tok, tgt);
	const int64_t ss[2] = { 0, TQ };
	assert_int_equal(ss_train_forward(g->t, tok, tgt, ss, 1, g->k ? out.conv : NULL,
					  g->k ? out.ssm : NULL, NULL, &loss),
			 0);
	for (int i = 0; i < g->k; i++)
		ss_state_free(&st[i]);
	ss_state_free(&out);
	return loss;
}

/* The generated model's dt (1e-3..0.1) and A (-1..-16) leave the chunks'
 * decays, and so the gradients w.r.t. A_log and dt_bias, too small for
 * finite differences of an f32 forward (about 1e-4 against a rounding
 * noise of 2e-4): dt about 0.3 and A in [-0.5, -2.5] give chunk logdecays
 * of about -1 to -20, where the weights of every mode depend on them. */
static void decays_that_matter(ss_train *t)
{
	const ss_model_config *c = &model->cfg;
	ss_train_params *P = ss_train_params_of(t);
	for (int l = 0; l < c->n_layer; l++)
		for (int h = 0; h < c->nheads; h++) {
			P->layers[l].dt_bias[h] = -1.0f + 0.05f * (float)h;
			P->layers[l].A_log[h] = logf(0.5f + 2.0f * (float)h / (float)c->nheads);
		}
}

/* The finite differences' steps: 3e-3 (relative to max(1, |v|)), and
 * 2e-2 for dt_bias and A_log, whose gradients stay near 1e-3 even so, where
 * 3e-3 leaves 5% of rounding noise (a larger step for all would leave the
 * embedding rows' RMSNorm, values of 0.02, nonlinear over it). */
#define FD_STEP 3e-3f
#define FD_STEP_DECAY 2e-2f

static int oracle_case(int k, int mode)
{
	const ss_model_config *c = &model->cfg;
	const size_t d = (size_t)c->d_model, V = (size_t)c->vocab_padded;
	ss_train *t;
	graph g;
	double loss, ref;
	int bad = 0;

	assert_int_equal(ss_train_init(&t, model, MAX_T, MAX_SEQS), 0);
	decays_that_matter(t);
	g = (graph){ t, k, mode };
	ss_train_bptc_example ex = example(k, mode);
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_bptc(t, &ex, &loss), 0);
	ref = graph_loss(&g);
	printf("  %s k=%d: loss %.7f, the explicit graph's %.7f\n",
	       ss_compose_mode_name((ss_compose_mode)mode), k, loss, ref);
	assert_true(fabs(loss - ref) <= 1e-5 * ref);

	ss_train_params *P = ss_train_params_of(t), *G = ss_train_grads_of(t);
	bad += test_fd_check("embedding", graph_loss, &g, P->embedding, G->embedding, V * d,
			     FD_STEP, &rng_state);
	bad += test_fd_check("norm_f", graph_loss, &g, P->norm_f, G->norm_f, d, FD_STEP, &rng_state);
	for (int l = 0; l < c->n_layer; l++) {
		ss_train_layer *a = &P->layers[l], *b = &G->layers[l];
		bad += test_fd_check("norm", graph_loss, &g, a->norm, b->norm, d, FD_STEP, &rng_state);
		bad += test_fd_check("in_proj", graph_loss, &g, a->in_proj, b->in_proj,
				     (size_t)c->d_in_proj * d, FD_STEP, &rng_state);
		bad += test_fd_check("conv_wt", graph_loss, &g, a->conv_wt, b->conv_wt,
				     (size_t)c->d_conv * c->conv_dim, FD_STEP, &rng_state);
		bad += test_fd_check("conv_b", graph_loss, &g, a->conv_b, b->conv_b,
				     (size_t)c->conv_dim, FD_STEP, &rng_state);
		bad += test_fd_check("dt_bias", graph_loss, &g, a->dt_bias, b->dt_bias,
				     (size_t)c->nheads, FD_STEP_DECAY, &rng_state);
		bad += test_fd_check("A_log", graph_loss, &g, a->A_log, b->A_log, (size_t)c->nheads,
				     FD_STEP_DECAY, &rng_state);
		bad += test_fd_check("D", graph_loss, &g, a->D, b->D, (size_t)c->nheads, FD_STEP, &rng_state);
		bad += test_fd_check("gnorm", graph_loss, &g, a->gnorm, b->gnorm, (size_t)c->d_inner,
				     FD_STEP, &rng_state);
		bad += test_fd_check("out_proj", graph_loss, &g, a->out_proj, b->out_proj,
				     d * c->d_inner, FD_STEP, &rng_state);
	}
	ss_train_free(t);
	return bad;
}

static void test_oracle(void **st)
{
	(void)st;
	static const int modes[] = { SS_COMPOSE_CASO, SS_COMPOSE_PICASO_S, SS_COMPOSE_PICASO_R,
				     SS_COMPOSE_SOUP, SS_COMPOSE_SUM };
	int bad = 0;
	rng_state = 42;
	for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
		bad += oracle_case(3, modes[m]);
	bad += oracle_case(5, SS_COMPOSE_PICASO_R);
	bad += oracle_case(0, SS_COMPOSE_PICASO_R);
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------- by hand */

/* max |a - b| <= 1e-6 · max |b| (the same ops in the same order: equal
 * but for the packing of rows into GEMMs). */
static void assert_grads_equal(const float *a, const float *b, size_t n)
{
	double m = 0, d = 0;
	for (size_t i = 0; i < n; i++) {
		m = fmax(m, fabs((double)b[i]));
		d = fmax(d, fabs((double)a[i] - b[i]));
	}
	printf("  max |difference| %.3g of max |gradient| %.3g\n", d, m);
	assert_true(m > 0);
	assert_true(d <= 1e-6 * m);
}

/* Gradients of forward/backward of query·cont from (conv, ssm) (copied),
 * the state's gradient into dconv/dssm (may be NULL). */
static double score_by_hand(ss_train *t, const float *conv, const float *ssm, float *dconv,
			    float *dssm)
{
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	float *c2 = NULL, *s2 = NULL;
	int32_t tok[TQ], tgt[TQ];
	const int64_t ss[2] = { 0, TQ };
	double loss;
	if (conv) {
		c2 = malloc(cl * sizeof *c2), s2 = malloc(sl * sizeof *s2);
		memcpy(c2, conv, cl * sizeof *c2);
		memcpy(s2, ssm, sl * sizeof *s2);
	}
	score_batch(tok, tgt);
	assert_int_equal(ss_train_forward(t, tok, tgt, ss, 1, c2, s2, NULL, &loss), 0);
	if (dconv)
		memset(dconv, 0, cl * sizeof *dconv), memset(dssm, 0, sl * sizeof *dssm);
	assert_int_equal(ss_train_backward(t, dconv, dssm, NULL), 0);
	free(c2), free(s2);
	return loss;
}

/* The loss and the gradients t holds are lref and ref. */
static void assert_same_step(ss_train *t, double loss, double lref, const float *ref)
{
	assert_true(fabs(loss - lref) <= 1e-6 * lref);
	assert_grads_equal(ss_train_grads_of(t)->data, ref, ss_train_grads_of(t)->n);
}

static void test_one_chunk_by_hand(void **st)
{
	(void)st;
	ss_train *t;
	assert_int_equal(ss_train_init(&t, model, MAX_T, MAX_SEQS), 0);
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t), n = ss_train_grads_of(t)->n;
	float *conv = calloc(cl, sizeof *conv), *ssm = calloc(sl, sizeof *ssm);
	float *dconv = malloc(cl * sizeof *dconv), *dssm = malloc(sl * sizeof *dssm);
	float *ref = malloc(n * sizeof *ref);
	int32_t none[8];
	const int64_t ss[2] = { 0, chunk_len[0] };
	double l, lref, loss;

	for (int j = 0; j < 8; j++)
		none[j] = -1;
	/* by hand: the chunk's state, the score from it, the chunk's backward */
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_forward(t, chunks[0], none, ss, 1, conv, ssm, NULL, &l), 0);
	lref = score_by_hand(t, conv, ssm, dconv, dssm);
	assert_int_equal(ss_train_forward(t, chunks[0], none, ss, 1, NULL, NULL, NULL, &l), 0);
	assert_int_equal(ss_train_backward(t, dconv, dssm, NULL), 0);
	memcpy(ref, ss_train_grads_of(t)->data, n * sizeof *ref);

	for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_SUM; mode++) {
		ss_train_bptc_example ex = example(1, mode);
		ss_train_zero_grad(t);
		assert_int_equal(ss_train_bptc(t, &ex, &loss), 0);
		printf("  %s: loss %.7f, by hand %.7f\n", ss_compose_mode_name((ss_compose_mode)mode),
		       loss, lref);
		assert_same_step(t, loss, lref, ref);
	}
	ss_train_free(t);
	free(conv), free(ssm), free(dconv), free(dssm), free(ref);
}

static void test_bp2c(void **st)
{
	(void)st;
	ss_train *t;
	assert_int_equal(ss_train_init(&t, model, MAX_T, MAX_SEQS), 0);
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t), n = ss_train_grads_of(t)->n;
	rng_state = 43;
	float *conv = test_frnd(&rng_state, cl, -1, 1), *ssm = test_frnd(&rng_state, sl, -1, 1);
	float *c0 = malloc(cl * sizeof *c0), *s0 = malloc(sl * sizeof *s0);
	float *ref = malloc(n * sizeof *ref);
	double loss, lref;

	memcpy(c0, conv, cl * sizeof *c0);
	memcpy(s0, ssm, sl * sizeof *s0);
	ss_train_zero_grad(t);
	lref = score_by_hand(t, conv, ssm, NULL, NULL);
	memcpy(ref, ss_train_grads_of(t)->data, n * sizeof *ref);
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_bp2c(t, conv, ssm, query, NQ, cont, NC, &loss), 0);
	assert_same_step(t, loss, lref, ref);
	assert_memory_equal(conv, c0, cl * sizeof *c0);
	assert_memory_equal(ssm, s0, sl * sizeof *s0);

	/* k = 0: the zero state, as bp2c from NULL and by hand */
	ss_train_zero_grad(t);
	lref = score_by_hand(t, NULL, NULL, NULL, NULL);
	memcpy(ref, ss_train_grads_of(t)->data, n * sizeof *ref);
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_bp2c(t, NULL, NULL, query, NQ, cont, NC, &loss), 0);
	assert_same_step(t, loss, lref, ref);
	ss_train_bptc_example ex = example(0, SS_COMPOSE_PICASO_R);
	ss_train_zero_grad(t);
	assert_int_equal(ss_train_bptc(t, &ex, &loss), 0);
	assert_same_step(t, loss, lref, ref);
	ss_train_free(t);
	free(conv), free(ssm), free(c0), free(s0), free(ref);
}

static void test_errors(void **st)
{
	(void)st;
	ss_train *t;
	double loss;
	assert_int_equal(ss_train_init(&t, model, MAX_T, MAX_SEQS), 0);
	const ss_train_params *G = ss_train_grads_of(t);
	ss_train_zero_grad(t);

	ss_train_bptc_example ex = example(3, SS_COMPOSE_MAX);
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	ex = example(3, SS_COMPOSE_PICASO_R);
	int32_t bad_chunk[4] = { 1, 2, (int32_t)model->cfg.vocab_padded, 3 };
	const int32_t *bc[3] = { chunks[0], bad_chunk, chunks[2] };
	const int64_t bl[3] = { 5, 4, 4 }, long_len[3] = { 5, MAX_T + 1, 4 };
	int32_t long_chunk[MAX_T + 1] = { 0 };
	const int32_t *lc[3] = { chunks[0], long_chunk, chunks[2] };
	ex.chunks = bc, ex.chunk_len = bl;
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	ex.chunks = lc, ex.chunk_len = long_len;
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	ex = example(3, SS_COMPOSE_PICASO_R);
	ex.n_cont = MAX_T - NQ + 2; /* query·continuation one row over */
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	ex.n_cont = 0;
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	ex = example(-1, SS_COMPOSE_PICASO_R);
	assert_int_equal(ss_train_bptc(t, &ex, &loss), SS_ERR_INVALID);
	assert_int_equal(ss_train_bp2c(t, NULL, NULL, query, 0, cont, NC, &loss), SS_ERR_INVALID);
	assert_int_equal(ss_train_bp2c(t, NULL, NULL, bad_chunk, 4, cont, NC, &loss), SS_ERR_INVALID);
	for (size_t i = 0; i < G->n; i++)
		assert_true(G->data[i] == 0.0f);
	ss_train_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oracle),
		cmocka_unit_test(test_one_chunk_by_hand),
		cmocka_unit_test(test_bp2c),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
