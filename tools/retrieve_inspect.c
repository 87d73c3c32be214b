/*
 * retrieve_inspect.c — ss-retrieve's --index list (shards, @FILE lists)
 * opened as one index, and the commands that read it without a query:
 * list, show, stats. See man/ss-retrieve.1 and lib/ss_index.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrieve.h"

/* The --index paths (shards), @FILE lists expanded, in the order given. */
char **retrieve_dbs;
int retrieve_n_dbs;

void retrieve_index_add(const char *arg)
{
	cli_index_add(arg, &retrieve_dbs, &retrieve_n_dbs);
}

/* The indexes as one (ss_index_open_shards); an error names the shard. */
ss_index *retrieve_open(const char *db)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix;
	if (ss_index_open_shards(&ix, (const char *const *)retrieve_dbs, retrieve_n_dbs, em)) {
		if (retrieve_n_dbs == 1)
			cli_die("%s: %s", db, em);
		cli_die("%s", em);
	}
	return ix;
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

int retrieve_list(const char *db, int json)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix = retrieve_open(db);
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

int retrieve_show(const char *db, char **ids, int n_ids, int json)
{
	char em[SS_ERRMSG_MAX];
	ss_index *ix = retrieve_open(db);
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

int retrieve_stats(const char *db, int json)
{
	char em[SS_ERRMSG_MAX], dtype[16];
	ss_index *ix = retrieve_open(db);
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
