/*
 * forward.cu — the GPU backend of the forward driver (lib/forward/backend.h; the
 * driver is lib/forward/forward.c): the ops of kernels/ on one stream, with the
 * model's weights, the state slots and the decode-step graph.
 *
 * Weights are uploaded once at init: the projections, embedding and lm_head
 * in the checkpoint's dtype (bf16/f16 stay 2 bytes; GEMMs accumulate in
 * f32), the small per-channel weights in f32, conv1d weights transposed
 * tap-major as the conv op wants them. Activations live in [ubatch][...]
 * buffers as on the CPU (H, U, ZXD, XBC, DT, Y). The states of a call live
 * in device "slots" ([n][all layers] each), at a fixed stride so that every
 * op reaches sequence s of a pass at base + s*stride (a pass covers
 * consecutive sequences, empty ones included, so slot = sequence index):
 *   prefill: states_in uploads them to slots 0..n-1 (an all-zero array,
 *            a fresh document's, is a memset on the device instead),
 *            states_out copies them back at the end — nothing of the
 *            caller's state is written before success;
 *   decode:  states_in at decode_begin, each step moves only tokens in and
 *            logits/ids out, states_out at decode_end.
 * A decode step (fixed batch, fixed buffers) is captured once into a CUDA
 * graph and replayed (graph_begin/graph_end): at batch 1 a step is hundreds
 * of small kernels whose launch cost would otherwise exceed the
 * weight-reading time. SS_CUDA_GRAPHS=0 turns that off; a failed capture
 * falls back to plain launches.
 * The prefill scan is the sequential kernel (scan.cu); SS_CUDA_SCAN=ssd asks
 * for the chunked SSD (ssd.cu), slower in every case measured so far (see
 * SSD_MAX_SCRATCH). SS_CUDA_PROFILE=1 times each op on the device and
 * prints the sums per op when the context is freed.
 * Mamba-1 (cfg arch "mamba1"): in_proj gives x | z, the conv runs on x, dt
 * is x_proj (f32 GEMM into XDBC [T][dt_rank | B | C]) then dt_proj
 * (dt.cu), the scan is scan1.cu's (per-element decays), the gate y·silu(z)
 * (norm.cu) replaces the gated norm.
 * ref: lib/forward/forward.c; mamba_ssm modules/mamba2.py forward() and step();
 *      mamba_ssm utils/generation.py (CUDA-graph decoding).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.cuh"
#include "forward.cuh"
#include "linear.cuh"
#include "ssd.cuh"

/* Rows of logits computed per lm_head GEMM (the [LG][vocab] f32 buffer),
 * and most rows of a decode step. */
#define LG 256
/* The prefill scan is the sequential kernel unless SS_CUDA_SCAN=ssd: the
 * chunked SSD lost every case measured on an H200 (bench/gpu.sh, bf16
 * weights; encode tokens/s, sequential against SSD): mamba2-130m, 16
 * documents of 512 tokens a pass, 47.5 k against 21.1 k; one document of
 * 8192 tokens a pass, 22.0 k against 20.9 k; mamba2-2.7b, 16 of 512, 6.4 k
 * against 2.4 k. Most SSD scratch one pass may ask for (bytes); beyond, the
 * sequential scan. */
#define SSD_MAX_SCRATCH (2ull << 30)

/* The ops timed by SS_CUDA_PROFILE=1 (gpu_ops_prof). */
enum { P_STATES_IN, P_STATES_OUT, P_PASS, P_EMBED, P_RMSNORM, P_IN_PROJ, P_OUT_PROJ, P_CONV,
       P_DT, P_SCAN, P_GNORM, P_NORM_F, P_LM_HEAD, P_ARGMAX, P_DOWNLOAD, P_N };
static const char *const prof_name[P_N] = { "states_in", "states_out", "pass_begin", "embed",
					    "rmsnorm", "in_proj", "out_proj", "conv", "dt", "scan",
					    "gated_norm", "norm_f", "lm_head", "argmax", "download" };

typedef struct {
	float *norm, *conv_wt, *conv_b, *dt_bias, *A_log, *D, *gnorm;
	float *x_proj, *dt_proj; /* Mamba-1 */
	void *in_proj, *out_proj;
} layer_w;

