/*
 * test_tokenizer.c — the GPT-NeoX-20B tokenizer against HF tokenizers' own
 * output: every vector in $SS_FIXTURES/data/tokenizer-tests/ that belongs to
 * this vocabulary, the golden cases' tokens, round trips, invalid UTF-8.
 * Reads $SS_FIXTURES (tests/fixtures: ../shared's layout, the tokenizer and
 * the corpus linked from data/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <utf8proc.h>

#include "ss.h"

static const char *shared;
static ss_tokenizer *tok;

static char *slurp(const char *rel, size_t *len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", shared, rel);
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	b[n] = 0;
	*len = (size_t)n;
	return b;
}

/* Encodes text and compares with want[0..n_want); prints the first
 * difference. Returns 1 on a match. */
static int check_ids(const char *what, const char *text, size_t len, const int32_t *want, size_t n_want)
{
	int32_t *ids;
	size_t n;
	char err[SS_ERRMSG_MAX];
	int rc = ss_tokenizer_encode(tok, text, len, &ids, &n, err);
	if (rc) {
		print_error("%s: encode failed: %s\n", what, err);
		return 0;
	}
	size_t i = 0;
	while (i < n && i < n_want && ids[i] == want[i])
		i++;
	int ok = i == n && i == n_want;
	if (!ok)
		print_error("%s: first difference at token %zu of %zu (want %zu): got %d, want %d\n", what, i, n,
		            n_want, i < n ? ids[i] : -1, i < n_want ? want[i] : -1);
	free(ids);
	return ok;
}

/* Parses integers separated by any of `seps` into out; returns the count. */
static size_t parse_ids(const char *s, const char *end, const char *seps, int32_t *out, size_t cap)
{
	size_t n = 0;
	while (s < end) {
		while (s < end && strchr(seps, *s))
			s++;
		if (s >= end)
			break;
		char *e;
		long v = strtol(s, &e, 10);
		assert_true(e > s);
		assert_true(n < cap);
		out[n++] = (int32_t)v;
		s = e;
	}
	return n;
}

/* ggml examples/prompts/gpt-neox.txt: "sentence => id,id,..." per line. */
static void test_ggml_prompts(void **state)
{
	size_t len;
	char *buf = slurp("data/tokenizer-tests/ggml-prompts-gpt-neox.txt", &len);
	assert_non_null(buf);
	int lines = 0, ok = 0;
	int32_t want[1024];
	for (char *p = buf; p < buf + len;) {
		char *nl = memchr(p, '\n', (size_t)(buf + len - p));
		char *end = nl ? nl : buf + len;
		char *sep = NULL;
		for (char *q = p; q + 4 <= end; q++)
			if (!memcmp(q, " => ", 4))
				sep = q;
		if (end > p) {
			assert_non_null(sep);
			size_t nw = parse_ids(sep + 4, end, ",", want, 1024);
			char what[64];
			snprintf(what, sizeof what, "gpt-neox.txt line %d", lines + 1);
			ok += check_ids(what, p, (size_t)(sep - p), want, nw);
			lines++;
		}
		p = end + 1;
	}
	free(buf);
	print_message("ggml-prompts-gpt-neox.txt: %d/%d lines match\n", ok, lines);
	assert_int_equal(lines, 100);
	assert_int_equal(ok, lines);
}

/* llama.cpp models/ggml-vocab-mpt.gguf.{inp,out}: cases separated by
 * "\n__ggml_vocab_test__\n"; line i of .out holds case i's ids. */
static void test_llama_vocab_mpt(void **state)
{
	size_t ilen, olen;
	char *inp = slurp("data/tokenizer-tests/llama.cpp-ggml-vocab-mpt.gguf.inp", &ilen);
	char *out = slurp("data/tokenizer-tests/llama.cpp-ggml-vocab-mpt.gguf.out", &olen);
	assert_non_null(inp);
	assert_non_null(out);
	static const char sep[] = "\n__ggml_vocab_test__\n";
	const size_t seplen = sizeof sep - 1;
	int cases = 0, ok = 0;
	char *ip = inp, *op = out;
	int32_t want[1024];
	while (ip < inp + ilen) {
		char *e = memmem(ip, (size_t)(inp + ilen - ip), sep, seplen);
		assert_non_null(e);
		char *onl = memchr(op, '\n', (size_t)(out + olen - op));
		assert_non_null(onl);
		size_t nw = parse_ids(op, onl, " ", want, 1024);
		char what[64];
		snprintf(what, sizeof what, "mpt case %d", cases);
		ok += check_ids(what, ip, (size_t)(e - ip), want, nw);
		cases++;
		ip = e + seplen;
		op = onl + 1;
	}
	free(inp);
	free(out);
	print_message("llama.cpp-ggml-vocab-mpt: %d/%d cases match\n", ok, cases);
	assert_int_equal(cases, 46);
	assert_int_equal(ok, cases);
}

