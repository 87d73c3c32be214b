/*
 * bench/cuda.c — speed of the GPU forward pass (the CUDA plugin) on one
 * model, with the compute and memory floors beside each figure.
 *
 * Prints, each the best of -r rounds:
 *   encode: tokens/s of state extraction (SS_LOGITS_NONE) over -d documents
 *           of -n tokens, -b per call, states copied back to the host as
 *           ss-encode does; with the sequential scan and with the chunked SSD;
 *   decode: tokens/s of greedy steps (argmax on the GPU, no logits copied)
 *           at each batch of -B (none when -B is empty), states on the GPU
 *           (decode_begin/next/end);
 *   GEMM floor: cuBLAS time of the in_proj and out_proj GEMMs of -T tokens
 *           in the model's dtype (with the f32→bf16 rounding of the
 *           activations the forward pass also does), and the encode
 *           tokens/s they alone allow.
 * Floors: FLOPs per token = 2 × (projection + lm_head parameters as used);
 * weight bytes per decode step = every weight read once. The peak figures
 * (-P TFLOP/s, -W TB/s; H100 SXM: 989 dense bf16, 3.35 HBM3) are inputs.
 * Without the plugin or a GPU it says so and exits 0 (a benchmark, not a
 * test). Figures only, no pass/fail. ref: bench/gpu-notes.md.
 *
 * usage: cuda -m MODEL_DIR [-d DOCS] [-n TOKENS] [-b DOCS_PER_CALL]
 *             [-B BATCH,...] [-s STEPS] [-T GEMM_TOKENS] [-r REPEATS]
 *             [-P PEAK_TFLOPS] [-W PEAK_TBPS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ss.h"
#include "bench.h"
#include "forward/device_plugin.h"

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "cuda: %s: %s\n", what, msg);
	exit(1);
}

/* Encode tokens/s with the scan chosen by SS_CUDA_SCAN (read at ctx init). */
static double encode(const ss_model *m, ss_device *dev, const char *scan, int docs, int len,
		     int per_call, int reps)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_forward_ctx *ctx;
	ss_state_dims dims;
	double best = 0;
	int32_t *tok = malloc((size_t)len * sizeof(int32_t));
	ss_state *st = calloc((size_t)per_call, sizeof(ss_state));
	ss_forward_seq *q = calloc((size_t)per_call, sizeof(ss_forward_seq));

	setenv("SS_CUDA_SCAN", scan, 1);
	if (ss_forward_ctx_init_dev(&ctx, m, dev, 1, 0, err))
		die("context", err);
	ss_model_state_dims(m, &dims);
	for (int i = 0; i < len; i++)
		tok[i] = (int32_t)((i * 7919u + 13u) % 50000u);
	for (int i = 0; i < per_call; i++)
		if (ss_state_alloc(&st[i], &dims))
			die("states", "out of memory");
	for (int r = 0; r <= reps; r++) { /* round 0 warms up */
		const double t0 = bench_now();
		for (int done = 0; done < docs; done += per_call) {
			const int k = docs - done < per_call ? docs - done : per_call;
			for (int i = 0; i < k; i++) {
				memset(st[i].ssm, 0, ss_state_ssm_len(&dims) * 4);
				memset(st[i].conv, 0, ss_state_conv_len(&dims) * 4);
				memset(st[i].logdecay, 0, ss_state_logdecay_len(&dims) * 4);
				st[i].n_tokens = 0;
				q[i] = (ss_forward_seq){ tok, len, &st[i], NULL, NULL, 0 };
			}
			if (ss_forward_prefill(ctx, q, k, SS_LOGITS_NONE, err))
				die("prefill", err);
		}
		const double tps = (double)docs * len / (bench_now() - t0);
		if (r > 0 && tps > best)
			best = tps;
	}
	for (int i = 0; i < per_call; i++)
		ss_state_free(&st[i]);
	ss_forward_ctx_free(ctx);
	free(st);
	free(q);
	free(tok);
	return best;
}

