/*
 * ss_stream.h — record streams (part of libss; include "ss.h").
 * Public: part of libss's interface (ss.h says what that means).
 *
 * A stream is a sequence of records; each record is one msgpack map
 * compressed as one zstd frame (content size declared, checksum on). So:
 *   - streams concatenate with cat(1);
 *   - a record's address is the byte offset of its frame, and a reader can
 *     seek there and decode that record alone (ss-retrieve's index does);
 *   - a reader holds one record at a time: memory is bounded by the largest
 *     record, and a declared content size above the limit is refused before
 *     anything is allocated; below it, memory grows with the bytes a frame
 *     actually yields, not with the size its header declares.
 * Every record map carries "format" ("ss-tokens" | "ss-states") and
 * "version" (SS_STREAM_VERSION). Specs: formats/tokens.md, formats/states.md.
 * ref: zstd frame format (RFC 8878 §3.1), msgpack spec.
 */
#ifndef SS_STREAM_H
#define SS_STREAM_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SS_STREAM_VERSION 1
#define SS_FORMAT_TOKENS "ss-tokens"
#define SS_FORMAT_STATES "ss-states"
/* Default limit on one record's decompressed size: 512 MiB, three times
 * the largest real record (a mamba2-2.7b f32 state, ~168 MB; a token record
 * of a document at ss-tokenize's 64 MiB default limit is at most ~320 MB). */
#define SS_MAX_RECORD_DEFAULT (UINT64_C(512) << 20)
#define SS_FINGERPRINT_MAX 64
#define SS_ZSTD_LEVEL_DEFAULT 3
/* zstd skippable-frame magic of an annotation frame: a msgpack map
 * {"rank", "score"} (and "rerank_score" when reranked) that applies to the
 * record after it (formats/states.md).
 * Lets ss-retrieve annotate stored frames without recompressing them. */
#define SS_ANNOT_MAGIC 0x184D2A53u
/* zstd skippable-frame magic of a plan frame: a msgpack map {"n",
 * "logdecay"} ahead of a stream's first record, the logdecay of each of
 * the n records that follow (formats/states.md), so that a composer can
 * weight the records of a pipe before it reads them (ss_reader_plan).
 * Its payload is at most SS_PLAN_MAX bytes. */
#define SS_PLAN_MAGIC 0x184D2A54u
#define SS_PLAN_MAX (64u << 20)
/* Elements per block of the byte shuffle of a state's f16/bf16 arrays
 * (ss_shuffle; formats/states.md "shuffle"): 512 KiB of f16, so that each
 * byte plane (256 KiB) fills whole 128 KiB zstd blocks, whose entropy
 * tables are where the gain comes from: with 32 or 128 KiB shuffle blocks
 * f16 states gained nothing (bench/compose, random mamba2-130m on WikiText
 * chunks). Readers take the block from the record. */
#define SS_SHUFFLE_BLOCK 262144
/* Readers refuse a larger block (a composer buffers one). */
#define SS_SHUFFLE_MAX 1048576
/* ss_writer_set_min_saving's default: a state record is stored compressed
 * only when zstd makes it a fifth smaller. Decoding runs at about 1 GB/s of
 * output, reading a raw frame from the page cache at memory speed (10x
 * that), so a smaller saving costs more time than it saves bytes: f32
 * states of real text compress by 6-8%, f16/bf16/q8 by 7-12%
 * (bench/compose, formats/states.md). */
#define SS_MIN_SAVING_DEFAULT 0.2

/* ---------------------------------------------------------------- reading */

typedef struct ss_reader ss_reader;

/* One decoded record, owned by its reader: valid until the next
 * ss_reader_next()/next_meta/seek/close on that reader. Opaque: read it with
 * the ss_record_* functions (what it is and where it came from below; its
 * contents with ss_record_tokens, ss_record_state...). */
typedef struct ss_record ss_record;

/* Opens `path` for reading; "-" or NULL means stdin (a pipe is fine).
 * max_record: limit on one record's decompressed size, 0 = default.
 * Returns 0 and sets *out (caller frees with ss_reader_close), or a negative
 * SS_ERR_* with errmsg (SS_ERRMSG_MAX bytes, may be NULL) filled. */
int ss_reader_open(ss_reader **out, const char *path, uint64_t max_record, char *errmsg);

/* ss_reader_open for a file named in data rather than on a command line
 * (a state file of a --prompts line): path must be a regular file, opened
 * without blocking (ss_open_regular), never "-". Returns what
 * ss_reader_open does, or SS_ERR_INVALID with errmsg "not a regular file
 * (a FIFO, a directory or a device)" before anything is read. */
int ss_reader_open_regular(ss_reader **out, const char *path, uint64_t max_record, char *errmsg);

/* Reads the regular file open at fd as ss_reader_open_regular reads a
 * named one (seekable), from byte 0, through a duplicate of fd (fd stays
 * the caller's; the two share the file offset). name: what
 * ss_reader_path says (copied; NULL: "(descriptor)"). For a file with no
 * name (a state record fetched over HTTP into a memfd). Returns 0 and sets
 * *out (free with ss_reader_close), SS_ERR_INVALID (not a regular file),
 * SS_ERR_IO, SS_ERR_NOMEM. */
