/* Fuzz target: the tokenizer (lib/tokenizer/) with the tiny byte-level
 * BPE tests/fuzz/tiny-tokenizer.json. On valid UTF-8, decoding the
 * encoding gives back the NFC-normalized text (its canonical equivalent
 * beside the added token); invalid UTF-8 is refused
 * with the offset of the first bad byte. */
#include "fuzz.h"
#include "ss.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static ss_tokenizer *tok;
	char err[SS_ERRMSG_MAX];
	if (!tok && ss_tokenizer_load(&tok, fuzz_src("tests/fuzz/tiny-tokenizer.json"), err)) {
		fprintf(stderr, "fuzz tokenizer: %s (run from the source tree or set SS_TOP)\n", err);
		abort();
	}
	const char *text = (const char *)data;
	size_t bad;
	int valid = ss_utf8_validate(text, size, &bad) == 0;
	int32_t *ids;
	size_t n;
	int rc = ss_tokenizer_encode(tok, text, size, &ids, &n, err);
	if (!valid) {
		char want[64];
		snprintf(want, sizeof want, "at byte offset %zu", bad);
		if (rc != SS_ERR_UTF8 || !strstr(err, want))
			abort();
		return 0;
	}
	if (rc)
		abort();
	char *norm, *dec;
	size_t nlen, dlen;
	if (ss_tokenizer_normalize(tok, text, size, &norm, &nlen, err) ||
	    ss_tokenizer_decode(tok, ids, n, &dec, &dlen, err))
		abort();
	if (dlen != nlen || memcmp(dec, norm, nlen)) {
		/* The added token is cut out before the text around it is
		 * normalized (as HF tokenizers' AddedVocabulary does), so NFC
		 * may compose across its edge in NFC(x) ("<|endoftext|>" then
		 * U+0338: '>' + U+0338 is U+226F) and not in the decoding. Then
		 * the two must still be canonically equivalent. */
		char *again;
		size_t alen;
		if (!memmem(text, size, "<|endoftext|>", 13) ||
		    ss_tokenizer_normalize(tok, dec, dlen, &again, &alen, err))
			abort(); /* decode(encode(x)) != NFC(x) */
		if (alen != nlen || memcmp(again, norm, nlen))
			abort(); /* not even canonically equivalent */
		free(again);
	}
	free(norm);
	free(dec);
	free(ids);
	return 0;
}