static double decode(const ss_model *m, ss_device *dev, int batch, int steps, int reps)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_forward_ctx *ctx;
	ss_state_dims dims;
	double best = 0;
	ss_state *st = calloc((size_t)batch, sizeof(ss_state));
	ss_state **sp = calloc((size_t)batch, sizeof(ss_state *));
	int32_t *tok = calloc((size_t)batch, sizeof(int32_t)), *ids = calloc((size_t)batch, sizeof(int32_t));

	if (ss_forward_ctx_init_dev(&ctx, m, dev, 1, 0, err))
		die("context", err);
	ss_model_state_dims(m, &dims);
	for (int i = 0; i < batch; i++) {
		if (ss_state_alloc(&st[i], &dims))
			die("states", "out of memory");
		sp[i] = &st[i];
		tok[i] = 100 + i;
	}
	if (ss_forward_decode_begin(ctx, sp, batch, err))
		die("decode", err);
	for (int r = 0; r <= reps; r++) {
		const double t0 = bench_now();
		for (int s = 0; s < steps; s++) {
			if (ss_forward_decode_next(ctx, tok, NULL, ids, m->cfg.vocab_size, err))
				die("decode", err);
			memcpy(tok, ids, (size_t)batch * sizeof(int32_t));
			for (int i = 0; i < batch; i++)
				if (tok[i] < 0)
					tok[i] = 0;
		}
		const double tps = (double)batch * steps / (bench_now() - t0);
		if (r > 0 && tps > best)
			best = tps;
	}
	if (ss_forward_decode_end(ctx, err))
		die("decode", err);
	for (int i = 0; i < batch; i++)
		ss_state_free(&st[i]);
	ss_forward_ctx_free(ctx);
	free(st);
	free(sp);
	free(tok);
	free(ids);
	return best;
}

