/*
 * backend_cpu.c — the CPU backend of the forward driver (backend.h): the
 * ops of ss_ops.h (lib/forward/ops/) over this file's thread pool, on [ubatch][...]
 * activation rows (H, U, ZXD, XBC, DT, Y: see lib/forward/forward.c).
 *
 * Per layer: rmsnorm (rows); in_proj (GEMM); conv (per segment, channel
 * slices in parallel; it also leaves the new conv state); dt (rows); scan
 * per (sequence, block of heads) in parallel, in the chunked form (scan.h:
 * matrix products through ssd.c's kernel) for all but short segments; gate + group
 * norm (rows); out_proj (GEMM, beta = 1, the residual add).
 * Mamba-1 (cfg arch "mamba1"): ZXD is x | z, conv over the x columns into
 * XBC [T][d_inner]; dt is x_proj (GEMM into XDBC [T][dt_rank | B | C]) then
 * ss_dt_proj_cpu (rows); scan is ss_ssm1_scan_cpu per (segment, channel
 * block); gated_norm is the plain gate y · silu(z).
 *
 * The GEMMs are split over the pool's threads by rows (large T) or by output
 * columns (small T: decode, where sgemv streams the weights once); in a
 * blocked prefill (every prefill unless $SS_GEMM=blas, then deterministic
 * ones), as (row block, column block) tasks (see ROW_BLOCK and ROWINV_MAX).
 * Through the row-invariant kernel (ops/linear_f32.h): every block of a
 * blocked prefill (with SS_GEMM=blas, the blocks of segments of at most
 * ROWINV_MAX tokens only, sgemm the others), every GEMM of a deterministic
 * decode step, and lm_head in any blocked pass: a row's results are then
 * the same bits whatever the batch, its place in it and the threads. With
 * q8_0 matrices the row-invariant products are ss_matvec_q8_0 (decode
 * steps) and ss_linear_q8_0_cpu (prefill: x quantized per row, int8 panels).
 * ref: lib/forward/forward.c (the driver); backend.h (the op table).
 */
#include "forward/blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "forward/backend.h"
#include "forward/ops/linear.h"
#include "forward/ops/linear_f32.h"
#include "forward/ops/scan.h"
#include "forward/pool.h"

#define SPLIT_ROWS_MIN 64
/* Deterministic prefill GEMMs are cut into calls of at most ROW_BLOCK rows,
 * by COL_BLOCK output columns (a multiple of 16): counted from the pass's
 * first row when every call is our row-invariant kernel (pass_begin), else
 * from each segment's first row. OpenBLAS rounds a row differently by the call's shape and
 * the row's place in it (tail kernels, gemv for one row), so shapes that
 * depend only on the segment keep a document's state the same bytes
 * whatever its batch neighbours and the thread count. sgemm runs 256 x 256
 * calls within about 5% of whole-matrix calls (Haswell kernels, mamba2-130m
 * shapes); a 64-row call is about 20% slower. */
#define ROW_BLOCK 256
#define COL_BLOCK 256
/* Segments of at most this many tokens (a question, a chunk of a scored
 * continuation) go through the row-invariant kernel instead, all of a
 * pass's such rows together in blocks of up to ROW_BLOCK rows: the weights
 * are then read once for many short sequences (batched ss-score) and a row
 * is the same bits alone or batched. That kernel beats sgemm at these row
 * counts (AVX-512 Zen 5, 1 thread, in_proj's shape: 108 against 54 GFLOP/s
 * at 19 rows, 131 against 94 at 64, with OpenBLAS's Haswell kernels; 130
 * against 144 at 64 with its SkylakeX ones). */
#define ROWINV_MAX 64
/* Rows of the logits buffer one lm_head call fills for the driver
 * (ss_backend_ops.lm_rows: a pass's last rows, or all of several segments',
 * share one pass over lm_head, 64 at a time); the buffer starts at
 * LOGITS_ROWS0 rows and grows to what a call asks. */
#define LM_ROWS 64
#define LOGITS_ROWS0 16
/* With bf16/f16 weights, a GEMM of more rows than this per call widens
 * COL_BLOCK-row panels of W into f32 and runs sgemm on them; fewer rows
 * (decode) stream W through the 16-bit kernel. */
#define W16_DOT_ROWS 4
/* Segments of at least this many tokens are scanned in the chunked form
 * (scan.h), shorter ones (decode) token by token. */
#define SCAN_CHUNKED_MIN 16
/* A decode step of at least this many sequences a thread runs each
 * sequence's conv, dt, scan and gated norm as one task (mixer): fewer,
 * the four phases, whose tasks cut a sequence's channels and heads. */
#define MIX_SEQS_MIN 2

/* A non-empty segment of the pass, with its state and tokens. */
typedef struct {
	int64_t start, n, row0;
	ss_state *st;
	const int32_t *tok;
	int fresh; /* the first segment of a fresh sequence: ssm starts at 0, unread */
} segment;

