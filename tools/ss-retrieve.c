/*
 * ss-retrieve — the database of states: builds a BM25 index over document
 * text whose entries point at state records, and answers queries with the
 * states of the top-k documents (most relevant last). Needs no model, but
 * for the documents without a stored state (a --state-budget dropped it, or
 * add --stateless indexed the text alone): query --model re-encodes those
 * from their stored tokens.
 * See man/ss-retrieve.1; the index itself: lib/ss_index.h.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "defaults.h"
#include "model_cli.h"
#include "rerank.h"
#include "ss.h"

static const char *usage_line =
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

static void help(void)
{
	printf("usage: %s\n\n", usage_line);
	fputs("Builds and queries a BM25 index of documents whose entries point at their\n"
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
	      "                   0.25 s, 0.5 s, 1 s ... (default 3)\n"
	      ,
	      stdout);
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

/* Prints j as one JSON line to f and frees it. */
static void json_line(FILE *f, cJSON *j)
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
static void json_add_str(cJSON *j, const char *key, const char *s, size_t len)
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
static void tsv_field(FILE *f, const char *s)
{
	ss_escape(f, s, (size_t)-1, SS_ESC_PLAIN);
}

/* ------------------------------------------------------------------ build */

/* ctx: [0] bytes of the inputs before this one, [1] all inputs' (0: unknown), [2] the start. */
static void build_progress(void *ctx, const char *path, const ss_index_add_stats *st)
{
	const double *pg = ctx;
	if ((st->n_text + st->n_states) % 512)
		return;
	double el = cli_now() - pg[2];
	cli_progress_of(pg[0] + (double)st->bytes, pg[1], "%s: %llu token records, %llu state records, %.3g MB/s",
			path, (unsigned long long)st->n_text, (unsigned long long)st->n_states,
			el > 0 ? (pg[0] + (double)st->bytes) / 1e6 / el : 0.0);
}

static void build_note(void *ctx, const char *id, int dropped, const char *why)
{
	(void)ctx;
	(void)dropped;
	cli_warn("document %s %s", id, why);
}

/* --hits FILE: one document id per line, each line one retrieval. An
 * error closes ix (rolling the build back) and exits. */
static void read_hits(ss_index *ix, const char *db, const char *path)
{
	char em[SS_ERRMSG_MAX], *line = NULL;
	size_t cap = 0;
	long n;
	unsigned long long lineno = 0;
	FILE *f = cli_open_regular(path);
	while ((n = cli_getline(&line, &cap, f, 1 << 20)) >= 0 || n == -2) {
		lineno++;
		const char *why = n == -2 ? "longer than 1 MiB: not a document id"
			: memchr(line, 0, (size_t)n) ? "a NUL byte: not a document id" : NULL;
		if (why) {
			ss_index_close(ix);
			cli_die("%s: line %llu: %s", path, lineno, why);
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n > 0 && ss_index_add_hits(ix, line, 1, em)) {
			ss_index_close(ix);
			cli_die("%s: %s", db, em);
		}
	}
	if (n == -3) {
		int e = errno;
		ss_index_close(ix);
		cli_die("%s: read error: %s", path, strerror(e));
	}
	if (f != stdin)
		fclose(f);
	free(line);
}

/* add --state-url PATH=URL, in the order given. */
static char **url_path, **url_to;
static int n_urls;

static void state_url_add(const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !ss_url_is_http(eq + 1))
		cli_usage(usage_line, "--state-url: '%s' is not PATH=URL (an http:// or https:// URL)", arg);
	url_path = realloc(url_path, (size_t)(n_urls + 1) * sizeof *url_path);
	url_to = realloc(url_to, (size_t)(n_urls + 1) * sizeof *url_to);
	if (!url_path || !url_to || !(url_path[n_urls] = strndup(arg, (size_t)(eq - arg))) ||
	    !(url_to[n_urls] = strdup(eq + 1)))
		cli_die("out of memory");
	n_urls++;
}

/* The URL state stream `path` is indexed at (malloc'ed), or NULL: the
 * last --state-url naming it, or the folder (PATH/) it lies under. used[i]
 * is set for the mapping that applied. */
static char *state_url_of(const char *path, int *used)
{
	for (int i = n_urls - 1; i >= 0; i--) {
		size_t n = strlen(url_path[i]);
		int dir = n && url_path[i][n - 1] == '/';
		char *u = NULL;
		if (!strcmp(path, url_path[i]))
			u = strdup(url_to[i]);
		else if (dir && !strncmp(path, url_path[i], n) && path[n]) {
			if (asprintf(&u, "%s%s", url_to[i], path + n) < 0)
				u = NULL;
		} else
			continue;
		if (!u)
			cli_die("out of memory");
		used[i] = 1;
		return u;
	}
	return NULL;
}

/* add --stateless: the model DIR's fingerprint and the recompute dtype. */
typedef struct {
	const char *model; /* NULL: not --stateless */
	ss_dtype dtype;
} stateless_opts;

