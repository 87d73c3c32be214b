/*
 * stream.c — record streams: one msgpack map per zstd frame.
 * See ss_stream.h for the contract and formats/{tokens,states}.md for the
 * schemas. ref: RFC 8878 (zstd frame and block headers), msgpack spec.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>
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

/* ================================================================ reader */

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
	/* The raw blocks of the uncompressed frame being read in place
	 * (raw_pieces): content bytes [at, at + len) lie at p, in a map of
	 * the file. */
	struct raw_seg { uint64_t at; const unsigned char *p; size_t len; } *seg;
	size_t seg_cap;
	uint64_t head_of;    /* > 0: the file is the head of one frame of this many bytes */
};

static int rerr(ss_reader *r, int code, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int grow(unsigned char **p, size_t *cap, size_t need);
static int rerr(ss_reader *r, int code, uint64_t off, const char *fmt, ...)
{
	char what[SS_ERRMSG_MAX - 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(r->err, sizeof r->err, "record %llu (byte offset %llu): %s",
		 (unsigned long long)r->index, (unsigned long long)off, what);
	return code;
}

/* Opens the named file `path` into r (r->f, own_file, seekable); regular:
 * only a regular file (ss_open_regular). Returns 0, or SS_ERR_NOTFOUND /
 * SS_ERR_IO / SS_ERR_INVALID (not a regular file) with errmsg set (r
 * unchanged). */
static int open_file(ss_reader *r, const char *path, int regular, char *errmsg)
{
	int fd = regular ? ss_open_regular(path) : -1;
	if (fd == -2)
		return ss_errf(errmsg, SS_ERR_INVALID, "not a regular file (a FIFO, a directory or a device)");
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : regular ? NULL : fopen(path, "rb");
	if (!f) {
		int code = errno == ENOENT ? SS_ERR_NOTFOUND : SS_ERR_IO;
		if (fd >= 0)
			close(fd);
		return ss_errf(errmsg, code, "%s", strerror(errno));
	}
	struct stat st;
	r->f = f;
	r->own_file = 1;
	r->seekable = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
	return 0;
}

/* Opens fd's file into r as open_file opens a named one: through a
 * duplicate (fd stays the caller's), from byte 0 (the duplicate shares
 * fd's offset, wherever it was left). */
static int open_fd(ss_reader *r, int fd, char *errmsg)
{
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return ss_errf(errmsg, SS_ERR_INVALID, "not a regular file");
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	FILE *f = dfd >= 0 ? fdopen(dfd, "rb") : NULL;
	if (!f || fseeko(f, 0, SEEK_SET) != 0) {
		int e = errno;
		if (f)
			fclose(f);
		else if (dfd >= 0)
			close(dfd);
		return ss_errf(errmsg, SS_ERR_IO, "%s", strerror(e));
	}
	r->f = f;
	r->own_file = 1;
	r->seekable = 1;
	return 0;
}

/* A reader of path (fd < 0; NULL or "-": stdin) or of the file open at fd
 * (then named path). */
static int reader_open(ss_reader **out, const char *path, int fd, uint64_t max_record, int regular, char *errmsg)
{
	*out = NULL;
	if (regular && (!path || !strcmp(path, "-")))
		return ss_errf(errmsg, SS_ERR_INVALID, "standard input is not a state file here");
	ss_reader *r = calloc(1, sizeof *r);
	if (!r)
		return SS_ERR_NOMEM;
	int is_stdin = fd < 0 && (!path || !strcmp(path, "-"));
	r->path = strdup(is_stdin ? "-" : path);
	r->max_record = max_record ? max_record : SS_MAX_RECORD_DEFAULT;
	r->dctx = ZSTD_createDCtx();
	r->cap = IN_CHUNK;
	r->buf = malloc(r->cap);
	if (!r->path || !r->dctx || !r->buf) {
		ss_reader_close(r);
		return SS_ERR_NOMEM;
	}
	if (is_stdin) {
		r->f = stdin;
		struct stat st;
		r->seekable = fstat(fileno(r->f), &st) == 0 && S_ISREG(st.st_mode);
	} else {
		int code = fd >= 0 ? open_fd(r, fd, errmsg) : open_file(r, path, regular, errmsg);
		if (code) {
			ss_reader_close(r);
			return code;
		}
	}
	if (r->seekable)
		r->base = r->pos = (uint64_t)ftello(r->f);
	msgpack_unpacked_init(&r->unp);
	snprintf(r->err, sizeof r->err, "no error");
	*out = r;
	return 0;
}

int ss_reader_open(ss_reader **out, const char *path, uint64_t max_record, char *errmsg)
{
	return reader_open(out, path, -1, max_record, 0, errmsg);
}

int ss_reader_open_regular(ss_reader **out, const char *path, uint64_t max_record, char *errmsg)
{
	return reader_open(out, path, -1, max_record, 1, errmsg);
}

int ss_reader_open_fd(ss_reader **out, int fd, const char *name, uint64_t max_record, char *errmsg)
{
	return reader_open(out, name ? name : "(descriptor)", fd, max_record, 1, errmsg);
}

int ss_reader_open_head(ss_reader **out, int fd, const char *name, uint64_t frame_len, char *errmsg)
{
	int rc = ss_reader_open_fd(out, fd, name, 0, errmsg);
	if (!rc)
		(*out)->head_of = frame_len;
	return rc;
}

static int zstd_code(size_t rc);

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

void ss_reader_close(ss_reader *r)
{
	if (!r)
		return;
	if (r->own_file && r->f)
		fclose(r->f);
	msgpack_unpacked_destroy(&r->unp);
	ZSTD_freeDCtx(r->dctx);
	free(r->buf);
	free(r->out);
	free(r->meta);
	free(r->plan);
	free(r->path);
	free(r->seg);
	free(r);
}

const char *ss_reader_error(const ss_reader *r) { return r->err; }
const char *ss_reader_path(const ss_reader *r) { return r->path; }
int ss_reader_seekable(const ss_reader *r) { return r->seekable; }

const char *ss_record_format(const ss_record *rec) { return rec->format; }
uint64_t ss_record_offset(const ss_record *rec) { return rec->offset; }
uint64_t ss_record_length(const ss_record *rec) { return rec->length; }
uint64_t ss_record_content_size(const ss_record *rec) { return rec->content; }
uint64_t ss_record_index(const ss_record *rec) { return rec->index; }
const void *ss_record_bytes(const ss_record *rec) { return rec->raw; }
size_t ss_record_size(const ss_record *rec) { return rec->raw_len; }

int ss_record_rerank_score(const ss_record *rec, double *rerank_score)
{
	if (!rec->has_rerank)
		return 0;
	if (rerank_score)
		*rerank_score = rec->rerank_score;
	return 1;
}

int ss_record_rank(const ss_record *rec, int32_t *rank, double *score)
{
	if (!rec->has_rank)
		return 0;
	if (rank)
		*rank = rec->rank;
	if (score)
		*score = rec->score;
	return 1;
}

/* Makes file bytes [off, off+need) available in the window and returns
 * how many of them are (fewer at end of input), or a negative SS_ERR_*.
 * Bytes from keep_from (<= off) on are retained; a pipe cannot go back, so
 * callers that will revisit a frame pass its start. Files seek freely. The
 * window is compacted only when what is asked for does not fit it, so
 * walking forward through a buffered frame costs no copies. */
static long long in_fill(ss_reader *r, uint64_t off, size_t need, uint64_t keep_from)
{
	if (r->seekable && (off < r->base || off > r->base + r->len)) {
		if (fseeko(r->f, (off_t)off, SEEK_SET) != 0)
			return SS_ERR_IO;
		r->base = off;
		r->len = 0;
		r->eof = 0;
	} else if (off < r->base) {
		return SS_ERR_INVALID;
	}
	if (off + need <= r->base + r->len)
		return (long long)need;
	uint64_t keep = keep_from < off ? keep_from : off;
	if (keep < r->base)
		keep = r->base;
	if (keep > r->base + r->len) {
		/* A pipe skipping forward: drop the window, read and discard. */
		r->base += r->len;
		r->len = 0;
		while (r->base < keep && !r->eof) {
			size_t want = keep - r->base < r->cap ? (size_t)(keep - r->base) : r->cap;
			size_t got = fread(r->buf, 1, want, r->f);
			if (got < want) {
				if (ferror(r->f))
					return SS_ERR_IO;
				r->eof = 1;
			}
			r->base += got;
		}
		if (r->base < keep)
			return 0;
	}
	if (keep > r->base && (size_t)(off - r->base) + need > r->cap) {
		size_t skip = (size_t)(keep - r->base);
		memmove(r->buf, r->buf + skip, r->len - skip);
		r->len -= skip;
		r->base = keep;
	}
	size_t want = (size_t)(off - r->base) + need;
	if (want > r->cap) {
		size_t ncap = r->cap;
		while (ncap < want)
			ncap *= 2;
		unsigned char *nb = realloc(r->buf, ncap);
		if (!nb)
			return SS_ERR_NOMEM;
		r->buf = nb;
		r->cap = ncap;
	}
	while (r->len < want && !r->eof) {
		/* Read what is asked for (at least 64 KiB), not the whole window:
		 * a seek to a small record must not cost a 1 MiB read. */
		size_t chunk = want - r->len < (64u << 10) ? (64u << 10) : want - r->len;
		if (chunk > r->cap - r->len)
			chunk = r->cap - r->len;
		size_t got = fread(r->buf + r->len, 1, chunk, r->f);
		if (got == 0) {
			if (ferror(r->f))
				return SS_ERR_IO;
			r->eof = 1;
		}
		r->len += got;
	}
	size_t at = (size_t)(off - r->base);
	size_t avail = r->len > at ? r->len - at : 0;
	return (long long)(avail < need ? avail : need);
}

int ss_reader_seek(ss_reader *r, uint64_t offset)
{
	if (!r->seekable) {
		snprintf(r->err, sizeof r->err, "cannot seek: input is not a regular file");
		return SS_ERR_INVALID;
	}
	r->pos = offset;
	r->index = 0;
	r->annot = 0;
	return 0;
}

int ss_reader_reserve(ss_reader *r, uint64_t bytes)
{
	if (bytes > r->max_record || bytes > SIZE_MAX / 2)
		return SS_ERR_TOO_LARGE;
	return grow(&r->out, &r->out_cap, (size_t)bytes);
}

int ss_reader_goto(ss_reader *r, const char *path, uint64_t offset, uint64_t index, char *errmsg)
{
	if (strcmp(path, r->path) != 0) {
		if (!strcmp(path, "-") || !strcmp(r->path, "-"))
			return ss_errf(errmsg, SS_ERR_INVALID, "cannot reopen standard input");
		char *p = strdup(path);
		if (!p)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		FILE *old = r->own_file ? r->f : NULL;
		int rc = open_file(r, path, 0, errmsg);
		if (rc) {
			free(p);
			return rc;
		}
		if (old)
			fclose(old);
		free(r->path);
		r->path = p;
		r->eof = 0;
		r->len = 0;
		r->base = 0;
	}
	int rc = ss_reader_seek(r, offset);
	if (rc)
		return ss_errf(errmsg, rc, "%s", r->err);
	r->index = index;
	return 0;
}

/* Walks the block headers of the zstd frame at r->pos (header already
 * parsed: hsz bytes, checksum flag) and returns its total compressed size,
 * or a negative error with r->err set. ref: RFC 8878 §3.1.1.2. */
static long long frame_length(ss_reader *r, size_t hsz, int has_checksum, uint64_t content)
{
	uint64_t off = r->pos + hsz;
	/* A valid frame is at most the compress bound of its content plus
	 * per-block headers; anything longer is corrupt. */
	uint64_t limit = ZSTD_compressBound((size_t)content) + hsz + 3 * (content / 1024 + 2) + 8;
	for (;;) {
		/* Past the window of a file, only the 3 header bytes are read
		 * (pread: the window and the stream position stay as they are);
		 * filling the window would read 64 KiB of each 128 KiB block. */
		unsigned char hb[3];
		const unsigned char *p = hb;
		long long got;
		if (r->seekable && (off < r->base || off + 3 > r->base + r->len)) {
			got = 0;
			while (got < 3) {
				ssize_t n = pread(fileno(r->f), hb + got, 3 - (size_t)got, (off_t)(off + (uint64_t)got));
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0)
					got = SS_ERR_IO;
				if (n <= 0)
					break;
				got += n;
			}
		} else {
			got = in_fill(r, off, 3, r->pos);
			p = r->buf + (off - r->base);
		}
		if (got < 0)
			return rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		if (got < 3)
			return rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (block header at byte %llu)",
				    (unsigned long long)off);
		uint32_t bh = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
		int last = bh & 1, type = (bh >> 1) & 3;
		uint32_t bsize = bh >> 3;
		if (type == 3)
			return rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame (reserved block type)");
		off += 3 + (type == 1 ? 1 : bsize);
		if (off - r->pos > limit)
			return rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame (blocks exceed declared size)");
		if (last)
			break;
	}
	if (has_checksum)
		off += 4;
	/* The frame's last byte must exist: a file cut in its last block or
	 * checksum is truncated, not a frame read to its end. */
	unsigned char last;
	long long got = !r->seekable ? in_fill(r, off - 1, 1, r->pos) : pread(fileno(r->f), &last, 1, (off_t)(off - 1));
	if (got < 0)
		return rerr(r, SS_ERR_IO, r->pos, "read error: %s", strerror(errno));
	if (got < 1)
		return rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (the %s ends before its byte %llu)",
			    r->seekable ? "file" : "input", (unsigned long long)(off - r->pos));
	return (long long)(off - r->pos);
}

