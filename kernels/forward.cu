/*
 * forward.cu — the Mamba-2 forward pass on the GPU: the ops of kernels/ in
 * the order of lib/forward.c, on one stream.
 *
 * Weights are uploaded once at init: the projections, embedding and lm_head
 * in the checkpoint's dtype (bf16/f16 stay 2 bytes; GEMMs accumulate in
 * f32), the small per-channel weights in f32, conv1d weights transposed
 * tap-major as the conv op wants them. Activations live in [ubatch][...]
 * buffers as on the CPU (H, U, ZXD, XBC, DT, Y). The states of a call live
 * in device "slots" ([n][all layers] each), at a fixed stride so that every
 * op reaches sequence s of a pass at base + s*stride:
 *   prefill: states uploaded to slots 0..n-1, passes of <= ubatch tokens
 *            (a pass covers consecutive sequences, empty ones included, so
 *            slot = sequence index), states and outputs copied back at the
 *            end — nothing of the caller's is written before success;
 *   decode:  begin uploads the bound states once, each step moves only
 *            tokens in and logits/ids out, end copies the states back.
 * A decode step (fixed batch, fixed buffers) is captured once into a CUDA
 * graph and replayed: at batch 1 a step is hundreds of small kernels whose
 * launch cost would otherwise exceed the weight-reading time. SS_CUDA_GRAPHS=0
 * turns that off; a failed capture falls back to plain launches.
 * The prefill scan is the chunked SSD (ssd.cu) when some sequence of the
 * pass has >= 128 tokens, else the sequential kernel (scan.cu);
 * SS_CUDA_SCAN=seq|ssd forces one.
 * ref: lib/forward.c; mamba_ssm modules/mamba2.py forward() and step();
 *      mamba_ssm utils/generation.py (CUDA-graph decoding).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.cuh"
#include "conv.cuh"
#include "dt.cuh"
#include "embed.cuh"
#include "forward.cuh"
#include "linear.cuh"
#include "norm.cuh"
#include "scan.cuh"
#include "ssd.cuh"

/* Rows of logits computed per lm_head GEMM (the [LG][vocab] f32 buffer). */
#define LG 256
/* The SSD scan needs sequences this long to beat the sequential one. */
#define SSD_MIN_LEN 128
/* Most SSD scratch one pass may ask for (bytes); beyond, the sequential scan. */
#define SSD_MAX_SCRATCH (2ull << 30)

typedef struct {
	float *norm, *conv_wt, *conv_b, *dt_bias, *A_log, *D, *gnorm;
	void *in_proj, *out_proj;
} layer_w;

typedef struct {
	int seq;       /* index into the call's seqs (= slot) */
	int64_t start; /* first token of the segment within its sequence */
	int64_t n;     /* tokens (0 for an empty sequence) */
	int64_t row0;
} segment;

struct ss_cuda_fwd {
	ss_model_config c;
	ss_dtype wt;          /* dtype of projections, embedding, lm_head */
	int64_t ubatch;
	cudaStream_t st;
	ss_cuda_blas *blas;
	void *emb, *lm_head;  /* lm_head == emb when tied; NULL when absent */
	float *norm_f;
	layer_w *layers;      /* [n_layer], host array of device pointers */
	float *H, *U, *ZXD, *XBC, *DT, *Y, *Lg;
	int32_t *tok, *ids, *gather;
	int64_t *sstart;
	/* host staging */
	int32_t *h_tok, *h_gather;
	int64_t *h_sstart;
	segment *segs;
	int *out_seq;         /* [ubatch+1] sequences of the gathered last rows */
	/* state slots */
	float *ssm, *conv, *ld;
	int slots;
	size_t ssm_len, conv_len, ld_len; /* floats per state, all layers */
	/* decode */
	ss_state **bound;
	int nbound, bound_cap;
	int use_graphs;
	cudaGraphExec_t graph;
	int graph_n, graph_out; /* the captured step: batch, output kind */
	int warm_n, warm_out;   /* the last step run plainly before a capture */
	/* SS_CUDA_SCAN: 0 auto, 1 sequential, 2 SSD */
	int scan_mode;
	size_t bytes;
};

static void set_err(char *errmsg, const char *fmt, ...)
{
	va_list ap;
	if (!errmsg)
		return;
	va_start(ap, fmt);
	vsnprintf(errmsg, SS_ERRMSG_MAX, fmt, ap);
	va_end(ap);
}

static int dev_err(char *errmsg, int err)
{
	if (err)
		set_err(errmsg, "CUDA: %s", ss_cuda_last_error());
	return err;
}

