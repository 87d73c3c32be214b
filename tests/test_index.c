/* test_index.c — the BM25 index of states (lib/index/index.c): build, rebuild,
 * exclusion, validation of state records at their offsets, versions,
 * concurrent readers, emitting stored records with their rank and score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "index/bm25.h"
#include "index/internal.h" /* the build's connection, to lower SQLite's length limit */
#include "ss.h"
#include "util/tmpdir.h"

static char tmpdir[256];

static const ss_state_dims dims = { "mamba2", 2, 2, 2, 2, 8, 4 };

typedef struct {
	const char *id, *text;
} doc;

static const doc corpus[] = {
	{ "d0", "the quick brown fox jumps over the lazy dog" },
	{ "d1", "sailing ships cross the stormy atlantic ocean" },
	{ "d2", "quantum entanglement puzzles physicists" },
	{ "d3", "the fox hunts at night in the forest" },
	{ "d4", "bread flour water salt and yeast make dough" },
	{ "d5", "ocean tides follow the moon" },
};
#define N_CORPUS (int)(sizeof corpus / sizeof *corpus)

static char *path_in(const char *name)
{
	static char buf[8][512];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", tmpdir, name);
	return buf[i];
}

static void fill_state(ss_state *s, const char *id, const char *fp, int64_t n_tokens)
{
	assert_int_equal(ss_state_alloc(s, &dims), 0);
	s->id = strdup(id);
	snprintf(s->fingerprint, sizeof s->fingerprint, "%s", fp);
	s->n_tokens = n_tokens;
	uint32_t h = 2166136261u; /* FNV-1a of the id seeds the values */
	for (const char *p = id; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	uint64_t x = h;
	for (size_t i = 0; i < ss_state_ssm_len(&dims); i++)
		s->ssm[i] = (float)(ss_splitmix64(&x) >> 40) / (float)(1u << 24) - 0.5f;
	for (size_t i = 0; i < ss_state_conv_len(&dims); i++)
		s->conv[i] = (float)i * 0.01f;
	for (size_t i = 0; i < ss_state_logdecay_len(&dims); i++)
		s->logdecay[i] = -(float)(i + 1);
}

static int64_t n_words(const char *s)
{
	int64_t n = 0;
	for (const char *p = s; *p; p++)
		if (*p != ' ' && (p == s || p[-1] == ' '))
			n++;
	return n;
}

/* Writes docs[0..n) as a token stream and/or a state stream (NULL = skip). */
static void write_docs(const char *tokens_path, const char *states_path, const doc *docs, int n,
		       const char *fp)
{
	char em[SS_ERRMSG_MAX];
	ss_writer *tw = NULL, *sw = NULL;
	if (tokens_path)
		assert_int_equal(ss_writer_open(&tw, tokens_path, 0, em), 0);
	if (states_path)
		assert_int_equal(ss_writer_open(&sw, states_path, 0, em), 0);
	for (int i = 0; i < n; i++) {
		int64_t nt = n_words(docs[i].text);
		if (tw) {
			int32_t tok[1024] = {0};
			assert_true(nt <= (int64_t)(sizeof tok / sizeof *tok));
			ss_tokens t = { (char *)docs[i].id, tok, nt, (char *)docs[i].text, strlen(docs[i].text), NULL };
			assert_int_equal(ss_writer_put_tokens(tw, &t, NULL), 0);
		}
		if (sw) {
			ss_state s;
			fill_state(&s, docs[i].id, fp, nt);
			assert_int_equal(ss_writer_put_state(sw, &s, NULL), 0);
			ss_state_free(&s);
		}
	}
	if (tw)
		assert_int_equal(ss_writer_close(tw, em), 0);
	if (sw)
		assert_int_equal(ss_writer_close(sw, em), 0);
}

typedef struct {
	int n_dropped, n_warned;
	char last[256];
} notes;

static void note_cb(void *ctx, const char *id, int dropped, const char *why)
{
	notes *n = ctx;
	if (dropped)
		n->n_dropped++;
	else
		n->n_warned++;
	snprintf(n->last, sizeof n->last, "%s: %s", id, why);
}

/* Builds `db` from the given streams; returns commit's code. */
static int build(const char *db, const char *const *streams, int n, ss_index_build_stats *st, notes *nt)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	int rc = ss_index_build_open(&ix, db, em);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		rc = ss_index_add_stream(ix, streams[i], 0, NULL, NULL, NULL, em);
		if (rc) {
			ss_index_close(ix);
			return rc;
		}
	}
	rc = ss_index_commit(ix, note_cb, nt, st, em);
	ss_index_close(ix);
	return rc;
}

/* Top-1 id for a query ("" when none), or NULL on error. */
static char top_id[128];
static const char *top1(const char *db, const char *q, const char *const *ex, size_t n_ex)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, db, em))
		return NULL;
	ss_index_hit *h;
	int n = ss_index_query(ix, q, 1, ex, n_ex, &h, em);
	if (n < 0) {
		ss_index_close(ix);
		return NULL;
	}
	snprintf(top_id, sizeof top_id, "%s", n ? h[0].id : "");
	ss_index_hits_free(h, n);
	ss_index_close(ix);
	return top_id;
}

/* A fresh directory with the corpus in docs.tokens + shard0.states, indexed in idx.db. */
static int setup(void **state)
{
	if (ss_test_tmpdir_make(tmpdir, sizeof tmpdir, "index"))
		return -1;
	write_docs(path_in("docs.tokens"), path_in("shard0.states"), corpus, N_CORPUS, "fpA");
	const char *in[] = { path_in("docs.tokens"), path_in("shard0.states") };
	ss_index_build_stats st;
	notes nt = {0};
	return build(path_in("idx.db"), in, 2, &st, &nt);
}

static int teardown(void **state)
{
	return ss_test_tmpdir_remove(tmpdir);
}

static void test_build_and_query(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_count(ix), N_CORPUS);
	ss_index_hit *h;
	int n = ss_index_query(ix, "fox forest night", 3, NULL, 0, &h, em);
	assert_true(n >= 2);
	assert_string_equal(h[0].id, "d3");
	assert_string_equal(h[1].id, "d0");
	for (int i = 0; i < n; i++) {
		assert_int_equal(h[i].rank, i + 1);
		assert_true(h[i].score > 0);
		if (i)
			assert_true(h[i].score <= h[i - 1].score);
		assert_string_equal(h[i].fingerprint, "fpA");
	}
	/* The state behind each hit is the indexed record. */
	const ss_record *rec;
	ss_state s;
	assert_int_equal(ss_index_read(ix, &h[0], 0, &rec, em), 0);
	assert_int_equal(ss_record_state(rec, &s, em), 0);
	assert_string_equal(s.id, "d3");
	assert_int_equal(s.n_tokens, n_words(corpus[3].text));
	ss_state_free(&s);
	/* The hits composed by place (1 and 2 threads) equal their states
	 * read and composed in memory; a hit whose record is another
	 * document's is refused. */
	ss_state st[3];
	const ss_state *sp[3];
	for (int i = 0; i < n; i++) {
		assert_int_equal(ss_index_read(ix, &h[i], 0, &rec, em), 0);
		assert_int_equal(ss_record_state(rec, &st[i], em), 0);
		sp[i] = &st[i];
	}
	ss_compose_opts co = { .mode = SS_COMPOSE_PICASO_R };
	ss_state ref;
	assert_int_equal(ss_compose(&co, sp, (size_t)n, &ref, em), 0);
	for (int threads = 1; threads <= 2; threads++) {
		ss_compose_run_opts ro = { .threads = threads };
		ss_compose_result res;
		assert_int_equal(ss_index_compose(ix, h, n, &co, &ro, &res, em), 0);
		assert_memory_equal(res.state.ssm, ref.ssm, ss_state_ssm_len(&ref.dims) * sizeof(float));
		assert_memory_equal(res.state.conv, ref.conv, ss_state_conv_len(&ref.dims) * sizeof(float));
		assert_string_equal(res.state.id, ref.id);
		ss_state_free(&res.state);
	}
	ss_index_hit forged[2] = { h[0], h[1] };
	forged[1].id = h[0].id;
	ss_compose_run_opts ro = { .threads = 2 };
	ss_compose_result res;
	assert_int_equal(ss_index_compose(ix, forged, 2, &co, &ro, &res, em), SS_ERR_MISMATCH);
	assert_non_null(strstr(em, "the record there is document d0"));
	ss_state_free(&ref);
	for (int i = 0; i < n; i++)
		ss_state_free(&st[i]);
	ss_index_hits_free(h, n);
	/* k larger than the matches: only the matches. */
	n = ss_index_query(ix, "ocean", 10, NULL, 0, &h, em);
	assert_int_equal(n, 2);
	ss_index_hits_free(h, n);
	/* No match at all. */
	n = ss_index_query(ix, "zeppelin", 10, NULL, 0, &h, em);
	assert_int_equal(n, 0);
	assert_null(h);
	/* Lookup by id. */
	ss_index_hit one;
	assert_int_equal(ss_index_lookup(ix, "d4", &one, em), 0);
	assert_int_equal(ss_index_read(ix, &one, 1, &rec, em), 0);
	ss_index_hit_clear(&one);
	assert_int_equal(ss_index_lookup(ix, "nope", &one, em), SS_ERR_NOTFOUND);
	ss_index_close(ix);
}

static void test_query_escaping(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	ss_index_hit *h;
	/* FTS5 syntax is taken literally, never as an operator or an error. */
	const char *odd[] = { "fox AND NOT \"dog", "NEAR(fox dog)", "fox*", "text:fox", "(fox", "fox\"\"\"",
			      "-fox +dog", "^fox", "{fox}" };
	for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
		int n = ss_index_query(ix, odd[i], 5, NULL, 0, &h, em);
		assert_true(n >= 0);
		ss_index_hits_free(h, n);
	}
	/* Empty queries. */
	const char *empty[] = { "", "   \t\n", "@-@ , . ;", NULL };
	for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) {
		assert_int_equal(ss_index_query(ix, empty[i], 5, NULL, 0, &h, em), SS_ERR_INVALID);
		assert_non_null(strstr(em, "empty query"));
	}
	assert_int_equal(ss_index_query(ix, "fox", 0, NULL, 0, &h, em), SS_ERR_INVALID);
	/* Repeated terms and case. */
	int n = ss_index_query(ix, "FOX fox Fox fox", 5, NULL, 0, &h, em);
	assert_int_equal(n, 2);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
}

static void test_exclude(void **state)
{
	const char *ex1[] = { "d3" };
	assert_string_equal(top1(path_in("idx.db"), "fox forest night", NULL, 0), "d3");
	assert_string_equal(top1(path_in("idx.db"), "fox forest night", ex1, 1), "d0");
	const char *ex2[] = { "zzz", "d3", "d0", "aaa" };
	assert_string_equal(top1(path_in("idx.db"), "fox forest night", ex2, 4), "");
	/* k results even when excluded ids rank first. */
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	ss_index_hit *h;
	const char *ex3[] = { "d1" };
	int n = ss_index_query(ix, "ocean the", 2, ex3, 1, &h, em);
	assert_int_equal(n, 2);
	for (int i = 0; i < n; i++)
		assert_string_not_equal(h[i].id, "d1");
	ss_index_hits_free(h, n);
	ss_index_close(ix);
}

