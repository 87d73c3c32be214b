/*
 * lib/index/bm25_internal.h — INTERNAL to the bm25*.c files of lib/index/
 * (the index's term postings and its top-k BM25 search, bm25.h): the
 * handle behind the opaque ss_bm25, the postings' layout, the cursors that
 * read them, the top-k heap, and what one file of them calls in another.
 *   bm25.c           the handle (open, close), the build's vocabulary, the
 *                    compound tokenizer
 *   bm25_build.c     a document's term vector and positions; the commit
 *                    that writes the postings, their positions and the
 *                    corpus statistics
 *   bm25_postings.c  reading: corpus statistics, document lengths, a
 *                    term's postings block by block and its positions in a
 *                    document, a document's positions
 *   bm25_query.c     the query syntax, the plan (which search), the
 *                    statistics of a union of shards
 *   bm25_maxscore.c  the OR of a query's terms by MaxScore
 *   bm25_clause.c    phrases, AND, BM25TP proximity
 * The small functions of the searches' inner loops are static inline here,
 * so that each search inlines them as it did when all this was one file.
 * ref: bm25.h (the contract, the tables, the formulas).
 */
#ifndef SS_BM25_INTERNAL_H
#define SS_BM25_INTERNAL_H

#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ss.h"
#include "index/bm25.h"

/* Postings: blocks of BLOCK (rid delta, tf) pairs; a skip entry of
 * SKIP_BYTES per block (bm25.h). A block's pairs take at most BLOCK_MAX_BYTES. */
#define BLOCK 128
#define SKIP_BYTES 12
#define BLOCK_MAX_BYTES (BLOCK * 20)
/* A term_positions block end's flag: the block's positions are one byte
 * each, absolute (every one below 256), not varint deltas (bm25.h). */
#define POS_BYTES 0x80000000u
/* Bytes allocated (zeroed) past a cursor's positions block (pbuf), so a
 * 16-byte load at any of its positions stays inside the buffer. */
#define POS_SLACK 16
/* A relative margin on every pruning test, so that rounding in the bounds
 * (float block maxima, sums in another order) never drops a document
 * that belongs in the top k. */
#define SLACK (1 + 1e-6)
/* Documents scored first, from the rarest terms, to start the search with
 * a k-th score near its final value. */
#define PRIME 256
#define DL_CHUNK 1024
/* A cursor's rid past its last posting. */
#define END UINT32_MAX

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
	int term_pos;        /* meta.positions is '2': term_positions holds each term's positions */
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
	/* The term's positions (term_positions), read a block at a time
	 * when first asked for (bm25_cur_positions); pblob NULL: not opened. */
	sqlite3_blob *pblob;
	uint32_t *pend;      /* [n_blocks]: each block's end in the positions */
	unsigned char *pbuf; /* block pblk's positions, pbuf_n bytes (pbuf_cap + POS_SLACK allocated) */
	size_t pbuf_n, pbuf_cap;
	int64_t pblk;        /* -1: none */
	uint32_t pstart[BLOCK]; /* a block of one byte a position: posting k's start in pbuf (saturated) */
	int pidx;            /* pbuf[poff..] holds the positions of posting pidx of the block on (varints) */
	size_t poff;
	uint32_t *ppos;      /* the positions bm25_cur_positions returned, [ppos_cap] */
	size_t ppos_cap;
} cursor;

/* ------------------------------------------------------------------ bm25.c */

/* errmsg "what: <the connection's last error>"; returns SS_ERR_IO. */
int bm25_sqlfail(ss_bm25 *b, char *errmsg, const char *what);
/* 0 when a sqlite3_bind_* call returned `code` SQLITE_OK, else its failure:
 * SS_ERR_TOO_LARGE for a value past SQLite's length limit (the statement
 * would otherwise run with NULL there), SS_ERR_IO. */
