/*
 * rag.c — end-to-end retrieval-augmented answers (issue 35 §3): N questions
 * over the BM25 index of the Wikipedia text in ../shared/train (365 k chunks
 * of 256 tokens), k chunks per question, a mamba2-130m-shape model, greedy
 * answers of G tokens (32). Four systems, all in this run, one after another:
 *
 *   picaso-r, tools     per question `ss-retrieve query --literal | ss-compose --mode
 *                       picaso-r -o Q.state`, then one `ss-decode --prompts
 *                       --batch N` continuing each question from its state;
 *   picaso-r, 1 process the same through the library: ss_index_query, the k
 *                       records decoded, ss_compose, then the N questions
 *                       prefilled from their composed states in one call and
 *                       decoded together (ss_forward_decode over N states);
 *   concat, 1 process   PICASO §6.2's Concat: per question its k chunks'
 *                       tokens (most relevant last) and the question,
 *                       prefilled from the zero state, all N in one call,
 *                       then decoded together;
 *   llama.cpp concat    `llama-batched-bench` on the same weights (a GGUF
 *                       from llama.cpp's converter): N prompts of the Concat
 *                       prompts' mean length, G tokens each, its own batching
 *                       (an SSM's cost does not depend on the token values).
 *
 * For each: answers/s of the batch (all N questions in hand to the last
 * token of the last answer; the in-process systems and llama-batched-bench
 * exclude the model load, the tools pay theirs once per batch), the time to
 * first token of a question asked alone (retrieval through the first answer
 * token; p50 and p95 over the questions timed: all N for picaso-r in
 * process, the first M = --ttft-n for the others; llama.cpp: its prompt
 * time at the p50 and p95 Concat lengths, one sequence; picaso-r in
 * process: also the p50 of each part, retrieval, composition, and the
 * question's tokens, prefill from the state and first token), and peak RSS (each
 * in-process system runs in a child of its own; the tools' figure is their
 * largest process). The picaso-r answers of the tools and of the library
 * are compared token by token (both decode deterministically: equal bytes
 * expected).
 *
 * The index and the states come from pipelines/rag.mk (it documents the
 * steps): DIR/index.db indexes all 365 k chunks, the chunks the questions
 * retrieve with their states (encoded once, as a corpus is), the others
 * stateless (ss-retrieve add --stateless); DIR/questions.jsonl; DIR/model
 * (a link to the model). Peer: LLAMA_BATCHED_BENCH=llama-batched-bench
 * LLAMA_GGUF=model.gguf (the same weights), else "not measured".
 *
 * usage: rag [--dir DIR] [-n N] [-k K] [-g TOKENS] [-t THREADS] [--ttft-n M]
 *        rag --make-questions N --index DB      (pipelines/rag.mk: N
 *            questions, JSON lines: 30 words from evenly spaced chunks)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "ss.h"
#include "bench.h"

typedef struct {
	const char *model, *index, *tok_path;
	int n, k, gen, threads, ttft_n;
	char **q;       /* [n] question texts */
} opts;

static void die(const char *what, int err, const char *errmsg)
{
	fprintf(stderr, "rag: %s: %s%s%s\n", what, err ? ss_strerror(err) : "", err && errmsg && *errmsg ? ": " : "",
		errmsg ? errmsg : "");
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory", 0, NULL);
	return p;
}

/* ------------------------------------------------------------ questions */

typedef struct {
	int64_t n_docs, want, seen, made;
	ss_index *ix;
} qmaker;

/* Every (n_docs / want)-th document gives a question: the 30 words after
 * its first 20 (fewer if the chunk is short; chunks of under 25 words are
 * passed over). */
static int make_one(void *ctx, const ss_index_doc *doc)
{
	qmaker *m = ctx;
	char errmsg[SS_ERRMSG_MAX] = "", *text = NULL;
	size_t len = 0;
	if (m->made >= m->want || m->seen++ < m->made * m->n_docs / m->want || !doc->has_text)
		return 0;
	if (ss_index_text(m->ix, doc->id, &text, &len, errmsg))
		die("index text", SS_ERR_IO, errmsg);
	size_t i = 0, w = 0, start = 0, end = 0;
	while (i < len && w < 50) {
		while (i < len && isspace((unsigned char)text[i]))
			i++;
		if (i == len)
			break;
		if (w == 20)
			start = i;
		while (i < len && !isspace((unsigned char)text[i]))
			i++;
		end = i;
		w++;
	}
	if (w >= 25) {
		cJSON *o = cJSON_CreateObject();
		char id[32];
		snprintf(id, sizeof id, "q%lld", (long long)++m->made);
		text[end] = '\0';
		cJSON_AddStringToObject(o, "id", id);
		cJSON_AddStringToObject(o, "query", text + start);
		char *s = cJSON_PrintUnformatted(o);
		puts(s);
		free(s);
		cJSON_Delete(o);
	}
	free(text);
	return 0;
}

