/*
 * lib/index/internal.h — INTERNAL to lib/index/index.c (opening, queries, reading
 * states), lib/index/index_build.c and lib/index/index_commit.c (building): the
 * index handle behind the opaque ss_index of ss_index.h and the SQLite helpers
 * both halves use.
 * ref: formats/index.md (the schema), ss_index.h (the contract).
 */
#ifndef SS_INDEX_INTERNAL_H
#define SS_INDEX_INTERNAL_H

#include <sqlite3.h>
#include <stdint.h>

#include "ss.h"
#include "index/bm25.h"

/* State files kept open at once by a query process. */
#define READER_SLOTS 32
#define BUSY_TIMEOUT_MS 10000

typedef struct {
	int64_t file_id; /* 0 = empty slot */
	ss_reader *r;
	int fd;          /* the same file, for copying frames verbatim (pread) */
	uint64_t size;
} reader_slot;

struct ss_index {
	sqlite3 *db;
	int building;   /* a write transaction is open */
	int committed;
	int hot_journal; /* a read-only open met a crashed build's journal */
	char *dir;      /* realpath of the index's directory, no trailing '/' */
	int64_t base_rid; /* largest docs.rid before this build */
	int64_t n_deleted; /* ss_index_delete calls that removed a document */
	/* build statements */
	sqlite3_stmt *find, *ins_doc, *set_text, *set_state, *touch;
	sqlite3_stmt *put_text, *put_pos, *del_doc, *del_text; /* texts, positions tables; deletes */
	sqlite3_stmt *put_tokens, *del_tokens, *del_stateless, *add_hits; /* the recompute tier */
	int64_t budget;   /* ss_index_set_state_budget's bytes; -1: none */
	/* ss_index_set_stateless's model fingerprint ("": none) and recompute
	 * dtype name */
	char stateless_fp[SS_FINGERPRINT_MAX];
	char stateless_dtype[16];
	int32_t n_vocab;  /* ss_index_set_vocab's bound on the token ids added; 0: none */
	/* The dims every state of the index has: those of dims_ref (a state
	 * stored before this build, read at the first state record added), or
	 * of the first state added when the index had none. */
	ss_index_hit dims_ref;
	ss_state_dims dims;
	int dims_set;
	sqlite3_stmt *file_find, *file_ins;
	char *last_path;  /* state path as given → file id, for runs of one shard */
	int64_t last_file_id;
	/* query statements */
	sqlite3_stmt *query, *lookup, *rid_of;
	sqlite3_stmt *text_of; /* NULL when the index has no texts table */
	sqlite3_stmt *tokens_of; /* NULL when the index has no tokens table */
	unsigned fetch;   /* ss_index_set_fetch's SS_INDEX_FETCH_* */
	unsigned qflags;  /* ss_index_set_query's SS_INDEX_QUERY_* (SS_BM25_* values) */
	ss_bm25 *bm25;    /* tokenizer, postings */
	reader_slot slots[READER_SLOTS];
	int next_slot;
	ss_state meta;    /* scratch for ss_index_read */
	/* a build: its lock (DB.lock, flock'ed), and DB when the build made it
	 * (removed unless the build commits) */
	int lock_fd;
	char *lock_path, *created_path;
	/* A union of shards (ss_index_open_shards of two or more): their
	 * handles and paths as given; the fields above are unused but for
	 * qflags, fetch and query/lookup (shard 0's, borrowed: "open for
	 * queries"). n_shard 0: one index. */
	ss_index **shard;
	char **shard_path;
	int n_shard;
	/* State files served over HTTP (lib/index/http.c): the session and
	 * its fetched frames (NULL until the first), ss_index_set_http's
	 * settings. */
	struct ixh_cache *http;
	double http_timeout;
	int http_retries;
};

/* Sets errmsg to "what: <sqlite's message> (<errno text>)" for the
 * connection's last error and returns SS_ERR_IO, or SS_ERR_FORMAT when the
 * file is not a database ("not an ss index"). */