static void test_rebuild_replaces(void **state)
{
	/* d0 gets new text and a new state in another shard; d9 is new. */
	const doc more[] = { { "d0", "volcanic eruptions reshape islands" }, { "d9", "glaciers carve valleys" } };
	write_docs(path_in("more.tokens"), path_in("shard1.states"), more, 2, "fpA");
	const char *in[] = { path_in("shard1.states"), path_in("more.tokens") }; /* order does not matter */
	ss_index_build_stats st;
	notes nt = {0};
	assert_int_equal(build(path_in("idx.db"), in, 2, &st, &nt), 0);
	assert_int_equal(st.n_docs, N_CORPUS + 1);
	assert_int_equal(st.n_added, 1);
	assert_int_equal(st.n_replaced, 1);
	assert_int_equal(st.n_dropped, 0);
	assert_string_equal(top1(path_in("idx.db"), "volcanic", NULL, 0), "d0");
	assert_string_equal(top1(path_in("idx.db"), "glaciers", NULL, 0), "d9");
	/* d0's old text is gone: "lazy" was only in it. */
	assert_string_equal(top1(path_in("idx.db"), "lazy", NULL, 0), "");
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	ss_index_hit h;
	assert_int_equal(ss_index_lookup(ix, "d0", &h, em), 0);
	assert_non_null(strstr(h.path, "shard1.states"));
	const ss_record *rec;
	assert_int_equal(ss_index_read(ix, &h, 0, &rec, em), 0);
	ss_index_hit_clear(&h);
	ss_index_close(ix);
	/* Text alone for an indexed id replaces the text and keeps the state. */
	const doc retext[] = { { "d9", "glaciers carve deep fjords" } };
	write_docs(path_in("retext.tokens"), NULL, retext, 1, "fpA");
	const char *in2[] = { path_in("retext.tokens") };
	memset(&nt, 0, sizeof nt);
	assert_int_equal(build(path_in("idx.db"), in2, 1, &st, &nt), 0);
	assert_int_equal(st.n_replaced, 1);
	assert_int_equal(nt.n_dropped, 0);
	/* The state saw 3 tokens, the new text has 4: a warning, kept. */
	assert_int_equal(nt.n_warned, 1);
	assert_non_null(strstr(nt.last, "d9"));
	assert_string_equal(top1(path_in("idx.db"), "fjords", NULL, 0), "d9");
}

static void test_incomplete_documents(void **state)
{
	const doc only_text[] = { { "t1", "orphan text about comets" } };
	const doc only_state[] = { { "s1", "orphan state" } };
	write_docs(path_in("ot.tokens"), NULL, only_text, 1, "fpA");
	write_docs(NULL, path_in("os.states"), only_state, 1, "fpA");
	const char *in[] = { path_in("ot.tokens"), path_in("os.states") };
	ss_index_build_stats st;
	notes nt = {0};
	assert_int_equal(build(path_in("idx.db"), in, 2, &st, &nt), 0);
	assert_int_equal(st.n_dropped, 2);
	assert_int_equal(nt.n_dropped, 2);
	assert_int_equal(st.n_added, 0);
	assert_string_equal(top1(path_in("idx.db"), "comets", NULL, 0), "");
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_count(ix), N_CORPUS);
	ss_index_close(ix);
}

static void test_model_mismatch_rolls_back(void **state)
{
	const doc other[] = { { "m1", "martian dust storms" } };
	write_docs(path_in("m.tokens"), path_in("m.states"), other, 1, "fpB");
	const char *in[] = { path_in("m.tokens"), path_in("m.states") };
	ss_index_build_stats st;
	notes nt = {0};
	assert_int_equal(build(path_in("idx.db"), in, 2, &st, &nt), SS_ERR_MISMATCH);
	assert_string_equal(top1(path_in("idx.db"), "martian", NULL, 0), "");
	assert_string_equal(top1(path_in("idx.db"), "fox forest", NULL, 0), "d3");
}

static void test_interrupted_build(void **state)
{
	const doc more[] = { { "x1", "interrupted builds vanish" } };
	write_docs(path_in("x.tokens"), path_in("x.states"), more, 1, "fpA");
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char em[SS_ERRMSG_MAX];
		ss_index *ix;
		if (ss_index_build_open(&ix, path_in("idx.db"), em))
			_exit(2);
		ss_index_add_stream(ix, path_in("x.tokens"), 0, NULL, NULL, NULL, em);
		ss_index_add_stream(ix, path_in("x.states"), 0, NULL, NULL, NULL, em);
		/* Many more documents, then die without commit or close. */
		for (int i = 0; i < 3000; i++) {
			char id[32];
			snprintf(id, sizeof id, "junk%d", i);
			ss_index_add_text(ix, id, "interrupted junk text padding padding padding", 45, 6, em);
		}
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_string_equal(top1(path_in("idx.db"), "interrupted", NULL, 0), "");
	assert_string_equal(top1(path_in("idx.db"), "fox forest", NULL, 0), "d3");
	/* ss_index_close without commit rolls back too. */
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_build_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_add_stream(ix, path_in("x.tokens"), 0, NULL, NULL, NULL, em), 0);
	assert_int_equal(ss_index_add_stream(ix, path_in("x.states"), 0, NULL, NULL, NULL, em), 0);
	ss_index_close(ix);
	assert_string_equal(top1(path_in("idx.db"), "interrupted", NULL, 0), "");
	/* A writer killed after spilling pages into the file leaves a hot
	 * journal; a read-only open must still see the old index. */
	pid = fork();
	if (pid == 0) {
		sqlite3 *s;
		if (sqlite3_open(path_in("idx.db"), &s) != SQLITE_OK ||
		    sqlite3_exec(s, "PRAGMA cache_size = 2; BEGIN; DELETE FROM docs; CREATE TABLE junk(x);"
				    "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)"
				    " INSERT INTO junk SELECT randomblob(500) FROM c;", 0, 0, 0) != SQLITE_OK)
			_exit(2);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(access(path_in("idx.db-journal"), F_OK), 0);
	assert_string_equal(top1(path_in("idx.db"), "fox forest", NULL, 0), "d3");
	assert_int_equal(access(path_in("idx.db-journal"), F_OK), -1); /* rolled back */
}

/* Reads the state of `id` through the index; returns the error code. */
static int read_doc(const char *db, const char *id, int meta_only, char *em)
{
	ss_index *ix;
	int rc = ss_index_open(&ix, db, em);
	if (rc)
		return rc;
	ss_index_hit h;
	const ss_record *rec;
	rc = ss_index_lookup(ix, id, &h, em);
	if (!rc)
		rc = ss_index_read(ix, &h, meta_only, &rec, em);
	ss_index_hit_clear(&h);
	ss_index_close(ix);
	return rc;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
}

/* Runs sql on the database file db (a test reaching past the API). */
static void sql_on(const char *db, const char *sql)
{
	sqlite3 *s;
	assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
	assert_int_equal(sqlite3_exec(s, sql, 0, 0, 0), SQLITE_OK);
	sqlite3_close(s);
}

static void test_bad_state_files(void **state)
{
	char em[SS_ERRMSG_MAX];
	const char *db = path_in("idx.db");
	const char *shard = path_in("shard0.states");
	const char *saved = path_in("shard0.saved");
	copy_file(shard, saved);
	for (int m = 0; m < 2; m++) {
		/* Missing. */
		assert_int_equal(unlink(shard), 0);
		assert_int_equal(read_doc(db, "d5", m, em), SS_ERR_NOTFOUND);
		assert_non_null(strstr(em, "d5"));
		/* Truncated inside the last record (d5), and before it (offset beyond end). */
		copy_file(saved, shard);
		struct stat sb;
		assert_int_equal(stat(shard, &sb), 0);
		assert_int_equal(truncate(shard, sb.st_size - 10), 0);
		assert_int_equal(read_doc(db, "d5", m, em), SS_ERR_TRUNCATED);
		assert_non_null(strstr(em, "document d5"));
		assert_int_equal(read_doc(db, "d0", m, em), 0);
		assert_int_equal(truncate(shard, 100), 0);
		assert_int_equal(read_doc(db, "d5", m, em), SS_ERR_TRUNCATED);
		assert_non_null(strstr(em, "byte offset"));
		/* Replaced: the same documents in another order (id mismatch at the offset). */
		doc rev[N_CORPUS];
		for (int i = 0; i < N_CORPUS; i++)
			rev[i] = corpus[N_CORPUS - 1 - i];
		write_docs(NULL, shard, rev, N_CORPUS, "fpA");
		assert_int_equal(read_doc(db, "d0", m, em), SS_ERR_MISMATCH);
		assert_non_null(strstr(em, "the record there is document d5"));
		/* Replaced: same ids, another model (the first record: its offset
		 * is 0 whatever the sizes of the others). */
		write_docs(NULL, shard, corpus, N_CORPUS, "fpZ");
		assert_int_equal(read_doc(db, "d0", m, em), SS_ERR_MISMATCH);
		assert_non_null(strstr(em, "fingerprint"));
		/* Replaced by garbage. */
		FILE *f = fopen(shard, "w");
		for (int i = 0; i < 5000; i++)
			fputc(i * 7, f);
		fclose(f);
		assert_true(read_doc(db, "d3", m, em) < 0);
		copy_file(saved, shard);
		assert_int_equal(read_doc(db, "d5", m, em), 0);
	}
}

static void test_versions_and_bad_index(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	const char *db2 = path_in("v.db");
	copy_file(path_in("idx.db"), db2);
	sql_on(db2, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
	assert_int_equal(ss_index_open(&ix, db2, em), SS_ERR_VERSION);
	assert_non_null(strstr(em, "version 99"));
	assert_null(strchr(em, '\n'));
	assert_int_equal(ss_index_build_open(&ix, db2, em), SS_ERR_VERSION);
	/* Not an index. */
	FILE *f = fopen(db2, "w");
	fputs("definitely not sqlite, just text that is long enough to look like a header........\n", f);
	fclose(f);
	assert_int_equal(ss_index_open(&ix, db2, em), SS_ERR_FORMAT);
	assert_int_equal(ss_index_build_open(&ix, db2, em), SS_ERR_FORMAT);
	unlink(db2);
	/* Another SQLite database. */
	sql_on(db2, "CREATE TABLE t(x)");
	assert_int_equal(ss_index_open(&ix, db2, em), SS_ERR_FORMAT);
	assert_int_equal(ss_index_build_open(&ix, db2, em), SS_ERR_FORMAT);
	/* Missing. */
	assert_int_equal(ss_index_open(&ix, path_in("nope.db"), em), SS_ERR_NOTFOUND);
	assert_int_equal(access(path_in("nope.db"), F_OK), -1);
	/* Empty (an interrupted first build). */
	f = fopen(db2, "w");
	fclose(f);
	assert_int_equal(ss_index_open(&ix, db2, em), SS_ERR_FORMAT);
	assert_non_null(strstr(em, "empty"));
}

static void test_state_stream_from_pipe_refused(void **state)
{
	char em[SS_ERRMSG_MAX];
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		FILE *in = fopen(path_in("shard0.states"), "rb");
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, in)) > 0)
			if (write(fds[1], buf, n) < 0)
				break;
		_exit(0);
	}
	close(fds[1]);
	int saved = dup(0);
	dup2(fds[0], 0);
	close(fds[0]);
	ss_index *ix;
	assert_int_equal(ss_index_build_open(&ix, path_in("p.db"), em), 0);
	assert_int_equal(ss_index_add_stream(ix, "-", 0, NULL, NULL, NULL, em), SS_ERR_INVALID);
	assert_non_null(strstr(em, "regular file"));
	ss_index_close(ix);
	dup2(saved, 0);
	close(saved);
	waitpid(pid, NULL, 0);
}

