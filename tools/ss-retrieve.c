/*
 * ss-retrieve — the database of states: builds a BM25 index over document
 * text whose entries point at state records, and answers queries with the
 * states of the top-k documents (most relevant last). Needs no model.
 * See man/ss-retrieve.1; the index itself: lib/ss_index.h.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ss.h"

static const char *usage_line =
	"ss-retrieve build --index DB [-q|-v] STREAM...\n"
	"       ss-retrieve query --index DB [-k K] [--exclude ID]... [--query TEXT]\n"
	"                   [--ids [--json]] [-o FILE | --out-dir DIR] [--empty-ok]\n"
	"                   [--k1 K1] [--b B] [-q|-v]";

static void help(void)
{
	printf("usage: %s\n\n", usage_line);
	fputs("Builds and queries a BM25 index of documents whose entries point at their\n"
	      "states (byte offsets in state streams).\n\n"
	      "build: reads token streams (document text) and state streams (states), in any\n"
	      "  order and mix, and adds the documents to DB in one transaction (created when\n"
	      "  absent; documents with an id already indexed are replaced). A document needs\n"
	      "  both a token record and a state record; one with only one of them is left\n"
	      "  out with a warning. State streams must be regular files.\n"
	      "query: writes the states of the top K documents as a state stream, most\n"
	      "  relevant LAST, each annotated with its rank (1 = best) and score (BM25);\n"
	      "  the stored records are copied as they are, not recompressed.\n"
	      "  With --query TEXT: one query, to stdout or -o FILE. Without: JSON lines on\n"
	      "  stdin, {\"id\": ID, \"query\": TEXT, \"exclude\": [ID...], \"k\": K}, one output\n"
	      "  file per query in --out-dir DIR (DIR/ID.states), or --ids lines.\n\n"
	      "options:\n"
	      "  --index DB       the index file (SQLite)\n"
	      "  -k K             documents per query (default 10)\n"
	      "  --query TEXT     one query given on the command line\n"
	      "  --exclude ID     leave document ID out of every result (repeatable)\n"
	      "  --ids            print rank, id and score as TSV (batch: query id first)\n"
	      "  --json           with --ids: JSON lines instead of TSV\n"
	      "  -o FILE          output file (default stdout)\n"
	      "  --out-dir DIR    batch: write DIR/<query id>.states per query\n"
	      "  --empty-ok       exit 0 when a query matches no document (default: 1,\n"
	      "                   as grep; the output is written, empty, either way)\n"
	      "  --k1 K1, --b B   BM25's term-frequency saturation k1 (>= 0, default 1.2)\n"
	      "                   and length normalisation b (0..1, default 0.75)\n"
	      "  -q, -v           quieter, more verbose (progress, summary)\n"
	      "  -h, --help       this help\n"
	      "  -V, --version    version\n",
	      stdout);
	exit(0);
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

static int cmd_build(const char *db, char **inputs, int n_inputs)
{
	char em[SS_ERRMSG_MAX];
	double t0 = cli_now();
	ss_index *ix;
	int rc = ss_index_build_open(&ix, db, em);
	if (rc)
		cli_die("%s: %s", db, em);
	ss_index_add_stats total = {0};
	uint64_t max_record = cli_max_record();
	double pg[3] = { 0, cli_inputs_size(inputs, n_inputs), t0 };
	cli_progress_begin();
	for (int i = 0; i < n_inputs; i++) {
		ss_index_add_stats st = {0};
		pg[0] = (double)total.bytes;
		rc = ss_index_add_stream(ix, inputs[i], max_record, &st, build_progress, pg, em);
		total.n_text += st.n_text;
		total.n_states += st.n_states;
		total.bytes += st.bytes;
		if (rc) {
			ss_index_close(ix); /* rolls the build back: DB stays as it was */
			cli_die("%s: %s", inputs[i], em);
		}
	}
	cli_progress_end();
	ss_index_build_stats bs;
	rc = ss_index_commit(ix, build_note, NULL, &bs, em);
	ss_index_close(ix);
	if (rc)
		cli_die("%s: %s", db, em);
	if (cli_verbosity >= 2)
		fprintf(stderr,
			"%s: %s: %lld %s (%lld added, %lld replaced, %lld left out) from %llu token and "
			"%llu state records in %.2f s\n",
			cli_prog, db, (long long)bs.n_docs, cli_plural((uint64_t)bs.n_docs, "document", "documents"),
			(long long)bs.n_added, (long long)bs.n_replaced,
			(long long)bs.n_dropped, (unsigned long long)total.n_text,
			(unsigned long long)total.n_states, cli_now() - t0);
	return 0;
}

