/* Fuzz target: JSONL documents as ss-tokenize reads them (line splitting
 * and jsonl_doc in tools/ss-tokenize.c, built in with its main renamed).
 * A parsed document's text is whole: no NUL cuts it short. */
#include "fuzz.h"

#define main ss_tokenize_main
#include "../../tools/ss-tokenize.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	FILE *f = fmemopen((void *)data, size, "rb");
	if (!f)
		abort();
	struct src s = { .name = "fuzz", .f = f };
	struct lines L = { .s = &s };
	char *line;
	size_t len;
	opt.max_doc = UINT64_MAX;
	while (next_line(&L, &line, &len)) {
		cJSON *o;
		char *id;
		const char *text;
		size_t text_len;
		if (jsonl_doc(line, len, "fuzz", L.lineno, &o, &id, &text, &text_len))
			continue;
		if (!id || text_len != strlen(text) || memchr(line, 0, len))
			abort();
		free(id);
		cJSON_Delete(o);
	}
	free(L.buf);
	fclose(f);
	return 0;
}
