/* bm25.c — term postings in the index file and exact top-k BM25 by
 * MaxScore; see bm25.h. */
#include "index/bm25.h"
#include "ss.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 128
#define SKIP_BYTES 12
/* A relative margin on every pruning test, so that rounding in the bounds
 * (float block maxima, sums in another order) never drops a document
 * that belongs in the top k. */
#define SLACK (1 + 1e-6)
/* Documents scored first, from the rarest terms, to start the search with
 * a k-th score near its final value. */
#define PRIME 256
#define DL_CHUNK 1024
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

/* Vocabulary of a build: term → tid, open addressing. */
typedef struct {
	char **term;  /* by slot */
	uint32_t *tid; /* by slot, 0 = empty */
	size_t cap, n;
	int64_t next_tid;
} vocab;

/* A query term's row of `terms`, looked up once for both passes of a union
 * (ss_bm25_stats, then ss_bm25_search). found 0: no document holds it. */
typedef struct {
	int found;
	int64_t tid, df;
	double maxw;
} term_row;

/* One clause of a query (a term or a phrase): the documents that hold it,
 * rid ascending, with its frequency in each. */
typedef struct {
	uint32_t *rid, *tf;
	size_t n, cap, at;
	double idf;
	uint32_t tid; /* proximity: the term's id; 0 for a phrase, a compound, an absent term */
} clause;

struct ss_bm25 {
	sqlite3 *db;
	fts5_tokenizer tk;
	Fts5Tokenizer *tok;
	int build;
	vocab v;
	sqlite3_stmt *ins_term, *find_term, *data_version;
	/* per call scratch */
	uint32_t *tids;
	size_t n_tids, cap_tids;
	uint32_t *seq;   /* the document's tokens' tids in order (no compounds) */
	size_t n_seq, cap_seq;
	unsigned char *seq_vec; /* ss_bm25_terms' positions blob */
	size_t seq_vec_cap;
	int64_t n_words; /* tokens of the document (its length: compounds left out) */
	unsigned char *vec; /* ss_bm25_terms' result */
	size_t vec_cap;
	char **qterms;   /* the query's distinct terms (outside quotes) */
	size_t n_q, cap_q;
	char **ptok;     /* the query's phrases' tokens, phrase after phrase */
	size_t n_ptok, cap_ptok;
	size_t *ph;      /* phrase i: ptok[ph[i] .. ph[i + 1]) */
	size_t n_ph, cap_ph;
	uint32_t *dseq;  /* a document's positions, decoded */
	size_t cap_dseq;
	sqlite3_blob *pos_blob; /* positions.seq, open during a search */
	int oom;
	int64_t n_searches;
	/* query-side corpus statistics (loaded lazily, reloaded when the file changes) */
	int64_t stats_version;
	double n_docs, avgdl;
	int64_t n_doc_terms; /* the sum of the documents' lengths (N avgdl) */
	uint32_t **dlc;   /* document lengths by rid, in chunks of DL_CHUNK read when first needed */
	size_t n_dlc;
	sqlite3_blob *dl_blob; /* bm25.doclen, open during a search */
	int64_t max_rid;
	double k1, b; /* the search's parameters (ss_bm25_set_params) */
	/* The search's statistics: this index's, or a union's (ss_bm25_global) */
	double qN, qavgdl;
	double lscale; /* bound on w(global avgdl) / w(this index's avgdl), >= 1 */
	const ss_bm25_global *g; /* NULL: this index alone */
	int64_t pos_version; /* stats_version when meta.positions was found set; -1: not checked */
	/* What ss_bm25_stats learnt of query kept_query (parsed under
	 * kept_flags, file at kept_version) for the search of the same query
	 * that follows it: its terms' rows and its phrases' documents (moved
	 * into the search's clauses). Dropped by any other parse. */
	char *kept_query;
	unsigned kept_flags;
	int64_t kept_version;
	term_row *krow;  /* [n_krow]: n_q of them, or none */
	size_t n_krow;
	clause *kph;     /* [n_kph]: n_ph of them, or none */
	size_t n_kph;
};

/* Forgets what ss_bm25_stats kept for the following search. */
static void drop_kept(ss_bm25 *b)
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

static void free_doclen(ss_bm25 *b)
{
	for (size_t i = 0; i < b->n_dlc; i++)
		free(b->dlc[i]);
	free(b->dlc);
	b->dlc = NULL;
	b->n_dlc = 0;
}

static int sqlfail(ss_bm25 *b, char *errmsg, const char *what)
{
	return ss_errf(errmsg, SS_ERR_IO, "%s: %s", what, sqlite3_errmsg(b->db));
}

/* 0 when a sqlite3_bind_* call returned `code` SQLITE_OK, else its failure:
 * SS_ERR_TOO_LARGE for a value past SQLite's length limit (the statement
 * would otherwise run with NULL there), SS_ERR_IO. */
static int bound(int code, char *errmsg, const char *what)
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

/* Slot of term s[0..n) (empty slot when absent). */
static size_t vocab_slot(const vocab *v, const char *s, size_t n)
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
	if (!api || b->tk.xCreate(api, NULL, 0, &b->tok) != SQLITE_OK) {
		rc = ss_errf(errmsg, SS_ERR_UNSUPPORTED, "this SQLite has no FTS5 porter tokenizer");
		goto fail;
	}
	if (sqlite3_prepare_v2(db, "PRAGMA data_version", -1, &b->data_version, NULL) != SQLITE_OK) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto fail;
	}
	if (build) {
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(db, "INSERT INTO terms(tid, term) VALUES(?1, ?2)", -1, &b->ins_term, NULL) !=
			    SQLITE_OK ||
		    sqlite3_prepare_v2(db, "SELECT tid, term FROM terms", -1, &st, NULL) != SQLITE_OK) {
			sqlite3_finalize(st);
			rc = sqlfail(b, errmsg, "sqlite");
			goto fail;
		}
		if ((rc = vocab_grow(&b->v)))
			goto fail;
		b->v.next_tid = 1;
		int s;
		while ((s = sqlite3_step(st)) == SQLITE_ROW) {
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
			size_t n = strlen(t);
			if (2 * (b->v.n + 1) > b->v.cap && (rc = vocab_grow(&b->v)))
				break;
			size_t j = vocab_slot(&b->v, t, n);
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
			rc = sqlfail(b, errmsg, "reading the vocabulary");
		sqlite3_finalize(st);
		if (rc)
			goto fail;
	} else if (sqlite3_exec(db, "PRAGMA mmap_size = 1099511627776", NULL, NULL, NULL) != SQLITE_OK ||
		   sqlite3_prepare_v2(db, "SELECT tid, df, maxw FROM terms WHERE term = ?1 AND df > 0", -1,
				      &b->find_term, NULL) != SQLITE_OK) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto fail;
	}
	*out = b;
	return 0;
fail:
	ss_bm25_close(b);
	return rc;
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
	drop_kept(b);
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
	free_doclen(b);
	free(b);
}

/* ------------------------------------------------------------------ varints */

static size_t put_varint(unsigned char *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (unsigned char)v;
	return n;
}

