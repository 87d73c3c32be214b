/* index.c — BM25 index of documents → state records (SQLite): opening,
 * queries, reading the states of hits; building is lib/index/index_build.c. See
 * ss_index.h. */
#include "index/internal.h"
#include "index/http.h"
#include "stream/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int ix_sqlerr(ss_index *ix, char *errmsg, const char *what)
{
	if (sqlite3_extended_errcode(ix->db) == SQLITE_NOTADB)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index: %s", sqlite3_errmsg(ix->db));
	int se = sqlite3_system_errno(ix->db);
	if (!se) /* a failed write's errno is kept by the file, not the db */
		sqlite3_file_control(ix->db, "main", SQLITE_FCNTL_LAST_ERRNO, &se);
	if (se)
		return ss_errf(errmsg, SS_ERR_IO, "%s: %s (%s)", what, sqlite3_errmsg(ix->db), strerror(se));
	return ss_errf(errmsg, SS_ERR_IO, "%s: %s", what, sqlite3_errmsg(ix->db));
}

int ix_prep(ss_index *ix, sqlite3_stmt **st, const char *sql, char *errmsg)
{
	if (sqlite3_prepare_v3(ix->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "sqlite");
	return 0;
}

/* Runs one statement to completion; 0 or SS_ERR_IO. */
int ix_step_done(ss_index *ix, sqlite3_stmt *st, char *errmsg)
{
	int rc = sqlite3_step(st);
	/* The message first: resetting may clear the system errno. */
	rc = rc != SQLITE_DONE && rc != SQLITE_ROW ? ix_sqlerr(ix, errmsg, "sqlite") : 0;
	sqlite3_reset(st);
	return rc;
}

int ix_exec(ss_index *ix, const char *sql, char *errmsg)
{
	if (sqlite3_exec(ix->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "sqlite");
	return 0;
}

int ix_bound(int code, char *errmsg, const char *what)
{
	if (code == SQLITE_OK)
		return 0;
	return ss_errf(errmsg, code == SQLITE_TOOBIG ? SS_ERR_TOO_LARGE : SS_ERR_IO, "%s: %s", what, sqlite3_errstr(code));
}

int ix_doc_id(sqlite3_stmt *st, int col, int64_t rid, const char **id, char *errmsg)
{
	if ((*id = (const char *)sqlite3_column_text(st, col)))
		return 0;
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document row %lld has no id", (long long)rid);
	return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
}

/* Directory of `path` made absolute and canonical (the file itself may not
 * exist yet). Returns malloc'd string or NULL (errno set). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *d;
	if (!slash)
		d = strdup(".");
	else if (slash == path)
		d = strdup("/");
	else
		d = strndup(path, (size_t)(slash - path));
	if (!d)
		return NULL;
	char *real = realpath(d, NULL);
	free(d);
	return real;
}

/* Checks meta.schema_version. empty_ok: a database with no tables at all is
 * reported as 1 (to be created) instead of an error. */
int ix_check_schema(ss_index *ix, int empty_ok, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(ix->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		int ext = sqlite3_extended_errcode(ix->db);
		sqlite3_finalize(st);
		if (ext == SQLITE_NOTADB)
			return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index: %s", sqlite3_errmsg(ix->db));
		if (ext == SQLITE_READONLY_ROLLBACK) {
			ix->hot_journal = 1;
			return ss_errf(errmsg, SS_ERR_IO,
				    "an interrupted build left a hot journal that needs write access to "
				    "roll back: run 'ss-retrieve build --index' on it with no input");
		}
		return ss_errf(errmsg, SS_ERR_IO, "cannot read the index: %s", sqlite3_errmsg(ix->db));
	}
	int n_tables = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (n_tables == 0) {
		if (empty_ok)
			return 1;
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (empty database: no build has completed)");
	}
	st = NULL;
	if (sqlite3_prepare_v2(ix->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, NULL) != SQLITE_OK)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (no meta table)");
	rc = sqlite3_step(st);
	long v = -1;
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
		const char *s = (const char *)sqlite3_column_text(st, 0);
		char *end;
		v = strtol(s, &end, 10);
		if (end == s || *end)
			v = -1;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW)
		return ss_errf(errmsg, SS_ERR_FORMAT, "not an ss index (no schema_version)");
	if (v < SS_INDEX_SCHEMA_MIN || v > SS_INDEX_SCHEMA_VERSION)
		return ss_errf(errmsg, SS_ERR_VERSION,
			    "index schema version %ld, this build of ss reads versions %d and %d: rebuild the index",
			    v, SS_INDEX_SCHEMA_MIN, SS_INDEX_SCHEMA_VERSION);
	return 0;
}

int ix_open_common(ss_index **out, const char *path, int flags, char *errmsg)
{
	*out = NULL;
	if (!path || !*path)
		return ss_errf(errmsg, SS_ERR_INVALID, "no index path");
	ss_index *ix = calloc(1, sizeof *ix);
	if (!ix)
		return SS_ERR_NOMEM;
	ix->http_timeout = IXH_TIMEOUT_S;
	ix->http_retries = IXH_RETRIES;
	ix->dir = dir_of(path);
	if (!ix->dir) {
		int e = errno;
		free(ix);
		return ss_errf(errmsg, e == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO, "%s", strerror(e));
	}
	if (sqlite3_open_v2(path, &ix->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		int rc = ix->db ? ix_sqlerr(ix, errmsg, "cannot open") : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		if ((flags & SQLITE_OPEN_CREATE) == 0 && access(path, F_OK) != 0)
			rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no such index");
		ss_index_close(ix);
		return rc;
	}
	sqlite3_extended_result_codes(ix->db, 1);
	sqlite3_busy_timeout(ix->db, BUSY_TIMEOUT_MS);
	*out = ix;
	return 0;
}

/* ------------------------------------------------------------------ query */

/* Whether the index has table `name` (texts, tokens, stateless: added to
 * schema 3 after its release). */
static int has_table(ss_index *ix, const char *name)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(ix->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1,
			       &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	int yes = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return yes;
}

/* A hit's row: score (%s), the stateless dtype (%s), the rid; a
 * stateless document has no file (LEFT JOIN). */
#define HIT_SQL                                                                                    \
	"SELECT d.id, %s, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.n_tokens, d.file_id, %s," \
	" d.rid FROM docs d LEFT JOIN files f ON f.file_id = d.file_id"

int ss_index_open(ss_index **out, const char *path, char *errmsg)
{
	ss_index *ix;
	int rc = ix_open_common(&ix, path, SQLITE_OPEN_READONLY, errmsg);
	if (rc)
		return rc;
	rc = ix_check_schema(ix, 0, errmsg);
	if (rc == SS_ERR_IO && ix->hot_journal) {
		/* A crashed build leaves a hot journal only a writer may roll back;
		 * do that once, then go on read-only. */
		sqlite3 *w = NULL;
		if (sqlite3_open_v2(path, &w, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
			sqlite3_busy_timeout(w, BUSY_TIMEOUT_MS);
			sqlite3_exec(w, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
		}
		sqlite3_close(w);
		rc = ix_check_schema(ix, 0, errmsg);
	}
	if (rc)
		goto fail;
	/* An index without the stateless table has none (schema 3 forbids
	 * them); the hit's last column is the dtype of a stateless one. */
	int tier = has_table(ix, "stateless");
	char q[512], l[512];
	snprintf(q, sizeof q, HIT_SQL " WHERE d.rid = ?1", "?2",
		 tier ? "(SELECT s.dtype FROM stateless s WHERE s.rid = d.rid)" : "NULL");
	snprintf(l, sizeof l, HIT_SQL " WHERE d.id = ?1", "0.0",
		 tier ? "(SELECT s.dtype FROM stateless s WHERE s.rid = d.rid)" : "NULL");
	if ((rc = ss_bm25_open(&ix->bm25, ix->db, 0, errmsg)) || (rc = ix_prep(ix, &ix->query, q, errmsg)) ||
	    (rc = ix_prep(ix, &ix->rid_of, "SELECT rid FROM docs WHERE id = ?1", errmsg)) ||
	    (rc = ix_prep(ix, &ix->lookup, l, errmsg)))
		goto fail;
	if (has_table(ix, "tokens") &&
	    (rc = ix_prep(ix, &ix->tokens_of,
		       "SELECT (SELECT t.tokens FROM tokens t WHERE t.rid = d.rid AND length(t.tokens) = 4 * d.text_tokens)"
		       " FROM docs d WHERE d.id = ?1", errmsg)))
		goto fail;
	/* A text whose length is not the indexed one is not this document's
	 * (a row left by a build that did not know the texts table). */
	if (has_table(ix, "texts") &&
	    (rc = ix_prep(ix, &ix->text_of,
		       "SELECT (SELECT t.text FROM texts t WHERE t.rid = d.rid AND length(t.text) = d.text_len)"
		       " FROM docs d WHERE d.id = ?1", errmsg)))
		goto fail;
	*out = ix;
	return 0;
fail:
	ss_index_close(ix);
	return rc;
}

int64_t ss_index_count(ss_index *ix)
{
	sqlite3_stmt *st;
	if (ix && ix->n_shard)
		return ixs_count(ix);
	if (!ix || sqlite3_prepare_v2(ix->db, "SELECT count(*) FROM docs", -1, &st, NULL) != SQLITE_OK)
		return SS_ERR_IO;
	int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : SS_ERR_IO;
	sqlite3_finalize(st);
	return n;
}

char *ix_resolve_path(ss_index *ix, const char *stored)
{
	if (stored[0] == '/' || ss_url_is_http(stored))
		return strdup(stored);
	size_t n = strlen(ix->dir) + strlen(stored) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", ix->dir, stored);
	return p;
}

static int hit_from_row(ss_index *ix, sqlite3_stmt *st, ss_index_hit *h, char *errmsg)
{
	memset(h, 0, sizeof *h);
	const char *id;
	int rc = ix_doc_id(st, 0, sqlite3_column_int64(st, 9), &id, errmsg);
	if (rc)
		return rc;
	h->id = strdup(id);
	h->score = sqlite3_column_double(st, 1);
	const char *stored = (const char *)sqlite3_column_text(st, 2);
	const char *dtype = (const char *)sqlite3_column_text(st, 8);
	h->stateless = !stored;
	h->path = stored ? ix_resolve_path(ix, stored) : NULL;
	if (h->stateless && (!dtype || ss_dtype_parse_for(dtype, SS_DTYPE_STATES, &h->dtype, NULL))) {
		rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document %s has neither a state file nor "
			     "a known dtype to recompute it in (\"%s\")", id, dtype ? dtype : "");
		ss_index_hit_clear(h);
		return rc;
	}
	h->offset = (uint64_t)sqlite3_column_int64(st, 3);
	h->length = (uint64_t)sqlite3_column_int64(st, 4);
	const char *fp = (const char *)sqlite3_column_text(st, 5);
	snprintf(h->fingerprint, sizeof h->fingerprint, "%s", fp ? fp : "");
	h->n_tokens = sqlite3_column_int64(st, 6);
	h->file_id = sqlite3_column_int64(st, 7);
	if (!h->id || (stored && !h->path)) {
		ss_index_hit_clear(h);
		return SS_ERR_NOMEM;
	}
	return 0;
}

static int cmp_rid(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Best first; equal scores by id. */
static int cmp_hit(const void *a, const void *b)
{
	const ss_index_hit *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return strcmp(x->id, y->id);
}

int ss_index_set_bm25(ss_index *ix, double k1, double b, char *errmsg)
{
	if (!ix || !ix->query || !ix->bm25)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (!(k1 >= 0 && k1 <= 1000) || !(b >= 0 && b <= 1))
		return ss_errf(errmsg, SS_ERR_INVALID, "BM25 k1 %g, b %g: want 0 <= k1 <= 1000, 0 <= b <= 1", k1, b);
	if (ix->n_shard) {
		for (int s = 0; s < ix->n_shard; s++)
			ss_bm25_set_params(ix->shard[s]->bm25, k1, b);
		return 0;
	}
	ss_bm25_set_params(ix->bm25, k1, b);
	return 0;
}

int ss_index_set_query(ss_index *ix, unsigned flags, char *errmsg)
{
	if (!ix || !ix->query)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (flags & ~(SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_ALL | SS_INDEX_QUERY_PROXIMITY))
		return ss_errf(errmsg, SS_ERR_INVALID, "query flags %#x: unknown", flags);
	ix->qflags = flags;
	for (int s = 0; s < ix->n_shard; s++)
		ix->shard[s]->qflags = flags;
	return 0;
}

int ss_index_query_check(ss_index *ix, const char *query, char *errmsg)
{
	if (!ix || !ix->query)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	ss_bm25 *b = ix->n_shard ? ix->shard[0]->bm25 : ix->bm25;
	return ss_bm25_parse(b, query ? query : "", ix->qflags | SS_BM25_EMPTY_OK, errmsg);
}

int ss_index_set_fetch(ss_index *ix, unsigned what, char *errmsg)
{
	if (!ix || !ix->query)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (what & ~(SS_INDEX_FETCH_TEXT | SS_INDEX_FETCH_TOKENS))
		return ss_errf(errmsg, SS_ERR_INVALID, "fetch flags %#x: unknown", what);
	ix->fetch = what;
	for (int s = 0; s < ix->n_shard; s++)
		ix->shard[s]->fetch = what;
	return 0;
}

static int doc_blob(ss_index *ix, sqlite3_stmt *st, const char *id, const char *what, char **out, size_t *len,
		    char *errmsg);
static int tokens_of_blob(char *blob, size_t len, int32_t **tokens, int64_t *n_tokens);

/* Reads what ss_index_set_fetch asks into hit h, in the caller's read
 * transaction. */
static int hit_fetch(ss_index *ix, ss_index_hit *h, char *errmsg)
{
	int rc = 0;
	if (ix->fetch & SS_INDEX_FETCH_TEXT)
		rc = doc_blob(ix, ix->text_of, h->id, "reading the text", &h->text, &h->text_len, errmsg);
	if (!rc && (ix->fetch & SS_INDEX_FETCH_TOKENS) && h->stateless) {
		char *blob;
		size_t len;
		rc = doc_blob(ix, ix->tokens_of, h->id, "reading the tokens", &blob, &len, errmsg);
		if (!rc && blob)
			rc = tokens_of_blob(blob, len, &h->tokens, &h->n_stored_tokens);
	}
	return rc;
}

void ix_sort_rids(int64_t *rids, size_t n)
{
	if (n)
		qsort(rids, n, sizeof *rids, cmp_rid);
}

void ix_rank_hits(ss_index_hit *h, int n)
{
	if (n)
		qsort(h, (size_t)n, sizeof *h, cmp_hit);
	for (int i = 0; i < n; i++)
		h[i].rank = i + 1;
}

int ix_hit_of_rid(ss_index *ix, int64_t rid, double score, ss_index_hit *h, char *errmsg)
{
	sqlite3_bind_int64(ix->query, 1, rid);
	sqlite3_bind_double(ix->query, 2, score);
	int s = sqlite3_step(ix->query), rc;
	if (s == SQLITE_ROW)
		rc = hit_from_row(ix, ix->query, h, errmsg);
	else
		rc = s == SQLITE_DONE ? ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: postings name row %lld, "
					     "which is not there", (long long)rid)
				      : ix_sqlerr(ix, errmsg, "query");
	sqlite3_reset(ix->query);
	return rc ? rc : hit_fetch(ix, h, errmsg);
}

int ss_index_query(ss_index *ix, const char *query, int k, const char *const *exclude,
		   size_t n_exclude, ss_index_hit **hits, char *errmsg)
{
	*hits = NULL;
	if (!ix || !ix->query)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (k < 1)
		return ss_errf(errmsg, SS_ERR_INVALID, "k must be at least 1");
	if (ix->n_shard)
		return ixs_query(ix, query, k, exclude, n_exclude, hits, errmsg);
	int64_t *ex = malloc((n_exclude + 1) * sizeof *ex);
	ss_bm25_hit *top = malloc((size_t)k * sizeof *top);
	ss_index_hit *h = calloc((size_t)k, sizeof *h);
	int n = 0, rc = 0;
	size_t n_ex = 0;
	if (!ex || !top || !h) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	/* One read transaction: the postings, statistics and rows of one
	 * snapshot even while a build commits. */
	if ((rc = ix_exec(ix, "BEGIN", errmsg)))
		goto done;
	for (size_t i = 0; i < n_exclude && !rc; i++) {
		sqlite3_bind_text(ix->rid_of, 1, exclude[i], -1, SQLITE_STATIC);
		int s = sqlite3_step(ix->rid_of);
		if (s == SQLITE_ROW)
			ex[n_ex++] = sqlite3_column_int64(ix->rid_of, 0);
		else if (s != SQLITE_DONE)
			rc = ix_sqlerr(ix, errmsg, "query");
		sqlite3_reset(ix->rid_of);
	}
	ix_sort_rids(ex, n_ex);
	int n_top = rc ? rc : ss_bm25_search(ix->bm25, query ? query : "", ix->qflags, k, ex, n_ex, NULL, top, errmsg);
	rc = n_top < 0 ? n_top : 0;
	for (int i = 0; i < n_top && !rc; i++)
		rc = ix_hit_of_rid(ix, top[i].rid, top[i].score, &h[n++], errmsg);
	sqlite3_exec(ix->db, "COMMIT", NULL, NULL, NULL);
	if (!rc)
		ix_rank_hits(h, n);
done:
	free(ex);
	free(top);
	if (rc) {
		ss_index_hits_free(h, n);
		return rc;
	}
	if (n == 0) {
		free(h);
		h = NULL;
	}
	*hits = h;
	return n;
}

void ss_index_hit_clear(ss_index_hit *hit)
{
	if (!hit)
		return;
	free(hit->id);
	free(hit->path);
	free(hit->text);
	free(hit->tokens);
	hit->id = hit->path = hit->text = NULL;
	hit->tokens = NULL;
}

void ss_index_hits_free(ss_index_hit *hits, int n)
{
	if (!hits)
		return;
	for (int i = 0; i < n; i++)
		ss_index_hit_clear(&hits[i]);
	free(hits);
}

int ss_index_lookup(ss_index *ix, const char *id, ss_index_hit *hit, char *errmsg)
{
	memset(hit, 0, sizeof *hit);
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (ix->n_shard)
		return ixs_lookup(ix, id, hit, errmsg);
	sqlite3_bind_text(ix->lookup, 1, id, -1, SQLITE_STATIC);
	int s = sqlite3_step(ix->lookup), rc;
	if (s == SQLITE_ROW)
		rc = hit_from_row(ix, ix->lookup, hit, errmsg);
	else if (s == SQLITE_DONE)
		rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	else
		rc = ix_sqlerr(ix, errmsg, "lookup");
	sqlite3_reset(ix->lookup);
	return rc;
}

/* The blob statement st (text_of, tokens_of: NULL when the index lacks the
 * table) gives for document `id`: *out malloc'ed with a NUL after its *len
 * bytes, or NULL and 0 when there is none. Errors as ss_index_text. */
static int doc_blob(ss_index *ix, sqlite3_stmt *st, const char *id, const char *what, char **out, size_t *len,
		    char *errmsg)
{
	*out = NULL;
	*len = 0;
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (!st) /* built before the table was kept: is the document there? */
		return ss_index_docs(ix, id, NULL, NULL, errmsg);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int s = sqlite3_step(st), rc = 0;
	if (s == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
		size_t n = (size_t)sqlite3_column_bytes(st, 0);
		const void *p = sqlite3_column_blob(st, 0);
		if (!(*out = malloc(n + 1))) {
			rc = SS_ERR_NOMEM;
		} else {
			if (n)
				memcpy(*out, p, n);
			(*out)[n] = 0;
			*len = n;
		}
	} else if (s == SQLITE_DONE) {
		rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	} else if (s != SQLITE_ROW) {
		rc = ix_sqlerr(ix, errmsg, what);
	}
	sqlite3_reset(st);
	return rc;
}

int ss_index_text(ss_index *ix, const char *id, char **text, size_t *len, char *errmsg)
{
	if (ix && ix->n_shard) {
		int64_t n = 0;
		void *t = NULL;
		int rc = ixs_blob(ix, id, 0, &t, &n, errmsg);
		*text = t;
		*len = (size_t)n;
		return rc;
	}
	return doc_blob(ix, ix ? ix->text_of : NULL, id, "reading the text", text, len, errmsg);
}

int ss_index_tokens(ss_index *ix, const char *id, int32_t **tokens, int64_t *n_tokens, char *errmsg)
{
	char *blob;
	size_t len;
	*tokens = NULL;
	*n_tokens = 0;
	if (ix && ix->n_shard) {
		void *t = NULL;
		int rc = ixs_blob(ix, id, 1, &t, n_tokens, errmsg);
		*tokens = t;
		return rc;
	}
	int rc = doc_blob(ix, ix ? ix->tokens_of : NULL, id, "reading the tokens", &blob, &len, errmsg);
	if (rc || !blob)
		return rc;
	return tokens_of_blob(blob, len, tokens, n_tokens);
}

/* The token ids of a tokens blob (len bytes, from doc_blob; freed here):
 * i32 little endian (formats/index.md). 0 or SS_ERR_NOMEM. */
static int tokens_of_blob(char *blob, size_t len, int32_t **tokens, int64_t *n_tokens)
{
	/* room for one token at least: never NULL on success */
	int32_t *t = malloc(len ? len : sizeof *t);
	if (!t) {
		free(blob);
		return SS_ERR_NOMEM;
	}
	const unsigned char *b = (const unsigned char *)blob;
	for (size_t i = 0; i < len / 4; i++)
		t[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
				 (uint32_t)b[4 * i + 3] << 24);
	free(blob);
	*tokens = t;
	*n_tokens = (int64_t)(len / 4);
	return 0;
}

int ss_index_docs(ss_index *ix, const char *id, ss_index_doc_fn fn, void *ctx, char *errmsg)
{
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (ix->n_shard)
		return ixs_docs(ix, id, fn, ctx, errmsg);
	char sql[1024];
	snprintf(sql, sizeof sql,
		 "SELECT d.id, f.path, d.byte_offset, d.frame_length, d.fingerprint, d.n_tokens,"
		 " coalesce(d.text_tokens, -1), d.text_len, d.n_terms, %s, %s, %s, d.rid"
		 " FROM docs d LEFT JOIN files f ON f.file_id = d.file_id %s ORDER BY d.id",
		 ix->text_of ? "EXISTS(SELECT 1 FROM texts t WHERE t.rid = d.rid AND length(t.text) = d.text_len)"
			     : "0",
		 ix->tokens_of ? "EXISTS(SELECT 1 FROM tokens t WHERE t.rid = d.rid AND length(t.tokens) = 4 * d.text_tokens)"
			       : "0",
		 ix->tokens_of ? "(SELECT s.dtype FROM stateless s WHERE s.rid = d.rid)" : "NULL",
		 id ? "WHERE d.id = ?1" : "");
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "listing documents");
	if (id)
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int s = SQLITE_DONE, rc = 0, n = 0;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		n++;
		if (!fn)
			continue;
		ss_index_doc d = {0};
		if ((rc = ix_doc_id(st, 0, sqlite3_column_int64(st, 12), &d.id, errmsg)))
			break;
		const char *stored = (const char *)sqlite3_column_text(st, 1);
		char *path = stored ? ix_resolve_path(ix, stored) : NULL;
		if (stored && !path) {
			free(path);
			rc = SS_ERR_NOMEM;
			break;
		}
		d.path = path;
		d.offset = (uint64_t)sqlite3_column_int64(st, 2);
		d.length = (uint64_t)sqlite3_column_int64(st, 3);
		const char *fp = (const char *)sqlite3_column_text(st, 4);
		d.fingerprint = fp ? fp : "";
		d.n_tokens = sqlite3_column_int64(st, 5);
		d.text_tokens = sqlite3_column_int64(st, 6);
		d.text_len = sqlite3_column_int64(st, 7);
		d.n_terms = sqlite3_column_int64(st, 8);
		d.has_text = sqlite3_column_int(st, 9);
		d.has_tokens = sqlite3_column_int(st, 10);
		d.dtype = (const char *)sqlite3_column_text(st, 11);
		d.stateless = !stored;
		rc = fn(ctx, &d);
		free(path);
	}
	if (!rc && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "listing documents");
	sqlite3_finalize(st);
	if (!rc && id && n == 0)
		rc = ss_errf(errmsg, SS_ERR_NOTFOUND, "no document %s in the index", id);
	return rc;
}

/* The int64 of the first column of `sql`'s first row into *v (0 when no
 * row). Returns 0 or ix_sqlerr's code. */
static int ix_int64(ss_index *ix, const char *sql, int64_t *v, char *errmsg)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "index statistics");
	int s = sqlite3_step(st);
	*v = s == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	int rc = s == SQLITE_ROW || s == SQLITE_DONE ? 0 : ix_sqlerr(ix, errmsg, "index statistics");
	sqlite3_finalize(st);
	return rc;
}

