/*
 * eval_wikitext.c — ss-eval wikitext (PICASO §6.1, Fig. 3): for each sampled
 * passage, retrieve the top K halves by BM25, build each method's context
 * from the k best for k = 0..K, and score the continuation's NLL after the
 * query; see eval_run.h and man/ss-eval.1.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "defaults.h"
#include "eval_run.h"
#include "model_cli.h"

/* The token records of the halves, in file order, and sorted by id for
 * lookups. */
typedef struct {
	ss_tokens *recs;
	size_t n;
	ss_tokens **by_id;
} token_set;

static int cmp_id(const void *a, const void *b)
{
	return strcmp((*(ss_tokens *const *)a)->id, (*(ss_tokens *const *)b)->id);
}

static void tokens_read(token_set *ts, const char *path)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_reader *r;
	if (ss_reader_open(&r, path, cli_max_record(), err))
		cli_die("%s: %s", path, err);
	size_t cap = 0;
	const ss_record *rec;
	int rc;
	while ((rc = ss_reader_next(r, &rec)) == 1) {
		if (strcmp(ss_record_format(rec), SS_FORMAT_TOKENS))
			cli_die("%s: record %" PRIu64 ": a %s record, not ss-tokens", path, ss_record_index(rec),
				ss_record_format(rec));
		if (ts->n == cap) {
			cap = cap ? 2 * cap : 1024;
			ts->recs = xrealloc(ts->recs, cap * sizeof *ts->recs);
		}
		if (ss_record_tokens(rec, &ts->recs[ts->n], err))
			cli_die("%s: record %" PRIu64 " (byte offset %" PRIu64 "): %s", path, ss_record_index(rec),
				ss_record_offset(rec), err);
		ts->n++;
	}
	if (rc < 0)
		cli_die("%s: %s", path, ss_reader_error(r));
	ss_reader_close(r);
	ts->by_id = xcalloc(ts->n, sizeof *ts->by_id);
	for (size_t i = 0; i < ts->n; i++)
		ts->by_id[i] = &ts->recs[i];
	qsort(ts->by_id, ts->n, sizeof *ts->by_id, cmp_id);
}

static const ss_tokens *tokens_find(const token_set *ts, const char *id)
{
	ss_tokens key = { .id = (char *)id }, *kp = &key;
	ss_tokens **hit = bsearch(&kp, ts->by_id, ts->n, sizeof *ts->by_id, cmp_id);
	return hit ? *hit : NULL;
}

static void tokens_free(token_set *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		ss_tokens_free(&ts->recs[i]);
	free(ts->recs);
	free(ts->by_id);
}

/* Length of the document id of a chunk id "DOC#k" (the part before the last
 * '#'), or 0 when id is not a chunk id with number k. */
static size_t chunk_base(const char *id, unsigned k)
{
	const char *h = strrchr(id, '#');
	char want[16];
	snprintf(want, sizeof want, "#%u", k);
	return h && !strcmp(h, want) ? (size_t)(h - id) : 0;
}

/* One evaluated passage: record indices of its halves. */
typedef struct {
	size_t q, c;
} passage;

/* Passages: consecutive records P#0, P#1 (and no P#2) with both halves non-
 * empty and at least min_tokens tokens together. *n_pairs counts the pairs
 * of halves, whatever their length. */
static passage *find_passages(const token_set *ts, long min_tokens, size_t *np, size_t *n_pairs)
{
	const ss_tokens *recs = ts->recs;
	passage *ps = xcalloc(ts->n, sizeof *ps);
	size_t n = 0;
	*n_pairs = 0;
	for (size_t i = 0; i + 1 < ts->n; i++) {
		size_t b = chunk_base(recs[i].id, 0);
		if (!b || chunk_base(recs[i + 1].id, 1) != b || strncmp(recs[i].id, recs[i + 1].id, b))
			continue;
		if (i + 2 < ts->n && chunk_base(recs[i + 2].id, 2) == b &&
		    !strncmp(recs[i].id, recs[i + 2].id, b))
			continue;
		++*n_pairs;
		if (recs[i].n_tokens >= 1 && recs[i + 1].n_tokens >= 1 &&
		    recs[i].n_tokens + recs[i + 1].n_tokens >= min_tokens)
			ps[n++] = (passage){ i, i + 1 };
	}
	*np = n;
	return ps;
}

