/*
 * ss_index.h — the database of states: a BM25 index over document text
 * (in one SQLite file) that maps each document id to the byte offset of its
 * state record in a state stream (part of libss; include "ss.h", not this
 * file).
 * Public: part of libss's interface (ss.h says what that means).
 *
 * One index is one SQLite file. Tables (schema version SS_INDEX_SCHEMA_VERSION):
 *   meta(key, value)   "schema_version", "created_by" ("ss 0.1.0"),
 *                      "updated_by", "fingerprint" (the model of every state)
 *   files(file_id, path)
 *                      state files (shards). A path is stored relative to
 *                      the index's directory when the file lies under that
 *                      directory, absolute otherwise: an index moved together
 *                      with the shards below it keeps working. An http://
 *                      or https:// URL is stored as given.
 *   docs(rid, id, file_id, byte_offset, frame_length, fingerprint,
 *        n_tokens, text_tokens, text_len, n_terms, terms)
 *                      one row per document; byte_offset/frame_length address the zstd
 *                      frame of its state record (ss_stream.h); n_terms and
 *                      terms: its length in terms and its term vector.
 *   texts(rid, text)   each document's text as indexed (ss_index_text);
 *                      created by any build of schema 3 that lacks it.
 *   tokens(rid, tokens) each document's token ids as indexed (i32 little
 *                      endian; ss_index_tokens): what a state is recomputed
 *                      from; created by any build that lacks it.
 *   stateless(rid, dtype)
 *                      the documents without a stored state: those whose
 *                      state a budget dropped (ss_index_set_state_budget)
 *                      and those added by their text alone
 *                      (ss_index_set_stateless): docs.file_id,
 *                      byte_offset and frame_length are NULL, fingerprint and n_tokens stay; dtype
 *                      is the dropped state's storage dtype (or the one set),
 *                      the one it is recomputed in. An index holding one is schema 4.
 *   terms(tid, term, df, maxw, postings)
 *                      per term, the documents that hold it (blocks of 128
 *                      with a skip table), rewritten at every commit.
 *   bm25(one, n_docs, n_terms, max_rid, doclen)
 *                      corpus statistics and every document's length.
 * Terms are what SQLite FTS5's tokenizer "porter unicode61
 * remove_diacritics 2" makes of the text (case and diacritics folded,
 * Porter stems), plus a compound term for each word that is cut into
 * several ("U.S." -> "u s"); lib/index/bm25.h has the layout, formats/index.md
 * the design.
 *
 * A document is the pair (text from a token record, state from a state
 * record) joined by id. A build is one transaction: it adds, replaces or
 * deletes documents, and only ss_index_commit() makes it visible, so an interrupted
 * build leaves the previous index as it was. Queries open the file read-only
 * (any number of concurrent readers; a build blocks them only while it
 * writes the file, normally at its commit, and they wait up to 10 s).
 *
 * ref: SQLite FTS5 (https://sqlite.org/fts5.html) bm25(), Robertson &
 * Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond" (2009),
 * Turtle & Flood, "Query evaluation: strategies and optimizations" (1995).
 */
#ifndef SS_INDEX_H
#define SS_INDEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The schema a build writes when some document has no stored state; an
 * index without one stays SS_INDEX_SCHEMA_MIN, which older readers read. */
#define SS_INDEX_SCHEMA_VERSION 4
#define SS_INDEX_SCHEMA_MIN 3

typedef struct ss_index ss_index;

/* ------------------------------------------------------------------ build */

/* Opens (creating if absent) the index at `path` for a build and begins its
 * one write transaction. An existing file must be an ss index of schema
 * version SS_INDEX_SCHEMA_VERSION: another version gives SS_ERR_VERSION, a
 * file that is not an index SS_ERR_FORMAT. SS_ERR_IO when the file cannot be
 * opened or locked (another build holds it for longer than 10 s).
 * Returns 0 and sets *out (free with ss_index_close: without a commit the
 * build is rolled back), or a negative SS_ERR_* with errmsg filled. */
int ss_index_build_open(ss_index **out, const char *path, char *errmsg);

/* Adds or replaces the text of document `id` (text: text_len bytes of
 * UTF-8, need not be NUL-terminated; text_tokens: its token count, or -1
 * when unknown). Later calls for the same id in one build win.
 * Returns 0, or SS_ERR_INVALID (empty id), SS_ERR_IO (SQLite). */
int ss_index_add_text(ss_index *ix, const char *id, const char *text, size_t text_len,
                      int64_t text_tokens, char *errmsg);

/* Adds or replaces the token ids of document `id` (tokens: [n_tokens] i32,
 * the ids its state was or is to be encoded from; n_tokens >= 0): what
 * query-time recompute feeds the model when the document has no stored
 * state. Call it after ss_index_add_text for the same id (which forgets the
 * tokens of the text it replaces); tokens count only while n_tokens equals
 * the text's token count. Returns 0, or SS_ERR_INVALID (empty id, n_tokens
 * < 0), SS_ERR_FORMAT (an id outside ss_index_set_vocab's bound: errmsg
 * "document ID: token I is T, outside the model's vocabulary [0, V)"),
 * SS_ERR_TOO_LARGE (over 2^29 tokens), SS_ERR_IO (SQLite). */