int ss_reader_open_fd(ss_reader **out, int fd, const char *name, uint64_t max_record, char *errmsg);

/* ss_reader_open_fd for a file that holds only the first bytes of one
 * frame of frame_len bytes (the head of a state record fetched over HTTP,
 * the rest still to come): ss_reader_next_meta reads the record's
 * metadata from them and gives it length frame_len, trusting it (the
 * caller checks the whole frame as it arrives: ss_frame_check). Any read
 * that needs bytes beyond the head (metadata longer than it, a map in
 * another key order, ss_reader_next) fails with SS_ERR_TRUNCATED. Returns
 * what ss_reader_open_fd does. */
int ss_reader_open_head(ss_reader **out, int fd, const char *name, uint64_t frame_len, char *errmsg);

/* A zstd frame checked as it arrives in pieces, without keeping what it
 * holds: begin, update with its bytes in order (any split), end. The
 * frame must be whole and end exactly with the last byte given, and its
 * content checksum (when it has one: every writer's does) match; zstd
 * decodes it through a 128 KiB buffer (a raw block costs a copy there).
 * update returns 0, SS_ERR_CHECKSUM, SS_ERR_FORMAT (not zstd, corrupt,
 * or bytes after the frame's end); end returns 0, SS_ERR_CHECKSUM or
 * SS_ERR_TRUNCATED (the frame is not over); errmsg says why. open:
 * 0 or SS_ERR_NOMEM; one check serves frame after frame (begin); close
 * frees it (NULL is a no-op). ref: RFC 8878 §3.1.1 (frames, checksum). */
typedef struct ss_frame_check ss_frame_check;
int ss_frame_check_open(ss_frame_check **out);
void ss_frame_check_begin(ss_frame_check *c);
int ss_frame_check_update(ss_frame_check *c, const void *p, size_t n, char *errmsg);
int ss_frame_check_end(ss_frame_check *c, char *errmsg);
void ss_frame_check_close(ss_frame_check *c);

/* Verifies the one zstd frame frame[0..len) as a whole (ss_frame_check
 * over it): whole, exactly len bytes, its checksum matching. For a frame
 * fetched whole (a state record over HTTP) before it is copied verbatim.
 * Returns 0, SS_ERR_CHECKSUM, SS_ERR_TRUNCATED, SS_ERR_FORMAT,
 * SS_ERR_NOMEM, with errmsg. */
int ss_frame_verify(const void *frame, size_t len, char *errmsg);

/* Reads the next record. Returns 1 with *rec pointing at it (owned by r,
 * see ss_record; *rec is NULL otherwise), 0 at a clean end of stream, or a
 * negative SS_ERR_* (TRUNCATED, CHECKSUM, FORMAT, TOO_LARGE, VERSION, IO);
 * then ss_reader_error() names the record number and byte offset. An empty
 * input is a clean end (0 records); callers that need at least one record
 * say so. */
int ss_reader_next(ss_reader *r, const ss_record **rec);

/* Moves to the frame at byte `offset` (regular files only; SS_ERR_INVALID on
 * a pipe). The next ss_reader_next() decodes the record there. */
int ss_reader_seek(ss_reader *r, uint64_t offset);

/* Like ss_reader_next(), but decompresses only the start of the record,
 * enough for every field except "conv" and "ssm" (which writers put last),
 * and skips the rest of the frame. For two-pass tools that first read
 * decays and ids. The returned record has no "conv"/"ssm" keys — use
 * ss_record_state_meta() on it. A record whose map has other entries
 * after its first "conv"/"ssm" key (another key order than writers make)
 * is read whole, as ss_reader_next() reads it, so that every field is
 * read the same either way. */
int ss_reader_next_meta(ss_reader *r, const ss_record **rec);

/* The plan frame ahead of the stream's first record (ss-retrieve query
 * writes one): the logdecay of each of the n records that follow, in
 * order. Looks at the frames before the first record, without reading it,
 * when no record has been read yet; a plan frame anywhere else is skipped
 * as zstd prescribes. It is a claim: ss_compose_run checks each record's
 * logdecay against it bit for bit as it reads the record (the composer's
 * plan, ss_composer_new, or its first pass) and the count at the end, in
 * every mode, and takes it on trust only while it is small (ss_compose.h).
 * Returns 1 with *n (>= 1), *H (values per record: ss_state_logdecay_len)
 * and *logdecay ([n][H] f32, finite and <= 0; borrowed: valid until
 * ss_reader_close), 0 when the stream begins without one (or a record was
 * read), or the reader's error: SS_ERR_FORMAT (a malformed plan frame, or
 * one over SS_PLAN_MAX), SS_ERR_TRUNCATED, SS_ERR_IO, SS_ERR_NOMEM
 * (ss_reader_error says which). ref: formats/states.md "Plan frames". */
int ss_reader_plan(ss_reader *r, size_t *n, size_t *H, const float **logdecay);

