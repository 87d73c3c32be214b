/*
 * compose.c — the composer: folding states into one accumulator, an input
 * at a time and each input a piece at a time (begin / fold / end), and
 * finishing the result (soup's and conv's means, the norm after, the
 * logdecay, weights and id). See ss_compose.h for the contract. The
 * weights come from compose_weights.c; reading files, threads, the spool file and
 * the writer thread are the driver's (compose_files.c, compose_threads.c): nothing here
 * starts a thread or opens a file.
 * ref: picaso.txt §3.3, Props. 1-3; docs/DESIGN.md §3;
 *      document-souping.txt §2.2.
 */
#include "ss.h"
#include "compose/fold.h"
#include "compose/internal.h"
#include "stream/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static const char *const array_name[2] = {"conv", "ssm"};

/* --------------------------------------------------------------- composer */

/* An input between its begin and its end (lib/compose/internal.h): what
 * folding its pieces needs, so that several can be open at once. */
struct ss_compose_input {
	int open;
	size_t k;                 /* its place in concatenation order */
	ss_dtype t;               /* storage dtype of its pieces */
	uint64_t want[2], fed[2]; /* bytes of conv [0] and ssm [1]: expected, received */
	float *scale[2];          /* a q8 input's conv [0] and ssm [1] scales (copies) */
	size_t scale_cap[2];
	float *decay;             /* its logdecay [n_head] (caso's factor, a copy) */
	size_t decay_cap;
	size_t shuf;              /* its shuffle block (elements), 0 = none */
	unsigned char *blk, *unblk; /* a shuffled block as it arrives, then unshuffled */
	size_t fill, blk_cap;     /* bytes of blk filled, allocated */
};

struct ss_composer {
	ss_compose_opts o;
	int failed, finished;
	size_t n;          /* inputs ended */
	size_t begun;      /* inputs begun: the next one's place */
	size_t n_open;     /* begun, not ended */
	size_t n_plan;     /* 0 = no plan */
	size_t n_head;     /* n_layer * nheads, once known */
	double *w;         /* [n_head][n_plan] planned weights */
	float *plan_decay; /* [n_plan][n_head] */
	ss_state acc;      /* the accumulator, then the result */
	int have_acc;
	int meta_done;     /* the result's metadata is in acc (finish_meta) */
	size_t final[2];   /* elements of conv [0], ssm [1] finished (ss_composer_finish_range) */
	size_t cap;        /* capacity of decay/ids in inputs */
	float *decay;      /* [cap][n_head] the inputs' logdecays */
	char **ids;        /* [cap] */
	int64_t n_tokens;
	ss_compose_input in; /* the input of ss_composer_begin/fold/end */
};

static int fail(ss_composer *c, int rc)
{
	c->failed = 1;
	return rc;
}

/* The plan: n inputs with logdecays [n][n_head] (copied), and for
 * picaso-s/picaso-r their weights. */
