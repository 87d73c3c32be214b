/*
 * train_bptc.c — the composition objectives of picaso.txt §5 on ss_train
 * (ss_train.h): BPTC, the continuation's loss backpropagated through the
 * composition into the retrieved chunks' encodings, and BP2C, the same loss
 * from a composed state held constant.
 *
 * One BPTC step, with t keeping one forward's activations at a time:
 *   1. encode the chunks from the zero state (packed batches), keeping only
 *      their final states and logdecays;
 *   2. compose them (ss_compose, as ss-compose does);
 *   3. forward + backward of query·continuation from the composed state:
 *      the gradient w.r.t. the composed conv/ssm;
 *   4. ss_compose_backward: the gradient w.r.t. each chunk's final
 *      conv/ssm/logdecay;
 *   5. re-encode each batch of chunks (recomputation) and backward it with
 *      those gradients flowing in through its final states and logdecay.
 * ref: picaso.txt §5; lib/train/train.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "train/internal.h"

static int tokens_ok(const int32_t *tok, int64_t n, int64_t V)
{
	if (!tok)
		return 0;
	for (int64_t i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= V)
			return 0;
	return 1;
}

/* Checks the query and continuation against t: 1 when valid. */
static int example_ok(const ss_model_config *c, int64_t max_T, const int32_t *query, int64_t nq,
		      const int32_t *cont, int64_t nc)
{
	return nq >= 1 && nc >= 1 && nq + nc - 1 <= max_T && tokens_ok(query, nq, c->vocab_padded) &&
	       tokens_ok(cont, nc, c->vocab_padded);
}

/* Forward and backward of query·cont from the initial states conv, ssm
 * ([conv_len], [ssm_len]; overwritten with the final ones; both NULL: the
 * zero state). Row nq-1+j predicts cont[j]; the rows before have no target.
 * dconv, dssm: out, the gradient w.r.t. the initial states, or NULL. */
static int score_step(ss_train *t, float *conv, float *ssm, const int32_t *query, int64_t nq,
		      const int32_t *cont, int64_t nc, float *dconv, float *dssm, double *loss)
{
	const int64_t T = nq + nc - 1;
	int32_t *tok = malloc(2 * (size_t)T * sizeof *tok), *tgt = tok + T;
	const int64_t seq_start[2] = { 0, T };
	int rc;

	if (!tok)
		return SS_ERR_NOMEM;
	memcpy(tok, query, (size_t)nq * sizeof *tok);
	memcpy(tok + nq, cont, (size_t)(nc - 1) * sizeof *tok);
	for (int64_t r = 0; r < nq - 1; r++)
		tgt[r] = -1;
	memcpy(tgt + nq - 1, cont, (size_t)nc * sizeof *tgt);
	rc = ss_train_forward(t, tok, tgt, seq_start, 1, conv, ssm, NULL, loss);
	if (!rc) {
		if (dconv)
			memset(dconv, 0, ss_train_conv_len(t) * sizeof *dconv);
		if (dssm)
			memset(dssm, 0, ss_train_ssm_len(t) * sizeof *dssm);
		rc = ss_train_backward(t, dconv, dssm, NULL);
	}
	free(tok);
	return rc;
}

int ss_train_bp2c(ss_train *t, const float *conv, const float *ssm, const int32_t *query,
		  int64_t n_query, const int32_t *cont, int64_t n_cont, double *loss)
{
	ss_model_config c;
	int64_t max_T;
	int max_seqs, rc;
	const size_t cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	float *state = NULL;

	ss_train_shape(t, &c, &max_T, &max_seqs);
	if (!loss || !example_ok(&c, max_T, query, n_query, cont, n_cont) || (!conv != !ssm))
		return SS_ERR_INVALID;
	if (conv) {
		if (!(state = malloc((cl + sl) * sizeof *state)))
			return SS_ERR_NOMEM;
		memcpy(state, conv, cl * sizeof *state);
		memcpy(state + cl, ssm, sl * sizeof *state);
	}
	rc = score_step(t, state, state ? state + cl : NULL, query, n_query, cont, n_cont, NULL, NULL,
			loss);
	free(state);
	return rc;
}

/* Packs chunks first.. into one batch within t's limits: tokens into tok,
 * no targets (tgt all -1), seq_start[0..*nseq]. Returns the index after the
 * batch's last chunk. */
static int pack_chunks(const ss_train_bptc_example *ex, int first, int64_t max_T, int max_seqs,
		       int32_t *tok, int32_t *tgt, int64_t *seq_start, int *nseq)
{
	int i = first, s = 0;
	int64_t T = 0;

	seq_start[0] = 0;
	while (i < ex->k && s < max_seqs && T + ex->chunk_len[i] <= max_T) {
		memcpy(tok + T, ex->chunks[i], (size_t)ex->chunk_len[i] * sizeof *tok);
		T += ex->chunk_len[i];
		seq_start[++s] = T;
		i++;
	}
	for (int64_t r = 0; r < T; r++)
		tgt[r] = -1;
	*nseq = s;
	return i;
}