static int cmp_passage(const void *a, const void *b)
{
	size_t x = ((const passage *)a)->q, y = ((const passage *)b)->q;
	return (x > y) - (x < y);
}

/* Keeps a seeded uniform sample of `want` passages, in file order. */
static void sample_passages(passage *ps, size_t *np, size_t want, uint64_t seed)
{
	if (want == 0 || want >= *np)
		return;
	ss_rng r;
	ss_rng_seed(&r, seed);
	for (size_t i = 0; i < want; i++) {
		size_t j = i + (size_t)(ss_rng_uniform(&r) * (double)(*np - i));
		passage t = ps[i];
		ps[i] = ps[j];
		ps[j] = t;
	}
	*np = want;
	qsort(ps, want, sizeof *ps, cmp_passage);
}

/* The BM25 query of a half: its record's text (NUL-terminated copy). */
static char *query_text(const ss_tokens *t, const char *path)
{
	if (!t->text)
		cli_die("%s: record %s has no text (tokenized with --no-text?): BM25 needs it",
			path, t->id);
	char *s = xcalloc(t->text_len + 1, 1);
	memcpy(s, t->text, t->text_len);
	return s;
}

/* What the WikiText loop keeps: the sums per (method, k), and the scratch
 * of one passage (K = --kmax, M methods). */
typedef struct {
	int K, M;
	double *sum_nll, *sum_t; /* [M][K + 1] */
	long *cnt;               /* [M][K + 1] */
	ss_index_hit *hits;      /* this passage's retrieved documents, best first */
	int nh;
	ss_state *hit_st;        /* [K] their states */
	ss_eval_doc *docs;       /* [K] the documents of one k, in concatenation order */
	ss_state *ctxs;          /* [M] each method's context state */
	const ss_state **starts; /* [M] the distinct ones, to score */
	double *nll, *secs, *unll; /* [M] per method; per distinct state */
	int *src;                /* [M] where each method's NLL comes from (wiki_score) */
	/* The states scored at k = 0 and 1 of this passage, for reuse by later
	 * k (naive's zero state): copies, [0..n_cache). */
	ss_state *cache;         /* [2M] */
	double *cache_nll;       /* [2M] */
	size_t n_cache;
	uint64_t n_scored, n_shared;
	char *ids;               /* --per-passage: the docs column */
	size_t ids_cap;
} wiki_work;

static void wiki_work_init(wiki_work *w, int K, int M)
{
	*w = (wiki_work){ .K = K, .M = M };
	w->sum_nll = xcalloc((size_t)M * (K + 1), sizeof(double));
	w->sum_t = xcalloc((size_t)M * (K + 1), sizeof(double));
	w->cnt = xcalloc((size_t)M * (K + 1), sizeof(long));
	w->hit_st = xcalloc((size_t)K, sizeof *w->hit_st);
	w->docs = xcalloc((size_t)K, sizeof *w->docs);
	w->ctxs = xcalloc((size_t)M, sizeof *w->ctxs);
	w->starts = xcalloc((size_t)M, sizeof *w->starts);
	w->nll = xcalloc((size_t)M, sizeof *w->nll);
	w->secs = xcalloc((size_t)M, sizeof *w->secs);
	w->unll = xcalloc((size_t)M, sizeof *w->unll);
	w->src = xcalloc((size_t)M, sizeof *w->src);
	w->cache = xcalloc(2 * (size_t)M, sizeof *w->cache);
	w->cache_nll = xcalloc(2 * (size_t)M, sizeof *w->cache_nll);
}

static void wiki_work_free(wiki_work *w)
{
	free(w->sum_nll);
	free(w->sum_t);
	free(w->cnt);
	free(w->hit_st);
	free(w->docs);
	free(w->ctxs);
	free(w->starts);
	free(w->nll);
	free(w->secs);
	free(w->unll);
	free(w->src);
	free(w->cache);
	free(w->cache_nll);
	free(w->ids);
}

