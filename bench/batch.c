/*
 * batch.c — batched decode throughput (issue 35 §1): tokens/s of decode
 * steps over B sequences at once, B = 1, 2, 4, ... 32, with the weight
 * matrices in f32 and in bf16, on a random model of mamba2-130m's shape
 * (gen/model.h); the goal is B = 32 at >= 8x B = 1, for each dtype.
 *
 * A step is what batched ss-decode runs: ss_forward_decode over B states
 * with full logits, in a deterministic context (ss_forward_ctx_set_deterministic:
 * each row's logits the same bits whatever B; the row-invariant kernel of
 * lib/forward/ops/linear_f32.h) and, for the cost of that determinism, in
 * a default context (the BLAS: sgemv at B = 1, sgemm above; 16-bit
 * weights through ss_matvec_w16 up to 4 rows, widened panels and sgemm
 * above). Every B starts from states advanced by a few prompt tokens; a
 * round measures each configuration once, rounds interleave them (the
 * machine may be shared), and the figures are the best and the median
 * round. No peer: the goal is a ratio of our own figures (llama.cpp's
 * batched decode is issue 35 §3's end-to-end benchmark).
 *
 * usage: batch [-t THREADS] [-s STEPS] [-r ROUNDS] [-b MAX_B] [-p PRESET]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss.h"
#include "bench.h"
#include "gen/model.h"

#define MAX_ROUNDS 32
#define NB 6 /* B = 1, 2, 4, 8, 16, 32 */

static void check(int err, const char *what, const char *errmsg)
{
	if (err) {
		fprintf(stderr, "batch: %s: %s (%s)\n", what, ss_strerror(err), errmsg);
		exit(1);
	}
}

/* One configuration: a model (dtype) and a context (deterministic or not). */
typedef struct {
	ss_model *m;
	ss_forward_ctx *ctx;
	int det;
	double tps[NB][MAX_ROUNDS]; /* tokens/s per B and round */
} config;

/* Runs `steps` decode steps of B sequences (after one warm-up step) and
 * returns tokens/s. States start from a short prompt each. */