/* Reads a varint from p[*i..n); 0 on success, -1 past the end or too long. */
static int get_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
	uint64_t x = 0;
	for (int shift = 0; shift < 64 && *i < n; shift += 7) {
		unsigned char c = p[(*i)++];
		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

/* ------------------------------------------------------------------ build */

static int on_doc_token(void *ctx, int flags, const char *tok, int n, int start, int end)
{
	(void)start;
	(void)end;
	ss_bm25 *b = ctx;
	int plain = !(flags & FTS5_TOKEN_COLOCATED);
	if (plain)
		b->n_words++;
	vocab *v = &b->v;
	if (2 * (v->n + 1) > v->cap && vocab_grow(v))
		return SQLITE_NOMEM;
	size_t j = vocab_slot(v, tok, (size_t)n);
	if (!v->tid[j]) {
		if (v->next_tid > UINT32_MAX || !(v->term[j] = strndup(tok, (size_t)n)))
			return SQLITE_NOMEM;
		v->tid[j] = (uint32_t)v->next_tid++;
		v->n++;
		/* A failed bind leaves its message on the connection, as a
		 * failed step does (ss_bm25_terms reports it). */
		int rc = sqlite3_bind_int64(b->ins_term, 1, v->tid[j]);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_text(b->ins_term, 2, v->term[j], n, SQLITE_STATIC);
		if (rc == SQLITE_OK && (rc = sqlite3_step(b->ins_term)) == SQLITE_DONE)
			rc = SQLITE_OK;
		sqlite3_reset(b->ins_term);
		if (rc != SQLITE_OK)
			return rc;
	}
	if (b->n_tids == b->cap_tids) {
		size_t cap = b->cap_tids ? 2 * b->cap_tids : 1024;
		uint32_t *t = realloc(b->tids, cap * sizeof *t);
		if (!t)
			return SQLITE_NOMEM;
		b->tids = t;
		b->cap_tids = cap;
	}
	b->tids[b->n_tids++] = v->tid[j];
	if (plain) {
		if (b->n_seq == b->cap_seq) {
			size_t cap = b->cap_seq ? 2 * b->cap_seq : 1024;
			uint32_t *t = realloc(b->seq, cap * sizeof *t);
			if (!t)
				return SQLITE_NOMEM;
			b->seq = t;
			b->cap_seq = cap;
		}
		b->seq[b->n_seq++] = v->tid[j];
	}
	return SQLITE_OK;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int ss_bm25_terms(ss_bm25 *b, const char *text, size_t len, const void **vec_out, size_t *vec_len,
		  const void **seq_out, size_t *seq_len, int64_t *n_terms, char *errmsg)
{
	b->n_tids = 0;
	b->n_seq = 0;
	b->n_words = 0;
	int rc = b->tk.xTokenize(b->tok, b, FTS5_TOKENIZE_DOCUMENT, text ? text : "", (int)len, on_doc_token);
	if (rc == SQLITE_NOMEM)
		return SS_ERR_NOMEM;
	if (rc != SQLITE_OK)
		return sqlfail(b, errmsg, "storing a term");
	qsort(b->tids, b->n_tids, sizeof *b->tids, cmp_u32);
	/* Each (tid, tf) pair takes at most 10 bytes. */
	if (b->n_tids * 10 + 1 > b->vec_cap) {
		free(b->vec);
		b->vec_cap = b->n_tids * 10 + 1;
		if (!(b->vec = malloc(b->vec_cap))) {
			b->vec_cap = 0;
			return SS_ERR_NOMEM;
		}
	}
	unsigned char *vec = b->vec;
	size_t vn = 0;
	uint32_t prev = 0;
	for (size_t i = 0; i < b->n_tids;) {
		size_t j = i;
		while (j < b->n_tids && b->tids[j] == b->tids[i])
			j++;
		vn += put_varint(vec + vn, b->tids[i] - prev);
		vn += put_varint(vec + vn, j - i);
		prev = b->tids[i];
		i = j;
	}
	if (b->n_seq * 5 + 1 > b->seq_vec_cap) {
		free(b->seq_vec);
		b->seq_vec_cap = b->n_seq * 5 + 1;
		if (!(b->seq_vec = malloc(b->seq_vec_cap))) {
			b->seq_vec_cap = 0;
			return SS_ERR_NOMEM;
		}
	}
	size_t sn = 0;
	for (size_t i = 0; i < b->n_seq; i++)
		sn += put_varint(b->seq_vec + sn, b->seq[i]);
	*vec_out = vec;
	*vec_len = vn;
	*seq_out = b->seq_vec;
	*seq_len = sn;
	*n_terms = b->n_words;
	return 0;
}

/* One term's postings being written: data and skip entries grow as
 * documents arrive in rid order. */
typedef struct {
	unsigned char *data, *skip;
	uint32_t len, cap, skip_len, skip_cap;
	uint32_t n, last_rid, in_block;
	float block_max;
	double maxw;
} plist;

static int grow(unsigned char **p, uint32_t *cap, uint64_t need)
{
	if (need <= *cap)
		return 0;
	uint64_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	if (c > UINT32_MAX)
		return SS_ERR_TOO_LARGE;
	unsigned char *q = realloc(*p, c);
	if (!q)
		return SS_ERR_NOMEM;
	*p = q;
	*cap = (uint32_t)c;
	return 0;
}

static int plist_end_block(plist *l)
{
	int rc = grow(&l->skip, &l->skip_cap, (uint64_t)l->skip_len + SKIP_BYTES);
	if (rc)
		return rc;
	unsigned char *e = l->skip + l->skip_len;
	wr32(e, l->last_rid);
	wr32(e + 4, l->len);
	memcpy(e + 8, &l->block_max, 4);
	l->skip_len += SKIP_BYTES;
	l->in_block = 0;
	l->block_max = 0;
	return 0;
}

static int plist_add(plist *l, uint32_t rid, uint64_t tf, double w)
{
	int rc = grow(&l->data, &l->cap, (uint64_t)l->len + 20);
	if (rc)
		return rc;
	l->len += (uint32_t)put_varint(l->data + l->len, rid - l->last_rid);
	l->len += (uint32_t)put_varint(l->data + l->len, tf);
	l->last_rid = rid;
	l->n++;
	/* Rounded up so that the float stays an upper bound. */
	float wf = (float)w;
	if ((double)wf < w)
		wf = nextafterf(wf, INFINITY);
	if (wf > l->block_max)
		l->block_max = wf;
	if (w > l->maxw)
		l->maxw = w;
	if (++l->in_block == BLOCK)
		return plist_end_block(l);
	return 0;
}

/* The denominator's length part of w, k1 (1 - b + b dl / avgdl): one per
 * document, computed once for all its terms (w_of). */
static double len_norm(double dl, double avgdl, double k1, double b)
{
	return k1 * (1 - b + b * dl / avgdl);
}

/* w = tf (k1 + 1) / (tf + norm), norm = len_norm(): the one expression
 * the index's maxima and every search use, so that they agree to the bit. */
static inline double w_of(double tf, double norm, double k1)
{
	return tf * (k1 + 1) / (tf + norm);
}

static double tf_weight(double tf, double dl, double avgdl, double k1, double b)
{
	return w_of(tf, len_norm(dl, avgdl, k1, b), k1);
}

void ss_bm25_set_params(ss_bm25 *b, double k1, double bb)
{
	b->k1 = k1;
	b->b = bb;
}

/* The error for document row `rid` (docs.id `id`, NULL when it has none)
 * outside 1..SS_BM25_MAX_RID. */
static int bad_rid(int64_t rid, const char *id, char *errmsg)
{
	return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document %s has row id %lld, outside 1..%d",
		       id ? id : "(no id)", (long long)rid, SS_BM25_MAX_RID);
}

int ss_bm25_commit(ss_bm25 *b, char *errmsg)
{
	sqlite3 *db = b->db;
	sqlite3_stmt *st = NULL;
	plist *pl = NULL;
	uint32_t *doclen = NULL;
	int64_t n_docs = 0, n_terms = 0, max_rid = 0, max_tid = b->v.next_tid - 1;
	int rc = 0, s;
	/* The rids index doclen: one outside its range (an edited file) is
	 * refused before anything is sized by it (two searches of the rowid,
	 * no scan: no ORDER BY). */
	if (sqlite3_prepare_v2(db, "SELECT rid, id FROM docs WHERE rid < 1 OR rid > ?1 LIMIT 1", -1, &st,
			       NULL) != SQLITE_OK) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto done;
	}
	if ((rc = bound(sqlite3_bind_int64(st, 1, SS_BM25_MAX_RID), errmsg, "checking row ids")))
		goto done;
	if ((s = sqlite3_step(st)) == SQLITE_ROW) {
		rc = bad_rid(sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1), errmsg);
		goto done;
	} else if (s != SQLITE_DONE) {
		rc = sqlfail(b, errmsg, "checking row ids");
		goto done;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT count(*), coalesce(sum(n_terms), 0), coalesce(max(rid), 0) FROM docs",
			       -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto done;
	}
	n_docs = sqlite3_column_int64(st, 0);
	n_terms = sqlite3_column_int64(st, 1);
	max_rid = sqlite3_column_int64(st, 2);
	sqlite3_finalize(st);
	st = NULL;
	if (max_rid < 0 || max_rid > SS_BM25_MAX_RID) { /* checked above; kept by the allocation it sizes */
		rc = bad_rid(max_rid, NULL, errmsg);
		goto done;
	}
	double avgdl = n_docs && n_terms ? (double)n_terms / (double)n_docs : 1;
	pl = calloc((size_t)max_tid + 1, sizeof *pl);
	doclen = calloc((size_t)max_rid + 1, sizeof *doclen);
	if (!pl || !doclen) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	if (sqlite3_prepare_v2(db, "SELECT rid, n_terms, terms FROM docs ORDER BY rid", -1, &st, NULL) != SQLITE_OK) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto done;
	}
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t rid64 = sqlite3_column_int64(st, 0);
		if (rid64 < 1 || rid64 > max_rid) {
			rc = bad_rid(rid64, NULL, errmsg);
			goto done;
		}
		uint32_t rid = (uint32_t)rid64;
		int64_t dl = sqlite3_column_int64(st, 1);
		const unsigned char *v = sqlite3_column_blob(st, 2);
		size_t vn = (size_t)sqlite3_column_bytes(st, 2), i = 0;
		doclen[rid] = dl > UINT32_MAX ? UINT32_MAX : (uint32_t)dl;
		uint64_t tid = 0, d, tf;
		while (i < vn) {
			if (get_varint(v, vn, &i, &d) || get_varint(v, vn, &i, &tf) || (tid += d) > (uint64_t)max_tid) {
				rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged term vector in document row %u", rid);
				goto done;
			}
			double w = tf_weight((double)tf, (double)doclen[rid], avgdl, SS_BM25_K1, SS_BM25_B);
			if ((rc = plist_add(&pl[tid], rid, tf, w))) {
				ss_errf(errmsg, rc, "postings of term %llu", (unsigned long long)tid);
				goto done;
			}
		}
	}
	if (s != SQLITE_DONE) {
		rc = sqlfail(b, errmsg, "reading term vectors");
		goto done;
	}
	sqlite3_finalize(st);
	st = NULL;

	sqlite3_stmt *upd = NULL, *del = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE terms SET df = ?2, maxw = ?3, postings = ?4 WHERE tid = ?1", -1, &upd,
			       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM terms WHERE tid = ?1", -1, &del, NULL) != SQLITE_OK) {
		sqlite3_finalize(upd);
		rc = sqlfail(b, errmsg, "sqlite");
		goto done;
	}
	unsigned char *blob = NULL;
	uint32_t blob_cap = 0;
	for (int64_t t = 1; t <= max_tid && !rc; t++) {
		plist *l = &pl[t];
		sqlite3_stmt *q = del;
		if (l->n) {
			if (l->in_block && (rc = plist_end_block(l)))
				break;
			uint64_t size = 4 + (uint64_t)l->skip_len + l->len;
			if ((rc = grow(&blob, &blob_cap, size)))
				break;
			wr32(blob, l->skip_len / SKIP_BYTES);
			memcpy(blob + 4, l->skip, l->skip_len);
			memcpy(blob + 4 + l->skip_len, l->data, l->len);
			q = upd;
			if ((rc = bound(sqlite3_bind_int64(q, 2, l->n), errmsg, "writing postings")) ||
			    (rc = bound(sqlite3_bind_double(q, 3, l->maxw), errmsg, "writing postings")) ||
			    (rc = bound(sqlite3_bind_blob64(q, 4, blob, size, SQLITE_STATIC), errmsg, "writing postings")))
				break;
		}
		if ((rc = bound(sqlite3_bind_int64(q, 1, t), errmsg, "writing postings")))
			break;
		if (sqlite3_step(q) != SQLITE_DONE)
			rc = sqlfail(b, errmsg, "writing postings");
		sqlite3_reset(q);
		free(l->data);
		free(l->skip);
		l->data = l->skip = NULL;
	}
	free(blob);
	sqlite3_finalize(upd);
	sqlite3_finalize(del);
	if (rc)
		goto done;
	if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO bm25 VALUES(1, ?1, ?2, ?3, ?4)", -1, &st, NULL) !=
	    SQLITE_OK) {
		rc = sqlfail(b, errmsg, "sqlite");
		goto done;
	}
	for (int64_t r = 0; r <= max_rid; r++)
		wr32((unsigned char *)&doclen[r], doclen[r]);
	const char *what = "writing corpus statistics";
	if ((rc = bound(sqlite3_bind_int64(st, 1, n_docs), errmsg, what)) ||
	    (rc = bound(sqlite3_bind_int64(st, 2, n_terms), errmsg, what)) ||
	    (rc = bound(sqlite3_bind_int64(st, 3, max_rid), errmsg, what)) ||
	    (rc = bound(sqlite3_bind_blob64(st, 4, doclen, (sqlite3_uint64)(max_rid + 1) * 4, SQLITE_STATIC), errmsg,
			what)))
		goto done;
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = sqlfail(b, errmsg, "writing corpus statistics");
done:
	sqlite3_finalize(st);
	if (pl)
		for (int64_t t = 0; t <= max_tid; t++) {
			free(pl[t].data);
			free(pl[t].skip);
		}
	free(pl);
	free(doclen);
	return rc;
}

