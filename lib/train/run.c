/*
 * run.c — a whole training run (lib/ss_train.h, ss_train_run_*): batches
 * from the data sources (lib/train/data.c), the objective's forward and
 * backward (lm and bp2c: ss_train_forward/backward; bptc: ss_train_bptc),
 * the global-norm clip, the schedule and AdamW. Moved from
 * tools/ss-train.c (issue 33 item 5): the same steps, bit for bit.
 * ref: picaso.txt §5 (L_BP2C, L_BPTC), §6.2 (k uniform); llm.c
 *      train_gpt2.c (the loop); nanoGPT train.py get_lr.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/birdie.h"
#include "train/data.h"

#define NOMEM(errmsg) ss_errf(errmsg, SS_ERR_NOMEM, "out of memory")

struct ss_train_run {
	ss_train_state *st;
	ss_train *t;
	ss_model_config cfg;
	train_tok tk;
	float *am, *av;     /* Adam's m, v: [P->n] */
	int max_seqs;
	size_t conv_len, ssm_len;
	train_batch b;
	int *ks;            /* [max_seqs] k per example */
	train_example *exs; /* [max_seqs] bptc: the step's examples */
	lm_source lm;
	ex_source ex;
	chunk_db db;        /* bp2c: the states; bptc: the chunks' tokens */
	/* birdie */
	int32_t sent[BD_NSENT];  /* the sentinels' ids */
	int32_t *win, *seq;      /* [seq_len+1] a window of the document, its sequence */
	uint8_t *counted;        /* [seq_len+1] */
	int *config;             /* [max_seqs] each sequence's configuration */
	int32_t *ev_tok[SS_TRAIN_BIRDIE_CONFIGS], *ev_tgt[SS_TRAIN_BIRDIE_CONFIGS];
	int64_t ev_len[SS_TRAIN_BIRDIE_CONFIGS]; /* the fixed evaluation sequences */
	double ev_loss[SS_TRAIN_BIRDIE_CONFIGS];
	int evaluated;           /* this step evaluated: ev_loss and the action are new */
};

/* Probability each class keeps under the scheduler (uniform over classes). */
#define BIRDIE_FLOOR 0.2

/* Learning rate of step s (1-based): linear warmup, then cosine. */
static double lr_at(const ss_train_state *r, int64_t s)
{
	if (s <= r->warmup)
		return r->lr * (double)s / (double)r->warmup;
	double span = (double)(r->steps - r->warmup);
	double p = span > 0 ? (double)(s - r->warmup) / span : 1;
	if (p > 1)
		p = 1;
	return r->min_lr + 0.5 * (r->lr - r->min_lr) * (1 + cos(M_PI * p));
}

/* k for one example: uniform in {0, ..., min(max_k, available)}
 * (picaso.txt §6.2), from the run's splitmix64. */
static size_t take_k(uint64_t *rng, size_t available, int64_t max_k)
{
	size_t hi = available < (size_t)max_k ? available : (size_t)max_k;
	return (size_t)(((unsigned __int128)ss_splitmix64(rng) * (hi + 1)) >> 64);
}

/* Reads resume_dir/optimizer.safetensors into am, av (and the master
 * weights when the model was saved rounded), each checked finite (v ≥ 0). */
static int load_moments(ss_train_run *r, const char *dir, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "", p[4200];
	ss_train_params *P = ss_train_params_of(r->t);
	const int master = r->st->save_dtype != SS_DTYPE_F32;
	snprintf(p, sizeof p, "%s/optimizer.safetensors", dir);
	if (ss_safetensors_load_f32(p, "m", r->am, P->n, err) ||
	    ss_safetensors_load_f32(p, "v", r->av, P->n, err) ||
	    (master && ss_safetensors_load_f32(p, "master", P->data, P->n, err)))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s", err);
	/* a negative v makes every weight NaN in the first update */
	if (ss_train_params_check(&r->cfg, P, r->am, 0, err))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"m\": %s", p, err);
	if (ss_train_params_check(&r->cfg, P, r->av, 1, err))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"v\": %s", p, err);
	if (ss_train_params_check(&r->cfg, P, P->data, 0, err)) {
		if (!master)
			snprintf(p, sizeof p, "%s/model.safetensors", dir);
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s%s", p, master ? "\"master\": " : "", err);
	}
	return 0;
}

