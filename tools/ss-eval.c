/*
 * ss-eval — the PICASO paper's evaluation over a state database: WikiText
 * continuation NLL vs k retrieved chunks per method with composition vs
 * concatenation timings (§6.1, Fig. 3), and MS MARCO data attribution by
 * Leave-One-In / Leave-One-Out (Appendix C, Table 4). The methods and the
 * metric are libss calls (ss_eval.h); this file reads the inputs, loops and
 * tabulates. Manual: man/ss-eval.1.
 */
#include <errno.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"
#include "ss_eval.h"

static const char *usage =
	"ss-eval wikitext [--model DIR] --index DB --tokens FILE [--passages N] [--min-tokens N]\n"
	"               [--kmax K] [--methods LIST] [--seed S] [--per-passage FILE]\n"
	"               [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]\n"
	"       ss-eval attribution [--model DIR] --qa FILE [--queries N] [--exactly-one]\n"
	"               [--methods LIST] [--per-query FILE] [--tokenizer FILE]\n"
	"               [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]";

/* Keeps the default WikiText run (database included) within 20 minutes on 2
 * cores with the t1 model: about 1.5 s per passage there (7 methods, k = 0..10). */
#define PASSAGES_DEFAULT 300
#define MIN_TOKENS_DEFAULT 64
#define KMAX_DEFAULT 10
#define KMAX_MAX 64
#define NO_ANSWER "No Answer Present."

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "wikitext: for each sampled passage (a token record pair P#0, P#1 as\n"
	       "  ss-tokenize --parts 2 writes them: query half, continuation half) retrieve\n"
	       "  the top K halves by BM25 with the query half's text from the index DB,\n"
	       "  leaving out both halves of P; for k = 0..K build each method's context from\n"
	       "  the k best (most relevant last) and score the continuation's mean NLL after\n"
	       "  the query. Times the context: composition (weights + accumulation) or\n"
	       "  re-encoding (the prefill of the documents). Writes the TSV\n"
	       "  method, k, mean_nll, n, mean_time_ms.\n"
	       "attribution: for each MS MARCO query (with an answer and a selected passage)\n"
	       "  pick the passage the answer depends on: Leave-One-In (lowest answer NLL\n"
	       "  from one passage's state) and Leave-One-Out per method (highest answer NLL\n"
	       "  without the passage). Writes the TSV method, n, correct, precision,\n"
	       "  mean_time_ms (rows: chance, loi, loo-METHOD...).\n\n"
	       "  --model DIR         model directory (default: see Defaults)\n"
	       "  --index DB          wikitext: the index (ss-retrieve build) of the halves\n"
	       "  --tokens FILE       wikitext: the token stream of the halves\n"
	       "  --passages N        wikitext: passages sampled (default %d; 0 = all)\n"
	       "  --min-tokens N      wikitext: only passages of at least N tokens (default %d)\n"
	       "  --kmax K            wikitext: k = 0..K (default %d)\n"
	       "  --seed S            wikitext: sampling seed (default 1)\n"
	       "  --per-passage FILE  wikitext: also write passage, k, method, nll, time_ms,\n"
	       "                      docs (ids in concatenation order)\n"
	       "  --qa FILE           attribution: MS MARCO v1.1 JSON (array of queries)\n"
	       "  --queries N         attribution: at most N queries (default 0 = all)\n"
	       "  --exactly-one       attribution: only queries with one selected passage\n"
	       "  --per-query FILE    attribution: also write query_id, method, pick,\n"
	       "                      correct, n_passages\n"
	       "  --tokenizer FILE    attribution: tokenizer.json (default: see Defaults)\n"
	       "  --methods LIST      comma-separated methods (default: all; wikitext:\n"
	       "                      naive,concat,soup,caso,picaso-s,picaso-r,piconcat-r;\n"
	       "                      attribution Leave-One-Out: concat,soup,caso,picaso-r,\n"
	       "                      picaso-s)\n"
	       "  --threads N         threads (default: online cores)\n"
	       "  --weights-dtype T   f32, bf16, f16 or auto: the dtype the weight matrices\n"
	       "                      are held and read in (default auto: the checkpoint's)\n"
	       "  -o FILE             output TSV (replaced only on success; default stdout)\n"
	       "  -q, -v              quieter; more verbose (progress and a summary)\n"
	       "  -h, --help          this help;  -V, --version  the version\n\n",
	       usage, PASSAGES_DEFAULT, MIN_TOKENS_DEFAULT, KMAX_DEFAULT);
	cli_defaults_help();
	exit(0);
}