/* golden/t1/{c1..c4,docB,compose}: text.txt tokenizes to tokens.i32 (raw
 * little-endian i32, from llama.cpp's tokenizer). */
static void test_golden_cases(void **state)
{
	static const char *const cases[] = { "c1", "c2", "c3", "c4", "docB", "compose" };
	int found = 0;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		char rel[256];
		size_t tlen, ilen;
		snprintf(rel, sizeof rel, "golden/t1/%s/text.txt", cases[c]);
		char *text = slurp(rel, &tlen);
		assert_non_null(text);
		snprintf(rel, sizeof rel, "golden/t1/%s/tokens.i32", cases[c]);
		char *raw = slurp(rel, &ilen);
		assert_non_null(raw);
		assert_int_equal(ilen % 4, 0);
		int32_t *want = malloc(ilen + 4);
		assert_non_null(want);
		memcpy(want, raw, ilen);
		assert_true(check_ids(rel, text, tlen, want, ilen / 4));
		found++;
		free(want);
		free(raw);
		free(text);
	}
	print_message("golden t1: %d/6 cases match\n", found);
	assert_int_equal(found, 6);
}

static void roundtrip(const char *text, size_t len)
{
	int32_t *ids;
	size_t n, dlen, nlen;
	char *dec, *norm, err[SS_ERRMSG_MAX];
	assert_int_equal(ss_tokenizer_encode(tok, text, len, &ids, &n, err), 0);
	assert_int_equal(ss_tokenizer_decode(tok, ids, n, &dec, &dlen, err), 0);
	assert_int_equal(ss_tokenizer_normalize(tok, text, len, &norm, &nlen, err), 0);
	assert_int_equal(dlen, nlen);
	assert_memory_equal(dec, norm, nlen);
	assert_int_equal(dec[dlen], 0);
	free(ids);
	free(dec);
	free(norm);
}

/* decode(encode(x)) == NFC(x), on corpora and on inputs NFC changes. */
static void test_roundtrip(void **state)
{
#define T(s) { s, sizeof s - 1 }
	static const struct { const char *s; size_t len; } texts[] = {
		T(""),
		T("e\xcc\x81t\xc3\xa9 A\xcc\x8a \xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab"), /* e+acute, A+ring, jamo */
		T("  two  spaces   and tabs\t\t\n\r\n<|endoftext|>after<|padding|>"),
		T("\xef\xbc\xa1\xe2\x84\xab \xf0\x9f\xa6\x99 \xe0\xb8\x81\xe0\xb8\xb3 nul\0byte"),
		T("                                                  fifty spaces"),
	};
#undef T
	for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
		roundtrip(texts[i].s, texts[i].len);
	static const char *const files[] = {
		"data/corpora/wikitext-2-raw.test.hf-crlf.raw",
		"data/tokenizer-tests/llama.cpp-ggml-vocab-mpt.gguf.inp",
		"data/tokenizer-tests/ggml-prompts-test-cases.txt",
	};
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		size_t len;
		char *b = slurp(files[i], &len);
		assert_non_null(b);
		if (len > (200u << 10))
			len = 200u << 10; /* a prefix is enough; the cut may split a character */
		while (len && ((unsigned char)b[len] & 0xC0) == 0x80)
			len--;
		roundtrip(b, len);
		free(b);
	}
}

/* ss_tokenizer_normalize normalizes only around code points >= U+0300; it
 * must equal utf8proc's NFC of the whole text. Random mixes of ASCII,
 * combining marks, precomposed letters, Hangul jamo, CJK and Cyrillic. */