static int cmd_build(const char *db, char **inputs, int n_inputs, int64_t budget, const char *hits,
		     const stateless_opts *so)
{
	char em[SS_ERRMSG_MAX];
	double t0 = cli_now();
	char fp[SS_FINGERPRINT_MAX] = "";
	int32_t vocab = 0;
	if (so->model) {
		/* Before the build's lock: its fingerprint and vocabulary are all
		 * it takes from the model, which has no cheaper way to them than
		 * a load. */
		ss_model *m = mcli_load_model(so->model, SS_MODEL_SKIP_LM_HEAD, NULL, usage_line);
		memcpy(fp, m->fingerprint, sizeof fp);
		vocab = mcli_vocab(m);
		ss_model_free(m);
	}
	ss_index *ix;
	int rc = ss_index_build_open(&ix, db, em);
	if (rc)
		cli_die("%s: %s", db, em);
	if ((budget >= 0 && ss_index_set_state_budget(ix, budget, em)) ||
	    (so->model && (ss_index_set_stateless(ix, fp, ss_dtype_name(so->dtype), em) ||
			   ss_index_set_vocab(ix, vocab, em)))) {
		ss_index_close(ix);
		cli_die("%s: %s", db, em);
	}
	if (hits)
		read_hits(ix, db, hits);
	/* Every --state-url names a STREAM, checked before anything is read. */
	char **urls = calloc((size_t)n_inputs + 1, sizeof *urls);
	int *used = calloc((size_t)n_urls + 1, sizeof *used);
	if (!urls || !used)
		cli_die("out of memory");
	for (int i = 0; i < n_inputs; i++)
		urls[i] = state_url_of(inputs[i], used);
	for (int i = 0; i < n_urls; i++)
		if (!used[i]) {
			ss_index_close(ix);
			cli_usage(usage_line, "--state-url %s=...: no STREAM is %s%s", url_path[i], url_path[i],
				  url_path[i][strlen(url_path[i]) - 1] == '/' ? " or lies under it" : "");
		}
	ss_index_add_stats total = {0};
	uint64_t max_record = cli_max_record();
	double pg[3] = { 0, cli_inputs_size(inputs, n_inputs), t0 };
	cli_progress_begin();
	for (int i = 0; i < n_inputs; i++) {
		ss_index_add_stats st = {0};
		pg[0] = (double)total.bytes;
		rc = ss_index_add_stream_url(ix, inputs[i], urls[i], max_record, &st, build_progress, pg, em);
		free(urls[i]);
		total.n_text += st.n_text;
		total.n_states += st.n_states;
		total.bytes += st.bytes;
		if (rc) {
			ss_index_close(ix); /* rolls the build back: DB stays as it was */
			cli_die("%s: %s", inputs[i], em);
		}
	}
	cli_progress_end();
	free(urls);
	free(used);
	ss_index_build_stats bs;
	rc = ss_index_commit(ix, build_note, NULL, &bs, em);
	ss_index_close(ix);
	if (rc)
		cli_die("%s: %s", db, em);
	if (cli_verbosity >= 2)
		fprintf(stderr,
			"%s: %s: %lld %s (%lld added, %lld replaced, %lld left out) in %.2f s; records "
			"read: %llu token, %llu state\n",
			cli_prog, db, (long long)bs.n_docs, cli_plural((uint64_t)bs.n_docs, "document", "documents"),
			(long long)bs.n_added, (long long)bs.n_replaced,
			(long long)bs.n_dropped, cli_now() - t0, (unsigned long long)total.n_text,
			(unsigned long long)total.n_states);
	if (cli_verbosity >= 2 && budget >= 0)
		fprintf(stderr, "%s: %s: state budget %lld bytes: %lld bytes of states stored, %lld documents "
			"stateless (%lld dropped by this build)\n",
			cli_prog, db, (long long)budget, (long long)bs.state_bytes, (long long)bs.n_stateless,
			(long long)bs.n_dropped_states);
	if (cli_verbosity >= 2 && so->model)
		fprintf(stderr, "%s: %s: %lld %s made stateless (model %s, recomputed in %s)\n", cli_prog, db,
			(long long)bs.n_made_stateless,
			cli_plural((uint64_t)bs.n_made_stateless, "document", "documents"), fp,
			ss_dtype_name(so->dtype));
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* delete: every id or none (one transaction, rolled back at the first
 * unknown id). */
static int cmd_delete(const char *db, char **ids, int n_ids)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (access(db, F_OK) != 0) /* a build open would create it */
		cli_die("%s: %s", db, strerror(errno));
	if (ss_index_build_open(&ix, db, em))
		cli_die("%s: %s", db, em);
	/* Sorted, so that an id given twice is deleted once. */
	qsort(ids, (size_t)n_ids, sizeof *ids, cmp_str);
	for (int i = 0; i < n_ids; i++)
		if ((i == 0 || strcmp(ids[i], ids[i - 1])) && ss_index_delete(ix, ids[i], em)) {
			ss_index_close(ix); /* rolls back the deletes so far */
			cli_die("%s: %s: nothing deleted", db, em);
		}
	ss_index_build_stats bs;
	int rc = ss_index_commit(ix, build_note, NULL, &bs, em);
	ss_index_close(ix);
	if (rc)
		cli_die("%s: %s", db, em);
	if (cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld deleted, %lld left\n", cli_prog, db, (long long)bs.n_deleted,
			(long long)bs.n_docs);
	return 0;
}

/* ------------------------------------------------------------------ inspect */

/* The --index paths (shards), @FILE lists expanded, in the order given. */
static char **dbs;
static int n_dbs;

static void db_add(const char *arg)
{
	cli_index_add(arg, &dbs, &n_dbs);
}

/* The indexes as one (ss_index_open_shards); an error names the shard. */
static ss_index *open_or_die(const char *db)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open_shards(&ix, (const char *const *)dbs, n_dbs, em)) {
		if (n_dbs == 1)
			cli_die("%s: %s", db, em);
		cli_die("%s", em);
	}
	return ix;
}

/* merge: the shards into OUT, whole or not at all. */
static int cmd_merge(const char *out, char **args, int n_args)
{
	char em[SS_ERRMSG_MAX];
	for (int i = 0; i < n_args; i++)
		db_add(args[i]);
	if (!n_dbs)
		cli_usage(usage_line, "merge: no index given");
	for (int i = 0; i < n_dbs; i++)
		cli_out_not_input(out, dbs[i]);
	double t0 = cli_now();
	ss_index_build_stats bs;
	if (ss_index_merge(out, (const char *const *)dbs, n_dbs, &bs, em))
		cli_die("%s", em);
	if (cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld %s from %d %s in %.2f s\n", cli_prog, out, (long long)bs.n_docs,
			cli_plural((uint64_t)bs.n_docs, "document", "documents"), n_dbs,
			n_dbs == 1 ? "index" : "indexes", cli_now() - t0);
	return 0;
}