typedef struct {
	ss_model_config c;
	ss_dtype weights_dtype; /* of in_proj, out_proj, embedding, lm_head: m's */
	int64_t ubatch;
	cudaStream_t st;
	ss_cuda_blas *blas;
	void *emb, *lm_head;  /* lm_head == emb when tied; NULL when absent */
	float *norm_f;
	layer_w *layers;      /* [n_layer], host array of device pointers */
	float *H, *U, *ZXD, *XBC, *DT, *Y, *Lg;
	float *XDBC;          /* Mamba-1 [ubatch][dt_rank + 2*d_state] */
	int m1;               /* a Mamba-1 model */
	int32_t *tok, *ids, *gather;
	int64_t *sstart;
	/* host staging */
	int32_t *h_tok, *h_gather;
	int64_t *h_sstart;
	/* the pass (pass_begin) */
	int64_t T, max_len;   /* max_len < 0: a decode step */
	int nseq, slot0, use_ssd;
	/* state slots */
	float *ssm, *conv, *ld;
	int slots;
	size_t ssm_len, conv_len, ld_len; /* floats per state, all layers */
	/* decode graph */
	int use_graphs;
	int capturing;
	cudaGraphExec_t graph;
	int graph_n, graph_out; /* the captured step: batch, output kind */
	int warm_n, warm_out;   /* the last step run plainly before a capture */
	/* SS_CUDA_SCAN=ssd: the chunked SSD scan for prefill */
	int ssd_asked;
	/* SS_CUDA_PROFILE: each op's device time (gpu_ops_prof) */
	int prof;
	cudaEvent_t pe0, pe1;
	double prof_ms[P_N];
	long prof_calls[P_N];
	size_t bytes;
	char err[SS_ERRMSG_MAX];
} gpu_be;

static void set_err(char *errmsg, const char *fmt, ...)
{
	va_list ap;
	if (!errmsg)
		return;
	va_start(ap, fmt);
	vsnprintf(errmsg, SS_ERRMSG_MAX, fmt, ap);
	va_end(ap);
}

static int dalloc(gpu_be *g, void **p, size_t bytes)
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

static int upload_f32(gpu_be *g, float **dst, const float *src, size_t n)
{
	int err = dalloc(g, (void **)dst, n * sizeof(float));
	if (!err)
		err = ss_cuda_note(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice),
				   "upload");
	return err;
}

/* A weight matrix of n elements, held on the host in g->weights_dtype (f32,
 * bf16 or f16), copied to the device as it is. */
static int upload_w(gpu_be *g, void **dst, const void *src, size_t n)
{
	/* no libss call here: the plugin resolves none of its symbols */
	const size_t bytes = n * (g->weights_dtype == SS_DTYPE_F32 ? 4 : 2);
	const int err = dalloc(g, dst, bytes);
	return err ? err : ss_cuda_note(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice),
					"upload");
}

static void be_free(void *p)
{
	gpu_be *g = (gpu_be *)p;
	if (!g)
		return;
	if (g->st)
		cudaStreamSynchronize(g->st);
	if (g->prof) {
		double total = 0;
		for (int k = 0; k < P_N; k++)
			total += g->prof_ms[k];
		fprintf(stderr, "cuda profile (SS_CUDA_PROFILE=1, device time of each op): %.1f ms\n",
			total);
		for (int k = 0; k < P_N; k++)
			if (g->prof_calls[k])
				fprintf(stderr, "  %-10s %8ld calls %10.2f ms %5.1f%%\n", prof_name[k],
					g->prof_calls[k], g->prof_ms[k],
					total > 0 ? 100.0 * g->prof_ms[k] / total : 0.0);
	}
	if (g->pe0)
		cudaEventDestroy(g->pe0);
	if (g->pe1)
		cudaEventDestroy(g->pe1);
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
			cudaFree(w->x_proj);
			cudaFree(w->dt_proj);
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
	cudaFree(g->XDBC);
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
	ss_cuda_blas_free(g->blas);
	if (g->st)
		cudaStreamDestroy(g->st);
	free(g);
}

static size_t be_bytes(const void *p)
{
	return p ? ((const gpu_be *)p)->bytes : 0;
}

