/*
 * eval_recall.c — ss-eval recall (issue 30): key-value recall through
 * composition. Each document of the corpus holds "key: value" lines; each
 * query names a key, the document that holds it (the gold) and distractors.
 * For each k of --ks the gold and k - 1 distractors are composed by each
 * method with the gold at a chosen position, and the value is read back:
 * exact match under greedy decoding and mean NLL. See eval_run.h and
 * man/ss-eval.1.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <string.h>

#include "defaults.h"
#include "eval_run.h"
#include "model_cli.h"

/* One query of the recall JSONL, tokenized. */
typedef struct {
	char *id;
	char *key;      /* the query of --retrieve; NULL without it */
	char where[64]; /* "line N" */
	int32_t *q, *c; /* query and continuation tokens */
	int64_t nq, nc;
	char **chunks;  /* [n_chunks] document ids, the gold first */
	int n_chunks;
	int gold_pos;   /* in [0, n_chunks) */
} rc_query;

const char *const eval_retriever_names[EVAL_N_RETRIEVERS] = { "bm25", "phrase", "and", "proximity", "rerank" };

/* Contexts: the query file's chunks, and the top k of the key by each
 * retriever r (context 1 + r). */
enum { CTX_ORACLE, N_CTX = 1 + EVAL_N_RETRIEVERS };
/* Context c's name in the table: "oracle", or its retriever's. */
static const char *ctx_name(int c)
{
	return c == CTX_ORACLE ? "oracle" : eval_retriever_names[c - 1];
}
/* Each retriever's ss_index_set_query flags, and whether its query is the
 * key in quotes. rerank: bm25's top --rerank N, reranked (rerank.h). */
static const unsigned retriever_flags[EVAL_N_RETRIEVERS] = {
	SS_INDEX_QUERY_PHRASES, SS_INDEX_QUERY_PHRASES, SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_ALL,
	SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_PROXIMITY, SS_INDEX_QUERY_PHRASES
};
static const int retriever_quotes[EVAL_N_RETRIEVERS] = { 0, 1, 0, 0, 0 };

/* A string member of o, or NULL when absent; dies on another type. */
static const char *str_member(const mcli_jsonl *r, const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!v)
		return NULL;
	if (!cJSON_IsString(v) || !v->valuestring[0])
		cli_die("%s: \"%s\" must be a non-empty string", r->where, name);
	return v->valuestring;
}

/* The chunks of o into *it: an array of distinct non-empty ids, each in
 * the index, at least kmax of them. */
static void read_chunks(const eval_run *run, ss_index *ix, const mcli_jsonl *r, const cJSON *o,
			long kmax, rc_query *it)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "chunks");
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1)
		cli_die("%s: \"chunks\" must be a non-empty array of document ids", r->where);
	it->n_chunks = cJSON_GetArraySize(a);
	if (it->n_chunks < kmax)
		cli_die("%s: %d chunks, fewer than k = %ld (--ks)", r->where, it->n_chunks, kmax);
	it->chunks = xcalloc((size_t)it->n_chunks, sizeof *it->chunks);
	int i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, a) {
		if (!cJSON_IsString(e) || !e->valuestring[0])
			cli_die("%s: chunk %d is not a non-empty string", r->where, i);
		for (int j = 0; j < i; j++)
			if (!strcmp(it->chunks[j], e->valuestring))
				cli_die("%s: chunk %s given twice", r->where, e->valuestring);
		char err[SS_ERRMSG_MAX] = "";
		ss_index_hit hit;
		int rc = ss_index_lookup(ix, e->valuestring, &hit, err);
		if (rc == SS_ERR_NOTFOUND)
			cli_die("%s: chunk %s is not in index %s", r->where, e->valuestring, run->index);
		if (rc)
			cli_die("%s: %s", run->index, err);
		ss_index_hit_clear(&hit);
		if (!(it->chunks[i++] = strdup(e->valuestring)))
			cli_die("out of memory");
	}
}

