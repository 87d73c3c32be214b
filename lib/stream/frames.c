/*
 * frames.c — the frames of a record stream (formats/tokens.md, "framing"):
 * a frame's header and its length from its block headers, the skippable
 * frames (the annotation before a record, the plan that begins a stream)
 * read and written, the check of a msgpack payload before it is unpacked,
 * and the check of a whole frame (ss_frame_check_*, ss_frame_verify).
 * ref: RFC 8878 §3.1.1 (zstd frames), §3.1.2 (skippable frames), msgpack
 * spec (formats).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/stream_internal.h"

/* Unpacks the n-byte payload of the skippable frame at r->pos into *u
 * (the caller destroys it on success; `what` names the frame in errors):
 * one msgpack object, exactly n bytes. It is checked first, as a record
 * is: the unpacker allocates for the counts it reads (a 22-byte frame
 * asked for 128 GiB). */
static int skippable_unpack(ss_reader *r, uint32_t n, const char *what, msgpack_unpacked *u)
{
	long long got = stream_in_fill(r, r->pos, 8 + (size_t)n, r->pos);
	if (got < 0)
		return stream_rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
	if (got < 8 + (long long)n)
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "%s frame truncated", what);
	const unsigned char *pay = r->buf + (r->pos - r->base) + 8;
	const char *why;
	if (stream_msgpack_check(pay, n, &why) != 0)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "malformed %s frame: %s", what, why);
	msgpack_unpacked_init(u);
	size_t used = 0;
	if (msgpack_unpack_next(u, (const char *)pay, n, &used) != MSGPACK_UNPACK_SUCCESS || used != n) {
		msgpack_unpacked_destroy(u);
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "malformed %s frame", what);
	}
	return 0;
}

/* Reads the annotation frame at r->pos (payload of n bytes: a msgpack map
 * {"rank": int, "score": float} and optionally "rerank_score": float;
 * other keys are ignored); it applies to the next record. */
static int read_annotation(ss_reader *r, uint32_t n)
{
	msgpack_unpacked u;
	int rc = skippable_unpack(r, n, "annotation", &u);
	if (rc)
		return rc;
	const msgpack_object *rk = ss_map_get(&u.data, "rank"), *sc = ss_map_get(&u.data, "score");
	int ok = rk && sc && rk->type == MSGPACK_OBJECT_POSITIVE_INTEGER && rk->via.u64 <= INT32_MAX &&
	     (sc->type == MSGPACK_OBJECT_FLOAT64 || sc->type == MSGPACK_OBJECT_FLOAT32);
	const msgpack_object *rr = ss_map_get(&u.data, "rerank_score");
	ok = ok && (!rr || rr->type == MSGPACK_OBJECT_FLOAT64 || rr->type == MSGPACK_OBJECT_FLOAT32);
	if (ok) {
		r->annot = 1;
		r->annot_rank = (int32_t)rk->via.u64;
		r->annot_score = sc->via.f64;
		r->annot_has_rerank = rr != NULL;
		r->annot_rerank = rr ? rr->via.f64 : 0;
	}
	msgpack_unpacked_destroy(&u);
	return ok ? 0 : stream_rerr(r, SS_ERR_FORMAT, r->pos, "malformed annotation frame");
}

/* Reads the plan frame at r->pos (payload of n bytes: a msgpack map
 * {"n": uint, "logdecay": bin of n*H f32}) into r->plan. */
