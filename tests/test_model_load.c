/*
 * test_model_load.c — checkpoint loading: golden t1-hf / t1-ss / t2-hf,
 * random-model round trips (f32, f16, bf16, tied, untied, sharded), and
 * every kind of bad input the loader must refuse with a one-line error.
 *
 * Golden values are checked against the raw file bytes at the offsets listed
 * in golden/manifest.json ("model_files"), read and widened here by code
 * independent of the loader. Two programs from this file: test_model_load
 * (golden t1-hf from $SS_FIXTURES, tests/fixtures; everything else) and
 * test_shared_model_load (SS_TEST_SHARED: golden t1-ss and t2-hf, which only
 * $SS_SHARED has; exits 77 without it).
 * ref: tests/fixtures/golden/README.md §2; safetensors "Format"; torch/serialization.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ss.h"
#include "model/pickle.h"
#include "gen/model.h"

#ifndef SS_TEST_SHARED
#define SS_TEST_SHARED 0
#endif

#include <archive.h>
#include <archive_entry.h>
#include <cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char golden[4096];   /* $SS_FIXTURES/golden (or $SS_SHARED/golden: SS_TEST_SHARED) */
static char tmproot[4096];

/* ---------------------------------------------------------------- helpers */

static char *path2(const char *a, const char *b)
{
	static char buf[4][4096];
	static int k;
	char *p = buf[k++ & 3];
	if (snprintf(p, 4096, "%s/%s", a, b) >= 4096)
		fail_msg("path too long");
	return p;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	buf[n] = 0;
	*len = (size_t)n;
	return buf;
}

