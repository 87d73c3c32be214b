/*
 * shards — one index against the same documents in several index files
 * (shards, ss_index_open_shards): query latency of each (median, p95, p99),
 * in wall time and in the thread's CPU time (on a machine shared with other
 * jobs the wall time includes waiting for a core, the CPU time does not),
 * and whether their top k agree (ids and ranks equal, scores within 1e-9
 * relative). The queries run alternately on the two, each after a warm-up
 * pass over all of them, so that both see warm caches. Prints figures;
 * exits 1 only when the results differ (never on time).
 *
 * usage: shards [-k K] [--flags N] QUERIES ONE.db SHARD.db...
 *   QUERIES: one query a line; --flags: SS_INDEX_QUERY_* (default 0: the
 *   plain OR; 1 phrases, 2 AND, 4 proximity).
 * Example (pipelines: a 44 k-chunk corpus): see the report in issue 49.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ss.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of this thread. */
static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, double *ms, int n)
{
	qsort(ms, (size_t)n, sizeof *ms, cmp_double);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += ms[i];
	printf("%-22s queries %d  mean %.3f ms  p50 %.3f ms  p95 %.3f ms  p99 %.3f ms\n", what, n, sum / n,
	       ms[n / 2], ms[(int)(0.95 * (n - 1))], ms[(int)(0.99 * (n - 1))]);
}

static ss_index *open_or_die(const char *const *paths, int n, unsigned flags)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open_shards(&ix, paths, n, em) || ss_index_set_query(ix, flags, em)) {
		fprintf(stderr, "shards: %s: %s\n", paths[0], em);
		exit(1);
	}
	return ix;
}

/* One query on ix: its hits (*h) and its time in ms (*cpu: its CPU time). */
static double timed(ss_index *ix, const char *q, int k, ss_index_hit **h, int *n, double *cpu)
{
	char em[SS_ERRMSG_MAX];
	double t0 = now(), c0 = cpu_now();
	*n = ss_index_query(ix, q, k, NULL, 0, h, em);
	double ms = (now() - t0) * 1e3;
	*cpu = (cpu_now() - c0) * 1e3;
	if (*n < 0) {
		fprintf(stderr, "shards: query \"%s\": %s\n", q, em);
		exit(1);
	}
	return ms;
}

int main(int argc, char **argv)
{
	int k = 10, a = 1;
	unsigned flags = 0;
	for (; a < argc && argv[a][0] == '-'; a += 2) {
		if (a + 1 >= argc)
			break;
		if (!strcmp(argv[a], "-k"))
			k = atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--flags"))
			flags = (unsigned)atoi(argv[a + 1]);
	}
	if (argc - a < 3 || k < 1) {
		fprintf(stderr, "usage: shards [-k K] [--flags N] QUERIES ONE.db SHARD.db...\n");
		return 2;
	}
	FILE *f = fopen(argv[a], "r");
	if (!f) {
		perror(argv[a]);
		return 1;
	}
	char **qs = NULL, *line = NULL;
	size_t cap = 0;
	int nq = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (!len)
			continue;
		qs = realloc(qs, (size_t)(nq + 1) * sizeof *qs);
		qs[nq++] = strdup(line);
	}
	fclose(f);
	free(line);
	if (!nq) {
		fprintf(stderr, "shards: %s: no query\n", argv[a]);
		return 1;
	}
	const char *const *one = (const char *const *)&argv[a + 1];
	const char *const *sh = (const char *const *)&argv[a + 2];
	int n_sh = argc - a - 2;
	double t0 = now();
	ss_index *ix1 = open_or_die(one, 1, flags);
	double open1 = now() - t0;
	t0 = now();
	ss_index *ixs = open_or_die(sh, n_sh, flags);
	double opens = now() - t0;
	double *ms1 = malloc((size_t)nq * sizeof *ms1), *mss = malloc((size_t)nq * sizeof *mss);
	double *cpu1 = malloc((size_t)nq * sizeof *cpu1), *cpus = malloc((size_t)nq * sizeof *cpus);
	int bad = 0, n1, ns;
	ss_index_hit *h1, *hs;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < nq; i++) {
			double c1, cs;
			double a1 = timed(ix1, qs[i], k, &h1, &n1, &c1);
			double as = timed(ixs, qs[i], k, &hs, &ns, &cs);
			if (pass) {
				ms1[i] = a1;
				mss[i] = as;
				cpu1[i] = c1;
				cpus[i] = cs;
			}
			for (int j = 0; pass && j < (n1 > ns ? n1 : ns); j++) {
				double d = j < n1 && j < ns ? h1[j].score - hs[j].score : 1;
				if (j >= n1 || j >= ns || strcmp(h1[j].id, hs[j].id) || h1[j].rank != hs[j].rank ||
				    (d < 0 ? -d : d) > 1e-9 * h1[j].score) {
					if (bad++ < 5)
						printf("query %d rank %d: %s %.17g vs %s %.17g\n", i + 1, j + 1,
						       j < n1 ? h1[j].id : "-", j < n1 ? h1[j].score : 0.0,
						       j < ns ? hs[j].id : "-", j < ns ? hs[j].score : 0.0);
					break;
				}
			}
			ss_index_hits_free(h1, n1);
			ss_index_hits_free(hs, ns);
		}
	printf("open: one index %.3f s, %d shards %.3f s (the shards' ids checked for duplicates)\n", open1, n_sh,
	       opens);
	report("one index", ms1, nq);
	char what[64];
	snprintf(what, sizeof what, "%d shards", n_sh);
	report(what, mss, nq);
	report("one index, CPU time", cpu1, nq);
	snprintf(what, sizeof what, "%d shards, CPU time", n_sh);
	report(what, cpus, nq);
	printf("top %d: %s (%d of %d queries differ)\n", k, bad ? "DIFFER" : "identical ids, ranks, scores", bad, nq);
	ss_index_close(ix1);
	ss_index_close(ixs);
	for (int i = 0; i < nq; i++)
		free(qs[i]);
	free(qs);
	free(ms1);
	free(mss);
	free(cpu1);
	free(cpus);
	return bad ? 1 : 0;
}
