/*
 * test_compose.c — the composition algebra against a brute-force oracle.
 *
 * The oracle runs the CASO recurrence literally (acc = d·acc + x, in long
 * double) over every one of the n! orders (picaso-s) or n cyclic orders
 * (picaso-r) and averages, for n = 1..7 and decays that are random,
 * extreme (a = 0, a = -1e4, -inf), mixed, and long-document sized (products
 * that underflow f32 and f64). Then the invariances the methods promise, the
 * identity for one input, the options, the errors, and the same checks on
 * the real t1 states of golden/ (soup of c3 + docB must equal the golden
 * composed state S bit for bit).
 * ref: picaso.txt Props. 1-3; docs/DESIGN.md §3; tests/fixtures/golden/README.md §4.1.
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
#include "compose/internal.h"
#include "stream/internal.h" /* raw frames written by hand: ss_writer_begin_raw */
#include "util/tmpdir.h"

#define REL_TOL 1e-6

/* ------------------------------------------------------------ helpers */

/* Shorthands for ss_compose_run (the driver) and the composer's one input
 * path (begin / fold / end), in the shapes the tests call them. */
typedef struct {
	int set_dtype;
	ss_dtype dtype;
	const char *id;
} output_how;

/* The files paths[0..n) with `threads` threads, written to w (NULL: none)
 * as how says (NULL: as the inputs); *bytes, *write_failed may be NULL. */
static int files_to(const ss_compose_opts *o, int threads, const char *const *paths, size_t n, ss_writer *w,
		    const output_how *how, ss_state *out, uint64_t *bytes, int *write_failed, char *err)
{
	ss_compose_run_opts r = {.paths = paths, .n_paths = n, .threads = threads, .w = w};
	if (how)
		r.set_dtype = how->set_dtype, r.dtype = how->dtype, r.id = how->id;
	ss_compose_result res;
	int rc = ss_compose_run(o, &r, &res, err);
	*out = res.state;
	if (bytes)
		*bytes = res.bytes_in;
	if (write_failed)
		*write_failed = res.write_failed;
	return rc;
}

static int files(const ss_compose_opts *o, int threads, const char *const *paths, size_t n, ss_state *out,
		 uint64_t *bytes, char *err)
{
	return files_to(o, threads, paths, n, NULL, NULL, out, bytes, NULL, err);
}

/* The n records read(arg, i, ...) gives. */
static int records(const ss_compose_opts *o, size_t n, ss_compose_read_fn read, void *arg, ss_state *out,
		   char *err)
{
	ss_compose_run_opts r = {.read = read, .read_arg = arg, .n = n};
	ss_compose_result res;
	int rc = ss_compose_run(o, &r, &res, err);
	*out = res.state;
	return rc;
}

/* Adds x with its ssm and conv arrays at ssm, conv in dtype, each whole. */
static int add_arrays(ss_composer *c, const ss_state *x, const void *ssm, const void *conv, ss_dtype dtype,
		      char *err)
{
	ss_state m = *x;
	m.dtype = dtype;
	m.shuffle = 0;
	size_t es = ss_dtype_size(dtype);
	int rc = ss_composer_begin(c, &m, err);
	if (!rc)
		rc = ss_composer_fold(c, 1, 0, ssm, ss_state_ssm_len(&x->dims) * es, err);
	if (!rc)
		rc = ss_composer_fold(c, 0, 0, conv, ss_state_conv_len(&x->dims) * es, err);
	return rc ? rc : ss_composer_end(c, err);
}

static int add(ss_composer *c, const ss_state *x, char *err)
{
	return add_arrays(c, x, x->ssm, x->conv, SS_DTYPE_F32, err);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
	return ss_splitmix64(&rng_state);
}

static double rng_unif(void) /* [0, 1) */
{
	return (double)(rng_next() >> 11) * 0x1.0p-53;
}

/* Kinds of decay sets the oracle is run on. */
enum { D_RANDOM, D_SMALL, D_ZERO, D_HUGE, D_MIX, D_LONG, D_F32UNDER, D_NEGINF, D_KINDS };
static const char *const kind_names[D_KINDS] = {"random", "small", "zero", "-1e4", "mix 0/-1e4",
						"long (f64 underflow)", "f32 underflow", "-inf mix"};

static float draw_decay(int kind)
{
	switch (kind) {
	case D_RANDOM: return (float)(-5 * rng_unif());
	case D_SMALL: return (float)(-1e-3 * rng_unif());
	case D_ZERO: return 0;
	case D_HUGE: return -1e4f;
	case D_MIX: return rng_unif() < 0.5 ? 0.0f : -1e4f;
	case D_LONG: return (float)(-700 - 400 * rng_unif());
	case D_F32UNDER: return (float)(-60 - 60 * rng_unif());
	default: {
		double u = rng_unif();
		return u < 0.3 ? -INFINITY : u < 0.6 ? 0.0f : (float)(-3 * rng_unif());
	}
	}
}

static const ss_state_dims small_dims = {"mamba2", 2, 3, 2, 3, 4, 4};
/* Mamba-1: d_inner 5 channels ("heads" of headdim 1), d_state 3, one decay
 * per (channel, state element). */
static const ss_state_dims m1_dims = {"mamba1", 2, 5, 1, 3, 5, 4};

/* A state of dims d with random ssm/conv in [-1, 1] and decays of `kind`. */
static void make_state(ss_state *s, const ss_state_dims *d, int kind, const char *id)
{
	assert_int_equal(ss_state_alloc(s, d), 0);
	s->id = strdup(id);
	strcpy(s->fingerprint, "f00d");
	s->n_tokens = 10;
	for (size_t i = 0; i < ss_state_ssm_len(d); i++)
		s->ssm[i] = (float)(2 * rng_unif() - 1);
	for (size_t i = 0; i < ss_state_conv_len(d); i++)
		s->conv[i] = (float)(2 * rng_unif() - 1);
	for (size_t i = 0; i < ss_state_logdecay_len(d); i++)
		s->logdecay[i] = draw_decay(kind);
}

static void free_states(ss_state *s, size_t n)
{
	for (size_t k = 0; k < n; k++)
		ss_state_free(&s[k]);
}

/* Calls fn on every permutation of [0, n) (Heap's algorithm). */
static void each_perm(size_t n, void (*fn)(const size_t *perm, void *arg), void *arg)
{
	size_t p[8], c[8] = {0};
	for (size_t i = 0; i < n; i++)
		p[i] = i;
	fn(p, arg);
	for (size_t i = 1; i < n;) {
		if (c[i] < i) {
			size_t j = i % 2 ? c[i] : 0, t = p[j];
			p[j] = p[i];
			p[i] = t;
			fn(p, arg);
			c[i]++;
			i = 1;
		} else {
			c[i++] = 0;
		}
	}
}

/* The oracle: sums, over the given orders, the literal CASO recurrence on
 * ssm (and on |ssm|, for the scale of rounding). */
typedef struct {
	const ss_state *in;
	size_t n, len, nheads, hlen;
	long double *sum, *abs_sum;
	size_t count;
} oracle;

static void oracle_order(const size_t *perm, void *arg)
{
	oracle *o = arg;
	for (size_t e = 0; e < o->len; e++) {
		/* layer*nheads + head (Mamba-2: a head's headdim·d_state elements
		 * share it); Mamba-1: ssm[l][d][0][n] has logdecay[l][d][n] */
		size_t gh = e / o->hlen;
		long double acc = 0, aacc = 0;
		for (size_t i = 0; i < o->n; i++) {
			const ss_state *x = &o->in[perm[i]];
			long double d = expl((long double)x->logdecay[gh]);
			acc = d * acc + x->ssm[e];
			aacc = d * aacc + fabsl((long double)x->ssm[e]);
		}
		o->sum[e] += acc;
		o->abs_sum[e] += aacc;
	}
	o->count++;
}

/* ref[len], scale[len]: the oracle's composed ssm for mode caso / picaso-s /
 * picaso-r, and Σ W_k |x_k| for the tolerance. */
static void oracle_ssm(ss_compose_mode mode, const ss_state *in, size_t n, long double *ref,
		       long double *scale)
{
	const ss_state_dims *d = &in[0].dims;
	oracle o = {in, n, ss_state_ssm_len(d), (size_t)d->nheads,
		    strcmp(d->arch, "mamba1") ? (size_t)d->headdim * d->d_state : 1, ref, scale, 0};
	memset(ref, 0, o.len * sizeof *ref);
	memset(scale, 0, o.len * sizeof *scale);
	size_t p[8];
	if (mode == SS_COMPOSE_PICASO_S) {
		each_perm(n, oracle_order, &o);
	} else if (mode == SS_COMPOSE_PICASO_R) {
		for (size_t s = 0; s < n; s++) {
			for (size_t i = 0; i < n; i++)
				p[i] = (s + i) % n;
			oracle_order(p, &o);
		}
	} else { /* caso: the given order */
		for (size_t i = 0; i < n; i++)
			p[i] = i;
		oracle_order(p, &o);
	}
	for (size_t e = 0; e < o.len; e++) {
		ref[e] /= o.count;
		scale[e] /= o.count;
	}
}

static ss_compose_opts opts_of(ss_compose_mode m)
{
	ss_compose_opts o = {m, 0, SS_COMPOSE_CONV_MEAN};
	return o;
}

static void compose_ok(ss_compose_mode mode, const ss_state *in, size_t n, ss_state *out)
{
	const ss_state *ptr[16];
	for (size_t k = 0; k < n; k++)
		ptr[k] = &in[k];
	char err[SS_ERRMSG_MAX] = "";
	ss_compose_opts o = opts_of(mode);
	int rc = ss_compose(&o, ptr, n, out, err);
	if (rc)
		fail_msg("ss_compose %s n=%zu: %s (%s)", ss_compose_mode_name(mode), n, ss_strerror(rc), err);
}

/* |got - ref| <= REL_TOL * scale + tiny, elementwise; prints the first misses. */
static void expect_close(const char *what, const float *got, const long double *ref,
			 const long double *scale, size_t len)
{
	int bad = 0;
	for (size_t e = 0; e < len; e++) {
		long double err = fabsl((long double)got[e] - ref[e]);
		if (!(err <= REL_TOL * scale[e] + 1e-37L)) {
			if (bad < 5)
				print_error("%s: element %zu: got %.9g, oracle %.12Lg (scale %.3Lg)\n",
					    what, e, (double)got[e], ref[e], scale[e]);
			bad++;
		}
	}
	if (bad)
		fail_msg("%s: %d of %zu elements off", what, bad, len);
}

