/*
 * train_state.c — trainer_state.json: ss-train's run state written as JSON
 * and read back with every field range-checked (train_state.h).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_state.h"

const char *const train_objective_names[OBJ_COUNT] = { "lm", "bp2c", "bptc", "birdie" };

/* b = v in the fewest significant digits (15..17) that read back as v
 * exactly (add_number: o[key] = v so written). cJSON's own printing stops
 * at 15 when the value reads back within a relative epsilon, which loses
 * the last bits of an lr (a resumed run would not be bit-identical; found
 * by tests/fuzz/trainstate.c), and digits of a byte offset past 10^15. */
static void exact_digits(char b[40], double v)
{
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(b, 40, "%.*g", digits, v);
		if (strtod(b, NULL) == v)
			break;
	}
}

static void add_number(cJSON *o, const char *key, double v)
{
	char b[40];
	exact_digits(b, v);
	cJSON_AddRawToObject(o, key, b);
}

/* An array of n numbers, each read back exactly (as add_number's). */
static cJSON *numbers(const double *v, int64_t n)
{
	cJSON *a = cJSON_CreateArray();
	for (int64_t i = 0; a && i < n; i++) {
		char b[40];
		exact_digits(b, v[i]);
		if (!cJSON_AddItemToArray(a, cJSON_CreateRaw(b))) {
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

/* birdie's scheduler: "birdie": {"fixed", "every", "action", "loss",
 * "history": [rows of 3·K]}. */
static void add_birdie(cJSON *o, const run_state *r)
{
	const int K = SS_TRAIN_BIRDIE_CONFIGS;
	cJSON *b = cJSON_AddObjectToObject(o, "birdie"), *h;
	if (!b)
		return;
	cJSON_AddBoolToObject(b, "fixed", r->birdie_fixed);
	add_number(b, "every", (double)r->birdie_every);
	cJSON_AddItemToObject(b, "action", numbers(r->birdie_action, K));
	cJSON_AddItemToObject(b, "loss", numbers(r->birdie_loss, K));
	if (r->birdie_only) {
		cJSON *a = cJSON_AddArrayToObject(b, "only");
		for (int i = 0; a && i < K; i++)
			if (r->birdie_only >> i & 1)
				cJSON_AddItemToArray(a, cJSON_CreateString(ss_train_birdie_config(i)));
	}
	if (!(h = cJSON_AddArrayToObject(b, "history")))
		return;
	for (int64_t t = 0; t < r->birdie_nhist; t++)
		cJSON_AddItemToArray(h, numbers(r->birdie_hist + t * 3 * K, 3 * K));
}

cJSON *train_state_json(const run_state *r)
{
	char u[32];
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "objective", train_objective_names[r->objective]);
	add_number(o, "step", (double)r->step);
	add_number(o, "steps", (double)r->steps);
	add_number(o, "lr", r->lr);
	add_number(o, "min_lr", r->min_lr);
	add_number(o, "warmup", (double)r->warmup);
	add_number(o, "weight_decay", r->weight_decay);
	add_number(o, "clip", r->clip);
	add_number(o, "seq_len", (double)r->seq_len);
	add_number(o, "batch_tokens", (double)r->batch_tokens);
	add_number(o, "batch_seqs", (double)r->batch_seqs);
	add_number(o, "max_k", (double)r->max_k);
	snprintf(u, sizeof u, "%llu", (unsigned long long)r->seed);
	cJSON_AddStringToObject(o, "seed", u);
	snprintf(u, sizeof u, "%llu", (unsigned long long)r->rng);
	cJSON_AddStringToObject(o, "rng", u);
	cJSON_AddStringToObject(o, "mode", ss_compose_mode_name(r->mode));
	cJSON_AddStringToObject(o, "save_dtype", ss_dtype_name(r->save_dtype));
	cJSON_AddStringToObject(o, "data", r->data);
	if (r->states)
		cJSON_AddStringToObject(o, "states", r->states);
	if (r->chunk_tokens)
		cJSON_AddStringToObject(o, "chunk_tokens", r->chunk_tokens);
	if (r->loss_after)
		cJSON_AddStringToObject(o, "loss_after", r->loss_after);
	cJSON_AddStringToObject(o, "base_fingerprint", r->base_fingerprint);
	add_number(o, "epoch", (double)r->epoch);
	add_number(o, "offset", (double)r->offset);
	add_number(o, "pos", (double)r->pos);
	if (r->objective == OBJ_BIRDIE)
		add_birdie(o, r);
	return o;
}

/* The parse: the first error is kept (rc, errmsg); the readers then return
 * a value in range, so that what follows stays defined. */
typedef struct {
	const cJSON *o;
	const char *path;
	char *errmsg;
	int rc;
} parse;

__attribute__((format(printf, 3, 4)))
static void bad(parse *p, int rc, const char *fmt, ...)
{
	if (p->rc)
		return;
	p->rc = rc;
	int n = snprintf(p->errmsg, SS_ERRMSG_MAX, "%s: ", p->path);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && n < SS_ERRMSG_MAX)
		vsnprintf(p->errmsg + n, SS_ERRMSG_MAX - (size_t)n, fmt, ap);
	va_end(ap);
}

/* The number at `key`: a double in [lo, hi]. */
static double get_real(parse *p, const char *key, double lo, double hi)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(p->o, key);
	if (!cJSON_IsNumber(x))
		bad(p, SS_ERR_FORMAT, x ? "\"%s\" is not a number" : "missing \"%s\" (a number)", key);
	else if (!(x->valuedouble >= lo && x->valuedouble <= hi))
		bad(p, SS_ERR_FORMAT, "\"%s\" is %.17g, not a number in [%g, %g]", key,
		    x->valuedouble, lo, hi);
	else
		return x->valuedouble;
	return lo;
}

