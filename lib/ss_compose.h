/*
 * ss_compose.h — composing document states into one state (part of libss;
 * include "ss.h", not this file).
 * Public: part of libss's interface (ss.h says what that means).
 *
 * Per layer l and head h, with a_i = logdecay of input i (≤ 0) and
 * d_i = exp(a_i), inputs in concatenation order 0..n-1 (n-1 = nearest the
 * query), every weighted mode computes
 *     out.ssm[l][h] = Σ_k W[l][h][k] · x_k.ssm[l][h]
 *   caso      W_k = Π_{j>k} d_j                        (picaso.txt Prop. 1)
 *   picaso-s  W_k = mean over all n! orders of the CASO weight
 *             = ∫_0^1 Π_{j≠k} (t + (1-t) d_j) dt       (Prop. 2; docs/DESIGN.md §3)
 *   picaso-r  W_k = mean over the n cyclic orders = T_k / n,
 *             T_k = 1 - P + d_{k+1} T_{k+1}, P = Π d_i  (Prop. 3; docs/DESIGN.md §3)
 *   soup      W_k = 1/n; sum W_k = 1; max: elementwise maximum (no weights)
 *                                                (document-souping.txt §2.2)
 * Optional L2 normalisation of each layer's ssm block (all heads of the
 * layer), of every input before pooling and/or of the result after it.
 *
 * The composed state's other fields:
 *   conv      mean of the inputs' conv states (picaso.txt §3.3), or the last
 *             input's (SS_COMPOSE_CONV_LAST);
 *   logdecay  caso, picaso-s, picaso-r: Σ_i a_i, the decay of the
 *             concatenation (the same for every order, so exact for each of
 *             the averaged orders); soup, sum, max: log(mean_i d_i), which
 *             makes soup exact under a later composition,
 *             soup_i(CASO(y, x_i)) = CASO(y, soup_i(x_i)), and keeps the
 *             value ≤ 0 (sum's distributive decay log Σ d_i could exceed 0);
 *   n_tokens  Σ of the inputs'; fingerprint and dims: the inputs' (which must
 *             all agree); dtype SS_DTYPE_F32 (the caller picks the storage);
 *   id        "<mode>(<id0>,<id1>,...)" up to 160 bytes; longer (n >= 2):
 *             "<mode>(<n> states: <id0> … <id{n-1}>)", each of the two cut
 *             to 48 bytes (UTF-8 whole, "…" when cut); provenance: mode, the
 *             full list of source ids and the weights [n_layer][nheads][n]
 *             (NULL for max).
 *
 * With one input and no normalisation every mode returns it bit for bit
 * (ssm, conv, logdecay): the first input initialises the accumulator as
 * 1.0f·x, never 0 + x (which would turn -0.0 into +0.0).
 *
 * Arithmetic: weights in f64 (they depend only on the decays: tiny), the
 * states accumulated in f32 one input at a time, so memory is one
 * accumulator whatever n is and the cost is reading the inputs.
 */
#ifndef SS_COMPOSE_H
#define SS_COMPOSE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	SS_COMPOSE_CASO = 0,
	SS_COMPOSE_PICASO_S = 1,
	SS_COMPOSE_PICASO_R = 2,
	SS_COMPOSE_SOUP = 3,
	SS_COMPOSE_SUM = 4,
	SS_COMPOSE_MAX = 5,
} ss_compose_mode;

/* Normalisation flags (combine with |; 0 = none). */
enum {
	SS_COMPOSE_NORM_BEFORE = 1, /* each input's layer block scaled to L2 norm 1 */
	SS_COMPOSE_NORM_AFTER = 2,  /* the result's layer block scaled to L2 norm 1 */
};

typedef enum {
	SS_COMPOSE_CONV_MEAN = 0, /* unweighted mean of the inputs' conv states */
	SS_COMPOSE_CONV_LAST = 1, /* the last input's conv state */
} ss_compose_conv;

typedef struct {
	ss_compose_mode mode;
	int norm;             /* 0 or SS_COMPOSE_NORM_* flags */
	ss_compose_conv conv;
} ss_compose_opts;

