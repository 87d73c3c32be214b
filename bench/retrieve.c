/*
 * retrieve — ss-retrieve's figures: index build time, query latency (median,
 * p95) and the time to emit the k = 10 states of a query, on an index of
 * 10,000 WikiText chunks with random states of the t1 golden dims (n_layer 2,
 * nheads 8, headdim 16, d_state 16, conv_dim 160, d_conv 4); then emit vs
 * compose for k = 10 states of mamba2-130m dims. Emitting copies the stored
 * frames verbatim (ss_index_copy); decoding and re-encoding each state is
 * timed beside it for scale. Prints figures; never fails on time.
 *
 * usage: retrieve [N_DOCS [N_QUERIES]]   (defaults 10000, 200)
 * Corpus: $SS_SHARED/data/corpora/wikitext-2-raw.test.hf-crlf.raw. Scratch
 * files go to a temporary directory under $TMPDIR (removed at the end).
 * Queries follow the paper's protocol: the first half of a chunk, with that
 * chunk excluded.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <fcntl.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ss.h"
#include "bench.h"

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "retrieve: %s: %s\n", what, msg);
	exit(1);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Prints median and p95 of t[0..n) seconds as ms. */
static void report(const char *what, double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, cmp_d);
	int p95 = (int)(0.95 * (n - 1) + 0.5);
	printf("  %-40s median %8.3f ms   p95 %8.3f ms   (n=%d)\n", what, t[n / 2] * 1e3, t[p95] * 1e3, n);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(b);
		return NULL;
	}
	fclose(f);
	b[n] = 0;
	*len = (size_t)n;
	return b;
}

/* Standard output to /dev/null (like a pipe to a fast consumer) and back:
 * to_null() returns the saved descriptor for from_null(). */
static int to_null(void)
{
	fflush(stdout);
	int saved = dup(1), fd = open("/dev/null", O_WRONLY);
	dup2(fd, 1);
	close(fd);
	return saved;
}

static void from_null(int saved)
{
	dup2(saved, 1);
	close(saved);
}

/* Emits hits h[0..n) as ss-retrieve does (validate all by metadata, then
 * copy each stored frame after its annotation, most relevant last) to
 * `path`; "-" = standard output, pointed at /dev/null. Returns seconds. */
static double emit(ss_index *ix, const ss_index_hit *h, int n, const char *path)
{
	char em[SS_ERRMSG_MAX];
	int saved = strcmp(path, "-") ? -1 : to_null();
	double t0 = bench_now();
	const ss_record *rec;
	ss_writer *w;
	for (int i = 0; i < n; i++)
		if (ss_index_read(ix, &h[i], 1, &rec, em))
			die("read", em);
	if (ss_writer_open(&w, path, 0, em))
		die(path, em);
	for (int i = n - 1; i >= 0; i--)
		if (ss_index_copy(ix, &h[i], w, em))
			die("emit", em[0] ? em : "write failed");
	if (ss_writer_close(w, em))
		die(path, em);
	double t = bench_now() - t0;
	if (saved >= 0)
		from_null(saved);
	return t;
}

/* The alternative to copying: decode each state, annotate and re-encode it
 * (zstd level 3) to standard output (/dev/null). keep (may be NULL)
 * receives keep[i] = the decoded state of h[i] (caller frees). Returns
 * seconds. */
static double emit_reencode(ss_index *ix, const ss_index_hit *h, int n, ss_state *keep)
{
	char em[SS_ERRMSG_MAX];
	int saved = to_null();
	double t0 = bench_now();
	const ss_record *rec;
	ss_writer *w;
	if (ss_writer_open(&w, "-", 0, em))
		die("-", em);
	for (int i = n - 1; i >= 0; i--) {
		ss_state st;
		if (ss_index_read(ix, &h[i], 0, &rec, em) || ss_record_state(rec, &st, em))
			die("emit", em);
		st.has_rank = 1;
		st.rank = h[i].rank;
		st.score = h[i].score;
		if (ss_writer_put_state(w, &st, NULL))
			die("emit", "write failed");
		if (keep)
			keep[i] = st;
		else
			ss_state_free(&st);
	}
	if (ss_writer_close(w, em))
		die("-", em);
	double t = bench_now() - t0;
	from_null(saved);
	return t;
}

/* The hits as a composition source, least relevant (last hit) first. */
struct hits_src {
	ss_index *ix;
	const ss_index_hit *h;
	int n;
};

static int read_hit(void *arg, size_t i, int meta_only, const ss_record **rec, char *em)
{
	const struct hits_src *s = arg;
	return ss_index_read(s->ix, &s->h[s->n - 1 - (int)i], meta_only, rec, em);
}

/* Emit and compose k = 10 states of mamba2-130m's size (19.4 MB f32 each):
 * emitting them (a copy of the stored frames), set against decoding and
 * re-encoding them and against composing them the way ss-compose does (plan
 * from the metadata, then one pass over the records). */
static void big_states(const char *dir)
{
	enum { K = 10, REPS = 3 };
	ss_state_dims d = { "mamba2", 24, 24, 64, 128, 1792, 4 };
	char spath[600], dbpath[600], tpath[600], opath[600], em[SS_ERRMSG_MAX];
	snprintf(spath, sizeof spath, "%s/big.states", dir);
	snprintf(tpath, sizeof tpath, "%s/big.tokens", dir);
	snprintf(dbpath, sizeof dbpath, "%s/big.db", dir);
	snprintf(opath, sizeof opath, "%s/big.out", dir);
	ss_writer *sw, *tw;
	ss_state s;
	if (ss_state_alloc(&s, &d) || ss_writer_open(&sw, spath, 0, em) || ss_writer_open(&tw, tpath, 0, em))
		die(spath, "cannot start");
	snprintf(s.fingerprint, sizeof s.fingerprint, "bench-130m-random");
	for (int i = 0; i < K; i++) {
		char id[16];
		snprintf(id, sizeof id, "big%d", i);
		/* Random mantissas, like real activations: zstd finds little to take. */
		for (size_t j = 0; j < ss_state_ssm_len(&d); j++)
			s.ssm[j] = (float)((int64_t)(next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t j = 0; j < ss_state_logdecay_len(&d); j++)
			s.logdecay[j] = -(float)(next() >> 40) / (float)(1 << 24) * 50.0f;
		s.id = id;
		s.n_tokens = 64;
		int32_t tok[1] = { 0 };
		ss_tokens t = { id, tok, 1, "common words", 12, NULL };
		if (ss_writer_put_state(sw, &s, NULL) || ss_writer_put_tokens(tw, &t, NULL))
			die(spath, "write failed");
		s.id = NULL;
	}
	ss_state_free(&s);
	if (ss_writer_close(sw, em) || ss_writer_close(tw, em))
		die(spath, em);
	ss_index *ix;
	if (ss_index_build_open(&ix, dbpath, em) || ss_index_add_stream(ix, tpath, 0, NULL, NULL, NULL, em) ||
	    ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) || ss_index_commit(ix, NULL, NULL, NULL, em))
		die(dbpath, em);
	ss_index_close(ix);
	if (ss_index_open(&ix, dbpath, em))
		die(dbpath, em);
	ss_index_hit *h;
	int n = ss_index_query(ix, "common", K, NULL, 0, &h, em);
	if (n != K)
		die("big query", em);
	printf("  k = %d states of mamba2-130m size (%.1f MB each, f32), best of %d:\n", K,
	       (ss_state_ssm_len(&d) + ss_state_conv_len(&d)) * 4 / 1e6, REPS);
	double best = 1e9, best_f = 1e9, best_re = 1e9;
	for (int r = 0; r < REPS; r++) {
		double t = emit(ix, h, n, "-");
		best = t < best ? t : best;
		t = emit(ix, h, n, opath);
		best_f = t < best_f ? t : best_f;
		t = emit_reencode(ix, h, n, NULL);
		best_re = t < best_re ? t : best_re;
	}
	printf("  %-40s %8.1f ms\n", "emit k states to a pipe (copy)", best * 1e3);
	printf("  %-40s %8.1f ms\n", "emit k states to a file (copy, fsync)", best_f * 1e3);
	printf("  %-40s %8.1f ms\n", "emit k states to a pipe (decode+encode)", best_re * 1e3);
	/* Compose as ss-compose does: plan from the decays, then stream. */
	best = 1e9;
	struct hits_src src = { ix, h, n };
	for (int r = 0; r < REPS; r++) {
		double t0 = bench_now();
		ss_compose_opts co = { SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN };
		ss_compose_run_opts ro = {.read = read_hit, .read_arg = &src, .n = (size_t)n};
		ss_compose_result res;
		if (ss_compose_run(&co, &ro, &res, em))
			die("compose", em);
		ss_state_free(&res.state);
		double t = bench_now() - t0;
		best = t < best ? t : best;
	}
	printf("  %-40s %8.1f ms   (read + picaso-r, as ss-compose)\n", "compose k states", best * 1e3);
	ss_index_hits_free(h, n);
	ss_index_close(ix);
	unlink(spath);
	unlink(tpath);
	unlink(dbpath);
	unlink(opath);
}

