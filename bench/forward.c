/*
 * bench/forward.c — speed of the CPU forward pass on a random model of
 * mamba2-130m shape (d_model 768, 24 layers, d_state 128, headdim 64,
 * expand 2, ngroups 1, vocab 50288, f32).
 *
 * Prints: prefill tokens/s for state extraction (no lm_head) over a batch of
 * 512-token documents, the time of one 512-token prefill, decode tokens/s
 * (single-token steps with full logits, like llama-bench tg128), and memory.
 * Each figure is the best of -r rounds (the machine may be shared).
 * The BLAS (config.mk BLAS=openblas|blis) picks its kernels at load time
 * (OpenBLAS: or as $OPENBLAS_CORETYPE says); prefill is GEMM-bound, so the
 * kernel family (AVX2 "Haswell" or AVX-512 "SkylakeX"/"skx") matters and is
 * printed, with the floor: the BLAS's sgemm GFLOP/s at the in_proj shape
 * (ubatch x d_in_proj x d_model) on the same threads, split by rows as the
 * forward pass does, and the GEMM FLOP rate of state extraction as a
 * fraction of it, and our row-invariant kernel at that shape (what prefill
 * runs unless $SS_GEMM=blas; SS_GEMM=blas gives the BLAS path's figures,
 * SS_GEMM=avx2 the AVX2 kernel's), interleaved with sgemm.
 * Figures only, no pass/fail. The model is written with gen/model.h
 * into $TMPDIR (removed after loading), or read from -m DIR.
 *
 * -p mamba-130m (or another Mamba-1 preset of gen/model.h: d_model 768,
 * 24 layers, d_state 16, expand 2, dt_rank 48, vocab 50280) runs the same
 * figures on a Mamba-1 model; the peer then needs a Mamba-1 GGUF.
 *
 * The peer, llama.cpp, is run in the same process tree and interleaved with
 * ours (ours, peer, ours, peer, ... -r rounds) when $LLAMA_BENCH names a
 * llama-bench binary and $LLAMA_GGUF the same weights converted with
 * llama.cpp's convert_hf_to_gguf.py (bench/README.md): `llama-bench -p N
 * -n G -t T -r 1 -o json` per round, its pp and tg figures beside our
 * one-document prefill with last logits and our single-token decode, as
 * min and median of the per-round ratios; each side's timed prefill
 * follows an untimed one of the same length (llama-bench's warm-up prompt
 * run, ours in the round). Without $LLAMA_BENCH it says the peer was not
 * measured: no peer figure is ever a constant.
 *
 * Decode by weight dtype (issue 12.4: decode is bandwidth-bound; issue
 * 35.2: q8_0): f32, bf16 and q8_0 weights (SS_MODEL_WEIGHTS_DTYPE, the tools'
 * --weights-dtype), each in a fresh process (this program re-run with
 * --decode-child) so that its peak RSS is its own, interleaved round by
 * round with a memcpy of 256 MB over the same threads: tokens/s, the weight
 * bytes a step reads times tokens/s (GB/s) against the memcpy's bytes
 * copied per second, peak RSS, and the prefill of one TOKENS-token document
 * (state only) with those weights; the ratios to f32, min and median over
 * the rounds. The q8_0 peer is llama-bench's tg on $LLAMA_GGUF_Q8_0 (the
 * same weights converted with --outtype q8_0), one round after each of
 * ours; otherwise "not measured".
 *
 * usage: forward [-t THREADS] [-d DOCS] [-n TOKENS] [-g DECODE_STEPS] [-u UBATCH]
 *                [-r REPEATS] [-p PRESET | -m MODEL_DIR] [--no-mmap] [--deterministic]
 *                [--weights-dtype f32|bf16|f16|q8_0]
 * --deterministic: prefill with ss_forward_ctx_set_deterministic (its cost).
 * --weights-dtype: the dtype of the main run's matrices (default: the
 * checkpoint's).
 */
#ifdef SS_BLAS_BLIS
#include <blis.h> /* the sgemm floor calls the BLAS itself */
#else
#include <cblas.h>
#endif
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ss.h"
#include "bench.h"
#include "gen/model.h"