static int plan(ss_composer *c, size_t n, size_t n_head, const float *logdecay, char *errmsg)
{
	if (n == 0)
		return ss_errf(errmsg, SS_ERR_INVALID, "no input states");
	/* caso has weights for every n: this checks the decays alone */
	int rc = ss_compose_weights_check(SS_COMPOSE_CASO, n, n_head, logdecay, errmsg);
	if (rc)
		return rc;
	if (!(c->plan_decay = malloc(n * n_head * sizeof *c->plan_decay)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	memcpy(c->plan_decay, logdecay, n * n_head * sizeof *c->plan_decay);
	if (ss_compose_modes[c->o.mode].needs_plan) {
		if (!(c->w = malloc(n * n_head * sizeof *c->w)))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		if ((rc = ss_compose_weights(c->o.mode, n, n_head, logdecay, c->w, errmsg)))
			return rc;
	}
	c->n_plan = n;
	c->n_head = n_head;
	return 0;
}

int ss_composer_new(ss_composer **out, const ss_compose_opts *o, size_t n, size_t n_head, const float *logdecay,
		    char *errmsg)
{
	*out = NULL;
	if (!o || (unsigned)o->mode >= SS_COMPOSE_N_MODES || (unsigned)o->norm >= SS_COMPOSE_N_NORMS ||
	    (unsigned)o->conv >= SS_COMPOSE_N_CONVS)
		return ss_errf(errmsg, SS_ERR_INVALID, "invalid composition options");
	ss_composer *c = calloc(1, sizeof *c);
	if (!c)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	c->o = *o;
	int rc = logdecay ? plan(c, n, n_head, logdecay, errmsg) : 0;
	if (rc) {
		ss_composer_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

static int grow(ss_composer *c)
{
	if (c->begun < c->cap)
		return 0;
	size_t cap = c->cap ? 2 * c->cap : 16;
	float *d = realloc(c->decay, cap * c->n_head * sizeof *d);
	if (!d)
		return SS_ERR_NOMEM;
	c->decay = d;
	char **ids = realloc(c->ids, cap * sizeof *ids);
	if (!ids)
		return SS_ERR_NOMEM;
	c->ids = ids;
	c->cap = cap;
	return 0;
}


/* The first input: fixes dims and fingerprint, allocates the accumulator. */
static int first_input(ss_composer *c, const ss_state *x, char *errmsg)
{
	size_t n_head = ss_state_logdecay_len(&x->dims);
	if (c->n_plan && n_head != c->n_head) {
		ss_errf(errmsg, 0, "input 0 has %zu heads, the plan %zu", n_head, c->n_head);
		return SS_ERR_MISMATCH;
	}
	c->n_head = n_head;
	int rc = ss_state_alloc(&c->acc, &x->dims);
	if (rc) {
		ss_errf(errmsg, 0, "out of memory");
		return rc;
	}
	c->have_acc = 1;
	free(c->acc.ssm);
	/* its first input touches every page: huge ones fault 512 times less */
	if (!(c->acc.ssm = ss_big_alloc(ss_state_ssm_len(&x->dims) * sizeof(float)))) {
		ss_errf(errmsg, 0, "out of memory");
		return SS_ERR_NOMEM;
	}
	memcpy(c->acc.fingerprint, x->fingerprint, sizeof c->acc.fingerprint);
	c->acc.fingerprint[SS_FINGERPRINT_MAX - 1] = 0;
	return 0;
}

/* Copies x's logdecay and, for q8 (t), its scales (x->conv_scale,
 * x->ssm_scale) into in. */
static int take_input(ss_composer *c, ss_compose_input *in, const ss_state *x, ss_dtype t, char *errmsg)
{
	if (c->n_head > in->decay_cap) {
		float *p = realloc(in->decay, c->n_head * sizeof *p);
		if (!p)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		in->decay = p;
		in->decay_cap = c->n_head;
	}
	memcpy(in->decay, x->logdecay, c->n_head * sizeof *in->decay);
	const float *src[2] = {x->conv_scale, x->ssm_scale};
	for (int a = 0; ss_dtype_info_of(t)->scaled && a < 2; a++) {
		size_t n = ss_state_q8_n_scales(&c->acc.dims, a);
		if (!src[a])
			return ss_errf(errmsg, SS_ERR_INVALID, "input %zu: %s state without its scales", c->begun,
				       ss_dtype_name(t));
		if (n > in->scale_cap[a]) {
			float *p = realloc(in->scale[a], n * sizeof *p);
			if (!p)
				return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
			in->scale[a] = p;
			in->scale_cap[a] = n;
		}
		memcpy(in->scale[a], src[a], n * sizeof *src[a]);
	}
	return 0;
}

/* in's array `which` (0 conv, 1 ssm) at p, its element e0 first. */
static src_arr input_arr(const ss_composer *c, const ss_compose_input *in, int which, const void *p, size_t e0)
{
	src_arr s = src_of(p, in->t);
	if (s.d->scaled) {
		s.scale = in->scale[which];
		s.e0 = e0;
		ss_state_q8_blocks(&c->acc.dims, which, &s.row, &s.block);
	}
	return s;
}

/* Starts input c->begun on in: x supplies dims, fingerprint, id, logdecay
 * and n_tokens; its arrays follow in dtype t through add_range(). */
static int add_begin(ss_composer *c, ss_compose_input *in, const ss_state *x, ss_dtype t, char *errmsg)
{
	if (c->failed || c->finished || in->open) {
		ss_errf(errmsg, 0, "composer: add after an error or finish");
		return SS_ERR_INVALID;
	}
	size_t k = c->begun;
	if (!x || !x->logdecay || !ss_dtype_name(t)) {
		ss_errf(errmsg, 0, "input %zu: state without ssm, conv or logdecay", k);
		return fail(c, SS_ERR_INVALID);
	}
	if (ss_compose_modes[c->o.mode].needs_plan && !c->n_plan) {
		ss_errf(errmsg, 0, "mode %s needs every input's decays first (a plan: ss_composer_new)",
			ss_compose_mode_name(c->o.mode));
		return fail(c, SS_ERR_INVALID);
	}
	if (c->n_plan && k >= c->n_plan) {
		ss_errf(errmsg, 0, "input %zu: more inputs than the %zu planned", k, c->n_plan);
		return fail(c, SS_ERR_INVALID);
	}
	int rc;
	if (!c->have_acc) {
		if ((rc = first_input(c, x, errmsg)))
			return fail(c, rc);
	} else {
		char why[SS_ERRMSG_MAX];
		if (ss_state_dims_check(&c->acc.dims, &x->dims, why)) {
			ss_errf(errmsg, 0, "input %zu: dims differ from input 0: %s", k, why);
			return fail(c, SS_ERR_MISMATCH);
		}
		if (strncmp(c->acc.fingerprint, x->fingerprint, SS_FINGERPRINT_MAX) != 0) {
			ss_errf(errmsg, 0, "input %zu: model fingerprint %.*s differs from input 0's %s",
				k, SS_FINGERPRINT_MAX, x->fingerprint, c->acc.fingerprint);
			return fail(c, SS_ERR_MISMATCH);
		}
	}
	size_t H = c->n_head;
	if (c->n_plan && memcmp(c->plan_decay + k * H, x->logdecay, H * sizeof(float)) != 0) {
		ss_errf(errmsg, 0, "input %zu: logdecay differs from the planned one (input changed?)", k);
		return fail(c, SS_ERR_MISMATCH);
	}
	if ((rc = ss_compose_weights_check(SS_COMPOSE_CASO, 1, H, x->logdecay, errmsg))) {
		ss_errf(errmsg, 0, "input %zu: a logdecay is NaN or > 0", k);
		return fail(c, rc);
	}
	if ((rc = take_input(c, in, x, t, errmsg)))
		return fail(c, rc);
	if (grow(c) || !(c->ids[k] = strdup(x->id ? x->id : ""))) {
		ss_errf(errmsg, 0, "out of memory");
		return fail(c, SS_ERR_NOMEM);
	}
	memcpy(c->decay + k * H, x->logdecay, H * sizeof(float));
	c->n_tokens += x->n_tokens;
	c->begun++;
	c->n_open++;
	in->open = 1;
	in->k = k;
	in->t = t;
	in->want[0] = ss_dtype_row_size(t, ss_state_conv_len(&c->acc.dims));
	in->want[1] = ss_dtype_row_size(t, ss_state_ssm_len(&c->acc.dims));
	in->fed[0] = in->fed[1] = 0;
	in->shuf = 0;
	in->fill = 0;
	return 0;
}

/* Folds elements [e0, e0+n) of in's conv (which 0) or ssm (which 1)
 * array, given at xs, into the accumulator. lscale: per layer factor of
 * the ssm (norm before), or NULL. Elementwise: any cut of an array into
 * ranges gives the same bits, and inputs may fold different ranges at once
 * (each range in input order). */
static void add_range(const ss_composer *c, const ss_compose_input *in, int which, src_arr xs, size_t e0,
		      size_t n, const double *lscale)
{
	int first = in->k == 0;
	if (which == 0) {
		int copy = first || c->o.conv == SS_COMPOSE_CONV_LAST;
		apply(c->acc.conv + e0, xs, 0, n, copy ? OP_COPY : OP_AXPY, 1, 0);
		return;
	}
	const ss_state_dims *dm = &c->acc.dims;
	/* ssm elements per decay: a Mamba-2 head's headdim·d_state, a
	 * Mamba-1 state element's 1; decays per layer */
	size_t hlen = ss_state_ssm_len(dm) / c->n_head, k = in->k;
	size_t hpl = c->n_head / (size_t)dm->n_layer;
	for (size_t e = e0, end = e0 + n; e < end;) {
		size_t gh = e / hlen, seg = (gh + 1) * hlen < end ? (gh + 1) * hlen - e : end - e;
		double s = lscale ? lscale[gh / hpl] : 1;
		float cf = (float)(c->w ? c->w[gh * c->n_plan + k] * s : s);
		float *y = c->acc.ssm + e;
		if (first)
			apply(y, xs, e - e0, seg, OP_SCALE, cf, 0);
		else if (c->o.mode == SS_COMPOSE_CASO)
			apply(y, xs, e - e0, seg, OP_AXPBY, cf, (float)exp((double)in->decay[gh]));
		else if (c->o.mode == SS_COMPOSE_MAX)
			apply(y, xs, e - e0, seg, OP_MAX, cf, 0);
		else /* picaso (weighted), soup and sum (divided at the end) */
			apply(y, xs, e - e0, seg, OP_AXPY, cf, 0);
		e += seg;
	}
}
int ss_composer_end_input(ss_composer *c, ss_compose_input *in, char *errmsg)
{
	if (!in->open) {
		ss_errf(errmsg, 0, "composer: add_end outside an input");
		return fail(c, SS_ERR_INVALID);
	}
	for (int a = 0; a < 2; a++)
		if (in->fed[a] != in->want[a]) {
			ss_errf(errmsg, 0, "input %zu: field \"%s\" has %llu bytes, expected %llu", in->k, array_name[a],
				(unsigned long long)in->fed[a], (unsigned long long)in->want[a]);
			return fail(c, SS_ERR_FORMAT);
		}
	in->open = 0;
	c->n_open--;
	c->n++;
	return 0;
}


int ss_composer_prepare(ss_composer *c, const ss_state *x, char *errmsg)
{
	if (c->failed || c->finished || c->begun > 0) {
		ss_errf(errmsg, 0, "composer: prepare after the first input");
		return SS_ERR_INVALID;
	}
	int rc = c->have_acc ? 0 : first_input(c, x, errmsg);
	return rc ? fail(c, rc) : 0;
}

void ss_composer_touch(ss_composer *c, size_t part, size_t parts)
{
	if (!c->have_acc || c->begun > 0 || part >= parts)
		return;
	const size_t page = 4096 / sizeof(float); /* a store per page faults it in */
	size_t n = ss_state_ssm_len(&c->acc.dims), pages = (n + page - 1) / page;
	for (size_t q = pages * part / parts; q < pages * (part + 1) / parts; q++)
		c->acc.ssm[q * page] = 0;
}

ss_compose_input *ss_compose_input_new(void)
{
	return calloc(1, sizeof(ss_compose_input));
}

/* Frees in's buffers, not in. */
static void input_clear(ss_compose_input *in)
{
	free(in->scale[0]);
	free(in->scale[1]);
	free(in->decay);
	free(in->blk);
	free(in->unblk);
}

void ss_compose_input_free(ss_compose_input *in)
{
	if (in)
		input_clear(in);
	free(in);
}

int ss_composer_begin_input(ss_composer *c, ss_compose_input *in, const ss_state *x, char *errmsg)
{
	int rc = add_begin(c, in, x, x ? x->dtype : SS_DTYPE_F32, errmsg);
	if (rc || x->shuffle <= 0 || ss_dtype_size(in->t) == 1)
		return rc;
	if (c->o.norm & SS_COMPOSE_NORM_BEFORE) {
		ss_errf(errmsg, 0, "input %zu: norm before needs unshuffled arrays", in->k);
		return fail(c, SS_ERR_INVALID);
	}
	size_t bytes = (size_t)x->shuffle * ss_dtype_size(in->t); /* <= SS_SHUFFLE_MAX·4: the reader checks */
	if (bytes > in->blk_cap) {
		unsigned char *a = realloc(in->blk, bytes), *b = a ? realloc(in->unblk, bytes) : NULL;
		if (a)
			in->blk = a;
		if (b)
			in->unblk = b;
		if (!a || !b) {
			ss_errf(errmsg, 0, "out of memory");
			return fail(c, SS_ERR_NOMEM);
		}
		in->blk_cap = bytes;
	}
	in->shuf = (size_t)x->shuffle;
	return 0;
}

/* SS_ERR_FORMAT naming element e of in's array which, the value at x (one
 * element of in->t), as the record decoders name one that is not finite. */
static int nonfinite(const ss_compose_input *in, int which, size_t e, const void *x, char *errmsg)
{
	float v;
	ss_to_f32(&v, x, in->t, 1);
	return ss_errf(errmsg, SS_ERR_FORMAT, "input %zu: field \"%s\": element %zu is %g, not finite", in->k,
		       array_name[which], e, (double)v);
}

/* Folds in the shuffle block of m elements at p, elements [start,
 * start+m) of array `which`: 2-byte elements straight from their planes
 * (one pass, the block's bytes read once), others unshuffled first. Its
 * elements are checked finite first: 0 or SS_ERR_FORMAT (nothing folded). */
static int add_block(const ss_composer *c, ss_compose_input *in, int which, const unsigned char *p, size_t start,
		     size_t m, char *errmsg)
{
	size_t es = ss_dtype_size(in->t), bad;
	src_arr xs;
	if (es == 2) {
		if ((bad = ss_nonfinite_planes(p, p + m, in->t, m)) < m) {
			uint16_t h = (uint16_t)(p[bad] | (unsigned)p[m + bad] << 8);
			return nonfinite(in, which, start + bad, &h, errmsg);
		}
		xs = input_arr(c, in, which, p, start);
		xs.planes = m;
	} else {
		ss_unshuffle(in->unblk, p, es, m, m);
		if ((bad = ss_nonfinite_find(in->unblk, in->t, m)) < m)
			return nonfinite(in, which, start + bad, in->unblk + bad * es, errmsg);
		xs = input_arr(c, in, which, in->unblk, start);
	}
	add_range(c, in, which, xs, start, m, NULL);
	return 0;
}

/* Bytes [fed, fed+len) of a shuffled array: folded block by block, a
 * block the piece holds whole in place, else gathered in in->blk first. */
static int add_shuffled(const ss_composer *c, ss_compose_input *in, int which, const unsigned char *p, size_t len,
			char *errmsg)
{
	size_t es = ss_dtype_size(in->t), n = (size_t)(in->want[which] / es);
	int rc;
	while (len) {
		size_t start = (size_t)(in->fed[which] / es) - in->fill / es; /* the block's first element */
		size_t m = n - start < in->shuf ? n - start : in->shuf;
		if (in->fill == 0 && len >= m * es) {
			if ((rc = add_block(c, in, which, p, start, m, errmsg)))
				return rc;
			in->fed[which] += m * es, p += m * es, len -= m * es;
			continue;
		}
		size_t take = m * es - in->fill < len ? m * es - in->fill : len;
		memcpy(in->blk + in->fill, p, take);
		in->fill += take, in->fed[which] += take, p += take, len -= take;
		if (in->fill == m * es) {
			in->fill = 0;
			if ((rc = add_block(c, in, which, in->blk, start, m, errmsg)))
				return rc;
		}
	}
	return 0;
}

/* Folds bytes [off, off+len) of in's array which (0 conv, 1 ssm), at p.
 * check: plain pieces are checked finite first (a shuffled block always
 * is). With a norm before, the ssm comes whole: its layers' norms first. */
static int fold(const ss_composer *c, ss_compose_input *in, int which, uint64_t off, const void *p, size_t len,
		int check, char *errmsg)
{
	if (!in->open || (which != 0 && which != 1))
		return ss_errf(errmsg, SS_ERR_INVALID, "composer: a piece outside an input");
	size_t es = ss_dtype_size(in->t), per = ss_dtype_info_of(in->t)->block;
	if (off != in->fed[which] || len % es || len > in->want[which] - off)
		return ss_errf(errmsg, SS_ERR_FORMAT, "input %zu: field \"%s\" is not %llu bytes of %s", in->k,
			       array_name[which], (unsigned long long)in->want[which], ss_dtype_name(in->t));
	if (!p && len)
		return ss_errf(errmsg, SS_ERR_INVALID, "input %zu: state without ssm, conv or logdecay", in->k);
	if (in->shuf)
		return add_shuffled(c, in, which, p, len, errmsg);
	/* elements [e0, e0+n) (q4: two a byte, an odd array's last byte one) */
	const size_t total = which ? ss_state_ssm_len(&c->acc.dims) : ss_state_conv_len(&c->acc.dims);
	const size_t e0 = (size_t)(off / es) * per, e1 = (size_t)((off + len) / es) * per;
	const size_t n = (e1 < total ? e1 : total) - e0;
	/* checked while the piece is in cache, before any of it is folded (f32, f16, bf16: per 1) */
	size_t bad = check ? ss_nonfinite_find(p, in->t, n) : n;
	if (bad < n)
		return nonfinite(in, which, e0 + bad, (const unsigned char *)p + bad * es, errmsg);
	double *lscale = NULL;
	if (which == 1 && (c->o.norm & SS_COMPOSE_NORM_BEFORE)) {
		const ss_state_dims *dm = &c->acc.dims;
		size_t llen = (size_t)dm->nheads * (size_t)dm->headdim * (size_t)dm->d_state;
		if (len != in->want[1])
			return ss_errf(errmsg, SS_ERR_INVALID, "input %zu: norm before needs the ssm in one piece",
				       in->k);
		if (!(lscale = malloc((size_t)dm->n_layer * sizeof *lscale)))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		src_arr xs = input_arr(c, in, 1, p, 0);
		for (size_t l = 0; l < (size_t)dm->n_layer; l++) {
			double nrm = norm2(xs, l * llen, llen);
			lscale[l] = nrm > 0 ? 1 / nrm : 1;
		}
	}
	add_range(c, in, which, input_arr(c, in, which, p, e0), e0, n, lscale);
	free(lscale);
	in->fed[which] += len;
	return 0;
}

int ss_composer_fold_input(const ss_composer *c, ss_compose_input *in, int which, uint64_t off, const void *p,
			   size_t len, char *errmsg)
{
	return fold(c, in, which, off, p, len, 1, errmsg);
}

int ss_composer_begin(ss_composer *c, const ss_state *meta, char *errmsg)
{
	return ss_composer_begin_input(c, &c->in, meta, errmsg);
}

int ss_composer_fold(ss_composer *c, int which, uint64_t off, const void *p, size_t len, char *errmsg)
{
	int rc = c->failed ? ss_errf(errmsg, SS_ERR_INVALID, "composer: a piece after an error")
			   : fold(c, &c->in, which, off, p, len, 0, errmsg);
	return rc ? fail(c, rc) : 0;
}

int ss_composer_end(ss_composer *c, char *errmsg)
{
	if (c->failed) {
		ss_errf(errmsg, 0, "composer: end after an error");
		return SS_ERR_INVALID;
	}
	return ss_composer_end_input(c, &c->in, errmsg);
}


/* The longest composed id written whole, and the longest piece of a first or
 * last source id in a bounded one (bytes). */
#define ID_WHOLE_MAX 160
#define ID_PIECE_MAX 48

/* Appends id to p, cut to at most ID_PIECE_MAX bytes at a UTF-8 character
 * boundary, with "…" when cut. Returns the end. */
static char *put_piece(char *p, const char *id)
{
	size_t n = strlen(id);
	if (n <= ID_PIECE_MAX)
		return p + sprintf(p, "%s", id);
	n = ID_PIECE_MAX;
	while (n > 0 && ((unsigned char)id[n] & 0xC0) == 0x80)
		n--;
	memcpy(p, id, n);
	return p + n + sprintf(p + n, "\u2026");
}

/* "mode(id0,id1,...)" while that is at most ID_WHOLE_MAX bytes, else
 * "mode(N states: FIRST … LAST)" with FIRST and LAST cut to ID_PIECE_MAX
 * bytes: an id a line can show; the full list is the provenance's sources. */
static char *make_id(const char *mode, char *const *ids, size_t n)
{
	size_t len = strlen(mode) + 3;
	for (size_t k = 0; k < n; k++)
		len += strlen(ids[k]) + 1;
	if (len - 1 > ID_WHOLE_MAX && n >= 2) {
		char *s = malloc(strlen(mode) + 2 * ID_PIECE_MAX + 64), *p = s;
		if (!s)
			return NULL;
		p += sprintf(p, "%s(%zu states: ", mode, n);
		p = put_piece(p, ids[0]);
		p += sprintf(p, " \u2026 ");
		p = put_piece(p, ids[n - 1]);
		strcpy(p, ")");
		return s;
	}
	char *s = malloc(len), *p = s;
	if (!s)
		return NULL;
	p += sprintf(p, "%s(", mode);
	for (size_t k = 0; k < n; k++)
		p += sprintf(p, "%s%s", k ? "," : "", ids[k]);
	strcpy(p, ")");
	return s;
}

/* The result's metadata into c->acc: logdecay, weights, mode, id (once
 * every input has begun; their arrays need not be folded yet). */
static int finish_meta(ss_composer *c, char *errmsg)
{
	size_t n = c->begun, H = c->n_head;
	ss_state *r = &c->acc;
	/* logdecay: see ss_compose.h for why each. */
	for (size_t h = 0; h < H; h++) {
		double v;
		if (c->o.mode <= SS_COMPOSE_PICASO_R) {
			v = 0;
			for (size_t k = 0; k < n; k++)
				v += c->decay[k * H + h];
		} else {
			double mx = -INFINITY;
			for (size_t k = 0; k < n; k++)
				if (c->decay[k * H + h] > mx)
					mx = c->decay[k * H + h];
			if (mx == -INFINITY) {
				v = mx;
			} else {
				double s = 0;
				for (size_t k = 0; k < n; k++)
					s += exp(c->decay[k * H + h] - mx);
				v = mx + log(s / (double)n);
				if (v > 0)
					v = 0;
			}
		}
		r->logdecay[h] = (float)v;
	}

	if (c->o.mode != SS_COMPOSE_MAX) {
		r->weights = malloc(H * n * sizeof *r->weights);
		double *w = c->w;
		if (r->weights && !w) {
			w = malloc(H * n * sizeof *w);
			if (w && ss_compose_weights(c->o.mode, n, H, c->decay, w, errmsg) != 0) {
				free(w);
				return fail(c, SS_ERR_INVALID);
			}
		}
		if (!r->weights || !w) {
			if (w != c->w)
				free(w);
			ss_errf(errmsg, 0, "out of memory");
			return fail(c, SS_ERR_NOMEM);
		}
		for (size_t i = 0; i < H * n; i++)
			r->weights[i] = (float)w[i];
		if (w != c->w)
			free(w);
	}
	const char *mname = ss_compose_mode_name(c->o.mode);
	r->mode = strdup(mname);
	r->id = make_id(mname, c->ids, n);
	if (!r->mode || !r->id) {
		ss_errf(errmsg, 0, "out of memory");
		return fail(c, SS_ERR_NOMEM);
	}
	c->meta_done = 1;
	return 0;
}

/* Elements [c->final[which], end) of conv (which 0) or ssm (1) as the
 * result has them: soup's mean, conv's mean. Elementwise. */
void ss_composer_finish_range(ss_composer *c, int which, size_t end)
{
	size_t f = c->final[which], n = c->begun;
	if (end <= f)
		return;
	if (n > 1 && which == 1 && c->o.mode == SS_COMPOSE_SOUP)
		k_div(c->acc.ssm + f, (float)n, end - f);
	if (n > 1 && which == 0 && c->o.conv == SS_COMPOSE_CONV_MEAN)
		k_div(c->acc.conv + f, (float)n, end - f);
	c->final[which] = end;
}

int ss_composer_result(ss_composer *c, ss_state *view, char *errmsg)
{
	memset(view, 0, sizeof *view);
	if (c->failed || c->finished || !c->have_acc || (c->n_plan && c->begun != c->n_plan) ||
	    c->o.norm)
		return ss_errf(errmsg, SS_ERR_INVALID, "composer: no result before every input has begun, "
						       "nor with a norm");
	int rc = c->meta_done ? 0 : finish_meta(c, errmsg);
	if (rc)
		return rc;
	*view = c->acc;
	view->sources = c->ids;
	view->n_sources = (int32_t)c->begun;
	view->n_tokens = c->n_tokens;
	view->dtype = SS_DTYPE_F32;
	view->has_rank = 0;
	return 0;
}

int ss_composer_finish(ss_composer *c, ss_state *out, char *errmsg)
{
	memset(out, 0, sizeof *out);
	if (c->failed || c->finished) {
		ss_errf(errmsg, 0, "composer: finish after an error or finish");
		return SS_ERR_INVALID;
	}
	if (c->n_open) {
		ss_errf(errmsg, 0, "input %zu: its arrays were not all added", c->n);
		return fail(c, SS_ERR_INVALID);
	}
	if (c->n == 0) {
		ss_errf(errmsg, 0, "no input states");
		return fail(c, SS_ERR_INVALID);
	}
	if (c->n_plan && c->n != c->n_plan) {
		ss_errf(errmsg, 0, "%zu inputs, %zu planned", c->n, c->n_plan);
		return fail(c, SS_ERR_INVALID);
	}
	ss_state *r = &c->acc;
	const ss_state_dims *dm = &r->dims;
	size_t llen = (size_t)dm->nheads * dm->headdim * dm->d_state;
	ss_composer_finish_range(c, 1, ss_state_ssm_len(dm));
	ss_composer_finish_range(c, 0, ss_state_conv_len(dm));
	if (c->o.norm & SS_COMPOSE_NORM_AFTER)
		for (size_t l = 0; l < (size_t)dm->n_layer; l++) {
			float *yl = r->ssm + l * llen;
			double nrm = sqrt(k_sumsq(yl, llen));
			if (nrm > 0)
				k_mul(yl, (float)(1 / nrm), llen);
		}
	int rc = c->meta_done ? 0 : finish_meta(c, errmsg);
	if (rc)
		return rc;
	r->sources = c->ids;
	r->n_sources = (int32_t)c->n;
	c->ids = NULL;
	c->cap = 0;
	r->n_tokens = c->n_tokens;
	r->dtype = SS_DTYPE_F32;
	r->has_rank = 0;
	*out = *r;
	memset(r, 0, sizeof *r);
	c->have_acc = 0;
	c->finished = 1;
	return 0;
}

void ss_composer_free(ss_composer *c)
{
	if (!c)
		return;
	if (c->have_acc)
		ss_state_free(&c->acc);
	if (c->ids) /* and the inputs begun but not ended (an error in their pieces) */
		for (size_t k = 0; k < c->begun; k++)
			free(c->ids[k]);
	free(c->ids);
	free(c->decay);
	free(c->w);
	free(c->plan_decay);
	input_clear(&c->in);
	free(c);
}

int ss_compose(const ss_compose_opts *o, const ss_state *const *in, size_t n, ss_state *out,
	       char *errmsg)
{
	memset(out, 0, sizeof *out);
	ss_composer *c = NULL;
	float *a = NULL;
	size_t H = n ? ss_state_logdecay_len(&in[0]->dims) : 0;
	int rc = 0;
	if (o && (unsigned)o->mode < SS_COMPOSE_N_MODES && ss_compose_modes[o->mode].needs_plan && n > 0) {
		if (!(a = malloc(n * H * sizeof *a)))
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		for (size_t k = 0; !rc && k < n; k++)
			if (ss_state_logdecay_len(&in[k]->dims) != H || !in[k]->logdecay)
				rc = ss_errf(errmsg, SS_ERR_MISMATCH, "input %zu: dims differ from input 0", k);
			else
				memcpy(a + k * H, in[k]->logdecay, H * sizeof *a);
	}
	if (!rc)
		rc = ss_composer_new(&c, o, n, H, a, errmsg);
	free(a);
	if (!rc && n == 0)
		rc = ss_errf(errmsg, SS_ERR_INVALID, "no input states");
	/* each state whole, its arrays in f32 whatever its storage dtype says,
	 * not checked finite (a state in memory holds what it holds) */
	for (size_t k = 0; !rc && k < n; k++) {
		const ss_state *x = in[k];
		if (!x || !x->ssm || !x->conv) {
			rc = fail(c, ss_errf(errmsg, SS_ERR_INVALID, "input %zu: state without ssm, conv or logdecay", k));
			break;
		}
		ss_state m = *x;
		m.dtype = SS_DTYPE_F32;
		m.shuffle = 0;
		if (!(rc = ss_composer_begin(c, &m, errmsg)) &&
		    !(rc = ss_composer_fold(c, 1, 0, x->ssm, ss_state_ssm_len(&x->dims) * sizeof(float), errmsg)) &&
		    !(rc = ss_composer_fold(c, 0, 0, x->conv, ss_state_conv_len(&x->dims) * sizeof(float), errmsg)))
			rc = ss_composer_end(c, errmsg);
	}
	if (!rc)
		rc = ss_composer_finish(c, out, errmsg);
	ss_composer_free(c);
	return rc;
}
