/*
 * eval.c — context states of the evaluation methods (naive, concat,
 * compositions, piconcat-r) and the continuation NLL from a state and a
 * query. Contracts in ss_eval.h. ref: picaso.txt §6.1-6.2, Appendix B.1, C.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "ss_eval.h"

static const char *const method_names[SS_EVAL_N_METHODS] = {
	"naive", "concat", "soup", "caso", "picaso-s", "picaso-r", "piconcat-r", "soup-sum", "soup-max",
};

/* The soups with a norm: [pool][norm - 1], pool 0 soup, 1 soup-sum, 2 soup-max. */
static const char *const soup_norm_names[3][3] = {
	{ "soup:before", "soup:after", "soup:both" },
	{ "soup-sum:before", "soup-sum:after", "soup-sum:both" },
	{ "soup-max:before", "soup-max:after", "soup-max:both" },
};

/* 0, 1, 2 for soup, soup-sum, soup-max; -1 for the other methods. */
static int soup_pool(unsigned base)
{
	return base == SS_EVAL_SOUP ? 0 : base == SS_EVAL_SOUP_SUM ? 1 : base == SS_EVAL_SOUP_MAX ? 2 : -1;
}

const char *ss_eval_method_name(ss_eval_method m)
{
	unsigned base = (unsigned)m & 0xff, norm = (unsigned)m >> 8;
	if ((unsigned)m >> 10 || base >= SS_EVAL_N_METHODS)
		return NULL;
	if (!norm)
		return method_names[base];
	return soup_pool(base) < 0 ? NULL : soup_norm_names[soup_pool(base)][norm - 1];
}

int ss_eval_method_parse(const char *s, ss_eval_method *out)
{
	for (unsigned i = 0; s && i < SS_EVAL_N_METHODS; i++)
		for (unsigned norm = 0; norm < 4; norm++) {
			const char *name = ss_eval_method_name((ss_eval_method)(i | norm << 8));
			if (name && !strcmp(s, name)) {
				*out = (ss_eval_method)(i | norm << 8);
				return 0;
			}
		}
	return SS_ERR_INVALID;
}

#define ERR(...) do { if (errmsg) snprintf(errmsg, SS_ERRMSG_MAX, __VA_ARGS__); } while (0)

int ss_eval_zero_state(const ss_model *m, ss_state *out)
{
	ss_state_dims d;
	ss_model_state_dims(m, &d);
	int rc = ss_state_alloc(out, &d);
	if (rc)
		return rc;
	memcpy(out->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX);
	if (!(out->id = strdup("zero"))) {
		ss_state_free(out);
		return SS_ERR_NOMEM;
	}
	return 0;
}

/* "concat(a,b,...)" from the documents' ids (NULL ids as "?"); NULL on OOM. */
static char *concat_id(const char *what, const ss_eval_doc *docs, size_t n)
{
	size_t len = strlen(what) + 3;
	for (size_t i = 0; i < n; i++)
		len += strlen(docs[i].state->id ? docs[i].state->id : "?") + 1;
	char *s = malloc(len), *p = s;
	if (!s)
		return NULL;
	p += sprintf(p, "%s(", what);
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%s", i ? "," : "", docs[i].state->id ? docs[i].state->id : "?");
	strcpy(p, ")");
	return s;
}

/* Concatenates the tokens of docs[(r+1) mod n], ..., docs[(r+n-1) mod n]
 * (every document after r in cyclic order) into buf. Returns the count. */
static int64_t gather_tokens(const ss_eval_doc *docs, size_t n, size_t r, int32_t *buf)
{
	int64_t t = 0;
	for (size_t j = 1; j < n; j++) {
		const ss_eval_doc *d = &docs[(r + j) % n];
		if (d->n_tokens > 0)
			memcpy(buf + t, d->tokens, (size_t)d->n_tokens * sizeof *buf);
		t += d->n_tokens;
	}
	return t;
}

