/*
 * compose_files.c — ss_compose_run(): reading state records from files, pipes or
 * a caller's source into a composer, with the first pass that
 * picaso-s/picaso-r need for the decays, the spool file of a pipe, and the
 * output record. Threads and the writer thread are compose_threads.c's; the
 * algebra is compose.c's. See ss_compose.h for the contract.
 *
 * Memory. Modes caso, soup, sum and max make one streaming pass (caso by
 * Horner), from files or pipes alike. picaso-s and picaso-r need every
 * decay before the first state: regular files are read twice (first only
 * the record prefixes, ss_reader_next_meta, then the states); a pipe's
 * states are spooled in f32 to an unlinked temporary file in $TMPDIR during
 * the first pass and read back in the second, unless the pipe begins with a
 * plan frame (ss-retrieve query writes one: every record's decays) small
 * enough to trust (plan_trusted): then the plan stands for its first pass
 * and its records are read once, in the second, each checked against the
 * plan by the composer. Any other stream that begins with a plan frame, in
 * any mode, has its records checked against it as they are first read
 * (check_record, claim_end). A record's arrays go into the
 * accumulator piece by piece as they are decompressed (add_next), so each
 * byte is read while still in cache and no record-sized buffer is touched.
 * Either way memory holds the accumulator, a 128 KiB piece and a shuffle
 * block of f16/bf16 (a whole record with norm before), a record's metadata
 * and the decays (n_layer·nheads floats per input), whatever the number of
 * inputs.
 */
#include "ss.h"
#include "compose/internal.h"
#include "compose/compose_files.h"
#include "stream/internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Checks m (record `rec` of `path`) against the first state; records the
 * first one. Returns 0, SS_ERR_MISMATCH or SS_ERR_NOMEM with errmsg naming
 * both records. */
static int check_compat(drv_first *f, const ss_state *m, const char *path, uint64_t rec, char *errmsg)
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

/* check_compat, and m (record `recno` of `path`) against the plan frame
 * that began its stream (u->claim), if any: the record must be one the plan
 * announced, with the row's logdecay bit for bit. Returns 0 or
 * SS_ERR_MISMATCH / SS_ERR_NOMEM with u->errmsg naming the record. */
static int check_record(drv_run *u, const ss_state *m, const char *path, uint64_t recno)
{
	int rc = check_compat(&u->f, m, path, recno, u->errmsg);
	if (rc || !u->claim)
		return rc;
	size_t H = ss_state_logdecay_len(&m->dims);
	if (recno >= u->claim_n)
		return ss_errf(u->errmsg, SS_ERR_MISMATCH, "%s: record %llu follows the %zu its plan frame announced "
			       "(streams joined after a plan? compose them from files)", path,
			       (unsigned long long)recno, u->claim_n);
	if (H != u->claim_h || memcmp(m->logdecay, u->claim + recno * H, H * sizeof *u->claim) != 0)
		return ss_errf(u->errmsg, SS_ERR_MISMATCH, "%s: record %llu (id \"%s\"): logdecay differs from the "
			       "planned one (its plan frame's row %llu)", path, (unsigned long long)recno,
			       m->id ? m->id : "", (unsigned long long)recno);
	return 0;
}

/* The end of a stream after its `n` records: as many as its plan frame
 * announced (u->claim), if it had one. Returns 0 or SS_ERR_TRUNCATED. */
static int claim_end(const drv_run *u, const char *path, uint64_t n)
{
	if (!u->claim || n >= u->claim_n)
		return 0;
	return ss_errf(u->errmsg, SS_ERR_TRUNCATED, "%s: ends after %llu records, its plan frame announced %zu", path,
		       (unsigned long long)n, u->claim_n);
}

/* The plan frame at the start of r (path), as u->claim: NULL when there
 * is none. Returns 0 or the reader's error, u->errmsg set. */
static int claim_open(drv_run *u, ss_reader *r, const char *path)
{
	u->claim = NULL;
	const float *pd;
	int rc = ss_reader_plan(r, &u->claim_n, &u->claim_h, &pd);
	if (rc < 0)
		return ss_errf(u->errmsg, rc, "%s: %s", path, ss_reader_error(r));
	if (rc > 0)
		u->claim = pd;
	return 0;
}

/* Decodes a record's metadata (state records only), errmsg naming it. */
int drv_record_meta(const ss_record *rec, ss_state *m, const char *path, uint64_t recno, char *errmsg)
{
	char err[SS_ERRMSG_MAX];
	int rc = ss_record_state_meta(rec, m, err);
	if (rc)
		ss_errf(errmsg, 0, "%s: record %llu (byte offset %llu): %s", path, (unsigned long long)recno,
			(unsigned long long)ss_record_offset(rec), err);
	return rc;
}

