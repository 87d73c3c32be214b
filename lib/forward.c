/*
 * forward.c — the Mamba-2 forward pass: prefill (batched) and decode. See
 * ss_forward.h for the contracts. On the CPU it is the ops of ss_ops.h
 * (lib/ops/) run over this file's thread pool; a context made on a CUDA
 * device hands every call to the plugin (kernels/forward.cu) after the same
 * argument checks.
 *
 * One call is cut into passes of at most `ubatch` tokens. A pass packs the
 * tokens of one or more sequences into row-major [T][...] matrices:
 *   H   [T][d_model]    residual stream (f32, as residual_in_fp32)
 *   U   [T][d_model]    rmsnorm(H) (layer input; later norm_f(H))
 *   ZXD [T][d_in_proj]  in_proj output: z | xBC | dt
 *   XBC [T][conv_dim]   silu(conv(xBC)): x | B | C
 *   DT  [T][nheads]     softplus(dt + dt_bias), clamped
 *   Y   [T][d_inner]    scan output, then gated group-norm output
 * Per layer: U = rmsnorm(H)·w; ZXD = U·in_projᵀ (GEMM); conv (per segment,
 * channel slices in parallel; it also leaves the new conv state); dt (rows);
 * scan per (sequence, block of heads) in parallel, in the chunked form
 * (scan.h: matrix products through sgemm) for all but short segments;
 * gate + group norm (rows);
 * H += Y·out_projᵀ (GEMM, beta = 1). A sequence longer than a pass continues
 * in the next pass from the state the previous one left, exactly as
 * llama.cpp's ubatches do (golden c4 is 512 + 170).
 *
 * The GEMMs are split over the pool's threads by rows (large T) or by output
 * columns (small T: decode, where sgemv streams the weights once); in a
 * deterministic prefill, as (row block of one segment, column block) tasks
 * (see ROW_BLOCK).
 *
 * ref: golden/README.md §2; mamba_ssm modules/mamba2.py; DESIGN.md §2.
 */
#include "blas.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "device_plugin.h"
#include "ops/linear.h"
#include "pool.h"
#include "ops/scan.h"

/* Rows per pass below which a GEMM is split by output columns. */
#define SPLIT_ROWS_MIN 64
/* Deterministic prefill GEMMs are cut into calls of at most ROW_BLOCK rows,
 * counted from each segment's first row, by COL_BLOCK output columns (a
 * multiple of 16). OpenBLAS rounds a row differently by the call's shape and
 * the row's place in it (tail kernels, gemv for one row), so shapes that
 * depend only on the segment keep a document's state the same bytes
 * whatever its batch neighbours and the thread count. sgemm runs 256 x 256
 * calls within about 5% of whole-matrix calls (Haswell kernels, mamba2-130m
 * shapes); a 64-row call is about 20% slower. */
#define ROW_BLOCK 256
#define COL_BLOCK 256
/* Last-position rows that share one pass over lm_head. */
#define LAST_GROUP 16
/* With bf16/f16 weights, a GEMM of more rows than this per call widens
 * COL_BLOCK-row panels of W into f32 and runs sgemm on them; fewer rows
 * (decode) stream W through the 16-bit kernel. */
#define W16_DOT_ROWS 4
/* Segments of at least this many tokens are scanned in the chunked form
 * (scan.h), shorter ones (decode) token by token. */
#define SCAN_CHUNKED_MIN 16
/* Scan tasks per segment in a deterministic pass (heads per task must not
 * depend on the batch or the threads: they set the chunk products' shapes). */
