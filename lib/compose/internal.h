/*
 * lib/compose/internal.h — INTERNAL to libss (lib/compose/compose.c, lib/compose/compose_files.c,
 * lib/compose/compose_backward.c):
 * adding one input to a composer in pieces, as ss_reader_next_pieces()
 * (lib/stream/internal.h) decompresses them, so a state's arrays are folded
 * into the accumulator while they are still in cache and never gathered
 * into a record-sized buffer (issue 12, item 5).
 *
 * Protocol, per input: ss_composer_add_begin(meta) once; then
 * ss_composer_add_piece() for the bytes of "conv" (which 0) and "ssm"
 * (which 1), each array's pieces in order and contiguous; then
 * ss_composer_add_end(). A byte-shuffled input (meta->shuffle > 0) has its
 * pieces gathered into whole shuffle blocks (one block buffered, at most
 * SS_SHUFFLE_MAX elements), each unshuffled and folded in when complete. The result is bit-identical to
 * ss_composer_add_record() of the same record: every mode's update is
 * elementwise. All return 0 or an SS_ERR_* with errmsg naming the input,
 * and leave the composer failed on error (as the other adds).
 */
#ifndef SS_COMPOSE_INTERNAL_H
#define SS_COMPOSE_INTERNAL_H

#include "ss.h"

/* 1 when the composer's options allow adding in pieces: not with
 * SS_COMPOSE_NORM_BEFORE, which needs each layer's norm before its first
 * element (callers then add whole records). */
int ss_composer_streams(const ss_composer *c);

/* Allocates the accumulator for inputs like x (dims and fingerprint; its
 * arrays are not read) before the first input, as that input would: then
 * ss_composer_touch() can fault its pages in from several threads at once
 * (ss_compose_files_threads) instead of the first input's fold alone.
 * Returns 0, SS_ERR_NOMEM, or SS_ERR_INVALID after the first input. */
int ss_composer_prepare(ss_composer *c, const ss_state *x, char *errmsg);

/* Writes a zero to every page of part `part` of `parts` of the prepared
 * accumulator's ssm (which the first input overwrites), so that the pages
 * are faulted in now; parts may run concurrently, in any thread, but not
 * with any other call on c. A no-op without a prepared accumulator or
 * after the first input. */
void ss_composer_touch(ss_composer *c, size_t part, size_t parts);

/* Starts an input: meta carries dims, fingerprint, id, n_tokens, dtype
 * (the storage dtype of the pieces) and logdecay; its ssm/conv are not
 * read. The same checks as ss_composer_add(). */
int ss_composer_add_begin(ss_composer *c, const ss_state *meta, char *errmsg);

/* Bytes [off, off+len) of the open input's conv (which 0) or ssm (which 1)
 * array, stored in the input's dtype; p any alignment (f32 read in place
 * when 4-aligned). off must continue the previous piece of that array, len
 * be whole elements and stay within the array (else SS_ERR_FORMAT). */
int ss_composer_add_piece(ss_composer *c, int which, uint64_t off, const void *p, size_t len,
			  char *errmsg);

/* Ends the input: SS_ERR_FORMAT unless both arrays were given whole. */
int ss_composer_add_end(ss_composer *c, char *errmsg);

/* Several inputs at once (ss_compose_files_threads): an input object
 * carries what folding one input's pieces needs, so that the next input
 * can begin before this one ends. Inputs begin and end one at a time, in
 * concatenation order (the caller serialises ss_composer_begin/end); their
 * pieces, ss_composer_fold, may run in several threads at once as long as
 * each range of an array is folded by input k-1 before input k (every
 * mode's update is elementwise, so the bits are those of one input after
 * the other). ss_composer_add_begin/piece/end are these on the
 * composer's own input. Free an input with ss_compose_input_free (NULL is
 * a no-op); ss_compose_input_new returns NULL when out of memory. */
typedef struct ss_compose_input ss_compose_input;
ss_compose_input *ss_compose_input_new(void);
void ss_compose_input_free(ss_compose_input *in);
/* ss_composer_add_begin on in: in becomes the next input (its place:
 * the number begun so far). Errors leave the composer failed. */
int ss_composer_begin(ss_composer *c, ss_compose_input *in, const ss_state *meta, char *errmsg);
/* ss_composer_add_piece on in, without marking the composer failed (the
 * caller stops); touches only in and the accumulator's elements the
 * piece covers. */
int ss_composer_fold(const ss_composer *c, ss_compose_input *in, int which, uint64_t off, const void *p, size_t len,
		     char *errmsg);
/* ss_composer_add_end on in, also after another input failed the
 * composer (an earlier input still ends, and its own error, if any, is
 * the one to report). */
int ss_composer_end(ss_composer *c, ss_compose_input *in, char *errmsg);

/* The result before its arrays are folded, for writing it while they are
 * (ss_compose_files_to): once every input has begun (every planned one),
 * fills *view with the metadata ss_composer_finish will give and with the
 * accumulator's arrays, borrowed (the caller frees nothing; the view is
 * void after ss_composer_finish or _free). The arrays become the result
 * range by range: after every input has folded elements [0, end) of
 * conv (which 0) or ssm (1), ss_composer_finish_range(c, which, end)
 * applies what finish would to them (soup's and conv's mean), each range
 * once, ends growing. SS_ERR_INVALID before every input has begun, with a
 * norm (before: no pieces; after: a layer's norm needs all its elements),
 * after an error or finish. */
int ss_composer_result(ss_composer *c, ss_state *view, char *errmsg);
void ss_composer_finish_range(ss_composer *c, int which, size_t end);
/* The argument checks of ss_compose_weights() and its backward: n ≥ 1, a
 * mode with weights, every logdecay ≤ 0 or -inf. Returns 0 or
 * SS_ERR_INVALID with errmsg naming the input and head. */
int ss_compose_weights_check(ss_compose_mode mode, size_t n, size_t n_head, const float *logdecay,
			     char *errmsg);

#endif /* SS_COMPOSE_INTERNAL_H */