/* Retrieves the top K documents for qtext (leaving out ex[0..n_ex)) into
 * w->hits and reads their states into w->hit_st; qid names the query in
 * messages. */
static void wiki_retrieve(const eval_run *run, ss_index *ix, const char *qtext,
			  const char *const *ex, size_t n_ex, const char *qid, wiki_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	w->hits = NULL;
	w->nh = 0;
	if (w->K > 0) {
		w->nh = ss_index_query(ix, qtext, w->K, ex, n_ex, &w->hits, err);
		if (w->nh == SS_ERR_INVALID)
			w->nh = 0; /* a query without a word: no documents */
		else if (w->nh < 0)
			cli_die("%s: %s: %s", run->index, qid, err);
	}
	for (int h = 0; h < w->nh; h++) {
		const ss_index_hit *hit = &w->hits[h];
		const ss_record *rec;
		if (ss_index_read(ix, hit, 0, &rec, err))
			cli_die("%s: %s", hit->path, err);
		if (ss_record_state(rec, &w->hit_st[h], err))
			cli_die("%s: document %s at byte offset %" PRIu64 ": %s", hit->path, hit->id,
				hit->offset, err);
	}
}

/* The k best documents in concatenation order into w->docs: the k-th best
 * first, the best last. */
static void wiki_docs(const eval_run *run, const token_set *ts, int k, wiki_work *w)
{
	for (int i = 0; i < k; i++) {
		const ss_index_hit *h = &w->hits[k - 1 - i];
		const ss_state *st = &w->hit_st[k - 1 - i];
		const ss_tokens *t = tokens_find(ts, h->id);
		if (!t)
			cli_die("%s: document %s of index %s is not in the token stream", run->tokens,
				h->id, run->index);
		if (t->n_tokens != st->n_tokens)
			cli_die("%s: document %s has %" PRId64 " tokens, its state in index %s %" PRId64
				": not the stream the index was built from", run->tokens, h->id,
				t->n_tokens, run->index, st->n_tokens);
		w->docs[i] = (ss_eval_doc){ st, t->tokens, t->n_tokens };
	}
}

/* Each method's context from w->docs[0..k), timed, into w->ctxs and
 * w->secs; qid names the query in messages. */
static void wiki_contexts(const eval_run *run, const char *qid, int k, wiki_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	for (int j = 0; j < w->M; j++) {
		double t0 = cli_now();
		if (ss_eval_context(run->fctx, run->model, (ss_eval_method)run->methods[j], w->docs,
				    (size_t)k, &w->ctxs[j], err))
			cli_die("%s, k %d, %s: %s", qid, k, method_name(run, j), err);
		w->secs[j] = cli_now() - t0;
	}
}

/* Scores each distinct context state of this k once into w->nll, the
 * others taking the NLL of their identical earlier state (of this k or in
 * the cache of k <= 1). */
static void wiki_score(const eval_run *run, ss_eval_scorer *sc, const ss_tokens *tq,
		       const ss_tokens *tc, int k, wiki_work *w)
{
	char err[SS_ERRMSG_MAX] = "";
	const int M = w->M;
	int nu = eval_distinct_states(w->ctxs, M, w->cache, w->n_cache, w->src, w->starts);
	if (nu && ss_eval_nll(sc, w->starts, (size_t)nu, tq->tokens, tq->n_tokens, tc->tokens,
			      tc->n_tokens, w->unll, NULL, err))
		cli_die("passage %s, k %d: %s", tq->id, k, err);
	w->n_scored += (uint64_t)nu;
	w->n_shared += (uint64_t)(M - nu);
	for (int j = 0, u = 0; j < M; j++) {
		int s = w->src[j];
		if (s >= 0) {
			w->nll[j] = w->nll[s];
		} else if (s < -1) {
			w->nll[j] = w->cache_nll[-2 - s];
		} else {
			w->nll[j] = w->unll[u++];
			if (k <= 1) {
				if (ss_state_copy(&w->cache[w->n_cache], &w->ctxs[j]))
					cli_die("out of memory");
				w->cache_nll[w->n_cache++] = w->nll[j];
			}
		}
	}
}