static int init(gpu_be **out, const ss_model *m, int ubatch, char *errmsg)
{
	const ss_model_config *c = &m->cfg;
	gpu_be *g;
	float *cwt = NULL;
	const char *env;
	int err = 0;

	*out = NULL;
	if (c->d_conv < 1 || c->d_conv > SS_CONV_MAX || c->d_state > 256) {
		set_err(errmsg, "the CUDA forward pass needs d_conv <= %d and d_state <= 256",
			SS_CONV_MAX);
		return SS_ERR_UNSUPPORTED;
	}
	g = (gpu_be *)calloc(1, sizeof(*g));
	if (!g)
		return SS_ERR_NOMEM;
	g->c = *c;
	g->m1 = !strcmp(c->arch, "mamba1");
	/* the matrices in the dtype the host holds them in: the checkpoint's, or
	 * what --weights-dtype asked (q8_0 never reaches here: forward.c keeps it
	 * on the CPU) */
	g->weights_dtype = m->weights_dtype;
	g->ubatch = ubatch > 0 ? ubatch : 8192;
	env = getenv("SS_CUDA_GRAPHS");
	g->use_graphs = !(env && strcmp(env, "0") == 0);
	env = getenv("SS_CUDA_SCAN");
	g->ssd_asked = env && !strcmp(env, "ssd");
	env = getenv("SS_CUDA_PROFILE");
	g->prof = env && strcmp(env, "0") != 0 && *env;
	if (g->prof) /* events cannot be waited on inside a graph capture */
		g->use_graphs = 0;
	g->ssm_len = (size_t)c->n_layer * c->nheads * c->headdim * c->d_state;
	g->conv_len = (size_t)c->n_layer * c->conv_dim * (c->d_conv - 1);
	/* Mamba-1: a decay per channel and state element */
	g->ld_len = (size_t)c->n_layer * c->nheads * (g->m1 ? c->d_state : 1);
	g->bytes = sizeof(*g);

	const int64_t ub = g->ubatch, V = c->vocab_padded, dm = c->d_model;
	const int64_t kmax = c->d_inner > dm ? c->d_inner : dm;
	if (ss_cuda_note(cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking), "stream") ||
	    (g->prof && (ss_cuda_note(cudaEventCreate(&g->pe0), "profile events") ||
			 ss_cuda_note(cudaEventCreate(&g->pe1), "profile events"))) ||
	    !(g->blas = ss_cuda_blas_create(g->st, (size_t)ub * kmax * 2)) ||
	    !(cwt = (float *)malloc((size_t)c->d_conv * c->conv_dim * sizeof(float))) ||
	    !(g->layers = (layer_w *)calloc((size_t)c->n_layer, sizeof(layer_w)))) {
		err = SS_ERR_DEVICE;
		goto fail;
	}
	if ((err = upload_w(g, &g->emb, m->embedding, (size_t)V * dm)) ||
	    (err = upload_f32(g, &g->norm_f, m->norm_f, (size_t)dm)))
		goto fail;
	if (m->lm_head && m->lm_head != m->embedding)
		err = upload_w(g, &g->lm_head, m->lm_head, (size_t)V * dm);
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
		    (err = upload_w(g, &w->in_proj, lw->in_proj, (size_t)c->d_in_proj * dm)) ||
		    (err = upload_f32(g, &w->conv_wt, cwt, (size_t)c->d_conv * c->conv_dim)) ||
		    (err = upload_f32(g, &w->conv_b, lw->conv_b, (size_t)c->conv_dim)) ||
		    (err = upload_f32(g, &w->dt_bias, lw->dt_bias, (size_t)c->nheads)) ||
		    (err = upload_f32(g, &w->A_log, lw->A_log,
				      (size_t)c->nheads * (g->m1 ? c->d_state : 1))) ||
		    (err = upload_f32(g, &w->D, lw->D, (size_t)c->nheads)) ||
		    (!g->m1 && (err = upload_f32(g, &w->gnorm, lw->gnorm, (size_t)c->d_inner))) ||
		    (g->m1 && (err = upload_f32(g, &w->x_proj, lw->x_proj,
					       (size_t)(c->dt_rank + 2 * c->d_state) * c->d_inner))) ||
		    (g->m1 && (err = upload_f32(g, &w->dt_proj, lw->dt_proj,
					       (size_t)c->d_inner * c->dt_rank))) ||
		    (err = upload_w(g, &w->out_proj, lw->out_proj, (size_t)dm * c->d_inner)))
			goto fail;
	}
	if ((err = dalloc(g, (void **)&g->H, (size_t)ub * dm * 4)) ||
	    (err = dalloc(g, (void **)&g->U, (size_t)ub * dm * 4)) ||
	    (err = dalloc(g, (void **)&g->ZXD, (size_t)ub * c->d_in_proj * 4)) ||
	    (err = dalloc(g, (void **)&g->XBC, (size_t)ub * c->conv_dim * 4)) ||
	    (err = dalloc(g, (void **)&g->DT, (size_t)ub * c->nheads * 4)) ||
	    (err = dalloc(g, (void **)&g->Y, (size_t)ub * kmax * 4)) ||
	    (g->m1 && (err = dalloc(g, (void **)&g->XDBC,
				    (size_t)ub * (c->dt_rank + 2 * c->d_state) * 4))) ||
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
	free(cwt);
	*out = g;
	return 0;
fail:
	if (err != SS_ERR_NOMEM)
		set_err(errmsg, "CUDA: cannot put the model on the GPU: %s", ss_cuda_last_error());
	free(cwt);
	be_free(g);
	return err ? err : SS_ERR_DEVICE;
}