/* The trainer and the buffers of a step. */
static int run_alloc(ss_train_run *r, const ss_model *m, const ss_train_env *env, char *errmsg)
{
	const ss_train_state *st = r->st;
	int64_t max_tokens = st->batch_tokens;
	int rc;
	/* bptc encodes each chunk whole: room for the longest one too. */
	if (st->objective == SS_TRAIN_BPTC) {
		if ((rc = db_open(&r->db, st->chunk_tokens, SS_FORMAT_TOKENS, NULL, &r->cfg,
				  env->max_record, errmsg)))
			return rc;
		if (r->db.max_tokens > max_tokens)
			max_tokens = r->db.max_tokens;
	}
	r->max_seqs = (int)(st->batch_seqs < st->batch_tokens ? st->batch_seqs : st->batch_tokens);
	rc = ss_train_init(&r->t, m, max_tokens, r->max_seqs);
	if (!rc)
		rc = ss_train_set_threads(r->t, env->threads < SS_TRAIN_MAX_THREADS ? env->threads
										    : SS_TRAIN_MAX_THREADS);
	if (rc)
		return ss_errf(errmsg, rc, "%s: %s", env->model_dir, ss_strerror(rc));
	r->conv_len = ss_train_conv_len(r->t);
	r->ssm_len = ss_train_ssm_len(r->t);
	const size_t n = ss_train_params_of(r->t)->n, ms = (size_t)r->max_seqs;
	r->am = calloc(n, sizeof *r->am);
	r->av = calloc(n, sizeof *r->av);
	r->b.tokens = malloc((size_t)st->batch_tokens * sizeof *r->b.tokens);
	r->b.targets = malloc((size_t)st->batch_tokens * sizeof *r->b.targets);
	r->b.seq_start = malloc((ms + 1) * sizeof *r->b.seq_start);
	r->ks = malloc(ms * sizeof *r->ks);
	if (!r->ks || !r->am || !r->av || !r->b.tokens || !r->b.targets || !r->b.seq_start)
		return NOMEM(errmsg);
	return 0;
}

/* The sentinels' ids: each name of bd_sentinel_names must be one token of
 * the tokenizer, inside the model's vocabulary. */
static int birdie_sentinels(ss_train_run *r, int32_t vocab, char *errmsg)
{
	ss_tokenizer *tok;
	int rc = train_tok_get(&r->tk, &tok, errmsg);
	if (rc)
		return rc;
	int32_t n = ss_tokenizer_n_vocab(tok);
	for (int j = 0; j < BD_NSENT; j++) {
		const char *name = bd_sentinel_names[j];
		r->sent[j] = -1;
		for (int32_t id = 0; id < n && r->sent[j] < 0; id++) {
			size_t len;
			const char *b = ss_tokenizer_id_bytes(tok, id, &len);
			if (b && len == strlen(name) && !memcmp(b, name, len))
				r->sent[j] = id;
		}
		if (r->sent[j] < 0 || r->sent[j] >= vocab)
			return ss_errf(errmsg, SS_ERR_NOTFOUND, "--objective birdie: the tokenizer has "
				       "no token %s%s (its sentinels: an added token each, inside "
				       "the model's vocabulary; pipelines/realtext.mk makes one)", name,
				       r->sent[j] >= vocab ? " inside the model's vocabulary" : "");
	}
	return 0;
}

/* Into seq/counted (*m tokens): document tokens x[0..n) through
 * configuration *ci, or through ntp when they are too few for it (*ci then
 * says so). */
static int birdie_make(ss_train_run *r, int *ci, const int32_t *x, int64_t n, uint64_t *rng,
		       int64_t *m, char *errmsg)
{
	const int64_t cap = r->st->seq_len + 1;
	int rc = bd_transform(&bd_configs[*ci], r->sent, x, n, rng, r->seq, r->counted, cap, m);
	if (rc == SS_ERR_INVALID) {
		*ci = BD_NTP;
		rc = bd_transform(&bd_configs[BD_NTP], r->sent, x, n, rng, r->seq, r->counted, cap, m);
	}
	if (rc)
		return ss_errf(errmsg, rc, "%s: birdie %s: %s", r->st->data, bd_configs[*ci].name,
			       ss_strerror(rc));
	return 0;
}

