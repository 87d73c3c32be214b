/* shards.c — a union of index files (shards) queried as one index: the
 * shards' N, avgdl and df summed so that every score is the one an index
 * holding all their documents gives (ss_index_open_shards in ss_index.h);
 * the other calls of ss_index.h go to the shard that holds a document.
 * ref: Lucene's distributed frequency source (the shards' statistics
 * combined before scoring), lib/index/bm25.h (ss_bm25_global). */
#include "index/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* errmsg "<shard path>: <its message>", code kept. */
static int shard_err(ss_index *u, int s, int rc, char *errmsg)
{
	if (errmsg) {
		char em[SS_ERRMSG_MAX];
		snprintf(em, sizeof em, "%s", errmsg);
		ss_errf(errmsg, rc, "%s: %s", u->shard_path[s], em);
	}
	return rc;
}

/* Refuses a document id that two shards hold: a merge of the shards' ids
 * in byte order (each read through docs.id's unique index), O(N log S).
 * Returns 0, SS_ERR_INVALID naming the id and both files, SS_ERR_IO,
 * SS_ERR_NOMEM. */
static int check_unique_ids(ss_index *u, char *errmsg)
{
	int n = u->n_shard, rc = 0;
	sqlite3_stmt **st = calloc((size_t)n, sizeof *st);
	const char **cur = calloc((size_t)n, sizeof *cur);
	if (!st || !cur) {
		free(st);
		free(cur);
		return SS_ERR_NOMEM;
	}
	for (int s = 0; s < n && !rc; s++) {
		ss_index *ix = u->shard[s];
		if (sqlite3_prepare_v2(ix->db, "SELECT id FROM docs ORDER BY id", -1, &st[s], NULL) != SQLITE_OK) {
			rc = shard_err(u, s, ix_sqlerr(ix, errmsg, "reading document ids"), errmsg);
			break;
		}
		int r = sqlite3_step(st[s]);
		if (r == SQLITE_ROW)
			cur[s] = (const char *)sqlite3_column_text(st[s], 0);
		else if (r != SQLITE_DONE)
			rc = shard_err(u, s, ix_sqlerr(ix, errmsg, "reading document ids"), errmsg);
	}
	while (!rc) {
		int lo = -1;
		for (int s = 0; s < n; s++) {
			if (!cur[s])
				continue;
			int c = lo < 0 ? -1 : strcmp(cur[s], cur[lo]);
			if (c == 0) {
				rc = ss_errf(errmsg, SS_ERR_INVALID, "document %s is in %s and in %s: a document must be "
					     "in one shard only", cur[s], u->shard_path[lo], u->shard_path[s]);
				break;
			}
			if (c < 0)
				lo = s;
		}
		if (rc || lo < 0)
			break;
		int r = sqlite3_step(st[lo]);
		cur[lo] = r == SQLITE_ROW ? (const char *)sqlite3_column_text(st[lo], 0) : NULL;
		if (r != SQLITE_ROW && r != SQLITE_DONE)
			rc = shard_err(u, lo, ix_sqlerr(u->shard[lo], errmsg, "reading document ids"), errmsg);
	}
	for (int s = 0; s < n; s++)
		sqlite3_finalize(st[s]);
	free(st);
	free(cur);
	return rc;
}