typedef struct {
	const ss_model *m;
	ss_model_config c;
	ss_pool *pool;
	int n_threads;
	int64_t ubatch;
	float *conv_wt;   /* [n_layer][d_conv][conv_dim]: conv1d weights, tap-major */
	float *wpanel;    /* [n_threads][COL_BLOCK][max(d_model, d_inner)]: 16-bit W widened */
	float *A;         /* [n_layer][nheads]: -exp(A_log) */
	float *scan_work; /* [n_threads][scan_work_len]: ss_scan_chunked's work */
	size_t scan_work_len;
	double *scan_dtsum; /* [n_threads][nheads] */
	float *H, *U, *ZXD, *XBC, *DT, *Y;
	float *XDBC;      /* Mamba-1 [ubatch][dt_rank + 2*d_state]: x_proj output */
	int m1;           /* a Mamba-1 model */
	int blas;         /* ss_gemm_choice() == SS_GEMM_BLAS */
	/* the pass (pass_begin) */
	segment *segs;    /* [ubatch] its non-empty segments */
	int nseg;
	int64_t T;
	int64_t *blk;     /* [ubatch][3] prefill GEMM row blocks: first row, rows,
			   * and 1 for rows of short segments (ROWINV_MAX) */
	int64_t nblk;     /* blocks (a deterministic prefill pass), else 0 */
	float *xpack;     /* [xpack_cap] a blocked GEMM's x, each block packed once
			   * for all its column blocks (ss_linear_rows_xpack) */
	int64_t xpack_cap;
	int64_t *xpoff;   /* [ubatch] each block's offset in xpack */
	int rowinv;       /* a deterministic pass: its GEMMs without blocks (all of
			   * a decode step's, lm_head's) use ss_linear_rows_cpu */
	int decode;       /* the pass is a decode step */
	int64_t conv_parts; /* channel slices per segment in conv_task */
	int scan_hb;      /* heads per scan task (a divisor of the heads per group) */
	/* the logits buffer: [logits_rows][vocab_padded], and its argmax */
	float *logits;
	int32_t *ids;
	int64_t logits_rows;
	size_t bytes;
} cpu_be;

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
	const void *W;    /* in weights_dtype */
	ss_dtype weights_dtype;
	float *wpanel;    /* see cpu_be */
	float *C;
	int64_t M, N, K, lda, ldc;
	float beta;
	int by_rows;
	int rowinv;       /* ss_linear_rows_cpu over column slices */
	int decode;       /* a decode step's GEMM */
	int64_t parts;
	const int64_t *blk; /* row blocks (prefill, see cpu_be), else NULL */
	const float *xp;    /* blk's rows packed (cpu_be's xpack), else NULL */
	const int64_t *xpoff;
	int64_t ncb, cb;    /* column blocks per row block, their width (COL_BLOCK, or
			     * narrower for the kernel where there are few tasks) */
	int blas;           /* $SS_GEMM=blas: long segments' blocks through sgemm */
} gemm_job;