/* Folds the input meta whole: its ssm and conv arrays in meta->dtype
 * (unshuffled), through the composer's own input. */
static int fold_whole(ss_composer *c, const ss_state *meta, const void *ssm, const void *conv, char *errmsg)
{
	const ss_dtype t = meta->dtype;
	int rc = ss_composer_begin(c, meta, errmsg);
	if (!rc &&
	    !(rc = ss_composer_fold(c, 1, 0, ssm, ss_dtype_row_size(t, ss_state_ssm_len(&meta->dims)),
				    errmsg)) &&
	    !(rc = ss_composer_fold(c, 0, 0, conv, ss_dtype_row_size(t, ss_state_conv_len(&meta->dims)),
				    errmsg)))
		rc = ss_composer_end(c, errmsg);
	return rc;
}

/* Decodes a state record and folds it whole without materialising its
 * arrays in f32, except a byte-shuffled record (f16/bf16 as writers make
 * them), decoded to f32 first. Errors as ss_record_state_view's and
 * fold_whole's. */
static int add_record(ss_composer *c, const ss_record *rec, char *errmsg)
{
	ss_state meta;
	const void *conv, *ssm;
	int rc = ss_record_state_view(rec, &meta, &conv, &ssm, errmsg);
	if (rc == SS_ERR_UNSUPPORTED) { /* byte-shuffled: through an f32 copy */
		if ((rc = ss_record_state(rec, &meta, errmsg)))
			return rc;
		meta.dtype = SS_DTYPE_F32;
		ssm = meta.ssm;
		conv = meta.conv;
	} else if (rc) {
		return rc;
	}
	meta.shuffle = 0;
	rc = fold_whole(c, &meta, ssm, conv, errmsg);
	ss_state_free(&meta);
	return rc;
}

/* Appends state s, record recno of paths[file] (rec, from its first pass):
 * its decays, and its id, n_tokens and place as the next of p->m, p->at. */
static int plan_push(drv_plan *p, const ss_state *s, size_t file, uint64_t recno, const ss_record *rec,
		     char *errmsg)
{
	if (!p->H)
		p->H = ss_state_logdecay_len(&s->dims);
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		float *d = realloc(p->decay, cap * p->H * sizeof *d);
		if (!d)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		p->decay = d;
		p->cap = cap;
	}
	if (p->n_meta == p->cap_meta) {
		size_t cap = p->cap_meta ? 2 * p->cap_meta : 64;
		struct drv_meta *m = realloc(p->m, cap * sizeof *m);
		if (m)
			p->m = m;
		struct drv_at *at = m ? realloc(p->at, cap * sizeof *at) : NULL;
		if (!at)
			return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
		p->at = at;
		p->cap_meta = cap;
	}
	memcpy(p->decay + p->n * p->H, s->logdecay, p->H * sizeof *p->decay);
	size_t j = p->n_meta;
	p->at[j] = (struct drv_at){file, recno, rec ? ss_record_offset(rec) : 0, rec ? ss_record_content_size(rec) : 0};
	p->m[j].n_tokens = s->n_tokens;
	if (!(p->m[j].id = strdup(s->id ? s->id : "")))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	p->n_meta++;
	p->n++;
	return 0;
}

static void plan_free(drv_plan *p)
{
	for (size_t j = 0; j < p->n_meta; j++)
		free(p->m[j].id);
	free(p->m);
	free(p->decay);
	free(p->at);
}

/* The result's dtype: as asked, else the inputs' when they share one,
 * else f32 (after the first state). */
ss_dtype drv_out_dtype(const drv_run *u)
{
	return u->set_dtype >= 0 ? (ss_dtype)u->set_dtype : u->f.mixed_dtype ? SS_DTYPE_F32 : u->f.dtype;
}

/* 0 when elements [e0, e1) of the result's array which (f32 at x) are
 * what its output dtype stores (ss_unstorable_find), else SS_ERR_INVALID
 * with errmsg naming the inputs, the element and why: a composition of
 * finite inputs can still overflow (sum, soup's sum before its division,
 * caso), or leave f16's range. */
int drv_check_storable(const drv_run *u, int which, const float *x, size_t e0, size_t e1, char *errmsg)
{
	ss_dtype t = drv_out_dtype(u);
	size_t bad = e0 + ss_unstorable_find(x + e0, t, e1 - e0);
	if (bad == e1)
		return 0;
	char in[160];
	int len = snprintf(in, sizeof in, "%s", u->n_paths ? u->paths[0] : "the inputs");
	for (size_t i = 1; i < u->n_paths && len < (int)sizeof in; i++)
		len += snprintf(in + len, sizeof in - (size_t)len, ", %s", u->paths[i]);
	return ss_errf(errmsg, SS_ERR_INVALID, "%s: their %s composition's %s element %zu is %g: %s",
		       in, ss_compose_mode_name(u->o.mode), which ? "ssm" : "conv", bad, (double)x[bad],
		       isfinite(x[bad]) ? (t == SS_DTYPE_F16 ? "beyond f16's range (--state-dtype f32 holds it)"
							     : "beyond bf16's range (--state-dtype f32 holds it)")
					: "it overflows f32, and state records hold finite values only");
}

