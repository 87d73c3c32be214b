/*
 * eval_attribution.c — the MS MARCO protocols of ss-eval: attribution
 * (PICASO Appendix C, Table 4): for each query pick the passage the answer
 * depends on, by Leave-One-In and by Leave-One-Out per method; msmarco
 * (Table 1 row 1): the answer's NLL from all the query's passages composed
 * by each method. See eval_run.h and man/ss-eval.1.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "defaults.h"
#include "eval_run.h"
#include "model_cli.h"

#define NO_ANSWER "No Answer Present."

/* One MS MARCO query kept for attribution. */
typedef struct {
	char *id;
	int n;               /* passages */
	int32_t **ptok;      /* [n] passage tokens */
	int64_t *np;         /* [n] */
	int *selected;       /* [n] 0/1 */
	int32_t *q, *a;      /* query (templated) and answer tokens */
	int64_t nq, na;
} qa_item;

/* ss_index_files: the outputs (ctx: the eval_run) against one state file */
static int outs_not_state(void *ctx, const char *path)
{
	const eval_run *run = ctx;
	cli_out_not_input(run->out, path);
	cli_out_not_input(run->per, path);
	cli_out_not_input(run->summary, path);
	return 0;
}

ss_index *eval_index_open(const eval_run *run)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_index *ix;
	if (ss_index_open_shards(&ix, (const char *const *)run->indexes, run->n_indexes, err)) {
		if (run->n_indexes == 1)
			cli_die("%s: %s", run->index, err);
		cli_die("%s", err); /* names the shard */
	}
	if (ss_index_files(ix, outs_not_state, (void *)run, err))
		cli_die("%s: %s", run->index, err);
	return ix;
}

int32_t *encode_text(const eval_run *run, ss_tokenizer *tok, const char *s, int64_t *n,
		     const char *where)
{
	char err[SS_ERRMSG_MAX] = "";
	int32_t *ids;
	size_t k;
	if (ss_tokenizer_encode(tok, s, strlen(s), &ids, &k, err))
		cli_die("%s: %s: %s", run->qa, where, err);
	int32_t v = mcli_vocab(run->model);
	for (size_t i = 0; i < k; i++)
		if (ids[i] >= v)
			cli_die("%s: %s: token %d outside the model's vocabulary", run->qa, where,
				ids[i]);
	*n = (int64_t)k;
	return ids;
}

/* Tokenizes entry e's passages, query and answer into *it. The query as the
 * model reads it after the passages: "\n\nQuestion: Q\nAnswer:"; the answer
 * continues it as " A". */
static void qa_encode(const eval_run *run, ss_tokenizer *tok, const cJSON *e, size_t idx,
		      const char *where, qa_item *it)
{
	const cJSON *qs = cJSON_GetObjectItemCaseSensitive(e, "query");
	const cJSON *pass = cJSON_GetObjectItemCaseSensitive(e, "passages");
	const cJSON *sel = cJSON_GetObjectItemCaseSensitive(pass, "is_selected");
	const cJSON *txt = cJSON_GetObjectItemCaseSensitive(pass, "passage_text");
	const cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "answers"), 0);
	const cJSON *qid = cJSON_GetObjectItemCaseSensitive(e, "query_id");
	if ((cJSON_IsNumber(qid) ? asprintf(&it->id, "%.0f", qid->valuedouble)
				 : asprintf(&it->id, "%zu", idx)) < 0)
		cli_die("out of memory");
	int np = it->n = cJSON_GetArraySize(txt);
	it->ptok = xcalloc((size_t)np, sizeof *it->ptok);
	it->np = xcalloc((size_t)np, sizeof *it->np);
	it->selected = xcalloc((size_t)np, sizeof *it->selected);
	for (int i = 0; i < np; i++) {
		const cJSON *t = cJSON_GetArrayItem(txt, i), *si = cJSON_GetArrayItem(sel, i);
		if (!cJSON_IsString(t))
			cli_die("%s: %s: passage %d is not a string", run->qa, where, i);
		it->ptok[i] = encode_text(run, tok, t->valuestring, &it->np[i], where);
		it->selected[i] = cJSON_IsNumber(si) && si->valuedouble != 0;
	}
	char *q, *a;
	if (asprintf(&q, "\n\nQuestion: %s\nAnswer:", qs->valuestring) < 0 ||
	    asprintf(&a, " %s", a0->valuestring) < 0)
		cli_die("out of memory");
	it->q = encode_text(run, tok, q, &it->nq, where);
	it->a = encode_text(run, tok, a, &it->na, where);
	free(q);
	free(a);
}