/* Concat (n_rot = 1: only the rotation starting at document 0) or
 * piconcat-r (n_rot = n: every rotation, then their mean). */
static int rotations(ss_forward_ctx *ctx, ss_eval_method meth, const ss_eval_doc *docs, size_t n,
		     ss_state *out, char *errmsg)
{
	size_t n_rot = meth == SS_EVAL_CONCAT ? 1 : n;
	int64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += docs[i].n_tokens;
	ss_state *st = calloc(n_rot, sizeof *st);
	ss_forward_seq *seqs = calloc(n_rot, sizeof *seqs);
	int32_t *buf = malloc((size_t)(total > 0 ? total : 1) * n_rot * sizeof *buf);
	int rc = SS_ERR_NOMEM;
	size_t made = 0;
	if (!st || !seqs || !buf)
		goto done;
	for (; made < n_rot; made++) {
		if ((rc = ss_state_copy(&st[made], docs[made].state)))
			goto done;
		int32_t *tk = buf + (size_t)total * made;
		seqs[made] = (ss_forward_seq){ .tokens = tk, .state = &st[made],
					       .n_tokens = gather_tokens(docs, n, made, tk) };
	}
	if ((rc = ss_forward_prefill(ctx, seqs, (int)n_rot, SS_LOGITS_NONE, errmsg)))
		goto done;
	if (n_rot == 1) {
		*out = st[0];
		made = 0;
		if (!(out->id = concat_id("concat", docs, n))) {
			ss_state_free(out);
			rc = SS_ERR_NOMEM;
		}
		goto done;
	}
	/* The cyclic concatenations all have the decay Σ a_i, so soup's
	 * log(mean d) is that sum too: the soup of them is their plain mean. */
	const ss_state **in = malloc(n_rot * sizeof *in);
	if (!in) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	for (size_t i = 0; i < n_rot; i++)
		in[i] = &st[i];
	ss_compose_opts o = { .mode = SS_COMPOSE_SOUP };
	rc = ss_compose(&o, in, n_rot, out, errmsg);
	free(in);
	if (!rc) {
		free(out->id);
		if (!(out->id = concat_id("piconcat-r", docs, n))) {
			ss_state_free(out);
			rc = SS_ERR_NOMEM;
		}
	}
done:
	for (size_t i = 0; i < made; i++)
		ss_state_free(&st[i]);
	free(st);
	free(seqs);
	free(buf);
	return rc;
}