/* ------------------------------------------------------------------ query */

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

/* Loads N and avgdl when the file changed since they were loaded (or never
 * were), forgetting the document lengths read so far. */
static int load_stats(ss_bm25 *b, char *errmsg)
{
	int64_t ver = -2;
	if (sqlite3_step(b->data_version) == SQLITE_ROW)
		ver = sqlite3_column_int64(b->data_version, 0);
	sqlite3_reset(b->data_version);
	if (ver == b->stats_version)
		return 0;
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(b->db, "SELECT n_docs, n_terms, max_rid, length(doclen) FROM bm25 WHERE one = 1", -1,
			       &st, NULL) != SQLITE_OK)
		return sqlfail(b, errmsg, "sqlite");
	free_doclen(b);
	b->n_docs = 0;
	b->n_doc_terms = 0;
	b->avgdl = 1;
	b->max_rid = -1;
	int s = sqlite3_step(st);
	if (s == SQLITE_ROW) {
		int64_t n = sqlite3_column_int64(st, 0), t = sqlite3_column_int64(st, 1);
		b->max_rid = sqlite3_column_int64(st, 2);
		int64_t bytes = sqlite3_column_int64(st, 3);
		if (b->max_rid < 0 || b->max_rid > SS_BM25_MAX_RID || bytes != (b->max_rid + 1) * 4) {
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document lengths of %lld bytes", (long long)bytes);
		} else if (!(b->dlc = calloc((size_t)b->max_rid / DL_CHUNK + 1, sizeof *b->dlc))) {
			rc = SS_ERR_NOMEM;
		} else {
			b->n_dlc = (size_t)b->max_rid / DL_CHUNK + 1;
			b->n_docs = (double)n;
			b->n_doc_terms = t;
			b->avgdl = n && t ? (double)t / (double)n : 1;
		}
	} else if (s != SQLITE_DONE) {
		rc = sqlfail(b, errmsg, "reading corpus statistics");
	}
	sqlite3_finalize(st);
	if (!rc)
		b->stats_version = ver;
	return rc;
}