static void test_index_moves_with_shards(void **state)
{
	char em[SS_ERRMSG_MAX], moved[300], cmd[1400];
	snprintf(moved, sizeof moved, "%s.moved", tmpdir);
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", moved, tmpdir, moved);
	assert_int_equal(system(cmd), 0);
	char db[700];
	snprintf(db, sizeof db, "%s/idx.db", moved);
	/* The original shards are gone: only the moved copies can serve. */
	snprintf(cmd, sizeof cmd, "rm -f '%s'/*.states", tmpdir);
	assert_int_equal(system(cmd), 0);
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, db, em), 0);
	ss_index_hit *h;
	int n = ss_index_query(ix, "sailing", 1, NULL, 0, &h, em);
	assert_int_equal(n, 1);
	assert_non_null(strstr(h[0].path, ".moved/shard0.states"));
	const ss_record *rec;
	assert_int_equal(ss_index_read(ix, &h[0], 0, &rec, em), 0);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", moved);
	assert_int_equal(system(cmd), 0);
}

static void test_concurrent_readers(void **state)
{
	enum { N_PROC = 6, N_Q = 40 };
	pid_t pids[N_PROC];
	for (int p = 0; p < N_PROC; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			char em[SS_ERRMSG_MAX];
			ss_index *ix;
			if (ss_index_open(&ix, path_in("idx.db"), em))
				_exit(1);
			for (int q = 0; q < N_Q; q++) {
				ss_index_hit *h;
				int n = ss_index_query(ix, corpus[(p + q) % N_CORPUS].text, 3, NULL, 0, &h, em);
				if (n < 1 || strcmp(h[0].id, corpus[(p + q) % N_CORPUS].id))
					_exit(2);
				const ss_record *rec;
				for (int i = 0; i < n; i++)
					if (ss_index_read(ix, &h[i], q & 1, &rec, em))
						_exit(3);
				ss_index_hits_free(h, n);
			}
			ss_index_close(ix);
			_exit(0);
		}
	}
	for (int p = 0; p < N_PROC; p++) {
		int status;
		assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
}

/* Emitting a query's states: annotation + stored frame, most relevant last;
 * read back, each record is the stored one with its rank and score. */
static void test_copy(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	ss_index_hit *h;
	int n = ss_index_query(ix, "fox forest night ocean", 4, NULL, 0, &h, em);
	assert_true(n >= 3);
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, path_in("out.states"), 0, em), 0);
	for (int i = n - 1; i >= 0; i--)
		assert_int_equal(ss_index_copy(ix, &h[i], w, em), 0);
	assert_int_equal(ss_writer_close(w, em), 0);

	ss_reader *r;
	const ss_record *got, *stored;
	assert_int_equal(ss_reader_open(&r, path_in("out.states"), 0, em), 0);
	for (int j = 0; j < n; j++) {
		const ss_index_hit *hj = &h[n - 1 - j];
		assert_int_equal(ss_reader_next(r, &got), 1);
		int32_t rank;
		double score;
		assert_true(ss_record_rank(got, &rank, &score));
		assert_int_equal(rank, hj->rank);
		assert_int_equal(rank, n - j); /* most relevant last */
		assert_true(score == hj->score);
		/* The frame is the stored one, byte for byte. */
		assert_int_equal(ss_record_length(got), hj->length);
		assert_int_equal(ss_index_read(ix, hj, 0, &stored, em), 0);
		assert_false(ss_record_rank(stored, NULL, NULL));
		assert_int_equal(ss_record_size(got), ss_record_size(stored));
		assert_memory_equal(ss_record_bytes(got), ss_record_bytes(stored), ss_record_size(stored));
		ss_state a, b;
		assert_int_equal(ss_record_state(got, &a, em), 0);
		assert_int_equal(ss_record_state(stored, &b, em), 0);
		assert_true(a.has_rank);
		assert_int_equal(a.rank, hj->rank);
		assert_true(a.score == hj->score);
		assert_false(b.has_rank);
		assert_string_equal(a.id, hj->id);
		assert_string_equal(a.fingerprint, "fpA");
		assert_int_equal(a.n_tokens, b.n_tokens);
		assert_memory_equal(a.ssm, b.ssm, ss_state_ssm_len(&dims) * sizeof(float));
		assert_memory_equal(a.conv, b.conv, ss_state_conv_len(&dims) * sizeof(float));
		assert_memory_equal(a.logdecay, b.logdecay, ss_state_logdecay_len(&dims) * sizeof(float));
		ss_state_free(&a);
		ss_state_free(&b);
	}
	assert_int_equal(ss_reader_next(r, &got), 0);
	ss_reader_close(r);
	/* Metadata readers (ss-compose's first pass) see the annotation too. */
	assert_int_equal(ss_reader_open(&r, path_in("out.states"), 0, em), 0);
	for (int j = 0; j < n; j++) {
		ss_state m;
		assert_int_equal(ss_reader_next_meta(r, &got), 1);
		assert_int_equal(ss_record_state_meta(got, &m, em), 0);
		assert_true(m.has_rank);
		assert_int_equal(m.rank, n - j);
		assert_true(m.score == h[n - 1 - j].score);
		ss_state_free(&m);
	}
	ss_reader_close(r);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
}

/* A state file truncated or replaced under an open index: a one-line error
 * naming the document and offset, and nothing written. */
static void test_copy_bad_state_file(void **state)
{
	char em[SS_ERRMSG_MAX];
	const char *shard = path_in("shard0.states");
	copy_file(shard, path_in("shard0.saved"));
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	ss_index_hit d0, d5;
	assert_int_equal(ss_index_lookup(ix, "d0", &d0, em), 0);
	assert_int_equal(ss_index_lookup(ix, "d5", &d5, em), 0);
	ss_writer *w;
	assert_int_equal(ss_writer_open(&w, path_in("out.states"), 0, em), 0);
	/* Opens the shard: the index now holds its size from before the cut. */
	assert_int_equal(ss_index_copy(ix, &d0, w, em), 0);
	uint64_t at = ss_writer_tell(w);
	/* Cut in the middle of the last record (d5): the metadata prefix is
	 * still there, the frame is not whole. */
	assert_int_equal(truncate(shard, (off_t)(d5.offset + d5.length / 2)), 0);
	assert_int_equal(ss_index_copy(ix, &d5, w, em), SS_ERR_TRUNCATED);
	assert_non_null(strstr(em, "document d5 at byte offset"));
	assert_non_null(strstr(em, "the file ends"));
	assert_null(strchr(em, '\n'));
	assert_int_equal(ss_writer_tell(w), at);
	ss_writer_abort(w);
	ss_index_close(ix);
	/* A fresh index sees the short file before reading anything. */
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_writer_open(&w, path_in("out.states"), 0, em), 0);
	assert_int_equal(ss_index_copy(ix, &d5, w, em), SS_ERR_TRUNCATED);
	assert_non_null(strstr(em, "document d5 at byte offset"));
	assert_non_null(strstr(em, "truncated"));
	/* Replaced: another document at d0's offset. */
	ss_index_close(ix);
	doc rev[N_CORPUS];
	for (int i = 0; i < N_CORPUS; i++)
		rev[i] = corpus[N_CORPUS - 1 - i];
	write_docs(NULL, shard, rev, N_CORPUS, "fpA");
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_copy(ix, &d0, w, em), SS_ERR_MISMATCH);
	assert_non_null(strstr(em, "document d0 at byte offset 0"));
	assert_int_equal(ss_writer_tell(w), 0);
	/* Restored: copies again. */
	copy_file(path_in("shard0.saved"), shard);
	ss_index_close(ix);
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_copy(ix, &d5, w, em), 0);
	assert_int_equal(ss_writer_close(w, em), 0);
	ss_index_hit_clear(&d0);
	ss_index_hit_clear(&d5);
	ss_index_close(ix);
}

/* A random text of min_words + [0, more_words) words "t<r>", word r drawn
 * with probability about 1/r from 1..vocab (Zipf-like); with compounds,
 * one word in 8 a compound of two ("t3-t17"). x: the generator's state.
 * Returns a malloc'd string. */
static char *zipf_text(uint64_t *x, int min_words, int more_words, double vocab, int compounds)
{
	char buf[1024];
	size_t n = 0;
	uint32_t v = (uint32_t)(ss_splitmix64(x) >> 32);
	int words = min_words + (int)(v >> 8) % more_words;
	for (int w = 0; w < words; w++) {
		v = (uint32_t)(ss_splitmix64(x) >> 32);
		int r = (int)pow(vocab, (double)(v >> 8) / (double)(1u << 24));
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%st%d", w ? " " : "", r);
		if (compounds && (v >> 29) == 0)
			n += (size_t)snprintf(buf + n, sizeof buf - n, "-t%d", 1 + (int)(v >> 20) % 30);
	}
	char *t = strdup(buf);
	assert_non_null(t);
	return t;
}

/* The reference: an FTS5 table "fts" (the index's tokenizer, "ss") of
 * texts[0..n), row i holding texts[i]. */
static sqlite3 *fts5_reference(char **texts, int n)
{
	sqlite3 *ref;
	sqlite3_stmt *ins;
	assert_int_equal(sqlite3_open(":memory:", &ref), SQLITE_OK);
	assert_int_equal(ss_bm25_tokenizer_register(ref), 0);
	assert_int_equal(sqlite3_exec(ref, "CREATE VIRTUAL TABLE fts USING fts5(text, tokenize = 'ss'); BEGIN", 0, 0, 0),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(ref, "INSERT INTO fts(rowid, text) VALUES(?1, ?2)", -1, &ins, NULL), SQLITE_OK);
	for (int i = 0; i < n; i++) {
		sqlite3_bind_int(ins, 1, i);
		sqlite3_bind_text(ins, 2, texts[i], -1, SQLITE_STATIC);
		assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
		sqlite3_reset(ins);
	}
	sqlite3_finalize(ins);
	assert_int_equal(sqlite3_exec(ref, "COMMIT", 0, 0, 0), SQLITE_OK);
	return ref;
}

/* hits h[0..n) of query number q against the reference's ranking for FTS5
 * expression expr (top: its top k, rank by rank; one: a row's score):
 * the k best scores rank by rank, each held by the document named
 * ("<letter><row>"). */
static void fts5_compare(sqlite3_stmt *top, sqlite3_stmt *one, const char *expr, int k, const char *query, int q,
			 const ss_index_hit *h, int n)
{
	sqlite3_bind_text(top, 1, expr, -1, SQLITE_STATIC);
	sqlite3_bind_int(top, 2, k);
	int r = 0;
	while (sqlite3_step(top) == SQLITE_ROW) {
		double want = sqlite3_column_double(top, 0);
		if (r >= n)
			fail_msg("query %d (%s): %d hits, FTS5 has more", q, query, n);
		if (fabs(h[r].score - want) > 1e-9 * want)
			fail_msg("query %d (%s) rank %d: score %.12g, bm25() %.12g", q, query, r + 1, h[r].score, want);
		sqlite3_bind_text(one, 1, expr, -1, SQLITE_STATIC);
		sqlite3_bind_int(one, 2, atoi(h[r].id + 1));
		assert_int_equal(sqlite3_step(one), SQLITE_ROW);
		assert_true(fabs(sqlite3_column_double(one, 0) - h[r].score) <= 1e-9 * h[r].score);
		sqlite3_reset(one);
		r++;
	}
	sqlite3_reset(top);
	assert_int_equal(r, n);
}