static void put(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void puts_file(const char *path, const char *text) { put(path, text, strlen(text)); }

static void copy_file(const char *from, const char *to)
{
	size_t n;
	char *b = slurp(from, &n);
	put(to, b, n);
	free(b);
}

/* A fresh directory under the test's temporary root. */
static const char *newdir(const char *name)
{
	static char buf[8][4096];
	static int k;
	char *p = buf[k++ & 7];
	if (snprintf(p, 4096, "%s/%s", tmproot, name) >= 4096)
		fail_msg("path too long");
	assert_int_equal(mkdir(p, 0777), 0);
	return p;
}

static int rm1(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

/* Small random model (fast to write and load) into a new directory. */
static const char *small_model(const char *name, ss_dtype dt, int tied, int shards)
{
	const char *dir = newdir(name);
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.d_model = 32;
	o.n_layer = 2;
	o.d_state = 8;
	o.headdim = 8;
	o.ngroups = 2;
	o.vocab_size = 100;
	o.pad_vocab_multiple = 16;
	o.tied = tied;
	o.dtype = dt;
	o.seed = 7;
	o.n_shards = shards;
	char err[SS_ERRMSG_MAX];
	int rc = ss_mkmodel_write(dir, &o, err);
	if (rc)
		fail_msg("mkmodel: %s", err);
	return dir;
}

/* A copy of the model's array for a checkpoint tensor name, widened to f32
 * (the four matrices are in m->weights_dtype), and its length. Caller frees. */
static float *widened(const void *p, ss_dtype t, size_t n)
{
	float *x = malloc(n * sizeof *x + 1);
	assert_non_null(x);
	ss_to_f32(x, p, t, n);
	return x;
}

static const float *model_array(const ss_model *m, const char *name, size_t *n);

static float *model_tensor(const ss_model *m, const char *name, size_t *n)
{
	const ss_model_config *c = &m->cfg;
	size_t V = (size_t)c->vocab_padded, D = (size_t)c->d_model;
	const ss_layer *L = NULL;
	int l, off;
	if (!strcmp(name, "backbone.embeddings.weight") || !strcmp(name, "backbone.embedding.weight"))
		return *n = V * D, widened(m->embedding, m->weights_dtype, *n);
	if (!strcmp(name, "lm_head.weight"))
		return m->lm_head ? (*n = V * D, widened(m->lm_head, m->weights_dtype, *n)) : NULL;
	if (sscanf(name, "backbone.layers.%d.%n", &l, &off) == 1 && l >= 0 && l < c->n_layer)
		L = &m->layers[l];
	if (L && !strcmp(name + off, "mixer.in_proj.weight"))
		return *n = (size_t)c->d_in_proj * D, widened(L->in_proj, m->weights_dtype, *n);
	if (L && !strcmp(name + off, "mixer.out_proj.weight"))
		return *n = D * (size_t)c->d_inner, widened(L->out_proj, m->weights_dtype, *n);
	const float *x = model_array(m, name, n);
	return x ? widened(x, SS_DTYPE_F32, *n) : NULL;
}

/* The model's f32 array for a checkpoint tensor name other than the four
 * matrices, and its length. */
static const float *model_array(const ss_model *m, const char *name, size_t *n)
{
	const ss_model_config *c = &m->cfg;
	size_t D = (size_t)c->d_model;
	if (!strcmp(name, "backbone.norm_f.weight"))
		return *n = D, m->norm_f;
	int l, off;
	if (sscanf(name, "backbone.layers.%d.%n", &l, &off) != 1 || l < 0 || l >= c->n_layer)
		return NULL;
	const ss_layer *L = &m->layers[l];
	const char *s = name + off;
	if (!strcmp(s, "norm.weight")) return *n = D, L->norm;
	if (!strcmp(s, "mixer.conv1d.weight")) return *n = (size_t)c->conv_dim * (size_t)c->d_conv, L->conv_w;
	if (!strcmp(s, "mixer.conv1d.bias")) return *n = (size_t)c->conv_dim, L->conv_b;
	if (!strcmp(s, "mixer.dt_bias")) return *n = (size_t)c->nheads, L->dt_bias;
	if (!strcmp(s, "mixer.A_log"))
		return *n = (size_t)c->nheads * (ss_model_is_mamba1(c) ? (size_t)c->d_state : 1), L->A_log;
	if (!strcmp(s, "mixer.x_proj.weight"))
		return *n = (size_t)(c->dt_rank + 2 * c->d_state) * (size_t)c->d_inner, L->x_proj;
	if (!strcmp(s, "mixer.dt_proj.weight")) return *n = (size_t)c->d_inner * (size_t)c->dt_rank, L->dt_proj;
	if (!strcmp(s, "mixer.dt_proj.bias")) return *n = (size_t)c->d_inner, L->dt_bias;
	if (!strcmp(s, "mixer.D")) return *n = (size_t)c->nheads, L->D;
	if (!strcmp(s, "mixer.norm.weight")) return *n = (size_t)c->d_inner, L->gnorm;
	return NULL;
}

static int is_hex16(const char *s)
{
	if (strlen(s) != 16)
		return 0;
	for (; *s; s++)
		if (!strchr("0123456789abcdef", *s))
			return 0;
	return 1;
}

static ss_model *load_ok(const char *dir, unsigned flags)
{
	ss_model *m = NULL;
	char err[SS_ERRMSG_MAX] = "";
	ss_model_opts o = {.flags = flags};
	int rc = ss_model_load_opts(&m, dir, &o, err);
	if (rc)
		fail_msg("load %s: %d %s", dir, rc, err);
	assert_non_null(m);
	assert_true(is_hex16(m->fingerprint));
	return m;
}

/* Expects loading dir to fail with code; the message must be one line and
 * contain each of the given substrings (NULL-terminated). */
static void load_fails(const char *dir, int code, ...)
{
	ss_model *m = (ss_model *)1;
	char err[SS_ERRMSG_MAX] = "";
	int rc = ss_model_load(&m, dir, err);
	if (rc != code)
		fail_msg("load %s: got %d (%s), want %d", dir, rc, err, code);
	assert_null(m);
	assert_null(strchr(err, '\n'));
	va_list ap;
	va_start(ap, code);
	for (const char *s; (s = va_arg(ap, const char *));)
		if (!strstr(err, s))
			fail_msg("message \"%s\" lacks \"%s\"", err, s);
	va_end(ap);
}

/* ----------------------------------------------------------------- golden */

static cJSON *manifest_files(cJSON **root, const char *model, const char *file)
{
	size_t n;
	char *text = slurp(path2(golden, "manifest.json"), &n);
	*root = cJSON_Parse(text);
	free(text);
	assert_non_null(*root);
	cJSON *mf = cJSON_GetObjectItem(cJSON_GetObjectItem(*root, "model_files"), model);
	cJSON *f = cJSON_GetObjectItem(mf, file);
	assert_non_null(f);
	return f;
}

/* Every tensor of a golden safetensors equals the raw bytes at the
 * manifest's offsets, widened here (F32 as is, BF16 as u16 << 16). */
static void check_against_manifest(const ss_model *m, const char *model)
{
	cJSON *root;
	cJSON *f = manifest_files(&root, model, "model.safetensors");
	int64_t data0 = 8 + (int64_t)cJSON_GetObjectItem(f, "header_bytes")->valuedouble;
	char dir[4096];
	snprintf(dir, sizeof dir, "models/%s/model.safetensors", model);
	size_t flen;
	uint8_t *file = (uint8_t *)slurp(path2(golden, dir), &flen);
	int count = 0;
	for (cJSON *t = cJSON_GetObjectItem(f, "tensors")->child; t; t = t->next, count++) {
		const char *dt = cJSON_GetObjectItem(t, "dtype")->valuestring;
		cJSON *of = cJSON_GetObjectItem(t, "data_offsets");
		int64_t b = (int64_t)cJSON_GetArrayItem(of, 0)->valuedouble;
		int64_t e = (int64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
		size_t esz = !strcmp(dt, "F32") ? 4 : 2, n = (size_t)(e - b) / esz, got = 0;
		assert_true((size_t)(data0 + e) <= flen);
		float *x = model_tensor(m, t->string, &got);
		if (!x)
			fail_msg("%s: no model tensor for %s", model, t->string);
		assert_int_equal(got, n);
		for (size_t i = 0; i < n; i++) {
			const uint8_t *p = file + data0 + b + i * esz;
			uint32_t u = esz == 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			                            (uint32_t)p[3] << 24
			                      : ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
			uint32_t v;
			memcpy(&v, &x[i], 4);
			if (u != v)
				fail_msg("%s %s[%zu]: 0x%08x, file 0x%08x", model, t->string, i, v, u);
		}
		free(x);
	}
	assert_int_equal(count, m->cfg.tied ? 2 + 9 * m->cfg.n_layer : 3 + 9 * m->cfg.n_layer);
	free(file);
	cJSON_Delete(root);
}

static void check_t1_config(const ss_model_config *c)
{
	assert_string_equal(c->arch, "mamba2");
	assert_int_equal(c->d_model, 64);
	assert_int_equal(c->n_layer, 2);
	assert_int_equal(c->d_state, 16);
	assert_int_equal(c->headdim, 16);
	assert_int_equal(c->nheads, 8);
	assert_int_equal(c->ngroups, 1);
	assert_int_equal(c->d_conv, 4);
	assert_int_equal(c->expand, 2);
	assert_int_equal(c->d_inner, 128);
	assert_int_equal(c->conv_dim, 160);
	assert_int_equal(c->d_in_proj, 296);
	assert_int_equal(c->vocab_padded, 50288);
	assert_true(c->tied);
	assert_true(c->eps == 1e-5f);
	assert_true(c->dt_min == 0.0f && isinf(c->dt_max));
	assert_int_equal(c->eos_token_id, 0);
}

static void test_golden_t1_hf(void **state)
{
	(void)state;
	ss_model *m = load_ok(path2(golden, "models/t1-hf"), 0);
	check_t1_config(&m->cfg);
	assert_int_equal(m->cfg.vocab_size, 50288);
	assert_int_equal(m->ckpt_dtype, SS_DTYPE_F32);
	assert_ptr_equal(m->lm_head, m->embedding);
	check_against_manifest(m, "t1-hf");
	ss_state_dims d;
	ss_model_state_dims(m, &d);
	assert_string_equal(d.arch, "mamba2");
	assert_int_equal(d.n_layer, 2);
	assert_int_equal(d.nheads, 8);
	assert_int_equal(d.headdim, 16);
	assert_int_equal(d.d_state, 16);
	assert_int_equal(d.conv_dim, 160);
	assert_int_equal(d.d_conv, 4);

	/* Copying instead of mapping changes nothing. */
	ss_model *c = load_ok(path2(golden, "models/t1-hf"), SS_MODEL_NO_MMAP);
	assert_string_equal(c->fingerprint, m->fingerprint);
	check_against_manifest(c, "t1-hf");
	ss_model_free(c);
	ss_model_free(m);
}

static const char *const t1_names[] = {
	"backbone.embeddings.weight", "backbone.norm_f.weight",
	"backbone.layers.0.norm.weight", "backbone.layers.0.mixer.in_proj.weight",
	"backbone.layers.0.mixer.conv1d.weight", "backbone.layers.0.mixer.conv1d.bias",
	"backbone.layers.0.mixer.dt_bias", "backbone.layers.0.mixer.A_log",
	"backbone.layers.0.mixer.D", "backbone.layers.0.mixer.norm.weight",
	"backbone.layers.0.mixer.out_proj.weight",
	"backbone.layers.1.norm.weight", "backbone.layers.1.mixer.in_proj.weight",
	"backbone.layers.1.mixer.conv1d.weight", "backbone.layers.1.mixer.conv1d.bias",
	"backbone.layers.1.mixer.dt_bias", "backbone.layers.1.mixer.A_log",
	"backbone.layers.1.mixer.D", "backbone.layers.1.mixer.norm.weight",
	"backbone.layers.1.mixer.out_proj.weight",
};

static void test_golden_t1_ss(void **state)
{
	(void)state;
	ss_model *ss = load_ok(path2(golden, "models/t1-ss"), 0);
	ss_model *hf = load_ok(path2(golden, "models/t1-hf"), 0);
	check_t1_config(&ss->cfg);
	assert_int_equal(ss->cfg.vocab_size, 50277);
	assert_ptr_equal(ss->lm_head, ss->embedding);
	for (size_t i = 0; i < sizeof t1_names / sizeof t1_names[0]; i++) {
		size_t na = 0, nb = 0;
		float *a = model_tensor(ss, t1_names[i], &na);
		float *b = model_tensor(hf, t1_names[i], &nb);
		assert_non_null(a);
		assert_non_null(b);
		assert_int_equal(na, nb);
		if (memcmp(a, b, na * sizeof *a))
			fail_msg("t1-ss %s differs from t1-hf", t1_names[i]);
		free(a);
		free(b);
	}
	assert_string_equal(ss->fingerprint, hf->fingerprint);
	ss_model_free(ss);
	ss_model_free(hf);
}

static void test_golden_t2_hf(void **state)
{
	(void)state;
	ss_model *m = load_ok(path2(golden, "models/t2-hf"), 0);
	const ss_model_config *c = &m->cfg;
	assert_int_equal(c->d_model, 96);
	assert_int_equal(c->n_layer, 3);
	assert_int_equal(c->d_state, 32);
	assert_int_equal(c->headdim, 24);
	assert_int_equal(c->nheads, 8);
	assert_int_equal(c->ngroups, 2);
	assert_int_equal(c->d_inner, 192);
	assert_int_equal(c->conv_dim, 320);
	assert_int_equal(c->d_in_proj, 520);
	assert_int_equal(c->vocab_padded, 50288);
	assert_false(c->tied);
	assert_int_equal(m->ckpt_dtype, SS_DTYPE_BF16);
	assert_non_null(m->lm_head);
	assert_ptr_not_equal(m->lm_head, m->embedding);
	check_against_manifest(m, "t2-hf");

	ss_model *t1 = load_ok(path2(golden, "models/t1-hf"), 0);
	assert_string_not_equal(m->fingerprint, t1->fingerprint);
	ss_model_free(t1);

	/* Skipping the untied lm_head keeps the fingerprint. */
	ss_model *s = load_ok(path2(golden, "models/t2-hf"), SS_MODEL_SKIP_LM_HEAD);
	assert_null(s->lm_head);
	assert_non_null(s->embedding);
	assert_string_equal(s->fingerprint, m->fingerprint);
	ss_model_free(s);
	ss_model_free(m);
}

/* A torch zip whose pickle is fine but whose archive is cut short. */
static void test_golden_t1_ss_truncated(void **state)
{
	(void)state;
	const char *dir = newdir("t1-ss-trunc");
	copy_file(path2(golden, "models/t1-ss/config.json"), path2(dir, "config.json"));
	size_t n;
	char *b = slurp(path2(golden, "models/t1-ss/pytorch_model.bin"), &n);
	put(path2(dir, "pytorch_model.bin"), b, n / 2);
	free(b);
	ss_model *m = (ss_model *)1;
	char err[SS_ERRMSG_MAX] = "";
	int rc = ss_model_load(&m, dir, err);
	assert_int_equal(rc, SS_ERR_TRUNCATED);
	assert_null(m);
	assert_non_null(strstr(err, "pytorch_model.bin"));
	assert_non_null(strstr(err, "truncated"));
}

/* ------------------------------------------------------------- round trip */

typedef struct {
	const ss_model *m;
	int count;
} rt_ctx;

static int rt_visit(void *ctx, const char *name, int ndim, const int64_t *shape, const float *x,
                    size_t n)
{
	(void)ndim, (void)shape;
	rt_ctx *r = ctx;
	size_t got = 0;
	float *y = model_tensor(r->m, name, &got);
	if (!y)
		fail_msg("no model tensor for %s", name);
	assert_int_equal(got, n);
	if (memcmp(x, y, n * sizeof *x))
		fail_msg("%s differs after the round trip", name);
	free(y);
	r->count++;
	return 0;
}

static void round_trip(const char *name, ss_dtype dt, int tied, int shards, char *fp_out)
{
	const char *dir = small_model(name, dt, tied, shards);
	ss_model *m = load_ok(dir, 0);
	assert_int_equal(m->ckpt_dtype, dt);
	assert_int_equal(m->cfg.vocab_padded, 112);
	assert_int_equal(m->cfg.ngroups, 2);
	assert_int_equal(m->cfg.tied, tied);
	assert_true(isinf(m->cfg.dt_max)); /* mkmodel writes [0.0, Infinity] */
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.d_model = 32, o.n_layer = 2, o.d_state = 8, o.headdim = 8, o.ngroups = 2;
	o.vocab_size = 100, o.tied = tied, o.dtype = dt, o.seed = 7, o.n_shards = shards;
	rt_ctx r = {m, 0};
	assert_int_equal(ss_mkmodel_generate(&o, rt_visit, &r), 0);
	assert_int_equal(r.count, 2 + 9 * 2 + !tied);
	strcpy(fp_out, m->fingerprint);
	ss_model_free(m);
	/* Without the lm_head (state extraction) and without mmap: same hash. */
	m = load_ok(dir, SS_MODEL_SKIP_LM_HEAD | SS_MODEL_NO_MMAP);
	assert_string_equal(m->fingerprint, fp_out);
	if (tied)
		assert_ptr_equal(m->lm_head, m->embedding);
	else
		assert_null(m->lm_head);
	ss_model_free(m);
}

static void test_round_trip(void **state)
{
	(void)state;
	char f32[32], f16[32], bf16[32], f32u[32], sh2[32], sh3u[32];
	round_trip("rt-f32", SS_DTYPE_F32, 1, 1, f32);
	round_trip("rt-f16", SS_DTYPE_F16, 1, 1, f16);
	round_trip("rt-bf16", SS_DTYPE_BF16, 1, 1, bf16);
	round_trip("rt-f32-untied", SS_DTYPE_F32, 0, 1, f32u);
	round_trip("rt-f32-2shards", SS_DTYPE_F32, 1, 2, sh2);
	round_trip("rt-bf16-3shards-untied", SS_DTYPE_BF16, 0, 3, sh3u);
	/* Same weights in another layout: same fingerprint; different weights
	 * (rounding, an extra lm_head): different. */
	assert_string_equal(sh2, f32);
	assert_string_not_equal(f32, f16);
	assert_string_not_equal(f32, bf16);
	assert_string_not_equal(f16, bf16);
	assert_string_not_equal(f32, f32u);
	assert_string_not_equal(sh3u, bf16);
}

/* Mamba-1, generated (d_model 32, d_state 8, dt_rank auto = 2, vocab 100
 * padded to a multiple of 8 = 104): every tensor read back exactly in each
 * dtype, tied and untied; the state-spaces config style on the same weights
 * gives the same model and fingerprint. */
static void m1_round_trip(const char *name, ss_dtype dt, int tied, char *fp_out)
{
	const char *dir = newdir(name);
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.mamba1 = 1, o.d_model = 32, o.n_layer = 2, o.d_state = 8, o.vocab_size = 100;
	o.pad_vocab_multiple = 8, o.tied = tied, o.dtype = dt, o.seed = 11;
	char err[SS_ERRMSG_MAX];
	if (ss_mkmodel_write(dir, &o, err))
		fail_msg("mkmodel: %s", err);
	ss_model *m = load_ok(dir, 0);
	const ss_model_config *c = &m->cfg;
	assert_true(ss_model_is_mamba1(c));
	assert_string_equal(c->arch, "mamba1");
	assert_int_equal(m->ckpt_dtype, dt);
	assert_int_equal(c->vocab_size, 100);
	assert_int_equal(c->vocab_padded, 104);
	assert_int_equal(c->d_inner, 64);
	assert_int_equal(c->nheads, 64);
	assert_int_equal(c->headdim, 1);
	assert_int_equal(c->conv_dim, 64);
	assert_int_equal(c->d_in_proj, 128);
	assert_int_equal(c->dt_rank, 2);
	assert_int_equal(c->tied, tied);
	assert_null(m->layers[0].gnorm);
	rt_ctx r = {m, 0};
	assert_int_equal(ss_mkmodel_generate(&o, rt_visit, &r), 0);
	assert_int_equal(r.count, 2 + 10 * 2 + !tied);
	strcpy(fp_out, m->fingerprint);
	ss_state_dims d;
	ss_model_state_dims(m, &d);
	assert_string_equal(d.arch, "mamba1");
	assert_int_equal(ss_state_logdecay_len(&d), 2 * 64 * 8);
	ss_model_free(m);

	char cfg[512];
	snprintf(cfg, sizeof cfg,
	         "{\"d_model\": 32, \"d_intermediate\": 0, \"n_layer\": 2, \"vocab_size\": 100, "
	         "\"ssm_cfg\": {\"d_state\": 8}, \"rms_norm\": true, \"pad_vocab_size_multiple\": 8, "
	         "\"tie_embeddings\": %s}", tied ? "true" : "false");
	puts_file(path2(dir, "config.json"), cfg);
	m = load_ok(dir, 0);
	assert_string_equal(m->cfg.arch, "mamba1");
	assert_int_equal(m->cfg.vocab_padded, 104);
	assert_int_equal(m->cfg.dt_rank, 2);
	assert_string_equal(m->fingerprint, fp_out);
	ss_model_free(m);
}

static void test_mamba1_round_trip(void **state)
{
	(void)state;
	char f32[32], f16[32], bf16[32], bf16u[32];
	m1_round_trip("m1-f32", SS_DTYPE_F32, 1, f32);
	m1_round_trip("m1-f16", SS_DTYPE_F16, 1, f16);
	m1_round_trip("m1-bf16", SS_DTYPE_BF16, 1, bf16);
	m1_round_trip("m1-bf16-untied", SS_DTYPE_BF16, 0, bf16u);
	assert_string_not_equal(f32, f16);
	assert_string_not_equal(f32, bf16);
	assert_string_not_equal(bf16, bf16u);
}

/* golden-mamba1's m1 in the state-spaces layout (pytorch_model.bin, lm_head
 * sharing the embedding's storage, pad 16) equals its HF layout bit for
 * bit, tensor by tensor, with the same fingerprint. */
static void test_golden_m1_ss(void **state)
{
	(void)state;
	static const char *const suffix[] = {
		"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
		"mixer.x_proj.weight", "mixer.dt_proj.weight", "mixer.dt_proj.bias", "mixer.A_log",
		"mixer.D", "mixer.out_proj.weight",
	};
	ss_model *ss = load_ok(path2(golden, "../golden-mamba1/models/m1-ss"), 0);
	ss_model *hf = load_ok(path2(golden, "../golden-mamba1/models/m1-hf"), 0);
	for (int k = 0; k < 2; k++) {
		const ss_model_config *c = k ? &hf->cfg : &ss->cfg;
		assert_string_equal(c->arch, "mamba1");
		assert_int_equal(c->d_model, 64);
		assert_int_equal(c->n_layer, 2);
		assert_int_equal(c->d_state, 16);
		assert_int_equal(c->d_inner, 128);
		assert_int_equal(c->dt_rank, 4);
		assert_int_equal(c->d_conv, 4);
		assert_int_equal(c->vocab_padded, 50288);
		assert_true(c->tied);
	}
	assert_int_equal(ss->cfg.vocab_size, 50277);
	assert_ptr_equal(ss->lm_head, ss->embedding);
	char name[128];
	for (int i = -2; i < 2 * 10; i++) {
		if (i < 0)
			snprintf(name, sizeof name, "%s", i == -2 ? "backbone.embeddings.weight" : "backbone.norm_f.weight");
		else
			snprintf(name, sizeof name, "backbone.layers.%d.%s", i / 10, suffix[i % 10]);
		size_t na = 0, nb = 0;
		float *a = model_tensor(ss, name, &na);
		float *b = model_tensor(hf, name, &nb);
		assert_non_null(a);
		assert_non_null(b);
		assert_int_equal(na, nb);
		if (memcmp(a, b, na * sizeof *a))
			fail_msg("m1-ss %s differs from m1-hf", name);
		free(a);
		free(b);
	}
	assert_string_equal(ss->fingerprint, hf->fingerprint);
	/* a Mamba-2 model's fingerprint differs */
	ss_model *t1 = load_ok(path2(golden, "models/t1-hf"), 0);
	assert_string_not_equal(t1->fingerprint, hf->fingerprint);
	ss_model_free(t1);
	ss_model_free(ss);
	ss_model_free(hf);
}

/* Same shape, different seed → different fingerprint; same seed → same. */
static void test_fingerprint_seed(void **state)
{
	(void)state;
	char err[SS_ERRMSG_MAX];
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.vocab_size = 64;
	o.d_model = 16;
	o.d_state = 4;
	o.headdim = 8;
	const char *a = newdir("seed-a"), *b = newdir("seed-b"), *c = newdir("seed-c");
	assert_int_equal(ss_mkmodel_write(a, &o, err), 0);
	assert_int_equal(ss_mkmodel_write(b, &o, err), 0);
	o.seed = 2;
	assert_int_equal(ss_mkmodel_write(c, &o, err), 0);
	ss_model *ma = load_ok(a, 0), *mb = load_ok(b, SS_MODEL_NO_MMAP), *mc = load_ok(c, 0);
	assert_string_equal(ma->fingerprint, mb->fingerprint);
	assert_string_not_equal(ma->fingerprint, mc->fingerprint);
	ss_model_free(ma);
	ss_model_free(mb);
	ss_model_free(mc);
}

/* ------------------------------------------------------ safetensors edits */

/* Rewrites dir/model.safetensors with its header JSON replaced by edit(root)
 * (data bytes kept as they are). */
static void rewrite_header(const char *dir, void (*edit)(cJSON *root))
{
	const char *p = path2(dir, "model.safetensors");
	size_t n;
	uint8_t *b = (uint8_t *)slurp(p, &n);
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | b[i];
	cJSON *root = cJSON_ParseWithLength((char *)b + 8, hl);
	assert_non_null(root);
	edit(root);
	char *h = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	size_t nh = strlen(h), padded = (nh + 7) / 8 * 8;
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	uint8_t lb[8];
	for (int i = 0; i < 8; i++)
		lb[i] = (uint8_t)(padded >> (8 * i));
	fwrite(lb, 1, 8, f);
	fwrite(h, 1, nh, f);
	for (size_t i = nh; i < padded; i++)
		fputc(' ', f);
	fwrite(b + 8 + hl, 1, n - 8 - hl, f);
	assert_int_equal(fclose(f), 0);
	free(h);
	free(b);
}

static cJSON *entry(cJSON *root, const char *name)
{
	cJSON *e = cJSON_GetObjectItem(root, name);
	assert_non_null(e);
	return e;
}

static void edit_overrun(cJSON *root)
{
	cJSON *of = cJSON_GetObjectItem(entry(root, "backbone.norm_f.weight"), "data_offsets");
	double b = cJSON_GetArrayItem(of, 0)->valuedouble + 1e6;
	cJSON_SetNumberValue(cJSON_GetArrayItem(of, 0), b);
	cJSON_SetNumberValue(cJSON_GetArrayItem(of, 1), b + 32 * 4);
}

static void edit_size(cJSON *root)
{
	cJSON *of = cJSON_GetObjectItem(entry(root, "backbone.layers.0.mixer.D"), "data_offsets");
	cJSON_SetNumberValue(cJSON_GetArrayItem(of, 1), cJSON_GetArrayItem(of, 1)->valuedouble - 4);
}

static void edit_unknown_dtype(cJSON *root)
{
	cJSON_ReplaceItemInObject(entry(root, "backbone.layers.1.mixer.A_log"), "dtype",
	                          cJSON_CreateString("Q7"));
}

static void edit_int_dtype(cJSON *root)
{
	cJSON_ReplaceItemInObject(entry(root, "backbone.layers.1.mixer.A_log"), "dtype",
	                          cJSON_CreateString("I32"));
}

static void edit_drop_tensor(cJSON *root)
{
	cJSON_DeleteItemFromObject(root, "backbone.layers.1.mixer.D");
}

static void edit_shape(cJSON *root)
{
	cJSON *sh = cJSON_GetObjectItem(entry(root, "backbone.layers.1.mixer.conv1d.weight"), "shape");
	/* [conv_dim,1,4] → [conv_dim,4,1]: same bytes, wrong shape */
	cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 1), 4);
	cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 2), 1);
}

