/* test_dtype.c — the table of storage dtypes (ss_dtype_info, lib/stream/dtype.c):
 * every row's name parses back to it, sizes and uses are what formats/states.md
 * says, the option message lists the names of one use, and each row's
 * conversions round-trip. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"

static void test_rows(void **st)
{
	(void)st;
	static const struct {
		ss_dtype t;
		const char *name, *alias;
		size_t size;
		unsigned uses;
		int shuffled, scaled;
	} want[] = {
		{SS_DTYPE_F32, "f32", "float32", 4, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS, 0, 0},
		{SS_DTYPE_F16, "f16", "float16", 2, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS, 1, 0},
		{SS_DTYPE_BF16, "bf16", "bfloat16", 2, SS_DTYPE_STATES | SS_DTYPE_WEIGHTS, 1, 0},
		{SS_DTYPE_Q8, "q8", NULL, 1, SS_DTYPE_STATES, 0, 1},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const ss_dtype_info *d = ss_dtype_info_of(want[i].t);
		assert_non_null(d);
		assert_int_equal(d->dtype, want[i].t);
		assert_string_equal(d->name, want[i].name);
		assert_string_equal(ss_dtype_name(want[i].t), want[i].name);
		assert_int_equal(d->size, want[i].size);
		assert_int_equal(ss_dtype_size(want[i].t), want[i].size);
		assert_int_equal(d->uses, want[i].uses);
		assert_int_equal(d->shuffled, want[i].shuffled);
		assert_int_equal(d->scaled, want[i].scaled);
		assert_int_equal(!d->to_f32, d->scaled);
		assert_int_equal(!d->from_f32, d->scaled);
		ss_dtype t = (ss_dtype)-1;
		assert_int_equal(ss_dtype_parse(want[i].name, &t), 0);
		assert_int_equal(t, want[i].t);
		if (want[i].alias) {
			t = (ss_dtype)-1;
			assert_int_equal(ss_dtype_parse(want[i].alias, &t), 0);
			assert_int_equal(t, want[i].t);
		}
	}
	assert_null(ss_dtype_info_of((ss_dtype)4));
	assert_null(ss_dtype_info_of((ss_dtype)-1));
	assert_null(ss_dtype_name((ss_dtype)4));
	assert_int_equal(ss_dtype_size((ss_dtype)4), 0);
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
	assert_string_equal(err, "'q8' is not f32, f16 or bf16");
	assert_int_equal(ss_dtype_parse_for("f8", SS_DTYPE_STATES, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'f8' is not f32, f16, bf16 or q8");
	assert_int_equal(ss_dtype_parse_for(NULL, SS_DTYPE_STATES, &t, err), SS_ERR_INVALID);
	assert_string_equal(err, "'' is not f32, f16, bf16 or q8");
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_parse_for),
		cmocka_unit_test(test_convert),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
