/*
 * writer.c — writing a record stream: the writer's output, its settings,
 * a record compressed into one zstd frame (whole, or in pieces with the
 * choice of a raw frame for a state that compresses too little), frames
 * and file ranges copied as they are. Raw frames are laid out in raw.c,
 * skippable frames in frames.c. See ss_stream.h for the contract.
 * ref: RFC 8878 (zstd frames).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "stream/stream_internal.h"

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

int stream_write(ss_writer *w, const void *p, size_t n)
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
	return stream_write(w, frame, len);
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
				int rc = stream_write(w, buf, (size_t)got);
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
			rc = stream_write(w, w->cbuf, ob.pos);
		else if (ob.pos == 0) /* nothing out yet: w->cap may still be NULL */
			;
		else if (w->cap_len + ob.pos > w->cap_cap &&
			 stream_grow(&w->cap, &w->cap_cap, w->cap_len + ob.pos > 2 * w->cap_cap ? w->cap_len + ob.pos
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
	if (stream_grow(&w->cbuf, &w->ccap, ZSTD_CStreamOutSize()) != 0)
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
		return stream_raw_add(w, buf, len);
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
		if ((rc = stream_write(w, w->cap, w->cap_len)) != 0)
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
	if (w->raw)
		return stream_raw_end(w);
	ZSTD_inBuffer ib = { NULL, 0, 0 };
	int rc = w_compress(w, &ib, ZSTD_e_end);
	if (rc || !w->capture)
		return rc;
	w->capture = 0;
	return saves_too_little(w, w->rec_len) ? SS_WRITE_RAW : stream_write(w, w->cap, w->cap_len);
}

int ss_writer_put(ss_writer *w, const void *buf, size_t len, uint64_t *offset)
{
	int rc = ss_writer_begin(w, len, offset);
	ZSTD_inBuffer ib = { buf, len, 0 };
	return rc ? rc : w_compress(w, &ib, ZSTD_e_end);
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