static int make_questions(const char *db, int n)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	qmaker m = { .want = n };
	int rc;
	if ((rc = ss_index_open(&m.ix, db, errmsg)))
		die(db, rc, errmsg);
	m.n_docs = ss_index_count(m.ix);
	if (m.n_docs < n)
		die("fewer documents than questions", 0, db);
	if ((rc = ss_index_docs(m.ix, NULL, make_one, &m, errmsg)))
		die(db, rc, errmsg);
	ss_index_close(m.ix);
	return m.made == n ? 0 : (fprintf(stderr, "rag: %lld questions made of %d\n", (long long)m.made, n), 1);
}

static char **read_questions(const char *path, int *n)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	int have = 0;
	char **q = xmalloc((size_t)*n * sizeof(*q));
	if (!f)
		die(path, SS_ERR_IO, strerror(errno));
	while (have < *n && getline(&line, &cap, f) > 0) {
		cJSON *o = cJSON_Parse(line);
		const cJSON *t = cJSON_GetObjectItem(o, "query");
		if (!cJSON_IsString(t))
			die(path, SS_ERR_FORMAT, "a line without \"query\"");
		q[have++] = strdup(t->valuestring);
		cJSON_Delete(o);
	}
	free(line);
	fclose(f);
	*n = have;
	return q;
}

/* ------------------------------------------------------- one process */

/* What a system reports: answers/s of the batch, first-token times of
 * questions alone, and the answers (N x G token ids). */
typedef struct {
	double batch_s;
	double phase[3];        /* the batch's stages (s): retrieval and composition (or
				 * the Concat prompts), prefill, decode; tools: the
				 * retrieve | compose pipelines, ss-decode, unused */
	int n_ttft;
	double ttft[1024];
	double ttft_part[3][1024]; /* picaso-r alone: retrieval, composition, the rest */
	double concat_len_mean, concat_len_p50, concat_len_p95; /* concat only */
	int32_t answers[];      /* [n][gen] */
} result;

typedef struct {
	ss_model *m;
	ss_tokenizer *tok;
	ss_forward_ctx *ctx;
	ss_index *ix;
	int32_t gen_vocab;
	float *logits;          /* [n][vocab_padded] */
} engine;

static void engine_open(engine *e, const opts *o, int deterministic)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	int rc;
	if ((rc = ss_model_load(&e->m, o->model, errmsg)))
		die(o->model, rc, errmsg);
	if ((rc = ss_tokenizer_load(&e->tok, o->tok_path, errmsg)))
		die(o->tok_path, rc, errmsg);
	if ((rc = ss_forward_ctx_init(&e->ctx, e->m, o->threads, 0, errmsg)))
		die("forward context", rc, errmsg);
	if (deterministic)
		ss_forward_ctx_set_deterministic(e->ctx, 1);
	if ((rc = ss_index_open(&e->ix, o->index, errmsg)))
		die(o->index, rc, errmsg);
	e->gen_vocab = e->m->cfg.vocab_size;
	if (ss_tokenizer_n_vocab(e->tok) < e->gen_vocab)
		e->gen_vocab = ss_tokenizer_n_vocab(e->tok);
	e->logits = xmalloc((size_t)o->n * (size_t)e->m->cfg.vocab_padded * sizeof(float));
}

static void engine_close(engine *e)
{
	ss_index_close(e->ix);
	ss_forward_ctx_free(e->ctx);
	ss_tokenizer_free(e->tok);
	ss_model_free(e->m);
	free(e->logits);
}

static int32_t *question_tokens(engine *e, const char *q, size_t *n)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	int32_t *ids = NULL;
	int rc = ss_tokenizer_encode(e->tok, q, strlen(q), &ids, n, errmsg);
	if (rc || !*n)
		die("tokenize a question", rc, errmsg);
	return ids;
}

static ss_index_hit *retrieve(engine *e, const char *q, int k, int *n_hits)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	ss_index_hit *hits = NULL;
	int n = ss_index_query(e->ix, q, k, NULL, 0, &hits, errmsg);
	if (n < 1)
		die("query", n < 0 ? n : SS_ERR_NOTFOUND, n < 0 ? errmsg : q);
	*n_hits = n;
	return hits;
}

