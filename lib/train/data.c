/*
 * data.c — the data sources of a training run (lib/train/data.h): lm's
 * documents from a token stream, bp2c's and bptc's examples from JSON
 * lines, the chunks' records by id. Moved from tools/ss-train.c (issue 33
 * item 5); the messages are the tool's.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "train/data.h"

#define NOMEM(errmsg) ss_errf(errmsg, SS_ERR_NOMEM, "out of memory")

int train_tok_get(train_tok *tk, ss_tokenizer **out, char *errmsg)
{
	if (!tk->tok && tk->env->tokenizer)
		tk->tok = tk->env->tokenizer(tk->env->ctx);
	if (!tk->tok)
		return ss_errf(errmsg, SS_ERR_NOTFOUND, "no tokenizer");
	*out = tk->tok;
	return 0;
}

/* ------------------------------------------------- lm: token documents */

/* The index of the first token after the first occurrence of s->sep in the
 * current document (0 without loss_after; n_tokens when it does not occur:
 * the document then counts no target). */
static int64_t lm_loss_from(const lm_source *s)
{
	if (!s->sep)
		return 0;
	const int32_t *x = s->doc.tokens;
	for (int64_t i = 0; i + (int64_t)s->nsep <= s->doc.n_tokens; i++)
		if (!memcmp(x + i, s->sep, s->nsep * sizeof *x))
			return i + (int64_t)s->nsep;
	return s->doc.n_tokens;
}

/* Reads the next document of 2 tokens or more, from the start again at the
 * end (epoch + 1). */
static int lm_read_doc(lm_source *s, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	for (;;) {
		const ss_record *rec;
		int rc = ss_reader_next(s->r, &rec);
		if (rc < 0)
			return ss_errf(errmsg, rc, "%s: %s", s->path, ss_reader_error(s->r));
		if (rc == 0) {
			if (!s->any)
				return ss_errf(errmsg, SS_ERR_FORMAT, "%s: no document of 2 tokens or more",
					       s->path);
			if ((rc = ss_reader_seek(s->r, 0)))
				return ss_errf(errmsg, rc, "%s: cannot read it again from the start "
					       "(%s): give a regular file", s->path, ss_strerror(rc));
			s->epoch++;
			s->any = 0;
			continue;
		}
		ss_tokens_free(&s->doc);
		unsigned long long index = (unsigned long long)ss_record_index(rec);
		if (strcmp(ss_record_format(rec), SS_FORMAT_TOKENS))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: record %llu: a %s record, expected "
				       "tokens (ss-tokens(5))", s->path, index, ss_record_format(rec));
		if ((rc = ss_record_tokens(rec, &s->doc, err)))
			return ss_errf(errmsg, rc, "%s: record %llu: %s", s->path, index, err);
		for (int64_t i = 0; i < s->doc.n_tokens; i++)
			if (s->doc.tokens[i] < 0 || s->doc.tokens[i] >= s->vocab)
				return ss_errf(errmsg, SS_ERR_FORMAT, "%s: record %llu: token %lld is %d, "
					       "outside the model's vocabulary [0, %d)", s->path, index,
					       (long long)i, (int)s->doc.tokens[i], (int)s->vocab);
		s->doc_offset = (int64_t)ss_record_offset(rec);
		s->pos = 0;
		s->loss_from = lm_loss_from(s);
		if (s->doc.n_tokens >= 2) {
			s->any = 1;
			return 0;
		}
	}
}

int lm_open(lm_source *s, const ss_train_state *st, int32_t vocab, train_tok *tk,
	    uint64_t max_record, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	int rc;
	memset(s, 0, sizeof *s);
	s->path = st->data;
	s->vocab = vocab;
	if (st->loss_after) {
		ss_tokenizer *tok;
		if ((rc = train_tok_get(tk, &tok, errmsg)))
			return rc;
		rc = ss_tokenizer_encode(tok, st->loss_after, strlen(st->loss_after), &s->sep,
					 &s->nsep, err);
		if (rc)
			return ss_errf(errmsg, rc, "--loss-after: %s", err[0] ? err : ss_strerror(rc));
		if (!s->nsep)
			return ss_errf(errmsg, SS_ERR_INVALID, "--loss-after: the text is no token");
	}
	s->epoch = st->epoch;
	if ((rc = ss_reader_open(&s->r, st->data, max_record, err)))
		return ss_errf(errmsg, rc, "%s: %s", st->data, err);
	if (st->offset < 0)
		return lm_read_doc(s, errmsg);
	if ((rc = ss_reader_seek(s->r, (uint64_t)st->offset)))
		return ss_errf(errmsg, rc, "%s: cannot seek to byte %lld to resume", s->path,
			       (long long)st->offset);
	s->any = 1;
	if ((rc = lm_read_doc(s, errmsg)))
		return rc;
	if (s->doc_offset != st->offset || st->pos >= s->doc.n_tokens - 1)
		return ss_errf(errmsg, SS_ERR_MISMATCH, "%s: not the stream the run was saved with "
			       "(byte %lld)", s->path, (long long)st->offset);
	s->pos = st->pos;
	return 0;
}