void drv_progress(const drv_run *u, int pass, size_t done, size_t total)
{
	if (u->fn)
		u->fn(u->arg, pass, done, total);
}

/* The record being added in pieces (ss_reader_next_pieces). */
typedef struct {
	drv_run *u;
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
	drv_run *u = x->u;
	char err[SS_ERRMSG_MAX];
	int rc;
	if (which < 0) {
		ss_state m;
		if ((rc = drv_record_meta(meta, &m, x->path, x->recno, u->errmsg)) == 0) {
			if (!x->checked)
				rc = check_record(u, &m, x->path, x->recno);
			if (!rc && !(x->id = strdup(m.id ? m.id : "")))
				rc = ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
			if (!rc && (rc = ss_composer_begin_input(u->c, u->in, &m, err)) != 0)
				ss_errf(u->errmsg, 0, "%s: record %llu (id \"%s\"): %s", x->path,
					(unsigned long long)x->recno, x->id, err);
			ss_state_free(&m);
		}
	} else if ((rc = ss_composer_fold_input(u->c, u->in, which, off, p, len, err)) != 0) {
		ss_errf(u->errmsg, 0, "%s: record %llu (id \"%s\"): %s", x->path, (unsigned long long)x->recno,
			x->id, err);
	}
	x->failed = rc != 0;
	x->bytes += len;
	return rc;
}

/* Ends the input whose pieces x added. Returns 1 (added) or an SS_ERR_*
 * with u->errmsg set. */
static int add_pieces_end(drv_run *u, piece_t *x, const ss_record *meta)
{
	char err[SS_ERRMSG_MAX];
	int rc = ss_composer_end_input(u->c, u->in, err);
	if (rc)
		return ss_errf(u->errmsg, rc, "%s: record %llu (id \"%s\"): %s", x->path,
			       (unsigned long long)x->recno, x->id, err);
	u->bytes += ss_record_size(meta) + x->bytes;
	return 1;
}

/* Adds the whole record rec (record recno of path). Returns 1 or an
 * SS_ERR_* with u->errmsg set. */