/* Adds this k's NLLs and times to the sums, writes the --per-passage rows,
 * and frees the context states. */
static void wiki_record(const eval_run *run, const ss_tokens *tq, int k, wiki_work *w)
{
	if (run->per_out) {
		size_t need = 1;
		for (int i = 0; i < k; i++)
			need += strlen(w->hits[i].id) + 1;
		if (need > w->ids_cap)
			w->ids = xrealloc(w->ids, w->ids_cap = 2 * need);
		w->ids[0] = 0;
		for (int i = 0; i < k; i++) {
			if (i)
				strcat(w->ids, ",");
			strcat(w->ids, w->hits[k - 1 - i].id);
		}
	}
	for (int j = 0; j < w->M; j++) {
		size_t at = (size_t)j * (w->K + 1) + k;
		w->sum_nll[at] += w->nll[j];
		w->sum_t[at] += w->secs[j];
		w->cnt[at]++;
		if (run->per_out)
			fprintf(run->per_out, "%s\t%d\t%s\t%.9g\t%.6f\t%s\n", tq->id, k,
				method_name(run, j), w->nll[j], w->secs[j] * 1e3, w->ids);
		ss_state_free(&w->ctxs[j]);
	}
}

/* Opens the index, a scorer for the methods and the loop's sums and
 * scratch (k = 0..--kmax). */
static void wiki_open(const eval_run *run, ss_index **ix, ss_eval_scorer **sc, wiki_work *w)
{
	*ix = eval_index_open(run);
	if (ss_eval_scorer_init(sc, run->fctx, run->model, run->n_methods))
		cli_die("out of memory");
	wiki_work_init(w, (int)run->kmax, run->n_methods);
}

/* One passage: retrieve, then for k = 0..(documents found) build, score and
 * record each method's context. */
static void wiki_passage(const eval_run *run, const token_set *ts, ss_index *ix,
			 ss_eval_scorer *sc, const passage *p, wiki_work *w)
{
	const ss_tokens *tq = &ts->recs[p->q], *tc = &ts->recs[p->c];
	const char *ex[2] = { tq->id, tc->id };
	char *qtext = query_text(tq, run->tokens), qid[300];
	snprintf(qid, sizeof qid, "passage %s", tq->id);
	wiki_retrieve(run, ix, qtext, ex, 2, qid, w);
	free(qtext);
	for (int k = 0; k <= w->nh; k++) {
		wiki_docs(run, ts, k, w);
		wiki_contexts(run, qid, k, w);
		wiki_score(run, sc, tq, tc, k, w);
		wiki_record(run, tq, k, w);
	}
	for (size_t e = 0; e < w->n_cache; e++)
		ss_state_free(&w->cache[e]);
	w->n_cache = 0;
	for (int h = 0; h < w->nh; h++)
		ss_state_free(&w->hit_st[h]);
	ss_index_hits_free(w->hits, w->nh);
}

/* The TSV: method, k, mean_nll, n, mean_time_ms. */
static void wiki_write(const eval_run *run, const wiki_work *w)
{
	FILE *f = cli_out_open(run->out);
	fputs("method\tk\tmean_nll\tn\tmean_time_ms\n", f);
	for (int j = 0; j < w->M; j++)
		for (int k = 0; k <= w->K; k++) {
			size_t at = (size_t)j * (w->K + 1) + k;
			if (!w->cnt[at])
				continue;
			fprintf(f, "%s\t%d\t%.8f\t%ld\t%.6f\n", method_name(run, j), k,
				w->sum_nll[at] / w->cnt[at], w->cnt[at], w->sum_t[at] / w->cnt[at] * 1e3);
		}
	cli_out_close(f);
}

