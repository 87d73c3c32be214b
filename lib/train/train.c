/*
 * train.c — one training step on the CPU (ss_train.h): the forward pass of
 * forward.c's per-layer order over f32 master parameters, keeping every
 * activation, and its backward through the ops' *_backward_cpu in reverse.
 *
 * Activations of a batch of T rows (forward.c's names, one slice per layer):
 *   H   [n_layer+1][T][d_model]  residual stream entering each layer, then
 *                                the last layer's output
 *   U   [n_layer][T][d_model]    rmsnorm(H)
 *   ZXD [n_layer][T][d_in_proj]  in_proj: z | xBC | dt
 *   XBC [n_layer][T][conv_dim]   silu(conv(xBC)): x | B | C
 *   DT  [n_layer][T][nheads]     softplus(dt + dt_bias)
 *   YS  [n_layer][T][d_inner]    the scan's output (the gated norm's input)
 *   YG  [n_layer][T][d_inner]    the gated norm's output (out_proj's input)
 *   UF  [T][d_model], LOGITS [T][vocab_padded], NLL [T]
 * plus the initial conv and ssm states (the ops update them in place; their
 * backwards read the initial ones: a layer's state depends on no other
 * layer, so one copy of the batch's initial states serves every layer).
 *
 * ref: llm.c train_gpt2.c (gpt2_forward / gpt2_backward); lib/forward/forward.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "forward/pool.h"
#include "train/internal.h"

struct ss_train {
	ss_model_config c;
	ss_train_params p, g;
	ss_train_layer *lp, *lg;
	int64_t max_T;
	int max_seqs;
	/* the last forward */
	int have_forward;
	int64_t T;
	int nseq;
	int64_t *seq_start;  /* [max_seqs+1] */
	int32_t *tokens;     /* [max_T] */
	int32_t *targets;    /* [max_T] */
	int64_t ntargets;
	/* activations, one allocation */
	float *acts;
	float *H, *U, *ZXD, *XBC, *DT, *YS, *YG, *UF, *LOGITS, *NLL;
	float *conv0, *ssm0; /* [max_seqs][n_layer][...] the initial states */
	float *conv, *ssm;   /* the same, updated by the forward to the final ones */
	/* gradients of activations, one allocation */
	float *dacts;
	float *dH, *dU, *dZXD, *dXBC, *dDT, *dY, *dLOGITS, *dNLL, *dconv, *dssm;
	float *scan_work;
	/* ss_train_set_threads: the pool and, per thread past the first, a
	 * scan work area and a [max_T][conv_dim] area for its dB, dC */
	ss_pool *pool;
	int n_threads;
	float *twork;
};

/* Carves n floats off *mem (NULL mem: only counts them). */
static float *carve(float **mem, size_t *used, size_t n)
{
	float *p = *mem ? *mem + *used : NULL;
	*used += n;
	return p;
}

/* Lays out the parameters of c over data (NULL: counts them); returns the
 * number of floats. */
static size_t params_layout(const ss_model_config *c, ss_train_params *p, ss_train_layer *lay,
			    float *data)
{
	const size_t d = (size_t)c->d_model;
	size_t n = 0;
	int l;

	p->data = data;
	p->embedding = carve(&data, &n, (size_t)c->vocab_padded * d);
	p->norm_f = carve(&data, &n, d);
	p->lm_head = c->tied ? p->embedding : carve(&data, &n, (size_t)c->vocab_padded * d);
	p->layers = lay;
	for (l = 0; l < c->n_layer; l++) {
		ss_train_layer *L = &lay[l];
		L->norm = carve(&data, &n, d);
		L->in_proj = carve(&data, &n, (size_t)c->d_in_proj * d);
		L->conv_wt = carve(&data, &n, (size_t)c->d_conv * c->conv_dim);
		L->conv_b = carve(&data, &n, (size_t)c->conv_dim);
		L->dt_bias = carve(&data, &n, (size_t)c->nheads);
		L->A_log = carve(&data, &n, (size_t)c->nheads);
		L->D = carve(&data, &n, (size_t)c->nheads);
		L->gnorm = carve(&data, &n, (size_t)c->d_inner);
		L->out_proj = carve(&data, &n, d * c->d_inner);
	}
	p->n = n;
	return n;
}