int ss_index_info_get(ss_index *ix, ss_index_info *info, char *errmsg)
{
	memset(info, 0, sizeof *info);
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (ix->n_shard)
		return ixs_info(ix, info, errmsg);
	int64_t page_size = 0, page_count = 0;
	int rc;
	if ((rc = ix_exec(ix, "BEGIN", errmsg)))
		return rc;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(ix->db,
			       "SELECT count(*), coalesce(sum(n_terms), 0), coalesce(sum(n_tokens), 0),"
			       " coalesce(sum(text_len), 0), coalesce(sum(frame_length), 0),"
			       " (SELECT value FROM meta WHERE key = 'fingerprint'), count(*) - count(file_id) FROM docs",
			       -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
		rc = ix_sqlerr(ix, errmsg, "index statistics");
	} else {
		info->n_docs = sqlite3_column_int64(st, 0);
		info->n_doc_terms = sqlite3_column_int64(st, 1);
		info->n_tokens = sqlite3_column_int64(st, 2);
		info->text_bytes = sqlite3_column_int64(st, 3);
		info->state_bytes = sqlite3_column_int64(st, 4);
		info->n_stateless = sqlite3_column_int64(st, 6);
		const char *fp = (const char *)sqlite3_column_text(st, 5);
		snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp ? fp : "");
	}
	sqlite3_finalize(st);
	if (!rc)
		rc = ix_int64(ix, "SELECT count(*) FROM terms", &info->n_terms, errmsg);
	if (!rc)
		rc = ix_int64(ix, "SELECT count(*) FROM files", &info->n_files, errmsg);
	if (!rc && ix->text_of)
		rc = ix_int64(ix, "SELECT count(*) FROM texts t JOIN docs d ON d.rid = t.rid"
				  " WHERE length(t.text) = d.text_len", &info->n_texts, errmsg);
	if (!rc)
		rc = ix_int64(ix, "PRAGMA page_size", &page_size, errmsg);
	if (!rc)
		rc = ix_int64(ix, "PRAGMA page_count", &page_count, errmsg);
	info->index_bytes = page_size * page_count;
	sqlite3_exec(ix->db, "COMMIT", NULL, NULL, NULL);
	return rc;
}

