/*
 * qa.c — retrieve --qa (qa_main, at the end): the index's retrieval quality
 * on the MS MARCO and HotpotQA samples of $SS_SHARED/data/qa, and what
 * the samples are made into (documents with keys, queries with the keys
 * relevant to them).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ss.h"
#include "bench/bench.h"
#include "retrieve.h"

/* A retrieval test set: documents with a relevance key, queries with the
 * keys that are relevant to them. */
typedef struct {
	size_t n_docs, n_q;
	char **text, **key;   /* [n_docs] */
	char **query;         /* [n_q] */
	char ***rel;          /* [n_q], NULL-terminated key lists */
} qa_set;

static void qa_doc(qa_set *s, char *text, char *key)
{
	if ((s->n_docs & (s->n_docs - 1)) == 0) {
		s->text = realloc(s->text, (2 * s->n_docs + 1) * sizeof *s->text);
		s->key = realloc(s->key, (2 * s->n_docs + 1) * sizeof *s->key);
	}
	s->text[s->n_docs] = text;
	s->key[s->n_docs++] = key;
}

static void qa_query(qa_set *s, const char *query, char **rel)
{
	if ((s->n_q & (s->n_q - 1)) == 0) {
		s->query = realloc(s->query, (2 * s->n_q + 1) * sizeof *s->query);
		s->rel = realloc(s->rel, (2 * s->n_q + 1) * sizeof *s->rel);
	}
	s->query[s->n_q] = strdup(query);
	s->rel[s->n_q++] = rel;
}

static cJSON *read_json(const char *path)
{
	size_t n;
	char *t = bench_read_file(path, &n);
	if (!t)
		die(path, "cannot read (set SS_SHARED)");
	cJSON *j = cJSON_ParseWithLength(t, n);
	free(t);
	if (!cJSON_IsArray(j))
		die(path, "not a JSON array");
	return j;
}

/* MS MARCO: every passage of every sample is a document; a query's
 * relevant passages are its own selected ones. */
static void qa_msmarco(qa_set *s, const char *path)
{
	cJSON *all = read_json(path), *it;
	int i = 0;
	cJSON_ArrayForEach(it, all) {
		cJSON *ps = cJSON_GetObjectItem(it, "passages");
		cJSON *txt = cJSON_GetObjectItem(ps, "passage_text"), *sel = cJSON_GetObjectItem(ps, "is_selected");
		int n = cJSON_GetArraySize(txt), n_rel = 0;
		char **rel = calloc((size_t)n + 1, sizeof *rel);
		for (int j = 0; j < n; j++) {
			char key[64];
			snprintf(key, sizeof key, "m%d/%d", i, j);
			qa_doc(s, strdup(cJSON_GetArrayItem(txt, j)->valuestring), strdup(key));
			if (cJSON_GetArrayItem(sel, j)->valueint)
				rel[n_rel++] = strdup(key);
		}
		if (n_rel)
			qa_query(s, cJSON_GetObjectItem(it, "query")->valuestring, rel);
		else
			free(rel);
		i++;
	}
	cJSON_Delete(all);
}

/* HotpotQA (distractor): every context paragraph (title, then its
 * sentences) is a document keyed by its title; a question's relevant
 * documents are those of its supporting titles. */
static void qa_hotpot(qa_set *s, const char *path)
{
	cJSON *all = read_json(path), *it;
	cJSON_ArrayForEach(it, all) {
		cJSON *c, *f;
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(it, "context")) {
			const char *title = cJSON_GetArrayItem(c, 0)->valuestring;
			size_t len = strlen(title) + 2;
			cJSON *sent;
			cJSON_ArrayForEach(sent, cJSON_GetArrayItem(c, 1))
				len += strlen(sent->valuestring);
			char *t = malloc(len);
			size_t tn = (size_t)sprintf(t, "%s\n", title);
			cJSON_ArrayForEach(sent, cJSON_GetArrayItem(c, 1))
				tn += (size_t)sprintf(t + tn, "%s", sent->valuestring);
			qa_doc(s, t, strdup(title));
		}
		cJSON *sf = cJSON_GetObjectItem(it, "supporting_facts");
		char **rel = calloc((size_t)cJSON_GetArraySize(sf) + 1, sizeof *rel);
		int n_rel = 0;
		cJSON_ArrayForEach(f, sf) {
			const char *title = cJSON_GetArrayItem(f, 0)->valuestring;
			int seen = 0;
			for (int j = 0; j < n_rel; j++)
				seen |= !strcmp(rel[j], title);
			if (!seen)
				rel[n_rel++] = strdup(title);
		}
		qa_query(s, cJSON_GetObjectItem(it, "question")->valuestring, rel);
	}
	cJSON_Delete(all);
}