/* Composes in[0..n-1] in `mode` and checks against the oracle. */
static void check_vs_oracle(ss_compose_mode mode, const ss_state *in, size_t n, const char *label)
{
	size_t len = ss_state_ssm_len(&in[0].dims);
	long double *ref = malloc(len * sizeof *ref), *scale = malloc(len * sizeof *scale);
	assert_non_null(ref);
	assert_non_null(scale);
	oracle_ssm(mode, in, n, ref, scale);
	ss_state out;
	compose_ok(mode, in, n, &out);
	char what[160];
	snprintf(what, sizeof what, "%s n=%zu %s", ss_compose_mode_name(mode), n, label);
	expect_close(what, out.ssm, ref, scale, len);
	/* composed logdecay = decay of the concatenation, any order */
	size_t H = ss_state_logdecay_len(&in[0].dims);
	for (size_t h = 0; h < H; h++) {
		double sum = 0;
		for (size_t k = 0; k < n; k++)
			sum += in[k].logdecay[h];
		assert_true(out.logdecay[h] == (float)sum || (isinf(sum) && isinf(out.logdecay[h])));
	}
	ss_state_free(&out);
	free(ref);
	free(scale);
}

/* ------------------------------------------------------------ oracle tests */

static void test_gauss_legendre(void **unused)
{
	(void)unused;
	double t[40], w[40];
	for (size_t m = 1; m <= 40; m++) {
		ss_gauss_legendre01(m, t, w);
		for (size_t i = 0; i < m; i++) {
			assert_true(t[i] > 0 && t[i] < 1 && w[i] > 0);
			if (i)
				assert_true(t[i] > t[i - 1]);
		}
		/* exact for t^p, p <= 2m-1 */
		for (size_t p = 0; p <= 2 * m - 1; p++) {
			double s = 0;
			for (size_t i = 0; i < m; i++)
				s += w[i] * pow(t[i], (double)p);
			if (fabs(s - 1.0 / (p + 1)) > 1e-14)
				fail_msg("m=%zu p=%zu: %.17g vs %.17g", m, p, s, 1.0 / (p + 1));
		}
	}
}

static void test_oracle_all_modes(void **unused)
{
	(void)unused;
	static const ss_compose_mode modes[] = {SS_COMPOSE_CASO, SS_COMPOSE_PICASO_S,
						SS_COMPOSE_PICASO_R};
	rng_state = 1;
	for (int kind = 0; kind < D_KINDS; kind++)
		for (size_t n = 1; n <= 7; n++)
			for (int rep = 0; rep < 2; rep++) {
				ss_state in[7];
				for (size_t k = 0; k < n; k++) {
					char id[16];
					snprintf(id, sizeof id, "d%zu", k);
					/* reps mix kinds across inputs too */
					make_state(&in[k], &small_dims, rep && k % 2 ? (kind + 3) % D_KINDS : kind, id);
				}
				for (size_t m = 0; m < 3; m++)
					check_vs_oracle(modes[m], in, n, kind_names[kind]);
				free_states(in, n);
			}
}

/* Mamba-1 states: every state element of every channel has its own decays,
 * drawn independently (a composition that weighed by channel or by state
 * index alone would miss the oracle). */
static void test_oracle_mamba1(void **unused)
{
	(void)unused;
	static const ss_compose_mode modes[] = {SS_COMPOSE_CASO, SS_COMPOSE_PICASO_S,
						SS_COMPOSE_PICASO_R};
	rng_state = 11;
	assert_int_equal(ss_state_logdecay_len(&m1_dims), 2 * 5 * 3);
	assert_int_equal(ss_state_ssm_len(&m1_dims), 2 * 5 * 3);
	for (int kind = 0; kind < D_KINDS; kind++)
		for (size_t n = 1; n <= 6; n++) {
			ss_state in[6];
			for (size_t k = 0; k < n; k++) {
				char id[16];
				snprintf(id, sizeof id, "m%zu", k);
				make_state(&in[k], &m1_dims, k % 2 ? (kind + 2) % D_KINDS : kind, id);
			}
			for (size_t m = 0; m < 3; m++)
				check_vs_oracle(modes[m], in, n, kind_names[kind]);
			free_states(in, n);
		}
}

/* Weights alone against the oracle, at f64 accuracy: picaso weights are
 * ≥ 1/n, so relative 1e-12 is meaningful whatever the decays. */
typedef struct {
	const long double *d;
	size_t n;
	long double *w;
	size_t count;
} woracle;

static void weight_order(const size_t *perm, void *arg)
{
	woracle *o = arg;
	for (size_t i = 0; i < o->n; i++) {
		long double p = 1;
		for (size_t j = i + 1; j < o->n; j++)
			p *= o->d[perm[j]];
		o->w[perm[i]] += p;
	}
	o->count++;
}

static void test_weights_oracle(void **unused)
{
	(void)unused;
	rng_state = 2;
	for (int kind = 0; kind < D_KINDS; kind++)
		for (size_t n = 1; n <= 7; n++)
			for (int rep = 0; rep < 4; rep++) {
				float a[7];
				long double d[7], ws[7] = {0}, wr[7] = {0}, wc[7] = {0};
				for (size_t k = 0; k < n; k++) {
					a[k] = draw_decay(rep % 2 && k % 2 ? (kind + 5) % D_KINDS : kind);
					d[k] = expl((long double)a[k]);
				}
				woracle os = {d, n, ws, 0}, orr = {d, n, wr, 0}, oc = {d, n, wc, 0};
				each_perm(n, weight_order, &os);
				size_t p[7];
				for (size_t s = 0; s < n; s++) {
					for (size_t i = 0; i < n; i++)
						p[i] = (s + i) % n;
					weight_order(p, &orr);
				}
				for (size_t i = 0; i < n; i++)
					p[i] = i;
				weight_order(p, &oc);
				double w[7];
				struct { ss_compose_mode m; woracle *o; } cases[] = {
					{SS_COMPOSE_PICASO_S, &os}, {SS_COMPOSE_PICASO_R, &orr}, {SS_COMPOSE_CASO, &oc}};
				for (int c = 0; c < 3; c++) {
					assert_int_equal(ss_compose_weights(cases[c].m, n, 1, a, w, NULL), 0);
					for (size_t k = 0; k < n; k++) {
						long double ref = cases[c].o->w[k] / cases[c].o->count;
						long double tol = 1e-12L * ref + (cases[c].m == SS_COMPOSE_CASO ? 1e-300L : 0);
						if (!(fabsl(w[k] - ref) <= tol))
							fail_msg("%s n=%zu %s: W[%zu] = %.17g, oracle %.17Lg",
								 ss_compose_mode_name(cases[c].m), n, kind_names[kind], k, w[k], ref);
						if (cases[c].m != SS_COMPOSE_CASO)
							assert_true(w[k] >= 1.0 / n * (1 - 1e-15));
					}
				}
			}
}

/* Beyond brute force: picaso-s against Prop. 2's elementary symmetric sum
 * (long double DP; all terms positive), picaso-r against Prop. 3's direct
 * sum, n up to 64. */
static void test_weights_large_n(void **unused)
{
	(void)unused;
	rng_state = 3;
	for (size_t n = 8; n <= 64; n += 7)
		for (int kind = 0; kind < D_KINDS; kind++) {
			float a[64];
			long double d[64];
			double w[64];
			for (size_t k = 0; k < n; k++)
				d[k] = expl((long double)(a[k] = draw_decay(kind)));
			assert_int_equal(ss_compose_weights(SS_COMPOSE_PICASO_S, n, 1, a, w, NULL), 0);
			for (size_t k = 0; k < n; k++) {
				long double e[64] = {1}; /* e[m] of d without d_k */
				size_t cnt = 0;
				for (size_t j = 0; j < n; j++) {
					if (j == k)
						continue;
					cnt++;
					for (size_t m = cnt; m > 0; m--)
						e[m] += d[j] * e[m - 1];
				}
				long double ref = 0, binom = 1; /* C(n-1, m) */
				for (size_t m = 0; m < n; m++) {
					ref += e[m] / binom;
					binom = binom * (long double)(n - 1 - m) / (long double)(m + 1);
				}
				ref /= n;
				if (!(fabsl(w[k] - ref) <= 1e-12L * ref))
					fail_msg("picaso-s n=%zu %s W[%zu] %.17g vs %.17Lg", n, kind_names[kind], k, w[k], ref);
			}
			assert_int_equal(ss_compose_weights(SS_COMPOSE_PICASO_R, n, 1, a, w, NULL), 0);
			for (size_t k = 0; k < n; k++) {
				long double ref = 0, p = 1;
				for (size_t m = 0; m < n; m++) {
					ref += p;
					p *= d[(k + m + 1) % n];
				}
				ref /= n;
				if (!(fabsl(w[k] - ref) <= 1e-12L * ref))
					fail_msg("picaso-r n=%zu %s W[%zu] %.17g vs %.17Lg", n, kind_names[kind], k, w[k], ref);
			}
		}
}

/* The composed id: whole while short; bounded (first … last, each cut at a
 * UTF-8 boundary) when the whole list would be long, which stays in sources. */
static void test_composed_id(void **unused)
{
	(void)unused;
	ss_state in[10], out;
	char id[64];
	for (size_t k = 0; k < 3; k++) {
		snprintf(id, sizeof id, "d%zu", k);
		make_state(&in[k], &small_dims, D_RANDOM, id);
	}
	compose_ok(SS_COMPOSE_PICASO_R, in, 3, &out);
	assert_string_equal(out.id, "picaso-r(d0,d1,d2)");
	ss_state_free(&out);
	for (size_t k = 0; k < 3; k++)
		ss_state_free(&in[k]);
	/* 10 ids of 60 bytes: the first ends in a 2-byte character straddling byte 48. */
	for (size_t k = 0; k < 10; k++) {
		memset(id, 'a' + (int)k, 60);
		id[60] = 0;
		if (k == 0)
			memcpy(id + 47, "\xc3\xa9", 2); /* é at bytes 47..48 */
		make_state(&in[k], &small_dims, D_RANDOM, id);
	}
	compose_ok(SS_COMPOSE_SOUP, in, 10, &out);
	char want[256];
	snprintf(want, sizeof want, "soup(10 states: %.47s\u2026 \u2026 %.48s\u2026)", in[0].id, in[9].id);
	assert_string_equal(out.id, want);
	assert_int_equal(out.n_sources, 10);
	for (size_t k = 0; k < 10; k++)
		assert_string_equal(out.sources[k], in[k].id);
	ss_state_free(&out);
	for (size_t k = 0; k < 10; k++)
		ss_state_free(&in[k]);
}