int ix_sqlerr(ss_index *ix, char *errmsg, const char *what);
/* Prepares sql into *st; 0 or ix_sqlerr's code. */
int ix_prep(ss_index *ix, sqlite3_stmt **st, const char *sql, char *errmsg);
/* Steps st to SQLITE_DONE and resets it; 0 or ix_sqlerr's code. */
int ix_step_done(ss_index *ix, sqlite3_stmt *st, char *errmsg);
/* Runs sql (one or more statements); 0 or ix_sqlerr's code. */
int ix_exec(ss_index *ix, const char *sql, char *errmsg);
/* 0 when a sqlite3_bind_* call returned `code` SQLITE_OK, else errmsg
 * "what: <sqlite's message>" and SS_ERR_TOO_LARGE (a value past SQLite's
 * length limit: unchecked, the statement would store NULL there) or
 * SS_ERR_IO. */
int ix_bound(int code, char *errmsg, const char *what);
/* docs.id from column col of st's current row into *id (SQLite's, valid
 * until st moves): 0, SS_ERR_FORMAT for a row without one (a damaged index;
 * errmsg names row `rid`), SS_ERR_NOMEM. */
int ix_doc_id(sqlite3_stmt *st, int col, int64_t rid, const char **id, char *errmsg);
/* Checks meta.schema_version: 0, or SS_ERR_VERSION / SS_ERR_FORMAT /
 * SS_ERR_IO with errmsg; empty_ok: a database with no tables at all gives
 * 1 (to be created). */
int ix_check_schema(ss_index *ix, int empty_ok, char *errmsg);
/* Checks that rec, read at hit's offset, is hit's state record: a
 * state, of hit's id and fingerprint, its frame hit->length bytes. 0 or
 * SS_ERR_MISMATCH / the decoder's error, errmsg "document ID at byte
 * offset N: what" (ss_index_read's). */
int ix_check_record(ss_index *ix, const ss_index_hit *hit, const ss_record *rec, char *errmsg);
/* Absolute (or cwd-relative, as the index was named) path of a state
 * file's stored path; a URL as it is. Returns malloc'd string or NULL. */
char *ix_resolve_path(ss_index *ix, const char *stored);
/* Opens the database at path with sqlite3_open_v2 flags into a new
 * handle (*out, freed by ss_index_close). 0 or SS_ERR_* with errmsg. */
int ix_open_common(ss_index **out, const char *path, int flags, char *errmsg);

/* lib/index/index_build.c: stores document rid's positions blob
 * (seq[0..seq_len), bm25.h: positions.seq) through ix->put_pos, in the
 * build's transaction: 0 or ix_bound's, ix_step_done's errors. */
int ix_put_positions(ss_index *ix, int64_t rid, const void *seq, size_t seq_len, char *errmsg);

/* Sorts rids[0..n) ascending (the exclude lists of ss_bm25_search). */
void ix_sort_rids(int64_t *rids, size_t n);
/* Fills *h (zeroed first) with row `rid` of ix's docs as a hit of
 * `score`, and what ss_index_set_fetch asks, in the caller's read
 * transaction: 0, SS_ERR_FORMAT (no such row: damaged postings), the
 * errors of ss_index_text / ss_index_tokens. */
int ix_hit_of_rid(ss_index *ix, int64_t rid, double score, ss_index_hit *h, char *errmsg);
/* Orders h[0..n) best first (equal scores by id) and numbers their ranks. */
void ix_rank_hits(ss_index_hit *h, int n);

/* lib/index/shards.c: a union's side of the calls of ss_index.h of the
 * same name (ix->n_shard > 0; arguments checked by the caller). */
int64_t ixs_count(ss_index *u);
int ixs_query(ss_index *u, const char *query, int k, const char *const *exclude, size_t n_exclude,
	      ss_index_hit **hits, char *errmsg);
int ixs_lookup(ss_index *u, const char *id, ss_index_hit *hit, char *errmsg);
int ixs_docs(ss_index *u, const char *id, ss_index_doc_fn fn, void *ctx, char *errmsg);
/* ss_index_text (tokens 0: *out char *, *len bytes) or ss_index_tokens
 * (tokens 1: *out int32_t *, *len tokens) of the shard holding id. */
int ixs_blob(ss_index *u, const char *id, int tokens, void **out, int64_t *len, char *errmsg);
int ixs_info(ss_index *u, ss_index_info *info, char *errmsg);
int ixs_files(ss_index *u, ss_index_file_fn fn, void *ctx, char *errmsg);
/* The shard hit->shard names, NULL when none. */
ss_index *ixs_shard_of_hit(ss_index *u, const ss_index_hit *hit);
/* Closes the shards and frees their arrays (not u). */
void ixs_close(ss_index *u);

#endif /* SS_INDEX_INTERNAL_H */