/* Names: "caso" "picaso-s" "picaso-r" "soup" "sum" "max"; "none" "before"
 * "after" "both"; "mean" "last". *_name returns NULL for an unknown value;
 * *_parse returns 0 and sets *out, or SS_ERR_INVALID. */
const char *ss_compose_mode_name(ss_compose_mode m);
int ss_compose_mode_parse(const char *s, ss_compose_mode *out);
const char *ss_compose_norm_name(int norm);
int ss_compose_norm_parse(const char *s, int *out);
const char *ss_compose_conv_name(ss_compose_conv c);
int ss_compose_conv_parse(const char *s, ss_compose_conv *out);

/* 1 when the mode needs every input's decays before the first state is
 * accumulated (picaso-s, picaso-r): callers then read the decays first
 * (ss_reader_next_meta) and call ss_composer_plan(). The other modes
 * compose in one streaming pass (caso by Horner: acc = d_k·acc + x_k). */
int ss_compose_needs_plan(ss_compose_mode m);

/* Composition weights of every head.
 * logdecay: [n][n_head] f32, input k's logdecays (n_head = n_layer·nheads,
 *           i.e. an ss_state's logdecay array per input), each ≤ 0 or -inf.
 * w:        [n_head][n] f64, out: W_k per head (see the top of this file).
 * Stable for any decays: caso as exp of suffix sums, picaso-r by the
 * recurrence T_k = 1 - P + d_{k+1} T_{k+1} (all terms ≥ 0; 1 - P as
 * -expm1(Σ a)), picaso-s by Gauss–Legendre quadrature with ⌈n/2⌉ nodes
 * (exact for the degree n-1 integrand), O(n) resp. O(n²) per head. For
 * picaso modes every W_k ≥ 1/n, so underflowing products only drop terms
 * below 1e-308 of a weight ≥ 1/n.
 * Returns 0; SS_ERR_INVALID for n == 0, mode max, or a logdecay that is NaN
 * or > 0 (errmsg, SS_ERRMSG_MAX bytes or NULL, names input and head);
 * SS_ERR_NOMEM.
 * ref: picaso.txt Props. 1-3, Appendix A; docs/DESIGN.md §3. */
int ss_compose_weights(ss_compose_mode mode, size_t n, size_t n_head, const float *logdecay,
		       double *w, char *errmsg);

/* Gauss–Legendre rule on [0, 1] with m nodes: t[m] ascending, wt[m]
 * (Σ wt = 1); exact for polynomials of degree ≤ 2m-1. Newton on the
 * Legendre recurrence, f64. m ≥ 1. */
void ss_gauss_legendre01(size_t m, double *t, double *wt);

/* ---------------------------------------------------------- streaming */

typedef struct ss_composer ss_composer;

/* Creates a composer. Returns 0 and sets *out (free with
 * ss_composer_free), SS_ERR_INVALID for bad options, SS_ERR_NOMEM. */
int ss_composer_new(ss_composer **out, const ss_compose_opts *o);

/* Announces the inputs: n and their logdecays [n][n_head] (copied), before
 * the first ss_composer_add(). Required for picaso-s/picaso-r (computes the
 * weights), optional otherwise (then only checks that n inputs come).
 * ss_composer_add() later refuses an input whose logdecay differs bitwise
 * from the planned one (a file changed between the two passes).
 * Returns 0 or the errors of ss_compose_weights(); SS_ERR_INVALID when
 * called twice or after an add. */
int ss_composer_plan(ss_composer *c, size_t n, size_t n_head, const float *logdecay, char *errmsg);

/* Accumulates the next input (concatenation order). x is only read; its
 * arrays need to live only during the call. The first input fixes dims and
 * fingerprint. Returns 0; SS_ERR_MISMATCH (different dims, fingerprint or
 * planned logdecay; errmsg says which); SS_ERR_INVALID (picaso without a
 * plan, more inputs than planned, x without ssm/conv/logdecay, a logdecay
 * NaN or > 0); SS_ERR_NOMEM. After an error the composer can only be freed. */
