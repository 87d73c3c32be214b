/*
 * test_compose_grad.c — the backward of the composition (ss_compose.h:
 * ss_compose_weights_backward, ss_compose_backward) against double
 * precision central finite differences of the forward itself:
 *   - the weights W[h][k] of every mode (caso, picaso-s, picaso-r, soup,
 *     sum), n in {1, 2, 3, 5, 10}: the gradient of Σ c·W w.r.t. every input's
 *     logdecay, at random decays and at decays near 0, of -1e4 and of the
 *     f64-underflow range (with -inf beside them: gradients finite);
 *   - the composed state (ss_compose, f32): the gradient of
 *     Σ G·ssm + Σ g·conv + Σ l·logdecay of the result w.r.t. every element
 *     of every input's ssm, conv and logdecay, each mode, n in {1,2,3,5,10},
 *     conv mean and last;
 *   - the errors (mode max, normalisation, no input).
 * ref: picaso.txt §5, Props. 1-3.
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
#include "util/rng.h"

static uint64_t rng_state;

static double urand(void)
{
	return test_urand(&rng_state);
}

static const ss_compose_mode modes[] = { SS_COMPOSE_CASO, SS_COMPOSE_PICASO_S,
					 SS_COMPOSE_PICASO_R, SS_COMPOSE_SOUP, SS_COMPOSE_SUM };
enum { NMODES = sizeof modes / sizeof modes[0] };
static const size_t ns[] = { 1, 2, 3, 5, 10 };

/* ------------------------------------------------------------- weights */

enum { H = 3, NMAX = 10 };

/* Σ c·W of the forward, in f64. */
static double weights_loss(ss_compose_mode mode, size_t n, const float *a, const double *c)
{
	double w[H * NMAX], L = 0;
	assert_int_equal(ss_compose_weights(mode, n, H, a, w, NULL), 0);
	for (size_t i = 0; i < H * n; i++)
		L += c[i] * w[i];
	return L;
}

/* Decay sets: random, near 0, and extreme (-1e4, f64 underflow, -inf). */
enum { K_RANDOM, K_NEAR0, K_EXTREME, K_KINDS };

static float draw(int kind)
{
	double u = urand();
	switch (kind) {
	case K_RANDOM: return (float)(-0.05 - 4 * u);
	case K_NEAR0: return (float)(-1e-6 - 1e-3 * u);
	default: return u < 0.25 ? -INFINITY : u < 0.5 ? -1e4f : u < 0.75 ? (float)(-700 - 200 * u)
									 : (float)(-2 * u - 1e-3);
	}
}

/* Checks every logdecay's gradient of one case; returns mismatches. */
static int weights_case(ss_compose_mode mode, size_t n, int kind)
{
	float a[NMAX * H] = { 0 };
	double c[H * NMAX] = { 0 }, g[NMAX * H] = { 0 };
	int bad = 0;

	for (size_t i = 0; i < n * H; i++)
		a[i] = draw(kind);
	for (size_t i = 0; i < H * n; i++)
		c[i] = 2 * urand() - 1;
	assert_int_equal(ss_compose_weights_backward(mode, n, H, a, c, g, NULL), 0);
	for (size_t i = 0; i < n * H; i++) {
		const float a0 = a[i];
		if (!isfinite(g[i])) {
			printf("  %s n=%zu: dlogdecay[%zu] = %g at a = %g\n", ss_compose_mode_name(mode), n,
			       i, g[i], (double)a0);
			bad++;
			continue;
		}
		if (a0 == -INFINITY)
			continue; /* no neighbourhood to difference over */
		const double h = fmin(1e-3, 0.25 * fabs((double)a0));
		a[i] = (float)(a0 + h);
		const double hp = (double)a[i] - a0, lp = weights_loss(mode, n, a, c);
		a[i] = (float)(a0 - h);
		const double hm = a0 - (double)a[i], lm = weights_loss(mode, n, a, c);
		a[i] = a0;
		const double fd = (lp - lm) / (hp + hm);
		if (!(fabs(g[i] - fd) <= 1e-7 + 1e-5 * fabs(fd))) {
			printf("  %s n=%zu: dlogdecay[%zu] backward %.10g, finite difference %.10g "
			       "(a = %g)\n",
			       ss_compose_mode_name(mode), n, i, g[i], fd, (double)a0);
			bad++;
		}
	}
	return bad;
}