static void soup_sum_max(const ss_state_dims *dims)
{
	for (size_t n = 1; n <= 7; n++) {
		ss_state in[7], out;
		for (size_t k = 0; k < n; k++)
			make_state(&in[k], dims, D_RANDOM, "x");
		size_t len = ss_state_ssm_len(dims), clen = ss_state_conv_len(dims);
		compose_ok(SS_COMPOSE_SOUP, in, n, &out);
		for (size_t e = 0; e < len; e++) {
			double s = 0, as = 0;
			for (size_t k = 0; k < n; k++)
				s += in[k].ssm[e], as += fabs(in[k].ssm[e]);
			assert_true(fabs(out.ssm[e] - s / n) <= REL_TOL * as / n + 1e-37);
		}
		for (size_t e = 0; e < clen; e++) {
			double s = 0, as = 0;
			for (size_t k = 0; k < n; k++)
				s += in[k].conv[e], as += fabs(in[k].conv[e]);
			assert_true(fabs(out.conv[e] - s / n) <= REL_TOL * as / n + 1e-37);
		}
		/* soup's decay: log mean exp(a) */
		for (size_t h = 0; h < ss_state_logdecay_len(dims); h++) {
			double m = 0;
			for (size_t k = 0; k < n; k++)
				m += exp(in[k].logdecay[h]);
			assert_true(fabs(out.logdecay[h] - log(m / n)) <= 1e-6 * fabs(log(m / n)) + 1e-7);
		}
		assert_int_equal(out.n_tokens, 10 * (int64_t)n);
		assert_int_equal(out.n_sources, (int32_t)n);
		assert_non_null(out.weights);
		assert_true(out.weights[0] == (float)(1.0 / n));
		ss_state_free(&out);

		compose_ok(SS_COMPOSE_SUM, in, n, &out);
		for (size_t e = 0; e < len; e++) {
			double s = 0, as = 0;
			for (size_t k = 0; k < n; k++)
				s += in[k].ssm[e], as += fabs(in[k].ssm[e]);
			assert_true(fabs(out.ssm[e] - s) <= REL_TOL * as + 1e-37);
		}
		ss_state_free(&out);

		compose_ok(SS_COMPOSE_MAX, in, n, &out);
		for (size_t e = 0; e < len; e++) {
			float m = in[0].ssm[e];
			for (size_t k = 1; k < n; k++)
				m = in[k].ssm[e] > m ? in[k].ssm[e] : m;
			assert_true(out.ssm[e] == m);
		}
		assert_null(out.weights);
		ss_state_free(&out);
		free_states(in, n);
	}
}

static void test_soup_sum_max(void **unused)
{
	(void)unused;
	rng_state = 4;
	soup_sum_max(&small_dims);
	/* Mamba-1: soup's decay per state element, weights [decays][n] */
	soup_sum_max(&m1_dims);
}

/* ------------------------------------------------------------ invariances */

/* a and b agree to REL_TOL of scale (Σ_k W_k |x_k|: the elements are sums
 * of terms of both signs, so their own size is no yardstick). */
static void expect_same(const char *what, const ss_state *a, const ss_state *b, const ss_state *scale)
{
	size_t len = ss_state_ssm_len(&a->dims);
	for (size_t e = 0; e < len; e++) {
		double tol = REL_TOL * fabs(scale->ssm[e]) + 1e-37;
		if (!(fabs(a->ssm[e] - b->ssm[e]) <= tol))
			fail_msg("%s: element %zu: %.9g vs %.9g (scale %.3g)", what, e, (double)a->ssm[e],
				 (double)b->ssm[e], (double)scale->ssm[e]);
	}
	for (size_t e = 0; e < ss_state_logdecay_len(&a->dims); e++)
		if (!(fabs(a->logdecay[e] - b->logdecay[e]) <= 1e-6 * fabs(a->logdecay[e]) ||
		      a->logdecay[e] == b->logdecay[e]))
			fail_msg("%s: logdecay %zu: %.9g vs %.9g", what, e, (double)a->logdecay[e],
				 (double)b->logdecay[e]);
}

/* The same composition of |x_k|: Σ_k W_k |x_k| elementwise. */
static void compose_abs(ss_compose_mode mode, const ss_state *in, size_t n, ss_state *out)
{
	ss_state ab[7];
	for (size_t k = 0; k < n; k++) {
		ab[k] = in[k];
		ab[k].ssm = malloc(ss_state_ssm_len(&in[k].dims) * 4);
		assert_non_null(ab[k].ssm);
		for (size_t e = 0; e < ss_state_ssm_len(&in[k].dims); e++)
			ab[k].ssm[e] = fabsf(in[k].ssm[e]);
	}
	compose_ok(mode, ab, n, out);
	for (size_t k = 0; k < n; k++)
		free(ab[k].ssm);
}

typedef struct {
	const ss_state *in;
	size_t n;
	ss_compose_mode mode;
	const ss_state *base, *scale;
} perm_check;

static void check_perm(const size_t *perm, void *arg)
{
	perm_check *pc = arg;
	ss_state in2[7], out;
	for (size_t i = 0; i < pc->n; i++)
		in2[i] = pc->in[perm[i]]; /* shallow: only read */
	compose_ok(pc->mode, in2, pc->n, &out);
	char what[64];
	snprintf(what, sizeof what, "%s n=%zu permuted", ss_compose_mode_name(pc->mode), pc->n);
	expect_same(what, pc->base, &out, pc->scale);
	ss_state_free(&out);
}

/* The invariance checks on a given input set. */
static void check_invariances(const ss_state *in, size_t n)
{
	ss_state base, scale;
	/* picaso-s, soup, sum, max: every permutation */
	static const ss_compose_mode sym[] = {SS_COMPOSE_PICASO_S, SS_COMPOSE_SOUP, SS_COMPOSE_SUM,
					      SS_COMPOSE_MAX};
	for (int m = 0; m < 4; m++) {
		compose_ok(sym[m], in, n, &base);
		compose_abs(sym[m], in, n, &scale);
		perm_check pc = {in, n, sym[m], &base, &scale};
		each_perm(n, check_perm, &pc);
		ss_state_free(&base);
		ss_state_free(&scale);
	}
	/* picaso-r: every cyclic shift */
	compose_ok(SS_COMPOSE_PICASO_R, in, n, &base);
	compose_abs(SS_COMPOSE_PICASO_R, in, n, &scale);
	for (size_t s = 1; s < n; s++) {
		size_t p[8];
		for (size_t i = 0; i < n; i++)
			p[i] = (s + i) % n;
		perm_check pc = {in, n, SS_COMPOSE_PICASO_R, &base, &scale};
		check_perm(p, &pc);
	}
	/* picaso-s = picaso-r for n <= 2 */
	if (n <= 2) {
		ss_state s;
		compose_ok(SS_COMPOSE_PICASO_S, in, n, &s);
		expect_same("picaso-s vs picaso-r", &base, &s, &scale);
		ss_state_free(&s);
	}
	ss_state_free(&base);
	ss_state_free(&scale);
}

static void test_invariances(void **unused)
{
	(void)unused;
	rng_state = 5;
	for (int kind = 0; kind < D_KINDS; kind++)
		for (size_t n = 1; n <= 6; n++) {
			ss_state in[7];
			for (size_t k = 0; k < n; k++)
				make_state(&in[k], &small_dims, k % 2 ? kind : (kind + 1) % D_KINDS, "x");
			check_invariances(in, n);
			free_states(in, n);
		}
}

/* n = 1 returns the input bit for bit (ssm incl. -0.0, conv, logdecay). */
static void test_identity(void **unused)
{
	(void)unused;
	rng_state = 6;
	for (int kind = 0; kind < D_KINDS; kind++) {
		ss_state x, out;
		make_state(&x, &small_dims, kind, "only");
		x.ssm[0] = -0.0f;
		x.ssm[1] = 1e-40f; /* subnormal */
		x.conv[0] = -0.0f;
		for (int m = 0; m <= SS_COMPOSE_MAX; m++)
			for (int cv = 0; cv < 2; cv++) {
				const ss_state *p = &x;
				ss_compose_opts o = {(ss_compose_mode)m, 0, (ss_compose_conv)cv};
				assert_int_equal(ss_compose(&o, &p, 1, &out, NULL), 0);
				assert_memory_equal(out.ssm, x.ssm, ss_state_ssm_len(&x.dims) * 4);
				assert_memory_equal(out.conv, x.conv, ss_state_conv_len(&x.dims) * 4);
				assert_memory_equal(out.logdecay, x.logdecay, ss_state_logdecay_len(&x.dims) * 4);
				assert_int_equal(out.n_tokens, x.n_tokens);
				assert_string_equal(out.fingerprint, x.fingerprint);
				assert_int_equal(out.n_sources, 1);
				assert_string_equal(out.sources[0], "only");
				if (m != SS_COMPOSE_MAX)
					for (size_t h = 0; h < ss_state_logdecay_len(&x.dims); h++)
						assert_true(out.weights[h] == 1.0f);
				ss_state_free(&out);
			}
		ss_state_free(&x);
	}
}

/* ------------------------------------------------------------ options */

static double layer_norm(const ss_state *s, size_t l)
{
	size_t llen = (size_t)s->dims.nheads * s->dims.headdim * s->dims.d_state;
	double q = 0;
	for (size_t i = 0; i < llen; i++)
		q += (double)s->ssm[l * llen + i] * s->ssm[l * llen + i];
	return sqrt(q);
}

static void test_norm_and_conv(void **unused)
{
	(void)unused;
	rng_state = 7;
	const size_t n = 4;
	ss_state in[4], out, plain;
	for (size_t k = 0; k < n; k++)
		make_state(&in[k], &small_dims, D_RANDOM, "x");
	for (size_t i = 0; i < ss_state_ssm_len(&small_dims) / 2; i++)
		in[2].ssm[i] *= 100; /* a loud layer 0 in input 2 */
	const ss_state *p[4] = {&in[0], &in[1], &in[2], &in[3]};
	size_t llen = (size_t)small_dims.nheads * small_dims.headdim * small_dims.d_state;
	for (int m = 0; m <= SS_COMPOSE_MAX; m++) {
		ss_compose_opts o = {(ss_compose_mode)m, SS_COMPOSE_NORM_AFTER, SS_COMPOSE_CONV_LAST};
		assert_int_equal(ss_compose(&o, p, n, &out, NULL), 0);
		for (size_t l = 0; l < 2; l++)
			assert_true(fabs(layer_norm(&out, l) - 1) < 1e-6);
		/* after = the plain result scaled per layer */
		o.norm = 0;
		assert_int_equal(ss_compose(&o, p, n, &plain, NULL), 0);
		for (size_t l = 0; l < 2; l++) {
			double nr = layer_norm(&plain, l);
			for (size_t i = 0; i < llen; i++)
				assert_true(fabs(out.ssm[l * llen + i] - plain.ssm[l * llen + i] / nr) < 1e-6);
		}
		assert_memory_equal(out.conv, in[3].conv, ss_state_conv_len(&small_dims) * 4);
		ss_state_free(&out);
		ss_state_free(&plain);
	}
	/* before: soup of the unit-normalised layers, against a direct sum */
	ss_compose_opts o = {SS_COMPOSE_SOUP, SS_COMPOSE_NORM_BEFORE, SS_COMPOSE_CONV_MEAN};
	assert_int_equal(ss_compose(&o, p, n, &out, NULL), 0);
	for (size_t l = 0; l < 2; l++)
		for (size_t i = 0; i < llen; i++) {
			double s = 0;
			for (size_t k = 0; k < n; k++)
				s += in[k].ssm[l * llen + i] / layer_norm(&in[k], l);
			assert_true(fabs(out.ssm[l * llen + i] - s / n) < 1e-6);
		}
	ss_state_free(&out);
	/* both: unit norm per layer */
	o.norm = SS_COMPOSE_NORM_BEFORE | SS_COMPOSE_NORM_AFTER;
	o.mode = SS_COMPOSE_PICASO_R;
	assert_int_equal(ss_compose(&o, p, n, &out, NULL), 0);
	for (size_t l = 0; l < 2; l++)
		assert_true(fabs(layer_norm(&out, l) - 1) < 1e-6);
	ss_state_free(&out);
	free_states(in, n);
}

