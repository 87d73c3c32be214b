/*
 * eval_timing.c — ss-eval timing (PICASO Appendix B.3, Fig. 7): for each
 * input length L the time to process L tokens (prefill from the zero state,
 * the cost concatenation pays online) against the time to generate --gen
 * tokens from the processed state (greedy decode steps, the cost every
 * method pays); see eval_run.h and man/ss-eval.1.
 */
#include <string.h>

#include "eval_run.h"
#include "model_cli.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One run at length L: *proc and *infer in seconds. The input is L seeded
 * uniform ids of the vocabulary (the cost does not depend on the text). */
static void timing_once(const eval_run *run, ss_rng *rng, int32_t *tok, long L, float *logits,
			double *proc, double *infer)
{
	char err[SS_ERRMSG_MAX] = "";
	int32_t v = mcli_vocab(run->model);
	for (long i = 0; i < L; i++)
		tok[i] = (int32_t)(ss_rng_uniform(rng) * v) % v;
	ss_state st;
	if (ss_eval_zero_state(run->model, &st))
		cli_die("out of memory");
	ss_forward_seq seq = { .tokens = tok, .n_tokens = L, .state = &st, .logits = logits };
	double t0 = cli_now();
	if (ss_forward_prefill(run->fctx, &seq, 1, SS_LOGITS_LAST, err))
		cli_die("%s: %ld tokens: %s", run->model_dir, L, err);
	double t1 = cli_now();
	ss_state *sp = &st;
	for (long g = 0; g < run->gen; g++) {
		int32_t next = ss_argmax(logits, v);
		if (ss_forward_decode(run->fctx, &sp, &next, 1, logits, err))
			cli_die("%s: decode step %ld: %s", run->model_dir, g, err);
	}
	double t2 = cli_now();
	ss_state_free(&st);
	*proc = t1 - t0;
	*infer = t2 - t1;
}

void eval_timing(eval_run *run)
{
	static const long def_lengths[] = { 256, 512, 1024, 2048, 4096, 8192 };
	const long *lengths = run->lengths ? run->lengths : def_lengths;
	int n_len = run->lengths ? run->n_lengths : (int)(sizeof def_lengths / sizeof *def_lengths);
	if (!run->gen)
		run->gen = 32;
	if (!run->repeat)
		run->repeat = 3;
	long lmax = 0;
	for (int i = 0; i < n_len; i++)
		lmax = lengths[i] > lmax ? lengths[i] : lmax;
	int32_t *tok = xcalloc((size_t)lmax, sizeof *tok);
	float *logits = xcalloc((size_t)run->model->cfg.vocab_padded, sizeof *logits);
	double *proc = xcalloc((size_t)run->repeat, sizeof *proc);
	double *infer = xcalloc((size_t)run->repeat, sizeof *infer);
	ss_rng rng;
	ss_rng_seed(&rng, run->seed);
	/* A first short run so that lazy allocations and page faults are not
	 * charged to the first length. */
	double p, q;
	timing_once(run, &rng, tok, lengths[0] < 16 ? lengths[0] : 16, logits, &p, &q);
	FILE *f = cli_out_open(run->out);
	fputs("tokens\tprocessing_ms\tinference_ms\n", f);
	for (int i = 0; i < n_len; i++) {
		for (long r = 0; r < run->repeat; r++)
			timing_once(run, &rng, tok, lengths[i], logits, &proc[r], &infer[r]);
		qsort(proc, (size_t)run->repeat, sizeof *proc, cmp_double);
		qsort(infer, (size_t)run->repeat, sizeof *infer, cmp_double);
		fprintf(f, "%ld\t%.3f\t%.3f\n", lengths[i], proc[run->repeat / 2] * 1e3,
			infer[run->repeat / 2] * 1e3);
		cli_progress("%d/%d lengths", i + 1, n_len);
	}
	cli_progress_end();
	cli_out_close(f);
	free(tok);
	free(logits);
	free(proc);
	free(infer);
}