static void test_weights_gradient(void **unused)
{
	(void)unused;
	int bad = 0;
	rng_state = 31;
	for (int m = 0; m < NMODES; m++)
		for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
			for (int kind = 0; kind < K_KINDS; kind++)
				for (int rep = 0; rep < 3; rep++)
					bad += weights_case(modes[m], ns[j], kind);
	assert_int_equal(bad, 0);
}

/* Non-zero where the weights depend on the decays (the check above must
 * not pass by comparing zeros with zeros). */
static void test_weights_gradient_nonzero(void **unused)
{
	(void)unused;
	const float a[3] = { -0.5f, -1.0f, -0.25f };
	const double c[3] = { 1, 1, 1 };
	for (int m = 0; m < 3; m++) {
		double g[3] = { 0 };
		assert_int_equal(ss_compose_weights_backward(modes[m], 3, 1, a, c, g, NULL), 0);
		assert_true(fabs(g[1]) > 1e-3);
	}
}

/* ---------------------------------------------------------- the state */

static const ss_state_dims dims = { "mamba2", 2, 3, 2, 3, 4, 4 };

typedef struct {
	ss_compose_opts o;
	size_t n;
	ss_state *in;
	const float *G, *gc, *gl; /* weights of the composed ssm, conv, logdecay */
} state_problem;

static double state_loss(const state_problem *p)
{
	const ss_state *in[NMAX];
	ss_state out;
	char errmsg[SS_ERRMSG_MAX] = "";
	double L = 0;
	for (size_t k = 0; k < p->n; k++)
		in[k] = &p->in[k];
	int rc = ss_compose(&p->o, in, p->n, &out, errmsg);
	if (rc)
		printf("  %s\n", errmsg);
	assert_int_equal(rc, 0);
	for (size_t i = 0; i < ss_state_ssm_len(&dims); i++)
		L += (double)p->G[i] * out.ssm[i];
	for (size_t i = 0; i < ss_state_conv_len(&dims); i++)
		L += (double)p->gc[i] * out.conv[i];
	for (size_t i = 0; i < ss_state_logdecay_len(&dims); i++)
		L += (double)p->gl[i] * out.logdecay[i];
	ss_state_free(&out);
	return L;
}

/* Central difference of the loss in *v with step h (the exact steps of
 * the f32 values). */
static double fd_at(const state_problem *p, float *v, double h)
{
	const float v0 = *v;
	*v = (float)(v0 + h);
	const double hp = (double)*v - v0, lp = state_loss(p);
	*v = (float)(v0 - h);
	const double hm = v0 - (double)*v, lm = state_loss(p);
	*v = v0;
	return (lp - lm) / (hp + hm);
}

static int compare(const char *what, size_t k, size_t i, double g, double fd, const state_problem *p)
{
	if (fabs(g - fd) <= 2e-4 + 1e-3 * fabs(fd))
		return 0;
	printf("  %s n=%zu conv %s: d%s[%zu][%zu] backward %.8g, finite difference %.8g\n",
	       ss_compose_mode_name(p->o.mode), p->n, ss_compose_conv_names[p->o.conv], what, k, i, g,
	       fd);
	return 1;
}

