/* Fuzz target: a corrupted SQLite index opened for queries, as
 * ss-retrieve query opens it (lib/index.c): open, count, query, lookup. */
#include "fuzz.h"
#include "ss.h"
#include "ss_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("index.db", data, size);
	char err[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, p, err))
		return 0;
	ss_index_count(ix);
	static const char *const ex[] = { "a2" };
	ss_index_hit *h;
	int n = ss_index_query(ix, "the fox ocean", 5, ex, 1, &h, err);
	if (n > 5)
		abort();
	if (n > 0)
		ss_index_hits_free(h, n);
	ss_index_hit hit;
	if (ss_index_lookup(ix, "a1", &hit, err) == 0)
		ss_index_hit_clear(&hit);
	ss_index_close(ix);
	return 0;
}