/* The queries of --qa (at most --queries), checked and tokenized. */
static rc_query *rc_read(const eval_run *run, ss_tokenizer *tok, ss_index *ix, size_t *n)
{
	const long kmax = run->ks[run->n_ks - 1];
	static const char *const keys[] = { "id", "key", "query", "continuation", "chunks", "gold", "gold_pos",
					    NULL };
	mcli_jsonl r;
	mcli_jsonl_open(&r, run->qa);
	rc_query *items = NULL;
	size_t cap = 0;
	*n = 0;
	cJSON *o;
	while ((!run->queries || (long)*n < run->queries) &&
	       (o = mcli_jsonl_next(&r, "{\"id\", \"key\", \"query\", \"continuation\", \"chunks\", "
				    "\"gold_pos\"}", keys))) {
		items = mcli_grow(items, *n, &cap, sizeof *items);
		rc_query *it = &items[*n];
		*it = (rc_query){ .id = mcli_jsonl_id(&r, o) };
		snprintf(it->where, sizeof it->where, "line %ld", r.lineno);
		const char *q = str_member(&r, o, "query"), *c = str_member(&r, o, "continuation");
		const char *key = str_member(&r, o, "key"), *gold = str_member(&r, o, "gold");
		if (!q || !c)
			cli_die("%s: a query needs \"query\" and \"continuation\"", r.where);
		if (run->retrieve && !key)
			cli_die("%s: --retrieve needs the query's \"key\"", r.where);
		read_chunks(run, ix, &r, o, kmax, it);
		if (gold && strcmp(gold, it->chunks[0]))
			cli_die("%s: \"gold\" %s is not the first of \"chunks\" (%s)", r.where, gold,
				it->chunks[0]);
		const cJSON *gp = cJSON_GetObjectItemCaseSensitive(o, "gold_pos");
		if (!cJSON_IsNumber(gp) || gp->valuedouble != floor(gp->valuedouble) ||
		    gp->valuedouble < 0 || gp->valuedouble >= it->n_chunks)
			cli_die("%s: \"gold_pos\" must be an integer in [0, %d)", r.where, it->n_chunks);
		it->gold_pos = (int)gp->valuedouble;
		if (key && !(it->key = strdup(key)))
			cli_die("out of memory");
		it->q = encode_text(run, tok, q, &it->nq, it->where);
		it->c = encode_text(run, tok, c, &it->nc, it->where);
		if (it->nq < 1 || it->nc < 1)
			cli_die("%s: the query or the continuation has no token", r.where);
		cJSON_Delete(o);
		++*n;
	}
	mcli_jsonl_close(&r);
	return items;
}

static void rc_query_free(rc_query *it)
{
	for (int i = 0; i < it->n_chunks; i++)
		free(it->chunks[i]);
	free(it->chunks);
	free(it->id);
	free(it->key);
	free(it->q);
	free(it->c);
}

/* One document read from the index: its stored state and its tokens. */
typedef struct {
	ss_state st;
	int32_t *tok; /* NULL when the index keeps none (then n 0) */
	int64_t n;
} rc_doc;

/* Reads document hit->id's state and tokens into *d. need_tokens: concat
 * or piconcat-r is among the methods (they re-encode the tokens). */
static void rc_doc_load(const eval_run *run, ss_index *ix, const ss_index_hit *hit,
			int need_tokens, rc_doc *d)
{
	char err[SS_ERRMSG_MAX] = "", shown[4096]; /* a URL's credentials never printed */
	const ss_record *rec;
	if (ss_index_read(ix, hit, 0, &rec, err))
		cli_die("%s: %s", hit->path ? ss_url_redact(hit->path, shown, sizeof shown) : run->index, err);
	if (ss_record_state(rec, &d->st, err))
		cli_die("%s: document %s at byte offset %" PRIu64 ": %s", ss_url_redact(hit->path, shown, sizeof shown),
			hit->id, hit->offset, err);
	if (ss_index_tokens(ix, hit->id, &d->tok, &d->n, err))
		cli_die("%s: %s", run->index, err);
	if (need_tokens && (!d->tok || d->n != d->st.n_tokens))
		cli_die("%s: document %s: %s (concat and piconcat-r re-encode them)", run->index,
			hit->id, d->tok ? "its tokens are not the ones its state was encoded from"
					: "no tokens stored (an index built before they were kept)");
}

static void rc_doc_free(rc_doc *d)
{
	ss_state_free(&d->st);
	free(d->tok);
}

/* The sums per (context, k, position slot, method) and one query's
 * scratch. Slot 0 is pos "all", slot 1 + p the gold at position p; the
 * counts and recall do not depend on the method. */
