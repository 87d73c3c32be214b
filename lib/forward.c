/*
 * forward.c — the Mamba-2 forward pass on the CPU: prefill (batched) and
 * decode. See ss_forward.h for the contracts.
 *
 * One call is cut into passes of at most `ubatch` tokens. A pass packs the
 * tokens of one or more sequences into row-major [T][...] matrices:
 *   H   [T][d_model]    residual stream (f32, as residual_in_fp32)
 *   U   [T][d_model]    rmsnorm(H) (layer input; later norm_f(H))
 *   ZXD [T][d_in_proj]  in_proj output: z | xBC | dt
 *   XBC [T][conv_dim]   silu(conv(xBC)): x | B | C
 *   DT  [T][nheads]     softplus(dt + dt_bias), clamped
 *   Y   [T][d_inner]    scan output, then gated group-norm output
 * Per layer: U = rmsnorm(H)·w; ZXD = U·in_projᵀ (GEMM); conv + dt (rows in
 * parallel); scan per (sequence, head) in parallel; gate + group norm (rows);
 * H += Y·out_projᵀ (GEMM, beta = 1). A sequence longer than a pass continues
 * in the next pass from the state the previous one left, exactly as
 * llama.cpp's ubatches do (golden c4 is 512 + 170).
 *
 * The GEMMs are split over the pool's threads by rows (large T) or by output
 * columns (small T: decode, where sgemv streams the weights once).
 *
 * ref: golden/README.md §2; mamba_ssm modules/mamba2.py; DESIGN.md §2.
 */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "pool.h"
#include "scan.h"
#include "vec.h"

/* Rows per pass below which a GEMM is split by output columns. */
#define SPLIT_ROWS_MIN 64
/* Last-position rows that share one pass over lm_head. */
#define LAST_GROUP 16

typedef struct {
	int seq;        /* index into the call's seqs */
	int64_t start;  /* first token of the segment within its sequence */
	int64_t n;      /* tokens */
	int64_t row0;   /* first row of the segment in the pass */
	ss_state *st;
} segment;

struct ss_forward_ctx {
	const ss_model *m;
	ss_model_config c;
	ss_pool *pool;
	int n_threads;
	int64_t ubatch;
	float *conv_wt;   /* [n_layer][d_conv][conv_dim]: conv1d weights, tap-major */
	float *A;         /* [n_layer][nheads] = -exp(A_log) */
	double *A64;      /* same, in double, for logdecay */
	float *H, *U, *ZXD, *XBC, *DT, *Y;
	float *tmp;       /* [n_threads][conv_dim] per-thread row */
	int32_t *row_seg; /* [ubatch] segment of each row */
	int64_t *row_pos; /* [ubatch] position of each row within its segment */
	segment *segs;    /* [ubatch] at most one segment per row */
	int32_t *out_seq; /* [ubatch] sequence of each gathered last row */
	float *L;         /* [LAST_GROUP][vocab_padded] logits of gathered rows */
	ss_forward_seq *dseqs; /* decode's seqs, grown on demand */
	int dseqs_cap;
	const ss_state **sorted; /* duplicate-state check */
	int sorted_cap;
	size_t bytes;
};

/* --------------------------------------------------------------- helpers */