/* ------------------------------------------------------------------ scale */

/* The peer: SQLite FTS5 with bm25() ORDER BY rank, in a database of its
 * own. tokenize: FTS5's "porter unicode61 remove_diacritics 2", as the
 * index answered queries before schema 2, or "ss", the index's own terms
 * (compounds included; lib/index/bm25.h). */
typedef struct {
	sqlite3 *db;
	sqlite3_stmt *ins, *query;
	sqlite3_stmt *term_ins, *term_of; /* the term of a word (temp.q, temp.qv) */
	sqlite3_stmt *df_of;              /* documents holding a term (temp.v) */
	int64_t max_df;                   /* fts_expr leaves out terms in more documents */
} fts_peer;

static void peer_open(fts_peer *p, const char *path, const char *tokenize)
{
	char sql[2][512];
	snprintf(sql[0], sizeof sql[0],
		 "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;"
		 "CREATE VIRTUAL TABLE fts USING fts5(text, tokenize = '%s'); BEGIN", tokenize);
	snprintf(sql[1], sizeof sql[1],
		 "CREATE VIRTUAL TABLE temp.q USING fts5(text, tokenize = '%s');"
		 "CREATE VIRTUAL TABLE temp.qv USING fts5vocab('temp', 'q', 'instance');"
		 "CREATE VIRTUAL TABLE temp.v USING fts5vocab('main', 'fts', 'row');", tokenize);
	if (sqlite3_open(path, &p->db) != SQLITE_OK || ss_bm25_tokenizer_register(p->db) ||
	    sqlite3_exec(p->db, sql[0], 0, 0, 0) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "INSERT INTO fts(rowid, text) VALUES(?1, ?2)", -1, &p->ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT rowid, -rank FROM fts WHERE fts MATCH ?1 ORDER BY rank LIMIT ?2", -1,
			       &p->query, NULL) != SQLITE_OK ||
	    sqlite3_exec(p->db, sql[1], 0, 0, 0) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT doc FROM temp.v WHERE term = ?1", -1, &p->df_of, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "INSERT INTO temp.q(text) VALUES(?1)", -1, &p->term_ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(p->db, "SELECT coalesce(group_concat(term, '|'), '') FROM temp.qv", -1, &p->term_of, NULL) != SQLITE_OK)
		die(path, sqlite3_errmsg(p->db));
}

/* The terms FTS5's tokenizer makes of one word, as one string (malloc'd;
 * "" for none): a word of one token gives its term. */
static char *peer_term(fts_peer *p, const char *word, size_t n)
{
	sqlite3_exec(p->db, "DELETE FROM temp.q", 0, 0, 0);
	sqlite3_bind_text(p->term_ins, 1, word, (int)n, SQLITE_STATIC);
	sqlite3_step(p->term_ins);
	sqlite3_reset(p->term_ins);
	char *t = strdup(sqlite3_step(p->term_of) == SQLITE_ROW ? (const char *)sqlite3_column_text(p->term_of, 0) : "");
	sqlite3_reset(p->term_of);
	return t;
}

static void peer_add(fts_peer *p, int64_t rowid, const char *text, size_t len)
{
	sqlite3_bind_int64(p->ins, 1, rowid);
	sqlite3_bind_text(p->ins, 2, text, (int)len, SQLITE_STATIC);
	if (sqlite3_step(p->ins) != SQLITE_DONE)
		die("fts5 insert", sqlite3_errmsg(p->db));
	sqlite3_reset(p->ins);
}

static void peer_commit(fts_peer *p)
{
	if (sqlite3_exec(p->db, "INSERT INTO fts(fts) VALUES('optimize'); COMMIT", 0, 0, 0) != SQLITE_OK)
		die("fts5 commit", sqlite3_errmsg(p->db));
}

static void peer_close(fts_peer *p)
{
	sqlite3_finalize(p->ins);
	sqlite3_finalize(p->query);
	sqlite3_finalize(p->term_ins);
	sqlite3_finalize(p->term_of);
	sqlite3_finalize(p->df_of);
	sqlite3_close(p->db);
}

/* Top-k rowids for an FTS5 expression; returns their number. */
static int peer_query(fts_peer *p, const char *expr, int k, int64_t *rowid)
{
	int n = 0;
	sqlite3_bind_text(p->query, 1, expr, -1, SQLITE_STATIC);
	sqlite3_bind_int(p->query, 2, k);
	while (n < k && sqlite3_step(p->query) == SQLITE_ROW)
		rowid[n++] = sqlite3_column_int64(p->query, 0);
	sqlite3_reset(p->query);
	return n;
}

/* FTS5 expression of a query: its white-space words quoted and OR-ed (a
 * word of several tokens is a phrase, or with tokenizer "ss" its compound
 * term). same_terms != 0 keeps one word per distinct term (p's tokenizer
 * says which), so that with tokenizer "ss" the expression's bm25() is the
 * index's BM25 of the same terms, computed exhaustively; 0 keeps each
 * distinct word once, as the index's queries were before schema 2.
 * Returns malloc'd string ("" when none). */
