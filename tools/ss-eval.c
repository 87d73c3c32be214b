/*
 * ss-eval — the PICASO paper's evaluation over a state database: WikiText
 * continuation NLL vs k retrieved chunks per method with composition vs
 * concatenation timings (§6.1, Fig. 3), and MS MARCO data attribution by
 * Leave-One-In / Leave-One-Out (Appendix C, Table 4), the MS MARCO answer
 * NLL (Table 1 row 1), processing vs inference time (Appendix B.3,
 * Fig. 7) and key-value recall through composition (exact match and NLL of
 * a key's value vs k, per position of the document that holds it). The
 * methods and the metrics are libss calls (ss_eval.h); this file reads the
 * options and runs one protocol (eval_wikitext.c, eval_attribution.c,
 * eval_timing.c, eval_recall.c). Manual: man/ss-eval.1.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "ss.h"
#include "eval_run.h"

static const char *usage =
	"ss-eval wikitext [--model DIR] --index DB --tokens FILE [--passages N] [--min-tokens N]\n"
	"               [--kmax K] [--methods LIST] [--seed S] [--per-passage FILE]\n"
	"               [--summary FILE] [COMMON]\n"
	"       ss-eval attribution [--model DIR] --qa FILE [--queries N] [--exactly-one]\n"
	"               [--methods LIST] [--per-query FILE] [--tokenizer FILE] [COMMON]\n"
	"       ss-eval msmarco [--model DIR] --qa FILE [--queries N] [--methods LIST]\n"
	"               [--per-query FILE] [--tokenizer FILE] [COMMON]\n"
	"       ss-eval timing [--model DIR] [--lengths L,...] [--gen N] [--repeat R]\n"
	"               [--seed S] [COMMON]\n"
	"       ss-eval openbookqa [--model DIR] --qa FILE.tsv --index DB --tokens FILE\n"
	"               [--kmax K] [--queries N] [--methods LIST] [--tokenizer FILE] [COMMON]\n"
	"       ss-eval recall [--model DIR] --index DB --qa FILE [--queries N] [--ks K,...]\n"
	"               [--methods LIST] [--retrieve] [--retrievers LIST] [--per-query FILE]\n"
	"               [--rerank N [--rerank-score ll|entropy] [--rerank-template T]]\n"
	"               [--tokenizer FILE] [COMMON]\n"
	"  COMMON: [--device D] [--threads N] [--weights-dtype T] [-o FILE] [-q|-v]";

/* Keeps the default WikiText run (database included) within 20 minutes on 2
 * cores with the t1 model: about 1.5 s per passage there (7 methods, k = 0..10). */
#define PASSAGES_DEFAULT 300
#define MIN_TOKENS_DEFAULT 64
#define KMAX_DEFAULT 10
#define KMAX_MAX 64
/* recall: the largest k of --ks. */
#define KS_MAX 1024