/* The number at `key`: a whole number in [lo, hi] (|lo|, |hi| <= 2^53:
 * doubles hold them exactly). */
static int64_t get_int(parse *p, const char *key, int64_t lo, int64_t hi)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(p->o, key);
	if (!cJSON_IsNumber(x)) {
		bad(p, SS_ERR_FORMAT, x ? "\"%s\" is not a number" : "missing \"%s\" (a number)", key);
		return lo;
	}
	double v = x->valuedouble;
	if (!(v >= (double)lo && v <= (double)hi) || v != floor(v)) {
		bad(p, SS_ERR_FORMAT, "\"%s\" is %.17g, not an integer in [%lld, %lld]", key, v,
		    (long long)lo, (long long)hi);
		return lo;
	}
	return (int64_t)v;
}

static const char *get_str(parse *p, const char *key)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(p->o, key);
	if (cJSON_IsString(x))
		return x->valuestring;
	bad(p, SS_ERR_FORMAT, x ? "\"%s\" is not a string" : "missing \"%s\" (a string)", key);
	return "";
}

/* The optional string at `key`: NULL when absent; an error when it is there
 * but not a string, or empty. */
static const char *get_opt_str(parse *p, const char *key)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(p->o, key);
	if (!x)
		return NULL;
	if (!cJSON_IsString(x) || !x->valuestring[0]) {
		bad(p, SS_ERR_FORMAT, "\"%s\" is not a non-empty string", key);
		return NULL;
	}
	return x->valuestring;
}

/* The string at `key` as a whole decimal integer in [0, hi]. */
static uint64_t get_u64(parse *p, const char *key, uint64_t hi)
{
	const char *s = get_str(p, key);
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s < '0' || *s > '9' || v > hi) {
		bad(p, SS_ERR_FORMAT, "\"%s\" is \"%s\", not an integer in [0, %llu]", key, s,
		    (unsigned long long)hi);
		return 0;
	}
	return (uint64_t)v;
}

/* x as n finite numbers in [lo, hi] into v. */
static void get_numbers(parse *p, const cJSON *x, const char *what, double *v, int64_t n,
			double lo, double hi)
{
	if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != n) {
		bad(p, SS_ERR_FORMAT, "\"birdie\": \"%s\" is not an array of %lld numbers", what,
		    (long long)n);
		return;
	}
	int64_t i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, x) {
		if (!cJSON_IsNumber(e) || !(e->valuedouble >= lo && e->valuedouble <= hi)) {
			bad(p, SS_ERR_FORMAT, "\"birdie\": \"%s\"[%lld] is not a number in [%g, %g]",
			    what, (long long)i, lo, hi);
			return;
		}
		v[i++] = e->valuedouble;
	}
}