static void gemm_task(void *arg, int64_t i, int thread)
{
	const gemm_job *j = arg;
	int64_t m0 = 0, m1 = j->M, n0 = 0, n1 = j->N;
	int rowinv = j->rowinv;

	if (j->blk) {
		const int64_t *bk = j->blk + 3 * (i / j->ncb);
		m0 = bk[0];
		m1 = m0 + bk[1];
		rowinv = bk[2] || !j->blas;
		n0 = i % j->ncb * j->cb;
		n1 = n0 + j->cb < j->N ? n0 + j->cb : j->N;
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
	/* bytes of a row of W */
	const size_t row = ss_dtype_row_size(j->weights_dtype, (size_t)j->K);
	/* dtype checked at load, sizes here: the calls cannot fail */
	if (rowinv && j->weights_dtype != SS_DTYPE_Q8_0) { /* 16-bit W widened in registers */
		(void)ss_linear_rows_cpu_xp(j->C + m0 * j->ldc + n0, j->ldc, j->A + m0 * j->lda,
					    j->lda, j->xp ? j->xp + j->xpoff[i / j->ncb] : NULL,
					    (const char *)j->W + n0 * row, j->weights_dtype, m1 - m0,
					    n1 - n0, j->K, j->beta);
		return;
	}
	/* q8_0 W outside decode steps: x quantized per row too, as a decode
	 * step's ss_matvec_q8_0 does, int8 products in panels of rows
	 * (row-invariant; $SS_GEMM=blas: widened, below, as before it) */
	if (rowinv && j->weights_dtype == SS_DTYPE_Q8_0 && !j->decode && !j->blas) {
		(void)ss_linear_q8_0_cpu(j->C + m0 * j->ldc + n0, j->ldc, j->A + m0 * j->lda, j->lda,
					 (const char *)j->W + n0 * row, m1 - m0, n1 - n0, j->K, j->beta);
		return;
	}
	/* W widened by panels: 16-bit or q8_0 W for the BLAS beyond a few rows;
	 * q8_0 W for the row-invariant kernel with $SS_GEMM=blas */
	if (j->weights_dtype != SS_DTYPE_F32 &&
	    (rowinv ? !j->decode : m1 - m0 > W16_DOT_ROWS)) {
		float *P = j->wpanel + (size_t)thread * COL_BLOCK * j->K;
		for (int64_t n = n0, nb; n < n1; n += nb) {
			nb = n1 - n < COL_BLOCK ? n1 - n : COL_BLOCK;
			ss_matvec_widen(P, (const char *)j->W + n * row, j->weights_dtype,
					(size_t)(nb * j->K));
			if (rowinv)
				(void)ss_linear_rows_cpu(j->C + m0 * j->ldc + n, j->ldc,
							 j->A + m0 * j->lda, j->lda, P, SS_DTYPE_F32,
							 m1 - m0, nb, j->K, j->beta);
			else
				(void)ss_linear_cpu(j->C + m0 * j->ldc + n, j->ldc, j->A + m0 * j->lda,
						    j->lda, P, SS_DTYPE_F32, m1 - m0, nb, j->K, j->beta);
		}
		return;
	}
	(void)ss_linear_cpu(j->C + m0 * j->ldc + n0, j->ldc, j->A + m0 * j->lda, j->lda,
			    (const char *)j->W + n0 * row, j->weights_dtype, m1 - m0, n1 - n0, j->K,
			    j->beta);
}

/* Block i of a blocked GEMM's x packed into the context's xpack. */
static void xpack_task(void *arg, int64_t i, int thread)
{
	const gemm_job *j = arg;
	const int64_t *bk = j->blk + 3 * i;
	ss_linear_rows_xpack((float *)j->xp + j->xpoff[i], j->A + bk[0] * j->lda, j->lda, bk[1], j->K);
}

/* Packs each of the nblk row blocks of A (K columns) once, for all the
 * column blocks the GEMM's tasks then run against it (the kernel would
 * pack a block again for each: ss_linear_rows_cpu_xp). Sets j's xp, or
 * leaves it NULL where the kernel packs nothing or xpack cannot grow (the
 * tasks then pack as before: the same bits). */
static void xpack_blocks(cpu_be *ctx, gemm_job *j, int64_t nblk)
{
	int64_t total = 0;
	for (int64_t b = 0; b < nblk; b++) {
		ctx->xpoff[b] = total;
		total += ss_linear_rows_xpack_floats(ctx->blk[3 * b + 1], j->K);
	}
	if (total == 0)
		return;
	if (total > ctx->xpack_cap) {
		float *p = realloc(ctx->xpack, (size_t)total * sizeof(float));
		if (!p)
			return;
		ctx->bytes += (size_t)(total - ctx->xpack_cap) * sizeof(float);
		ctx->xpack = p;
		ctx->xpack_cap = total;
	}
	j->xp = ctx->xpack;
	j->xpoff = ctx->xpoff;
	ss_pool_run(ctx->pool, nblk, xpack_task, j);
}

/* nblk > 0: the rows are ctx->blk's blocks (deterministic prefill); else M
 * rows cut by thread count, or (ctx->rowinv) all M rows in every task, the
 * columns cut. W in dtype weights_dtype. */
static void gemm_wt(cpu_be *ctx, int64_t nblk, const float *A, int64_t lda, const void *W,
		    ss_dtype weights_dtype, float *C, int64_t ldc, int64_t M, int64_t N, int64_t K,
		    float beta)
{
	gemm_job j = { .A = A, .W = W, .weights_dtype = weights_dtype, .wpanel = ctx->wpanel, .C = C,
		       .M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .beta = beta, .decode = ctx->decode,
		       .parts = ctx->n_threads, .blas = ctx->blas };

	if (M <= 0 || N <= 0)
		return;
	if (nblk > 0) {
		j.blk = ctx->blk;
		/* Fewer tasks than 4 a thread (a short prefill's out_proj: 3 on
		 * 2 threads) leave threads idle: narrower column blocks for our
		 * kernel, whose outputs do not depend on the columns' cut (sgemm's
		 * stay COL_BLOCK wide, its rounding may) */
		j.cb = COL_BLOCK;
		while (!ctx->blas && j.cb > 64 && nblk * ((N + j.cb - 1) / j.cb) < 4 * (int64_t)ctx->n_threads)
			j.cb /= 2;
		j.ncb = (N + j.cb - 1) / j.cb;
		/* every block through ss_linear_rows_cpu (16-bit W widened in registers) */
		if (!ctx->blas && weights_dtype != SS_DTYPE_Q8_0 && j.ncb > 1)
			xpack_blocks(ctx, &j, nblk);
		ss_pool_run(ctx->pool, nblk * j.ncb, gemm_task, &j);
		return;
	}
	/* Row slices: one per thread, each as tall as possible for sgemm's
	 * efficiency. Column slices (weight-streaming, bandwidth-bound): a few
	 * per thread, so that a thread that is descheduled on a busy machine
	 * leaves its share to the others instead of stalling the step. */
	j.rowinv = ctx->rowinv;
	j.by_rows = !j.rowinv && M >= SPLIT_ROWS_MIN * ctx->n_threads;
	if (!j.by_rows && ctx->n_threads > 1)
		j.parts = 4 * (int64_t)ctx->n_threads;
	if (!j.by_rows && (N + 15) / 16 < j.parts)
		j.parts = (N + 15) / 16;
	ss_pool_run(ctx->pool, j.parts, gemm_task, &j);
}

/* gemm_wt with W in the model's weights_dtype (the four streamed matrices). */
static void gemm(cpu_be *ctx, int64_t nblk, const float *A, int64_t lda, const void *W,
		 float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, float beta)
{
	gemm_wt(ctx, nblk, A, lda, W, ctx->m->weights_dtype, C, ldc, M, N, K, beta);
}

/* ------------------------------------------------------------- row phases */

typedef struct {
	cpu_be *ctx;
	int layer;
	int64_t T;
	int64_t parts;
	const float *norm_w; /* for the rmsnorm phase */
	const float *src;    /* rmsnorm input rows [T][d_model] */
	float *dst;          /* rmsnorm output rows */
	int state_only;      /* scan: skip y (last layer, no output rows) */
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
	const cpu_be *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const segment *s = &ctx->segs[i / ctx->conv_parts];
	const int64_t cd = c->conv_dim, K1 = c->d_conv - 1;
	const int64_t start[2] = { 0, s->n };
	int64_t c0, c1;

	/* slices on multiples of 8 channels keep the vector loops whole */
	split((cd + 7) / 8, ctx->conv_parts, i % ctx->conv_parts, &c0, &c1);
	c0 *= 8;
	c1 = c1 * 8 < cd ? c1 * 8 : cd;
	if (c1 <= c0)
		return;
	/* Mamba-2's xBC columns follow z; Mamba-1's x comes first */
	ss_conv1d_silu_cpu(ctx->XBC + s->row0 * cd + c0, cd,
			   ctx->ZXD + s->row0 * c->d_in_proj + (ctx->m1 ? 0 : c->d_inner) + c0,
			   c->d_in_proj, start, 1,
			   s->st->conv + (size_t)j->layer * cd * K1 + c0 * K1, 0,
			   ctx->conv_wt + (size_t)j->layer * c->d_conv * cd + c0, cd,
			   ctx->m->layers[j->layer].conv_b + c0, (int)(c1 - c0), c->d_conv);
}

/* DT rows [r0, r0 + n) of layer l = softplus(ZXD's dt columns + dt_bias). */
static void dt_rows(const cpu_be *ctx, int l, int64_t r0, int64_t n)
{
	const ss_model_config *c = &ctx->c;
	ss_dt_softplus_cpu(ctx->DT + r0 * c->nheads, c->nheads,
			   ctx->ZXD + r0 * c->d_in_proj + c->d_inner + c->conv_dim, c->d_in_proj,
			   ctx->m->layers[l].dt_bias, n, c->nheads, c->dt_min, c->dt_max);
}

static void dt_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	int64_t r0, r1;
	split(j->T, j->parts, i, &r0, &r1);
	dt_rows(j->ctx, j->layer, r0, r1 - r0);
}

