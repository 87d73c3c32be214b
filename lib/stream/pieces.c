/*
 * pieces.c — a record read in parts: its metadata alone, the entries
 * before "conv"/"ssm" (ss_reader_next_meta), or its arrays handed to a
 * callback as they are decompressed (ss_reader_next_pieces; uncompressed
 * frames of a file go to raw.c instead). See ss_stream.h and
 * stream/internal.h for the contracts, formats/states.md for the layout
 * this relies on ("conv" then "ssm", the map's last entries).
 * ref: RFC 8878 (zstd frames), msgpack spec (formats).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "stream/stream_internal.h"

/* The end of the msgpack object at p[j] (p holds len bytes): -1 when the
 * bytes end first or a type byte is not msgpack's. */
static long long skip_object(const unsigned char *p, size_t len, size_t j)
{
	uint64_t pending = 1;
	while (pending) {
		if (j >= len)
			return -1;
		size_t k = j;
		unsigned char tt = p[k++];
		uint64_t skip = 0, items = 0;
		if (tt <= 0x7f || tt >= 0xe0 || tt == 0xc0 || tt == 0xc2 || tt == 0xc3) {
		} else if (tt >= 0x80 && tt <= 0x8f) items = 2u * (tt & 0xf);
		else if (tt >= 0x90 && tt <= 0x9f) items = tt & 0xf;
		else if (tt >= 0xa0 && tt <= 0xbf) skip = tt & 0x1f;
		else {
			size_t need = 0;
			switch (tt) {
			case 0xc4: case 0xd9: case 0xc7: need = 1; break;
			case 0xc5: case 0xda: case 0xc8: case 0xdc: case 0xde: need = 2; break;
			case 0xc6: case 0xdb: case 0xc9: case 0xdd: case 0xdf: need = 4; break;
			}
			if (k + need > len)
				return -1;
			uint64_t v = 0;
			for (size_t b = 0; b < need; b++)
				v = v << 8 | p[k + b];
			k += need;
			switch (tt) {
			case 0xc4: case 0xc5: case 0xc6: case 0xd9: case 0xda: case 0xdb: skip = v; break;
			case 0xc7: case 0xc8: case 0xc9: skip = v + 1; break;
			case 0xdc: case 0xdd: items = v; break;
			case 0xde: case 0xdf: items = 2 * v; break;
			case 0xca: case 0xce: case 0xd2: skip = 4; break;
			case 0xcb: case 0xcf: case 0xd3: skip = 8; break;
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xd4: skip = 2; break;
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			default: return -1;
			}
		}
		if (skip > len - k)
			return -1;
		j = k + (size_t)skip;
		pending = pending - 1 + items;
	}
	return (long long)j;
}

/* Scans the top-level map in buf[0..len) (possibly a prefix of the record)
 * for entries before the first "conv" or "ssm" key. Returns the byte offset
 * where that key starts and the number of entries before it, or -1 when the
 * prefix does not reach it yet (or the map has neither key: *whole = 1). */
long long stream_meta_prefix(const unsigned char *p, size_t len, uint32_t *n_before, size_t *hdr, int *whole,
			     uint64_t *n_entries)
{
	*whole = 0;
	if (len < 1)
		return -1;
	uint64_t count;
	size_t i;
	if (p[0] >= 0x80 && p[0] <= 0x8f) { count = p[0] & 0xf; i = 1; }
	else if (p[0] == 0xde && len >= 3) { count = (uint64_t)p[1] << 8 | p[2]; i = 3; }
	else if (p[0] == 0xdf && len >= 5) { count = (uint64_t)p[1] << 24 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 8 | p[4]; i = 5; }
	else return -1;
	*hdr = i;
	*n_entries = count;
	for (uint64_t e = 0; e < count; e++) {
		/* key */
		size_t kstart = i;
		if (i >= len)
			return -1;
		unsigned char t = p[i];
		const unsigned char *ks = NULL;
		size_t kl = 0;
		if (t >= 0xa0 && t <= 0xbf) { kl = t & 0x1f; ks = p + i + 1; }
		else if (t == 0xd9 && i + 1 < len) { kl = p[i + 1]; ks = p + i + 2; }
		if (ks && (size_t)(ks - p) + kl <= len &&
		    ((kl == 4 && !memcmp(ks, "conv", 4)) || (kl == 3 && !memcmp(ks, "ssm", 3)))) {
			*n_before = (uint32_t)e;
			return (long long)kstart;
		}
		/* skip key and value */
		for (int part = 0; part < 2; part++) {
			long long j = skip_object(p, len, i);
			if (j < 0)
				return -1;
			i = (size_t)j;
		}
	}
	*whole = 1;
	*n_before = (uint32_t)count;
	return (long long)i;
}

