/*
 * rerank.c — reranking retrieved documents by their stored states: see
 * rerank.h.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rerank.h"

void rerank_parse_opt(rerank_opts *o, int which, const char *arg, const char *usage)
{
	const char *p = strstr(arg, "{query}");
	switch (which) {
	case RERANK_OPT_N: o->n = (int)cli_long("--rerank", arg, 1, 100000, usage); break;
	case RERANK_OPT_SCORE:
		if (strcmp(arg, "ll") && strcmp(arg, "entropy"))
			cli_usage(usage, "--rerank-score: '%s' is neither ll nor entropy", arg);
		o->kind = strcmp(arg, "ll") ? RERANK_ENTROPY : RERANK_LL;
		break;
	case RERANK_OPT_TEMPLATE:
		if (!p || strstr(p + 1, "{query}"))
			cli_usage(usage, "--rerank-template: '{query}' must appear exactly once");
		o->tmpl = arg;
		break;
	}
}

/* The tokens of s[0..len) into *ids (malloc'd, *n of them; NULL when
 * none). Returns 0 or the tokenizer's error. */
static int tokens_of(ss_tokenizer *tok, const char *s, size_t len, int32_t **ids, int64_t *n, char *errmsg)
{
	size_t k = 0;
	*ids = NULL;
	*n = 0;
	int rc = len ? ss_tokenizer_encode(tok, s, len, ids, &k, errmsg) : 0;
	*n = rc ? 0 : (int64_t)k;
	return rc;
}

void rerank_init(reranker *r, const rerank_opts *o, ss_forward_ctx *ctx, const ss_model *m,
		 ss_tokenizer *tok, int strip_quotes, const char *usage)
{
	char em[SS_ERRMSG_MAX] = "";
	*r = (reranker){ .o = *o, .m = m, .tok = tok, .strip_quotes = strip_quotes };
	const char *t = o->tmpl ? o->tmpl : RERANK_TEMPLATE, *at = strstr(t, "{query}");
	if (tokens_of(tok, t, (size_t)(at - t), &r->pre, &r->npre, em) ||
	    tokens_of(tok, at + 7, strlen(at + 7), &r->post, &r->npost, em))
		cli_die("--rerank-template: %s", em);
	if (o->kind == RERANK_LL && r->npre < 1)
		cli_usage(usage, "--rerank-template: no text before {query}: with --rerank-score ll its "
			  "first token needs one to be predicted from");
	if (ss_eval_scorer_init(&r->sc, ctx, m, o->n))
		cli_die("out of memory");
}

void rerank_free(reranker *r)
{
	ss_eval_scorer_free(r->sc);
	free(r->pre);
	free(r->post);
}

int rerank_score(reranker *r, const char *query, const ss_state *const *st, int n, double *scores,
		 char *errmsg)
{
	double t0 = cli_now();
	size_t len = strlen(query);
	char *text = malloc(len + 1);
	if (!text)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	size_t tl = 0;
	for (size_t i = 0; i < len; i++)
		if (!(r->strip_quotes && query[i] == '"'))
			text[tl++] = query[i];
	int64_t nq;
	int32_t *q;
	int rc = tokens_of(r->tok, text, tl, &q, &nq, errmsg);
	free(text);
	if (rc)
		return rc;
	if (nq == 0) {
		free(q);
		return ss_errf(errmsg, SS_ERR_INVALID, "the query has no token to score");
	}
	/* [pre | query | post]: ll scores what follows pre, entropy what
	 * follows the whole. */
	int64_t all = r->npre + nq + r->npost;
	int32_t *seq = malloc((size_t)all * sizeof *seq);
	double *v = malloc((size_t)n * sizeof *v);
	rc = seq && v ? 0 : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (!rc) {
		if (r->npre) /* an empty part's pointer may be NULL, which memcpy must not get */
			memcpy(seq, r->pre, (size_t)r->npre * sizeof *seq);
		memcpy(seq + r->npre, q, (size_t)nq * sizeof *seq);
		if (r->npost)
			memcpy(seq + r->npre + nq, r->post, (size_t)r->npost * sizeof *seq);
		int32_t V = r->m->cfg.vocab_padded;
		for (int64_t i = 0; i < all && !rc; i++)
			if (seq[i] < 0 || seq[i] >= V)
				rc = ss_errf(errmsg, SS_ERR_INVALID, "token %" PRId32 " of the query is outside the "
					     "model's vocabulary (%" PRId32 ")", seq[i], V);
	}
	if (!rc && r->o.kind == RERANK_LL) {
		rc = ss_eval_nll(r->sc, st, (size_t)n, seq, r->npre, seq + r->npre, nq + r->npost, v, NULL,
				 errmsg);
		for (int i = 0; i < n && !rc; i++)
			scores[i] = -v[i] * (double)(nq + r->npost);
	} else if (!rc) {
		rc = ss_eval_entropy(r->sc, st, (size_t)n, seq, all, v, errmsg);
		for (int i = 0; i < n && !rc; i++)
			scores[i] = -v[i];
	}
	free(v);
	free(seq);
	free(q);
	r->secs += cli_now() - t0;
	r->n_queries++;
	return rc;
}

