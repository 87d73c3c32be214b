/*
 * rerank.h — the second stage of retrieval that ss-retrieve query --rerank
 * and ss-eval recall --rerank share: BM25's top N documents, each scored by
 * the model from its own stored state (the query, in a prompt template,
 * prefilled from that state as one batch of N), and ordered by that score.
 * The model math is libss's (ss_eval_nll, ss_eval_entropy); this file holds
 * the template, the query's tokens, the order and the index's states.
 * Every function reports through cli.h.
 *
 * Scores (higher = more relevant), template P{query}S, P, the query and S
 * tokenized separately and concatenated (as ss-score does):
 *   ll       the log-likelihood (nats, summed) of the query's and S's tokens
 *            after P, from the document's state: how well the state
 *            predicts the query. P must give at least one token (the first
 *            query token is predicted from P's last; a state has no logits).
 *   entropy  minus the entropy (nats) of the next token after P{query}S:
 *            how sure the state makes the model of what follows.
 * ref: PICASO's Leave-One-In attribution (picaso.txt Appendix C): the
 * likelihood one passage's state gives; query likelihood ranking (Ponte &
 * Croft, SIGIR 1998) with the state as the document's model.
 */
#ifndef SS_RERANK_H
#define SS_RERANK_H

#include "ss.h"

/* The default template: the query on a line of its own after the document
 * (documents end with a newline; the blank line it makes is where the
 * recall model was taught to recall). */
#define RERANK_TEMPLATE "\n{query}"

typedef enum { RERANK_LL, RERANK_ENTROPY } rerank_kind;

/* --rerank N, --rerank-score, --rerank-template. */
typedef struct {
	int n;            /* candidates scored: 0 = no reranking */
	rerank_kind kind; /* default RERANK_LL */
	const char *tmpl; /* NULL: RERANK_TEMPLATE */
} rerank_opts;

/* Option `which` of RERANK_OPTS into o: 0 --rerank N (1..100000), 1
 * --rerank-score (ll or entropy), 2 --rerank-template ("{query}" exactly
 * once); anything else is a usage error naming the option. */
enum { RERANK_OPT_N, RERANK_OPT_SCORE, RERANK_OPT_TEMPLATE };
void rerank_parse_opt(rerank_opts *o, int which, const char *arg, const char *usage);

typedef struct {
	rerank_opts o;
	const ss_model *m;
	ss_tokenizer *tok; /* borrowed */
	ss_eval_scorer *sc;
	int32_t *pre, *post; /* the template's tokens before and after {query} */
	int64_t npre, npost;
	int strip_quotes;  /* the query's double quotes are syntax, not text */
	double secs;       /* spent in rerank_score (tokenizing and scoring) */
	long n_queries;
} reranker;

/* A reranker of model m (with its lm_head) on forward context ctx (both
 * borrowed) for o->n candidates, tokenizing with tok (borrowed).
 * strip_quotes: leave the query's '"' out of the text scored (phrase
 * syntax). Dies: a template whose text before {query} has no token (for ll),
 * out of memory. */
void rerank_init(reranker *r, const rerank_opts *o, ss_forward_ctx *ctx, const ss_model *m,
		 ss_tokenizer *tok, int strip_quotes, const char *usage);
void rerank_free(reranker *r);

/* scores[i] = the score of query from state st[i] (f32 arrays, m's dims;
 * st NULL: the scorer's working states, ss_eval_scorer_states(r->sc), which
 * the call changes), i < n <= o->n, in one batch. Returns 0, or an SS_ERR_* with errmsg (a
 * query without a token, an id outside the model's vocabulary, the
 * scorer's errors). */
int rerank_score(reranker *r, const char *query, const ss_state *const *st, int n, double *scores,
		 char *errmsg);

/* order[0..n): 0..n-1 by scores descending, ties by index (the first
 * stage's order); NaN never happens (rerank_score refuses it). */
void rerank_order(const double *scores, int n, int *order);

/* Stateless hits' states for rerank_hits: st[i] of h[i], i < n (the
 * function checks them and reports its own errors). Returns 0 or 1. */
typedef int (*rerank_recompute_fn)(void *ctx, const char *label, const ss_index_hit *const *h, int n,
				   ss_state *st);

/* Reranks index hits h[0..n) (the first stage's, best first) of query:
 * each stored state read from its file (its fingerprint must be the
 * model's), each stateless one from recompute; all scored as one batch
 * (rerank_score). On return h[0..min(n, k)) are the best by the score,
 * ranks 1.., rerank_scores[i] h[i]'s; the other hits are cleared
 * (ss_index_hit_clear): free with ss_index_hits_free(h, the return value).
 * label: "query ID: " or "". Returns min(n, k), or -1 after reporting the
 * error (naming db, the document and its file); h then is as it came. */
int rerank_hits(reranker *r, ss_index *ix, const char *db, const char *label, const char *query,
		ss_index_hit *h, int n, int k, rerank_recompute_fn recompute, void *ctx, double *rerank_scores);

#endif /* SS_RERANK_H */
