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
#include <unistd.h>

#include "cli.h"
#include "ss.h"

static const char *usage_line =
	"ss-retrieve add|build --index DB [-q|-v] STREAM...\n"
	"       ss-retrieve query --index DB [-k K] [--exclude ID]... [--query TEXT]\n"
	"                   [--ids [--text] [--json]] [--order best-last|best-first]\n"
	"                   [-o FILE | --out-dir DIR] [--empty-ok] [--k1 K1] [--b B] [-q|-v]\n"
	"       ss-retrieve list|stats --index DB [--json]\n"
	"       ss-retrieve show --index DB [--json] ID...\n"
	"       ss-retrieve delete --index DB [-q|-v] ID...";

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
	      "  State streams must be regular files.\n"
	      "query: writes the states of the top K documents as a state stream, most\n"
	      "  relevant LAST (--order best-first: first), each annotated with its rank\n"
	      "  (1 = best) and score (BM25); the stored records are copied as they are.\n"
	      "  With --query TEXT: one query, to stdout or -o FILE. Without: one query per\n"
	      "  line on stdin, plain text, or JSON {\"id\": ID, \"query\": TEXT, \"exclude\":\n"
	      "  [ID...], \"k\": K} when the line starts with '{'; one output file per query\n"
	      "  in --out-dir DIR (DIR/ID.states), or --ids lines.\n"
	      "list: one line per document: id, tokens, state file, byte offset, length.\n"
	      "show: each document's metadata and its text (as indexed).\n"
	      "stats: documents, terms, tokens, bytes and state files of the index.\n"
	      "delete: removes documents in one transaction (an unknown id: none removed).\n\n"
	      "options:\n"
	      "  --index DB       the index file (SQLite)\n"
	      "  -k K             documents per query (default 10)\n"
	      "  --query TEXT     one query given on the command line\n"
	      "  --exclude ID     leave document ID out of every result (repeatable)\n"
	      "  --ids            print rank, id and score as TSV (batch: query id first)\n"
	      "  --text           with --ids: each document's text too (last field)\n"
	      "  --order ORDER    best-last (default: the order ss-compose wants) or\n"
	      "                   best-first (head -1 is the top hit)\n"
	      "  --json           JSON lines instead of TSV (--ids, list, show, stats)\n"
	      "  -o FILE          query: output file (default stdout)\n"
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
			"%s: %s: %lld %s (%lld added, %lld replaced, %lld left out) in %.2f s; records "
			"read: %llu token, %llu state\n",
			cli_prog, db, (long long)bs.n_docs, cli_plural((uint64_t)bs.n_docs, "document", "documents"),
			(long long)bs.n_added, (long long)bs.n_replaced,
			(long long)bs.n_dropped, cli_now() - t0, (unsigned long long)total.n_text,
			(unsigned long long)total.n_states);
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

static ss_index *open_or_die(const char *db)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open(&ix, db, em))
		cli_die("%s: %s", db, em);
	return ix;
}

