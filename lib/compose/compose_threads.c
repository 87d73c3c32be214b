/*
 * compose_threads.c — the driver's threads (ss_compose_run with threads > 1,
 * regular files only) and its writer thread. After the first pass has
 * located every record (compose_files.c), each thread decompresses records into
 * its own record-sized buffer (in place: no zstd window) and folds their
 * pieces as soon as the record before has folded the same elements: T
 * records are read and folded at once, each element still gets the records
 * in input order, so the bits are one thread's. With an output, a writer
 * thread writes the result a shuffle block at a time as the last record's
 * folds finish it, so the output is compressed, written and synced while
 * the last records are read. Memory: a record per thread. The composer's
 * side of this is lib/compose/internal.h's inputs, prepare/touch and
 * result/finish_range; see ss_compose.h for the contract.
 *
 * Not all k inputs side by side (tried in issue 12, measured, dropped):
 * making the whole result a shuffle block at a time from k readers lets
 * all of the output overlap the reading, but costs k zstd windows (2.3 MB
 * each, fresh pages), zstd's copy out of them and k readers' buffers:
 * 2.0-2.3x the CPU of decompressing, against 1.6-1.7x for T readers, so
 * on 2 cores (10 130m f16 states) it was no faster end to end.
 */
#include "ss.h"
#include "compose/internal.h"
#include "compose/compose_files.h"
#include "stream/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when the result can be written while it is made: range by range, so
 * no norm (after needs a layer's every element, before whole records) and
 * no q8 (its scales precede the arrays). */
static int streams_out(const drv_run *u)
{
	return !u->o.norm && !ss_dtype_info_of(drv_out_dtype(u))->scaled; /* scales need whole arrays */
}

/* Pass 2 of the planned passes (compose_files.c) in u->threads threads: thread t reads the
 * records t, t+T, t+2T... of the plan (each whole into its reader's
 * buffer, ss_reader_reserve, a piece at a time as it is decompressed) and
 * folds each piece as soon as the record before has folded the same
 * elements: records are folded in order range by range (a wavefront), so
 * the result has the bits of one thread's, while T records are read and
 * folded at once. Records begin and end one at a time, in order, under
 * the lock. With a writer (ss_compose_run), one more thread writes
 * the result a shuffle block at a time as the last record's folds make it
 * final, so the output is compressed, written and synced while the last
 * records are still read. Memory: a record per thread. An error is the
 * first record's that fails, as one thread would meet it: records before
 * it go on to their end, those after it stop. */
typedef struct {
	drv_run *u;
	const drv_plan *plan;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int T, go;
	int touched;        /* threads done with their part of ss_composer_touch */
	size_t begun;       /* records begun, in order */
	size_t (*done)[2];  /* [n]: elements of conv, ssm each record has folded; SIZE_MAX when ended */
	size_t n_done;      /* records ended */
	size_t bad;         /* the first record that failed (n: none); u->errmsg says why, rc what */
	int rc;
	int stop;           /* the writer failed: everyone stops (rc, u->errmsg) */
	const ss_state *view; /* the writer's: the result, its arrays as they become final */
	size_t checked[2];  /* elements of conv, ssm the writer checked storable */
	int write_failed;   /* ... in the output itself (the writer's error) */
	int no_result;      /* the writer stopped for want of a result: a record that failed
			     * meanwhile (its worker's par_fail) is the error to report */
	int ready_stopped;  /* the writer gave up because a record failed */
} par_t;

typedef struct {
	par_t *P;
	int t;
} worker_t;

/* 1 when record g must stop: an earlier record (or the writer) failed. */
static int par_stopped(const par_t *P, size_t g)
{
	return P->bad < g || P->stop;
}

/* Records that record g failed (rc, the message why) unless an earlier
 * one did. Returns rc. */
static int par_fail(par_t *P, size_t g, int rc, const char *why)
{
	pthread_mutex_lock(&P->mu);
	if (g < P->bad && (!P->stop || P->no_result)) {
		P->no_result = 0;
		P->bad = g;
		P->rc = rc;
		snprintf(P->u->errmsg, SS_ERRMSG_MAX, "%s", why);
	}
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	return rc;
}

/* Waits until every thread has touched its part of the accumulator and
 * record g-1 has folded elements [0, e) of array which: 1, or 0 when g
 * must stop. */
static int par_wait_prev(par_t *P, size_t g, int which, size_t e)
{
	pthread_mutex_lock(&P->mu);
	while (!par_stopped(P, g) && (P->touched < P->T || (g > 0 && P->done[g - 1][which] < e)))
		pthread_cond_wait(&P->cv, &P->mu);
	int go = !par_stopped(P, g);
	pthread_mutex_unlock(&P->mu);
	return go;
}

/* Record g has folded elements [0, e) of array which. */
static void par_folded(par_t *P, size_t g, int which, size_t e)
{
	pthread_mutex_lock(&P->mu);
	P->done[g][which] = e;
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
}

/* Record g of the plan as its thread reads it. */
typedef struct {
	par_t *P;
	size_t g;
	const char *path;
	uint64_t recno;
	ss_compose_input *in;
	char *id;
	size_t es, shuf;              /* its dtype's size; its shuffle block (elements), 0 = none */
	size_t block, n[2];           /* its dtype's elements per es bytes (q4: 2); conv's and
					 ssm's elements */
	uint64_t len[2];              /* bytes of conv, ssm */
	int in_place;                 /* pieces stay valid: folded a unit at a time */
	const unsigned char *pend[2]; /* bytes received, not yet folded */
	uint64_t pend_off[2];
	size_t pend_len[2];
	uint64_t bytes;
	int failed; /* its error is recorded (or it stopped for an earlier one's) */
} job_t;

static int job_fail(job_t *x, int rc, const char *err)
{
	char why[SS_ERRMSG_MAX];
	ss_errf(why, 0, "%s: record %llu (id \"%s\"): %s", x->path, (unsigned long long)x->recno,
		x->id ? x->id : "", err);
	x->failed = 1;
	return par_fail(x->P, x->g, rc, why);
}

/* Stops x because an earlier record failed: no error of its own. */
static int job_stop(job_t *x)
{
	x->failed = 1;
	return SS_ERR_INVALID;
}

/* Begins record x->g from its metadata, when its turn comes. */
static int job_begin(job_t *x, const ss_record *meta)
{
	par_t *P = x->P;
	ss_composer *c = P->u->c;
	char err[SS_ERRMSG_MAX];
	ss_state m;
	int rc = drv_record_meta(meta, &m, x->path, x->recno, err);
	if (rc) {
		x->failed = 1;
		return par_fail(P, x->g, rc, err);
	}
	if (!(x->id = strdup(m.id ? m.id : ""))) {
		ss_state_free(&m);
		return job_fail(x, SS_ERR_NOMEM, "out of memory");
	}
	x->es = ss_dtype_size(m.dtype);
	x->block = ss_dtype_info_of(m.dtype)->block;
	x->shuf = m.shuffle > 0 && x->es > 1 ? (size_t)m.shuffle : 0;
	x->n[0] = ss_state_conv_len(&m.dims);
	x->n[1] = ss_state_ssm_len(&m.dims);
	x->len[0] = ss_dtype_row_size(m.dtype, x->n[0]);
	x->len[1] = ss_dtype_row_size(m.dtype, x->n[1]);
	x->in_place = meta->in_place;
	pthread_mutex_lock(&P->mu); /* its turn, after ss_composer_touch (which reads the count) */
	while ((P->begun != x->g || P->touched < P->T) && !par_stopped(P, x->g))
		pthread_cond_wait(&P->cv, &P->mu);
	int go = !par_stopped(P, x->g);
	if (go && (rc = ss_composer_begin_input(c, x->in, &m, err)) == 0)
		P->begun++;
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	ss_state_free(&m);
	if (!go)
		return job_stop(x);
	return rc ? job_fail(x, rc, err) : 0;
}

/* Folds bytes [off, off+len) of x's array which, at p, once the record
 * before has folded them. */
static int job_fold(job_t *x, int which, uint64_t off, const void *p, size_t len)
{
	par_t *P = x->P;
	uint64_t end = off + len;
	size_t e = (size_t)(end / x->es) * x->block; /* elements held by bytes [0, end) */
	if (e > x->n[which])
		e = x->n[which]; /* an odd q4 array's last byte holds one */
	if (!par_wait_prev(P, x->g, which, e))
		return job_stop(x);
	char err[SS_ERRMSG_MAX];
	int rc = ss_composer_fold_input(P->u->c, x->in, which, off, p, len, err);
	if (rc)
		return job_fail(x, rc, err);
	/* a shuffled array's last block, when cut, waits in the input */
	if (x->shuf && end < x->len[which])
		e = e / x->shuf * x->shuf;
	par_folded(P, x->g, which, e);
	return 0;
}

/* ss_piece_fn of drv_parallel: pieces decompressed in place are
 * gathered (they stay where they are) and folded a shuffle block, or
 * 64 Ki elements, at a time; others folded at once. */
static int on_par_piece(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	job_t *x = arg;
	if (which < 0)
		return job_begin(x, meta);
	x->bytes += len;
	if (!x->in_place)
		return job_fold(x, which, off, p, len);
	int rc;
	if (x->pend_len[which] && (const unsigned char *)p != x->pend[which] + x->pend_len[which]) {
		if ((rc = job_fold(x, which, x->pend_off[which], x->pend[which], x->pend_len[which])) != 0)
			return rc;
		x->pend_len[which] = 0;
	}
	if (!x->pend_len[which]) {
		x->pend[which] = p;
		x->pend_off[which] = off;
	}
	x->pend_len[which] += len;
	size_t unit = x->shuf ? x->shuf * x->es : ((size_t)1 << 16) * x->es;
	size_t take = off + len >= x->len[which] ? x->pend_len[which] : x->pend_len[which] / unit * unit;
	if (!take)
		return 0;
	if ((rc = job_fold(x, which, x->pend_off[which], x->pend[which], take)) != 0)
		return rc;
	x->pend[which] += take;
	x->pend_off[which] += take;
	x->pend_len[which] -= take;
	return 0;
}

/* Record g has ended (under the lock): every element folded. */
static void par_ended(par_t *P, size_t g)
{
	P->done[g][0] = P->done[g][1] = SIZE_MAX;
	drv_progress(P->u, 2, ++P->n_done, P->plan->n);
}

/* Ends record x->g (rec: its metadata from ss_reader_next_pieces). */
static int job_end(job_t *x, const ss_record *rec)
{
	par_t *P = x->P;
	drv_run *u = P->u;
	char err[SS_ERRMSG_MAX];
	pthread_mutex_lock(&P->mu);
	int rc = ss_composer_end_input(u->c, x->in, err);
	if (!rc) {
		u->bytes += ss_record_size(rec) + x->bytes;
		par_ended(P, x->g);
	}
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	return rc ? job_fail(x, rc, err) : 1;
}

/* Adds record x->g whole (rec, from ss_reader_next: a norm before, or a
 * record not laid out as writers lay out states) with drv_add_whole, when the
 * record before has ended, under the lock (the composer's own input; no
 * record before has failed, so its error is the one to report). */
static int job_whole(job_t *x, const ss_record *rec)
{
	par_t *P = x->P;
	pthread_mutex_lock(&P->mu);
	while (!par_stopped(P, x->g) &&
	       (P->touched < P->T || P->begun != x->g || (x->g > 0 && P->done[x->g - 1][1] != SIZE_MAX)))
		pthread_cond_wait(&P->cv, &P->mu);
	int rc = par_stopped(P, x->g) ? job_stop(x) : drv_add_whole(P->u, rec, x->path, x->recno, 1);
	if (rc == 1) {
		P->begun++;
		par_ended(P, x->g);
	} else if (!x->failed) {
		x->failed = 1;
		P->bad = x->g;
		P->rc = rc;
	}
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	return rc;
}

static void *par_worker(void *arg)
{
	worker_t *w = arg;
	par_t *P = w->P;
	drv_run *u = P->u;
	const drv_plan *pl = P->plan;
	char err[SS_ERRMSG_MAX], why[SS_ERRMSG_MAX];
	ss_reader *r = NULL;
	ss_compose_input *in = ss_compose_input_new();
	pthread_mutex_lock(&P->mu);
	while (!P->go)
		pthread_cond_wait(&P->cv, &P->mu);
	pthread_mutex_unlock(&P->mu);
	/* the accumulator's page faults (tens of ms for a 130m state) shared
	 * by all threads, not left to the first fold, which all others wait for */
	ss_composer_touch(u->c, (size_t)w->t, (size_t)P->T);
	pthread_mutex_lock(&P->mu);
	P->touched++;
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	uint64_t biggest = 0; /* its records' declared sizes: bounded by max_record */
	for (size_t g = (size_t)w->t; g < pl->n; g += (size_t)P->T)
		if (pl->at[g].content > biggest)
			biggest = pl->at[g].content;
	for (size_t g = (size_t)w->t; g < pl->n; g += (size_t)P->T) {
		const struct drv_at *at = &pl->at[g];
		const char *path = u->paths[at->file];
		const ss_record *rec = NULL;
		job_t x = {.P = P, .g = g, .path = path, .recno = at->recno, .in = in};
		int rc = 0;
		pthread_mutex_lock(&P->mu);
		int stop = par_stopped(P, g);
		pthread_mutex_unlock(&P->mu);
		if (stop)
			break;
		if (!in)
			rc = ss_errf(err, SS_ERR_NOMEM, "out of memory");
		else if (!r && (rc = ss_reader_open(&r, path, u->max_record, err)) == 0 &&
			 (rc = ss_reader_reserve(r, biggest)) != 0)
			ss_errf(err, 0, "out of memory");
		if (!rc)
			rc = ss_reader_goto(r, path, at->offset, at->recno, err);
		if (rc) {
			ss_errf(why, 0, "%s: %s", path, err);
			par_fail(P, g, rc, why);
			break;
		}
		if (drv_pieces(u))
			rc = ss_reader_next_pieces(r, &rec, on_par_piece, &x);
		else if ((rc = ss_reader_next(r, &rec)) == 1)
			rc = 2;
		if (rc == 1)
			rc = job_end(&x, rec);
		else if (rc == 2)
			rc = job_whole(&x, rec);
		else if (rc == 0) {
			ss_errf(why, 0, "%s: record %llu is gone since the first pass (file changed?)", path,
				(unsigned long long)at->recno);
			rc = par_fail(P, g, SS_ERR_MISMATCH, why);
		} else if (!x.failed) {
			ss_errf(why, 0, "%s: %s", path, ss_reader_error(r));
			par_fail(P, g, rc, why);
		}
		free(x.id);
		if (rc < 0)
			break;
	}
	ss_reader_close(r);
	ss_compose_input_free(in);
	return NULL;
}

/* ss_ready_fn of the writer: waits until the last record has folded
 * elements [0, end) of array which, then finishes them. */
static int par_ready(void *arg, int which, size_t end)
{
	par_t *P = arg;
	size_t n = P->plan->n;
	pthread_mutex_lock(&P->mu);
	while (!par_stopped(P, n) && P->done[n - 1][which] < end)
		pthread_cond_wait(&P->cv, &P->mu);
	int go = !par_stopped(P, n);
	pthread_mutex_unlock(&P->mu);
	if (!go) {
		P->ready_stopped = 1;
		return SS_ERR_INVALID;
	}
	ss_composer_finish_range(P->u->c, which, end);
	const float *x = which ? P->view->ssm : P->view->conv;
	char why[SS_ERRMSG_MAX];
	int rc = end > P->checked[which] ? drv_check_storable(P->u, which, x, P->checked[which], end, why) : 0;
	if (rc) { /* said here, as no record failed: the result itself */
		pthread_mutex_lock(&P->mu);
		if (!P->stop && P->bad == n) {
			P->stop = 1;
			P->rc = rc;
			snprintf(P->u->errmsg, SS_ERRMSG_MAX, "%s", why);
		}
		pthread_cond_broadcast(&P->cv);
		pthread_mutex_unlock(&P->mu);
		P->ready_stopped = 1;
		return rc;
	}
	P->checked[which] = end;
	return 0;
}

/* The writer: once every record has begun, the result's metadata, then
 * the record, its arrays as they become final (par_ready). */
static void *par_writer(void *arg)
{
	par_t *P = arg;
	drv_run *u = P->u;
	size_t n = P->plan->n;
	char err[SS_ERRMSG_MAX];
	ss_state v;
	pthread_mutex_lock(&P->mu);
	while (!par_stopped(P, n) && P->begun < n)
		pthread_cond_wait(&P->cv, &P->mu);
	int stopped = par_stopped(P, n), rc = 0;
	if (!stopped && (rc = ss_composer_result(u->c, &v, err)) != 0) {
		P->stop = 1;
		P->no_result = 1;
		P->rc = rc;
		snprintf(u->errmsg, SS_ERRMSG_MAX, "%s", err);
		pthread_cond_broadcast(&P->cv);
	}
	pthread_mutex_unlock(&P->mu);
	if (stopped || rc)
		return NULL;
	v.dtype = drv_out_dtype(u);
	if (u->out_id)
		v.id = (char *)u->out_id;
	P->view = &v;
	rc = ss_writer_put_state_when(u->w, &v, NULL, par_ready, P);
	if (rc && !P->ready_stopped) {
		pthread_mutex_lock(&P->mu);
		if (!P->stop && P->bad == n) {
			P->stop = 1;
			P->rc = rc;
			P->write_failed = 1;
			snprintf(u->errmsg, SS_ERRMSG_MAX, "%s", ss_strerror(rc));
		}
		pthread_cond_broadcast(&P->cv);
		pthread_mutex_unlock(&P->mu);
	}
	return NULL;
}

int drv_parallel(drv_run *u, const drv_plan *plan)
{
	par_t P = {.u = u, .plan = plan, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .T = 1,
		   .bad = plan->n};
	ss_state first = {0}; /* the accumulator now, so that the threads fault it in together */
	first.dims = u->f.dims;
	memcpy(first.fingerprint, u->f.fingerprint, sizeof first.fingerprint);
	int rc = ss_composer_prepare(u->c, &first, u->errmsg);
	if (rc)
		return rc;
	if (!(P.done = calloc(plan->n, sizeof *P.done)))
		return ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
	enum { MAX_THREADS = 64 };
	pthread_t tid[MAX_THREADS], wtid;
	worker_t w[MAX_THREADS];
	int want = u->threads < MAX_THREADS ? u->threads : MAX_THREADS;
	if ((size_t)want > plan->n)
		want = (int)plan->n;
	for (int t = 0; t < want; t++)
		w[t] = (worker_t){&P, t};
	while (P.T < want && pthread_create(&tid[P.T], NULL, par_worker, &w[P.T]) == 0)
		P.T++; /* as many as start: the records are dealt among those */
	/* the writer, where the result can be written as it is made */
	int writer = u->w && streams_out(u) && pthread_create(&wtid, NULL, par_writer, &P) == 0;
	pthread_mutex_lock(&P.mu);
	P.go = 1;
	pthread_cond_broadcast(&P.cv);
	pthread_mutex_unlock(&P.mu);
	par_worker(&w[0]);
	for (int t = 1; t < P.T; t++)
		pthread_join(tid[t], NULL);
	if (writer)
		pthread_join(wtid, NULL);
	pthread_mutex_destroy(&P.mu);
	pthread_cond_destroy(&P.cv);
	free(P.done);
	u->wrote = writer && !P.rc;
	u->write_failed = P.write_failed;
	return P.rc;
}
