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
#include "stream/stream_internal.h"

struct ss_output {
	FILE *f;
	char *path;   /* final name; NULL for stdout */
	char *tmp;    /* temporary name, or NULL when written in place */
	uint64_t wb;  /* bytes flushed and handed to the syncer */
	ss_output *next;
	/* the syncer: a thread that fdatasyncs what is written while the rest
	 * is made, so that the commit's fsync finds little left to wait for */
	pthread_t syncer;
	int has_syncer, sync_asked, sync_stop, sync_errno;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

/* Bytes between two syncs. On ext4 over virtio here an fsync costs ~0.3 ms
 * plus ~2 ms per MB written since the last one, even when that data was
 * already written and waited for with sync_file_range (8 MB: 13 ms):
 * synced a MiB at a time in another thread, the writer does not wait and
 * the commit has at most the last MiB or two left. */
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

/* Stops the syncer (waits for a sync under way); returns the errno of a
 * failed sync, 0 if none. */
static int stop_syncer(ss_output *o)
{
	if (!o->has_syncer)
		return 0;
	pthread_mutex_lock(&o->mu);
	o->sync_stop = 1;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->mu);
	pthread_join(o->syncer, NULL);
	o->has_syncer = 0;
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->cv);
	return o->sync_errno;
}

static void output_free(ss_output *o)
{
	stop_syncer(o);
	if (o->tmp)
		unlink_live(o);
	free(o->path);
	free(o->tmp);
	free(o);
}

void stream_pipe_widen(int fd)
{
#ifdef F_SETPIPE_SZ
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && fcntl(fd, F_GETPIPE_SZ) < (int)IN_CHUNK)
		(void)fcntl(fd, F_SETPIPE_SZ, (int)IN_CHUNK);
#else
	(void)fd;
#endif
}

int ss_output_open(ss_output **out, const char *path, char *errmsg)
{
	*out = NULL;
	ss_output *o = calloc(1, sizeof *o);
	if (!o)
		return SS_ERR_NOMEM;
	if (!path || !strcmp(path, "-")) {
		o->f = stdout;
		stream_pipe_widen(STDOUT_FILENO);
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

int ss_output_is_temporary(const ss_output *o) { return o->tmp != NULL; }

static void *syncer_main(void *arg)
{
	ss_output *o = arg;
	int fd = fileno(o->f);
	pthread_mutex_lock(&o->mu);
	for (;;) {
		while (!o->sync_asked && !o->sync_stop)
			pthread_cond_wait(&o->cv, &o->mu);
		if (o->sync_stop)
			break;
		o->sync_asked = 0;
		pthread_mutex_unlock(&o->mu);
		int rc = fdatasync(fd);
		int e = errno;
		pthread_mutex_lock(&o->mu);
		if (rc != 0 && !o->sync_errno)
			o->sync_errno = e; /* the commit reports it: a later fsync may not */
	}
	pthread_mutex_unlock(&o->mu);
	return NULL;
}

void ss_output_written(ss_output *o, uint64_t off)
{
	if (!o->tmp || off < o->wb + WRITEBACK_BYTES || fflush(o->f) != 0)
		return; /* a flush error stays in ferror(): commit reports it */
	o->wb = off;
	if (!o->has_syncer) {
		pthread_mutex_init(&o->mu, NULL);
		pthread_cond_init(&o->cv, NULL);
		if (pthread_create(&o->syncer, NULL, syncer_main, o) != 0) {
			pthread_mutex_destroy(&o->mu);
			pthread_cond_destroy(&o->cv);
			return; /* no thread: the commit's fsync does it all */
		}
		o->has_syncer = 1;
	}
	pthread_mutex_lock(&o->mu);
	o->sync_asked = 1;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->mu);
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
	int sync_errno = stop_syncer(o);
	if (fflush(o->f) != 0 || ferror(o->f) || (o->tmp && fsync(fileno(o->f)) != 0)) {
		ss_errf(errmsg, 0, "write error: %s", strerror(errno));
		rc = SS_ERR_IO;
	} else if (sync_errno) {
		ss_errf(errmsg, 0, "write error: %s", strerror(sync_errno));
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
	stop_syncer(o);
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
