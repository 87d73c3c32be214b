/* Fuzz target: ss-retrieve's batch-query JSON lines (retrieve_batch_parse
 * in tools/retrieve_batch.c). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "retrieve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *cmdline[] = { "dropped" };
	qopts o = { .k = 10, .exclude = cmdline, .n_exclude = 1 };
	const char *p = (const char *)data, *end = p + size;
	unsigned long long lineno = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		char *line = malloc(len + 1);
		memcpy(line, p, len);
		line[len] = 0;
		batch_query b;
		if (!retrieve_batch_parse(line, len, ++lineno, &o, &b)) {
			if (!b.qid || !b.text || b.k < 1 || b.k > 1000000 || b.n_exclude < 1 ||
			    strcmp(b.exclude[0], "dropped"))
				abort();
			for (size_t i = 0; i < b.n_exclude; i++)
				(void)strlen(b.exclude[i]);
			retrieve_batch_query_free(&b);
		}
		free(line);
		p += len;
	}
	return 0;
}
