/* bm25_query.c — a query's syntax (its terms and "phrases"), the plan
 * that picks its search (MaxScore for an OR of terms, the clause search
 * otherwise), and the statistics of a union of shards; see bm25.h. */
#include "index/bm25_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SQLite maps at most the first 2 GB of the file (its SQLITE_MAX_MMAP_SIZE
 * in Debian's build) and reads the rest page by page into its cache; the
 * postings of a large index lie past that, and a term's blob is read by
 * walking its chain of overflow pages. Measured on 3.65 M chunks (64 KB
 * pages): with SQLite's default 2 MB cache one 30-word query read 926
 * distinct pages 3084 times, with 8 MiB 1066 times; across queries, a
 * cache of 64 MiB keeps the common terms' postings (1 GiB did no better).
 * A cache is memory that a process pays for in page faults as it fills,
 * so the first search gets the small one, the following ones the large
 * one (KiB). */
#define QUERY_CACHE_KIB_FIRST 8192
#define QUERY_CACHE_KIB 65536

/* A query word's term, added to b->qterms unless there already. */
static int on_query_token(void *ctx, int flags, const char *tok, int n, int start, int end)
{
	(void)flags;
	(void)start;
	(void)end;
	ss_bm25 *b = ctx;
	for (size_t i = 0; i < b->n_q; i++)
		if (!strncmp(b->qterms[i], tok, (size_t)n) && !b->qterms[i][n])
			return SQLITE_OK;
	if (b->n_q == b->cap_q) {
		size_t cap = b->cap_q ? 2 * b->cap_q : 32;
		char **q = realloc(b->qterms, cap * sizeof *q);
		if (!q)
			return SQLITE_NOMEM;
		b->qterms = q;
		b->cap_q = cap;
	}
	if (!(b->qterms[b->n_q] = strndup(tok, (size_t)n)))
		return SQLITE_NOMEM;
	b->n_q++;
	return SQLITE_OK;
}

/* A phrase's token (document tokenization: its plain tokens, no compounds). */
static int on_phrase_token(void *ctx, int flags, const char *tok, int n, int start, int end)
{
	(void)start;
	(void)end;
	ss_bm25 *b = ctx;
	if (flags & FTS5_TOKEN_COLOCATED)
		return SQLITE_OK;
	if (b->n_ptok == b->cap_ptok) {
		size_t cap = b->cap_ptok ? 2 * b->cap_ptok : 64;
		char **q = realloc(b->ptok, cap * sizeof *q);
		if (!q)
			return SQLITE_NOMEM;
		b->ptok = q;
		b->cap_ptok = cap;
	}
	if (!(b->ptok[b->n_ptok] = strndup(tok, (size_t)n)))
		return SQLITE_NOMEM;
	b->n_ptok++;
	return SQLITE_OK;
}

static void clear_query(ss_bm25 *b)
{
	bm25_drop_kept(b);
	for (size_t i = 0; i < b->n_q; i++)
		free(b->qterms[i]);
	b->n_q = 0;
	for (size_t i = 0; i < b->n_ptok; i++)
		free(b->ptok[i]);
	b->n_ptok = 0;
	b->n_ph = 0;
}

/* Whether phrase p (the last one) has the tokens of an earlier one. */
static int phrase_seen(const ss_bm25 *b, size_t p)
{
	size_t n = b->ph[p + 1] - b->ph[p];
	for (size_t i = 0; i < p; i++) {
		size_t j = 0;
		if (b->ph[i + 1] - b->ph[i] != n)
			continue;
		while (j < n && !strcmp(b->ptok[b->ph[i] + j], b->ptok[b->ph[p] + j]))
			j++;
		if (j == n)
			return 1;
	}
	return 0;
}

/* See bm25.h. Cuts q into b->qterms (the distinct terms outside quotes)
 * and b->ptok/b->ph (the distinct phrases). */