int ss_composer_add(ss_composer *c, const ss_state *x, char *errmsg);

/* Like ss_composer_add(), with the ssm and conv arrays given in storage
 * dtype `dtype` (little-endian, any alignment), e.g. straight from a
 * record's bytes; x supplies everything else (its ssm/conv are ignored).
 * f16/bf16 are widened exactly, and q8 codes scaled by x->conv_scale /
 * x->ssm_scale (required then, ss_state_q8_blocks), BLK elements at a time
 * inside the accumulation loop: no f32 copy of the input is made. */
int ss_composer_add_arrays(ss_composer *c, const ss_state *x, const void *ssm, const void *conv,
			   ss_dtype dtype, char *errmsg);

/* Decodes a state record (ss_reader_next()) and accumulates it without
 * materialising its arrays in f32: memory stays one accumulator plus the
 * reader's record buffer; except a byte-shuffled record (f16/bf16 as
 * writers make them, formats/states.md "shuffle"), decoded to f32 first
 * (ss_compose_files adds those in pieces instead, unshuffling a block at a
 * time). Errors as ss_composer_add(), plus those of
 * ss_record_state_meta() and SS_ERR_FORMAT for missing or mis-sized
 * "conv"/"ssm" bins. */
int ss_composer_add_record(ss_composer *c, const ss_record *rec, char *errmsg);

/* Number of inputs accumulated so far. */
size_t ss_composer_count(const ss_composer *c);

/* Finishes: fills *out with the composed state (see the top of this file);
 * the caller owns it (ss_state_free). The composer can then only be freed.
 * Returns 0; SS_ERR_INVALID when no input was added (n = 0) or fewer than
 * planned; SS_ERR_NOMEM. */
int ss_composer_finish(ss_composer *c, ss_state *out, char *errmsg);

/* Frees the composer and whatever it still owns (NULL is a no-op). */
void ss_composer_free(ss_composer *c);

/* One-shot: composes the n states in[0..n-1] (concatenation order) into
 * *out, which the caller frees with ss_state_free. Same results, bit for
 * bit, as streaming them through a composer (with a plan for picaso).
 * Errors as ss_composer_add/finish. */
int ss_compose(const ss_compose_opts *o, const ss_state *const *in, size_t n, ss_state *out,
	       char *errmsg);

/* ---------------------------------------------------------- backward */

/* Backward of ss_compose_weights(): the gradient of a scalar loss through
 * the weights into the decays,
 *   dlogdecay[k][h] += Σ_j dw[h][j] · ∂W[h][j]/∂a[k][h],
 * the derivative of the function the forward computes (caso: exp of suffix
 * sums; picaso-r: the mean over the n cyclic orders; picaso-s: the same
 * ⌈n/2⌉-node Gauss–Legendre rule, exact for the integral), every product of
 * decays formed without dividing by a decay, so decays of -inf or that
 * underflow give finite gradients. soup, sum and n = 1 have constant weights
 * (nothing is added).
 * logdecay: [n][n_head] f32, each ≤ 0 or -inf (as ss_compose_weights).
 * dw:       [n_head][n] f64, the loss's gradient w.r.t. W.
 * dlogdecay:[n][n_head] f64, += (the caller zeroes it).
 * Cost per head: caso O(n), picaso-r O(n²), picaso-s O(n³/2).
 * Returns 0; SS_ERR_INVALID (n == 0, mode max or unknown, a logdecay NaN or
 * > 0; errmsg, SS_ERRMSG_MAX bytes or NULL); SS_ERR_NOMEM.
 * ref: picaso.txt §5 (BPTC), Props. 1-3. */
int ss_compose_weights_backward(ss_compose_mode mode, size_t n, size_t n_head,
				const float *logdecay, const double *dw, double *dlogdecay,
				char *errmsg);