/* Device slots for n states. Returns 0 or SS_ERR_DEVICE. */
static int ensure_slots(gpu_be *g, int n)
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

/* Whether n floats at p are all +0.0 (stops at the first other bit). */
static int all_zero(const float *p, size_t n)
{
	const uint32_t *u = (const uint32_t *)p;
	for (size_t i = 0; i < n; i += 1024) {
		const size_t e = n - i < 1024 ? n - i : 1024;
		uint32_t any = 0;
		for (size_t k = 0; k < e; k++)
			any |= u[i + k];
		if (any)
			return 0;
	}
	return 1;
}

/* One array of a state to the device: a memset when it is all zeros (a fresh
 * document's state: reading it on the host costs less than the pageable
 * copy, which reads and stages it), else the copy. */
static int put_array(gpu_be *g, float *dst, const float *src, size_t n)
{
	if (all_zero(src, n))
		return ss_cuda_note(cudaMemsetAsync(dst, 0, n * 4, g->st), "state upload");
	return ss_cuda_note(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyHostToDevice, g->st),
			    "state upload");
}

static int put_state(gpu_be *g, int slot, const ss_state *s)
{
	if (put_array(g, g->ssm + slot * g->ssm_len, s->ssm, g->ssm_len) ||
	    (g->conv_len && put_array(g, g->conv + slot * g->conv_len, s->conv, g->conv_len)) ||
	    put_array(g, g->ld + slot * g->ld_len, s->logdecay, g->ld_len))
		return SS_ERR_DEVICE;
	return 0;
}

static int get_state(gpu_be *g, int slot, ss_state *s)
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

/* ------------------------------------------------------------------- ops */

static int states_in(void *p, ss_state *const *states, int n)
{
	gpu_be *g = (gpu_be *)p;
	int err = ensure_slots(g, n);
	for (int i = 0; i < n && !err; i++)
		err = put_state(g, i, states[i]);
	return err;
}

static int states_out(void *p, ss_state *const *states, int n)
{
	gpu_be *g = (gpu_be *)p;
	int err = 0;
	for (int i = 0; i < n && !err; i++)
		err = get_state(g, i, states[i]);
	return err;
}

/* Stages the pass's tokens (and, prefill, its seq_start) and uploads them;
 * picks the scan. The staging is reused once the driver syncs. */
static int pass_begin(void *p, const ss_pass *ps)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	int64_t max_len = 0;

	g->T = ps->T;
	g->nseq = ps->nseg;
	g->slot0 = ps->nseg > 0 ? ps->segs[0].seq : 0;
	g->h_sstart[0] = 0;
	for (int k = 0; k < ps->nseg; k++) {
		const ss_segment *s = &ps->segs[k];
		if (s->n > 0)
			memcpy(g->h_tok + s->row0, ps->seqs[s->seq].tokens + s->start, (size_t)s->n * 4);
		g->h_sstart[k + 1] = s->row0 + s->n;
		if (s->n > max_len)
			max_len = s->n;
	}
	g->max_len = ps->decode ? -1 : max_len;
	g->use_ssd = 0;
	if (!ps->decode && !g->m1 && g->ssd_asked) {
		const size_t PN = (size_t)c->headdim * c->d_state;
		const size_t scratch = (size_t)ps->nseg * ((max_len + SS_SSD_CHUNK - 1) / SS_SSD_CHUNK) *
				       c->nheads * PN * 4;
		g->use_ssd = scratch <= SSD_MAX_SCRATCH;
	}
	if (ps->T > 0 &&
	    ss_cuda_note(cudaMemcpyAsync(g->tok, g->h_tok, (size_t)ps->T * 4, cudaMemcpyHostToDevice,
					 g->st), "upload"))
		return SS_ERR_DEVICE;
	if (!ps->decode &&
	    ss_cuda_note(cudaMemcpyAsync(g->sstart, g->h_sstart, (size_t)(ps->nseg + 1) * 8,
					 cudaMemcpyHostToDevice, g->st), "upload"))
		return SS_ERR_DEVICE;
	return 0;
}