/* Mamba-1: DT rows = softplus(dt_proj(XDBC's dt_low) + dt_bias). */
static void dt1_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_model_config *c = &j->ctx->c;
	const int64_t ldx = c->dt_rank + 2 * c->d_state;
	int64_t r0, r1, step = 0; /* rows per call, 0: all */
	(void)thread;
	if (j->ctx->nblk > 0) { /* deterministic: the GEMMs' row blocks (sgemm inside),
				   short segments' row by row */
		r0 = j->ctx->blk[3 * i];
		r1 = r0 + j->ctx->blk[3 * i + 1];
		step = j->ctx->blk[3 * i + 2];
	} else if (j->ctx->rowinv) { /* a deterministic decode step: row by row */
		r0 = i;
		r1 = i + 1;
	} else
		split(j->T, j->parts, i, &r0, &r1);
	for (int64_t n; r0 < r1; r0 += n) {
		n = step ? step : r1 - r0;
		ss_dt_proj_cpu(j->ctx->DT + r0 * c->d_inner, c->d_inner, j->ctx->XDBC + r0 * ldx, ldx,
			       j->ctx->m->layers[j->layer].dt_proj, j->ctx->m->layers[j->layer].dt_bias,
			       n, c->d_inner, c->dt_rank);
	}
}

/* Mamba-1: Y rows *= silu(ZXD's z columns). */
static void gate1_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const ss_model_config *c = &j->ctx->c;
	int64_t r0, r1;
	split(j->T, j->parts, i, &r0, &r1);
	ss_gate_silu_cpu(j->ctx->Y + r0 * c->d_inner, c->d_inner,
			 j->ctx->ZXD + r0 * c->d_in_proj + c->d_inner, c->d_in_proj, r1 - r0,
			 c->d_inner);
}

/* Mamba-1: the scan of one segment over scan_hb channels (task i: segment
 * i / tasks per segment, channels from (i % tasks per segment) · scan_hb). */
static void scan1_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const cpu_be *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const int64_t di = c->d_inner, N = c->d_state, ldx = c->dt_rank + 2 * N;
	const int tps = (int)((di + ctx->scan_hb - 1) / ctx->scan_hb);
	const segment *s = &ctx->segs[i / tps];
	const int64_t d0 = (i % tps) * ctx->scan_hb;
	const int64_t nd = d0 + ctx->scan_hb < di ? ctx->scan_hb : di - d0;
	const int l = j->layer;
	const ss_layer *layer = &ctx->m->layers[l];
	const int64_t start[2] = { 0, s->n };
	(void)thread;
	if (s->fresh)
		memset(s->st->ssm + ((size_t)l * di + d0) * N, 0, (size_t)(nd * N) * sizeof(float));
	/* dims and strides were checked at init: cannot fail */
	(void)ss_ssm1_scan_cpu((int)nd, (int)N, start, 1, ctx->XBC + s->row0 * di + d0, di,
			       ctx->XDBC + s->row0 * ldx + c->dt_rank, ldx,
			       ctx->DT + s->row0 * di + d0, di, layer->A_log + d0 * N, layer->D + d0,
			       s->st->ssm + ((size_t)l * di + d0) * N, 0,
			       j->state_only ? NULL : ctx->Y + s->row0 * di + d0, di,
			       s->st->logdecay + ((size_t)l * di + d0) * N, 0);
}

/* Y rows [r0, r0 + n) of layer l = rmsnorm_grouped(y * silu(z)) * gnorm,
 * groups of d_inner/ngroups. */
static void gate_rows(const cpu_be *ctx, int l, int64_t r0, int64_t n)
{
	const ss_model_config *c = &ctx->c;
	ss_gated_rmsnorm_cpu(ctx->Y + r0 * c->d_inner, c->d_inner, ctx->ZXD + r0 * c->d_in_proj,
			     c->d_in_proj, ctx->m->layers[l].gnorm, n, c->d_inner, c->ngroups, c->eps);
}

