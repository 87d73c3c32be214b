/*
 * compose_files.c — the composition driver: reading state records from files,
 * pipes or a caller's source into a composer, with the first pass that
 * picaso-s/picaso-r need for the decays. See ss_compose.h for the contract.
 *
 * Memory. Modes caso, soup, sum and max make one streaming pass (caso by
 * Horner), from files or pipes alike. picaso-s and picaso-r need every
 * decay before the first state: regular files are read twice (first only
 * the record prefixes, ss_reader_next_meta, then the states); a pipe's
 * states are spooled in f32 to an unlinked temporary file in $TMPDIR during
 * the first pass and read back in the second. A record's arrays go into the
 * accumulator piece by piece as they are decompressed (add_next), so each
 * byte is read while still in cache and no record-sized buffer is touched.
 * Either way memory holds the accumulator, a 128 KiB piece and a shuffle
 * block of f16/bf16 (a whole record with norm before), a record's metadata
 * and the decays (n_layer·nheads floats per input), whatever the number of
 * inputs.
 *
 * Threads (ss_compose_files_threads, regular files only): every mode takes
 * the first pass, to locate the records; then each thread decompresses
 * records into its own record-sized buffer (in place: no zstd window) and
 * folds their pieces as soon as the record before has folded the same
 * elements (compose_parallel): T records are read and folded at once, each
 * element still gets the records in input order, so the bits are one
 * thread's. With an output (ss_compose_files_to) a writer thread writes
 * the result a shuffle block at a time as the last record's folds finish
 * it, so the output is compressed, written and synced while the last
 * records are read. Memory: a record per thread.
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
#include "stream/internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The first state seen: every other one must match it. */
typedef struct {
	int set;
	char *path, *id;
	uint64_t rec;
	char fingerprint[SS_FINGERPRINT_MAX];
	ss_state_dims dims;
	ss_dtype dtype;
	int mixed_dtype;
} first_t;

/* Checks m (record `rec` of `path`) against the first state; records the
 * first one. Returns 0, SS_ERR_MISMATCH or SS_ERR_NOMEM with errmsg naming
 * both records. */
static int check_compat(first_t *f, const ss_state *m, const char *path, uint64_t rec, char *errmsg)
{
	if (!f->set) {
		f->set = 1;
		f->path = strdup(path);
		f->id = strdup(m->id ? m->id : "");
		if (!f->path || !f->id)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		f->rec = rec;
		memcpy(f->fingerprint, m->fingerprint, sizeof f->fingerprint);
		f->dims = m->dims;
		f->dtype = m->dtype;
		return 0;
	}
	char why[SS_ERRMSG_MAX];
	if (strcmp(f->fingerprint, m->fingerprint) != 0)
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			       "%s: record %llu (id \"%s\"): model fingerprint %s differs from %s: record %llu "
			       "(id \"%s\"): %s",
			       path, (unsigned long long)rec, m->id, m->fingerprint, f->path,
			       (unsigned long long)f->rec, f->id, f->fingerprint);
	if (ss_state_dims_check(&f->dims, &m->dims, why) != 0)
		return ss_errf(errmsg, SS_ERR_MISMATCH,
			       "%s: record %llu (id \"%s\"): dims differ from %s: record %llu (id \"%s\"): %s",
			       path, (unsigned long long)rec, m->id, f->path, (unsigned long long)f->rec, f->id,
			       why);
	if (m->dtype != f->dtype)
		f->mixed_dtype = 1;
	return 0;
}

/* Decodes a record's metadata (state records only), errmsg naming it. */
static int record_meta(const ss_record *rec, ss_state *m, const char *path, uint64_t recno, char *errmsg)
{
	char err[SS_ERRMSG_MAX];
	int rc = ss_record_state_meta(rec, m, err);
	if (rc)
		ss_errf(errmsg, 0, "%s: record %llu (byte offset %llu): %s", path, (unsigned long long)recno,
			(unsigned long long)ss_record_offset(rec), err);
	return rc;
}