/* PICASO-R state of question q: its hits' stored states, most relevant
 * last, composed as ss-compose composes them (ss_index_compose: read in
 * place, in o->threads threads). */
static void composed_state(engine *e, const opts *o, const char *q, ss_state *out, double *t_retrieved)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	int n, rc;
	ss_index_hit *hits = retrieve(e, q, o->k, &n), *rev = xmalloc((size_t)n * sizeof *rev);
	if (t_retrieved)
		*t_retrieved = bench_now();
	for (int j = 0; j < n; j++)
		rev[j] = hits[n - 1 - j];
	ss_compose_opts co = { .mode = SS_COMPOSE_PICASO_R };
	ss_compose_run_opts ro = { .threads = o->threads };
	ss_compose_result res = { 0 };
	if ((rc = ss_index_compose(e->ix, rev, n, &co, &ro, &res, errmsg)))
		die("compose", rc, errmsg);
	*out = res.state;
	free(rev);
	ss_index_hits_free(hits, n);
}

/* Concat prompt of question q: its hits' tokens, most relevant last, then
 * the question's. */
static int32_t *concat_tokens(engine *e, const opts *o, const char *q, int64_t *len)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	int n, rc;
	size_t nq;
	ss_index_hit *hits = retrieve(e, q, o->k, &n);
	int32_t *qt = question_tokens(e, q, &nq), *all = NULL;
	int64_t have = 0;
	for (int j = n - 1; j >= 0; j--) {
		int32_t *t = NULL;
		int64_t nt = 0;
		if ((rc = ss_index_tokens(e->ix, hits[j].id, &t, &nt, errmsg)))
			die(hits[j].id, rc, errmsg);
		all = realloc(all, (size_t)(have + nt + (int64_t)nq) * sizeof(*all));
		memcpy(all + have, t, (size_t)nt * sizeof(*t));
		have += nt;
		free(t);
	}
	memcpy(all + have, qt, nq * sizeof(*qt));
	*len = have + (int64_t)nq;
	free(qt);
	ss_index_hits_free(hits, n);
	return all;
}

/* Prefills seqs[0..n) (SS_LOGITS_LAST into e->logits), then greedy-decodes
 * o->gen tokens each into ans[n][gen]. Returns the time the first tokens
 * were known. */
static double answer(engine *e, const opts *o, ss_forward_seq *seqs, ss_state **sp, int n, int32_t *ans)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	const size_t vp = (size_t)e->m->cfg.vocab_padded;
	int rc;
	int32_t *tok = xmalloc((size_t)n * sizeof(*tok));
	for (int i = 0; i < n; i++)
		seqs[i].logits = e->logits + (size_t)i * vp;
	if ((rc = ss_forward_prefill(e->ctx, seqs, n, SS_LOGITS_LAST, errmsg)))
		die("prefill", rc, errmsg);
	for (int i = 0; i < n; i++)
		ans[(size_t)i * o->gen] = tok[i] = ss_argmax(e->logits + (size_t)i * vp, e->gen_vocab);
	const double t_first = bench_now();
	for (int g = 1; g < o->gen; g++) {
		if ((rc = ss_forward_decode(e->ctx, sp, tok, n, e->logits, errmsg)))
			die("decode", rc, errmsg);
		for (int i = 0; i < n; i++)
			ans[(size_t)i * o->gen + g] = tok[i] = ss_argmax(e->logits + (size_t)i * vp, e->gen_vocab);
	}
	free(tok);
	return t_first;
}

/* Runs the whole batch of questions, then the first-token times, of one
 * system: picaso (1) or concat (0). */