static char *fts_expr(fts_peer *p_, const char *q, int same_terms)
{
	char **terms = malloc((strlen(q) + 1) * sizeof *terms);
	size_t n_terms = 0;
	size_t qn = strlen(q), mn = 0;
	char *m = malloc(qn * 8 + 8);
	m[0] = 0;
	const char *p = q;
	while (*p) {
		while (*p && isspace((unsigned char)*p))
			p++;
		const char *t = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		size_t tn = (size_t)(p - t);
		int word = 0;
		for (size_t i = 0; i < tn; i++)
			word |= isalnum((unsigned char)t[i]) || (unsigned char)t[i] >= 0x80;
		if (!word)
			continue;
		char piece[1024];
		size_t pn = 0;
		piece[pn++] = '"';
		for (size_t i = 0; i < tn && pn < sizeof piece - 4; i++) {
			if (t[i] == '"')
				piece[pn++] = '"';
			piece[pn++] = t[i];
		}
		piece[pn++] = '"';
		piece[pn] = 0;
		int dup = 0;
		if (same_terms) {
			char *term = peer_term(p_, t, tn);
			for (size_t i = 0; i < n_terms && !dup; i++)
				dup = !strcmp(terms[i], term);
			if (!dup && p_->max_df) {
				/* Query-term pruning by document frequency. */
				sqlite3_bind_text(p_->df_of, 1, term, -1, SQLITE_STATIC);
				dup = sqlite3_step(p_->df_of) == SQLITE_ROW && sqlite3_column_int64(p_->df_of, 0) > p_->max_df;
				sqlite3_reset(p_->df_of);
			}
			if (dup)
				free(term);
			else
				terms[n_terms++] = term;
		} else {
			char *at = strstr(m, piece); /* whole quoted pieces only */
			dup = at && (at == m || at[-1] == ' ') && (at[pn] == 0 || at[pn] == ' ');
		}
		if (!dup)
			mn += (size_t)sprintf(m + mn, "%s%s", mn ? " OR " : "", piece);
	}
	for (size_t i = 0; i < n_terms; i++)
		free(terms[i]);
	free(terms);
	return m;
}

static void report3(const char *what, double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, cmp_d);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += t[i];
	printf("  %-34s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms  mean %8.2f ms  (n=%d)\n", what,
	       t[(int)(0.50 * (n - 1) + 0.5)] * 1e3, t[(int)(0.95 * (n - 1) + 0.5)] * 1e3,
	       t[(int)(0.99 * (n - 1) + 0.5)] * 1e3, sum / n * 1e3, n);
}

/* CPU seconds of this thread: on a machine shared with other jobs the
 * wall time includes waiting for a core, this does not. */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static off_t file_size(const char *path)
{
	struct stat sb;
	return stat(path, &sb) ? 0 : sb.st_size;
}

/* Runs argv with stdin from `in` (NULL: /dev/null) and stdout to
 * /dev/null; returns seconds from fork to exit and sets *cpu to the
 * child's user + system seconds (on a loaded machine the wall time
 * includes waiting for a core). Dies when it fails. */
static double run_timed(char *const *argv, const char *in, double *cpu)
{
	/* posix_spawn, not fork: a copy of this big process would be timed. */
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, in ? in : "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	extern char **environ;
	pid_t pid;
	double t0 = bench_now();
	if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ))
		die(argv[0], strerror(errno));
	posix_spawn_file_actions_destroy(&fa);
	int st;
	struct rusage ru;
	wait4(pid, &st, 0, &ru);
	double t = bench_now() - t0;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		die(argv[0], "failed");
	*cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
	return t;
}

/* The chunks in memory and their copies: document j (0 <= j < n *
 * copies) is chunk j % n, with the id "c<j / n>/<id>" past the first copy
 * (retrieve --scale --copies). */
typedef struct {
	char **ids, **texts;
	size_t *lens;
	int64_t *ntok;
	size_t n;
	int copies;
} scale_docs;

/* Document j's id, in buf (cap bytes) past the first copy. */
static const char *doc_id(const scale_docs *sd, size_t j, char *buf, size_t cap)
{
	int c = (int)(j / sd->n);
	if (!c)
		return sd->ids[j];
	snprintf(buf, cap, "c%d/%s", c, sd->ids[j % sd->n]);
	return buf;
}

/* Writes a tiny random state (retrieval never reads it) for each document
 * in [from, to) to the state file at path. */
static void write_states(const scale_docs *sd, size_t from, size_t to, const char *path)
{
	char em[SS_ERRMSG_MAX], id[600];
	ss_state_dims d = { "mamba2", 2, 3, 4, 5, 6, 4 };
	ss_state st;
	ss_writer *sw;
	if (ss_state_alloc(&st, &d) || ss_writer_open(&sw, path, 1, em))
		die(path, "cannot start");
	snprintf(st.fingerprint, sizeof st.fingerprint, "bench-scale");
	for (size_t j = from; j < to; j++) {
		st.id = (char *)doc_id(sd, j, id, sizeof id);
		st.n_tokens = sd->ntok[j % sd->n];
		st.ssm[0] = (float)(j % sd->n);
		if (ss_writer_put_state(sw, &st, NULL))
			die(path, "write failed");
	}
	st.id = NULL;
	ss_state_free(&st);
	if (ss_writer_close(sw, em))
		die(path, em);
}

/* Adds the texts of the documents in [from, to) to the build ix (of path),
 * one by one as ss-retrieve build does. */
static void add_texts(ss_index *ix, const scale_docs *sd, size_t from, size_t to, const char *path)
{
	char em[SS_ERRMSG_MAX], id[600];
	for (size_t j = from; j < to; j++) {
		size_t i = j % sd->n;
		if (ss_index_add_text(ix, doc_id(sd, j, id, sizeof id), sd->texts[i], sd->lens[i], sd->ntok[i], em))
			die(path, em);
	}
}

/* retrieve --scale --shards S: the same documents as S index files
 * DIR/shard-I.db, each a contiguous range of the documents in stream order
 * with its own tiny states (DIR/shard-I.states), what the Slurm
 * pipeline's array tasks build, one shard a task. Prints the shards' build
 * time (their sum: one machine building them in turn; their maximum: S
 * machines at once; the states' writing left out, as for the single
 * index) and their bytes; bench/shards then compares their queries with
 * the single index's. */
static void build_shards(const char *dir, int n_shards, const scale_docs *sd)
{
	size_t n_docs = sd->n * (size_t)sd->copies;
	double sum = 0, max = 0;
	off_t bytes = 0;
	char em[SS_ERRMSG_MAX], path[700], spath[700];
	for (int s = 0; s < n_shards; s++) {
		snprintf(path, sizeof path, "%s/shard-%d.db", dir, s);
		snprintf(spath, sizeof spath, "%s/shard-%d.states", dir, s);
		unlink(path);
		size_t from = n_docs * (size_t)s / (size_t)n_shards, to = n_docs * (size_t)(s + 1) / (size_t)n_shards;
		write_states(sd, from, to, spath);
		double t0 = bench_now();
		ss_index *ix;
		if (ss_index_build_open(&ix, path, em))
			die(path, em);
		add_texts(ix, sd, from, to, path);
		if (ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) || ss_index_commit(ix, NULL, NULL, NULL, em))
			die(path, em);
		ss_index_close(ix);
		double t = bench_now() - t0;
		sum += t;
		max = t > max ? t : max;
		bytes += file_size(path);
	}
	printf("  build %d shards                     %8.1f s in turn, %.1f s the slowest (one a machine); %.1f MB "
	       "together\n",
	       n_shards, sum, max, bytes / 1e6);
}

/* retrieve --scale: see usage in main. */
/* Latency of the query syntax (issue 47) on the same index, in one run:
 * for each query, its first W words (W = 2, 4) as plain BM25 (OR) and as
 * one "quoted phrase", and all of its words with BM25TP proximity and
 * with AND; k = 10. lat: scratch, n_q doubles. */