/* Length in terms of document `rid`: a chunk of the lengths is read from
 * bm25.doclen (through b->dl_blob, opened here, closed by the search) the
 * first time one of its documents is scored. Returns 0 or SS_ERR_NOMEM,
 * SS_ERR_IO. */
static int dl_load(ss_bm25 *b, uint32_t rid, double *dl)
{
	if ((int64_t)rid > b->max_rid) {
		*dl = 0;
		return 0;
	}
	size_t c = rid / DL_CHUNK;
	if (!b->dlc[c]) {
		size_t first = c * DL_CHUNK, n = (size_t)b->max_rid + 1 - first;
		if (n > DL_CHUNK)
			n = DL_CHUNK;
		uint32_t *v = malloc(n * 4);
		if (!v)
			return SS_ERR_NOMEM;
		if ((!b->dl_blob && sqlite3_blob_open(b->db, "main", "bm25", "doclen", 1, 0, &b->dl_blob) != SQLITE_OK) ||
		    sqlite3_blob_read(b->dl_blob, v, (int)(n * 4), (int)(first * 4)) != SQLITE_OK) {
			free(v);
			return SS_ERR_IO;
		}
		for (size_t i = 0; i < n; i++)
			v[i] = rd32((const unsigned char *)&v[i]);
		b->dlc[c] = v;
	}
	*dl = b->dlc[c][rid % DL_CHUNK];
	return 0;
}

/* dl_load, its chunk already read: the common case, inline. */
static inline int dl_of(ss_bm25 *b, uint32_t rid, double *dl)
{
	const uint32_t *v;
	if ((int64_t)rid <= b->max_rid && (v = b->dlc[rid / DL_CHUNK])) {
		*dl = v[rid % DL_CHUNK];
		return 0;
	}
	return dl_load(b, rid, dl);
}

/* A term's postings being read: the skip table in memory, one block
 * decoded at a time from the blob. */
typedef struct {
	sqlite3_blob *blob;
	double idf, ub;
	int64_t df;
	uint32_t n_blocks, size;
	unsigned char *skip;
	int64_t blk;    /* decoded block, -1 = none */
	int64_t sblk;   /* shallow position: a block at or before the one that holds the next rid looked up */
	double bscale;  /* a block's bound is bscale times its stored max of w */
	int pos, n;
	uint32_t rid[BLOCK], tf[BLOCK];
	uint32_t cur;   /* current rid; END past the last */
	int qi;         /* the term's place in b->qterms */
} cursor;

#define END UINT32_MAX

static int load_block(cursor *c, int64_t blk, unsigned char *buf)
{
	uint32_t start = blk ? rd32(c->skip + (blk - 1) * SKIP_BYTES + 4) : 0;
	uint32_t end = rd32(c->skip + blk * SKIP_BYTES + 4);
	uint32_t base = 4 + c->n_blocks * SKIP_BYTES;
	if (end < start || end - start > BLOCK * 20 || (uint64_t)base + end > c->size)
		return SS_ERR_FORMAT;
	if (sqlite3_blob_read(c->blob, buf, (int)(end - start), (int)(base + start)) != SQLITE_OK)
		return SS_ERR_IO;
	uint64_t rid = blk ? rd32(c->skip + (blk - 1) * SKIP_BYTES) : 0, d, tf;
	size_t i = 0, n = end - start;
	int k = 0;
	while (i < n && k < BLOCK) {
		/* One byte each, the common case, without the general loop. */
		if (i + 1 < n && buf[i] < 0x80 && buf[i + 1] < 0x80) {
			d = buf[i];
			tf = buf[i + 1];
			i += 2;
		} else if (get_varint(buf, n, &i, &d) || get_varint(buf, n, &i, &tf)) {
			return SS_ERR_FORMAT;
		}
		if ((rid += d) >= END)
			return SS_ERR_FORMAT;
		c->rid[k] = (uint32_t)rid;
		c->tf[k++] = tf > UINT32_MAX ? UINT32_MAX : (uint32_t)tf;
	}
	if (!k || i != n)
		return SS_ERR_FORMAT;
	c->blk = blk;
	c->n = k;
	c->pos = 0;
	c->cur = c->rid[0];
	return 0;
}

static int cur_next(cursor *c, unsigned char *buf)
{
	if (++c->pos < c->n) {
		c->cur = c->rid[c->pos];
		return 0;
	}
	if (c->blk + 1 < c->n_blocks)
		return load_block(c, c->blk + 1, buf);
	c->cur = END;
	return 0;
}

/* The first block of c whose last rid is >= d (n_blocks when none), found
 * from the shallow position on by galloping, without decoding a block:
 * the block that holds d if any posting does. d never decreases between
 * calls on one cursor. */
static int64_t cur_shallow(cursor *c, uint32_t d)
{
	int64_t lo = c->sblk > c->blk ? c->sblk : c->blk, hi, step = 1;
	if (lo < 0)
		lo = 0;
	if (lo >= c->n_blocks || rd32(c->skip + lo * SKIP_BYTES) >= d)
		return c->sblk = lo;
	/* last(lo) < d: gallop to a block whose last rid >= d, then bisect. */
	for (hi = lo + 1; hi < c->n_blocks && rd32(c->skip + hi * SKIP_BYTES) < d; hi = lo + step) {
		lo = hi;
		step *= 2;
	}
	if (hi > c->n_blocks)
		hi = c->n_blocks;
	while (lo + 1 < hi) { /* last(lo) < d, last(hi) >= d or hi = n_blocks */
		int64_t mid = lo + (hi - lo) / 2;
		if (rd32(c->skip + mid * SKIP_BYTES) < d)
			lo = mid;
		else
			hi = mid;
	}
	return c->sblk = hi;
}

/* Upper bound of the term's score in block blk of c (blk < n_blocks): idf
 * times the block's largest w, rounded up when stored; or the term's
 * bound when the search's k1, b are not the ones the maxima hold for. */
static double block_ub(const cursor *c, int64_t blk)
{
	float w;
	memcpy(&w, c->skip + blk * SKIP_BYTES + 8, 4);
	return c->bscale ? c->bscale * w : c->ub;
}

/* Moves c to its first posting with rid >= d. */
static int cur_seek(cursor *c, uint32_t d, unsigned char *buf)
{
	if (c->cur >= d)
		return 0;
	int64_t lo = cur_shallow(c, d);
	if (lo == c->n_blocks) {
		c->cur = END;
		return 0;
	}
	int rc;
	if (lo != c->blk && (rc = load_block(c, lo, buf)))
		return rc;
	while (c->rid[c->pos] < d)
		c->pos++;
	c->cur = c->rid[c->pos];
	return 0;
}

static int cmp_ub(const void *a, const void *b)
{
	double x = ((const cursor *)a)->ub, y = ((const cursor *)b)->ub;
	return x < y ? -1 : x > y;
}

/* hits[0..n) as a min-heap on (score, -rid): hits[0] is the worst. */
static int worse(const ss_bm25_hit *a, const ss_bm25_hit *b)
{
	return a->score < b->score || (a->score == b->score && a->rid > b->rid);
}

