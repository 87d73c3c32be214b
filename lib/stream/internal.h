/*
 * lib/stream/internal.h — INTERNAL to libss (lib/stream/{reader,frames,pieces,raw,writer}.c, lib/stream/record.c,
 * lib/stream/record_json.c, lib/compose/compose_files.c): the decoded record behind the opaque ss_record of
 * ss_stream.h, and the msgpack helpers that read it. Not installed, not for
 * tools: msgpack is an implementation detail of the stream format, which
 * tools reach through ss_record_* and the typed decoders (ss_record_tokens,
 * ss_record_state...).
 * ref: msgpack-c (msgpack_object), formats/tokens.md, formats/states.md.
 */
#ifndef SS_STREAM_INTERNAL_H
#define SS_STREAM_INTERNAL_H

#include <msgpack.h>

#include "ss.h"
#include "base/internal.h" /* ss_ckd_mul, ss_cpu_f16c */

/* One decoded record. It lives in its reader (struct ss_reader) and is
 * overwritten by the reader's next read, seek or close. */
struct ss_record {
	const msgpack_object *root; /* the record's map, in the reader's unpacker */
	const char *format;         /* value of "format" (NUL-terminated copy in the reader) */
	uint64_t offset;            /* byte offset of the record's zstd frame */
	uint64_t length;            /* compressed bytes of the frame */
	uint64_t content;           /* decompressed bytes of the whole record (the frame's content size) */
	uint64_t index;             /* 0-based record number since open/seek */
	const void *raw;            /* decompressed msgpack bytes (a synthetic map for next_meta) */
	size_t raw_len;
	int has_rank;               /* an annotation frame preceded the record */
	int32_t rank;               /* its rank (1 = most relevant) ... */
	double score;               /* ... and score (BM25, higher = better) */
	int has_rerank;             /* the annotation held a rerank_score too */
	double rerank_score;        /* the reranker's score (higher = better) */
	int in_place;               /* next_pieces: pieces stay in the record buffer (see ss_piece_fn) */
	int meta;                   /* the map is the record's entries before "conv"/"ssm" only
				       (next_meta, next_pieces): its arrays are not in it */
};

/* Looks up key `key` in a msgpack map; NULL when absent or not a map. The
 * result points into `map` (same lifetime). */
const msgpack_object *ss_map_get(const msgpack_object *map, const char *key);

/* The index of the first element of the n elements of dtype t (f32, f16,
 * bf16: little-endian, any alignment) at p that is NaN or infinite; n when
 * all are finite. ss_nonfinite_planes: the same of the m 2-byte elements
 * of a byte-shuffled block (ss_shuffle), low bytes at lo, high bytes at
 * hi. A state record's conv and ssm hold finite values only
 * (formats/states.md): the decoders and the composer's folds refuse
 * others with these. */
size_t ss_nonfinite_find(const void *p, ss_dtype t, size_t n);
size_t ss_nonfinite_planes(const unsigned char *lo, const unsigned char *hi, ss_dtype t, size_t m);
/* The index of the first of the n f32 elements at x that dtype t does not
 * hold as a finite value (NaN, infinite, or beyond the range of f16 or
 * bf16, where it would become infinite; for q8 and q4, beyond the values
 * whose block scale a reader takes, 127/128 and 7/8 of FLT_MAX); n when
 * none. Writers refuse such a state (ss_writer_put_state). */
size_t ss_unstorable_find(const float *x, ss_dtype t, size_t n);

/* A record written in pieces, so that its bytes need not be gathered into
 * one buffer first: ss_writer_begin opens a zstd frame for len bytes of
 * msgpack (*offset, when not NULL, gets the frame's byte offset),
 * ss_writer_add compresses the next piece, ss_writer_end closes the frame;
 * the pieces must add up to len exactly (else ss_writer_end fails). The
 * frame is the one ss_writer_put makes from the same bytes. All return 0 or
 * SS_ERR_NOMEM (zstd failure) / SS_ERR_IO (write failure); after an error
 * the output is unusable and the writer must be aborted. */
int ss_writer_begin(ss_writer *w, uint64_t len, uint64_t *offset);
/* ss_writer_begin for a state record, whose frame may be stored
 * uncompressed (formats/states.md "raw frames"): unless the writer never
 * stores raw frames (ss_writer_set_min_saving 0), the compressed frame is
 * held in memory until the record's first 1 MiB (all of it, when smaller)
 * is compressed, and written from then on only when that saved at least
 * the writer's fraction; else ss_writer_add (or ss_writer_end) writes
 * nothing and returns SS_WRITE_RAW: the caller writes the record again
 * (unshuffled) between ss_writer_begin_raw and ss_writer_end. */
int ss_writer_begin_state(ss_writer *w, uint64_t len, uint64_t *offset);
#define SS_WRITE_RAW 1
/* Opens an uncompressed frame for len bytes: raw blocks of at most
 * 128 KiB, content size and XXH64 checksum as every frame has; add and end
 * as for ss_writer_begin. */
int ss_writer_begin_raw(ss_writer *w, uint64_t len, uint64_t *offset);
/* In a raw frame, ends the current block here, so that the bytes added next
 * (an array's body) begin a block and lie at an offset from the frame's
 * start that is a multiple of 4 where the bytes before allow (raw frames
 * are a multiple of 4 bytes long, so in a file of them that is the file
 * offset's alignment): a reader hands them over in place, whole elements
 * in each block, f32 aligned. No-op otherwise. */