static struct {
	const char *model_dir, *index, *tokens, *qa, *out, *per, *tok_path, *wtype;
	long passages, min_tokens, kmax, queries;
	uint64_t seed;
	int exactly_one, threads;
	int methods[SS_EVAL_N_METHODS], n_methods;
} opt = { .passages = PASSAGES_DEFAULT, .min_tokens = MIN_TOKENS_DEFAULT,
	  .kmax = KMAX_DEFAULT, .seed = 1 };

static ss_model *model;
static ss_forward_ctx *fctx;

static void parse_methods(const char *s)
{
	char *dup = strdup(s), *save = NULL;
	if (!dup)
		cli_die("out of memory");
	opt.n_methods = 0;
	for (char *t = strtok_r(dup, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		ss_eval_method m;
		if (ss_eval_method_parse(t, &m))
			cli_usage(usage, "--methods: unknown method '%s'", t);
		for (int i = 0; i < opt.n_methods; i++)
			if (opt.methods[i] == (int)m)
				cli_usage(usage, "--methods: '%s' given twice", t);
		opt.methods[opt.n_methods++] = (int)m;
	}
	if (!opt.n_methods)
		cli_usage(usage, "--methods: no method");
	free(dup);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		cli_die("out of memory");
	return p;
}

static void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

/* Per-row output (--per-passage / --per-query), kept in memory and written
 * at the end: cli_out_open() has one output file at a time. */
static FILE *per_out;
static char *per_buf;
static size_t per_len;

/* ============================================================ wikitext */

/* The token records, sorted by id for lookups. */
static ss_tokens *recs;
static size_t n_recs;
static ss_tokens **by_id;

static int cmp_id(const void *a, const void *b)
{
	return strcmp((*(ss_tokens *const *)a)->id, (*(ss_tokens *const *)b)->id);
}

static void read_tokens(const char *path)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_reader *r;
	if (ss_reader_open(&r, path, cli_max_record(), err))
		cli_die("%s: %s", path, err);
	size_t cap = 0;
	ss_record rec;
	int rc;
	while ((rc = ss_reader_next(r, &rec)) == 1) {
		if (strcmp(rec.format, SS_FORMAT_TOKENS))
			cli_die("%s: record %" PRIu64 ": a %s record, not ss-tokens", path, rec.index,
				rec.format);
		if (n_recs == cap) {
			cap = cap ? 2 * cap : 1024;
			recs = xrealloc(recs, cap * sizeof *recs);
		}
		if (ss_record_tokens(&rec, &recs[n_recs], err))
			cli_die("%s: record %" PRIu64 " (byte offset %" PRIu64 "): %s", path, rec.index,
				rec.offset, err);
		n_recs++;
	}
	if (rc < 0)
		cli_die("%s: %s", path, ss_reader_error(r));
	ss_reader_close(r);
	by_id = xcalloc(n_recs, sizeof *by_id);
	for (size_t i = 0; i < n_recs; i++)
		by_id[i] = &recs[i];
	qsort(by_id, n_recs, sizeof *by_id, cmp_id);
}