static int add_record(ss_composer *c, const ss_record *rec, const char *path, uint64_t recno,
		      const char *id, char *errmsg)
{
	char err[SS_ERRMSG_MAX];
	int rc = ss_composer_add_record(c, rec, err);
	if (rc)
		ss_errf(errmsg, 0, "%s: record %llu (id \"%s\"): %s", path, (unsigned long long)recno, id, err);
	return rc;
}

/* What the first pass of a two-pass mode keeps per input state. */
typedef struct {
	int64_t n_tokens;
	char *id;
} meta_t;

typedef struct {
	size_t n, cap, H;
	float *decay; /* [n][H] */
	meta_t *m;    /* [n] */
	struct rec_at { size_t file; uint64_t recno, offset, content; } *at; /* [n]: where each record is, its size */
} plan_t;

/* Appends state s, record recno of paths[file] (rec, from its first pass). */
static int plan_push(plan_t *p, const ss_state *s, size_t file, uint64_t recno, const ss_record *rec, char *errmsg)
{
	if (!p->H)
		p->H = ss_state_logdecay_len(&s->dims);
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		float *d = realloc(p->decay, cap * p->H * sizeof *d);
		if (d)
			p->decay = d;
		meta_t *m = d ? realloc(p->m, cap * sizeof *m) : NULL;
		if (m)
			p->m = m;
		struct rec_at *at = m ? realloc(p->at, cap * sizeof *at) : NULL;
		if (!at)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		p->at = at;
		p->cap = cap;
	}
	memcpy(p->decay + p->n * p->H, s->logdecay, p->H * sizeof *p->decay);
	p->at[p->n] = (struct rec_at){file, recno, ss_record_offset(rec), ss_record_content_size(rec)};
	p->m[p->n].n_tokens = s->n_tokens;
	if (!(p->m[p->n].id = strdup(s->id ? s->id : "")))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	p->n++;
	return 0;
}

static void plan_free(plan_t *p)
{
	for (size_t j = 0; j < p->n; j++)
		free(p->m[j].id);
	free(p->m);
	free(p->decay);
	free(p->at);
}

/* One ss_compose_files() call: its arguments and what the passes share. */
typedef struct {
	ss_composer *c;
	first_t f;
	ss_compose_mode mode;
	const char *const *paths;
	size_t n_paths;
	uint64_t max_record;
	ss_compose_progress_fn fn;
	void *arg;
	uint64_t bytes;
	char *errmsg;
	int threads; /* > 1: pass 2 in parallel (compose_parallel) */
	int norm;
	/* ss_compose_files_to: the output, and what it changes of the result */
	ss_writer *w;
	int set_dtype;      /* an ss_dtype, or -1: the inputs' */
	const char *out_id; /* NULL: the composed id */
	int wrote;          /* compose_parallel wrote the result to w */
	int write_failed;   /* ... and failed there (rc is w's) */
} run_t;

/* The result's dtype: as asked, else the inputs' when they share one,
 * else f32 (after the first state). */
static ss_dtype out_dtype(const run_t *u)
{
	return u->set_dtype >= 0 ? (ss_dtype)u->set_dtype : u->f.mixed_dtype ? SS_DTYPE_F32 : u->f.dtype;
}

/* 1 when the result can be written while it is made: range by range, so
 * no norm (after needs a layer's every element, before whole records) and
 * no q8 (its scales precede the arrays). */
static int streams_out(const run_t *u)
{
	return !u->norm && out_dtype(u) != SS_DTYPE_Q8;
}

/* 0 when elements [e0, e1) of the result's array which (f32 at x) are
 * what its output dtype stores (ss_unstorable_find), else SS_ERR_INVALID
 * with errmsg naming the inputs, the element and why: a composition of
 * finite inputs can still overflow (sum, soup's sum before its division,
 * caso), or leave f16's range. */