static int dalloc(ss_cuda_fwd *g, void **p, size_t bytes)
{
	if (bytes == 0)
		bytes = 16;
	if (ss_cuda_note(cudaMalloc(p, bytes), "cudaMalloc")) {
		*p = NULL;
		return SS_ERR_DEVICE;
	}
	g->bytes += bytes;
	return 0;
}

static int upload_f32(ss_cuda_fwd *g, float **dst, const float *src, size_t n)
{
	int err = dalloc(g, (void **)dst, n * sizeof(float));
	if (!err)
		err = ss_cuda_note(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice),
				   "upload");
	return err;
}

/* A weight matrix held on the host in m->wtype (src_t): as it is when that
 * is g->wt, else f32 converted on the device (tmp: n f32 of scratch). */
static int upload_w(ss_cuda_fwd *g, void **dst, const void *src, ss_dtype src_t, size_t n,
		    float *tmp)
{
	int err;
	if (src_t == g->wt) {
		/* no libss call here: the plugin resolves none of its symbols */
		const size_t bytes = n * (src_t == SS_DTYPE_F32 ? 4 : 2);
		err = dalloc(g, dst, bytes);
		return err ? err : ss_cuda_note(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice),
						"upload");
	}
	err = dalloc(g, dst, n * 2);
	if (!err)
		err = ss_cuda_note(cudaMemcpy(tmp, src, n * sizeof(float), cudaMemcpyHostToDevice),
				   "upload");
	if (!err) {
		ss_cuda_convert(*dst, g->wt, tmp, (int64_t)n, 0);
		err = ss_cuda_note(cudaDeviceSynchronize(), "convert weights");
	}
	return err;
}

extern "C" void ss_cuda_fwd_free(ss_cuda_fwd *g)
{
	if (!g)
		return;
	if (g->st)
		cudaStreamSynchronize(g->st);
	if (g->graph)
		cudaGraphExecDestroy(g->graph);
	if (g->layers) {
		for (int l = 0; l < g->c.n_layer; l++) {
			layer_w *w = &g->layers[l];
			cudaFree(w->norm);
			cudaFree(w->conv_wt);
			cudaFree(w->conv_b);
			cudaFree(w->dt_bias);
			cudaFree(w->A_log);
			cudaFree(w->D);
			cudaFree(w->gnorm);
			cudaFree(w->in_proj);
			cudaFree(w->out_proj);
		}
		free(g->layers);
	}
	if (g->lm_head != g->emb)
		cudaFree(g->lm_head);
	cudaFree(g->emb);
	cudaFree(g->norm_f);
	cudaFree(g->H);
	cudaFree(g->U);
	cudaFree(g->ZXD);
	cudaFree(g->XBC);
	cudaFree(g->DT);
	cudaFree(g->Y);
	cudaFree(g->Lg);
	cudaFree(g->tok);
	cudaFree(g->ids);
	cudaFree(g->gather);
	cudaFree(g->sstart);
	cudaFree(g->ssm);
	cudaFree(g->conv);
	cudaFree(g->ld);
	cudaFreeHost(g->h_tok);
	cudaFreeHost(g->h_gather);
	cudaFreeHost(g->h_sstart);
	free(g->segs);
	free(g->out_seq);
	free(g->bound);
	ss_cuda_blas_free(g->blas);
	if (g->st)
		cudaStreamDestroy(g->st);
	free(g);
}

extern "C" size_t ss_cuda_fwd_bytes(const ss_cuda_fwd *g)
{
	return g ? g->bytes : 0;
}