int ss_index_add_tokens(ss_index *ix, const char *id, const int32_t *tokens, int64_t n_tokens,
			char *errmsg);

/* Adds or replaces the location of document `id`'s state: the zstd frame at
 * byte `offset` (of `length` compressed bytes) in the state stream
 * `state_path` (a regular file that exists now; its path is stored as said
 * above; or an http:// or https:// URL, stored as given and not fetched
 * here: queries fetch the frame by a range request, see
 * ss_index_prefetch), for model `fingerprint`, having seen n_tokens tokens.
 * Returns 0, or SS_ERR_INVALID (empty id; a URL without a host or with a
 * space or control byte), SS_ERR_IO (path unresolvable, SQLite). */
int ss_index_add_state(ss_index *ix, const char *id, const char *state_path, uint64_t offset,
                       uint64_t length, const char *fingerprint, int64_t n_tokens,
                       char *errmsg);

/* Keeps, at the commit of this build, at most `bytes` of stored state
 * (the sum of the kept state records' compressed lengths): every document
 * is ranked by its hits (ss_index_add_hits, most first), then by n_tokens
 * (longest first: the costliest to recompute), then by id; in that order
 * each keeps its state when the state fits in what is left of the budget,
 * and the others become stateless (their state's location is forgotten,
 * its dtype kept: the record stays in its file). A document already
 * stateless stays so (adding its state again restores it). A document
 * whose stored tokens are missing (indexed before the tokens table) or
 * disagree with its state's n_tokens cannot be recomputed: it keeps its
 * state whatever its rank, and when those states alone exceed the budget
 * the commit fails (SS_ERR_TOO_LARGE, errmsg says how many and how much).
 * Dropping a state reads its record's metadata (for its dtype), so its
 * state file must be readable. bytes >= 0; -1 cancels.
 * Returns 0 or SS_ERR_INVALID (no build open, bytes < -1). */
int ss_index_set_state_budget(ss_index *ix, int64_t bytes, char *errmsg);

/* Makes, at the commit of this build, every document that has its text and
 * the tokens of that text (ss_index_add_tokens, n_tokens equal to the
 * text's token count) but no stored state, and is not stateless already,
 * stateless instead of leaving it out: of model `fingerprint` (docs.fingerprint,
 * what a recompute's model must have) and recomputed in `dtype`. Such a
 * document stays stateless until its state is added (which stores it),
 * as one a budget dropped. The commit then also fails with SS_ERR_MISMATCH
 * (nothing committed) when the index's states are of another model, even
 * if no document became stateless.
 * fingerprint: 16 lowercase hex digits, a model's (ss_model.fingerprint);
 * NULL cancels (dtype then unused). dtype: a states dtype name ("f32",
 * "f16", "bf16", "q8"; ss_dtype_parse_for SS_DTYPE_STATES, aliases
 * stored as the name). Both are copied.
 * Returns 0 or SS_ERR_INVALID (no build open, a malformed fingerprint, a
 * dtype that is not a states dtype: errmsg says which). */
int ss_index_set_stateless(ss_index *ix, const char *fingerprint, const char *dtype, char *errmsg);

/* Bounds the token ids this build adds (ss_index_add_tokens, the token
 * records of ss_index_add_stream) to [0, n_vocab), the vocabulary of the
 * model that will recompute them (ss-retrieve add --stateless --model):
 * an id outside it is refused where it enters, as the stateless document
 * could never be recomputed and every query hitting it would fail. 0
 * removes the bound. Returns 0 or SS_ERR_INVALID (no build open, n_vocab <
 * 0). */
int ss_index_set_vocab(ss_index *ix, int32_t n_vocab, char *errmsg);

/* Adds n (>= 1) retrievals of document `id` to the hit counts that rank the
 * documents for ss_index_set_state_budget (a query log; counts of one id
 * add up). An id not in the index is ignored. Returns 0, SS_ERR_INVALID
 * (no build open, empty id, n < 1), SS_ERR_IO. */
int ss_index_add_hits(ss_index *ix, const char *id, int64_t n, char *errmsg);

/* Counts from ss_index_add_stream(). */
typedef struct {
	uint64_t n_text;   /* token records added (their text) */
	uint64_t n_states; /* state records added (their location) */
	uint64_t bytes;    /* compressed bytes read */
} ss_index_add_stats;

/* Called after every record (may be NULL); `st` holds the counts so far. */
typedef void (*ss_index_progress_fn)(void *ctx, const char *path, const ss_index_add_stats *st);