size_t ss_train_conv_len(const ss_train *t)
{
	return (size_t)t->c.n_layer * t->c.conv_dim * (t->c.d_conv - 1);
}

size_t ss_train_ssm_len(const ss_train *t)
{
	return (size_t)t->c.n_layer * t->c.nheads * t->c.headdim * t->c.d_state;
}

/* The activation arrays over mem (NULL: counts them); returns floats. */
static size_t acts_layout(ss_train *t, float *mem)
{
	const ss_model_config *c = &t->c;
	const size_t T = (size_t)t->max_T, L = (size_t)c->n_layer, S = (size_t)t->max_seqs;
	size_t n = 0;

	t->H = carve(&mem, &n, (L + 1) * T * c->d_model);
	t->U = carve(&mem, &n, L * T * c->d_model);
	t->ZXD = carve(&mem, &n, L * T * c->d_in_proj);
	t->XBC = carve(&mem, &n, L * T * c->conv_dim);
	t->DT = carve(&mem, &n, L * T * c->nheads);
	t->YS = carve(&mem, &n, L * T * c->d_inner);
	t->YG = carve(&mem, &n, L * T * c->d_inner);
	t->UF = carve(&mem, &n, T * c->d_model);
	t->LOGITS = carve(&mem, &n, T * c->vocab_padded);
	t->NLL = carve(&mem, &n, T);
	t->conv0 = carve(&mem, &n, S * ss_train_conv_len(t));
	t->ssm0 = carve(&mem, &n, S * ss_train_ssm_len(t));
	t->conv = carve(&mem, &n, S * ss_train_conv_len(t));
	t->ssm = carve(&mem, &n, S * ss_train_ssm_len(t));
	return n;
}

/* The gradients of one layer's activations (reused layer after layer),
 * of the residual stream and of the logits, over mem (NULL: counts them). */
static size_t dacts_layout(ss_train *t, float *mem)
{
	const ss_model_config *c = &t->c;
	const size_t T = (size_t)t->max_T, S = (size_t)t->max_seqs;
	const ss_scan_dims dims = { c->nheads, c->headdim, c->d_state, c->ngroups };
	size_t n = 0;

	t->dH = carve(&mem, &n, T * c->d_model);
	t->dU = carve(&mem, &n, T * c->d_model);
	t->dZXD = carve(&mem, &n, T * c->d_in_proj);
	t->dXBC = carve(&mem, &n, T * c->conv_dim);
	t->dDT = carve(&mem, &n, T * c->nheads);
	t->dY = carve(&mem, &n, T * c->d_inner);
	t->dLOGITS = carve(&mem, &n, T * c->vocab_padded);
	t->dNLL = carve(&mem, &n, T);
	t->dconv = carve(&mem, &n, S * ss_train_conv_len(t));
	t->dssm = carve(&mem, &n, S * ss_train_ssm_len(t));
	t->scan_work = carve(&mem, &n, ss_ssm_scan_backward_work(&dims, t->max_T));
	return n;
}

void ss_train_free(ss_train *t)
{
	if (!t)
		return;
	free(t->p.data);
	free(t->g.data);
	free(t->lp);
	free(t->lg);
	free(t->acts);
	free(t->dacts);
	free(t->seq_start);
	free(t->tokens);
	free(t->targets);
	ss_pool_free(t->pool);
	free(t->twork);
	free(t);
}

/* The model's weights into the f32 parameters (conv1d transposed). */
static void params_from_model(ss_train *t, const ss_model *m)
{
	const ss_model_config *c = &t->c;
	const size_t d = (size_t)c->d_model;
	int l, k, ch;

	ss_to_f32(t->p.embedding, m->embedding, m->weights_dtype, (size_t)c->vocab_padded * d);
	memcpy(t->p.norm_f, m->norm_f, d * sizeof(float));
	if (!c->tied)
		ss_to_f32(t->p.lm_head, m->lm_head, m->weights_dtype, (size_t)c->vocab_padded * d);
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *s = &m->layers[l];
		ss_train_layer *L = &t->lp[l];
		memcpy(L->norm, s->norm, d * sizeof(float));
		ss_to_f32(L->in_proj, s->in_proj, m->weights_dtype, (size_t)c->d_in_proj * d);
		for (k = 0; k < c->d_conv; k++)
			for (ch = 0; ch < c->conv_dim; ch++)
				L->conv_wt[(size_t)k * c->conv_dim + ch] =
					s->conv_w[(size_t)ch * c->d_conv + k];
		memcpy(L->conv_b, s->conv_b, (size_t)c->conv_dim * sizeof(float));
		memcpy(L->dt_bias, s->dt_bias, (size_t)c->nheads * sizeof(float));
		memcpy(L->A_log, s->A_log, (size_t)c->nheads * sizeof(float));
		memcpy(L->D, s->D, (size_t)c->nheads * sizeof(float));
		memcpy(L->gnorm, s->gnorm, (size_t)c->d_inner * sizeof(float));
		ss_to_f32(L->out_proj, s->out_proj, m->weights_dtype, d * c->d_inner);
	}
}