static int msgpack_check(const unsigned char *p, size_t len, const char **why);

/* Unpacks the n-byte payload of the skippable frame at r->pos into *u
 * (the caller destroys it on success; `what` names the frame in errors):
 * one msgpack object, exactly n bytes. It is checked first, as a record
 * is: the unpacker allocates for the counts it reads (a 22-byte frame
 * asked for 128 GiB). */
static int skippable_unpack(ss_reader *r, uint32_t n, const char *what, msgpack_unpacked *u)
{
	long long got = in_fill(r, r->pos, 8 + (size_t)n, r->pos);
	if (got < 0)
		return rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
	if (got < 8 + (long long)n)
		return rerr(r, SS_ERR_TRUNCATED, r->pos, "%s frame truncated", what);
	const unsigned char *pay = r->buf + (r->pos - r->base) + 8;
	const char *why;
	if (msgpack_check(pay, n, &why) != 0)
		return rerr(r, SS_ERR_FORMAT, r->pos, "malformed %s frame: %s", what, why);
	msgpack_unpacked_init(u);
	size_t used = 0;
	if (msgpack_unpack_next(u, (const char *)pay, n, &used) != MSGPACK_UNPACK_SUCCESS || used != n) {
		msgpack_unpacked_destroy(u);
		return rerr(r, SS_ERR_FORMAT, r->pos, "malformed %s frame", what);
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
	return ok ? 0 : rerr(r, SS_ERR_FORMAT, r->pos, "malformed annotation frame");
}

/* Reads the plan frame at r->pos (payload of n bytes: a msgpack map
 * {"n": uint, "logdecay": bin of n*H f32}) into r->plan. */
static int read_plan(ss_reader *r, uint32_t n)
{
	if (n > SS_PLAN_MAX)
		return rerr(r, SS_ERR_FORMAT, r->pos, "plan frame of %lu bytes (at most %lu)", (unsigned long)n,
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
		return rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
	return ok ? 0 : rerr(r, SS_ERR_FORMAT, r->pos, "malformed plan frame");
}

/* Moves a pending annotation onto the record being returned. */
static void take_annotation(ss_reader *r, ss_record *rec)
{
	rec->has_rank = r->annot;
	rec->rank = r->annot_rank;
	rec->score = r->annot_score;
	rec->has_rerank = r->annot && r->annot_has_rerank;
	rec->rerank_score = r->annot_rerank;
	r->annot = 0;
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
static int frame_header(ss_reader *r, size_t *hsz, uint64_t *content, int *checksum)
{
	long long got = in_fill(r, r->pos, ZSTD_FRAMEHEADERSIZE_MAX, r->pos);
	if (got < 0)
		return rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
	if (got == 0)
		return 0;
	const unsigned char *p = r->buf + (r->pos - r->base);
	if (got < 4)
		return rerr(r, SS_ERR_TRUNCATED, r->pos, "stream truncated (%lld stray bytes)", got);
	uint32_t magic = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	if ((magic & SKIP_MAGIC_MASK) == SKIP_MAGIC) {
		if (got < 8)
			return rerr(r, SS_ERR_TRUNCATED, r->pos, "skippable frame truncated");
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
		got = in_fill(r, end - 1, 1, end - 1);
		if (got < 0)
			return rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		if (got < 1)
			return rerr(r, SS_ERR_TRUNCATED, r->pos, "skippable frame truncated (declares %lu bytes)",
				    (unsigned long)n);
		r->pos = end;
		return 2;
	}
	r->plan_seen = 1; /* a plan applies only ahead of the first record */
	if (magic != ZSTD_MAGIC)
		return rerr(r, SS_ERR_FORMAT, r->pos, "not an ss stream (no zstd frame here%s)",
			    r->pos == 0 && looks_text(p, (size_t)got) ? "; it looks like text" : "");
	ZSTD_frameHeader zfh;
	size_t rc = ZSTD_getFrameHeader(&zfh, p, (size_t)got);
	if (ZSTD_isError(rc))
		return rerr(r, SS_ERR_FORMAT, r->pos, "corrupt zstd frame header: %s", ZSTD_getErrorName(rc));
	if (rc > 0)
		return rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame header truncated");
	if (zfh.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN)
		return rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame without a declared content size "
			    "(not written by an ss tool)");
	if (zfh.frameContentSize > r->max_record || zfh.frameContentSize > SIZE_MAX / 2)
		return rerr(r, SS_ERR_TOO_LARGE, r->pos, "declared record size %llu bytes exceeds the limit of %llu (SS_MAX_RECORD)",
			    (unsigned long long)zfh.frameContentSize, (unsigned long long)r->max_record);
	if (zfh.frameContentSize == 0)
		return rerr(r, SS_ERR_FORMAT, r->pos, "empty record");
	*hsz = zfh.headerSize;
	*content = zfh.frameContentSize;
	*checksum = zfh.checksumFlag;
	return 1;
}

/* Checks that buf[0..len) is exactly one msgpack object whose every
 * declared length and count fits in the bytes that remain, so that the
 * unpacker never allocates for sizes the data cannot back. Returns 0 or -1
 * with *why set. ref: msgpack spec, formats section. */
static int msgpack_check(const unsigned char *p, size_t len, const char **why)
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

const msgpack_object *ss_map_get(const msgpack_object *map, const char *key)
{
	if (!map || map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	size_t kl = strlen(key);
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl && !memcmp(k->via.str.ptr, key, kl))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

/* Unpacks buf as the record map and checks format/version. */
static int unpack_record(ss_reader *r, uint64_t off, const void *buf, size_t len, ss_record *rec)
{
	const char *why = NULL;
	if (msgpack_check(buf, len, &why) != 0)
		return rerr(r, SS_ERR_FORMAT, off, "%s", why);
	size_t used = 0;
	msgpack_unpack_return ur = msgpack_unpack_next(&r->unp, buf, len, &used);
	if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
		return rerr(r, SS_ERR_NOMEM, off, "out of memory decoding msgpack");
	if (ur != MSGPACK_UNPACK_SUCCESS || used != len)
		return rerr(r, SS_ERR_FORMAT, off, "malformed msgpack record");
	const msgpack_object *root = &r->unp.data;
	if (root->type != MSGPACK_OBJECT_MAP)
		return rerr(r, SS_ERR_FORMAT, off, "record is not a msgpack map");
	const msgpack_object *fmt = ss_map_get(root, "format");
	const msgpack_object *ver = ss_map_get(root, "version");
	if (!fmt || fmt->type != MSGPACK_OBJECT_STR || fmt->via.str.size >= sizeof r->format)
		return rerr(r, SS_ERR_FORMAT, off, "record has no \"format\" string");
	if (!ver || ver->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return rerr(r, SS_ERR_FORMAT, off, "record has no \"version\" integer");
	memcpy(r->format, fmt->via.str.ptr, fmt->via.str.size);
	r->format[fmt->via.str.size] = 0;
	if (strcmp(r->format, SS_FORMAT_TOKENS) && strcmp(r->format, SS_FORMAT_STATES))
		return rerr(r, SS_ERR_FORMAT, off, "unknown record format \"%s\"", r->format);
	if (ver->via.u64 > SS_STREAM_VERSION)
		return rerr(r, SS_ERR_VERSION, off, "%s version %llu is newer than this build reads (%d)",
			    r->format, (unsigned long long)ver->via.u64, SS_STREAM_VERSION);
	rec->root = root;
	rec->format = r->format;
	rec->offset = off;
	rec->index = r->index;
	rec->raw = buf;
	rec->raw_len = len;
	rec->in_place = 0;
	rec->meta = 0;
	return 1;
}

void *ss_big_alloc(size_t bytes)
{
#ifdef MADV_HUGEPAGE
	const size_t huge = (size_t)2 << 20;
	if (bytes >= huge) {
		size_t cap = (bytes + huge - 1) / huge * huge;
		void *p = aligned_alloc(huge, cap);
		if (p) {
			madvise(p, cap, MADV_HUGEPAGE); /* advice: ignored where unsupported */
			return p;
		}
	}
#endif
	return malloc(bytes ? bytes : 1);
}

/* Grows *p (contents kept) to at least need bytes: a record's buffer,
 * which from 2 MiB on gets huge pages (ss_big_alloc). */
static int grow(unsigned char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	unsigned char *n = need < ((size_t)2 << 20) ? realloc(*p, need) : ss_big_alloc(need);
	if (!n)
		return SS_ERR_NOMEM;
	if (need >= ((size_t)2 << 20)) {
		if (*cap)
			memcpy(n, *p, *cap);
		free(*p);
	}
	*p = n;
	*cap = need;
	return 0;
}

static int zstd_code(size_t rc)
{
	return ZSTD_getErrorCode(rc) == ZSTD_error_checksum_wrong ? SS_ERR_CHECKSUM : SS_ERR_FORMAT;
}

/* No valid frame of `content` bytes is longer than this: readers ask for no
 * more input than that (a seek to a small record must not read IN_CHUNK). */
static uint64_t frame_bound(uint64_t content)
{
	return ZSTD_compressBound((size_t)content) + ZSTD_FRAMEHEADERSIZE_MAX + 3 * (content / 1024 + 2) + 4;
}

int ss_reader_next(ss_reader *r, const ss_record **recp)
{
	ss_record *rec = &r->rec;
	*recp = NULL;
	size_t hsz;
	uint64_t content;
	int checksum, rc;
	while ((rc = frame_header(r, &hsz, &content, &checksum)) == 2)
		;
	if (rc <= 0)
		return rc;
	/* A declared size up to TRUST_DECLARED, or one that fits the buffer
	 * an earlier record grew, gets its buffer at once and zstd writes
	 * straight into it (stable output). A larger declared size is only a
	 * claim: the buffer starts at TRUST_DECLARED and doubles as bytes
	 * actually come out, so memory follows the data, not the header (zstd
	 * then keeps its own window, at most 2^ZSTD_WINDOWLOG_LIMIT_DEFAULT
	 * bytes, and output is copied once more). Input memory stays one chunk
	 * either way. */
	int stable = content <= TRUST_DECLARED || content <= r->out_cap;
	size_t cap = stable ? (size_t)content : TRUST_DECLARED;
	if (grow(&r->out, &r->out_cap, cap) != 0)
		return rerr(r, SS_ERR_NOMEM, r->pos, "out of memory for a %zu-byte buffer", cap);
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_stableOutBuffer, stable);
	ZSTD_outBuffer ob = { r->out, cap, 0 };
	uint64_t in_off = r->pos;
	uint64_t bound = frame_bound(content);
	for (;;) {
		if (ob.pos == ob.size && ob.size < content) {
			cap = ob.size < content / 2 ? 2 * ob.size : (size_t)content;
			if (grow(&r->out, &r->out_cap, cap) != 0)
				return rerr(r, SS_ERR_NOMEM, r->pos, "out of memory after %zu of the declared %llu bytes",
					    ob.pos, (unsigned long long)content);
			ob.dst = r->out;
			ob.size = cap;
		}
		uint64_t left = bound > in_off - r->pos ? bound - (in_off - r->pos) : 1;
		long long got = in_fill(r, in_off, left < IN_CHUNK ? (size_t)left : IN_CHUNK, in_off);
		if (got < 0)
			return rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		ZSTD_inBuffer ib = { r->buf + (in_off - r->base), (size_t)got, 0 };
		size_t before = ob.pos;
		size_t zr = ZSTD_decompressStream(r->dctx, &ob, &ib);
		if (ZSTD_isError(zr))
			return rerr(r, zstd_code(zr), r->pos, "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
		in_off += ib.pos;
		if (zr == 0)
			break;
		/* At the end of input zstd may still flush what it holds. */
		if (got == 0 && ob.pos == before)
			return rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (input ends %llu bytes into it)",
				    (unsigned long long)(in_off - r->pos));
		if (ib.pos == 0 && ob.pos == ob.size && ob.size == content)
			return rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame holds more than its declared %llu bytes",
				    (unsigned long long)content);
	}
	if (ob.pos != content)
		return rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame content is %zu bytes, header says %llu",
			    ob.pos, (unsigned long long)content);
	uint64_t off = r->pos;
	rc = unpack_record(r, off, r->out, (size_t)content, rec);
	if (rc < 0)
		return rc;
	take_annotation(r, rec);
	rec->length = in_off - off;
	rec->content = content;
	r->pos = in_off;
	r->index++, r->n_read++;
	*recp = rec;
	return 1;
}

/* Scans the top-level map in buf[0..len) (possibly a prefix of the record)
 * for entries before the first "conv" or "ssm" key. Returns the byte offset
 * where that key starts and the number of entries before it, or -1 when the
 * prefix does not reach it yet (or the map has neither key: *whole = 1). */
static long long meta_prefix(const unsigned char *p, size_t len, uint32_t *n_before, size_t *hdr, int *whole,
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
			size_t j = i;
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
			i = j;
		}
	}
	*whole = 1;
	*n_before = (uint32_t)count;
	return (long long)i;
}

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