/* Whether entry e is kept: an MS MARCO v1.1 entry (dies otherwise) with an
 * answer, at least min_pass passages and a selected one (exactly one with
 * --exactly-one). */
static int qa_wanted(const eval_run *run, const cJSON *e, int min_pass, const char *where)
{
	const cJSON *qs = cJSON_GetObjectItemCaseSensitive(e, "query");
	const cJSON *pass = cJSON_GetObjectItemCaseSensitive(e, "passages");
	const cJSON *sel = cJSON_GetObjectItemCaseSensitive(pass, "is_selected");
	const cJSON *txt = cJSON_GetObjectItemCaseSensitive(pass, "passage_text");
	const cJSON *ans = cJSON_GetObjectItemCaseSensitive(e, "answers");
	if (!cJSON_IsString(qs) || !cJSON_IsArray(sel) || !cJSON_IsArray(txt) ||
	    cJSON_GetArraySize(sel) != cJSON_GetArraySize(txt))
		cli_die("%s: %s: not an MS MARCO v1.1 entry (query, passages.is_selected, "
			"passages.passage_text)", run->qa, where);
	const cJSON *a0 = cJSON_IsArray(ans) ? cJSON_GetArrayItem(ans, 0) : NULL;
	int np = cJSON_GetArraySize(txt), nsel = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, sel) nsel += cJSON_IsNumber(s) && s->valuedouble != 0;
	return cJSON_IsString(a0) && a0->valuestring[0] && strcmp(a0->valuestring, NO_ANSWER) &&
	       np >= min_pass && nsel > 0 && (!run->exactly_one || nsel == 1);
}

/* The queries of --qa kept (at least min_pass passages; at most --queries),
 * tokenized with the model's tokenizer; *n_total: the entries read,
 * *max_pass: the most passages of one. Dies when none is kept. */
static qa_item *read_qa(const eval_run *run, int min_pass, size_t *n_items, size_t *n_total, int *max_pass)
{
	ss_tokenizer *tok = cli_tokenizer(run->mo.tokenizer, run->model_dir);
	size_t len;
	char *buf = mcli_read_file(run->qa, &len);
	cJSON *root = cJSON_ParseWithLength(buf, len);
	if (!cJSON_IsArray(root))
		cli_die("%s: not a JSON array of MS MARCO queries", run->qa);
	if (ss_json_has_nul(buf, len)) /* cJSON would cut the text short silently */
		cli_die("%s: a NUL character (\\u0000) in a string", run->qa);
	qa_item *items = xcalloc((size_t)cJSON_GetArraySize(root), sizeof *items);
	size_t n = 0, idx = 0;
	*max_pass = 1;
	const cJSON *e;
	cJSON_ArrayForEach(e, root) {
		idx++;
		if (run->queries && (long)n >= run->queries)
			break;
		char where[128];
		snprintf(where, sizeof where, "query %zu", idx);
		if (!qa_wanted(run, e, min_pass, where))
			continue;
		qa_item *it = &items[n++];
		qa_encode(run, tok, e, idx, where, it);
		if (it->n > *max_pass)
			*max_pass = it->n;
	}
	if (n == 0)
		cli_die("%s: no query with an answer and a selected passage", run->qa);
	*n_total = idx;
	cJSON_Delete(root);
	free(buf);
	ss_tokenizer_free(tok);
	*n_items = n;
	return items;
}

