/* test_gguf.c — the GGUF reader (lib/stream/gguf.c): a file written here by
 * the layout of ggml/include/gguf.h reads back key by key and tensor by
 * tensor — F16 and BF16 widened exactly, Q8_0 as d · q from any element on,
 * a K-quant listed but refused by name; every truncation of it, a wrong
 * version, absurd counts, a misaligned, overlapping or duplicate tensor, a
 * key twice, a byte count that wraps 64 bits (2^62 F32 elements) fail
 * with a message naming the file; the converter's Q8_0 blocks are held as
 * they are. The converter-written files are otherwise tested in
 * tests/cli/gguf.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ss.h"
#include "stream/gguf.h"
#include "util/tmpdir.h"

static char dir[4096], path[4200];

typedef struct {
	uint8_t b[8192];
	size_t n;
} buf;

static void put(buf *f, const void *p, size_t n)
{
	assert_true(f->n + n <= sizeof f->b);
	memcpy(f->b + f->n, p, n);
	f->n += n;
}
static void u32(buf *f, uint32_t v) { put(f, &v, 4); }
static void u64(buf *f, uint64_t v) { put(f, &v, 8); }
static void str(buf *f, const char *s)
{
	u64(f, strlen(s));
	put(f, s, strlen(s));
}
static void pad(buf *f)
{
	while (f->n % 32)
		f->b[f->n++] = 0;
}

/* Tensor data: f32 [3], f16 [5], bf16 [4], q8_0 [2][32], Q4_K (type 12,
 * 144 bytes: one block of 256) — each at a multiple of 32. */
static const float f32v[3] = {1.5f, -2.0f, 0.03125f};
static const uint16_t f16v[5] = {0x3c00, 0xc000, 0x3800, 0x0001, 0x7bff}; /* 1, -2, .5, 2^-24, 65504 */
static const uint16_t bf16v[4] = {0x3f80, 0xc040, 0x4049, 0x0080};
static const uint16_t q8d[2] = {0x3800, 0x2c00}; /* 0.5, 0.0625 */

static int8_t q8q(int i) { return (int8_t)(i * 8 - 127 + (i % 3)); }

/* One whole file; what: 0 good, else the fault to write into it. */
enum { GOOD, VERSION1, MANY_TENSORS, MANY_KEYS, MISALIGNED, OVERLAP, DUPLICATE, BIG_DIM, DUP_KEY, WRAP_F32 };
static void write_file(buf *f, int what)
{
	f->n = 0;
	put(f, "GGUF", 4);
	u32(f, what == VERSION1 ? 1 : 3);
	u64(f, what == MANY_TENSORS ? (uint64_t)1 << 40 : 5);
	u64(f, what == MANY_KEYS ? (uint64_t)1 << 40 : 5);
	str(f, "general.architecture"), u32(f, SS_GGUF_STRING), str(f, "mamba2");
	str(f, what == DUP_KEY ? "a.strs" : "a.u32"), u32(f, SS_GGUF_U32), u32(f, 77);
	str(f, "a.neg"), u32(f, SS_GGUF_I32), u32(f, (uint32_t)-5);
	str(f, "a.f32"), u32(f, SS_GGUF_F32);
	float x = 0.25f;
	put(f, &x, 4);
	str(f, "a.strs"), u32(f, SS_GGUF_ARRAY), u32(f, SS_GGUF_STRING), u64(f, 3);
	str(f, "x"), str(f, ""), str(f, "yz");
	/* name, dims, type, offset (relative to the data) */
	struct { const char *name; int nd; uint64_t ne[2]; uint32_t type; uint64_t off; } t[5] = {
		{"t.f32", 1, {3}, SS_GGML_F32, 0},   {"t.f16", 1, {5}, SS_GGML_F16, 32},
		{"t.bf16", 1, {4}, SS_GGML_BF16, 64}, {"t.q8", 2, {32, 2}, SS_GGML_Q8_0, 96},
		{"t.q4k", 1, {256}, 12, 192},
	};
	if (what == MISALIGNED)
		t[1].off = 36;
	if (what == OVERLAP)
		t[2].off = 32;
	if (what == DUPLICATE)
		t[4].name = "t.f16";
	if (what == BIG_DIM)
		t[3].ne[1] = (uint64_t)1 << 61;
	if (what == WRAP_F32) { /* 2^62 f32 elements: 2^64 bytes, 0 in 64 bits */
		t[0].nd = 2;
		t[0].ne[0] = t[0].ne[1] = (uint64_t)1 << 31;
	}
	for (int i = 0; i < 5; i++) {
		str(f, t[i].name);
		u32(f, (uint32_t)t[i].nd);
		for (int d = 0; d < t[i].nd; d++)
			u64(f, t[i].ne[d]);
		u32(f, t[i].type);
		u64(f, t[i].off);
	}
	pad(f);
	put(f, f32v, sizeof f32v), pad(f);
	put(f, f16v, sizeof f16v), pad(f);
	put(f, bf16v, sizeof bf16v), pad(f);
	for (int b = 0; b < 2; b++) {
		put(f, &q8d[b], 2);
		for (int i = 0; i < 32; i++) {
			int8_t q = q8q(32 * b + i);
			put(f, &q, 1);
		}
	}
	pad(f);
	for (int i = 0; i < 144; i++)
		f->b[f->n++] = (uint8_t)i;
}