int ss_train_init(ss_train **out, const ss_model *m, int64_t max_tokens, int max_seqs)
{
	ss_train *t;
	size_t n;

	*out = NULL;
	if (max_tokens < 1 || max_seqs < 1 || m->cfg.d_conv < 1 ||
	    m->cfg.d_conv > SS_CONV_BACKWARD_MAX)
		return SS_ERR_INVALID;
	/* an untied lm_head that was not loaded; Mamba-1 (no backward ops yet) */
	if ((!m->cfg.tied && !m->lm_head) || ss_model_is_mamba1(&m->cfg))
		return SS_ERR_UNSUPPORTED;
	if (!(t = calloc(1, sizeof(*t))))
		return SS_ERR_NOMEM;
	t->c = m->cfg;
	t->max_T = max_tokens;
	t->max_seqs = max_seqs;
	t->lp = calloc((size_t)t->c.n_layer, sizeof(ss_train_layer));
	t->lg = calloc((size_t)t->c.n_layer, sizeof(ss_train_layer));
	t->seq_start = malloc(((size_t)max_seqs + 1) * sizeof(int64_t));
	t->tokens = malloc((size_t)max_tokens * sizeof(int32_t));
	t->targets = malloc((size_t)max_tokens * sizeof(int32_t));
	if (!t->lp || !t->lg || !t->seq_start || !t->tokens || !t->targets)
		goto nomem;
	n = params_layout(&t->c, &t->p, t->lp, NULL);
	if (!(t->p.data = malloc(n * sizeof(float))) || !(t->g.data = calloc(n, sizeof(float))))
		goto nomem;
	params_layout(&t->c, &t->p, t->lp, t->p.data);
	params_layout(&t->c, &t->g, t->lg, t->g.data);
	if (!(t->acts = malloc(acts_layout(t, NULL) * sizeof(float))) ||
	    !(t->dacts = malloc(dacts_layout(t, NULL) * sizeof(float))))
		goto nomem;
	acts_layout(t, t->acts);
	dacts_layout(t, t->dacts);
	params_from_model(t, m);
	t->n_threads = 1;
	*out = t;
	return 0;
nomem:
	ss_train_free(t);
	return SS_ERR_NOMEM;
}

ss_train_params *ss_train_params_of(ss_train *t)
{
	return &t->p;
}

ss_train_params *ss_train_grads_of(ss_train *t)
{
	return &t->g;
}

void ss_train_zero_grad(ss_train *t)
{
	memset(t->g.data, 0, t->g.n * sizeof(float));
}

/* dst[n] = src, or zeros when src is NULL (a caller's optional state) */
static void copy_or_zero(float *dst, const float *src, size_t n)
{
	if (src)
		memcpy(dst, src, n * sizeof(float));
	else
		memset(dst, 0, n * sizeof(float));
}

static size_t scan_work_len(const ss_train *t)
{
	const ss_scan_dims dims = { t->c.nheads, t->c.headdim, t->c.d_state, t->c.ngroups };
	return ss_ssm_scan_backward_work(&dims, t->max_T);
}