static void set_err(char *errmsg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(char *errmsg, const char *fmt, ...)
{
	va_list ap;
	if (!errmsg)
		return;
	va_start(ap, fmt);
	vsnprintf(errmsg, SS_ERRMSG_MAX, fmt, ap);
	va_end(ap);
}

/* torch.nn.functional.softplus with its default threshold 20. */
static inline float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/* [lo, hi) of part i when n items are cut into k near-equal parts. */
static inline void split(int64_t n, int64_t k, int64_t i, int64_t *lo, int64_t *hi)
{
	*lo = n * i / k;
	*hi = n * (i + 1) / k;
}

static void *xalloc(size_t n, size_t size, size_t *bytes)
{
	void *p;
	if (n == 0)
		n = 1;
	p = calloc(n, size);
	if (p)
		*bytes += n * size;
	return p;
}

/* ------------------------------------------------------------------ GEMM */

/* C[M][N] (row stride ldc) = A[M][K] (row stride lda) · W[N][K]ᵀ + beta·C. */
typedef struct {
	const float *A, *W;
	float *C;
	int64_t M, N, K, lda, ldc;
	float beta;
	int by_rows;
	int64_t parts;
} gemm_job;

static void gemm_task(void *arg, int64_t i, int thread)
{
	const gemm_job *j = arg;
	int64_t m0 = 0, m1 = j->M, n0 = 0, n1 = j->N;

	if (j->by_rows)
		split(j->M, j->parts, i, &m0, &m1);
	else {
		/* column cuts on multiples of 16 keep the W slices cache-line aligned */
		int64_t blocks = (j->N + 15) / 16;
		split(blocks, j->parts, i, &n0, &n1);
		n0 *= 16;
		n1 = n1 * 16 < j->N ? n1 * 16 : j->N;
	}
	if (m1 <= m0 || n1 <= n0)
		return;
	if (m1 - m0 == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)(n1 - n0), (blasint)j->K, 1.0f,
			    j->W + n0 * j->K, (blasint)j->K, j->A + m0 * j->lda, 1, j->beta,
			    j->C + m0 * j->ldc + n0, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(m1 - m0),
			    (blasint)(n1 - n0), (blasint)j->K, 1.0f, j->A + m0 * j->lda,
			    (blasint)j->lda, j->W + n0 * j->K, (blasint)j->K, j->beta,
			    j->C + m0 * j->ldc + n0, (blasint)j->ldc);
}

static void gemm(ss_forward_ctx *ctx, const float *A, int64_t lda, const float *W,
		 float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, float beta)
{
	gemm_job j = { A, W, C, M, N, K, lda, ldc, beta, 0, ctx->n_threads };

	if (M <= 0 || N <= 0)
		return;
	/* Row slices: one per thread, each as tall as possible for sgemm's
	 * efficiency. Column slices (weight-streaming, bandwidth-bound): a few
	 * per thread, so that a thread that is descheduled on a busy machine
	 * leaves its share to the others instead of stalling the step. */
	j.by_rows = M >= SPLIT_ROWS_MIN * ctx->n_threads;
	if (!j.by_rows && ctx->n_threads > 1)
		j.parts = 4 * (int64_t)ctx->n_threads;
	if (!j.by_rows && (N + 15) / 16 < j.parts)
		j.parts = (N + 15) / 16;
	ss_pool_run(ctx->pool, j.parts, gemm_task, &j);
}

/* ------------------------------------------------------------- row phases */

typedef struct {
	ss_forward_ctx *ctx;
	int layer;
	int64_t T;
	int64_t parts;
	const segment *segs;
	const float *norm_w; /* for the rmsnorm phase */
	const float *src;    /* rmsnorm input rows [T][d_model] */
	float *dst;          /* rmsnorm output rows */
	int state_only;      /* scan: skip y (last layer, no output rows) */
} row_job;

/* y = x / sqrt(mean(x²) + eps) · w, the sum of squares in double as ggml does. */
static void rmsnorm_row(float *y, const float *x, const float *w, int n, float eps)
{
	const float scale = 1.0f / sqrtf((float)(ss_vec_sumsq(x, n) / n) + eps);
	ss_vec_scale_mul(y, x, scale, w, n);
}

static void rmsnorm_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const int d = j->ctx->c.d_model;
	int64_t r0, r1, r;
	split(j->T, j->parts, i, &r0, &r1);
	for (r = r0; r < r1; r++)
		rmsnorm_row(j->dst + r * d, j->src + r * d, j->norm_w, d, j->ctx->c.eps);
}

/* Causal depthwise conv over [conv_state | xBC] + silu, and dt, for rows of
 * the pass. Rows in the first d_conv-1 positions of a segment read the
 * segment's incoming conv state ([conv_dim][d_conv-1], k = 0 oldest). */
