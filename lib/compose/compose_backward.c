/*
 * compose_backward.c — the backward of the composition (ss_compose.h): the
 * gradient of the weights W[h][k] w.r.t. the inputs' logdecays, and of the
 * composed state w.r.t. every input's ssm, conv and logdecay. It
 * differentiates the functions compose_weights.c's forward computes (the same
 * quadrature rule for picaso-s, the same cyclic series for picaso-r), with
 * products of decays formed as in the forward: no division by a decay, so
 * decays that underflow (or are -inf) give finite gradients.
 * ref: picaso.txt §5 (BPTC), Props. 1-3; docs/DESIGN.md §3; compose_weights.c.
 */
#include "ss.h"
#include "compose/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* caso: W_k = exp(S_k), S_k = Σ_{j>k} a_j, so ∂W_k/∂a_m = W_k for m > k:
 * dlog[m] = Σ_{k<m} dw_k·W_k, a prefix sum. */
static void caso_backward(size_t n, size_t n_head, const float *a, size_t h, const double *dw,
			  double *w, double *dlog)
{
	double s = 0, acc = 0;
	for (size_t k = n; k-- > 0;) {
		w[k] = exp(s);
		s += a[k * n_head + h];
	}
	for (size_t m = 0; m < n; m++) {
		dlog[m * n_head + h] += acc;
		acc += dw[m] * w[m];
	}
}

/* picaso-r: W_k = T_k/n, T_k = Σ_{m=0}^{n-1} p_{k,m},
 * p_{k,m} = Π_{j=1..m} d_{(k+j) mod n}. Input i at cyclic offset
 * r = (i-k) mod n ≥ 1 appears (once) in the terms m ≥ r, each of which is
 * its own derivative w.r.t. a_i: ∂T_k/∂a_i = Σ_{m≥r} p_{k,m}, a suffix sum
 * of non-negative terms. O(n²) per head. */
static void picaso_r_backward(size_t n, size_t n_head, const float *a, size_t h, const double *dw,
			      double *p, double *dlog)
{
	for (size_t k = 0; k < n; k++) {
		double s = 0;
		for (size_t m = 1; m < n; m++) {
			s += a[((k + m) % n) * n_head + h];
			p[m] = exp(s);
		}
		double suf = 0, g = dw[k] / (double)n;
		for (size_t r = n - 1; r >= 1; r--) {
			suf += p[r];
			dlog[((k + r) % n) * n_head + h] += g * suf;
		}
	}
}

/* picaso-s: W_k = Σ_i wt_i Π_{j≠k} f_ij, f_ij = t_i + (1-t_i)·d_j (the
 * forward's Gauss–Legendre rule), so for m ≠ k
 *   ∂W_k/∂a_m = Σ_i wt_i (1-t_i) d_m Π_{j∉{k,m}} f_ij.
 * Per node and m, Σ_{k≠m} dw_k Π_{j∉{k,m}} f_ij by the forward's
 * prefix/suffix products with f_im set to 1 (no division by f_im).
 * O(n³/2) per head: n ≤ the tens of chunks a training example composes. */
static void picaso_s_backward(size_t n, size_t n_head, const float *a, size_t h, const double *dw,
			      size_t nodes, const double *t, const double *wt, double *d, double *f,
			      double *pre, double *dlog)
{
	for (size_t j = 0; j < n; j++)
		d[j] = exp((double)a[j * n_head + h]);
	for (size_t i = 0; i < nodes; i++) {
		double ti = t[i], ui = 1 - ti;
		for (size_t j = 0; j < n; j++)
			f[j] = ti + ui * d[j];
		for (size_t m = 0; m < n; m++) {
			double fm = f[m], sum = 0, suf = 1;
			f[m] = 1;
			pre[0] = 1;
			for (size_t j = 0; j < n; j++)
				pre[j + 1] = pre[j] * f[j];
			for (size_t k = n; k-- > 0;) {
				if (k != m)
					sum += dw[k] * (pre[k] * suf);
				suf *= f[k];
			}
			f[m] = fm;
			dlog[m * n_head + h] += wt[i] * ui * d[m] * sum;
		}
	}
}

int ss_compose_weights_backward(ss_compose_mode mode, size_t n, size_t n_head,
				const float *logdecay, const double *dw, double *dlogdecay,
				char *errmsg)
{
	int rc = ss_compose_weights_check(mode, n, n_head, logdecay, errmsg);
	if (rc)
		return rc;
	/* One input: every mode's weight is the constant 1 (as the forward
	 * says it exactly); soup and sum: constants whatever the decays. */
	if (n == 1 || mode == SS_COMPOSE_SOUP || mode == SS_COMPOSE_SUM)
		return 0;
	size_t nodes = (n + 1) / 2;
	double *scratch = malloc((2 * nodes + 4 * n + 2) * sizeof *scratch);
	if (!scratch) {
		ss_errf(errmsg, 0, "out of memory");
		return SS_ERR_NOMEM;
	}
	double *t = scratch, *wt = t + nodes, *d = wt + nodes, *f = d + n, *pre = f + n;
	if (mode == SS_COMPOSE_PICASO_S)
		ss_gauss_legendre01(nodes, t, wt);
	for (size_t h = 0; h < n_head; h++) {
		const double *dwh = dw + h * n;
		switch (mode) {
		case SS_COMPOSE_CASO:
			caso_backward(n, n_head, logdecay, h, dwh, d, dlogdecay);
			break;
		case SS_COMPOSE_PICASO_R:
			picaso_r_backward(n, n_head, logdecay, h, dwh, d, dlogdecay);
			break;
		default: /* picaso-s */
			picaso_s_backward(n, n_head, logdecay, h, dwh, nodes, t, wt, d, f, pre,
					  dlogdecay);
			break;
		}
	}
	free(scratch);
	return 0;
}