/* Backward of ss_compose() without normalisation (o->norm == 0), modes
 * caso, picaso-s, picaso-r, soup and sum, either conv option: given the
 * gradient of a loss w.r.t. the composed state's ssm, conv and logdecay,
 * adds its gradient w.r.t. each input's ssm, conv and logdecay:
 *   dssm[k][h]  += (f32)W[h][k] · dssm_out[h]        (per layer·head block h)
 *   dconv[k]    += dconv_out / n  (mean), or dconv_out for k = n-1 (last)
 *   dlogdecay[k]+= Σ_j <dssm_out[h], ssm[j][h]> · ∂W[h][j]/∂a[k][h]
 *                  (ss_compose_weights_backward) + the composed logdecay's
 *                  term (caso/picaso: dlogdecay_out; soup/sum: softmax of
 *                  the a_k times dlogdecay_out).
 * dims: the inputs' dims (all equal); n ≥ 1 inputs in concatenation order.
 * ssm:  [n] pointers to [n_layer][nheads][headdim][d_state] f32 (read only
 *       for dlogdecay of caso/picaso; may then hold NULLs otherwise).
 * logdecay: [n][n_layer·nheads] f32, the inputs' decays.
 * dssm_out [ssm_len], dconv_out [conv_len], dlogdecay_out [n_layer·nheads]:
 *       the gradient of the composed state's fields, each NULL = zeros.
 * dssm, dconv: [n] pointers (+=), each array or pointer NULL = not wanted;
 * dlogdecay: [n][n_layer·nheads] f32 (+=), NULL = not wanted.
 * Gradients are formed in f64 and added in f32.
 * Returns 0; SS_ERR_INVALID (bad options; errors of ss_compose_weights);
 * SS_ERR_UNSUPPORTED (mode max, normalisation); SS_ERR_NOMEM. errmsg as
 * ss_compose_weights.
 * ref: picaso.txt §5 (Backpropagation Through Composition). */
int ss_compose_backward(const ss_compose_opts *o, const ss_state_dims *dims, size_t n,
			const float *const *ssm, const float *logdecay, const float *dssm_out,
			const float *dconv_out, const float *dlogdecay_out, float *const *dssm,
			float *const *dconv, float *dlogdecay, char *errmsg);

/* ---------------------------------------------------------- drivers */

/* Progress of ss_compose_files(): pass 0 = the one streaming pass, 1 = the
 * decays pass, 2 = the states pass of a planned mode; done inputs so far of
 * total (0 when not yet known). Called once per input. */
typedef void (*ss_compose_progress_fn)(void *arg, int pass, size_t done, size_t total);

/* Composes every state record of the files paths[0..n_paths) (in order,
 * records in order: the concatenation order; "-" = stdin, at most once) into *out, which the caller frees with ss_state_free. What
 * ss-compose does between its options and its output.
 * Modes without a plan read each input once, streaming, from files or pipes
 * alike. picaso-s/picaso-r read the decays first (ss_reader_next_meta) and
 * the states in a second pass (regular files, stdin included, are read
 * again; a pipe's states are spooled in f32 to an unlinked tmpfile() in
 * $TMPDIR). A record's arrays are folded in as they are decompressed, at
 * most 128 KiB at a time, never gathered whole (except with
 * SS_COMPOSE_NORM_BEFORE, which needs each layer's norm first, and records
 * not laid out as formats/states.md says writers lay them out). Memory: the
 * accumulator, a 128 KiB piece (else one record) and n_layer·nheads decays
 * per input, whatever the number of inputs.
 * max_record: limit on one record's decompressed size (0 = default).
 * fn(arg, ...): progress, may be NULL. *bytes_in (may be NULL): state bytes
 * read in the accumulating pass (decompressed record bytes; f32 for spooled
 * ones), for throughput.
 * *out as ss_composer_finish() gives it, except out->dtype: the inputs'
 * storage dtype when they all share one, else SS_DTYPE_F32.
 * Returns 0, or a negative SS_ERR_* with errmsg (SS_ERRMSG_MAX bytes, may
 * be NULL) naming the file and record ("FILE: record N (id \"ID\"): what";
 * a mismatch names both records): the reader's errors, SS_ERR_FORMAT for a
 * record that is not a state, SS_ERR_MISMATCH (another model fingerprint or
 * dims; a file whose records changed between the passes), SS_ERR_INVALID
 * (no input state; stdin given twice), SS_ERR_IO (spool file), NOMEM.
 * *out is then empty (nothing to free). */
