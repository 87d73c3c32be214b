/*
 * bench/bptc.c — cost of the composition objectives of picaso.txt §5 on the
 * CPU reference (ss_train.h) against the plain step on the same tokens, on
 * a random model of t1's shape (d_model 64, 2 layers, d_state 16, headdim
 * 16, vocabulary 50288, tied):
 *   lm    forward + backward of query·continuation from the zero state;
 *   bp2c  the same from a composed state (ss_train_bp2c);
 *   bptc  ss_train_bptc with k chunks: encode, compose, score, backward
 *         through the composition, re-encode and backward the chunks;
 *         picaso-r and soup.
 * One example per step: k chunks of -L tokens, query and continuation of
 * -L tokens each (WikiText-2 passages split in halves, §6.1). Prints the
 * median and best time per example over -r rounds, the steps interleaved
 * (the machine may be shared), and bptc's ratio to bp2c. No peer: PyTorch
 * has no BPTC to compare with (the paper's is not released).
 * Figures only, no pass/fail.
 *
 * usage: bptc [-k CHUNKS] [-L TOKENS] [-r ROUNDS] [-t BLAS_THREADS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "bench.h"
#include "gen/model.h"

#define MAX_ROUNDS 64
#define MAX_K 64

enum { S_LM, S_BP2C, S_PICASO_R, S_SOUP, NSTEPS };
static const char *const step_name[NSTEPS] = { "lm", "bp2c", "bptc picaso-r", "bptc soup" };

int main(int argc, char **argv)
{
	int k = 10, rounds = 3, threads = 0, err = 0;
	int64_t L = 64;
	char dir[4096], errmsg[SS_ERRMSG_MAX];
	double tm[NSTEPS][MAX_ROUNDS], loss[NSTEPS];
	ss_mkmodel_opts o;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-k") && i + 1 < argc)
			k = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-L") && i + 1 < argc)
			L = atoll(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-t") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bptc [-k CHUNKS] [-L TOKENS] [-r ROUNDS] [-t BLAS_THREADS]\n");
			return 2;
		}
	}
	if (k < 1 || k > MAX_K || L < 2 || rounds < 1 || rounds > MAX_ROUNDS || threads < 0) {
		fprintf(stderr, "bptc: 1 <= -k <= %d, -L >= 2, 1 <= -r <= %d, -t >= 0\n", MAX_K,
			MAX_ROUNDS);
		return 2;
	}
	bench_blas_threads(threads);
	ss_mkmodel_defaults(&o);
	ss_model *m = ss_mkmodel_load_temp(&o, NULL, "bench-bptc", dir, errmsg);
	if (!m) {
		fprintf(stderr, "bptc: %s\n", errmsg);
		return 1;
	}
	ss_mkmodel_remove(dir);

	/* tokens: k chunks, then the query, then the continuation, each L */
	int32_t *tok = malloc((size_t)(k + 2) * (size_t)L * sizeof *tok);
	const int32_t *chunks[MAX_K];
	int64_t chunk_len[MAX_K];
	ss_train *t = NULL;
	float *conv = NULL, *ssm = NULL;
	uint64_t x = 1;
	if (!tok || (err = ss_train_init(&t, m, 2 * L, MAX_K))) {
		fprintf(stderr, "bptc: %s\n", err ? ss_strerror(err) : "out of memory");
		free(tok);
		ss_model_free(m);
		return 1;
	}
	for (int64_t i = 0; i < (k + 2) * L; i++) {
		tok[i] = (int32_t)((ss_splitmix64(&x) >> 33) % (uint64_t)m->cfg.vocab_size);
	}
	for (int i = 0; i < k; i++)
		chunks[i] = tok + i * L, chunk_len[i] = L;
	const int32_t *query = tok + k * L, *cont = query + L;
	/* bp2c's composed state: any state of the right size will do */
	conv = calloc(ss_train_conv_len(t), sizeof *conv);
	ssm = calloc(ss_train_ssm_len(t), sizeof *ssm);
	if (!conv || !ssm) {
		fprintf(stderr, "bptc: out of memory\n");
		err = 1;
		goto out;
	}
	for (size_t i = 0; i < ss_train_ssm_len(t); i++)
		ssm[i] = (float)((int)(i % 7) - 3) * 0.1f;
	printf("t1 shape: %.1f M parameters; k = %d chunks of %lld tokens, query and continuation "
	       "of %lld each\n",
	       ss_train_params_of(t)->n / 1e6, k, (long long)L, (long long)L);
	for (int r = -1; r < rounds && !err; r++)
		for (int s = 0; s < NSTEPS && !err; s++) {
			ss_train_bptc_example ex = { chunks, chunk_len, k, query, L, cont, L,
						     s == S_SOUP ? SS_COMPOSE_SOUP : SS_COMPOSE_PICASO_R };
			const double t0 = bench_now();
			ss_train_zero_grad(t);
			if (s == S_LM)
				err = ss_train_bp2c(t, NULL, NULL, query, L, cont, L, &loss[s]);
			else if (s == S_BP2C)
				err = ss_train_bp2c(t, conv, ssm, query, L, cont, L, &loss[s]);
			else
				err = ss_train_bptc(t, &ex, &loss[s]);
			if (r >= 0)
				tm[s][r] = bench_now() - t0;
		}
	if (err) {
		fprintf(stderr, "bptc: %s\n", ss_strerror(err));
		goto out;
	}
	double med[NSTEPS];
	for (int s = 0; s < NSTEPS; s++) {
		const double best = bench_min(tm[s], rounds);
		med[s] = bench_median(tm[s], rounds);
		printf("  %-14s median %8.1f ms, best %8.1f ms per example (loss %.3f)\n", step_name[s],
		       med[s] * 1e3, best * 1e3, loss[s]);
	}
	printf("  bptc picaso-r / bp2c: %.2fx (median; %d rounds, interleaved)\n",
	       med[S_PICASO_R] / med[S_BP2C], rounds);
	printf("  peer: none (no released BPTC implementation to run)\n");
out:
	ss_train_free(t);
	ss_model_free(m);
	free(tok), free(conv), free(ssm);
	return err != 0;
}