static void test_nfc(void **state)
{
	static const char *const atoms[] = {
		"e", "a", " ", "\r\n", "x", "\xcc\x81", "\xcc\x88", "\xcc\xa3", "\xcd\x85",
		"\xc3\xa9", "\xe1\xba\xa1", "\xe1\x84\x92", "\xe1\x85\xa1", "\xe1\x86\xab",
		"\xea\xb0\x80", "\xe4\xb8\xad", "\xd0\x99", "\xd0\xb8\xcc\x86", "\xe2\x80\x93",
		"\xe2\x84\xab", "\xef\xac\x81", "\xe0\xa4\x95\xe0\xa4\xbc", "\xe0\xad\x87\xe0\xac\xbe",
		"\xf0\x9f\xa6\x99", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	};
	const size_t na = sizeof atoms / sizeof *atoms;
	char *text = malloc(1 << 16);
	assert_non_null(text);
	uint64_t rng = 42;
	for (int trial = 0; trial < 300; trial++) {
		size_t len = 0;
		int k = (int)(ss_splitmix64(&rng) % 200);
		for (int j = 0; j < k; j++) {
			const char *a = atoms[(ss_splitmix64(&rng) >> 33) % na];
			size_t l = strlen(a);
			memcpy(text + len, a, l);
			len += l;
		}
		text[len] = 0;
		char *norm, err[SS_ERRMSG_MAX];
		size_t nlen;
		assert_int_equal(ss_tokenizer_normalize(tok, text, len, &norm, &nlen, err), 0);
		utf8proc_uint8_t *want = utf8proc_NFC((const utf8proc_uint8_t *)text);
		assert_non_null(want);
		assert_int_equal(nlen, strlen((char *)want));
		assert_memory_equal(norm, want, nlen);
		free(want);
		free(norm);
		roundtrip(text, len);
	}
	free(text);
}

/* The whole WikiText-2 raw test file as one document: the token count that
 * ../shared/data/SOURCES.md reports (an independent re-implementation). */
static void test_wikitext_count(void **state)
{
	size_t len, n;
	char *b = slurp("data/corpora/wikitext-2-raw.test.hf-crlf.raw", &len);
	assert_non_null(b);
	int32_t *ids;
	char err[SS_ERRMSG_MAX];
	assert_int_equal(ss_tokenizer_encode(tok, b, len, &ids, &n, err), 0);
	assert_int_equal(n, 288722);
	free(ids);
	free(b);
}

/* Special tokens in raw text are matched before normalization; normalized
 * added tokens (space runs) are matched leftmost-longest. */
static void test_added_tokens(void **state)
{
	const int32_t a[] = { 12092, 0, 1533 };
	assert_true(check_ids("special", "Hello<|endoftext|> world", 24, a, 3));
	const int32_t b[] = { 1, 1 };
	assert_true(check_ids("padding", "<|padding|><|padding|>", 22, b, 2));
	const int32_t c[] = { 50254, 50276 }; /* 24 spaces, then 2 */
	assert_true(check_ids("26 spaces", "                          ", 26, c, 2));
	size_t len;
	const char *s = ss_tokenizer_id_bytes(tok, 50254, &len);
	assert_non_null(s);
	assert_int_equal(len, 24);
	assert_null(ss_tokenizer_id_bytes(tok, 50277, &len));
	assert_null(ss_tokenizer_id_bytes(tok, -1, &len));
	assert_int_equal(ss_tokenizer_n_vocab(tok), 50277);
	assert_int_equal(strlen(ss_tokenizer_fingerprint(tok)), 16);
	char *dec, err[SS_ERRMSG_MAX];
	int32_t bad[] = { 12092, 60000 };
	assert_int_equal(ss_tokenizer_decode(tok, bad, 2, &dec, &len, err), SS_ERR_INVALID);
	assert_non_null(strstr(err, "60000"));
}

/* Long words (more than the cache takes) and long runs stay exact and do
 * not exhaust the regex's stack. */