static void sift_down(ss_bm25_hit *h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && worse(&h[l], &h[m]))
			m = l;
		if (r < n && worse(&h[r], &h[m]))
			m = r;
		if (m == i)
			return;
		ss_bm25_hit t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void heap_push(ss_bm25_hit *h, int *n, ss_bm25_hit x)
{
	int i = (*n)++;
	h[i] = x;
	while (i && worse(&h[i], &h[(i - 1) / 2])) {
		ss_bm25_hit t = h[i];
		h[i] = h[(i - 1) / 2];
		h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

/* Adds x to the top-k heap hits[0..*n) unless it is worse than all of k. */
static void heap_offer(ss_bm25_hit *h, int *n, int k, ss_bm25_hit x)
{
	if (*n < k) {
		heap_push(h, n, x);
	} else if (worse(&h[0], &x)) {
		h[0] = x;
		sift_down(h, *n, 0);
	}
}

static int cmp_hit(const void *a, const void *b)
{
	const ss_bm25_hit *x = a, *y = b;
	return worse(y, x) ? -1 : worse(x, y);
}

static int excluded(uint32_t rid, const int64_t *ex, size_t n)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ex[mid] < rid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && ex[lo] == rid;
}

/* BM25's idf of a term (or phrase) that df of the n_docs documents hold
 * (Robertson-Zaragoza 2009, eq. 3.3), floored at 1e-6 as FTS5 does, so
 * that a term in most documents still counts a little. */
static double idf_of(const ss_bm25 *b, double df)
{
	double idf = log((b->qN - df + 0.5) / (df + 0.5));
	return idf <= 0 ? 1e-6 : idf;
}

/* Looks up `term` in the terms table into *r. Returns 0 (r->found 0 when
 * no document holds it) or SS_ERR_IO with errmsg. */
static int term_lookup(ss_bm25 *b, const char *term, term_row *r, char *errmsg)
{
	int rc = 0;
	memset(r, 0, sizeof *r);
	sqlite3_bind_text(b->find_term, 1, term, -1, SQLITE_STATIC);
	int s = sqlite3_step(b->find_term);
	if (s == SQLITE_ROW) {
		r->found = 1;
		r->tid = sqlite3_column_int64(b->find_term, 0);
		r->df = sqlite3_column_int64(b->find_term, 1);
		r->maxw = sqlite3_column_double(b->find_term, 2);
	} else if (s != SQLITE_DONE) {
		rc = sqlfail(b, errmsg, "looking up a term");
	}
	sqlite3_reset(b->find_term);
	return rc;
}

/* Opens the postings of term `term` into t (its first block decoded into
 * t's arrays through buf; *tid: its id): 1, 0 when no document holds the
 * term (t untouched), or a negative SS_ERR_* with errmsg (t released).
 * row: the term's row when already looked up (ss_bm25_stats), else NULL. */
static int cur_open(ss_bm25 *b, const char *term, const term_row *row, int64_t gdf, cursor *t, int64_t *tid,
		    unsigned char *buf, char *errmsg)
{
	int rc = 0, found = 0;
	term_row r;
	if (!row && (rc = term_lookup(b, term, &r, errmsg)))
		return rc;
	if (!row)
		row = &r;
	if (row->found) {
		found = 1;
		memset(t, 0, sizeof *t);
		*tid = row->tid;
		t->df = row->df;
		t->idf = idf_of(b, (double)(gdf >= 0 ? gdf : t->df));
		/* maxw holds for the default k1, b and this index's avgdl; for
		 * others w < k1 + 1 (tf/(tf + k1 L) < 1); a union's avgdl scales
		 * it by at most lscale (set_query_stats). */
		int dflt = b->k1 == SS_BM25_K1 && b->b == SS_BM25_B;
		double mw = row->maxw * b->lscale;
		t->ub = t->idf * (dflt && mw < b->k1 + 1 ? mw : b->k1 + 1);
		t->bscale = dflt ? t->idf * b->lscale : 0;
		t->blk = -1;
		unsigned char hdr[4];
		if (sqlite3_blob_open(b->db, "main", "terms", "postings", *tid, 0, &t->blob) != SQLITE_OK)
			rc = sqlfail(b, errmsg, "reading postings");
		else if ((t->size = (uint32_t)sqlite3_blob_bytes(t->blob)) < 4 ||
			 sqlite3_blob_read(t->blob, hdr, 4, 0) != SQLITE_OK || (t->n_blocks = rd32(hdr)) == 0 ||
			 (uint64_t)t->n_blocks * SKIP_BYTES + 4 > t->size)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "damaged postings of term \"%s\"", term);
		else if (!(t->skip = malloc((size_t)t->n_blocks * SKIP_BYTES)))
			rc = SS_ERR_NOMEM;
		else if (sqlite3_blob_read(t->blob, t->skip, (int)(t->n_blocks * SKIP_BYTES), 4) != SQLITE_OK)
			rc = sqlfail(b, errmsg, "reading postings");
		else if ((rc = load_block(t, 0, buf)))
			rc = ss_errf(errmsg, rc, "damaged postings of term \"%s\"", term);
	}
	if (rc && found) {
		sqlite3_blob_close(t->blob);
		free(t->skip);
	}
	return rc ? rc : found;
}

/* A document's score as the sum of its terms' parts in query order,
 * whatever order the search met them in: the same bits in one index and
 * in a union of shards (where the bounds, and so the order, differ), so
 * that equal scores stay equal. v[q], rid[q]: term q's part and the
 * document it is of. */
typedef struct {
	double *v;
	uint32_t *rid;
	size_t n;
} term_sum;

static inline void term_sum_put(term_sum *t, int q, uint32_t rid, double v)
{
	t->v[q] = v;
	t->rid[q] = rid;
}

static double term_sum_of(const term_sum *t, uint32_t rid)
{
	double s = 0;
	for (size_t q = 0; q < t->n; q++)
		if (t->rid[q] == rid)
			s += t->v[q];
	return s;
}