static void test_bad_safetensors(void **state)
{
	(void)state;
	const char *d;

	d = small_model("bad-overrun", SS_DTYPE_F32, 1, 1);
	rewrite_header(d, edit_overrun);
	load_fails(d, SS_ERR_TRUNCATED, "model.safetensors", "backbone.norm_f.weight", "overrun", NULL);

	d = small_model("bad-size", SS_DTYPE_F32, 1, 1);
	rewrite_header(d, edit_size);
	load_fails(d, SS_ERR_FORMAT, "model.safetensors", "backbone.layers.0.mixer.D", NULL);

	d = small_model("bad-dtype", SS_DTYPE_F32, 1, 1);
	rewrite_header(d, edit_unknown_dtype);
	load_fails(d, SS_ERR_FORMAT, "backbone.layers.1.mixer.A_log", "unknown dtype", NULL);

	d = small_model("bad-int-dtype", SS_DTYPE_F32, 1, 1);
	rewrite_header(d, edit_int_dtype);
	load_fails(d, SS_ERR_UNSUPPORTED, "backbone.layers.1.mixer.A_log", "I32", NULL);

	d = small_model("bad-missing", SS_DTYPE_BF16, 1, 1);
	rewrite_header(d, edit_drop_tensor);
	load_fails(d, SS_ERR_NOTFOUND, "model.safetensors", "missing tensor backbone.layers.1.mixer.D",
	           NULL);

	d = small_model("bad-shape", SS_DTYPE_F16, 1, 1);
	rewrite_header(d, edit_shape);
	load_fails(d, SS_ERR_MISMATCH,
	           "model.safetensors: backbone.layers.1.mixer.conv1d.weight: shape [96,4,1], "
	           "expected [96,1,4]", NULL);

	/* Truncated data: the last tensor now overruns the file. */
	d = small_model("bad-trunc", SS_DTYPE_F32, 1, 1);
	const char *p = path2(d, "model.safetensors");
	struct stat sb;
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(truncate(p, sb.st_size - 10), 0);
	load_fails(d, SS_ERR_TRUNCATED, "model.safetensors", "backbone.norm_f.weight", NULL);

	/* Absurd header lengths. */
	uint8_t hdr[16] = {0};
	d = newdir("bad-hlen-huge");
	copy_file(path2(small_model("hlen-src", SS_DTYPE_F32, 1, 1), "config.json"),
	          path2(d, "config.json"));
	hdr[5] = 1; /* 2^40 */
	put(path2(d, "model.safetensors"), hdr, sizeof hdr);
	load_fails(d, SS_ERR_TOO_LARGE, "model.safetensors", "header length", NULL);
	hdr[5] = 0;
	hdr[1] = 1; /* 256 > file size */
	put(path2(d, "model.safetensors"), hdr, sizeof hdr);
	load_fails(d, SS_ERR_TRUNCATED, "model.safetensors", "exceeds the file size", NULL);
	put(path2(d, "model.safetensors"), hdr, 5);
	load_fails(d, SS_ERR_TRUNCATED, "model.safetensors", NULL);

	/* Malformed header JSON. */
	static const char bad_json[] = "\x10\0\0\0\0\0\0\0{\"a\": [1, 2,,   ";
	put(path2(d, "model.safetensors"), bad_json, sizeof bad_json - 1);
	load_fails(d, SS_ERR_FORMAT, "model.safetensors", "JSON", NULL);
	static const char not_entry[] = "\x10\0\0\0\0\0\0\0{\"a\": [1, 2]}   ";
	put(path2(d, "model.safetensors"), not_entry, sizeof not_entry - 1);
	load_fails(d, SS_ERR_FORMAT, "model.safetensors", "a: header entry", NULL);
}