static void run_system(const opts *o, int picaso, result *r)
{
	engine e = { 0 };
	const int n = o->n;
	ss_state *st = calloc((size_t)n, sizeof(*st));
	ss_state **sp = xmalloc((size_t)n * sizeof(*sp));
	ss_forward_seq *seqs = calloc((size_t)n, sizeof(*seqs));
	int32_t **toks = calloc((size_t)n, sizeof(*toks));
	ss_state_dims d;
	char errmsg[SS_ERRMSG_MAX] = "";
	double *lens = xmalloc((size_t)n * sizeof(*lens));

	engine_open(&e, o, picaso);
	ss_model_state_dims(e.m, &d);
	/* The batch: questions in hand to the last answer token. */
	const double t0 = bench_now();
	for (int i = 0; i < n; i++) {
		size_t nq;
		int64_t len;
		if (picaso) {
			composed_state(&e, o, o->q[i], &st[i], NULL);
			toks[i] = question_tokens(&e, o->q[i], &nq);
			len = (int64_t)nq;
		} else {
			if (ss_state_alloc(&st[i], &d))
				die("state", SS_ERR_NOMEM, NULL);
			toks[i] = concat_tokens(&e, o, o->q[i], &len);
		}
		lens[i] = (double)len;
		seqs[i] = (ss_forward_seq){ .tokens = toks[i], .n_tokens = len, .state = &st[i] };
		sp[i] = &st[i];
	}
	const double t1 = bench_now(), t_first = answer(&e, o, seqs, sp, n, r->answers), t2 = bench_now();
	r->batch_s = t2 - t0;
	r->phase[0] = t1 - t0;
	r->phase[1] = t_first - t1;
	r->phase[2] = t2 - t_first;
	if (!picaso) {
		double s = 0;
		for (int i = 0; i < n; i++)
			s += lens[i];
		r->concat_len_mean = s / n;
		qsort(lens, (size_t)n, sizeof(*lens), bench_cmp_double);
		r->concat_len_p50 = lens[n / 2];
		r->concat_len_p95 = lens[(int)(0.95 * (n - 1) + 0.5)];
	}
	for (int i = 0; i < n; i++) {
		ss_state_free(&st[i]);
		free(toks[i]);
	}

	/* First-token times, one question at a time. */
	r->n_ttft = picaso ? n : (o->ttft_n < n ? o->ttft_n : n);
	if (r->n_ttft > 1024)
		r->n_ttft = 1024;
	int32_t *one = xmalloc((size_t)o->gen * sizeof(*one));
	opts o1 = *o;
	o1.gen = 1;
	for (int i = 0; i < r->n_ttft; i++) {
		ss_state s = { 0 };
		ss_state *ps = &s;
		int64_t len;
		size_t nq;
		int32_t *t;
		const double ta = bench_now();
		double tr = ta, tc = ta;
		if (picaso) {
			composed_state(&e, o, o->q[i], &s, &tr);
			tc = bench_now();
			t = question_tokens(&e, o->q[i], &nq);
			len = (int64_t)nq;
		} else {
			if (ss_state_alloc(&s, &d))
				die("state", SS_ERR_NOMEM, errmsg);
			t = concat_tokens(&e, o, o->q[i], &len);
		}
		ss_forward_seq q = { .tokens = t, .n_tokens = len, .state = &s };
		r->ttft[i] = answer(&e, &o1, &q, &ps, 1, one) - ta;
		r->ttft_part[0][i] = tr - ta;
		r->ttft_part[1][i] = tc - tr;
		r->ttft_part[2][i] = r->ttft[i] - (tc - ta);
		free(t);
		ss_state_free(&s);
	}
	free(one);
	free(lens);
	free(toks);
	free(seqs);
	free(sp);
	free(st);
	engine_close(&e);
}

/* Runs run_system in a child (its own peak RSS); the result comes back
 * through a temporary file. Returns the child's peak RSS in MB. */
static double in_child(const opts *o, int picaso, result *r, size_t r_bytes)
{
	FILE *tmp = tmpfile();
	struct rusage ru;
	int status;
	if (!tmp)
		die("tmpfile", SS_ERR_IO, strerror(errno));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		run_system(o, picaso, r);
		_exit(fwrite(r, r_bytes, 1, tmp) == 1 && fflush(tmp) == 0 ? 0 : 1);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die(picaso ? "picaso-r in process" : "concat in process", 0, "failed");
	rewind(tmp);
	if (fread(r, r_bytes, 1, tmp) != 1)
		die("tmpfile", SS_ERR_IO, "short read");
	fclose(tmp);
	return ru.ru_maxrss / 1024.0;
}

/* ------------------------------------------------------ child commands */

/* Runs `sh -c cmd` (bench_capture): its output into *out (NULL: discarded),
 * its standard error shown unless show_err is 0. Returns the exit status
 * with *wall (s) and *rss (MB: the largest of the shell and its tools). */
static int sh(const char *cmd, char **out, int show_err, double *wall, double *rss)
{
	char *const argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	return bench_capture(argv, out, show_err, wall, rss);
}

/* A shell word: 'text' with every ' as '\''. malloc'ed. */
static char *quote(const char *s)
{
	size_t n = 3;
	for (const char *p = s; *p; p++)
		n += *p == '\'' ? 4 : 1;
	char *q = xmalloc(n), *w = q;
	*w++ = '\'';
	for (const char *p = s; *p; p++) {
		if (*p == '\'') {
			memcpy(w, "'\\''", 4);
			w += 4;
		} else {
			*w++ = *p;
		}
	}
	*w++ = '\'';
	*w = '\0';
	return q;
}