/* Decompresses q's frame on into q->ob (dst and size set by the caller),
 * keeping input from keep_from on in the window. 0 or a negative error. */
static int decode_step(ss_reader *r, prefix_t *q, uint64_t keep_from)
{
	uint64_t left = q->bound > q->in_off - q->off ? q->bound - (q->in_off - q->off) : 1;
	long long got = in_fill(r, q->in_off, left < IN_STEP ? (size_t)left : IN_STEP, keep_from);
	if (got < 0)
		return rerr(r, (int)got, q->off, "read error: %s", strerror(errno));
	ZSTD_inBuffer ib = { r->buf + (q->in_off - r->base), (size_t)got, 0 };
	size_t before = q->ob.pos;
	size_t zr = ZSTD_decompressStream(r->dctx, &q->ob, &ib);
	if (ZSTD_isError(zr))
		return rerr(r, zstd_code(zr), q->off, "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
	q->in_off += ib.pos;
	q->made += q->ob.pos - before;
	q->done = zr == 0;
	if (q->made > q->content)
		return rerr(r, SS_ERR_FORMAT, q->off, "zstd frame holds more than its declared %llu bytes",
			    (unsigned long long)q->content);
	if (!q->done && got == 0 && q->ob.pos == before)
		return rerr(r, SS_ERR_TRUNCATED, q->off, "zstd frame truncated (input ends %llu bytes into it)",
			    (unsigned long long)(q->in_off - q->off));
	return 0;
}

/* 1 with q filled, 0 at clean end of input, negative on error. stable:
 * decode in place where the record fits r->out (next_pieces). */
static int read_prefix(ss_reader *r, prefix_t *q, int stable)
{
	int rc;
	memset(q, 0, sizeof *q);
	while ((rc = frame_header(r, &q->hsz, &q->content, &q->checksum)) == 2)
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
			if (grow(&r->out, &r->out_cap, want) != 0)
				return rerr(r, SS_ERR_NOMEM, q->off, "out of memory");
			q->ob.dst = r->out;
			q->ob.size = want;
		}
		if ((rc = decode_step(r, q, q->off)) < 0) {
			/* A frame's head (ss_reader_open_head) ends early: the
			 * metadata may be whole in it all the same. */
			if (!r->head_of || rc != SS_ERR_TRUNCATED ||
			    (q->cut = meta_prefix(r->out, q->ob.pos, &q->n_before, &q->hdr, &q->whole, &q->n_entries)) < 0)
				return rc;
			break;
		}
		if (q->ob.pos < scan_at && !q->done && q->ob.pos < q->ob.size)
			continue;
		q->cut = meta_prefix(r->out, q->ob.pos, &q->n_before, &q->hdr, &q->whole, &q->n_entries);
		if (q->cut >= 0 || q->done)
			break;
		scan_at = 2 * q->ob.pos;
	}
	if (q->cut < 0)
		return rerr(r, SS_ERR_FORMAT, q->off, "malformed msgpack record");
	return 1;
}