#define SCAN_TASKS_DET 4

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
	int deterministic; /* see ss_forward_ctx_set_deterministic */
	float *conv_wt;   /* [n_layer][d_conv][conv_dim]: conv1d weights, tap-major */
	float *wpanel;    /* [n_threads][COL_BLOCK][max(d_model, d_inner)]: 16-bit W widened */
	float *A;         /* [n_layer][nheads]: -exp(A_log) */
	float *scan_work; /* [n_threads][scan_work_len]: ss_scan_chunked's work */
	size_t scan_work_len;
	double *scan_dtsum; /* [n_threads][nheads] */
	float *H, *U, *ZXD, *XBC, *DT, *Y;
	segment *segs;    /* [ubatch] at most one segment per row */
	int64_t *blk;     /* [ubatch][2] prefill GEMM row blocks: first row, rows */
	int32_t *out_seq; /* [ubatch] sequence of each gathered last row */
	float *L;         /* [LAST_GROUP][vocab_padded] logits of gathered rows */
	ss_forward_seq *dseqs; /* decode's seqs, grown on demand */
	int dseqs_cap;
	const ss_state **sorted; /* duplicate-state check */
	int sorted_cap;
	size_t bytes;
	/* a CUDA context: the plugin runs the passes (pool and scratch unused) */
	const ss_cuda_api *cu;
	ss_cuda_fwd *g;
	/* states bound by ss_forward_decode_begin */
	ss_state **bound;
	int nbound, bound_cap, bound_on;
	float *blogits; /* [bound_cap][vocab_padded], CPU greedy without logits */
};

/* --------------------------------------------------------------- helpers */

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
	const float *A;
	const void *W;    /* in wt */
	ss_dtype wt;
	float *wpanel;    /* see ss_forward_ctx */
	float *C;
	int64_t M, N, K, lda, ldc;
	float beta;
	int by_rows;
	int64_t parts;
	const int64_t *blk; /* row blocks (prefill), else NULL */
	int64_t ncb;        /* column blocks per row block */
} gemm_job;

static void gemm_task(void *arg, int64_t i, int thread)
{
	const gemm_job *j = arg;
	int64_t m0 = 0, m1 = j->M, n0 = 0, n1 = j->N;

	if (j->blk) {
		m0 = j->blk[2 * (i / j->ncb)];
		m1 = m0 + j->blk[2 * (i / j->ncb) + 1];
		n0 = i % j->ncb * COL_BLOCK;
		n1 = n0 + COL_BLOCK < j->N ? n0 + COL_BLOCK : j->N;
	} else if (j->by_rows)
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
	const size_t esz = ss_dtype_size(j->wt);
	if (j->wt != SS_DTYPE_F32 && m1 - m0 > W16_DOT_ROWS) {
		float *P = j->wpanel + (size_t)thread * COL_BLOCK * j->K;
		for (int64_t n = n0, nb; n < n1; n += nb) {
			nb = n1 - n < COL_BLOCK ? n1 - n : COL_BLOCK;
			ss_matvec_widen(P, (const char *)j->W + n * j->K * esz, j->wt, (size_t)(nb * j->K));
			(void)ss_linear_cpu(j->C + m0 * j->ldc + n, j->ldc, j->A + m0 * j->lda, j->lda, P,
					    SS_DTYPE_F32, m1 - m0, nb, j->K, j->beta);
		}
		return;
	}
	/* dtype checked at load, sizes here: cannot fail */
	(void)ss_linear_cpu(j->C + m0 * j->ldc + n0, j->ldc, j->A + m0 * j->lda, j->lda,
			    (const char *)j->W + n0 * j->K * esz, j->wt, m1 - m0, n1 - n0, j->K,
			    j->beta);
}

/* nblk > 0: the rows are ctx->blk's blocks (deterministic prefill); else M
 * rows cut by thread count. */
static void gemm(ss_forward_ctx *ctx, int64_t nblk, const float *A, int64_t lda, const void *W,
		 float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, float beta)
{
	gemm_job j = { A, W, ctx->m->wtype, ctx->wpanel, C, M, N, K, lda, ldc, beta, 0,
		       ctx->n_threads, NULL, 0 };

	if (M <= 0 || N <= 0)
		return;
	if (nblk > 0) {
		j.blk = ctx->blk;
		j.ncb = (N + COL_BLOCK - 1) / COL_BLOCK;
		ss_pool_run(ctx->pool, nblk * j.ncb, gemm_task, &j);
		return;
	}
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
	int64_t conv_parts;  /* channel slices per segment in conv_task */
	int scan_hb;         /* heads per scan task (a divisor of the heads per group) */
} row_job;

