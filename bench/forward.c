/*
 * bench/forward.c — speed of the CPU forward pass on a random model of
 * mamba2-130m shape (d_model 768, 24 layers, d_state 128, headdim 64,
 * expand 2, ngroups 1, vocab 50288, f32).
 *
 * Prints: prefill tokens/s for state extraction (no lm_head) over a batch of
 * 512-token documents, the time of one 512-token prefill, decode tokens/s
 * (single-token steps with full logits, like llama-bench tg128), and memory.
 * Each figure is the best of -r rounds (the machine may be shared).
 * OpenBLAS picks its kernels at load time, or as $OPENBLAS_CORETYPE says;
 * prefill is GEMM-bound, so the kernel family (AVX2 "Haswell" or AVX-512
 * "SkylakeX"/"Cooperlake") matters and is printed.
 * Figures only, no pass/fail. The model is written with tests/util/mkmodel.h
 * into $TMPDIR (removed after loading), or read from -m DIR. The peer figures (issue 3): llama.cpp upstream,
 * same shape, f32, 2 threads, this machine class: pp512 ≈ 540 tokens/s,
 * tg128 ≈ 55 tokens/s.
 *
 * usage: forward [-t THREADS] [-d DOCS] [-n TOKENS] [-g DECODE_STEPS] [-u UBATCH]
 *                [-r REPEATS] [-p PRESET | -m MODEL_DIR] [--no-mmap] [--deterministic]
 * --deterministic: prefill with ss_forward_ctx_set_deterministic (its cost).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ss.h"
#include "../tests/util/mkmodel.h"

/* The independent peer's figures (issue 3: llama.cpp upstream, mamba2-130m
 * shape, f32, 2 threads, measured on this machine class): llama-bench pp512
 * and tg128. Printed beside ours; llama.cpp is not built here. */
#define PEER_PP512 540.0
#define PEER_TG128 55.0

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static size_t model_bytes(const ss_model *m)
{
	const ss_model_config *c = &m->cfg;
	size_t per_layer = (size_t)c->d_model * (1 + c->d_in_proj + c->d_inner) +
			   (size_t)c->conv_dim * (c->d_conv + 1) + 3 * (size_t)c->nheads + c->d_inner;
	return sizeof(float) * ((size_t)c->vocab_padded * c->d_model * (c->tied ? 1 : 2) +
				c->d_model + per_layer * c->n_layer);
}

/* Writes a random model of the preset's shape into a temporary directory,
 * loads it, and removes the files (a mapping outlives the names). */
static ss_model *make_model(const char *preset, const ss_model_opts *lo, char *errmsg)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], path[4200];
	ss_mkmodel_opts o;
	ss_model *m = NULL;
	int err;

	ss_mkmodel_defaults(&o);
	if (ss_mkmodel_preset(&o, preset) != 0) {
		snprintf(errmsg, SS_ERRMSG_MAX, "unknown preset %s", preset);
		return NULL;
	}
	snprintf(dir, sizeof(dir), "%s/ss-bench-forward-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		snprintf(errmsg, SS_ERRMSG_MAX, "%.400s: cannot create", dir);
		return NULL;
	}
	err = ss_mkmodel_write(dir, &o, errmsg);
	if (!err)
		err = ss_model_load_opts(&m, dir, lo, errmsg);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	unlink(path);
	rmdir(dir);
	return err ? NULL : m;
}

static void state_new(ss_state *s, const ss_model *m)
{
	ss_state_dims d;
	ss_model_state_dims(m, &d);
	if (ss_state_alloc(s, &d) != 0) {
		fprintf(stderr, "forward: out of memory\n");
		exit(1);
	}
}

static void state_zero(ss_state *s)
{
	memset(s->ssm, 0, ss_state_ssm_len(&s->dims) * sizeof(float));
	memset(s->conv, 0, ss_state_conv_len(&s->dims) * sizeof(float));
	memset(s->logdecay, 0, ss_state_logdecay_len(&s->dims) * sizeof(float));
	s->n_tokens = 0;
}