/* The fixed evaluation sequence of every configuration: windows from the
 * start of the data, drawn with their own generator (seeded from the run's
 * seed), the same at every evaluation and after a resume. */
static int birdie_eval_set(ss_train_run *r, int32_t vocab, const ss_train_env *env, char *errmsg)
{
	ss_train_state est = *r->st;
	lm_source ev;
	est.offset = -1;
	est.epoch = 0;
	est.loss_after = NULL;
	uint64_t rng = r->st->seed ^ 0xb1d1e5eedULL;
	int rc = lm_open(&ev, &est, vocab, &r->tk, env->max_record, errmsg);
	for (int i = 0; !rc && i < SS_TRAIN_BIRDIE_CONFIGS; i++) {
		int ci = i;
		int64_t n = bd_draw_len(&bd_configs[i], r->st->seq_len, &rng), got, m;
		if ((rc = lm_take_raw(&ev, r->win, n, &got, errmsg)) ||
		    (rc = birdie_make(r, &ci, r->win, got, &rng, &m, errmsg)))
			break;
		r->ev_tok[i] = malloc((size_t)m * sizeof **r->ev_tok);
		r->ev_tgt[i] = malloc((size_t)m * sizeof **r->ev_tgt);
		if (!r->ev_tok[i] || !r->ev_tgt[i]) {
			rc = NOMEM(errmsg);
			break;
		}
		for (int64_t j = 0; j + 1 < m; j++) {
			r->ev_tok[i][j] = r->seq[j];
			r->ev_tgt[i][j] = r->counted[j + 1] ? r->seq[j + 1] : -1;
		}
		r->ev_len[i] = m - 1;
	}
	lm_close(&ev);
	return rc;
}

static int birdie_open(ss_train_run *r, int32_t vocab, const ss_train_env *env, char *errmsg)
{
	ss_train_state *st = r->st;
	const size_t cap = (size_t)st->seq_len + 1;
	int rc;
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++)
		if (bd_room(&bd_configs[i], st->seq_len) < 2) {
			int64_t need = st->seq_len;
			while (bd_room(&bd_configs[i], need) < 2)
				need++;
			return ss_errf(errmsg, SS_ERR_INVALID, "--seq-len %lld is too short for "
				       "birdie's %s: at least %lld", (long long)st->seq_len,
				       bd_configs[i].name, (long long)need);
		}
	r->win = malloc(cap * sizeof *r->win);
	r->seq = malloc(cap * sizeof *r->seq);
	r->counted = malloc(cap);
	r->config = malloc((size_t)r->max_seqs * sizeof *r->config);
	if (!r->win || !r->seq || !r->counted || !r->config)
		return NOMEM(errmsg);
	if ((rc = birdie_sentinels(r, vocab, errmsg)) ||
	    (rc = birdie_eval_set(r, vocab, env, errmsg)))
		return rc;
	double sum = 0;
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++)
		sum += st->birdie_action[i];
	if (sum == 0 || st->birdie_fixed)
		bd_fixed_action(st->birdie_only, st->birdie_action);
	return lm_open(&r->lm, st, vocab, &r->tk, env->max_record, errmsg);
}

/* Every configuration's loss on its evaluation sequence, into r->ev_loss. */
static int birdie_eval(ss_train_run *r, char *errmsg)
{
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++) {
		int64_t ss[2] = { 0, r->ev_len[i] };
		int rc = ss_train_forward(r->t, r->ev_tok[i], r->ev_tgt[i], ss, 1, NULL, NULL, NULL,
					  &r->ev_loss[i]);
		if (rc)
			return ss_errf(errmsg, rc, "birdie: evaluating %s: %s", bd_configs[i].name,
				       ss_strerror(rc));
	}
	return 0;
}

/* After step st->step: every birdie_every steps, the evaluation, the
 * rewards of the interval (A.1.3), a history row and the next action. */