/* Decompresses q's frame on into q->ob (dst and size set by the caller),
 * keeping input from keep_from on in the window. 0 or a negative error. */
static int decode_step(ss_reader *r, prefix_t *q, uint64_t keep_from)
{
	uint64_t left = q->bound > q->in_off - q->off ? q->bound - (q->in_off - q->off) : 1;
	long long got = stream_in_fill(r, q->in_off, left < IN_STEP ? (size_t)left : IN_STEP, keep_from);
	if (got < 0)
		return stream_rerr(r, (int)got, q->off, "read error: %s", strerror(errno));
	ZSTD_inBuffer ib = { r->buf + (q->in_off - r->base), (size_t)got, 0 };
	size_t before = q->ob.pos;
	size_t zr = ZSTD_decompressStream(r->dctx, &q->ob, &ib);
	if (ZSTD_isError(zr))
		return stream_rerr(r, zstd_code(zr), q->off, "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
	q->in_off += ib.pos;
	q->made += q->ob.pos - before;
	q->done = zr == 0;
	if (q->made > q->content)
		return stream_rerr(r, SS_ERR_FORMAT, q->off, "zstd frame holds more than its declared %llu bytes",
			    (unsigned long long)q->content);
	if (!q->done && got == 0 && q->ob.pos == before)
		return stream_rerr(r, SS_ERR_TRUNCATED, q->off, "zstd frame truncated (input ends %llu bytes into it)",
			    (unsigned long long)(q->in_off - q->off));
	return 0;
}

/* 1 with q filled, 0 at clean end of input, negative on error. stable:
 * decode in place where the record fits r->out (next_pieces). */
static int read_prefix(ss_reader *r, prefix_t *q, int stable)
{
	int rc;
	memset(q, 0, sizeof *q);
	while ((rc = stream_frame_header(r, &q->hsz, &q->content, &q->checksum)) == 2)
		;
	if (rc <= 0)
		return rc;
	q->off = q->in_off = r->pos;
	q->bound = frame_bound(q->content);
	q->cut = -1;
	/* a buffer reserved for the record (ss_reader_reserve): zstd writes
	 * into it in place, no window of its own, nothing moved */
	q->stable = stable && q->content <= r->out_cap;
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_stableOutBuffer, q->stable);
	if (q->stable) {
		q->ob.dst = r->out;
		q->ob.size = (size_t)q->content;
	}
	/* The window doubles (64 KiB at first) and the prefix is rescanned only
	 * once the decoded bytes have doubled: a record whose metadata comes
	 * late (or never) costs time and copies linear in its size, as a
	 * constant step would not (issue 48, item 1). */
	size_t scan_at = 64u << 10;
	for (;;) {
		if (!q->stable && q->ob.pos == q->ob.size) {
			size_t want = q->ob.pos < (64u << 10) ? 64u << 10 : 2 * q->ob.pos;
			if (want > q->content)
				want = (size_t)q->content;
			if (stream_grow(&r->out, &r->out_cap, want) != 0)
				return stream_rerr(r, SS_ERR_NOMEM, q->off, "out of memory");
			q->ob.dst = r->out;
			q->ob.size = want;
		}
		if ((rc = decode_step(r, q, q->off)) < 0) {
			/* A frame's head (ss_reader_open_head) ends early: the
			 * metadata may be whole in it all the same. */
			if (!r->head_of || rc != SS_ERR_TRUNCATED ||
			    (q->cut = stream_meta_prefix(r->out, q->ob.pos, &q->n_before, &q->hdr, &q->whole, &q->n_entries)) < 0)
				return rc;
			break;
		}
		if (q->ob.pos < scan_at && !q->done && q->ob.pos < q->ob.size)
			continue;
		q->cut = stream_meta_prefix(r->out, q->ob.pos, &q->n_before, &q->hdr, &q->whole, &q->n_entries);
		if (q->cut >= 0 || q->done)
			break;
		scan_at = 2 * q->ob.pos;
	}
	if (q->cut < 0)
		return stream_rerr(r, SS_ERR_FORMAT, q->off, "malformed msgpack record");
	return 1;
}

/* Unpacks the entries before "conv"/"ssm" as a map of their own (in
 * r->meta) into r->rec. */
