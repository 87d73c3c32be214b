/*
 * bench/train.c — speed of one training step on the CPU (ss_train.h: the
 * reference forward with saved activations, backward, AdamW) on random
 * models of three shapes: t1 (d_model 64, 2 layers, d_state 16, headdim 16)
 * and the issue-15 "27M" shape (d_model 384, 8 layers, d_state 64,
 * headdim 64), both with the GPT-NeoX vocabulary padded to 50288, and the
 * recall model's (pipelines/recall.mk: d_model 128, 4 layers, d_state 64,
 * headdim 32, vocabulary 556 padded to 560), all tied.
 *
 * Prints, per shape: training tokens/s (one sequence of -n tokens per
 * step), min and median over -r rounds after one warm-up step, and the
 * median time of each phase (forward, backward, AdamW), the BLAS and its
 * threads, and peak RSS. The peer, PyTorch on the CPU doing the same step on
 * the same shape (bench/peers/train_torch.py, issue 15), runs interleaved
 * with ours (ours, peer, ours, peer, ... one timed step each after its own
 * warm-up) on as many threads, when a python3 that imports torch is found
 * ($PYTHON, python3, /usr/bin/python3); then its median and ours/peer (min
 * and median of the per-round ratio) are printed, else "peer: not measured"
 * and why. Figures only, no pass/fail. The models are written with
 * gen/model.h into $TMPDIR and removed after the run.
 *
 * The step's own ops run on as many threads as the BLAS (ss_train_set_threads;
 * 2 with -t 0).
 *
 * usage: train [-n TOKENS] [-r ROUNDS] [-t THREADS] (default 2 threads)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ss.h"
#include "bench.h"
#include "gen/model.h"

#define MAX_ROUNDS 64

static int peer_threads;

/* One round of the peer on o's shape: its tokens/s into *rate; returns 0, or
 * -1 with why[] set. */
static int peer_round(const ss_mkmodel_opts *o, int64_t T, double *rate, char *why, size_t nwhy)
{
	const char *top = getenv("SS_TOP");
	char cmd[8192], line[512] = "";
	snprintf(cmd, sizeof cmd,
		 "sh -c 'for p in \"${PYTHON:-python3}\" python3 /usr/bin/python3; do "
		 "\"$p\" -c \"import torch\" 2>/dev/null && exec \"$p\" \"$0\" \"$@\"; done; "
		 "echo \"skipped: no python3 imports torch\"' '%s/bench/peers/train_torch.py' "
		 "--d-model %d --n-layer %d --d-state %d --headdim %d --vocab %d --pad-multiple %d "
		 "--tokens %lld --threads %d 2>&1",
		 top && *top ? top : ".", o->d_model, o->n_layer, o->d_state, o->headdim, o->vocab_size,
		 o->pad_vocab_multiple, (long long)T, peer_threads);
	FILE *f = popen(cmd, "r");
	if (!f) {
		snprintf(why, nwhy, "cannot run the peer script");
		return -1;
	}
	char buf[512];
	while (fgets(buf, sizeof buf, f))
		memcpy(line, buf, sizeof line);
	int st = pclose(f);
	line[strcspn(line, "\n")] = 0;
	if (st == 0 && sscanf(line, "tokens/s %lf", rate) == 1)
		return 0;
	snprintf(why, nwhy, "not measured (%s)", line[0] ? line : "the peer script failed");
	return -1;
}