static int birdie_update(ss_train_run *r, char *errmsg)
{
	ss_train_state *st = r->st;
	const int K = SS_TRAIN_BIRDIE_CONFIGS;
	r->evaluated = 0;
	if (st->step % st->birdie_every)
		return 0;
	int rc = birdie_eval(r, errmsg);
	if (rc)
		return rc;
	double *h = realloc(st->birdie_hist, (size_t)(st->birdie_nhist + 1) * 3 * K * sizeof *h);
	if (!h)
		return NOMEM(errmsg);
	st->birdie_hist = h;
	h += st->birdie_nhist++ * 3 * K;
	for (int i = 0; i < K; i++) {
		h[i] = st->birdie_loss[i];
		h[K + i] = st->birdie_action[i];
		h[2 * K + i] = bd_reward(st->birdie_loss[i], r->ev_loss[i]);
		st->birdie_loss[i] = r->ev_loss[i];
	}
	if (!st->birdie_fixed)
		bd_schedule(st->birdie_hist, st->birdie_nhist, st->birdie_loss, st->birdie_only,
			    BIRDIE_FLOOR, &st->rng, st->birdie_action);
	r->evaluated = 1;
	return 0;
}

/* Fills the step's batch with Birdie sequences: a configuration drawn from
 * the action, a window of the document, its transform; until the next one
 * might not fit in batch_tokens. */
static int birdie_fill(ss_train_run *r, char *errmsg)
{
	ss_train_state *st = r->st;
	train_batch *b = &r->b;
	int rc;
	if (st->step == 0 && st->birdie_nhist == 0) { /* the losses before any step */
		if ((rc = birdie_eval(r, errmsg)))
			return rc;
		memcpy(st->birdie_loss, r->ev_loss, sizeof r->ev_loss);
	}
	while (b->nseq < r->max_seqs) {
		int ci = bd_pick(st->birdie_action, &st->rng);
		int64_t n = bd_draw_len(&bd_configs[ci], st->seq_len, &st->rng), got, m;
		if (b->T + bd_max_len(&bd_configs[ci], n) - 1 > st->batch_tokens)
			break;
		if ((rc = lm_take_raw(&r->lm, r->win, n, &got, errmsg)) ||
		    (rc = birdie_make(r, &ci, r->win, got, &st->rng, &m, errmsg)))
			return rc;
		for (int64_t j = 0; j + 1 < m; j++) {
			b->tokens[b->T + j] = r->seq[j];
			b->targets[b->T + j] = r->counted[j + 1] ? r->seq[j + 1] : -1;
			b->ntargets += r->counted[j + 1];
		}
		b->T += m - 1;
		r->config[b->nseq] = ci;
		b->seq_start[++b->nseq] = b->T;
	}
	return 0;
}

int ss_train_run_open(ss_train_run **out, ss_train_state *st, const ss_model *m,
		      const ss_train_env *env, char *errmsg)
{
	ss_train_run *r = calloc(1, sizeof *r);
	int rc;
	*out = r;
	if (!r)
		return NOMEM(errmsg);
	r->st = st;
	r->cfg = m->cfg;
	r->tk.env = env;
	if ((rc = run_alloc(r, m, env, errmsg)) ||
	    (env->resume_dir && (rc = load_moments(r, env->resume_dir, errmsg))))
		return rc;
	int32_t vocab = m->cfg.vocab_size;
	if (vocab <= 0 || vocab > m->cfg.vocab_padded)
		vocab = m->cfg.vocab_padded;
	if (st->objective == SS_TRAIN_LM) {
		rc = lm_open(&r->lm, st, vocab, &r->tk, env->max_record, errmsg);
	} else if (st->objective == SS_TRAIN_BIRDIE) {
		rc = birdie_open(r, vocab, env, errmsg);
	} else if (st->objective == SS_TRAIN_BP2C) {
		r->b.conv = malloc((size_t)r->max_seqs * r->conv_len * sizeof *r->b.conv);
		r->b.ssm = malloc((size_t)r->max_seqs * r->ssm_len * sizeof *r->b.ssm);
		if (!r->b.conv || !r->b.ssm)
			return NOMEM(errmsg);
		rc = db_open(&r->db, st->states, SS_FORMAT_STATES, st->base_fingerprint, &r->cfg,
			     env->max_record, errmsg);
		if (!rc)
			rc = ex_open(&r->ex, st, vocab, &r->tk, errmsg);
	} else {
		rc = ex_open(&r->ex, st, vocab, &r->tk, errmsg);
	}
	if (rc)
		return rc;
	if (!(r->exs = calloc((size_t)r->max_seqs, sizeof *r->exs)))
		return NOMEM(errmsg);
	return 0;
}