int main(int argc, char **argv)
{
	const char *model_dir = NULL, *batches = "1,64";
	int docs = 256, len = 512, per_call = 16, steps = 64, gemm_T = 8192, reps = 3;
	double peak_tflops = 989.0, peak_tbps = 3.35;
	char err[SS_ERRMSG_MAX] = "";
	ss_device *dev;
	ss_model *m;

	setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as soon as it is measured */

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h")) {
			printf("usage: cuda -m MODEL_DIR [-d DOCS] [-n TOKENS] [-b DOCS_PER_CALL] [-B BATCH,...]\n"
			       "            [-s STEPS] [-T GEMM_TOKENS] [-r REPEATS] [-P PEAK_TFLOPS] [-W PEAK_TBPS]\n");
			return 0;
		}
		if (!v)
			die(a, "needs a value");
		i++;
		if (!strcmp(a, "-m")) model_dir = v;
		else if (!strcmp(a, "-d")) docs = atoi(v);
		else if (!strcmp(a, "-n")) len = atoi(v);
		else if (!strcmp(a, "-b")) per_call = atoi(v);
		else if (!strcmp(a, "-B")) batches = v;
		else if (!strcmp(a, "-s")) steps = atoi(v);
		else if (!strcmp(a, "-T")) gemm_T = atoi(v);
		else if (!strcmp(a, "-r")) reps = atoi(v);
		else if (!strcmp(a, "-P")) peak_tflops = atof(v);
		else if (!strcmp(a, "-W")) peak_tbps = atof(v);
		else die(a, "unknown option (try -h)");
	}
	if (ss_device_open(&dev, "cuda", err)) {
		printf("cuda: skipped, no GPU: %s\n", err);
		return 0;
	}
	if (!model_dir) {
		printf("cuda: no model (-m DIR; bench/gpu.sh makes them)\n");
		ss_device_close(dev);
		return 0;
	}
	if (docs < 1 || len < 1 || per_call < 1 || steps < 1 || reps < 1 || gemm_T < 1)
		die("options", "counts must be positive");
	if (ss_model_load(&m, model_dir, err))
		die(model_dir, err);
	const ss_model_config *c = &m->cfg;
	const ss_dtype weights_dtype = m->weights_dtype;
	const double wb = (double)ss_dtype_size(weights_dtype);
	const double proj = (double)c->n_layer * ((double)c->d_model * c->d_in_proj + (double)c->d_inner * c->d_model);
	const double lm = (double)c->vocab_padded * c->d_model;
	const double small = (double)c->n_layer * (c->d_model + (double)c->conv_dim * (c->d_conv + 1) + 3.0 * c->nheads + c->d_inner);
	printf("device %s\n", ss_device_name(dev));
	printf("model %s: d_model %d, n_layer %d, d_state %d, headdim %d, nheads %d, %s weights; projections %.3g params, lm_head %.3g\n",
	       model_dir, c->d_model, c->n_layer, c->d_state, c->headdim, c->nheads,
	       ss_dtype_name(weights_dtype), proj, lm);

	/* floors */
	const double enc_flops = 2.0 * proj; /* no lm_head in state extraction */
	const double state_b = 4.0 * (double)c->n_layer * ((double)c->nheads * c->headdim * c->d_state + (double)c->conv_dim * (c->d_conv - 1) + c->nheads);
	printf("encode floor: %.3g FLOP/token (GEMMs) → %.0f tokens/s at %.0f TFLOP/s; state %.1f MB/doc copied back\n",
	       enc_flops, peak_tflops * 1e12 / enc_flops, peak_tflops, state_b / 1e6);
	const double dec_bytes = wb * (proj + lm) + 4.0 * small;
	printf("decode floor: %.3g bytes of weights per step → %.0f steps/s at %.2f TB/s (batch 1 tokens/s)\n",
	       dec_bytes, peak_tbps * 1e12 / dec_bytes, peak_tbps);

	/* GEMM floor at this shape */
	{
		const ss_cuda_api *cu = ss_device_cuda(dev);
		const double ti =
			cu->bench_linear(gemm_T, c->d_in_proj, c->d_model, weights_dtype, 10);
		const double to =
			cu->bench_linear(gemm_T, c->d_model, c->d_inner, weights_dtype, 10);
		if (ti > 0 && to > 0) {
			const double fl_i = 2.0 * gemm_T * c->d_in_proj * c->d_model;
			const double fl_o = 2.0 * gemm_T * c->d_model * c->d_inner;
			printf("GEMM %s M=%d: in_proj %dx%d %.3f ms (%.0f TFLOP/s), out_proj %dx%d %.3f ms (%.0f TFLOP/s)\n",
			       ss_dtype_name(weights_dtype), gemm_T, c->d_in_proj, c->d_model, ti * 1e3,
			       fl_i / ti / 1e12, c->d_model, c->d_inner, to * 1e3, fl_o / to / 1e12);
			printf("GEMM floor for encode: %.0f tokens/s (projections only, all layers)\n",
			       gemm_T / (c->n_layer * (ti + to)));
		} else {
			printf("GEMM floor: failed (%s)\n", cu->last_error());
		}
	}

	const double e_seq = encode(m, dev, "seq", docs, len, per_call, reps);
	const double e_ssd = encode(m, dev, "ssd", docs, len, per_call, reps);
	printf("encode %d docs x %d tokens, %d per call: sequential scan (the default) %.0f tokens/s, SSD %.0f tokens/s\n",
	       docs, len, per_call, e_seq, e_ssd);

	for (const char *p = batches; *p;) {
		const int b = atoi(p);
		if (b > 0)
			printf("decode batch %d, %d steps: %.1f tokens/s\n", b, steps, decode(m, dev, b, steps, reps));
		p = strchr(p, ',');
		if (!p)
			break;
		p++;
	}
	ss_model_free(m);
	ss_device_close(dev);
	return 0;
}
