/*
 * ss-retrieve — the database of states: builds a BM25 index over document
 * text whose entries point at state records, and answers queries with the
 * states of the top-k documents (most relevant last). Needs no model, but
 * for the documents without a stored state (a --state-budget dropped it, or
 * add --stateless indexed the text alone): query --model re-encodes those
 * from their stored tokens.
 * This file: the command, its options and their checks, the help, main;
 * each command in its retrieve_*.c (tools/retrieve.h lists them).
 * See man/ss-retrieve.1; the index itself: lib/ss_index.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "model_cli.h"
#include "rerank.h"
#include "retrieve.h"
#include "ss.h"

/* --help after its usage line, up to the common options. */
static const char help_text[] =
	"Builds and queries a BM25 index of documents whose entries point at their\n"
	"states (byte offsets in state streams).\n\n"
	"add (build is the same command): reads token streams (document text) and\n"
	"  state streams (states), in any order and mix, and adds the documents to DB\n"
	"  in one transaction (created when absent; documents with an id already\n"
	"  indexed are replaced; no rebuild). A document needs both a token record\n"
	"  and a state record; one with only one of them is left out with a warning.\n"
	"  State streams must be regular files. With --state-budget, only the states\n"
	"  the budget keeps stay stored; the other documents become stateless (their\n"
	"  tokens stay in DB; with no STREAM, only the budget is applied).\n"
	"  With --stateless, a document with text but no state becomes stateless\n"
	"  instead of being left out (a corpus indexed by its text alone).\n"
	"query: writes the states of the top K documents as a state stream, most\n"
	"  relevant LAST (--order best-first: first), each annotated with its rank\n"
	"  (1 = best) and score (BM25); the stored records are copied as they are,\n"
	"  stateless documents re-encoded from their tokens (--model DIR).\n"
	"  With --query TEXT: one query, to stdout or -o FILE. Without: one query per\n"
	"  line on stdin, plain text, or JSON {\"id\": ID, \"query\": TEXT, \"exclude\":\n"
	"  [ID...], \"k\": K} when the line starts with '{'; one output file per query\n"
	"  in --out-dir DIR (DIR/ID.states), or --ids lines.\n"
	"list: one line per document: id, tokens, state file, byte offset, length.\n"
	"show: each document's metadata and its text (as indexed).\n"
	"stats: documents, terms, tokens, bytes and state files of the index.\n"
	"delete: removes documents in one transaction (an unknown id: none removed).\n"
	"merge: combines the indexes DB... (shards) into one new index OUT.db, whose\n"
	"  queries give what querying the shards together gives (written whole or\n"
	"  not at all).\n\n"
	"options:\n"
	"  --index DB       the index file (SQLite). query, list, show, stats: repeat\n"
	"                   it, or give @FILE (one index path a line, relative to\n"
	"                   FILE's directory; # comments), to use several indexes\n"
	"                   (shards) as one: ranked exactly as one index holding\n"
	"                   all their documents (their N, avgdl, df summed); a\n"
	"                   document id in two shards is an error\n"
	"  -k K             documents per query (default 10)\n"
	"  --query TEXT     one query given on the command line\n"
	"  --exclude ID     leave document ID out of every result (repeatable)\n"
	"  --ids            print rank, id and score as TSV (batch: query id first)\n"
	"  --text           with --ids: each document's text too (last field)\n"
	"  --order ORDER    best-last (default: the order ss-compose wants) or\n"
	"                   best-first (head -1 is the top hit)\n"
	"  --json           JSON lines instead of TSV (--ids, list, show, stats)\n"
	"  --out-dir DIR    batch: write DIR/<query id>.states per query\n"
	"  --empty-ok       exit 0 when a query matches no document (default: 1,\n"
	"                   as grep; the output is written, empty, either way)\n"
	"  --operator OP    what a document must hold of the query's words and\n"
	"                   \"quoted phrases\": or (any: default), and (all)\n"
	"  --literal        a double quote is a separator, not a phrase's (for\n"
	"                   queries cut from text)\n"
	"  --proximity on|off\n"
	"                   add BM25TP's score for query words standing close\n"
	"                   together (default off)\n"
	"  --k1 K1, --b B   BM25's term-frequency saturation k1 (>= 0, default 1.2)\n"
	"                   and length normalisation b (0..1, default 0.75)\n"
	"  --state-budget BYTES\n"
	"                   add/build: keep at most BYTES (k/M/G) of stored states:\n"
	"                   by --hits counts, then the longest documents (the\n"
	"                   costliest to recompute), then by id; each state kept\n"
	"                   while it fits, the rest dropped (0: none kept)\n"
	"  --hits FILE      a query log for --state-budget: one document id per\n"
	"                   line, once per retrieval (e.g. cut -f 3 of batch --ids)\n"
	"  --stateless      add/build: index documents by their text alone; query\n"
	"                   --model DIR recomputes their states (adding their states\n"
	"                   later stores them). Needs --model DIR: their model\n"
	"  --state-dtype T  with --stateless: the dtype to recompute in: f32\n"
	"                   (default, as ss-encode), f16, bf16, q8, q4\n"
	"  --rerank N       query: take BM25's top N (N >= K) and return the top K\n"
	"                   of them by the --model's score of the query from each\n"
	"                   one's state (one batch of N); rank is the new order,\n"
	"                   score stays BM25's, rerank_score is the model's (an\n"
	"                   extra --ids column and annotation key)\n"
	"  --rerank-score S ll (default): the log-likelihood of the query after the\n"
	"                   template's text before it; entropy: minus the entropy\n"
	"                   of the next token after the whole template\n"
	"  --rerank-template T\n"
	"                   the text scored, {query} standing for the query (its\n"
	"                   double quotes left out unless --literal); default\n"
	"                   \"\\n{query}\": the query on a line after the document\n"
	"  --state-url PATH=URL\n"
	"                   add/build: the state stream PATH (a STREAM operand) is\n"
	"                   served at URL (http:// or https://): its records are\n"
	"                   read here for their offsets and indexed at URL, which\n"
	"                   query fetches them from by range requests. PATH ending\n"
	"                   in '/': every STREAM under it, at URL + the rest of its\n"
	"                   name (repeatable)\n"
	"  --http-timeout S query: seconds to connect, or without a byte, before a\n"
	"                   fetch of a state over HTTP fails (default 30)\n"
	"  --http-retries N query: tries again after a transient failure (HTTP 5xx,\n"
	"                   408, 429, a connection refused, reset or cut), after\n"
	"                   0.25 s, 0.5 s, 1 s ... (default 3)\n";

