/* model_cli.c — shared helpers of the model-running tools; see model_cli.h. */
#include "model_cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"

ss_model *mcli_load_model(const char *dir, unsigned flags, const char *weights_dtype,
			  const char *usage)
{
	ss_model *m;
	char err[SS_ERRMSG_MAX] = "";
	ss_model_opts o = { .flags = flags };
	if (weights_dtype && strcmp(weights_dtype, "auto")) {
		o.weights_dtype = (ss_dtype)cli_dtype("--weights-dtype", weights_dtype,
						      SS_DTYPE_WEIGHTS, usage); /* or auto */
		o.flags |= SS_MODEL_WEIGHTS_DTYPE;
	}
	int rc = ss_model_load_opts(&m, dir, &o, err);
	if (rc)
		cli_die("%s", err[0] ? err : ss_strerror(rc));
	return m;
}

void mcli_check_state(const ss_model *m, const char *model_dir, const ss_state *s,
		      const char *file, uint64_t index)
{
	if (strncmp(s->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX) != 0)
		cli_die("%s: record %llu: state from another model (fingerprint %s; model %s has %s)",
			file, (unsigned long long)index, s->fingerprint[0] ? s->fingerprint : "(none)",
			model_dir, m->fingerprint);
	ss_state_dims d;
	char err[SS_ERRMSG_MAX];
	ss_model_state_dims(m, &d);
	if (ss_state_dims_check(&s->dims, &d, err))
		cli_die("%s: record %llu: state dims differ from model %s: %s", file,
			(unsigned long long)index, model_dir, err);
}

int32_t *mcli_parse_ids(const char *opt, const char *s, size_t *n, const char *usage)
{
	size_t cap = 16, k = 0;
	int32_t *ids = malloc(cap * sizeof *ids);
	if (!ids)
		cli_die("out of memory");
	const char *p = s;
	for (;;) {
		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (errno || end == p || v < 0 || v > INT32_MAX ||
		    (*end && *end != ',' && !isspace((unsigned char)*end)))
			cli_usage(usage, "%s: '%s' is not a list of token ids (e.g. 1,2,3)", opt, s);
		if (k == cap) {
			cap *= 2;
			int32_t *t = realloc(ids, cap * sizeof *ids);
			if (!t)
				cli_die("out of memory");
			ids = t;
		}
		ids[k++] = (int32_t)v;
		p = end;
	}
	*n = k;
	if (!k) {
		free(ids);
		return NULL;
	}
	return ids;
}

/* "64 MiB" for whole MiB, else "N bytes". */
static const char *size_str(uint64_t n, char buf[32])
{
	if (n && n % (UINT64_C(1) << 20) == 0)
		snprintf(buf, 32, "%llu MiB", (unsigned long long)(n >> 20));
	else
		snprintf(buf, 32, "%llu bytes", (unsigned long long)n);
	return buf;
}

/* Dies "PATH: larger than MAX, the limit for WHAT". */
static void __attribute__((noreturn)) too_large(const char *path, uint64_t max, const char *what)
{
	char b[32];
	cli_die("%s: larger than %s, the limit for %s", path, size_str(max, b), what);
}

/* Dies when f is a regular file of more than max bytes: the bound is
 * reported before anything is read (a pipe is counted as it is read). */
static void check_size(FILE *f, const char *path, uint64_t max, const char *what)
{
	struct stat sb;
	if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max)
		too_large(path, max, what);
}

char *mcli_read_file_max(const char *path, uint64_t max, const char *what, size_t *len)
{
	FILE *f = cli_open_regular(path);
	check_size(f, path, max, what);
	/* At most max + 1 bytes are read: one past the bound shows it passed. */
	uint64_t cap_max = max < SIZE_MAX - 2 ? max + 2 : SIZE_MAX;
	size_t cap = cap_max < 4096 ? (size_t)cap_max : 4096, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			cli_die("%s: out of memory", path);
		n += fread(buf + n, 1, cap - n - 1, f);
		if (n > max)
			too_large(path, max, what);
		if (n < cap - 1)
			break;
		cap = (uint64_t)cap * 2 < cap_max ? cap * 2 : (size_t)cap_max;
		char *t = realloc(buf, cap);
		if (!t)
			free(buf);
		buf = t;
	}
	if (ferror(f))
		cli_die("%s: read error: %s", path, strerror(errno));
	if (f != stdin)
		fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

char *mcli_read_file(const char *path, size_t *len)
{
	return mcli_read_file_max(path, SIZE_MAX, NULL, len);
}

int32_t mcli_vocab(const ss_model *m)
{
	int32_t v = m->cfg.vocab_size;
	if (v <= 0 || v > m->cfg.vocab_padded)
		v = m->cfg.vocab_padded;
	return v;
}

int32_t mcli_gen_vocab(const ss_model *m, const ss_tokenizer *tok)
{
	int32_t v = mcli_vocab(m);
	return tok && ss_tokenizer_n_vocab(tok) < v ? ss_tokenizer_n_vocab(tok) : v;
}

void mcli_states_open(mcli_states *src, const char *path, int implicit)
{
	memset(src, 0, sizeof *src);
	src->path = path;
	src->implicit = implicit;
	if (!path)
		return;
	char err[SS_ERRMSG_MAX] = "";
	if (ss_reader_open(&src->r, path, cli_max_record(), err))
		cli_die("%s: %s", path, err);
}