static void help(void) __attribute__((noreturn));
static void help(void)
{
	printf("usage: %s\n\n"
	       "wikitext: for each sampled passage (a token record pair P#0, P#1 as\n"
	       "  ss-tokenize --parts 2 writes them: query half, continuation half) retrieve\n"
	       "  the top K halves by BM25 with the query half's text from the index DB,\n"
	       "  leaving out both halves of P; for k = 0..K build each method's context from\n"
	       "  the k best (most relevant last) and score the continuation's mean NLL after\n"
	       "  the query. Times the context: composition (weights + accumulation) or\n"
	       "  re-encoding (the prefill of the documents). Writes the TSV\n"
	       "  method, k, mean_nll, n, mean_time_ms.\n"
	       "attribution: for each MS MARCO query (with an answer and a selected passage)\n"
	       "  pick the passage the answer depends on: Leave-One-In (lowest answer NLL\n"
	       "  from one passage's state) and Leave-One-Out per method (highest answer NLL\n"
	       "  without the passage). Writes the TSV method, n, correct, precision,\n"
	       "  mean_time_ms (rows: chance, loi, loo-METHOD...).\n"
	       "msmarco: for each MS MARCO query with an answer and a selected passage,\n"
	       "  compose all its passages (sample order) by each method and score the\n"
	       "  answer's mean NLL after the query. Writes the TSV method, n, mean_nll,\n"
	       "  mean_time_ms, mean_infer_ms.\n"
	       "timing: for each length L prefill L tokens from the zero state\n"
	       "  (processing), then decode --gen tokens greedily from that state\n"
	       "  (inference). Writes the TSV tokens, processing_ms, inference_ms.\n"
	       "openbookqa: for each OpenBookQA question (TSV) retrieve the top K documents\n"
	       "  of the index by BM25 with the question stem; for k = 0..K build each\n"
	       "  method's context and pick the choice of lowest answer NLL (summed:\n"
	       "  accuracy; per byte: accuracy_norm). Writes the TSV method, k, n,\n"
	       "  accuracy, accuracy_norm, mean_time_ms.\n"
	       "recall: for each query of the recall JSONL (--qa: id, key, query,\n"
	       "  continuation, chunks with the gold first, gold_pos) and each k of --ks,\n"
	       "  build each method's context from the first k chunks of the index DB in\n"
	       "  concatenation order (the gold at gold_pos mod k) and score the\n"
	       "  continuation after the query: exact match (greedy decoding gives it) and\n"
	       "  mean NLL. Writes the TSV context, method, k, pos, n, em, mean_nll,\n"
	       "  em_share, nll_share, recall, mean_time_ms (context oracle; pos all and\n"
	       "  each gold position 0..k-1).\n\n"
	       "  --index DB          wikitext, openbookqa, recall: the index (ss-retrieve\n"
	       "                      build; recall: with the documents' tokens); repeated,\n"
	       "                      or @FILE (a list, as ss-retrieve's): shards read as\n"
	       "                      one index\n"
	       "  --tokens FILE       wikitext, openbookqa: the index's token stream\n"
	       "  --passages N        wikitext: passages sampled (default %d; 0 = all)\n"
	       "  --min-tokens N      wikitext: only passages of at least N tokens (default %d)\n"
	       "  --kmax K            wikitext, openbookqa: k = 0..K (default %d)\n"
	       "  --seed S            wikitext: sampling seed (default 1)\n"
	       "  --per-passage FILE  wikitext: also write passage, k, method, nll, time_ms,\n"
	       "                      docs (ids in concatenation order)\n"
	       "  --summary FILE      wikitext: also write Fig. 3's summary: method,\n"
	       "                      improvement_pct (mean over k >= 1 of the NLL gain\n"
	       "                      over naive, %%), concat_fraction (of concat's gain)\n"
	       "  --qa FILE           attribution, msmarco: MS MARCO v1.1 JSON (array);\n"
	       "                      openbookqa: OpenBookQA TSV; recall: the queries JSONL\n"
	       "  --queries N         attribution, msmarco, openbookqa, recall: at most N\n"
	       "                      queries (0 = all)\n"
	       "  --ks K,...          recall: the numbers of documents composed (default\n"
	       "                      1,2,4,8,16; each at most the chunks of every query)\n"
	       "  --retrieve          recall: also the context bm25: the BM25 top k of the\n"
	       "                      index for the query's key, most relevant last\n"
	       "  --retrievers LIST   recall: these retrieved contexts (comma-separated):\n"
	       "                      bm25 (the key's words OR-ed), phrase (the key as one\n"
	       "                      \"quoted phrase\"), and (its words AND-ed), proximity\n"
	       "                      (bm25 plus BM25TP's proximity): ss-retrieve query's\n"
	       "                      --query KEY, --query '\"KEY\"', --operator and,\n"
	       "                      --proximity on; rerank (needs --rerank N)\n"
	       "  --rerank N          recall: also the context rerank: BM25's top N for the\n"
	       "                      key's words (N >= every k), reranked by the model's\n"
	       "                      score of the key from each document's state, as\n"
	       "                      ss-retrieve query --rerank N does\n"
	       "  --rerank-score S, --rerank-template T\n"
	       "                      recall: the rerank's score (ll, entropy) and the text\n"
	       "                      scored, as ss-retrieve(1)'s options\n"
	       "  --exactly-one       attribution: only queries with one selected passage\n"
	       "  --per-query FILE    attribution: also write query_id, method, pick,\n"
	       "                      correct, n_passages; msmarco: query_id, method,\n"
	       "                      nll, time_ms, n_passages; recall: id, context, k,\n"
	       "                      gold_pos, method, em, nll, time_ms\n"
	       "  --methods LIST      comma-separated methods; 'paper' = naive,concat,soup,\n"
	       "                      caso,picaso-s,picaso-r,piconcat-r (wikitext and\n"
	       "                      msmarco default); 'souping' = soup, soup-sum,\n"
	       "                      soup-max, each also with :before, :after, :both\n"
	       "                      (L2 norm of each layer's ssm before/after pooling);\n"
	       "                      attribution Leave-One-Out default: concat,soup,caso,\n"
	       "                      picaso-r,picaso-s; recall default: naive,concat,\n"
	       "                      caso,picaso-s,picaso-r,soup,piconcat-r\n"
	       "  --lengths L,...     timing: input lengths in tokens (default\n"
	       "                      256,512,1024,2048,4096,8192)\n"
	       "  --gen N             timing: tokens decoded (default 32)\n"
	       "  --repeat R          timing: runs per length, the median kept (default 3)\n",
	       usage, PASSAGES_DEFAULT, MIN_TOKENS_DEFAULT, KMAX_DEFAULT);
	cli_common_help(22, CLI_HELP_MODEL | CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	printf("\nThe output is a TSV (default stdout).\n\n");
	cli_defaults_help();
	exit(0);
}

/* Appends method m to run->methods; when it is there already, a usage error
 * if named, nothing if from a keyword. */
static void add_method(eval_run *run, int m, int named)
{
	for (int i = 0; i < run->n_methods; i++)
		if (run->methods[i] == m) {
			if (!named)
				return;
			cli_usage(usage, "--methods: '%s' given twice", ss_eval_method_name((ss_eval_method)m));
		}
	if (run->n_methods == EVAL_MAX_METHODS)
		cli_usage(usage, "--methods: more than %d methods", EVAL_MAX_METHODS);
	run->methods[run->n_methods++] = m;
}

/* --retrievers: comma-separated names of eval_retriever_names. */
static void parse_retrievers(eval_run *run, const char *s)
{
	char *dup = strdup(s), *save = NULL;
	if (!dup)
		cli_die("out of memory");
	for (char *t = strtok_r(dup, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		int r = 0;
		while (r < EVAL_N_RETRIEVERS && strcmp(t, eval_retriever_names[r]))
			r++;
		if (r == EVAL_N_RETRIEVERS)
			cli_usage(usage, "--retrievers: unknown retriever '%s' (bm25, phrase, and, proximity, rerank)", t);
		run->retrieve |= 1u << r;
	}
	free(dup);
	if (!run->retrieve)
		cli_usage(usage, "--retrievers: no retriever in '%s'", s);
}

/* --methods: names and the keywords paper (the PICASO paper's 7) and
 * souping (soup, soup-sum, soup-max with each normalisation). */
static void parse_methods(eval_run *run, const char *s)
{
	char *dup = strdup(s), *save = NULL;
	if (!dup)
		cli_die("out of memory");
	run->n_methods = 0;
	for (char *t = strtok_r(dup, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		ss_eval_method m;
		if (!strcmp(t, "paper")) {
			for (int i = 0; i < SS_EVAL_N_PAPER; i++)
				add_method(run, i, 0);
		} else if (!strcmp(t, "souping")) {
			static const int pool[3] = { SS_EVAL_SOUP, SS_EVAL_SOUP_SUM, SS_EVAL_SOUP_MAX };
			for (int i = 0; i < 3; i++)
				for (int norm = 0; norm < 4; norm++)
					add_method(run, pool[i] | norm << 8, 0);
		} else if (ss_eval_method_parse(t, &m)) {
			cli_usage(usage, "--methods: unknown method '%s'", t);
		} else {
			add_method(run, (int)m, 1);
		}
	}
	if (!run->n_methods)
		cli_usage(usage, "--methods: no method");
	free(dup);
}

enum { O_INDEX = 256, O_TOKENS, O_PASSAGES, O_MINTOK, O_KMAX, O_SEED, O_PERP, O_QA, O_QUERIES,
       O_ONE, O_PERQ, O_METHODS, O_SUMMARY, O_LENGTHS, O_GEN, O_REPEAT, O_KS, O_RETRIEVE, O_RETRIEVERS,
       O_RERANK, O_RERANK_SCORE, O_RERANK_TEMPLATE };

static const char *const commands[] = { "wikitext", "attribution", "msmarco", "timing",
					"openbookqa", "recall" };
enum { CMD_WIKITEXT, CMD_ATTRIBUTION, CMD_MSMARCO, CMD_TIMING, CMD_OPENBOOKQA, CMD_RECALL, N_CMD };

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* A list "N,N,..." of option opt into a new array *out of *n values, each in
 * 1..max; ordered and distinct when `sorted` (a repeat is a usage error). */
static void parse_counts(const char *opt, const char *s, long max, int sorted, long **out, int *n)
{
	size_t len;
	int32_t *ids = mcli_parse_ids(opt, s, &len, usage);
	if (!len)
		cli_usage(usage, "%s: no value", opt);
	free(*out);
	*out = xcalloc(len, sizeof **out);
	for (size_t i = 0; i < len; i++) {
		if (ids[i] < 1 || ids[i] > max)
			cli_usage(usage, "%s: %d is not in 1..%ld", opt, ids[i], max);
		(*out)[i] = ids[i];
	}
	free(ids);
	if (sorted) {
		qsort(*out, len, sizeof **out, cmp_long);
		for (size_t i = 1; i < len; i++)
			if ((*out)[i] == (*out)[i - 1])
				cli_usage(usage, "%s: %ld given twice", opt, (*out)[i]);
	}
	*n = (int)len;
}

/* Reads the options into *run; *methods as given (NULL when not). Options may come before or after the command. Returns the command
 * (CMD_*). */
static int parse_options(int argc, char **argv, eval_run *run, const char **methods)
{
	static const struct option opts[] = {
		{ "index", required_argument, 0, O_INDEX },
		{ "tokens", required_argument, 0, O_TOKENS },
		{ "passages", required_argument, 0, O_PASSAGES },
		{ "min-tokens", required_argument, 0, O_MINTOK },
		{ "kmax", required_argument, 0, O_KMAX },
		{ "seed", required_argument, 0, O_SEED },
		{ "per-passage", required_argument, 0, O_PERP },
		{ "qa", required_argument, 0, O_QA },
		{ "queries", required_argument, 0, O_QUERIES },
		{ "exactly-one", no_argument, 0, O_ONE },
		{ "per-query", required_argument, 0, O_PERQ },
		{ "methods", required_argument, 0, O_METHODS },
		{ "summary", required_argument, 0, O_SUMMARY },
		{ "lengths", required_argument, 0, O_LENGTHS },
		{ "gen", required_argument, 0, O_GEN },
		{ "repeat", required_argument, 0, O_REPEAT },
		{ "ks", required_argument, 0, O_KS },
		{ "retrieve", no_argument, 0, O_RETRIEVE },
		{ "retrievers", required_argument, 0, O_RETRIEVERS },
		{ "rerank", required_argument, 0, O_RERANK },
		{ "rerank-score", required_argument, 0, O_RERANK_SCORE },
		{ "rerank-template", required_argument, 0, O_RERANK_TEMPLATE },
		{ 0, 0, 0, 0 },
	};
	const cli_options co = { NULL, opts, usage, help, &run->out, &run->mo };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		switch (c) {
		case O_INDEX:
			cli_index_add(optarg, &run->indexes, &run->n_indexes);
			run->index = optarg;
			break;
		case O_TOKENS: run->tokens = optarg; break;
		case O_PASSAGES: run->passages = cli_long("--passages", optarg, 0, 1L << 40, usage); break;
		case O_MINTOK: run->min_tokens = cli_long("--min-tokens", optarg, 2, 1L << 30, usage); break;
		case O_KMAX: run->kmax = cli_long("--kmax", optarg, 0, KMAX_MAX, usage); break;
		case O_SEED: run->seed = (uint64_t)cli_long("--seed", optarg, 0, 1L << 62, usage); break;
		case O_PERP: run->per = optarg; break;
		case O_QA: run->qa = optarg; break;
		case O_QUERIES: run->queries = cli_long("--queries", optarg, 0, 1L << 30, usage); break;
		case O_ONE: run->exactly_one = 1; break;
		case O_PERQ: run->per = optarg; break;
		case O_METHODS: *methods = optarg; break;
		case O_SUMMARY: run->summary = optarg; break;
		case O_LENGTHS:
			parse_counts("--lengths", optarg, INT32_MAX, 0, &run->lengths, &run->n_lengths);
			break;
		case O_GEN: run->gen = cli_long("--gen", optarg, 1, 1L << 20, usage); break;
		case O_REPEAT: run->repeat = cli_long("--repeat", optarg, 1, 1000, usage); break;
		case O_KS: parse_counts("--ks", optarg, KS_MAX, 1, &run->ks, &run->n_ks); break;
		case O_RETRIEVE: run->retrieve |= 1u << EVAL_R_BM25; break;
		case O_RETRIEVERS: parse_retrievers(run, optarg); break;
		case O_RERANK:
		case O_RERANK_SCORE:
		case O_RERANK_TEMPLATE: rerank_parse_opt(&run->rr, c - O_RERANK, optarg, usage); break;
		}
	}
	if (optind >= argc)
		cli_usage(usage, "missing command: wikitext, attribution, msmarco, timing, openbookqa or "
			  "recall");
	const char *cmd = argv[optind];
	int k = 0;
	while (k < N_CMD && strcmp(cmd, commands[k]))
		k++;
	if (k == N_CMD)
		cli_usage(usage, "unknown command '%s' (wikitext, attribution, msmarco, timing, "
			  "openbookqa or recall)", cmd);
	if (optind + 1 < argc)
		cli_usage(usage, "unexpected argument '%s'", argv[optind + 1]);
	return k;
}

/* Parses and checks the command line into *run; returns the command. */
static int parse_args(int argc, char **argv, eval_run *run)
{
	const char *methods = NULL;
	int cmd = parse_options(argc, argv, run, &methods);
	int obqa = cmd == CMD_OPENBOOKQA, wiki = cmd == CMD_WIKITEXT || obqa;
	int recall = cmd == CMD_RECALL;
	int qa = cmd == CMD_ATTRIBUTION || cmd == CMD_MSMARCO || obqa || recall;
	if (wiki && (!run->index || !run->tokens))
		cli_usage(usage, "%s needs --index and --tokens", commands[cmd]);
	if (recall && !run->index)
		cli_usage(usage, "recall needs --index");
	if (!qa && run->qa)
		cli_usage(usage, "--qa belongs to attribution, msmarco, openbookqa and recall");
	if (qa && !run->qa)
		cli_usage(usage, "%s needs --qa", commands[cmd]);
	if (!wiki && run->tokens)
		cli_usage(usage, "--tokens belongs to wikitext and openbookqa%s",
			  recall ? " (recall reads the tokens from the index)" : "");
	if (!wiki && !recall && run->index)
		cli_usage(usage, "--index belongs to wikitext, openbookqa and recall");
	if (!recall && (run->ks || run->retrieve || run->rr.n))
		cli_usage(usage, "--ks, --retrieve and --rerank belong to recall");
	if (!run->rr.n && (run->rr.tmpl || run->rr.kind != RERANK_LL))
		cli_usage(usage, "--rerank-score and --rerank-template go with --rerank N");
	if ((run->retrieve & 1u << EVAL_R_RERANK) && !run->rr.n)
		cli_usage(usage, "--retrievers rerank needs --rerank N (the BM25 candidates it reranks)");
	if (run->rr.n)
		run->retrieve |= 1u << EVAL_R_RERANK;
	if (cmd != CMD_WIKITEXT && run->summary)
		cli_usage(usage, "--summary belongs to wikitext");
	if (cmd != CMD_TIMING && (run->lengths || run->gen || run->repeat))
		cli_usage(usage, "--lengths, --gen and --repeat belong to timing");
	if (methods)
		parse_methods(run, methods);
	else if (cmd == CMD_ATTRIBUTION)
		parse_methods(run, "concat,soup,caso,picaso-r,picaso-s");
	else if (recall)
		parse_methods(run, "naive,concat,caso,picaso-s,picaso-r,soup,piconcat-r");
	else
		parse_methods(run, "paper");
	if (recall && !run->ks)
		parse_counts("--ks", "1,2,4,8,16", KS_MAX, 1, &run->ks, &run->n_ks);
	if (run->rr.n && run->rr.n < run->ks[run->n_ks - 1])
		cli_usage(usage, "--rerank %d is below the largest k of --ks (%ld): it reranks N >= k candidates",
			  run->rr.n, run->ks[run->n_ks - 1]);
	/* every output (-o, --per-*, --summary) against every file read */
	const char *outs[] = { run->out, run->per, run->summary };
	const char *ins[] = { run->tokens, run->qa, run->mo.tokenizer };
	for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
		for (size_t j = 0; j < sizeof ins / sizeof *ins; j++)
			cli_out_not_input(outs[i], ins[j]);
		for (int j = 0; j < run->n_indexes; j++)
			cli_out_not_input(outs[i], run->indexes[j]);
	}
	/* Messages name the index, or the count of shards (an error of one
	 * shard names that shard). */
	static char label[64];
	if (run->n_indexes == 1)
		run->index = run->indexes[0];
	else if (run->n_indexes > 1) {
		snprintf(label, sizeof label, "%d shards", run->n_indexes);
		run->index = label;
	}
	run->model_dir = cli_model_dir(run->mo.model, usage);
	run->dev = mcli_device(run->mo.device, usage);
	return cmd;
}

/* Loads the model and its forward context; opens the per-row output with
 * its header when asked for. */
static void run_open(eval_run *run, int cmd)
{
	static const char *const per_header[N_CMD] = {
		[CMD_WIKITEXT] = "passage\tk\tmethod\tnll\ttime_ms\tdocs\n",
		[CMD_ATTRIBUTION] = "query_id\tmethod\tpick\tcorrect\tn_passages\n",
		[CMD_MSMARCO] = "query_id\tmethod\tnll\ttime_ms\tn_passages\n",
		[CMD_RECALL] = "id\tcontext\tk\tgold_pos\tmethod\tem\tnll\ttime_ms\n",
	};
	run->model = mcli_load_model(run->model_dir, 0, run->mo.weights_dtype, usage);
	run->fctx = mcli_forward_ctx(run->model, run->model_dir, run->dev, run->mo.threads);
	if (!run->per)
		return;
	if (cmd == CMD_TIMING || cmd == CMD_OPENBOOKQA)
		cli_usage(usage, "%s has no per-row output", commands[cmd]);
	if (!(run->per_out = open_memstream(&run->per_buf, &run->per_len)))
		cli_die("out of memory");
	fputs(per_header[cmd], run->per_out);
}

/* Writes the per-row output, if any, and frees the model. */
static void run_close(eval_run *run)
{
	if (run->per_out) {
		if (fclose(run->per_out))
			cli_die("out of memory");
		FILE *f = cli_out_open(run->per);
		if (fwrite(run->per_buf, 1, run->per_len, f) != run->per_len)
			cli_die("%s: write error: %s", run->per, strerror(errno));
		cli_out_close(f);
		free(run->per_buf);
	}
	ss_forward_ctx_free(run->fctx);
	ss_model_free(run->model);
	ss_device_close(run->dev);
	free(run->lengths);
	free(run->ks);
	for (int i = 0; i < run->n_indexes; i++)
		free(run->indexes[i]);
	free(run->indexes);
}

int main(int argc, char **argv)
{
	cli_init("ss-eval");
	eval_run run = { .passages = PASSAGES_DEFAULT, .min_tokens = MIN_TOKENS_DEFAULT,
			 .kmax = KMAX_DEFAULT, .seed = 1, .usage = usage };
	int cmd = parse_args(argc, argv, &run);
	run_open(&run, cmd);
	switch (cmd) {
	case CMD_WIKITEXT: eval_wikitext(&run); break;
	case CMD_ATTRIBUTION: eval_attribution(&run); break;
	case CMD_MSMARCO: eval_msmarco(&run); break;
	case CMD_OPENBOOKQA: eval_openbookqa(&run); break;
	case CMD_RECALL: eval_recall(&run); break;
	default: eval_timing(&run); break;
	}
	run_close(&run);
	return 0;
}