/* The JSON object of one document's metadata (no text). */
static cJSON *doc_json(const ss_index_doc *d)
{
	cJSON *j = cJSON_CreateObject();
	if (!j)
		cli_die("out of memory");
	json_add_str(j, "id", d->id, (size_t)-1);
	cJSON_AddNumberToObject(j, "n_tokens", (double)d->n_tokens);
	if (d->stateless) {
		cJSON_AddNullToObject(j, "file");
		json_add_str(j, "recompute_dtype", d->dtype ? d->dtype : "", (size_t)-1);
	} else {
		char shown[4096];
		json_add_str(j, "file", ss_url_redact(d->path, shown, sizeof shown), (size_t)-1);
		cJSON_AddNumberToObject(j, "offset", (double)d->offset);
		cJSON_AddNumberToObject(j, "length", (double)d->length);
	}
	json_add_str(j, "fingerprint", d->fingerprint, (size_t)-1);
	if (d->text_tokens >= 0)
		cJSON_AddNumberToObject(j, "text_tokens", (double)d->text_tokens);
	else
		cJSON_AddNullToObject(j, "text_tokens");
	cJSON_AddNumberToObject(j, "text_bytes", (double)d->text_len);
	cJSON_AddNumberToObject(j, "n_terms", (double)d->n_terms);
	cJSON_AddBoolToObject(j, "tokens_stored", d->has_tokens);
	return j;
}

static int list_one(void *ctx, const ss_index_doc *d)
{
	const int *json = ctx;
	if (*json) {
		json_line(stdout, doc_json(d));
		return 0;
	}
	tsv_field(stdout, d->id);
	printf("\t%lld\t", (long long)d->n_tokens);
	char shown[4096];
	/* stateless: "-", offset and length 0; a URL without its credentials */
	tsv_field(stdout, d->stateless ? "-" : ss_url_redact(d->path, shown, sizeof shown));
	printf("\t%llu\t%llu\n", (unsigned long long)d->offset, (unsigned long long)d->length);
	return 0;
}

static int cmd_list(const char *db, int json)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix = open_or_die(db);
	if (ss_index_docs(ix, NULL, list_one, &json, em))
		cli_die("%s: %s", db, em);
	ss_index_close(ix);
	return 0;
}

typedef struct {
	ss_index *ix;
	const char *db;
	int json;
	int n_shown;
} show_ctx;

static int show_one(void *ctx, const ss_index_doc *d)
{
	show_ctx *c = ctx;
	char em[SS_ERRMSG_MAX], *text;
	size_t len;
	if (ss_index_text(c->ix, d->id, &text, &len, em))
		cli_die("%s: %s", c->db, em);
	if (c->json) {
		cJSON *j = doc_json(d);
		if (text)
			json_add_str(j, "text", text, len);
		else
			cJSON_AddNullToObject(j, "text");
		json_line(stdout, j);
	} else {
		/* "key: value" lines, a blank line, the text as it is (an e-mail's
		 * layout); a blank line between documents. Values and text
		 * escaped (ss_escape): none forges a line or a control. */
		if (c->n_shown)
			putchar('\n');
		fputs("id: ", stdout);
		ss_escape(stdout, d->id, (size_t)-1, SS_ESC_PLAIN);
		if (d->stateless) {
			fputs("\nfile: none (stateless: recomputed in ", stdout);
			ss_escape(stdout, d->dtype ? d->dtype : "?", (size_t)-1, SS_ESC_PLAIN);
			fputs(" by query --model)\n", stdout);
		} else {
			char shown[4096];
			fputs("\nfile: ", stdout);
			ss_escape(stdout, ss_url_redact(d->path, shown, sizeof shown), (size_t)-1, SS_ESC_PLAIN);
			printf("\noffset: %llu\nlength: %llu\n", (unsigned long long)d->offset,
			       (unsigned long long)d->length);
		}
		fputs("fingerprint: ", stdout);
		ss_escape(stdout, d->fingerprint, (size_t)-1, SS_ESC_PLAIN);
		printf("\nn_tokens: %lld\n", (long long)d->n_tokens);
		if (d->text_tokens >= 0)
			printf("text_tokens: %lld\n", (long long)d->text_tokens);
		printf("text_bytes: %lld\nn_terms: %lld\n", (long long)d->text_len, (long long)d->n_terms);
		if (text) {
			putchar('\n');
			ss_escape(stdout, text, len, SS_ESC_LAYOUT);
			if (!len || text[len - 1] != '\n')
				putchar('\n');
		} else {
			printf("text: not stored (indexed before the index kept texts: add its token stream again)\n");
		}
	}
	c->n_shown++;
	free(text);
	return 0;
}

static int cmd_show(const char *db, char **ids, int n_ids, int json)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix = open_or_die(db);
	/* Every id first: the output is whole or absent. */
	for (int i = 0; i < n_ids; i++)
		if (ss_index_docs(ix, ids[i], NULL, NULL, em))
			cli_die("%s: %s", db, em);
	show_ctx c = { ix, db, json, 0 };
	for (int i = 0; i < n_ids; i++)
		if (ss_index_docs(ix, ids[i], show_one, &c, em))
			cli_die("%s: %s", db, em);
	ss_index_close(ix);
	return 0;
}

/* stats: where the first stored state is (its file and offset), or the
 * recompute dtype of a stateless document when none is stored. */
typedef struct {
	char *path;
	uint64_t offset;
	char dtype[16];
} first_state;

static int first_state_of(void *ctx, const ss_index_doc *d)
{
	first_state *f = ctx;
	if (d->stateless) {
		if (!f->dtype[0] && d->dtype)
			snprintf(f->dtype, sizeof f->dtype, "%s", d->dtype);
		return 0;
	}
	if (!(f->path = strdup(d->path)))
		cli_die("out of memory");
	f->offset = d->offset;
	return 1;
}

/* The dtype of the index's states: the first stored state record's (read at
 * its offset, metadata only), else the stateless documents' recompute dtype,
 * else "" (an empty index). Every state of an index comes from one model;
 * a later add in another dtype is not looked for. */
