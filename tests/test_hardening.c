/* test_hardening.c — library regressions of the adversarial pass (issue
 * 11) that need no shared data: the tokenizer's working memory on a long
 * pre-token and its tables on out-of-range ids (tiny byte-level tokenizer
 * tests/fuzz/tiny-tokenizer.json), model files that are FIFOs, the
 * numbers in safetensors messages, a pickle's memo index. Runs from the
 * source tree. */
#include <errno.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#if defined(__SANITIZE_ADDRESS__)
/* ASan's allocator statistics (in libasan; gcc ships no header for it). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "ss.h"
#include "model/pickle.h"
#include "model/safetensors.h"
#include "gen/model.h"
#include "util/tmpdir.h"

#define TINY "tests/fuzz/tiny-tokenizer.json"

static char tmpdir[256];

static const char *tpath(const char *name)
{
	static char buf[4][512];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", tmpdir, name);
	return buf[i];
}

static size_t heap_in_use(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
#endif
}

static void write_file(const char *p, const void *b, size_t n)
{
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* Issue 11.3: one 4 MB word cost 157 MB in the tokenizer, kept after the
 * call. Pre-tokens are merged in pieces of SS_TOKENIZER_MAX_PRETOKEN bytes,
 * so what the tokenizer keeps stays small, and the text still round-trips. */
static void test_long_pretoken_memory(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	ss_tokenizer *tok;
	assert_int_equal(ss_tokenizer_load(&tok, TINY, err), 0);
	size_t n = 2u << 20;
	char *text = malloc(n);
	for (size_t i = 0; i < n; i++)
		text[i] = "ab\xc3\xa9"[i % 4]; /* letters only: one pre-token */
	size_t before = heap_in_use();
	int32_t *ids;
	size_t n_ids;
	assert_int_equal(ss_tokenizer_encode(tok, text, n, &ids, &n_ids, err), 0);
	char *dec;
	size_t dlen;
	assert_int_equal(ss_tokenizer_decode(tok, ids, n_ids, &dec, &dlen, err), 0);
	assert_int_equal(dlen, n);
	assert_memory_equal(dec, text, n);
	free(dec);
	free(ids);
	size_t kept = heap_in_use() - before;
	if (kept > (16u << 20))
		fail_msg("the tokenizer keeps %zu bytes after a %zu-byte word", kept, n);
	free(text);
	ss_tokenizer_free(tok);
}

/* A tokenizer.json whose one id is far beyond its entries made the loader
 * size (and fill) its tables by that id: 100 M ids cost 800 MB. */
static void test_tokenizer_id_out_of_range(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	FILE *f = fopen(TINY, "rb");
	assert_non_null(f);
	char *buf = calloc(1, 1 << 16);
	size_t n = fread(buf, 1, (1 << 16) - 1, f);
	fclose(f);
	/* The special token's id (the last one) becomes 100000000. */
	char *at = strstr(buf, "\"id\":");
	assert_non_null(at);
	char *end = at + 5;
	while (*end >= '0' && *end <= '9')
		end++;
	char *out = malloc(n + 32);
	int k = snprintf(out, n + 32, "%.*s\"id\":100000000%s", (int)(at - buf), buf, end);
	write_file(tpath("far.json"), out, (size_t)k);
	ss_tokenizer *tok = NULL;
	assert_int_equal(ss_tokenizer_load(&tok, tpath("far.json"), err), SS_ERR_FORMAT);
	assert_non_null(strstr(err, "token id 100000000 is out of range"));
	free(out);
	free(buf);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "test_hardening: timed out (blocked on a FIFO?)\n";
	(void)!write(2, m, sizeof m - 1);
	_exit(1);
}

/* Issue 11.8: a FIFO named model.safetensors (or config.json) made the
 * loader block forever in open(2). */
static void test_fifo_model_files(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	ss_mkmodel_opts o;
	ss_mkmodel_defaults(&o);
	const char *dir = tpath("fifo-model");
	assert_int_equal(ss_mkmodel_write(dir, &o, err), 0);
	char p[600];
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	unlink(p);
	assert_int_equal(mkfifo(p, 0600), 0);
	signal(SIGALRM, on_alarm);
	alarm(20);
	ss_safetensors st;
	assert_int_equal(ss_safetensors_open(&st, p, err), SS_ERR_IO);
	assert_non_null(strstr(err, "not a regular file"));
	ss_model *m;
	assert_true(ss_model_load(&m, dir, err) < 0);
	assert_non_null(strstr(err, "not a regular file"));
	snprintf(p, sizeof p, "%s/config.json", dir);
	unlink(p);
	assert_int_equal(mkfifo(p, 0600), 0);
	ss_model_config cfg;
	assert_true(ss_model_config_load(&cfg, dir, err) < 0);
	assert_non_null(strstr(err, "not a regular file"));
	alarm(0);
}

/* Issue 11.9: "header length 103809024 exceeds the file size 0": the size
 * was read after the struct was closed (zeroed). */
static void test_safetensors_message_numbers(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	unsigned char b[20] = { 0x00, 0x00, 0x30, 0x06, 0, 0, 0, 0, '{', '}' };
	write_file(tpath("short.safetensors"), b, sizeof b);
	ss_safetensors st;
	assert_int_equal(ss_safetensors_open(&st, tpath("short.safetensors"), err), SS_ERR_TRUNCATED);
	if (!strstr(err, "header length 103809024 exceeds the file size 20"))
		fail_msg("message: %s", err);
}

/* Found by the pickle fuzz target: a 13-byte pickle PUT memo index
 * 4128896, and the memo array was grown to 4 M entries (33 MB) for it. */
static void test_pickle_memo_index(void **ctx)
{
	(void)ctx;
	char err[SS_ERRMSG_MAX];
	static const uint8_t pk[] = { 'N', 'r', 0x80, 0x00, 0x3f, 0x00, 'N', '.' };
	ss_pickle_tensor *t = NULL;
	size_t n = 0;
	assert_int_equal(ss_pickle_load_state_dict(pk, sizeof pk, &t, &n, err), SS_ERR_TOO_LARGE);
	assert_non_null(strstr(err, "memo index 4128896 too large for a 8-byte pickle"));
}

static int setup(void **ctx)
{
	(void)ctx;
	return ss_test_tmpdir_make(tmpdir, sizeof tmpdir, "hardening");
}

static int teardown(void **ctx)
{
	(void)ctx;
	return ss_test_tmpdir_remove(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_long_pretoken_memory),
		cmocka_unit_test(test_tokenizer_id_out_of_range),
		cmocka_unit_test(test_fifo_model_files),
		cmocka_unit_test(test_safetensors_message_numbers),
		cmocka_unit_test(test_pickle_memo_index),
	};
	return cmocka_run_group_tests_name("hardening", tests, setup, teardown);
}