int stream_unpack_prefix(ss_reader *r, const prefix_t *q)
{
	size_t body = (size_t)q->cut - q->hdr;
	if (stream_grow(&r->meta, &r->meta_cap, body + 5) != 0)
		return stream_rerr(r, SS_ERR_NOMEM, q->off, "out of memory");
	r->meta[0] = 0xdf;
	r->meta[1] = (unsigned char)(q->n_before >> 24);
	r->meta[2] = (unsigned char)(q->n_before >> 16);
	r->meta[3] = (unsigned char)(q->n_before >> 8);
	r->meta[4] = (unsigned char)q->n_before;
	memcpy(r->meta + 5, r->out + q->hdr, body);
	int rc = stream_unpack_record(r, q->off, r->meta, body + 5, &r->rec);
	r->rec.meta = !q->whole;
	return rc;
}

/* The length ss_reader_expect_length said the frame at r->pos has, once
 * the file is seen to hold it (its header of hsz bytes and a block header
 * at least); else a negative error with r->err set. */
static long long expected_length(ss_reader *r, size_t hsz, uint64_t len)
{
	struct stat st;
	if (fstat(fileno(r->f), &st) != 0)
		return stream_rerr(r, SS_ERR_IO, r->pos, "read error: %s", strerror(errno));
	if (len < hsz + 3)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "a frame of %llu bytes was expected here, less than "
				   "its header and a block's (%llu)", (unsigned long long)len, (unsigned long long)(hsz + 3));
	if ((uint64_t)st.st_size < r->pos || (uint64_t)st.st_size - r->pos < len)
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (the file ends before its byte %llu)",
				   (unsigned long long)len);
	return (long long)len;
}

int ss_reader_next_meta(ss_reader *r, const ss_record **recp)
{
	*recp = NULL;
	uint64_t expect = r->expect_len;
	r->expect_len = 0;
	prefix_t q;
	int rc = read_prefix(r, &q, 0);
	if (rc <= 0)
		return rc;
	/* Entries after "conv"/"ssm" other than the other array (a map in
	 * another key order than writers make): the prefix would miss them
	 * and the record would read otherwise than whole. Whole, then. */
	if (!q.whole && q.n_entries - q.n_before != 2)
		return ss_reader_next(r, recp);
	long long flen = r->head_of ? (long long)r->head_of
			 : expect   ? expected_length(r, q.hsz, expect)
				    : stream_frame_length(r, q.hsz, q.checksum, q.content);
	if (flen < 0)
		return (int)flen;
	if ((rc = stream_unpack_prefix(r, &q)) < 0)
		return rc;
	take_annotation(r, &r->rec);
	r->rec.length = (uint64_t)flen;
	r->rec.content = q.content;
	r->pos += (uint64_t)flen;
	r->index++, r->n_read++;
	*recp = &r->rec;
	return 1;
}

/* Moves q's unread bytes r->out[p..ob.pos) to the buffer's start (not
 * when decoding in place). */
static void compact(ss_reader *r, prefix_t *q, size_t *p)
{
	if (*p && !q->stable) {
		memmove(r->out, r->out + *p, q->ob.pos - *p);
		q->ob.pos -= *p;
		*p = 0;
	}
}

/* Compacts, then decompresses at most PIECE bytes more into r->out (whose
 * unread bytes are then fewer than 16). keep: keep the frame's start in
 * the input window (a pipe can then still decode the record whole). */
static int pump(ss_reader *r, prefix_t *q, size_t *p, int keep)
{
	compact(r, q, p);
	if (q->done)
		return stream_rerr(r, SS_ERR_FORMAT, q->off, "record ends inside its \"conv\"/\"ssm\" arrays");
	if (!q->stable) {
		q->ob.dst = r->out;
		q->ob.size = PIECE;
	}
	return decode_step(r, q, keep ? q->off : q->in_off);
}

/* Makes n (< 16) unread bytes available at r->out + *p. */
static int need(ss_reader *r, prefix_t *q, size_t *p, size_t n, int keep)
{
	int rc;
	while (q->ob.pos - *p < n)
		if ((rc = pump(r, q, p, keep)) < 0)
			return rc;
	return 0;
}

/* A msgpack bin header at b (n bytes there): its size in *hl and the
 * payload length in *len; -1 when b is not one. */
