/*
 * output.c — output files that appear whole or not at all.
 * A named regular file is written to a temporary file beside it and renamed
 * over it on commit; anything else that already exists under the name (a
 * device such as /dev/null, a FIFO) is written in place, since renaming over
 * it would replace the device. See ss_stream.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ss.h"

struct ss_output {
	FILE *f;
	char *path;   /* final name; NULL for stdout */
	char *tmp;    /* temporary name, or NULL when written in place */
	uint64_t wb;  /* bytes whose writeback ss_output_written has started */
	ss_output *next;
};

/* Bytes between two writeback starts: large enough that the calls cost
 * nothing, small enough that the device is busy while the rest is made. */
#define WRITEBACK_BYTES (1u << 20)

/* Outputs with a temporary file, for ss_output_abort_all(). */
static ss_output *live;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static void unlink_live(ss_output *o)
{
	pthread_mutex_lock(&live_lock);
	for (ss_output **p = &live; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	pthread_mutex_unlock(&live_lock);
}

static void output_free(ss_output *o)
{
	if (o->tmp)
		unlink_live(o);
	free(o->path);
	free(o->tmp);
	free(o);
}

int ss_output_open(ss_output **out, const char *path, char *errmsg)
{
	*out = NULL;
	ss_output *o = calloc(1, sizeof *o);
	if (!o)
		return SS_ERR_NOMEM;
	if (!path || !strcmp(path, "-")) {
		o->f = stdout;
		*out = o;
		return 0;
	}
	struct stat st;
	if (!(o->path = strdup(path))) {
		free(o);
		return SS_ERR_NOMEM;
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (!(o->f = fopen(path, "wb"))) {
			ss_errf(errmsg, 0, "cannot open: %s", strerror(errno));
			output_free(o);
			return SS_ERR_IO;
		}
		*out = o;
		return 0;
	}
	size_t n = strlen(path) + 16;
	if (!(o->tmp = malloc(n))) {
		output_free(o);
		return SS_ERR_NOMEM;
	}
	snprintf(o->tmp, n, "%s.tmp.XXXXXX", path);
	int fd = mkstemp(o->tmp);
	if (fd < 0) {
		ss_errf(errmsg, 0, "cannot create %s: %s", o->tmp, strerror(errno));
		free(o->tmp);
		o->tmp = NULL;
		output_free(o);
		return SS_ERR_IO;
	}
	/* mkstemp creates 0600; give the file the mode a plain create would. */
	mode_t um = umask(0);
	umask(um);
	fchmod(fd, 0666 & ~um);
	if (!(o->f = fdopen(fd, "wb"))) {
		ss_errf(errmsg, 0, "cannot open %s: %s", o->tmp, strerror(errno));
		close(fd);
		unlink(o->tmp);
		output_free(o);
		return SS_ERR_IO;
	}
	pthread_mutex_lock(&live_lock);
	o->next = live;
	live = o;
	pthread_mutex_unlock(&live_lock);
	*out = o;
	return 0;
}

FILE *ss_output_file(const ss_output *o) { return o->f; }

void ss_output_written(ss_output *o, uint64_t off)
{
#ifdef SYNC_FILE_RANGE_WRITE
	if (!o->tmp || off < o->wb + WRITEBACK_BYTES || fflush(o->f) != 0)
		return; /* a flush error stays in ferror(): commit reports it */
	/* Only starts the writeback of what is written (no wait): the commit's
	 * fsync then waits for the last piece, not for the whole file. An
	 * error here is the fsync's to report. */
	(void)sync_file_range(fileno(o->f), (off_t)o->wb, (off_t)(off - o->wb), SYNC_FILE_RANGE_WRITE);
	o->wb = off;
#else
	(void)o;
	(void)off;
#endif
}

int ss_output_commit(ss_output *o, char *errmsg)
{
	int rc = 0;
	if (!o->path) {
		if (fflush(stdout) != 0 || ferror(stdout)) {
			ss_errf(errmsg, 0, "write error: %s", strerror(errno));
			rc = SS_ERR_IO;
		}
		output_free(o);
		return rc;
	}
	if (fflush(o->f) != 0 || ferror(o->f) || (o->tmp && fsync(fileno(o->f)) != 0)) {
		ss_errf(errmsg, 0, "write error: %s", strerror(errno));
		rc = SS_ERR_IO;
	}
	if (fclose(o->f) != 0 && rc == 0) {
		ss_errf(errmsg, 0, "write error: %s", strerror(errno));
		rc = SS_ERR_IO;
	}
	if (o->tmp) {
		if (rc == 0 && rename(o->tmp, o->path) != 0) {
			ss_errf(errmsg, 0, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
			rc = SS_ERR_IO;
		}
		if (rc != 0)
			unlink(o->tmp);
	}
	output_free(o);
	return rc;
}

void ss_output_abort(ss_output *o)
{
	if (!o)
		return;
	if (o->path)
		fclose(o->f);
	if (o->tmp)
		unlink(o->tmp);
	output_free(o);
}

void ss_output_abort_all(void)
{
	/* Also called from signal handlers: no locking, no freeing. */
	for (ss_output *o = live; o; o = o->next)
		if (o->tmp)
			unlink(o->tmp);
}