static int embed(void *p, const ss_pass *ps)
{
	gpu_be *g = (gpu_be *)p;
	(void)ps;
	ss_embed_cuda(g->H, g->emb, g->weights_dtype, g->tok, g->T, g->c.d_model, g->st);
	return 0;
}

static int rmsnorm(void *p, const ss_pass *ps, int l)
{
	gpu_be *g = (gpu_be *)p;
	(void)ps;
	ss_rmsnorm_cuda(g->U, g->H, NULL, g->layers[l].norm, g->T, g->c.d_model, g->c.eps, g->st);
	return 0;
}

static int linear(void *p, const ss_pass *ps, int l, ss_linear_which which)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	const layer_w *w = &g->layers[l];
	const int64_t dm = c->d_model;
	(void)ps;
	if (which == SS_LINEAR_IN_PROJ)
		return ss_linear_cuda(g->blas, g->ZXD, c->d_in_proj, g->U, dm, w->in_proj,
				      g->weights_dtype, g->T, c->d_in_proj, dm, 0.0f);
	return ss_linear_cuda(g->blas, g->H, dm, g->Y, c->d_inner, w->out_proj, g->weights_dtype,
			      g->T, dm, c->d_inner, 1.0f);
}

static int conv(void *p, const ss_pass *ps, int l)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	const int64_t cd = c->conv_dim, K1 = c->d_conv - 1;
	const layer_w *w = &g->layers[l];
	float *conv = g->conv + g->slot0 * g->conv_len + l * cd * K1;
	/* Mamba-2's xBC follows z; Mamba-1's x comes first */
	ss_conv1d_silu_cuda(g->XBC, cd, g->ZXD + (g->m1 ? 0 : c->d_inner), c->d_in_proj,
			    ps->decode ? NULL : g->sstart, g->nseq, conv, g->conv_len, w->conv_wt, cd,
			    w->conv_b, (int)cd, c->d_conv, g->st);
	return 0;
}

static int dt(void *p, const ss_pass *ps, int l)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	(void)ps;
	if (g->m1) {
		const int64_t xo = c->dt_rank + 2 * c->d_state;
		int err = ss_linear_cuda(g->blas, g->XDBC, xo, g->XBC, c->d_inner, g->layers[l].x_proj,
					 SS_DTYPE_F32, g->T, xo, c->d_inner, 0.0f);
		if (err)
			return err;
		ss_dt_proj_cuda(g->DT, c->d_inner, g->XDBC, xo, g->layers[l].dt_proj,
				g->layers[l].dt_bias, g->T, c->d_inner, c->dt_rank, g->st);
		return 0;
	}
	ss_dt_softplus_cuda(g->DT, c->nheads, g->ZXD + c->d_inner + c->conv_dim, c->d_in_proj,
			    g->layers[l].dt_bias, g->T, c->nheads, c->dt_min, c->dt_max, g->st);
	return 0;
}

