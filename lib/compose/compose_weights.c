/*
 * compose_weights.c — the names of composition's options and the composition
 * weights W_k of every mode (CASO, PICASO-S, PICASO-R, soup, sum), from the
 * decays alone. See ss_compose.h for the contract; the states are folded
 * with them in compose.c.
 * ref: picaso.txt §3.3, Props. 1-3, Appendix A; docs/DESIGN.md §3;
 *      document-souping.txt §2.2.
 */
#include "ss.h"
#include "compose/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ names */

const ss_compose_mode_info ss_compose_modes[SS_COMPOSE_N_MODES] = {
	{"caso", 0}, {"picaso-s", 1}, {"picaso-r", 1}, {"soup", 0}, {"sum", 0}, {"max", 0},
};
const char *const ss_compose_norm_names[SS_COMPOSE_N_NORMS] = {"none", "before", "after", "both"};
const char *const ss_compose_conv_names[SS_COMPOSE_N_CONVS] = {"mean", "last"};

const char *ss_compose_mode_name(ss_compose_mode m)
{
	return (unsigned)m < SS_COMPOSE_N_MODES ? ss_compose_modes[m].name : NULL;
}

int ss_compose_mode_parse(const char *s, ss_compose_mode *out)
{
	for (int i = 0; s && i < SS_COMPOSE_N_MODES; i++)
		if (strcmp(s, ss_compose_modes[i].name) == 0) {
			*out = (ss_compose_mode)i;
			return 0;
		}
	return SS_ERR_INVALID;
}

/* ---------------------------------------------------------------- weights */

/* P_m(x) by Bonnet's recurrence, returned; *dp = P'_m(x) from P_m and
 * P_{m-1} (for m = 1, P_0 = 1). |x| < 1. */
static double legendre(size_t m, double x, double *dp)
{
	double p0 = 1, p1 = x;
	for (size_t k = 1; k < m; k++) {
		double p2 = ((2.0 * k + 1) * x * p1 - (double)k * p0) / (double)(k + 1);
		p0 = p1;
		p1 = p2;
	}
	*dp = (double)m * (x * p1 - p0) / (x * x - 1);
	return p1;
}

void ss_gauss_legendre01(size_t m, double *t, double *wt)
{
	/* Roots of P_m on [-1, 1] by Newton from Tricomi's estimate; the rule is
	 * symmetric, so only the upper half is solved and mirrored, which keeps
	 * t[i] + t[m-1-i] = 1 and wt symmetric exactly. */
	const double pi = 3.14159265358979323846;
	for (size_t i = 0; i < (m + 1) / 2; i++) {
		double x = cos(pi * ((double)i + 0.75) / ((double)m + 0.5));
		double dp;
		for (int it = 0; it < 100; it++) {
			double dx = legendre(m, x, &dp) / dp;
			x -= dx;
			if (fabs(dx) <= 1e-16 * (1 + fabs(x)))
				break;
		}
		if (m % 2 == 1 && i == m / 2)
			x = 0; /* the middle root of an odd rule is exactly 0 */
		legendre(m, x, &dp); /* P'_m at the final x, for the weight */
		double w = 1.0 / ((1 - x * x) * dp * dp); /* 2/(...) on [-1,1], halved */
		/* x descends with i: t = (1 - x)/2 ascends. */
		t[i] = 0.5 * (1 - x);
		t[m - 1 - i] = 0.5 * (1 + x);
		wt[i] = wt[m - 1 - i] = w;
	}
	if (m == 1)
		t[0] = 0.5, wt[0] = 1;
}

static int check_decays(size_t n, size_t n_head, const float *a, char *errmsg)
{
	for (size_t k = 0; k < n; k++)
		for (size_t h = 0; h < n_head; h++) {
			float v = a[k * n_head + h];
			if (!(v <= 0)) {
				ss_errf(errmsg, 0, "input %zu, head %zu: logdecay %g is not <= 0", k, h,
					(double)v);
				return SS_ERR_INVALID;
			}
		}
	return 0;
}

/* caso: W_k = exp(Σ_{j>k} a_j); the suffix sum stays finite or -inf, never
 * a product that underflows before the end. */
static void weights_caso(size_t n, size_t n_head, const float *a, size_t h, double *w)
{
	double s = 0;
	for (size_t k = n; k-- > 0;) {
		w[k] = exp(s);
		s += a[k * n_head + h];
	}
}

/* picaso-r: T_k = Σ_{m<n} Π_{j=1..m} d_{(k+j) mod n}, W_k = T_k/n.
 * T_{n-1} = 1 + d_0(1 + d_1(… (1 + d_{n-2}))) by Horner, then
 * T_k = (1 - P) + d_{k+1} T_{k+1}: d_{k+1} T_{k+1} is T_k's series shifted
 * by one, with the full cycle P added and the 1 missing. Every term is ≥ 0,
 * so there is no cancellation and no division by a product (Algorithm 3's
 * Â_Π[i]^{-1} fails once the cumulative product underflows). */