/* ------------------------------------------------------------------ query */

typedef struct {
	int k;
	const char **exclude; /* from the command line */
	size_t n_exclude;
	int ids, json;
	const char *out, *out_dir;
	FILE *text_out; /* --ids destination */
	int empty_ok;
	unsigned long long n_empty; /* queries that matched nothing */
	double k1, b; /* BM25 parameters (ss_index_set_bm25) */
} qopts;

/* Writes s to f as a TSV field: backslash, tab, newline and CR escaped. */
static void tsv_field(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '\\': fputs("\\\\", f); break;
		case '\t': fputs("\\t", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		default: fputc(*s, f);
		}
	}
}

static void print_ids(qopts *o, const char *qid, const ss_index_hit *h, int n)
{
	/* Same order as the state stream: most relevant last. */
	for (int i = n - 1; i >= 0; i--) {
		if (o->json) {
			cJSON *j = cJSON_CreateObject();
			if (qid)
				cJSON_AddStringToObject(j, "query", qid);
			cJSON_AddNumberToObject(j, "rank", h[i].rank);
			cJSON_AddStringToObject(j, "id", h[i].id);
			cJSON_AddNumberToObject(j, "score", h[i].score);
			char *s = cJSON_PrintUnformatted(j);
			if (!s)
				cli_die("out of memory");
			fprintf(o->text_out, "%s\n", s);
			cJSON_free(s);
			cJSON_Delete(j);
		} else {
			if (qid) {
				tsv_field(o->text_out, qid);
				fputc('\t', o->text_out);
			}
			fprintf(o->text_out, "%d\t", h[i].rank);
			tsv_field(o->text_out, h[i].id);
			fprintf(o->text_out, "\t%.9g\n", h[i].score);
		}
	}
}

/* A query id usable as a file name in --out-dir. */
static int safe_name(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 200 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Writes the hits' states (most relevant last) to `path` ("-" = stdout),
 * each stored frame copied verbatim after its rank/score annotation frame.
 * Every record is first validated by its metadata so that a missing or
 * replaced shard fails the query before anything is written. Returns 0, or
 * 1 after reporting the error. */
static int emit_states(ss_index *ix, const char *label, const ss_index_hit *h, int n,
		       const char *path)
{
	char em[SS_ERRMSG_MAX];
	const ss_record *rec;
	for (int i = 0; i < n; i++)
		if (ss_index_read(ix, &h[i], 1, &rec, em)) {
			cli_warn("%s%s: %s", label, h[i].path, em);
			return 1;
		}
	ss_writer *w;
	if (ss_writer_open(&w, path, 0, em)) {
		cli_warn("%s: %s", path, em);
		return 1;
	}
	for (int i = n - 1; i >= 0; i--) {
		if (ss_index_copy(ix, &h[i], w, em)) {
			/* An empty message means the output failed (errno kept). */
			if (em[0])
				cli_warn("%s%s: %s", label, h[i].path, em);
			else
				cli_warn("%s%s: %s", label, path, strerror(errno));
			ss_writer_abort(w);
			return 1;
		}
	}
	if (ss_writer_close(w, em)) {
		cli_warn("%s: %s", path, em);
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
	int n = ss_index_query(ix, text, k, exclude, n_exclude, &h, em);
	if (n < 0) {
		cli_warn("%s%s", label, em);
		return 1;
	}
	int bad = 0;
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
			bad = emit_states(ix, label, h, n, path);
		}
		free(path);
	} else {
		bad = emit_states(ix, label, h, n, o->out ? o->out : "-");
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
	memset(b, 0, sizeof *b);
	b->j = cJSON_ParseWithLength(line, len);
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(b->j, "query");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(b->j, "id");
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(b->j, "exclude");
	const cJSON *kk = cJSON_GetObjectItemCaseSensitive(b->j, "k");
	snprintf(b->qid_buf, sizeof b->qid_buf, "%llu", lineno);
	b->qid = b->qid_buf;
	if (cJSON_IsString(id))
		b->qid = id->valuestring;
	else if (cJSON_IsNumber(id))
		snprintf(b->qid_buf, sizeof b->qid_buf, "%.17g", id->valuedouble);
	const char *why = NULL;
	if (!cJSON_IsObject(b->j))
		why = "not a JSON object (want one a line: {\"query\": \"text\"}, with \"id\", \"k\", \"exclude\" optional)";
	else if (!cJSON_IsString(q))
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

/* Batch mode: one JSON object per line on stdin. */
static int run_batch(ss_index *ix, qopts *o)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned long long lineno = 0, n_done = 0;
	int bad = 0;
	while ((len = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		const char *p = line;
		while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			p++;
		if (!*p)
			continue;
		batch_query b;
		const char *why = batch_parse(line, (size_t)len, lineno, o, &b);
		if (why) {
			cli_warn("-: line %llu: %s", lineno, why);
			bad = 1;
		} else {
			bad |= run_query(ix, o, b.qid, b.text, b.k, b.exclude, b.n_exclude);
			batch_query_free(&b);
		}
		n_done++;
		cli_progress("%llu queries", n_done);
	}
	cli_progress_end();
	if (ferror(stdin))
		cli_die("-: read error: %s", strerror(errno));
	free(line);
	return bad;
}

static int cmd_query(const char *db, qopts *o, const char *query)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, db, em) || ss_index_set_bm25(ix, o->k1, o->b, em))
		cli_die("%s: %s", db, em);
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
	if (o->text_out != stdout && fclose(o->text_out) != 0)
		cli_die("%s: %s", o->out, strerror(errno));
	return bad || (o->n_empty && !o->empty_ok) ? CLI_EXIT_FAIL : 0;
}