/* Metrics summed over queries (ss_eval_ranking's fields). */
typedef struct {
	double r1, r5, r10, rr, ndcg;
} qa_sums;

/* Adds the ranking metrics of one ranked list of document ordinals to *m:
 * a result is relevant when its key is one of the query's not yet found
 * (HotpotQA titles recur across samples). */
static void qa_score(const qa_set *s, size_t q, const size_t *docs, int n, qa_sums *m)
{
	int n_rel = 0, rel[10] = { 0 };
	while (s->rel[q][n_rel])
		n_rel++;
	char *got = calloc((size_t)n_rel, 1);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n_rel; j++)
			if (!got[j] && !strcmp(s->key[docs[i]], s->rel[q][j])) {
				got[j] = 1;
				rel[i] = 1;
				break;
			}
	free(got);
	ss_eval_ranking r;
	if (ss_eval_rank(rel, n, n_rel, &r))
		die("qa", "ss_eval_rank failed");
	m->r1 += r.recall_1;
	m->r5 += r.recall_5;
	m->r10 += r.recall_10;
	m->rr += r.rr_10;
	m->ndcg += r.ndcg_10;
}

/* The metrics of every query of s on the open index ix, with k1, b. */
static qa_sums qa_eval(const qa_set *s, ss_index *ix, double k1, double b)
{
	char em[SS_ERRMSG_MAX];
	qa_sums m = { 0 };
	size_t docs[10];
	if (ss_index_set_bm25(ix, k1, b, em))
		die("bm25", em);
	for (size_t q = 0; q < s->n_q; q++) {
		ss_index_hit *h;
		int n = ss_index_query(ix, s->query[q], 10, NULL, 0, &h, em);
		if (n < 0)
			die("query", em);
		for (int i = 0; i < n; i++)
			docs[i] = (size_t)strtoull(h[i].id, NULL, 10);
		ss_index_hits_free(h, n);
		qa_score(s, q, docs, n, &m);
	}
	return m;
}

/* --qa --k1 LIST --b LIST: the sweep's parameters; NULL lists: the
 * default run against FTS5. */
static const char *qa_k1s, *qa_bs;