int ss_train_set_threads(ss_train *t, int n_threads)
{
	ss_pool *pool = NULL;
	float *w = NULL;
	const size_t per = scan_work_len(t) + (size_t)t->max_T * t->c.conv_dim;
	int err;

	if (n_threads < 1 || n_threads > SS_TRAIN_MAX_THREADS)
		return SS_ERR_INVALID;
	if (n_threads > 1) {
		if ((err = ss_pool_init(&pool, n_threads)))
			return err;
		if (!(w = malloc((size_t)(n_threads - 1) * per * sizeof(float)))) {
			ss_pool_free(pool);
			return SS_ERR_NOMEM;
		}
	}
	ss_pool_free(t->pool);
	free(t->twork);
	t->pool = pool;
	t->twork = w;
	t->n_threads = n_threads;
	return 0;
}

/* The ops of one layer split over the pool: part k of n_parts runs the op
 * on its own slice of rows (cross-entropy), channels (conv1d) or heads
 * (scan), through the op's own strides. */
typedef enum { PART_CE, PART_CE_BWD, PART_CONV, PART_CONV_BWD, PART_SCAN, PART_SCAN_BWD } part_op;

typedef struct {
	ss_train *t;
	part_op op;
	int n_parts;
	int l;                /* the layer */
	const float *dlogdecay;
	float *logdecay;
	int err[SS_TRAIN_MAX_THREADS];
} part_job;

/* [lo, hi) of part k of n into n_parts */
static void part_range(int64_t n, int k, int n_parts, int64_t *lo, int64_t *hi)
{
	*lo = n * k / n_parts;
	*hi = n * (k + 1) / n_parts;
}

/* Heads [h0, h1) of layer l's scan (forward, or backward into dB, dC at
 * dbc with the stride of XBC: dXBC itself, or a thread's own area). */
static int scan_part(ss_train *t, int l, int h0, int h1, int bwd, float *dbc, float *work,
		     float *logdecay, const float *dlogdecay)
{
	const ss_model_config *c = &t->c;
	const int hpg = c->nheads / c->ngroups, g0 = h0 / hpg, g1 = (h1 - 1) / hpg + 1;
	const ss_scan_dims dims = { h1 - h0, c->headdim, c->d_state, g1 - g0 };
	const size_t sl = ss_train_ssm_len(t), lsl = sl / c->n_layer;
	const size_t hs = (size_t)c->headdim * c->d_state, N = (size_t)c->d_state;
	const ptrdiff_t ldx = c->conv_dim, xo = (ptrdiff_t)h0 * c->headdim;
	const ptrdiff_t bo = c->d_inner + (ptrdiff_t)g0 * N;
	const ptrdiff_t co = c->d_inner + (ptrdiff_t)c->ngroups * N + (ptrdiff_t)g0 * N;
	const int64_t T = t->T;
	const float *XBC = t->XBC + (size_t)l * T * c->conv_dim;
	const float *DT = t->DT + (size_t)l * T * c->nheads;
	const ss_train_layer *L = &t->lp[l];
	ss_train_layer *G = &t->lg[l];
	const ptrdiff_t ld_ld = (ptrdiff_t)c->n_layer * c->nheads;
	const size_t lo = (size_t)l * c->nheads + h0;

	if (!bwd)
		return ss_ssm_scan_cpu(&dims, t->seq_start, t->nseq, XBC + xo, ldx, XBC + bo, ldx,
				       XBC + co, ldx, DT + h0, c->nheads, L->A_log + h0, L->D + h0,
				       t->ssm + l * lsl + h0 * hs, (ptrdiff_t)sl,
				       t->YS + (size_t)l * T * c->d_inner + xo, c->d_inner,
				       logdecay ? logdecay + lo : NULL, ld_ld);
	return ss_ssm_scan_backward_cpu(
		&dims, t->seq_start, t->nseq, XBC + xo, t->dXBC + xo, ldx, XBC + bo, dbc + bo, ldx,
		XBC + co, dbc + co, ldx, DT + h0, t->dDT + h0, c->nheads, L->A_log + h0,
		G->A_log + h0, L->D + h0, G->D + h0, t->ssm0 + l * lsl + h0 * hs,
		t->dssm + l * lsl + h0 * hs, (ptrdiff_t)sl, t->dY + xo, c->d_inner,
		dlogdecay ? dlogdecay + lo : NULL, ld_ld, work);
}

