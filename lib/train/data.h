/*
 * lib/train/data.h — INTERNAL to libss (lib/train/data.c, lib/train/run.c):
 * the data sources of a training run (ss_train_run, lib/ss_train.h): lm's
 * token documents, bp2c's and bptc's examples, and the chunks' records by
 * id. Every function returns 0 (or 1: taken) or SS_ERR_* with errmsg
 * naming the file and the record or line, never prints, never exits.
 */
#ifndef SS_TRAIN_DATA_H
#define SS_TRAIN_DATA_H

#include "ss.h"

/* A batch: packed sequences for ss_train_forward. */
typedef struct {
	int32_t *tokens, *targets; /* [batch_tokens] */
	int64_t *seq_start;        /* [max_seqs+1] */
	int nseq;
	int64_t T, ntargets;
	float *conv, *ssm;         /* bp2c: [max_seqs][conv_len], [max_seqs][ssm_len] initial states */
} train_batch;

/* The lazily asked tokenizer (ss_train_env's). */
typedef struct {
	const ss_train_env *env;
	ss_tokenizer *tok;
} train_tok;

/* The tokenizer, asked of the caller once (SS_ERR_NOTFOUND without one). */
int train_tok_get(train_tok *tk, ss_tokenizer **out, char *errmsg);

/* ------------------------------------------------- lm: token documents */

typedef struct {
	const char *path;
	ss_reader *r;
	ss_tokens doc;       /* current document (n_tokens 0: none) */
	int64_t doc_offset;  /* its record's byte offset */
	int64_t pos;
	int64_t epoch;
	int32_t vocab;
	int any;             /* a usable document was seen this epoch */
	int32_t *sep;        /* loss_after's tokens [nsep], or NULL */
	size_t nsep;
	int64_t loss_from;   /* the first token of doc that is a counted target */
} lm_source;

/* Opens st->data at st's position (offset -1: the start). */
int lm_open(lm_source *s, const ss_train_state *st, int32_t vocab, train_tok *tk,
	    uint64_t max_record, char *errmsg);
/* Adds the next window of at most seq_len inputs to b when it fits in
 * `room` tokens: returns 1, or 0 (consuming nothing) when it does not. The
 * next window starts at this one's last token, so every token after a
 * document's first is a target once. */
int lm_take(lm_source *s, train_batch *b, int64_t seq_len, int64_t room, char *errmsg);
/* birdie: the next min(n, what is left of the document) tokens of the
 * document into out[0..*got), *got >= 2 (a document with fewer left is
 * skipped); windows do not overlap (the objective makes its own targets). */
int lm_take_raw(lm_source *s, int32_t *out, int64_t n, int64_t *got, char *errmsg);
/* The position ss_train_state records: the next window's start. */
int lm_tell(lm_source *s, ss_train_state *st, char *errmsg);
void lm_close(lm_source *s);

/* ------------------------------------ bp2c / bptc: retrieval examples */

/* One example: query and continuation tokens and its chunks' ids (most
 * relevant first). */
typedef struct {
	int32_t *q, *c;
	size_t nq, nc;
	char **chunks;
	size_t n_chunks;
	char where[600]; /* "FILE: line N" */
} train_example;

void train_example_free(train_example *e);

typedef struct {
	const char *path;
	ss_jsonl_reader *r;
	train_tok *tk;
	int32_t vocab;
	train_example next;  /* read ahead, not yet in a batch */
	int64_t next_offset; /* byte offset of its line */
	int64_t epoch;
	int any;
} ex_source;

/* Opens st->data (JSON lines) at st's position and reads the first example. */
int ex_open(ex_source *s, const ss_train_state *st, int32_t vocab, train_tok *tk, char *errmsg);
/* Takes the read-ahead example out (the caller frees it) and reads on. */
int ex_take(ex_source *s, train_example *out, char *errmsg);
void ex_tell(const ex_source *s, ss_train_state *st);
void ex_close(ex_source *s);

/* ------------------------------------------------ chunks' records by id */

typedef struct {
	char *id;
	uint64_t offset;
} chunk_ref;

/* id → byte offset of its record in a stream (bp2c: the states of
 * st->states; bptc: the chunks' token records). */
typedef struct {
	const char *path;
	ss_reader *r;
	chunk_ref *ref; /* [n], sorted by id */
	size_t n;
	int64_t max_tokens; /* token records: the longest one's n_tokens */
} chunk_db;

/* Indexes every record of `path`, each of format `format` (SS_FORMAT_STATES:
 * made by the model of `fingerprint` with the dims of cfg; SS_FORMAT_TOKENS:
 * fingerprint and cfg unused). Memory: the ids and offsets. */
int db_open(chunk_db *db, const char *path, const char *format, const char *fingerprint,
	    const ss_model_config *cfg, uint64_t max_record, char *errmsg);
/* The record of chunk `id` (valid until the next read of db), errors
 * naming the example `where`. */
int db_get(chunk_db *db, const char *id, const char *where, const ss_record **rec, char *errmsg);
void db_close(chunk_db *db);

#endif /* SS_TRAIN_DATA_H */