static void qa_free(qa_item *it)
{
	for (int i = 0; i < it->n; i++)
		free(it->ptok[i]);
	free(it->ptok);
	free(it->np);
	free(it->selected);
	free(it->q);
	free(it->a);
	free(it->id);
}

/* What the attribution loop keeps: the counts per row (0 loi, 1 + j loo
 * with method j), and the scratch of one query (up to maxp passages). */
typedef struct {
	int M;
	long *correct;          /* [M + 1] */
	double *time_s;         /* [M + 1] */
	double chance;
	ss_state *pst, *ctxs;   /* [maxp] the passages' states; the contexts without one */
	ss_forward_seq *seqs;   /* [maxp] */
	ss_eval_doc *docs, *rest; /* [maxp] all passages; all but one */
	const ss_state **starts; /* [maxp] */
	double *nll;            /* [maxp] */
} attr_work;

static void attr_work_init(attr_work *w, int M, int maxp)
{
	*w = (attr_work){ .M = M };
	w->correct = xcalloc((size_t)M + 1, sizeof(long));
	w->time_s = xcalloc((size_t)M + 1, sizeof(double));
	w->pst = xcalloc((size_t)maxp, sizeof *w->pst);
	w->ctxs = xcalloc((size_t)maxp, sizeof *w->ctxs);
	w->seqs = xcalloc((size_t)maxp, sizeof *w->seqs);
	w->docs = xcalloc((size_t)maxp, sizeof *w->docs);
	w->rest = xcalloc((size_t)maxp, sizeof *w->rest);
	w->starts = xcalloc((size_t)maxp, sizeof *w->starts);
	w->nll = xcalloc((size_t)maxp, sizeof *w->nll);
}

static void attr_work_free(attr_work *w)
{
	free(w->correct);
	free(w->time_s);
	free(w->pst);
	free(w->ctxs);
	free(w->seqs);
	free(w->docs);
	free(w->rest);
	free(w->starts);
	free(w->nll);
}

/* The passages' states, from zero, in one batch, into w->pst (and w->docs,
 * w->starts pointing at them). */
static void attr_prefill(const eval_run *run, const qa_item *it, attr_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	for (int i = 0; i < it->n; i++) {
		if (ss_eval_zero_state(run->model, &w->pst[i]))
			cli_die("out of memory");
		free(w->pst[i].id);
		if (asprintf(&w->pst[i].id, "%s#%d", it->id, i) < 0)
			cli_die("out of memory");
		w->seqs[i] = (ss_forward_seq){ .tokens = it->ptok[i], .n_tokens = it->np[i],
					       .state = &w->pst[i] };
		w->docs[i] = (ss_eval_doc){ &w->pst[i], it->ptok[i], it->np[i] };
		w->starts[i] = &w->pst[i];
	}
	if (ss_forward_prefill(run->fctx, w->seqs, it->n, SS_LOGITS_NONE, err))
		cli_die("%s: query %s: %s", run->qa, it->id, err);
}

/* The answer's NLL from each of w->starts[0..n); returns the passage with
 * the lowest (most = 0) or the highest (most = 1). */
static int attr_pick(const eval_run *run, ss_eval_scorer *sc, const qa_item *it, int most,
		     attr_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	if (ss_eval_nll(sc, w->starts, (size_t)it->n, it->q, it->nq, it->a, it->na, w->nll, NULL,
			err))
		cli_die("%s: query %s: %s", run->qa, it->id, err);
	int pick = 0;
	for (int i = 1; i < it->n; i++)
		if (most ? w->nll[i] > w->nll[pick] : w->nll[i] < w->nll[pick])
			pick = i;
	return pick;
}

/* Leave-One-Out with method j: the passage whose removal hurts the answer
 * most (argmax of L(S_-i); L(S) is the same for every i). Timed: the n
 * contexts and their scoring. */