static int scan(void *p, const ss_pass *ps, int l)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	const int64_t cd = c->conv_dim;
	const ss_scan_dims sd = { c->nheads, c->headdim, c->d_state, c->ngroups };
	const size_t PN = (size_t)c->headdim * c->d_state;
	const layer_w *w = &g->layers[l];
	float *ssm = g->ssm + g->slot0 * g->ssm_len + l * c->nheads * PN;
	float *ld = g->ld + g->slot0 * g->ld_len + l * c->nheads;
	float *xbc = g->XBC;
	float *y = ps->state_only && l == c->n_layer - 1 ? NULL : g->Y;
	const float *B = xbc + c->d_inner, *C = xbc + c->d_inner + c->ngroups * c->d_state;
	int err;

	if (g->m1) {
		const int64_t xo = c->dt_rank + 2 * c->d_state;
		float *ssm1 = g->ssm + g->slot0 * g->ssm_len + (size_t)l * c->d_inner * c->d_state;
		float *ld1 = g->ld + g->slot0 * g->ld_len + (size_t)l * c->d_inner * c->d_state;
		err = ss_ssm1_scan_cuda(c->d_inner, c->d_state, ps->decode ? NULL : g->sstart, g->nseq,
					xbc, c->d_inner, g->XDBC + c->dt_rank, xo, g->DT, c->d_inner,
					w->A_log, w->D, ssm1, g->ssm_len, y, c->d_inner, ld1,
					g->ld_len, g->st);
	} else if (ps->decode)
		err = ss_ssm_step_cuda(&sd, g->nseq, xbc, cd, B, cd, C, cd, g->DT, c->nheads, w->A_log,
				       w->D, ssm, g->ssm_len, y, c->d_inner, ld, g->ld_len, g->st);
	else if (g->use_ssd)
		err = ss_ssd_scan_cuda(&sd, g->sstart, g->nseq, g->max_len, xbc, cd, B, cd, C, cd,
				       g->DT, c->nheads, w->A_log, w->D, ssm, g->ssm_len, y,
				       c->d_inner, ld, g->ld_len, g->st);
	else
		err = ss_ssm_scan_cuda(&sd, g->sstart, g->nseq, xbc, cd, B, cd, C, cd, g->DT,
				       c->nheads, w->A_log, w->D, ssm, g->ssm_len, y, c->d_inner, ld,
				       g->ld_len, g->st);
	return err ? err : ss_cuda_note(cudaGetLastError(), "forward");
}

static int gated_norm(void *p, const ss_pass *ps, int l)
{
	gpu_be *g = (gpu_be *)p;
	const ss_model_config *c = &g->c;
	(void)ps;
	if (g->m1) {
		ss_gate_silu_cuda(g->Y, c->d_inner, g->ZXD + c->d_inner, c->d_in_proj, g->T, c->d_inner,
				  g->st);
		return 0;
	}
	ss_gated_rmsnorm_cuda(g->Y, c->d_inner, g->ZXD, c->d_in_proj, g->layers[l].gnorm, g->T,
			      c->d_inner, c->ngroups, c->eps, g->st);
	return 0;
}

/* dst[i] = src[rows[i]] for d-float rows. */
__global__ void gather_rows_kernel(float *dst, const float *src, const int32_t *rows, int d)
{
	const int64_t i = blockIdx.x;
	const float *s = src + (int64_t)rows[i] * d;
	for (int k = threadIdx.x; k < d; k += blockDim.x)
		dst[i * d + k] = s[k];
}

static int norm_f(void *p, const int64_t *rows, int64_t r0, int64_t n)
{
	gpu_be *g = (gpu_be *)p;
	const int64_t dm = g->c.d_model;
	const float *src = g->H + r0 * dm;
	if (n <= 0)
		return 0;
	if (rows) {
		for (int64_t i = 0; i < n; i++)
			g->h_gather[i] = (int32_t)rows[i];
		if (ss_cuda_note(cudaMemcpyAsync(g->gather, g->h_gather, (size_t)n * 4,
						 cudaMemcpyHostToDevice, g->st), "upload"))
			return SS_ERR_DEVICE;
		/* Y is free once the layers ran: the gathered rows go there */
		gather_rows_kernel<<<(unsigned)n, 256, 0, g->st>>>(g->Y, g->H, g->gather, (int)dm);
		src = g->Y;
	}
	ss_rmsnorm_cuda(g->U, (float *)src, NULL, g->norm_f, n, (int)dm, g->c.eps, g->st);
	return 0;
}

static int hidden(void *p, float *dst, int64_t i, int64_t n)
{
	gpu_be *g = (gpu_be *)p;
	const int64_t dm = g->c.d_model;
	return ss_cuda_note(cudaMemcpyAsync(dst, g->U + i * dm, (size_t)(n * dm) * 4,
					    cudaMemcpyDeviceToHost, g->st), "download");
}

static int lm_head(void *p, int64_t i, int64_t n, float *dst)
{
	gpu_be *g = (gpu_be *)p;
	const int64_t dm = g->c.d_model, V = g->c.vocab_padded;
	int err;
	if (!dst)
		return ss_linear_cuda(g->blas, g->Lg, V, g->U + i * dm, dm, g->lm_head,
				      g->weights_dtype, n, V, dm, 0.0f);
	for (int64_t r = 0; r < n; r += LG) {
		const int64_t m = n - r < LG ? n - r : LG;
		if ((err = ss_linear_cuda(g->blas, g->Lg, V, g->U + (i + r) * dm, dm, g->lm_head,
					  g->weights_dtype, m, V, dm, 0.0f)))
			return err;
		if (ss_cuda_note(cudaMemcpyAsync(dst + r * V, g->Lg, (size_t)(m * V) * 4,
						 cudaMemcpyDeviceToHost, g->st), "download"))
			return SS_ERR_DEVICE;
	}
	return 0;
}