static void test_bad_shards(void **state)
{
	(void)state;
	const char *d = small_model("bad-shard", SS_DTYPE_F32, 0, 2);
	assert_int_equal(remove(path2(d, "model-00002-of-00002.safetensors")), 0);
	load_fails(d, SS_ERR_NOTFOUND, "model-00002-of-00002.safetensors", NULL);

	d = small_model("bad-index", SS_DTYPE_F32, 0, 2);
	puts_file(path2(d, "model.safetensors.index.json"), "{\"weight_map\": [}");
	load_fails(d, SS_ERR_FORMAT, "model.safetensors.index.json", NULL);
	puts_file(path2(d, "model.safetensors.index.json"),
	          "{\"weight_map\": {\"lm_head.weight\": \"../../etc/passwd\"}}");
	load_fails(d, SS_ERR_FORMAT, "lm_head.weight", "bad shard file name", NULL);
}

/* ------------------------------------------------------------------ config */

static void with_config_file(const char *name, const char *config, int code, const char *file,
                             const char *want)
{
	const char *d = small_model(name, SS_DTYPE_F32, 1, 1);
	puts_file(path2(d, "config.json"), config);
	load_fails(d, code, file, want, NULL);
}

static void with_config(const char *name, const char *config, int code, const char *want)
{
	with_config_file(name, config, code, "config.json", want);
}