extern "C" int ss_cuda_fwd_init(ss_cuda_fwd **out, const ss_model *m, ss_dtype wdtype,
				int ubatch, char *errmsg)
{
	const ss_model_config *c = &m->cfg;
	ss_cuda_fwd *g;
	float *tmp = NULL, *cwt = NULL;
	const char *env;
	int err = 0;

	*out = NULL;
	if (c->d_conv < 1 || c->d_conv > SS_CONV_MAX || c->d_state > 256) {
		set_err(errmsg, "the CUDA forward pass needs d_conv <= %d and d_state <= 256",
			SS_CONV_MAX);
		return SS_ERR_UNSUPPORTED;
	}
	g = (ss_cuda_fwd *)calloc(1, sizeof(*g));
	if (!g)
		return SS_ERR_NOMEM;
	g->c = *c;
	/* matrices the host holds in 16 bits stay so; f32 ones go in wdtype */
	g->wt = m->wtype != SS_DTYPE_F32 ? m->wtype
		: wdtype == SS_DTYPE_BF16 || wdtype == SS_DTYPE_F16 ? wdtype : SS_DTYPE_F32;
	g->ubatch = ubatch > 0 ? ubatch : 8192;
	env = getenv("SS_CUDA_GRAPHS");
	g->use_graphs = !(env && strcmp(env, "0") == 0);
	env = getenv("SS_CUDA_SCAN");
	g->scan_mode = env && !strcmp(env, "seq") ? 1 : env && !strcmp(env, "ssd") ? 2 : 0;
	g->ssm_len = (size_t)c->n_layer * c->nheads * c->headdim * c->d_state;
	g->conv_len = (size_t)c->n_layer * c->conv_dim * (c->d_conv - 1);
	g->ld_len = (size_t)c->n_layer * c->nheads;
	g->bytes = sizeof(*g);

	const int64_t ub = g->ubatch, V = c->vocab_padded, dm = c->d_model;
	const size_t big = (size_t)V * dm > (size_t)c->d_in_proj * dm
				   ? (size_t)V * dm
				   : (size_t)c->d_in_proj * dm;
	const int64_t kmax = c->d_inner > dm ? c->d_inner : dm;
	if (ss_cuda_note(cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking), "stream") ||
	    !(g->blas = ss_cuda_blas_create(g->st, (size_t)ub * kmax * 2)) ||
	    ss_cuda_note(cudaMalloc((void **)&tmp, big * sizeof(float)), "cudaMalloc") ||
	    !(cwt = (float *)malloc((size_t)c->d_conv * c->conv_dim * sizeof(float))) ||
	    !(g->layers = (layer_w *)calloc((size_t)c->n_layer, sizeof(layer_w)))) {
		err = SS_ERR_DEVICE;
		goto fail;
	}
	if ((err = upload_w(g, &g->emb, m->embedding, m->wtype, (size_t)V * dm, tmp)) ||
	    (err = upload_f32(g, &g->norm_f, m->norm_f, (size_t)dm)))
		goto fail;
	if (m->lm_head && m->lm_head != m->embedding)
		err = upload_w(g, &g->lm_head, m->lm_head, m->wtype, (size_t)V * dm, tmp);
	else
		g->lm_head = m->lm_head ? g->emb : NULL;
	if (err)
		goto fail;
	for (int l = 0; l < c->n_layer; l++) {
		const ss_layer *lw = &m->layers[l];
		layer_w *w = &g->layers[l];
		for (int k = 0; k < c->d_conv; k++)
			for (int ch = 0; ch < c->conv_dim; ch++)
				cwt[(size_t)k * c->conv_dim + ch] = lw->conv_w[(size_t)ch * c->d_conv + k];
		if ((err = upload_f32(g, &w->norm, lw->norm, (size_t)dm)) ||
		    (err = upload_w(g, &w->in_proj, lw->in_proj, m->wtype, (size_t)c->d_in_proj * dm, tmp)) ||
		    (err = upload_f32(g, &w->conv_wt, cwt, (size_t)c->d_conv * c->conv_dim)) ||
		    (err = upload_f32(g, &w->conv_b, lw->conv_b, (size_t)c->conv_dim)) ||
		    (err = upload_f32(g, &w->dt_bias, lw->dt_bias, (size_t)c->nheads)) ||
		    (err = upload_f32(g, &w->A_log, lw->A_log, (size_t)c->nheads)) ||
		    (err = upload_f32(g, &w->D, lw->D, (size_t)c->nheads)) ||
		    (err = upload_f32(g, &w->gnorm, lw->gnorm, (size_t)c->d_inner)) ||
		    (err = upload_w(g, &w->out_proj, lw->out_proj, m->wtype, (size_t)dm * c->d_inner, tmp)))
			goto fail;
	}
	if ((err = dalloc(g, (void **)&g->H, (size_t)ub * dm * 4)) ||
	    (err = dalloc(g, (void **)&g->U, (size_t)ub * dm * 4)) ||
	    (err = dalloc(g, (void **)&g->ZXD, (size_t)ub * c->d_in_proj * 4)) ||
	    (err = dalloc(g, (void **)&g->XBC, (size_t)ub * c->conv_dim * 4)) ||
	    (err = dalloc(g, (void **)&g->DT, (size_t)ub * c->nheads * 4)) ||
	    (err = dalloc(g, (void **)&g->Y, (size_t)ub * kmax * 4)) ||
	    (err = dalloc(g, (void **)&g->Lg, (size_t)LG * V * 4)) ||
	    (err = dalloc(g, (void **)&g->tok, (size_t)ub * 4)) ||
	    (err = dalloc(g, (void **)&g->ids, (size_t)ub * 4)) ||
	    (err = dalloc(g, (void **)&g->gather, (size_t)ub * 4)) ||
	    (err = dalloc(g, (void **)&g->sstart, (size_t)(ub + 2) * 8)))
		goto fail;
	if ((err = ss_cuda_note(cudaMallocHost((void **)&g->h_tok, (size_t)ub * 4), "pinned")) ||
	    (err = ss_cuda_note(cudaMallocHost((void **)&g->h_gather, (size_t)ub * 4), "pinned")) ||
	    (err = ss_cuda_note(cudaMallocHost((void **)&g->h_sstart, (size_t)(ub + 2) * 8),
				"pinned")))
		goto fail;
	g->segs = (segment *)calloc((size_t)ub + 1, sizeof(segment));
	g->out_seq = (int *)calloc((size_t)ub + 1, sizeof(int));
	if (!g->segs || !g->out_seq) {
		err = SS_ERR_NOMEM;
		goto fail;
	}
	cudaFree(tmp);
	free(cwt);
	*out = g;
	return 0;