static void gate_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	int64_t r0, r1;
	split(j->T, j->parts, i, &r0, &r1);
	gate_rows(j->ctx, j->layer, r0, r1 - r0);
}

/* The scan of one segment over scan_hb heads of one group (task i:
 * segment i / tasks per segment, heads from (i % tasks per segment) ·
 * scan_hb): chunked for a long segment, else the op head by head with its
 * pointers offset to the head and its B/C group. */
static void scan_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const cpu_be *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const int tps = c->nheads / ctx->scan_hb;
	const segment *s = &ctx->segs[i / tps];
	const int h0 = (int)(i % tps) * ctx->scan_hb;
	const int g = h0 / (c->nheads / c->ngroups);
	const int l = j->layer;
	const ss_layer *layer = &ctx->m->layers[l];
	const size_t hs = (size_t)c->headdim * c->d_state;
	const float *xbc = ctx->XBC + s->row0 * c->conv_dim;
	const float *B = xbc + c->d_inner + (size_t)g * c->d_state;
	const float *C = xbc + c->d_inner + (size_t)(c->ngroups + g) * c->d_state;
	float *y = j->state_only ? NULL : ctx->Y + s->row0 * c->d_inner + (size_t)h0 * c->headdim;
	float *logdecay = &s->st->logdecay[l * c->nheads + h0];
	double *dtsum = ctx->scan_dtsum + (size_t)thread * c->nheads;
	int h;

	if (s->n >= SCAN_CHUNKED_MIN) {
		const ss_scan_chunked_args a = {
			.n = s->n, .nheads = ctx->scan_hb, .headdim = c->headdim, .d_state = c->d_state,
			.x = xbc + (size_t)h0 * c->headdim, .ldx = c->conv_dim,
			.B = B, .ldb = c->conv_dim, .C = C, .ldc = c->conv_dim,
			.dt = ctx->DT + s->row0 * c->nheads + h0, .lddt = c->nheads,
			.A = ctx->A + (size_t)l * c->nheads + h0, .D = layer->D + h0,
			.ssm = s->st->ssm + ((size_t)l * c->nheads + h0) * hs, .fresh = s->fresh,
			.y = y, .ldy = c->d_inner, .dtsum = dtsum,
			.work = ctx->scan_work + (size_t)thread * ctx->scan_work_len,
		};
		ss_scan_chunked(&a);
	} else {
		/* ss_ssm_scan_cpu's work head by head (its checks were done at
		 * init), with A from ctx->A: a decode step runs this for every
		 * head of every sequence */
		if (s->fresh)
			memset(s->st->ssm + ((size_t)l * c->nheads + h0) * hs, 0,
			       (size_t)ctx->scan_hb * hs * sizeof(float));
		for (h = h0; h < h0 + ctx->scan_hb; h++) {
			const ss_scan_head_args a = {
				.n = s->n, .headdim = c->headdim, .d_state = c->d_state,
				.x = xbc + (size_t)h * c->headdim, .ldx = c->conv_dim,
				.B = B, .ldb = c->conv_dim, .C = y ? C : NULL, .ldc = c->conv_dim,
				.dt = ctx->DT + s->row0 * c->nheads + h, .lddt = c->nheads,
				.A = ctx->A[(size_t)l * c->nheads + h],
				.D = layer->D ? layer->D[h] : 0.0f,
				.ssm = s->st->ssm + ((size_t)l * c->nheads + h) * hs,
				.y = y ? y + (size_t)(h - h0) * c->headdim : NULL, .ldy = c->d_inner,
			};
			dtsum[h - h0] = ss_scan_head(&a);
		}
	}
	/* as ss_ssm_scan_cpu does */
	for (h = 0; h < ctx->scan_hb; h++)
		logdecay[h] = (float)((double)logdecay[h] - exp((double)layer->A_log[h0 + h]) * dtsum[h]);
}

/* A decode step's mixer for one sequence (task i: segment i): conv, dt,
 * the scan of every head and (unless j->state_only) the gated norm of its
 * rows, each as its own phase computes it (row- and channel-local ops, so
 * the same bits), in one task: a layer waits for the threads 4 times
 * instead of 7 (mixer). */
