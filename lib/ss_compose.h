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

/* The options' names, indexed by value: modes "caso" "picaso-s" "picaso-r"
 * "soup" "sum" "max", each with needs_plan = 1 when the mode needs every
 * input's decays before the first state is folded (picaso-s, picaso-r:
 * callers read the decays first, ss_reader_next_meta, and give them to
 * ss_composer_new; the other modes compose in one streaming pass, caso by
 * Horner: acc = d_k·acc + x_k); norms "none" "before" "after" "both"
 * (the SS_COMPOSE_NORM_* flags); convs "mean" "last". */
enum { SS_COMPOSE_N_MODES = 6, SS_COMPOSE_N_NORMS = 4, SS_COMPOSE_N_CONVS = 2 };
typedef struct {
	const char *name;
	int needs_plan;
} ss_compose_mode_info;
extern const ss_compose_mode_info ss_compose_modes[SS_COMPOSE_N_MODES];
extern const char *const ss_compose_norm_names[SS_COMPOSE_N_NORMS];
extern const char *const ss_compose_conv_names[SS_COMPOSE_N_CONVS];

/* ss_compose_modes[m].name, or NULL for an unknown m. */
const char *ss_compose_mode_name(ss_compose_mode m);
/* The mode named s: 0 and *out set, or SS_ERR_INVALID (s unknown or NULL;
 * *out untouched). */
int ss_compose_mode_parse(const char *s, ss_compose_mode *out);

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

/* ---------------------------------------------------------- streaming */

typedef struct ss_composer ss_composer;

/* Creates a composer; free it with ss_composer_free. logdecay, when not
 * NULL, announces the inputs (the plan): n ≥ 1 and their logdecays
 * [n][n_head] f32 (n_head = n_layer·nheads; copied, each ≤ 0 or -inf).
 * picaso-s/picaso-r need it (their weights are computed here); the other
 * modes may have one, which then only checks that n inputs come. Every
 * input's logdecay must then equal the planned one bitwise (a file that
 * changed between the two passes is refused at its begin).
 * Returns 0 and sets *out; SS_ERR_INVALID for bad options (errmsg "invalid
 * composition options"), n == 0 with a plan ("no input states"), or the
 * errors of ss_compose_weights(); SS_ERR_NOMEM. *out is NULL on error.
 * errmsg: SS_ERRMSG_MAX bytes or NULL.
 * ref: picaso.txt Props. 2-3 (the weights need every decay). */
int ss_composer_new(ss_composer **out, const ss_compose_opts *o, size_t n, size_t n_head, const float *logdecay,
		    char *errmsg);

/* The one way in: each input (concatenation order) is
 *   ss_composer_begin(meta), then ss_composer_fold() for the bytes of its
 *   "conv" (which 0) and "ssm" (which 1) arrays, each array's pieces in
 *   order and contiguous (the two arrays in any order or interleaved),
 *   then ss_composer_end().
 * begin: meta gives dims, fingerprint, id, n_tokens, logdecay
 *   [n_layer·nheads] f32 (copied), dtype (the storage dtype of the pieces:
 *   f32, f16, bf16, q8 or q4; for q8 and q4 also conv_scale/ssm_scale,
 *   copied, ss_state_q8_blocks) and shuffle (> 0: the f16/bf16 pieces are
 *   byte-shuffled in blocks of that many elements, formats/states.md
 *   "shuffle"); its ssm/conv are not read. The first input fixes dims and
 *   fingerprint and allocates the accumulator.
 * fold: bytes [off, off+len) of array which, at p (only read, during the
 *   call; any alignment: f32 is read in place when 4-aligned). f16/bf16 are
 *   widened exactly and q8 codes scaled BLK elements at a time inside the
 *   accumulation loop: no f32 copy of an input is made. A shuffled array's
 *   pieces are gathered into whole shuffle blocks (one block buffered),
 *   each checked finite, unshuffled and folded when complete; plain pieces
 *   are folded as given, unchecked (record readers check them; the file
 *   driver checks its pieces). With SS_COMPOSE_NORM_BEFORE the ssm must
 *   come in one piece (the layers' norms come first) and unshuffled. Every
 *   mode's update is elementwise, so any cut of the arrays into pieces
 *   gives the same bits.
 * end: both arrays were given whole.
 * Returns 0; SS_ERR_MISMATCH (dims, fingerprint or planned logdecay differ;
 * errmsg says which); SS_ERR_INVALID (picaso without a plan, more inputs
 * than planned, meta without logdecay or scales, a logdecay NaN or > 0, a
 * piece outside an input, norm before with a cut or shuffled ssm);
 * SS_ERR_FORMAT (a piece out of order, past its array or not whole
 * elements; an array not given whole at end; a non-finite element of a
 * shuffled block); SS_ERR_NOMEM. errmsg names the input ("input K: ...").
 * After an error the composer can only be freed.
 * ref: picaso.txt §3.3, Props. 1-3; docs/DESIGN.md §3. */