/* Unpacks the entries before "conv"/"ssm" as a map of their own (in
 * r->meta) into r->rec. */
static int unpack_prefix(ss_reader *r, const prefix_t *q)
{
	size_t body = (size_t)q->cut - q->hdr;
	if (grow(&r->meta, &r->meta_cap, body + 5) != 0)
		return rerr(r, SS_ERR_NOMEM, q->off, "out of memory");
	r->meta[0] = 0xdf;
	r->meta[1] = (unsigned char)(q->n_before >> 24);
	r->meta[2] = (unsigned char)(q->n_before >> 16);
	r->meta[3] = (unsigned char)(q->n_before >> 8);
	r->meta[4] = (unsigned char)q->n_before;
	memcpy(r->meta + 5, r->out + q->hdr, body);
	int rc = unpack_record(r, q->off, r->meta, body + 5, &r->rec);
	r->rec.meta = !q->whole;
	return rc;
}

int ss_reader_next_meta(ss_reader *r, const ss_record **recp)
{
	*recp = NULL;
	prefix_t q;
	int rc = read_prefix(r, &q, 0);
	if (rc <= 0)
		return rc;
	/* Entries after "conv"/"ssm" other than the other array (a map in
	 * another key order than writers make): the prefix would miss them
	 * and the record would read otherwise than whole. Whole, then. */
	if (!q.whole && q.n_entries - q.n_before != 2)
		return ss_reader_next(r, recp);
	long long flen = r->head_of ? (long long)r->head_of : frame_length(r, q.hsz, q.checksum, q.content);
	if (flen < 0)
		return (int)flen;
	if ((rc = unpack_prefix(r, &q)) < 0)
		return rc;
	take_annotation(r, &r->rec);
	r->rec.length = (uint64_t)flen;
	r->rec.content = q.content;
	r->pos += (uint64_t)flen;
	r->index++, r->n_read++;
	*recp = &r->rec;
	return 1;
}