static void help(void)
{
	printf("usage: %s\n\n", usage_line);
	fputs(help_text, stdout);
	cli_common_help(19, CLI_HELP_OUT | CLI_HELP_BASE, NULL);
	fputs("(-o: query's output, default stdout)\n"
	      "query, to recompute the states of stateless documents (the model is loaded\n"
	      "once, at the first such hit):\n",
	      stdout);
	cli_common_help(21, CLI_HELP_MODEL, NULL);
	fputs("  --deterministic    the same state bytes as ss-encode --deterministic (CPU)\n"
	      "Here --model has no default: without it a stateless hit is an error; and\n"
	      "--tokenizer goes with --rerank only (the tokens are stored). A recomputed state is the\n"
	      "record ss-encode --model DIR wrote for the document's tokens, in the dtype\n"
	      "of the state the budget dropped (or add's --state-dtype).\n",
	      stdout);
	exit(0);
}

/* The command and its options. */
typedef struct {
	const char *cmd;
	int build, query_cmd, list, show, stats, del, merge; /* which command */
	const char *db, *query, *hits;
	int64_t budget; /* --state-budget, -1: none */
	int stateless;  /* --stateless */
	const char *state_dtype; /* --state-dtype, NULL: not given */
	ss_dtype sdtype; /* --state-dtype's, default ss-encode's (f32) */
	cli_model_opts mo;
	qopts o;
} retrieve_args;

/* -h and -V anywhere before "--", then the command argv[1]. */
static void parse_command(int argc, char **argv, retrieve_args *a)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			help();
		if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version"))
			cli_version();
	}
	static const char *const cmds = "build, add, query, list, show, stats, delete or merge";
	if (argc < 2)
		cli_usage(usage_line, "missing command: %s", cmds);
	const char *cmd = a->cmd = argv[1];
	/* build and add are one command: add to DB, creating it when absent. */
	a->build = !strcmp(cmd, "build") || !strcmp(cmd, "add");
	a->query_cmd = !strcmp(cmd, "query");
	a->list = !strcmp(cmd, "list"), a->show = !strcmp(cmd, "show");
	a->stats = !strcmp(cmd, "stats"), a->del = !strcmp(cmd, "delete"), a->merge = !strcmp(cmd, "merge");
	if (!a->build && !a->query_cmd && !a->list && !a->show && !a->stats && !a->del && !a->merge)
		cli_usage(usage_line, "unknown command '%s' (%s)", cmd, cmds);
}

