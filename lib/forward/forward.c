/*
 * forward.c — the Mamba-2 forward pass: prefill (batched) and decode, the
 * one driver of every device. See ss_forward.h for the contracts. It cuts
 * calls into passes and runs each pass as the ops of a backend (backend.h):
 * the CPU's (lib/forward/backend_cpu.c: ss_ops.h over a thread pool) or, for a
 * context made on a CUDA device, the plugin's (kernels/forward.cu).
 *
 * One call is cut into passes of at most `ubatch` tokens. A pass packs the
 * tokens of one or more consecutive sequences into row-major [T][...]
 * matrices, which live in the backend:
 *   H   [T][d_model]    residual stream (f32, as residual_in_fp32)
 *   U   [T][d_model]    rmsnorm(H) (layer input; later norm_f(H))
 *   ZXD [T][d_in_proj]  in_proj output: z | xBC | dt
 *   XBC [T][conv_dim]   silu(conv(xBC)): x | B | C
 *   DT  [T][nheads]     softplus(dt + dt_bias), clamped
 *   Y   [T][d_inner]    scan output, then gated group-norm output
 * Per layer: U = rmsnorm(H)·w; ZXD = U·in_projᵀ; conv (it also leaves the
 * new conv state); dt; scan (ssm state, logdecay); gate + group norm;
 * H += Y·out_projᵀ (the CPU runs a decode step's conv, dt, scan and gate
 * as one task per sequence). A sequence longer than a pass continues in the next
 * pass from the state the previous one left, exactly as llama.cpp's
 * ubatches do (golden c4 is 512 + 170).
 *
 * Decode (decode_begin/next/end) binds states once and runs steps of one
 * token per sequence; a backend may record a step and replay it (CUDA
 * graphs, backend.h graph_begin). In a deterministic context a step's pass
 * is marked blocked: the CPU backend then computes every projection and
 * lm_head with a row-invariant kernel, so that a sequence's logits do not
 * depend on the batch it is stepped in (batched ss-decode equals one
 * sequence at a time).
 *
 * ref: tests/fixtures/golden/README.md §2; mamba_ssm modules/mamba2.py; docs/DESIGN.md §2.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "forward/backend.h"
#include "forward/device_plugin.h"
#include "forward/ops/linear_f32.h" /* ss_gemm_choice */

struct ss_forward_ctx {
	const ss_model *m;
	ss_model_config c;
	int64_t ubatch;
	int deterministic; /* see ss_forward_ctx_set_deterministic */
	int on_device;     /* a CUDA context */
	void *be;          /* the backend and its ops */
	const ss_backend_ops *ops;
	ss_segment *segs;  /* [ubatch] the pass's segments */
	int64_t *rows;     /* [ubatch] pass rows gathered for the outputs */
	int32_t *out_seq;  /* [ubatch] sequence of each gathered row */
	int64_t *out_pos;  /* [ubatch] its row in the sequence's output arrays */
	ss_forward_seq *dseqs; /* decode's seqs, grown on demand */
	int dseqs_cap;
	ss_state **sts;    /* a prefill's states, for states_in/out */
	const ss_state **sorted; /* duplicate-state check */
	int sorted_cap;
	size_t bytes;
	/* states bound by ss_forward_decode_begin */
	ss_state **bound;
	int nbound, bound_cap, bound_on;
};

/* ------------------------------------------------------------------ passes */

/* err from a backend op, with its reason in errmsg. */
static int be_err(const ss_forward_ctx *ctx, int err, char *errmsg)
{
	if (err)
		ss_errf(errmsg, 0, "%s", ctx->ops->error(ctx->be));
	return err;
}

/* Runs the layers over pass p (pass_begin done, embeddings in H). */
static int run_layers(ss_forward_ctx *ctx, const ss_pass *p)
{
	const ss_backend_ops *o = ctx->ops;
	void *be = ctx->be;
	int l, err;

	for (l = 0; l < ctx->c.n_layer; l++) {
		const int last = p->state_only && l == ctx->c.n_layer - 1;
		if ((err = o->rmsnorm(be, p, l)) || (err = o->linear(be, p, l, SS_LINEAR_IN_PROJ)))
			return err;
		if (o->mixer)
			err = o->mixer(be, p, l);
		else if (!(err = o->conv(be, p, l)) && !(err = o->dt(be, p, l)) &&
			 !(err = o->scan(be, p, l)) && !last)
			err = o->gated_norm(be, p, l);
		if (err || last)
			return err;
		if ((err = o->linear(be, p, l, SS_LINEAR_OUT_PROJ)))
			return err;
	}
	return 0;
}

