/*
 * model.c — random Mamba-2 model directories (see model.h).
 *
 * Each tensor has its own generator stream (xoshiro256** seeded through
 * splitmix64 from seed and the tensor's index), so a tensor's values do not
 * depend on the sizes of the tensors before it. Normals come from Box–Muller
 * in double, cast to f32, then rounded to the storage dtype.
 * ref: tests/fixtures/golden/README.md §2.4 (distributions); safetensors "Format" (file
 * layout); transformers modeling_utils.py (index json).
 */
#include "gen/model.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ss_mkmodel_defaults(ss_mkmodel_opts *o)
{
	memset(o, 0, sizeof *o);
	o->d_model = 64;
	o->n_layer = 2;
	o->d_state = 16;
	o->headdim = 16;
	o->expand = 2;
	o->ngroups = 1;
	o->d_conv = 4;
	o->vocab_size = 50277;
	o->pad_vocab_multiple = 16;
	o->tied = 1;
	o->dtype = SS_DTYPE_F32;
	o->seed = 1;
	o->n_shards = 1;
}

int ss_mkmodel_preset(ss_mkmodel_opts *o, const char *name)
{
	static const struct { const char *name; int d_model, n_layer, d_state, headdim, ngroups; int tied; }
	tab[] = {
		{"t1", 64, 2, 16, 16, 1, 1},
		{"t2", 96, 3, 32, 24, 2, 0},
		{"mamba2-130m", 768, 24, 128, 64, 1, 1},
		{"mamba2-370m", 1024, 48, 128, 64, 1, 1},
		{"mamba2-780m", 1536, 48, 128, 64, 1, 1},
		{"mamba2-1.3b", 2048, 48, 128, 64, 1, 1},
		{"mamba2-2.7b", 2560, 64, 128, 64, 1, 1},
	};
	/* Mamba-1: golden-mamba1's m1 and the state-spaces releases (vocab
	 * 50277 padded to a multiple of 8, tied) */
	static const struct { const char *name; int d_model, n_layer, pad; } tab1[] = {
		{"m1", 64, 2, 16},
		{"mamba-130m", 768, 24, 8},
		{"mamba-370m", 1024, 48, 8},
		{"mamba-790m", 1536, 48, 8},
		{"mamba-1.4b", 2048, 48, 8},
		{"mamba-2.8b", 2560, 64, 8},
	};
	for (size_t i = 0; i < sizeof tab1 / sizeof tab1[0]; i++)
		if (!strcmp(name, tab1[i].name)) {
			o->mamba1 = 1;
			o->dt_rank = 0;
			o->d_model = tab1[i].d_model;
			o->n_layer = tab1[i].n_layer;
			o->d_state = 16;
			o->tied = 1;
			o->expand = 2;
			o->d_conv = 4;
			o->vocab_size = 50277;
			o->pad_vocab_multiple = tab1[i].pad;
			return 0;
		}
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (!strcmp(name, tab[i].name)) {
			o->mamba1 = 0;
			o->d_model = tab[i].d_model;
			o->n_layer = tab[i].n_layer;
			o->d_state = tab[i].d_state;
			o->headdim = tab[i].headdim;
			o->ngroups = tab[i].ngroups;
			o->tied = tab[i].tied;
			o->expand = 2;
			o->d_conv = 4;
			o->vocab_size = 50277;
			o->pad_vocab_multiple = 16;
			return 0;
		}
	return -1;
}

/* ------------------------------------------------------------------ rng */

/* libss's xoshiro256** (ss_rng), one stream per (seed, tensor), and a
 * spare normal deviate. */
typedef struct { ss_rng x; int has; double spare; } rng;

static void rng_seed(rng *r, uint64_t seed, uint64_t stream)
{
	ss_rng_seed(&r->x, seed * 0x9E3779B97F4A7C15ULL ^ (stream + 1) * 0xD1B54A32D192ED03ULL);
	r->has = 0;
}