int ss_bm25_parse(ss_bm25 *b, const char *q, unsigned flags, char *errmsg)
{
	clear_query(b);
	size_t n = strlen(q), i = 0;
	if (n > INT_MAX)
		return ss_errf(errmsg, SS_ERR_INVALID, "query of %zu bytes is too long", n);
	while (i <= n) {
		const char *open = flags & SS_BM25_PHRASES ? memchr(q + i, '"', n - i) : NULL;
		size_t end = open ? (size_t)(open - q) : n;
		if (end > i && b->tk.xTokenize(b->tok, b, FTS5_TOKENIZE_QUERY, q + i, (int)(end - i), on_query_token) !=
				       SQLITE_OK)
			return SS_ERR_NOMEM;
		if (!open)
			break;
		const char *close = memchr(open + 1, '"', n - end - 1);
		if (!close)
			return ss_errf(errmsg, SS_ERR_INVALID, "unbalanced quote: the phrase opened at byte %zu is not closed",
				       end + 1);
		if (b->n_ph + 2 > b->cap_ph) {
			size_t cap = b->cap_ph ? 2 * b->cap_ph : 16;
			size_t *ph = realloc(b->ph, cap * sizeof *ph);
			if (!ph)
				return SS_ERR_NOMEM;
			b->ph = ph;
			b->cap_ph = cap;
		}
		b->ph[b->n_ph] = b->n_ptok;
		size_t len = (size_t)(close - open) - 1;
		if (len && b->tk.xTokenize(b->tok, b, FTS5_TOKENIZE_DOCUMENT, open + 1, (int)len, on_phrase_token) !=
				   SQLITE_OK)
			return SS_ERR_NOMEM;
		size_t m = b->n_ptok - b->ph[b->n_ph];
		if (!m)
			return ss_errf(errmsg, SS_ERR_INVALID, "empty phrase at byte %zu (no word between the quotes)",
				       end + 1);
		if (m > SS_BM25_MAX_PHRASE)
			return ss_errf(errmsg, SS_ERR_INVALID, "phrase at byte %zu has %zu words, at most %d", end + 1, m,
				       SS_BM25_MAX_PHRASE);
		b->ph[b->n_ph + 1] = b->n_ptok;
		if (phrase_seen(b, b->n_ph)) {
			for (size_t j = b->ph[b->n_ph]; j < b->n_ptok; j++)
				free(b->ptok[j]);
			b->n_ptok = b->ph[b->n_ph];
		} else {
			b->n_ph++;
		}
		i = (size_t)(close - q) + 1;
	}
	if (!b->n_q && !b->n_ph && !(flags & SS_BM25_EMPTY_OK))
		return ss_errf(errmsg, SS_ERR_INVALID, "empty query (no word to search for)");
	return 0;
}

/* Sets the statistics the search scores by: this index's, or g's (a
 * union's), and the bound lscale on how much a union's avgdl can raise
 * a w above the maxima stored with this index's: w = tf (k1 + 1) / (A +
 * x / avgdl), A = tf + k1 (1 - b), x = k1 b dl >= 0, so w(G) / w(L) =
 * (A + x / L) / (A + x / G) <= max(1, G / L). */
static void set_query_stats(ss_bm25 *b, const ss_bm25_global *g)
{
	b->g = g;
	b->qN = g ? (double)g->n_docs : b->n_docs;
	b->qavgdl = g ? (g->n_docs && g->n_terms ? (double)g->n_terms / (double)g->n_docs : 1) : b->avgdl;
	b->lscale = b->qavgdl > b->avgdl ? b->qavgdl / b->avgdl : 1;
}