enum { O_INDEX = 256, O_QUERY, O_EXCLUDE, O_IDS, O_JSON, O_OUTDIR, O_EMPTYOK, O_K1, O_B, O_TEXT, O_ORDER,
       O_OPERATOR, O_PROXIMITY, O_LITERAL, O_BUDGET, O_HITS, O_DET, O_STATELESS, O_SDTYPE, O_ADD_MODEL,
       O_RERANK, O_RERANK_SCORE, O_RERANK_TEMPLATE,
       O_STATE_URL, O_HTTP_TIMEOUT, O_HTTP_RETRIES };

/* Option c's argument into a, refused when not the command's. */
static void set_opt(retrieve_args *a, int c, char **argv)
{
	qopts *o = &a->o;
	/* Beside --index, the commands other than query take only --json
	 * (list, show, stats), build its budget and --stateless. */
	int build_opt = c == O_BUDGET || c == O_HITS || c == O_STATELESS || c == O_SDTYPE || c == O_ADD_MODEL ||
			c == O_STATE_URL;
	if (a->merge)
		cli_usage(usage_line, "option not valid for merge: %s (merge -o OUT DB...)", argv[optind - 1]);
	if (!(c == O_INDEX || (a->query_cmd && !build_opt) || (a->build && build_opt) ||
	      (c == O_JSON && !a->build && !a->del)))
		/* the option, not its argument when that came as the next word */
		cli_usage(usage_line, "option not valid for %s: %s", a->cmd,
			  optarg && optind >= 2 && argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1]);
	switch (c) {
	case O_INDEX:
		retrieve_index_add(optarg);
		a->db = optarg;
		break;
	case O_QUERY: a->query = optarg; break;
	case O_EXCLUDE: o->exclude[o->n_exclude++] = optarg; break;
	case O_IDS: o->ids = 1; break;
	case O_JSON: o->json = 1; break;
	case O_TEXT: o->text = 1; break;
	case O_ORDER:
		if (strcmp(optarg, "best-first") && strcmp(optarg, "best-last"))
			cli_usage(usage_line, "--order: '%s' is neither best-first nor best-last", optarg);
		o->best_first = !strcmp(optarg, "best-first");
		break;
	case O_OUTDIR: o->out_dir = optarg; break;
	case O_EMPTYOK: o->empty_ok = 1; break;
	case O_K1: o->k1 = cli_double("--k1", optarg, 0, 1000, usage_line); break;
	case O_B: o->b = cli_double("--b", optarg, 0, 1, usage_line); break;
	case O_OPERATOR:
		if (strcasecmp(optarg, "or") && strcasecmp(optarg, "and"))
			cli_usage(usage_line, "--operator: '%s' is neither or nor and", optarg);
		o->qflags = (o->qflags & ~SS_INDEX_QUERY_ALL) | (strcasecmp(optarg, "and") ? 0 : SS_INDEX_QUERY_ALL);
		break;
	case O_LITERAL: o->qflags &= ~SS_INDEX_QUERY_PHRASES; break;
	case O_PROXIMITY:
		if (strcmp(optarg, "on") && strcmp(optarg, "off"))
			cli_usage(usage_line, "--proximity: '%s' is neither on nor off", optarg);
		o->qflags = (o->qflags & ~SS_INDEX_QUERY_PROXIMITY) | (strcmp(optarg, "on") ? 0 : SS_INDEX_QUERY_PROXIMITY);
		break;
	case 'k': o->k = (int)cli_long("-k", optarg, 1, 1000000, usage_line); break;
	case O_BUDGET:
		/* 0 is a budget (no state stored), which cli_size refuses */
		a->budget = strcmp(optarg, "0") ? (int64_t)cli_size(optarg) : 0;
		if (a->budget == 0 && strcmp(optarg, "0"))
			cli_usage(usage_line, "--state-budget: '%s' is not a size (bytes, with optional k/M/G)",
				  optarg);
		break;
	case O_HITS: a->hits = optarg; break;
	case O_DET: o->deterministic = 1; break;
	case O_STATELESS: a->stateless = 1; break;
	case O_SDTYPE:
		a->state_dtype = optarg;
		a->sdtype = (ss_dtype)cli_dtype("--state-dtype", optarg, SS_DTYPE_STATES, usage_line);
		break;
	case O_ADD_MODEL: a->mo.model = optarg; break;
	case O_RERANK:
	case O_RERANK_SCORE:
	case O_RERANK_TEMPLATE: rerank_parse_opt(&o->rr, c - O_RERANK, optarg, usage_line); break;
	case O_STATE_URL: retrieve_state_url_add(optarg); break;
	case O_HTTP_TIMEOUT: o->http_timeout = cli_double("--http-timeout", optarg, 0.001, 86400, usage_line); break;
	case O_HTTP_RETRIES: o->http_retries = (int)cli_long("--http-retries", optarg, 0, 100, usage_line); break;
	}
}