static void conv_dt_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const ss_layer *L = &ctx->m->layers[j->layer];
	const int64_t cd = c->conv_dim, K = c->d_conv, ldz = c->d_in_proj;
	const float *wt = ctx->conv_wt + (size_t)j->layer * K * cd;
	const float dt_max = c->dt_max, dt_min = c->dt_min;
	const int clamp_hi = isfinite(dt_max), clamp_lo = dt_min > 0.0f;
	float *tmp = ctx->tmp + (size_t)thread * cd;
	int64_t r0, r1, r, ch;
	int k, h;

	split(j->T, j->parts, i, &r0, &r1);
	for (r = r0; r < r1; r++) {
		const segment *s = &j->segs[ctx->row_seg[r]];
		const int64_t pos = ctx->row_pos[r];
		float *out = ctx->XBC + r * cd;
		const float *zr = ctx->ZXD + r * ldz;

		memcpy(out, L->conv_b, (size_t)cd * sizeof(float));
		for (k = 0; k < K; k++) {
			const int64_t src = pos - (K - 1) + k; /* position within the segment */
			const float *in;
			if (src >= 0)
				in = ctx->ZXD + (s->row0 + src) * ldz + c->d_inner;
			else {
				const float *st = s->st->conv + (size_t)j->layer * cd * (K - 1) + (src + K - 1);
				for (ch = 0; ch < cd; ch++)
					tmp[ch] = st[ch * (K - 1)];
				in = tmp;
			}
			ss_vec_fma(out, wt + k * cd, in, cd);
		}
		ss_vec_silu(out, cd);
		for (h = 0; h < c->nheads; h++) {
			float dt = softplus(zr[c->d_inner + cd + h] + L->dt_bias[h]);
			if (clamp_hi && dt > dt_max)
				dt = dt_max;
			if (clamp_lo && dt < dt_min)
				dt = dt_min;
			ctx->DT[r * c->nheads + h] = dt;
		}
	}
}

/* y = rmsnorm_grouped(y * silu(z)) * gnorm, groups of d_inner/ngroups. */
static void gate_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const float *gw = ctx->m->layers[j->layer].gnorm;
	const int gs = c->d_inner / c->ngroups;
	int64_t r0, r1, r;
	int g;

	split(j->T, j->parts, i, &r0, &r1);
	for (r = r0; r < r1; r++) {
		float *y = ctx->Y + r * c->d_inner;
		const float *z = ctx->ZXD + r * c->d_in_proj;
		ss_vec_mul_silu(y, z, c->d_inner);
		for (g = 0; g < c->ngroups; g++)
			rmsnorm_row(y + g * gs, y + g * gs, gw + g * gs, gs, c->eps);
	}
}

static void scan_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const segment *s = &j->segs[i / c->nheads];
	const int h = (int)(i % c->nheads);
	const int g = h / (c->nheads / c->ngroups);
	const int l = j->layer;
	const size_t hs = (size_t)c->headdim * c->d_state;
	const float *xbc = ctx->XBC + s->row0 * c->conv_dim;
	ss_scan_head_args a = {
		.n = s->n, .P = c->headdim, .N = c->d_state,
		.x = xbc + (size_t)h * c->headdim, .ldx = c->conv_dim,
		.B = xbc + c->d_inner + (size_t)g * c->d_state, .ldb = c->conv_dim,
		.C = xbc + c->d_inner + (size_t)(c->ngroups + g) * c->d_state, .ldc = c->conv_dim,
		.dt = ctx->DT + s->row0 * c->nheads + h, .lddt = c->nheads,
		.A = ctx->A[l * c->nheads + h],
		.D = ctx->m->layers[l].D[h],
		.s = s->st->ssm + ((size_t)l * c->nheads + h) * hs,
		.y = j->state_only ? NULL : ctx->Y + s->row0 * c->d_inner + (size_t)h * c->headdim,
		.ldy = c->d_inner,
	};
	float *ld = &s->st->logdecay[l * c->nheads + h];
	double dtsum = ss_scan_head(&a);
	*ld = (float)((double)*ld + ctx->A64[l * c->nheads + h] * dtsum);
}