/* Σ x·y over n floats, in f64. */
static double dot(const float *x, const float *y, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * y[i];
	return s;
}

/* The composed logdecay's gradient (see ss_compose.h for the forward):
 * caso/picaso: Σ_k a_k; soup/sum: log(mean_k d_k) (a softmax of the a_k),
 * clamped at 0 (only rounding reaches it: no gradient there). */
static void logdecay_out_backward(ss_compose_mode mode, size_t n, size_t n_head, const float *a,
				  const float *dout, double *dlog)
{
	for (size_t h = 0; h < n_head; h++) {
		if (mode <= SS_COMPOSE_PICASO_R) {
			for (size_t k = 0; k < n; k++)
				dlog[k * n_head + h] += dout[h];
			continue;
		}
		double mx = -INFINITY, s = 0;
		for (size_t k = 0; k < n; k++)
			if (a[k * n_head + h] > mx)
				mx = a[k * n_head + h];
		if (mx == -INFINITY)
			continue;
		for (size_t k = 0; k < n; k++)
			s += exp(a[k * n_head + h] - mx);
		if (mx + log(s / (double)n) > 0)
			continue;
		for (size_t k = 0; k < n; k++)
			dlog[k * n_head + h] += dout[h] * exp(a[k * n_head + h] - mx) / s;
	}
}

int ss_compose_backward(const ss_compose_opts *o, const ss_state_dims *dims, size_t n,
			const float *const *ssm, const float *logdecay, const float *dssm_out,
			const float *dconv_out, const float *dlogdecay_out, float *const *dssm,
			float *const *dconv, float *dlogdecay, char *errmsg)
{
	if (!o || !ss_compose_mode_name(o->mode) || (unsigned)o->conv >= SS_COMPOSE_N_CONVS) {
		ss_errf(errmsg, 0, "invalid composition options");
		return SS_ERR_INVALID;
	}
	if (o->mode == SS_COMPOSE_MAX || o->norm) {
		ss_errf(errmsg, 0, "no backward for %s", o->norm ? "normalisation" : "mode max");
		return SS_ERR_UNSUPPORTED;
	}
	const size_t H = (size_t)dims->n_layer * (size_t)dims->nheads;
	const size_t hlen = (size_t)dims->headdim * (size_t)dims->d_state;
	const size_t conv_len = ss_state_conv_len(dims);
	int weighted = o->mode <= SS_COMPOSE_PICASO_R;
	double *w = malloc((2 * H * n + n * H) * sizeof *w);
	if (!w) {
		ss_errf(errmsg, 0, "out of memory");
		return SS_ERR_NOMEM;
	}
	double *dw = w + H * n, *dlog = dw + H * n;
	int rc = ss_compose_weights(o->mode, n, H, logdecay, w, errmsg);
	if (rc) {
		free(w);
		return rc;
	}
	memset(dw, 0, H * n * sizeof *dw);
	memset(dlog, 0, n * H * sizeof *dlog);
	for (size_t h = 0; dssm_out && h < H; h++) {
		const float *g = dssm_out + h * hlen;
		for (size_t k = 0; k < n; k++) {
			/* the forward scales each input by the f32 weight */
			float c = (float)w[h * n + k];
			if (weighted && n > 1)
				dw[h * n + k] = dot(g, ssm[k] + h * hlen, hlen);
			if (dssm && dssm[k])
				for (size_t e = 0; e < hlen; e++)
					dssm[k][h * hlen + e] += c * g[e];
		}
	}
	for (size_t k = 0; dconv_out && dconv && k < n; k++) {
		if (!dconv[k] || (o->conv == SS_COMPOSE_CONV_LAST && k != n - 1))
			continue;
		float c = o->conv == SS_COMPOSE_CONV_LAST ? 1.0f : (float)(1.0 / (double)n);
		for (size_t e = 0; e < conv_len; e++)
			dconv[k][e] += c * dconv_out[e];
	}
	if (dlogdecay) {
		if (weighted && dssm_out &&
		    (rc = ss_compose_weights_backward(o->mode, n, H, logdecay, dw, dlog, errmsg))) {
			free(w);
			return rc;
		}
		if (dlogdecay_out)
			logdecay_out_backward(o->mode, n, H, logdecay, dlogdecay_out, dlog);
		for (size_t i = 0; i < n * H; i++)
			dlogdecay[i] += (float)dlog[i];
	}
	free(w);
	return 0;
}
