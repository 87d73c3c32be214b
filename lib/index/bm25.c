/* bm25.c — the handle of the index's term postings (open, close), the
 * build's vocabulary and the compound tokenizer; see bm25.h, and
 * bm25_internal.h for the other bm25_*.c files. */
#include "index/bm25_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bm25_drop_kept(ss_bm25 *b)
{
	for (size_t p = 0; p < b->n_kph; p++) {
		free(b->kph[p].rid);
		free(b->kph[p].tf);
	}
	free(b->kph);
	free(b->krow);
	free(b->kept_query);
	b->kph = NULL;
	b->krow = NULL;
	b->kept_query = NULL;
	b->n_kph = b->n_krow = 0;
}

void bm25_free_doclen(ss_bm25 *b)
{
	for (size_t i = 0; i < b->n_dlc; i++)
		free(b->dlc[i]);
	free(b->dlc);
	b->dlc = NULL;
	b->n_dlc = 0;
}

int bm25_sqlfail(ss_bm25 *b, char *errmsg, const char *what)
{
	return ss_errf(errmsg, SS_ERR_IO, "%s: %s", what, sqlite3_errmsg(b->db));
}

int bm25_bound(int code, char *errmsg, const char *what)
{
	if (code == SQLITE_OK)
		return 0;
	return ss_errf(errmsg, code == SQLITE_TOOBIG ? SS_ERR_TOO_LARGE : SS_ERR_IO, "%s: %s", what,
		       sqlite3_errstr(code));
}