static int check_storable(const run_t *u, int which, const float *x, size_t e0, size_t e1, char *errmsg)
{
	ss_dtype t = out_dtype(u);
	size_t bad = e0 + ss_unstorable_find(x + e0, t, e1 - e0);
	if (bad == e1)
		return 0;
	char in[160];
	int len = snprintf(in, sizeof in, "%s", u->paths[0]);
	for (size_t i = 1; i < u->n_paths && len < (int)sizeof in; i++)
		len += snprintf(in + len, sizeof in - (size_t)len, ", %s", u->paths[i]);
	return ss_errf(errmsg, SS_ERR_INVALID, "%s: their %s composition's %s element %zu is %g: %s",
		       in, ss_compose_mode_name(u->mode), which ? "ssm" : "conv", bad, (double)x[bad],
		       isfinite(x[bad]) ? (t == SS_DTYPE_F16 ? "beyond f16's range (--state-dtype f32 holds it)"
							     : "beyond bf16's range (--state-dtype f32 holds it)")
					: "it overflows f32, and state records hold finite values only");
}

static void progress(const run_t *u, int pass, size_t done, size_t total)
{
	if (u->fn)
		u->fn(u->arg, pass, done, total);
}

/* The record being added in pieces (ss_reader_next_pieces). */
typedef struct {
	run_t *u;
	const char *path;
	uint64_t recno;
	int checked; /* check_compat done by a first pass */
	int failed;  /* u->errmsg says why */
	char *id;
	uint64_t bytes;
} piece_t;

static int on_piece(void *arg, const ss_record *meta, int which, uint64_t off, const void *p, size_t len)
{
	piece_t *x = arg;
	run_t *u = x->u;
	char err[SS_ERRMSG_MAX];
	int rc;
	if (which < 0) {
		ss_state m;
		if ((rc = record_meta(meta, &m, x->path, x->recno, u->errmsg)) == 0) {
			if (!x->checked)
				rc = check_compat(&u->f, &m, x->path, x->recno, u->errmsg);
			if (!rc && !(x->id = strdup(m.id ? m.id : "")))
				rc = ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
			if (!rc && (rc = ss_composer_add_begin(u->c, &m, err)) != 0)
				ss_errf(u->errmsg, 0, "%s: record %llu (id \"%s\"): %s", x->path,
					(unsigned long long)x->recno, x->id, err);
			ss_state_free(&m);
		}
	} else if ((rc = ss_composer_add_piece(u->c, which, off, p, len, err)) != 0) {
		ss_errf(u->errmsg, 0, "%s: record %llu (id \"%s\"): %s", x->path, (unsigned long long)x->recno,
			x->id, err);
	}
	x->failed = rc != 0;
	x->bytes += len;
	return rc;
}

/* Ends the input whose pieces x added. Returns 1 (added) or an SS_ERR_*
 * with u->errmsg set. */
static int add_pieces_end(run_t *u, piece_t *x, const ss_record *meta)
{
	char err[SS_ERRMSG_MAX];
	int rc = ss_composer_add_end(u->c, err);
	if (rc)
		return ss_errf(u->errmsg, rc, "%s: record %llu (id \"%s\"): %s", x->path,
			       (unsigned long long)x->recno, x->id, err);
	u->bytes += ss_record_size(meta) + x->bytes;
	return 1;
}

/* Adds the whole record rec (record recno of path). Returns 1 or an
 * SS_ERR_* with u->errmsg set. */
static int add_whole(run_t *u, const ss_record *rec, const char *path, uint64_t recno, int checked)
{
	ss_state m;
	int rc = record_meta(rec, &m, path, recno, u->errmsg);
	if (rc == 0) {
		if (!checked)
			rc = check_compat(&u->f, &m, path, recno, u->errmsg);
		if (!rc)
			rc = add_record(u->c, rec, path, recno, m.id, u->errmsg);
		ss_state_free(&m);
	}
	if (!rc)
		u->bytes += ss_record_size(rec), rc = 1;
	return rc;
}