/* Reads the stream at `path` ("-" = stdin) and adds every record: token
 * records through ss_index_add_text and ss_index_add_tokens, state records through
 * ss_index_add_state (only their metadata prefix is decoded). A stream may
 * mix both formats. State records need a regular file (their offsets are
 * what is indexed): state records on a pipe give SS_ERR_INVALID. A token
 * record without text gives SS_ERR_FORMAT. Stream errors
 * (SS_ERR_TRUNCATED, ...) name the record and byte offset in errmsg.
 * max_record: as in ss_reader_open. st (may be NULL) receives the counts,
 * which are added to whatever it holds. Returns 0 or a negative SS_ERR_*;
 * after an error the build should be abandoned (ss_index_close). */
int ss_index_add_stream(ss_index *ix, const char *path, uint64_t max_record,
                        ss_index_add_stats *st, ss_index_progress_fn progress, void *ctx,
                        char *errmsg);

/* ss_index_add_stream, storing the state records' locations under `url`
 * (http:// or https://; NULL: path itself) instead of path: the local file
 * at path is read for the records' offsets, and queries fetch them from
 * url, which must serve the same bytes (checked at every fetch: the
 * record's id, fingerprint, length and frame checksum). Why a local copy
 * rather than reading the URL: the offsets are the stream's, learnt by
 * reading it once, and the host that builds the index is normally the one
 * that wrote the states before uploading them. Returns what
 * ss_index_add_stream does, or SS_ERR_INVALID (url not http(s)). */
int ss_index_add_stream_url(ss_index *ix, const char *path, const char *url, uint64_t max_record,
			    ss_index_add_stats *st, ss_index_progress_fn progress, void *ctx, char *errmsg);

/* Called by ss_index_commit for each document it has something to say about:
 * dropped != 0 when the document was left out of the index (it had text but
 * no state, or a state but no text, after this build), 0 for a warning (the
 * text's token count differs from the state's n_tokens: the state was
 * probably encoded from other text). `why` is one line. */
typedef void (*ss_index_note_fn)(void *ctx, const char *id, int dropped, const char *why);

typedef struct {
	int64_t n_docs;     /* documents in the index after the build */
	int64_t n_added;    /* new ids */
	int64_t n_replaced; /* ids that were already indexed and got new text and/or state */
	int64_t n_dropped;  /* incomplete documents left out (see ss_index_note_fn) */
	int64_t n_warned;   /* token-count disagreements (kept) */
	int64_t n_deleted;  /* documents removed by ss_index_delete */
	int64_t n_stateless; /* documents without a stored state after the build */
	int64_t n_dropped_states; /* states this build's budget dropped */
	int64_t n_made_stateless; /* documents ss_index_set_stateless made stateless */
	int64_t state_bytes; /* stored state bytes after the build */
} ss_index_build_stats;

/* Removes document `id` (its row, text and term vector) in the build open
 * on ix; the commit then rewrites the postings and corpus statistics
 * (N, avgdl, df) without it, as if it had never been added, and forgets a
 * state file no document points at any more. Deleting then adding an id
 * in one build adds it anew. The state record itself stays in its file.
 * Returns 0, SS_ERR_NOTFOUND (no such document: nothing changed),
 * SS_ERR_INVALID (empty id, no build open), SS_ERR_IO (SQLite). */
int ss_index_delete(ss_index *ix, const char *id, char *errmsg);

/* Ends a build: makes the documents without a state stateless
 * (ss_index_set_stateless, when set), drops documents that still lack text
 * or state (reporting each to `note`, may be NULL; a stateless document
 * whose new text came without tokens counts as lacking its state), applies
 * the state budget (ss_index_set_state_budget), checks that every state in
 * the index comes from one model, stateless ones and ss_index_set_stateless's
 * included (else SS_ERR_MISMATCH naming two fingerprints; nothing is
 * committed), merges the FTS segments and commits. st may be NULL.
 * Rewrites the postings of every term from the documents' term vectors
 * (time and memory about those of the postings, whatever the build added).
 * Returns 0, or a negative SS_ERR_* (the build is then rolled back, the
 * file left as it was): SS_ERR_FORMAT for a damaged index (a document row
 * without an id, or with a row id outside 1..249999999: errmsg names it),
 * SS_ERR_TOO_LARGE for a value past SQLite's length limit, SS_ERR_IO.
 * ix stays open (for ss_index_close) either way; no more adds after it. */
int ss_index_commit(ss_index *ix, ss_index_note_fn note, void *ctx, ss_index_build_stats *st,
                    char *errmsg);

/* Combines the indexes paths[0..n) (n >= 1; shards as ss_index_open_shards
 * takes them, and refused as it refuses them) into one new index file
 * `out`, whose queries give what the union of the shards gives: every
 * document added in shard order, each shard's in the order it was added
 * (row id), with its text, tokens, state location (a stored path made
 * relative to out's directory when the file lies under it) or its
 * stateless recompute dtype. The output is written whole or not at all:
 * built as "OUT.merge-PID" beside it, committed, then renamed over out (a
 * file there is replaced). Time and memory: those of ss_index_commit over
 * all the documents. st (may be NULL): the build's counts.
 * Returns 0, or a negative SS_ERR_* with errmsg naming the shard or out:
 * ss_index_open_shards's errors; SS_ERR_UNSUPPORTED for a shard built
 * before texts and tokens were kept (a document's text is what its terms
 * are made from) or stateless documents of two recompute dtypes or
 * models; the errors of ss_index_build_open / ss_index_add_* /
 * ss_index_commit; SS_ERR_IO (the rename). */