static uint64_t hash_str(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	/* FNV's low bits cluster; the table indexes by them. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

static int vocab_grow(vocab *v)
{
	size_t cap = v->cap ? v->cap * 2 : 1 << 16;
	char **term = calloc(cap, sizeof *term);
	uint32_t *tid = calloc(cap, sizeof *tid);
	if (!term || !tid) {
		free(term);
		free(tid);
		return SS_ERR_NOMEM;
	}
	for (size_t i = 0; i < v->cap; i++) {
		if (!v->tid[i])
			continue;
		size_t j = hash_str(v->term[i], strlen(v->term[i])) & (cap - 1);
		while (tid[j])
			j = (j + 1) & (cap - 1);
		term[j] = v->term[i];
		tid[j] = v->tid[i];
	}
	free(v->term);
	free(v->tid);
	v->term = term;
	v->tid = tid;
	v->cap = cap;
	return 0;
}

int bm25_vocab_reserve(vocab *v)
{
	return 2 * (v->n + 1) > v->cap ? vocab_grow(v) : 0;
}

size_t bm25_vocab_slot(const vocab *v, const char *s, size_t n)
{
	size_t j = hash_str(s, n) & (v->cap - 1);
	while (v->tid[j] && (strncmp(v->term[j], s, n) || v->term[j][n]))
		j = (j + 1) & (v->cap - 1);
	return j;
}

static void vocab_free(vocab *v)
{
	for (size_t i = 0; i < v->cap; i++)
		free(v->term[i]);
	free(v->term);
	free(v->tid);
	memset(v, 0, sizeof *v);
}

static fts5_api *fts5_api_of(sqlite3 *db)
{
	fts5_api *api = NULL;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_pointer(st, 1, (void *)&api, "fts5_api_ptr", NULL);
		sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return api;
}

/* ------------------------------------------------------------------ tokenizer */

/* The index's tokenizer wraps FTS5's "porter unicode61 remove_diacritics 2"
 * and adds compound terms; see bm25.h. */
typedef struct {
	fts5_tokenizer inner;
	Fts5Tokenizer *tok;
} compound_tok;

/* One xTokenize call: the word being read (its tokens joined by spaces). */
typedef struct {
	void *ctx;
	int (*xToken)(void *, int, const char *, int, int, int);
	const char *text;
	int query;
	char *buf;
	size_t len, cap;
	int parts, start, end;
} word_state;

static int has_space(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f')
			return 1;
	return 0;
}

/* The word ends: a document gets its compound term (if it has several
 * tokens) at the position of its last token; a query gets the word's one
 * term, its token or its compound. */
static int word_end(word_state *w)
{
	int rc = SQLITE_OK;
	if (w->parts > 1 || (w->query && w->parts))
		rc = w->xToken(w->ctx, w->query ? 0 : FTS5_TOKEN_COLOCATED, w->buf, (int)w->len, w->start, w->end);
	w->parts = 0;
	w->len = 0;
	return rc;
}

static int word_token(void *ctx, int flags, const char *tok, int n, int start, int end)
{
	word_state *w = ctx;
	int rc;
	if (w->parts && has_space(w->text + w->end, start - w->end) && (rc = word_end(w)) != SQLITE_OK)
		return rc;
	if (w->len + (size_t)n + 2 > w->cap) {
		size_t cap = 2 * (w->len + (size_t)n + 2);
		char *p = realloc(w->buf, cap);
		if (!p)
			return SQLITE_NOMEM;
		w->buf = p;
		w->cap = cap;
	}
	if (w->parts++)
		w->buf[w->len++] = ' ';
	else
		w->start = start;
	memcpy(w->buf + w->len, tok, (size_t)n);
	w->len += (size_t)n;
	w->end = end;
	return w->query ? SQLITE_OK : w->xToken(w->ctx, flags, tok, n, start, end);
}

static int compound_tokenize(Fts5Tokenizer *t, void *ctx, int flags, const char *text, int n,
			     int (*xToken)(void *, int, const char *, int, int, int))
{
	compound_tok *c = (compound_tok *)t;
	word_state w = { ctx, xToken, text, (flags & FTS5_TOKENIZE_QUERY) != 0, NULL, 0, 0, 0, 0, 0 };
	int rc = c->inner.xTokenize(c->tok, &w, flags, text, n, word_token);
	if (rc == SQLITE_OK)
		rc = word_end(&w);
	free(w.buf);
	return rc;
}

static void compound_delete(Fts5Tokenizer *t)
{
	compound_tok *c = (compound_tok *)t;
	if (c && c->tok)
		c->inner.xDelete(c->tok);
	free(c);
}

/* api: the connection's fts5_api; arguments are not taken. */
static int compound_create(void *api_, const char **args, int n_args, Fts5Tokenizer **out)
{
	(void)args;
	fts5_api *api = api_;
	const char *porter[] = { "unicode61", "remove_diacritics", "2" };
	void *ud = NULL;
	compound_tok *c = calloc(1, sizeof *c);
	*out = NULL;
	if (!c)
		return SQLITE_NOMEM;
	if (n_args || api->xFindTokenizer(api, "porter", &ud, &c->inner) != SQLITE_OK ||
	    c->inner.xCreate(ud, porter, 3, &c->tok) != SQLITE_OK) {
		compound_delete((Fts5Tokenizer *)c);
		return SQLITE_ERROR;
	}
	*out = (Fts5Tokenizer *)c;
	return SQLITE_OK;
}

static const fts5_tokenizer compound_tokenizer = { compound_create, compound_delete, compound_tokenize };

int ss_bm25_tokenizer_register(sqlite3 *db)
{
	fts5_api *api = fts5_api_of(db);
	if (!api)
		return SS_ERR_UNSUPPORTED;
	fts5_tokenizer t = compound_tokenizer;
	return api->xCreateTokenizer(api, "ss", api, &t, NULL) == SQLITE_OK ? 0 : SS_ERR_UNSUPPORTED;
}

/* The build's vocabulary: every row of terms into b->v. 0, SS_ERR_FORMAT
 * (a term without its text, or with an id outside 1..UINT32_MAX - 1),
 * SS_ERR_NOMEM, SS_ERR_IO with errmsg. */
static int load_vocab(ss_bm25 *b, char *errmsg)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(b->db, "INSERT INTO terms(tid, term) VALUES(?1, ?2)", -1, &b->ins_term, NULL) !=
		    SQLITE_OK ||
	    sqlite3_prepare_v2(b->db, "SELECT tid, term FROM terms", -1, &st, NULL) != SQLITE_OK) {
		sqlite3_finalize(st);
		return bm25_sqlfail(b, errmsg, "sqlite");
	}
	int rc = vocab_grow(&b->v), s = SQLITE_DONE;
	b->v.next_tid = 1;
	while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(st, 1);
		int64_t tid = sqlite3_column_int64(st, 0);
		if (!t) {
			rc = sqlite3_column_type(st, 1) == SQLITE_NULL
				     ? ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: term %lld has no text", (long long)tid)
				     : SS_ERR_NOMEM;
			break;
		}
		/* tids are u32 in the term vectors, 0 an empty slot here */
		if (tid < 1 || tid >= UINT32_MAX) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: term \"%s\" has id %lld", t, (long long)tid);
			break;
		}
		if ((rc = bm25_vocab_reserve(&b->v)))
			break;
		size_t j = bm25_vocab_slot(&b->v, t, strlen(t));
		if (!(b->v.term[j] = strdup(t))) {
			rc = SS_ERR_NOMEM;
			break;
		}
		b->v.tid[j] = (uint32_t)tid;
		b->v.n++;
		if (tid >= b->v.next_tid)
			b->v.next_tid = tid + 1;
	}
	if (!rc && s != SQLITE_DONE)
		rc = bm25_sqlfail(b, errmsg, "reading the vocabulary");
	sqlite3_finalize(st);
	return rc;
}