static void query_modes(ss_index *ix, char **qs, int n_q, double *lat)
{
	static const struct {
		const char *what;
		int words; /* 0: all */
		int quote;
		unsigned flags;
	} mode[] = {
		{ "2 words, plain BM25 (OR)", 2, 0, 0 },
		{ "2 words, one \"phrase\"", 2, 1, SS_INDEX_QUERY_PHRASES },
		{ "4 words, plain BM25 (OR)", 4, 0, 0 },
		{ "4 words, one \"phrase\"", 4, 1, SS_INDEX_QUERY_PHRASES },
		{ "30 words, --proximity on", 0, 0, SS_INDEX_QUERY_PROXIMITY },
		{ "30 words, --operator and", 0, 0, SS_INDEX_QUERY_ALL },
	};
	char em[SS_ERRMSG_MAX], q[4096];
	for (size_t m = 0; m < sizeof mode / sizeof *mode; m++) {
		if (ss_index_set_query(ix, mode[m].flags, em))
			die("query modes", em);
		long found = 0;
		for (int i = 0; i < n_q; i++) {
			/* the first `words` words, quoted or not */
			size_t n = 0;
			int w = 0;
			if (mode[m].quote)
				q[n++] = '"';
			for (const char *p = qs[i]; *p && n + 2 < sizeof q; p++) {
				if (*p == ' ' && mode[m].words && ++w == mode[m].words)
					break;
				q[n++] = *p;
			}
			if (mode[m].quote)
				q[n++] = '"';
			q[n] = 0;
			ss_index_hit *h;
			double t1 = bench_now();
			int k = ss_index_query(ix, q, 10, NULL, 0, &h, em);
			lat[i] = bench_now() - t1;
			if (k < 0 && k != SS_ERR_INVALID)
				die("query", em);
			found += k > 0 ? k : 0;
			if (k > 0)
				ss_index_hits_free(h, k);
		}
		char what[80];
		snprintf(what, sizeof what, "%s (%.1f hits)", mode[m].what, (double)found / n_q);
		report3(what, lat, n_q);
	}
	ss_index_set_query(ix, 0, em);
}

