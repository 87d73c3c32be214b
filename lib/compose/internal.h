/*
 * lib/compose/internal.h — INTERNAL to libss (lib/compose/compose_weights.c,
 * lib/compose/compose.c, lib/compose/compose_backward.c,
 * lib/compose/compose_files.c, lib/compose/compose_threads.c): what the driver's threads
 * and writer thread need of the composer beyond ss_compose.h, and what the
 * backward shares with the forward's weights.
 */
#ifndef SS_COMPOSE_INTERNAL_H
#define SS_COMPOSE_INTERNAL_H

#include "ss.h"

/* Gauss–Legendre rule on [0, 1] with m ≥ 1 nodes: t[m] ascending, wt[m]
 * (Σ wt = 1); exact for polynomials of degree ≤ 2m-1. Newton on the
 * Legendre recurrence, f64. picaso-s's quadrature (compose_weights.c) and its
 * backward (compose_backward.c). ref: picaso.txt Prop. 2. */
void ss_gauss_legendre01(size_t m, double *t, double *wt);

/* The argument checks of ss_compose_weights() and its backward: n ≥ 1, a
 * mode with weights, every logdecay [n][n_head] ≤ 0 or -inf. Returns 0 or
 * SS_ERR_INVALID with errmsg naming the input and head. With mode caso
 * (which has weights for every n) it checks the decays alone. */
int ss_compose_weights_check(ss_compose_mode mode, size_t n, size_t n_head, const float *logdecay,
			     char *errmsg);

/* Several inputs open at once (the threaded driver, compose_threads.c): an input
 * object carries what folding one input's pieces needs, so that the next
 * input can begin before this one ends. The protocol is ss_composer_begin /
 * fold / end's (ss_compose.h), on in instead of the composer's own input:
 * inputs begin and end one at a time, in concatenation order (the caller
 * serialises ss_composer_begin_input/end_input); their folds may run in
 * several threads at once as long as each range of an array is folded by
 * input k-1 before input k (every mode's update is elementwise, so the
 * bits are those of one input after the other). Free an input with
 * ss_compose_input_free (NULL is a no-op); ss_compose_input_new returns
 * NULL when out of memory. An input is reused from one record to the next
 * (its buffers stay). */
typedef struct ss_compose_input ss_compose_input;
ss_compose_input *ss_compose_input_new(void);
void ss_compose_input_free(ss_compose_input *in);
/* ss_composer_begin on in: in becomes the next input (its place: the
 * number begun so far). Errors leave the composer failed. */
int ss_composer_begin_input(ss_composer *c, ss_compose_input *in, const ss_state *meta, char *errmsg);
/* ss_composer_fold on in, with every piece checked finite before any of it
 * is folded (SS_ERR_FORMAT "input K: field "F": element E is V, not
 * finite", as the record decoders say it), without marking the composer
 * failed (the caller stops); touches only in and the accumulator's
 * elements the piece covers. */
int ss_composer_fold_input(const ss_composer *c, ss_compose_input *in, int which, uint64_t off, const void *p,
			   size_t len, char *errmsg);
/* ss_composer_end on in, also after another input failed the composer (an
 * earlier input still ends, and its own error, if any, is the one to
 * report). */
int ss_composer_end_input(ss_composer *c, ss_compose_input *in, char *errmsg);

/* Allocates the accumulator for inputs like x (dims and fingerprint; its
 * arrays are not read) before the first input, as that input would; then
 * ss_composer_touch(c, part, parts) writes a zero to every page of part
 * `part` of `parts` of its ssm (which the first input overwrites), so that
 * several threads fault the pages in at once instead of the first input's
 * fold alone. Parts may run concurrently, in any thread, but not with any
 * other call on c; touch is a no-op without a prepared accumulator or after
 * the first input. prepare returns 0, SS_ERR_NOMEM, or SS_ERR_INVALID after
 * the first input. */
int ss_composer_prepare(ss_composer *c, const ss_state *x, char *errmsg);
void ss_composer_touch(ss_composer *c, size_t part, size_t parts);

/* The result before its arrays are folded, for the writer thread to write
 * it while they are (compose_threads.c): once every input has begun (every planned
 * one), fills *view with the metadata ss_composer_finish will give and
 * with the accumulator's arrays, borrowed (the caller frees nothing; the
 * view is void after ss_composer_finish or _free). The arrays become the
 * result range by range: after every input has folded elements [0, end) of
 * conv (which 0) or ssm (1), ss_composer_finish_range(c, which, end)
 * applies what finish would to them (soup's and conv's mean), each range
 * once, ends growing. SS_ERR_INVALID before every input has begun, with a
 * norm (before: the ssm folds whole; after: a layer's norm needs all its
 * elements),
 * after an error or finish. */
int ss_composer_result(ss_composer *c, ss_state *view, char *errmsg);
void ss_composer_finish_range(ss_composer *c, int which, size_t end);

#endif /* SS_COMPOSE_INTERNAL_H */