/* The new conv state of a segment: the last d_conv-1 inputs of
 * [old state | segment xBC]. Runs after every row has read the old state. */
static void conv_state_update(ss_forward_ctx *ctx, const segment *s, int l)
{
	const ss_model_config *c = &ctx->c;
	const int64_t cd = c->conv_dim, K1 = c->d_conv - 1;
	float *st = s->st->conv + (size_t)l * cd * K1;
	int64_t k, ch;

	if (K1 <= 0)
		return;
	if (s->n >= K1) {
		for (k = 0; k < K1; k++) {
			const float *in = ctx->ZXD + (s->row0 + s->n - K1 + k) * c->d_in_proj + c->d_inner;
			for (ch = 0; ch < cd; ch++)
				st[ch * K1 + k] = in[ch];
		}
		return;
	}
	/* fewer tokens than taps: shift the old state left by n, append */
	for (ch = 0; ch < cd; ch++) {
		float *w = st + ch * K1;
		for (k = 0; k < K1 - s->n; k++)
			w[k] = w[k + s->n];
		for (k = 0; k < s->n; k++)
			w[K1 - s->n + k] = ctx->ZXD[(s->row0 + k) * c->d_in_proj + c->d_inner + ch];
	}
}

/* ------------------------------------------------------------------ passes */

static int64_t row_parts(const ss_forward_ctx *ctx, int64_t T)
{
	int64_t p = (int64_t)ctx->n_threads * 4;
	return T < p ? T : p;
}

/* Runs the layers over one pass of T rows (segments already laid out,
 * embeddings gathered into H). skip_last_mix: the outputs of the last
 * layer's mixer are not needed (no output rows), only its state. */
static void run_layers(ss_forward_ctx *ctx, const segment *segs, int nseg, int64_t T,
		       int skip_last_mix)
{
	const ss_model_config *c = &ctx->c;
	row_job j = { .ctx = ctx, .T = T, .parts = row_parts(ctx, T), .segs = segs };
	int l, i;

	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &ctx->m->layers[l];
		const int last = l == c->n_layer - 1;
		j.layer = l;
		j.norm_w = L->norm;
		j.src = ctx->H;
		j.dst = ctx->U;
		ss_pool_run(ctx->pool, j.parts, rmsnorm_task, &j);
		gemm(ctx, ctx->U, c->d_model, L->in_proj, ctx->ZXD, c->d_in_proj, T,
		     c->d_in_proj, c->d_model, 0.0f);
		ss_pool_run(ctx->pool, j.parts, conv_dt_task, &j);
		for (i = 0; i < nseg; i++)
			conv_state_update(ctx, &segs[i], l);
		j.state_only = last && skip_last_mix;
		ss_pool_run(ctx->pool, (int64_t)nseg * c->nheads, scan_task, &j);
		if (last && skip_last_mix)
			break;
		ss_pool_run(ctx->pool, j.parts, gate_task, &j);
		gemm(ctx, ctx->Y, c->d_inner, L->out_proj, ctx->H, c->d_model, T, c->d_model,
		     c->d_inner, 1.0f);
	}
}

/* norm_f of pass rows [r0, r0+nr) into U (same rows), rows in parallel. */
static void norm_f_rows(ss_forward_ctx *ctx, int64_t r0, int64_t nr)
{
	const int64_t d = ctx->c.d_model;
	row_job j = { .ctx = ctx, .T = nr, .parts = row_parts(ctx, nr), .norm_w = ctx->m->norm_f,
		      .src = ctx->H + r0 * d, .dst = ctx->U + r0 * d };
	ss_pool_run(ctx->pool, j.parts, rmsnorm_task, &j);
}