/* fts5_compare's statements on reference ref: top (a query's top k, ties
 * by rowid) and one (a row's score). */
static void fts5_ranking(sqlite3 *ref, sqlite3_stmt **top, sqlite3_stmt **one)
{
	assert_int_equal(sqlite3_prepare_v2(ref, "SELECT -bm25(fts), rowid FROM fts WHERE fts MATCH ?1 ORDER BY rank, rowid LIMIT ?2",
					    -1, top, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(ref, "SELECT -bm25(fts) FROM fts WHERE fts MATCH ?1 AND rowid = ?2", -1, one,
					    NULL), SQLITE_OK);
}

/* The top k is BM25's, exactly: against FTS5's bm25() over the same text
 * (the same tokenizer, compounds included; the query's distinct words
 * OR-ed) on a corpus whose common words match nearly every document, so
 * that the search prunes. */
static void test_top_k_is_exhaustive_bm25(void **state)
{
	enum { N_DOCS = 3000, N_Q = 150 };
	static doc docs[N_DOCS];
	static char ids[N_DOCS][16], *texts[N_DOCS];
	uint64_t x = 12345;
	for (int i = 0; i < N_DOCS; i++) {
		snprintf(ids[i], sizeof ids[i], "g%d", i);
		texts[i] = zipf_text(&x, 20, 40, 2000, 1);
		docs[i] = (doc){ ids[i], texts[i] };
	}
	write_docs(path_in("g.tokens"), path_in("g.states"), docs, N_DOCS, "fpA");
	const char *in[] = { path_in("g.tokens"), path_in("g.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("g.db"), in, 2, NULL, &nt), 0);
	sqlite3 *ref = fts5_reference(texts, N_DOCS);
	sqlite3_stmt *top, *one;
	assert_int_equal(sqlite3_prepare_v2(ref, "SELECT -bm25(fts) FROM fts WHERE fts MATCH ?1 ORDER BY rank LIMIT ?2",
					    -1, &top, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(ref, "SELECT -bm25(fts) FROM fts WHERE fts MATCH ?1 AND rowid = ?2", -1, &one,
					    NULL), SQLITE_OK);
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("g.db"), em), 0);
	for (int q = 0; q < N_Q; q++) {
		/* A passage (words of a document) or common words, then the FTS5
		 * expression of its distinct words. */
		const char *src = texts[(ss_splitmix64(&x) >> 40) % N_DOCS];
		char query[1024], expr[4096] = "";
		if (q % 2) {
			snprintf(query, sizeof query, "%s t%d", src, q + 1);
		} else {
			/* Common words only: the top k is made of documents that
			 * hold many of them, the case pruning must get right. */
			size_t qn = 0;
			for (int w = 0; w < 3 + q % 10; w++) {
				int r = 1 + (int)((ss_splitmix64(&x) >> 40) % 40);
				qn += (size_t)snprintf(query + qn, sizeof query - qn, "%st%d", w ? " " : "", r);
			}
		}
		size_t en = 0;
		char *save, *copy = strdup(query);
		for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
			char quoted[64];
			snprintf(quoted, sizeof quoted, "\"%s\"", w);
			if (!strstr(expr, quoted) || strstr(expr, quoted)[strlen(quoted)] == '*')
				en += (size_t)snprintf(expr + en, sizeof expr - en, "%s%s", en ? " OR " : "", quoted);
		}
		free(copy);
		int k = q % 3 == 0 ? 1 : q % 3 == 1 ? 10 : 40 + q;
		ss_index_hit *h;
		int n = ss_index_query(ix, query, k, NULL, 0, &h, em);
		assert_true(n >= 1);
		fts5_compare(top, one, expr, k, query, q, h, n);
		ss_index_hits_free(h, n);
	}
	ss_index_close(ix);
	sqlite3_finalize(top);
	sqlite3_finalize(one);
	sqlite3_close(ref);
	for (int i = 0; i < N_DOCS; i++)
		free(texts[i]);
}

/* Score of document `id` in hits[0..n), or -1 when it is not there. */
static double score_of(const ss_index_hit *h, int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(h[i].id, id))
			return h[i].score;
	return -1;
}

/* Builds an index of n random documents "p<i>" (zipf_text without
 * compounds, the same words FTS5 cuts) and its FTS5 reference over the
 * same texts; texts[i] is malloc'd. */
static sqlite3 *phrase_corpus(const char *db, int n, char **texts, char (*ids)[16], uint64_t *x)
{
	doc *docs = calloc((size_t)n, sizeof *docs);
	assert_non_null(docs);
	for (int i = 0; i < n; i++) {
		snprintf(ids[i], sizeof ids[i], "p%d", i);
		texts[i] = zipf_text(x, 8, 30, 60, 0);
		docs[i] = (doc){ ids[i], texts[i] };
	}
	write_docs(path_in("p.tokens"), path_in("p.states"), docs, n, "fpA");
	free(docs);
	const char *in[] = { path_in("p.tokens"), path_in("p.states") };
	notes nt = {0};
	assert_int_equal(build(db, in, 2, NULL, &nt), 0);
	return fts5_reference(texts, n);
}

/* Word w (0-based) of text t into out ("" past the end). */
static void word_at(const char *t, int w, char *out, size_t cap)
{
	while (w-- > 0 && (t = strchr(t, ' ')))
		t++;
	if (!t) {
		*out = 0;
		return;
	}
	size_t n = strcspn(t, " ");
	snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), t);
}

/* Phrases, AND and their mix are exact: the top k equals FTS5's bm25()
 * ranking of the same expression (a brute-force scan of every document
 * that matches), score by score and document by document. */
static void test_phrase_and_all_exact(void **state)
{
	enum { N_DOCS = 1500, N_Q = 240 };
	static char ids[N_DOCS][16], *texts[N_DOCS];
	uint64_t x = 4242;
	sqlite3 *ref = phrase_corpus(path_in("p.db"), N_DOCS, texts, ids, &x);
	sqlite3_stmt *top, *one;
	fts5_ranking(ref, &top, &one);
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("p.db"), em), 0);
	int n_matched = 0;
	for (int q = 0; q < N_Q; q++) {
		const char *src = texts[(ss_splitmix64(&x) >> 40) % N_DOCS];
		int at = (int)((ss_splitmix64(&x) >> 40) % 6), len = 1 + q % 4;
		char w[6][32], ph[160] = "", query[256], expr[512];
		size_t pn = 0;
		for (int i = 0; i < len; i++) {
			word_at(src, at + i, w[i], sizeof w[i]);
			if (*w[i])
				pn += (size_t)snprintf(ph + pn, sizeof ph - pn, "%s%s", pn ? " " : "", w[i]);
		}
		/* another word of the corpus, outside the phrase */
		char other[32];
		word_at(texts[(ss_splitmix64(&x) >> 40) % N_DOCS], 0, other, sizeof other);
		int form = (q / 4) % 4;
		unsigned flags = SS_INDEX_QUERY_PHRASES;
		if (form == 0) { /* a phrase */
			snprintf(query, sizeof query, "\"%s\"", ph);
			snprintf(expr, sizeof expr, "\"%s\"", ph);
		} else if (form == 1 || form == 2) { /* a phrase OR / AND a word */
			snprintf(query, sizeof query, "%s \"%s\"", other, ph);
			snprintf(expr, sizeof expr, "\"%s\" %s \"%s\"", other, form == 1 ? "OR" : "AND", ph);
			flags |= form == 2 ? SS_INDEX_QUERY_ALL : 0;
		} else { /* the words AND-ed, each once */
			size_t qn = 0, en = 0;
			for (int i = 0; i < len; i++) {
				int seen = 0;
				for (int j = 0; j < i; j++)
					seen |= !strcmp(w[i], w[j]);
				if (seen || !*w[i])
					continue;
				qn += (size_t)snprintf(query + qn, sizeof query - qn, "%s%s", qn ? " " : "", w[i]);
				en += (size_t)snprintf(expr + en, sizeof expr - en, "%s\"%s\"", en ? " AND " : "", w[i]);
			}
			flags = SS_INDEX_QUERY_ALL;
		}
		int k = q % 3 == 0 ? 1 : q % 3 == 1 ? 5 : 30;
		assert_int_equal(ss_index_set_query(ix, flags, em), 0);
		ss_index_hit *h;
		int n = ss_index_query(ix, query, k, NULL, 0, &h, em);
		if (n < 0)
			fail_msg("query %d (%s): %s", q, query, em);
		fts5_compare(top, one, expr, k, query, q, h, n);
		n_matched += n > 0;
		ss_index_hits_free(h, n);
	}
	/* the comparison is not empty-handed */
	assert_true(n_matched > N_Q / 2);
	ss_index_close(ix);
	sqlite3_finalize(top);
	sqlite3_finalize(one);
	sqlite3_close(ref);
	for (int i = 0; i < N_DOCS; i++)
		free(texts[i]);
}

/* Proximity (BM25TP): a top k is the head of the ranking of every
 * document (k = all, where no bound prunes); a document's score is
 * BM25's plus a proximity part >= 0; and on a small corpus the score is
 * the formula's, by hand. */
static void test_proximity(void **state)
{
	enum { N_DOCS = 800, N_Q = 60 };
	static char ids[N_DOCS][16], *texts[N_DOCS];
	uint64_t x = 777;
	sqlite3 *ref = phrase_corpus(path_in("p.db"), N_DOCS, texts, ids, &x);
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("p.db"), em), 0);
	for (int q = 0; q < N_Q; q++) {
		char query[256];
		size_t qn = 0;
		for (int i = 0; i < 2 + q % 4; i++) {
			char w[32];
			word_at(texts[(ss_splitmix64(&x) >> 40) % N_DOCS], i, w, sizeof w);
			qn += (size_t)snprintf(query + qn, sizeof query - qn, "%s%s", qn ? " " : "", w);
		}
		assert_int_equal(ss_index_set_query(ix, 0, em), 0);
		ss_index_hit *plain, *all, *h;
		int np = ss_index_query(ix, query, N_DOCS, NULL, 0, &plain, em);
		assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PROXIMITY, em), 0);
		int na = ss_index_query(ix, query, N_DOCS, NULL, 0, &all, em);
		assert_int_equal(na, np);
		for (int r = 0; r < na; r++)
			assert_true(all[r].score >= score_of(plain, np, all[r].id) * (1 - 1e-12));
		int k = 1 + q % 10;
		int n = ss_index_query(ix, query, k, NULL, 0, &h, em);
		assert_int_equal(n, k < na ? k : na);
		/* rank by rank the same score, held by that document (ties at
		 * the k-th score are cut by rid, shown by id) */
		for (int r = 0; r < n; r++) {
			assert_true(h[r].score == all[r].score);
			assert_true(score_of(all, na, h[r].id) == h[r].score);
		}
		ss_index_hits_free(plain, np);
		ss_index_hits_free(all, na);
		ss_index_hits_free(h, n);
	}
	ss_index_close(ix);
	sqlite3_close(ref);
	for (int i = 0; i < N_DOCS; i++)
		free(texts[i]);

	/* By hand: 10 documents, "a b" adjacent in d0, 2 apart in d1. */
	static const doc small[] = { { "d0", "a b z" }, { "d1", "a z b" }, { "d2", "z z z" }, { "d3", "z z z" },
				     { "d4", "z z z" }, { "d5", "z z z" }, { "d6", "z z z" }, { "d7", "z z z" },
				     { "d8", "z z z" }, { "d9", "z z z" } };
	write_docs(path_in("s.tokens"), path_in("s.states"), small, 10, "fpA");
	const char *in[] = { path_in("s.tokens"), path_in("s.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("s.db"), in, 2, NULL, &nt), 0);
	assert_int_equal(ss_index_open(&ix, path_in("s.db"), em), 0);
	assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PROXIMITY, em), 0);
	ss_index_hit *h;
	assert_int_equal(ss_index_query(ix, "a b", 5, NULL, 0, &h, em), 2);
	double idf = log((10 - 2 + 0.5) / (2 + 0.5)), kk = 1.2 * (0.25 + 0.75 * 3 / 3.0);
	double bm = 2 * idf * 1 * 2.2 / (1 + kk);
	for (int d = 1; d <= 2; d++) {
		double acc = idf / (d * d);
		double want = bm + 2 * 1.0 * acc * 2.2 / (acc + kk);
		assert_string_equal(h[d - 1].id, d == 1 ? "d0" : "d1");
		if (fabs(h[d - 1].score - want) > 1e-12 * want)
			fail_msg("d%d: %.15g, want %.15g", d - 1, h[d - 1].score, want);
	}
	ss_index_hits_free(h, 2);
	/* Bad phrases: one line naming the problem. */
	assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PHRASES, em), 0);
	assert_int_equal(ss_index_query(ix, "a \"b z", 5, NULL, 0, &h, em), SS_ERR_INVALID);
	assert_non_null(strstr(em, "unbalanced quote"));
	assert_int_equal(ss_index_query(ix, "a \" ,; \"", 5, NULL, 0, &h, em), SS_ERR_INVALID);
	assert_non_null(strstr(em, "empty phrase"));
	char longq[1024] = "\"";
	for (int i = 0; i < 65; i++)
		strcat(longq, "z ");
	strcat(longq, "\"");
	assert_int_equal(ss_index_query(ix, longq, 5, NULL, 0, &h, em), SS_ERR_INVALID);
	assert_non_null(strstr(em, "65 words, at most 64"));
	/* 64 is fine */
	longq[1 + 2 * 64] = '"';
	longq[2 + 2 * 64] = 0;
	assert_int_equal(ss_index_query(ix, longq, 5, NULL, 0, &h, em), 0);
	ss_index_close(ix);
}