void ss_writer_cut(ss_writer *w);
/* 0 after ss_writer_set_shuffle(w, 0), else 1. */
int ss_writer_shuffles(const ss_writer *w);
int ss_writer_add(ss_writer *w, const void *buf, size_t len);
int ss_writer_end(ss_writer *w);

/* ss_writer_put_state() of a state whose arrays are still being made:
 * before each chunk of conv (which 0) or ssm (which 1) is converted and
 * compressed, ready(arg, which, end) returns once elements [0, end) are
 * final (0), or stops the record with its nonzero SS_ERR_* (the output is
 * then unusable: abort it). The bytes are ss_writer_put_state's. s's
 * metadata must be final at the call; SS_ERR_INVALID for q8 (its scales
 * precede the arrays and need them whole), and for a chunk with an element
 * s->dtype does not hold finite (ss_unstorable_find; the record is then cut
 * off: abort the output). ss_compose_run()'s writer thread
 * (lib/compose/compose_threads.c) writes the composed state this way while
 * its inputs are still read. */
typedef int (*ss_ready_fn)(void *arg, int which, size_t end);
int ss_writer_put_state_when(ss_writer *w, const ss_state *s, uint64_t *offset, ss_ready_fn ready, void *arg);

/* Called by ss_reader_next_pieces(): once with which -1 (meta: the
 * record's entries before "conv", p NULL), then with the bytes
 * [off, off+len) of "conv" (which 0) and of "ssm" (which 1), each array in
 * order. Every piece but an array's last is a multiple of 16 bytes. p is
 * valid only during the call and 16-byte aligned; except where the reader
 * holds a buffer for the whole record (ss_reader_reserve): then the record
 * is decompressed in place, each piece lies in that buffer right after the
 * one before, at any alignment, and stays valid until the reader's next
 * read, seek or close (meta->in_place is 1; an uncompressed frame of a
 * regular file, formats/states.md "raw frames", is read into the reader's
 * own buffer even then: meta->in_place 0). Nonzero (an SS_ERR_*) stops
 * the read, which returns it. */
typedef int (*ss_piece_fn)(void *arg, const ss_record *meta, int which, uint64_t off, const void *p,
			   size_t len);

/* Reads the next record as ss_reader_next() does, but hands a state
 * record's "conv" and "ssm" to fn while they are decompressed (at most
 * 128 KiB at a time; with a reserved record buffer, in place, what a
 * 128 KiB step of input gives), instead of gathering the record first (the
 * record's bytes are checked as ss_reader_next checks them, the frame's
 * checksum included, but only after fn has seen the pieces: callers treat
 * what they got as void when this fails). An uncompressed frame of a
 * regular file is not decompressed: its raw blocks are read (pread) a
 * piece at a time and handed over, each hashed (XXH64, the frame's
 * checksum) just before; any other frame, or one cut short, goes through
 * zstd, with its errors. Returns 1 after the pieces (*rec
 * is the meta record, as ss_reader_next_meta gives, with length set); 2 when
 * the record is not laid out as writers lay out states (formats/states.md:
 * "conv" then "ssm", the last entries), then fn was not called and *rec is
 * the whole record from ss_reader_next(); 0 at clean end of input; negative
 * on error (ss_reader_error says why, unless fn stopped it). */
int ss_reader_next_pieces(ss_reader *r, const ss_record **rec, ss_piece_fn fn, void *arg);

/* Moves r to the frame at byte `offset` of the regular file `path`, to be
 * numbered record `index` in errors (ss_reader_error): a reader that
 * visits records of several files in turn (ss_compose_run's threads)
 * keeps its buffers, grown to one record, instead of growing new ones.
 * path may be r's own. Returns 0, or SS_ERR_NOTFOUND / SS_ERR_IO /
 * SS_ERR_NOMEM (r unchanged) / SS_ERR_INVALID (standard input, a pipe)
 * with errmsg set. */
int ss_reader_goto(ss_reader *r, const char *path, uint64_t offset, uint64_t index, char *errmsg);

/* Says that the record at r's position (a regular file's, just sought to)
 * is a frame of `length` bytes, as a caller that stored its place knows it
 * (an index's ss_index_hit.length): the next ss_reader_next_meta takes it
 * instead of walking the frame's block headers (hundreds of small reads
 * for a 19 MB raw state) and checks only that the file holds that many
 * bytes. Whoever reads the record's arrays still checks every block and
 * the checksum. A seek or any read forgets it; 0 forgets it now. */
void ss_reader_expect_length(ss_reader *r, uint64_t length);

/* Grows r's record buffer to `bytes` now, so that records up to that size
 * (their frames declare it) are decompressed straight into it, never
 * through zstd's window and a growing buffer: for a caller that knows the
 * sizes of the records to come from a first pass. Returns 0, SS_ERR_NOMEM,
 * or SS_ERR_TOO_LARGE above the reader's max_record. */
int ss_reader_reserve(ss_reader *r, uint64_t bytes);

/* malloc() for a buffer of a record's size, freed with free(): from 2 MiB
 * on, aligned and advised to the kernel as transparent huge pages (Linux
 * MADV_HUGEPAGE), as its first writer touches every page: with 4 KiB pages
 * that cost 75 ms of CPU for the 19 MB of a mamba2-130m state in this
 * project's VMs (a page fault each), with huge pages 23 ms (issue 12).
 * NULL when out of memory. */
void *ss_big_alloc(size_t bytes);


#endif /* SS_STREAM_INTERNAL_H */