/* Pieces of next_pieces: at most this many decompressed bytes at a time,
 * so they are still in cache when the caller reads them. */
#define PIECE (128u << 10)

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
		return rerr(r, SS_ERR_FORMAT, q->off, "record ends inside its \"conv\"/\"ssm\" arrays");
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
static int bin_header(const unsigned char *b, size_t n, size_t *hl, uint64_t *len)
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

static const unsigned char piece_key[2][5] = {{0xa4, 'c', 'o', 'n', 'v'}, {0xa3, 's', 's', 'm'}};
static const size_t piece_key_len[2] = {5, 4};

/* The uncompressed frame being read in place (raw_pieces): its segments,
 * and how far its content is hashed. */
typedef struct {
	ss_reader *r;
	size_t n;         /* segments */
	size_t si;        /* the segment hash_to is in */
	uint64_t hashed;  /* content bytes [0, hashed) hashed */
	XXH64_state_t xh; /* the content's XXH64, whose low 32 bits end the frame */
} rawf_t;

/* Hashes the content on to byte `end`. */
static void hash_to(rawf_t *f, uint64_t end)
{
	while (f->hashed < end && f->si < f->n) {
		const struct raw_seg *g = &f->r->seg[f->si];
		uint64_t stop = g->at + g->len < end ? g->at + g->len : end;
		XXH64_update(&f->xh, g->p + (f->hashed - g->at), (size_t)(stop - f->hashed));
		f->hashed = stop;
		if (stop == g->at + g->len)
			f->si++;
	}
}

/* Copies content bytes [at, at + n) to dst; 0, or -1 past the content. */
static int gather(const rawf_t *f, uint64_t at, size_t n, unsigned char *dst)
{
	for (size_t i = 0; i < f->n && n; i++) {
		const struct raw_seg *g = &f->r->seg[i];
		if (at >= g->at + g->len)
			continue;
		size_t take = g->at + g->len - at < n ? (size_t)(g->at + g->len - at) : n;
		memcpy(dst, g->p + (at - g->at), take);
		dst += take, at += take, n -= take;
	}
	return n ? -1 : 0;
}

/* Hands content bytes [a0, a0 + len) (array which's body) to fn straight
 * from the map, hashing each piece just before: pieces of whole 16-byte
 * units, but where a block ends inside one (not as writers cut them) its
 * bytes go through a 16-byte buffer. */
static int raw_array(rawf_t *f, const ss_record *rec, int which, uint64_t a0, uint64_t len, ss_piece_fn fn, void *arg)
{
	unsigned char carry[16];
	size_t nc = 0;
	uint64_t done = 0;
	for (size_t i = 0; i < f->n && done < len; i++) {
		const struct raw_seg *g = &f->r->seg[i];
		uint64_t at = a0 + done + nc; /* the next byte not yet taken */
		if (at >= g->at + g->len)
			continue;
		const unsigned char *p = g->p + (at - g->at);
		uint64_t avail = g->at + g->len - at, left = len - done - nc;
		size_t n = avail < left ? (size_t)avail : (size_t)left;
		hash_to(f, at + n);
		int rc;
		while (n) {
			if (nc || n < 16) {
				size_t take = 16 - nc < n ? 16 - nc : n;
				memcpy(carry + nc, p, take);
				nc += take, p += take, n -= take;
				if (nc == 16 || done + nc == len) {
					if ((rc = fn(arg, rec, which, done, carry, nc)) != 0)
						return rc;
					done += nc;
					nc = 0;
				}
				continue;
			}
			size_t take = done + n == len ? n : n & ~(size_t)15;
			if ((rc = fn(arg, rec, which, done, p, take)) != 0)
				return rc;
			done += take, p += take, n -= take;
		}
	}
	return 0;
}