int ss_train_bptc(ss_train *t, const ss_train_bptc_example *ex, double *loss)
{
	ss_model_config c;
	int64_t max_T;
	int max_seqs, rc = 0;

	ss_train_shape(t, &c, &max_T, &max_seqs);
	if (!ex || !loss || ex->k < 0 || (ex->k > 0 && (!ex->chunks || !ex->chunk_len)) ||
	    ex->mode < SS_COMPOSE_CASO || ex->mode > SS_COMPOSE_SUM ||
	    !example_ok(&c, max_T, ex->query, ex->n_query, ex->cont, ex->n_cont))
		return SS_ERR_INVALID;
	for (int i = 0; i < ex->k; i++)
		if (ex->chunk_len[i] < 1 || ex->chunk_len[i] > max_T ||
		    !tokens_ok(ex->chunks[i], ex->chunk_len[i], c.vocab_padded))
			return SS_ERR_INVALID;
	if (ex->k == 0)
		return score_step(t, NULL, NULL, ex->query, ex->n_query, ex->cont, ex->n_cont, NULL,
				  NULL, loss);

	const size_t k = (size_t)ex->k, cl = ss_train_conv_len(t), sl = ss_train_ssm_len(t);
	const size_t ll = (size_t)c.n_layer * c.nheads;
	const ss_compose_opts o = { (ss_compose_mode)ex->mode, 0, SS_COMPOSE_CONV_MEAN };
	ss_state_dims dims = { .n_layer = c.n_layer, .nheads = c.nheads, .headdim = c.headdim,
			       .d_state = c.d_state, .conv_dim = c.conv_dim, .d_conv = c.d_conv };
	ss_state composed = { 0 };
	float *buf = calloc(2 * k * (cl + sl + ll) + cl + sl, sizeof *buf);
	int32_t *tok = malloc(2 * (size_t)max_T * sizeof *tok);
	int64_t *seq_start = malloc(((size_t)max_seqs + 1) * sizeof *seq_start);
	ss_state *view = calloc(k, sizeof *view);
	const ss_state **in = malloc(k * sizeof *in);
	float **ptr = malloc(3 * k * sizeof *ptr);
	double l;
	int nseq;

	if (!buf || !tok || !seq_start || !view || !in || !ptr) {
		rc = SS_ERR_NOMEM;
		goto out;
	}
	float *conv = buf, *ssm = conv + k * cl, *ld = ssm + k * sl;
	float *dconv = ld + k * ll, *dssm = dconv + k * cl, *dld = dssm + k * sl;
	float *gconv = dld + k * ll, *gssm = gconv + cl;
	float **ssm_of = ptr, **dssm_of = ptr + k, **dconv_of = ptr + 2 * k;
	int32_t *tgt = tok + max_T;
	snprintf(dims.arch, sizeof dims.arch, "%s", c.arch);

	/* 1. the chunks' final states from the zero state */
	for (int i = 0, next; i < ex->k; i = next) {
		next = pack_chunks(ex, i, max_T, max_seqs, tok, tgt, seq_start, &nseq);
		if ((rc = ss_train_forward(t, tok, tgt, seq_start, nseq, conv + i * cl, ssm + i * sl,
					   ld + i * ll, &l)))
			goto out;
	}
	/* 2. composed as ss-compose composes */
	for (size_t i = 0; i < k; i++) {
		view[i].dims = dims;
		view[i].conv = conv + i * cl;
		view[i].ssm = ssm_of[i] = ssm + i * sl;
		view[i].logdecay = ld + i * ll;
		in[i] = &view[i];
		dssm_of[i] = dssm + i * sl;
		dconv_of[i] = dconv + i * cl;
	}
	if ((rc = ss_compose(&o, in, k, &composed, NULL)))
		goto out;
	/* 3. the continuation's loss and its gradient w.r.t. the composed state */
	if ((rc = score_step(t, composed.conv, composed.ssm, ex->query, ex->n_query, ex->cont,
			     ex->n_cont, gconv, gssm, loss)))
		goto out;
	/* 4. through the composition */
	if ((rc = ss_compose_backward(&o, &dims, k, (const float *const *)ssm_of, ld, gssm, gconv,
				      NULL, dssm_of, dconv_of, dld, NULL)))
		goto out;
	/* 5. into the chunks' encodings, recomputed batch by batch */
	for (int i = 0, next; i < ex->k; i = next) {
		next = pack_chunks(ex, i, max_T, max_seqs, tok, tgt, seq_start, &nseq);
		if ((rc = ss_train_forward(t, tok, tgt, seq_start, nseq, NULL, NULL, NULL, &l)) ||
		    (rc = ss_train_backward(t, dconv + i * cl, dssm + i * sl, dld + i * ll)))
			goto out;
	}
out:
	ss_state_free(&composed);
	free(buf);
	free(tok);
	free(seq_start);
	free(view);
	free(in);
	free(ptr);
	return rc;
}