fail:
	if (err != SS_ERR_NOMEM)
		set_err(errmsg, "CUDA: cannot put the model on the GPU: %s", ss_cuda_last_error());
	cudaFree(tmp);
	free(cwt);
	ss_cuda_fwd_free(g);
	return err ? err : SS_ERR_DEVICE;
}

/* Device slots for n states. Returns 0 or SS_ERR_DEVICE. */
static int ensure_slots(ss_cuda_fwd *g, int n)
{
	if (n <= g->slots)
		return 0;
	cudaStreamSynchronize(g->st);
	if (g->graph) { /* the captured step points into the old slots */
		cudaGraphExecDestroy(g->graph);
		g->graph = NULL;
	}
	cudaFree(g->ssm);
	cudaFree(g->conv);
	cudaFree(g->ld);
	g->ssm = g->conv = g->ld = NULL;
	g->slots = 0;
	if (ss_cuda_note(cudaMalloc((void **)&g->ssm, (size_t)n * g->ssm_len * 4), "state slots") ||
	    ss_cuda_note(cudaMalloc((void **)&g->conv, (size_t)n * (g->conv_len ? g->conv_len : 1) * 4),
			 "state slots") ||
	    ss_cuda_note(cudaMalloc((void **)&g->ld, (size_t)n * g->ld_len * 4), "state slots"))
		return SS_ERR_DEVICE;
	g->slots = n;
	return 0;
}

static int put_state(ss_cuda_fwd *g, int slot, const ss_state *s)
{
	if (ss_cuda_note(cudaMemcpyAsync(g->ssm + slot * g->ssm_len, s->ssm, g->ssm_len * 4,
					 cudaMemcpyHostToDevice, g->st), "state upload") ||
	    (g->conv_len &&
	     ss_cuda_note(cudaMemcpyAsync(g->conv + slot * g->conv_len, s->conv, g->conv_len * 4,
					  cudaMemcpyHostToDevice, g->st), "state upload")) ||
	    ss_cuda_note(cudaMemcpyAsync(g->ld + slot * g->ld_len, s->logdecay, g->ld_len * 4,
					 cudaMemcpyHostToDevice, g->st), "state upload"))
		return SS_ERR_DEVICE;
	return 0;
}

static int get_state(ss_cuda_fwd *g, int slot, ss_state *s)
{
	if (ss_cuda_note(cudaMemcpyAsync(s->ssm, g->ssm + slot * g->ssm_len, g->ssm_len * 4,
					 cudaMemcpyDeviceToHost, g->st), "state download") ||
	    (g->conv_len &&
	     ss_cuda_note(cudaMemcpyAsync(s->conv, g->conv + slot * g->conv_len, g->conv_len * 4,
					  cudaMemcpyDeviceToHost, g->st), "state download")) ||
	    ss_cuda_note(cudaMemcpyAsync(s->logdecay, g->ld + slot * g->ld_len, g->ld_len * 4,
					 cudaMemcpyDeviceToHost, g->st), "state download"))
		return SS_ERR_DEVICE;
	return 0;
}

/* The layers over T rows of nseq sequences in slots slot0.. (seq_start on
 * the device, NULL for one row per sequence: decode). */