/* Uniform in (0, 1). */
static double rng_unif(rng *r) { return ((double)(ss_rng_next(&r->x) >> 11) + 0.5) * 0x1p-53; }

static double rng_normal(rng *r)
{
	if (r->has) {
		r->has = 0;
		return r->spare;
	}
	double u = rng_unif(r), v = rng_unif(r), m = sqrt(-2.0 * log(u));
	r->spare = m * sin(2 * M_PI * v);
	r->has = 1;
	return m * cos(2 * M_PI * v);
}

/* -------------------------------------------------------------- tensors */

enum init { I_NORMAL, I_ONEPLUS, I_UNIFORM, I_DTBIAS, I_ALOG, I_ALOG1 };

typedef struct {
	char name[96];
	int ndim;
	int64_t shape[3];
	size_t numel;
	enum init init;
	double a, b;      /* NORMAL: std; UNIFORM: [a, b) */
} tdesc;

static int valid(const ss_mkmodel_opts *o)
{
	int d_inner = o->expand * o->d_model;
	if (o->mamba1)
		return o->d_model > 0 && o->n_layer > 0 && o->d_state > 0 && o->expand > 0 &&
		       o->d_conv >= 2 && o->vocab_size > 0 && o->pad_vocab_multiple > 0 &&
		       o->dt_rank >= 0 && o->n_shards >= 1 &&
		       (o->dtype == SS_DTYPE_F32 || o->dtype == SS_DTYPE_F16 || o->dtype == SS_DTYPE_BF16);
	return o->d_model > 0 && o->n_layer > 0 && o->d_state > 0 && o->headdim > 0 &&
	       o->expand > 0 && o->ngroups > 0 && o->d_conv >= 2 && o->vocab_size > 0 &&
	       o->pad_vocab_multiple > 0 && d_inner % o->headdim == 0 &&
	       (d_inner / o->headdim) % o->ngroups == 0 && o->n_shards >= 1 &&
	       (o->dtype == SS_DTYPE_F32 || o->dtype == SS_DTYPE_F16 || o->dtype == SS_DTYPE_BF16);
}

static int rows(const ss_mkmodel_opts *o)
{
	return (o->vocab_size + o->pad_vocab_multiple - 1) / o->pad_vocab_multiple *
	       o->pad_vocab_multiple;
}