/* Reads the options after the command into a, and checks those every
 * command shares. */
static void parse_opts(int argc, char **argv, retrieve_args *a)
{
	/* add's --model (for --stateless) heads the list, which query gets
	 * without it: query's --model is cli_getopt's, with the model options. */
	static const struct option longs[] = {
		{ "model", required_argument, 0, O_ADD_MODEL },
		{ "index", required_argument, 0, O_INDEX },
		{ "query", required_argument, 0, O_QUERY },
		{ "exclude", required_argument, 0, O_EXCLUDE },
		{ "ids", no_argument, 0, O_IDS },
		{ "json", no_argument, 0, O_JSON },
		{ "out-dir", required_argument, 0, O_OUTDIR },
		{ "empty-ok", no_argument, 0, O_EMPTYOK },
		{ "k1", required_argument, 0, O_K1 },
		{ "b", required_argument, 0, O_B },
		{ "operator", required_argument, 0, O_OPERATOR },
		{ "proximity", required_argument, 0, O_PROXIMITY },
		{ "literal", no_argument, 0, O_LITERAL },
		{ "text", no_argument, 0, O_TEXT },
		{ "order", required_argument, 0, O_ORDER },
		{ "state-budget", required_argument, 0, O_BUDGET },
		{ "hits", required_argument, 0, O_HITS },
		{ "deterministic", no_argument, 0, O_DET },
		{ "stateless", no_argument, 0, O_STATELESS },
		{ "state-dtype", required_argument, 0, O_SDTYPE },
		{ "rerank", required_argument, 0, O_RERANK },
		{ "rerank-score", required_argument, 0, O_RERANK_SCORE },
		{ "rerank-template", required_argument, 0, O_RERANK_TEMPLATE },
		{ "state-url", required_argument, 0, O_STATE_URL },
		{ "http-timeout", required_argument, 0, O_HTTP_TIMEOUT },
		{ "http-retries", required_argument, 0, O_HTTP_RETRIES },
		{ 0, 0, 0, 0 },
	};
	qopts *o = &a->o;
	*o = (qopts){ .k = 10, .k1 = 1.2, .b = 0.75, .qflags = SS_INDEX_QUERY_PHRASES, .http_timeout = 30,
		      .http_retries = 3 };
	a->budget = -1;
	a->sdtype = SS_DTYPE_F32;
	o->exclude = calloc((size_t)argc, sizeof *o->exclude);
	if (!o->exclude)
		cli_die("out of memory");
	optind = 2;
	/* The model options are query's (recompute); elsewhere they are
	 * unknown options. */
	const cli_options co = { "k:", a->build ? longs : longs + 1, usage_line, help, &o->out,
				 a->query_cmd ? &a->mo : NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1)
		set_opt(a, c, argv);
	if (a->hits && a->budget < 0)
		cli_usage(usage_line, "--hits goes with --state-budget");
	if (a->stateless && !a->mo.model)
		cli_usage(usage_line, "--stateless needs --model DIR (the model that query recomputes its states with)");
	if (a->build && !a->stateless && (a->mo.model || a->state_dtype))
		cli_usage(usage_line, "%s goes with --stateless", a->mo.model ? "--model" : "--state-dtype");
	if (a->mo.model)
		o->mo = &a->mo;
	else if (a->query_cmd && (a->mo.tokenizer || a->mo.weights_dtype ||
				  strcmp(a->mo.device, "auto") || o->deterministic))
		cli_usage(usage_line, "--device, --threads, --weights-dtype and --deterministic go with --model");
	if (a->mo.tokenizer && !o->rr.n)
		cli_usage(usage_line, "--tokenizer goes with --rerank (query recomputes from the stored tokens, it "
			  "needs no tokenizer)");
	if (!a->query_cmd && !a->merge && o->out)
		cli_usage(usage_line, "option not valid for %s: -o", a->cmd);
	if (a->merge) {
		if (!o->out || !strcmp(o->out, "-"))
			cli_usage(usage_line, "merge needs -o OUT.db (a file)");
		return;
	}
	if (!a->db)
		cli_usage(usage_line, "--index DB is required");
	if (retrieve_n_dbs > 1 && (a->build || a->del))
		cli_usage(usage_line, "%s takes one --index, not %d", a->cmd, retrieve_n_dbs);
}

