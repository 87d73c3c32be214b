/*
 * scale.c — retrieve --scale (scale_main, at the end): the index at the
 * size of a real corpus. The chunks of the token streams TOKENS... (their
 * texts; --chunks N: the first N), each --copies C times under its own id,
 * with a tiny random state each, are built into one index as ss-retrieve
 * build does (and, with --shards S, into S contiguous shards as well, for
 * bench/shards); then --queries Q queries of 30 consecutive words of a
 * random chunk, k = 10: open time, latency (wall and CPU; p50, p95, p99)
 * in process, the query syntax's modes beside plain BM25 (--no-modes: not
 * timed), ss-retrieve itself (--cli PATH: one batch and a process per
 * query) and FTS5 on the same documents and terms (--peer; --peer-queries
 * P of them), with the top-10 overlap. --keep DIR keeps the files there
 * (pipelines/scale.mk, docs/SCALING.md).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ss.h"
#include "bench/bench.h"
#include "retrieve.h"

/* Prints p50, p95, p99 and mean of t[0..n) seconds as ms (sorts t). */
static void report3(const char *what, double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
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

/* retrieve --scale [OPTION...] TOKENS... (argv[1] is "--scale"): see the top
 * of this file. */
int scale_main(int argc, char **argv)
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
		scratch_dir(dir, sizeof dir, "scale");
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
		const char *t = texts[rng_next() % n];
		int nw = 0;
		for (const char *p = t; *p;) {
			while (*p && isspace((unsigned char)*p))
				p++;
			if (*p)
				nw++;
			while (*p && !isspace((unsigned char)*p))
				p++;
		}
		int from = nw > 30 ? (int)(rng_next() % (uint64_t)(nw - 29)) : 0, w = 0;
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