static void states_dtype(ss_index *ix, const char *db, char *out, size_t cap)
{
	char em[SS_ERRMSG_MAX] = "";
	first_state f = { 0 };
	int rc = ss_index_docs(ix, NULL, first_state_of, &f, em);
	if (rc < 0)
		cli_die("%s: %s", db, em);
	snprintf(out, cap, "%s", f.dtype);
	if (!f.path)
		return;
	ss_reader *r;
	const ss_record *rec;
	ss_state st = { 0 };
	if (ss_reader_open(&r, f.path, cli_max_record(), em))
		cli_die("%s: state file %s: %s", db, f.path, em);
	if (ss_reader_seek(r, f.offset) || ss_reader_next_meta(r, &rec) != 1 ||
	    ss_record_state_meta(rec, &st, em))
		cli_die("%s: state file %s, byte offset %llu: %s", db, f.path, (unsigned long long)f.offset,
			em[0] ? em : ss_reader_error(r));
	snprintf(out, cap, "%s", ss_dtype_name(st.dtype));
	ss_state_free(&st);
	ss_reader_close(r);
	free(f.path);
}

static int cmd_stats(const char *db, int json)
{
	char em[SS_ERRMSG_MAX], dtype[16];
	ss_index *ix = open_or_die(db);
	ss_index_info in;
	if (ss_index_info_get(ix, &in, em))
		cli_die("%s: %s", db, em);
	states_dtype(ix, db, dtype, sizeof dtype);
	ss_index_close(ix);
	const struct {
		const char *key;
		int64_t v;
	} rows[] = {
		{ "documents", in.n_docs },
		{ "terms", in.n_terms },
		{ "term_occurrences", in.n_doc_terms },
		{ "tokens", in.n_tokens },
		{ "texts_stored", in.n_texts },
		{ "text_bytes", in.text_bytes },
		{ "state_files", in.n_files },
		{ "state_bytes", in.state_bytes },
		{ "stateless", in.n_stateless },
		{ "index_bytes", in.index_bytes },
	};
	cJSON *j = json ? cJSON_CreateObject() : NULL;
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		if (j)
			cJSON_AddNumberToObject(j, rows[i].key, (double)rows[i].v);
		else
			printf("%-17s %lld\n", rows[i].key, (long long)rows[i].v);
	}
	if (j) {
		json_add_str(j, "fingerprint", in.fingerprint, (size_t)-1);
		json_add_str(j, "state_dtype", dtype, (size_t)-1);
		json_line(stdout, j);
	} else {
		printf("%-17s ", "fingerprint");
		ss_escape(stdout, in.fingerprint, (size_t)-1, SS_ESC_PLAIN);
		printf("\n%-17s %s\n", "state_dtype", dtype);
	}
	return 0;
}

/* ------------------------------------------------------------------ query */

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

/* Stateless documents re-encoded per forward call (the memory of this many
 * states). */
#define RECOMPUTE_BATCH 8

/* Loads the --model once (dying on failure, as ss-encode does). */
static void recompute_load(qopts *o)
{
	if (o->fwd)
		return;
	double t0 = cli_now();
	if (o->deterministic && !strcmp(o->mo->device, "auto"))
		o->mo->device = "cpu"; /* only the CPU promises it */
	o->dev = mcli_device(o->mo->device, usage_line);
	/* State extraction never needs an untied lm_head; reranking does. */
	o->m = mcli_load_model(o->mo->model, o->rr.n ? 0 : SS_MODEL_SKIP_LM_HEAD,
			       o->mo->weights_dtype, usage_line);
	ss_model_state_dims(o->m, &o->dims);
	o->fwd = mcli_forward_ctx(o->m, o->mo->model, o->dev, o->mo->threads);
	if (o->deterministic && ss_forward_ctx_set_deterministic(o->fwd, 1))
		cli_die("--deterministic: only the CPU promises it, not --device %s", o->mo->device);
	if (o->rr.n) {
		o->tok = cli_tokenizer(o->mo->tokenizer, o->mo->model);
		rerank_init(&o->rk, &o->rr, o->fwd, o->m, o->tok, (o->qflags & SS_INDEX_QUERY_PHRASES) != 0,
			    usage_line);
		if (!(o->rr_scores = calloc((size_t)o->rr.n, sizeof *o->rr_scores)))
			cli_die("out of memory");
	}
	o->load_s += cli_now() - t0;
}

static void recompute_free(qopts *o)
{
	if (o->rr.n && o->fwd) {
		rerank_free(&o->rk);
		ss_tokenizer_free(o->tok);
		free(o->rr_scores);
	}
	ss_forward_ctx_free(o->fwd);
	ss_device_close(o->dev);
	ss_model_free(o->m);
}

/* Encodes hits h[0..n) (stateless, their tokens fetched with the query)
 * from the zero state in one forward call into st[0..n): the records
 * ss-encode would write (id, the model's fingerprint, n_tokens, the hit's
 * dtype). Returns 0, or 1 after reporting the error, naming the document
 * that failed (st freed). */
static int recompute(qopts *o, const char *label, const ss_index_hit *const *h, int n, ss_state *st)
{
	ss_forward_seq seqs[RECOMPUTE_BATCH];
	char em[SS_ERRMSG_MAX];
	double t0 = cli_now();
	for (int i = 0; i < n; i++) {
		if (ss_state_alloc(&st[i], &o->dims) || !(st[i].id = strdup(h[i]->id)))
			cli_die("out of memory (%d states)", n);
		memcpy(st[i].fingerprint, o->m->fingerprint, SS_FINGERPRINT_MAX);
		st[i].dtype = h[i]->dtype;
		seqs[i] = (ss_forward_seq){ .tokens = h[i]->tokens, .n_tokens = h[i]->n_stored_tokens, .state = &st[i] };
		o->n_recomputed_tokens += h[i]->n_stored_tokens;
	}
	if (ss_forward_prefill(o->fwd, seqs, n, SS_LOGITS_NONE, em)) {
		/* errmsg names the sequence ("sequence I: what"): name its
		 * document instead. */
		int seq = -1, at = 0;
		if (sscanf(em, "sequence %d: %n", &seq, &at) != 1 || at == 0 || seq < 0 || seq >= n)
			seq = -1;
		if (seq >= 0)
			cli_warn("%s%s: document %s: %s", label, o->mo->model, h[seq]->id, em + at);
		else
			cli_warn("%s%s: %s", label, o->mo->model, em);
		for (int i = 0; i < n; i++)
			ss_state_free(&st[i]);
		return 1;
	}
	o->n_recomputed += n;
	o->recompute_s += cli_now() - t0;
	return 0;
}