/* An index without positions (as a build before them left it) refuses
 * phrases and proximity naming the rebuild, answers plain queries, and
 * gets its positions from its texts at the next build. */
static void test_positions_migrated(void **state)
{
	char em[SS_ERRMSG_MAX];
	sqlite3 *db;
	assert_int_equal(sqlite3_open(path_in("idx.db"), &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "DROP TABLE positions; DELETE FROM meta WHERE key = 'positions'", 0, 0, 0),
			 SQLITE_OK);
	sqlite3_close(db);
	ss_index *ix;
	ss_index_hit *h;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	int n = ss_index_query(ix, "fox", 3, NULL, 0, &h, em);
	assert_true(n > 0);
	ss_index_hits_free(h, n);
	assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PHRASES, em), 0);
	assert_int_equal(ss_index_query(ix, "\"the fox\"", 3, NULL, 0, &h, em), SS_ERR_UNSUPPORTED);
	assert_non_null(strstr(em, "ss-retrieve build --index"));
	ss_index_close(ix);
	notes nt = {0};
	assert_int_equal(build(path_in("idx.db"), NULL, 0, NULL, &nt), 0);
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PHRASES | SS_INDEX_QUERY_PROXIMITY, em), 0);
	n = ss_index_query(ix, "\"the fox\"", 3, NULL, 0, &h, em);
	if (n < 0)
		fail_msg("%s", em);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
}

/* Phrase queries of q_seed's sequence on the documents texts[0..n)
 * ("p<i>" in index ix), each checked against FTS5's bm25() (ref): phrases
 * of 2 to 4 words from anywhere in a document, late positions of long
 * documents included. */
static void phrases_exact(ss_index *ix, sqlite3 *ref, char **texts, int n, uint64_t q_seed)
{
	sqlite3_stmt *top, *one;
	fts5_ranking(ref, &top, &one);
	char em[SS_ERRMSG_MAX];
	assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PHRASES, em), 0);
	uint64_t x = q_seed;
	for (int q = 0; q < 80; q++) {
		const char *src = texts[(ss_splitmix64(&x) >> 40) % (uint64_t)n];
		int words = 1;
		for (const char *c = src; (c = strchr(c, ' ')); c++)
			words++;
		int len = 2 + q % 3, at = (int)((ss_splitmix64(&x) >> 40) % (uint64_t)(words > len ? words - len + 1 : 1));
		char w[32], query[256];
		size_t qn = 0;
		qn += (size_t)snprintf(query + qn, sizeof query - qn, "\"");
		for (int i = 0; i < len; i++) {
			word_at(src, at + i, w, sizeof w);
			qn += (size_t)snprintf(query + qn, sizeof query - qn, "%s%s", i ? " " : "", w);
		}
		snprintf(query + qn, sizeof query - qn, "\"");
		int k = q % 2 ? 3 : 20;
		ss_index_hit *h;
		int got = ss_index_query(ix, query, k, NULL, 0, &h, em);
		if (got < 0)
			fail_msg("query %d (%s): %s", q, query, em);
		fts5_compare(top, one, query, k, query, q, h, got);
		assert_true(got > 0); /* the phrase is in src */
		ss_index_hits_free(h, got);
	}
	sqlite3_finalize(top);
	sqlite3_finalize(one);
}

/* Each term's positions beside its postings (term_positions, meta.positions
 * '2'): exact on short documents (blocks of one byte a position) and long
 * ones (past 256 words: varint blocks); an index whose meta.positions is
 * '1' (built before them, or since by a build that left them stale) reads
 * the documents' positions instead, as exactly, and gets them back at its
 * next build; damaged ones are SS_ERR_FORMAT. */
static void test_term_positions(void **state)
{
	enum { N_DOCS = 300 };
	static char ids[N_DOCS][16], *texts[N_DOCS];
	static doc docs[N_DOCS];
	uint64_t x = 4711;
	for (int i = 0; i < N_DOCS; i++) {
		/* the last third long: 12 pieces of 8 to 37 words (the first
		 * blocks of postings are then of short documents alone) */
		int pieces = i < 2 * N_DOCS / 3 ? 1 : 12;
		size_t len = 0;
		texts[i] = NULL;
		for (int p = 0; p < pieces; p++) {
			char *t = zipf_text(&x, 8, 30, 60, 0);
			size_t tn = strlen(t);
			texts[i] = realloc(texts[i], len + tn + 2);
			assert_non_null(texts[i]);
			if (len)
				texts[i][len++] = ' ';
			memcpy(texts[i] + len, t, tn + 1);
			len += tn;
			free(t);
		}
		snprintf(ids[i], sizeof ids[i], "p%d", i);
		docs[i] = (doc){ ids[i], texts[i] };
	}
	write_docs(path_in("tp.tokens"), path_in("tp.states"), docs, N_DOCS, "fpA");
	const char *in[] = { path_in("tp.tokens"), path_in("tp.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("tp.db"), in, 2, NULL, &nt), 0);
	sqlite3 *ref = fts5_reference(texts, N_DOCS), *db;
	sqlite3_stmt *st;
	char em[SS_ERRMSG_MAX];
	ss_index *ix;

	/* both kinds of block are there */
	assert_int_equal(sqlite3_open(path_in("tp.db"), &db), SQLITE_OK);
	/* (a first block of one byte a position: the top bit of its end, the
	 * blob's 4th byte, 7th and 8th hex digits; the positions past 255 of
	 * the long documents are in varint blocks) */
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT (SELECT value FROM meta WHERE key = 'positions'),"
						" (SELECT count(*) FROM term_positions),"
						" (SELECT sum(substr(hex(pos), 7, 1) >= '8') FROM term_positions)",
					    -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "2");
	assert_true(sqlite3_column_int(st, 1) > 50);
	assert_true(sqlite3_column_int(st, 2) > 0);
	sqlite3_finalize(st);
	assert_int_equal(ss_index_open(&ix, path_in("tp.db"), em), 0);
	phrases_exact(ix, ref, texts, N_DOCS, 99);
	ss_index_close(ix);

	/* the layout before: term_positions stale (here zeroed), never read */
	assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = '1' WHERE key = 'positions';"
					  "UPDATE term_positions SET pos = zeroblob(length(pos))", 0, 0, 0), SQLITE_OK);
	assert_int_equal(ss_index_open(&ix, path_in("tp.db"), em), 0);
	phrases_exact(ix, ref, texts, N_DOCS, 99);
	ss_index_close(ix);
	/* the next build writes them again */
	assert_int_equal(build(path_in("tp.db"), NULL, 0, NULL, &nt), 0);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'positions'", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "2");
	sqlite3_finalize(st);
	assert_int_equal(ss_index_open(&ix, path_in("tp.db"), em), 0);
	phrases_exact(ix, ref, texts, N_DOCS, 99);
	ss_index_close(ix);

	/* damaged: a block table past the blob's end, a blob cut short */
	static const char *damage[] = {
		"UPDATE term_positions SET pos = x'ffffff7f' || substr(pos, 5)",
		"UPDATE term_positions SET pos = substr(pos, 1, length(pos) - 1)",
	};
	for (size_t d = 0; d < sizeof damage / sizeof *damage; d++) {
		assert_int_equal(sqlite3_exec(db, "SAVEPOINT d", 0, 0, 0), SQLITE_OK);
		assert_int_equal(sqlite3_exec(db, damage[d], 0, 0, 0), SQLITE_OK);
		assert_int_equal(sqlite3_exec(db, "RELEASE d", 0, 0, 0), SQLITE_OK);
		assert_int_equal(ss_index_open(&ix, path_in("tp.db"), em), 0);
		assert_int_equal(ss_index_set_query(ix, SS_INDEX_QUERY_PHRASES, em), 0);
		ss_index_hit *h;
		/* a phrase of t1 (the commonest word) after every word it follows */
		int rc = 0;
		char q[64];
		for (int w = 1; w <= 60 && rc != SS_ERR_FORMAT; w++) {
			snprintf(q, sizeof q, "\"t%d t1\"", w);
			rc = ss_index_query(ix, q, 5, NULL, 0, &h, em);
			if (rc > 0)
				ss_index_hits_free(h, rc);
		}
		assert_int_equal(rc, SS_ERR_FORMAT);
		assert_non_null(strstr(em, "damaged"));
		ss_index_close(ix);
		assert_int_equal(build(path_in("tp.db"), NULL, 0, NULL, &nt), 0);
	}
	sqlite3_close(db);
	sqlite3_close(ref);
	for (int i = 0; i < N_DOCS; i++)
		free(texts[i]);
}

/* The pruned top k (MaxScore, block maxima) is the exhaustive one for BM25
 * parameters other than those the block maxima were stored for, and with
 * exact copies of documents (ties at the k-th score, as in the scale
 * bench's copies): a search with k = every document keeps no k-th score,
 * so it prunes nothing and is the reference. */