int mcli_states_next(mcli_states *src, const ss_model *m, const char *model_dir, ss_state *s)
{
	if (src->done)
		return 0;
	if (!src->path) {
		ss_state_dims d;
		ss_model_state_dims(m, &d);
		if (ss_state_alloc(s, &d) || !(s->id = strdup("zero")))
			cli_die("out of memory");
		memcpy(s->fingerprint, m->fingerprint, SS_FINGERPRINT_MAX);
		src->done = 1;
		src->count++;
		return 1;
	}
	const ss_record *rec;
	int rc = ss_reader_next(src->r, &rec);
	if (rc < 0)
		cli_die("%s: %s", src->path, ss_reader_error(src->r));
	if (rc == 0) {
		src->done = 1;
		/* An empty input is no state, not the zero state: a pipeline
		 * whose retrieval found nothing must not go on as if it had. */
		if (src->count == 0)
			cli_die("%s: no state records%s", src->path,
				src->implicit ? " (standard input is empty; --no-state starts from the zero state)" : "");
		return 0;
	}
	char err[SS_ERRMSG_MAX] = "";
	if (strcmp(ss_record_format(rec), SS_FORMAT_STATES))
		cli_die("%s: record %llu (byte offset %llu): not a state record (format \"%s\")",
			src->path, (unsigned long long)ss_record_index(rec),
			(unsigned long long)ss_record_offset(rec), ss_record_format(rec));
	if (ss_record_state(rec, s, err))
		cli_die("%s: record %llu (byte offset %llu): %s", src->path,
			(unsigned long long)ss_record_index(rec),
			(unsigned long long)ss_record_offset(rec), err);
	mcli_check_state(m, model_dir, s, src->path, ss_record_index(rec));
	if (!s->id && !(s->id = strdup("")))
		cli_die("out of memory");
	src->count++;
	return 1;
}

void mcli_states_close(mcli_states *src)
{
	if (src->r)
		ss_reader_close(src->r);
	src->r = NULL;
}



ss_device *mcli_device(const char *want, const char *usage)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_device *d;
	int rc = ss_device_open(&d, want, err);
	if (rc == SS_ERR_INVALID)
		cli_usage(usage, "--device: '%s' is not cpu, cuda, cuda:N or auto", want);
	if (rc)
		cli_die("--device %s: %s", want, err[0] ? err : ss_strerror(rc));
	if (cli_verbosity >= 2)
		fprintf(stderr, "%s: device %s\n", cli_prog, ss_device_name(d));
	return d;
}

ss_forward_ctx *mcli_forward_ctx(const ss_model *m, const char *model_dir, ss_device *dev,
				 int threads)
{
	char err[SS_ERRMSG_MAX] = "";
	ss_forward_ctx *ctx;
	if (ss_forward_ctx_init_dev(&ctx, m, dev, threads, 0, err))
		cli_die("%s: %s", model_dir, err);
	return ctx;
}

void mcli_jsonl_open(mcli_jsonl *r, const char *path)
{
	char err[SS_ERRMSG_MAX] = "";
	memset(r, 0, sizeof *r);
	r->path = path;
	r->where = "";
	if (ss_jsonl_reader_open_file(&r->r, cli_open_regular(path), path, err))
		cli_die("%s", err);
}

void mcli_jsonl_limit(mcli_jsonl *r, uint64_t max, const char *what)
{
	char err[SS_ERRMSG_MAX] = "";
	if (ss_jsonl_reader_limit(r->r, max, what, err))
		cli_die("%s", err);
}

void *mcli_grow(void *p, size_t n, size_t *cap, size_t elem)
{
	if (n < *cap)
		return p;
	size_t c = *cap ? 2 * *cap : 16;
	void *t = realloc(p, c * elem);
	if (!t)
		cli_die("out of memory");
	*cap = c;
	return t;
}

cJSON *mcli_jsonl_next(mcli_jsonl *r, const char *expected, const char *const *keys)
{
	char err[SS_ERRMSG_MAX] = "";
	cJSON *o;
	int rc = ss_jsonl_reader_next(r->r, keys, expected, &o, err);
	r->where = ss_jsonl_reader_where(r->r);
	r->lineno = ss_jsonl_reader_lineno(r->r);
	if (rc < 0)
		cli_die("%s", err);
	return o;
}

char *mcli_jsonl_id(const mcli_jsonl *r, const cJSON *obj)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "id");
	char *id = NULL;
	int64_t x;
	if (cJSON_IsString(v))
		id = strdup(v->valuestring);
	else if (cJSON_IsNumber(v) && !ss_json_int(v, INT64_MIN, INT64_MAX, &x)) /* exact: 2^53 + 1 too */
		id = asprintf(&id, "%lld", (long long)x) < 0 ? NULL : id;
	else if (cJSON_IsNumber(v))
		id = asprintf(&id, "%.17g", v->valuedouble) < 0 ? NULL : id;
	else if (!v)
		id = asprintf(&id, "%s:%ld", r->path, r->lineno) < 0 ? NULL : id;
	else
		cli_die("%s: \"id\" must be a string or a number", r->where);
	if (!id)
		cli_die("out of memory");
	return id;
}

void mcli_jsonl_close(mcli_jsonl *r)
{
	ss_jsonl_reader_close(r->r);
	r->r = NULL;
}

int32_t *mcli_json_token_ids(const cJSON *obj, const char *key_tokens, size_t *n, const char *where)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, key_tokens);
	if (!t)
		return NULL;
	if (!cJSON_IsArray(t))
		cli_die("%s: \"%s\" must be an array of token ids", where, key_tokens);
	size_t k = (size_t)cJSON_GetArraySize(t), i = 0;
	int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
	if (!ids)
		cli_die("out of memory");
	const cJSON *e;
	cJSON_ArrayForEach(e, t) {
		if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int32_t)e->valuedouble)
			cli_die("%s: \"%s\" must be an array of token ids", where, key_tokens);
		ids[i++] = (int32_t)e->valuedouble;
	}
	*n = k;
	return ids;
}