int ss_index_files(ss_index *ix, ss_index_file_fn fn, void *ctx, char *errmsg)
{
	if (!ix || !ix->lookup)
		return ss_errf(errmsg, SS_ERR_INVALID, "index not open for queries");
	if (ix->n_shard)
		return ixs_files(ix, fn, ctx, errmsg);
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(ix->db, "SELECT path FROM files ORDER BY file_id", -1, &st, NULL) != SQLITE_OK)
		return ix_sqlerr(ix, errmsg, "listing state files");
	int s = SQLITE_DONE, rc = 0;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *stored = (const char *)sqlite3_column_text(st, 0);
		if (!stored)
			continue;
		char *path = ix_resolve_path(ix, stored);
		if (!path) {
			rc = ss_errf(errmsg, SS_ERR_NOMEM, "listing state files: out of memory");
			break;
		}
		rc = fn(ctx, path);
		free(path);
	}
	if (!rc && s != SQLITE_ROW && s != SQLITE_DONE)
		rc = ix_sqlerr(ix, errmsg, "listing state files");
	sqlite3_finalize(st);
	return rc;
}

/* Empties a reader slot (closing its files). */
static void slot_clear(reader_slot *s)
{
	if (s->file_id) {
		ss_reader_close(s->r);
		close(s->fd);
	}
	memset(s, 0, sizeof *s);
}

