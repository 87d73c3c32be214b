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
	"                 [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]";

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
	       "  --per-token            add \"per_token\": the NLL of each continuation token\n",
	       usage);
	cli_model_help(25);
	printf("  -o FILE                output file (replaced only on success)\n"
	       "  -q, -v                 quieter; more verbose\n"
	       "  -h, --help             this help;  -V, --version  the version\n\n"
	       "Query and continuation are tokenized separately and their ids concatenated.\n"
	       "The query must not be empty: the first continuation token is predicted from\n"
	       "the logits at the query's last token (a stored state carries no logits).\n"
	       "Probabilities are a softmax over all vocab_padded logits.\n\n");
	cli_defaults_help();
	exit(0);
}

/* Logit rows computed per forward call: bounds memory for long continuations. */
#define SCORE_ROWS 64

typedef struct {
	const ss_model *m;
	const char *model_dir;
	ss_forward_ctx *ctx;
	ss_tokenizer *tok;
	const char *tok_path;
	float *logits; /* [SCORE_ROWS][vocab_padded] */
	double *per;   /* per-token NLL, grown as needed */
	size_t per_cap;
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

static void check_ids(const scorer *sc, const int32_t *ids, size_t n, const char *where,
		      const char *what)
{
	int32_t v = mcli_vocab(sc->m);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v)
			cli_die("%s: %s token %zu is %d, outside the model's vocabulary [0, %d)", where,
				what, i, (int)ids[i], (int)v);
}

/* Scores one pair from state `start` (unchanged) and prints its JSON line. */
static void score_pair(scorer *sc, const ss_state *start, const char *id, const int32_t *q,
		       size_t nq, const int32_t *c, size_t nc, const char *where)
{
	char err[SS_ERRMSG_MAX] = "";
	if (nq == 0)
		cli_die("%s: empty query: the first continuation token needs the logits of a "
			"query token", where);
	if (nc == 0)
		cli_die("%s: empty continuation", where);
	check_ids(sc, q, nq, where, "query");
	check_ids(sc, c, nc, where, "continuation");
	if (nc > sc->per_cap) {
		free(sc->per);
		sc->per_cap = nc;
		if (!(sc->per = malloc(nc * sizeof *sc->per)))
			cli_die("out of memory");
	}

	ss_state s;
	if (ss_state_copy(&s, start))
		cli_die("out of memory");

	/* The query but its last token: state only. */
	ss_forward_seq seq = { .tokens = q, .n_tokens = (int64_t)nq - 1, .state = &s };
	if (ss_forward_prefill(sc->ctx, &seq, 1, SS_LOGITS_NONE, err))
		cli_die("%s: %s", where, err);
	/* Then [q_last, c_0 .. c_{nc-2}]: row i predicts c_i. Chunks of SCORE_ROWS. */
	const int64_t V = sc->m->cfg.vocab_padded;
	int32_t buf[SCORE_ROWS];
	double sum = 0;
	for (size_t i0 = 0; i0 < nc; i0 += SCORE_ROWS) {
		size_t n = nc - i0 < SCORE_ROWS ? nc - i0 : SCORE_ROWS;
		for (size_t i = 0; i < n; i++)
			buf[i] = i0 + i == 0 ? q[nq - 1] : c[i0 + i - 1];
		seq = (ss_forward_seq){ .tokens = buf, .n_tokens = (int64_t)n, .state = &s,
					.logits = sc->logits };
		if (ss_forward_prefill(sc->ctx, &seq, 1, SS_LOGITS_ALL, err))
			cli_die("%s: %s", where, err);
		for (size_t i = 0; i < n; i++) {
			double v = ss_nll(sc->logits + (size_t)i * V, V, c[i0 + i]);
			sc->per[i0 + i] = v;
			sum += v;
		}
	}
	ss_state_free(&s);
	/* NaN or inf is no score (and no JSON): a state or model whose values
	 * overflow, said as an error, not printed */
	if (!isfinite(sum))
		cli_die("%s: the NLL is %g, not finite (the state's or the model's values overflow)", where,
			isnan(sum) ? NAN : sum);

	double mean = sum / (double)nc;
	FILE *f = sc->out;
	/* The state's id once: a pair from the command line has no id of its own. */
	putc('{', f);
	if (id) {
		fputs("\"id\":", f);
		mcli_json_str(f, id, (size_t)-1);
		putc(',', f);
	}
	fputs("\"state\":", f);
	mcli_json_str(f, start->id ? start->id : "", (size_t)-1);
	fprintf(f, ",\"nll\":%.9g,\"n_tokens\":%zu,\"ppl\":%.9g,\"sum_nll\":%.9g", mean, nc,
		exp(mean), sum);
	if (sc->per_token) {
		fputs(",\"per_token\":[", f);
		for (size_t i = 0; i < nc; i++)
			fprintf(f, i ? ",%.9g" : "%.9g", sc->per[i]);
		putc(']', f);
	}
	fputs("}\n", f);
	if (ferror(f))
		cli_die("write error: %s", strerror(errno));
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
	int32_t *ids = mcli_json_token_ids(obj, key_tokens, n, where);
	if (ids)
		return ids;
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, key);
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
	while ((o = mcli_jsonl_next(&r, "{\"id\": \"p1\", \"query\": \"text\", \"continuation\": \"text\"}"))) {
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
	       O_PER };
	static const struct option opts[] = {
		{ "state", required_argument, 0, O_STATE },
		{ "no-state", no_argument, 0, O_NOSTATE },
		{ "query", required_argument, 0, O_QUERY },
		{ "continuation", required_argument, 0, O_CONT },
		{ "query-tokens", required_argument, 0, O_QTOK },
		{ "continuation-tokens", required_argument, 0, O_CTOK },
		{ "pairs", required_argument, 0, O_PAIRS },
		{ "per-token", no_argument, 0, O_PER },
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
		}
	}
	if (optind < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind]);
	check_args(o);
}

