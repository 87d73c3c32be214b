/*
 * lib/compose/compose_files.h — INTERNAL to libss (lib/compose/compose_files.c,
 * lib/compose/compose_threads.c): one ss_compose_run() call as its passes share it,
 * between the one-thread driver (compose_files.c: the passes, the spool file, the
 * output) and its threads and writer thread (compose_threads.c).
 */
#ifndef SS_COMPOSE_FILES_H
#define SS_COMPOSE_FILES_H

#include "ss.h"
#include "compose/internal.h"

/* The first state seen: every other one must match it. */
typedef struct {
	int set;
	char *path, *id;
	uint64_t rec;
	char fingerprint[SS_FINGERPRINT_MAX];
	ss_state_dims dims;
	ss_dtype dtype;
	int mixed_dtype;
} drv_first;

/* What the first pass keeps per input state: n of them. */
typedef struct {
	size_t n, cap, H;
	float *decay; /* [n][H]: every input's, in order */
	/* The inputs whose records a first pass read (all but the rows of a
	 * pipe's plan frame, which has only decays), in order: n_meta of them
	 * (n_meta == n when no plan frame stood for a pass). */
	size_t n_meta, cap_meta;
	struct drv_meta { int64_t n_tokens; char *id; } *m; /* [n_meta] */
	struct drv_at { size_t file; uint64_t recno, offset, content; } *at; /* [n_meta]: where each record is, its size */
} drv_plan;

/* One ss_compose_run() call: its arguments and what the passes share. */
typedef struct {
	ss_composer *c;
	drv_first f;
	ss_compose_opts o;
	const char *const *paths;
	size_t n_paths;
	uint64_t max_record;
	ss_compose_progress_fn fn;
	void *arg;
	uint64_t bytes;     /* bytes_in so far */
	char *errmsg;       /* the call's, SS_ERRMSG_MAX bytes */
	int threads;        /* > 1: pass 2 in parallel (drv_parallel) */
	ss_compose_input *in; /* the one-thread passes' input (its buffers kept from record to record) */
	/* the output, and what it changes of the result */
	ss_writer *w;
	int set_dtype;      /* an ss_dtype, or -1: the inputs' */
	const char *out_id; /* NULL: the composed id */
	int wrote;          /* drv_parallel wrote the result to w */
	int write_failed;   /* ... and failed there (rc is w's) */
	/* The plan frame of the stream whose records are being read for the
	 * first time (NULL: none, or one the composer checks itself): each
	 * record is checked against its row and the count at the end, in every
	 * mode (check_record, claim_end). Borrowed from that stream's reader. */
	const float *claim;
	size_t claim_n, claim_h;
} drv_run;

/* 1 when records are folded in pieces as decompressed: not with a norm
 * before, whose ssm folds whole (ss_composer_fold). */
static inline int drv_pieces(const drv_run *u)
{
	return !(u->o.norm & SS_COMPOSE_NORM_BEFORE);
}

/* The result's dtype: as asked, else the inputs' when they share one,
 * else f32 (after the first state). */
ss_dtype drv_out_dtype(const drv_run *u);

/* u->fn(u->arg, pass, done, total) when there is one. */
void drv_progress(const drv_run *u, int pass, size_t done, size_t total);

/* Decodes record recno's metadata (state records only) into *m (the
 * caller frees it), errmsg naming it: "PATH: record N (byte offset X): ...". */
int drv_record_meta(const ss_record *rec, ss_state *m, const char *path, uint64_t recno, char *errmsg);

/* Adds the whole record rec (record recno of path; checked: its
 * compatibility was checked by a first pass). Returns 1, or an SS_ERR_*
 * with u->errmsg set. */
int drv_add_whole(drv_run *u, const ss_record *rec, const char *path, uint64_t recno, int checked);

/* 0 when elements [e0, e1) of the result's array which (f32 at x) are
 * what its output dtype stores, else SS_ERR_INVALID with errmsg naming the
 * inputs, the element and why. */
int drv_check_storable(const drv_run *u, int which, const float *x, size_t e0, size_t e1, char *errmsg);

/* Pass 2 of the planned passes in u->threads threads, with a writer
 * thread where the result can be written as it is made (compose_threads.c).
 * Returns 0 or an SS_ERR_* with u->errmsg set; sets u->wrote and
 * u->write_failed. */
int drv_parallel(drv_run *u, const drv_plan *plan);

#endif /* SS_COMPOSE_FILES_H */