/* The cached reader (and descriptor) of a state file, opening it when
 * needed. */
static int reader_for(ss_index *ix, const ss_index_hit *hit, reader_slot **out, char *errmsg)
{
	for (int i = 0; i < READER_SLOTS; i++)
		if (ix->slots[i].file_id == hit->file_id && ix->slots[i].r) {
			*out = &ix->slots[i];
			return 0;
		}
	reader_slot *s = &ix->slots[ix->next_slot];
	ix->next_slot = (ix->next_slot + 1) % READER_SLOTS;
	slot_clear(s);
	/* The size comes from the descriptor that ss_index_copy reads, so
	 * both see the same file even if the path is replaced later. A FIFO
	 * put in the file's place must not block the query: opened without
	 * blocking, refused unless regular. */
	int fd = ss_open_regular(hit->path);
	if (fd == -2)
		return ss_errf(errmsg, SS_ERR_IO, "document %s: state file is not a regular file "
			    "(replaced since the index was built?)", hit->id);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0) {
		int e = errno, rc = ss_errf(errmsg, e == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO,
					   "document %s: state file: %s", hit->id, strerror(e));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	char em[SS_ERRMSG_MAX];
	int rc = ss_reader_open_regular(&s->r, hit->path, 0, em);
	if (rc) {
		close(fd);
		return ss_errf(errmsg, rc, "document %s: %s", hit->id, em);
	}
	s->fd = fd;
	s->file_id = hit->file_id;
	s->size = (uint64_t)sb.st_size;
	*out = s;
	return 0;
}