int ss_bm25_stats(ss_bm25 *b, const char *query, unsigned flags, ss_bm25_global *g, char *errmsg)
{
	int rc = ss_bm25_parse(b, query, flags & ~SS_BM25_EMPTY_OK, errmsg);
	if (rc || (rc = bm25_load_stats(b, errmsg)))
		return rc;
	if (b->n_ph && (rc = bm25_check_positions(b, errmsg)))
		return rc;
	if (!g->df) {
		g->n_q = b->n_q;
		g->n_ph = b->n_ph;
		if (!(g->df = calloc(b->n_q + b->n_ph + 1, sizeof *g->df)))
			return SS_ERR_NOMEM;
		g->pdf = g->df + b->n_q;
	} else if (g->n_q != b->n_q || g->n_ph != b->n_ph) {
		return ss_errf(errmsg, SS_ERR_INVALID, "the query's terms differ between indexes");
	}
	g->n_docs += (int64_t)b->n_docs;
	g->n_terms += b->n_doc_terms;
	/* The terms' rows and the phrases' documents are kept for the search
	 * of this query that follows (ss_bm25_search), which then neither
	 * looks a term up again nor reads the phrases' positions twice. */
	term_row *row = calloc(b->n_q + 1, sizeof *row);
	clause *ph = calloc(b->n_ph + 1, sizeof *ph);
	unsigned char *buf = b->n_ph ? malloc(BLOCK_MAX_BYTES) : NULL;
	if (!row || !ph || (b->n_ph && !buf))
		rc = SS_ERR_NOMEM;
	for (size_t i = 0; i < b->n_q && !rc; i++)
		if (!(rc = bm25_term_lookup(b, b->qterms[i], &row[i], errmsg)))
			g->df[i] += row[i].df;
	/* A phrase's df is the documents holding it: found as the search
	 * finds them. */
	set_query_stats(b, NULL);
	for (size_t p = 0; p < b->n_ph && !rc; p++)
		if (!(rc = bm25_phrase_clause(b, p, &ph[p], buf, errmsg)))
			g->pdf[p] += (int64_t)ph[p].n;
	sqlite3_blob_close(b->pos_blob);
	b->pos_blob = NULL;
	free(buf);
	if (!rc && !(b->kept_query = strdup(query)))
		rc = SS_ERR_NOMEM;
	if (rc) {
		for (size_t p = 0; ph && p < b->n_ph; p++) {
			free(ph[p].rid);
			free(ph[p].tf);
		}
		free(ph);
		free(row);
		return rc;
	}
	b->kept_flags = flags & ~SS_BM25_EMPTY_OK;
	b->kept_version = b->stats_version;
	b->krow = row;
	b->n_krow = b->n_q;
	b->kph = ph;
	b->n_kph = b->n_ph;
	return 0;
}

void ss_bm25_global_free(ss_bm25_global *g)
{
	free(g->df);
	memset(g, 0, sizeof *g);
}

/* The plan: an OR of terms alone is searched by MaxScore
 * (bm25_maxscore.c); phrases, AND and proximity by the clause search
 * (bm25_clause.c). */
int ss_bm25_search(ss_bm25 *b, const char *query, unsigned flags, int k, const int64_t *exclude,
		   size_t n_exclude, const ss_bm25_global *g, ss_bm25_hit *hits, char *errmsg)
{
	/* The query ss_bm25_stats parsed last: its parse, rows and phrases
	 * are kept (for a union's statistics only: g). */
	int kept = g && b->kept_query && b->kept_flags == (flags & ~SS_BM25_EMPTY_OK) && !strcmp(b->kept_query, query);
	int rc = kept ? 0 : ss_bm25_parse(b, query, flags & ~SS_BM25_EMPTY_OK, errmsg);
	if (rc || (rc = bm25_load_stats(b, errmsg)))
		return rc;
	if (kept && b->kept_version != b->stats_version) {
		/* the file changed in between: look everything up again */
		bm25_drop_kept(b);
	}
	if (g && (g->n_q != b->n_q || g->n_ph != b->n_ph || !g->df)) {
		bm25_drop_kept(b);
		return ss_errf(errmsg, SS_ERR_INVALID, "statistics of another query");
	}
	set_query_stats(b, g);
	int general = b->n_ph || (flags & SS_BM25_ALL) || ((flags & SS_BM25_PROXIMITY) && b->n_q > 1);
	if ((b->n_ph || ((flags & SS_BM25_PROXIMITY) && b->n_q > 1)) && (rc = bm25_check_positions(b, errmsg)))
		return rc;
	/* The page cache: small for a process's first search, large from the
	 * second on (QUERY_CACHE_KIB). */
	if (b->n_searches < 2) {
		char sql[64];
		snprintf(sql, sizeof sql, "PRAGMA cache_size = -%d", b->n_searches ? QUERY_CACHE_KIB : QUERY_CACHE_KIB_FIRST);
		sqlite3_exec(b->db, sql, NULL, NULL, NULL);
	}
	b->n_searches++;
	rc = general ? bm25_clause_search(b, flags, k, exclude, n_exclude, hits, errmsg)
		     : bm25_maxscore_search(b, k, exclude, n_exclude, hits, errmsg);
	bm25_drop_kept(b); /* kept for one search */
	return rc;
}