/* Fig. 3's summary (picaso.txt §6.2): per method the mean over k = 1..K of
 * the NLL improvement over naive, 100·(naive_k - method_k)/naive_k, and
 * that mean as a fraction of concat's (NaN without concat). Written as the
 * TSV method, improvement_pct, concat_fraction to --summary, and with -v on
 * standard error under a ruler. Needs naive among the methods. */
static void wiki_summary(const eval_run *run, const wiki_work *w)
{
	int naive = -1, concat = -1;
	for (int j = 0; j < w->M; j++) {
		if (run->methods[j] == SS_EVAL_NAIVE)
			naive = j;
		if (run->methods[j] == SS_EVAL_CONCAT)
			concat = j;
	}
	if (naive < 0)
		cli_die("--summary: the improvement over naive needs naive among --methods");
	double *impr = xcalloc((size_t)w->M, sizeof *impr);
	for (int j = 0; j < w->M; j++) {
		int nk = 0;
		for (int k = 1; k <= w->K; k++) {
			size_t at = (size_t)j * (w->K + 1) + k, an = (size_t)naive * (w->K + 1) + k;
			if (!w->cnt[at] || !w->cnt[an])
				continue;
			double base = w->sum_nll[an] / w->cnt[an];
			impr[j] += 100 * (base - w->sum_nll[at] / w->cnt[at]) / base;
			nk++;
		}
		impr[j] = nk ? impr[j] / nk : NAN;
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (!m)
		cli_die("out of memory");
	fputs("method\timprovement_pct\tconcat_fraction\n", m);
	for (int j = 0; j < w->M; j++)
		fprintf(m, "%s\t%.6g\t%.6g\n", method_name(run, j), impr[j],
			concat >= 0 ? impr[j] / impr[concat] : NAN);
	if (fclose(m))
		cli_die("out of memory");
	if (run->summary) {
		FILE *f = cli_out_open(run->summary);
		if (fwrite(buf, 1, len, f) != len)
			cli_die("%s: write error", run->summary);
		cli_out_close(f);
	}
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: Fig. 3 summary (k = 1..%d)\n%s", w->K, buf);
	free(buf);
	free(impr);
}

void eval_wikitext(eval_run *run)
{
	double t_start = cli_now();
	cli_progress_begin();
	token_set ts = { 0 };
	tokens_read(&ts, run->tokens);
	size_t np, n_pairs;
	passage *ps = find_passages(&ts, run->min_tokens, &np, &n_pairs);
	if (n_pairs == 0)
		cli_die("%s: no passage halves (records DOC#0, DOC#1: make them with ss-tokenize "
			"--parts 2)", run->tokens);
	if (np == 0)
		cli_die("%s: no passage of at least %ld tokens (--min-tokens)", run->tokens,
			run->min_tokens);
	size_t eligible = np;
	sample_passages(ps, &np, (size_t)run->passages, run->seed);

	ss_index *ix;
	ss_eval_scorer *sc;
	wiki_work w;
	wiki_open(run, &ix, &sc, &w);
	for (size_t p = 0; p < np; p++) {
		wiki_passage(run, &ts, ix, sc, &ps[p], &w);
		cli_progress_of((double)(p + 1), (double)np, "%zu/%zu passages, %.2f passages/s", p + 1, np,
				(double)(p + 1) / (cli_now() - t_start));
	}
	cli_progress_end();
	wiki_write(run, &w);
	if (run->summary || cli_verbosity >= 2)
		wiki_summary(run, &w);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu of %zu passages (of %zu with >= %ld tokens), k = 0..%d, "
			"%d methods, %" PRIu64 " states scored (%" PRIu64 " identical ones shared), "
			"%.1f s\n", np, n_pairs, eligible, run->min_tokens, w.K, w.M, w.n_scored,
			w.n_shared, cli_now() - t_start);
	wiki_work_free(&w);
	free(ps);
	ss_eval_scorer_free(sc);
	ss_index_close(ix);
	tokens_free(&ts);
}


/* ---------------------------------------------------------- openbookqa */

/* One OpenBookQA question: its id, stem, the 4 choices and the key. */
typedef struct {
	char *id, *stem, *choice[4];
	int key; /* 0..3 */
} obqa_item;

