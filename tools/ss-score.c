/*
 * ss-score — negative log-likelihood of a continuation given a state and a
 * query (the PICASO paper's metric): one JSON line per (state, pair).
 */
#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"

static const char *usage =
	"ss-score [--model DIR] [--state FILE | --no-state]\n"
	"                [--query TEXT --continuation TEXT | --query-tokens IDS --continuation-tokens IDS\n"
	"                 | --pairs FILE] [--per-token] [--tokenizer FILE] [--device D]\n"
	"                 [--batch B] [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]";

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "Score a continuation given a starting state and a query: the mean negative\n"
	       "log-likelihood (nats/token) of the continuation's tokens, each predicted from\n"
	       "the state, the query and the continuation tokens before it. One JSON line per\n"
	       "state and pair: {\"id\", \"state\", \"nll\", \"n_tokens\", \"ppl\", \"sum_nll\"}\n"
	       "(\"id\": the pair's, only for --pairs; \"state\": the state's id).\n\n"
	       "  --state FILE           state stream to start from ('-' = stdin); every\n"
	       "                         state scores every pair. Default: stdin when it is\n"
	       "                         not a terminal and the pairs do not come from it\n"
	       "                         (the zero state if it is empty), else the zero state\n"
	       "  --no-state             start from the zero state\n"
	       "  --query TEXT, --continuation TEXT\n"
	       "                         one pair of texts (id: the state's id)\n"
	       "  --query-tokens IDS, --continuation-tokens IDS\n"
	       "                         one pair of token id lists (\"1,2,3\")\n"
	       "  --pairs FILE           JSON lines {\"id\", \"query\", \"continuation\"} (or\n"
	       "                         \"query_tokens\"/\"continuation_tokens\" arrays);\n"
	       "                         '-' = stdin, the default when no pair is given\n"
	       "  --per-token            add \"per_token\": the NLL of each continuation token\n"
	       "  --batch B              score up to B (state, pair) lines together, one\n"
	       "                         forward pass for all (default: as many as 1 GiB of\n"
	       "                         states and logits holds); the output is the same\n"
	       "                         bytes whatever B and --threads (on the CPU)\n",
	       usage);
	cli_common_help(25, CLI_HELP_MODEL | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\n"
	       "Query and continuation are tokenized separately and their ids concatenated.\n"
	       "The query must not be empty: the first continuation token is predicted from\n"
	       "the logits at the query's last token (a stored state carries no logits).\n"
	       "Probabilities are a softmax over all vocab_padded logits.\n\n");
	cli_defaults_help();
	exit(0);
}

/* Continuation tokens scored per forward call and sequence: bounds the
 * logits held for long continuations. A continuation is cut at multiples of
 * it whatever --batch, so that its segments, and with them its bits, do not
 * depend on the batch (backend_cpu.c ROWINV_MAX). */
#define SCORE_ROWS 64
/* --batch: the most (state, pair) jobs scored together; its default holds
 * their states and logits rows to BATCH_BYTES (default_batch). */
#define BATCH_MAX (1L << 16)
#define BATCH_BYTES (1024.0 * 1024 * 1024)

/* A state that jobs start from, held until its last job has copied it. */
typedef struct {
	ss_state st;
	char where[600]; /* "FILE: record N (id ...)" or "(zero state)" */
	size_t refs;     /* jobs not yet started */
} held_state;

/* One (state, pair) line to score. */
typedef struct {
	held_state *h;
	const char *id;          /* the pair's id, NULL for a command-line pair */
	const int32_t *q, *c;
	size_t nq, nc;
	char where[1200];        /* for errors */
	ss_state *s;             /* the running state (a copy of h->st) */
	size_t done;             /* continuation tokens scored */
	double sum;
	double *per;             /* [nc] per-token NLL */
	int32_t buf[SCORE_ROWS]; /* this round's input tokens */
} job;

typedef struct {
	const ss_model *m;
	const char *model_dir;
	ss_forward_ctx *ctx;
	ss_tokenizer *tok;
	const char *tok_path;
	float *logits;   /* [batch][SCORE_ROWS][vocab_padded] */
	int batch;
	job *jobs;       /* [batch] */
	ss_state *run;   /* [batch] the jobs' running states, allocated once: a
			  * batch's worth of fresh pages each time costs more
			  * than the batch's forward passes */
	ss_forward_seq *seqs; /* [batch] */
	int per_token;
	FILE *out;
} scorer;