static void test_bad_config(void **state)
{
	(void)state;
	const char *d = small_model("cfg-missing", SS_DTYPE_F32, 1, 1);
	assert_int_equal(remove(path2(d, "config.json")), 0);
	load_fails(d, SS_ERR_NOTFOUND, "config.json", NULL);

	with_config("cfg-json", "{\"model_type\": \"mamba2\", \"hidden_size\": 32,,}", SS_ERR_FORMAT,
	            "malformed JSON");
	with_config("cfg-falcon", "{\"model_type\": \"falcon_mamba\", \"hidden_size\": 768}",
	            SS_ERR_UNSUPPORTED, "not supported");
	with_config("cfg-mamba1-hf-nolayers", "{\"model_type\": \"mamba\", \"hidden_size\": 768}",
	            SS_ERR_FORMAT, "num_hidden_layers");
	with_config("cfg-jamba", "{\"model_type\": \"jamba\"}", SS_ERR_UNSUPPORTED, "not supported");
	with_config("cfg-mamba3-ss",
	            "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"ssm_cfg\": {\"layer\": "
	            "\"Mamba3\"}}",
	            SS_ERR_UNSUPPORTED, "ssm_cfg.layer");
	with_config("cfg-mamba1-ss-bias",
	            "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"ssm_cfg\": {\"layer\": "
	            "\"Mamba1\", \"bias\": true}}",
	            SS_ERR_UNSUPPORTED, "bias");
	/* A Mamba-1 config over Mamba-2 weights: the first tensor that differs */
	with_config_file("cfg-mamba1-on-m2",
	            "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"ssm_cfg\": {\"d_state\": 8},"
	            " \"pad_vocab_size_multiple\": 16}",
	                 SS_ERR_MISMATCH, "model.safetensors",
	                 "backbone.layers.0.mixer.in_proj.weight: shape [168,32], expected [128,32]");
	/* A huge d_state (issue 32 item 12): named, not blamed on d_inner */
	with_config("cfg-mamba1-huge-state",
	            "{\"model_type\": \"mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
	            "\"vocab_size\": 100, \"state_size\": 9000000}",
	            SS_ERR_TOO_LARGE, "x_proj width 18000004 (dt_rank 4 + 2 x d_state 9000000) is too large");
	with_config("cfg-hybrid",
	            "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"attn_layer_idx\": [1], "
	            "\"ssm_cfg\": {\"layer\": \"Mamba2\"}}",
	            SS_ERR_UNSUPPORTED, "attention");
	with_config("cfg-mlp",
	            "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"d_intermediate\": 128, "
	            "\"ssm_cfg\": {\"layer\": \"Mamba2\"}}",
	            SS_ERR_UNSUPPORTED, "MLP");
	with_config("cfg-nolayers", "{\"model_type\": \"mamba2\", \"hidden_size\": 32}", SS_ERR_FORMAT,
	            "num_hidden_layers");
	with_config("cfg-neither", "{\"foo\": 1}", SS_ERR_FORMAT, "neither");
	with_config("cfg-huge",
	            "{\"model_type\": \"mamba2\", \"hidden_size\": 1e12, \"num_hidden_layers\": 2, "
	            "\"vocab_size\": 100}",
	            SS_ERR_TOO_LARGE, "hidden_size");
	with_config("cfg-heads",
	            "{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
	            "\"vocab_size\": 112, \"head_dim\": 8, \"num_heads\": 4, \"n_groups\": 2}",
	            SS_ERR_FORMAT, "num_heads");

	/* Wrong dims in the config: the first tensor that disagrees is named. */
	with_config_file("cfg-shape",
	            "{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
	            "\"state_size\": 10, \"head_dim\": 8, \"n_groups\": 2, \"vocab_size\": 112, "
	            "\"tie_word_embeddings\": true}",
	                 SS_ERR_MISMATCH, "model.safetensors",
	                 "backbone.layers.0.mixer.in_proj.weight: shape [168,32], expected [176,32]");
	/* Untied in the config, but the file has no lm_head. */
	with_config_file("cfg-untied",
	            "{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
	            "\"state_size\": 8, \"head_dim\": 8, \"n_groups\": 2, \"vocab_size\": 112}",
	                 SS_ERR_NOTFOUND, "model.safetensors", "missing tensor lm_head.weight");
}