/* ss_reader_next_pieces of an uncompressed frame (raw blocks only:
 * formats/states.md "raw frames") in a regular file: the frame is mapped,
 * its metadata copied out, conv and ssm handed to fn where they lie, and
 * the frame's checksum computed over the content as it goes (XXH64, as
 * zstd's). Returns 1 as ss_reader_next_pieces, a negative error, or 3 when
 * the frame is not for this path (compressed blocks, laid out otherwise,
 * cut short, anything but what writers make): nothing is read then, and
 * zstd reads it as any other frame, with its errors. */
static int raw_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg)
{
	enum { NOT_RAW = 3 };
	size_t hsz;
	uint64_t content;
	int checksum, rc;
	while ((rc = frame_header(r, &hsz, &content, &checksum)) == 2)
		;
	if (rc <= 0 || !checksum)
		return rc <= 0 ? rc : NOT_RAW;
	long long got = in_fill(r, r->pos + hsz, 3, r->pos);
	if (got < 3 || ((r->buf[r->pos + hsz - r->base] >> 1) & 3) != 0)
		return NOT_RAW;
	struct stat st;
	if (fstat(fileno(r->f), &st) != 0 || (uint64_t)st.st_size < r->pos + hsz + 3)
		return NOT_RAW;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), m0 = r->pos / page * page;
	uint64_t end = r->pos + hsz + frame_bound(content);
	if (end > (uint64_t)st.st_size)
		end = (uint64_t)st.st_size;
	size_t mlen = (size_t)(end - m0);
	void *map = mmap(NULL, mlen, PROT_READ, MAP_SHARED | MAP_POPULATE, fileno(r->f), (off_t)m0);
	if (map == MAP_FAILED)
		return NOT_RAW;
	const unsigned char *base = (const unsigned char *)map + (r->pos - m0), *lim = (const unsigned char *)map + mlen;
	rawf_t f;
	memset(&f, 0, sizeof f);
	f.r = r;
	const unsigned char *b = base + hsz;
	uint64_t made = 0;
	rc = NOT_RAW;
	for (;;) { /* the blocks: raw, within the content and the file */
		if (lim - b < 3)
			goto out;
		uint32_t bh = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
		size_t bsize = bh >> 3;
		if (((bh >> 1) & 3) != 0 || bsize > RAW_BLOCK || (size_t)(lim - b - 3) < bsize || bsize > content - made)
			goto out;
		if (f.n == r->seg_cap) {
			size_t cap = r->seg_cap ? 2 * r->seg_cap : 256;
			struct raw_seg *sg = realloc(r->seg, cap * sizeof *sg);
			if (!sg) {
				rc = rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
				goto out;
			}
			r->seg = sg;
			r->seg_cap = cap;
		}
		if (bsize)
			r->seg[f.n++] = (struct raw_seg){made, b + 3, bsize};
		made += bsize;
		b += 3 + bsize;
		if (bh & 1)
			break;
	}
	if (made != content || lim - b < 4)
		goto out;
	/* The metadata: copied out until the entries before "conv"/"ssm"
	 * are whole (a few KiB; q8 scales, MBs at the 2.7b shape). */
	prefix_t q;
	memset(&q, 0, sizeof q);
	q.hsz = hsz, q.checksum = 1, q.content = content, q.off = r->pos;
	size_t copied = 0;
	for (size_t i = 0; i < f.n; i++) {
		if (grow(&r->out, &r->out_cap, copied + r->seg[i].len) != 0) {
			rc = rerr(r, SS_ERR_NOMEM, r->pos, "out of memory");
			goto out;
		}
		memcpy(r->out + copied, r->seg[i].p, r->seg[i].len);
		copied += r->seg[i].len;
		if ((q.cut = meta_prefix(r->out, copied, &q.n_before, &q.hdr, &q.whole, &q.n_entries)) >= 0)
			break;
	}
	if (q.cut < 0 || q.whole || q.n_entries - q.n_before != 2)
		goto out;
	/* "conv" and "ssm", bins, the last two entries */
	unsigned char h[10];
	size_t hl[2];
	uint64_t at = (uint64_t)q.cut, len[2], body[2];
	for (int which = 0; which < 2; which++) {
		size_t kl = piece_key_len[which], n = content - at < 10 ? (size_t)(content - at) : 10;
		if (gather(&f, at, n, h) || n < kl + 2 || memcmp(h, piece_key[which], kl) ||
		    bin_header(h + kl, n - kl, &hl[which], &len[which]) || len[which] > content - at - kl - hl[which])
			goto out;
		body[which] = at + kl + hl[which];
		at = body[which] + len[which];
	}
	if (at != content)
		goto out;
	if ((rc = unpack_prefix(r, &q)) < 0)
		goto out;
	ss_record *rec = &r->rec;
	take_annotation(r, rec);
	rec->in_place = 0;
	XXH64_reset(&f.xh, 0);
	if ((rc = fn(arg, rec, -1, 0, NULL, 0)) != 0) {
		rc = rerr(r, rc, q.off, "stopped by the caller");
		goto out;
	}
	for (int which = 0; which < 2; which++) {
		hash_to(&f, body[which]);
		if ((rc = raw_array(&f, rec, which, body[which], len[which], fn, arg)) != 0) {
			rc = rerr(r, rc, q.off, "stopped by the caller");
			goto out;
		}
	}
	hash_to(&f, content);
	uint32_t want = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	if ((uint32_t)XXH64_digest(&f.xh) != want) {
		rc = rerr(r, SS_ERR_CHECKSUM, q.off, "corrupt zstd frame: %s", ZSTD_getErrorName((size_t)-ZSTD_error_checksum_wrong));
		goto out;
	}
	rec->length = (uint64_t)(b + 4 - base);
	rec->content = content;
	r->pos += rec->length;
	r->index++, r->n_read++;
	*recp = rec;
	rc = 1;
out:
	munmap(map, mlen);
	return rc;
}