int drv_add_whole(drv_run *u, const ss_record *rec, const char *path, uint64_t recno, int checked)
{
	ss_state m;
	int rc = drv_record_meta(rec, &m, path, recno, u->errmsg);
	if (rc == 0) {
		if (!checked)
			rc = check_record(u, &m, path, recno);
		char err[SS_ERRMSG_MAX];
		if (!rc && (rc = add_record(u->c, rec, err)) != 0)
			ss_errf(u->errmsg, 0, "%s: record %llu (id \"%s\"): %s", path, (unsigned long long)recno,
				m.id, err);
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
static int add_next(drv_run *u, ss_reader *r, const char *path, uint64_t recno, int checked)
{
	const ss_record *rec;
	piece_t x = {u, path, recno, checked, 0, NULL, 0};
	int rc = drv_pieces(u) ? ss_reader_next_pieces(r, &rec, on_piece, &x) : ss_reader_next(r, &rec);
	if (rc == 1 && drv_pieces(u))
		rc = add_pieces_end(u, &x, rec);
	else if (rc == 1 || rc == 2)
		rc = drv_add_whole(u, rec, path, recno, checked);
	else if (rc < 0 && !x.failed)
		ss_errf(u->errmsg, 0, "%s: %s", path, ss_reader_error(r));
	free(x.id);
	return rc;
}

/* One streaming pass over every file (modes without a plan). */
static int compose_stream(drv_run *u)
{
	char err[SS_ERRMSG_MAX];
	size_t done = 0;
	int rc = 0;
	for (size_t i = 0; i < u->n_paths; i++) {
		ss_reader *r;
		if ((rc = ss_reader_open(&r, u->paths[i], u->max_record, err)) != 0)
			return ss_errf(u->errmsg, rc, "%s: %s", u->paths[i], err);
		uint64_t recno = 0;
		if ((rc = claim_open(u, r, u->paths[i])) == 0)
			while ((rc = add_next(u, r, u->paths[i], recno, 0)) == 1)
				recno++, drv_progress(u, 0, ++done, 0);
		if (rc == 0)
			rc = claim_end(u, u->paths[i], recno);
		u->claim = NULL;
		ss_reader_close(r);
		if (rc < 0)
			return rc;
	}
	return done ? 0 : ss_errf(u->errmsg, SS_ERR_INVALID, "no input states");
}

/* The two passes of picaso-s/picaso-r: what the first finds, the second
 * reads. */
typedef struct {
	drv_plan plan;
	int *seekable;      /* [n_paths] */
	size_t *count;      /* [n_paths]: each file's records */
	FILE *spool;        /* a pipe's states in f32, in order; NULL: none */
	ss_reader **planned; /* [n_paths]: a pipe whose plan frame stood for pass 1, read in pass 2 */
	size_t planned_rows; /* the inputs of those before the one pass 2 is at (no plan.m of theirs) */
	ss_reader *stdin_r; /* a seekable stdin, kept open: it cannot be reopened */
	uint64_t stdin_off; /* ... and its first record's offset */
	float *sp_ssm, *sp_conv; /* a spooled state read back */
} passes_t;

/* An unlinked temporary file in $TMPDIR (else /tmp): glibc's tmpfile()
 * ignores TMPDIR. NULL with errno set on failure. */
static FILE *spool_file(void)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	if (!dir || !*dir)
		dir = "/tmp";
	if ((size_t)snprintf(path, sizeof path, "%s/ss-compose-spool.XXXXXX", dir) >= sizeof path) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	int fd = mkstemp(path);
	if (fd < 0)
		return NULL;
	unlink(path);
	FILE *f = fdopen(fd, "w+b");
	if (!f)
		close(fd);
	return f;
}

/* Appends m's ssm and conv (f32) to the spool file, made on first use. */
static int spool_put(passes_t *ps, const ss_state *m, char *errmsg)
{
	if (!ps->spool && !(ps->spool = spool_file()))
		return ss_errf(errmsg, SS_ERR_IO, "cannot create a spool file in $TMPDIR: %s", strerror(errno));
	size_t ns = ss_state_ssm_len(&m->dims), nc = ss_state_conv_len(&m->dims);
	if (fwrite(m->ssm, 4, ns, ps->spool) != ns || fwrite(m->conv, 4, nc, ps->spool) != nc)
		return ss_errf(errmsg, SS_ERR_IO, "spool file: write error: %s", strerror(errno));
	return 0;
}

/* Pass 2 of pipe i: folds its count[i] spooled states, inputs *k... */
static int spool_fold(drv_run *u, passes_t *ps, size_t i, size_t *k)
{
	const drv_first *f = &u->f;
	size_t ns = ss_state_ssm_len(&f->dims), nc = ss_state_conv_len(&f->dims);
	char err[SS_ERRMSG_MAX];
	if (!ps->sp_ssm) {
		ps->sp_ssm = malloc(ns * sizeof *ps->sp_ssm);
		ps->sp_conv = malloc(nc * sizeof *ps->sp_conv);
		if (!ps->sp_ssm || !ps->sp_conv)
			return ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
	}
	for (size_t j = 0; j < ps->count[i]; j++, (*k)++) {
		if (fread(ps->sp_ssm, 4, ns, ps->spool) != ns || fread(ps->sp_conv, 4, nc, ps->spool) != nc)
			return ss_errf(u->errmsg, SS_ERR_IO, "spool file: read error");
		ss_state v = {0};
		const struct drv_meta *pm = &ps->plan.m[*k - ps->planned_rows];
		v.id = pm->id;
		memcpy(v.fingerprint, f->fingerprint, sizeof v.fingerprint);
		v.dims = f->dims;
		v.dtype = SS_DTYPE_F32;
		v.n_tokens = pm->n_tokens;
		v.logdecay = ps->plan.decay + *k * ps->plan.H;
		int rc = fold_whole(u->c, &v, ps->sp_ssm, ps->sp_conv, err);
		if (rc)
			return ss_errf(u->errmsg, rc, "%s: record %zu (id \"%s\"): %s", u->paths[i], j, v.id, err);
		u->bytes += (ns + nc) * 4;
		drv_progress(u, 2, *k + 1, ps->plan.n);
	}
	return 0;
}

/* A pipe's plan frame stands for its first pass (no spool) when what it
 * asks for before a record can be checked stays small: at most
 * PLAN_TRUST_DECAYS decays (16 MiB of f32, copied by the driver and the
 * composer, and twice that of f64 weights), and for picaso-s, whose
 * weights take m = ceil(n/2) quadrature nodes times n inputs times H heads
 * of products plus about 16 m^2 steps of the nodes' Newton iterations, at
 * most PLAN_TRUST_WORK of those (0.6 s on a loaded 2-core VM). A larger
 * plan is checked first: its records are spooled as a plan-less pipe's,
 * each checked against its row and the count at the end (check_record,
 * claim_end), before any weight is computed, so that a forged plan of
 * 2^24 rows ahead of 5 records fails after 5 records instead of after
 * hours of weights or gigabytes of tables. */
#define PLAN_TRUST_DECAYS ((uint64_t)1 << 22)
#define PLAN_TRUST_WORK ((uint64_t)1 << 25)

static int plan_trusted(ss_compose_mode mode, size_t n, size_t H)
{
	uint64_t decays, prod, nodes, m = ((uint64_t)n + 1) / 2;
	if (ss_ckd_mul(&decays, n, H) || decays > PLAN_TRUST_DECAYS)
		return 0;
	return mode != SS_COMPOSE_PICASO_S || (!ss_ckd_mul(&prod, decays, m) && !ss_ckd_mul(&nodes, 16 * m, m) &&
					       prod <= PLAN_TRUST_WORK && nodes <= PLAN_TRUST_WORK - prod);
}

/* Appends the n rows of a plan frame (decays [n][H], checked by the
 * composer as pass 2 folds them) to p: their decays only, grown by exactly
 * their size (ids and sizes come with the records). */
static int plan_push_rows(drv_plan *p, const float *decay, size_t n, size_t H, char *errmsg)
{
	p->H = H;
	float *d = realloc(p->decay, (p->n + n) * H * sizeof *d);
	if (!d)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	p->decay = d;
	memcpy(p->decay + p->n * H, decay, n * H * sizeof *d);
	p->n += n;
	p->cap = p->n;
	return 0;
}

/* Pass 1 over file i: its records' decays into the plan (only their
 * metadata from a file that seeks; a pipe's states spooled). */
static int pass_decays(drv_run *u, passes_t *ps, size_t i)
{
	const char *path = u->paths[i];
	char err[SS_ERRMSG_MAX];
	const ss_record *rec;
	ss_reader *r;
	ss_state m;
	int rc = ss_reader_open(&r, path, u->max_record, err);
	if (rc)
		return ss_errf(u->errmsg, rc, "%s: %s", path, err);
	int seek = ps->seekable[i] = ss_reader_seekable(r);
	uint64_t recno = 0;
	if ((rc = claim_open(u, r, path)) != 0)
		goto fail;
	if (!seek && u->claim && ps->plan.H && u->claim_h != ps->plan.H) {
		rc = ss_errf(u->errmsg, SS_ERR_MISMATCH, "%s: its plan frame has %zu decays a state, the states before it %zu",
			     path, u->claim_h, ps->plan.H);
		goto fail;
	}
	if (!seek && u->claim && plan_trusted(u->o.mode, u->claim_n, u->claim_h)) {
		/* The plan's decays stand for the first pass (checked against
		 * each record by the composer when pass 2 reads it); ids and
		 * compatibility come with the records. */
		if ((rc = plan_push_rows(&ps->plan, u->claim, u->claim_n, u->claim_h, u->errmsg)) != 0)
			goto fail;
		ps->count[i] = u->claim_n;
		ps->planned[i] = r;
		u->claim = NULL;
		return 0;
	}
	while ((rc = seek ? ss_reader_next_meta(r, &rec) : ss_reader_next(r, &rec)) == 1) {
		if (recno == 0 && !strcmp(path, "-"))
			ps->stdin_off = ss_record_offset(rec);
		if (seek) {
			if ((rc = drv_record_meta(rec, &m, path, recno, u->errmsg)) != 0)
				goto fail;
		} else if ((rc = ss_record_state(rec, &m, err)) != 0) {
			ss_errf(u->errmsg, 0, "%s: record %llu (byte offset %llu): %s", path, (unsigned long long)recno,
				(unsigned long long)ss_record_offset(rec), err);
			goto fail;
		}
		if (!(rc = check_record(u, &m, path, recno)) && !seek)
			rc = spool_put(ps, &m, u->errmsg);
		if (!rc)
			rc = plan_push(&ps->plan, &m, i, recno, rec, u->errmsg);
		ss_state_free(&m);
		if (rc)
			goto fail;
		recno++;
		drv_progress(u, 1, ps->plan.n, 0);
	}
	if (rc < 0) {
		ss_errf(u->errmsg, 0, "%s: %s", path, ss_reader_error(r));
		goto fail;
	}
	if ((rc = claim_end(u, path, recno)) != 0)
		goto fail;
	u->claim = NULL;
	ps->count[i] = recno;
	if (seek && !strcmp(path, "-"))
		ps->stdin_r = r; /* cannot reopen stdin: seek back instead */
	else
		ss_reader_close(r);
	return 0;
fail:
	u->claim = NULL;
	ss_reader_close(r);
	return rc;
}

/* Pass 2 over file i (one that seeks; stdin seeks back): folds its
 * count[i] records, inputs *k... */
static int pass_states(drv_run *u, passes_t *ps, size_t i, size_t *k)
{
	const char *path = u->paths[i];
	char err[SS_ERRMSG_MAX];
	ss_reader *r;
	int rc;
	if (ps->stdin_r && !strcmp(path, "-")) {
		r = ps->stdin_r;
		ps->stdin_r = NULL;
		if ((rc = ss_reader_seek(r, ps->stdin_off)) != 0) {
			ss_errf(u->errmsg, 0, "-: %s", ss_reader_error(r));
			ss_reader_close(r);
			return rc;
		}
	} else if ((rc = ss_reader_open(&r, path, u->max_record, err)) != 0) {
		return ss_errf(u->errmsg, rc, "%s: %s", path, err);
	}
	uint64_t recno = 0;
	while (recno < ps->count[i] && (rc = add_next(u, r, path, recno, 1)) == 1) {
		recno++, (*k)++;
		drv_progress(u, 2, *k, ps->plan.n);
	}
	ss_reader_close(r);
	if (rc < 0)
		return rc;
	if (recno < ps->count[i])
		return ss_errf(u->errmsg, SS_ERR_MISMATCH, "%s: has %llu records now, %zu in the first pass (file changed?)",
			       path, (unsigned long long)recno, ps->count[i]);
	return 0;
}

/* Pass 2 of pipe i, which began with a plan frame: reads and folds the
 * count[i] records it announced, each checked as a first pass would
 * (compatibility here, its decays by the composer against the plan), then
 * expects the end of the stream. */
static int planned_fold(drv_run *u, passes_t *ps, size_t i, size_t *k)
{
	const char *path = u->paths[i];
	ss_reader *r = ps->planned[i];
	uint64_t recno = 0;
	int rc = 0;
	ps->planned_rows += ps->count[i];
	while (recno < ps->count[i] && (rc = add_next(u, r, path, recno, 0)) == 1) {
		recno++, (*k)++;
		drv_progress(u, 2, *k, ps->plan.n);
	}
	if (rc < 0)
		return rc;
	if (recno < ps->count[i])
		return ss_errf(u->errmsg, SS_ERR_TRUNCATED, "%s: ends after %llu records, its plan frame announced %zu",
			       path, (unsigned long long)recno, ps->count[i]);
	const ss_record *rec;
	if ((rc = ss_reader_next_meta(r, &rec)) < 0)
		return ss_errf(u->errmsg, rc, "%s: %s", path, ss_reader_error(r));
	if (rc > 0)
		return ss_errf(u->errmsg, SS_ERR_MISMATCH,
			       "%s: record %zu follows the %zu its plan frame announced (streams joined after a plan? "
			       "compose them from files)",
			       path, ps->count[i], ps->count[i]);
	return 0;
}

/* The two passes of picaso-s/picaso-r, and of any mode in threads: decays
 * first (a pipe's states spooled), then the states. */
static int compose_planned(drv_run *u)
{
	passes_t ps = {0};
	int rc = 0;
	ps.seekable = calloc(u->n_paths, sizeof *ps.seekable);
	ps.count = calloc(u->n_paths, sizeof *ps.count);
	ps.planned = calloc(u->n_paths, sizeof *ps.planned);
	if (!ps.seekable || !ps.count || !ps.planned)
		rc = ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !rc && i < u->n_paths; i++)
		rc = pass_decays(u, &ps, i);
	if (!rc && ps.plan.n == 0)
		rc = ss_errf(u->errmsg, SS_ERR_INVALID, "no input states");
	if (!rc && ss_compose_modes[u->o.mode].needs_plan) { /* the composer again, with the plan */
		ss_composer_free(u->c);
		rc = ss_composer_new(&u->c, &u->o, ps.plan.n, ps.plan.H, ps.plan.decay, u->errmsg);
	}
	if (!rc && u->threads > 1) {
		rc = drv_parallel(u, &ps.plan);
	} else if (!rc && ps.spool && (fflush(ps.spool) != 0 || fseek(ps.spool, 0, SEEK_SET) != 0)) {
		rc = ss_errf(u->errmsg, SS_ERR_IO, "spool file: %s", strerror(errno));
	} else {
		for (size_t i = 0, k = 0; !rc && i < u->n_paths; i++)
			rc = ps.seekable[i]  ? pass_states(u, &ps, i, &k)
			     : ps.planned[i] ? planned_fold(u, &ps, i, &k)
					     : spool_fold(u, &ps, i, &k);
	}
	for (size_t i = 0; ps.planned && i < u->n_paths; i++)
		ss_reader_close(ps.planned[i]);
	free(ps.planned);
	ss_reader_close(ps.stdin_r);
	if (ps.spool)
		fclose(ps.spool);
	free(ps.sp_ssm);
	free(ps.sp_conv);
	plan_free(&ps.plan);
	free(ps.seekable);
	free(ps.count);
	return rc;
}