/* SS_LOGITS_ALL: every row of the segment, straight into the caller's arrays. */
static void emit_all(ss_forward_ctx *ctx, const segment *s, const ss_forward_seq *q)
{
	const ss_model_config *c = &ctx->c;
	const int64_t d = c->d_model;

	if (!q->hidden && !q->logits)
		return;
	norm_f_rows(ctx, s->row0, s->n);
	if (q->hidden)
		memcpy(q->hidden + s->start * d, ctx->U + s->row0 * d, (size_t)(s->n * d) * sizeof(float));
	if (q->logits)
		gemm(ctx, ctx->U + s->row0 * d, d, ctx->m->lm_head, q->logits + s->start * c->vocab_padded,
		     c->vocab_padded, s->n, c->vocab_padded, d, 0.0f);
}

/* SS_LOGITS_LAST: the last row of each sequence that ends in this pass. The
 * rows are gathered so that up to LAST_GROUP of them share one pass over
 * lm_head (batched decode reads the 150 MB lm_head of mamba2-130m once per
 * group, not once per sequence), then copied to their callers' arrays. */
static void emit_last(ss_forward_ctx *ctx, ss_forward_seq *seqs, const segment *segs, int nseg)
{
	const ss_model_config *c = &ctx->c;
	const int64_t d = c->d_model, V = c->vocab_padded;
	int i, k, n = 0;

	for (i = 0; i < nseg; i++) {
		const segment *s = &segs[i];
		const ss_forward_seq *q = &seqs[s->seq];
		if (s->start + s->n != q->n_tokens || (!q->hidden && !q->logits))
			continue;
		/* row n of U, in order; n <= the segment's own last row, so no
		 * row is overwritten before it is read */
		memcpy(ctx->H + n * d, ctx->H + (s->row0 + s->n - 1) * d, (size_t)d * sizeof(float));
		ctx->out_seq[n++] = s->seq;
	}
	if (n == 0)
		return;
	norm_f_rows(ctx, 0, n);
	for (i = 0; i < n; i += LAST_GROUP) {
		const int g = n - i < LAST_GROUP ? n - i : LAST_GROUP;
		int any_logits = 0;
		for (k = 0; k < g; k++) {
			const ss_forward_seq *q = &seqs[ctx->out_seq[i + k]];
			if (q->hidden)
				memcpy(q->hidden, ctx->U + (i + k) * d, (size_t)d * sizeof(float));
			any_logits |= q->logits != NULL;
		}
		if (!any_logits)
			continue;
		gemm(ctx, ctx->U + i * d, d, ctx->m->lm_head, ctx->L, V, g, V, d, 0.0f);
		for (k = 0; k < g; k++) {
			const ss_forward_seq *q = &seqs[ctx->out_seq[i + k]];
			if (q->logits)
				memcpy(q->logits, ctx->L + k * V, (size_t)V * sizeof(float));
		}
	}
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

static void run_pass(ss_forward_ctx *ctx, ss_forward_seq *seqs, const segment *segs, int nseg,
		     int64_t T, ss_logits_mode mode, int outputs)
{
	const ss_model_config *c = &ctx->c;
	int i;
	int64_t k;

	for (i = 0; i < nseg; i++) {
		const segment *s = &segs[i];
		const int32_t *tok = seqs[s->seq].tokens + s->start;
		for (k = 0; k < s->n; k++) {
			memcpy(ctx->H + (s->row0 + k) * c->d_model,
			       ctx->m->embedding + (size_t)tok[k] * c->d_model,
			       (size_t)c->d_model * sizeof(float));
			ctx->row_seg[s->row0 + k] = i;
			ctx->row_pos[s->row0 + k] = k;
		}
	}
	run_layers(ctx, segs, nseg, T, !outputs);
	if (outputs && mode == SS_LOGITS_ALL)
		for (i = 0; i < nseg; i++)
			emit_all(ctx, &segs[i], &seqs[segs[i].seq]);
	else if (outputs)
		emit_last(ctx, seqs, segs, nseg);
}

/* -------------------------------------------------------------- checking */

static void model_state_dims(const ss_model_config *c, ss_state_dims *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->arch, sizeof(d->arch), "mamba2");
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
			set_err(errmsg, "sequence %d: no state arrays", i);
			return SS_ERR_INVALID;
		}
		d = &st->dims;
		if ((d->arch[0] && strcmp(d->arch, want.arch) != 0) || d->n_layer != want.n_layer ||
		    d->nheads != want.nheads || d->headdim != want.headdim ||
		    d->d_state != want.d_state || d->conv_dim != want.conv_dim ||
		    d->d_conv != want.d_conv) {
			set_err(errmsg,
				"sequence %d: state dims (n_layer %d nheads %d headdim %d d_state %d conv_dim %d d_conv %d) differ from the model's (%d %d %d %d %d %d)",
				i, d->n_layer, d->nheads, d->headdim, d->d_state, d->conv_dim, d->d_conv,
				want.n_layer, want.nheads, want.headdim, want.d_state, want.conv_dim, want.d_conv);
			return SS_ERR_MISMATCH;
		}
		if (st->fingerprint[0] && ctx->m->fingerprint[0] &&
		    strncmp(st->fingerprint, ctx->m->fingerprint, SS_FINGERPRINT_MAX) != 0) {
			set_err(errmsg, "sequence %d: state of model %.16s, not of this model %.16s", i,
				st->fingerprint, ctx->m->fingerprint);
			return SS_ERR_MISMATCH;
		}
		if (mode != SS_LOGITS_NONE && q->logits && !ctx->m->lm_head) {
			set_err(errmsg, "sequence %d: logits asked of a model loaded without lm_head", i);
			return SS_ERR_INVALID;
		}
		if (q->n_tokens < 0 || (q->n_tokens > 0 && !q->tokens)) {
			set_err(errmsg, "sequence %d: bad token array", i);
			return SS_ERR_INVALID;
		}
		for (k = 0; k < q->n_tokens; k++)
			if (q->tokens[k] < 0 || q->tokens[k] >= c->vocab_padded) {
				set_err(errmsg, "sequence %d: token %lld at position %lld is outside [0, %d)",
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
				set_err(errmsg, "the same state is given for two sequences");
				return SS_ERR_INVALID;
			}
	}
	return 0;
}