static void test_names(void **unused)
{
	(void)unused;
	ss_compose_mode m;
	int nr;
	ss_compose_conv cv;
	for (int i = 0; i <= SS_COMPOSE_MAX; i++) {
		assert_int_equal(ss_compose_mode_parse(ss_compose_mode_name((ss_compose_mode)i), &m), 0);
		assert_int_equal(m, i);
	}
	assert_int_equal(ss_compose_mode_parse("picaso", &m), SS_ERR_INVALID);
	nr = SS_COMPOSE_NORM_BEFORE | SS_COMPOSE_NORM_AFTER;
	assert_string_equal(ss_compose_norm_names[nr], "both");
	nr = 0;
	assert_string_equal(ss_compose_norm_names[nr], "none");
	cv = SS_COMPOSE_CONV_LAST;
	assert_string_equal(ss_compose_conv_names[cv], "last");
	assert_null(ss_compose_mode_name((ss_compose_mode)42));
	assert_true(ss_compose_modes[SS_COMPOSE_PICASO_S].needs_plan && ss_compose_modes[SS_COMPOSE_PICASO_R].needs_plan);
	assert_false(ss_compose_modes[SS_COMPOSE_CASO].needs_plan);
}

/* ------------------------------------------------------------ dtypes */

/* Storage dtypes are widened exactly: every f16 bit pattern through an
 * n = 1 composition equals ss_f16_to_f32; mixed f32/f16/bf16/unaligned
 * inputs give the same bits as their widened f32 copies. */
static void test_dtypes(void **unused)
{
	(void)unused;
	static const ss_state_dims big = {"mamba2", 1, 4, 128, 128, 8, 4}; /* 65536 ssm elements */
	ss_state x, out;
	make_state(&x, &big, D_RANDOM, "all-f16");
	size_t len = ss_state_ssm_len(&big), clen = ss_state_conv_len(&big);
	uint16_t *h = malloc(len * 2), *hc = malloc(clen * 2);
	for (size_t i = 0; i < len; i++)
		h[i] = (uint16_t)i;
	for (size_t i = 0; i < clen; i++)
		hc[i] = (uint16_t)(i * 977);
	ss_compose_opts o = opts_of(SS_COMPOSE_SUM);
	ss_composer *c;
	assert_int_equal(ss_composer_new(&c, &o, 0, 0, NULL, NULL), 0);
	assert_int_equal(add_arrays(c, &x, h, hc, SS_DTYPE_F16, NULL), 0);
	assert_int_equal(ss_composer_finish(c, &out, NULL), 0);
	ss_composer_free(c);
	for (size_t i = 0; i < len; i++) {
		float want = ss_f16_to_f32(h[i]);
		if (isnan(want))
			assert_true(isnan(out.ssm[i]));
		else if (memcmp(&want, &out.ssm[i], 4) != 0)
			fail_msg("f16 %04zx: %a, want %a", i, (double)out.ssm[i], (double)want);
	}
	for (size_t i = 0; i < clen; i++) {
		float want = ss_f16_to_f32(hc[i]);
		assert_true(isnan(want) ? isnan(out.conv[i]) : memcmp(&want, &out.conv[i], 4) == 0);
	}
	ss_state_free(&out);
	free(h);
	free(hc);
	ss_state_free(&x);

	/* mixed storage, all modes: same bits as the widened f32 states */
	rng_state = 9;
	ss_state in[4];
	void *raw_ssm[4], *raw_conv[4];
	ss_dtype dt[4] = {SS_DTYPE_F16, SS_DTYPE_F32, SS_DTYPE_BF16, SS_DTYPE_F32};
	len = ss_state_ssm_len(&small_dims);
	clen = ss_state_conv_len(&small_dims);
	for (int k = 0; k < 4; k++) {
		make_state(&in[k], &small_dims, D_RANDOM, "m");
		size_t es = ss_dtype_size(dt[k]);
		/* +1: input 3 is f32 at an odd address */
		unsigned char *bs = malloc(len * es + 1), *bc = malloc(clen * es + 1);
		raw_ssm[k] = bs;
		raw_conv[k] = bc;
		if (k == 3)
			bs++, bc++;
		ss_from_f32(bs, dt[k], in[k].ssm, len);
		ss_from_f32(bc, dt[k], in[k].conv, clen);
		ss_to_f32(in[k].ssm, bs, dt[k], len);
		ss_to_f32(in[k].conv, bc, dt[k], clen);
	}
	for (int m = 0; m <= SS_COMPOSE_MAX; m++) {
		ss_compose_opts om = {(ss_compose_mode)m, SS_COMPOSE_NORM_BEFORE, SS_COMPOSE_CONV_MEAN};
		const ss_state *p[4] = {&in[0], &in[1], &in[2], &in[3]};
		ss_state ref;
		assert_int_equal(ss_compose(&om, p, 4, &ref, NULL), 0);
		size_t H = ss_state_logdecay_len(&small_dims);
		float dec[4 * 6];
		for (int k = 0; k < 4; k++)
			memcpy(dec + k * H, in[k].logdecay, H * 4);
		assert_int_equal(ss_composer_new(&c, &om, 4, H, ss_compose_modes[om.mode].needs_plan ? dec : NULL, NULL),
				 0);
		for (int k = 0; k < 4; k++) {
			unsigned char *bs = raw_ssm[k], *bc = raw_conv[k];
			if (k == 3)
				bs++, bc++;
			assert_int_equal(add_arrays(c, &in[k], bs, bc, dt[k], NULL), 0);
		}
		assert_int_equal(ss_composer_finish(c, &out, NULL), 0);
		ss_composer_free(c);
		assert_memory_equal(out.ssm, ref.ssm, len * 4);
		assert_memory_equal(out.conv, ref.conv, clen * 4);
		ss_state_free(&out);
		ss_state_free(&ref);
	}
	for (int k = 0; k < 4; k++) {
		free(raw_ssm[k]);
		free(raw_conv[k]);
	}
	free_states(in, 4);
}

/* ------------------------------------------------------------ errors */

static void test_errors(void **unused)
{
	(void)unused;
	rng_state = 8;
	char err[SS_ERRMSG_MAX];
	ss_state a, b, out;
	make_state(&a, &small_dims, D_RANDOM, "a");
	make_state(&b, &small_dims, D_RANDOM, "b");
	const ss_state *p[2] = {&a, &b};
	ss_compose_opts o = opts_of(SS_COMPOSE_PICASO_R);

	/* n = 0 */
	assert_int_equal(ss_compose(&o, p, 0, &out, err), SS_ERR_INVALID);
	ss_composer *c;
	assert_int_equal(ss_composer_new(&c, &o, 0, 0, NULL, NULL), 0);
	assert_int_equal(ss_composer_finish(c, &out, err), SS_ERR_INVALID);
	ss_composer_free(c);
	float a0 = 0;
	double w;
	assert_int_equal(ss_compose_weights(SS_COMPOSE_CASO, 0, 1, &a0, &w, err), SS_ERR_INVALID);

	/* fingerprint */
	strcpy(b.fingerprint, "beef");
	assert_int_equal(ss_compose(&o, p, 2, &out, err), SS_ERR_MISMATCH);
	assert_non_null(strstr(err, "fingerprint"));
	strcpy(b.fingerprint, a.fingerprint);

	/* dims */
	ss_state c3;
	ss_state_dims d2 = small_dims;
	d2.d_state = 5;
	make_state(&c3, &d2, D_RANDOM, "c");
	const ss_state *pc[2] = {&a, &c3};
	o.mode = SS_COMPOSE_SOUP;
	assert_int_equal(ss_compose(&o, pc, 2, &out, err), SS_ERR_MISMATCH);
	assert_non_null(strstr(err, "d_state"));
	ss_state_free(&c3);

	/* a decay > 0 or NaN */
	b.logdecay[3] = 0.5f;
	assert_int_equal(ss_compose(&o, p, 2, &out, err), SS_ERR_INVALID);
	b.logdecay[3] = NAN;
	o.mode = SS_COMPOSE_PICASO_S;
	assert_int_equal(ss_compose(&o, p, 2, &out, err), SS_ERR_INVALID);
	b.logdecay[3] = -1;

	/* picaso without a plan; max has no weights */
	assert_int_equal(ss_composer_new(&c, &o, 0, 0, NULL, NULL), 0);
	assert_int_equal(add(c, &a, err), SS_ERR_INVALID);
	ss_composer_free(c);
	assert_int_equal(ss_compose_weights(SS_COMPOSE_MAX, 1, 1, &a0, &w, err), SS_ERR_INVALID);

	/* planned decays that change before the add; too many, too few inputs */
	size_t H = ss_state_logdecay_len(&small_dims);
	float *dec = malloc(2 * H * sizeof *dec);
	memcpy(dec, a.logdecay, H * 4);
	memcpy(dec + H, b.logdecay, H * 4);
	assert_int_equal(ss_composer_new(&c, &o, 2, H, dec, err), 0);
	assert_int_equal(add(c, &b, err), SS_ERR_MISMATCH);
	ss_composer_free(c);
	assert_int_equal(ss_composer_new(&c, &o, 2, H, dec, err), 0);
	assert_int_equal(add(c, &a, err), 0);
	assert_int_equal(ss_composer_finish(c, &out, err), SS_ERR_INVALID);
	ss_composer_free(c);
	assert_int_equal(ss_composer_new(&c, &o, 1, H, dec, err), 0);
	assert_int_equal(add(c, &a, err), 0);
	assert_int_equal(add(c, &a, err), SS_ERR_INVALID);
	ss_composer_free(c);
	free(dec);

	/* bad options */
	ss_compose_opts bad = {(ss_compose_mode)9, 0, SS_COMPOSE_CONV_MEAN};
	assert_int_equal(ss_composer_new(&c, &bad, 0, 0, NULL, err), SS_ERR_INVALID);
	ss_state_free(&a);
	ss_state_free(&b);
}