/* The tensor list in file order; *n entries, malloc'ed. */
static tdesc *describe(const ss_mkmodel_opts *o, size_t *n)
{
	int64_t dm = o->d_model, di = (int64_t)o->expand * o->d_model;
	int64_t nh = o->mamba1 ? di : di / o->headdim;
	int64_t R = o->dt_rank ? o->dt_rank : (dm + 15) / 16;
	int64_t conv = di + 2LL * o->ngroups * o->d_state, inp = di + conv + nh;
	size_t cap = 3 + 10 * (size_t)o->n_layer, k = 0;
	tdesc *t = calloc(cap, sizeof *t);
	if (!t)
		return NULL;
#define ADD(nm, nd, s0, s1, s2, in, A, B) do { \
		snprintf(t[k].name, sizeof t[k].name, "%s", nm); \
		t[k].ndim = nd; t[k].shape[0] = s0; t[k].shape[1] = s1; t[k].shape[2] = s2; \
		t[k].numel = (size_t)(s0) * (size_t)((nd) > 1 ? (s1) : 1) * (size_t)((nd) > 2 ? (s2) : 1); \
		t[k].init = in; t[k].a = A; t[k].b = B; k++; } while (0)
	ADD("backbone.embeddings.weight", 2, rows(o), dm, 0, I_NORMAL, 0.02, 0);
	for (int l = 0; l < o->n_layer; l++) {
		char nm[96];
#define L(suffix) (snprintf(nm, sizeof nm, "backbone.layers.%d.%s", l, suffix), nm)
		ADD(L("norm.weight"), 1, dm, 0, 0, I_ONEPLUS, 0.1, 0);
		if (o->mamba1) {
			ADD(L("mixer.in_proj.weight"), 2, 2 * di, dm, 0, I_NORMAL, 1 / sqrt((double)dm), 0);
			ADD(L("mixer.conv1d.weight"), 3, di, 1, o->d_conv, I_UNIFORM, -0.5, 0.5);
			ADD(L("mixer.conv1d.bias"), 1, di, 0, 0, I_UNIFORM, -0.1, 0.1);
			ADD(L("mixer.x_proj.weight"), 2, R + 2LL * o->d_state, di, 0, I_NORMAL,
			    1 / sqrt((double)di), 0);
			ADD(L("mixer.dt_proj.weight"), 2, di, R, 0, I_UNIFORM, -1 / sqrt((double)R),
			    1 / sqrt((double)R));
			ADD(L("mixer.dt_proj.bias"), 1, di, 0, 0, I_DTBIAS, 0, 0);
			ADD(L("mixer.A_log"), 2, di, o->d_state, 0, I_ALOG1, 0, 0);
			ADD(L("mixer.D"), 1, di, 0, 0, I_ONEPLUS, 0.1, 0);
			ADD(L("mixer.out_proj.weight"), 2, dm, di, 0, I_NORMAL, 1 / sqrt((double)di), 0);
			continue;
		}
		ADD(L("mixer.in_proj.weight"), 2, inp, dm, 0, I_NORMAL, 1 / sqrt((double)dm), 0);
		ADD(L("mixer.conv1d.weight"), 3, conv, 1, o->d_conv, I_UNIFORM, -0.5, 0.5);
		ADD(L("mixer.conv1d.bias"), 1, conv, 0, 0, I_UNIFORM, -0.1, 0.1);
		ADD(L("mixer.dt_bias"), 1, nh, 0, 0, I_DTBIAS, 0, 0);
		ADD(L("mixer.A_log"), 1, nh, 0, 0, I_ALOG, 0, 0);
		ADD(L("mixer.D"), 1, nh, 0, 0, I_ONEPLUS, 0.1, 0);
		ADD(L("mixer.norm.weight"), 1, di, 0, 0, I_ONEPLUS, 0.1, 0);
		ADD(L("mixer.out_proj.weight"), 2, dm, di, 0, I_NORMAL, 1 / sqrt((double)di), 0);
#undef L
	}
	ADD("backbone.norm_f.weight", 1, dm, 0, 0, I_ONEPLUS, 0.1, 0);
	if (!o->tied)
		ADD("lm_head.weight", 2, rows(o), dm, 0, I_NORMAL, 0.02, 0);
#undef ADD
	*n = k;
	return t;
}

static void fill(const tdesc *d, size_t idx, const ss_mkmodel_opts *o, float *x, void *tmp)
{
	rng r;
	rng_seed(&r, o->seed, idx);
	for (size_t i = 0; i < d->numel; i++) {
		double v;
		switch (d->init) {
		case I_NORMAL: v = d->a * rng_normal(&r); break;
		case I_ONEPLUS: v = 1 + d->a * rng_normal(&r); break;
		case I_UNIFORM: v = d->a + (d->b - d->a) * rng_unif(&r); break;
		case I_DTBIAS: {
			double dt = exp(log(1e-3) + (log(0.1) - log(1e-3)) * rng_unif(&r));
			v = dt + log(-expm1(-dt));
			break;
		}
		case I_ALOG1: v = log((double)(i % (size_t)d->shape[1] + 1)) - 0.2 + 0.4 * rng_unif(&r); break;
		default: v = log(1 + 15 * rng_unif(&r)); break;
		}
		x[i] = (float)v;
	}
	/* Round to the storage dtype so the visitor sees what the file holds. */
	if (o->dtype != SS_DTYPE_F32) {
		ss_from_f32(tmp, o->dtype, x, d->numel);
		ss_to_f32(x, tmp, o->dtype, d->numel);
	}
}

