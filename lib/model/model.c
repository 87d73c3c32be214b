/*
 * model.c — Mamba-2 and Mamba-1 models: weight loading with shape checks,
 * and the weight fingerprint (the config is config.c's).
 *
 * Loading plan: parse the config, list the checkpoint's tensors (headers
 * only), resolve and shape-check every tensor the model needs, then read them
 * in one batch into a single arena (or point into a file mapping for aligned
 * f32 safetensors): f32, or for the four matrices in a 16-bit or q8_0
 * weights_dtype, narrowed chunk by chunk as they stream in. Each tensor is
 * hashed as it arrives, widened to f32; the model fingerprint combines the
 * per-tensor digests in a fixed order, so it does not depend on file layout,
 * storage dtype (after widening), weights_dtype or read order.
 * ref: docs/DESIGN.md §2; transformers models/mamba2/configuration_mamba2.py;
 *      mamba_ssm models/config_mamba.py, models/mixer_seq_simple.py,
 *      modules/mamba2.py (parameter names and shapes).
 */
#include "ss.h"

#include "model/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ fingerprint */

/* A 64-bit hash with four independent lanes over 32-byte stripes (the round
 * and avalanche structure of xxHash64), fast enough that hashing a 500 MB
 * model costs well under a second and mixing every input bit. */
typedef struct {
	uint64_t v[4];
	uint64_t len;
	uint8_t tail[32];
	size_t ntail;
} fphash;

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t fround(uint64_t acc, uint64_t in)
{
	return rotl(acc + in * P2, 31) * P1;
}
static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void fphash_init(fphash *h, uint64_t seed)
{
	h->v[0] = seed + P1 + P2;
	h->v[1] = seed + P2;
	h->v[2] = seed;
	h->v[3] = seed - P1;
	h->len = 0;
	h->ntail = 0;
}

static void fphash_update(fphash *h, const void *data, size_t n)
{
	const uint8_t *p = data;
	h->len += n;
	if (h->ntail) {
		size_t k = 32 - h->ntail < n ? 32 - h->ntail : n;
		memcpy(h->tail + h->ntail, p, k);
		h->ntail += k;
		p += k;
		n -= k;
		if (h->ntail < 32)
			return;
		for (int i = 0; i < 4; i++)
			h->v[i] = fround(h->v[i], rd64(h->tail + 8 * i));
		h->ntail = 0;
	}
	uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];
	for (; n >= 32; p += 32, n -= 32) {
		v0 = fround(v0, rd64(p));
		v1 = fround(v1, rd64(p + 8));
		v2 = fround(v2, rd64(p + 16));
		v3 = fround(v3, rd64(p + 24));
	}
	h->v[0] = v0, h->v[1] = v1, h->v[2] = v2, h->v[3] = v3;
	memcpy(h->tail, p, n);
	h->ntail = n;
}

static uint64_t fphash_final(const fphash *h)
{
	uint64_t x = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18);
	for (int i = 0; i < 4; i++) {
		x ^= fround(0, h->v[i]);
		x = x * P1 + P4;
	}
	x += h->len;
	size_t i = 0;
	for (; i + 8 <= h->ntail; i += 8) {
		x ^= fround(0, rd64(h->tail + i));
		x = rotl(x, 27) * P1 + P4;
	}
	for (; i < h->ntail; i++) {
		x ^= h->tail[i] * P5;
		x = rotl(x, 11) * P1;
	}
	x ^= x >> 33;
	x *= P2;
	x ^= x >> 29;
	x *= P3;
	x ^= x >> 32;
	return x;
}

static void fphash_visit(void *ctx, const float *x, size_t n)
{
	fphash_update(ctx, x, n * sizeof *x);
}

/* ---------------------------------------------------------------- loading */

struct model_priv {
	void *arena;
	ss_checkpoint *ckpt;   /* kept open while tensors point into its mappings */
};

/* One tensor the model needs, in fingerprint order. */
typedef struct {
	char name[96];            /* canonical name (for messages when missing) */
	const ss_checkpoint_tensor *t;
	float **dst;              /* where the model keeps it (f32); NULL = hash only */
	void **mat;               /* or: one of the four matrices, in weights_dtype */
	int ndim;
	int64_t shape[3];
	fphash h;
	int mapped;
	ss_dtype dtype;           /* kept in memory: f32, or weights_dtype for mat */
	char *out;                /* narrowing: next element's address */
} slot;