/* Scores the pair (q, cc) or the pairs ps[0..np) from every state of the
 * input (or the zero state) into sc->out. */
static void score_all(scorer *sc, const score_opts *o, const int32_t *q, size_t nq,
		      const int32_t *cc, size_t nc, const pair *ps, size_t np)
{
	mcli_states src;
	mcli_states_open(&src, o->state_path, o->implicit);
	ss_state st;
	while (mcli_states_next(&src, sc->m, sc->model_dir, &st)) {
		char where[1200], state[600];
		if (o->state_path)
			snprintf(state, sizeof state, "%s: record %llu (id \"%.400s\")", o->state_path,
				 (unsigned long long)src.count - 1, st.id);
		else
			snprintf(state, sizeof state, "(zero state)");
		if (o->single)
			score_pair(sc, &st, NULL, q, nq, cc, nc, state);
		for (size_t i = 0; i < np; i++) {
			snprintf(where, sizeof where, "%s: pair \"%.400s\" from %s", o->pairs_path,
				 ps[i].id, state);
			score_pair(sc, &st, ps[i].id, ps[i].q, ps[i].nq, ps[i].c, ps[i].nc, where);
		}
		ss_state_free(&st);
	}
	mcli_states_close(&src);
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

	ss_model *m = mcli_load_model(sc.model_dir, 0, o.mo.wtype, usage);
	sc.m = m;
	sc.ctx = mcli_forward_ctx(m, sc.model_dir, dev, o.mo.threads);
	sc.logits = malloc((size_t)SCORE_ROWS * (size_t)m->cfg.vocab_padded * sizeof(float));
	if (!sc.logits)
		cli_die("out of memory");

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
	free(sc.per);
	ss_tokenizer_free(sc.tok);
	ss_forward_ctx_free(sc.ctx);
	ss_device_close(dev);
	ss_model_free(m);
	return 0;
}