static int read_plan(ss_reader *r, uint32_t n)
{
	if (n > SS_PLAN_MAX)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "plan frame of %lu bytes (at most %lu)", (unsigned long)n,
			    (unsigned long)SS_PLAN_MAX);
	msgpack_unpacked u;
	int rc = skippable_unpack(r, n, "plan", &u);
	if (rc)
		return rc;
	const msgpack_object *cnt = ss_map_get(&u.data, "n"), *ld = ss_map_get(&u.data, "logdecay");
	int ok = cnt && ld && cnt->type == MSGPACK_OBJECT_POSITIVE_INTEGER && cnt->via.u64 >= 1 &&
	     cnt->via.u64 <= n && ld->type == MSGPACK_OBJECT_BIN && ld->via.bin.size > 0 &&
	     ld->via.bin.size % (4 * cnt->via.u64) == 0;
	float *x = ok ? malloc(ld->via.bin.size) : NULL;
	if (x) {
		memcpy(x, ld->via.bin.ptr, ld->via.bin.size); /* little-endian */
		for (size_t i = 0; i < ld->via.bin.size / 4 && ok; i++)
			ok = isfinite(x[i]) && x[i] <= 0;
	}
	if (ok && x) {
		free(r->plan);
		r->plan = x;
		r->plan_n = (size_t)cnt->via.u64;
		r->plan_h = ld->via.bin.size / 4 / r->plan_n;
	} else {
		free(x);
	}
	msgpack_unpacked_destroy(&u);
	if (ok && !x)
		return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
	return ok ? 0 : stream_rerr(r, SS_ERR_FORMAT, r->pos, "malformed plan frame");
}

/* Whether the n bytes at p could begin a text file (UTF-8 or ASCII: no
 * control bytes but tab, line ends and form feed): what a user gives a tool
 * in place of a stream most often. */
static int looks_text(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((p[i] < 0x20 && !strchr("\t\n\r\f", p[i])) || p[i] == 0x7f)
			return 0;
	return n > 0;
}

/* Parses the frame header at r->pos. Returns 1 with *hsz, *content,
 * *checksum set; 0 at clean end of input; 2 for a skippable frame (r->pos
 * advanced past it); negative on error. */
int stream_frame_header(ss_reader *r, size_t *hsz, uint64_t *content, int *checksum)
{
	long long got = stream_in_fill(r, r->pos, ZSTD_FRAMEHEADERSIZE_MAX, r->pos);
	if (got < 0)
		return stream_rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
	if (got == 0)
		return 0;
	const unsigned char *p = r->buf + (r->pos - r->base);
	if (got < 4)
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "stream truncated (%lld stray bytes)", got);
	uint32_t magic = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	if ((magic & SKIP_MAGIC_MASK) == SKIP_MAGIC) {
		if (got < 8)
			return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "skippable frame truncated");
		uint32_t n = p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
		if (magic == SS_ANNOT_MAGIC && n <= 256) {
			int rc = read_annotation(r, n);
			if (rc < 0)
				return rc;
		} else if (magic == SS_PLAN_MAGIC && !r->plan_seen) {
			int rc = read_plan(r, n);
			if (rc < 0)
				return rc;
			r->plan_seen = 1;
		}
		/* The frame's last byte must exist: a size running past the end
		 * is damage, not a clean end of stream. */
		uint64_t end = r->pos + 8 + (uint64_t)n;
		got = stream_in_fill(r, end - 1, 1, end - 1);
		if (got < 0)
			return stream_rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		if (got < 1)
			return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "skippable frame truncated (declares %lu bytes)",
				    (unsigned long)n);
		r->pos = end;
		return 2;
	}
	r->plan_seen = 1; /* a plan applies only ahead of the first record */
	if (magic != ZSTD_MAGIC)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "not an ss stream (no zstd frame here%s)",
			    r->pos == 0 && looks_text(p, (size_t)got) ? "; it looks like text" : "");
	ZSTD_frameHeader zfh;
	size_t rc = ZSTD_getFrameHeader(&zfh, p, (size_t)got);
	if (ZSTD_isError(rc))
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame header: %s", ZSTD_getErrorName(rc));
	if (rc > 0)
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame header truncated");
	if (zfh.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame without a declared content size "
			    "(not written by an ss tool)");
	if (zfh.frameContentSize > r->max_record || zfh.frameContentSize > SIZE_MAX / 2)
		return stream_rerr(r, SS_ERR_TOO_LARGE, r->pos, "declared record size %llu bytes exceeds the limit of %llu (SS_MAX_RECORD)",
			    (unsigned long long)zfh.frameContentSize, (unsigned long long)r->max_record);
	if (zfh.frameContentSize == 0)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "empty record");
	*hsz = zfh.headerSize;
	*content = zfh.frameContentSize;
	*checksum = zfh.checksumFlag;
	return 1;
}