/* Hashes a chunk of a tensor held in a 16-bit or q8_0 weights_dtype and narrows
 * it into the slot's next elements (chunks arrive in order; for q8_0 every
 * chunk but a tensor's last is a multiple of 32 elements: the checkpoint
 * reader's chunks are 2^16). */
static void narrow_visit(void *ctx, const float *x, size_t n)
{
	slot *s = ctx;
	fphash_update(&s->h, x, n * sizeof *x);
	ss_from_f32(s->out, s->dtype, x, n);
	s->out += ss_dtype_row_size(s->dtype, n);
}

/* Finds the first present name among `alts` (NULL-terminated list). */
static const ss_checkpoint_tensor *find_any(const ss_checkpoint *ck, const char *const *alts)
{
	for (; *alts; alts++) {
		const ss_checkpoint_tensor *t = ss_checkpoint_find(ck, *alts);
		if (t)
			return t;
	}
	return NULL;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)shape[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

static int check_shape(const slot *s, char *errmsg)
{
	int ok = s->t->ndim == s->ndim;
	for (int d = 0; ok && d < s->ndim; d++)
		ok = s->t->shape[d] == s->shape[d];
	if (ok)
		return 0;
	char got[128], want[128];
	fmt_shape(got, sizeof got, s->t->ndim, s->t->shape);
	fmt_shape(want, sizeof want, s->ndim, s->shape);
	return ss_errf(errmsg, SS_ERR_MISMATCH, "%s: %s: shape %s, expected %s", s->t->file, s->t->name,
	            got, want);
}

static void slot_set(slot *s, const char *name, float **dst, int ndim, int64_t a, int64_t b,
                     int64_t c)
{
	if (name != s->name)
		snprintf(s->name, sizeof s->name, "%s", name);
	s->dst = dst;
	s->mat = NULL;
	s->ndim = ndim;
	s->shape[0] = a;
	s->shape[1] = b;
	s->shape[2] = c;
}

/* Resolves a layer tensor: "backbone.layers.N.<suffix>" or "layers.N.<suffix>". */
static const ss_checkpoint_tensor *find_layer(const ss_checkpoint *ck, int l, const char *suffix,
                                              char *canon, size_t ncanon)
{
	char alt[96];
	snprintf(canon, ncanon, "backbone.layers.%d.%s", l, suffix);
	snprintf(alt, sizeof alt, "layers.%d.%s", l, suffix);
	const char *alts[] = {canon, alt, NULL};
	return find_any(ck, alts);
}

static int build_slots(ss_model *m, const ss_checkpoint *ck, unsigned flags, slot **out,
                       size_t *nout, char *errmsg)
{
	ss_model_config *c = &m->cfg;
	int untied = !c->tied;
	const int m1 = ss_model_is_mamba1(c), per = m1 ? 10 : 9;
	size_t n = 2 + (size_t)per * (size_t)c->n_layer + (size_t)untied;
	slot *s = calloc(n, sizeof *s);
	if (!s)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	*out = s;
	*nout = n;
	const char *emb[] = {"backbone.embeddings.weight", "backbone.embedding.weight",
	                     "embeddings.weight", "embedding.weight", NULL};
	const char *normf[] = {"backbone.norm_f.weight", "norm_f.weight", NULL};
	const char *head[] = {"lm_head.weight", NULL};
	size_t k = 0;
	s[k].t = find_any(ck, emb);
	/* transformers' Mamba2 embeds vocab_size rows, unpadded: accept that. */
	if (s[k].t && s[k].t->ndim == 2 && s[k].t->shape[0] == c->vocab_size)
		c->vocab_padded = c->vocab_size;
	slot_set(&s[k], "backbone.embeddings.weight", NULL, 2, c->vocab_padded, c->d_model, 0);
	s[k++].mat = &m->embedding;
	for (int l = 0; l < c->n_layer; l++) {
		ss_layer *lw = &m->layers[l];
		static const char *const suffix[9] = {
			"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
			"mixer.dt_bias", "mixer.A_log", "mixer.D", "mixer.norm.weight",
			"mixer.out_proj.weight",
		};
		float **dst[9] = {&lw->norm, NULL, &lw->conv_w, &lw->conv_b, &lw->dt_bias,
		                  &lw->A_log, &lw->D, &lw->gnorm, NULL};
		void **mat[9] = {[1] = &lw->in_proj, [8] = &lw->out_proj};
		int64_t sh[9][3] = {
			{c->d_model}, {c->d_in_proj, c->d_model}, {c->conv_dim, 1, c->d_conv},
			{c->conv_dim}, {c->nheads}, {c->nheads}, {c->nheads}, {c->d_inner},
			{c->d_model, c->d_inner},
		};
		static const int nd[9] = {1, 2, 3, 1, 1, 1, 1, 1, 2};
		/* Mamba-1 (mamba_simple.py / modeling_mamba.py MambaMixer) */
		static const char *const suffix1[10] = {
			"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
			"mixer.x_proj.weight", "mixer.dt_proj.weight", "mixer.dt_proj.bias", "mixer.A_log",
			"mixer.D", "mixer.out_proj.weight",
		};
		float **dst1[10] = {&lw->norm, NULL, &lw->conv_w, &lw->conv_b, &lw->x_proj,
		                    &lw->dt_proj, &lw->dt_bias, &lw->A_log, &lw->D, NULL};
		void **mat1[10] = {[1] = &lw->in_proj, [9] = &lw->out_proj};
		int64_t sh1[10][3] = {
			{c->d_model}, {c->d_in_proj, c->d_model}, {c->d_inner, 1, c->d_conv},
			{c->d_inner}, {c->dt_rank + 2 * c->d_state, c->d_inner}, {c->d_inner, c->dt_rank},
			{c->d_inner}, {c->d_inner, c->d_state}, {c->d_inner}, {c->d_model, c->d_inner},
		};
		static const int nd1[10] = {1, 2, 3, 1, 2, 2, 1, 2, 1, 2};
		for (int i = 0; i < per; i++, k++) {
			const char *suf = m1 ? suffix1[i] : suffix[i];
			const int64_t *shp = m1 ? sh1[i] : sh[i];
			s[k].t = find_layer(ck, l, suf, s[k].name, sizeof s[k].name);
			slot_set(&s[k], s[k].name, m1 ? dst1[i] : dst[i], m1 ? nd1[i] : nd[i], shp[0],
			         shp[1], shp[2]);
			s[k].mat = m1 ? mat1[i] : mat[i];
		}
	}
	s[k].t = find_any(ck, normf);
	slot_set(&s[k++], "backbone.norm_f.weight", &m->norm_f, 1, c->d_model, 0, 0);
	if (untied) {
		s[k].t = find_any(ck, head);
		slot_set(&s[k], "lm_head.weight", NULL, 2, c->vocab_padded, c->d_model, 0);
		s[k++].mat = (flags & SS_MODEL_SKIP_LM_HEAD) ? NULL : &m->lm_head;
	}
	for (size_t i = 0; i < n; i++) {
		if (!s[i].t)
			return ss_errf(errmsg, SS_ERR_NOTFOUND, "%s: missing tensor %s%s",
			            ss_checkpoint_path(ck), s[i].name,
			            !strcmp(s[i].name, "lm_head.weight")
			                ? " (config says the embeddings are not tied)" : "");
		int rc = check_shape(&s[i], errmsg);
		if (rc)
			return rc;
	}
	return 0;
}

/* The dtype the four matrices are held in: the checkpoint's (the first
 * slot's), or opts->weights_dtype with SS_MODEL_WEIGHTS_DTYPE; q8_0 only
 * where its rows are whole blocks of 32 (ss_linear_cpu's limits). */
static int pick_weights_dtype(ss_model *m, const slot *s, unsigned flags, const ss_model_opts *opts,
			      const char *dir, char *errmsg)
{
	m->ckpt_dtype = s[0].t->dtype;
	m->weights_dtype = m->ckpt_dtype;
	if (flags & SS_MODEL_WEIGHTS_DTYPE) {
		const ss_dtype_info *d = ss_dtype_info_of(opts->weights_dtype);
		if (!d || !(d->uses & SS_DTYPE_WEIGHTS))
			return ss_errf(errmsg, SS_ERR_INVALID, "unknown weights dtype %d",
				       (int)opts->weights_dtype);
		m->weights_dtype = opts->weights_dtype;
	}
	if (m->weights_dtype == SS_DTYPE_Q8_0 &&
	    (m->cfg.d_model % 32 || m->cfg.d_inner % 32 || m->cfg.d_inner > SS_Q8_0_ROW_MAX))
		return ss_errf(errmsg, SS_ERR_UNSUPPORTED, "%s: q8_0 weights need d_model and d_inner "
			       "multiples of 32, at most %d (d_model %d, d_inner %d)", dir, SS_Q8_0_ROW_MAX,
			       m->cfg.d_model, m->cfg.d_inner);
	return 0;
}

/* Bytes of slot s in the arena: its elements in its dtype, 64-byte aligned. */
static size_t arena_bytes(const slot *s)
{
	return (ss_dtype_row_size(s->dtype, (size_t)s->t->numel) + 63) & ~(size_t)63;
}

/* Maps what can be mapped (f32 kept in f32, unless SS_MODEL_NO_MMAP) and
 * allocates one arena for everything else kept. *nreq: the slots left to
 * read; *nmapped: those mapped. */
static int place_slots(ss_model *m, slot *s, size_t ns, unsigned flags, size_t *nreq,
		       size_t *nmapped, char *errmsg)
{
	struct model_priv *priv = m->priv;
	size_t arena = 0;
	*nreq = *nmapped = 0;
	for (size_t i = 0; i < ns; i++) {
		fphash_init(&s[i].h, 0);
		s[i].dtype = s[i].mat ? m->weights_dtype : SS_DTYPE_F32;
		void **keep = s[i].mat;
		const float *p = NULL;
		if ((s[i].dst || keep) && s[i].dtype == SS_DTYPE_F32 && !(flags & SS_MODEL_NO_MMAP))
			p = ss_checkpoint_map_f32(priv->ckpt, s[i].t);
		if (p) {
			if (keep)
				*keep = (void *)p;
			else
				*s[i].dst = (float *)p;
			s[i].mapped = 1;
			(*nmapped)++;
		} else {
			(*nreq)++;
			if (s[i].dst || keep)
				arena += arena_bytes(&s[i]);
		}
	}
	if (arena && !(priv->arena = aligned_alloc(64, arena)))
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory for %zu MB of weights", arena >> 20);
	return 0;
}

/* Reads the nreq slots not mapped into the arena (16-bit and q8_0 matrices
 * narrowed as they stream in), hashing every tensor; the mapped ones are
 * hashed where they lie. */
static int read_slots(ss_model *m, slot *s, size_t ns, size_t nreq, char *errmsg)
{
	struct model_priv *priv = m->priv;
	ss_checkpoint_req *req = calloc(nreq + 1, sizeof *req);
	if (!req)
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	size_t at = 0, r = 0;
	for (size_t i = 0; i < ns; i++) {
		if (s[i].mapped)
			continue;
		req[r].t = s[i].t;
		req[r].visit = fphash_visit;
		req[r].ctx = &s[i].h;
		if (s[i].dst || s[i].mat) {
			float *p = (float *)((char *)priv->arena + at);
			at += arena_bytes(&s[i]);
			if (s[i].mat)
				*s[i].mat = p;
			else
				*s[i].dst = p;
			if (s[i].dtype == SS_DTYPE_F32) {
				req[r].dst = p;
			} else { /* streamed in chunks, narrowed by the visit */
				s[i].out = (char *)p;
				req[r].visit = narrow_visit;
				req[r].ctx = &s[i];
			}
		}
		r++;
	}
	int rc = ss_checkpoint_read(priv->ckpt, req, nreq, errmsg);
	free(req);
	if (rc)
		return rc;
	for (size_t i = 0; i < ns; i++)
		if (s[i].mapped)
			fphash_update(&s[i].h, s[i].mat ? *s[i].mat : (void *)*s[i].dst,
			              (size_t)s[i].t->numel * sizeof(float));
	return 0;
}

/* m->fingerprint: dims, then (numel, digest) per tensor in slot order. */
static void fingerprint(ss_model *m, const slot *s, size_t ns)
{
	const ss_model_config *c = &m->cfg;
	fphash fp;
	fphash_init(&fp, 0x5353u);
	/* the architecture is in the tag: a Mamba-1 and a Mamba-2 model never
	 * share a fingerprint, and Mamba-2 fingerprints stay as they were */
	static const char tag2[16] = "ss-mamba2-fp-v1", tag1[16] = "ss-mamba1-fp-v1";
	fphash_update(&fp, ss_model_is_mamba1(c) ? tag1 : tag2, sizeof tag2);
	if (ss_model_is_mamba1(c)) {
		int64_t rank = c->dt_rank;
		fphash_update(&fp, &rank, sizeof rank);
	}
	int64_t dims[] = {c->d_model, c->n_layer, c->d_state, c->headdim, c->nheads, c->ngroups,
	                  c->d_conv, c->d_inner, c->vocab_padded, c->tied};
	fphash_update(&fp, dims, sizeof dims);
	float fl[3] = {c->eps, c->dt_min, c->dt_max};
	fphash_update(&fp, fl, sizeof fl);
	for (size_t i = 0; i < ns; i++) {
		uint64_t d[2] = {s[i].t->numel, fphash_final(&s[i].h)};
		fphash_update(&fp, d, sizeof d);
	}
	snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx",
	         (unsigned long long)fphash_final(&fp));
}