typedef struct {
	int M, n_ks, S; /* S = slots = max k + 1 */
	double *em, *nll, *t; /* [N_CTX][n_ks][S][M] */
	double *recall;       /* [N_CTX][n_ks][S] */
	long *cnt;            /* [N_CTX][n_ks][S] */
	int need_tokens;
	rc_doc *docs;         /* [max k] this query's chunks or hits */
	ss_eval_doc *order;   /* [max k] one context's documents in concatenation order */
	ss_state *ctxs;       /* [M] */
	const ss_state **starts; /* [M] the distinct ones, to score */
	double *secs, *nll1, *unll; /* [M] per method; per distinct state */
	int *em1, *uem, *src; /* [M] per method; per distinct state; see rc_score */
	/* The distinct states of the query's first context (its smallest k:
	 * naive's zero state, at k = 1 the gold's own) and their scores, for
	 * the later contexts of the query: copies, [0..n_cache). */
	ss_state *cache;      /* [M] */
	double *cache_nll;    /* [M] */
	int *cache_em;        /* [M] */
	int n_cache, fill_cache;
	reranker rk;          /* the rerank retriever's (run->rr.n > 0) */
	const ss_state **rst; /* [rerank N] its candidates' states */
	double *rsc;          /* [rerank N] their scores */
	int *rord;            /* [rerank N] their order */
} rc_work;

static size_t cell(const rc_work *w, int c, int ki, int slot)
{
	return ((size_t)c * w->n_ks + ki) * w->S + slot;
}

static void rc_work_init(rc_work *w, const eval_run *run)
{
	const int M = run->n_methods, K = (int)run->ks[run->n_ks - 1];
	const int ND = run->rr.n > K ? run->rr.n : K; /* documents read for one context */
	*w = (rc_work){ .M = M, .n_ks = run->n_ks, .S = K + 1 };
	size_t cells = (size_t)N_CTX * w->n_ks * w->S;
	w->em = xcalloc(cells * M, sizeof *w->em);
	w->nll = xcalloc(cells * M, sizeof *w->nll);
	w->t = xcalloc(cells * M, sizeof *w->t);
	w->recall = xcalloc(cells, sizeof *w->recall);
	w->cnt = xcalloc(cells, sizeof *w->cnt);
	for (int j = 0; j < M; j++)
		w->need_tokens |= run->methods[j] == SS_EVAL_CONCAT ||
				  run->methods[j] == SS_EVAL_PICONCAT_R;
	w->docs = xcalloc((size_t)ND, sizeof *w->docs);
	w->rst = xcalloc((size_t)ND, sizeof *w->rst);
	w->rsc = xcalloc((size_t)ND, sizeof *w->rsc);
	w->rord = xcalloc((size_t)ND, sizeof *w->rord);
	w->order = xcalloc((size_t)K, sizeof *w->order);
	w->ctxs = xcalloc((size_t)M, sizeof *w->ctxs);
	w->starts = xcalloc((size_t)M, sizeof *w->starts);
	w->secs = xcalloc((size_t)M, sizeof *w->secs);
	w->nll1 = xcalloc((size_t)M, sizeof *w->nll1);
	w->unll = xcalloc((size_t)M, sizeof *w->unll);
	w->em1 = xcalloc((size_t)M, sizeof *w->em1);
	w->uem = xcalloc((size_t)M, sizeof *w->uem);
	w->src = xcalloc((size_t)M, sizeof *w->src);
	w->cache = xcalloc((size_t)M, sizeof *w->cache);
	w->cache_nll = xcalloc((size_t)M, sizeof *w->cache_nll);
	w->cache_em = xcalloc((size_t)M, sizeof *w->cache_em);
}

/* Empties the cache of scored states (at the end of a query). */
static void rc_cache_clear(rc_work *w)
{
	for (int e = 0; e < w->n_cache; e++)
		ss_state_free(&w->cache[e]);
	w->n_cache = 0;
}

static void rc_work_free(rc_work *w)
{
	free(w->em);
	free(w->nll);
	free(w->t);
	free(w->recall);
	free(w->cnt);
	free(w->docs);
	free(w->order);
	free(w->ctxs);
	free(w->starts);
	free(w->secs);
	free(w->nll1);
	free(w->unll);
	free(w->em1);
	free(w->uem);
	free(w->src);
	free(w->cache);
	free(w->cache_nll);
	free(w->cache_em);
	free(w->rst);
	free(w->rsc);
	free(w->rord);
}