/* Reads record `recno` of r (at `path`) and adds it: in pieces as it is
 * decompressed where the composer allows, else whole. checked: its
 * compatibility was checked by a first pass. Returns 1 (added), 0 (end of
 * input) or an SS_ERR_* with u->errmsg set. */
static int add_next(run_t *u, ss_reader *r, const char *path, uint64_t recno, int checked)
{
	const ss_record *rec;
	piece_t x = {u, path, recno, checked, 0, NULL, 0};
	int rc = ss_composer_streams(u->c) ? ss_reader_next_pieces(r, &rec, on_piece, &x) : ss_reader_next(r, &rec);
	if (rc == 1 && ss_composer_streams(u->c))
		rc = add_pieces_end(u, &x, rec);
	else if (rc == 1 || rc == 2)
		rc = add_whole(u, rec, path, recno, checked);
	else if (rc < 0 && !x.failed)
		ss_errf(u->errmsg, 0, "%s: %s", path, ss_reader_error(r));
	free(x.id);
	return rc;
}

/* Pass 2 of compose_planned in u->threads threads: thread t reads the
 * records t, t+T, t+2T... of the plan (each whole into its reader's
 * buffer, ss_reader_reserve, a piece at a time as it is decompressed) and
 * folds each piece as soon as the record before has folded the same
 * elements: records are folded in order range by range (a wavefront), so
 * the result has the bits of one thread's, while T records are read and
 * folded at once. Records begin and end one at a time, in order, under
 * the lock. With a writer (ss_compose_files_to), one more thread writes
 * the result a shuffle block at a time as the last record's folds make it
 * final, so the output is compressed, written and synced while the last
 * records are still read. Memory: a record per thread. An error is the
 * first record's that fails, as one thread would meet it: records before
 * it go on to their end, those after it stop. */
typedef struct {
	run_t *u;
	const plan_t *plan;
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
	int rc = record_meta(meta, &m, x->path, x->recno, err);
	if (rc) {
		x->failed = 1;
		return par_fail(P, x->g, rc, err);
	}
	if (!(x->id = strdup(m.id ? m.id : ""))) {
		ss_state_free(&m);
		return job_fail(x, SS_ERR_NOMEM, "out of memory");
	}
	x->es = ss_dtype_size(m.dtype);
	x->shuf = m.shuffle > 0 && x->es > 1 ? (size_t)m.shuffle : 0;
	x->len[0] = ss_state_conv_len(&m.dims) * x->es;
	x->len[1] = ss_state_ssm_len(&m.dims) * x->es;
	x->in_place = meta->in_place;
	pthread_mutex_lock(&P->mu); /* its turn, after ss_composer_touch (which reads the count) */
	while ((P->begun != x->g || P->touched < P->T) && !par_stopped(P, x->g))
		pthread_cond_wait(&P->cv, &P->mu);
	int go = !par_stopped(P, x->g);
	if (go && (rc = ss_composer_begin(c, x->in, &m, err)) == 0)
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
	size_t e = (size_t)(end / x->es);
	if (!par_wait_prev(P, x->g, which, e))
		return job_stop(x);
	char err[SS_ERRMSG_MAX];
	int rc = ss_composer_fold(P->u->c, x->in, which, off, p, len, err);
	if (rc)
		return job_fail(x, rc, err);
	/* a shuffled array's last block, when cut, waits in the input */
	if (x->shuf && end < x->len[which])
		e = e / x->shuf * x->shuf;
	par_folded(P, x->g, which, e);
	return 0;
}

