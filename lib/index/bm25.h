/*
 * bm25.h — the index's term postings and its top-k BM25 search (internal
 * to lib/index/; not part of the public header). Its code is lib/index/bm25*.c,
 * the map of those files in bm25_internal.h.
 *
 * Text is cut into terms by SQLite FTS5's "porter unicode61
 * remove_diacritics 2" tokenizer (case and diacritics folded, Porter stems),
 * wrapped: a word (a run of text without ASCII white space) that it cuts
 * into several tokens ("U.S.", "e.g.", "a-z", "1,000", "don't") also gives
 * a compound term, its tokens joined by single spaces ("u s"), which
 * no token holds. A document holds its tokens and its compounds (its
 * length counts the tokens only); a query's word is its token or, when it
 * has several, its compound alone: the phrase of adjacent tokens the index
 * matched before schema 2 (FTS5 '"U.S."'), without positions, so that it
 * ranks as that index did (formats/index.md has the figures). It finds a
 * word written "U.S." or "u.s", no longer "U. S." (two words).
 * Tables, in the index's SQLite file (created by lib/index/index.c, schema 3):
 *   docs.n_terms, docs.terms   a document's length in tokens and its term
 *                              vector: (varint tid delta, varint tf) pairs,
 *                              tid ascending.
 *   terms(tid, term, df, maxw, postings)
 *                              one row per term; postings (blob, little
 *                              endian): u32 n_blocks; n_blocks skip entries
 *                              {u32 last rid, u32 end byte offset in the
 *                              data, f32 block max of w}; data: blocks of
 *                              128 (varint rid delta, varint tf) pairs, rid
 *                              ascending, the first delta of a block taken
 *                              from the previous block's last rid.
 *   positions(rid, seq)        a document's tokens in order (compounds left
 *                              out): varint tid each; n_terms of them.
 *                              meta.positions = '2' when every document has
 *                              its row and term_positions is written from
 *                              them; '1': the rows alone (built before
 *                              term_positions, or by a build of that time
 *                              since, which leaves term_positions stale);
 *                              either way the next build's commit fills in
 *                              what is missing (from the texts) and writes '2'.
 *   term_positions(tid, pos)   a term's positions beside its postings (a
 *                              compound has no row): u32 per block of the
 *                              postings, the end of its positions in the
 *                              data (little endian; top bit POS_BYTES: one
 *                              byte a position); data: for each posting in
 *                              order, its tf positions (token offsets in the
 *                              document), ascending: in a POS_BYTES block
 *                              (every position of the block below 256) one
 *                              byte each, else varint deltas, the first from
 *                              0. Phrases read these; proximity reads
 *                              positions.seq.
 *   bm25(one = 1, n_docs, n_terms, max_rid, doclen)
 *                              corpus statistics; doclen: u32 n_terms per
 *                              rid, 0..max_rid.
 * w = tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)), k1 = 1.2, b = 0.75,
 * idf = ln((N - df + 0.5) / (df + 0.5)), 1e-6 when that is <= 0: FTS5's
 * bm25() with these terms as single-token phrases. maxw is a term's largest
 * w. The postings are rewritten from the term vectors at every commit.
 * ref: Turtle & Flood, "Query evaluation: strategies and optimizations"
 * (1995), MaxScore; Ding & Suel, "Faster top-k document retrieval using
 * block-max indexes" (SIGIR 2011), the block maxima; SQLite
 * ext/fts5/fts5_aux.c fts5Bm25Function.
 */
#ifndef SS_BM25_H
#define SS_BM25_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define SS_BM25_K1 1.2
#define SS_BM25_B 0.75
/* The largest docs.rid (rids run from 1): bm25.doclen, 4 bytes a rid from
 * 0, stays within SQLite's default limit on a blob (SQLITE_MAX_LENGTH,
 * 10^9 bytes). A row outside 1..SS_BM25_MAX_RID is a damaged index. */
#define SS_BM25_MAX_RID 249999999

typedef struct ss_bm25 ss_bm25;

/* ss_bm25_tokenizer_register (ss_index.h) registers the tokenizer above as FTS5's "ss". */

/* Binds the tokenizer to connection `db` (which must outlive it). build != 0
 * loads the vocabulary for ss_bm25_terms/ss_bm25_commit. Returns 0 or a
 * negative SS_ERR_* with errmsg filled (SS_ERR_FORMAT: a term row without
 * its term). */
int ss_bm25_open(ss_bm25 **out, sqlite3 *db, int build, char *errmsg);
void ss_bm25_close(ss_bm25 *b);

/* Tokenizes text[0..len) into its term vector (the docs.terms blob) and
 * its positions (the positions.seq blob), adding new terms to the
 * vocabulary and the terms table. *vec (*vec_len bytes) and *seq (*seq_len
 * bytes) are owned by b, valid until the next call; *n_terms: the number
 * of tokens (docs.n_terms). Returns 0, SS_ERR_NOMEM, SS_ERR_IO. */
int ss_bm25_terms(ss_bm25 *b, const char *text, size_t len, const void **vec, size_t *vec_len,
		  const void **seq, size_t *seq_len, int64_t *n_terms, char *errmsg);