static void test_long_inputs(void **state)
{
	size_t n = 1 << 20;
	char *s = malloc(n);
	assert_non_null(s);
	for (size_t i = 0; i < n; i++)
		s[i] = (char)('a' + (i * 7 + i / 13) % 26);
	roundtrip(s, n);
	memset(s, ' ', n);
	roundtrip(s, n);
	memset(s, '\n', n);
	roundtrip(s, n);
	/* A 300-byte word is merged outside the cache; the same word inside
	 * sentences goes through the cache: same ids either way. */
	int32_t *x, *y;
	size_t nx, ny;
	char err[SS_ERRMSG_MAX];
	for (size_t i = 0; i < 300; i++)
		s[i] = (char)('a' + (i * 5 + i / 7) % 26);
	assert_int_equal(ss_tokenizer_encode(tok, s, 300, &x, &nx, err), 0);
	assert_int_equal(ss_tokenizer_encode(tok, s, 300, &y, &ny, err), 0);
	assert_int_equal(nx, ny);
	assert_memory_equal(x, y, nx * sizeof *x);
	free(x);
	free(y);
	free(s);
}

static void expect_utf8_error(const char *text, size_t len, size_t offset)
{
	int32_t *ids = (int32_t *)1;
	size_t n = 99, bad = 0;
	char err[SS_ERRMSG_MAX], want[64];
	assert_int_equal(ss_tokenizer_encode(tok, text, len, &ids, &n, err), SS_ERR_UTF8);
	assert_null(ids);
	assert_int_equal(n, 0);
	snprintf(want, sizeof want, "invalid UTF-8 at byte offset %zu", offset);
	assert_string_equal(err, want);
	assert_int_equal(ss_utf8_validate(text, len, &bad), SS_ERR_UTF8);
	assert_int_equal(bad, offset);
}

static void test_invalid_utf8(void **state)
{
	expect_utf8_error("abc\xff", 4, 3);
	expect_utf8_error("ok \xc3", 4, 3);                 /* truncated at the end */
	expect_utf8_error("\xc3\xa9\xc3(", 4, 2);           /* bad continuation */
	expect_utf8_error("0123456789\xc0\xaf", 12, 10);    /* overlong '/' */
	expect_utf8_error("x\xe0\x80\xaf", 4, 1);           /* overlong 3-byte */
	expect_utf8_error("xy\xed\xa0\x80", 5, 2);          /* surrogate U+D800 */
	expect_utf8_error("\xf4\x90\x80\x80", 4, 0);        /* above U+10FFFF */
	expect_utf8_error("\xf0\x9f\xa6", 3, 0);            /* truncated emoji */
	expect_utf8_error("abcdefgh\x80", 9, 8);            /* lone continuation */
	size_t bad = 7;
	assert_int_equal(ss_utf8_validate("\xf0\x9f\xa6\x99 \xe2\x82\xac \0", 10, &bad), 0);
	assert_int_equal(bad, 7);
}

static void test_load_errors(void **state)
{
	ss_tokenizer *t = (ss_tokenizer *)1;
	char err[SS_ERRMSG_MAX];
	assert_int_equal(ss_tokenizer_load(&t, "/nonexistent/tokenizer.json", err), SS_ERR_IO);
	assert_null(t);
	char path[] = "/tmp/test_tokenizer.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
	      "\"add_prefix_space\": false}}", f);
	fclose(f);
	assert_int_equal(ss_tokenizer_load(&t, path, err), SS_ERR_UNSUPPORTED);
	assert_non_null(strstr(err, "Unigram"));
	f = fopen(path, "w");
	fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", f);
	fclose(f);
	assert_int_equal(ss_tokenizer_load(&t, path, err), SS_ERR_FORMAT);
	remove(path);
}

static int setup(void **state)
{
	char path[4096], err[SS_ERRMSG_MAX];
	snprintf(path, sizeof path, "%s/data/tokenizer/gpt-neox-20b_tokenizer.json", shared);
	int rc = ss_tokenizer_load(&tok, path, err);
	if (rc)
		fprintf(stderr, "%s: %s\n", path, err);
	return rc ? -1 : 0;
}

static int teardown(void **state)
{
	ss_tokenizer_free(tok);
	return 0;
}

int main(void)
{
	shared = getenv("SS_FIXTURES") ? getenv("SS_FIXTURES") : "tests/fixtures";
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ggml_prompts),
		cmocka_unit_test(test_llama_vocab_mpt),
		cmocka_unit_test(test_golden_cases),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_nfc),
		cmocka_unit_test(test_wikitext_count),
		cmocka_unit_test(test_added_tokens),
		cmocka_unit_test(test_long_inputs),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_load_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
