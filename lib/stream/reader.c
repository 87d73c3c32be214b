/*
 * reader.c — reading a record stream: opening a file, a descriptor or
 * standard input, the input window over it, a record read whole
 * (ss_reader_next) and the msgpack map it holds; the reader's and the
 * record's accessors. Frames are parsed in frames.c, records read in parts
 * in pieces.c and raw.c. See ss_stream.h for the contract and
 * formats/{tokens,states}.md for the schemas.
 * ref: RFC 8878 (zstd frames), msgpack spec.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/stream_internal.h"

int stream_rerr(ss_reader *r, int code, uint64_t off, const char *fmt, ...)
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
		stream_pipe_widen(STDIN_FILENO);
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
	free(r->raw_buf);
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
long long stream_in_fill(ss_reader *r, uint64_t off, size_t need, uint64_t keep_from)
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
	r->expect_len = 0;
	return 0;
}

void ss_reader_expect_length(ss_reader *r, uint64_t length)
{
	r->expect_len = r->seekable ? length : 0;
}

int ss_reader_reserve(ss_reader *r, uint64_t bytes)
{
	if (bytes > r->max_record || bytes > SIZE_MAX / 2)
		return SS_ERR_TOO_LARGE;
	return stream_grow(&r->out, &r->out_cap, (size_t)bytes);
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
int stream_unpack_record(ss_reader *r, uint64_t off, const void *buf, size_t len, ss_record *rec)
{
	const char *why = NULL;
	if (stream_msgpack_check(buf, len, &why) != 0)
		return stream_rerr(r, SS_ERR_FORMAT, off, "%s", why);
	size_t used = 0;
	msgpack_unpack_return ur = msgpack_unpack_next(&r->unp, buf, len, &used);
	if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
		return stream_rerr(r, SS_ERR_NOMEM, off, "out of memory decoding msgpack");
	if (ur != MSGPACK_UNPACK_SUCCESS || used != len)
		return stream_rerr(r, SS_ERR_FORMAT, off, "malformed msgpack record");
	const msgpack_object *root = &r->unp.data;
	if (root->type != MSGPACK_OBJECT_MAP)
		return stream_rerr(r, SS_ERR_FORMAT, off, "record is not a msgpack map");
	const msgpack_object *fmt = ss_map_get(root, "format");
	const msgpack_object *ver = ss_map_get(root, "version");
	if (!fmt || fmt->type != MSGPACK_OBJECT_STR || fmt->via.str.size >= sizeof r->format)
		return stream_rerr(r, SS_ERR_FORMAT, off, "record has no \"format\" string");
	if (!ver || ver->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return stream_rerr(r, SS_ERR_FORMAT, off, "record has no \"version\" integer");
	memcpy(r->format, fmt->via.str.ptr, fmt->via.str.size);
	r->format[fmt->via.str.size] = 0;
	if (strcmp(r->format, SS_FORMAT_TOKENS) && strcmp(r->format, SS_FORMAT_STATES))
		return stream_rerr(r, SS_ERR_FORMAT, off, "unknown record format \"%s\"", r->format);
	if (ver->via.u64 > SS_STREAM_VERSION)
		return stream_rerr(r, SS_ERR_VERSION, off, "%s version %llu is newer than this build reads (%d)",
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
int stream_grow(unsigned char **p, size_t *cap, size_t need)
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

int ss_reader_next(ss_reader *r, const ss_record **recp)
{
	ss_record *rec = &r->rec;
	*recp = NULL;
	r->expect_len = 0;
	size_t hsz;
	uint64_t content;
	int checksum, rc;
	while ((rc = stream_frame_header(r, &hsz, &content, &checksum)) == 2)
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
	if (stream_grow(&r->out, &r->out_cap, cap) != 0)
		return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory for a %zu-byte buffer", cap);
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_stableOutBuffer, stable);
	ZSTD_outBuffer ob = { r->out, cap, 0 };
	uint64_t in_off = r->pos;
	uint64_t bound = frame_bound(content);
	for (;;) {
		if (ob.pos == ob.size && ob.size < content) {
			cap = ob.size < content / 2 ? 2 * ob.size : (size_t)content;
			if (stream_grow(&r->out, &r->out_cap, cap) != 0)
				return stream_rerr(r, SS_ERR_NOMEM, r->pos, "out of memory after %zu of the declared %llu bytes",
					    ob.pos, (unsigned long long)content);
			ob.dst = r->out;
			ob.size = cap;
		}
		uint64_t left = bound > in_off - r->pos ? bound - (in_off - r->pos) : 1;
		long long got = stream_in_fill(r, in_off, left < IN_CHUNK ? (size_t)left : IN_CHUNK, in_off);
		if (got < 0)
			return stream_rerr(r, (int)got, r->pos, "read error: %s", strerror(errno));
		ZSTD_inBuffer ib = { r->buf + (in_off - r->base), (size_t)got, 0 };
		size_t before = ob.pos;
		size_t zr = ZSTD_decompressStream(r->dctx, &ob, &ib);
		if (ZSTD_isError(zr))
			return stream_rerr(r, zstd_code(zr), r->pos, "corrupt zstd frame: %s", ZSTD_getErrorName(zr));
		in_off += ib.pos;
		if (zr == 0)
			break;
		/* At the end of input zstd may still flush what it holds. */
		if (got == 0 && ob.pos == before)
			return stream_rerr(r, SS_ERR_TRUNCATED, r->pos, "zstd frame truncated (input ends %llu bytes into it)",
				    (unsigned long long)(in_off - r->pos));
		if (ib.pos == 0 && ob.pos == ob.size && ob.size == content)
			return stream_rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame holds more than its declared %llu bytes",
				    (unsigned long long)content);
	}
	if (ob.pos != content)
		return stream_rerr(r, SS_ERR_FORMAT, r->pos, "zstd frame content is %zu bytes, header says %llu",
			    ob.pos, (unsigned long long)content);
	uint64_t off = r->pos;
	rc = stream_unpack_record(r, off, r->out, (size_t)content, rec);
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