int lm_take(lm_source *s, train_batch *b, int64_t seq_len, int64_t room, char *errmsg)
{
	int rc;
	if (s->pos + 1 >= s->doc.n_tokens && (rc = lm_read_doc(s, errmsg)))
		return rc;
	int64_t n = s->doc.n_tokens - 1 - s->pos;
	if (n > seq_len)
		n = seq_len;
	if (n > room)
		return 0;
	const int32_t *x = s->doc.tokens + s->pos;
	memcpy(b->tokens + b->T, x, (size_t)n * sizeof *x);
	/* Target i is token pos + 1 + i of the document. */
	for (int64_t i = 0; i < n; i++) {
		int counted = s->pos + 1 + i >= s->loss_from;
		b->targets[b->T + i] = counted ? x[i + 1] : -1;
		b->ntargets += counted;
	}
	b->T += n;
	b->seq_start[++b->nseq] = b->T;
	s->pos += n;
	return 1;
}

int lm_take_raw(lm_source *s, int32_t *out, int64_t n, int64_t *got, char *errmsg)
{
	int rc;
	if (s->pos + 2 > s->doc.n_tokens && (rc = lm_read_doc(s, errmsg)))
		return rc;
	int64_t k = s->doc.n_tokens - s->pos;
	if (k > n)
		k = n;
	memcpy(out, s->doc.tokens + s->pos, (size_t)k * sizeof *out);
	s->pos += k;
	*got = k;
	return 0;
}

int lm_tell(lm_source *s, ss_train_state *st, char *errmsg)
{
	int rc;
	if (s->pos + 1 >= s->doc.n_tokens && (rc = lm_read_doc(s, errmsg)))
		return rc;
	st->offset = s->doc_offset;
	st->pos = s->pos;
	st->epoch = s->epoch;
	return 0;
}

void lm_close(lm_source *s)
{
	ss_tokens_free(&s->doc);
	ss_reader_close(s->r);
	free(s->sep);
	memset(s, 0, sizeof *s);
}

/* ------------------------------------ bp2c / bptc: retrieval examples */

void train_example_free(train_example *e)
{
	free(e->q);
	free(e->c);
	for (size_t i = 0; i < e->n_chunks; i++)
		free(e->chunks[i]);
	free(e->chunks);
	memset(e, 0, sizeof *e);
}

/* The next JSON object of s's lines into *o (NULL at the end), under the
 * tools' one JSON-lines rule (ss_jsonl_reader), s->next.where set to
 * "FILE: line N". */
static int ex_next_object(ex_source *s, cJSON **o, char *errmsg)
{
	/* an ss-eval recall query's "key", "gold" and "gold_pos" are known too
	 * (not read): its queries are fine-tuning examples as they are
	 * (pipelines/recall.mk) */
	static const char *const keys[] = { "id", "query", "query_tokens", "continuation",
					    "continuation_tokens", "chunks", "key", "gold",
					    "gold_pos", NULL };
	int rc = ss_jsonl_reader_next(s->r, keys, "{\"query\": \"text\", \"continuation\": \"text\", "
				      "\"chunks\": [\"id\"]}", o, errmsg);
	snprintf(s->next.where, sizeof s->next.where, "%s", ss_jsonl_reader_where(s->r));
	return rc < 0 ? rc : 0;
}

/* o[key_tokens] as token ids (*ids NULL when absent). */
static int json_token_ids(const cJSON *o, const char *key_tokens, int32_t **ids, size_t *n,
			  const char *where, char *errmsg)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key_tokens), *e;
	*ids = NULL;
	if (!t)
		return 0;
	if (!cJSON_IsArray(t))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"%s\" must be an array of token ids", where,
			       key_tokens);
	size_t k = (size_t)cJSON_GetArraySize(t), i = 0;
	if (!(*ids = malloc((k ? k : 1) * sizeof **ids)))
		return NOMEM(errmsg);
	cJSON_ArrayForEach(e, t) {
		if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int32_t)e->valuedouble)
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"%s\" must be an array of token ids",
				       where, key_tokens);
		(*ids)[i++] = (int32_t)e->valuedouble;
	}
	*n = k;
	return 0;
}