static double run(const config *c, int B, int steps)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	ss_state *st = calloc((size_t)B, sizeof(*st));
	ss_state **sp = malloc((size_t)B * sizeof(*sp));
	int32_t *tok = malloc((size_t)B * sizeof(*tok));
	float *logits = malloc((size_t)B * c->m->cfg.vocab_padded * sizeof(float));
	ss_state_dims d;
	int32_t prompt[4];
	double t = 0;

	if (!st || !sp || !tok || !logits) {
		fprintf(stderr, "batch: out of memory\n");
		exit(1);
	}
	ss_model_state_dims(c->m, &d);
	for (int i = 0; i < B; i++) {
		check(ss_state_alloc(&st[i], &d), "state", "out of memory");
		for (int k = 0; k < 4; k++)
			prompt[k] = (int32_t)((i * 131 + k * 17 + 3) % 50000);
		ss_forward_seq q = { prompt, 4, &st[i], NULL, NULL };
		check(ss_forward_prefill(c->ctx, &q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		sp[i] = &st[i];
		tok[i] = prompt[3];
	}
	for (int k = -1; k < steps; k++) {
		if (k == 0)
			t = bench_now();
		check(ss_forward_decode(c->ctx, sp, tok, B, logits, errmsg), "decode", errmsg);
		for (int i = 0; i < B; i++) /* greedy, so the states move as in ss-decode */
			tok[i] = ss_argmax(logits + (size_t)i * c->m->cfg.vocab_padded, c->m->cfg.vocab_padded);
	}
	t = bench_now() - t;
	for (int i = 0; i < B; i++)
		ss_state_free(&st[i]);
	free(st);
	free(sp);
	free(tok);
	free(logits);
	return (double)B * steps / t;
}

int main(int argc, char **argv)
{
	int threads = 2, steps = 8, rounds = 3, maxb = 32;
	const char *preset = "mamba2-130m";
	char errmsg[SS_ERRMSG_MAX] = "", dir[4096] = "";
	static const int Bs[NB] = { 1, 2, 4, 8, 16, 32 };
	static const char *const dts[2] = { "f32", "bf16" };
	config cf[4]; /* f32 det, f32 blas, bf16 det, bf16 blas */
	ss_mkmodel_opts mo;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int *dst = !strcmp(a, "-t") ? &threads : !strcmp(a, "-s") ? &steps
			 : !strcmp(a, "-r") ? &rounds : !strcmp(a, "-b") ? &maxb : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: batch [-t THREADS] [-s STEPS] [-r ROUNDS] [-b MAX_B] [-p PRESET]\n"
			       "Decode tokens/s at B = 1, 2, 4, ... MAX_B (default 32) sequences per step,\n"
			       "f32 and bf16 weights, deterministic (ss-decode's) and BLAS contexts.\n");
			return 0;
		}
		if (!strcmp(a, "-p") && i + 1 < argc) {
			preset = argv[++i];
			continue;
		}
		if (!dst || i + 1 >= argc || (*dst = atoi(argv[++i])) <= 0) {
			fprintf(stderr, "batch: bad option %s (try -h)\n", a);
			return 2;
		}
	}
	if (rounds > MAX_ROUNDS)
		rounds = MAX_ROUNDS;
	ss_mkmodel_defaults(&mo);
	if (ss_mkmodel_preset(&mo, preset)) {
		fprintf(stderr, "batch: unknown preset %s\n", preset);
		return 2;
	}
	double t0 = bench_now();
	ss_model *m32 = ss_mkmodel_load_temp(&mo, NULL, "bench-batch", dir, errmsg), *m16 = NULL;
	const ss_model_opts lo16 = { .flags = SS_MODEL_WEIGHTS_DTYPE,
				     .weights_dtype = SS_DTYPE_BF16 };
	if (!m32 || ss_model_load_opts(&m16, dir, &lo16, errmsg)) {
		fprintf(stderr, "batch: %s\n", errmsg);
		return 1;
	}
	printf("model: random %s (d_model %d, n_layer %d, d_state %d, nheads %d, vocab %d), made in %.1f s\n",
	       preset, m32->cfg.d_model, m32->cfg.n_layer, m32->cfg.d_state, m32->cfg.nheads,
	       m32->cfg.vocab_padded, bench_now() - t0);
	printf("threads %d, %d steps with full logits per figure, best and median of %d interleaved rounds; "
	       "BLAS %s (%s)\n", threads, steps, rounds, ss_blas_name(), ss_blas_kernels());
	printf("peer: not measured (the goal is ours at B = 32 against ours at B = 1)\n");
	for (int k = 0; k < 4; k++) {
		cf[k].m = k < 2 ? m32 : m16;
		cf[k].det = k % 2 == 0;
		check(ss_forward_ctx_init(&cf[k].ctx, cf[k].m, threads, 0, errmsg), "context", errmsg);
		check(ss_forward_ctx_set_deterministic(cf[k].ctx, cf[k].det), "deterministic", "");
	}
	int nb = 0;
	while (nb < NB && Bs[nb] <= maxb)
		nb++;
	for (int r = 0; r < rounds; r++)
		for (int b = 0; b < nb; b++)
			for (int k = 0; k < 4; k++)
				cf[k].tps[b][r] = run(&cf[k], Bs[b], steps);

	printf("\n%-6s %-14s", "dtype", "mode");
	for (int b = 0; b < nb; b++)
		printf("  B=%-2d best/median", Bs[b]);
	printf("   (decode tokens/s)\n");
	for (int k = 0; k < 4; k++) {
		printf("%-6s %-14s", dts[k / 2], cf[k].det ? "deterministic" : "BLAS");
		for (int b = 0; b < nb; b++) {
			double v[MAX_ROUNDS];
			memcpy(v, cf[k].tps[b], sizeof(double) * rounds);
			printf("  %7.1f/%7.1f", bench_max(v, rounds), bench_median(v, rounds));
		}
		printf("\n");
	}
	printf("\n");
	for (int k = 0; k < 4; k++) {
		double r1[MAX_ROUNDS], rb[MAX_ROUNDS];
		memcpy(r1, cf[k].tps[0], sizeof(double) * rounds);
		memcpy(rb, cf[k].tps[nb - 1], sizeof(double) * rounds);
		printf("%-4s %-13s B=%d/B=1: %.2f (best/best), %.2f (median/median)%s\n", dts[k / 2],
		       cf[k].det ? "deterministic" : "BLAS", Bs[nb - 1], bench_max(rb, rounds) / bench_max(r1, rounds),
		       bench_median(rb, rounds) / bench_median(r1, rounds),
		       cf[k].det && Bs[nb - 1] == 32 ? " (goal >= 8)" : "");
	}
	for (int d = 0; d < 2; d++)
		for (int b = 0; b < nb; b += nb - 1) {
			double x[MAX_ROUNDS], y[MAX_ROUNDS];
			memcpy(x, cf[2 * d].tps[b], sizeof(double) * rounds);
			memcpy(y, cf[2 * d + 1].tps[b], sizeof(double) * rounds);
			printf("%-4s B=%-2d deterministic/BLAS: %.2f (best/best), %.2f (median/median)\n",
			       dts[d], Bs[b], bench_max(x, rounds) / bench_max(y, rounds),
			       bench_median(x, rounds) / bench_median(y, rounds));
		}
	for (int k = 0; k < 4; k++)
		ss_forward_ctx_free(cf[k].ctx);
	ss_model_free(m16);
	ss_model_free(m32);
	ss_mkmodel_remove(dir);
	return 0;
}