static void mix_task(void *arg, int64_t i, int thread)
{
	const row_job *j = arg;
	const cpu_be *ctx = j->ctx;
	const ss_model_config *c = &ctx->c;
	const segment *s = &ctx->segs[i];
	const int64_t tps = c->nheads / ctx->scan_hb;
	int64_t k;

	for (k = 0; k < ctx->conv_parts; k++)
		conv_task(arg, i * ctx->conv_parts + k, thread);
	dt_rows(ctx, j->layer, s->row0, s->n);
	for (k = 0; k < tps; k++)
		scan_task(arg, i * tps + k, thread);
	if (!j->state_only)
		gate_rows(ctx, j->layer, s->row0, s->n);
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


static int64_t row_parts(const cpu_be *ctx, int64_t T)
{
	int64_t p = (int64_t)ctx->n_threads * 4;
	return T < p ? T : p;
}

/* ------------------------------------------------------------------- ops */

static int pass_begin(void *b, const ss_pass *p)
{
	cpu_be *ctx = b;
	const ss_model_config *c = &ctx->c;
	int i, nseg = 0;
	int64_t r;

	for (i = 0; i < p->nseg; i++) {
		const ss_segment *s = &p->segs[i];
		const ss_forward_seq *q = &p->seqs[s->seq];
		if (s->n > 0)
			ctx->segs[nseg++] = (segment){ s->start, s->n, s->row0, q->state,
						       q->tokens + s->start, q->fresh && s->start == 0 };
	}
	ctx->nseg = nseg;
	ctx->T = p->T;
	ctx->nblk = 0;
	ctx->rowinv = p->blocked;
	ctx->decode = p->decode;
	/* a decode step's rows are one per sequence: no blocks, every GEMM
	 * row-invariant. A prefill's, when every block goes through the
	 * row-invariant kernels (not $SS_GEMM=blas, not Mamba-1, whose dt_proj
	 * is sgemm by block): the pass's rows cut every ROW_BLOCK rows from its
	 * first, across segments, so that a pass of short documents (a corpus's
	 * chunks) runs 256-row panels as one long document does. Otherwise
	 * ROW_BLOCK-row blocks of each long segment from its first row, and the
	 * rows of short ones, consecutive in the pass, joined into blocks of up
	 * to ROW_BLOCK rows. */
	const int whole = p->blocked && !p->decode && !ctx->blas && !ctx->m1;
	if (whole) {
		for (r = 0; r < p->T; r += ROW_BLOCK, ctx->nblk++) {
			int64_t *bk = ctx->blk + 3 * ctx->nblk;
			bk[0] = r;
			bk[1] = p->T - r < ROW_BLOCK ? p->T - r : ROW_BLOCK;
			bk[2] = 1;
		}
	}
	for (i = 0; p->blocked && !p->decode && !whole && i < nseg; i++) {
		const segment *s = &ctx->segs[i];
		const int64_t shortseg = s->n <= ROWINV_MAX;
		for (r = 0; r < s->n;) {
			int64_t *bk = ctx->blk + 3 * ctx->nblk, n = s->n - r;
			if (shortseg && ctx->nblk > 0 && bk[-1] && bk[-3] + bk[-2] == s->row0 + r &&
			    bk[-2] < ROW_BLOCK) { /* the previous block of short rows goes on */
				n = n < ROW_BLOCK - bk[-2] ? n : ROW_BLOCK - bk[-2];
				bk[-2] += n;
			} else {
				n = n < ROW_BLOCK ? n : ROW_BLOCK;
				bk[0] = s->row0 + r;
				bk[1] = n;
				bk[2] = shortseg;
				ctx->nblk++;
			}
			r += n;
		}
	}
	if (nseg == 0)
		return 0;
	/* enough (segment, channel slice) tasks to keep every thread busy,
	 * slices of at least 64 channels */
	ctx->conv_parts = (4 * (int64_t)ctx->n_threads + nseg - 1) / nseg;
	if (ctx->conv_parts > c->conv_dim / 64)
		ctx->conv_parts = c->conv_dim / 64;
	if (ctx->conv_parts < 1)
		ctx->conv_parts = 1;
	if (ctx->m1) {
		/* channel blocks of a fixed size (whatever the batch: results do
		 * not depend on it, each channel being scanned alone), at least
		 * 2 tasks per thread */
		int64_t want = (2 * (int64_t)ctx->n_threads + nseg - 1) / nseg;
		ctx->scan_hb = (int)((c->d_inner + want - 1) / want);
		ctx->scan_hb = (ctx->scan_hb + 15) / 16 * 16;
		return 0;
	}
	/* about 2 tasks a thread: the heads per task change no bits (each
	 * output of the chunked scan's products is one chain, ssd.c) */
	ctx->scan_hb = scan_heads_per_task(c, (2 * (int64_t)ctx->n_threads + nseg - 1) / nseg);
	return 0;
}

static int embed(void *b, const ss_pass *p)
{
	cpu_be *ctx = b;
	(void)p;
	for (int i = 0; i < ctx->nseg; i++) {
		const segment *s = &ctx->segs[i];
		ss_embed_cpu(ctx->H + s->row0 * ctx->c.d_model, ctx->m->embedding,
			     ctx->m->weights_dtype, s->tok, s->n, ctx->c.d_model);
	}
	return 0;
}

/* dst rows [0, T) = rmsnorm(src rows) · w, rows in parallel. */
static void norm_rows(cpu_be *ctx, const float *w, const float *src, float *dst, int64_t T)
{
	row_job j = { .ctx = ctx, .T = T, .parts = row_parts(ctx, T), .norm_w = w, .src = src,
		      .dst = dst };
	ss_pool_run(ctx->pool, j.parts, rmsnorm_task, &j);
}

static int rmsnorm(void *b, const ss_pass *p, int l)
{
	cpu_be *ctx = b;
	(void)p;
	norm_rows(ctx, ctx->m->layers[l].norm, ctx->H, ctx->U, ctx->T);
	return 0;
}

static int linear(void *b, const ss_pass *p, int l, ss_linear_which w)
{
	cpu_be *ctx = b;
	const ss_model_config *c = &ctx->c;
	const ss_layer *layer = &ctx->m->layers[l];
	if (w == SS_LINEAR_IN_PROJ) {
		/* a state-only pass's last layer makes no Y, so its z (which only
		 * gates Y) is not needed: those columns of in_proj are skipped,
		 * 1.3 % of a prefill's products at the 130m shape (Mamba-2's z
		 * comes first, Mamba-1's after x); the other columns keep their
		 * bits in our kernels, whose outputs do not depend on the columns
		 * around them (sgemm's, $SS_GEMM=blas, may move in the last bit) */
		int64_t n0 = 0, n = c->d_in_proj;
		if (p->state_only && l == c->n_layer - 1) {
			n0 = ctx->m1 ? 0 : c->d_inner;
			n -= c->d_inner;
		}
		gemm(ctx, ctx->nblk, ctx->U, c->d_model,
		     (const char *)layer->in_proj +
			     n0 * ss_dtype_row_size(ctx->m->weights_dtype, (size_t)c->d_model),
		     ctx->ZXD + n0, c->d_in_proj, ctx->T, n, c->d_model, 0.0f);
	} else
		gemm(ctx, ctx->nblk, ctx->Y, c->d_inner, layer->out_proj, ctx->H, c->d_model, ctx->T,
		     c->d_model, c->d_inner, 1.0f);
	return 0;
}

/* Runs fn over the pass: n tasks of a row_job for layer l. */
static int run_rows(cpu_be *ctx, int l, int64_t n, void (*fn)(void *, int64_t, int), int state_only)
{
	row_job j = { .ctx = ctx, .layer = l, .T = ctx->T, .parts = row_parts(ctx, ctx->T),
		      .state_only = state_only };
	ss_pool_run(ctx->pool, n < 0 ? j.parts : n, fn, &j);
	return 0;
}

static int conv(void *b, const ss_pass *p, int l)
{
	cpu_be *ctx = b;
	(void)p;
	return run_rows(ctx, l, (int64_t)ctx->nseg * ctx->conv_parts, conv_task, 0);
}

static int dt(void *b, const ss_pass *p, int l)
{
	cpu_be *ctx = b;
	const ss_model_config *c = &ctx->c;
	(void)p;
	if (!ctx->m1)
		return run_rows(b, l, -1, dt_task, 0);
	/* Mamba-1: x_proj (f32 W), then the low-rank dt */
	gemm_wt(ctx, ctx->nblk, ctx->XBC, c->d_inner, ctx->m->layers[l].x_proj, SS_DTYPE_F32,
		ctx->XDBC, c->dt_rank + 2 * c->d_state, ctx->T, c->dt_rank + 2 * c->d_state,
		c->d_inner, 0.0f);
	return run_rows(b, l, ctx->nblk > 0 ? ctx->nblk : ctx->rowinv ? ctx->T : -1, dt1_task, 0);
}

static int scan(void *b, const ss_pass *p, int l)
{
	cpu_be *ctx = b;
	const int so = p->state_only && l == ctx->c.n_layer - 1;
	if (ctx->m1)
		return run_rows(ctx, l,
				(int64_t)ctx->nseg * ((ctx->c.d_inner + ctx->scan_hb - 1) / ctx->scan_hb),
				scan1_task, so);
	return run_rows(ctx, l, (int64_t)ctx->nseg * (ctx->c.nheads / ctx->scan_hb), scan_task, so);
}

static int gated_norm(void *b, const ss_pass *p, int l)
{
	(void)p;
	return run_rows(b, l, -1, ((cpu_be *)b)->m1 ? gate1_task : gate_task, 0);
}

/* conv, dt, scan and gated_norm: one task per sequence in a Mamba-2 decode
 * step of at least MIX_SEQS_MIN sequences a thread (mix_task), else the
 * four phases. */
static int mixer(void *b, const ss_pass *p, int l)
{
	cpu_be *ctx = b;
	const int so = p->state_only && l == ctx->c.n_layer - 1;
	int err;

	if (!ctx->m1 && ctx->decode && ctx->nseg >= MIX_SEQS_MIN * ctx->n_threads)
		return run_rows(ctx, l, ctx->nseg, mix_task, so);
	if ((err = conv(b, p, l)) || (err = dt(b, p, l)) || (err = scan(b, p, l)) || so)
		return err;
	return gated_norm(b, p, l);
}

static int norm_f(void *b, const int64_t *rows, int64_t r0, int64_t n)
{
	cpu_be *ctx = b;
	const int64_t d = ctx->c.d_model;
	if (rows) {
		/* gathered to the front of H in order: rows[i] >= i, so no row is
		 * overwritten before it is read */
		for (int64_t i = 0; i < n; i++)
			if (rows[i] != i)
				memcpy(ctx->H + i * d, ctx->H + rows[i] * d, (size_t)d * sizeof(float));
		r0 = 0;
	}
	norm_rows(ctx, ctx->m->norm_f, ctx->H + r0 * d, ctx->U, n);
	return 0;
}

static int hidden(void *b, float *dst, int64_t i, int64_t n)
{
	cpu_be *ctx = b;
	memcpy(dst, ctx->U + i * ctx->c.d_model, (size_t)(n * ctx->c.d_model) * sizeof(float));
	return 0;
}

static int lm_head(void *b, int64_t i, int64_t n, float *dst)
{
	cpu_be *ctx = b;
	const int64_t d = ctx->c.d_model, V = ctx->c.vocab_padded;
	if (dst) {
		gemm(ctx, 0, ctx->U + i * d, d, ctx->m->lm_head, dst, V, n, V, d, 0.0f);
		return 0;
	}
	if (n > ctx->logits_rows) {
		float *lg = realloc(ctx->logits, (size_t)n * (size_t)V * sizeof(float));
		int32_t *ids = lg ? realloc(ctx->ids, (size_t)n * sizeof(int32_t)) : NULL;
		if (lg)
			ctx->logits = lg;
		if (!ids)
			return SS_ERR_NOMEM;
		ctx->ids = ids;
		ctx->logits_rows = n;
	}
	gemm(ctx, 0, ctx->U + i * d, d, ctx->m->lm_head, ctx->logits, V, n, V, d, 0.0f);
	return 0;
}

static int argmax(void *b, int64_t n, int32_t n_ids)
{
	cpu_be *ctx = b;
	ss_argmax_rows_cpu(ctx->ids, ctx->logits, ctx->c.vocab_padded, n, n_ids);
	return 0;
}

static int logits(void *b, float *dst, int64_t k, int64_t n)
{
	cpu_be *ctx = b;
	const int64_t V = ctx->c.vocab_padded;
	memcpy(dst, ctx->logits + k * V, (size_t)(n * V) * sizeof(float));
	return 0;
}

static int ids(void *b, int32_t *dst, int64_t n)
{
	cpu_be *ctx = b;
	memcpy(dst, ctx->ids, (size_t)n * sizeof(int32_t));
	return 0;
}

static const char *error(void *b)
{
	(void)b;
	return "out of memory";
}

static size_t bytes(const void *b)
{
	return ((const cpu_be *)b)->bytes;
}

static void be_free(void *b)
{
	cpu_be *ctx = b;
	if (!ctx)
		return;
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
	free(ctx->XDBC);
	free(ctx->segs);
	free(ctx->blk);
	free(ctx->xpack);
	free(ctx->xpoff);
	free(ctx->logits);
	free(ctx->ids);
	free(ctx);
}

static const ss_backend_ops cpu_ops = {
	.lm_rows = LM_ROWS,
	.step_rows = 0,
	.deterministic = 1,
	.fresh_ssm = 1,
	.free = be_free,
	.bytes = bytes,
	.error = error,
	.pass_begin = pass_begin,
	.embed = embed,
	.rmsnorm = rmsnorm,
	.linear = linear,
	.conv = conv,
	.dt = dt,
	.scan = scan,
	.gated_norm = gated_norm,
	.mixer = mixer,
	.norm_f = norm_f,
	.hidden = hidden,
	.lm_head = lm_head,
	.argmax = argmax,
	.logits = logits,
	.ids = ids,
};

int ss_backend_cpu_init(void **be, const ss_backend_ops **ops, const ss_model *m, int n_threads,
			int64_t ub, char *errmsg)
{
	const ss_model_config *c = &m->cfg;
	cpu_be *ctx = calloc(1, sizeof(*ctx));
	int err, l, k, ch;

	*be = NULL;
	*ops = &cpu_ops;
	if (!ctx)
		return SS_ERR_NOMEM;
	ctx->m = m;
	ctx->c = *c;
	ctx->n_threads = n_threads;
	ctx->ubatch = ub;
	ctx->m1 = ss_model_is_mamba1(c);
	ctx->blas = ss_gemm_choice() == SS_GEMM_BLAS;
	blas_serial();
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
	ctx->blk = xalloc((size_t)ub * 3, sizeof(int64_t), &ctx->bytes);
	ctx->xpoff = xalloc((size_t)ub, sizeof(int64_t), &ctx->bytes);
	ctx->logits_rows = LOGITS_ROWS0;
	ctx->logits = xalloc((size_t)LOGITS_ROWS0 * c->vocab_padded, sizeof(float), &ctx->bytes);
	ctx->ids = xalloc(LOGITS_ROWS0, sizeof(int32_t), &ctx->bytes);
	if (m->weights_dtype != SS_DTYPE_F32)
		ctx->wpanel = xalloc((size_t)ctx->n_threads * COL_BLOCK *
					     (c->d_inner > c->d_model ? c->d_inner : c->d_model),
				     sizeof(float), &ctx->bytes);
	if (ctx->m1) {
		/* no A, chunked-scan work or dtsum: scan1 needs none */
		ctx->XDBC = xalloc((size_t)ub * (c->dt_rank + 2 * c->d_state), sizeof(float), &ctx->bytes);
		ctx->A = ctx->XDBC ? xalloc(1, sizeof(float), &ctx->bytes) : NULL;
		ctx->scan_work = xalloc(1, sizeof(float), &ctx->bytes);
		ctx->scan_dtsum = xalloc(1, sizeof(double), &ctx->bytes);
	} else {
		ctx->A = xalloc((size_t)c->n_layer * c->nheads, sizeof(float), &ctx->bytes);
		ctx->scan_work_len = ss_scan_chunked_work(c->nheads / c->ngroups, c->headdim, c->d_state);
		ctx->scan_work = xalloc((size_t)ctx->n_threads * ctx->scan_work_len, sizeof(float),
					&ctx->bytes);
		ctx->scan_dtsum = xalloc((size_t)ctx->n_threads * c->nheads, sizeof(double), &ctx->bytes);
	}
	if ((m->weights_dtype != SS_DTYPE_F32 && !ctx->wpanel) || !ctx->A || !ctx->scan_work ||
	    !ctx->scan_dtsum || !ctx->conv_wt || !ctx->H || !ctx->U || !ctx->ZXD || !ctx->XBC ||
	    !ctx->DT || !ctx->Y || !ctx->segs || !ctx->blk || !ctx->xpoff || !ctx->logits || !ctx->ids) {
		be_free(ctx);
		ss_errf(errmsg, 0, "out of memory for a %lld-token ubatch", (long long)ub);
		return SS_ERR_NOMEM;
	}
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *layer = &m->layers[l];
		for (k = 0; !ctx->m1 && k < c->nheads; k++)
			ctx->A[(size_t)l * c->nheads + k] = -expf(layer->A_log[k]);
		for (k = 0; k < c->d_conv; k++)
			for (ch = 0; ch < c->conv_dim; ch++)
				ctx->conv_wt[((size_t)l * c->d_conv + k) * c->conv_dim + ch] =
					layer->conv_w[(size_t)ch * c->d_conv + k];
	}
	*be = ctx;
	return 0;
}