static int scale_main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* figures as they come: the run takes long */
	int copies = 1, n_q = 200, peer = 0, n_peer = -1, n_shards = 0, modes = 1;
	size_t max_chunks = 0;
	const char *keep = NULL, *cli = NULL;
	int a = 2;
	for (; a < argc && argv[a][0] == '-'; a++) {
		if (!strcmp(argv[a], "--copies") && a + 1 < argc)
			copies = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--queries") && a + 1 < argc)
			n_q = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--peer"))
			peer = 1;
		else if (!strcmp(argv[a], "--peer-queries") && a + 1 < argc)
			n_peer = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--keep") && a + 1 < argc)
			keep = argv[++a];
		else if (!strcmp(argv[a], "--cli") && a + 1 < argc)
			cli = argv[++a];
		else if (!strcmp(argv[a], "--chunks") && a + 1 < argc)
			max_chunks = (size_t)strtoull(argv[++a], NULL, 10);
		else if (!strcmp(argv[a], "--shards") && a + 1 < argc)
			n_shards = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--no-modes"))
			modes = 0;
		else
			die("usage", argv[a]);
	}
	if (a == argc || copies < 1 || n_q < 1 || n_shards < 0)
		die("usage", "retrieve --scale [--chunks N] [--copies C] [--shards S] [--no-modes] [--queries Q] [--peer [--peer-queries P]] "
			     "[--cli SS_RETRIEVE] [--keep DIR] TOKENS...");
	if (n_peer < 0 || n_peer > n_q)
		n_peer = n_q;
	char dir[512], em[SS_ERRMSG_MAX];
	if (keep) {
		snprintf(dir, sizeof dir, "%s", keep);
		mkdir(dir, 0777);
	} else {
		snprintf(dir, sizeof dir, "%s/ss-bench-scale-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		if (!mkdtemp(dir))
			die(dir, "mkdtemp failed");
	}
	char spath[600], dbpath[600], qpath[600], ppath[600];
	snprintf(spath, sizeof spath, "%s/states", dir);
	snprintf(dbpath, sizeof dbpath, "%s/index.db", dir);
	snprintf(qpath, sizeof qpath, "%s/queries.jsonl", dir);
	snprintf(ppath, sizeof ppath, "%s/fts5-peer.db", dir);
	char tpath[600];
	snprintf(tpath, sizeof tpath, "%s/queries.txt", dir);
	unlink(dbpath);
	unlink(ppath);

	/* The chunks' ids, texts and token counts, in memory. */
	size_t n = 0, cap = 1 << 16;
	char **ids = malloc(cap * sizeof *ids), **texts = malloc(cap * sizeof *texts);
	size_t *lens = malloc(cap * sizeof *lens);
	int64_t *ntok = malloc(cap * sizeof *ntok);
	for (; a < argc; a++) {
		ss_reader *r;
		const ss_record *rec;
		ss_tokens t;
		if (ss_reader_open(&r, argv[a], 0, em))
			die(argv[a], em);
		int rc;
		while ((!max_chunks || n < max_chunks) && (rc = ss_reader_next(r, &rec)) == 1) {
			if (ss_record_tokens(rec, &t, em) || !t.text)
				die(argv[a], t.text ? em : "a token record without text");
			if (n == cap) {
				cap *= 2;
				ids = realloc(ids, cap * sizeof *ids);
				texts = realloc(texts, cap * sizeof *texts);
				lens = realloc(lens, cap * sizeof *lens);
				ntok = realloc(ntok, cap * sizeof *ntok);
			}
			ids[n] = t.id;
			texts[n] = t.text;
			lens[n] = t.text_len;
			ntok[n++] = t.n_tokens;
			t.id = t.text = NULL;
			ss_tokens_free(&t);
		}
		if (rc < 0)
			die(argv[a], ss_reader_error(r));
		ss_reader_close(r);
		if (max_chunks && n == max_chunks)
			break;
	}
	size_t n_docs = n * (size_t)copies;
	printf("ss-retrieve scale bench: %zu chunks x %d = %zu documents; %d queries of 30 words, k = 10, batch\n",
	       n, copies, n_docs, n_q);

	/* Tiny random states, one per document (retrieval never reads them). */
	double t0 = bench_now();
	scale_docs sd = { ids, texts, lens, ntok, n, copies };
	write_states(&sd, 0, n_docs, spath);
	char id[600];
	printf("  write %zu tiny states                %8.1f s\n", n_docs, bench_now() - t0);

	/* Build, as ss-retrieve build does, the texts given one by one. */
	t0 = bench_now();
	double c0 = cpu_now();
	ss_index *ix;
	ss_index_build_stats bs;
	if (ss_index_build_open(&ix, dbpath, em))
		die(dbpath, em);
	add_texts(ix, &sd, 0, n_docs, dbpath);
	double t_text = bench_now() - t0;
	if (ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) || ss_index_commit(ix, NULL, NULL, &bs, em))
		die(dbpath, em);
	ss_index_close(ix);
	double t_build = bench_now() - t0, c_build = cpu_now() - c0;
	printf("  build the index                    %8.1f s   (%.1f s per million; texts %.1f s, states and commit "
	       "%.1f s); %lld documents, %.1f MB\n",
	       t_build, t_build / (double)n_docs * 1e6, t_text, t_build - t_text, (long long)bs.n_docs,
	       file_size(dbpath) / 1e6);
	printf("  the same, CPU time                 %8.1f s   (%.1f s per million)\n", c_build,
	       c_build / (double)n_docs * 1e6);
	if (n_shards)
		build_shards(dir, n_shards, &sd);

	/* Queries: 30 consecutive words of a random chunk, from a random word. */
	char **qs = malloc((size_t)n_q * sizeof *qs);
	FILE *qf = fopen(qpath, "w");
	if (!qf)
		die(qpath, "cannot write");
	for (int q = 0; q < n_q; q++) {
		const char *t = texts[next() % n];
		int nw = 0;
		for (const char *p = t; *p;) {
			while (*p && isspace((unsigned char)*p))
				p++;
			if (*p)
				nw++;
			while (*p && !isspace((unsigned char)*p))
				p++;
		}
		int from = nw > 30 ? (int)(next() % (uint64_t)(nw - 29)) : 0, w = 0;
		size_t qn = 0;
		char *qt = malloc(strlen(t) + 1);
		for (const char *p = t; *p && w < from + 30;) {
			while (*p && isspace((unsigned char)*p))
				p++;
			const char *b = p;
			while (*p && !isspace((unsigned char)*p))
				p++;
			if (p > b && w++ >= from) {
				if (qn)
					qt[qn++] = ' ';
				for (; b < p; b++)
					qt[qn++] = *b == '"' || *b == '\\' ? ' ' : *b;
			}
		}
		qt[qn] = 0;
		qs[q] = qt;
		fprintf(qf, "{\"id\": \"q%d\", \"query\": \"%s\"}\n", q, qt);
	}
	fclose(qf);
	/* The same queries one a line, for bench/shards. */
	if (!(qf = fopen(tpath, "w")))
		die(tpath, "cannot write");
	for (int q = 0; q < n_q; q++)
		fprintf(qf, "%s\n", qs[q]);
	fclose(qf);

	double *lat = malloc((size_t)n_q * sizeof *lat), *lat_cpu = malloc((size_t)n_q * sizeof *lat_cpu);
	char ***top = malloc((size_t)n_q * sizeof *top);
	int *n_top = malloc((size_t)n_q * sizeof *n_top);
	t0 = bench_now();
	if (ss_index_open(&ix, dbpath, em))
		die(dbpath, em);
	double t_open = bench_now() - t0;
	for (int q = 0; q < n_q; q++) {
		ss_index_hit *h;
		double t1 = bench_now(), c1 = cpu_now();
		int k = ss_index_query(ix, qs[q], 10, NULL, 0, &h, em);
		lat[q] = bench_now() - t1;
		lat_cpu[q] = cpu_now() - c1;
		if (k < 0)
			die("query", em);
		top[q] = malloc(10 * sizeof **top);
		for (int i = 0; i < k; i++)
			top[q][i] = strdup(h[i].id);
		n_top[q] = k;
		ss_index_hits_free(h, k);
	}
	printf("  open the index                     %8.2f ms\n", t_open * 1e3);
	report3("query (ours: MaxScore)", lat, n_q);
	report3("  the same, CPU time", lat_cpu, n_q);
	if (modes)
		query_modes(ix, qs, n_q, lat);
	ss_index_close(ix);
	if (cli) {
		/* The tool itself: batch (JSON lines on stdin) and one process
		 * per query, start-up included. */
		char *batch[] = { (char *)cli, "query", "--index", dbpath, "-k", "10", "--ids", NULL };
		double cpu, t = run_timed(batch, qpath, &cpu);
		printf("  ss-retrieve batch, %d queries     %8.2f s   (%.2f ms per query, start-up included; CPU %.2f ms)\n",
		       n_q, t, t / n_q * 1e3, cpu / n_q * 1e3);
		for (int q = 0; q < n_q; q++) {
			char *one[] = { (char *)cli, "query", "--index", dbpath, "-k", "10", "--ids", "--query", qs[q], NULL };
			lat[q] = run_timed(one, NULL, &lat_cpu[q]);
		}
		report3("ss-retrieve, a process per query", lat, n_q);
		report3("  the same, CPU time (user+sys)", lat_cpu, n_q);
	}

	if (peer) {
		/* The same documents in FTS5 (rowid = c * n + i). */
		fts_peer p;
		t0 = bench_now();
		peer_open(&p, ppath, "ss");
		for (int c = 0; c < copies; c++)
			for (size_t i = 0; i < n; i++)
				peer_add(&p, (int64_t)c * (int64_t)n + (int64_t)i + 1, texts[i], lens[i]);
		peer_commit(&p);
		double t_peer = bench_now() - t0;
		printf("  peer: build FTS5                   %8.1f s   (%.1f s per million), %.1f MB\n", t_peer,
		       t_peer / (double)n_docs * 1e6, file_size(ppath) / 1e6);
		int64_t rows[10];
		/* Exhaustive, then candidate (b): terms in more than N/2 (weight
		 * 1e-6: the same top 10 but for ties) or N/20 documents left out. */
		for (int v = 0; v < 3; v++) {
		p.max_df = v == 0 ? 0 : (int64_t)n_docs / (v == 1 ? 2 : 20);
		int n_v = v ? (n_peer < 50 ? n_peer : 50) : n_peer;
		double overlap = 0;
		for (int q = 0; q < n_v; q++) {
			char *e = fts_expr(&p, qs[q], 1);
			double t1 = bench_now(), c1 = cpu_now();
			int k = peer_query(&p, e, 10, rows);
			lat[q] = bench_now() - t1;
			lat_cpu[q] = cpu_now() - c1;
			int same = 0;
			for (int i = 0; i < k; i++) {
				int64_t r = rows[i] - 1;
				int c = (int)(r / (int64_t)n);
				size_t j = (size_t)(r % (int64_t)n);
				if (c)
					snprintf(id, sizeof id, "c%d/%s", c, ids[j]);
				for (int m = 0; m < n_top[q]; m++)
					same += !strcmp(top[q][m], c ? id : ids[j]);
			}
			overlap += k ? (double)same / k : 1;
			free(e);
		}
		char what[80];
		snprintf(what, sizeof what, "peer: FTS5 bm25(), df <= %s", v == 0 ? "N" : v == 1 ? "N/2" : "N/20");
		report3(what, lat, n_v);
		report3("  the same, CPU time", lat_cpu, n_v);
		printf("  top-10 overlap of ours with it: %.4f (%d queries)\n", overlap / n_v, n_v);
		}
		peer_close(&p);
	}
	for (int q = 0; q < n_q; q++) {
		for (int i = 0; i < n_top[q]; i++)
			free(top[q][i]);
		free(top[q]);
		free(qs[q]);
	}
	for (size_t i = 0; i < n; i++) {
		free(ids[i]);
		free(texts[i]);
	}
	free(top);
	free(n_top);
	free(qs);
	free(lat);
	free(lat_cpu);
	free(ids);
	free(texts);
	free(lens);
	free(ntok);
	if (!keep) {
		unlink(spath);
		unlink(dbpath);
		unlink(qpath);
		unlink(ppath);
		unlink(tpath);
		for (int i = 0; i < n_shards; i++) {
			char sh[700];
			snprintf(sh, sizeof sh, "%s/shard-%d.db", dir, i);
			unlink(sh);
			snprintf(sh, sizeof sh, "%s/shard-%d.states", dir, i);
			unlink(sh);
		}
		rmdir(dir);
	}
	return 0;
}

/* ------------------------------------------------------------------ qa */

/* A retrieval test set: documents with a relevance key, queries with the
 * keys that are relevant to them. */
