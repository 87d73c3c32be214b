/*
 * lib/stream/stream_internal.h — INTERNAL to the files of lib/stream/ that
 * read and write record streams (ss_stream.h): the reader and the writer
 * behind their opaque handles, and what one file of them calls in another.
 *   reader.c   opening, the input window, a record read whole
 *              (ss_reader_next), the msgpack map it holds
 *   frames.c   frame headers and lengths, the skippable frames (annotation,
 *              plan) read and written, checks of a frame and of msgpack
 *   pieces.c   a record read in parts: its metadata alone (next_meta), its
 *              arrays handed over as they are decompressed (next_pieces)
 *   raw.c      uncompressed ("raw") frames: read in place from a map of
 *              the file, and written block by block
 *   writer.c   the writer: compressed frames, whole or in pieces
 * ref: RFC 8878 (zstd frame and block headers), msgpack spec,
 * formats/states.md "raw frames".
 */
#ifndef SS_STREAM_STREAM_INTERNAL_H
#define SS_STREAM_STREAM_INTERNAL_H

#include <stdio.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader: stable since 1.4, exported by libzstd.so */
#include <zstd.h>
#include <zstd_errors.h>
/* XXH64, the checksum of a zstd frame (its last 4 bytes: the low 32 bits of
 * XXH64 of the content, RFC 8878 §3.1.1), which the reader of raw frames
 * verifies and their writer computes itself: libzstd does not export its
 * copy. xxHash compiled in from Debian's header (libxxhash-dev), its state
 * on the stack: no link-time dependency. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ss.h"
#include "stream/internal.h"

#define IN_CHUNK (1u << 20)

/* Asks for a pipe buffer of IN_CHUNK bytes when fd is a pipe (Linux's
 * F_SETPIPE_SZ; 64 KiB by default, so a 19 MB state crossed a pipe in
 * ~300 writes and as many reads and context switches). Advice only: where
 * refused (above /proc/sys/fs/pipe-max-size, another OS) nothing changes. */
void stream_pipe_widen(int fd);
/* Input a step of a frame decoded in pieces asks for: zstd's largest block,
 * so that the window (IN_CHUNK) is compacted once per ~7 steps, not at
 * every step (which moved up to 1 MiB per 128 KiB decoded). */
#define IN_STEP (128u << 10)
/* Declared record sizes up to this are allocated at once (ss_reader_next). */
#define TRUST_DECLARED (1u << 20)
#define ZSTD_MAGIC 0xFD2FB528u
#define SKIP_MAGIC_MASK 0xFFFFFFF0u
#define SKIP_MAGIC 0x184D2A50u
/* A state record's saving is judged on its first RAW_SAMPLE bytes (the
 * whole record when smaller): the metadata, conv and the start of ssm, which
 * compress as the rest does, and a 19 MB f32 record is not compressed whole
 * to be written raw. */
#define RAW_SAMPLE (1u << 20)
/* zstd's largest block (RFC 8878 §3.1.1.2.4: min(Window_Size, 128 KiB)),
 * and the window a raw frame declares: 2^17 bytes, what every decoder
 * accepts (Window_Descriptor 0x38: exponent 7, mantissa 0). */
#define RAW_BLOCK (128u << 10)
#define RAW_WINDOW_DESC 0x38

/* Pieces of next_pieces: at most this many decompressed bytes at a time,
 * so they are still in cache when the caller reads them. */
#define PIECE (128u << 10)