/* ss_index_read; trust_length: a metadata read takes the frame's length
 * as indexed instead of walking its blocks (ss_reader_expect_length), for
 * callers that read the frame's arrays by its own blocks afterwards
 * (ss_index_compose); ss-retrieve query copies hit->length bytes of what
 * ss_index_read validates, so that walk stays there. */
static int index_read(ss_index *ix, const ss_index_hit *hit, int meta_only, int trust_length, const ss_record **recp,
		      char *errmsg)
{
	*recp = NULL;
	if (hit && hit->stateless)
		return ss_errf(errmsg, SS_ERR_NOTFOUND, "document %s has no stored state", hit->id);
	if (!ix || !hit || !hit->path || !hit->id)
		return ss_errf(errmsg, SS_ERR_INVALID, "no hit to read");
	if (ix->n_shard) {
		ss_index *sh = ixs_shard_of_hit(ix, hit);
		return sh ? index_read(sh, hit, meta_only, trust_length, recp, errmsg)
			  : ss_errf(errmsg, SS_ERR_INVALID, "hit of no shard");
	}
	if (ss_url_is_http(hit->path))
		return ixh_read(ix, hit, meta_only, recp, errmsg);
	reader_slot *s = NULL;
	int rc = reader_for(ix, hit, &s, errmsg);
	if (rc)
		return rc;
	const char *id = hit->id;
	unsigned long long off = (unsigned long long)hit->offset;
	if (hit->offset >= s->size || hit->length > s->size - hit->offset)
		return ss_errf(errmsg, SS_ERR_TRUNCATED,
			    "document %s at byte offset %llu: the file has %llu bytes, the record needs %llu: "
			    "truncated or replaced since the index was built",
			    id, off, (unsigned long long)s->size, off + (unsigned long long)hit->length);
	if ((rc = ss_reader_seek(s->r, hit->offset)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", id, off, ss_reader_error(s->r));
	const ss_record *rec;
	if (meta_only && trust_length) /* the frame's length as indexed (checked against the file above) */
		ss_reader_expect_length(s->r, hit->length);
	rc = meta_only ? ss_reader_next_meta(s->r, &rec) : ss_reader_next(s->r, &rec);
	if (rc == 0)
		return ss_errf(errmsg, SS_ERR_TRUNCATED, "document %s at byte offset %llu: no record there", id, off);
	if (rc < 0)
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced since the index was built?)",
			    id, off, ss_reader_error(s->r));
	if ((rc = ix_check_record(ix, hit, rec, errmsg)))
		return rc;
	*recp = rec;
	return 0;
}