/* Token ids of a text or an id array from a pair; dies naming `where`. */
static int32_t *pair_ids(scorer *sc, const char *text, size_t len, size_t *n, const char *where)
{
	char err[SS_ERRMSG_MAX] = "";
	if (!sc->tok)
		sc->tok = cli_tokenizer(sc->tok_path, sc->model_dir);
	int32_t *ids;
	int rc = ss_tokenizer_encode(sc->tok, text, len, &ids, n, err);
	if (rc)
		cli_die("%s: %s", where, err[0] ? err : ss_strerror(rc));
	return ids;
}

/* The first token of q or c outside the vocabulary, as an error message in
 * err; 0 if none. */
static int check_ids(const scorer *sc, const int32_t *ids, size_t n, const char *what,
		     char *err, size_t len)
{
	int32_t v = mcli_vocab(sc->m);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v) {
			snprintf(err, len, "%s token %zu is %d, outside the model's vocabulary [0, %d)",
				 what, i, (int)ids[i], (int)v);
			return 1;
		}
	return 0;
}

/* Why job j cannot be scored, in err; 0 if it can. */
static int job_invalid(const scorer *sc, const job *j, char *err, size_t len)
{
	if (j->nq == 0) {
		snprintf(err, len, "empty query: the first continuation token needs the logits of a "
				   "query token");
		return 1;
	}
	if (j->nc == 0) {
		snprintf(err, len, "empty continuation");
		return 1;
	}
	return check_ids(sc, j->q, j->nq, "query", err, len) ||
	       check_ids(sc, j->c, j->nc, "continuation", err, len);
}

/* Prints job j's JSON line; dies if its NLL is not finite. */
static void job_print(scorer *sc, const job *j)
{
	/* NaN or inf is no score (and no JSON): a state or model whose values
	 * overflow, said as an error, not printed */
	if (!isfinite(j->sum))
		cli_die("%s: the NLL is %g, not finite (the state's or the model's values overflow)",
			j->where, isnan(j->sum) ? NAN : j->sum);
	const double mean = j->sum / (double)j->nc;
	FILE *f = sc->out;
	/* The state's id once: a pair from the command line has no id of its own. */
	putc('{', f);
	if (j->id) {
		fputs("\"id\":", f);
		ss_json_str(f, j->id, (size_t)-1);
		putc(',', f);
	}
	fputs("\"state\":", f);
	ss_json_str(f, j->h->st.id ? j->h->st.id : "", (size_t)-1);
	fprintf(f, ",\"nll\":%.9g,\"n_tokens\":%zu,\"ppl\":%.9g,\"sum_nll\":%.9g", mean, j->nc,
		exp(mean), j->sum);
	if (sc->per_token) {
		fputs(",\"per_token\":[", f);
		for (size_t i = 0; i < j->nc; i++)
			fprintf(f, i ? ",%.9g" : "%.9g", j->per[i]);
		putc(']', f);
	}
	fputs("}\n", f);
	if (ferror(f))
		cli_die("write error: %s", strerror(errno));
}

/* Scores jobs[0..n) together and prints their lines in order: each starts
 * from a copy of its state; the queries but their last tokens go through
 * one prefill (state only); then rounds of up to SCORE_ROWS tokens per job,
 * [q_last, c_0 .. c_{nc-2}] (row i predicts c_i), one prefill each for all
 * jobs with tokens left. The jobs' states are released. */
