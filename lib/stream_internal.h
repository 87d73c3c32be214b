/*
 * stream_internal.h — INTERNAL to libss (lib/stream.c, lib/record.c,
 * lib/record_json.c): the decoded record behind the opaque ss_record of
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

/* One decoded record. It lives in its reader (struct ss_reader) and is
 * overwritten by the reader's next read, seek or close. */
struct ss_record {
	const msgpack_object *root; /* the record's map, in the reader's unpacker */
	const char *format;         /* value of "format" (NUL-terminated copy in the reader) */
	uint64_t offset;            /* byte offset of the record's zstd frame */
	uint64_t length;            /* compressed bytes of the frame */
	uint64_t index;             /* 0-based record number since open/seek */
	const void *raw;            /* decompressed msgpack bytes (a synthetic map for next_meta) */
	size_t raw_len;
	int has_rank;               /* an annotation frame preceded the record */
	int32_t rank;               /* its rank (1 = most relevant) ... */
	double score;               /* ... and score (BM25, higher = better) */
};

/* Looks up key `key` in a msgpack map; NULL when absent or not a map. The
 * result points into `map` (same lifetime). */
const msgpack_object *ss_map_get(const msgpack_object *map, const char *key);

/* A record written in pieces, so that its bytes need not be gathered into
 * one buffer first: ss_writer_begin opens a zstd frame for len bytes of
 * msgpack (*offset, when not NULL, gets the frame's byte offset),
 * ss_writer_add compresses the next piece, ss_writer_end closes the frame;
 * the pieces must add up to len exactly (else ss_writer_end fails). The
 * frame is the one ss_writer_put makes from the same bytes. All return 0 or
 * SS_ERR_NOMEM (zstd failure) / SS_ERR_IO (write failure); after an error
 * the output is unusable and the writer must be aborted. */
int ss_writer_begin(ss_writer *w, uint64_t len, uint64_t *offset);
int ss_writer_add(ss_writer *w, const void *buf, size_t len);
int ss_writer_end(ss_writer *w);

#endif /* SS_STREAM_INTERNAL_H */