static void test_top_k_exact_other_params_and_copies(void **state)
{
	enum { N_TEXTS = 900, COPIES = 3, N_DOCS = N_TEXTS * COPIES, N_Q = 40 };
	static doc docs[N_DOCS];
	static char ids[N_DOCS][16], *texts[N_TEXTS];
	uint64_t x = 777;
	for (int i = 0; i < N_TEXTS; i++)
		texts[i] = zipf_text(&x, 10, 60, 1500, 0);
	/* Copies far apart in rid order: text i is documents i, i + N_TEXTS... */
	for (int c = 0; c < COPIES; c++)
		for (int i = 0; i < N_TEXTS; i++) {
			int d = c * N_TEXTS + i;
			snprintf(ids[d], sizeof ids[d], "c%d-%d", c, i);
			docs[d] = (doc){ ids[d], texts[i] };
		}
	write_docs(path_in("c.tokens"), path_in("c.states"), docs, N_DOCS, "fpA");
	const char *in[] = { path_in("c.tokens"), path_in("c.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("c.db"), in, 2, NULL, &nt), 0);
	static const double params[][2] = { { 1.2, 0.75 }, { 3, 0 }, { 0.5, 1 }, { 20, 0.3 } };
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("c.db"), em), 0);
	for (int p = 0; p < 4; p++) {
		assert_int_equal(ss_index_set_bm25(ix, params[p][0], params[p][1], em), 0);
		for (int q = 0; q < N_Q; q++) {
			uint64_t pick = ss_splitmix64(&x) >> 40;
			char query[1200];
			if (q % 2) {
				snprintf(query, sizeof query, "%s", texts[pick % N_TEXTS]);
			} else {
				size_t qn = 0;
				for (int w = 0; w < 2 + q % 12; w++) {
					int r = 1 + (int)((ss_splitmix64(&x) >> 40) % 60);
					qn += (size_t)snprintf(query + qn, sizeof query - qn, "%st%d", w ? " " : "", r);
				}
			}
			ss_index_hit *all, *h;
			int n_all = ss_index_query(ix, query, N_DOCS, NULL, 0, &all, em);
			assert_true(n_all >= 1);
			int k = q % 4 == 0 ? 1 : q % 4 == 1 ? 10 : q % 4 == 2 ? 2 * COPIES + 1 : 30;
			int n = ss_index_query(ix, query, k, NULL, 0, &h, em);
			assert_int_equal(n, n_all < k ? n_all : k);
			for (int r = 0; r < n; r++) {
				/* The k best scores rank by rank, each held by the
				 * document named. */
				if (fabs(h[r].score - all[r].score) > 1e-12 * all[r].score)
					fail_msg("k1 %g b %g query %d rank %d: score %.15g, exhaustive %.15g", params[p][0],
						 params[p][1], q, r + 1, h[r].score, all[r].score);
				assert_true(fabs(score_of(all, n_all, h[r].id) - h[r].score) <= 1e-12 * h[r].score);
			}
			ss_index_hits_free(h, n);
			ss_index_hits_free(all, n_all);
		}
	}
	ss_index_close(ix);
	for (int i = 0; i < N_TEXTS; i++)
		free(texts[i]);
}

/* A word cut into several tokens ("U.S.") is searched as one compound
 * term: the document that writes it ranks first, before one that holds its
 * tokens apart more often (as the phrase queries of schema 1 ranked them). */
static void test_compound_words(void **state)
{
	static const doc d[] = {
		{ "c0", "Troops of the U.S. army crossed the river, e.g. at dawn." },
		{ "c1", "Part U, section S: the s curve, the u bend, s and u again; e and g." },
		{ "c2", "A quiet village by the river." },
		{ "c3", "The army rested in the village." },
		{ "c4", "Dawn came over the hills." },
		{ "c5", "Boats crossed the lake at night." },
	};
	write_docs(path_in("c.tokens"), path_in("c.states"), d, sizeof d / sizeof *d, "fpA");
	const char *in[] = { path_in("c.tokens"), path_in("c.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("c.db"), in, 2, NULL, &nt), 0);
	const char *db = path_in("c.db");
	assert_string_equal(top1(db, "U.S.", NULL, 0), "c0");
	assert_string_equal(top1(db, "e.g.", NULL, 0), "c0");
	assert_string_equal(top1(db, "the u.s", NULL, 0), "c0");
	/* Words apart are tokens apart. */
	assert_string_equal(top1(db, "U. S.", NULL, 0), "c1");
}

/* Damaged postings are an error naming the term, never a crash. */
static void test_damaged_postings(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	ss_index_hit *h;
	const char *bad[] = {
		"UPDATE terms SET postings = x'01000000' WHERE term = 'fox'",           /* no skip table */
		"UPDATE terms SET postings = x'ffffff7f' WHERE term = 'fox'",           /* 2^31 blocks */
		"UPDATE terms SET postings = x'01000000' || x'05000000' || x'40000000' || x'0000803f'"
		" || x'8080' WHERE term = 'fox'",                                       /* block past the end */
		"UPDATE terms SET postings = x'01000000' || x'05000000' || x'02000000' || x'0000803f'"
		" || x'8080' WHERE term = 'fox'",                                       /* unterminated varint */
		"UPDATE bm25 SET doclen = x'00'",                                       /* lengths cut short */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		copy_file(path_in("idx.db"), path_in("bad.db"));
		sqlite3 *s;
		assert_int_equal(sqlite3_open(path_in("bad.db"), &s), SQLITE_OK);
		assert_int_equal(sqlite3_exec(s, bad[i], 0, 0, 0), SQLITE_OK);
		sqlite3_close(s);
		assert_int_equal(ss_index_open(&ix, path_in("bad.db"), em), 0);
		assert_int_equal(ss_index_query(ix, "fox", 3, NULL, 0, &h, em), SS_ERR_FORMAT);
		assert_non_null(strstr(em, "damaged"));
		ss_index_close(ix);
	}
}

/* An index kept open sees a later build, with the new corpus statistics. */
static void test_reader_sees_later_build(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix, *fresh;
	ss_index_hit *h, *h2;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_query(ix, "glaciers ocean", 3, NULL, 0, &h, em), 2);
	ss_index_hits_free(h, 2);
	const doc more[] = { { "d9", "glaciers carve valleys" }, { "d10", "glaciers reach the ocean" } };
	write_docs(path_in("more.tokens"), path_in("shard1.states"), more, 2, "fpA");
	const char *in[] = { path_in("more.tokens"), path_in("shard1.states") };
	notes nt = {0};
	assert_int_equal(build(path_in("idx.db"), in, 2, NULL, &nt), 0);
	int n = ss_index_query(ix, "glaciers ocean", 3, NULL, 0, &h, em);
	assert_int_equal(n, 3);
	assert_string_equal(h[0].id, "d10");
	assert_int_equal(ss_index_open(&fresh, path_in("idx.db"), em), 0);
	assert_int_equal(ss_index_query(fresh, "glaciers ocean", 3, NULL, 0, &h2, em), 3);
	for (int i = 0; i < n; i++) {
		assert_string_equal(h[i].id, h2[i].id);
		assert_true(h[i].score == h2[i].score);
	}
	ss_index_hits_free(h, n);
	ss_index_hits_free(h2, n);
	ss_index_close(fresh);
	ss_index_close(ix);
}

/* The text of `id` in db: malloc'ed, "" when not stored, NULL on error. */
static char *text_of(const char *db, const char *id)
{
	char em[SS_ERRMSG_MAX], *text;
	size_t len;
	ss_index *ix;
	if (ss_index_open(&ix, db, em))
		return NULL;
	int rc = ss_index_text(ix, id, &text, &len, em);
	ss_index_close(ix);
	if (rc)
		return NULL;
	if (text)
		assert_int_equal(strlen(text), len);
	return text ? text : strdup("");
}

static void test_texts(void **state)
{
	char *t = text_of(path_in("idx.db"), "d4");
	assert_non_null(t);
	assert_string_equal(t, corpus[4].text);
	free(t);
	assert_null(text_of(path_in("idx.db"), "nope"));
	/* An index from before the texts table: its documents have none, and
	 * a build adds the table and the texts of what it adds. */
	const char *old = path_in("old.db");
	copy_file(path_in("idx.db"), old);
	sql_on(old, "DROP TABLE texts");
	assert_non_null(t = text_of(old, "d4"));
	assert_string_equal(t, "");
	free(t);
	const doc again[] = { { "d1", "sailing ships cross the stormy atlantic ocean" } };
	write_docs(path_in("again.tokens"), NULL, again, 1, "fpA");
	const char *in[] = { path_in("again.tokens") };
	assert_int_equal(build(old, in, 1, NULL, NULL), 0);
	assert_non_null(t = text_of(old, "d1"));
	assert_string_equal(t, again[0].text);
	free(t);
	assert_non_null(t = text_of(old, "d4"));
	assert_string_equal(t, "");
	free(t);
	/* A row whose length is not the document's (left by a build that did
	 * not know the table) is not its text. */
	sql_on(old, "INSERT INTO texts SELECT rid, 'stale' FROM docs WHERE id = 'd4'");
	assert_non_null(t = text_of(old, "d4"));
	assert_string_equal(t, "");
	free(t);
}

typedef struct {
	int n;
	char ids[8][16];
	int64_t n_terms;
} doc_list;

static int collect(void *ctx, const ss_index_doc *d)
{
	doc_list *l = ctx;
	if (l->n < 8)
		snprintf(l->ids[l->n], sizeof l->ids[0], "%s", d->id);
	l->n++;
	l->n_terms += d->n_terms;
	assert_true(d->has_text);
	assert_int_equal(d->text_len, (int64_t)strlen(corpus[d->id[1] - '0'].text));
	assert_int_equal(d->text_tokens, d->n_tokens);
	assert_non_null(strstr(d->path, "/shard0.states"));
	assert_string_equal(d->fingerprint, "fpA");
	return l->n == 100 ? 42 : 0;
}

static void test_docs_and_info(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, path_in("idx.db"), em), 0);
	doc_list l = {0};
	assert_int_equal(ss_index_docs(ix, NULL, collect, &l, em), 0);
	assert_int_equal(l.n, N_CORPUS);
	for (int i = 0; i < N_CORPUS; i++)
		assert_string_equal(l.ids[i], corpus[i].id);
	doc_list one = {0};
	assert_int_equal(ss_index_docs(ix, "d2", collect, &one, em), 0);
	assert_int_equal(one.n, 1);
	assert_int_equal(ss_index_docs(ix, "nope", collect, &one, em), SS_ERR_NOTFOUND);
	assert_int_equal(ss_index_docs(ix, "d2", NULL, NULL, em), 0);
	ss_index_info in;
	assert_int_equal(ss_index_info_get(ix, &in, em), 0);
	assert_int_equal(in.n_docs, N_CORPUS);
	assert_int_equal(in.n_files, 1);
	assert_int_equal(in.n_texts, N_CORPUS);
	assert_int_equal(in.n_doc_terms, l.n_terms);
	int64_t words = 0, bytes = 0;
	for (int i = 0; i < N_CORPUS; i++) {
		words += n_words(corpus[i].text);
		bytes += (int64_t)strlen(corpus[i].text);
	}
	assert_int_equal(in.n_tokens, words);
	assert_int_equal(in.text_bytes, bytes);
	assert_true(in.n_terms > 20 && in.n_terms <= words + 4);
	assert_true(in.index_bytes > 0);
	assert_string_equal(in.fingerprint, "fpA");
	ss_index_close(ix);
}

/* Top hits of q as "id score;..." into buf. */
static void ranking(const char *db, const char *q, char *buf, size_t cap)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	assert_int_equal(ss_index_open(&ix, db, em), 0);
	ss_index_hit *h;
	int n = ss_index_query(ix, q, 10, NULL, 0, &h, em);
	assert_true(n >= 0);
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < n && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s %.17g;", h[i].id, h[i].score);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
}