/* Top k of the OR of b->qterms by MaxScore (stats loaded). */
static int maxscore_search(ss_bm25 *b, int k, const int64_t *exclude, size_t n_exclude, ss_bm25_hit *hits,
			   char *errmsg)
{
	int rc = 0;
	cursor *c = calloc(b->n_q, sizeof *c), *pc = NULL;
	int64_t *primed = NULL;
	size_t n_primed = 0;
	unsigned char *buf = malloc(BLOCK * 20);
	double *cum = malloc(b->n_q * sizeof *cum);
	term_sum ts = { malloc(b->n_q * sizeof *ts.v), malloc(b->n_q * sizeof *ts.rid), b->n_q };
	int m = 0, n_hits = 0;
	if (!c || !buf || !cum || !ts.v || !ts.rid) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	for (size_t q = 0; q < b->n_q; q++)
		ts.rid[q] = END;
	double avgdl = b->qavgdl;
	for (size_t i = 0; i < b->n_q; i++) {
		int64_t tid;
		if ((rc = cur_open(b, b->qterms[i], b->n_krow ? &b->krow[i] : NULL, b->g ? b->g->df[i] : -1, &c[m], &tid,
				   buf, errmsg)) < 0)
			goto done;
		c[m].qi = (int)i;
		m += rc;
		rc = 0;
	}
	/* MaxScore: terms by ascending bound; the first `ess` of them are
	 * non-essential (their bounds together cannot lift a document that has
	 * none of the others above the k-th score), so only documents of the
	 * essential terms are candidates, and the others are looked up for a
	 * candidate only while its score could still reach the top k. */
	qsort(c, (size_t)m, sizeof *c, cmp_ub);
	for (int i = 0; i < m; i++)
		cum[i] = c[i].ub + (i ? cum[i - 1] : 0);
	/* Priming: up to PRIME documents of the rarest terms, in rid order,
	 * scored in full through copies of the cursors (sharing blob and skip
	 * table) so that the search proper starts at block 0 with a useful
	 * k-th score; it then skips these documents. A union's later shard
	 * starts with the k-th score of the shards before it (g->theta), a
	 * better one than priming finds: it is not primed. */
	int p0 = m - 1;
	for (int64_t sum = m ? c[m - 1].df : 0; p0 > 0 && sum + c[p0 - 1].df <= PRIME; p0--)
		sum += c[p0 - 1].df;
	pc = m ? malloc((size_t)m * sizeof *pc) : NULL;
	primed = malloc(PRIME * sizeof *primed);
	if (m && (!pc || !primed)) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	if (m)
		memcpy(pc, c, (size_t)m * sizeof *pc);
	while (m && n_primed < PRIME && !(b->g && b->g->theta > 0)) {
		uint32_t d = END;
		for (int i = p0; i < m; i++)
			if (pc[i].cur < d)
				d = pc[i].cur;
		if (d == END)
			break;
		double dl;
		if ((rc = dl_of(b, d, &dl)))
			goto damaged;
		for (int i = 0; i < m; i++) {
			if (i < p0 && (rc = cur_seek(&pc[i], d, buf)))
				goto damaged;
			if (pc[i].cur == d) {
				term_sum_put(&ts, pc[i].qi, d, pc[i].idf * tf_weight(pc[i].tf[pc[i].pos], dl, avgdl, b->k1, b->b));
				if (i >= p0 && (rc = cur_next(&pc[i], buf)))
					goto damaged;
			}
		}
		primed[n_primed++] = d;
		if (!(n_exclude && excluded(d, exclude, n_exclude)))
			heap_offer(hits, &n_hits, k, (ss_bm25_hit){ d, term_sum_of(&ts, d) });
	}
	int ess = 0;
	/* theta: the score a document must reach, the k-th's here or a
	 * union's earlier shards' (ss_bm25_global.theta), whichever is higher */
	double theta0 = b->g ? b->g->theta : 0, theta = theta0;
	size_t next_primed = 0; /* primed[next_primed] is the first primed rid >= d */
	if (n_hits == k && hits[0].score > theta)
		theta = hits[0].score;
	while (theta > 0 && ess < m && cum[ess] * SLACK < theta)
		ess++;
	for (;;) {
		uint32_t d = END;
		for (int i = ess; i < m; i++)
			if (c[i].cur < d)
				d = c[i].cur;
		if (d == END)
			break;
		double dl, s = 0;
		if ((rc = dl_of(b, d, &dl)))
			goto damaged;
		double norm = len_norm(dl, avgdl, b->k1, b->b);
		for (int i = ess; i < m; i++)
			if (c[i].cur == d) {
				double v = c[i].idf * w_of(c[i].tf[c[i].pos], norm, b->k1);
				s += v;
				term_sum_put(&ts, c[i].qi, d, v);
				if ((rc = cur_next(&c[i], buf)))
					goto damaged;
			}
		while (next_primed < n_primed && primed[next_primed] < d)
			next_primed++;
		if ((next_primed < n_primed && primed[next_primed] == d) || (n_exclude && excluded(d, exclude, n_exclude)))
			continue;
		/* The non-essential terms, most weighty first, while the score
		 * could still reach the k-th: a term's block that would hold d
		 * (found in the skip table alone) bounds it more tightly than its
		 * maximum, so that a block is decoded only when it could matter. */
		int pruned = 0;
		for (int i = ess - 1; i >= 0 && !pruned; i--) {
			double rest = i ? cum[i - 1] : 0;
			if ((s + c[i].ub + rest) * SLACK < theta) {
				pruned = 1;
				break;
			}
			if (c[i].cur < d) {
				int64_t sb = cur_shallow(&c[i], d);
				if (sb == c[i].n_blocks)
					continue;
				if ((s + block_ub(&c[i], sb) + rest) * SLACK < theta) {
					pruned = 1;
					break;
				}
				if ((rc = cur_seek(&c[i], d, buf)))
					goto damaged;
			}
			if (c[i].cur == d) {
				double v = c[i].idf * w_of(c[i].tf[c[i].pos], norm, b->k1);
				s += v;
				term_sum_put(&ts, c[i].qi, d, v);
			}
		}
		/* A pruned document cannot reach theta; one whose partial sum
		 * (in bound order) is that far below it cannot either. */
		if (pruned || s * SLACK < theta || (n_hits == k && s * SLACK < hits[0].score))
			continue;
		ss_bm25_hit x = { d, term_sum_of(&ts, d) };
		if (n_hits < k) {
			heap_push(hits, &n_hits, x);
		} else if (worse(&hits[0], &x)) {
			hits[0] = x;
			sift_down(hits, n_hits, 0);
		} else {
			continue;
		}
		if (n_hits == k && hits[0].score > theta) {
			theta = hits[0].score;
			while (ess < m && cum[ess] * SLACK < theta)
				ess++;
		}
	}
	qsort(hits, (size_t)n_hits, sizeof *hits, cmp_hit);
	rc = n_hits;
	goto done;
damaged:
	rc = rc == SS_ERR_IO ? sqlfail(b, errmsg, "reading postings") : ss_errf(errmsg, rc, "damaged postings");
done:
	sqlite3_blob_close(b->dl_blob);
	b->dl_blob = NULL;
	for (int i = 0; c && i < m; i++) {
		sqlite3_blob_close(c[i].blob);
		free(c[i].skip);
	}
	free(c);
	free(pc);
	free(primed);
	free(buf);
	free(cum);
	free(ts.v);
	free(ts.rid);
	return rc;
}

/* ------------------------------------------------------------------ query syntax */

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
	drop_kept(b);
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

/* ------------------------------------------------------------------ phrases, AND, proximity */

static int clause_push(clause *c, uint32_t rid, uint32_t tf)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 256;
		uint32_t *r = realloc(c->rid, cap * sizeof *r), *t;
		if (!r)
			return SS_ERR_NOMEM;
		c->rid = r;
		if (!(t = realloc(c->tf, cap * sizeof *t)))
			return SS_ERR_NOMEM;
		c->tf = t;
		c->cap = cap;
	}
	c->rid[c->n] = rid;
	c->tf[c->n++] = tf;
	return 0;
}

/* Every posting of `term` into c (empty when no document holds it). */
static int term_clause(ss_bm25 *b, const char *term, const term_row *row, int64_t gdf, clause *c, unsigned char *buf,
		       char *errmsg)
{
	cursor t;
	int64_t tid;
	int rc = cur_open(b, term, row, gdf, &t, &tid, buf, errmsg);
	if (rc <= 0)
		return rc;
	rc = 0;
	c->idf = t.idf;
	c->tid = strchr(term, ' ') ? 0 : (uint32_t)tid;
	while (!rc && t.cur != END)
		if (!(rc = clause_push(c, t.cur, t.tf[t.pos])))
			rc = cur_next(&t, buf);
	sqlite3_blob_close(t.blob);
	free(t.skip);
	if (rc && rc != SS_ERR_NOMEM)
		rc = rc == SS_ERR_IO ? sqlfail(b, errmsg, "reading postings")
				     : ss_errf(errmsg, rc, "damaged postings of term \"%s\"", term);
	return rc;
}

/* Refuses phrases and proximity on an index without positions for every
 * document (meta.positions, lib/index/index_build.c). */