int stream_bin_header(const unsigned char *b, size_t n, size_t *hl, uint64_t *len)
{
	if (n >= 2 && b[0] == 0xc4) { *hl = 2; *len = b[1]; return 0; }
	if (n >= 3 && b[0] == 0xc5) { *hl = 3; *len = (uint64_t)b[1] << 8 | b[2]; return 0; }
	if (n >= 5 && b[0] == 0xc6) {
		*hl = 5;
		*len = (uint64_t)b[1] << 24 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 8 | b[4];
		return 0;
	}
	return -1;
}

const unsigned char stream_piece_key[2][5] = {{0xa4, 'c', 'o', 'n', 'v'}, {0xa3, 's', 's', 'm'}};
const size_t stream_piece_key_len[2] = {5, 4};

int ss_reader_next_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg)
{
	const unsigned char (*key)[5] = stream_piece_key;
	const size_t *key_len = stream_piece_key_len;
	*recp = NULL;
	r->expect_len = 0;
	prefix_t q;
	int rc = r->seekable ? stream_raw_pieces(r, recp, fn, arg) : 3;
	if (rc != 3)
		return rc;
	rc = read_prefix(r, &q, 1);
	if (rc <= 0)
		return rc;
	/* Pieces only for what writers make (formats/states.md): "conv" then
	 * "ssm", bins, the map's last two entries. Anything else is decoded
	 * whole from the frame's start, still in the input window. */
	size_t p = (size_t)q.cut, hl = 0;
	uint64_t at = (uint64_t)q.cut, len = 0; /* at: r->out[p]'s offset in the record */
	int pieces = !q.whole && q.n_entries - q.n_before == 2 && q.content - at >= 2 * 5 + 4 + 2 * 2;
	if (pieces && !q.stable && stream_grow(&r->out, &r->out_cap, PIECE) != 0)
		return stream_rerr(r, SS_ERR_NOMEM, q.off, "out of memory");
	if (pieces && (rc = stream_unpack_prefix(r, &q)) < 0)
		return rc;
	if (pieces && (rc = need(r, &q, &p, 10, 1)) < 0)
		return rc;
	if (!pieces || memcmp(r->out + p, key[0], 5) || stream_bin_header(r->out + p + 5, 5, &hl, &len) ||
	    len > q.content - at - 5 - hl) {
		rc = ss_reader_next(r, recp);
		return rc == 1 ? 2 : rc;
	}
	ss_record *rec = &r->rec;
	take_annotation(r, rec);
	rec->in_place = q.stable;
	if ((rc = fn(arg, rec, -1, 0, NULL, 0)) != 0)
		return stream_rerr(r, rc, q.off, "stopped by the caller");
	for (int which = 0; which < 2; which++) {
		if (which == 1) {
			uint64_t rest = q.content - at;
			if (rest < 6 || (rc = need(r, &q, &p, rest < 9 ? (size_t)rest : 9, 0)) < 0 ||
			    memcmp(r->out + p, key[1], 4) || stream_bin_header(r->out + p + 4, q.ob.pos - p - 4, &hl, &len) ||
			    len != rest - 4 - hl)
				return rc < 0 ? rc : stream_rerr(r, SS_ERR_FORMAT, q.off,
							  "\"conv\" and \"ssm\" are not the record's last entries");
		}
		p += key_len[which] + hl;
		at += key_len[which] + hl + len;
		compact(r, &q, &p); /* each array starts at the buffer's start: aligned pieces */
		for (uint64_t done = 0; done < len;) {
			size_t avail = q.ob.pos - p;
			uint64_t left = len - done;
			size_t take = avail < left ? avail & ~(size_t)15 : (size_t)left;
			if (take == 0) {
				if ((rc = pump(r, &q, &p, 0)) < 0)
					return rc;
				continue;
			}
			if ((rc = fn(arg, rec, which, done, r->out + p, take)) != 0)
				return stream_rerr(r, rc, q.off, "stopped by the caller");
			p += take;
			done += take;
		}
	}
	while (!q.done) /* the checksum, and nothing more */
		if ((rc = pump(r, &q, &p, 0)) < 0)
			return rc;
	if (q.ob.pos != p || q.made != q.content)
		return stream_rerr(r, SS_ERR_FORMAT, q.off, "zstd frame content is %llu bytes, header says %llu",
			    (unsigned long long)q.made, (unsigned long long)q.content);
	rec->length = q.in_off - q.off;
	rec->content = q.content;
	r->pos = q.in_off;
	r->index++, r->n_read++;
	*recp = rec;
	return 1;
}