int main(int argc, char **argv)
{
	cli_init("ss-retrieve");
	enum { O_INDEX = 256, O_QUERY, O_EXCLUDE, O_IDS, O_JSON, O_OUTDIR, O_EMPTYOK, O_K1, O_B };
	static const struct option longs[] = {
		{ "index", required_argument, 0, O_INDEX },
		{ "query", required_argument, 0, O_QUERY },
		{ "exclude", required_argument, 0, O_EXCLUDE },
		{ "ids", no_argument, 0, O_IDS },
		{ "json", no_argument, 0, O_JSON },
		{ "out-dir", required_argument, 0, O_OUTDIR },
		{ "empty-ok", no_argument, 0, O_EMPTYOK },
		{ "k1", required_argument, 0, O_K1 },
		{ "b", required_argument, 0, O_B },
		{ 0, 0, 0, 0 },
	};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			help();
		if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version"))
			cli_version();
	}
	if (argc < 2)
		cli_usage(usage_line, "missing command: build or query");
	const char *cmd = argv[1];
	int build = !strcmp(cmd, "build");
	if (!build && strcmp(cmd, "query"))
		cli_usage(usage_line, "unknown command '%s' (build or query)", cmd);
	qopts o = { .k = 10, .k1 = 1.2, .b = 0.75 };
	const char *db = NULL, *query = NULL;
	o.exclude = calloc((size_t)argc, sizeof *o.exclude);
	if (!o.exclude)
		cli_die("out of memory");
	optind = 2;
	const cli_options co = { "k:", longs, usage_line, help, &o.out, NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		if (build && c != O_INDEX)
			cli_usage(usage_line, "option not valid for build: %s", argv[optind - 1]);
		switch (c) {
		case O_INDEX: db = optarg; break;
		case O_QUERY: query = optarg; break;
		case O_EXCLUDE: o.exclude[o.n_exclude++] = optarg; break;
		case O_IDS: o.ids = 1; break;
		case O_JSON: o.json = 1; break;
		case O_OUTDIR: o.out_dir = optarg; break;
		case O_EMPTYOK: o.empty_ok = 1; break;
		case O_K1: o.k1 = cli_double("--k1", optarg, 0, 1000, usage_line); break;
		case O_B: o.b = cli_double("--b", optarg, 0, 1, usage_line); break;
		case 'k': o.k = (int)cli_long("-k", optarg, 1, 1000000, usage_line); break;
		}
	}
	if (build && o.out)
		cli_usage(usage_line, "option not valid for build: -o");
	if (!db)
		cli_usage(usage_line, "--index DB is required");
	if (build) {
		free(o.exclude);
		return cmd_build(db, argv + optind, argc - optind);
	}
	if (optind < argc)
		cli_usage(usage_line, "unexpected argument '%s'", argv[optind]);
	if (o.json && !o.ids)
		cli_usage(usage_line, "--json goes with --ids");
	if (query && o.out_dir)
		cli_usage(usage_line, "--out-dir is for batch queries (stdin); with --query use -o FILE");
	if (!query && !o.ids && !o.out_dir)
		cli_usage(usage_line, "batch queries (stdin) need --out-dir DIR or --ids");
	if (!query && o.out && !o.ids)
		cli_usage(usage_line, "batch queries write one file per query: use --out-dir DIR, not -o");
	if (o.ids && o.out_dir)
		cli_usage(usage_line, "--ids prints to stdout or -o FILE, not --out-dir");
	int rc = cmd_query(db, &o, query);
	free(o.exclude);
	return rc;
}