static void test_delete(void **state)
{
	char em[SS_ERRMSG_MAX], a[1024], b[1024];
	ss_index *ix;
	const char *db = path_in("idx.db");
	/* The reference: the corpus without d3 and d5, built at once. */
	doc rest[N_CORPUS];
	int n_rest = 0;
	for (int i = 0; i < N_CORPUS; i++)
		if (i != 3 && i != 5)
			rest[n_rest++] = corpus[i];
	write_docs(path_in("rest.tokens"), path_in("rest.states"), rest, n_rest, "fpA");
	const char *in[] = { path_in("rest.tokens"), path_in("rest.states") };
	assert_int_equal(build(path_in("rest.db"), in, 2, NULL, NULL), 0);

	/* An unknown id: SS_ERR_NOTFOUND, and the build rolls back. */
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_delete(ix, "d3", em), 0);
	assert_int_equal(ss_index_delete(ix, "nope", em), SS_ERR_NOTFOUND);
	assert_non_null(strstr(em, "nope"));
	ss_index_close(ix);
	assert_string_equal(top1(db, "forest night", NULL, 0), "d3");

	ss_index_build_stats st;
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_delete(ix, "d3", em), 0);
	assert_int_equal(ss_index_delete(ix, "d5", em), 0);
	assert_int_equal(ss_index_delete(ix, "d5", em), SS_ERR_NOTFOUND);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, &st, em), 0);
	ss_index_close(ix);
	assert_int_equal(st.n_deleted, 2);
	assert_int_equal(st.n_docs, N_CORPUS - 2);
	/* Scores as the index built without them (N, avgdl, df all changed). */
	const char *qs[] = { "fox forest night", "ocean moon tides", "the" };
	for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
		ranking(db, qs[i], a, sizeof a);
		ranking(path_in("rest.db"), qs[i], b, sizeof b);
		assert_string_equal(a, b);
	}
	assert_null(text_of(db, "d3"));

	/* Deleted and added back in one build: added anew, with its text. */
	const doc d5[] = { corpus[5] };
	write_docs(path_in("d5.tokens"), path_in("d5.states"), d5, 1, "fpA");
	const char *in5[] = { path_in("d5.tokens"), path_in("d5.states") };
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_delete(ix, "d4", em), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ss_index_add_stream(ix, in5[i], 0, NULL, NULL, NULL, em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, &st, em), 0);
	ss_index_close(ix);
	assert_int_equal(st.n_added, 1);
	assert_int_equal(st.n_replaced, 0);
	assert_int_equal(st.n_deleted, 1);
	char *t = text_of(db, "d5");
	assert_non_null(t);
	assert_string_equal(t, corpus[5].text);
	free(t);
	assert_null(text_of(db, "d4"));
	assert_string_equal(top1(db, "moon", NULL, 0), "d5");
}

/* The length of document id's state record in db (0 when stateless). */
static uint64_t state_len(const char *db, const char *id)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	ss_index_hit h;
	assert_int_equal(ss_index_open(&ix, db, em), 0);
	assert_int_equal(ss_index_lookup(ix, id, &h, em), 0);
	uint64_t len = h.stateless ? 0 : h.length;
	ss_index_hit_clear(&h);
	ss_index_close(ix);
	return len;
}

/* The int64 sql gives on db (a test reaching past the API). */
static int64_t sql_int(const char *db, const char *sql)
{
	sqlite3 *s;
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(s);
	return v;
}

static int find_stateless(void *ctx, const ss_index_doc *d)
{
	int *n = ctx;
	assert_true(d->has_tokens);
	if (d->stateless) {
		assert_null(d->path);
		assert_string_equal(d->dtype, "bf16");
		assert_string_equal(d->fingerprint, "fpA");
		(*n)++;
	} else {
		assert_null(d->dtype);
	}
	return 0;
}

/* The recompute tier: tokens kept per document, a state budget ranked by
 * hits then length, stateless hits (and their dtype), deletes. */
static void test_state_budget(void **state)
{
	char em[SS_ERRMSG_MAX];
	/* Token ids that tell the documents apart; bf16 states. */
	ss_writer *tw, *sw;
	assert_int_equal(ss_writer_open(&tw, path_in("tier.tokens"), 0, em), 0);
	assert_int_equal(ss_writer_open(&sw, path_in("tier.states"), 0, em), 0);
	for (int i = 0; i < N_CORPUS; i++) {
		int32_t tok[64];
		int64_t nt = n_words(corpus[i].text);
		for (int j = 0; j < nt; j++)
			tok[j] = 1000 * (i + 1) + j;
		ss_tokens t = { (char *)corpus[i].id, tok, nt, (char *)corpus[i].text, strlen(corpus[i].text), NULL };
		assert_int_equal(ss_writer_put_tokens(tw, &t, NULL), 0);
		ss_state st;
		fill_state(&st, corpus[i].id, "fpA", nt);
		st.dtype = SS_DTYPE_BF16;
		assert_int_equal(ss_writer_put_state(sw, &st, NULL), 0);
		ss_state_free(&st);
	}
	assert_int_equal(ss_writer_close(tw, em), 0);
	assert_int_equal(ss_writer_close(sw, em), 0);
	const char *db = path_in("tier.db");
	const char *in[] = { path_in("tier.tokens"), path_in("tier.states") };
	assert_int_equal(build(db, in, 2, NULL, NULL), 0);
	assert_int_equal(sql_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"), 3);

	/* The tokens as given. */
	ss_index *ix;
	int32_t *tok;
	int64_t nt;
	assert_int_equal(ss_index_open(&ix, db, em), 0);
	assert_int_equal(ss_index_tokens(ix, "d2", &tok, &nt, em), 0);
	assert_int_equal(nt, n_words(corpus[2].text));
	for (int j = 0; j < nt; j++)
		assert_int_equal(tok[j], 3000 + j);
	free(tok);
	assert_int_equal(ss_index_tokens(ix, "nope", &tok, &nt, em), SS_ERR_NOTFOUND);
	ss_index_close(ix);

	/* Hits rank first (d5 3, d0 1; an unknown id is ignored), then length
	 * (d3 and d4 have 8 words, d3 first by id): a budget of the states of
	 * d5, d0 and d3 keeps those three. */
	uint64_t budget = state_len(db, "d5") + state_len(db, "d0") + state_len(db, "d3");
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_set_state_budget(ix, -2, em), SS_ERR_INVALID);
	assert_int_equal(ss_index_add_hits(ix, "d5", 0, em), SS_ERR_INVALID);
	assert_int_equal(ss_index_set_state_budget(ix, (int64_t)budget, em), 0);
	assert_int_equal(ss_index_add_hits(ix, "d5", 2, em), 0);
	assert_int_equal(ss_index_add_hits(ix, "d0", 1, em), 0);
	assert_int_equal(ss_index_add_hits(ix, "d5", 1, em), 0);
	assert_int_equal(ss_index_add_hits(ix, "nope", 5, em), 0);
	ss_index_build_stats bs;
	assert_int_equal(ss_index_commit(ix, NULL, NULL, &bs, em), 0);
	ss_index_close(ix);
	assert_int_equal(bs.n_stateless, 3);
	assert_int_equal(bs.n_dropped_states, 3);
	assert_int_equal(bs.state_bytes, (int64_t)budget);
	assert_int_equal(bs.n_docs, N_CORPUS);
	assert_int_equal(sql_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"), 4);
	const char *kept[] = { "d0", "d3", "d5" }, *dropped[] = { "d1", "d2", "d4" };
	for (int i = 0; i < 3; i++) {
		assert_true(state_len(db, kept[i]) > 0);
		assert_int_equal(state_len(db, dropped[i]), 0);
	}

	/* A query hits stateless documents: no path, the dropped dtype; their
	 * state cannot be read, their tokens can. */
	assert_int_equal(ss_index_open(&ix, db, em), 0);
	ss_index_hit *h;
	int n = ss_index_query(ix, "ocean", 5, NULL, 0, &h, em);
	assert_int_equal(n, 2); /* d1 (stateless), d5 (stored) */
	for (int i = 0; i < n; i++) {
		const ss_record *rec;
		int d1 = !strcmp(h[i].id, "d1");
		assert_int_equal(h[i].stateless, d1);
		if (d1) {
			assert_null(h[i].path);
			assert_int_equal(h[i].dtype, SS_DTYPE_BF16);
			assert_string_equal(h[i].fingerprint, "fpA");
			assert_int_equal(ss_index_read(ix, &h[i], 1, &rec, em), SS_ERR_NOTFOUND);
			assert_non_null(strstr(em, "no stored state"));
		} else {
			assert_int_equal(ss_index_read(ix, &h[i], 1, &rec, em), 0);
		}
	}
	ss_index_hits_free(h, n);
	assert_int_equal(ss_index_tokens(ix, "d1", &tok, &nt, em), 0);
	assert_int_equal(nt, n_words(corpus[1].text));
	assert_int_equal(tok[0], 2000);
	free(tok);
	int n_stateless = 0;
	assert_int_equal(ss_index_docs(ix, NULL, find_stateless, &n_stateless, em), 0);
	assert_int_equal(n_stateless, 3);
	ss_index_info info;
	assert_int_equal(ss_index_info_get(ix, &info, em), 0);
	assert_int_equal(info.n_stateless, 3);
	assert_int_equal(info.state_bytes, (int64_t)budget);
	assert_int_equal(info.n_files, 1);
	ss_index_close(ix);

	/* Deleting a stateless document forgets its tokens and its row; adding
	 * a state again stores it; with none stateless the schema is 3 again. */
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_delete(ix, "d1", em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, &bs, em), 0);
	ss_index_close(ix);
	assert_int_equal(bs.n_stateless, 2);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM tokens"), N_CORPUS - 1);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM stateless"), 2);
	const char *again[] = { path_in("tier.states") };
	notes nt2 = {0};
	assert_int_equal(build(db, again, 1, &bs, &nt2), 0);
	assert_int_equal(bs.n_stateless, 0);
	assert_int_equal(nt2.n_dropped, 1); /* d1's state, without its text now */
	assert_int_equal(sql_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"), 3);

	/* Text without tokens for a stateless document leaves it out. */
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_set_state_budget(ix, 0, em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, &bs, em), 0);
	ss_index_close(ix);
	assert_int_equal(bs.n_stateless, N_CORPUS - 1);
	assert_int_equal(bs.state_bytes, 0);
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_add_text(ix, "d4", "new text", 8, 2, em), 0);
	notes nt3 = {0};
	assert_int_equal(ss_index_commit(ix, note_cb, &nt3, &bs, em), 0);
	ss_index_close(ix);
	assert_int_equal(nt3.n_dropped, 1);
	assert_non_null(strstr(nt3.last, "d4: has no stored state and no tokens"));
	assert_int_equal(bs.n_docs, N_CORPUS - 2);
}

/* Whether files a and b hold the same bytes. */
static int same_file(const char *a, const char *b)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* A row id outside 1..SS_BM25_MAX_RID (an edited file: rids index the
 * document lengths in memory) makes a commit, by a delete or an add,
 * refuse the index as damaged, naming the document, and leave the file as
 * it was. ref: issue 32 item 1 (-2^32 + 100 wrote past the lengths, -5
 * crashed). */