static int run_layers(ss_cuda_fwd *g, int64_t T, int nseq, int slot0, int64_t max_len,
		      int skip_last_mix)
{
	const ss_model_config *c = &g->c;
	const int64_t dm = c->d_model, cd = c->conv_dim, K1 = c->d_conv - 1;
	const ss_scan_dims sd = { c->nheads, c->headdim, c->d_state, c->ngroups };
	const int decode = max_len < 0;
	const size_t PN = (size_t)c->headdim * c->d_state;
	int use_ssd = 0, err;

	if (!decode) {
		const size_t scratch = (size_t)nseq * ((max_len + SS_SSD_CHUNK - 1) / SS_SSD_CHUNK) *
				       c->nheads * PN * 4;
		use_ssd = g->scan_mode == 2 ||
			  (g->scan_mode == 0 && max_len >= SSD_MIN_LEN && scratch <= SSD_MAX_SCRATCH);
	}
	for (int l = 0; l < c->n_layer; l++) {
		const layer_w *w = &g->layers[l];
		const int last = l == c->n_layer - 1;
		float *ssm = g->ssm + slot0 * g->ssm_len + l * c->nheads * PN;
		float *conv = g->conv + slot0 * g->conv_len + l * cd * K1;
		float *ld = g->ld + slot0 * g->ld_len + l * c->nheads;
		float *xbc = g->XBC;

		ss_rmsnorm_cuda(g->U, g->H, NULL, w->norm, T, (int)dm, c->eps, g->st);
		if ((err = ss_linear_cuda(g->blas, g->ZXD, c->d_in_proj, g->U, dm, w->in_proj, g->wt, T,
					  c->d_in_proj, dm, 0.0f)))
			return err;
		ss_conv1d_silu_cuda(xbc, cd, g->ZXD + c->d_inner, c->d_in_proj, decode ? NULL : g->sstart,
				    nseq, conv, g->conv_len, w->conv_wt, cd, w->conv_b, (int)cd,
				    c->d_conv, g->st);
		ss_dt_softplus_cuda(g->DT, c->nheads, g->ZXD + c->d_inner + cd, c->d_in_proj,
				    w->dt_bias, T, c->nheads, c->dt_min, c->dt_max, g->st);
		float *y = last && skip_last_mix ? NULL : g->Y;
		const float *B = xbc + c->d_inner, *C = xbc + c->d_inner + c->ngroups * c->d_state;
		if (decode)
			err = ss_ssm_step_cuda(&sd, nseq, xbc, cd, B, cd, C, cd, g->DT, c->nheads,
					       w->A_log, w->D, ssm, g->ssm_len, y, c->d_inner, ld,
					       g->ld_len, g->st);
		else if (use_ssd)
			err = ss_ssd_scan_cuda(&sd, g->sstart, nseq, max_len, xbc, cd, B, cd, C, cd,
					       g->DT, c->nheads, w->A_log, w->D, ssm, g->ssm_len, y,
					       c->d_inner, ld, g->ld_len, g->st);
		else
			err = ss_ssm_scan_cuda(&sd, g->sstart, nseq, xbc, cd, B, cd, C, cd, g->DT,
					       c->nheads, w->A_log, w->D, ssm, g->ssm_len, y,
					       c->d_inner, ld, g->ld_len, g->st);
		if (err)
			return err;
		if (!y)
			break;
		ss_gated_rmsnorm_cuda(g->Y, c->d_inner, g->ZXD, c->d_in_proj, w->gnorm, T, c->d_inner,
				      c->ngroups, c->eps, g->st);
		if ((err = ss_linear_cuda(g->blas, g->H, dm, g->Y, c->d_inner, w->out_proj, g->wt, T, dm,
					  c->d_inner, 1.0f)))
			return err;
	}
	return ss_cuda_note(cudaGetLastError(), "forward");
}

/* dst[i] = src[rows[i]] for d-float rows. */
__global__ void gather_rows_kernel(float *dst, const float *src, const int32_t *rows, int d)
{
	const int64_t i = blockIdx.x;
	const float *s = src + (int64_t)rows[i] * d;
	for (int k = threadIdx.x; k < d; k += blockDim.x)
		dst[i * d + k] = s[k];
}

/* norm_f of n contiguous rows at src (modified: none, res NULL) into U. */
static void norm_f(ss_cuda_fwd *g, float *src, int64_t n)
{
	ss_rmsnorm_cuda(g->U, src, NULL, g->norm_f, n, g->c.d_model, g->c.eps, g->st);
}