static void rmsnorm_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const int d = j->ctx->c.d_model;
	int64_t r0, r1;
	split(j->T, j->parts, i, &r0, &r1);
	ss_rmsnorm_cpu(j->dst + r0 * d, (float *)j->src + r0 * d, NULL, j->norm_w, r1 - r0, d,
		       j->ctx->c.eps);
}

/* Causal conv + silu of one segment over a range of channels (task i:
 * segment i / conv_parts, channel slice i % conv_parts). The op reads the
 * segment's incoming conv state and leaves its new one: channel slices and
 * segments (distinct states) never share state entries. */
static void conv_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const segment *s = &j->segs[i / j->conv_parts];
	const int64_t cd = c->conv_dim, K1 = c->d_conv - 1;
	const int64_t start[2] = { 0, s->n };
	int64_t c0, c1;

	/* slices on multiples of 8 channels keep the vector loops whole */
	split((cd + 7) / 8, j->conv_parts, i % j->conv_parts, &c0, &c1);
	c0 *= 8;
	c1 = c1 * 8 < cd ? c1 * 8 : cd;
	if (c1 <= c0)
		return;
	ss_conv1d_silu_cpu(ctx->XBC + s->row0 * cd + c0, cd,
			   ctx->ZXD + s->row0 * c->d_in_proj + c->d_inner + c0, c->d_in_proj, start, 1,
			   s->st->conv + (size_t)j->layer * cd * K1 + c0 * K1, 0,
			   ctx->conv_wt + (size_t)j->layer * c->d_conv * cd + c0, cd,
			   ctx->m->layers[j->layer].conv_b + c0, (int)(c1 - c0), c->d_conv);
}

static void dt_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_model_config *c = &j->ctx->c;
	int64_t r0, r1;
	split(j->T, j->parts, i, &r0, &r1);
	ss_dt_softplus_cpu(j->ctx->DT + r0 * c->nheads, c->nheads,
			   j->ctx->ZXD + r0 * c->d_in_proj + c->d_inner + c->conv_dim, c->d_in_proj,
			   j->ctx->m->layers[j->layer].dt_bias, r1 - r0, c->nheads, c->dt_min,
			   c->dt_max);
}

/* y = rmsnorm_grouped(y * silu(z)) * gnorm, groups of d_inner/ngroups. */
static void gate_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	int64_t r0, r1;

	split(j->T, j->parts, i, &r0, &r1);
	ss_gated_rmsnorm_cpu(ctx->Y + r0 * c->d_inner, c->d_inner, ctx->ZXD + r0 * c->d_in_proj,
			     c->d_in_proj, ctx->m->layers[j->layer].gnorm, r1 - r0, c->d_inner,
			     c->ngroups, c->eps);
}

/* The scan of one segment over scan_hb heads of one group (task i:
 * segment i / tasks per segment, heads from (i % tasks per segment) ·
 * scan_hb): chunked for a long segment, else the op head by head with its
 * pointers offset to the head and its B/C group. */