static int run_shape(const char *label, const ss_mkmodel_opts *o, int64_t T, int rounds)
{
	char dir[4096], errmsg[SS_ERRMSG_MAX];
	double tf[MAX_ROUNDS], tb[MAX_ROUNDS], ta[MAX_ROUNDS], rate[MAX_ROUNDS], loss;
	double prate[MAX_ROUNDS], ratio[MAX_ROUNDS];
	char why[600] = "";
	int peer_ok = 1;
	const int64_t seq_start[2] = { 0, T };
	const ss_adamw h = { .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
			     .weight_decay = 0.1f };
	ss_model *m = ss_mkmodel_load_temp(o, NULL, "bench-train", dir, errmsg);
	ss_train *t = NULL;
	int32_t *tok = malloc((size_t)T * sizeof(int32_t)), *tgt = malloc((size_t)T * sizeof(int32_t));
	float *am = NULL, *av = NULL;
	uint64_t x = 1;
	int r, err = 0;

	if (!m) {
		fprintf(stderr, "train: %s\n", errmsg);
		free(tok), free(tgt);
		return 1;
	}
	ss_mkmodel_remove(dir);
	if (!tok || !tgt || (err = ss_train_init(&t, m, T, 1)) ||
	    (err = ss_train_set_threads(t, peer_threads))) {
		fprintf(stderr, "train: %s: %s\n", label, err ? ss_strerror(err) : "out of memory");
		goto out;
	}
	ss_train_params *P = ss_train_params_of(t), *G = ss_train_grads_of(t);
	am = calloc(P->n, sizeof(float));
	av = calloc(P->n, sizeof(float));
	if (!am || !av) {
		fprintf(stderr, "train: %s: out of memory\n", label);
		err = 1;
		goto out;
	}
	for (int64_t i = 0; i < T; i++) {
		tok[i] = (int32_t)((ss_splitmix64(&x) >> 33) % (uint64_t)m->cfg.vocab_size);
	}
	for (int64_t i = 0; i < T; i++)
		tgt[i] = i + 1 < T ? tok[i + 1] : -1;
	printf("%s: d_model %d, n_layer %d, d_state %d, headdim %d, nheads %d, %.1f M parameters, "
	       "%lld tokens per step\n",
	       label, m->cfg.d_model, m->cfg.n_layer, m->cfg.d_state, m->cfg.headdim, m->cfg.nheads,
	       P->n / 1e6, (long long)T);
	for (r = -1; r < rounds; r++) {
		const double t0 = bench_now();
		if ((err = ss_train_forward(t, tok, tgt, seq_start, 1, NULL, NULL, NULL, &loss)))
			break;
		const double t1 = bench_now();
		ss_train_zero_grad(t);
		if ((err = ss_train_backward(t, NULL, NULL, NULL)))
			break;
		const double t2 = bench_now();
		if ((err = ss_adamw_update(P->data, G->data, am, av, P->n, &h, r + 2)))
			break;
		const double t3 = bench_now();
		if (r < 0)
			continue; /* warm-up */
		tf[r] = t1 - t0, tb[r] = t2 - t1, ta[r] = t3 - t2;
		rate[r] = (double)T / (t3 - t0);
		if (peer_ok && peer_round(o, T, &prate[r], why, sizeof why))
			peer_ok = 0;
		if (peer_ok)
			ratio[r] = rate[r] / prate[r];
	}
	if (err) {
		fprintf(stderr, "train: %s: %s\n", label, ss_strerror(err));
		goto out;
	}
	printf("  training tokens/s: best %.0f, median %.0f (%d rounds); loss %.3f\n",
	       bench_max(rate, rounds), bench_median(rate, rounds), rounds, loss);
	printf("  median per step: forward %.1f ms, backward %.1f ms, AdamW %.1f ms\n",
	       bench_median(tf, rounds) * 1e3, bench_median(tb, rounds) * 1e3,
	       bench_median(ta, rounds) * 1e3);
	if (peer_ok) {
		printf("  peer: PyTorch on the CPU (bench/peers/train_torch.py), %d threads, %d rounds "
		       "interleaved: median %.0f tokens/s (best %.0f)\n",
		       peer_threads, rounds, bench_median(prate, rounds), bench_max(prate, rounds));
		printf("  ours/peer: min %.2f, median %.2f (goal >= 3)\n", bench_min(ratio, rounds),
		       bench_median(ratio, rounds));
	} else {
		printf("  peer: %s\n", why);
	}
out:
	ss_train_free(t);
	ss_model_free(m);
	free(tok), free(tgt), free(am), free(av);
	return err != 0;
}

int main(int argc, char **argv)
{
	int64_t T = 256;
	int rounds = 3, threads = 2, rc = 0;
	struct rusage ru;
	ss_mkmodel_opts o;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			T = atoll(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-t") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: train [-n TOKENS] [-r ROUNDS] [-t BLAS_THREADS]\n");
			return 2;
		}
	}
	if (T < 2 || rounds < 1 || rounds > MAX_ROUNDS || threads < 0) {
		fprintf(stderr, "train: -n >= 2, 1 <= -r <= %d, -t >= 0 (0: the BLAS's default)\n",
			MAX_ROUNDS);
		return 2;
	}
	peer_threads = threads ? threads : 2;
	bench_blas_threads(threads);
	ss_mkmodel_defaults(&o);
	rc |= run_shape("t1", &o, T, rounds);
	o.d_model = 384;
	o.n_layer = 8;
	o.d_state = 64;
	o.headdim = 64;
	rc |= run_shape("27M", &o, T, rounds);
	/* The recall model (pipelines/recall.mk): a small vocabulary, so the
	 * mixer, not the LM head, is most of a step. */
	o.d_model = 128;
	o.n_layer = 4;
	o.headdim = 32;
	o.vocab_size = 556;
	o.pad_vocab_multiple = 8;
	rc |= run_shape("recall", &o, T, rounds);
	getrusage(RUSAGE_SELF, &ru);
	printf("peak RSS %.1f MB\n", ru.ru_maxrss / 1e3);
	return rc;
}