int ss_bm25_open(ss_bm25 **out, sqlite3 *db, int build, char *errmsg)
{
	*out = NULL;
	ss_bm25 *b = calloc(1, sizeof *b);
	if (!b)
		return SS_ERR_NOMEM;
	b->db = db;
	b->build = build;
	b->stats_version = -1;
	b->pos_version = -1;
	b->k1 = SS_BM25_K1;
	b->b = SS_BM25_B;
	int rc = 0;
	fts5_api *api = fts5_api_of(db);
	b->tk = compound_tokenizer;
	if (!api || b->tk.xCreate(api, NULL, 0, &b->tok) != SQLITE_OK)
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "this SQLite has no FTS5 porter tokenizer");
	else if (sqlite3_prepare_v2(db, "PRAGMA data_version", -1, &b->data_version, NULL) != SQLITE_OK)
		rc = bm25_sqlfail(b, errmsg, "sqlite");
	else if (build)
		rc = load_vocab(b, errmsg);
	else if (sqlite3_exec(db, "PRAGMA mmap_size = 1099511627776", NULL, NULL, NULL) != SQLITE_OK ||
		 sqlite3_prepare_v2(db, "SELECT tid, df, maxw FROM terms WHERE term = ?1 AND df > 0", -1,
				    &b->find_term, NULL) != SQLITE_OK)
		rc = bm25_sqlfail(b, errmsg, "sqlite");
	if (rc) {
		ss_bm25_close(b);
		return rc;
	}
	*out = b;
	return 0;
}

void ss_bm25_close(ss_bm25 *b)
{
	if (!b)
		return;
	if (b->tok)
		b->tk.xDelete(b->tok);
	sqlite3_finalize(b->ins_term);
	sqlite3_finalize(b->find_term);
	sqlite3_finalize(b->data_version);
	bm25_drop_kept(b);
	vocab_free(&b->v);
	free(b->tids);
	free(b->vec);
	free(b->seq);
	free(b->seq_vec);
	for (size_t i = 0; i < b->n_q; i++)
		free(b->qterms[i]);
	free(b->qterms);
	for (size_t i = 0; i < b->n_ptok; i++)
		free(b->ptok[i]);
	free(b->ptok);
	free(b->ph);
	free(b->dseq);
	bm25_free_doclen(b);
	free(b);
}

void ss_bm25_set_params(ss_bm25 *b, double k1, double bb)
{
	b->k1 = k1;
	b->b = bb;
}