int ss_compose_files(const ss_compose_opts *o, const char *const *paths, size_t n_paths,
		     uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_state *out,
		     uint64_t *bytes_in, char *errmsg);

/* ss_compose_files() with up to `threads` threads (<= 1: as it). Where
 * every path is a regular file, the records are located in a first pass
 * (ss_reader_next_meta, as picaso's decays pass) and then up to `threads`
 * of them are decompressed at once, each into its thread's record buffer,
 * and folded piece by piece as the record before has folded the same
 * elements (records in order over every element): the result has the
 * bits of the one-thread call, errors are those it reports (the first
 * failing record's), but memory holds a record per thread instead of
 * 128 KiB pieces. Otherwise (stdin, a pipe) one thread, as
 * ss_compose_files(). */
int ss_compose_files_threads(const ss_compose_opts *o, int threads, const char *const *paths, size_t n_paths,
			     uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_state *out,
			     uint64_t *bytes_in, char *errmsg);

/* What ss_compose_files_to() changes of the result it writes. */
typedef struct {
	int set_dtype;   /* 1: store the arrays in dtype, 0: in the inputs' (f32 when they differ) */
	ss_dtype dtype;
	const char *id;  /* NULL: the composed id ("mode(id0,id1,...)") */
} ss_compose_output;

/* ss_compose_files_threads() that also writes the result to w as one
 * state record (the bytes ss_writer_put_state makes of *out, which it
 * returns as well: how's dtype and id in it). With threads > 1, regular
 * files, no norm and an output dtype other than q8, the record is written
 * by one more thread while the inputs are still read: the metadata once
 * every input has begun, the arrays a shuffle block at a time as the last
 * input's folds make them final, so compressing, writing and syncing the
 * output overlap the reading (issue 12: ss-compose's output used to add
 * ~25 ms after the last input on a 130m state); the composer folds the
 * records range by range, in order, so the bits are still one thread's.
 * Otherwise the result is composed first and then written. w (an open
 * writer, not NULL) is not committed: the caller closes it (whole or not
 * at all) or aborts it. Returns 0, or
 * the errors of ss_compose_files_threads with errmsg; *write_failed = 1
 * when the error is w's (then w is unusable and its close says why: a
 * write error, SS_ERR_NOMEM), else 0. *out is empty on error. */
int ss_compose_files_to(const ss_compose_opts *o, int threads, const char *const *paths, size_t n_paths,
			uint64_t max_record, ss_compose_progress_fn fn, void *arg, ss_writer *w,
			const ss_compose_output *how, ss_state *out, uint64_t *bytes_in, int *write_failed,
			char *errmsg);

/* Source of ss_compose_records(): sets *rec to input i's state record
 * (borrowed, valid until the next call), only its metadata prefix when
 * meta_only (ss_reader_next_meta). Returns 0 or a negative SS_ERR_* with
 * errmsg (SS_ERRMSG_MAX bytes) filled. */
typedef int (*ss_compose_read_fn)(void *arg, size_t i, int meta_only, const ss_record **rec, char *errmsg);

/* Composes the n records that read(arg, i, ...) gives, i = 0..n-1 in
 * concatenation order (e.g. from an index by record offset): for
 * picaso-s/picaso-r every input's metadata first, then each record once.
 * *out as ss_composer_finish() gives it (dtype f32). Returns 0, or read's
 * errors and those of ss_composer_add_record/finish, errmsg prefixed
 * "input I: ". */
int ss_compose_records(const ss_compose_opts *o, size_t n, ss_compose_read_fn read, void *arg,
		       ss_state *out, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif /* SS_COMPOSE_H */
