/*
 * tools/retrieve.h — PRIVATE to ss-retrieve (tools/ss-retrieve.c and its
 * retrieve_*.c, in the tools' helper archive): what its files share.
 *   ss-retrieve.c       the command, its options and their checks, help, main
 *   retrieve_build.c    add/build (with --state-url, --hits), delete, merge
 *   retrieve_inspect.c  the --index list (shards, @FILE) opened as one; list,
 *                       show, stats
 *   retrieve_query.c    query: one query's hits to states (copied, or
 *                       recomputed with --model), --ids lines, reranking
 *   retrieve_batch.c    batch queries from stdin (plain or JSON lines)
 * The usage line and the small output helpers are static here, so that
 * every file prints them as the one file did.
 * ref: man/ss-retrieve.1; the index: lib/ss_index.h.
 */
#ifndef SS_TOOLS_RETRIEVE_H
#define SS_TOOLS_RETRIEVE_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "model_cli.h"
#include "rerank.h"
#include "ss.h"

/* The usage lines, for cli_usage and the help. */
static const char *const usage_line =
	"ss-retrieve add|build --index DB [--state-budget BYTES [--hits FILE]]\n"
	"                   [--stateless --model DIR [--state-dtype T]] [--state-url PATH=URL]...\n"
	"                   [-q|-v] [STREAM...]\n"
	"       ss-retrieve query --index DB... [-k K] [--exclude ID]... [--query TEXT]\n"
	"                   [--ids [--text] [--json]] [--order best-last|best-first]\n"
	"                   [-o FILE | --out-dir DIR] [--empty-ok] [--k1 K1] [--b B] [-q|-v]\n"
	"                   [--operator or|and] [--proximity on|off] [--literal]\n"
	"                   [--model DIR [--device D] [--threads N] [--weights-dtype T]\n"
	"                   [--deterministic] [--rerank N [--rerank-score ll|entropy]\n"
	"                   [--rerank-template T] [--tokenizer FILE]]] [--http-timeout S]\n"
	"                   [--http-retries N]\n"
	"       ss-retrieve list|stats --index DB... [--json]\n"
	"       ss-retrieve show --index DB... [--json] ID...\n"
	"       ss-retrieve delete --index DB [-q|-v] ID...\n"
	"       ss-retrieve merge -o OUT.db [-q|-v] DB...";

/* add --stateless: the model DIR's fingerprint and the recompute dtype. */
typedef struct {
	const char *model; /* NULL: not --stateless */
	ss_dtype dtype;
} stateless_opts;

/* query: its options, and what it loads and counts as it runs (the model
 * of --model, the reranker). */
typedef struct {
	int k;
	const char **exclude; /* from the command line */
	size_t n_exclude;
	int ids, json, text;
	int best_first; /* --order best-first */
	const char *db;
	const char *out, *out_dir;
	FILE *text_out; /* --ids destination */
	int empty_ok;
	unsigned long long n_empty; /* queries that matched nothing */
	double k1, b; /* BM25 parameters (ss_index_set_bm25) */
	unsigned qflags; /* SS_INDEX_QUERY_* (--operator, --proximity) */
	/* Recompute (--model): the model, loaded at the first stateless hit. */
	cli_model_opts *mo; /* NULL: no --model */
	int deterministic;
	ss_model *m;
	ss_device *dev;
	ss_forward_ctx *fwd;
	ss_state_dims dims;
	double load_s, recompute_s;
	long long n_recomputed, n_recomputed_tokens;
	/* --rerank: the reranker, made with the model (rerank.h) */
	rerank_opts rr;
	reranker rk;
	ss_tokenizer *tok;
	double *rr_scores; /* [rr.n] the kept hits' rerank scores */
	double http_timeout; /* --http-timeout, --http-retries (ss_index_set_http) */
	int http_retries;
} qopts;


/* ------------------------------------------------------ retrieve_build.c */

/* add --state-url PATH=URL (the option's argument), kept in the order
 * given; a malformed one is a usage error (exit 2). */
void retrieve_state_url_add(const char *arg);
/* add/build: indexes the streams inputs[0..n_inputs) into db in one
 * transaction; budget: --state-budget bytes (-1: none), hits: --hits FILE
 * (NULL: none), so: --stateless. Returns 0; dies (exit 1) on failure,
 * leaving db as it was. */