/* Last error, e.g. "record 3 (byte offset 8812): zstd frame truncated".
 * Never NULL. */
const char *ss_reader_error(const ss_reader *r);
/* The path as given ("-" for stdin). */
const char *ss_reader_path(const ss_reader *r);
/* True when the input is a regular file (seekable). */
int ss_reader_seekable(const ss_reader *r);
void ss_reader_close(ss_reader *r);

/* About a record read by the above (rec never NULL). */
/* Its "format": SS_FORMAT_TOKENS or SS_FORMAT_STATES (a reader refuses
 * others). Owned by the reader, valid as long as rec. */
const char *ss_record_format(const ss_record *rec);
/* Byte offset of the record's zstd frame in its input. */
uint64_t ss_record_offset(const ss_record *rec);
/* Bytes of the frame, compressed (what ss_index_copy copies). */
uint64_t ss_record_length(const ss_record *rec);
/* Bytes of the whole record decompressed (the frame's declared content
 * size, checked against what it holds when the frame was decoded), also
 * for a record read by ss_reader_next_meta (whose ss_record_size is its
 * metadata's). */
uint64_t ss_record_content_size(const ss_record *rec);
/* 0-based number of the record since the reader's open or last seek. */
uint64_t ss_record_index(const ss_record *rec);
/* The record's decompressed msgpack map, ss_record_size() bytes, owned by
 * the reader; for a record read by ss_reader_next_meta, the map of its
 * metadata only. */
const void *ss_record_bytes(const ss_record *rec);
size_t ss_record_size(const ss_record *rec);
/* 1 when an annotation frame preceded the record (ss_writer_put_annotation),
 * then *rank (1 = most relevant) and *score (BM25, higher = more relevant)
 * are set (either may be NULL); else 0. */
int ss_record_rank(const ss_record *rec, int32_t *rank, double *score);
/* 1 when the record's annotation frame also held a "rerank_score" (the
 * model's score of a reranked retrieval, higher = more relevant: ss-retrieve
 * query --rerank), then *rerank_score is set (may be NULL); else 0. */
int ss_record_rerank_score(const ss_record *rec, double *rerank_score);

/* ---------------------------------------------------------- output files */

/* An output file that appears whole or not at all: a named path is written
 * to a temporary file in the same directory and renamed over the path by
 * ss_output_commit(); "-" or NULL is stdout; an existing path that is not a
 * regular file (a device like /dev/null, a FIFO) is written in place. */
typedef struct ss_output ss_output;
/* Returns 0 and sets *out, SS_ERR_IO (errmsg says why) or SS_ERR_NOMEM. */
int ss_output_open(ss_output **out, const char *path, char *errmsg);
/* The stream to write to; owned by the output. */
FILE *ss_output_file(const ss_output *o);
/* 1 when o is a temporary file until committed (ss_output_abort leaves
 * nothing), 0 when written in place. */
int ss_output_is_temporary(const ss_output *o);
/* Tells o that `off` bytes are written to its stream: every 1 MiB, a named
 * file's new bytes are flushed and a thread of o's (started at the first
 * MiB) fdatasyncs them while the caller writes on, so that the commit's
 * fsync waits for the last piece only, not for the whole file. Optional;
 * never fails (an error is ss_output_commit's). */
void ss_output_written(ss_output *o, uint64_t off);
/* Flushes, fsyncs, closes and renames into place; frees o. Returns 0 or
 * SS_ERR_IO (then the temporary file is removed). */
int ss_output_commit(ss_output *o, char *errmsg);
/* Closes and removes the temporary file; frees o. NULL is a no-op. */
void ss_output_abort(ss_output *o);
/* Removes the temporary files of every output not yet committed or
 * aborted, without freeing anything: for exit and signal handlers. */
void ss_output_abort_all(void);

/* ---------------------------------------------------------------- writing */

typedef struct ss_writer ss_writer;

/* Opens `path` for writing through an ss_output ("-" or NULL means stdout):
 * a named file appears only on a successful ss_writer_close(), so a failed
 * or interrupted run leaves no partial output. Refuses (SS_ERR_INVALID) to
 * write to stdout when it is a terminal.
 * level: zstd level, 0 = SS_ZSTD_LEVEL_DEFAULT. */
int ss_writer_open(ss_writer **out, const char *path, int level, char *errmsg);

/* Appends one record: `buf` holds one msgpack map of `len` bytes. Sets
 * *offset (may be NULL) to the frame's byte offset in the output. */
int ss_writer_put(ss_writer *w, const void *buf, size_t len, uint64_t *offset);

/* Appends an already-compressed frame verbatim (ss-retrieve copies records
 * without recompressing). */
int ss_writer_put_frame(ss_writer *w, const void *frame, size_t len, uint64_t *offset);
/* Appends len bytes of the file open at fd from byte `offset`, as they
 * are (a stored zstd frame: ss_index_copy), through sendfile(2): from the
 * page cache into a pipe or file without passing through this process
 * (read and write through a 64 KiB buffer where the kernel refuses).
 * *done: the bytes appended, also on error. Returns 0; SS_ERR_TRUNCATED
 * (fd ends before offset + len) or SS_ERR_IO with w still usable (a read
 * error: fd's); SS_ERR_IO with w failed (a write error, errno kept, as
 * every writer function; ss_writer_close says why). Either way the caller
 * abandons the output (ss_writer_abort): a frame may be cut. */