static void scan_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_forward_ctx *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const int tps = c->nheads / j->scan_hb;
	const segment *s = &j->segs[i / tps];
	const int h0 = (int)(i % tps) * j->scan_hb;
	const int g = h0 / (c->nheads / c->ngroups);
	const int l = j->layer;
	const ss_layer *L = &ctx->m->layers[l];
	const size_t hs = (size_t)c->headdim * c->d_state;
	const float *xbc = ctx->XBC + s->row0 * c->conv_dim;
	const float *B = xbc + c->d_inner + (size_t)g * c->d_state;
	const float *C = xbc + c->d_inner + (size_t)(c->ngroups + g) * c->d_state;
	float *y = j->state_only ? NULL : ctx->Y + s->row0 * c->d_inner + (size_t)h0 * c->headdim;
	float *logdecay = &s->st->logdecay[l * c->nheads + h0];
	int h;

	if (s->n >= SCAN_CHUNKED_MIN) {
		double *dtsum = ctx->scan_dtsum + (size_t)thread * c->nheads;
		const ss_scan_chunked_args a = {
			.n = s->n, .nh = j->scan_hb, .P = c->headdim, .N = c->d_state,
			.x = xbc + (size_t)h0 * c->headdim, .ldx = c->conv_dim,
			.B = B, .ldb = c->conv_dim, .C = C, .ldc = c->conv_dim,
			.dt = ctx->DT + s->row0 * c->nheads + h0, .lddt = c->nheads,
			.A = ctx->A + (size_t)l * c->nheads + h0, .D = L->D + h0,
			.s = s->st->ssm + ((size_t)l * c->nheads + h0) * hs,
			.y = y, .ldy = c->d_inner, .dtsum = dtsum,
			.work = ctx->scan_work + (size_t)thread * ctx->scan_work_len,
		};
		ss_scan_chunked(&a);
		/* as ss_ssm_scan_cpu does */
		for (h = 0; h < j->scan_hb; h++)
			logdecay[h] = (float)((double)logdecay[h] -
					      exp((double)L->A_log[h0 + h]) * dtsum[h]);
		return;
	}
	for (h = h0; h < h0 + j->scan_hb; h++) {
		const ss_scan_dims d1 = { 1, c->headdim, c->d_state, 1 };
		const int64_t start[2] = { 0, s->n };
		/* dims and strides were checked at init: cannot fail */
		(void)ss_ssm_scan_cpu(
			&d1, start, 1, xbc + (size_t)h * c->headdim, c->conv_dim, B, c->conv_dim, C,
			c->conv_dim, ctx->DT + s->row0 * c->nheads + h, c->nheads, L->A_log + h, L->D + h,
			s->st->ssm + ((size_t)l * c->nheads + h) * hs, 0,
			y ? y + (size_t)(h - h0) * c->headdim : NULL, c->d_inner,
			&s->st->logdecay[l * c->nheads + h], 0);
	}
}

/* Heads per scan task: the largest divisor of the heads per group that
 * still gives `want` tasks per segment. */
static int scan_heads_per_task(const ss_model_config *c, int64_t want)
{
	const int hpg = c->nheads / c->ngroups;
	int d;
	for (d = hpg; d > 1; d--)
		if (hpg % d == 0 && c->nheads / d >= want)
			return d;
	return 1;
}

/* ------------------------------------------------------------------ passes */

static int64_t row_parts(const ss_forward_ctx *ctx, int64_t T)
{
	int64_t p = (int64_t)ctx->n_threads * 4;
	return T < p ? T : p;
}

/* Runs the layers over one pass of T rows (segments already laid out,
 * embeddings gathered into H). skip_last_mix: the outputs of the last
 * layer's mixer are not needed (no output rows), only its state. blocked:
 * the GEMMs run in ROW_BLOCK blocks of each segment (deterministic), else
 * split by thread count. */