/* Walks the block headers of the zstd frame at r->pos (header already
 * parsed: hsz bytes, checksum flag) and returns its total compressed size,
 * or a negative error with r->err set. ref: RFC 8878 §3.1.1.2. */
long long stream_frame_length(ss_reader *r, size_t hsz, int has_checksum, uint64_t content)
{
	uint64_t off = r->pos + hsz;
	/* A valid frame is at most the compress bound of its content plus
	 * per-block headers; anything longer is corrupt. */
	uint64_t limit = ZSTD_compressBound((size_t)content) + hsz + 3 * (content / 1024 + 2) + 8;
	/* Past the window of a file, the bytes at a header are read into hb
	 * (pread: the window and the stream position stay as they are), a
	 * page at a time: filling the window would read 64 KiB of each 128 KiB
	 * block, and one pread a header would be thousands a record of raw
	 * blocks, each with up to three empty ones (formats/states.md). */
	unsigned char hb[4096];
	uint64_t h0 = 0, hn = 0; /* hb holds bytes [h0, h0 + hn) of the file */
	for (;;) {
		const unsigned char *p = hb;
		long long got;
		if (r->seekable && (off < r->base || off + 3 > r->base + r->len)) {
			ssize_t n = 0;
			if (off < h0 || off + 3 > h0 + hn) { /* hb from off on */
				h0 = off;
				hn = 0;
				while (hn < 3 && ((n = pread(fileno(r->f), hb + hn, sizeof hb - hn, (off_t)(h0 + hn))) > 0 ||
						  (n < 0 && errno == EINTR)))
					hn += n > 0 ? (uint64_t)n : 0;
			}
			p = hb + (off - h0);
			got = n < 0 ? SS_ERR_IO : h0 + hn - off >= 3 ? 3 : (long long)(h0 + hn - off);
		} else {
			got = stream_in_fill(r, off, 3, r->pos);
			p = r->buf + (off - r->base);
		}
		if (got < 0)
			return stream_rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		if (got < 3)
			return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (block header at byte %llu)",
				    (unsigned long long)off);
		uint32_t bh = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
		int last = bh & 1, type = (bh >> 1) & 3;
		uint32_t bsize = bh >> 3;
		if (type == 3)
			return stream_rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame (reserved block type)");
		off += 3 + (type == 1 ? 1 : bsize);
		if (off - r->pos > limit)
			return stream_rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame (blocks exceed declared size)");
		if (last)
			break;
	}
	if (has_checksum)
		off += 4;
	/* The frame's last byte must exist: a file cut in its last block or
	 * checksum is truncated, not a frame read to its end. */
	unsigned char last;
	long long got = !r->seekable ? stream_in_fill(r, off - 1, 1, r->pos) : pread(fileno(r->f), &last, 1, (off_t)(off - 1));
	if (got < 0)
		return stream_rerr(r, SS_ERR_IO, r->pos, "read error: %s", strerror(errno));
	if (got < 1)
		return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (the %s ends before its byte %llu)",
			    r->seekable ? "file" : "input", (unsigned long long)(off - r->pos));
	return (long long)(off - r->pos);
}

int ss_reader_plan(ss_reader *r, size_t *n, size_t *H, const float **logdecay)
{
	size_t hsz;
	uint64_t content;
	int checksum, rc = 2;
	if (r->n_read == 0 && !r->plan_seen)
		while ((rc = stream_frame_header(r, &hsz, &content, &checksum)) == 2 && !r->plan)
			;
	if (rc < 0)
		return rc;
	if (!r->plan || r->n_read > 0)
		return 0;
	*n = r->plan_n;
	*H = r->plan_h;
	*logdecay = r->plan;
	return 1;
}