/* Rewrites terms.df/maxw/postings and the bm25 row from every document's
 * term vector (inside the caller's write transaction); drops terms no
 * document holds. positions != 0 (every document has its positions row):
 * term_positions is rewritten from the positions rows as well, else
 * emptied; the caller sets meta.positions. Memory: about the size of the
 * postings and their positions, plus 12 bytes a term. Returns 0 or a
 * negative SS_ERR_*: SS_ERR_FORMAT for a damaged index (a docs.rid outside
 * 1..SS_BM25_MAX_RID, naming the document; a damaged term vector or
 * positions row), SS_ERR_TOO_LARGE for a blob past SQLite's length limit,
 * SS_ERR_IO; the caller then rolls the transaction back. */
int ss_bm25_commit(ss_bm25 *b, int positions, char *errmsg);

/* Sets k1 (>= 0) and b (in [0, 1]) of the following searches (default
 * SS_BM25_K1, SS_BM25_B; the caller checks the ranges). Postings keep the
 * default's maxw: with other values a term's bound is idf (k1 + 1), still
 * exact, with less pruning. */
void ss_bm25_set_params(ss_bm25 *b, double k1, double bb);

typedef struct {
	int64_t rid;
	double score;
} ss_bm25_hit;

/* ss_bm25_search's flags (the values of ss_index.h's SS_INDEX_QUERY_*). */
#define SS_BM25_PHRASES 1u   /* "..." is a phrase */
#define SS_BM25_ALL 2u       /* a document must hold every term and phrase */
#define SS_BM25_PROXIMITY 4u /* BM25TP: plus a score for query terms near each other */
#define SS_BM25_EMPTY_OK 8u   /* ss_bm25_parse: a query without a term is no error */
#define SS_BM25_MAX_PHRASE 64

/* The statistics of a union of indexes (shards), to rank the union exactly:
 * what one index holding all their documents would score with. */
typedef struct {
	int64_t n_docs;  /* N: documents, summed over the shards */
	int64_t n_terms; /* the sum of their lengths (N avgdl) */
	int64_t *df;     /* [n_q]: df of each term of the query (ss_bm25_parse's order), summed */
	int64_t *pdf;    /* [n_ph]: the documents holding each phrase, summed (inside df's allocation) */
	size_t n_q, n_ph;
	/* A score below which a hit is of no use to the caller (the k-th of
	 * the shards searched so far; 0: none): the search prunes by it. */
	double theta;
} ss_bm25_global;

/* Top-k rows for `query` by BM25, best first, equal scores by rid, leaving
 * out the rids in exclude[0..n_exclude) (sorted ascending). The query's
 * clauses are its distinct terms outside quotes and (SS_BM25_PHRASES) its
 * distinct phrases; a document must hold one of them (all: SS_BM25_ALL);
 * score = sum over the clauses it holds of idf * w(tf), a phrase's tf its
 * occurrences and idf from the documents holding it (FTS5's bm25() of
 * the same expression); SS_BM25_PROXIMITY adds BM25TP's term proximity
 * (ref: Büttcher, Clarke & Lushman, "Term proximity scoring for ad-hoc
 * retrieval on very large text collections", SIGIR 2006): for each pair of
 * consecutive occurrences of two different query terms at distance d,
 * acc(t) += idf(t') / d^2 for each of the two; score += sum over terms of
 * min(1, idf(t)) acc(t) (k1 + 1) / (acc(t) + k1 (1 - b + b dl / avgdl)).
 * Only terms outside quotes and of one token each take part. A score is
 * the sum of its clauses' parts in query order, whatever order pruning
 * met them in. g: NULL (this index's N, avgdl, df), or a union's
 * statistics (ss_bm25_stats over every shard, for this query and flags):
 * scored by those, with the stored bounds widened to stay bounds under
 * its avgdl, and the hits that score below g->theta may be left out. The
 * top k is exact. Runs in the caller's read transaction. hits: room for k. Returns
 * the number of hits (0 when nothing matches), SS_ERR_INVALID (no term;
 * an unbalanced quote, an empty phrase, a phrase of more than
 * SS_BM25_MAX_PHRASE tokens: errmsg names it), SS_ERR_UNSUPPORTED (phrases
 * or proximity on an index without positions), SS_ERR_NOMEM, SS_ERR_IO,
 * SS_ERR_FORMAT (a damaged postings or positions blob). */
/* Parses `query` as ss_bm25_search does, without searching: 0,
 * SS_ERR_INVALID with errmsg (ss_bm25_search's query errors), SS_ERR_NOMEM. */
int ss_bm25_parse(ss_bm25 *b, const char *query, unsigned flags, char *errmsg);

int ss_bm25_search(ss_bm25 *b, const char *query, unsigned flags, int k, const int64_t *exclude,
		   size_t n_exclude, const ss_bm25_global *g, ss_bm25_hit *hits, char *errmsg);

/* Adds this index's statistics for `query` (parsed under flags as
 * ss_bm25_search does) to *g: n_docs, n_terms, and each query term's and
 * phrase's df (a phrase's: the documents holding it, found by reading
 * their tokens' positions, as the search does). *g starts zeroed; the first call
 * sizes g->df/g->pdf by the query (freed by ss_bm25_global_free). Runs in
 * the caller's read transaction. What it read (each term's row, each
 * phrase's documents) is kept in b for the next ss_bm25_search of the same
 * query and flags with a g, which uses it instead of reading it again and
 * frees it (any other parse of b frees it too). Returns 0 or
 * ss_bm25_search's errors. */
int ss_bm25_stats(ss_bm25 *b, const char *query, unsigned flags, ss_bm25_global *g, char *errmsg);

/* Frees g's arrays and zeroes it. */
void ss_bm25_global_free(ss_bm25_global *g);

#endif /* SS_BM25_H */