int ss_index_merge(const char *out, const char *const *paths, int n, ss_index_build_stats *st, char *errmsg);

/* ------------------------------------------------------------------ query */

/* Opens the index at `path` read-only (SQLITE_OPEN_READONLY) for queries.
 * Errors: SS_ERR_IO (cannot open), SS_ERR_FORMAT (not an ss index),
 * SS_ERR_VERSION (a schema version outside SS_INDEX_SCHEMA_MIN ..
 * SS_INDEX_SCHEMA_VERSION: errmsg says which).
 * Returns 0 and sets *out (free with ss_index_close). */
int ss_index_open(ss_index **out, const char *path, char *errmsg);

/* Opens paths[0..n) (n >= 1; n == 1 is ss_index_open) read-only as one
 * index: the union of their documents (shards), ranked exactly as one
 * index holding every document would rank them. A query sums the shards'
 * statistics (N, the documents' lengths for avgdl, each term's and
 * phrase's df) before it scores, so ids, ranks and scores equal one
 * index's (scores to the last bits: a score is the sum of its terms'
 * parts in query order); each shard's pruning (MaxScore, block maxima) is
 * bounded under the union's avgdl and starts from the k-th score of the
 * shards before it. Documents of equal score at the k-th place: the
 * earlier shard's first, then the order they were added: the choice of
 * one index built from the shards' inputs in the order given. Every other
 * call of this header goes to the shard that holds the document (a hit
 * carries it in .shard); ss_index_docs without an id lists shard after
 * shard, each in id order; ss_index_info_get sums (terms: the distinct
 * terms of all shards). Memory: the handles of n indexes.
 * Returns 0 and sets *out (free with ss_index_close), or a negative
 * SS_ERR_* with errmsg "PATH: what" naming the shard: the errors of
 * ss_index_open (a missing file, another schema version, not an index);
 * SS_ERR_INVALID when two shards hold one document id (errmsg names the
 * id and both files: found at open by a merge of the shards' ids in byte
 * order, time O(N log n)): a union of shards that overlap has no one
 * index it equals; SS_ERR_MISMATCH when two shards hold states of
 * different models (errmsg names both). */
int ss_index_open_shards(ss_index **out, const char *const *paths, int n, char *errmsg);

/* Number of documents in the index, or a negative SS_ERR_*. */
int64_t ss_index_count(ss_index *ix);

/* One retrieved document. Strings owned by the hit array. */
typedef struct {
	char *id;
	int32_t rank;          /* 1 = most relevant */
	double score;          /* BM25 score, > 0, higher = more relevant (as -fts5 bm25()) */
	char *path;            /* state file: absolute, or as the index path was given;
				* NULL when stateless */
	uint64_t offset;       /* byte offset of the state record's zstd frame */
	uint64_t length;       /* its compressed bytes */
	char fingerprint[SS_FINGERPRINT_MAX]; /* model fingerprint as indexed */
	int64_t n_tokens;
	int64_t file_id;       /* internal: which state file */
	int32_t shard;         /* which index of a union (ss_index_open_shards):
				* its place in the paths given; 0 for one index */
	int stateless;         /* no stored state: recompute it from its tokens */
	ss_dtype dtype;        /* stateless: the dtype to recompute it in */
	/* What ss_index_set_fetch asked for, read in the query's snapshot: */
	char *text;            /* SS_INDEX_FETCH_TEXT: its text (NUL after text_len
				* bytes), NULL when not stored (as ss_index_text) */
	size_t text_len;
	int32_t *tokens;       /* SS_INDEX_FETCH_TOKENS, a stateless hit: its token
				* ids ([n_stored_tokens] i32, as ss_index_tokens),
				* NULL when none are stored; NULL for the others */
	int64_t n_stored_tokens;
} ss_index_hit;

/* Top-k documents for `query` by BM25, best first, leaving out the ids in
 * exclude[0..n_exclude). The query is cut into terms as the text was (no
 * query syntax: AND, NEAR, "*", ":" are words or separators); its distinct
 * terms are OR-ed, each counted once, so a document holding any of them is
 * a candidate. score = sum over those terms of idf * tf (k1 + 1) /
 * (tf + k1 (1 - b + b dl / avgdl)), k1 = 1.2, b = 0.75, idf = ln((N - df +
 * 0.5) / (df + 0.5)) or 1e-6 when that is <= 0: FTS5's bm25() of the OR of
 * the terms. The top k is exact, found without scoring every candidate
 * (MaxScore). Hits of equal score are ordered by id. k >= 1.
 * Everything a query returns (scores, ids, locations, and the texts and
 * tokens of ss_index_set_fetch) comes from one read transaction: one
 * snapshot of the index even while a build commits.
 * Returns the number of hits n (0 <= n <= k) with *hits set (free with
 * ss_index_hits_free; NULL when n == 0), or SS_ERR_INVALID for an empty
 * query (no term with a letter or digit) or k < 1, SS_ERR_IO (SQLite),
 * SS_ERR_FORMAT (a damaged index: postings, lengths, a hit's row without
 * an id), and the errors of ss_index_text / ss_index_tokens for what
 * ss_index_set_fetch asks. */