/* query's option checks: what goes with --ids, --query, --out-dir, -o. */
static void check_query(const retrieve_args *a)
{
	const qopts *o = &a->o;
	if (o->json && !o->ids)
		cli_usage(usage_line, "--json goes with --ids");
	if (o->text && !o->ids)
		cli_usage(usage_line, "--text goes with --ids");
	if (a->query && o->out_dir)
		cli_usage(usage_line, "--out-dir is for batch queries (stdin); with --query use -o FILE");
	if (!a->query && !o->ids && !o->out_dir)
		cli_usage(usage_line, "batch queries (stdin) need --out-dir DIR or --ids");
	if (!a->query && o->out && !o->ids)
		cli_usage(usage_line, "batch queries write one file per query: use --out-dir DIR, not -o");
	if (o->ids && o->out_dir)
		cli_usage(usage_line, "--ids prints to stdout or -o FILE, not --out-dir");
	if (o->rr.n && !a->mo.model)
		cli_usage(usage_line, "--rerank needs --model DIR (the model that scores the candidates)");
	if (o->rr.n && o->rr.n < o->k)
		cli_usage(usage_line, "--rerank %d is below -k %d: it reranks N >= K candidates", o->rr.n, o->k);
	if (!o->rr.n && (o->rr.tmpl || o->rr.kind != RERANK_LL))
		cli_usage(usage_line, "--rerank-score and --rerank-template go with --rerank N");
}

int main(int argc, char **argv)
{
	cli_init("ss-retrieve");
	retrieve_args a = { 0 };
	parse_command(argc, argv, &a);
	parse_opts(argc, argv, &a);
	if (a.merge) {
		free(a.o.exclude);
		return retrieve_merge(a.o.out, argv + optind, argc - optind);
	}
	/* Messages name the index, or for several the count (an error of
	 * one shard names that shard). */
	char label[64];
	snprintf(label, sizeof label, "%d shards", retrieve_n_dbs);
	const char *db = retrieve_n_dbs == 1 ? a.db : label;
	if (retrieve_n_dbs == 1)
		db = retrieve_dbs[0];
	if (a.build || a.del || a.show) {
		free(a.o.exclude);
		if ((a.del || a.show) && optind == argc)
			cli_usage(usage_line, "%s: no document ID given", a.cmd);
		if (a.del)
			return retrieve_delete(db, argv + optind, argc - optind);
		if (a.show)
			return retrieve_show(db, argv + optind, argc - optind, a.o.json);
		const stateless_opts so = { a.stateless ? a.mo.model : NULL, a.sdtype };
		return retrieve_build(db, argv + optind, argc - optind, a.budget, a.hits, &so);
	}
	if (optind < argc)
		cli_usage(usage_line, "unexpected argument '%s'", argv[optind]);
	if (a.list || a.stats) {
		free(a.o.exclude);
		return a.list ? retrieve_list(db, a.o.json) : retrieve_stats(db, a.o.json);
	}
	check_query(&a);
	a.o.db = db;
	int rc = retrieve_query(db, &a.o, a.query);
	free(a.o.exclude);
	return rc;
}