static int check_positions(ss_bm25 *b, char *errmsg)
{
	sqlite3_stmt *st;
	int ok = 0;
	if (b->pos_version == b->stats_version)
		return 0;
	if (sqlite3_prepare_v2(b->db, "SELECT value = '1' FROM meta WHERE key = 'positions'", -1, &st, NULL) != SQLITE_OK)
		return sqlfail(b, errmsg, "sqlite");
	if (sqlite3_step(st) == SQLITE_ROW)
		ok = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (!ok)
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED,
			       "this index has no word positions (phrases, proximity): rebuild it with "
			       "'ss-retrieve build --index DB' (and its streams when it has no texts)");
	b->pos_version = b->stats_version;
	return 0;
}

/* Document rid's positions into b->dseq; *n: their number. Returns 0,
 * SS_ERR_NOMEM, SS_ERR_FORMAT (none stored, or a damaged blob), SS_ERR_IO. */
static int read_positions(ss_bm25 *b, uint32_t rid, size_t *n, char *errmsg)
{
	int s = b->pos_blob ? sqlite3_blob_reopen(b->pos_blob, rid)
			    : sqlite3_blob_open(b->db, "main", "positions", "seq", rid, 0, &b->pos_blob);
	if (s != SQLITE_OK) {
		if (s != SQLITE_ERROR)
			return sqlfail(b, errmsg, "reading positions");
		sqlite3_blob_close(b->pos_blob);
		b->pos_blob = NULL;
		return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: document row %u has no positions", rid);
	}
	size_t len = (size_t)sqlite3_blob_bytes(b->pos_blob);
	/* Read into the tail of dseq, decoded into its head: a varint takes a byte at least. */
	size_t words = len + (len + 3) / 4 + 1;
	if (words > b->cap_dseq) {
		uint32_t *d = realloc(b->dseq, words * sizeof *d);
		if (!d)
			return SS_ERR_NOMEM;
		b->dseq = d;
		b->cap_dseq = words;
	}
	unsigned char *raw = (unsigned char *)(b->dseq + len);
	if (len && sqlite3_blob_read(b->pos_blob, raw, (int)len, 0) != SQLITE_OK)
		return sqlfail(b, errmsg, "reading positions");
	size_t i = 0, m = 0;
	while (i < len) {
		uint64_t v;
		if (get_varint(raw, len, &i, &v) || v > UINT32_MAX)
			return ss_errf(errmsg, SS_ERR_FORMAT, "damaged index: positions of document row %u", rid);
		b->dseq[m++] = (uint32_t)v;
	}
	*n = m;
	return 0;
}

/* Phrase p's documents, each with its number of occurrences (every start
 * position where its tokens stand in order, overlaps counted: FTS5's phrase
 * frequency), and its idf from their number. The documents holding every
 * token are found by the rarest token's postings, the others' cursors
 * seeking through their skip tables (a common token's blocks are decoded
 * only where the rare one has a document); each such document's positions
 * are then read. */
static int phrase_clause(ss_bm25 *b, size_t p, clause *c, unsigned char *buf, char *errmsg)
{
	size_t m = b->ph[p + 1] - b->ph[p], opened = 0, r = 0;
	cursor *t = calloc(m, sizeof *t);
	uint32_t tid[SS_BM25_MAX_PHRASE];
	int rc = t ? 0 : SS_ERR_NOMEM, said = 1; /* said: errmsg is set for rc */
	for (size_t j = 0; !rc && j < m; j++) {
		int64_t id;
		if ((rc = cur_open(b, b->ptok[b->ph[p] + j], NULL, -1, &t[j], &id, buf, errmsg)) <= 0)
			break; /* an error, or a token no document holds: no document */
		rc = 0;
		opened++;
		tid[j] = (uint32_t)id;
		if (t[j].df < t[r].df)
			r = j;
	}
	said = rc != 0;
	while (!rc && opened == m && t[r].cur != END) {
		uint32_t d = t[r].cur, next = d;
		for (size_t j = 0; !rc && j < m; j++)
			if (j != r && !(rc = cur_seek(&t[j], d, buf)) && t[j].cur > next)
				next = t[j].cur;
		if (rc)
			break;
		if (next == END)
			break;
		if (next != d) {
			rc = cur_seek(&t[r], next, buf);
			continue;
		}
		/* one token: its postings' tf is its occurrences */
		size_t n = 0;
		uint32_t tf = m == 1 ? t[r].tf[t[r].pos] : 0;
		if (m > 1 && (rc = read_positions(b, d, &n, errmsg))) {
			said = 1;
			break;
		}
		for (size_t i = 0; m > 1 && i + m <= n; i++) {
			size_t q = 0;
			while (q < m && b->dseq[i + q] == tid[q])
				q++;
			tf += q == m;
		}
		if ((tf && (rc = clause_push(c, d, tf))) || (rc = cur_next(&t[r], buf)))
			break;
	}
	if (rc && !said && rc != SS_ERR_NOMEM)
		rc = rc == SS_ERR_IO ? sqlfail(b, errmsg, "reading postings") : ss_errf(errmsg, rc, "damaged postings");
	c->idf = idf_of(b, (double)(b->g ? b->g->pdf[p] : (int64_t)c->n));
	c->tid = 0;
	for (size_t j = 0; j < opened; j++) {
		sqlite3_blob_close(t[j].blob);
		free(t[j].skip);
	}
	free(t);
	return rc;
}

/* dl_of with errmsg set on failure. */
static int dl_get(ss_bm25 *b, uint32_t rid, double *dl, char *errmsg)
{
	int rc = dl_of(b, rid, dl);
	return rc == SS_ERR_IO ? sqlfail(b, errmsg, "reading document lengths") : rc;
}

/* A document scored by the clauses, before proximity: score, and the bound
 * of its score with proximity. */
typedef struct {
	uint32_t rid;
	double score, ub;
} cand;

static int cmp_cand_ub(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->ub != y->ub)
		return x->ub > y->ub ? -1 : 1;
	return x->rid < y->rid ? -1 : x->rid > y->rid;
}

/* BM25TP's proximity score of document rid (length dl) for the clauses
 * c[0..n) with a tid; acc: scratch, n doubles. */
static int tp_score(ss_bm25 *b, uint32_t rid, double dl, const clause *c, int n, double *acc, double *out,
		    char *errmsg)
{
	size_t len;
	int rc = read_positions(b, rid, &len, errmsg);
	if (rc)
		return rc;
	for (int j = 0; j < n; j++)
		acc[j] = 0;
	int last = -1;
	size_t last_p = 0;
	for (size_t p = 0; p < len; p++) {
		int j = 0;
		while (j < n && c[j].tid != b->dseq[p])
			j++;
		if (j == n)
			continue;
		if (last >= 0 && last != j) {
			double d = (double)(p - last_p);
			acc[j] += c[last].idf / (d * d);
			acc[last] += c[j].idf / (d * d);
		}
		last = j;
		last_p = p;
	}
	double kk = len_norm(dl, b->qavgdl, b->k1, b->b), s = 0;
	for (int j = 0; j < n; j++)
		if (acc[j] > 0)
			s += (c[j].idf < 1 ? c[j].idf : 1) * acc[j] * (b->k1 + 1) / (acc[j] + kk);
	*out = s;
	return 0;
}

/* Top k of the query's clauses (b->qterms, then the phrases): all of them
 * (SS_BM25_ALL) or any; with SS_BM25_PROXIMITY, plus BM25TP's proximity
 * score of the terms. Every candidate is scored (no pruning); proximity
 * reads positions only for the candidates whose bound can reach the top k. */