static void score_jobs(scorer *sc, int n)
{
	char err[SS_ERRMSG_MAX] = "";
	const int64_t V = sc->m->cfg.vocab_padded;
	int k = 0;
	for (int i = 0; i < n; i++) {
		job *j = &sc->jobs[i];
		j->s = &sc->run[i];
		ss_state_copy_into(j->s, &j->h->st);
		j->h->refs--;
		j->done = 0;
		j->sum = 0;
		if (!(j->per = malloc(j->nc * sizeof *j->per)))
			cli_die("out of memory");
		sc->seqs[i] = (ss_forward_seq){ .tokens = j->q, .n_tokens = (int64_t)j->nq - 1,
						.state = j->s };
	}
	/* a failure of a pass is the batch's: named by its first job */
	if (ss_forward_prefill(sc->ctx, sc->seqs, n, SS_LOGITS_NONE, err))
		cli_die("%s: %s", sc->jobs[0].where, err);
	for (;;) {
		for (int i = k = 0; i < n; i++) {
			job *j = &sc->jobs[i];
			if (j->done == j->nc)
				continue;
			const size_t r = j->nc - j->done < SCORE_ROWS ? j->nc - j->done : SCORE_ROWS;
			for (size_t t = 0; t < r; t++)
				j->buf[t] = j->done + t == 0 ? j->q[j->nq - 1] : j->c[j->done + t - 1];
			sc->seqs[k++] = (ss_forward_seq){ .tokens = j->buf, .n_tokens = (int64_t)r,
							  .state = j->s,
							  .logits = sc->logits + (size_t)i * SCORE_ROWS * V };
		}
		if (k == 0)
			break;
		if (ss_forward_prefill(sc->ctx, sc->seqs, k, SS_LOGITS_ALL, err))
			cli_die("%s: %s", sc->jobs[0].where, err);
		for (int i = 0; i < n; i++) {
			job *j = &sc->jobs[i];
			const float *lg = sc->logits + (size_t)i * SCORE_ROWS * V;
			for (size_t t = 0; t < SCORE_ROWS && j->done < j->nc; t++, j->done++) {
				const double v = ss_nll(lg + (size_t)t * V, V, j->c[j->done]);
				j->per[j->done] = v;
				j->sum += v;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		job *j = &sc->jobs[i];
		job_print(sc, j);
		free(j->per);
		j->per = NULL;
	}
	/* a state whose jobs have all started goes after the last of them (its
	 * jobs are consecutive) */
	for (int i = 0; i < n; i++) {
		held_state *h = sc->jobs[i].h;
		if (h->refs == 0 && (i == n - 1 || sc->jobs[i + 1].h != h)) {
			ss_state_free(&h->st);
			free(h);
		}
	}
}

/* One pair of the --pairs input, parsed. */
typedef struct {
	char *id;
	int32_t *q, *c;
	size_t nq, nc;
} pair;

static void pair_free(pair *p)
{
	free(p->id);
	free(p->q);
	free(p->c);
	memset(p, 0, sizeof *p);
}

/* Reads ids of `key_tokens` (array) or tokenizes `key` (string) from obj. */
static int32_t *json_ids(scorer *sc, const cJSON *obj, const char *key, const char *key_tokens,
			 size_t *n, const char *where)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (s && cJSON_GetObjectItemCaseSensitive(obj, key_tokens))
		cli_die("%s: both \"%s\" and \"%s\": give one", where, key, key_tokens);
	int32_t *ids = mcli_json_token_ids(obj, key_tokens, n, where);
	if (ids)
		return ids;
	if (!cJSON_IsString(s))
		cli_die("%s: missing \"%s\" (a string) or \"%s\"", where, key, key_tokens);
	return pair_ids(sc, s->valuestring, strlen(s->valuestring), n, where);
}

/* Reads all pairs of a JSONL file (the pairs are few and small next to the
 * states, and every state scores every pair). */
static pair *read_pairs(scorer *sc, const char *path, size_t *np)
{
	mcli_jsonl r;
	mcli_jsonl_open(&r, path);
	mcli_jsonl_limit(&r, MCLI_MAX_TEXT, "a pairs file");
	pair *ps = NULL;
	size_t n = 0, cap = 0;
	cJSON *o;
	static const char *const keys[] = { "id", "query", "query_tokens", "continuation", "continuation_tokens",
					    NULL };
	while ((o = mcli_jsonl_next(&r, "{\"id\": \"p1\", \"query\": \"text\", \"continuation\": \"text\"}", keys))) {
		const char *where = r.where;
		ps = mcli_grow(ps, n, &cap, sizeof *ps);
		pair *p = &ps[n];
		memset(p, 0, sizeof *p);
		p->id = mcli_jsonl_id(&r, o);
		p->q = json_ids(sc, o, "query", "query_tokens", &p->nq, where);
		p->c = json_ids(sc, o, "continuation", "continuation_tokens", &p->nc, where);
		cJSON_Delete(o);
		n++;
	}
	mcli_jsonl_close(&r);
	*np = n;
	return ps;
}

/* The command line. */
typedef struct {
	const char *state_path, *pairs_path, *out_path;
	const char *query, *cont, *qtok, *ctok;
	cli_model_opts mo;
	int no_state, per_token;
	long batch;   /* --batch; 0: the memory bound */
	int single;   /* one pair from the command line, not --pairs */
	int implicit; /* the states come from a non-terminal stdin, not named */
} score_opts;

/* The options' argument checks: one query and one continuation, or
 * --pairs; stdin read once; no input as the output. */
static void check_args(score_opts *o)
{
	if (o->state_path && o->no_state)
		cli_usage(usage, "--state and --no-state exclude each other");
	if ((o->query != NULL) + (o->qtok != NULL) > 1 || (o->cont != NULL) + (o->ctok != NULL) > 1)
		cli_usage(usage, "give the query and the continuation once each (text or tokens)");
	o->single = o->query || o->qtok || o->cont || o->ctok;
	if (o->single && !((o->query || o->qtok) && (o->cont || o->ctok)))
		cli_usage(usage, "a pair needs both a query and a continuation");
	if (o->single && o->pairs_path)
		cli_usage(usage, "--pairs excludes --query/--continuation");
	if (!o->single && !o->pairs_path)
		o->pairs_path = "-";
	if (!o->state_path && !o->no_state && !(o->pairs_path && !strcmp(o->pairs_path, "-")) &&
	    !isatty(STDIN_FILENO)) {
		o->state_path = "-";
		o->implicit = 1;
	}
	if (o->state_path && o->pairs_path && !strcmp(o->state_path, "-") &&
	    !strcmp(o->pairs_path, "-"))
		cli_usage(usage, "the states and the pairs cannot both come from stdin");
	const char *inputs[] = { o->state_path, o->pairs_path, o->mo.tokenizer };
	for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++)
		cli_out_not_input(o->out_path, inputs[i]);
}