int ss_writer_put_file_range(ss_writer *w, int fd, uint64_t offset, uint64_t len, uint64_t *done);

/* Appends an annotation frame: the next record written gets this retrieval
 * rank and score when read back (ss_record_rank, ss_state.has_rank).
 * Readers that do not know it skip it (a zstd skippable frame). */
int ss_writer_put_annotation(ss_writer *w, int32_t rank, double score);
/* Makes the next annotation frame written to w (ss_writer_put_annotation,
 * also ss_index_copy's) carry "rerank_score": rerank_score as well; it is
 * then forgotten. For reranked retrieval output (ss-retrieve query
 * --rerank), where "score" stays the first stage's (BM25). */
void ss_writer_set_rerank_score(ss_writer *w, double rerank_score);
/* Appends a plan frame: logdecay [n][H] f32 (borrowed), the decays of the
 * n state records the caller writes next, in that order (see
 * ss_reader_plan). Returns 0, SS_ERR_INVALID (n or H 0, or a payload over
 * SS_PLAN_MAX: write none), SS_ERR_NOMEM, or SS_ERR_IO (errno kept). */
int ss_writer_put_plan(ss_writer *w, size_t n, size_t H, const float *logdecay);

/* Whether ss_writer_put_state byte-shuffles f16/bf16 conv and ssm in blocks
 * of SS_SHUFFLE_BLOCK elements before zstd (formats/states.md "shuffle";
 * never in a raw frame, ss_writer_set_min_saving):
 * on (1) by default, as it makes such records 7-11% smaller (bench/compose);
 * 0 writes them as before. f32 and q8 are never shuffled. */
void ss_writer_set_shuffle(ss_writer *w, int on);

/* The least saving for which ss_writer_put_state keeps a record's zstd
 * frame compressed: a fraction of the record's bytes (default
 * SS_MIN_SAVING_DEFAULT), judged on its first MiB (the whole record when
 * smaller). A record that compresses by less is written as
 * an uncompressed frame (raw blocks, formats/states.md "raw frames"),
 * unshuffled, which composition reads in place from a memory map. 0: every
 * record compressed, as before raw frames; above 1: every state record raw.
 * Token records are always compressed. */
void ss_writer_set_min_saving(ss_writer *w, double fraction);

/* Compresses the records that follow with n threads (zstd's
 * ZSTD_c_nbWorkers: the frame is cut into jobs compressed in parallel
 * while the caller writes what is done); n <= 1: in the caller's thread,
 * the default. The records read back to the same bytes either way; the
 * frames' compressed bytes differ. Returns 0, or SS_ERR_UNSUPPORTED when
 * this libzstd has no threads or fewer than n (the writer is unchanged). */
int ss_writer_set_threads(ss_writer *w, int n);

/* 1 when ss_writer_abort leaves nothing behind (a named regular file,
 * written to a temporary file until ss_writer_close), 0 when the bytes
 * go out as written (stdout, a device, a FIFO). */
int ss_writer_discards_on_abort(const ss_writer *w);
/* 1 when a write to w has failed (ss_writer_close will say why), else 0. */
int ss_writer_failed(const ss_writer *w);
/* Flushes, fsyncs and renames into place. Returns 0, or SS_ERR_IO when any
 * write failed (the temporary file is then removed). Frees w either way. */
int ss_writer_close(ss_writer *w, char *errmsg);
/* Discards the output (removes the temporary file) and frees w. */
void ss_writer_abort(ss_writer *w);
/* Bytes written so far. */
uint64_t ss_writer_tell(const ss_writer *w);

/* ---------------------------------------------------------- token records */

/* One document's tokens. All pointers owned by the struct. */
typedef struct {
	char *id;          /* document id, NUL-terminated UTF-8 */
	int32_t *tokens;   /* [n_tokens] token ids */
	int64_t n_tokens;
	char *text;        /* the document's text (NFC), or NULL; text_len bytes */
	size_t text_len;
	char *tokenizer;   /* tokenizer fingerprint, or NULL */
} ss_tokens;

void ss_tokens_free(ss_tokens *t);
/* Decodes a token record; SS_ERR_FORMAT with errmsg naming the field. */
int ss_record_tokens(const ss_record *rec, ss_tokens *out, char *errmsg);
int ss_writer_put_tokens(ss_writer *w, const ss_tokens *t, uint64_t *offset);

/* ---------------------------------------------------------- state records */

/* Architecture and dims of a state; equal dims + fingerprint = composable. */
typedef struct {
	char arch[16];     /* "mamba2" or "mamba1" (then nheads = d_inner,
			      headdim = 1, conv_dim = d_inner: one "head" per
			      channel, with a decay per state element) */
	int32_t n_layer, nheads, headdim, d_state, conv_dim, d_conv;
} ss_state_dims;