int ss_index_query(ss_index *ix, const char *query, int k, const char *const *exclude,
                   size_t n_exclude, ss_index_hit **hits, char *errmsg);

/* Sets BM25's k1 and b for the following ss_index_query calls on ix (opened
 * with ss_index_open; defaults 1.2, 0.75, FTS5's). The scores change, the
 * index does not. Returns 0, or SS_ERR_INVALID (k1 outside [0, 1000], b
 * outside [0, 1], ix not open for queries). ref: Robertson & Zaragoza, "The
 * Probabilistic Relevance Framework: BM25 and Beyond" (2009) §3.4. */
int ss_index_set_bm25(ss_index *ix, double k1, double b, char *errmsg);

/* How ss_index_query reads a query (flags for ss_index_set_query). */
#define SS_INDEX_QUERY_PHRASES 1u   /* "words in quotes" is a phrase: its tokens
				     * adjacent and in order in the document */
#define SS_INDEX_QUERY_ALL 2u       /* a document must hold every term and
				     * phrase (AND; default: any, OR) */
#define SS_INDEX_QUERY_PROXIMITY 4u /* BM25TP: a score for query terms standing
				     * close together, added to BM25's */

/* Sets how the following ss_index_query calls on ix read and score a
 * query (SS_INDEX_QUERY_* or-ed; 0, the default: the plain OR of the
 * query's words, no syntax, as described at ss_index_query). With
 * SS_INDEX_QUERY_PHRASES each pair of double quotes holds a phrase, cut
 * into tokens as a document is (compounds left out: "U.S. army" is
 * u, s, armi adjacent); a phrase's tf is its number of occurrences (every
 * start position, overlaps counted) and its idf comes from the number of
 * documents holding it: FTS5's bm25() of the phrase. With
 * SS_INDEX_QUERY_ALL a document must hold every clause (FTS5's AND). With
 * SS_INDEX_QUERY_PROXIMITY, a query of two or more words outside quotes
 * also scores how close they stand: BM25TP (lib/index/bm25.h has the
 * formula; ref: Büttcher, Clarke & Lushman, SIGIR 2006). The top k stays
 * exact; a query with phrases, ALL or PROXIMITY scores every candidate
 * (no MaxScore pruning). Phrases and proximity need the word positions
 * an index stores (formats/index.md; an index built before them gets
 * them at its next build from its stored texts): without them
 * ss_index_query fails with SS_ERR_UNSUPPORTED naming the rebuild. Its
 * errors for a query under these flags: SS_ERR_INVALID with errmsg naming
 * an unbalanced quote, an empty phrase, a phrase of more than 64 tokens.
 * Returns 0, or SS_ERR_INVALID (unknown flags, ix not open for queries). */
int ss_index_set_query(ss_index *ix, unsigned flags, char *errmsg);

/* Whether `query` is well formed under ix's flags (ss_index_set_query),
 * without searching: for a tool to refuse a bad query before it writes
 * anything. A query with no term passes (ss_index_query's "empty query").
 * Returns 0, SS_ERR_INVALID with errmsg (an unbalanced quote, an empty
 * phrase, a phrase of more than 64 tokens), SS_ERR_NOMEM. */
int ss_index_query_check(ss_index *ix, const char *query, char *errmsg);

/* What ss_index_query reads with each hit beside its location (flags). */
#define SS_INDEX_FETCH_TEXT 1u   /* hit.text: the document's text */
#define SS_INDEX_FETCH_TOKENS 2u /* hit.tokens: a stateless document's tokens */

/* Sets what the following ss_index_query calls on ix read with each hit
 * (SS_INDEX_FETCH_* or-ed; 0, the default: the location only). They are
 * read in the query's one read transaction, with the scores and the
 * locations: a build that commits meanwhile changes none of them, where
 * ss_index_text / ss_index_tokens called after the query would read the
 * later snapshot (another text, or "no document"). Returns 0, or
 * SS_ERR_INVALID (unknown flags, ix not open for queries). */
int ss_index_set_fetch(ss_index *ix, unsigned what, char *errmsg);

/* Frees hits[0..n) and the array. NULL is fine. */
void ss_index_hits_free(ss_index_hit *hits, int n);

/* Location of document `id` as a hit (rank 0, score 0). Returns 0 with *hit
 * filled (free its strings with ss_index_hit_clear), SS_ERR_NOTFOUND, or
 * SS_ERR_IO. */