/* Into conv, ssm ([conv_len], [ssm_len]): the composition of e's first k
 * chunks' states (the most relevant last, nearest the query). */
static int bp2c_compose(ss_train_run *r, const train_example *e, size_t k, float *conv,
			float *ssm, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_state *in = calloc(k, sizeof *in), out;
	const ss_state **pin = calloc(k, sizeof *pin);
	size_t got = 0;
	int rc = in && pin ? 0 : NOMEM(errmsg);
	for (; !rc && got < k; got++) {
		const ss_record *rec;
		if ((rc = db_get(&r->db, e->chunks[k - 1 - got], e->where, &rec, errmsg)))
			break;
		if ((rc = ss_record_state(rec, &in[got], err))) {
			rc = ss_errf(errmsg, rc, "%s: %s", r->db.path, err);
			break;
		}
		pin[got] = &in[got];
	}
	if (!rc) {
		ss_compose_opts o = { .mode = r->st->mode };
		if ((rc = ss_compose(&o, pin, k, &out, err)))
			rc = ss_errf(errmsg, rc, "%s: %s", e->where, err);
	}
	if (!rc) {
		memcpy(conv, out.conv, r->conv_len * sizeof *conv);
		memcpy(ssm, out.ssm, r->ssm_len * sizeof *ssm);
		ss_state_free(&out);
	}
	for (size_t i = 0; in && i < got; i++)
		ss_state_free(&in[i]);
	free(in);
	free(pin);
	return rc;
}

/* Appends example e to the batch as one sequence from the composition of
 * its first k chunks (k = 0: the zero state): inputs q ++ c without c's
 * last token, targets c. */
static int bp2c_add(ss_train_run *r, const train_example *e, size_t k, char *errmsg)
{
	train_batch *b = &r->b;
	float *conv = b->conv + (size_t)b->nseq * r->conv_len;
	float *ssm = b->ssm + (size_t)b->nseq * r->ssm_len;
	if (k == 0) {
		memset(conv, 0, r->conv_len * sizeof *conv);
		memset(ssm, 0, r->ssm_len * sizeof *ssm);
	} else {
		int rc = bp2c_compose(r, e, k, conv, ssm, errmsg);
		if (rc)
			return rc;
	}
	int64_t T = b->T;
	for (size_t i = 0; i < e->nq; i++) {
		b->tokens[T + (int64_t)i] = e->q[i];
		b->targets[T + (int64_t)i] = -1;
	}
	for (size_t i = 0; i + 1 < e->nc; i++)
		b->tokens[T + (int64_t)(e->nq + i)] = e->c[i];
	for (size_t i = 0; i < e->nc; i++)
		b->targets[T + (int64_t)(e->nq - 1 + i)] = e->c[i];
	b->T += (int64_t)(e->nq + e->nc - 1);
	b->ntargets += (int64_t)e->nc;
	b->seq_start[++b->nseq] = b->T;
	return 0;
}

/* Fills the step's batch: lm's windows, or examples (bp2c: composed into
 * the batch; bptc: kept in r->exs), each with its k in r->ks. */
static int batch_fill(ss_train_run *r, char *errmsg)
{
	ss_train_state *st = r->st;
	train_batch *b = &r->b;
	int rc;
	b->T = b->ntargets = 0;
	b->nseq = 0;
	b->seq_start[0] = 0;
	if (st->objective == SS_TRAIN_BIRDIE)
		return birdie_fill(r, errmsg);
	if (st->objective == SS_TRAIN_LM) {
		while (b->nseq < r->max_seqs &&
		       (rc = lm_take(&r->lm, b, st->seq_len, st->batch_tokens - b->T, errmsg)))
			if (rc < 0)
				return rc;
		return 0;
	}
	while (b->nseq < r->max_seqs) {
		const train_example *e = &r->ex.next;
		int64_t len = (int64_t)(e->nq + e->nc - 1);
		if (len > st->batch_tokens)
			return ss_errf(errmsg, SS_ERR_INVALID, "%s: %lld tokens, more than "
				       "--batch-tokens %lld", e->where, (long long)len,
				       (long long)st->batch_tokens);
		if (b->T + len > st->batch_tokens)
			break;
		train_example cur;
		rc = ex_take(&r->ex, &cur, errmsg);
		size_t k = take_k(&st->rng, cur.n_chunks, st->max_k);
		r->ks[b->nseq] = (int)k;
		if (!rc && st->objective == SS_TRAIN_BPTC) {
			r->exs[b->nseq++] = cur;
			b->T += len;
			b->ntargets += (int64_t)cur.nc;
			continue;
		}
		if (!rc)
			rc = bp2c_add(r, &cur, k, errmsg);
		train_example_free(&cur);
		if (rc)
			return rc;
	}
	return 0;
}