/* The tools' picaso-r: writes the script of the batch (and of the
 * first-token runs) into work/, runs it, and checks the answers against
 * the library's (ref[n][gen]). */
static void run_tools(const opts *o, const char *work, const char *bin, const int32_t *ref, result *r,
		      double *rss, int *equal)
{
	char *path, *cmd = NULL, *out = NULL;
	size_t cap = 0;
	FILE *f, *pr;
	double wall, rs;
	char *tok = quote(o->tok_path), *idx = quote(o->index), *model = quote(o->model), *b = quote(bin);

	if (asprintf(&path, "%s/prompts.jsonl", work) < 0)
		die("out of memory", 0, NULL);
	if (!(pr = fopen(path, "w")))
		die(path, SS_ERR_IO, strerror(errno));
	free(path);
	if (asprintf(&path, "%s/compose.sh", work) < 0)
		die("out of memory", 0, NULL);
	if (!(f = fopen(path, "w")))
		die(path, SS_ERR_IO, strerror(errno));
	fprintf(f, "set -e\nPATH=%s:$PATH\n", b);
	for (int i = 0; i < o->n; i++) {
		char *q = quote(o->q[i]), *st;
		if (asprintf(&st, "%s/q%d.state", work, i) < 0)
			die("out of memory", 0, NULL);
		fprintf(f, "ss-retrieve query --literal --index %s -k %d --query %s | ss-compose --mode picaso-r -j %d -o %s\n", idx,
			o->k, q, o->threads, st);
		cJSON *l = cJSON_CreateObject();
		cJSON_AddNumberToObject(l, "id", i);
		cJSON_AddStringToObject(l, "prompt", o->q[i]);
		cJSON_AddStringToObject(l, "state", st);
		char *s = cJSON_PrintUnformatted(l);
		fprintf(pr, "%s\n", s);
		free(s);
		cJSON_Delete(l);
		free(q);
		free(st);
	}
	if (fclose(f) || fclose(pr))
		die(path, SS_ERR_IO, strerror(errno));
	cap = strlen(path) + 16;
	cmd = xmalloc(cap);
	snprintf(cmd, cap, "sh %s", path);
	if (sh(cmd, NULL, 1, &wall, &rs))
		die("the tools' batch", 0, path);
	r->phase[0] = wall;
	*rss = rs;
	free(cmd);
	if (asprintf(&cmd,
		     "PATH=%s:$PATH; ss-decode --model %s --tokenizer %s --prompts %s/prompts.jsonl --batch %d -n %d "
		     "--greedy --ignore-eos --ids --jsonl --threads %d",
		     b, model, tok, work, o->n, o->gen, o->threads) < 0)
		die("out of memory", 0, NULL);
	if (sh(cmd, &out, 1, &wall, &rs))
		die("the tools' batch", 0, cmd);
	r->phase[1] = wall;
	r->batch_s = r->phase[0] + r->phase[1];
	*rss = rs > *rss ? rs : *rss;

	/* Answers: one JSON line per prompt, in the prompts' order. */
	*equal = 0;
	char *line = out;
	for (int i = 0; i < o->n && line && *line; i++) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		cJSON *j = cJSON_Parse(line), *t = cJSON_GetObjectItem(j, "tokens"), *it;
		int g = 0, same = cJSON_GetArraySize(t) == o->gen;
		cJSON_ArrayForEach(it, t) {
			if (g < o->gen && it->valueint != ref[(size_t)i * o->gen + g])
				same = 0;
			g++;
		}
		*equal += same;
		cJSON_Delete(j);
		line = nl ? nl + 1 : NULL;
	}
	free(out);

	/* First token, a question alone: the three tools, one token. */
	r->n_ttft = o->ttft_n < o->n ? o->ttft_n : o->n;
	for (int i = 0; i < r->n_ttft; i++) {
		char *q = quote(o->q[i]);
		size_t need = 2 * strlen(q) + strlen(idx) + strlen(model) + strlen(tok) + strlen(b) + 512;
		char *c = xmalloc(need);
		snprintf(c, need,
			 "set -e; PATH=%s:$PATH; ss-retrieve query --literal --index %s -k %d --query %s | "
			 "ss-compose --mode picaso-r -j %d | ss-decode --model %s --tokenizer %s -p %s -n 1 --greedy "
			 "--ignore-eos --threads %d >/dev/null",
			 b, idx, o->k, q, o->threads, model, tok, q, o->threads);
		if (sh(c, NULL, 1, &r->ttft[i], &rs))
			die("the tools, one question", 0, c);
		*rss = rs > *rss ? rs : *rss;
		free(c);
		free(q);
	}
	free(cmd);
	free(path);
	free(tok);
	free(idx);
	free(model);
	free(b);
}