int ss_composer_begin(ss_composer *c, const ss_state *meta, char *errmsg);
int ss_composer_fold(ss_composer *c, int which, uint64_t off, const void *p, size_t len, char *errmsg);
int ss_composer_end(ss_composer *c, char *errmsg);

/* Finishes: fills *out with the composed state (see the top of this file);
 * the caller owns it (ss_state_free). The composer can then only be freed.
 * Returns 0; SS_ERR_INVALID when no input was added (n = 0), an input is
 * still open, or fewer than planned came; SS_ERR_NOMEM. */
int ss_composer_finish(ss_composer *c, ss_state *out, char *errmsg);

/* Frees the composer and whatever it still owns (NULL is a no-op). */
void ss_composer_free(ss_composer *c);

/* One-shot: composes the n states in[0..n-1] (concatenation order) into
 * *out, which the caller frees with ss_state_free. Same results, bit for
 * bit, as streaming them through a composer (with a plan for picaso),
 * each whole and in f32 (in[k]->dtype is ignored), unchecked for
 * non-finite values. Errors as ss_composer_new/begin/fold/end/finish; a
 * state without ssm, conv or logdecay is SS_ERR_INVALID. */
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

/* ---------------------------------------------------------- the driver */

/* Progress of ss_compose_run(): pass 0 = the one streaming pass, 1 = the
 * decays pass, 2 = the states pass of a planned mode; done inputs so far of
 * total (0 when not yet known). Called once per input, from the calling
 * thread or (threads > 1) under the driver's lock from a worker. */
typedef void (*ss_compose_progress_fn)(void *arg, int pass, size_t done, size_t total);

/* A source of records (ss_compose_run_opts.read): sets *rec to input i's
 * state record (borrowed, valid until the next call), only its metadata
 * prefix when meta_only (ss_reader_next_meta). Returns 0 or a negative
 * SS_ERR_* with errmsg (SS_ERRMSG_MAX bytes) filled. */
typedef int (*ss_compose_read_fn)(void *arg, size_t i, int meta_only, const ss_record **rec, char *errmsg);

/* What ss_compose_run reads, how, and what it writes. */
typedef struct {
	/* The source: the state records of the files paths[0..n_paths) (in
	 * order, records in order: the concatenation order; "-" = stdin, at
	 * most once), or, when read is not NULL, the n records read(read_arg,
	 * i, ...) gives, i = 0..n-1 (e.g. from an index by record offset). */
	const char *const *paths;
	size_t n_paths;
	/* Files by place: when not NULL, input i is the one state record at
	 * byte offset offsets[i] of paths[i] (regular files, a path may
	 * repeat; [n_paths], e.g. an index's hits, ss_index_hit.offset): read
	 * as a file's records are, in place and in threads; messages name
	 * input i as record i of its path. */
	const uint64_t *offsets;
	/* With offsets, NULL or each frame's length in bytes as its place was
	 * stored (ss_index_hit.length): the metadata pass takes it instead of
	 * walking the frame's blocks; the arrays' pass checks them all. */
	const uint64_t *lengths;
	ss_compose_read_fn read;
	void *read_arg;
	size_t n;
	int threads;         /* files only: <= 1 one thread; see ss_compose_run */
	uint64_t max_record; /* files only: limit on a record's decompressed size (0 = default) */
	ss_compose_progress_fn progress; /* NULL: none */
	void *progress_arg;
	/* The output: w NULL, the result in res->state only; else also written
	 * to w as one state record (the bytes ss_writer_put_state makes of
	 * res->state). w is not committed: the caller closes it (whole or not
	 * at all) or aborts it. */
	ss_writer *w;
	int set_dtype;       /* 1: the result's dtype is dtype; 0: see ss_compose_run */
	ss_dtype dtype;
	const char *id;      /* NULL: the composed id ("mode(id0,id1,...)"); else copied */
} ss_compose_run_opts;