static int argmax(void *p, int64_t n, int32_t n_ids)
{
	gpu_be *g = (gpu_be *)p;
	ss_argmax_rows_cuda(g->ids, g->Lg, g->c.vocab_padded, n, n_ids, g->st);
	return ss_cuda_note(cudaGetLastError(), "decode");
}

static int logits(void *p, float *dst, int64_t k, int64_t n)
{
	gpu_be *g = (gpu_be *)p;
	const int64_t V = g->c.vocab_padded;
	return ss_cuda_note(cudaMemcpyAsync(dst, g->Lg + k * V, (size_t)(n * V) * 4,
					    cudaMemcpyDeviceToHost, g->st), "download");
}

static int ids(void *p, int32_t *dst, int64_t n)
{
	gpu_be *g = (gpu_be *)p;
	return ss_cuda_note(cudaMemcpyAsync(dst, g->ids, (size_t)n * 4, cudaMemcpyDeviceToHost,
					    g->st), "download");
}

static int sync(void *p)
{
	return ss_cuda_note(cudaStreamSynchronize(((gpu_be *)p)->st), "forward");
}

static const char *error(void *p)
{
	gpu_be *g = (gpu_be *)p;
	snprintf(g->err, sizeof(g->err), "CUDA: %s", ss_cuda_last_error());
	return g->err;
}

/* A step replays the captured graph when it matches (batch, outputs fixed
 * at capture), else is captured on first use; falls back to launches. */
static int graph_begin(void *p, const ss_pass *ps, int key, int *replayed)
{
	gpu_be *g = (gpu_be *)p;
	const int nb = (int)ps->T;

	*replayed = 0;
	g->capturing = 0;
	if (!g->use_graphs || g->slot0 != 0 || nb > LG)
		return 0;
	if (g->graph && g->graph_n == nb && g->graph_out == key) {
		*replayed = 1;
		return ss_cuda_note(cudaGraphLaunch(g->graph, g->st), "graph launch");
	}
	if (g->graph) {
		cudaGraphExecDestroy(g->graph);
		g->graph = NULL;
	}
	/* the first step of a kind runs plainly: cuBLAS picks its kernels and
	 * sets up its workspace outside the capture */
	if (g->warm_n != nb || g->warm_out != key) {
		g->warm_n = nb;
		g->warm_out = key;
		return 0;
	}
	if (cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
		cudaGetLastError();
		g->use_graphs = 0;
		return 0;
	}
	g->capturing = 1;
	g->graph_n = nb;
	g->graph_out = key;
	return 0;
}

static int graph_end(void *p, int err, int *again)
{
	gpu_be *g = (gpu_be *)p;
	cudaGraph_t graph = NULL;

	*again = 0;
	if (!g->capturing)
		return err;
	g->capturing = 0;
	const cudaError_t e = cudaStreamEndCapture(g->st, &graph);
	if (err || e != cudaSuccess || !graph ||
	    cudaGraphInstantiate(&g->graph, graph, 0) != cudaSuccess) {
		/* capture failed (a kernel or cuBLAS refused it): plain launches from now on */
		cudaGetLastError();
		if (graph)
			cudaGraphDestroy(graph);
		g->graph = NULL;
		g->use_graphs = 0;
		*again = 1;
		return 0;
	}
	cudaGraphDestroy(graph);
	return ss_cuda_note(cudaGraphLaunch(g->graph, g->st), "graph launch");
}

static const ss_backend_ops gpu_ops = {
	LG,           /* lm_rows */
	LG,           /* step_rows */
	0,            /* deterministic */
	be_free,
	be_bytes,
	error,
	states_in,
	states_out,
	pass_begin,
	embed,
	rmsnorm,
	linear,
	conv,
	dt,
	scan,
	gated_norm,
	norm_f,
	hidden,
	lm_head,
	argmax,
	logits,
	ids,
	sync,
	graph_begin,
	graph_end,
	NULL, /* mixer: the four ops */
	0,    /* fresh_ssm: the driver zeroes a fresh state's ssm before states_in */
};