/* Index in hits[] of the i-th document to write, in the order asked for. */
static int out_index(const qopts *o, int i, int n)
{
	return o->best_first ? i : n - 1 - i;
}

static void print_ids(qopts *o, const char *qid, const ss_index_hit *hits, int n)
{
	/* Same order as the state stream. */
	for (int i = 0; i < n; i++) {
		/* The text was read with the hits (ss_index_set_fetch): of
		 * their snapshot, whatever a build committed since. */
		const ss_index_hit *h = &hits[out_index(o, i, n)];
		if (o->json) {
			cJSON *j = cJSON_CreateObject();
			if (!j)
				cli_die("out of memory");
			if (qid)
				json_add_str(j, "query", qid, (size_t)-1);
			cJSON_AddNumberToObject(j, "rank", h->rank);
			json_add_str(j, "id", h->id, (size_t)-1);
			cJSON_AddNumberToObject(j, "score", h->score);
			if (o->rr.n)
				cJSON_AddNumberToObject(j, "rerank_score", o->rr_scores[out_index(o, i, n)]);
			if (h->text)
				json_add_str(j, "text", h->text, h->text_len);
			else if (o->text)
				cJSON_AddNullToObject(j, "text");
			json_line(o->text_out, j);
		} else {
			if (qid) {
				tsv_field(o->text_out, qid);
				fputc('\t', o->text_out);
			}
			fprintf(o->text_out, "%d\t", h->rank);
			tsv_field(o->text_out, h->id);
			fprintf(o->text_out, "\t%.9g", h->score);
			if (o->rr.n)
				fprintf(o->text_out, "\t%.9g", o->rr_scores[out_index(o, i, n)]);
			if (o->text) {
				fputc('\t', o->text_out);
				ss_escape(o->text_out, h->text ? h->text : "", h->text_len, SS_ESC_PLAIN);
			}
			fputc('\n', o->text_out);
		}
	}
}