static void part_run(void *arg, int64_t k, int thread)
{
	part_job *j = arg;
	ss_train *t = j->t;
	const ss_model_config *c = &t->c;
	const int64_t T = t->T, V = c->vocab_padded;
	const size_t cl = ss_train_conv_len(t), lcl = cl / c->n_layer;
	const int l = j->l, K1 = c->d_conv - 1;
	const float *ZXD = t->ZXD + (size_t)l * T * c->d_in_proj;
	int64_t lo, hi;
	int err = 0;

	(void)thread;
	switch (j->op) {
	case PART_CE:
	case PART_CE_BWD:
		part_range(T, (int)k, j->n_parts, &lo, &hi);
		if (j->op == PART_CE) {
			err = ss_cross_entropy_cpu(t->NLL + lo, t->LOGITS + lo * V, V, t->targets + lo,
						   hi - lo, V);
			break;
		}
		/* the part's rows of dLOGITS zeroed where they are about to be read */
		memset(t->dLOGITS + lo * V, 0, (size_t)(hi - lo) * V * sizeof(float));
		err = ss_cross_entropy_backward_cpu(t->dNLL + lo, t->LOGITS + lo * V, t->dLOGITS + lo * V,
						    V, t->targets + lo, hi - lo, V);
		break;
	case PART_CONV:
		part_range(c->conv_dim, (int)k, j->n_parts, &lo, &hi);
		ss_conv1d_silu_cpu(t->XBC + (size_t)l * T * c->conv_dim + lo, c->conv_dim,
				   ZXD + c->d_inner + lo, c->d_in_proj, t->seq_start, t->nseq,
				   t->conv + l * lcl + lo * K1, (ptrdiff_t)cl, t->lp[l].conv_wt + lo,
				   c->conv_dim, t->lp[l].conv_b + lo, (int)(hi - lo), c->d_conv);
		break;
	case PART_CONV_BWD:
		part_range(c->conv_dim, (int)k, j->n_parts, &lo, &hi);
		err = ss_conv1d_silu_backward_cpu(
			t->dXBC + lo, c->conv_dim, ZXD + c->d_inner + lo, t->dZXD + c->d_inner + lo,
			c->d_in_proj, t->seq_start, t->nseq, t->conv0 + l * lcl + lo * K1,
			t->dconv + l * lcl + lo * K1, (ptrdiff_t)cl, t->lp[l].conv_wt + lo,
			t->lg[l].conv_wt + lo, c->conv_dim, t->lp[l].conv_b + lo, t->lg[l].conv_b + lo,
			(int)(hi - lo), c->d_conv);
		break;
	case PART_SCAN:
	case PART_SCAN_BWD: {
		/* whole groups per part when the groups divide evenly, else (one
		 * group) heads, each part past the first with its own dB, dC */
		const int split_groups = c->ngroups % j->n_parts == 0;
		const int hpg = c->nheads / c->ngroups;
		const size_t per = scan_work_len(t) + (size_t)t->max_T * c->conv_dim;
		float *w = k ? t->twork + (size_t)(k - 1) * per : t->scan_work;
		float *dbc = t->dXBC;
		if (split_groups) {
			part_range(c->ngroups, (int)k, j->n_parts, &lo, &hi);
			lo *= hpg, hi *= hpg;
		} else {
			part_range(c->nheads, (int)k, j->n_parts, &lo, &hi);
		}
		if (j->op == PART_SCAN_BWD && !split_groups && k) {
			dbc = w + scan_work_len(t);
			for (int64_t r = 0; r < T; r++)
				memset(dbc + r * c->conv_dim + c->d_inner, 0,
				       2 * (size_t)c->ngroups * c->d_state * sizeof(float));
		}
		if (hi > lo)
			err = scan_part(t, l, (int)lo, (int)hi, j->op == PART_SCAN_BWD, dbc, w,
					j->logdecay, j->dlogdecay);
		break;
	}
	}
	j->err[k] = err;
}