int ss_eval_context(ss_forward_ctx *ctx, const ss_model *m, ss_eval_method meth,
		    const ss_eval_doc *docs, size_t n, ss_state *out, char *errmsg)
{
	if (!m || !out || (n && !docs) || !ss_eval_method_name(meth)) {
		ERR("ss_eval_context: invalid argument");
		return SS_ERR_INVALID;
	}
	memset(out, 0, sizeof *out);
	ss_state_dims dims;
	ss_model_state_dims(m, &dims);
	for (size_t i = 0; i < n; i++) {
		const ss_state *s = docs[i].state;
		if (!s || !s->ssm || !s->conv || !s->logdecay) {
			ERR("document %zu: no state", i);
			return SS_ERR_INVALID;
		}
		char why[SS_ERRMSG_MAX];
		if (ss_state_dims_check(&s->dims, &dims, why)) {
			ERR("document %zu: state dims differ from the model's (%.200s)", i, why);
			return SS_ERR_MISMATCH;
		}
		if (strncmp(s->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX)) {
			ERR("document %zu (%s): state of model %.64s, not %.64s", i,
			    s->id ? s->id : "?", s->fingerprint, m->fingerprint);
			return SS_ERR_MISMATCH;
		}
		if ((meth == SS_EVAL_CONCAT || meth == SS_EVAL_PICONCAT_R) && n > 1 &&
		    (docs[i].n_tokens < 0 || (docs[i].n_tokens > 0 && !docs[i].tokens))) {
			ERR("document %zu: no tokens", i);
			return SS_ERR_INVALID;
		}
	}
	if (meth == SS_EVAL_NAIVE || n == 0)
		return ss_eval_zero_state(m, out);
	if (meth == SS_EVAL_CONCAT || meth == SS_EVAL_PICONCAT_R) {
		if (!ctx) {
			ERR("concat and piconcat-r need a forward context");
			return SS_ERR_INVALID;
		}
		return rotations(ctx, meth, docs, n, out, errmsg);
	}
	static const ss_compose_mode cmode[SS_EVAL_N_METHODS] = {
		[SS_EVAL_SOUP] = SS_COMPOSE_SOUP,
		[SS_EVAL_CASO] = SS_COMPOSE_CASO,
		[SS_EVAL_PICASO_S] = SS_COMPOSE_PICASO_S,
		[SS_EVAL_PICASO_R] = SS_COMPOSE_PICASO_R,
		[SS_EVAL_SOUP_SUM] = SS_COMPOSE_SUM,
		[SS_EVAL_SOUP_MAX] = SS_COMPOSE_MAX,
	};
	const ss_state *small[16];
	const ss_state **in = n <= 16 ? small : malloc(n * sizeof *in);
	if (!in)
		return SS_ERR_NOMEM;
	for (size_t i = 0; i < n; i++)
		in[i] = docs[i].state;
	/* SS_EVAL_NORM_BEFORE/AFTER are SS_COMPOSE_NORM_BEFORE/AFTER shifted by 8. */
	ss_compose_opts o = { .mode = cmode[meth & 0xff], .norm = (int)meth >> 8 };
	int rc = ss_compose(&o, in, n, out, errmsg);
	if (in != small)
		free(in);
	return rc;
}

/* ------------------------------------------------------------- scoring */

struct ss_eval_scorer {
	ss_forward_ctx *ctx;
	const ss_model *m;
	int max_seqs;
	int32_t n_vocab;    /* exact: greedy's ids are [0, n_vocab) */
	float *logits;      /* [max_seqs][SS_EVAL_ROWS][vocab_padded] */
	ss_state *st;       /* [max_seqs] working copies, kept from call to call */
	ss_forward_seq *seqs;
	double *sum;        /* [max_seqs] */
};

int ss_eval_scorer_init(ss_eval_scorer **out, ss_forward_ctx *ctx, const ss_model *m,
			int max_seqs)
{
	if (!out || !ctx || !m || max_seqs < 1)
		return SS_ERR_INVALID;
	ss_eval_scorer *sc = calloc(1, sizeof *sc);
	if (!sc)
		return SS_ERR_NOMEM;
	sc->ctx = ctx;
	sc->m = m;
	sc->max_seqs = max_seqs;
	sc->n_vocab = m->cfg.vocab_size;
	if (sc->n_vocab <= 0 || sc->n_vocab > m->cfg.vocab_padded)
		sc->n_vocab = (int32_t)m->cfg.vocab_padded;
	sc->logits = malloc((size_t)max_seqs * SS_EVAL_ROWS * (size_t)m->cfg.vocab_padded *
			    sizeof(float));
	sc->st = calloc((size_t)max_seqs, sizeof *sc->st);
	sc->seqs = calloc((size_t)max_seqs, sizeof *sc->seqs);
	sc->sum = calloc((size_t)max_seqs, sizeof *sc->sum);
	if (!sc->logits || !sc->st || !sc->seqs || !sc->sum) {
		ss_eval_scorer_free(sc);
		return SS_ERR_NOMEM;
	}
	*out = sc;
	return 0;
}

ss_state *ss_eval_scorer_states(ss_eval_scorer *sc)
{
	return sc ? sc->st : NULL;
}