/* A query id usable as a file name in --out-dir. */
static int safe_name(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 200 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Checks hit h, stateless, before anything is written: --model given, its
 * tokens stored (read with the hits), the model's fingerprint its
 * state's. Returns 0, or 1 after reporting the error. */
static int recompute_check(qopts *o, const char *label, const ss_index_hit *h)
{
	if (!o->mo) {
		cli_warn("%s%s: document %s has no stored state (it is stateless): query with "
			 "--model DIR to recompute it", label, o->db, h->id);
		return 1;
	}
	if (!h->tokens) {
		cli_warn("%s%s: document %s has no stored state and no tokens stored to recompute it from", label,
			 o->db, h->id);
		return 1;
	}
	recompute_load(o);
	if (strcmp(h->fingerprint, o->m->fingerprint)) {
		cli_warn("%s%s: document %s: its state was of model %s, --model %s is %s", label, o->db, h->id,
			 h->fingerprint, o->mo->model, o->m->fingerprint);
		return 1;
	}
	return 0;
}

/* Writes the hits' states (most relevant last, or first with --order
 * best-first) to `path` ("-" = stdout), each after its rank/score
 * annotation frame: a stored frame copied verbatim, a stateless document's
 * state recomputed (--model; RECOMPUTE_BATCH per forward call, in output
 * order). Every record is first validated (a stored one by its metadata, a
 * stateless one by its tokens and the model) so that a missing or replaced
 * shard fails the query before anything is written (but the rest of a
 * record over HTTP streamed into a named file, checked as it arrives: its
 * failure takes the file back). Returns 0, or 1 after reporting the
 * error. */
static int emit_states(ss_index *ix, qopts *o, const char *label, const ss_index_hit *h, int n,
		       const char *path)
{
	char em[SS_ERRMSG_MAX];
	const ss_record *rec;
	ss_state st[RECOMPUTE_BATCH];
	int bad = 0, n_st = 0, next_st = 0; /* st[next_st..n_st) computed, not yet written */
	/* The plan frame: every record's logdecay, in output order, when
	 * every hit is stored (a recomputed one's is known only once computed). */
	float *plan = NULL;
	size_t H = 0;
	char shown[4096];
	ss_writer *w = NULL;
	if (ss_writer_open(&w, path, 0, em)) {
		cli_warn("%s: %s", path, em);
		bad = 1;
	}
	/* The hits served over HTTP, fetched in parallel before they are
	 * read (each one's failure is its ss_index_read's): whole when the
	 * output could not be taken back, else their records' heads (the
	 * rest then streams into the output). */
	if (!bad && n > 0 && ss_index_prefetch(ix, h, n, !ss_writer_discards_on_abort(w), em)) {
		cli_warn("%s%s: %s", label, o->db, em);
		bad = 1;
	}
	for (int i = 0; i < n && !bad; i++) {
		const ss_index_hit *hi = &h[out_index(o, i, n)];
		ss_state m;
		if (hi->stateless) {
			bad = recompute_check(o, label, hi);
			free(plan);
			plan = NULL;
			H = (size_t)-1;
		} else if (ss_index_read(ix, hi, 1, &rec, em) || ss_record_state_meta(rec, &m, em)) {
			cli_warn("%s%s: %s: %s", label, o->db, ss_url_redact(hi->path, shown, sizeof shown), em);
			bad = 1;
		} else {
			size_t mh = ss_state_logdecay_len(&m.dims);
			if (H == 0 && (size_t)n * mh * sizeof *plan > SS_PLAN_MAX)
				H = (size_t)-1; /* too large for a plan frame (Mamba-1 at large k) */
			if (H == 0 && !(plan = malloc((size_t)n * mh * sizeof *plan)))
				cli_die("out of memory");
			if (H == 0 || H == mh) {
				memcpy(plan + (size_t)i * mh, m.logdecay, mh * sizeof *plan);
				H = mh;
			} else { /* dims an index never mixes: no plan */
				free(plan);
				plan = NULL;
				H = (size_t)-1;
			}
			ss_state_free(&m);
		}
	}
	/* A plan too large for a frame (SS_ERR_INVALID) is left out. */
	if (!bad && plan && ss_writer_put_plan(w, (size_t)n, H, plan) == SS_ERR_IO) {
		cli_warn("%s%s: %s", label, path, strerror(errno));
		bad = 1;
	}
	free(plan);
	for (int i = 0; i < n && !bad; i++) {
		const ss_index_hit *hi = &h[out_index(o, i, n)];
		if (hi->stateless) {
			if (next_st == n_st) {
				/* The next batch: this and the following stateless hits. */
				const ss_index_hit *bh[RECOMPUTE_BATCH];
				n_st = next_st = 0;
				for (int j = i; j < n && n_st < RECOMPUTE_BATCH; j++) {
					int x = out_index(o, j, n);
					if (h[x].stateless)
						bh[n_st++] = &h[x];
				}
				if ((bad = recompute(o, label, bh, n_st, st))) {
					n_st = 0;
					break;
				}
			}
			if (o->rr.n)
				ss_writer_set_rerank_score(w, o->rr_scores[out_index(o, i, n)]);
			int rc = ss_writer_put_annotation(w, hi->rank, hi->score);
			if (!rc)
				rc = ss_writer_put_state(w, &st[next_st], NULL);
			ss_state_free(&st[next_st++]);
			if (rc) {
				cli_warn("%s%s: %s", label, path, strerror(errno));
				bad = 1;
			}
			continue;
		}
		if (o->rr.n)
			ss_writer_set_rerank_score(w, o->rr_scores[out_index(o, i, n)]);
		if (ss_index_copy(ix, hi, w, em)) {
			/* An empty message means the output failed (errno kept). */
			if (em[0])
				cli_warn("%s%s: %s: %s", label, o->db, ss_url_redact(hi->path, shown, sizeof shown), em);
			else
				cli_warn("%s%s: %s", label, path, strerror(errno));
			bad = 1;
		}
	}
	while (next_st < n_st)
		ss_state_free(&st[next_st++]);
	if (bad) {
		ss_writer_abort(w);
		return 1;
	}
	if (ss_writer_close(w, em)) {
		cli_warn("%s: %s", path, em);
		return 1;
	}
	return 0;
}

/* rerank_hits' states of stateless hits h[0..n): checked and recomputed
 * as emit_states does, RECOMPUTE_BATCH per forward call. */
static int rerank_recompute(void *ctx, const char *label, const ss_index_hit *const *h, int n, ss_state *st)
{
	qopts *o = ctx;
	for (int i = 0; i < n; i++)
		if (recompute_check(o, label, h[i]))
			return 1;
	for (int i = 0; i < n; i += RECOMPUTE_BATCH)
		if (recompute(o, label, h + i, n - i < RECOMPUTE_BATCH ? n - i : RECOMPUTE_BATCH, st + i)) {
			for (int j = 0; j < i; j++)
				ss_state_free(&st[j]);
			return 1;
		}
	return 0;
}

/* Runs one query. qid: NULL for --query (single) mode. Returns 0 or 1. */
static int run_query(ss_index *ix, qopts *o, const char *qid, const char *text, int k,
		     const char **exclude, size_t n_exclude)
{
	char em[SS_ERRMSG_MAX], label[256] = "";
	if (qid)
		snprintf(label, sizeof label, "query %s: ", qid);
	ss_index_hit *h;
	if (o->rr.n && k > o->rr.n) {
		cli_warn("%sk %d is above --rerank %d", label, k, o->rr.n);
		return 1;
	}
	int n = ss_index_query(ix, text, o->rr.n ? o->rr.n : k, exclude, n_exclude, &h, em);
	if (n < 0) {
		/* A bad query is the query's; anything else is the index's (a
		 * damaged file: name it). */
		if (n == SS_ERR_INVALID)
			cli_warn("%s%s", label, em);
		else
			cli_warn("%s: %s%s", o->db, label, em);
		return 1;
	}
	int bad = 0;
	if (o->rr.n && n > 0) {
		recompute_load(o);
		int kept = rerank_hits(&o->rk, ix, o->db, label, text, h, n, k, rerank_recompute, o, o->rr_scores);
		if (kept < 0) {
			ss_index_hits_free(h, n);
			return 1;
		}
		n = kept;
	}
	if (n == 0) {
		o->n_empty++;
		if (qid && !o->empty_ok)
			cli_warn("%sno document matched", label);
	}
	if (o->ids) {
		print_ids(o, qid, h, n);
	} else if (qid) {
		char *path = NULL;
		if (!safe_name(qid)) {
			cli_warn("%squery id is not usable as a file name in %s", label, o->out_dir);
			bad = 1;
		} else if (asprintf(&path, "%s/%s.states", o->out_dir, qid) < 0) {
			cli_die("out of memory");
		} else {
			bad = emit_states(ix, o, label, h, n, path);
		}
		free(path);
	} else {
		bad = emit_states(ix, o, label, h, n, o->out ? o->out : "-");
	}
	ss_index_hits_free(h, n);
	return bad;
}

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

static void batch_query_free(batch_query *b)
{
	cJSON_Delete(b->j);
	free(b->exclude);
	memset(b, 0, sizeof *b);
}

/* Parses batch line `lineno` (len bytes) into *b: returns NULL, or why it
 * is not a query (one line; b is then freed). */
static const char *batch_parse(const char *line, size_t len, unsigned long long lineno, const qopts *o,
			       batch_query *b)
{
	static const char *const keys[] = { "id", "query", "exclude", "k", NULL };
	static char bad[SS_ERRMSG_MAX];
	memset(b, 0, sizeof *b);
	if (ss_jsonl_parse(line, len, keys, &b->j, bad))
		return bad;
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(b->j, "query");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(b->j, "id");
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(b->j, "exclude");
	const cJSON *kk = cJSON_GetObjectItemCaseSensitive(b->j, "k");
	snprintf(b->qid_buf, sizeof b->qid_buf, "%llu", lineno);
	b->qid = b->qid_buf;
	int64_t x;
	if (cJSON_IsString(id))
		b->qid = id->valuestring;
	else if (cJSON_IsNumber(id) && !ss_json_int(id, INT64_MIN, INT64_MAX, &x)) /* exact: 2^53 + 1 too */
		snprintf(b->qid_buf, sizeof b->qid_buf, "%lld", (long long)x);
	else if (cJSON_IsNumber(id))
		snprintf(b->qid_buf, sizeof b->qid_buf, "%.17g", id->valuedouble);
	const char *why = NULL;
	if (!cJSON_IsString(q))
		why = "no \"query\" string";
	else if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id))
		why = "\"id\" is neither a string nor a number";
	else if (ex && !cJSON_IsArray(ex))
		why = "\"exclude\" is not an array of ids";
	else if (kk && (!cJSON_IsNumber(kk) || !(kk->valuedouble >= 1 && kk->valuedouble <= 1e6) ||
			kk->valuedouble != (int)kk->valuedouble))
		why = "\"k\" is not an integer in [1, 1000000]";
	size_t n_ex = o->n_exclude + (size_t)(ex ? cJSON_GetArraySize(ex) : 0);
	b->exclude = malloc((n_ex + 1) * sizeof *b->exclude);
	if (!b->exclude)
		cli_die("out of memory");
	if (o->n_exclude)
		memcpy(b->exclude, o->exclude, o->n_exclude * sizeof *b->exclude);
	b->n_exclude = o->n_exclude;
	const cJSON *e;
	if (!why && ex)
		cJSON_ArrayForEach(e, ex) {
			if (!cJSON_IsString(e)) {
				why = "\"exclude\" is not an array of ids";
				break;
			}
			b->exclude[b->n_exclude++] = e->valuestring;
		}
	if (why) {
		batch_query_free(b);
		return why;
	}
	b->text = q->valuestring;
	b->k = kk ? (int)kk->valuedouble : o->k;
	return NULL;
}