static int state_case(ss_compose_mode mode, ss_compose_conv conv, size_t n)
{
	const size_t sl = ss_state_ssm_len(&dims), cl = ss_state_conv_len(&dims);
	const size_t ll = ss_state_logdecay_len(&dims);
	ss_state in[NMAX];
	state_problem p = { { mode, 0, conv }, n, in, NULL, NULL, NULL };
	float *G = test_frnd(&rng_state, sl, -1, 1), *gc = test_frnd(&rng_state, cl, -1, 1);
	float *gl = test_frnd(&rng_state, ll, -1, 1);
	float *dssm[NMAX], *dconv[NMAX], dld[NMAX * 16] = { 0 }, ld[NMAX * 16];
	const float *ssm[NMAX];
	int bad = 0;

	p.G = G, p.gc = gc, p.gl = gl;
	for (size_t k = 0; k < n; k++) {
		memset(&in[k], 0, sizeof in[k]);
		assert_int_equal(ss_state_alloc(&in[k], &dims), 0);
		for (size_t i = 0; i < sl; i++)
			in[k].ssm[i] = (float)(2 * urand() - 1);
		for (size_t i = 0; i < cl; i++)
			in[k].conv[i] = (float)(2 * urand() - 1);
		for (size_t i = 0; i < ll; i++)
			ld[k * ll + i] = in[k].logdecay[i] = (float)(-0.05 - 3 * urand());
		ssm[k] = in[k].ssm;
		dssm[k] = calloc(sl, sizeof(float));
		dconv[k] = calloc(cl, sizeof(float));
	}
	assert_int_equal(ss_compose_backward(&p.o, &dims, n, ssm, ld, G, gc, gl, dssm, dconv, dld,
					     NULL),
			 0);
	for (size_t k = 0; k < n; k++) {
		/* linear in ssm and conv: a large exact step, no truncation error */
		for (size_t i = 0; i < sl; i++)
			bad += compare("ssm", k, i, dssm[k][i], fd_at(&p, &in[k].ssm[i], 0.125), &p);
		for (size_t i = 0; i < cl; i++)
			bad += compare("conv", k, i, dconv[k][i], fd_at(&p, &in[k].conv[i], 0.125), &p);
		for (size_t i = 0; i < ll; i++)
			bad += compare("logdecay", k, i, dld[k * ll + i],
				       fd_at(&p, &in[k].logdecay[i], 3e-3), &p);
	}
	for (size_t k = 0; k < n; k++) {
		ss_state_free(&in[k]);
		free(dssm[k]), free(dconv[k]);
	}
	free(G), free(gc), free(gl);
	return bad;
}

static void test_state_gradient(void **unused)
{
	(void)unused;
	int bad = 0;
	rng_state = 32;
	assert_true(ss_state_logdecay_len(&dims) <= 16);
	for (int m = 0; m < NMODES; m++)
		for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
			for (int conv = 0; conv < 2; conv++)
				bad += state_case(modes[m], (ss_compose_conv)conv, ns[j]);
	assert_int_equal(bad, 0);
}

static void test_errors(void **unused)
{
	(void)unused;
	const float a[2] = { -1, -1 }, x[36] = { 0 }, *ssm[2] = { x, x };
	const double c[2] = { 1, 1 };
	double g[2];
	char errmsg[SS_ERRMSG_MAX];
	ss_compose_opts o = { SS_COMPOSE_MAX, 0, SS_COMPOSE_CONV_MEAN };
	assert_int_equal(ss_compose_backward(&o, &dims, 2, ssm, a, x, NULL, NULL, NULL, NULL, NULL,
					     errmsg),
			 SS_ERR_UNSUPPORTED);
	o.mode = SS_COMPOSE_PICASO_R;
	o.norm = SS_COMPOSE_NORM_AFTER;
	assert_int_equal(ss_compose_backward(&o, &dims, 2, ssm, a, x, NULL, NULL, NULL, NULL, NULL,
					     errmsg),
			 SS_ERR_UNSUPPORTED);
	assert_int_equal(ss_compose_weights_backward(SS_COMPOSE_CASO, 0, 1, a, c, g, errmsg),
			 SS_ERR_INVALID);
	assert_int_equal(ss_compose_weights_backward(SS_COMPOSE_MAX, 2, 1, a, c, g, errmsg),
			 SS_ERR_INVALID);
	const float pos[2] = { -1, 0.5f };
	assert_int_equal(ss_compose_weights_backward(SS_COMPOSE_CASO, 2, 1, pos, c, g, errmsg),
			 SS_ERR_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_weights_gradient),
		cmocka_unit_test(test_weights_gradient_nonzero),
		cmocka_unit_test(test_state_gradient),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