typedef struct {
	size_t n_docs, n_q;
	char **text, **key;   /* [n_docs] */
	char **query;         /* [n_q] */
	char ***rel;          /* [n_q], NULL-terminated key lists */
} qa_set;

static void qa_doc(qa_set *s, char *text, char *key)
{
	if ((s->n_docs & (s->n_docs - 1)) == 0) {
		s->text = realloc(s->text, (2 * s->n_docs + 1) * sizeof *s->text);
		s->key = realloc(s->key, (2 * s->n_docs + 1) * sizeof *s->key);
	}
	s->text[s->n_docs] = text;
	s->key[s->n_docs++] = key;
}

static void qa_query(qa_set *s, const char *query, char **rel)
{
	if ((s->n_q & (s->n_q - 1)) == 0) {
		s->query = realloc(s->query, (2 * s->n_q + 1) * sizeof *s->query);
		s->rel = realloc(s->rel, (2 * s->n_q + 1) * sizeof *s->rel);
	}
	s->query[s->n_q] = strdup(query);
	s->rel[s->n_q++] = rel;
}

static cJSON *read_json(const char *path)
{
	size_t n;
	char *t = read_all(path, &n);
	if (!t)
		die(path, "cannot read (set SS_SHARED)");
	cJSON *j = cJSON_ParseWithLength(t, n);
	free(t);
	if (!cJSON_IsArray(j))
		die(path, "not a JSON array");
	return j;
}

/* MS MARCO: every passage of every sample is a document; a query's
 * relevant passages are its own selected ones. */
static void qa_msmarco(qa_set *s, const char *path)
{
	cJSON *all = read_json(path), *it;
	int i = 0;
	cJSON_ArrayForEach(it, all) {
		cJSON *ps = cJSON_GetObjectItem(it, "passages");
		cJSON *txt = cJSON_GetObjectItem(ps, "passage_text"), *sel = cJSON_GetObjectItem(ps, "is_selected");
		int n = cJSON_GetArraySize(txt), n_rel = 0;
		char **rel = calloc((size_t)n + 1, sizeof *rel);
		for (int j = 0; j < n; j++) {
			char key[64];
			snprintf(key, sizeof key, "m%d/%d", i, j);
			qa_doc(s, strdup(cJSON_GetArrayItem(txt, j)->valuestring), strdup(key));
			if (cJSON_GetArrayItem(sel, j)->valueint)
				rel[n_rel++] = strdup(key);
		}
		if (n_rel)
			qa_query(s, cJSON_GetObjectItem(it, "query")->valuestring, rel);
		else
			free(rel);
		i++;
	}
	cJSON_Delete(all);
}

/* HotpotQA (distractor): every context paragraph (title, then its
 * sentences) is a document keyed by its title; a question's relevant
 * documents are those of its supporting titles. */
static void qa_hotpot(qa_set *s, const char *path)
{
	cJSON *all = read_json(path), *it;
	cJSON_ArrayForEach(it, all) {
		cJSON *c, *f;
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(it, "context")) {
			const char *title = cJSON_GetArrayItem(c, 0)->valuestring;
			size_t len = strlen(title) + 2;
			cJSON *sent;
			cJSON_ArrayForEach(sent, cJSON_GetArrayItem(c, 1))
				len += strlen(sent->valuestring);
			char *t = malloc(len);
			size_t tn = (size_t)sprintf(t, "%s\n", title);
			cJSON_ArrayForEach(sent, cJSON_GetArrayItem(c, 1))
				tn += (size_t)sprintf(t + tn, "%s", sent->valuestring);
			qa_doc(s, t, strdup(title));
		}
		cJSON *sf = cJSON_GetObjectItem(it, "supporting_facts");
		char **rel = calloc((size_t)cJSON_GetArraySize(sf) + 1, sizeof *rel);
		int n_rel = 0;
		cJSON_ArrayForEach(f, sf) {
			const char *title = cJSON_GetArrayItem(f, 0)->valuestring;
			int seen = 0;
			for (int j = 0; j < n_rel; j++)
				seen |= !strcmp(rel[j], title);
			if (!seen)
				rel[n_rel++] = strdup(title);
		}
		qa_query(s, cJSON_GetObjectItem(it, "question")->valuestring, rel);
	}
	cJSON_Delete(all);
}

/* Metrics summed over queries (ss_eval_ranking's fields). */
typedef struct {
	double r1, r5, r10, rr, ndcg;
} qa_sums;

/* Adds the ranking metrics of one ranked list of document ordinals to *m:
 * a result is relevant when its key is one of the query's not yet found
 * (HotpotQA titles recur across samples). */
static void qa_score(const qa_set *s, size_t q, const size_t *docs, int n, qa_sums *m)
{
	int n_rel = 0, rel[10] = { 0 };
	while (s->rel[q][n_rel])
		n_rel++;
	char *got = calloc((size_t)n_rel, 1);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n_rel; j++)
			if (!got[j] && !strcmp(s->key[docs[i]], s->rel[q][j])) {
				got[j] = 1;
				rel[i] = 1;
				break;
			}
	free(got);
	ss_eval_ranking r;
	if (ss_eval_rank(rel, n, n_rel, &r))
		die("qa", "ss_eval_rank failed");
	m->r1 += r.recall_1;
	m->r5 += r.recall_5;
	m->r10 += r.recall_10;
	m->rr += r.rr_10;
	m->ndcg += r.ndcg_10;
}

/* The metrics of every query of s on the open index ix, with k1, b. */
static qa_sums qa_eval(const qa_set *s, ss_index *ix, double k1, double b)
{
	char em[SS_ERRMSG_MAX];
	qa_sums m = { 0 };
	size_t docs[10];
	if (ss_index_set_bm25(ix, k1, b, em))
		die("bm25", em);
	for (size_t q = 0; q < s->n_q; q++) {
		ss_index_hit *h;
		int n = ss_index_query(ix, s->query[q], 10, NULL, 0, &h, em);
		if (n < 0)
			die("query", em);
		for (int i = 0; i < n; i++)
			docs[i] = (size_t)strtoull(h[i].id, NULL, 10);
		ss_index_hits_free(h, n);
		qa_score(s, q, docs, n, &m);
	}
	return m;
}

/* --qa --k1 LIST --b LIST: the sweep's parameters; NULL lists: the
 * default run against FTS5. */
static const char *qa_k1s, *qa_bs;