/* Goes to byte offset `off` of u->paths[i] with *r, opened on first use
 * (ss_reader_goto reopens when the path changes). Returns 0 or an SS_ERR_*
 * with u->errmsg naming the file and offset. */
static int at_goto(drv_run *u, ss_reader **r, size_t i, uint64_t off)
{
	const char *path = u->paths[i];
	char err[SS_ERRMSG_MAX];
	int rc = *r ? 0 : ss_reader_open(r, path, u->max_record, err);
	if (!rc)
		rc = ss_reader_goto(*r, path, off, i, err);
	return rc ? ss_errf(u->errmsg, rc, "%s: byte offset %llu: %s", path, (unsigned long long)off, err) : 0;
}

/* rc of reading the record r is at (input i, at byte offset off of its
 * path): 1 as is, else an SS_ERR_* with u->errmsg set (none there:
 * SS_ERR_TRUNCATED; the reader's error). */
static int at_record(drv_run *u, ss_reader *r, size_t i, uint64_t off, int rc)
{
	if (rc == 0)
		return ss_errf(u->errmsg, SS_ERR_TRUNCATED, "%s: no record at byte offset %llu (file changed?)",
			       u->paths[i], (unsigned long long)off);
	if (rc < 0)
		ss_errf(u->errmsg, rc, "%s: %s", u->paths[i], ss_reader_error(r));
	return rc;
}