/* Multiplies every gradient by f. */
static void grads_scale(ss_train_params *G, double f)
{
	const float s = (float)f;
	for (size_t i = 0; i < G->n; i++)
		G->data[i] *= s;
}

/* Example e's gradient added (ss_train_bptc) and its loss, its first k
 * chunks' tokens read from r->db (the most relevant composed last). */
static int bptc_example(ss_train_run *r, const train_example *e, size_t k, int64_t step,
			double *loss, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_tokens *tk = calloc(k + 1, sizeof *tk);
	const int32_t **chunks = calloc(k + 1, sizeof *chunks);
	int64_t *len = calloc(k + 1, sizeof *len);
	int rc = tk && chunks && len ? 0 : NOMEM(errmsg);
	for (size_t j = 0; !rc && j < k; j++) {
		const char *id = e->chunks[k - 1 - j];
		const ss_record *rec;
		if ((rc = db_get(&r->db, id, e->where, &rec, errmsg)))
			break;
		if ((rc = ss_record_tokens(rec, &tk[j], err)))
			rc = ss_errf(errmsg, rc, "%s: %s", r->db.path, err);
		else if (tk[j].n_tokens < 1)
			rc = ss_errf(errmsg, SS_ERR_FORMAT, "%s: chunk \"%s\" has no tokens", e->where, id);
		chunks[j] = tk[j].tokens;
		len[j] = tk[j].n_tokens;
	}
	if (!rc) {
		ss_train_bptc_example x = { .chunks = chunks, .chunk_len = len, .k = (int)k,
					    .query = e->q, .n_query = (int64_t)e->nq,
					    .cont = e->c, .n_cont = (int64_t)e->nc,
					    .mode = (int)r->st->mode };
		if ((rc = ss_train_bptc(r->t, &x, loss)))
			rc = ss_errf(errmsg, rc, "step %lld: %s: BPTC: %s", (long long)step, e->where,
				     ss_strerror(rc));
	}
	for (size_t j = 0; tk && j < k; j++)
		ss_tokens_free(&tk[j]);
	free(tk), free(chunks), free(len);
	return rc;
}

/* One BPTC step over the batch's examples: leaves in G the gradient of the
 * mean NLL over all their continuation tokens (ntargets of them, as bp2c's
 * batch loss) and sets *loss. ss_train_bptc adds the gradient of one
 * example's own mean NLL, g_i; the step wants Σ w_i·g_i with
 * w_i = n_cont_i / ntargets, so before example i the sum so far is rescaled
 * by w_(i-1) / w_i (G then holds Σ_(j<=i) (w_j / w_i)·g_j) and by w_(n-1)
 * after the last. */
static int bptc_step(ss_train_run *r, int64_t step, double *loss, char *errmsg)
{
	ss_train_params *G = ss_train_grads_of(r->t);
	const int64_t ntargets = r->b.ntargets;
	double sum = 0, w_prev = 1;
	ss_train_zero_grad(r->t);
	for (int i = 0; i < r->b.nseq; i++) {
		const train_example *e = &r->exs[i];
		const double w = (double)e->nc / (double)ntargets;
		double l;
		if (i > 0)
			grads_scale(G, w_prev / w);
		int rc = bptc_example(r, e, (size_t)r->ks[i], step, &l, errmsg);
		if (rc)
			return rc;
		sum += l * (double)e->nc;
		w_prev = w;
	}
	grads_scale(G, w_prev);
	*loss = sum / (double)ntargets;
	return 0;
}