static void test_hostile_rids(void **state)
{
	char em[SS_ERRMSG_MAX], sql[128];
	ss_index *ix;
	char bad[512], orig[512], idx[512];
	snprintf(bad, sizeof bad, "%s", path_in("bad.db"));
	snprintf(orig, sizeof orig, "%s", path_in("bad.orig"));
	snprintf(idx, sizeof idx, "%s", path_in("idx.db"));
	const long long rids[] = { -(1LL << 32) + 100, -5, 0, SS_BM25_MAX_RID + 1LL, (1LL << 32) + 1, INT64_MAX };
	for (size_t i = 0; i < sizeof rids / sizeof *rids; i++) {
		copy_file(idx, bad);
		snprintf(sql, sizeof sql, "UPDATE docs SET rid = %lld WHERE id = 'd3'", rids[i]);
		sql_on(bad, sql);
		copy_file(bad, orig);
		for (int add = 0; add < 2; add++) {
			assert_int_equal(ss_index_build_open(&ix, bad, em), 0);
			if (add)
				assert_int_equal(ss_index_add_stream(ix, path_in("docs.tokens"), 0, NULL, NULL, NULL, em), 0);
			else
				assert_int_equal(ss_index_delete(ix, "d0", em), 0);
			assert_int_equal(ss_index_commit(ix, NULL, NULL, NULL, em), SS_ERR_FORMAT);
			snprintf(sql, sizeof sql, "damaged index: document d3 has row id %lld,", rids[i]);
			assert_non_null(strstr(em, sql));
			ss_index_close(ix);
			assert_true(same_file(bad, orig));
		}
	}
}

static int count_docs(void *ctx, const ss_index_doc *d)
{
	(void)d;
	++*(int *)ctx;
	return 0;
}

/* A document row without an id (the schema edited to allow it) is a
 * damaged index wherever ids are read: a query that finds it, the list of
 * documents, a commit; never a crash or an error without a message. ref:
 * issue 32 item 3. */
static void test_null_id(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	ss_index_hit *h;
	const char *bad = path_in("bad.db"), *orig = path_in("bad.orig");
	copy_file(path_in("idx.db"), bad);
	int64_t rid = sql_int(bad, "SELECT rid FROM docs WHERE id = 'd3'");
	sql_on(bad, "PRAGMA writable_schema = ON;"
		    "UPDATE sqlite_master SET sql = replace(sql, 'id TEXT NOT NULL UNIQUE', 'id TEXT UNIQUE')"
		    " WHERE name = 'docs'");
	sql_on(bad, "UPDATE docs SET id = NULL WHERE id = 'd3'");
	copy_file(bad, orig);
	char want[64];
	snprintf(want, sizeof want, "damaged index: document row %lld has no id", (long long)rid);

	assert_int_equal(ss_index_open(&ix, bad, em), 0);
	assert_int_equal(ss_index_query(ix, "forest night", 3, NULL, 0, &h, em), SS_ERR_FORMAT);
	assert_non_null(strstr(em, want));
	int n = 0;
	em[0] = 0;
	assert_int_equal(ss_index_docs(ix, NULL, count_docs, &n, em), SS_ERR_FORMAT);
	assert_non_null(strstr(em, want));
	/* The other documents still answer. */
	assert_int_equal(ss_index_query(ix, "quantum", 3, NULL, 0, &h, em), 1);
	assert_string_equal(h[0].id, "d2");
	ss_index_hits_free(h, 1);
	ss_index_close(ix);

	assert_int_equal(ss_index_build_open(&ix, bad, em), 0);
	assert_int_equal(ss_index_delete(ix, "d0", em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, NULL, em), SS_ERR_FORMAT);
	assert_non_null(strstr(em, want));
	ss_index_close(ix);
	assert_true(same_file(bad, orig));
}

/* A write that SQLite refuses in the commit (here the document lengths
 * past a lowered SQLITE_LIMIT_LENGTH, as a rid near SS_BM25_MAX_RID
 * would be past the default 10^9 bytes) is reported, and the build rolls
 * back: the file as it was, its queries answered. ref: issue 32 item 6
 * (the failed bind went unchecked and committed NULL lengths). */
static void test_commit_write_refused(void **state)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	const char *db = path_in("idx.db"), *orig = path_in("idx.orig");
	/* d3 at row 5000, committed: lengths of 20004 bytes; every other value
	 * of the index is under 1000 bytes. */
	sql_on(db, "UPDATE docs SET rid = 5000 WHERE id = 'd3'");
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, NULL, em), 0);
	ss_index_close(ix);
	assert_string_equal(top1(db, "forest night", NULL, 0), "d3");
	copy_file(db, orig);

	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	sqlite3_limit(ix->db, SQLITE_LIMIT_LENGTH, 10000);
	assert_int_equal(ss_index_delete(ix, "d0", em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, NULL, em), SS_ERR_TOO_LARGE);
	assert_non_null(strstr(em, "writing corpus statistics: string or blob too big"));
	ss_index_close(ix);
	assert_true(same_file(db, orig));
	assert_string_equal(top1(db, "forest night", NULL, 0), "d3");
	assert_string_equal(top1(db, "lazy dog", NULL, 0), "d0");
}

/* A writer that, whenever the reader starts a statement reading texts or
 * tokens, tries at once (no busy wait) to delete every text and every
 * token: what a build committing between a query and its fetches does. */
typedef struct {
	sqlite3 *w;
	int tried, done;
} snapshot_writer;

static int snapshot_write(unsigned type, void *ctx, void *p, void *x)
{
	(void)type;
	(void)x;
	snapshot_writer *sw = ctx;
	const char *sql = sqlite3_sql(p);
	if (sql && (strstr(sql, "FROM texts") || strstr(sql, "FROM tokens"))) {
		sw->tried++;
		if (sqlite3_exec(sw->w, "BEGIN IMMEDIATE; DELETE FROM texts; DELETE FROM tokens; COMMIT", NULL, NULL,
				 NULL) == SQLITE_OK)
			sw->done++;
		else
			sqlite3_exec(sw->w, "ROLLBACK", NULL, NULL, NULL);
	}
	return 0;
}

/* Issue 32 item 7: a query's texts and a stateless hit's tokens are read in
 * the query's one read transaction, with its scores and locations: a build
 * that commits while the query fetches them changes nothing it returns
 * (read after the query, the texts were another snapshot's: another text,
 * or none). */
static void test_query_one_snapshot(void **state)
{
	char em[SS_ERRMSG_MAX];
	const char *db = path_in("idx.db");
	/* d1 stateless (a budget of every other state), with its tokens */
	ss_index *ix;
	int64_t budget = 0;
	for (int i = 0; i < N_CORPUS; i++)
		if (i != 1)
			budget += state_len(db, corpus[i].id);
	assert_int_equal(ss_index_build_open(&ix, db, em), 0);
	assert_int_equal(ss_index_set_state_budget(ix, budget, em), 0);
	for (int i = 0; i < N_CORPUS; i++) /* d1 ranks last */
		if (i != 1)
			assert_int_equal(ss_index_add_hits(ix, corpus[i].id, 1, em), 0);
	assert_int_equal(ss_index_commit(ix, NULL, NULL, NULL, em), 0);
	ss_index_close(ix);
	assert_int_equal(state_len(db, "d1"), 0);

	assert_int_equal(ss_index_open(&ix, db, em), 0);
	assert_int_equal(ss_index_set_fetch(ix, 4, em), SS_ERR_INVALID);
	assert_int_equal(ss_index_set_fetch(ix, SS_INDEX_FETCH_TEXT | SS_INDEX_FETCH_TOKENS, em), 0);
	snapshot_writer sw = {0};
	assert_int_equal(sqlite3_open(db, &sw.w), SQLITE_OK);
	sqlite3_trace_v2(ix->db, SQLITE_TRACE_STMT, snapshot_write, &sw);
	ss_index_hit *h;
	int n = ss_index_query(ix, "the ocean fox", 4, NULL, 0, &h, em);
	sqlite3_trace_v2(ix->db, 0, NULL, NULL);
	assert_int_equal(n, 4);
	assert_true(sw.tried > 0);
	assert_int_equal(sw.done, 0);
	int n_stateless = 0;
	for (int i = 0; i < n; i++) {
		const char *want = corpus[h[i].id[1] - '0'].text;
		assert_non_null(h[i].text);
		assert_string_equal(h[i].text, want);
		assert_int_equal(h[i].text_len, strlen(want));
		if (h[i].stateless) {
			n_stateless++;
			assert_non_null(h[i].tokens);
			assert_int_equal(h[i].n_stored_tokens, n_words(want));
		} else {
			assert_null(h[i].tokens);
		}
	}
	assert_int_equal(n_stateless, 1);
	ss_index_hits_free(h, n);
	/* The query over, the write goes through; the next query sees it. */
	assert_int_equal(sqlite3_exec(sw.w, "DELETE FROM texts; DELETE FROM tokens", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(sw.w);
	n = ss_index_query(ix, "the ocean fox", 4, NULL, 0, &h, em);
	assert_int_equal(n, 4);
	for (int i = 0; i < n; i++) {
		assert_null(h[i].text);
		assert_null(h[i].tokens);
	}
	ss_index_hits_free(h, n);
	/* Without fetch flags, neither is read. */
	assert_int_equal(ss_index_set_fetch(ix, 0, em), 0);
	assert_int_equal(ss_index_query(ix, "ocean", 4, NULL, 0, &h, em), 2);
	assert_null(h[0].text);
	ss_index_hits_free(h, 2);
	ss_index_close(ix);
}

/* URLs as shown: userinfo and query string never, what else is shown as
 * given; a path is not a URL. */
static void test_url_redact(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
		{ "http://h/a.states", "http://h/a.states" },
		{ "HTTPS://h:8443/x/a.states", "HTTPS://h:8443/x/a.states" },
		{ "https://alice:s3cret@h/a.states", "https://***@h/a.states" },
		{ "https://b.s3.amazonaws.com/a.states?X-Amz-Signature=s3cret&X-Amz-Expires=60",
		  "https://b.s3.amazonaws.com/a.states?***" },
		{ "http://u@h?sig=s3cret#frag", "http://***@h?***" },
		{ "http://h/p#frag@x", "http://h/p" },
		{ "http://a@b@h/p", "http://***@h/p" },
		{ "/data/a.states", "/data/a.states" },
		{ "ftp://u:p@h/a", "ftp://u:p@h/a" },
	};
	char buf[128];
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *got = ss_url_redact(cases[i][0], buf, sizeof buf);
		if (strcmp(got, cases[i][1]))
			fail_msg("%s: '%s', wanted '%s'", cases[i][0], got, cases[i][1]);
	}
	assert_true(ss_url_is_http("Http://h"));
	assert_false(ss_url_is_http("/http://h"));
	/* cut to the buffer, never past it */
	assert_string_equal(ss_url_redact("https://alice:pw@host/a", buf, 12), "https://***");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_build_and_query, setup, teardown),
		cmocka_unit_test_setup_teardown(test_query_escaping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exclude, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rebuild_replaces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incomplete_documents, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_mismatch_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_interrupted_build, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_state_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_versions_and_bad_index, setup, teardown),
		cmocka_unit_test_setup_teardown(test_state_stream_from_pipe_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_index_moves_with_shards, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_readers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_bad_state_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top_k_is_exhaustive_bm25, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top_k_exact_other_params_and_copies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_phrase_and_all_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proximity, setup, teardown),
		cmocka_unit_test_setup_teardown(test_positions_migrated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_term_positions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compound_words, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_postings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_sees_later_build, setup, teardown),
		cmocka_unit_test_setup_teardown(test_texts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_docs_and_info, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_state_budget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_rids, setup, teardown),
		cmocka_unit_test_setup_teardown(test_null_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_write_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_query_one_snapshot, setup, teardown),
		cmocka_unit_test(test_url_redact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