static int attr_loo(const eval_run *run, ss_eval_scorer *sc, const qa_item *it, int j,
		    attr_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	int n = it->n;
	double t0 = cli_now();
	for (int i = 0; i < n; i++) {
		int r = 0;
		for (int o = 0; o < n; o++)
			if (o != i)
				w->rest[r++] = w->docs[o];
		if (ss_eval_context(run->fctx, run->model, (ss_eval_method)run->methods[j], w->rest,
				    (size_t)r, &w->ctxs[i], err))
			cli_die("%s: query %s, %s: %s", run->qa, it->id, method_name(run, j), err);
	}
	for (int i = 0; i < n; i++)
		w->starts[i] = &w->ctxs[i];
	int pick = attr_pick(run, sc, it, 1, w);
	w->time_s[1 + j] += cli_now() - t0;
	for (int i = 0; i < n; i++)
		ss_state_free(&w->ctxs[i]);
	return pick;
}

/* One query: Leave-One-In (the passage whose state alone explains the
 * answer best), then Leave-One-Out per method. */
static void attr_query(const eval_run *run, ss_eval_scorer *sc, const qa_item *it,
		       attr_work *w)
{
	int n = it->n, nsel = 0;
	for (int i = 0; i < n; i++)
		nsel += it->selected[i];
	w->chance += (double)nsel / n;
	attr_prefill(run, it, w);
	double t0 = cli_now(); /* the passages' states are the database's: not timed */
	int pick = attr_pick(run, sc, it, 0, w);
	w->time_s[0] += cli_now() - t0;
	w->correct[0] += it->selected[pick];
	if (run->per_out)
		fprintf(run->per_out, "%s\tloi\t%d\t%d\t%d\n", it->id, pick, it->selected[pick], n);
	for (int j = 0; j < w->M; j++) {
		pick = attr_loo(run, sc, it, j, w);
		w->correct[1 + j] += it->selected[pick];
		if (run->per_out)
			fprintf(run->per_out, "%s\tloo-%s\t%d\t%d\t%d\n", it->id, method_name(run, j),
				pick, it->selected[pick], n);
	}
	for (int i = 0; i < n; i++)
		ss_state_free(&w->pst[i]);
}

/* The TSV: method, n, correct, precision, mean_time_ms. */
static void attr_write(const eval_run *run, const attr_work *w, size_t nq)
{
	FILE *f = cli_out_open(run->out);
	fputs("method\tn\tcorrect\tprecision\tmean_time_ms\n", f);
	fprintf(f, "chance\t%zu\t%.1f\t%.4f\t0\n", nq, w->chance, w->chance / (double)nq);
	fprintf(f, "loi\t%zu\t%ld\t%.4f\t%.6f\n", nq, w->correct[0], (double)w->correct[0] / (double)nq,
		w->time_s[0] / (double)nq * 1e3);
	for (int j = 0; j < w->M; j++)
		fprintf(f, "loo-%s\t%zu\t%ld\t%.4f\t%.6f\n", method_name(run, j), nq,
			w->correct[1 + j], (double)w->correct[1 + j] / (double)nq,
			w->time_s[1 + j] / (double)nq * 1e3);
	cli_out_close(f);
}

void eval_attribution(eval_run *run)
{
	double t_start = cli_now();
	cli_progress_begin();
	size_t nq, n_total;
	int maxp;
	qa_item *items = read_qa(run, 2, &nq, &n_total, &maxp);
	for (int j = 0; j < run->n_methods; j++)
		if (run->methods[j] == SS_EVAL_NAIVE)
			cli_usage(run->usage, "attribution: naive has no documents to leave out");

	ss_eval_scorer *sc;
	if (ss_eval_scorer_init(&sc, run->fctx, run->model, maxp))
		cli_die("out of memory");
	attr_work w;
	attr_work_init(&w, run->n_methods, maxp);
	for (size_t qi = 0; qi < nq; qi++) {
		attr_query(run, sc, &items[qi], &w);
		qa_free(&items[qi]);
		cli_progress_of((double)(qi + 1), (double)nq, "%zu/%zu queries, %.2f queries/s", qi + 1, nq,
				(double)(qi + 1) / (cli_now() - t_start));
	}
	cli_progress_end();
	attr_write(run, &w, nq);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu of %zu queries, %d methods, %.1f s\n", nq, n_total,
			run->n_methods, cli_now() - t_start);
	free(items);
	attr_work_free(&w);
	ss_eval_scorer_free(sc);
}


