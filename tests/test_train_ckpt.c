/*
 * test_train_ckpt.c — checkpoints of training (ss_train_ckpt.h):
 *   - ss_train_save_model writes a directory ss_model_load loads back to the
 *     same config and, in f32, bit for bit the trainer's parameters (a
 *     trainer made from the loaded model holds the same array); in bf16,
 *     each parameter rounded to nearest even; on the t1 model (tied) and a
 *     generated one (untied lm_head, ngroups 2, vocab 500 padded to 512,
 *     d_conv 3);
 *   - ss_safetensors_save / ss_safetensors_load_f32 round trip f32 and f16,
 *     and refuse a missing tensor and another element count; a save into a
 *     missing directory fails and leaves nothing.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ss.h"
#include "gen/model.h"
#include "util/rng.h"
#include "util/tmpdir.h"

static char dir[4096];
static uint64_t rng_state = 7;

static int setup(void **st)
{
	return ss_test_tmpdir_make(dir, sizeof dir, "train-ckpt");
}

static int teardown(void **st)
{
	return ss_test_tmpdir_remove(dir);
}

/* Saves model m's parameters, moved off the checkpoint's values, and
 * checks what loads back. */
static void save_and_load(ss_model *m, const char *name)
{
	char errmsg[SS_ERRMSG_MAX] = "", out[4200];
	ss_train *t = NULL, *t2 = NULL;
	ss_model *back = NULL;
	assert_int_equal(ss_train_init(&t, m, 4, 1), 0);
	ss_train_params *P = ss_train_params_of(t);
	for (size_t i = 0; i < P->n; i++)
		P->data[i] += (float)(0.01 * (test_urand(&rng_state) - 0.5));

	snprintf(out, sizeof out, "%s/%s-f32", dir, name);
	assert_int_equal(mkdir(out, 0777), 0);
	assert_int_equal(ss_train_save_model(out, &m->cfg, P, SS_DTYPE_F32, errmsg), 0);
	assert_int_equal(ss_model_load(&back, out, errmsg), 0);
	assert_memory_equal(&back->cfg, &m->cfg, sizeof m->cfg);
	assert_int_equal(back->ckpt_dtype, SS_DTYPE_F32);
	assert_int_equal(ss_train_init(&t2, back, 4, 1), 0);
	ss_train_params *P2 = ss_train_params_of(t2);
	assert_int_equal(P2->n, P->n);
	assert_memory_equal(P2->data, P->data, P->n * sizeof(float));
	ss_train_free(t2);
	ss_model_free(back);

	snprintf(out, sizeof out, "%s/%s-bf16", dir, name);
	assert_int_equal(mkdir(out, 0777), 0);
	assert_int_equal(ss_train_save_model(out, &m->cfg, P, SS_DTYPE_BF16, errmsg), 0);
	assert_int_equal(ss_model_load(&back, out, errmsg), 0);
	assert_int_equal(back->ckpt_dtype, SS_DTYPE_BF16);
	assert_int_equal(ss_train_init(&t2, back, 4, 1), 0);
	P2 = ss_train_params_of(t2);
	for (size_t i = 0; i < P->n; i++)
		if (P2->data[i] != ss_bf16_to_f32(ss_f32_to_bf16(P->data[i])))
			fail_msg("%s bf16: parameter %zu is %g, expected %g rounded", name, i,
				 (double)P2->data[i], (double)P->data[i]);
	ss_train_free(t2);
	ss_model_free(back);
	ss_train_free(t);
}

static void test_model_roundtrip_t1(void **st)
{
	char errmsg[SS_ERRMSG_MAX] = "", path[4096];
	const char *fx = getenv("SS_FIXTURES");
	ss_model *m = NULL;
	snprintf(path, sizeof path, "%s/golden/models/t1-hf", fx ? fx : "tests/fixtures");
	assert_int_equal(ss_model_load(&m, path, errmsg), 0);
	save_and_load(m, "t1");
	ss_model_free(m);
}

static void test_model_roundtrip_untied(void **st)
{
	char errmsg[SS_ERRMSG_MAX] = "", tmp[4096];
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	o.d_model = 24, o.n_layer = 2, o.d_state = 8, o.headdim = 12, o.ngroups = 2, o.d_conv = 3;
	o.vocab_size = 500, o.pad_vocab_multiple = 16, o.tied = 0, o.seed = 5;
	ss_model *m = ss_mkmodel_load_temp(&o, NULL, "train-ckpt", tmp, errmsg);
	assert_non_null(m);
	ss_mkmodel_remove(tmp);
	assert_false(m->cfg.tied);
	save_and_load(m, "gen");
	ss_model_free(m);
}

static void test_safetensors_roundtrip(void **st)
{
	char errmsg[SS_ERRMSG_MAX] = "", path[4200];
	float a[6] = { 1, -2.5f, 3e-3f, 65504, 0, -0.0f }, b[3] = { 7, 8, 9 }, r[6];
	ss_tensor_f32 t[2] = { { "a", 2, { 2, 3 }, a }, { "b.x", 1, { 3 }, b } };
	snprintf(path, sizeof path, "%s/t.safetensors", dir);
	assert_int_equal(ss_safetensors_save(path, t, 2, SS_DTYPE_F32, errmsg), 0);
	assert_int_equal(ss_safetensors_load_f32(path, "a", r, 6, errmsg), 0);
	assert_memory_equal(r, a, sizeof a);
	assert_int_equal(ss_safetensors_load_f32(path, "b.x", r, 3, errmsg), 0);
	assert_memory_equal(r, b, sizeof b);
	assert_int_equal(ss_safetensors_load_f32(path, "c", r, 3, errmsg), SS_ERR_MISMATCH);
	assert_int_equal(ss_safetensors_load_f32(path, "a", r, 5, errmsg), SS_ERR_MISMATCH);
	assert_int_equal(ss_safetensors_save(path, t, 2, SS_DTYPE_F16, errmsg), 0);
	assert_int_equal(ss_safetensors_load_f32(path, "a", r, 6, errmsg), 0);
	for (int i = 0; i < 6; i++)
		assert_true(r[i] == ss_f16_to_f32(ss_f32_to_f16(a[i])));
	snprintf(path, sizeof path, "%s/missing/t.safetensors", dir);
	assert_int_not_equal(ss_safetensors_save(path, t, 2, SS_DTYPE_F32, errmsg), 0);
	assert_int_not_equal(access(path, F_OK), 0);
	ss_tensor_f32 bad = { "", 1, { 1 }, a };
	assert_int_equal(ss_safetensors_save(path, &bad, 1, SS_DTYPE_F32, errmsg), SS_ERR_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_roundtrip_t1),
		cmocka_unit_test(test_model_roundtrip_untied),
		cmocka_unit_test(test_safetensors_roundtrip),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