/* The JSON object of one document's metadata (no text). */
static cJSON *doc_json(const ss_index_doc *d)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", d->id);
	cJSON_AddNumberToObject(j, "n_tokens", (double)d->n_tokens);
	cJSON_AddStringToObject(j, "file", d->path);
	cJSON_AddNumberToObject(j, "offset", (double)d->offset);
	cJSON_AddNumberToObject(j, "length", (double)d->length);
	cJSON_AddStringToObject(j, "fingerprint", d->fingerprint);
	if (d->text_tokens >= 0)
		cJSON_AddNumberToObject(j, "text_tokens", (double)d->text_tokens);
	else
		cJSON_AddNullToObject(j, "text_tokens");
	cJSON_AddNumberToObject(j, "text_bytes", (double)d->text_len);
	cJSON_AddNumberToObject(j, "n_terms", (double)d->n_terms);
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
	tsv_field(stdout, d->path);
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
			cJSON_AddStringToObject(j, "text", text);
		else
			cJSON_AddNullToObject(j, "text");
		json_line(stdout, j);
	} else {
		/* "key: value" lines, a blank line, the text as it is (an e-mail's
		 * layout); a blank line between documents. */
		if (c->n_shown)
			putchar('\n');
		printf("id: %s\nfile: %s\noffset: %llu\nlength: %llu\nfingerprint: %s\nn_tokens: %lld\n", d->id,
		       d->path, (unsigned long long)d->offset, (unsigned long long)d->length, d->fingerprint,
		       (long long)d->n_tokens);
		if (d->text_tokens >= 0)
			printf("text_tokens: %lld\n", (long long)d->text_tokens);
		printf("text_bytes: %lld\nn_terms: %lld\n", (long long)d->text_len, (long long)d->n_terms);
		if (text) {
			putchar('\n');
			fwrite(text, 1, len, stdout);
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

static int cmd_stats(const char *db, int json)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix = open_or_die(db);
	ss_index_info in;
	if (ss_index_info_get(ix, &in, em))
		cli_die("%s: %s", db, em);
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
		cJSON_AddStringToObject(j, "fingerprint", in.fingerprint);
		json_line(stdout, j);
	} else {
		printf("%-17s %s\n", "fingerprint", in.fingerprint);
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
} qopts;

/* Index in hits[] of the i-th document to write, in the order asked for. */
static int out_index(const qopts *o, int i, int n)
{
	return o->best_first ? i : n - 1 - i;
}

static void print_ids(qopts *o, ss_index *ix, const char *qid, const ss_index_hit *hits, int n)
{
	/* Same order as the state stream. */
	for (int i = 0; i < n; i++) {
		const ss_index_hit *h = &hits[out_index(o, i, n)];
		char em[SS_ERRMSG_MAX], *text = NULL;
		size_t len = 0;
		if (o->text && ss_index_text(ix, h->id, &text, &len, em))
			cli_die("%s: %s", o->db, em);
		if (o->json) {
			cJSON *j = cJSON_CreateObject();
			if (qid)
				cJSON_AddStringToObject(j, "query", qid);
			cJSON_AddNumberToObject(j, "rank", h->rank);
			cJSON_AddStringToObject(j, "id", h->id);
			cJSON_AddNumberToObject(j, "score", h->score);
			if (text)
				cJSON_AddStringToObject(j, "text", text);
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
			if (o->text) {
				fputc('\t', o->text_out);
				tsv_field(o->text_out, text ? text : "");
			}
			fputc('\n', o->text_out);
		}
		free(text);
	}
}

/* A query id usable as a file name in --out-dir. */
static int safe_name(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 200 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Writes the hits' states (most relevant last, or first with --order
 * best-first) to `path` ("-" = stdout),
 * each stored frame copied verbatim after its rank/score annotation frame.
 * Every record is first validated by its metadata so that a missing or
 * replaced shard fails the query before anything is written. Returns 0, or
 * 1 after reporting the error. */
static int emit_states(ss_index *ix, const qopts *o, const char *label, const ss_index_hit *h, int n,
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
	for (int i = 0; i < n; i++) {
		const ss_index_hit *hi = &h[out_index(o, i, n)];
		if (ss_index_copy(ix, hi, w, em)) {
			/* An empty message means the output failed (errno kept). */
			if (em[0])
				cli_warn("%s%s: %s", label, hi->path, em);
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
		print_ids(o, ix, qid, h, n);
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
		why = "not a JSON object";
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

/* Batch mode: one query per line on stdin, a JSON object when its first
 * non-blank byte is '{', else the query's text. */
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
		if (*p != '{') {
			/* A plain line is the query's text; its id, the line number. */
			char qid[32];
			char *end = line + strlen(line);
			while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
				*--end = 0;
			snprintf(qid, sizeof qid, "%llu", lineno);
			bad |= run_query(ix, o, qid, p, o->k, o->exclude, o->n_exclude);
			n_done++;
			cli_progress("%llu queries", n_done);
			continue;
		}
		batch_query b;
		const char *why = batch_parse(line, (size_t)len, lineno, o, &b);
		if (why) {
			cli_warn("-: line %llu: %s (a query line is plain text, or a JSON object such as "
				 "{\"id\": \"q1\", \"query\": \"text to search\", \"exclude\": [\"doc#3\"], \"k\": 5})",
				 lineno, why);
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
	enum { O_INDEX = 256, O_QUERY, O_EXCLUDE, O_IDS, O_JSON, O_OUTDIR, O_EMPTYOK, O_K1, O_B, O_TEXT, O_ORDER };
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
		{ "text", no_argument, 0, O_TEXT },
		{ "order", required_argument, 0, O_ORDER },
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
	static const char *const cmds = "build, add, query, list, show, stats or delete";
	if (argc < 2)
		cli_usage(usage_line, "missing command: %s", cmds);
	const char *cmd = argv[1];
	/* build and add are one command: add to DB, creating it when absent. */
	int build = !strcmp(cmd, "build") || !strcmp(cmd, "add"), query_cmd = !strcmp(cmd, "query");
	int list = !strcmp(cmd, "list"), show = !strcmp(cmd, "show"), stats = !strcmp(cmd, "stats");
	int del = !strcmp(cmd, "delete");
	if (!build && !query_cmd && !list && !show && !stats && !del)
		cli_usage(usage_line, "unknown command '%s' (%s)", cmd, cmds);
	qopts o = { .k = 10, .k1 = 1.2, .b = 0.75 };
	const char *db = NULL, *query = NULL;
	o.exclude = calloc((size_t)argc, sizeof *o.exclude);
	if (!o.exclude)
		cli_die("out of memory");
	optind = 2;
	const cli_options co = { "k:", longs, usage_line, help, &o.out, NULL };
	int c;
	while ((c = cli_getopt(argc, argv, &co)) != -1) {
		/* Beside --index, the commands other than query take only --json
		 * (list, show, stats). */
		if (!query_cmd && c != O_INDEX && (c != O_JSON || build || del))
			cli_usage(usage_line, "option not valid for %s: %s", cmd, argv[optind - 1]);
		switch (c) {
		case O_INDEX: db = optarg; break;
		case O_QUERY: query = optarg; break;
		case O_EXCLUDE: o.exclude[o.n_exclude++] = optarg; break;
		case O_IDS: o.ids = 1; break;
		case O_JSON: o.json = 1; break;
		case O_TEXT: o.text = 1; break;
		case O_ORDER:
			if (strcmp(optarg, "best-first") && strcmp(optarg, "best-last"))
				cli_usage(usage_line, "--order: '%s' is neither best-first nor best-last", optarg);
			o.best_first = !strcmp(optarg, "best-first");
			break;
		case O_OUTDIR: o.out_dir = optarg; break;
		case O_EMPTYOK: o.empty_ok = 1; break;
		case O_K1: o.k1 = cli_double("--k1", optarg, 0, 1000, usage_line); break;
		case O_B: o.b = cli_double("--b", optarg, 0, 1, usage_line); break;
		case 'k': o.k = (int)cli_long("-k", optarg, 1, 1000000, usage_line); break;
		}
	}
	if (!query_cmd && o.out)
		cli_usage(usage_line, "option not valid for %s: -o", cmd);
	if (!db)
		cli_usage(usage_line, "--index DB is required");
	if (build || del || show) {
		free(o.exclude);
		if ((del || show) && optind == argc)
			cli_usage(usage_line, "%s: no document ID given", cmd);
		if (del)
			return cmd_delete(db, argv + optind, argc - optind);
		if (show)
			return cmd_show(db, argv + optind, argc - optind, o.json);
		return cmd_build(db, argv + optind, argc - optind);
	}
	if (optind < argc)
		cli_usage(usage_line, "unexpected argument '%s'", argv[optind]);
	if (list || stats) {
		free(o.exclude);
		return list ? cmd_list(db, o.json) : cmd_stats(db, o.json);
	}
	if (o.json && !o.ids)
		cli_usage(usage_line, "--json goes with --ids");
	if (o.text && !o.ids)
		cli_usage(usage_line, "--text goes with --ids");
	if (query && o.out_dir)
		cli_usage(usage_line, "--out-dir is for batch queries (stdin); with --query use -o FILE");
	if (!query && !o.ids && !o.out_dir)
		cli_usage(usage_line, "batch queries (stdin) need --out-dir DIR or --ids");
	if (!query && o.out && !o.ids)
		cli_usage(usage_line, "batch queries write one file per query: use --out-dir DIR, not -o");
	if (o.ids && o.out_dir)
		cli_usage(usage_line, "--ids prints to stdout or -o FILE, not --out-dir");
	o.db = db;
	int rc = cmd_query(db, &o, query);
	free(o.exclude);
	return rc;
}