/* ------------------------------------------------------------- msmarco */

/* Per method: sums of the answer NLL, the context time and the scoring
 * time over the queries. */
typedef struct {
	double *nll, *time_s, *infer_s; /* [M] */
} msm_sums;

/* One query: every method's context from all the passages (sample order),
 * timed; then the answer scored from each, as one batch. */
static void msm_query(const eval_run *run, ss_eval_scorer *sc, const qa_item *it, attr_work *w,
		      msm_sums *sum)
{
	char err[SS_ERRMSG_MAX] = "";
	const int M = w->M;
	attr_prefill(run, it, w);
	double *secs = w->nll + M; /* past the M NLLs: see eval_msmarco */
	for (int j = 0; j < M; j++) {
		double t0 = cli_now();
		if (ss_eval_context(run->fctx, run->model, (ss_eval_method)run->methods[j], w->docs,
				    (size_t)it->n, &w->ctxs[j], err))
			cli_die("%s: query %s, %s: %s", run->qa, it->id, method_name(run, j), err);
		secs[j] = cli_now() - t0;
		w->starts[j] = &w->ctxs[j];
	}
	double t0 = cli_now();
	if (ss_eval_nll(sc, w->starts, (size_t)M, it->q, it->nq, it->a, it->na, w->nll, NULL,
			err))
		cli_die("%s: query %s: %s", run->qa, it->id, err);
	double infer = (cli_now() - t0) / M;
	for (int j = 0; j < M; j++) {
		sum->nll[j] += w->nll[j];
		sum->time_s[j] += secs[j];
		sum->infer_s[j] += infer;
		if (run->per_out)
			fprintf(run->per_out, "%s\t%s\t%.9g\t%.6f\t%d\n", it->id, method_name(run, j),
				w->nll[j], secs[j] * 1e3, it->n);
		ss_state_free(&w->ctxs[j]);
	}
	for (int i = 0; i < it->n; i++)
		ss_state_free(&w->pst[i]);
}

void eval_msmarco(eval_run *run)
{
	double t_start = cli_now();
	cli_progress_begin();
	size_t nq, n_total;
	int maxp;
	qa_item *items = read_qa(run, 1, &nq, &n_total, &maxp);
	const int M = run->n_methods;
	ss_eval_scorer *sc;
	if (ss_eval_scorer_init(&sc, run->fctx, run->model, M))
		cli_die("out of memory");
	attr_work w;
	/* Room for the passages, and for M contexts, NLLs and M times. */
	attr_work_init(&w, M, maxp + 2 * M);
	msm_sums sum = { xcalloc((size_t)M, sizeof(double)), xcalloc((size_t)M, sizeof(double)),
			 xcalloc((size_t)M, sizeof(double)) };
	for (size_t qi = 0; qi < nq; qi++) {
		msm_query(run, sc, &items[qi], &w, &sum);
		qa_free(&items[qi]);
		cli_progress_of((double)(qi + 1), (double)nq, "%zu/%zu queries, %.2f queries/s", qi + 1, nq,
				(double)(qi + 1) / (cli_now() - t_start));
	}
	cli_progress_end();
	FILE *f = cli_out_open(run->out);
	fputs("method\tn\tmean_nll\tmean_time_ms\tmean_infer_ms\n", f);
	for (int j = 0; j < M; j++)
		fprintf(f, "%s\t%zu\t%.8f\t%.6f\t%.6f\n", method_name(run, j), nq, sum.nll[j] / nq,
			sum.time_s[j] / nq * 1e3, sum.infer_s[j] / nq * 1e3);
	cli_out_close(f);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu of %zu queries, %d methods, %.1f s\n", nq, n_total, M,
			cli_now() - t_start);
	free(sum.nll);
	free(sum.time_s);
	free(sum.infer_s);
	free(items);
	attr_work_free(&w);
	ss_eval_scorer_free(sc);
}