/* SS_CUDA_PROFILE=1: the ops above, each between two events that are waited
 * on at once, its device time summed per op (printed by be_free). The host
 * no longer runs ahead of the device, so the sum is the device's busy time
 * with no overlap, not the speed of a normal run. */
static void prof_begin(gpu_be *g)
{
	cudaEventRecord(g->pe0, g->st);
}

static int prof_end(gpu_be *g, int k, int err)
{
	float ms = 0.0f;
	cudaEventRecord(g->pe1, g->st);
	if (cudaEventSynchronize(g->pe1) == cudaSuccess &&
	    cudaEventElapsedTime(&ms, g->pe0, g->pe1) == cudaSuccess) {
		g->prof_ms[k] += ms;
		g->prof_calls[k]++;
	}
	return err;
}

#define PROF(k, call)                          \
	do {                                   \
		gpu_be *g_ = (gpu_be *)p;      \
		prof_begin(g_);                \
		return prof_end(g_, k, call);  \
	} while (0)

static int p_states_in(void *p, ss_state *const *s, int n)
{
	PROF(P_STATES_IN, states_in(p, s, n));
}

static int p_states_out(void *p, ss_state *const *s, int n)
{
	PROF(P_STATES_OUT, states_out(p, s, n));
}

static int p_pass_begin(void *p, const ss_pass *ps)
{
	PROF(P_PASS, pass_begin(p, ps));
}

static int p_embed(void *p, const ss_pass *ps)
{
	PROF(P_EMBED, embed(p, ps));
}

static int p_rmsnorm(void *p, const ss_pass *ps, int l)
{
	PROF(P_RMSNORM, rmsnorm(p, ps, l));
}

static int p_linear(void *p, const ss_pass *ps, int l, ss_linear_which w)
{
	PROF(w == SS_LINEAR_IN_PROJ ? P_IN_PROJ : P_OUT_PROJ, linear(p, ps, l, w));
}

static int p_conv(void *p, const ss_pass *ps, int l)
{
	PROF(P_CONV, conv(p, ps, l));
}

static int p_dt(void *p, const ss_pass *ps, int l)
{
	PROF(P_DT, dt(p, ps, l));
}

static int p_scan(void *p, const ss_pass *ps, int l)
{
	PROF(P_SCAN, scan(p, ps, l));
}

static int p_gated_norm(void *p, const ss_pass *ps, int l)
{
	PROF(P_GNORM, gated_norm(p, ps, l));
}

static int p_norm_f(void *p, const int64_t *rows, int64_t r0, int64_t n)
{
	PROF(P_NORM_F, norm_f(p, rows, r0, n));
}

static int p_hidden(void *p, float *dst, int64_t i, int64_t n)
{
	PROF(P_DOWNLOAD, hidden(p, dst, i, n));
}

static int p_lm_head(void *p, int64_t i, int64_t n, float *dst)
{
	PROF(P_LM_HEAD, lm_head(p, i, n, dst));
}

static int p_argmax(void *p, int64_t n, int32_t n_ids)
{
	PROF(P_ARGMAX, argmax(p, n, n_ids));
}

static int p_logits(void *p, float *dst, int64_t k, int64_t n)
{
	PROF(P_DOWNLOAD, logits(p, dst, k, n));
}

static int p_ids(void *p, int32_t *dst, int64_t n)
{
	PROF(P_DOWNLOAD, ids(p, dst, n));
}

static const ss_backend_ops gpu_ops_prof = {
	LG,
	LG,
	0,
	be_free,
	be_bytes,
	error,
	p_states_in,
	p_states_out,
	p_pass_begin,
	p_embed,
	p_rmsnorm,
	p_linear,
	p_conv,
	p_dt,
	p_scan,
	p_gated_norm,
	p_norm_f,
	p_hidden,
	p_lm_head,
	p_argmax,
	p_logits,
	p_ids,
	sync,
	graph_begin,
	graph_end,
	NULL,
	0,
};

extern "C" int ss_cuda_backend_init(void **be, const ss_backend_ops **ops, const ss_model *m,
				    int ubatch, char *errmsg)
{
	gpu_be *g = NULL;
	const int err = init(&g, m, ubatch, errmsg);
	*be = g;
	*ops = g && g->prof ? &gpu_ops_prof : &gpu_ops;
	return err;
}
