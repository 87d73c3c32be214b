/*
 * bench/tokenize.c — tokenizer throughput on one thread: MB/s and tokens/s
 * encoding the WikiText-2 raw test file (1.29 MB, CRLF) as one document
 * with a cold and a warm merge cache, line by line, and decoding.
 * A figure, not a pass/fail.
 * usage: tokenize [CORPUS]   (default $SS_SHARED/data/corpora/wikitext-2-raw.test.hf-crlf.raw;
 *        tokenizer: $SS_TOKENIZER or $SS_SHARED/data/tokenizer/gpt-neox-20b_tokenizer.json)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ss.h"
#include "bench.h"

static void report(const char *what, size_t bytes, size_t tokens, double secs)
{
	printf("%-28s %9zu bytes %8zu tokens %8.4f s %8.2f MB/s %10.0f tokens/s\n", what, bytes, tokens,
	       secs, bytes / secs / 1e6, tokens / secs);
}

int main(int argc, char **argv)
{
	const char *shared = getenv("SS_SHARED");
	char corpus[4096], tpath[4096], err[SS_ERRMSG_MAX];
	if (argc > 1)
		snprintf(corpus, sizeof corpus, "%s", argv[1]);
	else
		snprintf(corpus, sizeof corpus, "%s/data/corpora/wikitext-2-raw.test.hf-crlf.raw",
		         shared ? shared : "../shared");
	if (getenv("SS_TOKENIZER"))
		snprintf(tpath, sizeof tpath, "%s", getenv("SS_TOKENIZER"));
	else
		snprintf(tpath, sizeof tpath, "%s/data/tokenizer/gpt-neox-20b_tokenizer.json",
		         shared ? shared : "../shared");

	size_t len;
	char *text = bench_read_file(corpus, &len);
	if (!text) {
		fprintf(stderr, "bench/tokenize: %s: cannot read\n", corpus);
		return 77;
	}
	ss_tokenizer *tok;
	double t0 = bench_now();
	if (ss_tokenizer_load(&tok, tpath, err)) {
		fprintf(stderr, "bench/tokenize: %s: %s\n", tpath, err);
		return 77;
	}
	printf("tokenizer %s (fingerprint %s) loaded in %.3f s\n", tpath, ss_tokenizer_fingerprint(tok),
	       bench_now() - t0);
	printf("corpus %s\n", corpus);

	int32_t *ids;
	size_t n;
	t0 = bench_now();
	if (ss_tokenizer_encode(tok, text, len, &ids, &n, err)) {
		fprintf(stderr, "bench/tokenize: %s: %s\n", corpus, err);
		return 1;
	}
	report("encode, one doc, cold cache", len, n, bench_now() - t0);
	free(ids);

	double best = 1e30;
	for (int r = 0; r < 5; r++) {
		t0 = bench_now();
		ss_tokenizer_encode(tok, text, len, &ids, &n, err);
		double elapsed_s = bench_now() - t0;
		if (elapsed_s < best)
			best = elapsed_s;
		free(ids);
	}
	report("encode, one doc, warm (best of 5)", len, n, best);

	t0 = bench_now();
	size_t total = 0;
	for (char *p = text, *end = text + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *e = nl ? nl : end;
		size_t k;
		if (ss_tokenizer_encode(tok, p, (size_t)(e - p), &ids, &k, err)) {
			fprintf(stderr, "bench/tokenize: %s: %s\n", corpus, err);
			return 1;
		}
		total += k;
		free(ids);
		p = e + 1;
	}
	report("encode, one doc per line", len, total, bench_now() - t0);

	ss_tokenizer_encode(tok, text, len, &ids, &n, err);
	char *dec;
	size_t dlen;
	t0 = bench_now();
	ss_tokenizer_decode(tok, ids, n, &dec, &dlen, err);
	report("decode", dlen, n, bench_now() - t0);
	free(dec);
	free(ids);
	ss_tokenizer_free(tok);
	free(text);
	return 0;
}