/* Splits "(A) x (B) y (C) z (D) w" into its 4 choices (malloc'd); 0 or -1. */
static int obqa_choices(const char *s, char **out)
{
	const char *at[5];
	for (int i = 0; i < 4; i++) {
		char tag[5] = { '(', (char)('A' + i), ')', ' ', 0 };
		if (!(at[i] = strstr(i ? at[i - 1] : s, tag)))
			return -1;
	}
	at[4] = s + strlen(s);
	for (int i = 0; i < 4; i++) {
		const char *b = at[i] + 4, *e = at[i + 1];
		while (e > b && e[-1] == ' ')
			e--;
		out[i] = xcalloc((size_t)(e - b) + 1, 1);
		memcpy(out[i], b, (size_t)(e - b));
	}
	return 0;
}

/* The questions of the TSV (header ID, Question Stem, Choices, Complete
 * Question, Answer Key), at most --queries. */
static obqa_item *obqa_read(const eval_run *run, size_t *n)
{
	size_t len;
	char *buf = mcli_read_file(run->qa, &len), *save = NULL;
	obqa_item *items = NULL;
	size_t cap = 0, line = 0;
	*n = 0;
	for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		line++;
		l[strcspn(l, "\r")] = 0;
		char *f[5], *fs = NULL;
		int nf = 0;
		for (char *t = strtok_r(l, "\t", &fs); t && nf < 5; t = strtok_r(NULL, "\t", &fs))
			f[nf++] = t;
		if (line == 1) {
			if (nf < 5 || strcmp(f[0], "ID") || strcmp(f[4], "Answer Key"))
				cli_die("%s: line 1: not an OpenBookQA TSV (ID, Question Stem, Choices, "
					"Complete Question, Answer Key)", run->qa);
			continue;
		}
		if (run->queries && (long)*n >= run->queries)
			break;
		if (*n == cap)
			items = xrealloc(items, (cap = cap ? 2 * cap : 256) * sizeof *items);
		obqa_item *it = &items[*n];
		if (nf < 5 || strlen(f[4]) != 1 || f[4][0] < 'A' || f[4][0] > 'D' ||
		    obqa_choices(f[2], it->choice))
			cli_die("%s: line %zu: want 5 fields, choices (A) .. (D) and a key A-D", run->qa,
				line);
		it->id = strdup(f[0]);
		it->stem = strdup(f[1]);
		it->key = f[4][0] - 'A';
		if (!it->id || !it->stem)
			cli_die("out of memory");
		++*n;
	}
	free(buf);
	return items;
}

/* Tokens of one question: the query, and per choice its tokens and bytes. */
typedef struct {
	int32_t *q, *c[4];
	int64_t nq, nc[4];
	size_t bytes[4];
} obqa_tok;

/* Scores the 4 choices from each method's context at this k; adds to the
 * counts of accuracy (lowest summed NLL) and accuracy_norm (lowest summed
 * NLL per byte of the choice, lm-evaluation-harness's acc_norm). */
static void obqa_score(const eval_run *run, ss_eval_scorer *sc, const obqa_item *it,
		       const obqa_tok *t, int k, wiki_work *w, long *acc, long *accn)
{
	char err[SS_ERRMSG_MAX] = "";
	const int M = w->M;
	double best[2][EVAL_MAX_METHODS];
	int pick[2][EVAL_MAX_METHODS] = { { 0 } };
	for (int j = 0; j < M; j++)
		w->starts[j] = &w->ctxs[j];
	for (int c = 0; c < 4; c++) {
		if (ss_eval_nll(sc, w->starts, (size_t)M, t->q, t->nq, t->c[c], t->nc[c], w->nll,
				NULL, err))
			cli_die("%s: question %s, k %d: %s", run->qa, it->id, k, err);
		for (int j = 0; j < M; j++) {
			double sum = w->nll[j] * (double)t->nc[c];
			double v[2] = { sum, sum / (double)t->bytes[c] };
			for (int a = 0; a < 2; a++)
				if (c == 0 || v[a] < best[a][j]) {
					best[a][j] = v[a];
					pick[a][j] = c;
				}
		}
	}
	for (int j = 0; j < M; j++) {
		size_t at = (size_t)j * (w->K + 1) + k;
		acc[at] += pick[0][j] == it->key;
		accn[at] += pick[1][j] == it->key;
		w->sum_t[at] += w->secs[j];
		w->cnt[at]++;
		ss_state_free(&w->ctxs[j]);
	}
}