/* The state-spaces style with its defaults (d_conv 4, expand 2, tied),
 * Infinity in the dt limit, and unpadded embedding rows accepted. */
static void test_config_styles(void **state)
{
	(void)state;
	const char *d = small_model("cfg-ss", SS_DTYPE_BF16, 1, 1);
	puts_file(path2(d, "config.json"),
	          "{\"d_model\": 32, \"d_intermediate\": 0, \"n_layer\": 2, \"vocab_size\": 100,\n"
	          " \"ssm_cfg\": {\"layer\": \"Mamba2\", \"d_state\": 8, \"headdim\": 8, \"ngroups\": 2,"
	          " \"dt_limit\": [0.0, Infinity]},\n \"rms_norm\": true, \"pad_vocab_size_multiple\": 16}");
	ss_model *m = load_ok(d, 0);
	assert_int_equal(m->cfg.vocab_size, 100);
	assert_int_equal(m->cfg.vocab_padded, 112);
	assert_int_equal(m->cfg.d_conv, 4);
	assert_int_equal(m->cfg.expand, 2);
	assert_true(m->cfg.tied);
	assert_true(isinf(m->cfg.dt_max));
	ss_model_config c;
	char err[SS_ERRMSG_MAX];
	assert_int_equal(ss_model_config_load(&c, d, err), 0);
	assert_int_equal(c.conv_dim, m->cfg.conv_dim);
	ss_model_free(m);

	/* transformers style with a clamp written in Python's JSON dialect. */
	puts_file(path2(d, "config.json"),
	          "{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"num_hidden_layers\": 2,"
	          " \"state_size\": 8, \"head_dim\": 8, \"n_groups\": 2, \"vocab_size\": 112,"
	          " \"tie_word_embeddings\": true, \"time_step_limit\": [0.001, 0.5],"
	          " \"eos_token_id\": [5, 2], \"note\": \"Infinity NaN stay in strings\"}");
	m = load_ok(d, 0);
	assert_true(m->cfg.dt_min == 0.001f && m->cfg.dt_max == 0.5f);
	assert_int_equal(m->cfg.eos_token_id, 5);
	ss_model_free(m);

	const char *e = newdir("no-weights");
	copy_file(path2(d, "config.json"), path2(e, "config.json"));
	load_fails(e, SS_ERR_NOTFOUND, "no model.safetensors", NULL);
}

/* ------------------------------------------------------------------ pickle */

static int pickle_rc(const void *buf, size_t n, char *err)
{
	ss_pickle_tensor *t = NULL;
	size_t nt = 0;
	int rc = ss_pickle_load_state_dict(buf, n, &t, &nt, err);
	ss_pickle_tensors_free(t, nt);
	return rc;
}

#define PK(s) s, sizeof s - 1

