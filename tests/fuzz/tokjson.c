/* Fuzz target: the tokenizer.json loader (lib/tokenizer/); a loaded
 * tokenizer must encode and decode a short text. */
#include "fuzz.h"
#include "ss.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("tokenizer.json", data, size);
	char err[SS_ERRMSG_MAX];
	ss_tokenizer *tok;
	if (ss_tokenizer_load(&tok, p, err))
		return 0;
	static const char text[] = "the fox <|endoftext|> caf\xc3\xa9 42";
	int32_t *ids;
	size_t n;
	if (ss_tokenizer_encode(tok, text, sizeof text - 1, &ids, &n, err) == 0) {
		char *dec;
		size_t dlen;
		if (ss_tokenizer_decode(tok, ids, n, &dec, &dlen, err) == 0)
			free(dec);
		free(ids);
	}
	ss_tokenizer_free(tok);
	return 0;
}