/* The first non-blank byte of a batch line, or NULL for a blank line. */
static const char *batch_start(const char *line)
{
	while (*line == ' ' || *line == '\t' || *line == '\r' || *line == '\n')
		line++;
	return *line ? line : NULL;
}

/* Runs non-blank batch line `lineno` (len bytes, NUL-terminated; a plain
 * line is trimmed in place): a JSON object when its first non-blank byte
 * is '{', else the query's text. Returns 0, or 1 after reporting. */
static int batch_line(ss_index *ix, qopts *o, char *line, size_t len, unsigned long long lineno)
{
	const char *p = batch_start(line);
	if (*p != '{') {
		/* A plain line is the query's text; its id, the line number. */
		char qid[32];
		char *end = line + strlen(line);
		while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
			*--end = 0;
		snprintf(qid, sizeof qid, "%llu", lineno);
		return run_query(ix, o, qid, p, o->k, o->exclude, o->n_exclude);
	}
	batch_query b;
	const char *why = batch_parse(line, len, lineno, o, &b);
	if (why) {
		cli_warn("-: line %llu: %s (a query line is plain text, or a JSON object such as "
			 "{\"id\": \"q1\", \"query\": \"text to search\", \"exclude\": [\"doc#3\"], \"k\": 5})",
			 lineno, why);
		return 1;
	}
	int bad = run_query(ix, o, b.qid, b.text, b.k, b.exclude, b.n_exclude);
	batch_query_free(&b);
	return bad;
}

/* A batch line kept whole until every id of the batch is known (--out-dir). */
typedef struct {
	char *line;
	size_t len;
	unsigned long long lineno;
	char *qid; /* the query's id; NULL for a line that is not a query (reported when run) */
} batch_held;

static int held_cmp(const void *a, const void *b)
{
	const batch_held *x = *(const batch_held *const *)a, *y = *(const batch_held *const *)b;
	int c = strcmp(x->qid, y->qid);
	return c ? c : (x->lineno > y->lineno) - (x->lineno < y->lineno);
}

/* Checks that no two queries of the batch share an id: in --out-dir each
 * writes ID.states, and the later would replace the earlier's output. A
 * plain line's id is its line number, which a JSON line's "id" may repeat.
 * Returns 0, or 1 after naming the first line (in input order) whose id an
 * earlier line has. */
static int batch_ids_unique(batch_held *h, size_t n)
{
	batch_held **by_id = malloc((n ? n : 1) * sizeof *by_id);
	if (!by_id)
		cli_die("out of memory");
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (h[i].qid)
			by_id[m++] = &h[i];
	qsort(by_id, m, sizeof *by_id, held_cmp);
	const batch_held *first = NULL, *again = NULL;
	for (size_t i = 1, g = 0; i < m; i++) { /* g: the first of by_id[i]'s run of one id */
		if (strcmp(by_id[g]->qid, by_id[i]->qid))
			g = i;
		else if (i == g + 1 && (!again || by_id[i]->lineno < again->lineno)) {
			first = by_id[g];
			again = by_id[i];
		}
	}
	free(by_id);
	if (!again)
		return 0;
	/* As a JSON string: one line whatever the id holds. */
	cJSON *js = cJSON_CreateString(again->qid);
	char *q = js ? cJSON_PrintUnformatted(js) : NULL;
	if (!q)
		cli_die("out of memory");
	cli_warn("-: line %llu: query id %s is line %llu's too: with --out-dir each query writes ID.states, "
		 "so ids must not repeat; no query was run", again->lineno, q, first->lineno);
	cJSON_free(q);
	cJSON_Delete(js);
	return 1;
}

/* Batch mode: one query per line on stdin (batch_line). With --ids the
 * queries run as their lines arrive; with --out-dir the whole batch is read
 * first and refused, before any output is written, when two queries share
 * an id (batch_ids_unique). */