/* The state of one document (or a composition), all layers. Arrays are f32
 * in memory whatever the storage dtype; all pointers owned by the struct.
 * ref: docs/DESIGN.md §2 "State of a document". */
typedef struct {
	char *id;
	char fingerprint[SS_FINGERPRINT_MAX]; /* model fingerprint (hex) */
	ss_state_dims dims;
	int64_t n_tokens;    /* tokens the state has seen (sum for compositions) */
	ss_dtype dtype;      /* storage dtype in the stream */
	float *logdecay;     /* [n_layer][nheads], a_h = A_h * Σ_t dt_t,h ≤ 0;
				mamba1: [n_layer][d_inner][d_state],
				a_dn = A_dn * Σ_t dt_t,d */
	float *conv;         /* [n_layer][conv_dim][d_conv-1], k=0 oldest */
	float *ssm;          /* [n_layer][nheads][headdim][d_state] */
	/* q8 scales as read from a q8 record by ss_record_state_meta/view
	 * (ss_state_q8_blocks gives their layout); NULL otherwise. Writers
	 * ignore them: ss_writer_put_state computes its own from conv/ssm. */
	float *conv_scale;   /* [ss_state_q8_n_scales(d, 0)] */
	float *ssm_scale;    /* [ss_state_q8_n_scales(d, 1)] */
	/* Block (elements) of the byte shuffle of conv and ssm in the record
	 * read (formats/states.md "shuffle"), 0 when not shuffled. Set by the
	 * record decoders; writers ignore it (ss_writer_set_shuffle). */
	int32_t shuffle;
	/* Provenance of a composed state (mode == NULL for an encoded one). */
	char *mode;          /* "caso" | "picaso-r" | ... */
	char **sources;      /* [n_sources] source ids */
	int32_t n_sources;
	float *weights;      /* [logdecay_len][n_sources] or NULL: mamba2
				[n_layer][nheads][n_sources], mamba1
				[n_layer][d_inner][d_state][n_sources] */
	/* Retrieval annotation (has_rank == 0 when absent). */
	int has_rank;
	int32_t rank;        /* 1 = most relevant */
	double score;        /* BM25 score, higher = more relevant */
} ss_state;

/* 1 when d is a Mamba-1 state (arch "mamba1"), else 0. */
int ss_state_is_mamba1(const ss_state_dims *d);
/* Element counts of the three arrays for given dims (logdecay: n_layer ·
 * nheads, times d_state for mamba1). */
size_t ss_state_ssm_len(const ss_state_dims *d);
size_t ss_state_conv_len(const ss_state_dims *d);
size_t ss_state_logdecay_len(const ss_state_dims *d);
/* The q8 blocks of a state's conv (which 0) or ssm (which 1) array, as
 * ss_q8_* take them (formats/states.md "q8"): ssm one scale per (layer,
 * head, headdim row), row = block = d_state; conv one scale per (layer,
 * group of headdim channels), row = conv_dim·(d_conv-1), block =
 * headdim·(d_conv-1), so x, B and C never share a scale when d_inner and
 * d_state are multiples of headdim. */
void ss_state_q8_blocks(const ss_state_dims *d, int which, size_t *row, size_t *block);
size_t ss_state_q8_n_scales(const ss_state_dims *d, int which);
/* Allocates zeroed arrays for dims `d` (id NULL, dtype f32). */
int ss_state_alloc(ss_state *s, const ss_state_dims *d);
/* Deep copy of src's dims, fingerprint, n_tokens, logdecay, conv and ssm
 * into *dst (allocated here, dtype f32; id, provenance and annotation are
 * not copied). The caller frees dst with ss_state_free. Returns 0 or
 * SS_ERR_NOMEM. */
int ss_state_copy(ss_state *dst, const ss_state *src);
/* ss_state_copy into dst's own arrays (allocated for src's dims, e.g. by
 * ss_state_alloc; nothing is allocated or freed): for a state reused many
 * times over (a batch's running states), whose fresh pages would cost more
 * than the copy. dst's id, provenance and annotation are left as they are. */
void ss_state_copy_into(ss_state *dst, const ss_state *src);
void ss_state_free(ss_state *s);
/* 0 when dims are equal; else SS_ERR_MISMATCH with errmsg describing the
 * first difference ("nheads 8 vs 16"). */
int ss_state_dims_check(const ss_state_dims *a, const ss_state_dims *b, char *errmsg);

/* ---------------------------------------------------------- llama.cpp's sequence state */