/* Outputs of the n gathered rows (ctx->rows, out_seq, out_pos): lm_rows of
 * them share one pass over lm_head (batched decode reads the 150 MB lm_head
 * of mamba2-130m once per group, not once per sequence), then each row is
 * copied to its sequence's arrays at its position. */
static int emit_gathered(ss_forward_ctx *ctx, const ss_pass *p, int64_t n)
{
	const ss_backend_ops *o = ctx->ops;
	const int64_t d = ctx->c.d_model, V = ctx->c.vocab_padded, G = o->lm_rows;
	int64_t i, k;
	int err;

	if (n == 0)
		return 0;
	if ((err = o->norm_f(ctx->be, ctx->rows, 0, n)))
		return err;
	for (i = 0; i < n; i += G) {
		const int64_t g = n - i < G ? n - i : G;
		int any_logits = 0;
		for (k = i; k < i + g; k++) {
			const ss_forward_seq *q = &p->seqs[ctx->out_seq[k]];
			if (q->hidden &&
			    (err = o->hidden(ctx->be, q->hidden + ctx->out_pos[k] * d, k, 1)))
				return err;
			any_logits |= q->logits != NULL;
		}
		if (!any_logits)
			continue;
		if ((err = o->lm_head(ctx->be, i, g, NULL)))
			return err;
		for (k = i; k < i + g; k++) {
			const ss_forward_seq *q = &p->seqs[ctx->out_seq[k]];
			if (q->logits &&
			    (err = o->logits(ctx->be, q->logits + ctx->out_pos[k] * V, k - i, 1)))
				return err;
		}
	}
	return 0;
}

/* SS_LOGITS_ALL: every row of each segment, into the caller's arrays. One
 * segment's rows go straight there; the rows of several are gathered
 * (emit_gathered: batched scoring, many short segments). */
static int emit_all(ss_forward_ctx *ctx, const ss_pass *p)
{
	const ss_backend_ops *o = ctx->ops;
	const int64_t d = ctx->c.d_model, V = ctx->c.vocab_padded;
	int64_t r, n = 0;
	int i, err, nout = 0, last = 0;

	for (i = 0; i < p->nseg; i++) {
		const ss_segment *s = &p->segs[i];
		const ss_forward_seq *q = &p->seqs[s->seq];
		if (s->n > 0 && (q->hidden || q->logits)) {
			nout++;
			last = i;
		}
	}
	if (nout == 1) {
		const ss_segment *s = &p->segs[last];
		const ss_forward_seq *q = &p->seqs[s->seq];
		if ((err = o->norm_f(ctx->be, NULL, s->row0, s->n)) ||
		    (q->hidden && (err = o->hidden(ctx->be, q->hidden + s->start * d, 0, s->n))) ||
		    (q->logits && (err = o->lm_head(ctx->be, 0, s->n, q->logits + s->start * V))))
			return err;
		return 0;
	}
	for (i = 0; i < p->nseg; i++) {
		const ss_segment *s = &p->segs[i];
		const ss_forward_seq *q = &p->seqs[s->seq];
		for (r = 0; r < s->n && (q->hidden || q->logits); r++, n++) {
			ctx->rows[n] = s->row0 + r;
			ctx->out_seq[n] = s->seq;
			ctx->out_pos[n] = s->start + r;
		}
	}
	return emit_gathered(ctx, p, n);
}

/* SS_LOGITS_LAST: the last row of each sequence that ends in this pass,
 * gathered (emit_gathered). */
static int emit_last(ss_forward_ctx *ctx, const ss_pass *p)
{
	int64_t n = 0;

	for (int i = 0; i < p->nseg; i++) {
		const ss_segment *s = &p->segs[i];
		const ss_forward_seq *q = &p->seqs[s->seq];
		if (s->n == 0 || s->start + s->n != q->n_tokens || (!q->hidden && !q->logits))
			continue;
		ctx->rows[n] = s->row0 + s->n - 1;
		ctx->out_seq[n] = s->seq;
		ctx->out_pos[n++] = 0;
	}
	return emit_gathered(ctx, p, n);
}