static int any_output(const ss_forward_seq *seqs, int n, ss_logits_mode mode)
{
	if (mode == SS_LOGITS_NONE)
		return 0;
	for (int i = 0; i < n; i++)
		if (seqs[i].logits || seqs[i].hidden)
			return 1;
	return 0;
}

/* Outputs of a pass, SS_LOGITS_ALL: every row of each segment. */
static int emit_all(ss_cuda_fwd *g, ss_forward_seq *seqs, int nseg)
{
	const int64_t dm = g->c.d_model, V = g->c.vocab_padded;
	int err;
	for (int i = 0; i < nseg; i++) {
		const segment *s = &g->segs[i];
		const ss_forward_seq *q = &seqs[s->seq];
		if (s->n == 0 || (!q->hidden && !q->logits))
			continue;
		norm_f(g, g->H + s->row0 * dm, s->n);
		if (q->hidden &&
		    ss_cuda_note(cudaMemcpyAsync(q->hidden + s->start * dm, g->U, s->n * dm * 4,
						 cudaMemcpyDeviceToHost, g->st), "download"))
			return SS_ERR_DEVICE;
		if (!q->logits)
			continue;
		for (int64_t r = 0; r < s->n; r += LG) {
			const int64_t m = s->n - r < LG ? s->n - r : LG;
			if ((err = ss_linear_cuda(g->blas, g->Lg, V, g->U + r * dm, dm, g->lm_head, g->wt,
						  m, V, dm, 0.0f)))
				return err;
			if (ss_cuda_note(cudaMemcpyAsync(q->logits + (s->start + r) * V, g->Lg, m * V * 4,
							 cudaMemcpyDeviceToHost, g->st), "download"))
				return SS_ERR_DEVICE;
		}
	}
	return 0;
}

/* Outputs of a pass, SS_LOGITS_LAST: the last row of each sequence that ends
 * in the pass, gathered so that LG of them share one pass over lm_head. */
static int emit_last(ss_cuda_fwd *g, ss_forward_seq *seqs, int nseg)
{
	const int64_t dm = g->c.d_model, V = g->c.vocab_padded;
	int n = 0, err;
	for (int i = 0; i < nseg; i++) {
		const segment *s = &g->segs[i];
		const ss_forward_seq *q = &seqs[s->seq];
		if (s->n == 0 || s->start + s->n != q->n_tokens || (!q->hidden && !q->logits))
			continue;
		g->h_gather[n] = (int32_t)(s->row0 + s->n - 1);
		g->out_seq[n++] = s->seq;
	}
	if (n == 0)
		return 0;
	if (ss_cuda_note(cudaMemcpyAsync(g->gather, g->h_gather, (size_t)n * 4,
					 cudaMemcpyHostToDevice, g->st), "upload"))
		return SS_ERR_DEVICE;
	/* Y is free once the layers ran: the gathered rows go there */
	gather_rows_kernel<<<n, 256, 0, g->st>>>(g->Y, g->H, g->gather, (int)dm);
	norm_f(g, g->Y, n);
	for (int r = 0; r < n; r += LG) {
		const int m = n - r < LG ? n - r : LG;
		int any_logits = 0;
		for (int k = r; k < r + m; k++) {
			const ss_forward_seq *q = &seqs[g->out_seq[k]];
			if (q->hidden &&
			    ss_cuda_note(cudaMemcpyAsync(q->hidden, g->U + (int64_t)k * dm, dm * 4,
							 cudaMemcpyDeviceToHost, g->st), "download"))
				return SS_ERR_DEVICE;
			any_logits |= q->logits != NULL;
		}
		if (!any_logits)
			continue;
		if ((err = ss_linear_cuda(g->blas, g->Lg, V, g->U + (int64_t)r * dm, dm, g->lm_head,
					  g->wt, m, V, dm, 0.0f)))
			return err;
		for (int k = r; k < r + m; k++) {
			const ss_forward_seq *q = &seqs[g->out_seq[k]];
			if (q->logits &&
			    ss_cuda_note(cudaMemcpyAsync(q->logits, g->Lg + (int64_t)(k - r) * V, V * 4,
							 cudaMemcpyDeviceToHost, g->st), "download"))
				return SS_ERR_DEVICE;
		}
	}
	return 0;
}

