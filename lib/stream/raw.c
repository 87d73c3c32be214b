/*
 * raw.c — uncompressed ("raw") frames (formats/states.md "raw frames"):
 * read without zstd, a state's arrays handed over a piece at a time as
 * they are read from the file (ss_reader_next_pieces), and written block
 * by block so that the arrays lie aligned (ss_writer_begin_raw,
 * ss_writer_cut). The frame's checksum is
 * XXH64 of its content, computed here as zstd would.
 * ref: RFC 8878 §3.1.1 (frame header, Raw_Block, Content_Checksum).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/stream_internal.h"

/* The uncompressed frame being read (stream_raw_pieces): its segments in
 * r->seg, how far its content is hashed, where its checksum lies. */
typedef struct {
	ss_reader *r;
	int fd;
	size_t n;         /* segments */
	uint64_t hashed;  /* content bytes [0, hashed) hashed */
	XXH64_state_t xh; /* the content's XXH64, whose low 32 bits end the frame */
	unsigned char ck[4]; /* the frame's checksum, read after its last block */
	uint64_t ck_at;   /* its file offset */
} rawf_t;

/* Not a frame for this path (compressed blocks, laid out otherwise, cut
 * short, anything but what writers make): nothing is handed over, and
 * zstd reads it as any other frame, with its errors. */
#define NOT_RAW 3

/* pread of n bytes at file offset `at` into dst: the count read (fewer at
 * the end of the file), or -1 with errno set. */