static void save(const buf *f, size_t n)
{
	FILE *o = fopen(path, "wb");
	assert_non_null(o);
	assert_int_equal(fwrite(f->b, 1, n, o), n);
	fclose(o);
}

static void test_good(void **st)
{
	(void)st;
	buf f;
	write_file(&f, GOOD);
	save(&f, f.n);
	ss_gguf g;
	char err[SS_ERRMSG_MAX] = "";
	assert_int_equal(ss_gguf_open(&g, path, err), 0);
	assert_int_equal(g.n_kv, 5);
	assert_int_equal(g.n_t, 5);
	uint64_t u = 0;
	double d = 0;
	assert_int_equal(ss_gguf_get_uint(&g, "a.u32", &u, err), 0);
	assert_int_equal(u, 77);
	assert_int_equal(ss_gguf_get_uint(&g, "a.neg", &u, err), SS_ERR_FORMAT);
	assert_non_null(strstr(err, "a.neg"));
	assert_int_equal(ss_gguf_get_uint(&g, "nope", &u, err), SS_ERR_NOTFOUND);
	assert_int_equal(ss_gguf_get_float(&g, "a.f32", &d, err), 0);
	assert_true(d == 0.25);
	const char *s;
	size_t len;
	assert_int_equal(ss_gguf_get_str(&g, "general.architecture", &s, &len, err), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(s, "mamba2", 6);
	assert_int_equal(ss_gguf_get_str(&g, "a.u32", &s, &len, err), SS_ERR_FORMAT);
	const uint8_t *p;
	uint64_t n;
	assert_int_equal(ss_gguf_get_strs(&g, "a.strs", &p, &n, err), 0);
	assert_int_equal(n, 3);
	const char *want[3] = {"x", "", "yz"};
	for (int i = 0; i < 3; i++) {
		ss_gguf_str_next(&p, &s, &len);
		assert_int_equal(len, strlen(want[i]));
		assert_memory_equal(s, want[i], len);
	}

	float x[64];
	const ss_gguf_tensor *t = ss_gguf_find(&g, "t.f32");
	assert_non_null(t);
	assert_int_equal(ss_gguf_read_f32(&g, t, 0, 3, x, err), 0);
	assert_memory_equal(x, f32v, sizeof f32v);
	t = ss_gguf_find(&g, "t.f16");
	assert_int_equal(ss_gguf_read_f32(&g, t, 1, 4, x, err), 0);
	for (int i = 1; i < 5; i++)
		assert_true(x[i - 1] == ss_f16_to_f32(f16v[i]));
	assert_true(x[3] == 65504.0f && x[2] == 0x1p-24f);
	t = ss_gguf_find(&g, "t.bf16");
	assert_int_equal(ss_gguf_read_f32(&g, t, 0, 4, x, err), 0);
	assert_true(x[0] == 1.0f && x[1] == -3.0f && x[2] == 3.140625f && x[3] == 0x1p-126f);
	t = ss_gguf_find(&g, "t.q8");
	assert_int_equal(t->numel, 64);
	assert_int_equal(t->nbytes, 68);
	for (int first = 0; first < 64; first += 13) { /* every start, across the blocks */
		assert_int_equal(ss_gguf_read_f32(&g, t, (uint64_t)first, (size_t)(64 - first), x, err), 0);
		for (int i = first; i < 64; i++)
			assert_true(x[i - first] == (i < 32 ? 0.5f : 0.0625f) * (float)q8q(i));
	}
	assert_int_equal(ss_gguf_read_f32(&g, t, 60, 5, x, err), SS_ERR_INVALID);
	t = ss_gguf_find(&g, "t.q4k");
	assert_non_null(t);
	assert_int_equal(t->nbytes, 0);
	assert_int_equal(ss_gguf_read_f32(&g, t, 0, 1, x, err), SS_ERR_UNSUPPORTED);
	assert_non_null(strstr(err, "t.q4k: type Q4_K is not supported"));
	assert_null(ss_gguf_find(&g, "t.none"));
	ss_gguf_close(&g);
	assert_int_equal(ss_gguf_is(path), 1);
}

/* Every prefix of the file fails, with the file's name in the message. */
static void test_truncated(void **st)
{
	(void)st;
	buf f;
	write_file(&f, GOOD);
	size_t data_end = f.n - 144; /* the Q4_K's bytes are not checked (unknown size) */
	for (size_t n = 0; n < data_end; n++) {
		save(&f, n);
		ss_gguf g;
		char err[SS_ERRMSG_MAX] = "";
		int rc = ss_gguf_open(&g, path, err);
		if (rc == 0)
			fail_msg("a file cut at byte %zu of %zu opened", n, data_end);
		assert_non_null(strstr(err, path));
		ss_gguf_close(&g);
	}
}

static void test_faults(void **st)
{
	(void)st;
	static const struct { int what, code; const char *msg; } c[] = {
		{VERSION1, SS_ERR_VERSION, "version 1"},
		{MANY_TENSORS, SS_ERR_TOO_LARGE, "cannot fit"},
		{MANY_KEYS, SS_ERR_TOO_LARGE, "cannot fit"},
		{MISALIGNED, SS_ERR_FORMAT, "t.f16: offset 36 is not a multiple of the alignment 32"},
		{OVERLAP, SS_ERR_FORMAT, "overlap"},
		{DUPLICATE, SS_ERR_FORMAT, "tensor t.f16 appears twice"},
		{BIG_DIM, SS_ERR_TOO_LARGE, "dimensions too large"},
		{DUP_KEY, SS_ERR_FORMAT, "key a.strs appears twice"},
		{WRAP_F32, SS_ERR_TOO_LARGE, "t.f32: 4611686018427387904 F32 elements: the byte count overflows"},
	};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		buf f;
		write_file(&f, c[i].what);
		save(&f, f.n);
		ss_gguf g;
		char err[SS_ERRMSG_MAX] = "";
		assert_int_equal(ss_gguf_open(&g, path, err), c[i].code);
		if (!strstr(err, c[i].msg) || !strstr(err, path))
			fail_msg("case %zu: message '%s' lacks '%s'", i, err, c[i].msg);
		ss_gguf_close(&g);
	}
	assert_int_equal(ss_gguf_is("/nonexistent"), 0);
}