int ss_eval_scorer_set_vocab(ss_eval_scorer *sc, int32_t n_vocab)
{
	if (!sc || n_vocab < 1 || n_vocab > sc->m->cfg.vocab_padded)
		return SS_ERR_INVALID;
	sc->n_vocab = n_vocab;
	return 0;
}

void ss_eval_scorer_free(ss_eval_scorer *sc)
{
	if (!sc)
		return;
	for (int i = 0; i < sc->max_seqs; i++)
		ss_state_free(&sc->st[i]);
	free(sc->logits);
	free(sc->st);
	free(sc->seqs);
	free(sc->sum);
	free(sc);
}

/* Scorer's working copy i of src: its arrays kept from the last call where
 * the dims are the same (fresh pages of a 130m state, 19 MB, cost more than
 * the copy into them). */
static int working_copy(ss_eval_scorer *sc, size_t i, const ss_state *src)
{
	ss_state *w = &sc->st[i];
	if (!src) /* the caller filled it (ss_eval_scorer_states) */
		return w->ssm && w->conv && w->logdecay ? 0 : SS_ERR_INVALID;
	if (w->ssm && !ss_state_dims_check(&w->dims, &src->dims, NULL)) {
		ss_state_copy_into(w, src);
		return 0;
	}
	ss_state_free(w);
	return ss_state_copy(w, src);
}

static const char *start_id(const ss_eval_scorer *sc, const ss_state *const *starts, size_t i)
{
	const char *id = starts ? starts[i]->id : sc->st[i].id;
	return id ? id : "";
}

int ss_eval_nll(ss_eval_scorer *sc, const ss_state *const *starts, size_t n, const int32_t *q,
		int64_t nq, const int32_t *c, int64_t nc, double *nll, int *exact, char *errmsg)
{
	if (!sc || !nll || n == 0 || n > (size_t)sc->max_seqs || nq < 1 || nc < 1 ||
	    !q || !c) {
		ERR("ss_eval_nll: need 1..%d states, a query and a continuation",
		    sc ? sc->max_seqs : 0);
		return SS_ERR_INVALID;
	}
	const int64_t V = sc->m->cfg.vocab_padded;
	for (int64_t j = 0; j < nc; j++)
		if (c[j] < 0 || c[j] >= V) {
			ERR("continuation token %lld is %d, outside [0, %lld)", (long long)j,
			    (int)c[j], (long long)V);
			return SS_ERR_INVALID;
		}
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if ((rc = working_copy(sc, i, starts ? starts[i] : NULL))) {
			if (!starts)
				ERR("start state %zu: the scorer's working state holds none", i);
			return rc;
		}
		sc->sum[i] = 0;
		if (exact)
			exact[i] = 1;
	}
	/* The query but its last token: state only. */
	for (size_t i = 0; i < n; i++)
		sc->seqs[i] = (ss_forward_seq){ .tokens = q, .n_tokens = nq - 1, .state = &sc->st[i] };
	if (nq > 1 && (rc = ss_forward_prefill(sc->ctx, sc->seqs, (int)n, SS_LOGITS_NONE, errmsg)))
		return rc;
	/* Then [q_last, c_0 .. c_{nc-2}]: row j predicts c_j. The rows are the
	 * same tokens for every state, so one buffer serves all sequences. */
	int32_t buf[SS_EVAL_ROWS];
	for (int64_t j0 = 0; j0 < nc; j0 += SS_EVAL_ROWS) {
		int64_t rows = nc - j0 < SS_EVAL_ROWS ? nc - j0 : SS_EVAL_ROWS;
		for (int64_t j = 0; j < rows; j++)
			buf[j] = j0 + j == 0 ? q[nq - 1] : c[j0 + j - 1];
		for (size_t i = 0; i < n; i++)
			sc->seqs[i] = (ss_forward_seq){
				.tokens = buf, .n_tokens = rows, .state = &sc->st[i],
				.logits = sc->logits + i * (size_t)SS_EVAL_ROWS * (size_t)V };
		if ((rc = ss_forward_prefill(sc->ctx, sc->seqs, (int)n, SS_LOGITS_ALL, errmsg)))
			return rc;
		for (size_t i = 0; i < n; i++)
			for (int64_t j = 0; j < rows; j++) {
				const float *row = sc->seqs[i].logits + (size_t)j * (size_t)V;
				sc->sum[i] += ss_nll(row, V, c[j0 + j]);
				if (exact && exact[i] && ss_argmax(row, sc->n_vocab) != c[j0 + j])
					exact[i] = 0;
			}
	}
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(sc->sum[i])) { /* no score: a state or model whose values overflow */
			ERR("start state %zu (id \"%.200s\"): the NLL is %g, not finite (the state's or the model's "
			    "values overflow)", i, start_id(sc, starts, i), isnan(sc->sum[i]) ? NAN : sc->sum[i]);
			return SS_ERR_INVALID;
		}
		nll[i] = sc->sum[i] / (double)nc;
	}
	return 0;
}