int retrieve_build(const char *db, char **inputs, int n_inputs, int64_t budget, const char *hits,
		   const stateless_opts *so);
/* delete: removes the documents ids[0..n_ids) (sorted in place) from db,
 * all or none. Returns 0; dies on failure. */
int retrieve_delete(const char *db, char **ids, int n_ids);
/* merge: the indexes args[0..n_args) (@FILE lists expanded) into a new
 * index `out`, whole or not at all. Returns 0; dies on failure. */
int retrieve_merge(const char *out, char **args, int n_args);

/* ---------------------------------------------------- retrieve_inspect.c */

/* The --index paths (shards), @FILE lists expanded, in the order given. */
extern char **retrieve_dbs;
extern int retrieve_n_dbs;
/* Adds --index's argument (a path, or @FILE) to retrieve_dbs. */
void retrieve_index_add(const char *arg);
/* The indexes of retrieve_dbs opened as one (ss_index_open_shards); db
 * names them in errors. Dies on failure; the caller closes it. */
ss_index *retrieve_open(const char *db);
/* list, show (ids[0..n_ids), every one checked before any is printed),
 * stats: to stdout, JSON lines with json. Return 0; die on failure. */
int retrieve_list(const char *db, int json);
int retrieve_show(const char *db, char **ids, int n_ids, int json);
int retrieve_stats(const char *db, int json);

/* ------------------------------------------------------ retrieve_query.c */

/* query: --query's one query (query not NULL), else a batch from stdin, on
 * the indexes of retrieve_dbs (named db in messages). Returns 0, or
 * CLI_EXIT_FAIL after reporting (or when a query matched nothing without
 * --empty-ok); dies on what no query survives. */
int retrieve_query(const char *db, qopts *o, const char *query);
/* Runs one query: qid NULL for --query, else the batch query's id (its
 * output DIR/qid.states, its messages prefixed "query QID: "); the top k
 * hits, exclude[0..n_exclude) left out. Returns 0, or 1 after reporting. */
int retrieve_run_query(ss_index *ix, qopts *o, const char *qid, const char *text, int k,
		       const char **exclude, size_t n_exclude);

/* ------------------------------------------------------ retrieve_batch.c */

/* Batch mode: one query per line of stdin, run by retrieve_run_query.
 * Returns 0, or 1 when a query failed or the batch was refused. */
int retrieve_run_batch(ss_index *ix, qopts *o);

/* One batch query, parsed from its JSON line. */
typedef struct {
	cJSON *j;             /* the parsed line: owns the strings below */
	char qid_buf[64];
	const char *qid;      /* "id" (string, or number as %.17g), else the line number */
	const char *text;     /* "query" */
	int k;                /* "k", else the -k default */
	const char **exclude; /* command-line excludes, then "exclude" (malloc'ed) */
	size_t n_exclude;
} batch_query;

/* Parses batch line `lineno` (len bytes, a JSON object) into *b, its
 * excludes after o's: returns NULL (free b with retrieve_batch_query_free),
 * or why it is not a query (one line; b is then freed). */
const char *retrieve_batch_parse(const char *line, size_t len, unsigned long long lineno, const qopts *o,
				 batch_query *b);
void retrieve_batch_query_free(batch_query *b);

/* Prints j as one JSON line to f and frees it. */
static inline void json_line(FILE *f, cJSON *j)
{
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;
	if (!s)
		cli_die("out of memory");
	fprintf(f, "%s\n", s);
	cJSON_free(s);
	cJSON_Delete(j);
}

/* Adds s[0..len) to j as the string `key` (len (size_t)-1: strlen(s)),
 * valid UTF-8 whatever s holds (ss_escape's SS_ESC_JSON). */
static inline void json_add_str(cJSON *j, const char *key, const char *s, size_t len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	if (!m)
		cli_die("out of memory");
	ss_json_str(m, s, len);
	if (fclose(m) != 0 || !cJSON_AddRawToObject(j, key, buf))
		cli_die("out of memory");
	free(buf);
}

/* Writes s to f as a TSV field (ss_escape's SS_ESC_PLAIN). */
static inline void tsv_field(FILE *f, const char *s)
{
	ss_escape(f, s, (size_t)-1, SS_ESC_PLAIN);
}

#endif /* SS_TOOLS_RETRIEVE_H */