/* Runs op over the pool (or on the caller alone); the first error. */
static int parts(ss_train *t, part_op op, int l, float *logdecay, const float *dlogdecay)
{
	const ss_model_config *c = &t->c;
	part_job j = { .t = t, .op = op, .l = l, .logdecay = logdecay, .dlogdecay = dlogdecay };
	int k;

	j.n_parts = t->n_threads;
	if ((op == PART_SCAN || op == PART_SCAN_BWD) && c->ngroups % j.n_parts != 0 &&
	    (c->ngroups != 1 || c->nheads < j.n_parts))
		j.n_parts = 1;
	if (j.n_parts > 1)
		ss_pool_run(t->pool, j.n_parts, part_run, &j);
	else
		part_run(&j, 0, 0);
	for (k = 0; k < j.n_parts; k++)
		if (j.err[k])
			return j.err[k];
	/* the parts' own dB, dC into the layer's */
	if (op == PART_SCAN_BWD && j.n_parts > 1 && c->ngroups % j.n_parts != 0) {
		const size_t per = scan_work_len(t) + (size_t)t->max_T * c->conv_dim;
		const size_t w = 2 * (size_t)c->ngroups * c->d_state;
		for (k = 1; k < j.n_parts; k++) {
			const float *p = t->twork + (size_t)(k - 1) * per + scan_work_len(t);
			for (int64_t r = 0; r < t->T; r++) {
				float *dst = t->dXBC + r * c->conv_dim + c->d_inner;
				const float *src = p + r * c->conv_dim + c->d_inner;
				for (size_t i = 0; i < w; i++)
					dst[i] += src[i];
			}
		}
	}
	return 0;
}

/* Layer l's slices of the activations. */
#define ACT(arr, width, l) ((arr) + (size_t)(l) * t->T * (width))

int ss_train_forward(ss_train *t, const int32_t *tokens, const int32_t *targets,
		     const int64_t *seq_start, int nseq, float *conv, float *ssm, float *logdecay,
		     double *loss)
{
	const ss_model_config *c = &t->c;
	const int64_t d = c->d_model, V = c->vocab_padded;
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	double sum = 0.0;
	int64_t T, r;
	int s, l, err;

	t->have_forward = 0;
	if (nseq < 1 || nseq > t->max_seqs || seq_start[0] != 0)
		return SS_ERR_INVALID;
	for (s = 0; s < nseq; s++)
		if (seq_start[s + 1] < seq_start[s])
			return SS_ERR_INVALID;
	T = seq_start[nseq];
	if (T < 1 || T > t->max_T)
		return SS_ERR_INVALID;
	for (r = 0; r < T; r++)
		if (tokens[r] < 0 || tokens[r] >= V || targets[r] >= V)
			return SS_ERR_INVALID;
	t->T = T;
	t->nseq = nseq;
	memcpy(t->seq_start, seq_start, ((size_t)nseq + 1) * sizeof(int64_t));
	memcpy(t->tokens, tokens, (size_t)T * sizeof(int32_t));
	memcpy(t->targets, targets, (size_t)T * sizeof(int32_t));
	copy_or_zero(t->conv0, conv, (size_t)nseq * cl);
	copy_or_zero(t->ssm0, ssm, (size_t)nseq * sl);
	memcpy(t->conv, t->conv0, (size_t)nseq * cl * sizeof(float));
	memcpy(t->ssm, t->ssm0, (size_t)nseq * sl * sizeof(float));

	ss_embed_cpu(t->H, t->p.embedding, SS_DTYPE_F32, tokens, T, (int)d);
	for (l = 0; l < c->n_layer; l++) {
		const ss_train_layer *L = &t->lp[l];
		float *H = ACT(t->H, d, l), *U = ACT(t->U, d, l), *ZXD = ACT(t->ZXD, c->d_in_proj, l);
		float *DT = ACT(t->DT, c->nheads, l);
		float *YS = ACT(t->YS, c->d_inner, l), *YG = ACT(t->YG, c->d_inner, l);
		ss_rmsnorm_cpu(U, H, NULL, L->norm, T, (int)d, c->eps);
		if ((err = ss_linear_cpu(ZXD, c->d_in_proj, U, d, L->in_proj, SS_DTYPE_F32, T,
					 c->d_in_proj, d, 0.0f)))
			return err;
		if ((err = parts(t, PART_CONV, l, NULL, NULL)))
			return err;
		ss_dt_softplus_cpu(DT, c->nheads, ZXD + c->d_inner + c->conv_dim, c->d_in_proj,
				   L->dt_bias, T, c->nheads, c->dt_min, c->dt_max);
		if ((err = parts(t, PART_SCAN, l, logdecay, NULL)))
			return err;
		memcpy(YG, YS, (size_t)T * c->d_inner * sizeof(float));
		ss_gated_rmsnorm_cpu(YG, c->d_inner, ZXD, c->d_in_proj, L->gnorm, T, c->d_inner,
				     c->ngroups, c->eps);
		memcpy(H + T * d, H, (size_t)T * d * sizeof(float));
		if ((err = ss_linear_cpu(H + T * d, d, YG, c->d_inner, L->out_proj, SS_DTYPE_F32, T, d,
					 c->d_inner, 1.0f)))
			return err;
	}
	t->ntargets = 0;
	for (r = 0; r < T; r++)
		t->ntargets += targets[r] >= 0;
	/* Without targets (encoding a chunk for its state) the head has no
	 * use: its logits are the step's largest GEMM at a 50k vocabulary. */
	if (t->ntargets) {
		ss_rmsnorm_cpu(t->UF, ACT(t->H, d, c->n_layer), NULL, t->p.norm_f, T, (int)d, c->eps);
		if ((err = ss_linear_cpu(t->LOGITS, V, t->UF, d, t->p.lm_head, SS_DTYPE_F32, T, V, d,
					 0.0f)) ||
		    (err = parts(t, PART_CE, 0, NULL, NULL)))
			return err;
	}
	for (r = 0; r < T; r++)
		if (targets[r] >= 0)
			sum += t->NLL[r];
	*loss = t->ntargets ? sum / (double)t->ntargets : 0.0;
	if (conv)
		memcpy(conv, t->conv, (size_t)nseq * cl * sizeof(float));
	if (ssm)
		memcpy(ssm, t->ssm, (size_t)nseq * sl * sizeof(float));
	t->have_forward = 1;
	return 0;
}