int ss_index_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **recp, char *errmsg)
{
	return index_read(ix, hit, meta_only, 0, recp, errmsg);
}

/* ss_index_read_state's reading by pieces. */
typedef struct {
	ss_state *s;
	const char *id;
	unsigned long long off;
	int whole;  /* the record is not one this reads by pieces: read it whole */
	uint64_t fed[2], want[2]; /* bytes of conv (0) and ssm (1) read, and their dims' */
	char *errmsg;
} state_into;

/* A conv or ssm array of x->s not exactly its dims' bytes (as
 * ss_record_state refuses it). */
static int state_size_err(const state_into *x, int which)
{
	return ss_errf(x->errmsg, SS_ERR_FORMAT, "document %s at byte offset %llu: field \"%s\" is not %llu bytes of %s",
		       x->id, x->off, which ? "ssm" : "conv", (unsigned long long)x->want[which],
		       ss_dtype_name(x->s->dtype));
}

/* ss_piece_fn of ss_index_read_state: the metadata into x->s, keeping its
 * arrays where the dims are the same; conv's and ssm's pieces widened into
 * them and checked finite, as ss_record_state checks them. */
static int on_state_piece(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	state_into *x = arg;
	ss_state *s = x->s;
	if (which < 0) {
		ss_state m;
		char em[SS_ERRMSG_MAX];
		int rc = ss_record_state_meta(meta, &m, em);
		if (rc)
			return ss_errf(x->errmsg, rc, "document %s at byte offset %llu: %s", x->id, x->off, em);
		if ((m.shuffle && ss_dtype_size(m.dtype) > 1) || ss_dtype_info_of(m.dtype)->scaled) {
			ss_state_free(&m);
			x->whole = 1;
			return SS_ERR_UNSUPPORTED;
		}
		float *conv = s->conv, *ssm = s->ssm;
		if (!conv || !ssm || ss_state_dims_check(&s->dims, &m.dims, NULL)) {
			free(conv);
			free(ssm);
			conv = malloc(ss_state_conv_len(&m.dims) * 4 + 4);
			ssm = malloc(ss_state_ssm_len(&m.dims) * 4 + 4);
		}
		s->conv = s->ssm = NULL;
		ss_state_free(s);
		*s = m;
		s->conv = conv;
		s->ssm = ssm;
		x->want[0] = ss_state_conv_len(&s->dims) * ss_dtype_size(s->dtype);
		x->want[1] = ss_state_ssm_len(&s->dims) * ss_dtype_size(s->dtype);
		return conv && ssm ? 0 : ss_errf(x->errmsg, SS_ERR_NOMEM, "out of memory");
	}
	size_t es = ss_dtype_size(s->dtype), n = len / es, at = (size_t)(off / es);
	if ((which != 0 && which != 1) || off != x->fed[which] || len % es || len > x->want[which] - off)
		return state_size_err(x, which != 0);
	x->fed[which] += len;
	float *dst = (which ? s->ssm : s->conv) + at;
	ss_to_f32(dst, p, s->dtype, n);
	size_t i = ss_nonfinite_find(dst, SS_DTYPE_F32, n);
	if (i < n)
		return ss_errf(x->errmsg, SS_ERR_FORMAT, "document %s at byte offset %llu: field \"%s\": element %zu "
			       "is %g, not finite", x->id, x->off, which ? "ssm" : "conv", at + i, (double)dst[i]);
	return 0;
}