static size_t max_numel(const tdesc *t, size_t n)
{
	size_t m = 1;
	for (size_t i = 0; i < n; i++)
		if (t[i].numel > m)
			m = t[i].numel;
	return m;
}

int ss_mkmodel_generate(const ss_mkmodel_opts *o, ss_mkmodel_visit visit, void *ctx)
{
	if (!valid(o))
		return SS_ERR_INVALID;
	size_t n;
	tdesc *t = describe(o, &n);
	if (!t)
		return SS_ERR_NOMEM;
	size_t mx = max_numel(t, n);
	float *x = malloc(mx * sizeof *x);
	void *tmp = malloc(mx * 2);
	int rc = x && tmp ? 0 : SS_ERR_NOMEM;
	for (size_t i = 0; i < n && !rc; i++) {
		fill(&t[i], i, o, x, tmp);
		rc = visit(ctx, t[i].name, t[i].ndim, t[i].shape, x, t[i].numel);
	}
	free(x);
	free(tmp);
	free(t);
	return rc;
}

/* --------------------------------------------------------------- writing */

static int errf(char *errmsg, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errmsg, SS_ERRMSG_MAX, fmt, ap);
	va_end(ap);
	return code;
}

static int write_config(const char *dir, const ss_mkmodel_opts *o, char *errmsg)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return errf(errmsg, SS_ERR_IO, "%s: %s", path, strerror(errno));
	int di = o->expand * o->d_model;
	if (o->mamba1) {
		fprintf(f,
		        "{\n  \"architectures\": [\"MambaForCausalLM\"],\n  \"model_type\": \"mamba\",\n"
		        "  \"vocab_size\": %d,\n  \"pad_vocab_size_multiple\": %d,\n  \"hidden_size\": %d,\n"
		        "  \"num_hidden_layers\": %d,\n  \"state_size\": %d,\n  \"expand\": %d,\n"
		        "  \"intermediate_size\": %d,\n  \"conv_kernel\": %d,\n  \"time_step_rank\": %d,\n"
		        "  \"layer_norm_epsilon\": 1e-05,\n  \"residual_in_fp32\": true,\n"
		        "  \"use_bias\": false,\n  \"use_conv_bias\": true,\n  \"hidden_act\": \"silu\",\n"
		        "  \"tie_word_embeddings\": %s,\n"
		        "  \"bos_token_id\": 0,\n  \"eos_token_id\": 0,\n  \"pad_token_id\": 0,\n"
		        "  \"torch_dtype\": \"%s\"\n}\n",
		        o->vocab_size, o->pad_vocab_multiple, o->d_model, o->n_layer, o->d_state,
		        o->expand, di, o->d_conv, o->dt_rank ? o->dt_rank : (o->d_model + 15) / 16,
		        o->tied ? "true" : "false",
		        o->dtype == SS_DTYPE_F32 ? "float32" : o->dtype == SS_DTYPE_F16 ? "float16" : "bfloat16");
		if (fclose(f))
			return errf(errmsg, SS_ERR_IO, "%s: write failed", path);
		return 0;
	}
	fprintf(f,
	        "{\n  \"architectures\": [\"Mamba2ForCausalLM\"],\n  \"model_type\": \"mamba2\",\n"
	        "  \"vocab_size\": %d,\n  \"pad_vocab_size_multiple\": %d,\n  \"hidden_size\": %d,\n"
	        "  \"num_hidden_layers\": %d,\n  \"state_size\": %d,\n  \"expand\": %d,\n"
	        "  \"head_dim\": %d,\n  \"num_heads\": %d,\n  \"n_groups\": %d,\n"
	        "  \"conv_kernel\": %d,\n  \"layer_norm_epsilon\": 1e-05,\n  \"rms_norm\": true,\n"
	        "  \"residual_in_fp32\": true,\n  \"use_bias\": false,\n  \"use_conv_bias\": true,\n"
	        "  \"norm_before_gate\": false,\n  \"hidden_act\": \"silu\",\n"
	        "  \"time_step_limit\": [0.0, Infinity],\n  \"tie_word_embeddings\": %s,\n"
	        "  \"bos_token_id\": 0,\n  \"eos_token_id\": 0,\n  \"pad_token_id\": 0,\n"
	        "  \"torch_dtype\": \"%s\"\n}\n",
	        rows(o), o->pad_vocab_multiple, o->d_model, o->n_layer, o->d_state, o->expand,
	        o->headdim, di / o->headdim, o->ngroups, o->d_conv, o->tied ? "true" : "false",
	        o->dtype == SS_DTYPE_F32 ? "float32" : o->dtype == SS_DTYPE_F16 ? "float16" : "bfloat16");
	if (fclose(f))
		return errf(errmsg, SS_ERR_IO, "%s: write failed", path);
	return 0;
}