/* llama-batched-bench: one jsonl line per (pp, tg, pl). Returns 0 with the
 * total time of the line asked for (t) or its prompt time (t_pp). */
static int llama(const char *exe, const char *gguf, int threads, const char *npp, int ntg, int npl, char **out,
		 double *rss)
{
	char cmd[8192];
	double wall;
	long maxpp = 0;
	for (const char *p = npp; *p;) {
		long v = strtol(p, (char **)&p, 10);
		maxpp = v > maxpp ? v : maxpp;
		if (*p == ',')
			p++;
	}
	long ctx = (long)npl * (maxpp + ntg) + 16;
	snprintf(cmd, sizeof cmd,
		 "'%s' -m '%s' -c %ld -b 2048 -ub 512 -npp %s -ntg %d -npl %d -t %d --output-format jsonl", exe, gguf,
		 ctx, npp, ntg, npl, threads);
	return sh(cmd, out, 0, &wall, rss);
}

static double llama_field(const char *out, long pp, const char *field)
{
	const char *line = out;
	while (line && *line) {
		const char *nl = strchr(line, '\n');
		char *l = strndup(line, nl ? (size_t)(nl - line) : strlen(line));
		cJSON *j = cJSON_Parse(l), *p = cJSON_GetObjectItem(j, "pp"), *v = cJSON_GetObjectItem(j, field);
		double x = cJSON_IsNumber(p) && (long)p->valuedouble == pp && cJSON_IsNumber(v) ? v->valuedouble : -1;
		cJSON_Delete(j);
		free(l);
		if (x >= 0)
			return x;
		line = nl ? nl + 1 : NULL;
	}
	return -1;
}

/* Reads the stored state of every hit of every question once, as a
 * server's page cache holds its hot states, so that no system pays the
 * disk for them and the first one timed is not the only one that does.
 * Returns the bytes read. */
static double warm_up(const opts *o)
{
	char errmsg[SS_ERRMSG_MAX] = "";
	ss_index *ix;
	double bytes = 0;
	static char buf[1 << 20];
	int rc;
	if ((rc = ss_index_open(&ix, o->index, errmsg)))
		die(o->index, rc, errmsg);
	for (int i = 0; i < o->n; i++) {
		ss_index_hit *hits = NULL;
		int n = ss_index_query(ix, o->q[i], o->k, NULL, 0, &hits, errmsg);
		for (int j = 0; j < n; j++) {
			int fd = hits[j].path ? open(hits[j].path, O_RDONLY) : -1;
			for (uint64_t at = 0; fd >= 0 && at < hits[j].length;) {
				ssize_t got = pread(fd, buf, sizeof buf, (off_t)(hits[j].offset + at));
				if (got <= 0)
					break;
				at += (uint64_t)got;
				bytes += (double)got;
			}
			if (fd >= 0)
				close(fd);
		}
		ss_index_hits_free(hits, n);
	}
	ss_index_close(ix);
	return bytes;
}

/* ---------------------------------------------------------------- main */

/* The median of t[0..n) (n >= 1; t is not changed). */
static double median(const double *t, int n)
{
	double *c = xmalloc((size_t)n * sizeof(*c));
	memcpy(c, t, (size_t)n * sizeof(*c));
	qsort(c, (size_t)n, sizeof(*c), bench_cmp_double);
	const double m = c[n / 2];
	free(c);
	return m;
}

static void print_row(const char *name, int n, double batch_s, const double *ttft, int n_ttft, double rss,
		      const char *ttft_note)
{
	double *t = xmalloc((size_t)(n_ttft ? n_ttft : 1) * sizeof(*t));
	memcpy(t, ttft, (size_t)n_ttft * sizeof(*t));
	qsort(t, (size_t)n_ttft, sizeof(*t), bench_cmp_double);
	printf("  %-22s %8.3f answers/s (%d in %7.2f s)   TTFT p50 %8.1f ms  p95 %8.1f ms (%d %s)   peak RSS %6.0f MB\n",
	       name, n / batch_s, n, batch_s, 1e3 * t[n_ttft / 2], 1e3 * t[(int)(0.95 * (n_ttft - 1) + 0.5)], n_ttft,
	       ttft_note, rss);
	free(t);
}