/* A state as llama.cpp's per-sequence state of a recurrent model (Mamba-2
 * and Mamba-1 alike: the same conv and ssm arrays in the same C order,
 * always F32), the blob llama_state_seq_get_data writes and
 * llama_state_seq_set_data reads, or (file != 0) the file of
 * llama_state_seq_save_file / llama_state_seq_load_file (magic 'ggsq',
 * version 2, the prompt's n_tokens token ids, then the blob less its magic
 * and seq_id). Layout: lib/stream/llama_seq.c; ref: llama.cpp's
 * src/llama-memory-recurrent.cpp state_write_data (commit d32676d).
 * llama.cpp checks n_layer, the type and the row sizes only: a blob of
 * another model of the same shape loads there, as it does here.
 *   ss_llama_seq_size: bytes of the blob (file: with n_tokens token ids).
 *   ss_llama_seq_write: s (f32 arrays, as every decoded state holds them)
 *     into buf[size >= ss_llama_seq_size], its one cell at pos =
 *     s->n_tokens - 1 under seq_id (the blob variant; the file's has none).
 *     tokens may be NULL when n_tokens is 0. SS_ERR_INVALID when buf is
 *     short or s->n_tokens is not in 1..2^31-1. No allocation.
 *   ss_llama_seq_read: the blob or file buf[size] (told apart by its magic)
 *     into s->conv and s->ssm, allocated by the caller for dims d
 *     (ss_state_alloc); *pos = the cell's position (n_tokens - 1 when it
 *     was written from a state of n_tokens tokens). Checks every field
 *     against d before reading a row; errors: SS_ERR_TRUNCATED,
 *     SS_ERR_FORMAT (magic, a cell with ids, a pos that is negative or
 *     2^31-1: n_tokens = pos + 1 would not fit a blob, a non-finite element),
 *     SS_ERR_VERSION (file version), SS_ERR_UNSUPPORTED (several cells,
 *     transposed rows), SS_ERR_MISMATCH (n_layer, type, row size or total
 *     size other than d's), with errmsg naming the field and byte offset;
 *     s's arrays are then unspecified. The blob has no decays: s->logdecay
 *     is left as it is. */
size_t ss_llama_seq_size(const ss_state_dims *d, int file, size_t n_tokens);
int ss_llama_seq_write(const ss_state *s, int32_t seq_id, int file, const int32_t *tokens, size_t n_tokens,
		       void *buf, size_t size, char *errmsg);
int ss_llama_seq_read(const void *buf, size_t size, const ss_state_dims *d, ss_state *s, int32_t *pos,
		      char *errmsg);

/* Decodes a state record (all fields); conv and ssm in f32 whatever the
 * storage dtype (q8 dequantized with its scales).
 * Every decoder below checks a state record by the same rules
 * (formats/states.md), whatever the order of its map's keys: no key twice;
 * the required fields with their types; dims in range and of a sane size;
 * every array (logdecay, q8 scales, provenance weights, conv, ssm) exactly
 * as many bytes as the dims make; logdecay NaN-free and <= 0; q8 scales in
 * [0, FLT_MAX/128] (q4: FLT_MAX/8); provenance weights finite. The
 * decoders that read conv and ssm (this one and ss_record_state_view) also
 * refuse a NaN or infinite element there. A refusal is SS_ERR_FORMAT with errmsg naming
 * the field (and element). */
int ss_record_state(const ss_record *rec, ss_state *out, char *errmsg);
/* Decodes everything but conv and ssm (left NULL); their sizes are checked
 * when the record holds them (one read by ss_reader_next_meta does not). */
int ss_record_state_meta(const ss_record *rec, ss_state *out, char *errmsg);
/* Checks a record of either format as its decoder does, keeping nothing:
 * ss_record_tokens, ss_record_state, or for a state record read by
 * ss_reader_next_meta ss_record_state_meta. Returns 0 or what the decoder
 * returns, errmsg naming the field. For readers that show records rather
 * than decode them (ss-cat): a record they show is one the tools read. */
int ss_record_check(const ss_record *rec, char *errmsg);
/* Decodes the metadata into *out (conv and ssm left NULL) and points
 * *conv / *ssm at the record's raw arrays (SS_ERR_UNSUPPORTED for a record
 * whose multi-byte arrays are byte-shuffled, out->shuffle > 0: use
 * ss_record_state): s->dtype elements (for q8, int8
 * codes to scale with s->conv_scale / s->ssm_scale), little-endian,
 * possibly unaligned, [n_layer][conv_dim][d_conv-1] and
 * [n_layer][nheads][headdim][d_state]; borrowed from the record (valid until
 * the reader moves on). For consumers that read the arrays once in their
 * storage dtype (ss-compose) without an f32 copy. */
int ss_record_state_view(const ss_record *rec, ss_state *out, const void **conv, const void **ssm, char *errmsg);
/* Writes s with its arrays stored as s->dtype (q8: scales computed here
 * from s->conv and s->ssm, formats/states.md). Returns 0, SS_ERR_NOMEM,
 * SS_ERR_IO, or SS_ERR_INVALID for a state with an element of conv or ssm
 * that s->dtype does not hold finite (NaN, infinite, beyond f16's or
 * bf16's range): nothing written then, as readers refuse such records. */
int ss_writer_put_state(ss_writer *w, const ss_state *s, uint64_t *offset);

/* ------------------------------------------------------- JSON lines input */

struct cJSON;