static void run_layers(ss_forward_ctx *ctx, const segment *segs, int nseg, int64_t T,
		       int skip_last_mix, int blocked)
{
	const ss_model_config *c = &ctx->c;
	row_job j = { .ctx = ctx, .T = T, .parts = row_parts(ctx, T), .segs = segs };
	int64_t nblk = 0, r;
	int l, i;

	for (i = 0; blocked && i < nseg; i++)
		for (r = 0; r < segs[i].n; r += ROW_BLOCK, nblk++) {
			ctx->blk[2 * nblk] = segs[i].row0 + r;
			ctx->blk[2 * nblk + 1] = segs[i].n - r < ROW_BLOCK ? segs[i].n - r : ROW_BLOCK;
		}

	/* enough (segment, channel slice) tasks to keep every thread busy,
	 * slices of at least 64 channels */
	j.conv_parts = (4 * (int64_t)ctx->n_threads + nseg - 1) / nseg;
	if (j.conv_parts > c->conv_dim / 64)
		j.conv_parts = c->conv_dim / 64;
	if (j.conv_parts < 1)
		j.conv_parts = 1;
	j.scan_hb = scan_heads_per_task(c, blocked ? SCAN_TASKS_DET
						   : (2 * (int64_t)ctx->n_threads + nseg - 1) / nseg);

	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &ctx->m->layers[l];
		const int last = l == c->n_layer - 1;
		j.layer = l;
		j.norm_w = L->norm;
		j.src = ctx->H;
		j.dst = ctx->U;
		ss_pool_run(ctx->pool, j.parts, rmsnorm_task, &j);
		gemm(ctx, nblk, ctx->U, c->d_model, L->in_proj, ctx->ZXD, c->d_in_proj, T,
		     c->d_in_proj, c->d_model, 0.0f);
		ss_pool_run(ctx->pool, (int64_t)nseg * j.conv_parts, conv_task, &j);
		ss_pool_run(ctx->pool, j.parts, dt_task, &j);
		j.state_only = last && skip_last_mix;
		ss_pool_run(ctx->pool, (int64_t)nseg * (c->nheads / j.scan_hb), scan_task, &j);
		if (last && skip_last_mix)
			break;
		ss_pool_run(ctx->pool, j.parts, gate_task, &j);
		gemm(ctx, nblk, ctx->Y, c->d_inner, L->out_proj, ctx->H, c->d_model, T, c->d_model,
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
		gemm(ctx, 0, ctx->U + s->row0 * d, d, ctx->m->lm_head, q->logits + s->start * c->vocab_padded,
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
		gemm(ctx, 0, ctx->U + i * d, d, ctx->m->lm_head, ctx->L, V, g, V, d, 0.0f);
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
		     int64_t T, ss_logits_mode mode, int outputs, int blocked)
{
	const ss_model_config *c = &ctx->c;
	int i;

	for (i = 0; i < nseg; i++) {
		const segment *s = &segs[i];
		const int32_t *tok = seqs[s->seq].tokens + s->start;
		ss_embed_cpu(ctx->H + s->row0 * c->d_model, ctx->m->embedding, ctx->m->wtype, tok, s->n,
			     c->d_model);
	}
	run_layers(ctx, segs, nseg, T, !outputs, blocked);
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
			ss_errf(errmsg, 0, "sequence %d: no state arrays", i);
			return SS_ERR_INVALID;
		}
		d = &st->dims;
		if ((d->arch[0] && strcmp(d->arch, want.arch) != 0) || d->n_layer != want.n_layer ||
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

	if (c->d_model <= 0 || c->n_layer <= 0 || c->d_state <= 0 || c->headdim <= 0 ||
	    c->nheads <= 0 || c->ngroups <= 0 || c->d_conv <= 0 || c->vocab_padded <= 0 ||
	    c->nheads % c->ngroups != 0 || c->d_inner != c->nheads * c->headdim ||
	    c->d_inner % c->ngroups != 0 ||
	    c->conv_dim != c->d_inner + 2 * c->ngroups * c->d_state ||
	    c->d_in_proj != c->d_inner + c->conv_dim + c->nheads) {
		ss_errf(errmsg, 0, "inconsistent model dims (d_model %d n_layer %d d_inner %d nheads %d headdim %d ngroups %d d_state %d conv_dim %d d_in_proj %d)",
			c->d_model, c->n_layer, c->d_inner, c->nheads, c->headdim, c->ngroups,
			c->d_state, c->conv_dim, c->d_in_proj);
		return SS_ERR_INVALID;
	}
	if (!ss_dtype_name(m->wtype)) {
		ss_errf(errmsg, 0, "model has an unknown weights dtype %d", (int)m->wtype);
		return SS_ERR_INVALID;
	}
	/* lm_head may be NULL (SS_MODEL_SKIP_LM_HEAD): then no logits */
	if (!m->embedding || !m->norm_f || !m->layers) {
		ss_errf(errmsg, 0, "model has missing weights");
		return SS_ERR_INVALID;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &m->layers[l];
		if (!L->norm || !L->in_proj || !L->conv_w || !L->conv_b || !L->dt_bias ||
		    !L->A_log || !L->D || !L->gnorm || !L->out_proj) {
			ss_errf(errmsg, 0, "layer %d has missing weights", l);
			return SS_ERR_INVALID;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ public */

/* Checks the arguments shared by the CPU and GPU contexts and allocates a
 * zeroed context bound to m. */
static int ctx_new(ss_forward_ctx **out, const ss_model *m, int n_threads, int ubatch,
		   ss_forward_ctx **ctx, char *errmsg)
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
	return 0;
}

int ss_forward_ctx_init(ss_forward_ctx **out, const ss_model *m, int n_threads, int ubatch,
			char *errmsg)
{
	ss_forward_ctx *ctx;
	const ss_model_config *c;
	int64_t ub;
	int err, l, k, ch;

	if ((err = ctx_new(out, m, n_threads, ubatch, &ctx, errmsg)))
		return err;
	c = &ctx->c;
	ctx->n_threads = n_threads ? n_threads : 1;
	ctx->ubatch = ub = ubatch ? ubatch : 512;
	ss_blas_serial();
	err = ss_pool_init(&ctx->pool, ctx->n_threads);
	if (err) {
		ss_errf(errmsg, 0, "cannot start %d threads", ctx->n_threads);
		free(ctx);
		return err;
	}
	ctx->bytes = sizeof(*ctx);
	ctx->conv_wt = xalloc((size_t)c->n_layer * c->d_conv * c->conv_dim, sizeof(float), &ctx->bytes);
	ctx->H = xalloc((size_t)ub * c->d_model, sizeof(float), &ctx->bytes);
	ctx->U = xalloc((size_t)ub * c->d_model, sizeof(float), &ctx->bytes);
	ctx->ZXD = xalloc((size_t)ub * c->d_in_proj, sizeof(float), &ctx->bytes);
	ctx->XBC = xalloc((size_t)ub * c->conv_dim, sizeof(float), &ctx->bytes);
	ctx->DT = xalloc((size_t)ub * c->nheads, sizeof(float), &ctx->bytes);
	ctx->Y = xalloc((size_t)ub * c->d_inner, sizeof(float), &ctx->bytes);
	ctx->segs = xalloc((size_t)ub, sizeof(segment), &ctx->bytes);
	ctx->blk = xalloc((size_t)ub * 2, sizeof(int64_t), &ctx->bytes);
	ctx->out_seq = xalloc((size_t)ub, sizeof(int32_t), &ctx->bytes);
	ctx->L = xalloc((size_t)LAST_GROUP * c->vocab_padded, sizeof(float), &ctx->bytes);
	if (m->wtype != SS_DTYPE_F32)
		ctx->wpanel = xalloc((size_t)ctx->n_threads * COL_BLOCK *
					     (c->d_inner > c->d_model ? c->d_inner : c->d_model),
				     sizeof(float), &ctx->bytes);
	ctx->A = xalloc((size_t)c->n_layer * c->nheads, sizeof(float), &ctx->bytes);
	ctx->scan_work_len = ss_scan_chunked_work(c->nheads / c->ngroups, c->headdim);
	ctx->scan_work = xalloc((size_t)ctx->n_threads * ctx->scan_work_len, sizeof(float), &ctx->bytes);
	ctx->scan_dtsum = xalloc((size_t)ctx->n_threads * c->nheads, sizeof(double), &ctx->bytes);
	if ((m->wtype != SS_DTYPE_F32 && !ctx->wpanel) || !ctx->A || !ctx->scan_work ||
	    !ctx->scan_dtsum || !ctx->conv_wt || !ctx->H || !ctx->U || !ctx->ZXD || !ctx->XBC || !ctx->DT || !ctx->Y || !ctx->segs || !ctx->blk ||
	    !ctx->out_seq || !ctx->L) {
		ss_forward_ctx_free(ctx);
		ss_errf(errmsg, 0, "out of memory for a %lld-token ubatch", (long long)ub);
		return SS_ERR_NOMEM;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *L = &m->layers[l];
		for (k = 0; k < c->nheads; k++)
			ctx->A[(size_t)l * c->nheads + k] = -expf(L->A_log[k]);
		for (k = 0; k < c->d_conv; k++)
			for (ch = 0; ch < c->conv_dim; ch++)
				ctx->conv_wt[((size_t)l * c->d_conv + k) * c->conv_dim + ch] =
					L->conv_w[(size_t)ch * c->d_conv + k];
	}
	*out = ctx;
	return 0;
}

int ss_forward_ctx_init_dev(ss_forward_ctx **out, const ss_model *m, ss_device *dev,
			    int n_threads, int ubatch, char *errmsg)
{
	const ss_cuda_api *cu = ss_device_cuda(dev);
	ss_forward_ctx *ctx;
	int err;

	if (!cu)
		return ss_forward_ctx_init(out, m, n_threads, ubatch, errmsg);
	if ((err = ctx_new(out, m, n_threads, ubatch, &ctx, errmsg)))
		return err;
	ctx->n_threads = 1;
	ctx->ubatch = ubatch ? ubatch : SS_FORWARD_UBATCH_GPU;
	ctx->cu = cu;
	err = cu->fwd_init(&ctx->g, m, m->weight_dtype, (int)ctx->ubatch, errmsg);
	if (err) {
		free(ctx);
		return err;
	}
	ctx->bytes = sizeof(*ctx) + cu->fwd_bytes(ctx->g);
	*out = ctx;
	return 0;
}

int ss_forward_ctx_device(const ss_forward_ctx *ctx)
{
	return ctx && ctx->g ? SS_DEVICE_CUDA : SS_DEVICE_CPU;
}

int ss_forward_decode_begin(ss_forward_ctx *ctx, ss_state **states, int n, char *errmsg)
{
	int i, err;

	if (!ctx || n < 0 || (n > 0 && !states) || ctx->bound_on) {
		ss_errf(errmsg, 0, ctx && ctx->bound_on ? "states already bound (no decode_end)"
						     : "invalid arguments");
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
		ctx->dseqs[i] = (ss_forward_seq){ .state = states[i] };
	err = check_seqs(ctx, ctx->dseqs, n, SS_LOGITS_NONE, errmsg);
	if (err)
		return err;
	if (n > ctx->bound_cap) {
		ss_state **p = realloc(ctx->bound, (size_t)n * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		ctx->bound = p;
		free(ctx->blogits);
		ctx->blogits = NULL;
		ctx->bound_cap = n;
	}
	if (ctx->g) {
		err = ctx->cu->fwd_decode_begin(ctx->g, states, n, errmsg);
		if (err)
			return err;
	}
	memcpy(ctx->bound, states, (size_t)n * sizeof(*states));
	ctx->nbound = n;
	ctx->bound_on = 1;
	return 0;
}

int ss_forward_decode_next(ss_forward_ctx *ctx, const int32_t *tokens, float *logits,
			   int32_t *ids, int32_t n_ids, char *errmsg)
{
	const int64_t V = ctx ? ctx->c.vocab_padded : 0;
	int i, err;

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
	if (ctx->g) {
		err = ctx->cu->fwd_decode_next(ctx->g, tokens, logits, ids, n_ids, errmsg);
		if (!err)
			for (i = 0; i < ctx->nbound; i++)
				ctx->bound[i]->n_tokens++;
		return err;
	}
	if (ids && !logits) {
		if (!ctx->blogits) {
			ctx->blogits = malloc((size_t)ctx->bound_cap * (size_t)V * sizeof(float));
			if (!ctx->blogits)
				return SS_ERR_NOMEM;
		}
		logits = ctx->blogits;
	}
	ctx->bound_on = 0; /* ss_forward_decode runs the CPU path directly */
	err = ss_forward_decode(ctx, ctx->bound, tokens, ctx->nbound, logits, errmsg);
	ctx->bound_on = 1;
	if (!err && ids)
		ss_argmax_rows_cpu(ids, logits, V, ctx->nbound, n_ids);
	return err;
}

int ss_forward_decode_end(ss_forward_ctx *ctx, char *errmsg)
{
	int i, err = 0;

	if (!ctx || !ctx->bound_on) {
		ss_errf(errmsg, 0, "no states bound (decode_begin)");
		return SS_ERR_INVALID;
	}
	if (ctx->g) {
		err = ctx->cu->fwd_decode_end(ctx->g, errmsg);
		for (i = 0; i < ctx->nbound; i++) {
			ss_state *st = ctx->bound[i];
			if (!st->fingerprint[0])
				memcpy(st->fingerprint, ctx->m->fingerprint, SS_FINGERPRINT_MAX);
			if (!st->dims.arch[0])
				snprintf(st->dims.arch, sizeof(st->dims.arch), "mamba2");
		}
	}
	ctx->bound_on = 0;
	ctx->nbound = 0;
	return err;
}

int ss_forward_ctx_set_deterministic(ss_forward_ctx *ctx, int on)
{
	if (!ctx)
		return SS_ERR_INVALID;
	if (ctx->g)
		return SS_ERR_UNSUPPORTED;
	ctx->deterministic = on != 0;
	return 0;
}

void ss_forward_ctx_free(ss_forward_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->g)
		ctx->cu->fwd_free(ctx->g);
	free(ctx->bound);
	free(ctx->blogits);
	ss_pool_free(ctx->pool);
	free(ctx->conv_wt);
	free(ctx->wpanel);
	free(ctx->A);
	free(ctx->scan_work);
	free(ctx->scan_dtsum);
	free(ctx->H);
	free(ctx->U);
	free(ctx->ZXD);
	free(ctx->XBC);
	free(ctx->DT);
	free(ctx->Y);
	free(ctx->segs);
	free(ctx->blk);
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

/* blocked: each sequence's results must not depend on the others (see
 * ROW_BLOCK); a sequence that does not fit in the rest of a pass starts the
 * next one, so a sequence is cut into passes at multiples of ubatch only
 * (the scan's logdecay is rounded once per pass). */
static int prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs, ss_logits_mode mode,
		   int blocked, char *errmsg)
{
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
	if (ctx->g) {
		err = ctx->cu->fwd_prefill(ctx->g, seqs, n_seqs, mode, errmsg);
		if (err)
			return err;
		cur = n_seqs;
	}
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
			if (take > ctx->ubatch - T && blocked && T > 0)
				break;
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
			run_pass(ctx, seqs, ctx->segs, nseg, T, mode, outputs, blocked);
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

int ss_forward_prefill(ss_forward_ctx *ctx, ss_forward_seq *seqs, int n_seqs,
		       ss_logits_mode mode, char *errmsg)
{
	return prefill(ctx, seqs, n_seqs, mode, ctx && ctx->deterministic, errmsg);
}

int ss_forward_decode(ss_forward_ctx *ctx, ss_state **states, const int32_t *tokens, int n,
		      float *logits, char *errmsg)
{
	int i;

	if (!ctx || n < 0 || (n > 0 && (!states || !tokens))) {
		ss_errf(errmsg, 0, "invalid arguments");
		return SS_ERR_INVALID;
	}
	if (ctx->g) {
		int err = ss_forward_decode_begin(ctx, states, n, errmsg);
		if (err)
			return err;
		err = ss_forward_decode_next(ctx, tokens, logits, NULL, 0, errmsg);
		if (!err)
			return ss_forward_decode_end(ctx, errmsg);
		(void)ss_forward_decode_end(ctx, NULL);
		return err;
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
	return prefill(ctx, ctx->dseqs, n, logits ? SS_LOGITS_LAST : SS_LOGITS_NONE, 0, errmsg);
}