int ss_eval_entropy(ss_eval_scorer *sc, const ss_state *const *starts, size_t n, const int32_t *q,
		    int64_t nq, double *entropy, char *errmsg)
{
	if (!sc || !entropy || n == 0 || n > (size_t)sc->max_seqs || nq < 1 || !q) {
		ERR("ss_eval_entropy: need 1..%d states and a query", sc ? sc->max_seqs : 0);
		return SS_ERR_INVALID;
	}
	const int64_t V = sc->m->cfg.vocab_padded;
	int rc = 0;
	for (size_t i = 0; i < n; i++)
		if ((rc = working_copy(sc, i, starts ? starts[i] : NULL))) {
			if (!starts)
				ERR("start state %zu: the scorer's working state holds none", i);
			return rc;
		}
	for (size_t i = 0; i < n; i++)
		sc->seqs[i] = (ss_forward_seq){ .tokens = q, .n_tokens = nq, .state = &sc->st[i],
						.logits = sc->logits + i * (size_t)SS_EVAL_ROWS * (size_t)V };
	if ((rc = ss_forward_prefill(sc->ctx, sc->seqs, (int)n, SS_LOGITS_LAST, errmsg)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		/* H = lse - Σ p_v x_v, p_v = exp(x_v - lse), in double */
		const float *row = sc->seqs[i].logits;
		double lse = ss_logsumexp(row, V), px = 0;
		for (int64_t v = 0; v < V; v++)
			px += exp((double)row[v] - lse) * (double)row[v];
		entropy[i] = lse - px;
		if (!isfinite(entropy[i])) {
			ERR("start state %zu (id \"%.200s\"): the entropy is not finite (the state's or the "
			    "model's values overflow)", i, start_id(sc, starts, i));
			return SS_ERR_INVALID;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ ranking */

int ss_eval_rank(const int *rel, int n, int n_rel, ss_eval_ranking *out)
{
	if (!out || n < 0 || n_rel < 1 || (n && !rel))
		return SS_ERR_INVALID;
	memset(out, 0, sizeof *out);
	double dcg = 0, idcg = 0;
	int found = 0;
	for (int i = 0; i < n; i++) {
		if (!rel[i])
			continue;
		if (++found > n_rel)
			return SS_ERR_INVALID;
		out->recall_1 += i < 1;
		out->recall_5 += i < 5;
		out->recall_10 += i < 10;
		if (i < 10) {
			dcg += 1 / log2(i + 2.0);
			if (out->rr_10 == 0)
				out->rr_10 = 1.0 / (i + 1);
		}
	}
	for (int i = 0; i < n_rel && i < 10; i++)
		idcg += 1 / log2(i + 2.0);
	out->recall_1 /= n_rel;
	out->recall_5 /= n_rel;
	out->recall_10 /= n_rel;
	out->ndcg_10 = dcg / idcg;
	return 0;
}