int ss_index_lookup(ss_index *ix, const char *id, ss_index_hit *hit, char *errmsg);
/* Frees the strings and arrays of one hit (not the hit itself). */
void ss_index_hit_clear(ss_index_hit *hit);

/* One indexed document, as ss_index_docs gives it: strings borrowed, valid
 * during the callback only. */
typedef struct {
	const char *id;
	const char *path;        /* state file: absolute, or as the index path was given;
				  * NULL when stateless (offset, length 0) */
	uint64_t offset;         /* byte offset of the state record's zstd frame */
	uint64_t length;         /* its compressed bytes */
	const char *fingerprint; /* model fingerprint of the state */
	int64_t n_tokens;        /* tokens the state has seen */
	int64_t text_tokens;     /* tokens of its token record, -1 when unknown */
	int64_t text_len;        /* bytes of its text (UTF-8) */
	int64_t n_terms;         /* its length in terms (BM25's dl) */
	int has_text;            /* its text is stored (ss_index_text) */
	int has_tokens;          /* its tokens are stored (ss_index_tokens) */
	int stateless;           /* no stored state (a budget dropped it, or none was added) */
	const char *dtype;       /* stateless: the dtype it is recomputed in; else NULL */
} ss_index_doc;

/* Called per document; a non-zero return stops ss_index_docs, which
 * returns it. */
typedef int (*ss_index_doc_fn)(void *ctx, const ss_index_doc *doc);

/* Calls fn for document `id`, or for every document in id order (byte
 * order) when id is NULL, from one read snapshot (memory: one row at a
 * time). fn may be NULL (checks that id exists). Returns 0, fn's non-zero
 * return, SS_ERR_NOTFOUND (id given and absent), SS_ERR_NOMEM, SS_ERR_IO,
 * SS_ERR_FORMAT (a damaged index: a row without an id); SS_ERR_INVALID
 * when ix is not open for queries (ss_index_open). */
int ss_index_docs(ss_index *ix, const char *id, ss_index_doc_fn fn, void *ctx, char *errmsg);

/* The text document `id` was indexed from (the "text" of its token record,
 * UTF-8, as given), kept in the index's texts table since that table was
 * added (an index built before has none until its documents are added
 * again). Returns 0 with *text (malloc'ed, NUL-terminated; free() it) and
 * *len (bytes, not counting the NUL) set, or *text NULL and *len 0 when the
 * text is not stored; SS_ERR_NOTFOUND (no such document), SS_ERR_NOMEM,
 * SS_ERR_IO, SS_ERR_INVALID (ix not open for queries). */
int ss_index_text(ss_index *ix, const char *id, char **text, size_t *len, char *errmsg);

/* The token ids of document `id` as indexed (ss_index_add_tokens): what
 * its state is recomputed from. Returns 0 with *tokens ([*n_tokens] i32,
 * malloc'ed, free() it; never NULL on success) set, or *tokens NULL and
 * *n_tokens 0 when no tokens are stored for its current text (an index
 * built before tokens were kept); SS_ERR_NOTFOUND (no such document),
 * SS_ERR_NOMEM, SS_ERR_IO, SS_ERR_INVALID (ix not open for queries). */
int ss_index_tokens(ss_index *ix, const char *id, int32_t **tokens, int64_t *n_tokens, char *errmsg);

/* What an index holds (ss_index_info_get). */
typedef struct {
	int64_t n_docs;      /* documents */
	int64_t n_terms;     /* distinct terms (the vocabulary) */
	int64_t n_doc_terms; /* sum of the documents' lengths in terms (N avgdl) */
	int64_t n_tokens;    /* sum of the states' token counts */
	int64_t text_bytes;  /* sum of the texts' lengths, bytes */
	int64_t n_texts;     /* documents whose text is stored */
	int64_t state_bytes; /* sum of the stored state records' compressed lengths */
	int64_t n_stateless; /* documents without a stored state */
	int64_t n_files;     /* state files (shards) */
	int64_t index_bytes; /* the index file: page_count * page_size */
	char fingerprint[SS_FINGERPRINT_MAX]; /* model of every state; "" when empty */
} ss_index_info;

/* Fills *info from one read snapshot of ix (opened with ss_index_open).
 * Returns 0, SS_ERR_IO, SS_ERR_INVALID. */
int ss_index_info_get(ss_index *ix, ss_index_info *info, char *errmsg);

/* Called per state file; path is borrowed, valid during the call only. A
 * non-zero return stops ss_index_files, which returns it. */
typedef int (*ss_index_file_fn)(void *ctx, const char *path);

/* Calls fn for every state file (shard) the index refers to, in the order
 * they were added, path absolute or as the index path was given (as
 * ss_index_hit.path). Returns 0, fn's non-zero return, SS_ERR_NOMEM,
 * SS_ERR_IO, SS_ERR_INVALID (ix not open for queries). */
int ss_index_files(ss_index *ix, ss_index_file_fn fn, void *ctx, char *errmsg);