/* "birdie": the scheduler's state (train_state_json's add_birdie). */
static void get_birdie(parse *p, const cJSON *b, run_state *r)
{
	const int K = SS_TRAIN_BIRDIE_CONFIGS;
	if (!cJSON_IsObject(b)) {
		bad(p, SS_ERR_FORMAT, "objective birdie without \"birdie\" (an object)");
		return;
	}
	parse q = *p;
	q.o = b;
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(b, "fixed");
	if (!cJSON_IsBool(f))
		bad(&q, SS_ERR_FORMAT, "\"birdie\": \"fixed\" is not true or false");
	r->birdie_fixed = cJSON_IsTrue(f);
	r->birdie_every = get_int(&q, "every", 1, INT64_C(1) << 40);
	const cJSON *only = cJSON_GetObjectItemCaseSensitive(b, "only"), *e;
	r->birdie_only = 0;
	if (only && (!cJSON_IsArray(only) || !cJSON_GetArraySize(only)))
		bad(&q, SS_ERR_FORMAT, "\"birdie\": \"only\" is not an array of configuration names");
	cJSON_ArrayForEach(e, only) {
		uint32_t m;
		if (!cJSON_IsString(e) || ss_train_birdie_only(e->valuestring, &m) || (m & (m - 1))) {
			bad(&q, SS_ERR_FORMAT, "\"birdie\": \"only\" holds something not a "
			    "configuration's name");
			break;
		}
		r->birdie_only |= m;
	}
	get_numbers(&q, cJSON_GetObjectItemCaseSensitive(b, "action"), "action", r->birdie_action, K, 0, 1);
	get_numbers(&q, cJSON_GetObjectItemCaseSensitive(b, "loss"), "loss", r->birdie_loss, K, 0, 1e6);
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(b, "history");
	int64_t n = cJSON_GetArraySize(h);
	if (!cJSON_IsArray(h) || n > r->step + 1) {
		bad(&q, SS_ERR_FORMAT, "\"birdie\": \"history\" is not an array of at most "
		    "step + 1 rows");
		n = 0;
	}
	free(r->birdie_hist);
	r->birdie_hist = NULL;
	r->birdie_nhist = 0;
	if (n && !(r->birdie_hist = malloc((size_t)n * 3 * K * sizeof *r->birdie_hist)))
		bad(&q, SS_ERR_NOMEM, "out of memory");
	else
		cJSON_ArrayForEach(e, h) {
			if (q.rc)
				break;
			get_numbers(&q, e, "history", r->birdie_hist + r->birdie_nhist++ * 3 * K, 3 * K,
				    -1e6, 1e6);
		}
	p->rc = q.rc;
}

/* *dst = a copy of s unless *dst is set already (given on the command line). */
static void keep_or_copy(parse *p, char **dst, const char *s)
{
	if (s && !*dst && !(*dst = strdup(s)))
		bad(p, SS_ERR_NOMEM, "out of memory");
}

