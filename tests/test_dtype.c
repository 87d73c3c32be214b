/* test_dtype.c — the table of storage dtypes (ss_dtype_info, lib/stream/dtype.c):
 * every row's name parses back to it, sizes and uses are what formats/states.md
 * says, the option message lists the names of one use, each row's
 * conversions round-trip, and q8_0 quantizes as ggml's
 * quantize_row_q8_0_ref (a plain rewrite of it here is the oracle). */
#include <math.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"
#include "util/rng.h"

static void test_rows(void **st)
{
	(void)st;
	static const struct {
		ss_dtype t;
		const char *name, *alias;
		size_t size, block;
		unsigned uses;
		int shuffled, scaled;
	} want[] = {
		{SS_DTYPE_F32, "f32", "float32", 4, 1, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS | SS_DTYPE_SAFETENSORS, 0, 0},
		{SS_DTYPE_F16, "f16", "float16", 2, 1, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS | SS_DTYPE_SAFETENSORS, 1, 0},
		{SS_DTYPE_BF16, "bf16", "bfloat16", 2, 1, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS | SS_DTYPE_SAFETENSORS, 1, 0},
		{SS_DTYPE_Q8, "q8", NULL, 1, 1, SS_DTYPE_STATES, 0, 127},
		{SS_DTYPE_Q8_0, "q8_0", NULL, 34, 32, SS_DTYPE_WEIGHTS, 0, 0},
		{SS_DTYPE_Q4, "q4", NULL, 1, 2, SS_DTYPE_STATES, 0, 7},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const ss_dtype_info *d = ss_dtype_info_of(want[i].t);
		assert_non_null(d);
		assert_int_equal(d->dtype, want[i].t);
		assert_string_equal(d->name, want[i].name);
		assert_string_equal(ss_dtype_name(want[i].t), want[i].name);
		assert_int_equal(d->size, want[i].size);
		assert_int_equal(ss_dtype_size(want[i].t), want[i].size);
		assert_int_equal(d->block, want[i].block);
		assert_int_equal(ss_dtype_row_size(want[i].t, 64), 64 / want[i].block * want[i].size);
		assert_int_equal(d->uses, want[i].uses);
		assert_int_equal(d->shuffled, want[i].shuffled);
		assert_int_equal(d->scaled, want[i].scaled);
		assert_int_equal(!d->to_f32, d->scaled != 0);
		assert_int_equal(!d->from_f32, d->scaled != 0);
		ss_dtype t = (ss_dtype)-1;
		assert_int_equal(ss_dtype_parse(want[i].name, &t), 0);
		assert_int_equal(t, want[i].t);
		if (want[i].alias) {
			t = (ss_dtype)-1;
			assert_int_equal(ss_dtype_parse(want[i].alias, &t), 0);
			assert_int_equal(t, want[i].t);
		}
	}
	assert_null(ss_dtype_info_of((ss_dtype)6));
	assert_null(ss_dtype_info_of((ss_dtype)-1));
	assert_null(ss_dtype_name((ss_dtype)6));
	assert_int_equal(ss_dtype_size((ss_dtype)6), 0);
	/* q4: two codes a byte */
	assert_int_equal(ss_dtype_row_size(SS_DTYPE_Q4, 7), 4);
	assert_int_equal(ss_dtype_row_size((ss_dtype)6, 32), 0);
	/* a partial q8_0 block takes a whole one */
	assert_int_equal(ss_dtype_row_size(SS_DTYPE_Q8_0, 33), 68);
	assert_int_equal(ss_dtype_row_size(SS_DTYPE_Q8_0, 0), 0);
}