int bm25_bound(int code, char *errmsg, const char *what);
/* Forgets what ss_bm25_stats kept for the following search. */
void bm25_drop_kept(ss_bm25 *b);
/* Frees the document lengths read so far (b->dlc). */
void bm25_free_doclen(ss_bm25 *b);
/* Makes room for 2 (n + 1) terms in v when it is past half full: 0 or
 * SS_ERR_NOMEM (v unchanged). */
int bm25_vocab_reserve(vocab *v);
/* Slot of term s[0..n) in v (an empty slot when absent). */
size_t bm25_vocab_slot(const vocab *v, const char *s, size_t n);

/* ------------------------------------------------------------------ bm25_postings.c */

/* Loads N and avgdl when the file changed since they were loaded (or never
 * were), forgetting the document lengths read so far. 0, SS_ERR_FORMAT
 * (damaged statistics), SS_ERR_NOMEM, SS_ERR_IO with errmsg. */
int bm25_load_stats(ss_bm25 *b, char *errmsg);
/* Length in terms of document `rid`: a chunk of the lengths is read from
 * bm25.doclen (through b->dl_blob, opened here, closed by the search) the
 * first time one of its documents is scored. Returns 0 or SS_ERR_NOMEM,
 * SS_ERR_IO (errmsg untouched). */
int bm25_dl_load(ss_bm25 *b, uint32_t rid, double *dl);
/* Decodes block blk of c into c->rid/c->tf (buf: BLOCK_MAX_BYTES of
 * scratch) and moves c to its first posting. 0, SS_ERR_FORMAT (a damaged
 * block), SS_ERR_IO (errmsg untouched). */
int bm25_load_block(cursor *c, int64_t blk, unsigned char *buf);
/* The first block of c whose last rid is >= d (n_blocks when none), found
 * from the shallow position on by galloping, without decoding a block:
 * the block that holds d if any posting does. d never decreases between
 * calls on one cursor. */
int64_t bm25_cur_shallow(cursor *c, uint32_t d);
/* BM25's idf of a term (or phrase) that df of the search's N documents
 * hold (Robertson-Zaragoza 2009, eq. 3.3), floored at 1e-6 as FTS5 does,
 * so that a term in most documents still counts a little. */
double bm25_idf(const ss_bm25 *b, double df);
/* Looks up `term` in the terms table into *r. Returns 0 (r->found 0 when
 * no document holds it) or SS_ERR_IO with errmsg. */
int bm25_term_lookup(ss_bm25 *b, const char *term, term_row *r, char *errmsg);
/* Opens the postings of term `term` into t (its first block decoded into
 * t's arrays through buf; *tid: its id), scored with idf from gdf (-1:
 * the term's df here): 1, 0 when no document holds the term (t
 * untouched), or a negative SS_ERR_* with errmsg (t released). row: the
 * term's row when already looked up (ss_bm25_stats), else NULL. Release
 * t with bm25_cur_close. */
int bm25_cur_open(ss_bm25 *b, const char *term, const term_row *row, int64_t gdf, cursor *t, int64_t *tid,
		  unsigned char *buf, char *errmsg);
void bm25_cur_close(cursor *t);
/* The error of a search that failed reading postings or document lengths
 * (rc: bm25_load_block's, bm25_dl_load's): SS_ERR_IO "reading postings:
 * <sqlite's message>", else rc with "damaged postings". */
int bm25_read_error(ss_bm25 *b, int rc, char *errmsg);
/* Refuses phrases and proximity on an index without positions for every
 * document (meta.positions, lib/index/index_build.c): 0 or
 * SS_ERR_UNSUPPORTED, SS_ERR_IO with errmsg. */
int bm25_check_positions(ss_bm25 *b, char *errmsg);
/* Opens the positions of c's term (id tid) in term_positions: 1, 0 when
 * the term has none (a compound; phrases then read the documents'
 * positions), SS_ERR_FORMAT (their block table disagrees with the
 * postings), SS_ERR_NOMEM, SS_ERR_IO with errmsg. Closed by bm25_cur_close. */