/* The one rule of every JSON-lines input (ss-decode --prompts, ss-score
 * --pairs, ss-eval recall --qa, ss-retrieve's batch queries, ss-train
 * --data; ss-tokenize's documents apply the NUL rule, not the key rule, as
 * corpora carry metadata): line[0..len) (no NUL terminator needed) is
 * parsed with cJSON as one object. Refused with SS_ERR_FORMAT and a one-line
 * errmsg without a location (the caller, ss_jsonl_reader_next for a file,
 * prefixes "FILE: line N: "):
 *   anything but an object: "not a JSON object";
 *   a NUL in a string or key, a raw 0 byte or a \u0000 escape (cJSON would
 *   cut the text short silently): "a NUL character (\u0000) in a string";
 *   a top-level key not in keys (NULL-terminated; keys NULL: any key):
 *   "unknown key \"K\" (known: a, b, c)".
 * Every number keeps its source text as its valuestring (cJSON holds
 * numbers as doubles), read exactly by ss_json_int. Returns 0 with *out set
 * (the caller cJSON_Delete()s it), or the error (or SS_ERR_NOMEM) with *out
 * NULL. */
int ss_jsonl_parse(const char *line, size_t len, const char *const *keys, struct cJSON **out, char *errmsg);

/* Whether the JSON text p[0..n) (parsed: escapes occur only in strings)
 * holds a NUL in a string, a raw 0 byte or a \u0000 escape: 1 or 0. The
 * NUL rule of ss_jsonl_parse, for a JSON input that is one document (ss-eval
 * msmarco's --qa). */
int ss_json_has_nul(const char *p, size_t n);

/* The integer the number v (from ss_jsonl_parse) holds, exactly, in
 * [lo, hi]: from its source text ("9007199254740993" is 2^53 + 1, not the
 * double 2^53); a text with a fraction or an exponent ("1e3", "7.0") only
 * where its double is an integer of magnitude at most 2^53. Returns 0 with
 * *out set, or SS_ERR_INVALID (not a number, not an integer, out of range). */
int ss_json_int(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);

/* Reads one line of f (with its '\n', if any) of at most max bytes into
 * *line (grown as needed, NUL-terminated; *line and *cap start NULL and 0
 * or as a previous call left them; the caller frees *line). Returns its
 * length in bytes (> 0; the line may hold NUL bytes), 0 at the end of the
 * input, SS_ERR_TOO_LARGE for a line longer than max (the rest of it read
 * and dropped: the next call reads the next line), SS_ERR_IO on a read
 * error (errno set) or SS_ERR_NOMEM. *line stays within max + 1 bytes
 * whatever the input. The line reader of every line-oriented input (JSON
 * lines below, ss-encode's text documents, ss-retrieve's --hits). ref:
 * getline(3), bounded. */
long ss_getline(char **line, size_t *cap, FILE *f, size_t max);

/* The longest line of a JSON-lines input, '\n' included: 16 MiB, a
 * document of a few million tokens, so that one bad line (a whole corpus
 * without a newline) is refused before it is held. */
#define SS_JSONL_LINE_MAX (UINT64_C(1) << 24)

/* A JSON-lines input: one object a line under ss_jsonl_parse's rule, blank
 * lines (spaces, tabs, CR and LF only) skipped, lines of at most
 * SS_JSONL_LINE_MAX bytes, each error message located "PATH: line N". The
 * one reader of ss-decode --prompts, ss-score --pairs, ss-eval recall
 * --qa and ss-train --data (bp2c, bptc). Opaque; open, next, close.
 * ref: JSON Lines (jsonlines.org: one value a line, '\n' or "\r\n"),
 * restricted to objects; RFC 8259. */
typedef struct ss_jsonl_reader ss_jsonl_reader;

/* Opens path ("-": stdin, which may be a pipe) to be read by
 * ss_jsonl_reader_next: any other path must be a regular file, opened
 * without blocking (ss_open_regular). Returns 0 with *out set (free with
 * ss_jsonl_reader_close), or with *out NULL SS_ERR_INVALID "PATH: not a
 * regular file (a FIFO, a directory or a device)", SS_ERR_IO "PATH:
 * <strerror>" or SS_ERR_NOMEM, errmsg (SS_ERRMSG_MAX bytes, may be NULL)
 * filled. path is copied. */
int ss_jsonl_reader_open(ss_jsonl_reader **out, const char *path, char *errmsg);

/* ss_jsonl_reader_open for a stream the caller opened (its own messages
 * for a path it cannot open: the tools' cli_open_regular). f, open for
 * reading, is the reader's from this call on, whether it succeeds or not:
 * closed by ss_jsonl_reader_close (or here on failure), stdin excepted.
 * path names the input in messages (copied). Reading starts at f's
 * position, which is the byte offset of the first line when f is seekable
 * (ss_jsonl_reader_tell). Returns 0 with *out set, or SS_ERR_NOMEM. */
int ss_jsonl_reader_open_file(ss_jsonl_reader **out, FILE *f, const char *path, char *errmsg);