int ss_reader_next_pieces(ss_reader *r, const ss_record **recp, ss_piece_fn fn, void *arg)
{
	const unsigned char (*key)[5] = piece_key;
	const size_t *key_len = piece_key_len;
	*recp = NULL;
	prefix_t q;
	int rc = r->seekable ? raw_pieces(r, recp, fn, arg) : 3;
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
	if (pieces && !q.stable && grow(&r->out, &r->out_cap, PIECE) != 0)
		return rerr(r, SS_ERR_NOMEM, q.off, "out of memory");
	if (pieces && (rc = unpack_prefix(r, &q)) < 0)
		return rc;
	if (pieces && (rc = need(r, &q, &p, 10, 1)) < 0)
		return rc;
	if (!pieces || memcmp(r->out + p, key[0], 5) || bin_header(r->out + p + 5, 5, &hl, &len) ||
	    len > q.content - at - 5 - hl) {
		rc = ss_reader_next(r, recp);
		return rc == 1 ? 2 : rc;
	}
	ss_record *rec = &r->rec;
	take_annotation(r, rec);
	rec->in_place = q.stable;
	if ((rc = fn(arg, rec, -1, 0, NULL, 0)) != 0)
		return rerr(r, rc, q.off, "stopped by the caller");
	for (int which = 0; which < 2; which++) {
		if (which == 1) {
			uint64_t rest = q.content - at;
			if (rest < 6 || (rc = need(r, &q, &p, rest < 9 ? (size_t)rest : 9, 0)) < 0 ||
			    memcmp(r->out + p, key[1], 4) || bin_header(r->out + p + 4, q.ob.pos - p - 4, &hl, &len) ||
			    len != rest - 4 - hl)
				return rc < 0 ? rc : rerr(r, SS_ERR_FORMAT, q.off,
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
				return rerr(r, rc, q.off, "stopped by the caller");
			p += take;
			done += take;
		}
	}
	while (!q.done) /* the checksum, and nothing more */
		if ((rc = pump(r, &q, &p, 0)) < 0)
			return rc;
	if (q.ob.pos != p || q.made != q.content)
		return rerr(r, SS_ERR_FORMAT, q.off, "zstd frame content is %llu bytes, header says %llu",
			    (unsigned long long)q.made, (unsigned long long)q.content);
	rec->length = q.in_off - q.off;
	rec->content = q.content;
	r->pos = q.in_off;
	r->index++, r->n_read++;
	*recp = rec;
	return 1;
}

/* ================================================================ writer */

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


void ss_writer_set_shuffle(ss_writer *w, int on)
{
	w->no_shuffle = !on;
}

void ss_writer_set_min_saving(ss_writer *w, double fraction)
{
	w->min_saving = fraction > 0 ? fraction : 0; /* NaN: 0 */
}

int ss_writer_shuffles(const ss_writer *w)
{
	return !w->no_shuffle;
}

int ss_writer_set_threads(ss_writer *w, int n)
{
	ZSTD_bounds b = ZSTD_cParam_getBounds(ZSTD_c_nbWorkers);
	int workers = n > 1 ? n : 0;
	if (ZSTD_isError(b.error) || workers > b.upperBound)
		return SS_ERR_UNSUPPORTED;
	return ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_nbWorkers, workers)) ? SS_ERR_UNSUPPORTED : 0;
}

int ss_writer_open(ss_writer **out, const char *path, int level, char *errmsg)
{
	*out = NULL;
	if ((!path || !strcmp(path, "-")) && isatty(STDOUT_FILENO)) {
		ss_errf(errmsg, 0, "refusing to write a binary stream to a terminal (use -o FILE or a pipe)");
		return SS_ERR_INVALID;
	}
	ss_writer *w = calloc(1, sizeof *w);
	if (!w)
		return SS_ERR_NOMEM;
	w->cctx = ZSTD_createCCtx();
	if (!w->cctx) {
		free(w);
		return SS_ERR_NOMEM;
	}
	w->min_saving = SS_MIN_SAVING_DEFAULT;
	ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level ? level : SS_ZSTD_LEVEL_DEFAULT);
	ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
	ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1);
	int rc = ss_output_open(&w->out, path, errmsg);
	if (rc) {
		ZSTD_freeCCtx(w->cctx);
		free(w);
		return rc;
	}
	w->f = ss_output_file(w->out);
	*out = w;
	return 0;
}

static int w_write(ss_writer *w, const void *p, size_t n)
{
	if (w->failed)
		return SS_ERR_IO;
	if (n && fwrite(p, 1, n, w->f) != n) {
		w->failed = 1;
		w->saved_errno = errno;
		return SS_ERR_IO;
	}
	w->off += n;
	ss_output_written(w->out, w->off);
	return 0;
}

int ss_writer_put_frame(ss_writer *w, const void *frame, size_t len, uint64_t *offset)
{
	if (offset)
		*offset = w->off;
	return w_write(w, frame, len);
}

int ss_writer_put_file_range(ss_writer *w, int fd, uint64_t offset, uint64_t len, uint64_t *done)
{
	*done = 0;
	if (w->failed)
		return SS_ERR_IO;
	if (fflush(w->f) != 0) {
		w->failed = 1;
		w->saved_errno = errno;
		return SS_ERR_IO;
	}
	off_t at = (off_t)offset;
	while (*done < len) {
		size_t want = len - *done > (1u << 30) ? (1u << 30) : (size_t)(len - *done);
		ssize_t n = sendfile(fileno(w->f), fd, &at, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && *done == 0 && (errno == EINVAL || errno == ENOSYS)) {
			/* no sendfile between these two: through a buffer */
			unsigned char buf[1 << 16];
			while (*done < len) {
				size_t k = len - *done > sizeof buf ? sizeof buf : (size_t)(len - *done);
				ssize_t got = pread(fd, buf, k, (off_t)(offset + *done));
				if (got < 0 && errno == EINTR)
					continue;
				if (got <= 0)
					return got == 0 ? SS_ERR_TRUNCATED : SS_ERR_IO;
				int rc = w_write(w, buf, (size_t)got);
				if (rc)
					return rc;
				*done += (uint64_t)got;
			}
			return 0;
		}
		if (n == 0)
			return SS_ERR_TRUNCATED;
		if (n < 0) {
			if (errno == EIO) /* the input's */
				return SS_ERR_IO;
			w->failed = 1;
			w->saved_errno = errno;
			return SS_ERR_IO;
		}
		*done += (uint64_t)n;
		w->off += (uint64_t)n;
		ss_output_written(w->out, w->off);
	}
	return 0;
}

/* Feeds ib to the open frame: ZSTD_e_continue until all of it is taken,
 * ZSTD_e_end until the frame is complete. Output goes out through a fixed
 * chunk, so a record costs one chunk of memory beyond its input. */
static int w_compress(ss_writer *w, ZSTD_inBuffer *ib, ZSTD_EndDirective op)
{
	for (;;) {
		ZSTD_outBuffer ob = { w->cbuf, w->ccap, 0 };
		size_t left = ZSTD_compressStream2(w->cctx, &ob, ib, op);
		if (ZSTD_isError(left))
			return SS_ERR_NOMEM;
		int rc = 0;
		if (!w->capture)
			rc = w_write(w, w->cbuf, ob.pos);
		else if (ob.pos == 0) /* nothing out yet: w->cap may still be NULL */
			;
		else if (w->cap_len + ob.pos > w->cap_cap &&
			 grow(&w->cap, &w->cap_cap, w->cap_len + ob.pos > 2 * w->cap_cap ? w->cap_len + ob.pos
											   : 2 * w->cap_cap) != 0)
			rc = SS_ERR_NOMEM;
		else
			memcpy(w->cap + w->cap_len, w->cbuf, ob.pos), w->cap_len += ob.pos;
		if (rc)
			return rc;
		if (op == ZSTD_e_continue ? ib->pos == ib->size : left == 0)
			return 0;
	}
}