/* o's token ids under key_tokens, or its text under key encoded. */
static int ex_ids(ex_source *s, const cJSON *o, const char *key, const char *key_tokens,
		  int32_t **ids, size_t *n, const char *where, char *errmsg)
{
	if (cJSON_GetObjectItemCaseSensitive(o, key) && cJSON_GetObjectItemCaseSensitive(o, key_tokens))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: both \"%s\" and \"%s\": give one", where, key, key_tokens);
	int rc = json_token_ids(o, key_tokens, ids, n, where, errmsg);
	if (rc)
		return rc;
	if (!*ids) {
		const cJSON *str = cJSON_GetObjectItemCaseSensitive(o, key);
		char err[SS_ERRMSG_MAX] = "";
		ss_tokenizer *tok;
		if (!cJSON_IsString(str))
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: missing \"%s\" (a string) or \"%s\"",
				       where, key, key_tokens);
		if ((rc = train_tok_get(s->tk, &tok, errmsg)))
			return rc;
		rc = ss_tokenizer_encode(tok, str->valuestring, strlen(str->valuestring), ids, n, err);
		if (rc)
			return ss_errf(errmsg, rc, "%s: %s", where, err[0] ? err : ss_strerror(rc));
	}
	for (size_t i = 0; i < *n; i++)
		if ((*ids)[i] < 0 || (*ids)[i] >= s->vocab)
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s token %zu is %d, outside the "
				       "model's vocabulary [0, %d)", where, key, i, (int)(*ids)[i],
				       (int)s->vocab);
	return 0;
}

/* Fills e (its where set) from o. */
static int ex_parse(ex_source *s, const cJSON *o, train_example *e, char *errmsg)
{
	const char *where = e->where;
	int rc;
	if ((rc = ex_ids(s, o, "query", "query_tokens", &e->q, &e->nq, where, errmsg)) ||
	    (rc = ex_ids(s, o, "continuation", "continuation_tokens", &e->c, &e->nc, where, errmsg)))
		return rc;
	if (!e->nq || !e->nc)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: empty %s", where,
			       !e->nq ? "query" : "continuation");
	const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "chunks"), *x;
	if (!cJSON_IsArray(ch))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: missing \"chunks\" (an array of chunk ids)",
			       where);
	size_t n = (size_t)cJSON_GetArraySize(ch);
	if (!(e->chunks = calloc(n ? n : 1, sizeof *e->chunks)))
		return NOMEM(errmsg);
	cJSON_ArrayForEach(x, ch) {
		char buf[32];
		if (cJSON_IsString(x))
			e->chunks[e->n_chunks] = strdup(x->valuestring);
		else if (cJSON_IsNumber(x))
			snprintf(buf, sizeof buf, "%.17g", x->valuedouble),
				e->chunks[e->n_chunks] = strdup(buf);
		else
			return ss_errf(errmsg, SS_ERR_FORMAT, "%s: \"chunks\" entry %zu is not an id",
				       where, e->n_chunks);
		if (!e->chunks[e->n_chunks++])
			return NOMEM(errmsg);
	}
	return 0;
}

/* Reads the next example into s->next, from the start again at the end. */
static int ex_read(ex_source *s, char *errmsg)
{
	for (;;) {
		int64_t off = ss_jsonl_reader_tell(s->r);
		cJSON *o;
		int rc = ex_next_object(s, &o, errmsg);
		if (rc)
			return rc;
		if (!o) {
			if (!s->any)
				return ss_errf(errmsg, SS_ERR_FORMAT, "%s: no example", s->path);
			if (ss_jsonl_reader_seek(s->r, 0))
				return ss_errf(errmsg, SS_ERR_IO, "%s: cannot read it again from the "
					       "start: give a regular file", s->path);
			s->epoch++;
			s->any = 0;
			continue;
		}
		rc = ex_parse(s, o, &s->next, errmsg);
		cJSON_Delete(o);
		if (rc)
			return rc;
		s->next_offset = off;
		s->any = 1;
		return 0;
	}
}

int ex_open(ex_source *s, const ss_train_state *st, int32_t vocab, train_tok *tk, char *errmsg)
{
	memset(s, 0, sizeof *s);
	s->path = st->data;
	s->tk = tk;
	s->vocab = vocab;
	s->epoch = st->epoch;
	int rc = ss_jsonl_reader_open(&s->r, st->data, errmsg);
	if (rc)
		return rc;
	if (st->offset > 0) {
		if (ss_jsonl_reader_seek(s->r, st->offset))
			return ss_errf(errmsg, SS_ERR_IO, "%s: cannot seek to byte %lld to resume",
				       st->data, (long long)st->offset);
		s->any = 1;
	}
	return ex_read(s, errmsg);
}

int ex_take(ex_source *s, train_example *out, char *errmsg)
{
	*out = s->next;
	memset(&s->next, 0, sizeof s->next);
	return ex_read(s, errmsg);
}

void ex_tell(const ex_source *s, ss_train_state *st)
{
	st->offset = s->next_offset;
	st->pos = 0;
	st->epoch = s->epoch;
}