static void qa_run(const char *name, qa_set *s)
{
	char dir[512], spath[600], dbpath[600], ppath[600], em[SS_ERRMSG_MAX], id[32];
	snprintf(dir, sizeof dir, "%s/ss-bench-qa-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		die(dir, "mkdtemp failed");
	snprintf(spath, sizeof spath, "%s/states", dir);
	snprintf(dbpath, sizeof dbpath, "%s/index.db", dir);
	snprintf(ppath, sizeof ppath, "%s/fts5.db", dir);
	ss_state_dims d = { "mamba2", 2, 3, 4, 5, 6, 4 };
	ss_state st;
	ss_writer *sw;
	ss_index *ix;
	fts_peer p;
	if (ss_state_alloc(&st, &d) || ss_writer_open(&sw, spath, 1, em) || ss_index_build_open(&ix, dbpath, em))
		die(dir, "cannot start");
	peer_open(&p, ppath, "porter unicode61 remove_diacritics 2");
	snprintf(st.fingerprint, sizeof st.fingerprint, "bench-qa");
	for (size_t i = 0; i < s->n_docs; i++) {
		snprintf(id, sizeof id, "%zu", i);
		st.id = id;
		if (ss_writer_put_state(sw, &st, NULL) ||
		    ss_index_add_text(ix, id, s->text[i], strlen(s->text[i]), -1, em))
			die(dbpath, em);
		peer_add(&p, (int64_t)i + 1, s->text[i], strlen(s->text[i]));
	}
	st.id = NULL;
	ss_state_free(&st);
	if (ss_writer_close(sw, em) || ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) ||
	    ss_index_commit(ix, NULL, NULL, NULL, em))
		die(dbpath, em);
	ss_index_close(ix);
	peer_commit(&p);
	if (ss_index_open(&ix, dbpath, em))
		die(dbpath, em);
	if (qa_k1s) {
		/* One TSV row per (k1, b): the index is built once. */
		char *k1s = strdup(qa_k1s), *s1 = NULL;
		for (char *a = strtok_r(k1s, ",", &s1); a; a = strtok_r(NULL, ",", &s1)) {
			char *bs = strdup(qa_bs), *s2 = NULL;
			for (char *c = strtok_r(bs, ",", &s2); c; c = strtok_r(NULL, ",", &s2)) {
				double k1 = atof(a), b = atof(c);
				qa_sums m = qa_eval(s, ix, k1, b);
				double n = (double)s->n_q;
				printf("%s\t%g\t%g\t%zu\t%zu\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n", name, k1, b,
				       s->n_docs, s->n_q, m.r1 / n, m.r5 / n, m.r10 / n, m.rr / n, m.ndcg / n);
				fflush(stdout);
			}
			free(bs);
		}
		free(k1s);
		ss_index_close(ix);
		peer_close(&p);
	} else {
		qa_sums ours = qa_eval(s, ix, 1.2, 0.75), peer = { 0 }, prox;
		/* BM25TP (issue 47), the same queries: whether proximity helps on real text */
		if (ss_index_set_query(ix, SS_INDEX_QUERY_PROXIMITY, em))
			die("query", em);
		prox = qa_eval(s, ix, 1.2, 0.75);
		ss_index_set_query(ix, 0, em);
		size_t docs[10];
		int64_t rows[10];
		for (size_t q = 0; q < s->n_q; q++) {
			char *e = fts_expr(&p, s->query[q], 0);
			int n = e[0] ? peer_query(&p, e, 10, rows) : 0;
			free(e);
			for (int i = 0; i < n; i++)
				docs[i] = (size_t)(rows[i] - 1);
			qa_score(s, q, docs, n, &peer);
		}
		ss_index_close(ix);
		peer_close(&p);
		double n = (double)s->n_q;
		printf("  %-28s %5zu docs %4zu queries   recall@10 %.4f  MRR@10 %.4f  nDCG@10 %.4f   "
		       "(FTS5 before: %.4f, %.4f, %.4f)\n", name, s->n_docs, s->n_q, ours.r10 / n, ours.rr / n,
		       ours.ndcg / n, peer.r10 / n, peer.rr / n, peer.ndcg / n);
		printf("  %-28s %5s      %4s           recall@10 %.4f  MRR@10 %.4f  nDCG@10 %.4f   (--proximity on)\n",
		       "", "", "", prox.r10 / n, prox.rr / n, prox.ndcg / n);
	}
	unlink(spath);
	unlink(dbpath);
	unlink(ppath);
	rmdir(dir);
	for (size_t i = 0; i < s->n_docs; i++) {
		free(s->text[i]);
		free(s->key[i]);
	}
	for (size_t q = 0; q < s->n_q; q++) {
		for (char **r = s->rel[q]; *r; r++)
			free(*r);
		free(s->rel[q]);
		free(s->query[q]);
	}
	free(s->text);
	free(s->key);
	free(s->query);
	free(s->rel);
}

/* retrieve --qa: retrieval quality on the MS MARCO and HotpotQA samples,
 * the index against FTS5 bm25() as the index queried it before; with
 * --k1 LIST --b LIST (comma-separated), the TSV dataset, k1, b, docs,
 * queries, recall@1, recall@5, recall@10, mrr@10, ndcg@10 for every pair
 * instead (pipelines/eval.mk eval-retrieval). */