extern "C" int ss_cuda_fwd_prefill(ss_cuda_fwd *g, ss_forward_seq *seqs, int n_seqs,
				   ss_logits_mode mode, char *errmsg)
{
	const int outputs = any_output(seqs, n_seqs, mode);
	int cur = 0, err;
	int64_t off = 0;

	if (n_seqs == 0)
		return 0;
	if (outputs && !g->lm_head && mode != SS_LOGITS_NONE) {
		for (int i = 0; i < n_seqs; i++)
			if (seqs[i].logits) {
				set_err(errmsg, "sequence %d: logits asked of a model loaded without lm_head", i);
				return SS_ERR_INVALID;
			}
	}
	if ((err = ensure_slots(g, n_seqs)))
		return dev_err(errmsg, err);
	for (int i = 0; i < n_seqs; i++)
		if ((err = put_state(g, i, seqs[i].state)))
			return dev_err(errmsg, err);
	while (cur < n_seqs) {
		const int s0 = cur;
		int64_t T = 0, max_len = 0;
		int k = 0;
		g->h_sstart[0] = 0;
		while (cur < n_seqs && T < g->ubatch && k < g->ubatch) {
			const ss_forward_seq *q = &seqs[cur];
			int64_t take = q->n_tokens - off;
			if (take > g->ubatch - T)
				take = g->ubatch - T;
			if (take > 0)
				memcpy(g->h_tok + T, q->tokens + off, (size_t)take * 4);
			g->segs[k] = (segment){ cur, off, take, T };
			T += take;
			off += take;
			if (take > max_len)
				max_len = take;
			g->h_sstart[++k] = T;
			if (off < q->n_tokens)
				break; /* the pass is full; the sequence goes on in the next */
			cur++;
			off = 0;
		}
		if (T == 0)
			continue;
		if (ss_cuda_note(cudaMemcpyAsync(g->tok, g->h_tok, (size_t)T * 4,
						 cudaMemcpyHostToDevice, g->st), "upload") ||
		    ss_cuda_note(cudaMemcpyAsync(g->sstart, g->h_sstart, (size_t)(k + 1) * 8,
						 cudaMemcpyHostToDevice, g->st), "upload"))
			return dev_err(errmsg, SS_ERR_DEVICE);
		ss_embed_cuda(g->H, g->emb, g->wt, g->tok, T, g->c.d_model, g->st);
		if ((err = run_layers(g, T, k, s0, max_len, !outputs)))
			return dev_err(errmsg, err);
		if (outputs) {
			err = mode == SS_LOGITS_ALL ? emit_all(g, seqs, k) : emit_last(g, seqs, k);
			if (err)
				return dev_err(errmsg, err);
		}
		/* the pinned staging (tokens, seq_start) is reused by the next pass */
		if ((err = ss_cuda_note(cudaStreamSynchronize(g->st), "prefill")))
			return dev_err(errmsg, err);
	}
	for (int i = 0; i < n_seqs; i++)
		if ((err = get_state(g, i, seqs[i].state)))
			return dev_err(errmsg, err);
	return dev_err(errmsg, ss_cuda_note(cudaStreamSynchronize(g->st), "prefill"));
}

extern "C" int ss_cuda_fwd_decode_begin(ss_cuda_fwd *g, ss_state **states, int n, char *errmsg)
{
	int err;
	if (n > g->bound_cap) {
		ss_state **p = (ss_state **)realloc(g->bound, (size_t)n * sizeof(*p));
		if (!p)
			return SS_ERR_NOMEM;
		g->bound = p;
		g->bound_cap = n;
	}
	if ((err = ensure_slots(g, n)))
		return dev_err(errmsg, err);
	for (int i = 0; i < n; i++)
		if ((err = put_state(g, i, states[i])))
			return dev_err(errmsg, err);
	memcpy(g->bound, states, (size_t)n * sizeof(*states));
	g->nbound = n;
	return dev_err(errmsg, ss_cuda_note(cudaStreamSynchronize(g->st), "decode begin"));
}

/* One decode step of nb rows from slot b0 (tokens already in g->tok[0..nb)),
 * through lm_head into Lg (when out) and argmax into g->ids (n_ids > 0). */
static int step_kernels(ss_cuda_fwd *g, int nb, int b0, int out, int32_t n_ids)
{
	const int64_t dm = g->c.d_model, V = g->c.vocab_padded;
	int err;
	ss_embed_cuda(g->H, g->emb, g->wt, g->tok, nb, (int)dm, g->st);
	if ((err = run_layers(g, nb, nb, b0, -1, !out)))
		return err;
	if (!out)
		return 0;
	norm_f(g, g->H, nb);
	if ((err = ss_linear_cuda(g->blas, g->Lg, V, g->U, dm, g->lm_head, g->wt, nb, V, dm, 0.0f)))
		return err;
	if (n_ids > 0)
		ss_argmax_rows_cuda(g->ids, g->Lg, V, nb, n_ids, g->st);
	return ss_cuda_note(cudaGetLastError(), "decode");
}