/* Scores each distinct context state w->ctxs[0..M) once, as one batch,
 * into w->nll1 and w->em1, the others taking the scores of their identical
 * earlier state (of this context or of the cache). */
static void rc_score(const eval_run *run, ss_eval_scorer *sc, const rc_query *it, const char *what,
		     rc_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	const int M = w->M;
	int nu = eval_distinct_states(w->ctxs, M, w->cache, (size_t)w->n_cache, w->src, w->starts);
	if (nu && ss_eval_nll(sc, w->starts, (size_t)nu, it->q, it->nq, it->c, it->nc, w->unll,
			      w->uem, err))
		cli_die("%s: %s (%s), %s: %s", run->qa, it->where, it->id, what, err);
	for (int j = 0, u = 0; j < M; j++) {
		int s = w->src[j];
		if (s >= 0) {
			w->nll1[j] = w->nll1[s];
			w->em1[j] = w->em1[s];
		} else if (s < -1) {
			w->nll1[j] = w->cache_nll[-2 - s];
			w->em1[j] = w->cache_em[-2 - s];
		} else {
			w->nll1[j] = w->unll[u];
			w->em1[j] = w->uem[u++];
			if (w->fill_cache) {
				if (ss_state_copy(&w->cache[w->n_cache], &w->ctxs[j]))
					cli_die("out of memory");
				w->cache_nll[w->n_cache] = w->nll1[j];
				w->cache_em[w->n_cache++] = w->em1[j];
			}
		}
	}
	w->fill_cache = 0;
}

/* One context of n documents (w->order[0..n), gold at position gold, -1
 * when absent): each method's context state, timed, then the continuation
 * scored from all of them as one batch; adds to the sums of (c, ki) and
 * writes the --per-query rows. */
static void rc_context(const eval_run *run, ss_eval_scorer *sc, const rc_query *it, int c,
		       int ki, int n, int gold, rc_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	const int k = (int)run->ks[ki];
	for (int j = 0; j < w->M; j++) {
		double t0 = cli_now();
		if (ss_eval_context(run->fctx, run->model, (ss_eval_method)run->methods[j], w->order,
				    (size_t)n, &w->ctxs[j], err))
			cli_die("%s: %s (%s), %s k %d, %s: %s", run->qa, it->where, it->id,
				ctx_name(c), k, method_name(run, j), err);
		w->secs[j] = cli_now() - t0;
	}
	char what[64];
	snprintf(what, sizeof what, "%s k %d", ctx_name(c), k);
	rc_score(run, sc, it, what, w);
	/* oracle: pos all and the gold's position; bm25: pos all only */
	const int slots[2] = { 0, c == CTX_ORACLE ? 1 + gold : -1 };
	for (int s = 0; s < 2 && slots[s] >= 0; s++) {
		size_t at = cell(w, c, ki, slots[s]);
		w->cnt[at]++;
		w->recall[at] += gold >= 0;
		for (int j = 0; j < w->M; j++) {
			w->em[at * w->M + j] += w->em1[j];
			w->nll[at * w->M + j] += w->nll1[j];
			w->t[at * w->M + j] += w->secs[j];
		}
	}
	for (int j = 0; j < w->M; j++) {
		if (run->per_out)
			fprintf(run->per_out, "%s\t%s\t%d\t%d\t%s\t%d\t%.9g\t%.6f\n", it->id,
				ctx_name(c), k, gold, method_name(run, j), w->em1[j], w->nll1[j],
				w->secs[j] * 1e3);
		ss_state_free(&w->ctxs[j]);
	}
}

/* The oracle contexts of one query: its first max-k chunks read once, and
 * for each k the gold at gold_pos mod k, chunks 1..k-1 around it in order. */
static void rc_oracle(const eval_run *run, ss_index *ix, ss_eval_scorer *sc, const rc_query *it,
		      rc_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	const int K = (int)run->ks[run->n_ks - 1];
	for (int i = 0; i < K; i++) {
		ss_index_hit hit;
		if (ss_index_lookup(ix, it->chunks[i], &hit, err))
			cli_die("%s: %s", run->index, err);
		rc_doc_load(run, ix, &hit, w->need_tokens, &w->docs[i]);
		ss_index_hit_clear(&hit);
	}
	for (int ki = 0; ki < run->n_ks; ki++) {
		const int k = (int)run->ks[ki], gold = it->gold_pos % k;
		for (int p = 0, next = 1; p < k; p++) {
			const rc_doc *d = &w->docs[p == gold ? 0 : next++];
			w->order[p] = (ss_eval_doc){ &d->st, d->tok, d->n };
		}
		rc_context(run, sc, it, CTX_ORACLE, ki, k, gold, w);
	}
	for (int i = 0; i < K; i++)
		rc_doc_free(&w->docs[i]);
}