static int qa_main(int argc, char **argv)
{
	const char *shared = getenv("SS_SHARED") ? getenv("SS_SHARED") : "../shared";
	char path[1024];
	for (int i = 2; i + 1 < argc; i += 2)
		if (!strcmp(argv[i], "--k1"))
			qa_k1s = argv[i + 1];
		else if (!strcmp(argv[i], "--b"))
			qa_bs = argv[i + 1];
		else
			die("usage", "retrieve --qa [--k1 K1,... --b B,...]");
	if (!qa_k1s != !qa_bs)
		die("usage", "retrieve --qa: --k1 and --b go together");
	if (qa_k1s)
		printf("dataset\tk1\tb\tdocs\tqueries\trecall@1\trecall@5\trecall@10\tmrr@10\tndcg@10\n");
	else
		printf("ss-retrieve retrieval quality (k = 10; each query's relevant documents among all the samples' documents)\n");
	qa_set m = {0}, h = {0};
	snprintf(path, sizeof path, "%s/data/qa/msmarco-v1.1-train-sample200.json", shared);
	qa_msmarco(&m, path);
	qa_run(qa_k1s ? "msmarco" : "MS MARCO v1.1 (200 samples)", &m);
	snprintf(path, sizeof path, "%s/data/qa/hotpotqa-dev-distractor-sample479.json", shared);
	qa_hotpot(&h, path);
	qa_run(qa_k1s ? "hotpotqa" : "HotpotQA distractor (479)", &h);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--scale"))
		return scale_main(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--qa"))
		return qa_main(argc, argv);
	int n_docs = argc > 1 ? atoi(argv[1]) : 10000;
	int n_q = argc > 2 ? atoi(argv[2]) : 200;
	if (n_docs < 10 || n_q < 1)
		die("usage", "retrieve [N_DOCS>=10 [N_QUERIES]]");
	const char *shared = getenv("SS_SHARED") ? getenv("SS_SHARED") : "../shared";
	char corpus[1024];
	snprintf(corpus, sizeof corpus, "%s/data/corpora/wikitext-2-raw.test.hf-crlf.raw", shared);
	size_t clen;
	char *text = read_all(corpus, &clen);
	if (!text)
		die(corpus, "cannot read (set SS_SHARED)");

	/* Words → n_docs chunks of about equal word counts. */
	size_t n_words = 0, cap = 1 << 16;
	char **words = malloc(cap * sizeof *words);
	for (char *p = strtok(text, " \t\r\n"); p; p = strtok(NULL, " \t\r\n")) {
		if (n_words == cap)
			words = realloc(words, (cap *= 2) * sizeof *words);
		words[n_words++] = p;
	}
	size_t per = n_words / (size_t)n_docs; /* chunk i: words [i·n/N, (i+1)·n/N) */

	char dir[512];
	snprintf(dir, sizeof dir, "%s/ss-bench-retrieve-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		die(dir, "mkdtemp failed");
	char tpath[600], spath[600], dbpath[600], opath[600];
	snprintf(tpath, sizeof tpath, "%s/docs.tokens", dir);
	snprintf(spath, sizeof spath, "%s/shard0.states", dir);
	snprintf(dbpath, sizeof dbpath, "%s/idx.db", dir);
	snprintf(opath, sizeof opath, "%s/out.states", dir);

	/* Generate the streams. */
	double t0 = bench_now();
	char em[SS_ERRMSG_MAX];
	ss_writer *tw, *sw;
	if (ss_writer_open(&tw, tpath, 0, em) || ss_writer_open(&sw, spath, 0, em))
		die(dir, em);
	ss_state_dims d = { "mamba2", 2, 8, 16, 16, 160, 4 };
	ss_state s;
	if (ss_state_alloc(&s, &d))
		die("state", "out of memory");
	snprintf(s.fingerprint, sizeof s.fingerprint, "bench-t1-random");
	char **chunk_text = calloc((size_t)n_docs, sizeof *chunk_text);
	int32_t *tok = malloc((per + 2) * sizeof *tok);
	size_t buf_cap = 1 << 16;
	char *buf = malloc(buf_cap);
	int n_chunks = 0;
	for (; n_chunks < n_docs; n_chunks++) {
		size_t w0 = n_words * (size_t)n_chunks / (size_t)n_docs;
		size_t w1 = n_words * (size_t)(n_chunks + 1) / (size_t)n_docs, bl = 0;
		for (size_t w = w0; w < w1; w++) {
			size_t l = strlen(words[w]);
			if (bl + l + 2 > buf_cap)
				buf = realloc(buf, buf_cap *= 2);
			if (bl)
				buf[bl++] = ' ';
			memcpy(buf + bl, words[w], l);
			bl += l;
			tok[w - w0] = (int32_t)(w % 50277);
		}
		buf[bl] = 0;
		chunk_text[n_chunks] = strdup(buf);
		char id[32];
		snprintf(id, sizeof id, "wt#%d", n_chunks);
		ss_tokens t = { id, tok, (int64_t)(w1 - w0), buf, bl, NULL };
		if (ss_writer_put_tokens(tw, &t, NULL))
			die(tpath, "write failed");
		for (size_t i = 0; i < ss_state_ssm_len(&d); i++)
			s.ssm[i] = (float)((int64_t)(next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t i = 0; i < ss_state_conv_len(&d); i++)
			s.conv[i] = (float)((int64_t)(next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t i = 0; i < ss_state_logdecay_len(&d); i++)
			s.logdecay[i] = -(float)(next() >> 40) / (float)(1 << 24) * 50.0f;
		s.id = id;
		s.n_tokens = (int64_t)(w1 - w0);
		int rc = ss_writer_put_state(sw, &s, NULL);
		s.id = NULL;
		if (rc)
			die(spath, "write failed");
	}
	if (ss_writer_close(tw, em) || ss_writer_close(sw, em))
		die(dir, em);
	ss_state_free(&s);
	double t_gen = bench_now() - t0;
	struct stat st_s, st_t;
	stat(spath, &st_s);
	stat(tpath, &st_t);
	printf("ss-retrieve bench: %d documents (%zu words each, WikiText-2 test), t1 dims random states\n",
	       n_chunks, per);
	printf("  generate streams                          %8.2f s   (tokens %.1f MB, states %.1f MB)\n", t_gen,
	       st_t.st_size / 1e6, st_s.st_size / 1e6);

	/* Build. */
	t0 = bench_now();
	ss_index *ix;
	ss_index_build_stats bs;
	if (ss_index_build_open(&ix, dbpath, em) || ss_index_add_stream(ix, tpath, 0, NULL, NULL, NULL, em) ||
	    ss_index_add_stream(ix, spath, 0, NULL, NULL, NULL, em) || ss_index_commit(ix, NULL, NULL, &bs, em))
		die(dbpath, em);
	ss_index_close(ix);
	double t_build = bench_now() - t0;
	struct stat st_db;
	stat(dbpath, &st_db);
	printf("  build index                               %8.2f s   (%lld documents, index %.1f MB)\n", t_build,
	       (long long)bs.n_docs, st_db.st_size / 1e6);

	/* Queries: first half of a random chunk, that chunk excluded. */
	if (ss_index_open(&ix, dbpath, em))
		die(dbpath, em);
	double *t_query = malloc((size_t)n_q * sizeof(double)), *t_emit = malloc((size_t)n_q * sizeof(double));
	double *t_emit_re = malloc((size_t)n_q * sizeof(double)), *t_compose = malloc((size_t)n_q * sizeof(double));
	double *t_open = malloc((size_t)n_q * sizeof(double)), *t_emit_file = malloc((size_t)n_q * sizeof(double));
	const int k = 10;
	long long total_hits = 0;
	for (int q = 0; q < n_q; q++) {
		int c = (int)(next() % (uint64_t)n_chunks);
		char *qt = strdup(chunk_text[c]);
		size_t half = strlen(qt) / 2;
		while (half && qt[half] != ' ')
			half--;
		qt[half] = 0;
		char id[32];
		snprintf(id, sizeof id, "wt#%d", c);
		const char *ex[] = { id };

		t0 = bench_now();
		ss_index_hit *h;
		int n = ss_index_query(ix, qt[0] ? qt : "the", k, ex, 1, &h, em);
		t_query[q] = bench_now() - t0;
		if (n < 0)
			die("query", em);
		total_hits += n;

		t_emit[q] = emit(ix, h, n, "-");
		t_emit_file[q] = emit(ix, h, n, opath);
		ss_state st[10];
		const ss_state *in[10];
		t_emit_re[q] = emit_reencode(ix, h, n, st);

		/* Composing the same states (picaso-r), for scale. */
		for (int i = 0; i < n; i++)
			in[i] = &st[n - 1 - i];
		ss_compose_opts co = { SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN };
		ss_state out;
		t0 = bench_now();
		if (n > 0 && ss_compose(&co, in, (size_t)n, &out, em))
			die("compose", em);
		t_compose[q] = bench_now() - t0;
		if (n > 0)
			ss_state_free(&out);
		for (int i = 0; i < n; i++)
			ss_state_free(&st[i]);
		ss_index_hits_free(h, n);
		free(qt);
	}
	ss_index_close(ix);
	/* Opening the index (once per process; batch mode amortises it). */
	for (int q = 0; q < n_q && q < 50; q++) {
		t0 = bench_now();
		if (ss_index_open(&ix, dbpath, em))
			die(dbpath, em);
		ss_index_close(ix);
		t_open[q] = bench_now() - t0;
	}
	printf("  queries: first half of a chunk (~%zu words), k = %d, own chunk excluded, %.1f hits on average\n",
	       per / 2, k, (double)total_hits / n_q);
	report("open index (read-only)", t_open, n_q < 50 ? n_q : 50);
	report("query (BM25 top-k)", t_query, n_q);
	report("emit k states to a pipe (copy)", t_emit, n_q);
	report("emit k states to a pipe (decode+encode)", t_emit_re, n_q);
	report("emit k states to a file (copy, fsync)", t_emit_file, n_q);
	report("compose k states (picaso-r, in memory)", t_compose, n_q);
	for (int q = 0; q < n_q; q++)
		t_query[q] += t_emit[q];
	report("query + emit to a pipe", t_query, n_q);

	big_states(dir);

	for (int i = 0; i < n_chunks; i++)
		free(chunk_text[i]);
	free(chunk_text);
	free(tok);
	free(buf);
	free(words);
	free(text);
	free(t_query);
	free(t_emit);
	free(t_emit_re);
	free(t_compose);
	free(t_open);
	free(t_emit_file);
	unlink(tpath);
	unlink(spath);
	unlink(dbpath);
	unlink(opath);
	rmdir(dir);
	return 0;
}