static int clause_search(ss_bm25 *b, unsigned flags, int k, const int64_t *exclude, size_t n_exclude,
			 ss_bm25_hit *hits, char *errmsg)
{
	int n_cl = (int)(b->n_q + b->n_ph), n_hits = 0, n_tp = 0, rc = 0;
	clause *c = calloc((size_t)n_cl, sizeof *c);
	unsigned char *buf = malloc(BLOCK * 20);
	double *acc = malloc((size_t)n_cl * sizeof *acc);
	clause *tpc = malloc((size_t)n_cl * sizeof *tpc); /* tp_score's terms, shallow copies */
	char *is_tp = calloc((size_t)n_cl, 1);
	cand *cd = NULL;
	size_t n_cd = 0, cap_cd = 0;
	if (!c || !buf || !acc || !tpc || !is_tp) {
		rc = SS_ERR_NOMEM;
		goto done;
	}
	for (size_t i = 0; i < b->n_q && !rc; i++)
		rc = term_clause(b, b->qterms[i], b->n_krow ? &b->krow[i] : NULL, b->g ? b->g->df[i] : -1, &c[i], buf,
				 errmsg);
	for (size_t p = 0; p < b->n_ph && !rc; p++) {
		if (!b->n_kph) {
			rc = phrase_clause(b, p, &c[b->n_q + p], buf, errmsg);
			continue;
		}
		/* the documents ss_bm25_stats found, scored by the union's df */
		c[b->n_q + p] = b->kph[p];
		b->kph[p] = (clause){ 0 };
		c[b->n_q + p].idf = idf_of(b, (double)b->g->pdf[p]);
	}
	if (rc)
		goto done;
	/* The terms with positions, in query order (the clauses keep theirs:
	 * a score sums its parts in query order, as maxscore_search's do). */
	if (flags & SS_BM25_PROXIMITY) {
		for (int i = 0; i < (int)b->n_q; i++)
			if (c[i].tid && c[i].n) {
				tpc[n_tp++] = c[i];
				is_tp[i] = 1;
			}
		if (n_tp < 2)
			n_tp = 0;
	}
	int all = (flags & SS_BM25_ALL) != 0;
	for (int i = 0; all && i < n_cl; i++)
		if (!c[i].n)
			goto done;
	for (;;) {
		uint32_t d = END;
		for (int i = 0; i < n_cl; i++)
			if (c[i].at < c[i].n && c[i].rid[c[i].at] < d)
				d = c[i].rid[c[i].at];
		if (d == END)
			break;
		double dl, s = 0, ub = 0;
		int n_in = 0, n_tp_in = 0;
		if ((rc = dl_get(b, d, &dl, errmsg)))
			goto done;
		double norm = len_norm(dl, b->qavgdl, b->k1, b->b);
		for (int i = 0; i < n_cl; i++)
			if (c[i].at < c[i].n && c[i].rid[c[i].at] == d) {
				s += c[i].idf * w_of(c[i].tf[c[i].at], norm, b->k1);
				n_in++;
				if (n_tp && is_tp[i]) {
					n_tp_in++;
					ub += (c[i].idf < 1 ? c[i].idf : 1) * (b->k1 + 1);
				}
				c[i].at++;
			}
		if ((all && n_in < n_cl) || (n_exclude && excluded(d, exclude, n_exclude)))
			continue;
		if (n_tp_in < 2) {
			heap_offer(hits, &n_hits, k, (ss_bm25_hit){ d, s });
			continue;
		}
		if (n_cd == cap_cd) {
			size_t cap = cap_cd ? 2 * cap_cd : 1024;
			cand *x = realloc(cd, cap * sizeof *x);
			if (!x) {
				rc = SS_ERR_NOMEM;
				goto done;
			}
			cd = x;
			cap_cd = cap;
		}
		cd[n_cd++] = (cand){ d, s, s + ub };
	}
	/* Proximity: by bound, best first, until no bound reaches the k-th score. */
	if (n_cd) /* cd is NULL while empty */
		qsort(cd, n_cd, sizeof *cd, cmp_cand_ub);
	double theta0 = b->g ? b->g->theta : 0;
	for (size_t i = 0; i < n_cd; i++) {
		if ((n_hits == k && cd[i].ub * SLACK < hits[0].score) || cd[i].ub * SLACK < theta0)
			break;
		double dl, tp;
		if ((rc = dl_get(b, cd[i].rid, &dl, errmsg)) || (rc = tp_score(b, cd[i].rid, dl, tpc, n_tp, acc, &tp, errmsg)))
			goto done;
		heap_offer(hits, &n_hits, k, (ss_bm25_hit){ cd[i].rid, cd[i].score + tp });
	}
	qsort(hits, (size_t)n_hits, sizeof *hits, cmp_hit);
	rc = n_hits;
done:
	sqlite3_blob_close(b->dl_blob);
	b->dl_blob = NULL;
	sqlite3_blob_close(b->pos_blob);
	b->pos_blob = NULL;
	for (int i = 0; c && i < n_cl; i++) {
		free(c[i].rid);
		free(c[i].tf);
	}
	free(c);
	free(cd);
	free(buf);
	free(acc);
	free(tpc);
	free(is_tp);
	return rc;
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
	if (rc || (rc = load_stats(b, errmsg)))
		return rc;
	if (b->n_ph && (rc = check_positions(b, errmsg)))
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
	unsigned char *buf = b->n_ph ? malloc(BLOCK * 20) : NULL;
	if (!row || !ph || (b->n_ph && !buf))
		rc = SS_ERR_NOMEM;
	for (size_t i = 0; i < b->n_q && !rc; i++)
		if (!(rc = term_lookup(b, b->qterms[i], &row[i], errmsg)))
			g->df[i] += row[i].df;
	/* A phrase's df is the documents holding it: found as the search
	 * finds them. */
	set_query_stats(b, NULL);
	for (size_t p = 0; p < b->n_ph && !rc; p++)
		if (!(rc = phrase_clause(b, p, &ph[p], buf, errmsg)))
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

int ss_bm25_search(ss_bm25 *b, const char *query, unsigned flags, int k, const int64_t *exclude,
		   size_t n_exclude, const ss_bm25_global *g, ss_bm25_hit *hits, char *errmsg)
{
	/* The query ss_bm25_stats parsed last: its parse, rows and phrases
	 * are kept (for a union's statistics only: g). */
	int kept = g && b->kept_query && b->kept_flags == (flags & ~SS_BM25_EMPTY_OK) && !strcmp(b->kept_query, query);
	int rc = kept ? 0 : ss_bm25_parse(b, query, flags & ~SS_BM25_EMPTY_OK, errmsg);
	if (rc || (rc = load_stats(b, errmsg)))
		return rc;
	if (kept && b->kept_version != b->stats_version) {
		/* the file changed in between: look everything up again */
		drop_kept(b);
	}
	if (g && (g->n_q != b->n_q || g->n_ph != b->n_ph || !g->df)) {
		drop_kept(b);
		return ss_errf(errmsg, SS_ERR_INVALID, "statistics of another query");
	}
	set_query_stats(b, g);
	int general = b->n_ph || (flags & SS_BM25_ALL) || ((flags & SS_BM25_PROXIMITY) && b->n_q > 1);
	if ((b->n_ph || ((flags & SS_BM25_PROXIMITY) && b->n_q > 1)) && (rc = check_positions(b, errmsg)))
		return rc;
	/* The page cache: small for a process's first search, large from the
	 * second on (QUERY_CACHE_KIB). */
	if (b->n_searches < 2) {
		char sql[64];
		snprintf(sql, sizeof sql, "PRAGMA cache_size = -%d", b->n_searches ? QUERY_CACHE_KIB : QUERY_CACHE_KIB_FIRST);
		sqlite3_exec(b->db, sql, NULL, NULL, NULL);
	}
	b->n_searches++;
	rc = general ? clause_search(b, flags, k, exclude, n_exclude, hits, errmsg)
		     : maxscore_search(b, k, exclude, n_exclude, hits, errmsg);
	drop_kept(b); /* kept for one search */
	return rc;
}