static ssize_t pread_full(int fd, unsigned char *dst, size_t n, uint64_t at)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = pread(fd, dst + got, n - got, (off_t)(at + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

/* Reads content bytes [at, at + n) into dst from the blocks' payloads.
 * 0, or SS_ERR_TRUNCATED (the file ends before them: cut short since its
 * blocks were listed) / SS_ERR_IO with r's error set. */
static int content_read(rawf_t *f, uint64_t at, size_t n, unsigned char *dst)
{
	const struct raw_seg *g = f->r->seg;
	size_t lo = 0, hi = f->n; /* the first segment that ends past at */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (g[mid].at + g[mid].len <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < f->n && n; i++) {
		size_t take = g[i].at + g[i].len - at < n ? (size_t)(g[i].at + g[i].len - at) : n;
		ssize_t k = pread_full(f->fd, dst, take, g[i].fo + (at - g[i].at));
		if (k < 0)
			return stream_rerr(f->r, SS_ERR_IO, f->r->pos, "read error: %s", strerror(errno));
		if ((size_t)k < take) {
			struct stat st;
			long long size = fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1;
			return stream_rerr(f->r, SS_ERR_TRUNCATED, f->r->pos,
					   "the file was cut short while being read (now %lld bytes)", size);
		}
		dst += take, at += take, n -= take;
	}
	return n ? stream_rerr(f->r, SS_ERR_FORMAT, f->r->pos, "read past the frame's content") : 0;
}

/* Reads content bytes [a0, a0 + len) (array which's body, the content
 * hashed up to a0), PIECE bytes at a time into r->raw_buf (64-byte
 * aligned: read where it lies in the file, a piece would be at the
 * alignment of its offset there), hashes each piece and hands it to fn
 * (fn NULL: hashed only). 0, the reading's error (r's error set, *stopped
 * 0), or fn's (*stopped 1). */
static int raw_array(rawf_t *f, const ss_record *rec, int which, uint64_t a0, uint64_t len, ss_piece_fn fn,
		     void *arg, int *stopped)
{
	unsigned char *buf = f->r->raw_buf;
	for (uint64_t done = 0; done < len;) {
		size_t take = len - done < PIECE ? (size_t)(len - done) : PIECE;
		int rc = content_read(f, a0 + done, take, buf);
		if (rc)
			return rc;
		XXH64_update(&f->xh, buf, take);
		f->hashed = a0 + done + take;
		if (fn && (rc = fn(arg, rec, which, done, buf, take)) != 0) {
			*stopped = 1;
			return rc;
		}
		done += take;
	}
	return 0;
}

/* Hashes the content on to byte `end` (raw_array without a callback). */
static int hash_to(rawf_t *f, uint64_t end)
{
	int stopped = 0;
	return raw_array(f, NULL, -1, f->hashed, end - f->hashed, NULL, NULL, &stopped);
}

/* Lists the blocks of the frame at r->pos (header of hsz bytes, content
 * bytes) as segments of r->seg, reading their 3-byte headers (a pread
 * each, 128 KiB apart: a 19 MB state has ~150): raw, within the content
 * and the file, adding up to the content, the checksum's 4 bytes after
 * them. A frame of many small blocks (more than one in 1 KiB of content on
 * average, or 8 empty ones in a row: not what writers make) is left to
 * zstd. 0, NOT_RAW, or SS_ERR_NOMEM. */
static int list_blocks(rawf_t *f, size_t hsz, uint64_t content)
{
	ss_reader *r = f->r;
	struct stat st;
	if (fstat(f->fd, &st) != 0)
		return NOT_RAW;
	uint64_t size = (uint64_t)st.st_size, at = r->pos + hsz, made = 0, max_blocks = content / 1024 + 64;
	int empties = 0;
	for (;;) {
		unsigned char h[3];
		if (pread_full(f->fd, h, 3, at) != 3)
			return NOT_RAW;
		uint32_t bh = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16;
		size_t bsize = bh >> 3;
		if (((bh >> 1) & 3) != 0 || bsize > RAW_BLOCK || bsize > content - made || size < at + 3 ||
		    size - at - 3 < bsize)
			return NOT_RAW;
		if (bsize) {
			if (f->n == r->seg_cap) {
				size_t cap = r->seg_cap ? 2 * r->seg_cap : 256;
				struct raw_seg *sg = realloc(r->seg, cap * sizeof *sg);
				if (!sg)
					return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
				r->seg = sg;
				r->seg_cap = cap;
			}
			r->seg[f->n++] = (struct raw_seg){made, at + 3, bsize};
			empties = 0;
		} else if (++empties > 8) {
			return NOT_RAW;
		}
		if (f->n > max_blocks)
			return NOT_RAW;
		made += bsize;
		at += 3 + bsize;
		if (bh & 1)
			break;
	}
	if (made != content || pread_full(f->fd, f->ck, 4, at) != 4)
		return NOT_RAW;
	f->ck_at = at;
	return 0;
}

/* Finds the record's layout: its metadata, copied out to r->out until the
 * entries before "conv"/"ssm" are whole (a few KiB; q8 scales, MBs at the
 * 2.7b shape), into q; then "conv" and "ssm", bins, the last two entries:
 * their bodies at content bytes body[i], len[i] bytes each. 0, NOT_RAW,
 * or an error (SS_ERR_NOMEM, the reading's). */
static int find_arrays(rawf_t *f, size_t hsz, uint64_t content, prefix_t *q, uint64_t body[2], uint64_t len[2])
{
	ss_reader *r = f->r;
	memset(q, 0, sizeof *q);
	q->hsz = hsz, q->checksum = 1, q->content = content, q->off = r->pos;
	size_t copied = 0;
	int rc;
	for (size_t i = 0; i < f->n; i++) {
		if (stream_grow(&r->out, &r->out_cap, copied + r->seg[i].len) != 0)
			return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
		if ((rc = content_read(f, r->seg[i].at, r->seg[i].len, r->out + copied)) != 0)
			return rc;
		copied += r->seg[i].len;
		if ((q->cut = stream_meta_prefix(r->out, copied, &q->n_before, &q->hdr, &q->whole, &q->n_entries)) >= 0)
			break;
	}
	if (q->cut < 0 || q->whole || q->n_entries - q->n_before != 2)
		return NOT_RAW;
	unsigned char h[10];
	size_t hl[2];
	uint64_t at = (uint64_t)q->cut;
	for (int which = 0; which < 2; which++) {
		size_t kl = stream_piece_key_len[which], n = content - at < 10 ? (size_t)(content - at) : 10;
		if (n < kl + 2)
			return NOT_RAW;
		if ((rc = content_read(f, at, n, h)) != 0)
			return rc;
		if (memcmp(h, stream_piece_key[which], kl) || stream_bin_header(h + kl, n - kl, &hl[which], &len[which]) ||
		    len[which] > content - at - kl - hl[which])
			return NOT_RAW;
		body[which] = at + kl + hl[which];
		at = body[which] + len[which];
	}
	return at == content ? 0 : NOT_RAW;
}

/* ss_reader_next_pieces of an uncompressed frame (raw blocks only:
 * formats/states.md "raw frames") in a regular file: its blocks listed,
 * its metadata copied out, conv and ssm read a piece at a time (pread, into
 * a buffer of the reader's that stays in cache) and handed to fn, and the
 * frame's checksum computed over the content as it goes (XXH64, as
 * zstd's). Returns 1 as ss_reader_next_pieces, a negative error, or
 * NOT_RAW (3) when the frame is not for this path.
 *
 * Read, not mapped: a map of the file (MAP_POPULATE, one a record, as
 * before) costs a first touch of each of its pages that a read does not.
 * On the virtual machines here that was ~1 us a 4 KiB page, 45-50 ms of
 * the 10 f32 states of the 130m shape a question composes, whose hashing
 * then ran at 2.4 GB/s against 10 GB/s for read(2) of the same bytes. */
int stream_raw_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg)
{
	size_t hsz;
	uint64_t content;
	int checksum, rc;
	while ((rc = stream_frame_header(r, &hsz, &content, &checksum)) == 2)
		;
	if (rc <= 0 || !checksum)
		return rc <= 0 ? rc : NOT_RAW;
	long long got = stream_in_fill(r, r->pos + hsz, 3, r->pos);
	if (got < 3 || ((r->buf[r->pos + hsz - r->base] >> 1) & 3) != 0)
		return NOT_RAW; /* the first block is not raw: no pread at all */
	rawf_t f;
	memset(&f, 0, sizeof f);
	f.r = r;
	f.fd = fileno(r->f);
	prefix_t q;
	uint64_t body[2], len[2];
	if ((rc = list_blocks(&f, hsz, content)) != 0 || (rc = find_arrays(&f, hsz, content, &q, body, len)) != 0)
		return rc;
	if (!r->raw_buf && !(r->raw_buf = aligned_alloc(64, PIECE)))
		return stream_rerr(r, SS_ERR_NOMEM, q.off, "out of memory");
	if ((rc = stream_unpack_prefix(r, &q)) < 0)
		return rc;
	ss_record *rec = &r->rec;
	take_annotation(r, rec);
	rec->in_place = 0;
	XXH64_reset(&f.xh, 0);
	if ((rc = fn(arg, rec, -1, 0, NULL, 0)) != 0)
		return stream_rerr(r, rc, q.off, "stopped by the caller");
	for (int which = 0; which < 2; which++) {
		int stopped = 0;
		if ((rc = hash_to(&f, body[which])) != 0 ||
		    (rc = raw_array(&f, rec, which, body[which], len[which], fn, arg, &stopped)) != 0)
			return stopped ? stream_rerr(r, rc, q.off, "stopped by the caller") : rc;
	}
	if ((rc = hash_to(&f, q.content)) != 0)
		return rc;
	uint32_t want = f.ck[0] | (uint32_t)f.ck[1] << 8 | (uint32_t)f.ck[2] << 16 | (uint32_t)f.ck[3] << 24;
	if ((uint32_t)XXH64_digest(&f.xh) != want)
		return stream_rerr(r, SS_ERR_CHECKSUM, q.off, "corrupt zstd frame: %s",
				   ZSTD_getErrorName((size_t)-ZSTD_error_checksum_wrong));
	rec->length = f.ck_at + 4 - r->pos;
	rec->content = q.content;
	r->pos += rec->length;
	r->index++, r->n_read++;
	*recp = rec;
	return 1;
}

int ss_writer_begin_raw(ss_writer *w, uint64_t len, uint64_t *offset)
{
	if (offset)
		*offset = w->off;
	if (!w->blk && !(w->blk = malloc(RAW_BLOCK)))
		return SS_ERR_NOMEM;
	/* Frame_Header_Descriptor 0xC4: an 8-byte Frame_Content_Size, a
	 * Window_Descriptor (not single segment: a decoder's window stays
	 * 128 KiB whatever the record's size), Content_Checksum_flag. */
	unsigned char h[14] = {0x28, 0xB5, 0x2F, 0xFD, 0xC4, RAW_WINDOW_DESC};
	for (int i = 0; i < 8; i++)
		h[6 + i] = (unsigned char)(len >> (8 * i));
	w->capture = 0;
	w->raw = 1;
	w->fill = 0;
	w->raw_left = len;
	w->raw_start = w->off;
	XXH64_reset(&w->xh, 0);
	return stream_write(w, h, sizeof h);
}

/* Writes the block w->blk[0..n) as a raw block (last: the frame's last). */
static int raw_block(ss_writer *w, const unsigned char *p, size_t n, int last)
{
	uint32_t bh = (uint32_t)n << 3 | (unsigned)last; /* Block_Type 0: Raw_Block */
	unsigned char h[3] = {(unsigned char)bh, (unsigned char)(bh >> 8), (unsigned char)(bh >> 16)};
	int rc = stream_write(w, h, 3);
	return rc ? rc : stream_write(w, p, n);
}

void ss_writer_cut(ss_writer *w)
{
	if (!w->raw || !w->fill)
		return;
	/* The pending bytes go out as k + 1 blocks, k of one byte each, where
	 * k (< 4) puts the next block's payload at an offset from the frame's
	 * start that 4 divides: each block header is 3 bytes, and 3·3 = 1
	 * (mod 4). Relative to the frame, so that a record's bytes do not
	 * depend on where it is written. */
	uint64_t at = w->off - w->raw_start + 3 + w->fill + 3;
	size_t k = (size_t)((4 - at % 4) % 4 * 3 % 4);
	if (k + 1 > w->fill)
		k = 0;
	for (size_t i = 0; i < k; i++)
		raw_block(w, w->blk + i, 1, 0);
	raw_block(w, w->blk + k, w->fill - k, 0);
	w->fill = 0;
}

/* Appends len bytes at buf to the raw frame being written. */
int stream_raw_add(ss_writer *w, const unsigned char *buf, size_t len)
{
	if (len > w->raw_left)
		return SS_ERR_INVALID;
	w->raw_left -= len;
	int rc = 0;
	while (len && !rc) {
		/* A full block, and more comes: not the last. From w->blk, or
		 * (nothing pending, more than a block left in buf) from buf
		 * itself: a 19 MB state goes out uncopied. */
		const int direct = w->fill == 0 && len > RAW_BLOCK;
		if (w->fill == RAW_BLOCK || direct) {
			if (direct)
				XXH64_update(&w->xh, buf, RAW_BLOCK); /* while it is in cache */
			rc = raw_block(w, direct ? buf : w->blk, RAW_BLOCK, 0);
			if (direct)
				buf += RAW_BLOCK, len -= RAW_BLOCK;
			w->fill = 0;
			/* Empty blocks (a header each, up to 3) put the next
			 * payload at an offset 4 divides, as the one before:
			 * an array's f32 stay aligned across its blocks. */
			while (!rc && (w->off - w->raw_start + 3) % 4)
				rc = raw_block(w, w->blk, 0, 0);
			continue;
		}
		size_t take = RAW_BLOCK - w->fill < len ? RAW_BLOCK - w->fill : len;
		XXH64_update(&w->xh, buf, take);
		memcpy(w->blk + w->fill, buf, take);
		w->fill += take, buf += take, len -= take;
	}
	return rc;
}

int stream_raw_end(ss_writer *w)
{
	w->raw = 0;
	if (w->raw_left)
		return SS_ERR_INVALID;
	uint32_t x = (uint32_t)XXH64_digest(&w->xh);
	unsigned char c[4] = {(unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16),
			      (unsigned char)(x >> 24)};
	/* empty blocks make the frame's length a multiple of 4: the next raw
	 * frame starts aligned as this one did */
	int rc = 0;
	while (!rc && (w->off - w->raw_start + 3 + w->fill + 4) % 4)
		rc = raw_block(w, w->blk, 0, 0);
	if (!rc)
		rc = raw_block(w, w->blk, w->fill, 1);
	return rc ? rc : stream_write(w, c, 4);
}