/* Header JSON for tensors [a, b), padded with spaces to a multiple of 8. */
static char *header(const tdesc *t, size_t a, size_t b, ss_dtype dt, size_t *len)
{
	ss_tensor_f32 *v = calloc(b - a + 1, sizeof *v);
	if (!v)
		return NULL;
	for (size_t i = a; i < b; i++) {
		v[i - a].name = t[i].name;
		v[i - a].ndim = t[i].ndim;
		for (int d = 0; d < t[i].ndim; d++)
			v[i - a].shape[d] = t[i].shape[d];
	}
	char *h = ss_safetensors_header(v, b - a, dt, len);
	free(v);
	return h;
}

typedef struct {
	const ss_mkmodel_opts *o;
	const char *dir;
	const tdesc *t;
	size_t n, i, nsh;
	size_t *first;     /* [nsh + 1] first tensor of each shard */
	FILE *f;
	char path[4096];
	void *buf;
	char *errmsg;
	int rc;
} writer;

static void shard_name(char *buf, size_t n, const writer *w, size_t s)
{
	if (w->nsh == 1)
		snprintf(buf, n, "model.safetensors");
	else
		snprintf(buf, n, "model-%05zu-of-%05zu.safetensors", s + 1, w->nsh);
}

static int open_shard(writer *w, size_t s)
{
	char nm[64];
	shard_name(nm, sizeof nm, w, s);
	snprintf(w->path, sizeof w->path, "%s/%s", w->dir, nm);
	if (!(w->f = fopen(w->path, "wb")))
		return errf(w->errmsg, SS_ERR_IO, "%s: %s", w->path, strerror(errno));
	size_t len;
	char *h = header(w->t, w->first[s], w->first[s + 1], w->o->dtype, &len);
	if (!h)
		return errf(w->errmsg, SS_ERR_NOMEM, "out of memory");
	uint8_t lb[8];
	for (int i = 0; i < 8; i++)
		lb[i] = (uint8_t)((uint64_t)len >> (8 * i));
	int ok = fwrite(lb, 1, 8, w->f) == 8 && fwrite(h, 1, len, w->f) == len;
	free(h);
	return ok ? 0 : errf(w->errmsg, SS_ERR_IO, "%s: write failed", w->path);
}

static int write_one(void *ctx, const char *name, int ndim, const int64_t *shape, const float *x,
                     size_t n)
{
	writer *w = ctx;
	size_t s = 0;
	while (w->first[s + 1] <= w->i)
		s++;
	if (w->i == w->first[s]) {
		if (w->f && fclose(w->f))
			return errf(w->errmsg, SS_ERR_IO, "%s: write failed", w->path);
		w->f = NULL;
		int rc = open_shard(w, s);
		if (rc)
			return rc;
	}
	w->i++;
	size_t esz = ss_dtype_size(w->o->dtype);
	const void *src = x;
	if (w->o->dtype != SS_DTYPE_F32) {
		ss_from_f32(w->buf, w->o->dtype, x, n);
		src = w->buf;
	}
	if (fwrite(src, esz, n, w->f) != n)
		return errf(w->errmsg, SS_ERR_IO, "%s: %s: write failed", w->path, name);
	return 0;
}