int train_state_parse(const char *text, size_t len, const char *path, run_state *r, char *errmsg)
{
	const int64_t exact = INT64_C(1) << 53; /* the largest integer a JSON number holds */
	cJSON *o = cJSON_ParseWithLength(text, len);
	parse p = { o, path, errmsg, 0 };
	if (!cJSON_IsObject(o)) {
		bad(&p, SS_ERR_FORMAT, "not a JSON object");
		cJSON_Delete(o);
		return p.rc;
	}
	const char *obj = get_str(&p, "objective");
	r->objective = -1;
	for (int i = 0; i < OBJ_COUNT; i++)
		if (!strcmp(obj, train_objective_names[i]))
			r->objective = i;
	if (r->objective < 0) {
		bad(&p, SS_ERR_FORMAT, "unknown objective \"%s\"", obj);
		r->objective = OBJ_LM;
	}
	/* the bounds of ss-train's cli_long / cli_double */
	r->steps = get_int(&p, "steps", 1, INT64_C(1) << 40);
	r->step = get_int(&p, "step", 0, r->steps);
	r->lr = get_real(&p, "lr", 0, 10);
	r->min_lr = get_real(&p, "min_lr", 0, 10);
	r->warmup = get_int(&p, "warmup", 0, INT64_C(1) << 40);
	r->weight_decay = get_real(&p, "weight_decay", 0, 10);
	r->clip = get_real(&p, "clip", 0, 1e30);
	r->seq_len = get_int(&p, "seq_len", 1, INT64_C(1) << 24);
	r->batch_tokens = get_int(&p, "batch_tokens", 1, INT64_C(1) << 24);
	r->batch_seqs = get_int(&p, "batch_seqs", 1, INT64_C(1) << 16);
	r->max_k = get_int(&p, "max_k", 0, INT64_C(1) << 20);
	if (r->objective == OBJ_LM && r->batch_tokens < r->seq_len)
		bad(&p, SS_ERR_FORMAT, "\"batch_tokens\" %lld is less than \"seq_len\" %lld",
		    (long long)r->batch_tokens, (long long)r->seq_len);
	r->seed = get_u64(&p, "seed", LONG_MAX);
	r->rng = get_u64(&p, "rng", UINT64_MAX);
	const char *mode = get_str(&p, "mode"), *sdtype = get_str(&p, "save_dtype");
	if (ss_compose_mode_parse(mode, &r->mode) || r->mode == SS_COMPOSE_SUM ||
	    r->mode == SS_COMPOSE_MAX) {
		bad(&p, SS_ERR_FORMAT, "\"mode\" is \"%s\", not picaso-r, picaso-s, caso or soup", mode);
		r->mode = SS_COMPOSE_PICASO_R;
	}
	char why[SS_ERRMSG_MAX];
	if (ss_dtype_parse_for(sdtype, SS_DTYPE_SAFETENSORS, &r->save_dtype, why)) {
		bad(&p, SS_ERR_FORMAT, "\"save_dtype\" is \"%s\": %s", sdtype, why);
		r->save_dtype = SS_DTYPE_F32;
	}
	const char *s = get_str(&p, "data");
	if (!s[0])
		bad(&p, SS_ERR_FORMAT, "\"data\" is empty");
	else
		keep_or_copy(&p, &r->data, s);
	keep_or_copy(&p, &r->states, get_opt_str(&p, "states"));
	keep_or_copy(&p, &r->chunk_tokens, get_opt_str(&p, "chunk_tokens"));
	if ((cJSON_HasObjectItem(o, "states") && r->objective != OBJ_BP2C) ||
	    (cJSON_HasObjectItem(o, "chunk_tokens") && r->objective != OBJ_BPTC))
		bad(&p, SS_ERR_FORMAT, "\"states\" belongs to objective bp2c, \"chunk_tokens\" to bptc");
	if (r->objective == OBJ_BP2C && !r->states)
		bad(&p, SS_ERR_FORMAT, "objective bp2c without \"states\"");
	if (r->objective == OBJ_BPTC && !r->chunk_tokens)
		bad(&p, SS_ERR_FORMAT, "objective bptc without \"chunk_tokens\"");
	if ((s = get_opt_str(&p, "loss_after"))) {
		if (r->objective != OBJ_LM)
			bad(&p, SS_ERR_FORMAT, "\"loss_after\" belongs to objective lm");
		else
			keep_or_copy(&p, &r->loss_after, s);
	}
	s = get_str(&p, "base_fingerprint");
	if (!s[0] || strlen(s) >= sizeof r->base_fingerprint)
		bad(&p, SS_ERR_FORMAT, "\"base_fingerprint\" is not a model fingerprint");
	else
		snprintf(r->base_fingerprint, sizeof r->base_fingerprint, "%s", s);
	r->epoch = get_int(&p, "epoch", 0, exact);
	/* -1: the start of the data; ss-train checks pos against the document */
	r->offset = get_int(&p, "offset", -1, exact);
	r->pos = get_int(&p, "pos", 0, exact);
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "birdie");
	if (b && r->objective != OBJ_BIRDIE)
		bad(&p, SS_ERR_FORMAT, "\"birdie\" belongs to objective birdie");
	else if (r->objective == OBJ_BIRDIE)
		get_birdie(&p, b, r);
	cJSON_Delete(o);
	return p.rc;
}

void train_state_free(run_state *r)
{
	free(r->data);
	free(r->states);
	free(r->chunk_tokens);
	free(r->loss_after);
	free(r->birdie_hist);
	r->data = r->states = r->chunk_tokens = r->loss_after = NULL;
	r->birdie_hist = NULL;
	r->birdie_nhist = 0;
}
