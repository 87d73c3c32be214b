/* Fuzz target: a corrupted SQLite index through what ss-retrieve does with
 * one (lib/index/index.c, lib/index/index_build.c, lib/index/index_commit.c):
 * opened for queries (count, query with texts and tokens, lookup, list,
 * show, stats, state files), then
 * built on (delete, add of a small valid token + state stream of the
 * seeds' model, a state budget that drops states), then queried again. A
 * command may fail; none may crash, leak or break the library's promises
 * (at most k hits, ranks 1..n, a stored text of text_len bytes). */
#include "fuzz.h"
#include "ss.h"
#include "ss_index.h"

/* Documents the harness adds: the ids of the seed index and a new one. */
static const char *const add_ids[] = { "a1", "a3" };
static const char *const add_texts[] = { "the fox again", "ocean ships at night" };

/* Writes fuzz_dir()/add.tokens and add.states once (mkdb's small dims and
 * fingerprint, those of the seed index); returns their paths. */
static void add_streams(const char **tokens, const char **states)
{
	static char tp[512], sp[512];
	if (!tp[0]) {
		snprintf(tp, sizeof tp, "%s", fuzz_path("add.tokens"));
		snprintf(sp, sizeof sp, "%s", fuzz_path("add.states"));
		char em[SS_ERRMSG_MAX];
		ss_writer *tw, *sw;
		const ss_state_dims d = { "mamba2", 2, 2, 2, 2, 8, 4 };
		if (ss_writer_open(&tw, tp, 0, em) || ss_writer_open(&sw, sp, 0, em))
			abort();
		for (int i = 0; i < 2; i++) {
			int32_t tok[3] = { 1, 2, 3 };
			ss_tokens t = { (char *)add_ids[i], tok, 3, (char *)add_texts[i], strlen(add_texts[i]), NULL };
			ss_state s;
			if (ss_writer_put_tokens(tw, &t, NULL) || ss_state_alloc(&s, &d))
				abort();
			s.id = strdup(add_ids[i]);
			snprintf(s.fingerprint, sizeof s.fingerprint, "mkdb-small");
			s.n_tokens = 3;
			if (ss_writer_put_state(sw, &s, NULL))
				abort();
			ss_state_free(&s);
		}
		if (ss_writer_close(tw, em) || ss_writer_close(sw, em))
			abort();
	}
	*tokens = tp;
	*states = sp;
}

static int doc_seen(void *ctx, const ss_index_doc *d)
{
	size_t *n = ctx;
	(*n)++;
	if (!d->id || !d->fingerprint || (d->stateless != !d->path))
		abort();
	return 0;
}

static int file_seen(void *ctx, const char *path)
{
	(void)ctx;
	return path && *path ? 0 : (abort(), 1);
}

/* What list, show, stats and query do on an index opened for queries. */
static void inspect(const char *p)
{
	char err[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, p, err))
		return;
	ss_index_count(ix);
	if (ss_index_set_fetch(ix, SS_INDEX_FETCH_TEXT | SS_INDEX_FETCH_TOKENS, err))
		abort();
	static const char *const ex[] = { "a2" };
	ss_index_hit *h;
	int n = ss_index_query(ix, "the fox ocean", 5, ex, 1, &h, err);
	if (n > 5)
		abort();
	for (int i = 0; i < n; i++) {
		if (h[i].rank != i + 1 || (h[i].text && strlen(h[i].text) > h[i].text_len) ||
		    (h[i].tokens && !h[i].stateless))
			abort();
		const ss_record *rec;
		ss_index_read(ix, &h[i], 1, &rec, err);
	}
	if (n > 0)
		ss_index_hits_free(h, n);
	ss_index_hit hit;
	if (ss_index_lookup(ix, "a1", &hit, err) == 0)
		ss_index_hit_clear(&hit);
	size_t n_docs = 0;
	ss_index_docs(ix, NULL, doc_seen, &n_docs, err);
	if (ss_index_docs(ix, "a1", doc_seen, &n_docs, err) == 0) {
		char *text;
		size_t len;
		int32_t *tok;
		int64_t nt;
		if (ss_index_text(ix, "a1", &text, &len, err) == 0)
			free(text);
		if (ss_index_tokens(ix, "a1", &tok, &nt, err) == 0)
			free(tok);
	}
	ss_index_info info;
	ss_index_info_get(ix, &info, err);
	ss_index_files(ix, file_seen, NULL, err);
	ss_index_close(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("index.db", data, size);
	char err[SS_ERRMSG_MAX];
	inspect(p);
	/* delete and add, each one build (the file is the harness's copy) */
	ss_index *ix;
	if (ss_index_build_open(&ix, p, err) == 0) {
		if (ss_index_delete(ix, "a2", err) == 0)
			ss_index_commit(ix, NULL, NULL, NULL, err);
		ss_index_close(ix);
	}
	const char *tokens, *states;
	add_streams(&tokens, &states);
	if (ss_index_build_open(&ix, p, err) == 0) {
		if (ss_index_add_stream(ix, tokens, 0, NULL, NULL, NULL, err) == 0 &&
		    ss_index_add_stream(ix, states, 0, NULL, NULL, NULL, err) == 0 &&
		    ss_index_add_hits(ix, "a3", 1, err) == 0 && ss_index_set_state_budget(ix, 300, err) == 0)
			ss_index_commit(ix, NULL, NULL, NULL, err);
		ss_index_close(ix);
	}
	inspect(p);
	return 0;
}