/* ------------------------------------------------------------ golden t1 */

/* ss_compose_run's read source in the test: records by offset in one file. */
typedef struct {
	ss_reader *r;
	const uint64_t *off;
} offsets_src;

static int read_at(void *arg, size_t i, int meta_only, const ss_record **rec, char *errmsg)
{
	const offsets_src *s = arg;
	int rc = ss_reader_seek(s->r, s->off[i]);
	if (!rc)
		rc = meta_only ? ss_reader_next_meta(s->r, rec) : ss_reader_next(s->r, rec);
	if (rc == 1)
		return 0;
	ss_errf(errmsg, 0, "%s", ss_reader_error(s->r));
	return rc ? rc : SS_ERR_TRUNCATED;
}

/* Writes the 5 states in[0..5) (ids s0..s4, of the D_KINDS kinds in turn)
 * to two files: 3 to pa, 2 to pb; off[k]: each one's byte offset. */
static void five_states(const char *pa, const char *pb, ss_state *in, uint64_t *off)
{
	char err[SS_ERRMSG_MAX];
	ss_writer *w[2];
	assert_int_equal(ss_writer_open(&w[0], pa, 0, err), 0);
	assert_int_equal(ss_writer_open(&w[1], pb, 0, err), 0);
	for (int k = 0; k < 5; k++) {
		char id[8];
		snprintf(id, sizeof id, "s%d", k);
		make_state(&in[k], &small_dims, k % D_KINDS, id);
		assert_int_equal(ss_writer_put_state(w[k >= 3], &in[k], &off[k]), 0);
	}
	assert_int_equal(ss_writer_close(w[0], err), 0);
	assert_int_equal(ss_writer_close(w[1], err), 0);
}

/* The drivers equal the in-memory composition bit for bit: 3 f32 states in
 * one file and 2 in another, through ss_compose_run from files (both passes for
 * picaso), and through a read source (ss_compose_run) reading by offset; the output
 * dtype is the inputs' shared one, else f32; errors name file and record. */
static void test_drivers(void **unused)
{
	(void)unused;
	char dir[4096], pa[4200], pb[4200], pz[4200], err[SS_ERRMSG_MAX];
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "compose"), 0);
	snprintf(pa, sizeof pa, "%s/a.ss", dir);
	snprintf(pb, sizeof pb, "%s/b.ss", dir);
	snprintf(pz, sizeof pz, "%s/z.ss", dir);
	enum { N = 5 };
	ss_state in[N];
	const ss_state *p[N];
	uint64_t off[N];
	ss_writer *w[2];
	five_states(pa, pb, in, off);
	for (int k = 0; k < N; k++)
		p[k] = &in[k];
	const char *paths[2] = {pa, pb};
	for (int m = 0; m < 6; m++) {
		ss_compose_opts o = opts_of((ss_compose_mode)m);
		ss_state ref, got;
		uint64_t bytes = 0;
		assert_int_equal(ss_compose(&o, p, N, &ref, err), 0);
		if (files(&o, 1, paths, 2, &got, &bytes, err))
			fail_msg("%s: %s", ss_compose_mode_name((ss_compose_mode)m), err);
		assert_memory_equal(got.ssm, ref.ssm, ss_state_ssm_len(&ref.dims) * sizeof(float));
		assert_memory_equal(got.conv, ref.conv, ss_state_conv_len(&ref.dims) * sizeof(float));
		assert_memory_equal(got.logdecay, ref.logdecay, ss_state_logdecay_len(&ref.dims) * sizeof(float));
		assert_string_equal(got.id, ref.id);
		assert_int_equal(got.dtype, SS_DTYPE_F32);
		assert_true(bytes > N * (ss_state_ssm_len(&ref.dims) + ss_state_conv_len(&ref.dims)) * 4);
		ss_state_free(&got);
		/* the second file only, through a source that seeks */
		ss_reader *r;
		assert_int_equal(ss_reader_open(&r, pb, 0, err), 0);
		uint64_t offb[2] = {off[3], off[4]};
		offsets_src src = {r, offb};
		ss_state ref2;
		assert_int_equal(ss_compose(&o, p + 3, 2, &ref2, err), 0);
		if (records(&o, 2, read_at, &src, &got, err))
			fail_msg("%s: %s", ss_compose_mode_name((ss_compose_mode)m), err);
		assert_memory_equal(got.ssm, ref2.ssm, ss_state_ssm_len(&ref.dims) * sizeof(float));
		assert_memory_equal(got.conv, ref2.conv, ss_state_conv_len(&ref.dims) * sizeof(float));
		ss_reader_close(r);
		ss_state_free(&got);
		ss_state_free(&ref2);
		ss_state_free(&ref);
	}
	/* shared storage dtype kept; another fingerprint names both records */
	in[0].dtype = SS_DTYPE_F16;
	strcpy(in[1].fingerprint, "beef");
	assert_int_equal(ss_writer_open(&w[0], pz, 0, err), 0);
	assert_int_equal(ss_writer_put_state(w[0], &in[0], NULL), 0);
	assert_int_equal(ss_writer_put_state(w[0], &in[1], NULL), 0);
	assert_int_equal(ss_writer_close(w[0], err), 0);
	for (int m = 0; m < 2; m++) {
		ss_compose_opts o = opts_of(m ? SS_COMPOSE_PICASO_R : SS_COMPOSE_SOUP);
		ss_state got;
		const char *one[1] = {pz};
		assert_int_equal(files(&o, 1, one, 1, &got, NULL, err), SS_ERR_MISMATCH);
		assert_non_null(strstr(err, "z.ss: record 1 (id \"s1\"): model fingerprint beef differs from"));
		assert_non_null(strstr(err, "z.ss: record 0 (id \"s0\")"));
	}
	free_states(in, N);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* Inputs by place (ss_compose_run_opts.offsets) equal the in-memory
 * composition bit for bit, in any order across two files (a path
 * repeated), on 1 and 2 threads; an offset with no record there, and a
 * pipe, are refused naming the file. */
static void test_by_place(void **unused)
{
	(void)unused;
	char dir[4096], pa[4200], pb[4200], err[SS_ERRMSG_MAX];
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "compose"), 0);
	snprintf(pa, sizeof pa, "%s/a.ss", dir);
	snprintf(pb, sizeof pb, "%s/b.ss", dir);
	enum { N = 5, K = 4 };
	ss_state in[N];
	uint64_t off[N];
	five_states(pa, pb, in, off);
	const int pick[K] = {4, 0, 2, 3};
	const char *paths[K];
	uint64_t at[K];
	const ss_state *p[K];
	for (int i = 0; i < K; i++) {
		paths[i] = pick[i] >= 3 ? pb : pa;
		at[i] = off[pick[i]];
		p[i] = &in[pick[i]];
	}
	for (int m = 0; m < 6; m++)
		for (int threads = 1; threads <= 2; threads++) {
			ss_compose_opts o = opts_of((ss_compose_mode)m);
			ss_state ref;
			assert_int_equal(ss_compose(&o, p, K, &ref, err), 0);
			ss_compose_run_opts r = {.paths = paths, .n_paths = K, .offsets = at, .threads = threads};
			ss_compose_result res;
			if (ss_compose_run(&o, &r, &res, err))
				fail_msg("%s, %d threads: %s", ss_compose_mode_name((ss_compose_mode)m), threads, err);
			assert_memory_equal(res.state.ssm, ref.ssm, ss_state_ssm_len(&ref.dims) * sizeof(float));
			assert_memory_equal(res.state.conv, ref.conv, ss_state_conv_len(&ref.dims) * sizeof(float));
			assert_memory_equal(res.state.logdecay, ref.logdecay,
					    ss_state_logdecay_len(&ref.dims) * sizeof(float));
			assert_string_equal(res.state.id, ref.id);
			ss_state_free(&res.state);
			ss_state_free(&ref);
		}
	ss_compose_opts o = opts_of(SS_COMPOSE_PICASO_R);
	ss_compose_result res;
	uint64_t bad[K] = {at[0], at[1], at[2] + 1, at[3]};
	ss_compose_run_opts r = {.paths = paths, .n_paths = K, .offsets = bad};
	assert_true(ss_compose_run(&o, &r, &res, err) < 0);
	assert_non_null(strstr(err, "a.ss: record 2 (byte offset "));
	const char *pipe_in[1] = {"-"};
	ss_compose_run_opts rp = {.paths = pipe_in, .n_paths = 1, .offsets = at};
	assert_int_equal(ss_compose_run(&o, &rp, &res, err), SS_ERR_INVALID);
	assert_non_null(strstr(err, "regular files"));
	free_states(in, N);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

static const ss_state_dims t1_dims = {"mamba2", 2, 8, 16, 16, 160, 4};

static int read_f32(const char *path, float *dst, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	size_t got = fread(dst, 4, n, f);
	int extra = fgetc(f);
	fclose(f);
	return got == n && extra == EOF ? 0 : -1;
}

static int load_case(ss_state *s, const char *dir, const char *name)
{
	char p[1024];
	assert_int_equal(ss_state_alloc(s, &t1_dims), 0);
	s->id = strdup(name);
	strcpy(s->fingerprint, "golden-t1");
	snprintf(p, sizeof p, "%s/golden/t1/%s/ssm.f32", dir, name);
	if (read_f32(p, s->ssm, ss_state_ssm_len(&t1_dims)))
		return -1;
	snprintf(p, sizeof p, "%s/golden/t1/%s/conv.f32", dir, name);
	if (read_f32(p, s->conv, ss_state_conv_len(&t1_dims)))
		return -1;
	snprintf(p, sizeof p, "%s/golden/t1/%s/logdecay.f32", dir, name);
	if (read_f32(p, s->logdecay, ss_state_logdecay_len(&t1_dims)))
		return -1;
	return 0;
}

