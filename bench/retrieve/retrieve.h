/*
 * retrieve.h — what the files of bench/retrieve (one program, the files of
 * this folder linked together) share: the program's helpers (main.c), the
 * SQLite FTS5 peer that --scale and --qa hold the index against (peer.c),
 * and the entry points of those two modes (scale.c, qa.c). main.c holds
 * the default measurement and picks the mode from the first argument.
 */
#ifndef SS_BENCH_RETRIEVE_H
#define SS_BENCH_RETRIEVE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* Prints "retrieve: WHAT: MSG" on standard error and exits 1. */
void die(const char *what, const char *msg) __attribute__((noreturn));

/* The next number of the program's one xorshift64 sequence (fixed seed, so
 * that a run's documents and queries are the same from run to run). */
uint64_t rng_next(void);

/* Makes a fresh directory $TMPDIR/ss-bench-NAME-XXXXXX (/tmp when TMPDIR
 * is unset) and writes its path into dir (cap bytes); dies when it cannot. */
void scratch_dir(char *dir, size_t cap, const char *name);

/* retrieve --scale ...: index build and query latency at scale (scale.c). */
int scale_main(int argc, char **argv);

/* retrieve --qa ...: retrieval quality on the QA samples (qa.c). */
int qa_main(int argc, char **argv);

/* The peer: SQLite FTS5 with bm25() ORDER BY rank, in a database of its
 * own. tokenize: FTS5's "porter unicode61 remove_diacritics 2", as the
 * index answered queries before schema 2, or "ss", the index's own terms
 * (compounds included; lib/index/bm25.h). */
typedef struct {
	sqlite3 *db;
	sqlite3_stmt *ins, *query;
	sqlite3_stmt *term_ins, *term_of; /* the term of a word (temp.q, temp.qv) */
	sqlite3_stmt *df_of;              /* documents holding a term (temp.v) */
	int64_t max_df;                   /* fts_expr leaves out terms in more documents */
} fts_peer;

/* Creates the FTS5 table (tokenizer tokenize) and the peer's temporary
 * tables in the database at path (journal and syncs off: a scratch file),
 * prepares its statements and begins the transaction that peer_commit
 * ends; p->max_df is the caller's to set. Dies on failure. */
void peer_open(fts_peer *p, const char *path, const char *tokenize);

/* Adds a document's text (len bytes, not copied) as rowid. Dies on failure. */
void peer_add(fts_peer *p, int64_t rowid, const char *text, size_t len);

/* Merges FTS5's segments into one and commits. Dies on failure. */
void peer_commit(fts_peer *p);

void peer_close(fts_peer *p);

/* Top-k rowids for an FTS5 expression into rowid[k]; returns their number. */
int peer_query(fts_peer *p, const char *expr, int k, int64_t *rowid);

/* FTS5 expression of a query: its white-space words quoted and OR-ed (a
 * word of several tokens is a phrase, or with tokenizer "ss" its compound
 * term). same_terms != 0 keeps one word per distinct term (p's tokenizer
 * says which), so that with tokenizer "ss" the expression's bm25() is the
 * index's BM25 of the same terms, computed exhaustively; 0 keeps each
 * distinct word once, as the index's queries were before schema 2.
 * Returns malloc'd string ("" when none). */
char *fts_expr(fts_peer *p, const char *q, int same_terms);

#endif /* SS_BENCH_RETRIEVE_H */