int ss_model_load_opts(ss_model **out, const char *dir, const ss_model_opts *opts, char *errmsg)
{
	unsigned flags = opts ? opts->flags : 0;
	*out = NULL;
	ss_model *m = calloc(1, sizeof *m);
	struct model_priv *priv = calloc(1, sizeof *priv);
	if (!m || !priv) {
		free(m);
		free(priv);
		return ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	}
	m->priv = priv;
	slot *s = NULL;
	size_t ns = 0, nreq = 0, nmapped = 0;
	int rc = ss_model_config_load(&m->cfg, dir, errmsg);
	if (!rc && !(m->layers = calloc((size_t)m->cfg.n_layer, sizeof *m->layers)))
		rc = ss_errf(errmsg, SS_ERR_NOMEM, "out of memory");
	if (rc || (rc = ss_checkpoint_open(&priv->ckpt, dir, errmsg)) ||
	    (rc = build_slots(m, priv->ckpt, flags, &s, &ns, errmsg)) ||
	    (rc = pick_weights_dtype(m, s, flags, opts, dir, errmsg)) ||
	    (rc = place_slots(m, s, ns, flags, &nreq, &nmapped, errmsg)) ||
	    (rc = read_slots(m, s, ns, nreq, errmsg))) {
		free(s);
		ss_model_free(m);
		return rc;
	}
	if (m->cfg.tied)
		m->lm_head = m->embedding;
	fingerprint(m, s, ns);
	free(s);
	/* Nothing points into the files any more unless tensors are mapped. */
	if (!nmapped) {
		ss_checkpoint_close(priv->ckpt);
		priv->ckpt = NULL;
	}
	*out = m;
	return 0;
}

int ss_model_load(ss_model **out, const char *dir, char *errmsg)
{
	return ss_model_load_opts(out, dir, NULL, errmsg);
}

void ss_model_free(ss_model *m)
{
	if (!m)
		return;
	struct model_priv *priv = m->priv;
	if (priv) {
		free(priv->arena);
		ss_checkpoint_close(priv->ckpt);
		free(priv);
	}
	free(m->layers);
	free(m);
}

void ss_model_state_dims(const ss_model *m, ss_state_dims *d)
{
	memset(d, 0, sizeof *d);
	snprintf(d->arch, sizeof d->arch, "%s", m->cfg.arch);
	d->n_layer = m->cfg.n_layer;
	d->nheads = m->cfg.nheads;
	d->headdim = m->cfg.headdim;
	d->d_state = m->cfg.d_state;
	d->conv_dim = m->cfg.conv_dim;
	d->d_conv = m->cfg.d_conv;
}