static void test_pickle_refuses(void **state)
{
	(void)state;
	char err[SS_ERRMSG_MAX];
	static const struct { const char *p; size_t n; int rc; const char *msg; } cases[] = {
		/* os.system('ls') */
		{PK("\x80\x02" "cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02R."),
		 SS_ERR_FORMAT, "refusing global os.system"},
		{PK("\x80\x02" "cbuiltins\neval\n)R."), SS_ERR_FORMAT, "refusing global builtins.eval"},
		{PK("\x80\x02" "c__builtin__\ngetattr\n)R."), SS_ERR_FORMAT, "refusing global"},
		/* INST and OBJ can call anything: not allowed opcodes */
		{PK("(ios\nsystem\nX\x02\x00\x00\x00ls."), SS_ERR_FORMAT, "opcode 0x69"},
		{PK("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00."), SS_ERR_FORMAT, "opcode 0x95"},
		/* calling an allowed storage class is still refused */
		{PK("\x80\x02" "ctorch\nFloatStorage\n)R."), SS_ERR_FORMAT, "storage class"},
		/* structure errors */
		{PK("\x80\x02h\x05."), SS_ERR_FORMAT, "memo"},
		{PK("\x80\x02X\xff\xff\xff\x7f" "ab"), SS_ERR_FORMAT, "truncated"},
		{PK("\x80\x02}"), SS_ERR_FORMAT, "STOP"},
		{PK("\x80\x02" "cos\nsys"), SS_ERR_FORMAT, "GLOBAL"},
		{PK("\x80\x02R."), SS_ERR_FORMAT, "REDUCE"},
		{PK("\x80\x02K\x01K\x02."), SS_ERR_FORMAT, "STOP"},
		{PK("\x80\x02K\x01."), SS_ERR_FORMAT, "not a dict"},
		{PK("\x80\x02K\x01" "b."), SS_ERR_FORMAT, "BUILD"},
		{PK("\x80\x02r\xff\xff\xff\xff."), SS_ERR_FORMAT, "PUT"},
		{PK("\x80\x02K\x01r\xff\xff\xff\xff."), SS_ERR_TOO_LARGE, "memo"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = 0;
		int rc = pickle_rc(cases[i].p, cases[i].n, err);
		if (rc != cases[i].rc || !strstr(err, cases[i].msg) || strncmp(err, "pickle: ", 8))
			fail_msg("case %zu: rc %d \"%s\", want %d \"%s\"", i, rc, err, cases[i].rc,
			         cases[i].msg);
	}
}

/* A tensor view reaching past its storage is refused; a good one parses. */
static void test_pickle_views(void **state)
{
	(void)state;
	/* {'w': _rebuild_tensor_v2(pid('storage', FloatStorage, '0', 'cpu', N),
	 *   offset, (2, 3), (3, 1), False, OrderedDict())} */
	char buf[512], err[SS_ERRMSG_MAX];
	/* numel 5: the view needs 6 elements; 6: fits; 7 with offset 1: fits. */
	for (int numel = 5; numel <= 7; numel++) {
		size_t k = 0;
#define APP(s) do { memcpy(buf + k, s, sizeof s - 1); k += sizeof s - 1; } while (0)
		APP("\x80\x02" "ccollections\nOrderedDict\nq\x00)R");
		APP("X\x01\x00\x00\x00w");
		APP("ctorch._utils\n_rebuild_tensor_v2\n(");
		APP("(X\x07\x00\x00\x00storage" "ctorch\nFloatStorage\nX\x01\x00\x00\x00" "0"
		    "X\x03\x00\x00\x00" "cpu" "K");
		buf[k++] = (char)numel;
		APP("tQK");
		buf[k++] = (char)(numel == 7 ? 1 : 0);
		APP("K\x02K\x03\x86K\x03K\x01\x86\x89h\x00)RtRs.");
#undef APP
		ss_pickle_tensor *t = NULL;
		size_t nt = 0;
		int rc = ss_pickle_load_state_dict((const uint8_t *)buf, k, &t, &nt, err);
		if (numel == 5) {
			assert_int_equal(rc, SS_ERR_FORMAT);
			assert_non_null(strstr(err, "storage '0'"));
		} else {
			if (rc)
				fail_msg("numel %d: %s", numel, err);
			assert_int_equal(nt, 1);
			assert_string_equal(t[0].name, "w");
			assert_string_equal(t[0].storage_key, "0");
			assert_int_equal(t[0].ndim, 2);
			assert_int_equal(t[0].shape[0], 2);
			assert_int_equal(t[0].shape[1], 3);
			assert_int_equal(t[0].stride[0], 3);
			assert_int_equal(t[0].offset, numel == 7 ? 1 : 0);
			assert_int_equal(t[0].dtype, SS_DTYPE_F32);
		}
		ss_pickle_tensors_free(t, nt);
	}
}

/* Writes a zip with the given entries (STORED), like torch.save. */
static void write_zip(const char *path, const char *const *names, const void *const *data,
                      const size_t *len, int n)
{
	struct archive *a = archive_write_new();
	assert_non_null(a);
	assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
	archive_write_zip_set_compression_store(a);
	assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (int i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, names[i]);
		archive_entry_set_size(e, (la_int64_t)len[i]);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0644);
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		assert_int_equal(archive_write_data(a, data[i], len[i]), (la_ssize_t)len[i]);
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
}

/* A pytorch_model.bin asking for os.system is refused before anything else. */
static void test_pickle_in_model_dir(void **state)
{
	(void)state;
	const char *d = newdir("evil-bin");
	puts_file(path2(d, "config.json"),
	          "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 100, \"ssm_cfg\": {\"layer\": "
	          "\"Mamba2\", \"d_state\": 8, \"headdim\": 8, \"ngroups\": 2}}");
	static const char evil[] = "\x80\x02" "cos\nsystem\nq\x00X\x0c\x00\x00\x00touch /tmp/xq\x01\x85R.";
	const char *names[] = {"archive/data.pkl", "archive/version"};
	const void *data[] = {evil, "3\n"};
	size_t len[] = {sizeof evil - 1, 2};
	write_zip(path2(d, "pytorch_model.bin"), names, data, len, 2);
	load_fails(d, SS_ERR_FORMAT, "pytorch_model.bin", "pickle: refusing global os.system", NULL);

	/* Not a zip at all. */
	puts_file(path2(d, "pytorch_model.bin"), "hello, not a zip");
	load_fails(d, SS_ERR_FORMAT, "pytorch_model.bin", "not a zip", NULL);
	/* A zip without data.pkl. */
	write_zip(path2(d, "pytorch_model.bin"), names + 1, data + 1, len + 1, 1);
	load_fails(d, SS_ERR_FORMAT, "no data.pkl", NULL);
}


/* ------------------------------------------------------- torch zip writer */

/* Builds a torch.save-style zip from a mkmodel model, with a few twists the
 * loader must handle: state-spaces names (backbone.embedding), a tied lm_head
 * sharing the embedding's storage, a transposed (non-contiguous) in_proj in
 * layer 0, and norm_f viewed at storage offset 3. */
typedef struct {
	ss_dtype dt;
	char pkl[1 << 16];
	size_t np;
	const char *names[64];
	void *data[64];
	size_t len[64];
	int n;            /* storages */
	int drop_key;     /* storage left out of the zip, or -1 */
	int short_key;    /* storage written 2 bytes short, or -1 */
} torchzip;

static void pk(torchzip *z, const void *b, size_t n)
{
	assert_true(z->np + n <= sizeof z->pkl);
	memcpy(z->pkl + z->np, b, n);
	z->np += n;
}
#define PKS(z, s) pk(z, s, sizeof s - 1)