void ex_close(ex_source *s)
{
	train_example_free(&s->next);
	ss_jsonl_reader_close(s->r);
	memset(s, 0, sizeof *s);
}

/* ------------------------------------------------ chunks' records by id */

static int ref_cmp(const void *a, const void *b)
{
	return strcmp(((const chunk_ref *)a)->id, ((const chunk_ref *)b)->id);
}

/* The id of record rec (*id malloc'd), checked against format, fingerprint
 * and want. */
static int db_id(chunk_db *db, const ss_record *rec, const char *format, const char *fingerprint,
		 const ss_state_dims *want, char **id, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	const char *path = db->path;
	unsigned long long i = (unsigned long long)ss_record_index(rec);
	int rc;
	if (strcmp(ss_record_format(rec), format))
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: record %llu: a %s record, expected %s",
			       path, i, ss_record_format(rec), format);
	if (!strcmp(format, SS_FORMAT_STATES)) {
		ss_state s;
		if ((rc = ss_record_state_meta(rec, &s, err)))
			return ss_errf(errmsg, rc, "%s: record %llu: %s", path, i, err);
		if (strcmp(s.fingerprint, fingerprint))
			rc = ss_errf(errmsg, SS_ERR_MISMATCH, "%s: record %llu: made by model %s, not "
				     "by the model trained (%s)", path, i, s.fingerprint, fingerprint);
		else if (ss_state_dims_check(&s.dims, want, err))
			rc = ss_errf(errmsg, SS_ERR_MISMATCH, "%s: record %llu: not the dims of the "
				     "model trained (%s)", path, i, err);
		else
			*id = strdup(s.id ? s.id : "");
		ss_state_free(&s);
	} else {
		ss_tokens t;
		if ((rc = ss_record_tokens(rec, &t, err)))
			return ss_errf(errmsg, rc, "%s: record %llu: %s", path, i, err);
		*id = strdup(t.id ? t.id : "");
		if (t.n_tokens > db->max_tokens)
			db->max_tokens = t.n_tokens;
		ss_tokens_free(&t);
	}
	if (!rc && !*id)
		return NOMEM(errmsg);
	return rc;
}

int db_open(chunk_db *db, const char *path, const char *format, const char *fingerprint,
	    const ss_model_config *cfg, uint64_t max_record, char *errmsg)
{
	char err[SS_ERRMSG_MAX] = "";
	size_t cap = 0;
	ss_state_dims want;
	ss_model dims_of = { .cfg = *cfg };
	int rc;
	memset(db, 0, sizeof *db);
	db->path = path;
	ss_model_state_dims(&dims_of, &want);
	if ((rc = ss_reader_open(&db->r, path, max_record, err)))
		return ss_errf(errmsg, rc, "%s: %s", path, err);
	if (!ss_reader_seekable(db->r))
		return ss_errf(errmsg, SS_ERR_INVALID, "%s: not a regular file (its records are "
			       "read by id)", path);
	const ss_record *rec;
	while ((rc = ss_reader_next_meta(db->r, &rec)) > 0) {
		char *id = NULL;
		if ((rc = db_id(db, rec, format, fingerprint, &want, &id, errmsg)))
			return rc;
		if (db->n == cap) {
			size_t c = cap ? 2 * cap : 16;
			chunk_ref *t = realloc(db->ref, c * sizeof *t);
			if (!t) {
				free(id);
				return NOMEM(errmsg);
			}
			db->ref = t;
			cap = c;
		}
		db->ref[db->n].id = id;
		db->ref[db->n++].offset = ss_record_offset(rec);
	}
	if (rc < 0)
		return ss_errf(errmsg, rc, "%s: %s", path, ss_reader_error(db->r));
	qsort(db->ref, db->n, sizeof *db->ref, ref_cmp);
	return 0;
}

int db_get(chunk_db *db, const char *id, const char *where, const ss_record **rec, char *errmsg)
{
	chunk_ref key = { (char *)id, 0 };
	const chunk_ref *f = bsearch(&key, db->ref, db->n, sizeof *db->ref, ref_cmp);
	if (!f)
		return ss_errf(errmsg, SS_ERR_NOTFOUND, "%s: chunk \"%s\" is not in %s", where, id,
			       db->path);
	if (ss_reader_seek(db->r, f->offset) || ss_reader_next(db->r, rec) != 1)
		return ss_errf(errmsg, SS_ERR_FORMAT, "%s: %s", db->path, ss_reader_error(db->r));
	return 0;
}

void db_close(chunk_db *db)
{
	for (size_t i = 0; i < db->n; i++)
		free(db->ref[i].id);
	free(db->ref);
	ss_reader_close(db->r);
	memset(db, 0, sizeof *db);
}