static int write_index(writer *w)
{
	char path[4096], nm[64];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", w->dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return errf(w->errmsg, SS_ERR_IO, "%s: %s", path, strerror(errno));
	uint64_t total = 0;
	for (size_t i = 0; i < w->n; i++)
		total += w->t[i].numel * ss_dtype_size(w->o->dtype);
	fprintf(f, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
	        (unsigned long long)total);
	for (size_t s = 0; s < w->nsh; s++) {
		shard_name(nm, sizeof nm, w, s);
		for (size_t i = w->first[s]; i < w->first[s + 1]; i++)
			fprintf(f, "%s\n    \"%s\": \"%s\"", i ? "," : "", w->t[i].name, nm);
	}
	fprintf(f, "\n  }\n}\n");
	return fclose(f) ? errf(w->errmsg, SS_ERR_IO, "%s: write failed", path) : 0;
}

/* mkdir -p. */
static int mkdirs(const char *dir)
{
	char p[4096];
	size_t n = strlen(dir);
	if (n >= sizeof p) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++)
		if (p[i] == '/' || p[i] == 0) {
			char c = p[i];
			p[i] = 0;
			if (mkdir(p, 0777) && errno != EEXIST)
				return -1;
			p[i] = c;
		}
	return 0;
}

int ss_mkmodel_write(const char *dir, const ss_mkmodel_opts *o, char *errmsg)
{
	if (!valid(o))
		return errf(errmsg, SS_ERR_INVALID, "%s: invalid model shape", dir);
	if (mkdirs(dir))
		return errf(errmsg, SS_ERR_IO, "%s: %s", dir, strerror(errno));
	int rc = write_config(dir, o, errmsg);
	if (rc)
		return rc;
	writer w = {.o = o, .dir = dir, .errmsg = errmsg};
	w.t = describe(o, &w.n);
	if (!w.t)
		return errf(errmsg, SS_ERR_NOMEM, "out of memory");
	w.nsh = (size_t)o->n_shards < w.n ? (size_t)o->n_shards : w.n;
	w.first = calloc(w.nsh + 1, sizeof *w.first);
	w.buf = malloc(max_numel(w.t, w.n) * 2);
	if (!w.first || !w.buf) {
		rc = errf(errmsg, SS_ERR_NOMEM, "out of memory");
	} else {
		for (size_t s = 0; s <= w.nsh; s++)
			w.first[s] = s * w.n / w.nsh;
		rc = ss_mkmodel_generate(o, write_one, &w);
		if (w.f && fclose(w.f) && !rc)
			rc = errf(errmsg, SS_ERR_IO, "%s: write failed", w.path);
		if (!rc && w.nsh > 1)
			rc = write_index(&w);
	}
	free(w.first);
	free(w.buf);
	free((void *)w.t);
	return rc;
}

ss_model *ss_mkmodel_load_temp(const ss_mkmodel_opts *o, const ss_model_opts *lo,
                               const char *name, char dir[4096], char *errmsg)
{
	const char *tmp = getenv("TMPDIR");
	ss_model *m = NULL;
	int err;

	snprintf(dir, 4096, "%s/ss-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(dir)) {
		errf(errmsg, SS_ERR_IO, "%.400s: cannot create", dir);
		return NULL;
	}
	err = ss_mkmodel_write(dir, o, errmsg);
	if (!err)
		err = ss_model_load_opts(&m, dir, lo, errmsg);
	return err ? NULL : m;
}

void ss_mkmodel_remove(const char *dir)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	unlink(path);
	rmdir(dir);
}