static int check_model(const ss_model *m, char *errmsg)
{
	const ss_model_config *c = &m->cfg;
	int l;

	if (c->d_model <= 0 || c->n_layer <= 0 || c->d_state <= 0 || c->headdim <= 0 ||
	    c->nheads <= 0 || c->ngroups <= 0 || c->d_conv <= 0 || c->vocab_padded <= 0 ||
	    c->nheads % c->ngroups != 0 || c->d_inner != c->nheads * c->headdim ||
	    c->d_inner % c->ngroups != 0 ||
	    c->conv_dim != c->d_inner + 2 * c->ngroups * c->d_state ||
	    c->d_in_proj != c->d_inner + c->conv_dim + c->nheads) {
		set_err(errmsg, "inconsistent model dims (d_model %d n_layer %d d_inner %d nheads %d headdim %d ngroups %d d_state %d conv_dim %d d_in_proj %d)",
			c->d_model, c->n_layer, c->d_inner, c->nheads, c->headdim, c->ngroups,
			c->d_state, c->conv_dim, c->d_in_proj);
		return SS_ERR_INVALID;
	}
	/* lm_head may be NULL (SS_MODEL_SKIP_LM_HEAD): then no logits */
	if (!m->embedding || !m->norm_f || !m->layers) {
		set_err(errmsg, "model has missing weights");
		return SS_ERR_INVALID;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &m->layers[l];
		if (!L->norm || !L->in_proj || !L->conv_w || !L->conv_b || !L->dt_bias ||
		    !L->A_log || !L->D || !L->gnorm || !L->out_proj) {
			set_err(errmsg, "layer %d has missing weights", l);
			return SS_ERR_INVALID;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ public */

int ss_forward_ctx_init(ss_forward_ctx **out, const ss_model *m, int n_threads, int ubatch,
			char *errmsg)
{
	ss_forward_ctx *ctx;
	const ss_model_config *c;
	int64_t ub;
	int err, l, h, k, ch;

	if (!out || !m) {
		set_err(errmsg, "no model");
		return SS_ERR_INVALID;
	}
	*out = NULL;
	if (n_threads < 0 || ubatch < 0) {
		set_err(errmsg, "negative thread count or ubatch");
		return SS_ERR_INVALID;
	}
	err = check_model(m, errmsg);
	if (err)
		return err;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return SS_ERR_NOMEM;
	ctx->m = m;
	ctx->c = m->cfg;
	c = &ctx->c;
	ctx->n_threads = n_threads ? n_threads : 1;
	ctx->ubatch = ub = ubatch ? ubatch : 512;
	openblas_set_num_threads(1);
	err = ss_pool_init(&ctx->pool, ctx->n_threads);
	if (err) {
		set_err(errmsg, "cannot start %d threads", ctx->n_threads);
		free(ctx);
		return err;
	}
	ctx->bytes = sizeof(*ctx);
	ctx->conv_wt = xalloc((size_t)c->n_layer * c->d_conv * c->conv_dim, sizeof(float), &ctx->bytes);
	ctx->A = xalloc((size_t)c->n_layer * c->nheads, sizeof(float), &ctx->bytes);
	ctx->A64 = xalloc((size_t)c->n_layer * c->nheads, sizeof(double), &ctx->bytes);
	ctx->H = xalloc((size_t)ub * c->d_model, sizeof(float), &ctx->bytes);
	ctx->U = xalloc((size_t)ub * c->d_model, sizeof(float), &ctx->bytes);
	ctx->ZXD = xalloc((size_t)ub * c->d_in_proj, sizeof(float), &ctx->bytes);
	ctx->XBC = xalloc((size_t)ub * c->conv_dim, sizeof(float), &ctx->bytes);
	ctx->DT = xalloc((size_t)ub * c->nheads, sizeof(float), &ctx->bytes);
	ctx->Y = xalloc((size_t)ub * c->d_inner, sizeof(float), &ctx->bytes);
	ctx->tmp = xalloc((size_t)ctx->n_threads * c->conv_dim, sizeof(float), &ctx->bytes);
	ctx->row_seg = xalloc((size_t)ub, sizeof(int32_t), &ctx->bytes);
	ctx->row_pos = xalloc((size_t)ub, sizeof(int64_t), &ctx->bytes);
	ctx->segs = xalloc((size_t)ub, sizeof(segment), &ctx->bytes);
	ctx->out_seq = xalloc((size_t)ub, sizeof(int32_t), &ctx->bytes);
	ctx->L = xalloc((size_t)LAST_GROUP * c->vocab_padded, sizeof(float), &ctx->bytes);
	if (!ctx->conv_wt || !ctx->A || !ctx->A64 || !ctx->H || !ctx->U || !ctx->ZXD ||
	    !ctx->XBC || !ctx->DT || !ctx->Y || !ctx->tmp || !ctx->row_seg || !ctx->row_pos || !ctx->segs ||
	    !ctx->out_seq || !ctx->L) {
		ss_forward_ctx_free(ctx);
		set_err(errmsg, "out of memory for a %lld-token ubatch", (long long)ub);
		return SS_ERR_NOMEM;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &m->layers[l];
		for (k = 0; k < c->d_conv; k++)
			for (ch = 0; ch < c->conv_dim; ch++)
				ctx->conv_wt[((size_t)l * c->d_conv + k) * c->conv_dim + ch] =
					L->conv_w[(size_t)ch * c->d_conv + k];
		for (h = 0; h < c->nheads; h++) {
			ctx->A[l * c->nheads + h] = -expf(L->A_log[h]);
			ctx->A64[l * c->nheads + h] = -exp((double)L->A_log[h]);
		}
	}
	*out = ctx;
	return 0;
}

void ss_forward_ctx_free(ss_forward_ctx *ctx)
{
	if (!ctx)
		return;
	ss_pool_free(ctx->pool);
	free(ctx->conv_wt);
	free(ctx->A);
	free(ctx->A64);
	free(ctx->H);
	free(ctx->U);
	free(ctx->ZXD);
	free(ctx->XBC);
	free(ctx->DT);
	free(ctx->Y);
	free(ctx->tmp);
	free(ctx->row_seg);
	free(ctx->row_pos);
	free(ctx->segs);
	free(ctx->out_seq);
	free(ctx->L);
	free(ctx->dseqs);
	free(ctx->sorted);
	free(ctx);
}

size_t ss_forward_ctx_bytes(const ss_forward_ctx *ctx)
{
	return ctx ? ctx->bytes : 0;
}

int ss_forward_prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs,
		       ss_logits_mode mode, char *errmsg)
{
	int err, cur = 0, i, outputs;
	int64_t off = 0;

	if (!ctx || n_seqs < 0 || (n_seqs > 0 && !seqs) ||
	    (mode != SS_LOGITS_NONE && mode != SS_LOGITS_LAST && mode != SS_LOGITS_ALL)) {
		set_err(errmsg, "invalid arguments");
		return SS_ERR_INVALID;
	}
	err = check_seqs(ctx, seqs, n_seqs, mode, errmsg);
	if (err)
		return err;
	outputs = any_output(seqs, n_seqs, mode);
	while (cur < n_seqs) {
		int nseg = 0;
		int64_t T = 0;
		while (cur < n_seqs && T < ctx->ubatch) {
			ss_forward_seq *q = &seqs[cur];
			int64_t take = q->n_tokens - off;
			if (take <= 0) {
				cur++;
				off = 0;
				continue;
			}
			if (take > ctx->ubatch - T)
				take = ctx->ubatch - T;
			ctx->segs[nseg] = (segment){ cur, off, take, T, q->state };
			nseg++;
			T += take;
			off += take;
			if (off == q->n_tokens) {
				cur++;
				off = 0;
			}
		}
		if (nseg > 0)
			run_pass(ctx, seqs, ctx->segs, nseg, T, mode, outputs);
	}
	for (i = 0; i < n_seqs; i++) {
		ss_state *st = seqs[i].state;
		st->n_tokens += seqs[i].n_tokens;
		if (!st->fingerprint[0])
			memcpy(st->fingerprint, ctx->m->fingerprint, SS_FINGERPRINT_MAX);
		if (!st->dims.arch[0])
			snprintf(st->dims.arch, sizeof(st->dims.arch), "mamba2");
	}
	return 0;
}

int ss_forward_decode(ss_forward_ctx *ctx, ss_state **states, const int32_t *tokens, int n,
		      float *logits, char *errmsg)
{
	int i;

	if (!ctx || n < 0 || (n > 0 && (!states || !tokens))) {
		set_err(errmsg, "invalid arguments");
		return SS_ERR_INVALID;
	}
	if (n > ctx->dseqs_cap) {
		ss_forward_seq *p = realloc(ctx->dseqs, (size_t)n * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		ctx->dseqs = p;
		ctx->dseqs_cap = n;
	}
	for (i = 0; i < n; i++)
		ctx->dseqs[i] = (ss_forward_seq){
			.tokens = tokens + i,
			.n_tokens = 1,
			.state = states[i],
			.logits = logits ? logits + (size_t)i * ctx->c.vocab_padded : NULL,
		};
	return ss_forward_prefill(ctx, ctx->dseqs, n, logits ? SS_LOGITS_LAST : SS_LOGITS_NONE,
				  errmsg);
}