/* Runs a step through the captured graph when it matches (nb, out, n_ids
 * fixed at capture), capturing it on first use. Falls back to launches. */
static int step(ss_cuda_fwd *g, int nb, int b0, int out, int32_t n_ids)
{
	const int key = out ? (n_ids > 0 ? 2 + n_ids : 1) : 0;
	cudaGraph_t graph = NULL;

	if (!g->use_graphs || b0 != 0 || nb > LG)
		return step_kernels(g, nb, b0, out, n_ids);
	if (g->graph && g->graph_n == nb && g->graph_out == key)
		return ss_cuda_note(cudaGraphLaunch(g->graph, g->st), "graph launch");
	if (g->graph) {
		cudaGraphExecDestroy(g->graph);
		g->graph = NULL;
	}
	/* the first step of a kind runs plainly: cuBLAS picks its kernels and
	 * sets up its workspace outside the capture */
	if (g->warm_n != nb || g->warm_out != key) {
		g->warm_n = nb;
		g->warm_out = key;
		return step_kernels(g, nb, b0, out, n_ids);
	}
	if (cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
		cudaGetLastError();
		g->use_graphs = 0;
		return step_kernels(g, nb, b0, out, n_ids);
	}
	const int err = step_kernels(g, nb, b0, out, n_ids);
	const cudaError_t e = cudaStreamEndCapture(g->st, &graph);
	if (err || e != cudaSuccess || !graph ||
	    cudaGraphInstantiate(&g->graph, graph, 0) != cudaSuccess) {
		/* capture failed (a kernel or cuBLAS refused it): plain launches from now on */
		cudaGetLastError();
		if (graph)
			cudaGraphDestroy(graph);
		g->graph = NULL;
		g->use_graphs = 0;
		return step_kernels(g, nb, b0, out, n_ids);
	}
	cudaGraphDestroy(graph);
	g->graph_n = nb;
	g->graph_out = key;
	return ss_cuda_note(cudaGraphLaunch(g->graph, g->st), "graph launch");
}

extern "C" int ss_cuda_fwd_decode_next(ss_cuda_fwd *g, const int32_t *tokens, float *logits,
				       int32_t *ids, int32_t n_ids, char *errmsg)
{
	const int64_t V = g->c.vocab_padded;
	const int out = logits || ids;
	int err;

	if (out && !g->lm_head) {
		set_err(errmsg, "logits asked of a model loaded without lm_head");
		return SS_ERR_INVALID;
	}
	for (int b0 = 0; b0 < g->nbound; b0 += LG) {
		const int nb = g->nbound - b0 < LG ? g->nbound - b0 : LG;
		memcpy(g->h_tok, tokens + b0, (size_t)nb * 4);
		if ((err = ss_cuda_note(cudaMemcpyAsync(g->tok, g->h_tok, (size_t)nb * 4,
							cudaMemcpyHostToDevice, g->st), "upload")) ||
		    (err = step(g, nb, b0, out, ids ? n_ids : 0)))
			return dev_err(errmsg, err);
		if (logits &&
		    (err = ss_cuda_note(cudaMemcpyAsync(logits + b0 * V, g->Lg, (size_t)nb * V * 4,
							cudaMemcpyDeviceToHost, g->st), "download")))
			return dev_err(errmsg, err);
		if (ids &&
		    (err = ss_cuda_note(cudaMemcpyAsync(ids + b0, g->ids, (size_t)nb * 4,
							cudaMemcpyDeviceToHost, g->st), "download")))
			return dev_err(errmsg, err);
		/* h_tok is reused by the next slice */
		if ((err = ss_cuda_note(cudaStreamSynchronize(g->st), "decode")))
			return dev_err(errmsg, err);
	}
	return 0;
}

extern "C" int ss_cuda_fwd_decode_end(ss_cuda_fwd *g, char *errmsg)
{
	int err = 0;
	for (int i = 0; i < g->nbound && !err; i++)
		err = get_state(g, i, g->bound[i]);
	if (!err)
		err = ss_cuda_note(cudaStreamSynchronize(g->st), "decode end");
	g->nbound = 0;
	return dev_err(errmsg, err);
}