/* Reads the state record of `hit` from its state file and checks that it is
 * the indexed one (a stateless hit gives SS_ERR_NOTFOUND, "document ID has
 * no stored state"): the file exists, a record decodes at the offset, its
 * compressed length, id and fingerprint equal the indexed ones, and the
 * frame lies within the file. meta_only != 0 decodes only the metadata
 * prefix (ss_reader_next_meta), enough to validate cheaply before emitting.
 * On success *rec points at the record, owned by a reader the index caches
 * per state file: valid until the next ss_index_read or ss_index_close.
 * Errors (errmsg "document ID at byte offset N: what", the caller names the
 * file): SS_ERR_NOTFOUND (file missing), SS_ERR_TRUNCATED (file shorter
 * than the record), SS_ERR_MISMATCH (another record at the offset: id,
 * fingerprint or length differ), or the reader's error. */
int ss_index_read(ss_index *ix, const ss_index_hit *hit, int meta_only, const ss_record **rec,
                  char *errmsg);

/* Reads the state of `hit` into *s: the record ss_index_read reads, with
 * its checks and errors (errmsg "document ID at byte offset N: what"),
 * decoded as ss_record_state decodes it (conv and ssm in f32, each exactly
 * the bytes its dims make, every element checked finite). *s is zeroed or a state this or ss_state_alloc /
 * ss_state_copy filled; its conv and ssm arrays are written in place when
 * their dims are the record's (else freed, and new ones allocated), the
 * rest of it replaced. An f32, f16 or bf16 record of a local file is read
 * by pieces (ss_reader_next_pieces: a raw frame without zstd, with its
 * checksum), into the arrays with no record buffer between; other records
 * (q8, q4, byte-shuffled; over HTTP) are read whole. For readers of many
 * states of one model in turn (ss-retrieve query --rerank), whose fresh
 * pages and record copy of a 19 MB state cost more than reading it.
 * Returns 0 or ss_index_read's and ss_record_state's errors; after an error
 * *s holds no state to use, but what it holds is still the caller's to
 * ss_state_free. */
int ss_index_read_state(ss_index *ix, const ss_index_hit *hit, ss_state *s, char *errmsg);

/* Composes the stored states of hits[0..n) in that order (the
 * concatenation order: a query's hits come most relevant first, so pass
 * them reversed to put the most relevant last) with ss_compose_run(o, r,
 * res): r gives the threads, output and options; its source fields are
 * set here. Each hit is first checked as ss_index_read(meta_only) checks
 * it, but for its frame's length, taken as indexed (the composer reads
 * the frame by its own blocks and checksum); local state files are then
 * read by place (r->offsets: each frame from its offset, in
 * r->threads threads), hits at http(s) URLs through ss_index_read. Errors:
 * ss_index_read's ("document ID at byte offset N: what"; a stateless hit
 * SS_ERR_NOTFOUND), n < 1 SS_ERR_INVALID, SS_ERR_NOMEM, ss_compose_run's.
 * res as ss_compose_run's (the caller frees res->state). */
int ss_index_compose(ss_index *ix, const ss_index_hit *hits, int n, const ss_compose_opts *o,
		     ss_compose_run_opts *r, ss_compose_result *res, char *errmsg);

/* Appends document `hit` to the state stream `w` as retrieval output: an
 * annotation frame with hit->rank and hit->score (ss_writer_put_annotation),
 * then the state record's zstd frame copied verbatim from its state file
 * (hit->length bytes at hit->offset), neither decompressed nor recompressed.
 * Read back, the record is the stored one with has_rank/rank/score set
 * (ss_record_rank, ss_state). Callers write the hits of a query most relevant
 * last (hits[n-1] first).
 * Before anything is written the record is validated as by ss_index_read
 * with meta_only (file present, id, fingerprint and frame length at the
 * offset); the frame body's checksum is left to whoever decodes the output.
 * The frame goes from the state file to w's file by sendfile(2)
 * (ss_writer_put_file_range): into a pipe, the page cache's pages without
 * a copy through this process, and no memory here. It invalidates records
 * borrowed from ss_index_read.
 * Returns 0, or:
 *   - the errors of ss_index_read, and SS_ERR_TRUNCATED (the file ends
 *     inside the frame: truncated since it was opened), SS_ERR_IO (read
 *     error): errmsg "document ID at byte offset N: what", the caller names
 *     the state file; nothing was written to w, but for a file cut or
 *     failing while its frame is copied (part of it was written: the
 *     caller abandons w, ss_writer_abort);
 *   - SS_ERR_IO when writing to w fails: errmsg is the empty string and
 *     errno is kept, the caller names its output (which should then be
 *     abandoned with ss_writer_abort).
 * ref: zstd skippable frames (RFC 8878 §3.1.2), formats/states.md. */
int ss_index_copy(ss_index *ix, const ss_index_hit *hit, ss_writer *w, char *errmsg);

/* ----------------------------------------------------- states over HTTP */