/* ss_piece_fn of compose_parallel: pieces decompressed in place are
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
	progress(P->u, 2, ++P->n_done, P->plan->n);
}

/* Ends record x->g (rec: its metadata from ss_reader_next_pieces). */
static int job_end(job_t *x, const ss_record *rec)
{
	par_t *P = x->P;
	run_t *u = P->u;
	char err[SS_ERRMSG_MAX];
	pthread_mutex_lock(&P->mu);
	int rc = ss_composer_end(u->c, x->in, err);
	if (!rc) {
		u->bytes += ss_record_size(rec) + x->bytes;
		par_ended(P, x->g);
	}
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	return rc ? job_fail(x, rc, err) : 1;
}

/* Adds record x->g whole (rec, from ss_reader_next: a norm before, or a
 * record not laid out as writers lay out states) with add_whole, when the
 * record before has ended, under the lock (the composer's own input; no
 * record before has failed, so its error is the one to report). */
static int job_whole(job_t *x, const ss_record *rec)
{
	par_t *P = x->P;
	pthread_mutex_lock(&P->mu);
	while (!par_stopped(P, x->g) &&
	       (P->touched < P->T || P->begun != x->g || (x->g > 0 && P->done[x->g - 1][1] != SIZE_MAX)))
		pthread_cond_wait(&P->cv, &P->mu);
	int rc = par_stopped(P, x->g) ? job_stop(x) : add_whole(P->u, rec, x->path, x->recno, 1);
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
	run_t *u = P->u;
	const plan_t *pl = P->plan;
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
		const struct rec_at *at = &pl->at[g];
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
		if (ss_composer_streams(u->c))
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
	int rc = end > P->checked[which] ? check_storable(P->u, which, x, P->checked[which], end, why) : 0;
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
	run_t *u = P->u;
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
	v.dtype = out_dtype(u);
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

static int compose_parallel(run_t *u, const plan_t *plan)
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

/* One streaming pass over every file (modes without a plan). */
static int compose_stream(run_t *u)
{
	char err[SS_ERRMSG_MAX];
	int rc = 0;
	for (size_t i = 0; i < u->n_paths; i++) {
		ss_reader *r;
		if ((rc = ss_reader_open(&r, u->paths[i], u->max_record, err)) != 0)
			return ss_errf(u->errmsg, rc, "%s: %s", u->paths[i], err);
		for (uint64_t recno = 0; (rc = add_next(u, r, u->paths[i], recno, 0)) == 1; recno++)
			progress(u, 0, ss_composer_count(u->c), 0);
		ss_reader_close(r);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The two passes of picaso-s/picaso-r: decays first (a pipe's states
 * spooled), then the states. */
static int compose_planned(run_t *u)
{
	ss_composer *c = u->c;
	first_t *f = &u->f;
	const char *const *paths = u->paths;
	size_t n_paths = u->n_paths;
	char *errmsg = u->errmsg;
	char err[SS_ERRMSG_MAX];
	const ss_record *rec;
	ss_state m;
	plan_t plan = {0};
	FILE *spool = NULL;
	ss_reader *r = NULL, *stdin_r = NULL;
	uint64_t stdin_off = 0;
	float *sp_ssm = NULL, *sp_conv = NULL;
	int *seekable = calloc(n_paths, sizeof *seekable);
	size_t *count = calloc(n_paths, sizeof *count);
	int rc = 0;
	if (!seekable || !count) {
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		goto out;
	}
	/* Pass 1: decays (and a pipe's states, spooled). */
	for (size_t i = 0; i < n_paths; i++) {
		if ((rc = ss_reader_open(&r, paths[i], u->max_record, err)) != 0) {
			ss_errf(errmsg, 0, "%s: %s", paths[i], err);
			r = NULL;
			goto out;
		}
		seekable[i] = ss_reader_seekable(r);
		uint64_t recno = 0;
		while ((rc = seekable[i] ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
			if (recno == 0 && !strcmp(paths[i], "-"))
				stdin_off = ss_record_offset(rec);
			if (seekable[i]) {
				if ((rc = record_meta(rec, &m, paths[i], recno, errmsg)) != 0)
					goto out;
			} else if ((rc = ss_record_state(rec, &m, err)) != 0) {
				ss_errf(errmsg, 0, "%s: record %llu (byte offset %llu): %s", paths[i],
					(unsigned long long)recno, (unsigned long long)ss_record_offset(rec), err);
				goto out;
			}
			if (!(rc = check_compat(f, &m, paths[i], recno, errmsg)) && !seekable[i]) {
				if (!spool && !(spool = tmpfile()))
					rc = ss_errf(errmsg, SS_ERR_IO, "cannot create a spool file in $TMPDIR: %s",
						     strerror(errno));
				size_t ns = ss_state_ssm_len(&m.dims), nc = ss_state_conv_len(&m.dims);
				if (!rc && (fwrite(m.ssm, 4, ns, spool) != ns || fwrite(m.conv, 4, nc, spool) != nc))
					rc = ss_errf(errmsg, SS_ERR_IO, "spool file: write error: %s", strerror(errno));
			}
			if (!rc)
				rc = plan_push(&plan, &m, i, recno, rec, errmsg);
			ss_state_free(&m);
			if (rc)
				goto out;
			recno++;
			progress(u, 1, plan.n, 0);
		}
		if (rc < 0) {
			ss_errf(errmsg, 0, "%s: %s", paths[i], ss_reader_error(r));
			goto out;
		}
		count[i] = recno;
		if (seekable[i] && !strcmp(paths[i], "-"))
			stdin_r = r; /* cannot reopen stdin: seek back instead */
		else
			ss_reader_close(r);
		r = NULL;
	}
	if (plan.n == 0) {
		rc = ss_errf(errmsg, SS_ERR_INVALID, "no input states");
		goto out;
	}
	if (ss_compose_needs_plan(u->mode) && (rc = ss_composer_plan(c, plan.n, plan.H, plan.decay, errmsg)) != 0)
		goto out;
	if (u->threads > 1) {
		rc = compose_parallel(u, &plan);
		goto out;
	}
	if (spool && (fflush(spool) != 0 || fseek(spool, 0, SEEK_SET) != 0)) {
		rc = ss_errf(errmsg, SS_ERR_IO, "spool file: %s", strerror(errno));
		goto out;
	}

	/* Pass 2: accumulate. */
	size_t k = 0, ns = ss_state_ssm_len(&f->dims), nc = ss_state_conv_len(&f->dims);
	for (size_t i = 0; i < n_paths; i++) {
		if (!seekable[i]) {
			if (!sp_ssm) {
				sp_ssm = malloc(ns * sizeof *sp_ssm);
				sp_conv = malloc(nc * sizeof *sp_conv);
				if (!sp_ssm || !sp_conv) {
					rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
					goto out;
				}
			}
			for (size_t j = 0; j < count[i]; j++, k++) {
				if (fread(sp_ssm, 4, ns, spool) != ns || fread(sp_conv, 4, nc, spool) != nc) {
					rc = ss_errf(errmsg, SS_ERR_IO, "spool file: read error");
					goto out;
				}
				ss_state v = {0};
				v.id = plan.m[k].id;
				memcpy(v.fingerprint, f->fingerprint, sizeof v.fingerprint);
				v.dims = f->dims;
				v.n_tokens = plan.m[k].n_tokens;
				v.logdecay = plan.decay + k * plan.H;
				if ((rc = ss_composer_add_arrays(c, &v, sp_ssm, sp_conv, SS_DTYPE_F32, err)) != 0) {
					ss_errf(errmsg, 0, "%s: record %zu (id \"%s\"): %s", paths[i], j, v.id, err);
					goto out;
				}
				u->bytes += (ns + nc) * 4;
				progress(u, 2, k + 1, plan.n);
			}
			continue;
		}
		if (stdin_r && !strcmp(paths[i], "-")) {
			r = stdin_r;
			stdin_r = NULL;
			if ((rc = ss_reader_seek(r, stdin_off)) != 0) {
				ss_errf(errmsg, 0, "-: %s", ss_reader_error(r));
				goto out;
			}
		} else if ((rc = ss_reader_open(&r, paths[i], u->max_record, err)) != 0) {
			ss_errf(errmsg, 0, "%s: %s", paths[i], err);
			r = NULL;
			goto out;
		}
		uint64_t recno = 0;
		while (recno < count[i] && (rc = add_next(u, r, paths[i], recno, 1)) == 1) {
			recno++, k++;
			progress(u, 2, k, plan.n);
		}
		if (rc < 0)
			goto out;
		if (recno < count[i]) {
			rc = ss_errf(errmsg, SS_ERR_MISMATCH, "%s: has %llu records now, %zu in the first pass (file changed?)",
				     paths[i], (unsigned long long)recno, count[i]);
			goto out;
		}
		ss_reader_close(r);
		r = NULL;
	}
	rc = 0;
out:
	ss_reader_close(r);
	ss_reader_close(stdin_r);
	if (spool)
		fclose(spool);
	free(sp_ssm);
	free(sp_conv);
	plan_free(&plan);
	free(seekable);
	free(count);
	return rc;
}

/* 1 when every path is a regular file (not "-"): each thread can open it. */
static int all_regular(const char *const *paths, size_t n_paths)
{
	struct stat st;
	for (size_t i = 0; i < n_paths; i++)
		if (!strcmp(paths[i], "-") || stat(paths[i], &st) != 0 || !S_ISREG(st.st_mode))
			return 0;
	return 1;
}

/* ss_compose_files_to with w NULL: the result in *out only. */
static int compose_files(const ss_compose_opts *o, int threads, const char *const *paths, size_t n_paths,
			 uint64_t max_record, ss_compose_progress_fn fn, void *arg, run_t *u, ss_state *out,
			 uint64_t *bytes_in, char *errmsg)
{
	memset(out, 0, sizeof *out);
	size_t n_stdin = 0;
	for (size_t i = 0; i < n_paths; i++)
		n_stdin += !strcmp(paths[i], "-");
	if (n_stdin > 1)
		return ss_errf(errmsg, SS_ERR_INVALID, "standard input ('-') given more than once");
	u->paths = paths;
	u->n_paths = n_paths;
	u->max_record = max_record;
	u->fn = fn;
	u->arg = arg;
	u->errmsg = errmsg;
	u->threads = 1;
	u->norm = o->norm;
	int rc = ss_composer_new(&u->c, o);
	if (rc)
		return ss_errf(errmsg, rc, "invalid composition options");
	u->mode = o->mode;
	if (threads > 1 && all_regular(paths, n_paths))
		u->threads = threads;
	rc = ss_compose_needs_plan(o->mode) || u->threads > 1 ? compose_planned(u) : compose_stream(u);
	if (!rc && ss_composer_count(u->c) == 0)
		rc = ss_errf(errmsg, SS_ERR_INVALID, "no input states");
	if (!rc)
		rc = ss_composer_finish(u->c, out, errmsg);
	if (!rc)
		out->dtype = out_dtype(u);
	ss_composer_free(u->c);
	free(u->f.path);
	free(u->f.id);
	if (bytes_in)
		*bytes_in = u->bytes;
	return rc;
}

int ss_compose_files_threads(const ss_compose_opts *o, int threads, const char *const *paths, size_t n_paths,
			     uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_state *out,
			     uint64_t *bytes_in, char *errmsg)
{
	run_t u = {0};
	u.set_dtype = -1;
	return compose_files(o, threads, paths, n_paths, max_record, fn, arg, &u, out, bytes_in, errmsg);
}

int ss_compose_files_to(const ss_compose_opts *o, int threads, const char *const *paths, size_t n_paths,
			uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_writer *w,
			const ss_compose_output *how, ss_state *out, uint64_t *bytes_in, int *write_failed,
			char *errmsg)
{
	run_t u = {0};
	u.w = w;
	u.set_dtype = how && how->set_dtype ? (int)how->dtype : -1;
	u.out_id = how ? how->id : NULL;
	*write_failed = 0;
	int rc = compose_files(o, threads, paths, n_paths, max_record, fn, arg, &u, out, bytes_in, errmsg);
	if (u.write_failed) {
		*write_failed = 1;
		return rc;
	}
	if (rc)
		return rc;
	if (u.out_id) {
		char *id = strdup(u.out_id);
		if (!id) {
			ss_state_free(out);
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		}
		free(out->id);
		out->id = id;
	}
	if (!u.wrote && (rc = ss_writer_put_state(w, out, NULL)) != 0) {
		/* The writer refuses, before a byte, a state a record cannot
		 * hold (SS_ERR_INVALID): then find the element, naming the
		 * inputs (not a failure of the output). */
		int bad;
		if (rc == SS_ERR_INVALID &&
		    ((bad = check_storable(&u, 0, out->conv, 0, ss_state_conv_len(&out->dims), errmsg)) ||
		     (bad = check_storable(&u, 1, out->ssm, 0, ss_state_ssm_len(&out->dims), errmsg)))) {
			ss_state_free(out);
			return bad;
		}
		*write_failed = 1;
		ss_state_free(out);
		return ss_errf(errmsg, rc, "%s", ss_strerror(rc));
	}
	return 0;
}

int ss_compose_files(const ss_compose_opts *o, const char *const *paths, size_t n_paths,
		     uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_state *out,
		     uint64_t *bytes_in, char *errmsg)
{
	return ss_compose_files_threads(o, 1, paths, n_paths, max_record, fn, arg, out, bytes_in, errmsg);
}

int ss_compose_records(const ss_compose_opts *o, size_t n, ss_compose_read_fn read, void *arg,
		       ss_state *out, char *errmsg)
{
	char err[SS_ERRMSG_MAX];
	memset(out, 0, sizeof *out);
	ss_composer *c;
	int rc = ss_composer_new(&c, o);
	if (rc)
		return ss_errf(errmsg, rc, "invalid composition options");
	const ss_record *rec;
	float *dec = NULL;
	if (ss_compose_needs_plan(o->mode)) {
		size_t H = 0;
		for (size_t i = 0; !rc && i < n; i++) {
			ss_state m;
			if ((rc = read(arg, i, 1, &rec, err)) || (rc = ss_record_state_meta(rec, &m, err))) {
				ss_errf(errmsg, 0, "input %zu: %s", i, err);
				break;
			}
			size_t Hi = ss_state_logdecay_len(&m.dims);
			float *d = !H || Hi == H ? realloc(dec, (i + 1) * Hi * sizeof *d) : NULL;
			if (d) {
				dec = d;
				H = Hi;
				memcpy(dec + i * H, m.logdecay, H * sizeof *dec);
			} else {
				rc = H && Hi != H ? ss_errf(errmsg, SS_ERR_MISMATCH, "input %zu: dims differ from input 0", i)
						  : ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
			}
			ss_state_free(&m);
		}
		if (!rc)
			rc = ss_composer_plan(c, n, H, dec, errmsg);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		if ((rc = read(arg, i, 0, &rec, err)) != 0) {
			ss_errf(errmsg, 0, "input %zu: %s", i, err);
			break;
		}
		if ((rc = ss_composer_add_record(c, rec, err)) != 0)
			ss_errf(errmsg, 0, "input %zu: %s", i, err);
	}
	if (!rc)
		rc = ss_composer_finish(c, out, errmsg);
	ss_composer_free(c);
	free(dec);
	return rc;
}