static void test_golden_t1(void **unused)
{
	(void)unused;
	const char *dir = getenv("SS_FIXTURES") ? getenv("SS_FIXTURES") : "tests/fixtures";
	static const char *const names[5] = {"c3", "docB", "c4", "c1", "c2"};
	ss_state in[5];
	for (int i = 0; i < 5; i++)
		if (!dir || load_case(&in[i], dir, names[i])) {
			for (int j = 0; j <= i && dir; j++)
				ss_state_free(&in[j]);
			skip();
		}
	/* soup of c3 + docB = the golden composed state S, bit for bit */
	size_t len = ss_state_ssm_len(&t1_dims), clen = ss_state_conv_len(&t1_dims);
	float *S_ssm = malloc(len * 4), *S_conv = malloc(clen * 4);
	char p[1024];
	snprintf(p, sizeof p, "%s/golden/t1/compose/S_ssm.f32", dir);
	assert_int_equal(read_f32(p, S_ssm, len), 0);
	snprintf(p, sizeof p, "%s/golden/t1/compose/S_conv.f32", dir);
	assert_int_equal(read_f32(p, S_conv, clen), 0);
	ss_state out;
	compose_ok(SS_COMPOSE_SOUP, in, 2, &out);
	assert_memory_equal(out.ssm, S_ssm, len * 4);
	assert_memory_equal(out.conv, S_conv, clen * 4);
	ss_state_free(&out);
	free(S_ssm);
	free(S_conv);

	/* the oracle and the invariances on real states, every prefix */
	for (size_t n = 1; n <= 5; n++) {
		check_vs_oracle(SS_COMPOSE_CASO, in, n, "golden t1");
		check_vs_oracle(SS_COMPOSE_PICASO_S, in, n, "golden t1");
		check_vs_oracle(SS_COMPOSE_PICASO_R, in, n, "golden t1");
		check_invariances(in, n);
	}
	free_states(in, 5);
}

/* ss_compose_run() adds a file's records in pieces as they are
 * decompressed (lib/compose/internal.h); the result must be the bits of
 * adding each record whole (a read source reading whole records), for
 * every mode, dtype and conv rule, with heads cut across pieces; f16 and
 * bf16 byte-shuffled (the default: blocks gathered across pieces) and not. */
typedef struct {
	const char *path;
	ss_reader *r;
} whole_src;

static int read_whole(void *arg, size_t i, int meta_only, const ss_record **rec, char *errmsg)
{
	whole_src *w = arg;
	(void)meta_only;
	if (i == 0) {
		ss_reader_close(w->r);
		if (ss_reader_open(&w->r, w->path, 0, errmsg))
			return SS_ERR_IO;
	}
	return ss_reader_next(w->r, rec) == 1 ? 0 : ss_errf(errmsg, SS_ERR_FORMAT, "read");
}

/* Composing the n records of path from the file (in pieces as
 * decompressed) and with a read source (whole records) gives the same
 * bits. */
static void assert_pieces_equal_whole(const ss_compose_opts *o, const char *path, size_t n, const ss_state_dims *d)
{
	char err[SS_ERRMSG_MAX];
	ss_state a, b;
	const char *paths[1] = {path};
	whole_src ws = {path, NULL};
	assert_int_equal(files(o, 1, paths, 1, &a, NULL, err), 0);
	assert_int_equal(records(o, n, read_whole, &ws, &b, err), 0);
	ss_reader_close(ws.r);
	assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(d) * 4);
	assert_memory_equal(a.conv, b.conv, ss_state_conv_len(d) * 4);
	assert_int_equal(a.n_tokens, b.n_tokens);
	ss_state_free(&a);
	ss_state_free(&b);
}

static void test_files_pieces_equal_whole(void **unused)
{
	(void)unused;
	/* ssm 1.3 MB in f32: f16/bf16 in 5 pieces, 2 shuffle blocks (the last short) gathered
	 * across them */
	const ss_state_dims d = {"mamba2", 2, 16, 64, 160, 99, 4};
	static const ss_dtype dts[4] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_Q8};
	char err[SS_ERRMSG_MAX];
	ss_state in[3];
	for (int k = 0; k < 3; k++)
		make_state(&in[k], &d, D_SMALL, k == 0 ? "a" : k == 1 ? "b" : "c");
	char dir[4096], path[4200];
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "pieces"), 0);
	snprintf(path, sizeof path, "%s/pieces.ss", dir);
	for (int t = 0; t < 6; t++) {
		ss_writer *w;
		assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
		ss_writer_set_shuffle(w, t < 4);
		for (int k = 0; k < 3; k++) {
			in[k].dtype = dts[t < 4 ? t : t - 3];
			assert_int_equal(ss_writer_put_state(w, &in[k], NULL), 0);
		}
		assert_int_equal(ss_writer_close(w, err), 0);
		for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++)
			for (int conv = 0; conv < 2; conv++) {
				ss_compose_opts o = {(ss_compose_mode)mode, SS_COMPOSE_NORM_AFTER * (mode == SS_COMPOSE_SOUP),
						     (ss_compose_conv)conv};
				assert_pieces_equal_whole(&o, path, 3, &d);
			}
	}
	free_states(in, 3);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* Byte-shuffled f16/bf16 records are folded from their planes by a SIMD
 * kernel where the CPU has one (lib/compose/compose.c apply_planes_avx): its bits
 * must be the reference loops' (a read source: whole records through
 * an f32 copy) also for signed zeros, where max's operand order decides
 * which one survives, subnormals and f16's largest value. (NaN and
 * infinities never reach a fold: records holding them are refused,
 * test_files_refuse_nonfinite.) */
static void test_files_pieces_special_values(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 1, 4, 64, 64, 40, 4}; /* 16384 ssm elements: one block */
	static const float special[4] = {6.0e-8f, -0.0f, 0.0f, 65504.0f};
	char err[SS_ERRMSG_MAX], dir[4096], path[4200];
	ss_state in[3];
	for (int k = 0; k < 3; k++) {
		make_state(&in[k], &d, D_SMALL, k == 0 ? "a" : k == 1 ? "b" : "c");
		for (size_t i = (size_t)k; i < ss_state_ssm_len(&d); i += 7) /* each input its own positions */
			in[k].ssm[i] = special[(i / 7 + (size_t)k) % 4] * (i % 2 ? -1.0f : 1.0f);
	}
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "special"), 0);
	snprintf(path, sizeof path, "%s/special.ss", dir);
	for (int t = 0; t < 2; t++) {
		ss_writer *w;
		assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
		for (int k = 0; k < 3; k++) {
			in[k].dtype = t ? SS_DTYPE_BF16 : SS_DTYPE_F16;
			assert_int_equal(ss_writer_put_state(w, &in[k], NULL), 0);
		}
		assert_int_equal(ss_writer_close(w, err), 0);
		for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++) {
			ss_compose_opts o = {(ss_compose_mode)mode, 0, SS_COMPOSE_CONV_MEAN};
			assert_pieces_equal_whole(&o, path, 3, &d);
		}
	}
	free_states(in, 3);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* Rewrites record k of the stream at path (its ssm the map's last entry,
 * as writers put it) with ssm element e's bytes replaced by es bytes at v
 * (a shuffled record's by its two planes, one block): a record that
 * ss_writer_put_state would refuse to write. */
static void patch_ssm(const char *path, size_t k, size_t n_ssm, size_t es, int shuffled, size_t e, const void *v,
		      int raw)
{
	char err[SS_ERRMSG_MAX], tmp[4300];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	ss_reader *r;
	ss_writer *w;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, path, 0, err), 0);
	assert_int_equal(ss_writer_open(&w, tmp, 1, err), 0);
	for (size_t i = 0; ss_reader_next(r, &rec) == 1; i++) {
		size_t n = ss_record_size(rec);
		unsigned char *b = malloc(n);
		assert_non_null(b);
		memcpy(b, ss_record_bytes(rec), n);
		unsigned char *ssm = b + n - n_ssm * es;
		for (size_t j = 0; i == k && j < es; j++)
			ssm[shuffled ? j * n_ssm + e : e * es + j] = ((const unsigned char *)v)[j];
		if (raw) { /* an uncompressed frame, as the writer makes one */
			assert_int_equal(ss_writer_begin_raw(w, n, NULL), 0);
			assert_int_equal(ss_writer_add(w, b, n - n_ssm * es), 0);
			ss_writer_cut(w);
			assert_int_equal(ss_writer_add(w, b + n - n_ssm * es, n_ssm * es), 0);
			assert_int_equal(ss_writer_end(w), 0);
		} else {
			assert_int_equal(ss_writer_put(w, b, n, NULL), 0);
		}
		free(b);
	}
	ss_reader_close(r);
	assert_int_equal(ss_writer_close(w, err), 0);
	assert_int_equal(rename(tmp, path), 0);
}

/* A record with a NaN or an infinity in ssm (f32, f16, bf16; shuffled or
 * not) is refused as corrupt by every path a composition reads it by:
 * pieces (one thread, two), whole records (norm before), the composer's
 * record API; the error names its file, record and element (issue 32
 * item 9). Writers refuse such states. */
static void test_files_refuse_nonfinite(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 2, 3, 4, 5, 6, 4};
	char err[SS_ERRMSG_MAX], dir[4096], path[4200];
	ss_state in[3];
	for (int k = 0; k < 3; k++)
		make_state(&in[k], &d, D_SMALL, k == 0 ? "a" : k == 1 ? "b" : "c");
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "nonfinite"), 0);
	snprintf(path, sizeof path, "%s/nf.ss", dir);
	static const ss_dtype dts[4] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_F16};
	const uint32_t nan32 = 0x7fc00000u, inf32 = 0xff800000u;
	const uint16_t nan16[2] = {0x7e00, 0x7fc0}, inf16[2] = {0xfc00, 0x7f80};
	size_t ns = ss_state_ssm_len(&d);
	for (int t = 0; t < 8; t++)
		for (int inf = 0; inf < 2; inf++) {
			/* t 4..7: the same as uncompressed frames (never shuffled),
			 * read in place */
			int raw = t >= 4, sh = !raw && (t == 1 || t == 2);
			ss_writer *w;
			assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
			ss_writer_set_shuffle(w, t < 3);
			ss_writer_set_min_saving(w, raw ? 2 : 0);
			for (int k = 0; k < 3; k++) {
				in[k].dtype = dts[t % 4];
				assert_int_equal(ss_writer_put_state(w, &in[k], NULL), 0);
			}
			assert_int_equal(ss_writer_close(w, err), 0);
			int tt = t % 4;
			const void *v = tt == 0 ? (const void *)(inf ? &inf32 : &nan32)
						: (const void *)(inf ? &inf16[tt == 2] : &nan16[tt == 2]);
			patch_ssm(path, 1, ns, ss_dtype_size(dts[tt]), sh, 17, v, raw);
			const char *paths[1] = {path};
			for (int how = 0; how < 4; how++) {
				ss_compose_opts o = {how == 3 ? SS_COMPOSE_SOUP : SS_COMPOSE_PICASO_R,
						     how == 2 ? SS_COMPOSE_NORM_BEFORE : 0, SS_COMPOSE_CONV_MEAN};
				ss_state out;
				int rc = files(&o, how == 1 ? 2 : 1, paths, 1, &out, NULL, err);
				assert_int_equal(rc, SS_ERR_FORMAT);
				if (!strstr(err, "record 1") || !strstr(err, "\"ssm\": element 17 is") ||
				    !strstr(err, "not finite"))
					fail_msg("dtype %d, how %d: %s", t, how, err);
			}
		}
	/* and the writer never makes such a record: f16 beyond its range, NaN in f32 */
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
	in[0].dtype = SS_DTYPE_F16;
	in[0].ssm[3] = 65520.0f; /* rounds to f16 inf */
	assert_int_equal(ss_writer_put_state(w, &in[0], NULL), SS_ERR_INVALID);
	in[0].dtype = SS_DTYPE_F32;
	in[0].conv[1] = NAN;
	assert_int_equal(ss_writer_put_state(w, &in[0], NULL), SS_ERR_INVALID);
	assert_int_equal(ss_writer_tell(w), 0);
	ss_writer_abort(w);
	free_states(in, 3);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* A composition that overflows f32 (sum of two states near FLT_MAX) is
 * refused before anything is written, naming the inputs and the element,
 * whether the output is written whole (q8) or as it is made (f32, two
 * threads): state records hold finite values only (issue 32 item 9: q8
 * output failed with "invalid argument"). */