void rerank_order(const double *scores, int n, int *order)
{
	/* insertion sort: n is a handful of candidates, and it is stable */
	for (int i = 0; i < n; i++) {
		int j = i;
		while (j > 0 && scores[order[j - 1]] < scores[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
}

int rerank_hits(reranker *r, ss_index *ix, const char *db, const char *label, const char *query,
		ss_index_hit *h, int n, int k, rerank_recompute_fn recompute, void *ctx, double *rerank_scores)
{
	char em[SS_ERRMSG_MAX] = "";
	if (n <= 0)
		return 0;
	/* The candidates' states are read straight into the scorer's working
	 * states, their arrays kept from query to query. */
	ss_state *st = ss_eval_scorer_states(r->sc);
	const ss_index_hit **stateless = calloc((size_t)n, sizeof *stateless);
	ss_state *rst = calloc((size_t)n, sizeof *rst);
	double *sc = calloc((size_t)n, sizeof *sc);
	int *order = calloc((size_t)n, sizeof *order);
	ss_index_hit *tmp = calloc((size_t)n, sizeof *tmp);
	if (!stateless || !rst || !sc || !order || !tmp)
		cli_die("out of memory");
	int bad = 0, ns = 0, nr = 0;
	for (int i = 0; i < n && !bad; i++) {
		if (h[i].stateless) {
			stateless[ns++] = &h[i];
			continue;
		}
		if (strcmp(h[i].fingerprint, r->m->fingerprint)) {
			cli_warn("%s%s: document %s: its state is of model %s, the --model is %s", label, db, h[i].id,
				 h[i].fingerprint, r->m->fingerprint);
			bad = 1;
		} else if (ss_index_read_state(ix, &h[i], &st[i], em)) {
			char shown[4096]; /* a URL's credentials and query string never printed */
			cli_warn("%s%s: %s: %s", label, db, ss_url_redact(h[i].path, shown, sizeof shown), em);
			bad = 1;
		}
	}
	if (!bad && ns && !(bad = recompute(ctx, label, stateless, ns, rst)))
		nr = ns;
	for (int i = 0, j = 0; i < n && !bad; i++)
		if (h[i].stateless) { /* moved in */
			ss_state_free(&st[i]);
			st[i] = rst[j];
			memset(&rst[j++], 0, sizeof *rst);
		}
	if (!bad && rerank_score(r, query, NULL, n, sc, em)) {
		cli_warn("%s%s: --rerank: %s", label, db, em);
		bad = 1;
	}
	int keep = n < k ? n : k;
	if (!bad) {
		rerank_order(sc, n, order);
		memcpy(tmp, h, (size_t)n * sizeof *h);
		for (int i = 0; i < n; i++) {
			h[i] = tmp[order[i]];
			h[i].rank = i + 1;
			if (i < keep)
				rerank_scores[i] = sc[order[i]];
			else
				ss_index_hit_clear(&h[i]);
		}
	}
	for (int i = 0; i < nr; i++)
		ss_state_free(&rst[i]);
	free(stateless);
	free(rst);
	free(sc);
	free(order);
	free(tmp);
	return bad ? -1 : keep;
}
