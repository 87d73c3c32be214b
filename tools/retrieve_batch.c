/*
 * retrieve_batch.c — ss-retrieve query's batch mode: one query a line of
 * stdin, plain text or a JSON object {"id", "query", "exclude", "k"}; with
 * --out-dir the whole batch read first and refused when two queries share
 * an id. See man/ss-retrieve.1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrieve.h"

void retrieve_batch_query_free(batch_query *b)
{
	cJSON_Delete(b->j);
	free(b->exclude);
	memset(b, 0, sizeof *b);
}

const char *retrieve_batch_parse(const char *line, size_t len, unsigned long long lineno, const qopts *o,
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
		retrieve_batch_query_free(b);
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
		return retrieve_run_query(ix, o, qid, p, o->k, o->exclude, o->n_exclude);
	}
	batch_query b;
	const char *why = retrieve_batch_parse(line, len, lineno, o, &b);
	if (why) {
		cli_warn("-: line %llu: %s (a query line is plain text, or a JSON object such as "
			 "{\"id\": \"q1\", \"query\": \"text to search\", \"exclude\": [\"doc#3\"], \"k\": 5})",
			 lineno, why);
		return 1;
	}
	int bad = retrieve_run_query(ix, o, b.qid, b.text, b.k, b.exclude, b.n_exclude);
	retrieve_batch_query_free(&b);
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
int retrieve_run_batch(ss_index *ix, qopts *o)
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
			if (!retrieve_batch_parse(line, (size_t)len, lineno, o, &b)) {
				h->qid = strdup(b.qid);
				retrieve_batch_query_free(&b);
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