static void check(int err, const char *what, const char *errmsg)
{
	if (err) {
		fprintf(stderr, "forward: %s: %s (%s)\n", what, ss_strerror(err), errmsg);
		exit(1);
	}
}

static long peak_rss_kb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

int main(int argc, char **argv)
{
	int threads = 2, docs = 4, len = 512, steps = 128, ubatch = 512, reps = 3;
	const char *preset = "mamba2-130m", *model_dir = NULL;
	ss_model_opts lo = { 0 };
	int vocab, det = 0;
	char errmsg[SS_ERRMSG_MAX] = "";
	ss_model *m;
	ss_forward_ctx *ctx;
	ss_state *st;
	ss_forward_seq *q;
	int32_t *tok;
	float *logits;
	double t0, t, best;
	int i, r, k;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		int *dst = !strcmp(a, "-t") ? &threads : !strcmp(a, "-d") ? &docs : !strcmp(a, "-n") ? &len
			 : !strcmp(a, "-g") ? &steps : !strcmp(a, "-u") ? &ubatch : !strcmp(a, "-r") ? &reps
			 : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: forward [-t THREADS] [-d DOCS] [-n TOKENS] [-g DECODE_STEPS] [-u UBATCH] [-r REPEATS]\n"
			       "               [-p PRESET | -m MODEL_DIR] [--no-mmap] [--deterministic]\n"
			       "PRESET: a tests/util/mkmodel.h shape (default mamba2-130m), written to $TMPDIR and loaded.\n");
			return 0;
		}
		if (!strcmp(a, "--no-mmap")) {
			lo.flags |= SS_MODEL_NO_MMAP;
			continue;
		}
		if (!strcmp(a, "--deterministic")) {
			det = 1;
			continue;
		}
		if ((!strcmp(a, "-p") || !strcmp(a, "-m")) && i + 1 < argc) {
			*(a[1] == 'p' ? &preset : &model_dir) = argv[++i];
			continue;
		}
		if (!dst || i + 1 >= argc || (*dst = atoi(argv[++i])) <= 0) {
			fprintf(stderr, "forward: bad option %s (try -h)\n", a);
			return 2;
		}
	}

	t0 = now();
	if (model_dir) {
		if (ss_model_load_opts(&m, model_dir, &lo, errmsg) != 0)
			m = NULL;
	} else
		m = make_model(preset, &lo, errmsg);
	if (!m) {
		fprintf(stderr, "forward: %s\n", errmsg);
		return 1;
	}
	vocab = m->cfg.vocab_padded;
	printf("model: %s%s, d_model %d, n_layer %d, d_state %d, headdim %d, nheads %d, ngroups %d, vocab %d, %s weights, %.1f MB as f32 (made and loaded in %.1f s)\n",
	       model_dir ? model_dir : preset, lo.flags & SS_MODEL_NO_MMAP ? " (heap, no mmap)" : "",
	       m->cfg.d_model, m->cfg.n_layer, m->cfg.d_state,
	       m->cfg.headdim, m->cfg.nheads, m->cfg.ngroups, vocab, ss_dtype_name(m->weight_dtype),
	       model_bytes(m) / 1e6, now() - t0);
	check(ss_forward_ctx_init(&ctx, m, threads, ubatch, errmsg), "context", errmsg);
	check(ss_forward_ctx_set_deterministic(ctx, det), "deterministic", "");
	printf("threads %d, ubatch %d,%s context scratch %.1f MB, OpenBLAS kernels %s (OPENBLAS_CORETYPE %s)\n",
	       threads, ubatch, det ? " deterministic," : "", ss_forward_ctx_bytes(ctx) / 1e6,
	       openblas_get_corename(),
	       getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");

	st = calloc((size_t)docs, sizeof(*st));
	q = calloc((size_t)docs, sizeof(*q));
	tok = malloc((size_t)docs * len * sizeof(int32_t));
	logits = malloc((size_t)docs * vocab * sizeof(float));
	for (i = 0; i < docs * len; i++)
		tok[i] = (int32_t)((rng = rng * 6364136223846793005ULL + 1) >> 33) % 50277;
	for (i = 0; i < docs; i++)
		state_new(&st[i], m);
	printf("state per document: %.1f MB\n",
	       (ss_state_ssm_len(&st[0].dims) + ss_state_conv_len(&st[0].dims) +
		ss_state_logdecay_len(&st[0].dims)) * 4 / 1e6);

	/* warm-up: one document */
	q[0] = (ss_forward_seq){ tok, len, &st[0], NULL, NULL };
	check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);

	/* one document of `len` tokens: state only, and with last-position logits */
	best = 1e30;
	for (r = 0; r < reps; r++) {
		state_zero(&st[0]);
		t = now();
		check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("prefill, one %d-token document, state only:       %8.1f ms  (%7.1f tokens/s)\n", len,
	       best * 1e3, len / best);
	best = 1e30;
	q[0].logits = logits;
	for (r = 0; r < reps; r++) {
		state_zero(&st[0]);
		t = now();
		check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_LAST, errmsg), "prefill", errmsg);
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("prefill, one %d-token document, last logits:      %8.1f ms  (%7.1f tokens/s)\n", len,
	       best * 1e3, len / best);

	/* state extraction over a batch of documents */
	for (i = 0; i < docs; i++)
		q[i] = (ss_forward_seq){ tok + (size_t)i * len, len, &st[i], NULL, NULL };
	best = 1e30;
	for (r = 0; r < reps; r++) {
		for (i = 0; i < docs; i++)
			state_zero(&st[i]);
		t = now();
		check(ss_forward_prefill(ctx, q, docs, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("state extraction, %d documents x %d tokens:       %8.1f ms  (%7.1f tokens/s)\n", docs,
	       len, best * 1e3, (double)docs * len / best);
	printf("  peer: llama.cpp pp512, same shape, f32, 2 threads:           (%7.1f tokens/s)  ours/peer %.2f (goal >= 1.5)\n",
	       PEER_PP512, (double)docs * len / best / PEER_PP512);

	/* decode: single-token steps with full logits (greedy), from the first
	 * document's state; best of `reps` rounds */
	{
		ss_state *sp = &st[0];
		best = 1e30;
		for (r = 0; r < reps; r++) {
			int32_t next = tok[0];
			t = now();
			for (k = 0; k < steps; k++) {
				int v, arg = 0;
				check(ss_forward_decode(ctx, &sp, &next, 1, logits, errmsg), "decode", errmsg);
				for (v = 1; v < vocab; v++)
					if (logits[v] > logits[arg])
						arg = v;
				next = arg;
			}
			t = now() - t;
			best = t < best ? t : best;
		}
		printf("decode, %d single-token steps with logits:        %8.1f ms  (%7.1f tokens/s)\n",
		       steps, best * 1e3, steps / best);
		printf("  peer: llama.cpp tg128, same shape, f32, 2 threads:           (%7.1f tokens/s)  ours/peer %.2f (goal >= 1)\n",
		       PEER_TG128, steps / best / PEER_TG128);
	}
	/* batched decode: one step for every document at once */
	{
		ss_state **sp = malloc((size_t)docs * sizeof(*sp));
		int32_t *next = malloc((size_t)docs * sizeof(int32_t));
		int bsteps = steps / 4 > 0 ? steps / 4 : 1;
		for (i = 0; i < docs; i++) {
			sp[i] = &st[i];
			next[i] = tok[i];
		}
		best = 1e30;
		for (r = 0; r < reps; r++) {
			t = now();
			for (k = 0; k < bsteps; k++)
				check(ss_forward_decode(ctx, sp, next, docs, logits, errmsg), "decode", errmsg);
			t = now() - t;
			best = t < best ? t : best;
		}
		printf("decode, batch of %d sequences, %d steps:           %8.1f ms  (%7.1f tokens/s)\n",
		       docs, bsteps, best * 1e3, (double)docs * bsteps / best);
		free(sp);
		free(next);
	}
	printf("peak RSS %.1f MB\n", peak_rss_kb() / 1e3);

	for (i = 0; i < docs; i++)
		ss_state_free(&st[i]);
	free(st);
	free(q);
	free(tok);
	free(logits);
	ss_forward_ctx_free(ctx);
	ss_model_free(m);
	return 0;
}