void eval_openbookqa(eval_run *run)
{
	double t_start = cli_now();
	cli_progress_begin();
	size_t nq;
	obqa_item *items = obqa_read(run, &nq);
	if (nq == 0)
		cli_die("%s: no question", run->qa);
	ss_tokenizer *tok = cli_tokenizer(run->mo.tokenizer, run->model_dir);
	token_set ts = { 0 };
	tokens_read(&ts, run->tokens);
	ss_index *ix;
	ss_eval_scorer *sc;
	wiki_work w;
	wiki_open(run, &ix, &sc, &w);
	size_t cells = (size_t)w.M * (w.K + 1);
	long *acc = xcalloc(cells, sizeof *acc), *accn = xcalloc(cells, sizeof *accn);
	for (size_t i = 0; i < nq; i++) {
		obqa_item *it = &items[i];
		char where[300], *q;
		snprintf(where, sizeof where, "question %s", it->id);
		if (asprintf(&q, "\n\nQuestion: %s\nAnswer:", it->stem) < 0)
			cli_die("out of memory");
		obqa_tok t;
		t.q = encode_text(run, tok, q, &t.nq, where);
		free(q);
		for (int c = 0; c < 4; c++) {
			char *a;
			if (asprintf(&a, " %s", it->choice[c]) < 0)
				cli_die("out of memory");
			t.c[c] = encode_text(run, tok, a, &t.nc[c], where);
			t.bytes[c] = strlen(a);
			free(a);
			if (t.nc[c] < 1 || t.nq < 1)
				cli_die("%s: %s: an empty question or choice", run->qa, where);
		}
		wiki_retrieve(run, ix, it->stem, NULL, 0, where, &w);
		for (int k = 0; k <= w.nh; k++) {
			wiki_docs(run, &ts, k, &w);
			wiki_contexts(run, where, k, &w);
			obqa_score(run, sc, it, &t, k, &w, acc, accn);
		}
		for (int h = 0; h < w.nh; h++)
			ss_state_free(&w.hit_st[h]);
		ss_index_hits_free(w.hits, w.nh);
		free(t.q);
		for (int c = 0; c < 4; c++) {
			free(t.c[c]);
			free(it->choice[c]);
		}
		free(it->id);
		free(it->stem);
		cli_progress_of((double)(i + 1), (double)nq, "%zu/%zu questions, %.2f questions/s", i + 1, nq,
				(double)(i + 1) / (cli_now() - t_start));
	}
	cli_progress_end();
	FILE *f = cli_out_open(run->out);
	fputs("method\tk\tn\taccuracy\taccuracy_norm\tmean_time_ms\n", f);
	for (int j = 0; j < w.M; j++)
		for (int k = 0; k <= w.K; k++) {
			size_t at = (size_t)j * (w.K + 1) + k;
			if (w.cnt[at])
				fprintf(f, "%s\t%d\t%ld\t%.4f\t%.4f\t%.6f\n", method_name(run, j), k,
					w.cnt[at], (double)acc[at] / w.cnt[at], (double)accn[at] / w.cnt[at],
					w.sum_t[at] / w.cnt[at] * 1e3);
		}
	cli_out_close(f);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu questions, k = 0..%d, %d methods, %.1f s\n", nq, w.K, w.M,
			cli_now() - t_start);
	free(acc);
	free(accn);
	free(items);
	wiki_work_free(&w);
	ss_eval_scorer_free(sc);
	ss_index_close(ix);
	tokens_free(&ts);
	ss_tokenizer_free(tok);
}