static void qa_run(const char *name, qa_set *s)
{
	char dir[512], spath[600], dbpath[600], ppath[600], em[SS_ERRMSG_MAX], id[32];
	scratch_dir(dir, sizeof dir, "qa");
	snprintf(spath, sizeof spath, "%s/states", dir);
	snprintf(dbpath, sizeof dbpath, "%s/index.db", dir);
	snprintf(ppath, sizeof ppath, "%s/fts5.db", dir);
	ss_state_dims d = { "mamba2", 2, 3, 4, 5, 6, 4 };
	ss_state st;
	ss_writer *sw;
	ss_index *ix;
	fts_peer p;
	if (ss_state_alloc(&st, &d) || ss_writer_open(&sw, spath, 1, em) || ss_index_build_open(&ix, dbpath, em))
		die(dir, "cannot start");
	peer_open(&p, ppath, "porter unicode61 remove_diacritics 2");
	snprintf(st.fingerprint, sizeof st.fingerprint, "bench-qa");
	for (size_t i = 0; i < s->n_docs; i++) {
		snprintf(id, sizeof id, "%zu", i);
		st.id = id;
		if (ss_writer_put_state(sw, &st, NULL) ||
		    ss_index_add_text(ix, id, s->text[i], strlen(s->text[i]), -1, em))
			die(dbpath, em);
		peer_add(&p, (int64_t)i + 1, s->text[i], strlen(s->text[i]));
	}
	st.id = NULL;
	ss_state_free(&st);
	if (ss_writer_close(sw, em) || ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) ||
	    ss_index_commit(ix, NULL, NULL, NULL, em))
		die(dbpath, em);
	ss_index_close(ix);
	peer_commit(&p);
	if (ss_index_open(&ix, dbpath, em))
		die(dbpath, em);
	if (qa_k1s) {
		/* One TSV row per (k1, b): the index is built once. */
		char *k1s = strdup(qa_k1s), *s1 = NULL;
		for (char *a = strtok_r(k1s, ",", &s1); a; a = strtok_r(NULL, ",", &s1)) {
			char *bs = strdup(qa_bs), *s2 = NULL;
			for (char *c = strtok_r(bs, ",", &s2); c; c = strtok_r(NULL, ",", &s2)) {
				double k1 = atof(a), b = atof(c);
				qa_sums m = qa_eval(s, ix, k1, b);
				double n = (double)s->n_q;
				printf("%s\t%g\t%g\t%zu\t%zu\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n", name, k1, b,
				       s->n_docs, s->n_q, m.r1 / n, m.r5 / n, m.r10 / n, m.rr / n, m.ndcg / n);
				fflush(stdout);
			}
			free(bs);
		}
		free(k1s);
		ss_index_close(ix);
		peer_close(&p);
	} else {
		qa_sums ours = qa_eval(s, ix, 1.2, 0.75), peer = { 0 }, prox;
		/* BM25TP (issue 47), the same queries: whether proximity helps on real text */
		if (ss_index_set_query(ix, SS_INDEX_QUERY_PROXIMITY, em))
			die("query", em);
		prox = qa_eval(s, ix, 1.2, 0.75);
		ss_index_set_query(ix, 0, em);
		size_t docs[10];
		int64_t rows[10];
		for (size_t q = 0; q < s->n_q; q++) {
			char *e = fts_expr(&p, s->query[q], 0);
			int n = e[0] ? peer_query(&p, e, 10, rows) : 0;
			free(e);
			for (int i = 0; i < n; i++)
				docs[i] = (size_t)(rows[i] - 1);
			qa_score(s, q, docs, n, &peer);
		}
		ss_index_close(ix);
		peer_close(&p);
		double n = (double)s->n_q;
		printf("  %-28s %5zu docs %4zu queries   recall@10 %.4f  MRR@10 %.4f  nDCG@10 %.4f   "
		       "(FTS5 before: %.4f, %.4f, %.4f)\n", name, s->n_docs, s->n_q, ours.r10 / n, ours.rr / n,
		       ours.ndcg / n, peer.r10 / n, peer.rr / n, peer.ndcg / n);
		printf("  %-28s %5s      %4s           recall@10 %.4f  MRR@10 %.4f  nDCG@10 %.4f   (--proximity on)\n",
		       "", "", "", prox.r10 / n, prox.rr / n, prox.ndcg / n);
	}
	unlink(spath);
	unlink(dbpath);
	unlink(ppath);
	rmdir(dir);
	for (size_t i = 0; i < s->n_docs; i++) {
		free(s->text[i]);
		free(s->key[i]);
	}
	for (size_t q = 0; q < s->n_q; q++) {
		for (char **r = s->rel[q]; *r; r++)
			free(*r);
		free(s->rel[q]);
		free(s->query[q]);
	}
	free(s->text);
	free(s->key);
	free(s->query);
	free(s->rel);
}

/* retrieve --qa: retrieval quality on the MS MARCO and HotpotQA samples,
 * the index against FTS5 bm25() as the index queried it before; with
 * --k1 LIST --b LIST (comma-separated), the TSV dataset, k1, b, docs,
 * queries, recall@1, recall@5, recall@10, mrr@10, ndcg@10 for every pair
 * instead (pipelines/eval.mk eval-retrieval). */
int qa_main(int argc, char **argv)
{
	const char *shared = getenv("SS_SHARED") ? getenv("SS_SHARED") : "../shared";
	char path[1024];
	for (int i = 2; i + 1 < argc; i += 2)
		if (!strcmp(argv[i], "--k1"))
			qa_k1s = argv[i + 1];
		else if (!strcmp(argv[i], "--b"))
			qa_bs = argv[i + 1];
		else
			die("usage", "retrieve --qa [--k1 K1,... --b B,...]");
	if (!qa_k1s != !qa_bs)
		die("usage", "retrieve --qa: --k1 and --b go together");
	if (qa_k1s)
		printf("dataset\tk1\tb\tdocs\tqueries\trecall@1\trecall@5\trecall@10\tmrr@10\tndcg@10\n");
	else
		printf("ss-retrieve retrieval quality (k = 10; each query's relevant documents among all the samples' documents)\n");
	qa_set m = {0}, h = {0};
	snprintf(path, sizeof path, "%s/data/qa/msmarco-v1.1-train-sample200.json", shared);
	qa_msmarco(&m, path);
	qa_run(qa_k1s ? "msmarco" : "MS MARCO v1.1 (200 samples)", &m);
	snprintf(path, sizeof path, "%s/data/qa/hotpotqa-dev-distractor-sample479.json", shared);
	qa_hotpot(&h, path);
	qa_run(qa_k1s ? "hotpotqa" : "HotpotQA distractor (479)", &h);
	return 0;
}