static int any_output(const ss_forward_seq *seqs, int n, ss_logits_mode mode)
{
	int i;
	if (mode == SS_LOGITS_NONE)
		return 0;
	for (i = 0; i < n; i++)
		if (seqs[i].logits || seqs[i].hidden)
			return 1;
	return 0;
}

static int run_pass(ss_forward_ctx *ctx, const ss_pass *p, ss_logits_mode mode)
{
	const ss_backend_ops *o = ctx->ops;
	int err;

	if ((err = o->pass_begin(ctx->be, p)) || (err = o->embed(ctx->be, p)) ||
	    (err = run_layers(ctx, p)))
		return err;
	if (!p->state_only)
		err = mode == SS_LOGITS_ALL ? emit_all(ctx, p) : emit_last(ctx, p);
	/* a backend's staging (tokens, row layout) is reused by the next pass */
	if (!err && o->sync)
		err = o->sync(ctx->be);
	return err;
}

/* -------------------------------------------------------------- checking */

static void model_state_dims(const ss_model_config *c, ss_state_dims *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->arch, sizeof(d->arch), "%s", c->arch);
	d->n_layer = c->n_layer;
	d->nheads = c->nheads;
	d->headdim = c->headdim;
	d->d_state = c->d_state;
	d->conv_dim = c->conv_dim;
	d->d_conv = c->d_conv;
}

static int cmp_ptr(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	return x < y ? -1 : x > y;
}

static int check_seqs(ss_forward_ctx *ctx, const ss_forward_seq *seqs, int n, ss_logits_mode mode,
		      char *errmsg)
{
	const ss_model_config *c = &ctx->c;
	ss_state_dims want;
	int i;
	int64_t k;

	model_state_dims(c, &want);
	for (i = 0; i < n; i++) {
		const ss_forward_seq *q = &seqs[i];
		const ss_state *st = q->state;
		const ss_state_dims *d;
		if (!st || !st->ssm || !st->conv || !st->logdecay) {
			ss_errf(errmsg, 0, "sequence %d: no state arrays", i);
			return SS_ERR_INVALID;
		}
		d = &st->dims;
		/* a Mamba-1 state's logdecay is per element: its arch must be set */
		if (((d->arch[0] || ss_model_is_mamba1(c)) && strcmp(d->arch, want.arch) != 0) || d->n_layer != want.n_layer ||
		    d->nheads != want.nheads || d->headdim != want.headdim ||
		    d->d_state != want.d_state || d->conv_dim != want.conv_dim ||
		    d->d_conv != want.d_conv) {
			ss_errf(errmsg, 0,
				"sequence %d: state dims (n_layer %d nheads %d headdim %d d_state %d conv_dim %d d_conv %d) differ from the model's (%d %d %d %d %d %d)",
				i, d->n_layer, d->nheads, d->headdim, d->d_state, d->conv_dim, d->d_conv,
				want.n_layer, want.nheads, want.headdim, want.d_state, want.conv_dim, want.d_conv);
			return SS_ERR_MISMATCH;
		}
		if (st->fingerprint[0] && ctx->m->fingerprint[0] &&
		    strncmp(st->fingerprint, ctx->m->fingerprint, SS_FINGERPRINT_MAX) != 0) {
			ss_errf(errmsg, 0, "sequence %d: state of model %.16s, not of this model %.16s", i,
				st->fingerprint, ctx->m->fingerprint);
			return SS_ERR_MISMATCH;
		}
		if (mode != SS_LOGITS_NONE && q->logits && !ctx->m->lm_head) {
			ss_errf(errmsg, 0, "sequence %d: logits asked of a model loaded without lm_head", i);
			return SS_ERR_INVALID;
		}
		if (q->n_tokens < 0 || (q->n_tokens > 0 && !q->tokens)) {
			ss_errf(errmsg, 0, "sequence %d: bad token array", i);
			return SS_ERR_INVALID;
		}
		for (k = 0; k < q->n_tokens; k++)
			if (q->tokens[k] < 0 || q->tokens[k] >= c->vocab_padded) {
				ss_errf(errmsg, 0, "sequence %d: token %lld at position %lld is outside [0, %d)",
					i, (long long)q->tokens[k], (long long)k, c->vocab_padded);
				return SS_ERR_INVALID;
			}
	}
	if (n > 1) {
		if (n > ctx->sorted_cap) {
			const ss_state **p = realloc(ctx->sorted, (size_t)n * sizeof(*p));
			if (!p)
				return SS_ERR_NOMEM;
			ctx->sorted = p;
			ctx->sorted_cap = n;
		}
		for (i = 0; i < n; i++)
			ctx->sorted[i] = seqs[i].state;
		qsort(ctx->sorted, (size_t)n, sizeof(*ctx->sorted), cmp_ptr);
		for (i = 1; i < n; i++)
			if (ctx->sorted[i] == ctx->sorted[i - 1]) {
				ss_errf(errmsg, 0, "the same state is given for two sequences");
				return SS_ERR_INVALID;
			}
	}
	return 0;
}