int ss_writer_begin(ss_writer *w, uint64_t len, uint64_t *offset)
{
	/* The pledged size puts the content size in the frame header, as
	 * readers require. */
	if (offset)
		*offset = w->off;
	if (grow(&w->cbuf, &w->ccap, ZSTD_CStreamOutSize()) != 0)
		return SS_ERR_NOMEM;
	ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_only);
	ZSTD_CCtx_setPledgedSrcSize(w->cctx, len);
	w->capture = w->raw = 0;
	return 0;
}

int ss_writer_begin_state(ss_writer *w, uint64_t len, uint64_t *offset)
{
	if (offset)
		*offset = w->off;
	if (w->min_saving > 1)
		return SS_WRITE_RAW;
	int rc = ss_writer_begin(w, len, offset);
	w->capture = !rc && w->min_saving > 0;
	w->cap_len = 0;
	w->rec_len = len;
	w->fed = 0;
	return rc;
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
	return w_write(w, h, sizeof h);
}

/* Writes the block w->blk[0..n) as a raw block (last: the frame's last). */
static int raw_block(ss_writer *w, const unsigned char *p, size_t n, int last)
{
	uint32_t bh = (uint32_t)n << 3 | (unsigned)last; /* Block_Type 0: Raw_Block */
	unsigned char h[3] = {(unsigned char)bh, (unsigned char)(bh >> 8), (unsigned char)(bh >> 16)};
	int rc = w_write(w, h, 3);
	return rc ? rc : w_write(w, p, n);
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
static int raw_add(ss_writer *w, const unsigned char *buf, size_t len)
{
	if (len > w->raw_left)
		return SS_ERR_INVALID;
	w->raw_left -= len;
	XXH64_update(&w->xh, buf, len);
	int rc = 0;
	while (len && !rc) {
		if (w->fill == RAW_BLOCK) { /* full, and more comes: not the last */
			rc = raw_block(w, w->blk, w->fill, 0);
			w->fill = 0;
			/* Empty blocks (a header each, up to 3) put the next
			 * payload at an offset 4 divides, as the one before:
			 * an array's f32 stay aligned across its blocks. */
			while (!rc && (w->off - w->raw_start + 3) % 4)
				rc = raw_block(w, w->blk, 0, 0);
		}
		size_t take = RAW_BLOCK - w->fill < len ? RAW_BLOCK - w->fill : len;
		memcpy(w->blk + w->fill, buf, take);
		w->fill += take, buf += take, len -= take;
	}
	return rc;
}

/* 1 when cap_len compressed bytes for the `fed` first bytes of the record
 * save less than the writer's min_saving. */
static int saves_too_little(const ss_writer *w, uint64_t fed)
{
	double saved = fed > w->cap_len ? (double)(fed - w->cap_len) : 0;
	return saved < w->min_saving * (double)fed;
}

int ss_writer_add(ss_writer *w, const void *buf, size_t len)
{
	if (w->raw)
		return raw_add(w, buf, len);
	if (w->capture && w->fed + len >= RAW_SAMPLE && w->rec_len > RAW_SAMPLE) {
		/* the sample whole, flushed: its compressed size decides */
		size_t take = (size_t)(RAW_SAMPLE - w->fed);
		ZSTD_inBuffer ib = { buf, take, 0 };
		int rc = w_compress(w, &ib, ZSTD_e_flush);
		if (rc)
			return rc;
		w->capture = 0;
		if (saves_too_little(w, RAW_SAMPLE))
			return SS_WRITE_RAW;
		if ((rc = w_write(w, w->cap, w->cap_len)) != 0)
			return rc;
		buf = (const unsigned char *)buf + take;
		len -= take;
	}
	w->fed += len;
	ZSTD_inBuffer ib = { buf, len, 0 };
	return len ? w_compress(w, &ib, ZSTD_e_continue) : 0;
}

int ss_writer_end(ss_writer *w)
{
	if (w->raw) {
		w->raw = 0;
		if (w->raw_left)
			return SS_ERR_INVALID;
		uint32_t x = (uint32_t)XXH64_digest(&w->xh);
		unsigned char c[4] = {(unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16),
				      (unsigned char)(x >> 24)};
		/* empty blocks make the frame's length a multiple of 4: the
		 * next raw frame starts aligned as this one did */
		int rc = 0;
		while (!rc && (w->off - w->raw_start + 3 + w->fill + 4) % 4)
			rc = raw_block(w, w->blk, 0, 0);
		if (!rc)
			rc = raw_block(w, w->blk, w->fill, 1);
		return rc ? rc : w_write(w, c, 4);
	}
	ZSTD_inBuffer ib = { NULL, 0, 0 };
	int rc = w_compress(w, &ib, ZSTD_e_end);
	if (rc || !w->capture)
		return rc;
	w->capture = 0;
	return saves_too_little(w, w->rec_len) ? SS_WRITE_RAW : w_write(w, w->cap, w->cap_len);
}

int ss_writer_put(ss_writer *w, const void *buf, size_t len, uint64_t *offset)
{
	int rc = ss_writer_begin(w, len, offset);
	ZSTD_inBuffer ib = { buf, len, 0 };
	return rc ? rc : w_compress(w, &ib, ZSTD_e_end);
}

int ss_reader_plan(ss_reader *r, size_t *n, size_t *H, const float **logdecay)
{
	size_t hsz;
	uint64_t content;
	int checksum, rc = 2;
	if (r->n_read == 0 && !r->plan_seen)
		while ((rc = frame_header(r, &hsz, &content, &checksum)) == 2 && !r->plan)
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
		rc = w_write(w, h, 8);
	if (!rc)
		rc = w_write(w, sb.data, sb.size);
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
	return w_write(w, f, 8 + n);
}

uint64_t ss_writer_tell(const ss_writer *w) { return w->off; }

int ss_writer_failed(const ss_writer *w) { return w->failed; }

int ss_writer_discards_on_abort(const ss_writer *w) { return ss_output_is_temporary(w->out); }

int ss_writer_close(ss_writer *w, char *errmsg)
{
	int rc;
	if (w->failed) {
		ss_errf(errmsg, 0, "write error: %s", strerror(w->saved_errno));
		ss_output_abort(w->out);
		rc = SS_ERR_IO;
	} else {
		rc = ss_output_commit(w->out, errmsg);
	}
	w->out = NULL;
	ss_writer_abort(w);
	return rc;
}

void ss_writer_abort(ss_writer *w)
{
	if (!w)
		return;
	ss_output_abort(w->out);
	ZSTD_freeCCtx(w->cctx);
	free(w->cbuf);
	free(w->cap);
	free(w->blk);
	free(w);
}