/* Bounds the whole input to max bytes (0: no bound, the default): a
 * regular file larger than that is refused here, before anything is read;
 * any other input (a pipe) when ss_jsonl_reader_next reads past byte max.
 * Either way SS_ERR_TOO_LARGE with errmsg "PATH: larger than MAX, the
 * limit for WHAT" (MAX as "64 MiB" when a whole number of MiB, else "N
 * bytes"); what is borrowed (valid until the reader is closed). Returns 0
 * or that error. For an input read whole into memory (ss-decode
 * --prompts, ss-score --pairs), whose lines are each within bounds. */
int ss_jsonl_reader_limit(ss_jsonl_reader *r, uint64_t max, const char *what, char *errmsg);

/* Reads the next line that is not blank and parses it with ss_jsonl_parse
 * (keys: the top-level keys allowed, NULL-terminated; NULL: any). Returns
 * 1 with *out set (the caller cJSON_Delete()s it), 0 at the end of the
 * input, or an error with *out NULL and errmsg (SS_ERRMSG_MAX bytes, may be
 * NULL):
 *   SS_ERR_FORMAT "PATH: line N: longer than 16 MiB";
 *   SS_ERR_FORMAT "PATH: line N: not a JSON object", followed by
 *   ": expected EXPECTED" unless expected is NULL (what a line looks like,
 *   for the user);
 *   ss_jsonl_parse's other errors as "PATH: line N: <its message>";
 *   SS_ERR_TOO_LARGE past ss_jsonl_reader_limit's bound (its message);
 *   SS_ERR_IO "PATH: read error: <strerror>"; SS_ERR_NOMEM.
 * Line N counts every line from the start of the input (or from the
 * offset of the last ss_jsonl_reader_seek), blank ones and the last one
 * without a '\n' too. After an error the reader is only to be closed. */
int ss_jsonl_reader_next(ss_jsonl_reader *r, const char *const *keys, const char *expected,
			 struct cJSON **out, char *errmsg);

/* "PATH: line N" of the last line read ("" before the first): the
 * location of the object the last ss_jsonl_reader_next returned, for the
 * caller's own messages about it. Borrowed: valid until the next
 * ss_jsonl_reader_next, seek or close. At most 599 bytes (a longer path is
 * cut). */
const char *ss_jsonl_reader_where(const ss_jsonl_reader *r);
/* N of ss_jsonl_reader_where (0 before the first line). */
long ss_jsonl_reader_lineno(const ss_jsonl_reader *r);
/* The byte offset in the input at which the next ss_jsonl_reader_next
 * starts reading: called before it, the offset of the object it returns or
 * of the blank lines ahead of it, which ss_jsonl_reader_seek goes back to
 * (ss-train's resume point). -1 when the input is not seekable (a pipe). */
int64_t ss_jsonl_reader_tell(const ss_jsonl_reader *r);
/* Moves to byte offset (a value of ss_jsonl_reader_tell, or 0: the start)
 * of a seekable input; line numbers count from there (line 1 is the line
 * at offset: a reader cannot count the lines it skips). Returns 0,
 * SS_ERR_INVALID (not seekable: a pipe) or SS_ERR_IO. */
int ss_jsonl_reader_seek(ss_jsonl_reader *r, int64_t offset);
/* Frees r and closes its input (stdin excepted). NULL is a no-op. */
void ss_jsonl_reader_close(ss_jsonl_reader *r);

/* --------------------------------------------------------- JSON rendering */

/* How ss_escape writes a string. */
typedef enum {
	SS_ESC_JSON,   /* the inside of a JSON string (no quotes): valid UTF-8
			* whatever s holds, a byte that is not UTF-8 as U+FFFD; '"'
			* and backslash escaped; tab, newline, CR as \t \n \r; every
			* other control character (C0, DEL, C1) as \u00XX */
	SS_ESC_PLAIN,  /* a field of plain (TSV) output: backslash as \\; tab,
			* newline, CR as \t \n \r; each byte of any other control
			* character (C0, DEL, C1) or of a sequence that is not UTF-8
			* as \xHH */
	SS_ESC_LAYOUT, /* a text body: as SS_ESC_PLAIN, but tab, newline and
			* backslash as they are */
} ss_esc_mode;

/* Writes s[0..len) (len (size_t)-1: strlen(s)) to f so that no value can
 * forge a line, break a JSON string or reach a terminal as a control
 * character, in one of the modes above: the one escaper of every tool's JSON
 * and TSV output (ss-cat, ss-retrieve, ss-decode --jsonl, ss-score). UTF-8:
 * RFC 3629 (no overlong form, surrogate or code point past U+10FFFF); JSON:
 * RFC 8259 §7. Write errors are the stream's (ferror). */
void ss_escape(FILE *f, const char *s, size_t len, ss_esc_mode mode);

/* Writes s[0..len) to f as a JSON string: quoted, SS_ESC_JSON inside. */
void ss_json_str(FILE *f, const char *s, size_t len);

/* Renders a record as one line of JSON (no newline) to f. Known numeric
 * arrays (tokens, logdecay, conv, ssm, weights) are summarised as
 * {"dtype","shape","min","max","mean","head"} unless full != 0. */
int ss_record_to_json(const ss_record *rec, FILE *f, int full);

#ifdef __cplusplus
}
#endif
#endif /* SS_STREAM_H */