/* ss_index_read_state of a record read whole (ss_index_read's record). */
static int state_whole(ss_index *ix, const ss_index_hit *hit, ss_state *s, char *errmsg)
{
	const ss_record *rec;
	char em[SS_ERRMSG_MAX];
	int rc = ss_index_read(ix, hit, 0, &rec, errmsg);
	if (rc)
		return rc;
	ss_state_free(s);
	if ((rc = ss_record_state(rec, s, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", hit->id,
			       (unsigned long long)hit->offset, em);
	return 0;
}

int ss_index_read_state(ss_index *ix, const ss_index_hit *hit, ss_state *s, char *errmsg)
{
	if (hit && hit->stateless)
		return ss_errf(errmsg, SS_ERR_NOTFOUND, "document %s has no stored state", hit->id);
	if (!ix || !hit || !hit->path || !hit->id || !s)
		return ss_errf(errmsg, SS_ERR_INVALID, "no hit to read");
	if (ix->n_shard) {
		ss_index *sh = ixs_shard_of_hit(ix, hit);
		return sh ? ss_index_read_state(sh, hit, s, errmsg) : ss_errf(errmsg, SS_ERR_INVALID, "hit of no shard");
	}
	if (ss_url_is_http(hit->path))
		return state_whole(ix, hit, s, errmsg);
	reader_slot *sl = NULL;
	int rc = reader_for(ix, hit, &sl, errmsg);
	if (rc)
		return rc;
	unsigned long long off = (unsigned long long)hit->offset;
	if (hit->offset >= sl->size || hit->length > sl->size - hit->offset)
		return ss_errf(errmsg, SS_ERR_TRUNCATED,
			    "document %s at byte offset %llu: the file has %llu bytes, the record needs %llu: "
			    "truncated or replaced since the index was built",
			    hit->id, off, (unsigned long long)sl->size, off + (unsigned long long)hit->length);
	if ((rc = ss_reader_seek(sl->r, hit->offset)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", hit->id, off, ss_reader_error(sl->r));
	char em[SS_ERRMSG_MAX] = "";
	state_into x = { .s = s, .id = hit->id, .off = off, .errmsg = em };
	const ss_record *rec;
	rc = ss_reader_next_pieces(sl->r, &rec, on_state_piece, &x);
	if (x.whole || rc == 2)
		return state_whole(ix, hit, s, errmsg);
	if (rc == 0)
		return ss_errf(errmsg, SS_ERR_TRUNCATED, "document %s at byte offset %llu: no record there", hit->id, off);
	if (rc < 0 && *em)
		return ss_errf(errmsg, rc, "%s", em);
	if (rc < 0)
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s (file replaced since the index was built?)",
			    hit->id, off, ss_reader_error(sl->r));
	for (int which = 0; which < 2; which++)
		if (x.fed[which] != x.want[which])
			return ss_errf(errmsg, state_size_err(&x, which), "%s", em);
	return ix_check_record(ix, hit, rec, errmsg);
}

/* ss_compose_read_fn over hits (ss_index_compose's remote hits). */
typedef struct {
	ss_index *ix;
	const ss_index_hit *hits;
} hit_source;

static int read_hit(void *arg, size_t i, int meta_only, const ss_record **rec, char *errmsg)
{
	const hit_source *h = arg;
	return ss_index_read(h->ix, &h->hits[i], meta_only, rec, errmsg);
}

int ss_index_compose(ss_index *ix, const ss_index_hit *hits, int n, const ss_compose_opts *o,
		     ss_compose_run_opts *r, ss_compose_result *res, char *errmsg)
{
	memset(res, 0, sizeof *res);
	if (n < 1)
		return ss_errf(errmsg, SS_ERR_INVALID, "no hits to compose");
	const ss_record *rec;
	int remote = 0, rc;
	for (int i = 0; i < n; i++) {
		if ((rc = index_read(ix, &hits[i], 1, 1, &rec, errmsg)))
			return rc;
		remote |= ss_url_is_http(hits[i].path);
	}
	hit_source src = {ix, hits};
	const char **paths = remote ? NULL : malloc((size_t)n * sizeof *paths);
	uint64_t *offsets = remote ? NULL : malloc(2 * (size_t)n * sizeof *offsets);
	uint64_t *lengths = offsets ? offsets + n : NULL;
	if (!remote && (!paths || !offsets)) {
		free(paths);
		free(offsets);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; !remote && i < n; i++) {
		paths[i] = hits[i].path;
		offsets[i] = hits[i].offset;
		lengths[i] = hits[i].length;
	}
	r->paths = paths;
	r->n_paths = remote ? 0 : (size_t)n;
	r->offsets = offsets;
	r->lengths = lengths;
	r->read = remote ? read_hit : NULL;
	r->read_arg = remote ? &src : NULL;
	r->n = remote ? (size_t)n : 0;
	rc = ss_compose_run(o, r, res, errmsg);
	r->paths = NULL;
	r->offsets = NULL;
	r->lengths = NULL;
	r->read_arg = NULL;
	free(paths);
	free(offsets);
	return rc;
}

int ix_check_record(ss_index *ix, const ss_index_hit *hit, const ss_record *rec, char *errmsg)
{
	const char *id = hit->id;
	unsigned long long off = (unsigned long long)hit->offset;
	int rc;
	if (strcmp(ss_record_format(rec), SS_FORMAT_STATES))
		return ss_errf(errmsg, SS_ERR_MISMATCH, "document %s at byte offset %llu: a %s record, not a state",
			    id, off, ss_record_format(rec));
	char em[SS_ERRMSG_MAX];
	ss_state_free(&ix->meta);
	if ((rc = ss_record_state_meta(rec, &ix->meta, em)))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: %s", id, off, em);
	if (strcmp(ix->meta.id, id))
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: the record there is document %s: "
			    "state file replaced since the index was built",
			    id, off, ix->meta.id);
	if (strcmp(ix->meta.fingerprint, hit->fingerprint))
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: model fingerprint %s, indexed %s: "
			    "state file replaced since the index was built",
			    id, off, ix->meta.fingerprint, hit->fingerprint);
	if (ss_record_length(rec) != hit->length)
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			    "document %s at byte offset %llu: record of %llu bytes, indexed %llu: "
			    "state file replaced since the index was built",
			    id, off, (unsigned long long)ss_record_length(rec), (unsigned long long)hit->length);
	return 0;
}