static void test_parse_for(void **st)
{
	(void)st;
	char err[SS_ERRMSG_MAX];
	ss_dtype t;
	assert_int_equal(ss_dtype_parse_for("q8", SS_DTYPE_STATES, &t, err), 0);
	assert_int_equal(t, SS_DTYPE_Q8);
	/* q8 is a state dtype only: refused for weights, by the table */
	assert_int_equal(ss_dtype_parse_for("q8", SS_DTYPE_WEIGHTS, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'q8' is not f32, f16, bf16 or q8_0");
	/* q8_0 is a weights dtype only, and safetensors does not hold it */
	assert_int_equal(ss_dtype_parse_for("q8_0", SS_DTYPE_WEIGHTS, &t, err), 0);
	assert_int_equal(t, SS_DTYPE_Q8_0);
	assert_int_equal(ss_dtype_parse_for("q8_0", SS_DTYPE_STATES, &t, err), SS_ERR_INVALID);
	assert_int_equal(ss_dtype_parse_for("q8_0", SS_DTYPE_SAFETENSORS, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'q8_0' is not f32, f16 or bf16");
	assert_int_equal(ss_dtype_parse_for("f8", SS_DTYPE_STATES, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'f8' is not f32, f16, bf16, q8 or q4");
	assert_int_equal(ss_dtype_parse_for(NULL, SS_DTYPE_STATES, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'' is not f32, f16, bf16, q8 or q4");
	assert_int_equal(ss_dtype_parse_for("F32", SS_DTYPE_STATES, &t, NULL), SS_ERR_INVALID);
	assert_int_equal(ss_dtype_parse("", &t), SS_ERR_INVALID);
}

static void test_convert(void **st)
{
	(void)st;
	/* values exact in bf16 (8 significant bits) and f16 */
	const float x[7] = {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 1024.0f, -3.0f / 128};
	for (ss_dtype t = SS_DTYPE_F32; t <= SS_DTYPE_BF16; t++) {
		const ss_dtype_info *d = ss_dtype_info_of(t);
		unsigned char buf[7 * 4 + 1];
		float y[7];
		buf[7 * d->size] = 0xa5; /* nothing written past n elements */
		ss_from_f32(buf, t, x, 7);
		assert_int_equal(buf[7 * d->size], 0xa5);
		ss_to_f32(y, buf, t, 7);
		for (int i = 0; i < 7; i++) {
			assert_true(y[i] == x[i]);
			assert_int_equal(signbit(y[i]), signbit(x[i]));
		}
		/* the row's own functions are what ss_to_f32 dispatches to, and
		 * they read unaligned payloads */
		unsigned char odd[7 * 4 + 1];
		memcpy(odd + 1, buf, 7 * d->size);
		float z[7];
		d->to_f32(z, odd + 1, 7);
		assert_memory_equal(z, y, sizeof z);
	}
	/* f16 overflow is inf, bf16 keeps the f32 range */
	unsigned char h[2];
	float big = 1e6f, y;
	ss_from_f32(h, SS_DTYPE_F16, &big, 1);
	ss_to_f32(&y, h, SS_DTYPE_F16, 1);
	assert_true(isinf(y));
	ss_from_f32(h, SS_DTYPE_BF16, &big, 1);
	ss_to_f32(&y, h, SS_DTYPE_BF16, 1);
	assert_true(fabsf(y - big) / big < 1.0f / 128);
	/* q8 has no scale-free conversion: nothing is written */
	float q = 7.0f;
	ss_to_f32(&q, h, SS_DTYPE_Q8, 1);
	assert_true(q == 7.0f);
}

/* ggml's quantize_row_q8_0_ref written out plainly, for one block of 32:
 * d = amax/127, id = 1/d (0 when d is 0), codes roundf(x·id), d stored as
 * f16 before the codes. */
static void q8_0_block_ref(unsigned char out[34], const float x[32])
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
	const uint16_t h = ss_f32_to_f16(d);
	memcpy(out, &h, 2);
	for (int j = 0; j < 32; j++) /* 1/d inf (d subnormal): codes 0, not ggml's undefined cast */
		out[2 + j] = isfinite(id) ? (unsigned char)(int8_t)roundf(x[j] * id) : 0;
}

/* q8_0 from f32: the bytes of the reference, block by block, over blocks
 * of every scale (an all-zero one, tiny, subnormal, large; halves of a step, where
 * roundf's ties go away from zero); back to f32 within half a step plus
 * the f16 rounding of the scale; a partial last block zero-padded; a
 * non-finite x makes its block NaN and leaves the others alone. */
static void test_q8_0(void **st)
{
	(void)st;
	enum { NB = 12, N = NB * 32 };
	uint64_t rng = 35;
	float *x = test_frnd(&rng, N, -1, 1), y[N + 32];
	unsigned char q[NB * 34 + 1], ref[34];
	assert_non_null(x);
	for (int j = 0; j < 32; j++) {
		x[j] = 0.0f;                             /* block 0: zeros */
		x[32 + j] *= 1e-6f;                      /* block 1: tiny */
		x[64 + j] *= 3e4f;                       /* block 2: large */
		x[96 + j] = (float)(j - 16) * 0.5f + 0.25f; /* block 3: x·id = j - 15.5, */
		x[128 + j] *= 1e-37f;                    /* block 4: d subnormal, f16(d) 0 */
	}
	x[96 + 5] = 63.5f; /* as d = 63.5/127 = 0.5 and id = 2 exactly: ties */
	q[NB * 34] = 0xa5;
	ss_from_f32(q, SS_DTYPE_Q8_0, x, N);
	assert_int_equal(q[NB * 34], 0xa5);
	for (int b = 0; b < NB; b++) {
		q8_0_block_ref(ref, x + 32 * b);
		assert_memory_equal(q + 34 * b, ref, 34);
	}
	/* ties away from zero (roundf), not to even: ±0.5 → ±1, -15.5 → -16 */
	assert_int_equal((int8_t)q[3 * 34 + 2 + 16], 1);
	assert_int_equal((int8_t)q[3 * 34 + 2 + 15], -1);
	assert_int_equal((int8_t)q[3 * 34 + 2], -16);
	assert_int_equal((int8_t)q[3 * 34 + 2 + 5], 127);
	for (int j = 0; j < 34; j++) /* block 4: d and codes 0 */
		assert_int_equal(q[4 * 34 + j], 0);
	ss_to_f32(y, q, SS_DTYPE_Q8_0, N);
	for (int b = 0; b < NB; b++) {
		uint16_t h;
		memcpy(&h, q + 34 * b, 2);
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[32 * b + j]));
		const double d = amax / 127.0, d16 = ss_f16_to_f32(h);
		assert_true(fabs(d16 - d) <= fmax(d * 0x1p-11, 0x1p-25)); /* f16, subnormals included */
		for (int j = 0; j < 32; j++) {
			const double e = fabs((double)y[32 * b + j] - x[32 * b + j]);
			assert_true(e <= d / 2 * (1 + 1e-6) + 127 * fabs(d16 - d));
			assert_true(y[32 * b + j] == (float)(int8_t)q[34 * b + 2 + j] * (float)d16);
		}
	}
	/* 40 elements: one whole block and one of 8, padded with zero codes */
	unsigned char p[68];
	memset(p, 0x77, sizeof p);
	ss_from_f32(p, SS_DTYPE_Q8_0, x + 64, 40);
	q8_0_block_ref(ref, x + 64);
	assert_memory_equal(p, ref, 34);
	for (int j = 8; j < 32; j++)
		assert_int_equal(p[34 + 2 + j], 0);
	float z[40];
	ss_to_f32(z, p, SS_DTYPE_Q8_0, 40);
	for (int j = 0; j < 8; j++)
		assert_true(fabsf(z[32 + j] - x[96 + j]) <= 0.26f);
	/* non-finite: that block NaN, the next one as before */
	x[40] = INFINITY;
	ss_from_f32(q, SS_DTYPE_Q8_0, x, N);
	ss_to_f32(y, q, SS_DTYPE_Q8_0, N);
	for (int j = 0; j < 32; j++)
		assert_true(isnan(y[32 + j]));
	q8_0_block_ref(ref, x + 64);
	assert_memory_equal(q + 68, ref, 34);
	free(x);
}

/* q4 by hand (formats/states.md "q4"): scale max|x|/7 per block, codes
 * round(x/scale) clamped to [-7, 7], element 2i in byte i's low nibble; an
 * odd count's last high nibble 0; read back from any element, odd ones
 * included, and a nibble 8 as -8. */
static void test_q4(void **st)
{
	(void)st;
	/* two rows of 5 (odd), blocks of 3: scales [r][2] */
	const float x[10] = { 7, -3.5f, 1, 0.3f, -0.4f, 0, 0, 0, 2, -1.2f };
	float sc[4], back[10];
	assert_int_equal(ss_q8_n_scales(10, 5, 3), 4);
	ss_quant_scales(SS_DTYPE_Q4, sc, x, 10, 5, 3);
	assert_true(sc[0] == 1.0f && sc[1] == 0.4f / 7 && sc[2] == 0 && sc[3] == 2.0f / 7);
	unsigned char q[5];
	ss_quant_from_f32(SS_DTYPE_Q4, q, x, sc, 0, 10, 5, 3);
	/* codes: 7 -4 1 | 5 -7 | 0 0 0 | 7 -4 (round(-3.5) is -4: to nearest even) */
	const unsigned char want[5] = { 0xc7, 0x51, 0x09, 0x00, 0xc7 };
	assert_memory_equal(q, want, 5);
	for (size_t e0 = 0; e0 < 10; e0++) {
		ss_quant_to_f32(SS_DTYPE_Q4, back, q + e0 / 2, sc, e0, 10 - e0, 5, 3);
		for (size_t i = e0; i < 10; i++) {
			const float code = (float)(int8_t)(i & 1 ? q[i / 2] & 0xf0 : q[i / 2] << 4) / 16;
			assert_true(back[i - e0] == code * sc[i / 5 * 2 + i % 5 / 3]);
			assert_true(fabsf(back[i - e0] - x[i]) <= sc[i / 5 * 2 + i % 5 / 3] / 2 * 1.000001f);
		}
	}
	/* an odd count from an even start: ceil(n/2) bytes, the last high nibble 0 */
	unsigned char q3[2] = { 0xff, 0xff };
	ss_quant_from_f32(SS_DTYPE_Q4, q3, x, sc, 0, 3, 5, 3);
	assert_int_equal(q3[0], 0xc7);
	assert_int_equal(q3[1], 0x01);
	/* a nibble of 8 reads as -8 */
	const unsigned char m8 = 0x08;
	const float one = 0.5f;
	ss_quant_to_f32(SS_DTYPE_Q4, back, &m8, &one, 0, 2, 2, 2);
	assert_true(back[0] == -4.0f && back[1] == 0.0f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_parse_for),
		cmocka_unit_test(test_convert),
		cmocka_unit_test(test_q8_0),
		cmocka_unit_test(test_q4),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