struct ss_reader {
	FILE *f;
	char *path;
	int own_file, seekable, eof;
	uint64_t max_record;
	ZSTD_DCtx *dctx;
	/* Input window: buf[0..len) holds file bytes [base, base+len). */
	unsigned char *buf;
	size_t len, cap;
	uint64_t base;
	uint64_t pos;        /* absolute offset of the next frame */
	uint64_t index;
	unsigned char *out;  /* decompressed record */
	size_t out_cap;
	unsigned char *meta; /* synthetic map for next_meta */
	size_t meta_cap;
	msgpack_unpacked unp;
	ss_record rec;       /* the record last read, handed out by pointer */
	int annot;           /* an annotation frame precedes the next record */
	int annot_has_rerank;
	double annot_rerank;
	int32_t annot_rank;
	double annot_score;
	/* The plan frame that began the stream (ss_reader_plan), if any. */
	int plan_seen;       /* looked for, or a record came first */
	uint64_t n_read;     /* records returned (not reset by a seek) */
	float *plan;         /* [plan_n][plan_h] logdecay; NULL: none */
	size_t plan_n, plan_h;
	char format[32];
	char err[SS_ERRMSG_MAX];
	/* The raw blocks of the uncompressed frame being read
	 * (stream_raw_pieces): content bytes [at, at + len) lie at file offset
	 * fo; raw_buf (PIECE bytes, 64-byte aligned) takes them a piece at a
	 * time. */
	struct raw_seg { uint64_t at, fo; size_t len; } *seg;
	size_t seg_cap;
	unsigned char *raw_buf;
	uint64_t head_of;    /* > 0: the file is the head of one frame of this many bytes */
	uint64_t expect_len; /* > 0: the frame at pos has this many bytes (ss_reader_expect_length) */
};

struct ss_writer {
	ss_output *out;
	FILE *f;
	ZSTD_CCtx *cctx;
	unsigned char *cbuf;
	size_t ccap;
	uint64_t off;
	int failed;
	int saved_errno;
	int no_shuffle;
	double min_saving;   /* ss_writer_set_min_saving */
	int rerank_pending;  /* ss_writer_set_rerank_score: for the next annotation */
	double rerank_score;
	/* A state record's compressed frame held back (ss_writer_begin_state)
	 * until its saving is known: cap[0..cap_len) from the first fed bytes
	 * of a record of rec_len. */
	int capture;
	unsigned char *cap;
	size_t cap_len, cap_cap;
	uint64_t rec_len, fed;
	/* A raw frame being written (ss_writer_begin_raw): the block being
	 * filled, blk[0..fill) of RAW_BLOCK, and the content still to come. */
	int raw;
	unsigned char *blk;
	size_t fill;
	uint64_t raw_left;
	uint64_t raw_start;  /* the frame's offset: its layout is relative to it */
	XXH64_state_t xh; /* the content's XXH64, whose low 32 bits end the frame */
};

/* The start of the record at r->pos, decompressed until the entries before
 * "conv"/"ssm" are in r->out (the rest of the frame not yet read, its
 * start kept in the input window): what next_meta and next_pieces share. */
typedef struct {
	size_t hsz;
	int checksum;
	uint64_t content, off, in_off, bound, n_entries, made;
	ZSTD_outBuffer ob;
	long long cut; /* where "conv"/"ssm" starts in r->out */
	uint32_t n_before;
	size_t hdr;
	int whole, done; /* done: the frame is decoded to its end */
	int stable;      /* r->out holds the whole record: decoded in place, never moved */
} prefix_t;

/* ---------------------------------------------------------------- reader.c */

