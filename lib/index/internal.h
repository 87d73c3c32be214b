/*
 * lib/index/internal.h — INTERNAL to lib/index/index.c (opening, queries, reading
 * states) and lib/index/index_build.c (building): the index handle behind the
 * opaque ss_index of ss_index.h and the SQLite helpers both halves use.
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
/* Absolute (or cwd-relative, as the index was named) path of a state
 * file's stored path. Returns malloc'd string or NULL. */
char *ix_resolve_path(ss_index *ix, const char *stored);
/* Opens the database at path with sqlite3_open_v2 flags into a new
 * handle (*out, freed by ss_index_close). 0 or SS_ERR_* with errmsg. */
int ix_open_common(ss_index **out, const char *path, int flags, char *errmsg);

#endif /* SS_INDEX_INTERNAL_H */