/* The rerank retriever's second stage: hits[0..nh) and their documents
 * w->docs reordered by the model's score of the key from each state. */
static void rc_rerank(const eval_run *run, const rc_query *it, ss_index_hit *hits, int nh, rc_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	for (int h = 0; h < nh; h++)
		w->rst[h] = &w->docs[h].st;
	if (rerank_score(&w->rk, it->key, w->rst, nh, w->rsc, err))
		cli_die("%s: %s (%s), rerank: %s", run->qa, it->where, it->id, err);
	rerank_order(w->rsc, nh, w->rord);
	ss_index_hit *th = xcalloc((size_t)nh, sizeof *th);
	rc_doc *td = xcalloc((size_t)nh, sizeof *td);
	memcpy(th, hits, (size_t)nh * sizeof *th);
	memcpy(td, w->docs, (size_t)nh * sizeof *td);
	for (int h = 0; h < nh; h++) {
		hits[h] = th[w->rord[h]];
		w->docs[h] = td[w->rord[h]];
	}
	free(th);
	free(td);
}

/* The contexts of retriever r for one query: the top max-k documents for
 * its key (rerank: of bm25's top N, reranked), and for each k the best
 * min(k, found) of them, the most relevant last. */
static void rc_retrieved(const eval_run *run, ss_index *ix, ss_eval_scorer *sc, const rc_query *it, int r,
			 rc_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	const int K = (int)run->ks[run->n_ks - 1];
	ss_index_hit *hits = NULL;
	char *q = NULL;
	if (retriever_quotes[r] && asprintf(&q, "\"%s\"", it->key) < 0)
		cli_die("out of memory");
	if (ss_index_set_query(ix, retriever_flags[r], err))
		cli_die("%s: %s", run->index, err);
	int nh = ss_index_query(ix, q ? q : it->key, r == EVAL_R_RERANK ? run->rr.n : K, NULL, 0, &hits, err);
	free(q);
	if (nh == SS_ERR_INVALID)
		nh = 0; /* a key without a word (or with a quote of its own): no documents */
	else if (nh < 0)
		cli_die("%s: %s (%s): %s", run->index, it->where, it->id, err);
	for (int h = 0; h < nh; h++)
		rc_doc_load(run, ix, &hits[h], w->need_tokens, &w->docs[h]);
	if (r == EVAL_R_RERANK && nh > 0)
		rc_rerank(run, it, hits, nh, w);
	for (int ki = 0; ki < run->n_ks; ki++) {
		const int n = (int)run->ks[ki] < nh ? (int)run->ks[ki] : nh;
		int gold = -1;
		for (int p = 0; p < n; p++) {
			const rc_doc *d = &w->docs[n - 1 - p];
			w->order[p] = (ss_eval_doc){ &d->st, d->tok, d->n };
			if (!strcmp(hits[n - 1 - p].id, it->chunks[0]))
				gold = p;
		}
		rc_context(run, sc, it, 1 + r, ki, n, gold, w);
	}
	for (int h = 0; h < nh; h++)
		rc_doc_free(&w->docs[h]);
	ss_index_hits_free(hits, nh);
}

/* (a - b) / (c - b), NaN when a reference is missing or c = b; + 0.0
 * prints a = b as 0, not -0. */
static double share(double a, double b, double c, int have)
{
	return have && c != b ? (a - b) / (c - b) + 0.0 : NAN;
}

/* The TSV: context, method, k, pos, n, em, mean_nll, em_share, nll_share,
 * recall, mean_time_ms. */