/* Sets r's error, "record N (byte offset OFF): what", and returns code. */
int stream_rerr(ss_reader *r, int code, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Grows *p (contents kept) to at least need bytes: a record's buffer,
 * which from 2 MiB on gets huge pages (ss_big_alloc). 0 or SS_ERR_NOMEM. */
int stream_grow(unsigned char **p, size_t *cap, size_t need);
/* Makes file bytes [off, off+need) available in r's input window; how many
 * are (fewer at end of input), or a negative SS_ERR_*. Bytes from
 * keep_from (<= off) on are retained. */
long long stream_in_fill(ss_reader *r, uint64_t off, size_t need, uint64_t keep_from);
/* Unpacks buf[0..len) (the record at byte off) as the record map into rec
 * and checks its format and version: 1, or a negative error with r's error
 * set. rec points into r and buf. */
int stream_unpack_record(ss_reader *r, uint64_t off, const void *buf, size_t len, ss_record *rec);

/* ---------------------------------------------------------------- frames.c */

/* Parses the frame header at r->pos. Returns 1 with *hsz, *content,
 * *checksum set; 0 at clean end of input; 2 for a skippable frame (read if
 * an annotation or the plan; r->pos advanced past it); negative on error. */
int stream_frame_header(ss_reader *r, size_t *hsz, uint64_t *content, int *checksum);
/* The total compressed size of the zstd frame at r->pos (header already
 * parsed: hsz bytes, checksum flag), from its block headers, or a negative
 * error with r's error set. */
long long stream_frame_length(ss_reader *r, size_t hsz, int has_checksum, uint64_t content);
/* 0 when p[0..len) is exactly one msgpack object whose every declared
 * length and count fits in the bytes that remain; else -1 with *why set. */
int stream_msgpack_check(const unsigned char *p, size_t len, const char **why);

/* ---------------------------------------------------------------- pieces.c */

/* The start of a record map p[0..len) (possibly a prefix): the byte offset
 * of its first "conv" or "ssm" key, with the number of entries before it
 * (*n_before), the map header's size (*hdr) and entry count (*n_entries);
 * -1 while the prefix does not reach it (*whole = 1 and the map's end when
 * the map has neither key). */
long long stream_meta_prefix(const unsigned char *p, size_t len, uint32_t *n_before, size_t *hdr, int *whole,
			     uint64_t *n_entries);
/* Unpacks the entries before "conv"/"ssm" (r->out[q->hdr, q->cut)) as a
 * map of their own, in r->meta, into r->rec: 1 or a negative error. */
int stream_unpack_prefix(ss_reader *r, const prefix_t *q);
/* A msgpack bin header at b (n bytes there): its size in *hl and the
 * payload length in *len; -1 when b is not one. */
int stream_bin_header(const unsigned char *b, size_t n, size_t *hl, uint64_t *len);
/* The keys of a state's arrays as msgpack strings: "conv", "ssm". */
extern const unsigned char stream_piece_key[2][5];
extern const size_t stream_piece_key_len[2];

/* ---------------------------------------------------------------- raw.c */

/* ss_reader_next_pieces of an uncompressed frame in a regular file, read
 * without zstd: 1 as ss_reader_next_pieces, a negative error, or 3 when the
 * frame is not one writers make raw (nothing read: zstd reads it then). */
int stream_raw_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg);
/* Appends len bytes at buf to the raw frame being written (0,
 * SS_ERR_INVALID past its declared length, SS_ERR_IO). */
int stream_raw_add(ss_writer *w, const unsigned char *buf, size_t len);
/* Ends the raw frame being written: padding blocks, the last block, the
 * checksum. 0, SS_ERR_INVALID (content missing), SS_ERR_IO. */
int stream_raw_end(ss_writer *w);

/* ---------------------------------------------------------------- writer.c */

/* Writes p[0..n) to w's output: 0, or SS_ERR_IO (w failed: every later
 * write fails too). */
int stream_write(ss_writer *w, const void *p, size_t n);

static inline int zstd_code(size_t rc)
{
	return ZSTD_getErrorCode(rc) == ZSTD_error_checksum_wrong ? SS_ERR_CHECKSUM : SS_ERR_FORMAT;
}

/* No valid frame of `content` bytes is longer than this: readers ask for no
 * more input than that (a seek to a small record must not read IN_CHUNK). */
static inline uint64_t frame_bound(uint64_t content)
{
	return ZSTD_compressBound((size_t)content) + ZSTD_FRAMEHEADERSIZE_MAX + 3 * (content / 1024 + 2) + 4;
}

/* Moves a pending annotation onto the record being returned. */
static inline void take_annotation(ss_reader *r, ss_record *rec)
{
	rec->has_rank = r->annot;
	rec->rank = r->annot_rank;
	rec->score = r->annot_score;
	rec->has_rerank = r->annot && r->annot_has_rerank;
	rec->rerank_score = r->annot_rerank;
	r->annot = 0;
}

#endif /* SS_STREAM_STREAM_INTERNAL_H */