/* Reads the options into o; exits 2 on a usage error. */
static void parse_args(int argc, char **argv, score_opts *o)
{
	enum { O_STATE = 256, O_NOSTATE, O_QUERY, O_CONT, O_QTOK, O_CTOK, O_PAIRS,
	       O_PER, O_BATCH };
	static const struct option opts[] = {
		{ "state", required_argument, 0, O_STATE },
		{ "no-state", no_argument, 0, O_NOSTATE },
		{ "query", required_argument, 0, O_QUERY },
		{ "continuation", required_argument, 0, O_CONT },
		{ "query-tokens", required_argument, 0, O_QTOK },
		{ "continuation-tokens", required_argument, 0, O_CTOK },
		{ "pairs", required_argument, 0, O_PAIRS },
		{ "per-token", no_argument, 0, O_PER },
		{ "batch", required_argument, 0, O_BATCH },
		{ 0, 0, 0, 0 },
	};
	*o = (score_opts){ 0 };
	const cli_options co = { NULL, opts, usage, help, &o->out_path, &o->mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_STATE: o->state_path = optarg; break;
		case O_NOSTATE: o->no_state = 1; break;
		case O_QUERY: o->query = optarg; break;
		case O_CONT: o->cont = optarg; break;
		case O_QTOK: o->qtok = optarg; break;
		case O_CTOK: o->ctok = optarg; break;
		case O_PAIRS: o->pairs_path = optarg; break;
		case O_PER: o->per_token = 1; break;
		case O_BATCH: o->batch = cli_long("--batch", optarg, 1, BATCH_MAX, usage); break;
		}
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	check_args(o);
}

/* Scores the pair (q, cc) or the pairs ps[0..np) from every state of the
 * input (or the zero state) into sc->out, sc->batch (state, pair) jobs at a
 * time, in order: a state is read when the batch needs its jobs and held
 * until the last has started. A job that cannot be scored ends the run
 * after the jobs before it are printed, as one at a time would. */
static void score_all(scorer *sc, const score_opts *o, const int32_t *q, size_t nq,
		      const int32_t *cc, size_t nc, const pair *ps, size_t np)
{
	mcli_states src;
	mcli_states_open(&src, o->state_path, o->implicit);
	held_state *h = NULL;
	const size_t per_state = o->single ? 1 : np;
	size_t next = per_state; /* h's next job */
	char bad[SS_ERRMSG_MAX + 1300] = "";
	int n = 0, end = 0;
	if (per_state == 0) { /* no pairs: the states are still read (and checked) */
		ss_state st;
		while (mcli_states_next(&src, sc->m, sc->model_dir, &st))
			ss_state_free(&st);
		end = 1;
	}
	while (!end || n > 0) {
		while (!end && !bad[0] && n < sc->batch) {
			if (next == per_state) {
				ss_state st;
				if (!mcli_states_next(&src, sc->m, sc->model_dir, &st)) {
					end = 1;
					break;
				}
				if (!(h = calloc(1, sizeof *h)))
					cli_die("out of memory");
				h->st = st;
				h->refs = per_state;
				if (o->state_path)
					snprintf(h->where, sizeof h->where, "%s: record %llu (id \"%.400s\")",
						 o->state_path, (unsigned long long)src.count - 1, st.id);
				else
					snprintf(h->where, sizeof h->where, "(zero state)");
				next = 0;
			}
			job *j = &sc->jobs[n];
			if (o->single) {
				*j = (job){ .h = h, .q = q, .nq = nq, .c = cc, .nc = nc };
				snprintf(j->where, sizeof j->where, "%s", h->where);
			} else {
				const pair *p = &ps[next];
				*j = (job){ .h = h, .id = p->id, .q = p->q, .nq = p->nq, .c = p->c, .nc = p->nc };
				snprintf(j->where, sizeof j->where, "%s: pair \"%.400s\" from %s",
					 o->pairs_path, p->id, h->where);
			}
			char why[SS_ERRMSG_MAX];
			if (job_invalid(sc, j, why, sizeof why)) {
				snprintf(bad, sizeof bad, "%s: %s", j->where, why);
				break;
			}
			next++;
			n++;
		}
		if (n > 0)
			score_jobs(sc, n);
		n = 0;
		if (bad[0])
			cli_die("%s", bad);
	}
	mcli_states_close(&src);
}