static int check_model(const ss_model *m, char *errmsg)
{
	const ss_model_config *c = &m->cfg;
	int l;

	const int m1 = ss_model_is_mamba1(c);

	if (c->d_model <= 0 || c->n_layer <= 0 || c->d_state <= 0 || c->headdim <= 0 ||
	    c->nheads <= 0 || c->ngroups <= 0 || c->d_conv <= 0 || c->vocab_padded <= 0 ||
	    c->nheads % c->ngroups != 0 || c->d_inner != c->nheads * c->headdim ||
	    c->d_inner % c->ngroups != 0 ||
	    (m1 ? c->headdim != 1 || c->ngroups != 1 || c->dt_rank <= 0 ||
		  c->conv_dim != c->d_inner || c->d_in_proj != 2 * c->d_inner
		: c->conv_dim != c->d_inner + 2 * c->ngroups * c->d_state ||
		  c->d_in_proj != c->d_inner + c->conv_dim + c->nheads)) {
		ss_errf(errmsg, 0, "inconsistent model dims (d_model %d n_layer %d d_inner %d nheads %d headdim %d ngroups %d d_state %d conv_dim %d d_in_proj %d)",
			c->d_model, c->n_layer, c->d_inner, c->nheads, c->headdim, c->ngroups,
			c->d_state, c->conv_dim, c->d_in_proj);
		return SS_ERR_INVALID;
	}
	if (!ss_dtype_name(m->weights_dtype)) {
		ss_errf(errmsg, 0, "model has an unknown weights dtype %d", (int)m->weights_dtype);
		return SS_ERR_INVALID;
	}
	/* lm_head may be NULL (SS_MODEL_SKIP_LM_HEAD): then no logits */
	if (!m->embedding || !m->norm_f || !m->layers) {
		ss_errf(errmsg, 0, "model has missing weights");
		return SS_ERR_INVALID;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *layer = &m->layers[l];
		if (!layer->norm || !layer->in_proj || !layer->conv_w || !layer->conv_b || !layer->dt_bias ||
		    !layer->A_log || !layer->D || !layer->out_proj ||
		    (m1 ? !layer->x_proj || !layer->dt_proj : !layer->gnorm)) {
			ss_errf(errmsg, 0, "layer %d has missing weights", l);
			return SS_ERR_INVALID;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ public */

/* Checks the arguments shared by the CPU and GPU contexts and allocates a
 * zeroed context bound to m with the driver's arrays for ubatch rows. */
static int ctx_new(ss_forward_ctx **out, const ss_model *m, int n_threads, int ubatch,
		   int64_t ub, ss_forward_ctx **ctx, char *errmsg)
{
	if (!out || !m)
		return ss_errf(errmsg, SS_ERR_INVALID, "no model");
	*out = NULL;
	if (n_threads < 0 || ubatch < 0)
		return ss_errf(errmsg, SS_ERR_INVALID, "negative thread count or ubatch");
	int err = check_model(m, errmsg);
	if (err)
		return err;
	if (!(*ctx = calloc(1, sizeof(**ctx))))
		return SS_ERR_NOMEM;
	(*ctx)->m = m;
	(*ctx)->c = m->cfg;
	(*ctx)->ubatch = ub;
	(*ctx)->segs = calloc((size_t)ub, sizeof(ss_segment));
	(*ctx)->rows = calloc((size_t)ub, sizeof(int64_t));
	(*ctx)->out_seq = calloc((size_t)ub, sizeof(int32_t));
	(*ctx)->out_pos = calloc((size_t)ub, sizeof(int64_t));
	(*ctx)->bytes = sizeof(**ctx) + (size_t)ub * (sizeof(ss_segment) + 2 * sizeof(int64_t) + sizeof(int32_t));
	if (!(*ctx)->segs || !(*ctx)->rows || !(*ctx)->out_seq || !(*ctx)->out_pos) {
		ss_forward_ctx_free(*ctx);
		ss_errf(errmsg, 0, "out of memory for a %lld-token ubatch", (long long)ub);
		return SS_ERR_NOMEM;
	}
	return 0;
}

int ss_forward_ctx_init(ss_forward_ctx **out, const ss_model *m, int n_threads, int ubatch,
			char *errmsg)
{
	ss_forward_ctx *ctx;
	int err;

	if ((err = ctx_new(out, m, n_threads, ubatch, ubatch ? ubatch : 512, &ctx, errmsg)))
		return err;
	err = ss_backend_cpu_init(&ctx->be, &ctx->ops, m, n_threads ? n_threads : 1, ctx->ubatch,
				  errmsg);
	if (err) {
		ss_forward_ctx_free(ctx);
		return err;
	}
	ctx->bytes += ctx->ops->bytes(ctx->be);
	*out = ctx;
	return 0;
}

int ss_forward_ctx_init_dev(ss_forward_ctx **out, const ss_model *m, ss_device *dev,
			    int n_threads, int ubatch, char *errmsg)
{
	const ss_cuda_api *cu = ss_device_cuda(dev);
	ss_forward_ctx *ctx;
	int err;

	/* q8_0 matrices have no CUDA kernels (kernels/ holds f32, bf16 and
	 * f16): the CPU. */
	if (!cu || m->weights_dtype == SS_DTYPE_Q8_0)
		return ss_forward_ctx_init(out, m, n_threads, ubatch, errmsg);
	if ((err = ctx_new(out, m, n_threads, ubatch, ubatch ? ubatch : SS_FORWARD_UBATCH_GPU, &ctx,
			   errmsg)))
		return err;
	ctx->on_device = 1;
	err = cu->backend_init(&ctx->be, &ctx->ops, m, (int)ctx->ubatch, errmsg);
	if (err) {
		ss_forward_ctx_free(ctx);
		return err;
	}
	ctx->bytes += ctx->ops->bytes(ctx->be);
	*out = ctx;
	return 0;
}

int ss_forward_ctx_device(const ss_forward_ctx *ctx)
{
	return ctx && ctx->on_device ? SS_DEVICE_CUDA : SS_DEVICE_CPU;
}

/* Grows ctx->dseqs to n. */
static int dseqs_grow(ss_forward_ctx *ctx, int n)
{
	if (n > ctx->dseqs_cap) {
		ss_forward_seq *p = realloc(ctx->dseqs, (size_t)n * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		ctx->dseqs = p;
		ctx->dseqs_cap = n;
	}
	return 0;
}

/* What a forward call leaves in a state besides its arrays. */
static void stamp(const ss_forward_ctx *ctx, ss_state *st)
{
	if (!st->fingerprint[0])
		memcpy(st->fingerprint, ctx->m->fingerprint, SS_FINGERPRINT_MAX);
	if (!st->dims.arch[0])
		snprintf(st->dims.arch, sizeof(st->dims.arch), "%s", ctx->c.arch);
}

int ss_forward_decode_begin(ss_forward_ctx *ctx, ss_state **states, int n, char *errmsg)
{
	int i, err;

	if (!ctx || n < 0 || (n > 0 && !states) || ctx->bound_on) {
		ss_errf(errmsg, 0, ctx && ctx->bound_on ? "states already bound (no decode_end)"
						     : "invalid arguments");
		return SS_ERR_INVALID;
	}
	if ((err = dseqs_grow(ctx, n)))
		return err;
	for (i = 0; i < n; i++)
		ctx->dseqs[i] = (ss_forward_seq){ .state = states[i] };
	err = check_seqs(ctx, ctx->dseqs, n, SS_LOGITS_NONE, errmsg);
	if (err)
		return err;
	if (n > ctx->bound_cap) {
		ss_state **p = realloc(ctx->bound, (size_t)n * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		ctx->bound = p;
		ctx->bound_cap = n;
	}
	if (ctx->ops->states_in) {
		err = ctx->ops->states_in(ctx->be, states, n);
		if (!err && ctx->ops->sync)
			err = ctx->ops->sync(ctx->be);
		if (err)
			return be_err(ctx, err, errmsg);
	}
	memcpy(ctx->bound, states, (size_t)n * sizeof(*states));
	ctx->nbound = n;
	ctx->bound_on = 1;
	return 0;
}

/* The ops of one decode step over pass p: the layers, then (out) norm_f and
 * lm_head into the logits buffer, and (n_ids > 0) their argmax. */
static int step_ops(ss_forward_ctx *ctx, const ss_pass *p, int out, int32_t n_ids)
{
	const ss_backend_ops *o = ctx->ops;
	int err;

	if ((err = o->embed(ctx->be, p)) || (err = run_layers(ctx, p)) || !out)
		return err;
	if ((err = o->norm_f(ctx->be, NULL, 0, p->T)) || (err = o->lm_head(ctx->be, 0, p->T, NULL)))
		return err;
	return n_ids > 0 ? o->argmax(ctx->be, p->T, n_ids) : 0;
}

/* A decode step, replayed or recorded where the backend can. */
static int step(ss_forward_ctx *ctx, const ss_pass *p, int out, int32_t n_ids)
{
	const ss_backend_ops *o = ctx->ops;
	const int key = out ? (n_ids > 0 ? 2 + n_ids : 1) : 0;
	int err, replayed = 0, again = 0;

	if (o->graph_begin && (err = o->graph_begin(ctx->be, p, key, &replayed)))
		return err;
	if (replayed)
		return 0;
	err = step_ops(ctx, p, out, n_ids);
	if (o->graph_end)
		err = o->graph_end(ctx->be, err, &again);
	if (!err && again)
		err = step_ops(ctx, p, out, n_ids);
	return err;
}

int ss_forward_decode_next(ss_forward_ctx *ctx, const int32_t *tokens, float *logits,
			   int32_t *ids, int32_t n_ids, char *errmsg)
{
	const int64_t V = ctx ? ctx->c.vocab_padded : 0;
	const ss_backend_ops *o = ctx ? ctx->ops : NULL;
	int i, err, nb;

	if (!ctx || !ctx->bound_on || (ctx->nbound > 0 && !tokens) ||
	    (ids && (n_ids < 1 || n_ids > V))) {
		ss_errf(errmsg, 0, ctx && !ctx->bound_on ? "no states bound (decode_begin)"
						      : "invalid arguments");
		return SS_ERR_INVALID;
	}
	if ((logits || ids) && !ctx->m->lm_head) {
		ss_errf(errmsg, 0, "logits asked of a model loaded without lm_head");
		return SS_ERR_INVALID;
	}
	for (i = 0; i < ctx->nbound; i++)
		if (tokens[i] < 0 || tokens[i] >= ctx->c.vocab_padded) {
			ss_errf(errmsg, 0, "sequence %d: token %d is outside [0, %d)", i, (int)tokens[i],
				ctx->c.vocab_padded);
			return SS_ERR_INVALID;
		}
	if ((err = dseqs_grow(ctx, ctx->nbound)))
		return err;
	for (i = 0; i < ctx->nbound; i++)
		ctx->dseqs[i] = (ss_forward_seq){ .tokens = tokens + i, .n_tokens = 1,
						  .state = ctx->bound[i] };
	const int64_t most = o->step_rows && o->step_rows < ctx->ubatch ? o->step_rows : ctx->ubatch;
	for (int b0 = 0; b0 < ctx->nbound; b0 += nb) {
		nb = ctx->nbound - b0 < most ? ctx->nbound - b0 : (int)most;
		for (i = 0; i < nb; i++)
			ctx->segs[i] = (ss_segment){ b0 + i, 0, 1, i };
		const ss_pass p = { ctx->dseqs, ctx->segs, nb, nb, ctx->deterministic, 1,
				    !(logits || ids) };
		if ((err = o->pass_begin(ctx->be, &p)) ||
		    (err = step(ctx, &p, logits || ids, ids ? n_ids : 0)) ||
		    (logits && (err = o->logits(ctx->be, logits + (size_t)b0 * V, 0, nb))) ||
		    (ids && (err = o->ids(ctx->be, ids + b0, nb))) ||
		    (o->sync && (err = o->sync(ctx->be))))
			return be_err(ctx, err, errmsg);
	}
	for (i = 0; i < ctx->nbound; i++) {
		ctx->bound[i]->n_tokens++;
		stamp(ctx, ctx->bound[i]);
	}
	return 0;
}

int ss_forward_decode_end(ss_forward_ctx *ctx, char *errmsg)
{
	int err = 0;

	if (!ctx || !ctx->bound_on) {
		ss_errf(errmsg, 0, "no states bound (decode_begin)");
		return SS_ERR_INVALID;
	}
	if (ctx->ops->states_out) {
		err = ctx->ops->states_out(ctx->be, ctx->bound, ctx->nbound);
		if (!err && ctx->ops->sync)
			err = ctx->ops->sync(ctx->be);
		be_err(ctx, err, errmsg);
	}
	for (int i = 0; i < ctx->nbound; i++)
		stamp(ctx, ctx->bound[i]);
	ctx->bound_on = 0;
	ctx->nbound = 0;
	return err;
}

int ss_forward_ctx_set_deterministic(ss_forward_ctx *ctx, int on)
{
	if (!ctx)
		return SS_ERR_INVALID;
	if (!ctx->ops->deterministic)
		return SS_ERR_UNSUPPORTED;
	ctx->deterministic = on != 0;
	return 0;
}

void ss_forward_ctx_free(ss_forward_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->be)
		ctx->ops->free(ctx->be);
	free(ctx->bound);
	free(ctx->segs);
	free(ctx->rows);
	free(ctx->out_seq);
	free(ctx->out_pos);
	free(ctx->dseqs);
	free(ctx->sts);
	free(ctx->sorted);
	free(ctx);
}

size_t ss_forward_ctx_bytes(const ss_forward_ctx *ctx)
{
	return ctx ? ctx->bytes : 0;
}

int ss_forward_batch_size(const ss_model *m, double extra_bytes, double budget_bytes, int max)
{
	ss_state_dims sd;
	ss_model_state_dims(m, &sd);
	const double per = (double)(ss_state_ssm_len(&sd) + ss_state_conv_len(&sd) +
				    ss_state_logdecay_len(&sd)) * sizeof(float) + extra_bytes;
	const double b = budget_bytes / per;
	return b < 1 ? 1 : b > max ? max : (int)b;
}

/* A fresh sequence's state (ss_forward_seq.fresh) as the ops need it:
 * conv and logdecay zeroed, n_tokens 0, and ssm zeroed when the backend's
 * scan does not start from zeros itself (ss_backend_ops.fresh_ssm) or no
 * scan will run (no tokens). */
static void fresh_state(ss_state *st, int ssm)
{
	const ss_state_dims *d = &st->dims;
	memset(st->conv, 0, ss_state_conv_len(d) * sizeof(float));
	memset(st->logdecay, 0, ss_state_logdecay_len(d) * sizeof(float));
	if (ssm)
		memset(st->ssm, 0, ss_state_ssm_len(d) * sizeof(float));
	st->n_tokens = 0;
}

/* blocked: each sequence's results must not depend on the others (see
 * backend_cpu.c ROW_BLOCK); a sequence that does not fit in the rest of a
 * pass starts the next one, so a sequence is cut into passes at multiples
 * of ubatch only (the scan's logdecay is rounded once per pass). */
static int prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs, ss_logits_mode mode,
		   int blocked, char *errmsg)
{
	const ss_backend_ops *o;
	int err, cur = 0, i, outputs;
	int64_t off = 0;

	if (!ctx || n_seqs < 0 || (n_seqs > 0 && !seqs) ||
	    (mode != SS_LOGITS_NONE && mode != SS_LOGITS_LAST && mode != SS_LOGITS_ALL)) {
		ss_errf(errmsg, 0, "invalid arguments");
		return SS_ERR_INVALID;
	}
	err = check_seqs(ctx, seqs, n_seqs, mode, errmsg);
	if (err)
		return err;
	o = ctx->ops;
	for (i = 0; i < n_seqs; i++)
		if (seqs[i].fresh)
			fresh_state(seqs[i].state, !o->fresh_ssm || seqs[i].n_tokens == 0);
	if (o->states_in) {
		ss_state **p = realloc(ctx->sts, (size_t)(n_seqs ? n_seqs : 1) * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		ctx->sts = p;
		for (i = 0; i < n_seqs; i++)
			ctx->sts[i] = seqs[i].state;
		if ((err = o->states_in(ctx->be, ctx->sts, n_seqs)))
			return be_err(ctx, err, errmsg);
	}
	outputs = any_output(seqs, n_seqs, mode);
	while (cur < n_seqs) {
		int nseg = 0;
		int64_t T = 0;
		while (cur < n_seqs && T < ctx->ubatch && nseg < ctx->ubatch) {
			const ss_forward_seq *q = &seqs[cur];
			int64_t take = q->n_tokens - off;
			if (take > ctx->ubatch - T && blocked && T > 0)
				break;
			if (take > ctx->ubatch - T)
				take = ctx->ubatch - T;
			ctx->segs[nseg++] = (ss_segment){ cur, off, take, T };
			T += take;
			off += take;
			if (off < q->n_tokens)
				break; /* the pass is full; the sequence goes on in the next */
			cur++;
			off = 0;
		}
		if (T == 0)
			continue;
		const ss_pass p = { seqs, ctx->segs, nseg, T, blocked, 0, !outputs };
		if ((err = run_pass(ctx, &p, mode)))
			return be_err(ctx, err, errmsg);
	}
	if (o->states_out) {
		err = o->states_out(ctx->be, ctx->sts, n_seqs);
		if (!err && o->sync)
			err = o->sync(ctx->be);
		if (err)
			return be_err(ctx, err, errmsg);
	}
	for (i = 0; i < n_seqs; i++) {
		seqs[i].state->n_tokens += seqs[i].n_tokens;
		stamp(ctx, seqs[i].state);
	}
	return 0;
}

int ss_forward_prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs,
		       ss_logits_mode mode, char *errmsg)
{
	/* on the CPU, unless $SS_GEMM=blas, every prefill is blocked: the
	 * projections' own kernel makes that cost nothing (ss_forward.h) */
	return prefill(ctx, seqs, n_seqs, mode,
		       ctx && (ctx->deterministic ||
			       (!ctx->on_device && ss_gemm_choice() != SS_GEMM_BLAS)),
		       errmsg);
}

int ss_forward_decode(ss_forward_ctx *ctx, ss_state **states, const int32_t *tokens, int n,
		      float *logits, char *errmsg)
{
	int i;

	if (!ctx || n < 0 || (n > 0 && (!states || !tokens))) {
		ss_errf(errmsg, 0, "invalid arguments");
		return SS_ERR_INVALID;
	}
	/* a deterministic step is a decode pass (its rows' GEMMs row-invariant),
	 * not a blocked prefill of one-token segments */
	if (ctx->on_device || ctx->deterministic) {
		int err = ss_forward_decode_begin(ctx, states, n, errmsg);
		if (err)
			return err;
		err = ss_forward_decode_next(ctx, tokens, logits, NULL, 0, errmsg);
		if (!err)
			return ss_forward_decode_end(ctx, errmsg);
		(void)ss_forward_decode_end(ctx, NULL);
		return err;
	}
	if (dseqs_grow(ctx, n))
		return SS_ERR_NOMEM;
	for (i = 0; i < n; i++)
		ctx->dseqs[i] = (ss_forward_seq){
			.tokens = tokens + i,
			.n_tokens = 1,
			.state = states[i],
			.logits = logits ? logits + (size_t)i * ctx->c.vocab_padded : NULL,
		};
	return prefill(ctx, ctx->dseqs, n, logits ? SS_LOGITS_LAST : SS_LOGITS_NONE, 0, errmsg);
}