static void pk_str(torchzip *z, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);
	uint8_t h[5] = {'X', (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	pk(z, h, 5);
	pk(z, s, n);
}

static void pk_int(torchzip *z, int64_t v)
{
	uint8_t h[5] = {'J', (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	pk(z, h, 5);
}

static void pk_tensor(torchzip *z, const char *name, int key, int64_t numel, int64_t offset,
                      int ndim, const int64_t *shape, const int64_t *stride)
{
	char k[16];
	snprintf(k, sizeof k, "%d", key);
	pk_str(z, name);
	PKS(z, "ctorch._utils\n_rebuild_tensor_v2\n((");
	pk_str(z, "storage");
	if (z->dt == SS_DTYPE_F32)
		PKS(z, "ctorch\nFloatStorage\n");
	else if (z->dt == SS_DTYPE_F16)
		PKS(z, "ctorch\nHalfStorage\n");
	else
		PKS(z, "ctorch\nBFloat16Storage\n");
	pk_str(z, k);
	pk_str(z, "cpu");
	pk_int(z, numel);
	PKS(z, "tQ");
	pk_int(z, offset);
	PKS(z, "(");
	for (int d = 0; d < ndim; d++)
		pk_int(z, shape[d]);
	PKS(z, "t(");
	for (int d = 0; d < ndim; d++)
		pk_int(z, stride[d]);
	PKS(z, "t\x89" "ccollections\nOrderedDict\n)RtR");
}

static void add_storage(torchzip *z, const float *x, size_t n)
{
	size_t esz = ss_dtype_size(z->dt);
	char *name = malloc(32);
	assert_non_null(name);
	snprintf(name, 32, "archive/data/%d", z->n);
	z->data[z->n] = malloc(n * esz + 1);
	assert_non_null(z->data[z->n]);
	ss_from_f32(z->data[z->n], z->dt, x, n);
	z->names[z->n] = name;
	z->len[z->n] = n * esz;
	z->n++;
}

static int tz_visit(void *ctx, const char *name, int ndim, const int64_t *shape, const float *x,
                    size_t n)
{
	torchzip *z = ctx;
	int64_t stride[3] = {1, 1, 1};
	for (int d = ndim - 2; d >= 0; d--)
		stride[d] = stride[d + 1] * shape[d + 1];
	if (!strcmp(name, "backbone.embeddings.weight")) {
		pk_tensor(z, "backbone.embedding.weight", z->n, (int64_t)n, 0, ndim, shape, stride);
		pk_tensor(z, "lm_head.weight", z->n, (int64_t)n, 0, ndim, shape, stride);
		add_storage(z, x, n);
	} else if (!strcmp(name, "backbone.layers.0.mixer.in_proj.weight")) {
		/* storage holds W^T [in][out]; view [out][in] with strides (1, out) */
		float *t = malloc(n * sizeof *t);
		assert_non_null(t);
		for (int64_t i = 0; i < shape[0]; i++)
			for (int64_t j = 0; j < shape[1]; j++)
				t[j * shape[0] + i] = x[i * shape[1] + j];
		int64_t st[2] = {1, shape[0]};
		pk_tensor(z, name, z->n, (int64_t)n, 0, ndim, shape, st);
		add_storage(z, t, n);
		free(t);
	} else if (!strcmp(name, "backbone.norm_f.weight")) {
		float *t = calloc(n + 3, sizeof *t);
		assert_non_null(t);
		memcpy(t + 3, x, n * sizeof *x);
		pk_tensor(z, name, z->n, (int64_t)n + 3, 3, ndim, shape, stride);
		add_storage(z, t, n + 3);
		free(t);
	} else {
		pk_tensor(z, name, z->n, (int64_t)n, 0, ndim, shape, stride);
		add_storage(z, x, n);
	}
	return 0;
}

static void write_torch_model(const char *dir, ss_dtype dt, int drop_key, int short_key)
{
	torchzip *z = calloc(1, sizeof *z);
	assert_non_null(z);
	z->dt = dt;
	z->drop_key = drop_key;
	z->short_key = short_key;
	PKS(z, "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01(");
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.d_model = 32, o.n_layer = 2, o.d_state = 8, o.headdim = 8, o.ngroups = 2;
	o.vocab_size = 100, o.dtype = dt, o.seed = 7;
	assert_int_equal(ss_mkmodel_generate(&o, tz_visit, z), 0);
	PKS(z, "u}b.");   /* SETITEMS, then BUILD with an (empty) _metadata state */
	const char *names[70];
	const void *data[70];
	size_t len[70];
	int n = 0;
	names[n] = "archive/data.pkl", data[n] = z->pkl, len[n++] = z->np;
	for (int i = 0; i < z->n; i++) {
		if (i == drop_key)
			continue;
		names[n] = z->names[i], data[n] = z->data[i];
		len[n++] = z->len[i] - (i == short_key ? 2 : 0);
	}
	names[n] = "archive/version", data[n] = "3\n", len[n++] = 2;
	write_zip(path2(dir, "pytorch_model.bin"), names, data, len, n);
	puts_file(path2(dir, "config.json"),
	          "{\"d_model\": 32, \"d_intermediate\": 0, \"n_layer\": 2, \"vocab_size\": 100,\n"
	          " \"ssm_cfg\": {\"layer\": \"Mamba2\", \"d_state\": 8, \"headdim\": 8, \"ngroups\": 2},\n"
	          " \"pad_vocab_size_multiple\": 16, \"tie_embeddings\": true}");
	for (int i = 0; i < z->n; i++) {
		free((void *)z->names[i]);
		free(z->data[i]);
	}
	free(z);
}

/* Torch zips in every storage dtype load to the same values (and the same
 * fingerprint) as the safetensors model they were made from. */
static void test_torch_zip(void **state)
{
	(void)state;
	static const ss_dtype dts[] = {SS_DTYPE_F32, SS_DTYPE_F16, SS_DTYPE_BF16};
	for (int i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof name, "torch-%d", i);
		const char *d = newdir(name);
		write_torch_model(d, dts[i], -1, -1);
		ss_model *m = load_ok(d, 0);
		assert_int_equal(m->ckpt_dtype, dts[i]);
		assert_ptr_equal(m->lm_head, m->embedding);
		ss_mkmodel_opts o;
		ss_mkmodel_defaults(&o);
		o.d_model = 32, o.n_layer = 2, o.d_state = 8, o.headdim = 8, o.ngroups = 2;
		o.vocab_size = 100, o.dtype = dts[i], o.seed = 7;
		rt_ctx r = {m, 0};
		assert_int_equal(ss_mkmodel_generate(&o, rt_visit, &r), 0);
		snprintf(name, sizeof name, "torch-st-%d", i);
		ss_model *st = load_ok(small_model(name, dts[i], 1, 1), 0);
		assert_string_equal(st->fingerprint, m->fingerprint);
		ss_model_free(st);
		ss_model_free(m);
	}
	const char *d = newdir("torch-drop");
	write_torch_model(d, SS_DTYPE_BF16, 5, -1);
	load_fails(d, SS_ERR_NOTFOUND, "pytorch_model.bin", "archive/data/5 is missing", NULL);
	d = newdir("torch-short");
	write_torch_model(d, SS_DTYPE_F32, -1, 4);
	load_fails(d, SS_ERR_TRUNCATED, "pytorch_model.bin", "archive/data/4", NULL);
}

/* ------------------------------------------------------------------- main */

int main(void)
{
	const char *root = getenv(SS_TEST_SHARED ? "SS_SHARED" : "SS_FIXTURES");
	struct stat sb;
	if (!SS_TEST_SHARED && (!root || !*root))
		root = "tests/fixtures";
	if (!root || !*root || snprintf(golden, sizeof golden, "%s/golden", root) >= (int)sizeof golden ||
	    stat(path2(golden, "manifest.json"), &sb) != 0) {
		if (SS_TEST_SHARED) {
			printf("skipped: needs SS_SHARED (golden t1-ss and t2-hf)\n");
			return 77;
		}
		printf("no golden fixtures at %s/golden\n", root ? root : "");
		return 1;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(tmproot, sizeof tmproot, "%s/ss-test-model-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmproot)) {
		perror("mkdtemp");
		return 1;
	}
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(test_golden_t1_ss),
		cmocka_unit_test(test_golden_t2_hf),
		cmocka_unit_test(test_golden_t1_ss_truncated),
		cmocka_unit_test(test_golden_m1_ss),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_t1_hf),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_mamba1_round_trip),
		cmocka_unit_test(test_fingerprint_seed),
		cmocka_unit_test(test_bad_safetensors),
		cmocka_unit_test(test_bad_shards),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_config_styles),
		cmocka_unit_test(test_pickle_refuses),
		cmocka_unit_test(test_pickle_views),
		cmocka_unit_test(test_pickle_in_model_dir),
		cmocka_unit_test(test_torch_zip),
	};
	int rc = SS_TEST_SHARED ? cmocka_run_group_tests(shared, NULL, NULL)
	                        : cmocka_run_group_tests(tests, NULL, NULL);
	nftw(tmproot, rm1, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