int bm25_cur_pos_open(ss_bm25 *b, cursor *c, uint32_t tid, char *errmsg);
/* The positions of c's term in document c->cur (c opened by
 * bm25_cur_pos_open, c->cur != END): *pos (c->tf[c->pos] of them,
 * ascending, token offsets in the document) owned by c, valid until the
 * next call. Reads the block's positions once, and skips (without
 * decoding) those of the postings before. 0, SS_ERR_NOMEM, SS_ERR_FORMAT (damaged), SS_ERR_IO (errmsg
 * untouched, as bm25_load_block). */
int bm25_cur_positions(cursor *c, const uint32_t **pos);
/* Reads the positions of c's block c->blk (opened by bm25_cur_pos_open)
 * into c->pbuf, from its first posting on (a block of one byte a
 * position: each posting's start in c->pstart). 0, SS_ERR_NOMEM, SS_ERR_IO. */
int bm25_cur_pos_block(cursor *c);
/* Document rid's positions into b->dseq (b->pos_blob opened here, closed
 * by the search); *n: their number. Returns 0, SS_ERR_NOMEM,
 * SS_ERR_FORMAT (none stored, or a damaged blob), SS_ERR_IO. */
int bm25_read_positions(ss_bm25 *b, uint32_t rid, size_t *n, char *errmsg);

/* ------------------------------------------------------------------ bm25_clause.c, bm25_maxscore.c */

/* Phrase p's documents into c, each with its number of occurrences, and
 * its idf (from g's pdf, else their number). 0 or a negative SS_ERR_* with
 * errmsg (SS_ERR_NOMEM without). */
int bm25_phrase_clause(ss_bm25 *b, size_t p, clause *c, unsigned char *buf, char *errmsg);
/* Top k of the query's clauses (b->qterms, then the phrases): all of them
 * (SS_BM25_ALL) or any; SS_BM25_PROXIMITY adds BM25TP. hits: room for k,
 * best first. Returns their number or a negative SS_ERR_*. */
int bm25_clause_search(ss_bm25 *b, unsigned flags, int k, const int64_t *exclude, size_t n_exclude,
		       ss_bm25_hit *hits, char *errmsg);
/* Top k of the OR of b->qterms by MaxScore (stats loaded); as
 * bm25_clause_search. */
int bm25_maxscore_search(ss_bm25 *b, int k, const int64_t *exclude, size_t n_exclude, ss_bm25_hit *hits,
			 char *errmsg);

/* ------------------------------------------------------------------ varints, little endian */

static inline size_t put_varint(unsigned char *p, uint64_t v)
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
static inline int get_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
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

static inline uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wr32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

/* ------------------------------------------------------------------ the weight w */

/* The denominator's length part of w, k1 (1 - b + b dl / avgdl): one per
 * document, computed once for all its terms (w_of). */
static inline double len_norm(double dl, double avgdl, double k1, double b)
{
	return k1 * (1 - b + b * dl / avgdl);
}

/* w = tf (k1 + 1) / (tf + norm), norm = len_norm(): the one expression
 * the index's maxima and every search use, so that they agree to the bit. */
static inline double w_of(double tf, double norm, double k1)
{
	return tf * (k1 + 1) / (tf + norm);
}

static inline double tf_weight(double tf, double dl, double avgdl, double k1, double b)
{
	return w_of(tf, len_norm(dl, avgdl, k1, b), k1);
}

/* ------------------------------------------------------------------ the searches' inner loops */

/* bm25_dl_load, its chunk already read: the common case, inline. */
static inline int dl_of(ss_bm25 *b, uint32_t rid, double *dl)
{
	const uint32_t *v;
	if ((int64_t)rid <= b->max_rid && (v = b->dlc[rid / DL_CHUNK])) {
		*dl = v[rid % DL_CHUNK];
		return 0;
	}
	return bm25_dl_load(b, rid, dl);
}

/* Moves c to its next posting: 0 or bm25_load_block's errors. */
static inline int cur_next(cursor *c, unsigned char *buf)
{
	if (++c->pos < c->n) {
		c->cur = c->rid[c->pos];
		return 0;
	}
	if (c->blk + 1 < c->n_blocks)
		return bm25_load_block(c, c->blk + 1, buf);
	c->cur = END;
	return 0;
}