/* The model fingerprint of a shard's states ("" when it has none). */
static int shard_fingerprint(ss_index *ix, char *fp, char *errmsg)
{
	sqlite3_stmt *st;
	fp[0] = 0;
	if (sqlite3_prepare_v2(ix->db, "SELECT value FROM meta WHERE key = 'fingerprint'", -1, &st, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "reading the fingerprint");
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		snprintf(fp, SS_FINGERPRINT_MAX, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return 0;
}

int ss_index_open_shards(ss_index **out, const char *const *paths, int n, char *errmsg)
{
	*out = NULL;
	if (n < 1 || !paths)
		return ss_errf(errmsg, SS_ERR_INVALID, "no index path");
	if (n == 1)
		return ss_index_open(out, paths[0], errmsg);
	ss_index *u = calloc(1, sizeof *u);
	if (!u)
		return SS_ERR_NOMEM;
	u->shard = calloc((size_t)n, sizeof *u->shard);
	u->shard_path = calloc((size_t)n, sizeof *u->shard_path);
	if (!u->shard || !u->shard_path) {
		ss_index_close(u);
		return SS_ERR_NOMEM;
	}
	u->n_shard = n;
	int rc = 0;
	char fp0[SS_FINGERPRINT_MAX] = "", fp[SS_FINGERPRINT_MAX];
	int fp_of = -1;
	for (int s = 0; s < n && !rc; s++) {
		if (!(u->shard_path[s] = strdup(paths[s]))) {
			rc = SS_ERR_NOMEM;
			break;
		}
		if ((rc = ss_index_open(&u->shard[s], paths[s], errmsg)) ||
		    (rc = shard_fingerprint(u->shard[s], fp, errmsg))) {
			rc = shard_err(u, s, rc, errmsg);
			break;
		}
		/* One model for every state of a union, as of one index. */
		if (fp[0] && fp_of >= 0 && strcmp(fp, fp0))
			rc = ss_errf(errmsg, SS_ERR_MISMATCH, "%s holds states of model %s, %s of model %s",
				     paths[fp_of], fp0, paths[s], fp);
		else if (fp[0] && fp_of < 0) {
			memcpy(fp0, fp, sizeof fp0);
			fp_of = s;
		}
	}
	if (!rc)
		rc = check_unique_ids(u, errmsg);
	if (rc) {
		ss_index_close(u);
		return rc;
	}
	u->query = u->shard[0]->query; /* "open for queries" to the checks of index.c */
	u->lookup = u->shard[0]->lookup;
	u->bm25 = u->shard[0]->bm25;
	*out = u;
	return 0;
}

int64_t ixs_count(ss_index *u)
{
	int64_t n = 0;
	for (int s = 0; s < u->n_shard; s++) {
		int64_t c = ss_index_count(u->shard[s]);
		if (c < 0)
			return c;
		n += c;
	}
	return n;
}

/* A shard's hit in the union's top k: its score, then (for equal scores)
 * the shard's place and its row id, the order of one index built from
 * the shards' inputs in the order given. */
typedef struct {
	double score;
	int shard;
	int64_t rid;
} shard_hit;

/* Whether a ranks below b. */
static int sh_worse(const shard_hit *a, const shard_hit *b)
{
	if (a->score != b->score)
		return a->score < b->score;
	if (a->shard != b->shard)
		return a->shard > b->shard;
	return a->rid > b->rid;
}

static int sh_cmp(const void *a, const void *b)
{
	const shard_hit *x = a, *y = b;
	return sh_worse(y, x) ? -1 : sh_worse(x, y);
}

int ixs_query(ss_index *u, const char *query, int k, const char *const *exclude, size_t n_exclude,
	      ss_index_hit **hits, char *errmsg)
{
	*hits = NULL;
	int n = u->n_shard, rc = 0, n_all = 0, n_hit = 0, began = 0;
	ss_bm25_global g = { 0 };
	shard_hit *all = malloc(((size_t)k * 2) * sizeof *all);
	ss_bm25_hit *top = malloc((size_t)k * sizeof *top);
	int64_t *ex = malloc((n_exclude + 1) * sizeof *ex);
	ss_index_hit *h = calloc((size_t)k, sizeof *h);
	if (!all || !top || !ex || !h) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	if (!query)
		query = "";
	/* One read transaction per shard, held over both passes. */
	for (; began < n && !rc; began++)
		if ((rc = ix_exec(u->shard[began], "BEGIN", errmsg)))
			rc = shard_err(u, began, rc, errmsg);
	/* Pass 1: the union's N, avgdl and df. */
	for (int s = 0; s < n && !rc; s++)
		if ((rc = ss_bm25_stats(u->shard[s]->bm25, query, u->qflags, &g, errmsg)) && rc != SS_ERR_INVALID)
			rc = shard_err(u, s, rc, errmsg);
	/* Pass 2: each shard's top k by them, kept while among the best k so
	 * far; the k-th score so far prunes the following shards. */
	for (int s = 0; s < n && !rc; s++) {
		ss_index *ix = u->shard[s];
		size_t n_ex = 0;
		for (size_t i = 0; i < n_exclude && !rc; i++) {
			sqlite3_bind_text(ix->rid_of, 1, exclude[i], -1, SQLITE_STATIC);
			int r = sqlite3_step(ix->rid_of);
			if (r == SQLITE_ROW)
				ex[n_ex++] = sqlite3_column_int64(ix->rid_of, 0);
			else if (r != SQLITE_DONE)
				rc = shard_err(u, s, ix_sqlerr(ix, errmsg, "query"), errmsg);
			sqlite3_reset(ix->rid_of);
		}
		if (rc)
			break;
		ix_sort_rids(ex, n_ex);
		g.theta = n_all == k ? all[k - 1].score : 0;
		int m = ss_bm25_search(ix->bm25, query, u->qflags, k, ex, n_ex, &g, top, errmsg);
		if (m < 0) {
			rc = shard_err(u, s, m, errmsg);
			break;
		}
		for (int i = 0; i < m; i++)
			all[n_all++] = (shard_hit){ top[i].score, s, top[i].rid };
		qsort(all, (size_t)n_all, sizeof *all, sh_cmp);
		if (n_all > k)
			n_all = k;
	}
	for (int i = 0; i < n_all && !rc; i++) {
		ss_index *ix = u->shard[all[i].shard];
		if ((rc = ix_hit_of_rid(ix, all[i].rid, all[i].score, &h[n_hit], errmsg)))
			rc = shard_err(u, all[i].shard, rc, errmsg);
		h[n_hit++].shard = all[i].shard;
	}
	if (!rc)
		ix_rank_hits(h, n_hit);
done:
	for (int s = 0; s < began; s++)
		sqlite3_exec(u->shard[s]->db, "COMMIT", NULL, NULL, NULL);
	ss_bm25_global_free(&g);
	free(all);
	free(top);
	free(ex);
	if (rc) {
		ss_index_hits_free(h, n_hit);
		return rc;
	}
	if (n_hit == 0) {
		free(h);
		h = NULL;
	}
	*hits = h;
	return n_hit;
}

/* The shard holding document `id` (at most one does: checked at open):
 * its place, or -1 with *rc set and errmsg filled: SS_ERR_NOTFOUND ("no
 * document ID in the index") or a shard's error, naming the shard. */
static int shard_of(ss_index *u, const char *id, int *rc, char *errmsg)
{
	*rc = 0;
	for (int s = 0; s < u->n_shard; s++) {
		int r = ss_index_docs(u->shard[s], id, NULL, NULL, errmsg);
		if (r == 0)
			return s;
		if (r != SS_ERR_NOTFOUND) {
			*rc = shard_err(u, s, r, errmsg);
			return -1;
		}
	}
	*rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	return -1;
}

int ixs_lookup(ss_index *u, const char *id, ss_index_hit *hit, char *errmsg)
{
	int rc, s = shard_of(u, id, &rc, errmsg);
	if (s < 0)
		return rc;
	if ((rc = ss_index_lookup(u->shard[s], id, hit, errmsg)))
		return shard_err(u, s, rc, errmsg);
	hit->shard = s;
	return 0;
}

int ixs_docs(ss_index *u, const char *id, ss_index_doc_fn fn, void *ctx, char *errmsg)
{
	int rc, s;
	if (id) {
		if ((s = shard_of(u, id, &rc, errmsg)) < 0)
			return rc;
		rc = ss_index_docs(u->shard[s], id, fn, ctx, errmsg);
		return rc < 0 ? shard_err(u, s, rc, errmsg) : rc;
	}
	for (s = 0; s < u->n_shard; s++)
		if ((rc = ss_index_docs(u->shard[s], NULL, fn, ctx, errmsg)))
			return rc < 0 ? shard_err(u, s, rc, errmsg) : rc;
	return 0;
}

int ixs_blob(ss_index *u, const char *id, int tokens, void **out, int64_t *len, char *errmsg)
{
	int rc, s = shard_of(u, id, &rc, errmsg);
	if (s < 0)
		return rc;
	if (tokens) {
		int32_t *t;
		rc = ss_index_tokens(u->shard[s], id, &t, len, errmsg);
		*out = t;
	} else {
		char *t;
		size_t n = 0;
		rc = ss_index_text(u->shard[s], id, &t, &n, errmsg);
		*out = t;
		*len = (int64_t)n;
	}
	return rc ? shard_err(u, s, rc, errmsg) : 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The number of distinct terms over the shards (a term of two shards is
 * one), from every shard's vocabulary held in memory at once. */
static int union_terms(ss_index *u, int64_t *n_terms, char *errmsg)
{
	char **t = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (int s = 0; s < u->n_shard && !rc; s++) {
		sqlite3_stmt *st;
		ss_index *ix = u->shard[s];
		if (sqlite3_prepare_v2(ix->db, "SELECT term FROM terms WHERE df > 0", -1, &st, NULL) != SQLITE_OK) {
			rc = shard_err(u, s, ix_sqlerr(ix, errmsg, "index statistics"), errmsg);
			break;
		}
		int r;
		while ((r = sqlite3_step(st)) == SQLITE_ROW) {
			if (n == cap) {
				size_t c = cap ? 2 * cap : 4096;
				char **x = realloc(t, c * sizeof *x);
				if (!x) {
					rc = SS_ERR_NOMEM;
					break;
				}
				t = x;
				cap = c;
			}
			const char *term = (const char *)sqlite3_column_text(st, 0);
			if (!(t[n] = strdup(term ? term : ""))) {
				rc = SS_ERR_NOMEM;
				break;
			}
			n++;
		}
		if (!rc && r != SQLITE_DONE)
			rc = shard_err(u, s, ix_sqlerr(ix, errmsg, "index statistics"), errmsg);
		sqlite3_finalize(st);
	}
	if (!rc) {
		if (n)
			qsort(t, n, sizeof *t, cmp_str);
		*n_terms = 0;
		for (size_t i = 0; i < n; i++)
			*n_terms += i == 0 || strcmp(t[i], t[i - 1]);
	}
	for (size_t i = 0; i < n; i++)
		free(t[i]);
	free(t);
	return rc;
}

int ixs_info(ss_index *u, ss_index_info *info, char *errmsg)
{
	memset(info, 0, sizeof *info);
	for (int s = 0; s < u->n_shard; s++) {
		ss_index_info in;
		int rc = ss_index_info_get(u->shard[s], &in, errmsg);
		if (rc)
			return shard_err(u, s, rc, errmsg);
		info->n_docs += in.n_docs;
		info->n_doc_terms += in.n_doc_terms;
		info->n_tokens += in.n_tokens;
		info->text_bytes += in.text_bytes;
		info->n_texts += in.n_texts;
		info->state_bytes += in.state_bytes;
		info->n_stateless += in.n_stateless;
		info->n_files += in.n_files;
		info->index_bytes += in.index_bytes;
		if (!info->fingerprint[0])
			memcpy(info->fingerprint, in.fingerprint, sizeof info->fingerprint);
	}
	return union_terms(u, &info->n_terms, errmsg);
}

int ixs_files(ss_index *u, ss_index_file_fn fn, void *ctx, char *errmsg)
{
	for (int s = 0; s < u->n_shard; s++) {
		int rc = ss_index_files(u->shard[s], fn, ctx, errmsg);
		if (rc)
			return rc < 0 ? shard_err(u, s, rc, errmsg) : rc;
	}
	return 0;
}

/* The shard of a hit, checked. */
ss_index *ixs_shard_of_hit(ss_index *u, const ss_index_hit *hit)
{
	return hit && hit->shard >= 0 && hit->shard < u->n_shard ? u->shard[hit->shard] : NULL;
}

void ixs_close(ss_index *u)
{
	for (int s = 0; s < u->n_shard; s++)
		ss_index_close(u->shard[s]);
	if (u->shard_path)
		for (int s = 0; s < u->n_shard; s++)
			free(u->shard_path[s]);
	free(u->shard);
	free(u->shard_path);
	u->shard = NULL;
	u->shard_path = NULL;
	u->n_shard = 0;
}
