/*
 * eval_run.h — what ss-eval's parts share (tools/ss-eval.c: options and
 * main; eval_wikitext.c, eval_attribution.c: the two protocols): one run's
 * options, model and per-row output. Every function reports through cli.h
 * and exits on failure.
 */
#ifndef SS_EVAL_RUN_H
#define SS_EVAL_RUN_H

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "ss.h"
#include "ss_eval.h"

/* One run: the options, the model and its forward context, and the
 * per-row output (--per-passage / --per-query), kept in memory and written
 * at the end: cli_out_open() has one output file at a time. */
typedef struct {
	const char *model_dir, *index, *tokens, *qa, *out, *per, *tok_path, *wtype;
	long passages, min_tokens, kmax, queries;
	uint64_t seed;
	int exactly_one, threads;
	int methods[SS_EVAL_N_METHODS], n_methods;
	ss_model *model;
	ss_forward_ctx *fctx;
	const char *usage; /* for usage errors */
	FILE *per_out; /* NULL without --per-passage / --per-query */
	char *per_buf;
	size_t per_len;
} eval_run;

/* calloc and realloc that die on failure; a size of 0 still gives a pointer. */
static inline void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		cli_die("out of memory");
	return p;
}

static inline void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (!p)
		cli_die("out of memory");
	return p;
}

/* The name of the j-th method of --methods. */
static inline const char *method_name(const eval_run *run, int j)
{
	return ss_eval_method_name((ss_eval_method)run->methods[j]);
}

/* PICASO §6.1, Fig. 3: WikiText continuation NLL vs k per method; writes the
 * TSV method, k, mean_nll, n, mean_time_ms (eval_wikitext.c). */
void eval_wikitext(eval_run *run);

/* Appendix C, Table 4: MS MARCO attribution by Leave-One-In and
 * Leave-One-Out per method; writes the TSV method, n, correct, precision,
 * mean_time_ms (eval_attribution.c). */
void eval_attribution(eval_run *run);

#endif /* SS_EVAL_RUN_H */