int ss_writer_put_plan(ss_writer *w, size_t n, size_t H, const float *logdecay)
{
	if (n < 1 || H < 1 || n > SS_PLAN_MAX || H > (SS_PLAN_MAX - 64) / 4 / n) /* 64: the map around */
		return SS_ERR_INVALID;
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	unsigned char h[8];
	int rc = msgpack_pack_map(&pk, 2) || msgpack_pack_str_with_body(&pk, "n", 1) ||
		 msgpack_pack_uint64(&pk, n) || msgpack_pack_str_with_body(&pk, "logdecay", 8) ||
		 msgpack_pack_bin_with_body(&pk, logdecay, n * H * 4) /* little-endian */
		 ? SS_ERR_NOMEM : 0;
	uint32_t m = SS_PLAN_MAGIC, len = (uint32_t)sb.size;
	for (int i = 0; i < 4; i++) {
		h[i] = (unsigned char)(m >> (8 * i));
		h[4 + i] = (unsigned char)(len >> (8 * i));
	}
	if (!rc)
		rc = stream_write(w, h, 8);
	if (!rc)
		rc = stream_write(w, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

void ss_writer_set_rerank_score(ss_writer *w, double rerank_score)
{
	w->rerank_pending = 1;
	w->rerank_score = rerank_score;
}

int ss_writer_put_annotation(ss_writer *w, int32_t rank, double score)
{
	unsigned char f[8 + 64];
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2 + (w->rerank_pending != 0));
	msgpack_pack_str_with_body(&pk, "rank", 4);
	msgpack_pack_int32(&pk, rank);
	msgpack_pack_str_with_body(&pk, "score", 5);
	msgpack_pack_double(&pk, score);
	if (w->rerank_pending) {
		msgpack_pack_str_with_body(&pk, "rerank_score", 12);
		msgpack_pack_double(&pk, w->rerank_score);
		w->rerank_pending = 0;
	}
	size_t n = sb.size;
	uint32_t m = SS_ANNOT_MAGIC;
	for (int i = 0; i < 4; i++) {
		f[i] = (unsigned char)(m >> (8 * i));
		f[4 + i] = (unsigned char)(n >> (8 * i));
	}
	memcpy(f + 8, sb.data, n);
	msgpack_sbuffer_destroy(&sb);
	return stream_write(w, f, 8 + n);
}

/* Checks that buf[0..len) is exactly one msgpack object whose every
 * declared length and count fits in the bytes that remain, so that the
 * unpacker never allocates for sizes the data cannot back. Returns 0 or -1
 * with *why set. ref: msgpack spec, formats section. */
int stream_msgpack_check(const unsigned char *p, size_t len, const char **why)
{
	size_t i = 0;
	uint64_t pending = 1;
#define NEED(n) do { if ((n) > len - i) { *why = "truncated msgpack data"; return -1; } } while (0)
	while (pending) {
		NEED(1);
		unsigned char t = p[i++];
		pending--;
		uint64_t skip = 0, items = 0;
		if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
			continue;
		} else if (t >= 0x80 && t <= 0x8f) {
			items = 2u * (t & 0x0f);
		} else if (t >= 0x90 && t <= 0x9f) {
			items = t & 0x0f;
		} else if (t >= 0xa0 && t <= 0xbf) {
			skip = t & 0x1f;
		} else {
			switch (t) {
			case 0xc4: case 0xd9: NEED(1); skip = p[i]; i += 1; break;
			case 0xc5: case 0xda: NEED(2); skip = (uint64_t)p[i] << 8 | p[i + 1]; i += 2; break;
			case 0xc6: case 0xdb: NEED(4); skip = (uint64_t)p[i] << 24 | (uint64_t)p[i + 1] << 16 | (uint64_t)p[i + 2] << 8 | p[i + 3]; i += 4; break;
			case 0xc7: NEED(1); skip = 1 + (uint64_t)p[i]; i += 1; break;
			case 0xc8: NEED(2); skip = 1 + ((uint64_t)p[i] << 8 | p[i + 1]); i += 2; break;
			case 0xc9: NEED(4); skip = 1 + ((uint64_t)p[i] << 24 | (uint64_t)p[i + 1] << 16 | (uint64_t)p[i + 2] << 8 | p[i + 3]); i += 4; break;
			case 0xca: skip = 4; break;
			case 0xcb: skip = 8; break;
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xce: case 0xd2: skip = 4; break;
			case 0xcf: case 0xd3: skip = 8; break;
			case 0xd4: skip = 2; break;
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xdc: NEED(2); items = (uint64_t)p[i] << 8 | p[i + 1]; i += 2; break;
			case 0xdd: NEED(4); items = (uint64_t)p[i] << 24 | (uint64_t)p[i + 1] << 16 | (uint64_t)p[i + 2] << 8 | p[i + 3]; i += 4; break;
			case 0xde: NEED(2); items = 2 * ((uint64_t)p[i] << 8 | p[i + 1]); i += 2; break;
			case 0xdf: NEED(4); items = 2 * ((uint64_t)p[i] << 24 | (uint64_t)p[i + 1] << 16 | (uint64_t)p[i + 2] << 8 | p[i + 3]); i += 4; break;
			default: *why = "invalid msgpack type byte"; return -1;
			}
		}
		NEED(skip);
		i += (size_t)skip;
		/* Every item takes at least one byte. */
		if (items > len - i || pending + items > len - i + 1) {
			*why = "msgpack count exceeds the record size";
			return -1;
		}
		pending += items;
	}
	if (i != len) {
		*why = "trailing bytes after the record's map";
		return -1;
	}
	return 0;
#undef NEED
}