static const ss_tokens *find_tokens(const char *id)
{
	ss_tokens key = { .id = (char *)id }, *kp = &key;
	ss_tokens **hit = bsearch(&kp, by_id, n_recs, sizeof *by_id, cmp_id);
	return hit ? *hit : NULL;
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
 * empty and at least min_tokens tokens together. */
static passage *find_passages(size_t *np, size_t *n_pairs)
{
	passage *ps = xcalloc(n_recs, sizeof *ps);
	size_t n = 0;
	*n_pairs = 0;
	for (size_t i = 0; i + 1 < n_recs; i++) {
		size_t b = chunk_base(recs[i].id, 0);
		if (!b || chunk_base(recs[i + 1].id, 1) != b || strncmp(recs[i].id, recs[i + 1].id, b))
			continue;
		if (i + 2 < n_recs && chunk_base(recs[i + 2].id, 2) == b &&
		    !strncmp(recs[i].id, recs[i + 2].id, b))
			continue;
		++*n_pairs;
		if (recs[i].n_tokens >= 1 && recs[i + 1].n_tokens >= 1 &&
		    recs[i].n_tokens + recs[i + 1].n_tokens >= opt.min_tokens)
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
static void sample_passages(passage *ps, size_t *np, size_t want)
{
	if (want == 0 || want >= *np)
		return;
	ss_rng r;
	ss_rng_seed(&r, opt.seed);
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

/* Bitwise equality of two states' arrays: equal states give equal NLLs, so
 * each distinct state of a passage is scored once (k = 0 gives the zero
 * state for every method, k = 1 the single document's state for every
 * composition). Nothing is shared between states that merely agree to
 * rounding: those are scored, which is what the invariant tests look at. */
static int same_state(const ss_state *a, const ss_state *b)
{
	return a->n_tokens == b->n_tokens &&
	       !memcmp(a->logdecay, b->logdecay, ss_state_logdecay_len(&a->dims) * sizeof(float)) &&
	       !memcmp(a->conv, b->conv, ss_state_conv_len(&a->dims) * sizeof(float)) &&
	       !memcmp(a->ssm, b->ssm, ss_state_ssm_len(&a->dims) * sizeof(float));
}

static void wikitext(void)
{
	char err[SS_ERRMSG_MAX] = "";
	double t_start = cli_now();
	read_tokens(opt.tokens);
	size_t np, n_pairs;
	passage *ps = find_passages(&np, &n_pairs);
	if (n_pairs == 0)
		cli_die("%s: no passage halves (records DOC#0, DOC#1: make them with ss-tokenize "
			"--parts 2)", opt.tokens);
	if (np == 0)
		cli_die("%s: no passage of at least %ld tokens (--min-tokens)", opt.tokens,
			opt.min_tokens);
	size_t eligible = np;
	sample_passages(ps, &np, (size_t)opt.passages);

	ss_index *ix;
	if (ss_index_open(&ix, opt.index, err))
		cli_die("%s: %s", opt.index, err);
	ss_eval_scorer *sc;
	if (ss_eval_scorer_init(&sc, fctx, model, opt.n_methods))
		cli_die("out of memory");

	const int K = (int)opt.kmax, M = opt.n_methods;
	/* Sums per (method, k). */
	double *sum_nll = xcalloc((size_t)M * (K + 1), sizeof(double));
	double *sum_t = xcalloc((size_t)M * (K + 1), sizeof(double));
	long *cnt = xcalloc((size_t)M * (K + 1), sizeof(long));
	ss_state *hit_st = xcalloc((size_t)K, sizeof *hit_st);
	ss_eval_doc *docs = xcalloc((size_t)K, sizeof *docs);
	ss_state *ctxs = xcalloc((size_t)M, sizeof *ctxs);
	const ss_state **starts = xcalloc((size_t)M, sizeof *starts);
	double *nll = xcalloc((size_t)M, sizeof *nll), *dt = xcalloc((size_t)M, sizeof *dt);
	double *unll = xcalloc((size_t)M, sizeof *unll);
	int *src = xcalloc((size_t)M, sizeof *src);
	/* The states scored at k = 0 and 1 of this passage, for reuse by later k
	 * (naive's zero state): copies, [0..n_cache). */
	ss_state *cache = xcalloc(2 * (size_t)M, sizeof *cache);
	double *cache_nll = xcalloc(2 * (size_t)M, sizeof *cache_nll);
	size_t n_cache = 0;
	uint64_t n_scored = 0, n_shared = 0;
	char *ids = NULL;
	size_t ids_cap = 0;

	for (size_t p = 0; p < np; p++) {
		const ss_tokens *tq = &recs[ps[p].q], *tc = &recs[ps[p].c];
		const char *ex[2] = { tq->id, tc->id };
		char *qtext = query_text(tq, opt.tokens);
		ss_index_hit *hits = NULL;
		int nh = 0;
		if (K > 0) {
			nh = ss_index_query(ix, qtext, K, ex, 2, &hits, err);
			if (nh == SS_ERR_INVALID)
				nh = 0; /* a query without a word: no documents */
			else if (nh < 0)
				cli_die("%s: passage %s: %s", opt.index, tq->id, err);
		}
		free(qtext);
		for (int h = 0; h < nh; h++) {
			ss_record rec;
			if (ss_index_read(ix, &hits[h], 0, &rec, err))
				cli_die("%s: %s", hits[h].path, err);
			if (ss_record_state(&rec, &hit_st[h], err))
				cli_die("%s: document %s at byte offset %" PRIu64 ": %s", hits[h].path,
					hits[h].id, hits[h].offset, err);
		}
		for (int k = 0; k <= nh; k++) {
			/* Concatenation order: the k-th best first, the best last. */
			for (int i = 0; i < k; i++) {
				const ss_index_hit *h = &hits[k - 1 - i];
				const ss_tokens *t = find_tokens(h->id);
				if (!t)
					cli_die("%s: document %s of index %s is not in the token stream",
						opt.tokens, h->id, opt.index);
				if (t->n_tokens != hit_st[k - 1 - i].n_tokens)
					cli_die("%s: document %s has %" PRId64 " tokens, its state in "
						"index %s %" PRId64 ": not the stream the index was built "
						"from", opt.tokens, h->id, t->n_tokens, opt.index,
						hit_st[k - 1 - i].n_tokens);
				docs[i] = (ss_eval_doc){ &hit_st[k - 1 - i], t->tokens, t->n_tokens };
			}
			for (int j = 0; j < M; j++) {
				double t0 = cli_now();
				if (ss_eval_context(fctx, model, (ss_eval_method)opt.methods[j], docs,
						    (size_t)k, &ctxs[j], err))
					cli_die("passage %s, k %d, %s: %s", tq->id, k,
						ss_eval_method_name(opt.methods[j]), err);
				dt[j] = cli_now() - t0;
				starts[j] = &ctxs[j];
			}
			/* src[j] >= 0: the index of an identical earlier state of this k;
			 * -2 - c: cache entry c; -1: to be scored. */
			int nu = 0;
			for (int j = 0; j < M; j++) {
				src[j] = -1;
				for (size_t e = 0; e < n_cache && src[j] == -1; e++)
					if (same_state(&ctxs[j], &cache[e]))
						src[j] = -2 - (int)e;
				for (int i = 0; i < j && src[j] == -1; i++)
					if (src[i] == -1 && same_state(&ctxs[j], &ctxs[i]))
						src[j] = i;
				if (src[j] == -1)
					starts[nu++] = &ctxs[j];
			}
			if (nu && ss_eval_nll(sc, starts, (size_t)nu, tq->tokens, tq->n_tokens,
					      tc->tokens, tc->n_tokens, unll, err))
				cli_die("passage %s, k %d: %s", tq->id, k, err);
			n_scored += (uint64_t)nu;
			n_shared += (uint64_t)(M - nu);
			for (int j = 0, u = 0; j < M; j++) {
				if (src[j] == -1) {
					nll[j] = unll[u++];
					if (k <= 1) {
						if (ss_eval_state_copy(&cache[n_cache], &ctxs[j]))
							cli_die("out of memory");
						cache_nll[n_cache++] = nll[j];
					}
				} else {
					nll[j] = src[j] >= 0 ? nll[src[j]] : cache_nll[-2 - src[j]];
				}
			}
			if (per_out) {
				size_t need = 1;
				for (int i = 0; i < k; i++)
					need += strlen(hits[i].id) + 1;
				if (need > ids_cap)
					ids = xrealloc(ids, ids_cap = 2 * need);
				ids[0] = 0;
				for (int i = 0; i < k; i++) {
					if (i)
						strcat(ids, ",");
					strcat(ids, hits[k - 1 - i].id);
				}
			}
			for (int j = 0; j < M; j++) {
				size_t at = (size_t)j * (K + 1) + k;
				sum_nll[at] += nll[j];
				sum_t[at] += dt[j];
				cnt[at]++;
				if (per_out)
					fprintf(per_out, "%s\t%d\t%s\t%.9g\t%.6f\t%s\n", tq->id, k,
						ss_eval_method_name(opt.methods[j]), nll[j], dt[j] * 1e3,
						ids);
				ss_state_free(&ctxs[j]);
			}
		}
		for (size_t e = 0; e < n_cache; e++)
			ss_state_free(&cache[e]);
		n_cache = 0;
		for (int h = 0; h < nh; h++)
			ss_state_free(&hit_st[h]);
		ss_index_hits_free(hits, nh);
		cli_progress("%zu/%zu passages, %.0f s", p + 1, np, cli_now() - t_start);
	}
	cli_progress_end();

	FILE *f = cli_out_open(opt.out);
	fputs("method\tk\tmean_nll\tn\tmean_time_ms\n", f);
	for (int j = 0; j < M; j++)
		for (int k = 0; k <= K; k++) {
			size_t at = (size_t)j * (K + 1) + k;
			if (!cnt[at])
				continue;
			fprintf(f, "%s\t%d\t%.8f\t%ld\t%.6f\n", ss_eval_method_name(opt.methods[j]), k,
				sum_nll[at] / cnt[at], cnt[at], sum_t[at] / cnt[at] * 1e3);
		}
	cli_out_close(f);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu of %zu passages (of %zu with >= %ld tokens), k = 0..%d, "
			"%d methods, %" PRIu64 " states scored (%" PRIu64 " identical ones shared), "
			"%.1f s\n", np, n_pairs, eligible, opt.min_tokens, K, M, n_scored, n_shared,
			cli_now() - t_start);

	free(sum_nll);
	free(sum_t);
	free(cnt);
	free(hit_st);
	free(docs);
	free(ctxs);
	free(starts);
	free(nll);
	free(dt);
	free(unll);
	free(src);
	free(cache);
	free(cache_nll);
	free(ids);
	free(ps);
	ss_eval_scorer_free(sc);
	ss_index_close(ix);
	for (size_t i = 0; i < n_recs; i++)
		ss_tokens_free(&recs[i]);
	free(recs);
	free(by_id);
}

/* ========================================================= attribution */

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

static int32_t *encode_text(ss_tokenizer *tok, const char *s, int64_t *n, const char *where)
{
	char err[SS_ERRMSG_MAX] = "";
	int32_t *ids;
	size_t k;
	if (ss_tokenizer_encode(tok, s, strlen(s), &ids, &k, err))
		cli_die("%s: %s: %s", opt.qa, where, err);
	int32_t v = mcli_vocab(model);
	for (size_t i = 0; i < k; i++)
		if (ids[i] >= v)
			cli_die("%s: %s: token %d outside the model's vocabulary", opt.qa, where, ids[i]);
	*n = (int64_t)k;
	return ids;
}

/* The query as the model reads it after the passages: "\n\nQuestion: Q\nAnswer:";
 * the answer continues it as " A". */
static qa_item *read_qa(ss_tokenizer *tok, size_t *n_items, size_t *n_total, int *max_pass)
{
	size_t len;
	char *buf = mcli_read_file(opt.qa, &len);
	cJSON *root = cJSON_ParseWithLength(buf, len);
	if (!cJSON_IsArray(root))
		cli_die("%s: not a JSON array of MS MARCO queries", opt.qa);
	qa_item *items = xcalloc((size_t)cJSON_GetArraySize(root), sizeof *items);
	size_t n = 0, idx = 0;
	*max_pass = 1;
	const cJSON *e;
	cJSON_ArrayForEach(e, root) {
		idx++;
		if (opt.queries && (long)n >= opt.queries)
			break;
		char where[128];
		snprintf(where, sizeof where, "query %zu", idx);
		const cJSON *qs = cJSON_GetObjectItemCaseSensitive(e, "query");
		const cJSON *pass = cJSON_GetObjectItemCaseSensitive(e, "passages");
		const cJSON *sel = cJSON_GetObjectItemCaseSensitive(pass, "is_selected");
		const cJSON *txt = cJSON_GetObjectItemCaseSensitive(pass, "passage_text");
		const cJSON *ans = cJSON_GetObjectItemCaseSensitive(e, "answers");
		const cJSON *qid = cJSON_GetObjectItemCaseSensitive(e, "query_id");
		if (!cJSON_IsString(qs) || !cJSON_IsArray(sel) || !cJSON_IsArray(txt) ||
		    cJSON_GetArraySize(sel) != cJSON_GetArraySize(txt))
			cli_die("%s: %s: not an MS MARCO v1.1 entry (query, passages.is_selected, "
				"passages.passage_text)", opt.qa, where);
		const cJSON *a0 = cJSON_IsArray(ans) ? cJSON_GetArrayItem(ans, 0) : NULL;
		int np = cJSON_GetArraySize(txt), nsel = 0;
		const cJSON *s;
		cJSON_ArrayForEach(s, sel) nsel += cJSON_IsNumber(s) && s->valuedouble != 0;
		if (!cJSON_IsString(a0) || !a0->valuestring[0] || !strcmp(a0->valuestring, NO_ANSWER) ||
		    np < 2 || nsel == 0 || (opt.exactly_one && nsel != 1))
			continue;
		qa_item *it = &items[n++];
		if ((cJSON_IsNumber(qid) ? asprintf(&it->id, "%.0f", qid->valuedouble)
					 : asprintf(&it->id, "%zu", idx)) < 0)
			cli_die("out of memory");
		it->n = np;
		if (np > *max_pass)
			*max_pass = np;
		it->ptok = xcalloc((size_t)np, sizeof *it->ptok);
		it->np = xcalloc((size_t)np, sizeof *it->np);
		it->selected = xcalloc((size_t)np, sizeof *it->selected);
		for (int i = 0; i < np; i++) {
			const cJSON *t = cJSON_GetArrayItem(txt, i), *si = cJSON_GetArrayItem(sel, i);
			if (!cJSON_IsString(t))
				cli_die("%s: %s: passage %d is not a string", opt.qa, where, i);
			it->ptok[i] = encode_text(tok, t->valuestring, &it->np[i], where);
			it->selected[i] = cJSON_IsNumber(si) && si->valuedouble != 0;
		}
		char *q, *a;
		if (asprintf(&q, "\n\nQuestion: %s\nAnswer:", qs->valuestring) < 0 ||
		    asprintf(&a, " %s", a0->valuestring) < 0)
			cli_die("out of memory");
		it->q = encode_text(tok, q, &it->nq, where);
		it->a = encode_text(tok, a, &it->na, where);
		free(q);
		free(a);
	}
	*n_total = idx;
	cJSON_Delete(root);
	free(buf);
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

static void attribution(void)
{
	char err[SS_ERRMSG_MAX] = "";
	double t_start = cli_now();
	ss_tokenizer *tok = cli_tokenizer(opt.tok_path, opt.model_dir);
	size_t nq, n_total;
	int maxp;
	qa_item *items = read_qa(tok, &nq, &n_total, &maxp);
	if (nq == 0)
		cli_die("%s: no query with an answer and a selected passage", opt.qa);
	for (int j = 0; j < opt.n_methods; j++)
		if (opt.methods[j] == SS_EVAL_NAIVE)
			cli_usage(usage, "attribution: naive has no documents to leave out");

	ss_eval_scorer *sc;
	if (ss_eval_scorer_init(&sc, fctx, model, maxp))
		cli_die("out of memory");
	const int M = opt.n_methods;
	/* Rows: 0 loi, 1+j loo with method j. */
	long *correct = xcalloc((size_t)M + 1, sizeof(long));
	double *time_s = xcalloc((size_t)M + 1, sizeof(double));
	double chance = 0;
	ss_state *pst = xcalloc((size_t)maxp, sizeof *pst), *ctxs = xcalloc((size_t)maxp, sizeof *ctxs);
	ss_forward_seq *seqs = xcalloc((size_t)maxp, sizeof *seqs);
	ss_eval_doc *docs = xcalloc((size_t)maxp, sizeof *docs), *rest = xcalloc((size_t)maxp, sizeof *rest);
	const ss_state **starts = xcalloc((size_t)maxp, sizeof *starts);
	double *nll = xcalloc((size_t)maxp, sizeof *nll);

	for (size_t qi = 0; qi < nq; qi++) {
		qa_item *it = &items[qi];
		int n = it->n, nsel = 0;
		for (int i = 0; i < n; i++)
			nsel += it->selected[i];
		chance += (double)nsel / n;
		/* The passages' states, from zero, in one batch. */
		for (int i = 0; i < n; i++) {
			if (ss_eval_zero_state(model, &pst[i]))
				cli_die("out of memory");
			free(pst[i].id);
			if (asprintf(&pst[i].id, "%s#%d", it->id, i) < 0)
				cli_die("out of memory");
			seqs[i] = (ss_forward_seq){ .tokens = it->ptok[i], .n_tokens = it->np[i],
						    .state = &pst[i] };
			docs[i] = (ss_eval_doc){ &pst[i], it->ptok[i], it->np[i] };
			starts[i] = &pst[i];
		}
		if (ss_forward_prefill(fctx, seqs, n, SS_LOGITS_NONE, err))
			cli_die("%s: query %s: %s", opt.qa, it->id, err);

		/* Leave-One-In: the passage whose state alone explains the answer best. */
		if (ss_eval_nll(sc, starts, (size_t)n, it->q, it->nq, it->a, it->na, nll, err))
			cli_die("%s: query %s: %s", opt.qa, it->id, err);
		int pick = 0;
		for (int i = 1; i < n; i++)
			if (nll[i] < nll[pick])
				pick = i;
		correct[0] += it->selected[pick];
		if (per_out)
			fprintf(per_out, "%s\tloi\t%d\t%d\t%d\n", it->id, pick, it->selected[pick], n);

		/* Leave-One-Out: the passage whose removal hurts the answer most
		 * (argmax of L(S_-i); L(S) is the same for every i). */
		for (int j = 0; j < M; j++) {
			double t0 = cli_now();
			for (int i = 0; i < n; i++) {
				int r = 0;
				for (int o = 0; o < n; o++)
					if (o != i)
						rest[r++] = docs[o];
				if (ss_eval_context(fctx, model, (ss_eval_method)opt.methods[j], rest,
						    (size_t)r, &ctxs[i], err))
					cli_die("%s: query %s, %s: %s", opt.qa, it->id,
						ss_eval_method_name(opt.methods[j]), err);
			}
			time_s[1 + j] += cli_now() - t0;
			for (int i = 0; i < n; i++)
				starts[i] = &ctxs[i];
			if (ss_eval_nll(sc, starts, (size_t)n, it->q, it->nq, it->a, it->na, nll, err))
				cli_die("%s: query %s: %s", opt.qa, it->id, err);
			pick = 0;
			for (int i = 1; i < n; i++)
				if (nll[i] > nll[pick])
					pick = i;
			correct[1 + j] += it->selected[pick];
			if (per_out)
				fprintf(per_out, "%s\tloo-%s\t%d\t%d\t%d\n", it->id,
					ss_eval_method_name(opt.methods[j]), pick, it->selected[pick], n);
			for (int i = 0; i < n; i++)
				ss_state_free(&ctxs[i]);
		}
		for (int i = 0; i < n; i++)
			ss_state_free(&pst[i]);
		qa_free(it);
		cli_progress("%zu/%zu queries, %.0f s", qi + 1, nq, cli_now() - t_start);
	}
	cli_progress_end();

	FILE *f = cli_out_open(opt.out);
	fputs("method\tn\tcorrect\tprecision\tmean_time_ms\n", f);
	fprintf(f, "chance\t%zu\t%.1f\t%.4f\t0\n", nq, chance, chance / (double)nq);
	fprintf(f, "loi\t%zu\t%ld\t%.4f\t0\n", nq, correct[0], (double)correct[0] / (double)nq);
	for (int j = 0; j < M; j++)
		fprintf(f, "loo-%s\t%zu\t%ld\t%.4f\t%.6f\n", ss_eval_method_name(opt.methods[j]), nq,
			correct[1 + j], (double)correct[1 + j] / (double)nq,
			time_s[1 + j] / (double)nq * 1e3);
	cli_out_close(f);
	if (cli_verbosity >= 2)
		fprintf(stderr, "ss-eval: %zu of %zu queries, %d methods, %.1f s\n", nq, n_total, M,
			cli_now() - t_start);

	free(items);
	free(correct);
	free(time_s);
	free(pst);
	free(ctxs);
	free(seqs);
	free(docs);
	free(rest);
	free(starts);
	free(nll);
	ss_eval_scorer_free(sc);
	ss_tokenizer_free(tok);
}

/* ================================================================ main */

int main(int argc, char **argv)
{
	cli_init("ss-eval");
	enum { O_MODEL = 256, O_INDEX, O_TOKENS, O_PASSAGES, O_MINTOK, O_KMAX, O_SEED, O_PERP,
	       O_QA, O_QUERIES, O_ONE, O_PERQ, O_TOK, O_METHODS, O_THREADS, O_WTYPE };
	static const struct option opts[] = {
		{ "weights-dtype", required_argument, 0, O_WTYPE },
		{ "model", required_argument, 0, O_MODEL },
		{ "index", required_argument, 0, O_INDEX },
		{ "tokens", required_argument, 0, O_TOKENS },
		{ "passages", required_argument, 0, O_PASSAGES },
		{ "min-tokens", required_argument, 0, O_MINTOK },
		{ "kmax", required_argument, 0, O_KMAX },
		{ "seed", required_argument, 0, O_SEED },
		{ "per-passage", required_argument, 0, O_PERP },
		{ "qa", required_argument, 0, O_QA },
		{ "queries", required_argument, 0, O_QUERIES },
		{ "exactly-one", no_argument, 0, O_ONE },
		{ "per-query", required_argument, 0, O_PERQ },
		{ "tokenizer", required_argument, 0, O_TOK },
		{ "methods", required_argument, 0, O_METHODS },
		{ "threads", required_argument, 0, O_THREADS },
		{ "output", required_argument, 0, 'o' },
		{ "quiet", no_argument, 0, 'q' },
		{ "verbose", no_argument, 0, 'v' },
		{ "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	const char *model_opt = NULL, *methods = NULL;
	int c;
	/* First pass, up to the command: only -h and -V act before it. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+o:qvhV", opts, NULL)) != -1) {
		if (c == 'h')
			help();
		if (c == 'V')
			cli_version();
	}
	opterr = 1;
	if (optind >= argc)
		cli_usage(usage, "missing command: wikitext or attribution");
	const char *cmd = argv[optind];
	int wiki = !strcmp(cmd, "wikitext"), attr = !strcmp(cmd, "attribution");
	if (!wiki && !attr)
		cli_usage(usage, "unknown command '%s' (wikitext or attribution)", cmd);
	/* Options may come before or after the command (0: glibc re-initialises). */
	optind = 0;
	while ((c = getopt_long(argc, argv, "o:qvhV", opts, NULL)) != -1) {
		switch (c) {
		case O_MODEL: model_opt = optarg; break;
		case O_INDEX: opt.index = optarg; break;
		case O_TOKENS: opt.tokens = optarg; break;
		case O_PASSAGES: opt.passages = cli_long("--passages", optarg, 0, 1L << 40, usage); break;
		case O_MINTOK: opt.min_tokens = cli_long("--min-tokens", optarg, 2, 1L << 30, usage); break;
		case O_KMAX: opt.kmax = cli_long("--kmax", optarg, 0, KMAX_MAX, usage); break;
		case O_SEED: opt.seed = (uint64_t)cli_long("--seed", optarg, 0, 1L << 62, usage); break;
		case O_PERP: opt.per = optarg; break;
		case O_QA: opt.qa = optarg; break;
		case O_QUERIES: opt.queries = cli_long("--queries", optarg, 0, 1L << 30, usage); break;
		case O_ONE: opt.exactly_one = 1; break;
		case O_PERQ: opt.per = optarg; break;
		case O_TOK: opt.tok_path = optarg; break;
		case O_METHODS: methods = optarg; break;
		case O_THREADS: opt.threads = (int)cli_long("--threads", optarg, 1, 256, usage); break;
		case O_WTYPE: opt.wtype = optarg; break;
		case 'o': opt.out = optarg; break;
		case 'q': cli_verbosity = 0; break;
		case 'v': cli_verbosity++; break;
		case 'h': help();
		case 'V': cli_version();
		default: cli_usage(usage, "unknown option");
		}
	}
	int extra = 0;
	for (int i = optind; i < argc; i++)
		if (strcmp(argv[i], cmd) || extra++)
			cli_usage(usage, "unexpected argument '%s'", argv[i]);
	if (wiki) {
		if (!opt.index || !opt.tokens)
			cli_usage(usage, "wikitext needs --index and --tokens");
		if (opt.qa)
			cli_usage(usage, "--qa belongs to attribution");
	} else {
		if (!opt.qa)
			cli_usage(usage, "attribution needs --qa");
		if (opt.index || opt.tokens)
			cli_usage(usage, "--index and --tokens belong to wikitext");
	}
	if (methods)
		parse_methods(methods);
	else if (wiki)
		for (int m = 0; m < SS_EVAL_N_METHODS; m++)
			opt.methods[opt.n_methods++] = m;
	else
		parse_methods("concat,soup,caso,picaso-r,picaso-s");
	if (!opt.threads)
		opt.threads = mcli_threads_default();
	opt.model_dir = cli_model_dir(model_opt, usage);

	model = mcli_load_model(opt.model_dir, 0, opt.wtype, usage);
	char err[SS_ERRMSG_MAX] = "";
	if (ss_forward_ctx_init(&fctx, model, opt.threads, 0, err))
		cli_die("%s: %s", opt.model_dir, err);
	if (opt.per) {
		if (!(per_out = open_memstream(&per_buf, &per_len)))
			cli_die("out of memory");
		fputs(wiki ? "passage\tk\tmethod\tnll\ttime_ms\tdocs\n"
			   : "query_id\tmethod\tpick\tcorrect\tn_passages\n", per_out);
	}
	if (wiki)
		wikitext();
	else
		attribution();
	if (per_out) {
		if (fclose(per_out))
			cli_die("out of memory");
		FILE *f = cli_out_open(opt.per);
		if (fwrite(per_buf, 1, per_len, f) != per_len)
			cli_die("%s: write error: %s", opt.per, strerror(errno));
		cli_out_close(f);
		free(per_buf);
	}
	ss_forward_ctx_free(fctx);
	ss_model_free(model);
	return 0;
}