int ss_index_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg)
{
	if (ix && ix->n_shard) {
		ss_index *sh = ixs_shard_of_hit(ix, hit);
		return sh ? ss_index_copy(sh, hit, w, errmsg) : ss_errf(errmsg, SS_ERR_INVALID, "hit of no shard");
	}
	if (hit && !hit->stateless && ss_url_is_http(hit->path))
		return ixh_copy(ix, hit, w, errmsg);
	const ss_record *rec;
	int rc = ss_index_read(ix, hit, 1, &rec, errmsg);
	if (rc)
		return rc;
	reader_slot *s = NULL;
	if ((rc = reader_for(ix, hit, &s, errmsg)))
		return rc;
	const char *id = hit->id;
	unsigned long long off = (unsigned long long)hit->offset;
	if (hit->length > SIZE_MAX || hit->length > (uint64_t)INT64_MAX)
		return ss_errf(errmsg, SS_ERR_TOO_LARGE, "document %s at byte offset %llu: record of %llu bytes",
			    id, off, (unsigned long long)hit->length);
	/* ss_index_read checked the size the file had when it was opened: a
	 * file truncated since then is refused here before anything is
	 * written, or, cut during the copy, shows as a short one. */
	struct stat st;
	if (fstat(s->fd, &st) != 0)
		return ss_errf(errmsg, SS_ERR_IO, "document %s at byte offset %llu: %s", id, off, strerror(errno));
	if ((uint64_t)st.st_size < hit->offset + hit->length)
		return ss_errf(errmsg, SS_ERR_TRUNCATED,
			       "document %s at byte offset %llu: the file ends %llu bytes into the record's %llu: "
			       "truncated or replaced since the index was built",
			       id, off,
			       (unsigned long long)((uint64_t)st.st_size > hit->offset ? (uint64_t)st.st_size - hit->offset : 0),
			       (unsigned long long)hit->length);
	if (errmsg)
		errmsg[0] = 0;
	if ((rc = ss_writer_put_annotation(w, hit->rank, hit->score)))
		return rc;
	uint64_t done = 0;
	rc = ss_writer_put_file_range(w, s->fd, hit->offset, hit->length, &done);
	if (rc == SS_ERR_TRUNCATED)
		return ss_errf(errmsg, rc,
			       "document %s at byte offset %llu: the file ends %llu bytes into the record's %llu: "
			       "truncated or replaced since the index was built",
			       id, off, (unsigned long long)done, (unsigned long long)hit->length);
	if (rc && !ss_writer_failed(w))
		return ss_errf(errmsg, rc, "document %s at byte offset %llu: read error: %s", id, off, strerror(errno));
	return rc;
}

int ss_index_prefetch(ss_index *ix, const ss_index_hit *hits, int n, int whole, char *errmsg)
{
	if (!ix || n < 0 || (n > 0 && !hits))
		return ss_errf(errmsg, SS_ERR_INVALID, "no hits to prefetch");
	if (!ix->n_shard)
		return ixh_prefetch(ix, hits, n, whole, errmsg);
	/* Each shard fetches its own hits (its session, its frames). */
	ss_index_hit *mine = malloc((size_t)(n > 0 ? n : 1) * sizeof *mine);
	if (!mine)
		return SS_ERR_NOMEM;
	int rc = 0;
	for (int s = 0; s < ix->n_shard && !rc; s++) {
		int m = 0;
		for (int i = 0; i < n; i++)
			if (hits[i].shard == s)
				mine[m++] = hits[i]; /* shallow: borrowed strings */
		if (m)
			rc = ixh_prefetch(ix->shard[s], mine, m, whole, errmsg);
	}
	free(mine);
	return rc;
}

int ss_index_set_http(ss_index *ix, double timeout_s, int retries, char *errmsg)
{
	if (!ix || !(timeout_s >= 0.001 && timeout_s <= 86400) || retries < 0 || retries > 100)
		return ss_errf(errmsg, SS_ERR_INVALID, "HTTP timeout %g s, %d retries: want 0.001..86400 s, 0..100",
			       timeout_s, retries);
	ix->http_timeout = timeout_s;
	ix->http_retries = retries;
	for (int s = 0; s < ix->n_shard; s++)
		ss_index_set_http(ix->shard[s], timeout_s, retries, NULL);
	return 0;
}

void ss_index_close(ss_index *ix)
{
	if (!ix)
		return;
	ixh_close(ix);
	if (ix->n_shard || ix->shard) { /* a union: its statements are its shards' */
		ixs_close(ix);
		free(ix);
		return;
	}
	sqlite3_stmt **stmts[] = { &ix->find, &ix->ins_doc, &ix->set_text, &ix->set_state, &ix->touch,
				   &ix->file_find, &ix->file_ins, &ix->query, &ix->lookup, &ix->rid_of,
				   &ix->put_text, &ix->del_doc, &ix->del_text, &ix->text_of,
				   &ix->put_tokens, &ix->put_pos, &ix->del_tokens, &ix->del_stateless, &ix->add_hits,
				   &ix->tokens_of };
	for (size_t i = 0; i < sizeof stmts / sizeof *stmts; i++)
		sqlite3_finalize(*stmts[i]);
	ss_bm25_close(ix->bm25);
	if (ix->db) {
		if (ix->building)
			sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
		sqlite3_close(ix->db);
	}
	/* A failed build of a new index leaves nothing; the lock goes last. */
	if (ix->created_path)
		unlink(ix->created_path);
	if (ix->lock_path) {
		unlink(ix->lock_path);
		close(ix->lock_fd);
	}
	free(ix->created_path);
	free(ix->lock_path);
	for (int i = 0; i < READER_SLOTS; i++)
		slot_clear(&ix->slots[i]);
	ss_state_free(&ix->meta);
	ss_index_hit_clear(&ix->dims_ref);
	free(ix->last_path);
	free(ix->dir);
	free(ix);
}
