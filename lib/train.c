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
 * ref: llm.c train_gpt2.c (gpt2_forward / gpt2_backward); lib/forward.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"

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
	free(t);
}

/* The model's weights into the f32 parameters (conv1d transposed). */
static void params_from_model(ss_train *t, const ss_model *m)
{
	const ss_model_config *c = &t->c;
	const size_t d = (size_t)c->d_model;
	int l, k, ch;

	ss_to_f32(t->p.embedding, m->embedding, m->wtype, (size_t)c->vocab_padded * d);
	memcpy(t->p.norm_f, m->norm_f, d * sizeof(float));
	if (!c->tied)
		ss_to_f32(t->p.lm_head, m->lm_head, m->wtype, (size_t)c->vocab_padded * d);
	for (l = 0; l < c->n_layer; l++) {
		const ss_layer *s = &m->layers[l];
		ss_train_layer *L = &t->lp[l];
		memcpy(L->norm, s->norm, d * sizeof(float));
		ss_to_f32(L->in_proj, s->in_proj, m->wtype, (size_t)c->d_in_proj * d);
		for (k = 0; k < c->d_conv; k++)
			for (ch = 0; ch < c->conv_dim; ch++)
				L->conv_wt[(size_t)k * c->conv_dim + ch] =
					s->conv_w[(size_t)ch * c->d_conv + k];
		memcpy(L->conv_b, s->conv_b, (size_t)c->conv_dim * sizeof(float));
		memcpy(L->dt_bias, s->dt_bias, (size_t)c->nheads * sizeof(float));
		memcpy(L->A_log, s->A_log, (size_t)c->nheads * sizeof(float));
		memcpy(L->D, s->D, (size_t)c->nheads * sizeof(float));
		memcpy(L->gnorm, s->gnorm, (size_t)c->d_inner * sizeof(float));
		ss_to_f32(L->out_proj, s->out_proj, m->wtype, d * c->d_inner);
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
	if (!m->cfg.tied && !m->lm_head)
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

/* Layer l's slices of the activations. */
#define ACT(arr, width, l) ((arr) + (size_t)(l) * t->T * (width))

int ss_train_forward(ss_train *t, const int32_t *tokens, const int32_t *targets,
		     const int64_t *seq_start, int nseq, float *conv, float *ssm, float *logdecay,
		     double *loss)
{
	const ss_model_config *c = &t->c;
	const ss_scan_dims dims = { c->nheads, c->headdim, c->d_state, c->ngroups };
	const int64_t d = c->d_model, V = c->vocab_padded;
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const size_t lcl = cl / c->n_layer, lsl = sl / c->n_layer; /* one layer's */
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
		float *XBC = ACT(t->XBC, c->conv_dim, l), *DT = ACT(t->DT, c->nheads, l);
		float *YS = ACT(t->YS, c->d_inner, l), *YG = ACT(t->YG, c->d_inner, l);
		ss_rmsnorm_cpu(U, H, NULL, L->norm, T, (int)d, c->eps);
		if ((err = ss_linear_cpu(ZXD, c->d_in_proj, U, d, L->in_proj, SS_DTYPE_F32, T,
					 c->d_in_proj, d, 0.0f)))
			return err;
		ss_conv1d_silu_cpu(XBC, c->conv_dim, ZXD + c->d_inner, c->d_in_proj, seq_start, nseq,
				   t->conv + l * lcl, (ptrdiff_t)cl, L->conv_wt, c->conv_dim, L->conv_b,
				   c->conv_dim, c->d_conv);
		ss_dt_softplus_cpu(DT, c->nheads, ZXD + c->d_inner + c->conv_dim, c->d_in_proj,
				   L->dt_bias, T, c->nheads, c->dt_min, c->dt_max);
		if ((err = ss_ssm_scan_cpu(&dims, seq_start, nseq, XBC, c->conv_dim, XBC + c->d_inner,
					   c->conv_dim,
					   XBC + c->d_inner + (size_t)c->ngroups * c->d_state,
					   c->conv_dim, DT, c->nheads, L->A_log, L->D, t->ssm + l * lsl,
					   (ptrdiff_t)sl, YS, c->d_inner,
					   logdecay ? logdecay + (size_t)l * c->nheads : NULL,
					   (ptrdiff_t)c->n_layer * c->nheads)))
			return err;
		memcpy(YG, YS, (size_t)T * c->d_inner * sizeof(float));
		ss_gated_rmsnorm_cpu(YG, c->d_inner, ZXD, c->d_in_proj, L->gnorm, T, c->d_inner,
				     c->ngroups, c->eps);
		memcpy(H + T * d, H, (size_t)T * d * sizeof(float));
		if ((err = ss_linear_cpu(H + T * d, d, YG, c->d_inner, L->out_proj, SS_DTYPE_F32, T, d,
					 c->d_inner, 1.0f)))
			return err;
	}
	ss_rmsnorm_cpu(t->UF, ACT(t->H, d, c->n_layer), NULL, t->p.norm_f, T, (int)d, c->eps);
	if ((err = ss_linear_cpu(t->LOGITS, V, t->UF, d, t->p.lm_head, SS_DTYPE_F32, T, V, d, 0.0f)) ||
	    (err = ss_cross_entropy_cpu(t->NLL, t->LOGITS, V, targets, T, V)))
		return err;
	t->ntargets = 0;
	for (r = 0; r < T; r++)
		if (targets[r] >= 0) {
			sum += t->NLL[r];
			t->ntargets++;
		}
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
	const ss_scan_dims dims = { c->nheads, c->headdim, c->d_state, c->ngroups };
	const int64_t d = c->d_model, V = c->vocab_padded, T = t->T;
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const size_t lcl = cl / c->n_layer, lsl = sl / c->n_layer;
	const int nseq = t->nseq;
	int64_t r;
	int l, err;

	if (!t->have_forward)
		return SS_ERR_INVALID;
	/* the loss's gradient: 1/ntargets on each counted row */
	for (r = 0; r < T; r++)
		t->dNLL[r] = t->targets[r] >= 0 ? 1.0f / (float)t->ntargets : 0.0f;
	memset(t->dLOGITS, 0, (size_t)T * V * sizeof(float));
	memset(t->dU, 0, (size_t)T * d * sizeof(float));
	memset(t->dH, 0, (size_t)T * d * sizeof(float));
	if ((err = ss_cross_entropy_backward_cpu(t->dNLL, t->LOGITS, t->dLOGITS, V, t->targets, T,
						 V)) ||
	    (err = ss_linear_backward_cpu(t->dLOGITS, V, t->UF, t->dU, d, t->p.lm_head, t->g.lm_head,
					  T, V, d)))
		return err;
	ss_rmsnorm_backward_cpu(t->dU, ACT(t->H, d, c->n_layer), t->dH, t->p.norm_f, t->g.norm_f, T,
				(int)d, c->eps);
	/* the states' gradients, per sequence and layer as the forward's states */
	copy_or_zero(t->dconv, dconv, (size_t)nseq * cl);
	copy_or_zero(t->dssm, dssm, (size_t)nseq * sl);

	for (l = c->n_layer - 1; l >= 0; l--) {
		const ss_train_layer *L = &t->lp[l];
		ss_train_layer *G = &t->lg[l];
		const float *H = ACT(t->H, d, l), *U = ACT(t->U, d, l);
		const float *ZXD = ACT(t->ZXD, c->d_in_proj, l), *XBC = ACT(t->XBC, c->conv_dim, l);
		const float *DT = ACT(t->DT, c->nheads, l), *YS = ACT(t->YS, c->d_inner, l);
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
		if ((err = ss_ssm_scan_backward_cpu(
			     &dims, t->seq_start, nseq, XBC, t->dXBC, c->conv_dim, XBC + c->d_inner,
			     t->dXBC + c->d_inner, c->conv_dim,
			     XBC + c->d_inner + (size_t)c->ngroups * c->d_state,
			     t->dXBC + c->d_inner + (size_t)c->ngroups * c->d_state, c->conv_dim, DT,
			     t->dDT, c->nheads, L->A_log, G->A_log, L->D, G->D, t->ssm0 + l * lsl,
			     t->dssm + l * lsl, (ptrdiff_t)sl, t->dY, c->d_inner,
			     dlogdecay ? dlogdecay + (size_t)l * c->nheads : NULL,
			     (ptrdiff_t)c->n_layer * c->nheads, t->scan_work)))
			return err;
		ss_dt_softplus_backward_cpu(t->dDT, c->nheads, ZXD + c->d_inner + c->conv_dim,
					    t->dZXD + c->d_inner + c->conv_dim, c->d_in_proj,
					    L->dt_bias, G->dt_bias, T, c->nheads, c->dt_min, c->dt_max);
		if ((err = ss_conv1d_silu_backward_cpu(
			     t->dXBC, c->conv_dim, ZXD + c->d_inner, t->dZXD + c->d_inner, c->d_in_proj,
			     t->seq_start, nseq, t->conv0 + l * lcl, t->dconv + l * lcl, (ptrdiff_t)cl, L->conv_wt,
			     G->conv_wt, c->conv_dim, L->conv_b, G->conv_b, c->conv_dim, c->d_conv)) ||
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