int main(int argc, char **argv)
{
	opts o = { .n = 32, .k = 10, .gen = 32, .threads = 2, .ttft_n = 8 };
	const char *top = getenv("SS_TOP"), *build = getenv("SS_BUILD");
	char *dir = NULL, *path, *model, *index, *tokp, *bin, *work;
	const char *make_db = NULL;
	int make_n = 0;

	if (!top)
		top = ".";
	if (!build)
		build = "build";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--dir") && v)
			dir = argv[++i];
		else if (!strcmp(a, "-n") && v)
			o.n = atoi(argv[++i]);
		else if (!strcmp(a, "-k") && v)
			o.k = atoi(argv[++i]);
		else if (!strcmp(a, "-g") && v)
			o.gen = atoi(argv[++i]);
		else if (!strcmp(a, "-t") && v)
			o.threads = atoi(argv[++i]);
		else if (!strcmp(a, "--ttft-n") && v)
			o.ttft_n = atoi(argv[++i]);
		else if (!strcmp(a, "--make-questions") && v)
			make_n = atoi(argv[++i]);
		else if (!strcmp(a, "--index") && v)
			make_db = argv[++i];
		else {
			fprintf(stderr, "usage: rag [--dir DIR] [-n N] [-k K] [-g TOKENS] [-t THREADS] [--ttft-n M]\n"
					"       rag --make-questions N --index DB\n");
			return 2;
		}
	}
	if (make_n)
		return make_db ? make_questions(make_db, make_n) : 2;
	if (o.n < 1 || o.n > 1024 || o.k < 1 || o.gen < 1 || o.threads < 1 || o.ttft_n < 1) {
		fprintf(stderr, "rag: -n in [1, 1024], -k, -g, -t, --ttft-n >= 1\n");
		return 2;
	}
	if ((!dir && asprintf(&dir, "%s/%s/rag", top, build) < 0) || asprintf(&index, "%s/index.db", dir) < 0 ||
	    asprintf(&model, "%s/model", dir) < 0 || asprintf(&path, "%s/questions.jsonl", dir) < 0 ||
	    asprintf(&tokp, "%s/data/tokenizer.json", top) < 0 || asprintf(&bin, "%s/%s/bin", top, build) < 0 ||
	    asprintf(&work, "%s/work", dir) < 0)
		die("out of memory", 0, NULL);
	struct stat sb;
	if (stat(index, &sb) || stat(path, &sb) || stat(model, &sb)) {
		printf("rag: not run: %s has no index.db, questions.jsonl and model; make them with\n"
		       "  make -f pipelines/rag.mk   (tokenizes ../shared/train, indexes 365 k chunks, encodes the "
		       "retrieved ones: about 10 minutes here)\n",
		       dir);
		return 0;
	}
	o.index = index;
	o.model = model;
	o.tok_path = tokp;
	o.q = read_questions(path, &o.n);
	if (o.n < 1)
		die(path, SS_ERR_FORMAT, "no questions");

	printf("rag: %d questions, k = %d, %d-token greedy answers, %d threads; index %s\n", o.n, o.k, o.gen,
	       o.threads, index);
	const size_t r_bytes = sizeof(result) + (size_t)o.n * o.gen * sizeof(int32_t);
	result *pic = calloc(1, r_bytes), *cat = calloc(1, r_bytes), *tools = calloc(1, r_bytes);
	double rss_pic, rss_cat, rss_tools;
	int equal;

	const double tw = bench_now(), warm = warm_up(&o);
	printf("warm-up: the retrieved states read once (%.2f GB in %.1f s), as a server's page cache holds its "
	       "hot states\n",
	       warm / 1e9, bench_now() - tw);
	rss_pic = in_child(&o, 1, pic, r_bytes);
	mkdir(work, 0777);
	run_tools(&o, work, bin, pic->answers, tools, &rss_tools, &equal);
	rss_cat = in_child(&o, 0, cat, r_bytes);

	printf("systems (answers/s: all %d questions at once; TTFT: one question alone, retrieval to its first token)\n",
	       o.n);
	print_row("picaso-r, tools", o.n, tools->batch_s, tools->ttft, tools->n_ttft, rss_tools,
		  "alone, process starts and model load included");
	printf("    the batch: %d retrieve | compose pipelines %.2f s, one ss-decode (model load, %d prefills, "
	       "%d steps) %.2f s\n",
	       o.n, tools->phase[0], o.n, o.gen - 1, tools->phase[1]);
	print_row("picaso-r, 1 process", o.n, pic->batch_s, pic->ttft, pic->n_ttft, rss_pic, "alone");
	printf("    the batch: retrieve and compose %.2f s, prefill of the questions %.2f s, %d decode steps of %d "
	       "%.2f s\n",
	       pic->phase[0], pic->phase[1], o.gen - 1, o.n, pic->phase[2]);
	printf("    a question alone, p50 of each part: retrieval %.1f ms, composition %.1f ms, tokens, prefill "
	       "from the state and first token %.1f ms\n",
	       1e3 * median(pic->ttft_part[0], pic->n_ttft), 1e3 * median(pic->ttft_part[1], pic->n_ttft),
	       1e3 * median(pic->ttft_part[2], pic->n_ttft));
	print_row("concat, 1 process", o.n, cat->batch_s, cat->ttft, cat->n_ttft, rss_cat, "alone");
	printf("    the batch: retrieve and gather the prompts %.2f s, prefill %.2f s, %d decode steps of %d %.2f s\n",
	       cat->phase[0], cat->phase[1], o.gen - 1, o.n, cat->phase[2]);
	printf("  concat prompts: %.0f tokens mean, p50 %.0f, p95 %.0f\n", cat->concat_len_mean, cat->concat_len_p50,
	       cat->concat_len_p95);
	printf("  picaso-r answers, tools vs 1 process: %d of %d equal token for token\n", equal, o.n);

	const char *exe = getenv("LLAMA_BATCHED_BENCH"), *gguf = getenv("LLAMA_GGUF");
	double l_batch = -1, l_t50 = -1, l_t95 = -1, rss_l = 0, rss1;
	if (!exe || !gguf) {
		printf("  llama.cpp concat: not measured (set LLAMA_BATCHED_BENCH, LLAMA_GGUF)\n");
	} else {
		char npp[64], *out = NULL;
		const long mean = (long)(cat->concat_len_mean + 0.5), p50 = (long)cat->concat_len_p50,
			   p95 = (long)cat->concat_len_p95;
		snprintf(npp, sizeof npp, "%ld", mean);
		if (!llama(exe, gguf, o.threads, npp, o.gen, o.n, &out, &rss_l))
			l_batch = llama_field(out, mean, "t");
		free(out);
		out = NULL;
		snprintf(npp, sizeof npp, p50 == p95 ? "%ld" : "%ld,%ld", p50, p95);
		if (!llama(exe, gguf, o.threads, npp, 1, 1, &out, &rss1)) {
			l_t50 = llama_field(out, p50, "t_pp");
			l_t95 = llama_field(out, p95, "t_pp");
		}
		free(out);
		if (l_batch <= 0 || l_t50 < 0 || l_t95 < 0) {
			printf("  llama.cpp concat: not measured (%s failed on %s)\n", exe, gguf);
		} else {
			printf("  %-22s %8.3f answers/s (%d in %7.2f s)   TTFT p50 %8.1f ms  p95 %8.1f ms (its prompt "
			       "time at the p50, p95 lengths)   peak RSS %6.0f MB\n",
			       "llama.cpp concat", o.n / l_batch, o.n, l_batch, 1e3 * l_t50, 1e3 * l_t95,
			       rss_l > rss1 ? rss_l : rss1);
			printf("    (%s -npp %ld -ntg %d -npl %d -t %d: the mean Concat length for every prompt)\n", exe,
			       mean, o.gen, o.n, o.threads);
		}
	}

	/* The goals: picaso-r tools answers/s >= 5x our concat and llama.cpp's;
	 * its p95 TTFT <= 1/5 of llama.cpp's. */
	double t_sorted[1024];
	memcpy(t_sorted, pic->ttft, (size_t)pic->n_ttft * sizeof(double));
	qsort(t_sorted, (size_t)pic->n_ttft, sizeof(double), bench_cmp_double);
	double tt_sorted[1024];
	memcpy(tt_sorted, tools->ttft, (size_t)tools->n_ttft * sizeof(double));
	qsort(tt_sorted, (size_t)tools->n_ttft, sizeof(double), bench_cmp_double);
	printf("goals: picaso-r (tools) answers/s / concat (1 process): %.2f (>= 5)\n", cat->batch_s / tools->batch_s);
	if (l_batch > 0) {
		printf("       picaso-r (tools) answers/s / llama.cpp concat: %.2f (>= 5)\n", l_batch / tools->batch_s);
		printf("       llama.cpp's p95 TTFT / picaso-r's: %.1f in 1 process, %.1f through the tools (>= 5)\n",
		       l_t95 / t_sorted[(int)(0.95 * (pic->n_ttft - 1) + 0.5)],
		       l_t95 / tt_sorted[(int)(0.95 * (tools->n_ttft - 1) + 0.5)]);
	}
	for (int i = 0; i < o.n; i++)
		free(o.q[i]);
	free(o.q);
	free(pic);
	free(cat);
	free(tools);
	return 0;
}