int ss_train_backward(ss_train *t, float *dconv, float *dssm, const float *dlogdecay)
{
	const ss_model_config *c = &t->c;
	const int64_t d = c->d_model, V = c->vocab_padded, T = t->T;
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const int nseq = t->nseq;
	int64_t r;
	int l, err;

	if (!t->have_forward)
		return SS_ERR_INVALID;
	memset(t->dH, 0, (size_t)T * d * sizeof(float));
	if (t->ntargets) { /* else the forward ran no head: nothing flows back from it */
		/* the loss's gradient: 1/ntargets on each counted row */
		for (r = 0; r < T; r++)
			t->dNLL[r] = t->targets[r] >= 0 ? 1.0f / (float)t->ntargets : 0.0f;
		memset(t->dU, 0, (size_t)T * d * sizeof(float));
		if ((err = parts(t, PART_CE_BWD, 0, NULL, NULL)) ||
		    (err = ss_linear_backward_cpu(t->dLOGITS, V, t->UF, t->dU, d, t->p.lm_head,
						  t->g.lm_head, T, V, d)))
			return err;
		ss_rmsnorm_backward_cpu(t->dU, ACT(t->H, d, c->n_layer), t->dH, t->p.norm_f,
					t->g.norm_f, T, (int)d, c->eps);
	}
	/* the states' gradients, per sequence and layer as the forward's states */
	copy_or_zero(t->dconv, dconv, (size_t)nseq * cl);
	copy_or_zero(t->dssm, dssm, (size_t)nseq * sl);

	for (l = c->n_layer - 1; l >= 0; l--) {
		const ss_train_layer *L = &t->lp[l];
		ss_train_layer *G = &t->lg[l];
		const float *H = ACT(t->H, d, l), *U = ACT(t->U, d, l);
		const float *ZXD = ACT(t->ZXD, c->d_in_proj, l), *YS = ACT(t->YS, c->d_inner, l);
		const float *YG = ACT(t->YG, c->d_inner, l);

		memset(t->dY, 0, (size_t)T * c->d_inner * sizeof(float));
		memset(t->dZXD, 0, (size_t)T * c->d_in_proj * sizeof(float));
		memset(t->dXBC, 0, (size_t)T * c->conv_dim * sizeof(float));
		memset(t->dDT, 0, (size_t)T * c->nheads * sizeof(float));
		memset(t->dU, 0, (size_t)T * d * sizeof(float));
		/* H[l+1] = H[l] + YG·out_projᵀ: dH passes through unchanged */
		if ((err = ss_linear_backward_cpu(t->dH, d, YG, t->dY, c->d_inner, L->out_proj,
						  G->out_proj, T, d, c->d_inner)))
			return err;
		ss_gated_rmsnorm_backward_cpu(YS, t->dY, c->d_inner, ZXD, t->dZXD, c->d_in_proj,
					      L->gnorm, G->gnorm, T, c->d_inner, c->ngroups, c->eps);
		if ((err = parts(t, PART_SCAN_BWD, l, NULL, dlogdecay)))
			return err;
		ss_dt_softplus_backward_cpu(t->dDT, c->nheads, ZXD + c->d_inner + c->conv_dim,
					    t->dZXD + c->d_inner + c->conv_dim, c->d_in_proj,
					    L->dt_bias, G->dt_bias, T, c->nheads, c->dt_min, c->dt_max);
		if ((err = parts(t, PART_CONV_BWD, l, NULL, NULL)) ||
		    (err = ss_linear_backward_cpu(t->dZXD, c->d_in_proj, U, t->dU, d, L->in_proj,
						  G->in_proj, T, c->d_in_proj, d)))
			return err;
		ss_rmsnorm_backward_cpu(t->dU, H, t->dH, L->norm, G->norm, T, (int)d, c->eps);
	}
	ss_embed_backward_cpu(t->dH, t->g.embedding, t->tokens, T, (int)d);
	if (dconv)
		memcpy(dconv, t->dconv, (size_t)nseq * cl * sizeof(float));
	if (dssm)
		memcpy(dssm, t->dssm, (size_t)nseq * sl * sizeof(float));
	return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 8 parameters at a time in f32: the update's terms as the scalar loop's,
 * divided by the bias corrections' reciprocals precomputed. */
__attribute__((target("avx2,fma")))
static size_t adamw_avx2(float *p, const float *g, float *m, float *v, size_t n, const ss_adamw *h,
			 float rbc1, float rbc2, float decay)
{
	const __m256 b1 = _mm256_set1_ps(h->beta1), c1 = _mm256_set1_ps(1.0f - h->beta1);
	const __m256 b2 = _mm256_set1_ps(h->beta2), c2 = _mm256_set1_ps(1.0f - h->beta2);
	const __m256 r1 = _mm256_set1_ps(rbc1), r2 = _mm256_set1_ps(rbc2);
	const __m256 lr = _mm256_set1_ps(h->lr), eps = _mm256_set1_ps(h->eps);
	const __m256 dc = _mm256_set1_ps(decay);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		const __m256 gi = _mm256_loadu_ps(g + i);
		const __m256 mi = _mm256_fmadd_ps(c1, gi, _mm256_mul_ps(b1, _mm256_loadu_ps(m + i)));
		const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(c2, gi), gi,
						  _mm256_mul_ps(b2, _mm256_loadu_ps(v + i)));
		const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, r2)), eps);
		const __m256 upd = _mm256_div_ps(_mm256_mul_ps(lr, _mm256_mul_ps(mi, r1)), den);
		_mm256_storeu_ps(m + i, mi);
		_mm256_storeu_ps(v + i, vi);
		_mm256_storeu_ps(p + i, _mm256_fmsub_ps(_mm256_loadu_ps(p + i), dc, upd));
	}
	return i;
}
#endif

int ss_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const ss_adamw *h,
		    int64_t step)
{
	const double bc1 = 1.0 - pow(h->beta1, (double)step);
	const double bc2 = 1.0 - pow(h->beta2, (double)step);
	const float decay = 1.0f - h->lr * h->weight_decay;
	const float rbc1 = (float)(1.0 / bc1), rbc2 = (float)(1.0 / bc2);
	size_t i = 0;

	if (step < 1)
		return SS_ERR_INVALID;
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		i = adamw_avx2(p, g, m, v, n, h, rbc1, rbc2, decay);
#endif
	for (; i < n; i++) {
		m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * g[i];
		v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * g[i] * g[i];
		p[i] = p[i] * decay - h->lr * (m[i] * rbc1) / (sqrtf(v[i] * rbc2) + h->eps);
	}
	return 0;
}

void ss_train_shape(const ss_train *t, ss_model_config *c, int64_t *max_tokens, int *max_seqs)
{
	*c = t->c;
	*max_tokens = t->max_T;
	*max_seqs = t->max_seqs;
}