/* A state file may be an http:// or https:// URL (ss_index_add_state,
 * ss_index_add_stream_url): S3, GCS or Azure objects through public or
 * presigned URLs, any web server or CDN that serves range requests.
 * ss_index_read and ss_index_copy then fetch the hit's frame by a request
 * for its bytes (Range: bytes=OFF-END, libcurl), accept only a 206 with
 * that Content-Range and exactly those bytes (a server that ignores Range
 * and answers 200 is refused at the first byte: SS_ERR_UNSUPPORTED, not
 * downloaded whole), verify the frame's checksum once (ss_frame_verify, or
 * ss_frame_check as it streams: a file replaced on the server gives
 * SS_ERR_CHECKSUM, or SS_ERR_MISMATCH for another record there), check its
 * metadata as a local one's (id, fingerprint, length), and copy it from
 * memory (a memfd), or its rest straight from the transfer into the
 * output (ss_index_prefetch). Redirects are
 * followed (8 at most: a loop is SS_ERR_IO "more than 8 redirects"), to
 * http(s) only. Transient failures
 * (HTTP 5xx, 408, 429; a refused, reset or cut connection; a stall) are
 * retried after 0.25 s, 0.5 s, 1 s ...; the others fail at once: HTTP 404
 * and 410 SS_ERR_NOTFOUND, 416 SS_ERR_TRUNCATED, others SS_ERR_IO, a cut
 * transfer SS_ERR_TRUNCATED; errmsg names the document, the offset and
 * the HTTP status or curl's error (never the URL: callers print it through
 * ss_url_redact). Connections are kept alive from one query to the next
 * (one libcurl multi handle per index). */

/* 1 when path is an http:// or https:// URL (case-insensitive scheme). */
int ss_url_is_http(const char *path);

/* path as it may be shown (a message, a listing): a URL's userinfo
 * ("user:password@") as "***@" and its query string (where presigned URLs
 * keep their signatures: X-Amz-Signature, X-Goog-Signature, sig=) as
 * "?***", its fragment left out; anything else as it is. Writes at most
 * size bytes (NUL included) to buf and returns buf. */
const char *ss_url_redact(const char *path, char *buf, size_t size);

/* Fetches, in parallel (up to 8 connections a host), the frames of the
 * hits hits[0..n) whose state file is a URL, so that the ss_index_read and
 * ss_index_copy calls that follow on them read memory: a query's k hits
 * cost about one round trip and the largest transfer, not k of them.
 * whole: 1 fetches each frame whole (then ss_index_read with meta_only
 * verifies its checksum); 0 fetches a longer record's head only (256 KiB,
 * or a sixteenth of it when more: its metadata), for ss_index_copy to an
 * output that ss_writer_abort takes back (ss_writer_discards_on_abort):
 * it writes the head and then the rest as it arrives, checking the whole
 * frame on the way (a checksum that fails at the frame's end fails the
 * copy, and the caller abandons w); from a server found slow to answer
 * (50 ms from a request to its first byte: the rests, one after another,
 * would pay it each) the records are fetched whole all the same, and so
 * is a record streamed once by this index and asked for again (kept for
 * the next queries of a batch). Each
 * transfer's failure is kept and returned by the ss_index_read or
 * ss_index_copy of that hit. Other hits are left alone. Memory: what was fetched, until the next prefetch needs
 * the room (2 GiB at most kept; the oldest are dropped first and fetched
 * again when read). Returns 0, SS_ERR_NOMEM, SS_ERR_IO (libcurl would not
 * start), SS_ERR_INVALID. */
int ss_index_prefetch(ss_index *ix, const ss_index_hit *hits, int n, int whole, char *errmsg);

/* Sets how a fetch waits: timeout_s bounds connecting and a stall (no
 * byte for that long), not a whole transfer; retries: how many times a
 * transient failure is tried again (defaults 30 s and 3). Returns 0 or
 * SS_ERR_INVALID (timeout outside [0.001, 86400] s, retries outside
 * [0, 100]). */
int ss_index_set_http(ss_index *ix, double timeout_s, int retries, char *errmsg);

/* Closes the index (rolling back an uncommitted build) and every cached
 * state file reader. NULL is fine. */
void ss_index_close(ss_index *ix);

/* Registers the index's tokenizer as FTS5 tokenizer "ss" on SQLite
 * connection db, so that an FTS5 table with tokenize = 'ss' and its bm25()
 * score the index's terms exhaustively (the tests' and bench/retrieve's
 * reference; the terms are those of lib/index/bm25.h): compounds are
 * FTS5_TOKEN_COLOCATED tokens there, which FTS5 leaves out of a row's
 * length. It takes no arguments. db stays the caller's.
 * Returns 0 or SS_ERR_UNSUPPORTED (no FTS5). ref: SQLite fts5.html §7. */
struct sqlite3;
int ss_bm25_tokenizer_register(struct sqlite3 *db);


#ifdef __cplusplus
}
#endif
#endif /* SS_INDEX_H */