static void test_files_to_overflow(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 2, 3, 4, 5, 6, 4};
	char err[SS_ERRMSG_MAX], dir[4096], path[4200], out_path[4200];
	ss_state in[2];
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "overflow"), 0);
	snprintf(path, sizeof path, "%s/big.ss", dir);
	snprintf(out_path, sizeof out_path, "%s/out.ss", dir);
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
	for (int k = 0; k < 2; k++) {
		make_state(&in[k], &d, D_SMALL, k ? "b" : "a");
		in[k].ssm[7] = 3e38f;
		assert_int_equal(ss_writer_put_state(w, &in[k], NULL), 0);
	}
	assert_int_equal(ss_writer_close(w, err), 0);
	const char *paths[1] = {path};
	for (int q8 = 0; q8 < 2; q8++)
		for (int threads = 1; threads <= 2; threads++) {
			ss_compose_opts o = {SS_COMPOSE_SUM, 0, SS_COMPOSE_CONV_MEAN};
			output_how how = {q8, SS_DTYPE_Q8, NULL};
			ss_state out;
			int write_failed;
			assert_int_equal(ss_writer_open(&w, out_path, 1, err), 0);
			int rc = files_to(&o, threads, paths, 1, w, &how, &out, NULL,
						     &write_failed, err);
			assert_int_equal(rc, SS_ERR_INVALID);
			assert_int_equal(write_failed, 0);
			if (!strstr(err, path) || !strstr(err, "ssm element 7 is inf") || !strstr(err, "overflows f32"))
				fail_msg("q8 %d, threads %d: %s", q8, threads, err);
			ss_writer_abort(w);
		}
	free_states(in, 2);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* K random states of dims d with ids s0, s1, ... and a temporary
 * directory dir (`name`) with the names of nf files a.ss, b.ss, ... */
static void make_dealt(ss_state *in, int K, const ss_state_dims *d, char *dir, const char *name,
		       char (*path)[4200], int nf)
{
	for (int k = 0; k < K; k++) {
		char id[8];
		snprintf(id, sizeof id, "s%d", k);
		make_state(&in[k], d, D_RANDOM, id);
	}
	assert_int_equal(ss_test_tmpdir_make(dir, 4096, name), 0);
	for (int f = 0; f < nf; f++)
		snprintf(path[f], 4200, "%s/%c.ss", dir, 'a' + f);
}

/* Writes in[0..K) as dtype (byte-shuffled or not) into the files
 * path[file_of[k]] (nf of them, in order within each), each record's
 * frame offset into off[k]. */
static void write_dealt(char (*path)[4200], int nf, ss_state *in, int K, const int *file_of, ss_dtype dtype,
			int shuffle, uint64_t *off)
{
	char err[SS_ERRMSG_MAX];
	ss_writer *w[4];
	for (int f = 0; f < nf; f++) {
		assert_int_equal(ss_writer_open(&w[f], path[f], 1, err), 0);
		ss_writer_set_shuffle(w[f], shuffle);
	}
	for (int k = 0; k < K; k++) {
		in[k].dtype = dtype;
		assert_int_equal(ss_writer_put_state(w[file_of[k]], &in[k], &off[k]), 0);
	}
	for (int f = 0; f < nf; f++)
		assert_int_equal(ss_writer_close(w[f], err), 0);
}

/* Flips a bit of the byte halfway between offsets a and b of path. */
static void corrupt_middle(const char *path, uint64_t a, uint64_t b)
{
	FILE *fp = fopen(path, "r+b");
	assert_non_null(fp);
	uint64_t at = (a + b) / 2;
	assert_int_equal(fseek(fp, (long)at, SEEK_SET), 0);
	int byte = fgetc(fp);
	assert_int_equal(fseek(fp, (long)at, SEEK_SET), 0);
	fputc(byte ^ 0x10, fp);
	assert_int_equal(fclose(fp), 0);
}

/* ss_compose_run() with threads decompresses several records at once and
 * folds them in order: the result must be the bits of the one-thread call
 * for every mode, dtype (f16/bf16 shuffled, folded from their planes in
 * place, and not), conv rule and norm (before: whole records), with the
 * records dealt to threads across three files; and a corrupt record in the
 * middle must fail with the one-thread call's error. */
static void test_files_threads_equal_one(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 2, 16, 64, 160, 99, 4}; /* ssm: 2 shuffle blocks */
	static const ss_dtype dts[4] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_Q8};
	enum { K = 7 };
	static const int file_of[K] = {0, 0, 0, 1, 2, 2, 2};
	char err[SS_ERRMSG_MAX], err1[SS_ERRMSG_MAX], dir[4096], path[3][4200];
	ss_state in[K];
	uint64_t off[K];
	make_dealt(in, K, &d, dir, "threads", path, 3);
	const char *paths[3] = {path[0], path[1], path[2]};
	for (int t = 0; t < 6; t++) {
		write_dealt(path, 3, in, K, file_of, dts[t < 4 ? t : t - 3], t < 4, off);
		for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++)
			for (int v = 0; v < 3; v++) {
				ss_compose_opts o = {(ss_compose_mode)mode,
						     v == 2 ? SS_COMPOSE_NORM_BEFORE : v == 1 ? SS_COMPOSE_NORM_AFTER : 0,
						     (ss_compose_conv)(v == 1)};
				ss_state a, b;
				uint64_t ba = 0, bb = 0;
				assert_int_equal(files(&o, 1, paths, 3, &a, &ba, err), 0);
				for (int T = 2; T <= 3; T++) {
					if (files(&o, T, paths, 3, &b, &bb, err))
						fail_msg("%s, %d threads: %s", ss_compose_mode_name((ss_compose_mode)mode), T,
							 err);
					assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(&d) * 4);
					assert_memory_equal(a.conv, b.conv, ss_state_conv_len(&d) * 4);
					assert_memory_equal(a.logdecay, b.logdecay, ss_state_logdecay_len(&d) * 4);
					assert_string_equal(a.id, b.id);
					assert_int_equal(a.n_tokens, b.n_tokens);
					assert_int_equal(a.dtype, b.dtype);
					assert_int_equal(a.n_sources, K);
					assert_int_equal(b.n_sources, K);
					assert_true(bb >= ba);
					ss_state_free(&b);
				}
				ss_state_free(&a);
			}
	}
	/* f16 shuffled, record 1 of c.ss (the 6th) corrupt in its middle: the
	 * frame's checksum fails; every mode reports that record, as one
	 * thread does */
	write_dealt(path, 3, in, K, file_of, SS_DTYPE_F16, 1, off);
	corrupt_middle(path[2], off[5], off[6]);
	for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++) {
		ss_compose_opts o = {(ss_compose_mode)mode, 0, SS_COMPOSE_CONV_MEAN};
		ss_state a;
		int rc1 = files(&o, 1, paths, 3, &a, NULL, err1);
		assert_true(rc1 < 0);
		assert_non_null(strstr(err1, "c.ss: record 1 "));
		for (int T = 2; T <= 4; T++) {
			assert_int_equal(files(&o, T, paths, 3, &a, NULL, err), rc1);
			assert_string_equal(err, err1);
		}
	}
	free_states(in, K);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* A record that fails when it begins (a NaN logdecay: soup has no plan
 * to catch it in the first pass) while the record before is still being
 * folded: threads must report the one-thread error, not one of the
 * record before (whose end comes after the composer has failed). */
static void test_files_threads_begin_error(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 4, 16, 64, 160, 99, 4}; /* ssm 2.6 MB in f32 */
	enum { K = 6 };
	static const int file_of[K] = {0, 0, 0, 0, 0, 0};
	char err[SS_ERRMSG_MAX], err1[SS_ERRMSG_MAX], dir[4096], path[1][4200];
	ss_state in[K];
	uint64_t off[K];
	make_dealt(in, K, &d, dir, "begin-error", path, 1);
	in[3].logdecay[5] = NAN;
	write_dealt(path, 1, in, K, file_of, SS_DTYPE_F32, 1, off);
	const char *paths[1] = {path[0]};
	ss_compose_opts o = {SS_COMPOSE_SOUP, 0, SS_COMPOSE_CONV_MEAN};
	ss_state a;
	int rc1 = files(&o, 1, paths, 1, &a, NULL, err1);
	assert_true(rc1 < 0);
	assert_non_null(strstr(err1, "a.ss: record 3 "));
	for (int rep = 0; rep < 20; rep++)
		for (int T = 2; T <= 3; T++) {
			assert_int_equal(files(&o, T, paths, 1, &a, NULL, err), rc1);
			assert_string_equal(err, err1);
		}
	free_states(in, K);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* Reads path whole into a malloc'd buffer (*n bytes); NULL when absent. */
static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	unsigned char *b = NULL;
	size_t cap = 0;
	*n = 0;
	for (;;) {
		if (*n == cap && !(b = realloc(b, cap = cap ? 2 * cap : 1 << 16)))
			break;
		size_t got = fread(b + *n, 1, cap - *n, f);
		*n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	return b;
}

/* ss_compose_run() with a writer writes the result while the inputs are read (its
 * own thread, a block at a time as the last input's folds finish it): the
 * file must hold the bytes ss_writer_put_state makes of the one-thread
 * result with the same dtype and id, for every mode, dtype (q8 output:
 * written after), conv rule and norm (after: written after), 1 to 3
 * threads; a corrupt record must fail with the one-thread error and leave
 * no output; a failing output must say so (write_failed) and stop. */