/* What ss_compose_run gives back. */
typedef struct {
	ss_state state;     /* the result (ss_state_free); empty on error */
	uint64_t bytes_in;  /* state bytes read in the accumulating pass (decompressed
			     * record bytes; f32 for spooled ones), for throughput */
	int write_failed;   /* 1: the error is w's (w is then unusable, and its
			     * close says why: a write error, SS_ERR_NOMEM) */
} ss_compose_result;

/* Composes the source's states into res->state: what ss-compose does
 * between its options and its output.
 * Files: modes without a plan read each input once, streaming, from files
 * or pipes alike. picaso-s/picaso-r read the decays first
 * (ss_reader_next_meta) and the states in a second pass (regular files,
 * stdin included, are read again; a pipe's states are spooled in f32 to an
 * unlinked tmpfile() in $TMPDIR, unless the pipe begins with a plan frame
 * small enough to take on trust, ss_reader_plan: then it is read once).
 * Every mode checks a stream that begins with a plan frame against it,
 * file or pipe: each record's logdecay bit for bit against its row, the
 * count at the end (SS_ERR_MISMATCH, SS_ERR_TRUNCATED, naming the file and
 * record). A plan is taken on trust only when what it asks for before its
 * records can be checked is small (at most 2^22 decays, and for picaso-s
 * at most 2^25 steps of its weights: m·(n·H + 16·m), m = ceil(n/2)
 * quadrature nodes, about 0.5 s at most); a larger one is checked
 * against its records (spooled) first, so that a forged plan costs the
 * time and memory of the records that follow it, not of the rows it
 * claims. A record's arrays are folded in as they
 * are decompressed, at most 128 KiB at a time, never gathered whole
 * (except with SS_COMPOSE_NORM_BEFORE, which needs each layer's norm
 * first, and records not laid out as formats/states.md says writers lay
 * them out). Memory: the accumulator, a 128 KiB piece (else one record)
 * and n_layer·nheads decays per input, whatever the number of inputs.
 * threads > 1, where every path is a regular file: the records are located
 * in a first pass (ss_reader_next_meta, as picaso's decays pass) and then
 * up to `threads` of them are decompressed at once, each into its thread's
 * record buffer, and folded piece by piece as the record before has folded
 * the same elements (records in order over every element): the result has
 * the bits of one thread, errors are those it reports (the first failing
 * record's), but memory holds a record per thread. With w, no norm and an
 * output dtype other than q8, the record is then written by one more
 * thread while the inputs are still read: the metadata once every input
 * has begun, the arrays a shuffle block at a time as the last input's
 * folds make them final, so compressing, writing and syncing the output
 * overlap the reading (issue 12: the output used to add ~25 ms after the
 * last input on a 130m state). Otherwise the result is composed first and
 * then written.
 * Files by place (offsets): every input's metadata first (the plan, in
 * every mode), then each record once as the threads above read a file's
 * (a raw frame read a piece at a time, without zstd; a record per thread),
 * or in turn with threads <= 1.
 * A read source: for picaso-s/picaso-r every input's metadata first, then
 * each record once, whole (ss_record_state_view), in one thread.
 * res->state as ss_composer_finish() gives it, except its dtype: set_dtype's,
 * else, from files, the inputs' storage dtype when they all share one, else
 * (and from a read source) SS_DTYPE_F32; and its id, when set.
 * Returns 0, or a negative SS_ERR_* with errmsg (SS_ERRMSG_MAX bytes, may
 * be NULL) naming the file and record ("FILE: record N (id \"ID\"): what";
 * a mismatch names both records) or, from a read source, the input
 * ("input I: what"): the reader's or read's errors, SS_ERR_FORMAT for a
 * record that is not a state or holds a non-finite element,
 * SS_ERR_MISMATCH (another model fingerprint or dims; a file whose records
 * changed between the passes), SS_ERR_INVALID (no input state; stdin given
 * twice; a result the output dtype cannot hold, naming the element),
 * SS_ERR_IO (spool file), SS_ERR_NOMEM, and w's errors (write_failed).
 * res->state is then empty (nothing to free).
 * ref: docs/DESIGN.md §3 (file drivers); formats/states.md (the records,
 * "shuffle"). */
int ss_compose_run(const ss_compose_opts *o, const ss_compose_run_opts *r, ss_compose_result *res, char *errmsg);

#ifdef __cplusplus
}
#endif
#endif /* SS_COMPOSE_H */
