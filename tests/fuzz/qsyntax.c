/* Fuzz target: the query syntax of ss-retrieve query (lib/index/bm25_query.c ss_bm25_parse and the
 * searches behind it: "phrases", --operator and, --proximity), on a small index of texts built
 * once (the harness's own token and state streams). The input is the query text. Every flag set
 * may refuse the query (unbalanced quote, empty or too long phrase, no word) with a message, or
 * answer it; an answer keeps the library's promises: at most k hits, ranks 1..n, scores finite
 * and not increasing, and, k being above the corpus size, AND's documents are among OR's, and
 * a query without a double quote gets the same hits with and without phrase syntax. */
#include <math.h>

#include "fuzz.h"
#include "ss.h"
#include "ss_index.h"

static const char *const texts[] = {
	"the quick brown fox jumps over the lazy dog",
	"a fox and a dog met at the river bank",
	"ocean ships sail at night under the stars",
	"the U.S. army crossed the river at night",
	"brown bears fish in the river; the fox watches",
	"stars and ships, ships and stars, night after night",
	"lazy afternoons by the ocean with a quick swim",
	"Vera Rossi: 7297\nAmir Olsen: 1234\nVera Olsen: 5555",
};
#define N_TEXTS (sizeof texts / sizeof *texts)
#define K 64 /* above N_TEXTS: every matching document is a hit */

/* Builds fuzz_dir()/q.db once from token and state streams of the texts (bytes as token ids,
 * the small dims of mkdb); returns its path. */
static const char *index_path(void)
{
	static char db[512];
	if (db[0])
		return db;
	char tp[512], sp[512], em[SS_ERRMSG_MAX];
	snprintf(tp, sizeof tp, "%s", fuzz_path("q.tokens"));
	snprintf(sp, sizeof sp, "%s", fuzz_path("q.states"));
	ss_writer *tw, *sw;
	const ss_state_dims d = { "mamba2", 2, 2, 2, 2, 8, 4 };
	if (ss_writer_open(&tw, tp, 0, em) || ss_writer_open(&sw, sp, 0, em))
		abort();
	for (size_t i = 0; i < N_TEXTS; i++) {
		char id[16];
		snprintf(id, sizeof id, "t%zu", i);
		size_t n = strlen(texts[i]);
		int32_t tok[128];
		for (size_t j = 0; j < n; j++)
			tok[j] = (unsigned char)texts[i][j];
		ss_tokens t = { id, tok, (int64_t)n, (char *)texts[i], n, NULL };
		ss_state s;
		if (ss_writer_put_tokens(tw, &t, NULL) || ss_state_alloc(&s, &d))
			abort();
		s.id = strdup(id);
		snprintf(s.fingerprint, sizeof s.fingerprint, "mkdb-small");
		s.n_tokens = (int64_t)n;
		if (ss_writer_put_state(sw, &s, NULL))
			abort();
		ss_state_free(&s);
	}
	if (ss_writer_close(tw, em) || ss_writer_close(sw, em))
		abort();
	snprintf(db, sizeof db, "%s", fuzz_path("q.db"));
	ss_index *ix;
	if (ss_index_build_open(&ix, db, em) || ss_index_add_stream(ix, tp, 0, NULL, NULL, NULL, em) ||
	    ss_index_add_stream(ix, sp, 0, NULL, NULL, NULL, em) || ss_index_commit(ix, NULL, NULL, NULL, em))
		abort();
	ss_index_close(ix);
	return db;
}

/* The hits of q under flags, checked; their ids as a bit set over the texts, or -1 when the
 * query is refused (with a message). */
static long run(ss_index *ix, const char *q, unsigned flags)
{
	char em[SS_ERRMSG_MAX] = "";
	if (ss_index_set_query(ix, flags, em))
		abort();
	ss_index_hit *h;
	int n = ss_index_query(ix, q, K, NULL, 0, &h, em);
	if (n < 0) {
		if (!em[0])
			abort(); /* a refusal says why */
		return -1;
	}
	long set = 0;
	for (int i = 0; i < n; i++) {
		if (h[i].rank != i + 1 || !isfinite(h[i].score) || (i && h[i].score > h[i - 1].score) ||
		    !h[i].id || h[i].id[0] != 't')
			abort();
		long b = 1L << atoi(h[i].id + 1);
		if (set & b)
			abort(); /* a document twice */
		set |= b;
	}
	if (n > (int)N_TEXTS)
		abort();
	if (n > 0)
		ss_index_hits_free(h, n);
	return set;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *q = malloc(size + 1);
	memcpy(q, data, size);
	q[size] = 0; /* the query ends at the first NUL, as a C string does */
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, index_path(), em))
		abort();
	long plain = run(ix, q, 0);
	long phrases = run(ix, q, SS_INDEX_QUERY_PHRASES);
	long and = run(ix, q, SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_ALL);
	long prox = run(ix, q, SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_PROXIMITY);
	if (!strchr(q, '"') && plain != phrases)
		abort(); /* no quote: phrase syntax changes nothing */
	if (phrases >= 0 && (and < 0 || (and & ~phrases)))
		abort(); /* AND holds a subset of OR's documents, and refuses what OR refuses */
	if ((phrases < 0) != (prox < 0) || (prox >= 0 && prox != phrases))
		abort(); /* proximity reorders OR's documents, never adds or drops one */
	ss_index_close(ix);
	free(q);
	return 0;
}