/* The default --batch: as many jobs as BATCH_BYTES of their running state
 * and SCORE_ROWS logits rows hold (about 30 at the mamba2-130m shape). */
static int default_batch(const ss_model *m)
{
	return ss_forward_batch_size(m, (double)SCORE_ROWS * m->cfg.vocab_padded * sizeof(float),
				     BATCH_BYTES, BATCH_MAX);
}

int main(int argc, char **argv)
{
	cli_init("ss-score");
	score_opts o;
	parse_args(argc, argv, &o);
	scorer sc = { .per_token = o.per_token, .tok_path = o.mo.tokenizer };
	sc.model_dir = cli_model_dir(o.mo.model, usage);
	ss_device *dev = mcli_device(o.mo.device, usage);

	/* Parse inline token lists before the (slow) model load: usage errors first. */
	size_t nq = 0, nc = 0;
	int32_t *q = o.qtok ? mcli_parse_ids("--query-tokens", o.qtok, &nq, usage) : NULL;
	int32_t *cc = o.ctok ? mcli_parse_ids("--continuation-tokens", o.ctok, &nc, usage) : NULL;

	ss_model *m = mcli_load_model(sc.model_dir, 0, o.mo.weights_dtype, usage);
	sc.m = m;
	sc.ctx = mcli_forward_ctx(m, sc.model_dir, dev, o.mo.threads);
	/* lines the same whatever the batch (on a GPU: to its rounding) */
	if (ss_forward_ctx_device(sc.ctx) == SS_DEVICE_CPU &&
	    ss_forward_ctx_set_deterministic(sc.ctx, 1))
		cli_die("cannot make the forward context deterministic");
	sc.batch = o.batch ? (int)o.batch : default_batch(m);
	sc.jobs = calloc((size_t)sc.batch, sizeof *sc.jobs);
	sc.seqs = calloc((size_t)sc.batch, sizeof *sc.seqs);
	sc.run = calloc((size_t)sc.batch, sizeof *sc.run);
	ss_state_dims sd;
	ss_model_state_dims(m, &sd);
	for (int i = 0; sc.run && i < sc.batch; i++)
		if (ss_state_alloc(&sc.run[i], &sd))
			cli_die("out of memory for a batch of %d (--batch)", sc.batch);
	sc.logits = malloc((size_t)sc.batch * SCORE_ROWS * (size_t)m->cfg.vocab_padded * sizeof(float));
	if (!sc.jobs || !sc.seqs || !sc.run || !sc.logits)
		cli_die("out of memory for a batch of %d (--batch)", sc.batch);

	pair *ps = NULL;
	size_t np = 0;
	if (o.single) {
		if (o.query)
			q = pair_ids(&sc, o.query, strlen(o.query), &nq, "--query");
		if (o.cont)
			cc = pair_ids(&sc, o.cont, strlen(o.cont), &nc, "--continuation");
	} else {
		ps = read_pairs(&sc, o.pairs_path, &np);
	}
	sc.out = cli_out_open(o.out_path);
	score_all(&sc, &o, q, nq, cc, nc, ps, np);
	cli_out_close(sc.out);

	for (size_t i = 0; i < np; i++)
		pair_free(&ps[i]);
	free(ps);
	free(q);
	free(cc);
	free(sc.logits);
	for (int i = 0; i < sc.batch; i++)
		ss_state_free(&sc.run[i]);
	free(sc.run);
	free(sc.jobs);
	free(sc.seqs);
	ss_tokenizer_free(sc.tok);
	ss_forward_ctx_free(sc.ctx);
	ss_device_close(dev);
	ss_model_free(m);
	return 0;
}