struct ss_frame_check {
	ZSTD_DCtx *d;
	unsigned char *out; /* RAW_BLOCK bytes of content, discarded */
	uint64_t in;        /* frame bytes taken */
	int done;           /* the frame ended (zstd checked its checksum) */
};

int ss_frame_check_open(ss_frame_check **out)
{
	ss_frame_check *c = calloc(1, sizeof *c);
	if (c && (!(c->d = ZSTD_createDCtx()) || !(c->out = malloc(RAW_BLOCK)))) {
		ss_frame_check_close(c);
		c = NULL;
	}
	*out = c;
	return c ? 0 : SS_ERR_NOMEM;
}

void ss_frame_check_begin(ss_frame_check *c)
{
	ZSTD_DCtx_reset(c->d, ZSTD_reset_session_only);
	c->in = 0;
	c->done = 0;
}

int ss_frame_check_update(ss_frame_check *c, const void *p, size_t n, char *errmsg)
{
	ZSTD_inBuffer in = { p, n, 0 };
	while (in.pos < in.size) {
		if (c->done)
			return ss_errf(errmsg, SS_ERR_FORMAT, "a frame of %llu bytes, not more",
				       (unsigned long long)(c->in + in.pos));
		ZSTD_outBuffer o = { c->out, RAW_BLOCK, 0 };
		size_t zr = ZSTD_decompressStream(c->d, &o, &in);
		if (ZSTD_isError(zr))
			return ss_errf(errmsg, zstd_code(zr), "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
		c->done = zr == 0;
	}
	c->in += n;
	return 0;
}

int ss_frame_check_end(ss_frame_check *c, char *errmsg)
{
	/* Content zstd holds back: flushed until the frame ends or stalls. */
	for (size_t made = 1; !c->done && made;) {
		ZSTD_inBuffer in = { NULL, 0, 0 };
		ZSTD_outBuffer o = { c->out, RAW_BLOCK, 0 };
		size_t zr = ZSTD_decompressStream(c->d, &o, &in);
		if (ZSTD_isError(zr))
			return ss_errf(errmsg, zstd_code(zr), "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
		c->done = zr == 0;
		made = o.pos;
	}
	return c->done ? 0 : ss_errf(errmsg, SS_ERR_TRUNCATED, "zstd frame truncated (%llu bytes)",
				     (unsigned long long)c->in);
}

void ss_frame_check_close(ss_frame_check *c)
{
	if (!c)
		return;
	ZSTD_freeDCtx(c->d);
	free(c->out);
	free(c);
}

int ss_frame_verify(const void *frame, size_t len, char *errmsg)
{
	ss_frame_check *c;
	int rc = ss_frame_check_open(&c);
	if (rc)
		return rc;
	ss_frame_check_begin(c);
	if (!(rc = ss_frame_check_update(c, frame, len, errmsg)))
		rc = ss_frame_check_end(c, errmsg);
	ss_frame_check_close(c);
	return rc;
}