static void weights_picaso_r(size_t n, size_t n_head, const float *a, size_t h, double *w)
{
	double sum = 0;
	for (size_t k = 0; k < n; k++)
		sum += a[k * n_head + h];
	double one_minus_p = -expm1(sum);
	double t = 1;
	for (size_t j = n - 1; j-- > 0;)
		t = 1 + exp((double)a[j * n_head + h]) * t;
	w[n - 1] = t;
	for (size_t k = n - 1; k-- > 0;) {
		t = one_minus_p + exp((double)a[(k + 1) * n_head + h]) * t;
		w[k] = t;
	}
	for (size_t k = 0; k < n; k++)
		w[k] /= (double)n;
}

/* picaso-s: in a uniformly random order (iid uniform arrival times, input k
 * at time t), input j comes after k with probability 1 - t, and k's CASO
 * weight is the product of the decays of those after it, so
 *   W_k = ∫_0^1 Π_{j≠k} (t + (1-t) d_j) dt,
 * a polynomial of degree n-1, integrated exactly by the m-node rule
 * (2m-1 ≥ n-1). Each factor lies in [t, 1], so the products are accurate to
 * a few ulps; a node's product that underflows is below 1e-308 while
 * W_k ≥ ∫ t^{n-1} = 1/n: plain products suffice, no logs needed. The
 * prefix/suffix split gives Π_{j≠k} without dividing by the own factor. */
static void weights_picaso_s(size_t n, size_t n_head, const float *a, size_t h, double *w,
			     size_t m, const double *t, const double *wt, double *d, double *pre)
{
	for (size_t k = 0; k < n; k++) {
		d[k] = exp((double)a[k * n_head + h]);
		w[k] = 0;
	}
	for (size_t i = 0; i < m; i++) {
		double ti = t[i], ui = 1 - ti;
		pre[0] = 1;
		for (size_t j = 0; j < n; j++)
			pre[j + 1] = pre[j] * (ti + ui * d[j]);
		double suf = 1;
		for (size_t k = n; k-- > 0;) {
			w[k] += wt[i] * (pre[k] * suf);
			suf *= ti + ui * d[k];
		}
	}
}

int ss_compose_weights_check(ss_compose_mode mode, size_t n, size_t n_head, const float *logdecay,
			     char *errmsg)
{
	if (n == 0) {
		ss_errf(errmsg, 0, "no inputs to compose");
		return SS_ERR_INVALID;
	}
	if (mode == SS_COMPOSE_MAX || (unsigned)mode >= SS_COMPOSE_N_MODES) {
		ss_errf(errmsg, 0, "mode %s has no weights", mode == SS_COMPOSE_MAX ? "max" : "(unknown)");
		return SS_ERR_INVALID;
	}
	return check_decays(n, n_head, logdecay, errmsg);
}

int ss_compose_weights(ss_compose_mode mode, size_t n, size_t n_head, const float *logdecay,
		       double *w, char *errmsg)
{
	int rc = ss_compose_weights_check(mode, n, n_head, logdecay, errmsg);
	if (rc)
		return rc;
	if (n == 1) {
		/* Every mode's single weight is exactly 1; say so without rounding. */
		for (size_t h = 0; h < n_head; h++)
			w[h] = 1;
		return 0;
	}
	double *scratch = NULL, *t = NULL, *wt = NULL, *d = NULL, *pre = NULL;
	size_t m = (n + 1) / 2;
	if (mode == SS_COMPOSE_PICASO_S) {
		scratch = malloc((2 * m + 2 * n + 1) * sizeof *scratch);
		if (!scratch) {
			ss_errf(errmsg, 0, "out of memory");
			return SS_ERR_NOMEM;
		}
		t = scratch;
		wt = t + m;
		d = wt + m;
		pre = d + n;
		ss_gauss_legendre01(m, t, wt);
	}
	for (size_t h = 0; h < n_head; h++) {
		double *wh = w + h * n;
		switch (mode) {
		case SS_COMPOSE_CASO:
			weights_caso(n, n_head, logdecay, h, wh);
			break;
		case SS_COMPOSE_PICASO_R:
			weights_picaso_r(n, n_head, logdecay, h, wh);
			break;
		case SS_COMPOSE_PICASO_S:
			weights_picaso_s(n, n_head, logdecay, h, wh, m, t, wt, d, pre);
			break;
		case SS_COMPOSE_SOUP:
			for (size_t k = 0; k < n; k++)
				wh[k] = 1.0 / (double)n;
			break;
		default: /* sum */
			for (size_t k = 0; k < n; k++)
				wh[k] = 1;
			break;
		}
	}
	free(scratch);
	return 0;
}