/* The converter's Q8_0 file (m1, tests/fixtures/gguf): loaded, the model's
 * matrices are q8_0 and hold the file's blocks byte for byte (widened to
 * f32 and quantized again by ss_from_f32: ggml's quantizer gives back the
 * same d and q). */
static void test_fixture_q8_0(void **st)
{
	(void)st;
	const char *fx = getenv("SS_FIXTURES");
	char p[4200], err[SS_ERRMSG_MAX] = "";
	snprintf(p, sizeof p, "%s/gguf/m1-q8_0.gguf", fx ? fx : "tests/fixtures");
	ss_model *m;
	if (ss_model_load(&m, p, err))
		fail_msg("%s", err);
	assert_int_equal(m->weights_dtype, SS_DTYPE_Q8_0);
	assert_true(ss_model_is_mamba1(&m->cfg));
	ss_gguf g;
	assert_int_equal(ss_gguf_open(&g, p, err), 0);
	const struct { const char *name; const void *mem; } mats[] = {
		{"token_embd.weight", m->embedding},
		{"blk.0.ssm_in.weight", m->layers[0].in_proj},
		{"blk.1.ssm_out.weight", m->layers[1].out_proj},
	};
	for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
		const ss_gguf_tensor *t = ss_gguf_find(&g, mats[i].name);
		assert_non_null(t);
		assert_int_equal(t->type, SS_GGML_Q8_0);
		assert_int_equal(t->nbytes, ss_dtype_row_size(SS_DTYPE_Q8_0, (size_t)t->numel));
		if (memcmp(mats[i].mem, g.map + t->offset, (size_t)t->nbytes))
			fail_msg("%s: the model's q8_0 blocks are not the file's", mats[i].name);
	}
	ss_gguf_close(&g);
	ss_model_free(m);
}

static int setup(void **st)
{
	(void)st;
	if (ss_test_tmpdir_make(dir, sizeof dir, "gguf"))
		return -1;
	snprintf(path, sizeof path, "%s/t.gguf", dir);
	return 0;
}

static int teardown(void **st)
{
	(void)st;
	return ss_test_tmpdir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_faults),
		cmocka_unit_test(test_fixture_q8_0),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