#define MAX_REPS 64

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static size_t model_bytes(const ss_model *m)
{
	const ss_model_config *c = &m->cfg;
	size_t per_layer = (size_t)c->d_model * (1 + c->d_in_proj + c->d_inner) +
			   (size_t)c->conv_dim * (c->d_conv + 1) + 3 * (size_t)c->nheads + c->d_inner;
	if (ss_model_is_mamba1(c)) /* x_proj, dt_proj, A_log [d_inner][d_state], no gnorm */
		per_layer = (size_t)c->d_model * (1 + c->d_in_proj + c->d_inner) +
			    (size_t)c->conv_dim * (c->d_conv + 1) +
			    (size_t)c->d_inner * (2 * c->dt_rank + 2 * c->d_state + 2 + c->d_state);
	return sizeof(float) * ((size_t)c->vocab_padded * c->d_model * (c->tied ? 1 : 2) +
				c->d_model + per_layer * c->n_layer);
}

/* Writes a random model of the preset's shape into a temporary directory
 * and loads it (ss_mkmodel_remove removes the files). */
static ss_model *make_model(const char *preset, const ss_model_opts *lo, char dir[4096],
			    char *errmsg)
{
	ss_mkmodel_opts o;

	ss_mkmodel_defaults(&o);
	if (ss_mkmodel_preset(&o, preset) != 0) {
		snprintf(errmsg, SS_ERRMSG_MAX, "unknown preset %s", preset);
		return NULL;
	}
	return ss_mkmodel_load_temp(&o, lo, "bench-forward", dir, errmsg);
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

/* One round of the peer: `$LLAMA_BENCH -m $LLAMA_GGUF -p len -n steps -t
 * threads -ngl 0 -r 1 -o json`, its stdout parsed for the avg_ts of the
 * prompt (n_prompt = len) and generation (n_gen = steps) tests. Returns 0 with
 * *pp and *tg in tokens/s, or -1 (why on stderr). */
static int peer_round(const char *exe, const char *gguf, int threads, int len, int steps, double *pp,
		      double *tg)
{
	char a_len[16], a_steps[16], a_thr[16], *buf = NULL;
	int err = -1, status;
	cJSON *root, *it;

	snprintf(a_len, sizeof(a_len), "%d", len);
	snprintf(a_steps, sizeof(a_steps), "%d", steps);
	snprintf(a_thr, sizeof(a_thr), "%d", threads);
	char *const argv[] = { (char *)exe, "-m", (char *)gguf, "-p", a_len, "-n", a_steps, "-t", a_thr, "-ngl", "0",
			       "-r", "1", "-o", "json", NULL };
	if ((status = bench_capture(argv, &buf, 0, NULL, NULL)) != 0 || !buf) {
		fprintf(stderr, "forward: %s failed (exit %d)\n", exe, status);
		free(buf);
		return -1;
	}
	*pp = *tg = 0;
	root = cJSON_Parse(buf);
	cJSON_ArrayForEach(it, root) {
		const cJSON *np = cJSON_GetObjectItem(it, "n_prompt"), *ng = cJSON_GetObjectItem(it, "n_gen"),
			    *ts = cJSON_GetObjectItem(it, "avg_ts");
		if (!cJSON_IsNumber(np) || !cJSON_IsNumber(ng) || !cJSON_IsNumber(ts))
			continue;
		if (np->valueint == len && ng->valueint == 0)
			*pp = ts->valuedouble;
		if (np->valueint == 0 && ng->valueint == steps)
			*tg = ts->valuedouble;
	}
	if (*pp > 0 && *tg > 0)
		err = 0;
	else
		fprintf(stderr, "forward: %s: no pp%d/tg%d figures in its JSON output\n", exe, len, steps);
	cJSON_Delete(root);
	free(buf);
	return err;
}

/* The BLAS floor: C[M][N] = A[M][K]·W[N][K]ᵀ (the forward pass's layout) on
 * `threads` threads, each one sgemm over its slice of rows, as the forward
 * pass splits prefill GEMMs. Returns GFLOP/s of one timed call after a
 * warm-up. own: the same product through the project's row-invariant
 * kernel (lib/forward/ops/linear_f32.h, what prefill runs unless
 * $SS_GEMM=blas), each thread its slice of rows in calls of 256 x 256 as
 * the forward pass's blocks. */
typedef struct {
	const float *A, *W;
	float *C;
	int m0, m1, N, K, own;
} sgemm_part;

static void *sgemm_run(void *arg)
{
	const sgemm_part *p = arg;
	if (p->own) {
		for (int m = p->m0; m < p->m1; m += 256)
			for (int n = 0; n < p->N; n += 256)
				(void)ss_linear_rows_cpu(p->C + (size_t)m * p->N + n, p->N,
							 p->A + (size_t)m * p->K, p->K,
							 p->W + (size_t)n * p->K, SS_DTYPE_F32,
							 p->m1 - m < 256 ? p->m1 - m : 256,
							 p->N - n < 256 ? p->N - n : 256, p->K, 0.0f);
		return NULL;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->m1 - p->m0, p->N, p->K, 1.0f,
		    p->A + (size_t)p->m0 * p->K, p->K, p->W, p->K, 0.0f, p->C + (size_t)p->m0 * p->N, p->N);
	return NULL;
}

static double sgemm_gflops(int threads, int M, int N, int K, int own)
{
	float *A = malloc((size_t)M * K * sizeof(float)), *W = malloc((size_t)N * K * sizeof(float));
	float *C = malloc((size_t)M * N * sizeof(float));
	sgemm_part part[64];
	pthread_t th[64];
	double t = 0;
	int i, round;

	if (!A || !W || !C || threads > 64) {
		fprintf(stderr, "forward: out of memory\n");
		exit(1);
	}
	for (i = 0; i < M * K; i++)
		A[i] = (float)(i % 7) * 0.1f;
	for (i = 0; i < N * K; i++)
		W[i] = (float)(i % 5) * 0.1f;
	ss_blas_threads(1);
	for (round = 0; round < 2; round++) {
		t = bench_now();
		for (i = 0; i < threads; i++) {
			part[i] = (sgemm_part){ A, W, C, (int)((int64_t)M * i / threads),
						(int)((int64_t)M * (i + 1) / threads), N, K, own };
			pthread_create(&th[i], NULL, sgemm_run, &part[i]);
		}
		for (i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		t = bench_now() - t;
	}
	free(A);
	free(W);
	free(C);
	return 2.0 * M * N * K / t / 1e9;
}

/* Bytes of weights one decode step of one sequence reads: the four
 * matrices in weights_dtype (one embedding row, all of lm_head), the rest f32. */
static double step_bytes(const ss_model *m)
{
	const ss_model_config *c = &m->cfg;
	const double w = (double)ss_dtype_row_size(m->weights_dtype, 32) / 32; /* q8_0: 34/32 */
	const double proj = (double)c->n_layer * c->d_model * ((double)c->d_in_proj + c->d_inner);
	const double small = (double)c->n_layer * (c->d_model + (double)c->conv_dim * (c->d_conv + 1) +
						   3.0 * c->nheads + c->d_inner) + c->d_model;
	return w * (proj + (double)c->vocab_padded * c->d_model + c->d_model) + 4.0 * small;
}

/* Peak resident set of this process image (VmHWM; unlike getrusage it
 * starts afresh at exec), kB. */
static long vm_hwm_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

/* --decode-child DIR DTYPE THREADS STEPS LEN: loads DIR with its matrices
 * in DTYPE, runs STEPS single-token decode steps with full logits and
 * greedy picks after 8 warm-up steps, then the prefill of one LEN-token
 * document (state only; best of 2 after a warm-up), prints "tokens/s
 * bytes_per_step peak_kB prefill_tokens/s". */
static int decode_child(char **argv)
{
	ss_model_opts lo = { .flags = SS_MODEL_WEIGHTS_DTYPE };
	char errmsg[SS_ERRMSG_MAX] = "";
	const int threads = atoi(argv[2]), steps = atoi(argv[3]), len = atoi(argv[4]);
	ss_model *m;
	ss_forward_ctx *ctx;
	ss_state st, *sp = &st;
	int32_t next = 1, *tok;
	float *logits;
	double t = 0, pre = 1e30;
	int k;

	if (ss_dtype_parse(argv[1], &lo.weights_dtype) || threads < 1 || steps < 1 || len < 1)
		return 2;
	check(ss_model_load_opts(&m, argv[0], &lo, errmsg), "load", errmsg);
	check(ss_forward_ctx_init(&ctx, m, threads, 0, errmsg), "context", errmsg);
	state_new(&st, m);
	logits = malloc((size_t)m->cfg.vocab_padded * sizeof(float));
	tok = malloc((size_t)len * sizeof(int32_t));
	for (k = 0; k < len; k++)
		tok[k] = (int32_t)(ss_splitmix64(&rng) >> 33) % 50277;
	for (k = -8; k < steps; k++) {
		int v, arg = 0;
		if (k == 0)
			t = bench_now();
		check(ss_forward_decode(ctx, &sp, &next, 1, logits, errmsg), "decode", errmsg);
		for (v = 1; v < m->cfg.vocab_padded; v++)
			if (logits[v] > logits[arg])
				arg = v;
		next = arg;
	}
	t = bench_now() - t;
	for (k = 0; k < 3; k++) {
		ss_forward_seq q = { tok, len, &st, NULL, NULL, 0 };
		double t1;
		state_zero(&st);
		t1 = bench_now();
		check(ss_forward_prefill(ctx, &q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		t1 = bench_now() - t1;
		pre = k > 0 && t1 < pre ? t1 : pre;
	}
	printf("%.6f %.0f %ld %.6f\n", steps / t, step_bytes(m), vm_hwm_kb(), len / pre);
	free(tok);
	free(logits);
	ss_state_free(&st);
	ss_forward_ctx_free(ctx);
	ss_model_free(m);
	return 0;
}

/* Runs this program as a decode child; 0 with its four figures, or -1. */
static int run_child(const char *dir, const char *dtype, int threads, int steps, int len, double out[4])
{
	char a_thr[16], a_steps[16], a_len[16], buf[256];
	int fd[2], status;
	ssize_t n;
	pid_t pid;

	snprintf(a_thr, sizeof(a_thr), "%d", threads);
	snprintf(a_steps, sizeof(a_steps), "%d", steps);
	snprintf(a_len, sizeof(a_len), "%d", len);
	fflush(stdout);
	if (pipe(fd) || (pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execl("/proc/self/exe", "forward", "--decode-child", dir, dtype, a_thr, a_steps, a_len,
		      (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	n = read(fd[0], buf, sizeof(buf) - 1);
	close(fd[0]);
	waitpid(pid, &status, 0);
	buf[n > 0 ? n : 0] = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    sscanf(buf, "%lf %lf %lf %lf", &out[0], &out[1], &out[2], &out[3]) != 4)
		return -1;
	return 0;
}

/* Bytes copied per second by `threads` threads, each memcpy-ing its share of
 * a 256 MB buffer (best of 3 passes). */
typedef struct {
	char *dst;
	const char *src;
	size_t n;
} copy_part;

static void *copy_run(void *arg)
{
	const copy_part *p = arg;
	memcpy(p->dst, p->src, p->n);
	return NULL;
}

static double memcpy_gbs(int threads)
{
	const size_t n = (size_t)256 << 20;
	char *src = malloc(n), *dst = malloc(n);
	copy_part part[64];
	pthread_t th[64];
	double best = 0;
	int i, pass;

	if (!src || !dst || threads > 64) {
		fprintf(stderr, "forward: out of memory\n");
		exit(1);
	}
	memset(src, 1, n);
	memset(dst, 2, n);
	for (pass = 0; pass < 3; pass++) {
		double t = bench_now();
		for (i = 0; i < threads; i++) {
			part[i] = (copy_part){ dst + n * i / threads, src + n * i / threads,
					       n * (i + 1) / threads - n * i / threads };
			pthread_create(&th[i], NULL, copy_run, &part[i]);
		}
		for (i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		t = bench_now() - t;
		best = n / t / 1e9 > best ? n / t / 1e9 : best;
	}
	free(src);
	free(dst);
	return best;
}

/* Decode and prefill with f32, bf16 and q8_0 matrices, child processes,
 * interleaved with the memcpy rounds and the q8_0 peer (gguf_q8 NULL:
 * none): f32, bf16, q8_0, memcpy, peer, f32, ... */
static void decode_by_dtype(const char *dir, int threads, int steps, int len, int reps, const char *peer_exe,
			    const char *gguf_q8)
{
	enum { ND = 3 };
	static const char *const dts[ND] = { "f32", "bf16", "q8_0" };
	double tps[ND][MAX_REPS], gbs[ND][MAX_REPS], rss[ND][MAX_REPS], pre[ND][MAX_REPS], bytes[ND] = { 0 };
	double cp[MAX_REPS], ratio[ND][MAX_REPS], pratio[ND][MAX_REPS], peer_tg[MAX_REPS], vs_peer[MAX_REPS];
	const char *peer_why = peer_exe ? "not measured (set LLAMA_GGUF_Q8_0: the weights converted with "
					  "convert_hf_to_gguf.py --outtype q8_0)"
					: "not measured (set LLAMA_BENCH, LLAMA_GGUF_Q8_0)";
	int r, d;

	if (!peer_exe || !gguf_q8 || !*gguf_q8)
		peer_exe = NULL;
	for (r = 0; r < reps; r++) {
		for (d = 0; d < ND; d++) {
			double o[4];
			if (run_child(dir, dts[d], threads, steps, len, o)) {
				printf("decode by weights dtype: the %s child failed\n", dts[d]);
				return;
			}
			tps[d][r] = o[0];
			bytes[d] = o[1];
			gbs[d][r] = o[0] * o[1] / 1e9;
			rss[d][r] = o[2] / 1e3;
			pre[d][r] = o[3];
		}
		for (d = 0; d < ND; d++) {
			ratio[d][r] = tps[d][r] / tps[0][r];
			pratio[d][r] = pre[d][r] / pre[0][r];
		}
		cp[r] = memcpy_gbs(threads);
		if (peer_exe) {
			double pp;
			if (peer_round(peer_exe, gguf_q8, threads, len, steps, &pp, &peer_tg[r]))
				peer_exe = NULL, peer_why = "failed (see above)";
			else
				vs_peer[r] = tps[2][r] / peer_tg[r];
		}
	}
	printf("decode by weights dtype, %d single-token steps with logits, %d threads, %d rounds interleaved"
	       " (each a fresh process):\n", steps, threads, reps);
	printf("  memcpy 256 MB on %d threads: %.1f GB/s copied best (median %.1f; reads + writes twice that)\n",
	       threads, bench_max(cp, reps), bench_median(cp, reps));
	for (d = 0; d < ND; d++)
		printf("  %-4s weights: %7.1f tokens/s best (median %.1f); %.1f MB read per step: %.1f GB/s best"
		       " (median %.1f); peak RSS %.0f MB (max of rounds); prefill of %d tokens %.1f tokens/s best"
		       " (median %.1f)\n",
		       dts[d], bench_max(tps[d], reps), bench_median(tps[d], reps), bytes[d] / 1e6,
		       bench_max(gbs[d], reps), bench_median(gbs[d], reps), bench_max(rss[d], reps), len,
		       bench_max(pre[d], reps), bench_median(pre[d], reps));
	printf("  bf16/f32 decode: min %.2f, median %.2f (goal >= 1.8); prefill: min %.2f, median %.2f"
	       " (goal >= 1, issue 50)\n", bench_min(ratio[1], reps), bench_median(ratio[1], reps),
	       bench_min(pratio[1], reps), bench_median(pratio[1], reps));
	printf("  q8_0/f32 decode: min %.2f, median %.2f (goal >= 3); prefill: min %.2f, median %.2f (goal >= 1.2,"
	       " issue 50)\n",
	       bench_min(ratio[2], reps), bench_median(ratio[2], reps), bench_min(pratio[2], reps),
	       bench_median(pratio[2], reps));
	if (!peer_exe) {
		printf("  q8_0 peer: %s\n", peer_why);
		return;
	}
	printf("  q8_0 peer: llama.cpp tg%d on %s, same threads, %d rounds interleaved: %.1f tokens/s median"
	       " (best %.1f)\n", steps, gguf_q8, reps, bench_median(peer_tg, reps), bench_max(peer_tg, reps));
	printf("  q8_0 ours/peer decode: min %.2f, median %.2f (goal >= 1.2)\n", bench_min(vs_peer, reps),
	       bench_median(vs_peer, reps));
}

/* Prints our rate over the rounds (n tokens per round: best as ms and
 * tokens/s, and the median), then the peer's rate and ours/peer, min and
 * median of the per-round ratio (test is "pp" or "tg"), or why the peer was
 * not measured (peer NULL). */
static void print_vs_peer(const char *label, const char *test, int n, const double *ours, const double *peer,
			  const char *peer_why, int reps, const char *goal)
{
	double ratio[MAX_REPS] = { 0 }, pv[MAX_REPS] = { 0 }, ov[MAX_REPS] = { 0 };
	int r;

	for (r = 0; r < reps; r++) {
		ov[r] = ours[r];
		ratio[r] = peer ? ours[r] / peer[r] : 0;
		pv[r] = peer ? peer[r] : 0;
	}
	printf("%-50s%8.1f ms  (%7.1f tokens/s; median %.1f)\n", label, n / bench_max(ov, reps) * 1e3,
	       bench_max(ov, reps), bench_median(ov, reps));
	if (!peer) {
		printf("  peer: %s\n", peer_why);
		return;
	}
	printf("  peer: llama.cpp %s%d, same threads, %d rounds interleaved: %7.1f tokens/s median (best %.1f)\n",
	       test, n, reps, bench_median(pv, reps), bench_max(pv, reps));
	printf("  ours/peer: min %.2f, median %.2f (goal %s)\n", bench_min(ratio, reps), bench_median(ratio, reps),
	       goal);
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
	double t0, t, best, pp[MAX_REPS] = { 0 }, tg[MAX_REPS] = { 0 };
	char label[128];
	double peer_pp[MAX_REPS] = { 0 }, peer_tg[MAX_REPS] = { 0 };
	const char *peer_exe = getenv("LLAMA_BENCH"), *peer_gguf = getenv("LLAMA_GGUF");
	const char *peer_why = "not measured (set LLAMA_BENCH, LLAMA_GGUF)";
	int i, r, k;
	char tmpdir[4096] = "";

	if (argc == 7 && !strcmp(argv[1], "--decode-child"))
		return decode_child(argv + 2);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		int *dst = !strcmp(a, "-t") ? &threads : !strcmp(a, "-d") ? &docs : !strcmp(a, "-n") ? &len
			 : !strcmp(a, "-g") ? &steps : !strcmp(a, "-u") ? &ubatch : !strcmp(a, "-r") ? &reps
			 : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: forward [-t THREADS] [-d DOCS] [-n TOKENS] [-g DECODE_STEPS] [-u UBATCH] [-r REPEATS]\n"
			       "               [-p PRESET | -m MODEL_DIR] [--no-mmap] [--deterministic] [--weights-dtype DT]\n"
			       "PRESET: a gen/model.h shape (default mamba2-130m), written to $TMPDIR and loaded.\n"
			       "Peer: LLAMA_BENCH=llama-bench LLAMA_GGUF=model.gguf, LLAMA_GGUF_Q8_0=model-q8_0.gguf\n"
			       "(bench/README.md).\n");
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
		if (!strcmp(a, "--weights-dtype") && i + 1 < argc) {
			lo.flags |= SS_MODEL_WEIGHTS_DTYPE;
			if (ss_dtype_parse(argv[++i], &lo.weights_dtype)) {
				fprintf(stderr, "forward: --weights-dtype %s: f32, bf16, f16 or q8_0\n", argv[i]);
				return 2;
			}
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
	if (reps > MAX_REPS) {
		fprintf(stderr, "forward: -r %d: at most %d rounds\n", reps, MAX_REPS);
		return 2;
	}
	if (!peer_exe || !*peer_exe || !peer_gguf || !*peer_gguf)
		peer_exe = NULL;

	t0 = bench_now();
	if (model_dir) {
		if (ss_model_load_opts(&m, model_dir, &lo, errmsg) != 0)
			m = NULL;
	} else
		m = make_model(preset, &lo, tmpdir, errmsg);
	if (!m) {
		fprintf(stderr, "forward: %s\n", errmsg);
		return 1;
	}
	vocab = m->cfg.vocab_padded;
	printf("model: %s%s, d_model %d, n_layer %d, d_state %d, headdim %d, nheads %d, ngroups %d, vocab %d, %s weights (%s in memory), %.1f MB as f32 (made and loaded in %.1f s)\n",
	       model_dir ? model_dir : preset, lo.flags & SS_MODEL_NO_MMAP ? " (heap, no mmap)" : "",
	       m->cfg.d_model, m->cfg.n_layer, m->cfg.d_state,
	       m->cfg.headdim, m->cfg.nheads, m->cfg.ngroups, vocab, ss_dtype_name(m->ckpt_dtype),
	       ss_dtype_name(m->weights_dtype), model_bytes(m) / 1e6, bench_now() - t0);
	if (peer_exe)
		printf("peer: %s -m %s%s\n", peer_exe, peer_gguf,
		       model_dir ? "" : " (give -m the directory it was converted from for the same weights)");
	check(ss_forward_ctx_init(&ctx, m, threads, ubatch, errmsg), "context", errmsg);
	check(ss_forward_ctx_set_deterministic(ctx, det), "deterministic", "");
	printf("threads %d, ubatch %d,%s context scratch %.1f MB, %s kernels %s (OPENBLAS_CORETYPE %s)\n",
	       threads, ubatch, det ? " deterministic," : "", ss_forward_ctx_bytes(ctx) / 1e6,
	       ss_blas_name(), ss_blas_kernels(),
	       getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");

	st = calloc((size_t)docs, sizeof(*st));
	q = calloc((size_t)docs, sizeof(*q));
	tok = malloc((size_t)docs * len * sizeof(int32_t));
	logits = malloc((size_t)docs * vocab * sizeof(float));
	for (i = 0; i < docs * len; i++)
		tok[i] = (int32_t)(ss_splitmix64(&rng) >> 33) % 50277;
	for (i = 0; i < docs; i++)
		state_new(&st[i], m);
	printf("state per document: %.1f MB\n",
	       (ss_state_ssm_len(&st[0].dims) + ss_state_conv_len(&st[0].dims) +
		ss_state_logdecay_len(&st[0].dims)) * 4 / 1e6);

	/* warm-up: one document */
	q[0] = (ss_forward_seq){ tok, len, &st[0], NULL, NULL, 0 };
	check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);

	/* one document of `len` tokens: state only, and with last-position logits */
	best = 1e30;
	for (r = 0; r < reps; r++) {
		state_zero(&st[0]);
		t = bench_now();
		check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		t = bench_now() - t;
		best = t < best ? t : best;
	}
	printf("prefill, one %d-token document, state only:       %8.1f ms  (%7.1f tokens/s)\n", len,
	       best * 1e3, len / best);
	/* One document with last-position logits (llama-bench's pp) and
	 * single-token decode steps with full logits, greedy (its tg), each
	 * round followed by one round of the peer. */
	q[0].logits = logits;
	for (r = 0; r < reps; r++) {
		ss_state *sp = &st[0];
		int32_t next = tok[0];
		/* an untimed run of the same prefill first, as llama-bench runs
		 * its warm-up prompt just before its timed one: each of our
		 * rounds follows the peer's process, and a first pass after a
		 * gap of seconds runs 10-20 % slower here (bench/README.md) */
		state_zero(&st[0]);
		check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_LAST, errmsg), "prefill", errmsg);
		state_zero(&st[0]);
		t = bench_now();
		check(ss_forward_prefill(ctx, q, 1, SS_LOGITS_LAST, errmsg), "prefill", errmsg);
		pp[r] = len / (bench_now() - t);
		t = bench_now();
		for (k = 0; k < steps; k++) {
			int v, arg = 0;
			check(ss_forward_decode(ctx, &sp, &next, 1, logits, errmsg), "decode", errmsg);
			for (v = 1; v < vocab; v++)
				if (logits[v] > logits[arg])
					arg = v;
			next = arg;
		}
		tg[r] = steps / (bench_now() - t);
		if (peer_exe && peer_round(peer_exe, peer_gguf, threads, len, steps, &peer_pp[r], &peer_tg[r]))
			peer_exe = NULL, peer_why = "failed (see above)";
	}
	snprintf(label, sizeof(label), "prefill, one %d-token document, last logits:", len);
	print_vs_peer(label, "pp", len, pp, peer_exe ? peer_pp : NULL, peer_why, reps, ">= 2.5");
	snprintf(label, sizeof(label), "decode, %d single-token steps with logits:", steps);
	print_vs_peer(label, "tg", steps, tg, peer_exe ? peer_tg : NULL, peer_why, reps, ">= 1");

	/* state extraction over a batch of documents */
	for (i = 0; i < docs; i++)
		q[i] = (ss_forward_seq){ tok + (size_t)i * len, len, &st[i], NULL, NULL, 0 };
	best = 1e30;
	for (r = 0; r < reps; r++) {
		for (i = 0; i < docs; i++)
			state_zero(&st[i]);
		t = bench_now();
		check(ss_forward_prefill(ctx, q, docs, SS_LOGITS_NONE, errmsg), "prefill", errmsg);
		t = bench_now() - t;
		best = t < best ? t : best;
	}
	printf("state extraction, %d documents x %d tokens:       %8.1f ms  (%7.1f tokens/s)\n", docs,
	       len, best * 1e3, (double)docs * len / best);
	{
		/* the projections' FLOPs per token: in_proj and out_proj of every layer */
		const double flop = 2.0 * m->cfg.n_layer * m->cfg.d_model * (m->cfg.d_in_proj + m->cfg.d_inner);
		double gf[MAX_REPS], go[MAX_REPS], gr[MAX_REPS];
		for (r = 0; r < reps; r++) { /* interleaved */
			gf[r] = sgemm_gflops(threads, ubatch, (int)m->cfg.d_in_proj, m->cfg.d_model, 0);
			go[r] = sgemm_gflops(threads, ubatch, (int)m->cfg.d_in_proj, m->cfg.d_model, 1);
			gr[r] = go[r] / gf[r];
		}
		printf("  floor: %s sgemm %dx%dx%d on %d threads: %.1f GFLOP/s best (median %.1f); state extraction's "
		       "projections run at %.1f GFLOP/s = %.0f%% of it (goal >= 70%%)\n",
		       ss_blas_name(), ubatch, (int)m->cfg.d_in_proj, m->cfg.d_model, threads, bench_max(gf, reps),
		       bench_median(gf, reps), (double)docs * len / best * flop / 1e9,
		       100.0 * (double)docs * len / best * flop / 1e9 / bench_max(gf, reps));
		printf("  ours: ss_linear_rows_cpu (SS_GEMM=%s) at the same shape, 256 x 256 calls: %.1f GFLOP/s best "
		       "(median %.1f); ours/sgemm min %.2f, median %.2f\n",
		       getenv("SS_GEMM") && (!strcmp(getenv("SS_GEMM"), "avx2") || !strcmp(getenv("SS_GEMM"), "c"))
			       ? getenv("SS_GEMM") : "own",
		       bench_max(go, reps), bench_median(go, reps), bench_min(gr, reps),
		       bench_median(gr, reps));
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
			t = bench_now();
			for (k = 0; k < bsteps; k++)
				check(ss_forward_decode(ctx, sp, next, docs, logits, errmsg), "decode", errmsg);
			t = bench_now() - t;
			best = t < best ? t : best;
		}
		printf("decode, batch of %d sequences, %d steps:           %8.1f ms  (%7.1f tokens/s)\n",
		       docs, bsteps, best * 1e3, (double)docs * bsteps / best);
		free(sp);
		free(next);
	}
	printf("peak RSS %.1f MB\n", peak_rss_kb() / 1e3);
	decode_by_dtype(model_dir ? model_dir : tmpdir, threads, steps, len, reps, getenv("LLAMA_BENCH"),
			getenv("LLAMA_GGUF_Q8_0"));
	if (!model_dir)
		ss_mkmodel_remove(tmpdir);

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