/* The inputs by place (ss_compose_run_opts.offsets): input i is the one
 * record at byte offset offsets[i] of paths[i] (regular files). Pass 1
 * reads each one's metadata (its decays into the plan, its compatibility
 * checked), pass 2 its arrays: in threads, each read in place
 * (drv_parallel), or in turn. Messages name input i as record i of its
 * path. */
static int compose_at(drv_run *u, const uint64_t *offsets, const uint64_t *lengths)
{
	drv_plan plan = {0};
	ss_reader *r = NULL;
	const ss_record *rec;
	int rc = u->n_paths ? 0 : ss_errf(u->errmsg, SS_ERR_INVALID, "no input states");
	for (size_t i = 0; !rc && i < u->n_paths; i++) {
		ss_state m;
		if (!(rc = at_goto(u, &r, i, offsets[i])) && lengths)
			ss_reader_expect_length(r, lengths[i]);
		if (rc || (rc = at_record(u, r, i, offsets[i], ss_reader_next_meta(r, &rec))) < 0 ||
		    (rc = drv_record_meta(rec, &m, u->paths[i], i, u->errmsg)))
			break;
		if (!(rc = check_record(u, &m, u->paths[i], i)))
			rc = plan_push(&plan, &m, i, i, rec, u->errmsg);
		ss_state_free(&m);
		drv_progress(u, 1, i + 1, u->n_paths);
	}
	if (!rc && ss_compose_modes[u->o.mode].needs_plan) { /* the composer again, with the plan */
		ss_composer_free(u->c);
		rc = ss_composer_new(&u->c, &u->o, plan.n, plan.H, plan.decay, u->errmsg);
	}
	if (!rc && u->threads > 1) {
		ss_reader_close(r); /* each thread opens its own */
		r = NULL;
		rc = drv_parallel(u, &plan);
	}
	for (size_t i = 0; !rc && u->threads <= 1 && i < u->n_paths; i++) {
		if (!(rc = at_goto(u, &r, i, offsets[i]))) {
			rc = add_next(u, r, u->paths[i], i, 1); /* its errors said */
			rc = rc == 1 ? 0 : rc == 0 ? at_record(u, r, i, offsets[i], 0) : rc;
		}
		drv_progress(u, 2, i + 1, u->n_paths);
	}
	ss_reader_close(r);
	plan_free(&plan);
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

/* The files source, composed into *out (u->c made, freed by the caller). */
static int compose_files(drv_run *u, const ss_compose_run_opts *r, ss_state *out)
{
	size_t n_stdin = 0;
	for (size_t i = 0; i < r->n_paths; i++)
		n_stdin += !strcmp(r->paths[i], "-");
	if (n_stdin > 1)
		return ss_errf(u->errmsg, SS_ERR_INVALID, "standard input ('-') given more than once");
	u->paths = r->paths;
	u->n_paths = r->n_paths;
	u->max_record = r->max_record;
	u->threads = r->threads > 1 && all_regular(r->paths, r->n_paths) ? r->threads : 1;
	if (!(u->in = ss_compose_input_new()))
		return ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
	int rc;
	if (r->offsets && !all_regular(r->paths, r->n_paths))
		rc = ss_errf(u->errmsg, SS_ERR_INVALID, "inputs by byte offset must be regular files");
	else if (r->offsets)
		rc = compose_at(u, r->offsets, r->lengths);
	else
		rc = ss_compose_modes[u->o.mode].needs_plan || u->threads > 1 ? compose_planned(u) : compose_stream(u);
	if (!rc)
		rc = ss_composer_finish(u->c, out, u->errmsg);
	return rc;
}

/* The read source: for picaso every input's metadata first (the plan),
 * then each record whole; errors "input I: ...". */
static int compose_read(drv_run *u, const ss_compose_run_opts *r, ss_state *out)
{
	char err[SS_ERRMSG_MAX];
	const ss_record *rec;
	float *dec = NULL;
	size_t H = 0;
	int rc = 0, plan = ss_compose_modes[u->o.mode].needs_plan;
	for (size_t i = 0; plan && !rc && i < r->n; i++) {
		ss_state m;
		if ((rc = r->read(r->read_arg, i, 1, &rec, err)) || (rc = ss_record_state_meta(rec, &m, err))) {
			ss_errf(u->errmsg, 0, "input %zu: %s", i, err);
			break;
		}
		size_t Hi = ss_state_logdecay_len(&m.dims);
		/* all the inputs' decays at once (r->n of them), not one more a step */
		float *d = !dec ? malloc((r->n && Hi ? r->n * Hi : 1) * sizeof *d) : Hi == H ? dec : NULL;
		if (d) {
			dec = d;
			H = Hi;
			memcpy(dec + i * H, m.logdecay, H * sizeof *dec);
		} else {
			rc = dec && Hi != H ? ss_errf(u->errmsg, SS_ERR_MISMATCH, "input %zu: dims differ from input 0", i)
					  : ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
		}
		ss_state_free(&m);
	}
	if (!rc && plan) { /* the composer again, with the plan */
		ss_composer_free(u->c);
		rc = ss_composer_new(&u->c, &u->o, r->n, H, dec, u->errmsg);
	}
	free(dec);
	for (size_t i = 0; !rc && i < r->n; i++) {
		if ((rc = r->read(r->read_arg, i, 0, &rec, err)) != 0 || (rc = add_record(u->c, rec, err)) != 0) {
			ss_errf(u->errmsg, 0, "input %zu: %s", i, err);
			break;
		}
		u->bytes += ss_record_size(rec);
		drv_progress(u, plan ? 2 : 0, i + 1, r->n);
	}
	if (!rc)
		rc = ss_composer_finish(u->c, out, u->errmsg);
	return rc;
}

/* The result's dtype and id as asked, and its record written to u->w
 * unless drv_parallel's writer did. Frees *out on error. */
static int finish_output(drv_run *u, ss_state *out, int *write_failed)
{
	out->dtype = drv_out_dtype(u);
	if (u->out_id) {
		char *id = strdup(u->out_id);
		if (!id) {
			ss_state_free(out);
			return ss_errf(u->errmsg, SS_ERR_NOMEM, "out of memory");
		}
		free(out->id);
		out->id = id;
	}
	int rc;
	if (!u->w || u->wrote || (rc = ss_writer_put_state(u->w, out, NULL)) == 0)
		return 0;
	/* The writer refuses, before a byte, a state a record cannot hold
	 * (SS_ERR_INVALID): then find the element, naming the inputs (not a
	 * failure of the output). */
	int bad;
	if (rc == SS_ERR_INVALID &&
	    ((bad = drv_check_storable(u, 0, out->conv, 0, ss_state_conv_len(&out->dims), u->errmsg)) ||
	     (bad = drv_check_storable(u, 1, out->ssm, 0, ss_state_ssm_len(&out->dims), u->errmsg)))) {
		ss_state_free(out);
		return bad;
	}
	*write_failed = 1;
	ss_state_free(out);
	return ss_errf(u->errmsg, rc, "%s", ss_strerror(rc));
}

int ss_compose_run(const ss_compose_opts *o, const ss_compose_run_opts *r, ss_compose_result *res, char *errmsg)
{
	char err[SS_ERRMSG_MAX];
	memset(res, 0, sizeof *res);
	drv_run u = {0};
	u.errmsg = errmsg ? errmsg : err;
	u.fn = r->progress;
	u.arg = r->progress_arg;
	u.w = r->w;
	u.set_dtype = r->set_dtype ? (int)r->dtype : -1;
	u.out_id = r->id;
	int rc = ss_composer_new(&u.c, o, 0, 0, NULL, u.errmsg); /* the options checked before any reading */
	if (!rc) {
		u.o = *o;
		rc = r->read ? compose_read(&u, r, &res->state) : compose_files(&u, r, &res->state);
	}
	ss_composer_free(u.c);
	ss_compose_input_free(u.in);
	free(u.f.path);
	free(u.f.id);
	res->bytes_in = u.bytes;
	res->write_failed = u.write_failed;
	if (!rc && !u.write_failed)
		rc = finish_output(&u, &res->state, &res->write_failed);
	return rc;
}
