/*
 * retrieve — ss-retrieve's figures. By default: index build time, query
 * latency (median, p95) and the time to emit the k = 10 states of a query,
 * on an index of 10,000 WikiText chunks with random states of the t1
 * golden dims (n_layer 2, nheads 8, headdim 16, d_state 16, conv_dim 160,
 * d_conv 4); then emit vs compose for k = 10 states of mamba2-130m dims.
 * Emitting copies the stored frames verbatim (ss_index_copy); decoding and
 * re-encoding each state is timed beside it for scale. Prints figures;
 * never fails on time. This file: that measurement, the program's helpers
 * (retrieve.h) and the choice of mode; --scale is scale.c's, --qa qa.c's.
 *
 * usage: retrieve [N_DOCS [N_QUERIES]]   (defaults 10000, 200)
 *        retrieve --scale [OPTION...] TOKENS...   (scale.c)
 *        retrieve --qa [--k1 K1,... --b B,...]    (qa.c)
 * Corpus: $SS_SHARED/data/corpora/wikitext-2-raw.test.hf-crlf.raw. Scratch
 * files go to a temporary directory under $TMPDIR (removed at the end).
 * Queries follow the paper's protocol: the first half of a chunk, with that
 * chunk excluded.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ss.h"
#include "bench/bench.h"
#include "retrieve.h"

/* The program's helpers: see retrieve.h. */
void die(const char *what, const char *msg)
{
	fprintf(stderr, "retrieve: %s: %s\n", what, msg);
	exit(1);
}

static uint64_t rng = 88172645463325252ull;
uint64_t rng_next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

void scratch_dir(char *dir, size_t cap, const char *name)
{
	snprintf(dir, cap, "%s/ss-bench-%s-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
	if (!mkdtemp(dir))
		die(dir, "mkdtemp failed");
}

/* Prints median and p95 of t[0..n) seconds as ms. */
static void report(const char *what, double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
	int p95 = (int)(0.95 * (n - 1) + 0.5);
	printf("  %-40s median %8.3f ms   p95 %8.3f ms   (n=%d)\n", what, t[n / 2] * 1e3, t[p95] * 1e3, n);
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
			s.ssm[j] = (float)((int64_t)(rng_next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t j = 0; j < ss_state_logdecay_len(&d); j++)
			s.logdecay[j] = -(float)(rng_next() >> 40) / (float)(1 << 24) * 50.0f;
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
	ss_index_hit rev[K]; /* least relevant (last hit) first */
	for (int j = 0; j < n; j++)
		rev[j] = h[n - 1 - j];
	for (int r = 0; r < REPS; r++) {
		double t0 = bench_now();
		ss_compose_opts co = { SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN };
		ss_compose_run_opts ro = { 0 };
		ss_compose_result res;
		if (ss_index_compose(ix, rev, n, &co, &ro, &res, em))
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
	char *text = bench_read_file(corpus, &clen);
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
	scratch_dir(dir, sizeof dir, "retrieve");
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
			s.ssm[i] = (float)((int64_t)(rng_next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t i = 0; i < ss_state_conv_len(&d); i++)
			s.conv[i] = (float)((int64_t)(rng_next() >> 40) - (1 << 23)) / (float)(1 << 23);
		for (size_t i = 0; i < ss_state_logdecay_len(&d); i++)
			s.logdecay[i] = -(float)(rng_next() >> 40) / (float)(1 << 24) * 50.0f;
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
		int c = (int)(rng_next() % (uint64_t)n_chunks);
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