static void rc_write(const eval_run *run, const rc_work *w)
{
	int jn = -1, jc = -1;
	for (int j = 0; j < w->M; j++) {
		if (run->methods[j] == SS_EVAL_NAIVE)
			jn = j;
		if (run->methods[j] == SS_EVAL_CONCAT)
			jc = j;
	}
	FILE *f = cli_out_open(run->out);
	fputs("context\tmethod\tk\tpos\tn\tem\tmean_nll\tem_share\tnll_share\trecall\t"
	      "mean_time_ms\n", f);
	for (int c = 0; c < N_CTX; c++)
		for (int j = 0; j < w->M; j++)
			for (int ki = 0; ki < w->n_ks; ki++)
				for (int s = 0; s <= (c == CTX_ORACLE ? run->ks[ki] : 0); s++) {
					size_t at = cell(w, c, ki, s);
					long n = w->cnt[at];
					if (!n)
						continue;
					const double *em = w->em + at * w->M, *nll = w->nll + at * w->M;
					char pos[16] = "all";
					if (s)
						snprintf(pos, sizeof pos, "%d", s - 1);
					fprintf(f, "%s\t%s\t%ld\t%s\t%ld\t%.6f\t%.8f\t%.6f\t%.6f\t%.6f\t%.6f\n",
						ctx_name(c), method_name(run, j), run->ks[ki], pos, n,
						em[j] / n, nll[j] / n,
						share(em[j], em[jn < 0 ? 0 : jn], em[jc < 0 ? 0 : jc],
						      jn >= 0 && jc >= 0),
						share(nll[j], nll[jn < 0 ? 0 : jn], nll[jc < 0 ? 0 : jc],
						      jn >= 0 && jc >= 0),
						w->recall[at] / n, w->t[at * w->M + j] / n * 1e3);
				}
	cli_out_close(f);
}

void eval_recall(eval_run *run)
{
	double t_start = cli_now();
	/* Every query frees its documents' states and loads others: glibc would
	 * hand those (> 128 KiB) blocks back to the kernel and fault them in
	 * again, and the first context built after the loads (the oracle's)
	 * would be timed with those page faults (0.6 ms of a 0.7 ms picaso-r
	 * at k = 4 on the recall model). Keep freed memory in the heap. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	cli_progress_begin();
	ss_index *ix = eval_index_open(run);
	ss_tokenizer *tok = cli_tokenizer(run->mo.tokenizer, run->model_dir);
	size_t nq;
	rc_query *items = rc_read(run, tok, ix, &nq);
	if (nq == 0)
		cli_die("%s: no query", run->qa);
	ss_eval_scorer *sc;
	if (ss_eval_scorer_init(&sc, run->fctx, run->model, run->n_methods))
		cli_die("out of memory");
	/* EM is greedy decoding as ss-decode(1) does it: among the ids the
	 * tokenizer can print. */
	int32_t n_gen = mcli_gen_vocab(run->model, tok);
	if (ss_eval_scorer_set_vocab(sc, n_gen))
		cli_die("the tokenizer's vocabulary (%d ids) is not the model's", (int)n_gen);
	rc_work w;
	rc_work_init(&w, run);
	if (run->rr.n)
		rerank_init(&w.rk, &run->rr, run->fctx, run->model, tok, 0, run->usage);
	for (size_t i = 0; i < nq; i++) {
		w.fill_cache = 1;
		rc_oracle(run, ix, sc, &items[i], &w);
		for (int r = 0; r < EVAL_N_RETRIEVERS; r++)
			if (run->retrieve & 1u << r)
				rc_retrieved(run, ix, sc, &items[i], r, &w);
		rc_cache_clear(&w);
		rc_query_free(&items[i]);
		cli_progress_of((double)(i + 1), (double)nq, "%zu/%zu queries, %.2f queries/s", i + 1, nq,
				(double)(i + 1) / (cli_now() - t_start));
	}
	cli_progress_end();
	rc_write(run, &w);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu queries, k = %ld..%ld (%d values), %d methods%s, %.1f s\n",
			nq, run->ks[0], run->ks[run->n_ks - 1], run->n_ks, run->n_methods,
			run->retrieve ? ", oracle and retrieved contexts" : "", cli_now() - t_start);
	if (run->rr.n && cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: rerank of %d candidates: %.3f ms a query\n", run->rr.n,
			w.rk.n_queries ? w.rk.secs / (double)w.rk.n_queries * 1e3 : 0.0);
	if (run->rr.n)
		rerank_free(&w.rk);
	rc_work_free(&w);
	free(items);
	ss_eval_scorer_free(sc);
	ss_tokenizer_free(tok);
	ss_index_close(ix);
}