/* The step's loss and gradient (G zeroed first). */
static int step_grad(ss_train_run *r, int64_t step, double *loss, char *errmsg)
{
	train_batch *b = &r->b;
	int rc;
	if (r->st->objective == SS_TRAIN_BPTC) {
		rc = bptc_step(r, step, loss, errmsg);
		for (int i = 0; i < b->nseq; i++)
			train_example_free(&r->exs[i]);
		return rc;
	}
	if ((rc = ss_train_forward(r->t, b->tokens, b->targets, b->seq_start, b->nseq, b->conv,
				   b->ssm, NULL, loss)))
		return ss_errf(errmsg, rc, "step %lld: forward: %s", (long long)step, ss_strerror(rc));
	ss_train_zero_grad(r->t);
	if ((rc = ss_train_backward(r->t, NULL, NULL, NULL)))
		return ss_errf(errmsg, rc, "step %lld: backward: %s", (long long)step, ss_strerror(rc));
	return 0;
}

/* One step: batch, gradient, clip, AdamW; fills *s. */
static int run_step(ss_train_run *r, ss_train_step_info *s, char *errmsg)
{
	ss_train_state *st = r->st;
	ss_train_params *P = ss_train_params_of(r->t), *G = ss_train_grads_of(r->t);
	double loss, norm2 = 0;
	int rc;
	if ((rc = batch_fill(r, errmsg)) || (rc = step_grad(r, st->step + 1, &loss, errmsg)))
		return rc;
	for (size_t i = 0; i < G->n; i++)
		norm2 += (double)G->data[i] * G->data[i];
	double norm = sqrt(norm2);
	if (!isfinite(norm))
		return ss_errf(errmsg, SS_ERR_INVALID, "step %lld: the gradient is not finite (loss %g)",
			       (long long)st->step + 1, loss);
	if (st->clip > 0 && norm > st->clip)
		grads_scale(G, st->clip / norm);
	st->step++;
	double lr = lr_at(st, st->step);
	ss_adamw h = { .lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
		       .weight_decay = (float)st->weight_decay };
	if ((rc = ss_adamw_update(P->data, G->data, r->am, r->av, P->n, &h, st->step)))
		return ss_errf(errmsg, rc, "step %lld: AdamW: %s", (long long)st->step, ss_strerror(rc));
	const int birdie = st->objective == SS_TRAIN_BIRDIE;
	if (birdie && (rc = birdie_update(r, errmsg)))
		return rc;
	*s = (ss_train_step_info){ .step = st->step, .loss = loss, .lr = lr, .grad_norm = norm,
				   .tokens = r->b.ntargets, .inputs = r->b.T, .nseq = r->b.nseq,
				   .k = st->objective == SS_TRAIN_LM || birdie ? NULL : r->ks,
				   .config = birdie ? r->config : NULL,
				   .birdie_loss = birdie && r->evaluated ? st->birdie_loss : NULL,
				   .birdie_action = birdie && r->evaluated ? st->birdie_action : NULL };
	return 0;
}

int ss_train_run_steps(ss_train_run *r, int64_t until, ss_train_step_fn step, void *ctx,
		       char *errmsg)
{
	while (r->st->step < until) {
		ss_train_step_info s;
		int rc = run_step(r, &s, errmsg);
		if (!rc && step)
			rc = step(ctx, &s);
		if (rc)
			return rc;
	}
	return 0;
}

int ss_train_run_tell(ss_train_run *r, char *errmsg)
{
	if (r->st->objective == SS_TRAIN_LM || r->st->objective == SS_TRAIN_BIRDIE)
		return lm_tell(&r->lm, r->st, errmsg);
	ex_tell(&r->ex, r->st);
	return 0;
}

ss_train *ss_train_run_trainer(ss_train_run *r)
{
	return r->t;
}

void ss_train_run_moments(ss_train_run *r, const float **m, const float **v)
{
	*m = r->am;
	*v = r->av;
}

void ss_train_run_free(ss_train_run *r)
{
	if (!r)
		return;
	lm_close(&r->lm);
	ex_close(&r->ex);
	db_close(&r->db);
	for (int i = 0; r->exs && i < r->max_seqs; i++)
		train_example_free(&r->exs[i]);
	ss_train_free(r->t);
	free(r->am), free(r->av), free(r->ks), free(r->exs);
	free(r->win), free(r->seq), free(r->counted), free(r->config);
	for (int i = 0; i < SS_TRAIN_BIRDIE_CONFIGS; i++)
		free(r->ev_tok[i]), free(r->ev_tgt[i]);
	free(r->b.tokens), free(r->b.targets), free(r->b.seq_start), free(r->b.conv), free(r->b.ssm);
	free(r);
}