static int run_batch(ss_index *ix, qopts *o)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned long long lineno = 0, n_done = 0;
	batch_held *held = NULL;
	size_t n_held = 0, held_cap = 0;
	int bad = 0;
	while ((len = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		if (!batch_start(line))
			continue;
		if (!o->out_dir) {
			bad |= batch_line(ix, o, line, (size_t)len, lineno);
			n_done++;
			cli_progress("%llu queries", n_done);
			continue;
		}
		held = mcli_grow(held, n_held, &held_cap, sizeof *held);
		batch_held *h = &held[n_held++];
		*h = (batch_held){ .line = malloc((size_t)len + 1), .len = (size_t)len, .lineno = lineno };
		if (!h->line)
			cli_die("out of memory");
		memcpy(h->line, line, (size_t)len + 1);
		if (*batch_start(line) != '{') {
			if (asprintf(&h->qid, "%llu", lineno) < 0)
				cli_die("out of memory");
		} else {
			batch_query b;
			if (!batch_parse(line, (size_t)len, lineno, o, &b)) {
				h->qid = strdup(b.qid);
				batch_query_free(&b);
				if (!h->qid)
					cli_die("out of memory");
			}
		}
	}
	if (ferror(stdin))
		cli_die("-: read error: %s", strerror(errno));
	free(line);
	int refused = n_held && batch_ids_unique(held, n_held);
	for (size_t i = 0; i < n_held; i++) {
		if (!refused) {
			bad |= batch_line(ix, o, held[i].line, held[i].len, held[i].lineno);
			n_done++;
			cli_progress("%llu queries", n_done);
		}
		free(held[i].line);
		free(held[i].qid);
	}
	free(held);
	cli_progress_end();
	return bad || refused;
}

/* ss_index_files: -o must not replace a state file the index reads. */
static int out_not_state(void *ctx, const char *path)
{
	if (!ss_url_is_http(path))
		cli_out_not_input(ctx, path);
	return 0;
}

static int cmd_query(const char *db, qopts *o, const char *query)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	/* The texts (--text) and a stateless hit's tokens (--model) are read
	 * with the hits, in the query's one snapshot. */
	ix = open_or_die(db);
	if (ss_index_set_bm25(ix, o->k1, o->b, em) ||
	    ss_index_set_query(ix, o->qflags, em) ||
	    ss_index_set_http(ix, o->http_timeout, o->http_retries, em) ||
	    ss_index_set_fetch(ix, (o->text ? SS_INDEX_FETCH_TEXT : 0) |
			   (o->mo && (!o->ids || o->rr.n) ? SS_INDEX_FETCH_TOKENS : 0), em))
		cli_die("%s: %s", db, em);
	/* A query that cannot be read is a usage error, found before any
	 * output is opened. */
	if (query && ss_index_query_check(ix, query, em)) {
		fprintf(stderr, "%s: --query: %s\n", cli_prog, em);
		exit(CLI_EXIT_USAGE);
	}
	if (o->out && strcmp(o->out, "-")) {
		for (int i = 0; i < n_dbs; i++)
			cli_out_not_input(o->out, dbs[i]);
		if (ss_index_files(ix, out_not_state, (void *)o->out, em))
			cli_die("%s: %s", db, em);
	}
	o->text_out = stdout;
	if (o->ids && o->out && strcmp(o->out, "-")) {
		o->text_out = fopen(o->out, "w");
		if (!o->text_out)
			cli_die("%s: %s", o->out, strerror(errno));
	}
	if (o->out_dir) {
		struct stat sb;
		if (stat(o->out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
			cli_die("%s: not a directory", o->out_dir);
	}
	int bad = query ? run_query(ix, o, NULL, query, o->k, o->exclude, o->n_exclude) : run_batch(ix, o);
	ss_index_close(ix);
	if (o->mo && cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %lld stateless documents recomputed (%lld tokens) in %.3f s; model loaded in "
			"%.3f s\n", cli_prog, db, o->n_recomputed, o->n_recomputed_tokens, o->recompute_s, o->load_s);
	if (o->rr.n && o->fwd && cli_verbosity >= 2)
		fprintf(stderr, "%s: %s: %ld queries reranked (%d candidates each) in %.3f s: %.3f ms a query\n",
			cli_prog, db, o->rk.n_queries, o->rr.n, o->rk.secs,
			o->rk.n_queries ? o->rk.secs / (double)o->rk.n_queries * 1e3 : 0.0);
	recompute_free(o);
	if (o->text_out != stdout && fclose(o->text_out) != 0)
		cli_die("%s: %s", o->out, strerror(errno));
	return bad || (o->n_empty && !o->empty_ok) ? CLI_EXIT_FAIL : 0;
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
		db_add(optarg);
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
	case O_STATE_URL: state_url_add(optarg); break;
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
	if (n_dbs > 1 && (a->build || a->del))
		cli_usage(usage_line, "%s takes one --index, not %d", a->cmd, n_dbs);
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
		return cmd_merge(a.o.out, argv + optind, argc - optind);
	}
	/* Messages name the index, or for several the count (an error of
	 * one shard names that shard). */
	char label[64];
	snprintf(label, sizeof label, "%d shards", n_dbs);
	const char *db = n_dbs == 1 ? a.db : label;
	if (n_dbs == 1)
		db = dbs[0];
	if (a.build || a.del || a.show) {
		free(a.o.exclude);
		if ((a.del || a.show) && optind == argc)
			cli_usage(usage_line, "%s: no document ID given", a.cmd);
		if (a.del)
			return cmd_delete(db, argv + optind, argc - optind);
		if (a.show)
			return cmd_show(db, argv + optind, argc - optind, a.o.json);
		const stateless_opts so = { a.stateless ? a.mo.model : NULL, a.sdtype };
		return cmd_build(db, argv + optind, argc - optind, a.budget, a.hits, &so);
	}
	if (optind < argc)
		cli_usage(usage_line, "unexpected argument '%s'", argv[optind]);
	if (a.list || a.stats) {
		free(a.o.exclude);
		return a.list ? cmd_list(db, a.o.json) : cmd_stats(db, a.o.json);
	}
	check_query(&a);
	a.o.db = db;
	int rc = cmd_query(db, &a.o, a.query);
	free(a.o.exclude);
	return rc;
}