/* Upper bound of the term's score in block blk of c (blk < n_blocks): idf
 * times the block's largest w, rounded up when stored; or the term's
 * bound when the search's k1, b are not the ones the maxima hold for. */
static inline double block_ub(const cursor *c, int64_t blk)
{
	float w;
	memcpy(&w, c->skip + blk * SKIP_BYTES + 8, 4);
	return c->bscale ? c->bscale * w : c->ub;
}

/* cur_seek's first step (c->cur < d): c's decoded block made the one
 * whose last rid is >= d. 0 (the posting sought is in it, at c->pos or
 * after), 1 (none is: c->cur set to END), or bm25_load_block's errors. */
static inline int cur_seek_block(cursor *c, uint32_t d, unsigned char *buf)
{
	/* d in the decoded block (its last rid >= d): no search of the skips */
	if (c->blk >= 0 && rd32(c->skip + c->blk * SKIP_BYTES) >= d)
		return 0;
	int64_t lo = bm25_cur_shallow(c, d);
	if (lo == c->n_blocks) {
		c->cur = END;
		return 1;
	}
	return lo != c->blk ? bm25_load_block(c, lo, buf) : 0;
}

/* Moves c to its first posting with rid >= d: 0 or bm25_load_block's errors. */
static inline int cur_seek(cursor *c, uint32_t d, unsigned char *buf)
{
	if (c->cur >= d)
		return 0;
	int rc = cur_seek_block(c, d, buf);
	if (rc)
		return rc < 0 ? rc : 0;
	while (c->rid[c->pos] < d)
		c->pos++;
	c->cur = c->rid[c->pos];
	return 0;
}

/* bm25_cur_positions' common case, inline: in a block of one byte a
 * position, *pos points at the c->tf[c->pos] positions of c's term in
 * document c->cur, in c's buffer (valid until the cursor reads another
 * block's); returns 1. 0: the block is of varints (use
 * bm25_cur_positions); or bm25_cur_pos_block's errors, SS_ERR_FORMAT. */
static inline int cur_pos_bytes(cursor *c, const unsigned char **pos)
{
	if (!(c->pend[c->blk] & POS_BYTES))
		return 0;
	int rc;
	if (c->pblk != c->blk && (rc = bm25_cur_pos_block(c)))
		return rc;
	size_t i = c->pstart[c->pos];
	uint32_t tf = c->tf[c->pos];
	if (i > c->pbuf_n || c->pbuf_n - i < tf)
		return SS_ERR_FORMAT;
	*pos = c->pbuf + i;
	return 1;
}

/* Whether rid is in ex[0..n) (sorted ascending). */
static inline int excluded(uint32_t rid, const int64_t *ex, size_t n)
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

/* ------------------------------------------------------------------ top-k heap */

/* hits[0..n) as a min-heap on (score, -rid): hits[0] is the worst. */
static inline int worse(const ss_bm25_hit *a, const ss_bm25_hit *b)
{
	return a->score < b->score || (a->score == b->score && a->rid > b->rid);
}

static inline void sift_down(ss_bm25_hit *h, int n, int i)
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

static inline void heap_push(ss_bm25_hit *h, int *n, ss_bm25_hit x)
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

/* Adds x to the top-k heap hits[0..*n) unless it is worse than all of k.
 * Returns whether it did. */
static inline int heap_offer(ss_bm25_hit *h, int *n, int k, ss_bm25_hit x)
{
	if (*n < k) {
		heap_push(h, n, x);
	} else if (worse(&h[0], &x)) {
		h[0] = x;
		sift_down(h, *n, 0);
	} else {
		return 0;
	}
	return 1;
}

static inline int cmp_hit(const void *a, const void *b)
{
	const ss_bm25_hit *x = a, *y = b;
	return worse(y, x) ? -1 : worse(x, y);
}

#endif /* SS_BM25_INTERNAL_H */