static void test_files_to_equal_put_state(void **unused)
{
	(void)unused;
	const ss_state_dims d = {"mamba2", 2, 16, 64, 160, 99, 4}; /* ssm: 2 shuffle blocks */
	static const ss_dtype dts[4] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16, SS_DTYPE_Q8};
	enum { K = 5 };
	static const int file_of[K] = {0, 0, 1, 1, 1};
	char err[SS_ERRMSG_MAX], err1[SS_ERRMSG_MAX], dir[4096], path[2][4200], out_a[4200], out_b[4200];
	ss_state in[K];
	uint64_t off[K];
	make_dealt(in, K, &d, dir, "files-to", path, 2);
	snprintf(out_a, sizeof out_a, "%s/a-out.ss", dir);
	snprintf(out_b, sizeof out_b, "%s/b-out.ss", dir);
	const char *paths[2] = {path[0], path[1]};
	for (int t = 0; t < 5; t++) {
		write_dealt(path, 2, in, K, file_of, dts[t < 4 ? t : 1], t < 4, off); /* t 4: f16 not shuffled */
		for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++)
			for (int v = 0; v < 2; v++)
				for (int T = 1; T <= 3; T++) {
					ss_compose_opts o = {(ss_compose_mode)mode, v ? SS_COMPOSE_NORM_AFTER : 0,
							     (ss_compose_conv)v};
					/* how: as the inputs, or another dtype and id (q8 out once) */
					output_how how = {(T + mode) % 2, T == 3 ? SS_DTYPE_Q8 : SS_DTYPE_BF16,
								 T == 2 ? "the-id" : NULL};
					ss_state a, b;
					ss_writer *wa, *wb;
					int wf = -1;
					assert_int_equal(files(&o, 1, paths, 2, &a, NULL, err), 0);
					if (how.set_dtype)
						a.dtype = how.dtype;
					if (how.id) {
						free(a.id);
						a.id = strdup(how.id);
					}
					assert_int_equal(ss_writer_open(&wa, out_a, 1, err), 0);
					assert_int_equal(ss_writer_put_state(wa, &a, NULL), 0);
					assert_int_equal(ss_writer_close(wa, err), 0);
					assert_int_equal(ss_writer_open(&wb, out_b, 1, err), 0);
					if (files_to(&o, T, paths, 2, wb, &how, &b, NULL, &wf, err))
						fail_msg("%s, dtype %d, %d threads: %s", ss_compose_mode_name((ss_compose_mode)mode),
							 t, T, err);
					assert_int_equal(wf, 0);
					assert_int_equal(ss_writer_close(wb, err), 0);
					size_t na, nb;
					unsigned char *fa = slurp(out_a, &na), *fb = slurp(out_b, &nb);
					assert_non_null(fa);
					assert_non_null(fb);
					assert_int_equal(na, nb);
					if (memcmp(fa, fb, na))
						fail_msg("%s, dtype %d, norm %d, %d threads: the files differ",
							 ss_compose_mode_name((ss_compose_mode)mode), t, v, T);
					assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(&d) * 4);
					assert_string_equal(a.id, b.id);
					assert_int_equal(a.dtype, b.dtype);
					free(fa);
					free(fb);
					ss_state_free(&a);
					ss_state_free(&b);
				}
	}
	/* f16, record 1 of b.ss (the 4th) corrupt in its middle: the one-thread
	 * error, and the output aborted leaves nothing */
	write_dealt(path, 2, in, K, file_of, SS_DTYPE_F16, 1, off);
	corrupt_middle(path[1], off[3], off[4]);
	remove(out_b);
	for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++) {
		ss_compose_opts o = {(ss_compose_mode)mode, 0, SS_COMPOSE_CONV_MEAN};
		ss_state a;
		int rc1 = files(&o, 1, paths, 2, &a, NULL, err1);
		assert_true(rc1 < 0);
		assert_non_null(strstr(err1, "b.ss: record 1 "));
		for (int T = 2; T <= 3; T++) {
			ss_writer *wb;
			int wf = -1;
			assert_int_equal(ss_writer_open(&wb, out_b, 1, err), 0);
			assert_int_equal(files_to(&o, T, paths, 2, wb, NULL, &a, NULL, &wf, err),
					 rc1);
			assert_string_equal(err, err1);
			assert_int_equal(wf, 0);
			ss_writer_abort(wb);
			assert_null(fopen(out_b, "rb"));
		}
	}
	/* an output that fails (a full device): write_failed, the close says why */
	ss_writer *wf_w;
	if (ss_writer_open(&wf_w, "/dev/full", 1, err) == 0) {
		write_dealt(path, 2, in, K, file_of, SS_DTYPE_F32, 1, off);
		for (int T = 1; T <= 2; T++) {
			ss_compose_opts o = {SS_COMPOSE_SOUP, 0, SS_COMPOSE_CONV_MEAN};
			ss_state a;
			int wf = -1;
			if (T == 2)
				assert_int_equal(ss_writer_open(&wf_w, "/dev/full", 1, err), 0);
			assert_true(files_to(&o, T, paths, 2, wf_w, NULL, &a, NULL, &wf, err) < 0);
			assert_int_equal(wf, 1);
			assert_int_not_equal(ss_writer_close(wf_w, err), 0);
			assert_non_null(strstr(err, "write error"));
		}
	}
	free_states(in, K);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

/* Composing q8 or q4 (qt) records (read in place, codes scaled block by block as they
 * are decompressed) gives the bits of composing their dequantized f32
 * (ss_record_state) with ss_compose, for every mode and conv rule, norm
 * before included (whole records); and soup of q8 is within
 * (1/n)·Σ_k scale_k/2 (+ f32 rounding) of soup of the original f32. */
static void quant_compose(ss_dtype qt)
{
	enum { K = 5 };
	/* ssm 160 KiB of codes: pieces (128 KiB) cut a row; conv_dim not a multiple of headdim */
	const ss_state_dims d = {"mamba2", 2, 16, 64, 80, 99, 4};
	char err[SS_ERRMSG_MAX], dir[4096], path[4200];
	ss_state in[K], deq[K];
	const ss_state *pd[K], *pin[K];
	for (int k = 0; k < K; k++) {
		make_state(&in[k], &d, D_SMALL, "q");
		for (size_t i = 0; i < ss_state_ssm_len(&d); i++) /* rows of very different magnitudes */
			in[k].ssm[i] *= (float)pow(10, (double)((i / 80 + (size_t)k) % 7) - 4);
		in[k].dtype = qt;
		pin[k] = &in[k];
	}
	assert_int_equal(ss_test_tmpdir_make(dir, sizeof dir, "q8"), 0);
	snprintf(path, sizeof path, "%s/q8.ss", dir);
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, path, 1, err), 0);
	for (int k = 0; k < K; k++)
		assert_int_equal(ss_writer_put_state(w, &in[k], NULL), 0);
	assert_int_equal(ss_writer_close(w, err), 0);
	ss_reader *r;
	const ss_record *rec;
	assert_int_equal(ss_reader_open(&r, path, 0, err), 0);
	for (int k = 0; k < K; k++) {
		assert_int_equal(ss_reader_next(r, &rec), 1);
		assert_int_equal(ss_record_state(rec, &deq[k], err), 0);
		assert_int_equal(deq[k].dtype, qt);
		assert_non_null(deq[k].ssm_scale);
		pd[k] = &deq[k];
	}
	ss_reader_close(r);
	const char *paths[1] = {path};
	for (int mode = SS_COMPOSE_CASO; mode <= SS_COMPOSE_MAX; mode++)
		for (int v = 0; v < 3; v++) {
			ss_compose_opts o = {(ss_compose_mode)mode, v == 2 ? SS_COMPOSE_NORM_BEFORE : 0,
					     (ss_compose_conv)(v == 1)};
			ss_state a, b;
			assert_int_equal(files(&o, 1, paths, 1, &a, NULL, err), 0);
			assert_int_equal(ss_compose(&o, pd, K, &b, err), 0);
			assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(&d) * 4);
			assert_memory_equal(a.conv, b.conv, ss_state_conv_len(&d) * 4);
			assert_int_equal(a.dtype, qt);
			ss_state_free(&a);
			ss_state_free(&b);
		}
	ss_compose_opts o = {SS_COMPOSE_SOUP, 0, SS_COMPOSE_CONV_MEAN};
	ss_state a, b;
	assert_int_equal(files(&o, 1, paths, 1, &a, NULL, err), 0);
	assert_int_equal(ss_compose(&o, pin, K, &b, err), 0);
	size_t bad = 0;
	for (size_t i = 0; i < ss_state_ssm_len(&d); i++) {
		double bound = 0;
		for (int k = 0; k < K; k++)
			bound += deq[k].ssm_scale[i / (size_t)d.d_state] / 2 / K;
		bound = bound * (1 + 1e-5) + 1e-6 * fabs((double)b.ssm[i]);
		if (fabs((double)a.ssm[i] - b.ssm[i]) > bound && bad++ < 5)
			print_error("ssm[%zu]: q8 %.9g, f32 %.9g, bound %.3g\n", i, a.ssm[i], b.ssm[i], bound);
	}
	assert_int_equal(bad, 0);
	ss_state_free(&a);
	ss_state_free(&b);
	free_states(in, K);
	free_states(deq, K);
	assert_int_equal(ss_test_tmpdir_remove(dir), 0);
}

static void test_q8_compose(void **unused)
{
	(void)unused;
	quant_compose(SS_DTYPE_Q8);
}

static void test_q4_compose(void **unused)
{
	(void)unused;
	quant_compose(SS_DTYPE_Q4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gauss_legendre),
		cmocka_unit_test(test_weights_oracle),
		cmocka_unit_test(test_weights_large_n),
		cmocka_unit_test(test_oracle_all_modes),
		cmocka_unit_test(test_oracle_mamba1),
		cmocka_unit_test(test_composed_id),
		cmocka_unit_test(test_soup_sum_max),
		cmocka_unit_test(test_invariances),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_norm_and_conv),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_dtypes),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_drivers),
		cmocka_unit_test(test_by_place),
		cmocka_unit_test(test_golden_t1),
		cmocka_unit_test(test_files_pieces_equal_whole),
		cmocka_unit_test(test_files_pieces_special_values),
		cmocka_unit_test(test_files_refuse_nonfinite),
		cmocka_unit_test(test_files_to_overflow),
		cmocka_unit_test(test_files_threads_equal_one),
		cmocka_unit_test(test_files_to_equal_put_state),
		cmocka_unit_test(test_files_threads_begin_error),
		cmocka_unit_test(test_q8_compose),
		cmocka_unit_test(test_q4_compose),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
